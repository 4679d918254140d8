/* gguf.c - the GGUF reader: a file's header, metadata and tensor infos parsed and validated in
 * place over its mapping (gguf.h says what is refused and why).
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 key count; the keys (string
 * key, u32 value type, value); the tensor infos (string name, u32 n_dims, u64 dims[n_dims], u32
 * ggml type, u64 offset); padding to the alignment; the data section. A string is a u64 length
 * and its bytes; an array a u32 element type, a u64 count and the elements.
 */
#include "model/gguf.h"
#include "model/mapfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* GGUF's own limit on a key's length (the spec: at most 65535 bytes). */
#define MAX_KEY_LEN 65535u
/* The smallest possible key (u64 length, a 1-byte key, u32 type, a 1-byte value) and tensor
 * info (u64 length, a 1-byte name, u32 n_dims, one u64 dim, u32 type, u64 offset): counts
 * larger than the bytes left could hold are refused before anything is allocated for them. */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_BYTES 33u

static const struct {
    const char *name;
    uint32_t block_elems, block_bytes;
} ggml_types[NT_GGML_TYPE_COUNT] = {
    /* sizes from ggml's block structs: e.g. Q4_0 = one f16 scale + 32 4-bit codes */
    [NT_GGML_F32] = {"F32", 1, 4},          [NT_GGML_F16] = {"F16", 1, 2},
    [NT_GGML_Q4_0] = {"Q4_0", 32, 18},      [NT_GGML_Q4_1] = {"Q4_1", 32, 20},
    [NT_GGML_Q5_0] = {"Q5_0", 32, 22},      [NT_GGML_Q5_1] = {"Q5_1", 32, 24},
    [NT_GGML_Q8_0] = {"Q8_0", 32, 34},      [NT_GGML_Q8_1] = {"Q8_1", 32, 36},
    [NT_GGML_Q2_K] = {"Q2_K", 256, 84},     [NT_GGML_Q3_K] = {"Q3_K", 256, 110},
    [NT_GGML_Q4_K] = {"Q4_K", 256, 144},    [NT_GGML_Q5_K] = {"Q5_K", 256, 176},
    [NT_GGML_Q6_K] = {"Q6_K", 256, 210},    [NT_GGML_Q8_K] = {"Q8_K", 256, 292},
    [NT_GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66}, [NT_GGML_IQ2_XS] = {"IQ2_XS", 256, 74},
    [NT_GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [NT_GGML_IQ1_S] = {"IQ1_S", 256, 50},
    [NT_GGML_IQ4_NL] = {"IQ4_NL", 32, 18},  [NT_GGML_IQ3_S] = {"IQ3_S", 256, 110},
    [NT_GGML_IQ2_S] = {"IQ2_S", 256, 82},   [NT_GGML_IQ4_XS] = {"IQ4_XS", 256, 136},
    [NT_GGML_I8] = {"I8", 1, 1},            [NT_GGML_I16] = {"I16", 1, 2},
    [NT_GGML_I32] = {"I32", 1, 4},          [NT_GGML_I64] = {"I64", 1, 8},
    [NT_GGML_F64] = {"F64", 1, 8},          [NT_GGML_IQ1_M] = {"IQ1_M", 256, 56},
    [NT_GGML_BF16] = {"BF16", 1, 2},        [NT_GGML_TQ1_0] = {"TQ1_0", 256, 54},
    [NT_GGML_TQ2_0] = {"TQ2_0", 256, 66},   [NT_GGML_MXFP4] = {"MXFP4", 32, 17},
};

/* Numbers ggml used once and removed: named in the refusal, so a user knows what the file is. */
static const char *removed_type_name(uint32_t t) {
    switch (t) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return NULL;
    }
}

