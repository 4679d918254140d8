/* matmul_ggml.c - the CPU products with llama.cpp's block types (src/quant/ggml_blocks.h) read in
 * place: y[t] = act(W x[t] + b), without repacking the weights.
 *
 * THE ARITHMETIC (the definition; the scalar, AVX2 and AVX-512 VNNI variants here compute exactly
 * this, bit for bit, and a CUDA port must too; docs/FORMATS-GGUF.md has it with the layouts):
 *
 * 1. Activations, per position, in blocks of 32 columns (every ggml row is whole 32-blocks):
 *    step 1 of matmul_q.c unchanged (x' = x; amax, d = amax / 127, q = clamp(rint(x * inv))),
 *    plus the lane sums sx[l] = q[4l] + q[4l+1] + q[4l+2] + q[4l+3], l = 0..7.
 * 2. Weights: block b of row r is unpacked (nt_ggml_sub_block) into integer codes qw[32],
 *    integer sub-scales k[0] (columns 0-15) and k[1] (16-31), the f32 scale dw, and for the
 *    types with a minimum (Q4_1, Q5_1, Q4_K, Q5_K) an integer mk and an f32 mw; ggml_blocks.h
 *    lists them per type (e.g. Q4_0: qw = n - 8, k = 1; Q4_K: qw = n, k = S_j, dw = d,
 *    mk = M_j, mw = -dmin; Q6_K: qw = n - 32, k = the int8 scales of the two 16-column halves).
 * 3. Per (row r, position t), eight lanes l = 0..7, lane l the columns 4l .. 4l+3 of every
 *    block; blocks b = 0, 1, ... in increasing order, acc[l] = +0:
 *      isum[l] = k[l / 4] * sum_{c = 4l}^{4l+3} qw[c] * q[c]                 (int32, exact)
 *      acc[l]  = fmaf((float)isum[l], dw * d_b, acc[l])           (dw * d_b: one f32 multiply)
 *      and with a minimum, then: acc[l] = fmaf((float)(mk * sx[l]), mw * d_b, acc[l]);
 *    y = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)) (matmul_q.c's tree),
 *    then + bias[r] and NT_ACT_RELU2 as matmul_q.c's step 4.
 *    Exactness: |isum[l]| <= 4 * 128 * 127 * 128 < 2^24 (|qw| <= 128 with k = 1 for Q8_0,
 *    |qw| <= 32 with |k| <= 128 for Q6_K, qw <= 31 with k <= 63 for Q5_K), |mk * sx| <= 63 * 508,
 *    so the int32 sums and their conversion to f32 are exact, and every float operation is
 *    specified: any variant, blocking, pass size or thread split gives the same bits.
 *
 * QX record of block b (matmul_q.c writes it, scalar or AVX2, the same bytes): 32 int8 q in
 * column order, then the 8 sx[l] as f32 (exact integers); d_b where matmul_q.c puts it (after
 * the nb records). (float)(mk * sx[l]) is computed as the f32 product (float)mk * sx[l]: exact,
 * as both factors and the product are integers below 2^24, so it is the same value.
 *
 * KERNELS: per row, positions in groups of up to GP; each block is unpacked once per group and
 * serves its positions. Scalar: nt_ggml_sub_block (the decoders' own unpacking) and plain loops.
 * AVX2: a per-type unpack into 32 code bytes in registers (nibbles split with shifts and masks,
 * 5th bits spread from their bit planes, IQ4_NL / MXFP4 codebooks with vpshufb), then per
 * position vpmaddubsw of |qw| with q signed by qw (pairs at most 2 * 128 * 127 < 2^15: no
 * saturation) and vpmaddwd with k, which leaves isum[l] in 32-bit lane l. AVX-512 VNNI: the same
 * unpack, the lane sums by one vpdpbusd where k = 1 (the K-quants keep AVX2's sum, which applies
 * k for free). AVX-VNNI runs AVX2.
 */
#include "cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../quant/quant.h"

#define GP 8     /* positions per unpacked block */
#define TILE_R 4 /* rows at a time for passes of fewer than GP positions (SIMD kernels) */



