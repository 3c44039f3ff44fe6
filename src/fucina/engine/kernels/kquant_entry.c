
// ---- the entry points ---------------------------------------------------------------------------
// One switch per call, so each group size is its own inlined body (a constant ncols keeps the
// columns' sums in registers). The form is chosen once per process by the CPU, never by the batch:
// zmm on Intel CPUs with AVX-512BW and VNNI, ymm elsewhere; GGML_FUCINA_KQUANT_ZMM=0/1 overrides the
// choice (tests run both forms on one machine: they must give the same bits). Without AVX2 and FMA,
// the one-column kernel per column, which is then the same arithmetic by definition.

#if defined(__AVX2__) && defined(__FMA__)
static int fucina_kquant_zmm(void) {
#if defined(FUCINA_HAS_ZMM) && defined(__GNUC__)
    static int chosen = -1;  // a benign race: every thread computes the same value
    if (chosen < 0) {
        const char * env = getenv("GGML_FUCINA_KQUANT_ZMM");
        chosen = env != NULL ? atoi(env) != 0 : __builtin_cpu_is("intel");
    }
    return chosen;
#else
    return 0;
#endif
}

#define FUCINA_COLS_SWITCH(group, nb, s, bs, x, vy, by, ncols) \
    switch (ncols) { \
        case 1: group(nb, s, bs, x, vy, by, 1); break;   case 2: group(nb, s, bs, x, vy, by, 2); break; \
        case 3: group(nb, s, bs, x, vy, by, 3); break;   case 4: group(nb, s, bs, x, vy, by, 4); break; \
        case 5: group(nb, s, bs, x, vy, by, 5); break;   case 6: group(nb, s, bs, x, vy, by, 6); break; \
        case 7: group(nb, s, bs, x, vy, by, 7); break;   case 8: group(nb, s, bs, x, vy, by, 8); break; \
        default: GGML_ABORT("fucina: column group of %d", ncols); \
    }
#if defined(FUCINA_HAS_ZMM)
#define FUCINA_COLS_BODY(block, t, one) \
    if (fucina_kquant_zmm()) { \
        FUCINA_COLS_SWITCH(fucina_##t##_group_zmm, n / QK_K, s, bs, (const block *) vx, vy, by, ncols) \
    } else { \
        FUCINA_COLS_SWITCH(fucina_##t##_group_ymm, n / QK_K, s, bs, (const block *) vx, vy, by, ncols) \
    }
#else
#define FUCINA_COLS_BODY(block, t, one) \
    FUCINA_COLS_SWITCH(fucina_##t##_group_ymm, n / QK_K, s, bs, (const block *) vx, vy, by, ncols)
#endif
#else
#define FUCINA_COLS_BODY(block, t, one) \
    for (int c = 0; c < ncols; ++c) { one(n, s + c * bs, 0, vx, 0, (const char *) vy + c * by, 0, 1); }
#endif

#define FUCINA_COLS_ENTRY(t, block) \
void ggml_vec_dot_##t##_q8_K_cols(int n, float * GGML_RESTRICT s, size_t bs, const void * GGML_RESTRICT vx, \
                                  const void * GGML_RESTRICT vy, size_t by, int ncols) { \
    assert(n % QK_K == 0); \
    assert(ncols >= 1 && ncols <= FUCINA_COLS_MAX); \
    FUCINA_COLS_BODY(block, t, ggml_vec_dot_##t##_q8_K) \
}

FUCINA_COLS_ENTRY(q4_K, block_q4_K)
FUCINA_COLS_ENTRY(q5_K, block_q5_K)
FUCINA_COLS_ENTRY(q6_K, block_q6_K)
