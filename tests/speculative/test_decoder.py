"""Losslessness proofs of the SpeculativeDecoder on the batch-invariant fake backend (bitwise).

Each test maps to a proof obligation in docs/design.md §2.3 (numbers in the names).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fucina.backends.fake import FakeModel
from fucina.errors import DecodeError, InvalidOption, NotRewindable
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.policy import PolicyOptions
from fucina.speculative.scripted import ScriptedSource
from fucina.speculative.source import Draft

GREEDY = SamplerOptions()
SAMPLED = SamplerOptions(temperature=0.8, top_k=20, seed=7)
PENALIZED = SamplerOptions(temperature=0.8, top_k=20, repeat_penalty=1.3, frequency_penalty=0.4,
                           presence_penalty=0.3, seed=11)
# A table under which every verify wins, so the policy never declines unless a test wants it to.
CHEAP = CostTable(((2, 1.0), (32, 1.0)), "test: free verifies")
#: Drafts of at most 16 (the default is 63), for tests whose premise is a generation of many steps.
SHORT = PolicyOptions(max_draft=16)
MODES = ["perfect", "garbage", "alternating", "partial"]


def prompt_of(model, text="the cat sat on the mat. the cat sat on the "):
    return model.tokenize(text)


def plain_run(opts, n=96, seed=0, prompt_text=None, hook=None):
    m = FakeModel(seed=seed)
    d = PlainDecoder(m, Sampler(opts))
    prompt = prompt_of(m) if prompt_text is None else m.tokenize(prompt_text)
    if hook:
        orig = d.sampler.sample

        def spy(row, hist):
            hook(row, len(hist), hist)
            return orig(row, hist)

        d.sampler.sample = spy
    d.feed(prompt)
    return prompt, list(d.generate(n)), d


def spec_run(opts, stream, mode, n=96, seed=0, prompt_text=None, policy=None, hook=None, verify_all=True):
    m = FakeModel(seed=seed)
    prompt = prompt_of(m) if prompt_text is None else m.tokenize(prompt_text)
    src = ScriptedSource(stream, m.vocab_size, mode, seed=5)
    d = SpeculativeDecoder(m, src, Sampler(opts), SpecOptions(policy=policy or PolicyOptions(), verify_all=verify_all),
                           cost_table=CHEAP, row_hook=hook)
    d.feed(prompt)
    return list(d.generate(n)), d


@pytest.mark.parametrize("opts", [GREEDY, SAMPLED, PENALIZED], ids=["greedy", "sampled", "penalized"])
@pytest.mark.parametrize("mode", MODES)
def test_4_adversarial_sources_commit_the_plain_stream(opts, mode):
    prompt, plain, pd = plain_run(opts)
    out, d = spec_run(opts, prompt + plain, mode)
    assert out == plain
    assert d.stats.verifies > 0 and d.stats.committed == len(plain)
    if mode == "perfect":
        assert d.stats.accepted > 0.8 * d.stats.drafted
    if mode == "garbage":
        assert d.stats.accepted < 0.1 * d.stats.drafted + 1


@pytest.mark.parametrize("mode", MODES)
def test_1_one_rng_draw_per_committed_token(mode):
    prompt, plain, pd = plain_run(SAMPLED)
    out, d = spec_run(SAMPLED, prompt + plain, mode)
    assert out == plain
    assert d.sampler.draws == pd.sampler.draws == len(plain)
    # Identical generator state afterwards: the next draw of either run is the same number.
    assert d.sampler.rng.random() == pd.sampler.rng.random()


def test_2_replay_equivalence_rows_bitwise():
    plain_rows = {}
    prompt, plain, _ = plain_run(PENALIZED, hook=lambda r, pos, h: plain_rows.setdefault(pos, r.copy()))
    spec_rows = {}

    def hook(row, pos, hist):
        spec_rows[pos] = (row.copy(), list(hist))

    out, d = spec_run(PENALIZED, prompt + plain, "partial", hook=hook)
    assert out == plain
    assert set(spec_rows) == set(plain_rows)  # exactly one sampled row per committed position
    for pos, (row, hist) in spec_rows.items():
        assert hist == (prompt + plain)[:pos]  # conditioned on the committed prefix only
        assert np.array_equal(row, plain_rows[pos])


def test_3_penalties_see_the_hypothetical_prefix():
    """Re-sampling the captured rows with stale (step-start) history changes a pick: the test bites."""
    prompt, plain, _ = plain_run(PENALIZED)
    captured, holder = [], {}

    def hook(row, pos, hist):
        captured.append((row.copy(), pos, list(hist), holder["d"].stats.steps))

    m = FakeModel(seed=0)
    d = SpeculativeDecoder(m, ScriptedSource(prompt + plain, m.vocab_size), Sampler(PENALIZED),
                           SpecOptions(verify_all=True), cost_table=CHEAP, row_hook=hook)
    holder["d"] = d
    d.feed(prompt)
    assert list(d.generate(96)) == plain
    full = prompt + plain
    step_start = {}
    for _, _, hist, step in captured:
        step_start.setdefault(step, hist)  # history when the verify began
    s_ok, s_stale = Sampler(PENALIZED), Sampler(PENALIZED)
    changed = 0
    for row, pos, hist, step in captured:
        assert s_ok.sample(row, hist) == full[pos]
        changed += s_stale.sample(row, step_start[step]) != full[pos]
    assert changed >= 1


def test_3b_verify_uses_accepted_tokens_in_history_within_a_batch():
    # Direct check: inside one verify, row i is sampled with history ending in draft[:i].
    seen = []
    prompt, plain, _ = plain_run(PENALIZED, n=40)
    out, d = spec_run(PENALIZED, prompt + plain, "perfect", n=40, hook=lambda r, p, h: seen.append((p, len(h))))
    assert all(p == n for p, n in seen)


def test_4b_exception_in_verify_forward_leaves_committed_cache():
    prompt, plain, _ = plain_run(GREEDY, n=40)
    m = FakeModel(seed=0)
    # Drafts of 16: the first verify commits 17 of the 40 tokens, so later verifies remain to fail.
    d = SpeculativeDecoder(m, ScriptedSource(prompt + plain, m.vocab_size), Sampler(GREEDY),
                           SpecOptions(verify_all=True, policy=SHORT), cost_table=CHEAP)
    d.feed(prompt)
    it = d.generate(40)
    got = [next(it) for _ in range(5)]

    def boom(tokens):
        if len(tokens) > 1:
            raise RuntimeError("engine failure")

    m.before_forward = boom
    with pytest.raises(DecodeError):
        for t in it:  # drains the current batch, then the next verify forward fails
            got.append(t)
    # Cache holds every committed token but the carried one; no unverified row survives.
    assert m.kv_len == len(d.history) - 1 and m.tokens == d.history[:-1]
    assert d.history == prompt + got and got == plain[: len(got)]


def test_4c_exception_in_sampler_mid_verify_rolls_back():
    prompt, plain, _ = plain_run(GREEDY, n=40)
    m = FakeModel(seed=0)
    calls = {"n": 0}

    def hook(row, pos, hist):
        calls["n"] += 1
        if calls["n"] == 12:
            raise KeyboardInterrupt

    d = SpeculativeDecoder(m, ScriptedSource(prompt + plain, m.vocab_size), Sampler(GREEDY),
                           SpecOptions(verify_all=True), cost_table=CHEAP, row_hook=hook)
    d.feed(prompt)
    out = []
    with pytest.raises(KeyboardInterrupt):
        for t in d.generate(40):
            out.append(t)
    assert m.tokens == d.history[:-1] and d.history == prompt + out


@pytest.mark.parametrize("opts", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_stops_end_inside_a_verify_batch(opts):
    prompt, plain, _ = plain_run(opts, n=60)
    stop = plain[20]
    first = plain.index(stop)
    m = FakeModel(seed=0)
    src = ScriptedSource(prompt + plain, m.vocab_size)  # perfect: the stop arrives mid-draft
    d = SpeculativeDecoder(m, src, Sampler(opts), SpecOptions(verify_all=True), cost_table=CHEAP)
    p = PlainDecoder(FakeModel(seed=0), Sampler(opts))
    d.feed(prompt)
    p.feed(prompt)
    a, b = list(d.generate(60, {stop})), list(p.generate(60, {stop}))
    assert a == b == plain[: first + 1]
    assert d.sampler.draws == p.sampler.draws  # no draw past the stop
    assert src.observed == prompt + a  # the source never learns a token after the stop
    assert m.tokens == (prompt + a)[:-1]


def test_token_budget_is_exact_with_long_drafts():
    prompt, plain, pd = plain_run(SAMPLED, n=17)
    out, d = spec_run(SAMPLED, prompt + plain + [1] * 50, "perfect", n=17)
    assert out == plain and d.sampler.draws == 17


class Phased(ScriptedSource):
    """Perfect drafts for ``good`` suggests, then garbage for ``bad``, and so on; a constant,
    uninformative confidence, so the policy can only tell the phases apart by scoring candidates."""

    def __init__(self, *a, good: int = 24, bad: int = 40, **kw) -> None:
        super().__init__(*a, **kw)
        self.good, self.bad = good, bad

    def suggest(self, context, budget):
        self.mode = "perfect" if self._calls % (self.good + self.bad) < self.good else "garbage"
        return super().suggest(context, budget)

    def draft(self, context, budget):
        return Draft(super().draft(context, budget).tokens, confidence=8)


@pytest.mark.parametrize("opts", [GREEDY, SAMPLED, PENALIZED], ids=["greedy", "sampled", "penalized"])
def test_5_policy_orthogonality_across_verify_decline_and_resume(opts):
    """The policy verifies, declines and resumes (candidates keep being scored while declined);
    the committed stream never changes."""
    # 1200 tokens: enough steps for the phases to turn at least twice (each trial is scored as its
    # token commits, so perfect phases are verified from their first steps and pass quickly).
    prompt, plain, _ = plain_run(opts, n=1200)
    m = FakeModel(seed=0)
    src = Phased(prompt + plain, m.vocab_size, "perfect", seed=2)
    costly = CostTable(((2, 1.5), (17, 4.0)), "test: verifies that pay only when drafts are right")
    # Drafts of 16 (not the default 63): phases outlast a few verifies, so some drafts are declined.
    d = SpeculativeDecoder(m, src, Sampler(opts), SpecOptions(policy=dataclasses.replace(SHORT, prior_weight=1.0)),
                           cost_table=costly)
    d.feed(prompt)
    out, kinds, seen = [], [], (0, 0)
    for t in d.generate(1200):
        out.append(t)
        now = (d.stats.steps, d.stats.verifies)
        if now[0] != seen[0]:
            kinds.append("v" if now[1] != seen[1] else "p")
            seen = now
    assert out == plain
    p = d.policy
    assert p.chosen >= 5 and p.declined >= 5 and d.stats.verifies == p.chosen, str(p)
    assert 0 < d.stats.accepted < d.stats.drafted  # garbage was verified too, and learned from
    # Verifies resumed after runs of declined (plain) steps: the policy came back without a probe.
    assert "".join(kinds).count("pppv") >= 2, "".join(kinds)
    hits, trials = p.learned()["draft" + p.kind_suffix]["m8-11"]  # a sampled generation learns apart
    assert trials > 50 and 0.2 < hits / trials < 0.95, (hits, trials)


def test_refuses_non_rewindable_models():
    with pytest.raises(NotRewindable, match="cannot be rewound"):
        SpeculativeDecoder(FakeModel(rewindable=False), ScriptedSource([], 320), Sampler(GREEDY), cost_table=CHEAP)
    # Plain decoding still works on it.
    m = FakeModel(rewindable=False)
    p = PlainDecoder(m, Sampler(GREEDY))
    p.feed(m.tokenize("abc"))
    assert len(list(p.generate(5))) == 5


def test_topk_rows_only_for_committed_inputs():
    prompt, plain, _ = plain_run(GREEDY, n=50)

    class Spy(ScriptedSource):
        wants_topk = True

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.pairs = []

        def observe_topk(self, inputs, topk):
            assert topk.shape == (len(inputs), 8)
            self.pairs.extend(inputs)

    m = FakeModel(seed=0)
    src = Spy(prompt + plain, m.vocab_size, "partial", seed=1)
    d = SpeculativeDecoder(m, src, Sampler(GREEDY), SpecOptions(verify_all=True), cost_table=CHEAP)
    d.feed(prompt)
    out = list(d.generate(50))
    assert out == plain
    # Every row handed over had a committed input: the inputs are exactly the committed stream.
    assert src.pairs == (prompt + plain)[len(prompt) - 1 : len(prompt) + len(plain) - 1]


def test_options_validation():
    with pytest.raises(InvalidOption):
        SpecOptions(topk=0)
    with pytest.raises(InvalidOption):
        SpecOptions(policy="fast")


class FailingSource(ScriptedSource):
    """A scripted source whose ``method`` raises on its ``after``-th call (a corrupt index, a bug)."""

    def __init__(self, *args, method: str, after: int, exc: BaseException | None = None, **kw):
        super().__init__(*args, **kw)
        self.method, self.after, self.exc = method, after, exc or RuntimeError("index corrupted")
        self.calls = 0
        self.wants_topk = method == "observe_topk"

    def _tick(self, name: str) -> None:
        if name == self.method:
            self.calls += 1
            if self.calls >= self.after:
                raise self.exc

    def draft(self, context, budget):
        self._tick("draft")
        return Draft(super().draft(context, budget).tokens, confidence=8)

    def observe(self, committed):
        self._tick("observe")
        super().observe(committed)

    def observe_topk(self, inputs, topk):
        self._tick("observe_topk")
        super().observe_topk(inputs, topk)


@pytest.mark.source_fault_expected
@pytest.mark.parametrize("opts", [GREEDY, SAMPLED, PENALIZED], ids=["greedy", "sampled", "penalized"])
@pytest.mark.parametrize("method", ["draft", "observe", "observe_topk"])
def test_6_a_source_that_raises_mid_generation_is_dropped_and_the_stream_is_plain(opts, method):
    prompt, plain, _ = plain_run(opts)
    m = FakeModel(seed=0)
    # observe is called once by feed(): let the fault come later, after some verifies succeeded.
    src = FailingSource(prompt + plain, m.vocab_size, "perfect", seed=5, method=method, after=4)
    # Drafts of 16: the stream takes enough steps for the fault to come mid-way.
    d = SpeculativeDecoder(m, src, Sampler(opts), SpecOptions(verify_all=True, policy=SHORT), cost_table=CHEAP)
    d.feed(m.tokenize("the cat sat on the mat. the cat sat on the "))
    out = list(d.generate(96))
    assert out == plain
    assert d.stats.source_fault == "RuntimeError: index corrupted"
    assert d.stats.verifies >= 1 and d.stats.plain_steps > 0  # it speculated, then went on plainly
    calls = src.calls
    assert calls == 4  # never consulted again after the fault


def test_6b_interrupts_are_not_swallowed():
    m = FakeModel(seed=0)
    src = FailingSource([], m.vocab_size, "perfect", method="draft", after=1, exc=KeyboardInterrupt())
    d = SpeculativeDecoder(m, src, Sampler(GREEDY), SpecOptions(verify_all=True), cost_table=CHEAP)
    d.feed(prompt_of(m))
    with pytest.raises(KeyboardInterrupt):
        list(d.generate(8))
