/* nemo.c - the .nemo container: a streaming writer, and a reader that trusts nothing unchecked.
 *
 * The writer owns its header text, the embedded files' copies and the partial file; it never
 * holds tensor data beyond one small write buffer. Its invariant: nothing exists at the final
 * path until commit renames a complete, checksummed, fsynced file there; the partial file is
 * removed by free unless that rename happened.
 *
 * The reader adds the file with the safetensors code (safetensors.c validates the header:
 * JSON, dtypes, spans in bounds and disjoint, unique names), then checks the nemotron metadata
 * against it entry by entry, then every CRC-32 (zlib), in parallel pieces combined with
 * crc32_combine. Only then are the payload entries retyped (U8 -> q8_2f / q4tp / a ggml block
 * type, [bytes] -> [rows, cols]) and the embedded files moved out of the tensor list. A failure anywhere
 * removes the file from the table again, so callers never see a half-checked file.
 */
#include "nemo.h"
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <zlib.h>

#include "../quant/ggml_blocks.h"
#include "../quant/quant.h"

/* The safetensors reader refuses headers over 100 MB (safetensors.c); the writer refuses to
 * write one. Nano's ~6200 entries take ~1.5 MB. */
#define MAX_HEADER_BYTES 100000000u
/* The data section starts at a multiple of this (the header is padded with spaces): 64 bytes
 * is a cache line and a multiple of the 8 the safetensors convention asks for. */
#define DATA_ALIGN 64
/* Write buffer of the writer: small appends (a row at a time) become few system calls; an
 * append at least this large goes straight to the file. */
#define WRITE_BUF_BYTES ((size_t)1 << 20)
/* Checksums are computed in pieces of this size, in parallel, then combined: small enough to
 * spread one large tensor over every thread, large enough that combining costs nothing. */
#define CRC_PIECE_BYTES ((uint64_t)16 << 20)
/* An append of at least this many bytes has its checksum computed on several threads. */
#define CRC_PARALLEL_BYTES ((size_t)8 << 20)

/* The formats an entry may have; KIND_FILE marks an embedded file. llama.cpp's block types
 * are tagged "ggml." + ggml's own name, so that no tag of theirs can be read as a safetensors
 * dtype or an engine format of the same spelling (docs/NEMO.md). */
#define KIND_FILE ((int)NT_DTYPE_ALL_COUNT)

static const struct {
    const char *tag;
    int kind;
} kinds[] = {
    {"q4tp", NT_DTYPE_Q4TP},
    {"q8_2f", NT_DTYPE_Q8_2F},
    {"F32", NT_DTYPE_F32},
    {"BF16", NT_DTYPE_BF16},
    {"F16", NT_DTYPE_F16},
    {"ggml.Q8_0", NT_DTYPE_GGML_Q8_0},
    {"ggml.Q4_0", NT_DTYPE_GGML_Q4_0},
    {"ggml.Q4_1", NT_DTYPE_GGML_Q4_1},
    {"ggml.Q5_0", NT_DTYPE_GGML_Q5_0},
    {"ggml.Q5_1", NT_DTYPE_GGML_Q5_1},
    {"ggml.IQ4_NL", NT_DTYPE_GGML_IQ4_NL},
    {"ggml.MXFP4", NT_DTYPE_GGML_MXFP4},
    {"ggml.Q4_K", NT_DTYPE_GGML_Q4_K},
    {"ggml.Q5_K", NT_DTYPE_GGML_Q5_K},
    {"ggml.Q6_K", NT_DTYPE_GGML_Q6_K},
    {"file", KIND_FILE},
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))
/* The tags, listed in messages. */
#define KIND_TAGS                                                                                  \
    "q4tp, q8_2f, F32, BF16, F16, ggml.Q8_0, ggml.Q4_0, ggml.Q4_1, ggml.Q5_0, ggml.Q5_1, "       \
    "ggml.IQ4_NL, ggml.MXFP4, ggml.Q4_K, ggml.Q5_K, ggml.Q6_K or file"

static const char *kind_tag(int kind) {
    for (int i = 0; i < N_KINDS; i++)
        if (kinds[i].kind == kind) return kinds[i].tag;
    NT_ASSERT(!"kind_tag: not a .nemo format");
    return NULL;
}

/* A matrix stored as a U8 payload of nt_matrix_bytes bytes with a logical [rows, cols]: the
 * engine's packed formats and llama.cpp's block types (the GGUF tensor's bytes as they were). */
static int is_packed(int kind) {
    return kind == NT_DTYPE_Q8_2F || kind == NT_DTYPE_Q4TP ||
        (kind != KIND_FILE && nt_dtype_is_ggml_block((enum nt_dtype)kind));
}

/* ---------------------------------------------------------------------------------------------
 * Shared checks: UTF-8, names, checksums.
 * ------------------------------------------------------------------------------------------- */

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int valid_utf8(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1Fu, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0Fu, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07u, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* An embedded file's name: what a directory of the model could hold. NULL when fine, else
 * what is wrong. */
static const char *bad_file_name(const char *name) {
    if (!name[0]) return "is empty";
    if (!strcmp(name, ".") || !strcmp(name, "..")) return "is not a file name";
    for (const char *p = name; *p; p++) {
        if (*p == '/') return "contains '/'";
        if ((unsigned char)*p < 0x20) return "contains a control character";
    }
    if (!valid_utf8(name, strlen(name))) return "is not valid UTF-8";
    return NULL;
}

static int has_file_prefix(const char *name) {
    return strncmp(name, NT_NEMO_FILE_PREFIX, strlen(NT_NEMO_FILE_PREFIX)) == 0;
}

static int resolve_threads(int n) { return n > 0 ? n : omp_get_num_procs(); }

/* CRC-32 of p[0..n) continued from crc, on up to `threads` threads: pieces computed from 0 in
 * parallel, folded in order with crc32_combine (the CRC of a concatenation). */
static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n, int threads) {
    if (n < CRC_PARALLEL_BYTES || threads <= 1) return (uint32_t)crc32_z(crc, p, n);
    enum { MAX_SPLIT = 256 }; /* pieces of one call; far more than any machine's threads */
    uint32_t part[MAX_SPLIT];
    int k = threads < MAX_SPLIT ? threads : MAX_SPLIT;
    size_t step = (n + (size_t)k - 1) / (size_t)k;
#pragma omp parallel for num_threads(k) schedule(static)
    for (int i = 0; i < k; i++) {
        size_t a = (size_t)i * step, b = a + step < n ? a + step : n;
        part[i] = a < b ? (uint32_t)crc32_z(0, p + a, b - a) : 0;
    }
    for (int i = 0; i < k; i++) {
        size_t a = (size_t)i * step, b = a + step < n ? a + step : n;
        if (a < b) crc = (uint32_t)crc32_combine(crc, part[i], (z_off_t)(b - a));
    }
    return crc;
}

