"""Model-free replay benchmark of the speculation cascade: ``python -m fucina.bench.replay``.

Each workload is a set of token streams. A stream is a prompt (observed in one call, not scored)
and a continuation that is replayed as if a model had generated it and every draft had been
verified against it:

    at position i:  draft = suggest(stream[:i], budget)
                    accepted = common prefix of draft and stream[i:]
                    observe(stream[i : i + accepted + 1])      # accepted + the correction token

so a step commits ``accepted + 1`` tokens, exactly as the decoder would with a model that always
produces the stream. No model runs, so the numbers are the index's upper bound: the acceptance
a perfectly predictable "model" would give, and the index's own overhead per step.

With a cost table (``--cost-table FILE`` or ``--flat``, the GPU-like C(n) = 1 + 0.03 (n - 1)) the
decoder's :class:`~fucina.speculative.policy.DraftPolicy` is in the loop: each step's candidate is
offered to it and only the ``k`` it chooses is "verified" (k = 0: a plain step). Every step is
priced under the table (C(k + 1) per verify, 1 per plain step) and the projected speedup is
tokens / total cost. Beside it, the retrieval ceiling: walking the stream, at each position the
longest prefix of what comes next that occurs anywhere before it (capped at the budget), so a
step commits that prefix + 1; the best any single-chain index over the same text could do.
And the perfect policy: the index's own drafts, each verified exactly as far as it is accepted
when that pays under the table (a plain step otherwise): the best any decision rule could make
of these drafts, so the gap to it is the policy's and the gap above it the drafts'.

Recycling gets no verify-row top-K in replay unless ``--synth-topk`` is given. With it, every
committed input token's row is synthesized the way a greedy verifier would fill it: top-1 = the
token that actually followed, then that token's most frequent successors seen so far in the
stream. Without it recycling learns from committed bigrams (move-to-front) only.

Workloads:
  * files of whitespace-separated token ids (positional; the whole file is the continuation);
  * ``--traces FILE``: recorded agent requests (JSONL with ``source``, ``trajectory``, ``step``,
    ``context``, ``output``), one workload per ``source``; the context (its last
    ``--context-tokens``) is the prompt and the recorded output the continuation. With
    ``--cross-request`` each request also drafts from its trajectory's earlier requests (contexts
    and outputs) through one tenant's cross-request index;
  * ``--from-bench``: the Spec-Bench dev questions (``spec_bench_dev.jsonl``), grouped by their
    ``group`` field; the joined ``turns`` are the prompt and the ``reference`` answer is the
    continuation (rows without a reference are skipped). Tokenized with the default model's
    tokenizer (``fucina.catalog.load_tokenizer``);
  * ``--streams FILE``: a model's own plain outputs of the bench tasks, recorded by
    ``python -m fucina.bench.streams`` (prompt through the chat template, references), one
    workload per task group: what an instruct model writes, not what a reference answer copies;
  * synthetic copy/edit transcripts (always, unless ``--no-synthetic``): a document, then the
    same document with small edits, once with the document in the prompt ("copy-edit") and once
    injected as a reference instead ("ref-edit").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from fucina.errors import FucinaError

from fucina.speculative.cascade import CascadeOptions, SpeculationIndex
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import (N_BUCKETS, N_CLASSES, AcceptanceModel, DraftPolicy, PolicyOptions,
                                       WordPieces, e_bucket, e_label)
from fucina.speculative.sam import SamIndex

__all__ = ["Stream", "SourceTally", "WorkloadResult", "replay_stream", "synthetic_edit_streams",
           "trace_streams", "recorded_streams", "read_recorded", "flat_table", "ceiling_steps",
           "perfect_policy_cost", "match_only", "task_medians", "main"]

BENCH_FILE = "spec_bench_dev.jsonl"
NO_DRAFT = "none"
#: Context tokens a trace request keeps (its last ones), as the issue's measurement did.
TRACE_CONTEXT_TOKENS = 6000
#: A token id no vocabulary has (SamIndex takes ids < 2**31), between documents of the ceiling's text.
_BOUNDARY = 2**31 - 1


def flat_table(max_rows: int = 64) -> CostTable:
    """A GPU-like table, C(n) = 1 + 0.03 (n - 1): verifies nearly free, so drafts' quality decides."""
    return CostTable(tuple((n, 1 + 0.03 * (n - 1)) for n in range(2, max_rows + 1)),
                     "flat: C(n) = 1 + 0.03 (n - 1)")


