"""The replay's walks over a :class:`~benchmarks.replay.inputs.Stream`, model-free.

:func:`replay_stream` walks it through a fresh :class:`~fucina.speculative.index.SpeculationIndex`
(and, with a cost table, the decoder's :class:`~fucina.speculative.policy.DraftPolicy`) as if a
model had generated the continuation and every draft had been verified against it;
:func:`ceiling_steps` is the retrieval ceiling, :func:`perfect_policy_cost` the perfect policy over
the same drafts, and :func:`measure_priors` the per-bucket acceptance with every position scored.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, defaultdict
from typing import Sequence

import numpy as np

from fucina.bench.suite import match_only  # noqa: F401 (re-exported: the replay's --match-only)
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import AcceptanceModel, DraftPolicy, PolicyOptions, WordPieces, e_bucket
from fucina.speculative.sam import SamIndex
from fucina.speculative.source import held

from benchmarks.replay.inputs import Stream
from benchmarks.replay.tally import NO_DRAFT, WorkloadResult

__all__ = ["flat_table", "ceiling_steps", "match_only", "perfect_policy_cost", "replay_stream", "measure_priors"]

#: A token id no vocabulary has (SamIndex takes ids < 2**31), between documents of the ceiling's text.
_BOUNDARY = 2**31 - 1


def flat_table(max_rows: int = 64) -> CostTable:
    """A GPU-like table, C(n) = 1 + 0.03 (n - 1): verifies nearly free, so drafts' quality decides."""
    return CostTable(tuple((n, 1 + 0.03 * (n - 1)) for n in range(2, max_rows + 1)),
                     "flat: C(n) = 1 + 0.03 (n - 1)")


def ceiling_steps(prompt: Sequence[int], continuation: Sequence[int], cap: int,
                  earlier: Sequence[Sequence[int]] = ()) -> list[int]:
    """The retrieval ceiling's walk: the prefix length L each step would accept (it commits L + 1).

    At each position, L = the longest prefix (<= ``cap``) of the rest of the continuation that
    occurs in the text before the position (``earlier`` documents, the prompt, the continuation so
    far). E.g. prompt [1, 2, 3], continuation [1, 2, 3, 4]: L = 3 (commit 1 2 3 4), one step.
    """
    sam = SamIndex()
    for doc in earlier:
        sam.extend_many(doc)
        sam.extend(_BOUNDARY)  # no match spans two requests, as in the cross-request index
    sam.extend_many(prompt)
    out: list[int] = []
    i, n = 0, len(continuation)
    while i < n:
        L = sam.longest_prefix(continuation[i: i + cap])
        out.append(L)
        sam.extend_many(continuation[i: i + L + 1])
        i += L + 1
    return out


def _primed_index(stream: Stream, vocab_size: int, options: CascadeOptions | None,
                  ) -> tuple[SpeculationIndex, list[int], int]:
    """A fresh index holding the stream's references and prompt: (index, prompt + continuation,
    the first scored position). Nothing can be drafted before the first token, so an empty
    prompt lends the continuation's first token the prompt's role."""
    idx = SpeculationIndex(vocab_size, options)
    for ref in stream.references:
        idx.add_reference(ref)
    full = stream.prompt + stream.continuation
    start = max(1, len(stream.prompt)) if full else 0
    if start:
        idx.observe_fed(full[:start])
    return idx, full, start


def perfect_policy_cost(stream: Stream, vocab_size: int, table: CostTable, *, budget: int = 16,
                        options: CascadeOptions | None = None, min_draft: int = 2) -> float:
    """Cost of the stream's continuation under ``table`` when each step's draft is verified
    exactly as far as it is accepted (at least ``min_draft`` tokens: k = max(a, min_draft)) if
    that pays, ``(a + 1) / C(k + 1) > 1``, and stepped plainly otherwise. E.g. a draft accepted 3
    deep under C(4) = 2.5 is verified (4 tokens for 2.5); one accepted 0 deep never is."""
    idx, full, i = _primed_index(stream, vocab_size, options)
    cost = 0.0
    while i < len(full):
        draft = list(idx.draft(full[:i], budget).tokens)
        a = held(draft, full[i:])
        k = max(a, min_draft)
        if a and k <= len(draft) and a + 1 > table.cost(k + 1):
            idx.truncate_pending(k)
            cost += table.cost(k + 1)
            n = a + 1
        else:
            idx.truncate_pending(0)
            cost += 1.0
            n = 1
        idx.observe(full[i: i + n])
        i += n
    return cost


