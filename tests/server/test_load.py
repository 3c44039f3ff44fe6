"""Concurrency: many clients at once, disconnects mid-stream and mid-wait, /health during a generation."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from fucina.server import ServerSettings
from tests.server.conftest import MODEL, REPETITIVE, make_llm, plain, serve

CLIENTS = 8
PER_CLIENT = 3


def _request(i: int, j: int) -> tuple[str, dict]:
    """Client i's j-th request: chat or completion, streamed or not, greedy or sampled."""
    kind = "chat" if (i + j) % 2 == 0 else "complete"
    body = {"model": MODEL, "max_tokens": 24 + 4 * j, "temperature": 0.0 if i % 3 == 0 else 0.7, "seed": 100 * i + j,
            "stream": (i + j) % 3 == 0}
    text = f"client {i} request {j}: " + REPETITIVE[: 16 + 8 * (i % 4)]
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return kind, body


def _text(r: httpx.Response, kind: str, stream: bool) -> str:
    assert r.status_code == 200, r.text
    if not stream:
        choice = r.json()["choices"][0]
        return choice["message"]["content"] if kind == "chat" else choice["text"]
    out = []
    for event in r.text.split("\n\n"):
        if event.startswith("data: {"):
            for c in json.loads(event[6:])["choices"]:
                out.append(c["delta"].get("content") or "" if kind == "chat" else c["text"])
    return "".join(out)


def test_concurrent_clients_all_complete_with_their_solo_output(fake_server, reference):
    results: dict[tuple[int, int], str] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with fake_server.client() as c:
                for j in range(PER_CLIENT):
                    kind, body = _request(i, j)
                    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
                    results[i, j] = _text(c.post(path, json=body), kind, body["stream"])
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors[0]
    assert len(results) == CLIENTS * PER_CLIENT
    assert time.monotonic() - t0 < 60
    for (i, j), text in results.items():
        kind, body = _request(i, j)
        prompt = body["messages"] if kind == "chat" else body["prompt"]
        ref = plain(reference, kind, prompt, max_tokens=body["max_tokens"], temperature=body["temperature"],
                    seed=body["seed"])
        assert text == ref.text, (i, j)
    assert fake_server.wait_idle()["queue"] == 0


@pytest.fixture()
def slow():
    """A server whose fake engine takes 10 ms per forward (so a long generation takes seconds)."""
    llm = make_llm()
    llm.model.before_forward = lambda tokens: time.sleep(0.01)
    with serve(llm, ServerSettings(port=0, max_queue=4)) as s:
        yield s


def _forwards_stop_growing(model, timeout: float = 3.0) -> int:
    deadline = time.monotonic() + timeout
    last = model.forward_calls
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = model.forward_calls
        if now == last:
            return now
        last = now
    raise AssertionError("the generation kept running")


def test_disconnect_mid_stream_frees_the_worker(slow, reference):
    model = slow.llm.model
    body = {"model": MODEL, "prompt": "the quick brown fox jumps", "max_tokens": 3000, "temperature": 0.9,
            "seed": 1, "stream": True}
    with httpx.Client(base_url=slow.url, timeout=10) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            got = 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    got += 1
                if got >= 5:
                    break  # leaving the block closes the connection mid-stream
    at_close = model.forward_calls
    t_gone = time.monotonic()
    h = slow.wait_idle(timeout=3)
    assert h["busy"] is False and h["queue"] == 0
    assert time.monotonic() - t_gone < 2.0  # 3000 tokens at 10 ms each would take 30 s
    stopped_at = _forwards_stop_growing(model)
    assert stopped_at - at_close <= 10, (at_close, stopped_at)  # stopped within a step or two of the close
    # The next request starts at once and is served exactly.
    t0 = time.monotonic()
    with httpx.Client(base_url=slow.url, timeout=10) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": REPETITIVE, "max_tokens": 10, "temperature": 0})
    assert r.status_code == 200 and time.monotonic() - t0 < 3.0
    assert r.json()["choices"][0]["text"] == plain(reference, "complete", REPETITIVE, max_tokens=10,
                                                    temperature=0).text
    with httpx.Client(base_url=slow.url, timeout=10) as c:
        metrics = c.get("/metrics").text
    assert 'fucina_requests_total{endpoint="/v1/completions",status="499"} 1' in metrics


def test_disconnect_mid_stream_of_several_choices_stops_them_all(slow):
    """n=4 choices run one after another: a client gone during the first stops the later ones too."""
    model = slow.llm.model
    body = {"model": MODEL, "prompt": "the quick brown fox jumps", "max_tokens": 400, "temperature": 0.9,
            "seed": 1, "stream": True, "n": 4, "logprobs": 2}
    with httpx.Client(base_url=slow.url, timeout=10) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            got = 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    assert json.loads(line[6:])["choices"][0]["index"] == 0
                    got += 1
                if got >= 5:
                    break
    at_close = model.forward_calls
    h = slow.wait_idle(timeout=3)
    assert h["busy"] is False and h["queue"] == 0
    assert _forwards_stop_growing(model) - at_close <= 10  # 4 x 400 tokens at 10 ms each would take 16 s


def test_disconnect_of_a_non_streaming_request_cancels_it(slow):
    model = slow.llm.model
    body = {"model": MODEL, "prompt": "the quick brown fox", "max_tokens": 3000, "temperature": 0.9, "seed": 2}
    with httpx.Client(base_url=slow.url, timeout=0.5) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/completions", json=body)
    h = slow.wait_idle(timeout=3)
    assert h["busy"] is False and h["queue"] == 0
    assert _forwards_stop_growing(model) < 300


def test_a_queued_request_whose_client_left_is_skipped(slow):
    model = slow.llm.model
    long = {"model": MODEL, "prompt": "first", "max_tokens": 60, "temperature": 0}
    done = {}

    def first():
        with httpx.Client(base_url=slow.url, timeout=30) as c:
            done["first"] = c.post("/v1/completions", json=long)

    th = threading.Thread(target=first)
    th.start()
    deadline = time.monotonic() + 5
    while not slow.health()["busy"] and time.monotonic() < deadline:
        time.sleep(0.01)
    before = model.forward_calls
    with httpx.Client(base_url=slow.url, timeout=0.3) as c:  # waits in the queue, then gives up
        with pytest.raises(httpx.ReadTimeout):
            c.post("/v1/completions", json={"model": MODEL, "prompt": "second " * 20, "max_tokens": 500})
    th.join(30)
    assert done["first"].status_code == 200
    h = slow.wait_idle(timeout=3)
    assert h["queue"] == 0 and h["busy"] is False
    # Only the first request's ~60 forwards ran: the abandoned one never started.
    assert model.forward_calls - before <= 62


def test_health_answers_during_a_generation(slow):
    done = {}

    def long():
        with httpx.Client(base_url=slow.url, timeout=30) as c:
            done["r"] = c.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 150,
                                                         "temperature": 0})

    th = threading.Thread(target=long)
    th.start()
    deadline = time.monotonic() + 5
    while not slow.health()["busy"] and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    h = slow.health()
    assert h["busy"] is True and time.monotonic() - t0 < 0.5
    th.join(30)
    assert done["r"].status_code == 200
