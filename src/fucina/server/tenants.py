"""Tenants: one cross-request index per API key, optionally persisted (``fucina serve``).

A request drafts only from its own tenant's earlier requests: drafting from another tenant's would
leak that tenant's text through timing (a repeat of it would run measurably faster). A tenant is
named by :func:`tenant_of` its API key — a digest, so the raw key is never stored, neither in
memory nor in a file name. With an ``index_dir`` each tenant's index is loaded from, and written
back to, ``<index_dir>/<tenant>.fxi`` (the format is :mod:`fucina.server.index_files`).

Every public method of :class:`TenantIndexes` takes its lock; the indexes take their own.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fucina.errors import InvalidArgument, InvalidOption
from fucina.server.index_files import read_index_file, write_index_file
from fucina.speculative.crossreq import CrossRequestIndex, CrossSnapshot, check_max_tokens

__all__ = ["TenantIndexes", "TenantStore", "tenant_of"]

#: What :func:`tenant_of` returns: ``default`` or 32 lowercase hex digits (also keeps paths in index_dir).
_TENANT = re.compile(r"default|[0-9a-f]{32}")


def tenant_of(api_key: str | None) -> str:
    """``"default"`` for no key, else a 32-hex digest: the raw key is never stored."""
    if api_key is None:
        return "default"
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class TenantIndexes:
    """One CrossRequestIndex per tenant, optionally persisted in a directory."""

    def __init__(self, *, max_tokens: int, index_dir: Path | None = None,
                 fingerprint: str) -> None:
        self.max_tokens = check_max_tokens(max_tokens)
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
                    # add() applies the current bound: a file saved under a bigger one is
                    # trimmed, oldest first (those documents count as evictions).
                    for doc in read_index_file(path, self.fingerprint):
                        index.add(doc)
            return index

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
            write_index_file(path, index.document_arrays(), self.fingerprint)

    def store(self, tenant: str) -> TenantStore:
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
    """One tenant's slot of a :class:`TenantIndexes` as a
    :class:`~fucina.speculative.crossreq.CrossRequestStore`: snapshots of that tenant's index
    only, and ``add`` records (and persists) into it."""

    indexes: TenantIndexes
    tenant: str

    def snapshot(self) -> CrossSnapshot | None:
        return self.indexes.get(self.tenant).snapshot()

    def add(self, tokens: Sequence[int]) -> None:
        self.indexes.record(self.tenant, tokens)
