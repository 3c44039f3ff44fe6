"""The benchmark run behind ``fucina bench``: plan, run the suite, write and re-render the reports.

``fucina.cli.bench`` parses the flags; this module validates them (:func:`plan`), runs the suite
(:func:`run`) and writes ``results.json``, ``results.md`` and ``speedup.png``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from fucina.bench.report import (METHODS, Divergence, RunRecord, inplace_costs, markdown, results_json, summarize_groups,
                                 write_chart)
from fucina.errors import FucinaError


class BenchConfigError(FucinaError):
    """A bench flag or input is unusable (reported by the CLI as one line, exit 2)."""


# -- planning ---------------------------------------------------------------------------------------

def plan(args) -> dict[str, Any]:
    """Validate everything that can be checked before loading a model; raises one-line errors."""
    from fucina.bench.suite import validate_methods
    from fucina.bench.tasks import load_tasks, select_tasks
    from fucina.catalog import DEFAULT_MODEL, resolve_model

    if args.repeats < 1:
        raise BenchConfigError("fucina bench: --repeats must be >= 1")
    if args.gen == 0 or args.limit == 0 or args.per_group == 0:
        raise BenchConfigError("fucina bench: --gen, --limit and --per-group must be >= 1")
    if args.ctx < 16:
        raise BenchConfigError("fucina bench: --ctx must be >= 16")
    if args.threads == 0:
        raise BenchConfigError("fucina bench: --threads must be >= 1")
    methods = validate_methods(args.methods or METHODS)
    models = args.model or [DEFAULT_MODEL]
    if args.cost_table and len(models) > 1:
        raise BenchConfigError("fucina bench: --cost-table is per model; pass it with a single --model")
    if args.cost_table and not Path(args.cost_table).is_file():
        raise BenchConfigError(f"fucina bench: cost table not found: {args.cost_table}")
    paths = {m: resolve_model(m) for m in models}  # ModelNotFound: one line, exit 2
    tasks = select_tasks(load_tasks(args.tasks), args.groups, args.per_group, args.limit, args.gen)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchConfigError(f"fucina bench: --out {out} exists and is not a directory")
    return dict(args=args, methods=methods, models=models, paths=paths, tasks=tasks, out=out)


def describe(plan: dict[str, Any]) -> str:
    from fucina.bench.suite import SAMPLING_NOTE

    tasks, methods, args = plan["tasks"], plan["methods"], plan["args"]
    groups: dict[str, list] = {}
    for t in tasks:
        groups.setdefault(t.group, []).append(t)
    per_task = len(methods) * args.repeats * len(plan["models"])
    models = ", ".join(f"{m} ({plan['paths'][m]})" for m in plan["models"])
    lines = [f"tasks: {args.tasks} ({len(tasks)} selected)",
             f"models: {models}",
             f"methods (interleaved per repeat): {', '.join(methods)}",
             f"repeats: {args.repeats}; ctx {args.ctx}; threads {args.threads or 'all cores'}",
             f"sampling: {SAMPLING_NOTE}",
             f"runs: {len(tasks) * per_task} (up to {sum(t.gen for t in tasks) * per_task} generated tokens)",
             f"output: {plan['out']}/results.json, results.md, speedup.png",
             "groups:"]
    for g, ts in groups.items():
        refs = sum(len(t.references) for t in ts)
        temps = sorted({t.temperature for t in ts})
        lines.append(f"  {g}: {len(ts)} task(s), gen {sorted({t.gen for t in ts})}, temperature {temps}, "
                     f"{refs} reference(s): {', '.join(t.id for t in ts)}")
    return "\n".join(lines)


def require_extras() -> None:
    for mod in ("matplotlib", "tqdm"):
        try:
            __import__(mod)
        except ImportError:
            raise BenchConfigError(f"fucina bench needs {mod}: pip install 'fucina[bench]'") from None


# -- running ----------------------------------------------------------------------------------------

def _meta(plan: dict[str, Any]) -> dict[str, Any]:
    from fucina import __version__
    from fucina.bench.suite import PEER_NOTE, SAMPLING_NOTE
    from fucina.calibrate import cpu_name

    try:
        import llama_cpp

        from fucina.engine_selection import active_engine

        engine = f"llama-cpp-python {llama_cpp.__version__} ({active_engine().describe()} engine); fucina {__version__}"
    except ImportError:  # pragma: no cover
        engine = f"fucina {__version__}"
    args = plan["args"]
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{cpu_name()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
                   f"Python {platform.python_version()}",
        "engine": engine,
        "command": _command(args),
        "tasks_file": str(args.tasks),
        "repeats": args.repeats,
        "methods": plan["methods"],
        "models": plan["models"],
        "sampling": SAMPLING_NOTE,
        "peer": PEER_NOTE,
        "timing": "generation only (prefill reported separately); methods interleaved per repeat; "
                  "medians over repeats, then over tasks",
        "cost_tables": {},
        "threads": {},
    }


def _command(args) -> str:
    """The command line that reproduces this run (rebuilt from the parsed flags)."""
    parts = ["fucina", "bench", "--tasks", str(args.tasks)]
    for m in args.model or []:
        parts += ["--model", m]
    parts += ["--repeats", str(args.repeats), "--out", str(args.out)]
    for flag, value in (("--groups", args.groups), ("--methods", args.methods)):
        if value:
            parts += [flag, ",".join(value)]
    for flag, value in (("--per-group", args.per_group), ("--limit", args.limit), ("--gen", args.gen),
                        ("--threads", args.threads), ("--cost-table", args.cost_table)):
        if value is not None:
            parts += [flag, str(value)]
    if args.ctx != 4096:
        parts += ["--ctx", str(args.ctx)]
    return " ".join(parts)


class _Progress:
    """The tqdm bar on stderr: one tick per run; calibration shows in its description."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, file=sys.stderr, unit="run", dynamic_ncols=True)

    def run_done(self, task, method: str, repeat: int) -> None:
        self.bar.set_postfix_str(f"{task.id} r{repeat} {method}", refresh=False)
        self.bar.update(1)

    def describe(self, text: str) -> None:
        self.bar.set_description_str(text)

    def calibration(self, name: str) -> Callable[[int, int], None]:
        def progress(i: int, n: int) -> None:
            self.describe(f"{name}: calibrating verify costs (once per machine) {i}/{n}")

        return progress

    def close(self) -> None:
        self.bar.close()


