"""Micro-benchmark of the sampler hot path: ``python -m benchmarks.sampling [--json]``.

Times ``Sampler.sample`` per call on synthetic but realistic rows: float32 ``normal(0, 2.5)`` logits
with a few peaked tokens (like a confident LM), at the Gemma 3 (262,144) and SmolLM2 (49,152)
vocabulary sizes. Rows rotate through a small pool so no single row stays hot in cache. Reports the
median and 90th percentile in microseconds; the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import numpy as np

from fucina.sampling import Sampler, SamplerOptions

VOCABS = {"gemma3": 262_144, "smollm2": 49_152}

CONFIGS = {
    "greedy": SamplerOptions(),
    "greedy+repeat1.1": SamplerOptions(repeat_penalty=1.1),
    "t0.8 k40 p0.95": SamplerOptions(temperature=0.8, top_k=40, top_p=0.95),
    "t0.8 k40 p0.95 repeat1.1": SamplerOptions(
        temperature=0.8, top_k=40, top_p=0.95, repeat_penalty=1.1
    ),
    "t0.8 min_p0.05": SamplerOptions(temperature=0.8, min_p=0.05),
}


def realistic_rows(vocab: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` float32 rows: normal(0, 2.5) noise plus 8 tokens lifted by 8-15 logits."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        row = rng.normal(0.0, 2.5, vocab).astype(np.float32)
        peaks = rng.choice(vocab, size=8, replace=False)
        row[peaks] += rng.uniform(8.0, 15.0, size=8).astype(np.float32)
        rows.append(row)
    return rows


def time_config(
    options: SamplerOptions, rows: Sequence[np.ndarray], history: Sequence[int], calls: int
) -> dict[str, float]:
    """Median and p90 microseconds per ``sample`` call over ``calls`` calls (after a warm-up)."""
    sampler = Sampler(options)
    for row in rows:
        sampler.sample(row, history)
    elapsed = np.empty(calls)
    for i in range(calls):
        row = rows[i % len(rows)]
        start = time.perf_counter_ns()
        sampler.sample(row, history)
        elapsed[i] = time.perf_counter_ns() - start
    return {
        "median_us": float(np.median(elapsed)) / 1e3,
        "p90_us": float(np.percentile(elapsed, 90)) / 1e3,
    }


def run(calls: int, pool: int = 8) -> list[dict[str, object]]:
    """Benchmark every config at every vocabulary size; one result dict per pair."""
    results: list[dict[str, object]] = []
    for model, vocab in VOCABS.items():
        rows = realistic_rows(vocab, pool)
        # A 200-token history, so the 64-token penalty window is full.
        history = np.random.default_rng(1).integers(0, vocab, size=200).tolist()
        for name, options in CONFIGS.items():
            timing = time_config(options, rows, history, calls)
            results.append(
                {"model": model, "vocab": vocab, "config": name, "calls": calls, **timing}
            )
    return results


def format_table(results: Sequence[dict[str, object]]) -> str:
    """The results as a fixed-width text table."""
    lines = [f"{'model':<8} {'vocab':>7}  {'config':<26} {'median µs':>10} {'p90 µs':>10}"]
    for r in results:
        lines.append(
            f"{r['model']:<8} {r['vocab']:>7}  {r['config']:<26} "
            f"{r['median_us']:>10.1f} {r['p90_us']:>10.1f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=2000, help="timed calls per config (default 2000)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    results = run(args.calls)
    print(json.dumps(results, indent=2) if args.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
