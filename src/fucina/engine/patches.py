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

Each :class:`SourcePatch` names the text it replaces, which must occur exactly once in the pinned
sources: a changed upstream fails the build loudly instead of building something unpatched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fucina.errors import FucinaError

_KERNELS = Path(__file__).with_name("kernels")


def _kernel(name: str) -> str:
    """The C text of ``kernels/<name>``, inserted into the llama.cpp tree by a patch below."""
    return (_KERNELS / name).read_text()


class EnginePatchError(FucinaError):
    """The pinned sources do not contain the text a patch replaces (wrong version or already patched)."""


@dataclass(frozen=True)
class SourcePatch:
    #: File inside the llama.cpp tree (``vendor/llama.cpp`` of the llama-cpp-python sdist).
    path: str
    before: str
    after: str
    #: Which kernel paths this makes one, and why that makes a row's result independent of the batch.
    unifies: str


_SGEMM = "ggml/src/ggml-cpu/llamafile/sgemm.cpp"
_TILED = "ggml/src/ggml-cpu/tiled/tiled.cpp"
_QUANTS_H = "ggml/src/ggml-cpu/quants.h"
_X86_QUANTS = "ggml/src/ggml-cpu/arch/x86/quants.c"
_CPU = "ggml/src/ggml-cpu/ggml-cpu.c"

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
_COLS_LOOP = _kernel("mul_mat_cols.c")

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
        path=_SGEMM,
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
        path=_TILED,
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

# The tiled K-quant kernel (ggml-cpu/tiled): upstream's fastest path for 8+ rows of Q2_K..Q6_K and IQ
# weights. Its arithmetic per (row, column) is exact integers per 256-value block and three float steps
# per block; fucina's one-column and column-group kernels for Q4_K/Q5_K/Q6_K compute exactly those steps
# (kernels/kquant_common.c), so for these types it may serve any batch size without changing a bit.
_TILED_KERNEL = "ggml/src/ggml-cpu/tiled/tiled-kernel.cpp"

