/* test_nemo.c - the .nemo container: writer, reader, and every way a file can be wrong.
 *
 * A sample model (packed, llama.cpp block-typed, plain, scalar, empty and oddly named tensors,
 * three embedded files)
 * is written under a mkdtemp directory in several append patterns, which must give the same
 * bytes; it is read back with nt_nemo_open and as a plain safetensors file, and its header is
 * checked against the spec (docs/NEMO.md) with json-c and zlib directly. Corrupted copies are
 * made in memory, either by flipping bytes or by rebuilding the header from an edited JSON
 * object (rebuild), and fed to nt_nemo_open_bytes; each must fail with the right status and a
 * message naming the entry, and leave the table as it was. Writer misuse must fail and leave
 * no file at the path.
 */
#include "model/nemo.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../test.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

static char tmp_root[] = "/tmp/nemotron-test-nemo.XXXXXX";

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmp_root, name);
}

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    *size = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void write_all_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n)) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

/* ------------------------------------------------------------------------------------------ */
/* the sample model                                                                           */

struct sample {
    const char *name;
    enum nt_dtype fmt;
    int ndim;
    int64_t shape[3];
};

static const struct sample S[] = {
    {"model.layers.0.mixer.in_proj.weight", NT_DTYPE_Q8_2F, 2, {3, 8}},
    {"model.layers.1.mixer.experts.0.up_proj.weight", NT_DTYPE_Q4TP, 2, {2, 64}},
    {"model.norm.weight", NT_DTYPE_F32, 1, {5}},
    {"model.embed_tokens.weight", NT_DTYPE_BF16, 2, {2, 3}},
    {"odd.f16", NT_DTYPE_F16, 1, {3}}, /* 6 bytes: the next tensor starts 2 mod 4 */
    {"scalar", NT_DTYPE_F32, 0, {0}},
    {"empty", NT_DTYPE_F32, 2, {0, 4}},
    /* quote, backslash, a newline and UTF-8: escaped once in the header, twice inside
     * nemotron.tensors, where the writer must still find its checksum digits */
    {"we\"ird\\name \xc3\xa9\n", NT_DTYPE_F32, 3, {1, 2, 1}},
    {"model.layers.2.mixer.o_proj.weight", NT_DTYPE_Q8_2F, 2, {5, 4}}, /* odd rows */
    /* llama.cpp's block types, as a converted GGUF holds them: Q6_K's 210-byte blocks leave the
     * next tensor unaligned */
    {"model.layers.3.mixer.experts.0.down_proj.weight", NT_DTYPE_GGML_Q6_K, 2, {2, 256}},
    {"model.layers.3.mixer.shared_experts.up_proj.weight", NT_DTYPE_GGML_Q5_0, 2, {3, 64}},
};
#define NS ((int)(sizeof S / sizeof S[0]))
#define Q8 0
#define Q4 1
#define F32 2
#define Q6K 9
#define Q50 10

static const struct {
    const char *name, *text;
} FILES[] = {
    {"config.json", "{\"model_type\": \"nemotron_h\", \"hidden_size\": 8}\n"},
    {"tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}"},
    {"empty.txt", ""},
};
#define NF ((int)(sizeof FILES / sizeof FILES[0]))

static uint64_t sample_bytes(int i) {
    const struct sample *s = &S[i];
    if (s->fmt == NT_DTYPE_Q8_2F || s->fmt == NT_DTYPE_Q4TP || nt_dtype_is_ggml_block(s->fmt))
        return nt_matrix_bytes(s->fmt, s->shape[0], s->shape[1]);
    uint64_t n = nt_dtype_size(s->fmt);
    for (int d = 0; d < s->ndim; d++) n *= (uint64_t)s->shape[d];
    return n;
}

static uint8_t sample_byte(int i, uint64_t j) { return (uint8_t)(i * 31 + j * 7 + 1); }

/* All tensor payloads concatenated, in declaration order. */
static uint8_t *sample_stream(uint64_t *total) {
    *total = 0;
    for (int i = 0; i < NS; i++) *total += sample_bytes(i);
    uint8_t *b = malloc(*total ? *total : 1);
    uint64_t at = 0;
    for (int i = 0; i < NS; i++)
        for (uint64_t j = 0; j < sample_bytes(i); j++) b[at++] = sample_byte(i, j);
    return b;
}

enum chunking { ONE_CALL, PER_TENSOR, BYTEWISE, RANDOM_CHUNKS };

/* Writes the sample to path, appending as `mode` says. */
static nemotron_status write_sample(const char *path, enum chunking mode, struct nt_err *err) {
    struct nt_nemo_writer *w;
    nemotron_status st = nt_nemo_writer_new(&w, path, NULL, err);
    if (st) return st;
    uint64_t total;
    uint8_t *all = sample_stream(&total);
    if (!st) st = nt_nemo_writer_meta(w, "nemotron.quant", "default", err);
    if (!st) st = nt_nemo_writer_meta(w, "nemotron.source", "a \"quoted\" path\\x", err);
    /* files declared first and in the middle: they are stored after the tensors either way */
    if (!st)
        st = nt_nemo_writer_declare_file(w, FILES[0].name, FILES[0].text, strlen(FILES[0].text),
                                         err);
    for (int i = 0; i < NS && !st; i++) {
        st = nt_nemo_writer_declare(w, S[i].name, S[i].fmt, S[i].ndim, S[i].shape, err);
        if (i == 3)
            for (int f = 1; f < NF && !st; f++)
                st = nt_nemo_writer_declare_file(w, FILES[f].name, FILES[f].text,
                                                 strlen(FILES[f].text), err);
    }
    if (!st) st = nt_nemo_writer_begin(w, err);
    uint64_t at = 0, seed = 12345;
    while (!st && at < total) {
        uint64_t k = 1;
        if (mode == ONE_CALL) k = total;
        else if (mode == PER_TENSOR) {
            uint64_t end = 0;
            for (int i = 0; i < NS && end <= at; i++) end += sample_bytes(i);
            k = end - at;
        } else if (mode == RANDOM_CHUNKS) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            k = 1 + (seed >> 33) % 97;
            if (k > total - at) k = total - at;
        }
        st = nt_nemo_writer_append(w, all + at, (size_t)k, err);
        at += k;
    }
    if (!st) st = nt_nemo_writer_append(w, all, 0, err); /* an empty append is fine at the end */
    if (!st) st = nt_nemo_writer_commit(w, err);
    nt_nemo_writer_free(w);
    free(all);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* header access and rebuilding                                                               */

static uint64_t header_len(const uint8_t *b) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n;
}

/* The header as a json-c object (NULL if it does not parse). */
static json_object *parse_header(const uint8_t *b, size_t size) {
    if (size < 8 || header_len(b) > size - 8) return NULL;
    uint64_t n = header_len(b);
    char *text = malloc(n + 1);
    memcpy(text, b + 8, n);
    text[n] = 0;
    json_object *root = json_tokener_parse(text);
    free(text);
    return root;
}

static json_object *get(json_object *o, const char *key) {
    json_object *v = NULL;
    json_object_object_get_ex(o, key, &v);
    return v;
}

/* A copy of file b whose header is `text` (length-prefixed anew) and whose data section is
 * b's, plus `extra` more bytes. */
