/* matmul.c - the CPU backend's matrix products: y[t] = act(W x[t] + b) over a pass.
 *
 * One arithmetic per position: every output y[t][r] is the same chain of operations whatever
 * n is and however rows and positions are blocked. Each (row, position) pair owns one 8-lane
 * accumulator; lane l sums W[r][c] * x[t][c] over c = l, l+8, l+16, ... in increasing c; the
 * lanes are then summed in one fixed tree, and the columns past the last multiple of 8 are added
 * one by one. Blocking (NT_MR rows x NT_NP positions share the loads of one step) changes which
 * accumulators are live together, never the chain of any one of them.
 *
 * Two arithmetics fill that contract: a scalar one (mul then add, always available, the
 * reference) and the FMA one of the SIMD variants: AVX2 (runtime-detected, with F16C for f16
 * weights) and, at the AVX-512 level (cpu.h's NT_CPU_AVX512VNNI), the same FMAs on 512-bit vectors
 * holding two rows each, which gives the AVX2 variant's bits. Scalar and FMA differ in the last
 * bits (fused vs separate rounding); within one machine every pass size, blocking and variant of
 * the FMA arithmetic gives the same bits. Weights are read in their stored format (f32, f16,
 * bf16) and widened in registers.
 *
 * bf16 weights have a third arithmetic at the AVX-512 BF16 level: matmul_bf16.c, dispatched here.
 */
#include "cpu.h"
#include "log.h"

#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows and positions that share one step (kernel_3x4); a block of 3 weight rows stays in L1
 * while the pass's positions stream past it. */
#define NT_MR 3
#define NT_NP 4

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
            m->y[(size_t)t * m->y_stride + r] = nt_cpu_apply_act(v, m->bias, r, m->act);
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

/* The end of one (row, position) chain: the fixed lane tree, the tail columns in order, bias and
 * activation, the store. */
static inline AVX2 __attribute__((always_inline)) void
finish(const struct nt_mm *m, enum nt_dtype dt, int r, int t, __m256 acc) {
    int cols = (int)m->W->cols, c8 = cols & ~7;
    float s = hsum8(acc);
    const float *x = m->x + (size_t)t * m->x_stride;
    size_t ro = (size_t)r * (size_t)cols;
    for (int c = c8; c < cols; c++) s = s + load_w1(m->W->data, ro + (size_t)c, dt) * x[c];
    m->y[(size_t)t * m->y_stride + r] = nt_cpu_apply_act(s, m->bias, r, m->act);
}

/* Rows r..r+2 x positions t..t+3: 12 accumulators, 3 weight registers and one input register
 * fill the 16 AVX2 registers exactly (one more and an accumulator spills to the stack, which
 * puts a store-to-load round trip in its chain); each step loads 3 weight vectors and 4 input
 * vectors for 12 multiply-adds. */
