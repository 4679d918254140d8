/* test_quant.c - the packed formats q8_2f and q4tp: byte layout, sizes, readers, quantizers.
 *
 * Layout checks read payloads through the test's own byte arithmetic, written from FORMATS.md
 * (offsets, little-endian fields, 5-bit codes packed LSB first), never through the library's
 * offset helpers, so a wrong offset in either shows. Hand-built payloads test the readers;
 * hand-built matrices whose quantization is known exactly (powers of two, integer levels) test
 * what the quantizers write; random matrices (Gaussian, Student-t(3), Gaussian with outlier
 * columns) test error bounds, the comparison with the 4-bit baseline and the invariants: every
 * q8_2f value is the nearest level under the scales a reader sees, every q4tp nibble is the
 * best level for its group's coded scale. The error figures are in the check messages, so a
 * failure says by how much (measured values are in the comments next to the bounds).
 */
#include "quant/baseline.h"
#include "quant/quant.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                    */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform01(void) { /* (0, 1), xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return ((double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) + 0.5) / 9007199254740992.0;
}
static double gaussian(void) { return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }
static double student_t3(void) {
    double chi2 = 0;
    for (int k = 0; k < 3; k++) {
        double g = gaussian();
        chi2 += g * g;
    }
    return gaussian() / sqrt(chi2 / 3.0);
}

enum dist { GAUSS, STUDENT_T3, OUTLIER_COLS, OUTLIER_ROWS };
static const char *dist_name[] = {"gaussian", "student-t3", "outlier-cols", "outlier-rows"};

/* rows x cols weights of about the size of a trained projection (std 0.02); OUTLIER_COLS makes
 * every 50th column 20 times larger, as the columns that meet large activations are; OUTLIER_ROWS
 * every 10th row 8 times larger (rows of one matrix at different magnitudes) */
static float *random_matrix(enum dist d, int64_t rows, int64_t cols) {
    float *w = malloc((size_t)(rows * cols) * sizeof *w);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double x = d == STUDENT_T3 ? student_t3() : gaussian();
            if (d == OUTLIER_COLS && c % 50 == 7) x *= 20.0;
            if (d == OUTLIER_ROWS && r % 10 == 3) x *= 8.0;
            w[r * cols + c] = (float)(0.02 * x);
        }
    return w;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* A payload in a buffer filled with 0xAA first, so zeroed padding shows; `slack` bytes more are
 * allocated (and must stay 0xAA: nothing may be written past the payload). */
static uint8_t *quantize(enum nt_dtype fmt, const float *w, int64_t rows, int64_t cols, uint64_t *size) {
    *size = nt_matrix_bytes(fmt, rows, cols);
    uint8_t *p = malloc(*size + 16);
    memset(p, 0xAA, *size + 16);
    nt_quantize_matrix(fmt, w, rows, cols, p);
    return p;
}

static int tail_untouched(const uint8_t *p, uint64_t size) {
    for (int i = 0; i < 16; i++)
        if (p[size + i] != 0xAA) return 0;
    return 1;
}

/* FORMATS.md's sizes, from the formula in the text */
static uint64_t q8_size(int64_t rows, int64_t cols) {
    uint64_t n = (uint64_t)(rows * cols + 2 * rows + 2 * cols);
    return (n + 3) / 4 * 4;
}
static uint64_t q4_size(int64_t rows, int64_t cols) {
    int64_t gpr = cols / 32, cstride = (gpr * 5 + 7) / 8;
    uint64_t n = (uint64_t)(rows * gpr * 16 + 4 * rows + rows * cstride);
    return (n + 3) / 4 * 4 + 4;
}

/* The code of row r, group g, read bit by bit from the codes area (independent of the u16
 * trick the readers use). */
static int code_bits(const uint8_t *codes_row, int64_t g) {
    int v = 0;
    for (int b = 0; b < 5; b++) {
        int64_t bit = 5 * g + b;
        v |= ((codes_row[bit / 8] >> (bit % 8)) & 1) << b;
    }
    return v;
}

/* The nibble of column k (0..31) of a 16-byte group: word k / 8, bits 4 (k % 8) .. + 4. */
static int nibble_bits(const uint8_t *group, int k) { return (int)((rd32(group + 4 * (k / 8)) >> (4 * (k % 8))) & 15u); }

static double rel_rms(const float *a, const float *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(e / s);
}

