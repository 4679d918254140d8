/* ops_simd.c - the AVX2 and AVX-512 variants of the CPU backend's non-product operations.
 *
 * Attention's online softmax, the Mamba conv, the selective scan and the gated norm, vectorized
 * only across elements that are independent in the scalar reference (backend_cpu.c): head dims
 * of attention's weighted sum, channels of the conv, a head's dims in the scan, a group's
 * elements in the gated norm. Every element keeps the reference's chain of operations in its
 * order: a multiply and an add stay two roundings (no FMA; -ffp-contract=off keeps the compiler
 * from fusing the intrinsics), sums run in the reference's index order, and expf is libm's, one
 * call per element as in the reference, only batched so that the calls do not wait on each
 * other. So each variant gives the scalar reference's bits, on every pass size
 * (tests/unit/test_cpu_ops.c).
 *
 * Attention's weighted sum, the conv and the scan are one text for both widths,
 * ops_simd_body.h, included here once per width; the gated norm is 256-bit only.
 *
 * The caller picks the variant by cpu.h's isa (NT_CPU_AVX2 and up: 256-bit; NT_CPU_AVX512VNNI and
 * up: 512-bit), which the backend read from the processor (nt_cpu_isa_selected); nothing here
 * checks it again.
 */
#include "cpu.h"

#include <immintrin.h>
#include <math.h>

#define AVX2 __attribute__((target("avx2,fma")))
/* the instructions nt_cpu_isa_available guarantees at NT_CPU_AVX512VNNI and up, no others */
#define Z512 __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw")))
#define INLINE inline __attribute__((always_inline))

/* Attention's scores are computed this many keys at a time before the softmax's bookkeeping
 * runs over them: enough independent dot products and expf calls in flight to hide their
 * latencies, few enough that the block's scores stay in registers and L1. */
#define ATT_BLOCK 16

/* ---- attention's scores and softmax, 256-bit at both widths ---- */

/* The reference's fixed lane tree ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) (backend_cpu.c's
 * dot_f32), as the usual horizontal sum computes it. */
static AVX2 INLINE float tree8(__m256 a) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* a_l + a_l+4 */
    __m128 y = _mm_add_ps(x, _mm_movehl_ps(x, x));                                  /* x0+x2, x1+x3 */
    return _mm_cvtss_f32(_mm_add_ss(y, _mm_movehdup_ps(y)));
}

/* Four of the reference's dot products of q with k0..k3 (dot_f32: lane l sums i = l, l+8, ...
 * in order, then the tree, then the columns past the last multiple of 8 one by one). */
static AVX2 INLINE void dot4(const float *q, const float *k0, const float *k1, const float *k2,
                             const float *k3, int dh, float *s) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d8 = dh & ~7;
    for (int i = 0; i < d8; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_loadu_ps(k0 + i)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_loadu_ps(k1 + i)));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_loadu_ps(k2 + i)));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_loadu_ps(k3 + i)));
    }
    float r0 = tree8(a0), r1 = tree8(a1), r2 = tree8(a2), r3 = tree8(a3);
    for (int i = d8; i < dh; i++) {
        r0 += q[i] * k0[i];
        r1 += q[i] * k1[i];
        r2 += q[i] * k2[i];
        r3 += q[i] * k3[i];
    }
    s[0] = r0, s[1] = r1, s[2] = r2, s[3] = r3;
}

/* The online softmax's bookkeeping over one block of scores, in key order as the reference runs
 * it: the running max m and sum l, and for each key its weight e[b] and, where its score raised
 * the max, the factor corr[b] the weighted sum is rescaled by first (flag[b] = 1). */
static INLINE void softmax_block(const float *s, int nb, float *m, float *l, float *e, float *corr,
                                 unsigned char *flag) {
    float mm = *m, ll = *l;
    for (int b = 0; b < nb; b++) {
        flag[b] = s[b] > mm;
        corr[b] = 1.0f; /* unused where the flag is 0 */
        if (flag[b]) {
            corr[b] = expf(mm - s[b]);
            ll *= corr[b];
            mm = s[b];
        }
        e[b] = expf(s[b] - mm);
        ll += e[b];
    }
    *m = mm, *l = ll;
}

