"""``fucina chat``: an interactive REPL, or scripted turns with ``--prompt``, over a Conversation.

REPL commands: ``/reset``, ``/stats``, ``/ref FILE``, ``/help``, ``/quit``. Ctrl-C interrupts the
answer being streamed (the conversation keeps what was committed, see :mod:`fucina.chat`) and
returns to the prompt; at the prompt it clears the line. Ctrl-D exits.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Callable, TextIO

from fucina.errors import InvalidOption

HELP = "commands: /reset  /stats  /ref FILE  /help  /quit   (Ctrl-C interrupts an answer, Ctrl-D exits)"


def register(sub: argparse._SubParsersAction, commands: dict[str, Callable]) -> None:
    """Add the ``chat`` subcommand to the ``fucina`` parser."""
    from fucina.cli import _add_model, _add_sampling, _add_spec, _positive_int

    c = sub.add_parser("chat", help="multi-turn chat: interactive REPL, or one turn per --prompt")
    _add_model(c)
    c.add_argument("--system", metavar="TEXT", help="system message")
    c.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                   help="non-interactive: one user turn per flag (repeatable); answers on stdout, stats on stderr")
    c.add_argument("--gen", type=_positive_int, default=512, help="most tokens per answer (default 512)")
    c.add_argument("--stop-id", type=int, action="append", default=[], help="extra stop token id (repeatable)")
    c.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop sequence (repeatable; plain decoding only)")
    c.add_argument("--template", metavar="TEMPLATE",
                   help="chat template for models without one: a llama.cpp template name (e.g. chatml) or text")
    _add_sampling(c)
    _add_spec(c)
    commands["chat"] = cmd_chat


def cmd_chat(args) -> int:
    """Run ``fucina chat``: scripted turns with --prompt, else the interactive REPL."""
    from fucina.chat import ChatOptions, Conversation
    from fucina.cli import _load, sampler_from_args

    if len(args.spec_ref) > 8:
        raise InvalidOption(f"at most 8 --spec-ref files, got {len(args.spec_ref)}")
    if args.gen < 1:
        raise InvalidOption("--gen must be >= 1")
    spec = args.spec or bool(args.spec_ref)
    refs = [_read(f) for f in args.spec_ref]
    # Every flag is validated before the model loads (ChatOptions raises one-line named errors).
    options = ChatOptions(speculation=spec, sampler=sampler_from_args(args).options,
                          extra_stop_ids=tuple(args.stop_id), stop_sequences=tuple(args.stop),
                          max_tokens=args.gen, system=args.system, template=args.template)
    model = _load(args)
    if spec:
        options = dataclasses.replace(options, **_spec_settings(model, args))
    conv = Conversation(model, options)
    for text in refs:
        conv.add_spec_reference(text)
    if args.prompt:
        return _scripted(conv, args.prompt)
    return _repl(conv, getattr(getattr(model, "path", None), "name", "model"))


def _read(path: str) -> str:
    """A UTF-8 reference file; failures are InvalidOption (one line, exit 2).

    Why not ``fucina.cli.CliError``: under ``python -m fucina.cli`` the running ``main`` is
    ``__main__``'s copy, which does not catch the class this module would import; every copy of
    ``main`` catches :class:`~fucina.errors.FucinaError`.
    """
    from fucina.cli import CliError, _read_text

    try:
        return _read_text(path, "reference file")
    except CliError as exc:
        raise InvalidOption(str(exc)) from None


def _spec_settings(model, args) -> dict:
    """Cost table, gate and clock as ``fucina generate --spec`` uses them."""
    from fucina.calibrate import load_or_calibrate
    from fucina.speculative.core import SpecOptions
    from fucina.speculative.gate import GateOptions

    def progress(i: int, n: int) -> None:
        print(f"\rcalibrating verify costs for this machine (once): {i}/{n}", end="", file=sys.stderr, flush=True)
        if i == n:
            print(file=sys.stderr)

    gate = GateOptions()
    if args.exact:
        # Exact mode keeps every verify inside the batch sizes the engine computes bitwise.
        from fucina.doctor import cached_report, exact_draft_cap

        cap = exact_draft_cap(cached_report(model))
        if cap is not None:
            gate = GateOptions(max_draft=min(gate.max_draft, cap))
    return dict(spec_options=SpecOptions(gate=gate, gate_enabled=not args.no_gate),
                cost_table=load_or_calibrate(model, args.cost_table, progress), clock=time.perf_counter)


def _stream(conv, text: str, out: TextIO) -> None:
    for chunk in conv.send(text):
        out.write(chunk)
        out.flush()
    out.write("\n")
    out.flush()


def _scripted(conv, prompts: list[str]) -> int:
    for text in prompts:
        _stream(conv, text, sys.stdout)
        print(str(conv.stats().last_turn), file=sys.stderr)
    stats = conv.stats()
    if stats.spec is not None:
        print(f"{stats.spec}  {stats.gate}", file=sys.stderr)
        print(f"spec sources: {stats.sources}", file=sys.stderr)
    return 0


def _repl(conv, name: str) -> int:
    from fucina.errors import FucinaError

    history = _setup_readline()
    print(f"fucina chat with {name}{' (speculative)' if conv.speculative else ''}. {HELP}", file=sys.stderr)
    try:
        while True:
            try:
                line = input("> ")
            except EOFError:  # Ctrl-D
                print()
                return 0
            except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh line, like a shell
                print()
                continue
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/"):
                    if not _command(conv, text):
                        return 0
                    continue
                _answer(conv, line)
            except FucinaError as exc:  # the session survives a failed turn or command
                print(f"fucina: {exc}", file=sys.stderr)
    finally:
        history()


def _answer(conv, text: str) -> None:
    out = sys.stdout
    turn = conv.send(text)
    try:
        for chunk in turn:
            out.write(chunk)
            out.flush()
        out.write("\n")
    except KeyboardInterrupt:
        # Closing the turn records what was committed; the KV cache and index stay consistent.
        turn.close()
        out.write("\n[interrupted]\n")
    out.flush()


def _command(conv, text: str) -> bool:
    """Run one /command; False means quit."""
    cmd, _, arg = text.partition(" ")
    arg = arg.strip()
    if cmd in ("/quit", "/exit"):
        return False
    if cmd == "/reset":
        conv.reset()
        print("(conversation reset)", file=sys.stderr)
    elif cmd == "/stats":
        print(str(conv.stats()))
    elif cmd == "/ref":
        if not arg:
            print("usage: /ref FILE", file=sys.stderr)
            return True
        slot = conv.add_spec_reference(_read(arg))  # errors are reported by the REPL loop
        print(f"(reference ref{slot} added)", file=sys.stderr)
    elif cmd == "/help":
        print(HELP, file=sys.stderr)
    else:
        print(f"unknown command {cmd}; {HELP}", file=sys.stderr)
    return True


def _setup_readline() -> Callable[[], None]:
    """Line editing + persistent history when readline exists; returns the save-history hook."""
    try:
        import readline
    except ImportError:  # pragma: no cover - e.g. Windows without pyreadline
        return lambda: None
    from fucina.calibrate import cache_dir

    path = cache_dir() / "chat_history"
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError:
            pass

    return save
