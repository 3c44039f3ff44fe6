"""``fucina tokenize``: one token id per line (a tokenizer parity oracle; no weights loaded)."""

from __future__ import annotations

import argparse
import sys

from fucina.cli.common import read_text


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tokenize", help="print one token id per line (tokenizer parity oracle; no weights loaded)")
    t.add_argument("model", nargs="?", default=None)
    t.add_argument("file", help="UTF-8 text file")
    t.add_argument("--no-bos", action="store_true", help="do not add BOS")
    t.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina.catalog import load_tokenizer

    text = read_text(args.file, "input file")
    vocab = load_tokenizer(args.model)
    ids = vocab.tokenize(text, add_bos=vocab.add_bos_default and not args.no_bos)
    sys.stdout.write("".join(f"{i}\n" for i in ids))
    return 0
