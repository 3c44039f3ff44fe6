"""Every error path over raw HTTP: the OpenAI envelope, the status, the named ``param``; no 500 from input."""

from __future__ import annotations

import json
import socket
import threading

import httpx
import pytest

from fucina.server import ServerSettings, create_app
from tests.server.conftest import MODEL, REPETITIVE, make_llm, plain, serve

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MSGS = [{"role": "user", "content": "hello there"}]


def chat(**kw):
    return {"model": MODEL, "messages": MSGS, "max_tokens": 4, **kw}


def completion(**kw):
    return {"model": MODEL, "prompt": "hello", "max_tokens": 4, **kw}


def envelope(r: httpx.Response, status: int, param=..., code=...) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text
    if param is not ...:
        assert err["param"] == param, err
    if code is not ...:
        assert err["code"] == code, err
    return err


@pytest.mark.parametrize("path,body,param", [
    (CHAT, chat(temperature=2.5), "temperature"),
    (CHAT, chat(temperature="0.5"), "temperature"),
    (CHAT, chat(top_p=0), "top_p"),
    (CHAT, chat(top_k=-1), "top_k"),
    (CHAT, chat(min_p=1.0), "min_p"),
    (CHAT, chat(repeat_penalty=0), "repeat_penalty"),
    (CHAT, chat(frequency_penalty=3), "frequency_penalty"),
    (CHAT, chat(presence_penalty=-3), "presence_penalty"),
    (CHAT, chat(seed=-1), "seed"),
    (CHAT, chat(seed=1.5), "seed"),
    (CHAT, chat(max_tokens=0), "max_tokens"),
    (CHAT, chat(max_tokens=True), "max_tokens"),
    (CHAT, chat(stream="yes"), "stream"),
    (CHAT, chat(stream=True, stream_options={"include_usage": "y"}), "stream_options.include_usage"),
    (CHAT, chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (CHAT, chat(stop=""), "stop"),
    (CHAT, chat(stop=[1]), "stop"),
    (CHAT, chat(user=5), "user"),
    (CHAT, chat(model=3), "model"),
    (CHAT, {"model": MODEL}, "messages"),
    (CHAT, chat(messages=[]), "messages"),
    (CHAT, chat(messages="hi"), "messages"),
    (CHAT, chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
    (CHAT, chat(messages=[MSGS[0], {"role": "user"}]), "messages[1].content"),
    (CHAT, chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (CHAT, chat(messages=[{"role": "user", "content": [{"type": "text"}]}]), "messages[0].content"),
    (CHAT, chat(max_tokens=5, max_completion_tokens=6), "max_completion_tokens"),
    (CHAT, chat(prediction={"type": "nope"}), "prediction"),
    (COMPLETIONS, {"model": MODEL}, "prompt"),
    (COMPLETIONS, completion(prompt=5), "prompt"),
    (COMPLETIONS, completion(prompt=[]), "prompt"),
    (COMPLETIONS, completion(prompt=[1, "a"]), "prompt"),
    (COMPLETIONS, completion(prompt=[99999]), "prompt"),     # not a token id of this model (FucinaError.param)
    (COMPLETIONS, completion(temperature=-0.1), "temperature"),
    (COMPLETIONS, completion(penalty_last_n=-2), "penalty_last_n"),
    # logprobs and n: valid within their ranges, a 400 naming the field outside them
    (CHAT, chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (CHAT, chat(logprobs=True, top_logprobs=-1), "top_logprobs"),
    (CHAT, chat(logprobs=True, top_logprobs=2.0), "top_logprobs"),
    (CHAT, chat(top_logprobs=2), "top_logprobs"),                  # without logprobs: true
    (CHAT, chat(logprobs=1), "logprobs"),
    (CHAT, chat(logprobs="yes"), "logprobs"),
    (CHAT, chat(n=0), "n"),
    (CHAT, chat(n=17), "n"),
    (CHAT, chat(n=True), "n"),
    (COMPLETIONS, completion(logprobs=6), "logprobs"),
    (COMPLETIONS, completion(logprobs=-1), "logprobs"),
    (COMPLETIONS, completion(logprobs=True), "logprobs"),
    (COMPLETIONS, completion(n=17), "n"),
    (COMPLETIONS, completion(n="2"), "n"),
    (COMPLETIONS, completion(best_of=17), "best_of"),
])
def test_invalid_values_are_400_naming_the_param(http, path, body, param):
    envelope(http.post(path, json=body), 400, param=param)


def test_out_of_range_counts_say_their_range(http):
    err = envelope(http.post(CHAT, json=chat(n=17)), 400, param="n", code="invalid_value")
    assert "1 to 16" in err["message"]
    err = envelope(http.post(CHAT, json=chat(logprobs=True, top_logprobs=21)), 400, param="top_logprobs")
    assert "0 to 20" in err["message"]
    err = envelope(http.post(COMPLETIONS, json=completion(logprobs=6)), 400, param="logprobs")
    assert "0 to 5" in err["message"]


@pytest.mark.parametrize("path,body,param", [
    (CHAT, chat(functions=[{"name": "f"}]), "functions"),
    (CHAT, chat(function_call="auto"), "function_call"),
    (CHAT, chat(logit_bias={"1": 5}), "logit_bias"),
    (CHAT, chat(audio={"voice": "x"}), "audio"),
    (CHAT, chat(modalities=["text", "audio"]), "modalities"),
    (CHAT, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     "messages[0].content"),
    (COMPLETIONS, completion(best_of=2), "best_of"),          # best_of must be 1 or n
    (COMPLETIONS, completion(n=2, best_of=3), "best_of"),
    (COMPLETIONS, completion(echo=True), "echo"),
    (COMPLETIONS, completion(suffix="tail"), "suffix"),
    (COMPLETIONS, completion(logit_bias={"3": -100}), "logit_bias"),
    (COMPLETIONS, completion(prompt=["one", "two"]), "prompt"),
])
def test_unsupported_fields_are_refused_by_name(http, path, body, param):
    err = envelope(http.post(path, json=body), 400, param=param, code="unsupported_parameter")
    assert "not supported" in err["message"]


@pytest.mark.parametrize("body,param", [
    # this server's fake template is not a Jinja template that reads ``tools``
    (chat(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
    (chat(messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}]), "messages"),
    (chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]),
     "tools[0].function.parameters"),
    (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function",
                                                                                 "function": {"name": "g"}}),
     "tool_choice"),
    (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="sometimes"), "tool_choice"),
    (chat(tools={"name": "f"}), "tools"),
    (chat(parallel_tool_calls="yes"), "parallel_tool_calls"),
    (chat(messages=[{"role": "assistant", "content": None}]), "messages[0].content"),
    (chat(messages=[{"role": "assistant", "tool_calls": [{"function": {}}]}]), "messages"),
    (chat(messages=[{"role": "function", "content": "x", "name": "f"}]), "messages[0].role"),
])
def test_tool_errors_are_400_naming_the_field(http, body, param):
    envelope(http.post(CHAT, json=body), 400, param=param)


