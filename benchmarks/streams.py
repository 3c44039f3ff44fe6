"""Record a model's plain output on the bench tasks, for the model-free replay: ``python -m benchmarks.streams``.

The replay (``python -m benchmarks.replay --streams FILE --cost-table TABLE``) then walks each
recorded output with the drafting policy in the loop, priced under this machine's verify costs, in
about a second for the whole task file: policy changes can be judged on what the *model* writes
(an instruct model paraphrases where a reference answer copies) before any timed run.

Each output line is JSON: ``id``, ``group``, ``prompt`` (token ids, through the chat template as
``fucina bench`` encodes them), ``output`` (the plain decoder's token ids with the task's sampler)
``references`` (token ids per document) and ``temperature`` (the task's; T > 0 is replayed as a
sampled generation).

    python -m benchmarks.streams --tasks bench-out/tasks.jsonl --model smollm2-135m \\
        --per-group 3 --out bench-out/streams-smollm2.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from fucina.bench.suite import TaskFileError, load_tasks, prepare, select_tasks
from fucina.errors import FucinaError
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler

__all__ = ["record", "main"]


def record(model, tasks, out: Path, progress=None, *, model_name: str | None = None) -> int:
    """Write one stream line per task to ``out`` (replaced atomically); returns the lines written.

    ``model_name`` (a catalog name or a GGUF path) goes on every line, so the replay reads the
    streams' word pieces with the tokenizer that wrote them."""
    stops = frozenset(model.eos_ids)
    tmp = out.with_name(out.name + ".tmp")
    prepared = prepare(model, tasks)
    with open(tmp, "w", encoding="utf-8") as f:
        for i, p in enumerate(prepared, 1):
            model.reset()
            decoder = PlainDecoder(model, Sampler(p.options))
            decoder.feed(p.prompt)
            tokens = list(decoder.generate(p.task.gen, stops))
            row = {"id": p.task.id, "group": p.task.group, "prompt": list(p.prompt), "output": tokens,
                   "references": [list(r) for r in p.refs], "temperature": p.task.temperature}
            if model_name is not None:
                row["model"] = model_name
            f.write(json.dumps(row) + "\n")
            if progress is not None:
                progress(i, len(prepared), p.task.id)
    model.reset()
    tmp.replace(out)
    return len(prepared)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.streams", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=Path, required=True, help="task file (as for fucina bench)")
    ap.add_argument("--model", default="smollm2-135m", help="model name or GGUF path")
    ap.add_argument("--out", type=Path, required=True, help="stream file to write (JSONL)")
    ap.add_argument("--per-group", type=int, default=None, help="at most N tasks per group")
    ap.add_argument("--groups", default=None, help="only these task groups (comma-separated)")
    ap.add_argument("--ctx", type=int, default=4096, help="context length")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads")
    a = ap.parse_args(argv)
    if a.per_group is not None and a.per_group < 1:
        ap.error("--per-group must be >= 1")
    try:
        tasks = select_tasks(load_tasks(a.tasks), groups=a.groups.split(",") if a.groups else None,
                             per_group=a.per_group)
        if not tasks:
            print("streams: no task selected", file=sys.stderr)
            return 2
        from fucina.catalog import load_model

        model = load_model(a.model, n_ctx=a.ctx, n_threads=a.threads, use_extra_bufts=False)
        # A path is kept absolute, so the replay finds the tokenizer from any directory.
        name = str(Path(a.model).resolve()) if Path(a.model).is_file() else a.model
        n = record(model, tasks, a.out, model_name=name,
                   progress=lambda i, total, tid: print(f"\r{i}/{total} {tid:<24}", end="", file=sys.stderr, flush=True))
        print(file=sys.stderr)
    except (TaskFileError, FucinaError, OSError) as exc:
        print(f"streams: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} streams to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
