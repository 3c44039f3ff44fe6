"""Rewrite rules: the edits an answer keeps making to the text it copies, applied to later drafts.

An edit request breaks a copy in the same way again and again. A renamed parameter
(``self`` -> ``self_arg``) breaks it at every use of the name; an answer that writes a function one
indentation level out breaks it at every line. Each break ends a verify: the draft says ``.pos``
where the answer writes ``_arg``. The rewriter watches drafts break and the answer come back to
them, learns what the answer wrote instead, and rewrites later drafts alike.

At a break (a draft rejected at its token ``a``, verified or only offered: the committed stream
is the same either way) it notes

    L   the last token the draft and the answer agreed on (the break's left context)
    D   the draft from the break on (what the copy said next)
    C   the committed tokens from the break on (what the answer wrote instead)

and follows the answer for up to ``MAX_RUN`` tokens. Up to ``MAX_OPEN`` breaks are followed at
once: right after an edit the next draft comes from a short match elsewhere and often breaks too
before the answer is back on the copy (shlex's rename: the policy's bound 3.05x -> 3.31x). When C
rejoins D, ``C[i : i + CONFIRM] == D[j : j + CONFIRM]`` for the smallest ``i``, then ``j`` (both at
most ``WINDOW``), it has seen the edit

    key = (L, *D[:j], D[j])   ->   value = (L, *C[:i], D[j])

"after L, the copy's ``D[:j]`` is written ``C[:i]``": an insertion when ``j == 0``, a deletion when
``i == 0``, a replacement otherwise. The rejoin token ``D[j]`` is part of both sides, so a rule
only fires where the copy goes on as it did when it was seen. An edit seen twice is a rule (once
is any one-off change an answer makes). Two insertions of the same tokens after the same ``L``
before different tokens (a renamed ``self`` before ``.pos`` and before ``._``) make the general
rule ``(L,) -> (L, *C[:i])``: after L, whatever follows.

Every draft of a copying source (the SAMs, realign) is rewritten before it is offered: read with
the last committed token in front of it (a rule's ``L`` is often the token just committed), each
place that holds a rule's key gets the rule's value; the rest of the draft is unchanged. Rules
fire left to right, the longest key first, never on tokens a rule wrote, and an insertion is not
made where the draft already has it (the copy is the answer's own renamed text). A rule has one
credit when learned, gains one each time its tokens hold (up to ``MAX_CREDIT``) and loses two each
time they are rejected; out of credit it is forgotten. At most ``MAX_RULES`` are kept.

Worked example (tokens as text, ``|`` between them). The prompt quotes ``if| self|.pos|ix``; the
answer renames ``self``. The draft ``.pos|ix|:`` after `` self`` meets ``_arg``: ``L = " self"``,
``D = .pos|ix|:``, ``C = _arg``. The next step commits ``.pos|ix``, so ``C = _arg|.pos|ix``
rejoins D at ``i = 1, j = 0``: the edit `` self|.pos`` -> `` self|_arg|.pos``. The next time it is
seen it is a rule, and a later draft ``if| self|.pos|ix`` is offered as ``if| self|_arg|.pos|ix``.

Where a rewritten draft held, :meth:`Rewriter.as_copied` gives the committed tokens back as the copy had
them (written tokens out, replaced ones back in): the index feeds that to the references' cursors, so a
reference's match runs on past each renamed name and it keeps drafting the copy, where its match used to end at
the written token and a short match elsewhere drafted instead (on Qwen's shlex rename the policy's bound
2.40x -> 3.05x, BENCHMARKS.md "Predicted Outputs").

Losslessness never depends on a rule: a rewritten draft is a draft, verified like any other.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from fucina.speculative.source import held

__all__ = ["Rewriter", "WINDOW", "CONFIRM", "MAX_RUN", "MAX_OPEN", "MAX_RULES", "MAX_CREDIT"]

#: Most tokens of the copy a rule replaces and most tokens it writes instead.
WINDOW = 8
#: Tokens of the copy the answer must write after the edit before a rule is learned from it.
CONFIRM = 2
#: Committed tokens after a break that did not rejoin the draft before the rewriter gives up on it.
MAX_RUN = 16
#: Most breaks followed at once (a new one past this drops the oldest).
MAX_OPEN = 4
#: Most rules kept; a new one past this drops the oldest.
MAX_RULES = 256
#: Most credit a rule holds: a rule that held this often survives four rejections in a row.
MAX_CREDIT = 8


class Rewriter:
    """Learns rewrite rules from broken drafts (:meth:`observe`) and applies them (:meth:`rewrite`).

    Call order, as the index keeps it: :meth:`rewrite` (or :meth:`no_offer`) once a step for the
    step's offer, then :meth:`observe` with the committed slice.
    """

    def __init__(self) -> None:
        self._rules: dict[tuple[int, ...], tuple[int, ...]] = {}  # key -> value, oldest first
        self._credit: dict[tuple[int, ...], int] = {}  # per rule: 1 when learned, +1 a use that held, -2 one rejected
        self._seen: OrderedDict[tuple[int, ...], tuple[int, ...]] = OrderedDict()  # edits seen once, newest last
        self._by_first: dict[int, list[tuple[int, ...]]] = {}  # invariant: the keys of _rules by key[0], longest first
        self._last: int | None = None  # the last committed token
        self._offer: tuple[list[int], list[tuple[int, ...] | None]] | None = None  # tokens, the rule behind each
        self._copied: list[tuple[int, ...]] = []  # per token of the offer: the copy's tokens it stands for
        self._open: list[tuple[int, list[int], list[int]]] = []  # (L, D, C) of the breaks being followed, oldest first
        self.learned = 0  # rules learned so far (a statistic)
        self.forgotten = 0  # rules dropped because what they wrote was rejected (out of credit)

    @property
    def rules(self) -> dict[tuple[int, ...], tuple[int, ...]]:
        """The rules held now, key -> value (a copy)."""
        return dict(self._rules)

    def rewrite(self, tokens: Sequence[int], forks: Sequence[bool] | None = None, limit: int | None = None
                ) -> tuple[list[int], list[bool] | None, int]:
        """``tokens`` with the rules applied, at most ``limit`` of them: (tokens, their fork flags, where
        the first rewrite begins).

        The last committed token is read in front of the draft, so a rule whose ``L`` was just
        committed fires on the draft's first tokens. Written tokens are unique (fork flag False); the
        copy's keep theirs. The third value is ``len(tokens)`` when no rule fired. The result becomes
        the offer :meth:`observe` scores (also when nothing changed).
        """
        toks = [int(t) for t in tokens]
        out: list[int] = []
        why: list[tuple[int, ...] | None] = []
        copied: list[tuple[int, ...]] = []
        flags: list[bool] | None = [] if forks is not None else None
        first = len(toks)
        if not self._rules or self._last is None:
            toks = toks[:limit]
            self._offer = (toks, [None] * len(toks))
            self._copied = [(t,) for t in toks]
            return toks, None if forks is None else list(forks)[:limit], len(toks)
        seq = [self._last, *toks]  # seq[t] is toks[t - 1]

        def emit(token: int, rule: tuple[int, ...] | None, fork: bool, stands: tuple[int, ...]) -> None:
            out.append(token)
            why.append(rule)
            copied.append(stands)
            if flags is not None:
                flags.append(fork)

        def copy(t: int, rule: tuple[int, ...] | None = None, after: tuple[int, ...] = ()) -> None:
            # the draft's own seq[t], t >= 1; it stands for the copy's ``after`` (tokens a rule deleted) and itself
            emit(seq[t], rule, forks is not None and bool(forks[t - 1]), (*after, seq[t]))

        t = 0
        while t < len(seq):
            key = self._match(seq, t)
            if key is None:
                if t:
                    copy(t)
                t += 1
                continue
            # value = (L, *written, D[j]) (a general insertion: (L, *written)): L stays (seq[t]),
            # the written tokens go out, and the copy resumes at the key's last token (after L).
            if t:
                copy(t)
            first = min(first, len(out))
            replaced = tuple(key[1:-1]) if len(key) > 1 else ()  # D[:j], the copy's tokens the rule rewrites
            written = _written(key, self._rules[key])
            for n, w in enumerate(written):
                emit(w, key, False, replaced if n == 0 else ())
            if len(key) == 1:
                t += 1
                continue
            t += len(key) - 1
            # The token the copy resumes at is charged to the rule too: a rule that deletes
            # (nothing written) is judged by whether the answer goes on there.
            if t < len(seq):
                copy(t, key, () if written else replaced)  # a deletion: D[:j] stands behind D[j]
                t += 1
        if limit is not None:
            del out[limit:], why[limit:], copied[limit:]
            if flags is not None:
                del flags[limit:]
        self._offer = (out, why)
        self._copied = copied
        return out, flags, min(first, len(out))

    def as_copied(self, committed: Sequence[int]) -> list[int]:
        """``committed`` as the copy had it: where the last offer held, the tokens its rules wrote are
        put back to the copy's own (call before :meth:`observe`). A cursor fed this stays aligned
        with the text it copies across the answer's edits."""
        toks = [int(t) for t in committed]
        if self._offer is None:
            return toks
        a = held(self._offer[0], toks)
        out: list[int] = []
        for stands in self._copied[:a]:
            out.extend(stands)
        out.extend(toks[a:])
        return out

    def _match(self, seq: list[int], t: int) -> tuple[int, ...] | None:
        """The longest rule key that ``seq`` holds at ``t`` (not an insertion already made), or None."""
        for key in self._by_first.get(seq[t], ()):
            n = len(key)
            if tuple(seq[t: t + n]) != key:
                continue
            written = _written(key, self._rules[key])
            if n <= 2 and tuple(seq[t + 1: t + 1 + len(written)]) == written:
                continue  # an insertion the draft already has (the copy is the answer's own text)
            return key
        return None

    def observe(self, committed: Sequence[int]) -> None:
        """Score the last offer against ``committed``: forget a rule whose tokens were rejected, open
        a break, or follow the open one (and learn a rule when the answer rejoins the draft)."""
        toks = [int(t) for t in committed]
        if not toks:
            return
        offer, self._offer = self._offer, None
        last, self._last = self._last, toks[-1]
        broke = None  # (L, D, C) if the offer broke at a token of the copy
        if offer is not None:
            draft, why = offer
            a = held(draft, toks)
            for key in {why[n] for n in range(a) if why[n] is not None}:
                if key in self._credit:  # a rule's tokens held: its edit is this answer's
                    self._credit[key] = min(MAX_CREDIT, self._credit[key] + 1)
            if a < len(draft) and a < len(toks):
                if why[a] is not None:
                    self._rejected(why[a])
                else:
                    left = toks[a - 1] if a else last
                    if left is not None:
                        broke = (left, draft[a:], toks[a:])
        for _, _, c in self._open:
            c.extend(toks)  # following earlier breaks: their C goes on
        self._open = [b for b in self._open if not self._resolve(b)]
        if broke is not None and not self._resolve(broke):
            # A new break. The earlier ones may still rejoin: a draft made right after an edit (from
            # a short match) often breaks again before the answer is back on the copy.
            self._open = [*self._open, broke][-MAX_OPEN:]

    def no_offer(self) -> None:
        """This step offers nothing the rewriter saw (no draft, or one from a source it does not rewrite)."""
        self._offer = None
        self._copied = []

    def _resolve(self, brk: tuple[int, list[int], list[int]]) -> bool:
        """Learn from the break ``brk`` = (L, D, C) if C has rejoined D; True when it is settled
        (rejoined, or followed past ``MAX_RUN`` tokens)."""
        left, d, c = brk
        for i in range(0, min(len(c), WINDOW + 1)):
            for j in range(0, min(len(d), WINDOW + 1)):
                if i + CONFIRM <= len(c) and j + CONFIRM <= len(d) and c[i: i + CONFIRM] == d[j: j + CONFIRM]:
                    if i or j:  # (i, j) = (0, 0) would mean no break
                        self._observed((left, *d[:j], d[j]), (left, *c[:i], d[j]))
                    return True
        return len(c) > MAX_RUN

    def _observed(self, key: tuple[int, ...], value: tuple[int, ...]) -> None:
        """One sighting of an edit: a rule once it is seen twice (two insertions of the same tokens
        after the same L before different tokens make the general insertion rule)."""
        if key == value:
            return
        if self._seen.get(key) == value or self._rules.get(key) == value:
            self._learn(key, value)
            return
        self._seen[key] = value
        self._seen.move_to_end(key)
        if len(self._seen) > MAX_RULES:
            self._seen.popitem(last=False)
        if len(key) == 2:
            written = value[1:-1]
            if any(len(k) == 2 and k[0] == key[0] and k != key and v[1:-1] == written for k, v in self._seen.items()):
                self._learn((key[0],), (key[0], *written))

    def _learn(self, key: tuple[int, ...], value: tuple[int, ...]) -> None:
        """Hold the rule ``key -> value`` (dropping the oldest past ``MAX_RULES``)."""
        if key == value:
            return
        if key not in self._rules:
            if len(self._rules) >= MAX_RULES:
                self._drop(next(iter(self._rules)))  # the oldest
            keys = self._by_first.setdefault(key[0], [])
            keys.append(key)
            keys.sort(key=len, reverse=True)
        self._rules[key] = value
        self._credit[key] = 1
        self.learned += 1

    def _rejected(self, key: tuple[int, ...]) -> None:
        """A token ``key``'s rule wrote was rejected (here the answer kept the copy, or edited it
        otherwise): it costs the rule two credits, and a rule out of credit is forgotten."""
        if key not in self._rules:
            return
        self._credit[key] -= 2
        if self._credit[key] < 0:
            self._drop(key)
            self.forgotten += 1

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._rules[key], self._credit[key]
        self._by_first[key[0]].remove(key)


def _written(key: tuple[int, ...], value: tuple[int, ...]) -> tuple[int, ...]:
    """The tokens a rule writes: its value without L and (unless it is a general insertion) D[j]."""
    return value[1:] if len(key) == 1 else value[1:-1]
