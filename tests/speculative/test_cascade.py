"""SpeculationIndex cascade policy (design record §7, §8) on hand-written token streams."""

from __future__ import annotations

import numpy as np
import pytest

from fucina.errors import (EmptyReference, InvalidArgument, InvalidOption, InvalidToken,
                           TooManyReferences)
from fucina.speculative.cascade import (CascadeOptions, CascadeStats, SourceStats,
                                        SpeculationIndex)
from fucina.speculative.source import DraftSource

V = 1000


def design(**kw) -> CascadeOptions:
    """The design record's selection constants, now opt-in: the confidence budget beta = 2, SAM
    matches from 2 tokens, per-source muting below 20%, and no ``resume`` source (it came later;
    tests/speculative/test_resume.py). Most tests here exercise those mechanisms."""
    return CascadeOptions(**{"beta": 2, "min_match": 2, "mute_below": 0.2, "resume": False, **kw})


NO_RECYCLING = design(recycling=False)


def index(tokens=(), refs=(), options=None) -> SpeculationIndex:
    idx = SpeculationIndex(V, options if options is not None else design())
    for r in refs:
        idx.add_reference(r)
    if tokens:
        idx.observe(list(tokens))
    return idx


def ctx(idx: SpeculationIndex) -> list[int]:
    # The committed stream as the decoder would pass it.
    return list(idx.conversation.tokens)


# -- selection and tie-breaks ------------------------------------------------------------------------

def test_is_a_draft_source():
    # The cascade plugs into the decoder like any other proposer.
    assert isinstance(SpeculationIndex(V), DraftSource)


def test_tie_between_conversation_and_reference_goes_to_conversation():
    # Both match the suffix [1, 2] (length 2): the live stream's continuation wins.
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[1, 2, 40, 41, 42, 43, 44, 45]])
    assert idx.conversation.match_len() == 2 and idx._refs[0].cursor.match_len() == 2
    assert idx.suggest(ctx(idx), 16) == [3, 4, 5, 6, 7, 8]
    assert idx.last_source == "conversation"


def test_longer_reference_match_beats_conversation():
    # The reference matches [8, 1, 2] (3) against the conversation's [1, 2] (2).
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[8, 1, 2, 40, 41, 42]])
    assert idx.suggest(ctx(idx), 16) == [40, 41, 42]
    assert idx.last_source == "ref0"


def test_tie_between_references_goes_to_first_added():
    # ref0 and ref1 both match [1, 2]; the conversation matches nothing.
    idx = index([8, 1, 2], refs=[[1, 2, 40, 41], [1, 2, 50, 51]])
    assert idx.suggest(ctx(idx), 16) == [40, 41]
    assert idx.last_source == "ref0"


def test_longer_second_reference_beats_first():
    # ref1 matches [8, 1, 2] (3), ref0 only [1, 2] (2): order matters only for ties.
    idx = index([8, 1, 2], refs=[[1, 2, 40, 41], [8, 1, 2, 50, 51]])
    assert idx.suggest(ctx(idx), 16) == [50, 51]
    assert idx.last_source == "ref1"


def test_dead_end_winner_yields_to_next_candidate():
    # ref0 has the longest match but its text ends right there: the conversation drafts instead.
    idx = index([1, 2, 3, 4, 1, 2], refs=[[9, 4, 1, 2]])
    assert idx._refs[0].cursor.match_len() == 3
    draft = idx.suggest(ctx(idx), 16)
    assert draft and draft == [3, 4, 1, 2][: len(draft)]
    assert idx.last_source == "conversation"


# -- budget -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("match", [2, 3, 4, 5, 6, 7, 8])
def test_budget_grows_with_match_len(match):
    # A long reference [10..59]; after committing its first `match` tokens the draft is
    # beta * (1 + match) = 2 * (1 + match) tokens, capped by the caller's budget of 16.
    ref = list(range(10, 60))
    idx = index(ref[:match], refs=[ref])
    draft = idx.suggest(ctx(idx), 16)
    assert draft == ref[match: match + min(16, 2 * (1 + match))]


def test_caller_budget_caps_the_draft():
    # match 6 allows 14 tokens, the caller asks for 5; a zero budget drafts nothing.
    ref = list(range(10, 60))
    idx = index(ref[:6], refs=[ref])
    assert idx.suggest(ctx(idx), 5) == ref[6:11]
    assert idx.suggest(ctx(idx), 0) == [] and idx.last_source is None


