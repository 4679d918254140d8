/* gguf_info.c - `nemotron gguf-info FILE.gguf`: what a GGUF file holds, read by the library's
 * GGUF reader (src/model/gguf.h): the architecture, every metadata key with its type and value
 * (arrays summarized by their first elements), the tensor table (type, shape with ne[0] first as
 * llama.cpp prints it, bytes, offset; for a split, the part) and the bytes per type, and whether
 * the reader accepts it (`-m FILE.gguf` runs one on every command).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model/gguf.h"

/* Strings show at most this many bytes (chat templates run to kilobytes). */
#define SHOW_STR 72
/* Arrays show their first few elements. */
#define SHOW_ELEMS 4

/* A string value, quoted, control bytes escaped, cut at SHOW_STR bytes. */
static void print_str(const char *s, uint64_t len) {
    putchar('"');
    uint64_t n = len < SHOW_STR ? len : SHOW_STR;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
        else putchar(ch);
    }
    putchar('"');
    if (n < len) printf("... (%" PRIu64 " bytes)", len);
}

/* One element of a fixed-size type at p. */
static void print_scalar(uint32_t type, const uint8_t *p) {
    struct nt_gguf_kv one = {.type = type, .arr_type = type, .n = 1, .val = p};
    if (type == NT_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        printf("%g", f);
    } else if (type == NT_GGUF_F64) {
        double d;
        memcpy(&d, p, 8);
        printf("%g", d);
    } else if (type == NT_GGUF_BOOL) {
        fputs(p[0] ? "true" : "false", stdout);
    } else if (type == NT_GGUF_U64) {
        uint64_t v;
        memcpy(&v, p, 8);
        printf("%" PRIu64, v);
    } else {
        printf("%" PRId64, nt_gguf_int_at(&one, 0));
    }
}

static void print_value(const struct nt_gguf_kv *kv) {
    if (kv->type == NT_GGUF_STRING) {
        print_str((const char *)kv->val, kv->str_len);
    } else if (kv->type != NT_GGUF_ARRAY) {
        print_scalar(kv->type, kv->val);
    } else {
        printf("[%" PRIu64 " x %s]", kv->n, nt_gguf_vtype_name(kv->arr_type));
        uint64_t show = kv->n < SHOW_ELEMS ? kv->n : SHOW_ELEMS;
        if (kv->arr_type == NT_GGUF_ARRAY) return; /* nested: the count says enough */
        uint64_t pos = 0;
        for (uint64_t i = 0; i < show; i++) {
            fputs(i ? ", " : " ", stdout);
            if (kv->arr_type == NT_GGUF_STRING) {
                const char *s;
                uint64_t len;
                nt_gguf_next_str(kv, &pos, &s, &len);
                print_str(s, len);
            } else {
                print_scalar(kv->arr_type, kv->val + i * (kv->val_bytes / kv->n));
            }
        }
        if (show < kv->n) fputs(", ...", stdout);
    }
}

int cmd_gguf_info(const struct args *a) {
    struct nt_gguf *g;
    struct nt_err err;
    nemotron_status st = nt_gguf_open(a->model, &g, &err);
    if (st) return cli_fail("gguf-info", err.msg, st);
    printf("file: %s\nformat: GGUF v%" PRIu32 ", %zu bytes, alignment %" PRIu32
           ", data section at byte %" PRIu64 "\n",
           g->path, g->version, g->size, g->alignment, g->data_start);
    if (g->n_parts > 1)
        printf("split: %d parts (the metadata is the first part's; the table gives each tensor's "
               "part)\n", g->n_parts);
    printf("architecture: %s\n", g->arch ? g->arch : "(none: no general.architecture key)");
    printf("\nmetadata: %" PRId64 " keys\n", g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) {
        const struct nt_gguf_kv *kv = &g->kv[i];
        printf("  %-48s %-6s ", kv->key, nt_gguf_vtype_name(kv->type));
        print_value(kv);
        putchar('\n');
    }
    printf("\ntensors: %" PRId64 "\n", g->n_tensors);
    printf("  %-44s %-7s %-22s %12s %12s%s\n", "name", "type", "shape (ne0 first)", "bytes", "offset",
           g->n_parts > 1 ? "  part" : "");
    uint64_t type_bytes[NT_GGML_TYPE_COUNT] = {0}, type_elems[NT_GGML_TYPE_COUNT] = {0};
    int type_count[NT_GGML_TYPE_COUNT] = {0};
    uint64_t total = 0, elems = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct nt_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < t->ndim; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-44s %-7s %-22s %12" PRIu64 " %12" PRIu64, t->name,
               nt_ggml_type_name(t->type), shape, t->nbytes, t->offset);
        if (g->n_parts > 1) printf("  %4d", t->part + 1);
        putchar('\n');
        type_bytes[t->type] += t->nbytes;
        type_elems[t->type] += t->n_elements;
        type_count[t->type]++;
        total += t->nbytes;
        elems += t->n_elements;
    }
    printf("\nby type:\n");
    for (int t = 0; t < NT_GGML_TYPE_COUNT; t++)
        if (type_count[t])
            printf("  %-7s %5d tensors %14" PRIu64 " weights %14" PRIu64 " bytes %6.2f bits/weight\n",
                   nt_ggml_type_name((uint32_t)t), type_count[t], type_elems[t], type_bytes[t],
                   8.0 * (double)type_bytes[t] / (double)type_elems[t]);
    printf("  total   %5" PRId64 " tensors %14" PRIu64 " weights %14" PRIu64 " bytes %6.2f bits/weight\n",
           g->n_tensors, elems, total, elems ? 8.0 * (double)total / (double)elems : 0.0);
    printf("\nnemotron runs nemotron_h / nemotron_h_moe GGUFs with -m FILE.gguf, on the CPU and CUDA (tensor types "
           "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K)\n");
    nt_gguf_close(g);
    return 0;
}
