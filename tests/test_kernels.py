"""The patched engine's column-group kernels, called directly: every column is bitwise the one-column kernel's.

For each weight type with a column-group kernel, random weight rows (quantized by ggml's own reference
quantizer) meet random activation columns (quantized by the CPU backend, as mul_mat does), and for
every group size 1..8 the kernel's column c must be the very float ``vec_dot`` gives for column c
alone, in both forms of the K-quant kernels (ymm and zmm). The comparison is bitwise, so it sees a
changed summation order: the last test shows that the one-column kernel itself gives other bits when
only the order of the blocks it sums changes.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@dataclass(frozen=True)
class Kernel:
    weight: str  # ggml type name of the weights
    act: str  # the activations' type (vec_dot_type)
    block: int  # values per block
    weight_bytes: int  # bytes per weight block
    act_bytes: int  # bytes per activation block
    max_cols: int  # the build's group limit for the type

    @property
    def one(self) -> str:
        return f"ggml_vec_dot_{self.weight}_{self.act}"


KERNELS = (
    Kernel("q4_1", "q8_1", 32, 20, 36, 8),
    Kernel("q4_K", "q8_K", 256, 144, 292, 8),
    Kernel("q5_K", "q8_K", 256, 176, 292, 8),
    Kernel("q6_K", "q8_K", 256, 210, 292, 8),
)
N = 1024  # values per row: 4 K-quant blocks, 32 Q4_1 blocks
ROWS = 24
COLS = 16


@pytest.fixture(scope="module")
def libs():
    """The patched engine's ggml libraries (the test needs its kernels; in CI they must be there)."""
    return load_libs()


def load_libs():
    from fucina.engine_selection import active_engine

    eng = active_engine()
    lib = eng.location / "lib" if eng.location else None
    if not eng.batch_invariant_build or lib is None or not (lib / "libggml-cpu.so").exists():
        if os.environ.get("FUCINA_REQUIRE_EXACT") == "1":
            pytest.fail(f"the patched engine is not the one in use ({eng.describe()})")
        pytest.skip("needs the patched engine (python -m fucina.engine build)")
    base = ctypes.CDLL(str(lib / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(lib / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    cpu.ggml_cpu_init()
    return base, cpu


def _quantize(fn, values: np.ndarray, block_bytes: int, block: int) -> np.ndarray:
    out = np.zeros(values.size // block * block_bytes, dtype=np.uint8)
    fn(values.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(values.size))
    return out


def _data(libs, k: Kernel, seed: int):
    """(weight rows, activation columns) as quantized byte arrays, one row/column per array row."""
    base, cpu = libs
    rng = np.random.default_rng(seed)
    wq = getattr(base, f"quantize_row_{k.weight}_ref")
    aq = getattr(cpu, f"quantize_row_{k.act}")
    wq.restype = aq.restype = None
    # Heavy-tailed values, as real weights and activations are (outliers stress the scales).
    w = (rng.standard_normal((ROWS, N)) * rng.choice([0.5, 1, 4], size=(ROWS, N), p=[0.3, 0.65, 0.05]))
    a = rng.standard_normal((COLS, N)) * 3
    rows = np.stack([_quantize(wq, r.astype(np.float32), k.weight_bytes, k.block) for r in w])
    cols = np.stack([_quantize(aq, c.astype(np.float32), k.act_bytes, k.block) for c in a])
    return rows, cols


STRIDE = 3  # results at s[c*bs]: a stride other than 1 checks that the kernel honours bs


def _group(cols_fn, row: np.ndarray, group: np.ndarray, g: int) -> np.ndarray:
    """The column-group kernel's g results for one weight row and g contiguous activation columns."""
    group = np.ascontiguousarray(group)
    out = np.full(g * STRIDE, np.nan, dtype=np.float32)
    cols_fn(ctypes.c_int(N), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(STRIDE),
            row.ctypes.data_as(ctypes.c_void_p), group.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_size_t(group.shape[1]), ctypes.c_int(g))
    return out[::STRIDE]


def _one(cpu, k: Kernel, row: np.ndarray, col: np.ndarray) -> np.float32:
    out = np.zeros(1, dtype=np.float32)
    n = row.size // k.weight_bytes * k.block  # N, or another whole number of blocks
    getattr(cpu, k.one)(ctypes.c_int(n), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(0),
                        row.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(0),
                        col.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(0), ctypes.c_int(1))
    return out[0]


@pytest.mark.parametrize("k", KERNELS, ids=lambda k: k.weight)
def test_every_column_of_every_group_is_the_one_column_result(libs, k):
    check_every_group(libs, k)


@pytest.mark.parametrize("form", ["0", "1"])
def test_both_forms_of_the_k_quant_groups_give_the_one_column_result(libs, form):
    """The ymm and zmm forms (picked once per CPU; GGML_FUCINA_KQUANT_ZMM forces one), each in a fresh
    process since the choice is made at the first call. Without AVX-512 both runs take the ymm form."""
    code = "import tests.test_kernels as t; libs = t.load_libs(); [t.check_every_group(libs, k) for k in t.KERNELS[1:]]; print('ok')"
    env = {**os.environ, "GGML_FUCINA_KQUANT_ZMM": form}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def check_every_group(libs, k: Kernel) -> None:
    """For every group size and both ends of the column block, the group's columns are bitwise the
    one-column kernel's."""
    _, cpu = libs
    rows, cols = _data(libs, k, seed=sum(map(ord, k.weight)))
    cols_fn = getattr(cpu, f"{k.one}_cols")
    single = np.array([[_one(cpu, k, r, c) for c in cols] for r in rows], dtype=np.float32)
    assert np.isfinite(single).all() and np.abs(single).max() > 0
    for g in range(1, k.max_cols + 1):
        for start in (0, COLS - g):  # groups at both ends of the column block
            group = np.ascontiguousarray(cols[start:start + g])
            for i, r in enumerate(rows):
                got = _group(cols_fn, r, group, g)
                want = single[i, start:start + g]
                assert got.tobytes() == want.tobytes(), (k.weight, g, start, i, got - want)


@pytest.mark.parametrize("k", KERNELS, ids=lambda k: k.weight)
def test_the_comparison_sees_a_changed_summation_order(libs, k):
    """The same dot product summed over the blocks in reverse order: other bits on some rows. A kernel
    that reordered its float sums would fail the test above the same way."""
    _, cpu = libs
    rows, cols = _data(libs, k, seed=7)
    nb = N // k.block

    def reversed_blocks(x: np.ndarray, size: int) -> np.ndarray:
        return np.ascontiguousarray(x.reshape(nb, size)[::-1].reshape(-1))

    differ = 0
    for r in rows:
        for c in cols[:4]:
            a = _one(cpu, k, r, c)
            b = _one(cpu, k, reversed_blocks(r, k.weight_bytes), reversed_blocks(c, k.act_bytes))
            assert abs(float(a) - float(b)) <= 1e-4 * max(1.0, abs(float(a)))  # the same sum, reordered
            differ += a.tobytes() != b.tobytes()
    assert differ > 0


# -- the canonical arithmetic, modelled exactly ---------------------------------------------------------
#
# fucina/engine/kernels/kquant_common.c defines the K-quant dot product every kernel of the patched engine
# computes (vec_dot, the column groups, ggml's tiled kernel): exact integers per 256-value block, then
# three float32 steps per block in block order. The model below computes it from the bytes with Python
# integers and exactly rounded float32 operations (an fma rounds once), so a kernel that summed in
# another order, or rounded a step twice, gives other bits.

def _f32(x) -> np.float32:
    return np.float32(x)


def _fma(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """float32 fma, rounded once: the exact a*b + c, to nearest, ties to even."""
    from fractions import Fraction

    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    guess = np.float32(float(exact))
    cands = (guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf)))
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - exact), int(v.view(np.uint32)) & 1))


