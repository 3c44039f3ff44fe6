// An experiment, not part of the engine: exact one-column kernels over upstream's interleaved K-quant layouts.
//
// Question: stock llama.cpp decodes Q4_K through a repacked layout (8 weight rows interleaved per block,
// block_q4_Kx8, ggml-cpu/repack.cpp) whose gemv reads faster than fucina's one-column kernel. Can a kernel over
// that layout compute fucina's canonical dot product (src/fucina/engine/kernels/kquant_common.c: exact integers
// S1/S2 per 256-value block, then r = fma(-dmin, S2, S1 * d), acc = fma(r, y.d, acc) in block order) bit for bit,
// and how much faster is it? Here the 8 rows' integers come from dpbusd on 64-byte chunks (one chunk holds 8 bytes
// of each row), the float steps run in 8 row lanes: each lane does the scalar steps, so each row keeps its bits.
//
// What it checks (exit 1 if any row differs): the interleaved kernel against fucina's one-column vec_dot
// (dlopen'ed from an engine build) and against a scalar model of the canonical steps; upstream's gemv
// (not exact) only for its speed. ILV_Q6=1 does the same for Q6_K (block_q6_Kx8).
//
//   gcc -O2 -march=native -fopenmp benchmarks/kernels/interleaved_kquant.c -o /tmp/ilv -ldl -lm
//   ENGINE=~/.cache/fucina/engine-patched-0.3.36/llama_cpp/lib/libggml-cpu.so
//   STOCK=$(python -c "import llama_cpp,os;print(os.path.dirname(llama_cpp.__file__))")/lib/libggml-cpu.so
//   /tmp/ilv $ENGINE $STOCK NB NROWS [threads] [reps]     (NB blocks of 256 per row; ILV_Q6=1 for Q6_K)
//
// Needs AVX-512 VNNI (the interleaved kernels are written for zmm only). Results: BENCHMARKS.md, "Against
// llama.cpp's draftless modes on the grouped-attention engine" (stop 51).
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint16_t half;
typedef struct { half d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;      // 144
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } block_q8_K;             // 292
typedef struct { half d[8]; half dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; } block_q4_Kx8;  // 1152

typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; half d; } block_q6_K;         // 210
typedef struct { half d[8]; int8_t scales[128]; uint8_t ql[1024]; uint8_t qh[512]; } block_q6_Kx8;  // 1680

typedef void (*vec_dot_t)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*gemv_t)(int, float *, size_t, const void *, const void *, int, int);

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static half f2h(float f) { return _cvtss_sh(f, 0); }

// upstream's make_block_q4_Kx8 (repack.cpp), re-expressed for the harness (interleave 8).
static void make_x8(const block_q4_K * in, block_q4_Kx8 * out) {
    for (int i = 0; i < 8; i++) { out->d[i] = in[i].d; out->dmin[i] = in[i].dmin; }
    for (int i = 0; i < 128; ++i) memcpy(&out->qs[i * 8], &in[i % 8].qs[(i / 8) * 8], 8);
    uint8_t s[8], m[8];
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 8; j++) { s[j] = in[j].scales[i] & 63; m[j] = in[j].scales[i + 4] & 63; }
        uint8_t * o = out->scales + i * 12;
        for (int j = 0; j < 4; j++) { o[j] = (s[j] & 63) + ((s[j + 4] & 48) << 2); o[j + 4] = (m[j] & 63) + ((m[j + 4] & 48) << 2); }
        for (int j = 0; j < 4; j++) o[8 + j] = (s[j + 4] & 15) + ((m[j + 4] & 15) << 4);
    }
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 8; j++) {
            s[j] = ((in[j].scales[i] & 192) >> 2) | (in[j].scales[i + 8] & 15);
            m[j] = ((in[j].scales[i + 4] & 192) >> 2) | ((in[j].scales[i + 8] & 240) >> 4);
        }
        uint8_t * o = out->scales + 48 + i * 12;
        for (int j = 0; j < 4; j++) { o[j] = (s[j] & 63) + ((s[j + 4] & 48) << 2); o[j + 4] = (m[j] & 63) + ((m[j + 4] & 48) << 2); }
        for (int j = 0; j < 4; j++) o[8 + j] = (s[j + 4] & 15) + ((m[j + 4] & 15) << 4);
    }
}