TILED_KQUANTS: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=_TILED,
        before=(
            "    switch (src0->type) {\n"
            "        case GGML_TYPE_Q6_K:\n"
            "        case GGML_TYPE_Q5_K:\n"
            "        case GGML_TYPE_Q4_K:\n"
            "        case GGML_TYPE_Q3_K:\n"
            "        case GGML_TYPE_Q2_K:\n"
            "        case GGML_TYPE_IQ4_XS:\n"
            "        case GGML_TYPE_IQ2_XXS:\n"
            "        case GGML_TYPE_IQ2_XS:\n"
            "        case GGML_TYPE_IQ2_S:\n"
            "        case GGML_TYPE_IQ3_XXS:\n"
            "        case GGML_TYPE_IQ3_S:\n"
            "        case GGML_TYPE_IQ1_S:\n"
            "        case GGML_TYPE_IQ1_M:\n"
            "            return true;\n"
            "        default:\n"
            "            return false;\n"
            "    }\n"
        ),
        after=(
            "    // fucina: only the K-quants whose vec_dot and column-group kernels compute this kernel's\n"
            "    // arithmetic (fucina/engine/kernels/kquant_common.c); the other types keep vec_dot for every\n"
            "    // batch size. (Upstream returned from the switch, so the src1 checks below never ran.)\n"
            "    switch (src0->type) {\n"
            "        case GGML_TYPE_Q6_K:\n"
            "        case GGML_TYPE_Q5_K:\n"
            "        case GGML_TYPE_Q4_K:\n"
            "            break;\n"
            "        default:\n"
            "            return false;\n"
            "    }\n"
        ),
        unifies=("tiled K-quant matmul vs vec_dot for Q2_K/Q3_K/IQ weights: vec_dot for every batch size; the "
                 "tiled kernel only for the three types whose other kernels share its arithmetic"),
    ),
    SourcePatch(
        path=_TILED,
        before="#if !defined(__AVX512VNNI__) && !defined(__AVX2__) && !defined(__AVX__)\n",
        after=(
            "// fucina: the AVX-only and scalar microtiles round differently (no fused steps), so the tiled\n"
            "// path runs only where its VNNI or AVX2+FMA microtile does, the arithmetic fucina's kernels share.\n"
            "#if !(defined(__AVX2__) && defined(__FMA__))\n"
        ),
        unifies="tiled K-quant matmul on CPUs without AVX2+FMA: off (vec_dot for every batch size there)",
    ),
    SourcePatch(
        path=_TILED,
        before=(
            "    //  Profitable at rows >= 8, take even when unprofitable if we're forced\n"
            "    return rows >= 8 || ggml_tiled_matmul_forced();\n"
        ),
        after=(
            "    // fucina: the tiled kernel computes the column groups' bits (kquant_common.c), so where it\n"
            "    // takes over is a question of speed alone: below FUCINA_TILED_MIN_ROWS the column groups are\n"
            "    // faster (it pads every band to 16 columns). GGML_FUCINA_TILED_MIN=N moves the floor (the\n"
            "    // tests run every batch size through both paths and compare the bits).\n"
            "    static int fucina_floor = -1;  // a benign race: every thread computes the same value\n"
            "    if (fucina_floor < 0) {\n"
            "        const char * env = getenv(\"GGML_FUCINA_TILED_MIN\");\n"
            "        fucina_floor = env != NULL && atoi(env) > 0 ? atoi(env)\n"
            "                     : fucina_tiled_amx() ? FUCINA_TILED_MIN_ROWS_AMX : FUCINA_TILED_MIN_ROWS;\n"
            "    }\n"
            "    return rows >= fucina_floor;\n"
        ),
        unifies=("tiled K-quant matmul's batch floor: a speed choice only, since its rows are the column "
                 "groups' and vec_dot's bits (Q4_K/Q5_K/Q6_K)"),
    ),
    SourcePatch(
        path=_TILED,
        before="static bool ggml_tiled_min_batch(int64_t rows) {\n",
        after=("// fucina: rows from which the tiled kernel beats the column groups (BENCHMARKS.md, the engine),\n"
               "// with its VNNI or AVX2 microtile and with the AMX one (tiled-kernel.cpp, fucina_tiled_amx).\n"
               "#define FUCINA_TILED_MIN_ROWS 20\n"
               "#define FUCINA_TILED_MIN_ROWS_AMX 8\n"
               "static bool ggml_tiled_min_batch(int64_t rows) {  // fucina: the floor below\n"),
        unifies="(no kernel change: the tiled kernel's default floor)",
    ),
    SourcePatch(
        path=_TILED_KERNEL,
        before="        _mm512_store_ps(p, _mm512_add_ps(_mm512_load_ps(p), _mm512_mul_ps(result, d1_vec)));\n",
        after=("        // fucina: one fused step, as the AVX2 microtile and fucina's kernels take it (a separate\n"
               "        // mul and add round twice, or once where the compiler contracts them).\n"
               "        _mm512_store_ps(p, _mm512_fmadd_ps(result, d1_vec, _mm512_load_ps(p)));\n"),
        unifies="tiled kernel's VNNI and AVX2 microtiles: the same fused accumulate into the result buffer",
    ),
) + (
    SourcePatch(
        path=_TILED_KERNEL,
        before=("template <int SUBBLK, bool HAS_MIN, int BIAS, bool ACTBIAS>\n"
                "void tiled_run_microtile(const tiled_tile_src0 & src0, const tiled_tile_src1 & src1,\n"
                "                         int i0, int j0, int num_k, int slab, float * buf, int buf_stride) {\n"
                "    const bool standard = (num_k == 1);\n"),
        after=(_kernel("k4_scales.c") + _kernel("tiled_amx.cpp") + "\n"
               "// fucina: whether the AMX microtile serves this process (tiled.cpp sets its row floor by it).\n"
               "extern \"C\" bool fucina_tiled_amx(void) {\n"
               "#if FUCINA_AMX_BUILD\n"
               "    return fucina_amx_on();\n"
               "#else\n"
               "    return false;\n"
               "#endif\n"
               "}\n\n"
               "template <int SUBBLK, bool HAS_MIN, int BIAS, bool ACTBIAS>\n"
               "void tiled_run_microtile(const tiled_tile_src0 & src0, const tiled_tile_src1 & src1,\n"
               "                         int i0, int j0, int num_k, int slab, float * buf, int buf_stride) {\n"
               "#if FUCINA_AMX_BUILD\n"
               "    // fucina: the AMX microtile where the CPU runs it (the VNNI microtile's bits, tiled_amx.cpp)\n"
               "    if constexpr (FUCINA_AMX_FORMAT(SUBBLK, HAS_MIN, BIAS)) {\n"
               "        if (fucina_amx_on()) {\n"
               "            fucina_amx_microtile<SUBBLK, HAS_MIN>(src0, src1, i0, j0, num_k, slab, buf, buf_stride);\n"
               "            return;\n"
               "        }\n"
               "    }\n"
               "#endif\n"
               "    const bool standard = (num_k == 1);\n"),
        unifies=("tiled K-quant microtile on AMX CPUs: tile-unit integer sums of the same S1/S2, the VNNI "
                 "microtile's float steps (Q4_K/Q5_K/Q6_K), so its rows are the other kernels' bits"),
    ),
    SourcePatch(
        path=_TILED_KERNEL,
        before=("void tiled_repack_src0(tiled_tile_src0 * tile, int n_rows, int num_k, int BIAS, bool corr) {\n"
                "#if defined(__AVX2__)\n"),
        after=("void tiled_repack_src0(tiled_tile_src0 * tile, int n_rows, int num_k, int BIAS, bool corr) {\n"
               "#if FUCINA_AMX_BUILD\n"
               "    // fucina: nothing to repack for the AMX microtile (fucina_amx_unpack wrote its planes)\n"
               "    if (FUCINA_AMX_FORMAT(SUBBLK, SUBBLK == 32, BIAS) && fucina_amx_on()) {\n"
               "        return;\n"
               "    }\n"
               "#endif\n"
               "#if defined(__AVX2__)\n"),
        unifies="(no kernel change: the weight repack has nothing to do for the AMX microtile)",
    ),
    SourcePatch(
        path=_TILED,
        before="#define UNUSED GGML_UNUSED\n",
        after=("#define UNUSED GGML_UNUSED  // fucina: and the AMX microtile's declarations below\n\n"
               "// fucina: the AMX microtile (tiled-kernel.cpp, fucina/engine/kernels/tiled_amx.cpp): whether it\n"
               "// serves this process, and its unpack of the three K-quants straight into its weight planes.\n"
               "extern \"C\" bool fucina_tiled_amx(void);\n"
               "void fucina_amx_unpack(const block_q4_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k);\n"
               "void fucina_amx_unpack(const block_q5_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k);\n"
               "void fucina_amx_unpack(const block_q6_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k);\n"),
        unifies="(no kernel change: declares the AMX microtile's switch and unpack)",
    ),
) + tuple(
    SourcePatch(
        path=_TILED,
        before=(f"static void tiled_unpack_src0(const block_{t} * rows, int64_t row_stride, int n_rows, "
                "tiled_tile_src0 * tile, int num_k) {\n    GGML_ASSERT(n_rows <= TILED_TILE_ROWS);\n"),
        after=(f"static void tiled_unpack_src0(const block_{t} * rows, int64_t row_stride, int n_rows, "
               "tiled_tile_src0 * tile, int num_k) {  // fucina: or the AMX unpack\n"
               "    GGML_ASSERT(n_rows <= TILED_TILE_ROWS);\n"
               "    if (fucina_tiled_amx()) {  // fucina: the AMX microtile's planes instead (the same integers)\n"
               "        fucina_amx_unpack(rows, row_stride, n_rows, tile, num_k);\n"
               "        return;\n"
               "    }\n"),
        unifies=f"(no kernel change: {t} weights unpacked for the AMX microtile where it runs)",
    )
    for t in ("q4_K", "q5_K", "q6_K")
) + (
    SourcePatch(
        path=_TILED,
        before=("            // result buffer zeroed once per macrotile\n"
                "            memset(ws->acc, 0, (size_t)TILED_TILE_ROWS * TILED_TILE_ROWS * sizeof(float));\n"),
        after=("            // result buffer zeroed once per macrotile; fucina: only the rows and the 16-padded\n"
               "            // columns the microtiles write and the store reads (a narrow band zeroed 256 KB for\n"
               "            // 16 columns; every result still starts from +0.0)\n"
               "            {\n"
               "                const int n0p = (n_src0 + TILED_MICRO - 1) / TILED_MICRO * TILED_MICRO;\n"
               "                const int n1p = (n_src1 + TILED_MICRO - 1) / TILED_MICRO * TILED_MICRO;\n"
               "                for (int i = 0; i < n0p; i++) {\n"
               "                    memset(ws->acc + (size_t) i * TILED_TILE_ROWS, 0, (size_t) n1p * sizeof(float));\n"
               "                }\n"
               "            }\n"),
        unifies="(no kernel change: the tiled kernel zeroes only the part of its result buffer a window uses)",
    ),
    SourcePatch(
        path=_TILED,
        before=("static int ggml_tiled_narrow_k_extent(int64_t n_rows, int64_t ne00) {\n"
                "    int l1 = 31 * 1024;"),
        after=("static int ggml_tiled_narrow_k_extent(int64_t n_rows, int64_t ne00) {\n"
               "    // fucina: with the AMX microtile, the longest run of blocks the tile buffers hold (16 slabs)\n"
               "    // that divides the row: 16 weight rows are read in runs of up to 4096 values (whole rows\n"
               "    // of most models: one sequential stream), not L1-sized pieces of 16 rows apart. Blocks\n"
               "    // still meet each result in row order, so no bit changes.\n"
               "    if (fucina_tiled_amx()) {\n"
               "        for (int ke = 16 * TILED_TILE_K; ke > TILED_TILE_K; ke -= TILED_TILE_K) {\n"
               "            if (ne00 % ke == 0) {\n"
               "                return ke;\n"
               "            }\n"
               "        }\n"
               "        return TILED_TILE_K;\n"
               "    }\n"
               "    int l1 = 31 * 1024;"),
        unifies="(no kernel change: the tiled kernel's narrow path reads longer runs of a row under AMX)",
    ),
)