static uint8_t *with_header(const uint8_t *b, size_t size, const char *text, size_t extra,
                            size_t *out_size) {
    uint64_t old = header_len(b), n = strlen(text);
    size_t data = size - 8 - (size_t)old;
    *out_size = 8 + (size_t)n + data + extra;
    uint8_t *o = calloc(1, *out_size);
    for (int i = 0; i < 8; i++) o[i] = (uint8_t)(n >> (8 * i));
    memcpy(o + 8, text, n);
    memcpy(o + 8 + n, b + 8 + old, data);
    return o;
}

/* Header edits: each takes the header object and the parsed nemotron.tensors object. */
enum edit {
    E_TAG_UNKNOWN,
    E_TAG_Q4_AS_Q8,
    E_TAG_F32_AS_BF16,
    E_TAG_NOT_STRING,
    E_SHAPE_REJECTED,
    E_SHAPE_1D_PACKED,
    E_SHAPE_WRONG_PLAIN,
    E_SHAPE_NEGATIVE,
    E_DROP_ENTRY,
    E_EXTRA_ENTRY,
    E_NO_CRC,
    E_CRC_NUMBER,
    E_CRC_SHORT,
    E_UNKNOWN_KEY,
    E_ENTRY_NOT_OBJECT,
    E_FILE_TAG_ON_TENSOR,
    E_TENSOR_TAG_ON_FILE,
    E_FILE_SHAPE,
    E_NO_TENSORS_KEY,
    E_NO_FORMAT_KEY,
    E_VERSION_2,
    E_BAD_JSON,
    E_TENSORS_ARRAY,
    E_DUPLICATE_KEY,
    E_DUPLICATE_ENTRY_KEY,
    E_NO_METADATA,
    E_FILE_NAME_SLASH,
    E_PACKED_STORED_F32,
    E_EMPTY_INSIDE,
    E_HOLE,
    E_BLOCK_TAG_UNKNOWN,
    E_BLOCK_AS_OTHER_BLOCK,
    E_BLOCK_COLS,
    E_BLOCK_ROWS,
    E_COUNT
};

static const struct {
    nemotron_status st;
    const char *msg1, *msg2; /* both must be in the message */
} EXPECT[E_COUNT] = {
    [E_TAG_UNKNOWN] = {NEMOTRON_ERR_FORMAT, "unknown format \"q5\"", "up_proj"},
    [E_TAG_Q4_AS_Q8] = {NEMOTRON_ERR_FORMAT, "q8_2f [2, 64] is a payload of 260 bytes", "U8 [80]"},
    [E_TAG_F32_AS_BF16] = {NEMOTRON_ERR_FORMAT, "says BF16 [5] but the header says F32 [5]",
                           "model.norm.weight"},
    [E_TAG_NOT_STRING] = {NEMOTRON_ERR_FORMAT, "format is a JSON int", "model.norm.weight"},
    [E_SHAPE_REJECTED] = {NEMOTRON_ERR_FORMAT, "cols 40 is not a multiple of 32", "up_proj"},
    [E_SHAPE_1D_PACKED] = {NEMOTRON_ERR_FORMAT, "needs a shape [rows, cols], not [24]", "in_proj"},
    [E_SHAPE_WRONG_PLAIN] = {NEMOTRON_ERR_FORMAT, "says F32 [6] but the header says F32 [5]",
                             "model.norm.weight"},
    [E_SHAPE_NEGATIVE] = {NEMOTRON_ERR_FORMAT, "shape[0] is -3", "in_proj"},
    [E_DROP_ENTRY] = {NEMOTRON_ERR_FORMAT, "'odd.f16' is in the header but not in nemotron.tensors",
                      ""},
    [E_EXTRA_ENTRY] = {NEMOTRON_ERR_FORMAT, "lists 'ghost', which the header does not hold", ""},
    [E_NO_CRC] = {NEMOTRON_ERR_FORMAT, "no \"crc32\"", "scalar"},
    [E_CRC_NUMBER] = {NEMOTRON_ERR_FORMAT, "crc32 is 12345678, not 8 lowercase hex digits",
                      "scalar"},
    [E_CRC_SHORT] = {NEMOTRON_ERR_FORMAT, "crc32 is \"abc\"", "scalar"},
    [E_UNKNOWN_KEY] = {NEMOTRON_ERR_FORMAT, "unknown key 'dtype'", "scalar"},
    [E_ENTRY_NOT_OBJECT] = {NEMOTRON_ERR_FORMAT, "'empty' is a JSON array, not an object", ""},
    [E_FILE_TAG_ON_TENSOR] = {NEMOTRON_ERR_FORMAT, "without the file prefix", "model.norm.weight"},
    [E_TENSOR_TAG_ON_FILE] = {NEMOTRON_ERR_FORMAT, "under the file prefix",
                              "nemotron.file/config.json"},
    [E_FILE_SHAPE] = {NEMOTRON_ERR_FORMAT, "says shape [3] but the header stores U8",
                      "tokenizer.json"},
    [E_NO_TENSORS_KEY] = {NEMOTRON_ERR_FORMAT, "no \"nemotron.tensors\"", ""},
    [E_NO_FORMAT_KEY] = {NEMOTRON_ERR_FORMAT, "not a .nemo", ""},
    [E_VERSION_2] = {NEMOTRON_ERR_UNSUPPORTED, "nemotron.format \"2\"", "format 1 only"},
    [E_BAD_JSON] = {NEMOTRON_ERR_FORMAT, "nemotron.tensors JSON", ""},
    [E_TENSORS_ARRAY] = {NEMOTRON_ERR_FORMAT, "nemotron.tensors is a JSON array, not an object",
                         ""},
    [E_DUPLICATE_KEY] = {NEMOTRON_ERR_FORMAT, "key 'scalar' appears more than once",
                         "nemotron.tensors"},
    [E_DUPLICATE_ENTRY_KEY] = {NEMOTRON_ERR_FORMAT, "'scalar': key 'format' appears more than once",
                               "nemotron.tensors"},
    [E_NO_METADATA] = {NEMOTRON_ERR_FORMAT, "not a .nemo", ""},
    [E_FILE_NAME_SLASH] = {NEMOTRON_ERR_FORMAT, "embedded file name 'a/b' contains '/'", ""},
    [E_EMPTY_INSIDE] = {NEMOTRON_ERR_FORMAT, "tensor 'empty' (data_offsets [3, 3]) lies inside",
                        ""},
    [E_HOLE] = {NEMOTRON_ERR_FORMAT, "the data section has a hole: bytes [",
                ") before tensor 'nemotron.file/config.json' belong to no tensor"},
    [E_BLOCK_TAG_UNKNOWN] = {NEMOTRON_ERR_FORMAT, "unknown format \"ggml.Q3_K\"",
                             "experts.0.down_proj"},
    [E_BLOCK_AS_OTHER_BLOCK] = {NEMOTRON_ERR_FORMAT, "ggml.Q4_K [2, 256] is a payload of 288 bytes",
                                "U8 [420]"},
    [E_BLOCK_COLS] = {NEMOTRON_ERR_FORMAT, "cols 48 is not a multiple of Q5_0's block of 32",
                      "shared_experts.up_proj"},
    [E_BLOCK_ROWS] = {NEMOTRON_ERR_FORMAT, "ggml.Q5_0 [4, 64] is a payload of 176 bytes",
                      "shared_experts.up_proj"},
    [E_PACKED_STORED_F32] = {NEMOTRON_ERR_FORMAT,
                             "payload of 48 bytes, but the header stores F32 [12]", "in_proj"},
};