static const char *const vtype_names[NT_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
/* Bytes of a fixed-size value; 0 for string and array. */
static const uint8_t vtype_size[NT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *nt_gguf_vtype_name(uint32_t vtype) {
    return vtype < NT_GGUF_VTYPE_COUNT ? vtype_names[vtype] : "?";
}

const char *nt_ggml_type_name(uint32_t type) {
    return type < NT_GGML_TYPE_COUNT ? ggml_types[type].name : NULL;
}

int nt_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes) {
    if (type >= NT_GGML_TYPE_COUNT || !ggml_types[type].name) return 0;
    *block_elems = ggml_types[type].block_elems;
    *block_bytes = ggml_types[type].block_bytes;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * A cursor over the header: every read checks the bytes left.
 * ------------------------------------------------------------------------------------------- */

struct cursor {
    const uint8_t *p;
    uint64_t left;
};

static int take(struct cursor *c, uint64_t n, const uint8_t **at) {
    if (n > c->left) return 0;
    *at = c->p;
    c->p += n;
    c->left -= n;
    return 1;
}

static int take_u32(struct cursor *c, uint32_t *v) {
    const uint8_t *at;
    if (!take(c, 4, &at)) return 0;
    memcpy(v, at, 4);
    return 1;
}

static int take_u64(struct cursor *c, uint64_t *v) {
    const uint8_t *at;
    if (!take(c, 8, &at)) return 0;
    memcpy(v, at, 8);
    return 1;
}

/* A string: *s its bytes, *len their count. 0 when the length or the bytes run past the end. */
static int take_str(struct cursor *c, const uint8_t **s, uint64_t *len) {
    return take_u64(c, len) && take(c, *len, s);
}

/* ---------------------------------------------------------------------------------------------
 * Names: NUL-terminated copies in one buffer, found through open-addressing hashes.
 * ------------------------------------------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Index + 1 of the name in a hash over n entries whose names name_at gives, or the free slot's
 * negated position - 1 when absent. */
static int64_t hash_probe(const int64_t *hash, uint64_t cap, const char *name,
                          const char *(*name_at)(const struct nt_gguf *, int64_t),
                          const struct nt_gguf *g) {
    uint64_t i = hash_str(name) & (cap - 1);
    for (;;) {
        if (!hash[i]) return -(int64_t)i - 1;
        if (!strcmp(name_at(g, hash[i] - 1), name)) return hash[i];
        i = (i + 1) & (cap - 1);
    }
}

static const char *kv_name(const struct nt_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name(const struct nt_gguf *g, int64_t i) { return g->tensors[i].name; }

/* A power of two at least twice n (the load bound keeps probes short). */
static uint64_t hash_cap_for(int64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap *= 2;
    return cap;
}

/* The names' copies live in blocks that never move (a lookup keeps pointers to them), sized
 * by what the header holds rather than by the file (weights are most of a file). */
#define NAMES_BLOCK 65536u
struct nt_gguf_names {
    struct nt_gguf_names *next;
    size_t used, cap;
    char data[];
};

/* A NUL-terminated copy of a file string (the caller has refused NUL inside: it would look up
 * as a shorter name); NULL when out of memory. */
static const char *copy_name(struct nt_gguf *g, const uint8_t *s, uint64_t len) {
    struct nt_gguf_names *b = g->names;
    if (!b || b->cap - b->used < len + 1) {
        size_t cap = len + 1 > NAMES_BLOCK ? (size_t)len + 1 : NAMES_BLOCK;
        b = nt_alloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = g->names;
        b->used = 0;
        b->cap = cap;
        g->names = b;
    }
    char *dst = b->data + b->used;
    memcpy(dst, s, len);
    dst[len] = 0;
    b->used += len + 1;
    return dst;
}

/* ---------------------------------------------------------------------------------------------
 * Values.
 * ------------------------------------------------------------------------------------------- */

/* Steps over one value of type t (an array's elements too, recursively), checking every length
 * against the bytes left. 0 with err set (naming key) on a fault. */
static nemotron_status skip_value(struct cursor *c, uint32_t t, int depth, const char *path,
                                  const char *key, struct nt_err *err) {
    if (t >= NT_GGUF_VTYPE_COUNT)
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: unknown value type %" PRIu32, path,
                       key, t);
    const uint8_t *at;
    if (t == NT_GGUF_STRING) {
        uint64_t len;
        if (!take_str(c, &at, &len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: a string runs past the end", path,
                           key);
        return NEMOTRON_OK;
    }
    if (t != NT_GGUF_ARRAY) {
        if (!take(c, vtype_size[t], &at))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: the %s value runs past the end",
                           path, key, vtype_names[t]);
        return NEMOTRON_OK;
    }
    if (depth >= NT_GGUF_MAX_DEPTH)
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: arrays nested deeper than %d", path,
                       key, NT_GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    if (!take_u32(c, &et) || !take_u64(c, &n))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: an array header runs past the end",
                       path, key);
    if (et >= NT_GGUF_VTYPE_COUNT)
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: unknown array element type %" PRIu32,
                       path, key, et);
    if (vtype_size[et]) {
        uint64_t bytes;
        if (!nt_mul_ok(n, vtype_size[et], &bytes) || !take(c, bytes, &at))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: key %s: an array of %" PRIu64 " %s runs past the end", path, key, n,
                           vtype_names[et]);
        return NEMOTRON_OK;
    }
    /* strings and arrays take at least 8 and 12 bytes each: a count past that is refused at
     * once rather than after a long walk */
    if (n > c->left / (et == NT_GGUF_STRING ? 8 : 12))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: key %s: an array of %" PRIu64 " %ss runs past the end", path, key, n,
                       vtype_names[et]);
    for (uint64_t i = 0; i < n; i++) {
        nemotron_status st = skip_value(c, et, depth + 1, path, key, err);
        if (st) return st;
    }
    return NEMOTRON_OK;
}

