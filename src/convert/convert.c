/* convert.c - nemotron_convert: a Hugging Face checkpoint or a llama.cpp GGUF into one .nemo
 * file, streamed.
 *
 * The checkpoint is validated completely first (config, every tensor's presence, dtype and shape,
 * through the same binder a load uses), so a bad checkpoint writes nothing. Then each tensor is
 * read in chunks of rows from the mmap, widened to f32, checked finite, and written in its stored
 * form (mix.c): plain dtypes row by row; q4tp's nibbles row by row with its small row params and
 * codes kept until the tensor's end; q8_2f in two reads (its column field depends on every row).
 * A GGUF's block-typed tensors (Q4_K, ...) are copied byte for byte whatever the mix: the .nemo
 * holds them in their block type (docs/NEMO.md), so it runs the same kernels on the same bytes as
 * the GGUF and gives its logits bit for bit. The GGUF's metadata arrives as the config.json,
 * tokenizer.json and tokenizer_config.json its source made (src/model/gguf_model.c), embedded as
 * any directory's files.
 * Pages of the checkpoint are dropped from the mapping once a chunk is done, so memory stays at
 * a few chunks whatever the checkpoint's size. The writer (model/nemo.c) checksums the bytes as
 * they pass and renames the file into place only when everything is written.
 */
#include "nemotron.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../model/config.h"
#include "../model/nemo.h"
#include "../model/source.h"
#include "../model/weights.h"
#include "../quant/ggml_blocks.h"
#include "../quant/quant.h"
#include "mix.h"

/* Rows are converted this many f32 bytes at a time: large enough that threads and the disk are
 * busy, small enough that memory stays far under the 4 GB the converter is allowed. */
#define CHUNK_F32_BYTES ((size_t)32 << 20)

nemotron_convert_params nemotron_convert_default_params(void) {
    nemotron_convert_params p = {.quant = NEMOTRON_QUANT_DEFAULT};
    return p;
}

/* One tensor of the output: where its values come from and how it is stored. */
struct job {
    const char *name;
    const struct nt_tensor *src;   /* lm_head of a tied model reads the embeddings */
    enum nt_dtype to;
    int ndim;
    int64_t shape[NT_MAX_DIMS];
    int64_t rows, cols;            /* shape[0] and the product of the rest (1-D: 1 x n) */
};

struct converter {
    struct nt_nemo_writer *w;
    struct nt_err *err;
    int threads;
    uint64_t done, total;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    float *f32;                    /* CHUNK_F32_BYTES */
    uint8_t *out;                  /* CHUNK_F32_BYTES: any stored form of a chunk fits */
};

static int64_t chunk_rows(int64_t cols) {
    int64_t r = (int64_t)(CHUNK_F32_BYTES / sizeof(float)) / cols;
    return r < 1 ? 1 : r;
}

static void advance(struct converter *c, uint64_t bytes) {
    c->done += bytes;
    if (c->progress) c->progress(c->progress_ctx, c->done, c->total);
}

/* Drops the checkpoint pages of a finished chunk from this process (the file stays cached by
 * the kernel as it sees fit): without it a 60 GB checkpoint would end up resident. */
static void release_pages(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Rows [r0, r0 + nr) of the source as f32 into c->f32; a NaN or infinity is an error naming the
 * element (quantizers assume finite weights, and such a checkpoint is broken anyway). */
static nemotron_status read_rows(struct converter *c, const struct job *j, int64_t r0, int64_t nr) {
    const struct nt_tensor *t = j->src;
    size_t esz = nt_dtype_size(t->dtype);
    const uint8_t *base = (const uint8_t *)t->data + (size_t)r0 * (size_t)j->cols * esz;
    int64_t n = nr * j->cols;
    float *f = c->f32;
    int bad = 0;
#pragma omp parallel for num_threads(c->threads) schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        float v;
        switch (t->dtype) {
        case NT_DTYPE_BF16: memcpy(&h, base + 2 * i, 2); v = nt_bf16_to_f32(h); break;
        case NT_DTYPE_F16: memcpy(&h, base + 2 * i, 2); v = nt_f16_to_f32(h); break;
        default: memcpy(&v, base + 4 * i, 4); break;
        }
        f[i] = v;
        bad |= !isfinite(v);
    }
    if (bad)
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i]))
                return nt_fail(c->err, NEMOTRON_ERR_TENSOR,
                               "tensor '%s': element [%lld][%lld] is %s; a checkpoint's weights must "
                               "be finite",
                               j->src->name, (long long)(r0 + i / j->cols), (long long)(i % j->cols),
                               isnan(f[i]) ? "NaN" : "infinite");
    return NEMOTRON_OK;
}

