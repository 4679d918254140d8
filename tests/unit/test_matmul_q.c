/* test_matmul_q.c - the CPU products with packed weights (src/cpu/matmul_q.c): q8_2f and q4tp.
 *
 * Payloads are built here from random bytes in the FORMATS.md layout (random int8 weights, random
 * nibbles and 5-bit codes, f16 row scales, column fields and log-scale parameters in sensible
 * ranges), with no padding beyond what the format promises, so a kernel that reads past a
 * payload trips AddressSanitizer. Each product is checked against
 *   (a) a double-precision reference written here from the arithmetic matmul_q.c documents
 *       (the activation quantization in f32 exactly as specified, then the sums in double);
 *   (b) the exact product of the dequantized weights with the unquantized activations, within a
 *       bound derived from the int8 rounding of the activations;
 * and the kernels are checked against each other bit for bit: scalar == every SIMD variant this
 * processor runs (AVX2, AVX-VNNI, AVX-512 VNNI, AMX; outputs, and for AVX2 the qx bytes, whose layout
 * is the scalar one; a variant the processor lacks is reported as skipped), every pass size gives every position the same bits, nt_cpu_matmul on 1 and 2 threads
 * and nt_cpu_matmul_rows agree, bias and relu^2 are the f32 operations on the plain output, and
 * nothing outside the first rows (cols) of a y (x) row is written.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

/* ---- random numbers ---------------------------------------------------------------------- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); } /* [0, 1) */
static float range(float lo, float hi) { return lo + (hi - lo) * (float)uniform(); }

/* ---- payloads (FORMATS.md) ---------------------------------------------------------------- */

static size_t q8_bytes(int64_t rows, int64_t cols) {
    size_t s = (size_t)(rows * cols + 2 * rows + 2 * cols);
    return (s + 3) / 4 * 4;
}
static size_t q4_bytes(int64_t rows, int64_t cols) {
    int64_t gpr = cols / 32, cstride = (gpr * 5 + 7) / 8;
    size_t s = (size_t)(rows * gpr * 16 + 4 * rows + rows * cstride);
    return (s + 3) / 4 * 4 + 4;
}
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static uint8_t *make_q8(int64_t rows, int64_t cols) {
    size_t n = q8_bytes(rows, cols);
    uint8_t *p = calloc(n, 1);
    for (int64_t i = 0; i < rows * cols; i++) p[i] = (uint8_t)next_u64(); /* any int8, -128 too */
    for (int64_t r = 0; r < rows; r++) /* row scales 2^-12 .. 2^-6, some negative */
        put16(p + rows * cols + 2 * r, nt_f32_to_f16((next_u64() & 7) == 0 ? -exp2f(range(-12, -6)) : exp2f(range(-12, -6))));
    for (int64_t c = 0; c < cols; c++) /* column fields 1/8 .. 8 */
        put16(p + rows * cols + 2 * rows + 2 * c, nt_f32_to_f16(exp2f(range(-3, 3))));
    return p;
}

static uint8_t *make_q4(int64_t rows, int64_t cols) {
    size_t n = q4_bytes(rows, cols);
    int64_t gpr = cols / 32, cstride = (gpr * 5 + 7) / 8;
    uint8_t *p = calloc(n, 1);
    for (int64_t i = 0; i < rows * gpr * 16; i++) p[i] = (uint8_t)next_u64();
    uint8_t *params = p + rows * gpr * 16, *codes = params + 4 * rows;
    for (int64_t r = 0; r < rows; r++) {
        /* base -16 .. -6, step 0 .. 0.3: scales 2^-16 .. ~2^3 */
        put16(params + 4 * r, nt_f32_to_f16(range(-16, -6)));
        put16(params + 4 * r + 2, nt_f32_to_f16(range(0, 0.3f)));
        for (int64_t g = 0; g < gpr; g++) { /* random 5-bit codes, packed LSB-first */
            int code = (int)(next_u64() & 31);
            int64_t bit = 5 * g;
            uint8_t *q = codes + r * cstride;
            for (int k = 0; k < 5; k++)
                if (code >> k & 1) q[(bit + k) >> 3] |= (uint8_t)(1u << ((bit + k) & 7));
        }
    }
    return p;
}

