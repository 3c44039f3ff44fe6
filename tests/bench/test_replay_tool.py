"""The model-free replay tool (``python -m benchmarks.replay``) and the cross-request memory bench.

No model and no ../shared: a byte tokenizer stands in for the model's, and the traces are written here.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import crossreq as crossreq_bench
from benchmarks import replay
from fucina.speculative.index import CascadeOptions


class ByteTokenizer:
    vocab_size = 256

    @staticmethod
    def tokenize(text: str, add_bos: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    @staticmethod
    def token_bytes(token: int) -> bytes:
        return bytes([token]) if token < 256 else f"<t{token}>".encode()  # FakeModel's ids past the bytes


def brute_ceiling(prompt, cont, cap, earlier=()):
    """The ceiling walk by brute force: longest prefix of what follows occurring in the text before."""
    text = []
    for doc in earlier:
        text += list(doc) + [None]  # a boundary no match crosses
    text += list(prompt)
    out, i = [], 0
    while i < len(cont):
        best = 0
        for L in range(1, min(cap, len(cont) - i) + 1):
            needle = cont[i: i + L]
            if any(text[s: s + L] == needle for s in range(len(text) - L + 1)):
                best = L
            else:
                break
        out.append(best)
        text += cont[i: i + best + 1]
        i += best + 1
    return out


def test_ceiling_worked_example():
    assert replay.ceiling_steps([1, 2, 3], [1, 2, 3, 4], 16) == [3]
    assert replay.ceiling_steps([], [5, 5, 5, 5], 16) == [0, 1, 1]  # nothing, then [5] twice: the walk reuses its own text


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), min_size=1, max_size=40),
       st.lists(st.lists(st.integers(0, 3), max_size=10), max_size=3), st.integers(1, 6))
def test_ceiling_equals_brute_force(prompt, cont, earlier, cap):
    assert replay.ceiling_steps(prompt, cont, cap, earlier) == brute_ceiling(prompt, cont, cap, earlier)


def write_traces(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def trace_rows():
    code = "def area(r):\n    return 3.14159 * r * r\n"
    return [
        {"source": "agent", "trajectory": "t1", "step": 1, "context": "fix it:\n" + code,
         "output": code.replace("3.14159", "math.pi")},
        {"source": "agent", "trajectory": "t1", "step": 0, "context": "show:\n" + code, "output": code},
        {"source": "other", "trajectory": "t2", "step": 0, "context": "hello there", "output": "general kenobi"},
    ]


def test_trace_streams_group_order_and_carry_earlier_requests(tmp_path):
    f = tmp_path / "t.jsonl"
    write_traces(f, trace_rows())
    w = replay.trace_streams(f, ByteTokenizer.tokenize, context_tokens=1000)
    assert set(w) == {"trace:agent", "trace:other"}
    first, second = w["trace:agent"]
    assert first.earlier == [] and second.earlier == [first.prompt + first.continuation]  # step order
    assert bytes(second.prompt).startswith(b"fix it")
    short = replay.trace_streams(f, ByteTokenizer.tokenize, context_tokens=5)
    assert all(len(s.prompt) <= 5 for s in short["trace:agent"])
    (tmp_path / "bad.jsonl").write_text('{"source": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        replay.trace_streams(tmp_path / "bad.jsonl", ByteTokenizer.tokenize)


def test_policy_in_the_loop_wins_on_copies_and_never_loses_on_noise():
    rng = random.Random(0)
    text = [rng.randrange(256) for _ in range(400)]
    copy = replay.Stream(prompt=text, continuation=text[:300])
    noise = replay.Stream(prompt=text, continuation=[rng.randrange(256) for _ in range(300)])
    opts = CascadeOptions(recycling=False)
    for table in (replay.flat_table(), replay.CostTable(((2, 1.5), (9, 4.0), (17, 7.0)), "cpu-like")):
        won, flat = replay.WorkloadResult("copy"), replay.WorkloadResult("noise")
        replay.replay_stream(copy, 256, won, options=opts, table=table)
        replay.replay_stream(noise, 256, flat, options=opts, table=table)
        assert won.as_dict()["projected_speedup"] > 2.0
        assert flat.as_dict()["projected_speedup"] >= 0.98  # the floor, with the policy pricing each step
        assert won.as_dict()["ceiling_tokens_per_step"] >= won.as_dict()["tokens_per_step"]
    raw = replay.WorkloadResult("noise-raw")
    replay.replay_stream(noise, 256, raw, options=opts, table=replay.flat_table(), use_policy=False)
    assert raw.sources["conversation"].drafted > flat.sources["conversation"].drafted  # the policy declined


def test_cli_traces_with_cross_request_and_priors(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(replay.cli, "_load_tokenizer", lambda model: ByteTokenizer())
    f = tmp_path / "t.jsonl"
    write_traces(f, trace_rows())
    assert replay.main(["--traces", str(f), "--no-synthetic", "--no-recycling", "--flat",
                        "--cross-request", "4096"]) == 0
    out = capsys.readouterr().out
    assert "trace:agent +cross-request" in out and "drafting policy chooses" in out and "x" in out
    assert replay.main(["--traces", str(f), "--no-synthetic", "--no-recycling", "--flat", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    agent = next(w for w in doc["workloads"] if w["name"] == "trace:agent")
    assert agent["projected_speedup"] > 1.0 and agent["ceiling_tokens_per_step"] > 1.0
    # --per-task splits the rows but not the learning: a workload's rows share its acceptance model,
    # so they take the same steps as the workload replayed whole.
    assert replay.main(["--traces", str(f), "--no-synthetic", "--no-recycling", "--flat", "--json",
                        "--per-task"]) == 0
    rows = [w for w in json.loads(capsys.readouterr().out)["workloads"] if w["name"].startswith("trace:agent:")]
    assert len(rows) == 2
    assert sum(w["steps"] for w in rows) == agent["steps"] and sum(w["tokens"] for w in rows) == agent["tokens"]
    assert replay.main(["--traces", str(f), "--no-synthetic", "--priors"]) == 0
    priors = capsys.readouterr().out
    assert "m1 " in priors and " piece " in priors  # the byte tokenizer's letters are word pieces
    assert replay.main(["--traces", str(f), "--no-synthetic", "--priors", "--no-word-pieces"]) == 0
    assert " piece " not in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--cross-request", "10"], ["--traces", "x", "--cross-request", "0"],
                                  ["--flat", "--cost-table", "t.json"], ["--context-tokens", "0"]])
def test_cli_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        replay.main(argv)
    assert e.value.code == 2


def test_cli_missing_traces_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(replay.cli, "_load_tokenizer", lambda model: ByteTokenizer())
    assert replay.main(["--traces", str(tmp_path / "nope.jsonl"), "--no-synthetic"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cross_request_memory_bench_respects_the_bound():
    docs = [[random.Random(i).randrange(1000) for _ in range(300)] for i in range(20)]
    r = crossreq_bench.measure(docs, bound=1000, passes=2)
    assert r["tokens"] <= 1000 and r["evictions"] > 0 and r["bytes_per_token"] > 4
    assert r["ms_per_request_max"] >= r["ms_per_request_median"] > 0


def test_recorded_streams_round_trip_through_the_replay(tmp_path, monkeypatch, capsys):
    """A FakeModel's plain outputs recorded by bench.streams replay per group, with the perfect policy."""
    from fucina.backends.fake import FakeModel
    from benchmarks import streams
    from fucina.bench.suite import Task
    from fucina.plain import PlainDecoder
    from fucina.sampling import Sampler, SamplerOptions

    monkeypatch.setattr(replay.cli, "_load_tokenizer", lambda model: ByteTokenizer())
    model = FakeModel()
    tasks = [Task("rep", "repeat", "repeat", "the cat sat on the mat. " * 6, (), 48, 0.0),
             Task("ref", "rag_ref", "rag_ref", "tell me", ("the cat sat on the mat.",), 24, 0.0)]
    out = tmp_path / "s.jsonl"
    assert streams.record(model, tasks, out) == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    plain = PlainDecoder(model, Sampler(SamplerOptions()))
    model.reset()
    plain.feed(rows[0]["prompt"])
    assert rows[0]["output"] == list(plain.generate(48, frozenset(model.eos_ids)))  # the plain stream
    assert rows[1]["references"] and rows[1]["group"] == "rag_ref" and rows[0]["temperature"] == 0.0
    got = replay.recorded_streams(out)
    assert set(got) == {"stream:repeat", "stream:rag_ref"} and got["stream:rag_ref"][0].references
    assert replay.main(["--streams", str(out), "--no-synthetic", "--flat", "--json",
                        "--vocab-size", str(model.vocab_size)]) == 0
    doc = json.loads(capsys.readouterr().out)
    for w in doc["workloads"]:
        assert w["perfect_policy_speedup"] >= 1.0  # it only verifies what pays: never below plain
    # --per-task: a row per recorded task (named by its id), then each group's median over its tasks.
    assert replay.main(["--streams", str(out), "--no-synthetic", "--flat", "--json", "--per-task",
                        "--vocab-size", str(model.vocab_size)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {w["name"] for w in doc["workloads"]} == {"stream:repeat:rep", "stream:rag_ref:ref"}
    speed = {w["name"]: w["projected_speedup"] for w in doc["workloads"]}
    assert doc["task_medians"]["stream:repeat"] == speed["stream:repeat:rep"]
    assert set(doc["task_medians"]) == {"stream:repeat", "stream:rag_ref", "all"}
    # ... and beside it what the drafts allow, per group: the perfect decision and the ceiling.
    perfect = {w["name"]: w["perfect_policy_speedup"] for w in doc["workloads"]}
    ceiling = {w["name"]: w["ceiling_speedup"] for w in doc["workloads"]}
    assert doc["task_medians_perfect"]["stream:repeat"] == perfect["stream:repeat:rep"]
    assert doc["task_medians_ceiling"]["stream:rag_ref"] == ceiling["stream:rag_ref:ref"]

    def no_tokenizer(model):
        raise OSError("no such model")

    # Streams are token ids already: without a tokenizer they replay, without word pieces.
    monkeypatch.setattr(replay.cli, "_load_tokenizer", no_tokenizer)
    assert replay.main(["--streams", str(out), "--no-synthetic", "--flat", "--json",
                        "--vocab-size", str(model.vocab_size)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["workloads"] and "without word pieces" in captured.err
    (tmp_path / "bad.jsonl").write_text('{"group": "x"}\n')
    assert replay.main(["--streams", str(tmp_path / "bad.jsonl"), "--no-synthetic"]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_recorded_streams_name_their_model_and_the_replay_reads_them_with_it(tmp_path, monkeypatch, capsys):
    from fucina.backends.fake import FakeModel
    from benchmarks import streams
    from fucina.bench.suite import Task

    asked = []
    monkeypatch.setattr(replay.cli, "_load_tokenizer", lambda model: asked.append(model) or ByteTokenizer())
    model = FakeModel()
    out = tmp_path / "s.jsonl"
    tasks = [Task("rep", "repeat", "repeat", "the cat sat on the mat. " * 6, (), 24, 0.0)]
    assert streams.record(model, tasks, out, model_name="fake-135m") == 1
    assert json.loads(out.read_text())["model"] == "fake-135m"
    assert replay.read_recorded(out)[1] == "fake-135m"
    argv = ["--streams", str(out), "--no-synthetic", "--flat", "--json", "--vocab-size", str(model.vocab_size)]
    assert replay.main(argv) == 0 and asked == ["fake-135m"]  # the streams' own tokenizer, not the default
    capsys.readouterr()
    assert replay.main([*argv, "--model", "fake-135m"]) == 0 and asked[-1] == "fake-135m"
    capsys.readouterr()
    # Another tokenizer would misread the streams' word pieces: one line, exit 2, nothing replayed.
    assert replay.main([*argv, "--model", "smollm2-135m"]) == 2
    err = capsys.readouterr()
    assert "written by fake-135m" in err.err and len(err.err.strip().splitlines()) == 1 and not err.out
    # A GGUF path is one model however it is spelled: the file records it absolute, --model may be relative.
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert streams.record(model, tasks, out, model_name=str((tmp_path / "m.gguf").resolve())) == 1
    monkeypatch.chdir(tmp_path)
    assert replay.main([*argv, "--model", "m.gguf"]) == 0 and asked[-1] == "m.gguf"
    capsys.readouterr()
    assert replay.main([*argv, "--model", "fake-135m"]) == 2
    capsys.readouterr()
    assert streams.record(model, tasks, out, model_name="fake-135m") == 1
    # A file from before the field falls back to --model, else the default tokenizer.
    row = json.loads(out.read_text())
    del row["model"]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(row) + "\n")
    assert replay.read_recorded(old)[1] is None
    assert replay.main(["--streams", str(old), *argv[2:]]) == 0 and asked[-1] == replay.DEFAULT_TOKENIZER
    capsys.readouterr()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(out.read_text() + json.dumps({**row, "model": "other"}) + "\n")
    assert replay.main(["--streams", str(mixed), *argv[2:]]) == 2
    assert "several models" in capsys.readouterr().err


def test_task_medians_are_medians_of_per_task_ratios():
    rows = []
    for name, tokens, cost in (("w:a", 10, 10.0), ("w:b", 12, 10.0), ("w:c", 30, 10.0), ("v:a", 5, 5.0)):
        r = replay.WorkloadResult(name)
        r.tokens, r.cost = tokens, cost
        rows.append(r)
    got = replay.task_medians(rows, {"w:a": "w", "w:b": "w", "w:c": "w", "v:a": "v"})
    assert got == {"w": 1.2, "v": 1.0, "all": pytest.approx(1.1)}  # not w's aggregate 52 / 30


def test_perfect_policy_never_costs_more_than_plain_and_wins_on_a_copy():
    rng = random.Random(1)
    text = [rng.randrange(256) for _ in range(300)]
    table = replay.CostTable(((2, 1.5), (9, 4.0), (17, 7.0)), "cpu-like")
    copy = replay.Stream(prompt=text, continuation=text[:200])
    noise = replay.Stream(prompt=text, continuation=[rng.randrange(256) for _ in range(200)])
    opts = CascadeOptions(recycling=False)
    assert replay.perfect_policy_cost(copy, 256, table, options=opts) < 200 / 2
    assert replay.perfect_policy_cost(noise, 256, table, options=opts) <= 200


def test_hindsight_prices_the_reported_pass_with_rates_learned_on_the_same_streams(tmp_path, monkeypatch, capsys):
    # --hindsight: a teaching pass first, so the reported pass starts from every bucket's true rate;
    # without it the first stream starts from the priors alone.
    monkeypatch.setattr(replay.cli, "_load_tokenizer", lambda model: ByteTokenizer())
    f = tmp_path / "t.jsonl"
    write_traces(f, trace_rows())
    seen: list[int] = []
    real = replay.cli.replay_stream

    def spy(stream, vocab_size, result, **kw):
        seen.append(sum(n for kind in kw["acceptance"].learned().values() for _, n in kind.values()))
        return real(stream, vocab_size, result, **kw)

    monkeypatch.setattr(replay.cli, "replay_stream", spy)
    argv = ["--traces", str(f), "--no-synthetic", "--no-recycling", "--flat", "--json"]
    assert replay.main(argv) == 0
    plain_doc, plain_seen = json.loads(capsys.readouterr().out), list(seen)
    seen.clear()
    assert replay.main([*argv, "--hindsight"]) == 0
    doc = json.loads(capsys.readouterr().out)
    n = len(plain_seen)
    assert plain_seen[0] == 0 and len(seen) == 2 * n  # every stream twice: taught, then reported
    assert seen[n] > 0  # the reported pass starts from what the teaching pass scored
    tokens = {w["name"]: w["tokens"] for w in plain_doc["workloads"]}
    assert {w["name"]: w["tokens"] for w in doc["workloads"]} == tokens  # the same streams, reported once
