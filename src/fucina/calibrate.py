"""Measure verify cost tables (``fucina calibrate``) and cache them per (model file, machine).

cost(n) = best-of-repeats time of one forward over n tokens / best time of a single-token step,
both taken right after a real prompt so attention spans a realistic context. Best-of, not mean:
we want the machine's cost, not the scheduler's noise.
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from pathlib import Path
from typing import Callable, Sequence

from fucina.speculative.costs import CostTable

FULL_NS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 49, 64)
QUICK_NS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 49)
_PROMPT = (
    "The committee reviewed the proposal in detail. Each section was read aloud, discussed, and "
    "amended where needed, and the final text was approved by a large majority of the members. "
) * 4


def cache_dir() -> Path:
    """Where measured tables live (``$FUCINA_CACHE`` or ``~/.cache/fucina``)."""
    return Path(os.environ.get("FUCINA_CACHE", Path.home() / ".cache" / "fucina"))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(model) -> str:
    """Identity of (model file, engine variant, machine): tables are not portable across any."""
    path = Path(getattr(model, "path", "model"))
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    opts = getattr(model, "options", None)
    variant = f"bufts{int(getattr(opts, 'use_extra_bufts', True))}-t{getattr(model, 'n_threads', 0)}"
    engine = _engine_id()
    raw = f"{path.name}|{size}|{variant}|{engine}|{cpu_name()}|{os.cpu_count()}"
    return f"{path.stem}-{hashlib.sha1(raw.encode()).hexdigest()[:12]}"


def _engine_id() -> str:
    try:
        from fucina.engine_selection import active_engine

        eng = active_engine()
        import llama_cpp

        return f"{llama_cpp.__version__}@{eng.location}|{eng.variant}|{eng.patch_set}"
    except ImportError:  # pragma: no cover
        return "none"


def cached_table_path(model) -> Path:
    return cache_dir() / "cost-tables" / f"{machine_key(model)}.json"


def time_forwards(
    model,
    ns: Sequence[int],
    repeats: int,
    prompt: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[int, list[float]]:
    """Seconds of ``repeats`` forwards of n tokens after a prompt, for each n. Leaves the cache empty."""
    clock = time.perf_counter
    prompt = list(prompt) if prompt is not None else model.tokenize(_PROMPT)
    model.reset()
    model.forward_step(prompt)
    base = model.kv_len
    filler = [int(t) for t in prompt[1:]] * (1 + max(ns) // max(1, len(prompt) - 1))
    times: dict[int, list[float]] = {n: [] for n in ns}
    order = [n for _ in range(repeats) for n in ns]  # interleaved, so drift hits every n alike
    for i, n in enumerate(order):
        toks = filler[:n]
        t0 = clock()
        if n == 1:
            model.forward_step(toks)
        else:
            model.forward_step_all_logits(toks)
        times[n].append(clock() - t0)
        model.truncate(base)
        if progress:
            progress(i + 1, len(order))
    model.reset()
    return times


def measure_cost_table(
    model,
    ns: Sequence[int] = FULL_NS,
    repeats: int = 3,
    prompt: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CostTable:
    """Time forwards of n tokens after a prompt; returns cost(n) relative to n=1 (best of ``repeats``)."""
    best = {n: min(v) for n, v in time_forwards(model, ns, repeats, prompt, progress).items()}
    one = best[1] if 1 in best else min(best.values())
    source = (
        f"measured {time.strftime('%Y-%m-%d')} on {cpu_name()} ({getattr(model, 'n_threads', '?')} threads), "
        f"{Path(getattr(model, 'path', 'model')).name}, best of {repeats}, plain step {1000 * one:.2f} ms"
    )
    return CostTable(tuple((n, max(1.0, best[n] / one)) for n in sorted(best) if n > 1), source)


def load_or_calibrate(model, path: str | Path | None = None, quick_progress: Callable[[int, int], None] | None = None) -> CostTable:
    """``path`` if given; else the cached table for this model/machine; else a quick calibration (cached)."""
    if path is not None:
        return CostTable.load(path)
    cached = cached_table_path(model)
    if cached.is_file():
        try:
            return CostTable.load(cached)
        except Exception:
            pass  # a corrupt cache is re-measured, not fatal
    table = measure_cost_table(model, QUICK_NS, repeats=2, progress=quick_progress)
    table.save(cached)
    return table
