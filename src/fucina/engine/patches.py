"""The patch set that makes llama.cpp's CPU matmul batch-invariant: every batch size, one kernel path.

Speculative decoding verifies a draft of ``k`` tokens in one forward of ``k + 1`` rows and compares
the result with what plain decoding computes one row at a time. The stock CPU backend picks its
matmul kernel *by the number of rows*: ``vec_dot`` for one row, llamafile's tinyBLAS for two or
more, a tiled K-quant kernel for eight or more. Each kernel sums a dot product in its own order,
so a row's logits depend on how many rows share its forward and a near-tie can flip. Each patch
below removes one of those switches, so that the kernel chosen for a weight tensor depends on its
type only. Together with loading without CPU weight repacking (``use_extra_bufts=False``; the
repacked kernels split gemv for < 4 rows from gemm for 4+, and on this project's machines repacking
bought no measurable speed, docs/benchmarks-archive/2026-12-01-xeon.md "The cost of exactness, side by side") every row is bitwise the row a
single-token step computes, for any batch size (``fucina doctor`` and the tests check 1-64 rows).

The last four patches (:data:`Q4_1_COLUMNS`) add a kernel rather than remove a switch. With Q4_1
weights every batch size took the one-column ``vec_dot`` per weight row and activation column, so a
verify of n rows cost nearly n times one row's matmul work. The new kernel multiplies a weight row by
up to eight columns per call and unpacks the row's nibbles and scales once for all of them. Each
column's result is computed exactly as before, so the kernel stays batch-invariant, and a verify of
8 rows costs 2.8 plain steps instead of 3.5 (BENCHMARKS.md, "The Q4_1 column-group kernel").

The K-quant patches (:data:`KQUANT_COLUMNS`, C in ``kernels/kquant_*.c``) do the same for Q4_K, Q5_K
and Q6_K, the tensors of the Q4_K_M and Q5_K_M files most people run, and go one step further: they
define the dot product itself (``kernels/kquant_common.c``) as the arithmetic of upstream's tiled
K-quant kernel — exact integers per 256-value block, then three float steps per block in block order —
and give it three implementations that compute it bit for bit: the one-column ``vec_dot`` (a decode
step; on the AMX Xeon at stock's speed, on an AMD EPYC Zen 4 at 1.19x the time of stock's repacked Q4_K
gemv, which this engine cannot use: BENCHMARKS.md, "The one-column kernels on a CPU without AMX"),
column groups (a weight row unpacked once for up to 8 activation columns; verifies) and the tiled kernel itself (:data:`TILED_KQUANTS`; from 20 rows, so long verifies and
prompt prefill run at upstream's fastest speed). Which one serves a batch is a question of speed only
(``tests/test_kernels.py`` checks the first two against an exact model of the arithmetic, the engine
tests every batch size and prefill split through all three). Where the CPU has AMX-INT8 the tiled kernel's
microtile is fucina's (``kernels/tiled_amx.cpp``): the tile unit sums the same integers (each weight
folded once with its sub-block scale) and the float steps are the VNNI microtile's. The numbers are not upstream vec_dot's:
the patched engine's plain decoding rounds a little differently from stock's (distribution level
between the two engines; ``tests/test_exact_engine.py`` keeps that difference at stock's own scale).

The last patches (:data:`GQA_HEADS`, :mod:`fucina.engine.attention_patches`) change no arithmetic. Under
grouped-query attention mul_mat called tinyBLAS once per query head, so a decode step read every cached
K/V row once per query head that shares it; one call per K/V head computes the same sums in the same
order, and at a 4,000-token context a Qwen2.5-Coder 1.5B plain step took about a quarter less time
(BENCHMARKS.md, "Attention under grouped-query heads").

The K-quant patches live in :mod:`fucina.engine.kquant_patches`; this module assembles the set.

Each :class:`SourcePatch` names the text it replaces, which must occur exactly once in the pinned
sources: a changed upstream fails the build loudly instead of building something unpatched.
"""


