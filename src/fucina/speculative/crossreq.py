"""Per-tenant cross-request index: draft from a tenant's previous requests.

Bounded store
    A :class:`CrossRequestIndex` holds one tenant's finished requests (prompt + output token
    ids), oldest first, with at most ``max_tokens`` tokens in total. A document longer than the
    bound keeps its last ``max_tokens`` tokens (the end of a request is what the next one most
    likely repeats); then the oldest documents are evicted until the total fits.

Snapshots protect running requests
    Drafting runs over a :class:`CrossSnapshot`: one frozen :class:`SamIndex` over the documents
    joined by :data:`SEPARATOR`. A snapshot owns its SAM and nothing ever mutates it, so an
    ``add()`` that evicts documents only drops the index's reference to the cached snapshot; a
    request that still holds the old snapshot (through its cursor) keeps drafting from exactly
    the documents it started with. The SAM is rebuilt lazily, in ``snapshot()`` after a change,
    so consecutive requests with no ``add()`` between them share one build (O(tokens)).

Where the indexes live
    This module is the index only: what the decoder drafts from. Keeping one index per tenant
    (API-key hashing) and the on-disk file format belong to the server, in
    :mod:`fucina.server.tenants` and :mod:`fucina.server.index_files`.

Thread safety
    Generation is single-threaded, but a stats reader may run beside the worker: every public
    method takes the owner's lock. Snapshots and their cursors need none (immutable SAM; a
    cursor belongs to one request).
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

from fucina.errors import InvalidOption, SamIntegrityError
from fucina.speculative.sam import SamIndex, check_tokens
from fucina.speculative.sam_cursor import SamCursor

__all__ = ["SEPARATOR", "CrossCursor", "CrossRequestIndex", "CrossRequestStore", "CrossSnapshot",
           "check_max_tokens"]

#: Joins documents in the SAM. No vocabulary reaches 2**31 - 1, and it is rejected as input.
SEPARATOR = (1 << 31) - 1
_U32 = next(t for t in "IL" if array(t).itemsize == 4)  # 'I' on every mainstream platform


def _ids(tokens: Iterable[int]) -> array:
    """Validate a batch (ints in ``[0, SEPARATOR)``) before anything is mutated."""
    return array(_U32, check_tokens(tokens, limit=SEPARATOR))


def check_max_tokens(max_tokens: object) -> int:
    """``max_tokens`` as the bound of an index: an int >= 1, else InvalidOption."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidOption(f"max_tokens must be an int >= 1, got {max_tokens!r}",
                            param="max_tokens")
    return max_tokens


class CrossCursor:
    """Same duck type as SamCursor (``feed_many``, ``match_len``, ``draft``) over a snapshot.

    ``match_len()`` never counts a match spanning two documents: fed tokens are validated to
    lie below SEPARATOR, so a matched string never contains one, and a separator-free string
    occurs only inside single documents. ``draft()`` is cut before the first separator, so it
    continues one occurrence up to the end of its document at most.
    """

    __slots__ = ("_cursor", "snapshot")

    def __init__(self, snapshot: CrossSnapshot) -> None:
        self.snapshot = snapshot  # keeps the SAM (and so the documents) alive while drafting
        self._cursor = SamCursor(snapshot.sam)

    def feed_many(self, tokens: Iterable[int]) -> None:
        """Advance over ``tokens``; InvalidToken (nothing fed) for an id outside [0, SEPARATOR)."""
        self._cursor.feed_many(tokens, limit=SEPARATOR)

    def match_len(self) -> int:
        """Longest suffix of the fed stream occurring inside one held document."""
        return self._cursor.match_len()

    def draft(self, max_len: int) -> list[int]:
        """Up to ``max_len`` tokens following one occurrence of the match, within its document."""
        out = self._cursor.draft(max_len)
        if SEPARATOR in out:
            del out[out.index(SEPARATOR):]
        return out

    def forks(self, draft: Sequence[int]) -> list[bool]:
        """Per-token fork flags of ``draft`` (see :func:`fucina.speculative.sam.draft_forks`)."""
        return self._cursor.forks(draft)


@dataclass(frozen=True, eq=False)
class CrossSnapshot:
    """An immutable, frozen SAM over the documents the index held when the snapshot was taken."""

    sam: SamIndex = field(repr=False)  # frozen: never extended, so cursors over it stay valid
    n_documents: int
    n_tokens: int  # document tokens, separators excluded
    _nbytes: int = field(repr=False)  # fixed at build: a frozen SAM never grows

    @classmethod
    def build(cls, documents: Sequence[array]) -> CrossSnapshot:
        """Index ``documents`` joined by SEPARATOR (O(total tokens) in Python)."""
        stream = array(_U32)
        for i, doc in enumerate(documents):
            if i:
                stream.append(SEPARATOR)
            stream.extend(doc)
        sam = SamIndex.build(stream)
        sam.freeze()
        return cls(sam, len(documents), sum(map(len, documents)), sam.nbytes())

    def cursor(self) -> CrossCursor:
        """A fresh cursor; any number may share one snapshot."""
        return CrossCursor(self)

    def nbytes(self) -> int:
        """Bytes held by the SAM (see ``SamIndex.nbytes``)."""
        return self._nbytes


