"""The exact (batch-invariant) engine variant: llama-cpp-python built without llamafile's sgemm.

pip's wheel cache ignores ``CMAKE_ARGS``, so the variant is built with ``--no-cache-dir`` into its own
directory (``~/.cache/fucina/engine-exact-<version>``) and put first on ``PYTHONPATH`` by whoever wants
it; the standard build stays the default install. ``python -m fucina.engine build-exact`` builds it
(about 10 minutes on 2 cores, once), ``python -m fucina.engine path`` prints where it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ENGINE_VERSION = "0.3.36"
EXACT_CMAKE_ARGS = "-DGGML_LLAMAFILE=OFF"


def exact_engine_dir() -> Path:
    """``$FUCINA_EXACT_ENGINE`` or ``~/.cache/fucina/engine-exact-<version>``."""
    default = Path.home() / ".cache" / "fucina" / f"engine-exact-{ENGINE_VERSION}"
    return Path(os.environ.get("FUCINA_EXACT_ENGINE", default))


def exact_engine_ready() -> bool:
    return (exact_engine_dir() / "llama_cpp" / "__init__.py").is_file()


def exact_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment whose Python imports the exact engine first."""
    env = dict(os.environ if base is None else base)
    src = str(Path(__file__).resolve().parents[1])
    parts = [str(exact_engine_dir()), src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def build_exact(force: bool = False) -> Path:
    """Build the variant unless it is already there; atomic (a failed build leaves nothing)."""
    target = exact_engine_dir()
    if exact_engine_ready() and not force:
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ, CMAKE_ARGS=EXACT_CMAKE_ARGS)
    cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--target", str(tmp),
           f"llama-cpp-python=={ENGINE_VERSION}"]
    print(f"building the exact engine variant ({EXACT_CMAKE_ARGS}); ~10 min once: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, env=env, check=True)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["build-exact"]:
        print(build_exact(force="--force" in argv))
        return 0
    if argv[:1] == ["path"]:
        print(exact_engine_dir())
        return 0 if exact_engine_ready() else 1
    print("usage: python -m fucina.engine build-exact [--force] | path", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
