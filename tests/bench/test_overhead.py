"""python -m benchmarks.overhead: the per-step time split, on the fake model."""

from __future__ import annotations

import pytest

from fucina.backends.fake import FakeModel
from benchmarks.overhead import COMPONENTS, Timers, format_table, main, profile_task, summarize
from fucina.bench.suite import prepare
from fucina.bench.tasks import Task
from fucina.speculative.costs import CostTable

TABLE = CostTable(((2, 1.1), (4, 1.4), (8, 2.2), (16, 3.5)), "test table")


def test_components_add_up_to_the_generation_time():
    model = FakeModel()
    task = Task("rep", "repeat", "repeat", "the cat sat on the mat. " * 6, [], 48, 0.0)
    [p] = prepare(model, [task])
    for method in ("plain", "fucina"):
        parts, tokens = profile_task(model, p, TABLE, method)
        assert tokens == 48
        assert parts["forward"] > 0 and parts["sample"] > 0 and parts["other"] >= 0
        assert sum(parts[c] for c in COMPONENTS if c in parts) == parts["total"]
        if method == "fucina":
            assert parts["index"] > 0 and parts["policy"] > 0
        else:
            assert "index" not in parts and "policy" not in parts
    # the instrumentation is removed: the model's methods are the class's again
    assert "forward_step" not in vars(model)
    s = summarize(parts, tokens)
    assert sum(s["share"].values()) == pytest.approx(1.0)
    assert "fucina" in format_table({"fucina": s})


def test_instrumentation_is_removed_when_a_run_raises():
    model = FakeModel()
    [p] = prepare(model, [Task("rep", "repeat", "repeat", "abc abc abc", [], 8, 0.0)])

    def boom(tokens):
        raise RuntimeError("backend failed")

    model.forward_step = boom  # profile_task wraps this instance attribute, then must drop it
    with pytest.raises(RuntimeError):
        profile_task(model, p, TABLE, "plain")
    assert "forward_step" not in vars(model) and "forward_step_all_logits" not in vars(model)


def test_timers_count_time_even_when_the_call_raises():
    class Boom:
        def go(self):
            raise ValueError("x")

    t, b = Timers(), Boom()
    t.wrap(b, "go", "index")
    with pytest.raises(ValueError):
        b.go()
    assert t.ns["index"] > 0


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    f.write_text('{"id": "a", "kind": "repeat", "group": "repeat", "prompt": "x", "references": [], '
                 '"gen": 4, "temperature": 0}\n')
    assert main(["--tasks", str(f), "--group", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("overhead: ") and err.count("\n") == 1
