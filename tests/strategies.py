"""Hypothesis strategies for token streams: random and adversarial shapes over several alphabets.

Adversarial shapes are the ones that stress a suffix automaton: long runs (deep suffix-link
chains), periodic strings (long self-overlapping matches), Fibonacci words (the classical worst
case for clone counts) and edit-like streams (a passage repeated, then revised). Every shape is
drawn over abstract symbols ``0..size-1`` and mapped to token ids by an :class:`Alphabet`, so the
same shapes run against small ids and against ids near ``2**31 - 1``.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

TOKEN_LIMIT = 1 << 31


def _positive(_inst: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


@attrs.frozen
class Alphabet:
    """Symbols ``0..size-1`` mapped to the token ids ``base..base+size-1``."""

    size: int = attrs.field(validator=_positive)
    base: int = 0

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.base <= TOKEN_LIMIT - self.size:
            raise ValueError(f"ids {self.base}..{self.base + self.size - 1} leave [0, 2**31)")

    def ids(self, symbols: list[int]) -> list[int]:
        """Token ids of ``symbols``."""
        return [self.base + s for s in symbols]

    def __str__(self) -> str:
        return f"{self.size}@{self.base}" if self.base else str(self.size)


#: The alphabets the SAM properties run over: binary, small, medium, and ids at the top of range.
ALPHABETS = (Alphabet(2), Alphabet(5), Alphabet(31), Alphabet(31, base=TOKEN_LIMIT - 31))


@attrs.frozen
class StreamSpec:
    """Which stream shapes to draw, over which alphabet, and how long."""

    alphabet: Alphabet
    max_len: int = attrs.field(default=120, validator=_positive)
    kinds: tuple[str, ...] = ("random", "runs", "periodic", "fibonacci", "edits")

    def __attrs_post_init__(self) -> None:
        unknown = set(self.kinds) - set(_SHAPES)
        if unknown or not self.kinds:
            raise ValueError(f"unknown or empty stream kinds: {sorted(unknown)}")


@st.composite
def _random(draw: st.DrawFn, size: int, max_len: int) -> list[int]:
    # Draw the length first: plain st.lists mostly yields a handful of elements.
    n = draw(st.integers(0, max_len))
    return draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n))


@st.composite
def _runs(draw: st.DrawFn, size: int, max_len: int) -> list[int]:
    # Long runs of one symbol give suffix-link chains as deep as the run.
    n = draw(st.integers(0, max_len))
    out: list[int] = []
    while len(out) < n:
        out += [draw(st.integers(0, size - 1))] * draw(st.integers(1, 40))
    return out[:n]


@st.composite
def _periodic(draw: st.DrawFn, size: int, max_len: int) -> list[int]:
    # A short word repeated, with a few point mutations so matches break and resume.
    word = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=7))
    n = draw(st.integers(0, max_len))
    out = (word * (n // len(word) + 1))[:n]
    for _ in range(draw(st.integers(0, 3))):
        if out:
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, size - 1))
    return out


@st.composite
def _fibonacci(draw: st.DrawFn, size: int, max_len: int) -> list[int]:
    # Fibonacci word over two distinct symbols, after a random lead-in.
    a = draw(st.integers(0, size - 1))
    b = (a + draw(st.integers(1, max(1, size - 1)))) % size if size > 1 else a
    prev, word = [a], [a, b]
    while len(word) < max_len:
        prev, word = word, word + prev
    lead = draw(st.lists(st.integers(0, size - 1), max_size=5))
    return (lead + word)[: draw(st.integers(0, max_len))]


@st.composite
def _edits(draw: st.DrawFn, size: int, max_len: int) -> list[int]:
    # A passage, then revisions of the latest version (substitute / delete / insert), with short
    # filler between copies: the flow where the most recent revision is the one worth copying.
    sym = st.integers(0, size - 1)
    passage = draw(st.lists(sym, min_size=1, max_size=max(1, max_len // 4)))
    out = draw(st.lists(sym, max_size=4)) + passage
    for _ in range(draw(st.integers(1, 6))):
        passage = list(passage)
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(passage)))
            op = draw(st.sampled_from(["sub", "del", "ins"]))
            if op == "ins" or i == len(passage):
                passage.insert(i, draw(sym))
            elif op == "sub":
                passage[i] = draw(sym)
            elif len(passage) > 1:
                del passage[i]
        out += draw(st.lists(sym, max_size=4)) + passage
    return out[:max_len]


_SHAPES = {"random": _random, "runs": _runs, "periodic": _periodic, "fibonacci": _fibonacci,
           "edits": _edits}


def symbol_streams(spec: StreamSpec) -> st.SearchStrategy[list[int]]:
    """Streams of abstract symbols ``0..size-1`` in one of ``spec.kinds``' shapes."""
    size = spec.alphabet.size
    return st.one_of([_SHAPES[k](size, spec.max_len) for k in spec.kinds])