static float *dequant_all(enum nt_dtype fmt, const uint8_t *p, int64_t rows, int64_t cols) {
    float *out = malloc((size_t)(rows * cols) * sizeof *out);
    for (int64_t r = 0; r < rows; r++) nt_matrix_dequant_row(fmt, p, rows, cols, r, out + r * cols);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* shapes and sizes                                                                           */

static void test_sizes(void) {
    static const int64_t cols_list[] = {32, 64, 1856, 2688, 3712};
    static const int64_t rows_list[] = {1, 2, 3, 7, 64, 2689};
    for (size_t i = 0; i < sizeof rows_list / sizeof *rows_list; i++)
        for (size_t j = 0; j < sizeof cols_list / sizeof *cols_list; j++) {
            int64_t r = rows_list[i], c = cols_list[j];
            CHECK(nt_matrix_bytes(NT_DTYPE_Q8_2F, r, c) == q8_size(r, c), "q8_2f %lldx%lld: %llu",
                  (long long)r, (long long)c, (unsigned long long)nt_matrix_bytes(NT_DTYPE_Q8_2F, r, c));
            CHECK(nt_matrix_bytes(NT_DTYPE_Q4TP, r, c) == q4_size(r, c), "q4tp %lldx%lld: %llu",
                  (long long)r, (long long)c, (unsigned long long)nt_matrix_bytes(NT_DTYPE_Q4TP, r, c));
            CHECK(nt_matrix_bytes(NT_DTYPE_BF16, r, c) == (uint64_t)(r * c * 2), "bf16 %lldx%lld",
                  (long long)r, (long long)c);
        }
    /* worked by hand: 3 x 2688 q4tp = 3*84*16 + 12 + 3*53 = 4203 -> 4204 + spare word */
    CHECK(nt_matrix_bytes(NT_DTYPE_Q4TP, 3, 2688) == 4208, "q4tp 3x2688 = 4208 bytes");
    CHECK(nt_q4tp_cstride(2688) == 53 && nt_q4tp_cstride(1856) == 37 && nt_q4tp_cstride(3712) == 73 &&
              nt_q4tp_cstride(32) == 1 && nt_q4tp_cstride(64) == 2 && nt_q4tp_cstride(256) == 5,
          "cstride = ceil(gpr * 5 / 8)");
    CHECK(nt_matrix_bytes(NT_DTYPE_Q4TP, 1, 1856) == 976, "q4tp 1x1856: 928 + 4 + 37 = 969 -> 976");
    CHECK(nt_matrix_bytes(NT_DTYPE_Q4TP, 2, 3712) == 3872, "q4tp 2x3712: 3712 + 8 + 146 = 3866 -> 3872");
    /* q8_2f: 3 x 36 = 108 + 6 + 72 = 186 -> 188; 1 x 100 = 302 -> 304; 4 x 4 = 48, no padding */
    CHECK(nt_matrix_bytes(NT_DTYPE_Q8_2F, 3, 36) == 188, "q8_2f 3x36 = 188");
    CHECK(nt_matrix_bytes(NT_DTYPE_Q8_2F, 1, 100) == 304, "q8_2f 1x100 = 304");
    CHECK(nt_matrix_bytes(NT_DTYPE_Q8_2F, 4, 4) == 32, "q8_2f 4x4 = 16 + 8 + 8");
    CHECK(nt_matrix_bytes(NT_DTYPE_F32, 3, 5) == 60 && nt_matrix_bytes(NT_DTYPE_F16, 3, 5) == 30,
          "plain dtypes: rows * cols * size");
    /* offsets, from FORMATS.md's tables */
    CHECK(nt_q8_2f_rs_offset(3, 36) == 108 && nt_q8_2f_cs_offset(3, 36) == 114, "q8_2f offsets 3x36");
    CHECK(nt_q4tp_params_offset(3, 256) == 384 && nt_q4tp_codes_offset(3, 256) == 396, "q4tp offsets 3x256");
}

static void test_accepts(void) {
    const char *why = NULL;
    CHECK(nt_format_accepts(NT_DTYPE_Q4TP, 3, 2688, &why) && why == NULL, "q4tp 3x2688 accepted");
    CHECK(nt_format_accepts(NT_DTYPE_Q8_2F, 3, 36, &why) && why == NULL, "q8_2f takes cols 36");
    CHECK(nt_format_accepts(NT_DTYPE_Q8_2F, 1, 100, NULL), "q8_2f takes cols 100");
    CHECK(nt_format_accepts(NT_DTYPE_BF16, 5, 7, NULL) && nt_format_accepts(NT_DTYPE_F32, 1, 1, NULL),
          "plain dtypes take any shape");

    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q4TP, 4, 100, &why) && why && strstr(why, "100") && strstr(why, "32"),
          "q4tp refuses cols 100: %s", why ? why : "(no reason)");
    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q4TP, 4, 48, &why) && why && strstr(why, "48"), "q4tp refuses cols 48: %s",
          why ? why : "(no reason)");
    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q8_2F, 4, 30, &why) && why && strstr(why, "30") && strstr(why, "4"),
          "q8_2f refuses cols 30: %s", why ? why : "(no reason)");
    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q8_2F, 0, 32, &why) && why && strstr(why, "empty"), "0 rows: %s",
          why ? why : "(no reason)");
    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q4TP, 5, 0, &why) && why, "0 cols refused");
    CHECK(!nt_format_accepts(NT_DTYPE_F32, -1, 8, NULL), "negative rows refused");
    why = NULL;
    CHECK(!nt_format_accepts(NT_DTYPE_Q8_2F, INT64_C(1) << 40, INT64_C(1) << 40, &why) && why &&
              strstr(why, "large"),
          "2^80 weights refused: %s", why ? why : "(no reason)");
}

/* ------------------------------------------------------------------------------------------ */
/* readers on hand-built payloads                                                             */

static void test_q8_reader(void) {
    /* 3 x 8: q at 0, rs at 24 (3 f16), cs at 30 = f16 index 15 (odd), 8 f16 to 46, pad to 48 */
    int64_t rows = 3, cols = 8;
    uint8_t p[48];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 24; i++) p[i] = (uint8_t)(int8_t)(i * 11 - 127);
    static const float rs[3] = {0.5f, 0.25f, 2.0f};
    static const float cs[8] = {1.0f, 0.5f, 0.125f, 4.0f, 1.5f, 0.75f, 1.0f, 0.0625f};
    for (int r = 0; r < 3; r++) wr16(p + 24 + 2 * r, nt_f32_to_f16(rs[r]));
    for (int c = 0; c < 8; c++) wr16(p + 30 + 2 * c, nt_f32_to_f16(cs[c]));
    CHECK(nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols) == 48, "3x8 q8_2f is 48 bytes");
    CHECK(nt_q8_2f_cs_offset(rows, cols) / 2 == 15, "odd rows: cs starts at the odd f16 index 15");
    int ok_rs = 1, ok_cs = 1, ok_row = 1;
    for (int r = 0; r < 3; r++) ok_rs &= nt_q8_2f_row_scale(p, rows, cols, r) == rs[r];
    for (int c = 0; c < 8; c++) ok_cs &= nt_q8_2f_col_field(p, rows, cols, c) == cs[c];
    for (int r = 0; r < 3; r++) {
        float out[8];
        nt_matrix_dequant_row(NT_DTYPE_Q8_2F, p, rows, cols, r, out);
        for (int c = 0; c < 8; c++) ok_row &= out[c] == rs[r] * (float)(r * 88 + c * 11 - 127) * cs[c];
    }
    CHECK(ok_rs, "row scales read at byte rows*cols");
    CHECK(ok_cs, "column field read at byte rows*cols + 2*rows, unaligned");
    CHECK(ok_row, "dequant row = rs * q * cs");
}

