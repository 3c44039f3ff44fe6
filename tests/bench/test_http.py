"""The HTTP benchmark's report: speedups are each server over its own plain server, medians over tasks."""

from __future__ import annotations

import pytest

from benchmarks import http


def _sample(server: str, group: str, item: str, tps: float, repeat: int = 0) -> dict:
    return dict(server=server, workload="task", group=group, item=item, repeat=repeat, prompt_chars=10,
                tokens=64, ttft=0.1, decode_tps=tps, wall=1.0, seen=repeat > 0, text_sha="")


def test_speedup_is_over_the_same_servers_plain_run_median_of_tasks():
    samples = [
        # task a: fucina 2x its plain (median of 3 repeats), ngram-mod 1.5x llama-server
        *[_sample("fucina", "g", "a", v, r) for r, v in enumerate((20.0, 22.0, 100.0))],
        *[_sample("fucina-plain", "g", "a", 11.0, r) for r in range(3)],
        _sample("llama-server", "g", "a", 10.0), _sample("ngram-mod", "g", "a", 15.0),
        # task b: fucina 1x
        _sample("fucina", "g", "b", 10.0), _sample("fucina-plain", "g", "b", 10.0),
        _sample("fucina", "h", "c", 5.0),  # no plain run: no speedup
    ]
    table = http._speedups(samples)
    assert table["g"]["fucina"] == pytest.approx(1.5)  # median of (2.0, 1.0)
    assert table["g"]["ngram-mod"] == pytest.approx(1.5)
    assert "h" not in table


def test_markdown_tables_and_ratios():
    samples = [_sample("fucina", "g", "a", 20.0), _sample("fucina-plain", "g", "a", 10.0),
               _sample("llama-server", "g", "a", 8.0)]
    from dataclasses import fields

    objs = [http.Sample(**{f.name: s[f.name] for f in fields(http.Sample)}) for s in samples]
    summary = http._summary(objs)
    text = http._markdown(summary, ["fucina", "fucina-plain", "llama-server"],
                          {"model": "m", "date": "d", "machine": "x", "command": "c"}, samples)
    assert "| g | 2.50x | 1.25x | 1.00x |" in text  # decode ratio to llama-server
    assert "| g | 2.00x |" in text  # fucina over fucina-plain
    assert "FUCINA_ENGINE" not in text  # results from before the field say nothing of it
    text = http._markdown(summary, ["fucina", "fucina-plain", "llama-server"],
                          {"model": "m", "date": "d", "machine": "x", "command": "c", "fucina_engine": "stock"},
                          samples)
    assert "fucina's engine: `FUCINA_ENGINE=stock`" in text


def test_first_sight_and_seen_before_requests_are_reported_apart():
    # ngram-mod remembers the first answer: 1.0x on first sight, 2.0x when the request comes back.
    samples = [_sample("llama-server", "g", "a", 10.0, r) for r in range(3)]
    samples += [_sample("ngram-mod", "g", "a", v, r) for r, v in enumerate((10.0, 20.0, 20.0))]
    assert http._speedups(samples, seen=False)["g"]["ngram-mod"] == pytest.approx(1.0)
    assert http._speedups(samples, seen=True)["g"]["ngram-mod"] == pytest.approx(2.0)
    old = [{k: v for k, v in s.items() if k != "seen"} for s in samples]  # results from before the field
    assert http._speedups(old, seen=True) == http._speedups(samples, seen=True)
    # With --fresh every repeat is a first sight, whatever its number.
    fresh = [dict(s, seen=False) for s in samples]
    assert http._speedups(fresh, seen=True) == {}
    assert http._speedups(fresh, seen=False)["g"]["ngram-mod"] == pytest.approx(2.0)  # median of 1, 2, 2
    text = "\n".join(http._speedup_table(samples, ["llama-server", "ngram-mod"]))
    assert "first sight" in text and "served before" in text


def test_fucina_xreq_is_measured_against_fucina_plain():
    assert http.PLAIN_OF["fucina-xreq"] == "fucina-plain"
    assert "fucina-xreq" in http.SERVERS


def test_answers_are_compared_with_the_same_servers_plain_answer():
    sha = http.text_sha
    # Each repeat is compared with its own plain answer (sampled answers differ between repeats).
    samples = [dict(_sample("fucina-plain", "g", "a", 10.0, r), text_sha=sha(f"x = {r}")) for r in range(2)]
    samples += [dict(_sample("fucina", "g", "a", 20.0, 0), text_sha=sha("x = 0")),
                dict(_sample("fucina", "g", "a", 20.0, 1), text_sha=sha("x = 0"))]  # repeat 1 parted
    samples += [dict(_sample("llama-server", "g", "a", 10.0), text_sha=sha("y")),
                dict(_sample("ngram-mod", "g", "a", 15.0), text_sha=sha("y"))]
    samples += [_sample("ngram-simple", "g", "a", 15.0)]  # written before answers were hashed: not compared
    assert http._answers(samples) == {"fucina": (1, 2), "ngram-mod": (1, 1)}
    assert len(sha("x")) == 16 and sha("x") != sha("x ")
    from dataclasses import fields

    objs = [http.Sample(**{f.name: s[f.name] for f in fields(http.Sample)}) for s in samples]
    text = http._markdown(http._summary(objs), ["fucina", "fucina-plain", "llama-server", "ngram-mod"],
                          {"model": "m", "date": "d", "machine": "x", "command": "c"}, samples)
    assert "| fucina / fucina-plain | 1/2 |" in text
    assert "| ngram-mod / llama-server | 1/1 |" in text
    assert "equal" not in http._markdown(http._summary(objs[:1]), ["fucina-plain"],
                                         {"model": "m", "date": "d", "machine": "x", "command": "c"},
                                         [{k: v for k, v in samples[0].items() if k != "text_sha"}])