def token_streams(spec: StreamSpec) -> st.SearchStrategy[list[int]]:
    """Token-id streams: ``symbol_streams`` mapped through the spec's alphabet."""
    return symbol_streams(spec).map(spec.alphabet.ids)


def any_token_streams(max_len: int = 120) -> st.SearchStrategy[list[int]]:
    """Token streams of every shape over every alphabet in :data:`ALPHABETS`."""
    return st.one_of([token_streams(StreamSpec(a, max_len)) for a in ALPHABETS])


@st.composite
def distinct_edit_streams(draw: st.DrawFn, max_copies: int = 4,
                          max_passage: int = 30) -> list[int]:
    """Edit-like streams whose every token occurs at most ``max_copies`` times.

    A passage of distinct tokens is repeated with revisions; edits and fillers only ever use
    fresh ids. So any substring occurs at most ``max_copies`` times, which bounds how deep the
    automaton's suffix-link chains can be (the regime where drafts are provably most recent).
    Ids are spread over the whole range, the top included.
    """
    # An odd stride is invertible mod 2**31, so base + i*stride never repeats an id.
    base = draw(st.integers(0, TOKEN_LIMIT - 1))
    stride = draw(st.integers(0, (TOKEN_LIMIT >> 1) - 1)) * 2 + 1
    fresh = ((base + i * stride) % TOKEN_LIMIT for i in range(TOKEN_LIMIT))
    passage = [next(fresh) for _ in range(draw(st.integers(1, max_passage)))]
    out = [next(fresh) for _ in range(draw(st.integers(0, 3)))] + passage
    for _ in range(draw(st.integers(1, max_copies - 1))):
        passage = list(passage)
        for _ in range(draw(st.integers(0, 3))):
            i = draw(st.integers(0, len(passage)))
            op = draw(st.sampled_from(["sub", "del", "ins"]))
            if op == "ins" or i == len(passage):
                passage.insert(i, next(fresh))
            elif op == "sub":
                passage[i] = next(fresh)
            elif len(passage) > 1:
                del passage[i]
        out += [next(fresh) for _ in range(draw(st.integers(0, 3)))] + passage
    return out


@st.composite
def reference_and_query(draw: st.DrawFn, max_len: int = 80) -> tuple[list[int], list[int]]:
    """A reference document and a stream to feed a cursor, sharing an alphabet.

    The query splices slices of the reference between random tokens, so long matches, breaks
    and resumptions all happen.
    """
    alphabet = draw(st.sampled_from(ALPHABETS))
    ref = draw(token_streams(StreamSpec(alphabet, max_len)).filter(bool))
    query: list[int] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            i = draw(st.integers(0, len(ref) - 1))
            query += ref[i: i + draw(st.integers(1, 20))]
        else:
            query += alphabet.ids(draw(_random(alphabet.size, 6)))
    return ref, query[:max_len]
