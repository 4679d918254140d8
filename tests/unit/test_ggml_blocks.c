/* test_ggml_blocks.c - llama.cpp's block types as engine dtypes (src/quant/ggml_blocks.h) and
 * their CPU products (src/cpu/matmul_ggml.c).
 *
 *  - the type map and block facts, against the GGUF reader's own table (src/model/gguf.c);
 *  - the decoders, per type, on random blocks (every code bit pattern; scales random, 0, -0, f16
 *    subnormals, the largest f16, Inf and NaN; MXFP4 exponents 0, 1, 2, 127, 254, 255), bit for
 *    bit against a second implementation written here from the published layouts: every field
 *    read bit by bit from its bit offset, f16 widened by ldexp, E2M1 from its sign / exponent /
 *    mantissa fields, and each of llama.cpp's f32 operations done in double and rounded to f32
 *    (exact for one +, -, *: 53 >= 2 * 24 + 2). NaN is compared as "both NaN";
 *  - the real GGUF file (../shared/data/gguf/kjv-Q4_K_M.gguf or $NT_GGUF_FILE; said and skipped
 *    when absent): every Q4_K, Q5_K, Q6_K, Q8_0 tensor decoded by both, bit for bit, and its
 *    products (3 positions) checked as the random ones below;
 *  - the products, per type: the scalar reference against (a) the double-precision product of
 *    the decoded weights with the int8-quantized activations, within the f32 rounding bound of
 *    the arithmetic's float chain, and (b) the product with the unquantized activations, within
 *    that plus the int8 rounding bound; every SIMD variant this processor has, passes of 1..70
 *    positions (all 70 sizes in the full tier, 1 - 9 and every 7th in the fast one) and
 *    nt_cpu_matmul on 1 and 2 threads bit-identical to the scalar reference (a
 *    variant the processor lacks is said on stdout); bias and relu^2; nothing outside y's rows
 *    written;
 *  - the CPU backend's embed (rows decoded exactly) and matmul operations on such matrices;
 *  - the demo model (MoE experts included) run with its matrices in Q8_0 / Q5_0 / Q4_0 / IQ4_NL
 *    against the same values in F32, and nemotron_model_token_embedding on its table.
 */
#include "backend.h"
#include "cpu/cpu.h"
#include "engine/engine.h"
#include "nemotron.h"
#include "model/gguf.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

static const enum nt_dtype all_types[] = {
    NT_DTYPE_GGML_Q8_0, NT_DTYPE_GGML_Q4_0, NT_DTYPE_GGML_Q4_1, NT_DTYPE_GGML_Q5_0,  NT_DTYPE_GGML_Q5_1,
    NT_DTYPE_GGML_IQ4_NL, NT_DTYPE_GGML_MXFP4, NT_DTYPE_GGML_Q4_K, NT_DTYPE_GGML_Q5_K, NT_DTYPE_GGML_Q6_K,
};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))

static int block_elems(enum nt_dtype d) {
    int e = 0;
    nt_ggml_block_facts(d, &e, NULL, NULL);
    return e;
}
static int block_bytes(enum nt_dtype d) {
    int b = 0;
    nt_ggml_block_facts(d, NULL, &b, NULL);
    return b;
}

/* ---- the second implementation: fields by bit offset, f32 operations through double ------- */

static unsigned bits_at(const uint8_t *p, int bit, int n) {
    unsigned v = 0;
    for (int i = 0; i < n; i++) v |= (unsigned)((p[(bit + i) / 8] >> ((bit + i) % 8)) & 1) << i;
    return v;
}
static float half_at(const uint8_t *p, int byte) {
    unsigned h = bits_at(p, 8 * byte, 16);
    unsigned sign = h >> 15, ex = (h >> 10) & 31, man = h & 1023;
    double v;
    if (ex == 31)
        v = man ? NAN : INFINITY;
    else if (ex == 0)
        v = ldexp((double)man, -24);
    else
        v = ldexp((double)(1024 + man), (int)ex - 25);
    return (float)(sign ? -v : v);
}
static float mul32(float a, float b) { return (float)((double)a * (double)b); }
static float add32(float a, float b) { return (float)((double)a + (double)b); }
static float sub32(float a, float b) { return (float)((double)a - (double)b); }

/* The 4-bit code of element e (0..31) of a 32-element block whose nibbles start at byte qs. */
static unsigned nib32(const uint8_t *p, int qs, int e) { return bits_at(p, 8 * (qs + e % 16) + 4 * (e / 16), 4); }

/* E2M1 (sign, 2-bit exponent, 1-bit mantissa) times 2, an integer. */
static int e2m1_doubled(unsigned n) {
    unsigned ex = (n >> 1) & 3, man = n & 1;
    int v = ex == 0 ? (int)man : (int)(2 + man) << (ex - 1);
    return n & 8 ? -v : v;
}

