"""Online suffix automaton (SAM) over token streams: the conversation and reference indexes (docs/design.md §5).

Why a SAM: amortized O(1) online extension, an exact and unbounded longest-suffix-match length
(which drives the cascade's draft budget), and the same structure doubles as a frozen index over
reference documents read through external cursors.

Construction
    The textbook online construction (Blumer et al.; states carry ``len``, ``link`` and outgoing
    transitions). Transitions live in flat ``array('i')`` columns plus ONE dict: every state
    keeps its first outgoing transition inline (two int32 columns), further ones go to a global
    dict keyed by ``(state << 31) | token``. Most states of a text-like stream have out-
    degree 1 (all but ``last`` have at least one), so the dict holds the minority of "branching"
    edges. A per-state singly-linked edge list mirrors the dict's entries, because cloning a
    state must enumerate them.

Self-match exclusion (exact)
    ``match_len()`` must be the longest suffix of the stream with an occurrence ending strictly
    before the last position. After appending ``t_i``, the suffix link of the new state is by
    definition the class of the longest suffix of ``t_0..t_i`` whose end-position set contains
    another position, i.e. an earlier one. So the "cursor-before-extend" cursor (docs/design.md §5.2)
    is exactly ``link[last]``: the walk that looks for a transition on ``t_i`` runs over the
    automaton of ``t_0..t_{i-1}`` (a found transition proves a prior occurrence) and the clone
    fix-up is the construction's own ``link[cur] = clone``. ``match_len() == len[link[last]]``.

Sample discipline
    Each state stores one occurrence end ``sample[v]`` from its end-position set. Writes: a new
    state gets its own position; a clone inherits its source's sample (every end of the source
    is an end of the clone); every recency refresh ("stamp") is *deferred one step*: position
    ``j-1`` is stamped only while appending ``t_j``. So at query time no state but ``last``
    holds the current position, ``draft()`` continues from ``sample[link[last]]``, always a prior
    occurrence, and a frozen index never advertises an occurrence with nothing after it (except
    in ``last``'s class, whose only occurrence ends the stream).

Recency guarantee (what is maintained, precisely)
    Exactly most recent means the maximum of an end-position set. Each append adds the new
    position to every class on the new state's suffix-link chain, so keeping every maximum
    exact costs the chain depth per append (quadratic on ``aaaa...``). Instead, while appending
    ``t_j``, position ``j-1`` is stamped on the classes the construction visits anyway (its walk
    from the whole prefix up to ``w_j``, the longest suffix of ``t_0..t_{j-1}`` already followed
    by ``t_j``; the whole chain when ``t_j`` is new) and on at most ``REFRESH_DEPTH`` further
    classes above ``w_j``. Stamps never decrease. With ``s`` the matched suffix of
    ``t_0..t_{n-1}`` and ``e`` the occurrence ``draft()`` continues from:

    * validity: ``e < n-1``, ``s`` ends at ``e``, and the draft is ``stream[e+1 : e+1+max_len]``;
    * (R2) stamps: ``e >= j-1`` for every ``j <= n-1`` such that ``s`` ends at ``j-1`` and, in
      ``t_0..t_{j-1}``, either ``t_j`` was new, or ``|s| > |w_j|``, or the suffixes with lengths
      in ``[|s|, |w_j|]`` show at most ``REFRESH_DEPTH + 1`` distinct occurrence counts (one per
      class). In particular ``e`` is at least every earlier position where ``s`` was the match;
    * (R1) follow, a corollary: if the previous draft's first token came true, ``e`` is at
      least the previous occurrence plus one (that occurrence was stamped while its class was in
      reach, so the class of its one-token extension was in reach of the next stamp). An exactly
      most recent occurrence therefore stays exact for as long as its drafts are confirmed;
    * exactness: ``e`` is the most recent prior occurrence ``m`` whenever R2's condition holds
      at ``j = m+1``. It always holds when no token occurs more than ``REFRESH_DEPTH + 1`` times
      (the counts are bounded by the occurrence count of ``t_{j-1}``), e.g. an edit-like stream
      where a passage is repeated and revised, which the tests pin. Text and code rarely come
      close: it takes a suffix with more than ``REFRESH_DEPTH`` nested, ever more frequent
      suffixes at the point where the walk stops.
      Deliberately deep inputs (``a b a a b ... a^m b`` with ``m > REFRESH_DEPTH + 1``, then a
      restart) draft from an older, still valid occurrence; a test builds one.

Frozen indexes and cursors
    ``SamCursor`` (:mod:`fucina.speculative.sam_cursor`) tracks matching statistics of an external
    stream against a frozen index; it drafts from its class's sample, so the guarantees above hold
    for it too.

Poisoning
    If an append fails part-way (a ``MemoryError``, an interrupt, an injected fault), the
    automaton may be half-updated. The index then enters degraded mode for good: ``match_len()``
    is 0 and ``draft()`` is ``[]``, ``stats().poisoned`` is true, later appends only record the
    stream; the original exception propagates. Invalid ids raise ``InvalidToken`` before any
    mutation and do not poison.

Memory and speed
    ``nbytes()`` counts the arrays (``sys.getsizeof``, so over-allocation included), the dict
    table, every key object and every distinct value object it references. The branching-edge
    dict dominates: each entry costs a 24-byte table entry plus index slack plus a boxed 32-byte
    int key (and a boxed target shared by the edges into one state) plus 8 bytes of pool
    mirror, against 8 bytes for an inline edge; the six per-state int32 columns come next. Pure
    Python pays an interpreter dispatch per array access, so build speed is bounded by the
    bytecode count of the extension loop. ``build()`` and ``extend()`` share that one loop, so
    their results are identical by construction.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from fucina.errors import SamFrozen
from fucina.speculative.sam_check import check_automaton
from fucina.speculative.sam_layout import KEY_SHIFT, TOKEN_LIMIT, SamColumns, StreamView, check_token, check_tokens

if TYPE_CHECKING:
    from fucina.speculative.sam_cursor import SamCursor

__all__ = ["REFRESH_DEPTH", "TOKEN_LIMIT", "SamIndex", "SamStats", "check_tokens", "draft_forks"]

#: Classes stamped per append beyond the end of the construction's walk (module doc, Recency).
REFRESH_DEPTH = 16


@dataclass(frozen=True)
class SamStats:
    """A snapshot of an index's size."""

    tokens: int
    states: int
    transitions: int
    nbytes: int
    poisoned: bool

    def __str__(self) -> str:
        per_tok = self.nbytes / self.tokens if self.tokens else 0.0
        state = " POISONED" if self.poisoned else ""
        return (f"SAM {self.tokens} tokens, {self.states} states, {self.transitions} transitions, "
                f"{self.nbytes} B ({per_tok:.1f} B/token){state}")