/* Where a product reads: the row's bytes, qx of position t0 and its stride. */
static size_t row_bytes(const struct nt_matrix *W) { return (size_t)nt_matrix_bytes(W->dtype, 1, W->cols); }
static const float *qx_d(const uint8_t *qx_pos, int64_t nb) { return (const float *)(const void *)(qx_pos + 64 * nb); }

/* ---- scalar reference ------------------------------------------------------------------------- */

static void rows_scalar(const struct nt_mm *m, int r0, int r1) {
    const struct nt_matrix *W = m->W;
    int64_t nb = W->cols / 32;
    size_t rb = row_bytes(W), pb = nt_cpu_qx_bytes(1, W->cols);
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * rb;
        for (int t0 = 0; t0 < m->n; t0 += GP) {
            int P = m->n - t0 < GP ? m->n - t0 : GP;
            const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t0 * pb;
            float acc[GP][8] = {{0}};
            for (int64_t b = 0; b < nb; b++) {
                struct nt_ggml_sub s;
                nt_ggml_sub_block(W->dtype, row, b, &s);
                for (int p = 0; p < P; p++) {
                    const uint8_t *pos = qx + (size_t)p * pb;
                    const int8_t *q = (const int8_t *)(const void *)(pos + 64 * b);
                    float sx[8];
                    memcpy(sx, pos + 64 * b + 32, 32);
                    float d = qx_d(pos, nb)[b], sw = s.d * d, sm = s.m * d;
                    for (int l = 0; l < 8; l++) {
                        int32_t isum = 0;
                        for (int c = 4 * l; c < 4 * l + 4; c++) isum += (int32_t)s.q[c] * q[c];
                        acc[p][l] = fmaf((float)(s.k[l / 4] * isum), sw, acc[p][l]);
                        if (s.has_min) acc[p][l] = fmaf((float)s.mk * sx[l], sm, acc[p][l]);
                    }
                }
            }
            for (int p = 0; p < P; p++)
                m->y[(size_t)(t0 + p) * m->y_stride + r] = nt_cpu_apply_act(nt_cpu_tree8(acc[p]), m->bias, r, m->act);
        }
    }
}

/* ---- SIMD: the per-type unpack --------------------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define Z512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define INL __attribute__((always_inline)) inline

/* A block in registers: the codes, k as int16 pairs for vpmaddwd (k[0] for lanes 0-3, k[1] for
 * 4-7), the scales. */
struct vsub {
    __m256i q, k16;
    float d, m;
    int32_t mk;
    int has_min;
};

/* The K-quants: k (and mk) vary per sub-block; elsewhere k = 1 (and mk = 1 where there is a
 * minimum). A constant dt lets the kernels drop the multiplies. */
static INL int sub_scaled(enum nt_dtype dt) {
    return dt == NT_DTYPE_GGML_Q4_K || dt == NT_DTYPE_GGML_Q5_K || dt == NT_DTYPE_GGML_Q6_K;
}

static INL AVX2 float f16x(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles -> 32 bytes [low nibbles | high nibbles] (columns j and j + 16). */
static INL AVX2 __m256i split_nibbles(const uint8_t *qs) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15));
    return _mm256_setr_m128i(lo, hi);
}

/* The 32 bits of qh spread to bytes: byte c = 0x10 when bit c is set, else 0. */
static INL AVX2 __m256i high_bits32(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                     2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* Bits (j .. j + w - 1) of each of 32 bytes, moved to bit `to` (j + w <= 8). */
static INL AVX2 __m256i byte_bits(__m256i v, int j, int w, int to) {
    __m256i f = _mm256_and_si256(_mm256_srli_epi16(v, j), _mm256_set1_epi8((char)((1 << w) - 1)));
    return to ? _mm256_slli_epi16(f, to) : f; /* f's bytes hold < 2^w, so the shift stays inside each */
}

static INL AVX2 __m256i table16(__m256i idx, const int8_t *tab) {
    __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)tab));
    return _mm256_shuffle_epi8(t, idx);
}

