"""fucina bench: task files, aggregation, reports, and the interleaved runner on the fake model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fucina.backends.fake import FakeModel
from fucina.bench.report import (METHODS, Divergence, RunRecord, inplace_costs, markdown, results_json,
                                 summarize_groups, summarize_tasks, write_chart)
from fucina.bench.suite import PeerRun, encode_prompt, first_difference, peer_accounting, run_suite, sampler_options
from fucina.bench.tasks import Task, TaskFileError, load_tasks, parse_tasks, select_tasks
from fucina.cli import main
from fucina.errors import InvalidOption
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler
from fucina.speculative.costs import CostTable

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TABLE = CostTable(((2, 1.1), (4, 1.4), (8, 2.2), (16, 3.5)), "test table")


def task_line(**over) -> str:
    t = dict(id="t1", kind="repeat", group="repeat", prompt="hello hello", references=[], gen=8,
             temperature=0.0)
    t.update(over)
    return json.dumps(t)


# -- task files -------------------------------------------------------------------------------------

def test_parse_valid_tasks_keeps_fields_and_order():
    lines = [task_line(id="a", references=["doc one"], temperature=0.7), "", task_line(id="b", gen=3)]
    tasks = parse_tasks(lines, "f.jsonl")
    assert [t.id for t in tasks] == ["a", "b"]
    assert tasks[0].references == ("doc one",) and tasks[0].temperature == 0.7 and not tasks[0].greedy
    assert tasks[1].gen == 3 and tasks[1].greedy


@pytest.mark.parametrize("line, needle", [
    (json.dumps({"id": "x", "kind": "k", "group": "g", "prompt": "p", "gen": 4, "temperature": 0}),
     "missing field references"),
    ('{"id": "x", "kind": ', "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (task_line(gen=0), "gen must be an integer >= 1"),
    (task_line(gen="8"), "gen must be an integer >= 1"),
    (task_line(temperature=-0.5), "temperature must be a number >= 0"),
    (task_line(references="doc"), "references must be a list"),
    (task_line(references=[""]), "references must be a list of non-empty strings"),
    (task_line(references=["d"] * 9), "at most 8"),
    (task_line(prompt=""), "prompt must be a non-empty string"),
])
def test_bad_line_is_a_one_line_error_naming_the_line(line, needle):
    with pytest.raises(TaskFileError) as exc:
        parse_tasks([task_line(id="ok"), "", line], "tasks.jsonl")
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("tasks.jsonl line 3:")
    assert needle in msg


def test_duplicate_ids_and_empty_file_are_rejected(tmp_path):
    with pytest.raises(TaskFileError, match="line 2: duplicate id 't1' \\(first on line 1\\)"):
        parse_tasks([task_line(), task_line()], "f")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TaskFileError, match="no tasks"):
        load_tasks(empty)
    with pytest.raises(TaskFileError, match="not found"):
        load_tasks(tmp_path / "missing.jsonl")


def test_select_tasks_filters_limits_and_overrides_gen():
    tasks = parse_tasks([task_line(id=f"{g}{i}", group=g) for g in ("a", "b", "c") for i in range(3)])
    assert [t.id for t in select_tasks(tasks, groups=["c", "a"])] == ["a0", "a1", "a2", "c0", "c1", "c2"]
    assert [t.id for t in select_tasks(tasks, per_group=1)] == ["a0", "b0", "c0"]
    assert [t.id for t in select_tasks(tasks, per_group=2, limit=3)] == ["a0", "a1", "b0"]
    assert {t.gen for t in select_tasks(tasks, gen=5)} == {5}
    with pytest.raises(TaskFileError, match="no task in group\\(s\\) zz; groups: a, b, c"):
        select_tasks(tasks, groups=["zz"])


def test_sampling_settings():
    assert sampler_options(0.0).greedy
    s = sampler_options(0.7)
    assert (s.temperature, s.top_k, s.top_p, s.seed) == (0.7, 40, 0.95, 0)


def test_first_difference_counts_length_mismatch():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_peer_accounting_scores_drafts_against_the_final_stream():
    stream = [10, 11, 12, 13, 14, 15, 16]  # prompt [10, 11] + output [12..16]
    calls = [(3, [13, 14, 99]), (5, []), (6, [16, 17])]  # 2 accepted, a plain step, 1 accepted
    steps, verifies, drafted, accepted = peer_accounting(calls, stream, n_tokens=5)
    assert (steps, verifies, drafted, accepted) == (4, 2, 5, 3)


# -- aggregation and reports (synthetic records) -----------------------------------------------------

def rec(task, group, method, repeat, gen_s, *, tokens=100, identical=True, drafted=0, accepted=0, steps=100):
    return RunRecord(model="m", task_id=task, group=group, kind="k", temperature=0.0, method=method,
                     repeat=repeat, prompt_tokens=10, tokens=tokens, prefill_s=0.1, gen_s=gen_s, steps=steps,
                     drafted=drafted, accepted=accepted, identical=identical)


def synthetic_runs() -> list[RunRecord]:
    runs = []
    # t1: plain tok/s 100, 50, 90.9 (median 90.9); fucina 200, 250, 20 (median 200: the mean would be 157)
    for r, (p, f, o) in enumerate([(1.0, 0.5, 0.25), (2.0, 0.4, 0.25), (1.1, 5.0, 0.25)]):
        runs += [rec("t1", "g", "plain", r, p),
                 rec("t1", "g", "fucina", r, f, identical=r != 2, drafted=10, accepted=8 - r, steps=40),
                 rec("t1", "g", "oracle", r, o, drafted=10, accepted=10, steps=20)]
    # t2: plain 100 tok/s, fucina 150 tok/s, oracle 300 tok/s -> speedup 1.5, of oracle 0.5
    for r in range(3):
        runs += [rec("t2", "g", "plain", r, 1.0), rec("t2", "g", "fucina", r, 1 / 1.5, drafted=4, accepted=2),
                 rec("t2", "g", "oracle", r, 1 / 3, drafted=4, accepted=4)]
    # h: one task in another group, fucina slower than plain
    for r in range(3):
        runs += [rec("h1", "h", "plain", r, 1.0), rec("h1", "h", "fucina", r, 1.25),
                 rec("h1", "h", "oracle", r, 0.5, drafted=2, accepted=2)]
    return runs


def test_task_summary_uses_medians_and_ratio_of_medians():
    ts = {(t.task_id, t.method): t for t in summarize_tasks(synthetic_runs())}
    plain, fuc, ora = ts[("t1", "plain")], ts[("t1", "fucina")], ts[("t1", "oracle")]
    assert plain.tok_s == pytest.approx(100 / 1.1)
    assert fuc.tok_s == pytest.approx(200.0)
    assert fuc.speedup == pytest.approx(200.0 / (100 / 1.1))
    assert ora.speedup == pytest.approx(400.0 / (100 / 1.1))
    assert fuc.of_oracle == pytest.approx(0.5)
    assert plain.speedup == pytest.approx(1.0) and plain.of_oracle is None and plain.acceptance is None
    assert fuc.acceptance == pytest.approx(0.7)  # median of 0.8, 0.7, 0.6
    assert fuc.identical == pytest.approx(2 / 3)
    assert fuc.tokens_per_step == pytest.approx(2.5)


def test_a_task_the_model_ends_at_once_gets_no_speedup():
    # plain stopped after 1 token (it came from the prefill): tok/s ratios there are noise, e.g. 12x
    runs = []
    for r in range(3):
        runs += [rec("s", "g", "plain", r, 1e-3, tokens=1), rec("s", "g", "peer", r, 1e-4, tokens=1),
                 rec("t", "g", "plain", r, 1.0), rec("t", "g", "peer", r, 2.0)]
    ts = {(t.task_id, t.method): t for t in summarize_tasks(runs)}
    assert ts[("s", "peer")].speedup is None and ts[("s", "plain")].speedup is None
    assert ts[("t", "peer")].speedup == pytest.approx(0.5)
    [g] = [g for g in summarize_groups(runs) if g.group == "g" and g.method == "peer"]
    assert g.speedup == pytest.approx(0.5) and g.tasks == 2


def test_group_summary_medians_over_tasks_and_pools_identity():
    gs = {(g.group, g.method): g for g in summarize_groups(synthetic_runs())}
    f = gs[("g", "fucina")]
    assert f.tasks == 2
    assert f.speedup == pytest.approx((2.2 + 1.5) / 2)  # median of two tasks
    assert f.worst_speedup == pytest.approx(1.5)
    assert f.of_oracle == pytest.approx(0.5)
    assert f.identical_pct == pytest.approx(100 * 5 / 6)
    assert gs[("h", "fucina")].speedup == pytest.approx(0.8)
    everything = gs[("all", "fucina")]
    assert everything.tasks == 3 and everything.speedup == pytest.approx(1.5)
    assert everything.identical_pct == pytest.approx(100 * 8 / 9)  # pooled runs, not a median of tasks
    assert gs[("all", "oracle")].of_oracle == pytest.approx(1.0)


def test_markdown_tables_show_groups_methods_and_divergences():
    runs = synthetic_runs()
    div = Divergence(model="m", task_id="t1", group="g", method="fucina", repeat=2, temperature=0.0, position=7,
                     plain_token=11, method_token=12, top2_gap=0.0123, runner_up=True, plain_reproduced=True)
    md = markdown(summarize_groups(runs), [div], {"date": "D", "command": "fucina bench --tasks x"})
    assert "- **command**: `fucina bench --tasks x`" in md
    assert "| group | tasks | fucina | oracle |" in md
    assert "| g | 2 | 1.85x | 3.70x |" in md  # medians of 2.20x/1.50x and 4.40x/3.00x
    assert "| h | 1 | 0.80x | 2.00x |" in md
    assert "| **all** | 3 | 1.50x | 3.00x |" in md
    assert "| g | fucina | 1.85x | 1.50x | 175.0 | 60% | 1.75 | 83% | 50% |" in md
    assert "| g | plain | 1.00x | 1.00x | 95.5 | – | 1.00 | 100% | – |" in md
    assert "| t1 | fucina | 2 | 7 | 11 | 12 | 0.012 | yes |" in md
    assert "![speedup per group and method](speedup.png)" in md


def test_chart_is_a_png(tmp_path):
    path = write_chart(summarize_groups(synthetic_runs()), tmp_path / "sub" / "speedup.png")
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000


def test_results_json_round_trips_through_render(tmp_path, capsys):
    runs = synthetic_runs()
    doc = results_json(runs, [], {"date": "D"})
    src = tmp_path / "in" / "results.json"
    src.parent.mkdir()
    src.write_text(json.dumps(doc))
    assert main(["bench", "--render", str(src), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert (out / "speedup.png").read_bytes()[:8] == PNG_MAGIC
    again = json.loads((out / "results.json").read_text())
    assert again["groups"] == doc["groups"] and len(again["runs"]) == len(runs)
    assert "| g | 2 | 1.85x |" in (out / "results.md").read_text()


# -- the runner on the fake model ----------------------------------------------------------------------

class FakePeer:
    """A stand-in peer: plain decoding, with its greedy output's last token flipped to the runner-up."""

    def __init__(self, model):
        self.model = model
        self.calls = []

    def run(self, prompt, max_tokens, stops, options, num_pred_tokens, clock):
        self.calls.append(num_pred_tokens)
        m = self.model
        m.reset()
        d = PlainDecoder(m, Sampler(options))
        d.feed(prompt)
        out = list(d.generate(max_tokens, stops))
        if options.greedy:
            # the runner-up at the last position, computed from the model itself
            m.reset()
            row = m.forward_step([*prompt, *out[:-1]])
            out[-1] = int(np.argsort(row)[::-1][1])
        m.reset()
        return PeerRun(out, 0.01, 0.02, len(out), 0, 0, 0)

    def close(self):
        pass


