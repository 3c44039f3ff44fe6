"""SAM index: exact matches and valid, recent drafts against brute force after every append."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.errors import (FucinaError, InvalidToken, SamFrozen, SamIntegrityError,
                           SamNotFrozen)
from fucina.speculative import sam as sam_module
from fucina.speculative.sam import REFRESH_DEPTH, SamIndex, SamStats
from fucina.speculative.sam_cursor import SamCursor
from tests.strategies import (ALPHABETS, Alphabet, StreamSpec, any_token_streams,
                              distinct_edit_streams, reference_and_query, token_streams)

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Oracle:
    """Brute force over the whole stream: ``cs[k][e]`` is the common suffix length of the
    prefixes ending at ``e`` and ``k`` (``e < k``); everything else is read off that table."""

    def __init__(self) -> None:
        self.s: list[int] = []
        self.cs: list[list[int]] = []
        self.walk_end: list[int | None] = []  # per step j: |w_j|, None if t_j was never seen
        self.classes: list[list[int]] = []  # per step j: distinct-count table over [l, |w_j|]

    def append(self, c: int) -> None:
        k = len(self.s)
        prev = self.cs[k - 1] if k else []
        self.s.append(c)
        self.cs.append([(prev[e - 1] + 1 if e else 1) if self.s[e] == c else 0
                        for e in range(k)])
        self._record_walk(k)

    def _record_walk(self, j: int) -> None:
        # Step j appends t_j to t_0..t_{j-1}. w_j is the longest suffix of t_0..t_{j-1} already
        # followed by t_j somewhere; the classes between the suffix lengths l and |w_j| are the
        # distinct occurrence counts (in t_0..t_{j-1}) of the suffixes with those lengths.
        s, c = self.s, self.s[j]
        row = self.cs[j - 1] if j else []
        ends = [row[f - 1] if f else 0 for f in range(j) if s[f] == c]
        w = max(ends) if ends else None
        self.walk_end.append(w)
        table = [0] * ((w or 0) + 2)
        if w:
            counts = [1 + sum(1 for x in row if x >= ln) for ln in range(w + 1)]
            for ln in range(w, 0, -1):
                table[ln] = 1 if ln == w else table[ln + 1] + (counts[ln] != counts[ln + 1])
        self.classes.append(table)

    def match_len(self) -> int:
        return max(self.cs[-1], default=0)

    def prior_ends(self) -> list[int]:
        """Ends (< last position) of the prior occurrences of the matched suffix."""
        L = self.match_len()
        return [e for e, x in enumerate(self.cs[-1]) if x >= L] if L else []

    def refresh_bound(self, depth: int) -> int:
        """Latest end the construction provably stamped on the matched suffix's class (R2)."""
        k, L = len(self.s) - 1, self.match_len()
        best = -1
        for j in range(L, k + 1):  # step j stamps position j-1
            if self.cs[k][j - 1] < L:
                continue  # the matched suffix does not end at j-1
            w = self.walk_end[j]
            if w is None or L > w or self.classes[j][L] <= depth + 1:
                best = j - 1
        return best


def naive_match_len(s: list[int]) -> int:
    k = len(s) - 1
    for L in range(k, 0, -1):
        if any(s[e - L + 1: e + 1] == s[k - L + 1:] for e in range(L - 1, k)):
            return L
    return 0


def naive_cursor_match(ref: list[int], fed: list[int]) -> int:
    for L in range(len(fed), 0, -1):
        suffix = fed[-L:]
        if any(ref[i: i + L] == suffix for i in range(len(ref) - L + 1)):
            return L
    return 0


def state_of(idx: SamIndex) -> tuple:
    return (idx._stream, idx._len, idx._link, idx._sample, idx._ftok, idx._fto, idx._ehead,
            idx._etok, idx._enext, idx._extra, idx._last, idx._match)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=40))
def test_oracle_agrees_with_the_naive_definition(stream):
    # The DP oracle is only trusted because it matches the definition spelled out by slicing.
    o = Oracle()
    for i, c in enumerate(stream):
        o.append(c)
        assert o.match_len() == naive_match_len(stream[: i + 1])
        L = o.match_len()
        naive_ends = [e for e in range(L - 1, i)
                      if stream[e - L + 1: e + 1] == stream[i - L + 1: i + 1]] if L else []
        assert o.prior_ends() == naive_ends


