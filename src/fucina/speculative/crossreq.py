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

Persistence (``TenantIndexes(index_dir=...)``)
    One file per tenant, ``<index_dir>/<tenant>.fxi``, little-endian: magic ``FUCINAXR``, u16
    format version, u16 length + UTF-8 model fingerprint, u32 document count, per document u32
    length + u32 token ids, then the CRC32 of everything before it. Only documents are stored;
    the SAM is rebuilt on load. Writes go to ``<file>.tmp`` and ``os.replace`` it, so a reader
    never sees a half-written file. A file that is corrupt, of another version, or written for
    another model (fingerprint) is skipped with a warning and left in place for the operator.

Thread safety
    Generation is single-threaded, but a stats reader may run beside the worker: every public
    method takes the owner's lock. Snapshots and their cursors need none (immutable SAM; a
    cursor belongs to one request).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
import sys
import threading
import zlib
from array import array
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol, Sequence

from fucina.errors import InvalidArgument, InvalidOption, InvalidToken, SamIntegrityError
from fucina.speculative.sam import SamIndex, check_tokens
from fucina.speculative.sam_cursor import SamCursor

__all__ = ["FORMAT_VERSION", "MAGIC", "SEPARATOR", "CrossCursor", "CrossRequestIndex",
           "CrossRequestStore", "CrossSnapshot", "TenantIndexes", "TenantStore"]

log = logging.getLogger("fucina.crossreq")

#: Joins documents in the SAM. No vocabulary reaches 2**31 - 1, and it is rejected as input.
SEPARATOR = (1 << 31) - 1
MAGIC = b"FUCINAXR"
FORMAT_VERSION = 1
_U32 = next(t for t in "IL" if array(t).itemsize == 4)  # 'I' on every mainstream platform
_HEAD = struct.Struct("<8sHH")  # magic, version, fingerprint length
_U32LE = struct.Struct("<I")
_TENANT = re.compile(r"default|[0-9a-f]{32}")


def _ids(tokens: Iterable[int]) -> array:
    """Validate a batch (ints in ``[0, SEPARATOR)``) before anything is mutated."""
    return array(_U32, check_tokens(tokens, limit=SEPARATOR))


def _check_bound(max_tokens: object) -> int:
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
        self._max = _check_bound(max_tokens)
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


class _Corrupt(ValueError):
    """Why a persisted file was skipped."""


def _encode(docs: Sequence[array], fingerprint: str) -> bytes:
    fp = fingerprint.encode()
    out = bytearray(_HEAD.pack(MAGIC, FORMAT_VERSION, len(fp)) + fp + _U32LE.pack(len(docs)))
    for doc in docs:
        if sys.byteorder == "big":
            doc = array(_U32, doc)
            doc.byteswap()
        out += _U32LE.pack(len(doc)) + doc.tobytes()
    return bytes(out + _U32LE.pack(zlib.crc32(out)))


def _decode(data: bytes, fingerprint: str) -> list[array]:
    """The documents of a persisted file; raises _Corrupt naming the first problem found."""
    if len(data) < _HEAD.size + 8:
        raise _Corrupt(f"truncated ({len(data)} bytes)")
    magic, version, fplen = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise _Corrupt("bad magic")
    if version != FORMAT_VERSION:  # checked before the CRC: another version may lay out differently
        raise _Corrupt(f"format version {version}, this build reads {FORMAT_VERSION}")
    body = memoryview(data)[:-4]
    if zlib.crc32(body) != _U32LE.unpack_from(data, len(data) - 4)[0]:
        raise _Corrupt("CRC mismatch (truncated or corrupted)")
    pos = _HEAD.size + fplen
    if pos + 4 > len(body):
        raise _Corrupt("truncated header")
    try:
        fp = bytes(body[_HEAD.size:pos]).decode()
    except UnicodeDecodeError:
        raise _Corrupt("fingerprint is not UTF-8") from None
    if fp != fingerprint:
        raise _Corrupt(f"foreign fingerprint {fp!r} (this model is {fingerprint!r})")
    (count,), pos = _U32LE.unpack_from(body, pos), pos + 4
    docs: list[array] = []
    for i in range(count):
        if pos + 4 > len(body):
            raise _Corrupt(f"truncated at document {i} of {count}")
        (n,), pos = _U32LE.unpack_from(body, pos), pos + 4
        if n == 0 or pos + 4 * n > len(body):
            raise _Corrupt(f"document {i}: bad length {n}")
        doc = array(_U32)
        doc.frombytes(body[pos: pos + 4 * n])
        if sys.byteorder == "big":
            doc.byteswap()
        if max(doc) >= SEPARATOR:
            raise _Corrupt(f"document {i}: token id out of range")
        docs.append(doc)
        pos += 4 * n
    if pos != len(body):
        raise _Corrupt(f"{len(body) - pos} trailing bytes")
    return docs


