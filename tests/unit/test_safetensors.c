/* test_safetensors.c - the tensor table: valid files, every malformed header, sharded indexes.
 *
 * Files are built in memory from a header string and data bytes (make_file), so each case
 * shows the exact JSON it feeds; index cases write small directories under /tmp (mkdtemp) and
 * remove them. Every failing add is checked to leave the table as it was. The committed
 * fixtures (tests/fixtures) are opened last, from the repository root.
 */
#include "model/safetensors.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"

/* ------------------------------------------------------------------------------------------ */
/* building files                                                                             */

/* A safetensors file: u64 LE strlen(header), the header, pad spaces, then data_len bytes of
 * data (byte i = (uint8_t)(i * 7 + 1), so views can be checked), malloc-ed. */
static uint8_t *make_file(const char *header, size_t pad, size_t data_len, size_t *size) {
    size_t n = strlen(header) + pad;
    *size = 8 + n + data_len;
    uint8_t *b = malloc(*size ? *size : 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, strlen(header));
    memset(b + 8 + strlen(header), ' ', pad);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (uint8_t)(i * 7 + 1);
    return b;
}

static void write_bytes(const char *path, const void *bytes, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (size && fwrite(bytes, 1, size, f) != size) exit(2);
    fclose(f);
}

static void write_st(const char *dir, const char *name, const char *header, size_t data_len) {
    char path[512];
    size_t size;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint8_t *b = make_file(header, 0, data_len, &size);
    write_bytes(path, b, size);
    free(b);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_bytes(path, text, strlen(text));
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ------------------------------------------------------------------------------------------ */
/* a valid file                                                                               */

static void test_dtypes(void) {
    static const struct {
        enum nt_dtype d;
        const char *name;
        size_t size;
    } want[] = {{NT_DTYPE_F32, "F32", 4},         {NT_DTYPE_F16, "F16", 2},
                {NT_DTYPE_BF16, "BF16", 2},       {NT_DTYPE_F64, "F64", 8},
                {NT_DTYPE_I64, "I64", 8},         {NT_DTYPE_I32, "I32", 4},
                {NT_DTYPE_I16, "I16", 2},         {NT_DTYPE_I8, "I8", 1},
                {NT_DTYPE_U8, "U8", 1},           {NT_DTYPE_BOOL, "BOOL", 1},
                {NT_DTYPE_F8_E4M3, "F8_E4M3", 1}, {NT_DTYPE_F8_E5M2, "F8_E5M2", 1}};
    CHECK(sizeof want / sizeof want[0] == NT_DTYPE_COUNT, "every dtype listed");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(strcmp(nt_dtype_name(want[i].d), want[i].name) == 0, "name of %s", want[i].name);
        CHECK(nt_dtype_size(want[i].d) == want[i].size, "size of %s", want[i].name);
    }
}