def fake_tasks():
    return [
        Task("rep", "repeat", "repeat", "the cat sat on the mat. " * 4, (), 24, 0.0),
        Task("ref", "rag_ref", "rag_ref", "summarize: a story about dogs", ("dogs bark at night, every night.",),
             16, 0.0),
        Task("smp", "copy", "copy_sampled", "copy this: abc abc abc abc", (), 16, 0.7),
    ]


def test_runner_interleaves_methods_and_decoders_match_plain():
    model = FakeModel()
    order = []
    peer = FakePeer(model)
    checkpoints = []
    res = run_suite(model, fake_tasks(), model_name="fake", cost_table=TABLE, repeats=2, peer=peer,
                    progress=lambda t, m, r: order.append((t.id, r, m)),
                    on_task=lambda partial: checkpoints.append(len(partial.runs)))
    assert len(res.runs) == 3 * 2 * len(METHODS)
    assert checkpoints == [2 * len(METHODS) * i for i in (1, 2, 3)]  # one checkpoint after each task, cumulative
    # interleaved: every repeat runs every method in METHODS order, plain first
    assert order[: 2 * len(METHODS)] == [("rep", r, m) for r in range(2) for m in METHODS]
    assert peer.calls[:2] == [None, 2]  # default num_pred_tokens, then 2
    by = {(r.task_id, r.method, r.repeat): r for r in res.runs}
    for r in res.runs:
        if r.method not in ("peer", "peer_n2"):
            # the fake model is batch-invariant, so every lossless decoder must equal plain exactly
            assert r.identical, (r.task_id, r.method, r.repeat)
        assert r.prompt_tokens == len(model.tokenize(next(t.prompt for t in fake_tasks() if t.id == r.task_id)))
        assert r.gen_s > 0 and r.tokens > 0
    oracle = by[("rep", "oracle", 0)]
    assert oracle.verifies > 0 and oracle.accepted == oracle.drafted  # perfect drafts are all accepted
    assert by[("rep", "plain", 0)].steps == by[("rep", "plain", 0)].tokens
    # references go to the full cascade only, never into the prompt
    assert "ref0" in by[("ref", "fucina", 0)].extra["sources"]
    assert "ref0" in by[("ref", "gate_open", 0)].extra["sources"]
    assert "ref0" in by[("ref", "match_only", 0)].extra["sources"]
    assert set(by[("ref", "sam_only", 0)].extra["sources"]) == {"conversation"}
    # word pieces (the fake's letters) are learned apart by fucina, not by the no_pieces ablation
    def labels(method):
        return {lab for kind in by[("rep", method, 1)].extra["policy"]["learned"].values() for lab in kind}
    assert any(lab.endswith(" piece") for lab in labels("fucina"))
    assert not any(lab.endswith(" piece") for lab in labels("no_pieces"))
    assert by[("rep", "gate_open", 0)].verifies >= by[("rep", "fucina", 0)].verifies
    # the stand-in peer flips its last greedy token: caught, with plain's top-2 gap there
    peer_runs = [r for r in res.runs if r.method == "peer" and r.temperature == 0]
    assert peer_runs and all(not r.identical and r.first_diff == r.tokens - 1 for r in peer_runs)
    divs = [d for d in res.divergences if d.method == "peer"]
    assert len(divs) == len(peer_runs)  # one per greedy peer run; none for the sampled task
    assert all(d.runner_up and d.top2_gap is not None and d.top2_gap >= 0 and d.plain_reproduced for d in divs)
    assert not [d for d in res.divergences if d.method not in ("peer", "peer_n2")]