@pytest.mark.parametrize("path,body", [
    (CHAT, chat(n=1, logprobs=False, top_logprobs=0, tools=[], tool_choice="none", response_format={"type": "text"},
                logit_bias={}, modalities=["text"], user="u1", store=False, metadata={"a": "b"}, service_tier="auto",
                parallel_tool_calls=True, an_unknown_field={"x": [1, 2]})),
    (COMPLETIONS, completion(n=1, best_of=1, echo=False, suffix="", logit_bias={}, whatever=3)),
    (CHAT, chat(n=2, logprobs=True, top_logprobs=20)),
    (CHAT, chat(logprobs=False, top_logprobs=0)),
    (COMPLETIONS, completion(n=2, best_of=2, logprobs=5)),
    (COMPLETIONS, completion(logprobs=0, n=16, max_tokens=1)),
    (COMPLETIONS, completion(logprobs=False)),
])
def test_neutral_values_and_unknown_fields_are_accepted(http, path, body):
    r = http.post(path, json=body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'"text"', b"", b"   ", b'{"prompt": NaN}',
                                     b"\xff\xfe\x00garbage", b"[" * 100000])
def test_malformed_bodies_are_400(http, content):
    for path in (CHAT, COMPLETIONS):
        envelope(http.post(path, content=content, headers={"content-type": "application/json"}), 400,
                 code="invalid_json")