/* Reading the payloads back, independently of src/quant (the test's own view of FORMATS.md). */
static float q8_rs(const uint8_t *p, int64_t rows, int64_t cols, int64_t r) { return nt_f16_to_f32(get16(p + rows * cols + 2 * r)); }
static float q8_cs(const uint8_t *p, int64_t rows, int64_t cols, int64_t c) { return nt_f16_to_f32(get16(p + rows * cols + 2 * rows + 2 * c)); }
static int q4_nib(const uint8_t *p, int64_t cols, int64_t r, int64_t c) {
    int64_t gpr = cols / 32, g = c / 32, k = c % 32, j = k / 8, n = k % 8;
    uint32_t word;
    memcpy(&word, p + (r * gpr + g) * 16 + 4 * j, 4);
    return (int)((word >> (4 * n)) & 15) - 8;
}
static int q4_codeof(const uint8_t *p, int64_t rows, int64_t cols, int64_t r, int64_t g) {
    int64_t gpr = cols / 32, cstride = (gpr * 5 + 7) / 8;
    const uint8_t *codes = p + rows * gpr * 16 + 4 * rows + r * cstride;
    int v = 0;
    for (int k = 0; k < 5; k++) v |= ((codes[(5 * g + k) >> 3] >> ((5 * g + k) & 7)) & 1) << k;
    return v;
}
static void q4_params(const uint8_t *p, int64_t rows, int64_t cols, int64_t r, float *base, float *step) {
    const uint8_t *q = p + rows * (cols / 32) * 16 + 4 * r;
    *base = nt_f16_to_f32(get16(q));
    *step = nt_f16_to_f32(get16(q + 2));
}

/* ---- activations --------------------------------------------------------------------------- */

/* n rows of x (stride xs): values +-[0.05, 1) with a few outliers (x 40), never 0, except one
 * all-zero block (position 0, block 1) and one block of values too small for 127/amax to be
 * finite (position 1, block 0). Padding between rows holds NaN, which must never be read. */
static float *make_x(int n, int64_t cols, int xs) {
    float *x = malloc(sizeof(float) * (size_t)n * (size_t)xs);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < xs; c++) {
            float v = range(0.05f, 1.0f) * ((next_u64() & 1) ? 1.0f : -1.0f);
            if ((next_u64() % 61) == 0) v *= 40.0f;
            x[(size_t)t * xs + c] = c < cols ? v : NAN;
        }
    if (cols >= 64 && n > 0)
        for (int c = 32; c < 64; c++) x[c] = 0.0f;
    if (n > 1)
        for (int c = 0; c < 32 && c < cols; c++) x[(size_t)xs + c] = 1e-38f * (c % 3 == 0 ? -1.0f : 1.0f);
    return x;
}

/* Step 1 of the arithmetic, as specified, in f32: q[] and d of one block of x' values. */
static float ref_quant_block(const float *v, int len, int *q) {
    float amax = 0.0f;
    for (int c = 0; c < len; c++) amax = fabsf(v[c]) > amax ? fabsf(v[c]) : amax;
    float inv = 127.0f / amax;
    if (isinf(inv) || isnan(inv)) inv = 0.0f;
    for (int c = 0; c < len; c++) {
        float r = rintf(v[c] * inv);
        q[c] = r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r;
    }
    return amax / 127.0f;
}

/* ---- references ---------------------------------------------------------------------------- */

/* (a): y_ref[t][r] and the sum of |terms| that bounds the f32 rounding; (b): the exact product of
 * the dequantized W with x, and a bound for the difference int8 activations make. */
struct refs {
    double *y, *mag, *exact, *bound, *var;
};

static struct refs make_refs(enum nt_dtype fmt, const uint8_t *P, int64_t rows, int64_t cols, const float *x, int xs, int n) {
    struct refs R;
    size_t cnt = (size_t)n * (size_t)rows;
    R.y = calloc(cnt, sizeof(double));
    R.mag = calloc(cnt, sizeof(double));
    R.exact = calloc(cnt, sizeof(double));
    R.bound = calloc(cnt, sizeof(double));
    R.var = calloc(cnt, sizeof(double));
    int64_t nb = (cols + 31) / 32;
    int *q = malloc(sizeof(int) * (size_t)cols);
    float *d = malloc(sizeof(float) * (size_t)nb);
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * xs;
        for (int64_t b = 0; b < nb; b++) {
            int len = cols - 32 * b < 32 ? (int)(cols - 32 * b) : 32;
            float v[32];
            for (int c = 0; c < len; c++)
                v[c] = fmt == NT_DTYPE_Q8_2F ? xt[32 * b + c] * q8_cs(P, rows, cols, 32 * b + c) : xt[32 * b + c];
            d[b] = ref_quant_block(v, len, q + 32 * b);
        }
        for (int64_t r = 0; r < rows; r++) {
            double y = 0, mag = 0, exact = 0, bound = 0, var = 0;
            if (fmt == NT_DTYPE_Q8_2F) {
                double rs = q8_rs(P, rows, cols, r);
                for (int64_t b = 0; b < nb; b++)
                    for (int l = 0; l < 8; l++) {
                        double isum = 0, wabs = 0, wsq = 0;
                        for (int64_t c = 32 * b + 4 * l; c < 32 * b + 4 * l + 4 && c < cols; c++) {
                            int w = (int8_t)P[r * cols + c];
                            isum += (double)w * q[c];
                            wabs += fabs((double)w);
                            wsq += (double)w * w;
                            exact += rs * w * (double)q8_cs(P, rows, cols, c) * xt[c];
                        }
                        y += rs * isum * d[b];
                        mag += fabs(rs * isum * d[b]);
                        bound += fabs(rs) * wabs * d[b] * 0.5; /* |x' - d q| <= d / 2 */
                        var += rs * rs * wsq * d[b] * d[b] / 12;  /* uniform on [-d/2, d/2] */
                    }
            } else {
                float base, step;
                q4_params(P, rows, cols, r, &base, &step);
                for (int64_t g = 0; g < nb; g++) {
                    double scale = exp2((double)base + q4_codeof(P, rows, cols, r, g) * (double)step);
                    for (int l = 0; l < 8; l++) {
                        double isum = 0, wabs = 0, wsq = 0;
                        for (int k = 0; k < 4; k++) {
                            int64_t c = 32 * g + 8 * (l & 3) + 2 * k + (l >> 2);
                            int w = q4_nib(P, cols, r, c);
                            isum += (double)w * q[c];
                            wabs += abs(w);
                            wsq += (double)w * w;
                            exact += scale * w * xt[c];
                        }
                        y += isum * scale * d[g];
                        mag += fabs(isum * scale * d[g]);
                        bound += wabs * scale * d[g] * 0.5;
                        var += wsq * scale * scale * d[g] * d[g] / 12;
                    }
                }
            }
            size_t i = (size_t)t * rows + r;
            R.y[i] = y;
            R.mag[i] = mag;
            R.exact[i] = exact;
            R.bound[i] = bound;
            R.var[i] = var;
        }
    }
    free(q);
    free(d);
    return R;
}