static INL AVX2 void set_k(struct vsub *v, int k0, int k1) {
    v->k16 = _mm256_setr_m128i(_mm_set1_epi16((short)k0), _mm_set1_epi16((short)k1));
}

/* A K-quant super-block's scales, decoded once for its 8 sub-blocks. */
struct kscales {
    int64_t sb; /* the super-block they belong to; -1: none yet */
    int S[8], M[8];
    float d, dmin;
};

/* Block b of a row, the values nt_ggml_sub_block gives (tests/unit/test_ggml_blocks.c checks the
 * products of both bit for bit). */
static INL AVX2 void unpack(enum nt_dtype dt, const uint8_t *row, int64_t b, struct vsub *v, struct kscales *ks) {
    v->m = 0.0f;
    v->mk = 0;
    v->has_min = 0;
    if (dt == NT_DTYPE_GGML_Q4_K || dt == NT_DTYPE_GGML_Q5_K) {
        const uint8_t *blk = row + (size_t)(b / 8) * (dt == NT_DTYPE_GGML_Q4_K ? 144 : 176);
        int j = (int)(b % 8);
        if (ks->sb != b / 8) {
            ks->sb = b / 8;
            for (int i = 0; i < 8; i++) nt_ggml_k_scale_min(blk + 4, i, &ks->S[i], &ks->M[i]);
            ks->d = f16x(blk);
            ks->dmin = -f16x(blk + 2);
        }
        int S = ks->S[j], M = ks->M[j];
        int q5 = dt == NT_DTYPE_GGML_Q5_K;
        __m256i qs = _mm256_loadu_si256((const __m256i *)(const void *)(blk + (q5 ? 48 : 16) + 32 * (j / 2)));
        v->q = byte_bits(qs, 4 * (j % 2), 4, 0);
        if (q5) v->q = _mm256_or_si256(v->q, byte_bits(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 16)), j, 1, 4));
        v->d = ks->d;
        v->m = ks->dmin;
        v->mk = M;
        v->has_min = 1;
        set_k(v, S, S);
        return;
    }
    if (dt == NT_DTYPE_GGML_Q6_K) {
        const uint8_t *blk = row + (size_t)(b / 8) * 210;
        int j = (int)(b % 8), h = j / 4, k = j % 4;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 64 * h + 32 * (k & 1)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h));
        __m256i n = _mm256_or_si256(byte_bits(ql, 4 * (k / 2), 4, 0), byte_bits(qh, 2 * k, 2, 4));
        v->q = _mm256_sub_epi8(n, _mm256_set1_epi8(32));
        v->d = f16x(blk + 208);
        set_k(v, (int8_t)blk[192 + 2 * j], (int8_t)blk[192 + 2 * j + 1]);
        return;
    }
    set_k(v, 1, 1);
    switch (dt) {
    case NT_DTYPE_GGML_Q8_0: {
        const uint8_t *blk = row + (size_t)b * 34;
        v->d = f16x(blk);
        v->q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
        break;
    }
    case NT_DTYPE_GGML_Q4_0: {
        const uint8_t *blk = row + (size_t)b * 18;
        v->d = f16x(blk);
        v->q = _mm256_sub_epi8(split_nibbles(blk + 2), _mm256_set1_epi8(8));
        break;
    }
    case NT_DTYPE_GGML_Q4_1: {
        const uint8_t *blk = row + (size_t)b * 20;
        v->d = f16x(blk);
        v->m = f16x(blk + 2);
        v->mk = 1;
        v->has_min = 1;
        v->q = split_nibbles(blk + 4);
        break;
    }
    case NT_DTYPE_GGML_Q5_0: {
        const uint8_t *blk = row + (size_t)b * 22;
        v->d = f16x(blk);
        v->q = _mm256_sub_epi8(_mm256_or_si256(split_nibbles(blk + 6), high_bits32(blk + 2)), _mm256_set1_epi8(16));
        break;
    }
    case NT_DTYPE_GGML_Q5_1: {
        const uint8_t *blk = row + (size_t)b * 24;
        v->d = f16x(blk);
        v->m = f16x(blk + 2);
        v->mk = 1;
        v->has_min = 1;
        v->q = _mm256_or_si256(split_nibbles(blk + 8), high_bits32(blk + 4));
        break;
    }
    case NT_DTYPE_GGML_IQ4_NL: {
        const uint8_t *blk = row + (size_t)b * 18;
        v->d = f16x(blk);
        v->q = table16(split_nibbles(blk + 2), nt_ggml_iq4nl_values);
        break;
    }
    default: { /* MXFP4 */
        const uint8_t *blk = row + (size_t)b * 17;
        v->d = nt_ggml_e8m0_half(blk[0]);
        v->q = table16(split_nibbles(blk + 1), nt_ggml_mxfp4_values);
        break;
    }
    }
}

