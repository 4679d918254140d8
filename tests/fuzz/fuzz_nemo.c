/* fuzz_nemo.c - libFuzzer entry point: any bytes, opened as a .nemo (nt_nemo_open_bytes).
 *
 * The input is copied to a buffer of exactly its size and handed over as borrowed bytes, so
 * AddressSanitizer sees any read past the end. A mutated file almost never keeps its CRC-32s
 * right, which would stop every input at the checksum check; so when the reader reports a
 * mismatch, the harness patches the listed value in the header text to the computed one (both
 * are in the message) and opens again, up to once per entry. That lets the fuzzer reach the
 * steps after verification (retyping, embedding) with the library unchanged.
 *
 * A file that opens is checked against the reader's contract: packed tensors (q8_2f, q4tp and
 * llama.cpp's block types) have ndim 2, an accepted shape and nt_matrix_bytes bytes; plain ones numel * element size; no entry under
 * the file prefix is left a tensor; every embedded file is found by name; all views lie in
 * the input; opening the same bytes again into the table fails (names clash) and changes
 * nothing. A refused file must leave the table empty with a message.
 *
 * Built with -DFUZZ_NEMO_WRITE_SEEDS instead, it is a program that writes seed files with the
 * real writer: `fuzz_nemo_seeds DIR`. tests/fuzz/README.md has the commands.
 */
#include "model/nemo.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_NEMO_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken contract is a finding: abort so libFuzzer saves the input. */
#define EXPECT(x) ((x) ? (void)0 : abort())

static int inside(const void *p, uint64_t n, const uint8_t *b, size_t size) {
    const uint8_t *q = p;
    return q >= b && (size_t)(q - b) <= size && n <= size - (size_t)(q - b);
}

static void check_loaded(const struct nt_tensor_table *t, const uint8_t *b, size_t size) {
    EXPECT(t->n_files == 1 && t->files[0].map == b && t->files[0].size == size);
    volatile uint8_t sink = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        const struct nt_tensor *x = &t->tensors[i];
        EXPECT(nt_table_find(t, x->name) == x);
        EXPECT(strncmp(x->name, NT_NEMO_FILE_PREFIX, strlen(NT_NEMO_FILE_PREFIX)) != 0);
        EXPECT(inside(x->data, x->nbytes, b, size));
        if (x->dtype == NT_DTYPE_Q8_2F || x->dtype == NT_DTYPE_Q4TP || nt_dtype_is_ggml_block(x->dtype)) {
            EXPECT(x->ndim == 2 && nt_format_accepts(x->dtype, x->shape[0], x->shape[1], NULL));
            EXPECT(x->nbytes == nt_matrix_bytes(x->dtype, x->shape[0], x->shape[1]));
        } else {
            EXPECT(x->dtype == NT_DTYPE_F32 || x->dtype == NT_DTYPE_F16 ||
                   x->dtype == NT_DTYPE_BF16);
            uint64_t n = nt_dtype_size(x->dtype);
            for (int d = 0; d < x->ndim; d++) EXPECT(nt_mul_ok(n, (uint64_t)x->shape[d], &n));
            EXPECT(n == x->nbytes);
        }
        if (x->nbytes)
            sink ^= ((const uint8_t *)x->data)[0] ^ ((const uint8_t *)x->data)[x->nbytes - 1];
    }
    for (int i = 0; i < t->n_embedded; i++) {
        const struct nt_embedded_file *f = &t->embedded[i];
        size_t len;
        EXPECT(nt_table_file(t, f->name, &len) == f->data && len == f->len);
        EXPECT(f->name[0] && !strchr(f->name, '/') && f->file == 0 &&
               inside(f->data, f->len, b, size));
        if (f->len) sink ^= f->data[f->len - 1];
    }
    (void)sink;
}

/* The reader's mismatch message gives the listed and the computed checksum: puts the computed
 * one where the listed one stands in the header. 0 when there is nothing to patch. */
static int patch_checksum(uint8_t *b, size_t size, const char *msg) {
    const char *s = strstr(msg, "says crc32 "), *g = s ? strstr(s, " give ") : NULL;
    unsigned want, got;
    if (!g || sscanf(s + 11, "%8x", &want) != 1 || sscanf(g + 6, "%8x", &got) != 1) return 0;
    char from[9], to[9];
    snprintf(from, sizeof from, "%08x", want);
    snprintf(to, sizeof to, "%08x", got);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    for (size_t i = 8; i + 8 <= 8 + n && i + 8 <= size; i++)
        if (!memcmp(b + i, from, 8)) {
            memcpy(b + i, to, 8);
            return 1;
        }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    EXPECT(b != NULL);
    if (size) memcpy(b, data, size);
    struct nt_tensor_table t;
    struct nt_err err;
    nemotron_status st;
    for (int tries = 0;; tries++) {
        nt_table_init(&t);
        err.msg[0] = 0;
        st = nt_nemo_open_bytes(&t, "fuzz.nemo", b, size, 0, 1, &err);
        EXPECT(st == NEMOTRON_OK || st == NEMOTRON_ERR_FORMAT || st == NEMOTRON_ERR_UNSUPPORTED ||
               st == NEMOTRON_ERR_NOMEM);
        if (st == NEMOTRON_OK) break;
        EXPECT(t.n_tensors == 0 && t.n_files == 0 && t.n_embedded == 0 && err.msg[0] != 0);
        nt_table_close(&t);
        if (tries >= 64 || !strstr(err.msg, "checksum mismatch") ||
            !patch_checksum(b, size, err.msg))
            break;
    }
    if (st == NEMOTRON_OK) {
        check_loaded(&t, b, size);
        int n = t.n_tensors, ne = t.n_embedded;
        st = nt_nemo_open_bytes(&t, "again.nemo", b, size, 0, 1, &err);
        EXPECT(n + ne == 0 ? st == NEMOTRON_OK : st == NEMOTRON_ERR_FORMAT);
        if (st != NEMOTRON_OK) {
            EXPECT(t.n_tensors == n && t.n_embedded == ne && t.n_files == 1);
            check_loaded(&t, b, size);
        }
        nt_table_close(&t);
    }
    free(b);
    return 0;
}

