/* fuzz_gguf.c - libFuzzer entry point: any bytes, opened as one GGUF file.
 *
 * The input goes to nt_gguf_open_bytes as borrowed bytes of exactly the input's size, so
 * AddressSanitizer catches any read past the end. Beyond "no crash", a file that opens is
 * checked against the reader's contract: every key and tensor found by its name; each value's
 * bytes inside the input, string arrays walked to exactly their end, integer elements readable;
 * each typed getter either answers or refuses with a message; each tensor of a known type, its
 * shape 1..4 positive dimensions whose row is whole blocks, its bytes the shape's, aligned,
 * inside the input and disjoint from the others. A refused file must leave *out NULL and a
 * message. Then the file goes on as a model would (src/model/gguf_model.c): its tokenizer
 * metadata made into a tokenizer.json and loaded, and the model source built from it (config
 * from the metadata, tensors as views) and bound; each either works or refuses with a message,
 * and every view lies inside the input. tests/fuzz/README.md says how to build and run it.
 */
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/weights.h"
#include "text/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken contract is a finding: abort so libFuzzer saves the input. */
#define EXPECT(x) ((x) ? (void)0 : abort())

static int inside(const uint8_t *p, uint64_t n, const uint8_t *data, size_t size) {
    return p >= data && (uint64_t)(p - data) <= size && n <= size - (uint64_t)(p - data);
}

static int compare_by_data(const void *a, const void *b) {
    const struct nt_gguf_tensor *x = *(const struct nt_gguf_tensor *const *)a;
    const struct nt_gguf_tensor *y = *(const struct nt_gguf_tensor *const *)b;
    const uint8_t *p = x->data, *q = y->data;
    return p < q ? -1 : p > q;
}

static void check_kv(const struct nt_gguf *g, const struct nt_gguf_kv *kv, const uint8_t *data,
                     size_t size) {
    volatile uint8_t sink = 0;
    EXPECT(nt_gguf_find(g, kv->key) == kv);
    EXPECT(kv->type < NT_GGUF_VTYPE_COUNT && kv->arr_type < NT_GGUF_VTYPE_COUNT);
    EXPECT(inside(kv->val, kv->val_bytes, data, size));
    if (kv->val_bytes) sink ^= kv->val[0] ^ kv->val[kv->val_bytes - 1];
    if (kv->type == NT_GGUF_STRING) EXPECT(kv->str_len == kv->val_bytes);
    if (kv->type == NT_GGUF_ARRAY && kv->arr_type == NT_GGUF_STRING) {
        uint64_t pos = 0, len;
        const char *s;
        for (uint64_t i = 0; i < kv->n; i++) {
            nt_gguf_next_str(kv, &pos, &s, &len);
            EXPECT(inside((const uint8_t *)s, len, data, size));
        }
        EXPECT(pos == kv->val_bytes);
    }
    int is_int = kv->arr_type <= NT_GGUF_I32 || kv->arr_type == NT_GGUF_U64 ||
                 kv->arr_type == NT_GGUF_I64;
    if (is_int && kv->n) sink ^= (uint8_t)nt_gguf_int_at(kv, kv->n - 1);
    (void)sink;
    /* every getter on every key: an answer, or a refusal that says why */
    struct nt_err err;
    uint64_t u;
    int64_t i;
    double f;
    int b;
    const char *s;
    uint64_t len;
    const struct nt_gguf_kv *arr;
    nemotron_status st[] = {
        nt_gguf_get_uint(g, kv->key, &u, &err),  nt_gguf_get_int(g, kv->key, &i, &err),
        nt_gguf_get_float(g, kv->key, &f, &err), nt_gguf_get_bool(g, kv->key, &b, &err),
        nt_gguf_get_str(g, kv->key, &s, &len, &err),
        nt_gguf_get_array(g, kv->key, kv->arr_type, &arr, &err),
    };
    for (size_t k = 0; k < sizeof st / sizeof st[0]; k++)
        EXPECT(st[k] == NEMOTRON_OK || st[k] == NEMOTRON_ERR_CONFIG);
    EXPECT(st[1] == NEMOTRON_OK || st[0] == NEMOTRON_ERR_CONFIG || kv->type == NT_GGUF_U64);
    EXPECT((st[4] == NEMOTRON_OK) == (kv->type == NT_GGUF_STRING));
    EXPECT((st[5] == NEMOTRON_OK) == (kv->type == NT_GGUF_ARRAY));
}

