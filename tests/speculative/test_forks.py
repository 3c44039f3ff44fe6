"""Fork flags: which draft tokens were one continuation among several, and how the policy prices them.

``draft_forks`` is checked against brute force over the indexed text (SAM and reference cursor);
the policy learns unique and forked tokens in separate buckets; the cascade, the chat turn gate and
the decoder carry the flags from the source to the policy.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.backends.fake import FakeModel
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.costs import CostTable
from fucina.speculative.policy import (N_BUCKETS, PRIOR_FORKED, PRIOR_UNIQUE, DraftPolicy, PolicyOptions,
                                       e_label, token_bucket)
from fucina.speculative.sam import SamIndex, draft_forks
from fucina.speculative.scripted import ScriptedSource
from fucina.speculative.source import Draft
from fucina.speculative.turn_gate import TurnGate
from tests.strategies import any_token_streams, reference_and_query

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLAT = CostTable(tuple((n, 1 + 0.03 * (n - 1)) for n in range(2, 34)), "flat")


def brute_forks(text: list[int], read: list[int], draft: list[int]) -> list[bool]:
    """forks[j]: the occurrences of ``read + draft[:j]`` in ``text`` are followed by > 1 distinct tokens."""
    out = []
    for j in range(len(draft)):
        s = read + draft[:j]
        n = len(s)
        nxt = {text[e + 1] for e in range(n - 1, len(text) - 1) if text[e - n + 1: e + 1] == s}
        out.append(len(nxt) > 1)
    return out


def test_worked_example():
    sam = SamIndex.build([1, 2, 3, 1, 2, 4, 1])
    assert sam.match_len() == 1 and sam.draft(2) == [2, 4]
    assert sam.forks([2, 4]) == [False, True]
    # A token that is no continuation of the state, and every token after it, counts as forked.
    assert draft_forks(sam, 0, [9, 1]) == [True, True]


@PROPS
@given(any_token_streams(max_len=80), st.integers(1, 16))
def test_sam_forks_match_brute_force(stream, budget):
    sam = SamIndex()
    for i, t in enumerate(stream):
        sam.extend(t)
        text = stream[: i + 1]
        m = sam.match_len()
        draft = sam.draft(budget)
        if not m:
            assert sam.forks(draft) == [False] * len(draft)
            continue
        assert sam.forks(draft) == brute_forks(text, text[len(text) - m:], draft), (text, draft)


@PROPS
@given(reference_and_query(), st.integers(1, 16))
def test_cursor_forks_match_brute_force_over_the_reference(pair, budget):
    ref, query = pair
    sam = SamIndex.build(ref)
    sam.freeze()
    cur = sam.cursor()
    for i, t in enumerate(query):
        cur.feed(t)
        m = cur.match_len()
        draft = cur.draft(budget)
        if m:
            assert cur.forks(draft) == brute_forks(ref, query[i + 1 - m: i + 1], draft)


def test_policy_learns_unique_and_forked_tokens_apart():
    p = DraftPolicy(FLAT, PolicyOptions(memory=10**6))
    p.choose([1, 2, 3], 2, "conversation", forks=[False, True, False])
    p.observe([1, 2, 9])  # token 3 missed
    assert p.learned() == {"conversation": {"m2 unique": (1, 1), "m3 forked": (1, 1), "m4 unique": (0, 1)}}
    p.choose([5, 6], 2, "conversation", forks=[True])  # wrong length: priced and scored without flags
    p.observe([5, 6])
    assert p.learned()["conversation"]["m2"] == (1, 1) and p.learned()["conversation"]["m3"] == (1, 1)
    assert token_bucket(2, 1, None) == 2 and token_bucket(2, 1, [True]) == 2 + 2 * N_BUCKETS
    assert e_label(3 + N_BUCKETS) == "m3 unique" and e_label(3 + 2 * N_BUCKETS) == "m3 forked"


def test_forked_drafts_are_priced_below_unique_ones():
    assert len(PRIOR_UNIQUE) == len(PRIOR_FORKED) == N_BUCKETS
    assert all(f < u for f, u in zip(PRIOR_FORKED[1:], PRIOR_UNIQUE[1:]))
    p = DraftPolicy(FLAT)
    unique = p.best_length(8, 2, "conversation", [False] * 8)[1]
    unknown = p.best_length(8, 2, "conversation")[1]
    forked = p.best_length(8, 2, "conversation", [True] * 8)[1]
    assert forked < unknown < unique


def test_the_cascade_reports_the_drafting_sources_forks():
    idx = SpeculationIndex(100, CascadeOptions(recycling=True))
    idx.observe([1, 2, 3, 1, 2, 4, 1])
    offer = idx.draft([], 2)
    assert offer.tokens == (2, 4) and offer.forks == (False, True)
    gate = TurnGate(idx)
    assert gate.draft([], 2).forks == (False, True)
    fresh = SpeculationIndex(100, CascadeOptions(recycling=True))
    fresh.observe([7, 8])
    # no SAM match: recycling (or nothing) drafts, without fork flags
    assert fresh.draft([7, 8], 4).forks is None
    ref = SpeculationIndex(100, CascadeOptions(recycling=False))
    ref.add_reference([5, 6, 7, 5, 6, 8, 9])
    ref.observe([5, 6])  # [5, 6] went on as 7 and as 8 in the reference; [5, 6, 8] as 9 only
    offer = ref.draft([5, 6], 3)
    assert offer.tokens == (8, 9) and offer.kind == "ref0" and offer.forks == (True, False)


class ForkingSource(ScriptedSource):
    """A perfect scripted source that says its odd draft tokens were forks."""

    def draft(self, context, budget):
        tokens = super().draft(context, budget).tokens
        return Draft(tokens, confidence=4, kind="conversation", forks=[j % 2 == 1 for j in range(len(tokens))])


def forking_run(n: int = 40) -> tuple[SpeculativeDecoder, list[int], list[int]]:
    """(decoder, prompt, expected): a FakeModel decoder drafting from a ForkingSource, not yet fed, and
    the ``n`` tokens plain decoding gives after the prompt, which it must reproduce."""
    m = FakeModel(seed=0)
    prompt = m.tokenize("the cat sat on the mat. the cat sat on the ")
    plain = PlainDecoder(FakeModel(seed=0), Sampler(SamplerOptions()))
    plain.feed(prompt)
    expected = list(plain.generate(n))
    d = SpeculativeDecoder(m, ForkingSource(prompt + expected, m.vocab_size), Sampler(SamplerOptions()),
                           SpecOptions(), cost_table=FLAT)
    return d, prompt, expected


def test_the_decoder_hands_the_forks_to_the_policy_and_stays_lossless():
    d, prompt, expected = forking_run()
    d.feed(prompt)
    assert list(d.generate(40)) == expected
    labels = set(d.policy.learned()["conversation"])
    assert any(lab.endswith(" unique") for lab in labels) and any(lab.endswith(" forked") for lab in labels)
    assert d.stats.verifies > 0


def test_forks_off_reports_none():
    idx = SpeculationIndex(100, CascadeOptions(recycling=False, forks=False))
    idx.observe([1, 2, 3, 1, 2, 4, 1])
    offer = idx.draft([], 2)
    assert offer.tokens == (2, 4) and offer.forks is None
