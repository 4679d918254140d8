/* test_matmul.c - the CPU float products (src/cpu/matmul.c): f32, f16 and bf16 weights.
 *
 * matmul.c has two arithmetics: the scalar reference (mul then add) and the FMA one, which the
 * AVX2 variant and the AVX-512 level's 512-bit kernels (two rows per vector) both compute. Checked
 * here on shapes that exercise every kernel (row counts that leave 1 - 5 rows past the kernels'
 * blocks, column counts with a tail past the last multiple of 8, passes of 1 - 70 positions):
 *   - every SIMD variant this processor runs gives the AVX2 variant's bits, for every pass size
 *     and on 1 and 2 threads (a variant the processor lacks is reported as skipped);
 *   - the FMA arithmetic is within a rounding bound of the scalar reference, and that of the
 *     double-precision product;
 *   - nothing past the first rows of a y row is written;
 *   - bf16 weights at the AVX-512 BF16 level (matmul_bf16.c): the arithmetic written out below in
 *     scalar C, bit for bit, for every pass size, thread count and the rows entry point, also on
 *     values at the edge of the normal range (the instruction's DAZ and FTZ); and within the
 *     bound that rounding the activations to bf16 allows of the double product.
 */
#include "cpu/cpu.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; /* [-1, 1) */
}

struct prob {
    struct nt_matrix W;
    float *x;
    int xs, ys, n;
};

/* y of the product in passes of `pass` positions; threads 0: the rows entry point, after
 * nt_cpu_quantize_x, in two calls that split the rows at an odd row. */
static float *run(const struct prob *p, int isa, int pass, int threads) {
    float *y = malloc(sizeof(float) * (size_t)p->n * p->ys);
    void *qx = malloc(nt_cpu_qx_bytes(pass, p->W.cols));
    for (int i = 0; i < p->n * p->ys; i++) y[i] = 12345.0f;
    for (int t0 = 0; t0 < p->n; t0 += pass) {
        int k = p->n - t0 < pass ? p->n - t0 : pass;
        struct nt_mm m = {.W = &p->W, .act = NT_ACT_NONE, .x = p->x + (size_t)t0 * p->xs, .x_stride = p->xs,
                          .y = y + (size_t)t0 * p->ys, .y_stride = p->ys, .n = k, .qx = qx};
        if (threads) {
            nt_cpu_matmul(&m, isa, threads);
        } else {
            int mid = (int)p->W.rows / 2 | 1;
            if (mid > p->W.rows) mid = (int)p->W.rows;
            nt_cpu_quantize_x(&m, isa);
            nt_cpu_matmul_rows(&m, isa, 0, mid);
            nt_cpu_matmul_rows(&m, isa, mid, (int)p->W.rows);
        }
    }
    free(qx);
    return y;
}