/* Keys whose type the engine relies on, checked at open so a later use cannot misread them. */
static const struct {
    const char *key;
    uint32_t type, elem;   /* elem: for arrays */
} known_keys[] = {
    {"general.architecture", NT_GGUF_STRING, 0},
    {"general.alignment", NT_GGUF_U32, 0},
    {"general.name", NT_GGUF_STRING, 0},
    {"general.file_type", NT_GGUF_U32, 0},
    {"general.quantization_version", NT_GGUF_U32, 0},
    {"split.no", NT_GGUF_U16, 0},
    {"split.count", NT_GGUF_U16, 0},
    {"split.tensors.count", NT_GGUF_I32, 0},
    {"tokenizer.ggml.model", NT_GGUF_STRING, 0},
    {"tokenizer.ggml.pre", NT_GGUF_STRING, 0},
    {"tokenizer.ggml.tokens", NT_GGUF_ARRAY, NT_GGUF_STRING},
    {"tokenizer.ggml.merges", NT_GGUF_ARRAY, NT_GGUF_STRING},
    {"tokenizer.ggml.token_type", NT_GGUF_ARRAY, NT_GGUF_I32},
    {"tokenizer.ggml.scores", NT_GGUF_ARRAY, NT_GGUF_F32},
    {"tokenizer.ggml.bos_token_id", NT_GGUF_U32, 0},
    {"tokenizer.ggml.eos_token_id", NT_GGUF_U32, 0},
    {"tokenizer.ggml.unknown_token_id", NT_GGUF_U32, 0},
    {"tokenizer.ggml.padding_token_id", NT_GGUF_U32, 0},
    {"tokenizer.ggml.add_bos_token", NT_GGUF_BOOL, 0},
    {"tokenizer.ggml.add_eos_token", NT_GGUF_BOOL, 0},
    {"tokenizer.chat_template", NT_GGUF_STRING, 0},
};

static nemotron_status check_known_keys(const struct nt_gguf *g, struct nt_err *err) {
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++) {
        const struct nt_gguf_kv *kv = nt_gguf_find(g, known_keys[i].key);
        if (!kv) continue;
        if (kv->type != known_keys[i].type ||
            (kv->type == NT_GGUF_ARRAY && kv->arr_type != known_keys[i].elem)) {
            if (known_keys[i].type == NT_GGUF_ARRAY)
                return nt_fail(err, NEMOTRON_ERR_FORMAT,
                               "%s: key %s: is %s%s%s, expected an array of %s", g->path, kv->key,
                               kv->type == NT_GGUF_ARRAY ? "an array of " : "",
                               nt_gguf_vtype_name(kv->arr_type),
                               kv->type == NT_GGUF_ARRAY ? "" : " (not an array)",
                               vtype_names[known_keys[i].elem]);
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: is %s, expected %s", g->path,
                           kv->key, nt_gguf_vtype_name(kv->type), vtype_names[known_keys[i].type]);
        }
    }
    return NEMOTRON_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Tensors.
 * ------------------------------------------------------------------------------------------- */

static int compare_offsets(const void *a, const void *b) {
    const struct nt_gguf_tensor *x = *(const struct nt_gguf_tensor *const *)a;
    const struct nt_gguf_tensor *y = *(const struct nt_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The shape's element count and bytes; the type known, ne[0] whole blocks. */
static nemotron_status size_tensor(const struct nt_gguf *g, struct nt_gguf_tensor *t,
                                   struct nt_err *err) {
    uint32_t be, bb;
    if (!nt_ggml_type_block(t->type, &be, &bb)) {
        const char *old = removed_type_name(t->type);
        if (old)
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "%s: tensor %s: ggml type %" PRIu32 " (%s) was removed from ggml; "
                           "requantize the file",
                           g->path, t->name, t->type, old);
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: tensor %s: unknown ggml type %" PRIu32, g->path, t->name, t->type);
    }
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (!nt_mul_ok(n, (uint64_t)t->ne[d], &n) || n > (uint64_t)INT64_MAX)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %s: the shape's element count overflows int64", g->path,
                           t->name);
    if (t->ne[0] % be)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor %s: row length %" PRId64 " is not a multiple of %s's block of %"
                       PRIu32,
                       g->path, t->name, t->ne[0], ggml_types[t->type].name, be);
    t->n_elements = n;
    if (!nt_mul_ok(n / be, bb, &t->nbytes))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: the byte size overflows", g->path,
                       t->name);
    return NEMOTRON_OK;
}

