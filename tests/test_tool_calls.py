"""fucina.tool_calls: tools checked, the Hermes parser (whole and streamed), the forcing grammar."""

from __future__ import annotations

import random

import pytest

from fucina.errors import InvalidOption
from fucina.results import ToolCall
from fucina.tool_calls import HermesParser, assemble, parse_tool_calls, tool_call_lark, tool_settings

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                  "required": ["a", "b"], "additionalProperties": False}}}


# -- spec -----------------------------------------------------------------------------------------

def test_tool_settings_defaults_and_choices():
    s = tool_settings([WEATHER, ADD])
    assert s.choice.mode == "auto" and s.parallel and s.offered and [t.name for t in s.tools] == ["get_weather", "add"]
    assert not tool_settings([WEATHER], "none").offered
    assert tool_settings([WEATHER], "required").choice.forced
    named = tool_settings([WEATHER, ADD], {"type": "function", "function": {"name": "add"}}, False)
    assert named.choice.mode == "named" and named.choice.name == "add" and not named.parallel
    assert tool_settings(None).tools == () and not tool_settings(None).offered


@pytest.mark.parametrize("tools,choice,param", [
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}], None,
     "tools[0].function.parameters"),
    ([WEATHER, {"type": "function", "function": {"name": "g", "parameters": {"properties": 3}}}], None,
     "tools[1].function.parameters"),
    ([WEATHER, WEATHER], None, "tools[1].function.name"),
    ([{"type": "function", "function": {"name": "bad name"}}], None, "tools[0].function.name"),
    ([{"type": "retrieval"}], None, "tools[0].type"),
    ("get_weather", None, "tools"),
    ([WEATHER], {"type": "function", "function": {"name": "add"}}, "tool_choice"),
    ([WEATHER], "sometimes", "tool_choice"),
    (None, "required", "tool_choice"),
])
def test_bad_tools_name_the_field(tools, choice, param):
    with pytest.raises(InvalidOption) as e:
        tool_settings(tools, choice)
    assert e.value.param == param


def test_schema_checked_by_llguidance_without_jsonschema(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_jsonschema(name, *a, **k):
        if name == "jsonschema":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_jsonschema)
    tool_settings([WEATHER])
    with pytest.raises(InvalidOption) as e:
        tool_settings([{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}])
    assert e.value.param == "tools[0].function.parameters"


# -- parsing --------------------------------------------------------------------------------------

CASES = [
    ("Hello there, world.", "Hello there, world.", ()),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "",
     (("get_weather", '{"city": "Paris"}'),)),
    ('Let me check.\n\n<tool_call>\n{"name": "a", "arguments": {"x": {"y": 1}}}\n</tool_call>\n'
     '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\n', "Let me check.",
     (("a", '{"x": {"y": 1}}'), ("b", "{}"))),
    ('<tool_call>\n{"arguments": {"q": 1}, "name": "search"}\n</tool_call>', "", (("search", '{"q": 1}'),)),
    ('<tool_call>\nnot json\n</tool_call> ok', "<tool_call>\nnot json\n</tool_call> ok", ()),
    ('<tool_call>\n{"name": "f", "arguments": {"a": "}</tool"}}\n</tool_call>', "", (("f", '{"a": "}</tool"}'),)),
    ('<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>', "", (("f", '{"a": 1}'),)),
    ("a < b and <tool x", "a < b and <tool x", ()),
    ('<tool_call>\n{"name": "f", "arguments": {"a": [1, 2', "", ()),  # cut off: no complete call
]


@pytest.mark.parametrize("text,content,calls", CASES)
def test_parse_whole(text, content, calls):
    got_content, got = parse_tool_calls(text, lambda: "call_x")
    assert got_content == content
    assert [(c.name, c.arguments) for c in got] == list(calls)
    assert all(c.id == "call_x" for c in got)


@pytest.mark.parametrize("text,content,calls", CASES)
def test_streamed_in_any_pieces_equals_whole(text, content, calls):
    rng = random.Random(len(text))
    for _ in range(40):
        p = HermesParser(lambda: "call_x")
        got, deltas, i = "", [], 0
        while i < len(text):
            n = rng.randint(1, 6)
            c, d = p.feed(text[i:i + n])
            got, deltas, i = got + c, deltas + d, i + n
        c, d = p.finish()
        got, deltas = got + c, deltas + d
        assert got == content
        assembled = assemble(deltas)
        assert [(c.name, c.arguments) for c in assembled][:len(calls)] == list(calls)
        assert list(p.calls) == [ToolCall("call_x", n, a) for n, a in calls]
        # the name comes first, alone, then the arguments in pieces
        for d in deltas:
            if d.id is not None:
                assert d.name
        firsts = {}
        for d in deltas:
            firsts.setdefault(d.index, d)
        assert all(d.id == "call_x" and d.name for d in firsts.values())


def test_text_that_may_start_a_tag_is_held_back():
    p = HermesParser()
    assert p.feed("Sure <tool") == ("Sure", [])
    assert p.feed("box") == (" <toolbox", [])
    content, deltas = p.feed("\n<tool_call>\n{\"name\": \"f\", \"arguments\": ")
    assert content == "" and deltas == []  # the name waits for the first argument character
    content, deltas = p.feed("{")
    assert deltas[0].name == "f" and deltas[0].id.startswith("call_") and len(deltas[0].id) == 29
    assert "".join(d.arguments for d in deltas) == "{"
    _, deltas = p.feed('"a": 1}}\n</tool')  # the call's own brace and a partial closing tag wait
    assert "".join(d.arguments for d in deltas) == '"a": 1}'
    assert p.feed("_call>") == ("", []) and p.calls[0].arguments == '{"a": 1}'
    assert p.finish() == ("", [])


