"""``fucina doctor``: the engine report and the bitwise batch-invariance self-check (exact vs distribution)."""

from __future__ import annotations

import argparse
import json

from fucina.cli.common import add_model_args, load_model_from_args


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("doctor", help="engine report + bitwise batch-invariance self-check (exact vs distribution)")
    add_model_args(d, default_ctx=4096)  # measuring the engine needs no long context
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina import cpu
    from fucina.doctor import advice, check_batch_invariance, effective_max_draft, engine_info, level_for, save_report
    from fucina.engine_selection import active_engine

    info = engine_info()
    model = load_model_from_args(args)
    report = check_batch_invariance(model)
    save_report(model, report)
    tips = advice(report, engine_variant=active_engine().variant, exact_load=args.exact, amx_cpu=cpu.cpu_has_amx())
    max_draft = effective_max_draft(report, args.exact)
    if args.json:
        print(json.dumps({"engine": info, "model": str(model.path), "exact_load": args.exact,
                          "level": level_for(report, max_draft), "max_draft": max_draft,
                          "report": report.__dict__, "advice": tips}, indent=1, default=list))
        return 0
    for k, v in info.items():
        print(f"{k:>18}: {v}")
    print(f"{'model':>18}: {model.path.name} (load: {'exact' if args.exact else 'standard'})")
    print(report.describe(max_draft))
    for t in tips:
        print(f"  - {t}")
    return 0
