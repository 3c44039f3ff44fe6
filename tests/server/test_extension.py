"""Predicted Outputs on both endpoints and fucina's request extension (``extra_body={"fucina": ...}``).

The fake backend is batch-invariant, so whatever the prediction or the references say, the answer must
equal in-process plain decoding character for character: drafts are advice, never output.
"""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

from fucina.server import ServerSettings  # noqa: E402
from fucina.server.types import MAX_REFERENCES, MAX_TEXT  # noqa: E402
from tests.server.conftest import MODEL, REPETITIVE, make_llm, plain, serve  # noqa: E402
from tests.server.test_errors import CHAT, COMPLETIONS, chat, completion, envelope  # noqa: E402

OTHER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat sat on the mat. " * 3}]
PROMPT = "the dog ran in the park. " * 3


def test_prediction_on_completions_feeds_drafts_and_changes_nothing(client, reference):
    ref = plain(reference, "complete", PROMPT, max_tokens=40, temperature=0)
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0,
                                  extra_body={"prediction": {"type": "content", "content": ref.text}})
    assert r.choices[0].text == ref.text
    details = r.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens >= 0


def test_a_wrong_prediction_is_rejected_tokens_and_still_changes_nothing(client, reference):
    ref = plain(reference, "chat", OTHER, max_tokens=40, temperature=0)
    wrong = "zyxwvutsrq" * 10
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=40, temperature=0,
                                       prediction={"type": "content", "content": wrong})
    assert r.choices[0].message.content == ref.text
    assert r.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_references_over_extra_body_with_stats(client, reference):
    ref = plain(reference, "chat", OTHER, max_tokens=40, temperature=0)
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=40, temperature=0,
                                       extra_body={"fucina": {"references": ["unrelated text", ref.text],
                                                              "stats": True}})
    assert r.choices[0].message.content == ref.text
    info = r.model_extra["fucina"]
    sources = {s["name"]: s for s in info["sources"]}
    assert sources["ref1"]["accepted"] > 0 and set(sources) >= {"conversation", "ref0", "ref1"}
    assert isinstance(info["gate"], str) and info["level"] == "exact"
    # Without a prediction none of those drafts is a prediction token.
    assert r.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_stats_are_absent_unless_asked(client):
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=8, temperature=0)
    info = r.model_extra["fucina"]
    assert info["sources"] is None and info["gate"] is None


def test_the_prediction_is_ref0_beside_the_references(client, reference):
    ref = plain(reference, "complete", PROMPT, max_tokens=40, temperature=0)
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, extra_body={
        "prediction": {"type": "content", "content": ref.text},
        "fucina": {"references": ["nothing like it"], "stats": True}})
    assert r.choices[0].text == ref.text
    sources = {s["name"]: s for s in r.model_extra["fucina"]["sources"]}
    accepted = r.usage.completion_tokens_details.accepted_prediction_tokens
    assert accepted == sources["ref0"]["accepted"] > 0
    assert r.usage.completion_tokens_details.rejected_prediction_tokens == sources["ref0"]["drafted"] - accepted


def test_per_request_speculation_switch(client, reference):
    ref = plain(reference, "chat", OTHER, max_tokens=24, temperature=0)
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=24, temperature=0, extra_body={
        "prediction": {"type": "content", "content": ref.text}, "fucina": {"speculative": False}})
    assert r.choices[0].message.content == ref.text
    info = r.model_extra["fucina"]
    assert info["speculative"] is False and info["drafted"] == 0
    assert r.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_streamed_prediction_tokens_are_in_the_last_usage(client, reference):
    ref = plain(reference, "chat", OTHER, max_tokens=40, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=40, temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            prediction={"type": "content", "content": ref.text})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens_details.accepted_prediction_tokens > 0


def test_sampled_with_references_equals_plain(client, reference):
    kw = dict(max_tokens=40, temperature=0.7, top_p=0.9, seed=5)
    ref = plain(reference, "complete", REPETITIVE, **kw)
    r = client.completions.create(model=MODEL, prompt=REPETITIVE, extra_body={"fucina": {"references": [ref.text]}},
                                  **kw)
    assert r.choices[0].text == ref.text