def replay_stream(stream: Stream, vocab_size: int, result: WorkloadResult, *, budget: int = 16,
                  synth_topk: bool = False, options: CascadeOptions | None = None,
                  table: CostTable | None = None, cross_request_tokens: int | None = None,
                  use_policy: bool = True, acceptance: AcceptanceModel | None = None,
                  policy_options: PolicyOptions | None = None,
                  pieces: WordPieces | None = None) -> None:
    """Replay one stream through a fresh SpeculationIndex, adding its tallies to ``result``.

    With ``table`` every step is priced under it and (unless ``use_policy`` is false) the drafting
    policy chooses each verified length; otherwise every candidate is verified whole (the index's
    raw acceptance). With ``cross_request_tokens`` the stream's ``earlier`` requests are a
    cross-request source. ``acceptance``: the policy's learned acceptance, shared across the
    streams of a workload as one LLM shares it across its calls. ``pieces``: the tokenizer's word
    pieces, as the decoder gives its policy (None for synthetic ids).
    """
    idx, full, start = _primed_index(stream, vocab_size, options)
    if cross_request_tokens is not None and stream.earlier:
        from fucina.speculative.crossreq import CrossRequestIndex

        cross = CrossRequestIndex(cross_request_tokens)
        for doc in stream.earlier:
            cross.add(doc)
        snap = cross.snapshot()
        if snap is not None:
            idx.set_cross_request(snap)
    popts = dataclasses.replace(policy_options or PolicyOptions(), max_draft=budget)
    policy = (DraftPolicy(table, popts, acceptance=acceptance, sampled=stream.sampled, pieces=pieces)
              if table is not None and use_policy else None)
    k_top = idx.recycling.k if idx.recycling is not None else 0
    successors: dict[int, Counter[int]] = defaultdict(Counter)
    if synth_topk:
        for a, b in zip(full[: start - 1], full[1:start]):
            successors[a][b] += 1
    clock = time.perf_counter_ns
    i = start
    result.streams += 1
    result.tokens += len(full) - start
    while i < len(full):
        conf = idx.confidence()  # the lanes tally every step by it, a plain one too (no offer then)
        t0 = clock()
        offer = idx.draft(full[:i], budget)
        draft = list(offer.tokens)
        source = offer.kind or NO_DRAFT
        k = len(draft)
        if policy is not None:
            k = policy.choose(draft, conf, offer.kind, forks=offer.forks)
            if k < len(draft):
                idx.truncate_pending(k)
            draft = draft[:k]
            if not k:
                source = NO_DRAFT
        accepted = held(draft, full[i:])
        commit = full[i: i + accepted + 1]
        idx.observe(commit)
        if policy is not None:
            policy.observe(commit)
        t1 = clock()
        if synth_topk and k_top:
            _feed_synthetic_topk(idx, full, i, len(commit), successors, k_top)
        for tally in (result.sources[source], result.lanes[e_bucket(conf)]):
            tally.steps += 1
            tally.drafted += len(draft)
            tally.accepted += accepted
            tally.ns += t1 - t0
        if table is not None:
            result.cost += table.cost(len(draft) + 1) if draft else 1.0
        result.steps += 1
        result.ns += t1 - t0
        i += len(commit)
    if table is not None:
        earlier = stream.earlier if cross_request_tokens is not None else ()
        walk = ceiling_steps(full[:start], full[start:], budget, earlier)
        result.ceiling_steps += len(walk)
        result.ceiling_cost += sum(table.cost(L + 1) if L else 1.0 for L in walk)
        if cross_request_tokens is None:
            result.perfect_cost += perfect_policy_cost(stream, vocab_size, table, budget=budget, options=options)


def _feed_synthetic_topk(idx: SpeculationIndex, full: list[int], i: int, n: int,
                         successors: dict[int, Counter[int]], k: int) -> None:
    # The verify rows of this step had inputs full[i-1 : i+n-1] (the carried token and the
    # accepted drafts); a greedy verifier's top-1 for each is the token that followed.
    inputs = full[i - 1: i + n - 1]
    rows = np.empty((len(inputs), k), dtype=np.int64)
    for r, (a, b) in enumerate(zip(inputs, full[i: i + n])):
        successors[a][b] += 1
        runners = [t for t, _ in successors[a].most_common(k) if t != b][: k - 1]
        row = [b, *runners]
        # Pad with the top-1 so every row is full width (duplicates are harmless for a walk).
        rows[r] = row + [b] * (k - len(row))
    idx.observe_topk(inputs, rows)


def measure_priors(streams: Sequence[Stream], vocab_size: int, *, budget: int,
                   options: CascadeOptions | None = None,
                   pieces: WordPieces | None = None) -> dict[str, tuple[int, int]]:
    """Per-bucket (hits, trials) with every position's candidate scored against the stream.

    The stream is walked one token at a time and nothing is verified, so each position offers the
    candidate the decoder would see there: the policy's PRIOR_ACCEPTANCE comes from this.
    """
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in streams:
        idx, full, i = _primed_index(s, vocab_size, options)
        policy = DraftPolicy(flat_table(), PolicyOptions(max_draft=budget), pieces=pieces)
        while i < len(full):
            offer = idx.draft(full[:i], budget)
            policy.choose(list(offer.tokens), idx.confidence(), offer.kind, forced=True, forks=offer.forks)
            idx.truncate_pending(0)
            idx.observe(full[i: i + 1])
            policy.observe(full[i: i + 1])
            i += 1
        for buckets in policy.learned().values():
            for label, (h, n) in buckets.items():
                total[label][0] += h
                total[label][1] += n
    return {k: (v[0], v[1]) for k, v in total.items()}
