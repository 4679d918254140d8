/* matmul_q_kern.h - the SIMD kernels of the packed products (matmul_q.c), written once and
 * compiled once per instruction set: matmul_q.c includes this file for AVX2, AVX-VNNI and
 * AVX-512 VNNI. What differs is the integer block sum of a (row, position, block) step and so
 * the record layout of qx the quantizer writes for it (matmul_q.c's header); everything else, the
 * float chain over the blocks, the blocking and the tiles, is this text, so the variants give the
 * same bits as the scalar reference by construction of the step alone.
 *
 * The includer defines:
 *   KT                   the target attribute of every function here;
 *   KN(name)             name with the variant's suffix (the variants live in one file);
 *   KQ8_WEIGHTS(w, A, B) 32 int8 weights of a q8_2f block, loaded as w, made what KQ8_DOT takes;
 *   KQ8_DOT(A, B, xr)    f32 (float)isum[l] of the block against the 64-byte record at xr;
 *   KQ4_DOT(w, xr)       the same for q4tp, from the [low | high] nibble bytes w (value + 8).
 * and may define (else the template's own kernels serve every row):
 *   KSTREAM(q4, P), KSTREAM_R(q4, P)  the streaming kernel of P positions for full row blocks and
 *                        its row count (the template's one-row kernels take the rest);
 *   KTILE(T, qx, pb, nb, i, tp, P)    the register tiles from tile row i on; gives the rows done.
 * It is undefined again at the end of this file.
 */

#ifndef KSTREAM
#define KSTREAM(q4, P) KN(stream_kerns)[q4][0][(P) - 1]
#define KSTREAM_R(q4, P) ((q4) ? Q4_SR(P) : Q8_SR(P))
#endif
#ifndef KTILE
#define KTILE(T, qx, pb, nb, i, tp, P) KN(tile_rows)(T, qx, pb, nb, i, tp, P)
#endif

/* -- a few positions: stream the weights, unpack them in registers -- */

/* A kernel takes R rows x P positions: each weight vector is loaded and unpacked once and used
 * for the P positions. Rows per kernel for P = 1 .. SP_MAX positions (registers: R x P
 * accumulators and ~6 temporaries in 16; for one position, more rows = more weight streams in
 * flight). */

/* Rows r .. r+R-1 x positions t .. t+P-1, q8_2f. */
static INL KT void KN(q8_stream)(const struct nt_mm *m, int r, int t, int R, int P) {
    const struct nt_matrix *W = m->W;
    int64_t cols = W->cols, nb = q_blocks(cols), nfull = cols / 32;
    const uint8_t *Wp = (const uint8_t *)W->data;
    size_t pb = q_pos_bytes(cols);
    const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t * pb;
    const uint8_t *row0 = Wp + (size_t)r * (size_t)cols;
    /* software prefetch of the next row block, a line per row per 64 bytes (integer addresses:
     * past the matrix's end a prefetch is harmless, pointer arithmetic would not be), into L2:
     * an L1 prefetch holds one of L1's few miss buffers until the line arrives, and that capped
     * a core's stream (one position, 4096 x 2688 from DRAM, 2 threads: 23 - 26 GB/s into L1,
     * 30 - 33 GB/s into L2, best of 4 runs each; the hardware brings L2 lines on to L1) */
    uintptr_t next = (uintptr_t)(row0 + (size_t)R * (size_t)cols);
    __m256 acc[12]; /* [i * P + p]; flat and small, so the compiler keeps it in registers */
#pragma GCC unroll 12
    for (int i = 0; i < R * P; i++) acc[i] = _mm256_setzero_ps();
    /* one block of R rows x P positions; WLOAD(row) gives the block's 32 weights */
#define Q8_STEP(WLOAD)                                                                                   \
    do {                                                                                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                            \
            const uint8_t *row = row0 + (size_t)i * (size_t)cols; /* unused by the streaming layout */  \
            (void)row;                                                                                   \
            __m256i A, B;                                                                                \
            KQ8_WEIGHTS(WLOAD, A, B);                                                                    \
            _Pragma("GCC unroll 8") for (int p = 0; p < P; p++) {                                        \
                const uint8_t *xr = qx + (size_t)p * pb + QREC * b;                                      \
                __m256 d = _mm256_broadcast_ss((const float *)(const void *)(qx + (size_t)p * pb + QREC * nb) + b); \
                acc[i * P + p] = _mm256_fmadd_ps(KQ8_DOT(A, B, xr), d, acc[i * P + p]);                  \
            }                                                                                            \
        }                                                                                                \
    } while (0)
    int64_t b = 0;
    if (R == NT_CPU_Q8_STREAM_ROWS && m->stream && r % R == 0) {
        /* the rows in the streaming layout (cpu.h; matmul_q.c says why): one sequential stream,
         * which the hardware prefetches; short blocks come zero-padded */
        const uint8_t *blk = m->stream + (size_t)(r / R) * (size_t)nb * (32 * (size_t)R);
        for (; b < nb; b++) Q8_STEP(_mm256_loadu_si256((const __m256i *)(const void *)(blk + ((size_t)b * (size_t)R + (size_t)i) * 32)));
    } else {
        for (; b < nfull; b++) {
            if ((b & 1) == 0)
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) _mm_prefetch((const char *)(next + (size_t)i * (size_t)cols + 32 * (size_t)b), _MM_HINT_T1);
            Q8_STEP(_mm256_loadu_si256((const __m256i *)(const void *)(row + 32 * b)));
        }
        if (b < nb) Q8_STEP(q8_load_block(row, b, cols)); /* a short last block */
    }