// The engine's own unpack of Q4_K's 12 scale bytes (fucina_k4_scales_mins), so both sides read the scales alike.
#include "../../src/fucina/engine/kernels/k4_scales.c"

#define PF 1024

// Rows 8g..8g+7 times one column: s[r] for the 8 rows. nb blocks.
// Per block: S1[r] = sum_sb scale[sb][r] * dot(sub-block sb of row r, q8), S2[r] = sum_sb min[sb][r] * qsum[sb]
// (exact int32); then r = fma(-dmin, S2, S1 * d); acc = fma(r, y.d, acc) in 8 row lanes.
static void gemv_exact_x8(int nb, float * s, const block_q4_Kx8 * x, const block_q8_K * y) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int l = 0; l < nb; ++l) {
        const block_q4_Kx8 * b = x + l;
        const block_q8_K * a = y + l;
        // scales and mins: sub-block sb's 12 bytes hold 8 rows' scale and min (as one Q4_K's 12 bytes)
        // utmp: bytes 0..7 scales of rows 0..7 for sub-block sb, bytes 8..15 mins.
        __m512i s1 = _mm512_setzero_si512();    // 8 qwords: row r's S1 in qword r (exact)
        __m256i s2 = _mm256_setzero_si256();    // 8 int32: row r's S2
        for (int p = 0; p < 4; ++p) {
            // sub-blocks 2p (low nibbles) and 2p+1 (high nibbles)
            uint32_t u0[4], u1[4];
            fucina_k4_scales_mins(b->scales + (2 * p) * 12, u0);
            fucina_k4_scales_mins(b->scales + (2 * p + 1) * 12, u1);
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            for (int k = 0; k < 4; ++k) {
                const uint8_t * q = b->qs + (4 * p + k) * 64;
                _mm_prefetch((const char *) q + PF, _MM_HINT_T0);
                const __m512i w = _mm512_loadu_si512((const void *) q);
                const __m512i wl = _mm512_and_si512(w, m4);
                const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
                int64_t al, ah;
                memcpy(&al, a->qs + p * 64 + k * 8, 8);
                memcpy(&ah, a->qs + p * 64 + 32 + k * 8, 8);
                lo = _mm512_dpbusd_epi32(lo, wl, _mm512_set1_epi64(al));
                hi = _mm512_dpbusd_epi32(hi, wh, _mm512_set1_epi64(ah));
            }
            // pair the two int32 lanes of each row (qword r), low dword holds the sum
            lo = _mm512_add_epi32(lo, _mm512_srli_epi64(lo, 32));
            hi = _mm512_add_epi32(hi, _mm512_srli_epi64(hi, 32));
            const __m512i sc0 = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(((uint64_t) u0[1] << 32) | u0[0]));
            const __m512i sc1 = _mm512_cvtepu8_epi64(_mm_cvtsi64_si128(((uint64_t) u1[1] << 32) | u1[0]));
            s1 = _mm512_add_epi64(s1, _mm512_mul_epi32(lo, sc0));
            s1 = _mm512_add_epi64(s1, _mm512_mul_epi32(hi, sc1));
            const __m256i mn0 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(((uint64_t) u0[3] << 32) | u0[2]));
            const __m256i mn1 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(((uint64_t) u1[3] << 32) | u1[2]));
            s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(mn0, _mm256_set1_epi32(a->bsums[4 * p] + a->bsums[4 * p + 1])));
            s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(mn1, _mm256_set1_epi32(a->bsums[4 * p + 2] + a->bsums[4 * p + 3])));
        }
        const __m256 s1f = _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(s1));
        const __m256 s2f = _mm256_cvtepi32_ps(s2);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) b->d));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) b->dmin));
        const __m256 r = _mm256_fnmadd_ps(dmin, s2f, _mm256_mul_ps(s1f, d));
        acc = _mm256_fmadd_ps(r, _mm256_set1_ps(a->d), acc);
    }
    _mm256_storeu_ps(s, acc);
}

