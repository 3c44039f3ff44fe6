"""Cross-request index: bounded store, drafts against brute force, snapshots, persistence."""

from __future__ import annotations

import logging
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.errors import InvalidArgument, InvalidOption, InvalidToken
from fucina.speculative import crossreq
from fucina.speculative.crossreq import (MAGIC, SEPARATOR, CrossRequestIndex, CrossSnapshot,
                                         TenantIndexes)
from tests.strategies import Alphabet, StreamSpec, token_streams

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Like tests.strategies.ALPHABETS, but the top one ends just below SEPARATOR (not a valid id here).
ALPHABETS = (Alphabet(2), Alphabet(5), Alphabet(31), Alphabet(31, base=SEPARATOR - 31))
FP = "gguf-sha256:abc|vocab=32000"


def documents(alphabet: Alphabet, max_docs: int = 6, max_len: int = 30) -> st.SearchStrategy:
    """Lists of token streams (some empty) over one alphabet."""
    return st.lists(token_streams(StreamSpec(alphabet, max_len)), max_size=max_docs)


@st.composite
def docs_and_query(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """Non-empty documents and a query splicing slices of them, including slices of two
    neighbouring documents glued together (which must never match across the seam)."""
    alphabet = draw(st.sampled_from(ALPHABETS))
    docs = draw(documents(alphabet, max_len=25).map(lambda ds: [d for d in ds if d]).filter(bool))
    query: list[int] = []
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(docs) - 1))
        glued = docs[i] + docs[(i + 1) % len(docs)]
        if draw(st.booleans()):
            a = draw(st.integers(0, len(glued) - 1))
            query += glued[a: a + draw(st.integers(1, 15))]
        else:
            query += alphabet.ids(draw(st.lists(st.integers(0, alphabet.size - 1), max_size=4)))
    return docs, query[:60]


def newest_fitting(adds: list[list[int]], bound: int) -> list[list[int]]:
    """Brute force: the longest suffix of the (tail-truncated) documents whose total fits."""
    kept = [d[-bound:] for d in adds if d]
    k = max(k for k in range(len(kept) + 1) if sum(map(len, kept[len(kept) - k:])) <= bound)
    return kept[len(kept) - k:]


def occurs_at(doc: list[int], s: list[int]) -> list[int]:
    """End positions of ``s`` inside ``doc``."""
    m = len(s)
    return [e for e in range(m - 1, len(doc)) if doc[e - m + 1: e + 1] == s]


# ---- bounded store ---------------------------------------------------------------------------


@PROPS
@given(st.data(), st.integers(1, 80))
def test_store_keeps_newest_fitting_suffix(data: st.DataObject, bound: int) -> None:
    alphabet = data.draw(st.sampled_from(ALPHABETS))
    adds = data.draw(documents(alphabet, max_docs=12, max_len=100))
    idx = CrossRequestIndex(bound)
    for i, doc in enumerate(adds):
        idx.add(doc)
        expected = newest_fitting(adds[: i + 1], bound)
        assert idx.documents() == expected
        assert idx.n_documents == len(expected)
        assert idx.n_tokens == sum(map(len, expected)) <= bound
        assert idx.evictions == sum(1 for d in adds[: i + 1] if d) - len(expected)
        if data.draw(st.booleans()):
            snap = idx.snapshot()
            assert (snap is None) == (not expected)
        assert idx.check_integrity() == []


def test_long_document_keeps_its_tail_and_evicts_everything_older() -> None:
    idx = CrossRequestIndex(4)
    idx.add([1, 2])
    idx.add([3, 4, 5, 6, 7, 8])
    assert idx.documents() == [[5, 6, 7, 8]]
    assert idx.evictions == 1


# ---- drafts against brute force --------------------------------------------------------------


@PROPS
@given(docs_and_query(), st.integers(1, 12))
def test_cursor_matches_brute_force_within_single_documents(case, k: int) -> None:
    docs, query = case
    idx = CrossRequestIndex(10_000)
    for d in docs:
        idx.add(d)
    cur = idx.snapshot().cursor()
    for n in range(1, len(query) + 1):
        cur.feed_many(query[n - 1: n])
        fed = query[:n]
        best = max((m for m in range(1, n + 1) if any(occurs_at(d, fed[n - m:]) for d in docs)),
                   default=0)
        assert cur.match_len() == best
        draft = cur.draft(k)
        assert SEPARATOR not in draft and len(draft) <= k
        if best == 0:
            assert draft == []
            continue
        # A continuation of one occurrence of the match, cut at its document's end.
        s = fed[n - best:]
        assert any(doc[e + 1: e + 1 + k] == draft for doc in docs for e in occurs_at(doc, s))


def test_no_match_spans_documents_and_drafts_stop_at_document_end() -> None:
    idx = CrossRequestIndex(100)
    idx.add([1, 2, 3])
    idx.add([4, 5])
    cur = idx.snapshot().cursor()
    cur.feed_many([2, 3, 4])  # "3 4" only exists across the seam
    assert cur.match_len() == 1 and cur.draft(5) == [5]
    cur = idx.snapshot().cursor()
    cur.feed_many([1, 2, 3])
    assert cur.match_len() == 3 and cur.draft(5) == []  # would be [SEPARATOR, 4, 5] uncut
    idx = CrossRequestIndex(100)
    for _ in range(3):
        idx.add([7, 8, 9])
    cur = idx.snapshot().cursor()
    cur.feed_many([7, 8])
    assert cur.draft(10) == [9]


