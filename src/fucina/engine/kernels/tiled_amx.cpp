
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
// The fold runs in tiled_repack_src0 (once per weight tile, reused by every column band), the
// microtile replaces tiled_run_microtile for the three types. GGML_FUCINA_AMX=0 switches AMX off
// (tests run both paths on one machine and compare the bits).
// ============================================================================================

#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512BW__)
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

// Fold a freshly unpacked weight tile into the planes (see the top): w = scale * (q - BIAS), lo and
// hi its two bytes; with sub-blocks of 32 (the types with mins) also the mins as pairs (m0 | m1 << 16)
// for the dpwssd of S2. Then this thread's tile configuration, for the microtiles that follow.
template <int SUBBLK>
FUCINA_AMX_TARGET static void fucina_amx_fold(const tiled_tile_src0 * tile, int n_rows, int num_k, int bias) {
    constexpr int NB = TILED_TILE_K / SUBBLK;
    const int nb_stride = NB * num_k;
    const int qk_stride = num_k * TILED_TILE_K;
    fucina_amx_ws * ws = fucina_amx_ws_get();
    for (int r = 0; r < n_rows; r++) {
        for (int slab = 0; slab < num_k; slab++) {
            const int32_t * scales = &tile->scales[r * nb_stride + slab * NB];
            const int q0 = r * qk_stride + slab * TILED_TILE_K;
            if constexpr (SUBBLK == 32) {
                for (int s = 0; s < NB; s++) {
                    const __m512i q = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) &tile->q[q0 + 32 * s]));
                    const __m512i w = _mm512_mullo_epi16(_mm512_sub_epi16(q, _mm512_set1_epi16((int16_t) bias)),
                                                         _mm512_set1_epi16((int16_t) scales[s]));
                    _mm256_store_si256((__m256i *) &ws->lo[q0 + 32 * s], _mm512_cvtepi16_epi8(w));
                    _mm256_store_si256((__m256i *) &ws->hi[q0 + 32 * s], _mm512_cvtepi16_epi8(_mm512_srai_epi16(w, 8)));
                }
                const int32_t * mins = &tile->mins[r * nb_stride + slab * NB];
                for (int p = 0; p < NB / 2; p++) {
                    ws->minpair[(r * num_k + slab) * (NB / 2) + p] =
                        (int32_t) ((uint32_t) (mins[2 * p] & 0xFFFF) | ((uint32_t) mins[2 * p + 1] << 16));
                }
            } else {
                for (int s = 0; s < NB; s += 2) {
                    // two 16-value sub-blocks: scale s in the low 16 lanes, scale s+1 in the high 16
                    const __m512i q = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) &tile->q[q0 + 16 * s]));
                    const __m512i sc = _mm512_inserti64x4(_mm512_set1_epi16((int16_t) scales[s]),
                                                          _mm256_set1_epi16((int16_t) scales[s + 1]), 1);
                    const __m512i w = _mm512_mullo_epi16(_mm512_sub_epi16(q, _mm512_set1_epi16((int16_t) bias)), sc);
                    _mm256_store_si256((__m256i *) &ws->lo[q0 + 16 * s], _mm512_cvtepi16_epi8(w));
                    _mm256_store_si256((__m256i *) &ws->hi[q0 + 16 * s], _mm512_cvtepi16_epi8(_mm512_srai_epi16(w, 8)));
                }
            }
        }
    }
    fucina_amx_configure();
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

// The formats the fold and the microtile serve: Q4_K/Q5_K (sub-blocks of 32 with mins, no bias) and
// Q6_K (sub-blocks of 16, bias 32). The other tiled formats never reach them.
#define FUCINA_AMX_FORMAT(SUBBLK, HAS_MIN, BIAS) \
    (((SUBBLK) == 32 && (HAS_MIN) && (BIAS) == 0) || ((SUBBLK) == 16 && !(HAS_MIN) && (BIAS) == 32))

#else
#define FUCINA_AMX_BUILD 0
#endif
