"""The ``resume`` source: after a token the conversation never saw, the copy it broke goes on one token later."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.backends.fake import FakeModel
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.costs import CostTable
from fucina.speculative.sam import SamIndex
from tests.strategies import any_token_streams

V = 200
NO_RECYCLING = CascadeOptions(recycling=False)
FREE = CostTable(((2, 1.0), (32, 1.0)), "test: free verifies")
PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_a_substituted_word_resumes_the_copy_after_it():
    # "1 2 3 4 5 6 7" is being copied; 99 replaces the 4: the copy goes on at 5.
    idx = SpeculationIndex(V, NO_RECYCLING)
    idx.observe([1, 2, 3, 4, 5, 6, 7, 1, 2, 3])
    idx.observe([99])
    assert idx.confidence() == 1
    offer = idx.draft([], 4)
    assert offer.tokens == (5, 6, 7, 1) and offer.kind == "resume" and offer.forks is None
    idx.observe([5, 6, 7])  # accepted 3 of 4: the conversation matches again, resume is off
    offer = idx.draft([], 2)
    assert offer.confidence == 3 and offer.tokens == (1, 2) and offer.kind == "conversation"
    assert [s.name for s in idx.stats().sources] == ["conversation", "resume"]
    assert (idx.stats()["resume"].accepted, idx.stats()["resume"].drafted) == (3, 4)


def test_no_resume_without_a_broken_copy_or_when_switched_off():
    idx = SpeculationIndex(V, NO_RECYCLING)
    idx.observe([5, 99])  # 99 is new, but nothing matched before it: nothing to resume
    assert idx.confidence() == 0 and idx.suggest([], 4) == []
    off = SpeculationIndex(V, CascadeOptions(recycling=False, resume=False))
    off.observe([1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 99])
    assert off.confidence() == 0 and off.suggest([], 4) == [] and "resume" not in str(off.stats())


def brute_resume(stream: list[int], budget: int) -> list[int]:
    """The resume draft by definition: if the last token is new and the stream before it had a
    match, the text after the token that followed that match's most recent occurrence."""
    *before, last = stream
    if last in before or not before:
        return []
    sam = SamIndex.build(before)
    occ = sam.occurrence()
    return stream[occ + 2: occ + 2 + budget] if occ >= 0 else []  # may run into the new token itself


@PROPS
@given(any_token_streams(max_len=60), st.lists(st.integers(1, 5), min_size=1, max_size=12), st.integers(1, 8))
def test_resume_matches_its_definition_whatever_the_observe_slices(stream, cuts, budget):
    stream = [t % V for t in stream]
    idx = SpeculationIndex(V, NO_RECYCLING)
    i, c = 0, 0
    while i < len(stream):
        n = cuts[c % len(cuts)]
        c += 1
        idx.observe(stream[i: i + n])
        i += n
        if idx.conversation.match_len():
            continue
        expect = brute_resume(stream[:i], budget)
        offer = idx.draft(stream[:i], budget)
        got = list(offer.tokens)
        idx.truncate_pending(0)
        assert got == expect and (offer.kind == "resume") == bool(expect), (stream[:i], got, expect)


@pytest.mark.parametrize("opts", [SamplerOptions(), SamplerOptions(temperature=0.8, top_k=20, seed=7)],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("seed", [4, 5])
def test_decoding_with_resume_drafts_is_lossless(opts, seed):
    # The fake model wanders off its prompt into tokens it never saw, so resume drafts fire (and
    # mostly fail); the committed stream is plain decoding's all the same.
    m = FakeModel(seed=seed)
    prompt = m.tokenize("alpha beta gamma delta epsilon zeta eta theta. alpha beta gamma ")
    plain = PlainDecoder(FakeModel(seed=seed), Sampler(opts))
    plain.feed(prompt)
    expected = list(plain.generate(48))
    idx = SpeculationIndex(m.vocab_size, CascadeOptions(recycling=False))
    d = SpeculativeDecoder(m, idx, Sampler(opts), SpecOptions(verify_all=True), cost_table=FREE)
    d.feed(prompt)
    assert list(d.generate(48)) == expected
    if opts.temperature == 0:
        assert idx.stats()["resume"].drafted > 0
