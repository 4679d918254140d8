/* matmul.c - the CPU backend's matrix products: y[t] = act(W x[t] + b) over a pass.
 *
 * One arithmetic per position: every output y[t][r] is the same chain of operations whatever
 * n is and however rows and positions are blocked. Each (row, position) pair owns one 8-lane
 * accumulator; lane l sums W[r][c] * x[t][c] over c = l, l+8, l+16, ... in increasing c; the
 * lanes are then summed in one fixed tree, and the columns past the last multiple of 8 are added
 * one by one. Blocking (NT_MR rows x NT_NP positions share the loads of one step) changes which
 * accumulators are live together, never the chain of any one of them.
 *
 * Two variants fill that contract: a scalar one (mul then add, always available, the reference)
 * and an AVX2 one (FMA, runtime-detected, with F16C for f16 weights). The two differ in the last
 * bits (fused vs separate rounding); within a variant results are bit-identical across pass
 * sizes. Weights are read in their stored format (f32, f16, bf16) and widened in registers.
 */
#include "cpu.h"

#include <immintrin.h>
#include <stdlib.h>

/* Rows and positions that share one step: 4 x 3 = 12 accumulators + 4 weight registers fill
 * the 16 AVX2 registers; a weight row block of 4 rows stays in L1 while the pass's positions
 * stream past it. */
#define NT_MR 4
#define NT_NP 3

static inline float load_w1(const void *base, size_t i, enum nt_dtype dt) {
    const uint8_t *p = (const uint8_t *)base;
    uint16_t h;
    float f;
    switch (dt) {
    case NT_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return nt_bf16_to_f32(h);
    case NT_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return nt_f16_to_f32(h);
    default: memcpy(&f, p + 4 * i, 4); return f;
    }
}

static inline float apply(float v, const float *bias, int r, enum nt_act act) {
    if (bias) v += bias[r];
    if (act == NT_ACT_RELU2) {
        v = v > 0.0f ? v : 0.0f;
        v = v * v;
    }
    return v;
}

/* ---- scalar variant ---- */

/* The fixed lane tree, the same one the AVX2 horizontal sum computes. */
static inline float lane_tree(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static float dot_scalar(const void *W, size_t row_off, enum nt_dtype dt, const float *x, int cols) {
    float acc[8] = {0};
    int c8 = cols & ~7;
    for (int c = 0; c < c8; c += 8)
        for (int l = 0; l < 8; l++) acc[l] = acc[l] + load_w1(W, row_off + (size_t)(c + l), dt) * x[c + l];
    float s = lane_tree(acc);
    for (int c = c8; c < cols; c++) s = s + load_w1(W, row_off + (size_t)c, dt) * x[c];
    return s;
}

static void rows_scalar(const struct nt_mm *m, int r0, int r1) {
    const struct nt_matrix *W = m->W;
    int cols = (int)W->cols;
    for (int r = r0; r < r1; r++)
        for (int t = 0; t < m->n; t++) {
            float v = dot_scalar(W->data, (size_t)r * (size_t)cols, W->dtype, m->x + (size_t)t * m->x_stride, cols);
            m->y[(size_t)t * m->y_stride + r] = apply(v, m->bias, r, m->act);
        }
}

/* ---- AVX2 variant ---- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 __m256 load_w8(const void *base, size_t i, enum nt_dtype dt) {
    const uint8_t *p = (const uint8_t *)base;
    switch (dt) {
    case NT_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case NT_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i)));
    default:
        return _mm256_loadu_ps((const float *)(const void *)(p + 4 * i));
    }
}

static inline AVX2 float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* a_l + a_{l+4} */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));            /* (a0+a4)+(a2+a6), (a1+a5)+(a3+a7) */
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* mr rows from r, np positions from t: the block kernel. Called with constant mr, np so the
 * accumulators live in registers. */
static inline AVX2 __attribute__((always_inline)) void
block_avx2(const struct nt_mm *m, enum nt_dtype dt, int r, int t, int mr, int np) {
    const struct nt_matrix *W = m->W;
    int cols = (int)W->cols, c8 = cols & ~7;
    __m256 acc[NT_MR][NT_NP];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < np; j++) acc[i][j] = _mm256_setzero_ps();
    const float *x0 = m->x + (size_t)t * m->x_stride;
    for (int c = 0; c < c8; c += 8) {
        __m256 w[NT_MR];
        for (int i = 0; i < mr; i++) w[i] = load_w8(W->data, (size_t)(r + i) * (size_t)cols + (size_t)c, dt);
        for (int j = 0; j < np; j++) {
            __m256 xv = _mm256_loadu_ps(x0 + (size_t)j * m->x_stride + c);
            for (int i = 0; i < mr; i++) acc[i][j] = _mm256_fmadd_ps(w[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < np; j++) {
            float s = hsum8(acc[i][j]);
            const float *xj = x0 + (size_t)j * m->x_stride;
            size_t ro = (size_t)(r + i) * (size_t)cols;
            for (int c = c8; c < cols; c++) s = s + load_w1(W->data, ro + (size_t)c, dt) * xj[c];
            m->y[(size_t)(t + j) * m->y_stride + r + i] = apply(s, m->bias, r + i, m->act);
        }
}

static inline AVX2 __attribute__((always_inline)) void
rows_avx2_dt(const struct nt_mm *m, enum nt_dtype dt, int r0, int r1) {
    int r = r0;
    for (; r + NT_MR <= r1; r += NT_MR) {
        int t = 0;
        for (; t + NT_NP <= m->n; t += NT_NP) block_avx2(m, dt, r, t, NT_MR, NT_NP);
        for (; t < m->n; t++) block_avx2(m, dt, r, t, NT_MR, 1);
    }
    for (; r < r1; r++)
        for (int t = 0; t < m->n; t++) block_avx2(m, dt, r, t, 1, 1);
}

static AVX2 void rows_avx2(const struct nt_mm *m, int r0, int r1) {
    switch (m->W->dtype) {
    case NT_DTYPE_BF16: rows_avx2_dt(m, NT_DTYPE_BF16, r0, r1); break;
    case NT_DTYPE_F16: rows_avx2_dt(m, NT_DTYPE_F16, r0, r1); break;
    default: rows_avx2_dt(m, NT_DTYPE_F32, r0, r1); break;
    }
}

/* ---- dispatch ---- */

int nt_cpu_simd_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

void nt_cpu_matmul(const struct nt_mm *m, int use_simd, int n_threads) {
    NT_ASSERT(m->W->dtype == NT_DTYPE_F32 || m->W->dtype == NT_DTYPE_F16 || m->W->dtype == NT_DTYPE_BF16);
    int rows = (int)m->W->rows;
    int blocks = (rows + NT_MR - 1) / NT_MR;
    /* Rows split in whole blocks so no thread count changes the blocking of a row. Threads only
     * pay off when there is work for them: below this many weight bytes x positions the fork
     * costs more than it saves. */
    uint64_t work = (uint64_t)m->W->rows * (uint64_t)m->W->cols * (uint64_t)m->n;
    int threads = work < 65536 ? 1 : n_threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int b = 0; b < blocks; b++) {
        int r0 = b * NT_MR, r1 = r0 + NT_MR < rows ? r0 + NT_MR : rows;
        if (use_simd)
            rows_avx2(m, r0, r1);
        else
            rows_scalar(m, r0, r1);
    }
}