class CrossRequestIndex:
    """One tenant's previous requests, oldest first, bounded by ``max_tokens``."""

    def __init__(self, max_tokens: int) -> None:
        self._max = check_max_tokens(max_tokens)
        self._docs: deque[array] = deque()  # oldest first; each 1..max_tokens ids < SEPARATOR
        self._total = 0  # == sum of len(doc) over _docs, <= _max
        self._snapshot: CrossSnapshot | None = None  # None or built over exactly _docs
        self.evictions = 0  # documents evicted so far (never decreases)
        self._lock = threading.RLock()  # guards the four fields above

    @property
    def max_tokens(self) -> int:
        return self._max

    @property
    def n_documents(self) -> int:
        return len(self._docs)

    @property
    def n_tokens(self) -> int:
        return self._total

    def add(self, tokens: Sequence[int]) -> None:
        """Record one finished request; empty is ignored, a bad id raises InvalidToken first."""
        doc = _ids(tokens)
        if not doc:
            return
        if len(doc) > self._max:
            doc = doc[-self._max:]  # the tail is what a follow-up request tends to repeat
        with self._lock:
            self._docs.append(doc)
            self._total += len(doc)
            while self._total > self._max:
                self._total -= len(self._docs.popleft())
                self.evictions += 1
            self._snapshot = None  # running requests keep their own reference to the old one

    def documents(self) -> list[list[int]]:
        """Copies of the held documents, oldest first."""
        with self._lock:
            return [d.tolist() for d in self._docs]

    def document_arrays(self) -> tuple[array, ...]:
        """The held documents as stored (uint32 arrays, oldest first), not copied: for writers of
        the documents (the server's index files). Read-only by contract; ``add`` never changes a
        stored array, so the tuple stays what the index held when it was taken."""
        with self._lock:
            return tuple(self._docs)

    def snapshot(self) -> CrossSnapshot | None:
        """The SAM over the held documents (None when empty); cached until the next change."""
        with self._lock:
            if self._snapshot is None and self._docs:
                self._snapshot = CrossSnapshot.build(self._docs)
            return self._snapshot

    def nbytes(self) -> int:
        """Bytes held: the document arrays plus the cached snapshot's SAM, if any."""
        with self._lock:
            total = sys.getsizeof(self._docs) + sum(map(sys.getsizeof, self._docs))
            return total + (self._snapshot.nbytes() if self._snapshot is not None else 0)

    def bytes_per_token(self) -> float:
        with self._lock:
            return self.nbytes() / self._total if self._total else 0.0

    def check_integrity(self) -> list[str]:
        """What broke (empty when healthy); O(tokens + SAM size), meant for tests and doctors."""
        with self._lock:
            bad: list[str] = []
            if self._total != sum(map(len, self._docs)):
                bad.append(f"n_tokens {self._total} != sum of document lengths")
            if self._total > self._max:
                bad.append(f"{self._total} tokens exceed max_tokens {self._max}")
            for i, doc in enumerate(self._docs):
                if not 1 <= len(doc) <= self._max:
                    bad.append(f"document {i} has {len(doc)} tokens")
                if doc and max(doc) >= SEPARATOR:
                    bad.append(f"document {i} holds an id >= SEPARATOR")
            if self.evictions < 0:
                bad.append(f"evictions counter is {self.evictions}")
            snap = self._snapshot
            if snap is not None:
                stream: list[int] = []
                for i, doc in enumerate(self._docs):
                    stream += ([SEPARATOR] if i else []) + doc.tolist()
                if (snap.n_documents, snap.n_tokens) != (len(self._docs), self._total):
                    bad.append("cached snapshot counts differ from the documents")
                if not snap.sam.frozen or snap.sam.poisoned or snap.sam.tokens != stream:
                    bad.append("cached snapshot does not index the current documents")
                try:
                    snap.sam.check_integrity()
                except SamIntegrityError as exc:
                    bad.append(f"snapshot SAM: {exc}")
            return bad


class CrossRequestStore(Protocol):
    """What ``LLM.complete(cross_request=...)`` takes: a CrossRequestIndex, or any store with
    these two methods (the server's :class:`~fucina.server.tenants.TenantStore`)."""

    def snapshot(self) -> CrossSnapshot | None: ...

    def add(self, tokens: Sequence[int]) -> None: ...
