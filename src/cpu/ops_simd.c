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

/* ---- 256-bit helpers ---- */

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

/* One query row over keys 0 .. ctx-1 (k, v: the cache's rows of its KV head, `stride` floats
 * apart), out = softmax(q.k * scale) v, the reference's online softmax (backend_cpu.c's
 * attention). DH > 0 is dh known at compile time (the weighted sum then stays in registers);
 * 0 reads dh. */
static AVX2 INLINE void attn_row_avx2_dh(const float *q, const float *k, const float *v, size_t stride,
                                         int ctx, int dh_run, float scale, float *out, const int DH) {
    const int dh = DH ? DH : dh_run, d8 = dh & ~7;
    float o[NT_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float s[ATT_BLOCK], e[ATT_BLOCK], corr[ATT_BLOCK], m = -INFINITY, l = 0.0f;
    unsigned char flag[ATT_BLOCK];
    for (int i = 0; i < dh; i++) o[i] = 0.0f;
    for (int u0 = 0; u0 < ctx; u0 += ATT_BLOCK) {
        int nb = ctx - u0 < ATT_BLOCK ? ctx - u0 : ATT_BLOCK;
        scores_block(q, k, stride, u0, nb, dh, scale, s);
        softmax_block(s, nb, &m, &l, e, corr, flag);
        for (int b = 0; b < nb; b++) {
            const float *vu = v + (size_t)(u0 + b) * stride;
            /* o = o * corr (where the max rose), then o = o + e * v, per dim */
            __m256 ev = _mm256_set1_ps(e[b]), cv = _mm256_set1_ps(corr[b]);
            for (int i = 0; i < d8; i += 8) {
                __m256 ov = _mm256_load_ps(o + i);
                if (flag[b]) ov = _mm256_mul_ps(ov, cv);
                _mm256_store_ps(o + i, _mm256_add_ps(ov, _mm256_mul_ps(ev, _mm256_loadu_ps(vu + i))));
            }
            for (int i = d8; i < dh; i++) {
                if (flag[b]) o[i] *= corr[b];
                o[i] += e[b] * vu[i];
            }
        }
    }
    __m256 lv = _mm256_set1_ps(l);
    for (int i = 0; i < d8; i += 8) _mm256_storeu_ps(out + i, _mm256_div_ps(_mm256_load_ps(o + i), lv));
    for (int i = d8; i < dh; i++) out[i] = o[i] / l;
}

static AVX2 void attn_row_avx2(const float *q, const float *k, const float *v, size_t stride, int ctx,
                               int dh, float scale, float *out) {
    switch (dh) { /* the head dims of the family's checkpoints and of the demo */
    case 64: attn_row_avx2_dh(q, k, v, stride, ctx, dh, scale, out, 64); break;
    case 128: attn_row_avx2_dh(q, k, v, stride, ctx, dh, scale, out, 128); break;
    default: attn_row_avx2_dh(q, k, v, stride, ctx, dh, scale, out, 0); break;
    }
}

/* ---- 512-bit variants ---- */

/* The 512-bit attention: the scores as the 256-bit one (the reference's 8-lane chains, now with
 * 32 registers), the weighted sum 16 dims a step. */
static Z512 INLINE void attn_row_z_dh(const float *q, const float *k, const float *v, size_t stride,
                                      int ctx, int dh_run, float scale, float *out, const int DH) {
    const int dh = DH ? DH : dh_run, d16 = dh & ~15;
    float o[NT_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float s[ATT_BLOCK], e[ATT_BLOCK], corr[ATT_BLOCK], m = -INFINITY, l = 0.0f;
    unsigned char flag[ATT_BLOCK];
    for (int i = 0; i < dh; i++) o[i] = 0.0f;
    for (int u0 = 0; u0 < ctx; u0 += ATT_BLOCK) {
        int nb = ctx - u0 < ATT_BLOCK ? ctx - u0 : ATT_BLOCK;
        scores_block(q, k, stride, u0, nb, dh, scale, s);
        softmax_block(s, nb, &m, &l, e, corr, flag);
        for (int b = 0; b < nb; b++) {
            const float *vu = v + (size_t)(u0 + b) * stride;
            __m512 ev = _mm512_set1_ps(e[b]), cv = _mm512_set1_ps(corr[b]);
            for (int i = 0; i < d16; i += 16) {
                __m512 ov = _mm512_load_ps(o + i);
                if (flag[b]) ov = _mm512_mul_ps(ov, cv);
                _mm512_store_ps(o + i, _mm512_add_ps(ov, _mm512_mul_ps(ev, _mm512_loadu_ps(vu + i))));
            }
            for (int i = d16; i < dh; i++) {
                if (flag[b]) o[i] *= corr[b];
                o[i] += e[b] * vu[i];
            }
        }
    }
    __m512 lv = _mm512_set1_ps(l);
    for (int i = 0; i < d16; i += 16) _mm512_storeu_ps(out + i, _mm512_div_ps(_mm512_load_ps(o + i), lv));
    for (int i = d16; i < dh; i++) out[i] = o[i] / l;
}

static Z512 void attn_row_z(const float *q, const float *k, const float *v, size_t stride, int ctx,
                            int dh, float scale, float *out) {
    switch (dh) {
    case 64: attn_row_z_dh(q, k, v, stride, ctx, dh, scale, out, 64); break;
    case 128: attn_row_z_dh(q, k, v, stride, ctx, dh, scale, out, 128); break;
    default: attn_row_z_dh(q, k, v, stride, ctx, dh, scale, out, 0); break;
    }
}

/* ---- the Mamba conv ---- */

/* The reference's silu, x / (1 + expf(-x)), of the 8 lanes of a: libm's expf lane by lane, the
 * add and the divide on the vector (both correctly rounded, so the scalar's bits). */
static AVX2 INLINE __m256 silu8(__m256 a) {
    float x[8] __attribute__((aligned(32))), ex[8] __attribute__((aligned(32)));
    _mm256_store_ps(x, a);
    for (int j = 0; j < 8; j++) ex[j] = expf(-x[j]);
    return _mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_load_ps(ex)));
}