static void test_valid(void) {
    /* the spaces after the header put the data at an odd offset: no tensor's data is aligned,
     * and the table must not care */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[32,40]},"
                    "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[40,48]},"
                    "\"z\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[48,48]}}";
    size_t size, pad = (9 - (8 + strlen(h)) % 8) % 8; /* data at 1 mod 8 from the file start */
    uint8_t *b = make_file(h, pad, 48, &size);
    const uint8_t *data = b + 8 + strlen(h) + pad;
    CHECK((8 + strlen(h) + pad) % 8 == 1 && pad > 0, "data starts at an odd offset, after padding");
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    nt_table_init(&t);
    nemotron_status st = nt_table_add_bytes(&t, "ok.safetensors", b, size, 0, &err);
    CHECK(st == NEMOTRON_OK, "valid file loads: %s", err.msg);
    CHECK(t.n_tensors == 5 && t.n_files == 1, "5 tensors in 1 file, got %d / %d", t.n_tensors,
          t.n_files);
    CHECK(t.n_files == 1 && strcmp(t.files[0].path, "ok.safetensors") == 0 &&
              t.files[0].map == b && t.files[0].size == size && t.files[0].owned_map == 0,
          "file record");

    struct nt_tensor *w = nt_table_find(&t, "w"), *bf = nt_table_find(&t, "b"),
                     *hf = nt_table_find(&t, "h"), *s = nt_table_find(&t, "s"),
                     *z = nt_table_find(&t, "z");
    CHECK(w && bf && hf && s && z, "all found");
    CHECK(!nt_table_find(&t, "__metadata__") && !nt_table_find(&t, "x") && !nt_table_find(&t, ""),
          "absent names are NULL");
    if (w && bf && hf && s && z) {
        CHECK(w->dtype == NT_DTYPE_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 &&
                  w->nbytes == 24 && w->data == data && w->file == 0 && !w->used,
              "w: F32 [2, 3]");
        CHECK(strcmp(w->name, "w") == 0 && w->name != (const char *)b, "w's name");
        CHECK(bf->dtype == NT_DTYPE_BF16 && bf->ndim == 1 && bf->shape[0] == 4 &&
                  bf->nbytes == 8 && bf->data == data + 24,
              "b: BF16 [4]");
        CHECK(hf->dtype == NT_DTYPE_F16 && hf->ndim == 2 && hf->shape[0] == 2 &&
                  hf->shape[1] == 2 && hf->nbytes == 8 && hf->data == data + 32,
              "h: F16 [2, 2]");
        CHECK(s->dtype == NT_DTYPE_I64 && s->ndim == 0 && s->nbytes == 8 && s->data == data + 40,
              "s: I64 scalar");
        CHECK(z->dtype == NT_DTYPE_U8 && z->ndim == 2 && z->shape[0] == 0 && z->shape[1] == 5 &&
                  z->nbytes == 0 && z->data == data + 48,
              "z: empty U8 [0, 5] at the end of the data");
        /* the bytes are the file's: read through the view without alignment */
        CHECK(((const uint8_t *)bf->data)[2] == (uint8_t)(26 * 7 + 1),
              "b's second element starts at byte 26 of the data");
        CHECK(((const uint8_t *)hf->data)[0] == (uint8_t)(32 * 7 + 1), "h's first byte");
    }
    /* file order is header order */
    CHECK(t.n_tensors == 5 && strcmp(t.tensors[0].name, "w") == 0 &&
              strcmp(t.tensors[4].name, "z") == 0,
          "tensors in header order");
    nt_table_close(&t);
    CHECK(t.n_tensors == 0 && t.tensors == NULL && t.hash == NULL, "close resets the table");
    nt_table_close(&t); /* twice is fine */
    free(b);

    /* an empty header, and trailing JSON whitespace after the object */
    const char *ok[] = {"{}", "{}  ", "  {\"__metadata__\":{}}", "{}\n\t\r "};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        b = make_file(ok[i], 0, 0, &size);
        nt_table_init(&t);
        st = nt_table_add_bytes(&t, "e.safetensors", b, size, 0, &err);
        CHECK(st == NEMOTRON_OK && t.n_tensors == 0 && t.n_files == 1, "header '%s': %s", ok[i],
              err.msg);
        nt_table_close(&t);
        free(b);
    }
}

/* Many tensors over many files: the hash grows and every name is still found. */
static void test_many(void) {
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    nt_table_init(&t);
    enum { FILES = 40, PER_FILE = 50 };
    uint8_t *files[FILES];
    for (int f = 0; f < FILES; f++) {
        char *h = malloc(PER_FILE * 100 + 16);
        size_t at = (size_t)sprintf(h, "{");
        for (int i = 0; i < PER_FILE; i++)
            at += (size_t)sprintf(h + at, "%s\"layers.%d.w\":{\"dtype\":\"I8\",\"shape\":[1],"
                                          "\"data_offsets\":[%d,%d]}",
                                  i ? "," : "", f * PER_FILE + i, PER_FILE - 1 - i, PER_FILE - i);
        sprintf(h + at, "}");
        size_t size;
        files[f] = make_file(h, 0, PER_FILE, &size);
        char path[32];
        snprintf(path, sizeof path, "f%d", f);
        CHECK(nt_table_add_bytes(&t, path, files[f], size, 0, &err) == NEMOTRON_OK, "file %d: %s",
              f, err.msg);
        free(h);
    }
    CHECK(t.n_tensors == FILES * PER_FILE, "all tensors added");
    CHECK(t.hash_cap >= 2 * t.n_tensors && (t.hash_cap & (t.hash_cap - 1)) == 0,
          "hash at most half full, a power of two");
    int found = 0;
    for (int i = 0; i < FILES * PER_FILE; i++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.w", i);
        struct nt_tensor *x = nt_table_find(&t, name);
        found += x && x->file == i / PER_FILE && strcmp(x->name, name) == 0 &&
                 x->data == (const uint8_t *)t.files[x->file].map + t.files[x->file].size - 1 -
                                (i % PER_FILE);
    }
    CHECK(found == FILES * PER_FILE, "found %d of %d", found, FILES * PER_FILE);
    nt_table_close(&t);
    for (int f = 0; f < FILES; f++) free(files[f]);
}

/* ------------------------------------------------------------------------------------------ */
/* malformed files                                                                            */

struct bad_case {
    const char *what;
    const char *header;
    size_t data_len;
    const char *want[3]; /* substrings of the message */
};

#define F32_2 "\"dtype\":\"F32\",\"shape\":[2]"