static inline AVX2 __attribute__((always_inline)) void
kernel_3x4(const struct nt_mm *m, enum nt_dtype dt, int r, int t) {
    const void *W = m->W->data;
    size_t cols = (size_t)m->W->cols, c8 = cols & ~(size_t)7, o0 = (size_t)r * cols;
    size_t xs = (size_t)m->x_stride;
    const float *x0 = m->x + (size_t)t * xs;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    for (size_t c = 0; c < c8; c += 8) {
        __m256 w0 = load_w8(W, o0 + c, dt), w1 = load_w8(W, o0 + cols + c, dt);
        __m256 w2 = load_w8(W, o0 + 2 * cols + c, dt);
        __m256 xv = _mm256_loadu_ps(x0 + c);
        a00 = _mm256_fmadd_ps(w0, xv, a00);
        a10 = _mm256_fmadd_ps(w1, xv, a10);
        a20 = _mm256_fmadd_ps(w2, xv, a20);
        xv = _mm256_loadu_ps(x0 + xs + c);
        a01 = _mm256_fmadd_ps(w0, xv, a01);
        a11 = _mm256_fmadd_ps(w1, xv, a11);
        a21 = _mm256_fmadd_ps(w2, xv, a21);
        xv = _mm256_loadu_ps(x0 + 2 * xs + c);
        a02 = _mm256_fmadd_ps(w0, xv, a02);
        a12 = _mm256_fmadd_ps(w1, xv, a12);
        a22 = _mm256_fmadd_ps(w2, xv, a22);
        xv = _mm256_loadu_ps(x0 + 3 * xs + c);
        a03 = _mm256_fmadd_ps(w0, xv, a03);
        a13 = _mm256_fmadd_ps(w1, xv, a13);
        a23 = _mm256_fmadd_ps(w2, xv, a23);
    }
    finish(m, dt, r, t, a00); finish(m, dt, r + 1, t, a10); finish(m, dt, r + 2, t, a20);
    finish(m, dt, r, t + 1, a01); finish(m, dt, r + 1, t + 1, a11); finish(m, dt, r + 2, t + 1, a21);
    finish(m, dt, r, t + 2, a02); finish(m, dt, r + 1, t + 2, a12); finish(m, dt, r + 2, t + 2, a22);
    finish(m, dt, r, t + 3, a03); finish(m, dt, r + 1, t + 3, a13); finish(m, dt, r + 2, t + 3, a23);
}

/* Rows r..r+2 x one position: the decode shape, bound by the weight stream. */
static inline AVX2 __attribute__((always_inline)) void
kernel_3x1(const struct nt_mm *m, enum nt_dtype dt, int r, int t) {
    const void *W = m->W->data;
    size_t cols = (size_t)m->W->cols, c8 = cols & ~(size_t)7, o0 = (size_t)r * cols;
    const float *x0 = m->x + (size_t)t * m->x_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0;
    for (size_t c = 0; c < c8; c += 8) {
        __m256 xv = _mm256_loadu_ps(x0 + c);
        a0 = _mm256_fmadd_ps(load_w8(W, o0 + c, dt), xv, a0);
        a1 = _mm256_fmadd_ps(load_w8(W, o0 + cols + c, dt), xv, a1);
        a2 = _mm256_fmadd_ps(load_w8(W, o0 + 2 * cols + c, dt), xv, a2);
    }
    finish(m, dt, r, t, a0); finish(m, dt, r + 1, t, a1); finish(m, dt, r + 2, t, a2);
}

/* Rows r..r+5 x one position: two row blocks at once for a pass of one, so six weight streams
 * are in flight (three leave DRAM bandwidth unused). Each row's chain is kernel_3x1's. */
static inline AVX2 __attribute__((always_inline)) void
kernel_6x1(const struct nt_mm *m, enum nt_dtype dt, int r, int t) {
    const void *W = m->W->data;
    size_t cols = (size_t)m->W->cols, c8 = cols & ~(size_t)7, o0 = (size_t)r * cols;
    const float *x0 = m->x + (size_t)t * m->x_stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    /* Software prefetch of the next 6-row block, a cache line per row every 64 bytes of weights:
     * the hardware prefetchers alone left a third of the bandwidth unused (tg 67 -> 88 tokens/s
     * on the bench model, docs/PERF.md). Integer addresses: the last block's prefetches point
     * past the matrix, which a prefetch may do but C pointer arithmetic may not. */
    size_t esz = nt_dtype_size(dt), row_bytes = cols * esz;
    uintptr_t next = (uintptr_t)W + (o0 + 6 * cols) * esz;
    for (size_t c = 0; c < c8; c += 8) {
        if ((c * esz) % 64 == 0)
            for (size_t i = 0; i < 6; i++) _mm_prefetch((const char *)(next + i * row_bytes + c * esz), _MM_HINT_T0);
        __m256 xv = _mm256_loadu_ps(x0 + c);
        a0 = _mm256_fmadd_ps(load_w8(W, o0 + c, dt), xv, a0);
        a1 = _mm256_fmadd_ps(load_w8(W, o0 + cols + c, dt), xv, a1);
        a2 = _mm256_fmadd_ps(load_w8(W, o0 + 2 * cols + c, dt), xv, a2);
        a3 = _mm256_fmadd_ps(load_w8(W, o0 + 3 * cols + c, dt), xv, a3);
        a4 = _mm256_fmadd_ps(load_w8(W, o0 + 4 * cols + c, dt), xv, a4);
        a5 = _mm256_fmadd_ps(load_w8(W, o0 + 5 * cols + c, dt), xv, a5);
    }
    finish(m, dt, r, t, a0); finish(m, dt, r + 1, t, a1); finish(m, dt, r + 2, t, a2);
    finish(m, dt, r + 3, t, a3); finish(m, dt, r + 4, t, a4); finish(m, dt, r + 5, t, a5);
}

