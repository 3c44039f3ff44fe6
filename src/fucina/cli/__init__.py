"""The ``fucina`` command line: one module per subcommand, all thin layers over :class:`fucina.LLM`.

Each subcommand module has ``register(sub)``, which adds its parser and sets ``handler``. Errors in
flags or inputs print ONE line on stderr and exit with status 2; nothing is half-written.
"""

from __future__ import annotations

import sys
from typing import Sequence

from fucina.cli import bench, calibrate, chat, doctor, generate, models, pull, serve, tokenize
from fucina.cli.common import EXIT_USAGE, CliError, Parser
from fucina.errors import FucinaError
from fucina.files import drop_stdout

__all__ = ["build_parser", "main"]

#: In the order ``fucina --help`` lists them.
SUBCOMMANDS = (generate, chat, serve, bench, calibrate, tokenize, doctor, models, pull)


def build_parser() -> Parser:
    from fucina import __version__

    parser = Parser(prog="fucina", description="Lossless speculative decoding for local GGUF models.")
    parser.add_argument("--version", action="version", version=f"fucina {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fucina`` with ``argv`` (default: the process arguments); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "exact", False) is None:
            # --exact/--no-exact not given: batch-invariant mode exactly when the patched engine runs
            # (and --repack, which breaks it, was not asked for).
            from fucina.engine_selection import exact_by_default

            args.exact = not getattr(args, "repack", None) and exact_by_default()
        if getattr(args, "exact", False) and getattr(args, "repack", None):
            raise CliError(f"{args.command}: --repack breaks --exact (repacked weights take another kernel "
                           "for batched rows)")
        return args.handler(args)
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except FucinaError as exc:
        print(f"fucina: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        drop_stdout()
        return 0
