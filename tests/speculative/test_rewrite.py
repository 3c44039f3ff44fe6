"""Rewrite rules: the edits an answer keeps making to a copy, learned where a draft broke, applied to later drafts."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fucina.sampling import SamplerOptions
from fucina.speculative.index import CascadeOptions, SpeculationIndex
from fucina.speculative.rewrite import MAX_RULES, MAX_RUN, Rewriter
from tests.speculative.test_realign import assert_rename_lossless, long_source

V = 400
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The docstring's example: IF SELF POS IX COLON, with SELF renamed (ARG inserted after it).
IF, SELF, POS, IX, COLON, ARG, NL = 10, 11, 12, 13, 14, 300, 15


def sighting(r: Rewriter, draft: list[int], *commits: list[int]) -> None:
    """``draft`` offered (rewritten by the rules ``r`` holds), then ``commits`` committed one slice a step."""
    r.rewrite(draft)
    for c in commits:
        r.observe(c)


def learn_rename() -> Rewriter:
    """A rewriter that twice saw the draft POS IX ... after SELF broken by ARG, then the copy go on."""
    r = Rewriter()
    sighting(r, [IF, SELF, POS, IX, COLON], [IF, SELF, ARG], [POS, IX])
    # The draft broke at POS: L = SELF, D = POS IX COLON, C = ARG; then C = ARG POS IX rejoins D at
    # i = 1, j = 0. Seen once, an edit is not yet a rule.
    assert r.rules == {}
    sighting(r, [NL, IF, SELF, POS, IX], [NL, IF, SELF, ARG], [POS, IX])
    return r


def test_the_worked_example():
    r = learn_rename()
    assert r.rules == {(SELF, POS): (SELF, ARG, POS)}
    tokens, _, first = r.rewrite([COLON, NL, IF, SELF, POS, IX])
    assert tokens == [COLON, NL, IF, SELF, ARG, POS, IX] and first == 4
    # The rule's L may be the token just committed: it fires on the draft's first token.
    r.observe([COLON, NL, IF, SELF])
    assert r.rewrite([POS, IX, COLON])[0] == [ARG, POS, IX, COLON]


def test_an_insertion_the_draft_already_has_is_not_made_twice():
    r = learn_rename()
    # The answer's own renamed text drafts SELF ARG POS: nothing to insert.
    assert r.rewrite([IF, SELF, ARG, POS, IX])[0] == [IF, SELF, ARG, POS, IX]


def test_the_same_insertion_before_two_tokens_makes_a_general_rule():
    r = Rewriter()
    sighting(r, [NL, IF, SELF, POS, IX], [NL, IF, SELF, ARG], [POS, IX])
    sighting(r, [NL, IF, SELF, COLON, NL], [NL, IF, SELF, ARG], [COLON, NL])  # ARG again, before COLON
    assert r.rules == {(SELF,): (SELF, ARG)}
    assert r.rewrite([IF, SELF, IX])[0] == [IF, SELF, ARG, IX]  # a third follower: the general rule
    assert r.rewrite([IF, SELF, ARG, IX])[0] == [IF, SELF, ARG, IX]  # already there: not inserted twice


def test_a_replacement_and_a_deletion_are_learned_with_the_token_the_copy_goes_on_at():
    r = Rewriter()
    for _ in range(2):
        sighting(r, [1, 2, 3, 4, 5, 6], [1, 2, 50, 51], [5, 6])  # 3 4 replaced by 50 51, the copy goes on at 5
    assert r.rules == {(2, 3, 4, 5): (2, 50, 51, 5)}
    assert r.rewrite([9, 2, 3, 4, 5, 7])[0] == [9, 2, 50, 51, 5, 7]
    assert r.rewrite([9, 2, 3, 4, 6])[0] == [9, 2, 3, 4, 6]  # the copy goes on otherwise: no rule fires
    d = Rewriter()
    for _ in range(2):
        sighting(d, [1, 2, 3, 4, 5, 6], [1, 2, 4], [5])  # 3 dropped: the correction is the copy's 4, then 5
    assert d.rules == {(2, 3, 4): (2, 4)}
    assert d.rewrite([8, 2, 3, 4, 9])[0] == [8, 2, 4, 9]


def test_a_rule_whose_tokens_are_rejected_loses_credit_and_then_is_forgotten():
    r = learn_rename()
    sighting(r, [IF, SELF, POS, IX], [IF, SELF, POS])  # offered as IF SELF ARG ...: ARG rejected
    assert r.rules == {} and r.forgotten == 1  # a new rule has one credit, a rejection costs two
    r = learn_rename()
    for _ in range(3):  # three uses that held: four credits
        sighting(r, [NL, SELF, POS, IX], [NL, SELF, ARG, POS, IX])
    sighting(r, [NL, SELF, POS, IX], [NL, SELF, POS])  # rejected once: two left
    assert r.rules == {(SELF, POS): (SELF, ARG, POS)}
    sighting(r, [NL, SELF, POS, IX], [NL, SELF, POS])  # and again: none left, still held
    sighting(r, [NL, SELF, POS, IX], [NL, SELF, POS])  # out of credit: forgotten
    assert r.rules == {} and r.forgotten == 1
    assert r.rewrite([SELF, POS, IX])[0] == [SELF, POS, IX]


def test_fork_flags_follow_the_copy_and_written_tokens_are_unique():
    r = learn_rename()
    tokens, forks, _ = r.rewrite([IF, SELF, POS, IX], [True, False, True, True])
    assert tokens == [IF, SELF, ARG, POS, IX] and forks == [True, False, False, True, True]
    tokens, forks, first = r.rewrite([IF, SELF, POS, IX], [True, False, True, True], limit=3)
    assert tokens == [IF, SELF, ARG] and forks == [True, False, False] and first == 2


def test_a_break_the_answer_never_comes_back_from_teaches_nothing():
    r = Rewriter()
    r.rewrite([1, 2, 3, 4])
    r.observe([1, 60])
    r.observe(list(range(61, 61 + MAX_RUN)))  # new text, past MAX_RUN
    r.observe([2, 3, 4])  # the old copy again, too late
    assert r.rules == {}


def test_a_break_right_after_another_does_not_lose_the_first():
    # After an edit the next draft comes from a short match elsewhere and often breaks at once, before
    # the answer is back on the copy: the first break is still followed and teaches its rule.
    r = Rewriter()
    for lead in (NL, IF):
        sighting(r, [lead, SELF, POS, IX, COLON], [lead, SELF, ARG])  # breaks at POS: ARG written
        sighting(r, [COLON, COLON], [POS])  # another draft, broken at its first token
        r.no_offer()
        r.observe([IX])  # ARG POS IX: the first break rejoined its copy
    assert r.rules == {(SELF, POS): (SELF, ARG, POS)}


def test_as_copied_puts_the_copy_back_where_a_rewritten_draft_held():
    r = learn_rename()
    r.observe([COLON, NL])
    tokens = r.rewrite([IF, SELF, POS, IX, COLON])[0]
    assert tokens == [IF, SELF, ARG, POS, IX, COLON]
    # Held through the insertion: the answer as the copy had it (ARG taken out).
    assert r.as_copied([IF, SELF, ARG, POS, IX]) == [IF, SELF, POS, IX]
    # Held up to the insertion only, then the answer wrote something else: nothing to take out.
    assert r.as_copied([IF, SELF, NL]) == [IF, SELF, NL]
    # Past the held prefix the answer's own tokens stay as they are.
    assert r.as_copied([IF, SELF, ARG, NL, ARG]) == [IF, SELF, NL, ARG]


def test_as_copied_puts_back_what_a_replacement_replaced():
    r = Rewriter()
    for lead in (NL, IF):  # POS IX after SELF written as ARG, twice: a replacement rule
        sighting(r, [lead, SELF, POS, IX, COLON, NL], [lead, SELF, ARG], [COLON, NL])
    assert r.rules == {(SELF, POS, IX, COLON): (SELF, ARG, COLON)}
    r.observe([NL])
    assert r.rewrite([SELF, POS, IX, COLON, NL])[0] == [SELF, ARG, COLON, NL]
    assert r.as_copied([SELF, ARG, COLON, NL]) == [SELF, POS, IX, COLON, NL]


def test_as_copied_puts_back_what_a_deletion_dropped():
    r = Rewriter()
    for lead in (NL, IF):  # POS after SELF dropped, twice: a deletion rule
        sighting(r, [lead, SELF, POS, IX, COLON], [lead, SELF, IX], [COLON])
    assert r.rules == {(SELF, POS, IX): (SELF, IX)}
    r.observe([NL])
    assert r.rewrite([SELF, POS, IX, COLON])[0] == [SELF, IX, COLON]
    assert r.as_copied([SELF, IX, COLON, NL]) == [SELF, POS, IX, COLON, NL]


def test_as_copied_without_an_offer_is_the_committed_slice():
    r = learn_rename()
    r.no_offer()
    assert r.as_copied([SELF, ARG, POS]) == [SELF, ARG, POS]


def test_a_reference_cursor_stays_on_the_copy_past_a_rewritten_rename():
    # The source is a reference only (a client's prediction), renamed in the answer. Once the rule is
    # learned, a rewritten draft that holds through the rename leaves the reference's match running
    # (its cursor reads the answer as the copy had it) instead of ending at the inserted token.
    source = long_source(3) + long_source(4)
    answer = [t for s in source for t in ((7, 300) if s == 7 else (s,))]
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    idx.add_reference(source)
    idx.observe([1, 2])
    i = runs = 0
    while i < len(answer):
        offer = idx.draft([], 63)
        a = 0
        while a < len(offer.tokens) and i + a < len(answer) and offer.tokens[a] == answer[i + a]:
            a += 1
        held_rename = 300 in answer[i: i + a]
        idx.observe(answer[i: i + a + 1])
        i += a + 1
        if held_rename and i < len(answer):
            runs += 1
            # The match covers every copied token since the copy began, the renames not counted.
            assert idx.confidence() >= 13, (i, idx.confidence())
    assert runs >= 2


def test_it_holds_at_most_max_rules_the_oldest_going_first():
    r = Rewriter()
    for n in range(MAX_RULES + 3):
        left = 1000 + n
        for _ in range(2):
            sighting(r, [left, 1, 2, 3], [left, 9], [1, 2])
    rules = r.rules
    assert len(rules) == MAX_RULES and (1000, 1) not in rules and (1000 + MAX_RULES + 2, 1) in rules


def inserted(key: tuple[int, ...], value: tuple[int, ...], after: list[int]) -> bool:
    """Whether ``key`` is an insertion (general or before one token) whose tokens ``after`` already begins with."""
    written = list(value[1:] if len(key) == 1 else value[1:-1])
    return len(key) <= 2 and after[:len(written)] == written


def brute_rewrite(last: int, tokens: list[int], rules: dict[tuple[int, ...], tuple[int, ...]]) -> list[int]:
    """The rules applied by definition: left to right over ``last`` + tokens, the longest key that
    starts at a position and is not an insertion already made; the key's last token (where the copy
    goes on) is kept and not read as the start of another key."""
    seq, out, t = [last, *tokens], [], 0
    while t < len(seq):
        fits = [k for k in rules if tuple(seq[t: t + len(k)]) == k and not inserted(k, rules[k], seq[t + 1:])]
        if not fits:
            out.append(seq[t])
            t += 1
            continue
        key = max(fits, key=len)
        if len(key) == 1:  # a general insertion: L and the written tokens, then on after L
            out.extend(rules[key])
            t += 1
            continue
        out.extend(rules[key][:-1])
        t += len(key) - 1
        if t < len(seq):
            out.append(seq[t])
            t += 1
    return out[1:]


small = st.integers(0, 5)


@PROPS
@given(st.dictionaries(st.lists(small, min_size=1, max_size=4).map(tuple),
                       st.lists(st.integers(6, 9), min_size=0, max_size=3), max_size=6),
       small, st.lists(small, max_size=20))
def test_a_draft_is_rewritten_as_the_rules_say(raw, last, tokens):
    r = Rewriter()
    for key, written in raw.items():
        value = (key[0], *written) if len(key) == 1 else (key[0], *written, key[-1])
        if value != key:
            r._learn(key, value)
    r._last = last
    out, _, first = r.rewrite(tokens)
    assert out == brute_rewrite(last, tokens, r.rules)
    assert out[:first] == tokens[:first]  # nothing before the first rewrite changes


def renamed_replay(options: CascadeOptions, prompt: list[int], answer: list[int], budget: int = 16) -> int:
    """Steps to replay ``answer`` as a model that writes it would (each step commits the draft's
    accepted prefix and the correction); the prompt is fed as the decoder feeds it."""
    idx = SpeculationIndex(V, options)
    idx.observe_fed(prompt)
    return replay_answer(idx, answer, budget)


def replay_answer(idx: SpeculationIndex, answer: list[int], budget: int) -> int:
    """Steps ``idx`` takes to replay ``answer`` (each step commits the draft's accepted prefix and the correction)."""
    steps = i = 0
    while i < len(answer):
        offer = idx.draft([], budget)
        a = 0
        while a < len(offer.tokens) and i + a < len(answer) and offer.tokens[a] == answer[i + a]:
            a += 1
        idx.observe(answer[i: i + a + 1])
        i += a + 1
        steps += 1
    return steps


def test_the_index_drafts_a_renamed_function_in_fewer_steps():
    source = long_source(3) + long_source(4)  # sixteen lines, each starting with the parameter 7
    prompt = [7, 300, 4, *source, 3]
    answer = [t for s in source for t in ((7, 300) if s == 7 else (s,))]
    # Without rules every line's rename ends a draft (realign picks the copy up after it); with them
    # a 63-token draft runs through four lines once the rename is learned (14 steps against 21).
    with_rules = renamed_replay(CascadeOptions(recycling=False), prompt, answer, budget=63)
    without = renamed_replay(CascadeOptions(recycling=False, rewrite=False), prompt, answer, budget=63)
    assert with_rules <= 0.75 * without


@pytest.mark.parametrize("opts", [SamplerOptions(), SamplerOptions(temperature=0.8, top_k=20, seed=7)],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("planted", [False, True], ids=["learned", "garbage-rules"])
def test_decoding_with_rewritten_drafts_is_lossless(opts, seed, planted):
    # The model renames 7 to 7 300 through a copy of its prompt (sampled, it also strays from the
    # copy), so rules are learned, applied and sometimes wrong; with planted rules that write
    # garbage after common tokens, most rewritten drafts are wrong. The committed stream is plain
    # decoding's all the same.
    source = long_source(seed) + long_source(seed + 10)
    idx = SpeculationIndex(V, CascadeOptions(recycling=False))
    assert idx._rewriter is not None
    if planted:
        for t in source[:40]:
            idx._rewriter._learn((t,), (t, 311, 310))
    expected, script = assert_rename_lossless(source, opts, seed, idx)
    if planted:
        assert idx._rewriter.forgotten > 0  # rewritten drafts were offered and rejected
    elif opts.temperature == 0:
        assert expected == script and idx._rewriter.learned > 0
