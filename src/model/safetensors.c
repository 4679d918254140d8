/* safetensors.c - the tensor table: safetensors headers validated, files mmap-ed, names hashed.
 *
 * Owns the table's arrays (tensors, files, hash), every tensor name and file path (nt_strdup),
 * and the read-only mappings it made (owned_map). It does not own borrowed bytes, and it never
 * copies or converts tensor data: an entry points into the file where the data lies, at any
 * alignment. A header is parsed with json-c and checked completely before anything of its file
 * enters the table, so the table only ever holds files whose every tensor is in bounds, sized
 * as its shape says, disjoint from the others, and named uniquely across all files. Adding a
 * file either succeeds or leaves the table as it was; so does opening a directory.
 *
 * Container formats built on safetensors (nemo.c) add a file with nt_table_add_*, check their
 * metadata, and may then move entries out of the tensor list into the embedded files
 * (nt_table_embed) or undo the add (nt_table_truncate); this file keeps the hash consistent.
 *
 * Invariants: hash_cap is 0 or a power of two at least twice n_tensors; every tensor index
 * below n_tensors sits in exactly one hash slot, found by linear probing from its name's hash.
 * Embedded file names are unique; the embedded list is ordered by file index.
 */
#include "safetensors.h"
#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

/* The largest header accepted. The reference reader (the Rust safetensors crate) refuses
 * headers over 100 MB too; Nano's 6243 tensors take under 1 MB, so anything near the cap is
 * corrupt, and the cap bounds what a bad length field can make json-c allocate. */
#define MAX_HEADER_BYTES 100000000u
/* The index lists every tensor once (~100 bytes each); 100 MB is ~1M tensors, far past any
 * checkpoint, and keeps a wrong file named like an index from being read whole. */
#define MAX_INDEX_BYTES 100000000u
/* A valid header nests three deep (root, entry, shape), an index two (root, weight_map).
 * json-c's default of 32 would let junk nest deeper before being refused; 8 refuses it early
 * and still leaves room for an index's unexpected but harmless metadata. */
#define MAX_JSON_DEPTH 8
/* Tensors of all files together; keeps n_tensors * 2 (the hash's load bound) inside an int. */
#define MAX_TENSORS (INT_MAX / 4)
/* The smallest hash; a table with a handful of tensors should not rehash on every file. */
#define MIN_HASH_CAP 64

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
/* O_NONBLOCK: opening a FIFO given by mistake must not hang; the fstat check then refuses it.
 * It changes nothing for regular files. */
#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK)

