"""Model-free replay benchmark of the speculation cascade: ``python -m benchmarks.replay``.

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
    ``python -m benchmarks.streams`` (prompt through the chat template, references), one
    workload per task group: what an instruct model writes, not what a reference answer copies;
  * synthetic copy/edit transcripts (always, unless ``--no-synthetic``): a document, then the
    same document with small edits, once with the document in the prompt ("copy-edit") and once
    injected as a reference instead ("ref-edit").
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fucina.errors import FucinaError
from fucina.speculative.index import CascadeOptions
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import AcceptanceModel, PolicyOptions, WordPieces

from benchmarks.replay.inputs import (BENCH_FILE, TRACE_CONTEXT_TOKENS, Stream, Tokenizer, bench_streams,
                                        read_recorded, read_token_file, synthetic_edit_streams, trace_streams)
from benchmarks.replay.report import bound_medians, format_priors, json_report, task_medians, text_report
from benchmarks.replay.simulate import flat_table, match_only, measure_priors, replay_stream
from benchmarks.replay.tally import WorkloadResult

__all__ = ["DEFAULT_TOKENIZER", "main"]

#: The tokenizer of --from-bench and --traces when none is named: the instruct model's.
DEFAULT_TOKENIZER = "smollm2-135m"
#: What a trace workload's name gets when it is replayed again with --cross-request.
CROSS_REQUEST_SUFFIX = " +cross-request"


class _Refused(Exception):
    """An input the replay cannot use; main prints ``replay: <message>`` (one line) and exits 2."""


@dataclass(frozen=True)
class Workloads:
    """Every workload the command line names, in the order they are read (token files, Spec-Bench,
    traces, recorded streams, synthetic), and what reading them learned."""

    streams: dict[str, list[Stream]]
    #: The workloads in the tokenizer's ids: the only ones the word pieces apply to.
    tokenized: frozenset[str]
    #: The trace workloads alone (replayed a second time with --cross-request).
    traces: dict[str, list[Stream]]
    #: --vocab-size, else the tokenizer's when --from-bench/--traces loaded one; None: each stream's max id + 1.
    vocab_size: int | None
    #: The tokenizer's word pieces (None without a tokenizer or with --no-word-pieces).
    pieces: WordPieces | None
    bench_rows_skipped: int


@dataclass(frozen=True)
class _Run:
    """One row of the report: its streams, replayed with one acceptance model per ``workload``."""

    name: str
    streams: list[Stream]
    #: The cross-request index bound (None: the streams' earlier requests are not a source).
    cross_request_tokens: int | None
    #: The workload the row belongs to (the row's own name unless --per-task split it).
    workload: str


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__,
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
                    help="a model's recorded outputs of the bench tasks (python -m benchmarks.streams)")
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
    ap.add_argument("--no-realign", action="store_true",
                    help="cascade without the realign source (the ablation of a broken copy picked up again)")
    ap.add_argument("--no-rewrite", action="store_true",
                    help="cascade without rewrite rules (the ablation of drafts rewritten by the answer's edits)")
    ap.add_argument("--no-prompt", action="store_true",
                    help="cascade without the prompt source (the ablation of the prompt read as the copy had it)")
    pricing = ap.add_mutually_exclusive_group()
    pricing.add_argument("--cost-table", type=Path, default=None,
                         help="a verify cost table (JSON, as cached by fucina): the policy chooses the "
                              "verified lengths and every step is priced under it")
    pricing.add_argument("--flat", action="store_true", help="the same under C(n) = 1 + 0.03 (n - 1)")
    ap.add_argument("--no-policy", action="store_true",
                    help="with a table: verify every candidate whole, priced under the table")
    ap.add_argument("--match-only", action="store_true",
                    help="the policy priced on match length alone: no fork flags, no resume or realign source, "
                         "no rewrite rules, "
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
    ap.add_argument("--hindsight", action="store_true",
                    help="the policy's acceptance learned first, undiscounted, on the very streams it then "
                         "prices (true per-bucket rates): whether better estimates would close the gap "
                         "to the perfect decision")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return ap


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, checked: a contradiction exits 2 with argparse's usage line."""
    ap = _parser()
    args = ap.parse_args(argv)
    if args.budget < 1:
        ap.error("--budget must be >= 1")
    if args.context_tokens < 1:
        ap.error("--context-tokens must be >= 1")
    if args.cross_request is not None and args.cross_request < 1:
        ap.error("--cross-request must be >= 1 tokens")
    if args.cross_request is not None and args.traces is None:
        ap.error("--cross-request needs --traces (the trajectories it draws earlier requests from)")
    if args.from_bench and args.bench_dir is None:
        ap.error("--from-bench needs --bench-dir DIR (the directory holding the Spec-Bench data)")
    return args


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