def _q8_K(col: np.ndarray, i: int) -> tuple[np.float32, np.ndarray]:
    blk = col[i * 292:(i + 1) * 292]
    return blk[:4].view(np.float32)[0], blk[4:260].view(np.int8).astype(np.int64)


def _k4_scales_mins(q: np.ndarray) -> tuple[list[int], list[int]]:
    """ggml's get_scale_min_k4 for the 8 sub-blocks of a Q4_K/Q5_K block."""
    sc, mn = [], []
    for j in range(8):
        if j < 4:
            sc.append(int(q[j]) & 63)
            mn.append(int(q[j + 4]) & 63)
        else:
            sc.append((int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4))
            mn.append((int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4))
    return sc, mn


def _block_ints(k: Kernel, blk: np.ndarray, a: np.ndarray) -> tuple[np.float32, np.float32, int, int]:
    """(x.d, x.dmin, S1, S2) of one weight block against one q8_K block's quants ``a`` (S2 = 0 without mins)."""
    d = blk[0:2].view(np.float16)[0].astype(np.float32)
    if k.weight == "q6_K":
        ql, qh, sc = blk[0:128].astype(np.int64), blk[128:192].astype(np.int64), blk[192:208].view(np.int8)
        d = blk[208:210].view(np.float16)[0].astype(np.float32)
        q = np.zeros(256, dtype=np.int64)
        for half in range(2):
            L, H = ql[64 * half:64 * half + 64], qh[32 * half:32 * half + 32]
            o = 128 * half
            q[o:o + 32] = (L[:32] & 0xF) | (((H >> 0) & 3) << 4)
            q[o + 32:o + 64] = (L[32:] & 0xF) | (((H >> 2) & 3) << 4)
            q[o + 64:o + 96] = (L[:32] >> 4) | (((H >> 4) & 3) << 4)
            q[o + 96:o + 128] = (L[32:] >> 4) | (((H >> 6) & 3) << 4)
        s1 = sum(int(sc[v // 16]) * int(q[v] - 32) * int(a[v]) for v in range(256))
        return d, np.float32(0), s1, 0
    dmin = blk[2:4].view(np.float16)[0].astype(np.float32)
    sc, mn = _k4_scales_mins(blk[4:16])
    if k.weight == "q4_K":
        qs, qh = blk[16:144].astype(np.int64), None
    else:  # q5_K
        qh, qs = blk[16:48].astype(np.int64), blk[48:176].astype(np.int64)
    q = np.zeros(256, dtype=np.int64)
    for j in range(4):
        lo, hi = qs[32 * j:32 * j + 32] & 0xF, qs[32 * j:32 * j + 32] >> 4
        if qh is not None:
            lo = lo + ((qh >> (2 * j)) & 1) * 16
            hi = hi + ((qh >> (2 * j + 1)) & 1) * 16
        q[64 * j:64 * j + 32], q[64 * j + 32:64 * j + 64] = lo, hi
    s1 = sum(sc[v // 32] * int(q[v]) * int(a[v]) for v in range(256))
    s2 = sum(mn[j] * int(a[32 * j:32 * j + 32].sum()) for j in range(8))
    return d, dmin, s1, s2


def canonical_dot(k: Kernel, row: np.ndarray, col: np.ndarray, order=None) -> np.float32:
    """The dot product kquant_common.c defines, from the blocks' bytes (``order``: the blocks' order)."""
    acc = np.float32(0.0)
    for i in order if order is not None else range(row.size // k.weight_bytes):
        d, dmin, s1, s2 = _block_ints(k, row[i * k.weight_bytes:(i + 1) * k.weight_bytes], _q8_K(col, i)[1])
        yd = _q8_K(col, i)[0]
        r = _f32(s1) * d
        if k.weight != "q6_K":
            r = _fma(-dmin, _f32(s2), r)
        acc = _fma(r, yd, acc)
    return acc


@pytest.mark.parametrize("k", KERNELS[1:], ids=lambda k: k.weight)
def test_the_k_quant_kernels_compute_the_canonical_dot_product(libs, k):
    """vec_dot (and so every column group, above) gives the exact model's bits on every row and column."""
    _, cpu = libs
    rows, cols = _data(libs, k, seed=11)
    for r in rows[:8]:
        for c in cols[:6]:
            assert _one(cpu, k, r, c).tobytes() == canonical_dot(k, r, c).tobytes(), k.weight


@pytest.mark.parametrize("k", KERNELS[1:], ids=lambda k: k.weight)
@pytest.mark.parametrize("blocks", [1, 3, 5, 7])
def test_an_odd_number_of_blocks_is_the_canonical_dot_product_too(libs, k, blocks):
    """Rows of 1, 3, 5 and 7 blocks (the one-column kernel takes blocks in pairs, then the last alone),
    cut from the test's rows and columns: vec_dot gives the exact model's bits."""
    _, cpu = libs
    rows, cols = _data(libs, k, seed=13)

    def cut(a: np.ndarray, size: int) -> np.ndarray:  # the first `blocks` blocks of two consecutive rows
        return np.ascontiguousarray(a.reshape(-1, size)[:blocks].reshape(-1))

    for i in range(0, 8, 2):
        for c in range(0, 6, 2):
            r, col = cut(rows[i:i + 2], k.weight_bytes), cut(cols[c:c + 2], k.act_bytes)
            assert _one(cpu, k, r, col).tobytes() == canonical_dot(k, r, col).tobytes(), (k.weight, blocks)


def test_the_canonical_model_sees_a_changed_block_order(libs):
    """The model summed in another block order gives other bits on some pairs: the test above would see a
    kernel that reordered its float steps."""
    k = KERNELS[1]
    rows, cols = _data(libs, k, seed=11)
    nb = N // k.block
    differ = sum(canonical_dot(k, r, c).tobytes() != canonical_dot(k, r, c, order=range(nb - 1, -1, -1)).tobytes()
                 for r in rows[:8] for c in cols[:6])
    assert differ > 0


# -- the tiled kernel through ggml's own mul_mat ---------------------------------------------------------
#
# From its row floor (GGML_FUCINA_TILED_MIN) every batch of Q4_K/Q5_K/Q6_K rows goes through ggml's tiled
# kernel: its narrow path up to 16 columns, its wide bands beyond, with the AMX microtile where the CPU
# runs it (kernels/tiled_amx.cpp) and the VNNI/AVX2 one otherwise or with GGML_FUCINA_AMX=0. Each column
# of a batched product must be bitwise the single-column product (vec_dot), whatever the batch.

GGML_TYPES = {"q4_K": 12, "q5_K": 13, "q6_K": 14}
MATMUL_NS = (1, 2, 3, 8, 15, 16, 17, 24, 33, 64)
MATMUL_ROWS = 80  # weight rows: five 16-row microtiles
MATMUL_K = 1024  # four 256-value blocks


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def matmul_columns(libs, weight: str, first: int, n: int) -> np.ndarray:
    """ggml_mul_mat of MATMUL_ROWS random quantized weight rows by the random float columns first..first+n-1
    (the same 64 columns for every call), as an (n, rows) array."""
    base, cpu = libs
    base.ggml_init.restype = ctypes.c_void_p
    base.ggml_init.argtypes = [_InitParams]
    base.ggml_new_tensor_2d.restype = ctypes.c_void_p
    base.ggml_new_tensor_2d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_mul_mat.restype = ctypes.c_void_p
    base.ggml_mul_mat.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    base.ggml_new_graph.restype = ctypes.c_void_p
    base.ggml_new_graph.argtypes = [ctypes.c_void_p]
    base.ggml_build_forward_expand.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    base.ggml_get_data.restype = ctypes.c_void_p
    base.ggml_get_data.argtypes = [ctypes.c_void_p]
    base.ggml_free.argtypes = [ctypes.c_void_p]
    cpu.ggml_graph_compute_with_ctx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    k = next(k for k in KERNELS if k.weight == weight)
    rng = np.random.default_rng(sum(map(ord, weight)))
    w = (rng.standard_normal((MATMUL_ROWS, MATMUL_K)) * rng.choice([0.5, 1, 4], size=(MATMUL_ROWS, MATMUL_K),
                                                                   p=[0.3, 0.65, 0.05])).astype(np.float32)
    x = np.ascontiguousarray((rng.standard_normal((64, MATMUL_K)) * 3).astype(np.float32)[first:first + n])
    wq = getattr(base, f"quantize_row_{weight}_ref")
    wq.restype = None
    packed = np.concatenate([_quantize(wq, r, k.weight_bytes, k.block) for r in w])
    ctx = base.ggml_init(_InitParams(64 << 20, None, False))
    try:
        a = base.ggml_new_tensor_2d(ctx, GGML_TYPES[weight], MATMUL_K, MATMUL_ROWS)
        b = base.ggml_new_tensor_2d(ctx, 0, MATMUL_K, n)  # GGML_TYPE_F32
        ctypes.memmove(base.ggml_get_data(a), packed.ctypes.data, packed.nbytes)
        ctypes.memmove(base.ggml_get_data(b), x.ctypes.data, x.nbytes)
        out = base.ggml_mul_mat(ctx, a, b)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        assert cpu.ggml_graph_compute_with_ctx(ctx, graph, 2) == 0  # GGML_STATUS_SUCCESS
        res = np.ctypeslib.as_array((ctypes.c_float * (MATMUL_ROWS * n)).from_address(base.ggml_get_data(out)))
        return res.reshape(n, MATMUL_ROWS).copy()
    finally:
        base.ggml_free(ctx)


def check_matmul_batches(libs) -> str:
    """For each K-quant type, every batch's column c is bitwise column c alone; returns which microtile ran."""
    _, cpu = libs
    cpu.fucina_tiled_amx.restype = ctypes.c_bool
    for weight in GGML_TYPES:
        alone = np.concatenate([matmul_columns(libs, weight, c, 1) for c in range(64)])
        assert np.isfinite(alone).all() and np.abs(alone).max() > 0
        for n in MATMUL_NS:
            for first in (0, 64 - n):
                got = matmul_columns(libs, weight, first, n)
                want = alone[first:first + n]
                assert got.tobytes() == want.tobytes(), (weight, n, first, np.argwhere(got != want)[:4])
    return "amx" if cpu.fucina_tiled_amx() else "vnni/avx2"


@pytest.mark.parametrize("amx", ["1", "0"])
def test_every_column_of_a_tiled_matmul_is_the_single_column_product(amx):
    """Through ggml_mul_mat with the tiled kernel from 2 rows: for each K-quant type and batch size, column
    c is bitwise column c computed alone; with the AMX microtile (where the CPU runs it) and without."""
    from fucina.cpu import cpu_has_amx

    code = "import tests.test_kernels as t; libs = t.load_libs(); print(t.check_matmul_batches(libs))"
    env = {**os.environ, "GGML_FUCINA_AMX": amx, "GGML_FUCINA_TILED_MIN": "2"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == ("amx" if amx == "1" and cpu_has_amx() else "vnni/avx2"), r.stdout