static const struct {
    const char *name;
    size_t size;
} dtypes[NT_DTYPE_ALL_COUNT] = {
    [NT_DTYPE_F32] = {"F32", 4},         [NT_DTYPE_F16] = {"F16", 2},
    [NT_DTYPE_BF16] = {"BF16", 2},       [NT_DTYPE_F64] = {"F64", 8},
    [NT_DTYPE_I64] = {"I64", 8},         [NT_DTYPE_I32] = {"I32", 4},
    [NT_DTYPE_I16] = {"I16", 2},         [NT_DTYPE_I8] = {"I8", 1},
    [NT_DTYPE_U8] = {"U8", 1},           [NT_DTYPE_BOOL] = {"BOOL", 1},
    [NT_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [NT_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [NT_DTYPE_Q8_2F] = {"q8_2f", 0},     [NT_DTYPE_Q4TP] = {"q4tp", 0},
    [NT_DTYPE_GGML_Q8_0] = {"Q8_0", 0},  [NT_DTYPE_GGML_Q4_0] = {"Q4_0", 0},
    [NT_DTYPE_GGML_Q4_1] = {"Q4_1", 0},  [NT_DTYPE_GGML_Q5_0] = {"Q5_0", 0},
    [NT_DTYPE_GGML_Q5_1] = {"Q5_1", 0},  [NT_DTYPE_GGML_IQ4_NL] = {"IQ4_NL", 0},
    [NT_DTYPE_GGML_MXFP4] = {"MXFP4", 0}, [NT_DTYPE_GGML_Q4_K] = {"Q4_K", 0},
    [NT_DTYPE_GGML_Q5_K] = {"Q5_K", 0},  [NT_DTYPE_GGML_Q6_K] = {"Q6_K", 0},
};

const char *nt_dtype_name(enum nt_dtype d) {
    NT_ASSERT((int)d >= 0 && d < NT_DTYPE_ALL_COUNT);
    return dtypes[d].name;
}

size_t nt_dtype_size(enum nt_dtype d) {
    NT_ASSERT((int)d >= 0 && d < NT_DTYPE_ALL_COUNT);
    return dtypes[d].size;
}

/* ---------------------------------------------------------------------------------------------
 * The table: init, close, the name hash, and undoing a partial directory open.
 * ------------------------------------------------------------------------------------------- */

void nt_table_init(struct nt_tensor_table *t) { memset(t, 0, sizeof *t); }

static void close_file(struct nt_st_file *f) {
    if (f->owned_map && f->map) munmap((void *)f->map, f->size);
    nt_free(f->path);
    memset(f, 0, sizeof *f);
}

void nt_table_close(struct nt_tensor_table *t) {
    for (int i = 0; i < t->n_tensors; i++) nt_free((char *)t->tensors[i].name);
    for (int i = 0; i < t->n_embedded; i++) nt_free(t->embedded[i].name);
    for (int i = 0; i < t->n_files; i++) close_file(&t->files[i]);
    nt_free(t->tensors);
    nt_free(t->embedded);
    nt_free(t->files);
    nt_free(t->hash);
    nt_table_init(t);
}

/* FNV-1a, 64-bit: short names that differ in one digit (layers.12 / layers.13) spread well. */
static uint64_t name_hash(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* The slot holding `name`, or the empty slot where it would go. hash_cap must be nonzero. */
static int find_slot(const int *hash, int cap, const struct nt_tensor *tensors, const char *name) {
    int mask = cap - 1;
    int i = (int)(name_hash(name) & (uint64_t)mask);
    while (hash[i] >= 0 && strcmp(tensors[hash[i]].name, name) != 0) i = (i + 1) & mask;
    return i;
}

static void hash_insert(int *hash, int cap, const struct nt_tensor *tensors, int index) {
    int slot = find_slot(hash, cap, tensors, tensors[index].name);
    NT_ASSERT(hash[slot] < 0); /* names were checked unique before insertion */
    hash[slot] = index;
}

static void hash_fill(int *hash, int cap, const struct nt_tensor *tensors, int n) {
    for (int i = 0; i < cap; i++) hash[i] = -1;
    for (int i = 0; i < n; i++) hash_insert(hash, cap, tensors, i);
}

struct nt_tensor *nt_table_find(const struct nt_tensor_table *t, const char *name) {
    if (t->hash_cap == 0) return NULL;
    int slot = find_slot(t->hash, t->hash_cap, t->tensors, name);
    return t->hash[slot] >= 0 ? &t->tensors[t->hash[slot]] : NULL;
}

/* A model carries a handful of files: a linear search is all this needs. */
static const struct nt_embedded_file *find_embedded(const struct nt_tensor_table *t,
                                                    const char *name) {
    for (int i = 0; i < t->n_embedded; i++)
        if (strcmp(t->embedded[i].name, name) == 0) return &t->embedded[i];
    return NULL;
}

const uint8_t *nt_table_file(const struct nt_tensor_table *t, const char *name, size_t *len) {
    const struct nt_embedded_file *f = find_embedded(t, name);
    *len = f ? f->len : 0;
    return f ? f->data : NULL;
}

/* Drops the files from n_files on and the tensors from n_tensors on (the tail a failed
 * directory or container open added); allocates nothing, so it cannot fail. Embedded files
 * belong to a file, and a container's come after its tensors' file was added, so those of the
 * dropped files are the tail of the embedded list. */
void nt_table_truncate(struct nt_tensor_table *t, int n_files, int n_tensors) {
    NT_ASSERT(n_files >= 0 && n_files <= t->n_files && n_tensors >= 0 && n_tensors <= t->n_tensors);
    for (int i = n_tensors; i < t->n_tensors; i++) nt_free((char *)t->tensors[i].name);
    int kept = t->n_embedded;
    while (kept > 0 && t->embedded[kept - 1].file >= n_files) nt_free(t->embedded[--kept].name);
    for (int i = 0; i < kept; i++) NT_ASSERT(t->embedded[i].file < n_files);
    for (int i = n_files; i < t->n_files; i++) close_file(&t->files[i]);
    t->n_tensors = n_tensors;
    t->n_embedded = kept;
    t->n_files = n_files;
    if (t->hash_cap) hash_fill(t->hash, t->hash_cap, t->tensors, t->n_tensors);
}

/* The capacity an array of `cap` elements grows to when it must hold `need`: doubling, so that
 * adding many files stays linear. */
static int grown_cap(int cap, int need) {
    int c = cap ? cap : 8;
    while (c < need) c = c > INT_MAX / 2 ? need : c * 2;
    return c;
}

/* A new zeroed array of `cap` elements of `elem` bytes holding a copy of old[0..n); NULL when
 * out of memory (old is untouched either way). */
static void *grown_copy(const void *old, int n, int cap, size_t elem) {
    void *p = nt_calloc((size_t)cap, elem);
    if (p && n) memcpy(p, old, (size_t)n * elem);
    return p;
}

nemotron_status nt_table_embed(struct nt_tensor_table *t, int first, const char *prefix,
                               struct nt_err *err) {
    NT_ASSERT(first >= 0 && first <= t->n_tensors);
    size_t plen = strlen(prefix);
    int n_new = 0;
    for (int i = first; i < t->n_tensors; i++) {
        const struct nt_tensor *x = &t->tensors[i];
        if (strncmp(x->name, prefix, plen) != 0) continue;
        /* the tensor names are unique, so the new names are too; only older ones can clash */
        const struct nt_embedded_file *other = find_embedded(t, x->name + plen);
        if (other)
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: embedded file '%s' is also in %s",
                           t->files[x->file].path, x->name + plen, t->files[other->file].path);
        n_new++;
    }
    if (n_new == 0) return NEMOTRON_OK;

    /* everything that can fail comes first: the new names, then room in the array */
    char **names = nt_calloc((size_t)n_new, sizeof *names);
    int done = 0;
    if (!names) goto nomem;
    for (int i = first; i < t->n_tensors; i++)
        if (strncmp(t->tensors[i].name, prefix, plen) == 0) {
            if (!(names[done] = nt_strdup(t->tensors[i].name + plen))) goto nomem;
            done++;
        }
    if (t->n_embedded + n_new > t->cap_embedded) {
        int cap = grown_cap(t->cap_embedded, t->n_embedded + n_new);
        struct nt_embedded_file *p = grown_copy(t->embedded, t->n_embedded, cap, sizeof *p);
        if (!p) goto nomem;
        nt_free(t->embedded);
        t->embedded = p;
        t->cap_embedded = cap;
    }

    /* from here on nothing fails */
    int kept = first, j = 0;
    for (int i = first; i < t->n_tensors; i++) {
        struct nt_tensor *x = &t->tensors[i];
        if (strncmp(x->name, prefix, plen) != 0) {
            t->tensors[kept++] = *x;
            continue;
        }
        t->embedded[t->n_embedded++] =
            (struct nt_embedded_file){names[j++], x->data, (size_t)x->nbytes, x->file};
        nt_free((char *)x->name);
    }
    t->n_tensors = kept;
    /* fewer tensors than before: the hash keeps its load bound without growing */
    hash_fill(t->hash, t->hash_cap, t->tensors, t->n_tensors);
    nt_free(names);
    return NEMOTRON_OK;

nomem:
    for (int i = 0; i < done; i++) nt_free(names[i]);
    nt_free(names);
    return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory embedding %d files", n_new);
}

/* ---------------------------------------------------------------------------------------------
 * JSON: parsing with an explicit length, and the raw walk that sees duplicate keys.
 * ------------------------------------------------------------------------------------------- */

/* Parses text[0..len) as one JSON value followed by nothing but whitespace. Strict mode keeps
 * json-c from accepting comments and trailing commas; UTF-8 is validated because names are
 * compared byte for byte. Trailing whitespace of any JSON kind is accepted, as the reference
 * reader (serde_json) accepts it; writers pad headers with spaces. `what` names the text in
 * messages ("header", "index"). */
static nemotron_status parse_json(const char *path, const char *what, const char *text, size_t len,
                                  json_object **out, struct nt_err *err) {
    *out = NULL;
    NT_ASSERT(len <= INT_MAX);
    json_tokener *tok = json_tokener_new_ex(MAX_JSON_DEPTH);
    if (!tok)
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory parsing the %s", path, what);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    if (jerr == json_tokener_continue) {
        /* All of text was taken and a value may still be open. json-c cannot tell a complete
         * number or literal from a cut one until it sees the end, so give it a NUL: a bare
         * "null" or "12" then parses (and is refused below as not an object), and anything
         * still open is cut short. */
        root = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
        if (jerr == json_tokener_success)
            end = len;
        else
            jerr = json_tokener_continue;
    }
    json_tokener_free(tok);
    if (jerr == json_tokener_continue) {
        json_object_put(root);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s JSON ends early (%zu bytes, incomplete)",
                       path, what, len);
    }
    if (jerr != json_tokener_success) {
        json_object_put(root);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s JSON: %s at byte %zu", path, what,
                       json_tokener_error_desc(jerr), end);
    }
    /* json-c has eaten the whitespace after the value; what is left is garbage */
    if (end < len) {
        json_object_put(root);
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: %s: unexpected bytes after the JSON value, at byte %zu of %zu", path,
                       what, end, len);
    }
    if (!json_object_is_type(root, json_type_object)) {
        const char *type = json_type_to_name(json_object_get_type(root));
        json_object_put(root);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s is a JSON %s, not an object", path, what,
                       type);
    }
    *out = root;
    return NEMOTRON_OK;
}