@pytest.mark.parametrize("alphabet", ALPHABETS, ids=str)
@PROPS
@given(data=st.data())
def test_match_and_draft_agree_with_brute_force_after_every_append(alphabet, data):
    stream = data.draw(token_streams(StreamSpec(alphabet, max_len=150)), label="stream")
    idx, o = SamIndex(), Oracle()
    for c in stream:
        idx.extend(c)
        o.append(c)
        idx.check_integrity()
        assert len(idx) == len(o.s)
        assert idx.match_len() == o.match_len()
        ends = o.prior_ends()
        e = idx.occurrence()
        if not ends:
            assert e == -1 and idx.draft(16) == []
            continue
        # Validity: the draft continues a genuine prior occurrence of the matched suffix.
        assert e in ends
        for m in (1, 3, 16):
            d = idx.draft(m)
            assert d == o.s[e + 1: e + 1 + m] and 1 <= len(d) <= m
            assert any(d == o.s[f + 1: f + 1 + m] for f in ends)
    idx.check_integrity(deep=True)


@settings(max_examples=30, deadline=None)
@given(any_token_streams(max_len=40))
def test_deep_integrity_holds_after_every_append(stream):
    # Deep mode re-reads every state's sample through the automaton: samples are end positions.
    idx = SamIndex()
    for c in stream:
        idx.extend(c)
        idx.check_integrity(deep=True)


@pytest.mark.parametrize("alphabet", ALPHABETS, ids=str)
@PROPS
@given(data=st.data())
def test_recency_bounds_follow_and_refresh(alphabet, data):
    # R1: a confirmed draft keeps being followed (or a more recent occurrence is used).
    # R2: the occurrence is at least the latest end the construction provably stamped.
    stream = data.draw(token_streams(StreamSpec(alphabet, max_len=100)), label="stream")
    idx, o = SamIndex(), Oracle()
    prev = -1
    for k, c in enumerate(stream):
        idx.extend(c)
        o.append(c)
        idx.check_integrity()
        e = idx.occurrence()
        if prev >= 0 and stream[prev + 1] == c:
            assert e >= prev + 1
        if o.match_len():
            assert e >= o.refresh_bound(REFRESH_DEPTH)
        prev = e


@PROPS
@given(any_token_streams(max_len=100))
def test_draft_is_at_least_as_recent_as_the_last_time_the_same_suffix_matched(stream):
    # The plain-words corollary of R2: revisiting a suffix never drafts from before its last visit.
    idx = SamIndex()
    last_seen: dict[tuple[int, ...], int] = {}
    for k, c in enumerate(stream):
        idx.extend(c)
        L = idx.match_len()
        if L:
            suffix = tuple(stream[k - L + 1: k + 1])
            assert idx.occurrence() >= last_seen.get(suffix, -1)
            last_seen[suffix] = k


@PROPS
@given(distinct_edit_streams())
def test_edit_like_streams_draft_from_the_most_recent_revision(stream):
    # Every token occurs at most 4 times here, so chains are shallow and R2 makes drafts exact.
    idx, o = SamIndex(), Oracle()
    for c in stream:
        idx.extend(c)
        o.append(c)
        ends = o.prior_ends()
        assert idx.occurrence() == (max(ends) if ends else -1)


def test_revised_passage_is_copied_from_its_latest_version():
    # v1, then v2 (one token revised), then v2 retyped: the draft must propose v2's tokens.
    v1 = [10, 11, 12, 13, 14, 15, 16, 17]
    v2 = [10, 11, 12, 13, 99, 15, 16, 17]
    idx = SamIndex.build([1] + v1 + [2] + v2 + [3] + v2[:3])
    assert idx.match_len() == 3 and idx.draft(5) == [13, 99, 15, 16, 17]


def _deep_chain_stream(m: int) -> list[int]:
    # Runs a^1 b .. a^m b give the suffixes a^i b of "a^m b" m distinct occurrence counts.
    # Retyping "a^m b c" stops the walk at the class of "a^m b", so the class of "b" (about m
    # classes up) is stamped only if m is small enough; a fresh token then restarts the match
    # at "b", whose most recent occurrence is the one just retyped.
    a, b, c, fresh = 0, 1, 2, 3
    runs = [t for i in range(1, m + 1) for t in [a] * i + [b]]
    return runs + ([a] * m + [b, c]) * 2 + [fresh, b]


