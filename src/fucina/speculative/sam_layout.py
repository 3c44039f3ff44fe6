"""The SAM's storage layout, shared by the index (:mod:`fucina.speculative.sam`) and its checker.

Token ids are validated here before anything is mutated; branching transitions are keyed
``(state << KEY_SHIFT) | token`` in one dict; :class:`SamColumns` names the per-state columns.
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence, overload

from fucina.errors import InvalidToken

__all__ = ["KEY_SHIFT", "TOKEN_LIMIT", "SamColumns", "StreamView", "check_token", "check_tokens"]

#: Token ids must satisfy ``0 <= id < TOKEN_LIMIT`` (they are packed into 31 bits of a dict key).
TOKEN_LIMIT = 1 << 31
#: A branching transition's dict key is ``(state << KEY_SHIFT) | token``.
KEY_SHIFT = 31


@dataclass(frozen=True)
class SamColumns:
    """An index's storage, shared not copied: read-only by contract (writing corrupts the index).

    Per state ``v``: ``length[v]``, ``link[v]`` (suffix link, -1 at the root), ``sample[v]`` (one
    end position), ``first_token[v]`` / ``first_target[v]`` (the inline first transition, token -1
    for none) and ``edge_head[v]`` (the head of its list of dict-held edges in the pool
    ``edge_token`` / ``edge_next``). ``branching`` maps ``(v << KEY_SHIFT) | token`` to the target.
    """

    stream: array
    length: array
    link: array
    sample: array
    first_token: array
    first_target: array
    edge_head: array
    edge_token: array
    edge_next: array
    branching: dict[int, int]
    #: The state of the whole stream, and the class of the matched suffix (``link[last]``).
    last: int
    match: int


class StreamView(Sequence[int]):
    """Read-only live view of an index's token stream (no copy, no buffer export)."""

    __slots__ = ("_a",)

    def __init__(self, a: array) -> None:
        self._a = a

    def __len__(self) -> int:
        return len(self._a)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return self._a[i].tolist()
        return self._a[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._a)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self._a) and all(x == y for x, y in zip(self._a, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"StreamView({self._a.tolist()!r})"


def check_token(token: object) -> int:
    """One token id as an ``int`` in ``[0, TOKEN_LIMIT)``; raises InvalidToken otherwise."""
    try:
        tok = operator.index(token)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidToken(f"token id must be an integer, got {type(token).__name__}") from None
    if not 0 <= tok < TOKEN_LIMIT:
        raise InvalidToken(f"token id {tok} outside [0, 2**31)")
    return tok


def check_tokens(tokens: Iterable[int], limit: int = TOKEN_LIMIT) -> array:
    """Materialize and validate a batch (ints in ``[0, limit)``) before anything is mutated.

    Raises InvalidToken naming the first bad id. Shared with the cross-request index, whose limit
    keeps its document separator out of every stream.
    """
    bound = "2**31" if limit == TOKEN_LIMIT else str(limit)
    if isinstance(tokens, (str, bytes, bytearray, memoryview)):
        raise InvalidToken(f"token ids must be integers, got {type(tokens).__name__}")
    try:
        buf = array("q", tokens)
    except (TypeError, OverflowError) as exc:
        raise InvalidToken(f"token ids must be integers in [0, {bound}): {exc}") from None
    if buf and (min(buf) < 0 or max(buf) >= limit):
        bad = next(t for t in buf if not 0 <= t < limit)
        raise InvalidToken(f"token id {bad} outside [0, {bound})")
    return buf
