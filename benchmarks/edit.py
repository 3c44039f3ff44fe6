"""Predicted Outputs end to end: an "apply this edit" workload through ``fucina serve`` (BENCHMARKS.md).

``python -m benchmarks.edit [--model M] [--tasks N] [--repeats R] [--gen N] [--out DIR]``

Each task is a 60-200-line function of Python's standard library (read with :mod:`inspect`, so every
machine has the same ones) and an instruction to rename one of its parameters; the original source is
sent as OpenAI's ``prediction``. Three servers of the same model, started afresh for every repeat, so
each sees every prompt once and no prefix cache serves a prefill it did not compute. The prompt is the same
in every repeat: an earlier version put the repeat's number in it to defeat the cache, and that changed the
model's answer (Qwen2.5-Coder answered one task with the signature alone in two repeats of three), so the
medians mixed different work:

* ``prediction``: speculative, with the prediction;
* ``none``: speculative, no prediction (drafts from the prompt and the answer only);
* ``plain``: ``fucina serve --no-spec``.

``--methods`` picks among them (plain always runs). ``--before SRC`` also runs ``prediction@before`` and
``none@before`` where ``--methods`` names them: the same servers with ``PYTHONPATH=SRC`` (another checkout's
``src``, e.g. a ``git worktree`` of the previous commit), interleaved with the others in one run, so a change is
timed side by side with what it changes (separate runs differ by up to 15%).

Greedy. Gemma 3 (a base model) gets a completion prompt, an instruct model the chat endpoint.
Reported per method: decode tok/s over plain's (medians over repeats, then over tasks), TTFT (the
server's ``first_token_seconds``), accepted prediction tokens, and whether every answer equals the
plain server's token for token (on the patched engine it must: the level is *exact*).

``python -m benchmarks.edit --bounds DIR/samples.json --cost-table TABLE`` reads what the drafts allow,
model-free: each distinct plain answer replayed through the index (the prediction as its reference, as the
server holds it) and the policy under a cost table, through three cascades: before realign and rewrite
rules, realign alone, and the default (both). For each: the policy's projected speedup and the perfect
decision's (each draft verified exactly as far as it holds, where that pays), so a measured speedup is
read against its bound. ``--shared`` replays the answers with one acceptance model, as one server's LLM
shares it across calls (each rotation of their order; medians), where each answer starts from the priors
otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from fucina.speculative.index import CascadeOptions

#: (module, qualified name, parameter to rename): stdlib functions of 60-200 lines in CPython 3.11.
CANDIDATES = (
    ("textwrap", "TextWrapper._wrap_chunks", "chunks"),
    ("shlex", "shlex.read_token", "self"),
    ("difflib", "SequenceMatcher.find_longest_match", "alo"),
    ("difflib", "unified_diff", "fromfile"),
    ("json.decoder", "JSONObject", "s_and_end"),
    ("argparse", "HelpFormatter._format_usage", "usage"),
    ("calendar", "TextCalendar.formatyear", "theyear"),
    ("fractions", "Fraction.__new__", "numerator"),
    ("string", "Formatter._vformat", "format_string"),
    ("shutil", "copytree", "src"),
)
METHODS = ("prediction", "none", "plain")
#: The suffix of a method served by the ``--before`` checkout.
BEFORE = "@before"


def load_tasks(n: int) -> list[dict]:
    """The first ``n`` candidates whose source is 60-200 lines (skipping any this Python lacks)."""
    tasks = []
    for mod, qual, param in CANDIDATES:
        try:
            obj = importlib.import_module(mod)
            for part in qual.split("."):
                obj = getattr(obj, part)
            src = inspect.getsource(obj)
        except (ImportError, AttributeError, OSError, TypeError):
            continue
        lines = inspect.cleandoc(src).count("\n") + 1
        if 60 <= lines <= 200 and param in src:
            src = inspect.cleandoc(src) + "\n"
            tasks.append({"id": f"{mod}.{qual}", "source": src, "param": param, "lines": lines})
        if len(tasks) == n:
            break
    return tasks


def _instruction(task: dict) -> str:
    return f"Rename the parameter `{task['param']}` to `{task['param']}_arg` everywhere in this function."


def completion_prompt(task: dict) -> str:
    return (f"# Edit request. {_instruction(task)}\n# Original:\n```python\n{task['source']}```\n"
            f"# Edited (the whole function, nothing else changed):\n```python\n")


def chat_messages(task: dict) -> list[dict]:
    # The phrasing SmolLM2-135M-Instruct answers with code (others made it describe the function).
    return [{"role": "user", "content": f"Edit request. Here is a function:\n```python\n{task['source']}```\n"
                                        f"Write it again, but rename the argument `{task['param']}` to "
                                        f"`{task['param']}_arg`. Start your answer with ```python"}]


def _request(client, server, task: dict, repeat: int, method: str, chat: bool, gen: int) -> dict:
    body: dict = {"model": server.model_id, "max_tokens": gen, "temperature": 0, "seed": 0}
    if method.removesuffix(BEFORE) == "prediction":
        body["prediction"] = {"type": "content", "content": task["source"]}
    if chat:
        body["messages"] = chat_messages(task)
        path = "/v1/chat/completions"
    else:
        body["prompt"] = completion_prompt(task)
        path = "/v1/completions"
    r = client.post(server.url + path, json=body, timeout=600)
    r.raise_for_status()
    out = r.json()
    info, usage = out["fucina"], out["usage"]
    choice = out["choices"][0]
    return {"task": task["id"], "repeat": repeat, "method": method,
            "text": choice["message"]["content"] if chat else choice["text"],
            "tokens": usage["completion_tokens"], "cached": usage["prompt_tokens_details"]["cached_tokens"],
            "accepted_prediction": usage["completion_tokens_details"]["accepted_prediction_tokens"],
            "rejected_prediction": usage["completion_tokens_details"]["rejected_prediction_tokens"],
            "ttft": info["first_token_seconds"], "decode_tps": info["tokens_per_second"],
            "level": info["level"]}


def summarize(samples: Sequence[dict]) -> dict:
    """Per method: speedup of decode tok/s over plain's (median over repeats, then tasks), TTFT, identity."""
    by = {(s["task"], s["repeat"], s["method"]): s for s in samples}
    tasks = sorted({s["task"] for s in samples})
    repeats = sorted({s["repeat"] for s in samples})
    out: dict = {}
    for m in dict.fromkeys(s["method"] for s in samples):
        per_task, ttft, same, runs, acc = [], [], 0, 0, []
        by_task: dict[str, float] = {}
        for t in tasks:
            ratios = []
            for r in repeats:
                s, p = by.get((t, r, m)), by.get((t, r, "plain"))
                if s is None or p is None:
                    continue
                runs += 1
                same += s["text"] == p["text"]
                ttft.append(s["ttft"])
                acc.append(s["accepted_prediction"])
                if p["decode_tps"] > 0:
                    ratios.append(s["decode_tps"] / p["decode_tps"])
            if ratios:
                per_task.append(statistics.median(ratios))
                by_task[t] = per_task[-1]
        out[m] = {"speedup": statistics.median(per_task) if per_task else float("nan"), "per_task": by_task,
                  "worst_task": min(per_task) if per_task else float("nan"),
                  "ttft_median": statistics.median(ttft) if ttft else float("nan"),
                  "identical": same, "runs": runs,
                  "accepted_prediction_median": statistics.median(acc) if acc else 0}
    return out