static void k_scale_min_ref(const uint8_t *p, int j, unsigned *S, unsigned *M) {
    int sc = 8 * 4; /* the 12 scale bytes start at byte 4 */
    if (j < 4) {
        *S = bits_at(p, sc + 8 * j, 6);
        *M = bits_at(p, sc + 8 * (j + 4), 6);
    } else {
        *S = bits_at(p, sc + 8 * (j + 4), 4) | bits_at(p, sc + 8 * (j - 4) + 6, 2) << 4;
        *M = bits_at(p, sc + 8 * (j + 4) + 4, 4) | bits_at(p, sc + 8 * j + 6, 2) << 4;
    }
}

/* Element e of one block at p, as llama.cpp's dequantizer computes it. */
static float ref_value(enum nt_dtype d, const uint8_t *p, int e) {
    static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    switch (d) {
    case NT_DTYPE_GGML_Q8_0: return mul32((float)(int8_t)bits_at(p, 16 + 8 * e, 8), half_at(p, 0));
    case NT_DTYPE_GGML_Q4_0: return mul32((float)((int)nib32(p, 2, e) - 8), half_at(p, 0));
    case NT_DTYPE_GGML_Q4_1: return add32(mul32((float)nib32(p, 4, e), half_at(p, 0)), half_at(p, 2));
    case NT_DTYPE_GGML_Q5_0: {
        int n = (int)(nib32(p, 6, e) | bits_at(p, 16 + e, 1) << 4);
        return mul32((float)(n - 16), half_at(p, 0));
    }
    case NT_DTYPE_GGML_Q5_1: {
        int n = (int)(nib32(p, 8, e) | bits_at(p, 32 + e, 1) << 4);
        return add32(mul32((float)n, half_at(p, 0)), half_at(p, 2));
    }
    case NT_DTYPE_GGML_IQ4_NL: return mul32(half_at(p, 0), (float)iq4nl[nib32(p, 2, e)]);
    case NT_DTYPE_GGML_MXFP4: {
        float s = (float)ldexp(1.0, (int)bits_at(p, 0, 8) - 128);
        return mul32((float)e2m1_doubled(nib32(p, 1, e)), s);
    }
    case NT_DTYPE_GGML_Q4_K:
    case NT_DTYPE_GGML_Q5_K: {
        int j = e / 32, l = e % 32, q5 = d == NT_DTYPE_GGML_Q5_K;
        unsigned S, M;
        k_scale_min_ref(p, j, &S, &M);
        unsigned n = bits_at(p, 8 * ((q5 ? 48 : 16) + 32 * (j / 2) + l) + 4 * (j % 2), 4);
        if (q5) n |= bits_at(p, 8 * (16 + l) + j, 1) << 4;
        float d1 = mul32(half_at(p, 0), (float)S), m1 = mul32(half_at(p, 2), (float)M);
        return sub32(mul32(d1, (float)n), m1);
    }
    default: { /* Q6_K */
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        unsigned lo = bits_at(p, 8 * (64 * h + l + 32 * (k & 1)) + 4 * (k / 2), 4);
        unsigned hi = bits_at(p, 8 * (128 + 32 * h + l) + 2 * k, 2);
        int sc = (int8_t)bits_at(p, 8 * (192 + e / 16), 8);
        return mul32(mul32(half_at(p, 208), (float)sc), (float)((int)(lo | hi << 4) - 32));
    }
    }
}

static int same_value(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* ---- the type map ---------------------------------------------------------------------------- */

static void test_type_map(void) {
    for (int i = 0; i < N_TYPES; i++) {
        enum nt_dtype d = all_types[i], back = NT_DTYPE_F32;
        int elems, bytes;
        uint32_t id;
        CHECK(nt_dtype_is_ggml_block(d) && nt_ggml_block_facts(d, &elems, &bytes, &id), "%s has facts", nt_dtype_name(d));
        CHECK(nt_dtype_of_ggml_type(id, &back) && back == d, "%s: ggml type %u maps back", nt_dtype_name(d), id);
        uint32_t re = 0, rb = 0;
        const char *rname = nt_ggml_type_name(id);
        CHECK(nt_ggml_type_block(id, &re, &rb) && re == (uint32_t)elems && rb == (uint32_t)bytes,
              "%s: block %d elements %d bytes, the reader says %u %u", nt_dtype_name(d), elems, bytes, re, rb);
        CHECK(rname && !strcmp(rname, nt_dtype_name(d)), "%s: the reader names it %s", nt_dtype_name(d), rname ? rname : "?");
        CHECK(nt_matrix_bytes(d, 3, 2 * elems) == (uint64_t)(6 * bytes), "%s: 3 rows of 2 blocks", nt_dtype_name(d));
        const char *why = NULL;
        CHECK(!nt_format_accepts(d, 2, elems + (elems == 32 ? 16 : 32), &why) && why && strstr(why, nt_dtype_name(d)),
              "%s: a row that is not whole blocks refused: %s", nt_dtype_name(d), why ? why : "(accepted)");
    }
    static const struct {
        uint32_t id;
        enum nt_dtype d;
    } plain[] = {{NT_GGML_F32, NT_DTYPE_F32}, {NT_GGML_F16, NT_DTYPE_F16}, {NT_GGML_BF16, NT_DTYPE_BF16}};
    for (int i = 0; i < 3; i++) {
        enum nt_dtype d = NT_DTYPE_U8;
        CHECK(nt_dtype_of_ggml_type(plain[i].id, &d) && d == plain[i].d, "ggml %u is %s", plain[i].id,
              nt_dtype_name(plain[i].d));
        CHECK(!nt_dtype_is_ggml_block(plain[i].d), "%s is not a block type", nt_dtype_name(plain[i].d));
    }
    static const uint32_t refused[] = {NT_GGML_Q8_1, NT_GGML_Q2_K, NT_GGML_Q3_K, NT_GGML_Q8_K, NT_GGML_IQ4_XS,
                                       NT_GGML_IQ2_XXS, NT_GGML_I8, NT_GGML_F64, NT_GGML_TQ1_0, 4, 5, 40, 1000};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        enum nt_dtype d = NT_DTYPE_U8;
        CHECK(!nt_dtype_of_ggml_type(refused[i], &d) && d == NT_DTYPE_U8, "ggml type %u not run natively", refused[i]);
    }
    CHECK(!nt_dtype_is_ggml_block(NT_DTYPE_Q4TP) && !nt_ggml_block_facts(NT_DTYPE_Q8_2F, NULL, NULL, NULL),
          "the engine's own formats are not ggml blocks");
}