static const struct bad_case bad_cases[] = {
    {"not JSON", "{\"a\" 1}", 0, {"bad.st: header JSON", "byte 5"}},
    {"JSON cut short", "{\"a\":{\"dtype\":", 0, {"bad.st: header JSON ends early"}},
    {"JSON array", "[1,2]", 0, {"bad.st: header is a JSON array, not an object"}},
    {"JSON string", "\"x\"", 0, {"not an object"}},
    {"JSON null", "null", 0, {"bad.st: header is a JSON null, not an object"}},
    {"JSON number", "12", 0, {"bad.st: header is a JSON int, not an object"}},
    {"JSON cut in a number", "{\"a\":{\"shape\":[12", 0, {"bad.st: header JSON ends early"}},
    {"trailing garbage", "{} x", 0, {"bad.st", "unexpected bytes after the JSON value"}},
    {"two objects", "{}{}", 0, {"unexpected bytes after the JSON value"}},
    {"comment", "{/* c */}", 0, {"bad.st: header JSON"}},
    {"invalid UTF-8", "{\"\xff\":{}}", 0, {"bad.st: header JSON", "utf-8"}},
    {"entry not an object", "{\"a\":5}", 0, {"tensor 'a': entry is a JSON int, not an object"}},
    {"entry null", "{\"a\":null}", 0, {"tensor 'a': entry is a JSON null"}},
    {"no dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, {"tensor 'a': no \"dtype\""}},
    {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': \"dtype\" is a JSON int, not a string"}},
    {"unknown dtype", "{\"a\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': unknown dtype \"Q4_K\""}},
    {"dtype with NUL", "{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     8, {"tensor 'a': unknown dtype"}},
    {"lower-case dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     {"unknown dtype \"f32\""}},
    {"no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': no \"shape\""}},
    {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': \"shape\" is a JSON int, not an array"}},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape[1] is -1 (negative)"}},
    {"fractional dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape[0] is 2.5 (not an integer)"}},
    {"dim as string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape[0]", "not an integer"}},
    {"huge dim",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape[0]", "too large"}},
    {"too many dims",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape has 9 dimensions, more than the 8 supported"}},
    {"byte count overflows",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
     {"tensor 'a': shape [4294967296, 4294967296] of F32 overflows"}},
    {"no data_offsets", "{\"a\":{" F32_2 "}}", 8, {"tensor 'a': no \"data_offsets\""}},
    {"data_offsets not an array", "{\"a\":{" F32_2 ",\"data_offsets\":8}}", 8,
     {"tensor 'a': \"data_offsets\" is 8, not an array"}},
    {"data_offsets of 3", "{\"a\":{" F32_2 ",\"data_offsets\":[0,8,9]}}", 8,
     {"tensor 'a': \"data_offsets\" is [0,8,9]"}},
    {"negative offset", "{\"a\":{" F32_2 ",\"data_offsets\":[-8,0]}}", 8,
     {"tensor 'a': data_offsets[0] is -8 (negative)"}},
    {"fractional offset", "{\"a\":{" F32_2 ",\"data_offsets\":[0,8.0]}}", 8,
     {"tensor 'a': data_offsets[1]", "not an integer"}},
    {"begin after end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
     {"tensor 'a': data_offsets [8, 0] begin after they end"}},
    {"span too short", "{\"a\":{" F32_2 ",\"data_offsets\":[0,4]}}", 8,
     {"tensor 'a': shape [2] of F32 is 8 bytes but data_offsets span 4"}},
    {"span too long", "{\"a\":{" F32_2 ",\"data_offsets\":[0,12]}}", 16,
     {"tensor 'a': shape [2] of F32 is 8 bytes but data_offsets span 12"}},
    {"truncated", "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}}", 8,
     {"tensor 'a'", "file truncated, 16 bytes missing"}},
    {"offsets past int64",
     "{\"a\":{" F32_2 ",\"data_offsets\":[18446744073709551600,18446744073709551608]}}", 8,
     {"tensor 'a'", "too large"}},
    {"overlap",
     "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]},\"b\":{" F32_2 ",\"data_offsets\":[4,12]}}", 16,
     {"tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])"}},
    {"overlap out of order",
     "{\"c\":{" F32_2 ",\"data_offsets\":[16,24]},\"a\":{" F32_2 ",\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
     24, {"overlaps", "'b'", "'c'"}},
    {"same span twice",
     "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]},\"b\":{" F32_2 ",\"data_offsets\":[0,8]}}", 8,
     {"overlaps", "'a'", "'b'"}},
    {"hole between tensors",
     "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]},\"b\":{" F32_2 ",\"data_offsets\":[12,20]}}", 20,
     {"bad.st: the data section has a hole: bytes [8, 12) before tensor 'b' belong to no tensor"}},
    {"bytes after the last tensor", "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]}}", 9,
     {"the data section holds 9 bytes, the entries end at 8: the last 1 bytes belong to no tensor"}},
    {"hole before the first tensor", "{\"a\":{" F32_2 ",\"data_offsets\":[4,12]}}", 12,
     {"the data section has a hole: bytes [0, 4) before tensor 'a'"}},
    {"duplicate name",
     "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]},\"a\":{" F32_2 ",\"data_offsets\":[8,16]}}", 16,
     {"bad.st: header: key 'a' appears more than once"}},
    {"duplicate name, escaped",
     "{\"ab\":{" F32_2 ",\"data_offsets\":[0,8]},\"\\u0061b\":{" F32_2 ",\"data_offsets\":[8,16]}}",
     16, {"key 'ab' appears more than once"}},
    {"duplicate key in an entry",
     "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     {"bad.st: header: 'a': key 'dtype' appears more than once"}},
    {"duplicate key in an entry, escaped",
     "{\"b\":{" F32_2 ",\"data_offsets\":[0,8],\"data_offset\\u0073\":[8,16]}}", 16,
     {"'b': key 'data_offsets' appears more than once"}},
    {"duplicate key in the metadata", "{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", 0,
     {"'__metadata__': key 'format' appears more than once"}},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
     {"key '__metadata__' appears more than once"}},
    {"NUL in name",
     "{\"a\\u0000x\":{" F32_2 ",\"data_offsets\":[0,8]},\"a\\u0000y\":{" F32_2
     ",\"data_offsets\":[8,16]}}",
     16, {"bad.st: header: key \"a\\u0000x\" contains a NUL character"}},
    {"metadata not an object", "{\"__metadata__\":[\"pt\"]}", 0,
     {"bad.st: __metadata__ is a JSON array, not an object"}},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":\"pt\",\"n\":3}}", 0,
     {"bad.st: __metadata__ key 'n' is a JSON int, not a string"}},
    {"too deep", "{\"__metadata__\":{\"a\":[[[[[[[[[[1]]]]]]]]]]}}", 0, {"bad.st: header JSON"}},
};

