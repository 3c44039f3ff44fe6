"""Prefix reuse across interleaved conversations (A1 B1 A2 B2): KV snapshots in bounded LRU slots."""

from __future__ import annotations

import numpy as np
import pytest

from fucina.backends.fake import FakeModel
from tests.server.conftest import MODEL, make_llm, plain, serve

openai = pytest.importorskip("openai")

A = "Conversation A is about the alphabet: " + "alpha beta gamma delta epsilon " * 4
B = "Conversation B is about numbers: " + "one two three four five six " * 4


def test_fake_snapshot_restore_round_trip():
    m = FakeModel(seed=3)
    m.forward_step(list(b"hello world, this is a prefix"))
    snap = m.snapshot()
    want = np.array(m.forward_step([1, 2, 3]), copy=True)
    m.reset()
    m.forward_step(list(b"something else entirely"))
    m.restore(snap)
    assert m.kv_len == len(b"hello world, this is a prefix")
    assert np.array_equal(m.forward_step([1, 2, 3]), want)
    m.restore(snap)  # a snapshot stays usable
    assert m.tokens == list(b"hello world, this is a prefix")


def _interleave(llm, speculative: bool = True):
    """A1 B1 A2 B2: each second turn extends its own first turn and answer (as token ids: exact)."""
    kw = dict(max_tokens=40, temperature=0.6, top_p=1.0, top_k=0, min_p=0.0, speculative=speculative)
    prompts = {"A1": llm.tokenize(A), "B1": llm.tokenize(B)}
    out = {}
    out["A1"] = llm.complete(prompts["A1"], seed=1, **kw)
    out["B1"] = llm.complete(prompts["B1"], seed=2, **kw)
    nxt = llm.tokenize(" Next:", add_bos=False)
    prompts["A2"] = prompts["A1"] + list(out["A1"].token_ids) + nxt
    prompts["B2"] = prompts["B1"] + list(out["B1"].token_ids) + nxt
    out["A2"] = llm.complete(prompts["A2"], seed=3, **kw)
    out["B2"] = llm.complete(prompts["B2"], seed=4, **kw)
    return out, prompts


def test_interleaved_conversations_both_reuse_their_prefix():
    llm = make_llm()
    out, prompts = _interleave(llm)
    cold = make_llm()
    for turn, seed in (("A2", 3), ("B2", 4)):
        first = turn[0] + "1"
        # The whole first turn is reused: its prompt and every answer token but the carried last one.
        assert out[turn].usage.cached_tokens == len(prompts[first]) + len(out[first].token_ids) - 1
        ref = cold.complete(prompts[turn], seed=seed, max_tokens=40, temperature=0.6, top_p=1.0, top_k=0, min_p=0.0,
                            speculative=False)
        assert out[turn].text == ref.text and out[turn].token_ids == ref.token_ids
        assert ref.usage.cached_tokens < 40  # the cold LLM evaluated it all


def test_without_slots_only_the_last_prefix_is_reused():
    """Control: with slots off, B2 and A2 find almost nothing (the test above is not trivially true)."""
    llm = make_llm()
    llm.prefix_cache.max_slots = 0
    out, _ = _interleave(llm)
    assert out["A2"].usage.cached_tokens < 40 and out["B2"].usage.cached_tokens < 40


def test_slots_are_bounded_in_count_and_bytes():
    llm = make_llm()
    llm.prefix_cache.max_slots = 2
    docs = [f"document {i}: " + ("lorem ipsum dolor sit amet " if i % 2 else "sed ut perspiciatis unde ") * 4
            for i in range(5)]
    for d in docs:
        llm.complete(d, max_tokens=8, temperature=0)
    slots = llm.prefix_slots()
    assert len(slots) == 2
    # The two most recent earlier documents are kept (the live cache holds the last one).
    assert [n for n, _ in slots] == [len(llm.tokenize(docs[i])) + 7 for i in (2, 3)]
    llm.prefix_cache.max_bytes = slots[-1][1]  # room for one snapshot only
    llm.complete(docs[0], max_tokens=8, temperature=0)
    assert len(llm.prefix_slots()) == 1
    assert sum(b for _, b in llm.prefix_slots()) <= llm.prefix_cache.max_bytes


