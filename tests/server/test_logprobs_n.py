"""logprobs / top_logprobs and n > 1 through the official ``openai`` client, against the in-process reference.

The fake backend is exact, so a served answer's logprobs must equal, float for float, those of the same
call with speculation off in-process (the server speculates); choice ``i`` of a request for ``n`` must be
what a request of ``n=1`` with seed ``seed + i`` answers.
"""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

from fucina.logprobs import visible  # noqa: E402
from fucina.server.types import MAX_SEED  # noqa: E402
from tests.server.conftest import MODEL, REPETITIVE, make_llm, plain, serve  # noqa: E402

USER = [{"role": "user", "content": REPETITIVE}]
OTHER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the cat sat on the mat. " * 3}]


def _text(llm, token_id: int) -> str:
    return llm.model.token_bytes(token_id).decode("utf-8", errors="replace")


def _joined(entries) -> str:
    """The text of served entries: their bytes joined (a character may span two tokens)."""
    return b"".join(bytes(e.bytes) for e in entries).decode("utf-8", errors="replace")


def _check_chat_entries(content, ref, llm, top: int) -> None:
    """``content`` (the served ``logprobs.content``) against the reference Completion's shown entries."""
    shown = visible(ref.logprobs, ref.text)
    assert [c.logprob for c in content] == [e.logprob for e in shown]  # exact: JSON keeps a float's repr
    assert [c.token for c in content] == [_text(llm, e.token_id) for e in shown]
    assert [bytes(c.bytes) for c in content] == [llm.model.token_bytes(e.token_id) for e in shown]
    assert _joined(content) == ref.text
    for c, e in zip(content, shown):
        assert len(c.top_logprobs) == top
        assert [(a.token, a.logprob) for a in c.top_logprobs] == [(_text(llm, t.token_id), t.logprob) for t in e.top]


# -- chat ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature,top", [(0.0, 0), (0.0, 5), (0.7, 3), (0.7, 20)])
def test_chat_logprobs_equal_plain_decodings(client, reference, temperature, top):
    kw = dict(max_tokens=48, temperature=temperature, seed=4)
    r = client.chat.completions.create(model=MODEL, messages=USER, logprobs=True, top_logprobs=top, **kw)
    ref = plain(reference, "chat", USER, logprobs=top, **kw)
    assert r.choices[0].message.content == ref.text
    assert r.model_extra["fucina"]["accepted"] > 0  # speculation really committed drafts
    _check_chat_entries(r.choices[0].logprobs.content, ref, reference, top)


def test_chat_logprobs_stream_like_the_whole_answer(client, reference):
    kw = dict(max_tokens=40, temperature=0.5, seed=9)
    whole = client.chat.completions.create(model=MODEL, messages=USER, logprobs=True, top_logprobs=2, **kw)
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, logprobs=True, top_logprobs=2,
                                                 stream=True, **kw))
    content = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in content] == [e.model_dump() for e in whole.choices[0].logprobs.content]
    deltas = [c.choices[0] for c in chunks if c.choices and c.choices[0].delta.content]
    assert all(d.logprobs is not None for d in deltas)  # each delta carries the entries of the tokens it shows
    assert sum(1 for d in deltas if d.logprobs.content) > len(deltas) // 2  # spread over the stream, not at the end
    assert _joined(content) == "".join(d.delta.content for d in deltas)


def test_chat_without_logprobs_has_none(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0)
    assert r.choices[0].logprobs is None
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0, logprobs=False)
    assert r.choices[0].logprobs is None


def test_stop_string_tokens_are_not_listed(client, reference):
    kw = dict(max_tokens=60, temperature=0, stop=["h\na"])
    r = client.chat.completions.create(model=MODEL, messages=USER, logprobs=True, **kw)
    ref = plain(reference, "chat", USER, logprobs=0, **kw)
    assert r.choices[0].finish_reason == "stop" and len(visible(ref.logprobs, ref.text)) < len(ref.logprobs)
    _check_chat_entries(r.choices[0].logprobs.content, ref, reference, 0)


def test_the_end_token_is_not_listed(reference):
    with serve(make_llm(eos_bias=9.0)) as s:
        c = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0, timeout=30)
        r = c.chat.completions.create(model=MODEL, messages=OTHER, max_tokens=60, temperature=0, logprobs=True)
        ref = plain(s.llm, "chat", OTHER, max_tokens=60, temperature=0, logprobs=0, speculative=False)
        assert r.choices[0].finish_reason == "stop" and ref.token_ids[-1] in s.llm.model.eos_ids
        assert len(r.choices[0].logprobs.content) == len(ref.token_ids) - 1
        assert _joined(r.choices[0].logprobs.content) == r.choices[0].message.content


# -- legacy completions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("top", [0, 1, 5])
def test_completion_logprobs_equal_plain_decodings(client, reference, top):
    kw = dict(max_tokens=40, temperature=0.6, seed=21)
    r = client.completions.create(model=MODEL, prompt=REPETITIVE, logprobs=top, **kw)
    ref = plain(reference, "complete", REPETITIVE, logprobs=top, **kw)
    lp = r.choices[0].logprobs
    shown = visible(ref.logprobs, ref.text)
    assert r.choices[0].text == ref.text
    assert lp.tokens == [_text(reference, e.token_id) for e in shown]
    assert reference.detokenize([e.token_id for e in shown]) == ref.text
    assert lp.token_logprobs == [e.logprob for e in shown]
    assert lp.text_offset == [e.text_offset for e in shown]
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for d, e in zip(lp.top_logprobs, shown):
        want: dict[str, float] = {}
        for t in e.top:  # most likely first; tokens whose text collides (undecodable bytes) keep the first
            want.setdefault(_text(reference, t.token_id), t.logprob)
        want.setdefault(_text(reference, e.token_id), e.logprob)  # the chosen token is always listed
        assert d == want and len(d) <= top + 1
    s = client.completions.create(model=MODEL, prompt=REPETITIVE, logprobs=top, stream=True, **kw)
    chunks = [c for c in s if c.choices and c.choices[0].logprobs]
    assert sum((c.choices[0].logprobs.tokens for c in chunks), []) == lp.tokens
    assert sum((c.choices[0].logprobs.text_offset for c in chunks), []) == lp.text_offset