/* ---- matmul_bf16.c's arithmetic, written out ---- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* the instruction's DAZ (an operand) and FTZ (a result): below the normal range is a signed 0 */
static float flush(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

static float bf16_product_ref(const uint16_t *w, const float *x, int cols) {
    float acc[16] = {0};
    for (int b = 0; b < (cols + 31) / 32; b++)
        for (int l = 0; l < 16; l++)
            for (int k = 1; k >= 0; k--) { /* the odd column of the pair first */
                int c = 32 * b + 2 * l + k;
                if (c >= cols) continue; /* a padded column adds +0 to an accumulator that is never -0 */
                float xb = flush(nt_bf16_to_f32(nt_f32_to_bf16(flush(x[c]))));
                acc[l] = flush(fmaf(flush(nt_bf16_to_f32(w[c])), xb, acc[l]));
            }
    float s[8];
    for (int l = 0; l < 8; l++) s[l] = acc[l] + acc[l + 8];
    return nt_cpu_tree8(s);
}

static float *run_bf16_ref(const struct prob *p) {
    float *y = malloc(sizeof(float) * (size_t)p->n * p->ys);
    const uint16_t *W = p->W.data;
    int cols = (int)p->W.cols;
    for (int i = 0; i < p->n * p->ys; i++) y[i] = 12345.0f;
    for (int t = 0; t < p->n; t++)
        for (int r = 0; r < p->W.rows; r++)
            y[(size_t)t * p->ys + r] = bf16_product_ref(W + (size_t)r * cols, p->x + (size_t)t * p->xs, cols);
    return y;
}

static int first_diff(const float *a, const float *b, const struct prob *p) {
    for (int t = 0; t < p->n; t++)
        for (int r = 0; r < p->ys; r++) {
            size_t i = (size_t)t * p->ys + r;
            if (memcmp(&a[i], &b[i], 4) != 0) return (int)i;
        }
    return -1;
}

static float weight(const struct nt_matrix *W, size_t i) {
    const uint8_t *p = W->data;
    uint16_t h;
    float f;
    switch (W->dtype) {
    case NT_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return nt_bf16_to_f32(h);
    case NT_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return nt_f16_to_f32(h);
    default: memcpy(&f, p + 4 * i, 4); return f;
    }
}

/* Row r of W times position t of x in double precision; *mag: the sum of the terms' magnitudes. */
static double double_product(const struct prob *p, int r, int t, double *mag) {
    double e = 0;
    *mag = 0;
    for (int c = 0; c < p->W.cols; c++) {
        double term = (double)weight(&p->W, (size_t)r * p->W.cols + c) * p->x[(size_t)t * p->xs + c];
        e += term;
        *mag += fabs(term);
    }
    return e;
}

static void test_shape(enum nt_dtype dt, int rows, int cols) {
    const char *dn = dt == NT_DTYPE_BF16 ? "bf16" : dt == NT_DTYPE_F16 ? "f16" : "f32";
    size_t esz = nt_dtype_size(dt), nw = (size_t)rows * cols;
    uint8_t *P = malloc(nw * esz);
    for (size_t i = 0; i < nw; i++) {
        float v = uniform() / sqrtf((float)cols);
        uint16_t h;
        if (dt == NT_DTYPE_BF16) { h = nt_f32_to_bf16(v); memcpy(P + 2 * i, &h, 2); }
        else if (dt == NT_DTYPE_F16) { h = nt_f32_to_f16(v); memcpy(P + 2 * i, &h, 2); }
        else memcpy(P + 4 * i, &v, 4);
    }
    struct prob p = {.W = {.dtype = dt, .rows = rows, .cols = cols, .data = P, .name = "w"}, .xs = cols + 5, .ys = rows + 3, .n = 70};
    p.x = malloc(sizeof(float) * (size_t)p.n * p.xs);
    for (int i = 0; i < p.n * p.xs; i++) p.x[i] = uniform();

    float *ys = run(&p, NT_CPU_SCALAR, 70, 1);
    float *ya = nt_cpu_isa_available(NT_CPU_AVX2) ? run(&p, NT_CPU_AVX2, 70, 1) : NULL;
    /* the scalar reference and (where it runs) the FMA arithmetic against the double product:
     * cols / 8 + 4 roundings of partial sums no larger than sum |w x| */
    int bad = 0, pad = 0;
    for (int t = 0; t < p.n; t++)
        for (int r = 0; r < rows; r++) {
            double mag, e = double_product(&p, r, t, &mag);
            double tol = (cols / 8 + 8) * 6e-8 * mag + 1e-30;
            size_t i = (size_t)t * p.ys + r;
            bad += !(fabs(ys[i] - e) <= tol);
            if (ya) bad += !(fabs(ya[i] - e) <= tol);
        }
    for (int t = 0; t < p.n; t++)
        for (int r = rows; r < p.ys; r++) pad += ys[(size_t)t * p.ys + r] != 12345.0f;
    CHECK(bad == 0 && pad == 0, "%s %dx%d: %d outputs off the double product, %d written past rows", dn, rows, cols, bad, pad);

    /* bf16 weights at the AVX-512 BF16 level: the double product within the activations'
     * rounding (half an ulp of bf16: 2^-8 relative at most, on each term) plus the FMA bound above */
    float *yb = NULL;
    if (dt == NT_DTYPE_BF16 && nt_cpu_isa_available(NT_CPU_AVX512BF16)) {
        yb = run_bf16_ref(&p);
        int far = 0;
        for (int t = 0; t < p.n; t++)
            for (int r = 0; r < rows; r++) {
                double mag, e = double_product(&p, r, t, &mag);
                double tol = (1.0 / 256 + (cols / 16 + 8) * 6e-8) * mag + 1e-30;
                far += !(fabs(yb[(size_t)t * p.ys + r] - e) <= tol);
            }
        CHECK(far == 0, "bf16 %dx%d: %d outputs of the bf16 arithmetic off the double product", rows, cols, far);
    }

    /* every SIMD variant, pass size and thread count (0: the rows entry point): the AVX2
     * variant's bits, or the bf16 arithmetic's */
    static const int passes[] = {1, 3, 4, 5, 6, 7, 64};
    for (int isa = NT_CPU_AVX2; ya && isa < NT_CPU_ISA_COUNT; isa++) {
        if (!nt_cpu_isa_available(isa)) continue;
        const float *want = nt_cpu_bf16_product(dt, isa) ? yb : ya;
        for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++)
            for (int th = 0; th <= 2; th++) {
                float *yv = run(&p, isa, passes[k], th);
                int d = first_diff(yv, want, &p);
                CHECK(d < 0, "%s %dx%d %s pass %d, %d threads: differs from %s at %d: %.9g vs %.9g", dn, rows, cols,
                      nt_cpu_isa_name(isa), passes[k], th, want == yb ? "the bf16 arithmetic" : "avx2", d,
                      d >= 0 ? yv[d] : 0.0, d >= 0 ? want[d] : 0.0);
                free(yv);
            }
    }
    free(ys);
    free(ya);
    free(yb);
    free(p.x);
    free(P);
}