static void check_tensors(const struct nt_gguf *g, const uint8_t *data, size_t size) {
    const struct nt_gguf_tensor **sorted = malloc(((size_t)g->n_tensors + 1) * sizeof *sorted);
    EXPECT(sorted != NULL);
    volatile uint8_t sink = 0;
    EXPECT(g->alignment && !(g->alignment & (g->alignment - 1)));
    EXPECT(g->data_start % g->alignment == 0 || g->n_tensors == 0);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const struct nt_gguf_tensor *t = &g->tensors[i];
        EXPECT(nt_gguf_tensor(g, t->name) == t);
        EXPECT(t->ndim >= 1 && t->ndim <= NT_GGUF_MAX_DIMS);
        uint32_t be, bb;
        EXPECT(nt_ggml_type_block(t->type, &be, &bb) && nt_ggml_type_name(t->type));
        uint64_t n = 1;
        for (int d = 0; d < NT_GGUF_MAX_DIMS; d++) {
            EXPECT(t->ne[d] >= 1 && (d < t->ndim || t->ne[d] == 1));
            EXPECT(nt_mul_ok(n, (uint64_t)t->ne[d], &n));
        }
        EXPECT(n == t->n_elements && t->ne[0] % be == 0 && n / be * bb == t->nbytes);
        EXPECT(t->offset % g->alignment == 0);
        const uint8_t *p = t->data;
        EXPECT(p == data + g->data_start + t->offset && inside(p, t->nbytes, data, size));
        sink ^= p[0] ^ p[t->nbytes - 1]; /* nbytes >= 1: no dimension is 0 */
        sorted[i] = t;
    }
    (void)sink;
    qsort(sorted, (size_t)g->n_tensors, sizeof *sorted, compare_by_data);
    for (int64_t i = 1; i < g->n_tensors; i++)
        EXPECT((const uint8_t *)sorted[i - 1]->data + sorted[i - 1]->nbytes <=
               (const uint8_t *)sorted[i]->data);
    free(sorted);
}

/* The model's side; closes g. */
static void check_model(struct nt_gguf *g, const uint8_t *data, size_t size) {
    struct nt_err err = {{0}};
    char *json;
    size_t len;
    nemotron_status st = nt_tokenizer_json_from_gguf(g, &json, &len, &err);
    if (st == NEMOTRON_OK) {
        struct nt_tokenizer *t;
        if (nt_tokenizer_load_bytes(json, len, "fuzz tokenizer", &t, &err) == NEMOTRON_OK) nt_tokenizer_free(t);
        else EXPECT(err.msg[0] != 0);
        nt_free(json);
    } else {
        EXPECT(err.msg[0] != 0 && json == NULL);
    }
    struct nt_model_source s;
    memset(&s, 0, sizeof s);
    nt_table_init(&s.table);
    err.msg[0] = 0;
    st = nt_gguf_source_from(&s, g, &err);
    if (st == NEMOTRON_OK) {
        for (int i = 0; i < s.table.n_tensors; i++)
            EXPECT(inside(s.table.tensors[i].data, s.table.tensors[i].nbytes, data, size));
        st = nt_config_parse((const char *)s.file_bytes[0], s.file_lens[0], "fuzz config", &s.cfg, &err);
        struct nt_weights w;
        if (st == NEMOTRON_OK && (st = nt_weights_bind(&w, &s.cfg, &s.table, &err)) == NEMOTRON_OK)
            nt_weights_free(&w);
    }
    EXPECT(st == NEMOTRON_OK || err.msg[0] != 0);
    nt_model_source_close(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct nt_gguf *g = (struct nt_gguf *)&g; /* must become NULL or a handle */
    struct nt_err err = {{0}};
    nemotron_status st = nt_gguf_open_bytes("fuzz.gguf", data, size, 0, &g, &err);
    EXPECT(st == NEMOTRON_OK || st == NEMOTRON_ERR_FORMAT || st == NEMOTRON_ERR_UNSUPPORTED ||
           st == NEMOTRON_ERR_NOMEM);
    if (st != NEMOTRON_OK) {
        EXPECT(g == NULL && !strncmp(err.msg, "fuzz.gguf: ", 11) && err.msg[11] != 0);
        return 0;
    }
    EXPECT(g->map == data && g->size == size && (g->version == 2 || g->version == 3));
    for (int64_t i = 0; i < g->n_kv; i++) check_kv(g, &g->kv[i], data, size);
    if (g->arch) EXPECT(nt_gguf_find(g, "general.architecture") != NULL);
    check_tensors(g, data, size);
    check_model(g, data, size);
    return 0;
}