/* A file that is already in the table when each bad file is added. */
static const char *good_header =
    "{\"keep\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"keep2\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}";

static void expect_unchanged(const struct nt_tensor_table *t, int n_tensors, int n_files,
                             const int *hash_copy, const char *what) {
    CHECK(t->n_tensors == n_tensors && t->n_files == n_files, "%s: table unchanged (%d, %d)", what,
          t->n_tensors, t->n_files);
    CHECK(nt_table_find(t, "keep") && nt_table_find(t, "keep2"), "%s: old tensors found", what);
    CHECK(!nt_table_find(t, "a") && !nt_table_find(t, "b") && !nt_table_find(t, "c"),
          "%s: nothing of the bad file found", what);
    CHECK(memcmp(t->hash, hash_copy, (size_t)t->hash_cap * sizeof *hash_copy) == 0,
          "%s: hash unchanged", what);
}

static void test_bad(void) {
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    size_t gsize, size;
    uint8_t *good = make_file(good_header, 0, 12, &gsize);
    nt_table_init(&t);
    CHECK(nt_table_add_bytes(&t, "good.st", good, gsize, 0, &err) == NEMOTRON_OK, "good: %s",
          err.msg);
    int *hash_copy = malloc((size_t)t.hash_cap * sizeof *hash_copy);
    memcpy(hash_copy, t.hash, (size_t)t.hash_cap * sizeof *hash_copy);

    /* each case without and with the padding spaces writers put after the JSON */
    for (size_t i = 0; i < 2 * sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i / 2];
        uint8_t *b = make_file(c->header, i % 2 ? 5 : 0, c->data_len, &size);
        err.msg[0] = 0;
        nemotron_status st = nt_table_add_bytes(&t, "bad.st", b, size, 0, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT, "%s: status %d (%s)", c->what, st, err.msg);
        for (int k = 0; k < 3 && c->want[k]; k++)
            CHECK(contains(err.msg, c->want[k]), "%s: message \"%s\" lacks \"%s\"", c->what,
                  err.msg, c->want[k]);
        expect_unchanged(&t, 2, 1, hash_copy, c->what);
        free(b);
    }

    /* the message of the contract's example, word for word */
    const char *nf = "{\"backbone.norm_f.weight\":{\"dtype\":\"F32\",\"shape\":[64],"
                     "\"data_offsets\":[0,128]}}";
    uint8_t *b = make_file(nf, 0, 256, &size);
    CHECK(nt_table_add_bytes(&t, "model.safetensors", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              strcmp(err.msg, "model.safetensors: tensor 'backbone.norm_f.weight': shape [64] of "
                              "F32 is 256 bytes but data_offsets span 128") == 0,
          "example message: %s", err.msg);
    free(b);

    /* the header length field itself */
    static const uint8_t short_file[5] = {1, 0, 0, 0, 0};
    CHECK(nt_table_add_bytes(&t, "bad.st", short_file, 5, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "bad.st: file is 5 bytes, shorter than the 8-byte header length"),
          "5-byte file: %s", err.msg);
    CHECK(nt_table_add_bytes(&t, "bad.st", NULL, 0, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "bad.st: file is 0 bytes"),
          "0-byte file: %s", err.msg);
    b = make_file("{}", 0, 0, &size);
    b[0] = 3; /* claims 3 bytes of header; 2 follow */
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "bad.st: header length 3 but only 2 bytes follow") &&
              contains(err.msg, "1 byte missing"),
          "header longer than the file: %s", err.msg);
    b[0] = 0, b[3] = 0x10; /* 256 MB */
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "bad.st: header length 268435456 is over the 100000000-byte limit"),
          "absurd header length: %s", err.msg);
    memset(b, 0xff, 8);
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "header length 18446744073709551615 is over"),
          "header length 2^64-1: %s", err.msg);
    memset(b, 0, 8);
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "ends early"),
          "empty header: %s", err.msg);
    free(b);
    /* a header length one byte short of the padded header: the JSON still parses (the byte cut
     * is a padding space), and the data would start one byte early: the hole it leaves at the
     * end of the data section is what gives it away */
    const char *one = "{\"a\":{" F32_2 ",\"data_offsets\":[0,8]}}";
    b = make_file(one, 3, 8, &size);
    b[0]--;
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "the last 1 bytes belong to no tensor"),
          "header length one byte short: %s", err.msg);
    free(b);
    expect_unchanged(&t, 2, 1, hash_copy, "length field");

    /* a name already in another file: both files named; the file's other, new tensor (parsed
     * before the clash was found) must not be left behind */
    const char *dup = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"keep2\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
    b = make_file(dup, 0, 2, &size);
    CHECK(nt_table_add_bytes(&t, "other.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "other.st: tensor 'keep2' is also in good.st"),
          "duplicate across files: %s", err.msg);
    expect_unchanged(&t, 2, 1, hash_copy, "duplicate across files");
    free(b);

    /* the same bytes added twice: every name clashes */
    CHECK(nt_table_add_bytes(&t, "again.st", good, gsize, 0, &err) == NEMOTRON_ERR_FORMAT &&
              contains(err.msg, "again.st: tensor 'keep' is also in good.st"),
          "same file twice: %s", err.msg);
    expect_unchanged(&t, 2, 1, hash_copy, "same file twice");

    /* empty spans overlap nothing, even inside another tensor's span */
    const char *empty = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                        "\"c\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[16,16]}}";
    b = make_file(empty, 0, 16, &size);
    CHECK(nt_table_add_bytes(&t, "empty.st", b, size, 0, &err) == NEMOTRON_OK && t.n_tensors == 5,
          "empty spans: %s", err.msg);
    nt_table_close(&t);
    free(b);

    /* closing a table whose only add failed */
    nt_table_init(&t);
    b = make_file("{\"a\":1}", 0, 0, &size);
    CHECK(nt_table_add_bytes(&t, "bad.st", b, size, 0, &err) == NEMOTRON_ERR_FORMAT, "bad add");
    CHECK(t.n_tensors == 0 && t.n_files == 0 && !nt_table_find(&t, "a"), "still empty");
    nt_table_close(&t);
    nt_table_close(&t);
    free(b);

    /* a fresh table closes, and finds nothing */
    nt_table_init(&t);
    CHECK(nt_table_find(&t, "x") == NULL, "fresh table finds nothing");
    nt_table_close(&t);
    free(hash_copy);
    free(good);
}