def test_beta_option_scales_the_budget():
    # beta = 3 with match 2 -> 9 tokens.
    ref = list(range(10, 60))
    idx = index(ref[:2], refs=[ref], options=design(beta=3))
    assert idx.suggest(ctx(idx), 16) == ref[2:11]


# -- fall-through ---------------------------------------------------------------------------------------

def test_match_below_min_match_falls_through_to_recycling():
    # [1, 2, 3, 1]: the conversation only matches [1] (1 < 2); recycling walks 1->2->3->1...
    # capped at its chain length 8.
    idx = index([1, 2, 3, 1])
    assert idx.conversation.match_len() == 1
    assert idx.suggest(ctx(idx), 16) == [2, 3, 1, 2, 3, 1, 2, 3]
    assert idx.last_source == "recycling"


def test_min_match_one_lets_the_conversation_draft():
    # Same stream with min_match = 1: the single-token match drafts (budget 2 * (1 + 1) = 4).
    idx = index([1, 2, 3, 1], options=design(min_match=1))
    draft = idx.suggest(ctx(idx), 16)
    assert idx.last_source == "conversation" and draft and draft == [2, 3, 1][: len(draft)]


def test_unseen_recycling_row_drafts_nothing():
    # [1, 2, 3, 4]: no SAM match and token 4 has no recycling row yet: a plain step.
    idx = index([1, 2, 3, 4])
    assert idx.suggest(ctx(idx), 16) == [] and idx.last_source is None


def test_recycling_disabled():
    # With recycling off nobody drafts below min_match, and no top-K is requested.
    idx = index([1, 2, 3, 1], options=NO_RECYCLING)
    assert not idx.wants_topk and idx.recycling is None
    assert idx.suggest(ctx(idx), 16) == []
    idx.observe_topk([1], np.array([[5]]))  # ignored, not an error


def test_observe_topk_feeds_recycling():
    # A verify row's top-K for token 5 becomes recycling's row 5 and drives the next draft.
    idx = index([7, 5])
    assert idx.wants_topk
    idx.observe_topk([5], np.array([[9, 8]]))
    assert idx.recycling.topk_of(5).tolist() == [9, 8]
    assert idx.suggest(ctx(idx), 16)[0] == 9


# -- acceptance accounting and truncate_pending ------------------------------------------------------------

def _drafted_index():
    # The conversation drafts [3, 4, 5, 6, 7, 8] (match [1, 2], budget 6).
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], options=NO_RECYCLING)
    assert idx.suggest(ctx(idx), 16) == [3, 4, 5, 6, 7, 8]
    return idx


def test_acceptance_is_common_prefix_with_next_committed_slice():
    # Committed [3, 4, 99]: 2 of 6 drafted tokens accepted.
    idx = _drafted_index()
    idx.observe([3, 4, 99])
    assert (idx.stats()["conversation"].accepted, idx.stats()["conversation"].drafted) == (2, 6)


def test_truncate_pending_scores_only_the_kept_head():
    # The caller verifies only 2 tokens: drafted counts 2 (not 6) and both are accepted.
    idx = _drafted_index()
    idx.truncate_pending(2)
    idx.observe([3, 4, 99])
    assert (idx.stats()["conversation"].accepted, idx.stats()["conversation"].drafted) == (2, 2)


def test_truncate_pending_past_the_end_and_zero():
    # n beyond the draft changes nothing; n = 0 drops the pending draft (no accounting at all).
    idx = _drafted_index()
    idx.truncate_pending(100)
    idx.observe([3, 99])
    assert idx.stats()["conversation"].drafted == 6
    idx = _drafted_index()
    idx.truncate_pending(0)
    idx.observe([3, 4, 5])
    assert idx.stats()["conversation"].drafted == 0


def test_truncate_pending_negative_and_without_pending():
    # Negative n is a caller bug; with nothing pending the call is a no-op.
    idx = index([1, 2])
    idx.truncate_pending(3)
    with pytest.raises(InvalidArgument):
        idx.truncate_pending(-1)


def test_pending_is_settled_once():
    # Only the first observe after a suggest is compared; a later one is not rescored.
    idx = _drafted_index()
    idx.observe([3])
    idx.observe([4, 5])
    assert (idx.stats()["conversation"].accepted, idx.stats()["conversation"].drafted) == (1, 6)


# -- muting ------------------------------------------------------------------------------------------------

def _step(idx: SpeculationIndex, token: int) -> str | None:
    # One decoder step that rejects the draft and commits a single token.
    idx.suggest(ctx(idx), 16)
    source = idx.last_source
    idx.observe([token])
    return source