static void rename_key(json_object *o, const char *from, const char *to) {
    json_object *v = json_object_get(get(o, from));
    json_object_object_del(o, from);
    json_object_object_add(o, to, v);
}

/* The good file with its header rebuilt after `e`. */
static uint8_t *rebuild(const uint8_t *good, size_t size, enum edit e, size_t *out_size) {
    json_object *root = parse_header(good, size), *meta = get(root, "__metadata__");
    json_object *inner = json_tokener_parse(json_object_get_string(get(meta, "nemotron.tensors")));
    const char *q8 = S[Q8].name, *q4 = S[Q4].name, *f32 = S[F32].name;
    const char *raw = NULL; /* a replacement text for nemotron.tensors */
    char dup[8192];
    switch (e) {
    case E_TAG_UNKNOWN:
        json_object_object_add(get(inner, q4), "format", json_object_new_string("q5"));
        break;
    case E_BLOCK_TAG_UNKNOWN:
        json_object_object_add(get(inner, S[Q6K].name), "format", json_object_new_string("ggml.Q3_K"));
        break;
    case E_BLOCK_AS_OTHER_BLOCK:
        json_object_object_add(get(inner, S[Q6K].name), "format", json_object_new_string("ggml.Q4_K"));
        break;
    case E_BLOCK_COLS:
    case E_BLOCK_ROWS: {
        json_object *s = json_object_new_array();
        json_object_array_add(s, json_object_new_int(e == E_BLOCK_COLS ? 3 : 4));
        json_object_array_add(s, json_object_new_int(e == E_BLOCK_COLS ? 48 : 64));
        json_object_object_add(get(inner, S[Q50].name), "shape", s);
        break;
    }
    case E_TAG_Q4_AS_Q8:
        json_object_object_add(get(inner, q4), "format", json_object_new_string("q8_2f"));
        break;
    case E_TAG_F32_AS_BF16:
        json_object_object_add(get(inner, f32), "format", json_object_new_string("BF16"));
        break;
    case E_TAG_NOT_STRING:
        json_object_object_add(get(inner, f32), "format", json_object_new_int(3));
        break;
    case E_SHAPE_REJECTED: {
        json_object *s = json_object_new_array();
        json_object_array_add(s, json_object_new_int(4));
        json_object_array_add(s, json_object_new_int(40));
        json_object_object_add(get(inner, q4), "shape", s);
        break;
    }
    case E_SHAPE_1D_PACKED: {
        json_object *s = json_object_new_array();
        json_object_array_add(s, json_object_new_int(24));
        json_object_object_add(get(inner, q8), "shape", s);
        break;
    }
    case E_SHAPE_WRONG_PLAIN: {
        json_object *s = json_object_new_array();
        json_object_array_add(s, json_object_new_int(6));
        json_object_object_add(get(inner, f32), "shape", s);
        break;
    }
    case E_SHAPE_NEGATIVE:
        json_object_array_put_idx(get(get(inner, q8), "shape"), 0, json_object_new_int(-3));
        break;
    case E_DROP_ENTRY: json_object_object_del(inner, "odd.f16"); break;
    case E_EXTRA_ENTRY:
        json_object_object_add(inner, "ghost", json_object_get(get(inner, "scalar")));
        break;
    case E_NO_CRC: json_object_object_del(get(inner, "scalar"), "crc32"); break;
    case E_CRC_NUMBER:
        json_object_object_add(get(inner, "scalar"), "crc32", json_object_new_int(12345678));
        break;
    case E_CRC_SHORT:
        json_object_object_add(get(inner, "scalar"), "crc32", json_object_new_string("abc"));
        break;
    case E_UNKNOWN_KEY:
        json_object_object_add(get(inner, "scalar"), "dtype", json_object_new_string("F32"));
        break;
    case E_ENTRY_NOT_OBJECT: json_object_object_add(inner, "empty", json_object_new_array()); break;
    case E_FILE_TAG_ON_TENSOR:
        json_object_object_add(get(inner, f32), "format", json_object_new_string("file"));
        break;
    case E_TENSOR_TAG_ON_FILE:
        json_object_object_add(get(inner, "nemotron.file/config.json"), "format",
                               json_object_new_string("F32"));
        break;
    case E_FILE_SHAPE:
        json_object_array_put_idx(get(get(inner, "nemotron.file/tokenizer.json"), "shape"), 0,
                                  json_object_new_int(3));
        break;
    case E_NO_TENSORS_KEY: json_object_object_del(meta, "nemotron.tensors"); break;
    case E_NO_FORMAT_KEY: json_object_object_del(meta, "nemotron.format"); break;
    case E_VERSION_2:
        json_object_object_add(meta, "nemotron.format", json_object_new_string("2"));
        break;
    case E_BAD_JSON: raw = "{\"scalar\": {\"format\": \"F32\","; break;
    case E_TENSORS_ARRAY: raw = "[1, 2]"; break;
    case E_DUPLICATE_KEY: {
        const char *t = json_object_to_json_string_ext(inner, JSON_C_TO_STRING_PLAIN);
        snprintf(dup, sizeof dup, "{\"scalar\":%s,%s",
                 json_object_to_json_string_ext(get(inner, "scalar"), JSON_C_TO_STRING_PLAIN),
                 t + 1);
        raw = dup;
        break;
    }
    case E_DUPLICATE_ENTRY_KEY: {
        /* a second "format" inside one entry: json-c keeps the last, another reader the first */
        const char *t = json_object_to_json_string_ext(inner, JSON_C_TO_STRING_PLAIN);
        const char *at = strstr(t, "\"scalar\":{");
        CHECK(at != NULL, "the scalar entry in %s", t);
        if (!at) break;
        size_t head = (size_t)(at - t) + strlen("\"scalar\":{");
        snprintf(dup, sizeof dup, "%.*s\"format\":\"BF16\",%s", (int)head, t, t + head);
        raw = dup;
        break;
    }
    case E_NO_METADATA: json_object_object_del(root, "__metadata__"); break;
    case E_FILE_NAME_SLASH:
        rename_key(inner, "nemotron.file/empty.txt", "nemotron.file/a/b");
        rename_key(root, "nemotron.file/empty.txt", "nemotron.file/a/b");
        break;
    case E_PACKED_STORED_F32: {
        /* the header stores the 48-byte q8_2f payload as F32 [12]: sizes agree, the dtype lies */
        json_object *h = get(root, q8), *s = json_object_new_array();
        json_object_array_add(s, json_object_new_int(12));
        json_object_object_add(h, "dtype", json_object_new_string("F32"));
        json_object_object_add(h, "shape", s);
        break;
    }
    case E_EMPTY_INSIDE: {
        /* an empty entry inside another: disjoint, but not a tiling of the data section */
        json_object *o = json_object_new_array();
        json_object_array_add(o, json_object_new_int(3));
        json_object_array_add(o, json_object_new_int(3));
        json_object_object_add(get(root, "empty"), "data_offsets", o);
        break;
    }
    case E_HOLE: {
        /* config.json starts 4 bytes later and is 4 bytes shorter, in both places: every
         * entry is consistent, and 4 bytes before it belong to none */
        json_object *h = get(root, "nemotron.file/config.json"), *o = json_object_new_array();
        json_object *off = get(h, "data_offsets");
        int64_t b = json_object_get_int64(json_object_array_get_idx(off, 0));
        int64_t z = json_object_get_int64(json_object_array_get_idx(off, 1));
        json_object_array_add(o, json_object_new_int64(b + 4));
        json_object_array_add(o, json_object_new_int64(z));
        json_object_object_add(h, "data_offsets", o);
        json_object_array_put_idx(get(h, "shape"), 0, json_object_new_int64(z - b - 4));
        json_object_array_put_idx(get(get(inner, "nemotron.file/config.json"), "shape"), 0,
                                  json_object_new_int64(z - b - 4));
        break;
    }
    case E_COUNT: break;
    }
    if (json_object_object_get_ex(meta, "nemotron.tensors", NULL) || raw)
        json_object_object_add(
            meta, "nemotron.tensors",
            json_object_new_string(
                raw ? raw : json_object_to_json_string_ext(inner, JSON_C_TO_STRING_PLAIN)));
    uint8_t *o = with_header(
        good, size, json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN), 0, out_size);
    json_object_put(inner);
    json_object_put(root);
    return o;
}

