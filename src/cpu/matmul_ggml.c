/* matmul_ggml.c - the CPU products with llama.cpp's block types (src/quant/ggml_blocks.h) read in
 * place: y[t] = act(W x[t] + b), without repacking the weights.
 *
 * THE ARITHMETIC (the definition; the scalar, AVX2 and AVX-512 VNNI variants here compute exactly
 * this, bit for bit, and a CUDA port must too; docs/FORMATS-GGUF.md has it with the layouts):
 *
 * 1. Activations, per position, in blocks of 32 columns (every ggml row is whole 32-blocks):
 *    step 1 of matmul_q.c unchanged (x' = x; amax, d = amax / 127, q = clamp(rint(x * inv))),
 *    plus sx = the integer sum of the block's 32 q.
 * 2. Weights: block b of row r unpacked by nt_ggml_sub_block into integer codes q_w[32], integer
 *    sub-scales k0 (columns 0-15) and k1 (16-31), the f32 scale dw, and for the types with a
 *    minimum (Q4_1, Q5_1, Q4_K, Q5_K) an integer mk and an f32 mw (ggml_blocks.h lists them per
 *    type: e.g. Q4_0 q_w = n - 8, k = 1; Q4_K q_w = n, k = S_j, dw = d, mk = M_j, mw = -dmin;
 *    Q6_K q_w = n - 32, k = the two int8 scales of the 16-column halves).
 * 3. Per (row r, position t), blocks b = 0, 1, ... in increasing order, acc = +0:
 *      isum = k0 * sum_{c<16} q_w[c] q[c] + k1 * sum_{c>=16} q_w[c] q[c]      (int32, exact)
 *      acc  = fmaf((float)isum, dw * d_b, acc)                  (dw * d_b: one f32 multiply)
 *      and with a minimum: acc = fmaf((float)(mk * sx_b), mw * d_b, acc).
 *    y = acc, then + bias[r] and NT_ACT_RELU2 as matmul_q.c's step 4.
 *    Exactness: |isum| <= 32 * 128 * 127 (Q8_0), 2 * 16 * 32 * 128 * 127 (Q6_K: |q_w| <= 32,
 *    |k| <= 128) = 16,646,144, 32 * 31 * 63 * 127 (Q5_K), all below 2^24, so the int32 sums and
 *    their conversion to f32 are exact; |mk * sx| <= 63 * 32 * 127. Every float operation is
 *    specified, so any variant, blocking or thread split gives the same bits.
 *
 * QX record of block b (matmul_q.c writes it, scalar or AVX2, the same bytes): 32 int8 q in column
 * order, then sx as an int32; d_b where matmul_q.c puts it (after the nb records).
 *
 * KERNELS: per row, positions in groups of up to GP: each block is unpacked once per group and
 * serves its positions. The variants differ only in the integer sum of step 3 (exact, so any
 * order): scalar; AVX2 (vpmaddubsw of |q_w| with q signed by q_w, then vpmaddwd with k0 / k1);
 * AVX-512 VNNI (vpdpbusd of the same, then a multiply by k0 / k1 per 32-bit lane). AVX-VNNI runs
 * the AVX2 sum. The unpacking is scalar C shared with the decoders: a first version that is
 * correct by construction; a SIMD unpack per type is where speed would come from.
 */
#include "cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../quant/quant.h"

#define GP 8     /* positions per unpacked block */

static inline float apply_act(float v, const float *bias, int r, enum nt_act act) {
    if (bias) v += bias[r];
    if (act == NT_ACT_RELU2) {
        v = v > 0.0f ? v : 0.0f;
        v = v * v;
    }
    return v;
}

static int32_t isum_scalar(const struct nt_ggml_sub *s, const int8_t *q) {
    int32_t h[2] = {0, 0};
    for (int c = 0; c < 32; c++) h[c >> 4] += (int32_t)s->q[c] * q[c];
    return s->k[0] * h[0] + s->k[1] * h[1];
}

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define Z512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

