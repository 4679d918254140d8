/* test_gguf.c - the GGUF reader (src/model/gguf.c): small files built byte by byte for every
 * value type, every block type's size and every fault the reader refuses (each case checks the
 * status and the words of its message), then the real llama.cpp file of the demo model
 * (../shared/data/gguf/kjv-Q4_K_M.gguf, or $NT_GGUF_FILE) against its reference JSON and the
 * demo model's config.json.
 */
#include "model/gguf.h"

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"

/* ------------------------------------------------------------------------------------------ */
/* building files                                                                             */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) exit(2);
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void u8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str(struct buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

/* "GGUF", version, tensor count, key count */
static void header(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_str(struct buf *b, const char *key, const char *v) {
    str(b, key);
    u32(b, NT_GGUF_STRING);
    str(b, v);
}
static void kv_u32(struct buf *b, const char *key, uint32_t v) {
    str(b, key);
    u32(b, NT_GGUF_U32);
    u32(b, v);
}
/* A tensor info of ndim dims (ne[0] first). */
static void tinfo(struct buf *b, const char *name, int ndim, const uint64_t *ne, uint32_t type,
                  uint64_t offset) {
    str(b, name);
    u32(b, (uint32_t)ndim);
    for (int d = 0; d < ndim; d++) u64(b, ne[d]);
    u32(b, type);
    u64(b, offset);
}
/* Pads to the alignment, then data_len bytes (byte i = i * 5 + 3, so views can be checked). */
static void data(struct buf *b, uint32_t align, size_t data_len) {
    while (b->n % align) u8(b, 0);
    for (size_t i = 0; i < data_len; i++) u8(b, (uint8_t)(i * 5 + 3));
}

/* The valid file most cases start from: an architecture, three token strings, a 4-float tensor
 * at 0 and a [32, 2] Q4_0 tensor (two 18-byte blocks) at 32, the file ending where it ends. */
static size_t valid_header_end; /* where the data section starts */
static void valid(struct buf *b, uint32_t version) {
    header(b, version, 2, 2);
    kv_str(b, "general.architecture", "test_arch");
    str(b, "tokenizer.ggml.tokens");
    u32(b, NT_GGUF_ARRAY);
    u32(b, NT_GGUF_STRING);
    u64(b, 3);
    str(b, "<s>");
    str(b, "");
    str(b, "h\0i"); /* strlen: "h" */
    tinfo(b, "a", 1, (uint64_t[]){4}, NT_GGML_F32, 0);
    tinfo(b, "b", 2, (uint64_t[]){32, 2}, NT_GGML_Q4_0, 32);
    data(b, 32, 0);
    valid_header_end = b->n;
    data(b, 32, 32 + 36);
}

/* Opens b; the status must be want (and the message hold each of the words, NULL-ended) or OK. */
static struct nt_gguf *open_expect(const struct buf *b, nemotron_status want, const char *what,
                                   const char *word1, const char *word2) {
    struct nt_gguf *g = (struct nt_gguf *)1;
    struct nt_err err = {{0}};
    /* an exact-size copy, so ASan sees a read past the end */
    uint8_t *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    nemotron_status st = nt_gguf_open_bytes("t.gguf", copy, b->n, 0, &g, &err);
    CHECK(st == want, "%s: status %d, want %d (%s)", what, st, want, err.msg);
    if (st) {
        CHECK(g == NULL, "%s: a failed open leaves *out NULL", what);
        CHECK(strstr(err.msg, "t.gguf: ") == err.msg, "%s: message names the file: %s", what,
              err.msg);
        CHECK(!word1 || strstr(err.msg, word1), "%s: message lacks \"%s\": %s", what, word1,
              err.msg);
        CHECK(!word2 || strstr(err.msg, word2), "%s: message lacks \"%s\": %s", what, word2,
              err.msg);
        free(copy);
        return NULL;
    }
    /* the caller closes g and frees the copy through g->map */
    return g;
}

static void close_copy(struct nt_gguf *g) {
    if (!g) return;
    uint8_t *copy = (uint8_t *)g->map;
    nt_gguf_close(g);
    free(copy);
}

/* ------------------------------------------------------------------------------------------ */
/* valid files                                                                                */

static void test_valid(void) {
    struct buf b = {0};
    for (uint32_t version = 2; version <= 3; version++) {
        valid(&b, version);
        struct nt_gguf *g = open_expect(&b, NEMOTRON_OK, "valid", NULL, NULL);
        if (!g) continue;
        CHECK(g->version == version, "version %u", g->version);
        CHECK(g->n_kv == 2 && g->n_tensors == 2, "counts %lld %lld", (long long)g->n_kv,
              (long long)g->n_tensors);
        CHECK(g->alignment == 32 && g->data_start == valid_header_end, "data at %llu, want %zu",
              (unsigned long long)g->data_start, valid_header_end);
        CHECK(g->arch && !strcmp(g->arch, "test_arch"), "arch");
        const struct nt_gguf_tensor *a = nt_gguf_tensor(g, "a"), *q = nt_gguf_tensor(g, "b");
        CHECK(a == &g->tensors[0] && q == &g->tensors[1], "tensors found by name");
        CHECK(!nt_gguf_tensor(g, "c") && !nt_gguf_tensor(g, ""), "absent names");
        if (a && q) {
            CHECK(a->ndim == 1 && a->ne[0] == 4 && a->ne[1] == 1 && a->nbytes == 16 &&
                      a->n_elements == 4, "a's shape and size");
            CHECK(q->ndim == 2 && q->ne[0] == 32 && q->ne[1] == 2 && q->nbytes == 36 &&
                      q->type == NT_GGML_Q4_0, "b's shape and size");
            CHECK((const uint8_t *)a->data == g->map + valid_header_end &&
                      ((const uint8_t *)a->data)[1] == 8, "a's data view");
            CHECK((const uint8_t *)q->data == g->map + valid_header_end + 32 &&
                      ((const uint8_t *)q->data)[35] == (uint8_t)(67 * 5 + 3), "b's data view");
        }
        struct nt_err err;
        const struct nt_gguf_kv *kv;
        CHECK(!nt_gguf_get_array(g, "tokenizer.ggml.tokens", NT_GGUF_STRING, &kv, &err) &&
                  kv->n == 3, "tokens array: %s", err.msg);
        if (kv) {
            uint64_t pos = 0, len;
            const char *s;
            nt_gguf_next_str(kv, &pos, &s, &len);
            CHECK(len == 3 && !memcmp(s, "<s>", 3), "token 0");
            nt_gguf_next_str(kv, &pos, &s, &len);
            CHECK(len == 0, "token 1 empty");
            nt_gguf_next_str(kv, &pos, &s, &len);
            CHECK(len == 1 && s[0] == 'h' && pos == kv->val_bytes, "token 2 and the end");
        }
        close_copy(g);
    }
    /* no tensors: the file may end right after its metadata */
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 64);
    struct nt_gguf *g = open_expect(&b, NEMOTRON_OK, "no tensors", NULL, NULL);
    CHECK(g && g->alignment == 64 && !g->arch, "alignment 64, no architecture");
    close_copy(g);
    /* general.alignment moves the data section and the offsets' grid */
    header(&b, 3, 2, 1);
    kv_u32(&b, "general.alignment", 8);
    tinfo(&b, "x", 1, (uint64_t[]){2}, NT_GGML_F16, 0);
    tinfo(&b, "y", 1, (uint64_t[]){1}, NT_GGML_I8, 8);
    size_t start = (b.n + 7) / 8 * 8;
    data(&b, 8, 9);
    g = open_expect(&b, NEMOTRON_OK, "alignment 8", NULL, NULL);
    CHECK(g && g->data_start == start && g->tensors[1].nbytes == 1, "8-aligned data section");
    close_copy(g);
    free(b.p);
}

/* Every value type, nested arrays, and the typed getters' answers and refusals. */
static void test_values(void) {
    struct buf b = {0};
    header(&b, 3, 0, 16);
    str(&b, "u8"); u32(&b, NT_GGUF_U8); u8(&b, 200);
    str(&b, "i8"); u32(&b, NT_GGUF_I8); u8(&b, 0xfe);
    str(&b, "u16"); u32(&b, NT_GGUF_U16); put(&b, (uint16_t[]){65535}, 2);
    str(&b, "i16"); u32(&b, NT_GGUF_I16); put(&b, (int16_t[]){-300}, 2);
    kv_u32(&b, "u32", 4000000000u);
    str(&b, "i32"); u32(&b, NT_GGUF_I32); put(&b, (int32_t[]){-5}, 4);
    str(&b, "f32"); u32(&b, NT_GGUF_F32); put(&b, (float[]){2.5f}, 4);
    str(&b, "bool"); u32(&b, NT_GGUF_BOOL); u8(&b, 1);
    kv_str(&b, "string", "hello");
    str(&b, "u64"); u32(&b, NT_GGUF_U64); u64(&b, UINT64_MAX);
    str(&b, "i64"); u32(&b, NT_GGUF_I64); put(&b, (int64_t[]){INT64_MIN}, 8);
    str(&b, "f64"); u32(&b, NT_GGUF_F64); put(&b, (double[]){-0.125}, 8);
    str(&b, "ints"); u32(&b, NT_GGUF_ARRAY); u32(&b, NT_GGUF_I32); u64(&b, 3);
    put(&b, (int32_t[]){0, 256, -1}, 12);
    /* an array of two arrays: [[1, 2], []] of u16, then one of strings */
    str(&b, "nested"); u32(&b, NT_GGUF_ARRAY); u32(&b, NT_GGUF_ARRAY); u64(&b, 3);
    u32(&b, NT_GGUF_U16); u64(&b, 2); put(&b, (uint16_t[]){1, 2}, 4);
    u32(&b, NT_GGUF_U16); u64(&b, 0);
    u32(&b, NT_GGUF_STRING); u64(&b, 1); str(&b, "deep");
    str(&b, "bool2"); u32(&b, NT_GGUF_BOOL); u8(&b, 2);
    str(&b, "empty"); u32(&b, NT_GGUF_ARRAY); u32(&b, NT_GGUF_F64); u64(&b, 0);
    struct nt_gguf *g = open_expect(&b, NEMOTRON_OK, "values", NULL, NULL);
    if (!g) {
        free(b.p);
        return;
    }
    struct nt_err err;
    uint64_t u;
    int64_t i;
    double f;
    int flag;
    const char *s;
    uint64_t len;
    CHECK(!nt_gguf_get_uint(g, "u8", &u, &err) && u == 200, "u8");
    CHECK(!nt_gguf_get_int(g, "i8", &i, &err) && i == -2, "i8");
    CHECK(!nt_gguf_get_uint(g, "u16", &u, &err) && u == 65535, "u16");
    CHECK(!nt_gguf_get_int(g, "i16", &i, &err) && i == -300, "i16");
    CHECK(!nt_gguf_get_uint(g, "u32", &u, &err) && u == 4000000000u, "u32");
    CHECK(!nt_gguf_get_int(g, "i32", &i, &err) && i == -5, "i32");
    CHECK(!nt_gguf_get_float(g, "f32", &f, &err) && f == 2.5, "f32");
    CHECK(!nt_gguf_get_bool(g, "bool", &flag, &err) && flag == 1, "bool");
    CHECK(!nt_gguf_get_str(g, "string", &s, &len, &err) && len == 5 && !memcmp(s, "hello", 5),
          "string");
    CHECK(!nt_gguf_get_uint(g, "u64", &u, &err) && u == UINT64_MAX, "u64");
    CHECK(!nt_gguf_get_int(g, "i64", &i, &err) && i == INT64_MIN, "i64");
    CHECK(!nt_gguf_get_float(g, "f64", &f, &err) && f == -0.125, "f64");
    const struct nt_gguf_kv *kv = NULL;
    CHECK(!nt_gguf_get_array(g, "ints", NT_GGUF_I32, &kv, &err) && kv->n == 3 &&
              nt_gguf_int_at(kv, 1) == 256 && nt_gguf_int_at(kv, 2) == -1, "ints");
    kv = nt_gguf_find(g, "nested");
    CHECK(kv && kv->type == NT_GGUF_ARRAY && kv->arr_type == NT_GGUF_ARRAY && kv->n == 3 &&
              kv->val_bytes == 12 + 4 + 12 + 12 + 12, "nested array's extent");
    CHECK(!nt_gguf_get_array(g, "empty", NT_GGUF_F64, &kv, &err) && kv->n == 0, "empty array");
    /* refusals name the key and the type expected */
#define REFUSE(call, word)                                                                     \
    do {                                                                                       \
        nemotron_status s_ = (call);                                                           \
        CHECK(s_ == NEMOTRON_ERR_CONFIG && strstr(err.msg, word), "%s: %s", #call, err.msg);   \
    } while (0)
    REFUSE(nt_gguf_get_uint(g, "i8", &u, &err), "key i8: -2 is negative");
    REFUSE(nt_gguf_get_uint(g, "f32", &u, &err), "key f32: is f32, expected an unsigned integer");
    REFUSE(nt_gguf_get_int(g, "u64", &i, &err), "key u64: past the int64 range");
    REFUSE(nt_gguf_get_int(g, "string", &i, &err), "key string: is string, expected an integer");
    REFUSE(nt_gguf_get_float(g, "i32", &f, &err), "key i32: is i32, expected a float");
    REFUSE(nt_gguf_get_bool(g, "u8", &flag, &err), "key u8: is u8, expected bool");
    REFUSE(nt_gguf_get_bool(g, "bool2", &flag, &err), "key bool2: bool byte 2");
    REFUSE(nt_gguf_get_str(g, "ints", &s, &len, &err), "key ints: is an array of i32, expected string");
    REFUSE(nt_gguf_get_array(g, "ints", NT_GGUF_U32, &kv, &err), "expected an array of u32");
    REFUSE(nt_gguf_get_array(g, "u8", NT_GGUF_U8, &kv, &err), "key u8: is u8, expected an array of u8");
    REFUSE(nt_gguf_get_uint(g, "nope", &u, &err), "t.gguf: key nope: missing");
#undef REFUSE
    close_copy(g);
    free(b.p);
}

/* Names past one 64 KiB block of copies: 4000 keys of 40 bytes, and an architecture of 100000
 * bytes (longer than a block), every one found again with its value. */
static void test_many_names(void) {
    struct buf b = {0};
    header(&b, 3, 0, 4001);
    char key[64];
    for (int k = 0; k < 4000; k++) {
        snprintf(key, sizeof key, "many.names.%05d.padded-to-forty-bytes..", k);
        kv_u32(&b, key, (uint32_t)k * 3);
    }
    char *arch = malloc(100001);
    memset(arch, 'a', 100000);
    arch[100000] = 0;
    kv_str(&b, "general.architecture", arch);
    struct nt_gguf *g = open_expect(&b, NEMOTRON_OK, "many names", NULL, NULL);
    if (g) {
        int found = 0;
        for (int k = 0; k < 4000; k++) {
            snprintf(key, sizeof key, "many.names.%05d.padded-to-forty-bytes..", k);
            uint64_t v;
            struct nt_err err;
            found += !nt_gguf_get_uint(g, key, &v, &err) && v == (uint64_t)k * 3;
        }
        CHECK(found == 4000, "%d of 4000 keys found with their values", found);
        CHECK(g->arch && !strcmp(g->arch, arch), "the long architecture");
    }
    close_copy(g);
    free(arch);
    free(b.p);
}

/* Each block type's bytes per block, from ggml's block structs (d, m: f16 scales; qs: codes;
 * qh: high bits; scales: packed sub-block scales), and a tensor of 3 rows of 2 blocks sized by
 * the reader accordingly. */
static void test_block_sizes(void) {
    static const struct { uint32_t type; const char *name; uint32_t elems, bytes; } t[] = {
        {NT_GGML_F32, "F32", 1, 4}, {NT_GGML_F16, "F16", 1, 2}, {NT_GGML_BF16, "BF16", 1, 2},
        {NT_GGML_Q4_0, "Q4_0", 32, 2 + 16},         {NT_GGML_Q4_1, "Q4_1", 32, 2 + 2 + 16},
        {NT_GGML_Q5_0, "Q5_0", 32, 2 + 4 + 16},     {NT_GGML_Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
        {NT_GGML_Q8_0, "Q8_0", 32, 2 + 32},         {NT_GGML_Q8_1, "Q8_1", 32, 2 + 2 + 32},
        {NT_GGML_Q2_K, "Q2_K", 256, 16 + 64 + 2 + 2},
        {NT_GGML_Q3_K, "Q3_K", 256, 32 + 64 + 12 + 2},
        {NT_GGML_Q4_K, "Q4_K", 256, 2 + 2 + 12 + 128},
        {NT_GGML_Q5_K, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
        {NT_GGML_Q6_K, "Q6_K", 256, 128 + 64 + 16 + 2},
        {NT_GGML_Q8_K, "Q8_K", 256, 4 + 256 + 16 * 2},
        {NT_GGML_IQ4_NL, "IQ4_NL", 32, 2 + 16},
        {NT_GGML_IQ4_XS, "IQ4_XS", 256, 2 + 2 + 4 + 128},
        {NT_GGML_MXFP4, "MXFP4", 32, 1 + 16},       /* an e8m0 exponent, 32 e2m1 codes */
    };
    struct buf b = {0};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        uint32_t e = 0, by = 0;
        CHECK(nt_ggml_type_block(t[k].type, &e, &by) && e == t[k].elems && by == t[k].bytes,
              "%s: block %u elements, %u bytes; want %u, %u", t[k].name, e, by, t[k].elems,
              t[k].bytes);
        CHECK(nt_ggml_type_name(t[k].type) && !strcmp(nt_ggml_type_name(t[k].type), t[k].name),
              "%s's name", t[k].name);
        header(&b, 3, 1, 0);
        tinfo(&b, "w", 2, (uint64_t[]){2 * t[k].elems, 3}, t[k].type, 0);
        data(&b, 32, 6 * t[k].bytes);
        struct nt_gguf *g = open_expect(&b, NEMOTRON_OK, t[k].name, NULL, NULL);
        CHECK(g && g->tensors[0].nbytes == 6 * t[k].bytes, "%s: tensor bytes", t[k].name);
        close_copy(g);
    }
    uint32_t e, by;
    CHECK(!nt_ggml_type_block(4, &e, &by) && !nt_ggml_type_block(40, &e, &by) &&
              !nt_ggml_type_name(31), "removed and unknown types have no block");
    free(b.p);
}

/* ------------------------------------------------------------------------------------------ */
/* faults                                                                                     */

static void test_truncation(void) {
    struct buf b = {0};
    valid(&b, 3);
    /* every prefix of the valid file is refused (its last byte is the last tensor's) */
    for (size_t n = 0; n < b.n; n++) {
        struct buf cut = {b.p, n, b.n};
        char what[32];
        snprintf(what, sizeof what, "prefix %zu", n);
        open_expect(&cut, NEMOTRON_ERR_FORMAT, what, NULL, NULL);
    }
    struct buf cut = {b.p, b.n - 1, b.n};
    open_expect(&cut, NEMOTRON_ERR_FORMAT, "one byte short", "tensor b", "past the file's end");
    cut.n = 20;
    open_expect(&cut, NEMOTRON_ERR_FORMAT, "cut in the counts", "truncated inside the header", NULL);
    cut.n = valid_header_end - 40;
    open_expect(&cut, NEMOTRON_ERR_FORMAT, "cut in a tensor info", "tensor", NULL);
    free(b.p);
}

static void test_header_faults(void) {
    struct buf b = {0};
    valid(&b, 3);
    b.p[0] = 'X';
    open_expect(&b, NEMOTRON_ERR_FORMAT, "magic", "not a GGUF file", NULL);
    valid(&b, 1);
    open_expect(&b, NEMOTRON_ERR_UNSUPPORTED, "v1", "version 1", NULL);
    valid(&b, 4);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "v4", "unknown GGUF version 4", NULL);
    valid(&b, 0x03000000u);
    open_expect(&b, NEMOTRON_ERR_UNSUPPORTED, "big-endian", "big-endian", NULL);
    header(&b, 3, 0, UINT64_MAX);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "key count", "metadata keys cannot fit", NULL);
    header(&b, 3, (uint64_t)1 << 40, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "tensor count", "tensors cannot fit", NULL);
    free(b.p);
}

static void test_metadata_faults(void) {
    struct buf b = {0};
    header(&b, 3, 0, 1);
    u64(&b, UINT64_MAX - 3);
    data(&b, 1, 16); /* bytes enough for the key count to pass */
    open_expect(&b, NEMOTRON_ERR_FORMAT, "key length overflow", "metadata key 0", "past the end");
    header(&b, 3, 0, 1);
    u64(&b, 0);
    u32(&b, NT_GGUF_U8);
    u8(&b, 0);
    data(&b, 1, 8);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "empty key", "a name of 0 bytes", NULL);
    header(&b, 3, 0, 1);
    u64(&b, 3);
    put(&b, "a\0b", 3);
    u32(&b, NT_GGUF_U8);
    u8(&b, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "NUL in key", "NUL", NULL);
    header(&b, 3, 0, 2);
    kv_u32(&b, "general.x", 1);
    kv_u32(&b, "general.x", 2);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "duplicate key", "key general.x: given twice", NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, 13);
    u8(&b, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "value type", "key k: unknown value type 13", NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, NT_GGUF_STRING);
    u64(&b, UINT64_MAX);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "string length", "key k: a string runs past", NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, NT_GGUF_ARRAY);
    u32(&b, NT_GGUF_U64);
    u64(&b, (uint64_t)1 << 61); /* * 8 bytes overflows u64 */
    open_expect(&b, NEMOTRON_ERR_FORMAT, "array bytes overflow", "key k: an array of", NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, NT_GGUF_ARRAY);
    u32(&b, NT_GGUF_STRING);
    u64(&b, 1000);
    str(&b, "only one");
    open_expect(&b, NEMOTRON_ERR_FORMAT, "string array count", "key k: an array of 1000 strings",
                NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, NT_GGUF_ARRAY);
    u32(&b, 77);
    u64(&b, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "element type", "unknown array element type 77", NULL);
    header(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, NT_GGUF_ARRAY);
    for (int d = 0; d < NT_GGUF_MAX_DEPTH; d++) {
        u32(&b, NT_GGUF_ARRAY);
        u64(&b, 1);
    }
    u32(&b, NT_GGUF_U8);
    u64(&b, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "depth", "nested deeper than", NULL);
    /* known keys of the wrong type */
    header(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, NT_GGUF_U64);
    u64(&b, 32);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "alignment type", "general.alignment: is u64, expected u32",
                NULL);
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 48);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "alignment value", "48 is not a power of two", NULL);
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "alignment 0", "0 is not a power of two", NULL);
    header(&b, 3, 0, 1);
    kv_u32(&b, "general.architecture", 7);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "arch type", "general.architecture: is u32, expected string",
                NULL);
    header(&b, 3, 0, 1);
    str(&b, "tokenizer.ggml.tokens");
    u32(&b, NT_GGUF_ARRAY);
    u32(&b, NT_GGUF_I32);
    u64(&b, 0);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "tokens type",
                "tokenizer.ggml.tokens: is an array of i32, expected an array of string", NULL);
    header(&b, 3, 0, 1);
    kv_str(&b, "tokenizer.ggml.merges", "a b");
    open_expect(&b, NEMOTRON_ERR_FORMAT, "merges type", "is string (not an array)", NULL);
    header(&b, 3, 0, 1);
    str(&b, "general.architecture");
    u32(&b, NT_GGUF_STRING);
    u64(&b, 3);
    put(&b, "x\0y", 3);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "NUL in arch", "general.architecture", "NUL");
    /* split files */
    header(&b, 3, 0, 2);
    str(&b, "split.count");
    u32(&b, NT_GGUF_U16);
    put(&b, (uint16_t[]){3}, 2);
    str(&b, "split.no");
    u32(&b, NT_GGUF_U16);
    put(&b, (uint16_t[]){1}, 2);
    open_expect(&b, NEMOTRON_ERR_UNSUPPORTED, "split", "part 2 of a GGUF split into 3 files",
                "read from its first file");
    header(&b, 3, 0, 2);
    str(&b, "split.count");
    u32(&b, NT_GGUF_U16);
    put(&b, (uint16_t[]){2}, 2);
    str(&b, "split.no");
    u32(&b, NT_GGUF_U16);
    put(&b, (uint16_t[]){2}, 2);
    open_expect(&b, NEMOTRON_ERR_UNSUPPORTED, "split.no past count", "part 3 of a GGUF split into 2",
                NULL);
    free(b.p);
}

