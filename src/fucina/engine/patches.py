"""The patch set that makes llama.cpp's CPU matmul batch-invariant: every batch size, one kernel path.

Speculative decoding verifies a draft of ``k`` tokens in one forward of ``k + 1`` rows and compares
the result with what plain decoding computes one row at a time. The stock CPU backend picks its
matmul kernel *by the number of rows*: ``vec_dot`` for one row, llamafile's tinyBLAS for two or
more, a tiled K-quant kernel for eight or more. Each kernel sums a dot product in its own order,
so a row's logits depend on how many rows share its forward and a near-tie can flip. Each patch
below removes one of those switches, so that the kernel chosen for a weight tensor depends on its
type only. Together with loading without CPU weight repacking (``use_extra_bufts=False``; the
repacked kernels split gemv for < 4 rows from gemm for 4+, and on this project's machines repacking
bought no measurable speed, BENCHMARKS.md "The cost of exactness") every row is bitwise the row a
single-token step computes, for any batch size (``fucina doctor`` checks 1-32 rows).

Each :class:`SourcePatch` names the text it replaces, which must occur exactly once in the pinned
sources: a changed upstream fails the build loudly instead of building something unpatched.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fucina.errors import FucinaError


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
        before="        enabled = env == NULL || atoi(env) != 0;\n",
        after=(
            "        // fucina: off unless asked for. On, it must serve every batch size (below), and for one\n"
            "        // row it is ~20% slower than vec_dot (BENCHMARKS.md), so vec_dot serves every size.\n"
            "        enabled = env != NULL && atoi(env) != 0;\n"
        ),
        unifies="tiled K-quant matmul (8+ rows) vs vec_dot (fewer): off by default, vec_dot for every batch",
    ),
    SourcePatch(
        path=_TILED,
        before=(
            "// GGML_CPU_TILED_MM_FORCE: test/bench only, take the tiled path even when unprofitable\n"
            "static bool ggml_tiled_matmul_forced(void) {\n"
        ),
        after=(
            "// GGML_CPU_TILED_MM_FORCE: unused since fucina's patch (the tiled path is all or nothing)\n"
            "[[maybe_unused]] static bool ggml_tiled_matmul_forced(void) {\n"
        ),
        unifies="(no kernel change: the force switch is unused once the batch floor below is gone)",
    ),
    SourcePatch(
        path=_TILED,
        before=(
            "    //  Profitable at rows >= 8, take even when unprofitable if we're forced\n"
            "    return rows >= 8 || ggml_tiled_matmul_forced();\n"
        ),
        after=(
            "    // fucina: all or nothing. Upstream takes the tiled kernel from 8 rows on, so a row of a\n"
            "    // 9-row verify and the same row of a 1-row step summed in different orders. When the\n"
            "    // tiled path is enabled (GGML_CPU_TILED_MM=1) it now serves every batch size: its\n"
            "    // per-element order over K slabs does not depend on how many rows share the tile.\n"
            "    GGML_UNUSED(rows);\n"
            "    return true;\n"
        ),
        unifies="tiled K-quant matmul's batch floor (rows >= 8): one path for every batch size when enabled",
    ),
)


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