#: The Q4_1 column-group kernel: declared, defined beside the one-column vec_dot, taken by mul_mat.
Q4_1_COLUMNS: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=_QUANTS_H,
        before=_Q4_1_DECL + "\n",
        after=_Q4_1_DECL + "  // fucina: its column-group form follows\n" + _COLS_DECL + ";\n",
        unifies="(no kernel change: declares the Q4_1 column-group kernel)",
    ),
    SourcePatch(
        path=_X86_QUANTS,
        before=_Q4_1_MIN + _Q4_1_MIN_TAIL,
        after=_Q4_1_MIN_FMA + _Q4_1_MIN_TAIL,
        unifies=("Q4_1 one-column vec_dot: its min term an explicit fmaf, the column-group kernel's arithmetic "
                 "(it serves groups of one)"),
    ),
    SourcePatch(
        path=_X86_QUANTS,
        before=_Q4_1_END,
        after=_Q4_1_END[:-2] + "}  // ggml_vec_dot_q4_1_q8_1\n\n" + _COLS_KERNEL,
        unifies=("Q4_1 dot products: one column-group kernel (1-8 activation columns per weight row) whose "
                 "per-column arithmetic does not depend on the group size"),
    ),
    SourcePatch(
        path=_CPU,
        before=_TMP_BEFORE,
        after=_COLS_LOOP,
        unifies=("Q4_1 and K-quant matmul: column groups (up to 8 for Q4_1, FUCINA_COLS_MAX for the K-quants) "
                 "for every batch size, a single-token step included"),
    ),
)