static nemotron_status append(struct converter *c, const void *p, size_t n) {
    return nt_nemo_writer_append(c->w, p, n, c->err);
}

static nemotron_status append_zeros(struct converter *c, uint64_t n) {
    memset(c->out, 0, n < CHUNK_F32_BYTES ? n : CHUNK_F32_BYTES);
    while (n) {
        size_t k = n < CHUNK_F32_BYTES ? (size_t)n : CHUNK_F32_BYTES;
        nemotron_status st = append(c, c->out, k);
        if (st) return st;
        n -= k;
    }
    return NEMOTRON_OK;
}

/* F32, F16, BF16: the source bytes themselves when the dtype is unchanged, else each value
 * rounded to nearest even. */
static nemotron_status write_plain(struct converter *c, const struct job *j) {
    size_t esz = nt_dtype_size(j->to), src_esz = nt_dtype_size(j->src->dtype);
    int64_t step = chunk_rows(j->cols);
    for (int64_t r0 = 0; r0 < j->rows; r0 += step) {
        int64_t nr = j->rows - r0 < step ? j->rows - r0 : step;
        nemotron_status st = read_rows(c, j, r0, nr);
        if (st) return st;
        size_t n = (size_t)(nr * j->cols);
        const uint8_t *src = (const uint8_t *)j->src->data + (size_t)r0 * (size_t)j->cols * src_esz;
        if (j->to == j->src->dtype) {
            st = append(c, src, n * esz);
        } else {
            const float *f = c->f32;
            uint8_t *o = c->out;
#pragma omp parallel for num_threads(c->threads) schedule(static)
            for (size_t i = 0; i < n; i++) {
                uint16_t h;
                if (j->to == NT_DTYPE_F32) {
                    memcpy(o + 4 * i, &f[i], 4);
                    continue;
                }
                h = j->to == NT_DTYPE_BF16 ? nt_f32_to_bf16(f[i]) : nt_f32_to_f16(f[i]);
                memcpy(o + 2 * i, &h, 2);
            }
            st = append(c, o, n * esz);
        }
        if (st) return st;
        release_pages(src, n * src_esz);
        advance(c, n * src_esz);
    }
    return NEMOTRON_OK;
}

/* A ggml block type: the source's bytes, copied in chunks of whole rows (never widened: the
 * blocks are the weights). */
static nemotron_status write_blocks(struct converter *c, const struct job *j) {
    uint64_t row_bytes = nt_matrix_bytes(j->to, 1, j->cols);
    int64_t step = (int64_t)(CHUNK_F32_BYTES / row_bytes);
    if (step < 1) step = 1;
    for (int64_t r0 = 0; r0 < j->rows; r0 += step) {
        int64_t nr = j->rows - r0 < step ? j->rows - r0 : step;
        const uint8_t *src = (const uint8_t *)j->src->data + (size_t)((uint64_t)r0 * row_bytes);
        size_t n = (size_t)((uint64_t)nr * row_bytes);
        nemotron_status st = append(c, src, n);
        if (st) return st;
        release_pages(src, n);
        advance(c, n);
    }
    return NEMOTRON_OK;
}

/* Splits nr rows over the threads for a row-independent quantizer. */
#define PARALLEL_ROWS(c, nr, body)                                                  \
    _Pragma("omp parallel num_threads((c)->threads)") {                             \
        int64_t per_ = ((nr) + omp_get_num_threads() - 1) / omp_get_num_threads();  \
        int64_t a = per_ * omp_get_thread_num();                                    \
        int64_t b = a + per_ < (nr) ? a + per_ : (nr);                              \
        if (a < b) { body; }                                                        \
    }

