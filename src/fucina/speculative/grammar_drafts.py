"""GrammarDrafts: the grammar's forced tokens as a draft source, in front of the usual cascade.

Where a grammar admits one continuation only — JSON punctuation, the next key of a schema, a
forced tool-call prefix — those tokens cost nothing to propose and the masked sampler accepts them
unless the model tokenizes the same bytes another way. So each step:

    forced = the tokens every admitted continuation starts with (``forced()``, often none)
    inner  = the cascade's own offer (conversation, references, ...)
    offer  = inner  if inner begins with forced (it says as much, and often more)
             forced otherwise, as kind ``grammar`` (priced by its own record; no match length)

The policy prices and verifies the offer like any other; the decoder's masked sampler decides
what is committed, so nothing here can change a token (obligation 6 of the decoder holds too).

Worked example: schema ``{"name": str, "age": int}`` after ``{"name": "Ada``: forced is empty
(the string may go on); after ``{"name": "Ada", `` forced is ``"age": `` as tokens
(``"``, ``age``, ``":``, `` ``): a 4-token draft the conversation index could not have made.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from fucina.results import SourceReport
from fucina.speculative.index import CascadeStats
from fucina.speculative.source import Draft, DraftSource, observe_fed

__all__ = ["GrammarDrafts"]

#: The kind (and the stats name) of a grammar-forced draft.
GRAMMAR_KIND = "grammar"


class GrammarDrafts:
    """Offers ``forced()`` ahead of ``inner``'s draft; forwards everything else to ``inner``."""

    def __init__(self, inner: DraftSource, forced: Callable[[], Sequence[int]]) -> None:
        self.inner = inner
        self.forced = forced
        self.drafted = 0
        self.accepted = 0
        self._pending: list[int] | None = None  # our own draft awaiting its score, else None

    @property
    def wants_topk(self) -> bool:
        return self.inner.wants_topk

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        offer = self.inner.draft(context, budget)
        forced = [int(t) for t in self.forced()][:budget]
        if not forced or tuple(offer.tokens[: len(forced)]) == tuple(forced):
            self._pending = None
            return offer
        self.inner.truncate_pending(0)  # the inner offer is not verified
        self._pending = forced
        return Draft(tuple(forced), None, GRAMMAR_KIND, None)

    def truncate_pending(self, n: int) -> None:
        if self._pending is None:
            self.inner.truncate_pending(n)
        elif n == 0:
            self._pending = None
        else:
            del self._pending[n:]

    def observe(self, committed: Sequence[int]) -> None:
        if self._pending is not None:
            # Verified draft tokens, and how many of them the committed stream agrees with.
            pending, self._pending = self._pending, None
            self.drafted += len(pending)
            for d, t in zip(pending, committed):
                if d != t:
                    break
                self.accepted += 1
        self.inner.observe(committed)

    def observe_fed(self, tokens: Sequence[int]) -> None:
        """Fed tokens (a prompt): nothing of ours is pending then; the inner source learns them as fed."""
        self._pending = None
        observe_fed(self.inner, tokens)

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        self.inner.observe_topk(inputs, topk)

    def stats(self) -> CascadeStats:
        """The inner sources' counts (when the inner source keeps any), then ``grammar``'s."""
        report = getattr(self.inner, "stats", None)
        inner = report().sources if callable(report) else ()
        return CascadeStats((*inner, SourceReport(name=GRAMMAR_KIND, drafted=self.drafted, accepted=self.accepted)))