static void free_refs(struct refs *R) {
    free(R->y);
    free(R->mag);
    free(R->exact);
    free(R->bound);
    free(R->var);
}

/* ---- running the kernels ------------------------------------------------------------------- */

struct prob {
    struct nt_matrix W;
    const uint8_t *stream; /* q8_2f: W in the streaming layout, or NULL */
    const float *x;
    int xs, ys, n;
};

/* y (n x ys, NaN-free sentinel outside the written part) from passes of `pass` positions. */
static float *run(const struct prob *p, int isa, int pass, int threads, const float *bias, enum nt_act act, int rows_api) {
    int rows = (int)p->W.rows;
    float *y = malloc(sizeof(float) * (size_t)p->n * p->ys);
    for (int i = 0; i < p->n * p->ys; i++) y[i] = 12345.0f;
    void *qx = malloc(nt_cpu_qx_bytes(pass, p->W.cols)); /* exactly the size asked for */
    for (int t0 = 0; t0 < p->n; t0 += pass) {
        int k = p->n - t0 < pass ? p->n - t0 : pass;
        struct nt_mm m = {.W = &p->W, .bias = bias, .act = act, .x = p->x + (size_t)t0 * p->xs, .x_stride = p->xs,
                          .y = y + (size_t)t0 * p->ys, .y_stride = p->ys, .n = k, .qx = qx,
                          .stream = p->stream};
        if (rows_api) {
            nt_cpu_quantize_x(&m, isa);
            /* in two calls, split at an odd row, to check a range need not start on a tile */
            int mid = rows / 2 | 1;
            if (mid > rows) mid = rows;
            nt_cpu_matmul_rows(&m, isa, 0, mid);
            nt_cpu_matmul_rows(&m, isa, mid, rows);
        } else {
            nt_cpu_matmul(&m, isa, threads);
        }
    }
    free(qx);
    return y;
}

static int same_bits(const float *a, const float *b, const struct prob *p, int *first) {
    for (int t = 0; t < p->n; t++)
        for (int r = 0; r < p->W.rows; r++) {
            size_t i = (size_t)t * p->ys + r;
            if (memcmp(&a[i], &b[i], 4) != 0) {
                *first = (int)i;
                return 0;
            }
        }
    return 1;
}

/* The variants a loop over "scalar, then the one under test" visits: 0, then isa (if not 0). */
static int after(int v, int isa) { return v == 0 && isa ? isa : isa + 1; }

