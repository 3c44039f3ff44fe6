"""fucina.LLM: complete / chat / stream / stop strings / references, plain and speculative.

On the fake backend (batch-invariant, so *exact*: speculative must equal plain token for token).
Every speculative comparison also checks that drafts were verified, so a broken decoder cannot pass
by never speculating.
"""

from __future__ import annotations

import pytest

import fucina
from fucina import LLM
from fucina.backends.fake import FakeModel
from fucina.errors import (ChatTemplateMissing, ContextLengthExceeded, EmptyReference, InvalidOption,
                           TooManyReferences)
from fucina.sampling import SamplerOptions
from fucina.speculative.costs import CostTable

#: Cheap verifies, so the gate keeps speculating on the fake backend (no calibration runs).
FLAT = CostTable(((2, 1.05), (4, 1.1), (8, 1.2), (16, 1.4), (32, 1.8)), "flat test table")
REPETITIVE = "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat"
SAMPLED = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)


def make_llm(**kw) -> LLM:
    model = FakeModel(seed=kw.pop("seed", 0), chat=kw.pop("chat", True), context_length=kw.pop("ctx", 4096))
    return LLM(model, cost_table=FLAT, name="fake", **kw)


@pytest.fixture
def llm():
    return make_llm()


def both(llm: LLM, call: str, arg, **kw):
    """(speculative, plain) results of the same call."""
    f = getattr(llm, call)
    return f(arg, speculative=True, **kw), f(arg, speculative=False, **kw)


# -- losslessness through the API ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("model_seed", [0, 3])  # 0 copies its prompt (long accepts), 3 mostly does not
def test_complete_speculative_equals_plain(mode, seed, model_seed):
    llm = make_llm(seed=model_seed)
    kw = dict(temperature=0) if mode == "greedy" else dict(SAMPLED, seed=seed)
    spec, plain = both(llm, "complete", REPETITIVE, max_tokens=80, **kw)
    assert spec.token_ids == plain.token_ids and spec.text == plain.text
    assert spec.finish_reason == plain.finish_reason and spec.usage.completion_tokens == plain.usage.completion_tokens
    assert spec.stats is not None and spec.stats.drafted > 0 and plain.stats is None
    assert spec.stats.level == "exact"


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_stop_strings_cut_speculative_text_where_plain_cuts_it(llm, mode):
    kw = dict(temperature=0) if mode == "greedy" else dict(SAMPLED, seed=7)
    full = llm.complete(REPETITIVE, max_tokens=80, speculative=False, **kw)
    checked = 0
    for start in (5, 17, 30, 44):  # stop strings met at several points, inside verify batches too
        stop = full.text[start:start + 3]
        if len(stop) < 3:
            continue
        spec, plain = both(llm, "complete", REPETITIVE, max_tokens=80, stop=[stop, "never-there"], **kw)
        assert spec.text == plain.text == full.text[: full.text.find(stop)]
        assert spec.finish_reason == plain.finish_reason == "stop"
        assert spec.token_ids == plain.token_ids
        assert spec.usage.completion_tokens == plain.usage.completion_tokens == len(spec.token_ids)
        assert spec.stats.drafted > 0
        checked += 1
    assert checked >= 3


def test_a_verify_batch_running_past_the_stop_string_is_not_shown():
    # Greedy on the fake model copies the prompt: whole drafts are accepted, so the token completing
    # the stop string sits in the middle of a verify batch and more tokens are committed after it.
    llm = make_llm()
    spec = llm.complete(REPETITIVE, max_tokens=60, temperature=0, stop="t. the c")
    plain = llm.complete(REPETITIVE, max_tokens=60, temperature=0, stop="t. the c", speculative=False)
    assert spec.text == plain.text == ". the ca"
    assert spec.stats.committed > len(spec.token_ids)  # the decoder did run past the stop
    assert spec.usage.completion_tokens == len(spec.token_ids) == len(plain.token_ids)