/* A member name of the top-level object as it stands in the text, quotes included. */
struct raw_key {
    size_t at, len;
    int has_nul; /* contains the escape \u0000 */
};

/* Walks the members of the top-level object in text[0..len), which json-c has accepted, and
 * returns how many there are, storing the first `cap` in keys and the first with an escaped
 * NUL in *nul_key (has_nul stays 0 if none). json-c keeps only the last of duplicate keys and
 * cuts a key at an escaped NUL, so the parsed object hides both; this walk sees them. It
 * follows json-c's strict grammar, which takes strings in double or single quotes, a backslash
 * escaping the next character; nothing else in JSON contains quotes or brackets. */
static size_t scan_top_keys(const char *s, size_t len, struct raw_key *keys, size_t cap,
                            struct raw_key *nul_key) {
    size_t n = 0;
    int depth = 0, expect_key = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '"' || c == '\'') {
            struct raw_key k = {i, 0, 0};
            for (i++; i < len && s[i] != c; i++) {
                if (s[i] != '\\' || i + 1 >= len) continue;
                if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0)
                    k.has_nul = 1;
                i++;
            }
            k.len = (i < len ? i + 1 : len) - k.at;
            if (depth == 1 && expect_key) {
                if (keys && n < cap) keys[n] = k;
                if (nul_key && k.has_nul && !nul_key->has_nul) *nul_key = k;
                n++;
                expect_key = 0;
            }
        } else if (c == '{' || c == '[') {
            depth++;
            if (depth == 1 && c == '{') expect_key = 1;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) break;
        } else if (c == ',' && depth == 1) {
            expect_key = 1;
        }
    }
    return n;
}

/* The values of the top-level object's members in text[0..len) (json-c has accepted it), in
 * order: vals[i] is member i's value's text when it is an object ({ to its }), else len 0.
 * Returns the number of members; stores the first `cap`. The same grammar as scan_top_keys. */