/* Checks variant isa (0: the scalar reference alone) on one shape. */
static void test_shape(enum nt_dtype fmt, int64_t rows, int64_t cols, int isa) {
    const char *vname = nt_cpu_isa_name(isa);
    const char *fname = fmt == NT_DTYPE_Q8_2F ? "q8_2f" : "q4tp";
    uint8_t *P = fmt == NT_DTYPE_Q8_2F ? make_q8(rows, cols) : make_q4(rows, cols);
    struct prob p = {.W = {.dtype = fmt, .rows = rows, .cols = cols, .data = P, .name = "w"},
                     .xs = (int)cols + 3, .ys = (int)rows + 5, .n = 64};
    float *x = make_x(p.n, cols, p.xs);
    p.x = x;
    int first = 0;

    /* qx: scalar and AVX2 write the same bytes */
    size_t qb = nt_cpu_qx_bytes(p.n, cols);
    uint8_t *qa = malloc(qb), *qv = malloc(qb);
    memset(qa, 0xA5, qb);
    memset(qv, 0x5A, qb);
    struct nt_mm mq = {.W = &p.W, .x = x, .x_stride = p.xs, .n = p.n, .qx = qa};
    nt_cpu_quantize_x(&mq, 0);
    if (isa == NT_CPU_AVX2) { /* the VNNI variants' records have their own layout (matmul_q.c) */
        mq.qx = qv;
        nt_cpu_quantize_x(&mq, isa);
        /* compare only the bytes the layout defines: the record and d of every block */
        int64_t nb = (cols + 31) / 32;
        size_t pb = qb / (size_t)p.n, bad = 0;
        for (int t = 0; t < p.n; t++)
            for (size_t i = 0; i < (size_t)nb * 68; i++) bad += qa[t * pb + i] != qv[t * pb + i];
        CHECK(bad == 0, "%s %lldx%lld: scalar and AVX2 qx differ in %zu bytes", fname, (long long)rows, (long long)cols, bad);
    }
    free(qa);
    free(qv);

    /* the scalar reference, then the variant, full passes of 64 */
    float *ys = run(&p, 0, 64, 1, NULL, NT_ACT_NONE, 1);
    float *yv = isa ? run(&p, isa, 64, 1, NULL, NT_ACT_NONE, 1) : NULL;
    if (isa)
        CHECK(same_bits(ys, yv, &p, &first), "%s %lldx%lld: scalar != %s at %d: %.9g vs %.9g", fname,
              (long long)rows, (long long)cols, vname, first, ys[first], yv[first]);
    const float *y0 = isa ? yv : ys;

    /* (a) against the double reference of the same arithmetic. The kernel's f32 chain is at most
     * nb + 4 roundings (an fma per block and lane, the lane tree, the row scale), each within
     * 2^-24 of a partial sum no larger than sum |terms|; q4tp's f32 scale is within 4e-7 of 2^t
     * (t rounded to f32, |t| < 17 here). nb <= 116 here: 1e-5 * sum |terms| covers it. */
    struct refs R = make_refs(fmt, P, rows, cols, x, p.xs, p.n);
    int bad_a = 0, bad_b = 0, bad_pad = 0, worst = -1;
    double sq_err = 0, sum_var = 0;
    for (int t = 0; t < p.n; t++)
        for (int r = 0; r < rows; r++) {
            size_t i = (size_t)t * rows + r;
            double got = y0[(size_t)t * p.ys + r];
            if (!(fabs(got - R.y[i]) <= 1e-5 * R.mag[i] + 1e-30)) {
                if (!bad_a) worst = (int)i;
                bad_a++;
            }
            /* (b) the exact product with unquantized x: each x' is off by at most d/2 after int8
             * rounding, so |y - exact| <= sum |w| d / 2 (+ the f32 rounding above) */
            if (!(fabs(got - R.exact[i]) <= R.bound[i] * (1 + 1e-6) + 2e-5 * R.mag[i] + 1e-30)) bad_b++;
            sq_err += (got - R.exact[i]) * (got - R.exact[i]);
            sum_var += R.var[i];
        }
    for (int t = 0; t < p.n; t++)
        for (int r = (int)rows; r < p.ys; r++) bad_pad += y0[(size_t)t * p.ys + r] != 12345.0f;
    CHECK(bad_a == 0, "%s %lldx%lld: %d outputs off the double reference (first %d: %.9g vs %.9g, |terms| %.3g)", fname,
          (long long)rows, (long long)cols, bad_a, worst, worst >= 0 ? y0[(size_t)(worst / rows) * p.ys + worst % rows] : 0.0,
          worst >= 0 ? R.y[worst] : 0.0, worst >= 0 ? R.mag[worst] : 0.0);
    CHECK(bad_b == 0, "%s %lldx%lld: %d outputs past the int8-activation bound", fname, (long long)rows, (long long)cols, bad_b);
    /* and the error is what int8 rounding predicts: each x' off by a roughly uniform amount in
     * [-d/2, d/2], independent, so E[err^2] = sum w^2 d^2 / 12 (a little less: a block's largest
     * element is exact, and the many small x' of a block with an outlier round off by less).
     * Over >= 1024 outputs the ratio stays within [0.5, 1.5] (0.73 .. 1.16 seen here); a wrong
     * scale, a lost block or a misplaced column makes it far larger. */
    double ratio = sq_err / (sum_var + 1e-300);
    if (p.n * rows >= 1024)
        CHECK(ratio > 0.5 && ratio < 1.5, "%s %lldx%lld: squared error %.3g x its int8 prediction", fname,
          (long long)rows, (long long)cols, ratio);
    if (getenv("TEST_VERBOSE")) printf("%s %lldx%lld: error / prediction %.3f\n", fname, (long long)rows, (long long)cols, ratio);
    CHECK(bad_pad == 0, "%s %lldx%lld: %d y elements past rows written", fname, (long long)rows, (long long)cols, bad_pad);
    free_refs(&R);

    /* every pass size gives every position the same bits (both variants) */
    static const int passes[] = {1, 2, 3, 5, 17, 64};
    for (int v = 0; v <= isa; v = after(v, isa))
        for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++) {
            if (!v && passes[k] != 1 && passes[k] != 5) continue; /* the scalar kernel is per position anyway */
            float *yk = run(&p, v, passes[k], 1, NULL, NT_ACT_NONE, 1);
            CHECK(same_bits(yk, v ? yv : ys, &p, &first), "%s %lldx%lld %s: pass %d differs at %d", fname, (long long)rows,
                  (long long)cols, nt_cpu_isa_name(v), passes[k], first);
            free(yk);
        }
    /* a pass longer than the tile's 64-position sweep: 70 positions (the first 64 as before), in
     * one pass against passes of one */
    {
        struct prob q = p;
        q.n = 70;
        float *xx = make_x(q.n, cols, p.xs);
        memcpy(xx, x, sizeof(float) * (size_t)p.n * p.xs);
        q.x = xx;
        float *y1 = run(&q, isa, 1, 1, NULL, NT_ACT_NONE, 1), *y70 = run(&q, isa, 70, 1, NULL, NT_ACT_NONE, 1);
        CHECK(same_bits(y70, y1, &q, &first), "%s %lldx%lld: a pass of 70 differs from passes of 1 at %d", fname,
              (long long)rows, (long long)cols, first);
        CHECK(same_bits(y1, isa ? yv : ys, &p, &first), "%s %lldx%lld: passes of 1 over 70 positions differ at %d", fname,
              (long long)rows, (long long)cols, first);
        free(y1);
        free(y70);
        free(xx);
    }

    /* nt_cpu_matmul on 1 and 2 threads == the rows entry point; n = 64 and n = 1 */
    for (int v = 0; v <= isa; v = after(v, isa))
        for (int th = 1; th <= 2; th++) {
            float *yt = run(&p, v, 64, th, NULL, NT_ACT_NONE, 0);
            CHECK(same_bits(yt, v ? yv : ys, &p, &first), "%s %lldx%lld %s: nt_cpu_matmul %d threads differs at %d", fname,
                  (long long)rows, (long long)cols, nt_cpu_isa_name(v), th, first);
            free(yt);
            yt = run(&p, v, 1, th, NULL, NT_ACT_NONE, 0);
            CHECK(same_bits(yt, v ? yv : ys, &p, &first), "%s %lldx%lld %s: nt_cpu_matmul n=1 %d threads differs at %d", fname,
                  (long long)rows, (long long)cols, nt_cpu_isa_name(v), th, first);
            free(yt);
        }

    /* q8_2f with the streaming layout (stream_layout.c): the same bits at every pass size, on 1 and
     * 2 threads and through the rows entry point (whose split at an odd row makes some kernel calls
     * start off the layout's 6-row blocks, which then read the payload) */
    if (fmt == NT_DTYPE_Q8_2F) {
        size_t sb = nt_cpu_q8_stream_bytes(rows, cols);
        CHECK(sb == (size_t)(rows / NT_CPU_Q8_STREAM_ROWS) * (size_t)((cols + 31) / 32) * 32 * NT_CPU_Q8_STREAM_ROWS,
              "q8_2f %lldx%lld: streaming layout of %zu bytes", (long long)rows, (long long)cols, sb);
        uint8_t *S = sb ? malloc(sb) : NULL;
        if (S) {
            memset(S, 0xEE, sb);
            nt_cpu_q8_stream_fill(&p.W, S, 0, rows / NT_CPU_Q8_STREAM_ROWS);
            /* the layout itself: row 6k + i's column c at block k, column block c / 32, slot i */
            int64_t nb = (cols + 31) / 32, bad = 0;
            for (int64_t r = 0; r < rows / NT_CPU_Q8_STREAM_ROWS * NT_CPU_Q8_STREAM_ROWS; r++)
                for (int64_t c = 0; c < nb * 32; c++) {
                    uint8_t want = c < cols ? P[r * cols + c] : 0;
                    size_t at = ((size_t)(r / NT_CPU_Q8_STREAM_ROWS) * (size_t)nb + (size_t)(c / 32)) * 32 * NT_CPU_Q8_STREAM_ROWS +
                                32 * (size_t)(r % NT_CPU_Q8_STREAM_ROWS) + (size_t)(c % 32);
                    bad += S[at] != want;
                }
            CHECK(bad == 0, "q8_2f %lldx%lld: %lld bytes of the streaming layout misplaced", (long long)rows, (long long)cols,
                  (long long)bad);
            struct prob q = p;
            q.stream = S;
            for (int v = 0; v <= isa; v = after(v, isa))
                for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++)
                    for (int api = 0; api < 3; api++) { /* nt_cpu_matmul on 1 and 2 threads, the rows entry point */
                        float *yk = run(&q, v, passes[k], api == 2 ? 1 : api + 1, NULL, NT_ACT_NONE, api == 2);
                        CHECK(same_bits(yk, v ? yv : ys, &p, &first), "q8_2f %lldx%lld %s, streaming layout: pass %d (%s) differs at %d",
                              (long long)rows, (long long)cols, nt_cpu_isa_name(v), passes[k],
                              api == 2 ? "rows" : api ? "2 threads" : "1 thread", first);
                        free(yk);
                    }
            free(S);
        }
    }

    /* bias and relu^2: the f32 operations of matmul.c on the plain output */
    float *bias = malloc(sizeof(float) * (size_t)rows);
    for (int r = 0; r < rows; r++) bias[r] = range(-1, 1) * (float)fabs(y0[r]) * 2;
    for (int v = 0; v <= isa; v = after(v, isa))
        for (int act = 0; act < 2; act++)
            for (int pass = 1; pass <= 64; pass += 63) {
                float *yb = run(&p, v, pass, 2, bias, act ? NT_ACT_RELU2 : NT_ACT_NONE, 0);
                int bad = 0;
                const float *yp = v ? yv : ys;
                for (int t = 0; t < p.n; t++)
                    for (int r = 0; r < rows; r++) {
                        float e = yp[(size_t)t * p.ys + r] + bias[r];
                        if (act) {
                            e = e > 0 ? e : 0;
                            e = e * e;
                        }
                        bad += memcmp(&e, &yb[(size_t)t * p.ys + r], 4) != 0;
                    }
                CHECK(bad == 0, "%s %lldx%lld %s pass %d: %d outputs with bias%s differ", fname, (long long)rows,
                      (long long)cols, nt_cpu_isa_name(v), pass, bad, act ? " and relu2" : "");
                free(yb);
            }
    free(bias);
    free(ys);
    free(yv);
    free(x);
    free(P);
}