/* ---------------------------------------------------------------------------------------------
 * A growing string, for the header.
 * ------------------------------------------------------------------------------------------- */

struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_reserve(struct sbuf *b, size_t more) {
    if (b->oom) return;
    if (more > SIZE_MAX / 2 - b->n) {
        b->oom = 1;
        return;
    }
    if (b->n + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    char *p = nt_alloc(cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    if (b->n) memcpy(p, b->p, b->n);
    nt_free(b->p);
    b->p = p;
    b->cap = cap;
}

static void sb_put(struct sbuf *b, const char *s, size_t n) {
    sb_reserve(b, n);
    if (b->oom) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    char tmp[64]; /* numbers only */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    NT_ASSERT(n >= 0 && (size_t)n < sizeof tmp);
    sb_put(b, tmp, (size_t)n);
}

/* One byte of a JSON string's contents: quote, backslash and control characters escaped,
 * everything else (UTF-8 included) as is. */
static void sb_put_escaped(struct sbuf *b, char c) {
    if (c == '"') sb_put(b, "\\\"", 2);
    else if (c == '\\') sb_put(b, "\\\\", 2);
    else if ((unsigned char)c < 0x20) sb_printf(b, "\\u%04x", (unsigned)(unsigned char)c);
    else sb_put(b, &c, 1);
}

static void sb_put_string(struct sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) sb_put_escaped(b, *s);
    sb_put(b, "\"", 1);
}

static void sb_put_shape(struct sbuf *b, int ndim, const int64_t *shape) {
    sb_put(b, "[", 1);
    for (int i = 0; i < ndim; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
    sb_put(b, "]", 1);
}

/* ---------------------------------------------------------------------------------------------
 * The writer.
 * ------------------------------------------------------------------------------------------- */

struct wentry {
    char *name; /* the entry's full name ("nemotron.file/..." for files) */
    int kind;   /* enum nt_dtype, or KIND_FILE */
    int ndim;
    int64_t shape[NT_MAX_DIMS]; /* logical: [rows, cols] packed, [bytes] for a file */
    uint64_t nbytes;            /* stored bytes */
    uint64_t done;              /* bytes appended so far */
    uint32_t crc;               /* of the bytes appended so far */
    size_t crc_at;              /* offset of the 8 checksum digits in the header text */
    uint8_t *copy;              /* an embedded file's bytes */
};

struct meta {
    char *key, *value;
};

enum { W_DECLARING, W_WRITING, W_FAILED, W_COMMITTED };

struct nt_nemo_writer {
    char *path, *partial;
    int fd;
    int state;
    int threads;
    struct wentry *e; /* the tensors, in declaration order = file order */
    int n, cap;
    struct wentry *f; /* the embedded files, stored after the tensors */
    int nf, capf;
    struct meta *m;
    int nm, capm;
    int *hash; /* tensor names: index into e, -1 empty; hash_cap >= 2 n */
    int hash_cap;
    char *header; /* the header text, padded; checksum digits patched at commit */
    size_t header_len;
    uint64_t total, appended; /* tensor bytes declared, and appended so far */
    int cur;                  /* the first tensor not yet complete */
    uint8_t *buf;             /* WRITE_BUF_BYTES */
    size_t buf_n;
};

static uint64_t name_hash(const char *s) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int hash_slot(const struct nt_nemo_writer *w, const char *name) {
    int mask = w->hash_cap - 1, i = (int)(name_hash(name) & (uint64_t)mask);
    while (w->hash[i] >= 0 && strcmp(w->e[w->hash[i]].name, name) != 0) i = (i + 1) & mask;
    return i;
}

/* Room for one more element of an array of `elem` bytes; 0 when out of memory. */
static int grow(void **arr, int n, int *cap, size_t elem) {
    if (n < *cap) return 1;
    if (*cap > INT_MAX / 4) return 0;
    int c = *cap ? *cap * 2 : 16;
    void *p = nt_calloc((size_t)c, elem);
    if (!p) return 0;
    if (n) memcpy(p, *arr, (size_t)n * elem);
    nt_free(*arr);
    *arr = p;
    *cap = c;
    return 1;
}

/* Room in the name hash for one more tensor. */
static int grow_hash(struct nt_nemo_writer *w) {
    if (w->hash_cap >= 2 * (w->n + 1)) return 1;
    if (w->hash_cap > INT_MAX / 4) return 0;
    int cap = w->hash_cap ? w->hash_cap * 2 : 64;
    int *h = nt_alloc((size_t)cap * sizeof *h);
    if (!h) return 0;
    nt_free(w->hash);
    w->hash = h;
    w->hash_cap = cap;
    for (int i = 0; i < cap; i++) h[i] = -1;
    for (int i = 0; i < w->n; i++) h[hash_slot(w, w->e[i].name)] = i;
    return 1;
}

/* The error for a call the writer's state does not allow. */
static nemotron_status state_error(const struct nt_nemo_writer *w, const char *call,
                                   struct nt_err *err) {
    static const char *const why[] = {
        [W_DECLARING] = "before begin",
        [W_WRITING] = "after begin",
        [W_FAILED] = "after an earlier call failed",
        [W_COMMITTED] = "after commit",
    };
    return nt_fail(err, NEMOTRON_ERR_ARG, "%s: %s %s", w->path, call, why[w->state]);
}

/* From begin on, a failed call leaves the writer failed. */
static nemotron_status failed(struct nt_nemo_writer *w, nemotron_status st) {
    if (w->state == W_WRITING) w->state = W_FAILED;
    return st;
}

static nemotron_status write_all(struct nt_nemo_writer *w, const void *p, size_t n,
                                 struct nt_err *err) {
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(w->fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return nt_fail(err, NEMOTRON_ERR_IO, "%s: write failed: %s", w->partial,
                           k < 0 ? strerror(errno) : "no progress");
        b += k;
        n -= (size_t)k;
    }
    return NEMOTRON_OK;
}

static nemotron_status flush(struct nt_nemo_writer *w, struct nt_err *err) {
    nemotron_status st = write_all(w, w->buf, w->buf_n, err);
    w->buf_n = 0;
    return st;
}

static nemotron_status write_out(struct nt_nemo_writer *w, const void *p, size_t n,
                                 struct nt_err *err) {
    if (w->buf_n + n <= WRITE_BUF_BYTES) {
        memcpy(w->buf + w->buf_n, p, n);
        w->buf_n += n;
        return NEMOTRON_OK;
    }
    nemotron_status st = flush(w, err);
    if (st) return st;
    if (n >= WRITE_BUF_BYTES) return write_all(w, p, n, err);
    memcpy(w->buf, p, n);
    w->buf_n = n;
    return NEMOTRON_OK;
}

nemotron_status nt_nemo_writer_new(struct nt_nemo_writer **out, const char *user_path, const char *input,
                                   struct nt_err *err) {
    *out = NULL;
    char *path = NULL; /* the file a link at user_path names, or user_path */
    nemotron_status st = nt_output_target(user_path, input, &path, err);
    if (st) return st;
    struct nt_nemo_writer *w = nt_calloc(1, sizeof *w);
    size_t len = strlen(path);
    if (!w) {
        nt_free(path);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", user_path);
    }
    w->fd = -1;
    w->threads = omp_get_max_threads();
    w->path = path;
    w->partial = nt_alloc(len + sizeof ".partial");
    w->buf = nt_alloc(WRITE_BUF_BYTES);
    if (!w->partial || !w->buf) { /* (path: nt_output_target allocated it) */
        nt_nemo_writer_free(w);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->partial, path, len);
    memcpy(w->partial + len, ".partial", sizeof ".partial");
    /* a stale partial file (a crashed run) is replaced; O_EXCL after the unlink also keeps a
     * symbolic link planted at that name from redirecting the write */
    if (unlink(w->partial) != 0 && errno != ENOENT) {
        int e = errno;
        nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot remove the stale file: %s", w->partial,
                strerror(e));
        nt_nemo_writer_free(w);
        return NEMOTRON_ERR_IO;
    }
    w->fd = open(w->partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot create: %s", w->partial, strerror(e));
        nt_nemo_writer_free(w);
        return NEMOTRON_ERR_IO;
    }
    *out = w;
    return NEMOTRON_OK;
}

void nt_nemo_writer_free(struct nt_nemo_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->fd >= 0 && w->state != W_COMMITTED) unlink(w->partial);
    for (int i = 0; i < w->n; i++) nt_free(w->e[i].name);
    for (int i = 0; i < w->nf; i++) {
        nt_free(w->f[i].name);
        nt_free(w->f[i].copy);
    }
    for (int i = 0; i < w->nm; i++) {
        nt_free(w->m[i].key);
        nt_free(w->m[i].value);
    }
    nt_free(w->e);
    nt_free(w->f);
    nt_free(w->m);
    nt_free(w->hash);
    nt_free(w->header);
    nt_free(w->buf);
    nt_free(w->path);
    nt_free(w->partial);
    nt_free(w);
}