/* Offsets aligned, inside the data section, no two tensors sharing a byte. */
static nemotron_status place_tensors(struct nt_gguf *g, struct nt_err *err) {
    uint64_t data_bytes = g->size - g->data_start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct nt_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %s: offset %" PRIu64 " is not a multiple of the alignment %"
                           PRIu32, g->path, t->name, t->offset, g->alignment);
        if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %s: bytes [%" PRIu64 ", +%" PRIu64 ") of the data section "
                           "run past the file's end (the section has %" PRIu64 " bytes)",
                           g->path, t->name, t->offset, t->nbytes, data_bytes);
        t->data = g->map + g->data_start + t->offset;
    }
    if (g->n_tensors < 2) return NEMOTRON_OK;
    struct nt_gguf_tensor **order = nt_calloc((size_t)g->n_tensors, sizeof *order);
    if (!order) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", g->path);
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, compare_offsets);
    nemotron_status st = NEMOTRON_OK;
    for (int64_t i = 1; i < g->n_tensors && !st; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensors %s and %s overlap (offsets %" PRIu64 " +%" PRIu64 " and %"
                         PRIu64 ")", g->path, order[i - 1]->name, order[i]->name,
                         order[i - 1]->offset, order[i - 1]->nbytes, order[i]->offset);
    nt_free(order);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Opening.
 * ------------------------------------------------------------------------------------------- */

static nemotron_status parse(struct nt_gguf *g, int allow_split, struct nt_err *err) {
    const char *path = g->path;
    struct cursor c = {g->map, g->size};
    const uint8_t *magic;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (!take(&c, 4, &magic) || memcmp(magic, "GGUF", 4))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", path);
    if (!take_u32(&c, &version))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: truncated inside the header", path);
    if (version == 0x02000000u || version == 0x03000000u)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: a big-endian GGUF; only little-endian files are read", path);
    if (version == 1)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: GGUF version 1 (32-bit counts) is not read; version 2 and 3 are", path);
    if (version != 2 && version != 3)
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: unknown GGUF version %" PRIu32, path,
                       version);
    g->version = version;
    if (!take_u64(&c, &n_tensors) || !take_u64(&c, &n_kv))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: truncated inside the header", path);
    if (n_kv > c.left / MIN_KV_BYTES)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: %" PRIu64 " metadata keys cannot fit the file's %zu bytes", path, n_kv,
                       g->size);
    if (n_tensors > c.left / MIN_TENSOR_BYTES)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: %" PRIu64 " tensors cannot fit the file's %zu bytes", path, n_tensors,
                       g->size);
    g->kv = nt_calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = nt_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->kv_hash_cap = hash_cap_for((int64_t)n_kv);
    g->tensor_hash_cap = hash_cap_for((int64_t)n_tensors);
    g->kv_hash = nt_calloc(g->kv_hash_cap, sizeof *g->kv_hash);
    g->tensor_hash = nt_calloc(g->tensor_hash_cap, sizeof *g->tensor_hash);
    if (!g->kv || !g->tensors || !g->kv_hash || !g->tensor_hash)
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %" PRIu64 " keys and %"
                       PRIu64 " tensors", path, n_kv, n_tensors);
    for (uint64_t i = 0; i < n_kv; i++) {
        struct nt_gguf_kv *kv = &g->kv[i];
        const uint8_t *s;
        uint64_t len;
        if (!take_str(&c, &s, &len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: metadata key %" PRIu64 " of %" PRIu64 ": its name runs past the end",
                           path, i, n_kv);
        if (len == 0 || len > MAX_KEY_LEN)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: metadata key %" PRIu64 ": a name of %" PRIu64
                           " bytes (1 to %u allowed)", path, i, len, MAX_KEY_LEN);
        if (memchr(s, 0, len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: metadata key %" PRIu64 ": the name holds "
                           "a NUL byte", path, i);
        if (!(kv->key = copy_name(g, s, len)))
            return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the key names", path);
        g->n_kv = (int64_t)i; /* the hash must not see this entry before it is complete */
        int64_t slot = hash_probe(g->kv_hash, g->kv_hash_cap, kv->key, kv_name, g);
        if (slot > 0)
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: given twice", path, kv->key);
        if (!take_u32(&c, &kv->type))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: key %s: its type runs past the end",
                           path, kv->key);
        const uint8_t *start = c.p;
        nemotron_status st = skip_value(&c, kv->type, 0, path, kv->key, err);
        if (st) return st;
        kv->arr_type = kv->type;
        kv->n = 1;
        kv->val = start;
        kv->val_bytes = (uint64_t)(c.p - start);
        if (kv->type == NT_GGUF_STRING) {
            memcpy(&kv->str_len, start, 8);
            kv->val = start + 8;
            kv->val_bytes -= 8;
        } else if (kv->type == NT_GGUF_ARRAY) {
            memcpy(&kv->arr_type, start, 4);
            memcpy(&kv->n, start + 4, 8);
            kv->val = start + 12;
            kv->val_bytes -= 12;
        }
        g->kv_hash[-slot - 1] = (int64_t)i + 1;
        g->n_kv = (int64_t)i + 1;
    }
    g->n_kv = (int64_t)n_kv;

    nemotron_status st = check_known_keys(g, err);
    if (st) return st;
    const struct nt_gguf_kv *kv = nt_gguf_find(g, "general.alignment");
    g->alignment = NT_GGUF_DEFAULT_ALIGNMENT;
    if (kv) {
        memcpy(&g->alignment, kv->val, 4);
        if (g->alignment == 0 || (g->alignment & (g->alignment - 1)))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: key general.alignment: %" PRIu32 " is not a power of two", path,
                           g->alignment);
    }
    kv = nt_gguf_find(g, "general.architecture");
    if (kv) {
        if (memchr(kv->val, 0, kv->str_len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: key general.architecture: the value holds a NUL byte", path);
        if (!(g->arch = copy_name(g, kv->val, kv->str_len)))
            return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", path);
    }
    kv = nt_gguf_find(g, "split.count");
    if (kv) {
        uint16_t count = 0, no = 0;
        memcpy(&count, kv->val, 2);
        const struct nt_gguf_kv *nkv = nt_gguf_find(g, "split.no");
        if (nkv) memcpy(&no, nkv->val, 2);
        if (count > 1 && !allow_split)
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "%s: part %u of a GGUF split into %u files: a split is read from its "
                           "first file, named NAME-00001-of-%05u.gguf as llama.cpp names the "
                           "parts (or joined by llama.cpp's `llama-gguf-split --merge`)",
                           path, (unsigned)no + 1, (unsigned)count, (unsigned)count);
        if (count == 0 || no >= count)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: key split.no: part index %u of a split into %u files", path,
                           (unsigned)no, (unsigned)count);
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        struct nt_gguf_tensor *t = &g->tensors[i];
        const uint8_t *s;
        uint64_t len;
        if (!take_str(&c, &s, &len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %" PRIu64 " of %" PRIu64 ": its name runs past the end", path,
                           i, n_tensors);
        if (len == 0)
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %" PRIu64 ": an empty name", path,
                           i);
        if (memchr(s, 0, len))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %" PRIu64 ": the name holds a NUL byte", path, i);
        if (!(t->name = copy_name(g, s, len)))
            return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the tensor names", path);
        g->n_tensors = (int64_t)i;
        int64_t slot = hash_probe(g->tensor_hash, g->tensor_hash_cap, t->name, tensor_name, g);
        if (slot > 0)
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: given twice", path, t->name);
        uint32_t ndim;
        if (!take_u32(&c, &ndim))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: truncated", path, t->name);
        if (ndim < 1 || ndim > NT_GGUF_MAX_DIMS)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor %s: %" PRIu32 " dimensions (1 to %d allowed)", path,
                           t->name, ndim, NT_GGUF_MAX_DIMS);
        t->ndim = (int)ndim;
        for (int d = 0; d < NT_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t v;
            if (!take_u64(&c, &v))
                return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: truncated", path, t->name);
            if (v == 0 || v > (uint64_t)INT64_MAX)
                return nt_fail(err, NEMOTRON_ERR_FORMAT,
                               "%s: tensor %s: dimension %d is %" PRIu64 " (1 to INT64_MAX allowed)",
                               path, t->name, d, v);
            t->ne[d] = (int64_t)v;
        }
        if (!take_u32(&c, &t->type) || !take_u64(&c, &t->offset))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: truncated", path, t->name);
        st = size_tensor(g, t, err);
        if (st) return st;
        g->tensor_hash[-slot - 1] = (int64_t)i + 1;
    }
    g->n_tensors = (int64_t)n_tensors;

    uint64_t header = g->size - c.left;
    uint64_t pad = (g->alignment - header % g->alignment) % g->alignment;
    if (n_tensors == 0) {
        /* no data section is needed; a file may end right after its metadata */
        g->data_start = header + pad <= g->size ? header + pad : g->size;
        return NEMOTRON_OK;
    }
    if (pad > c.left)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: truncated: the data section would start at byte %" PRIu64
                       " of a %zu-byte file", path, header + pad, g->size);
    g->data_start = header + pad;
    return place_tensors(g, err);
}