/* The bf16 arithmetic where DAZ and FTZ act: rows and positions whose every term sits around the
 * bottom of the normal range (bf16 denormal weights, f32 denormal activations and ones that round
 * to bf16 denormals or up to the smallest normal, products and sums that underflow), zeros of
 * both signs, and a short last block. Row r's weights and position t's activations are scaled by
 * r % 3 and t % 3, so that tiny terms meet tiny terms and normal ones. */
static void test_bf16_edges(void) {
    if (!nt_cpu_isa_available(NT_CPU_AVX512BF16)) return;
    enum { R = 9, C = 77, N = 7 };
    static uint16_t W[R * C];
    static float x[N * C];
    static const float w_scale[3] = {0x1p-127f, 0x1p-62f, 0x1p8f}, x_scale[3] = {0x1p-64f, 0x1p-126f, 1.0f};
    for (int i = 0; i < R * C; i++) {
        float v = uniform() * w_scale[(i / C) % 3];
        if (i % 7 == 0) v = i % 2 ? 0.0f : -0.0f;
        W[i] = nt_f32_to_bf16(v);
    }
    static const uint32_t special[] = {0x007fffffu, 0x807fffffu, 0x00000001u, 0x00800000u, 0x80800000u, 0x007f8000u};
    for (int i = 0; i < N * C; i++) {
        float v = uniform() * x_scale[(i / C) % 3];
        if (i % 5 == 0) v = bits_f32(special[(i / 5) % 6]);
        x[i] = v;
    }
    struct prob p = {.W = {.dtype = NT_DTYPE_BF16, .rows = R, .cols = C, .data = W, .name = "edge"},
                     .x = x, .xs = C, .ys = R, .n = N};
    float *want = run_bf16_ref(&p);
    for (int pass = 1; pass <= N; pass += 6)
        for (int th = 0; th <= 2; th++) {
            float *got = run(&p, NT_CPU_AVX512BF16, pass, th);
            int d = first_diff(got, want, &p);
            CHECK(d < 0, "bf16 edges pass %d, %d threads: differs from the bf16 arithmetic at %d: %a vs %a", pass, th,
                  d, d >= 0 ? got[d] : 0.0, d >= 0 ? want[d] : 0.0);
            free(got);
        }
    free(want);
}

int main(void) {
    for (int isa = NT_CPU_AVX2; isa < NT_CPU_ISA_COUNT; isa++)
        if (!nt_cpu_isa_available(isa))
            printf("test_matmul: %s skipped: this processor lacks its instructions\n", nt_cpu_isa_name(isa));
    static const int shapes[][2] = {{1, 8},   {5, 16},    {6, 64},    {7, 37},   {11, 121},
                                    {13, 256}, {23, 100}, {64, 768}, {130, 256}};
    static const enum nt_dtype dts[] = {NT_DTYPE_F32, NT_DTYPE_F16, NT_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(dts[d], shapes[i][0], shapes[i][1]);
    test_bf16_edges();
    return test_summary("matmul");
}