def _pattern_token(stream, fresh) -> int:
    # The stream (A B x_i)* with A = 1, B = 2 and a never-seen x_i after every "A B".
    if list(stream[-2:]) == [1, 2]:
        return next(fresh)
    return 2 if len(stream) and stream[-1] == 1 else 1


def test_bad_conversation_is_muted_then_reprobed_with_default_constants():
    # At every "A B" the conversation drafts the previous x_i and is wrong. A full 64-token
    # window at 0% mutes it; it sits out 128 committed tokens while its SAM keeps growing, then
    # drafts again; one bad draft on the fresh window does not re-mute it.
    idx = SpeculationIndex(V, NO_RECYCLING)
    fresh = iter(range(100, V))

    def step() -> str | None:
        return _step(idx, _pattern_token(idx.conversation.tokens, fresh))

    while not idx.stats()["conversation"].muted:
        assert idx.stats()["conversation"].drafted < 64  # never muted on a partial window
        step()
    assert idx.stats()["conversation"].drafted >= 64
    sam_len = len(idx.conversation)
    sources = [step() for _ in range(128)]
    assert "conversation" not in sources
    assert len(idx.conversation) == sam_len + 128
    while list(idx.conversation.tokens[-2:]) != [1, 2]:
        step()
    assert step() == "conversation"
    assert not idx.stats()["conversation"].muted


def test_muted_reference_keeps_feeding_its_cursor():
    # ref0 drafts [3..8] after [1, 2] and is wrong (9): with a 4-token window it is muted for 3
    # committed tokens. Tokens [1, 2, 3] arrive while it is muted; at the re-probe its cursor has
    # seen them and matches [1, 2, 3] at once.
    opts = design(recycling=False, mute_window=4, mute_for=3)
    idx = index([1, 2], refs=[[1, 2, 3, 4, 5, 6, 7, 8, 20, 21]], options=opts)
    assert idx.suggest(ctx(idx), 16) == [3, 4, 5, 6, 7, 8]
    idx.observe([9])
    assert idx.stats()["ref0"].muted and idx.suggest(ctx(idx), 16) == []
    idx.observe([1, 2, 3])
    assert not idx.stats()["ref0"].muted
    assert idx._refs[0].cursor.match_len() == 3
    assert idx.suggest(ctx(idx), 16)[:2] == [4, 5] and idx.last_source == "ref0"


def test_good_source_is_not_muted():
    # Copying a document: the reference is always right, its window fills at 100%.
    ref = list(range(10, 400))
    idx = index(ref[:2], refs=[ref], options=NO_RECYCLING)
    while idx.n_committed < len(ref) - 1:
        d = idx.suggest(ctx(idx), 16)
        n = idx.n_committed
        idx.observe(ref[n: n + len(d) + 1])
    s = idx.stats()["ref0"]
    assert s.drafted >= 64 and s.accepted == s.drafted and not s.muted


# -- references -------------------------------------------------------------------------------------------

def test_reference_added_mid_stream_matches_immediately():
    # [5, 6, 7, 8] is already committed when the document [1, 6, 7, 8, 9, 10] arrives: its
    # cursor catches up and drafts [9, 10] on the very next suggest.
    idx = index([5, 6, 7, 8])
    idx.add_reference([1, 6, 7, 8, 9, 10])
    assert idx._refs[0].cursor.match_len() == 3
    assert idx.suggest(ctx(idx), 16) == [9, 10] and idx.last_source == "ref0"


def test_clear_references_drops_documents_and_their_pending_draft():
    # Documents and their stats go, a pending ref0 draft is scored against nobody, and the
    # next document takes slot ref0 again with fresh counts.
    idx = index([8, 1, 2], refs=[[1, 2, 40, 41]], options=NO_RECYCLING)
    assert idx.suggest(ctx(idx), 16) == [40, 41]
    idx.clear_references()
    idx.observe([40])
    assert idx.n_references == 0 and [s.name for s in idx.stats().sources] == ["conversation"]
    assert idx.add_reference([3]) == 0 and idx.stats()["ref0"].drafted == 0


def test_reference_errors():
    # Over max_references, an empty document and out-of-vocab ids are named errors.
    idx = SpeculationIndex(V)
    for i in range(8):
        idx.add_reference([i + 1])
    with pytest.raises(TooManyReferences):
        idx.add_reference([1])
    idx.clear_references()
    with pytest.raises(EmptyReference):
        idx.add_reference([])
    for bad in ([1, V], [-1, 2]):
        with pytest.raises(InvalidToken):
            idx.add_reference(bad)
    assert idx.n_references == 0