# ---- snapshots -------------------------------------------------------------------------------


def test_snapshot_is_cached_until_a_change() -> None:
    idx = CrossRequestIndex(10)
    assert idx.snapshot() is None
    idx.add([1, 2, 3])
    snap = idx.snapshot()
    assert isinstance(snap, CrossSnapshot) and idx.snapshot() is snap
    idx.add([])  # ignored: no change, no rebuild
    assert idx.snapshot() is snap
    idx.add([4])
    assert idx.snapshot() is not snap
    assert (idx.snapshot().n_documents, idx.snapshot().n_tokens) == (2, 4)


def test_held_snapshot_survives_eviction_of_all_its_documents() -> None:
    idx = CrossRequestIndex(6)
    idx.add([1, 2, 3, 4, 5])
    snap = idx.snapshot()
    cur = snap.cursor()
    cur.feed_many([1, 2])
    before = (cur.match_len(), cur.draft(3))
    assert before == (2, [3, 4, 5])
    idx.add([9] * 6)  # evicts the only document the running request drafts from
    assert idx.documents() == [[9] * 6] and idx.evictions == 1
    assert idx.snapshot() is not snap
    assert (cur.match_len(), cur.draft(3)) == before
    assert (snap.n_documents, snap.n_tokens, list(snap.sam.tokens)) == (1, 5, [1, 2, 3, 4, 5])
    fresh = snap.cursor()
    fresh.feed_many([2, 3])
    assert fresh.draft(2) == [4, 5]
    assert idx.check_integrity() == []


def test_sizes_are_reported() -> None:
    idx = CrossRequestIndex(100)
    assert idx.bytes_per_token() == 0.0
    idx.add(range(50))
    docs_only = idx.nbytes()
    snap = idx.snapshot()
    assert idx.nbytes() == docs_only + snap.nbytes() > docs_only
    assert idx.bytes_per_token() == idx.nbytes() / 50


def test_check_integrity_reports_breakage() -> None:
    idx = CrossRequestIndex(10)
    idx.add([1, 2, 3])
    idx.snapshot()
    idx._total += 1
    assert any("n_tokens" in p for p in idx.check_integrity())
    idx._total -= 1
    other = CrossRequestIndex(10)
    other.add([1, 2, 4])
    idx._snapshot = other.snapshot()
    assert any("snapshot" in p for p in idx.check_integrity())


# ---- invalid input ---------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [0, -1, True, 1.5, "3", None])
def test_bad_bound_is_invalid_option(bound: object) -> None:
    with pytest.raises(InvalidOption):
        CrossRequestIndex(bound)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption):
        TenantIndexes(max_tokens=bound, fingerprint=FP)  # type: ignore[arg-type]


@pytest.mark.parametrize("tokens", [[-1], [SEPARATOR], [1 << 31], [1 << 64], [1, 2.5], [None],
                                    "abc", b"\x01\x02"])
def test_bad_ids_raise_and_change_nothing(tokens: object) -> None:
    idx = CrossRequestIndex(10)
    idx.add([1, 2, 3])
    snap = idx.snapshot()
    cur = snap.cursor()
    cur.feed_many([1, 2])
    with pytest.raises(InvalidToken):
        idx.add(tokens)  # type: ignore[arg-type]
    assert idx.documents() == [[1, 2, 3]] and idx.n_tokens == 3 and idx.snapshot() is snap
    with pytest.raises(InvalidToken):
        cur.feed_many(tokens)  # type: ignore[arg-type]
    assert (cur.match_len(), cur.draft(1)) == (2, [3])


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
    assert TenantIndexes.tenant_of(None) == "default"
    tenant = TenantIndexes.tenant_of(key)
    assert len(tenant) == 32 and int(tenant, 16) >= 0 and tenant != TenantIndexes.tenant_of("x")
    ti = TenantIndexes(max_tokens=100, index_dir=tmp_path, fingerprint=FP)
    ti.record(tenant, [1, 2, 3])
    ti.record("default", [4, 5])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{tenant}.fxi", "default.fxi"])
    for p in tmp_path.iterdir():
        assert key not in p.name and key.encode() not in p.read_bytes()


def test_tenants_are_isolated(tmp_path: Path) -> None:
    ti = TenantIndexes(max_tokens=5, index_dir=tmp_path, fingerprint=FP)
    a, b = TenantIndexes.tenant_of("a"), TenantIndexes.tenant_of("b")
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

    monkeypatch.setattr(crossreq.os, "replace", fail)
    with caplog.at_level(logging.WARNING, logger="fucina.crossreq"):
        ti.record("default", [3])
    assert ti.get("default").documents() == [[1, 2], [3]]
    assert (tmp_path / "default.fxi").read_bytes() == before
    assert not (tmp_path / "default.fxi.tmp").exists()
    assert any("cannot persist" in r.getMessage() for r in caplog.records)