static void test_tensor_faults(void) {
    struct buf b = {0};
    struct { uint32_t ndim; uint64_t ne[5]; uint32_t type; uint64_t offset; nemotron_status st;
             const char *w1, *w2; } c[] = {
        {0, {0}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT, "tensor w: 0 dimensions", NULL},
        {5, {1, 1, 1, 1, 1}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT, "tensor w: 5 dimensions", NULL},
        {2, {4, 0}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT, "tensor w: dimension 1 is 0", NULL},
        {1, {(uint64_t)INT64_MAX + 1}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT, "dimension 0 is", NULL},
        {3, {(uint64_t)1 << 31, (uint64_t)1 << 31, 4}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT,
         "tensor w: the shape's element count overflows int64", NULL},
        {1, {(uint64_t)1 << 62}, NT_GGML_F32, 0, NEMOTRON_ERR_FORMAT, "tensor w: the byte size",
         NULL},
        {1, {32}, 99, 0, NEMOTRON_ERR_UNSUPPORTED, "tensor w: unknown ggml type 99", NULL},
        {1, {32}, 31, 0, NEMOTRON_ERR_UNSUPPORTED, "ggml type 31 (Q4_0_4_4)", "removed"},
        {2, {48, 2}, NT_GGML_Q4_0, 0, NEMOTRON_ERR_FORMAT,
         "tensor w: row length 48 is not a multiple of Q4_0's block of 32", NULL},
        {1, {2688}, NT_GGML_Q4_K, 0, NEMOTRON_ERR_FORMAT, "row length 2688", "block of 256"},
        {1, {4}, NT_GGML_F32, 16, NEMOTRON_ERR_FORMAT,
         "tensor w: offset 16 is not a multiple of the alignment 32", NULL},
        {1, {4}, NT_GGML_F32, 64, NEMOTRON_ERR_FORMAT, "tensor w: bytes [64, +16)",
         "past the file's end"},
        {1, {4}, NT_GGML_F32, UINT64_MAX - 31, NEMOTRON_ERR_FORMAT, "tensor w", "past the file's end"},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        header(&b, 3, 1, 0);
        tinfo(&b, "w", (int)c[k].ndim, c[k].ne, c[k].type, c[k].offset);
        data(&b, 32, 64);
        char what[32];
        snprintf(what, sizeof what, "tensor case %zu", k);
        open_expect(&b, c[k].st, what, c[k].w1, c[k].w2);
    }
    header(&b, 3, 2, 0);
    tinfo(&b, "w", 1, (uint64_t[]){4}, NT_GGML_F32, 0);
    tinfo(&b, "w", 1, (uint64_t[]){4}, NT_GGML_F32, 32);
    data(&b, 32, 64);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "duplicate tensor", "tensor w: given twice", NULL);
    header(&b, 3, 2, 0);
    tinfo(&b, "late", 1, (uint64_t[]){16}, NT_GGML_F32, 32);  /* [32, 96) */
    tinfo(&b, "early", 1, (uint64_t[]){9}, NT_GGML_F32, 0);   /* [0, 36) */
    data(&b, 32, 96);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "overlap", "tensors early and late overlap", NULL);
    header(&b, 3, 1, 0);
    u64(&b, 2);
    put(&b, "w\0", 2);
    u32(&b, 1);
    u64(&b, 4);
    u32(&b, NT_GGML_F32);
    u64(&b, 0);
    data(&b, 32, 16);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "NUL in name", "tensor 0: the name holds a NUL", NULL);
    header(&b, 3, 1, 0);
    str(&b, "");
    u32(&b, 1);
    u64(&b, 4);
    u32(&b, NT_GGML_F32);
    u64(&b, 0);
    data(&b, 32, 16);
    open_expect(&b, NEMOTRON_ERR_FORMAT, "empty name", "tensor 0: an empty name", NULL);
    free(b.p);
}

