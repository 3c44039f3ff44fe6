"""``response_format`` through the wire: json_object and json_schema (strict) constrain every sampled
row, the answer parses and validates, streamed equals non-streamed, and a speculative server's answer
equals the in-process plain constrained call; bad schemas are a 400 naming the field."""

from __future__ import annotations

import json

import jsonschema
import pytest

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")

from fucina.grammar import Grammar  # noqa: E402
from tests.grammar_schemas import SCHEMAS  # noqa: E402
from tests.server.conftest import MODEL, plain  # noqa: E402
from tests.server.test_errors import CHAT, chat, envelope  # noqa: E402

USER = [{"role": "user", "content": "Extract the invoice: INV-0042, 12.50 EUR, paid, 2 x widget."}]


def schema_format(name: str, strict: bool = True) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": strict}}


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", ["extraction", "nested", "enum_array", "date"])
def test_json_schema_answers_validate_and_equal_plain(client, reference, name, temperature):
    fmt = schema_format(name)
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=300, temperature=temperature,
                                       seed=3, response_format=fmt)
    text = r.choices[0].message.content
    jsonschema.validate(json.loads(text), SCHEMAS[name], format_checker=jsonschema.FormatChecker())
    assert r.choices[0].finish_reason == "stop"
    ref = plain(reference, "chat", USER, max_tokens=300, temperature=temperature, seed=3,
                grammar=Grammar.json_schema(SCHEMAS[name]))
    assert text == ref.text


def test_streamed_equals_non_streamed(client):
    kw = dict(model=MODEL, messages=USER, max_tokens=300, temperature=0.8, seed=9,
              response_format=schema_format("extraction"))
    whole = client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                       if c.choices)
    assert streamed == whole


def test_json_object_is_one_json_object(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=400, temperature=0, seed=1,
                                       response_format={"type": "json_object"})
    out = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(out), dict)
    else:  # a noise model may write one long string; it is still a JSON object's prefix
        assert out.startswith("{")


def test_parse_with_a_pydantic_model(client):
    class Item(pydantic.BaseModel):
        sku: str = pydantic.Field(max_length=8)
        qty: int = pydantic.Field(ge=1, le=9)

    class Invoice(pydantic.BaseModel):
        number: str = pydantic.Field(pattern=r"^INV-[0-9]{4}$")
        paid: bool
        items: list[Item] = pydantic.Field(max_length=2)

    r = client.chat.completions.parse(model=MODEL, messages=USER, max_tokens=300, temperature=0, seed=2,
                                      response_format=Invoice)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Invoice) and parsed.number.startswith("INV-")


@pytest.mark.parametrize("fmt,fragment", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}, "foo"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(unclosed"}}},
     "regex"),
])
def test_unenforceable_schemas_are_400_naming_json_schema(http, fmt, fragment):
    err = envelope(http.post(CHAT, json=chat(response_format=fmt)), 400, param="response_format.json_schema")
    assert fragment in err["message"].lower()


@pytest.mark.parametrize("fmt", [
    {"type": "xml"},
    {"type": "json_schema"},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
    "json",
])
def test_malformed_response_formats_are_400_naming_response_format(http, fmt):
    envelope(http.post(CHAT, json=chat(response_format=fmt)), 400, param="response_format")


def test_text_format_is_plain_text(client, reference):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=24, temperature=0, seed=1,
                                       response_format={"type": "text"})
    assert r.choices[0].message.content == plain(reference, "chat", USER, max_tokens=24, temperature=0, seed=1).text


class Pick(pydantic.BaseModel):
    color: str = pydantic.Field(pattern=r"^(red|green|blue)$")
    count: int = pydantic.Field(ge=0, le=9)


def test_langchain_with_structured_output(fake_server, reference):
    lc = pytest.importorskip("langchain_openai")
    chat = lc.ChatOpenAI(model=MODEL, base_url=fake_server.v1, api_key="unused", temperature=0, max_retries=0,
                         max_tokens=200)
    out = chat.with_structured_output(Pick, method="json_schema", strict=True).invoke("Pick a colour and a count.")
    assert isinstance(out, Pick) and out.color in ("red", "green", "blue")


def test_litellm_response_format(fake_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list from the network
    litellm = pytest.importorskip("litellm")
    fmt = schema_format("nested")
    r = litellm.completion(model="openai/" + MODEL, api_base=fake_server.v1, api_key="unused", messages=USER,
                           response_format=fmt, temperature=0, max_tokens=300)
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMAS["nested"])
