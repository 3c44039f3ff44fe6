"""``fucina bench``: run the task suite against plain decoding, the oracle, the peer and ablations.

Writes ``results.json`` (every run, divergences, summaries), ``results.md`` (tables by group) and
``speedup.png`` into ``--out``; progress goes to stderr. ``--dry-run`` validates the task file and
prints the plan without loading a model; ``--render FILE`` re-renders the reports from a saved
``results.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fucina.cli.common import CliError, positive_int

_HELP = "benchmark fucina against plain decoding, the oracle, llama-cpp-python's prompt lookup and ablations"


def _csv(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def register(sub: argparse._SubParsersAction) -> None:
    from fucina.bench.report import METHODS

    b = sub.add_parser("bench", help=_HELP, description=_HELP)
    b.add_argument("--tasks", metavar="FILE", help="task file (JSONL, one task per line; see BENCHMARKS.md)")
    b.add_argument("--model", action="append", default=None, metavar="M",
                   help="model name or GGUF path (repeatable; default gemma3-270m)")
    b.add_argument("--repeats", type=positive_int, default=3, help="interleaved repeats per task (default 3)")
    b.add_argument("--out", default="bench-results", metavar="DIR", help="output directory (default bench-results)")
    b.add_argument("--groups", type=_csv, default=None, metavar="G1,G2", help="only these task groups")
    b.add_argument("--per-group", type=positive_int, default=None, metavar="N", help="at most N tasks per group")
    b.add_argument("--limit", type=positive_int, default=None, metavar="N", help="at most N tasks in all")
    b.add_argument("--methods", type=_csv, default=None, metavar="M1,M2",
                   help=f"subset of {','.join(METHODS)} (plain always runs; default all)")
    b.add_argument("--gen", type=positive_int, default=None, metavar="N", help="override every task's gen")
    b.add_argument("--ctx", type=positive_int, default=4096, help="context length (default 4096)")
    b.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: all cores)")
    b.add_argument("--cost-table", metavar="FILE",
                   help="verify cost table for fucina (default: cached per model/machine, calibrated once)")
    b.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                   help="batch-invariant load (use_extra_bufts off) with the draft cap `fucina doctor` measures "
                        "(default: on when the patched engine is in use)")
    b.add_argument("--max-draft", type=positive_int, default=None, metavar="N",
                   help="longest draft fucina verifies (default 63; in exact mode capped by the batch sizes "
                        "`fucina doctor` finds bitwise)")
    b.add_argument("--dry-run", action="store_true", help="validate the task file and print the plan; run nothing")
    b.add_argument("--render", metavar="RESULTS_JSON",
                   help="re-render results.md and speedup.png from a saved results.json into --out")
    b.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina.bench import runner

    try:
        if args.render:
            return runner.render(Path(args.render), Path(args.out))
        if not args.tasks:
            raise CliError("fucina bench: --tasks FILE is required (or --render RESULTS_JSON)")
        plan = runner.plan(args)
        if args.dry_run:
            print(runner.describe(plan))
            return 0
        runner.require_extras()
        return runner.run(plan)
    except runner.BenchConfigError as exc:
        raise CliError(str(exc)) from None
