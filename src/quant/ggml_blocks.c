/* ggml_blocks.c - llama.cpp's block types: the GGUF type map, block facts, the sub-block unpacker
 * and the exact decoders built on it (ggml_blocks.h has the layouts).
 *
 * Everything goes through nt_ggml_sub_block, so the decoders and the CPU products read a block
 * the same way: a decoded weight is (d * k) * q (+ m * mk), which is llama.cpp's expression
 * for every type (for the ones without a sub-scale k = 1 and d * 1 = d exactly; a - b is
 * a + (-b) exactly, so Q4_K's "- dmin * M" is "+ (-dmin) * M"). Plain C, byte by byte.
 */
#include "ggml_blocks.h"

#include <string.h>

/* ggml's type ids (src/model/gguf.h's enum nt_ggml_type; repeated as numbers so this file does
 * not need the reader). */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
    GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_IQ4_NL = 20,
    GGML_BF16 = 30, GGML_MXFP4 = 39
};

static const struct {
    enum nt_dtype dtype;
    uint32_t ggml;
    int elems, bytes;
} block_types[] = {
    {NT_DTYPE_GGML_Q8_0, GGML_Q8_0, 32, 34},     {NT_DTYPE_GGML_Q4_0, GGML_Q4_0, 32, 18},
    {NT_DTYPE_GGML_Q4_1, GGML_Q4_1, 32, 20},     {NT_DTYPE_GGML_Q5_0, GGML_Q5_0, 32, 22},
    {NT_DTYPE_GGML_Q5_1, GGML_Q5_1, 32, 24},     {NT_DTYPE_GGML_IQ4_NL, GGML_IQ4_NL, 32, 18},
    {NT_DTYPE_GGML_MXFP4, GGML_MXFP4, 32, 17},   {NT_DTYPE_GGML_Q4_K, GGML_Q4_K, 256, 144},
    {NT_DTYPE_GGML_Q5_K, GGML_Q5_K, 256, 176},   {NT_DTYPE_GGML_Q6_K, GGML_Q6_K, 256, 210},
};
#define N_BLOCK_TYPES ((int)(sizeof block_types / sizeof block_types[0]))

static int find_dtype(enum nt_dtype d) {
    for (int i = 0; i < N_BLOCK_TYPES; i++)
        if (block_types[i].dtype == d) return i;
    return -1;
}

int nt_dtype_of_ggml_type(uint32_t ggml_type, enum nt_dtype *out) {
    enum nt_dtype d;
    if (ggml_type == GGML_F32) {
        d = NT_DTYPE_F32;
    } else if (ggml_type == GGML_F16) {
        d = NT_DTYPE_F16;
    } else if (ggml_type == GGML_BF16) {
        d = NT_DTYPE_BF16;
    } else {
        int i = 0;
        while (i < N_BLOCK_TYPES && block_types[i].ggml != ggml_type) i++;
        if (i == N_BLOCK_TYPES) return 0;
        d = block_types[i].dtype;
    }
    *out = d;
    return 1;
}

int nt_dtype_is_ggml_block(enum nt_dtype d) { return find_dtype(d) >= 0; }

int nt_ggml_block_facts(enum nt_dtype d, int *block_elems, int *block_bytes, uint32_t *ggml_type) {
    int i = find_dtype(d);
    if (i < 0) return 0;
    if (block_elems) *block_elems = block_types[i].elems;
    if (block_bytes) *block_bytes = block_types[i].bytes;
    if (ggml_type) *ggml_type = block_types[i].ggml;
    return 1;
}

/* ---- the sub-block unpacker ------------------------------------------------------------------ */

