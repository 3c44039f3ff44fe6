"""The default context's arithmetic (fucina.context_size), on made-up numbers: no model is loaded."""

from __future__ import annotations

import pytest

from fucina.context_size import (CTX_STEP, FALLBACK_CTX, MAX_AUTO_CTX, MIN_AUTO_CTX, RESERVE_SHARE, ContextChoice,
                                 KvLayout, choose_context, mem_available_bytes, requested_context)
from fucina.errors import InvalidOption

MiB = 2**20
GiB = 2**30
#: SmolLM2-135M's shape: 30 layers, 3 KV heads of 64, 9 query heads.
SMOL = KvLayout(n_layer=30, n_embd_k_gqa=192, n_embd_v_gqa=192, n_head=9)


def test_bytes_per_token():
    assert SMOL.kv_bytes_per_token == 30 * (192 + 192) * 2 == 23040  # ~22.5 KiB: 22 MiB per 1k tokens
    assert SMOL.scratch_bytes_per_token(512) == 9 * 512 * 4
    assert KvLayout(2, 8, 4, bytes_per_element=1).kv_bytes_per_token == 2 * 12
    assert KvLayout(2, 8, 4).scratch_bytes_per_token(64) == 0  # no heads given: no scratch counted


def test_the_trained_context_when_it_fits():
    c = choose_context(trained=8192, layout=SMOL, mem_available=16 * GiB, weights_bytes=100 * MiB,
                       reserve_bytes=256 * MiB)
    assert (c.n_ctx, c.reason, c.trained) == (8192, "trained", 8192)
    per_token = SMOL.kv_bytes_per_token + SMOL.scratch_bytes_per_token(512)
    assert c.bytes_per_token == per_token
    assert c.budget_bytes == (16 * GiB - 100 * MiB) // 2 - 256 * MiB
    assert c.memory_limit == c.budget_bytes // per_token > 8192
    assert "trained context" in c.describe() and "8192 tokens" in c.describe()


def test_memory_caps_it_at_half_of_what_is_available_after_weights_and_reserve():
    per_token = SMOL.kv_bytes_per_token + SMOL.scratch_bytes_per_token(512)  # 41472 bytes
    avail, weights, reserve = 4 * GiB, 500 * MiB, 256 * MiB
    c = choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights, reserve_bytes=reserve)
    budget = (avail - weights) // 2 - reserve
    assert c.reason == "memory" and c.budget_bytes == budget and c.reserve_bytes == reserve
    assert c.n_ctx % CTX_STEP == 0 and c.n_ctx * per_token <= budget < (c.n_ctx + CTX_STEP) * per_token
    assert c.n_ctx == 38912  # ((4 GiB - 500 MiB) / 2 - 256 MiB) = 1542 MiB over 41472 bytes a token, to 256s
    text = c.describe()
    assert "memory" in text and "131072" in text and "--ctx" in text
    # More memory, a longer context; a bigger reserve, a shorter one.
    assert choose_context(trained=131072, layout=SMOL, mem_available=8 * GiB).n_ctx > c.n_ctx
    assert choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights,
                          reserve_bytes=reserve + 100 * MiB).n_ctx < c.n_ctx
    # A smaller share of the memory, a shorter context.
    assert choose_context(trained=131072, layout=SMOL, mem_available=avail, fraction=0.25).n_ctx < \
        choose_context(trained=131072, layout=SMOL, mem_available=avail).n_ctx


def test_a_reserve_takes_at_most_a_quarter_of_the_memory_left_after_the_weights():
    avail, weights = 2 * GiB, 500 * MiB
    free = (avail - weights) // 2  # 774 MiB for the context and the reserve together
    c = choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights, reserve_bytes=GiB)
    assert c.reserve_bytes == int(free * RESERVE_SHARE) < GiB and c.budget_bytes == free - c.reserve_bytes
    assert c.n_ctx == 14592  # 580.5 MiB over 41472 bytes a token, to 256s: the context is not starved
    huge = choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights, reserve_bytes=8 * GiB)
    assert (huge.n_ctx, huge.reserve_bytes) == (c.n_ctx, c.reserve_bytes)
    small = choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights,
                           reserve_bytes=64 * MiB)
    assert small.reserve_bytes == 64 * MiB and small.n_ctx > c.n_ctx  # a reserve under the share is kept whole
    assert choose_context(trained=131072, layout=SMOL, mem_available=None, reserve_bytes=GiB).reserve_bytes is None
    # What the context costs whatever its length (a batch of logits) is counted whole, never shrunk like a reserve.
    fixed = choose_context(trained=131072, layout=SMOL, mem_available=avail, weights_bytes=weights, reserve_bytes=GiB,
                           fixed_bytes=100 * MiB)
    assert fixed.reserve_bytes == int((free - 100 * MiB) * RESERVE_SHARE)
    assert fixed.budget_bytes == free - 100 * MiB - fixed.reserve_bytes


