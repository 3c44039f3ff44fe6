"""``fucina models``: every short name MODEL accepts, its size and license, and whether it is here."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="list the named models: size, license, installed or how to get them")
    m.add_argument("--json", action="store_true", help="machine-readable output")
    m.set_defaults(handler=run)


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f} MB"


def print_models(as_json: bool = False) -> int:
    """The table of :func:`fucina.catalog.model_infos` on stdout (shared with ``fucina pull --list``)."""
    from fucina.catalog import model_infos

    rows = model_infos()
    if as_json:
        print(json.dumps([dict(r.__dict__, path=str(r.path) if r.path else None) for r in rows], indent=1))
        return 0
    width = max(len(r.name) for r in rows)
    for r in rows:
        status = "installed" if r.installed else f"not installed: {r.install}"
        print(f"{r.name:<{width}}  {_size(r.size):>9}  {r.license:<18}  {status}")
    return 0


def run(args: argparse.Namespace) -> int:
    return print_models(args.json)