@pytest.mark.parametrize("speculative", [True, False])
def test_stream_joins_to_the_completion(llm, speculative):
    kw = dict(SAMPLED, seed=5, max_tokens=64, speculative=speculative, stop="sat on")
    whole = llm.complete(REPETITIVE, **kw)
    chunks = list(llm.complete(REPETITIVE, stream=True, **kw))
    assert "".join(c.text for c in chunks) == whole.text
    assert tuple(t for c in chunks for t in c.token_ids) == whole.token_ids
    assert all(c.finish_reason is None and c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == whole.finish_reason
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (whole.usage.prompt_tokens,
                                                                        whole.usage.completion_tokens)


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_chat_speculative_equals_plain(llm, mode):
    kw = dict(temperature=0) if mode == "greedy" else dict(SAMPLED, seed=11)
    msgs = [{"role": "system", "content": "copy"}, {"role": "user", "content": REPETITIVE}]
    spec, plain = both(llm, "chat", msgs, max_tokens=64, **kw)
    assert spec.text == plain.text and spec.token_ids == plain.token_ids
    assert spec.stats.drafted > 0
    streamed = "".join(c.text for c in llm.chat(msgs, max_tokens=64, stream=True, **kw))
    assert streamed == spec.text


def test_chat_content_parts_render_like_strings(llm):
    a = llm.chat([{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}],
                 max_tokens=8, temperature=0)
    b = llm.chat([{"role": "user", "content": "abc"}], max_tokens=8, temperature=0)
    assert a.text == b.text and a.usage.prompt_tokens == b.usage.prompt_tokens


def test_references_draft_and_stay_lossless():
    llm = make_llm(seed=3)  # a model that does not copy its prompt: only the reference can draft
    prompt = "Recite: Quantum harmonic oscillators"
    plain = llm.complete(prompt, max_tokens=60, temperature=0, speculative=False)
    # The document the answer is drawn from: the prompt's tail, then the answer itself.
    doc = list(llm.tokenize(prompt, add_bos=False)[-12:]) + list(plain.token_ids)
    spec = llm.complete(prompt, max_tokens=60, temperature=0, references=[doc, "an unrelated note"])
    assert spec.text == plain.text and spec.token_ids == plain.token_ids
    assert spec.stats.source("ref0").accepted > 20
    assert spec.stats.source("ref1").drafted == 0


def test_sampled_calls_without_seed_draw_fresh_seeds(llm):
    texts = {llm.complete("x", max_tokens=24, **SAMPLED).text for _ in range(4)}
    assert len(texts) > 1


# -- prefix reuse ----------------------------------------------------------------------------------


def test_a_shared_prefix_is_not_evaluated_again_and_changes_nothing():
    llm = make_llm()
    first = llm.complete(REPETITIVE, max_tokens=20, temperature=0)
    follow = REPETITIVE + first.text + " and then"
    again = llm.complete(follow, max_tokens=40, temperature=0)
    assert first.usage.cached_tokens == 0
    assert again.usage.cached_tokens >= len(llm.tokenize(REPETITIVE)) - 1
    cold = make_llm().complete(follow, max_tokens=40, temperature=0)
    assert again.text == cold.text and again.usage.prompt_tokens == cold.usage.prompt_tokens


def test_closing_a_stream_early_leaves_the_cache_consistent():
    llm = make_llm()
    stream = llm.complete(REPETITIVE, max_tokens=60, temperature=0, stream=True)
    next(stream)
    stream.close()
    after = llm.complete(REPETITIVE + " on", max_tokens=30, temperature=0)
    assert after.text == make_llm().complete(REPETITIVE + " on", max_tokens=30, temperature=0).text


def test_a_new_call_closes_an_unfinished_stream_of_the_same_thread():
    llm = make_llm()
    stream = llm.complete(REPETITIVE, max_tokens=60, temperature=0, stream=True)
    next(stream)
    r = llm.complete("abc", max_tokens=5, temperature=0)  # would deadlock if the stream kept the lock
    assert r.usage.prompt_tokens == 4
    assert list(stream) == []  # the old stream was closed


# -- bad input: named errors before any work --------------------------------------------------------


@pytest.mark.parametrize("kw, param", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=2.5), "max_tokens"),
    (dict(top_p=1.5), "top_p"),
    (dict(min_p=-0.1), "min_p"),
    (dict(top_k=-1), "top_k"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(repeat_penalty=0.0), "repeat_penalty"),
    (dict(seed=-3), "seed"),
    (dict(stop=[""]), "stop"),
    (dict(stop=[3]), "stop"),
    (dict(stop_token_ids=[10**9]), "stop_token_ids"),
    (dict(references="not a list"), "references"),
    (dict(references=[""]), "references"),
    (dict(references=["d"] * 9), "references"),
    (dict(references=["doc"], speculative=False), "references"),
    (dict(speculative="yes"), "speculative"),
])
def test_bad_arguments_raise_named_errors_before_any_forward(kw, param):
    llm = make_llm()
    before = llm.model.forward_calls
    with pytest.raises(fucina.FucinaError) as info:
        llm.complete("hello", **kw)
    assert info.value.param == param
    assert isinstance(info.value, (InvalidOption, TooManyReferences, EmptyReference, ValueError))
    assert llm.model.forward_calls == before