def test_the_fucina_method_decodes_through_the_products_decoder_factory(monkeypatch):
    """The bench measures the product: its fucina method builds every decoder through
    fucina.decoders.DecoderFactory, with the options an LLM on the same model and cost table uses,
    and commits what that LLM's call commits."""
    import fucina.bench.suite as suite
    from fucina import LLM
    from fucina.decoders import DecoderFactory

    factories = []

    class Recording(DecoderFactory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.built = []
            factories.append(self)

        def decoder(self, *args, **kwargs):
            self.built.append(super().decoder(*args, **kwargs))
            return self.built[-1]

    monkeypatch.setattr(suite, "DecoderFactory", Recording)
    model = FakeModel()
    task = Task("ref", "rag_ref", "rag_ref", "summarize: a story about dogs", ("dogs bark at night, every night.",),
                24, 0.0)
    res = run_suite(model, [task], model_name="fake", cost_table=TABLE, repeats=2, methods=["fucina"])
    (factory,) = factories  # one for the method, so its repeats share one acceptance model as an LLM's calls do
    assert [r.method for r in res.runs] == ["plain", "fucina", "plain", "fucina"]
    assert len(factory.built) == 2 and all(d.policy.model is factory.acceptance for d in factory.built)
    llm = LLM(FakeModel(), cost_table=TABLE, name="fake", progress=False)
    assert factory.options == llm._factory().options  # cost table, decoder and cascade options, clock
    prompt = encode_prompt(model, task.prompt)
    for decoder in factory.built:
        call = llm.complete(prompt, max_tokens=task.gen, temperature=0, references=list(task.references))
        assert decoder.history[len(prompt):] == list(call.token_ids)
        # the task's reference is drafted from on both paths (which sources draft depends on live timings)
        assert decoder.source.n_references == 1 and "ref0" in {s.name for s in decoder.source.stats().sources}


def test_plain_again_is_plain_decoding_and_fucina_counts_its_forwards():
    res = run_suite(FakeModel(), fake_tasks(), model_name="fake", cost_table=TABLE, repeats=2,
                    methods=["fucina", "plain_again"])
    by = {(r.task_id, r.method, r.repeat): r for r in res.runs}
    assert [r.method for r in res.runs[:3]] == ["plain", "fucina", "plain_again"]  # the A/A repeat runs last
    for (task, method, repeat), r in by.items():
        if method == "plain_again":
            plain = by[(task, "plain", repeat)]
            assert r.identical and r.steps == r.tokens == plain.tokens and r.verifies == 0 and not r.extra
        elif method == "fucina":
            fw = {int(k): v for k, v in r.extra["forwards"].items()}
            # every step but the first (its token comes from the prompt's forward) is one forward:
            # rows 1 for a plain step, k + 1 for a verify of k drafts
            assert sum(n for n, _ in fw.values()) == r.steps - 1
            assert sum(n for rows, (n, _) in fw.items() if rows > 1) == r.verifies
            assert sum((rows - 1) * n for rows, (n, _) in fw.items()) == r.drafted
            assert all(sec > 0 for _, sec in fw.values())
    assert any(int(k) > 1 for r in res.runs if r.method == "fucina" for k in r.extra["forwards"])


def test_inplace_costs_divide_by_the_same_runs_plain_steps():
    a = rec("t1", "g", "fucina", 0, 1.0)
    a.extra = {"forwards": {"1": [8, 0.08], "4": [2, 0.05]}}
    b = rec("t2", "g", "fucina", 0, 1.0)
    b.extra = {"forwards": {"1": [2, 0.02], "4": [2, 0.03], "9": [1, 0.04]}}
    c = rec("t1", "g", "sam_only", 0, 1.0)
    c.extra = {"forwards": {"4": [1, 0.02]}}  # no plain step to divide by
    runs = [a, b, c, rec("t1", "g", "plain", 0, 1.0)]
    costs = {(x.method, x.rows): x for x in inplace_costs(runs, {"m": {"points": [[4, 1.6], [8, 2.0]]}})}
    assert set(costs) == {("fucina", 1), ("fucina", 4), ("fucina", 9), ("sam_only", 4)}
    assert costs[("fucina", 1)].cost == pytest.approx(1.0) and costs[("fucina", 1)].forwards == 10
    assert costs[("fucina", 4)].cost == pytest.approx((0.08 / 4) / 0.01)  # pooled: 0.02 s per verify
    assert costs[("fucina", 4)].table == pytest.approx(1.6)
    assert costs[("fucina", 9)].cost == pytest.approx(4.0) and costs[("fucina", 9)].table == pytest.approx(2.1)
    assert costs[("sam_only", 4)].cost is None
    assert all(x.table is None for x in inplace_costs(runs))
    text = markdown(summarize_groups(runs), inplace=inplace_costs(runs, {"m": {"points": [[4, 1.6], [8, 2.0]]}}))
    assert "| 4 | 4 | 2.00 | 1.60 | 1.25 |" in text
    assert "forwards in place" not in markdown(summarize_groups(runs))
    assert results_json(runs, [], {})["inplace_costs"]


class DriftModel(FakeModel):
    """Batched verify rows past the first swap their top-2 logits: a caricature of batched-GEMM drift."""

    def forward_step(self, tokens):
        return FakeModel.forward_step_all_logits(self, tokens)[-1]

    def forward_step_all_logits(self, tokens):
        rows = FakeModel.forward_step_all_logits(self, tokens)
        for row in rows[1:]:
            a, b = np.argsort(row)[::-1][:2]
            row[a], row[b] = row[b], row[a]
        return rows


def test_divergence_reports_plain_top2_gap_at_first_difference():
    model = DriftModel()
    task = Task("rep", "repeat", "repeat", "the cat sat on the mat. " * 4, (), 24, 0.0)
    res = run_suite(model, [task], model_name="drift", cost_table=TABLE, repeats=1,
                    methods=["plain", "oracle"])
    oracle = next(r for r in res.runs if r.method == "oracle")
    assert not oracle.identical
    (d,) = res.divergences
    assert d.method == "oracle" and d.position == oracle.first_diff
    # recompute plain's row at the divergence independently
    model.reset()
    dec = PlainDecoder(model, Sampler(sampler_options(0.0)))
    prompt = encode_prompt(model, task.prompt)
    dec.feed(prompt)
    plain = list(dec.generate(task.gen, model.eos_ids))
    model.reset()
    row = model.forward_step([*prompt, *plain[: d.position]])
    top1, top2 = np.sort(row)[::-1][:2]
    assert d.plain_token == plain[d.position]
    assert d.top2_gap == pytest.approx(float(top1) - float(top2))
    assert d.runner_up and d.method_token == int(np.argsort(row)[::-1][1])


def test_gate_open_ablation_keeps_verifying_where_the_policy_declines():
    # Verifies priced at 10 plain steps per row: the policy must decline; the forced-open ablation must not stop.
    costly = CostTable(((2, 20.0), (16, 160.0)), "hopelessly expensive verifies")
    task = Task("free", "freeform", "freeform", "zq8 vy3 kx1 mw0 pj7 " * 3, (), 64, 0.0)
    res = run_suite(FakeModel(seed=3), [task], model_name="fake", cost_table=costly, repeats=1,
                    methods=["fucina", "gate_open"])
    by = {r.method: r for r in res.runs}
    assert by["fucina"].extra["policy"]["declined"] >= 10 and by["fucina"].extra["policy"]["chosen"] == 0
    assert by["gate_open"].verifies > by["fucina"].verifies
    assert by["gate_open"].steps < by["fucina"].steps  # the tripped gate fell back to plain steps
    assert by["fucina"].identical and by["gate_open"].identical


def test_runner_rejects_bad_configuration():
    model = FakeModel(context_length=64)
    with pytest.raises(InvalidOption, match="peer methods need a peer engine"):
        run_suite(model, fake_tasks()[:1], model_name="f", cost_table=TABLE, methods=["fucina", "peer"])
    with pytest.raises(InvalidOption, match="unknown method"):
        run_suite(model, fake_tasks()[:1], model_name="f", cost_table=TABLE, methods=["turbo"])
    with pytest.raises(InvalidOption, match="task rep needs .* more than the context of 64"):
        run_suite(model, fake_tasks()[:1], model_name="f", cost_table=TABLE, methods=["plain"])


# -- the command line -----------------------------------------------------------------------------------

def write_tasks(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_dry_run_prints_plan_without_running(tmp_path, capsys):
    f = write_tasks(tmp_path / "t.jsonl", [task_line(id="a"), task_line(id="b", group="copy", references=["x"])])
    assert main(["bench", "--tasks", str(f), "--dry-run", "--repeats", "2", "--methods", "fucina,oracle",
                 "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "methods (interleaved per repeat): plain, fucina, oracle" in out
    assert "runs: 12" in out  # 2 tasks x 3 methods x 2 repeats
    assert "copy: 1 task(s)" in out and "1 reference(s)" in out
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv_tail, needle", [
    (["--methods", "fucina,warp"], "unknown method(s) warp"),
    (["--groups", "nope"], "no task in group(s) nope"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--model", "no-such-model"], "no model 'no-such-model'"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, argv_tail, needle):
    f = write_tasks(tmp_path / "t.jsonl", [task_line()])
    assert main(["bench", "--tasks", str(f), "--dry-run", *argv_tail]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err


def test_cli_bad_task_line_names_the_line(tmp_path, capsys):
    f = write_tasks(tmp_path / "t.jsonl", [task_line(), '{"id": "b", "kind": "k"'])
    assert main(["bench", "--tasks", str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{f} line 2: not valid JSON" in err
    assert main(["bench", "--dry-run"]) == 2
    assert "--tasks FILE is required" in capsys.readouterr().err


# -- real model smoke -------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.real_model
def test_real_smoke_gemma(tmp_path):
    f = write_tasks(tmp_path / "t.jsonl", [task_line(id="rep", prompt="The quick brown fox jumps over the lazy "
                                                     "dog.\n\n" * 3, gen=16)])
    table = tmp_path / "table.json"
    TABLE.save(table)  # a given table: the smoke test must not calibrate or touch the user's cache
    out = tmp_path / "out"
    assert main(["bench", "--tasks", str(f), "--model", "gemma3-270m", "--repeats", "1", "--gen", "16",
                 "--ctx", "1024", "--cost-table", str(table), "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    runs = {r["method"]: r for r in doc["runs"]}
    assert set(runs) == set(METHODS)
    assert all(r["tokens"] == 16 or r["stop"] == "stop" for r in runs.values())
    assert runs["plain"]["identical"] and runs["oracle"]["verifies"] > 0
    assert runs["peer"]["steps"] > 0 and runs["peer_n2"]["steps"] > 0
    divergent = {(d["method"], d["repeat"]) for d in doc["divergences"]}
    for r in runs.values():  # every greedy run that left plain is explained by a divergence record
        assert r["identical"] or (r["method"], r["repeat"]) in divergent
    assert (out / "speedup.png").read_bytes()[:8] == PNG_MAGIC
    assert "| repeat | 1 |" in (out / "results.md").read_text()
