"""fucina: lossless, training-free, draft-model-free speculative decoding for local GGUF models.

Start with :class:`LLM`::

    import fucina
    llm = fucina.LLM("smollm2-135m")
    print(llm.complete("def add(a, b):", max_tokens=64, temperature=0).text)

The layers below it stay public for those who need them: :mod:`fucina.catalog` (models),
:mod:`fucina.backends`, :mod:`fucina.sampling`, :mod:`fucina.speculative`, :mod:`fucina.chat`.
"""

from fucina.engine_selection import activate as _activate

_activate()  # before anything imports llama_cpp: the patched engine when it is built (fucina.engine_selection)

from fucina.api import LLM  # noqa: E402
from fucina.errors import ContextLengthExceeded, FucinaError, InvalidOption  # noqa: E402
from fucina.results import (Completion, CompletionChunk, SpeculationReport, Timings, TokenLogprob,  # noqa: E402
                            TopLogprob, Usage)

__version__ = "0.1.0"

__all__ = ["LLM", "Completion", "CompletionChunk", "ContextLengthExceeded", "FucinaError", "InvalidOption",
           "SpeculationReport", "Timings", "TokenLogprob", "TopLogprob", "Usage", "__version__"]
