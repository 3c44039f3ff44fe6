"""What every ``fucina`` subcommand shares: the one-line error, argument groups, and the LLM they load.

Errors in flags or inputs print ONE line on stderr and exit with status 2 (:data:`EXIT_USAGE`);
nothing is half-written.
"""

from __future__ import annotations

import argparse
from typing import Any

from fucina.files import read_utf8

EXIT_USAGE = 2

#: Sampling defaults of ``fucina generate``: greedy, so a run is reproducible and comparable.
GENERATE_SAMPLING = dict(temp=0.0, top_k=0, top_p=1.0, min_p=0.0)
#: Sampling defaults of ``fucina chat``: llama.cpp's, so a small instruct model does not loop.
CHAT_SAMPLING = dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05)


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag raises :class:`CliError` (one line) instead of printing usage."""

    def error(self, message: str) -> None:
        raise CliError(f"{self.prog}: {message}")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {v}")
    return v


#: The shortest context a model can be loaded with.
MIN_CTX = 16


def context_tokens(text: str) -> int:
    """An argparse type: a context length, a whole number >= 16."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of tokens, got {text!r}") from None
    if v < MIN_CTX:
        raise argparse.ArgumentTypeError(f"a context holds at least {MIN_CTX} tokens, got {v} "
                                         "(leave --ctx out for the model's own context)")
    return v


def add_model_args(p: argparse.ArgumentParser, *, default_ctx: int | None = None) -> None:
    """MODEL, --threads, --ctx, --exact/--no-exact, --repack/--no-repack.

    ``default_ctx`` None: the model's trained context, capped by this machine's memory.
    """
    p.add_argument("model", nargs="?", default=None,
                   help="gemma3-270m (default), smollm2-135m, a model `fucina pull` got (`fucina models` lists "
                        "them), or a path to any GGUF file")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads (default: all cores)")
    shown = (f"default {default_ctx}" if default_ctx is not None
             else "default: the model's trained context, capped by what this machine's memory holds")
    p.add_argument("--ctx", type=context_tokens, default=default_ctx, metavar="N",
                   help=f"context length in tokens ({shown})")
    p.add_argument("--exact", action=argparse.BooleanOptionalAction, default=None,
                   help="batch-invariant load (no weight repacking; drafts capped where the engine stays "
                        "bitwise). Default: on when the patched engine is in use; see `fucina doctor`")
    p.add_argument("--repack", action=argparse.BooleanOptionalAction, default=None,
                   help="load weights into llama.cpp's extra CPU buffer types (weight repacking; AMX where "
                        "the engine has it). Default: off with --exact and on CPUs with AMX (llama.cpp #20824)")


def add_sampling_args(p: argparse.ArgumentParser, defaults: dict[str, float] = GENERATE_SAMPLING) -> None:
    """The sampler flags, with ``defaults`` for temperature, top-k, top-p and min-p shown in --help."""
    g = p.add_argument_group("sampling")
    g.add_argument("--temp", type=float, default=defaults["temp"],
                   help=f"temperature; <= 0 is greedy (default {defaults['temp']:g})")
    g.add_argument("--top-k", type=int, default=defaults["top_k"], help=f"0 = off (default {defaults['top_k']})")
    g.add_argument("--top-p", type=float, default=defaults["top_p"], help=f"1 = off (default {defaults['top_p']:g})")
    g.add_argument("--min-p", type=float, default=defaults["min_p"], help=f"0 = off (default {defaults['min_p']:g})")
    g.add_argument("--repeat-penalty", type=float, default=1.0, help="1 = off (default 1)")
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--penalty-last-n", type=int, default=64)
    g.add_argument("--seed", type=int, default=0)


def add_spec_args(p: argparse.ArgumentParser) -> None:
    """--spec, --spec-ref, --cost-table, --verify-all."""
    g = p.add_argument_group("speculation")
    g.add_argument("--spec", action="store_true", help="lossless speculative decoding")
    g.add_argument("--spec-ref", action="append", default=[], metavar="FILE",
                   help="reference document to draft from (repeatable, up to 8; implies --spec)")
    g.add_argument("--cost-table", metavar="FILE", help="verify cost table (JSON from `fucina calibrate --out`)")
    g.add_argument("--verify-all", action="store_true",
                   help="verify every draft instead of the policy's choice (ablation)")


def sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The sampler flags as :meth:`fucina.LLM.complete` keyword arguments."""
    return dict(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, frequency_penalty=args.frequency_penalty,
                presence_penalty=args.presence_penalty, penalty_last_n=args.penalty_last_n, seed=args.seed)


def read_text(path: str, what: str) -> str:
    """A UTF-8 file named on the command line; failures are one-line :class:`CliError`."""
    return read_utf8(path, what, CliError)


def spec_refs(args: argparse.Namespace) -> list[str]:
    """The --spec-ref documents' text (at most 8)."""
    from fucina.api import MAX_REFERENCES

    if len(args.spec_ref) > MAX_REFERENCES:
        raise CliError(f"at most {MAX_REFERENCES} --spec-ref files, got {len(args.spec_ref)}")
    return [read_text(f, "reference file") for f in args.spec_ref]


def llm_from_args(args: argparse.Namespace, *, speculative: bool = False, **extra: Any):
    """The :class:`fucina.LLM` for MODEL/--ctx/--threads/--exact (and the speculation flags, if any)."""
    from fucina.api import LLM

    options: dict[str, Any] = dict(n_ctx=args.ctx, n_threads=args.threads, exact=args.exact,
                                   repack=getattr(args, "repack", None))
    if speculative:
        from fucina.speculative.decoder import SpecOptions

        options.update(cost_table=getattr(args, "cost_table", None),
                       spec_options=SpecOptions(verify_all=getattr(args, "verify_all", False)))
    options.update(extra)
    return LLM(args.model, speculative=speculative, **options)


def load_model_from_args(args: argparse.Namespace):
    """The bare model (no cost table, no speculation) for commands that measure the engine itself."""
    from fucina.catalog import load_model

    return load_model(args.model, n_ctx=args.ctx, n_threads=args.threads,
                      use_extra_bufts=False if args.exact else getattr(args, "repack", None))
