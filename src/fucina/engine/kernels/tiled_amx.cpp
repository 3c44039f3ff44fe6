
// ============================================================================================
// fucina: an AMX microtile for the tiled K-quant kernel (Q4_K, Q5_K and Q6_K weights x Q8_K
// activations), taken where the CPU has AMX-INT8 and the kernel grants this process its tile state.
//
// Invariant: for every (weight row, activation column, 256-value block) the microtile computes the
// two integers the VNNI microtile computes, then the VNNI microtile's float steps on them in the same
// order, so every row of a batch is bitwise the row the column groups and vec_dot compute
// (kquant_common.c, the canonical dot product). Integers are exact, so only their value matters:
//   S1 = sum_k scale(k) * (q(k) - BIAS) * a(k)    (scale(k): the weight's sub-block scale; a: q8 codes)
//   S2 = sum_s min_s * bsum_s                      (Q4_K, Q5_K: sub-block mins times the q8 sums)
// The VNNI microtile sums S1 per sub-block (dpbusd, then scale * (raw - BIAS * bsum)); here each weight
// is folded once per tile into w = scale * (q - BIAS) (|w| <= 4096, an int16), split into bytes
// w = lo + 256 * hi (lo unsigned 0..255, hi signed -16..16), and the tile unit sums each plane over
// the whole 256-value block: S1 = C_lo + 256 * C_hi. No partial sum reaches 2^28.
// The float steps, per row and column: r = (float) S1 * d; r = fma(-dmin, (float) S2, r) (with mins);
// buf = fma(r, d_a, buf) — the VNNI epilogue's operations.
//
// Worked example (Q4_K, one block, row i, column j): q = 3 in a sub-block of scale 40 gives w = 120
// (lo 120, hi 0); q = 15 with scale 63 gives w = 945 (lo 177, hi 3). C_lo adds 120 * a + 177 * a',
// C_hi adds 3 * a', and S1 = C_lo + 256 * C_hi = 120 a + 945 a', the sub-block sums' value.
//
// The fold runs in the unpack (tiled.cpp's tiled_unpack_src0 hands the three types over to
// fucina_amx_unpack: once per weight tile, reused by every column band), the microtile replaces
// tiled_run_microtile for them. GGML_FUCINA_AMX=0 switches AMX off
// (tests run both paths on one machine and compare the bits).
// ============================================================================================

#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__F16C__)
#define FUCINA_AMX_BUILD 1

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdlib>

#define FUCINA_AMX_TARGET __attribute__((target("amx-tile,amx-int8")))

// True where AMX-INT8 runs: the CPU has it (CPUID.7.0:EDX bits 24, 25) and Linux grants this process
// the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18), once.
static bool fucina_amx_on(void) {
    static int on = -1;  // a benign race: every thread computes the same value
    if (on < 0) {
        int v = 0;
        unsigned a, b, c, d;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24)) && (d & (1u << 25))) {
            v = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        }
        const char * env = getenv("GGML_FUCINA_AMX");
        if (env != NULL && atoi(env) == 0) {
            v = 0;
        }
        on = v;
    }
    return on == 1;
}

// Per thread: the folded weight planes of the current tile (the tile's q layout: row r, slab at
// r * num_k * 256 + slab * 256), the mins as int16 pairs, and the two result tiles.
struct fucina_amx_ws {
    alignas(64) uint8_t lo[TILED_TILE_ROWS * TILED_TILE_K];
    alignas(64) int8_t  hi[TILED_TILE_ROWS * TILED_TILE_K];
    alignas(64) int32_t minpair[TILED_TILE_ROWS * TILED_TILE_K / 64];  // 4 pairs per row and slab
    alignas(64) int32_t c_lo[TILED_MICRO * TILED_MICRO];
    alignas(64) int32_t c_hi[TILED_MICRO * TILED_MICRO];
};

static fucina_amx_ws * fucina_amx_ws_get(void) {
    static thread_local fucina_amx_ws * ws = nullptr;
    if (ws == nullptr) {
        ws = (fucina_amx_ws *) aligned_alloc(64, sizeof(fucina_amx_ws));
        GGML_ASSERT(ws != nullptr);
    }
    return ws;
}