/* ---- decoders -------------------------------------------------------------------------------- */

/* f16 scale fields to try: ordinary values and the extremes. */
static uint16_t pick_f16(void) {
    static const uint16_t extreme[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01};
    if (next_u64() % 3) return nt_f32_to_f16((float)((uniform() * 2 - 1) * ldexp(1.0, (int)(next_u64() % 24) - 16)));
    return extreme[next_u64() % (sizeof extreme / sizeof extreme[0])];
}

/* Random codes with scale fields from pick_f16 (MXFP4: exponents, extremes included). */
static void random_block(enum nt_dtype d, uint8_t *p, int extremes) {
    int nb = block_bytes(d);
    for (int i = 0; i < nb; i++) p[i] = (uint8_t)next_u64();
    uint16_t a = extremes ? pick_f16() : nt_f32_to_f16((float)((uniform() + 0.5) / 256));
    uint16_t b = extremes ? pick_f16() : nt_f32_to_f16((float)((uniform() * 2 - 1) / 64));
    switch (d) {
    case NT_DTYPE_GGML_MXFP4: {
        static const uint8_t ex[] = {0, 1, 2, 127, 254, 255};
        p[0] = extremes ? (next_u64() % 2 ? ex[next_u64() % 6] : (uint8_t)next_u64()) : (uint8_t)(118 + next_u64() % 10);
        break;
    }
    case NT_DTYPE_GGML_Q6_K: memcpy(p + 208, &a, 2); break;
    case NT_DTYPE_GGML_Q4_1:
    case NT_DTYPE_GGML_Q5_1:
    case NT_DTYPE_GGML_Q4_K:
    case NT_DTYPE_GGML_Q5_K:
        memcpy(p, &a, 2);
        memcpy(p + 2, &b, 2);
        break;
    default: memcpy(p, &a, 2);
    }
}

static void test_decoders(void) {
    int full = test_full_tier();
    for (int i = 0; i < N_TYPES; i++) {
        enum nt_dtype d = all_types[i];
        int ne = block_elems(d), nbytes = block_bytes(d), nblk = full ? 4000 : 400;
        uint8_t *blocks = malloc((size_t)nblk * nbytes);
        float *out = malloc(sizeof(float) * (size_t)nblk * ne);
        for (int b = 0; b < nblk; b++) random_block(d, blocks + (size_t)b * nbytes, 1);
        nt_ggml_dequant_blocks(d, blocks, nblk, out);
        int bad = 0, first = -1, nonfinite = 0;
        for (int b = 0; b < nblk; b++)
            for (int e = 0; e < ne; e++) {
                float want = ref_value(d, blocks + (size_t)b * nbytes, e), got = out[(size_t)b * ne + e];
                if (!isfinite(want)) nonfinite++;
                if (!same_value(got, want)) {
                    if (first < 0) first = b * ne + e;
                    bad++;
                }
            }
        CHECK(bad == 0, "%s: %d of %d values differ from the layout's, first at %d (%g vs %g)", nt_dtype_name(d), bad,
              nblk * ne, first, first >= 0 ? out[first] : 0.0,
              first >= 0 ? ref_value(d, blocks + (size_t)(first / ne) * nbytes, first % ne) : 0.0);
        /* the extremes were really visited: Inf / NaN scales give non-finite weights (MXFP4's
         * largest scale, 2^127, times 12 overflows too) */
        CHECK(nonfinite > 0, "%s: no non-finite value met", nt_dtype_name(d));
        /* a row read through nt_matrix_dequant_row is the same */
        float *row = malloc(sizeof(float) * (size_t)2 * ne);
        nt_matrix_dequant_row(d, blocks, nblk / 2, 2 * ne, 1, row);
        CHECK(!memcmp(row, out + 2 * ne, sizeof(float) * (size_t)2 * ne) || bad, "%s: row 1 of 2-block rows", nt_dtype_name(d));
        free(row);
        free(out);
        free(blocks);
    }
}

