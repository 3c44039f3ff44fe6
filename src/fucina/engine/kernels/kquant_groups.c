
// ---- the groups, in the form FUCINA_WIDE selects (0: ymm pairs, 1: zmm; this text is inserted once
// for each, by fucina.engine.patches) -------------------------------------------------------------
#if defined(__AVX2__) && defined(__FMA__) && (FUCINA_WIDE == 0 || defined(FUCINA_HAS_ZMM))
#if FUCINA_WIDE
#define FUCINA_ISUM __m512i
#define FUCINA_ISUM_ZERO() _mm512_setzero_si512()
#define FUCINA_ISUM_FOLD(v) fucina_zmm_fold(v)
// sumi += scale * (w . q8) for two 32-byte chunks: w, scale, q8 as zmm pairs.
#define FUCINA_DOT2(sumi, w, scale, q8) _mm512_dpwssd_epi32((sumi), (scale), _mm512_maddubs_epi16((w), (q8)))
#define FUCINA_PAIR(lo, hi) fucina_zmm_pair((lo), (hi))
#define FUCINA_LOAD2(p) _mm512_loadu_si512((const void *) (p))
#define FUCINA_W2 __m512i
#define FUCINA_GROUP(t) fucina_##t##_group_zmm
#else
#define FUCINA_ISUM __m256i
#define FUCINA_ISUM_ZERO() _mm256_setzero_si256()
#define FUCINA_ISUM_FOLD(v) (v)
#define FUCINA_DOT2(sumi, w, scale, q8) fucina_ymm_dot2((sumi), (w), (scale), (q8))
#define FUCINA_PAIR(lo, hi) fucina_ymm_pair((lo), (hi))
#define FUCINA_LOAD2(p) fucina_ymm_load2((const int8_t *) (p))
#define FUCINA_W2 fucina_pair
#define FUCINA_GROUP(t) fucina_##t##_group_ymm
#endif

// ---- Q4_K and Q5_K: a block's float steps (their scales and mins alike) ---------------------------
//
// Block i for every column at once, column c in lane c (kquant_common.c, item 2, lane by lane): the
// column's integer lanes folded and summed to S1, its mins products to S2, then r = S1 * x.d,
// r - x.dmin * S2 fused, acc + r * y.d fused.
FUCINA_INLINE __m256 FUCINA_GROUP(k4_block)(const __m256 acc, const FUCINA_ISUM * sumi, const __m256i mins_and_scales,
        const float xd, const float xdmin, const block_q8_K * GGML_RESTRICT const * y, const int i, const int ncols) {
    const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
    __m256i s1[8];
    __m128i s2[8];
    for (int c = 0; c < 8; ++c) {
        s1[c] = c < ncols ? FUCINA_ISUM_FOLD(sumi[c]) : _mm256_setzero_si256();
        s2[c] = c < ncols ? fucina_k4_mins_prod(mins, y[c] + i) : _mm_setzero_si128();
    }
    const __m256 r = _mm256_fnmadd_ps(_mm256_set1_ps(xdmin), _mm256_cvtepi32_ps(fucina_hsum_8x4(s2)),
                                      _mm256_mul_ps(_mm256_cvtepi32_ps(fucina_hsum_8x8(s1)), _mm256_set1_ps(xd)));
    return _mm256_fmadd_ps(r, FUCINA_COL_D(y, i, ncols), acc);
}

// ---- Q4_K ------------------------------------------------------------------------------------
//
// Loop order: per block, per 64-value chunk j the weight row's 64 nibbles and their two scales are
// unpacked once (4 vectors), and every column adds its products into its own sumi. A column's 8
// sumi lanes are the one-column kernel's (item 1 above); then the per-column float steps.