// The tile configuration: tmm0/tmm1 the C_lo/C_hi results (16 rows x 16 int32), tmm2/tmm3 the lo/hi
// weight planes (16 rows x 64 values), tmm4 the activations (16 groups of 4 values x 16 columns).
struct fucina_amx_cfg {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

FUCINA_AMX_TARGET static void fucina_amx_configure(void) {
    alignas(64) fucina_amx_cfg cfg = {};
    cfg.palette_id = 1;
    for (int t = 0; t < 5; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    // the whole 64 bytes as the asm's operand: GCC 12's _tile_loadconfig names only the first 8, so
    // the stores to the rest could be dropped as dead
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// ---- the weights: unpacked from their blocks straight into the planes ---------------------------
//
// For the three types, tiled.cpp's unpack hands over to these where AMX runs: per block, the codes are
// extracted in 16-bit lanes (the values tiled_unpack_src0 writes as bytes), multiplied by their
// sub-block scale minus the bias (w = scale * (q - BIAS)), and the low and high bytes of each w go to the
// lo and hi planes (vpermt2b picks them from two vectors of 32 lanes: 64 values, two sub-blocks of 32 or
// four of 16, in the tile's order). d and dmin go where tiled_unpack_src0 puts them; the mins as int16
// pairs. tiled_unpack_src0's tile->q, scales and mins are not written: nothing reads them on this path.

FUCINA_AMX_TARGET static inline __m512i fucina_amx_even_bytes(void) {
    alignas(64) int8_t idx[64];
    for (int i = 0; i < 64; i++) {
        idx[i] = (int8_t) (2 * i);  // byte 2i of the pair (w_a, w_b): the low byte of lane i
    }
    return _mm512_load_si512((const __m512i *) idx);
}

// The 64 values' w as planes: lanes 0..31 of wa then of wb.
FUCINA_AMX_TARGET static inline void fucina_amx_store_planes(fucina_amx_ws * ws, int off, __m512i wa, __m512i wb,
                                                             __m512i even) {
    _mm512_store_si512((__m512i *) &ws->lo[off], _mm512_permutex2var_epi8(wa, even, wb));
    _mm512_store_si512((__m512i *) &ws->hi[off],
                       _mm512_permutex2var_epi8(wa, _mm512_add_epi8(even, _mm512_set1_epi8(1)), wb));
}

// Rows are read one block (num_k == 1, the wide path: 256 rows apart in memory order) or a run of
// num_k blocks (the narrow path) at a time; the block PF rows ahead is asked for now, so DRAM's latency
// passes while this one is unpacked (the hardware prefetcher does not follow 256 interleaved streams).
template <typename B>
static inline void fucina_amx_prefetch(const B * rows, int64_t row_stride, int n_rows, int r, int slab, int num_k) {
    const int pf = num_k == 1 ? 6 : 1;
    if (r + pf < n_rows) {
        const char * next = (const char *) &rows[(r + pf) * row_stride + slab];
        for (size_t line = 0; line < sizeof(B); line += 64) {
            _mm_prefetch(next + line, _MM_HINT_T0);
        }
        _mm_prefetch(next + sizeof(B) - 1, _MM_HINT_T0);
    }
}

// Q4_K/Q5_K's 12 packed bytes as 8 scales and 8 mins (tiled_unpack_src0's decode).
static inline void fucina_amx_k4_scales(const uint8_t * packed, uint8_t sc[8], uint8_t mn[8]) {
    uint32_t utmp[4];
    fucina_k4_scales_mins(packed, utmp);  // k4_scales.c
    memcpy(sc, &utmp[0], 8);
    memcpy(mn, &utmp[2], 8);
}

// Q4_K (QH = false) and Q5_K (QH = true, the fifth bit of chunk c's values from qh bits 2c and 2c+1).
template <typename B, bool QH>
FUCINA_AMX_TARGET static void fucina_amx_unpack_k4(const B * rows, int64_t row_stride, int n_rows,
                                                   tiled_tile_src0 * tile, int num_k) {
    GGML_ASSERT(n_rows <= TILED_TILE_ROWS);
    fucina_amx_ws * ws = fucina_amx_ws_get();
    const int qk_stride = num_k * TILED_TILE_K;
    const __m512i even = fucina_amx_even_bytes();
    const __m512i m4 = _mm512_set1_epi16(0xF), one = _mm512_set1_epi16(1);
    for (int r = 0; r < n_rows; r++) {
        for (int slab = 0; slab < num_k; slab++) {
            const B & x = rows[r * row_stride + slab];
            fucina_amx_prefetch(rows, row_stride, n_rows, r, slab, num_k);
            const int d_off = slab * TILED_MICRO + r;
            tile->d[d_off] = _cvtsh_ss(x.data.data.d);
            tile->dmin[d_off] = _cvtsh_ss(x.data.data.dmin);
            uint8_t sc[8], mn[8];
            fucina_amx_k4_scales(x.scales, sc, mn);
            // the 8 mins widened to int16 are the 4 pairs mn[2p] | mn[2p+1] << 16 as int32 (little-endian)
            _mm_storeu_si128((__m128i *) &ws->minpair[(r * num_k + slab) * 4], _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *) mn)));
            __m512i h = _mm512_setzero_si512();
            if constexpr (QH) {
                h = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) x.qh));
            }
            const int off = r * qk_stride + slab * TILED_TILE_K;
            for (int c = 0; c < 4; c++) {
                const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (x.qs + 32 * c)));
                __m512i a = _mm512_and_si512(v, m4);   // sub-block 2c: the low nibbles
                __m512i b = _mm512_srli_epi16(v, 4);   // sub-block 2c+1: the high nibbles
                if constexpr (QH) {
                    a = _mm512_or_si512(a, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * c), one), 4));
                    b = _mm512_or_si512(b, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * c + 1), one), 4));
                }
                fucina_amx_store_planes(ws, off + 64 * c,
                                        _mm512_mullo_epi16(a, _mm512_set1_epi16(sc[2 * c])),
                                        _mm512_mullo_epi16(b, _mm512_set1_epi16(sc[2 * c + 1])), even);
            }
        }
    }
    fucina_amx_configure();
}