/* ---- the real file ------------------------------------------------------------------------ */

static void check_real_products(const char *name, enum nt_dtype d, const void *data, int64_t rows, int64_t cols);

static void test_real_file(void) {
    const char *path = getenv("NT_GGUF_FILE");
    if (!path) path = "../shared/data/gguf/kjv-Q4_K_M.gguf";
    if (access(path, R_OK) != 0) {
        printf("test_ggml_blocks: %s not found: the real-file checks did not run\n", path);
        return;
    }
    struct nt_gguf *g = NULL;
    struct nt_err err;
    CHECK(nt_gguf_open(path, &g, &err) == NEMOTRON_OK, "%s", err.msg);
    if (!g) return;
    int seen[N_TYPES] = {0};
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct nt_gguf_tensor *t = &g->tensors[i];
        enum nt_dtype d;
        if (!nt_dtype_of_ggml_type(t->type, &d) || !nt_dtype_is_ggml_block(d)) continue;
        int ne = block_elems(d), nbytes = block_bytes(d);
        int64_t nblk = (int64_t)(t->n_elements / (uint64_t)ne);
        float *out = malloc(sizeof(float) * (size_t)t->n_elements);
        nt_ggml_dequant_blocks(d, t->data, nblk, out);
        int64_t bad = 0, nonfinite = 0;
        for (int64_t b = 0; b < nblk; b++)
            for (int e = 0; e < ne; e++) {
                float got = out[b * ne + e];
                bad += !same_value(got, ref_value(d, (const uint8_t *)t->data + b * nbytes, e));
                nonfinite += !isfinite(got);
            }
        CHECK(bad == 0 && nonfinite == 0, "%s (%s): %lld values differ, %lld not finite", t->name, nt_dtype_name(d),
              (long long)bad, (long long)nonfinite);
        for (int k = 0; k < N_TYPES; k++) seen[k] += all_types[k] == d;
        free(out);
        /* the products on the file's own weights (a 3-D expert tensor as its stacked rows) */
        check_real_products(t->name, d, t->data, (int64_t)(t->n_elements / (uint64_t)t->ne[0]), t->ne[0]);
    }
    /* the file's types (gguf-info): Q4_K, Q5_K, Q6_K, Q8_0 */
    CHECK(seen[0] && seen[7] && seen[8] && seen[9], "Q8_0 %d, Q4_K %d, Q5_K %d, Q6_K %d tensors", seen[0], seen[7],
          seen[8], seen[9]);
    nt_gguf_close(g);
}

/* ---- products ------------------------------------------------------------------------------ */

struct prob {
    struct nt_matrix W;
    float *x;
    int n, ys;
};

static void make_prob(struct prob *p, enum nt_dtype d, int rows, int cols, int n) {
    int ne = block_elems(d), nbytes = block_bytes(d);
    int64_t nblk = (int64_t)rows * cols / ne;
    uint8_t *w = malloc((size_t)nblk * nbytes); /* exactly the payload: a read past it trips ASan */
    for (int64_t b = 0; b < nblk; b++) random_block(d, w + b * nbytes, 0);
    p->W = (struct nt_matrix){.dtype = d, .rows = rows, .cols = cols, .data = w, .name = "test.W"};
    p->n = n;
    p->ys = rows + 3;
    p->x = malloc(sizeof(float) * (size_t)n * cols);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < cols; c++) {
            /* blocks of different magnitudes, and an all-zero one (amax = 0) */
            int blk = c / 32;
            double mag = blk % 5 == 3 ? 0.0 : ldexp(1.0, (blk * 7 + t) % 9 - 4);
            p->x[(size_t)t * cols + c] = (float)((uniform() * 2 - 1) * mag);
        }
}

static float *run(const struct prob *p, int isa, int pass, int threads, const float *bias, enum nt_act act) {
    int rows = (int)p->W.rows, cols = (int)p->W.cols;
    float *y = malloc(sizeof(float) * (size_t)p->n * p->ys);
    for (int i = 0; i < p->n * p->ys; i++) y[i] = 12345.0f;
    void *qx = malloc(nt_cpu_qx_bytes(pass, cols));
    for (int t0 = 0; t0 < p->n; t0 += pass) {
        int k = p->n - t0 < pass ? p->n - t0 : pass;
        struct nt_mm m = {.W = &p->W, .bias = bias, .act = act, .x = p->x + (size_t)t0 * cols, .x_stride = cols,
                          .y = y + (size_t)t0 * p->ys, .y_stride = p->ys, .n = k, .qx = qx};
        if (threads == 0) { /* the rows entry point, in two ranges split at an odd row */
            nt_cpu_quantize_x(&m, isa);
            int mid = rows / 2 | 1;
            nt_cpu_matmul_rows(&m, isa, 0, mid);
            nt_cpu_matmul_rows(&m, isa, mid, rows);
        } else {
            nt_cpu_matmul(&m, isa, threads);
        }
    }
    free(qx);
    return y;
}

