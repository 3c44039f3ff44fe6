"""Bench records, their aggregation, and the reports: ``results.md`` and ``speedup.png``.

Model-free on purpose: everything here is a pure function of :class:`RunRecord` and
:class:`Divergence` values, so the numbers can be re-rendered from a saved ``results.json``
(``fucina bench --render``) and tested without loading a model.

Aggregation, stated once so the tables can be read without the code:

* per task and method: the **median over repeats** of tokens/s (and of every other per-run figure);
* **speedup** of a method on a task = its median tokens/s / plain's median tokens/s on that task
  (a ratio of medians taken in the same process, interleaved, so machine drift hits both alike);
* **of oracle** = a method's speedup / the oracle's speedup on the same task;
* per group: the **median over the group's tasks** of those per-task figures; ``identical`` is the
  share of all the group's runs (tasks x repeats) whose token ids equal plain's run of the same repeat.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

#: Every method, in the interleaving order of one repeat (plain first: it is the reference).
METHODS: tuple[str, ...] = ("plain", "fucina", "oracle", "peer", "peer_n2", "sam_only", "gate_open", "match_only",
                            "no_pieces", "no_realign", "no_rewrite", "plain_again")

#: One line per method for the report's legend.
METHOD_LEGEND: dict[str, str] = {
    "plain": "plain decoding (PlainDecoder): one forward per token, the reference output",
    "fucina": "full cascade (conversation SAM + task references + recycling) + the drafting policy, default options",
    "oracle": "same decoder, policy and cost table fed the plain run's own continuation (perfect drafts): "
              "the ceiling this machine allows",
    "peer": "llama-cpp-python LlamaPromptLookupDecoding, default settings (max_ngram_size=2, num_pred_tokens=10)",
    "peer_n2": "llama-cpp-python LlamaPromptLookupDecoding(num_pred_tokens=2)",
    "sam_only": "ablation: conversation SAM only (no references, no recycling), policy on: prompt-lookup-like",
    # The method keeps its old name (saved result files use it); it runs SpecOptions(verify_all=True).
    "gate_open": "ablation: full cascade + references with the policy forced open (verify every candidate)",
    "match_only": "ablation: full cascade + references, the policy pricing drafts on match length alone "
                  "(no fork flags, no resume or realign source, no rewrite rules, sampled and greedy calls learned "
                  "together: the "
                  "policy before them)",
    "no_pieces": "ablation: fucina with unique word pieces and word starts priced as one class (the policy "
                 "before word pieces)",
    "no_realign": "ablation: fucina without the realign source (a copy broken by an edit is not picked up "
                  "again where the answer rejoins it: the cascade before realign)",
    "no_rewrite": "ablation: fucina without rewrite rules (drafts of a copy are not rewritten by the edits the "
                  "answer has made to it so far: the cascade before rewrite rules)",
    "plain_again": "plain decoding once more, last in each repeat (an A/A comparison): its speedup is this "
                   "run's own noise, so a group's figure means something only where it stands clear of this one",
}


def _known_fields(cls, d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` restricted to ``cls``'s dataclass fields (derived keys like tok_s are dropped)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class RunRecord:
    """One timed generation of one method on one task in one repeat."""

    model: str
    task_id: str
    group: str
    kind: str
    temperature: float
    method: str
    repeat: int
    prompt_tokens: int
    tokens: int  # generated tokens
    prefill_s: float  # prompt feed (the peer: time to its first token)
    gen_s: float  # generation only
    setup_s: float = 0.0  # decoder/index construction incl. reference indexing (untimed elsewhere)
    steps: int = 0  # decode steps (plain: one per token)
    verifies: int = 0  # batched verify forwards
    drafted: int = 0
    accepted: int = 0
    identical: bool = True  # token ids equal plain's run of the same repeat
    first_diff: int | None = None  # first differing generated position, when not identical
    stop: str = "length"  # "stop" (an end-of-generation id) or "length"
    extra: dict[str, Any] = field(default_factory=dict)  # per-source counts, gate state

    @property
    def tok_s(self) -> float:
        return self.tokens / self.gen_s if self.gen_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        """accepted / drafted; None when nothing was drafted (plain, or a gate that never opened)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(tok_s=self.tok_s, acceptance=self.acceptance, tokens_per_step=self.tokens_per_step)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RunRecord":
        return cls(**_known_fields(cls, d))


@dataclass
class Divergence:
    """A run whose tokens left plain's at ``position``, with plain's logits there."""

    model: str
    task_id: str
    group: str
    method: str
    repeat: int
    temperature: float
    position: int  # index into the generated tokens
    plain_token: int
    method_token: int | None  # None: the method stopped before this position
    top2_gap: float | None = None  # plain row: logit(top1) - logit(top2); None if not captured
    runner_up: bool | None = None  # the method's token is plain's second choice
    plain_reproduced: bool | None = None  # the untimed capture run matched the timed plain run

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Divergence":
        return cls(**_known_fields(cls, d))