static size_t scan_member_objects(const char *s, size_t len, struct raw_key *vals, size_t cap) {
    size_t n = 0, open_at = 0;
    int depth = 0, value_next = 0, in_object = 0; /* a member's value starts next / is open */
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '"' || c == '\'') {
            for (i++; i < len && s[i] != c; i++)
                if (s[i] == '\\' && i + 1 < len) i++;
            value_next = 0;
        } else if (c == ':' && depth == 1) {
            if (n < cap) vals[n].at = vals[n].len = 0;
            n++;
            value_next = 1;
        } else if (c == '{' || c == '[') {
            if (depth == 1 && value_next && c == '{') in_object = 1, open_at = i;
            value_next = 0;
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) break;
            if (depth == 1 && in_object) {
                if (n <= cap) vals[n - 1].at = open_at, vals[n - 1].len = i + 1 - open_at;
                in_object = 0;
            }
        } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            value_next = 0; /* a number or a literal */
        }
    }
    return n;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The error for a header whose text has more top-level keys than json-c kept: decodes every
 * key literal, sorts, and names the first one that appears twice. Only runs on bad input. */
static nemotron_status report_duplicate_key(const char *path, const char *what, const char *text,
                                            size_t len, size_t n_raw, size_t n_kept,
                                            struct nt_err *err) {
    struct raw_key *keys = nt_calloc(n_raw, sizeof *keys);
    json_object **decoded = nt_calloc(n_raw, sizeof *decoded);
    const char **names = nt_calloc(n_raw, sizeof *names);
    nemotron_status st =
        nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s has %zu keys but only %zu distinct ones",
                path, what, n_raw, n_kept);
    if (!keys || !decoded || !names) goto done;
    scan_top_keys(text, len, keys, n_raw, NULL);
    size_t n = 0;
    for (size_t i = 0; i < n_raw; i++) {
        json_tokener *tok = json_tokener_new_ex(MAX_JSON_DEPTH);
        if (!tok) goto done;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        decoded[i] = json_tokener_parse_ex(tok, text + keys[i].at, (int)keys[i].len);
        json_tokener_free(tok);
        if (json_object_is_type(decoded[i], json_type_string))
            names[n++] = json_object_get_string(decoded[i]);
    }
    qsort(names, n, sizeof *names, compare_strings);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s: key '%s' appears more than once", path,
                    what, names[i]);
            break;
        }
    }
done:
    for (size_t i = 0; decoded && i < n_raw; i++) json_object_put(decoded[i]);
    nt_free(keys);
    nt_free(decoded);
    nt_free(names);
    return st;
}

/* parse_json, then the checks json-c cannot make itself: no top-level key containing an
 * escaped NUL (names are C strings), none twice; and no key twice inside a member whose value is
 * an object (a tensor's entry: json-c keeps the last "dtype" of two, another reader the first). */
static nemotron_status parse_unique_object(const char *path, const char *what, const char *text,
                                           size_t len, json_object **out, struct nt_err *err) {
    json_object *root;
    nemotron_status st = parse_json(path, what, text, len, &root, err);
    if (st) return st;
    size_t n_keys = (size_t)json_object_object_length(root);
    struct raw_key nul_key = {0, 0, 0};
    size_t n_raw = scan_top_keys(text, len, NULL, 0, &nul_key);
    if (nul_key.has_nul)
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s: key %.*s contains a NUL character", path,
                     what, (int)(nul_key.len > 200 ? 200 : nul_key.len), text + nul_key.at);
    else if (n_raw != n_keys)
        st = report_duplicate_key(path, what, text, len, n_raw, n_keys, err);
    struct raw_key *vals = st ? NULL : nt_calloc(n_raw ? n_raw : 1, sizeof *vals);
    if (!st && !vals) st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory checking the %s", path, what);
    if (!st && scan_member_objects(text, len, vals, n_raw) == n_raw) {
        size_t i = 0;
        struct json_object_iterator it = json_object_iter_begin(root), end = json_object_iter_end(root);
        for (; !st && !json_object_iter_equal(&it, &end); json_object_iter_next(&it), i++) {
            json_object *v = json_object_iter_peek_value(&it);
            if (!vals[i].len || !json_object_is_type(v, json_type_object)) continue;
            size_t inner = scan_top_keys(text + vals[i].at, vals[i].len, NULL, 0, NULL);
            if (inner == (size_t)json_object_object_length(v)) continue;
            char member[300];
            snprintf(member, sizeof member, "%s: '%s'", what, json_object_iter_peek_name(&it));
            st = report_duplicate_key(path, member, text + vals[i].at, vals[i].len, inner,
                                      (size_t)json_object_object_length(v), err);
        }
    }
    nt_free(vals);
    if (st) {
        json_object_put(root);
        return st;
    }
    *out = root;
    return NEMOTRON_OK;
}

nemotron_status nt_json_parse_object(const char *path, const char *what, const char *text,
                                     size_t len, struct json_object **out, struct nt_err *err) {
    *out = NULL;
    if (len > INT_MAX) /* json-c takes an int length */
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %s is %zu bytes, too large to parse", path,
                       what, len);
    return parse_unique_object(path, what, text, len, out, err);
}

/* Reads a JSON integer that must be >= 0 into *out; returns 0 when it is not an integer, is
 * negative or is too large, with *why saying which. json-c clamps numbers out of range to the
 * int64 / uint64 limits, so anything above INT64_MAX is refused as too large. */
static int get_count(json_object *v, uint64_t *out, const char **why) {
    if (!json_object_is_type(v, json_type_int)) {
        *why = "not an integer";
        return 0;
    }
    if (json_object_get_int64(v) < 0) {
        *why = "negative";
        return 0;
    }
    uint64_t u = json_object_get_uint64(v);
    if (u > (uint64_t)INT64_MAX) {
        *why = "too large";
        return 0;
    }
    *out = u;
    return 1;
}