#undef Q8_STEP
    const uint8_t *rs = Wp + nt_q8_2f_rs_offset(W->rows, cols);
    /* unrolled like the steps: a rolled loop here indexes acc[] at run time, which made gcc keep
     * acc in memory and store it on every block (q8s_2_4 spilled 3 chains and stored all 8) */
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        float rsf = nt_f16_to_f32(rd16(rs + 2 * (size_t)(r + i)));
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            m->y[(size_t)(t + p) * m->y_stride + r + i] = nt_cpu_apply_act(rsf * hsum8(acc[i * P + p]), m->bias, r + i, m->act);
    }
}

/* Rows r .. r+R-1 x positions t .. t+P-1, q4tp. */
static INL KT void KN(q4_stream)(const struct nt_mm *m, int r, int t, int R, int P) {
    const struct q4_view v = q4_view(m, r, t);
    const int64_t gpr = v.gpr, cstride = v.cstride;
    const uint8_t *params = v.params, *codes = v.codes, *qx = v.qx, *nib = v.nib;
    const size_t pb = v.pb, rowb = v.rowb;
    /* prefetch two row blocks ahead: q4tp's compute per byte is high enough that one block of
     * lead left a fifth of the bandwidth unused (measured, 1856 x 2688, 2 threads) */
    uintptr_t next = (uintptr_t)(nib + (size_t)2 * R * rowb);
    float tab[SR_MAX][32];
    for (int i = 0; i < R; i++) q4_row_table(params, r + i, tab[i]);
    __m256 acc[12]; /* [i * P + p]; flat and small, so the compiler keeps it in registers */
#pragma GCC unroll 12
    for (int i = 0; i < R * P; i++) acc[i] = _mm256_setzero_ps();
    /* group gg of R rows x P positions; CODE(i) gives row i's code */
#define Q4_STEP(gg, CODE)                                                                                \
    do {                                                                                                 \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {                                            \
            __m256i w = q4_unpack(nib + (size_t)i * rowb + 16 * (size_t)(gg));                           \
            __m256 sc = _mm256_broadcast_ss(&tab[i][CODE]);                                              \
            _Pragma("GCC unroll 8") for (int p = 0; p < P; p++) {                                        \
                const uint8_t *xr = qx + (size_t)p * pb + QREC * (gg);                                   \
                __m256 d = _mm256_broadcast_ss((const float *)(const void *)(qx + (size_t)p * pb + QREC * gpr) + (gg)); \
                acc[i * P + p] = _mm256_fmadd_ps(KQ4_DOT(w, xr), _mm256_mul_ps(sc, d), acc[i * P + p]);  \
            }                                                                                            \
        }                                                                                                \
    } while (0)
    int64_t g = 0;
    for (; g + 8 <= gpr; g += 8) {
        /* the codes of 8 groups: 40 bits at byte 5 g / 8 (the 8-byte read ends at most 3 bytes
         * past the row's codes, inside the payload's padding) */
        uint64_t cw[SR_MAX];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) cw[i] = rd64(codes + (size_t)i * (size_t)cstride + (size_t)(5 * g / 8));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            if ((j & 3) == 0)
#pragma GCC unroll 8
                for (int i = 0; i < R; i++) _mm_prefetch((const char *)(next + (size_t)i * rowb + 16 * (size_t)(g + j)), _MM_HINT_T0);
            Q4_STEP(g + j, (cw[i] >> (5 * j)) & 31);
        }
    }
    for (; g < gpr; g++) Q4_STEP(g, q4_code(codes + (size_t)i * (size_t)cstride, g));
