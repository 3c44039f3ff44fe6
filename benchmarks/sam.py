"""Model-free benchmark of the SAM index: build speed, memory, and query latency on a token stream.

    python -m benchmarks.sam --tokens-file F [--limit N] [--repeats R] [--json]
    python -m benchmarks.sam --from-bench --bench-dir DIR [--limit N] [--repeats R] [--json]

``--tokens-file`` reads whitespace-separated token ids. ``--from-bench`` reads every text of the
Spec-Bench dev tasks (``spec_bench_dev.jsonl``: the ``turns`` strings and the possibly nested
``reference`` strings, in file order), tokenizes them with the callable returned by
``fucina.catalog.load_tokenizer(model=None)`` and concatenates them into one stream,
as one long conversation would be. ``--bench-dir`` names the directory holding it.

Reported (medians over ``--repeats`` runs): bulk ``build()`` and per-token ``extend()`` speed in
tokens/s, ``nbytes()`` per token, and the mean cost of one ``match_len()`` + ``draft(16)`` query
during an incremental replay (timer overhead calibrated out).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fucina.speculative.sam import SamIndex

BENCH_FILE = "spec_bench_dev.jsonl"


def read_token_file(path: Path) -> list[int]:
    """Whitespace-separated token ids."""
    return [int(t) for t in path.read_text().split()]


def bench_texts(bench_dir: Path) -> list[str]:
    """Every text of the Spec-Bench dev tasks, in file order."""
    texts: list[str] = []

    def collect(x: Any) -> None:
        if isinstance(x, str):
            texts.append(x)
        elif isinstance(x, list):
            for y in x:
                collect(y)

    with open(bench_dir / BENCH_FILE, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                task = json.loads(line)
                collect(task.get("turns"))
                collect(task.get("reference"))
    return texts


def load_tokenizer(module: str) -> Callable[[str], Sequence[int]]:
    """The backend's tokenizer; raises RuntimeError with a one-line reason when unavailable."""
    try:
        mod = importlib.import_module(module)
        tok = mod.load_tokenizer(model=None)
    except Exception as exc:  # any failure means "no tokenizer here"; say why in one line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise RuntimeError(f"no tokenizer from {module}.load_tokenizer(model=None): {reason}") \
            from exc
    if hasattr(tok, "tokenize"):
        # Texts are concatenated into one stream, as in one conversation: no BOS per text.
        return lambda text: tok.tokenize(text, add_bos=False)
    if callable(tok):
        return tok
    raise RuntimeError(f"{module}.load_tokenizer returned {type(tok).__name__}, which cannot "
                       "tokenize")


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _incremental(tokens: Sequence[int]) -> SamIndex:
    idx = SamIndex()
    extend = idx.extend
    for t in tokens:
        extend(t)
    return idx


def _replay_query_seconds(tokens: Sequence[int], draft_len: int) -> float:
    """Total time spent in ``match_len() + draft(draft_len)`` after each append, minus the
    cost of the empty timed region."""
    idx = SamIndex()
    clock = time.perf_counter
    spent = overhead = 0.0
    for t in tokens:
        idx.extend(t)
        t0 = clock()
        idx.match_len()
        idx.draft(draft_len)
        t1 = clock()
        t2 = clock()
        spent += t1 - t0
        overhead += t2 - t1
    return max(spent - overhead, 0.0)


def run(tokens: Sequence[int], repeats: int, draft_len: int = 16) -> dict[str, float | int]:
    """Measure one stream; every figure is a median over ``repeats`` runs."""
    n = len(tokens)
    bulk = _median_time(lambda: SamIndex.build(tokens), repeats)
    incr = _median_time(lambda: _incremental(tokens), repeats)
    query = statistics.median(_replay_query_seconds(tokens, draft_len) for _ in range(repeats))
    idx = SamIndex.build(tokens)
    stats = idx.stats()
    return {
        "tokens": n,
        "repeats": repeats,
        "build_bulk_tok_s": n / bulk if bulk else float("inf"),
        "build_incremental_tok_s": n / incr if incr else float("inf"),
        "bytes_per_token": stats.nbytes / n if n else 0.0,
        "query_us": query / n * 1e6 if n else 0.0,
        "draft_len": draft_len,
        "states": stats.states,
        "transitions": stats.transitions,
        "nbytes": stats.nbytes,
    }


def format_table(report: dict[str, Any]) -> str:
    """A small human-readable table of a ``run()`` report."""
    rows = [
        ("tokens", f"{report['tokens']}"),
        ("build (bulk)", f"{report['build_bulk_tok_s']:,.0f} tok/s"),
        ("build (extend)", f"{report['build_incremental_tok_s']:,.0f} tok/s"),
        ("memory", f"{report['bytes_per_token']:.1f} B/token ({report['nbytes']:,} B)"),
        (f"match_len+draft({report['draft_len']})", f"{report['query_us']:.2f} us/query"),
        ("states / transitions", f"{report['states']:,} / {report['transitions']:,}"),
    ]
    width = max(len(k) for k, _ in rows)
    title = f"SAM bench ({report.get('source', '?')}, median of {report['repeats']})"
    return "\n".join([title] + [f"  {k:<{width}}  {v}" for k, v in rows])


def _parse(argv: Iterable[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sam",
                                 description=(__doc__ or "").split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens-file", type=Path, help="whitespace-separated token ids")
    src.add_argument("--from-bench", action="store_true",
                     help=f"tokenize the texts of {BENCH_FILE} with the backend's tokenizer")
    ap.add_argument("--bench-dir", type=Path, default=None,
                    help=f"directory holding {BENCH_FILE} (required with --from-bench)")
    ap.add_argument("--tokenizer-module", default="fucina.catalog",
                    help=argparse.SUPPRESS)  # test seam: where load_tokenizer comes from
    ap.add_argument("--limit", type=int, default=None, help="use at most N tokens")
    ap.add_argument("--repeats", type=int, default=5, help="runs per figure; medians reported")
    ap.add_argument("--draft-len", type=int, default=16, help="draft length per query")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args(None if argv is None else list(argv))
    if args.from_bench and args.bench_dir is None:
        ap.error("--from-bench needs --bench-dir DIR (the directory holding the Spec-Bench data)")
    if args.repeats < 1 or (args.limit is not None and args.limit < 1) or args.draft_len < 0:
        ap.error("--repeats and --limit must be >= 1, --draft-len >= 0")
    return args


def _fail(msg: str) -> int:
    print(f"benchmarks.sam: {msg}", file=sys.stderr)
    return 2


def main(argv: Iterable[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parse(argv)
    if args.from_bench:
        try:
            tokenize = load_tokenizer(args.tokenizer_module)
        except RuntimeError as exc:
            return _fail(str(exc))
        bench_dir = args.bench_dir
        try:
            texts = bench_texts(bench_dir)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot read {bench_dir / BENCH_FILE}: {exc}")
        tokens: list[int] = []
        used = 0
        for text in texts:
            tokens.extend(int(t) for t in tokenize(text))
            used += 1
            if args.limit is not None and len(tokens) >= args.limit:
                break
        source = f"{BENCH_FILE}, {used} of {len(texts)} texts"
    else:
        try:
            tokens = read_token_file(args.tokens_file)
        except (OSError, ValueError) as exc:
            return _fail(f"cannot read token ids from {args.tokens_file}: {exc}")
        source = str(args.tokens_file)
    if args.limit is not None:
        tokens = tokens[: args.limit]
    if not tokens:
        return _fail("the token stream is empty")
    report: dict[str, Any] = run(tokens, args.repeats, args.draft_len)
    report["source"] = source
    print(json.dumps(report) if args.json else format_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
