"""The *exact* level, tested for real: the batch-invariant engine build, both default models.

Runs in subprocesses on the patched, batch-invariant engine (``FUCINA_ENGINE=patched``; built by
``python -m fucina.engine build``, which the README's test command runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

#: The project's own prompt set (the suite never reads data outside the repository).
PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.jsonl"


@pytest.fixture(scope="module")
def env(exact_engine_env):
    """The patched engine's environment (conftest's fixture skips, or under CI fails, without it)."""
    return exact_engine_env


def _exactness(env, *args: str) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "benchmarks.exactness", "--json", "--prompt-file", str(PROMPTS), *args], env=env,
                       capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_engine_variant_is_the_patched_build_at_full_speed(env):
    """The patched engine keeps llamafile's sgemm (the fast kernels) and records today's patch set."""
    code = ("import json; from fucina.doctor import engine_info; from fucina.engine import active_engine, patch_set_id; "
            "e = active_engine(); print(json.dumps([e.variant, e.patch_set, patch_set_id(), engine_info()['llamafile sgemm']]))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    variant, built_from, today, sgemm = json.loads(r.stdout)
    assert variant == "patched" and built_from == today and sgemm == "on", r.stderr


def test_speculative_equals_plain_bitwise_on_dev_prompts(env):
    """10 prompts x greedy and sampled x 128 tokens x both models: 100% token-for-token identical."""
    results = _exactness(env, "--prompts", "10", "--gen", "128")  # the default load: what users get
    assert {r["model"] for r in results} == {"gemma3-270m", "smollm2-135m"}
    for r in results:
        assert r["runs"] == 20
        assert r["identical"] == r["runs"], r["divergences"]
        assert r["verifies"] > 50  # speculation really happened


def test_adversarial_sources_sampled_and_greedy_on_real_model(env):
    """Obligation 1 on both real models: perfect, garbage and alternating drafts commit the plain stream."""
    results = _exactness(env, "--prompts", "2", "--gen", "64", "--sources", "perfect,garbage,alternating")
    assert {r["model"] for r in results} == {"gemma3-270m", "smollm2-135m"}
    for r in results:
        assert r["exact_load"] and r["max_draft"] == 63  # no draft cap needed on the patched engine
        assert r["runs"] == 12 and r["identical"] == 12, r["divergences"]


@pytest.mark.parametrize("model", ["gemma3-270m", "smollm2-135m"])
def test_doctor_says_exact_for_every_batch_size_by_default(env, model):
    """No flag: the patched engine loads in exact mode and every batch of 1-64 rows is bitwise."""
    r = subprocess.run([sys.executable, "-m", "fucina.cli", "doctor", model], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "engine: patched" in r.stdout and "(load: exact)" in r.stdout
    assert "level: exact" in r.stdout and "bitwise up to 64 rows" in r.stdout and "0 not bitwise equal" in r.stdout


#: Batch sizes through every K-quant path: vec_dot (1), column groups (2-19), the tiled kernel's narrow
#: (up to 16 columns a band) and wide bands (20 on), ragged edges included.
ALL_PATHS_KS = (2, 3, 5, 8, 9, 15, 16, 17, 20, 24, 31, 33, 48, 64)


@pytest.mark.parametrize(("tiled_floor", "amx"), [("default", "default"), ("2", "default"), ("1000", "default"),
                                                  ("default", "0"), ("2", "0")])
def test_every_batch_size_up_to_64_is_bitwise_whichever_k_quant_kernel_serves_it(env, tiled_floor, amx):
    """Gemma 3's Q4_K/Q6_K weights with the tiled kernel from its default floor, from 2 rows (it serves
    every batch: its narrow path too) and never (the column groups serve every batch), with its AMX
    microtile where the CPU has AMX (default) and with its VNNI/AVX2 one (``GGML_FUCINA_AMX=0``): every
    row of every batch is bitwise the single-token row. A kernel whose arithmetic parted from the
    canonical one (kquant_common.c) would fail here at the batch sizes it serves (the AMX microtile
    only on a CPU that runs it: elsewhere both settings take the same kernel)."""
    code = ("import fucina, fucina.doctor as d; llm = fucina.LLM('gemma3-270m', n_ctx=1024, progress=False); "
            f"r = d.check_batch_invariance(llm.model, ks={ALL_PATHS_KS!r}); "
            "print(r.rows, r.mismatched_rows, r.max_exact_rows)")
    run_env = dict(env)
    if tiled_floor != "default":
        run_env["GGML_FUCINA_TILED_MIN"] = tiled_floor
    if amx != "default":
        run_env["GGML_FUCINA_AMX"] = amx
    r = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == [str(sum(ALL_PATHS_KS)), "0", "64"], r.stdout


#: One prompt, its plain steps and a 16-row verify, hashed bit for bit (the engine under GGML_FUCINA_GQA).
_GQA_BITS = (
    "import hashlib, numpy as np; from fucina.catalog import load_model; "
    "m = load_model({model!r}, n_ctx=2048, use_extra_bufts=False); "
    "t = m.tokenize(open({text!r}).read())[:700]; h = hashlib.sha256(); "
    "h.update(np.ascontiguousarray(m.forward_step(t[:600])).tobytes()); "
    "[h.update(np.ascontiguousarray(m.forward_step([x])).tobytes()) for x in t[600:640]]; "
    "h.update(np.ascontiguousarray(m.forward_step_all_logits(t[640:656])).tobytes()); "
    "print(m.metadata('{arch}.attention.head_count'), m.metadata('{arch}.attention.head_count_kv'), h.hexdigest())"
)


@pytest.mark.parametrize(("model", "arch"), [("gemma3-270m", "gemma3"), ("smollm2-135m", "llama")])
def test_grouped_query_attention_in_one_call_per_kv_head_keeps_every_bit(env, model, arch):
    """Both models share each K/V head among several query heads (Gemma 3 270M: 4 on 1, SmolLM2: 9 on 3),
    and the engine multiplies one K/V head by all of its query heads in one call (patches.py, GQA_HEADS).
    A 600-token prompt, 40 plain steps and a 16-row verify give the same bits as one call per query head
    (``GGML_FUCINA_GQA=0``): a call that read another head's columns or wrote another head's outputs
    would change them."""
    code = _GQA_BITS.format(model=model, text=str(Path(__file__)), arch=arch)
    out = []
    for grouped in ("1", "0"):
        r = subprocess.run([sys.executable, "-c", code], env={**env, "GGML_FUCINA_GQA": grouped},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(r.stdout.split())
    heads, kv_heads, _ = out[0]
    assert int(heads) > int(kv_heads) >= 1  # grouped-query attention: the grouped path is taken
    assert out[0] == out[1]


def test_the_api_is_exact_by_default_on_the_patched_engine_and_says_so_on_stock(env):
    from fucina import cpu
    from fucina.engine import env_for

    code = ("import fucina; llm = fucina.LLM('smollm2-135m', n_ctx=1024, progress=False); "
            "print(llm.exact, llm.level, llm.model.options.use_extra_bufts)")
    stock_bufts = not cpu.cpu_has_amx()  # stock repacks, except on a CPU with AMX (tests/test_amx.py)
    for engine_env, expected in ((env, "True exact False"), (env_for("stock"), f"False distribution {stock_bufts}")):
        r = subprocess.run([sys.executable, "-c", code], env=engine_env, capture_output=True, text=True, timeout=600)
        assert r.stdout.strip() == expected, r.stderr[-2000:]


def test_the_stock_engine_is_distribution_level_divergences_only_at_near_ties():
    """The other level, kept tested: on the stock engine a greedy stream may part only at a near-tie."""
    from fucina import cpu
    from fucina.engine import env_for
    from tests.speculative.test_real_lossless import NEAR_TIE

    results = _exactness(env_for("stock"), "--model", "gemma3-270m", "--prompts", "4", "--gen", "64",
                         "--modes", "greedy")
    (r,) = results
    # Stock loads the standard way: weights repacked, except on a CPU with AMX (tests/test_amx.py).
    assert r["exact_load"] == cpu.cpu_has_amx() and r["runs"] == 4 and r["verifies"] > 20
    for d in r["divergences"]:
        assert d["top2_gap"] < NEAR_TIE, d


def test_the_patched_single_row_path_computes_the_same_model_as_stock(env):
    """Plain decoding, patched vs stock: only float-rounding differences, so argmax flips and greedy
    partings happen only at near-ties of stock's own row."""
    from benchmarks.engines import compare_logits
    from tests.speculative.test_real_lossless import NEAR_TIE

    r = compare_logits("smollm2-135m", str(PROMPTS), prompts=2, gen=24)
    assert r["rows"] >= 2 and r["greedy_runs"] == 2
    assert r["max_abs_dlogit"] < 3.0  # the scale of stock's own batch-vs-single rounding (doctor: ~1)
    assert r["argmax_flips"] == 0 or r["max_flip_top2_gap"] < NEAR_TIE, r
    for p in r["partings"]:
        assert p["stock_top2_gap"] < NEAR_TIE, r


