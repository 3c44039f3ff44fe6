"""fucina.LLM.chat with tools: rendering through the template's ``tools``, calls parsed, lossless."""

from __future__ import annotations

import json

import pytest

from fucina.api import LLM
from fucina.errors import InvalidOption
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions
from fucina.tool_calls import tool_settings
from tests.tool_fakes import ToolFake, call_text

FLAT = CostTable(((2, 1.2), (4, 1.4), (8, 1.8), (16, 2.5)), "flat")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = call_text("get_weather", '{"city": "Paris"}')
SCRIPTS = {"<tool_response>": "It is sunny in Paris, 21 degrees.", "weather in Paris": CALL}


def make(**kw) -> LLM:
    return LLM(ToolFake(SCRIPTS, **kw), speculative=True, cost_table=FLAT, name="fake", progress=False,
               spec_options=SpecOptions(verify_all=True))


def prompt_text(llm: LLM, messages, tools=None, choice=None) -> str:
    return llm.model.detokenize(llm._encode_chat(messages, tool_settings(tools, choice)))


def test_tools_reach_the_template_and_the_call_comes_back():
    llm = make()
    text = prompt_text(llm, ASK, [WEATHER])
    assert "# Tools" in text and json.dumps(WEATHER) in text and text.endswith("<|im_start|>assistant\n")
    r = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=200)
    assert r.finish_reason == "tool_calls" and r.text == ""
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    assert r.tool_calls[0].id.startswith("call_")
    assert llm.model.detokenize(list(r.token_ids)) == CALL  # the tokens are the model's, unchanged
    assert r.stats is not None and r.stats.accepted > 0


@pytest.mark.parametrize("temperature,seed", [(0.0, 0), (0.8, 7)])
def test_speculative_equals_plain_with_tools(temperature, seed):
    llm = make()
    spec = llm.chat(ASK, tools=[WEATHER], temperature=temperature, seed=seed, max_tokens=200)
    plain = llm.chat(ASK, tools=[WEATHER], temperature=temperature, seed=seed, max_tokens=200, speculative=False)
    assert spec.token_ids == plain.token_ids and spec.text == plain.text
    assert [(c.name, c.arguments) for c in spec.tool_calls] == [(c.name, c.arguments) for c in plain.tool_calls]


def test_streamed_deltas_reassemble_to_the_whole_answer():
    llm = make()
    whole = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=200)
    chunks = list(llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=200, stream=True))
    deltas = [d for c in chunks for d in c.tool_calls]
    assert deltas[0].index == 0 and deltas[0].name == "get_weather" and deltas[0].id and deltas[0].arguments == ""
    assert all(d.id is None and d.name is None for d in deltas[1:]) and len(deltas) > 3  # arguments in pieces
    assert "".join(d.arguments for d in deltas) == whole.tool_calls[0].arguments
    assert "".join(c.text for c in chunks) == ""
    assert chunks[-1].finish_reason == "tool_calls"
    assert tuple(t for c in chunks for t in c.token_ids) == whole.token_ids


def test_tool_choice_none_renders_without_tools_and_parses_nothing():
    llm = make()
    assert "# Tools" not in prompt_text(llm, ASK, [WEATHER], "none")
    r = llm.chat(ASK, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=200)
    assert r.tool_calls == () and r.finish_reason == "stop" and r.text == CALL  # the text, as written


def test_two_turn_loop_with_tool_result_in_history():
    llm = make()
    first = llm.chat(ASK, tools=[WEATHER], temperature=0, max_tokens=200)
    call = first.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "sunny", "celsius": 21}'},
    ]
    text = prompt_text(llm, history, [WEATHER])
    assert CALL in text  # the call rendered back exactly as the model wrote it
    assert '<|im_start|>user\n<tool_response>\n{"sky": "sunny", "celsius": 21}\n</tool_response><|im_end|>' in text
    second = llm.chat(history, tools=[WEATHER], temperature=0, max_tokens=200)
    assert second.text == "It is sunny in Paris, 21 degrees." and second.tool_calls == ()
    assert second.finish_reason == "stop"
    # tool history without tools offered still renders through the template
    assert "<tool_response>" in prompt_text(llm, history)


def test_plain_chat_unchanged_without_tools():
    llm = make()
    assert prompt_text(llm, ASK) == llm.model.apply_chat_template(ASK)  # the built-in path, as before


def test_template_without_tools_is_refused_naming_tools():
    llm = make(template="{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    with pytest.raises(InvalidOption) as e:
        llm.chat(ASK, tools=[WEATHER])
    assert e.value.param == "tools"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_choice_is_a_grammar_and_speculation_keeps_it(choice):
    # The script answers with a call of its own; the grammar holds the answer to get_weather's schema.
    kw = dict(tools=[WEATHER], tool_choice=choice, temperature=0.7, seed=3, max_tokens=120)
    llm = make()
    spec, plain = llm.chat(ASK, **kw), llm.chat(ASK, speculative=False, **kw)
    assert spec.token_ids == plain.token_ids and spec.finish_reason == "tool_calls"
    (call,) = spec.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}


def test_a_forced_choice_and_a_grammar_of_ones_own_conflict():
    from fucina.grammar import Grammar

    with pytest.raises(InvalidOption) as e:
        make().chat(ASK, tools=[WEATHER], tool_choice="required", grammar=Grammar.json_object())
    assert e.value.param == "tool_choice"


def test_bad_messages_and_schemas_name_the_field():
    llm = make()
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}
    with pytest.raises(InvalidOption) as e:
        llm.chat(ASK, tools=[WEATHER, bad])
    assert e.value.param == "tools[1].function.parameters"
    with pytest.raises(InvalidOption) as e:
        llm.chat(ASK + [{"role": "assistant", "content": None}])
    assert e.value.param == "messages"
    with pytest.raises(InvalidOption) as e:
        llm.chat(ASK + [{"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}])
    assert e.value.param == "messages"


def test_templates_get_the_special_tokens_text():
    class Special(ToolFake):
        bos_id, eos_id = 256, 257

        def special_text(self, token):
            return {256: "<s>", 257: "</s>"}[token]

    m = Special(SCRIPTS, template="{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
                "{% if tools %}T{% endif %}")
    llm = LLM(m, speculative=False, cost_table=FLAT, name="fake", progress=False)
    assert prompt_text(llm, ASK, [WEATHER]) == "<s>What is the weather in Paris?</s>T"