nemotron_status nt_nemo_writer_meta(struct nt_nemo_writer *w, const char *key, const char *value,
                                    struct nt_err *err) {
    if (w->state != W_DECLARING) return failed(w, state_error(w, "metadata", err));
    if (strncmp(key, "nemotron.", 9) != 0 || !key[9])
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "%s: metadata key '%s' does not start with \"nemotron.\"", w->path, key);
    if (!strcmp(key, "nemotron.format") || !strcmp(key, "nemotron.tensors"))
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: metadata key '%s' is the writer's own", w->path,
                       key);
    if (!valid_utf8(key, strlen(key)) || !valid_utf8(value, strlen(value)))
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: metadata '%s': not valid UTF-8", w->path, key);
    for (int i = 0; i < w->nm; i++)
        if (!strcmp(w->m[i].key, key))
            return nt_fail(err, NEMOTRON_ERR_ARG, "%s: metadata key '%s' is set twice", w->path,
                           key);
    if (!grow((void **)&w->m, w->nm, &w->capm, sizeof *w->m))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", w->path);
    struct meta m = {nt_strdup(key), nt_strdup(value)};
    if (!m.key || !m.value) {
        nt_free(m.key);
        nt_free(m.value);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->m[w->nm++] = m;
    return NEMOTRON_OK;
}

