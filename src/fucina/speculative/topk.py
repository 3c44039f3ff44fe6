"""Exact per-row top-K of logits rows, cheap enough for the decoder's hot path.

The decoder computes the top-K of every verified row for Token Recycling (docs/design.md §6, §7). A
full ``np.argpartition`` per row touches the whole vocabulary with a selection algorithm; at a
262,144-token vocabulary that is a noticeable slice of a decode step. This module replaces it
with a threshold prefilter that stays exact:

1. Split each row into ``W`` disjoint groups (a strided reshape, so the reduction is a SIMD
   elementwise maximum) and take each group's maximum.
2. The k-th largest of those maxima, ``t``, is a value held by k distinct row elements, so at
   least k elements of the row are ``>= t`` and every top-k element is among them.
3. Keep the survivors ``row >= t`` (usually barely more than k) and order them exactly.

Ordering is descending value with ties broken by the lower token id. NaN ranks below every
number (including ``-inf``), NaNs among themselves by id: the same order as
``np.argsort(-row, kind="stable")``. Rows that need NaNs, or whose survivor set is huge because of
massive ties, take exact slower paths; the result never depends on which path ran.
"""

from __future__ import annotations

import numpy as np

from fucina.errors import InvalidArgument

__all__ = ["topk_rows"]

# Survivor sets above this (times k) are ordered by a per-row tie-aware selection instead of a
# full sort, so an all-equal row costs O(vocab), not O(vocab log vocab).
_SORT_CAP_PER_K = 32
# Aim for about this many elements per group: fewer groups make the threshold selection cheaper,
# more groups make the threshold tighter (fewer survivors). Both costs are tiny near this value.
_GROUP_SIZE = 128


def topk_rows(rows: np.ndarray, k: int = 8) -> np.ndarray:
    """Return the ids of the ``k`` largest entries of every row, best first (ties -> lower id).

    ``rows`` is ``[n, vocab]`` (any real dtype; float32 logits in practice). The result is
    ``[n, k]`` int64. Exact: equal to ``np.argsort(-rows, axis=1, kind="stable")[:, :k]``.
    Raises :class:`~fucina.errors.InvalidArgument` when ``rows`` is not 2-D or ``k`` is not in
    ``[1, vocab]``.
    """
    rows = np.asarray(rows)
    if rows.ndim != 2:
        raise InvalidArgument(f"topk_rows wants a [n, vocab] array, got shape {rows.shape}")
    n, vocab = rows.shape
    if not 1 <= k <= vocab:
        raise InvalidArgument(f"k must be in [1, {vocab}], got {k}")
    out = np.empty((n, k), dtype=np.int64)
    if n == 0:
        return out
    rows = np.ascontiguousarray(rows)

    thresholds = _thresholds(rows, k)
    flat = np.flatnonzero(rows >= thresholds[:, None])
    bounds = np.searchsorted(flat, np.arange(n + 1, dtype=np.int64) * vocab)
    counts = np.diff(bounds)

    cap = _SORT_CAP_PER_K * k
    easy = (counts >= k) & (counts <= cap)
    if easy.all():
        out[:] = _order_survivors(rows, flat, bounds, k)
        return out
    if easy.any():
        sel = np.flatnonzero(easy)
        parts = [flat[bounds[i]:bounds[i + 1]] for i in sel]
        sub_flat = np.concatenate(parts)
        sub_bounds = np.concatenate(([0], np.cumsum([len(p) for p in parts])))
        out[sel] = _order_survivors(rows, sub_flat, sub_bounds, k, row_ids=sel)
    for i in np.flatnonzero(~easy):
        if counts[i] >= k:
            ids = flat[bounds[i]:bounds[i + 1]] - i * vocab
            out[i] = _select_exact(rows[i, ids], ids, k)
        else:
            # Fewer than k survivors only happens when NaNs poisoned the threshold.
            out[i] = _row_with_nans(rows[i], k)
    return out


def _thresholds(rows: np.ndarray, k: int) -> np.ndarray:
    """Per row, a value such that at least k row elements are ``>=`` it (NaN if NaNs interfere)."""
    n, vocab = rows.shape
    width = min(vocab, max(32 * k, vocab // _GROUP_SIZE))
    groups = vocab // width
    main = groups * width
    # Group j = {j, j + width, j + 2*width, ...}: reducing over axis 1 is an elementwise maximum
    # of contiguous slices, far faster than reducing short inner runs.
    maxima = rows[:, :main].reshape(n, groups, width).max(axis=1)
    rest = vocab - main
    if rest:
        # The tail joins the first `rest` groups; groups stay disjoint, which is all step 2 needs.
        np.maximum(maxima[:, :rest], rows[:, main:], out=maxima[:, :rest])
    return np.partition(maxima, width - k, axis=1)[:, width - k]


def _order_survivors(rows: np.ndarray, flat: np.ndarray, bounds: np.ndarray, k: int,
                     row_ids: np.ndarray | None = None) -> np.ndarray:
    """Top-k of each row's survivor slice ``flat[bounds[j]:bounds[j+1]]`` (every slice has >= k)."""
    vocab = rows.shape[1]
    m = len(bounds) - 1
    rel = np.repeat(np.arange(m), np.diff(bounds))
    row_of = rel if row_ids is None else row_ids[rel]
    ids = flat - row_of.astype(np.int64) * vocab
    vals = rows.reshape(-1)[flat]
    # Survivors are never NaN (NaN >= t is false), so negation gives a total order.
    order = np.lexsort((ids, -vals, rel))
    pick = bounds[:-1, None] + np.arange(k)
    return ids[order[pick]]


def _select_exact(vals: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Top-k of NaN-free ``vals`` (``ids`` ascending) without sorting all of them."""
    kth = np.partition(vals, len(vals) - k)[len(vals) - k]
    above = vals > kth
    n_above = int(np.count_nonzero(above))
    # Everything above the k-th value is in; the k-th value's ties fill up by lowest id.
    chosen = np.concatenate((ids[above], ids[vals == kth][: k - n_above]))
    chosen_vals = np.concatenate((vals[above], vals[vals == kth][: k - n_above]))
    return chosen[np.lexsort((chosen, -chosen_vals))]


def _row_with_nans(row: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k of a row containing NaNs, which rank below every number."""
    finite = ~np.isnan(row)
    ids = np.flatnonzero(finite)
    if len(ids) >= k:
        return _select_exact(row[ids], ids, k)
    head = ids[np.lexsort((ids, -row[ids]))]
    return np.concatenate((head, np.flatnonzero(~finite)[: k - len(ids)]))


def top2_gap(row: np.ndarray) -> tuple[int, int, float]:
    """Best and runner-up ids of one logits row and their logit gap (ties -> lower id).

    The divergence audits use it to show a flipped token was a near-tie.
    """
    a, b = (int(i) for i in topk_rows(np.asarray(row)[None, :], 2)[0])
    return a, b, float(row[a]) - float(row[b])