/* One row x one position: the leftover rows of a matrix whose row count is not a multiple of 3. */
static inline AVX2 __attribute__((always_inline)) void
kernel_1x1(const struct nt_mm *m, enum nt_dtype dt, int r, int t) {
    size_t cols = (size_t)m->W->cols, c8 = cols & ~(size_t)7, o0 = (size_t)r * cols;
    const float *x0 = m->x + (size_t)t * m->x_stride;
    __m256 a0 = _mm256_setzero_ps();
    for (size_t c = 0; c < c8; c += 8) a0 = _mm256_fmadd_ps(load_w8(m->W->data, o0 + c, dt), _mm256_loadu_ps(x0 + c), a0);
    finish(m, dt, r, t, a0);
}

/* Weight bytes of the rows one sweep over the pass's positions keeps hot: the rows of a chunk
 * stay in L2 (512 KiB per core here) while each group of 4 positions, in L1, passes over them. */
#define NT_CHUNK_BYTES (128 * 1024)

static inline AVX2 __attribute__((always_inline)) void
rows_avx2_dt(const struct nt_mm *m, enum nt_dtype dt, int r0, int r1) {
    int r = r0;
    if (m->n == 1)
        for (; r + 2 * NT_MR <= r1; r += 2 * NT_MR) kernel_6x1(m, dt, r, 0);
    /* rows in chunks; within a chunk, positions in groups of NT_NP outside, row blocks inside */
    int chunk = (int)(NT_CHUNK_BYTES / ((size_t)m->W->cols * nt_dtype_size(dt))) / NT_MR * NT_MR;
    if (chunk < NT_MR) chunk = NT_MR;
    int full_end = r + (r1 - r) / NT_MR * NT_MR;
    for (int c0 = r; c0 < full_end; c0 += chunk) {
        int c1 = c0 + chunk < full_end ? c0 + chunk : full_end;
        int t = 0;
        for (; t + NT_NP <= m->n; t += NT_NP)
            for (int rb = c0; rb < c1; rb += NT_MR) kernel_3x4(m, dt, rb, t);
        for (; t < m->n; t++)
            for (int rb = c0; rb < c1; rb += NT_MR) kernel_3x1(m, dt, rb, t);
    }
    for (r = full_end; r < r1; r++)
        for (int t = 0; t < m->n; t++) kernel_1x1(m, dt, r, t);
}

/* ---- AVX-512 (the NT_CPU_AVX512VNNI level): the AVX2 variant's arithmetic on 512-bit vectors ---- */

/* Two rows per vector: the low half holds row i's 8 lanes, the high half row i+1's, so each lane
 * is still one chain of the arithmetic above (the same FMAs in the same order as kernel_3x4's)
 * and the results are the AVX2 variant's bits; the input is broadcast to both halves by a load.
 * A pass of 4+ positions runs rows in blocks of 6 (3 pairs) x 8 positions (24 accumulators)
 * while 8 remain, then x 4; everything else (passes of 1 - 3, the leftover rows and positions)
 * runs the AVX2 kernels. */
#define Z512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw")))