def render(summary: dict, meta: dict) -> str:
    lines = [f"**{meta['model']}** ({meta['endpoint']}, {meta['tasks']} tasks x {meta['repeats']} repeats, "
             f"{meta['gen']} tokens, greedy, level {meta['level']}; {meta['date']}, {meta['machine']})", "",
             "| method | decode speedup vs plain | worst task | TTFT (median) | identical to plain | "
             "accepted prediction tokens (median) |", "|---|---:|---:|---:|---:|---:|"]
    for m, s in summary.items():
        lines.append(f"| {m} | {s['speedup']:.2f}x | {s['worst_task']:.2f}x | {1000 * s['ttft_median']:.0f} ms | "
                     f"{s['identical']}/{s['runs']} | {s['accepted_prediction_median']:.0f} |")
    methods = [m for m in summary if m != "plain"]
    lines += ["", "| task | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    for t in meta.get("task_ids", []):
        cells = " | ".join(f"{summary[m]['per_task'][t]:.2f}x" if t in summary[m]["per_task"] else "-"
                           for m in methods)
        lines.append(f"| {t} | {cells} |")
    return "\n".join(lines)


#: The cascades ``--bounds`` replays each answer through: before realign and rewrite rules, realign
#: alone, and the default (realign and rewrite rules); recycling off as on CPU tables.
BOUND_CASCADES = {"before": CascadeOptions(recycling=False, realign=False, rewrite=False),
                  "realign": CascadeOptions(recycling=False, rewrite=False),
                  "default": CascadeOptions(recycling=False)}


def bounds(recorded: dict, table_path: Path, *, budget: int = 63, shared: bool = False,
           prediction: bool = True) -> list[dict]:
    """Per distinct plain answer of a run's ``samples.json``: projected and perfect-decision speedups
    under the table (see the module docstring), through each of :data:`BOUND_CASCADES`. Model-free: nothing
    is timed.

    ``shared``: one acceptance model across the answers, as one server's LLM shares it across calls, in
    each rotation of the answers' order (the benchmark rotates its tasks per repeat); the policy's figures
    are the medians over rotations. Otherwise each answer starts from the priors. ``prediction=False``: no
    reference, as the server of the ``none`` method holds the request (the prompt still quotes the source)."""
    from benchmarks.replay.inputs import Stream
    from benchmarks.replay.simulate import replay_stream
    from benchmarks.replay.tally import WorkloadResult
    from fucina.catalog import load_tokenizer
    from fucina.speculative.costs import CostTable
    from fucina.speculative.policy import AcceptanceModel, WordPieces

    meta = recorded["meta"]
    vocab = load_tokenizer(meta["model"])
    table = CostTable.load(table_path)
    pieces = WordPieces(vocab.token_bytes)
    tasks = {t["id"]: t for t in load_tasks(len(CANDIDATES))}
    rows, streams, seen = [], [], set()
    for s in recorded["samples"]:
        if s["method"] != "plain" or (s["task"], s["text"]) in seen:
            continue
        seen.add((s["task"], s["text"]))
        task = tasks[s["task"]]
        text = (vocab.apply_chat_template(chat_messages(task)) if meta["endpoint"] == "chat"
                else completion_prompt(task))
        streams.append(Stream(vocab.tokenize(text, add_bos=False, special=True),
                              vocab.tokenize(s["text"], add_bos=False),
                              [vocab.tokenize(task["source"], add_bos=False)] if prediction else []))
        rows.append({"task": s["task"], "repeat": s["repeat"], "tokens": len(streams[-1].continuation)})
    n = len(streams)
    orders = [list(range(r, n)) + list(range(r)) for r in range(n)] if shared else [[i] for i in range(n)]
    for name, options in BOUND_CASCADES.items():
        runs: list[list[dict]] = [[] for _ in range(n)]
        for order in orders:
            acceptance = AcceptanceModel() if shared else None  # None: a fresh one per answer
            for i in order:
                result = WorkloadResult(name)
                replay_stream(streams[i], vocab.vocab_size, result, budget=budget, table=table, pieces=pieces,
                              options=options, acceptance=acceptance)
                runs[i].append(result.as_dict())
        for row, got in zip(rows, runs):
            row[name] = {"steps": statistics.median(d["steps"] for d in got),
                         "policy": statistics.median(d["projected_speedup"] for d in got),
                         "perfect": got[0]["perfect_policy_speedup"]}
    return rows


def render_bounds(rows: Sequence[dict]) -> str:
    lines = ["| task | repeat | answer tokens | " + " | ".join(f"policy, {n} | perfect, {n}" for n in BOUND_CASCADES)
             + " |", "|---|---:|---:|" + "---:|---:|" * len(BOUND_CASCADES)]
    for r in rows:
        cells = " | ".join(f"{r[n]['policy']:.2f}x | {r[n]['perfect']:.2f}x" for n in BOUND_CASCADES)
        lines.append(f"| {r['task']} | {r['repeat']} | {r['tokens']} | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.edit", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--endpoint", choices=("auto", "chat", "completions"), default="auto",
                    help="auto: completions for gemma3-270m (a base model), chat otherwise")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gen", type=int, default=192)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None, help="directory for samples.json, summary.md and server logs")
    ap.add_argument("--bounds", type=Path, default=None, metavar="SAMPLES",
                    help="instead of running: the model-free bounds of a run's samples.json (needs --cost-table)")
    ap.add_argument("--cost-table", type=Path, default=None, help="with --bounds: the verify cost table (JSON)")
    ap.add_argument("--shared", action="store_true",
                    help="with --bounds: one acceptance model across the answers, as a server shares it (the "
                         "policy's figures are medians over the rotations of the answers' order)")
    ap.add_argument("--without-prediction", action="store_true",
                    help="with --bounds: replay with no reference, as the server of the `none` method holds the "
                         "request (the prompt still quotes the source)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated, of prediction, none, plain (plain always runs)")
    ap.add_argument("--before", type=Path, default=None, metavar="SRC",
                    help="also time prediction@before / none@before (those --methods names): servers importing "
                         "fucina from SRC (another checkout's src directory), interleaved with the others")
    a = ap.parse_args(argv)
    if a.bounds is not None:
        if a.cost_table is None:
            ap.error("--bounds needs --cost-table (e.g. the one fucina cached for this machine)")
        try:
            recorded = json.loads(a.bounds.read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"cannot read {a.bounds}: {exc}")
        print(render_bounds(bounds(recorded, a.cost_table, shared=a.shared, prediction=not a.without_prediction)))
        return 0
    if a.tasks < 1 or a.repeats < 1 or a.gen < 1:
        ap.error("--tasks, --repeats and --gen must be >= 1")
    import httpx

    from fucina.backends.llama_cpp import default_threads
    from benchmarks.http import Server
    from fucina.calibrate import cpu_name
    from fucina.catalog import resolve_model

    methods = [m for m in dict.fromkeys(a.methods.split(",")) if m != "plain"] + ["plain"]
    if not set(methods) <= set(METHODS):
        ap.error(f"--methods takes {', '.join(METHODS)}, got {a.methods}")
    if a.before is not None:
        if not (a.before / "fucina" / "__init__.py").is_file():
            ap.error(f"--before {a.before}: no fucina package there (give a checkout's src directory)")
        methods = [*(m for m in methods if m != "plain"), *(m + BEFORE for m in methods if m != "plain"), "plain"]
    tasks = load_tasks(a.tasks)
    chat = a.endpoint == "chat" or (a.endpoint == "auto" and a.model != "gemma3-270m")
    threads = a.threads or default_threads()
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="fucina-edit-"))
    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model(a.model)
    samples: list[dict] = []
    with httpx.Client() as client:
        for r in range(a.repeats):
            # Fresh servers each repeat: the same prompt again must be prefilled again (TTFT) and no
            # server's prefix cache may hold an earlier repeat's prompt.
            servers = {}
            try:
                for m in methods:
                    (out / m).mkdir(exist_ok=True)
                    env = None if not m.endswith(BEFORE) else {**os.environ, "PYTHONPATH": str(a.before.resolve())}
                    servers[m] = Server("fucina-plain" if m == "plain" else "fucina", a.model, path, a.ctx,
                                        threads, None, out / m, env=env)
                for s in servers.values():
                    s.wait_ready(httpx)
                for i, task in enumerate(tasks):
                    k = (r + i) % len(methods)
                    order = methods[k:] + methods[:k]  # rotate who goes first
                    for m in order:
                        samples.append(_request(client, servers[m], task, r, m, chat, a.gen))
            finally:
                for s in servers.values():
                    s.stop()
            print(f"repeat {r + 1}/{a.repeats} done", file=sys.stderr)
    summary = summarize(samples)
    meta = {"model": a.model, "endpoint": "chat" if chat else "completions", "tasks": len(tasks),
            "repeats": a.repeats, "gen": a.gen, "level": samples[0]["level"] if samples else "?",
            "date": time.strftime("%Y-%m-%d"), "machine": f"{cpu_name()}, {threads} threads",
            "task_ids": [t["id"] for t in tasks], "methods": methods,
            "before": str(a.before) if a.before is not None else None}
    (out / "samples.json").write_text(json.dumps({"meta": meta, "samples": samples}, indent=1))
    text = render(summary, meta)
    (out / "summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
