"""The SAM integrity checker: every structural invariant of :mod:`fucina.speculative.sam`, by brute force.

For tests and the bench's audits (``SamIndex.check_integrity``): O(states + transitions), and
with ``deep`` O(sum of state lengths). It reads the index through :class:`SamColumns` only.
"""

from __future__ import annotations

from fucina.errors import SamIntegrityError
from fucina.speculative.sam_layout import KEY_SHIFT, TOKEN_LIMIT, SamColumns

__all__ = ["check_automaton"]


def check_automaton(cols: SamColumns, *, deep: bool = False) -> None:
    """Raise SamIntegrityError if ``cols`` (an unpoisoned index's :meth:`~SamIndex.columns`) break an
    invariant; see :meth:`fucina.speculative.sam.SamIndex.check_integrity` for what is checked."""

    def fail(msg: str) -> None:
        raise SamIntegrityError(msg)

    stream, ln, link, smp = cols.stream, cols.length, cols.link, cols.sample
    ftok, fto, ehead, etok, enext, extra = (cols.first_token, cols.first_target, cols.edge_head,
                                            cols.edge_token, cols.edge_next, cols.branching)
    n, states = len(stream), len(ln)
    if not all(len(col) == states for col in (link, smp, ftok, fto, ehead)):
        fail("per-state columns disagree in length")
    if len(etok) != len(enext) or len(etok) != len(extra):
        fail(f"edge pool holds {len(etok)} edges, the dict {len(extra)}")
    # Classical bounds (Blumer et al.): states <= 2n-1 for n >= 2, transitions <= 3n-4 for n >= 3.
    if states > (2 * n - 1 if n >= 2 else n + 1):
        fail(f"{states} states for {n} tokens")
    transitions = len(ftok) - ftok.count(-1) + len(extra)
    if transitions > (3 * n - 4 if n >= 3 else 2 * n - 1 if n else 0):
        fail(f"{transitions} transitions for {n} tokens")
    if ln[0] != 0 or link[0] != -1:
        fail("root must have len 0 and no suffix link")
    last, match = cols.last, cols.match
    if ln[last] != n:
        fail(f"last state has len {ln[last]}, stream has {n} tokens")
    if match != (link[last] if n else 0):
        fail("match state is not the suffix link of the last state")
    for v in range(1, states):
        lk = link[v]
        if not 0 <= lk < states or ln[lk] >= ln[v]:
            fail(f"state {v}: suffix link {lk} must be a shorter state")
        if ln[v] > n:
            fail(f"state {v}: len {ln[v]} exceeds the stream")
        e = smp[v]
        # A sample is an end of the state's longest string, and deferred: only last holds n-1.
        if not ln[v] - 1 <= e <= (n - 1 if v == last else n - 2):
            fail(f"state {v}: sample {e} cannot end its strings (len {ln[v]}, n {n})")

    def check_edge(v: int, c: int, w: int) -> None:
        if not 0 <= c < TOKEN_LIMIT or not 0 < w < states:
            fail(f"edge {v} -{c}-> {w} out of range")
        # v's longest string extended by c belongs to w: len[link[w]] <= len[v] < len[w].
        if not ln[link[w]] <= ln[v] < ln[w]:
            fail(f"edge {v} -{c}-> {w} breaks the len order")

    for v in range(states):
        if ftok[v] != -1:
            check_edge(v, ftok[v], fto[v])
    mask = TOKEN_LIMIT - 1
    for key, w in extra.items():
        v, c = key >> KEY_SHIFT, key & mask
        if not 0 <= v < states or ftok[v] in (-1, c):
            fail(f"dict edge {v} -{c}-> {w} duplicates or precedes the inline edge")
        check_edge(v, c, w)
    seen = 0
    for v in range(states):
        e = ehead[v]
        while e != -1:
            if not 0 <= e < len(etok) or seen >= len(etok):
                fail(f"state {v}: broken edge list")
            if ((v << KEY_SHIFT) | etok[e]) not in extra:
                fail(f"state {v}: edge list names token {etok[e]} absent from the dict")
            seen += 1
            e = enext[e]
    if seen != len(extra):
        fail(f"edge lists hold {seen} edges, the dict {len(extra)}")
    if not deep:
        return

    def walk(start: int, stop: int) -> int:
        v = 0
        for i in range(start, stop):
            c = stream[i]
            w = fto[v] if ftok[v] == c else extra.get((v << KEY_SHIFT) | c, -1)
            if w == -1:
                fail(f"substring {start}:{stop} of the stream is not accepted")
            v = w
        return v

    for v in range(1, states):
        e = smp[v]
        if walk(e - ln[v] + 1, e + 1) != v:
            fail(f"state {v}: sample {e} is not one of its end positions")
