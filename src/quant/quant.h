/* quant.h - the packed weight formats q8_2f and q4tp (FORMATS.md): sizes, quantizers, readers.
 *
 * A payload is the exact byte image FORMATS.md lays out (and the seed's pb_q8_bank /
 * pb_q4_bank read); the same bytes are stored in a .nemo, mmap-ed by the CPU backend and
 * uploaded by the CUDA backend. Everything here is plain scalar C: the quantizers (used by
 * `nemotron convert`), and the element readers that define what a payload means. The CPU
 * kernels (src/cpu/matmul_q.c) compute with those same definitions; in particular every reader
 * of a q4tp group scale calls nt_q4tp_group_scale, so the scale is one f32 value everywhere.
 *
 * Payloads are byte arrays with no alignment guarantee; multi-byte fields are little-endian.
 */
#ifndef NT_QUANT_H
#define NT_QUANT_H

#include "../common.h"
#include "../model/safetensors.h"

#include <math.h>
#include <string.h>

/* ---- sizes and layout ------------------------------------------------------------------- */

/* Groups of q4tp and bytes of one row's group codes: cstride = ceil(gpr * 5 / 8). */
#define NT_Q4TP_GROUP 32
static inline int64_t nt_q4tp_gpr(int64_t cols) { return cols / NT_Q4TP_GROUP; }
static inline int64_t nt_q4tp_cstride(int64_t cols) { return (nt_q4tp_gpr(cols) * 5 + 7) / 8; }

/* Byte offsets of the parts inside a payload. */
static inline uint64_t nt_q8_2f_rs_offset(int64_t rows, int64_t cols) { return (uint64_t)rows * (uint64_t)cols; }
static inline uint64_t nt_q8_2f_cs_offset(int64_t rows, int64_t cols) {
    return (uint64_t)rows * (uint64_t)cols + 2u * (uint64_t)rows;
}
static inline uint64_t nt_q4tp_params_offset(int64_t rows, int64_t cols) {
    return (uint64_t)rows * (uint64_t)nt_q4tp_gpr(cols) * 16u;
}
static inline uint64_t nt_q4tp_codes_offset(int64_t rows, int64_t cols) {
    return nt_q4tp_params_offset(rows, cols) + 4u * (uint64_t)rows;
}

/* 1 when a rows x cols matrix can be stored in the format: rows >= 1, cols >= 1, and
 * cols % 4 == 0 (q8_2f), cols % 32 == 0 (q4tp); every dtype of nt_dtype_size > 0 accepts any
 * shape. On 0, *why (if given) says what is wrong, e.g. "cols 100 is not a multiple of 32". */
int nt_format_accepts(enum nt_dtype fmt, int64_t rows, int64_t cols, const char **why);

/* Payload bytes of a rows x cols matrix, padding included (q8_2f: to a multiple of 4; q4tp: to
 * a multiple of 4 plus one spare u32 word). For the plain dtypes rows * cols * element size.
 * The shape must be accepted by nt_format_accepts. */
uint64_t nt_matrix_bytes(enum nt_dtype fmt, int64_t rows, int64_t cols);

/* ---- readers (the meaning of a payload) ------------------------------------------------- */

/* A q4tp group scale, 2^(base + code * step), as one exactly specified f32 computation that the
 * scalar and AVX2 CPU kernels and the CUDA kernels all reproduce bit for bit (libm's exp2f is
 * neither cheap enough per group nor the same on every device):
 *   t = fma(code, step, base), clamped to [-126, 126] (NaN -> -126);
 *   i = rint(t) (nearest, ties to even); f = t - i, exact, in [-0.5, 0.5];
 *   p = 1 + f (ln2 + f (ln2^2/2 + ... + f ln2^7/7!)) by Horner with fma (Taylor, degree 7:
 *       truncation error below 6e-9 relative, under half an f32 ulp);
 *   scale = p * 2^i (an exact multiply by a power of two).
 * Scales below 2^-126 would be subnormal and carry no useful precision; the quantizer never
 * writes them. */
