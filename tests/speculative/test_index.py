"""SpeculationIndex cascade policy (docs/design.md §8) on hand-written token streams."""

from __future__ import annotations

import numpy as np
import pytest

from fucina.errors import (EmptyReference, InvalidArgument, InvalidOption, InvalidToken,
                           TooManyReferences)
from fucina.results import SourceReport
from fucina.speculative.index import (CascadeOptions, CascadeStats,
                                        SpeculationIndex)
from fucina.speculative.source import NO_DRAFT, Draft, DraftSource

V = 1000


def design(**kw) -> CascadeOptions:
    """The earlier design's selection constants that remain options (docs/design.md §4.7): SAM matches from 2 tokens and no
    ``resume`` or ``realign`` source (they came later; tests/speculative/test_resume.py, test_realign.py). Most
    tests here exercise the fall-through to recycling they make visible."""
    return CascadeOptions(**{"min_match": 2, "resume": False, "realign": False, **kw})


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


def offer(idx: SpeculationIndex, budget: int) -> tuple[list[int], str | None]:
    # This step's offer as (tokens, kind): which source drafted what.
    d = idx.draft(ctx(idx), budget)
    return list(d.tokens), d.kind


# -- selection and tie-breaks ------------------------------------------------------------------------

def test_is_a_draft_source():
    # The cascade plugs into the decoder like any other proposer.
    assert isinstance(SpeculationIndex(V), DraftSource)


def test_tie_between_conversation_and_reference_goes_to_conversation():
    # Both match the suffix [1, 2] (length 2): the live stream's continuation wins.
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[1, 2, 40, 41, 42, 43, 44, 45]])
    assert idx.conversation.match_len() == 2 and idx._refs[0].cursor.match_len() == 2
    assert offer(idx, 6) == ([3, 4, 5, 6, 7, 8], "conversation")


def test_a_reference_drafting_the_same_tokens_is_credited():
    # A prediction the prompt also quotes: the conversation matches [6, 1, 2] (3), the reference
    # [1, 2] (2); both continue 3, 4, 5, 9, so the reference drafts and the prediction is credited.
    idx = index([6, 1, 2, 3, 4, 5, 9, 6, 1, 2], refs=[[7, 1, 2, 3, 4, 5, 9, 8]])
    assert idx.conversation.match_len() == 3 and idx._refs[0].cursor.match_len() == 2
    assert offer(idx, 4) == ([3, 4, 5, 9], "ref0")
    assert idx.confidence() == 3  # priced by the longest match, whoever drafts


def test_a_reference_that_parts_ways_leaves_the_draft_to_the_conversation():
    idx = index([1, 2, 3, 4, 5, 9, 1, 2], refs=[[7, 1, 2, 3, 4, 5, 6]])
    assert offer(idx, 4) == ([3, 4, 5, 9], "conversation")


def test_a_shorter_agreeing_reference_leaves_the_draft_to_the_conversation():
    idx = index([1, 2, 3, 4, 5, 9, 1, 2], refs=[[7, 1, 2, 3]])
    assert offer(idx, 4) == ([3, 4, 5, 9], "conversation")


def test_longer_reference_match_beats_conversation():
    # The reference matches [8, 1, 2] (3) against the conversation's [1, 2] (2).
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[8, 1, 2, 40, 41, 42]])
    assert offer(idx, 16) == ([40, 41, 42], "ref0")


def test_tie_between_references_goes_to_first_added():
    # ref0 and ref1 both match [1, 2]; the conversation matches nothing.
    idx = index([8, 1, 2], refs=[[1, 2, 40, 41], [1, 2, 50, 51]])
    assert offer(idx, 16) == ([40, 41], "ref0")


def test_longer_second_reference_beats_first():
    # ref1 matches [8, 1, 2] (3), ref0 only [1, 2] (2): order matters only for ties.
    idx = index([8, 1, 2], refs=[[1, 2, 40, 41], [8, 1, 2, 50, 51]])
    assert offer(idx, 16) == ([50, 51], "ref1")


def test_dead_end_winner_yields_to_next_candidate():
    # ref0 has the longest match but its text ends right there: the conversation drafts instead.
    idx = index([1, 2, 3, 4, 1, 2], refs=[[9, 4, 1, 2]])
    assert idx._refs[0].cursor.match_len() == 3
    draft, kind = offer(idx, 16)
    assert draft and draft == [3, 4, 1, 2][: len(draft)]
    assert kind == "conversation"


# -- budget -----------------------------------------------------------------------------------------

def test_caller_budget_caps_the_draft():
    # The SAM would draft to the end of the reference, the caller asks for 5; a zero budget drafts nothing.
    ref = list(range(10, 60))
    idx = index(ref[:6], refs=[ref])
    assert idx.suggest(ctx(idx), 5) == ref[6:11]
    assert offer(idx, 0) == ([], None)


# -- fall-through ---------------------------------------------------------------------------------------

def test_match_below_min_match_falls_through_to_recycling():
    # [1, 2, 3, 1]: the conversation only matches [1] (1 < 2); recycling walks 1->2->3->1...
    # capped at its chain length 8.
    idx = index([1, 2, 3, 1])
    assert idx.conversation.match_len() == 1
    assert offer(idx, 16) == ([2, 3, 1, 2, 3, 1, 2, 3], "recycling")