def _load_tokenizer(model: str | None) -> Tokenizer:
    from fucina.catalog import load_tokenizer

    return load_tokenizer(model)


def _read_cost_table(args: argparse.Namespace) -> CostTable | None:
    """--flat's table, --cost-table's file, or None (no pricing)."""
    if args.cost_table is None:
        return flat_table() if args.flat else None
    try:
        return CostTable.load(args.cost_table)
    except FucinaError as exc:
        raise _Refused(str(exc)) from exc


def _read_token_files(paths: Sequence[Path]) -> dict[str, list[Stream]]:
    """One workload per file of token ids, named by the file, its whole text the continuation."""
    return {path.name: [Stream(prompt=[], continuation=read_token_file(path))] for path in paths}


def _read_recorded_streams(path: Path, model: str | None) -> tuple[dict[str, list[Stream]], str | None]:
    """--streams' workloads and the model that wrote them; refused if ``model`` (--model) is another
    one, whose tokenizer would misread the streams' ids."""
    try:
        workloads, wrote = read_recorded(path)
    except (OSError, ValueError) as exc:
        raise _Refused(str(exc)) from exc
    if wrote is not None and model is not None and not _same_model(model, wrote):
        raise _Refused(f"{path} was written by {wrote}; --model {model} would read its token ids "
                       "with another tokenizer (drop --model, or give that one)")
    return workloads, wrote


def _read_tokenizer(args: argparse.Namespace, wrote: str | None) -> Tokenizer | None:
    """The tokenizer --from-bench and --traces need (refused if it does not load), or the one whose
    word pieces --streams' ids are priced with (without it they replay without word pieces); None
    when no workload needs one."""
    model = args.model or wrote or DEFAULT_TOKENIZER
    needed = args.from_bench or args.traces is not None
    if not (needed or (args.streams is not None and not args.no_word_pieces)):
        return None
    try:
        return _load_tokenizer(model)
    except Exception as exc:  # any failure means: no tokenizer on this machine
        if needed:
            raise _Refused(f"cannot load the tokenizer ({model}): {exc}") from exc
        # Recorded streams are token ids already: only their word pieces are lost.
        print(f"replay: no tokenizer ({model}: {exc}); streams replayed without word pieces", file=sys.stderr)
        return None


def _read_bench(bench_dir: Path, tokenizer: Tokenizer, limit: int | None) -> tuple[dict[str, list[Stream]], int]:
    """--from-bench's workloads (one per Spec-Bench group) and the rows skipped for want of a reference."""
    if not (bench_dir / BENCH_FILE).is_file():
        raise _Refused(f"no {BENCH_FILE} in {bench_dir}")
    return bench_streams(bench_dir, tokenizer.tokenize, limit)


def _read_traces(path: Path, tokenizer: Tokenizer, context_tokens: int) -> dict[str, list[Stream]]:
    """--traces' workloads, one per trace source."""
    try:
        return trace_streams(path, tokenizer.tokenize, context_tokens)
    except (OSError, ValueError) as exc:
        raise _Refused(str(exc)) from exc


def _read_workloads(args: argparse.Namespace) -> Workloads:
    """Every workload the command line names, each through its reader; refused if there are none."""
    workloads = _read_token_files(args.files)
    recorded: dict[str, list[Stream]] = {}
    wrote = None
    if args.streams is not None:
        recorded, wrote = _read_recorded_streams(args.streams, args.model)
    tokenizer = _read_tokenizer(args, wrote)
    vocab_size = args.vocab_size
    if tokenizer is not None and (args.from_bench or args.traces is not None):
        vocab_size = vocab_size or tokenizer.vocab_size
    # Word pieces for the workloads in the tokenizer's ids (not token files or synthetic ids).
    pieces = WordPieces(tokenizer.token_bytes) if tokenizer is not None and not args.no_word_pieces else None
    tokenized: set[str] = set()
    skipped = 0
    traces: dict[str, list[Stream]] = {}
    if args.from_bench:
        assert tokenizer is not None  # _read_tokenizer refuses rather than return None for --from-bench
        bench, skipped = _read_bench(args.bench_dir, tokenizer, args.limit)
        workloads.update(bench)
        tokenized.update(bench)
    if args.traces is not None:
        assert tokenizer is not None  # as for --from-bench
        traces = _read_traces(args.traces, tokenizer, args.context_tokens)
        workloads.update(traces)
        tokenized.update(traces)
    workloads.update(recorded)
    tokenized.update(recorded)
    if not args.no_synthetic:
        workloads.update(synthetic_edit_streams(seed=args.seed))
    if not workloads:
        raise _Refused("nothing to replay (give token files, --from-bench, --traces, --streams, or drop "
                       "--no-synthetic)")
    return Workloads(workloads, frozenset(tokenized), traces, vocab_size, pieces, skipped)


