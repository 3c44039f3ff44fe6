"""Log-probabilities (fucina.logprobs): values against a brute-force log-softmax, top ordering and ties,
the commit hook in both decoders, and bitwise equality with and without speculation (fake backend: exact).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fucina import LLM
from fucina.backends.fake import EOS_ID, FakeModel
from fucina.errors import InvalidOption
from fucina.logprobs import (MAX_TOP_LOGPROBS, LogprobRecorder, VisibleLogprobs, log_softmax, token_logprob,
                             top_ids, visible)
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.index import SpeculationIndex

FLAT = CostTable(((2, 1.05), (4, 1.1), (8, 1.2), (16, 1.4), (32, 1.8)), "flat test table")
REPETITIVE = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"
SAMPLED = dict(temperature=0.7, top_k=20, top_p=0.9, min_p=0.0, repeat_penalty=1.3, frequency_penalty=0.2)
#: Sampled, yet close enough to the fake model's copying that drafts are accepted.
MILD = dict(temperature=0.3, top_k=40, top_p=0.95, min_p=0.05)


def make_llm(seed: int = 0) -> LLM:
    return LLM(FakeModel(seed=seed, chat=True), cost_table=FLAT, name="fake", progress=False,
               spec_options=SpecOptions(verify_all=True))


def brute_log_softmax(row: np.ndarray) -> np.ndarray:
    """The textbook formula with exact summation (math.fsum), independent of the module's code."""
    x = [float(v) for v in row]
    m = max(x)
    lse = m + math.log(math.fsum(math.exp(v - m) for v in x))
    return np.array([v - lse for v in x])


def brute_top(row: np.ndarray, n: int) -> list[int]:
    return sorted(range(len(row)), key=lambda i: (-float(row[i]), i))[:n]


# -- the arithmetic ----------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 30.0, 1e-3])
def test_logprob_values_match_a_brute_force_log_softmax(scale):
    rng = np.random.default_rng(0)
    for _ in range(5):
        row = (rng.standard_normal(997) * scale).astype(np.float32)
        ref = brute_log_softmax(row)
        np.testing.assert_allclose(log_softmax(row), ref, rtol=0, atol=1e-12)
        for tok in (0, int(np.argmax(row)), 996):
            e = token_logprob(row, tok, 5)
            assert e.token_id == tok and abs(e.logprob - ref[tok]) < 1e-12
            assert [t.token_id for t in e.top] == brute_top(row, 5)
            assert all(abs(t.logprob - ref[t.token_id]) < 1e-12 for t in e.top)
        assert math.isclose(math.fsum(np.exp(ref)), 1.0, rel_tol=1e-12)


def test_logprobs_are_float64_even_where_float32_would_round():
    row = np.array([0.0, -40.0, 5.0], dtype=np.float32)
    e = token_logprob(row, 1, 0)
    assert e.logprob == pytest.approx(brute_log_softmax(row)[1], abs=1e-12)
    assert e.logprob != float(np.float32(e.logprob))  # not rounded to float32
    assert isinstance(e.logprob, float) and isinstance(e.token_id, int)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 20])