#define NT_EXP2_C1 0.693147180559945309f
#define NT_EXP2_C2 0.240226506959100712f
#define NT_EXP2_C3 0.0555041086648215800f
#define NT_EXP2_C4 0.00961812910762847717f
#define NT_EXP2_C5 0.00133335581464284434f
#define NT_EXP2_C6 0.000154035303933816099f
#define NT_EXP2_C7 0.0000152527338040598403f

/* Compiled for the GPU too (src/cuda): one definition of the arithmetic for every backend. */
#ifdef __CUDACC__
#define NT_HOST_DEVICE __host__ __device__
#else
#define NT_HOST_DEVICE
#endif
NT_HOST_DEVICE static inline float nt_q4tp_scale(float base, float step, int code) {
    float t = fmaf((float)code, step, base);
    if (!(t > -126.0f)) t = -126.0f;
    if (t > 126.0f) t = 126.0f;
    float i = rintf(t);
    float f = t - i;
    float p = NT_EXP2_C7;
    p = fmaf(p, f, NT_EXP2_C6);
    p = fmaf(p, f, NT_EXP2_C5);
    p = fmaf(p, f, NT_EXP2_C4);
    p = fmaf(p, f, NT_EXP2_C3);
    p = fmaf(p, f, NT_EXP2_C2);
    p = fmaf(p, f, NT_EXP2_C1);
    p = fmaf(p, f, 1.0f);
    uint32_t bits = (uint32_t)((int)i + 127) << 23;
    float pow2;
    memcpy(&pow2, &bits, 4);
    return p * pow2;
}

/* q8_2f: rs[r] and cs[c] as f32. */
float nt_q8_2f_row_scale(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r);
float nt_q8_2f_col_field(const uint8_t *payload, int64_t rows, int64_t cols, int64_t c);
/* q4tp: the 5-bit code of group g of row r, and the group's scale
 * nt_q4tp_scale(base[r], step[r], code) (base and step widened from f16 with nt_f16_to_f32). */
int nt_q4tp_code(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t g);
float nt_q4tp_group_scale(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t g);
/* The nibble value (-8..7) of weight (r, c). */
int nt_q4tp_nibble(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t c);

/* Row r of the matrix as f32 (q8_2f: rs * q * cs; q4tp: scale * nibble; plain dtypes widened). */
void nt_matrix_dequant_row(enum nt_dtype fmt, const void *payload, int64_t rows, int64_t cols,
                           int64_t r, float *out);

/* ---- quantizers ------------------------------------------------------------------------- */

/* The quantizers assume finite input (no NaN or infinity); the converter checks its source.
 * They are reentrant and keep no state: callers may run disjoint row ranges on several threads. */

/* q8_2f's column field depends on every row, so it is chosen in two steps that a streaming
 * converter can run chunk by chunk: fold rows into per-column statistics (colmax starts at 0;
 * nt_q8_2f_col_stats raises colmax[c] to the largest |W[r][c]| it sees), then derive the f16
 * field. The field is cs[c] = K * colmax[c]^NT_Q8_2F_ALPHA, with K a power of two chosen from
 * colmax alone so that neither cs nor the row scales that follow leave f16's normal range for
 * ordinary weights (q8_2f.c says how); an all-zero column gets cs = K. */
/* Measured with dev/quant/tensor_error.c on the trained demo model (models/nemotron-h-kjv),
 * relative RMS weight error over all its 2-D tensors: alpha 0: 6.70e-3, 0.3: 6.56e-3,
 * 0.5: 6.52e-3, 0.6: 6.509e-3, 0.65: 6.508e-3, 0.7: 6.51e-3, 1: 6.58e-3 (projections alone:
 * the same minimum). The random-weight fixtures have no column structure and are flat within 2%
 * between 0.1 and 1. The error in the weights ignores the activations: x' = x * cs grows where
 * cs does, which a model-level measurement (KL divergence) should confirm. */
#define NT_Q8_2F_ALPHA 0.6f
void nt_q8_2f_col_stats(float *colmax, const float *W, int64_t nrows, int64_t cols);
void nt_q8_2f_col_field_choose(const float *colmax, int64_t cols, uint16_t *cs_f16);
/* The same with another exponent (0 = no column field: cs is one constant); for measurements
 * (dev/quant/tensor_error.c), the converter uses the default. */
