"""The cost of exactness: engine variants side by side on one machine (BENCHMARKS.md, "The cost of exactness: K-quant column-group kernels").

``python -m benchmarks.engines [--models M,M] [--engines stock,no-llamafile,patched] [--repeats 5]
[--ns 1,2,4,...] [--prefill 512]``

Each engine runs in its own subprocess (``FUCINA_ENGINE``; one process imports one ``llama_cpp``):

* ``stock``: the installed llama-cpp-python, models loaded the standard way (weight repacking on, off
  on a CPU with AMX);
* ``stock-norepack``: the same engine loaded without extra buffer types (no repacking);
* ``no-llamafile``: built with ``-DGGML_LLAMAFILE=OFF``, loaded with ``--exact`` (the older recipe);
* ``patched``: :mod:`fucina.engine.patches`, loaded the way fucina loads it by default (no repacking);
* ``NAME=DIR``: another build (``pip install --target DIR``, e.g. an earlier patch set), loaded as
  ``patched`` is, reported as NAME.

Per model it reports, for every engine: the batch-invariance self-check (``fucina doctor``), the plain
step and the verify time of n rows, as medians over ``--repeats`` rounds that visit the engines in
turn (so drift hits all alike), each round itself a median of ``--samples`` forwards; and, for
``patched`` against ``stock``, whether the patched single-row path computes the same model: the
largest |difference| of plain-decoding logits at identical contexts (stock's greedy path, forced), and
whether free greedy decoding agrees or parts, with stock's top-2 gap where it parts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

ENGINES = ("stock", "stock-norepack", "no-llamafile", "patched")
#: Batch sizes priced: a plain step and the verify sizes drafts of 1..31 tokens produce.
NS = (1, 2, 4, 8, 12, 16, 17, 24, 32)


def _engine_name(spec: str) -> str:
    """The name an engine spec is reported under (``NAME=DIR`` -> NAME; settings after ``@`` dropped)."""
    return spec.split("@", 1)[0].split("=", 1)[0]


def _engine_env(spec: str) -> dict[str, str]:
    """The environment of an engine spec: ``stock``, ``patched``, ``NAME=DIR``, each optionally followed by
    ``@VAR=VALUE`` settings for that engine alone (``after-cols=DIR@GGML_FUCINA_TILED_MIN=1000``)."""
    from fucina.engine_selection import env_for

    spec, *settings = spec.split("@")
    if "=" in spec:  # FUCINA_ENGINE takes a directory as it is
        env = env_for("stock")
        env["FUCINA_ENGINE"] = str(Path(spec.split("=", 1)[1]).expanduser())
    else:
        env = env_for("stock" if spec == "stock-norepack" else spec)
    for setting in settings:
        var, _, value = setting.partition("=")
        env[var] = value
    return env
_PROMPT = ("The harbour archive kept its letters in boxes by year. Each box held the letters of one "
           "family, tied with string, and a card listing the senders. ") * 3


def _load(name: str, engine: str, tokens: int = 0):
    """``tokens``: the longest prompt the cache must hold (a --context or a --prefill), with room for a
    64-row forward after it."""
    from fucina.catalog import load_model

    # stock: the standard load (no repacking on a CPU with AMX); the exact recipes load without it.
    return load_model(name, n_ctx=max(2048, tokens + 256),
                      use_extra_bufts=None if engine == "stock" else False)


# --------------------------------------------------------------------------- workers (one engine each)

def _prompt_of(model, n: int) -> list[int]:
    """The first ``n`` tokens of _PROMPT repeated (about 60 tokens a copy)."""
    return model.tokenize(_PROMPT * (1 + n // 60))[:n]


def _work_costs(model, samples: int, ns: Sequence[int] = NS, prefill: int = 0, context: int = 0) -> dict[str, float]:
    """Median ms of a forward of n rows after a prompt (of ``context`` tokens when > 0: attention reads
    that many cached tokens), for each n; ``prefill``: also the median ms of reading that many prompt
    tokens into an empty cache (key ``"prefill"``, three samples)."""
    from fucina.calibrate import time_forwards

    prompt = _prompt_of(model, context) if context else model.tokenize(_PROMPT)
    times = time_forwards(model, ns, samples, prompt=prompt)
    out = {str(n): 1000 * statistics.median(v) for n, v in times.items()}
    if prefill:
        text = _prompt_of(model, prefill)
        runs = []
        for _ in range(3):
            model.reset()
            t0 = time.perf_counter()
            model.forward_step(text)
            runs.append(time.perf_counter() - t0)
        model.reset()
        out["prefill"] = 1000 * statistics.median(runs)
    return out


def _work_plain(model, prompts: list[list[int]], gen: int, forced: list[list[int]] | None, out: Path) -> list[list[int]]:
    """Plain decoding one token per forward; saves every row's logits (``out/p<i>.npy``)."""
    tokens = []
    for i, prompt in enumerate(prompts):
        model.reset()
        row = model.forward_step(prompt)
        rows, toks = [], []
        for j in range(gen):
            rows.append(np.array(row, dtype=np.float32, copy=True))
            t = forced[i][j] if forced is not None else int(np.argmax(row))
            toks.append(t)
            if forced is None and t in model.eos_ids:
                break
            if forced is not None and j + 1 >= len(forced[i]):
                break
            row = model.forward_step([t])
        np.save(out / f"p{i}.npy", np.stack(rows))
        tokens.append(toks)
    model.reset()
    return tokens