def test_top_alternatives_are_ordered_with_ties_by_lowest_id(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        row = rng.integers(-3, 3, size=40).astype(np.float32)  # many ties, also across the cut
        assert top_ids(row, n).tolist() == brute_top(row, n)
    row = np.array([1, 3, 3, 2, 3, 0], dtype=np.float32)
    assert top_ids(row, 2).tolist() == [1, 2]
    assert top_ids(row, 4).tolist() == [1, 2, 4, 3]
    assert top_ids(row, 10).tolist() == [1, 2, 4, 3, 0, 5]


# -- the commit hook ---------------------------------------------------------------------------------


def _decoders(model_seed: int, sampler_opts: SamplerOptions):
    plain = PlainDecoder(FakeModel(seed=model_seed), Sampler(sampler_opts))
    model = FakeModel(seed=model_seed)
    source = SpeculationIndex(model.vocab_size)
    spec = SpeculativeDecoder(model, source, Sampler(sampler_opts), SpecOptions(verify_all=True), cost_table=FLAT)
    return plain, spec


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_commit_hook_sees_exactly_the_committed_tokens_with_their_rows(temperature):
    opts = SamplerOptions(temperature=temperature, seed=5)
    prompt = list(REPETITIVE.encode())
    seen = {}
    for dec in _decoders(0, opts):
        calls: list[tuple[np.ndarray, int]] = []
        dec.commit_hook = lambda row, t, calls=calls: calls.append((np.array(row, copy=True), t))
        dec.feed(prompt)
        out = list(dec.generate(60))
        assert [t for _, t in calls] == out  # one call per committed token, in order; none for rejected rows
        # Each row is the one plain decoding computes for that position (a fresh model over the prefix).
        ref = FakeModel(seed=0).forward_step_all_logits(prompt + out)
        for i, (row, _) in enumerate(calls):
            assert np.array_equal(row, ref[len(prompt) - 1 + i])
        seen[type(dec).__name__] = out
    assert seen["PlainDecoder"] == seen["SpeculativeDecoder"]
    # The speculative one verified drafts: greedy accepts them (one hook call per accepted row), sampled
    # rejects most (rows it computed but must not report).
    assert dec.stats.verifies > 0
    assert dec.stats.accepted > 0 if temperature == 0 else dec.stats.drafted > dec.stats.accepted + 20


# -- through the API: lossless, aligned, raw --------------------------------------------------------


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("seed", [0, 2])
@pytest.mark.parametrize("top", [0, 3, MAX_TOP_LOGPROBS])
def test_logprobs_are_bitwise_the_same_with_and_without_speculation(mode, seed, top):
    llm = make_llm()
    kw = dict(temperature=0) if mode == "greedy" else dict(MILD, seed=seed)
    spec = llm.complete(REPETITIVE, max_tokens=64, logprobs=top, speculative=True, **kw)
    plain = llm.complete(REPETITIVE, max_tokens=64, logprobs=top, speculative=False, **kw)
    assert spec.stats is not None and spec.stats.accepted > 5
    assert spec.token_ids == plain.token_ids
    assert spec.logprobs == plain.logprobs  # frozen dataclasses of floats: exact equality
    assert [e.token_id for e in spec.logprobs] == list(spec.token_ids)
    assert all(len(e.top) == top for e in spec.logprobs)


def test_logprobs_are_of_the_raw_distribution_before_penalties_and_temperature():
    llm = make_llm(seed=3)
    prompt = REPETITIVE
    r = llm.complete(prompt, max_tokens=40, logprobs=4, **SAMPLED, seed=2)
    ids = llm.tokenize(prompt, special=True)
    rows = FakeModel(seed=3).forward_step_all_logits(ids + list(r.token_ids))
    for i, e in enumerate(r.logprobs):
        ref = brute_log_softmax(rows[len(ids) - 1 + i])
        assert abs(e.logprob - ref[e.token_id]) < 1e-12
        assert [t.token_id for t in e.top] == brute_top(rows[len(ids) - 1 + i], 4)
        assert all(abs(t.logprob - ref[t.token_id]) < 1e-12 for t in e.top)


@pytest.mark.parametrize("speculative", [True, False])
def test_streamed_chunks_carry_the_entries_of_their_tokens(speculative):
    llm = make_llm()
    whole = llm.complete(REPETITIVE, max_tokens=50, temperature=0, logprobs=2, speculative=speculative)
    chunks = list(llm.complete(REPETITIVE, max_tokens=50, temperature=0, logprobs=2, speculative=speculative,
                               stream=True))
    for c in chunks:
        assert c.logprobs is not None and [e.token_id for e in c.logprobs] == list(c.token_ids)
    assert tuple(e for c in chunks for e in c.logprobs) == whole.logprobs


def test_logprobs_off_by_default_and_chat_takes_them_too():
    llm = make_llm()
    r = llm.complete(REPETITIVE, max_tokens=8, temperature=0)
    assert r.logprobs is None
    assert all(c.logprobs is None for c in llm.complete(REPETITIVE, max_tokens=8, temperature=0, stream=True))
    msgs = [{"role": "user", "content": REPETITIVE}]
    spec = llm.chat(msgs, max_tokens=30, temperature=0, logprobs=1)
    plain = llm.chat(msgs, max_tokens=30, temperature=0, logprobs=1, speculative=False)
    assert spec.logprobs == plain.logprobs and len(spec.logprobs) == len(spec.token_ids)


@pytest.mark.parametrize("bad", [-1, MAX_TOP_LOGPROBS + 1, True, 2.0, "3"])
def test_bad_logprobs_are_a_named_error_before_any_forward(bad):
    llm = make_llm()
    before = llm.model.forward_calls
    with pytest.raises(InvalidOption) as exc:
        llm.complete(REPETITIVE, max_tokens=4, logprobs=bad)
    assert exc.value.param == "logprobs"
    assert llm.model.forward_calls == before


# -- which entries show in the text --------------------------------------------------------------------


def test_text_offsets_and_the_end_token():
    model = FakeModel(eos_bias=12.0)  # EOS soon
    llm = LLM(model, cost_table=FLAT, name="fake", progress=False)
    r = llm.complete("ab", max_tokens=40, temperature=0, logprobs=0, speculative=False)
    assert r.token_ids[-1] == EOS_ID and r.finish_reason == "stop"
    shown = visible(r.logprobs, r.text)
    assert [e.token_id for e in shown] == list(r.token_ids[:-1])  # the end token is not in the text
    assert r.logprobs[-1].text_offset == len(r.text)
    assert [e.text_offset for e in shown] == [len(llm.detokenize(r.token_ids[:i])) for i in range(len(shown))]


@pytest.mark.parametrize("speculative", [True, False])
def test_tokens_cut_by_a_stop_string_are_not_shown_and_streaming_agrees(speculative):
    llm = make_llm()
    kw = dict(max_tokens=60, temperature=0, logprobs=1, speculative=speculative, stop=["t. th"])
    r = llm.complete(REPETITIVE, **kw)
    assert r.finish_reason == "stop"
    shown = visible(r.logprobs, r.text)
    assert len(shown) < len(r.logprobs)  # the stop string's tokens are hidden
    assert llm.detokenize([e.token_id for e in shown]) == r.text
    window = VisibleLogprobs()
    streamed = [e for c in llm.complete(REPETITIVE, **kw, stream=True) for e in window.push(c.text, c.logprobs)]
    assert streamed == shown


def test_a_recorder_refuses_tokens_it_never_saw():
    rec = LogprobRecorder(FakeModel(), 0)
    rec(np.zeros(320, dtype=np.float32), 5)
    assert rec.take([5])[0].logprob == pytest.approx(-math.log(320))
    with pytest.raises(RuntimeError):
        rec.take([6])