#undef Q4_STEP
    /* unrolled for the same reason as q8_stream's: acc must stay in registers */
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            m->y[(size_t)(t + p) * m->y_stride + r + i] = nt_cpu_apply_act(hsum8(acc[i * P + p]), m->bias, r + i, m->act);
}

#define Q8S(R, P) static KT void KN(q8s_##R##_##P)(const struct nt_mm *m, int r, int t) { KN(q8_stream)(m, r, t, R, P); }
#define Q4S(R, P) static KT void KN(q4s_##R##_##P)(const struct nt_mm *m, int r, int t) { KN(q4_stream)(m, r, t, R, P); }
Q8S(6, 1) Q8S(4, 2) Q8S(3, 3) Q8S(2, 4) Q8S(1, 1) Q8S(1, 2) Q8S(1, 3) Q8S(1, 4)
Q4S(4, 1) Q4S(4, 2) Q4S(3, 3) Q4S(2, 4) Q4S(1, 1) Q4S(1, 2) Q4S(1, 3) Q4S(1, 4)
/* [format][full R | one row][P - 1] */
static stream_fn const KN(stream_kerns)[2][2][SP_MAX] = {
    {{KN(q8s_6_1), KN(q8s_4_2), KN(q8s_3_3), KN(q8s_2_4)}, {KN(q8s_1_1), KN(q8s_1_2), KN(q8s_1_3), KN(q8s_1_4)}},
    {{KN(q4s_4_1), KN(q4s_4_2), KN(q4s_3_3), KN(q4s_2_4)}, {KN(q4s_1_1), KN(q4s_1_2), KN(q4s_1_3), KN(q4s_1_4)}}};

/* Weight bytes of a row chunk: the rows every group of positions sweeps while they stay in L2. */

static KT void KN(rows_stream)(const struct nt_mm *m, int r0, int r1) {
    int q4 = m->W->dtype == NT_DTYPE_Q4TP;
    size_t row_bytes = q4 ? (size_t)m->W->cols / 2 : (size_t)m->W->cols;
    int chunk = (int)(STREAM_CHUNK_BYTES / row_bytes) / 12 * 12; /* 12: a multiple of every R */
    if (chunk < 12) chunk = 12;
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        int c1 = r1 - c0 < chunk ? r1 : c0 + chunk;
        for (int t = 0; t < m->n; t += SP_MAX) {
            int P = m->n - t < SP_MAX ? m->n - t : SP_MAX;
            int R = KSTREAM_R(q4, P);
            int r = c0;
            for (; r + R <= c1; r += R) KSTREAM(q4, P)(m, r, t);
            for (; r < c1; r++) KN(stream_kerns)[q4][1][P - 1](m, r, t);
        }
    }
}