@dataclass
class Stream:
    """One conversation to replay."""

    prompt: list[int]
    continuation: list[int]
    references: list[list[int]] = field(default_factory=list)
    #: Earlier requests of the same tenant (each prompt + output), oldest first: the cross-request source.
    earlier: list[list[int]] = field(default_factory=list)
    #: The continuation was sampled (T > 0), so the policy prices it as a sampled generation.
    sampled: bool = False
    #: The task id of a recorded stream ("" when the workload has none), for ``--per-task``.
    name: str = ""


@dataclass
class SourceTally:
    """What one source did across a workload.

    ``steps`` counts the steps this source drafted (for ``none``: the steps nobody drafted);
    ``mean_accepted`` is accepted tokens per such step.
    """

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    ns: int = 0  # suggest + observe wall time of the steps this source drafted

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps, "drafted": self.drafted, "accepted": self.accepted,
            "acceptance": self.accepted / self.drafted if self.drafted else 0.0,
            "mean_accepted": self.accepted / self.steps if self.steps else 0.0,
            "us_per_step": self.ns / 1e3 / self.steps if self.steps else 0.0,
        }


@dataclass
class WorkloadResult:
    """Totals and per-source tallies of one workload."""

    name: str
    streams: int = 0
    tokens: int = 0  # replayed (scored) tokens
    steps: int = 0
    ns: int = 0
    cost: float = 0.0  # plain-step equivalents under the pricing table (0 without one)
    ceiling_steps: int = 0
    ceiling_cost: float = 0.0
    perfect_cost: float = 0.0  # the perfect policy's cost over the same drafts (0 without a table)
    sources: dict[str, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))
    #: The same steps keyed by the confidence bucket (match length) of the candidate.
    lanes: dict[int, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "name": self.name, "streams": self.streams, "tokens": self.tokens, "steps": self.steps,
            "tokens_per_step": self.tokens / self.steps if self.steps else 0.0,
            "us_per_step": self.ns / 1e3 / self.steps if self.steps else 0.0,
            "sources": {k: v.as_dict() for k, v in sorted(self.sources.items())},
            "lanes": {e_label(k): v.as_dict() for k, v in sorted(self.lanes.items())},
        }
        if self.cost:
            d["projected_speedup"] = self.tokens / self.cost
        if self.perfect_cost:
            d["perfect_policy_speedup"] = self.tokens / self.perfect_cost
        if self.ceiling_steps:
            d["ceiling_tokens_per_step"] = self.tokens / self.ceiling_steps
            d["ceiling_speedup"] = self.tokens / self.ceiling_cost if self.ceiling_cost else None
        return d


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


def match_only(cascade: CascadeOptions, policy: PolicyOptions) -> tuple[CascadeOptions, PolicyOptions]:
    """The ``match_only`` ablation of given options: drafts priced on match length alone (no fork
    flags or word pieces, no resume source, sampled and greedy generations learned together). ``fucina bench
    --methods match_only`` and ``replay --match-only`` both take it from here."""
    return (dataclasses.replace(cascade, forks=False, resume=False),
            dataclasses.replace(policy, split_sampled=False, word_pieces=False))


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
        idx.observe(full[:start])
    return idx, full, start


def _accepted(draft: Sequence[int], actual: Sequence[int]) -> int:
    """Length of the common prefix of a draft and what was actually committed there."""
    n = 0
    for d, t in zip(draft, actual):
        if d != t:
            break
        n += 1
    return n


def perfect_policy_cost(stream: Stream, vocab_size: int, table: CostTable, budget: int = 16,
                        options: CascadeOptions | None = None, min_draft: int = 2) -> float:
    """Cost of the stream's continuation under ``table`` when each step's draft is verified
    exactly as far as it is accepted (at least ``min_draft`` tokens: k = max(a, min_draft)) if
    that pays, ``(a + 1) / C(k + 1) > 1``, and stepped plainly otherwise. E.g. a draft accepted 3
    deep under C(4) = 2.5 is verified (4 tokens for 2.5); one accepted 0 deep never is."""
    idx, full, i = _primed_index(stream, vocab_size, options)
    cost = 0.0
    while i < len(full):
        draft = idx.suggest(full[:i], budget)
        a = _accepted(draft, full[i:])
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


