"""The edit workload's tasks and report (no server, no model)."""

from __future__ import annotations

from benchmarks.edit import METHODS, chat_messages, completion_prompt, load_tasks, render, summarize


def test_tasks_are_60_to_200_line_stdlib_functions_with_the_parameter_to_rename():
    tasks = load_tasks(6)
    assert len(tasks) == 6 and len({t["id"] for t in tasks}) == 6
    for t in tasks:
        assert 60 <= t["lines"] <= 200 and t["param"] in t["source"]
        assert t["source"] in completion_prompt(t) and t["source"] in chat_messages(t)[-1]["content"]


def _sample(task, repeat, method, tps, text="same"):
    return {"task": task, "repeat": repeat, "method": method, "text": text, "tokens": 10, "cached": 0,
            "accepted_prediction": 7 if method == "prediction" else 0, "rejected_prediction": 0,
            "ttft": 0.5, "decode_tps": tps, "level": "exact"}


def test_summary_is_the_median_over_repeats_then_tasks_and_counts_identity():
    samples = []
    for task, pred in (("a", (20.0, 30.0, 40.0)), ("b", (10.0, 10.0, 10.0))):
        for r, tps in enumerate(pred):
            samples += [_sample(task, r, "prediction", tps), _sample(task, r, "plain", 10.0),
                        _sample(task, r, "none", 10.0, text="same" if r else "other")]
    s = summarize(samples)
    assert s["prediction"]["speedup"] == 2.0 and s["prediction"]["worst_task"] == 1.0  # median(3.0, 1.0)
    assert s["plain"]["speedup"] == 1.0 and s["plain"]["identical"] == 6
    assert s["none"]["identical"] == 4 and s["none"]["runs"] == 6  # repeat 0 differs on both tasks
    text = render(s, {"model": "m", "endpoint": "chat", "tasks": 2, "repeats": 3, "gen": 10, "level": "exact",
                      "date": "d", "machine": "x"})
    assert "| prediction | 2.00x | 1.00x | 500 ms | 6/6 | 7 |" in text and all(m in text for m in METHODS)


def test_bounds_read_what_the_drafts_allow_for_each_distinct_plain_answer(tmp_path):
    import re

    from benchmarks.edit import bounds, render_bounds
    from fucina.speculative.costs import CostTable

    task = next(t for t in load_tasks(6) if t["param"] != "self")
    renamed = re.sub(rf"\b{task['param']}\b", task["param"] + "_arg", task["source"])
    answer = f"```python\n{renamed}```"
    recorded = {"meta": {"model": "smollm2-135m", "endpoint": "chat"},
                "samples": [{**_sample(task["id"], r, "plain", 10.0, text=answer)} for r in (0, 1)]
                + [_sample(task["id"], 0, "prediction", 30.0, text=answer)]}
    table = tmp_path / "table.json"
    CostTable(((2, 1.3), (8, 2.0), (64, 6.0)), "test: a cheap verify").save(table)
    rows = bounds(recorded, table)
    assert len(rows) == 1 and rows[0]["tokens"] > 100  # one distinct plain answer; the others are skipped
    for name in ("before", "realign", "default"):
        b = rows[0][name]
        assert 1.0 <= b["policy"] <= b["perfect"] + 1e-9
    # Renaming the parameter everywhere breaks the copy at each use: realign picks it up again in fewer steps,
    # and rewrite rules (the default) let drafts run through the renames the policy verifies.
    assert rows[0]["realign"]["steps"] < rows[0]["before"]["steps"]
    assert rows[0]["realign"]["perfect"] > rows[0]["before"]["perfect"]
    assert rows[0]["default"]["policy"] > rows[0]["realign"]["policy"]
    assert render_bounds(rows).count("\n") == 2 and task["id"] in render_bounds(rows)
    # One acceptance model across the answers, as a server shares it: the same perfect decision.
    shared = bounds(recorded, table, shared=True)
    assert [r["tokens"] for r in shared] == [r["tokens"] for r in rows]
    for name in ("before", "realign", "default"):
        assert shared[0][name]["perfect"] == rows[0][name]["perfect"]
        assert 1.0 <= shared[0][name]["policy"] <= shared[0][name]["perfect"] + 1e-9
    # Without the prediction (the `none` method's server) the prompt's copy drafts, read as copied: the
    # policy's figure stays within the same bounds.
    unpredicted = bounds(recorded, table, prediction=False)
    assert [r["tokens"] for r in unpredicted] == [r["tokens"] for r in rows]
    assert 1.0 <= unpredicted[0]["default"]["policy"] <= unpredicted[0]["default"]["perfect"] + 1e-9


def test_methods_of_the_before_checkout_are_summarized_beside_the_others_with_a_row_per_task():
    samples = []
    for task in ("a", "b"):
        for r in range(3):
            samples += [_sample(task, r, "none", 30.0), _sample(task, r, "none@before", 20.0),
                        _sample(task, r, "plain", 10.0)]
    s = summarize(samples)
    assert list(s) == ["none", "none@before", "plain"]
    assert s["none"]["speedup"] == 3.0 and s["none@before"]["speedup"] == 2.0
    text = render(s, {"model": "m", "endpoint": "chat", "tasks": 2, "repeats": 3, "gen": 10, "level": "exact",
                      "date": "d", "machine": "x", "task_ids": ["a", "b"]})
    assert "| task | none | none@before |" in text and "| a | 3.00x | 2.00x |" in text


def test_before_needs_a_checkouts_src_directory(tmp_path, capsys):
    import pytest

    from benchmarks.edit import main

    with pytest.raises(SystemExit) as exc:
        main(["--before", str(tmp_path), "--tasks", "1"])
    assert exc.value.code == 2 and "no fucina package there" in capsys.readouterr().err