def test_a_larger_batch_costs_more_scratch_per_token():
    small = choose_context(trained=131072, layout=SMOL, mem_available=2 * GiB, n_batch=64)
    large = choose_context(trained=131072, layout=SMOL, mem_available=2 * GiB, n_batch=512)
    assert small.n_ctx > large.n_ctx and small.reason == large.reason == "memory"


def test_an_upper_bound_whatever_the_memory():
    c = choose_context(trained=1_048_576, layout=SMOL, mem_available=2**50)
    assert (c.n_ctx, c.reason, c.trained) == (MAX_AUTO_CTX, "cap", 1_048_576)
    assert "1048576" in c.describe() and "--ctx" in c.describe()
    assert choose_context(trained=1_048_576, layout=SMOL, mem_available=2**50, max_ctx=65536).n_ctx == 65536


def test_a_floor_when_memory_is_short():
    c = choose_context(trained=32768, layout=SMOL, mem_available=100 * MiB, weights_bytes=200 * MiB)
    assert (c.n_ctx, c.reason, c.budget_bytes, c.memory_limit) == (MIN_AUTO_CTX, "memory", 0, 0)
    # A model trained on less than the floor keeps its own context.
    assert choose_context(trained=256, layout=SMOL, mem_available=0).n_ctx == 256


def test_unknown_numbers():
    c = choose_context(trained=0, layout=SMOL, mem_available=16 * GiB)
    assert (c.n_ctx, c.reason, c.trained) == (FALLBACK_CTX, "unknown", 0)
    assert "no trained context" in c.describe()
    # Without the memory figure (no /proc/meminfo) or the cache's shape, the trained context stands.
    for c in (choose_context(trained=8192, layout=SMOL, mem_available=None),
              choose_context(trained=8192, layout=None, mem_available=1 * MiB)):
        assert (c.n_ctx, c.reason, c.memory_limit, c.budget_bytes) == (8192, "trained", None, None)


def test_a_requested_context():
    c = requested_context(2048, trained=8192, layout=SMOL, n_batch=512)
    assert (c.n_ctx, c.reason, c.trained) == (2048, "requested", 8192)
    assert "as requested" in c.describe() and "8192" in c.describe()
    assert requested_context(4096).describe().startswith("4096 tokens (as requested")


def test_the_choice_is_frozen():
    c = choose_context(trained=8192, layout=SMOL, mem_available=16 * GiB)
    assert isinstance(c, ContextChoice)
    with pytest.raises(AttributeError):
        c.n_ctx = 1  # type: ignore[misc]


@pytest.mark.parametrize("kw,param", [
    (dict(n_layer=-1, n_embd_k_gqa=1, n_embd_v_gqa=1), "n_layer"),
    (dict(n_layer=1, n_embd_k_gqa=1.5, n_embd_v_gqa=1), "n_embd_k_gqa"),
    (dict(n_layer=1, n_embd_k_gqa=1, n_embd_v_gqa=True), "n_embd_v_gqa"),
])
def test_bad_layouts_are_named(kw, param):
    with pytest.raises(InvalidOption) as exc:
        KvLayout(**kw)
    assert exc.value.param == param


@pytest.mark.parametrize("kw,param", [(dict(fraction=0), "fraction"), (dict(fraction=1.5), "fraction"),
                                      (dict(max_ctx=0), "max_ctx")])
def test_bad_bounds_are_named(kw, param):
    with pytest.raises(InvalidOption) as exc:
        choose_context(trained=8192, layout=SMOL, mem_available=GiB, **kw)
    assert exc.value.param == param


def test_mem_available_reads_meminfo(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24683792 kB\nMemFree:         1000 kB\nMemAvailable:   22599500 kB\n")
    assert mem_available_bytes(f) == 22599500 * 1024
    f.write_text("MemTotal:       24683792 kB\n")
    assert mem_available_bytes(f) is None  # an old kernel without the line
    f.write_text("MemAvailable: lots\n")
    assert mem_available_bytes(f) is None
    assert mem_available_bytes(tmp_path / "missing") is None
    real = mem_available_bytes()
    assert real is None or real > 0
