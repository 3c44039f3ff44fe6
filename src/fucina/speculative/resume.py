"""The ``resume`` draft source: continue a copy past the one token that broke it.

When a copied line gets one new word, the conversation SAM loses its match at that word (the
stream never held it) and matches nothing for a step, although the text the copy came from goes
on right after the word it replaced. :class:`Resume` remembers, as each committed slice arrives,
where the conversation's last match before the final token would have continued; when that final
token ends every match, the draft is the stream from two tokens past that occurrence: the text
after the token the previous match was followed by.

It reads the conversation SAM of the cascade (:mod:`fucina.speculative.index`) and owns nothing
else; the cascade offers its draft when no SAM matches, priced by the policy as its own kind.
"""

from __future__ import annotations

from typing import Sequence

from fucina.speculative.sam import SamIndex

__all__ = ["Resume"]


class Resume:
    """Where a copy the last committed token broke would go on, over the conversation SAM ``conv``."""

    name = "resume"

    def __init__(self, conv: SamIndex) -> None:
        self._conv = conv
        # A stream position, or -1: set when the last observed token ended every conversation
        # match; invariant: -1 whenever the conversation matches.
        self._at = -1

    @property
    def ready(self) -> bool:
        """True when the last committed token was never seen and a broken copy can be resumed."""
        return self._at >= 0

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` (validated ids) to the conversation SAM, noting where a copy broken by the
        last of them would go on."""
        conv = self._conv
        if len(tokens) > 1:
            conv.extend_many(tokens[:-1])
        before = conv.occurrence()  # -1 without a match
        conv.extend_many(tokens[-1:])
        self._at = before + 2 if before >= 0 and not conv.match_len() else -1

    def draft(self, budget: int) -> list[int]:
        """Up to ``budget`` tokens of the resumed copy (empty unless :attr:`ready`)."""
        if self._at < 0:
            return []
        return list(self._conv.tokens[self._at: self._at + budget])