/* Opens one file's bytes; allow_split: a part of a split is accepted (open_split joins them). */
static nemotron_status open_one(const char *name, const uint8_t *bytes, size_t size,
                                int owned_map, int allow_split, struct nt_gguf **out,
                                struct nt_err *err) {
    *out = NULL;
    struct nt_gguf *g = nt_calloc(1, sizeof *g);
    char *path = nt_strdup(name);
    if (!g || !path) {
        nt_free(g);
        nt_free(path);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", name);
    }
    g->path = path;
    g->map = bytes;
    g->size = size;
    g->n_parts = 1;
    nemotron_status st = parse(g, allow_split, err);
    if (st) {
        nt_gguf_close(g); /* not owned yet: the caller keeps the bytes on failure */
        return st;
    }
    g->owned_map = owned_map;
    *out = g;
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_open_bytes(const char *name, const uint8_t *bytes, size_t size,
                                   int owned_map, struct nt_gguf **out, struct nt_err *err) {
    return open_one(name, bytes, size, owned_map, 0, out, err);
}

/* NAME-0000K-of-0000N.gguf, llama.cpp's split naming: K and N of five digits. */
static int split_name(const char *path, unsigned *k, unsigned *n) {
    size_t len = strlen(path);
    static const char tail[] = "-00000-of-00000.gguf";
    if (len < sizeof tail - 1) return 0;
    const char *s = path + len - (sizeof tail - 1);
    for (size_t i = 0; i < sizeof tail - 1; i++) {
        int digit = s[i] >= '0' && s[i] <= '9';
        if (tail[i] == '0' ? !digit : s[i] != tail[i]) return 0;
    }
    *k = (unsigned)strtoul(s + 1, NULL, 10);
    *n = (unsigned)strtoul(s + 10, NULL, 10);
    return 1;
}

/* One file mapped and opened. */
static nemotron_status open_path(const char *path, int allow_split, struct nt_gguf **out,
                                 struct nt_err *err) {
    void *map;
    size_t size;
    nemotron_status st = nt_map_file(path, 24, "a GGUF header (24 bytes)", &map, &size, err);
    if (st) return st;
    st = open_one(path, map, size, 1, allow_split, out, err);
    if (st) munmap(map, size);
    return st;
}

/* A u16 split key of part g, or -1 when absent (its type was checked at open). */
static int split_key(const struct nt_gguf *g, const char *key) {
    const struct nt_gguf_kv *kv = nt_gguf_find(g, key);
    uint16_t v;
    if (!kv) return -1;
    memcpy(&v, kv->val, 2);
    return v;
}

/* The parts of a split, path being the first (NAME-00001-of-0000N.gguf): each opened as a file
 * of its own and checked to be part i of n, then their tensors joined into the first part's
 * handle (its metadata is the model's; the others' are only their split keys), names unique
 * across the parts and split.tensors.count, when given, their total. */
static nemotron_status open_split(const char *path, unsigned n, struct nt_gguf **out,
                                  struct nt_err *err) {
    struct nt_gguf **parts = nt_calloc(n, sizeof *parts);
    char *part_path = nt_strdup(path);
    struct nt_gguf_tensor *tensors = NULL;
    int64_t *hash = NULL;
    nemotron_status st = NEMOTRON_OK;
    if (!parts || !part_path) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    int64_t total = 0;
    char *digits = part_path + strlen(part_path) - strlen("00001-of-00000.gguf");
    for (unsigned i = 0; i < n; i++) {
        char k[6];
        snprintf(k, sizeof k, "%05u", i + 1);
        memcpy(digits, k, 5);
        st = open_path(part_path, 1, &parts[i], err);
        if (st) goto fail;
        int count = split_key(parts[i], "split.count"), no = split_key(parts[i], "split.no");
        if (count != (int)n || no != (int)i) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: its split keys say part %d of %d, its name part %u of %u", part_path,
                         no < 0 ? -1 : no + 1, count, i + 1, n);
            goto fail;
        }
        total += parts[i]->n_tensors;
    }
    struct nt_gguf *g = parts[0];
    const struct nt_gguf_kv *kv = nt_gguf_find(g, "split.tensors.count");
    if (kv) {
        int32_t want;
        memcpy(&want, kv->val, 4);
        if (want != total) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: key split.tensors.count: %d, but the %u parts hold %lld tensors",
                         path, (int)want, n, (long long)total);
            goto fail;
        }
    }
    uint64_t cap = hash_cap_for(total);
    tensors = nt_calloc(total ? (size_t)total : 1, sizeof *tensors);
    hash = nt_calloc(cap, sizeof *hash);
    if (!tensors || !hash) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %lld tensors", path,
                     (long long)total);
        goto fail;
    }
    /* the joined table, hashed as it grows, so a name in two parts is found */
    nt_free(g->tensor_hash);
    g->tensor_hash = hash;
    g->tensor_hash_cap = cap;
    hash = NULL;
    struct nt_gguf_tensor *own = g->tensors;
    int64_t n_own = g->n_tensors;
    g->tensors = tensors;
    tensors = own; /* freed below */
    g->n_tensors = 0;
    for (unsigned i = 0; i < n; i++) {
        for (int64_t j = 0; j < (i ? parts[i]->n_tensors : n_own); j++) {
            const struct nt_gguf_tensor *t = i ? &parts[i]->tensors[j] : &own[j];
            int64_t slot = hash_probe(g->tensor_hash, cap, t->name, tensor_name, g);
            if (slot > 0) {
                st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor %s: in part %d and in part %u",
                             path, t->name, g->tensors[slot - 1].part + 1, i + 1);
                goto fail;
            }
            g->tensors[g->n_tensors] = *t;
            g->tensors[g->n_tensors].part = (int)i;
            g->tensor_hash[-slot - 1] = ++g->n_tensors;
        }
    }
    nt_free(tensors);
    nt_free(part_path);
    g->parts = parts;
    g->n_parts = (int)n;
    *out = g;
    return NEMOTRON_OK;

