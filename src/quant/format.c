/* format.c - what every matrix format shares: which shapes it takes, its payload size, reading a
 * row back as f32, and writing a whole payload from f32.
 *
 * The packed formats' own quantizers and element readers live in q8_2f.c and q4tp.c; this file
 * dispatches on the format and handles the plain dtypes (F32, F16, BF16) itself. Multi-byte
 * fields are stored byte by byte, little-endian, and no field is read or written through a
 * pointer that assumes alignment (a payload sits at any offset of a file). F32 rows are copied
 * as is: the engine runs on little-endian hosts only, as safetensors data is read in place.
 */
#include "quant.h"

#include <stdio.h>

#include "ggml_blocks.h"

/* Bytes of one row of a ggml block dtype (cols a whole number of blocks). */
static uint64_t ggml_row_bytes(enum nt_dtype fmt, int64_t cols) {
    int elems, bytes;
    NT_ASSERT(nt_ggml_block_facts(fmt, &elems, &bytes, NULL));
    return (uint64_t)(cols / elems) * (uint64_t)bytes;
}

static int is_plain(enum nt_dtype fmt) {
    return (int)fmt >= 0 && fmt < NT_DTYPE_COUNT && nt_dtype_size(fmt) > 0;
}

int nt_format_accepts(enum nt_dtype fmt, int64_t rows, int64_t cols, const char **why) {
    /* the message names the failing number; per thread so concurrent callers do not race */
    static _Thread_local char reason[96];
    const char *fail = NULL;
    uint64_t elems, bytes;
    if (rows < 1 || cols < 1) {
        snprintf(reason, sizeof reason, "shape %lld x %lld is empty", (long long)rows, (long long)cols);
        fail = reason;
    } else if (!nt_mul_ok((uint64_t)rows, (uint64_t)cols, &elems) || !nt_mul_ok(elems, 8, &bytes)) {
        /* 8 bytes per weight bounds every format's payload, padding included */
        snprintf(reason, sizeof reason, "shape %lld x %lld is too large", (long long)rows, (long long)cols);
        fail = reason;
    } else if (fmt == NT_DTYPE_Q8_2F) {
        if (cols % 4 != 0) {
            snprintf(reason, sizeof reason, "cols %lld is not a multiple of 4", (long long)cols);
            fail = reason;
        }
    } else if (fmt == NT_DTYPE_Q4TP) {
        if (cols % NT_Q4TP_GROUP != 0) {
            snprintf(reason, sizeof reason, "cols %lld is not a multiple of %d", (long long)cols,
                     NT_Q4TP_GROUP);
            fail = reason;
        }
    } else if (nt_dtype_is_ggml_block(fmt)) {
        int block;
        nt_ggml_block_facts(fmt, &block, NULL, NULL);
        if (cols % block != 0) {
            snprintf(reason, sizeof reason, "cols %lld is not a multiple of %s's block of %d", (long long)cols,
                     nt_dtype_name(fmt), block);
            fail = reason;
        }
    } else if (!is_plain(fmt)) {
        fail = "not a matrix format";
    }
    if (why) *why = fail;
    return fail == NULL;
}

static uint64_t round_up4(uint64_t n) { return (n + 3u) / 4u * 4u; }

