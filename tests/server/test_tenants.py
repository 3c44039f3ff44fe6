"""Tenants and index files: one cross-request index per API key, persisted across restarts."""

from __future__ import annotations

import logging
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fucina.errors import InvalidArgument, InvalidOption
from fucina.server import index_files
from fucina.server.index_files import MAGIC
from fucina.server.tenants import TenantIndexes, tenant_of
from fucina.speculative.crossreq import SEPARATOR
from tests.speculative.test_crossreq import ALPHABETS, documents, newest_fitting

FP = "gguf-sha256:abc|vocab=32000"


@pytest.mark.parametrize("bound", [0, -1, True, 1.5, "3", None])
def test_bad_bound_is_invalid_option(bound: object) -> None:
    with pytest.raises(InvalidOption):
        TenantIndexes(max_tokens=bound, fingerprint=FP)  # type: ignore[arg-type]


def test_bad_fingerprint_and_tenant() -> None:
    for fp in ["", 3, "\ud800"]:
        with pytest.raises(InvalidOption):
            TenantIndexes(max_tokens=10, fingerprint=fp)  # type: ignore[arg-type]
    ti = TenantIndexes(max_tokens=10, fingerprint=FP)
    for tenant in ["../etc", "ABCDEF0123456789ABCDEF0123456789", "default.fxi", "", "0" * 31]:
        with pytest.raises(InvalidArgument):
            ti.get(tenant)


# ---- tenants ---------------------------------------------------------------------------------


def test_tenant_of_hashes_and_never_leaks_the_key(tmp_path: Path) -> None:
    key = "sk-very-secret-KEY-1234"
    assert tenant_of(None) == "default"
    tenant = tenant_of(key)
    assert len(tenant) == 32 and int(tenant, 16) >= 0 and tenant != tenant_of("x")
    ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    ti.record(tenant, [1, 2, 3])
    ti.record("default", [4, 5])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{tenant}.fxi", "default.fxi"])
    for p in tmp_path.iterdir():
        assert key not in p.name and key.encode() not in p.read_bytes()


def test_tenants_are_isolated(tmp_path: Path) -> None:
    ti = TenantIndexes(max_tokens=5, index_dir=tmp_path, fingerprint=FP)
    a, b = tenant_of("a"), tenant_of("b")
    ti.record(b, [1, 2, 3])
    ib, snap_b = ti.get(b), ti.get(b).snapshot()
    before = (tmp_path / f"{b}.fxi").read_bytes()
    ti.record(a, [1, 2, 3, 4, 5])  # would evict b's document if they shared a store
    assert ti.get(a) is not ib and ti.get(b) is ib
    assert ib.documents() == [[1, 2, 3]] and ib.snapshot() is snap_b and ib.evictions == 0
    assert (tmp_path / f"{b}.fxi").read_bytes() == before
    assert ti.tenants() == sorted([a, b])
    assert ti.nbytes() == ti.get(a).nbytes() + ib.nbytes()


# ---- persistence -----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.data(), st.integers(1, 60))
def test_persistence_roundtrip(data: st.DataObject, bound: int) -> None:
    alphabet = data.draw(st.sampled_from(ALPHABETS))
    adds = data.draw(documents(alphabet, max_docs=8, max_len=40))
    with tempfile.TemporaryDirectory() as d:
        ti = TenantIndexes(max_tokens=bound, index_dir=Path(d), fingerprint=FP)
        for doc in adds:
            ti.record("default", doc)
        again = TenantIndexes(max_tokens=bound, index_dir=Path(d), fingerprint=FP)
        assert again.get("default").documents() == newest_fitting(adds, bound)
        assert again.get("default").check_integrity() == []


def test_load_applies_the_current_bound(tmp_path: Path) -> None:
    ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    adds = [[1, 2, 3], [4, 5, 6, 7], [8, 9], list(range(10, 20))]
    for doc in adds:
        ti.record("default", doc)
    small = TenantIndexes(max_tokens=12, index_dir=tmp_path, fingerprint=FP)
    assert small.get("default").documents() == newest_fitting(adds, 12) == [[8, 9], adds[3]]


def _valid_file(tmp_path: Path) -> bytes:
    ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    ti.record("default", [1, 2, 3])
    ti.record("default", [70000, SEPARATOR - 1])
    return (tmp_path / "default.fxi").read_bytes()


