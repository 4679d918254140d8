/* q8_2f.c - the q8_2f quantizer and element readers (FORMATS.md).
 *
 * W[r][c] ~= rs[r] * q[r][c] * cs[c]. The column field cs comes from per-column max-abs
 * statistics alone (cs ~ colmax^alpha), so a streaming converter can fold rows chunk by chunk
 * before it quantizes any. The row scale then maps the row's largest |W / cs| onto 127. Every
 * q is rounded against the f16-decoded rs and cs, the values a reader sees, so the f16
 * rounding of the scales costs no accuracy beyond a slightly different grid.
 */
#include "quant.h"

#include <float.h>

#if FLT_EVAL_METHOD != 0
#error "q8_2f.c assumes FLT_EVAL_METHOD == 0 (f32 arithmetic evaluated in f32)"
#endif

/* 1.5 * 2^23: adding and subtracting it rounds |x| <= 2^22 to an integer (nearest, ties to even)
 * without a libm call (q4tp.c uses the same trick); x is clamped to [-127, 127] first. */
#define ROUND_MAGIC 12582912.0f

/* An f16 that is finite, widened exactly: the f16 exponent and mantissa shifted into an f32
 * (for a subnormal f16 an f32 subnormal) and rebiased by a multiply by 2^112. Branch-free and
 * inline, for the per-element loops below; equal to nt_f16_to_f32 on every finite input. */
static inline float f16_finite_to_f32(uint16_t h) {
    uint32_t u = ((uint32_t)(h & 0x7fffu) << 13) | ((uint32_t)(h & 0x8000u) << 16);
    float f;
    memcpy(&f, &u, 4);
    return f * 0x1p112f;
}

void nt_q8_2f_col_stats(float *colmax, const float *W, int64_t nrows, int64_t cols) {
    for (int64_t r = 0; r < nrows; r++) {
        const float *w = W + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            float a = fabsf(w[c]);
            colmax[c] = a > colmax[c] ? a : colmax[c];
        }
    }
}

/* The split of each weight's magnitude between rs and cs is free (only rs[r] * cs[c] matters),
 * so the field is a relative shape rel[c] = (colmax[c] / max colmax)^alpha in (0, 1] times a
 * power of two K = 2^e (exact, so it changes no rounding). The row scales then lie below
 * rs_max = max_c (colmax[c] / cs[c]) / 127, known here. e is chosen so that the smallest cs and
 * rs_max stand equally far above f16's smallest normal 2^-14 (each has the same room before
 * precision is lost: cs for narrow columns, rs for rows much smaller than the largest), but
 * not above 0 (cs <= 1, so x' = x * cs is never larger than x: safe for kernels that keep x' in
 * f16) unless rs_max would pass 2^15, and not below -14. Columns narrower than 2^-14 relative
 * to the widest keep cs at 2^-14 (normal); their weights are still rounded against that cs.
 * What the two f16 scales can span: |W| up to about 2^15 * 2^15 * 127 (beyond it rows clip).
 * A row smaller than the largest by more than the room left to rs (about 2^8 for weights of
 * ordinary size, max |W| from 0.01 to 10) gets a subnormal row scale: fewer significant bits,
 * but its q are still rounded against the scale as stored. */
#define F16_MIN_NORMAL_LOG2 (-14)
#define F16_MAX_LOG2 15

