"""Cross-request index: bounded store, drafts against brute force, snapshots, invalid input
(tenants and persistence: tests/server/test_tenants.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.errors import InvalidOption, InvalidToken
from fucina.speculative.crossreq import SEPARATOR, CrossRequestIndex, CrossSnapshot
from tests.strategies import Alphabet, StreamSpec, token_streams

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Like tests.strategies.ALPHABETS, but the top one ends just below SEPARATOR (not a valid id here).
ALPHABETS = (Alphabet(2), Alphabet(5), Alphabet(31), Alphabet(31, base=SEPARATOR - 31))


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
