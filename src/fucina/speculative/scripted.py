"""Scripted draft sources: the oracle (a perfect source) and adversaries for the proofs.

``perfect`` drafts the true continuation of a known stream (the bench's ceiling); ``garbage``
drafts tokens that never match it; ``alternating`` flips between the two per suggest; ``partial``
drafts a correct prefix of varying length and then a wrong token. A correct decoder commits the
same stream whatever these propose.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fucina.errors import InvalidOption
from fucina.speculative.source import Draft

MODES = ("perfect", "garbage", "alternating", "partial")


class ScriptedSource:
    """Drafts from a known ``stream`` (prompt + expected output). Implements DraftSource.

    Its offers carry tokens only (no confidence, kind or forks): the policy prices them by their
    scored record. :meth:`suggest` is the script (the tokens a :meth:`draft` offers).
    """

    wants_topk = False

    def __init__(self, stream: Sequence[int], vocab_size: int, mode: str = "perfect", seed: int = 0) -> None:
        if mode not in MODES:
            raise InvalidOption(f"mode must be one of {MODES}, got {mode!r}")
        self.stream = [int(t) for t in stream]
        self.vocab_size = vocab_size
        self.mode = mode
        self._rng = np.random.default_rng(seed)
        self._calls = 0
        self.observed: list[int] = []
        self.topk_rows_seen = 0

    def _wrong(self, truth: int | None) -> int:
        t = int(self._rng.integers(0, self.vocab_size))
        return (t + 1) % self.vocab_size if t == truth else t

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        return Draft(tuple(self.suggest(context, budget)))

    def truncate_pending(self, n: int) -> None:
        """Nothing to do: a script keeps no score of its drafts."""

    def suggest(self, context: Sequence[int], budget: int) -> list[int]:
        """The scripted tokens for the step after ``context`` (one call advances the script)."""
        self._calls += 1
        n = len(context)
        truth = self.stream[n : n + budget]
        if self.mode == "perfect" or (self.mode == "alternating" and self._calls % 2):
            return list(truth)
        if self.mode == "partial" and truth:
            keep = int(self._rng.integers(0, len(truth)))
            return truth[:keep] + [self._wrong(truth[keep])] + [self._wrong(None) for _ in range(budget - keep - 1)]
        padded = truth + [None] * (budget - len(truth))
        return [self._wrong(t) for t in padded]

    def observe(self, committed: Sequence[int]) -> None:
        self.observed.extend(int(t) for t in committed)

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        self.topk_rows_seen += len(inputs)