def _dozen_sent_twice(llm):
    """Twelve different prompts, then each again (a server's clients sending their requests again)."""
    docs = [f"request {i}: " + ("lorem ipsum dolor sit amet " if i % 2 else "sed ut perspiciatis unde ") * (3 + i % 4)
            for i in range(12)]
    first = [llm.complete(d, max_tokens=8, temperature=0) for d in docs]
    again = [llm.complete(d, max_tokens=8, temperature=0) for d in docs]
    return docs, first, again


def test_a_dozen_prompts_sent_again_each_reuse_their_prefix():
    llm = make_llm()
    docs, first, again = _dozen_sent_twice(llm)
    for d, a, b in zip(docs, first, again):
        assert b.usage.cached_tokens == len(llm.tokenize(d)) - 1  # all but the token that gives the first logits
        assert b.token_ids == a.token_ids
    # Control: at the budget the default had before (4 slots), each came back after its slot was dropped.
    small = make_llm()
    small.prefix_cache.max_slots = 4
    _, _, cold = _dozen_sent_twice(small)
    assert all(r.usage.cached_tokens < 16 for r in cold)


def test_a_snapshot_too_big_to_keep_is_not_taken():
    llm = make_llm()
    taken = []
    real = llm.model.snapshot
    llm.model.snapshot = lambda: taken.append(1) or real()
    llm.complete("a first document, long enough to be saved " * 3, max_tokens=8, temperature=0)
    llm.complete("something else entirely, which drops it " * 3, max_tokens=8, temperature=0)
    assert len(taken) == 1 and len(llm.prefix_slots()) == 1  # control: saved when it fits
    llm.prefix_cache.max_bytes = llm.model.snapshot_nbytes() - 1  # the live cache no longer fits
    llm.complete("a third request, unlike both " * 3, max_tokens=8, temperature=0)
    assert len(taken) == 1


def test_prefix_budgets_are_checked():
    from fucina import LLM
    from fucina.errors import InvalidOption
    from fucina.prefix_cache import PrefixCache

    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InvalidOption) as exc:
            LLM(FakeModel(seed=1), speculative=False, progress=False, prefix_cache_bytes=bad)
        assert exc.value.param == "prefix_cache_bytes"
        with pytest.raises(InvalidOption) as exc:
            PrefixCache(FakeModel(seed=1), max_slots=bad)
        assert exc.value.param == "max_slots"
    llm = LLM(FakeModel(seed=1), speculative=False, progress=False, prefix_cache_bytes=0)
    docs, _, again = _dozen_sent_twice(llm)
    assert llm.prefix_slots() == [] and all(r.usage.cached_tokens < 16 for r in again)


def test_a_failed_restore_falls_back_to_a_cold_start():
    llm = make_llm()
    out, prompts = _interleave(llm)
    model = llm.model

    def broken(snapshot):
        from fucina.errors import DecodeError

        raise DecodeError("cannot restore")

    model.restore = broken
    r = llm.complete(prompts["A2"], seed=3, max_tokens=40, temperature=0.6, top_p=1.0, top_k=0, min_p=0.0)
    assert r.usage.cached_tokens == 0 and r.text == out["A2"].text


def test_interleaved_chats_through_the_server(reference):
    with serve(make_llm()) as s:
        c = openai.OpenAI(base_url=s.v1, api_key="x", max_retries=0, timeout=30)
        conv = {"A": [{"role": "user", "content": A}], "B": [{"role": "user", "content": B}]}
        cached = {}
        for turn in ("A1", "B1", "A2", "B2"):
            msgs = conv[turn[0]]
            r = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0)
            ref = plain(reference, "chat", msgs, max_tokens=30, temperature=0)
            assert r.choices[0].message.content == ref.text
            cached[turn] = r.usage.prompt_tokens_details.cached_tokens
            msgs += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": "and then?"}]
        metrics = s.client().get("/metrics").text
    assert cached["A2"] > len(A) and cached["B2"] > len(B)
    assert "fucina_prefix_slots 1" in metrics or "fucina_prefix_slots 2" in metrics


def test_non_rewindable_models_keep_working():
    llm = make_llm(rewindable=False, speculative=False)
    a = llm.complete(A, max_tokens=10, temperature=0)
    b = llm.complete(B, max_tokens=10, temperature=0)
    a2 = llm.complete(A, max_tokens=10, temperature=0)
    assert a.text == a2.text and b.usage.cached_tokens == 0 and a2.usage.cached_tokens == 0