/* "[64, 3]" */
static const char *format_shape(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return buf;
}

/* ---------------------------------------------------------------------------------------------
 * One safetensors file: the header's entries, their spans, and adding them to the table.
 * ------------------------------------------------------------------------------------------- */

/* A tensor's byte span, relative to the start of the data section. */
struct span {
    uint64_t begin, end;
    int index; /* into the file's new tensors */
};

static int compare_spans(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Validates one entry {"dtype", "shape", "data_offsets"} and fills *out (all but data, name
 * and file) and *sp. data_size is the length of the data section. */
static nemotron_status parse_entry(const char *path, const char *name, json_object *entry,
                                   uint64_t data_size, struct nt_tensor *out, struct span *sp,
                                   struct nt_err *err) {
    if (!json_object_is_type(entry, json_type_object))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': entry is a JSON %s, not an object", path, name,
                       json_type_to_name(json_object_get_type(entry)));
    json_object *dtype, *shape, *offsets;

    if (!json_object_object_get_ex(entry, "dtype", &dtype))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor '%s': no \"dtype\"", path, name);
    if (!json_object_is_type(dtype, json_type_string))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': \"dtype\" is a JSON %s, not a string", path, name,
                       json_type_to_name(json_object_get_type(dtype)));
    const char *dname = json_object_get_string(dtype);
    size_t dlen = (size_t)json_object_get_string_len(dtype); /* strlen would stop at a NUL */
    int d = 0;
    while (d < NT_DTYPE_COUNT &&
           !(strlen(dtypes[d].name) == dlen && memcmp(dtypes[d].name, dname, dlen) == 0))
        d++;
    if (d == NT_DTYPE_COUNT)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': unknown dtype \"%s\" (expected F32, F16, BF16, F64, I64, "
                       "I32, I16, I8, U8, BOOL, F8_E4M3 or F8_E5M2)",
                       path, name, dname);
    out->dtype = (enum nt_dtype)d;

    if (!json_object_object_get_ex(entry, "shape", &shape))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor '%s': no \"shape\"", path, name);
    if (!json_object_is_type(shape, json_type_array))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': \"shape\" is a JSON %s, not an array", path, name,
                       json_type_to_name(json_object_get_type(shape)));
    size_t ndim = json_object_array_length(shape);
    if (ndim > NT_MAX_DIMS)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': shape has %zu dimensions, more than the %d supported",
                       path, name, ndim, NT_MAX_DIMS);
    out->ndim = (int)ndim;
    uint64_t nbytes = dtypes[d].size;
    int overflow = 0;
    for (size_t i = 0; i < ndim; i++) {
        uint64_t dim;
        const char *why;
        json_object *v = json_object_array_get_idx(shape, i);
        if (!get_count(v, &dim, &why))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor '%s': shape[%zu] is %s (%s); dimensions are integers >= 0",
                           path, name, i, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
                           why);
        out->shape[i] = (int64_t)dim;
        if (!nt_mul_ok(nbytes, dim, &nbytes)) overflow = 1;
    }
    char sbuf[256];
    if (overflow)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': shape %s of %s overflows a 64-bit byte count", path, name,
                       format_shape(sbuf, sizeof sbuf, out->shape, out->ndim), dtypes[d].name);
    out->nbytes = nbytes;

    if (!json_object_object_get_ex(entry, "data_offsets", &offsets))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor '%s': no \"data_offsets\"", path,
                       name);
    if (!json_object_is_type(offsets, json_type_array) || json_object_array_length(offsets) != 2)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': \"data_offsets\" is %s, not an array [begin, end]", path,
                       name, json_object_to_json_string_ext(offsets, JSON_C_TO_STRING_PLAIN));
    for (int i = 0; i < 2; i++) {
        const char *why;
        json_object *v = json_object_array_get_idx(offsets, (size_t)i);
        if (!get_count(v, i ? &sp->end : &sp->begin, &why))
            return nt_fail(
                err, NEMOTRON_ERR_FORMAT,
                "%s: tensor '%s': data_offsets[%d] is %s (%s); offsets are integers >= 0", path,
                name, i, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN), why);
    }
    if (sp->begin > sp->end)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] begin after they end", path,
                       name, (unsigned long long)sp->begin, (unsigned long long)sp->end);
    if (sp->end - sp->begin != nbytes)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': shape %s of %s is %llu bytes but data_offsets span %llu",
                       path, name, format_shape(sbuf, sizeof sbuf, out->shape, out->ndim),
                       dtypes[d].name, (unsigned long long)nbytes,
                       (unsigned long long)(sp->end - sp->begin));
    if (sp->end > data_size)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets end at byte %llu of the data section, which "
                       "holds %llu bytes: file truncated, %llu byte%s missing",
                       path, name, (unsigned long long)sp->end, (unsigned long long)data_size,
                       (unsigned long long)(sp->end - data_size),
                       sp->end - data_size == 1 ? "" : "s");
    return NEMOTRON_OK;
}

/* __metadata__: an object of strings, otherwise unused. */
static nemotron_status check_metadata(const char *path, json_object *meta, struct nt_err *err) {
    if (!json_object_is_type(meta, json_type_object))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: __metadata__ is a JSON %s, not an object",
                       path, json_type_to_name(json_object_get_type(meta)));
    struct json_object_iterator it = json_object_iter_begin(meta), end = json_object_iter_end(meta);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        json_object *v = json_object_iter_peek_value(&it);
        if (!json_object_is_type(v, json_type_string))
            return nt_fail(
                err, NEMOTRON_ERR_FORMAT, "%s: __metadata__ key '%s' is a JSON %s, not a string",
                path, json_object_iter_peek_name(&it), json_type_to_name(json_object_get_type(v)));
    }
    return NEMOTRON_OK;
}

