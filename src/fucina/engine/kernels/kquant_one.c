
// ---- one column (the one-column vec_dot of Q4_K/Q5_K/Q6_K, AVX2+FMA) ------------------------------
//
// The canonical dot product of kquant_common.c for a single column, at the one-column kernel's speed:
// a decode step multiplies every weight row by one column, so per row this runs once and must cost
// what upstream's vec_dot costs. Upstream keeps 8 float lanes per row and sums them once at the end;
// the canonical steps need each block's S1 (and S2) as one integer, so this kernel takes the blocks in
// pairs and reduces both at once (one hadd tree for two blocks), then runs the float steps of block i
// before those of block i + 1, each exactly as item 2 says. The ymm form: for one column the zmm form
// is slower (its pairs cost an insert per chunk, and wide instructions give up a port).

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// S1 (8 int32 lanes) and S2 (4 lanes) of a block, each summed exactly, as floats in lanes 0 and 1.
static inline __m128 fucina_s1_s2(const __m256i s1_lanes, const __m128i s2_lanes) {
    const __m128i s1_4 = _mm_add_epi32(_mm256_castsi256_si128(s1_lanes), _mm256_extracti128_si256(s1_lanes, 1));
    const __m128i h = _mm_hadd_epi32(s1_4, s2_lanes);  // s1 s1 s2 s2 (pair sums)
    return _mm_cvtepi32_ps(_mm_hadd_epi32(h, h));      // S1 S2 S1 S2
}

// One block's canonical float steps with a min term (item 2 above).
static inline float fucina_block_with_min(const float acc, const __m128 s12, const float xd, const float xdmin,
                                          const float yd) {
    const float s1 = _mm_cvtss_f32(s12);
    const float s2 = _mm_cvtss_f32(_mm_movehdup_ps(s12));
    const float r = fmaf(-xdmin, s2, s1 * xd);
    return fmaf(r, yd, acc);
}

// One block's canonical float steps without one (Q6_K).
static inline float fucina_block(const float acc, const int s1, const float xd, const float yd) {
    return fmaf((float) s1 * xd, yd, acc);
}

// x.d and x.dmin of blocks a and b (two fp16 pairs, adjacent in each block) as floats: da dmina db dminb.
static inline __m128 fucina_k4_dm2(const block_q4_K * GGML_RESTRICT xa, const block_q4_K * GGML_RESTRICT xb) {
    int32_t a, b;
    memcpy(&a, &xa->d, 4);  // d, dmin: the block's first 4 bytes (also in block_q5_K)
    memcpy(&b, &xb->d, 4);
    return _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b)));
}

// A Q4_K block's 8 int32 lanes of S1 and, in *mins, its 4 lanes of S2 (kquant_common.c, item 1).
FUCINA_INLINE __m256i fucina_q4_K_lanes(const block_q4_K * GGML_RESTRICT x, const block_q8_K * GGML_RESTRICT y,
                                        __m128i * GGML_RESTRICT mins) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i mins_and_scales = fucina_k4_mins_and_scales(x->scales);
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    const __m256i scales = MM256_SET_M128I(sc128, sc128);
    *mins = fucina_k4_mins_prod(_mm256_extracti128_si256(mins_and_scales, 1), y);
    fucina_pair sumi = fucina_ymm_pair(_mm256_setzero_si256(), _mm256_setzero_si256());
    for (int j = 0; j < QK_K/64; ++j) {
        _mm_prefetch((const char *) (x->qs + 32*j) + FUCINA_PF, _MM_HINT_T0);
        const __m256i q4bits = _mm256_loadu_si256((const __m256i *) (x->qs + 32*j));
        const fucina_pair q4 = fucina_ymm_pair(_mm256_and_si256(q4bits, m4),
                                               _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4));
        const fucina_pair sc = fucina_ymm_pair(_mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+0)),
                                               _mm256_shuffle_epi8(scales, get_scale_shuffle_k4(2*j+1)));
        sumi = fucina_ymm_dot2_split(sumi, q4, sc, fucina_ymm_load2(y->qs + 64*j));
    }
    return _mm256_add_epi32(sumi.lo, sumi.hi);
}

// Two blocks' S1 and S2, each summed exactly, as floats: S1a S1b S2a S2b.
static inline __m128 fucina_s1_s2_pair(const __m256i s1a, const __m256i s1b, const __m128i s2a, const __m128i s2b) {
    const __m256i h = _mm256_hadd_epi32(s1a, s1b);  // per half: a pairs, b pairs
    const __m128i s1 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_cvtepi32_ps(_mm_hadd_epi32(s1, _mm_hadd_epi32(s2a, s2b)));
}