/* ------------------------------------------------------------------------------------------ */
/* files and directories                                                                      */

static char tmp_root[64];

static void make_dir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmp_root, name);
    if (mkdir(out, 0700) != 0) {
        perror(out);
        exit(2);
    }
}

static void remove_tree(const char *dir) {
    char cmd[256];
    /* the directory is ours (mkdtemp), under /tmp, and its name has no shell metacharacters */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static const char *shard_a =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"x.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"y.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]}}";
static const char *shard_b =
    "{\"z.weight\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
static const char *index_ab =
    "{\"metadata\":{\"total_size\":18},\"weight_map\":{\"x.weight\":\"a.safetensors\","
    "\"z.weight\":\"b.safetensors\",\"y.weight\":\"a.safetensors\"}}\n";

/* Opens dir, expects failure with status and message substrings, and an untouched table. */
static void expect_open_fails(const char *dir, nemotron_status want, const char *s1, const char *s2,
                              const char *what) {
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    nt_table_init(&t);
    nemotron_status st = nt_table_open_dir(&t, dir, &err);
    CHECK(st == want, "%s: status %d, want %d (%s)", what, st, want, err.msg);
    CHECK(!s1 || contains(err.msg, s1), "%s: message \"%s\" lacks \"%s\"", what, err.msg, s1);
    CHECK(!s2 || contains(err.msg, s2), "%s: message \"%s\" lacks \"%s\"", what, err.msg, s2);
    CHECK(t.n_tensors == 0 && t.n_files == 0, "%s: table left empty (%d tensors, %d files)", what,
          t.n_tensors, t.n_files);
    nt_table_close(&t);
}

