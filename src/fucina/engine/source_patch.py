"""What a patch of the llama.cpp sources is (:class:`SourcePatch`), and the files the patch set edits.

The patch set itself is :mod:`fucina.engine.patches` (sgemm and Q4_1, the assembly),
:mod:`fucina.engine.kquant_patches` (the K-quant kernels) and :mod:`fucina.engine.attention_patches`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fucina.errors import FucinaError

__all__ = ["EnginePatchError", "SourcePatch", "kernel_text", "SGEMM", "TILED", "TILED_KERNEL", "QUANTS_H",
           "X86_QUANTS", "CPU"]

_KERNELS = Path(__file__).with_name("kernels")


def kernel_text(name: str) -> str:
    """The C text of ``kernels/<name>``, inserted into the llama.cpp tree by a patch."""
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


SGEMM = "ggml/src/ggml-cpu/llamafile/sgemm.cpp"
TILED = "ggml/src/ggml-cpu/tiled/tiled.cpp"
TILED_KERNEL = "ggml/src/ggml-cpu/tiled/tiled-kernel.cpp"
QUANTS_H = "ggml/src/ggml-cpu/quants.h"
X86_QUANTS = "ggml/src/ggml-cpu/arch/x86/quants.c"
CPU = "ggml/src/ggml-cpu/ggml-cpu.c"
