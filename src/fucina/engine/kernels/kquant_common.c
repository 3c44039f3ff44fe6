
// ============================================================================================
// fucina: column-group kernels for the K-quants (Q4_K, Q5_K, Q6_K weights x Q8_K activations).
//
// ggml_vec_dot_<type>_q8_K_cols(n, s, bs, vx, vy, by, ncols) multiplies ONE weight row (vx) by
// ncols activation columns (column c at vy + c*by, 1 <= ncols <= FUCINA_COLS_MAX = 8) and writes column
// c's dot product to s[c*bs]. A batched verify multiplies every weight row by k+1 columns; the
// one-column ggml_vec_dot_<type>_q8_K above unpacks the row's quants and scales again for each of
// them, here that happens once per block for the whole group.
//
// Invariant: s[c*bs] is bit for bit the canonical dot product of the row and column c defined below,
// whatever ncols is and whichever instruction set this file was compiled for; so is the one-column
// vec_dot of these types (it is this kernel with one column), and so is ggml's tiled K-quant kernel,
// which the patch set lets serve large batches (fucina.engine.patches). The canonical dot product:
//   1. Integers are exact. Per 256-value block i, S1[i] = sum over sub-blocks j of scale_j * (the
//      sub-block's quant . q8 dot), with Q6_K's offset of 32 taken out as 32 * scale_j * bsum_j, and
//      (Q4_K, Q5_K) S2[i] = sum_j min_j * (the sub-block's q8 sum). Every int32 lane partition and
//      every order of those additions give the same two numbers (maddubs+madd, maddubs+dpwssd, the
//      tiled kernel's dpbusd), and nothing overflows: a maddubs pair is at most 2*63*128 < 2^15, and the
//      largest sum, Q6_K's lanes before the offset comes out, at most 256*127*63*128 < 2^28.
//   2. Floats, per block in block order, from acc = +0.0f (the tiled kernel's operations, one column):
//        r   = (float) S1[i] * x.d                    (the row's fp16 scales widened to float)
//        r   = fmaf(-x.dmin, (float) S2[i], r)        (Q4_K, Q5_K: the tiled kernel's fnmadd)
//        acc = fmaf(r, y.d, acc)                      (the tiled kernel's fmadd into its buffer)
//      and the result is acc. A column's floats never meet another column's.
// tests/test_kernels.py checks every group size against the one-column kernel and both against an
// exact model of these steps; the engine tests check the tiled kernel's rows against single steps.
//
// Worked example (Q4_K, n = 512: two blocks; ncols = 3): for block i the row's 128 quant bytes
// become 8 vectors of 32 nibbles and its 12 scale bytes 8 scale vectors, once; then columns 0, 1
// and 2 each take their 256 q8 bytes through 8 maddubs and 8 dpwssd into their own sumi, whose
// lanes add up to S1[i], and each column's acc takes the three float steps. A verify of 3 rows pays
// 1 unpack instead of 3.
// ============================================================================================

#ifndef FUCINA_COLS_MAX
#error "FUCINA_COLS_MAX comes from quants.h (fucina's declarations)"
#endif

#if defined(__AVX2__) && defined(__FMA__)

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// sumi + madd(a, b) in one instruction (the same int32 lanes).
#define FUCINA_DPWSSD(sumi, a, b) _mm256_dpwssd_epi32((sumi), (a), (b))
#elif defined(__AVXVNNI__)
#define FUCINA_DPWSSD(sumi, a, b) _mm256_dpwssd_avx_epi32((sumi), (a), (b))
#else
#define FUCINA_DPWSSD(sumi, a, b) _mm256_add_epi32((sumi), _mm256_madd_epi16((a), (b)))
#endif

// How far ahead of the weights it reads a kernel asks for them (_mm_prefetch, one cache line per 32 or 64
// bytes read): a decode step streams ~1 GB of weights once, and on an AMD EPYC (Zen 4, 2 threads) the
// hardware prefetchers alone kept the one-column kernels 8% slower (Qwen2.5-Coder 1.5B plain step
// 49 -> 45 ms, the column groups' verifies likewise). Rows are contiguous, so near a row's end this asks
// for the next row's first lines; past the matrix's last byte a prefetch is a no-op (it never faults).
// Prefetches change no arithmetic.
#define FUCINA_PF 1024

// The one-column kernels' Q4_K/Q5_K 6-bit scale and min unpacking: 8 scales then 8 mins, as uint8.
static inline __m256i fucina_k4_mins_and_scales(const uint8_t * GGML_RESTRICT packed) {
    uint32_t utmp[4];
    fucina_k4_scales_mins(packed, utmp);  // k4_scales.c
    return _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3], utmp[2], utmp[1], utmp[0]));
}