def test_unknown_model_is_404(http):
    envelope(http.post(CHAT, json=chat(model="gpt-4o")), 404, param="model", code="model_not_found")
    envelope(http.post(COMPLETIONS, json=completion(model="other")), 404, param="model", code="model_not_found")
    envelope(http.get("/v1/models/gpt-4o"), 404, param="model", code="model_not_found")
    assert http.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 2}).status_code == 200  # model may be omitted


def test_unknown_routes_and_methods_are_envelopes(http):
    envelope(http.get("/v1/nothing"), 404, code="not_found")
    envelope(http.get(CHAT), 405, code="method_not_allowed")


def test_context_length_exceeded_is_checked_before_any_work(http, fake_server):
    model = fake_server.llm.model
    before = model.forward_calls
    err = envelope(http.post(COMPLETIONS, json=completion(max_tokens=4096)), 400, param="max_tokens",
                   code="context_length_exceeded")
    assert "4096" in err["message"]
    envelope(http.post(COMPLETIONS, json=completion(prompt="x" * 5000, max_tokens=1)), 400, param="prompt",
             code="context_length_exceeded")
    envelope(http.post(CHAT, json={"messages": MSGS, "max_completion_tokens": 5000}), 400,
             param="max_tokens", code="context_length_exceeded")
    assert model.forward_calls == before


def test_the_422_handler_gives_a_400_envelope():
    llm = make_llm()
    app = create_app(llm, ServerSettings(port=0))

    @app.get("/typed")
    def typed(count: int) -> dict:  # a FastAPI-validated route: its 422 must become a 400 envelope
        return {"count": count}

    with serve(llm, app=app) as s, s.client() as c:
        envelope(c.get("/typed", params={"count": "many"}), 400, param="count")
        envelope(c.get("/typed"), 400, param="count")
        assert c.get("/typed", params={"count": 3}).json() == {"count": 3}


def test_chat_on_a_model_without_template_is_400():
    with serve(make_llm(chat=False)) as s, s.client() as c:
        envelope(c.post(CHAT, json=chat()), 400, param="messages")
        assert c.post(COMPLETIONS, json=completion()).status_code == 200


# -- authentication ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed():
    with serve(make_llm(), ServerSettings(port=0, api_keys=("k-one", "k-two"))) as s:
        yield s


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "k-one"},
                                     {"Authorization": "Basic k-one"}, {"Authorization": "Bearer"},
                                     {"Authorization": "Bearer k-one-and-more"}, {"Authorization": "Bearer k-on"}])
def test_missing_or_wrong_key_is_401(keyed, headers):
    with keyed.client(headers=headers) as c:
        for r in (c.post(CHAT, json=chat()), c.post(COMPLETIONS, json=completion()), c.get("/v1/models"),
                  c.get("/metrics")):
            envelope(r, 401, code="invalid_api_key")
            assert r.headers["www-authenticate"] == "Bearer"


def test_valid_keys_pass_and_health_needs_none(keyed):
    for key in ("k-one", "k-two"):
        with keyed.client(headers={"Authorization": f"Bearer {key}"}) as c:
            assert c.post(CHAT, json=chat()).status_code == 200
            assert c.get("/metrics").status_code == 200
    assert keyed.health()["status"] == "ok"


def test_the_key_is_checked_before_the_body_is_read(keyed):
    with keyed.client() as c:
        envelope(c.post(CHAT, content=b"{broken"), 401)


# -- body size -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_body():
    with serve(make_llm(), ServerSettings(port=0, max_body_bytes=4096)) as s:
        yield s


def test_oversized_body_by_content_length_is_413(small_body):
    big = json.dumps(completion(prompt="x" * 5000)).encode()
    with small_body.client() as c:
        envelope(c.post(COMPLETIONS, content=big, headers={"content-type": "application/json"}), 413,
                 code="request_too_large")
        assert c.post(COMPLETIONS, json=completion(prompt="x" * 3000)).status_code == 200