static void test_q4_reader(void) {
    /* 3 x 96: gpr 3, cstride 2; nibbles 0..143, params 144..155, codes 156..161, pad to 164, spare
     * word to 168 */
    int64_t rows = 3, cols = 96;
    uint8_t p[168];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 144; i++) p[i] = (uint8_t)(i * 37 + 5);
    static const float base[3] = {-7.0f, -3.5f, 1.25f}, step[3] = {0.125f, 0.0f, 0.5f};
    int code[3][3];
    for (int r = 0; r < 3; r++) {
        wr16(p + 144 + 4 * r, nt_f32_to_f16(base[r]));
        wr16(p + 146 + 4 * r, nt_f32_to_f16(step[r]));
        for (int g = 0; g < 3; g++) {
            code[r][g] = (7 * r + 11 * g + 3) & 31;
            for (int b = 0; b < 5; b++)
                if (code[r][g] >> b & 1) p[156 + 2 * r + (5 * g + b) / 8] |= (uint8_t)(1 << ((5 * g + b) % 8));
        }
    }
    CHECK(nt_matrix_bytes(NT_DTYPE_Q4TP, rows, cols) == 168, "3x96 q4tp is 168 bytes");
    int ok_code = 1, ok_scale = 1, ok_nib = 1, ok_row = 1;
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 3; g++) {
            ok_code &= nt_q4tp_code(p, rows, cols, r, g) == code[r][g];
            ok_scale &= nt_q4tp_group_scale(p, rows, cols, r, g) == nt_q4tp_scale(base[r], step[r], code[r][g]);
        }
    for (int r = 0; r < 3; r++) {
        float out[96];
        nt_matrix_dequant_row(NT_DTYPE_Q4TP, p, rows, cols, r, out);
        for (int c = 0; c < 96; c++) {
            int g = c / 32, k = c % 32;
            /* group (r, g) at byte (r*3 + g)*16; word k/8, bits 4(k%8) */
            uint32_t word = rd32(p + (r * 3 + g) * 16 + 4 * (k / 8));
            int want = (int)((word >> (4 * (k % 8))) & 15u) - 8;
            ok_nib &= nt_q4tp_nibble(p, rows, cols, r, c) == want;
            ok_row &= out[c] == nt_q4tp_scale(base[r], step[r], code[r][g]) * (float)want;
        }
    }
    CHECK(ok_code, "codes: 5 bits at bit 5g of the row's cstride bytes");
    CHECK(ok_scale, "group scale = nt_q4tp_scale(base, step, code) from the row's u32 params");
    CHECK(ok_nib, "nibbles: word k/8 of the group, bits 4(k%%8), value - 8");
    CHECK(ok_row, "dequant row = group scale * nibble");
    /* the last group of the last row reads its u16 at byte 156 + 2*2 + 1 = 161, and 162 (pad) */
    p[162] = 0xff;
    CHECK(nt_q4tp_code(p, rows, cols, 2, 2) == code[2][2], "a byte past the row does not leak into the code");
}

/* ------------------------------------------------------------------------------------------ */
/* q8_2f quantizer                                                                            */

static int f16_is_normal(uint16_t h) {
    unsigned e = (h >> 10) & 31;
    return e != 0 && e != 31;
}

/* The invariants of a q8_2f payload against its source: q the nearest integer to W / (rs cs)
 * (the decoded f16 values) in [-127, 127], no clipping, a tight rs per nonzero row. Returns the
 * number of violations. */
static int q8_violations(const float *w, const uint8_t *p, int64_t rows, int64_t cols, double *max_rel_step) {
    int bad = 0;
    *max_rel_step = 0;
    for (int64_t r = 0; r < rows; r++) {
        double rs = nt_f16_to_f32(rd16(p + rows * cols + 2 * r)), rowmax = 0;
        int top = 0;
        for (int64_t c = 0; c < cols; c++) {
            double cs = nt_f16_to_f32(rd16(p + rows * cols + 2 * rows + 2 * c));
            int q = (int8_t)p[r * cols + c];
            double x = rs > 0 ? w[r * cols + c] / (rs * cs) : 0.0;
            if (q < -127 || q > 127) bad++;
            /* nearest: off by at most half a level (plus the f32 rounding of the quotient) */
            if (fabs(x - q) > 0.5 + 1e-5) bad++;
            if (abs(q) == 127) top = 1;
            double a = fabs(w[r * cols + c]) / cs;
            rowmax = a > rowmax ? a : rowmax;
            if (rs > 0 && fabs(x - q) > *max_rel_step) *max_rel_step = fabs(x - q);
        }
        if (rowmax == 0) {
            if (rs != 0) bad++;
            continue;
        }
        /* rs: the smallest f16 at or above rowmax / 127, so the row's largest weight is +-127 */
        uint16_t h = rd16(p + rows * cols + 2 * r);
        if (!(rs * 127.0 >= rowmax * (1 - 1e-7)) || !(nt_f16_to_f32((uint16_t)(h - 1)) * 127.0 < rowmax)) bad++;
        if (!top) bad++;
    }
    return bad;
}

static void test_q8_small(void) {
    /* 3 x 8 with odd rows: row 0 sets every column's max to 0.5 (so cs is one power of two),
     * row 1 is a scaled copy with exact levels, row 2 is zero */
    int64_t rows = 3, cols = 8;
    float w[24] = {0.5f, -0.5f, 0.5f, -0.5f, 0.5f, 0.5f, -0.5f, 0.5f,
                   0.25f, -0.125f, 0.0625f, 0.0f, -0.25f, 0.1875f, 0.03125f, -0.015625f,
                   0, 0, 0, 0, 0, 0, 0, 0};
    uint64_t size;
    uint8_t *p = quantize(NT_DTYPE_Q8_2F, w, rows, cols, &size);
    CHECK(size == 48 && tail_untouched(p, size), "3x8: 48 bytes, nothing written past them");
    /* 24 + 6 + 16 = 46: two padding bytes */
    CHECK(p[46] == 0 && p[47] == 0, "padding zeroed: %02x %02x", p[46], p[47]);
    uint16_t cs0 = rd16(p + 30);
    int same = 1;
    for (int c = 0; c < 8; c++) same &= rd16(p + 30 + 2 * c) == cs0;
    float csv = nt_f16_to_f32(cs0);
    CHECK(same && (cs0 & 0x3ff) == 0 && f16_is_normal(cs0) && csv <= 1.0f,
          "equal column maxima: one power-of-two cs <= 1 (%g)", csv);
    /* row 0: every |W| = the max: q = +-127, with the same signs */
    int ok0 = 1;
    for (int c = 0; c < 8; c++) ok0 &= (int8_t)p[c] == (w[c] > 0 ? 127 : -127);
    CHECK(ok0, "row 0 at +-127");
    /* row 1: max 0.25 at columns 0 and 4 -> +127 / -127; the others at W / 0.25 * 127, rounded
     * against the decoded rs (a little above 0.25 / 127 / cs) */
    float rs1 = nt_f16_to_f32(rd16(p + 26));
    int ok1 = 1;
    for (int c = 0; c < 8; c++) {
        double want = nearbyint(w[8 + c] / ((double)rs1 * csv));
        ok1 &= (int8_t)p[8 + c] == (int)want;
    }
    CHECK(ok1 && (int8_t)p[8] == 127 && (int8_t)p[12] == -127 && (int8_t)p[9] == -63,
          "row 1: q = round(W / (rs cs)): %d %d %d %d %d %d %d %d", (int8_t)p[8], (int8_t)p[9], (int8_t)p[10],
          (int8_t)p[11], (int8_t)p[12], (int8_t)p[13], (int8_t)p[14], (int8_t)p[15]);
    int ok2 = rd16(p + 28) == 0;
    for (int c = 0; c < 8; c++) ok2 &= p[16 + c] == 0;
    CHECK(ok2, "zero row: rs 0, q 0");
    double step;
    CHECK(q8_violations(w, p, rows, cols, &step) == 0, "invariants of the small matrix");
    free(p);

    /* a zero column gets the largest cs (the power of two K); a zero matrix gets cs 1 */
    float wz[4 * 4] = {1, 0, 0.5f, 0.25f, -1, 0, 0.5f, 0.125f, 0.5f, 0, -0.5f, 0.25f, 0.25f, 0, 0.125f, -0.25f};
    p = quantize(NT_DTYPE_Q8_2F, wz, 4, 4, &size);
    float cs[4];
    for (int c = 0; c < 4; c++) cs[c] = nt_f16_to_f32(rd16(p + 16 + 8 + 2 * c));
    CHECK(cs[1] == cs[0] && cs[0] > cs[2] && cs[2] > cs[3] && cs[3] > 0,
          "zero column: cs = the widest column's (%g %g %g %g)", cs[0], cs[1], cs[2], cs[3]);
    /* alpha: cs[c] / cs[0] = (colmax[c] / colmax[0])^alpha, to f16 precision */
    CHECK(fabs(cs[2] / cs[0] - pow(0.5, NT_Q8_2F_ALPHA)) < 1e-3 && fabs(cs[3] / cs[0] - pow(0.25, NT_Q8_2F_ALPHA)) < 1e-3,
          "cs ~ colmax^alpha: %g %g", cs[2] / cs[0], cs[3] / cs[0]);
    CHECK(q8_violations(wz, p, 4, 4, &step) == 0, "invariants with a zero column");
    free(p);
    float zero[8] = {0};
    p = quantize(NT_DTYPE_Q8_2F, zero, 2, 4, &size);
    int okz = 1;
    for (int i = 0; i < 8; i++) okz &= p[i] == 0;
    okz &= rd16(p + 8) == 0 && rd16(p + 10) == 0;
    for (int c = 0; c < 4; c++) okz &= rd16(p + 12 + 2 * c) == 0x3c00;
    CHECK(okz && size == 20, "zero matrix: q 0, rs 0, cs 1.0");
    free(p);
}

