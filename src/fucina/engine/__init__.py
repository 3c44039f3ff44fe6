"""The engine variants fucina builds: the patched batch-invariant llama.cpp, and an older recipe.

``python -m fucina.engine build`` builds the patched engine (:mod:`fucina.engine.patches`) into the
cache; from then on fucina runs on it by default (:mod:`fucina.engine_selection`) and its speculative
output is bitwise plain decoding's. ``python -m fucina.engine status`` says what is built and in use.
"""

from fucina.engine_selection import ENGINE_VERSION, active_engine, engine_dir, env_for
from fucina.engine.build import VARIANTS, EngineBuildError, build, engine_ready
from fucina.engine.patches import PATCHES, EnginePatchError, SourcePatch, apply_patches, patch_set_id

__all__ = [
    "ENGINE_VERSION", "PATCHES", "VARIANTS", "EngineBuildError", "EnginePatchError", "SourcePatch",
    "active_engine", "apply_patches", "build", "engine_dir", "engine_ready", "env_for", "exact_env",
    "exact_engine_ready", "patch_set_id",
]


def exact_engine_ready() -> bool:
    """True when the patched (batch-invariant) engine is built with today's patch set."""
    return engine_ready("patched")


def exact_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment whose Python runs on the patched engine (for subprocesses: tests, benchmarks)."""
    return env_for("patched", base)