/* Appends the validated tensors of one file. Everything that can fail (allocation) happens
 * before the table changes, so a failure leaves it as it was. */
static nemotron_status commit_file(struct nt_tensor_table *t, const char *path,
                                   const uint8_t *bytes, size_t size, int owned_map,
                                   struct nt_tensor *fresh, int n_fresh, struct nt_err *err) {
    int total = t->n_tensors + n_fresh;
    char *path_copy = nt_strdup(path);
    int names_done = 0;
    int *new_hash = NULL, new_cap = t->hash_cap;
    if (!path_copy) goto nomem;
    for (; names_done < n_fresh; names_done++) {
        char *copy = nt_strdup(fresh[names_done].name);
        if (!copy) goto nomem;
        fresh[names_done].name = copy;
    }
    /* a grown array keeps its contents: the table is still as it was if a later step fails */
    if (total > t->cap_tensors) {
        int cap = grown_cap(t->cap_tensors, total);
        struct nt_tensor *p = grown_copy(t->tensors, t->n_tensors, cap, sizeof *p);
        if (!p) goto nomem;
        nt_free(t->tensors);
        t->tensors = p;
        t->cap_tensors = cap;
    }
    if (t->n_files + 1 > t->cap_files) {
        int cap = grown_cap(t->cap_files, t->n_files + 1);
        struct nt_st_file *p = grown_copy(t->files, t->n_files, cap, sizeof *p);
        if (!p) goto nomem;
        nt_free(t->files);
        t->files = p;
        t->cap_files = cap;
    }
    if (new_cap < MIN_HASH_CAP || new_cap < 2 * total) {
        if (new_cap < MIN_HASH_CAP) new_cap = MIN_HASH_CAP;
        while (new_cap < 2 * total) new_cap *= 2;
        new_hash = nt_calloc((size_t)new_cap, sizeof *new_hash);
        if (!new_hash) goto nomem;
    }

    /* from here on nothing fails */
    int file = t->n_files++;
    t->files[file] = (struct nt_st_file){path_copy, bytes, size, owned_map};
    for (int i = 0; i < n_fresh; i++) {
        fresh[i].file = file;
        t->tensors[t->n_tensors + i] = fresh[i];
    }
    t->n_tensors = total;
    if (new_hash) {
        nt_free(t->hash);
        t->hash = new_hash;
        t->hash_cap = new_cap;
        hash_fill(t->hash, t->hash_cap, t->tensors, t->n_tensors);
    } else {
        for (int i = total - n_fresh; i < total; i++)
            hash_insert(t->hash, t->hash_cap, t->tensors, i);
    }
    return NEMOTRON_OK;

nomem:
    for (int i = 0; i < names_done; i++) nt_free((char *)fresh[i].name);
    nt_free(path_copy);
    return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory adding %d tensors", path, n_fresh);
}

nemotron_status nt_table_add_views(struct nt_tensor_table *t, const char *path,
                                   const struct nt_tensor *views, int n, struct nt_err *err) {
    struct nt_tensor *fresh = nt_calloc(n ? (size_t)n : 1, sizeof *fresh);
    if (!fresh) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory adding %d tensors", path, n);
    memcpy(fresh, views, (size_t)n * sizeof *fresh);
    nemotron_status st = commit_file(t, path, NULL, 0, 0, fresh, n, err);
    nt_free(fresh);
    return st;
}