def test_min_match_one_lets_the_conversation_draft():
    # Same stream with min_match = 1: the single-token match drafts.
    idx = index([1, 2, 3, 1], options=design(min_match=1))
    draft, kind = offer(idx, 16)
    assert kind == "conversation" and draft and draft == [2, 3, 1][: len(draft)]


def test_unseen_recycling_row_drafts_nothing():
    # [1, 2, 3, 4]: no SAM match and token 4 has no recycling row yet: a plain step.
    idx = index([1, 2, 3, 4])
    assert offer(idx, 16) == ([], None)


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
    assert idx.suggest(ctx(idx), 6) == [3, 4, 5, 6, 7, 8]
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


def test_copying_a_document_accepts_every_drafted_token():
    # Copying a document: the reference is always right, every drafted token is accepted.
    ref = list(range(10, 400))
    idx = index(ref[:2], refs=[ref], options=NO_RECYCLING)
    while idx.n_committed < len(ref) - 1:
        d = idx.suggest(ctx(idx), 16)
        n = idx.n_committed
        idx.observe(ref[n: n + len(d) + 1])
    s = idx.stats()["ref0"]
    assert s.drafted >= 64 and s.accepted == s.drafted


# -- references -------------------------------------------------------------------------------------------

def test_reference_added_mid_stream_matches_immediately():
    # [5, 6, 7, 8] is already committed when the document [1, 6, 7, 8, 9, 10] arrives: its
    # cursor catches up and drafts [9, 10] on the very next suggest.
    idx = index([5, 6, 7, 8])
    idx.add_reference([1, 6, 7, 8, 9, 10])
    assert idx._refs[0].cursor.match_len() == 3
    assert offer(idx, 16) == ([9, 10], "ref0")


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
    {"min_match": 0}, {"max_references": -1}, {"recycling_k": 0}, {"recycling_max_chain": 0}])
def test_invalid_options(kwargs):
    # Each out-of-range policy constant fails at construction.
    with pytest.raises(InvalidOption):
        CascadeOptions(**kwargs)


# -- stats ------------------------------------------------------------------------------------------------

def test_stats_string_format():
    # The one-line summary: "name accepted/drafted" per source.
    stats = CascadeStats((SourceReport(name="conversation", accepted=41, drafted=52),
                          SourceReport(name="ref0", accepted=10, drafted=30),
                          SourceReport(name="recycling", accepted=3, drafted=20)))
    assert str(stats) == "conversation 41/52 ref0 10/30 recycling 3/20"
    assert stats["ref0"].acceptance == pytest.approx(1 / 3)


def test_live_stats_count_per_source():
    # The conversation drafts [3, 4, 5, 6, 7, 8] and 2 are accepted; the stream then ends in an
    # unseen token (99), so recycling drafts nothing and stays 0/0; ref0 never matches.
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[70, 71]])
    idx.suggest(ctx(idx), 6)
    idx.observe([3, 4, 99])
    assert idx.suggest(ctx(idx), 16) == []
    assert str(idx.stats()) == "conversation 2/6 ref0 0/0 recycling 0/0"


def test_recycling_only_where_the_measured_costs_let_it_pay():
    from fucina.speculative.index import options_for_costs
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
    assert idx.draft(ctx(idx), 16).kind == "ref0"
    assert index([5, 6, 7, 5]).confidence() == 0  # a 1-token match is below min_match
    assert index([5, 6, 7, 5], options=design(min_match=1)).confidence() == 1
    assert SpeculationIndex(V).confidence() == 0


def test_draft_is_one_offer_of_tokens_confidence_kind_and_forks():
    # What the decoder reads: one Draft; suggest gives its tokens alone.
    idx = index([1, 2, 3, 4, 5, 6, 7, 8, 1, 2], refs=[[8, 1, 2, 40, 41, 42]])
    offer = idx.draft(ctx(idx), 16)
    assert offer == Draft((40, 41, 42), confidence=3, kind="ref0", forks=offer.forks)
    assert offer.forks is not None and len(offer.forks) == 3
    assert idx.suggest(ctx(idx), 16) == list(offer.tokens)
    assert idx.draft(ctx(idx), 0) == NO_DRAFT


# -- the defaults the drafting policy runs on ---------------------------------------------------------

def test_defaults_draft_the_whole_budget_from_one_token_matches_and_never_stop_drafting():
    """The policy (fucina.speculative.policy) chooses how much to verify, so the cascade offers the
    whole budget, drafts from 1-token matches, and keeps drafting from a source that is always wrong."""
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.observe([1, 2, 3, 4, 5, 6, 7, 8, 9, 1])
    assert idx.confidence() == 1
    assert idx.suggest(ctx(idx), 16) == [2, 3, 4, 5, 6, 7, 8, 9, 1]  # no cap by match length
    for _ in range(40):  # every draft wrong: the old rolling window would have muted the source
        d = idx.suggest(ctx(idx), 4)
        idx.observe([999 - (d[0] if d else 0) % 7])
    assert idx.stats()["conversation"].drafted > 64