nemotron_status nt_nemo_writer_declare(struct nt_nemo_writer *w, const char *name,
                                       enum nt_dtype fmt, int ndim, const int64_t *shape,
                                       struct nt_err *err) {
    if (w->state != W_DECLARING) return failed(w, state_error(w, "declaring a tensor", err));
    if (!name[0] || !valid_utf8(name, strlen(name)))
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor name '%s' is empty or not UTF-8", w->path,
                       name);
    if (!strcmp(name, "__metadata__") || has_file_prefix(name))
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "%s: tensor name '%s' is reserved (__metadata__, " NT_NEMO_FILE_PREFIX
                       "...)",
                       w->path, name);
    int plain = fmt == NT_DTYPE_F32 || fmt == NT_DTYPE_F16 || fmt == NT_DTYPE_BF16;
    if (!plain && !is_packed((int)fmt))
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "%s: tensor '%s': format %d is not one a .nemo stores (q8_2f, q4tp, F32, "
                       "F16, BF16, a ggml block type)",
                       w->path, name, (int)fmt);
    struct wentry x = {.kind = (int)fmt, .ndim = ndim};
    if (is_packed(x.kind)) {
        const char *why = NULL;
        if (ndim != 2)
            return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor '%s': %s needs 2 dimensions, not %d",
                           w->path, name, nt_dtype_name(fmt), ndim);
        if (!nt_format_accepts(fmt, shape[0], shape[1], &why))
            return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor '%s': %s cannot store it: %s",
                           w->path, name, nt_dtype_name(fmt), why);
        x.nbytes = nt_matrix_bytes(fmt, shape[0], shape[1]);
    } else {
        if (ndim < 0 || ndim > NT_MAX_DIMS)
            return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor '%s': %d dimensions (0..%d allowed)",
                           w->path, name, ndim, NT_MAX_DIMS);
        x.nbytes = nt_dtype_size(fmt);
        for (int i = 0; i < ndim; i++)
            if (shape[i] < 0 || !nt_mul_ok(x.nbytes, (uint64_t)shape[i], &x.nbytes))
                return nt_fail(err, NEMOTRON_ERR_ARG,
                               "%s: tensor '%s': dimension %d is %lld (negative or too large)",
                               w->path, name, i, (long long)shape[i]);
    }
    /* offsets are JSON integers up to INT64_MAX (the safetensors reader's bound) */
    if (x.nbytes > (uint64_t)INT64_MAX - w->total)
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor '%s': the tensors pass 2^63 bytes",
                       w->path, name);
    for (int i = 0; i < ndim; i++) x.shape[i] = shape[i];
    if (!grow_hash(w) || !grow((void **)&w->e, w->n, &w->cap, sizeof *w->e))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", w->path);
    int slot = hash_slot(w, name);
    if (w->hash[slot] >= 0)
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: tensor '%s' is declared twice", w->path, name);
    if (!(x.name = nt_strdup(name)))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", w->path);
    w->hash[slot] = w->n;
    w->e[w->n++] = x;
    w->total += x.nbytes;
    return NEMOTRON_OK;
}

nemotron_status nt_nemo_writer_declare_file(struct nt_nemo_writer *w, const char *filename,
                                            const void *bytes, size_t len, struct nt_err *err) {
    if (w->state != W_DECLARING) return failed(w, state_error(w, "declaring a file", err));
    const char *why = bad_file_name(filename);
    if (why)
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: embedded file name '%s' %s", w->path, filename,
                       why);
    size_t plen = strlen(NT_NEMO_FILE_PREFIX), nlen = strlen(filename);
    for (int i = 0; i < w->nf; i++)
        if (!strcmp(w->f[i].name + plen, filename))
            return nt_fail(err, NEMOTRON_ERR_ARG, "%s: embedded file '%s' is declared twice",
                           w->path, filename);
    if ((uint64_t)len > (uint64_t)INT64_MAX - w->total)
        return nt_fail(err, NEMOTRON_ERR_ARG, "%s: embedded file '%s' is too large", w->path,
                       filename);
    if (!grow((void **)&w->f, w->nf, &w->capf, sizeof *w->f))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", w->path);
    struct wentry x = {.kind = KIND_FILE, .ndim = 1, .shape = {(int64_t)len}, .nbytes = len};
    x.name = nt_alloc(plen + nlen + 1);
    x.copy = nt_alloc(len ? len : 1);
    if (!x.name || !x.copy) {
        nt_free(x.name);
        nt_free(x.copy);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for embedded file '%s'", w->path,
                       filename);
    }
    memcpy(x.name, NT_NEMO_FILE_PREFIX, plen);
    memcpy(x.name + plen, filename, nlen + 1);
    if (len) memcpy(x.copy, bytes, len);
    x.crc = (uint32_t)crc32_z(0, x.copy, len);
    w->f[w->nf++] = x;
    return NEMOTRON_OK;
}

/* One entry of nemotron.tensors into the inner text; records where its checksum digits are. */
static void put_inner_entry(struct sbuf *in, const struct wentry *x, size_t *digits_at) {
    sb_put_string(in, x->name);
    sb_puts(in, ":{\"format\":\"");
    sb_puts(in, kind_tag(x->kind));
    sb_puts(in, "\",\"shape\":");
    sb_put_shape(in, x->ndim, x->shape);
    sb_puts(in, ",\"crc32\":\"");
    *digits_at = in->n;
    sb_puts(in, "00000000\"}");
}

/* One entry of the safetensors header. */
static void put_header_entry(struct sbuf *h, const struct wentry *x, uint64_t begin) {
    sb_puts(h, ",");
    sb_put_string(h, x->name);
    sb_puts(h, ":{\"dtype\":\"");
    if (x->kind == KIND_FILE || is_packed(x->kind)) {
        sb_puts(h, "U8\",\"shape\":");
        int64_t n = (int64_t)x->nbytes;
        sb_put_shape(h, 1, &n);
    } else {
        sb_puts(h, nt_dtype_name((enum nt_dtype)x->kind));
        sb_puts(h, "\",\"shape\":");
        sb_put_shape(h, x->ndim, x->shape);
    }
    sb_printf(h, ",\"data_offsets\":[%llu,", (unsigned long long)begin);
    sb_printf(h, "%llu]}", (unsigned long long)(begin + x->nbytes));
}

/* Builds the header text: the metadata first (nemotron.format, the caller's keys,
 * nemotron.tensors), then the entries in file order, then spaces to DATA_ALIGN. */