def _recrc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def _set(data: bytes, pos: int, value: bytes) -> bytes:
    return data[:pos] + value + data[pos + len(value):]


_FPL = len(FP.encode())
_DOCS = 12 + _FPL + 4  # offset of the first document's length
CORRUPTIONS = {
    "empty": (lambda b: b"", "truncated"),
    "trunc-magic": (lambda b: b[:5], "truncated"),
    "trunc-header": (lambda b: b[:14], "truncated"),
    "trunc-docs": (lambda b: b[:_DOCS + 6], "CRC"),
    "trunc-crc": (lambda b: b[:-1], "CRC"),
    "trunc-last-doc": (lambda b: b[:-8], "CRC"),
    "flip-body": (lambda b: _set(b, _DOCS + 4, bytes([b[_DOCS + 4] ^ 0x40])), "CRC"),
    "flip-crc": (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC"),
    "magic": (lambda b: b"FUCINAXX" + b[8:], "magic"),
    "version-2": (lambda b: _recrc(_set(b[:-4], 8, struct.pack("<H", 2))), "version 2"),
    "trailing": (lambda b: b + b"\0\0\0\0", "CRC"),
    "trailing-recrc": (lambda b: _recrc(b[:-4] + b"\0\0\0\0"), "trailing"),
    "doc-too-long": (lambda b: _recrc(_set(b[:-4], _DOCS, struct.pack("<I", 99))), "length"),
    "doc-empty": (lambda b: _recrc(_set(b[:-4], _DOCS, struct.pack("<I", 0))), "length"),
    "count-too-big": (lambda b: _recrc(_set(b[:-4], _DOCS - 4, struct.pack("<I", 3))),
                      "truncated at document 2"),
    "id-out-of-range": (lambda b: _recrc(_set(b[:-4], _DOCS + 4, struct.pack("<I", SEPARATOR))),
                        "out of range"),
    "fp-length": (lambda b: _recrc(_set(b[:-4], 10, struct.pack("<H", 60000))), "header"),
    "fp-not-utf8": (lambda b: _recrc(_set(b[:-4], 12, b"\xff")), "UTF-8"),
    "foreign": (lambda b: _recrc(b[:10] + struct.pack("<H", 5) + b"other" + b[12 + _FPL:-4]),
                "foreign fingerprint"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_bad_file_is_skipped_kept_then_overwritten(tmp_path: Path, caplog, kind: str) -> None:
    mutate, reason = CORRUPTIONS[kind]
    bad = mutate(_valid_file(tmp_path))
    path = tmp_path / "default.fxi"
    path.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
        ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
        idx = ti.get("default")
    assert idx.n_documents == 0 and idx.snapshot() is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "fucina.crossreq"]
    assert len(warnings) == 1 and str(path) in warnings[0] and reason in warnings[0], warnings
    assert path.read_bytes() == bad  # left for the operator
    ti.record("default", [5, 6])
    again = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    assert again.get("default").documents() == [[5, 6]]


def test_every_truncation_is_skipped(tmp_path: Path, caplog) -> None:
    good = _valid_file(tmp_path)
    assert good[:8] == MAGIC
    path = tmp_path / "default.fxi"
    for cut in range(len(good)):
        path.write_bytes(good[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
            idx = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP).get("default")
        assert idx.n_documents == 0 and len(caplog.records) == 1, cut


def test_leftover_tmp_is_ignored(tmp_path: Path, caplog) -> None:
    (tmp_path / "default.fxi.tmp").write_bytes(b"half-written garbage")
    with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
        ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
        assert ti.get("default").n_documents == 0
    assert not caplog.records
    ti.record("default", [1, 2])
    assert not (tmp_path / "default.fxi.tmp").exists()
    (tmp_path / "default.fxi.tmp").write_bytes(b"more garbage")
    again = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    assert again.get("default").documents() == [[1, 2]]


def test_failed_write_is_logged_and_keeps_memory_and_old_file(tmp_path: Path, caplog,
                                                              monkeypatch) -> None:
    ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    ti.record("default", [1, 2])
    before = (tmp_path / "default.fxi").read_bytes()

    def fail(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_files.os, "replace", fail)
    with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
        ti.record("default", [3])
    assert ti.get("default").documents() == [[1, 2], [3]]
    assert (tmp_path / "default.fxi").read_bytes() == before
    assert not (tmp_path / "default.fxi.tmp").exists()
    assert any("cannot persist" in r.getMessage() for r in caplog.records)