# The end of the x86 quants file (its last kernel, iq4_xs): the K-quant column-group kernels follow it.
_X86_QUANTS_END = "    ggml_vec_dot_iq4_xs_q8_K_generic(n, s, bs, vx, bx, vy, by, nrc);\n#endif\n}\n"
_Q6_K_DECL = ("void ggml_vec_dot_q6_K_q8_K(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);\n")
_CAST_COLS = ("(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "const void * GGML_RESTRICT vy, size_t by, int ncols)")
#: The kernels' C: shared helpers, the groups in their ymm and zmm forms, the entry points.
_KQUANT_KERNELS = (_kernel("k4_scales.c") + _kernel("kquant_common.c") + _kernel("kquant_one.c")
                   + "\n#define FUCINA_WIDE 0\n" + _kernel("kquant_groups.c") + "#undef FUCINA_WIDE\n"
                   + "\n#define FUCINA_WIDE 1\n" + _kernel("kquant_groups.c") + "#undef FUCINA_WIDE\n"
                   + _kernel("kquant_entry.c"))
_KQUANT_DECLS = (
    "// fucina: column-group kernels: one weight row times 1..FUCINA_COLS_MAX activation columns, each\n"
    "// column's result bit for bit the one-column kernel's (fucina/engine/kernels/kquant_*.c). Groups of\n"
    "// 8 measured fastest (16 spill; the batch only decides how many groups a forward takes).\n"
    "#define FUCINA_COLS_MAX 8\n"
    f"typedef void (*fucina_vec_dot_cols_t){_CAST_COLS};\n"
    + "".join(f"void ggml_vec_dot_{t}_q8_K_cols{_CAST_COLS};\n" for t in ("q4_K", "q5_K", "q6_K"))
)