def draft_forks(index: "SamIndex", state: int, draft: Sequence[int]) -> list[bool]:
    """Which tokens of ``draft``, read from ``state`` of ``index``, were one continuation among several.

    ``forks[j]`` is True when the text indexed so far continued the string read before
    ``draft[j]`` (the matched suffix + ``draft[:j]``) in more than one way, i.e. that state has
    more than one outgoing transition. A token with one recorded continuation is the text's only
    answer; a forked one is a guess among several, and at short matches is accepted about a third as
    often (the policy prices the two apart). Invariant used: a state's first
    transition is inline and every further one is on its edge list, so "more than one" is
    ``ehead[v] != -1``, O(1) per token.

    E.g. over [1, 2, 3, 1, 2, 4, 1]: the match [1] continues as [2] only, then [1, 2] continues as
    3 or 4, so draft [2, 4] from the state of [1] gives [False, True]. A token with no transition
    (not a continuation of the state) and every token after it count as forked.
    """
    ehead = index._ehead
    out: list[bool] = []
    v = state
    for c in draft:
        if v < 0:
            out.append(True)
            continue
        out.append(ehead[v] != -1)
        v = _transition(index, v, c)
    return out


def _transition(index: "SamIndex", v: int, c: int) -> int:
    """Target of state ``v``'s ``c``-transition, or -1. (SamCursor._feed inlines the same lookup:
    it is the per-token hot loop.)"""
    ft = index._ftok[v]
    if ft == c:
        return index._fto[v]
    return index._extra.get((v << KEY_SHIFT) | c, -1) if ft != -1 else -1


