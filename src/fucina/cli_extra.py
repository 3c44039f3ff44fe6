"""Subcommands beyond generate/spec-bench/tokenize: doctor (and chat, bench when present)."""

from __future__ import annotations

import argparse
import json

COMMANDS: dict = {}


def register(sub: argparse._SubParsersAction) -> None:
    """Add these subcommands to the ``fucina`` parser."""
    from fucina.cli import _add_model

    d = sub.add_parser("doctor", help="engine report + bitwise batch-invariance self-check (exact vs distribution)")
    _add_model(d)
    d.add_argument("--json", action="store_true", help="machine-readable output")
    COMMANDS["doctor"] = cmd_doctor

    try:
        from fucina import chat_cli
    except ImportError:  # pragma: no cover - chat not built yet
        pass
    else:
        chat_cli.register(sub, COMMANDS)
    try:
        from fucina.bench import cli as bench_cli
    except ImportError:  # pragma: no cover
        pass
    else:
        bench_cli.register(sub, COMMANDS)


def cmd_doctor(args) -> int:
    from fucina.cli import _load
    from fucina.doctor import advice, check_batch_invariance, effective_max_draft, engine_info, level_for, save_report

    info = engine_info()
    model = _load(args)
    report = check_batch_invariance(model)
    save_report(model, report)
    tips = advice(report, info, exact_load=args.exact)
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
