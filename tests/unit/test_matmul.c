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
 *   - nothing past the first rows of a y row is written.
 */
#include "cpu/cpu.h"

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

static float *run(const struct prob *p, int isa, int pass, int threads) {
    float *y = malloc(sizeof(float) * (size_t)p->n * p->ys);
    for (int i = 0; i < p->n * p->ys; i++) y[i] = 12345.0f;
    for (int t0 = 0; t0 < p->n; t0 += pass) {
        int k = p->n - t0 < pass ? p->n - t0 : pass;
        struct nt_mm m = {.W = &p->W, .act = NT_ACT_NONE, .x = p->x + (size_t)t0 * p->xs, .x_stride = p->xs,
                          .y = y + (size_t)t0 * p->ys, .y_stride = p->ys, .n = k};
        nt_cpu_matmul(&m, isa, threads);
    }
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
            double e = 0, mag = 0;
            for (int c = 0; c < cols; c++) {
                double term = (double)weight(&p.W, (size_t)r * cols + c) * p.x[(size_t)t * p.xs + c];
                e += term;
                mag += fabs(term);
            }
            double tol = (cols / 8 + 8) * 6e-8 * mag + 1e-30;
            size_t i = (size_t)t * p.ys + r;
            bad += !(fabs(ys[i] - e) <= tol);
            if (ya) bad += !(fabs(ya[i] - e) <= tol);
        }
    for (int t = 0; t < p.n; t++)
        for (int r = rows; r < p.ys; r++) pad += ys[(size_t)t * p.ys + r] != 12345.0f;
    CHECK(bad == 0 && pad == 0, "%s %dx%d: %d outputs off the double product, %d written past rows", dn, rows, cols, bad, pad);

    /* every SIMD variant and pass size: the AVX2 variant's bits */
    static const int passes[] = {1, 3, 4, 5, 64};
    for (int isa = NT_CPU_AVX2; ya && isa < NT_CPU_ISA_COUNT; isa++) {
        if (!nt_cpu_isa_available(isa)) continue;
        for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++)
            for (int th = 1; th <= 2; th++) {
                float *yv = run(&p, isa, passes[k], th);
                int d = first_diff(yv, ya, &p);
                CHECK(d < 0, "%s %dx%d %s pass %d, %d threads: differs from avx2 at %d: %.9g vs %.9g", dn, rows, cols,
                      nt_cpu_isa_name(isa), passes[k], th, d, d >= 0 ? yv[d] : 0.0, d >= 0 ? ya[d] : 0.0);
                free(yv);
            }
    }
    free(ys);
    free(ya);
    free(p.x);
    free(P);
}

int main(void) {
    for (int isa = NT_CPU_AVX2; isa < NT_CPU_ISA_COUNT; isa++)
        if (!nt_cpu_isa_available(isa))
            printf("test_matmul: %s skipped: this processor lacks its instructions\n", nt_cpu_isa_name(isa));
    static const int shapes[][2] = {{1, 8}, {5, 16}, {6, 64}, {7, 37}, {13, 256}, {23, 100}, {64, 768}, {130, 256}};
    static const enum nt_dtype dts[] = {NT_DTYPE_F32, NT_DTYPE_F16, NT_DTYPE_BF16};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(dts[d], shapes[i][0], shapes[i][1]);
    return test_summary("matmul");
}