// Q6_K: per half of the block, 128 six-bit values from ql (4 bits) and qh (2 bits) in tiled_unpack_src0's
// order, w = scale * (q - 32) with a scale per 16 values.
FUCINA_AMX_TARGET static void fucina_amx_unpack_q6(const block_q6_K * rows, int64_t row_stride, int n_rows,
                                                   tiled_tile_src0 * tile, int num_k) {
    GGML_ASSERT(n_rows <= TILED_TILE_ROWS);
    fucina_amx_ws * ws = fucina_amx_ws_get();
    const int qk_stride = num_k * TILED_TILE_K;
    const __m512i even = fucina_amx_even_bytes();
    const __m512i m4 = _mm512_set1_epi16(0xF), m2 = _mm512_set1_epi16(3), bias = _mm512_set1_epi16(32);
    // lanes 0..15 take scale 2p, lanes 16..31 scale 2p+1 (vpermw of the 16 widened scales)
    const __m512i halves = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
    for (int r = 0; r < n_rows; r++) {
        for (int slab = 0; slab < num_k; slab++) {
            const block_q6_K & x = rows[r * row_stride + slab];
            fucina_amx_prefetch(rows, row_stride, n_rows, r, slab, num_k);
            tile->d[slab * TILED_MICRO + r] = _cvtsh_ss(x.d);
            const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) x.scales)));
            const int off = r * qk_stride + slab * TILED_TILE_K;
            for (int half = 0; half < 2; half++) {
                const __m512i l0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (x.ql + 64 * half)));
                const __m512i l1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (x.ql + 64 * half + 32)));
                const __m512i hb = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *) (x.qh + 32 * half)));
                __m512i q[4];
                q[0] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
                q[1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2), m2), 4));
                q[2] = _mm512_or_si512(_mm512_srli_epi16(l0, 4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m2), 4));
                q[3] = _mm512_or_si512(_mm512_srli_epi16(l1, 4), _mm512_slli_epi16(_mm512_srli_epi16(hb, 6), 4));
                __m512i w[4];
                for (int i = 0; i < 4; i++) {
                    const int s = 8 * half + 2 * i;  // values 32i..32i+31 of this half: sub-blocks s, s+1
                    const __m512i scale = _mm512_permutexvar_epi16(_mm512_add_epi16(halves, _mm512_set1_epi16((int16_t) s)), sc);
                    w[i] = _mm512_mullo_epi16(_mm512_sub_epi16(q[i], bias), scale);
                }
                fucina_amx_store_planes(ws, off + 128 * half, w[0], w[1], even);
                fucina_amx_store_planes(ws, off + 128 * half + 64, w[2], w[3], even);
            }
        }
    }
    fucina_amx_configure();
}

void fucina_amx_unpack(const block_q4_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k) {
    fucina_amx_unpack_k4<block_q4_K, false>(rows, row_stride, n_rows, tile, num_k);
}
void fucina_amx_unpack(const block_q5_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k) {
    fucina_amx_unpack_k4<block_q5_K, true>(rows, row_stride, n_rows, tile, num_k);
}
void fucina_amx_unpack(const block_q6_K * rows, int64_t row_stride, int n_rows, tiled_tile_src0 * tile, int num_k) {
    fucina_amx_unpack_q6(rows, row_stride, n_rows, tile, num_k);
}