/* ---- SIMD: the lane sums and the kernel -------------------------------------------------------- */

static INL AVX2 __m256i isum_avx2(enum nt_dtype dt, const struct vsub *v, __m256i x) {
    (void)dt;
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v->q, v->q), _mm256_sign_epi8(x, v->q));
    return _mm256_madd_epi16(p, v->k16);
}

/* With sub-scales the AVX2 sum is as short (vpmaddwd applies k; vpmulld costs two uops). */
static INL Z512 __m256i isum_avx512vnni(enum nt_dtype dt, const struct vsub *v, __m256i x) {
    if (sub_scaled(dt)) return isum_avx2(dt, v, x);
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(v->q), _mm256_sign_epi8(x, v->q));
}

static INL AVX2 float hsum8(__m256 v) {
    _Alignas(32) float a[8];
    _mm256_store_ps(a, v);
    return nt_cpu_tree8(a);
}

/* The rows of the product for one variant; ISUM gives isum[l] in the lanes. The unpack is
 * chosen per type outside the loops (a constant dtype lets the compiler drop the other types).
 * Tiles change which weights are unpacked together, never a (row, position) chain. */
#define ROWS_SIMD(NAME, TARGET, ISUM)                                                                   \
    /* R rows from r x P positions from t0 (R * P <= 8 accumulators): each block of each row is   \
     * unpacked once for the P positions; R > 1 gives the FMA chains of a few positions company  \
     * (one chain alone waits on its own FMA latency every block) */                              \
    static INL TARGET void NAME##_tile(const struct nt_mm *m, enum nt_dtype dt, int r, int R, int t0, int P) { \
        const struct nt_matrix *W = m->W;                                                               \
        int64_t nb = W->cols / 32;                                                                      \
        size_t rb = row_bytes(W), pb = nt_cpu_qx_bytes(1, W->cols);                                     \
        const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t0 * pb;                                   \
        __m256 acc[TILE_R][GP];                                                                         \
        struct kscales ks[TILE_R];                                                                      \
        for (int i = 0; i < R; i++) {                                                                   \
            ks[i] = (struct kscales){.sb = -1};                                                         \
            for (int p = 0; p < P; p++) acc[i][p] = _mm256_setzero_ps();                                \
        }                                                                                               \
        for (int64_t b = 0; b < nb; b++) {                                                              \
            for (int i = 0; i < R; i++) {                                                               \
                struct vsub v;                                                                          \
                unpack(dt, (const uint8_t *)W->data + (size_t)(r + i) * rb, b, &v, &ks[i]);             \
                for (int p = 0; p < P; p++) {                                                           \
                    const uint8_t *pos = qx + (size_t)p * pb;                                           \
                    float d = qx_d(pos, nb)[b];                                                         \
                    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(pos + 64 * b));      \
                    acc[i][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ISUM(dt, &v, x)), _mm256_set1_ps(v.d * d), acc[i][p]); \
                    if (v.has_min) {                                                                    \
                        __m256 sx = _mm256_loadu_ps((const float *)(const void *)(pos + 64 * b + 32));  \
                        __m256 ms = sub_scaled(dt) ? _mm256_mul_ps(sx, _mm256_set1_ps((float)v.mk)) : sx; \
                        acc[i][p] = _mm256_fmadd_ps(ms, _mm256_set1_ps(v.m * d), acc[i][p]);            \
                    }                                                                                   \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        for (int i = 0; i < R; i++)                                                                     \
            for (int p = 0; p < P; p++)                                                                 \
                m->y[(size_t)(t0 + p) * m->y_stride + r + i] =                                          \
                    nt_cpu_apply_act(hsum8(acc[i][p]), m->bias, r + i, m->act);                         \
    }                                                                                                   \
    static INL TARGET void NAME##_type(const struct nt_mm *m, enum nt_dtype dt, int r0, int r1) {      \
        int r = r0;                                                                                     \
        if (m->n < GP) /* few positions: TILE_R rows at a time, positions in pairs */                  \
            for (; r + TILE_R <= r1; r += TILE_R)                                                       \
                for (int t0 = 0; t0 < m->n; t0 += 2) {                                                  \
                    if (m->n - t0 >= 2)                                                                 \
                        NAME##_tile(m, dt, r, TILE_R, t0, 2);                                           \
                    else                                                                                \
                        NAME##_tile(m, dt, r, TILE_R, t0, 1);                                           \
                }                                                                                       \
        for (; r < r1; r++)                                                                             \
            for (int t0 = 0; t0 < m->n; t0 += GP) {                                                     \
                if (m->n - t0 >= GP)                                                                    \
                    NAME##_tile(m, dt, r, 1, t0, GP);                                                   \
                else                                                                                    \
                    NAME##_tile(m, dt, r, 1, t0, m->n - t0);                                            \
            }                                                                                           \
    }                                                                                                   \
    static TARGET void NAME(const struct nt_mm *m, int r0, int r1) {                                   \
        switch (m->W->dtype) {                                                                          \
        case NT_DTYPE_GGML_Q8_0: NAME##_type(m, NT_DTYPE_GGML_Q8_0, r0, r1); break;                     \
        case NT_DTYPE_GGML_Q4_0: NAME##_type(m, NT_DTYPE_GGML_Q4_0, r0, r1); break;                     \
        case NT_DTYPE_GGML_Q4_1: NAME##_type(m, NT_DTYPE_GGML_Q4_1, r0, r1); break;                     \
        case NT_DTYPE_GGML_Q5_0: NAME##_type(m, NT_DTYPE_GGML_Q5_0, r0, r1); break;                     \
        case NT_DTYPE_GGML_Q5_1: NAME##_type(m, NT_DTYPE_GGML_Q5_1, r0, r1); break;                     \
        case NT_DTYPE_GGML_IQ4_NL: NAME##_type(m, NT_DTYPE_GGML_IQ4_NL, r0, r1); break;                 \
        case NT_DTYPE_GGML_MXFP4: NAME##_type(m, NT_DTYPE_GGML_MXFP4, r0, r1); break;                   \
        case NT_DTYPE_GGML_Q4_K: NAME##_type(m, NT_DTYPE_GGML_Q4_K, r0, r1); break;                     \
        case NT_DTYPE_GGML_Q5_K: NAME##_type(m, NT_DTYPE_GGML_Q5_K, r0, r1); break;                     \
        default: NAME##_type(m, NT_DTYPE_GGML_Q6_K, r0, r1); break;                                     \
        }                                                                                               \
    }

ROWS_SIMD(rows_avx2, AVX2, isum_avx2)
ROWS_SIMD(rows_avx512vnni, Z512, isum_avx512vnni)

void nt_cpu_matmul_ggml_rows(const struct nt_mm *m, int isa, int r0, int r1) {
    NT_ASSERT(nt_dtype_is_ggml_block(m->W->dtype) && m->qx && m->W->cols % 32 == 0);
    switch (isa) {
    case NT_CPU_AMX: /* no AMX kernel for these types (matmul_q.c's amx_layout) */
    case NT_CPU_AVX512BF16:
    case NT_CPU_AVX512VNNI: rows_avx512vnni(m, r0, r1); break;
    case NT_CPU_AVXVNNI:
    case NT_CPU_AVX2: rows_avx2(m, r0, r1); break;
    default: rows_scalar(m, r0, r1);
    }
}
