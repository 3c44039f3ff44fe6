"""Hypothesis fuzz: random JSON bodies and field types against both endpoints see only 2xx/4xx."""

from __future__ import annotations

import collections
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.server import ServerSettings
from tests.server.conftest import MODEL, make_llm, serve

LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=12))
ANY = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                   max_leaves=8)


def field(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly plausible values, sometimes any JSON at all."""
    return st.one_of(valid, valid, ANY)


PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]), "text": st.text(max_size=12)})
MESSAGE = st.fixed_dictionaries(
    {"role": field(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))},
    optional={"content": field(st.one_of(st.text(max_size=30), st.lists(PART, max_size=3))), "name": ANY},
)
NUMBER = st.one_of(st.integers(-3, 3), st.floats(-3, 3))
FIELDS = {
    "model": field(st.sampled_from([MODEL, MODEL, "gpt-4o"])),
    "messages": field(st.lists(MESSAGE, max_size=3)),
    "prompt": field(st.one_of(st.text(max_size=40), st.lists(st.integers(-1, 400), max_size=8),
                              st.lists(st.text(max_size=8), max_size=2),
                              st.lists(st.lists(st.integers(0, 300), max_size=4), max_size=2))),
    "max_tokens": field(st.integers(-1, 10)),
    "max_completion_tokens": field(st.integers(-1, 10)),
    "temperature": field(NUMBER), "top_p": field(NUMBER), "top_k": field(st.integers(-2, 50)),
    "min_p": field(NUMBER), "repeat_penalty": field(NUMBER), "frequency_penalty": field(NUMBER),
    "presence_penalty": field(NUMBER), "penalty_last_n": field(st.integers(-3, 100)),
    "seed": field(st.integers(-5, 2**64)),
    "stop": field(st.one_of(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=6))),
    "stream": field(st.booleans()),
    "stream_options": field(st.fixed_dictionaries({}, optional={"include_usage": field(st.booleans())})),
    "n": field(st.integers(0, 3)), "best_of": field(st.integers(0, 3)), "echo": field(st.booleans()),
    "logprobs": field(st.one_of(st.booleans(), st.integers(0, 3))), "top_logprobs": field(st.integers(0, 3)),
    "suffix": field(st.text(max_size=4)), "user": field(st.text(max_size=8)),
    "logit_bias": field(st.dictionaries(st.text(max_size=3), st.integers(-100, 100), max_size=2)),
    "tools": ANY, "tool_choice": ANY, "response_format": field(st.one_of(
        st.sampled_from([{"type": "text"}, {"type": "json"}, {"type": "json_object"},
                         {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}},
                         {"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["a", "b"]}}}]),
        st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries(
            {"schema": st.fixed_dictionaries({"type": st.sampled_from(["object", "array", "string", "integer"])},
                                             optional={"maxLength": st.integers(-1, 3), "items": ANY})},
            optional={"name": ANY, "strict": ANY})}))),
    "prediction": field(st.fixed_dictionaries({"type": st.just("content"), "content": st.text(max_size=20)})),
    "fucina": field(st.fixed_dictionaries({}, optional={
        "references": field(st.lists(field(st.text(max_size=10)), max_size=9)), "speculative": field(st.booleans()),
        "stats": field(st.booleans()), "unknown": ANY})),
    "some_unknown_field": ANY,
}
VALID_MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "developer", "user", "assistant"]),
    "content": st.one_of(st.text(max_size=30),
                         st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=10)}),
                                  max_size=2)),
})
#: Bodies both endpoints accept (both ``messages`` and ``prompt``): these reach the generation path.
VALID = st.fixed_dictionaries({
    "messages": st.lists(VALID_MESSAGE, min_size=1, max_size=3),
    "prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(0, 319), min_size=1, max_size=8)),
}, optional={
    "model": st.just(MODEL), "max_tokens": st.integers(1, 6),
    "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1), "top_k": st.integers(0, 50),
    "min_p": st.floats(0, 0.99), "repeat_penalty": st.floats(0.5, 2), "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2), "penalty_last_n": st.integers(-1, 64), "seed": st.integers(0, 2**63 - 1),
    "stop": st.one_of(st.text(min_size=1, max_size=3), st.lists(st.text(min_size=1, max_size=3), max_size=4)),
    "stream": st.booleans(), "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "n": st.just(1), "logprobs": st.just(False), "user": st.text(max_size=8),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "json_schema", "json_schema": {
        "name": "pick", "strict": True, "schema": {"type": "object", "properties": {"a": {"enum": [1, 2]}},
                                                   "required": ["a"], "additionalProperties": False}}}]),
    "prediction": st.fixed_dictionaries({"type": st.just("content"), "content": st.text(min_size=1, max_size=20)}),
    "fucina": st.fixed_dictionaries({}, optional={
        "references": st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3),
        "speculative": st.booleans(), "stats": st.booleans()}),
})
#: A valid body with one or two fields replaced by anything.
MUTATED = st.builds(lambda body, changes: {**body, **changes}, VALID,
                    st.dictionaries(st.sampled_from(sorted(FIELDS)), ANY, min_size=1, max_size=2))
BODY = st.one_of(VALID, VALID, MUTATED, MUTATED, st.fixed_dictionaries({}, optional=FIELDS), ANY)


@pytest.fixture(scope="module")
def fuzz_server():
    # The tokens limit keeps every accepted request short (absent max_tokens gets 8).
    with serve(make_llm(), ServerSettings(port=0, max_tokens_limit=8)) as s:
        yield s


@pytest.fixture(scope="module")
def fuzz_client(fuzz_server):
    with fuzz_server.client() as c:
        yield c


#: Status codes the fuzz saw (the last test checks that it reached the generation path).
SEEN: collections.Counter = collections.Counter()


def _check(r) -> None:
    SEEN[r.status_code] += 1
    assert r.status_code < 500, r.text
    assert "Traceback" not in r.text
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        assert r.status_code in (400, 404), r.text
    elif r.headers["content-type"].startswith("text/event-stream"):
        events = [e for e in r.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]", r.text[-500:]
        assert all("error" not in json.loads(e[6:]) for e in events[:-1])
    else:
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(body=BODY)
def test_random_bodies_never_break_the_server(fuzz_client, body):
    for path in ("/v1/chat/completions", "/v1/completions"):
        _check(fuzz_client.post(path, json=body))


def test_the_server_is_healthy_after_the_fuzz(fuzz_server):
    if sum(SEEN.values()) >= 1000:  # the fuzz ran in this session: a good share was served, not refused
        assert SEEN[200] >= 150 and SEEN[400] >= 150, SEEN
    assert fuzz_server.wait_idle() == {"status": "ok", "model": MODEL, "level": "exact", "queue": 0, "busy": False}
    with fuzz_server.client() as c:
        r = c.post("/v1/completions", json={"prompt": "abc", "max_tokens": 3})
        assert r.status_code == 200
        assert "fucina_requests_total" in c.get("/metrics").text