def test_too_many_references_and_empty_ones_have_their_own_names():
    llm = make_llm()
    with pytest.raises(TooManyReferences):
        llm.complete("x", references=["d"] * 9)
    with pytest.raises(EmptyReference):
        llm.complete("x", references=[[]])


def test_prompt_plus_max_tokens_beyond_the_context_is_refused_up_front():
    llm = make_llm(ctx=64)
    before = llm.model.forward_calls
    with pytest.raises(ContextLengthExceeded) as info:
        llm.complete("a" * 40, max_tokens=30)
    assert info.value.param == "max_tokens" and llm.model.forward_calls == before
    with pytest.raises(ContextLengthExceeded) as info:
        llm.complete("a" * 80, max_tokens=1)
    assert info.value.param == "prompt"
    r = llm.complete("a" * 40, max_tokens=None, temperature=0, speculative=False)  # None: up to the context
    assert r.finish_reason in ("stop", "length") and r.usage.total_tokens <= 64


def test_chat_without_a_template_is_a_named_error():
    llm = make_llm(chat=False)
    with pytest.raises(ChatTemplateMissing) as info:
        llm.chat([{"role": "user", "content": "hi"}])
    assert info.value.param == "messages"
    assert llm.complete("hi", max_tokens=2).usage.prompt_tokens == 3  # completions still work


@pytest.mark.parametrize("messages", [[], "hi", [{"role": "robot", "content": "x"}], [{"role": "user"}],
                                      [{"role": "user", "content": [{"type": "image_url"}]}], ["hi"]])
def test_malformed_messages_are_refused(llm, messages):
    with pytest.raises(InvalidOption) as info:
        llm.chat(messages)
    assert info.value.param == "messages"


def test_constructor_errors_are_named():
    with pytest.raises(fucina.FucinaError):
        LLM("no-such-model-anywhere")
    with pytest.raises(InvalidOption):
        LLM(FakeModel(), speculative="sometimes", cost_table=FLAT)


def test_plain_llm_never_measures_costs(monkeypatch):
    import fucina.calibrate as calibrate

    monkeypatch.setattr(calibrate, "load_or_calibrate", lambda *a, **k: pytest.fail("calibrated"))
    llm = LLM(FakeModel(seed=1), speculative=False)
    assert llm.complete("abc", max_tokens=4, temperature=0).stats is None