uint64_t nt_matrix_bytes(enum nt_dtype fmt, int64_t rows, int64_t cols) {
    NT_ASSERT(nt_format_accepts(fmt, rows, cols, NULL));
    if (fmt == NT_DTYPE_Q8_2F) return round_up4(nt_q8_2f_cs_offset(rows, cols) + 2u * (uint64_t)cols);
    if (fmt == NT_DTYPE_Q4TP) {
        uint64_t used = nt_q4tp_codes_offset(rows, cols) + (uint64_t)rows * (uint64_t)nt_q4tp_cstride(cols);
        /* the spare word: the last group's 2-byte code read may reach one byte past the codes */
        return round_up4(used) + 4u;
    }
    if (nt_dtype_is_ggml_block(fmt)) return (uint64_t)rows * ggml_row_bytes(fmt, cols);
    return (uint64_t)rows * (uint64_t)cols * nt_dtype_size(fmt);
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static void store_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void nt_matrix_dequant_row(enum nt_dtype fmt, const void *payload, int64_t rows, int64_t cols,
                           int64_t r, float *out) {
    NT_ASSERT(r >= 0 && r < rows);
    const uint8_t *p = payload;
    if (fmt == NT_DTYPE_Q8_2F) {
        const int8_t *q = (const int8_t *)p + (size_t)r * (size_t)cols;
        float rs = nt_q8_2f_row_scale(p, rows, cols, r);
        for (int64_t c = 0; c < cols; c++) out[c] = rs * (float)q[c] * nt_q8_2f_col_field(p, rows, cols, c);
    } else if (fmt == NT_DTYPE_Q4TP) {
        for (int64_t g = 0; g < nt_q4tp_gpr(cols); g++) {
            float scale = nt_q4tp_group_scale(p, rows, cols, r, g);
            for (int64_t c = g * NT_Q4TP_GROUP; c < (g + 1) * NT_Q4TP_GROUP; c++)
                out[c] = scale * (float)nt_q4tp_nibble(p, rows, cols, r, c);
        }
    } else if (nt_dtype_is_ggml_block(fmt)) {
        int elems;
        nt_ggml_block_facts(fmt, &elems, NULL, NULL);
        nt_ggml_dequant_blocks(fmt, p + (size_t)r * ggml_row_bytes(fmt, cols), cols / elems, out);
    } else if (fmt == NT_DTYPE_F32) {
        memcpy(out, p + (size_t)r * (size_t)cols * 4, (size_t)cols * 4);
    } else if (fmt == NT_DTYPE_F16) {
        const uint8_t *row = p + (size_t)r * (size_t)cols * 2;
        for (int64_t c = 0; c < cols; c++) out[c] = nt_f16_to_f32(load_u16(row + 2 * c));
    } else if (fmt == NT_DTYPE_BF16) {
        const uint8_t *row = p + (size_t)r * (size_t)cols * 2;
        for (int64_t c = 0; c < cols; c++) out[c] = nt_bf16_to_f32(load_u16(row + 2 * c));
    } else {
        NT_ASSERT(!"nt_matrix_dequant_row: not a matrix format");
    }
}

/* Rows per chunk of the whole-matrix writers: the q4tp row params and q8_2f row scales of one
 * chunk go through an aligned stack buffer (dst has no alignment guarantee), and a chunk is
 * the unit of work of one OpenMP thread. */
#define CHUNK_ROWS 256

static void quantize_q4tp(const float *W, int64_t rows, int64_t cols, uint8_t *dst) {
    int64_t gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    uint64_t poff = nt_q4tp_params_offset(rows, cols), coff = nt_q4tp_codes_offset(rows, cols);
    int64_t nchunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
#pragma omp parallel for schedule(dynamic)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t r0 = k * CHUNK_ROWS, n = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
        uint32_t params[CHUNK_ROWS];
        nt_q4tp_quantize_rows(W + (size_t)r0 * (size_t)cols, n, cols, dst + (size_t)(r0 * gpr) * 16, params,
                              dst + coff + (size_t)(r0 * cstride));
        for (int64_t i = 0; i < n; i++) {
            uint8_t *p = dst + poff + (size_t)(r0 + i) * 4;
            for (int b = 0; b < 4; b++) p[b] = (uint8_t)(params[i] >> (8 * b));
        }
    }
    uint64_t used = coff + (uint64_t)rows * (uint64_t)cstride;
    memset(dst + used, 0, nt_matrix_bytes(NT_DTYPE_Q4TP, rows, cols) - used);
}

static void quantize_q8_2f(const float *W, int64_t rows, int64_t cols, uint8_t *dst) {
    float *colmax = nt_calloc((size_t)cols, sizeof(float));
    uint16_t *cs = nt_alloc((size_t)cols * sizeof(uint16_t));
    /* this writer serves tests and tools; the converter streams and reports its own failures */
    NT_ASSERT(colmax && cs);
    nt_q8_2f_col_stats(colmax, W, rows, cols);
    nt_q8_2f_col_field_choose(colmax, cols, cs);
    uint64_t rsoff = nt_q8_2f_rs_offset(rows, cols), csoff = nt_q8_2f_cs_offset(rows, cols);
    int64_t nchunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
#pragma omp parallel for schedule(dynamic)
    for (int64_t k = 0; k < nchunks; k++) {
        int64_t r0 = k * CHUNK_ROWS, n = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
        uint16_t rs[CHUNK_ROWS];
        nt_q8_2f_quantize_rows(W + (size_t)r0 * (size_t)cols, n, cols, cs,
                               (int8_t *)dst + (size_t)r0 * (size_t)cols, rs);
        for (int64_t i = 0; i < n; i++) store_u16(dst + rsoff + 2 * (size_t)(r0 + i), rs[i]);
    }
    for (int64_t c = 0; c < cols; c++) store_u16(dst + csoff + 2 * (size_t)c, cs[c]);
    uint64_t used = csoff + 2u * (uint64_t)cols;
    memset(dst + used, 0, nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols) - used);
    nt_free(colmax);
    nt_free(cs);
}

void nt_quantize_matrix(enum nt_dtype fmt, const float *W, int64_t rows, int64_t cols, uint8_t *dst) {
    NT_ASSERT(nt_format_accepts(fmt, rows, cols, NULL));
    size_t n = (size_t)rows * (size_t)cols;
    if (fmt == NT_DTYPE_Q8_2F) {
        quantize_q8_2f(W, rows, cols, dst);
    } else if (fmt == NT_DTYPE_Q4TP) {
        quantize_q4tp(W, rows, cols, dst);
    } else if (fmt == NT_DTYPE_F32) {
        memcpy(dst, W, n * 4);
    } else if (fmt == NT_DTYPE_F16) {
        for (size_t i = 0; i < n; i++) store_u16(dst + 2 * i, nt_f32_to_f16(W[i]));
    } else if (fmt == NT_DTYPE_BF16) {
        for (size_t i = 0; i < n; i++) store_u16(dst + 2 * i, nt_f32_to_bf16(W[i]));
    } else {
        NT_ASSERT(!"nt_quantize_matrix: no writer for this dtype");
    }
}
