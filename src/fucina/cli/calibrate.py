"""``fucina calibrate``: measure this machine's verify cost table for a model, and cache it.

``fucina spec-bench``, its former name (which the Spec-Bench data set also bears), still works for one release.
"""

from __future__ import annotations

import argparse
import sys

from fucina.cli.common import CliError, add_model_args, load_model_from_args, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    sb = sub.add_parser("calibrate", aliases=["spec-bench"],
                        help="measure the verify cost table of a model on this machine")
    add_model_args(sb, default_ctx=4096)  # measuring the engine needs no long context
    sb.add_argument("--repeats", type=positive_int, default=5)
    sb.add_argument("--max-n", type=positive_int, default=64,
                    help="largest forward measured (>= 2; default 64: the longest default draft of 63 plus its bonus row)")
    sb.add_argument("--out", help="also write the table as JSON here")
    sb.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina.calibrate import cached_table_path, measure_cost_table, stair_points

    if args.max_n < 2:
        raise CliError("--max-n must be >= 2")
    if args.repeats < 1:
        raise CliError("--repeats must be >= 1")
    if args.command == "spec-bench":
        print("fucina: `spec-bench` is now `fucina calibrate`; the old name goes in the next release",
              file=sys.stderr)
    model = load_model_from_args(args)
    ns = sorted(set(stair_points(args.max_n)) | {args.max_n})  # past 64 too: both sides of every stair

    def progress(i: int, n: int) -> None:
        print(f"\rmeasuring {i}/{n}", end="", file=sys.stderr, flush=True)

    table = measure_cost_table(model, ns, repeats=args.repeats, progress=progress)
    print(file=sys.stderr)
    print(f"# {table.source}")
    print(f"{'n (rows)':>8} {'draft k':>8} {'cost (plain steps)':>19} {'break-even acc':>15}")
    for n, c in table.points:
        print(f"{n:>8} {n - 1:>8} {c:>19.2f} {100 * table.break_even(n):>14.0f}%")
    path = cached_table_path(model)
    table.save(path)
    print(f"cached for --spec: {path}", file=sys.stderr)
    if args.out:
        table.save(args.out)
    return 0