/* Columns c .. c+7 of rows at o and o + cols, widened: [row o | row o + cols]. */
static inline Z512 __attribute__((always_inline)) __m512 load_w8x2(const void *base, size_t o, size_t cols, enum nt_dtype dt) {
    const uint8_t *p = (const uint8_t *)base;
    switch (dt) {
    case NT_DTYPE_BF16: {
        __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * o))),
                                            _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * (o + cols))), 1);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case NT_DTYPE_F16: {
        __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * o))),
                                            _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * (o + cols))), 1);
        return _mm512_cvtph_ps(h);
    }
    default: {
        const float *f = (const float *)(const void *)p;
        return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(f + o))),
                                                   _mm256_castps_pd(_mm256_loadu_ps(f + o + cols)), 1));
    }
    }
}

static inline Z512 __attribute__((always_inline)) void finish2(const struct nt_mm *m, enum nt_dtype dt, int r, int t, __m512 acc) {
    finish(m, dt, r, t, _mm512_castps512_ps256(acc));
    finish(m, dt, r + 1, t, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* Rows r..r+5 x positions t..t+P-1 (P = 4 or 8): each pair's widened weights (2 loads, the
 * conversion and a join per 8 columns) serve P positions, so 8 spread them over twice the FMAs of
 * 4: 24 accumulators, 3 weight registers and one input, of the 32 registers. */
static inline Z512 __attribute__((always_inline)) void kernel_z6(const struct nt_mm *m, enum nt_dtype dt, int r, int t, int P) {
    const void *W = m->W->data;
    size_t cols = (size_t)m->W->cols, c8 = cols & ~(size_t)7, o0 = (size_t)r * cols;
    size_t xs = (size_t)m->x_stride;
    const float *x0 = m->x + (size_t)t * xs;
    __m512 acc[3][8];
#pragma GCC unroll 4
    for (int j = 0; j < 3; j++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) acc[j][p] = _mm512_setzero_ps();
    for (size_t c = 0; c < c8; c += 8) {
        __m512 w[3];
#pragma GCC unroll 4
        for (int j = 0; j < 3; j++) w[j] = load_w8x2(W, o0 + 2 * (size_t)j * cols + c, cols, dt);
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x0 + (size_t)p * xs + c))));
#pragma GCC unroll 4
            for (int j = 0; j < 3; j++) acc[j][p] = _mm512_fmadd_ps(w[j], xv, acc[j][p]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
#pragma GCC unroll 4
        for (int j = 0; j < 3; j++) finish2(m, dt, r + 2 * j, t + p, acc[j][p]);
}
static Z512 void kernel_z6x4(const struct nt_mm *m, enum nt_dtype dt, int r, int t) { kernel_z6(m, dt, r, t, 4); }
static Z512 void kernel_z6x8(const struct nt_mm *m, enum nt_dtype dt, int r, int t) { kernel_z6(m, dt, r, t, 8); }

static inline Z512 __attribute__((always_inline)) void rows_z_dt(const struct nt_mm *m, enum nt_dtype dt, int r0, int r1) {
    if (m->n < 4) {
        rows_avx2_dt(m, dt, r0, r1);
        return;
    }
    int chunk = (int)(NT_CHUNK_BYTES / ((size_t)m->W->cols * nt_dtype_size(dt))) / 6 * 6;
    if (chunk < 6) chunk = 6;
    int full_end = r0 + (r1 - r0) / 6 * 6;
    for (int c0 = r0; c0 < full_end; c0 += chunk) {
        int c1 = c0 + chunk < full_end ? c0 + chunk : full_end;
        int t = 0;
        for (; t + 8 <= m->n; t += 8)
            for (int rb = c0; rb < c1; rb += 6) kernel_z6x8(m, dt, rb, t);
        for (; t + 4 <= m->n; t += 4)
            for (int rb = c0; rb < c1; rb += 6) kernel_z6x4(m, dt, rb, t);
        for (; t < m->n; t++)
            for (int rb = c0; rb < c1; rb += NT_MR) kernel_3x1(m, dt, rb, t);
    }
    if (full_end < r1) rows_avx2_dt(m, dt, full_end, r1);
}