class SamIndex:
    """An online suffix automaton over a token stream; see the module docstring for semantics."""

    __slots__ = ("_stream", "_len", "_link", "_sample", "_ftok", "_fto", "_ehead", "_etok",
                 "_enext", "_extra", "_last", "_match", "_frozen", "_poisoned",
                 "_fault_hook")

    def __init__(self) -> None:
        self._stream = array("i")
        # Per-state columns; state 0 is the root (the empty string).
        self._len = array("i", [0])
        self._link = array("i", [-1])
        self._sample = array("i", [-1])
        self._ftok = array("i", [-1])  # first outgoing transition: token, or -1 for none
        self._fto = array("i", [0])  # ... and its target
        self._ehead = array("i", [-1])  # head of the state's list of dict-held edges
        # Edge pool mirroring the dict (token, next edge of the same state).
        self._etok = array("i")
        self._enext = array("i")
        self._extra: dict[int, int] = {}
        self._last = 0
        self._match = 0  # link[last]: the class of the matched suffix
        self._frozen = False
        self._poisoned = False
        #: Test seam: called with the position being appended, mid-update; raising poisons.
        self._fault_hook: Callable[[int], None] | None = None

    @classmethod
    def build(cls, tokens: Iterable[int]) -> SamIndex:
        """Index ``tokens`` in one call; identical to ``extend()`` per token."""
        index = cls()
        index.extend_many(tokens)
        return index

    # ---- appending ----------------------------------------------------------------------------

    def extend(self, token: int) -> None:
        """Append one token id (``0 <= id < 2**31``); amortized O(1).

        Raises SamFrozen on a frozen index and InvalidToken on a bad id, both before mutating.
        """
        if self._frozen:
            raise SamFrozen("cannot extend a frozen SAM index")
        self._ingest((check_token(token),))

    def extend_many(self, tokens: Iterable[int]) -> None:
        """Append every token of ``tokens`` in order; validates the whole batch first."""
        if self._frozen:
            raise SamFrozen("cannot extend a frozen SAM index")
        buf = check_tokens(tokens)
        if buf:
            self._ingest(buf)

    def _ingest(self, toks: Sequence[int]) -> None:
        if self._poisoned:
            self._stream.fromlist(list(toks))
            return
        # Everything the loop touches is a local: attribute lookups would double its cost.
        stream, ln, link, smp = self._stream, self._len, self._link, self._sample
        ftok, fto, ehead, etok, enext = self._ftok, self._fto, self._ehead, self._etok, self._enext
        extra = self._extra
        get = extra.get
        push, ln_push, link_push, smp_push = stream.append, ln.append, link.append, smp.append
        ftok_push, fto_push, ehead_push = ftok.append, fto.append, ehead.append
        etok_push, enext_push = etok.append, enext.append
        last, match = self._last, self._match
        hook = self._fault_hook
        depth = REFRESH_DEPTH
        n = len(stream)
        try:
            for c in toks:
                prev = n - 1
                push(c)
                cur = len(ln)
                ln_push(ln[last] + 1)
                link_push(0)
                smp_push(n)
                ftok_push(-1)
                fto_push(0)
                ehead_push(-1)
                # Walk the suffix chain of the old text, adding c-transitions to cur.
                p = last
                q = -1
                while p != -1:
                    smp[p] = prev  # p's class ends at n-1 (deferred refresh, free here)
                    ft = ftok[p]
                    if ft == c:
                        q = fto[p]
                        break
                    if ft == -1:
                        ftok[p] = c
                        fto[p] = cur
                    else:
                        key = (p << KEY_SHIFT) | c
                        q = get(key, -1)
                        if q != -1:
                            break
                        extra[key] = cur
                        etok_push(c)
                        enext_push(ehead[p])
                        ehead[p] = len(etok) - 1
                    p = link[p]
                if p > 0:
                    # Carry the deferred refresh a bounded way past the walk's end (R2).
                    v, d = link[p], depth
                    while v > 0 and d:
                        smp[v] = prev
                        v = link[v]
                        d -= 1
                if hook is not None:
                    hook(n)
                if p == -1:
                    u = 0
                elif ln[q] == ln[p] + 1:
                    u = q
                else:
                    u = self._split(p, q, c)
                link[cur] = u
                last = cur
                match = u
                n += 1
        except BaseException:
            self._poisoned = True
            raise
        finally:
            self._last, self._match = last, match

    def _split(self, p: int, q: int, c: int) -> int:
        """Clone ``q`` for the strings of length ``len[p]+1``, which now also end at the new
        position; redirect the ``c``-edges of ``p``'s chain from ``q`` to the clone."""
        ln, link, smp, ftok, fto = self._len, self._link, self._sample, self._ftok, self._fto
        ehead, etok, enext, extra = self._ehead, self._etok, self._enext, self._extra
        u = len(ln)
        ln.append(ln[p] + 1)
        link.append(link[q])
        smp.append(smp[q])  # every end of q is an end of the clone: still a prior occurrence
        ftok.append(ftok[q])
        fto.append(fto[q])
        head, e = -1, ehead[q]
        qk, uk = q << KEY_SHIFT, u << KEY_SHIFT
        while e != -1:
            t = etok[e]
            extra[uk | t] = extra[qk | t]
            etok.append(t)
            enext.append(head)
            head = len(etok) - 1
            e = enext[e]
        ehead.append(head)
        while p != -1:
            if ftok[p] == c:
                if fto[p] != q:
                    break
                fto[p] = u
            else:
                key = (p << KEY_SHIFT) | c
                if extra[key] != q:
                    break
                extra[key] = u
            p = link[p]
        link[q] = u
        return u

    # ---- queries ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Tokens appended so far."""
        return len(self._stream)

    @property
    def tokens(self) -> Sequence[int]:
        """The indexed stream, as a read-only live view."""
        return StreamView(self._stream)

    def match_len(self) -> int:
        """Length of the longest suffix of the stream that also ends strictly before its end."""
        if self._poisoned:
            return 0
        return self._len[self._match]

    def occurrence(self) -> int:
        """End position of the prior occurrence ``draft()`` continues from; -1 when none."""
        if self._poisoned or not self._match:
            return -1
        # Nothing is stamped between appends, so the sample is still the one of append time.
        return self._sample[self._match]

    def draft(self, max_len: int) -> list[int]:
        """Up to ``max_len`` tokens that followed the chosen prior occurrence of the match."""
        occ = self.occurrence()
        if occ < 0 or max_len <= 0:
            return []
        return self._stream[occ + 1: occ + 1 + max_len].tolist()

    def forks(self, draft: Sequence[int]) -> list[bool]:
        """:func:`draft_forks` of ``draft`` read from the matched suffix (all False when no match)."""
        if self._poisoned or not self._match:
            return [False] * len(draft)
        return draft_forks(self, self._match, draft)

    def longest_prefix(self, tokens: Sequence[int]) -> int:
        """Length of the longest prefix of ``tokens`` occurring anywhere in the indexed stream.

        A walk from the root: every path from the root spells a substring, so the walk stops at the
        first token with no transition. E.g. over [1, 2, 3, 1, 2]: [1, 2, 3, 9] -> 3, [2, 1] -> 1
        ([2] occurs, [2, 1] does not), [7] -> 0. O(len(tokens)); the replay's retrieval ceiling is
        built on it.
        """
        if self._poisoned:
            return 0
        v, n = 0, 0
        for c in tokens:
            w = _transition(self, v, c)
            if w == -1:
                break
            v, n = w, n + 1
        return n

    # ---- freezing -----------------------------------------------------------------------------

    def freeze(self) -> None:
        """Make the index read-only for good, so external cursors can run over it."""
        self._frozen = True

    @property
    def frozen(self) -> bool:
        """True once ``freeze()`` was called."""
        return self._frozen

    def cursor(self) -> SamCursor:
        """A fresh external cursor; raises SamNotFrozen unless the index is frozen."""
        from fucina.speculative.sam_cursor import SamCursor  # that module reads this one

        return SamCursor(self)

    # ---- health and size ----------------------------------------------------------------------

    @property
    def poisoned(self) -> bool:
        """True once an append failed part-way; the index then serves no drafts."""
        return self._poisoned

    def num_states(self) -> int:
        """Automaton states, the root included."""
        return len(self._len)

    def num_transitions(self) -> int:
        """Outgoing transitions over all states."""
        return len(self._ftok) - self._ftok.count(-1) + len(self._extra)

    def nbytes(self) -> int:
        """Bytes held by the index: arrays, the dict table, and the objects the dict references.

        O(transitions): it walks the dict to size its key and (shared) value objects.
        """
        arrays = (self._stream, self._len, self._link, self._sample, self._ftok, self._fto,
                  self._ehead, self._etok, self._enext)
        total = sum(map(sys.getsizeof, arrays)) + sys.getsizeof(self._extra)
        total += sum(map(sys.getsizeof, self._extra))
        values = {id(v): v for v in self._extra.values()}
        total += sum(map(sys.getsizeof, values.values()))
        return total

    def stats(self) -> SamStats:
        """Size snapshot (O(transitions), see ``nbytes``)."""
        return SamStats(len(self._stream), self.num_states(), self.num_transitions(),
                        self.nbytes(), self._poisoned)

    def check_integrity(self, deep: bool = False) -> None:
        """Raise SamIntegrityError if a structural invariant is violated.

        Checks the classical size bounds, suffix-link lengths and acyclicity, transition/length
        consistency, the edge-list mirror of the dict, sample ranges and the self-match state.
        ``deep`` also proves every sample (and the draft occurrence) is an end position of its
        state by re-reading the stream through the automaton: O(sum of state lengths), for tests.
        A poisoned index passes trivially: it serves nothing.
        """
        if not self._poisoned:
            check_automaton(self.columns(), deep=deep)

    def columns(self) -> SamColumns:
        """The automaton's storage, read-only by contract (for the integrity checker and cursors)."""
        return SamColumns(self._stream, self._len, self._link, self._sample, self._ftok, self._fto,
                          self._ehead, self._etok, self._enext, self._extra, self._last, self._match)