static inline AVX2 int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* |q_w| (unsigned; -128 becomes 128) times q with q_w's sign: pairs of products, at most
 * 2 * 128 * 127 < 2^15, so vpmaddubsw never saturates. */
static inline AVX2 int32_t isum_avx2(const struct nt_ggml_sub *s, const int8_t *q) {
    __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)s->q);
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)q);
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    __m256i k = _mm256_setr_m128i(_mm_set1_epi16((short)s->k[0]), _mm_set1_epi16((short)s->k[1]));
    return hsum_epi32(_mm256_madd_epi16(p, k));
}

static inline Z512 int32_t isum_avx512vnni(const struct nt_ggml_sub *s, const int8_t *q) {
    __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)s->q);
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)q);
    __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    __m256i k = _mm256_setr_m128i(_mm_set1_epi32(s->k[0]), _mm_set1_epi32(s->k[1]));
    return hsum_epi32(_mm256_mullo_epi32(p, k));
}

/* The rows of the product for one variant: ISUM is its integer sum. */
#define ROWS_GGML(NAME, TARGET, ISUM)                                                                   \
    static TARGET void NAME(const struct nt_mm *m, int r0, int r1) {                                   \
        const struct nt_matrix *W = m->W;                                                               \
        int64_t cols = W->cols, nb = cols / 32;                                                         \
        size_t row_bytes = (size_t)(nt_matrix_bytes(W->dtype, 1, cols));                                \
        size_t pb = nt_cpu_qx_bytes(1, cols);                                                           \
        for (int r = r0; r < r1; r++) {                                                                 \
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * row_bytes;                      \
            for (int t0 = 0; t0 < m->n; t0 += GP) {                                                     \
                int P = m->n - t0 < GP ? m->n - t0 : GP;                                                \
                const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t0 * pb;                           \
                float acc[GP];                                                                          \
                for (int p = 0; p < P; p++) acc[p] = 0.0f;                                              \
                for (int64_t b = 0; b < nb; b++) {                                                      \
                    struct nt_ggml_sub s;                                                               \
                    nt_ggml_sub_block(W->dtype, row, b, &s);                                            \
                    for (int p = 0; p < P; p++) {                                                       \
                        const uint8_t *rec = qx + (size_t)p * pb + 64 * (size_t)b;                      \
                        float d;                                                                        \
                        memcpy(&d, qx + (size_t)p * pb + 64 * (size_t)nb + 4 * (size_t)b, 4);           \
                        int32_t isum = ISUM(&s, (const int8_t *)(const void *)rec);                     \
                        acc[p] = fmaf((float)isum, s.d * d, acc[p]);                                    \
                        if (s.has_min) {                                                                \
                            int32_t sx;                                                                 \
                            memcpy(&sx, rec + 32, 4);                                                   \
                            acc[p] = fmaf((float)(s.mk * sx), s.m * d, acc[p]);                         \
                        }                                                                               \
                    }                                                                                   \
                }                                                                                       \
                for (int p = 0; p < P; p++)                                                             \
                    m->y[(size_t)(t0 + p) * m->y_stride + r] = apply_act(acc[p], m->bias, r, m->act);   \
            }                                                                                           \
        }                                                                                               \
    }

ROWS_GGML(rows_scalar, , isum_scalar)
ROWS_GGML(rows_avx2, AVX2, isum_avx2)
ROWS_GGML(rows_avx512vnni, Z512, isum_avx512vnni)

void nt_cpu_matmul_ggml_rows(const struct nt_mm *m, int isa, int r0, int r1) {
    NT_ASSERT(nt_dtype_is_ggml_block(m->W->dtype) && m->qx && m->W->cols % 32 == 0);
    switch (isa) {
    case NT_CPU_AVX512VNNI: rows_avx512vnni(m, r0, r1); break;
    case NT_CPU_AVXVNNI:
    case NT_CPU_AVX2: rows_avx2(m, r0, r1); break;
    default: rows_scalar(m, r0, r1);
    }
}