/* The file system paths: a missing file, a directory, a short file, a split file's name. */
static void test_files(void) {
    struct nt_gguf *g = (struct nt_gguf *)1;
    struct nt_err err;
    CHECK(nt_gguf_open("/nonexistent/x.gguf", &g, &err) == NEMOTRON_ERR_IO && !g &&
              strstr(err.msg, "cannot open"), "%s", err.msg);
    CHECK(nt_gguf_open("tests", &g, &err) == NEMOTRON_ERR_IO && strstr(err.msg, "not a regular"),
          "%s", err.msg);
    char dir[] = "/tmp/test_gguf_XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[128];
    snprintf(path, sizeof path, "%s/short.gguf", dir);
    FILE *f = fopen(path, "wb");
    fputs("GGUF", f);
    fclose(f);
    CHECK(nt_gguf_open(path, &g, &err) == NEMOTRON_ERR_FORMAT && strstr(err.msg, "4 bytes"),
          "%s", err.msg);
    unlink(path);
    /* a name of one part (-00001-of-00001) is a whole file */
    struct buf b = {0};
    valid(&b, 3);
    snprintf(path, sizeof path, "%s/m-00001-of-00001.gguf", dir);
    f = fopen(path, "wb");
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    CHECK(nt_gguf_open(path, &g, &err) == NEMOTRON_OK && g->n_tensors == 2 && g->n_parts == 1,
          "%s", err.msg);
    nt_gguf_close(g);
    unlink(path);
    free(b.p);
    rmdir(dir);
}