/* Zero activations (with random weights) and zero weights (with random activations) give exact
 * zeros, and no NaN from 127 / 0. */
static void test_zeros(int isa) {
    for (int f = 0; f < 2; f++) {
        enum nt_dtype fmt = f ? NT_DTYPE_Q4TP : NT_DTYPE_Q8_2F;
        int64_t rows = 5, cols = 64;
        uint8_t *P = f ? make_q4(rows, cols) : make_q8(rows, cols);
        float x[2 * 64];
        for (int i = 0; i < 128; i++) x[i] = i < 64 ? 0.0f : range(-1, 1);
        float y[2 * 5];
        void *qx = malloc(nt_cpu_qx_bytes(2, cols));
        struct nt_matrix W = {.dtype = fmt, .rows = rows, .cols = cols, .data = P};
        for (int zw = 0; zw < 2; zw++) {
            if (zw && f) memset(P, 0x88, (size_t)(rows * 2 * 16)); /* every nibble 8: weight 0 */
            if (zw && !f) memset(P, 0, (size_t)(rows * cols));
            for (int v = 0; v <= isa; v = after(v, isa)) {
                struct nt_mm m = {.W = &W, .x = x, .x_stride = 64, .y = y, .y_stride = 5, .n = 2, .qx = qx};
                nt_cpu_matmul(&m, v, 1);
                int bad = 0;
                for (int i = 0; i < 5; i++) bad += y[zw * 5 + i] != 0.0f; /* -0 allowed: rs may be negative */
                CHECK(bad == 0, "%s zero %s %s: %d outputs not 0", f ? "q4tp" : "q8_2f", zw ? "weights" : "x",
                      nt_cpu_isa_name(v), bad);
            }
        }
        free(qx);
        free(P);
    }
}