fail:
    nt_free(tensors);
    nt_free(hash);
    for (unsigned i = 0; parts && i < n; i++) nt_gguf_close(parts[i]);
    nt_free(parts);
    nt_free(part_path);
    return st;
}

nemotron_status nt_gguf_open(const char *path, struct nt_gguf **out, struct nt_err *err) {
    *out = NULL;
    unsigned k, n;
    if (!split_name(path, &k, &n) || n <= 1) return open_path(path, 0, out, err);
    if (k != 1)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: part %u of a GGUF split into %u files: open the first part "
                       "(-00001-of-%05u.gguf), which reads them all", path, k, n, n);
    return open_split(path, n, out, err);
}

void nt_gguf_close(struct nt_gguf *g) {
    if (!g) return;
    /* a split's other parts: their names and mappings back the joined tensors */
    for (int i = 1; g->parts && i < g->n_parts; i++) nt_gguf_close(g->parts[i]);
    nt_free(g->parts);
    if (g->owned_map && g->map) munmap((void *)g->map, g->size);
    nt_free(g->path);
    while (g->names) {
        struct nt_gguf_names *next = g->names->next;
        nt_free(g->names);
        g->names = next;
    }
    nt_free(g->kv);
    nt_free(g->tensors);
    nt_free(g->kv_hash);
    nt_free(g->tensor_hash);
    nt_free(g);
}

