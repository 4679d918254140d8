/* matmul_bf16.c - the products of bf16 weights at the AVX-512 BF16 level (cpu.h's
 * NT_CPU_AVX512BF16): vdpbf16ps on the activations rounded to bf16.
 *
 * Why a third arithmetic: below this level a bf16 weight is widened to f32 and meets the f32
 * activation in an FMA (matmul.c), 16 multiply-adds per instruction after two instructions of
 * widening per 16 weights. vdpbf16ps takes 32 bf16 weights as they are stored and does 32
 * multiply-adds; prompts on bf16 models are bound by exactly that rate. Its price is the
 * activation's precision: the instruction takes both operands in bf16 (what llama.cpp and
 * PyTorch's bf16 matmuls do as well). Within one machine every pass size, blocking and thread
 * count gives the same bits (DESIGN.md: one arithmetic per position); against the FMA arithmetic
 * it differs by the activations' rounding (at most 2^-8 relative per term, averaging out over a
 * row).
 *
 * THE ARITHMETIC of output (row r, position t), cols columns in nb = ceil(cols / 32) blocks of
 * 32, columns past cols counting as w = 0, x = 0:
 *     xb[c]  = x[t][c] rounded to bf16, to nearest even (a NaN stays a NaN)
 *     lane l = 0 .. 15, acc_l from +0, for block b = 0, 1, ..., nb - 1 in order:
 *         acc_l = fma(w[r][32b + 2l + 1], xb[32b + 2l + 1], acc_l)
 *         acc_l = fma(w[r][32b + 2l],     xb[32b + 2l],     acc_l)
 *       where a bf16 operand below the normal range counts as 0 and a result below it becomes 0
 *       (the instruction's DAZ and FTZ; the product of two bf16 values is exact in f32, so each
 *       step is one rounding, to nearest even);
 *     s_l = acc_l + acc_{l+8} for l < 8, then the fixed tree of the other products
 *       ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)) (cpu.h's nt_cpu_tree8);
 *     y = act(s + bias[r]) (nt_cpu_apply_act).
 * That is vdpbf16ps's documented order (Intel SDM: the odd pair first), one instruction per
 * block; tests/unit/test_matmul.c writes it out in scalar C and asks for the same bits.
 *
 * THE ROUNDED ACTIVATIONS live in the product's qx scratch (cpu.h: nt_cpu_quantize_x fills it):
 * position t's nb blocks of 32 bf16 (64 bytes each) at t * x_bytes(cols), the
 * columns past cols zero. nt_cpu_qx_bytes(n, cols) always holds them (2.125 bytes a column).
 */
#include "cpu.h"

#include <immintrin.h>
#include <string.h>

#define BF16_LEVEL __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")))
#define INLINE inline __attribute__((always_inline))

#define XB 32 /* columns per block: one vdpbf16ps */

static inline size_t blocks_of(int64_t cols) { return (size_t)((cols + XB - 1) / XB); }

/* Bytes of one position's rounded activations in qx (a multiple of 64, within nt_cpu_qx_bytes). */
static inline size_t x_bytes(int64_t cols) { return blocks_of(cols) * 64; }

/* ---- the activations ---- */

void BF16_LEVEL nt_cpu_bf16_round_x(const struct nt_mm *m, int t0, int t1) {
    int64_t cols = m->W->cols;
    size_t nb = blocks_of(cols), full = (size_t)cols / XB, pb = x_bytes(cols);
    for (int t = t0; t < t1; t++) {
        const float *x = m->x + (size_t)t * (size_t)m->x_stride;
        uint8_t *dst = (uint8_t *)m->qx + (size_t)t * pb;
        for (size_t b = 0; b < full; b++) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + XB * b + 16), _mm512_loadu_ps(x + XB * b));
            _mm512_storeu_si512((void *)(dst + 64 * b), (__m512i)v);
        }
        if (full < nb) { /* the last, short block: its missing columns are zeros */
            int rest = (int)(cols - (int64_t)(XB * full));
            __mmask16 lo = (__mmask16)(rest >= 16 ? 0xffff : (1u << rest) - 1);
            __mmask16 hi = (__mmask16)(rest > 16 ? (1u << (rest - 16)) - 1 : 0);
            const float *xs = x + XB * full;
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, xs + 16), _mm512_maskz_loadu_ps(lo, xs));
            _mm512_storeu_si512((void *)(dst + 64 * full), (__m512i)v);
        }
    }
}

/* ---- the kernels ---- */

/* The lane fold and step 4 of one (row, position) output. */
static BF16_LEVEL INLINE void finish(const struct nt_mm *m, int r, int t, __m512 acc) {
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc), hi); /* s_l = acc_l + acc_{l+8} */
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)); /* s_l + s_{l+4} */
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                         /* (0+4)+(2+6), (1+5)+(3+7) */
    float v = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
    m->y[(size_t)t * m->y_stride + r] = nt_cpu_apply_act(v, m->bias, r, m->act);
}

/* Block b of a weight row: 32 bf16 as stored; the short last block of a row zero-filled past
 * cols (a masked load never touches the bytes it leaves out). */
