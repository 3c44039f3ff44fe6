"""topk_rows must equal the naive stable-argsort reference on every input, ties and -inf/NaN included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fucina.errors import InvalidArgument
from fucina.speculative.topk import topk_rows


def reference(rows: np.ndarray, k: int) -> np.ndarray:
    # Stable sort of the negation: descending value, ties by lower id, NaN last.
    return np.argsort(-rows, axis=1, kind="stable")[:, :k]


# A small value pool forces ties; the specials exercise -inf/inf/NaN handling.
_pool = st.sampled_from([0.0, 1.0, -1.0, 2.5, -np.inf, np.inf, np.nan, 1e30, -1e30])
_floats = st.one_of(_pool, st.floats(-100, 100, width=32))


@st.composite
def rows_and_k(draw):
    n = draw(st.integers(0, 4))
    vocab = draw(st.integers(1, 700))
    k = draw(st.integers(1, min(vocab, 12)))
    rows = draw(hnp.arrays(np.float32, (n, vocab), elements=_floats))
    return rows, k


@settings(max_examples=300, deadline=None)
@given(rows_and_k())
def test_matches_reference_on_arbitrary_rows(case):
    # Arbitrary small rows with heavy ties, infinities and NaNs.
    rows, k = case
    np.testing.assert_array_equal(topk_rows(rows, k), reference(rows, k))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([49152, 50001, 262144]), st.integers(1, 3))
def test_matches_reference_at_real_vocab_sizes(seed, vocab, n):
    # Realistic widths (including one not divisible by the group width) with logits-like rows.
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((n, vocab)) * 4).astype(np.float32)
    # Plant exact ties at the top and a sea of -inf (a masked vocabulary), as samplers produce.
    rows[:, rng.integers(0, vocab, 5)] = rows.max() + 1
    rows[0, rng.random(vocab) < 0.5] = -np.inf
    np.testing.assert_array_equal(topk_rows(rows, 8), reference(rows, 8))


@pytest.mark.parametrize("fill", [0.0, -np.inf, np.nan])
def test_constant_rows_pick_lowest_ids(fill):
    # A constant row is one giant tie: the k lowest ids win (the tie-aware path, not a sort).
    rows = np.full((2, 262144), fill, dtype=np.float32)
    np.testing.assert_array_equal(topk_rows(rows, 8), np.tile(np.arange(8), (2, 1)))


def test_mixed_batch_routes_rows_independently():
    # One normal row, one all-tie row and one mostly-NaN row in the same batch.
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((3, 4096)).astype(np.float32)
    rows[1] = 3.0
    rows[2, 5:] = np.nan
    np.testing.assert_array_equal(topk_rows(rows, 8), reference(rows, 8))


def test_top_elements_sharing_one_group():
    # The best values all sit in the same strided group (ids j, j+width, ...): still exact.
    vocab = 262144
    rows = np.zeros((1, vocab), dtype=np.float32)
    width = vocab // 128
    rows[0, 3::width] = np.arange(1, 129, dtype=np.float32)
    np.testing.assert_array_equal(topk_rows(rows, 8), reference(rows, 8))


def test_returns_int_ids_of_shape_n_k():
    # The contract shape/dtype the recycling matrix consumes.
    out = topk_rows(np.zeros((3, 50), dtype=np.float32), 4)
    assert out.shape == (3, 4) and out.dtype == np.int64


def test_empty_batch():
    # Zero rows is a valid batch (nothing was verified).
    assert topk_rows(np.zeros((0, 10), dtype=np.float32), 3).shape == (0, 3)


@pytest.mark.parametrize("shape,k", [((10,), 2), ((2, 3, 4), 2), ((2, 5), 0), ((2, 5), 6)])
def test_bad_arguments_raise_named_error(shape, k):
    # Non-2-D input or k outside [1, vocab].
    with pytest.raises(InvalidArgument):
        topk_rows(np.zeros(shape, dtype=np.float32), k)


def test_top2_gap_names_best_runner_up_and_gap():
    from fucina.speculative.topk import top2_gap

    row = np.array([0.5, 3.0, -1.0, 2.75, 3.0], dtype=np.float32)
    assert top2_gap(row) == (1, 4, 0.0)  # exact tie: lower id first
    row[4] = 2.0
    assert top2_gap(row) == (1, 3, 0.25)
