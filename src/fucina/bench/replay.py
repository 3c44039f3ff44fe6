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

Recycling gets no verify-row top-K in replay unless ``--synth-topk`` is given. With it, every
committed input token's row is synthesized the way a greedy verifier would fill it: top-1 = the
token that actually followed, then that token's most frequent successors seen so far in the
stream. Without it recycling learns from committed bigrams (move-to-front) only.

Workloads:
  * files of whitespace-separated token ids (positional; the whole file is the continuation);
  * ``--from-bench``: the Spec-Bench dev questions (``spec_bench_dev.jsonl``), grouped by their
    ``group`` field; the joined ``turns`` are the prompt and the ``reference`` answer is the
    continuation (rows without a reference are skipped). Tokenized with the default model's
    tokenizer (``fucina.catalog.load_tokenizer``);
  * synthetic copy/edit transcripts (always, unless ``--no-synthetic``): a document, then the
    same document with small edits, once with the document in the prompt ("copy-edit") and once
    injected as a reference instead ("ref-edit").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from fucina.speculative.cascade import CascadeOptions, SpeculationIndex
from fucina.speculative.gate import GateOptions, lane_index, lane_label

__all__ = ["Stream", "SourceTally", "WorkloadResult", "replay_stream", "synthetic_edit_streams",
           "main"]

BENCH_FILE = "spec_bench_dev.jsonl"
NO_DRAFT = "none"


@dataclass
class Stream:
    """One conversation to replay."""

    prompt: list[int]
    continuation: list[int]
    references: list[list[int]] = field(default_factory=list)


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
    sources: dict[str, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))
    #: The same steps keyed by gate lane (the cascade's confidence), see LANE_EDGES.
    lanes: dict[int, SourceTally] = field(default_factory=lambda: defaultdict(SourceTally))

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "streams": self.streams, "tokens": self.tokens, "steps": self.steps,
            "tokens_per_step": self.tokens / self.steps if self.steps else 0.0,
            "us_per_step": self.ns / 1e3 / self.steps if self.steps else 0.0,
            "sources": {k: v.as_dict() for k, v in sorted(self.sources.items())},
            "lanes": {lane_label(LANE_EDGES, k): v.as_dict() for k, v in sorted(self.lanes.items())},
        }


#: Gate lane edges the replay tallies by (the decoder's defaults).
LANE_EDGES = GateOptions().lanes


def replay_stream(stream: Stream, vocab_size: int, result: WorkloadResult, budget: int = 16,
                  synth_topk: bool = False, options: CascadeOptions | None = None) -> None:
    """Replay one stream through a fresh SpeculationIndex, adding its tallies to ``result``."""
    idx = SpeculationIndex(vocab_size, options)
    for ref in stream.references:
        idx.add_reference(ref)
    full = stream.prompt + stream.continuation
    start = len(stream.prompt)
    if start == 0:
        # Nothing can be drafted before the first token; it plays the role of the prompt.
        start = 1 if full else 0
    if start:
        idx.observe(full[:start])
    k = idx.recycling.k if idx.recycling is not None else 0
    successors: dict[int, Counter[int]] = defaultdict(Counter)
    if synth_topk:
        for a, b in zip(full[: start - 1], full[1:start]):
            successors[a][b] += 1
    clock = time.perf_counter_ns
    i = start
    result.streams += 1
    result.tokens += len(full) - start
    while i < len(full):
        lane = lane_index(LANE_EDGES, idx.confidence())
        t0 = clock()
        draft = idx.suggest(full[:i], budget)
        source = idx.last_source or NO_DRAFT
        accepted = 0
        for d, t in zip(draft, full[i:]):
            if d != t:
                break
            accepted += 1
        commit = full[i: i + accepted + 1]
        idx.observe(commit)
        t1 = clock()
        if synth_topk and k:
            _feed_synthetic_topk(idx, full, i, len(commit), successors, k)
        for tally in (result.sources[source], result.lanes[lane]):
            tally.steps += 1
            tally.drafted += len(draft)
            tally.accepted += accepted
            tally.ns += t1 - t0
        result.steps += 1
        result.ns += t1 - t0
        i += len(commit)


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