#else /* FUZZ_NEMO_WRITE_SEEDS */

static void fail(const char *what, const struct nt_err *err) {
    fprintf(stderr, "fuzz_nemo_seeds: %s: %s\n", what, err->msg);
    exit(1);
}

struct t {
    const char *name;
    enum nt_dtype fmt;
    int ndim;
    int64_t shape[3];
};

/* One seed: the tensors (payload bytes counting up from `salt`) and the files. */
static void seed(const char *dir, const char *file, const struct t *ts, int n,
                 const char *const *files, int nf) {
    char path[1024];
    struct nt_err err;
    struct nt_nemo_writer *w;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (nt_nemo_writer_new(&w, path, NULL, &err)) fail(path, &err);
    if (nt_nemo_writer_meta(w, "nemotron.quant", "seed", &err)) fail(path, &err);
    for (int i = 0; i < nf; i += 2)
        if (nt_nemo_writer_declare_file(w, files[i], files[i + 1], strlen(files[i + 1]), &err))
            fail(path, &err);
    for (int i = 0; i < n; i++)
        if (nt_nemo_writer_declare(w, ts[i].name, ts[i].fmt, ts[i].ndim, ts[i].shape, &err))
            fail(path, &err);
    if (nt_nemo_writer_begin(w, &err)) fail(path, &err);
    for (int i = 0; i < n; i++) {
        int packed = ts[i].fmt == NT_DTYPE_Q8_2F || ts[i].fmt == NT_DTYPE_Q4TP ||
            nt_dtype_is_ggml_block(ts[i].fmt);
        uint64_t bytes = packed ? nt_matrix_bytes(ts[i].fmt, ts[i].shape[0], ts[i].shape[1])
                                : nt_dtype_size(ts[i].fmt);
        if (!packed)
            for (int d = 0; d < ts[i].ndim; d++) bytes *= (uint64_t)ts[i].shape[d];
        for (uint64_t j = 0; j < bytes; j++) {
            uint8_t v = (uint8_t)(i * 37 + j);
            if (nt_nemo_writer_append(w, &v, 1, &err)) fail(path, &err);
        }
    }
    if (nt_nemo_writer_commit(w, &err)) fail(path, &err);
    nt_nemo_writer_free(w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_nemo_seeds DIR\n");
        return 2;
    }
    static const struct t mix[] = {
        {"in_proj.weight", NT_DTYPE_Q8_2F, 2, {3, 8}},
        {"up_proj.weight", NT_DTYPE_Q4TP, 2, {2, 32}},
        {"norm.weight", NT_DTYPE_F32, 1, {3}},
        {"embed", NT_DTYPE_BF16, 2, {2, 2}},
        {"odd", NT_DTYPE_F16, 1, {1}},
        {"scalar", NT_DTYPE_F32, 0, {0}},
        {"empty", NT_DTYPE_F32, 2, {0, 3}},
    };
    static const struct t weird[] = {
        {"q\"u\\o/t\xc3\xa9\n", NT_DTYPE_Q4TP, 2, {1, 64}},
        {"o", NT_DTYPE_Q8_2F, 2, {1, 4}},
    };
    /* every llama.cpp block type, as a converted GGUF holds them (one or two rows of whole
     * blocks), beside a plain tensor */
    static const struct t blocks[] = {
        {"q8_0", NT_DTYPE_GGML_Q8_0, 2, {2, 32}},     {"q4_0", NT_DTYPE_GGML_Q4_0, 2, {1, 64}},
        {"q4_1", NT_DTYPE_GGML_Q4_1, 2, {2, 32}},     {"q5_0", NT_DTYPE_GGML_Q5_0, 2, {1, 32}},
        {"q5_1", NT_DTYPE_GGML_Q5_1, 2, {1, 32}},     {"iq4_nl", NT_DTYPE_GGML_IQ4_NL, 2, {1, 32}},
        {"mxfp4", NT_DTYPE_GGML_MXFP4, 2, {3, 32}},   {"q4_k", NT_DTYPE_GGML_Q4_K, 2, {1, 256}},
        {"q5_k", NT_DTYPE_GGML_Q5_K, 2, {1, 256}},    {"q6_k", NT_DTYPE_GGML_Q6_K, 2, {2, 256}},
        {"norm", NT_DTYPE_F32, 1, {2}},
    };
    static const char *const files[] = {"config.json",
                                        "{\"model_type\":\"nemotron_h\"}",
                                        "tokenizer_config.json",
                                        "{\"chat_template\":\"{{x}}\"}",
                                        "empty.txt",
                                        ""};
    seed(argv[1], "mix.nemo", mix, 7, files, 6);
    seed(argv[1], "weird.nemo", weird, 2, files, 2);
    seed(argv[1], "blocks.nemo", blocks, (int)(sizeof blocks / sizeof blocks[0]), files, 2);
    seed(argv[1], "files-only.nemo", NULL, 0, files, 4);
    seed(argv[1], "empty.nemo", NULL, 0, NULL, 0);
    return 0;
}

#endif