def _max_id_vocab(ids: Sequence[int]) -> int:
    """The vocabulary a stream's ids imply when none is known: its largest id + 1."""
    return max(ids, default=0) + 1


def _print_priors(workloads: Workloads, options: CascadeOptions, *, budget: int) -> None:
    """--priors: one line per workload, every position's candidate scored."""
    for name, streams in workloads.streams.items():
        vocab_size = workloads.vocab_size or _max_id_vocab([t for s in streams for t in s.prompt + s.continuation])
        hits_trials = measure_priors(streams, vocab_size, budget=budget, options=options,
                                     pieces=workloads.pieces if name in workloads.tokenized else None)
        print(format_priors(name, hits_trials))


def _runs(workloads: Workloads, *, cross_request_tokens: int | None, per_task: bool) -> list[_Run]:
    """The report's rows: each workload, each trace workload again with --cross-request, and with
    --per-task each of those split into a row per stream (``<workload>:<task id or index>``)."""
    runs = [_Run(n, w, None, n) for n, w in workloads.streams.items()]
    if cross_request_tokens is not None:
        runs += [_Run(n + CROSS_REQUEST_SUFFIX, w, cross_request_tokens, n + CROSS_REQUEST_SUFFIX)
                 for n, w in workloads.traces.items()]
    if per_task:
        runs = [_Run(f"{run.name}:{s.name or i}", [s], run.cross_request_tokens, run.name)
                for run in runs for i, s in enumerate(run.streams)]
    return runs


def _replay_runs(runs: Sequence[_Run], workloads: Workloads, *, budget: int, synth_topk: bool,
                 cascade: CascadeOptions, policy: PolicyOptions, table: CostTable | None,
                 use_policy: bool, hindsight: bool = False) -> list[WorkloadResult]:
    """Each run replayed into its own result. ``hindsight``: every run twice over undiscounted
    acceptance models, the first pass only teaching them, so the second prices with the true rates."""
    # A model's recorded streams share one acceptance model across their groups, in file order, as
    # one LLM (and fucina bench, per method) shares it across its calls; other workloads start fresh.
    # With --per-task a workload's rows share its model, as its streams do without the flag.
    def fresh() -> AcceptanceModel:
        return AcceptanceModel(memory=10**9) if hindsight else AcceptanceModel()

    recorded = fresh()
    per_workload: dict[str, AcceptanceModel] = defaultdict(fresh)
    for _ in range(2 if hindsight else 1):
        results = []
        for run in runs:
            result = WorkloadResult(run.name)
            learned = recorded if run.name.startswith("stream:") else per_workload[run.workload]
            tokenized = run.workload.removesuffix(CROSS_REQUEST_SUFFIX) in workloads.tokenized
            for s in run.streams:
                vocab_size = workloads.vocab_size or _max_id_vocab(
                    s.prompt + s.continuation + [t for r in s.references for t in r])
                replay_stream(s, vocab_size, result, budget=budget, synth_topk=synth_topk, options=cascade,
                              table=table, cross_request_tokens=run.cross_request_tokens, use_policy=use_policy,
                              acceptance=learned, policy_options=policy,
                              pieces=workloads.pieces if tokenized else None)
            results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: read the workloads, replay them (or measure their priors), print the report."""
    args = _parse_args(argv)
    try:
        table = _read_cost_table(args)
        workloads = _read_workloads(args)
    except _Refused as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    cascade = CascadeOptions(recycling=not args.no_recycling, realign=not args.no_realign,
                             rewrite=not args.no_rewrite, prompt=not args.no_prompt)
    policy = PolicyOptions()
    if args.match_only:
        cascade, policy = match_only(cascade, policy)
    if args.priors:
        _print_priors(workloads, cascade, budget=args.budget)
        return 0
    runs = _runs(workloads, cross_request_tokens=args.cross_request, per_task=args.per_task)
    results = _replay_runs(runs, workloads, budget=args.budget, synth_topk=args.synth_topk, cascade=cascade,
                           policy=policy, table=table, use_policy=not args.no_policy, hindsight=args.hindsight)
    task_of = {run.name: run.workload for run in runs} if args.per_task else {}
    medians = task_medians(results, task_of) if args.per_task and table is not None else {}
    bounds = bound_medians(results, task_of) if medians else {}
    if args.json:
        print(json_report(results, budget=args.budget, synth_topk=args.synth_topk, recycling=not args.no_recycling,
                          table=table, bench_rows_skipped=workloads.bench_rows_skipped, medians=medians,
                          bounds=bounds))
    else:
        print(text_report(results, budget=args.budget, synth_topk=args.synth_topk, table=table,
                          policy=not args.no_policy, bench_rows_skipped=workloads.bench_rows_skipped,
                          medians=medians, bounds=bounds))
    return 0