static nemotron_status build_header(struct nt_nemo_writer *w, struct nt_err *err) {
    int count = w->n + w->nf;
    struct sbuf in = {0}, h = {0};
    size_t *inner_at = nt_calloc((size_t)(count ? count : 1), sizeof *inner_at);
    nemotron_status st = NEMOTRON_OK;
    if (!inner_at) goto nomem;

    sb_puts(&in, "{");
    for (int i = 0; i < count; i++) {
        if (i) sb_puts(&in, ",");
        put_inner_entry(&in, i < w->n ? &w->e[i] : &w->f[i - w->n], &inner_at[i]);
    }
    sb_puts(&in, "}");

    sb_puts(&h, "{\"__metadata__\":{\"nemotron.format\":\"" NT_NEMO_FORMAT "\"");
    for (int i = 0; i < w->nm; i++) {
        sb_puts(&h, ",");
        sb_put_string(&h, w->m[i].key);
        sb_puts(&h, ":");
        sb_put_string(&h, w->m[i].value);
    }
    /* the inner JSON as one string: escaped byte by byte; the digits need no escaping, so
     * their place in the header is where the escaping has got to when they come */
    sb_puts(&h, ",\"nemotron.tensors\":\"");
    int k = 0;
    for (size_t i = 0; i < in.n && !in.oom; i++) {
        if (k < count && i == inner_at[k]) {
            struct wentry *x = k < w->n ? &w->e[k] : &w->f[k - w->n];
            x->crc_at = h.n;
            k++;
        }
        sb_put_escaped(&h, in.p[i]);
    }
    sb_puts(&h, "\"}");
    uint64_t at = 0;
    for (int i = 0; i < count; i++) {
        const struct wentry *x = i < w->n ? &w->e[i] : &w->f[i - w->n];
        put_header_entry(&h, x, at);
        at += x->nbytes;
    }
    sb_puts(&h, "}");
    while (!h.oom && (8 + h.n) % DATA_ALIGN) sb_put(&h, " ", 1);
    if (in.oom || h.oom) goto nomem;
    NT_ASSERT(k == count);
    if (h.n > MAX_HEADER_BYTES) {
        st = nt_fail(err, NEMOTRON_ERR_ARG,
                     "%s: the header would be %zu bytes, over the %u-byte safetensors limit",
                     w->path, h.n, MAX_HEADER_BYTES);
        goto done;
    }
    w->header = h.p;
    w->header_len = h.n;
    h.p = NULL;
    goto done;
nomem:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory building the header", w->path);
done:
    nt_free(in.p);
    nt_free(h.p);
    nt_free(inner_at);
    return st;
}

nemotron_status nt_nemo_writer_begin(struct nt_nemo_writer *w, struct nt_err *err) {
    if (w->state != W_DECLARING) return failed(w, state_error(w, "begin", err));
    w->state = W_WRITING;
    nemotron_status st = build_header(w, err);
    if (st) return failed(w, st);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)w->header_len >> (8 * i));
    if ((st = write_out(w, len, 8, err)) || (st = write_out(w, w->header, w->header_len, err)))
        return failed(w, st);
    return NEMOTRON_OK;
}

nemotron_status nt_nemo_writer_append(struct nt_nemo_writer *w, const void *bytes, size_t n,
                                      struct nt_err *err) {
    if (w->state != W_WRITING) return state_error(w, "append", err);
    uint64_t left = w->total - w->appended;
    if ((uint64_t)n > left) {
        while (w->cur < w->n && w->e[w->cur].done == w->e[w->cur].nbytes) w->cur++;
        const char *at = w->cur < w->n ? w->e[w->cur].name : "(all tensors complete)";
        return failed(w,
                      nt_fail(err, NEMOTRON_ERR_ARG,
                              "%s: append of %zu bytes at tensor '%s' runs %llu bytes past the "
                              "end of the last tensor '%s' (%llu tensor bytes declared)",
                              w->path, n, at, (unsigned long long)(n - left),
                              w->n ? w->e[w->n - 1].name : "", (unsigned long long)w->total));
    }
    const uint8_t *p = bytes;
    while (n) {
        while (w->e[w->cur].done == w->e[w->cur].nbytes) w->cur++; /* n <= left: cur < n */
        struct wentry *x = &w->e[w->cur];
        uint64_t room = x->nbytes - x->done;
        size_t k = (uint64_t)n < room ? n : (size_t)room;
        x->crc = crc_update(x->crc, p, k, w->threads);
        nemotron_status st = write_out(w, p, k, err);
        if (st) return failed(w, st);
        x->done += k;
        w->appended += k;
        p += k;
        n -= k;
    }
    return NEMOTRON_OK;
}

/* Best effort: makes the rename itself durable. The file is complete either way, so a failure
 * here is not reported. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

nemotron_status nt_nemo_writer_commit(struct nt_nemo_writer *w, struct nt_err *err) {
    if (w->state != W_WRITING) return failed(w, state_error(w, "commit", err));
    for (int i = 0; i < w->n; i++) {
        const struct wentry *x = &w->e[i];
        if (x->done != x->nbytes)
            return failed(w,
                          nt_fail(err, NEMOTRON_ERR_ARG,
                                  "%s: commit: tensor '%s' is incomplete: %llu of its %llu "
                                  "bytes appended",
                                  w->path, x->name, (unsigned long long)x->done,
                                  (unsigned long long)x->nbytes));
    }
    nemotron_status st;
    for (int i = 0; i < w->nf; i++)
        if ((st = write_out(w, w->f[i].copy, w->f[i].nbytes, err))) return failed(w, st);
    if ((st = flush(w, err))) return failed(w, st);
    for (int i = 0; i < w->n + w->nf; i++) {
        const struct wentry *x = i < w->n ? &w->e[i] : &w->f[i - w->n];
        char digits[9];
        snprintf(digits, sizeof digits, "%08x", (unsigned)x->crc);
        memcpy(w->header + x->crc_at, digits, 8);
    }
    for (size_t at = 0; at < w->header_len;) {
        ssize_t k = pwrite(w->fd, w->header + at, w->header_len - at, (off_t)(8 + at));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return failed(w,
                          nt_fail(err, NEMOTRON_ERR_IO, "%s: writing the header failed: %s",
                                  w->partial, k < 0 ? strerror(errno) : "no progress"));
        at += (size_t)k;
    }
    if (fsync(w->fd) != 0)
        return failed(
            w, nt_fail(err, NEMOTRON_ERR_IO, "%s: fsync failed: %s", w->partial, strerror(errno)));
    if (rename(w->partial, w->path) != 0)
        return failed(w,
                      nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot rename to %s: %s", w->partial,
                              w->path, strerror(errno)));
    w->state = W_COMMITTED;
    /* the data was fsynced: an error of close cannot lose any of it */
    close(w->fd);
    w->fd = -1;
    sync_parent_dir(w->path);
    return NEMOTRON_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The reader.
 * ------------------------------------------------------------------------------------------- */

