"""TurnGate: the draft-source wrapper that keeps an index in step with a chat turn's trimmed transcript.

:class:`fucina.chat.Conversation` puts one between its decoder and its
:class:`~fucina.speculative.index.SpeculationIndex`, so the conversation SAM holds exactly the
committed stream a turn keeps, whatever the decoder committed past the turn's stop.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fucina.speculative.source import Draft, DraftSource, observe_fed

__all__ = ["TurnGate"]

#: The offer of a closed turn: nothing, and nothing to price.
_CLOSED_TURN = Draft(confidence=0)


class TurnGate:
    """A DraftSource wrapper that keeps the index exactly in step with the trimmed transcript.

    A chat turn ends at its first stop id; anything committed after it (an overshoot) and, with
    ``keep_stop=False``, the stop marker itself are discarded by the turn trim. The gate makes
    sure the wrapped index never learns those tokens:

    * ``observe`` forwards only the slice up to (and, with ``keep_stop``, including) the first stop
      id of the armed turn, and calls ``truncate_pending`` on the wrapped source so its per-source
      acceptance scores the draft against exactly that slice: draft tokens past the stop could
      never have been committed, so they count neither as drafted nor as rejected;
    * ``observe_topk`` drops the rows whose input token lies at or after the stop (those rows
      predict what follows the stop);
    * after the stop the gate is closed: it forwards nothing and drafts nothing until ``open``.

    Protocol: ``open()`` before feeding prompt tokens (they pass unfiltered, whatever ids they
    contain), ``arm(stop_ids)`` before generating. Our decoders already stop exactly at stop ids,
    so in a healthy run the gate filters nothing; it is the safety layer that makes "the index
    equals the committed stream" hold whatever decoder sits in front of it.
    """

    _PASS, _ARMED, _CLOSED = "pass", "armed", "closed"

    def __init__(self, inner: DraftSource, *, keep_stop: bool = True) -> None:
        self.inner = inner
        self.keep_stop = keep_stop
        self._stops: frozenset[int] = frozenset()
        self._state = self._PASS
        #: Tokens withheld from the index so far (observability for tests and stats).
        self.dropped = 0

    @property
    def wants_topk(self) -> bool:
        return bool(self.inner.wants_topk)

    @property
    def state(self) -> str:
        """``"pass"`` (feeding), ``"armed"`` (generating) or ``"closed"`` (past a stop)."""
        return self._state

    def open(self) -> None:
        """Let everything through (prompt feeding); drop any draft a cut-off step left pending."""
        self.inner.truncate_pending(0)
        self._state = self._PASS

    def arm(self, stop_ids: Sequence[int]) -> None:
        """Start filtering a generation that ends at the first token in ``stop_ids``."""
        self._stops = frozenset(int(t) for t in stop_ids)
        self._state = self._ARMED

    # -- DraftSource ------------------------------------------------------------------------------

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        """The wrapped source's offer as it made it (confidence, kind and forks included); after the
        stop, nothing (confidence 0): nothing may follow a stop in this turn."""
        if self._state == self._CLOSED:
            return _CLOSED_TURN
        return self.inner.draft(context, budget)

    def observe(self, committed: Sequence[int]) -> None:
        toks = [int(t) for t in committed]
        if not toks:
            return
        if self._state == self._PASS:
            self.inner.observe(toks)
            return
        keep = 0 if self._state == self._CLOSED else len(toks)
        if self._state == self._ARMED:
            for i, t in enumerate(toks):
                if t in self._stops:
                    keep = i + 1 if self.keep_stop else i
                    self._state = self._CLOSED
                    break
        if self._state == self._CLOSED:
            # The draft is scored against what the index learns, never against the trimmed tail.
            self.inner.truncate_pending(keep)
        self.dropped += len(toks) - keep
        if keep:
            self.inner.observe(toks[:keep])

    def observe_fed(self, tokens: Sequence[int]) -> None:
        """Fed tokens (a prompt) go through while the gate is open; otherwise as :meth:`observe`."""
        if self._state == self._PASS:
            observe_fed(self.inner, tokens)
        else:
            self.observe(tokens)

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        if self._state == self._CLOSED:
            return
        n = len(inputs)
        if self._state == self._ARMED:
            # inputs[0] was committed before this step (a prompt token may legitimately be a stop
            # id); inputs[i >= 1] are this step's tokens, and a row whose input is a stop or later
            # predicts past the end of the turn.
            for i in range(1, len(inputs)):
                if int(inputs[i]) in self._stops:
                    n = i
                    break
        if n:
            self.inner.observe_topk(list(inputs[:n]), topk[:n])

    def truncate_pending(self, n: int) -> None:
        """The decoder verifies only ``n`` tokens of the last draft (0: none); forwarded to the index."""
        self.inner.truncate_pending(n)