/* Register tile: tile rows i0 .. i0+R-1 x sweep positions tp0 .. tp0+P-1 over the chunk. */
static INL KT void KN(q4_kernel)(struct tile *T, const uint8_t *qx, size_t pb, int64_t nb, int i0, int tp0,
                               int R, int P) {
    /* s = scale * d for each (row, position, group) of the register tile, 8 groups a multiply */
    _Alignas(32) float S[Q4_MR * Q4_MP][TB];
    const float *d0 = (const float *)(const void *)(qx + QREC * nb) + T->g0;
    int64_t nbc = T->nbc, n8 = nbc & ~(int64_t)7;
    for (int i = 0; i < R; i++)
        for (int p = 0; p < P; p++) {
            const float *sc = T->sc + (size_t)(i0 + i) * TB;
            const float *dp = (const float *)(const void *)((const uint8_t *)d0 + (size_t)p * pb);
            float *s = S[i * P + p];
            int64_t b = 0;
            for (; b < n8; b += 8) _mm256_store_ps(s + b, _mm256_mul_ps(_mm256_load_ps(sc + b), _mm256_loadu_ps(dp + b)));
            for (; b < nbc; b++) s[b] = sc[b] * dp[b];
        }
    __m256 acc[Q4_MR][Q4_MP];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) acc[i][p] = _mm256_load_ps(T->acc + ((size_t)(i0 + i) * MAXP + tp0 + p) * 8);
    const uint8_t *x0 = qx + QREC * T->g0;
    const uint8_t *w0 = T->w + (size_t)i0 * TB * 32;
    for (int64_t b = 0; b < nbc; b++) {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m256i w = _mm256_load_si256((const __m256i *)(const void *)(w0 + (size_t)i * TB * 32 + 32 * b));
#pragma GCC unroll 8
            for (int p = 0; p < P; p++) {
                const uint8_t *xr = x0 + (size_t)p * pb + QREC * b;
                acc[i][p] = _mm256_fmadd_ps(KQ4_DOT(w, xr), _mm256_broadcast_ss(&S[i * P + p][b]), acc[i][p]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) _mm256_store_ps(T->acc + ((size_t)(i0 + i) * MAXP + tp0 + p) * 8, acc[i][p]);
}

#define Q4K(R, P) static KT void KN(q4k_##R##_##P)(struct tile *T, const uint8_t *qx, size_t pb, int64_t nb, int i0, int tp0) \
    { KN(q4_kernel)(T, qx, pb, nb, i0, tp0, R, P); }
Q4K(1, 1) Q4K(1, 2) Q4K(1, 3) Q4K(1, 4) Q4K(1, 5) Q4K(1, 6)
Q4K(2, 1) Q4K(2, 2) Q4K(2, 3) Q4K(2, 4) Q4K(2, 5) Q4K(2, 6)
static kern_fn const KN(q4_kerns)[Q4_MR][Q4_MP] = {{KN(q4k_1_1), KN(q4k_1_2), KN(q4k_1_3), KN(q4k_1_4), KN(q4k_1_5), KN(q4k_1_6)},
                                                {KN(q4k_2_1), KN(q4k_2_2), KN(q4k_2_3), KN(q4k_2_4), KN(q4k_2_5), KN(q4k_2_6)}};

/* Register tiles of the tile's rows from row i, positions tp .. tp+P-1; gives the rows done. */
static INL KT int KN(tile_rows)(struct tile *T, const uint8_t *qx, size_t pb, int64_t nb, int i, int tp, int P) {
    int R = T->nr - i < Q4_MR ? T->nr - i : Q4_MR;
    KN(q4_kerns)[R - 1][P - 1](T, qx, pb, nb, i, tp);
    return R;
}

static KT void KN(rows_tiled_q4)(const struct nt_mm *m, int r0, int r1) {
    const struct nt_matrix *W = m->W;
    int64_t nb = q_blocks(W->cols);
    size_t pb = q_pos_bytes(W->cols);
    struct tile T; /* ~38 KB of stack: nothing is allocated inside a pass */
    for (int r = r0; r < r1; r += TR) {
        T.nr = r1 - r < TR ? r1 - r : TR;
        for (int ts = 0; ts < m->n; ts += MAXP) {
            int np = m->n - ts < MAXP ? m->n - ts : MAXP;
            const uint8_t *qx = (const uint8_t *)m->qx + (size_t)ts * pb;
            memset(T.acc, 0, sizeof T.acc);
            for (int64_t g0 = 0; g0 < nb; g0 += TB) {
                T.g0 = g0;
                T.nbc = nb - g0 < TB ? nb - g0 : TB;
                tile_unpack(&T, W, r);
                struct tile_fetch next = tile_fetch_next(W, r, r1, g0);
                for (int tp = 0; tp < np; tp += Q4_MP) {
                    int P = np - tp < Q4_MP ? np - tp : Q4_MP;
                    for (int i = 0; i < T.nr;) {
                        tile_fetch_some(&next, 8);
                        i += KTILE(&T, qx + (size_t)tp * pb, pb, nb, i, tp, P);
                    }
                }
            }
            for (int i = 0; i < T.nr; i++)
                for (int p = 0; p < np; p++) {
                    float v = hsum8(_mm256_load_ps(T.acc + ((size_t)i * MAXP + p) * 8));
                    m->y[(size_t)(ts + p) * m->y_stride + r + i] = nt_cpu_apply_act(v, m->bias, r + i, m->act);
                }
        }
    }
}

/* Pass sizes above this run q4tp on the tile (measured crossover: n = 8 is even, 16 favours it). */

static KT void KN(rows_q)(const struct nt_mm *m, int r0, int r1) {
    if (m->W->dtype == NT_DTYPE_Q4TP && m->n >= Q4_TILE_MIN_N)
        KN(rows_tiled_q4)(m, r0, r1);
    else
        KN(rows_stream)(m, r0, r1);
}

#undef Q8S
#undef Q4S
#undef Q4K
#undef KT
#undef KN
#undef KQ8_WEIGHTS
#undef KQ8_DOT
#undef KQ4_DOT
#undef KSTREAM
#undef KSTREAM_R
#undef KTILE
