"""The ``fucina`` command line: generate, chat, spec-bench, tokenize, doctor, bench.

Errors in flags or inputs print ONE line on stderr and exit with status 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

from fucina.errors import FucinaError

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + message; we print one line
        raise CliError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {v}")
    return v


def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None,
                   help="gemma3-270m (default), smollm2-135m, or a path to any GGUF file")
    p.add_argument("--threads", type=_positive_int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--ctx", type=_positive_int, default=4096, help="context length (default 4096)")
    p.add_argument("--exact", action="store_true",
                   help="load in batch-invariant mode (use_extra_bufts off); see `fucina doctor`")


def _add_sampling(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--temp", type=float, default=0.0, help="temperature; <= 0 is greedy (default 0)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--repeat-penalty", type=float, default=1.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--penalty-last-n", type=int, default=64)
    g.add_argument("--seed", type=int, default=0)


def _add_spec(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speculation")
    g.add_argument("--spec", action="store_true", help="lossless speculative decoding")
    g.add_argument("--spec-ref", action="append", default=[], metavar="FILE",
                   help="reference document to draft from (repeatable, up to 8; implies --spec)")
    g.add_argument("--cost-table", metavar="FILE", help="verify cost table (JSON from `fucina spec-bench --out`)")
    g.add_argument("--no-gate", action="store_true", help="speculate on every step (ablation)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fucina", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fucina {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate text from a prompt")
    _add_model(g)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt (UTF-8)")
    g.add_argument("--gen", type=_positive_int, default=128, help="tokens to generate (default 128)")
    g.add_argument("--chat-template", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--stop-id", type=int, action="append", default=[], help="extra stop token id (repeatable)")
    _add_sampling(g)
    _add_spec(g)

    sb = sub.add_parser("spec-bench", help="measure the verify cost table of a model on this machine")
    _add_model(sb)
    sb.add_argument("--repeats", type=_positive_int, default=5)
    sb.add_argument("--max-n", type=_positive_int, default=32, help="largest forward measured (>= 2)")
    sb.add_argument("--out", help="also write the table as JSON here")

    t = sub.add_parser("tokenize", help="print one token id per line (tokenizer parity oracle; no weights loaded)")
    t.add_argument("model", nargs="?", default=None)
    t.add_argument("file", help="UTF-8 text file")
    t.add_argument("--no-bos", action="store_true", help="do not add BOS")

    from fucina import cli_extra

    cli_extra.register(sub)
    return parser


def _version() -> str:
    from fucina import __version__

    return __version__


def _load(args, **extra):
    from fucina.models import load_model

    opts = dict(n_ctx=args.ctx, n_threads=args.threads, use_extra_bufts=not args.exact)
    opts.update(extra)
    return load_model(args.model, **opts)


def _read_text(path: str, what: str) -> str:
    from fucina.files import read_utf8

    return read_utf8(path, what, CliError)


def sampler_from_args(args):
    from fucina.sampling import Sampler, SamplerOptions

    return Sampler(SamplerOptions(
        temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repeat_penalty=args.repeat_penalty, frequency_penalty=args.frequency_penalty,
        presence_penalty=args.presence_penalty, penalty_last_n=args.penalty_last_n, seed=args.seed,
    ))


def build_spec_decoder(model, sampler, args, refs: Sequence[Sequence[int]] = (), quiet: bool = False):
    """The full cascade + gate decoder the CLI uses (cost table: --cost-table, cache, or calibration)."""
    from fucina.calibrate import load_or_calibrate
    from fucina.speculative.cascade import SpeculationIndex, options_for_costs
    from fucina.speculative.core import SpecOptions, SpeculativeDecoder

    def progress(i: int, n: int) -> None:
        if not quiet:
            print(f"\rcalibrating verify costs for this machine (once): {i}/{n}", end="", file=sys.stderr, flush=True)
            if i == n:
                print(file=sys.stderr)

    from fucina.speculative.gate import GateOptions

    table = load_or_calibrate(model, args.cost_table, progress)
    index = SpeculationIndex(model.vocab_size, options_for_costs(table))
    for r in refs:
        index.add_reference(r)
    from fucina.doctor import cached_report, effective_max_draft

    # Exact mode keeps every verify inside the batch sizes the engine computes bitwise.
    gate = GateOptions(max_draft=effective_max_draft(cached_report(model), getattr(args, "exact", False)))
    return SpeculativeDecoder(model, index, sampler, SpecOptions(gate=gate, gate_enabled=not args.no_gate),
                              cost_table=table, clock=time.perf_counter)


def cmd_generate(args) -> int:
    from fucina.generate import GenerationStats, PlainDecoder, TextStreamer, run

    if len(args.spec_ref) > 8:
        raise CliError(f"at most 8 --spec-ref files, got {len(args.spec_ref)}")
    text = args.prompt if args.prompt is not None else _read_text(args.prompt_file, "prompt file")
    ref_texts = [_read_text(f, "reference file") for f in args.spec_ref]
    sampler = sampler_from_args(args)  # validates sampling flags before the model loads
    model = _load(args)
    if args.chat_template:
        text = model.apply_chat_template([{"role": "user", "content": text}])
        prompt = model.tokenize(text, add_bos=False, special=True)
    else:
        prompt = model.tokenize(text, add_bos=model.add_bos_default)
    spec = args.spec or bool(args.spec_ref)
    if spec:
        refs = [model.tokenize(t, add_bos=False) for t in ref_texts]
        decoder = build_spec_decoder(model, sampler, args, refs)
    else:
        decoder = PlainDecoder(model, sampler)
    stats = GenerationStats()
    streamer = TextStreamer(model)
    out = sys.stdout
    stops = set(model.eos_ids) | set(args.stop_id)
    for tok in run(decoder, prompt, args.gen, stops, stats):
        out.write(streamer.push(tok))
        out.flush()
    out.write(streamer.flush() + "\n")
    out.flush()
    print(str(stats), file=sys.stderr)
    if spec:
        print(f"{decoder.stats}  {decoder.gate}  level={_level_of(model, decoder.gate.options.max_draft)}", file=sys.stderr)
        print(f"spec sources: {decoder.source.stats()}", file=sys.stderr)
    return 0


def _level_of(model, max_draft: int) -> str:
    from fucina.doctor import cached_report, level_for

    return level_for(cached_report(model), max_draft)


def cmd_spec_bench(args) -> int:
    from fucina.calibrate import FULL_NS, cached_table_path, measure_cost_table

    if args.max_n < 2:
        raise CliError("--max-n must be >= 2")
    if args.repeats < 1:
        raise CliError("--repeats must be >= 1")
    model = _load(args)
    ns = sorted(set([n for n in FULL_NS if n <= args.max_n] + [args.max_n]))

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


def cmd_tokenize(args) -> int:
    from fucina.backends.llama_cpp import load_tokenizer

    text = _read_text(args.file, "input file")
    vocab = load_tokenizer(args.model)
    ids = vocab.tokenize(text, add_bos=vocab.add_bos_default and not args.no_bos)
    sys.stdout.write("".join(f"{i}\n" for i in ids))
    return 0


COMMANDS = {"generate": cmd_generate, "spec-bench": cmd_spec_bench, "tokenize": cmd_tokenize}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        from fucina import cli_extra

        handler = COMMANDS.get(args.command) or cli_extra.COMMANDS[args.command]
        return handler(args)
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
        return 0


if __name__ == "__main__":  # pragma: no cover
    # Under `python -m`, this file is __main__: use the importable module so that CliError raised by
    # other modules (which import fucina.cli) is the class main() catches.
    from fucina.cli import main as _main

    sys.exit(_main())