static void test_files(void) {
    char dir[128], path[256];
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    make_dir(dir, sizeof dir, "files");

    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    nt_table_init(&t);
    CHECK(nt_table_add_file(&t, path, &err) == NEMOTRON_ERR_IO && contains(err.msg, path) &&
              contains(err.msg, "No such file"),
          "missing file: %s", err.msg);
    write_text(dir, "empty.safetensors", "");
    snprintf(path, sizeof path, "%s/empty.safetensors", dir);
    CHECK(nt_table_add_file(&t, path, &err) == NEMOTRON_ERR_FORMAT && contains(err.msg, path) &&
              contains(err.msg, "0 bytes, shorter than the 8-byte header length"),
          "empty file: %s", err.msg);
    CHECK(nt_table_add_file(&t, dir, &err) == NEMOTRON_ERR_IO && contains(err.msg, "not a regular"),
          "a directory: %s", err.msg);
    write_st(dir, "bad.safetensors",
             "{\"q\":{\"dtype\":\"F32\",\"shape\":[9],\"data_offsets\":[0,36]}}", 4);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    CHECK(nt_table_add_file(&t, path, &err) == NEMOTRON_ERR_FORMAT && contains(err.msg, path) &&
              contains(err.msg, "32 bytes missing"),
          "truncated file: %s", err.msg);
    CHECK(t.n_files == 0 && t.n_tensors == 0, "failed adds leave nothing");

    write_st(dir, "a.safetensors", shard_a, 12);
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    CHECK(nt_table_add_file(&t, path, &err) == NEMOTRON_OK, "add_file: %s", err.msg);
    CHECK(t.n_files == 1 && t.files[0].owned_map == 1 &&
              t.files[0].size == 8 + strlen(shard_a) + 12 && strcmp(t.files[0].path, path) == 0,
          "mapped file record");
    struct nt_tensor *x = nt_table_find(&t, "x.weight");
    CHECK(x && x->data == t.files[0].map + 8 + strlen(shard_a) &&
              ((const uint8_t *)x->data)[1] == 8,
          "mapped data");
    nt_table_close(&t);
    remove_tree(dir);
}

