"""``/v1/models`` cards (the context as ``max_model_len``), served model names, and the context-overflow 400
in OpenAI's words, as client libraries (litellm) classify it."""

from __future__ import annotations

import os

import pytest

from fucina.errors import InvalidOption
from fucina.server import ServerSettings
from tests.server.conftest import MODEL, make_llm, serve
from tests.server.test_errors import CHAT, COMPLETIONS, MSGS, chat, completion, envelope

openai = pytest.importorskip("openai")

ALIASES = ("gpt-4o-mini", "local")


@pytest.fixture(scope="module")
def aliased():
    with serve(make_llm(), ServerSettings(port=0, served_model_names=ALIASES)) as s:
        yield s


def test_model_cards_carry_the_context(http, fake_server):
    n_ctx = fake_server.llm.context_length
    assert n_ctx == 4096  # the fake model's
    data = http.get("/v1/models").json()["data"]
    assert [(m["id"], m["object"], m["max_model_len"], m["context_length"]) for m in data] == \
        [(MODEL, "model", n_ctx, n_ctx)]
    one = http.get(f"/v1/models/{MODEL}").json()
    assert one["max_model_len"] == one["context_length"] == n_ctx
    card = openai.OpenAI(base_url=fake_server.v1, api_key="unused", max_retries=0).models.retrieve(MODEL)
    assert card.model_extra["max_model_len"] == n_ctx


def test_served_model_names_are_accepted_and_listed(aliased):
    client = openai.OpenAI(base_url=aliased.v1, api_key="unused", max_retries=0, timeout=30)
    assert [m.id for m in client.models.list().data] == [*ALIASES, MODEL]  # the model's own name stays
    assert client.models.retrieve("local").id == "local"
    for name in (*ALIASES, MODEL):
        r = client.chat.completions.create(model=name, messages=MSGS, max_tokens=3, temperature=0, seed=1)
        assert r.model == name  # the name the request used
        c = client.completions.create(model=name, prompt="hello", max_tokens=3, temperature=0, seed=1)
        assert c.model == name
    with aliased.client() as http:
        r = http.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["model"] == ALIASES[0]  # no model: the first name
        err = envelope(http.post(CHAT, json=chat(model="gpt-4o")), 404, param="model", code="model_not_found")
        assert all(repr(n) in err["message"] for n in (*ALIASES, MODEL))
        envelope(http.get("/v1/models/gpt-4o"), 404, param="model", code="model_not_found")
        assert aliased.health()["model"] == ALIASES[0]


def test_served_model_names_are_checked():
    assert ServerSettings(served_model_names=["a", "b", "a"]).served_model_names == ("a", "b")
    assert ServerSettings().served_model_names == ()
    for bad in (("",), (" a",), ("a\nb",), ("x" * 257,), (3,), "abc"):
        with pytest.raises(InvalidOption) as exc:
            ServerSettings(served_model_names=bad)
        assert exc.value.param == "served_model_names"


# -- the context-overflow 400 ------------------------------------------------------------------------

OPENAI_HEAD = "This model's maximum context length is 4096 tokens"


def test_the_overflow_400_is_in_openai_words(http, fake_server):
    model = fake_server.llm.model
    before = model.forward_calls
    err = envelope(http.post(CHAT, json=chat(max_tokens=5000)), 400, param="max_tokens",
                   code="context_length_exceeded")
    prompt = err["message"].split("(")[1].split(" in the messages")[0]
    assert err["message"] == (f"{OPENAI_HEAD}. However, you requested {int(prompt) + 5000} tokens ({prompt} in the "
                              "messages, 5000 in the completion). Please reduce the length of the messages or completion.")
    err = envelope(http.post(CHAT, json={"messages": [{"role": "user", "content": "x" * 5000}]}), 400,
                   param="messages", code="context_length_exceeded")
    assert err["message"].startswith(f"{OPENAI_HEAD}. However, your messages resulted in 50")
    assert err["message"].endswith("Please reduce the length of the messages.")
    err = envelope(http.post(COMPLETIONS, json=completion(max_tokens=4096)), 400, param="max_tokens",
                   code="context_length_exceeded")
    assert err["message"].startswith(f"{OPENAI_HEAD}, however you requested 41")
    assert "in your prompt; 4096 for the completion). Please reduce your prompt; or completion length." in err["message"]
    err = envelope(http.post(COMPLETIONS, json=completion(prompt="x" * 5000, max_tokens=None)), 400, param="prompt",
                   code="context_length_exceeded")
    assert err["message"].startswith(f"{OPENAI_HEAD}, however you requested 500")
    assert model.forward_calls == before  # still checked before any work


def test_a_prompt_that_fills_the_context_leaves_no_room():
    from fucina.errors import ContextLengthExceeded
    from fucina.server.errors import context_length_exceeded

    exc = ContextLengthExceeded("full", param="prompt", n_ctx=64, prompt_tokens=64)
    err = context_length_exceeded(exc, chat=True)
    assert err.message == ("This model's maximum context length is 64 tokens. However, your messages resulted in 64 "
                           "tokens, which leaves no room for the completion. Please reduce the length of the messages.")
    assert (err.param, err.code, err.status) == ("messages", "context_length_exceeded", 400)
    err = context_length_exceeded(exc, chat=False)
    assert err.message.startswith("This model's maximum context length is 64 tokens, however you requested 65 tokens "
                                  "(64 in your prompt; 1 for the completion)")
    assert err.param == "prompt"


def test_litellm_raises_context_window_exceeded(fake_server):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no model-price download at import
    litellm = pytest.importorskip("litellm")
    litellm.telemetry = False
    kw = dict(model=f"openai/{MODEL}", api_base=fake_server.v1, api_key="unused", num_retries=0, timeout=30)
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(messages=MSGS, max_tokens=5000, **kw)
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(messages=[{"role": "user", "content": "x" * 5000}], **kw)
    r = litellm.completion(messages=MSGS, max_tokens=3, temperature=0, seed=1, **kw)  # and a request that fits works
    assert r.choices[0].message.content is not None