/* What nemotron.tensors says of one tensor of the file. */
struct rentry {
    int kind;
    int64_t rows, cols; /* packed: the logical shape */
    uint32_t want;      /* the checksum it lists */
};

static int get_dim(json_object *v, int64_t *out) {
    if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0 ||
        json_object_get_uint64(v) > (uint64_t)INT64_MAX)
        return 0;
    *out = json_object_get_int64(v);
    return 1;
}

static const char *type_name(json_object *v) { return json_type_to_name(json_object_get_type(v)); }

static int parse_crc(const char *s, size_t len, uint32_t *out) {
    if (len != 8) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 1;
}

/* "[2, 64]" */
static const char *shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
    return buf;
}

/* Checks tensor x of the file against its nemotron.tensors entry v and fills *r. */
static nemotron_status check_entry(const char *path, const struct nt_tensor *x, json_object *v,
                                   struct rentry *r, struct nt_err *err) {
    const char *name = x->name;
    if (!json_object_is_type(v, json_type_object))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: nemotron.tensors: '%s' is a JSON %s, not an object", path, name,
                       type_name(v));
    json_object *fmt = NULL, *shape = NULL, *crc = NULL;
    struct json_object_iterator it = json_object_iter_begin(v), end = json_object_iter_end(v);
    for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
        const char *key = json_object_iter_peek_name(&it);
        json_object *val = json_object_iter_peek_value(&it);
        if (!strcmp(key, "format")) fmt = val;
        else if (!strcmp(key, "shape")) shape = val;
        else if (!strcmp(key, "crc32")) crc = val;
        else
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: nemotron.tensors: '%s': unknown key '%s' (format 1 has format, "
                           "shape, crc32)",
                           path, name, key);
    }
    if (!fmt || !shape || !crc)
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: nemotron.tensors: '%s': no \"%s\"", path,
                       name,
                       !fmt         ? "format"
                           : !shape ? "shape"
                                    : "crc32");

    if (!json_object_is_type(fmt, json_type_string))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: nemotron.tensors: '%s': format is a JSON %s, not a string", path, name,
                       type_name(fmt));
    const char *tag = json_object_get_string(fmt);
    size_t tag_len = (size_t)json_object_get_string_len(fmt);
    r->kind = -1;
    for (int i = 0; i < N_KINDS; i++)
        if (strlen(kinds[i].tag) == tag_len && !memcmp(kinds[i].tag, tag, tag_len))
            r->kind = kinds[i].kind;
    if (r->kind < 0)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': unknown format \"%s\" (expected " KIND_TAGS ")", path,
                       name, tag);

    if (!json_object_is_type(crc, json_type_string) ||
        !parse_crc(json_object_get_string(crc), (size_t)json_object_get_string_len(crc), &r->want))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': crc32 is %s, not 8 lowercase hex digits", path, name,
                       json_object_to_json_string_ext(crc, JSON_C_TO_STRING_PLAIN));

    if (!json_object_is_type(shape, json_type_array))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: nemotron.tensors: '%s': shape is a JSON %s, not an array", path, name,
                       type_name(shape));
    size_t ndim = json_object_array_length(shape);
    int64_t dims[NT_MAX_DIMS];
    if (ndim > NT_MAX_DIMS)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': shape has %zu dimensions, more than %d", path, name, ndim,
                       NT_MAX_DIMS);
    for (size_t i = 0; i < ndim; i++)
        if (!get_dim(json_object_array_get_idx(shape, i), &dims[i]))
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor '%s': shape[%zu] is %s, not an integer >= 0", path, name, i,
                           json_object_to_json_string_ext(json_object_array_get_idx(shape, i),
                                                          JSON_C_TO_STRING_PLAIN));

    char s1[256], s2[256];
    int stored_u8 = x->dtype == NT_DTYPE_U8 && x->ndim == 1;
    if ((r->kind == KIND_FILE) != has_file_prefix(name))
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: tensor '%s': format \"%s\" %s (embedded files, and only they, are "
                       "named " NT_NEMO_FILE_PREFIX "<file> with format \"file\")",
                       path, name, tag,
                       r->kind == KIND_FILE ? "without the file prefix" : "under the file prefix");
    if (r->kind == KIND_FILE) {
        const char *why = bad_file_name(name + strlen(NT_NEMO_FILE_PREFIX));
        if (why)
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: embedded file name '%s' %s", path,
                           name + strlen(NT_NEMO_FILE_PREFIX), why);
        if (ndim != 1 || !stored_u8 || (uint64_t)dims[0] != x->nbytes)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: embedded file '%s': nemotron.tensors says shape %s but the header "
                           "stores %s %s (a file is U8 [bytes], the same in both)",
                           path, name, shape_text(s1, sizeof s1, (int)ndim, dims),
                           nt_dtype_name(x->dtype), shape_text(s2, sizeof s2, x->ndim, x->shape));
    } else if (is_packed(r->kind)) {
        const char *why = NULL;
        if (ndim != 2)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor '%s': %s needs a shape [rows, cols], not %s", path, name,
                           tag, shape_text(s1, sizeof s1, (int)ndim, dims));
        if (!nt_format_accepts((enum nt_dtype)r->kind, dims[0], dims[1], &why))
            return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: tensor '%s': %s %s: %s", path, name, tag,
                           shape_text(s1, sizeof s1, 2, dims), why);
        uint64_t want = nt_matrix_bytes((enum nt_dtype)r->kind, dims[0], dims[1]);
        if (!stored_u8 || x->nbytes != want)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor '%s': %s %s is a payload of %llu bytes, but the header "
                           "stores %s %s (%llu bytes)",
                           path, name, tag, shape_text(s1, sizeof s1, 2, dims),
                           (unsigned long long)want, nt_dtype_name(x->dtype),
                           shape_text(s2, sizeof s2, x->ndim, x->shape),
                           (unsigned long long)x->nbytes);
        r->rows = dims[0];
        r->cols = dims[1];
    } else {
        int same = (int)x->dtype == r->kind && x->ndim == (int)ndim;
        for (size_t i = 0; same && i < ndim; i++) same = x->shape[i] == dims[i];
        if (!same)
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: tensor '%s': nemotron.tensors says %s %s but the header says %s %s",
                           path, name, tag, shape_text(s1, sizeof s1, (int)ndim, dims),
                           nt_dtype_name(x->dtype), shape_text(s2, sizeof s2, x->ndim, x->shape));
    }
    return NEMOTRON_OK;
}