static Z512 INLINE __m512 silu16(__m512 a) {
    float x[16] __attribute__((aligned(64))), ex[16] __attribute__((aligned(64)));
    _mm512_store_ps(x, a);
    for (int j = 0; j < 16; j++) ex[j] = expf(-x[j]);
    return _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_load_ps(ex)));
}

/* Channels c .. c+7 of the conv over the pass (backend_cpu.c's mamba_conv, one lane a channel):
 * u = b + sum_k w[k] x[t-K+1+k] in k order, out = silu(u); the ring holds the last K-1 inputs.
 * KC > 0 is the kernel width known at compile time (the ring then stays in registers). */
static AVX2 INLINE void conv8_k(const struct nt_cpu_conv *a, int c, const int KC) {
    const int K = KC ? KC : a->K, CD = a->CD;
    __m256 wk[NT_MAX_CONV_KERNEL], r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K; k++) {
        float wl[8];
        for (int j = 0; j < 8; j++) wl[j] = a->w[(size_t)(c + j) * K + k];
        wk[k] = _mm256_loadu_ps(wl);
    }
    __m256 b = a->b ? _mm256_loadu_ps(a->b + c) : _mm256_setzero_ps();
    for (int k = 0; k < K - 1; k++) r[k] = _mm256_loadu_ps(a->ring + (size_t)k * CD + c);
    for (int t = 0; t < a->n; t++) {
        if (a->snap)
            for (int k = 0; k < K - 1; k++) _mm256_storeu_ps(a->snap + ((size_t)t * (K - 1) + k) * CD + c, r[k]);
        __m256 in = _mm256_loadu_ps(a->in + (size_t)t * a->in_stride + c);
        __m256 acc = b;
        for (int k = 0; k < K - 1; k++) acc = _mm256_add_ps(acc, _mm256_mul_ps(wk[k], r[k]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(wk[K - 1], in));
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
        _mm256_storeu_ps(a->out + (size_t)t * CD + c, silu8(acc));
    }
    for (int k = 0; k < K - 1; k++) _mm256_storeu_ps(a->ring + (size_t)k * CD + c, r[k]);
}

static Z512 INLINE void conv16_k(const struct nt_cpu_conv *a, int c, const int KC) {
    const int K = KC ? KC : a->K, CD = a->CD;
    __m512 wk[NT_MAX_CONV_KERNEL], r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K; k++) {
        float wl[16];
        for (int j = 0; j < 16; j++) wl[j] = a->w[(size_t)(c + j) * K + k];
        wk[k] = _mm512_loadu_ps(wl);
    }
    __m512 b = a->b ? _mm512_loadu_ps(a->b + c) : _mm512_setzero_ps();
    for (int k = 0; k < K - 1; k++) r[k] = _mm512_loadu_ps(a->ring + (size_t)k * CD + c);
    for (int t = 0; t < a->n; t++) {
        if (a->snap)
            for (int k = 0; k < K - 1; k++) _mm512_storeu_ps(a->snap + ((size_t)t * (K - 1) + k) * CD + c, r[k]);
        __m512 in = _mm512_loadu_ps(a->in + (size_t)t * a->in_stride + c);
        __m512 acc = b;
        for (int k = 0; k < K - 1; k++) acc = _mm512_add_ps(acc, _mm512_mul_ps(wk[k], r[k]));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(wk[K - 1], in));
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
        _mm512_storeu_ps(a->out + (size_t)t * CD + c, silu16(acc));
    }
    for (int k = 0; k < K - 1; k++) _mm512_storeu_ps(a->ring + (size_t)k * CD + c, r[k]);
}