/* The scores of keys u0 .. u0+nb-1: dot(q, k_u) * scale. */
static AVX2 INLINE void scores_block(const float *q, const float *k, size_t stride, int u0, int nb,
                                     int dh, float scale, float *s) {
    int b = 0;
    for (; b + 4 <= nb; b += 4) {
        const float *ku = k + (size_t)(u0 + b) * stride;
        dot4(q, ku, ku + stride, ku + 2 * stride, ku + 3 * stride, dh, s + b);
    }
    for (; b < nb; b++) { /* the last keys: the same chain, the other lanes discarded */
        float t4[4];
        const float *ku = k + (size_t)(u0 + b) * stride;
        dot4(q, ku, ku, ku, ku, dh, t4);
        s[b] = t4[0];
    }
    for (b = 0; b < nb; b++) s[b] = s[b] * scale;
}

/* ---- attention's weighted sum, the conv and the scan: one text, two widths (ops_simd_body.h) ---- */

#define KCAT2(a, b) a##b
#define KCAT(a, b) KCAT2(a, b)

/* 256-bit: attn_row8, silu8, conv8, scan8 */
#define VT AVX2
#define VN(n) KCAT(n, 8)
#define VF __m256
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VSET1(x) _mm256_set1_ps(x)
#define VLOAD(p) _mm256_load_ps(p)
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTORE(p, a) _mm256_store_ps(p, a)
#define VSTOREU(p, a) _mm256_storeu_ps(p, a)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#include "ops_simd_body.h"

/* 512-bit: attn_row16, silu16, conv16, scan16 (attention's scores stay scores_block's 8-lane
 * chains, which the reference's dot_f32 fixes; here with 32 registers) */
#define VT Z512
#define VN(n) KCAT(n, 16)
#define VF __m512
#define VW 16
#define VZERO() _mm512_setzero_ps()
#define VSET1(x) _mm512_set1_ps(x)
#define VLOAD(p) _mm512_load_ps(p)
#define VLOADU(p) _mm512_loadu_ps(p)
#define VSTORE(p, a) _mm512_store_ps(p, a)
#define VSTOREU(p, a) _mm512_storeu_ps(p, a)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#include "ops_simd_body.h"

/* ---- the gated norm ---- */

/* One group of the gated norm at one position: o = y * silu(z), then o = w * (o * inv) with
 * inv = 1 / sqrtf(sum o^2 / gs + eps), the sum in index order (a scalar chain, as the
 * reference's). gs a multiple of 8. */
static AVX2 void gated_group8(const float *y, const float *z, const float *w, int gs, float eps, float *o) {
    for (int i = 0; i < gs; i += 8)
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), silu8(_mm256_loadu_ps(z + i))));
    float ss = 0.0f;
    for (int i = 0; i < gs; i++) ss += o[i] * o[i];
    __m256 inv = _mm256_set1_ps(1.0f / sqrtf(ss / (float)gs + eps));
    for (int i = 0; i < gs; i += 8)
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(o + i), inv)));
}

/* ---- entry points (cpu.h) ---- */

void nt_cpu_attn_row(int isa, const float *q, const float *k, const float *v, size_t stride, int ctx,
                     int dh, float scale, float *out) {
    if (isa >= NT_CPU_AVX512VNNI)
        attn_row16(q, k, v, stride, ctx, dh, scale, out);
    else
        attn_row8(q, k, v, stride, ctx, dh, scale, out);
}

int nt_cpu_conv_lanes(int isa) { return isa >= NT_CPU_AVX512VNNI ? 16 : 8; }

void nt_cpu_conv_block(int isa, const struct nt_cpu_conv *a, int c) {
    if (isa >= NT_CPU_AVX512VNNI)
        conv16(a, c);
    else
        conv8(a, c);
}

int nt_cpu_scan_simd(int isa, int P) { return P % 8 == 0 && P <= NT_MAX_HEAD_DIM; }

void nt_cpu_scan_step(int isa, float *S, const float *x, const float *B, const float *C, int N, int P,
                      float dt, float dA, float D, float *y) {
    if (isa >= NT_CPU_AVX512VNNI && P % 16 == 0)
        scan16(S, x, B, C, N, P, dt, dA, D, y);
    else
        scan8(S, x, B, C, N, P, dt, dA, D, y);
}

void nt_cpu_gated_group(int isa, const float *y, const float *z, const float *w, int gs, float eps, float *o) {
    /* 256-bit at every level: its time is libm's expf and the sum's chain, not the vectors */
    gated_group8(y, z, w, gs, eps, o);
}