/* ---------------------------------------------------------------------------------------------
 * Accessors.
 * ------------------------------------------------------------------------------------------- */

const struct nt_gguf_kv *nt_gguf_find(const struct nt_gguf *g, const char *key) {
    int64_t i = hash_probe(g->kv_hash, g->kv_hash_cap, key, kv_name, g);
    return i > 0 ? &g->kv[i - 1] : NULL;
}

const struct nt_gguf_tensor *nt_gguf_tensor(const struct nt_gguf *g, const char *name) {
    int64_t i = hash_probe(g->tensor_hash, g->tensor_hash_cap, name, tensor_name, g);
    return i > 0 ? &g->tensors[i - 1] : NULL;
}

static int is_int_type(uint32_t t) {
    return t <= NT_GGUF_I32 || t == NT_GGUF_U64 || t == NT_GGUF_I64;
}

int64_t nt_gguf_int_at(const struct nt_gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->val + i * vtype_size[kv->arr_type];
    switch (kv->arr_type) {
    case NT_GGUF_U8: return p[0];
    case NT_GGUF_I8: return (int8_t)p[0];
    case NT_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case NT_GGUF_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case NT_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case NT_GGUF_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case NT_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v; }
    case NT_GGUF_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: NT_ASSERT(!"nt_gguf_int_at: not an integer"); return 0;
    }
}

