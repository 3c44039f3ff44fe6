"""Measure verify cost tables (``fucina calibrate``) and cache them per (model file, machine).

cost(n) = best-of-repeats time a forward over n tokens costs decoding / the same for a single-token
step, taken right after a real prompt so attention spans a realistic context. Best-of, not mean:
we want the machine's cost, not the scheduler's noise.

"Costs decoding" means measured the way a decoder meets it (:func:`time_forwards`): after a plain
step, and charged for any slowdown of the plain step that follows it. On an AMD EPYC (2 cores,
Qwen2.5-Coder-1.5B) a single step right after a 64-row forward took 55-82 ms against 40 ms after a
single step; the earlier method timed every single step right after the largest forward, read a
59 ms plain step and priced verifies at two thirds of their cost in place (C(16) 3.5 vs 5.4).
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from fucina.speculative.costs import CostTable


def stair_points(max_n: int = 64) -> tuple[int, ...]:
    """Row counts a table is measured at: 1..8, then both sides of every multiple of 4 up to ``max_n``.

    CPU kernels tile rows, so a forward's cost climbs in stairs at multiples of the tile and is flat
    between them: on an AMD EPYC (Qwen2.5-Coder-1.5B Q4_K_M, the VNNI microtile) C(16) 5.6, C(17) 7.2,
    C(32) 9.9, C(33) 12.2, C(48) 12.7, C(49) 14.9, C(64) 15.8 plain steps. A table needs both sides of
    each stair: from points 32, 40 and 49 alone, linear interpolation priced 33-39 rows low and 48 rows
    at 14.6, so the policy verified where it lost and avoided the cheap 48. E.g. max_n = 20 gives
    1..8, 12, 13, 16, 17, 20."""
    tail = [m for j in range(3, max_n // 4 + 1) for m in (4 * j, 4 * j + 1)]
    return tuple(n for n in [*range(1, 9), *tail] if n <= max_n)


FULL_NS = stair_points(64)
#: Version of how a table is measured; part of the cache key.
METHOD = "decode-shaped-stairs-3"
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
    # METHOD: tables measured before the step after a forward was charged (see the module docstring)
    # priced verifies low; a new method version re-measures them once.
    raw = f"{path.name}|{size}|{variant}|{engine}|{cpu_name()}|{os.cpu_count()}|{METHOD}"
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
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[int, list[float]]:
    """Seconds a forward of n tokens costs decoding, ``repeats`` samples for each n after a prompt.

    Each sample is taken as a decoder meets the forward: one single-token step first (untimed: a
    decoder arrives from a step), then the forward of n tokens (timed), then one single-token step
    (timed). A sample is the forward's time plus ``excess(n)``, what the step after it took beyond a
    plain step: max(0, median step after n - median step after a single step). E.g. a 64-row
    forward of 600 ms whose next step takes 60 ms where a plain step takes 40 costs 620 ms; a single
    step is charged nothing extra, so ``times[n] / times[1]`` is the verify's price in plain steps.
    Samples are interleaved over n (drift hits every n alike). Leaves the cache empty."""
    prompt = list(prompt) if prompt is not None else model.tokenize(_PROMPT)
    model.reset()
    model.forward_step(prompt)
    base = model.kv_len
    filler = [int(t) for t in prompt[1:]] * (2 + max(ns) // max(1, len(prompt) - 1))
    ns_all = sorted(set(ns) | {1})  # the plain step after a plain step is every n's reference
    forward: dict[int, list[float]] = {n: [] for n in ns_all}
    after: dict[int, list[float]] = {n: [] for n in ns_all}
    order = [n for _ in range(repeats) for n in ns_all]
    for i, n in enumerate(order):
        model.forward_step(filler[:1])  # settle: the step a decoder comes from
        toks = filler[1:1 + n]
        t0 = clock()
        if n == 1:
            model.forward_step(toks)
        else:
            model.forward_step_all_logits(toks)
        t1 = clock()
        model.forward_step(filler[1 + n:2 + n])
        t2 = clock()
        forward[n].append(t1 - t0)
        after[n].append(t2 - t1)
        model.truncate(base)
        if progress:
            progress(i + 1, len(order))
    model.reset()
    plain_after = statistics.median(after[1])
    times = {}
    for n in ns:
        excess = 0.0 if n == 1 else max(0.0, statistics.median(after[n]) - plain_after)
        times[n] = [s + excess for s in forward[n]]
    return times


def measure_cost_table(
    model,
    ns: Sequence[int] = FULL_NS,
    repeats: int = 3,
    prompt: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> CostTable:
    """cost(n) = best of ``repeats`` of what a forward of n tokens costs decoding (:func:`time_forwards`)
    over the same for a single-token step."""
    times = time_forwards(model, sorted(set(ns) | {1}), repeats, prompt, progress, clock=clock)
    best = {n: min(v) for n, v in times.items()}
    one = best[1]
    source = (
        f"measured {time.strftime('%Y-%m-%d')} on {cpu_name()} ({getattr(model, 'n_threads', '?')} threads), "
        f"{Path(getattr(model, 'path', 'model')).name}, best of {repeats}, plain step {1000 * one:.2f} ms "
        f"(method {METHOD})"
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
    # The points `fucina calibrate` measures, with fewer repeats: a user waits for this one.
    table = measure_cost_table(model, FULL_NS, repeats=2, progress=quick_progress)
    table.save(cached)
    return table