// One 16x16 microtile (weight rows i0.., activation columns j0.., slab `slab` of num_k), as
// tiled_run_microtile: buf[i * buf_stride + j] accumulates the block's contribution.
template <int SUBBLK, bool HAS_MIN>
FUCINA_AMX_TARGET static void fucina_amx_microtile(const tiled_tile_src0 & src0, const tiled_tile_src1 & src1,
                                                   int i0, int j0, int num_k, int slab, float * buf, int buf_stride) {
    constexpr int NB = TILED_TILE_K / SUBBLK;
    const int qk_stride = num_k * TILED_TILE_K;
    const int qk_off = slab * TILED_TILE_K;
    fucina_amx_ws * ws = fucina_amx_ws_get();

    // 1. The integers: C_lo = lo . a and C_hi = hi . a over the block's 256 values, 64 at a time. The
    //    activations are in the VNNI layout (tiled_repack_src1): group g of 4 values of the band's 16
    //    columns at (g % 16) * qk_stride + (g / 16) * 64, so values 64c..64c+63 are 16 rows of 64 bytes
    //    from c * 64, qk_stride apart: the tile unit's B operand as it is.
    const uint8_t * a_lo = ws->lo + i0 * qk_stride + qk_off;
    const int8_t * a_hi = ws->hi + i0 * qk_stride + qk_off;
    const int8_t * b = src1.q + (j0 / TILED_MICRO) * (TILED_MICRO * qk_stride) + qk_off;
    _tile_zero(0);
    _tile_zero(1);
    for (int c = 0; c < TILED_TILE_K / 64; c++) {
        _tile_loadd(4, b + 64 * c, qk_stride);
        _tile_loadd(2, a_lo + 64 * c, qk_stride);
        _tile_loadd(3, a_hi + 64 * c, qk_stride);
        _tile_dpbusd(0, 2, 4);
        _tile_dpbssd(1, 3, 4);
    }
    _tile_stored(0, ws->c_lo, 64);
    _tile_stored(1, ws->c_hi, 64);

    // 2. S2's activation side: the sub-blocks' q8 sums as int16 pairs (bsum_2p | bsum_2p+1 << 16), lane j.
    __m512i bpair[NB / 2];
    if constexpr (HAS_MIN) {
        constexpr int NS = SUBBLK / 16;
        const int bs_stride = (num_k == 1) ? TILED_TILE_ROWS : TILED_MICRO;
        const int bs_off = slab * TILED_MICRO;
        const __m512i low16 = _mm512_set1_epi32(0xFFFF);
        for (int p = 0; p < NB / 2; p++) {
            __m512i bs[2];
            for (int h = 0; h < 2; h++) {
                const int s = 2 * p + h;
                bs[h] = _mm512_load_si512((const __m512i *) &src1.bsums[(bs_off + s * NS) * bs_stride + j0]);
                for (int u = 1; u < NS; u++) {
                    bs[h] = _mm512_add_epi32(bs[h],
                        _mm512_load_si512((const __m512i *) &src1.bsums[(bs_off + s * NS + u) * bs_stride + j0]));
                }
            }
            bpair[p] = _mm512_or_si512(_mm512_and_si512(bs[0], low16), _mm512_slli_epi32(bs[1], 16));
        }
    }

    // 3. Per row: S1 = C_lo + 256 * C_hi, S2 by dpwssd, then the VNNI microtile's float steps.
    const __m512 d1_vec = _mm512_load_ps(&src1.d[slab * TILED_MICRO + j0]);
    for (int t = 0; t < TILED_MICRO; t++) {
        const int ar = i0 + t;
        const int d_off = slab * TILED_MICRO + ar;
        const __m512i s1 = _mm512_add_epi32(_mm512_load_si512((const __m512i *) &ws->c_lo[16 * t]),
                                            _mm512_slli_epi32(_mm512_load_si512((const __m512i *) &ws->c_hi[16 * t]), 8));
        __m512 result = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(src0.d[d_off]));
        if constexpr (HAS_MIN) {
            const int32_t * mp = &ws->minpair[(ar * num_k + slab) * (NB / 2)];
            __m512i s2 = _mm512_setzero_si512();
            for (int p = 0; p < NB / 2; p++) {
                s2 = _mm512_dpwssd_epi32(s2, _mm512_set1_epi32(mp[p]), bpair[p]);
            }
            result = _mm512_fnmadd_ps(_mm512_set1_ps(src0.dmin[d_off]), _mm512_cvtepi32_ps(s2), result);
        }
        float * p = &buf[ar * buf_stride + j0];
        _mm512_store_ps(p, _mm512_fmadd_ps(result, d1_vec, _mm512_load_ps(p)));
    }
}

// The formats the unpack and the microtile serve: Q4_K/Q5_K (sub-blocks of 32 with mins, no bias) and
// Q6_K (sub-blocks of 16, bias 32). The other tiled formats never reach them.
#define FUCINA_AMX_FORMAT(SUBBLK, HAS_MIN, BIAS) \
    (((SUBBLK) == 32 && (HAS_MIN) && (BIAS) == 0) || ((SUBBLK) == 16 && !(HAS_MIN) && (BIAS) == 32))

#else
#define FUCINA_AMX_BUILD 0
#endif