/* The documented layout: qx_bytes per position, record and d of a q8_2f and a q4tp block. */
static void test_layout(void) {
    CHECK(nt_cpu_qx_bytes(1, 32) == 128, "one block: %zu", nt_cpu_qx_bytes(1, 32));
    CHECK(nt_cpu_qx_bytes(3, 2688) == 3 * (size_t)((84 * 68 + 63) / 64 * 64), "2688 columns: %zu", nt_cpu_qx_bytes(3, 2688));
    CHECK(nt_cpu_qx_bytes(1, 36) == 192, "36 columns: %zu", nt_cpu_qx_bytes(1, 36));
    uint8_t *P = make_q8(1, 32), *P0 = P;
    for (int c = 0; c < 32; c++) put16(P + 32 + 2 + 2 * c, nt_f32_to_f16(1.0f));
    float x[32];
    for (int c = 0; c < 32; c++) x[c] = (float)(c + 1) * (c & 1 ? -1.0f : 1.0f); /* amax 32 */
    uint8_t qx[128];
    struct nt_matrix W = {.dtype = NT_DTYPE_Q8_2F, .rows = 1, .cols = 32, .data = P};
    struct nt_mm m = {.W = &W, .x = x, .x_stride = 32, .n = 1, .qx = qx};
    nt_cpu_quantize_x(&m, 0);
    int16_t s[32];
    memcpy(s, qx, 64);
    float d;
    memcpy(&d, qx + 64, 4);
    CHECK(d == 32.0f / 127.0f, "q8 d %.9g", d);
    /* slot 2 = column 4, slot 17 = column 4*0 + 2 + 1 = 3, slot 31 = column 31 */
    CHECK(s[2] == (int16_t)rintf(5.0f * (127.0f / 32.0f)), "q8 slot 2 = %d", s[2]);
    CHECK(s[17] == (int16_t)rintf(-4.0f * (127.0f / 32.0f)), "q8 slot 17 = %d", s[17]);
    CHECK(s[31] == -127, "q8 slot 31 = %d", s[31]);
    P = make_q4(1, 32);
    W.dtype = NT_DTYPE_Q4TP;
    W.data = P;
    nt_cpu_quantize_x(&m, 0);
    int8_t q[32];
    int32_t corr[8];
    memcpy(q, qx, 32);
    memcpy(corr, qx + 32, 32);
    CHECK(q[1] == (int8_t)rintf(3.0f * (127.0f / 32.0f)), "q4 byte 1 (column 2) = %d", q[1]);
    CHECK(q[16] == (int8_t)rintf(-2.0f * (127.0f / 32.0f)), "q4 byte 16 (column 1) = %d", q[16]);
    CHECK(corr[5] == 8 * (q[20] + q[21] + q[22] + q[23]) - 0x4B400000, "q4 corr[5] = %d", corr[5]);
    /* the VNNI variants' records (where the processor runs one): q4tp's q as above and the start
     * value 0x4B400000 - 8 * sum; q8_2f's q int8 in column order and 0x4B400000 - 128 * sum */
    for (int v = NT_CPU_AVXVNNI; v < NT_CPU_ISA_COUNT; v++) {
        if (!nt_cpu_isa_available(v)) continue;
        int8_t qv[32];
        int32_t start[8];
        nt_cpu_quantize_x(&m, v);
        memcpy(qv, qx, 32);
        memcpy(start, qx + 32, 32);
        CHECK(!memcmp(qv, q, 32) && start[5] == 0x4B400000 - 8 * (q[20] + q[21] + q[22] + q[23]),
              "%s q4 record: start[5] = %d", nt_cpu_isa_name(v), start[5]);
        W.dtype = NT_DTYPE_Q8_2F;
        W.data = P0;
        nt_cpu_quantize_x(&m, v);
        memcpy(qv, qx, 32);
        memcpy(start, qx + 32, 32);
        CHECK(qv[4] == (int8_t)rintf(5.0f * (127.0f / 32.0f)) && qv[3] == (int8_t)rintf(-4.0f * (127.0f / 32.0f)) &&
              qv[31] == -127, "%s q8 record: q[3] %d q[4] %d q[31] %d", nt_cpu_isa_name(v), qv[3], qv[4], qv[31]);
        CHECK(start[1] == 0x4B400000 - 128 * (qv[4] + qv[5] + qv[6] + qv[7]), "%s q8 start[1] = %d", nt_cpu_isa_name(v), start[1]);
        W.dtype = NT_DTYPE_Q4TP;
        W.data = P;
    }
    /* an all-zero block, and one so small that 127 / amax overflows: q = 0 (q4tp: corr = 0, so
     * the stored corr is -0x4B400000, the offset matmul_q.c folds into it), d = amax / 127, in
     * every variant and both formats (VNNI: q = 0 and every start value 0x4B400000) */
    uint8_t *P8 = make_q8(1, 32);
    for (int c = 0; c < 32; c++) put16(P8 + 32 + 2 + 2 * c, nt_f32_to_f16(1.0f)); /* cs = 1 */
    for (int f = 0; f < 2; f++)
        for (int tiny = 0; tiny < 2; tiny++)
            for (int v = 0; v < NT_CPU_ISA_COUNT; v++) {
                if (!nt_cpu_isa_available(v)) continue;
                int vnni = v >= NT_CPU_AVXVNNI;
                W.dtype = f ? NT_DTYPE_Q4TP : NT_DTYPE_Q8_2F;
                W.data = f ? P : P8;
                for (int c = 0; c < 32; c++) x[c] = tiny ? 1e-38f * (c & 1 ? -1.0f : 1.0f) : 0.0f;
                memset(qx, 0x77, sizeof qx);
                nt_cpu_quantize_x(&m, v);
                int bad = 0;
                for (int i = 0; i < (f || vnni ? 32 : 64); i++) bad += qx[i] != 0;
                if (f || vnni) {
                    memcpy(corr, qx + 32, 32);
                    for (int l = 0; l < 8; l++) bad += corr[l] != (vnni ? 0x4B400000 : -0x4B400000);
                }
                memcpy(&d, qx + 64, 4);
                CHECK(bad == 0 && d == (tiny ? 1e-38f / 127.0f : 0.0f), "%s %s block %s: %d bad values, d %g",
                      f ? "q4tp" : "q8_2f", tiny ? "tiny" : "zero", nt_cpu_isa_name(v), bad, d);
            }
    free(P8);
    free(P);
    free(P0);
}

