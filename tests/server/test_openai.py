"""The official ``openai`` client against a fake-backend server: shapes, and losslessness through the wire.

The fake backend is batch-invariant (level *exact*), so every served answer must equal, character for
character, the in-process call with speculation off — the server runs speculation, the reference not.
``test_the_comparison_catches_a_broken_decoder`` shows the comparison has teeth.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

openai = pytest.importorskip("openai")

from tests.server.conftest import FLAT, MODEL, NO_GATE, REPETITIVE, ChatFake, make_llm, plain, serve  # noqa: E402

USER = [{"role": "user", "content": REPETITIVE}]
OTHER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat sat on the mat. " * 3}]


def _stream_text(stream) -> tuple[str, list]:
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


@pytest.mark.parametrize("messages", [USER, OTHER], ids=["repetitive", "system+user"])
def test_chat_greedy_equals_plain_decoding(client, reference, messages):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=48, temperature=0, seed=7)
    ref = plain(reference, "chat", messages, max_tokens=48, temperature=0, seed=7)
    assert r.choices[0].message.content == ref.text
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ref.finish_reason
    assert r.usage.completion_tokens == ref.usage.completion_tokens
    assert r.usage.prompt_tokens == ref.usage.prompt_tokens
    assert r.usage.total_tokens == ref.usage.total_tokens
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == MODEL
    assert r.system_fingerprint == "fucina-0.1.0-fake-exact"


def test_speculation_really_drafted_on_a_repetitive_prompt(client, reference):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=48, temperature=0, seed=1)
    info = r.model_extra["fucina"]
    assert info["speculative"] is True and info["level"] == "exact"
    assert info["drafted"] > 10 and info["accepted"] > 5
    assert info["steps"] < r.usage.completion_tokens  # fewer forwards than tokens: drafts were committed
    assert r.choices[0].message.content == plain(reference, "chat", USER, max_tokens=48, temperature=0, seed=1).text


@pytest.mark.parametrize("seed", [3, 11])
def test_chat_sampled_with_a_seed_equals_plain_decoding(client, reference, seed):
    kw = dict(max_tokens=40, temperature=0.3, top_p=0.9, seed=seed)
    r = client.chat.completions.create(model=MODEL, messages=USER, **kw)
    ref = plain(reference, "chat", USER, **kw)
    assert r.choices[0].message.content == ref.text
    assert r.model_extra["fucina"]["seed"] == seed
    assert r.model_extra["fucina"]["drafted"] > 0


def test_seeds_matter(client):
    """Control: the sampled comparisons above are not trivially equal."""
    kw = dict(model=MODEL, messages=OTHER, max_tokens=40, temperature=1.0)
    texts = {client.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(texts) == 3


def test_extensions_top_k_min_p_repeat_penalty(client, reference):
    extra = dict(top_k=20, min_p=0.05, repeat_penalty=1.1)
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=32, temperature=0.8, seed=5,
                                       frequency_penalty=0.2, presence_penalty=0.1, extra_body=extra)
    ref = plain(reference, "chat", USER, max_tokens=32, temperature=0.8, seed=5, frequency_penalty=0.2,
                presence_penalty=0.1, **extra)
    assert r.choices[0].message.content == ref.text


def test_absent_sampling_fields_take_openai_defaults_and_the_seed_is_reported(client, reference):
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=24)
    seed = r.model_extra["fucina"]["seed"]
    assert isinstance(seed, int) and seed >= 0
    ref = plain(reference, "chat", OTHER, max_tokens=24, seed=seed)  # temperature 1, top_p 1, top_k/min_p off
    assert r.choices[0].message.content == ref.text


def test_chat_stream_equals_non_stream(client, reference):
    stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=40, temperature=0.5, seed=9,
                                            stream=True, stream_options={"include_usage": True})
    text, chunks = _stream_text(stream)
    ref = plain(reference, "chat", USER, max_tokens=40, temperature=0.5, seed=9)
    assert text == ref.text
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == ref.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == ref.usage.completion_tokens
    assert all(c.id == chunks[0].id for c in chunks)


def test_the_default_gate_changes_nothing(reference):
    """With the live, timing-driven gate (the CLI's default) the answers are still plain decoding's."""
    with serve(make_llm(gate=True)) as s:
        c = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0, timeout=30)
        for seed, temperature in ((1, 0.0), (2, 0.5)):
            kw = dict(max_tokens=64, temperature=temperature, seed=seed)
            r = c.chat.completions.create(model=MODEL, messages=USER, **kw)
            assert r.choices[0].message.content == plain(reference, "chat", USER, **kw).text


def test_chat_stream_without_usage_has_no_usage_chunk(client):
    stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0, stream=True)
    chunks = list(stream)
    assert all(c.usage is None for c in chunks) and chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("stop", ["efg", ["zzz", "\nas"], ["h\na"]])
def test_stop_strings_cut_where_plain_decoding_cuts(client, reference, stop):
    for stream in (False, True):
        kw = dict(max_tokens=60, temperature=0, stop=stop, seed=1)
        ref = plain(reference, "chat", USER, **kw)
        if stream:
            text, _ = _stream_text(client.chat.completions.create(model=MODEL, messages=USER, stream=True, **kw))
        else:
            r = client.chat.completions.create(model=MODEL, messages=USER, **kw)
            text = r.choices[0].message.content
            assert r.choices[0].finish_reason == ref.finish_reason == "stop"
        assert text == ref.text
        for s in [stop] if isinstance(stop, str) else stop:
            assert s not in text


@pytest.mark.parametrize("temperature", [0.0, 0.6])
def test_completions_equal_plain_decoding(client, reference, temperature):
    for prompt in (REPETITIVE, "the cat sat on the mat. the cat"):
        kw = dict(max_tokens=40, temperature=temperature, seed=21)
        r = client.completions.create(model=MODEL, prompt=prompt, **kw)
        ref = plain(reference, "complete", prompt, **kw)
        assert r.choices[0].text == ref.text
        assert r.object == "text_completion" and r.id.startswith("cmpl-")
        assert r.usage.completion_tokens == ref.usage.completion_tokens
        s = client.completions.create(model=MODEL, prompt=prompt, stream=True, **kw)
        assert "".join(c.choices[0].text for c in s if c.choices) == ref.text


def test_completions_default_max_tokens_is_16_and_stop(client, reference):
    r = client.completions.create(model=MODEL, prompt=REPETITIVE, temperature=0)
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"
    r = client.completions.create(model=MODEL, prompt=REPETITIVE, temperature=0, stop="def", max_tokens=30)
    assert r.choices[0].text == "abc" and r.choices[0].finish_reason == "stop"
    assert plain(reference, "complete", REPETITIVE, temperature=0, stop="def", max_tokens=30).text == "abc"


def test_completions_accept_token_ids_and_a_list_of_one_prompt(client, reference):
    ids = reference.tokenize(REPETITIVE)
    a = client.completions.create(model=MODEL, prompt=ids, max_tokens=12, temperature=0)
    b = client.completions.create(model=MODEL, prompt=[REPETITIVE], max_tokens=12, temperature=0)
    assert a.choices[0].text == b.choices[0].text == plain(reference, "complete", REPETITIVE, max_tokens=12,
                                                           temperature=0).text


def test_max_completion_tokens_and_content_parts(client, reference):
    parts = [{"role": "user", "content": [{"type": "text", "text": REPETITIVE[:32]}, {"type": "text", "text": REPETITIVE[32:]}]}]
    r = client.chat.completions.create(model=MODEL, messages=parts, max_completion_tokens=10, temperature=0)
    assert r.usage.completion_tokens == 10
    assert r.choices[0].message.content == plain(reference, "chat", USER, max_tokens=10, temperature=0).text


def test_prediction_feeds_drafts_and_changes_nothing(client, reference):
    ref = plain(reference, "chat", OTHER, max_tokens=40, temperature=0)
    r = client.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=40, temperature=0,
                                       prediction={"type": "content", "content": ref.text})
    assert r.choices[0].message.content == ref.text
    assert r.usage.completion_tokens_details.accepted_prediction_tokens > 0


def test_prefix_reuse_is_reported_as_cached_tokens(client):
    msgs = [{"role": "user", "content": "a long shared preamble for caching. " * 4}]
    client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
    r = client.chat.completions.create(model=MODEL, messages=msgs + [{"role": "user", "content": "more"}],
                                       max_tokens=4, temperature=0)
    # Everything up to the end of the first user line is reused (the fake chat template writes no BOS).
    assert r.usage.prompt_tokens_details.cached_tokens == len("user: " + msgs[0]["content"] + "\n")


def test_models_health_and_metrics(client, fake_server):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    h = fake_server.health()
    assert h["status"] == "ok" and h["model"] == MODEL and h["queue"] == 0 and h["level"] == "exact"
    text = fake_server.client().get("/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[-1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["fucina_drafted_tokens_total"] > 0 and values["fucina_accepted_tokens_total"] > 0
    assert values["fucina_completion_tokens_total"] > 0 and values["fucina_queue_depth"] == 0
    assert values["fucina_time_to_first_token_seconds_count"] > 0
    assert values['fucina_decode_tokens_per_second_bucket{le="+Inf"}'] > 0
    assert any(k.startswith("fucina_requests_total{") for k in values)


def test_raw_sse_framing(fake_server):
    body = {"model": MODEL, "messages": USER, "max_tokens": 6, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    with fake_server.client() as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["object"] == "chat.completion.chunk"
    usage = json.loads(events[-2][6:])
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    finish = json.loads(events[-3][6:])
    assert finish["choices"][0]["delta"] == {} and finish["choices"][0]["finish_reason"] == "length"
    assert finish["fucina"]["seed"] >= 0


class SkewedFake(ChatFake):
    """A broken engine: rows of a batched verify differ from single-step rows (argmax moved)."""

    def forward_step(self, tokens):
        return super().forward_step_all_logits(tokens)[-1]

    def forward_step_all_logits(self, tokens):
        rows = np.array(super().forward_step_all_logits(tokens), copy=True)
        if len(tokens) > 1:
            best = rows.argmax(axis=1)
            rows[np.arange(len(rows)), (best + 1) % 256] += 50.0
        return rows


def test_the_comparison_catches_a_broken_decoder(reference):
    """Mutation check: with verify rows that differ from plain rows, the served text differs."""
    from fucina.api import LLM

    llm = LLM(SkewedFake(seed=1), cost_table=FLAT, name=MODEL, progress=False, spec_options=NO_GATE)
    with serve(llm) as s:
        c = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0, timeout=30)
        r = c.chat.completions.create(model=MODEL, messages=USER, max_tokens=48, temperature=0)
    assert r.model_extra["fucina"]["verifies"] > 0
    assert r.choices[0].message.content != plain(reference, "chat", USER, max_tokens=48, temperature=0).text
