"""SamCursor: matching statistics of an external stream against a frozen SAM (a reference document).

``SamCursor`` tracks matching statistics of an external stream against a frozen index. A
cursor holds a state id meaning "the class of my matched suffix". An append can split
exactly such a class (a clone takes the shorter strings, which gain the new end position)
and only the index's own match state gets the fix-up: an external cursor left on the old
state would describe strings it no longer matches, report a wrong length, and draft from
transitions and samples that miss the new text. Rather than re-aim every cursor on every
append, cursors require ``freeze()``. A cursor drafts from its class's sample, so the stamp
guarantees of :mod:`fucina.speculative.sam` (Sample discipline, Recency) hold for it too; it
drafts nothing only when every occurrence of its matched suffix ends the reference (no sample
but ``last``'s names the final position).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from fucina.errors import SamNotFrozen
from fucina.speculative.sam import SamIndex, draft_forks
from fucina.speculative.sam_layout import KEY_SHIFT, TOKEN_LIMIT, check_token, check_tokens

__all__ = ["SamCursor"]


class SamCursor:
    """Matching statistics of an external stream against a frozen index (a reference document).

    Obtain one with ``SamIndex.cursor()``. Any number of cursors may share one frozen index.
    The cursor sits on the class of its matched suffix and drafts from that class's sample, so
    the stamping guarantees of :mod:`fucina.speculative.sam` carry over: while the fed stream keeps
    agreeing with the drafted continuation (and the reference goes on), the occurrence moves
    forward by at least one token per fed token.
    """

    __slots__ = ("_index", "_cols", "_state", "_mlen")

    def __init__(self, index: SamIndex) -> None:
        if not index.frozen:
            raise SamNotFrozen("freeze() the index before running external cursors over it")
        self._index = index
        self._cols = index.columns()  # a frozen index never changes them
        self._state = 0
        self._mlen = 0

    def reset(self) -> None:
        """Forget the fed stream."""
        self._state, self._mlen = 0, 0

    def feed(self, token: int) -> None:
        """Advance over one token of the external stream."""
        self._feed((check_token(token),))

    def feed_many(self, tokens: Iterable[int], *, limit: int = TOKEN_LIMIT) -> None:
        """Advance over every token of ``tokens``; validates the whole batch first (ids in
        ``[0, limit)``: the cross-request cursor passes its separator, so one pass checks both)."""
        buf = check_tokens(tokens, limit=limit)
        if buf:
            self._feed(buf)

    def _feed(self, toks: Sequence[int]) -> None:
        if self._index.poisoned:
            return
        cols = self._cols
        ln, link, ftok, fto, get = cols.length, cols.link, cols.first_token, cols.first_target, cols.branching.get
        v, mlen = self._state, self._mlen
        for c in toks:
            # Shorten the match (up the suffix links) until it can be extended by c.
            while True:
                ft = ftok[v]
                w = fto[v] if ft == c else (get((v << KEY_SHIFT) | c, -1) if ft != -1 else -1)
                if w != -1:
                    v = w
                    mlen += 1
                    break
                if v == 0:
                    mlen = 0
                    break
                v = link[v]
                mlen = ln[v]
        self._state, self._mlen = v, mlen

    def match_len(self) -> int:
        """Length of the longest suffix of the fed stream occurring anywhere in the reference."""
        return 0 if self._index.poisoned else self._mlen

    def occurrence(self) -> int:
        """End position in the reference of the occurrence ``draft()`` continues from, or -1."""
        if self._index.poisoned or not self._mlen:
            return -1
        return self._cols.sample[self._state]

    def draft(self, max_len: int) -> list[int]:
        """Up to ``max_len`` reference tokens following the chosen occurrence of the match.

        Empty only when every occurrence of the matched suffix ends the reference.
        """
        occ = self.occurrence()
        if occ < 0 or max_len <= 0:
            return []
        return self._cols.stream[occ + 1: occ + 1 + max_len].tolist()

    def forks(self, draft: Sequence[int]) -> list[bool]:
        """:func:`draft_forks` of ``draft`` read from the matched suffix in the reference."""
        if self._index.poisoned or not self._mlen:
            return [False] * len(draft)
        return draft_forks(self._index, self._state, draft)