/* AMX (where the processor and OS run it): passes of 16 or more positions are quantized into the
 * AMX layout (matmul_q.c): per group of 16 positions and block, lane l's 4 q bytes of each slot
 * at 64 l + 4 slot and the slots' d at 512 + 4 slot, the q bytes those of the VNNI record; empty
 * slots of the last group hold q = 0 and d = 0. Checked against the VNNI records of the same
 * positions, quantized one at a time. */
static void test_amx_layout(void) {
    if (!nt_cpu_isa_available(NT_CPU_AMX)) return;
    for (int f = 0; f < 2; f++) {
        int64_t cols = f ? 96 : 100, nb = (cols + 31) / 32; /* q8_2f: a short last block */
        int n = 19;
        uint8_t *P = f ? make_q4(1, cols) : make_q8(1, cols);
        struct nt_matrix W = {.dtype = f ? NT_DTYPE_Q4TP : NT_DTYPE_Q8_2F, .rows = 1, .cols = cols, .data = P};
        float *x = make_x(n, cols, (int)cols);
        uint8_t *qa = malloc(nt_cpu_qx_bytes(n, cols)), *qv = malloc(nt_cpu_qx_bytes(1, cols));
        memset(qa, 0x77, nt_cpu_qx_bytes(n, cols));
        struct nt_mm m = {.W = &W, .x = x, .x_stride = (int)cols, .n = n, .qx = qa};
        nt_cpu_quantize_x(&m, NT_CPU_AMX);
        int bad = 0;
        for (int t = 0; t < 32; t++)
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *unit = qa + ((size_t)(t / 16) * (size_t)nb + (size_t)b) * 576;
                uint8_t want[36] = {0}; /* an empty slot: q = 0, d = 0 */
                if (t < n) {
                    struct nt_mm one = {.W = &W, .x = x + (size_t)t * cols, .x_stride = (int)cols, .n = 1, .qx = qv};
                    nt_cpu_quantize_x(&one, NT_CPU_AVX512VNNI);
                    memcpy(want, qv + 64 * b, 32);
                    memcpy(want + 32, qv + 64 * nb + 4 * b, 4);
                }
                for (int l = 0; l < 8; l++) bad += memcmp(unit + 64 * l + 4 * (t % 16), want + 4 * l, 4) != 0;
                bad += memcmp(unit + 512 + 4 * (t % 16), want + 32, 4) != 0;
            }
        CHECK(bad == 0, "%s AMX layout: %d lanes or d differ from the VNNI records", f ? "q4tp" : "q8_2f", bad);
        free(qa);
        free(qv);
        free(x);
        free(P);
    }
}