def test_conversation_from_the_llm_owns_the_cache():
    llm = make_llm()
    conv = llm.conversation(max_tokens=16, sampler=SamplerOptions())
    reply = conv.reply("hello")
    assert isinstance(reply, str) and conv.speculative
    # The conversation moved the cache; the next LLM call starts from scratch and is still right.
    r = llm.complete(REPETITIVE, max_tokens=20, temperature=0)
    assert r.usage.cached_tokens == 0
    assert r.text == make_llm().complete(REPETITIVE, max_tokens=20, temperature=0).text


def test_help_documents_the_api():
    import pydoc

    text = pydoc.render_doc(fucina.LLM, renderer=pydoc.plaintext)
    for word in ("complete", "chat", "max_tokens", "stop", "references", "speculative", "stream"):
        assert word in text


# -- the real models ----------------------------------------------------------------------------


@pytest.mark.real_model
def test_readme_example_on_the_instruct_model():
    llm = LLM("smollm2-135m", n_ctx=1024, progress=False)
    r = llm.complete("def add(a, b):", max_tokens=24, temperature=0)
    assert r.finish_reason in ("stop", "length") and r.usage.completion_tokens == len(r.token_ids) > 0
    assert r.stats is not None and r.stats.level in ("exact", "distribution")
    chunks = list(llm.chat([{"role": "user", "content": "Hi"}], max_tokens=24, stream=True, seed=1))
    assert "".join(c.text for c in chunks).strip() and chunks[-1].finish_reason in ("stop", "length")
    llm.close()


@pytest.mark.real_model
def test_gemma_base_model_has_no_chat_template_but_completes():
    llm = LLM("gemma3-270m", n_ctx=512, speculative=False)
    with pytest.raises(ChatTemplateMissing):
        llm.chat([{"role": "user", "content": "Hi"}])
    assert llm.complete("The capital of France is", max_tokens=4, temperature=0).usage.completion_tokens == 4
    llm.close()


# -- cross-request indexes (issue 14) ------------------------------------------------------------------