static float scalar_q4K(int nb, const block_q4_K * x, const block_q8_K * y) {
    float acc = 0.0f;
    for (int i = 0; i < nb; ++i) {
        uint32_t u[4]; fucina_k4_scales_mins(x[i].scales, u);
        const uint8_t * sc = (const uint8_t *) u, * mn = (const uint8_t *) u + 8;
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 4; ++j) {
            int lo = 0, hi = 0;
            for (int t = 0; t < 32; ++t) { lo += (x[i].qs[32*j+t] & 15) * y[i].qs[64*j+t]; hi += (x[i].qs[32*j+t] >> 4) * y[i].qs[64*j+32+t]; }
            s1 += sc[2*j] * lo + sc[2*j+1] * hi;
        }
        for (int j = 0; j < 8; ++j) s2 += mn[j] * (y[i].bsums[2*j] + y[i].bsums[2*j+1]);
        const float r = fmaf(-_cvtsh_ss(x[i].dmin), (float) s2, (float) s1 * _cvtsh_ss(x[i].d));
        acc = fmaf(r, y[i].d, acc);
    }
    return acc;
}

// upstream's make_block_q6_Kx8 (repack.cpp), re-expressed (interleave 8).
static void make_q6_x8(const block_q6_K * in, block_q6_Kx8 * out) {
    for (int i = 0; i < 8; i++) out->d[i] = in[i].d;
    for (int i = 0; i < 128; ++i) memcpy(&out->ql[i * 8], &in[i % 8].ql[(i / 8) * 8], 8);
    for (int i = 0; i < 64; ++i) memcpy(&out->qh[i * 8], &in[i % 8].qh[(i / 8) * 8], 8);
    for (int i = 0; i < 8; i++) for (int j = 0; j < 16; j++) out->scales[j * 8 + i] = in[i].scales[j];
}

