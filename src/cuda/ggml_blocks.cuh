/* ggml_blocks.cuh - llama.cpp's block types (src/quant/ggml_blocks.h) on the device: a row's
 * 32-column sub-blocks unpacked into the integer codes, integer sub-scales and f32 scales that
 * docs/FORMATS-GGUF.md's product arithmetic computes with, and the decoded value of one element
 * (the embedding lookup). The same facts as the CPU's unpacker, nt_ggml_sub_block, read per lane:
 * a lane of the products reads only its 4 columns of a sub-block. Blocks sit at any byte address
 * (a GGUF aligns tensors, not blocks: Q6_K's are 210 bytes), so every field is read bytewise.
 */
#ifndef NT_CUDA_GGML_BLOCKS_CUH
#define NT_CUDA_GGML_BLOCKS_CUH

#include "cuda_util.cuh"

/* IQ4_NL's codebook {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
 * and MXFP4's E2M1 values doubled {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
 * (ggml_blocks.c's tables), as int8 bytes in two words each: entry n is byte n & 7 of the low
 * word (n < 8) or the high one - arithmetic, no table in memory. */
__device__ __forceinline__ int gg_table(uint64_t lo, uint64_t hi, int n) {
    return (int8_t)(uint8_t)((n < 8 ? lo : hi) >> (8 * (n & 7)));
}
#define GG_IQ4NL_LO 0xf6eaddcfbfad9881ull
#define GG_IQ4NL_HI 0x7159453526190d01ull
#define GG_MXFP4_LO 0x0c08060403020100ull
#define GG_MXFP4_HI 0xf4f8fafcfdfeff00ull
#define GG_IQ4NL(n) gg_table(GG_IQ4NL_LO, GG_IQ4NL_HI, (n))
#define GG_MXFP4(n) gg_table(GG_MXFP4_LO, GG_MXFP4_HI, (n))

__host__ __device__ static inline bool gg_is_block(int dt) { return dt >= NT_DTYPE_GGML_Q8_0 && dt <= NT_DTYPE_GGML_Q6_K; }

/* Elements and bytes of a block of type dt. */
__host__ __device__ static inline int gg_block_elems(int dt) { return dt >= NT_DTYPE_GGML_Q4_K ? 256 : 32; }
/* Bytes of a block: Q8_0 34, Q4_0 18, Q4_1 20, Q5_0 22, Q5_1 24, IQ4_NL 18, MXFP4 17, Q4_K 144,
 * Q5_K 176, Q6_K 210, one byte each in the dtype order, read arithmetically (a switch of
 * constants becomes a table in memory, which the emulation's pointer checks refuse). */
__host__ __device__ static inline int gg_block_bytes(int dt) {
    int i = dt - NT_DTYPE_GGML_Q8_0;
    return (int)((i < 8 ? 0x9011121816141222ull >> (8 * i) : 0xd2b0ull >> (8 * (i - 8))) & 0xff);
}
__host__ __device__ static inline int64_t gg_row_bytes(int dt, int64_t cols) {
    return cols / gg_block_elems(dt) * gg_block_bytes(dt);
}

__device__ __forceinline__ float gg_f16(const uint8_t *p) { return f16f((uint16_t)ld16b(p)); }
__device__ __forceinline__ uint32_t gg_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* MXFP4's scale 2^(e - 128) from its bits (e = 0, 1: the f32 subnormals; 255: 2^127, no NaN). */
__device__ __forceinline__ float gg_e8m0_half(uint8_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}
/* Element c (0..31) of a 32-element block's nibbles qs[16]. */
__device__ __forceinline__ int gg_nibble(const uint8_t *qs, int c) { return c < 16 ? qs[c] & 15 : qs[c - 16] >> 4; }

/* The scales of one sub-block (32 columns) for one half of it (columns 0-15 or 16-31): the value
 * of column c is (d * k) * code + m * mk, the last term only when has_min. */
struct gg_scales {
    int k, mk;
    float d, m;
    bool has_min;
};

/* Where sub-block b of a row lies: its block, and its index j within the block (0 for the
 * 32-element types, 0..7 for the K-quants' 256). */