/* A split: part p of n holding one tensor named name (p = 0 also the metadata). no and count
 * are the split keys written (-1: left out); total is split.tensors.count (-1: left out). */
static void write_part(const char *dir, int p, int n, int no, int count, int total,
                       const char *name) {
    struct buf b = {0};
    header(&b, 3, 1, (uint64_t)((no >= 0) + (count >= 0) + (total >= 0) + (p == 0)));
    if (p == 0) kv_str(&b, "general.architecture", "split_arch");
    if (no >= 0) {
        str(&b, "split.no");
        u32(&b, NT_GGUF_U16);
        put(&b, (uint16_t[]){(uint16_t)no}, 2);
    }
    if (count >= 0) {
        str(&b, "split.count");
        u32(&b, NT_GGUF_U16);
        put(&b, (uint16_t[]){(uint16_t)count}, 2);
    }
    if (total >= 0) {
        str(&b, "split.tensors.count");
        u32(&b, NT_GGUF_I32);
        put(&b, (int32_t[]){total}, 4);
    }
    tinfo(&b, name, 1, (uint64_t[]){(uint64_t)p + 1}, NT_GGML_F32, 0);
    data(&b, 32, 4 * ((size_t)p + 1));
    char path[160];
    snprintf(path, sizeof path, "%s/m-%05d-of-%05d.gguf", dir, p + 1, n);
    FILE *f = fopen(path, "wb");
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
}

