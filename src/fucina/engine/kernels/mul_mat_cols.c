    // attempt to reduce false-sharing (does not seem to make a difference)
    // 16 * 2 for the mmla kernels, 16 * FUCINA_COLS_MAX for fucina's column groups
    float tmp[16 * FUCINA_COLS_MAX];

#if defined(__AVX2__) && defined(__FMA__)
    // fucina: weights that have a column-group kernel take it for every batch size: each weight row
    // of a 16-row block meets up to `gmax` activation columns per call. Each column's result is the
    // one-column vec_dot's (the kernels' invariant), so how many columns share a call changes the
    // speed, never a bit; a group of one (a single-token step) takes vec_dot itself.
    fucina_vec_dot_cols_t cols = NULL;
    int64_t gmax = 0;
    switch (type) {
        case GGML_TYPE_Q4_1: cols = ggml_vec_dot_q4_1_q8_1_cols; gmax = 8; break;
        case GGML_TYPE_Q4_K: cols = ggml_vec_dot_q4_K_q8_K_cols; gmax = FUCINA_COLS_MAX; break;
        case GGML_TYPE_Q5_K: cols = ggml_vec_dot_q5_K_q8_K_cols; gmax = FUCINA_COLS_MAX; break;
        case GGML_TYPE_Q6_K: cols = ggml_vec_dot_q6_K_q8_K_cols; gmax = FUCINA_COLS_MAX; break;
        default: break;
    }
    if (cols != NULL && num_rows_per_vec_dot == 1) {
        for (int64_t iir1 = ir1_start; iir1 < ir1_end; iir1 += blck_1) {
            for (int64_t iir0 = ir0_start; iir0 < ir0_end; iir0 += blck_0) {
                const int64_t ir1_stop = MIN(iir1 + blck_1, ir1_end);
                for (int64_t ir1 = iir1; ir1 < ir1_stop; ) {
                    const int64_t i13 = (ir1 / (ne12 * ne1));
                    const int64_t i12 = (ir1 - i13 * ne12 * ne1) / ne1;
                    const int64_t i11 = (ir1 - i13 * ne12 * ne1 - i12 * ne1);
                    const int64_t i03 = i13 / r3;
                    const int64_t i02 = i12 / r2;
                    // A group stays inside one matrix of the batch, where columns are src1_col_stride apart.
                    const int64_t g = MIN(MIN(gmax, ir1_stop - ir1), ne11 - i11);
                    const char * src0_row = (const char*)src0->data + (0 + i02 * nb02 + i03 * nb03);
                    const char * src1_col = (const char*)wdata +
                        (src1_cont || src1->type != vec_dot_type
                            ? (i11 + i12 * ne11 + i13 * ne12 * ne11) * row_size
                            : (i11 * nb11 + i12 * nb12 + i13 * nb13));
                    char * dst_col = (char*)dst->data + (i11 * nb1 + i12 * nb2 + i13 * nb3);
                    for (int64_t ir0 = iir0; ir0 < iir0 + blck_0 && ir0 < ir0_end; ++ir0) {
                        if (g == 1) {
                            vec_dot(ne00, &tmp[ir0 - iir0], 0, src0_row + ir0 * nb01, 0, src1_col, 0, 1);
                        } else {
                            cols(ne00, &tmp[ir0 - iir0], 16, src0_row + ir0 * nb01, src1_col, src1_col_stride, (int) g);
                        }
                    }
                    for (int64_t c = 0; c < g; ++c) {
                        memcpy((float*)(dst_col + c * nb1) + iir0, tmp + c * 16,
                               (MIN(iir0 + blck_0, ir0_end) - iir0) * sizeof(float));
                    }
                    ir1 += g;
                }
            }
        }
        return;
    }
#endif
