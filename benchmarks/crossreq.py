"""Memory and per-request cost of a cross-request index: ``python -m benchmarks.crossreq --traces FILE``.

Fills one tenant's :class:`~fucina.speculative.crossreq.CrossRequestIndex` with the trace requests
as the replay reads them (:func:`benchmarks.replay.trace_streams`: each its last
``--context-tokens`` of context + its output, by trajectory and step; the set replayed
``--passes`` times so the bound is reached and eviction runs) and reports, per bound: tokens and
documents held, evictions, bytes per token, and the time each request's ``add`` + ``snapshot``
takes (the snapshot is rebuilt after every add: that is the per-request cost a server pays before
the next request of the tenant can draft). Model-free but timed: run it alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

from benchmarks.replay import trace_streams
from fucina.speculative.crossreq import CrossRequestIndex

__all__ = ["measure", "main"]


def measure(documents: Sequence[Sequence[int]], bound: int, passes: int = 3) -> dict[str, float]:
    """Add every document ``passes`` times to a fresh index bounded by ``bound``; figures at the end."""
    index = CrossRequestIndex(bound)
    seconds = []
    for _ in range(passes):
        for doc in documents:
            t0 = time.perf_counter()
            index.add(doc)
            index.snapshot()
            seconds.append(time.perf_counter() - t0)
    problems = index.check_integrity()
    if problems:
        raise RuntimeError(f"cross-request index broken: {problems}")
    return {"bound": bound, "tokens": index.n_tokens, "documents": index.n_documents,
            "evictions": index.evictions, "bytes_per_token": index.bytes_per_token(),
            "mib": index.nbytes() / 2**20, "ms_per_request_median": 1e3 * statistics.median(seconds),
            "ms_per_request_max": 1e3 * max(seconds)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.crossreq", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, required=True, help="agent trace JSONL (context, output per row)")
    ap.add_argument("--bounds", default="16384,65536,262144", help="comma-separated token bounds")
    ap.add_argument("--context-tokens", type=int, default=6000, help="context tokens a request keeps")
    ap.add_argument("--passes", type=int, default=3, help="times the file is replayed")
    ap.add_argument("--model", default="smollm2-135m", help="tokenizer (catalog name or GGUF path)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        bounds = [int(b) for b in a.bounds.split(",")]
    except ValueError:
        ap.error(f"--bounds must be integers, got {a.bounds!r}")
    if any(b < 1 for b in bounds) or a.passes < 1 or a.context_tokens < 1:
        ap.error("--bounds, --passes and --context-tokens must be >= 1")
    try:
        from fucina.catalog import load_tokenizer

        tok = load_tokenizer(a.model)
        streams = trace_streams(a.traces, tok.tokenize, a.context_tokens)
    except (OSError, ValueError) as exc:
        print(f"crossreq: {exc}", file=sys.stderr)
        return 2
    docs = [s.prompt + s.continuation for w in streams.values() for s in w]
    rows = [measure(docs, b, a.passes) for b in bounds]
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{len(docs)} requests x {a.passes} passes, {a.model} tokens")
    print(f"{'bound':>8}{'tokens':>9}{'docs':>6}{'evicted':>9}{'B/token':>9}{'MiB':>7}{'ms/req med':>12}{'max':>8}")
    for r in rows:
        print(f"{r['bound']:>8}{r['tokens']:>9}{r['documents']:>6}{r['evictions']:>9}{r['bytes_per_token']:>9.0f}"
              f"{r['mib']:>7.1f}{r['ms_per_request_median']:>12.1f}{r['ms_per_request_max']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
