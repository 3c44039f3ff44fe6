"""BreakPoints: the tokens this answer broke a copy right after, so the token after one is priced apart.

An edit breaks a copy at the same places again and again: a renamed parameter breaks it right after
every use of the old name (the draft says ``.pos`` where the answer writes ``_arg``), in each of the
name's spellings (`` alo``, ``alo``, ``(self``). The policy prices a draft token by the match behind it
and its class; a long match says nothing about a rename ahead, so a 63-token draft is verified through
the next use of the name and all but its first dozen tokens are lost. Marking the tokens that follow
a break point lets the policy verify up to the name, where the correction (``_arg``) comes free.

Per token ``L`` it counts, over the scored draft tokens that followed ``L`` (in the draft, or as the
last committed token before it), how many were rejected. ``L`` is a break point while

    breaks(L) >= 1   and   breaks(L) >= RATIO * trials(L)

so a common token after which copies seldom break (a newline, a comma) drops out as drafts hold
through it. A draft token after a break point is not flagged when it is what the answer wrote there
instead at a break: the draft already carries the edit (a rewrite rule wrote it, or the copy is the
answer's own renamed text). Worked example: a draft ``if self .pos`` rejected at ``.pos`` (the answer
wrote ``_arg``) makes `` self`` a break point (1 break in 1 trial); the next draft ``x = self .lineno``
has its ``.lineno`` flagged, ``x = self _arg .lineno`` nothing, and a draft token after `` self`` that
later holds counts as a trial with no break.

Counts are this generation's own (a token's identity is the answer's text, never shared across
calls). Losslessness never depends on them: they only move the verified length.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["BreakPoints", "RATIO"]

#: Least share of the draft tokens after L that were rejected for L to be a break point. A renamed
#: name breaks every copy through it (share 1) until a rewrite rule learns the rename, after which the
#: drafts hold through it and its share falls; common tokens break a few copies in a hundred.
RATIO = 0.25


class BreakPoints:
    """Break and trial counts per left token; fed by the policy's scoring, read when it prices a draft."""

    __slots__ = ("_counts", "_instead", "_broke")

    def __init__(self) -> None:
        self._counts: dict[int, list[int]] = {}  # invariant: L -> [breaks, trials], 0 <= breaks <= trials
        self._instead: dict[int, set[int]] = {}  # L -> the tokens the answer wrote after L at its breaks
        self._broke = False  # whether any break was counted

    def scored(self, left: int | None, hit: bool, committed: int) -> None:
        """A draft token that followed ``left`` (None: nothing before it) was accepted (``hit``) or
        rejected; ``committed`` is the token the answer wrote there."""
        if left is None:
            return
        c = self._counts.get(left)
        if c is None:
            c = self._counts[left] = [0, 0]
        c[1] += 1
        if not hit:
            c[0] += 1
            self._instead.setdefault(left, set()).add(committed)
            self._broke = True

    def is_break_point(self, token: int | None) -> bool:
        c = self._counts.get(token) if token is not None else None
        return c is not None and c[0] >= 1 and c[0] >= RATIO * c[1]

    def flags(self, last: int | None, draft: Sequence[int]) -> list[bool] | None:
        """One flag per draft token: whether the token before it (``last`` for the first) is a break
        point; None when no token is (the common case: nothing to price apart)."""
        if not self._broke:
            return None
        is_bp, instead = self.is_break_point, self._instead
        out = [is_bp(left) and token not in instead[left] for left, token in zip([last, *draft[:-1]], draft)]
        return out if any(out) else None