static nemotron_status write_q4tp(struct converter *c, const struct job *j) {
    int64_t rows = j->rows, cols = j->cols, gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    uint32_t *params = nt_alloc((size_t)rows * sizeof *params);
    uint8_t *codes = nt_alloc((size_t)(rows * cstride));
    if (!params || !codes) {
        nt_free(params);
        nt_free(codes);
        return nt_fail(c->err, NEMOTRON_ERR_NOMEM, "tensor '%s': out of memory", j->name);
    }
    size_t src_esz = nt_dtype_size(j->src->dtype);
    int64_t step = chunk_rows(cols);
    nemotron_status st = NEMOTRON_OK;
    for (int64_t r0 = 0; r0 < rows && !st; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        if ((st = read_rows(c, j, r0, nr))) break;
        const float *f = c->f32;
        uint8_t *nib = c->out;
        PARALLEL_ROWS(c, nr,
                      nt_q4tp_quantize_rows(f + a * cols, b - a, cols, nib + a * gpr * 16,
                                            params + r0 + a, codes + (r0 + a) * cstride));
        st = append(c, nib, (size_t)(nr * gpr * 16));
        release_pages((const uint8_t *)j->src->data + (size_t)(r0 * cols) * src_esz,
                      (size_t)(nr * cols) * src_esz);
        advance(c, (uint64_t)(nr * cols) * src_esz);
    }
    if (!st) st = append(c, params, (size_t)rows * 4);
    if (!st) st = append(c, codes, (size_t)(rows * cstride));
    uint64_t used = nt_q4tp_codes_offset(rows, cols) + (uint64_t)(rows * cstride);
    if (!st) st = append_zeros(c, nt_matrix_bytes(NT_DTYPE_Q4TP, rows, cols) - used);
    nt_free(params);
    nt_free(codes);
    return st;
}

static nemotron_status write_q8_2f(struct converter *c, const struct job *j) {
    int64_t rows = j->rows, cols = j->cols;
    float *colmax = nt_calloc((size_t)cols * (size_t)(c->threads + 1), sizeof(float));
    uint16_t *cs = nt_alloc((size_t)cols * 2), *rs = nt_alloc((size_t)rows * 2);
    nemotron_status st = NEMOTRON_OK;
    if (!colmax || !cs || !rs) st = nt_fail(c->err, NEMOTRON_ERR_NOMEM, "tensor '%s': out of memory", j->name);
    size_t src_esz = nt_dtype_size(j->src->dtype);
    int64_t step = chunk_rows(cols);
    /* first read: the per-column statistics (a partial per thread, then the maximum of them) */
    for (int64_t r0 = 0; r0 < rows && !st; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        if ((st = read_rows(c, j, r0, nr))) break;
        const float *f = c->f32;
        PARALLEL_ROWS(c, nr,
                      nt_q8_2f_col_stats(colmax + (size_t)(omp_get_thread_num() + 1) * (size_t)cols,
                                         f + a * cols, b - a, cols));
        release_pages((const uint8_t *)j->src->data + (size_t)(r0 * cols) * src_esz,
                      (size_t)(nr * cols) * src_esz);
        advance(c, (uint64_t)(nr * cols) * src_esz);
    }
    if (!st) {
        for (int t = 1; t <= c->threads; t++)
            for (int64_t k = 0; k < cols; k++)
                if (colmax[(size_t)t * (size_t)cols + (size_t)k] > colmax[k])
                    colmax[k] = colmax[(size_t)t * (size_t)cols + (size_t)k];
        nt_q8_2f_col_field_choose(colmax, cols, cs);
    }
    /* second read: the rows against that field */
    for (int64_t r0 = 0; r0 < rows && !st; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        if ((st = read_rows(c, j, r0, nr))) break;
        const float *f = c->f32;
        int8_t *q = (int8_t *)c->out;
        PARALLEL_ROWS(c, nr, nt_q8_2f_quantize_rows(f + a * cols, b - a, cols, cs, q + a * cols, rs + r0 + a));
        st = append(c, q, (size_t)(nr * cols));
        release_pages((const uint8_t *)j->src->data + (size_t)(r0 * cols) * src_esz,
                      (size_t)(nr * cols) * src_esz);
        advance(c, (uint64_t)(nr * cols) * src_esz);
    }
    if (!st) st = append(c, rs, (size_t)rows * 2);
    if (!st) st = append(c, cs, (size_t)cols * 2);
    uint64_t used = nt_q8_2f_cs_offset(rows, cols) + 2u * (uint64_t)cols;
    if (!st) st = append_zeros(c, nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols) - used);
    nt_free(colmax);
    nt_free(cs);
    nt_free(rs);
    return st;
}