// The canonical Q6_K dot product, scalar: S1 = sum_j sc_j * sum (q - 32) * a over scale group j; acc = fma(S1 * d, y.d, acc).
static float scalar_q6K(int nb, const block_q6_K * x, const block_q8_K * y) {
    float acc = 0.0f;
    for (int i = 0; i < nb; ++i) {
        int q[256];
        for (int n = 0; n < 2; ++n) for (int l = 0; l < 32; ++l) {
            const uint8_t * ql = x[i].ql + 64 * n, * qh = x[i].qh + 32 * n;
            q[128*n + l]      = ((ql[l] & 15)      | (((qh[l] >> 0) & 3) << 4)) - 32;
            q[128*n + l + 32] = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
            q[128*n + l + 64] = ((ql[l] >> 4)      | (((qh[l] >> 4) & 3) << 4)) - 32;
            q[128*n + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        }
        int s1 = 0;
        for (int j = 0; j < 16; ++j) { int d = 0; for (int t = 0; t < 16; ++t) d += q[16*j+t] * y[i].qs[16*j+t]; s1 += x[i].scales[j] * d; }
        acc = fmaf((float) s1 * _cvtsh_ss(x[i].d), y[i].d, acc);
    }
    return acc;
}

// Rows 8g..8g+7 (Q6_K, interleaved) times one column, canonical per row, float steps in row lanes.
// ql chunk c (64 bytes: 8 bytes of each row) is half n = c/8 at offset o = 8*(c%8) of the half's 64 ql bytes:
// o < 32: low nibbles are values 128n+o.. (qh shift 0), high nibbles 128n+64+o.. (shift 4); o >= 32: low
// 128n+o.. (shift 2), high 128n+64+o.. (shift 6); their qh bytes are qh chunk 4n + (o%32)/8. Chunks c and
// c+1 (c even) make whole 16-value scale groups.
static void gemv_q6_exact_x8(int nb, float * s, const block_q6_Kx8 * x, const block_q8_K * y) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int l = 0; l < nb; ++l) {
        const block_q6_Kx8 * b = x + l;
        const block_q8_K * a = y + l;
        __m512i s1 = _mm512_setzero_si512();
        for (int n = 0; n < 2; ++n) {
            for (int tp = 0; tp < 4; tp += 2) {
                // values 128n + 32e + 8t (e = 0..3: ql side and nibble), t = tp, tp+1: one 16-value scale group per e
                __m512i d0 = _mm512_setzero_si512(), d1 = d0, d2 = d0, d3 = d0;
                for (int t = tp; t < tp + 2; ++t) {
                    const uint8_t * qa = b->ql + (8 * n + t) * 64;      // o = 8t: values 128n+8t (low), +64 (high)
                    const uint8_t * qb = b->ql + (8 * n + 4 + t) * 64;  // o = 32+8t: values 128n+32+8t, +96
                    _mm_prefetch((const char *) qa + PF, _MM_HINT_T0);
                    _mm_prefetch((const char *) qb + PF, _MM_HINT_T0);
                    const __m512i la = _mm512_loadu_si512((const void *) qa);
                    const __m512i lb = _mm512_loadu_si512((const void *) qb);
                    const __m512i qh = _mm512_loadu_si512((const void *) (b->qh + (4 * n + t) * 64));
                    const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(qh, m2), 4);
                    const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2), m2), 4);
                    const __m512i h2 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m2), 4);
                    const __m512i h3 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 6), m2), 4);
                    const int8_t * av = a->qs + 128 * n + 8 * t;
                    int64_t a0, a1, a2, a3;
                    memcpy(&a0, av, 8); memcpy(&a1, av + 32, 8); memcpy(&a2, av + 64, 8); memcpy(&a3, av + 96, 8);
                    d0 = _mm512_dpbusd_epi32(d0, _mm512_or_si512(_mm512_and_si512(la, m4), h0), _mm512_set1_epi64(a0));
                    d1 = _mm512_dpbusd_epi32(d1, _mm512_or_si512(_mm512_and_si512(lb, m4), h1), _mm512_set1_epi64(a1));
                    d2 = _mm512_dpbusd_epi32(d2, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(la, 4), m4), h2), _mm512_set1_epi64(a2));
                    d3 = _mm512_dpbusd_epi32(d3, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lb, 4), m4), h3), _mm512_set1_epi64(a3));
                }
                // group j of quarter e: (128n + 32e + 8tp) / 16; dot_j - 32 * bsum_j, times scale_j, exact
                __m512i dq[4] = { d0, d1, d2, d3 };
                for (int e = 0; e < 4; ++e) {
                    const int j = (128 * n + 32 * e + 8 * tp) / 16;
                    __m512i v = _mm512_add_epi32(dq[e], _mm512_srli_epi64(dq[e], 32));
                    v = _mm512_sub_epi32(v, _mm512_set1_epi32(32 * a->bsums[j]));
                    int64_t sc; memcpy(&sc, b->scales + j * 8, 8);
                    s1 = _mm512_add_epi64(s1, _mm512_mul_epi32(v, _mm512_cvtepi8_epi64(_mm_cvtsi64_si128(sc))));
                }
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) b->d));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(s1)), d), _mm256_set1_ps(a->d), acc);
    }
    _mm256_storeu_ps(s, acc);
}