static nemotron_status lookup(const struct nt_gguf *g, const char *key,
                              const struct nt_gguf_kv **kv, struct nt_err *err) {
    *kv = nt_gguf_find(g, key);
    if (!*kv) return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: missing", g->path, key);
    return NEMOTRON_OK;
}

static nemotron_status wrong_type(const struct nt_gguf *g, const struct nt_gguf_kv *kv,
                                  const char *expected, struct nt_err *err) {
    if (kv->type == NT_GGUF_ARRAY)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: is an array of %s, expected %s",
                       g->path, kv->key, nt_gguf_vtype_name(kv->arr_type), expected);
    return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: is %s, expected %s", g->path, kv->key,
                   nt_gguf_vtype_name(kv->type), expected);
}

nemotron_status nt_gguf_get_uint(const struct nt_gguf *g, const char *key, uint64_t *out,
                                 struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (!is_int_type(kv->type)) return wrong_type(g, kv, "an unsigned integer", err);
    if (kv->type == NT_GGUF_U64) {
        memcpy(out, kv->val, 8);
        return NEMOTRON_OK;
    }
    int64_t v = nt_gguf_int_at(kv, 0);
    if (v < 0)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: %" PRId64 " is negative", g->path,
                       key, v);
    *out = (uint64_t)v;
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_get_int(const struct nt_gguf *g, const char *key, int64_t *out,
                                struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (!is_int_type(kv->type)) return wrong_type(g, kv, "an integer", err);
    int64_t v = nt_gguf_int_at(kv, 0);
    if (kv->type == NT_GGUF_U64 && v < 0)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: past the int64 range", g->path, key);
    *out = v;
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_get_float(const struct nt_gguf *g, const char *key, double *out,
                                  struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (kv->type == NT_GGUF_F32) {
        float f;
        memcpy(&f, kv->val, 4);
        *out = f;
    } else if (kv->type == NT_GGUF_F64) {
        memcpy(out, kv->val, 8);
    } else {
        return wrong_type(g, kv, "a float (f32 or f64)", err);
    }
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_get_bool(const struct nt_gguf *g, const char *key, int *out,
                                 struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (kv->type != NT_GGUF_BOOL) return wrong_type(g, kv, "bool", err);
    if (kv->val[0] > 1)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: key %s: bool byte %u is neither 0 nor 1",
                       g->path, key, kv->val[0]);
    *out = kv->val[0];
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_get_str(const struct nt_gguf *g, const char *key, const char **s,
                                uint64_t *len, struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (kv->type != NT_GGUF_STRING) return wrong_type(g, kv, "string", err);
    *s = (const char *)kv->val;
    *len = kv->str_len;
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_get_array(const struct nt_gguf *g, const char *key, uint32_t elem_type,
                                  const struct nt_gguf_kv **out, struct nt_err *err) {
    const struct nt_gguf_kv *kv;
    nemotron_status st = lookup(g, key, &kv, err);
    if (st) return st;
    if (kv->type != NT_GGUF_ARRAY || kv->arr_type != elem_type) {
        char want[32];
        snprintf(want, sizeof want, "an array of %s", nt_gguf_vtype_name(elem_type));
        return wrong_type(g, kv, want, err);
    }
    *out = kv;
    return NEMOTRON_OK;
}

void nt_gguf_next_str(const struct nt_gguf_kv *kv, uint64_t *pos, const char **s, uint64_t *len) {
    NT_ASSERT(kv->type == NT_GGUF_ARRAY && kv->arr_type == NT_GGUF_STRING);
    NT_ASSERT(*pos + 8 <= kv->val_bytes);
    memcpy(len, kv->val + *pos, 8);
    *s = (const char *)kv->val + *pos + 8;
    *pos += 8 + *len;
}