from __future__ import annotations

import hashlib
from pathlib import Path

from fucina.engine.attention_patches import GQA_HEADS
from fucina.engine.kquant_patches import KQUANT_COLUMNS, TILED_KQUANTS
from fucina.engine.source_patch import (CPU, QUANTS_H, SGEMM, TILED, X86_QUANTS, EnginePatchError, SourcePatch,
                                        kernel_text)

__all__ = ["PATCHES", "Q4_1_COLUMNS", "KQUANT_COLUMNS", "TILED_KQUANTS", "GQA_HEADS", "EnginePatchError",
           "SourcePatch", "apply_patches", "patch_set_id"]

_Q4_1_DECL = ("void ggml_vec_dot_q4_1_q8_1(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);")
_COLS_DECL = ("void ggml_vec_dot_q4_1_q8_1_cols(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "const void * GGML_RESTRICT vy, size_t by, int ncols)")

_COLS_KERNEL = """#if defined(__AVX2__) && defined(__FMA__)
// fucina: the column-group kernel's body, inlined once per group size (a constant ncols keeps
// every column's accumulator in a register).
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void ggml_vec_dot_q4_1_q8_1_group(const int nb, float * GGML_RESTRICT s, size_t bs,
        const block_q4_1 * GGML_RESTRICT x, const void * GGML_RESTRICT vy, size_t by, const int ncols) {
    const block_q8_1 * GGML_RESTRICT y[8];
    __m256 acc[8];
    float summs[8];
    for (int c = 0; c < ncols; ++c) {
        y[c] = (const block_q8_1 *) ((const char *) vy + c * by);
        acc[c] = _mm256_setzero_ps();
        summs[c] = 0.0f;
    }
    for (int ib = 0; ib < nb; ++ib) {
        const __m256 d0v = _mm256_set1_ps(GGML_CPU_FP16_TO_FP32(x[ib].d));
        const float m0 = GGML_CPU_FP16_TO_FP32(x[ib].m);
        const __m256i qx = bytes_from_nibbles_32(x[ib].qs);
        for (int c = 0; c < ncols; ++c) {
            summs[c] = fmaf(m0, GGML_CPU_FP16_TO_FP32(y[c][ib].s), summs[c]);
            const __m256 d0d1 = _mm256_mul_ps(d0v, _mm256_set1_ps(GGML_CPU_FP16_TO_FP32(y[c][ib].d)));
            const __m256i qy = _mm256_loadu_si256((const __m256i *) y[c][ib].qs);
            acc[c] = _mm256_fmadd_ps(d0d1, mul_sum_us8_pairs_float(qx, qy), acc[c]);
        }
    }
    for (int c = 0; c < ncols; ++c) {
        s[c * bs] = hsum_float_8(acc[c]) + summs[c];
    }
}
#endif

""" + _COLS_DECL + """ {
    // fucina: one Q4_1 weight row against ncols (1..8) Q8_1 activation columns (column c at
    // vy + c*by, its result at s[c*bs]). A verify of n rows multiplies every weight row by n
    // columns, and the one-column vec_dot unpacks the row's nibbles and converts its scales again
    // for each of them; here that happens once per block for the whole group. Each column's result
    // is a function of that column alone: the same fused multiply-adds in the same block order
    // (the 8-lane accumulator, the min term with an explicit fmaf, one hsum) whatever ncols is, and
    // the same as the one-column vec_dot's (whose min term is the same fmaf since this patch set),
    // which mul_mat keeps for a group of one: a row's logits do not depend on how many rows share
    // the forward.
    assert(n % QK8_1 == 0);
    assert(ncols >= 1 && ncols <= 8);
#if defined(__AVX2__) && defined(__FMA__)
    const int nb = n / QK8_1;
    const block_q4_1 * GGML_RESTRICT x = vx;
    switch (ncols) {
        case 1: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 1); break;
        case 2: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 2); break;
        case 3: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 3); break;
        case 4: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 4); break;
        case 5: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 5); break;
        case 6: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 6); break;
        case 7: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 7); break;
        default: ggml_vec_dot_q4_1_q8_1_group(nb, s, bs, x, vy, by, 8); break;
    }
#else
    for (int c = 0; c < ncols; ++c) {
        ggml_vec_dot_q4_1_q8_1(n, s + c * bs, 0, vx, 0, (const char *) vy + c * by, 0, 1);
    }
#endif
}
"""