static int first_diff(const float *a, const float *b, const struct prob *p) {
    for (int i = 0; i < p->n * p->ys; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) return i;
    return -1;
}

/* Step 1 of the arithmetic, written again from matmul_q.c's text. */
static void quantize_block(const float *x, int8_t *q, float *d) {
    float amax = 0.0f;
    for (int c = 0; c < 32; c++) amax = fmaxf(amax, fabsf(x[c]));
    *d = amax / 127.0f;
    float inv = 127.0f / amax;
    if (!(inv < INFINITY)) inv = 0.0f;
    for (int c = 0; c < 32; c++) q[c] = (int8_t)fminf(fmaxf(rintf(x[c] * inv), -127.0f), 127.0f);
}

static void check_accuracy(const struct prob *p, const float *y) {
    int rows = (int)p->W.rows, cols = (int)p->W.cols, nb = cols / 32;
    const char *tn = nt_dtype_name(p->W.dtype);
    float *w = malloc(sizeof(float) * (size_t)cols);
    int8_t *q = malloc((size_t)cols);
    float *dx = malloc(sizeof(float) * (size_t)nb);
    double worst_a = 0, worst_b = 0;
    for (int t = 0; t < p->n; t++) {
        const float *x = p->x + (size_t)t * cols;
        for (int b = 0; b < nb; b++) quantize_block(x + 32 * b, q + 32 * b, &dx[b]);
        for (int r = 0; r < rows; r++) {
            nt_matrix_dequant_row(p->W.dtype, p->W.data, rows, cols, r, w);
            double yq = 0, yx = 0, mag = 0, xerr = 0;
            for (int b = 0; b < nb; b++) {
                struct nt_ggml_sub s;
                nt_ggml_sub_block(p->W.dtype, (const uint8_t *)p->W.data + (size_t)r * nt_matrix_bytes(p->W.dtype, 1, cols),
                                  b, &s);
                for (int c = 32 * b; c < 32 * b + 32; c++) {
                    double xq = (double)q[c] * dx[b];
                    yq += (double)w[c] * xq;
                    yx += (double)w[c] * x[c];
                    /* the sizes the float chain's roundings scale with: each block's term and
                     * minimum term, not their possibly cancelling sum */
                    mag += (fabs((double)s.d * s.k[(c % 32) / 16] * s.q[c % 32]) + fabs((double)s.m * s.mk)) * fabs(xq);
                    xerr += fabs((double)w[c]) * dx[b] / 2; /* rint's half step */
                }
            }
            /* Tolerance (a): the kernel rounds dw * d_b (one ulp, 2^-24 relative, per term), and
             * each fmaf rounds the running sum (at most 2 per block: 2 nb roundings of at most
             * 2^-24 of a partial sum bounded by mag); the decoded weights used here carry up to 3
             * f32 roundings each (d * k, times q, plus the minimum term). So, to first order
             * (enough at these sizes), |y - yq| <= (2 nb + 4) * 2^-24 * mag; one more 2^-24
             * for the final lane tree (three additions, each within the same bound). */
            double tol_a = (2.0 * nb + 5) * ldexp(1.0, -24) * mag + 1e-30;
            /* (b): the activations' int8 rounding on top: |x - q d| <= d / 2 per column */
            double tol_b = tol_a + xerr + ldexp(1.0, -24) * mag;
            double got = y[(size_t)t * p->ys + r];
            worst_a = fmax(worst_a, fabs(got - yq) / tol_a);
            worst_b = fmax(worst_b, fabs(got - yx) / tol_b);
        }
    }
    CHECK(worst_a <= 1.0, "%s %dx%d: against the quantized-activation product, %.3g of the f32 chain bound", tn, rows, cols,
          worst_a);
    CHECK(worst_b <= 1.0, "%s %dx%d: against the unquantized product, %.3g of the int8 rounding bound", tn, rows, cols,
          worst_b);
    free(w);
    free(q);
    free(dx);
}

/* A real tensor: 3 positions on every variant the processor has against the scalar reference,
 * and the reference's accuracy (check_accuracy's bounds). */
static void check_real_products(const char *name, enum nt_dtype d, const void *data, int64_t rows, int64_t cols) {
    struct prob p = {.W = {.dtype = d, .rows = rows, .cols = cols, .data = data, .name = name}, .n = 3, .ys = (int)rows};
    p.x = malloc(sizeof(float) * (size_t)p.n * (size_t)cols);
    for (int64_t i = 0; i < p.n * cols; i++) p.x[i] = (float)(uniform() * 2 - 1);
    float *ys = run(&p, NT_CPU_SCALAR, p.n, 1, NULL, NT_ACT_NONE);
    check_accuracy(&p, ys);
    for (int isa = NT_CPU_AVX2; isa < NT_CPU_ISA_COUNT; isa++) {
        if (!nt_cpu_isa_available(isa)) continue;
        float *y = run(&p, isa, p.n, 2, NULL, NT_ACT_NONE);
        int at = first_diff(y, ys, &p);
        CHECK(at < 0, "%s (%s): %s differs from the scalar reference at %d", name, nt_dtype_name(d), nt_cpu_isa_name(isa), at);
        free(y);
    }
    free(ys);
    free(p.x);
}

