"""fucina: lossless, training-free, draft-model-free speculative decoding for local GGUF models.

Start with :class:`LLM`::

    import fucina
    llm = fucina.LLM("smollm2-135m")
    print(llm.complete("def add(a, b):", max_tokens=64, temperature=0).text)

The layers below it stay public for those who need them: :mod:`fucina.catalog` (models),
:mod:`fucina.backends`, :mod:`fucina.sampling`, :mod:`fucina.speculative`, :mod:`fucina.chat`.
"""

from fucina.api import LLM
from fucina.errors import ContextLengthExceeded, FucinaError, InvalidOption
from fucina.results import Completion, CompletionChunk, SpeculationReport, Timings, Usage

__version__ = "0.1.0"

__all__ = ["LLM", "Completion", "CompletionChunk", "ContextLengthExceeded", "FucinaError", "InvalidOption",
           "SpeculationReport", "Timings", "Usage", "__version__"]