static void test_split(void) {
    char dir[] = "/tmp/test_gguf_split_XXXXXX";
    if (!mkdtemp(dir)) return;
    char first[160], second[160];
    snprintf(first, sizeof first, "%s/m-00001-of-00003.gguf", dir);
    snprintf(second, sizeof second, "%s/m-00002-of-00003.gguf", dir);
    struct nt_gguf *g = NULL;
    struct nt_err err;
    write_part(dir, 0, 3, 0, 3, 3, "a");
    write_part(dir, 1, 3, 1, 3, -1, "b");
    write_part(dir, 2, 3, 2, 3, -1, "c");
    CHECK(nt_gguf_open(first, &g, &err) == NEMOTRON_OK, "split: %s", err.msg);
    if (g) {
        CHECK(g->n_parts == 3 && g->n_tensors == 3 && g->arch && !strcmp(g->arch, "split_arch"),
              "three parts joined");
        for (int p = 0; p < 3; p++) {
            const struct nt_gguf_tensor *t = nt_gguf_tensor(g, (const char *[]){"a", "b", "c"}[p]);
            CHECK(t && t->part == p && t->ne[0] == p + 1 && t->nbytes == 4 * ((uint64_t)p + 1),
                  "tensor of part %d", p);
            if (t) {
                const uint8_t *m = g->parts[p]->map;
                CHECK((const uint8_t *)t->data >= m && (const uint8_t *)t->data + t->nbytes <=
                          m + g->parts[p]->size && ((const uint8_t *)t->data)[1] == 8,
                      "part %d's data in its own mapping", p);
            }
        }
        nt_gguf_close(g);
    }
    /* a later part's path names the first */
    CHECK(nt_gguf_open(second, &g, &err) == NEMOTRON_ERR_UNSUPPORTED && !g &&
              strstr(err.msg, "open the first part (-00001-of-00003.gguf)"), "%s", err.msg);
    /* faults, each refused with the part or tensor named, nothing left open (ASan's leak check) */
    struct {
        int p, no, count, total;
        const char *name, *w1, *w2;
    } c[] = {
        {0, 0, 3, 4, "a", "split.tensors.count: 4, but the 3 parts hold 3 tensors", NULL},
        {1, 1, 3, -1, "a", "tensor a: in part 1 and in part 2", NULL},
        {2, 1, 3, -1, "c", "m-00003-of-00003.gguf: its split keys say part 2 of 3", "part 3 of 3"},
        {2, 2, 4, -1, "c", "m-00003-of-00003.gguf: its split keys say part 3 of 4", NULL},
        {1, -1, -1, -1, "b", "m-00002-of-00003.gguf: its split keys say part -1 of -1", NULL},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        write_part(dir, c[k].p, 3, c[k].no, c[k].count, c[k].total, c[k].name);
        nemotron_status st = nt_gguf_open(first, &g, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT && !g && strstr(err.msg, c[k].w1) &&
                  (!c[k].w2 || strstr(err.msg, c[k].w2)), "split fault %zu: %s", k, err.msg);
        /* put the part back as it was */
        write_part(dir, c[k].p, 3, c[k].p, 3, c[k].p ? -1 : 3, (const char *[]){"a", "b", "c"}[c[k].p]);
    }
    CHECK(nt_gguf_open(first, &g, &err) == NEMOTRON_OK, "restored split: %s", err.msg);
    nt_gguf_close(g);
    char third[160];
    snprintf(third, sizeof third, "%s/m-00003-of-00003.gguf", dir);
    unlink(third);
    CHECK(nt_gguf_open(first, &g, &err) == NEMOTRON_ERR_IO && strstr(err.msg, third) &&
              strstr(err.msg, "cannot open"), "a missing part: %s", err.msg);
    unlink(first);
    unlink(second);
    rmdir(dir);
}

