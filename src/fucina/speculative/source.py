"""The draft contract: what the decoder asks of any proposer, and what a proposer offers (docs/design.md §3.2).

A source proposes a continuation of the committed stream as one :class:`Draft` per step. It must
be deterministic given what it has observed; the decoder verifies every drafted token, so a
source can be wrong but never unsafe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Draft", "DraftSource", "NO_DRAFT", "held"]


@dataclass(frozen=True)
class Draft:
    """One step's offer from a draft source: the tokens and what the policy prices them by.

    ``tokens``: the proposed continuation of the committed stream (may be empty: nothing to offer).
    ``confidence``: the match length behind the draft (0 for none); None when the source cannot say,
    so the policy prices the draft by the source's own scored record alone.
    ``kind``: the name of the (sub-)source that made it — ``conversation``, ``ref0``...,
    ``cross-request``, ``resume``, ``recycling`` — the policy learns acceptance per kind; None
    for a source without names.
    ``forks``: per draft token, whether the text it was copied from continued several ways there
    (see :func:`~fucina.speculative.sam.draft_forks`); None when the source has no such flags.
    Sequences are normalized to tuples of ``int`` / ``bool``.
    """

    tokens: tuple[int, ...] = ()
    confidence: int | None = None
    kind: str | None = None
    forks: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        if self.forks is not None:
            object.__setattr__(self, "forks", tuple(bool(f) for f in self.forks))


#: The empty offer (nothing to draft, confidence unknown).
NO_DRAFT = Draft()


def held(draft: Sequence[int], committed: Sequence[int]) -> int:
    """How far a draft held: the length of its common prefix with the tokens committed there
    (its accepted tokens, when it was verified). E.g. ``held([5, 6, 7], [5, 6, 9, 1]) == 2``."""
    n = 0
    for d, c in zip(draft, committed):
        if d != c:
            break
        n += 1
    return n


@runtime_checkable
class DraftSource(Protocol):
    """Proposer interface, in the spirit of vLLM's proposers and transformers' CandidateGenerator.

    Call order the decoder guarantees: ``observe`` receives every committed token exactly once, in
    order (prompt first); ``draft`` is called between observes and sees the same stream as
    ``context``; after it, ``truncate_pending(k)`` when the decoder verifies only ``k`` of the
    draft's tokens (0: none, the policy declined it). ``observe_topk`` is only called when
    ``wants_topk`` is true.
    """

    #: When true, the decoder computes the top-K of every verified row and calls ``observe_topk``.
    wants_topk: bool

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        """Offer up to ``budget`` tokens that continue ``context`` (the committed stream)."""
        ...

    def truncate_pending(self, n: int) -> None:
        """Only the first ``n`` tokens of the last draft are verified (0: none); a source that scores
        its own drafts counts only those. A no-op for sources that keep no score."""
        ...

    def observe(self, committed: Sequence[int]) -> None:
        """Learn newly committed tokens (appended to the stream in this order)."""
        ...

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        """Learn ``topk[i]`` (shape ``[n, K]``, best first) as the likely successors of ``inputs[i]``.

        Only rows whose input token was committed are passed.
        """
        ...