static void test_products(enum nt_dtype d) {
    const char *tn = nt_dtype_name(d);
    int cols = block_elems(d) == 256 ? 512 : 96, rows = 13, n = 70;
    struct prob p;
    make_prob(&p, d, rows, cols, n);
    float *ys = run(&p, NT_CPU_SCALAR, 70, 1, NULL, NT_ACT_NONE);
    check_accuracy(&p, ys);
    int written = 1;
    for (int t = 0; t < n; t++)
        for (int r = rows; r < p.ys; r++) written &= ys[(size_t)t * p.ys + r] == 12345.0f;
    CHECK(written, "%s: nothing past a y row's %d values written", tn, rows);
    /* every variant, pass size and thread count: the scalar reference's bits */
    /* AMX included: its passes of 16 or more positions must still give these types the VNNI
     * records their kernels read (matmul_q.c's amx_layout) */
    static const int isas[] = {NT_CPU_SCALAR,     NT_CPU_AVX2,       NT_CPU_AVXVNNI,
                               NT_CPU_AVX512VNNI, NT_CPU_AVX512BF16, NT_CPU_AMX};
    for (int v = 0; v < (int)(sizeof isas / sizeof isas[0]); v++) {
        int isa = isas[v];
        if (!nt_cpu_isa_available(isa)) {
            if (d == all_types[0]) printf("test_ggml_blocks: this processor lacks %s: its variant was not checked\n", nt_cpu_isa_name(isa));
            continue;
        }
        int bad_pass = 0, at = -1;
        /* every pass size in the full tier; 1 - 9 and every 7th after in the fast one */
        for (int pass = 1; pass <= 70 && bad_pass == 0; pass += (pass < 10 || test_full_tier() ? 1 : 7)) {
            float *y = run(&p, isa, pass, 1, NULL, NT_ACT_NONE);
            at = first_diff(y, ys, &p);
            if (at >= 0) bad_pass = pass;
            free(y);
        }
        CHECK(bad_pass == 0, "%s %s: a pass of %d differs from the scalar reference at %d", tn, nt_cpu_isa_name(isa),
              bad_pass, at);
        for (int th = 0; th <= 2; th++) {
            float *y = run(&p, isa, 70, th, NULL, NT_ACT_NONE);
            at = first_diff(y, ys, &p);
            CHECK(at < 0, "%s %s: %s differs at %d", tn, nt_cpu_isa_name(isa), th ? (th == 1 ? "1 thread" : "2 threads") : "rows API", at);
            free(y);
        }
    }
    /* bias and relu^2: the f32 operations on the plain output */
    float *bias = malloc(sizeof(float) * rows);
    for (int r = 0; r < rows; r++) bias[r] = (float)(uniform() - 0.5);
    float *yb = run(&p, nt_cpu_isa_best(), 9, 2, bias, NT_ACT_RELU2);
    int bad = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            float v = ys[(size_t)t * p.ys + r] + bias[r];
            v = v > 0.0f ? v : 0.0f;
            v = v * v;
            bad += memcmp(&v, &yb[(size_t)t * p.ys + r], 4) != 0;
        }
    CHECK(bad == 0, "%s: bias + relu2 differ in %d outputs", tn, bad);
    free(yb);
    free(bias);
    free(ys);
    free((void *)p.W.data);
    free(p.x);
}

/* The CPU backend's operations on such matrices: embed decodes rows exactly (the shared file's
 * token embeddings are Q4_K), matmul runs the product of the backend's variant. */