@dataclass
class TaskSummary:
    """Medians over the repeats of one method on one task."""

    model: str
    task_id: str
    group: str
    method: str
    repeats: int
    tok_s: float
    gen_s: float
    prefill_s: float
    speedup: float | None  # median tok/s / plain's median tok/s
    acceptance: float | None
    tokens_per_step: float
    verifies: float
    identical: float  # share of repeats identical to plain
    of_oracle: float | None  # speedup / oracle's speedup on this task


@dataclass
class GroupSummary:
    """Medians over the tasks of one group, for one model and method."""

    model: str
    group: str
    method: str
    tasks: int
    speedup: float | None
    worst_speedup: float | None  # the group's slowest task: fragility shows here
    tok_s: float
    acceptance: float | None
    tokens_per_step: float
    identical_pct: float  # over all runs (tasks x repeats)
    of_oracle: float | None


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _ordered(items: Iterable[str]) -> list[str]:
    """Unique values in first-seen order (groups keep the task file's order)."""
    return list(dict.fromkeys(items))


def method_order(methods: Iterable[str]) -> list[str]:
    """Known methods in :data:`METHODS` order, unknown ones after them."""
    ms = set(methods)
    return [m for m in METHODS if m in ms] + sorted(ms - set(METHODS))


#: Plain outputs shorter than this have no decode phase worth timing (the first token comes from the
#: prefill, so a 1-token "generation" takes microseconds): such a task gets no speedup figure.
MIN_TIMED_TOKENS = 8


def summarize_tasks(runs: Sequence[RunRecord]) -> list[TaskSummary]:
    """Per (model, task, method) medians over repeats, with speedup and oracle fraction.

    A task whose plain run generated fewer than MIN_TIMED_TOKENS tokens (the model stopped at once)
    gets ``speedup=None`` for every method, so it cannot skew a group's median.
    """
    cells: dict[tuple[str, str, str], list[RunRecord]] = {}
    for r in runs:
        cells.setdefault((r.model, r.task_id, r.method), []).append(r)
    plain_tokens = {(model, task): statistics.median(r.tokens for r in rs)
                    for (model, task, method), rs in cells.items() if method == "plain"}
    base: dict[tuple[str, str, str], TaskSummary] = {}
    for (model, task, method), rs in cells.items():
        base[(model, task, method)] = TaskSummary(
            model=model, task_id=task, group=rs[0].group, method=method, repeats=len(rs),
            tok_s=statistics.median(r.tok_s for r in rs),
            gen_s=statistics.median(r.gen_s for r in rs),
            prefill_s=statistics.median(r.prefill_s for r in rs),
            speedup=None,
            acceptance=_median(r.acceptance for r in rs),
            tokens_per_step=statistics.median(r.tokens_per_step for r in rs),
            verifies=statistics.median(r.verifies for r in rs),
            identical=sum(r.identical for r in rs) / len(rs),
            of_oracle=None,
        )
    for (model, task, method), s in base.items():
        plain = base.get((model, task, "plain"))
        if plain is not None and plain.tok_s > 0 and plain_tokens[(model, task)] >= MIN_TIMED_TOKENS:
            s.speedup = s.tok_s / plain.tok_s
    for (model, task, method), s in base.items():
        oracle = base.get((model, task, "oracle"))
        if method != "plain" and oracle is not None and oracle.speedup and s.speedup is not None:
            s.of_oracle = s.speedup / oracle.speedup
    order = {m: i for i, m in enumerate(method_order(k[2] for k in base))}
    tasks = _ordered((r.model, r.task_id) for r in runs)
    rank = {t: i for i, t in enumerate(tasks)}
    return sorted(base.values(), key=lambda s: (rank[(s.model, s.task_id)], order[s.method]))


def summarize_groups(runs: Sequence[RunRecord], tasks: Sequence[TaskSummary] | None = None,
                     all_label: str = "all") -> list[GroupSummary]:
    """Per (model, group, method) medians over tasks, plus an ``all`` row over every task."""
    tasks = summarize_tasks(runs) if tasks is None else tasks
    out: list[GroupSummary] = []
    for model in _ordered(r.model for r in runs):
        mruns = [r for r in runs if r.model == model]
        groups = _ordered(r.group for r in mruns)
        for group in [*groups, all_label]:
            for method in method_order(r.method for r in mruns):
                ts = [t for t in tasks if t.model == model and t.method == method
                      and (group == all_label or t.group == group)]
                rs = [r for r in mruns if r.method == method and (group == all_label or r.group == group)]
                if not ts:
                    continue
                speedups = [t.speedup for t in ts if t.speedup is not None]
                out.append(GroupSummary(
                    model=model, group=group, method=method, tasks=len(ts),
                    speedup=_median(speedups),
                    worst_speedup=min(speedups) if speedups else None,
                    tok_s=statistics.median(t.tok_s for t in ts),
                    acceptance=_median(t.acceptance for t in ts),
                    tokens_per_step=statistics.median(t.tokens_per_step for t in ts),
                    identical_pct=100.0 * sum(r.identical for r in rs) / len(rs),
                    of_oracle=_median(t.of_oracle for t in ts),
                ))
    return out