static nemotron_status write_job(struct converter *c, const struct job *j) {
    switch (j->to) {
    case NT_DTYPE_Q4TP: return write_q4tp(c, j);
    case NT_DTYPE_Q8_2F: return write_q8_2f(c, j);
    default: return nt_dtype_is_ggml_block(j->to) ? write_blocks(c, j) : write_plain(c, j);
    }
}

/* The output's tensors: every checkpoint tensor in the table's order, in its stored form; and a
 * tied model's head, when the mix quantizes projections, as its own q8_2f lm_head (the engine
 * uses an lm_head that is present, so the head gets the mix's format while the embeddings stay
 * rows to look up). Embeddings in a ggml block type stay the head too, as in the GGUF: a head
 * made from their blocks would be a second quantization. */
static nemotron_status plan(const struct nt_tensor_table *t, const struct nt_config *cfg,
                            nemotron_quant quant, struct job **out, int *n_out, struct nt_err *err) {
    struct job *jobs = nt_calloc((size_t)t->n_tensors + 1, sizeof *jobs);
    if (!jobs) return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory planning the conversion");
    int n = 0;
    const struct nt_tensor *emb = NULL;
    for (int i = 0; i < t->n_tensors; i++) {
        const struct nt_tensor *s = &t->tensors[i];
        struct job *j = &jobs[n++];
        j->name = s->name;
        j->src = s;
        j->ndim = s->ndim;
        memcpy(j->shape, s->shape, sizeof j->shape);
        j->rows = s->ndim ? s->shape[0] : 1;
        j->cols = 1;
        for (int d = 1; d < s->ndim; d++) j->cols *= s->shape[d];
        if (s->ndim == 1) { j->rows = 1; j->cols = s->shape[0]; }
        enum nt_role role = nt_tensor_role(s->name, s->ndim);
        if (role == NT_ROLE_EMBEDDINGS) emb = s;
        j->to = nt_stored_form(role, s->dtype, j->rows, j->cols, quant);
        const char *why;
        if (nt_dtype_is_ggml_block(j->to) && !nt_format_accepts(j->to, j->rows, j->cols, &why)) {
            nt_free(jobs); /* (the GGUF reader admits whole blocks only: a guard, not a path) */
            return nt_fail(err, NEMOTRON_ERR_TENSOR, "tensor '%s': %s", s->name, why);
        }
        if ((uint64_t)j->cols * sizeof(float) > CHUNK_F32_BYTES) {
            nt_free(jobs);
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "tensor '%s': rows of %lld values are longer than the converter's chunk",
                           s->name, (long long)j->cols);
        }
    }
    if (cfg->tie_word_embeddings && emb && !nt_dtype_is_ggml_block(emb->dtype) &&
        !nt_table_find(t, "lm_head.weight")) {
        enum nt_dtype to = nt_stored_form(NT_ROLE_PROJECTION, emb->dtype, emb->shape[0], emb->shape[1], quant);
        if (to == NT_DTYPE_Q8_2F || to == NT_DTYPE_Q4TP) {
            struct job *j = &jobs[n++];
            *j = (struct job){.name = "lm_head.weight", .src = emb, .to = to, .ndim = 2,
                              .rows = emb->shape[0], .cols = emb->shape[1]};
            j->shape[0] = emb->shape[0];
            j->shape[1] = emb->shape[1];
        }
    }
    *out = jobs;
    *n_out = n;
    return NEMOTRON_OK;
}

