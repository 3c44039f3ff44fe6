"""``fucina generate``: one prompt in, the continuation streamed to stdout, stats on stderr."""

from __future__ import annotations

import argparse
import sys

from fucina.cli.common import (CliError, add_model_args, add_sampling_args, add_spec_args, llm_from_args,
                               positive_int, read_text, sampling_kwargs, spec_refs)


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("generate", help="generate text from a prompt")
    add_model_args(g)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt (UTF-8)")
    g.add_argument("--gen", type=positive_int, default=128, help="tokens to generate (default 128)")
    g.add_argument("--chat-template", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop string (repeatable; not printed; works with --spec)")
    g.add_argument("--stop-id", type=int, action="append", default=[], help="extra stop token id (repeatable)")
    add_sampling_args(g)
    add_spec_args(g)
    g.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fucina.plain import GenerationStats

    if args.gen < 1:
        raise CliError("--gen must be >= 1")
    text = args.prompt if args.prompt is not None else read_text(args.prompt_file, "prompt file")
    refs = spec_refs(args)
    spec = args.spec or bool(refs)
    llm = llm_from_args(args, speculative=spec)
    call = dict(max_tokens=args.gen, stop=args.stop, stop_token_ids=args.stop_id, references=refs, stream=True,
                **sampling_kwargs(args))
    if args.chat_template:
        chunks = llm.chat([{"role": "user", "content": text}], **call)
    else:
        chunks = llm.complete(text, **call)
    out = sys.stdout
    last = None
    for chunk in chunks:
        out.write(chunk.text)
        out.flush()
        last = chunk
    out.write("\n")
    out.flush()
    t = last.timings
    print(str(GenerationStats(last.usage.prompt_tokens, t.prompt_seconds, t.generated_tokens, t.generate_seconds,
                              last.finish_reason)), file=sys.stderr)
    if last.stats is not None:
        print(str(last.stats), file=sys.stderr)
        print(last.stats.sources_line(), file=sys.stderr)
    return 0