void nt_q8_2f_col_field_choose_alpha(const float *colmax, int64_t cols, float alpha, uint16_t *cs_f16) {
    double top = 0.0;
    for (int64_t c = 0; c < cols; c++) top = colmax[c] > top ? colmax[c] : top;
    if (top == 0.0) {
        for (int64_t c = 0; c < cols; c++) cs_f16[c] = 0x3c00u; /* 1.0: an all-zero matrix */
        return;
    }
    /* in log2: rel[c] = alpha * log2(colmax[c] / top) <= 0, and the row scales' bound before
     * the factor K: rs_max = max_c colmax[c] / (2^rel[c] * 127) */
    double rel_min = 0.0, rs_max_log2 = -INFINITY;
    for (int64_t c = 0; c < cols; c++) {
        if (colmax[c] == 0.0f) continue;
        double l = log2((double)colmax[c] / top), rel = (double)alpha * l;
        rel_min = rel < rel_min ? rel : rel_min;
        double rs = l - rel + log2(top) - log2(127.0);
        rs_max_log2 = rs > rs_max_log2 ? rs : rs_max_log2;
    }
    /* room(cs) = e + rel_min + 14, room(rs) = rs_max_log2 - e + 14: equal at e = (rs - rel) / 2 */
    double e = floor((rs_max_log2 - rel_min) / 2.0 + 0.5);
    if (e > 0.0) e = 0.0;
    if (rs_max_log2 - e > F16_MAX_LOG2) e = ceil(rs_max_log2 - F16_MAX_LOG2);
    if (e > F16_MAX_LOG2) e = F16_MAX_LOG2;
    double floor_log2 = F16_MIN_NORMAL_LOG2;
    if (e < floor_log2) e = floor_log2;
    for (int64_t c = 0; c < cols; c++) {
        double l = colmax[c] == 0.0f ? e : e + (double)alpha * log2((double)colmax[c] / top);
        cs_f16[c] = nt_f32_to_f16((float)exp2(l < floor_log2 ? floor_log2 : l));
    }
}

/* alpha measured by dev/quant/tensor_error.c (relative RMS weight error; see quant.h) */
void nt_q8_2f_col_field_choose(const float *colmax, int64_t cols, uint16_t *cs_f16) {
    nt_q8_2f_col_field_choose_alpha(colmax, cols, NT_Q8_2F_ALPHA, cs_f16);
}

/* rs = m / 127 as the smallest f16 not below it, so the largest |W / cs| maps to at most 127
 * (nearest rounding could shrink rs and clip that weight); the largest finite f16 if m is beyond
 * any f16 (absurd weights: then the row clips). */
static uint16_t row_scale_f16(float m) {
    float want = m / 127.0f;
    if (!(want < 65504.0f)) return 0x7bffu;
    uint16_t h = nt_f32_to_f16(want);
    if (nt_f16_to_f32(h) < want) h++;
    return h;
}

void nt_q8_2f_quantize_rows(const float *W, int64_t nrows, int64_t cols, const uint16_t *cs_f16,
                            int8_t *q, uint16_t *rs_f16) {
    NT_ASSERT(cols > 0 && cols % 4 == 0);
    for (int64_t r = 0; r < nrows; r++) {
        const float *w = W + r * cols;
        int8_t *qr = q + r * cols;
        float m = 0.0f;
        for (int64_t c = 0; c < cols; c++) {
            float a = fabsf(w[c]) / f16_finite_to_f32(cs_f16[c]);
            m = a > m ? a : m;
        }
        if (m == 0.0f) {
            rs_f16[r] = 0;
            memset(qr, 0, (size_t)cols);
            continue;
        }
        uint16_t rs_h = row_scale_f16(m);
        rs_f16[r] = rs_h;
        float rs = nt_f16_to_f32(rs_h);
        for (int64_t c = 0; c < cols; c++) {
            float x = w[c] / (rs * f16_finite_to_f32(cs_f16[c]));
            x = x < -127.0f ? -127.0f : x;
            x = x > 127.0f ? 127.0f : x;
            qr[c] = (int8_t)((x + ROUND_MAGIC) - ROUND_MAGIC);
        }
    }
}

/* ---- readers ---------------------------------------------------------------------------- */

float nt_q8_2f_row_scale(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r) {
    const uint8_t *p = payload + nt_q8_2f_rs_offset(rows, cols) + 2u * (uint64_t)r;
    return nt_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

float nt_q8_2f_col_field(const uint8_t *payload, int64_t rows, int64_t cols, int64_t c) {
    const uint8_t *p = payload + nt_q8_2f_cs_offset(rows, cols) + 2u * (uint64_t)c;
    return nt_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}
