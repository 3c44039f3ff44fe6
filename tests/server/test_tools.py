"""Tool calling through the server: the openai client (whole, streamed, a two-turn loop), langchain's
``bind_tools`` and litellm when installed; answers equal in-process plain decoding."""

from __future__ import annotations

import json

import httpx
import pytest

openai = pytest.importorskip("openai")

from fucina.api import LLM  # noqa: E402
from tests.server.conftest import FLAT, MODEL, NO_GATE, serve  # noqa: E402
from tests.tool_fakes import ToolFake, call_text  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TWO = [{"role": "user", "content": "Weather and time in Rome?"}]
CALL = call_text("get_weather", '{"city": "Paris"}')
BOTH = call_text("get_weather", '{"city": "Rome"}') + "\n" + call_text("get_time", '{"zone": "Europe/Rome"}')
SCRIPTS = {"<tool_response>": "It is sunny in Paris, 21 degrees.", "weather in Paris": CALL,
           "time in Rome": "Let me look both up.\n" + BOTH}


def make(speculative: bool = True) -> LLM:
    return LLM(ToolFake(SCRIPTS), speculative=speculative, cost_table=FLAT, name=MODEL, progress=False,
               spec_options=NO_GATE)


@pytest.fixture(scope="module")
def served():
    with serve(make()) as s:
        yield s


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served.v1, api_key="unused", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def reference() -> LLM:
    return make(speculative=False)


def test_non_streamed_tool_call_equals_plain_decoding(client, reference):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0.7, seed=5)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    ref = reference.chat(ASK, tools=[WEATHER], temperature=0.7, seed=5, top_p=1.0, top_k=0, min_p=0.0)
    assert [(c.name, c.arguments) for c in ref.tool_calls] == [(call.function.name, call.function.arguments)]
    assert r.usage.completion_tokens == ref.usage.completion_tokens
    assert r.model_extra["fucina"]["accepted"] > 0  # speculation ran, and changed nothing


def test_streamed_tool_call_reassembles(client):
    stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0, stream=True)
    chunks = [c for c in stream if c.choices]
    pieces = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    first = pieces[0]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather"
    assert len(pieces) > 3 and all(p.id is None and p.function.name is None for p in pieces[1:])
    assert json.loads("".join(p.function.arguments or "" for p in pieces)) == {"city": "Paris"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parallel_calls_with_content_whole_and_streamed(client):
    r = client.chat.completions.create(model=MODEL, messages=TWO, tools=[WEATHER, TIME], temperature=0)
    msg = r.choices[0].message
    assert msg.content == "Let me look both up."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Rome"}), ("get_time", {"zone": "Europe/Rome"})]
    assert len({c.id for c in msg.tool_calls}) == 2
    stream = client.chat.completions.create(model=MODEL, messages=TWO, tools=[WEATHER, TIME], temperature=0,
                                            stream=True)
    calls: dict[int, dict] = {}
    content = ""
    for c in stream:
        if not c.choices:
            continue
        content += c.choices[0].delta.content or ""
        for tc in c.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
    assert content == msg.content
    assert [(v["name"], v["arguments"]) for _, v in sorted(calls.items())] == [
        (c.function.name, c.function.arguments) for c in msg.tool_calls]


def test_two_turn_loop(client):
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], temperature=0)
    msg = first.choices[0].message
    call = msg.tool_calls[0]
    history = ASK + [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "c": 21})}]
    assert history[1]["role"] == "assistant" and "content" not in history[1]
    history[1]["content"] = None  # what agents send back: the assistant turn with null content
    second = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], temperature=0)
    assert second.choices[0].message.content == "It is sunny in Paris, 21 degrees."
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls


def test_tool_choice_none_and_plain_chats(client):
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0)
    assert r.choices[0].message.content == CALL and r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.tool_calls is None
    plain = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert isinstance(plain.choices[0].message.content, str) and plain.choices[0].message.tool_calls is None


NAMED = {"type": "function", "function": {"name": "get_weather"}}
# Bounded arguments, so a noise model forced into a call still closes it within the budget.
WEATHER_B = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
    "additionalProperties": False}}}
TIME_B = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "Europe/Rome"]}}, "required": ["zone"],
    "additionalProperties": False}}}


@pytest.mark.parametrize("messages", [ASK, TWO], ids=["asks-for-it", "would-write-text-first"])
@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_forced_tool_choice_is_enforced_by_the_grammar(client, reference, messages, choice):
    # The TWO script starts with prose and calls get_time too: the grammar makes it one get_weather call
    # (named; required: any one tool, with parallel_tool_calls false), and speculation changes nothing.
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_B, TIME_B], tool_choice=choice,
                                       parallel_tool_calls=False, temperature=0.7, seed=5, max_tokens=200)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    (call,) = c.message.tool_calls
    args = json.loads(call.function.arguments)
    if choice == NAMED:
        assert call.function.name == "get_weather" and isinstance(args.get("city"), str)
    else:
        assert call.function.name in ("get_weather", "get_time")
    ref = reference.chat(messages, tools=[WEATHER_B, TIME_B], tool_choice=choice, parallel_tool_calls=False,
                         temperature=0.7, seed=5, top_p=1.0, top_k=0, min_p=0.0, max_tokens=200)
    assert [(k.name, k.arguments) for k in ref.tool_calls] == [(call.function.name, call.function.arguments)]


def test_forced_tool_choice_and_response_format_conflict(served):
    body = {"model": MODEL, "messages": ASK, "tools": [WEATHER], "tool_choice": "required",
            "response_format": {"type": "json_object"}}
    r = httpx.post(served.v1 + "/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text


def test_tool_errors_name_the_field(served):
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}
    for body, param in [({"tools": [WEATHER, bad]}, "tools[1].function.parameters"),
                        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                         "tool_choice")]:
        r = httpx.post(served.v1 + "/chat/completions", json={"model": MODEL, "messages": ASK, **body}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_langchain_bind_tools(served):
    lc = pytest.importorskip("langchain_openai")
    chat = lc.ChatOpenAI(model=MODEL, base_url=served.v1, api_key="unused", temperature=0, max_retries=0)

    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return "sunny"

    msg = chat.bind_tools([get_weather]).invoke("What is the weather in Paris?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather"
    assert msg.tool_calls[0]["args"] == {"city": "Paris"}


def test_litellm_tool_call(served, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list from the network
    litellm = pytest.importorskip("litellm")
    r = litellm.completion(model="openai/" + MODEL, api_base=served.v1, api_key="unused", messages=ASK,
                           tools=[WEATHER], temperature=0)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert r.choices[0].finish_reason == "tool_calls"