def test_observe_rejects_out_of_vocab_ids_atomically():
    # A bad id anywhere in the slice raises and nothing is appended anywhere.
    idx = index([1, 2, 3])
    for bad in ([4, V], [-1]):
        with pytest.raises(InvalidToken):
            idx.observe(bad)
    assert len(idx.conversation) == 3 and idx.n_committed == 3


@pytest.mark.parametrize("kwargs", [
    {"beta": 0}, {"beta": 2.5}, {"min_match": 0}, {"max_references": -1}, {"mute_window": 0},
    {"mute_below": 1.5}, {"mute_below": -0.1}, {"mute_for": 0}, {"recycling_k": 0},
    {"recycling_max_chain": 0}])
def test_invalid_options(kwargs):
    # Each out-of-range policy constant fails at construction.
    with pytest.raises(InvalidOption):
        CascadeOptions(**kwargs)


# -- stats ------------------------------------------------------------------------------------------------

def test_stats_string_format():
    # The one-line summary: "name accepted/drafted", " [muted]" after muted sources.
    stats = CascadeStats((SourceStats("conversation", 41, 52, False), SourceStats("ref0", 10, 30, False),
                          SourceStats("recycling", 3, 20, True)))
    assert str(stats) == "conversation 41/52 ref0 10/30 recycling 3/20 [muted]"
    assert stats["ref0"].acceptance == pytest.approx(1 / 3)


def test_live_stats_count_per_source():
    # The conversation drafts [3, 4, 5, 6, 7, 8] and 2 are accepted; the stream then ends in an
    # unseen token (99), so recycling drafts nothing and stays 0/0; ref0 never matches.
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[70, 71]])
    idx.suggest(ctx(idx), 16)
    idx.observe([3, 4, 99])
    assert idx.suggest(ctx(idx), 16) == []
    assert str(idx.stats()) == "conversation 2/6 ref0 0/0 recycling 0/0"


def test_recycling_only_where_the_measured_costs_let_it_pay():
    from fucina.speculative.cascade import options_for_costs
    from fucina.speculative.costs import CostTable

    # A CPU-like table (verify-k costs most of k plain steps): break-even >= 20% -> recycling off.
    cpu = CostTable(((2, 1.75), (4, 2.27), (8, 2.95), (16, 4.42)))
    assert options_for_costs(cpu).recycling is False
    # A GPU-like table (verifies nearly free): recycling stays on.
    gpu = CostTable(((2, 1.01), (16, 1.2)))
    assert options_for_costs(gpu).recycling is True
    # Never switches on what the caller switched off.
    assert options_for_costs(gpu, CascadeOptions(recycling=False)).recycling is False


# -- confidence (what the decoder's policy prices a draft by) --------------------------------------------------------

def test_confidence_is_the_match_behind_the_next_draft():
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[8, 1, 2, 40, 41, 42]])
    assert idx.confidence() == 3  # the reference's [8, 1, 2] beats the conversation's [1, 2]
    idx.suggest(ctx(idx), 16)
    assert idx.last_source == "ref0"
    assert index([5, 6, 7, 5]).confidence() == 0  # a 1-token match is below min_match
    assert index([5, 6, 7, 5], options=design(min_match=1)).confidence() == 1
    assert SpeculationIndex(V).confidence() == 0


def test_confidence_ignores_muted_sources():
    idx = index([1, 2, 3, 9, 1, 2], options=design(mute_window=1, recycling=False))
    assert idx.confidence() == 2
    assert idx.suggest(ctx(idx), 16) == [3, 9, 1, 2]
    idx.observe([7])  # wrong: a 1-token window at 0% mutes the conversation
    assert idx.stats()["conversation"].muted and idx.confidence() == 0


# -- the defaults the drafting policy runs on ---------------------------------------------------------

def test_defaults_draft_the_whole_budget_from_one_token_matches_and_never_mute():
    """The policy (fucina.speculative.policy) chooses how much to verify, so the cascade offers the
    whole budget, drafts from 1-token matches, and mutes nothing."""
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.observe([1, 2, 3, 4, 5, 6, 7, 8, 9, 1])
    assert idx.confidence() == 1
    assert idx.suggest(ctx(idx), 16) == [2, 3, 4, 5, 6, 7, 8, 9, 1]  # no beta * (1 + match) cap
    for _ in range(40):  # every draft wrong: the window would have muted it under the old default
        d = idx.suggest(ctx(idx), 4)
        idx.observe([999 - (d[0] if d else 0) % 7])
    assert not idx.stats()["conversation"].muted and idx.stats()["conversation"].drafted > 64
