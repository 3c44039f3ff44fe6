"""The replay's report: the human-readable table, the JSON document, the priors lines and the
per-task medians ``--per-task`` prints."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Callable, Sequence

from fucina.speculative.costs import CostTable
from fucina.speculative.policy import N_BUCKETS, N_CLASSES, e_label

from benchmarks.replay.tally import NO_DRAFT, WorkloadResult

__all__ = ["format_table", "text_report", "json_report", "format_priors", "task_medians", "bound_medians"]

#: Bucket id of each label ``e_label`` gives (fork classes included), to print buckets in order.
_BUCKET_OF_LABEL = {e_label(b): b for b in range(N_CLASSES * N_BUCKETS)}


def format_table(results: Sequence[WorkloadResult], budget: int, synth_topk: bool,
                 table: CostTable | None = None, policy: bool = True) -> str:
    """The human-readable report."""
    topk = "synthesized from the stream's bigrams" if synth_topk else "none (committed bigrams only)"
    head = f"replay: budget {budget}; recycling top-K: {topk}"
    if table is not None:
        how = "the drafting policy chooses what is verified" if policy else "every candidate verified whole"
        head += f"\n{how}; priced under: {table.source or 'a cost table'}"
    lines = [head, f"{'workload / source':<30}{'steps':>8}{'tokens':>9}{'tok/step':>10}{'µs/step':>10}"
             f"{'drafted':>9}{'accept':>8}{'mean acc':>10}{'speedup':>9}{'perfect':>9}{'ceiling':>15}"]
    for r in results:
        d = r.as_dict()
        proj = f"{d['projected_speedup']:>8.2f}x" if "projected_speedup" in d else f"{'':>9}"
        proj += f"{d['perfect_policy_speedup']:>8.2f}x" if "perfect_policy_speedup" in d else f"{'':>9}"
        ceil = (f"{d['ceiling_tokens_per_step']:>6.2f} {d['ceiling_speedup']:>6.2f}x"
                if r.ceiling_steps and table is not None else "")
        lines.append(f"{r.name:<30}{r.steps:>8}{r.tokens:>9}{d['tokens_per_step']:>10.2f}"
                     f"{d['us_per_step']:>10.1f}{'':>9}{'':>8}{'':>10}{proj}{ceil:>15}")
        for name, tally in sorted(r.sources.items()):
            s = tally.as_dict()
            acc = f"{s['acceptance']:>8.1%}" if tally.drafted else f"{'-':>8}"
            mean = f"{s['mean_accepted']:>10.2f}" if name != NO_DRAFT else f"{'-':>10}"
            lines.append(f"  {name:<28}{tally.steps:>8}{'':>9}{'':>10}{s['us_per_step']:>10.1f}"
                         f"{tally.drafted:>9}{acc}{mean}")
        for lane, tally in sorted(r.lanes.items()):
            if tally.drafted:
                s = tally.as_dict()
                lines.append(f"  {'confidence ' + e_label(lane):<28}{tally.steps:>8}{'':>9}{'':>10}{'':>10}"
                             f"{tally.drafted:>9}{s['acceptance']:>8.1%}{s['mean_accepted']:>10.2f}")
    return "\n".join(lines)


def task_medians(results: Sequence[WorkloadResult], task_of: dict[str, str], *,
                 cost: Callable[[WorkloadResult], float] = lambda r: r.cost) -> dict[str, float]:
    """Per workload, the median over its streams' rows of the projected speedup, and ``all`` over
    every row: the median of per-task ratios, as ``fucina bench`` reports (an aggregate ratio is
    carried by the easiest stream). E.g. rows of 1.0x, 1.2x and 3.0x give 1.2x, where their tokens
    over their cost might give 2x. ``cost``: which cost the speedup is over (the policy's by default;
    ``lambda r: r.perfect_cost`` for the perfect decision, ``r.ceiling_cost`` for the ceiling)."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if cost(r):
            by[task_of.get(r.name, r.name)].append(r.tokens / cost(r))
    out = {n: statistics.median(v) for n, v in by.items()}
    if by:
        out["all"] = statistics.median([x for v in by.values() for x in v])
    return out


def bound_medians(results: Sequence[WorkloadResult], task_of: dict[str, str]) -> dict[str, dict[str, float]]:
    """Per workload, the per-task medians of what the drafts allow beside the policy's: ``perfect``
    (each draft verified exactly as far as it is accepted, where that pays) and ``ceiling`` (every
    retrievable token drafted and verified whole), as :func:`task_medians` computes the policy's."""
    return {"perfect": task_medians(results, task_of, cost=lambda r: r.perfect_cost),
            "ceiling": task_medians(results, task_of, cost=lambda r: r.ceiling_cost)}


def format_priors(workload: str, hits_trials: dict[str, tuple[int, int]]) -> str:
    """One ``--priors`` line: the workload, then per confidence bucket (in bucket order) its
    acceptance and, in parentheses, its trials; e.g. ``copy-edit: m1 0.41 (120) m2 0.63 (80)``."""
    order = sorted(hits_trials, key=_BUCKET_OF_LABEL.__getitem__)
    return f"{workload}: " + " ".join(
        f"{label} {hits_trials[label][0] / hits_trials[label][1]:.2f} ({hits_trials[label][1]})" for label in order)


def json_report(results: Sequence[WorkloadResult], *, budget: int, synth_topk: bool, recycling: bool,
                table: CostTable | None, bench_rows_skipped: int, medians: dict[str, float],
                bounds: dict[str, dict[str, float]] | None = None) -> str:
    """The ``--json`` document: the settings, then every workload's :meth:`WorkloadResult.as_dict`
    (and the per-task medians when there are any)."""
    return json.dumps({"budget": budget, "synth_topk": synth_topk, "recycling": recycling,
                       "table": table.source if table is not None else None,
                       "bench_rows_skipped": bench_rows_skipped,
                       "workloads": [r.as_dict() for r in results],
                       **({"task_medians": medians} if medians else {}),
                       **({f"task_medians_{k}": v for k, v in (bounds or {}).items() if v})}, indent=2)


def text_report(results: Sequence[WorkloadResult], *, budget: int, synth_topk: bool, table: CostTable | None,
                policy: bool, bench_rows_skipped: int, medians: dict[str, float],
                bounds: dict[str, dict[str, float]] | None = None) -> str:
    """The human-readable report: :func:`format_table`, then the per-task medians (the policy's, then
    ``bounds``: the perfect decision's and the ceiling's) and the Spec-Bench rows skipped, when there are any."""
    lines = [format_table(results, budget, synth_topk, table, policy=policy)]
    if medians:
        lines.append("median over tasks of the projected speedup: "
                     + ", ".join(f"{n} {v:.2f}x" for n, v in medians.items()))
    for label, values in (bounds or {}).items():
        if values:
            lines.append(f"median over tasks of the {label} speedup: "
                         + ", ".join(f"{n} {v:.2f}x" for n, v in values.items()))
    if bench_rows_skipped:
        lines.append(f"({bench_rows_skipped} bench rows without a reference answer skipped)")
    return "\n".join(lines)
