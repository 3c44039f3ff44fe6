"""Which llama.cpp engine this process runs: the patched batch-invariant build when it is there.

A support module beside the backends (it imports no ``llama_cpp`` at import time, so importing any
fucina layer stays free of the backend).

fucina's *exact* level needs an engine whose CPU kernels do not depend on the batch size (the patch
set in :mod:`fucina.engine.patches`, built once by ``python -m fucina.engine build``). That build
lives beside the user's standard ``llama-cpp-python``, in ``~/.cache/fucina/engine-patched-<version>``,
and :func:`activate` puts it first on ``sys.path`` before ``llama_cpp`` is imported, so the API, the
CLI and the server all get it by default. ``FUCINA_ENGINE`` chooses otherwise:

* ``auto`` (default): the patched build if it is built, else the installed ``llama-cpp-python``;
* ``stock``: the installed ``llama-cpp-python``, whatever is built;
* ``patched``: the patched build, and an :class:`~fucina.errors.EngineUnavailable` if it is missing;
* a directory: an engine built elsewhere (``pip install --target DIR``), e.g. a ``GGML_LLAMAFILE=OFF``
  build for comparison.

Nothing here imports ``llama_cpp``; once it is imported the choice is fixed for the process, and
:func:`active_engine` says which one it got.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from fucina.errors import EngineUnavailable

ENGINE_VERSION = "0.3.36"
#: Written into a finished build by ``python -m fucina.engine build``.
MANIFEST = "fucina-engine.json"


def cache_root() -> Path:
    """``$FUCINA_ENGINE_CACHE`` or ``~/.cache/fucina`` (apart from ``FUCINA_CACHE``, which benchmarks
    point at a fresh directory for cost tables without wanting to rebuild engines there)."""
    return Path(os.environ.get("FUCINA_ENGINE_CACHE", Path.home() / ".cache" / "fucina"))


def engine_dir(variant: str = "patched") -> Path:
    """Where the ``variant`` build lives (``patched`` or ``no-llamafile``)."""
    return cache_root() / f"engine-{variant}-{ENGINE_VERSION}"


def read_manifest(directory: Path) -> dict | None:
    """The build manifest of an engine directory, or None when it is not a finished fucina build."""
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not (directory / "llama_cpp" / "__init__.py").is_file():
        return None
    return data


@dataclass(frozen=True)
class ActiveEngine:
    #: "patched", "stock" or the variant named in a custom directory's manifest ("custom" if none).
    variant: str
    #: Directory of the ``llama_cpp`` package in use (None before it is imported).
    location: Path | None
    #: The patch-set id the build recorded ("" for stock).
    patch_set: str = ""
    #: The CMake arguments the build recorded (empty for stock and for builds of an older recipe).
    cmake_args: tuple[str, ...] = ()

    @property
    def batch_invariant_build(self) -> bool:
        """True for the patched build: its kernels are chosen by weight type, never by batch size."""
        return self.variant == "patched"

    @property
    def amx_left_out(self) -> bool:
        """True when the build recorded that ggml-cpu's AMX kernels were left out (fucina's recipe)."""
        return "-DGGML_AMX_INT8=OFF" in self.cmake_args

    def describe(self) -> str:
        """``patched (batch-invariant, patch set <id>, AMX kernels left out)``, ``stock`` or the custom
        build's variant (with the AMX choice when the build recorded one)."""
        amx = "AMX kernels left out" if self.amx_left_out else "older recipe: AMX not left out; rebuild"
        if self.batch_invariant_build:
            return f"patched (batch-invariant, patch set {self.patch_set}, {amx})"
        return self.variant if self.variant == "stock" else f"{self.variant} ({amx})"


def _choice() -> str:
    return os.environ.get("FUCINA_ENGINE", "auto").strip() or "auto"


def selected_dir() -> Path | None:
    """The engine directory ``FUCINA_ENGINE`` selects, or None for the installed package."""
    choice = _choice()
    if choice == "stock":
        return None
    if choice in ("auto", "patched"):
        d = engine_dir("patched")
        if read_manifest(d) is not None:
            return d
        if choice == "patched":
            raise EngineUnavailable(
                f"FUCINA_ENGINE=patched but no patched engine is built at {d}: "
                "run `python -m fucina.engine build` (about 10 minutes, once)", param="FUCINA_ENGINE")
        return None
    d = Path(choice).expanduser()
    if not (d / "llama_cpp" / "__init__.py").is_file():
        raise EngineUnavailable(f"FUCINA_ENGINE={choice}: no llama_cpp package in that directory",
                                param="FUCINA_ENGINE")
    return d


#: A selection that could not be honoured, raised by :func:`require_selected` when a model loads
#: (``import fucina`` itself never fails, so ``python -m fucina.engine build`` can always run).
_selection_error: EngineUnavailable | None = None


def activate() -> None:
    """Put the selected engine first on ``sys.path``; a no-op once ``llama_cpp`` is imported."""
    global _selection_error
    if "llama_cpp" in sys.modules:
        return
    try:
        d = selected_dir()
    except EngineUnavailable as exc:
        _selection_error = exc
        return
    _selection_error = None
    if d is not None and str(d) not in sys.path:
        sys.path.insert(0, str(d))


def require_selected() -> None:
    """Raise the :class:`EngineUnavailable` that :func:`activate` met, if any (called before a load)."""
    if _selection_error is not None:
        raise _selection_error


def active_engine() -> ActiveEngine:
    """The engine this process imported (imports ``llama_cpp`` through :func:`activate` if needed)."""
    activate()
    import llama_cpp

    location = Path(llama_cpp.__file__).resolve().parent
    manifest = read_manifest(location.parent)
    if manifest is None:
        return ActiveEngine("stock", location)
    return ActiveEngine(str(manifest.get("variant", "custom")), location, str(manifest.get("patch_set", "")),
                        tuple(str(a) for a in manifest.get("cmake_args", ())))


def exact_by_default() -> bool:
    """The default of every ``exact`` switch (API, CLI, load options): on exactly on the patched engine."""
    return active_engine().batch_invariant_build


def env_for(variant: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a subprocess on ``variant``: "auto", "patched", "stock" or a built variant's name."""
    env = dict(os.environ if base is None else base)
    env["FUCINA_ENGINE"] = variant if variant in ("auto", "patched", "stock") else str(engine_dir(variant))
    return env
