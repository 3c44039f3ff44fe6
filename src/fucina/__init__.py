"""fucina: lossless, training-free, draft-model-free speculative decoding for local GGUF models."""

from fucina.errors import FucinaError

__version__ = "0.1.0"

__all__ = ["FucinaError", "__version__"]