class CrossRequestStore(Protocol):
    """What ``LLM.complete(cross_request=...)`` takes: a CrossRequestIndex, or a TenantStore."""

    def snapshot(self) -> CrossSnapshot | None: ...

    def add(self, tokens: Sequence[int]) -> None: ...


class TenantIndexes:
    """One CrossRequestIndex per tenant, optionally persisted in a directory."""

    def __init__(self, *, max_tokens: int, index_dir: Path | None = None,
                 fingerprint: str) -> None:
        self.max_tokens = _check_bound(max_tokens)
        try:
            ok = isinstance(fingerprint, str) and 0 < len(fingerprint.encode()) < 1 << 16
        except UnicodeEncodeError:
            ok = False
        if not ok:
            raise InvalidOption("fingerprint must be a non-empty str of < 64 KiB UTF-8",
                                param="fingerprint")
        self.fingerprint = fingerprint
        self.index_dir = Path(index_dir) if index_dir is not None else None
        if self.index_dir is not None:
            try:
                self.index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InvalidOption(f"cannot create index_dir {self.index_dir}: {exc}",
                                    param="index_dir") from None
        self._indexes: dict[str, CrossRequestIndex] = {}  # tenant -> index, created on first use
        self._lock = threading.RLock()  # guards _indexes and orders record()'s file writes

    @staticmethod
    def tenant_of(api_key: str | None) -> str:
        """``"default"`` for no key, else a 32-hex digest: the raw key is never stored."""
        if api_key is None:
            return "default"
        return hashlib.sha256(api_key.encode()).hexdigest()[:32]

    def _path(self, tenant: str) -> Path | None:
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            raise InvalidArgument(f"tenant must be 'default' or 32 lowercase hex digits, got "
                                  f"{tenant!r}", param="tenant")  # also keeps paths in index_dir
        return self.index_dir / f"{tenant}.fxi" if self.index_dir is not None else None

    def get(self, tenant: str) -> CrossRequestIndex:
        """The tenant's index; on first use it is created, loaded from its file if one is valid."""
        path = self._path(tenant)
        with self._lock:
            index = self._indexes.get(tenant)
            if index is None:
                index = self._indexes[tenant] = CrossRequestIndex(self.max_tokens)
                if path is not None and path.exists():
                    self._load(index, path)
            return index

    def _load(self, index: CrossRequestIndex, path: Path) -> None:
        try:
            docs = _decode(path.read_bytes(), self.fingerprint)
        except (OSError, _Corrupt) as exc:
            # Left in place for the operator; the next record() replaces it atomically.
            log.warning("skipping cross-request index %s: %s", path, exc)
            return
        # add() applies the current bound: a file saved under a bigger one is trimmed, oldest
        # first (those documents count as evictions).
        for doc in docs:
            index.add(doc)

    def record(self, tenant: str, tokens: Sequence[int]) -> None:
        """Add one finished request to the tenant's index and persist it (when index_dir is set).

        A failed write is logged, not raised: the in-memory index is already up to date.
        """
        with self._lock:
            index = self.get(tenant)
            before = (index.n_documents, index.evictions)
            index.add(tokens)
            path = self._path(tenant)
            if path is None or (index.n_documents, index.evictions) == before:
                return  # nothing persisted, or an empty request changed nothing
            with index._lock:
                data = _encode(index._docs, self.fingerprint)
            tmp = path.with_name(path.name + ".tmp")
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except OSError as exc:
                log.warning("cannot persist cross-request index %s: %s", path, exc)
                with suppress(OSError):
                    tmp.unlink(missing_ok=True)

    def store(self, tenant: str) -> "TenantStore":
        """The tenant's store, to pass as ``cross_request`` (validates the tenant id now)."""
        self._path(tenant)
        return TenantStore(self, tenant)

    def tenants(self) -> list[str]:
        """Tenants used in this process (created or loaded), sorted."""
        with self._lock:
            return sorted(self._indexes)

    def n_tokens(self) -> int:
        """Tokens held by every tenant's index."""
        with self._lock:
            return sum(index.n_tokens for index in self._indexes.values())

    def nbytes(self) -> int:
        """Bytes held by every tenant's index."""
        with self._lock:
            return sum(index.nbytes() for index in self._indexes.values())


@dataclass(frozen=True)
class TenantStore:
    """One tenant's slot of a :class:`TenantIndexes` as a :class:`CrossRequestStore`: snapshots of
    that tenant's index only, and ``add`` records (and persists) into it."""

    indexes: TenantIndexes
    tenant: str

    def snapshot(self) -> CrossSnapshot | None:
        return self.indexes.get(self.tenant).snapshot()

    def add(self, tokens: Sequence[int]) -> None:
        self.indexes.record(self.tenant, tokens)