static void test_q8_random(void) {
    int64_t rows = 67, cols = 2688;
    for (int d = GAUSS; d <= OUTLIER_COLS; d++) {
        float *w = random_matrix(d, rows, cols);
        uint64_t size;
        uint8_t *p = quantize(NT_DTYPE_Q8_2F, w, rows, cols, &size);
        double step;
        int bad = q8_violations(w, p, rows, cols, &step);
        CHECK(bad == 0, "q8_2f %s: %d invariant violations", dist_name[d], bad);
        int normal = 1;
        for (int64_t i = 0; i < rows + cols; i++) normal &= f16_is_normal(rd16(p + rows * cols + 2 * i));
        CHECK(normal, "q8_2f %s: rs and cs are normal f16", dist_name[d]);
        float *deq = dequant_all(NT_DTYPE_Q8_2F, p, rows, cols);
        double e = rel_rms(w, deq, (size_t)(rows * cols));
        /* int8 on a max-abs grid, ~ (row max / 127) / sqrt(12) / std per weight; measured 6.85e-3
         * Gaussian, 1.51e-2 Student-t(3), 8.34e-3 outlier columns: the bounds leave 6-40% */
        double bound = d == GAUSS ? 9e-3 : d == STUDENT_T3 ? 1.6e-2 : 1.2e-2;
        CHECK(e < bound, "q8_2f %s: relative RMS error %.4e (bound %.1e)", dist_name[d], e, bound);

        /* the field in two chunks of rows equals the field of the whole */
        float *cm = calloc((size_t)cols, sizeof *cm);
        uint16_t *cs = malloc((size_t)cols * 2);
        nt_q8_2f_col_stats(cm, w, 30, cols);
        nt_q8_2f_col_stats(cm, w + 30 * cols, rows - 30, cols);
        nt_q8_2f_col_field_choose(cm, cols, cs);
        CHECK(memcmp(cs, p + rows * cols + 2 * rows, (size_t)cols * 2) == 0,
              "q8_2f %s: column statistics fold chunk by chunk", dist_name[d]);

        /* scaling W by 2^-10 moves rs and cs by powers of two and leaves every q as it was */
        float *ws = malloc((size_t)(rows * cols) * sizeof *ws);
        for (int64_t i = 0; i < rows * cols; i++) ws[i] = ldexpf(w[i], -10);
        uint8_t *ps = quantize(NT_DTYPE_Q8_2F, ws, rows, cols, &size);
        int normal_s = 1;
        for (int64_t i = 0; i < rows + cols; i++) normal_s &= f16_is_normal(rd16(ps + rows * cols + 2 * i));
        CHECK(memcmp(p, ps, (size_t)(rows * cols)) == 0 && normal_s,
              "q8_2f %s: W * 2^-10 gives the same q, scales still normal", dist_name[d]);
        free(ps);
        free(ws);
        free(cm);
        free(cs);
        free(deq);
        free(p);
        free(w);
    }
    /* cols % 32 != 0 */
    static const int64_t odd_cols[] = {36, 100, 4};
    for (size_t i = 0; i < 3; i++) {
        int64_t cols2 = odd_cols[i], rows2 = 5;
        float *w = random_matrix(GAUSS, rows2, cols2);
        uint64_t size;
        uint8_t *p = quantize(NT_DTYPE_Q8_2F, w, rows2, cols2, &size);
        double step;
        uint64_t used = (uint64_t)(rows2 * cols2 + 2 * rows2 + 2 * cols2);
        int pad_ok = 1;
        for (uint64_t b = used; b < size; b++) pad_ok &= p[b] == 0;
        CHECK(size == q8_size(rows2, cols2) && pad_ok && tail_untouched(p, size) &&
                  q8_violations(w, p, rows2, cols2, &step) == 0,
              "q8_2f 5x%lld: size, zero padding, invariants", (long long)cols2);
        free(p);
        free(w);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* q4tp quantizer                                                                             */

/* A level pattern with every value -8..7 twice, in a shuffled column order (5k + 3 mod 16 is a
 * bijection), so a swapped word or nibble pair shows. */
static int pattern_level(int k) { return (5 * k + 3) % 16 - 8; }

static void test_q4_exact(void) {
    /* 3 rows x 8 groups; group g of row r is 2^(-10 + code) * pattern with the codes below: every
     * group scale is a power of two on the grid base -10, step 1 (codes 0 and 31 in each row fix
     * base and step exactly), so the quantizer must find these codes and the pattern exactly */
    static const int codes[3][8] = {{0, 31, 5, 17, 30, 1, 12, 22},
                                    {31, 3, 0, 9, 25, 14, 7, 28},
                                    {16, 0, 31, 2, 29, 11, 19, 6}};
    int64_t rows = 3, cols = 256, gpr = 8, cstride = 5;
    float w[3 * 256];
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 8; g++)
            for (int k = 0; k < 32; k++)
                w[r * 256 + g * 32 + k] = ldexpf((float)pattern_level(k), -10 + codes[r][g]);
    uint64_t size;
    uint8_t *p = quantize(NT_DTYPE_Q4TP, w, rows, cols, &size);
    /* 384 nibble bytes, 12 params at 384, 15 code bytes at 396, to 411, pad 1, spare word 4 */
    CHECK(size == 416 && tail_untouched(p, size), "3x256 q4tp: 416 bytes, nothing past them");
    int pad_ok = 1;
    for (int b = 411; b < 416; b++) pad_ok &= p[b] == 0;
    CHECK(pad_ok, "padding and spare word zeroed");
    int params_ok = 1;
    for (int r = 0; r < 3; r++) params_ok &= rd32(p + 384 + 4 * r) == (0xc900u | 0x3c00u << 16);
    CHECK(params_ok, "params: base f16(-10) = 0xc900 low, step f16(1) = 0x3c00 high: %08x",
          (unsigned)rd32(p + 384));
    int codes_ok = 1, nib_ok = 1;
    for (int r = 0; r < 3; r++)
        for (int g = 0; g < 8; g++) {
            codes_ok &= code_bits(p + 396 + r * cstride, g) == codes[r][g];
            for (int k = 0; k < 32; k++) nib_ok &= nibble_bits(p + (r * gpr + g) * 16, k) == pattern_level(k) + 8;
        }
    CHECK(codes_ok, "codes packed LSB first at bit 5g (bits 5..9 and 15..19 cross bytes)");
    CHECK(nib_ok, "nibbles: column 8j + n in bits 4n of word j, value + 8");
    /* the exact bytes of row 0's codes, worked by hand: 0 | 31<<5 | 5<<10 | 17<<15 | 30<<20 |
     * 1<<25 | 12<<30 | 22<<35 = 0xB303E897E0, little-endian e0 97 e8 03 b3 */
    static const uint8_t row0[5] = {0xe0, 0x97, 0xe8, 0x03, 0xb3};
    CHECK(memcmp(p + 396, row0, 5) == 0, "row 0 code bytes %02x %02x %02x %02x %02x", p[396], p[397], p[398],
          p[399], p[400]);
    float *deq = dequant_all(NT_DTYPE_Q4TP, p, rows, cols);
    CHECK(memcmp(deq, w, sizeof w) == 0, "on-grid powers of two round-trip exactly");
    free(deq);
    free(p);

    /* one group per row (cstride 1): the last row's code read reaches into the padding */
    float w1[3 * 32];
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 32; k++) w1[r * 32 + k] = ldexpf((float)pattern_level(k), r - 4);
    p = quantize(NT_DTYPE_Q4TP, w1, 3, 32, &size);
    /* 48 + 12 + 3 = 63 -> 64 + 4 */
    CHECK(size == 68 && p[63] == 0 && rd32(p + 64) == 0 && tail_untouched(p, size), "3x32: 68 bytes, padded");
    int one_ok = 1;
    for (int r = 0; r < 3; r++) {
        /* a single scale per row: step 0, base = log2 of the scale, code 0 */
        one_ok &= rd32(p + 48 + 4 * r) == (uint32_t)nt_f32_to_f16((float)(r - 4)) && p[60 + r] == 0;
        for (int k = 0; k < 32; k++) one_ok &= nibble_bits(p + r * 16, k) == pattern_level(k) + 8;
    }
    CHECK(one_ok, "one group per row: step 0, code 0, base = log2 scale");
    free(p);

    /* zero groups and rows: nibbles 8, code 0; an all-zero row has params 0 */
    float wz[2 * 96];
    memset(wz, 0, sizeof wz);
    for (int k = 0; k < 32; k++) wz[32 + k] = 0x1p-7f * (float)pattern_level(k);
    p = quantize(NT_DTYPE_Q4TP, wz, 2, 96, &size);
    int z_ok = 1;
    for (int g = 0; g < 6; g++)
        if (g != 1)
            for (int b = 0; b < 16; b++) z_ok &= p[g * 16 + b] == 0x88;
    z_ok &= code_bits(p + 96 + 8, 0) == 0 && code_bits(p + 96 + 8, 2) == 0;
    z_ok &= rd32(p + 96 + 4) == 0 && p[96 + 8 + 2] == 0 && p[96 + 8 + 3] == 0;
    CHECK(z_ok, "zero groups: nibbles 0x88 and code 0; zero row: params 0, codes 0");
    deq = dequant_all(NT_DTYPE_Q4TP, p, 2, 96);
    int finite = 1;
    for (int i = 0; i < 192; i++) finite &= isfinite(deq[i]) && (i / 32 == 1 || deq[i] == 0.0f);
    CHECK(finite, "zero groups dequantize to 0, the rest finite");
    CHECK(rel_rms(wz, deq, 192) < 1e-6, "a row of one exact group: exact (%g)", rel_rms(wz, deq, 192));
    free(deq);
    free(p);
}

