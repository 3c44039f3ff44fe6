"""Token-Recycling matrix: cold start, chain walk, move-to-front, top-K rows, errors."""

from __future__ import annotations

import numpy as np
import pytest

from fucina.errors import InvalidArgument, InvalidOption, InvalidToken
from fucina.speculative.recycling import SENTINEL, Recycling
from fucina.speculative.source import DraftSource


def test_is_a_draft_source_that_wants_topk():
    # The decoder only computes top-K rows for sources that ask for them.
    rec = Recycling(10)
    assert isinstance(rec, DraftSource) and rec.wants_topk


def test_cold_start_is_sentinel_and_drafts_nothing():
    # A fresh matrix is all sentinel; an unseen last token drafts zero tokens.
    rec = Recycling(10, k=4)
    assert rec._m.dtype == np.uint32 and (rec._m == SENTINEL).all()
    assert rec.suggest([3], 8) == []
    assert rec.topk_of(3).size == 0


def test_nbytes_is_vocab_times_k_times_four():
    # Memory is exactly the uint32 matrix (no seen-bitmap beside it).
    assert Recycling(1000, k=8).nbytes() == 1000 * 8 * 4


def test_chain_walk_follows_top1_until_an_unseen_row():
    # 1 -> 2 -> 3 learned from one committed stream; row 3 is unseen, so the walk stops there.
    rec = Recycling(10)
    rec.observe([1, 2, 3])
    assert rec.suggest([0, 1], 8) == [2, 3]
    assert rec.suggest([0, 2], 8) == [3]
    assert rec.suggest([0, 3], 8) == []


def test_chain_walk_is_capped_by_budget_and_max_chain():
    # A cycle 1 -> 2 -> 1 would walk forever; budget and max_chain both cap it.
    rec = Recycling(10, max_chain=5)
    rec.observe([1, 2, 1])
    assert rec.suggest([1], 3) == [2, 1, 2]
    assert rec.suggest([1], 100) == [2, 1, 2, 1, 2]
    assert rec.suggest([1], 0) == []
    assert rec.suggest([], 8) == []


def test_move_to_front_of_absent_present_and_front_tokens():
    # Row 5 gets 1, 2, 3 inserted (newest first), then 1 (present) moves to the front, then
    # 1 again is already in front: no change. A fourth distinct insert drops the last slot.
    rec = Recycling(10, k=3)
    rec.observe([5, 1, 5, 2, 5, 3])
    assert rec.topk_of(5).tolist() == [3, 2, 1]
    rec.observe([5, 1])
    assert rec.topk_of(5).tolist() == [1, 3, 2]
    rec.observe([5, 1])
    assert rec.topk_of(5).tolist() == [1, 3, 2]
    rec.observe([5, 4])
    assert rec.topk_of(5).tolist() == [4, 1, 3]


def test_bigram_across_observe_calls_is_learned():
    # (7, 8) straddles two observe calls: the matrix must remember the last committed token.
    rec = Recycling(10)
    rec.observe([6, 7])
    rec.observe([8])
    assert rec.topk_of(7).tolist() == [8]
    assert rec.suggest([7], 8) == [8]


def test_observe_topk_overwrites_rows_and_strips_sentinels():
    # Row 2 is replaced wholesale (the old full row and the bigram 2 -> 9 are gone); a narrower
    # top-K leaves a sentinel tail that topk_of strips.
    rec = Recycling(10, k=4)
    rec.observe_topk([2], np.array([[9, 8, 7, 6]]))
    rec.observe([2, 9])
    rec.observe_topk([2, 4], np.array([[3, 1, 0], [5, 6, 7]]))
    assert rec.topk_of(2).tolist() == [3, 1, 0]
    assert rec._m[2, 3] == SENTINEL
    assert rec.suggest([2], 8) == [3]
    assert rec.suggest([4], 8) == [5]


def test_observe_topk_cuts_wide_rows_and_later_rows_win():
    # K' > k keeps the first k columns; a repeated input keeps its last row.
    rec = Recycling(10, k=2)
    rec.observe_topk([1, 1], np.array([[2, 3, 4], [5, 6, 7]]))
    assert rec.topk_of(1).tolist() == [5, 6]


def test_out_of_vocab_ids_raise_named_error():
    # Every entry point validates ids: observe, suggest's last token, observe_topk both sides.
    rec = Recycling(10)
    for call in (lambda: rec.observe([1, 10]), lambda: rec.observe([-1]),
                 lambda: rec.suggest([10], 4), lambda: rec.topk_of(11),
                 lambda: rec.observe_topk([10], np.array([[1]])),
                 lambda: rec.observe_topk([1], np.array([[12]]))):
        with pytest.raises(InvalidToken):
            call()
    # A rejected observe must not have half-applied: nothing was learned.
    assert rec.topk_of(1).size == 0


def test_bad_topk_shape_and_options():
    # Row count mismatch is a malformed argument; non-positive sizes are invalid options.
    rec = Recycling(10)
    with pytest.raises(InvalidArgument):
        rec.observe_topk([1, 2], np.array([[1, 2]]))
    for kwargs in ({"vocab_size": 0}, {"vocab_size": 10, "k": 0}, {"vocab_size": 10, "max_chain": 0}):
        with pytest.raises(InvalidOption):
            Recycling(**kwargs)