__device__ __forceinline__ const uint8_t *gg_block(int dt, const uint8_t *row, int64_t b, int *j) {
    int per = gg_block_elems(dt) / 32;
    *j = (int)(b % per);
    return row + (b / per) * gg_block_bytes(dt);
}

__device__ __forceinline__ struct gg_scales gg_scales_of(int dt, const uint8_t *blk, int j, int half) {
    struct gg_scales s = {1, 0, 0.0f, 0.0f, false};
    switch (dt) {
    case NT_DTYPE_GGML_Q4_1:
    case NT_DTYPE_GGML_Q5_1:
        s.d = gg_f16(blk);
        s.m = gg_f16(blk + 2);
        s.mk = 1;
        s.has_min = true;
        break;
    case NT_DTYPE_GGML_MXFP4: s.d = gg_e8m0_half(blk[0]); break;
    case NT_DTYPE_GGML_Q4_K:
    case NT_DTYPE_GGML_Q5_K: {
        const uint8_t *sc = blk + 4;
        s.k = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
        s.mk = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
        s.d = gg_f16(blk);
        s.m = -gg_f16(blk + 2);
        s.has_min = true;
        break;
    }
    case NT_DTYPE_GGML_Q6_K:
        s.k = (int8_t)blk[192 + 2 * j + half];
        s.d = gg_f16(blk + 208);
        break;
    default: s.d = gg_f16(blk); /* Q8_0, Q4_0, Q5_0, IQ4_NL */
    }
    return s;
}

/* The integer code of column c (0..31) of sub-block j of block blk. */
__device__ __forceinline__ int gg_code(int dt, const uint8_t *blk, int j, int c) {
    switch (dt) {
    case NT_DTYPE_GGML_Q8_0: return (int8_t)blk[2 + c];
    case NT_DTYPE_GGML_Q4_0: return gg_nibble(blk + 2, c) - 8;
    case NT_DTYPE_GGML_Q4_1: return gg_nibble(blk + 4, c);
    case NT_DTYPE_GGML_Q5_0: return (gg_nibble(blk + 6, c) | (int)((gg_u32(blk + 2) >> c) & 1) << 4) - 16;
    case NT_DTYPE_GGML_Q5_1: return gg_nibble(blk + 8, c) | (int)((gg_u32(blk + 4) >> c) & 1) << 4;
    case NT_DTYPE_GGML_IQ4_NL: return GG_IQ4NL(gg_nibble(blk + 2, c));
    case NT_DTYPE_GGML_MXFP4: return GG_MXFP4(gg_nibble(blk + 1, c));
    case NT_DTYPE_GGML_Q6_K: {
        int h = j / 4, k = j % 4;
        int lo = blk[64 * h + c + 32 * (k & 1)];
        lo = k < 2 ? lo & 15 : lo >> 4;
        return (lo | ((blk[128 + 32 * h + c] >> (2 * k)) & 3) << 4) - 32;
    }
    default: { /* Q4_K, Q5_K */
        const uint8_t *qs = blk + (dt == NT_DTYPE_GGML_Q5_K ? 48 : 16) + 32 * (j / 2);
        int n = j % 2 ? qs[c] >> 4 : qs[c] & 15;
        if (dt == NT_DTYPE_GGML_Q5_K) n |= ((blk[16 + c] >> j) & 1) << 4;
        return n;
    }
    }
}

/* Element c of a row, decoded exactly as the CPU's nt_ggml_dequant_blocks: (d * k) * code, then
 * + m * mk where there is a minimum. */
__device__ __forceinline__ float gg_value(int dt, const uint8_t *row, int64_t c) {
    int j, cc = (int)(c % 32);
    const uint8_t *blk = gg_block(dt, row, c / 32, &j);
    struct gg_scales s = gg_scales_of(dt, blk, j, cc / 16);
    float v = __fmul_rn(__fmul_rn(s.d, (float)s.k), (float)gg_code(dt, blk, j, cc));
    return s.has_min ? __fadd_rn(v, __fmul_rn(s.m, (float)s.mk)) : v;
}

#endif /* NT_CUDA_GGML_BLOCKS_CUH */