@pytest.mark.parametrize("path,body,param", [
    (CHAT, chat(prediction={"type": "content", "content": ""}), "prediction"),
    (COMPLETIONS, completion(prediction={"type": "content", "content": []}), "prediction"),
    (COMPLETIONS, completion(prediction={"type": "content", "content": 5}), "prediction"),
    (CHAT, chat(fucina={"references": []}), "fucina.references"),
    (CHAT, chat(fucina={"references": "one doc"}), "fucina.references"),
    (CHAT, chat(fucina={"references": [""]}), "fucina.references"),
    (CHAT, chat(fucina={"references": [5]}), "fucina.references"),
    (COMPLETIONS, completion(fucina={"references": ["a"] * (MAX_REFERENCES + 1)}), "fucina.references"),
    (COMPLETIONS, completion(prediction={"type": "content", "content": "p"},
                             fucina={"references": ["a"] * MAX_REFERENCES}), "fucina.references"),
    (CHAT, chat(fucina={"speculative": "yes"}), "fucina.speculative"),
    (CHAT, chat(fucina={"stats": 1}), "fucina.stats"),
    (CHAT, chat(fucina={"refs": ["a"]}), "fucina.refs"),
    (CHAT, chat(fucina="on"), "fucina"),
])
def test_bad_predictions_and_extensions_are_400_naming_the_param(http, path, body, param):
    envelope(http.post(path, json=body), 400, param=param)


def test_documents_past_the_text_limit_are_400_naming_the_param():
    """MAX_TEXT characters per document; the body limit binds first unless raised past it."""
    big = "x" * (MAX_TEXT + 1)
    with serve(make_llm(), ServerSettings(port=0, max_body_bytes=4 * MAX_TEXT)) as s, s.client() as c:
        envelope(c.post(COMPLETIONS, json=completion(prediction={"type": "content", "content": big})), 400,
                 param="prediction")
        envelope(c.post(CHAT, json=chat(fucina={"references": ["ok", big]})), 400, param="fucina.references")
        envelope(c.post(CHAT, json=chat(fucina={"references": [[{"type": "text", "text": big}]]})), 400,
                 param="fucina.references")


def test_speculation_cannot_be_switched_on_at_a_no_spec_server(reference):
    with serve(make_llm(speculative=False), ServerSettings(port=0)) as s, s.client() as c:
        envelope(c.post(CHAT, json=chat(fucina={"speculative": True})), 400, param="fucina.speculative")
        r = c.post(CHAT, json=chat(max_tokens=8, temperature=0, prediction={"type": "content", "content": "hello"},
                                   fucina={"references": ["hello there"], "stats": True}))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["fucina"]["speculative"] is False and body["fucina"]["sources"] is None
        assert body["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0


@pytest.mark.source_fault_expected
def test_a_draft_source_that_fails_mid_request_leaves_the_answer_plain(client, reference, monkeypatch):
    """Injected fault: the cascade raises on its third draft; the answer still equals plain decoding."""
    from fucina.speculative.index import SpeculationIndex

    real, calls = SpeculationIndex.draft, []

    def failing(self, context, budget):
        calls.append(budget)
        if len(calls) == 3:
            raise RuntimeError("reference index corrupted")
        return real(self, context, budget)

    monkeypatch.setattr(SpeculationIndex, "draft", failing)
    ref = plain(reference, "chat", OTHER, max_tokens=40, temperature=0)
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=40, temperature=0,
                                       prediction={"type": "content", "content": ref.text})
    assert r.choices[0].message.content == ref.text
    info = r.model_extra["fucina"]
    assert info["source_fault"] == "RuntimeError: reference index corrupted" and len(calls) == 3


def test_a_prediction_the_prompt_also_quotes_is_credited(client, reference):
    # The prompt quotes the prediction's text and the answer copies it: the conversation index drafts
    # the same tokens as the prediction, and the prediction is credited with them.
    doc = "the quick brown fox jumps over the lazy dog; " * 2
    prompt = "copy: " + doc + " again: the quick brown"
    ref = plain(reference, "complete", prompt, max_tokens=40, temperature=0)
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0,
                                  extra_body={"prediction": {"type": "content", "content": doc}})
    assert r.choices[0].text == ref.text
    assert r.usage.completion_tokens_details.accepted_prediction_tokens >= 20