/* ------------------------------------------------------------------------------------------ */
/* the real file                                                                              */

static int64_t cfg_int(json_object *cfg, const char *key) {
    json_object *v;
    return json_object_object_get_ex(cfg, key, &v) ? json_object_get_int64(v) : -1;
}

static void check_ne(const struct nt_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                     int64_t ne2) {
    const struct nt_gguf_tensor *t = nt_gguf_tensor(g, name);
    CHECK(t && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2,
          "%s: [%lld, %lld, %lld], want [%lld, %lld, %lld]", name, t ? (long long)t->ne[0] : -1,
          t ? (long long)t->ne[1] : -1, t ? (long long)t->ne[2] : -1, (long long)ne0,
          (long long)ne1, (long long)ne2);
}

static void test_real_file(void) {
    const char *path = getenv("NT_GGUF_FILE");
    if (!path) path = "../shared/data/gguf/kjv-Q4_K_M.gguf";
    if (access(path, R_OK) != 0) {
        /* the file lives beside the repository, not in it (5.8 MB): said, not hidden */
        printf("test_gguf: %s not found: the real-file checks did not run\n", path);
        return;
    }
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, "%.*s.reference.json", (int)(strlen(path) - 5), path);
    json_object *ref = json_object_from_file(ref_path);
    json_object *cfg = json_object_from_file("models/nemotron-h-kjv/config.json");
    CHECK(ref && cfg, "%s and the demo config read", ref_path);
    struct nt_gguf *g = NULL;
    struct nt_err err;
    nemotron_status st = nt_gguf_open(path, &g, &err);
    CHECK(st == NEMOTRON_OK, "%s", err.msg);
    if (st || !ref || !cfg) {
        json_object_put(ref);
        json_object_put(cfg);
        nt_gguf_close(g);
        return;
    }
    CHECK(g->version == 3 && g->arch && !strcmp(g->arch, "nemotron_h_moe"), "v3 nemotron_h_moe");
    /* every tensor of the reference with its type; nothing else; counts and bytes per type */
    json_object *types = json_object_object_get(ref, "tensor_types");
    CHECK(types && g->n_tensors == (int64_t)json_object_object_length(types), "%lld tensors",
          (long long)g->n_tensors);
    json_object_object_foreach(types, name, tname) {
        const struct nt_gguf_tensor *t = nt_gguf_tensor(g, name);
        CHECK(t && !strcmp(nt_ggml_type_name(t->type), json_object_get_string(tname)),
              "%s: %s", name, json_object_get_string(tname));
    }
    json_object *mix = json_object_object_get(ref, "type_mix");
    uint64_t end = 0;
    json_object_object_foreach(mix, tn, m) {
        int64_t count = 0;
        uint64_t params = 0, bytes = 0;
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const struct nt_gguf_tensor *t = &g->tensors[i];
            if (strcmp(nt_ggml_type_name(t->type), tn)) continue;
            count++;
            params += t->n_elements;
            bytes += t->nbytes;
        }
        CHECK(count == json_object_get_int64(json_object_object_get(m, "tensors")) &&
                  params == (uint64_t)json_object_get_int64(json_object_object_get(m, "params")) &&
                  bytes == (uint64_t)json_object_get_int64(json_object_object_get(m, "bytes")),
              "%s: %lld tensors, %llu params, %llu bytes", tn, (long long)count,
              (unsigned long long)params, (unsigned long long)bytes);
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].offset + g->tensors[i].nbytes > end)
            end = g->tensors[i].offset + g->tensors[i].nbytes;
    CHECK(g->data_start + end == g->size, "the last tensor ends the file");
    /* shapes from the demo model's config (ne[0] is the row length) */
    int64_t h = cfg_int(cfg, "hidden_size"), v = cfg_int(cfg, "vocab_size");
    int64_t nh = cfg_int(cfg, "mamba_num_heads"), hd = cfg_int(cfg, "mamba_head_dim");
    int64_t ng = cfg_int(cfg, "n_groups"), ns = cfg_int(cfg, "ssm_state_size");
    int64_t kvh = cfg_int(cfg, "num_key_value_heads"), ahd = cfg_int(cfg, "head_dim");
    int64_t ne = cfg_int(cfg, "n_routed_experts"), mi = cfg_int(cfg, "moe_intermediate_size");
    check_ne(g, "token_embd.weight", h, v, 1);
    check_ne(g, "output.weight", h, v, 1);
    check_ne(g, "blk.0.ssm_in.weight", h, 2 * nh * hd + 2 * ng * ns + nh, 1);
    check_ne(g, "blk.0.ssm_out.weight", nh * hd, h, 1);
    check_ne(g, "blk.0.ssm_conv1d.weight", cfg_int(cfg, "conv_kernel"), nh * hd + 2 * ng * ns, 1);
    check_ne(g, "blk.3.attn_k.weight", h, kvh * ahd, 1);
    check_ne(g, "blk.1.ffn_up_exps.weight", h, mi, ne);
    check_ne(g, "blk.1.ffn_down_exps.weight", mi, h, ne);
    check_ne(g, "blk.1.ffn_gate_inp.weight", h, ne, 1);
    /* metadata through the typed getters */
    uint64_t u;
    CHECK(!nt_gguf_get_uint(g, "nemotron_h_moe.block_count", &u, &err) && u == 8, "%s", err.msg);
    CHECK(!nt_gguf_get_uint(g, "nemotron_h_moe.embedding_length", &u, &err) && (int64_t)u == h,
          "embedding_length");
    const struct nt_gguf_kv *kv;
    CHECK(!nt_gguf_get_array(g, "nemotron_h_moe.attention.head_count_kv", NT_GGUF_I32, &kv, &err) &&
              kv->n == 8 && nt_gguf_int_at(kv, 3) == kvh && nt_gguf_int_at(kv, 0) == 0,
          "head_count_kv per layer: %s", err.msg);
    CHECK(!nt_gguf_get_array(g, "tokenizer.ggml.tokens", NT_GGUF_STRING, &kv, &err) &&
              (int64_t)kv->n == v, "tokens: %s", err.msg);
    if ((int64_t)kv->n == v) {
        uint64_t pos = 0, len;
        const char *s;
        nt_gguf_next_str(kv, &pos, &s, &len);
        CHECK(len == 5 && !memcmp(s, "<unk>", 5), "token 0");
        nt_gguf_next_str(kv, &pos, &s, &len);
        CHECK(len == 3 && !memcmp(s, "<s>", 3), "token 1");
        for (uint64_t i = 2; i < kv->n; i++) nt_gguf_next_str(kv, &pos, &s, &len);
        CHECK(pos == kv->val_bytes, "the strings fill the array");
    }
    json_object_put(ref);
    json_object_put(cfg);
    nt_gguf_close(g);
}

int main(void) {
    test_valid();
    test_values();
    test_many_names();
    test_block_sizes();
    test_truncation();
    test_header_faults();
    test_metadata_faults();
    test_tensor_faults();
    test_files();
    test_split();
    test_real_file();
    return test_summary("test_gguf");
}
