"""Constrained decoding (fucina.grammar): every output matches its grammar, and speculation under a
grammar commits exactly what plain constrained decoding commits — greedy, sampled and penalized,
with perfect, garbage, alternating and partial drafts, through the decoders and through the API."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from fucina import LLM
from fucina.backends.fake import FakeModel
from fucina.errors import GrammarViolation, InvalidGrammar, InvalidOption
from fucina.grammar import ConstrainedSampler, Grammar, GrammarState
from fucina.plain import PlainDecoder
from fucina.sampling import Sampler, SamplerOptions
from fucina.speculative.costs import CostTable
from fucina.speculative.decoder import SpecOptions, SpeculativeDecoder
from fucina.speculative.grammar_drafts import GrammarDrafts
from fucina.speculative.scripted import ScriptedSource
from tests.grammar_schemas import SCHEMAS

GREEDY = SamplerOptions()
SAMPLED = SamplerOptions(temperature=0.8, top_k=20, seed=7)
PENALIZED = SamplerOptions(temperature=0.8, top_k=20, repeat_penalty=1.3, frequency_penalty=0.4, seed=11)
CHEAP = CostTable(((2, 1.0), (32, 1.0)), "test: free verifies")
PROMPT = "a record: "
EXTRACT = SCHEMAS["extraction"]


def text_of(model, tokens):
    return model.detokenize([t for t in tokens if t not in model.eos_ids])


def plain_constrained(grammar, opts, n=300, seed=0):
    m = FakeModel(seed=seed)
    d = PlainDecoder(m, ConstrainedSampler(opts, GrammarState(grammar, m)))
    prompt = m.tokenize(PROMPT)
    d.feed(prompt)
    return m, prompt, list(d.generate(n, m.eos_ids))


def spec_constrained(grammar, opts, stream, mode, n=300, seed=0, forced=True):
    m = FakeModel(seed=seed)
    sampler = ConstrainedSampler(opts, GrammarState(grammar, m))
    src = ScriptedSource(stream, m.vocab_size, mode, seed=5)
    source = GrammarDrafts(src, sampler.state.forced) if forced else src
    d = SpeculativeDecoder(m, source, sampler, SpecOptions(verify_all=True), cost_table=CHEAP)
    d.feed(m.tokenize(PROMPT))
    return list(d.generate(n, m.eos_ids)), d


def check_valid(schema, text):
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())


# -- every output parses and validates --------------------------------------------------------------

@pytest.mark.parametrize("opts", [GREEDY, SAMPLED], ids=["t0", "t0.8"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_twenty_schemas_parse_validate_and_equal_with_speculation(name, opts):
    schema = SCHEMAS[name]
    g = Grammar.json_schema(schema)
    m, prompt, plain = plain_constrained(g, opts)
    assert plain[-1] in m.eos_ids, "the grammar closed and the end token followed"
    check_valid(schema, text_of(m, plain))
    out, d = spec_constrained(g, opts, prompt + plain, "alternating")
    assert out == plain


def test_unconstrained_fake_output_is_not_json():
    # The property above is the grammar's doing: without it this model writes no JSON at all.
    m = FakeModel(seed=0)
    d = PlainDecoder(m, Sampler(GREEDY))
    d.feed(m.tokenize(PROMPT))
    with pytest.raises(ValueError):
        json.loads(text_of(m, list(d.generate(60, m.eos_ids))))


# -- losslessness under a grammar -------------------------------------------------------------------

@pytest.mark.parametrize("opts", [GREEDY, SAMPLED, PENALIZED], ids=["greedy", "sampled", "penalized"])
@pytest.mark.parametrize("mode", ["perfect", "garbage", "alternating", "partial"])
@pytest.mark.parametrize("forced", [True, False], ids=["grammar-drafts", "no-grammar-drafts"])
def test_speculative_constrained_equals_plain_constrained(opts, mode, forced):
    g = Grammar.json_schema(EXTRACT)
    m, prompt, plain = plain_constrained(g, opts)
    out, d = spec_constrained(g, opts, prompt + plain, mode, forced=forced)
    assert out == plain
    assert d.stats.verifies > 0 and d.stats.committed == len(plain)
    if mode == "perfect":
        assert d.stats.accepted > 0.8 * d.stats.drafted


def test_garbage_drafts_are_rejected_by_the_mask_not_by_luck():
    # A garbage draft is almost never grammatical: the masked rows reject it on the first token.
    g = Grammar.json_schema(EXTRACT)
    m, prompt, plain = plain_constrained(g, GREEDY)
    out, d = spec_constrained(g, GREEDY, prompt + plain, "garbage", forced=False)
    assert out == plain and d.stats.accepted <= 0.05 * d.stats.drafted + 1


class UnmaskedVerify(SpeculativeDecoder):
    """Mutant: samples verified rows without the grammar's mask (the bug the mask exists to prevent)."""

    def _verify(self, draft, left, stops):
        state = self.sampler.state
        state.allowed = lambda: np.ones(state.vocab_size, dtype=bool)
        try:
            return super()._verify(draft, left, stops)
        finally:
            del state.allowed