def _worker(a: argparse.Namespace) -> int:
    from fucina.engine_selection import active_engine
    from fucina.doctor import check_batch_invariance

    model = _load(a.worker, a.engine, max(a.context, a.prefill))
    res: dict = {"engine": active_engine().variant, "bufts": bool(model.options.use_extra_bufts)}
    if a.what == "costs":
        res["ms"] = _work_costs(model, a.samples, [int(n) for n in a.ns.split(",")], a.prefill, a.context)
    elif a.what == "invariance":
        r = check_batch_invariance(model)
        res.update(max_exact_rows=r.max_exact_rows, mismatched=r.mismatched_rows, rows=r.rows,
                   max_abs_diff=r.max_abs_diff, flips=r.argmax_flips)
    else:
        from benchmarks.exactness import encode, prompt_file

        prompts = [encode(model, text) for _, text in prompt_file(a.prompt_file, a.prompts)]
        forced = json.loads(Path(a.forced).read_text()) if a.forced else None
        res["tokens"] = _work_plain(model, prompts, a.gen, forced, Path(a.out))
    model.close()
    print(json.dumps(res))
    return 0


def _spawn(engine: str, model: str, what: str, **kw) -> dict:
    base = engine.split("@", 1)[0]  # the engine without its settings
    load = "stock" if base == "stock" else "exact"  # stock-norepack and the builds: no extra buffer types
    cmd = [sys.executable, "-m", "benchmarks.engines", "--worker", model, "--engine", load, "--what", what]
    for k, v in kw.items():
        if v is not None:
            cmd += [f"--{k.replace('_', '-')}", str(v)]
    r = subprocess.run(cmd, env=_engine_env(engine), capture_output=True, text=True, timeout=3600,
                       cwd=Path(__file__).resolve().parents[1])  # the repository root, where benchmarks/ is
    if r.returncode != 0:
        raise RuntimeError(f"{engine}/{model}/{what} failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    expected = "patched" if "=" in base else "stock" if base.startswith("stock") else base
    if res["engine"] != expected:
        raise RuntimeError(f"asked for the {engine} engine, the worker ran on {res['engine']}")
    return res


# --------------------------------------------------------------------------- the comparison

def compare_logits(model: str, prompt_file: str, prompts: int, gen: int, engine: str = "patched") -> dict:
    """``engine`` against stock: max |dlogit| at stock's contexts, and free greedy agreement."""
    with tempfile.TemporaryDirectory(prefix="fucina-engines-") as tmp:
        d = {e: Path(tmp) / e for e in ("stock", engine, engine + "-forced")}
        for p in d.values():
            p.mkdir()
        common = dict(prompt_file=prompt_file, prompts=prompts, gen=gen)
        stock = _spawn("stock", model, "plain", out=d["stock"], **common)["tokens"]
        free = _spawn(engine, model, "plain", out=d[engine], **common)["tokens"]
        forced_file = Path(tmp) / "forced.json"
        forced_file.write_text(json.dumps(stock))
        _spawn(engine, model, "plain", out=d[engine + "-forced"], forced=forced_file, **common)
        worst, flips, flip_gap, rows, parts = 0.0, 0, 0.0, 0, []
        for i, (s_toks, f_toks) in enumerate(zip(stock, free)):
            s_rows = np.load(d["stock"] / f"p{i}.npy")
            f_rows = np.load(d[engine + "-forced"] / f"p{i}.npy")
            worst = max(worst, float(np.max(np.abs(s_rows - f_rows))))
            flipped = np.argmax(s_rows, axis=1) != np.argmax(f_rows, axis=1)
            flips += int(np.sum(flipped))
            for row in s_rows[flipped]:  # how close a tie each flip was, on stock's row
                top = np.sort(row)[-2:]
                flip_gap = max(flip_gap, float(top[1] - top[0]))
            rows += len(s_rows)
            if s_toks != f_toks:
                j = next((k for k, (a, b) in enumerate(zip(s_toks, f_toks)) if a != b), min(len(s_toks), len(f_toks)))
                row = s_rows[min(j, len(s_rows) - 1)]
                top = np.sort(row)[-2:]
                parts.append({"prompt": i, "position": j, "stock_top2_gap": float(top[1] - top[0])})
        return {"rows": rows, "max_abs_dlogit": worst, "argmax_flips": flips, "max_flip_top2_gap": flip_gap,
                "greedy_runs": len(stock),
                "greedy_identical": len(stock) - len(parts), "partings": parts}


def run(models: Sequence[str], engines: Sequence[str], repeats: int, samples: int, prompt_file: str,
        prompts: int, gen: int, ns: Sequence[int] = NS, prefill: int = 0, context: int = 0) -> dict:
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": _cpu(), "models": {}}
    names = {e: _engine_name(e) for e in engines}
    for m in models:
        res: dict = {"invariance": {}, "costs": {names[e]: [] for e in engines}, "prefill_tokens": prefill,
                     "context_tokens": context}
        for e in engines:
            res["invariance"][names[e]] = _spawn(e, m, "invariance")
            print(f"{m} {names[e]}: bitwise up to {res['invariance'][names[e]]['max_exact_rows']} rows", file=sys.stderr)
        for r in range(repeats):
            for e in engines:
                res["costs"][names[e]].append(_spawn(e, m, "costs", samples=samples, ns=",".join(map(str, ns)),
                                                     prefill=prefill, context=context)["ms"])
            print(f"{m}: cost round {r + 1}/{repeats}", file=sys.stderr)
        res["median_ms"] = {e: {n: statistics.median(rd[n] for rd in rounds) for n in rounds[0]}
                            for e, rounds in res["costs"].items()}
        if "stock" in engines and gen > 0:
            res["logits"] = {names[e]: compare_logits(m, prompt_file, prompts, gen, e) for e in engines
                             if not e.startswith("stock")}
            res["stock_batch_vs_single_max_abs_dlogit"] = res["invariance"]["stock"]["max_abs_diff"]
        out["models"][m] = res
    return out


def _cpu() -> str:
    from fucina.calibrate import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} cores"