// Times nm methods, interleaved, reps rounds, on nth threads; method m runs groups [g0, g1) of 8 rows on each
// thread. Prints each method's median and its speed against method 0 (the engine's one-column kernel).
typedef void (*method_fn)(int m, long g0, long g1, void * ctx);
static int cmp_double(const void * a, const void * b) { const double x = *(const double *) a, y = *(const double *) b; return (x > y) - (x < y); }
static void time_methods(const char * const * names, int nm, int reps, int nth, long ngroups, double bytes,
                         method_fn run, void * ctx) {
    double * t = malloc(sizeof(double) * nm * reps);
    omp_set_num_threads(nth);
    for (int rep = 0; rep < reps; ++rep)
        for (int m = 0; m < nm; ++m) {
            const double t0 = now();
#pragma omp parallel
            {
                const int ith = omp_get_thread_num(), n = omp_get_num_threads();
                run(m, ngroups * ith / n, ngroups * (ith + 1) / n, ctx);
            }
            t[m * reps + rep] = now() - t0;
        }
    double base = 0;
    for (int m = 0; m < nm; ++m) {
        qsort(t + m * reps, reps, sizeof(double), cmp_double);
        const double med = t[m * reps + reps / 2];
        base = m == 0 ? med : base;
        printf("  %-28s median %8.3f ms  %5.1f GB/s  %.2fx the one-column kernel's speed\n", names[m], med * 1e3,
               bytes / med / 1e9, base / med);
    }
    free(t);
}

// One activation row of nb blocks, as quantize_row_q8_K leaves it: random q8, its d, and bsums that match.
static block_q8_K * random_q8(int nb) {
    block_q8_K * y = aligned_alloc(64, sizeof(block_q8_K) * nb);
    for (int l = 0; l < nb; ++l) {
        y[l].d = ldexpf((float) (rand() % 1000 + 1), -17);
        for (int j = 0; j < 256; ++j) y[l].qs[j] = (int8_t) (rand() % 255 - 127);
        for (int j = 0; j < 16; ++j) { int t = 0; for (int i = 0; i < 16; ++i) t += y[l].qs[16 * j + i]; y[l].bsums[j] = t; }
    }
    return y;
}

// Rows w (nrows x nb blocks of bsz bytes) interleaved 8 at a time into w8 (blocks of xsz bytes) by make.
static void interleave(const void * w, void * w8, size_t bsz, size_t xsz, int nb, long nrows,
                       void (*make)(const void * in8, void * out)) {
    uint8_t tmp[8 * 256];
    for (long g = 0; g < nrows / 8; ++g)
        for (int l = 0; l < nb; ++l) {
            for (int r = 0; r < 8; ++r) memcpy(tmp + r * bsz, (const uint8_t *) w + ((g * 8 + r) * nb + l) * bsz, bsz);
            make(tmp, (uint8_t *) w8 + (g * nb + l) * xsz);
        }
}
static void make_q4_any(const void * in, void * out) { make_x8((const block_q4_K *) in, (block_q4_Kx8 *) out); }
static void make_q6_any(const void * in, void * out) { make_q6_x8((const block_q6_K *) in, (block_q6_Kx8 *) out); }

struct q6_ctx { vec_dot_t one6, stock6; int nb; const block_q6_K * w; const block_q6_Kx8 * w8; const block_q8_K * y;
                float * s_ref, * s_new; };
static void q6_method(int m, long g0, long g1, void * vc) {
    const struct q6_ctx * c = vc;
    const int nb = c->nb;
    for (long g = g0; g < g1; ++g) {
        if (m == 1) { gemv_q6_exact_x8(nb, c->s_new + 8 * g, c->w8 + g * nb, c->y); continue; }
        for (long r = 8 * g; r < 8 * g + 8; ++r) (m == 0 ? c->one6 : c->stock6)(nb * 256, c->s_ref + r, 0, c->w + r * nb, 0, c->y, 0, 1);
    }
}