/* Every shape against variant isa. */
static void test_variant(int isa) {
    static const int64_t q8_shapes[][2] = {{1, 32}, {3, 64}, {7, 36}, {13, 100}, {2, 4}, {25, 2688}, {37, 1856},
                                           {16, 3712}, {1, 2688}, {64, 4096}, {33, 1828}};
    static const int64_t q4_shapes[][2] = {{1, 32}, {3, 64}, {7, 96}, {13, 2688}, {25, 1856}, {37, 3712},
                                           {11, 288}, {1, 1856}, {64, 2688}};
    for (size_t i = 0; i < sizeof q8_shapes / sizeof q8_shapes[0]; i++)
        test_shape(NT_DTYPE_Q8_2F, q8_shapes[i][0], q8_shapes[i][1], isa);
    for (size_t i = 0; i < sizeof q4_shapes / sizeof q4_shapes[0]; i++)
        test_shape(NT_DTYPE_Q4TP, q4_shapes[i][0], q4_shapes[i][1], isa);
}

int main(void) {
    test_layout();
    test_amx_layout();
    int tested = 0;
    for (int isa = NT_CPU_AVX2; isa < NT_CPU_ISA_COUNT; isa++) {
        if (!nt_cpu_isa_available(isa)) {
            printf("test_matmul_q: %s skipped: this processor lacks its instructions\n", nt_cpu_isa_name(isa));
            continue;
        }
        test_zeros(isa);
        test_variant(isa);
        tested++;
    }
    if (!tested) { /* the scalar reference alone, against the double reference */
        test_zeros(NT_CPU_SCALAR);
        test_variant(NT_CPU_SCALAR);
    }
    return test_summary("matmul_q");
}

