"""The engine patch set, the builds' manifests and the engine selection (no compiler, no model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fucina import engine_selection as be
from fucina.engine import PATCHES, EnginePatchError, SourcePatch, apply_patches, patch_set_id
from fucina.errors import EngineUnavailable


def _tree(tmp_path: Path, patches=PATCHES) -> Path:
    """A fake llama.cpp tree holding each patched file with the text the patches replace."""
    for p in patches:
        f = tmp_path / p.path
        f.parent.mkdir(parents=True, exist_ok=True)
        old = f.read_text() if f.exists() else "// head\n"
        f.write_text(old + p.before + "// between\n")
    return tmp_path


def test_every_patch_says_what_it_unifies_and_replaces_its_text(tmp_path):
    tree = _tree(tmp_path)
    lines = apply_patches(tree)
    assert len(lines) == len(PATCHES) and all(p.unifies for p in PATCHES)
    for p in PATCHES:
        text = (tree / p.path).read_text()
        assert p.before not in text and p.after in text
    sgemm = (tree / "ggml/src/ggml-cpu/llamafile/sgemm.cpp").read_text()
    assert "if (n < 2)\n        return false;" not in sgemm  # no single-row escape to vec_dot for every type
    tiled = (tree / "ggml/src/ggml-cpu/tiled/tiled.cpp").read_text()
    # The tiled kernel serves the three K-quants whose other kernels share its arithmetic, from a floor
    # that is a speed choice (upstream's 8) ...
    assert "rows >= 8" not in tiled and "return rows >= fucina_floor;" in tiled
    assert "GGML_TYPE_Q4_K:" in tiled and "GGML_TYPE_Q3_K" not in tiled and "GGML_TYPE_IQ4_XS" not in tiled
    # ... and its VNNI microtile accumulates with the fused step its AVX2 microtile and fucina's take.
    micro = (tree / "ggml/src/ggml-cpu/tiled/tiled-kernel.cpp").read_text()
    assert "_mm512_fmadd_ps(result, d1_vec, _mm512_load_ps(p))" in micro and "_mm512_add_ps" not in micro


def test_q4_1_weights_take_the_column_group_kernel_for_every_batch_size(tmp_path):
    from fucina.engine.patches import Q4_1_COLUMNS

    tree = _tree(tmp_path)
    apply_patches(tree)
    header = (tree / "ggml/src/ggml-cpu/quants.h").read_text()
    kernel = (tree / "ggml/src/ggml-cpu/arch/x86/quants.c").read_text()
    matmul = (tree / "ggml/src/ggml-cpu/ggml-cpu.c").read_text()
    assert "void ggml_vec_dot_q4_1_q8_1_cols(" in header and header.count("ggml_vec_dot_q4_1_q8_1(") == 1
    assert kernel.count("void ggml_vec_dot_q4_1_q8_1_cols(") == 1
    # Per column, the same fused operations whatever the group size: one body, inlined per size.
    assert kernel.count("fmaf(m0,") == 1 and kernel.count("_mm256_fmadd_ps(d0d1") == 1
    assert "if (ncols" not in kernel and "switch (ncols)" in kernel
    # mul_mat picks a column-group kernel by the weight type only, never by the number of rows.
    assert "case GGML_TYPE_Q4_1: cols = ggml_vec_dot_q4_1_q8_1_cols; gmax = 8; break;" in matmul
    assert "if (cols != NULL && num_rows_per_vec_dot == 1) {" in matmul
    assert "float tmp[32];" not in matmul and "float tmp[16 * FUCINA_COLS_MAX];" in matmul
    assert all(p.unifies for p in Q4_1_COLUMNS) and all(p.before not in p.after for p in Q4_1_COLUMNS)


def test_k_quant_weights_take_their_column_group_kernels_for_every_batch_size(tmp_path):
    from fucina.engine.patches import KQUANT_COLUMNS

    tree = _tree(tmp_path)
    apply_patches(tree)
    header = (tree / "ggml/src/ggml-cpu/quants.h").read_text()
    kernel = (tree / "ggml/src/ggml-cpu/arch/x86/quants.c").read_text()
    matmul = (tree / "ggml/src/ggml-cpu/ggml-cpu.c").read_text()
    for t in ("q4_K", "q5_K", "q6_K"):
        assert f"void ggml_vec_dot_{t}_q8_K_cols(" in header
        assert f"FUCINA_COLS_ENTRY({t}, block_{t})" in kernel
        assert f"case GGML_TYPE_{t[:2].upper()}_K: cols = ggml_vec_dot_{t}_q8_K_cols; gmax = FUCINA_COLS_MAX;" in matmul
        # Both forms of the group are in the tree; the CPU picks one (kquant_entry.c).
        assert kernel.count(f"FUCINA_INLINE void FUCINA_GROUP({t})(") == 2
    assert "#define FUCINA_COLS_MAX 8\n" in header
    assert "#define FUCINA_WIDE 0" in kernel and "#define FUCINA_WIDE 1" in kernel
    assert "if (ncols" not in kernel and "switch (ncols)" in kernel
    assert all(p.unifies for p in KQUANT_COLUMNS) and all(p.before not in p.after for p in KQUANT_COLUMNS)


def test_attention_multiplies_a_kv_head_by_all_of_its_query_heads_in_one_call(tmp_path):
    from fucina.engine.patches import GQA_HEADS

    tree = _tree(tmp_path)
    apply_patches(tree)
    matmul = (tree / "ggml/src/ggml-cpu/ggml-cpu.c").read_text()
    # Both tinyBLAS loops (src1 as given, and packed into the work buffer) step over the query heads of
    # one K/V head at a time, with that many times the columns; GGML_FUCINA_GQA=0 turns it off.
    assert matmul.count("i12 += fucina_heads") == 2 and matmul.count("ne11*fucina_heads") == 2
    assert "i12 < ne12; i12++)\n                if (!llamafile_sgemm" not in matmul
    assert 'getenv("GGML_FUCINA_GQA")' in matmul and "nb2 == (size_t) ne1*nb1 ? r2 : 1" in matmul
    assert all(p.unifies for p in GQA_HEADS) and all(p.before not in p.after for p in GQA_HEADS)


def test_a_missing_or_repeated_text_fails_and_writes_nothing(tmp_path):
    tree = _tree(tmp_path)
    sgemm = tree / PATCHES[0].path
    sgemm.write_text(sgemm.read_text().replace("if (n < 2)", "if (n < 3)"))
    tiled_before = (tree / PATCHES[1].path).read_text()
    with pytest.raises(EnginePatchError, match="occurs 0 times"):
        apply_patches(tree)
    assert (tree / PATCHES[1].path).read_text() == tiled_before  # checked before anything was written
    tree2 = _tree(tmp_path / "twice")
    apply_patches(tree2)
    with pytest.raises(EnginePatchError, match="already patched"):
        apply_patches(tree2)
    with pytest.raises(EnginePatchError, match="not in the llama.cpp tree"):
        apply_patches(tmp_path / "empty")


def test_patch_set_id_is_stable_and_changes_with_any_patch():
    assert patch_set_id() == patch_set_id() and len(patch_set_id()) == 12
    changed = PATCHES[:-1] + (SourcePatch(PATCHES[-1].path, PATCHES[-1].before, PATCHES[-1].after + " ",
                                          PATCHES[-1].unifies),)
    assert patch_set_id(changed) != patch_set_id()


def _fake_build(root: Path, variant: str, **extra) -> Path:
    from fucina.engine.build import cmake_args

    d = root / f"engine-{variant}-{be.ENGINE_VERSION}"
    (d / "llama_cpp").mkdir(parents=True)
    (d / "llama_cpp" / "__init__.py").write_text("")
    (d / be.MANIFEST).write_text(json.dumps({"variant": variant, "version": be.ENGINE_VERSION,
                                             "patch_set": patch_set_id(), "cmake_args": list(cmake_args(variant)),
                                             **extra}))
    return d


def test_selection_follows_fucina_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("FUCINA_ENGINE_CACHE", str(tmp_path))
    monkeypatch.setenv("FUCINA_ENGINE", "auto")
    assert be.selected_dir() is None  # nothing built: the installed engine
    monkeypatch.setenv("FUCINA_ENGINE", "patched")
    with pytest.raises(EngineUnavailable, match="fucina.engine build") as e:
        be.selected_dir()
    assert e.value.param == "FUCINA_ENGINE"
    d = _fake_build(tmp_path, "patched")
    assert be.selected_dir() == d
    monkeypatch.setenv("FUCINA_ENGINE", "auto")
    assert be.selected_dir() == d
    monkeypatch.setenv("FUCINA_ENGINE", "stock")
    assert be.selected_dir() is None
    monkeypatch.setenv("FUCINA_ENGINE", str(tmp_path / "nowhere"))
    with pytest.raises(EngineUnavailable, match="no llama_cpp package"):
        be.selected_dir()
    other = _fake_build(tmp_path, "no-llamafile")
    monkeypatch.setenv("FUCINA_ENGINE", str(other))
    assert be.selected_dir() == other
    assert be.env_for("no-llamafile")["FUCINA_ENGINE"] == str(other)
    assert be.env_for("stock")["FUCINA_ENGINE"] == "stock"


def test_a_half_written_build_is_not_an_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("FUCINA_ENGINE_CACHE", str(tmp_path))
    d = _fake_build(tmp_path, "patched")
    (d / be.MANIFEST).write_text("{not json")
    assert be.read_manifest(d) is None
    monkeypatch.setenv("FUCINA_ENGINE", "auto")
    assert be.selected_dir() is None


def test_engine_ready_wants_todays_patch_set(tmp_path, monkeypatch):
    from fucina.engine import engine_ready

    monkeypatch.setenv("FUCINA_ENGINE_CACHE", str(tmp_path))
    assert not engine_ready("patched")
    d = _fake_build(tmp_path, "patched")
    assert engine_ready("patched")
    data = json.loads((d / be.MANIFEST).read_text())
    (d / be.MANIFEST).write_text(json.dumps({**data, "patch_set": "0" * 12}))
    assert not engine_ready("patched")  # built from another patch set: stale
    (d / be.MANIFEST).write_text(json.dumps({k: v for k, v in data.items() if k != "cmake_args"}))
    assert not engine_ready("patched")  # built from the recipe before AMX was left out: stale


def test_activation_happens_before_llama_cpp_is_imported(tmp_path):
    """`import fucina` puts the selected engine first; a llama_cpp imported earlier is left alone."""
    d = _fake_build(tmp_path, "patched")
    (d / "llama_cpp" / "__init__.py").write_text("MARK = 'patched build'\n")
    code = "import fucina, llama_cpp; print(llama_cpp.MARK)"
    env = {**be.env_for("auto"), "FUCINA_ENGINE_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "patched build", r.stderr
    code = "import llama_cpp; import fucina; print(getattr(llama_cpp, 'MARK', 'installed'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "installed", r.stderr


def test_engine_cli_errors_are_one_line_exit_2(tmp_path):
    env = {**be.env_for("patched"), "FUCINA_ENGINE_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "fucina.engine", "status"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "fucina.engine build" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fucina.engine", "path"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and r.stdout.strip().endswith(f"engine-patched-{be.ENGINE_VERSION}")


def test_a_selection_that_cannot_be_honoured_fails_at_load_with_a_named_error(tmp_path):
    code = ("import fucina\nfrom fucina.backends.llama_cpp import LlamaVocab\n"
            "try:\n    LlamaVocab('/no/such.gguf')\nexcept fucina.FucinaError as e:\n"
            "    print(type(e).__name__, e.param)\n")
    env = {**be.env_for("patched"), "FUCINA_ENGINE_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "EngineUnavailable FUCINA_ENGINE", r.stderr


def test_engine_status_into_a_closed_pipe_exits_quietly(tmp_path):
    # `python -m fucina.engine status | head -1`: the reader is gone before the output is flushed.
    env = {**be.env_for("stock"), "FUCINA_ENGINE_CACHE": str(tmp_path)}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "fucina.engine", "status"], env=env, stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert r.returncode == 0 and r.stderr == ""


def test_the_engine_table_names_its_context_and_has_one_cell_per_column():
    from benchmarks.engines import render

    ms = {"1": 50.0, "16": 300.0, "prefill": 1000.0}
    inv = {"bufts": False, "max_exact_rows": 64}
    res = {"machine": "m", "date": "d", "models": {"q": {
        "median_ms": {"after": ms, "stock": {"1": 60.0, "16": 450.0, "prefill": 2000.0}},
        "invariance": {"after": inv, "stock": {**inv, "bufts": True, "max_exact_rows": 0}},
        "prefill_tokens": 500, "context_tokens": 4000}}}
    text = render(res)
    assert "**q**, forwards after a 4000-token context" in text
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0] == "| engine | load | bitwise up to | plain step | C(16) | prefill |"
    assert {line.count("|") for line in table} == {7}
    # C(16) in plain steps of the engine; against stock, time for time (prefill: above 1 is faster).
    assert "| after | no repack | 64 rows | 50.0 ms (0.83x) | 6.00 (0.67x) | 500 tok/s (2.00x) |" in table