static int run_q6(vec_dot_t one6, vec_dot_t stock6, int nb, long nrows, int nth, int reps) {
    srand(2);
    block_q6_K * w = aligned_alloc(64, sizeof(block_q6_K) * nb * nrows + 64);
    for (long i = 0; i < nb * nrows; ++i) {
        uint8_t * p = (uint8_t *) (w + i);
        for (size_t j = 0; j < sizeof(block_q6_K); ++j) p[j] = rand();
        w[i].d = f2h(ldexpf((float) (rand() % 1000 + 1), -18));
    }
    block_q6_Kx8 * w8 = aligned_alloc(64, sizeof(block_q6_Kx8) * nb * (nrows / 8));
    interleave(w, w8, sizeof(block_q6_K), sizeof(block_q6_Kx8), nb, nrows, make_q6_any);
    block_q8_K * y = random_q8(nb);
    float * s_ref = malloc(sizeof(float) * nrows), * s_new = malloc(sizeof(float) * nrows);
    for (long r = 0; r < nrows; ++r) one6(nb * 256, s_ref + r, 0, w + r * nb, 0, y, 0, 1);
    for (long g = 0; g < nrows / 8; ++g) gemv_q6_exact_x8(nb, s_new + 8 * g, w8 + g * nb, y);
    long diff = 0, dsc = 0;
    for (long r = 0; r < nrows; ++r) {
        if (memcmp(&s_ref[r], &s_new[r], 4)) { if (diff < 3) printf("q6 row %ld: ref %.9g new %.9g\n", r, s_ref[r], s_new[r]); ++diff; }
        if (r < 4096) { float v = scalar_q6K(nb, w + r * nb, y); if (memcmp(&v, &s_new[r], 4)) ++dsc; }
    }
    printf("Q6_K exact x8: %ld of %ld rows differ from the one-column kernel, %ld of the first 4096 from the scalar canonical\n",
           diff, nrows, dsc);
    struct q6_ctx c = { one6, stock6, nb, w, w8, y, s_ref, s_new };
    static const char * const names[] = { "engine one-column", "exact interleaved", "stock vec_dot (not exact)" };
    time_methods(names, 3, reps, nth, nrows / 8, (double) sizeof(block_q6_K) * nb * nrows, q6_method, &c);
    return diff || dsc;
}

struct q4_ctx { vec_dot_t one, stock4; gemv_t gemv; int nb; const block_q4_K * w; const block_q4_Kx8 * w8;
                const block_q8_K * y; float * s_ref, * s_new, * s_up; };
static void q4_method(int m, long g0, long g1, void * vc) {
    const struct q4_ctx * c = vc;
    const int nb = c->nb;
    if (m == 1) { c->gemv(nb * 256, c->s_up + 8 * g0, 0, c->w8 + g0 * nb, c->y, 1, (int) (8 * (g1 - g0))); return; }
    for (long g = g0; g < g1; ++g) {
        if (m == 2) { gemv_exact_x8(nb, c->s_new + 8 * g, c->w8 + g * nb, c->y); continue; }
        for (long r = 8 * g; r < 8 * g + 8; ++r) (m == 0 ? c->one : c->stock4)(nb * 256, c->s_ref + r, 0, c->w + r * nb, 0, c->y, 0, 1);
    }
}