nemotron_status nt_table_add_bytes(struct nt_tensor_table *t, const char *path,
                                   const uint8_t *bytes, size_t size, int owned_map,
                                   struct nt_err *err) {
    NT_ASSERT(t && path && (bytes || size == 0));
    if (size < 8)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: file is %zu bytes, shorter than the 8-byte header length", path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | bytes[i]; /* little-endian u64 */
    if (n > MAX_HEADER_BYTES)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: header length %llu is over the %u-byte limit (not a safetensors file?)",
                       path, (unsigned long long)n, MAX_HEADER_BYTES);
    if (n > size - 8)
        return nt_fail(
            err, NEMOTRON_ERR_FORMAT,
            "%s: header length %llu but only %zu bytes follow the length: file truncated, "
            "%llu byte%s missing",
            path, (unsigned long long)n, size - 8, (unsigned long long)(n - (size - 8)),
            n - (size - 8) == 1 ? "" : "s");
    const char *text = (const char *)bytes + 8;
    const uint8_t *data = bytes + 8 + n;
    uint64_t data_size = size - 8 - n;

    json_object *root;
    nemotron_status st = parse_unique_object(path, "header", text, (size_t)n, &root, err);
    if (st) return st;

    struct nt_tensor *fresh = NULL;
    struct span *spans = NULL;
    size_t n_keys = (size_t)json_object_object_length(root);

    json_object *meta = NULL;
    int has_meta = json_object_object_get_ex(root, "__metadata__", &meta);
    if (has_meta && (st = check_metadata(path, meta, err))) goto done;
    size_t n_fresh = n_keys - (has_meta ? 1 : 0);
    if (n_fresh > (size_t)(MAX_TENSORS - t->n_tensors)) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %zu tensors, more than the table can hold",
                     path, n_fresh);
        goto done;
    }
    fresh = nt_calloc(n_fresh ? n_fresh : 1, sizeof *fresh);
    spans = nt_calloc(n_fresh ? n_fresh : 1, sizeof *spans);
    if (!fresh || !spans) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %zu tensors", path, n_fresh);
        goto done;
    }

    int k = 0;
    struct json_object_iterator it = json_object_iter_begin(root), end = json_object_iter_end(root);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        const char *name = json_object_iter_peek_name(&it);
        if (strcmp(name, "__metadata__") == 0) continue;
        NT_ASSERT((size_t)k < n_fresh);
        if ((st = parse_entry(path, name, json_object_iter_peek_value(&it), data_size, &fresh[k],
                              &spans[k], err)))
            goto done;
        const struct nt_tensor *other = nt_table_find(t, name);
        if (other) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor '%s' is also in %s", path, name,
                         t->files[other->file].path);
            goto done;
        }
        fresh[k].name = name; /* json-c's copy; commit_file duplicates it */
        fresh[k].data = data + spans[k].begin;
        spans[k].index = k;
        k++;
    }
    NT_ASSERT((size_t)k == n_fresh);

    /* Spans sorted by begin: each non-empty span must start at or after the previous non-empty
     * one ends. An empty span [b, b) holds no byte and overlaps nothing. */
    qsort(spans, n_fresh, sizeof *spans, compare_spans);
    const struct span *prev = NULL;
    for (size_t i = 0; i < n_fresh; i++) {
        const struct span *s = &spans[i];
        if (s->begin == s->end) continue;
        if (prev && s->begin < prev->end) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensor '%s' (data_offsets [%llu, %llu]) overlaps tensor '%s' "
                         "(data_offsets [%llu, %llu])",
                         path, fresh[s->index].name, (unsigned long long)s->begin,
                         (unsigned long long)s->end, fresh[prev->index].name,
                         (unsigned long long)prev->begin, (unsigned long long)prev->end);
            goto done;
        }
        prev = s;
    }
    /* No holes (the format's rule, which the reference writer keeps): the tensors fill the data
     * section exactly. A hole is what a header length one byte short looks like - the JSON still
     * parses (its padding is spaces) and every tensor would be read one byte early - so it is
     * an error, not a gap to skip. (The same words as the .nemo reader's tiling check, which
     * reads its header through here.) */
    uint64_t at = 0;
    for (size_t i = 0; i < n_fresh; i++) {
        const struct span *s = &spans[i];
        if (s->begin == s->end) continue;
        if (s->begin > at) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: the data section has a hole: bytes [%llu, %llu) before tensor '%s' "
                         "belong to no tensor",
                         path, (unsigned long long)at, (unsigned long long)s->begin, fresh[s->index].name);
            goto done;
        }
        at = s->end;
    }
    if (at != data_size) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                     "%s: the data section holds %llu bytes, the entries end at %llu: the last "
                     "%llu bytes belong to no tensor",
                     path, (unsigned long long)data_size, (unsigned long long)at,
                     (unsigned long long)(data_size - at));
        goto done;
    }

    st = commit_file(t, path, bytes, size, owned_map, fresh, (int)n_fresh, err);

done:
    nt_free(fresh);
    nt_free(spans);
    json_object_put(root);
    return st;
}

nemotron_status nt_table_add_file(struct nt_tensor_table *t, const char *path, struct nt_err *err) {
    void *map;
    size_t size;
    nemotron_status st = nt_map_file(path, 8, "the 8-byte header length", &map, &size, err);
    if (st) return st;
    st = nt_table_add_bytes(t, path, map, size, 1, err);
    if (st) munmap(map, size);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * A model directory: the sharded index, or one model.safetensors.
 * ------------------------------------------------------------------------------------------- */

static char *join_path(const char *dir, const char *name) {
    size_t dl = strlen(dir), nl = strlen(name);
    int slash = dl > 0 && dir[dl - 1] == '/';
    char *p = nt_alloc(dl + nl + 2);
    if (p) snprintf(p, dl + nl + 2, "%s%s%s", dl ? dir : ".", slash ? "" : "/", name);
    return p;
}

/* Reads a whole (small) file into *out (NUL-terminated; *len excludes the NUL). A file that
 * does not exist is not an error: *out stays NULL, so the caller can fall back. */
static nemotron_status read_small_file(const char *path, size_t cap, char **out, size_t *len,
                                       struct nt_err *err) {
    *out = NULL;
    int fd = open(path, OPEN_FLAGS);
    if (fd < 0 && errno == ENOENT) return NEMOTRON_OK;
    if (fd < 0) return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    nemotron_status st = NEMOTRON_OK;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        st = nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = nt_fail(err, NEMOTRON_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)sb.st_size > cap) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %lld bytes, over the %zu-byte limit", path,
                     (long long)sb.st_size, cap);
        goto done;
    }
    size_t size = (size_t)sb.st_size, got = 0;
    buf = nt_alloc(size + 1);
    if (!buf) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
        goto done;
    }
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = nt_fail(err, NEMOTRON_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto done;
        }
        if (r == 0) {
            st = nt_fail(err, NEMOTRON_ERR_IO,
                         "%s: file shrank while being read (%zu of %zu bytes)", path, got, size);
            goto done;
        }
        got += (size_t)r;
    }
    buf[size] = 0;
    *out = buf;
    *len = size;
    buf = NULL;
done:
    nt_free(buf);
    close(fd);
    return st;
}

/* One weight_map entry. */
struct index_entry {
    const char *tensor, *shard; /* json-c's strings, alive while the index object is */
    int shard_no;               /* position of the shard among the distinct ones, sorted */
};