#: The K-quant column-group kernels (Q4_K, Q5_K, Q6_K): declared, defined after the Q4_1 one, taken by
#: mul_mat's column-group loop above.
KQUANT_COLUMNS: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=_QUANTS_H,
        before=_Q6_K_DECL,
        after=_Q6_K_DECL[:-1] + "  // fucina: the K-quants' column-group forms follow\n" + _KQUANT_DECLS,
        unifies="(no kernel change: declares the K-quant column-group kernels and their group size)",
    ),
    SourcePatch(
        path=_X86_QUANTS,
        before=_X86_QUANTS_END,
        after=_X86_QUANTS_END[:-2] + "}  // ggml_vec_dot_iq4_xs_q8_K\n" + _KQUANT_KERNELS,
        unifies=("Q4_K/Q5_K/Q6_K dot products: column-group kernels (1-8 activation columns per weight row, "
                 "the row unpacked once) whose every column is the canonical dot product (kquant_common.c)"),
    ),
    SourcePatch(
        path=_X86_QUANTS,
        before='#include "../../ggml-cpu-impl.h"\n',
        after=('#include "../../ggml-cpu-impl.h"  // fucina: and the K-quant declarations below\n\n'
               "#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)\n"
               "// fucina: the one-column K-quant kernels the vec_dot functions below call (defined at the end).\n"
               "static inline float fucina_q4_K_one(const int nb, const block_q4_K * GGML_RESTRICT x,\n"
               "                                    const block_q8_K * GGML_RESTRICT y);\n"
               "static inline float fucina_q6_K_one(const int nb, const block_q6_K * GGML_RESTRICT x,\n"
               "                                    const block_q8_K * GGML_RESTRICT y);\n"
               "static inline void fucina_q5_K_group_ymm(const int nb, float * GGML_RESTRICT s, size_t bs,\n"
               "        const block_q5_K * GGML_RESTRICT x, const void * GGML_RESTRICT vy, size_t by, const int ncols);\n"
               "#endif\n"),
        unifies="(no kernel change: declares the one-column K-quant kernels defined at the end of the file)",
    ),
) + tuple(
    SourcePatch(
        path=_X86_QUANTS,
        before=head,
        after=head[:-1] + "  // fucina: the canonical dot product below\n" + (
            "#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)\n"
            "    // fucina: the canonical arithmetic the column groups and the tiled kernel share, for one column\n"
            "    // (fucina/engine/kernels/kquant_common.c, kquant_one.c); upstream's body follows, unused.\n"
            f"    {call}\n"
            "    UNUSED(bs); UNUSED(bx); UNUSED(by);\n"
            "    return;\n"
            "#endif\n"
        ),
        unifies=(f"{t} one-column vec_dot: the canonical arithmetic of the column groups and the tiled kernel "
                 "(AVX2+FMA), so a single-token step computes what a batch of any size computes"),
    )
    for t, head, call in (
        ("q4_K", "void ggml_vec_dot_q4_K_q8_K(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
                 "size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc) {\n    assert(n % QK_K == 0);\n",
         "*s = fucina_q4_K_one(n / QK_K, (const block_q4_K *) vx, (const block_q8_K *) vy);"),
        ("q5_K", "void ggml_vec_dot_q5_K_q8_K(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
                 "size_t bx, const void * GGML_RESTRICT vy,  size_t by, int nrc) {\n    assert(n % QK_K == 0);\n",
         "fucina_q5_K_group_ymm(n / QK_K, s, 0, (const block_q5_K *) vx, vy, 0, 1);"),
        ("q6_K", "void ggml_vec_dot_q6_K_q8_K(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
                 "size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc) {\n    assert(n % QK_K == 0);\n",
         "*s = fucina_q6_K_one(n / QK_K, (const block_q6_K *) vx, (const block_q8_K *) vy);"),
    )
)

PATCHES = PATCHES + Q4_1_COLUMNS + KQUANT_COLUMNS + TILED_KQUANTS


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
