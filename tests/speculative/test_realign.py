"""The ``realign`` source: a copy broken by an edit is picked up again in the text it came from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fucina.backends.fake import FakeModel
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.realign import MAX_CONFIDENCE, MAX_RUN, WINDOW, Realign
from tests.strategies import any_token_streams

V = 400
NO_RECYCLING = CascadeOptions(recycling=False)
FREE = CostTable(((2, 1.0), (32, 1.0)), "test: free verifies")
PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A "function" whose parameter 7 occurs four times; the edit renames it to 7 300 (a token inserted).
SOURCE = [10, 11, 7, 12, 13, 14, 15, 16, 7, 17, 18, 19, 20, 21, 7, 22, 23, 24, 25, 26, 7, 27, 28, 29]
RENAMED = [t for s in SOURCE for t in ((7, 300) if s == 7 else (s,))]


def replay(idx: SpeculationIndex, prompt: list[int], answer: list[int], budget: int = 8) -> list[str]:
    """Replay ``answer`` as a model that writes it would: each step commits the draft's accepted
    prefix and the correction. Returns the kind of each step's offer."""
    idx.observe(prompt)
    kinds, i = [], 0
    while i < len(answer):
        offer = idx.draft(prompt + answer[:i], budget)
        kinds.append(offer.kind)
        a = 0
        while a < len(offer.tokens) and i + a < len(answer) and offer.tokens[a] == answer[i + a]:
            a += 1
        idx.observe(answer[i: i + a + 1])
        i += a + 1
    return kinds


def test_an_inserted_token_is_skipped_and_the_copy_goes_on():
    # S = 10 11 7 12 13 ... copied as 10 11 7 300 12 13 ...: the draft 12 13 after 7 meets 300.
    r = Realign()
    r.offered(SOURCE, 0, SOURCE[:8], 2)  # drafted on a 2-token match
    r.observe([10, 11, 7, 300])
    assert r.ready and r.stream is SOURCE and r.start() == 3  # 300 is nowhere near: inserted before S[3]
    assert r.draft(4) == [12, 13, 14, 15]
    assert r.confidence == 5  # the copy that broke: the 2-token match and the 3 tokens it held


def test_its_confidence_is_the_broken_copy_capped():
    r = Realign()
    assert r.confidence == 0
    r.offered(SOURCE, 0, SOURCE[:20], 40)
    r.observe([*SOURCE[:3], 300])
    assert r.confidence == MAX_CONFIDENCE
    r.offered(SOURCE, r.start(), r.draft(4), r.confidence)
    r.observe([301])  # its own pick-up rejected at once: the same break, the same confidence
    assert r.ready and r.confidence == MAX_CONFIDENCE


def test_a_replaced_token_costs_one_step_then_the_copy_goes_on():
    r = Realign()
    r.offered(SOURCE, 0, SOURCE[:8])
    r.observe([10, 11, 301])  # 301 replaces the 7 at S[2]
    assert r.draft(3) == [7, 12, 13]  # the insertion guess, rejected at once; the correction is S[3]
    r.offered(SOURCE, r.start(), r.draft(3))
    r.observe([12])
    assert r.ready and r.draft(3) == [13, 14, 15]  # 12 = S[3]: rejoined, the copy goes on at S[4]


def test_dropped_tokens_are_skipped_within_the_window():
    r = Realign()
    r.offered(SOURCE, 0, SOURCE[:8])
    r.observe([10, 11, 14])  # S[2:5] = 7 12 13 dropped, 14 = S[5]
    assert r.draft(2) == [15, 16]


def test_it_disarms_when_the_copy_holds_or_the_answer_writes_new_text():
    r = Realign()
    r.offered(SOURCE, 0, SOURCE[:4])
    r.observe([10, 11, 7, 12, 13])  # the whole offer held (and a bonus): no break
    assert not r.ready and r.draft(4) == [] and r.start() == -1
    r.offered(SOURCE, 0, SOURCE[:4])
    r.observe([10, 11, 301])
    assert r.ready
    r.observe([302] * MAX_RUN)  # new text, offered by nothing realign can read: it gives up
    assert not r.ready
    r.offered(SOURCE, 0, SOURCE[:4])
    r.observe([301])  # rejected at its first token: no copy broke, nothing to pick up
    assert not r.ready


def test_the_index_drafts_the_renamed_function_in_fewer_steps():
    prompt = [7, 300, 4, 1, 2, *SOURCE, 3]  # "rename 7 to 7 300", then the function
    with_realign = replay(SpeculationIndex(V, NO_RECYCLING), prompt, RENAMED)
    without = replay(SpeculationIndex(V, CascadeOptions(recycling=False, realign=False)), prompt, RENAMED)
    assert "realign" in with_realign and "realign" not in without
    assert len(with_realign) < len(without)


def test_a_realigned_offer_is_priced_by_the_copy_it_picks_up():
    idx = SpeculationIndex(V, NO_RECYCLING)
    prompt = [7, 300, 4, 1, 2, *SOURCE, 3]
    idx.observe(prompt)
    offers = []
    i = 0
    while i < len(RENAMED):
        conf = idx.confidence()
        offer = idx.draft([], 8)
        offers.append((conf, offer))
        a = 0
        while a < len(offer.tokens) and i + a < len(RENAMED) and offer.tokens[a] == RENAMED[i + a]:
            a += 1
        idx.observe(RENAMED[i: i + a + 1])
        i += a + 1
    realigned = [(conf, o) for conf, o in offers if o.kind == "realign"]
    assert realigned and all(o.confidence == conf and 1 <= conf <= MAX_CONFIDENCE for conf, o in realigned)


