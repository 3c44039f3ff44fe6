"""The attention patch: grouped-query attention's K/V heads multiplied by their query heads in one call.

Part of the patch set (:mod:`fucina.engine.patches`); changes no arithmetic, only how many calls share it.
"""

from __future__ import annotations

from fucina.engine.source_patch import CPU, SourcePatch

__all__ = ["GQA_HEADS"]

# Grouped-query attention: each K/V head serves r2 query heads (Qwen2.5 1.5B: 12 query heads on 2 KV heads),
# and mul_mat broadcast it by calling tinyBLAS once per query head, so a decode step read and widened every
# cached K/V row r2 times and paid two thread barriers per call (672 calls a step on Qwen 1.5B). The r2 query
# heads of one KV head are adjacent columns of src1 and of dst, so one call with r2 times the columns
# computes the same outputs: tinyBLAS sums each C[i, j] over k in one order whatever tile covers it (the
# sgemm patch in patches.py relies on the same fact), so every logit keeps its bits (tests/test_exact_engine.py
# compares the two). GGML_FUCINA_GQA=0 calls once per head again.
_GQA_SETUP_BEFORE = "    const bool src1_cont = ggml_is_contiguous(src1);\n\n    if (src1_cont) {\n"
_GQA_SETUP_AFTER = (
    "    const bool src1_cont = ggml_is_contiguous(src1);\n\n"
    "    // fucina: the r2 query heads that share a K/V head in one call (patches.py, GQA_HEADS): their src1\n"
    "    // and dst columns are adjacent when dst is contiguous per head. Same outputs, same bits.\n"
    "    static int fucina_gqa = -1;  // a benign race: every thread computes the same value\n"
    "    if (fucina_gqa < 0) {\n"
    "        const char * env = getenv(\"GGML_FUCINA_GQA\");\n"
    "        fucina_gqa = !(env != NULL && atoi(env) == 0);\n"
    "    }\n"
    "    const int64_t fucina_heads = fucina_gqa && nb2 == (size_t) ne1*nb1 ? r2 : 1;\n\n"
    "    if (src1_cont) {\n"
)
_GQA_CALL = ("        for (int64_t i13 = 0; i13 < ne13; i13++)\n"
             "            for (int64_t i12 = 0; i12 < ne12; i12{step})\n"
             "                if (!llamafile_sgemm(params,\n"
             "                                     ne01, ne11{cols}, ne00/ggml_blck_size(src0->type),\n"
             "                                     (const char *)src0->data + i12/r2*nb02 + i13/r3*nb03,\n"
             "                                     nb01/ggml_type_size(src0->type),\n"
             "{src1}")
_GQA_SRC1 = ("                                     (const char *)src1->data + i12*nb12 + i13*nb13,\n",
             "                                     (const char *)wdata + (i12*ne11 + i13*ne12*ne11)*row_size,\n")

GQA_HEADS: tuple[SourcePatch, ...] = (
    SourcePatch(path=CPU, before=_GQA_SETUP_BEFORE, after=_GQA_SETUP_AFTER,
                unifies="(no kernel change: whether mul_mat groups the query heads of one K/V head, below)"),
) + tuple(
    SourcePatch(path=CPU, before=_GQA_CALL.format(step="++", cols="", src1=src1),
                after=("        // fucina: fucina_heads query heads a call (1 without grouped-query attention)\n"
                       + _GQA_CALL.format(step=" += fucina_heads", cols="*fucina_heads", src1=src1)),
                unifies=("attention matmuls under grouped-query attention: one tinyBLAS call per K/V head "
                         "instead of per query head; each output is the same sum in the same order"))
    for src1 in _GQA_SRC1
)