/* Opens bytes as a .nemo into a table that already holds `base` (a plain safetensors file)
 * and checks the outcome; returns the status. The table must be as it was after a failure. */
static nemotron_status open_into(const uint8_t *b, size_t size, struct nt_err *err) {
    static const char base[] =
        "{\"base.w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    size_t bsize = 8 + strlen(base) + 2;
    uint8_t bb[128];
    memset(bb, 0, sizeof bb);
    for (int i = 0; i < 8; i++) bb[i] = (uint8_t)(strlen(base) >> (8 * i));
    memcpy(bb + 8, base, strlen(base));
    struct nt_tensor_table t;
    nt_table_init(&t);
    CHECK(nt_table_add_bytes(&t, "base.safetensors", bb, bsize, 0, err) == NEMOTRON_OK, "base: %s",
          err->msg);
    err->msg[0] = 0;
    nemotron_status st = nt_nemo_open_bytes(&t, "x.nemo", b, size, 0, 2, err);
    if (st) {
        CHECK(t.n_files == 1 && t.n_tensors == 1 && t.n_embedded == 0 &&
                  nt_table_find(&t, "base.w"),
              "a failed open leaves the table as it was (%d files, %d tensors)", t.n_files,
              t.n_tensors);
        CHECK(contains(err->msg, "x.nemo"), "the message names the file: %s", err->msg);
    }
    nt_table_close(&t);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* round trips                                                                                */

static void check_sample_table(const struct nt_tensor_table *t, const uint8_t *map, size_t size) {
    CHECK(t->n_tensors == NS, "%d tensors, got %d", NS, t->n_tensors);
    CHECK(t->n_embedded == NF, "%d embedded files, got %d", NF, t->n_embedded);
    const uint8_t *data = map + 8 + header_len(map);
    const uint8_t *expect_at = data;
    for (int i = 0; i < NS; i++) {
        const struct nt_tensor *x = nt_table_find(t, S[i].name);
        CHECK(x != NULL, "tensor '%s' found", S[i].name);
        if (!x) continue;
        CHECK(x == &t->tensors[i], "'%s' keeps its declaration order", S[i].name);
        CHECK(x->dtype == S[i].fmt && x->ndim == S[i].ndim, "'%s': dtype %s ndim %d, got %s %d",
              S[i].name, nt_dtype_name(S[i].fmt), S[i].ndim, nt_dtype_name(x->dtype), x->ndim);
        int same = 1;
        for (int d = 0; d < S[i].ndim; d++) same &= x->shape[d] == S[i].shape[d];
        CHECK(same, "'%s': shape", S[i].name);
        CHECK(x->nbytes == sample_bytes(i), "'%s': %llu bytes, want %llu", S[i].name,
              (unsigned long long)x->nbytes, (unsigned long long)sample_bytes(i));
        CHECK((const uint8_t *)x->data == expect_at, "'%s' follows the previous tensor", S[i].name);
        int ok = 1;
        for (uint64_t j = 0; j < x->nbytes; j++)
            ok &= ((const uint8_t *)x->data)[j] == sample_byte(i, j);
        CHECK(ok, "'%s': bytes read back", S[i].name);
        expect_at += x->nbytes;
    }
    /* the files come after every tensor, in declaration order */
    static const int order[NF] = {0, 1, 2};
    for (int k = 0; k < NF; k++) {
        int f = order[k];
        size_t len = 99;
        const uint8_t *p = nt_table_file(t, FILES[f].name, &len);
        CHECK(p && len == strlen(FILES[f].text) && memcmp(p, FILES[f].text, len) == 0,
              "embedded '%s' read back", FILES[f].name);
        CHECK(p == expect_at, "embedded '%s' is stored after the tensors", FILES[f].name);
        expect_at += len;
        char full[128];
        snprintf(full, sizeof full, NT_NEMO_FILE_PREFIX "%s", FILES[f].name);
        CHECK(!nt_table_find(t, full), "'%s' is not a tensor", full);
    }
    CHECK(expect_at == map + size, "the entries end where the file ends");
    size_t len = 7;
    CHECK(!nt_table_file(t, "missing.json", &len) && len == 0, "an absent file is NULL, len 0");
    CHECK(!nt_table_file(t, "nemotron.file/config.json", &len),
          "files are found without the prefix");
}

static void test_roundtrip(void) {
    char path[512], plain[512];
    struct nt_err err = {{0}};
    path_in(path, sizeof path, "sample.nemo");
    CHECK(write_sample(path, ONE_CALL, &err) == NEMOTRON_OK, "write: %s", err.msg);
    char partial[600];
    snprintf(partial, sizeof partial, "%s.partial", path);
    CHECK(exists(path) && !exists(partial), "committed: the file is there, the partial is not");
    CHECK(nt_path_is_nemo(path) == 1, "nt_path_is_nemo on a .nemo");

    struct nt_tensor_table t;
    nt_table_init(&t);
    nemotron_status st = nt_nemo_open(&t, path, 3, &err);
    CHECK(st == NEMOTRON_OK, "open: %s", err.msg);
    if (!st) {
        check_sample_table(&t, t.files[0].map, t.files[0].size);
        CHECK(t.files[0].owned_map == 1, "nt_nemo_open owns its mapping");
        /* the mapping is page-aligned and the data section starts at a multiple of 64 */
        CHECK(((uintptr_t)t.tensors[0].data & 63) == 0, "first tensor 64-byte aligned");
    }
    nt_table_close(&t);

    /* the same bytes from every append pattern */
    size_t size0, size1;
    uint8_t *b0 = read_all(path, &size0);
    static const enum chunking modes[] = {PER_TENSOR, BYTEWISE, RANDOM_CHUNKS};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s/mode%zu.nemo", tmp_root, m);
        CHECK(write_sample(p2, modes[m], &err) == NEMOTRON_OK, "write mode %zu: %s", m, err.msg);
        uint8_t *b1 = read_all(p2, &size1);
        CHECK(b1 && size1 == size0 && memcmp(b0, b1, size0) == 0,
              "append pattern %zu gives the same file", m);
        free(b1);
        unlink(p2);
    }

    /* the header, read with json-c and zlib directly, as another reader would */
    uint64_t hl = header_len(b0);
    CHECK((8 + hl) % 64 == 0, "data section at a multiple of 64 (header %llu bytes)",
          (unsigned long long)hl);
    CHECK(b0[8 + hl - 1] == ' ' && b0[8] == '{', "header padded with spaces");
    json_object *root = parse_header(b0, size0), *meta = get(root, "__metadata__");
    CHECK(root && meta, "header parses and has __metadata__");
    CHECK(!strcmp(json_object_get_string(get(meta, "nemotron.format")), "1"), "nemotron.format 1");
    CHECK(!strcmp(json_object_get_string(get(meta, "nemotron.quant")), "default"),
          "extra metadata kept");
    CHECK(!strcmp(json_object_get_string(get(meta, "nemotron.source")), "a \"quoted\" path\\x"),
          "escaped metadata value kept");
    json_object *inner = json_tokener_parse(json_object_get_string(get(meta, "nemotron.tensors")));
    CHECK(inner && json_object_object_length(inner) == NS + NF, "nemotron.tensors lists %d entries",
          NS + NF);
    const uint8_t *data = b0 + 8 + hl;
    uint64_t data_len = size0 - 8 - hl;
    int n_ok = 0, n_entries = 0;
    json_object_object_foreach(root, name, entry) {
        if (!strcmp(name, "__metadata__")) continue;
        n_entries++;
        json_object *off = get(entry, "data_offsets"), *in = get(inner, name);
        uint64_t a = (uint64_t)json_object_get_int64(json_object_array_get_idx(off, 0));
        uint64_t z = (uint64_t)json_object_get_int64(json_object_array_get_idx(off, 1));
        char want[16];
        snprintf(want, sizeof want, "%08lx",
                 z <= data_len && a <= z ? crc32(0, data + a, (uInt)(z - a)) : 0ul);
        n_ok += in && !strcmp(json_object_get_string(get(in, "crc32")), want);
        const char *fmt = json_object_get_string(get(in, "format"));
        const char *dt = json_object_get_string(get(entry, "dtype"));
        if (!strcmp(fmt, "q4tp") || !strcmp(fmt, "q8_2f") || !strcmp(fmt, "file") ||
            !strncmp(fmt, "ggml.", 5))
            CHECK(!strcmp(dt, "U8") && json_object_array_length(get(entry, "shape")) == 1,
                  "'%s' (%s) is stored as U8 [bytes]", name, fmt);
        else CHECK(!strcmp(dt, fmt), "'%s': plain dtype kept", name);
    }
    CHECK(n_entries == NS + NF && n_ok == NS + NF, "zlib crc32 of every entry matches (%d of %d)",
          n_ok, n_entries);
    json_object *q4 = get(inner, S[Q4].name);
    CHECK(q4 && json_object_array_length(get(q4, "shape")) == 2 &&
              json_object_get_int(json_object_array_get_idx(get(q4, "shape"), 1)) == 64,
          "logical shape [2, 64] of the q4tp tensor");
    json_object_put(inner);
    json_object_put(root);

    /* a plain safetensors reader sees U8 payloads and the file entries */
    nt_table_init(&t);
    st = nt_table_add_file(&t, path, &err);
    CHECK(st == NEMOTRON_OK, "parses as plain safetensors: %s", err.msg);
    if (!st) {
        CHECK(t.n_tensors == NS + NF && t.n_embedded == 0, "all %d entries are tensors there",
              NS + NF);
        struct nt_tensor *x = nt_table_find(&t, S[Q4].name),
                         *c = nt_table_find(&t, "nemotron.file/config.json");
        CHECK(x && x->dtype == NT_DTYPE_U8 && x->ndim == 1 &&
                  x->shape[0] == (int64_t)sample_bytes(Q4),
              "q4tp payload is U8 [%llu]", (unsigned long long)sample_bytes(Q4));
        CHECK(c && c->dtype == NT_DTYPE_U8 && c->nbytes == strlen(FILES[0].text),
              "config.json is a U8 entry");
    }
    nt_table_close(&t);

    /* a plain safetensors file, a directory, a missing path: not a .nemo */
    path_in(plain, sizeof plain, "plain.safetensors");
    static const char ph[] = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"U8\","
                             "\"shape\":[1],\"data_offsets\":[0,1]}}";
    uint8_t pb[256] = {0};
    for (int i = 0; i < 8; i++) pb[i] = (uint8_t)(strlen(ph) >> (8 * i));
    memcpy(pb + 8, ph, strlen(ph));
    write_all_file(plain, pb, 8 + strlen(ph) + 1);
    CHECK(nt_path_is_nemo(plain) == 0, "plain safetensors is not a .nemo");
    CHECK(nt_path_is_nemo(tmp_root) == 0, "a directory is not a .nemo");
    CHECK(nt_path_is_nemo("/nonexistent/x.nemo") == 0, "a missing path is not a .nemo");
    nt_table_init(&t);
    st = nt_nemo_open(&t, plain, 1, &err);
    CHECK(st == NEMOTRON_ERR_FORMAT && contains(err.msg, "not a .nemo") && contains(err.msg, plain),
          "opening plain safetensors as .nemo: %s", err.msg);
    CHECK(t.n_files == 0 && t.n_tensors == 0, "and the table stays empty");
    st = nt_nemo_open(&t, "/nonexistent/x.nemo", 1, &err);
    CHECK(st == NEMOTRON_ERR_IO && contains(err.msg, "/nonexistent/x.nemo"), "missing: %s",
          err.msg);
    st = nt_nemo_open(&t, tmp_root, 1, &err);
    CHECK(st == NEMOTRON_ERR_IO && contains(err.msg, "not a regular file"), "directory: %s",
          err.msg);
    nt_table_close(&t);

    /* two .nemo files in one table: the second one's config.json clashes */
    char path2[512];
    path_in(path2, sizeof path2, "other.nemo");
    struct nt_nemo_writer *w;
    int64_t shp[1] = {2};
    st = nt_nemo_writer_new(&w, path2, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "other.w", NT_DTYPE_F16, 1, shp, &err);
    if (!st) st = nt_nemo_writer_declare_file(w, "config.json", "{}", 2, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, "\1\2\3\4", 4, &err);
    if (!st) st = nt_nemo_writer_commit(w, &err);
    nt_nemo_writer_free(w);
    CHECK(st == NEMOTRON_OK, "second file written: %s", err.msg);
    nt_table_init(&t);
    CHECK(nt_nemo_open(&t, path, 0, &err) == NEMOTRON_OK, "first opens: %s", err.msg);
    st = nt_nemo_open(&t, path2, 0, &err);
    CHECK(st == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "embedded file 'config.json' is also in") &&
              contains(err.msg, path2) && contains(err.msg, path),
          "embedded-file clash across files: %s", err.msg);
    CHECK(t.n_files == 1 && t.n_tensors == NS && t.n_embedded == NF &&
              !nt_table_find(&t, "other.w"),
          "the clash leaves the first file's table as it was");
    if (t.n_files == 1) check_sample_table(&t, t.files[0].map, t.files[0].size);
    nt_table_close(&t);
    /* the other order: the sample's config.json now clashes, and the other file stays */
    nt_table_init(&t);
    CHECK(nt_nemo_open(&t, path2, 0, &err) == NEMOTRON_OK, "other opens: %s", err.msg);
    size_t len;
    const uint8_t *cj = nt_table_file(&t, "config.json", &len);
    CHECK(cj && len == 2 && !memcmp(cj, "{}", 2), "other's config.json");
    CHECK(nt_nemo_open(&t, path, 0, &err) == NEMOTRON_ERR_FORMAT, "sample clashes with other");
    CHECK(t.n_files == 1 && t.n_tensors == 1 && t.n_embedded == 1 &&
              nt_table_file(&t, "config.json", &len) == cj,
          "other's entries intact");
    nt_table_close(&t);
    unlink(path2);
    free(b0);
}