def test_a_prediction_picked_up_again_is_credited_to_the_prediction():
    idx = SpeculationIndex(V, NO_RECYCLING)
    idx.add_reference(SOURCE)
    kinds = replay(idx, [7, 300, 4, 1, 2, 3], RENAMED)
    stats = idx.stats()
    assert "realign" in kinds and stats["realign"].accepted > 0
    # Every realigned token read the prediction: credited to it as well as to realign.
    assert stats["ref0"].accepted >= stats["realign"].accepted
    assert [s.name for s in stats.sources] == ["conversation", "ref0", "realign"]


def test_the_sams_keep_the_step_while_realign_trails():
    # After each break the answer writes new text that the prompt also holds (a SAM match drafts
    # it); realign's pick-up of the broken copy never holds, so it never drafts.
    new = [40, 41, 42, 43, 44, 45]
    prompt = [*SOURCE, 2, *new, 3]
    answer = SOURCE[:4] + new + SOURCE[4:12] + new + SOURCE[12:20] + new
    idx = SpeculationIndex(V, NO_RECYCLING)
    kinds = replay(idx, prompt, answer)
    assert "realign" not in kinds


def test_clearing_references_drops_a_copy_of_one():
    idx = SpeculationIndex(V, NO_RECYCLING)
    idx.add_reference(SOURCE)
    idx.observe([1, 2, 3, 4])
    idx.draft([], 4)  # nothing matches: no offer
    idx.observe(SOURCE[:3])
    offer = idx.draft([], 4)
    assert offer.kind == "ref0"
    idx.observe([*SOURCE[3:5], 300])  # broke after two tokens
    assert idx._realign is not None and idx._realign.ready
    idx.clear_references()
    assert not idx._realign.ready


def brute_start(stream: list[int], p: int, last: int) -> int:
    """Where realign's draft begins, by definition: after the nearest ``last`` in the window, else at p."""
    for q in range(p, min(p + WINDOW, len(stream))):
        if stream[q] == last:
            return q + 1
    return p


@PROPS
@given(any_token_streams(max_len=80), st.integers(0, 79), st.integers(0, 8), st.integers(1, 6),
       st.lists(st.integers(0, V - 1), min_size=1, max_size=4))
def test_the_draft_matches_its_definition(stream, start, held, length, committed_tail):
    assume(stream)
    stream = [t % V for t in stream]
    start = start % len(stream)
    tokens = stream[start: start + length]
    held = min(held, len(tokens))
    r = Realign()
    r.offered(stream, start, tokens)
    committed = tokens[:held] + committed_tail
    r.observe(committed)
    a = 0  # how far the offer held
    while a < min(len(tokens), len(committed)) and tokens[a] == committed[a]:
        a += 1
    broke = 0 < a < len(tokens) and a < len(committed)
    assert r.ready == broke
    if broke:
        at = brute_start(stream, start + a, committed[-1])
        assert r.start() == at and r.draft(5) == stream[at: at + 5]


class RenameFake(FakeModel):
    """A FakeModel pulled (by ``bias`` on the logit) toward writing ``script`` after a prompt of
    ``prompt_len`` tokens: greedy, it writes the script; sampled, it strays from it now and then."""

    def __init__(self, prompt_len: int, script: list[int], bias: float, **kw) -> None:
        super().__init__(**kw)
        self.prompt_len, self.script, self.bias = prompt_len, script, bias

    def _row(self, n: int) -> np.ndarray:
        row = super()._row(n)
        written = self._tokens[self.prompt_len: n]
        if n >= self.prompt_len and len(written) < len(self.script) and self.script[:len(written)] == written:
            row[self.script[len(written)]] += np.float32(self.bias)
        return row


def long_source(seed: int) -> list[int]:
    """Eight lines of twelve fresh tokens, each starting with the parameter 7."""
    rng = np.random.default_rng(seed)
    return [t for _ in range(8) for t in (7, *rng.choice(np.arange(20, 250), size=12, replace=False).tolist())]


def assert_rename_lossless(source: list[int], opts: SamplerOptions, seed: int,
                           idx: SpeculationIndex) -> tuple[list[int], list[int]]:
    """Decode a model that renames 7 to 7 300 in ``source`` (a RenameFake) plainly and speculatively
    through ``idx`` (every draft verified), assert the two streams equal token for token, and return
    (plain's tokens, the rename script)."""
    prompt = [7, 300, 4, *source, 3]
    script = [t for s in source for t in ((7, 300) if s == 7 else (s,))]

    def model() -> RenameFake:
        return RenameFake(len(prompt), script, 9.0, seed=seed)

    plain = PlainDecoder(model(), Sampler(opts))
    plain.feed(prompt)
    expected = list(plain.generate(len(script)))
    d = SpeculativeDecoder(model(), idx, Sampler(opts), SpecOptions(verify_all=True), cost_table=FREE)
    d.feed(prompt)
    assert list(d.generate(len(script))) == expected
    return expected, script


@pytest.mark.parametrize("opts", [SamplerOptions(), SamplerOptions(temperature=0.8, top_k=20, seed=7)],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("seed", [4, 5])
def test_decoding_with_realign_drafts_is_lossless(opts, seed):
    # The model renames 7 to 7 300 through a copy of its prompt (sampled, it also strays from the
    # copy), so copies break, realign drafts, and some of its drafts fail; the committed stream is
    # plain decoding's all the same.
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    expected, script = assert_rename_lossless(long_source(seed), opts, seed, idx)
    realigned = idx.stats()["realign"]
    assert realigned.drafted > 0
    if opts.temperature == 0:
        assert expected == script and realigned.accepted > 0
