"""TurnGate: the draft-source wrapper that keeps an index in step with a chat turn's trimmed transcript."""

from __future__ import annotations

import numpy as np

from fucina.speculative.index import SpeculationIndex
from fucina.speculative.source import Draft, DraftSource
from fucina.speculative.turn_gate import TurnGate


class _Spy:
    """Inner source that records what the gate forwards."""

    wants_topk = True

    def __init__(self):
        self.observed, self.topk_inputs, self.truncations = [], [], []

    def draft(self, context, budget):
        return Draft((7, 7))

    def observe(self, committed):
        self.observed += list(committed)

    def observe_topk(self, inputs, topk):
        assert len(inputs) == len(topk)
        self.topk_inputs.append(list(inputs))

    def truncate_pending(self, n):
        self.truncations.append(n)


S = 9  # a stop id in the direct gate tests


def test_turn_gate_filters_an_overshooting_committed_slice():
    spy = _Spy()
    gate = TurnGate(spy)
    gate.open()
    gate.observe([1, S, 2])  # prompt tokens pass even when they are stop ids
    gate.arm([S])
    assert gate.draft([1, S, 2], 8) == Draft((7, 7))
    gate.observe([3, 4])
    gate.observe([5, S, 6, 7])  # overshoot: 6, 7 come after the stop
    assert spy.observed == [1, S, 2, 3, 4, 5, S]
    assert gate.dropped == 2 and gate.state == "closed"
    # open() drops a stale draft; the stop cuts the pending one to the [5, S] it is scored against.
    assert spy.truncations == [0, 2]
    gate.observe([8])
    assert spy.observed[-1] == S and gate.dropped == 3
    assert gate.draft([1, 2], 8).tokens == ()
    gate.open()
    gate.observe([8])
    assert spy.observed[-1] == 8


def test_turn_gate_can_drop_the_stop_marker_itself():
    spy = _Spy()
    gate = TurnGate(spy, keep_stop=False)
    gate.arm([S])
    gate.observe([5, S, 6])
    assert spy.observed == [5] and spy.truncations == [1] and gate.dropped == 2


def test_turn_gate_drops_topk_rows_conditioned_past_the_stop():
    spy = _Spy()
    gate = TurnGate(spy)
    rows = np.zeros((4, 2), dtype=np.int64)
    gate.arm([S])
    gate.observe_topk([S, 1, 2, 3], rows)  # inputs[0] was committed before: kept even if a stop id
    gate.observe_topk([4, 5, S, 6], rows)  # rows 2, 3 are conditioned on the stop: dropped
    assert spy.topk_inputs == [[S, 1, 2, 3], [4, 5]]
    gate.observe([5, S])
    gate.observe_topk([S], rows[:1])
    assert spy.topk_inputs[-1] == [4, 5]  # closed: nothing more


def test_turn_gate_keeps_per_source_accounting_aligned_on_a_real_index():
    index = SpeculationIndex(64)
    gate = TurnGate(index)
    gate.open()
    gate.observe([1, 2, 3, S, 11, 1, 2])
    gate.arm([S])
    draft = list(gate.draft([], 8).tokens)
    assert draft[:3] == [3, S, 11]  # the conversation SAM drafts across the earlier stop
    gate.observe([3, S, 11, 12])  # an overshooting decoder
    assert list(index.conversation.tokens) == [1, 2, 3, S, 11, 1, 2, 3, S]
    conv = index.stats()["conversation"]
    assert (conv.accepted, conv.drafted) == (2, 2)  # tokens past the stop are not "rejected"


def test_turn_gate_passes_the_offer_through_until_the_stop():
    index = SpeculationIndex(64)
    gate = TurnGate(index)
    gate.open()
    gate.observe([1, 2, 3, 4, 1, 2])
    gate.arm([S])
    offer = gate.draft([1, 2, 3, 4, 1, 2], 4)
    assert offer.confidence == index.confidence() == 2  # the decoder's policy prices by it
    assert offer.tokens == (3, 4, 1, 2) and offer.kind == "conversation"
    gate.truncate_pending(0)
    gate.observe([3, S])
    assert gate.draft([1, 2, 3, 4, 1, 2, 3, S], 4) == Draft(confidence=0)  # closed turn: nothing drafted
    unnamed = TurnGate(_Spy()).draft([1], 8)  # a source without confidence or names: priced by its record
    assert unnamed.confidence is None and unnamed.kind is None


def test_turn_gate_is_a_draft_source_and_chat_reexports_it():
    from fucina.chat import TurnGate as ChatTurnGate

    assert isinstance(TurnGate(_Spy()), DraftSource) and ChatTurnGate is TurnGate
