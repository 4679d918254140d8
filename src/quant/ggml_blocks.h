/* ggml_blocks.h - llama.cpp's (ggml's) quantized block types as engine dtypes: which GGUF types
 * the engine runs natively, their block facts, the exact decoders, and the per-block unpacking
 * the CPU products (src/cpu/matmul_ggml.c) compute with.
 *
 * A matrix of one of these dtypes is its GGUF tensor's bytes, read in place: row r is
 * cols / block_elems blocks of block_bytes bytes, rows one after another (ggml's layout; every
 * row length is a whole number of blocks). Multi-byte fields are little-endian and no block is
 * assumed aligned (a GGUF data section aligns tensors, not blocks: Q6_K's block is 210 bytes).
 *
 * The types and their block layouts (bytes in order; d, dmin, m are f16; "codes" little-endian
 * bit fields), and the value each element decodes to, exactly as llama.cpp's dequantizer
 * computes it in f32 (docs/FORMATS-GGUF.md has the same with the product arithmetic):
 *   Q8_0   32 el, 34 B: d, int8 q[32].                                 w = q * d
 *   Q4_0   32 el, 18 B: d, qs[16]: el j<16 low nibble of qs[j], el j+16 its high nibble.
 *                                                                      w = (n - 8) * d
 *   Q4_1   32 el, 20 B: d, m, qs[16] (as Q4_0).                        w = n * d + m
 *   Q5_0   32 el, 22 B: d, qh (u32), qs[16]: n as Q4_0 plus bit j of qh as bit 4 of el j.
 *                                                                      w = (n - 16) * d
 *   Q5_1   32 el, 24 B: d, m, qh, qs[16] (as Q5_0).                    w = n * d + m
 *   IQ4_NL 32 el, 18 B: d, qs[16] (as Q4_0); K = {-127,-104,-83,-65,-49,-35,-22,-10,1,13,25,38,
 *          53,69,89,113}.                                              w = d * K[n]
 *   MXFP4  32 el, 17 B: e (E8M0), qs[16] (as Q4_0); E2M1 doubled: K = {0,1,2,3,4,6,8,12,
 *          0,-1,-2,-3,-4,-6,-8,-12}; s = 2^(e-128) as an f32 (subnormal for e = 0, 1; e = 255
 *          is 2^127, not NaN: llama.cpp does not special-case it).      w = K[n] * s
 *   Q4_K  256 el, 144 B: d, dmin, sc[12], qs[128]. Sub-block j = 0..7 of 32 elements; 6-bit
 *          scale S_j and min M_j: j < 4: S = sc[j] & 63, M = sc[j+4] & 63; j >= 4:
 *          S = (sc[j+4] & 15) | (sc[j-4] >> 6) << 4, M = (sc[j+4] >> 4) | (sc[j] >> 6) << 4.
 *          Element 32j + l: n = nibble of qs[32 (j/2) + l], low for even j, high for odd j.
 *                                                                      w = (d * S) * n - dmin * M
 *   Q5_K  256 el, 176 B: d, dmin, sc[12], qh[32], qs[128]: n as Q4_K plus bit j of qh[l] as
 *          bit 4 of element 32j + l.                                   w = (d * S) * n - dmin * M
 *   Q6_K  256 el, 210 B: ql[128], qh[64], int8 sc[16], d (last). Element e = 128h + 32k + l
 *          (h half, k = 0..3, l = 0..31): low 4 bits from ql[64h + l + 32 (k & 1)], low nibble
 *          for k < 2, high for k >= 2; bits 4-5 are bits 2k, 2k+1 of qh[32h + l]; n - 32 with the
 *          scale sc[e / 16].                                           w = (d * sc) * (n - 32)
 * Scales that are Inf or NaN decode as llama.cpp's do (to Inf / NaN weights, and NaN for 0 * Inf)
 * and are not refused here; a GGUF loader that wants to refuse them checks the scales itself.
 */
#ifndef NT_GGML_BLOCKS_H
#define NT_GGML_BLOCKS_H

#include "../common.h"
#include "../model/safetensors.h"

#include <string.h>

/* 1 and *out set when the engine runs ggml type `ggml_type` (a GGUF tensor type id, the
 * numbers of src/model/gguf.h's enum nt_ggml_type) natively: F32, F16, BF16 as the plain
 * dtypes, and the block types above; 0 otherwise (*out untouched). */
int nt_dtype_of_ggml_type(uint32_t ggml_type, enum nt_dtype *out);

/* 1 when d is one of the ggml block dtypes (NT_DTYPE_GGML_*). */
int nt_dtype_is_ggml_block(enum nt_dtype d);

/* Block facts of a ggml block dtype: elements and bytes per block, ggml's type id; 0 (and the
 * outputs untouched) for any other dtype. The name is nt_dtype_name(d) ("Q4_K", ...). */
int nt_ggml_block_facts(enum nt_dtype d, int *block_elems, int *block_bytes, uint32_t *ggml_type);

/* Decodes nblocks consecutive blocks of type d at `blocks` into nblocks * block_elems floats,
 * exactly llama.cpp's values (the table above). */
void nt_ggml_dequant_blocks(enum nt_dtype d, const uint8_t *blocks, int64_t nblocks, float *out);

/* One 32-column sub-block of a row as the products compute with it (matmul_ggml.c, and the
 * decoders: every type's value is w[c] = (d * (float)k[c / 16]) * (float)q[c] + m * (float)mk,
 * the last term only when has_min). q are the integer codes (Q4_0: n - 8, Q5_0: n - 16, Q6_K:
 * n - 32, IQ4_NL / MXFP4: the codebook's integer, Q4_1 / Q5_1 / Q4_K / Q5_K: n itself); k the
 * integer sub-block scales of columns 0-15 and 16-31 (the K-quants' S or sc, 1 otherwise); d
 * the f32 block scale (d widened from f16, MXFP4's 2^(e-128)); mk, m the minimum's integer
 * factor and f32 scale (Q4_1 / Q5_1: 1 and m; Q4_K / Q5_K: M_j and -dmin; others 0 and 0). */
struct nt_ggml_sub {
    int8_t q[32];
    int32_t k[2];
    float d;
    int32_t mk;
    float m;
    int has_min;
};

/* Sub-block b (columns 32b .. 32b + 31) of a row of type d starting at `row`. */
void nt_ggml_sub_block(enum nt_dtype d, const uint8_t *row, int64_t b, struct nt_ggml_sub *out);

/* ---- the pieces a SIMD unpacker needs too (src/cpu/matmul_ggml.c) ---------------------------- */

/* IQ4_NL's codebook and MXFP4's E2M1 values doubled. */
extern const int8_t nt_ggml_iq4nl_values[16];
extern const int8_t nt_ggml_mxfp4_values[16];

/* MXFP4's scale 2^(e - 128) as an f32, built from its bits (e = 0, 1: the subnormals 2^-128,
 * 2^-127; no NaN). */
static inline float nt_ggml_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Q4_K / Q5_K: the 6-bit scale S and min M of sub-block j (0..7) from the 12 packed bytes sc. */
static inline void nt_ggml_k_scale_min(const uint8_t *sc, int j, int *S, int *M) {
    if (j < 4) {
        *S = sc[j] & 63;
        *M = sc[j + 4] & 63;
    } else {
        *S = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
        *M = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

#endif /* NT_GGML_BLOCKS_H */
