"""The K-quant patches (Q4_K, Q5_K, Q6_K: the tensors of the Q4_K_M and Q5_K_M files most people run).

One dot product for every batch size (``kernels/kquant_common.c``: exact integers per 256-value block,
then three float steps per block in block order) and three implementations of it: the one-column
``vec_dot`` and the column groups (:data:`KQUANT_COLUMNS`, C in ``kernels/kquant_*.c``), and ggml's tiled
kernel, which computes the same bits and so may serve any batch size (:data:`TILED_KQUANTS`, with
fucina's AMX microtile, ``kernels/tiled_amx.cpp``). See :mod:`fucina.engine.patches` for the whole set.
"""

from __future__ import annotations

from fucina.engine.source_patch import QUANTS_H, TILED, TILED_KERNEL, X86_QUANTS, SourcePatch, kernel_text

__all__ = ["KQUANT_COLUMNS", "TILED_KQUANTS"]

# The tiled K-quant kernel (ggml-cpu/tiled): upstream's fastest path for 8+ rows of Q2_K..Q6_K and IQ
# weights. Its arithmetic per (row, column) is exact integers per 256-value block and three float steps
# per block; fucina's one-column and column-group kernels for Q4_K/Q5_K/Q6_K compute exactly those steps
# (kernels/kquant_common.c), so for these types it may serve any batch size without changing a bit.
TILED_KQUANTS: tuple[SourcePatch, ...] = (
    SourcePatch(
        path=TILED,
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
        path=TILED,
        before="#if !defined(__AVX512VNNI__) && !defined(__AVX2__) && !defined(__AVX__)\n",
        after=(
            "// fucina: the AVX-only and scalar microtiles round differently (no fused steps), so the tiled\n"
            "// path runs only where its VNNI or AVX2+FMA microtile does, the arithmetic fucina's kernels share.\n"
            "#if !(defined(__AVX2__) && defined(__FMA__))\n"
        ),
        unifies="tiled K-quant matmul on CPUs without AVX2+FMA: off (vec_dot for every batch size there)",
    ),
    SourcePatch(
        path=TILED,
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
        path=TILED,
        before="static bool ggml_tiled_min_batch(int64_t rows) {\n",
        after=("// fucina: rows from which the tiled kernel beats the column groups (BENCHMARKS.md, the engine),\n"
               "// with its VNNI or AVX2 microtile and with the AMX one (tiled-kernel.cpp, fucina_tiled_amx).\n"
               "#define FUCINA_TILED_MIN_ROWS 20\n"
               "#define FUCINA_TILED_MIN_ROWS_AMX 8\n"
               "static bool ggml_tiled_min_batch(int64_t rows) {  // fucina: the floor below\n"),
        unifies="(no kernel change: the tiled kernel's default floor)",
    ),
    SourcePatch(
        path=TILED_KERNEL,
        before="        _mm512_store_ps(p, _mm512_add_ps(_mm512_load_ps(p), _mm512_mul_ps(result, d1_vec)));\n",
        after=("        // fucina: one fused step, as the AVX2 microtile and fucina's kernels take it (a separate\n"
               "        // mul and add round twice, or once where the compiler contracts them).\n"
               "        _mm512_store_ps(p, _mm512_fmadd_ps(result, d1_vec, _mm512_load_ps(p)));\n"),
        unifies="tiled kernel's VNNI and AVX2 microtiles: the same fused accumulate into the result buffer",
    ),
) + (
    SourcePatch(
        path=TILED_KERNEL,
        before=("template <int SUBBLK, bool HAS_MIN, int BIAS, bool ACTBIAS>\n"
                "void tiled_run_microtile(const tiled_tile_src0 & src0, const tiled_tile_src1 & src1,\n"
                "                         int i0, int j0, int num_k, int slab, float * buf, int buf_stride) {\n"
                "    const bool standard = (num_k == 1);\n"),
        after=(kernel_text("k4_scales.c") + kernel_text("tiled_amx.cpp") + "\n"
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
        path=TILED_KERNEL,
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
        path=TILED,
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
        path=TILED,
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
        path=TILED,
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
        path=TILED,
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


# The end of the x86 quants file (its last kernel, iq4_xs): the K-quant column-group kernels follow it.
_X86_QUANTS_END = "    ggml_vec_dot_iq4_xs_q8_K_generic(n, s, bs, vx, bx, vy, by, nrc);\n#endif\n}\n"
_Q6_K_DECL = ("void ggml_vec_dot_q6_K_q8_K(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "size_t bx, const void * GGML_RESTRICT vy, size_t by, int nrc);\n")
_CAST_COLS = ("(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, "
              "const void * GGML_RESTRICT vy, size_t by, int ncols)")
#: The kernels' C: shared helpers, the groups in their ymm and zmm forms, the entry points.
_KQUANT_KERNELS = (kernel_text("k4_scales.c") + kernel_text("kquant_common.c") + kernel_text("kquant_one.c")
                   + "\n#define FUCINA_WIDE 0\n" + kernel_text("kquant_groups.c") + "#undef FUCINA_WIDE\n"
                   + "\n#define FUCINA_WIDE 1\n" + kernel_text("kquant_groups.c") + "#undef FUCINA_WIDE\n"
                   + kernel_text("kquant_entry.c"))
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
        path=QUANTS_H,
        before=_Q6_K_DECL,
        after=_Q6_K_DECL[:-1] + "  // fucina: the K-quants' column-group forms follow\n" + _KQUANT_DECLS,
        unifies="(no kernel change: declares the K-quant column-group kernels and their group size)",
    ),
    SourcePatch(
        path=X86_QUANTS,
        before=_X86_QUANTS_END,
        after=_X86_QUANTS_END[:-2] + "}  // ggml_vec_dot_iq4_xs_q8_K\n" + _KQUANT_KERNELS,
        unifies=("Q4_K/Q5_K/Q6_K dot products: column-group kernels (1-8 activation columns per weight row, "
                 "the row unpacked once) whose every column is the canonical dot product (kquant_common.c)"),
    ),
    SourcePatch(
        path=X86_QUANTS,
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
        path=X86_QUANTS,
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