const int8_t nt_ggml_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* E2M1 values doubled (so they are integers; the scale is halved to match). */
const int8_t nt_ggml_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static float f16_at(const uint8_t *p) { return nt_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The nibbles of a 32-element block's qs[16]: element j < 16 is qs[j]'s low nibble, j + 16 its
 * high one. */
static int nibble32(const uint8_t *qs, int c) { return c < 16 ? qs[c] & 15 : qs[c - 16] >> 4; }

void nt_ggml_sub_block(enum nt_dtype d, const uint8_t *row, int64_t b, struct nt_ggml_sub *o) {
    int i = find_dtype(d);
    NT_ASSERT(i >= 0);
    o->k[0] = o->k[1] = 1;
    o->mk = 0;
    o->m = 0.0f;
    o->has_min = 0;
    if (block_types[i].elems == 32) {
        const uint8_t *blk = row + (size_t)b * (size_t)block_types[i].bytes;
        switch (d) {
        case NT_DTYPE_GGML_Q8_0:
            o->d = f16_at(blk);
            memcpy(o->q, blk + 2, 32);
            break;
        case NT_DTYPE_GGML_Q4_0:
            o->d = f16_at(blk);
            for (int c = 0; c < 32; c++) o->q[c] = (int8_t)(nibble32(blk + 2, c) - 8);
            break;
        case NT_DTYPE_GGML_Q4_1:
            o->d = f16_at(blk);
            o->m = f16_at(blk + 2);
            o->mk = 1;
            o->has_min = 1;
            for (int c = 0; c < 32; c++) o->q[c] = (int8_t)nibble32(blk + 4, c);
            break;
        case NT_DTYPE_GGML_Q5_0: {
            uint32_t qh = u32_at(blk + 2);
            o->d = f16_at(blk);
            for (int c = 0; c < 32; c++) o->q[c] = (int8_t)((nibble32(blk + 6, c) | ((qh >> c) & 1) << 4) - 16);
            break;
        }
        case NT_DTYPE_GGML_Q5_1: {
            uint32_t qh = u32_at(blk + 4);
            o->d = f16_at(blk);
            o->m = f16_at(blk + 2);
            o->mk = 1;
            o->has_min = 1;
            for (int c = 0; c < 32; c++) o->q[c] = (int8_t)(nibble32(blk + 8, c) | ((qh >> c) & 1) << 4);
            break;
        }
        case NT_DTYPE_GGML_IQ4_NL:
            o->d = f16_at(blk);
            for (int c = 0; c < 32; c++) o->q[c] = nt_ggml_iq4nl_values[nibble32(blk + 2, c)];
            break;
        default: /* MXFP4 */
            o->d = nt_ggml_e8m0_half(blk[0]);
            for (int c = 0; c < 32; c++) o->q[c] = nt_ggml_mxfp4_values[nibble32(blk + 1, c)];
            break;
        }
        return;
    }
    /* the K-quants: super-block b / 8, sub-block j */
    const uint8_t *blk = row + (size_t)(b / 8) * (size_t)block_types[i].bytes;
    int j = (int)(b % 8);
    if (d == NT_DTYPE_GGML_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *sc = (const int8_t *)(const void *)(blk + 192);
        int h = j / 4, k = j % 4;
        o->d = f16_at(blk + 208);
        o->k[0] = sc[2 * j];
        o->k[1] = sc[2 * j + 1];
        for (int l = 0; l < 32; l++) {
            int lo = ql[64 * h + l + 32 * (k & 1)];
            lo = k < 2 ? lo & 15 : lo >> 4;
            int hi = (qh[32 * h + l] >> (2 * k)) & 3;
            o->q[l] = (int8_t)((lo | hi << 4) - 32);
        }
        return;
    }
    int S, M;
    nt_ggml_k_scale_min(blk + 4, j, &S, &M);
    o->d = f16_at(blk);
    o->m = -f16_at(blk + 2);
    o->k[0] = o->k[1] = S;
    o->mk = M;
    o->has_min = 1;
    const uint8_t *qs = blk + (d == NT_DTYPE_GGML_Q5_K ? 48 : 16) + 32 * (j / 2);
    for (int l = 0; l < 32; l++) {
        int n = j % 2 ? qs[l] >> 4 : qs[l] & 15;
        if (d == NT_DTYPE_GGML_Q5_K) n |= ((blk[16 + l] >> j) & 1) << 4;
        o->q[l] = (int8_t)n;
    }
}

/* ---- decoders ---------------------------------------------------------------------------------- */

void nt_ggml_dequant_blocks(enum nt_dtype d, const uint8_t *blocks, int64_t nblocks, float *out) {
    int i = find_dtype(d);
    NT_ASSERT(i >= 0);
    int64_t subs = nblocks * (block_types[i].elems / 32);
    for (int64_t b = 0; b < subs; b++) {
        struct nt_ggml_sub s;
        nt_ggml_sub_block(d, blocks, b, &s);
        float *y = out + 32 * b;
        float s0 = s.d * (float)s.k[0], s1 = s.d * (float)s.k[1];
        float mt = s.m * (float)s.mk;
        for (int c = 0; c < 32; c++) {
            float v = (c < 16 ? s0 : s1) * (float)s.q[c];
            y[c] = s.has_min ? v + mt : v;
        }
    }
}