static void test_dirs(void) {
    char dir[128];
    struct nt_tensor_table t;
    struct nt_err err = {{0}};

    /* a valid two-shard index */
    make_dir(dir, sizeof dir, "two");
    write_st(dir, "a.safetensors", shard_a, 12);
    write_st(dir, "b.safetensors", shard_b, 6);
    write_text(dir, "model.safetensors.index.json", index_ab);
    nt_table_init(&t);
    CHECK(nt_table_open_dir(&t, dir, &err) == NEMOTRON_OK, "two shards: %s", err.msg);
    CHECK(t.n_files == 2 && t.n_tensors == 3, "2 files, 3 tensors: %d, %d", t.n_files, t.n_tensors);
    struct nt_tensor *x = nt_table_find(&t, "x.weight"), *y = nt_table_find(&t, "y.weight"),
                     *z = nt_table_find(&t, "z.weight");
    CHECK(x && y && z, "all found");
    if (x && y && z && t.n_files == 2) {
        CHECK(contains(t.files[x->file].path, "/two/a.safetensors") && y->file == x->file &&
                  contains(t.files[z->file].path, "/two/b.safetensors"),
              "each tensor in its shard");
        CHECK(z->dtype == NT_DTYPE_F16 && z->shape[0] == 3 &&
                  z->data == t.files[z->file].map + 8 + strlen(shard_b),
              "z's view");
        CHECK(t.files[0].owned_map && t.files[1].owned_map, "shards are owned mappings");
    }
    nt_table_close(&t);
    /* the same directory given with a trailing slash */
    char slash[160];
    snprintf(slash, sizeof slash, "%s/", dir);
    nt_table_init(&t);
    CHECK(nt_table_open_dir(&t, slash, &err) == NEMOTRON_OK && t.n_tensors == 3, "trailing /: %s",
          err.msg);
    CHECK(t.n_files == 2 && !contains(t.files[0].path, "//"), "no double slash");
    nt_table_close(&t);
    /* an existing table gains the shards; a failing open leaves its old contents */
    size_t gsize;
    uint8_t *good = make_file(good_header, 0, 12, &gsize);
    nt_table_init(&t);
    CHECK(nt_table_add_bytes(&t, "good.st", good, gsize, 0, &err) == NEMOTRON_OK, "good");
    CHECK(nt_table_open_dir(&t, dir, &err) == NEMOTRON_OK && t.n_tensors == 5 && t.n_files == 3,
          "shards after a file: %s", err.msg);
    nt_table_close(&t);
    remove_tree(dir);

    /* a shard the index names is missing */
    make_dir(dir, sizeof dir, "missing");
    write_st(dir, "a.safetensors", shard_a, 12);
    write_text(dir, "model.safetensors.index.json", index_ab);
    expect_open_fails(dir, NEMOTRON_ERR_IO, "names shard 'b.safetensors'", "No such file",
                      "missing shard");
    remove_tree(dir);

    /* a tensor the index lists is not in its shard (or anywhere) */
    make_dir(dir, sizeof dir, "ghost");
    write_st(dir, "a.safetensors", shard_a, 12);
    write_st(dir, "b.safetensors", shard_b, 6);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"y.weight\":\"a.safetensors\","
               "\"z.weight\":\"b.safetensors\",\"ghost.weight\":\"b.safetensors\"}}");
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT,
                      "tensor 'ghost.weight' is listed in shard 'b.safetensors', which does not "
                      "hold it",
                      "model.safetensors.index.json", "listed but absent");
    /* listed under the wrong shard */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"y.weight\":\"b.safetensors\","
               "\"z.weight\":\"b.safetensors\"}}");
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT,
                      "tensor 'y.weight' is listed in shard 'b.safetensors' but is in shard "
                      "'a.safetensors'",
                      NULL, "wrong shard");
    /* a tensor of a shard the index does not list */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"z.weight\":\"b.safetensors\"}}");
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT,
                      "shard 'a.safetensors' holds tensor 'y.weight', which the index does not "
                      "list",
                      NULL, "present but not listed");
    /* shard names that leave the directory */
    const char *paths[] = {"../a.safetensors", "sub/a.safetensors", "/tmp/a.safetensors", "..",
                           ".", ""};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char idx[256];
        snprintf(idx, sizeof idx, "{\"weight_map\":{\"x.weight\":\"%s\"}}", paths[i]);
        write_text(dir, "model.safetensors.index.json", idx);
        expect_open_fails(dir, NEMOTRON_ERR_FORMAT, "is not a plain file name", "tensor 'x.weight'",
                          paths[i]);
    }
    /* malformed index JSON */
    const struct {
        const char *text, *want;
    } bad_index[] = {
        {"{\"weight_map\":", "index JSON ends early"},
        {"{\"weight_map\":{}} x", "unexpected bytes"},
        {"[]", "index is a JSON array, not an object"},
        {"{\"metadata\":{}}", "no \"weight_map\""},
        {"{\"weight_map\":[]}", "\"weight_map\" is a JSON array, not an object"},
        {"{\"weight_map\":{}}", "\"weight_map\" lists no tensors"},
        {"{\"metadata\":3,\"weight_map\":{\"x.weight\":\"a.safetensors\"}}",
         "\"metadata\" is a JSON int"},
        {"{\"weight_map\":{\"x.weight\":7}}", "tensor 'x.weight' maps to a JSON int"},
        {"{\"weight_map\":{\"x.weight\":\"a.safetensors\\u0000/../x\"}}", "not a plain file name"},
    };
    for (size_t i = 0; i < sizeof bad_index / sizeof bad_index[0]; i++) {
        write_text(dir, "model.safetensors.index.json", bad_index[i].text);
        expect_open_fails(dir, NEMOTRON_ERR_FORMAT, bad_index[i].want,
                          "model.safetensors.index.json", bad_index[i].text);
    }
    /* a shard whose header is bad: the shard's own message, with the index as context */
    write_st(dir, "c.safetensors",
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"y.weight\":\"a.safetensors\","
               "\"w\":\"c.safetensors\"}}");
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT, "names shard 'c.safetensors'",
                      "c.safetensors: tensor 'w': shape [4] of F32 is 16 bytes but data_offsets "
                      "span 8",
                      "bad shard");
    /* two shards holding the same tensor */
    write_st(dir, "d.safetensors",
             "{\"x.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"a.safetensors\",\"y.weight\":\"a.safetensors\","
               "\"q\":\"d.safetensors\"}}");
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT, "d.safetensors: tensor 'x.weight' is also in",
                      "a.safetensors", "tensor in two shards");
    /* an index that is too big to be one (a sparse file: no disk used), and one that is a
     * directory */
    char idx_path[256];
    snprintf(idx_path, sizeof idx_path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(idx_path, "wb");
    CHECK(f && ftruncate(fileno(f), 100000001) == 0, "sparse index");
    if (f) fclose(f);
    expect_open_fails(dir, NEMOTRON_ERR_FORMAT, "100000001 bytes, over the 100000000-byte limit",
                      idx_path, "huge index");
    remove(idx_path);
    CHECK(mkdir(idx_path, 0700) == 0, "index as a directory");
    expect_open_fails(dir, NEMOTRON_ERR_IO, "model.safetensors.index.json: not a regular file",
                      NULL, "index is a directory");
    remove_tree(dir);

    /* no index: model.safetensors */
    make_dir(dir, sizeof dir, "single");
    write_st(dir, "model.safetensors", shard_a, 12);
    nt_table_init(&t);
    CHECK(nt_table_open_dir(&t, dir, &err) == NEMOTRON_OK && t.n_tensors == 2 && t.n_files == 1,
          "single file: %s", err.msg);
    nt_table_close(&t);
    remove_tree(dir);

    /* neither */
    make_dir(dir, sizeof dir, "neither");
    expect_open_fails(dir, NEMOTRON_ERR_IO, "model.safetensors.index.json nor",
                      "/neither/model.safetensors ", "empty directory");
    remove_tree(dir);
    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s/does-not-exist", tmp_root);
    expect_open_fails(nodir, NEMOTRON_ERR_IO, "neither", "does-not-exist/model.safetensors",
                      "no directory");
    free(good);
}

