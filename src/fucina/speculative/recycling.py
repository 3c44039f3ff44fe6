"""The Token-Recycling matrix: the cascade's fallback draft source (docs/design.md §6).

Verification computes a full logits row per position and the decoder keeps only the sampled
token; Token Recycling (Luo et al., 2024) keeps the row's top-K instead. One row per vocabulary
token holds the most recent top-K next-token candidates seen after it (``observe_topk``), kept
fresh by committed-bigram move-to-front (``observe``). A draft is the top-1 chain walk from the
last committed token.

Cold start is a sentinel fill rather than a seen-bitmap: a row whose first slot is the sentinel
has never been observed, and a walk that reaches it stops, so an unseen token drafts nothing.
Sentinels only ever occupy a row's tail, because both update paths write from the front.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fucina.errors import InvalidArgument, InvalidOption, InvalidToken
from fucina.speculative.source import Draft

__all__ = ["SENTINEL", "Recycling"]

#: Marks an empty slot; never a valid token id (the matrix is uint32, vocabularies are far smaller).
SENTINEL = 0xFFFFFFFF


class Recycling:
    """A ``vocab_size x k`` uint32 successor matrix implementing the DraftSource protocol.

    ``max_chain`` caps every draft regardless of the caller's budget: a chain walk compounds the
    per-hop error, so long walks mostly buy rejected verify rows.
    """

    wants_topk: bool = True

    def __init__(self, vocab_size: int, k: int = 8, max_chain: int = 8) -> None:
        if vocab_size < 1 or vocab_size >= SENTINEL:
            raise InvalidOption(f"vocab_size must be in [1, {SENTINEL}), got {vocab_size}")
        if k < 1:
            raise InvalidOption(f"k must be >= 1, got {k}")
        if max_chain < 1:
            raise InvalidOption(f"max_chain must be >= 1, got {max_chain}")
        self.vocab_size = vocab_size
        self.k = k
        self.max_chain = max_chain
        self._m = np.full((vocab_size, k), SENTINEL, dtype=np.uint32)
        # The last committed token, so a bigram split across two observe calls is still learned.
        self._last: int | None = None

    # -- DraftSource -------------------------------------------------------------------------

    def draft(self, context: Sequence[int], budget: int) -> Draft:
        """The chain walk of :meth:`suggest` as an offer of kind ``recycling`` (no match length)."""
        return Draft(tuple(self.suggest(context, budget)), kind="recycling")

    def truncate_pending(self, n: int) -> None:
        """Nothing to do: the matrix keeps no score of its drafts."""

    def suggest(self, context: Sequence[int], budget: int) -> list[int]:
        """Top-1 chain walk from ``context[-1]``: at most ``min(budget, max_chain)`` tokens.

        The walk stops at the first never-observed row, so an unseen last token drafts nothing.
        """
        if not len(context) or budget <= 0:
            return []
        tok = self._check(int(context[-1]))
        first = self._m[:, 0]
        out: list[int] = []
        for _ in range(min(budget, self.max_chain)):
            nxt = int(first[tok])
            if nxt == SENTINEL:
                break
            out.append(nxt)
            tok = nxt
        return out

    def observe(self, committed: Sequence[int]) -> None:
        """Move-to-front every committed bigram ``(a, b)``: ``b`` becomes row ``a``'s top-1.

        ``b`` is moved if already present in the row, otherwise inserted at the front and the
        last slot dropped. The first pair spans from the previously observed token.
        """
        toks = [int(t) for t in committed]
        if not toks:
            return
        self._check_many(toks)
        m = self._m
        prev = self._last
        for b in toks:
            if prev is not None:
                row = m[prev].tolist()
                if row[0] != b:
                    # Where b sits now (or the last slot, which falls off) is what gets removed.
                    pos = row.index(b) if b in row else len(row) - 1
                    del row[pos]
                    row.insert(0, b)
                    m[prev] = row
            prev = b
        self._last = prev

    def observe_topk(self, inputs: Sequence[int], topk: np.ndarray) -> None:
        """Overwrite row ``inputs[i]`` with ``topk[i]`` (best first), in order: later rows win.

        A ``topk`` wider than ``k`` is cut to its first ``k`` columns; a narrower one leaves the
        row's tail empty (sentinel).
        """
        ids = np.asarray(inputs, dtype=np.int64).reshape(-1)
        cand = np.asarray(topk)
        if cand.ndim != 2 or cand.shape[0] != ids.shape[0]:
            raise InvalidArgument(
                f"topk must be [len(inputs), K] = [{ids.shape[0]}, K], got shape {cand.shape}")
        if ids.size == 0:
            return
        self._check_array(ids)
        width = min(cand.shape[1], self.k)
        cand = cand[:, :width]
        if cand.size:
            self._check_array(cand)
        # Fancy assignment with repeated indices does not promise which write lands; keep each
        # input's last occurrence explicitly so the newest verify row wins.
        rev_unique, rev_first = np.unique(ids[::-1], return_index=True)
        last = len(ids) - 1 - rev_first
        self._m[rev_unique, :width] = cand[last]
        if width < self.k:
            self._m[rev_unique, width:] = SENTINEL

    # -- inspection ----------------------------------------------------------------------------

    def topk_of(self, token: int) -> np.ndarray:
        """Row ``token``'s candidates, best first, sentinels stripped (a copy)."""
        row = self._m[self._check(int(token))]
        return row[row != SENTINEL].copy()

    def nbytes(self) -> int:
        """Bytes held by the matrix."""
        return int(self._m.nbytes)

    # -- validation ------------------------------------------------------------------------------

    def _check(self, tok: int) -> int:
        if not 0 <= tok < self.vocab_size:
            raise InvalidToken(f"token id {tok} outside vocab [0, {self.vocab_size})")
        return tok

    def _check_many(self, toks: list[int]) -> None:
        lo, hi = min(toks), max(toks)
        if lo < 0 or hi >= self.vocab_size:
            self._check(lo if lo < 0 else hi)

    def _check_array(self, arr: np.ndarray) -> None:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.vocab_size:
            self._check(lo if lo < 0 else hi)