def replay_stream(stream: Stream, vocab_size: int, result: WorkloadResult, budget: int = 16,
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
        conf = idx.confidence()
        t0 = clock()
        draft = idx.suggest(full[:i], budget)
        source = idx.last_source or NO_DRAFT
        k = len(draft)
        if policy is not None:
            k = policy.choose(draft, conf, idx.last_source, forks=idx.last_forks)
            if k < len(draft):
                idx.truncate_pending(k)
            draft = draft[:k]
            if not k:
                source = NO_DRAFT
        accepted = _accepted(draft, full[i:])
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
            result.perfect_cost += perfect_policy_cost(stream, vocab_size, table, budget, options)


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


def synthetic_edit_streams(seed: int = 0, n_tokens: int = 2000, vocab: int = 32000,
                           ) -> dict[str, list[Stream]]:
    """A document and its lightly edited copy, as "copy-edit" and "ref-edit" workloads."""
    rng = np.random.default_rng(seed)
    # Zipf-like ids so frequent tokens recur, as in text; capped into the vocabulary.
    doc = [int(t) for t in np.minimum(rng.zipf(1.3, n_tokens), vocab - 1)]
    edited: list[int] = []
    pos = 0
    while pos < len(doc):
        run = int(rng.integers(40, 160))
        edited.extend(doc[pos: pos + run])
        pos += run
        kind = rng.integers(3)
        span = int(rng.integers(1, 6))
        new = [int(t) for t in rng.integers(0, vocab, span)]
        if kind == 0:  # replace
            edited.extend(new)
            pos += span
        elif kind == 1:  # insert
            edited.extend(new)
        else:  # delete
            pos += span
    return {
        "copy-edit": [Stream(prompt=doc, continuation=edited)],
        "ref-edit": [Stream(prompt=[], continuation=edited, references=[doc])],
    }


def read_token_file(path: Path) -> list[int]:
    """Whitespace-separated token ids."""
    return [int(t) for t in path.read_text(encoding="utf-8").split()]


def _strings(value: object) -> Iterable[str]:
    # Spec-Bench fields are a string, a list of strings, or (rag) a list of lists of strings.
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def bench_streams(bench_dir: Path, tokenize, limit: int | None) -> tuple[dict[str, list[Stream]], int]:
    """Spec-Bench rows grouped by ``group``; returns the workloads and the rows skipped."""
    workloads: dict[str, list[Stream]] = defaultdict(list)
    skipped = 0
    with open(bench_dir / BENCH_FILE, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            answer = "\n".join(_strings(row.get("reference")))
            group = f"bench:{row.get('group', 'unknown')}"
            if not answer.strip():
                skipped += 1
                continue
            if limit is not None and len(workloads[group]) >= limit:
                continue
            prompt = "\n\n".join(_strings(row.get("turns")))
            workloads[group].append(Stream(prompt=tokenize(prompt, add_bos=True),
                                           continuation=tokenize(answer, add_bos=False)))
    return dict(workloads), skipped


def trace_streams(path: Path, tokenize, context_tokens: int = TRACE_CONTEXT_TOKENS,
                  ) -> dict[str, list[Stream]]:
    """Agent trace requests grouped by ``source`` (``trace:aider``, ...), in trajectory order.

    Each stream's ``earlier`` holds its trajectory's previous requests (context + output, the
    context cut like the prompt), for the cross-request source set.
    """
    rows = read_jsonl(path, "trace row", lambda row: (str(row["source"]), str(row["trajectory"]),
                                                      int(row["step"]), str(row["context"]), str(row["output"])))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    workloads: dict[str, list[Stream]] = defaultdict(list)
    history: dict[tuple[str, str], list[list[int]]] = defaultdict(list)
    for source, trajectory, _, context, output in rows:
        prompt = tokenize(context, add_bos=True)[-context_tokens:]
        answer = tokenize(output, add_bos=False)
        if not answer:
            continue
        earlier = history[(source, trajectory)]
        workloads[f"trace:{source}"].append(Stream(prompt=prompt, continuation=answer, earlier=list(earlier)))
        earlier.append(prompt + answer)
    return dict(workloads)


def recorded_streams(path: Path) -> dict[str, list[Stream]]:
    """Streams recorded by ``python -m fucina.bench.streams``, grouped as ``stream:<group>``."""
    return read_recorded(path)[0]


def read_recorded(path: Path) -> tuple[dict[str, list[Stream]], str | None]:
    """A stream file in one pass: its streams (as :func:`recorded_streams`) and the model that wrote
    them (its lines' ``model``; None for a file from before the field). ValueError if its lines
    name different models."""
    def parse(row: dict) -> tuple[str, Stream, object]:
        return (str(row["group"]), Stream(prompt=_ids(row["prompt"]), continuation=_ids(row["output"]),
                                          references=[_ids(r) for r in row.get("references", [])],
                                          sampled=float(row.get("temperature", 0.0)) > 0,
                                          name=str(row.get("id", ""))),
                row.get("model"))

    workloads: dict[str, list[Stream]] = defaultdict(list)
    models = set()
    for group, stream, model in read_jsonl(path, "recorded stream", parse):
        if model is not None:
            models.add(str(model))
        if stream.continuation:
            workloads[f"stream:{group}"].append(stream)
    if len(models) > 1:
        raise ValueError(f"{path}: streams from several models ({', '.join(sorted(models))}); "
                         "record one file per model")
    return dict(workloads), (models.pop() if models else None)


def read_jsonl(path: Path, what: str, parse) -> list:
    """``parse(row)`` of every non-empty line of a JSONL file; a bad line raises ValueError naming
    ``path:line`` and ``what`` it should have been."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(parse(json.loads(line)))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: not a {what} ({exc})") from exc
    return out


#: Bucket id of each label ``e_label`` gives (fork classes included), to print buckets in order.
_BUCKET_OF_LABEL = {e_label(b): b for b in range(N_CLASSES * N_BUCKETS)}


def _ids(values) -> list[int]:
    return [int(t) for t in values]


def format_table(results: Sequence[WorkloadResult], budget: int, synth_topk: bool,
                 table: CostTable | None = None, policy: bool = True) -> str:
    """The human-readable report."""
    topk = "synthesized from the stream's bigrams" if synth_topk else "none (committed bigrams only)"
    head = f"replay: budget {budget}; recycling top-K: {topk}"
    if table is not None:
        how = "the drafting policy chooses what is verified" if policy else "every candidate verified whole"
        head += f"\n{how}; priced under: {table.source or 'a cost table'}"
    lines = [head, f"{'workload / source':<30}{'steps':>8}{'tokens':>9}{'tok/step':>10}{'µs/step':>10}"
             f"{'drafted':>9}{'accept':>8}{'mean acc':>10}{'speedup':>9}{'perfect':>9}{'ceiling':>15}"]
    for r in results:
        d = r.as_dict()
        proj = f"{d['projected_speedup']:>8.2f}x" if "projected_speedup" in d else f"{'':>9}"
        proj += f"{d['perfect_policy_speedup']:>8.2f}x" if "perfect_policy_speedup" in d else f"{'':>9}"
        ceil = (f"{d['ceiling_tokens_per_step']:>6.2f} {d['ceiling_speedup']:>6.2f}x"
                if r.ceiling_steps and table is not None else "")
        lines.append(f"{r.name:<30}{r.steps:>8}{r.tokens:>9}{d['tokens_per_step']:>10.2f}"
                     f"{d['us_per_step']:>10.1f}{'':>9}{'':>8}{'':>10}{proj}{ceil:>15}")
        for name, tally in sorted(r.sources.items()):
            s = tally.as_dict()
            acc = f"{s['acceptance']:>8.1%}" if tally.drafted else f"{'-':>8}"
            mean = f"{s['mean_accepted']:>10.2f}" if name != NO_DRAFT else f"{'-':>10}"
            lines.append(f"  {name:<28}{tally.steps:>8}{'':>9}{'':>10}{s['us_per_step']:>10.1f}"
                         f"{tally.drafted:>9}{acc}{mean}")
        for lane, tally in sorted(r.lanes.items()):
            if tally.drafted:
                s = tally.as_dict()
                lines.append(f"  {'confidence ' + e_label(lane):<28}{tally.steps:>8}{'':>9}{'':>10}{'':>10}"
                             f"{tally.drafted:>9}{s['acceptance']:>8.1%}{s['mean_accepted']:>10.2f}")
    return "\n".join(lines)


def measure_priors(streams: Sequence[Stream], vocab_size: int, budget: int,
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
            policy.choose(idx.suggest(full[:i], budget), idx.confidence(), idx.last_source, forced=True,
                          forks=idx.last_forks)
            idx.truncate_pending(0)
            idx.observe(full[i: i + 1])
            policy.observe(full[i: i + 1])
            i += 1
        for buckets in policy.learned().values():
            for label, (h, n) in buckets.items():
                total[label][0] += h
                total[label][1] += n
    return {k: (v[0], v[1]) for k, v in total.items()}


def task_medians(results: Sequence[WorkloadResult], task_of: dict[str, str]) -> dict[str, float]:
    """Per workload, the median over its streams' rows of the projected speedup, and ``all`` over
    every row: the median of per-task ratios, as ``fucina bench`` reports (an aggregate ratio is
    carried by the easiest stream). E.g. rows of 1.0x, 1.2x and 3.0x give 1.2x, where their tokens
    over their cost might give 2x."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.cost:
            by[task_of.get(r.name, r.name)].append(r.tokens / r.cost)
    out = {n: statistics.median(v) for n, v in by.items()}
    if by:
        out["all"] = statistics.median([x for v in by.values() for x in v])
    return out


#: The tokenizer of --from-bench and --traces when none is named: the instruct model's.
DEFAULT_TOKENIZER = "smollm2-135m"


def _same_model(a: str, b: str) -> bool:
    """Two spellings of one model: equal, or the same GGUF file once resolved (a relative path
    against the absolute one a stream file records)."""
    from fucina.catalog import resolve_model

    if a == b:
        return True
    try:
        return resolve_model(a).resolve() == resolve_model(b).resolve()
    except FucinaError:  # ModelNotFound: one of them names nothing here, so they cannot be shown equal
        return False


def _load_tokenizer(model: str | None):
    from fucina.catalog import load_tokenizer

    return load_tokenizer(model)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fucina.bench.replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="files of whitespace-separated token ids")
    ap.add_argument("--from-bench", action="store_true", help=f"replay {BENCH_FILE}")
    ap.add_argument("--bench-dir", type=Path, default=None,
                    help=f"directory holding {BENCH_FILE} (required with --from-bench)")
    ap.add_argument("--limit", type=int, default=None, help="bench rows per group")
    ap.add_argument("--traces", type=Path, default=None, help="agent trace JSONL to replay (see above)")
    ap.add_argument("--context-tokens", type=int, default=TRACE_CONTEXT_TOKENS,
                    help="context tokens a trace request keeps (its last ones)")
    ap.add_argument("--streams", type=Path, default=None,
                    help="a model's recorded outputs of the bench tasks (python -m fucina.bench.streams)")
    ap.add_argument("--cross-request", type=int, default=None, metavar="TOKENS",
                    help="also replay each trace request with its trajectory's earlier requests in a "
                         "cross-request index bounded to TOKENS")
    ap.add_argument("--model", default=None,
                    help="tokenizer for --from-bench/--traces and for the word pieces of those and of "
                         f"--streams (a catalog name or GGUF path; default: the model that wrote the "
                         f"streams, else {DEFAULT_TOKENIZER})")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the copy/edit transcripts")
    ap.add_argument("--budget", type=int, default=16, help="caller draft budget per step")
    ap.add_argument("--no-recycling", action="store_true",
                    help="cascade without the recycling fallback (SAM sources only, as on CPU tables)")
    ap.add_argument("--synth-topk", action="store_true",
                    help="feed recycling top-K rows synthesized from the stream's own bigrams")
    pricing = ap.add_mutually_exclusive_group()
    pricing.add_argument("--cost-table", type=Path, default=None,
                         help="a verify cost table (JSON, as cached by fucina): the policy chooses the "
                              "verified lengths and every step is priced under it")
    pricing.add_argument("--flat", action="store_true", help="the same under C(n) = 1 + 0.03 (n - 1)")
    ap.add_argument("--no-policy", action="store_true",
                    help="with a table: verify every candidate whole, priced under the table")
    ap.add_argument("--legacy-cascade", action="store_true",
                    help="the design record's selection constants (beta 2, matches from 2 tokens, muting "
                         "below 20%%), i.e. the cascade before the drafting policy")
    ap.add_argument("--match-only", action="store_true",
                    help="the policy priced on match length alone: no fork flags, no resume source, "
                         "sampled and greedy streams learned together (fucina bench's match_only)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="index vocabulary (default: the tokenizer's, else max id + 1)")
    ap.add_argument("--seed", type=int, default=0, help="synthetic transcript seed")
    ap.add_argument("--priors", action="store_true",
                    help="print the per-token acceptance by confidence bucket, every position scored "
                         "(how the policy's priors were measured) instead of replaying")
    ap.add_argument("--no-word-pieces", action="store_true",
                    help="price unique word pieces and word starts as one class (the policy before "
                         "word pieces)")
    ap.add_argument("--per-task", action="store_true",
                    help="one row per stream, then each workload's median over its streams of the "
                         "projected speedup (the per-task median fucina bench reports)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = ap.parse_args(argv)
    if a.budget < 1:
        ap.error("--budget must be >= 1")
    if a.context_tokens < 1:
        ap.error("--context-tokens must be >= 1")
    if a.cross_request is not None and a.cross_request < 1:
        ap.error("--cross-request must be >= 1 tokens")
    if a.cross_request is not None and a.traces is None:
        ap.error("--cross-request needs --traces (the trajectories it draws earlier requests from)")
    if a.from_bench and a.bench_dir is None:
        ap.error("--from-bench needs --bench-dir DIR (the directory holding the Spec-Bench data)")
    table = flat_table() if a.flat else None
    if a.cost_table is not None:
        try:
            table = CostTable.load(a.cost_table)
        except FucinaError as exc:
            print(f"replay: {exc}", file=sys.stderr)
            return 2

    workloads: dict[str, list[Stream]] = {}
    vocab = a.vocab_size
    for path in a.files:
        workloads[path.name] = [Stream(prompt=[], continuation=read_token_file(path))]
    skipped = 0
    tok = None
    needs_tokenizer = a.from_bench or a.traces is not None
    wrote, recorded_workloads = None, {}
    if a.streams is not None:
        # The streams' ids are the tokenizer's that wrote them; another one would misread their pieces.
        try:
            recorded_workloads, wrote = read_recorded(a.streams)
        except (OSError, ValueError) as exc:
            print(f"replay: {exc}", file=sys.stderr)
            return 2
        if wrote is not None and a.model is not None and not _same_model(a.model, wrote):
            print(f"replay: {a.streams} was written by {wrote}; --model {a.model} would read its token ids "
                  "with another tokenizer (drop --model, or give that one)", file=sys.stderr)
            return 2
    tok_model = a.model or wrote or DEFAULT_TOKENIZER
    if needs_tokenizer or (a.streams is not None and not a.no_word_pieces):
        try:
            tok = _load_tokenizer(tok_model)
        except Exception as exc:  # any failure means: no tokenizer on this machine
            if needs_tokenizer:
                print(f"replay: cannot load the tokenizer ({tok_model}): {exc}", file=sys.stderr)
                return 2
            # Recorded streams are token ids already: only their word pieces are lost.
            print(f"replay: no tokenizer ({tok_model}: {exc}); streams replayed without word pieces",
                  file=sys.stderr)
        if needs_tokenizer:  # loaded, or we returned above
            vocab = vocab or tok.vocab_size
    # Word pieces for the workloads in the tokenizer's ids (not token files or synthetic ids).
    pieces = WordPieces(tok.token_bytes) if tok is not None and not a.no_word_pieces else None
    tokenized: set[str] = set()  # the workloads in the tokenizer's ids
    if a.from_bench:
        if not (a.bench_dir / BENCH_FILE).is_file():
            print(f"replay: no {BENCH_FILE} in {a.bench_dir}", file=sys.stderr)
            return 2
        bench, skipped = bench_streams(a.bench_dir, tok.tokenize, a.limit)
        workloads.update(bench)
        tokenized.update(bench)
    traces: dict[str, list[Stream]] = {}
    if a.traces is not None:
        try:
            traces = trace_streams(a.traces, tok.tokenize, a.context_tokens)
        except (OSError, ValueError) as exc:
            print(f"replay: {exc}", file=sys.stderr)
            return 2
        workloads.update(traces)
        tokenized.update(traces)
    workloads.update(recorded_workloads)
    tokenized.update(recorded_workloads)
    if not a.no_synthetic:
        workloads.update(synthetic_edit_streams(seed=a.seed))
    if not workloads:
        print("replay: nothing to replay (give token files, --from-bench, --traces, --streams, or drop --no-synthetic)",
              file=sys.stderr)
        return 2

    legacy = (dict(beta=2, min_match=2, mute_below=0.2, resume=False, forks=False) if a.legacy_cascade else {})
    opts, popts = CascadeOptions(recycling=not a.no_recycling, **legacy), PolicyOptions()
    if a.match_only:
        opts, popts = match_only(opts, popts)
    if a.priors:
        for name, streams in workloads.items():
            v = vocab or (max((t for s in streams for t in s.prompt + s.continuation), default=0) + 1)
            got = measure_priors(streams, v, a.budget, opts, pieces if name in tokenized else None)
            order = sorted(got, key=_BUCKET_OF_LABEL.__getitem__)
            print(f"{name}: " + " ".join(f"{lab} {got[lab][0] / got[lab][1]:.2f} ({got[lab][1]})" for lab in order))
        return 0
    runs: list[tuple[str, list[Stream], int | None]] = [(n, w, None) for n, w in workloads.items()]
    if a.cross_request is not None:
        runs += [(f"{n} +cross-request", w, a.cross_request) for n, w in traces.items()]
    task_of: dict[str, str] = {}  # with --per-task: a stream's row -> its workload
    if a.per_task:
        split = []
        for n, w, cross in runs:
            for i, s in enumerate(w):
                row = f"{n}:{s.name or i}"
                task_of[row] = n
                split.append((row, [s], cross))
        runs = split
    results = []
    # A model's recorded streams share one acceptance model across their groups, in file order, as
    # one LLM (and fucina bench, per method) shares it across its calls; other workloads start fresh.
    # With --per-task a workload's rows share its model, as its streams do without the flag.
    recorded = AcceptanceModel()
    per_workload: dict[str, AcceptanceModel] = defaultdict(AcceptanceModel)
    for name, streams, cross in runs:
        result = WorkloadResult(name)
        workload = task_of.get(name, name)
        base_name = workload.removesuffix(" +cross-request")
        learned = recorded if name.startswith("stream:") else per_workload[workload]
        for s in streams:
            ids = s.prompt + s.continuation + [t for r in s.references for t in r]
            v = vocab or (max(ids, default=0) + 1)
            replay_stream(s, v, result, budget=a.budget, synth_topk=a.synth_topk, options=opts,
                          table=table, cross_request_tokens=cross, use_policy=not a.no_policy,
                          acceptance=learned, policy_options=popts,
                          pieces=pieces if base_name in tokenized else None)
        results.append(result)

    medians = task_medians(results, task_of) if a.per_task and table is not None else {}
    if a.json:
        print(json.dumps({"budget": a.budget, "synth_topk": a.synth_topk, "recycling": not a.no_recycling,
                          "table": table.source if table is not None else None,
                          "bench_rows_skipped": skipped,
                          "workloads": [r.as_dict() for r in results],
                          **({"task_medians": medians} if medians else {})}, indent=2))
    else:
        print(format_table(results, a.budget, a.synth_topk, table, policy=not a.no_policy))
        if medians:
            print("median over tasks of the projected speedup: "
                  + ", ".join(f"{n} {v:.2f}x" for n, v in medians.items()))
        if skipped:
            print(f"({skipped} bench rows without a reference answer skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