/* ------------------------------------------------------------------------------------------ */
/* the committed fixtures                                                                     */

static void test_fixtures(void) {
    struct nt_tensor_table t;
    struct nt_err err = {{0}};
    const char *dir = FIXTURES "/hybrid-group-f32";
    nt_table_init(&t);
    CHECK(nt_table_open_dir(&t, dir, &err) == NEMOTRON_OK, "%s: %s", dir, err.msg);
    CHECK(t.n_files == 12 && t.n_tensors == 118, "12 shards, 118 tensors: %d, %d", t.n_files,
          t.n_tensors);
    /* cross-check against the index, read independently */
    json_object *index =
        json_object_from_file(FIXTURES "/hybrid-group-f32/model.safetensors.index.json");
    json_object *map = NULL;
    CHECK(index && json_object_object_get_ex(index, "weight_map", &map), "index readable");
    int listed = 0, right = 0;
    if (map) {
        json_object_object_foreach(map, name, shard) {
            listed++;
            struct nt_tensor *x = nt_table_find(&t, name);
            const char *path = x ? t.files[x->file].path : "";
            size_t pl = strlen(path), sl = strlen(json_object_get_string(shard));
            right += x && x->dtype == NT_DTYPE_F32 && pl > sl &&
                     strcmp(path + pl - sl, json_object_get_string(shard)) == 0 &&
                     path[pl - sl - 1] == '/';
        }
    }
    CHECK(listed == 118 && right == 118, "%d of %d in the shard the index names", right, listed);
    json_object_put(index);
    struct nt_tensor *norm = nt_table_find(&t, "backbone.norm_f.weight");
    CHECK(norm && norm->ndim == 1 && norm->shape[0] == 64 && norm->nbytes == 256, "norm_f [64]");
    if (norm) {
        int finite = 1;
        for (int i = 0; i < 64; i++) {
            float v;
            memcpy(&v, (const uint8_t *)norm->data + 4 * i, 4);
            finite &= v == v && v > -1e30f && v < 1e30f;
        }
        CHECK(finite, "norm_f values are finite");
    }
    CHECK(nt_table_find(&t, "lm_head.weight") != NULL, "untied lm_head");
    nt_table_close(&t);

    const char *path = FIXTURES "/tied-bf16/model.safetensors";
    nt_table_init(&t);
    CHECK(nt_table_add_file(&t, path, &err) == NEMOTRON_OK, "%s: %s", path, err.msg);
    CHECK(t.n_files == 1 && t.n_tensors == 100, "100 tensors: %d", t.n_tensors);
    int bf16 = 0;
    for (int i = 0; i < t.n_tensors; i++) bf16 += t.tensors[i].dtype == NT_DTYPE_BF16;
    CHECK(bf16 == t.n_tensors, "all BF16");
    struct nt_tensor *emb = nt_table_find(&t, "backbone.embeddings.weight");
    if (t.n_files == 1 && emb) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | t.files[0].map[i];
        CHECK(emb->ndim == 2 && emb->shape[0] == 384 && emb->shape[1] == 64 &&
                  emb->nbytes == 384 * 64 * 2 && emb->data == t.files[0].map + 8 + n,
              "embeddings [384, 64] at the start of the data");
    } else {
        CHECK(emb, "embeddings found");
    }
    CHECK(nt_table_find(&t, "lm_head.weight") == NULL, "tied: no lm_head");
    nt_table_close(&t);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_safetensors.XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 2;
    }
    test_dtypes();
    test_valid();
    test_many();
    test_bad();
    test_files();
    test_dirs();
    test_fixtures();
    remove_tree(tmp_root);
    return test_summary("safetensors");
}