def format_table(results: Sequence[WorkloadResult], budget: int, synth_topk: bool) -> str:
    """The human-readable report."""
    topk = "synthesized from the stream's bigrams" if synth_topk else "none (committed bigrams only)"
    lines = [f"replay: budget {budget}; recycling top-K: {topk}",
             f"{'workload / source':<26}{'steps':>8}{'tokens':>9}{'tok/step':>10}{'µs/step':>10}"
             f"{'drafted':>9}{'accept':>8}{'mean acc':>10}"]
    for r in results:
        d = r.as_dict()
        lines.append(f"{r.name:<26}{r.steps:>8}{r.tokens:>9}{d['tokens_per_step']:>10.2f}"
                     f"{d['us_per_step']:>10.1f}")
        for name, tally in sorted(r.sources.items()):
            s = tally.as_dict()
            acc = f"{s['acceptance']:>8.1%}" if tally.drafted else f"{'-':>8}"
            mean = f"{s['mean_accepted']:>10.2f}" if name != NO_DRAFT else f"{'-':>10}"
            lines.append(f"  {name:<24}{tally.steps:>8}{'':>9}{'':>10}{s['us_per_step']:>10.1f}"
                         f"{tally.drafted:>9}{acc}{mean}")
        for lane, tally in sorted(r.lanes.items()):
            if tally.drafted:
                s = tally.as_dict()
                lines.append(f"  {'lane ' + lane_label(LANE_EDGES, lane):<24}{tally.steps:>8}{'':>9}{'':>10}{'':>10}"
                             f"{tally.drafted:>9}{s['acceptance']:>8.1%}{s['mean_accepted']:>10.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fucina.bench.replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="files of whitespace-separated token ids")
    ap.add_argument("--from-bench", action="store_true", help=f"replay {BENCH_FILE}")
    ap.add_argument("--bench-dir", type=Path, default=None,
                    help=f"directory holding {BENCH_FILE} (required with --from-bench)")
    ap.add_argument("--limit", type=int, default=None, help="bench rows per group")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the copy/edit transcripts")
    ap.add_argument("--budget", type=int, default=16, help="caller draft budget per step")
    ap.add_argument("--no-recycling", action="store_true",
                    help="cascade without the recycling fallback (SAM sources only, as on CPU tables)")
    ap.add_argument("--synth-topk", action="store_true",
                    help="feed recycling top-K rows synthesized from the stream's own bigrams")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="index vocabulary (default: the tokenizer's, else max id + 1)")
    ap.add_argument("--seed", type=int, default=0, help="synthetic transcript seed")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = ap.parse_args(argv)
    if a.budget < 1:
        ap.error("--budget must be >= 1")

    workloads: dict[str, list[Stream]] = {}
    vocab = a.vocab_size
    for path in a.files:
        workloads[path.name] = [Stream(prompt=[], continuation=read_token_file(path))]
    skipped = 0
    if a.from_bench and a.bench_dir is None:
        ap.error("--from-bench needs --bench-dir DIR (the directory holding the Spec-Bench data)")
    if a.from_bench:
        try:
            from fucina.catalog import load_tokenizer

            tok = load_tokenizer(None)
        except Exception as exc:  # any failure means: no tokenizer on this machine
            print(f"replay: cannot load the tokenizer for --from-bench: {exc}", file=sys.stderr)
            return 2
        if not (a.bench_dir / BENCH_FILE).is_file():
            print(f"replay: no {BENCH_FILE} in {a.bench_dir}", file=sys.stderr)
            return 2
        vocab = vocab or tok.vocab_size
        bench, skipped = bench_streams(a.bench_dir, tok.tokenize, a.limit)
        workloads.update(bench)
    if not a.no_synthetic:
        workloads.update(synthetic_edit_streams(seed=a.seed))
    if not workloads:
        print("replay: nothing to replay (give token files, --from-bench, or drop --no-synthetic)",
              file=sys.stderr)
        return 2

    results = []
    for name, streams in workloads.items():
        result = WorkloadResult(name)
        for s in streams:
            ids = s.prompt + s.continuation + [t for r in s.references for t in r]
            v = vocab or (max(ids, default=0) + 1)
            replay_stream(s, v, result, budget=a.budget, synth_topk=a.synth_topk,
                          options=CascadeOptions(recycling=not a.no_recycling))
        results.append(result)

    if a.json:
        print(json.dumps({"budget": a.budget, "synth_topk": a.synth_topk, "recycling": not a.no_recycling,
                          "bench_rows_skipped": skipped,
                          "workloads": [r.as_dict() for r in results]}, indent=2))
    else:
        print(format_table(results, a.budget, a.synth_topk))
        if skipped:
            print(f"({skipped} bench rows without a reference answer skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