static BF16_LEVEL INLINE __m512bh weights(const uint16_t *row, size_t b, size_t full, __mmask32 tail) {
    if (b < full) return (__m512bh)_mm512_loadu_si512((const void *)(row + XB * b));
    return (__m512bh)_mm512_maskz_loadu_epi16(tail, (const void *)(row + XB * b));
}

/* Rows r .. r+R-1 x positions t .. t+P-1: R x P accumulators (R + P + R P <= 32 registers), each
 * block's R weight vectors serving P positions. */
static BF16_LEVEL INLINE void tile(const struct nt_mm *m, int r, int t, const int R, const int P) {
    size_t cols = (size_t)m->W->cols, nb = blocks_of(m->W->cols), full = cols / XB;
    size_t pb = x_bytes(m->W->cols);
    __mmask32 tail = (__mmask32)((1ull << (cols % XB)) - 1);
    const uint16_t *w0 = (const uint16_t *)m->W->data + (size_t)r * cols;
    const uint8_t *x0 = (const uint8_t *)m->qx + (size_t)t * pb;
    __m512 acc[4][6];
#pragma GCC unroll 4
    for (int j = 0; j < R; j++)
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) acc[j][p] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m512bh w[4];
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) w[j] = weights(w0 + (size_t)j * cols, b, full, tail);
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x0 + (size_t)p * pb + 64 * b));
#pragma GCC unroll 4
            for (int j = 0; j < R; j++) acc[j][p] = _mm512_dpbf16_ps(acc[j][p], w[j], xv);
        }
    }
#pragma GCC unroll 6
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) finish(m, r + j, t + p, acc[j][p]);
}

/* Rows r .. r+7 x one position: the decode shape, bound by the weight stream; eight rows keep
 * eight streams in flight, and the next eight rows are prefetched a cache line per row per block
 * (one block of a row is one 64-byte line). */
static BF16_LEVEL INLINE void stream8(const struct nt_mm *m, int r) {
    size_t cols = (size_t)m->W->cols, nb = blocks_of(m->W->cols), full = cols / XB;
    __mmask32 tail = (__mmask32)((1ull << (cols % XB)) - 1);
    const uint16_t *w0 = (const uint16_t *)m->W->data + (size_t)r * cols;
    const uint8_t *x0 = (const uint8_t *)m->qx;
    /* integer addresses: the last block's prefetches point past the matrix, which a prefetch may
     * do but C pointer arithmetic may not */
    uintptr_t next = (uintptr_t)(w0 + 8 * cols);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[j] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(next + 2 * ((size_t)j * cols + XB * b)), _MM_HINT_T0);
        __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(x0 + 64 * b));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], weights(w0 + (size_t)j * cols, b, full, tail), xv);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) finish(m, r + j, 0, acc[j]);
}

/* The tile shapes, each with its R and P constant so that its accumulators stay in registers. */
static BF16_LEVEL void tile_4x6(const struct nt_mm *m, int r, int t) { tile(m, r, t, 4, 6); }
static BF16_LEVEL void tile_4xp(const struct nt_mm *m, int r, int t, int P) {
    switch (P) {
    case 1: tile(m, r, t, 4, 1); break;
    case 2: tile(m, r, t, 4, 2); break;
    case 3: tile(m, r, t, 4, 3); break;
    case 4: tile(m, r, t, 4, 4); break;
    default: tile(m, r, t, 4, 5); break;
    }
}
static BF16_LEVEL void tile_1x6(const struct nt_mm *m, int r, int t) { tile(m, r, t, 1, 6); }
static BF16_LEVEL void tile_1x1(const struct nt_mm *m, int r, int t) { tile(m, r, t, 1, 1); }

/* Weight bytes of the rows one sweep over the pass's positions keeps hot in L2 (as matmul.c). */
#define CHUNK_BYTES (128 * 1024)

void BF16_LEVEL nt_cpu_matmul_bf16_rows(const struct nt_mm *m, int r0, int r1) {
    NT_ASSERT(m->W->dtype == NT_DTYPE_BF16 && m->qx);
    int r = r0;
    if (m->n == 1)
        for (; r + 8 <= r1; r += 8) stream8(m, r);
    int chunk = (int)(CHUNK_BYTES / ((size_t)m->W->cols * 2)) / 4 * 4;
    if (chunk < 4) chunk = 4;
    int full_end = r + (r1 - r) / 4 * 4;
    for (int c0 = r; c0 < full_end; c0 += chunk) {
        int c1 = c0 + chunk < full_end ? c0 + chunk : full_end;
        int t = 0;
        for (; t + 6 <= m->n; t += 6)
            for (int rb = c0; rb < c1; rb += 4) tile_4x6(m, rb, t);
        if (t < m->n)
            for (int rb = c0; rb < c1; rb += 4) tile_4xp(m, rb, t, m->n - t);
    }
    for (r = full_end; r < r1; r++) {
        int t = 0;
        for (; t + 6 <= m->n; t += 6) tile_1x6(m, r, t);
        for (; t < m->n; t++) tile_1x1(m, r, t);
    }
}
