"""The ``realign`` draft source: pick a broken copy up again in the text it was copying.

A copy (of the prompt, or of a reference such as a client's prediction) breaks where the answer
changes the text: a renamed identifier (``chunks`` -> ``chunks_arg``: one token inserted), a replaced
word, a dropped argument. Right after the break the SAMs match the new words, and often somewhere
else: the answer's own earlier ``chunks_arg``, or the instruction that asked for it, each followed by
other text. The copy itself goes on a token or two later in the text it came from. Realign remembers
where the copy broke — position ``p`` of the copied stream ``S``: ``S[p]`` was drafted, another token
was committed — and drafts the copy from where the answer rejoined it:

    c     = the last committed token
    q     = the nearest position in S[p : p + WINDOW] holding c (S as it was when the copy broke:
            the conversation's stream grows with the answer, which ends with c)
    draft = S[q + 1:]   if there is such a q (the answer replaced or dropped S[p:q] and rejoined at c)
          = S[p:]       otherwise (the tokens since the break were inserted before S[p])

Worked example, ``S = def f(self, chunks):`` copied as ``def f(self, chunks_arg):``. The draft ``):``
after ``chunks`` meets ``_arg``: a break, ``p`` = the position of ``)``. ``_arg`` is nowhere near
``p``, so the draft is ``S[p:] = ):`` ... and is accepted, where the SAMs would have drafted what
followed an earlier ``chunks_arg``. A replacement ``foo`` -> ``bar`` costs one step more: ``bar`` is
not near ``p``, the draft ``S[p:] = foo )`` is rejected at once and its correction is ``)``; now
``c = ) = S[p + 1]``, and the draft ``S[p + 2:]`` goes on with the copy.

Invariant: armed (``ready``) only between a break and ``MAX_RUN`` committed tokens after it that
did not rejoin the copy (its own drafts rejected at their first token do not rejoin it); disarmed
as soon as an offer's every token is committed (the copy goes on and the SAMs have it again).

Whether its draft or the SAMs' goes out is a contest (:meth:`Realign.contest`): after an edit an
answer may as well be writing new text, where a short SAM match drafts better. Both drafts of a step
realign could draft are scored against what is committed, whichever went out (losslessness makes
the committed stream the same either way), and realign drafts while it leads: the steps its draft
held further, less the steps the SAMs' did, clipped to ``MAX_LEAD`` (ties go to the SAMs; where
they have no draft, realign drafts unless it trails). A sign, not a length: the draft not offered
is only seen to hold as far as the committed slice reaches. The policy prices its draft as a match as
long as the copy that broke, up to ``MAX_CONFIDENCE``, and learns its acceptance as its own kind.
"""

from __future__ import annotations

from typing import Sequence

from fucina.speculative.source import held

__all__ = ["Realign", "WINDOW", "MAX_RUN", "MAX_LEAD", "MAX_CONFIDENCE"]

#: How far past the break the answer may rejoin the copy (tokens of ``S`` replaced or dropped).
WINDOW = 8
#: Committed tokens after a break that did not rejoin the copy before realign gives up on it.
MAX_RUN = 16
#: Most a realigned draft is priced as: an 8-token match, however long the copy that broke. Priced as
#: a 1-token match, the policy declined most of its drafts on the Predicted Outputs edits; priced by
#: the whole copy's length, it verified them whole on synthetic edits where they broke soon (the
#: model-free replays, BENCHMARKS.md "Predicted Outputs").
MAX_CONFIDENCE = 8
#: Bound on realign's lead over the SAMs: so many steps its draft held less far than theirs give
#: them the step back, however long realign led.
MAX_LEAD = 4


