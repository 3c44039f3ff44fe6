"""The llama.cpp backend on the real embedded model."""

import numpy as np
import pytest

from fucina.backends.llama_cpp import LlamaOptions, LlamaVocab
from fucina.catalog import load_tokenizer
from fucina.errors import ContextOverflow, InvalidOption, ModelLoadError, ModelNotFound
from fucina.model_protocol import Model
from fucina.catalog import resolve_model

pytestmark = pytest.mark.real_model


def _greedy(model, prompt, n):
    model.reset()
    row = model.forward_step(prompt)
    out = []
    for _ in range(n):
        t = int(np.argmax(row))
        out.append(t)
        row = model.forward_step([t])
    return out


def test_is_a_model(gemma):
    assert isinstance(gemma, Model)
    assert gemma.vocab_size == 262144 and gemma.rewindable


def test_greedy_32_tokens_deterministic_across_runs(gemma, fresh):
    fresh(gemma)
    prompt = gemma.tokenize("The capital of France is")
    a = _greedy(gemma, prompt, 32)
    b = _greedy(gemma, prompt, 32)
    assert a == b and len(set(a)) > 3


def test_truncate_reappend_reproduces_fresh_logits(gemma, fresh):
    # Same batch shapes on both sides, so the engine's numerics are identical: observed |diff| = 0.
    fresh(gemma)
    prompt = gemma.tokenize("Once upon a time, in a small village,")
    draft = gemma.tokenize(" there lived an old", add_bos=False)
    gemma.forward_step(prompt)
    n = gemma.kv_len
    gemma.forward_step_all_logits([7, 8, 9, 10, 11])  # rejected rows
    gemma.truncate(n)
    after = np.array(gemma.forward_step_all_logits(draft), copy=True)
    gemma.reset()
    gemma.forward_step(prompt)
    fresh_rows = np.array(gemma.forward_step_all_logits(draft), copy=True)
    assert np.max(np.abs(after - fresh_rows)) == 0.0


def test_all_logits_shape_and_last_row(gemma, fresh):
    fresh(gemma)
    toks = gemma.tokenize("one two three four")
    rows = np.array(gemma.forward_step_all_logits(toks), copy=True)
    assert rows.shape == (len(toks), gemma.vocab_size) and np.isfinite(rows).all()
    assert gemma.kv_len == len(toks)


def test_error_paths_keep_cache_consistent(gemma, fresh):
    fresh(gemma)
    gemma.forward_step(gemma.tokenize("hello"))
    n = gemma.kv_len
    with pytest.raises(InvalidOption):
        gemma.forward_step_all_logits([5, 6, gemma.vocab_size + 3])  # bad id mid-batch
    assert gemma.kv_len == n
    with pytest.raises(ContextOverflow):
        gemma.forward_step([5] * (gemma.context_length - n + 1))
    assert gemma.kv_len == n
    # The cache still works: a step after the failures equals a step on a clean cache.
    a = np.array(gemma.forward_step([42]), copy=True)
    gemma.reset()
    gemma.forward_step(gemma.tokenize("hello"))
    assert np.array_equal(a, gemma.forward_step([42]))


def test_vocab_only_tokenizer_matches_full_model(gemma):
    vocab = load_tokenizer("gemma3-270m")
    text = "Speculative decoding — lossless, naïve? 123"
    assert vocab.tokenize(text) == gemma.tokenize(text)
    assert vocab.detokenize(vocab.tokenize(text, add_bos=False)) == text


def test_utf8_streaming_pieces(gemma):
    from fucina.text import TextStreamer

    ids = gemma.tokenize("日本語のテキスト 🙂", add_bos=False)
    s = TextStreamer(gemma)
    assert "".join(s.push(t) for t in ids) + s.flush() == "日本語のテキスト 🙂"


def test_resolution_errors(tmp_path):
    with pytest.raises(ModelNotFound):
        resolve_model("no-such-model")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(ModelLoadError):
        LlamaVocab(bad)
    with pytest.raises(InvalidOption):
        LlamaOptions(n_batch=0)


PREFILL_TEXT = ("def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
                "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n"
                "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n") * 3