# -- the forcing grammar --------------------------------------------------------------------------

class _ByteVocab:
    """A byte-level vocabulary (ids 0..255) and an end token, for llguidance's TokenizerWrapper."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b""]
    special_token_ids = [256]

    def __call__(self, s):
        return list(s if isinstance(s, bytes) else s.encode())


@pytest.fixture(scope="module")
def matcher_for():
    llguidance = pytest.importorskip("llguidance")
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocab()), n_vocab=257, eos_token=256)

    def accepts(lark: str, text: str) -> bool:
        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tok)
        assert not is_error, messages
        m = llguidance.LLMatcher(tok, grammar)
        ids = list(text.encode())
        return m.try_consume_tokens(ids) == len(ids) and m.is_accepting()

    return accepts


def _call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def test_required_grammar_accepts_any_tool_and_rejects_the_rest(matcher_for):
    s = tool_settings([WEATHER, ADD], "required", True)
    lark = tool_call_lark(s.tools, s.choice, s.parallel)
    assert matcher_for(lark, _call("get_weather", '{"city": "Paris"}'))
    assert matcher_for(lark, _call("add", '{"a": 1, "b": 2}'))
    assert matcher_for(lark, _call("add", '{"a": 1, "b": 2}') + "\n" + _call("get_weather", '{"city": "x"}'))
    assert not matcher_for(lark, _call("nope", "{}"))                       # not a tool
    assert not matcher_for(lark, _call("add", '{"a": "1", "b": 2}'))        # against the schema
    assert not matcher_for(lark, _call("add", '{"a": 1, "b": 2, "c": 3}'))  # additionalProperties false
    assert not matcher_for(lark, _call("get_weather", "{}"))                # required property missing
    assert not matcher_for(lark, "Hello")                                   # no call
    assert not matcher_for(lark, '<tool_call>\n{"name":"add","arguments":{"a":1,"b":2}}\n</tool_call>')  # layout
    assert not matcher_for(lark, _call("add", '{"a": 1, "b": 2}') + "\n<tool_call>\n")  # unfinished


def test_named_and_single_grammars(matcher_for):
    s = tool_settings([WEATHER, ADD], {"type": "function", "function": {"name": "add"}})
    lark = tool_call_lark(s.tools, s.choice, s.parallel)
    assert matcher_for(lark, _call("add", '{"a": 1, "b": 2}'))
    assert not matcher_for(lark, _call("get_weather", '{"city": "Paris"}'))
    assert not matcher_for(lark, _call("add", '{"a": 1, "b": 2}') + "\n" + _call("add", '{"a": 1, "b": 2}'))
    one = tool_settings([WEATHER, ADD], "required", False)
    lark1 = tool_call_lark(one.tools, one.choice, one.parallel)
    assert matcher_for(lark1, _call("get_weather", '{"city": "Paris"}'))
    assert not matcher_for(lark1, _call("add", '{"a": 1, "b": 2}') + "\n" + _call("add", '{"a": 3, "b": 4}'))


BARE = [
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', "", (("get_weather", '{"city": "Paris"}'),)),
    ('\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n', "",
     (("add", '{"a": 1, "b": 2}'), ("add", '{"a": 3, "b": 4}'))),
    ('{"name": "nope", "arguments": {}}', '{"name": "nope", "arguments": {}}', ()),  # not a tool: content
    ('{"name": "add", "arguments": {"a": 1}} and more', '{"name": "add", "arguments": {"a": 1}} and more', ()),
    ('{"result": 3}', '{"result": 3}', ()),
    ('{"name": "add", "arguments": {"a": 1', '{"name": "add", "arguments": {"a": 1', ()),  # cut off: content
    ("Plain answer.", "Plain answer.", ()),
    # in one Markdown fence and pretty-printed, as Qwen2.5-Coder 1.5B writes it (llm -T)
    ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```', "",
     (("get_weather", '{"city": "Paris"}'),)),
    ('```\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```\n', "", (("add", '{"a": 1, "b": 2}'),)),
    ('```json\n{"name": "nope", "arguments": {}}\n```', '```json\n{"name": "nope", "arguments": {}}\n```', ()),
    ('```python\nprint(1)\n```', '```python\nprint(1)\n```', ()),  # code, not a call
    ('```json\n{"name": "add", "arguments": {}}\n``` done', '```json\n{"name": "add", "arguments": {}}\n``` done', ()),
]


@pytest.mark.parametrize("text,content,calls", BARE)
def test_untagged_calls_of_known_tools(text, content, calls):
    names = ("get_weather", "add")
    got_content, got = parse_tool_calls(text, lambda: "call_x", names)
    assert got_content == content and [(c.name, c.arguments) for c in got] == list(calls)
    rng = random.Random(len(text))
    for _ in range(20):
        p = HermesParser(lambda: "call_x", names)
        out, deltas, i = "", [], 0
        while i < len(text):
            n = rng.randint(1, 6)
            c, d = p.feed(text[i:i + n])
            out, deltas, i = out + c, deltas + d, i + n
        c, d = p.finish()
        assert out + c == content
        assert [(x.name, x.arguments) for x in assemble(deltas + d)] == list(calls)
    # without the names the same text is content
    assert parse_tool_calls(text)[1] == () or text.startswith("<tool_call>")


def test_untagged_start_held_only_while_it_may_be_a_call():
    p = HermesParser(names=("add",))
    assert p.feed('{"na') == ("", [])
    assert p.feed('me": "sub"') == ('{"name": "sub"', [])  # not a tool's name: given out at once