@dataclass(frozen=True)
class InPlaceCost:
    """What a forward over ``rows`` tokens cost inside one method's runs, beside the cost table.

    ``cost`` = mean seconds of those forwards / mean seconds of the same runs' plain steps: the table's
    unit, measured where the policy spends it (long prompts, a verify between plain steps) rather than on
    the short calibration prompt. Forwards are timed alone (no sampling, no draft lookup).
    """

    model: str
    method: str
    rows: int  # tokens fed: 1 = a plain step, k + 1 = a verify of k drafts
    forwards: int
    cost: float | None  # None: the method's runs took no plain step to divide by
    table: float | None  # the cost table's C(rows); None: no table recorded for the model


def inplace_costs(runs: Sequence[RunRecord], cost_tables: Mapping[str, Mapping[str, Any]] | None = None
                  ) -> list[InPlaceCost]:
    """Per (model, method, rows), pooled over the method's runs (those that recorded ``forwards``)."""
    from fucina.speculative.costs import CostTable

    pooled: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in runs:
        for rows, (n, sec) in r.extra.get("forwards", {}).items():
            cell = pooled.setdefault((r.model, r.method), {}).setdefault(int(rows), [0, 0.0])
            cell[0] += n
            cell[1] += sec
    tables = {m: CostTable(tuple((int(n), float(c)) for n, c in t["points"]))
              for m, t in (cost_tables or {}).items() if t.get("points")}
    out = []
    for (model, method), by_rows in pooled.items():
        n1, s1 = by_rows.get(1, (0, 0.0))
        step = s1 / n1 if n1 and s1 > 0 else None
        table = tables.get(model)
        for rows in sorted(by_rows):
            n, sec = by_rows[rows]
            out.append(InPlaceCost(model=model, method=method, rows=rows, forwards=int(n),
                                   cost=(sec / n) / step if step and n else None,
                                   table=table.cost(rows) if table is not None else None))
    return out


# -- markdown ---------------------------------------------------------------------------------------

