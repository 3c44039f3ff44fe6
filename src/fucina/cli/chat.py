"""``fucina chat``: an interactive REPL, or scripted turns with ``--prompt``, over a Conversation.

REPL commands: ``/reset``, ``/stats``, ``/ref FILE``, ``/help``, ``/quit``. Ctrl-C interrupts the
answer being streamed (the conversation keeps what was committed, see :mod:`fucina.chat`) and
returns to the prompt; at the prompt it clears the line. Ctrl-D exits.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, TextIO

from fucina.cli.common import (CHAT_SAMPLING, CliError, add_model_args, add_sampling_args, add_spec_args,
                               llm_from_args, positive_int, read_text, sampling_kwargs, spec_refs)
from fucina.errors import InvalidOption

HELP = "commands: /reset  /stats  /ref FILE  /help  /quit   (Ctrl-C interrupts an answer, Ctrl-D exits)"


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("chat", help="multi-turn chat: interactive REPL, or one turn per --prompt",
                       description="Multi-turn chat. Sampling defaults are llama.cpp's (temperature 0.8, top-k 40, "
                                   "top-p 0.95, min-p 0.05): greedy decoding makes small instruct models loop. "
                                   "Speculation stays lossless under any sampler.")
    add_model_args(c)
    c.add_argument("--system", metavar="TEXT", help="system message")
    c.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                   help="non-interactive: one user turn per flag (repeatable); answers on stdout, stats on stderr")
    c.add_argument("--gen", type=positive_int, default=512, help="most tokens per answer (default 512)")
    c.add_argument("--stop-id", type=int, action="append", default=[], help="extra stop token id (repeatable)")
    c.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop sequence (repeatable; plain decoding only)")
    c.add_argument("--template", metavar="TEMPLATE",
                   help="chat template for models without one: a llama.cpp template name (e.g. chatml) or text")
    add_sampling_args(c, CHAT_SAMPLING)
    add_spec_args(c)
    c.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fucina chat``: scripted turns with --prompt, else the interactive REPL."""
    from fucina.chat import ChatOptions
    from fucina.sampling import SamplerOptions

    if args.gen < 1:
        raise CliError("--gen must be >= 1")
    refs = spec_refs(args)
    spec = args.spec or bool(refs)
    kw = sampling_kwargs(args)
    # Every flag is validated before the model loads (ChatOptions raises one-line named errors).
    options = dict(speculation=spec, sampler=SamplerOptions(**kw), extra_stop_ids=tuple(args.stop_id),
                   stop_sequences=tuple(args.stop), max_tokens=args.gen, system=args.system)
    ChatOptions(**options)
    llm = llm_from_args(args, speculative=spec, chat_template=args.template)
    conv = llm.conversation(**options)
    for text in refs:
        conv.add_spec_reference(text)
    if args.prompt:
        return _scripted(conv, args.prompt)
    return _repl(conv, llm.name)


def _read(path: str) -> str:
    """A UTF-8 reference file named in the REPL; failures are reported there as one line."""
    try:
        return read_text(path, "reference file")
    except CliError as exc:
        raise InvalidOption(str(exc)) from None


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
        print(f"{stats.spec}  {stats.policy}", file=sys.stderr)
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