def render(res: dict) -> str:
    lines = [f"Machine: {res['machine']}; {res['date']}. Times: medians over rounds that visit the engines in turn.", ""]
    for m, r in res["models"].items():
        engines = list(r["median_ms"])
        ns = list(r["median_ms"][engines[0]])
        ctx = f", forwards after a {r['context_tokens']}-token context" if r.get("context_tokens") else ""
        lines.append(f"**{m}**{ctx}")
        lines.append("")
        sizes = [n for n in ns if n != "prefill"]
        head = ["engine", "load", "bitwise up to", "plain step", *(f"C({n})" for n in sizes if n != "1"),
                *(["prefill"] if "prefill" in ns else [])]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|---|---|---|---|" + "---|" * (len(ns) - 1))
        stock = r["median_ms"].get("stock")
        for e in engines:
            ms = r["median_ms"][e]
            inv = r["invariance"][e]
            cells = []
            for n in ns:
                rel = f" ({ms[n] / stock[n]:.2f}x)" if stock and e != "stock" else ""
                if n == "prefill":
                    rel = f" ({stock[n] / ms[n]:.2f}x)" if stock and e != "stock" else ""
                    cells.append(f"{int(r['prefill_tokens']) * 1000 / ms[n]:.0f} tok/s{rel}")
                else:
                    cells.append(f"{ms[n]:.1f} ms{rel}" if n == "1" else f"{ms[n] / ms['1']:.2f}{rel}")
            load = "standard" if inv["bufts"] else "no repack"
            lines.append(f"| {e} | {load} | {inv['max_exact_rows']} rows | " + " | ".join(cells) + " |")
        lines.append("")
        for e, lg in r.get("logits", {}).items():
            parts = "; ".join(f"prompt {p['prompt']} at token {p['position']} (stock top-2 gap {p['stock_top2_gap']:.3f})"
                              for p in lg["partings"]) or "none"
            lines.append(f"- {e} vs stock, plain decoding: max |dlogit| {lg['max_abs_dlogit']:.3g} over {lg['rows']} "
                         f"rows at identical contexts, {lg['argmax_flips']} argmax flips (stock top-2 gap <= "
                         f"{lg.get('max_flip_top2_gap', float('nan')):.3f}); free greedy identical "
                         f"{lg['greedy_identical']}/{lg['greedy_runs']}, parts at: {parts}")
        lines.append("")
    lines.append("C(n): verify of n rows in plain steps of the same engine; (x): time against stock's at the same n "
                 "(prefill: stock's time over this engine's, so above 1 is faster).")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engines", description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="stock, stock-norepack, no-llamafile, patched or NAME=DIR, each optionally with @VAR=VALUE "
                         "settings for that engine alone (e.g. cols=DIR@GGML_FUCINA_TILED_MIN=1000)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds over the engines (default 5)")
    ap.add_argument("--samples", type=int, default=15, help="forwards per size per round (default 15)")
    ap.add_argument("--prompt-file", default=str(Path(__file__).resolve().parents[1] / "tests" / "data" / "prompts.jsonl"))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--gen", type=int, default=48)
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="batch sizes priced (default %(default)s)")
    ap.add_argument("--prefill", type=int, default=0, help="also time reading this many prompt tokens")
    ap.add_argument("--context", type=int, default=0,
                    help="time the forwards after a prompt of this many tokens (default: a short one); "
                         "attention's share of a step grows with it")
    ap.add_argument("--json", action="store_true")
    # worker mode (internal)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--what", choices=("costs", "invariance", "plain"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--forced", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return _worker(a)
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]

    def known(spec: str) -> bool:
        base, *settings = spec.split("@")
        return ((base in ENGINES or ("=" in base and Path(base.split("=", 1)[1]).expanduser().is_dir()))
                and all("=" in setting for setting in settings))

    bad = [e for e in engines if not known(e)]
    try:
        ns = sorted({1, *(int(n) for n in a.ns.split(","))})
    except ValueError:
        ns = []
    if bad or a.repeats < 1 or a.samples < 1 or not ns or ns[0] < 1 or a.prefill < 0 or a.context < 0:
        ap.error(f"--engines takes {', '.join(ENGINES)} or NAME=DIR (a built engine directory), each optionally "
                 f"with @VAR=VALUE settings; --repeats and "
                 "--samples >= 1; --ns whole numbers >= 1; --prefill and --context >= 0")
    res = run([m for m in a.models.split(",") if m], engines, a.repeats, a.samples, a.prompt_file, a.prompts, a.gen,
              ns, a.prefill, a.context)
    print(json.dumps(res) if a.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