void nt_q8_2f_col_field_choose_alpha(const float *colmax, int64_t cols, float alpha, uint16_t *cs_f16);
/* Quantizes nrows rows against the chosen field: q (nrows x cols int8, row-major) and rs
 * (nrows f16). rs[r] is the smallest f16 not below max_c |W[r][c] / cs[c]| / 127 (so nothing
 * clips), and q the nearest integer to W / (rs * cs) with rs and cs as decoded from f16, the
 * values a reader sees, clamped to [-127, 127]. A row of zeros gets rs = 0 and q = 0. */
void nt_q8_2f_quantize_rows(const float *W, int64_t nrows, int64_t cols, const uint16_t *cs_f16,
                            int8_t *q, uint16_t *rs_f16);

/* q4tp rows are independent: nibbles (nrows * gpr * 16 bytes, FORMATS.md word order), the row
 * params (nrows u32: base f16 | step f16 << 16) and the group codes (nrows * cstride bytes,
 * every bit written, unused high bits 0). Per row: each group's own scale
 * (nt_q4_group_best_scale); two candidate grids, FORMATS.md's (base = the smallest log2 scale
 * rounded down to f16, step = the range / 31 rounded up, so it spans every group; step 0 and
 * base the nearest f16 when all scales are equal) and that grid refitted to the groups by
 * weighted least squares (q4tp.c); on each, each group's code the best, by the error of its
 * re-rounded nibbles, of the grid points floor - 1 .. ceil + 1 around its own scale; the grid
 * with the smaller row error is kept, the nibbles the nearest levels under the coded scales.
 * Zero groups: nibbles 8, code 0; zero rows: params 0. About 50 M weights/s per core for
 * 2688-wide rows (17-19 k rows/s; the min / max grid alone was 25-31 k), measured on this
 * project's 2-core x86-64 build machine. */
void nt_q4tp_quantize_rows(const float *W, int64_t nrows, int64_t cols, uint8_t *nibbles,
                           uint32_t *params, uint8_t *codes);

/* One group of 32 weights on the 16 levels -8..7 (q4tp's groups, and the comparison baseline of
 * src/quant/baseline.h). A level is L = clamp(round(w * (1 / scale)), -8, 7), rounding to
 * nearest even; the reciprocal is one f32 division, so L can differ from the exact nearest level
 * only where w / scale lies within a few f32 ulps of a half-integer. scale > 0 with 1 / scale
 * finite (a normal f32, e.g. any f16 or q4tp scale). */
void nt_q4_group_levels(const float *w, float scale, int8_t *levels);
/* The sum of squared errors sum (w - scale * L)^2 of those levels, in f32 (it overflows to
 * infinity only for weights beyond ~1e18; q4tp's own search works on power-of-two-normalised
 * groups and has no such limit). */
float nt_q4_group_error(const float *w, float scale);
/* A scale that nearly minimises nt_q4_group_error: the best of 9 candidates that put the
 * largest |w| on levels 6.5 .. 9.5, each refit by least squares for its levels, then one more
 * refit; 0.02-0.1% above a 400-candidate search in RMS error (q4tp.c has the measurements).
 * 0 for an all-zero group, and for a group of f32 subnormals whose scale underflows. Computed
 * on the group scaled by a power of two, so it works across the whole f32 range. */
float nt_q4_group_best_scale(const float *w);

/* Writes a whole payload of `fmt` from an f32 matrix (tests, small tools; the converter streams
 * the parts itself). dst holds nt_matrix_bytes(fmt, rows, cols) bytes, at any alignment;
 * padding is zeroed. Rows are spread over the OpenMP team; q8_2f's column scratch (6 bytes per
 * column) is allocated, and a failed allocation aborts (NT_ASSERT). */
void nt_quantize_matrix(enum nt_dtype fmt, const float *W, int64_t rows, int64_t cols, uint8_t *dst);

#endif /* NT_QUANT_H */