_TMP_BEFORE = ("    // attempt to reduce false-sharing (does not seem to make a difference)\n"
               "    // 16 * 2, accounting for mmla kernels\n"
               "    float tmp[32];\n")

#: mul_mat's loop for the weight types that have a column-group kernel (Q4_1 and the K-quants).
_COLS_LOOP = kernel_text("mul_mat_cols.c")

_Q4_1_END = "    ggml_vec_dot_q4_1_q8_1_generic(n, s, bs, vx, bx, vy, by, nrc);\n#endif\n}\n"

# The one-column kernel's min term, unique by the scale code that follows it in that function.
_Q4_1_MIN_TAIL = """
        const __m256 d0v = _mm256_set1_ps( d0 );
        const __m256 d1v = _mm256_set1_ps( d1 );

        // Compute combined scales
        const __m256 d0d1 = _mm256_mul_ps( d0v, d1v );

        // Load 16 bytes, and unpack 4 bit fields into bytes, making 32 bytes
        const __m256i qx = bytes_from_nibbles_32(x[ib].qs);
"""
_Q4_1_MIN = "        summs += GGML_CPU_FP16_TO_FP32(x[ib].m) * GGML_CPU_FP16_TO_FP32(y[ib].s);\n"
_Q4_1_MIN_FMA = ("        // fucina: an explicit fmaf, as in the column-group kernel (gnu11's default contraction\n"
                 "        // makes it one already; written out, the two agree under any flags)\n"
                 "        summs = fmaf(GGML_CPU_FP16_TO_FP32(x[ib].m), GGML_CPU_FP16_TO_FP32(y[ib].s), summs);\n")

PATCHES: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=SGEMM,
        before=(
            "    // only enable sgemm for prompt processing\n"
            "#if !defined(__MMA__)\n"
            "    if (n < 2)\n"
            "        return false;\n"
            "#endif\n"
        ),
        after=(
            "    // fucina: upstream returns false for every n < 2, so a one-row step took ggml's vec_dot\n"
            "    // while a batched verify took tinyBLAS, and the two sum in different orders (F32, F16,\n"
            "    // BF16, IQ4_NL): a row's result depended on how many rows shared its forward. tinyBLAS\n"
            "    // accumulates each C[i,j] over k in the same order whatever tile covers it, so it now\n"
            "    // serves every n. The exceptions are the 8-bit-dot formats on x86 with AVX2/FMA/F16C:\n"
            "    // there vec_dot does exactly tinyBLAS's arithmetic (per 32-block an exact int32 dot,\n"
            "    // times fp32(d_a)*fp32(d_b), fused-added into one 8-lane accumulator, one hsum), so the\n"
            "    // result is the same bits either way and the faster single-row vec_dot keeps n == 1.\n"
            "#if !defined(__MMA__)\n"
            "    if (n < 2) {\n"
            "#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)\n"
            "        if (Atype == GGML_TYPE_Q8_0 || Atype == GGML_TYPE_Q4_0 || Atype == GGML_TYPE_Q5_0)\n"
            "            return false;\n"
            "#endif\n"
            "    }\n"
            "#endif\n"
        ),
        unifies=("single-row vec_dot vs batched tinyBLAS: tinyBLAS for every n (F32/F16/BF16/IQ4_NL), vec_dot "
                 "kept for one row only where it is the same arithmetic (Q8_0/Q4_0/Q5_0 on AVX2)"),
    ),
    SourcePatch(
        path=TILED,
        before=(
            "// GGML_CPU_TILED_MM_FORCE: test/bench only, take the tiled path even when unprofitable\n"
            "static bool ggml_tiled_matmul_forced(void) {\n"
        ),
        after=(
            "// GGML_CPU_TILED_MM_FORCE: unused since fucina's patch (GGML_FUCINA_TILED_MIN sets the floor)\n"
            "[[maybe_unused]] static bool ggml_tiled_matmul_forced(void) {\n"
        ),
        unifies="(no kernel change: the force switch is unused once fucina sets the batch floor below)",
    ),
)