@pytest.mark.parametrize("opts", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_a_decoder_that_skips_the_mask_on_verified_rows_breaks_the_stream(opts):
    g = Grammar.json_schema(EXTRACT)
    m, prompt, plain = plain_constrained(g, opts)
    model = FakeModel(seed=0)
    sampler = ConstrainedSampler(opts, GrammarState(g, model))
    d = UnmaskedVerify(model, ScriptedSource(prompt + plain, model.vocab_size, "garbage", seed=5), sampler,
                       SpecOptions(verify_all=True), cost_table=CHEAP)
    d.feed(prompt)
    try:
        out = list(d.generate(300, model.eos_ids))
    except GrammarViolation:
        return  # the unmasked row picked a token the grammar refuses
    assert out != plain


def test_grammar_forced_drafts_are_offered_and_accepted():
    g = Grammar.json_schema(EXTRACT)
    m, prompt, plain = plain_constrained(g, GREEDY)
    out, d = spec_constrained(g, GREEDY, prompt + plain, "garbage", forced=True)
    assert out == plain
    grammar = d.source.stats()["grammar"]
    # The keys and punctuation of the schema are forced: most of them are drafted and accepted.
    assert grammar.drafted >= 20 and grammar.accepted >= 0.9 * grammar.drafted


def test_verify_failure_rolls_the_grammar_back():
    g = Grammar.json_schema(EXTRACT)
    m, prompt, plain = plain_constrained(g, GREEDY, n=60)
    model = FakeModel(seed=0)
    sampler = ConstrainedSampler(GREEDY, GrammarState(g, model))
    calls = {"n": 0}

    def hook(row, pos, hist):
        calls["n"] += 1
        if calls["n"] == 9:
            raise RuntimeError("boom")

    d = SpeculativeDecoder(model, ScriptedSource(prompt + plain, model.vocab_size), sampler,
                           SpecOptions(verify_all=True), cost_table=CHEAP, row_hook=hook)
    d.feed(prompt)
    out = []
    with pytest.raises(RuntimeError):
        for t in d.generate(60, model.eos_ids):
            out.append(t)
    assert sampler.state.consumed > len(out)  # rows of the failed verify were sampled...
    d.row_hook = None
    out.extend(d.generate(60 - len(out), model.eos_ids))  # ...and rolled back on the next sample
    assert out == plain[:60]


def test_history_that_grows_behind_the_samplers_back_is_refused():
    m = FakeModel()
    s = ConstrainedSampler(GREEDY, GrammarState(Grammar.json_object(), m))
    row = np.zeros(m.vocab_size, dtype=np.float32)
    s.sample(row, [1, 2, 3])
    with pytest.raises(GrammarViolation):
        s.sample(row, [1, 2, 3, 4, 5, 6])


# -- through the API --------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_api_grammar_speculative_equals_plain(temperature):
    llm = LLM(FakeModel(seed=3), cost_table=CHEAP, progress=False)
    g = Grammar.json_schema(SCHEMAS["nested"])
    kw = dict(max_tokens=200, temperature=temperature, seed=5, grammar=g)
    spec = llm.complete(PROMPT, speculative=True, **kw)
    plain = llm.complete(PROMPT, speculative=False, **kw)
    assert spec.token_ids == plain.token_ids and spec.finish_reason == "stop"
    check_valid(SCHEMAS["nested"], spec.text)
    assert any(s.name == "grammar" for s in spec.stats.sources)


def test_api_refuses_a_non_grammar():
    llm = LLM(FakeModel(), cost_table=CHEAP, progress=False)
    with pytest.raises(InvalidOption) as e:
        llm.complete(PROMPT, grammar='{"type": "object"}')
    assert e.value.param == "grammar"


# -- building grammars ------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [
    lambda: Grammar.json_schema({"type": "foo"}),
    lambda: Grammar.json_schema("{not json"),
    lambda: Grammar.json_schema([1, 2]),
    lambda: Grammar.regex("(unclosed"),
    lambda: Grammar.lark("start: undefined_rule"),
])
def test_invalid_grammars_are_named_errors(build):
    with pytest.raises(InvalidGrammar):
        build()


def test_invalid_grammar_names_the_given_param():
    with pytest.raises(InvalidGrammar) as e:
        Grammar.json_schema({"type": "foo"}, param="response_format.json_schema")
    assert e.value.param == "response_format.json_schema" and "foo" in str(e.value)


def test_regex_and_lark_constrain_the_output():
    m = FakeModel(seed=1)
    for g, check in [(Grammar.regex(r"[0-9]{3}-[a-z]{2}"), lambda s: len(s) == 6 and s[3] == "-"),
                     (Grammar.lark('start: "yes" | "no"'), lambda s: s in ("yes", "no"))]:
        d = PlainDecoder(m, ConstrainedSampler(SAMPLED, GrammarState(g, m)))
        m.reset()
        d.feed(m.tokenize(PROMPT))
        assert check(text_of(m, list(d.generate(40, m.eos_ids))))


def test_json_layout_is_fixed_so_keys_are_forced():
    m = FakeModel()
    st = GrammarState(Grammar.json_schema(SCHEMAS["flat"]), m)
    assert bytes(st.forced()) == b'{"name": "'