static void test_backend_ops(void) {
    struct nt_backend *be = nt_cpu_backend_new(2);
    CHECK(be != NULL, "CPU backend");
    if (!be) return;
    for (int i = 0; i < N_TYPES; i++) {
        enum nt_dtype d = all_types[i];
        int cols = block_elems(d) == 256 ? 256 : 64, rows = 7, n = 5;
        struct prob p;
        make_prob(&p, d, rows, cols, n);
        int32_t tokens[5] = {3, 0, 6, 3, 1};
        float *h = malloc(sizeof(float) * (size_t)n * cols), *want = malloc(sizeof(float) * (size_t)cols);
        void *scratch = malloc(be->ops->pass_scratch_bytes(be, cols, n));
        struct nt_pass pass = {.n = n, .tokens = tokens, .scratch = scratch};
        be->ops->begin_pass(be, &pass);
        be->ops->embed(be, &pass, &p.W, h);
        float *y = malloc(sizeof(float) * (size_t)n * rows);
        be->ops->matmul(be, &pass, n, &p.W, NULL, NT_ACT_NONE, p.x, cols, y, rows);
        be->ops->end_pass(be, &pass);
        int bad = 0;
        for (int t = 0; t < n; t++) {
            nt_ggml_dequant_blocks(d, (const uint8_t *)p.W.data + (size_t)tokens[t] * nt_matrix_bytes(d, 1, cols),
                                   cols / block_elems(d), want);
            bad += memcmp(want, h + (size_t)t * cols, sizeof(float) * (size_t)cols) != 0;
        }
        CHECK(bad == 0, "%s: embed: %d of %d rows differ from the decoder's", nt_dtype_name(d), bad, n);
        p.ys = rows;
        float *ref = run(&p, nt_cpu_isa_selected(), n, 1, NULL, NT_ACT_NONE);
        CHECK(memcmp(ref, y, sizeof(float) * (size_t)n * rows) == 0, "%s: the backend's matmul is the kernel's",
              nt_dtype_name(d));
        free(ref);
        free(y);
        free(scratch);
        free(want);
        free(h);
        free((void *)p.W.data);
        free(p.x);
    }
    be->ops->destroy(be);
}

/* ---- a whole model ---------------------------------------------------------------------------- */

/* Simple quantizers (round to nearest on the block's amax; the decoders define the meaning, not
 * these): one row of `cols` weights into type d's blocks. */
static void quantize_row(enum nt_dtype d, const float *w, int cols, uint8_t *out) {
    static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    int bb = block_bytes(d);
    for (int b = 0; b < cols / 32; b++) {
        const float *x = w + 32 * b;
        uint8_t *o = out + (size_t)b * bb;
        memset(o, 0, (size_t)bb);
        float amax = 0.0f;
        for (int c = 0; c < 32; c++) amax = fmaxf(amax, fabsf(x[c]));
        int top = d == NT_DTYPE_GGML_Q8_0 ? 127 : d == NT_DTYPE_GGML_Q4_0 ? 7 : d == NT_DTYPE_GGML_Q5_0 ? 15 : 127;
        uint16_t h = nt_f32_to_f16(amax / (float)top);
        float dd = nt_f16_to_f32(h);
        memcpy(o, &h, 2);
        uint32_t qh = 0;
        for (int c = 0; c < 32; c++) {
            float v = dd > 0.0f ? x[c] / dd : 0.0f;
            int n;
            if (d == NT_DTYPE_GGML_IQ4_NL) {
                n = 0;
                for (int k = 1; k < 16; k++)
                    if (fabsf(v - (float)iq4nl[k]) < fabsf(v - (float)iq4nl[n])) n = k;
            } else {
                n = (int)lrintf(fmaxf(fminf(v, (float)top), (float)-top));
            }
            if (d == NT_DTYPE_GGML_Q8_0) {
                o[2 + c] = (uint8_t)(int8_t)n;
                continue;
            }
            if (d == NT_DTYPE_GGML_Q4_0) n += 8;
            if (d == NT_DTYPE_GGML_Q5_0) {
                n += 16;
                qh |= (uint32_t)(n >> 4) << c;
            }
            int qs = d == NT_DTYPE_GGML_Q5_0 ? 6 : 2;
            o[qs + c % 16] |= (uint8_t)((n & 15) << (c < 16 ? 0 : 4));
        }
        if (d == NT_DTYPE_GGML_Q5_0) memcpy(o + 2, &qh, 4);
    }
}

/* Every matrix of the model in one of a few block types, and the same values as F32. */
struct swap {
    struct nt_matrix *m[256];
    struct nt_matrix orig[256], ggml[256], f32[256];
    int n;
};

static void swap_collect(struct nt_matrix *m, void *ctx) {
    static const enum nt_dtype kinds[] = {NT_DTYPE_GGML_Q8_0, NT_DTYPE_GGML_Q5_0, NT_DTYPE_GGML_Q4_0, NT_DTYPE_GGML_IQ4_NL};
    struct swap *s = ctx;
    if (s->n == 256 || m->cols % 32 != 0) return;
    for (int i = 0; i < s->n; i++)
        if (s->orig[i].data == m->data) return; /* a tied head: its embeddings are swapped already */
    int i = s->n++;
    enum nt_dtype d = kinds[i % 4];
    s->m[i] = m;
    s->orig[i] = *m;
    float *w = malloc(sizeof(float) * (size_t)m->rows * m->cols);
    for (int64_t r = 0; r < m->rows; r++) nt_matrix_dequant_row(m->dtype, m->data, m->rows, m->cols, r, w + r * m->cols);
    uint8_t *q = malloc(nt_matrix_bytes(d, m->rows, m->cols));
    size_t rb = nt_matrix_bytes(d, 1, m->cols);
    for (int64_t r = 0; r < m->rows; r++) quantize_row(d, w + r * m->cols, (int)m->cols, q + r * rb);
    nt_ggml_dequant_blocks(d, q, m->rows * m->cols / 32, w); /* the values the ggml matrix means */
    s->ggml[i] = *m;
    s->ggml[i].dtype = d;
    s->ggml[i].data = q;
    s->f32[i] = *m;
    s->f32[i].dtype = NT_DTYPE_F32;
    s->f32[i].data = w;
}

