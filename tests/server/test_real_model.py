"""The server and the prefix slots on a real model (SmolLM2-135M-Instruct, standard llama.cpp build).

The standard build is *distribution*-level (batched kernels round differently, and the gate's draft
lengths follow live timings), so a speculative answer may legitimately differ from plain decoding
here; ``test_exact_serve.py`` checks that equality on the exact build. These tests compare paths that
evaluate the same batches: a restored snapshot against the live cache it was taken from, interleaved
against sequential conversations, and a plain-decoding server against in-process plain decoding;
the speculative server is checked for shapes and for drafting. Models load with one
thread: two llama.cpp processes spinning on the same two cores (a parallel test run) slow each other
down by orders of magnitude, a single thread much less.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai")

from fucina.api import LLM  # noqa: E402
from fucina.catalog import load_model  # noqa: E402
from tests.server.conftest import FLAT, NO_GATE, serve  # noqa: E402

pytestmark = pytest.mark.real_model
MODEL = "smollm2-135m"
REPEAT = [{"role": "user", "content": "Repeat this sentence exactly, twice: the quick brown fox jumps over the lazy dog."}]


def _load():
    return load_model(MODEL, n_ctx=2048, n_threads=1)


@pytest.fixture(scope="module")
def engine():
    m = _load()
    yield m
    m.close()


@pytest.fixture(scope="module")
def served():
    llm = LLM(_load(), cost_table=FLAT, name=MODEL, progress=False, spec_options=NO_GATE)
    with serve(llm) as s:
        yield s
    llm.close()


@pytest.fixture()
def ref(engine):
    """In-process plain decoding on a second load of the same model."""
    engine.reset()
    yield LLM(engine, speculative=False, name=MODEL, progress=False)
    engine.reset()


def test_llama_snapshot_restores_the_cache_bit_for_bit(engine):
    m = engine
    m.reset()
    text = "The history of the printing press begins in the fifteenth century. " * 40
    ids = m.tokenize(text)[:256]
    m.forward_step(ids)
    expected = m.snapshot_nbytes()
    t0 = time.perf_counter()
    snap = m.snapshot()
    t_save = time.perf_counter() - t0
    assert snap.nbytes == expected  # the size the prefix cache checks before it takes one
    want = np.array(m.forward_step([ids[-1], 42, 43]), copy=True)
    m.reset()
    m.forward_step(m.tokenize("something unrelated " * 20))
    t0 = time.perf_counter()
    m.restore(snap)
    t_restore = time.perf_counter() - t0
    assert m.kv_len == 256
    assert np.array_equal(m.forward_step([ids[-1], 42, 43]), want)
    print(f"\n256-token prefix snapshot: {snap.nbytes / 2**20:.1f} MiB, save {1e3 * t_save:.1f} ms, "
          f"restore {1e3 * t_restore:.1f} ms")
    assert t_save < 1.0 and t_restore < 1.0


def test_interleaved_chats_reuse_both_prefixes_and_change_nothing(ref):
    """A1 B1 A2 B2 (slots restored) equals A1 A2 B1 B2 (live cache only), token for token."""
    llm = ref
    system = {"role": "system", "content": "You are a concise assistant. Answer every question in one short sentence."}
    conv = {"A": "I am painting a picture of the sky after a summer storm, with a big arc of light over the hills. "
                 "Name three colours of the rainbow, please, and nothing else.",
            "B": "My family is planning a long holiday in southern Europe next spring and we love old towns. "
                 "What is the capital city of Italy? Answer with the name of the city only."}
    kw = dict(max_tokens=16, temperature=0)

    def turn(results, key, first):
        msgs = [system, {"role": "user", "content": conv[key]}]
        if not first:
            msgs += [{"role": "assistant", "content": results[key + "1"].text}, {"role": "user", "content": "Why?"}]
        results[key + ("1" if first else "2")] = llm.chat(msgs, **kw)

    sequential: dict = {}
    for key, first in (("A", True), ("A", False), ("B", True), ("B", False)):
        turn(sequential, key, first)
    llm.prefix_cache.clear()
    llm.reset()
    interleaved: dict = {}
    for key, first in (("A", True), ("B", True), ("A", False), ("B", False)):
        turn(interleaved, key, first)
    for name in ("A1", "B1", "A2", "B2"):
        assert interleaved[name].token_ids == sequential[name].token_ids, name
    for name in ("A2", "B2"):
        first = interleaved[name[0] + "1"].usage
        assert interleaved[name].usage.cached_tokens >= first.prompt_tokens, (name, interleaved[name].usage)
        assert interleaved[name].usage.cached_tokens == sequential[name].usage.cached_tokens


@pytest.fixture(scope="module")
def served_plain():
    llm = LLM(_load(), speculative=False, name=MODEL, progress=False)
    with serve(llm) as s:
        yield s
    llm.close()


def test_plain_server_equals_in_process_plain_decoding(served_plain, ref):
    c = openai.OpenAI(base_url=served_plain.v1, api_key="x", max_retries=0, timeout=120)
    r = c.chat.completions.create(model=MODEL, messages=REPEAT, max_tokens=40, temperature=0)
    want = ref.chat(REPEAT, max_tokens=40, temperature=0, top_p=1.0, top_k=0, min_p=0.0)
    assert r.choices[0].message.content == want.text
    assert r.usage.completion_tokens == want.usage.completion_tokens and r.choices[0].finish_reason == "stop"
    assert r.system_fingerprint == "fucina-0.1.0-llama.cpp-0.3.36-exact"  # plain decoding is its own reference
    prompt = "def fibonacci(n):\n    "
    s = c.completions.create(model=MODEL, prompt=prompt, max_tokens=32, temperature=0.7, seed=42, stop=["\n\n"],
                             stream=True)
    want = ref.complete(prompt, max_tokens=32, temperature=0.7, seed=42, stop=["\n\n"], top_p=1.0, top_k=0, min_p=0.0)
    assert "".join(ch.choices[0].text for ch in s if ch.choices) == want.text


def test_speculative_server_drafts_on_a_repetitive_answer(served):
    c = openai.OpenAI(base_url=served.v1, api_key="x", max_retries=0, timeout=120)
    r = c.chat.completions.create(model=MODEL, messages=REPEAT, max_tokens=40, temperature=0)
    info = r.model_extra["fucina"]
    assert info["speculative"] is True and info["drafted"] > 0 and info["accepted"] > 0
    assert re.fullmatch(r"fucina-0\.1\.0-llama\.cpp-0\.3\.36-(exact|distribution)", r.system_fingerprint)
    assert r.system_fingerprint.endswith(info["level"])
    assert "quick brown fox" in r.choices[0].message.content.lower()
    stream = c.chat.completions.create(model=MODEL, messages=REPEAT, max_tokens=40, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens > 0 and chunks[-1].usage.prompt_tokens_details.cached_tokens > 0
