/* baseline.h - the 4-bit format q4tp is measured against: one f16 scale per 32 weights.
 *
 * Symmetric 4-bit levels -8..7 with a plain f16 scale per group of 32 (4.5 bits per weight),
 * the common layout of 4-bit formats with a per-group scale. It exists only as a yardstick for
 * the docs and tests (dev/quant/tensor_error.c, tests/unit/test_quant.c): no payload, no reader,
 * just quantize-then-dequantize to f32. Its scales get the same search as q4tp's
 * (nt_q4_group_best_scale, then the better of the two f16 values around it), so a comparison
 * measures the formats, not the effort spent on one of them.
 */
#ifndef NT_QUANT_BASELINE_H
#define NT_QUANT_BASELINE_H

#include <stdint.h>

/* 4 bits per weight plus one f16 scale per 32 weights */
#define NT_Q4_BASELINE_BITS 4.5

/* out[r][c] = the dequantized value of W[r][c] for nrows rows of cols weights (cols % 32 == 0);
 * out may not alias W. Finite input assumed, as for the real quantizers. */
void nt_q4_baseline_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out);

/* The same, with the f16 scale's sign used too: per group the better of the searched positive
 * scale and the searched negative one. A negative scale mirrors the levels to -7..8, so a group
 * can give its extra level to whichever side holds its largest weight; q4tp's scales, powers of
 * two, are always positive. This is the strongest use of the layout (within 0.03% of an
 * exhaustive scale search per sign, measured), the bound any positive-scale format meets. */
void nt_q4_baseline_signed_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out);

/* The same layout with the scale most 4-bit formats of that layout use (llama.cpp's Q4_0): the
 * group's weight of largest magnitude m, scale d = m / -8 rounded to f16, levels the nearest
 * integers to w / d clamped to -8..7 (so m itself lands on -8 exactly). No search: it shows what
 * the searched scales of nt_q4_baseline_roundtrip and q4tp gain over the usual practice. */
void nt_q4_baseline_amax_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out);

#endif /* NT_QUANT_BASELINE_H */