static void swap_to(struct swap *s, const struct nt_matrix *set) {
    for (int i = 0; i < s->n; i++) *s->m[i] = set[i];
}

/* The demo model with its matrices in Q8_0 / Q5_0 / Q4_0 / IQ4_NL (embeddings and MoE experts
 * included) against the same model with those matrices' decoded values in F32: the only
 * difference is the int8 rounding of the activations inside the products (up to 1/254 of a
 * block's largest value per element), which moves the logits by about 1e-2 relative L2
 * (measured 3e-3 - 2.1e-2 over 23 of 24 positions). A MoE layer's top-k choice can flip on such a
 * perturbation and move one position further (0.099 measured at one position), so: relative L2
 * <= 3e-2 at >= 90 % of positions, <= 0.25 at all (a wrong decoder or product gives ~1), argmax
 * equal at >= 3/4 of the positions (22 of 24 measured; random tokens make near-ties common). */
static void test_model(void) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.n_threads = 2;
    nemotron_model *model = NULL;
    if (nemotron_model_load("models/nemotron-h-kjv", &mp, &model) != NEMOTRON_OK) {
        CHECK(0, "demo model: %s", nemotron_model_errmsg(model));
        nemotron_model_free(model);
        return;
    }
    static struct swap s;
    memset(&s, 0, sizeof s);
    nt_weights_for_each(&model->w, swap_collect, NULL, &s);
    int e = 0;
    while (e < s.n && s.m[e] != &model->w.embeddings) e++;
    CHECK(e < s.n, "the embeddings were swapped");
    if (e == s.n) e = 0;
    int tied = model->w.lm_head.data == model->w.embeddings.data;
    int V = nemotron_model_vocab_size(model), n = 24;
    int32_t tokens[24];
    for (int t = 0; t < n; t++) tokens[t] = (int32_t)(3 + (t * 37) % (V - 3));
    float *lf = malloc(sizeof(float) * (size_t)n * V), *lg = malloc(sizeof(float) * (size_t)n * V);
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = 64;
    nemotron_session *ses = NULL;
    const struct nt_matrix *sets[2] = {s.f32, s.ggml};
    float *outs[2] = {lf, lg};
    for (int k = 0; k < 2; k++) {
        swap_to(&s, sets[k]);
        if (tied) model->w.lm_head = model->w.embeddings;
        CHECK(nemotron_session_new(model, &sp, &ses) == NEMOTRON_OK, "session");
        CHECK(nemotron_session_eval(ses, tokens, n, outs[k]) == NEMOTRON_OK, "eval %d: %s", k, nemotron_session_errmsg(ses));
        nemotron_session_free(ses);
    }
    float emb[1024];
    int H = (int)model->w.embeddings.cols;
    CHECK(H <= 1024 && nemotron_model_token_embedding(model, 5, emb) == NEMOTRON_OK &&
              !memcmp(emb, (const float *)s.f32[e].data + 5 * (size_t)H, sizeof(float) * (size_t)H),
          "token_embedding decodes the %s row", nt_dtype_name(s.ggml[e].dtype));
    double worst = 0;
    int agree = 0, close = 0;
    for (int t = 0; t < n; t++) {
        double num = 0, den = 0;
        int af = 0, ag = 0;
        for (int v = 0; v < V; v++) {
            double a = lf[(size_t)t * V + v], b = lg[(size_t)t * V + v];
            num += (a - b) * (a - b);
            den += a * a;
            if (a > lf[(size_t)t * V + af]) af = v;
            if (b > lg[(size_t)t * V + ag]) ag = v;
        }
        worst = fmax(worst, sqrt(num / den));
        close += sqrt(num / den) <= 3e-2;
        agree += af == ag;
    }
    printf("test_ggml_blocks: demo model in ggml blocks vs their f32 values: logits rel. L2 <= 3e-2 at %d/%d positions, "
           "at most %.2e; argmax %d/%d\n", close, n, worst, agree, n);
    CHECK(s.n > 20 && close * 10 >= n * 9 && worst <= 0.25 && agree * 4 >= n * 3,
          "%d matrices: rel. L2 <= 3e-2 at %d of %d positions, worst %.3g, argmax %d of %d", s.n, close, n, worst, agree, n);
    swap_to(&s, s.orig);
    if (tied) model->w.lm_head = model->w.embeddings;
    for (int i = 0; i < s.n; i++) {
        free((void *)s.ggml[i].data);
        free((void *)s.f32[i].data);
    }
    free(lf);
    free(lg);
    nemotron_model_free(model);
}

int main(void) {
    test_type_map();
    test_decoders();
    test_real_file();
    for (int i = 0; i < N_TYPES; i++) test_products(all_types[i]);
    test_backend_ops();
    test_model();
    return test_summary("test_ggml_blocks");
}