/* The squared error of group w under scale s with nearest levels, in double. */
static double group_err(const float *w, double s) {
    double e = 0;
    for (int k = 0; k < 32; k++) {
        double best = INFINITY;
        for (int m = -8; m <= 7; m++) best = fmin(best, fabs(w[k] - s * m));
        e += best * best;
    }
    return e;
}

/* The f16 at or below x and the f16 at or above x (x finite, inside f16's range), from the
 * nearest one and its neighbours. */
static float f16_floor(float x) {
    uint16_t h = nt_f32_to_f16(x);
    if (nt_f16_to_f32(h) > x) h = (h & 0x8000u) ? (uint16_t)(h + 1) : h == 0 ? 0x8001u : (uint16_t)(h - 1);
    return nt_f16_to_f32(h);
}
static float f16_ceil(float x) { return -f16_floor(-x); }

/* The squared error of a group coded on grid (base, step) with its best code among the grid
 * points floor(c) - 1 .. floor(c) + 2 around its own position c (clamped to 0..31). */
static double grid_group_err(const float *w, double l, float base, float step) {
    double c = step > 0 ? (l - base) / step : 0, best = INFINITY;
    c = c < 0 ? 0 : c > 31 ? 31 : c;
    for (int k = (int)c - 1; k <= (int)c + 2; k++)
        if (k >= 0 && k <= 31) best = fmin(best, group_err(w, nt_q4tp_scale(base, step, k)));
    return best;
}