static int compare_entries(const void *a, const void *b) {
    const struct index_entry *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : strcmp(x->tensor, y->tensor);
}

/* Opens the shards the index names, in sorted order, and cross-checks index and shards. On
 * failure the shards added so far are dropped again. */
static nemotron_status open_index(struct nt_tensor_table *t, const char *dir,
                                  const char *index_path, const char *text, size_t len,
                                  struct nt_err *err) {
    json_object *root;
    nemotron_status st = parse_json(index_path, "index", text, len, &root, err);
    if (st) return st;
    struct index_entry *entries = NULL;
    const char **shards = NULL;
    int base_files = t->n_files, base_tensors = t->n_tensors;

    json_object *meta, *map;
    if (json_object_object_get_ex(root, "metadata", &meta) && meta &&
        !json_object_is_type(meta, json_type_object)) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: \"metadata\" is a JSON %s, not an object",
                     index_path, json_type_to_name(json_object_get_type(meta)));
        goto done;
    }
    if (!json_object_object_get_ex(root, "weight_map", &map)) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: no \"weight_map\"", index_path);
        goto done;
    }
    if (!json_object_is_type(map, json_type_object)) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: \"weight_map\" is a JSON %s, not an object",
                     index_path, json_type_to_name(json_object_get_type(map)));
        goto done;
    }
    size_t n = (size_t)json_object_object_length(map);
    if (n == 0) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: \"weight_map\" lists no tensors", index_path);
        goto done;
    }
    entries = nt_calloc(n, sizeof *entries);
    shards = nt_calloc(n, sizeof *shards);
    if (!entries || !shards) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %zu entries", index_path, n);
        goto done;
    }
    size_t k = 0;
    struct json_object_iterator it = json_object_iter_begin(map), end = json_object_iter_end(map);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it), k++) {
        const char *name = json_object_iter_peek_name(&it);
        json_object *v = json_object_iter_peek_value(&it);
        if (!json_object_is_type(v, json_type_string)) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: weight_map: tensor '%s' maps to a JSON %s, not a shard file name",
                         index_path, name, json_type_to_name(json_object_get_type(v)));
            goto done;
        }
        const char *shard = json_object_get_string(v);
        /* A shard is a file of the model directory: a plain name, never a path out of it. */
        if ((size_t)json_object_get_string_len(v) != strlen(shard) || !shard[0] ||
            strchr(shard, '/') || strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: weight_map: tensor '%s': shard \"%s\" is not a plain file name",
                         index_path, name, shard);
            goto done;
        }
        entries[k] = (struct index_entry){name, shard, 0};
    }
    qsort(entries, n, sizeof *entries, compare_entries);
    int n_shards = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(entries[i].shard, entries[i - 1].shard) != 0)
            shards[n_shards++] = entries[i].shard;
        entries[i].shard_no = n_shards - 1;
    }

    for (int s = 0; s < n_shards; s++) {
        char *path = join_path(dir, shards[s]);
        if (!path) {
            st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", index_path);
            goto done;
        }
        st = nt_table_add_file(t, path, err);
        nt_free(path);
        if (st) {
            nt_err_prefix(err, "%s names shard '%s': ", index_path, shards[s]);
            goto done;
        }
    }

    /* every listed tensor is in the shard the index names... */
    for (size_t i = 0; i < n; i++) {
        const struct nt_tensor *x = nt_table_find(t, entries[i].tensor);
        int want = base_files + entries[i].shard_no;
        if (x && x->file == want) continue;
        if (x && x->file >= base_files)
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensor '%s' is listed in shard '%s' but is in shard '%s'", index_path,
                         entries[i].tensor, entries[i].shard, shards[x->file - base_files]);
        else
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensor '%s' is listed in shard '%s', which does not hold it",
                         index_path, entries[i].tensor, entries[i].shard);
        goto done;
    }
    /* ...and every tensor of the shards is listed (with the right shard, by the loop above) */
    for (int i = base_tensors; i < t->n_tensors; i++) {
        if (json_object_object_get_ex(map, t->tensors[i].name, NULL)) continue;
        st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                     "%s: shard '%s' holds tensor '%s', which the index does not list", index_path,
                     shards[t->tensors[i].file - base_files], t->tensors[i].name);
        goto done;
    }

done:
    if (st) nt_table_truncate(t, base_files, base_tensors);
    nt_free(entries);
    nt_free(shards);
    json_object_put(root);
    return st;
}

nemotron_status nt_table_open_dir(struct nt_tensor_table *t, const char *dir, struct nt_err *err) {
    char *index_path = join_path(dir, INDEX_NAME), *single_path = join_path(dir, SINGLE_NAME);
    char *text = NULL;
    size_t len = 0;
    nemotron_status st;
    if (!index_path || !single_path) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    st = read_small_file(index_path, MAX_INDEX_BYTES, &text, &len, err);
    if (st == NEMOTRON_OK && text) {
        st = open_index(t, dir, index_path, text, len, err);
    } else if (st == NEMOTRON_OK) {
        struct stat sb;
        if (stat(single_path, &sb) != 0 && errno == ENOENT)
            st = nt_fail(err, NEMOTRON_ERR_IO, "%s: no checkpoint: neither %s nor %s exists", dir,
                         index_path, single_path);
        else
            st = nt_table_add_file(t, single_path, err);
    }
done:
    nt_free(text);
    nt_free(index_path);
    nt_free(single_path);
    return st;
}