@pytest.mark.parametrize("m, exact", [(REFRESH_DEPTH + 1, True), (REFRESH_DEPTH + 2, False)])
def test_deep_chains_past_the_refresh_depth_draft_from_an_older_valid_occurrence(m, exact):
    # The documented limit, at its exact boundary.
    stream = _deep_chain_stream(m)
    idx, o = SamIndex.build(stream), Oracle()
    for t in stream:
        o.append(t)
    ends = o.prior_ends()
    assert idx.match_len() == 1 and idx.occurrence() in ends
    assert (idx.occurrence() == max(ends)) is exact
    assert idx.occurrence() == o.refresh_bound(REFRESH_DEPTH)  # R2 is tight here


@PROPS
@given(any_token_streams(max_len=120))
def test_bulk_build_equals_incremental(stream):
    one = SamIndex()
    for c in stream:
        one.extend(c)
    bulk = SamIndex.build(stream)
    assert state_of(bulk) == state_of(one)
    assert bulk.stats() == one.stats()
    half = SamIndex.build(stream[: len(stream) // 2])
    half.extend_many(np.array(stream[len(stream) // 2:], dtype=np.int64))
    assert state_of(half) == state_of(one)


@PROPS
@given(reference_and_query())
def test_frozen_cursor_agrees_with_brute_force_after_every_feed(case):
    ref, query = case
    idx = SamIndex.build(ref)
    idx.freeze()
    cur = idx.cursor()
    twin = SamIndex.build(ref)
    twin.freeze()
    batch = twin.cursor()
    batch.feed_many(query)
    prev = -1
    for i, c in enumerate(query):
        cur.feed(c)
        fed = query[: i + 1]
        L = naive_cursor_match(ref, fed)
        assert cur.match_len() == L
        e = cur.occurrence()
        if L == 0:
            assert e == -1 and cur.draft(8) == []
            prev = -1
            continue
        assert ref[e - L + 1: e + 1] == fed[-L:]
        assert cur.draft(8) == ref[e + 1: e + 9]
        if 0 <= prev < len(ref) - 2 and ref[prev + 1] == c:
            assert e >= prev + 1  # R1: a confirmed draft never moves the occurrence back
        prev = e
        # Nothing drafted only when every occurrence of the match ends the reference.
        has_next = any(ref[f - L + 1: f + 1] == fed[-L:] for f in range(L - 1, len(ref) - 1))
        assert bool(cur.draft(8)) == has_next
    assert (batch.match_len(), batch.occurrence()) == (cur.match_len(), cur.occurrence())
    cur.reset()
    assert cur.match_len() == 0 and cur.draft(4) == []


def test_cursor_context_picks_the_passage_to_continue():
    ref = [5, 1, 2, 3, 9, 1, 2, 3, 4, 7]
    idx = SamIndex.build(ref)
    idx.freeze()
    cur = idx.cursor()
    cur.feed_many([9, 1, 2])
    assert cur.match_len() == 3 and cur.draft(3) == [3, 4, 7]
    cur.feed(3)
    assert cur.draft(2) == [4, 7]


def test_many_cursors_share_one_frozen_index():
    idx = SamIndex.build([1, 2, 3, 1, 2, 4])
    idx.freeze()
    a, b = idx.cursor(), idx.cursor()
    a.feed_many([1, 2, 3])
    b.feed_many([2, 4])
    assert (a.match_len(), a.draft(3)) == (3, [1, 2, 4])
    assert (b.match_len(), b.draft(3)) == (2, [])


def test_self_match_is_excluded():
    # A fresh token has no prior occurrence even though it trivially occurs in the stream.
    idx = SamIndex.build([1, 2, 3])
    assert idx.match_len() == 0 and idx.draft(4) == [] and idx.occurrence() == -1
    idx.extend(1)
    assert idx.match_len() == 1 and idx.draft(4) == [2, 3, 1]
    run = SamIndex.build([7, 7, 7, 7])
    assert run.match_len() == 3 and run.draft(4) == [7]  # overlapping prior occurrence


def test_empty_index():
    idx = SamIndex()
    assert len(idx) == 0 and idx.match_len() == 0 and idx.draft(8) == [] and list(idx.tokens) == []
    idx.check_integrity(deep=True)
    assert idx.stats().tokens == 0 and idx.stats().states == 1


def test_draft_budget_edges():
    idx = SamIndex.build([1, 2, 3, 4, 1, 2])
    assert idx.draft(0) == [] and idx.draft(-3) == []
    assert idx.draft(1) == [3] and idx.draft(100) == [3, 4, 1, 2]


def test_tokens_is_a_read_only_live_view():
    idx = SamIndex.build([4, 5])
    view = idx.tokens
    idx.extend(6)
    assert len(view) == 3 and view == [4, 5, 6] and view[-1] == 6 and view[1:] == [5, 6]
    with pytest.raises(TypeError):
        view[0] = 1  # type: ignore[index]


# ---- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 2**31, 2**70, 1.5, "3", None, b"\x01"])
def test_invalid_token_raises_before_any_mutation(bad):
    idx = SamIndex.build([1, 2, 1])
    before = state_of(idx)
    with pytest.raises(InvalidToken):
        idx.extend(bad)
    with pytest.raises(InvalidToken):
        idx.extend_many([3, 4, bad])
    assert state_of(idx) == before and not idx.poisoned
    idx.check_integrity(deep=True)
    assert issubclass(InvalidToken, FucinaError)


def test_token_range_edges_are_accepted():
    idx = SamIndex.build([0, 2**31 - 1, 0, 2**31 - 1])
    assert idx.match_len() == 2
    idx.extend(np.int64(2**31 - 1))
    idx.check_integrity(deep=True)


def test_frozen_index_refuses_appends_and_requires_freeze_for_cursors():
    idx = SamIndex.build([1, 2, 3])
    with pytest.raises(SamNotFrozen):
        idx.cursor()
    with pytest.raises(SamNotFrozen):
        SamCursor(idx)
    assert not idx.frozen
    idx.freeze()
    assert idx.frozen
    with pytest.raises(SamFrozen):
        idx.extend(4)
    with pytest.raises(SamFrozen):
        idx.extend_many([4])
    assert len(idx) == 3
    assert isinstance(idx.cursor(), SamCursor)


def test_cursor_rejects_invalid_tokens():
    idx = SamIndex.build([1, 2])
    idx.freeze()
    cur = idx.cursor()
    cur.feed(1)
    with pytest.raises(InvalidToken):
        cur.feed(-5)
    with pytest.raises(InvalidToken):
        cur.feed_many([2, 2**31])
    assert cur.match_len() == 1


# ---- poisoning --------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


def _explode_at(pos: int):
    def hook(n: int) -> None:
        if n == pos:
            raise Boom(f"injected failure at {n}")
    return hook


@pytest.mark.parametrize("bulk", [False, True])
def test_failed_append_poisons_the_index_for_good(bulk):
    stream = [1, 2, 3, 1, 2, 3, 1, 2]
    idx = SamIndex()
    idx._fault_hook = _explode_at(5)
    with pytest.raises(Boom):
        if bulk:
            idx.extend_many(stream)
        else:
            for c in stream:
                idx.extend(c)
    assert idx.poisoned and idx.stats().poisoned and "POISONED" in str(idx.stats())
    assert idx.match_len() == 0 and idx.draft(8) == [] and idx.occurrence() == -1
    idx._fault_hook = None
    idx.extend_many([1, 2, 3, 1, 2, 3])  # the stream that would match again
    assert idx.match_len() == 0 and idx.draft(8) == []
    idx.check_integrity()  # degraded mode is a consistent state: it serves nothing
    idx.freeze()
    cur = idx.cursor()
    cur.feed_many([1, 2, 3])
    assert cur.match_len() == 0 and cur.draft(4) == []


def test_invalid_token_does_not_poison():
    idx = SamIndex.build([1, 2, 1])
    with pytest.raises(InvalidToken):
        idx.extend(-1)
    assert not idx.poisoned and idx.match_len() == 1


# ---- integrity checker is not vacuous ---------------------------------------------------------


def _corrupt_cases():
    def sample_off_endpos(idx):
        # A value in range for the state's length but not one of its end positions.
        for v in range(1, idx.num_states()):
            e = idx._sample[v]
            for alt in range(idx._len[v] - 1, len(idx) - 1):
                if alt != e and idx._stream[alt] != idx._stream[e]:
                    idx._sample[v] = alt
                    return
        raise AssertionError("no corruptible sample")

    def too_many_states(idx):
        # Unreachable but locally plausible states: only the classical bound can object.
        for _ in range(2 * len(idx)):
            for col, val in ((idx._len, 1), (idx._link, 0), (idx._sample, 0), (idx._ftok, -1),
                             (idx._fto, 0), (idx._ehead, -1)):
                col.append(val)

    return {
        "len": lambda idx: idx._len.__setitem__(2, idx._len[idx._link[2]]),
        "link": lambda idx: idx._link.__setitem__(1, idx.num_states() - 1),
        "sample_range": lambda idx: idx._sample.__setitem__(1, len(idx)),
        "inline_edge": lambda idx: idx._fto.__setitem__(1, 0),
        "edge_len": lambda idx: idx._fto.__setitem__(1, 1),  # a self-loop: target not longer
        "dict_edge": lambda idx: idx._extra.__setitem__(next(iter(idx._extra)), 0),
        "edge_list": lambda idx: idx._ehead.__setitem__(0, -1),
        "match": lambda idx: setattr(idx, "_match", 0),
        "self_match": lambda idx: idx._sample.__setitem__(idx._match, len(idx) - 1),
        "sample_off_endpos": sample_off_endpos,
        "too_many_states": too_many_states,
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases()))
def test_check_integrity_detects_corruption(case):
    idx = SamIndex.build([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4])
    idx.check_integrity(deep=True)
    _corrupt_cases()[case](idx)
    # Only a sample moved to another in-range position needs the deep re-read to be caught.
    with pytest.raises(SamIntegrityError):
        idx.check_integrity(deep=case == "sample_off_endpos")


@pytest.mark.parametrize("n", [3, 10, 50])
def test_classical_bounds_are_tight_and_checked(n):
    # "abb...b" reaches 2n-1 states; "abb...bc" reaches 3n-4 transitions.
    states = SamIndex.build([0] + [1] * (n - 1))
    assert states.num_states() == 2 * n - 1
    trans = SamIndex.build([0] + [1] * (n - 2) + [2])
    assert trans.num_transitions() == 3 * n - 4
    for idx in (states, trans):
        idx.check_integrity(deep=True)


# ---- size accounting --------------------------------------------------------------------------


def test_stats_and_nbytes_account_for_python_objects():
    rng = np.random.default_rng(0)
    stream = (rng.zipf(1.3, 20_000) % 5000).tolist()
    idx = SamIndex.build(stream)
    st_ = idx.stats()
    assert isinstance(st_, SamStats) and st_.tokens == len(stream) and not st_.poisoned
    assert st_.states == idx.num_states() and st_.transitions == idx.num_transitions()
    assert str(len(stream)) in str(st_)
    raw = sum(sys.getsizeof(a) for a in (idx._stream, idx._len, idx._link, idx._sample,
                                         idx._ftok, idx._fto, idx._ehead, idx._etok, idx._enext))
    # Honest: the dict's table AND its boxed int keys are counted, on top of the arrays.
    assert st_.nbytes >= raw + sys.getsizeof(idx._extra) + 28 * len(idx._extra)
    assert st_.nbytes <= 200 * len(stream)  # the memory target on a text-like stream


# ---- benchmark smoke test ---------------------------------------------------------------------


def test_bench_runs_on_a_token_file(tmp_path: Path):
    f = tmp_path / "toks.txt"
    f.write_text(" ".join(str(t) for t in [1, 2, 3, 4] * 50) + "\n")
    src = Path(sam_module.__file__).resolve().parents[2]  # the tree under test, and the experiments beside it
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "benchmarks.sam", "--tokens-file", str(f),
                          "--repeats", "1", "--json"], capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(root)])}, timeout=60,
                         check=True)
    report = json.loads(out.stdout)
    assert report["tokens"] == 200 and report["build_bulk_tok_s"] > 0
    assert report["bytes_per_token"] > 0 and report["query_us"] > 0


def test_bench_from_bench_without_tokenizer_exits_2(tmp_path: Path, capsys):
    from benchmarks.sam import main

    code = main(["--from-bench", "--bench-dir", str(tmp_path),
                 "--tokenizer-module", "no_such_module_x"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err and "\n" not in err and "no_such_module_x" in err


def test_alphabet_strategy_objects_validate():
    with pytest.raises(ValueError):
        Alphabet(0)
    with pytest.raises(ValueError):
        Alphabet(31, base=2**31 - 30)
    with pytest.raises(ValueError):
        StreamSpec(ALPHABETS[0], kinds=("nope",))
    assert Alphabet(3, base=10).ids([0, 2]) == [10, 12]


@settings(max_examples=20, deadline=None)
@given(token_streams(StreamSpec(Alphabet(31, base=2**31 - 31), max_len=60)))
def test_large_ids_round_trip_through_the_stream(stream):
    idx = SamIndex.build(array("q", stream))
    assert list(idx.tokens) == stream
