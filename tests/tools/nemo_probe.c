/* nemo_probe.c - the C side of tests/cli/test_nemo_py.sh: writes a small .nemo, and reads
 * tensors back through the engine's own readers, for tools/nemo.py to be checked against.
 *
 *   nemo_probe write OUT.nemo          q8_2f, q4tp (quantized from fixed pseudo-random
 *                                      matrices), F32, BF16, F16 tensors and three files
 *   nemo_probe list FILE               one line per tensor: name format [shape] bytes
 *   nemo_probe dequant FILE NAME OUT   the tensor, row by row through nt_matrix_dequant_row,
 *                                      as raw little-endian f32 (rows x cols; 1-D: one row)
 *   nemo_probe open FILE               opens (all checks and checksums); exit 1 with the message
 *
 * Exit status 0 on success, 1 when the library refuses, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/nemo.h"
#include "quant/quant.h"

static int fail(const char *what, const struct nt_err *err) {
    fprintf(stderr, "nemo_probe: %s: %s\n", what, err->msg);
    return 1;
}

/* A fixed pseudo-random matrix: roughly normal values, with a few columns ten times larger
 * (what q8_2f's column field is for) and one all-zero row. */
static void fill(float *w, int64_t rows, int64_t cols, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < rows * cols; i++) {
        float sum = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            sum += (float)((s >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
        }
        int64_t c = i % cols, r = i / cols;
        w[i] = r == 1 ? 0.0f : sum * 0.05f * (c % 13 == 5 ? 10.0f : 1.0f);
    }
}

struct spec {
    const char *name;
    enum nt_dtype fmt;
    int ndim;
    int64_t shape[2];
};

static const struct spec SPECS[] = {
    {"model.layers.0.mixer.in_proj.weight", NT_DTYPE_Q8_2F, 2, {37, 64}},            /* odd rows */
    {"model.layers.1.mixer.experts.0.up_proj.weight", NT_DTYPE_Q4TP, 2, {5, 96}},    /* gpr 3 */
    {"model.layers.1.mixer.experts.0.down_proj.weight", NT_DTYPE_Q4TP, 2, {6, 320}}, /* gpr 10 */
    {"model.layers.2.mixer.o_proj.weight", NT_DTYPE_Q8_2F, 2, {3, 12}},
    {"model.norm_f.weight", NT_DTYPE_F32, 2, {4, 3}},
    {"model.embeddings.weight", NT_DTYPE_BF16, 2, {2, 5}},
    {"model.layers.0.mixer.D", NT_DTYPE_F16, 1, {7}},
};
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

static const char *const FILES[][2] = {
    {"config.json", "{\"model_type\": \"nemotron_h\", \"hidden_size\": 64}\n"},
    {"tokenizer_config.json",
     "{\"chat_template\": \"{% for m in messages %}{{ m.content }}{% endfor %}\"}"},
    {"generation_config.json", "{\"eos_token_id\": 2}"},
};

static int64_t rows_of(const struct spec *s) { return s->ndim == 1 ? 1 : s->shape[0]; }
static int64_t cols_of(const struct spec *s) { return s->ndim == 1 ? s->shape[0] : s->shape[1]; }

static int cmd_write(const char *path) {
    struct nt_err err;
    struct nt_nemo_writer *w;
    if (nt_nemo_writer_new(&w, path, NULL, &err)) return fail(path, &err);
    nemotron_status st =
        nt_nemo_writer_meta(w, "nemotron.source", "tests/tools/nemo_probe.c", &err);
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0] && !st; i++)
        st = nt_nemo_writer_declare_file(w, FILES[i][0], FILES[i][1], strlen(FILES[i][1]), &err);
    for (int i = 0; i < N_SPECS && !st; i++)
        st = nt_nemo_writer_declare(w, SPECS[i].name, SPECS[i].fmt, SPECS[i].ndim, SPECS[i].shape,
                                    &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    for (int i = 0; i < N_SPECS && !st; i++) {
        const struct spec *s = &SPECS[i];
        int64_t rows = rows_of(s), cols = cols_of(s);
        float *m = malloc((size_t)(rows * cols) * sizeof *m);
        uint64_t n = nt_matrix_bytes(s->fmt, rows, cols);
        uint8_t *p = malloc(n);
        fill(m, rows, cols, (uint64_t)i + 1);
        nt_quantize_matrix(s->fmt, m, rows, cols, p);
        st = nt_nemo_writer_append(w, p, n, &err);
        free(m);
        free(p);
    }
    if (!st) st = nt_nemo_writer_commit(w, &err);
    nt_nemo_writer_free(w);
    return st ? fail(path, &err) : 0;
}

static int cmd_list(const char *path) {
    struct nt_err err;
    struct nt_tensor_table t;
    nt_table_init(&t);
    if (nt_nemo_open(&t, path, 0, &err)) return fail(path, &err);
    for (int i = 0; i < t.n_tensors; i++) {
        const struct nt_tensor *x = &t.tensors[i];
        printf("%s %s [", x->name, nt_dtype_name(x->dtype));
        for (int d = 0; d < x->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)x->shape[d]);
        printf("] %llu\n", (unsigned long long)x->nbytes);
    }
    for (int i = 0; i < t.n_embedded; i++)
        printf("%s%s file [%zu] %zu\n", NT_NEMO_FILE_PREFIX, t.embedded[i].name, t.embedded[i].len,
               t.embedded[i].len);
    nt_table_close(&t);
    return 0;
}

static int cmd_dequant(const char *path, const char *name, const char *out) {
    struct nt_err err;
    struct nt_tensor_table t;
    nt_table_init(&t);
    if (nt_nemo_open(&t, path, 0, &err)) return fail(path, &err);
    const struct nt_tensor *x = nt_table_find(&t, name);
    if (!x || x->ndim < 1 || x->ndim > 2) {
        fprintf(stderr, "nemo_probe: %s: no 1-D or 2-D tensor '%s'\n", path, name);
        nt_table_close(&t);
        return 1;
    }
    int64_t rows = x->ndim == 1 ? 1 : x->shape[0], cols = x->ndim == 1 ? x->shape[0] : x->shape[1];
    float *row = malloc((size_t)cols * sizeof *row);
    FILE *f = fopen(out, "wb");
    int bad = !f;
    for (int64_t r = 0; r < rows && !bad; r++) {
        nt_matrix_dequant_row(x->dtype, x->data, rows, cols, r, row);
        bad = fwrite(row, sizeof *row, (size_t)cols, f) != (size_t)cols;
    }
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "nemo_probe: %s: cannot write\n", out);
    free(row);
    nt_table_close(&t);
    return bad;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "write")) return cmd_write(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "list")) return cmd_list(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "dequant")) return cmd_dequant(argv[2], argv[3], argv[4]);
    if (argc == 3 && !strcmp(argv[1], "open")) {
        struct nt_err err;
        struct nt_tensor_table t;
        nt_table_init(&t);
        nemotron_status st = nt_nemo_open(&t, argv[2], 0, &err);
        nt_table_close(&t);
        return st ? fail(argv[2], &err) : 0;
    }
    fprintf(stderr,
            "usage: nemo_probe write OUT | list FILE | dequant FILE NAME OUT | open FILE\n");
    return 2;
}
