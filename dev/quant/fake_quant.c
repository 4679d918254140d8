/* fake_quant.c - a copy of a model directory whose weights went through a format and back.
 *
 *   build/dev/fake_quant IN_DIR OUT_DIR EXPERTS PROJECTIONS
 *
 * EXPERTS and PROJECTIONS are each one of none, q8_2f, q4tp, base4, base4s or q4_0 (the 4.5-bit
 * comparison baselines of src/quant/baseline.h: searched positive scales, searched signed
 * scales, amax scales): the routed experts, and every other product matrix (the
 * roles of src/convert/mix.h), are replaced by dequant(quant(W)); everything else is kept. The
 * output is one f32 model.safetensors plus the input's text files, so the engine runs it with
 * float products: the model-level error of the weights alone, with no activation rounding. This
 * is how docs/QUANT.md compares q4tp with the baseline (which has no payload or kernels) on equal
 * terms; a converted .nemo adds the packed kernels' int8 activations on top.
 */
#include "convert/mix.h"
#include "quant/baseline.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fmt { F_NONE, F_Q8, F_Q4TP, F_BASE4, F_BASE4S, F_Q4_0 };

static int parse_fmt(const char *s, enum fmt *out) {
    static const char *names[] = {"none", "q8_2f", "q4tp", "base4", "base4s", "q4_0"};
    for (int i = 0; i < 6; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum fmt)i;
            return 1;
        }
    return 0;
}

static float element(const struct nt_tensor *t, uint64_t i) {
    const uint8_t *p = (const uint8_t *)t->data;
    if (t->dtype == NT_DTYPE_F32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (t->dtype == NT_DTYPE_F16) return nt_f16_to_f32(h);
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* W (rows x cols, f32) through `f` and back, in place. */
static void roundtrip(enum fmt f, float *W, int64_t rows, int64_t cols) {
    if (f == F_BASE4 || f == F_BASE4S || f == F_Q4_0) {
        float *out = malloc((size_t)(rows * cols) * sizeof *out);
        if (!out) abort();
        if (f == F_BASE4)
            nt_q4_baseline_roundtrip(W, rows, cols, out);
        else if (f == F_BASE4S)
            nt_q4_baseline_signed_roundtrip(W, rows, cols, out);
        else
            nt_q4_baseline_amax_roundtrip(W, rows, cols, out);
        memcpy(W, out, (size_t)(rows * cols) * sizeof *out);
        free(out);
        return;
    }
    enum nt_dtype d = f == F_Q8 ? NT_DTYPE_Q8_2F : NT_DTYPE_Q4TP;
    uint8_t *payload = malloc(nt_matrix_bytes(d, rows, cols));
    if (!payload) abort();
    nt_quantize_matrix(d, W, rows, cols, payload);
    for (int64_t r = 0; r < rows; r++) nt_matrix_dequant_row(d, payload, rows, cols, r, W + r * cols);
    free(payload);
}

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return 0; /* optional files */
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out) == 0 ? 1 : -1;
}

int main(int argc, char **argv) {
    enum fmt fe, fp;
    if (argc != 5 || !parse_fmt(argv[3], &fe) || !parse_fmt(argv[4], &fp)) {
        fprintf(stderr, "usage: fake_quant IN_DIR OUT_DIR EXPERTS PROJECTIONS "
                        "(each none, q8_2f, q4tp, base4, base4s or q4_0)\n");
        return 2;
    }
    struct nt_tensor_table t;
    struct nt_err err = {0};
    nt_table_init(&t);
    if (nt_table_open_dir(&t, argv[1], &err)) {
        fprintf(stderr, "fake_quant: %s\n", err.msg);
        return 1;
    }
    char path[4096];
    static const char *texts[] = {"config.json", "generation_config.json", "tokenizer.json",
                                  "tokenizer_config.json", "special_tokens_map.json"};
    for (int i = 0; i < 5; i++) {
        char from[4096];
        snprintf(from, sizeof from, "%s/%s", argv[1], texts[i]);
        snprintf(path, sizeof path, "%s/%s", argv[2], texts[i]);
        if (copy_file(from, path) < 0) {
            fprintf(stderr, "fake_quant: cannot write %s\n", path);
            return 1;
        }
    }
    for (int i = 0; i < t.n_tensors; i++)
        if (t.tensors[i].dtype != NT_DTYPE_F32 && t.tensors[i].dtype != NT_DTYPE_F16 &&
            t.tensors[i].dtype != NT_DTYPE_BF16) {
            fprintf(stderr, "fake_quant: %s is %s; only F32, F16 and BF16 checkpoints are read\n",
                    t.tensors[i].name, nt_dtype_name(t.tensors[i].dtype));
            return 1;
        }
    /* the header: every tensor as F32, in table order */
    size_t cap = 1 << 20, len = 0;
    char *hdr = malloc(cap);
    uint64_t off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int i = 0; i < t.n_tensors; i++) {
        const struct nt_tensor *x = &t.tensors[i];
        uint64_t n = x->nbytes / nt_dtype_size(x->dtype);
        if (cap - len < 1024) hdr = realloc(hdr, cap *= 2);
        len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                                i ? "," : "", x->name);
        for (int d = 0; d < x->ndim; d++)
            len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "", (long long)x->shape[d]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%llu,%llu]}",
                                (unsigned long long)off, (unsigned long long)(off + 4 * n));
        off += 4 * n;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", argv[2]);
    FILE *out = fopen(path, "wb");
    if (!out) {
        fprintf(stderr, "fake_quant: cannot write %s\n", path);
        return 1;
    }
    uint64_t hl = len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    fwrite(le, 1, 8, out);
    fwrite(hdr, 1, len, out);
    for (int i = 0; i < t.n_tensors; i++) {
        const struct nt_tensor *x = &t.tensors[i];
        uint64_t n = x->nbytes / nt_dtype_size(x->dtype);
        float *w = malloc(n * sizeof *w);
        if (!w) abort();
        for (uint64_t k = 0; k < n; k++) w[k] = element(x, k);
        enum nt_role role = nt_tensor_role(x->name, x->ndim);
        enum fmt f = role == NT_ROLE_EXPERT ? fe : role == NT_ROLE_PROJECTION ? fp : F_NONE;
        if (f != F_NONE && x->shape[1] % 32 == 0) roundtrip(f, w, x->shape[0], x->shape[1]);
        fwrite(w, sizeof *w, n, out);
        free(w);
    }
    free(hdr);
    nt_table_close(&t);
    if (fclose(out) != 0) {
        fprintf(stderr, "fake_quant: writing %s failed\n", path);
        return 1;
    }
    return 0;
}