/* A piece of one entry's bytes whose CRC one thread computes. */
struct piece {
    int entry;
    uint64_t off, len;
    uint32_t crc;
};

/* Verifies every entry's checksum; the first mismatch in file order is the error. */
/* files_only: verify the embedded files alone (a reader of the tokenizer need not read the
 * weights). */
static int verified(const struct rentry *r, int files_only) { return !files_only || r->kind == KIND_FILE; }

static nemotron_status verify_checksums(const char *path, const struct nt_tensor *x,
                                        const struct rentry *r, int n, const uint8_t *data,
                                        int threads, int files_only, struct nt_err *err) {
    size_t n_pieces = 0;
    for (int i = 0; i < n; i++)
        if (verified(&r[i], files_only))
            n_pieces += (size_t)((x[i].nbytes + CRC_PIECE_BYTES - 1) / CRC_PIECE_BYTES);
    struct piece *pc = nt_calloc(n_pieces ? n_pieces : 1, sizeof *pc);
    if (!pc) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory verifying checksums", path);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (uint64_t off = 0; verified(&r[i], files_only) && off < x[i].nbytes; off += CRC_PIECE_BYTES) {
            uint64_t len =
                x[i].nbytes - off < CRC_PIECE_BYTES ? x[i].nbytes - off : CRC_PIECE_BYTES;
            pc[k++] = (struct piece){i, off, len, 0};
        }
    NT_ASSERT(k == n_pieces);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (size_t i = 0; i < n_pieces; i++)
        pc[i].crc = (uint32_t)crc32_z(0, (const uint8_t *)x[pc[i].entry].data + pc[i].off,
                                      (size_t)pc[i].len);
    nemotron_status st = NEMOTRON_OK;
    k = 0;
    for (int i = 0; i < n && !st; i++) {
        if (!verified(&r[i], files_only)) continue;
        uint32_t crc = 0;
        for (; k < n_pieces && pc[k].entry == i; k++)
            crc = (uint32_t)crc32_combine(crc, pc[k].crc, (z_off_t)pc[k].len);
        if (crc != r[i].want)
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: %s '%s': checksum mismatch: nemotron.tensors says crc32 %08x, its "
                         "%llu bytes (data offset %llu) give %08x: the file is corrupted",
                         path, r[i].kind == KIND_FILE ? "embedded file" : "tensor", x[i].name,
                         (unsigned)r[i].want, (unsigned long long)x[i].nbytes,
                         (unsigned long long)((const uint8_t *)x[i].data - data), (unsigned)crc);
    }
    nt_free(pc);
    return st;
}

struct span {
    uint64_t begin, end;
    int entry;
};

static int compare_spans(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The entries, sorted by offset, tile the data section: each begins where the previous one
 * ends, the first at 0, the last at its end. safetensors.c has checked that they are in
 * bounds and disjoint; this is the stricter rule of the reference reader (the Rust
 * safetensors crate), which also refuses an empty entry placed inside another. */
static nemotron_status check_layout(const char *path, const struct nt_tensor *x, int n,
                                    const uint8_t *data, uint64_t data_size, struct nt_err *err) {
    struct span *sp = nt_calloc((size_t)(n ? n : 1), sizeof *sp);
    if (!sp) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %d entries", path, n);
    for (int i = 0; i < n; i++) {
        sp[i].begin = (uint64_t)((const uint8_t *)x[i].data - data);
        sp[i].end = sp[i].begin + x[i].nbytes;
        sp[i].entry = i;
    }
    qsort(sp, (size_t)n, sizeof *sp, compare_spans);
    nemotron_status st = NEMOTRON_OK;
    uint64_t at = 0;
    for (int i = 0; i < n && !st; i++) {
        if (sp[i].begin < at)
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensor '%s' (data_offsets [%llu, %llu]) lies inside the entry "
                         "before it, which ends at %llu",
                         path, x[sp[i].entry].name, (unsigned long long)sp[i].begin,
                         (unsigned long long)sp[i].end, (unsigned long long)at);
        else if (sp[i].begin > at)
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: the data section has a hole: bytes [%llu, %llu) before tensor '%s' "
                         "belong to no tensor",
                         path, (unsigned long long)at, (unsigned long long)sp[i].begin,
                         x[sp[i].entry].name);
        at = sp[i].end;
    }
    if (!st && at != data_size)
        st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                     "%s: the data section holds %llu bytes, the entries end at %llu: the last "
                     "%llu bytes belong to no tensor",
                     path, (unsigned long long)data_size, (unsigned long long)at,
                     (unsigned long long)(data_size - at));
    nt_free(sp);
    return st;
}

/* The checks after the safetensors ones, on the file nt_table_add_* just added as file
 * `fi`, whose tensors are those from index `first` on. */