static Z512 void rows_z(const struct nt_mm *m, int r0, int r1) {
    switch (m->W->dtype) {
    case NT_DTYPE_BF16: rows_z_dt(m, NT_DTYPE_BF16, r0, r1); break;
    case NT_DTYPE_F16: rows_z_dt(m, NT_DTYPE_F16, r0, r1); break;
    default: rows_z_dt(m, NT_DTYPE_F32, r0, r1); break;
    }
}

static AVX2 void rows_avx2(const struct nt_mm *m, int r0, int r1) {
    switch (m->W->dtype) {
    case NT_DTYPE_BF16: rows_avx2_dt(m, NT_DTYPE_BF16, r0, r1); break;
    case NT_DTYPE_F16: rows_avx2_dt(m, NT_DTYPE_F16, r0, r1); break;
    default: rows_avx2_dt(m, NT_DTYPE_F32, r0, r1); break;
    }
}

/* ---- dispatch ---- */

int nt_cpu_isa_available(int isa) {
    __builtin_cpu_init();
    /* libgcc's checks include the OS's: AVX-512 counts only where XCR0 enables its state */
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    switch (isa) {
    case NT_CPU_SCALAR: return 1;
    case NT_CPU_AVX2: return avx2;
    case NT_CPU_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
    case NT_CPU_AVX512VNNI:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
    case NT_CPU_AVX512BF16:
        return nt_cpu_isa_available(NT_CPU_AVX512VNNI) && __builtin_cpu_supports("avx512bf16");
    case NT_CPU_AMX: return nt_cpu_isa_available(NT_CPU_AVX512BF16) && nt_cpu_amx_ready();
    default: return 0;
    }
}

int nt_cpu_isa_best(void) {
    /* AMX only when asked for (NEMOTRON_CPU=amx): the arithmetic's 4-column lanes let a tile
     * product sum only 4 columns, and moving each 16 x 16 result out through memory costs more
     * than AVX-512 VNNI's whole step (measured; docs/PERF.md, "AMX int8"). AVX-512 BF16 also
     * only when asked for: another, less accurate arithmetic for bf16 weights (cpu.h says why) */
    int best = NT_CPU_SCALAR;
    for (int i = 1; i <= NT_CPU_AVX512VNNI; i++)
        if (nt_cpu_isa_available(i)) best = i;
    return best;
}

static const char *const isa_names[NT_CPU_ISA_COUNT] = {"scalar",     "avx2",       "avxvnni",
                                                         "avx512vnni", "avx512bf16", "amx"};

const char *nt_cpu_isa_name(int isa) { return isa >= 0 && isa < NT_CPU_ISA_COUNT ? isa_names[isa] : "?"; }

int nt_cpu_isa_parse(const char *name) {
    for (int i = 0; i < NT_CPU_ISA_COUNT; i++)
        if (!strcmp(name, isa_names[i])) return i;
    return -1;
}

int nt_cpu_simd_available(void) { return nt_cpu_isa_available(NT_CPU_AVX2); }

int nt_cpu_isa_selected(void) {
    int best = nt_cpu_isa_best();
    const char *force = getenv("NEMOTRON_CPU");
    if (!force || !*force) return best;
    int isa = nt_cpu_isa_parse(force);
    if (isa >= 0 && nt_cpu_isa_available(isa)) return isa;
    /* a forced variant this processor lacks would die of SIGILL: say so and run the best one */
    nt_log(NEMOTRON_LOG_WARN,
           "NEMOTRON_CPU=%s: %s; using %s (the choices: scalar, avx2, avxvnni, avx512vnni, avx512bf16, amx)", force,
           isa < 0 ? "no such kernel variant" : "this processor lacks its instructions", nt_cpu_isa_name(best));
    return best;
}

/* Positions [t0, t1) of m->qx for a product that reads it (nt_cpu_product_uses_qx). */
static void prepare_x(const struct nt_mm *m, int isa, int t0, int t1) {
    if (nt_cpu_int8_product(m->W->dtype))
        nt_cpu_quantize_x_q(m, isa, t0, t1);
    else
        nt_cpu_bf16_round_x(m, t0, t1);
}