/* Checks the q4tp invariants of a payload against its source; returns violations:
 * - base, step finite, step >= 0, coded scales normal, unused code bits zero;
 * - a row whose groups share one scale (nt_q4_group_best_scale) has step 0 and base that
 *   scale's nearest f16;
 * - each group's code is at least as good as the two grid points around its own scale;
 * - each row is at least as good as FORMATS.md's grid: base the groups' smallest log2 scale
 *   rounded down to f16, step the range / 31 rounded up, codes as above (the quantizer may fit
 *   another grid to the row, but only keeps it where it is better);
 * - every nibble is the nearest level under the coded scale. */
static int q4_violations(const float *w, const uint8_t *p, int64_t rows, int64_t cols) {
    int64_t gpr = cols / 32, cstride = (gpr * 5 + 7) / 8;
    const uint8_t *params = p + rows * gpr * 16, *codes = params + 4 * rows;
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        float base = nt_f16_to_f32(rd16(params + 4 * r)), step = nt_f16_to_f32(rd16(params + 4 * r + 2));
        if (!isfinite(base) || !(step >= 0.0f) || !isfinite(step)) bad++;
        double lmin = INFINITY, lmax = -INFINITY, row_err = 0, minmax_err = 0;
        for (int64_t g = 0; g < gpr; g++) {
            float own = nt_q4_group_best_scale(w + r * cols + g * 32);
            if (own < 0x1p-126f) continue; /* zero, or below the grid's floor: nothing to place */
            lmin = fmin(lmin, log2(own));
            lmax = fmax(lmax, log2(own));
        }
        float mm_base = 0, mm_step = 0;
        if (lmin == lmax) {
            /* one scale in the row: base is its nearest f16, within half an f16 ulp */
            if (step != 0 || fabs(lmin - base) > (lmin != 0 ? ldexp(1.0, ilogb(lmin) - 11) : 0x1p-25) + 1e-6) bad++;
        } else if (lmin < lmax) {
            mm_base = f16_floor((float)lmin);
            mm_step = f16_ceil((float)((lmax - mm_base) / 31.0));
        }
        for (int64_t g = 0; g < gpr; g++) {
            const float *wg = w + r * cols + g * 32;
            float own = nt_q4_group_best_scale(wg);
            int code = code_bits(codes + r * cstride, g);
            double chosen = group_err(wg, nt_q4tp_scale(base, step, code));
            row_err += chosen;
            if (own < 0x1p-126f) {
                minmax_err += chosen; /* coded as zeros either way */
                continue;
            }
            double l = log2(own);
            if (lmin < lmax) minmax_err += grid_group_err(wg, l, mm_base, mm_step);
            if (step > 0) {
                double c = fmax(-1.0, fmin(32.0, (l - base) / step)); /* int-safe */
                int lo = (int)floor(c), hi = lo + 1;
                lo = lo < 0 ? 0 : lo > 31 ? 31 : lo;
                hi = hi < 0 ? 0 : hi > 31 ? 31 : hi;
                double near = fmin(group_err(wg, nt_q4tp_scale(base, step, lo)), group_err(wg, nt_q4tp_scale(base, step, hi)));
                if (chosen > near * (1 + 1e-5)) bad++;
            }
        }
        /* 1e-5: the quantizer compares grids by f32 group errors, this sum is in double */
        if (lmin < lmax && row_err > minmax_err * (1 + 1e-5)) bad++;
        /* unused bits of the row's last code byte stay zero */
        if (gpr * 5 % 8 && codes[r * cstride + cstride - 1] >> (gpr * 5 % 8)) bad++;
        for (int64_t g = 0; g < gpr; g++) {
            int code = code_bits(codes + r * cstride, g);
            if (code != nt_q4tp_code(p, rows, cols, r, g)) bad++;
            float s = nt_q4tp_scale(base, step, code);
            if (!(s >= 0x1p-126f) || !isfinite(s)) bad++;
            for (int k = 0; k < 32; k++) {
                double x = w[r * cols + g * 32 + k];
                int l = nibble_bits(p + (r * gpr + g) * 16, k) - 8;
                double err = fabs(x - (double)s * l), best = INFINITY;
                for (int m = -8; m <= 7; m++) best = fmin(best, fabs(x - (double)s * m));
                /* the nearest level: equal up to the f32 rounding of w * (1/s) near a tie */
                if (err > best + 1e-5 * s) bad++;
            }
        }
    }
    return bad;
}