def test_cross_request_drafts_from_earlier_calls_records_finished_ones_and_changes_nothing():
    from fucina.speculative.decoder import SpecOptions
    from fucina.speculative.crossreq import CrossRequestIndex

    secret = "qz7 vek9 plum3 rork8 nib2 sowt5 kelm1 drab4 yust6 fenw0 gosh7 lirt3 " * 2
    half = secret[: len(secret) // 2]
    llm = make_llm(spec_options=SpecOptions(verify_all=True))
    store = CrossRequestIndex(4096)
    first = llm.complete(secret, max_tokens=16, temperature=0, cross_request=store)
    assert store.n_documents == 1 and store.n_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    r = llm.complete(half, max_tokens=16, temperature=0, cross_request=store)
    cross = {s.name: s for s in r.stats.sources}["cross-request"]
    assert cross.drafted > 0 and store.n_documents == 2
    assert r.text == llm.complete(half, max_tokens=16, temperature=0, speculative=False).text
    # An interrupted stream is not recorded: only finished calls are what later calls repeat.
    stream = llm.complete(half, max_tokens=16, temperature=0, cross_request=store, stream=True)
    next(stream)
    stream.close()
    assert store.n_documents == 2


def test_cross_request_must_be_a_store():
    with pytest.raises(InvalidOption) as e:
        make_llm().complete("x", cross_request={"not": "a store"})
    assert e.value.param == "cross_request"


def test_calls_share_what_the_drafting_policy_learned():
    llm = make_llm()
    llm.complete("abcabcabcabc abcabc", max_tokens=16, temperature=0)
    model = llm._decoders.acceptance
    scored = sum(n for d in model.learned().values() for _, n in d.values())
    llm.complete("abcabcabcabc abcabc", max_tokens=16, temperature=0)
    assert llm._decoders.acceptance is model and scored > 0
    assert sum(n for d in model.learned().values() for _, n in d.values()) > scored


def test_a_conversation_learns_in_the_llms_acceptance_model():
    from fucina.speculative.decoder import SpecOptions

    llm = make_llm()
    llm.complete("abcabcabcabc abcabc", max_tokens=16, temperature=0)
    shared = llm._decoders.acceptance
    conv = llm.conversation(max_tokens=16, sampler=SamplerOptions())
    assert conv.decoder.policy.model is shared
    conv.reply("abcabc abcabc")
    conv.reset()
    assert conv.decoder.policy.model is shared  # as the LLM's calls keep it, across resets too
    # Other decoder options: the conversation learns apart, from the priors.
    own = llm.conversation(max_tokens=16, spec_options=SpecOptions())
    assert own.decoder.policy.model is not shared


def test_the_context_is_the_models_by_default_and_leaves_room_for_the_prefix_snapshots(monkeypatch):
    import fucina.catalog
    from fucina.context_size import ContextChoice
    from fucina.prefix_cache import DEFAULT_MAX_BYTES

    seen = []

    def load(model, **options):
        seen.append(options)
        return FakeModel(context_length=options["n_ctx"] or 8192)

    monkeypatch.setattr(fucina.catalog, "load_model", load)
    llm = LLM("some-model", speculative=False, progress=False)
    assert seen[-1]["n_ctx"] is None and seen[-1]["reserve_bytes"] == DEFAULT_MAX_BYTES
    assert llm.prefix_cache.max_bytes == DEFAULT_MAX_BYTES
    LLM("some-model", speculative=False, progress=False, prefix_cache_bytes=2**20)
    assert seen[-1]["reserve_bytes"] == 2**20  # a smaller budget leaves a default context more room
    assert llm.context_length == 8192
    LLM("some-model", n_ctx=2048, speculative=False, progress=False)
    assert seen[-1]["n_ctx"] == 2048 and seen[-1]["reserve_bytes"] == 0  # a named size is used as given
    c = make_llm(ctx=1024).context_choice  # a model object: its own context, as its maker asked
    assert (c.n_ctx, c.reason) == (1024, "requested")
    # Where memory is short the context's choice sets aside less, and the snapshots keep to that.
    granted = ContextChoice(8192, "memory", 32768, reserve_bytes=5 * 2**20)
    monkeypatch.setattr(fucina.catalog, "load_model",
                        lambda model, **options: setattr(m := FakeModel(context_length=8192), "context_choice", granted) or m)
    assert LLM("some-model", speculative=False, progress=False).prefix_cache.max_bytes == 5 * 2**20
    assert LLM("some-model", n_ctx=8192, speculative=False, progress=False).prefix_cache.max_bytes == DEFAULT_MAX_BYTES
    loaded = fucina.catalog.load_model("some-model")  # a model the caller loaded: its choice set nothing aside for us
    assert LLM(loaded, speculative=False, progress=False).prefix_cache.max_bytes == DEFAULT_MAX_BYTES


def test_context_length_exceeded_carries_the_numbers():
    llm = make_llm(ctx=64)
    with pytest.raises(ContextLengthExceeded) as exc:
        llm.complete("hello", max_tokens=100)
    assert (exc.value.n_ctx, exc.value.prompt_tokens, exc.value.max_tokens, exc.value.param) == (64, 6, 100, "max_tokens")
    with pytest.raises(ContextLengthExceeded) as exc:
        llm.complete("x" * 80, max_tokens=None)
    assert (exc.value.n_ctx, exc.value.prompt_tokens, exc.value.max_tokens, exc.value.param) == (64, 81, None, "prompt")


def test_the_quick_calibration_ends_by_naming_the_steadier_command(capsys):
    LLM._print_progress(1, 2)
    assert "calibrate MODEL" not in capsys.readouterr().err
    LLM._print_progress(2, 2)
    err = capsys.readouterr().err
    assert "2/2" in err and "`fucina calibrate MODEL` measures a steadier one" in err