static nemotron_status check_container(struct nt_tensor_table *t, int fi, int first, int threads,
                                       int files_only, struct nt_err *err) {
    const struct nt_st_file *f = &t->files[fi];
    const char *path = f->path;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i]; /* validated by the add */
    const uint8_t *data = f->map + 8 + hlen;
    uint64_t data_size = f->size - 8 - hlen;
    int n = t->n_tensors - first;
    struct nt_tensor *x = n ? t->tensors + first : NULL; /* an empty table has no array */
    json_object *root = NULL, *inner = NULL, *meta, *v;
    struct rentry *r = NULL;

    nemotron_status st =
        nt_json_parse_object(path, "header", (const char *)f->map + 8, (size_t)hlen, &root, err);
    if (st) goto done;
    if (!json_object_object_get_ex(root, "__metadata__", &meta) ||
        !json_object_object_get_ex(meta, "nemotron.format", &v)) {
        st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                     "%s: a safetensors file without \"nemotron.format\" in its __metadata__: "
                     "not a .nemo (convert a model directory with `nemotron convert`)",
                     path);
        goto done;
    }
    /* safetensors.c checked that __metadata__ is an object of strings */
    if (strcmp(json_object_get_string(v), NT_NEMO_FORMAT) != 0 ||
        (size_t)json_object_get_string_len(v) != strlen(NT_NEMO_FORMAT)) {
        st = nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                     "%s: nemotron.format \"%s\": this build reads format " NT_NEMO_FORMAT " only",
                     path, json_object_get_string(v));
        goto done;
    }
    if (!json_object_object_get_ex(meta, "nemotron.tensors", &v)) {
        st =
            nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: __metadata__ has no \"nemotron.tensors\"", path);
        goto done;
    }
    if ((st = nt_json_parse_object(path, "nemotron.tensors", json_object_get_string(v),
                                   (size_t)json_object_get_string_len(v), &inner, err)))
        goto done;

    r = nt_calloc((size_t)(n ? n : 1), sizeof *r);
    if (!r) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %d entries", path, n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        json_object *e;
        if (!json_object_object_get_ex(inner, x[i].name, &e)) {
            st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                         "%s: tensor '%s' is in the header but not in nemotron.tensors", path,
                         x[i].name);
            goto done;
        }
        if ((st = check_entry(path, &x[i], e, &r[i], err))) goto done;
    }
    /* every tensor took one key of its own; a key left over names no tensor of this file */
    if ((size_t)json_object_object_length(inner) != (size_t)n) {
        struct json_object_iterator it = json_object_iter_begin(inner);
        struct json_object_iterator end = json_object_iter_end(inner);
        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
            const struct nt_tensor *y = nt_table_find(t, json_object_iter_peek_name(&it));
            if (!y || y->file != fi) break;
        }
        NT_ASSERT(!json_object_iter_equal(&it, &end));
        st = nt_fail(err, NEMOTRON_ERR_FORMAT,
                     "%s: nemotron.tensors lists '%s', which the header does not hold", path,
                     json_object_iter_peek_name(&it));
        goto done;
    }
    if ((st = check_layout(path, x, n, data, data_size, err))) goto done;
    if ((st = verify_checksums(path, x, r, n, data, threads, files_only, err))) goto done;

    for (int i = 0; i < n; i++) {
        if (!is_packed(r[i].kind)) continue;
        x[i].dtype = (enum nt_dtype)r[i].kind;
        x[i].ndim = 2;
        memset(x[i].shape, 0, sizeof x[i].shape);
        x[i].shape[0] = r[i].rows;
        x[i].shape[1] = r[i].cols;
    }
    st = nt_table_embed(t, first, NT_NEMO_FILE_PREFIX, err);

done:
    nt_free(r);
    json_object_put(inner);
    json_object_put(root);
    return st;
}

nemotron_status nt_nemo_open(struct nt_tensor_table *t, const char *path, int n_threads,
                             struct nt_err *err) {
    int files = t->n_files, tensors = t->n_tensors;
    nemotron_status st = nt_table_add_file(t, path, err);
    if (st) return st;
    st = check_container(t, files, tensors, resolve_threads(n_threads), 0, err);
    if (st) nt_table_truncate(t, files, tensors); /* unmaps the file */
    return st;
}

nemotron_status nt_nemo_read_file(const char *path, const char *name, char **out, size_t *len,
                                  struct nt_err *err) {
    *out = NULL;
    *len = 0;
    struct nt_tensor_table t;
    nt_table_init(&t);
    nemotron_status st = nt_table_add_file(&t, path, err);
    if (!st) st = check_container(&t, 0, 0, 1, 1, err);
    const uint8_t *bytes = NULL;
    size_t n = 0;
    if (!st && !(bytes = nt_table_file(&t, name, &n)))
        st = nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: the .nemo carries no %s", path, name);
    if (!st && !(*out = nt_alloc(n + 1)))
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %s (%zu bytes)", path, name, n);
    if (!st) {
        memcpy(*out, bytes, n);
        (*out)[n] = 0;
        *len = n;
    }
    nt_table_close(&t);
    return st;
}

nemotron_status nt_nemo_open_bytes(struct nt_tensor_table *t, const char *path,
                                   const uint8_t *bytes, size_t size, int owned_map, int n_threads,
                                   struct nt_err *err) {
    int files = t->n_files, tensors = t->n_tensors;
    nemotron_status st = nt_table_add_bytes(t, path, bytes, size, owned_map, err);
    if (st) return st;
    st = check_container(t, files, tensors, resolve_threads(n_threads), 0, err);
    if (st) {
        t->files[files].owned_map = 0; /* on failure the bytes stay the caller's */
        nt_table_truncate(t, files, tensors);
    }
    return st;
}

int nt_path_is_nemo(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat sb;
    uint8_t len[8];
    char *text = NULL;
    int yes = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8) goto done;
    if (pread(fd, len, 8, 0) != 8) goto done;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len[i];
    if (n > MAX_HEADER_BYTES || n > (uint64_t)sb.st_size - 8) goto done;
    text = nt_alloc(n ? (size_t)n : 1);
    if (!text) goto done;
    for (size_t got = 0; got < n;) {
        ssize_t k = pread(fd, text + got, (size_t)n - got, (off_t)(8 + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) goto done;
        got += (size_t)k;
    }
    json_object *root, *meta;
    struct nt_err err;
    if (nt_json_parse_object(path, "header", text, (size_t)n, &root, &err)) goto done;
    yes = json_object_object_get_ex(root, "__metadata__", &meta) &&
        json_object_is_type(meta, json_type_object) &&
        json_object_object_get_ex(meta, "nemotron.format", NULL);
    json_object_put(root);
done:
    nt_free(text);
    close(fd);
    return yes;
}