class Realign:
    """Where the last broken copy goes on; fed each step's offer and each committed slice."""

    name = "realign"

    def __init__(self) -> None:
        self._offer: tuple[Sequence[int], int, tuple[int, ...], int, int] | None = None
        self._stream: Sequence[int] | None = None  # the copied stream, while armed
        self._p = 0  # position in it where the copy broke
        self._end = 0  # its length when the broken offer was made: the window stops there
        self._run = 0  # tokens committed since the break
        self._copied = 0  # length of the copy that broke: the offer's match and the tokens it held
        self._last = -1  # last committed token
        self._at = -1  # where the draft begins (start()), derived in observe: the only place its inputs change
        self._contest: tuple[list[int], list[int]] | None = None  # this step's (realign's, the SAMs') drafts
        self._lead = 0

    @property
    def ready(self) -> bool:
        """True while a broken copy can be picked up again."""
        return self._stream is not None

    @property
    def stream(self) -> Sequence[int] | None:
        """The stream the broken copy was read from (None when not armed)."""
        return self._stream

    def takes(self, sams_draft: bool) -> bool:
        """Whether :meth:`contest` would hand realign the step (``sams_draft``: whether the SAMs have
        a draft); for pricing before the draft is made."""
        if self._stream is None or self.start() >= len(self._stream):
            return False
        return self._lead > 0 or (not sams_draft and self._lead == 0)

    def contest(self, budget: int, sams: Sequence[int] | None) -> list[int]:
        """Realign's draft if it takes the step from the SAMs' draft ``sams`` (None: they have none),
        else []; either way both are scored against the next committed slice."""
        tokens = self.draft(budget)
        self._contest = (tokens, list(sams or ())) if tokens else None
        return tokens if tokens and self.takes(sams is not None) else []

    @property
    def confidence(self) -> int:
        """What the policy prices a realigned draft by: the length of the copy that broke, at least 1
        and at most ``MAX_CONFIDENCE`` (0 when not armed)."""
        return max(1, min(self._copied, MAX_CONFIDENCE)) if self._stream is not None else 0

    def offered(self, stream: Sequence[int] | None, start: int, tokens: Sequence[int], match: int = 0) -> None:
        """Note this step's offer: ``tokens == stream[start:start + len(tokens)]``; ``stream`` None for
        an offer read from no stream the index can name (recycling, the cross-request snapshot).
        ``offered(None, 0, ())`` starts a step: it also forgets the last step's unsettled contest."""
        self._offer = None if stream is None else (stream, start, tuple(tokens), len(stream), match)
        if stream is None:
            self._contest = None

    def observe(self, committed: Sequence[int]) -> None:
        """Score the noted offer against ``committed``: arm at a break, disarm when it all held."""
        offer, self._offer = self._offer, None
        if not committed:
            return
        if self._contest is not None:
            mine, theirs = self._contest
            self._contest = None
            diff = held(mine, committed) - held(theirs, committed)
            self._lead = max(-MAX_LEAD, min(MAX_LEAD, self._lead + (diff > 0) - (diff < 0)))
        self._last = int(committed[-1])
        a = 0 if offer is None else held(offer[2], committed)
        if offer is None or (not a and a < len(offer[2])):
            # No offer, or a guess failed at once (realign's own: still the same break): not a new
            # break, the answer only went on without rejoining the copy.
            if self._stream is not None:
                self._run += len(committed)
                if self._run > MAX_RUN:
                    self._stream = None
        elif a < len(offer[2]) and a < len(committed):  # the copy broke at stream[start + a]
            stream, start, _, end, match = offer
            self._stream, self._p, self._run, self._end = stream, start + a, len(committed) - a, end
            self._copied = match + a
        else:  # every committed token was the copy's (or the offer ran out): the SAMs go on with it
            self._stream = None
        self._at = self._find_start()

    def start(self) -> int:
        """Where the draft begins in :attr:`stream` (see the module docstring); -1 when not armed."""
        return self._at

    def _find_start(self) -> int:
        stream = self._stream
        if stream is None:
            return -1
        # A live stream (the conversation's) holds the committed tokens too: they end with c itself.
        end = min(self._p + WINDOW, self._end)
        for q in range(self._p, end):
            if stream[q] == self._last:
                return q + 1
        return self._p

    def draft(self, budget: int) -> list[int]:
        """Up to ``budget`` tokens of the copy picked up again (empty unless :attr:`ready`)."""
        at = self.start()
        if at < 0 or budget <= 0:
            return []
        return [int(t) for t in self._stream[at: at + budget]]