@pytest.mark.parametrize("amx", ["default", "0"])
def test_a_prompt_read_whole_in_two_parts_or_token_by_token_gives_the_same_bits(env, amx):
    """Prefill runs through the same kernels as verifies, in large batches (a 300-token prompt is one
    batch of 300 rows: the tiled kernel's wide path), so a prefix-cache split must not change a row:
    the prompt's last row and the next decode step are bitwise the same read whole, in two parts at
    an odd split and one token at a time (the single-row path a plain step takes)."""
    code = ("import json, numpy as np, fucina; llm = fucina.LLM('gemma3-270m', n_ctx=1024, progress=False); m = llm.model\n"
            "text = ' '.join(json.loads(l)['text'] for l in open(" + repr(str(PROMPTS)) + "))\n"
            "p = m.tokenize(text)[:300]; assert len(p) == 300, len(p)\n"
            "def read(parts):\n"
            "    m.reset(); last = None\n"
            "    for part in parts: last = np.array(m.forward_step(part), copy=True)\n"
            "    nxt = np.array(m.forward_step([int(np.argmax(last))]), copy=True); m.reset()\n"
            "    return np.concatenate([last, nxt])\n"
            "whole = read([p]); two = read([p[:137], p[137:]]); one = read([[t] for t in p])\n"
            "print(int(np.sum(whole != two)), int(np.sum(whole != one)), int(np.sum(whole != read([p]))))")
    run_env = dict(env)
    if amx != "default":
        run_env["GGML_FUCINA_AMX"] = amx
    r = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0", "0", "0"], r.stdout