static void test_q4_random(void) {
    int64_t rows = 67, cols = 2688;
    for (int d = GAUSS; d <= OUTLIER_COLS; d++) {
        float *w = random_matrix(d, rows, cols);
        uint64_t size;
        uint8_t *p = quantize(NT_DTYPE_Q4TP, w, rows, cols, &size);
        int bad = q4_violations(w, p, rows, cols);
        CHECK(bad == 0 && tail_untouched(p, size), "q4tp %s: %d invariant violations", dist_name[d], bad);
        float *deq = dequant_all(NT_DTYPE_Q4TP, p, rows, cols);
        double e4 = rel_rms(w, deq, (size_t)(rows * cols));
        /* 4-bit levels with an MSE-optimal scale per 32; measured 0.0866 Gaussian, 0.132
         * Student-t(3), 0.164 outlier columns (the outliers set the scales of their groups) */
        double bound = d == GAUSS ? 0.09 : d == STUDENT_T3 ? 0.14 : 0.17;
        CHECK(e4 < bound, "q4tp %s: relative RMS error %.4e (bound %.2f)", dist_name[d], e4, bound);
        /* rows are independent: quantizing rows 5..9 alone gives the same bytes */
        int64_t gpr = cols / 32, cstride = nt_q4tp_cstride(cols);
        uint8_t *nib = malloc((size_t)(5 * gpr * 16)), *codes = malloc((size_t)(5 * cstride));
        uint32_t params[5];
        nt_q4tp_quantize_rows(w + 5 * cols, 5, cols, nib, params, codes);
        int same = memcmp(nib, p + 5 * gpr * 16, (size_t)(5 * gpr * 16)) == 0 &&
                   memcmp(codes, p + rows * gpr * 16 + 4 * rows + 5 * cstride, (size_t)(5 * cstride)) == 0;
        for (int i = 0; i < 5; i++) same &= params[i] == rd32(p + rows * gpr * 16 + 4 * (5 + i));
        CHECK(same, "q4tp %s: rows quantized alone give the same bytes", dist_name[d]);
        free(nib);
        free(codes);
        free(deq);
        free(p);
        free(w);
    }
    /* every column count of the size list, and extreme magnitudes */
    static const int64_t cols_list[] = {32, 64, 1856, 3712};
    for (size_t i = 0; i < 4; i++) {
        float *w = random_matrix(STUDENT_T3, 3, cols_list[i]);
        uint64_t size;
        uint8_t *p = quantize(NT_DTYPE_Q4TP, w, 3, cols_list[i], &size);
        CHECK(q4_violations(w, p, 3, cols_list[i]) == 0 && tail_untouched(p, size), "q4tp 3x%lld invariants",
              (long long)cols_list[i]);
        free(p);
        free(w);
    }
    static const float scales[] = {1e-30f, 1e-6f, 1e6f, 1e30f};
    for (size_t i = 0; i < 4; i++) {
        float *w = random_matrix(OUTLIER_COLS, 4, 256);
        for (int k = 0; k < 4 * 256; k++) w[k] *= scales[i];
        uint64_t size;
        uint8_t *p = quantize(NT_DTYPE_Q4TP, w, 4, 256, &size);
        float *deq = dequant_all(NT_DTYPE_Q4TP, p, 4, 256);
        double e = rel_rms(w, deq, 4 * 256);
        /* the 20x outlier columns set the scale of every group they are in */
        CHECK(q4_violations(w, p, 4, 256) == 0 && e < 0.2, "q4tp at magnitude %g: invariants, error %.4f",
              (double)scales[i], e);
        free(deq);
        free(p);
        free(w);
    }
    /* weights below any scale (f32 subnormals): no NaN, no inf, nibbles still the nearest */
    float tiny[64];
    for (int k = 0; k < 64; k++) tiny[k] = (float)pattern_level(k) * 1e-42f;
    uint64_t size;
    uint8_t *p = quantize(NT_DTYPE_Q4TP, tiny, 1, 64, &size);
    float *deq = dequant_all(NT_DTYPE_Q4TP, p, 1, 64);
    int fin = 1;
    for (int k = 0; k < 64; k++) fin &= isfinite(deq[k]);
    CHECK(fin && q4_violations(tiny, p, 1, 64) == 0, "subnormal weights: finite, nearest levels");
    free(deq);
    free(p);
}

/* q4tp against the 4.5-bit baseline (src/quant/baseline.h: the same levels -8..7, one f16
 * scale per 32 found by the same search) on every distribution, at Nemotron-3-Nano's row
 * lengths (2688 hidden, 1856 expert, 3712 2 x expert) and the demo's and fixtures' (256, 64).
 *
 * The bound is not "no worse", because no q4tp quantizer can be: a q4tp group is levels -8..7
 * times one positive scale, which is also a baseline group (up to the f16 rounding of the scale,
 * 2^-11 relative, which the baseline's choice between the two f16 neighbours absorbs), so with
 * equal search the baseline's error is a floor for q4tp's, reached only where a row's grid of 32
 * scales happens to meet each group's best scale. The gap is what the 5-bit codes cost (0.33
 * bits per weight less): a brute-force search over 20000 (base, step) pairs per row
 * (docs/QUANT.md) still leaves +0.29% Gaussian, +0.70% Student-t(3), +0.80% outlier columns at
 * 84 groups per row. Q4TP_GRID_COST is that deficit as the quantizer leaves it, measured on
 * these matrices and rounded up by ~0.1 point, so the test fails if the quantizer gets worse,
 * not to excuse the gap: docs/QUANT.md reports it as a deficit of the format. It shrinks with
 * fewer groups per row (a finer grid for fewer scales) and vanishes at one or two. */
static void test_q4_vs_baseline(void) {
    static const int64_t widths[] = {2688, 1856, 3712, 256, 64};
    /* [distribution][width]: measured (in %, NT_QUANT_VERBOSE=1 prints them) Gaussian 0.42 0.33
     * 0.41 0.10 0.00, Student-t(3) 0.82 0.74 1.00 0.19 0.00, outlier columns 1.13 1.05 1.25 0.35
     * 0.00, outlier rows 0.40 0.34 0.39 0.09 0.00 (the quantizer with FORMATS.md's min / max
     * grid alone: 0.46 0.37 0.45 0.12, 0.90 0.82 1.07 0.25, 1.31 1.21 1.40 0.57, 0.43 0.36
     * 0.43 0.13). The 0.1% at 64 columns covers one or two scales coded through f16 log2s. */
    static const double Q4TP_GRID_COST[4][5] = {
        {0.0052, 0.0045, 0.0052, 0.0020, 0.0010},
        {0.0090, 0.0085, 0.0110, 0.0030, 0.0010},
        {0.0125, 0.0115, 0.0135, 0.0045, 0.0010},
        {0.0050, 0.0045, 0.0050, 0.0020, 0.0010},
    };
    for (int d = GAUSS; d <= OUTLIER_ROWS; d++)
        for (int i = 0; i < 5; i++) {
            /* 67 rows (an odd count) of the long widths, 256 of the short ones: ~180 k and
             * ~65 k weights */
            int64_t cols = widths[i], rows = cols >= 1024 ? 67 : 256, n = rows * cols;
            float *w = random_matrix(d, rows, cols), *base = malloc((size_t)n * sizeof *base);
            uint64_t size;
            uint8_t *p = quantize(NT_DTYPE_Q4TP, w, rows, cols, &size);
            float *deq = dequant_all(NT_DTYPE_Q4TP, p, rows, cols);
            nt_q4_baseline_roundtrip(w, rows, cols, base);
            double e4 = rel_rms(w, deq, (size_t)n), eb = rel_rms(w, base, (size_t)n);
            CHECK(e4 <= eb * (1 + Q4TP_GRID_COST[d][i]), "q4tp %s %lldx%lld: %.5e vs baseline %.5e (%+.3f%%, allowed %+.1f%%)",
                  dist_name[d], (long long)rows, (long long)cols, e4, eb, 100 * (e4 / eb - 1), 100 * Q4TP_GRID_COST[d][i]);
            if (getenv("NT_QUANT_VERBOSE"))
                printf("q4tp %-12s %4lldx%-4lld %.5e baseline %.5e %+.3f%%\n", dist_name[d], (long long)rows,
                       (long long)cols, e4, eb, 100 * (e4 / eb - 1));
            free(deq);
            free(p);
            free(base);
            free(w);
        }
}