/* A large tensor: parallel checksums in the writer (one big append) and in the reader
 * (several pieces), for every thread count. */
static void test_large(void) {
    char path[512];
    struct nt_err err = {{0}};
    path_in(path, sizeof path, "large.nemo");
    int64_t rows = 1024, cols = 12288; /* q8_2f: ~12.6 MB, over the 8 MB parallel threshold */
    int64_t shp[2] = {rows, cols}, small[1] = {3};
    uint64_t n = nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols);
    uint8_t *b = malloc(n);
    for (uint64_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 2654435761u >> 13);
    struct nt_nemo_writer *w;
    nemotron_status st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "big", NT_DTYPE_Q8_2F, 2, shp, &err);
    if (!st) st = nt_nemo_writer_declare(w, "tail", NT_DTYPE_F32, 1, small, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    /* one call spans both tensors */
    uint8_t *all = malloc(n + 12);
    memcpy(all, b, n);
    memset(all + n, 0x5a, 12);
    if (!st) st = nt_nemo_writer_append(w, all, n + 12, &err);
    if (!st) st = nt_nemo_writer_commit(w, &err);
    nt_nemo_writer_free(w);
    CHECK(st == NEMOTRON_OK, "large write: %s", err.msg);
    for (int threads = 1; threads <= 8; threads *= 2) {
        struct nt_tensor_table t;
        nt_table_init(&t);
        st = nt_nemo_open(&t, path, threads, &err);
        CHECK(st == NEMOTRON_OK, "large open, %d threads: %s", threads, err.msg);
        struct nt_tensor *x = nt_table_find(&t, "big");
        CHECK(x && x->dtype == NT_DTYPE_Q8_2F && x->shape[0] == rows && x->shape[1] == cols &&
                  x->nbytes == n && !memcmp(x->data, b, n),
              "large tensor read back");
        nt_table_close(&t);
    }
    /* a flipped byte deep inside the big tensor, in a later checksum piece */
    size_t size;
    uint8_t *f = read_all(path, &size);
    size_t at = 8 + (size_t)header_len(f) + (size_t)(n - 1000);
    f[at] ^= 0x10;
    CHECK(open_into(f, size, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "tensor 'big': checksum mismatch"),
          "flipped byte in the big tensor: %s", err.msg);
    free(f);
    free(all);
    free(b);
    unlink(path);
}

