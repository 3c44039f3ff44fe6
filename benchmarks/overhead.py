"""Where decoding time goes: ``python -m benchmarks.overhead --tasks FILE [--model M] [--json]``.

Runs plain decoding and fucina (the same decoder, cascade and policy as ``fucina bench``) on every task,
with wall-clock timers around each component the decoder calls:

* ``forward``  — the model's ``forward_step`` / ``forward_step_all_logits`` (llama.cpp, incl. its logits copy);
* ``sample``   — ``Sampler.sample`` (one call per sampled row);
* ``index``    — the draft source: ``draft`` (selection and confidence), ``observe``, ``observe_topk``;
* ``policy`` — the drafting policy's decisions and candidate scoring;
* ``other``    — the rest of the generation wall time: the decoder loop itself, ``topk_rows``, slicing.

Reported as microseconds per committed token and as a share of generation time, summed over tasks.
Timers cost ~0.3 µs per call, far below a ~15 ms model step. Like every timing here, run it alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from fucina.errors import FucinaError

COMPONENTS = ("forward", "sample", "index", "policy", "other")
FORWARDS = ("forward_step", "forward_step_all_logits")


class Timers:
    """Accumulates wall time per component; :meth:`wrap` times a method of one instance.

    Only the outermost timed call counts, so a wrapped method calling another (a backend whose
    ``forward_step`` uses ``forward_step_all_logits``) is not counted twice.
    """

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self._depth = 0

    def wrap(self, obj: object, method: str, component: str) -> None:
        inner: Callable = getattr(obj, method)
        clock, ns = time.perf_counter_ns, self.ns

        def timed(*args, **kwargs):
            if self._depth:
                return inner(*args, **kwargs)
            self._depth += 1
            t0 = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                ns[component] += clock() - t0
                self._depth -= 1

        setattr(obj, method, timed)


def profile_task(model, prepared, cost_table, method: str) -> tuple[dict[str, int], int]:
    """Run one prepared task with ``method`` ("plain" or "fucina"); return (ns per component, tokens)."""
    from fucina.decoders import DecoderFactory, SpeculationOptions
    from fucina.plain import PlainDecoder
    from fucina.sampling import Sampler

    timers = Timers()
    model.reset()
    for name in FORWARDS:
        timers.wrap(model, name, "forward")
    try:
        sampler = Sampler(prepared.options)
        timers.wrap(sampler, "sample", "sample")
        if method == "plain":
            decoder = PlainDecoder(model, sampler)
        else:
            # fucina bench's `fucina` method (default policy, no exact cap), fresh per task.
            decoders = DecoderFactory(model, SpeculationOptions(cost_table=cost_table))
            source = decoders.index(references=prepared.refs)
            for name in ("draft", "observe", "observe_topk"):
                timers.wrap(source, name, "index")  # before the decoder binds them
            decoder = decoders.decoder(sampler, source=source)
            for name in ("choose", "observe", "record_verify", "record_plain"):
                timers.wrap(decoder.policy, name, "policy")
        decoder.feed(prepared.prompt)
        timers.ns.clear()  # generation only: the prefill's forward and the prompt's observe are not steps
        t0 = time.perf_counter_ns()
        out = list(decoder.generate(prepared.task.gen, frozenset(model.eos_ids)))
        total = time.perf_counter_ns() - t0
    finally:
        for name in FORWARDS:
            vars(model).pop(name, None)  # back to the class's methods, also after an error
        model.reset()
    parts = dict(timers.ns)
    parts["other"] = total - sum(parts.values())
    parts["total"] = total
    return parts, len(out)


def summarize(parts: dict[str, int], tokens: int) -> dict[str, object]:
    total = parts.get("total", 0)
    return {
        "tokens": tokens,
        "us_per_token": {c: parts.get(c, 0) / 1e3 / max(tokens, 1) for c in (*COMPONENTS, "total")},
        "share": {c: parts.get(c, 0) / total if total else 0.0 for c in COMPONENTS},
    }


def format_table(results: dict[str, dict]) -> str:
    head = f"{'method':<8}{'tokens':>8}" + "".join(f"{c + ' µs/tok':>17}" for c in (*COMPONENTS, "total"))
    lines = [head]
    for method, r in results.items():
        us, share = r["us_per_token"], r["share"]
        cells = "".join(f"{us[c]:>9.0f} ({share[c]:>4.0%})" for c in COMPONENTS)
        lines.append(f"{method:<8}{r['tokens']:>8}{cells}{us['total']:>17.0f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=Path, required=True, help="task file (make_tasks.py JSONL)")
    ap.add_argument("--model", default=None, help="gemma3-270m (default), smollm2-135m or a GGUF path")
    ap.add_argument("--group", action="append", default=None, help="only these task groups (repeatable)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    a = ap.parse_args(argv)
    from fucina.bench.suite import prepare
    from fucina.bench.tasks import load_tasks, select_tasks
    from fucina.calibrate import load_or_calibrate
    from fucina.catalog import load_model

    try:
        tasks = select_tasks(load_tasks(a.tasks), groups=a.group)  # raises when nothing is left
        model = load_model(a.model)
        table = load_or_calibrate(model)
        prepared = prepare(model, tasks)
    except FucinaError as exc:
        print(f"overhead: {exc}", file=sys.stderr)
        return 2
    totals: dict[str, dict[str, int]] = {m: defaultdict(int) for m in ("plain", "fucina")}
    tokens = dict.fromkeys(totals, 0)
    for i, p in enumerate(prepared):
        for method in totals:
            parts, n = profile_task(model, p, table, method)
            for c, ns in parts.items():
                totals[method][c] += ns
            tokens[method] += n
        print(f"overhead: {i + 1}/{len(prepared)} {p.task.id}", file=sys.stderr)
    results = {m: summarize(totals[m], tokens[m]) for m in totals}
    print(json.dumps(results, indent=2) if a.json else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