#: The Q4_1 column-group kernel: declared, defined beside the one-column vec_dot, taken by mul_mat.
Q4_1_COLUMNS: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=QUANTS_H,
        before=_Q4_1_DECL + "\n",
        after=_Q4_1_DECL + "  // fucina: its column-group form follows\n" + _COLS_DECL + ";\n",
        unifies="(no kernel change: declares the Q4_1 column-group kernel)",
    ),
    SourcePatch(
        path=X86_QUANTS,
        before=_Q4_1_MIN + _Q4_1_MIN_TAIL,
        after=_Q4_1_MIN_FMA + _Q4_1_MIN_TAIL,
        unifies=("Q4_1 one-column vec_dot: its min term an explicit fmaf, the column-group kernel's arithmetic "
                 "(it serves groups of one)"),
    ),
    SourcePatch(
        path=X86_QUANTS,
        before=_Q4_1_END,
        after=_Q4_1_END[:-2] + "}  // ggml_vec_dot_q4_1_q8_1\n\n" + _COLS_KERNEL,
        unifies=("Q4_1 dot products: one column-group kernel (1-8 activation columns per weight row) whose "
                 "per-column arithmetic does not depend on the group size"),
    ),
    SourcePatch(
        path=CPU,
        before=_TMP_BEFORE,
        after=_COLS_LOOP,
        unifies=("Q4_1 and K-quant matmul: column groups (up to 8 for Q4_1, FUCINA_COLS_MAX for the K-quants) "
                 "for every batch size, a single-token step included"),
    ),
)


PATCHES = PATCHES + Q4_1_COLUMNS + KQUANT_COLUMNS + TILED_KQUANTS + GQA_HEADS


def patch_set_id(patches: tuple[SourcePatch, ...] = PATCHES) -> str:
    """A short hash of the patch set: a build records it, and a changed set means a rebuild."""
    h = hashlib.sha256()
    for p in patches:
        h.update(f"{p.path}\0{p.before}\0{p.after}\0".encode())
    return h.hexdigest()[:12]


def apply_patches(tree: Path, patches: tuple[SourcePatch, ...] = PATCHES) -> list[str]:
    """Apply ``patches`` to the llama.cpp tree at ``tree``; every target is checked before any is written.

    Returns one line per patch saying what it unified. Raises :class:`EnginePatchError` (and writes
    nothing) when a ``before`` text is missing or ambiguous.
    """
    texts: dict[str, str] = {}
    for p in patches:
        if p.path not in texts:
            f = tree / p.path
            if not f.is_file():
                raise EnginePatchError(f"{f}: not in the llama.cpp tree (wrong sources?)", param="tree")
            texts[p.path] = f.read_text()
        n = texts[p.path].count(p.before)
        if n != 1:
            raise EnginePatchError(
                f"{p.path}: the text to replace occurs {n} times, expected once "
                f"(not llama-cpp-python's pinned sources, or already patched): {p.before.splitlines()[0]!r}",
                param="tree")
        texts[p.path] = texts[p.path].replace(p.before, p.after)
    for rel, text in texts.items():
        (tree / rel).write_text(text)
    return [f"{p.path}: {p.unifies}" for p in patches]