/* ------------------------------------------------------------------------------------------ */
/* corruption                                                                                 */

static void test_corruption(void) {
    char path[512];
    struct nt_err err = {{0}};
    path_in(path, sizeof path, "sample.nemo");
    size_t size;
    uint8_t *good = read_all(path, &size);
    CHECK(good != NULL, "sample file there");
    if (!good) return;
    CHECK(open_into(good, size, &err) == NEMOTRON_OK,
          "the good bytes open next to another file: %s", err.msg);

    uint8_t *b = malloc(size);
    const uint8_t *data = good + 8 + header_len(good);
    /* a flipped byte in every entry (tensors and files): a checksum error naming it */
    uint64_t at = 0;
    for (int i = 0; i < NS + NF; i++) {
        uint64_t len = i < NS ? sample_bytes(i) : strlen(FILES[i - NS].text);
        const char *name = i < NS ? S[i].name : FILES[i - NS].name;
        if (len == 0) continue;
        for (int where = 0; where < 2; where++) {
            memcpy(b, good, size);
            b[(data - good) + at + (where ? len - 1 : 0)] ^= (uint8_t)(1u << (i % 8));
            nemotron_status st = open_into(b, size, &err);
            char want[256];
            snprintf(want, sizeof want, "%s '%s%s': checksum mismatch",
                     i < NS ? "tensor" : "embedded file", i < NS ? "" : NT_NEMO_FILE_PREFIX, name);
            CHECK(st == NEMOTRON_ERR_FORMAT && contains(err.msg, want) &&
                      contains(err.msg, "says crc32"),
                  "flipped byte in '%s': %s", name, err.msg);
        }
        at += len;
    }

    /* a flipped checksum digit: still hex, so a mismatch; an uppercase digit is malformed */
    const char *h = (const char *)good + 8;
    const char *digits = strstr(h, "crc32\\\":\\\"");
    CHECK(digits != NULL, "checksum digits found in the header text");
    if (digits) {
        size_t d = (size_t)(digits - (const char *)good) + strlen("crc32\\\":\\\"") + 3;
        memcpy(b, good, size);
        b[d] = b[d] == '0' ? '1' : '0';
        nemotron_status st = open_into(b, size, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT && contains(err.msg, "checksum mismatch") &&
                  contains(err.msg, S[0].name),
              "flipped checksum digit: %s", err.msg);
        memcpy(b, good, size);
        b[d] = 'A';
        st = open_into(b, size, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT && contains(err.msg, "not 8 lowercase hex digits"),
              "uppercase checksum digit: %s", err.msg);
    }

    /* truncated at every length */
    int trunc_ok = 0;
    for (size_t n = 0; n < size; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, good, n);
        err.msg[0] = 0;
        nemotron_status st = open_into(cut, n, &err);
        trunc_ok += st == NEMOTRON_ERR_FORMAT && err.msg[0];
        if (st != NEMOTRON_ERR_FORMAT)
            CHECK(0, "truncated to %zu bytes: status %d: %s", n, st, err.msg);
        free(cut);
    }
    CHECK(trunc_ok == (int)size, "every truncation refused (%d of %zu)", trunc_ok, size);
    /* one byte more: data not covered by any tensor */
    {
        uint8_t *longer = calloc(1, size + 1);
        memcpy(longer, good, size);
        nemotron_status st = open_into(longer, size + 1, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT &&
                  contains(err.msg, "the last 1 bytes belong to no tensor"),
              "a trailing byte: %s", err.msg);
        free(longer);
    }

    /* header edits */
    for (int e = 0; e < E_COUNT; e++) {
        size_t n;
        uint8_t *r = rebuild(good, size, (enum edit)e, &n);
        nemotron_status st = open_into(r, n, &err);
        CHECK(st == EXPECT[e].st && contains(err.msg, EXPECT[e].msg1) &&
                  contains(err.msg, EXPECT[e].msg2),
              "edit %d: want status %d with \"%s\" / \"%s\", got %d: %s", e, EXPECT[e].st,
              EXPECT[e].msg1, EXPECT[e].msg2, st, err.msg);
        free(r);
    }
    /* and the rebuild itself keeps a good file good (so the edits are what fails) */
    {
        json_object *root = parse_header(good, size);
        size_t n;
        uint8_t *r = with_header(
            good, size, json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN), 0, &n);
        CHECK(open_into(r, n, &err) == NEMOTRON_OK, "an unedited rebuild opens: %s", err.msg);
        free(r);
        json_object_put(root);
    }
    free(b);
    free(good);
}