static inline float fucina_q4_K_one(const int nb, const block_q4_K * GGML_RESTRICT x,
                                    const block_q8_K * GGML_RESTRICT y) {
    float acc = 0.0f;
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        __m128i ma, mb;
        const __m256i sa = fucina_q4_K_lanes(x + i, y + i, &ma);
        const __m256i sb = fucina_q4_K_lanes(x + i + 1, y + i + 1, &mb);
        const __m128 f = fucina_s1_s2_pair(sa, sb, ma, mb);                 // S1a S1b S2a S2b
        const __m128 dm = fucina_k4_dm2(x + i, x + i + 1);                 // da dmina db dminb
        const __m128 xd = _mm_shuffle_ps(dm, dm, _MM_SHUFFLE(2, 0, 2, 0));    // da db
        const __m128 xdmin = _mm_shuffle_ps(dm, dm, _MM_SHUFFLE(3, 1, 3, 1)); // dmina dminb
        // r = S1 * x.d, then r - x.dmin * S2 fused: item 2's first two steps, lane by lane.
        const __m128 r = _mm_fnmadd_ps(xdmin, _mm_movehl_ps(f, f), _mm_mul_ps(f, xd));
        acc = fmaf(_mm_cvtss_f32(r), y[i].d, acc);
        acc = fmaf(_mm_cvtss_f32(_mm_movehdup_ps(r)), y[i + 1].d, acc);
    }
    if (i < nb) {
        __m128i m;
        const __m256i s = fucina_q4_K_lanes(x + i, y + i, &m);
        acc = fucina_block_with_min(acc, fucina_s1_s2(s, m), GGML_CPU_FP16_TO_FP32(x[i].d),
                                    GGML_CPU_FP16_TO_FP32(x[i].dmin), y[i].d);
    }
    return acc;
}

// A Q6_K block's 8 int32 lanes of S1, the offset of 32 taken out (kquant_common.c, item 1).
FUCINA_INLINE __m256i fucina_q6_K_lanes(const block_q6_K * GGML_RESTRICT x, const block_q8_K * GGML_RESTRICT y) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi8(15);
    const __m128i scales = _mm_loadu_si128((const __m128i *) x->scales);
    fucina_pair s01 = fucina_ymm_pair(_mm256_setzero_si256(), _mm256_setzero_si256()), s23 = s01;
    for (int j = 0; j < QK_K/128; ++j) {
        _mm_prefetch((const char *) (x->ql + 64*j) + FUCINA_PF, _MM_HINT_T0);
        _mm_prefetch((const char *) (x->ql + 64*j) + FUCINA_PF + 64, _MM_HINT_T0);
        const __m256i q4bits1 = _mm256_loadu_si256((const __m256i *) (x->ql + 64*j));
        const __m256i q4bits2 = _mm256_loadu_si256((const __m256i *) (x->ql + 64*j + 32));
        const __m256i q4bitsH = _mm256_loadu_si256((const __m256i *) (x->qh + 32*j));
        const __m256i q0 = _mm256_or_si256(_mm256_and_si256(q4bits1, m15), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m3), 4));
        const __m256i q1 = _mm256_or_si256(_mm256_and_si256(q4bits2, m15),
                                           _mm256_slli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(12)), 2));
        const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m15),
                                           _mm256_and_si256(q4bitsH, _mm256_set1_epi8(48)));
        const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m15),
                                           _mm256_srli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(-64)), 2));
        const fucina_pair sc01 = fucina_ymm_pair(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, get_scale_shuffle(4*j+0))),
                                                 _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, get_scale_shuffle(4*j+1))));
        const fucina_pair sc23 = fucina_ymm_pair(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, get_scale_shuffle(4*j+2))),
                                                 _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, get_scale_shuffle(4*j+3))));
        const int8_t * GGML_RESTRICT q8 = y->qs + 128*j;
        s01 = fucina_ymm_dot2_split(s01, fucina_ymm_pair(q0, q1), sc01, fucina_ymm_load2(q8));
        s23 = fucina_ymm_dot2_split(s23, fucina_ymm_pair(q2, q3), sc23, fucina_ymm_load2(q8 + 64));
    }
    const __m256i sumi = _mm256_add_epi32(_mm256_add_epi32(s01.lo, s01.hi), _mm256_add_epi32(s23.lo, s23.hi));
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y->bsums);
    const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, _mm256_cvtepi8_epi16(scales)), 5);
    return _mm256_sub_epi32(sumi, q8sclsub);
}

static inline float fucina_q6_K_one(const int nb, const block_q6_K * GGML_RESTRICT x,
                                    const block_q8_K * GGML_RESTRICT y) {
    float acc = 0.0f;
    int i = 0;
    for (; i + 1 < nb; i += 2) {
        const __m256i h = _mm256_hadd_epi32(fucina_q6_K_lanes(x + i, y + i), fucina_q6_K_lanes(x + i + 1, y + i + 1));
        const __m128i s1 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        const __m128 f = _mm_cvtepi32_ps(_mm_hadd_epi32(s1, s1));          // S1a S1b S1a S1b
        const __m128 xd = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(x[i].d), x[i + 1].d, 1));
        const __m128 r = _mm_mul_ps(f, xd);                               // S1 * x.d, lane by lane
        acc = fmaf(_mm_cvtss_f32(r), y[i].d, acc);
        acc = fmaf(_mm_cvtss_f32(_mm_movehdup_ps(r)), y[i + 1].d, acc);
    }
    if (i < nb) {
        acc = fucina_block(acc, hsum_i32_8(fucina_q6_K_lanes(x + i, y + i)), GGML_CPU_FP16_TO_FP32(x[i].d), y[i].d);
    }
    return acc;
}

#endif // __AVX2__ && __FMA__