def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _num(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def markdown(groups: Sequence[GroupSummary], divergences: Sequence[Divergence] = (),
             meta: Mapping[str, Any] | None = None, chart: str | None = "speedup.png",
             inplace: Sequence[InPlaceCost] = ()) -> str:
    """The ``results.md`` report: a speedup grid and a detail table per model, fucina's verify costs in
    place (when given), then divergences."""
    meta = meta or {}
    lines = ["# fucina bench", ""]
    for key, label in (("date", "date"), ("machine", "machine"), ("engine", "engine"),
                       ("command", "command"), ("tasks_file", "tasks"), ("repeats", "repeats"),
                       ("sampling", "sampling"), ("peer", "peer"), ("timing", "timing")):
        if key in meta:
            value = f"`{meta[key]}`" if key == "command" else meta[key]
            lines.append(f"- **{label}**: {value}")
    if len(lines) > 2:
        lines.append("")
    if chart:
        lines += [f"![speedup per group and method]({chart})", ""]
    for model in _ordered(g.model for g in groups):
        gs = [g for g in groups if g.model == model]
        methods = [m for m in method_order(g.method for g in gs) if m != "plain"]
        glist = _ordered(g.group for g in gs)
        cell = {(g.group, g.method): g for g in gs}
        lines += [f"## {model}", "",
                  "Median speedup vs plain decoding (tokens/s ratio, generation only; medians over tasks "
                  "of per-task ratios of medians over repeats):", ""]
        lines.append("| group | tasks | " + " | ".join(methods) + " |")
        lines.append("|---|---:|" + "---:|" * len(methods))
        for group in glist:
            any_cell = next((cell[(group, m)] for m in method_order(g.method for g in gs) if (group, m) in cell))
            row = [_x(cell[(group, m)].speedup) if (group, m) in cell else "" for m in methods]
            name = f"**{group}**" if group == "all" else group
            lines.append(f"| {name} | {any_cell.tasks} | " + " | ".join(row) + " |")
        lines += ["", "Detail (acceptance = accepted/drafted tokens; identical = runs whose token ids equal "
                  "plain's; of oracle = speedup / oracle speedup):", "",
                  "| group | method | speedup | worst task | tok/s | acceptance | tok/step | identical | of oracle |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for group in glist:
            for m in method_order(g.method for g in gs):
                g = cell.get((group, m))
                if g is None:
                    continue
                lines.append(
                    f"| {group} | {m} | {_x(g.speedup)} | {_x(g.worst_speedup)} | {_num(g.tok_s, 1)} | "
                    f"{_pct(g.acceptance)} | {_num(g.tokens_per_step)} | {g.identical_pct:.0f}% | "
                    f"{_pct(g.of_oracle)} |")
        lines.append("")
        lines += _inplace_lines([c for c in inplace if c.model == model and c.method == "fucina"])
        divs = [d for d in divergences if d.model == model]
        lines += _divergence_lines(divs)
    lines += ["## Methods", ""]
    lines += [f"- **{m}**: {METHOD_LEGEND[m]}" for m in METHODS if m in METHOD_LEGEND]
    lines.append("")
    return "\n".join(lines)


def _inplace_lines(costs: Sequence[InPlaceCost]) -> list[str]:
    if not any(c.rows > 1 for c in costs):
        return []
    lines = ["fucina's forwards in place (cost = mean seconds / mean seconds of its own plain steps, pooled "
             "over its runs; table = the cost table the policy started from, which it rescales live):", "",
             "| rows | forwards | cost in place | table | in place / table |", "|---:|---:|---:|---:|---:|"]
    for c in costs:
        ratio = c.cost / c.table if c.cost is not None and c.table else None
        lines.append(f"| {c.rows} | {c.forwards} | {_num(c.cost)} | {_num(c.table)} | {_num(ratio)} |")
    lines.append("")
    return lines


def _divergence_lines(divs: Sequence[Divergence], cap: int = 50) -> list[str]:
    if not divs:
        return ["Greedy divergences from plain: none.", ""]
    lines = [f"Greedy divergences from plain ({len(divs)}; top-2 gap = plain's logit(top1) - logit(top2) at "
             "the first differing token: a small gap is a near-tie flipped by batched rounding):", "",
             "| task | method | repeat | position | plain token | method token | top-2 gap | runner-up |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for d in divs[:cap]:
        tok = "(ended)" if d.method_token is None else str(d.method_token)
        ru = "–" if d.runner_up is None else ("yes" if d.runner_up else "no")
        lines.append(f"| {d.task_id} | {d.method} | {d.repeat} | {d.position} | {d.plain_token} | {tok} | "
                     f"{_num(d.top2_gap, 3)} | {ru} |")
    if len(divs) > cap:
        lines.append(f"| … {len(divs) - cap} more in results.json | | | | | | | |")
    lines.append("")
    return lines


# -- chart ------------------------------------------------------------------------------------------

def write_chart(groups: Sequence[GroupSummary], path: str | Path) -> Path:
    """Grouped bars of median speedup per group and method (one panel per model), 1.0 line drawn.

    Raises ImportError when matplotlib is missing (it is the ``bench`` extra).
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    path = Path(path)
    models = _ordered(g.model for g in groups)
    fig, axes = plt.subplots(len(models), 1, figsize=(12, 4.2 * max(1, len(models))), squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        gs = [g for g in groups if g.model == model]
        methods = [m for m in method_order(g.method for g in gs) if m != "plain"]
        glist = _ordered(g.group for g in gs)
        cell = {(g.group, g.method): g.speedup for g in gs}
        width = 0.8 / max(1, len(methods))
        for i, m in enumerate(methods):
            xs = [j + (i - (len(methods) - 1) / 2) * width for j in range(len(glist))]
            ys = [cell.get((grp, m)) or 0.0 for grp in glist]
            ax.bar(xs, ys, width, label=m)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="plain (1.0x)")
        ax.set_xticks(range(len(glist)))
        ax.set_xticklabels(glist, rotation=30, ha="right")
        ax.set_ylabel("speedup vs plain (x)")
        ax.set_title(f"{model}: median generation speedup per group")
        ax.legend(fontsize=8, ncol=min(4, len(methods) + 1))
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def results_json(runs: Sequence[RunRecord], divergences: Sequence[Divergence],
                 meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ``results.json`` document: raw runs and divergences plus both summaries."""
    tasks = summarize_tasks(runs)
    return {
        "meta": dict(meta),
        "groups": [asdict(g) for g in summarize_groups(runs, tasks)],
        "tasks": [asdict(t) for t in tasks],
        "inplace_costs": [asdict(c) for c in inplace_costs(runs, meta.get("cost_tables"))],
        "divergences": [asdict(d) for d in divergences],
        "runs": [r.to_json() for r in runs],
    }