/* ------------------------------------------------------------------------------------------ */
/* writer misuse                                                                              */

static int no_output(const char *path) {
    char partial[600];
    snprintf(partial, sizeof partial, "%s.partial", path);
    return !exists(path) && !exists(partial);
}

/* Where a .nemo may go (src/model/output.c): not over a device, through a symbolic link to the
 * file it names, never over an input. */
static void test_output_targets(void) {
    struct nt_err err = {{0}};
    struct nt_nemo_writer *w = NULL;
    struct stat sb;
    CHECK(nt_nemo_writer_new(&w, "/dev/null", NULL, &err) == NEMOTRON_ERR_IO && w == NULL &&
              contains(err.msg, "not a regular file"),
          "/dev/null refused: %s", err.msg);
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode), "/dev/null is still a device");
    /* a link to an existing file: the file is replaced, the link stays a link */
    char target[512], link[512], dir[480], input[512];
    path_in(target, sizeof target, "target.nemo");
    path_in(link, sizeof link, "link.nemo");
    FILE *f = fopen(target, "wb");
    if (f) fputs("old", f), fclose(f);
    CHECK(symlink(target, link) == 0, "symlink");
    nemotron_status st = nt_nemo_writer_new(&w, link, NULL, &err);
    if (!st) st = nt_nemo_writer_declare_file(w, "config.json", "{}", 2, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_commit(w, &err);
    nt_nemo_writer_free(w);
    CHECK(st == NEMOTRON_OK, "write through a link: %s", err.msg);
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link is still a link");
    CHECK(nt_path_is_nemo(target), "the file it names holds the .nemo");
    unlink(link);
    /* a link to nothing */
    path_in(target, sizeof target, "nowhere/x.nemo");
    CHECK(symlink(target, link) == 0, "dangling symlink");
    CHECK(nt_nemo_writer_new(&w, link, NULL, &err) == NEMOTRON_ERR_IO && w == NULL &&
              contains(err.msg, "symbolic link"),
          "a dangling link refused: %s", err.msg);
    unlink(link);
    /* the input itself, or a file of the input directory */
    path_in(dir, sizeof dir, "model-dir");
    CHECK(mkdir(dir, 0755) == 0, "mkdir");
    snprintf(input, sizeof input, "%s/model.safetensors", dir);
    f = fopen(input, "wb");
    if (f) fputs("weights", f), fclose(f);
    CHECK(nt_nemo_writer_new(&w, input, dir, &err) == NEMOTRON_ERR_IO && w == NULL &&
              contains(err.msg, "is the input"),
          "a file of the input directory refused: %s", err.msg);
    CHECK(nt_nemo_writer_new(&w, input, input, &err) == NEMOTRON_ERR_IO && w == NULL, "the input file refused");
    size_t n = 0;
    uint8_t *kept = read_all(input, &n);
    CHECK(kept && n == 7 && !memcmp(kept, "weights", 7), "the input is untouched");
    free(kept);
    unlink(input);
    rmdir(dir);
    path_in(target, sizeof target, "target.nemo");
    unlink(target);
}