def test_oversized_body_by_bytes_read_is_413(small_body):
    """No Content-Length (chunked upload): the limit holds on the bytes actually read."""
    big = json.dumps(completion(prompt="x" * 6000)).encode()

    def chunks():
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    with small_body.client() as c:
        r = c.post(COMPLETIONS, content=chunks(), headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers
        envelope(r, 413, code="request_too_large")


def test_declared_oversized_body_is_413_before_it_is_sent(small_body):
    """A raw client announces 10 MB and sends 2 bytes: the answer comes from the header alone."""
    host, port = small_body.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 10000000\r\n\r\n{}")
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            got = sock.recv(65536)
            if not got:
                break
            data += got
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert json.loads(body)["error"]["code"] == "request_too_large"


# -- limits and faults ---------------------------------------------------------------------------


def test_max_tokens_limit():
    with serve(make_llm(), ServerSettings(port=0, max_tokens_limit=8)) as s, s.client() as c:
        envelope(c.post(CHAT, json=chat(max_tokens=9)), 400, param="max_tokens")
        r = c.post(CHAT, json={"messages": MSGS, "temperature": 0})  # no max_tokens: the limit is the budget
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        assert r.json()["choices"][0]["finish_reason"] == "length"


@pytest.fixture(scope="module")
def faulty():
    llm = make_llm()
    with serve(llm) as s:
        yield s


def _boom(tokens):
    raise RuntimeError("simulated engine failure")


def test_engine_fault_is_500_and_the_server_recovers(faulty, reference):
    model = faulty.llm.model
    with faulty.client() as c:
        assert c.post(CHAT, json=chat(messages=[{"role": "user", "content": REPETITIVE}])).status_code == 200
        model.before_forward = _boom
        try:
            err = envelope(c.post(CHAT, json=chat()), 500, code="engine_error")
            assert err["type"] == "server_error" and "simulated engine failure" in err["message"]
        finally:
            model.before_forward = None
        assert model.kv_len == 0  # the KV cache was reset
        r = c.post(CHAT, json=chat(temperature=0, max_tokens=20))
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == plain(reference, "chat", MSGS, temperature=0,
                                                                     max_tokens=20).text
        metrics = c.get("/metrics").text
    assert "fucina_engine_faults_total 1" in metrics


def test_engine_fault_mid_stream_sends_an_error_event(faulty, reference):
    model = faulty.llm.model
    calls = {"n": 0}

    def fail_later(tokens):
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("fault after a few steps")

    model.before_forward = fail_later
    try:
        with faulty.client() as c:  # 200 tokens: more forwards than 3 even with drafts of 63
            r = c.post(CHAT, json=chat(max_tokens=200, temperature=0, stream=True,
                                       messages=[{"role": "user", "content": "the quick brown fox"}]))
    finally:
        model.before_forward = None
    assert r.status_code == 200
    events = [e[6:] for e in r.text.split("\n\n") if e]
    err = json.loads(events[-1])["error"]
    assert err["code"] == "engine_error" and "[DONE]" not in events
    with faulty.client() as c:
        assert c.post(COMPLETIONS, json=completion()).status_code == 200


def test_queue_full_is_429_with_retry_after():
    llm = make_llm()
    gate = threading.Event()
    entered = threading.Event()

    def hold(tokens):
        entered.set()
        gate.wait(10)

    with serve(llm, ServerSettings(port=0, max_queue=1)) as s:
        llm.model.before_forward = hold
        results = {}

        def post(name):
            with s.client() as c:
                results[name] = c.post(COMPLETIONS, json=completion())

        first = threading.Thread(target=post, args=("running",))
        first.start()
        assert entered.wait(10)
        second = threading.Thread(target=post, args=("queued",))
        second.start()
        deadline = 100
        while s.health()["queue"] < 1 and deadline:
            threading.Event().wait(0.02)
            deadline -= 1
        h = s.health()  # /health answers while a generation runs
        assert h["busy"] is True and h["queue"] == 1
        with s.client() as c:
            r = c.post(COMPLETIONS, json=completion())
        err = envelope(r, 429, code="rate_limit_exceeded")
        assert r.headers["retry-after"] == "1" and err["type"] == "rate_limit_error"
        gate.set()
        llm.model.before_forward = None
        first.join(10)
        second.join(10)
        assert results["running"].status_code == 200 and results["queued"].status_code == 200