def run(plan: dict[str, Any]) -> int:
    from fucina.bench.suite import PEER_METHODS, LlamaPeer, PeerUnavailable, run_suite
    from fucina.calibrate import load_or_calibrate
    from fucina.catalog import load_model

    args, methods, tasks, out = plan["args"], plan["methods"], plan["tasks"], plan["out"]
    out.mkdir(parents=True, exist_ok=True)
    meta = _meta(plan)
    runs: list[RunRecord] = []
    divergences: list[Divergence] = []
    bar = _Progress(len(tasks) * len(methods) * args.repeats * len(plan["models"]))
    try:
        for name in plan["models"]:
            bar.describe(f"{name}: loading")
            model = load_model(name, n_ctx=args.ctx, n_threads=args.threads, use_extra_bufts=False if args.exact else None)
            peer = None
            try:
                table = load_or_calibrate(model, args.cost_table, bar.calibration(name))
                meta["cost_tables"][name] = {"source": table.source, "points": [list(p) for p in table.points]}
                meta["threads"][name] = model.n_threads
                model_methods = list(methods)
                if any(m in PEER_METHODS for m in methods):
                    try:
                        peer = LlamaPeer.for_model(model)
                    except PeerUnavailable as exc:
                        meta["peer"] = f"skipped on {name}: {exc}"
                        model_methods = [m for m in methods if m not in PEER_METHODS]
                bar.describe(name)
                done_runs, done_divs = list(runs), list(divergences)

                def checkpoint(partial) -> None:  # an interrupted run keeps its finished tasks
                    _write(out, done_runs + partial.runs, done_divs + partial.divergences, meta, chart=False)

                from fucina.decoders import decoder_options
                from fucina.doctor import cached_report, level_for
                from fucina.speculative.decoder import SpecOptions
                from fucina.speculative.policy import PolicyOptions

                report = cached_report(model)
                # The policy an LLM loaded as this one (exact or not) drafts with: the same draft cap.
                base = None if args.max_draft is None else SpecOptions(policy=PolicyOptions(max_draft=args.max_draft))
                policy = decoder_options(base, exact=args.exact, report=report).policy
                meta.setdefault("levels", {})[name] = {"level": level_for(report, policy.max_draft),
                                                       "max_draft": policy.max_draft, "exact_load": args.exact}
                res = run_suite(model, tasks, model_name=name, cost_table=table, methods=model_methods,
                                repeats=args.repeats, peer=peer, progress=bar.run_done, on_task=checkpoint,
                                policy=policy)
            finally:
                if peer is not None:
                    peer.close()
                model.close()
            runs += res.runs
            divergences += res.divergences
            _write(out, runs, divergences, meta)  # after each model: a later crash loses nothing done
    finally:
        bar.close()
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'speedup.png'}", file=sys.stderr)
    return 0


def _write(out: Path, runs: Sequence[RunRecord], divergences: Sequence[Divergence], meta: dict[str, Any],
           chart: bool = True) -> None:
    doc = results_json(runs, divergences, meta)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(out / "results.json")  # never a half-written results.json
    groups = summarize_groups(runs)
    costs = inplace_costs(runs, meta.get("cost_tables"))
    (out / "results.md").write_text(markdown(groups, divergences, meta, "speedup.png" if chart else None, costs),
                                    encoding="utf-8")
    if chart:
        write_chart(groups, out / "speedup.png")


def render(path: Path, out: Path) -> int:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs = [RunRecord.from_json(r) for r in doc["runs"]]
        divs = [Divergence.from_json(d) for d in doc.get("divergences", [])]
    except FileNotFoundError:
        raise BenchConfigError(f"fucina bench: results file not found: {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchConfigError(f"fucina bench: {path} is not a bench results.json ({type(exc).__name__}: {exc})") from None
    if not runs:
        raise BenchConfigError(f"fucina bench: {path} holds no runs")
    try:
        __import__("matplotlib")
    except ImportError:
        raise BenchConfigError("fucina bench needs matplotlib: pip install 'fucina[bench]'") from None
    out.mkdir(parents=True, exist_ok=True)
    _write(out, runs, divs, doc.get("meta", {}))
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'speedup.png'}", file=sys.stderr)
    return 0