static void test_writer_misuse(void) {
    char path[512], partial[600];
    struct nt_err err = {{0}};
    struct nt_nemo_writer *w = NULL;
    path_in(path, sizeof path, "misuse.nemo");
    snprintf(partial, sizeof partial, "%s.partial", path);
    int64_t q[2] = {2, 64}, bad[2] = {2, 48}, v[1] = {4}, neg[2] = {3, -1};
    nemotron_status st;

    /* bad declarations are refused and change nothing */
    CHECK(nt_nemo_writer_new(&w, path, NULL, &err) == NEMOTRON_OK, "new: %s", err.msg);
    CHECK(exists(partial) && !exists(path), "the partial file exists, the path not yet");
    CHECK(nt_nemo_writer_append(w, "x", 1, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "append before begin"),
          "append before begin: %s", err.msg);
    CHECK(nt_nemo_writer_commit(w, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "commit before begin"),
          "commit before begin: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_Q4TP, 2, bad, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "not a multiple of 32") && contains(err.msg, "'a'"),
          "q4tp cols 48: %s", err.msg);
    static const int64_t k_odd[2] = {2, 288};
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_GGML_Q4_K, 2, k_odd, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "cols 288 is not a multiple of Q4_K's block of 256") &&
              contains(err.msg, "'a'"),
          "Q4_K cols 288: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_Q8_2F, 1, q, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "needs 2 dimensions"),
          "q8_2f 1-D: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_F32, 2, neg, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "dimension 1 is -1"),
          "negative dim: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_I32, 1, v, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "not one a .nemo stores"),
          "I32: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_F32, 9, v, &err) == NEMOTRON_ERR_ARG, "9 dims");
    CHECK(nt_nemo_writer_declare(w, "", NT_DTYPE_F32, 1, v, &err) == NEMOTRON_ERR_ARG,
          "empty name");
    CHECK(nt_nemo_writer_declare(w, "bad\xff", NT_DTYPE_F32, 1, v, &err) == NEMOTRON_ERR_ARG,
          "non-UTF-8 name");
    CHECK(nt_nemo_writer_declare(w, "__metadata__", NT_DTYPE_F32, 1, v, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "reserved"),
          "__metadata__: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "nemotron.file/config.json", NT_DTYPE_F32, 1, v, &err) ==
                  NEMOTRON_ERR_ARG &&
              contains(err.msg, "reserved"),
          "file prefix on a tensor: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_Q4TP, 2, q, &err) == NEMOTRON_OK,
          "a good declaration: %s", err.msg);
    CHECK(nt_nemo_writer_declare(w, "a", NT_DTYPE_F32, 1, v, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "'a' is declared twice"),
          "duplicate tensor: %s", err.msg);
    CHECK(nt_nemo_writer_declare_file(w, "config.json", "{}", 2, &err) == NEMOTRON_OK, "file: %s",
          err.msg);
    CHECK(nt_nemo_writer_declare_file(w, "config.json", "{}", 2, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "'config.json' is declared twice"),
          "duplicate file: %s", err.msg);
    CHECK(nt_nemo_writer_declare_file(w, "a/b", "", 0, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "'/'"),
          "file name with '/': %s", err.msg);
    CHECK(nt_nemo_writer_declare_file(w, "..", "", 0, &err) == NEMOTRON_ERR_ARG, "file '..'");
    CHECK(nt_nemo_writer_declare_file(w, "", "", 0, &err) == NEMOTRON_ERR_ARG, "file ''");
    CHECK(nt_nemo_writer_declare_file(w, "a\tb", "", 0, &err) == NEMOTRON_ERR_ARG,
          "file with a tab");
    CHECK(nt_nemo_writer_meta(w, "quant", "x", &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "nemotron."),
          "meta key without the prefix: %s", err.msg);
    CHECK(nt_nemo_writer_meta(w, "nemotron.format", "2", &err) == NEMOTRON_ERR_ARG,
          "meta nemotron.format");
    CHECK(nt_nemo_writer_meta(w, "nemotron.tensors", "{}", &err) == NEMOTRON_ERR_ARG,
          "meta nemotron.tensors");
    CHECK(nt_nemo_writer_meta(w, "nemotron.x", "\xc0\x80", &err) == NEMOTRON_ERR_ARG,
          "overlong UTF-8 value");
    CHECK(nt_nemo_writer_meta(w, "nemotron.x", "1", &err) == NEMOTRON_OK, "meta: %s", err.msg);
    CHECK(nt_nemo_writer_meta(w, "nemotron.x", "2", &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "twice"),
          "meta twice: %s", err.msg);
    CHECK(nt_nemo_writer_begin(w, &err) == NEMOTRON_OK, "begin after refused declarations: %s",
          err.msg);
    /* declare after begin: refused, and the writer is failed from then on */
    CHECK(nt_nemo_writer_declare(w, "late", NT_DTYPE_F32, 1, v, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "after begin"),
          "declare after begin: %s", err.msg);
    CHECK(nt_nemo_writer_append(w, "x", 1, &err) == NEMOTRON_ERR_ARG &&
              contains(err.msg, "after an earlier call failed"),
          "a failed writer refuses appends: %s", err.msg);
    CHECK(nt_nemo_writer_commit(w, &err) == NEMOTRON_ERR_ARG, "and commit");
    nt_nemo_writer_free(w);
    CHECK(no_output(path), "a failed writer leaves no file");

    /* appending too much: refused before anything is written */
    uint64_t nq = nt_matrix_bytes(NT_DTYPE_Q4TP, 2, 64);
    uint8_t *buf = calloc(1, nq + 16);
    st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "a", NT_DTYPE_Q4TP, 2, q, &err);
    if (!st) st = nt_nemo_writer_declare(w, "b", NT_DTYPE_F32, 1, v, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, buf, 10, &err);
    CHECK(st == NEMOTRON_OK, "setup: %s", err.msg);
    st = nt_nemo_writer_append(w, buf, (size_t)nq + 16 - 10 + 1, &err);
    CHECK(st == NEMOTRON_ERR_ARG &&
              contains(err.msg, "runs 1 bytes past the end of the last tensor 'b'") &&
              contains(err.msg, "at tensor 'a'"),
          "append too much: %s", err.msg);
    CHECK(nt_nemo_writer_commit(w, &err) == NEMOTRON_ERR_ARG, "commit after a failed append");
    nt_nemo_writer_free(w);
    CHECK(no_output(path), "append too much: no file left");

    /* commit with a tensor incomplete */
    st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "a", NT_DTYPE_Q4TP, 2, q, &err);
    if (!st) st = nt_nemo_writer_declare(w, "b", NT_DTYPE_F32, 1, v, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, buf, (size_t)nq + 3, &err);
    CHECK(st == NEMOTRON_OK, "setup: %s", err.msg);
    st = nt_nemo_writer_commit(w, &err);
    CHECK(st == NEMOTRON_ERR_ARG &&
              contains(err.msg, "tensor 'b' is incomplete: 3 of its 16 bytes"),
          "incomplete commit: %s", err.msg);
    nt_nemo_writer_free(w);
    CHECK(no_output(path), "incomplete commit: no file left");

    /* an aborted writer (freed without commit, after all the data) leaves no file; an existing
     * file at the path is only replaced by a commit */
    write_all_file(path, "old", 3);
    write_all_file(partial, "stale", 5); /* a crashed run's leftover */
    st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "b", NT_DTYPE_F32, 1, v, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, buf, 16, &err);
    CHECK(st == NEMOTRON_OK, "setup: %s", err.msg);
    nt_nemo_writer_free(w);
    size_t n;
    uint8_t *old = read_all(path, &n);
    CHECK(old && n == 3 && !memcmp(old, "old", 3) && !exists(partial),
          "abort: old file kept, partial removed");
    free(old);
    st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare(w, "b", NT_DTYPE_F32, 1, v, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, buf, 16, &err);
    if (!st) st = nt_nemo_writer_commit(w, &err);
    CHECK(st == NEMOTRON_OK, "commit over an old file: %s", err.msg);
    CHECK(nt_nemo_writer_commit(w, &err) == NEMOTRON_ERR_ARG && contains(err.msg, "after commit"),
          "commit twice: %s", err.msg);
    CHECK(nt_nemo_writer_append(w, buf, 0, &err) == NEMOTRON_ERR_ARG, "append after commit");
    nt_nemo_writer_free(w);
    CHECK(nt_path_is_nemo(path) && !exists(partial), "the old file was replaced by the commit");
    unlink(path);

    /* a file with no tensors, only an embedded file, is valid */
    st = nt_nemo_writer_new(&w, path, NULL, &err);
    if (!st) st = nt_nemo_writer_declare_file(w, "config.json", "{}", 2, &err);
    if (!st) st = nt_nemo_writer_begin(w, &err);
    if (!st) st = nt_nemo_writer_append(w, buf, 0, &err);
    if (!st) st = nt_nemo_writer_commit(w, &err);
    nt_nemo_writer_free(w);
    struct nt_tensor_table t;
    nt_table_init(&t);
    CHECK(st == NEMOTRON_OK && nt_nemo_open(&t, path, 1, &err) == NEMOTRON_OK && t.n_tensors == 0 &&
              t.n_embedded == 1,
          "files only: %s", err.msg);
    nt_table_close(&t);
    unlink(path);

    /* where the writer cannot write */
    CHECK(nt_nemo_writer_new(&w, "/nonexistent-dir/x.nemo", NULL, &err) == NEMOTRON_ERR_IO && w == NULL &&
              contains(err.msg, "/nonexistent-dir/x.nemo.partial"),
          "unwritable directory: %s", err.msg);
    CHECK(nt_nemo_writer_new(&w, tmp_root, NULL, &err) == NEMOTRON_ERR_IO && w == NULL &&
              contains(err.msg, "directory"),
          "a directory as the path: %s", err.msg);
    CHECK(nt_nemo_writer_new(&w, "", NULL, &err) == NEMOTRON_ERR_ARG && w == NULL, "empty path");
    test_output_targets();
    nt_nemo_writer_free(NULL);
    free(buf);
}

int main(void) {
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 2;
    }
    test_roundtrip();
    test_large();
    test_corruption();
    test_writer_misuse();
    char cmd[600];
    /* the directory is ours (mkdtemp), under /tmp, and its name has no shell metacharacters */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return test_summary("nemo");
}