static uint64_t source_bytes(const struct job *j) {
    if (nt_dtype_is_ggml_block(j->to)) return nt_matrix_bytes(j->to, j->rows, j->cols);
    uint64_t b = (uint64_t)j->rows * (uint64_t)j->cols * nt_dtype_size(j->src->dtype);
    return j->to == NT_DTYPE_Q8_2F ? 2 * b : b;    /* q8_2f reads its source twice */
}

static nemotron_status convert(const char *src, const char *dst, const nemotron_convert_params *p,
                               struct nt_err *err) {
    if (!nt_quant_name(p->quant)) return nt_fail(err, NEMOTRON_ERR_ARG, "unknown quant mix %d", (int)p->quant);
    struct nt_model_source files;
    int threads = p->n_threads > 0 ? p->n_threads : omp_get_num_procs();
    nemotron_status st = nt_model_source_open(&files, src, threads, err);
    if (st) return st;
    if (files.is_nemo) {
        nt_model_source_close(&files);
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "%s is already a .nemo; convert reads a Hugging Face model directory or a "
                       "GGUF file", src);
    }
    struct nt_weights w;
    /* the whole checkpoint is checked against its config before anything is written */
    if ((st = nt_weights_bind(&w, &files.cfg, &files.table, err))) {
        nt_err_prefix(err, "%s: ", src);
        nt_model_source_close(&files);
        return st;
    }
    nt_weights_free(&w);

    struct job *jobs = NULL;
    int n_jobs = 0;
    struct converter c = {.err = err, .progress = p->progress, .progress_ctx = p->progress_ctx};
    c.threads = threads;
    if ((st = plan(&files.table, &files.cfg, p->quant, &jobs, &n_jobs, err))) goto out;
    c.f32 = nt_alloc(CHUNK_F32_BYTES);
    c.out = nt_alloc(CHUNK_F32_BYTES);
    if (!c.f32 || !c.out) { st = nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for the conversion buffers"); goto out; }

    if ((st = nt_nemo_writer_new(&c.w, dst, src, err))) goto out;
    if ((st = nt_nemo_writer_meta(c.w, "nemotron.quant", nt_quant_name(p->quant), err))) goto out;
    if ((st = nt_nemo_writer_meta(c.w, "nemotron.source", src, err))) goto out;
    for (int i = 0; i < NT_MODEL_FILES && !st; i++)
        if (files.file_bytes[i])
            st = nt_nemo_writer_declare_file(c.w, nt_model_file_names[i], files.file_bytes[i],
                                             files.file_lens[i], err);
    for (int i = 0; i < n_jobs && !st; i++) {
        const struct job *j = &jobs[i];
        int64_t rc[2] = {j->rows, j->cols};
        int packed = j->to == NT_DTYPE_Q8_2F || j->to == NT_DTYPE_Q4TP || nt_dtype_is_ggml_block(j->to);
        st = nt_nemo_writer_declare(c.w, j->name, j->to, packed ? 2 : j->ndim, packed ? rc : j->shape, err);
        c.total += source_bytes(j);
    }
    if (!st) st = nt_nemo_writer_begin(c.w, err);
    for (int i = 0; i < n_jobs && !st; i++) st = write_job(&c, &jobs[i]);
    if (!st) st = nt_nemo_writer_commit(c.w, err);
out:
    nt_nemo_writer_free(c.w);     /* without a commit: the partial file is removed */
    nt_free(c.f32);
    nt_free(c.out);
    nt_free(jobs);
    nt_model_source_close(&files);
    return st;
}

nemotron_status nemotron_convert(const char *src_dir, const char *dst,
                                 const nemotron_convert_params *params, char *errbuf, size_t errlen) {
    struct nt_err err = {{0}};
    nemotron_convert_params defaults = nemotron_convert_default_params();
    nemotron_status st;
    if (!src_dir || !dst) st = nt_fail(&err, NEMOTRON_ERR_ARG, "convert: %s is NULL", src_dir ? "dst" : "src_dir");
    else st = convert(src_dir, dst, params ? params : &defaults, &err);
    if (errbuf && errlen) snprintf(errbuf, errlen, "%s", st ? err.msg : "");
    return st;
}
