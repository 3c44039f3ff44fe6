"""The prompt source: the text fed to the model, read as the copy had it, drafts past a renamed name."""

from __future__ import annotations

import numpy as np
import pytest

from fucina.sampling import SamplerOptions
from fucina.speculative.grammar_drafts import GrammarDrafts
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.source import observe_fed
from fucina.speculative.turn_gate import TurnGate
from tests.speculative.test_realign import assert_rename_lossless, long_source
from tests.speculative.test_rewrite import replay_answer

V = 400


def attribute_source(seed: int, lines: int = 16) -> list[int]:
    """Lines ``7 5 A f1 .. f9``: the parameter 7, an attribute access (5) of one of three names A, then
    fresh tokens. After a rename of 7 the answer's own earlier lines hold ``300 5 A`` too, followed by
    another line: the conversation's match there drafts the wrong line."""
    rng = np.random.default_rng(seed)
    out: list[int] = []
    for i in range(lines):
        out += [7, 5, 40 + i % 3, *rng.choice(np.arange(60, 250), size=9, replace=False).tolist()]
    return out


def replay(options: CascadeOptions, prompt: list[int], answer: list[int], budget: int
           ) -> tuple[int, SpeculationIndex]:
    """Steps to replay ``answer`` (the prompt fed as the decoder feeds it), and the index."""
    idx = SpeculationIndex(V, options)
    idx.observe_fed(prompt)
    return replay_answer(idx, answer, budget), idx


def renamed(source: list[int]) -> tuple[list[int], list[int]]:
    """(a prompt quoting ``source``, the answer: ``source`` with 7 renamed ``7 300``)."""
    return [7, 300, 4, *source, 3], [t for s in source for t in ((7, 300) if s == 7 else (s,))]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_prompt_read_as_copied_drafts_past_a_rename_in_fewer_steps(seed):
    # Drafts of 7 tokens often end just after a rewritten ``7 300 5 A``: the conversation's longest match is
    # then ``300 5 A`` in an earlier line of the answer (a wrong line); the prompt's cursor, fed ``7 5 A`` as
    # the copy had it, still matches the whole copy and drafts the right line (44 steps -> 35).
    prompt, answer = renamed(attribute_source(seed))
    with_prompt, idx = replay(CascadeOptions(recycling=False), prompt, answer, budget=7)
    without, _ = replay(CascadeOptions(recycling=False, prompt=False), prompt, answer, budget=7)
    assert with_prompt <= 0.85 * without, (with_prompt, without)
    report = idx.stats()["prompt"]
    assert report.drafted > 50 and report.accepted >= 0.95 * report.drafted


def test_the_prompt_source_needs_fed_tokens_and_the_rewrite_rules():
    prompt, answer = renamed(attribute_source(0))
    observed = SpeculationIndex(V, CascadeOptions(recycling=False))
    observed.observe(prompt)  # generated tokens, as far as the index knows: no prompt source
    assert observed._prompt is None
    no_rules = SpeculationIndex(V, CascadeOptions(recycling=False, rewrite=False))
    no_rules.observe_fed(prompt)  # without rules as_copied is the committed text: the conversation's own
    assert no_rules._prompt is None
    steps, idx = replay(CascadeOptions(recycling=False), prompt, answer, budget=7)
    assert idx._prompt is not None and idx.nbytes() > idx.conversation.nbytes() + idx._prompt.sam.nbytes() - 1


def test_a_new_turn_rebuilds_the_prompt_over_the_whole_stream():
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.observe_fed([1, 2, 3, 4])
    idx.observe([5, 6, 7, 8])  # the first turn's answer
    idx.observe_fed([9, 10])  # the second turn's prompt
    assert list(idx._prompt.sam.tokens) == list(range(1, 11))
    assert idx._prompt.cursor.match_len() == 10
    idx._prompt.sam.check_integrity(deep=True)


def test_the_prompt_drafts_only_where_its_match_is_the_longest_and_never_takes_a_references_credit():
    # The prompt quotes the prediction: the conversation wins the tie and the prediction is credited with
    # what it predicted, never the prompt source (it holds the same text).
    doc = list(range(20, 60))
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.add_reference(doc)
    idx.observe_fed([1, *doc, 2, *doc[:5]])
    offer = idx.draft([], 8)
    assert offer.tokens == tuple(doc[5:13]) and offer.kind == "ref0"
    assert "prompt" not in [s.name for s in idx.stats().sources]


def test_observe_fed_reaches_the_index_through_the_wrappers_and_falls_back_to_observe():
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    gate = TurnGate(GrammarDrafts(idx, lambda: ()))
    gate.open()
    observe_fed(gate, [1, 2, 3])
    assert idx._prompt is not None and list(idx._prompt.sam.tokens) == [1, 2, 3]

    class Recorder:  # a source without observe_fed learns fed tokens through observe
        seen: list[int] = []

        def observe(self, committed):
            self.seen.extend(committed)

    recorder = Recorder()
    observe_fed(recorder, [1, 2, 3])
    assert recorder.seen == [1, 2, 3]


@pytest.mark.parametrize("opts", [SamplerOptions(), SamplerOptions(temperature=0.8, top_k=20, seed=7)],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("seed", [4, 5])
def test_decoding_with_the_prompt_source_is_lossless(opts, seed):
    # The model renames 7 to 7 300 through a copy of its prompt (sampled, it strays from the copy too);
    # the decoder feeds the prompt, so the prompt source drafts. The committed stream is plain decoding's.
    source = long_source(seed) + long_source(seed + 10)
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    expected, script = assert_rename_lossless(source, opts, seed, idx)
    assert idx._prompt is not None
    if opts.temperature == 0:
        assert expected == script and idx.stats()["prompt"].accepted > 0


def test_right_after_a_feed_the_prompt_source_prices_nothing():
    # Its cursor matches the whole stream, whose one occurrence ends the text: it cannot draft, so the
    # step's confidence is the conversation's (a 2-token match of ``5 6`` here), never the prompt's length.
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.observe_fed([1, 5, 6, 7, 8, 9, 5, 6])
    assert idx._prompt.cursor.match_len() == 8 and idx.confidence() == 2
    assert idx.draft([], 4).tokens == (7, 8, 9, 5)