@pytest.mark.parametrize("name", ["gemma", "smollm"])
def test_a_prompt_prefilled_whole_in_parts_or_token_by_token_gives_the_same_rows(name, request, fresh):
    """Prefix-cache reuse splits prefills anywhere: on the exact engine every split gives the same bits
    (Gemma's Q4_K/Q6_K and SmolLM2's Q4_1 take the column-group kernels for every batch size)."""
    from fucina.engine_selection import exact_by_default

    if not exact_by_default():
        pytest.skip("the stock engine's batched kernels round differently (distribution level)")
    model = fresh(request.getfixturevalue(name))
    prompt = model.tokenize(PREFILL_TEXT)
    assert 100 < len(prompt) <= 512

    def rows(parts) -> np.ndarray:
        model.reset()
        return np.concatenate([np.array(model.forward_step_all_logits(p), copy=True) for p in parts])

    whole = rows([prompt])
    cut = len(prompt) // 3
    for parts in ([prompt[:cut], prompt[cut:]], [prompt[:7], prompt[7:cut], prompt[cut:]],
                  [[t] for t in prompt[:40]] + [prompt[40:]]):
        assert rows(parts).tobytes() == whole.tobytes()
    model.reset()
    one_by_one = np.stack([np.array(model.forward_step([t]), copy=True) for t in prompt])
    assert one_by_one.tobytes() == whole.tobytes()


# -- the context a model is loaded with ---------------------------------------------------------------

def test_options_leave_the_context_to_the_load():
    o = LlamaOptions()
    assert o.n_ctx is None and o.n_batch is None and o.reserve_bytes == 0
    assert LlamaOptions(n_ctx=128).n_batch == 128
    for bad in ({"n_ctx": 8}, {"n_ctx": 0}, {"n_ctx": 2048.0}, {"reserve_bytes": -1}, {"n_batch": 0}):
        with pytest.raises(InvalidOption) as exc:
            LlamaOptions(**bad)
        assert exc.value.param == next(iter(bad))


def test_kv_layout_and_metadata(gemma, smollm):
    from fucina.context_size import KvLayout

    assert smollm.metadata("general.architecture") == "llama"
    assert smollm.metadata("llama.context_length") == "8192" and smollm.n_ctx_train == 8192
    assert smollm.metadata("no.such.key") is None
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 (K and V), 9 query heads: 22.5 KiB of f16 KV cache a token.
    assert smollm.kv_layout() == KvLayout(n_layer=30, n_embd_k_gqa=192, n_embd_v_gqa=192, n_head=9)
    assert smollm.kv_layout().kv_bytes_per_token * 8192 == 180 * 2**20  # llama.cpp's "KV buffer size = 180 MiB"
    # Gemma 3 270M: 18 layers, one KV head of 256 (every layer full size: swa_full), 4 query heads.
    assert gemma.kv_layout() == KvLayout(n_layer=18, n_embd_k_gqa=256, n_embd_v_gqa=256, n_head=4)
    assert gemma.n_ctx_train == 32768
    # The fixtures name their context.
    assert (smollm.context_choice.reason, smollm.context_choice.n_ctx, smollm.context_length) == ("requested", 2048, 2048)


def test_the_default_context_is_the_trained_one_capped_by_memory(monkeypatch):
    import fucina.backends.llama_cpp as backend
    from fucina.catalog import load_model

    monkeypatch.setattr(backend, "mem_available_bytes", lambda: 64 * 2**30)
    m = load_model("smollm2-135m", n_threads=1)
    try:
        assert (m.context_choice.reason, m.context_length, m.options.n_ctx) == ("trained", 8192, 8192)
        assert m.options.n_batch == 512
    finally:
        m.close()
    monkeypatch.setattr(backend, "mem_available_bytes", lambda: 600 * 2**20)
    m = load_model("smollm2-135m", n_threads=1)
    try:
        c = m.context_choice
        assert c.reason == "memory" and 512 <= c.n_ctx < 8192 and c.n_ctx % 256 == 0
        assert m.context_length == c.n_ctx and c.trained == 8192
        assert c.n_ctx * c.bytes_per_token <= c.budget_bytes
        m.forward_step(m.tokenize("Hello"))  # the capped context runs
    finally:
        m.close()