void nt_cpu_quantize_x(const struct nt_mm *m, int isa) {
    if (!nt_cpu_product_uses_qx(m->W->dtype, isa)) return; /* the FMA arithmetic reads m->x as it is */
    NT_ASSERT(m->qx);
    prepare_x(m, isa, 0, m->n);
}

/* Row ranges per thread of a bf16 product at the AVX-512 BF16 level: whole tiles of 4 rows and
 * the decode kernel's 8 (any split gives the same bits; this one keeps the kernels whole). */
#define BF16_ROW_GRAIN 8

/* The team for a product whose rows split into `units` ranges: threads pay off only when there is
 * work for them (below this many weights x positions the fork costs more than it saves), and
 * never more threads than ranges. */
static int team_for(const struct nt_mm *m, int n_threads, int units) {
    uint64_t work = (uint64_t)m->W->rows * (uint64_t)m->W->cols * (uint64_t)m->n;
    int threads = work < 65536 ? 1 : n_threads;
    if (threads > units) threads = units;
    return threads < 1 ? 1 : threads;
}

/* A product that reads qx on the team: each thread prepares its share of the positions, then,
 * after a barrier, computes its range of rows (whole multiples of `grain`). */
static void matmul_prepared(const struct nt_mm *m, int isa, int n_threads, int grain) {
    NT_ASSERT(m->qx);
    int rows = (int)m->W->rows;
    int units = (rows + grain - 1) / grain;
    int threads = team_for(m, n_threads, units);
    if (threads == 1) {
        prepare_x(m, isa, 0, m->n);
        nt_cpu_matmul_rows(m, isa, 0, rows);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        prepare_x(m, isa, (int)((int64_t)m->n * id / nt), (int)((int64_t)m->n * (id + 1) / nt));
#pragma omp barrier
        int u0 = (int)((int64_t)units * id / nt), u1 = (int)((int64_t)units * (id + 1) / nt);
        int r0 = u0 * grain, r1 = u1 * grain < rows ? u1 * grain : rows;
        if (r0 < r1) nt_cpu_matmul_rows(m, isa, r0, r1);
    }
}

void nt_cpu_matmul(const struct nt_mm *m, int isa, int n_threads) {
    if (nt_cpu_product_uses_qx(m->W->dtype, isa)) {
        int grain = nt_cpu_int8_product(m->W->dtype) ? nt_cpu_q_row_grain(isa) : BF16_ROW_GRAIN;
        matmul_prepared(m, isa, n_threads, grain);
        return;
    }
    NT_ASSERT(m->W->dtype == NT_DTYPE_F32 || m->W->dtype == NT_DTYPE_F16 || m->W->dtype == NT_DTYPE_BF16);
    int rows = (int)m->W->rows;
    int blocks = (rows + NT_MR - 1) / NT_MR;
    /* Each thread takes one contiguous range of whole row blocks, so no thread count changes the
     * blocking of a row. */
#pragma omp parallel num_threads(team_for(m, n_threads, blocks))
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int b0 = (int)((int64_t)blocks * id / nt), b1 = (int)((int64_t)blocks * (id + 1) / nt);
        int r0 = b0 * NT_MR, r1 = b1 * NT_MR < rows ? b1 * NT_MR : rows;
        if (r0 < r1) nt_cpu_matmul_rows(m, isa, r0, r1);
    }
}

void nt_cpu_matmul_rows(const struct nt_mm *m, int isa, int r0, int r1) {
    if (nt_cpu_int8_product(m->W->dtype))
        nt_cpu_matmul_q_rows(m, isa, r0, r1);
    else if (nt_cpu_bf16_product(m->W->dtype, isa))
        nt_cpu_matmul_bf16_rows(m, r0, r1);
    else if (isa >= NT_CPU_AVX512VNNI) /* AMX: the float products are AVX-512's */
        rows_z(m, r0, r1);
    else if (isa)
        rows_avx2(m, r0, r1);
    else
        rows_scalar(m, r0, r1);
}