# -- n > 1 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [5, MAX_SEED])
def test_n_sampled_choices_are_the_calls_with_seed_plus_i(client, reference, seed):
    kw = dict(max_tokens=24, temperature=1.0)
    r = client.chat.completions.create(model=MODEL, messages=OTHER, n=3, seed=seed, logprobs=True, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    total = 0
    for i, choice in enumerate(r.choices):
        s = (seed + i) % 2**63  # MAX_SEED + 1 wraps to 0
        ref = plain(reference, "chat", OTHER, seed=s, logprobs=0, **kw)
        assert choice.message.content == ref.text and choice.finish_reason == ref.finish_reason
        assert [e.logprob for e in choice.logprobs.content] == [e.logprob for e in visible(ref.logprobs, ref.text)]
        one = client.chat.completions.create(model=MODEL, messages=OTHER, n=1, seed=s, **kw)
        assert one.choices[0].message.content == ref.text
        total += ref.usage.completion_tokens
    assert len({c.message.content for c in r.choices}) == 3  # distinct seeds: distinct answers
    assert r.usage.completion_tokens == total and r.usage.prompt_tokens == ref.usage.prompt_tokens
    assert r.model_extra["fucina"]["seed"] == seed


def test_n_without_a_seed_offsets_the_drawn_one(client, reference):
    r = client.completions.create(model=MODEL, prompt="the cat sat", n=2, max_tokens=12, temperature=1.0)
    seed = r.model_extra["fucina"]["seed"]
    for i, choice in enumerate(r.choices):
        ref = plain(reference, "complete", "the cat sat", max_tokens=12, temperature=1.0, seed=(seed + i) % 2**63)
        assert choice.text == ref.text and choice.index == i


def test_n_greedy_decodes_once_and_copies(client, reference):
    kw = dict(max_tokens=32, temperature=0)
    one = client.chat.completions.create(model=MODEL, messages=USER, **kw)
    r = client.chat.completions.create(model=MODEL, messages=USER, n=4, logprobs=True, top_logprobs=2, **kw)
    ref = plain(reference, "chat", USER, logprobs=2, **kw)
    assert [c.message.content for c in r.choices] == [ref.text] * 4
    assert all(c.logprobs.content == r.choices[0].logprobs.content for c in r.choices)
    assert r.usage.completion_tokens == 4 * ref.usage.completion_tokens
    info, once = r.model_extra["fucina"], one.model_extra["fucina"]
    assert info["steps"] == once["steps"] and info["committed"] == once["committed"]  # one generation ran


def test_completions_n_with_best_of_equal_to_n(client, reference):
    r = client.completions.create(model=MODEL, prompt=REPETITIVE, n=2, best_of=2, max_tokens=16, temperature=0.8,
                                  seed=3, logprobs=1)
    for i, choice in enumerate(r.choices):
        ref = plain(reference, "complete", REPETITIVE, max_tokens=16, temperature=0.8, seed=3 + i, logprobs=1)
        assert choice.text == ref.text
        assert choice.logprobs.token_logprobs == [e.logprob for e in visible(ref.logprobs, ref.text)]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_n_streams_every_choice_with_its_index(client, reference, endpoint):
    kw = dict(max_tokens=20, temperature=0.9, seed=11)
    if endpoint == "chat":
        stream = client.chat.completions.create(model=MODEL, messages=OTHER, n=3, stream=True,
                                                stream_options={"include_usage": True}, **kw)
    else:
        stream = client.completions.create(model=MODEL, prompt=REPETITIVE, n=3, stream=True,
                                           stream_options={"include_usage": True}, **kw)
    chunks = list(stream)
    texts, finishes, roles = ["", "", ""], [None] * 3, [0, 0, 0]
    for c in chunks:
        for ch in c.choices:
            if endpoint == "chat":
                texts[ch.index] += ch.delta.content or ""
                roles[ch.index] += ch.delta.role == "assistant"
            else:
                texts[ch.index] += ch.text
            if ch.finish_reason:
                assert finishes[ch.index] is None
                finishes[ch.index] = ch.finish_reason
    total = 0
    for i in range(3):
        kind, prompt = ("chat", OTHER) if endpoint == "chat" else ("complete", REPETITIVE)
        ref = plain(reference, kind, prompt, **{**kw, "seed": 11 + i})
        assert texts[i] == ref.text and finishes[i] == ref.finish_reason
        total += ref.usage.completion_tokens
    if endpoint == "chat":
        assert roles == [1, 1, 1]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == total
    assert sum(1 for c in chunks if c.model_extra.get("fucina")) == 1  # the fucina block once, at the end


def test_raw_stream_lines_are_valid_json_with_logprobs(fake_server):
    body = {"model": MODEL, "messages": USER, "max_tokens": 8, "temperature": 0, "n": 2, "stream": True,
            "logprobs": True, "top_logprobs": 1}
    with fake_server.client() as http:
        r = http.post("/v1/chat/completions", json=body)
    events = [e[6:] for e in r.text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    data = [json.loads(e) for e in events[:-1]]
    indices = [d["choices"][0]["index"] for d in data if d["choices"]]
    assert indices == sorted(indices) and set(indices) == {0, 1}  # choice 0, then choice 1