FUCINA_INLINE void FUCINA_GROUP(q4_K)(const int nb, float * GGML_RESTRICT s, size_t bs,
        const block_q4_K * GGML_RESTRICT x, const void * GGML_RESTRICT vy, size_t by, const int ncols) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const block_q8_K * GGML_RESTRICT y[FUCINA_COLS_MAX];
    __m256 acc = _mm256_setzero_ps();  // column c in lane c
    for (int c = 0; c < ncols; ++c) {
        y[c] = (const block_q8_K *) ((const char *) vy + c * by);
    }
    for (int i = 0; i < nb; ++i) {
        const __m256i mins_and_scales = fucina_k4_mins_and_scales(x[i].scales);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = MM256_SET_M128I(sc128, sc128);
        FUCINA_ISUM sumi[FUCINA_COLS_MAX];
        for (int c = 0; c < ncols; ++c) {
            sumi[c] = FUCINA_ISUM_ZERO();
        }
        for (int j = 0; j < QK_K/64; ++j) {
            // 1. 64 of the row's values and their two scales, unpacked once for every column.
            _mm_prefetch((const char *) (x[i].qs + 32*j) + FUCINA_PF, _MM_HINT_T0);
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *) (x[i].qs + 32*j));
            const FUCINA_W2 q4 = FUCINA_PAIR(_mm256_and_si256(q4bits, m4),
                                             _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4));
            const FUCINA_W2 sc = FUCINA_PAIR(_mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+0)),
                                             _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+1)));
            // 2. Each column's scaled products of them, into its own integer lanes.
            for (int c = 0; c < ncols; ++c) {
                sumi[c] = FUCINA_DOT2(sumi[c], q4, sc, FUCINA_LOAD2(y[c][i].qs + 64*j));
            }
        }
        // 3. Each column's block in the canonical float steps (kquant_common.c, item 2).
        acc = FUCINA_GROUP(k4_block)(acc, sumi, mins_and_scales, GGML_CPU_FP16_TO_FP32(x[i].d),
                                     GGML_CPU_FP16_TO_FP32(x[i].dmin), y, i, ncols);
    }
    fucina_store_cols(s, bs, acc, ncols);
}

// ---- Q6_K ------------------------------------------------------------------------------------

FUCINA_INLINE void FUCINA_GROUP(q6_K)(const int nb, float * GGML_RESTRICT s, size_t bs,
        const block_q6_K * GGML_RESTRICT x, const void * GGML_RESTRICT vy, size_t by, const int ncols) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi8(15);
    const block_q8_K * GGML_RESTRICT y[FUCINA_COLS_MAX];
    __m256 acc = _mm256_setzero_ps();  // column c in lane c
    for (int c = 0; c < ncols; ++c) {
        y[c] = (const block_q8_K *) ((const char *) vy + c * by);
    }
    for (int i = 0; i < nb; ++i) {
        const __m128i scales = _mm_loadu_si128((const __m128i *) x[i].scales);
        FUCINA_ISUM sumi[FUCINA_COLS_MAX];
        for (int c = 0; c < ncols; ++c) {
            sumi[c] = FUCINA_ISUM_ZERO();
        }
        for (int j = 0; j < QK_K/128; ++j) {
            // 1. 128 six-bit values (4 x 32 bytes) and their scales, unpacked once for every column.
            _mm_prefetch((const char *) (x[i].ql + 64*j) + FUCINA_PF, _MM_HINT_T0);
            _mm_prefetch((const char *) (x[i].ql + 64*j) + FUCINA_PF + 64, _MM_HINT_T0);
            const __m256i q4bits1 = _mm256_loadu_si256((const __m256i *) (x[i].ql + 64*j));
            const __m256i q4bits2 = _mm256_loadu_si256((const __m256i *) (x[i].ql + 64*j + 32));
            const __m256i q4bitsH = _mm256_loadu_si256((const __m256i *) (x[i].qh + 32*j));
            __m256i q6[4], sc[4];
            q6[0] = _mm256_or_si256(_mm256_and_si256(q4bits1, m15), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m3), 4));
            q6[1] = _mm256_or_si256(_mm256_and_si256(q4bits2, m15),
                                    _mm256_slli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(12)), 2));
            q6[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m15),
                                    _mm256_and_si256(q4bitsH, _mm256_set1_epi8(48)));
            q6[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m15),
                                    _mm256_srli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(-64)), 2));
            for (int k = 0; k < 4; ++k) {
                sc[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, get_scale_shuffle(4*j+k)));
            }
            const FUCINA_W2 w01 = FUCINA_PAIR(q6[0], q6[1]), w23 = FUCINA_PAIR(q6[2], q6[3]);
            const FUCINA_W2 s01 = FUCINA_PAIR(sc[0], sc[1]), s23 = FUCINA_PAIR(sc[2], sc[3]);
            // 2. Each column's scaled products, into its own integer lanes.
            for (int c = 0; c < ncols; ++c) {
                const int8_t * GGML_RESTRICT q8 = y[c][i].qs + 128*j;
                sumi[c] = FUCINA_DOT2(sumi[c], w01, s01, FUCINA_LOAD2(q8));
                sumi[c] = FUCINA_DOT2(sumi[c], w23, s23, FUCINA_LOAD2(q8 + 64));
            }
        }
        // 3. Each column: lanes minus 32 * sum(scale * bsum) (the values' offset of 32), then the block
        //    in the canonical float steps (kquant_common.c, item 2; no min term).
        const float xd = GGML_CPU_FP16_TO_FP32(x[i].d);
        const __m256i scales_16 = _mm256_cvtepi8_epi16(scales);
        __m256i s1[8];
        for (int c = 0; c < 8; ++c) {
            if (c < ncols) {
                const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
                const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
                s1[c] = _mm256_sub_epi32(FUCINA_ISUM_FOLD(sumi[c]), q8sclsub);
            } else {
                s1[c] = _mm256_setzero_si256();
            }
        }
        // Lane c: column c's acc + (S1 * x.d) * y.d fused (item 2, no min term).
        const __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(fucina_hsum_8x8(s1)), _mm256_set1_ps(xd));
        acc = _mm256_fmadd_ps(r, FUCINA_COL_D(y, i, ncols), acc);
    }
    fucina_store_cols(s, bs, acc, ncols);
}