static AVX2 void conv8(const struct nt_cpu_conv *a, int c) {
    if (a->K == 4) conv8_k(a, c, 4); /* every Nemotron-H's conv_kernel */
    else conv8_k(a, c, 0);
}
static Z512 void conv16(const struct nt_cpu_conv *a, int c) {
    if (a->K == 4) conv16_k(a, c, 4);
    else conv16_k(a, c, 0);
}

/* ---- the selective scan and the gated norm ---- */

/* One head's step of the scan at one position (backend_cpu.c's mamba_scan, one lane a head dim
 * q): for n in order, S[n][q] = dA S[n][q] + (dt B[n]) x[q] and acc[q] += S[n][q] C[n]; then
 * y[q] = acc[q] + D x[q]. PC > 0 is P known at compile time (acc and x stay in registers). */
static AVX2 INLINE void scan8_p(float *S, const float *x, const float *B, const float *C, int N, int P_run,
                                float dt, float dA, float D, float *y, const int PC) {
    const int P = PC ? PC : P_run;
    __m256 acc[NT_MAX_HEAD_DIM / 8], xv[NT_MAX_HEAD_DIM / 8];
    __m256 dAv = _mm256_set1_ps(dA);
    for (int j = 0; j < P / 8; j++) acc[j] = _mm256_setzero_ps(), xv[j] = _mm256_loadu_ps(x + 8 * j);
    for (int n = 0; n < N; n++) {
        float *Sn = S + (size_t)n * P;
        __m256 dtB = _mm256_set1_ps(dt * B[n]), Cn = _mm256_set1_ps(C[n]);
        for (int j = 0; j < P / 8; j++) {
            __m256 sv = _mm256_add_ps(_mm256_mul_ps(dAv, _mm256_loadu_ps(Sn + 8 * j)), _mm256_mul_ps(dtB, xv[j]));
            _mm256_storeu_ps(Sn + 8 * j, sv);
            acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(sv, Cn));
        }
    }
    __m256 Dv = _mm256_set1_ps(D);
    for (int j = 0; j < P / 8; j++) _mm256_storeu_ps(y + 8 * j, _mm256_add_ps(acc[j], _mm256_mul_ps(Dv, xv[j])));
}

static Z512 INLINE void scan16_p(float *S, const float *x, const float *B, const float *C, int N, int P_run,
                                 float dt, float dA, float D, float *y, const int PC) {
    const int P = PC ? PC : P_run;
    __m512 acc[NT_MAX_HEAD_DIM / 16], xv[NT_MAX_HEAD_DIM / 16];
    __m512 dAv = _mm512_set1_ps(dA);
    for (int j = 0; j < P / 16; j++) acc[j] = _mm512_setzero_ps(), xv[j] = _mm512_loadu_ps(x + 16 * j);
    for (int n = 0; n < N; n++) {
        float *Sn = S + (size_t)n * P;
        __m512 dtB = _mm512_set1_ps(dt * B[n]), Cn = _mm512_set1_ps(C[n]);
        for (int j = 0; j < P / 16; j++) {
            __m512 sv = _mm512_add_ps(_mm512_mul_ps(dAv, _mm512_loadu_ps(Sn + 16 * j)), _mm512_mul_ps(dtB, xv[j]));
            _mm512_storeu_ps(Sn + 16 * j, sv);
            acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(sv, Cn));
        }
    }
    __m512 Dv = _mm512_set1_ps(D);
    for (int j = 0; j < P / 16; j++) _mm512_storeu_ps(y + 16 * j, _mm512_add_ps(acc[j], _mm512_mul_ps(Dv, xv[j])));
}

static AVX2 void scan8(float *S, const float *x, const float *B, const float *C, int N, int P, float dt,
                       float dA, float D, float *y) {
    switch (P) { /* mamba_head_dim: the demo's, and the family's checkpoints' */
    case 32: scan8_p(S, x, B, C, N, P, dt, dA, D, y, 32); break;
    case 64: scan8_p(S, x, B, C, N, P, dt, dA, D, y, 64); break;
    default: scan8_p(S, x, B, C, N, P, dt, dA, D, y, 0); break;
    }
}

static Z512 void scan16(float *S, const float *x, const float *B, const float *C, int N, int P, float dt,
                        float dA, float D, float *y) {
    switch (P) {
    case 32: scan16_p(S, x, B, C, N, P, dt, dA, D, y, 32); break;
    case 64: scan16_p(S, x, B, C, N, P, dt, dA, D, y, 64); break;
    default: scan16_p(S, x, B, C, N, P, dt, dA, D, y, 0); break;
    }
}

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
        attn_row_z(q, k, v, stride, ctx, dh, scale, out);
    else
        attn_row_avx2(q, k, v, stride, ctx, dh, scale, out);
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