// The 4-lane mins product of a Q4_K/Q5_K block with a column's bsums (the one-column kernels' prod).
static inline __m128i fucina_k4_mins_prod(const __m128i mins, const block_q8_K * GGML_RESTRICT y) {
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y->bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
    return _mm_madd_epi16(mins, q8s);
}

// Column c's integer sum in lane c, for 8 vectors of 8 lanes (c < 8): exact, like every sum of ints here.
static inline __m256i fucina_hsum_8x8(const __m256i v[8]) {
    const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    // q0 lane c (c < 4): column c's lanes 0-3 summed in the low half, lanes 4-7 in the high half.
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

// The same for 8 vectors of 4 lanes (the mins products).
static inline __m256i fucina_hsum_8x4(const __m128i m[8]) {
    const __m128i b0 = _mm_hadd_epi32(_mm_hadd_epi32(m[0], m[1]), _mm_hadd_epi32(m[2], m[3]));
    const __m128i b1 = _mm_hadd_epi32(_mm_hadd_epi32(m[4], m[5]), _mm_hadd_epi32(m[6], m[7]));
    return MM256_SET_M128I(b1, b0);
}

// Block i's y.d of columns 0..ncols-1, column c in lane c (0 past ncols).
#define FUCINA_COL_D(y, i, ncols) _mm256_setr_ps((y)[0][i].d, \
    (ncols) > 1 ? (y)[1][i].d : 0.0f, (ncols) > 2 ? (y)[2][i].d : 0.0f, (ncols) > 3 ? (y)[3][i].d : 0.0f, \
    (ncols) > 4 ? (y)[4][i].d : 0.0f, (ncols) > 5 ? (y)[5][i].d : 0.0f, (ncols) > 6 ? (y)[6][i].d : 0.0f, \
    (ncols) > 7 ? (y)[7][i].d : 0.0f)

// Stores column c's result, lane c of acc, at s[c*bs].
static inline void fucina_store_cols(float * GGML_RESTRICT s, size_t bs, const __m256 acc, const int ncols) {
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int c = 0; c < ncols; ++c) {
        s[c*bs] = out[c];
    }
}

#if defined(__GNUC__)
#define FUCINA_INLINE static inline __attribute__((always_inline))
#else
#define FUCINA_INLINE static inline
#endif

// Two 32-byte chunks as a pair of ymm (the 256-bit groups).
typedef struct { __m256i lo, hi; } fucina_pair;
static inline fucina_pair fucina_ymm_pair(const __m256i lo, const __m256i hi) {
    fucina_pair p = { lo, hi };
    return p;
}
static inline fucina_pair fucina_ymm_load2(const int8_t * GGML_RESTRICT q8) {
    fucina_pair p = { _mm256_loadu_si256((const __m256i *) q8), _mm256_loadu_si256((const __m256i *) (q8 + 32)) };
    return p;
}
static inline __m256i fucina_ymm_dot2(__m256i sumi, const fucina_pair w, const fucina_pair scale, const fucina_pair q8) {
    sumi = FUCINA_DPWSSD(sumi, scale.lo, _mm256_maddubs_epi16(w.lo, q8.lo));
    return FUCINA_DPWSSD(sumi, scale.hi, _mm256_maddubs_epi16(w.hi, q8.hi));
}
// The same into two accumulators, one per chunk, for a single column: dpwssd chains every product of
// an accumulator through it (about 4 cycles each), so one accumulator makes a block 8 dependent steps
// long; two halve that (the groups' columns already run side by side). The lanes add up to the same
// integers. (Measured on an AMD EPYC Zen 4, L2-resident rows: 8% faster for Q4_K, 3% for Q6_K; madd then
// add, as upstream's vec_dot does, was slower still.)
static inline fucina_pair fucina_ymm_dot2_split(const fucina_pair sumi, const fucina_pair w, const fucina_pair scale,
                                                const fucina_pair q8) {
    return fucina_ymm_pair(FUCINA_DPWSSD(sumi.lo, scale.lo, _mm256_maddubs_epi16(w.lo, q8.lo)),
                           FUCINA_DPWSSD(sumi.hi, scale.hi, _mm256_maddubs_epi16(w.hi, q8.hi)));
}

// With AVX-512BW and VNNI a second form of the groups runs the integer part on 64-byte vectors: the
// low half of a zmm holds one 32-byte chunk, the high half the next, and the block's 8 lanes are the
// two halves added at the end (item 1: the same integers). Where 512-bit units are full width
// (Intel) that halves the instructions of the dot products; on AMD's Zen 4, which runs a zmm
// operation as two 256-bit halves, the ymm form measured 10% faster. kquant_entry.c picks one per CPU.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define FUCINA_HAS_ZMM 1
static inline __m512i fucina_zmm_pair(const __m256i lo, const __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
static inline __m256i fucina_zmm_fold(const __m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
#endif

#endif // __AVX2__ && __FMA__