int main(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: ilv ENGINE_LIB STOCK_LIB NB NROWS [threads] [reps]\n"); return 2; }
    const int nb = atoi(argv[3]);
    const long nrows = atol(argv[4]);
    const int nth = argc > 5 ? atoi(argv[5]) : 1;
    const int reps = argc > 6 ? atoi(argv[6]) : 7;
    void * ha = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    void * hb = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!ha || !hb) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    vec_dot_t one = (vec_dot_t) dlsym(ha, "ggml_vec_dot_q4_K_q8_K");
    gemv_t gemv = (gemv_t) dlsym(hb, "ggml_gemv_q4_K_8x8_q8_K");
    vec_dot_t stock4 = (vec_dot_t) dlsym(hb, "ggml_vec_dot_q4_K_q8_K");
    void (*init_a)(void) = (void (*)(void)) dlsym(ha, "ggml_cpu_init");
    void (*init_b)(void) = (void (*)(void)) dlsym(hb, "ggml_cpu_init");
    if (init_a) init_a();  // fills the fp16 table GGML_CPU_FP16_TO_FP32 reads
    if (init_b) init_b();
    if (getenv("ILV_Q6")) {
        vec_dot_t one6 = (vec_dot_t) dlsym(ha, "ggml_vec_dot_q6_K_q8_K");
        vec_dot_t stock6 = (vec_dot_t) dlsym(hb, "ggml_vec_dot_q6_K_q8_K");
        if (!one6 || !stock6) { fprintf(stderr, "missing symbol\n"); return 1; }
        return run_q6(one6, stock6, nb, nrows, nth, reps);
    }
    if (!one || !gemv || !stock4) { fprintf(stderr, "missing symbol\n"); return 1; }
    srand(1);
    block_q4_K * w = aligned_alloc(64, sizeof(block_q4_K) * nb * nrows);
    for (long i = 0; i < nb * nrows; ++i) {
        uint8_t * p = (uint8_t *) (w + i);
        for (size_t j = 0; j < sizeof(block_q4_K); ++j) p[j] = rand();
        w[i].d = f2h(ldexpf((float) (rand() % 1000 + 1), -18));
        w[i].dmin = f2h(ldexpf((float) (rand() % 1000 + 1), -19));
    }
    block_q4_Kx8 * w8 = aligned_alloc(64, sizeof(block_q4_Kx8) * nb * (nrows / 8));
    interleave(w, w8, sizeof(block_q4_K), sizeof(block_q4_Kx8), nb, nrows, make_q4_any);
    block_q8_K * y = random_q8(nb);
    float * s_ref = malloc(sizeof(float) * nrows), * s_new = malloc(sizeof(float) * nrows), * s_up = malloc(sizeof(float) * nrows);
    for (long r = 0; r < nrows; ++r) one(nb * 256, s_ref + r, 0, w + r * nb, 0, y, 0, 1);
    for (long g = 0; g < nrows / 8; ++g) gemv_exact_x8(nb, s_new + 8 * g, w8 + g * nb, y);
    long diff = 0;
    double maxrel = 0;
    for (long r = 0; r < nrows; ++r) {
        if (memcmp(&s_ref[r], &s_new[r], 4)) { if (diff < 3) printf("row %ld: ref %.9g new %.9g\n", r, s_ref[r], s_new[r]); ++diff; }
    }
    long dsc = 0;
    for (long r = 0; r < nrows; ++r) { float v = scalar_q4K(nb, w + r * nb, y); if (memcmp(&v, &s_new[r], 4)) ++dsc; }
    printf("exact x8 vs scalar canonical: %ld rows differ\n", dsc);
    gemv(nb * 256, s_up, 0, w8, y, 1, (int) nrows);
    for (long r = 0; r < nrows; ++r) { double e = fabs(s_up[r] - s_ref[r]) / (fabs(s_ref[r]) + 1e-30); if (e > maxrel) maxrel = e; }
    printf("exact x8 vs one-column: %ld of %ld rows differ; upstream gemv max rel diff %.3g\n", diff, nrows, maxrel);
    struct q4_ctx c = { one, stock4, gemv, nb, w, w8, y, s_ref, s_new, s_up };
    static const char * const names[] = { "engine one-column", "upstream gemv (not exact)", "exact interleaved",
                                          "stock vec_dot (not exact)" };
    time_methods(names, 4, reps, nth, nrows / 8, (double) sizeof(block_q4_K) * nb * nrows, q4_method, &c);
    return diff || dsc;
}