// ---- Q5_K ------------------------------------------------------------------------------------

FUCINA_INLINE void FUCINA_GROUP(q5_K)(const int nb, float * GGML_RESTRICT s, size_t bs,
        const block_q5_K * GGML_RESTRICT x, const void * GGML_RESTRICT vy, size_t by, const int ncols) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i mone = _mm256_set1_epi8(1);
    const block_q8_K * GGML_RESTRICT y[FUCINA_COLS_MAX];
    __m256 acc = _mm256_setzero_ps();  // column c in lane c
    for (int c = 0; c < ncols; ++c) {
        y[c] = (const block_q8_K *) ((const char *) vy + c * by);
    }
    for (int i = 0; i < nb; ++i) {
        const __m256i mins_and_scales = fucina_k4_mins_and_scales(x[i].scales);
        const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
        const __m256i scales = MM256_SET_M128I(sc128, sc128);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *) x[i].qh);
        __m256i hmask = mone;
        FUCINA_ISUM sumi[FUCINA_COLS_MAX];
        for (int c = 0; c < ncols; ++c) {
            sumi[c] = FUCINA_ISUM_ZERO();
        }
        for (int j = 0; j < QK_K/64; ++j) {
            // 1. 64 five-bit values and their two scales, unpacked once for every column.
            const __m256i q5bits = _mm256_loadu_si256((const __m256i *) (x[i].qs + 32*j));
            const __m256i q5h_0 = _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, hmask), 2*j), 4);
            hmask = _mm256_slli_epi16(hmask, 1);
            const __m256i q5h_1 = _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, hmask), 2*j+1), 4);
            hmask = _mm256_slli_epi16(hmask, 1);
            const __m256i q5_0 = _mm256_add_epi8(_mm256_and_si256(q5bits, m4), q5h_0);
            const __m256i q5_1 = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), q5h_1);
            const FUCINA_W2 q5 = FUCINA_PAIR(q5_0, q5_1);
            const FUCINA_W2 sc = FUCINA_PAIR(_mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+0)),
                                             _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+1)));
            // 2. Each column's scaled products, into its own integer lanes.
            for (int c = 0; c < ncols; ++c) {
                sumi[c] = FUCINA_DOT2(sumi[c], q5, sc, FUCINA_LOAD2(y[c][i].qs + 64*j));
            }
        }
        // 3. Each column's block in the canonical float steps (kquant_common.c, item 2).
        acc = FUCINA_GROUP(k4_block)(acc, sumi, mins_and_scales, GGML_CPU_FP16_TO_FP32(x[i].d),
                                     GGML_CPU_FP16_TO_FP32(x[i].dmin), y, i, ncols);
    }
    fucina_store_cols(s, bs, acc, ncols);
}

#undef FUCINA_ISUM
#undef FUCINA_ISUM_ZERO
#undef FUCINA_ISUM_FOLD
#undef FUCINA_DOT2
#undef FUCINA_PAIR
#undef FUCINA_LOAD2
#undef FUCINA_W2
#undef FUCINA_GROUP
#endif
