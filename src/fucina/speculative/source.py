"""The DraftSource protocol: what the decoder asks of any proposer (design record §1).

A source proposes a continuation of the committed stream. It must be deterministic given what it
has observed; the decoder verifies every drafted token, so a source can be wrong but never unsafe.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class DraftSource(Protocol):
    """Proposer interface, in the spirit of vLLM's proposers and transformers' CandidateGenerator.

    Call order the decoder guarantees: ``observe`` receives every committed token exactly once, in
    order (prompt first); ``suggest`` is called between observes and sees the same stream as
    ``context``. ``observe_topk`` is only called when ``wants_topk`` is true.

    Optional: ``confidence() -> int``, the match length behind the draft the next ``suggest`` would
    make (0 for none): the drafting policy prices a candidate by it (a source without it is priced
    by its own record alone). ``last_source: str | None``, the name of the sub-source that made the
    last draft (the policy learns acceptance per kind). ``truncate_pending(n)``, told how much of
    the last draft is verified (0: none, the policy declined it).
    """

    #: When true, the decoder computes the top-K of every verified row and calls ``observe_topk``.
    wants_topk: bool

    def suggest(self, context: Sequence[int], budget: int) -> Sequence[int]:
        """Draft up to ``budget`` tokens that continue ``context`` (the committed stream)."""
        ...

    def observe(self, committed: Sequence[int]) -> None:
        """Learn newly committed tokens (appended to the stream in this order)."""
        ...

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        """Learn ``topk[i]`` (shape ``[n, K]``, best first) as the likely successors of ``inputs[i]``.

        Only rows whose input token was committed are passed.
        """
        ...