static void test_q4_scale(void) {
    /* the exactly specified exp2 against exp2 in double of the same t = fma(code, step, base)
     * (the f32 t is the function's defined input): within 1.2e-7 relative (truncation < 6e-9
     * plus the f32 roundings of Horner's steps and the final multiply) */
    double worst = 0;
    for (int ib = -400; ib <= 100; ib += 3) {
        /* bases on f16's grid, as the payload stores them */
        float base = nt_f16_to_f32(nt_f32_to_f16((float)ib * 0.0731f));
        static const float steps[] = {0.0f, 0x1p-20f, 0.00390625f, 0.0371f, 0.1f, 0.2509f, 0.5f, 1.0f};
        for (size_t j = 0; j < sizeof steps / sizeof *steps; j++) {
            float step = nt_f16_to_f32(nt_f32_to_f16(steps[j]));
            for (int code = 0; code < 32; code++) {
                float t = fmaf((float)code, step, base);
                double want = exp2((double)t), got = nt_q4tp_scale(base, step, code);
                double rel = fabs(got - want) / want;
                worst = rel > worst ? rel : worst;
            }
        }
    }
    CHECK(worst < 1.2e-7, "nt_q4tp_scale vs exp2: worst relative error %.3e", worst);
    /* integers are exact powers of two; t is clamped to [-126, 126], NaN to -126 */
    int pow2 = 1;
    for (int k = -126; k <= 126; k++) pow2 &= nt_q4tp_scale((float)k, 0.0f, 0) == ldexpf(1.0f, k);
    CHECK(pow2, "integer t gives exact powers of two");
    CHECK(nt_q4tp_scale(-200.0f, 0.0f, 0) == 0x1p-126f && nt_q4tp_scale(-126.5f, 0.0f, 0) == 0x1p-126f,
          "t below -126 clamps to 2^-126");
    CHECK(nt_q4tp_scale(100.0f, 2.0f, 31) == 0x1p126f && nt_q4tp_scale(126.25f, 0.0f, 0) == 0x1p126f,
          "t above 126 clamps to 2^126");
    CHECK(nt_q4tp_scale(NAN, 1.0f, 3) == 0x1p-126f, "NaN t gives 2^-126");
    CHECK(nt_q4tp_scale(-3.0f, 0.5f, 3) == nt_q4tp_scale(-1.5f, 0.0f, 0), "t = base + code * step");
}

/* ------------------------------------------------------------------------------------------ */
/* readers agree; plain dtypes                                                                */

static void test_dequant_agrees(void) {
    int64_t rows = 5, cols = 192;
    float *w = random_matrix(OUTLIER_COLS, rows, cols);
    uint64_t size;
    uint8_t *p8 = quantize(NT_DTYPE_Q8_2F, w, rows, cols, &size);
    uint8_t *p4 = quantize(NT_DTYPE_Q4TP, w, rows, cols, &size);
    int ok8 = 1, ok4 = 1;
    float row[192];
    for (int64_t r = 0; r < rows; r++) {
        nt_matrix_dequant_row(NT_DTYPE_Q8_2F, p8, rows, cols, r, row);
        for (int64_t c = 0; c < cols; c++)
            ok8 &= row[c] == nt_q8_2f_row_scale(p8, rows, cols, r) * (float)(int8_t)p8[r * cols + c] *
                                 nt_q8_2f_col_field(p8, rows, cols, c);
        nt_matrix_dequant_row(NT_DTYPE_Q4TP, p4, rows, cols, r, row);
        for (int64_t c = 0; c < cols; c++)
            ok4 &= row[c] == nt_q4tp_group_scale(p4, rows, cols, r, c / 32) * (float)nt_q4tp_nibble(p4, rows, cols, r, c);
    }
    CHECK(ok8, "q8_2f dequant row = rs * q * cs of the element readers");
    CHECK(ok4, "q4tp dequant row = group scale * nibble of the element readers");
    free(p8);
    free(p4);

    /* plain dtypes round-trip through the f16 / bf16 conversions */
    static const enum nt_dtype plain[] = {NT_DTYPE_F32, NT_DTYPE_F16, NT_DTYPE_BF16};
    for (size_t i = 0; i < 3; i++) {
        uint8_t *p = quantize(plain[i], w, rows, cols, &size);
        int ok = tail_untouched(p, size);
        for (int64_t r = 0; r < rows; r++) {
            nt_matrix_dequant_row(plain[i], p, rows, cols, r, row);
            for (int64_t c = 0; c < cols; c++) {
                float x = w[r * cols + c];
                float want = plain[i] == NT_DTYPE_F32 ? x
                             : plain[i] == NT_DTYPE_F16 ? nt_f16_to_f32(nt_f32_to_f16(x))
                                                        : nt_bf16_to_f32(nt_f32_to_bf16(x));
                ok &= row[c] == want;
                if (plain[i] == NT_DTYPE_F16) ok &= rd16(p + 2 * (r * cols + c)) == nt_f32_to_f16(x);
            }
        }
        CHECK(ok, "%s: payload and dequant row", nt_dtype_name(plain[i]));
        free(p);
    }
    free(w);
}

/* The group search itself: on groups with a known best scale it finds it, and it is never worse
 * than the two plain max-abs scales. */
static void test_group_search(void) {
    float g[32];
    for (int k = 0; k < 32; k++) g[k] = 0.03125f * (float)pattern_level(k);
    float s = nt_q4_group_best_scale(g);
    CHECK(s == 0.03125f && nt_q4_group_error(g, s) == 0.0f, "exact levels: scale %g found", (double)s);
    memset(g, 0, sizeof g);
    CHECK(nt_q4_group_best_scale(g) == 0.0f, "zero group: scale 0");
    int never_worse = 1;
    for (int t = 0; t < 2000; t++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) {
            g[k] = (float)(t % 2 ? student_t3() : gaussian());
            amax = fabsf(g[k]) > amax ? fabsf(g[k]) : amax;
        }
        float e = nt_q4_group_error(g, nt_q4_group_best_scale(g));
        never_worse &= e <= nt_q4_group_error(g, amax / 7.0f) && e <= nt_q4_group_error(g, amax / 8.0f);
    }
    CHECK(never_worse, "the search beats max/7 and max/8 on 2000 random groups");
}

int main(void) {
    test_sizes();
    test_accepts();
    test_q8_reader();
    test_q4_reader();
    test_q8_small();
    test_q8_random();
    test_q4_exact();
    test_q4_random();
    test_q4_vs_baseline();
    test_q4_scale();
    test_dequant_agrees();
    test_group_search();
    return test_summary("quant");
}
