/* tokenizer_load.c - builds a struct nt_tokenizer from tokenizer.json, as `tokenizers`
 * deserializes one (Tokenizer::from_file).
 *
 * The bytes are validated by the scanner of tokenizer_json.c, which also parses model.vocab
 * and model.merges; json-c reads everything else (small) from a copy with those two values cut
 * out. Then, in this order: vocabulary, merges, normalizer, pre-tokenizer, the BPE tables,
 * added tokens (whose ids are assigned as AddedVocabulary::add_tokens does: the vocabulary's id
 * when the content is in it, else the next one after it; the file's "id" is only checked by
 * tokenizers, with a warning), post-processor, decoder.
 *
 * Deliberately ignored: "truncation" and "padding" (transformers resets both before every call;
 * the engine never wants them), "version", trim_offsets and every offset-only option.
 * On failure everything built so far is freed and *out is NULL.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "tokenizer_impl.h"
#include "utf8.h"

/* Larger than any tokenizer.json (Nemotron-3's is ~17 MB); a bound on what a bad path reads. */
#define MAX_FILE ((size_t)1 << 30)
/* Nesting of Sequence components: real files use one level. */
#define MAX_NEST 8

struct ld {
    struct nt_tokenizer *t;
    struct nt_err *err;
    const char *src;
    size_t n;
    struct nt_jcur cur;
    struct vent {
        uint32_t off, len;
        int32_t id;
    } * ve; /* model.vocab in file order */
    size_t n_ve, cap_ve;
    int have_vocab, have_merges;
    struct mraw {   /* model.merges as read: both tokens side by side in chars, so */
        size_t off; /* the merged token is the span of the two */
        uint32_t la, lb;
        size_t index; /* in the list, for messages */
    } * mr;
    size_t n_mr, cap_mr;
    char *chars;
    size_t chars_len, chars_cap;
    int vocab_dups;       /* some key came twice: earlier entries are dead */
    int32_t *head, *tail; /* post-processor ids */
    int n_head, n_tail;
};

static nemotron_status bad(struct ld *L, nemotron_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static nemotron_status bad(struct ld *L, nemotron_status st, const char *fmt, ...) {
    char msg[NT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nt_fail(L->err, st, "%s: %s", L->t->name, msg);
}

static nemotron_status nomem(struct ld *L) { return bad(L, NEMOTRON_ERR_NOMEM, "out of memory"); }

/* Room for one more element in an nt_alloc'd array *p of *cap elements of size sz. */
static int reserve(void **p, size_t *cap, size_t n, size_t sz) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c <= n && c < SIZE_MAX / 2) c *= 2;
    if (c <= n || c > SIZE_MAX / sz) return -1;
    void *q = nt_alloc(c * sz);
    if (!q) return -1;
    if (*p) memcpy(q, *p, (n < *cap ? n : *cap) * sz);
    nt_free(*p);
    *p = q;
    *cap = c;
    return 0;
}

/* A token's text for a message: at most 80 bytes. */
#define TOK(s, n) (int)((n) > 80 ? 80 : (n)), (s)

/* How many keys ahead the loader hashes and prefetches: enough misses in flight to hide the
 * memory latency (~100 ns here), few enough to stay in L1. */
#define AHEAD 16

/* Puts entries e[0..n) (keys in m's arena) into m; returns how many keys were new. */
static size_t put_all(struct nt_strmap *m, const struct vent *e, size_t n) {
    uint32_t h[AHEAD];
    size_t fresh = 0;
    for (size_t i = 0; i < n + AHEAD; i++) {
        if (i >= AHEAD) {
            size_t j = i - AHEAD;
            if (nt_strmap_put_h(m, e[j].off, e[j].len, e[j].id, h[j % AHEAD]) < 0) fresh++;
        }
        if (i < n) {
            h[i % AHEAD] = nt_hash_bytes(m->arena + e[i].off, e[i].len);
            nt_strmap_prefetch(m, h[i % AHEAD]);
        }
    }
    return fresh;
}

/* ---- model.vocab and model.merges, from the source bytes ---- */

/* A shape error inside a hooked value: the message, and the cursor marked failed. */
static int hook_bad(struct ld *L, struct nt_jcur *c, nemotron_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int hook_bad(struct ld *L, struct nt_jcur *c, nemotron_status st, const char *fmt, ...) {
    char msg[NT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line, col;
    nt_json_line_col(c->s, c->p, &line, &col);
    nt_fail(L->err, st, "%s: %s (line %zu, column %zu)", L->t->name, msg, line, col);
    c->failed = 1;
    c->status = st;
    return -1;
}

static int hook_nomem(struct ld *L, struct nt_jcur *c) {
    return hook_bad(L, c, NEMOTRON_ERR_NOMEM, "out of memory");
}

static void drop_vocab(struct ld *L) {
    nt_free(L->t->arena);
    L->t->arena = NULL;
    L->n_ve = 0;
    L->have_vocab = 0;
}

static void drop_merges(struct ld *L) {
    nt_free(L->mr);
    nt_free(L->chars);
    L->mr = NULL;
    L->chars = NULL;
    L->n_mr = L->cap_mr = L->chars_len = L->chars_cap = 0;
    L->have_merges = 0;
}

/* After a member value: ',' (and the next member must follow) or the closing bracket. */
static int next_or_close(struct nt_jcur *c, char close, int *done) {
    nt_jcur_ws(c);
    if (c->p < c->n && c->s[c->p] == ',') {
        c->p++;
        nt_jcur_ws(c);
        *done = 0;
        return 0;
    }
    if (c->p < c->n && c->s[c->p] == close) {
        c->p++;
        *done = 1;
        return 0;
    }
    return nt_jcur_fail(c, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* model.vocab: {"token": id, ...}, ids as serde reads a u32. */
static int hook_vocab(struct ld *L, struct nt_jcur *c) {
    struct nt_tokenizer *t = L->t;
    drop_vocab(L);
    L->have_vocab = 1;
    if (c->s[c->p] != '{') {
        /* reported after the model's type is known (a Unigram's vocab is a list) */
        L->have_vocab = 2;
        return nt_jcur_skip(c, 3);
    }
    /* keys (decoded, never longer than their source) with a NUL each fit in what is left */
    t->arena = nt_alloc(c->n - c->p + 1);
    if (!t->arena) return hook_nomem(L, c);
    size_t used = 0;
    c->p++;
    nt_jcur_ws(c);
    if (c->p < c->n && c->s[c->p] == '}') {
        c->p++;
        return 0;
    }
    for (int done = 0; !done;) {
        if (c->p >= c->n || c->s[c->p] != '"') return nt_jcur_fail(c, "expected a member name");
        const char *k;
        size_t klen;
        if (nt_jcur_string(c, &k, &klen)) return -1;
        nt_jcur_ws(c);
        if (c->p >= c->n || c->s[c->p] != ':') return nt_jcur_fail(c, "expected ':'");
        c->p++;
        nt_jcur_ws(c);
        int is_uint = 0;
        uint64_t v = 0;
        if (c->p < c->n && (c->s[c->p] == '-' || (c->s[c->p] >= '0' && c->s[c->p] <= '9'))) {
            if (nt_jcur_number(c, &is_uint, &v)) return -1;
        }
        if (!is_uint || v > UINT32_MAX)
            return hook_bad(L, c, NEMOTRON_ERR_FORMAT,
                            "model.vocab[\"%.*s\"]: expected an id (an integer 0..2^32-1)",
                            TOK(k, klen));
        if (v > INT32_MAX - 1)
            return hook_bad(L, c, NEMOTRON_ERR_UNSUPPORTED,
                            "model.vocab[\"%.*s\"]: id %llu is too large", TOK(k, klen),
                            (unsigned long long)v);
        if (klen > UINT32_MAX || reserve((void **)&L->ve, &L->cap_ve, L->n_ve, sizeof *L->ve))
            return hook_nomem(L, c);
        memcpy(t->arena + used, k, klen);
        t->arena[used + klen] = 0; /* NUL-terminated for nt_tokenizer_token_text */
        L->ve[L->n_ve++] = (struct vent){(uint32_t)used, (uint32_t)klen, (int32_t)v};
        used += klen + 1;
        if (next_or_close(c, '}', &done)) return -1;
    }
    return 0;
}

/* model.merges: ["a b", ...] or [["a", "b"], ...] (one form per list, as serde's untagged
 * enum). Only read here; resolve_merges looks the tokens up once the vocabulary is known. */
static int hook_merges(struct ld *L, struct nt_jcur *c) {
    drop_merges(L);
    L->have_merges = 1;
    if (c->n - c->p >= 4 && !memcmp(c->s + c->p, "null", 4)) {
        c->p += 4;
        return 0;
    }
    if (c->s[c->p] != '[') {
        L->have_merges = 2; /* reported after the model's type is known */
        return nt_jcur_skip(c, 3);
    }
    c->p++;
    nt_jcur_ws(c);
    if (c->p < c->n && c->s[c->p] == ']') {
        c->p++;
        return 0;
    }
    int form = 0; /* 1: "a b" strings, 2: [a, b] pairs */
    for (size_t i = 0;; i++) {
        const char *a, *b;
        size_t la, lb;
        char ch = c->p < c->n ? c->s[c->p] : 0;
        int done = 0;
        if (ch == '"' && form != 2) {
            form = 1;
            const char *s;
            size_t len;
            if (nt_jcur_string(c, &s, &len)) return -1;
            if (len >= 8 && !memcmp(s, "#version", 8)) { /* not a merge, and not ranked */
                if (next_or_close(c, ']', &done)) return -1;
                if (done) return 0;
                continue;
            }
            const char *sp1 = memchr(s, ' ', len);
            if (!sp1 || memchr(sp1 + 1, ' ', len - (size_t)(sp1 - s) - 1))
                return hook_bad(L, c, NEMOTRON_ERR_FORMAT,
                                "model.merges[%zu]: \"%.*s\" is not two tokens separated by one "
                                "space",
                                i, TOK(s, len));
            a = s;
            la = (size_t)(sp1 - s);
            b = sp1 + 1;
            lb = len - la - 1;
            if (la > UINT32_MAX || lb > UINT32_MAX ||
                reserve((void **)&L->chars, &L->chars_cap, L->chars_len + la + lb, 1))
                return hook_nomem(L, c);
            memcpy(L->chars + L->chars_len, a, la);
        } else if (ch == '[' && form != 1) {
            form = 2;
            c->p++;
            nt_jcur_ws(c);
            if (c->p >= c->n || c->s[c->p] != '"') goto pair_shape;
            if (nt_jcur_string(c, &a, &la)) return -1;
            if (la > UINT32_MAX || reserve((void **)&L->chars, &L->chars_cap, L->chars_len + la, 1))
                return hook_nomem(L, c);
            memcpy(L->chars + L->chars_len, a, la);
            nt_jcur_ws(c);
            if (c->p >= c->n || c->s[c->p] != ',') goto pair_shape;
            c->p++;
            nt_jcur_ws(c);
            if (c->p >= c->n || c->s[c->p] != '"') goto pair_shape;
            if (nt_jcur_string(c, &b, &lb)) return -1;
            nt_jcur_ws(c);
            if (c->p >= c->n || c->s[c->p] != ']') goto pair_shape;
            c->p++;
            if (lb > UINT32_MAX ||
                reserve((void **)&L->chars, &L->chars_cap, L->chars_len + la + lb, 1))
                return hook_nomem(L, c);
        } else {
            return hook_bad(L, c, NEMOTRON_ERR_FORMAT,
                            form ? "model.merges[%zu]: every entry must have the form of the "
                                   "first (\"a b\" strings or [a, b] pairs)"
                                 : "model.merges[%zu]: expected \"a b\" or [a, b]",
                            i);
        }
        memcpy(L->chars + L->chars_len + la, b, lb);
        if (reserve((void **)&L->mr, &L->cap_mr, L->n_mr, sizeof *L->mr)) return hook_nomem(L, c);
        L->mr[L->n_mr++] = (struct mraw){L->chars_len, (uint32_t)la, (uint32_t)lb, i};
        L->chars_len += la + lb;
        if (next_or_close(c, ']', &done)) return -1;
        if (done) return 0;
        continue;
    pair_shape:
        return hook_bad(L, c, NEMOTRON_ERR_FORMAT,
                        "model.merges[%zu]: expected a pair [left, right] of strings", i);
    }
}

static int hook_member(void *ctx, int which, struct nt_jcur *c) {
    return which ? hook_merges(ctx, c) : hook_vocab(ctx, c);
}

static void hook_model(void *ctx) {
    drop_vocab(ctx);
    drop_merges(ctx);
}

/* The vocabulary's string -> id table (a later duplicate key wins, as in serde's HashMap). */
static nemotron_status build_vocab(struct ld *L) {
    struct nt_tokenizer *t = L->t;
    if (!L->have_vocab) return bad(L, NEMOTRON_ERR_FORMAT, "model.vocab: missing");
    if (L->have_vocab == 2)
        return bad(L, NEMOTRON_ERR_FORMAT, "model.vocab: expected an object of token -> id");
    if (L->have_merges == 2) return bad(L, NEMOTRON_ERR_FORMAT, "model.merges: expected a list");
    if (nt_strmap_init(&t->vocab_text, L->n_ve, t->arena)) return nomem(L);
    size_t n_model = put_all(&t->vocab_text, L->ve, L->n_ve);
    L->vocab_dups = n_model < L->n_ve;
    t->n_model = (int32_t)n_model;
    return NEMOTRON_OK;
}

/* Merges to (left id, right id) -> (rank, merged id): rank = position, and a repeated pair
 * keeps its last rank (a Rust HashMap collect). Lookups are hashed and prefetched AHEAD. */
static nemotron_status resolve_merges(struct ld *L) {
    struct nt_tokenizer *t = L->t;
    size_t n_m = L->n_mr;
    if (!n_m) return NEMOTRON_OK;
    if (n_m >= UINT32_MAX) return nomem(L);
    struct mtri {
        int32_t a, b, id;
    } *tri = nt_alloc(n_m * sizeof *tri);
    if (!tri || nt_pairmap_init(&t->bpe.merges, n_m)) {
        nt_free(tri);
        return nomem(L);
    }
    uint32_t h[AHEAD][3];
    for (size_t k = 0; k < n_m + AHEAD; k++) {
        if (k >= AHEAD) {
            size_t j = k - AHEAD;
            const struct mraw *r = &L->mr[j];
            const char *a = L->chars + r->off, *b = a + r->la;
            int32_t ia = nt_strmap_get_h(&t->vocab_text, a, r->la, h[j % AHEAD][0]);
            int32_t ib = ia < 0 ? -1 : nt_strmap_get_h(&t->vocab_text, b, r->lb, h[j % AHEAD][1]);
            if (ia < 0 || ib < 0) {
                const char *u = ia < 0 ? a : b;
                size_t ul = ia < 0 ? r->la : r->lb;
                nt_free(tri);
                return bad(L, NEMOTRON_ERR_FORMAT,
                           "model.merges[%zu]: token \"%.*s\" is not in the vocabulary", r->index,
                           TOK(u, ul));
            }
            size_t lab = (size_t)r->la + r->lb;
            int32_t id = nt_strmap_get_h(&t->vocab_text, a, lab, h[j % AHEAD][2]);
            if (id < 0) {
                nt_free(tri);
                return bad(L, NEMOTRON_ERR_FORMAT,
                           "model.merges[%zu]: the merged token \"%.*s\" is not in the vocabulary",
                           r->index, TOK(a, lab));
            }
            tri[j] = (struct mtri){ia, ib, id};
        }
        if (k < n_m) {
            const struct mraw *r = &L->mr[k];
            const char *a = L->chars + r->off;
            h[k % AHEAD][0] = nt_hash_bytes(a, r->la);
            h[k % AHEAD][1] = nt_hash_bytes(a + r->la, r->lb);
            h[k % AHEAD][2] = nt_hash_bytes(a, (size_t)r->la + r->lb);
            for (int q = 0; q < 3; q++) nt_strmap_prefetch(&t->vocab_text, h[k % AHEAD][q]);
        }
    }
    for (size_t k = 0; k < n_m; k++) {
        if (k + AHEAD < n_m) {
            uint64_t key = nt_pair_key(tri[k + AHEAD].a, tri[k + AHEAD].b);
            __builtin_prefetch(&t->bpe.merges.slots[nt_pair_slot(&t->bpe.merges, key)]);
        }
        nt_pairmap_put(&t->bpe.merges, tri[k].a, tri[k].b, (uint32_t)k, tri[k].id);
    }
    nt_free(tri);
    return NEMOTRON_OK;
}

/* ---- json-c helpers: every message names the key ---- */

/* The member `key` of o; NULL when absent or null. */
static json_object *member(json_object *o, const char *key) {
    json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v)) return NULL;
    return v;
}

static nemotron_status get_bool(struct ld *L, json_object *o, const char *path, const char *key,
                                int dflt, int *out) {
    json_object *v = member(o, key);
    *out = dflt;
    if (!v) return NEMOTRON_OK;
    if (!json_object_is_type(v, json_type_boolean))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: expected true or false", path, key);
    *out = json_object_get_boolean(v);
    return NEMOTRON_OK;
}

/* A string member: required ones are an error when absent; optional ones give *s = NULL. */
static nemotron_status get_str(struct ld *L, json_object *o, const char *path, const char *key,
                               int required, const char **s, size_t *len) {
    json_object *v = member(o, key);
    *s = NULL;
    *len = 0;
    if (!v) {
        if (required) return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: missing", path, key);
        return NEMOTRON_OK;
    }
    if (!json_object_is_type(v, json_type_string))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: expected a string", path, key);
    *s = json_object_get_string(v);
    *len = (size_t)json_object_get_string_len(v);
    return NEMOTRON_OK;
}

static nemotron_status get_uint(struct ld *L, json_object *v, const char *what, uint64_t max,
                                uint64_t *out) {
    if (!v || !json_object_is_type(v, json_type_int))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s: expected an integer", what);
    int64_t x = json_object_get_int64(v);
    if (x < 0 || (uint64_t)x > max)
        return bad(L, NEMOTRON_ERR_FORMAT, "%s: %lld is out of range 0..%llu", what, (long long)x,
                   (unsigned long long)max);
    *out = (uint64_t)x;
    return NEMOTRON_OK;
}

/* The "type" of component o at path; o must be an object. */
static nemotron_status get_type(struct ld *L, json_object *o, const char *path, const char **type) {
    size_t len;
    if (!json_object_is_type(o, json_type_object))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s: expected an object", path);
    return get_str(L, o, path, "type", 1, type, &len);
}

static nemotron_status get_list(struct ld *L, json_object *o, const char *path, const char *key,
                                json_object **list) {
    *list = member(o, key);
    if (!*list || !json_object_is_type(*list, json_type_array))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: expected a list", path, key);
    return NEMOTRON_OK;
}

/* A pattern member: {"Regex": "..."} or {"String": "..."}. */
static nemotron_status get_pattern(struct ld *L, json_object *o, const char *path,
                                   struct nt_rx *rx) {
    json_object *p = member(o, "pattern");
    char what[256];
    snprintf(what, sizeof what, "%s: %s.pattern", L->t->name, path);
    if (!p || !json_object_is_type(p, json_type_object))
        return bad(L, NEMOTRON_ERR_FORMAT,
                   "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path);
    json_object *re = member(p, "Regex"), *str = member(p, "String");
    json_object *v = re ? re : str;
    if (!v || (re && str) || json_object_object_length(p) != 1 ||
        !json_object_is_type(v, json_type_string))
        return bad(L, NEMOTRON_ERR_FORMAT,
                   "%s.pattern: expected {\"Regex\": ...} or {\"String\": ...}", path);
    return nt_rx_compile(L->t, rx, json_object_get_string(v), (size_t)json_object_get_string_len(v),
                         re ? NT_RX_ONIG : NT_RX_LITERAL, what, L->err);
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = nt_alloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* One character given as a string (Strip's content, CharDelimiterSplit's delimiter). */
static nemotron_status get_char(struct ld *L, json_object *o, const char *path, const char *key,
                                char out[4], int *olen) {
    const char *s;
    size_t len, clen;
    uint32_t cp;
    nemotron_status st = get_str(L, o, path, key, 1, &s, &len);
    if (st) return st;
    if (len == 0 || nt_utf8_step((const unsigned char *)s, len, &clen, &cp) != NT_U8_OK ||
        clen != len)
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: expected one character", path, key);
    memcpy(out, s, len);
    *olen = (int)len;
    return NEMOTRON_OK;
}

/* A "Sequence" component: adds each entry of its list `key` with `add`, one level deeper. */
static nemotron_status each_in_sequence(struct ld *L, json_object *o, const char *path, const char *key,
                                        int depth,
                                        nemotron_status (*add)(struct ld *, json_object *, const char *, int)) {
    json_object *list;
    nemotron_status st = get_list(L, o, path, key, &list);
    if (st) return st;
    if (depth >= MAX_NEST) return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: nested too deep", path);
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", path, key, i);
        json_object *e = json_object_array_get_idx(list, i);
        if (!e) return bad(L, NEMOTRON_ERR_FORMAT, "%s: expected an object", sub);
        if ((st = add(L, e, sub, depth + 1))) return st;
    }
    return NEMOTRON_OK;
}

/* ---- normalizer ---- */

static nemotron_status add_norm(struct ld *L, json_object *o, const char *path, int depth) {
    struct nt_tokenizer *t = L->t;
    const char *type;
    nemotron_status st = get_type(L, o, path, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) return each_in_sequence(L, o, path, "normalizers", depth, add_norm);
    int known = !strcmp(type, "Strip") || !strcmp(type, "Replace") || !strcmp(type, "Prepend");
    if (!known)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                   "%s.type: normalizer \"%s\" is not supported (supported: Sequence, Strip, "
                   "Replace, Prepend)",
                   path, type);
    if (t->n_norm >= NT_MAX_STEPS)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: more than %d normalizers", path, NT_MAX_STEPS);
    struct nt_norm *nm = &t->norm[t->n_norm++];
    const char *s;
    size_t len;
    if (!strcmp(type, "Strip")) {
        nm->kind = NT_NM_STRIP;
        if ((st = get_bool(L, o, path, "strip_left", 0, &nm->left))) return st;
        return get_bool(L, o, path, "strip_right", 0, &nm->right);
    }
    if (!strcmp(type, "Replace")) {
        nm->kind = NT_NM_REPLACE;
        if ((st = get_pattern(L, o, path, &nm->rx))) return st;
        if ((st = get_str(L, o, path, "content", 1, &s, &len))) return st;
    } else {
        nm->kind = NT_NM_PREPEND;
        if ((st = get_str(L, o, path, "prepend", 1, &s, &len))) return st;
    }
    nm->content = dup_bytes(s, len);
    nm->content_len = len;
    return nm->content ? NEMOTRON_OK : nomem(L);
}

/* ---- pre-tokenizer ---- */

static nemotron_status get_behavior(struct ld *L, json_object *o, const char *path, int required,
                                    enum nt_behavior dflt, enum nt_behavior *out) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    const char *s;
    size_t len;
    nemotron_status st = get_str(L, o, path, "behavior", required, &s, &len);
    if (st) return st;
    *out = dflt;
    if (!s) return NEMOTRON_OK;
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum nt_behavior)i;
            return NEMOTRON_OK;
        }
    return bad(L, NEMOTRON_ERR_FORMAT,
               "%s.behavior: \"%s\" is not one of Removed, Isolated, MergedWithPrevious, "
               "MergedWithNext, Contiguous",
               path, s);
}

/* GPT-2's pattern, as ByteLevel's use_regex applies it (an Oniguruma regex in tokenizers). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Rust's char::is_ascii_punctuation() || unicode P* (Punctuation's predicate). */
static const char punct_regex[] = "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]";

static nemotron_status add_pretok(struct ld *L, json_object *o, const char *path, int depth) {
    struct nt_tokenizer *t = L->t;
    const char *type;
    nemotron_status st = get_type(L, o, path, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) return each_in_sequence(L, o, path, "pretokenizers", depth, add_pretok);
    static const char *known[] = {
        "Split",       "ByteLevel",         "Digits", "Whitespace", "WhitespaceSplit",
        "Punctuation", "CharDelimiterSplit"};
    int k = -1;
    for (int i = 0; i < 7; i++)
        if (!strcmp(type, known[i])) k = i;
    if (k < 0)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                   "%s.type: pre-tokenizer \"%s\" is not supported (supported: Sequence, Split, "
                   "ByteLevel, Digits, Whitespace, WhitespaceSplit, Punctuation, "
                   "CharDelimiterSplit)",
                   path, type);
    if (t->n_pre >= NT_MAX_STEPS)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizers", path,
                   NT_MAX_STEPS);
    struct nt_pretok *p = &t->pre[t->n_pre++];
    p->kind = NT_PT_SPLIT;
    char what[300];
    snprintf(what, sizeof what, "%s: %s", t->name, path);
    switch (k) {
    case 0: /* Split */
        if ((st = get_pattern(L, o, path, &p->rx))) return st;
        if ((st = get_behavior(L, o, path, 1, NT_ISOLATED, &p->behavior))) return st;
        return get_bool(L, o, path, "invert", 0, &p->invert);
    case 1: /* ByteLevel */
        p->kind = NT_PT_BYTELEVEL;
        if ((st = get_bool(L, o, path, "add_prefix_space", 1, &p->add_prefix_space))) return st;
        if ((st = get_bool(L, o, path, "use_regex", 1, &p->use_regex))) return st;
        p->behavior = NT_ISOLATED;
        if (!p->use_regex) return NEMOTRON_OK;
        return nt_rx_compile(t, &p->rx, gpt2_regex, sizeof gpt2_regex - 1, NT_RX_ONIG, what,
                             L->err);
    case 2: { /* Digits: each digit alone, or runs of them */
        int individual;
        if ((st = get_bool(L, o, path, "individual_digits", 0, &individual))) return st;
        p->behavior = individual ? NT_ISOLATED : NT_CONTIGUOUS;
        return nt_rx_compile(t, &p->rx, "\\p{N}", 5, NT_RX_PCRE, what, L->err);
    }
    case 3: /* Whitespace: \w+|[^\w\s]+ kept, the rest removed */
        p->behavior = NT_REMOVED;
        p->invert = 1;
        return nt_rx_compile(t, &p->rx, "\\w+|[^\\w\\s]+", 12, NT_RX_ONIG, what, L->err);
    case 4: /* WhitespaceSplit: split on char::is_whitespace, removed */
        p->behavior = NT_REMOVED;
        return nt_rx_compile(t, &p->rx, "\\p{White_Space}", 15, NT_RX_PCRE, what, L->err);
    case 5: /* Punctuation */
        if ((st = get_behavior(L, o, path, 0, NT_ISOLATED, &p->behavior))) return st;
        return nt_rx_compile(t, &p->rx, punct_regex, sizeof punct_regex - 1, NT_RX_PCRE, what,
                             L->err);
    default: { /* CharDelimiterSplit */
        char ch[4];
        int len;
        if ((st = get_char(L, o, path, "delimiter", ch, &len))) return st;
        p->behavior = NT_REMOVED;
        return nt_rx_compile(t, &p->rx, ch, (size_t)len, NT_RX_LITERAL, what, L->err);
    }
    }
}

/* ---- the model's options and byte tables ---- */

/* Whether vocab entry v survived (a later duplicate key replaces it). */
static int live(const struct ld *L, const struct vent *v) {
    return !L->vocab_dups ||
           nt_strmap_get(&L->t->vocab_text, L->t->arena + v->off, v->len) == v->id;
}

static nemotron_status build_model(struct ld *L, json_object *model) {
    struct nt_tokenizer *t = L->t;
    struct nt_bpe *b = &t->bpe;
    nemotron_status st;
    const char *s;
    size_t len;
    json_object *drop = member(model, "dropout");
    if (drop) {
        if (!json_object_is_type(drop, json_type_double) &&
            !json_object_is_type(drop, json_type_int))
            return bad(L, NEMOTRON_ERR_FORMAT, "model.dropout: expected a number or null");
        /* tokenizers treats 0 as no dropout */
        if (json_object_get_double(drop) != 0.0)
            return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                       "model.dropout: BPE dropout (%g) is not supported",
                       json_object_get_double(drop));
    }
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        if ((st = get_str(L, model, "model", affixes[i], 0, &s, &len))) return st;
        if (s && len)
            return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                       "model.%s: \"%.*s\" is not supported (only null)", affixes[i], TOK(s, len));
    }
    if ((st = get_bool(L, model, "model", "byte_fallback", 0, &b->byte_fallback))) return st;
    if ((st = get_bool(L, model, "model", "ignore_merges", 0, &b->ignore_merges))) return st;
    if ((st = get_bool(L, model, "model", "fuse_unk", 0, &b->fuse_unk))) return st;
    if ((st = get_str(L, model, "model", "unk_token", 0, &s, &len))) return st;
    b->unk_id = -1;
    if (s) {
        /* a missing unk_token only fails when a character needs it, as in tokenizers */
        b->unk_id = nt_strmap_get(&t->vocab_text, s, len);
        if (b->unk_id < 0) b->unk_id = -2;
    }
    b->byte_level = t->n_pre > 0 && t->pre[t->n_pre - 1].kind == NT_PT_BYTELEVEL;
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->fallback_id[i] = nt_strmap_get(&t->vocab_text, name, 6);
        char chr[4];
        int clen = nt_utf8_put(nt_byte_to_cp[i], chr);
        b->byte_id[i] = b->byte_level ? nt_strmap_get(&t->vocab_text, chr, (size_t)clen) : -1;
    }
    if (!b->byte_level) {
        b->vocab = t->vocab_text; /* words are looked up as they are */
        return NEMOTRON_OK;
    }
    /* byte-level: words stay raw bytes; the vocabulary is looked up through the inverse map.
     * A key with a character outside the alphabet can never be a word's piece. */
    size_t total = 0;
    for (size_t i = 0; i < L->n_ve; i++) total += L->ve[i].len;
    t->raw_arena = nt_alloc(total + 1);
    if (!t->raw_arena || nt_strmap_init(&b->vocab, L->n_ve, t->raw_arena)) return nomem(L);
    t->bpe_vocab_owned = 1;
    struct vent *raw = nt_alloc((L->n_ve + 1) * sizeof *raw);
    if (!raw) return nomem(L);
    size_t used = 0, n_raw = 0;
    for (size_t i = 0; i < L->n_ve; i++) {
        const struct vent *v = &L->ve[i];
        if (!live(L, v)) continue;
        const unsigned char *k = (const unsigned char *)t->arena + v->off;
        size_t j = 0, o = used;
        while (j < v->len) {
            size_t clen;
            uint32_t cp;
            nt_utf8_step(k + j, v->len - j, &clen, &cp); /* keys are valid UTF-8 */
            int byte = nt_cp_to_byte(cp);
            if (byte < 0) break;
            t->raw_arena[o++] = (char)byte;
            j += clen;
        }
        if (j < v->len) continue;
        raw[n_raw++] = (struct vent){(uint32_t)used, (uint32_t)(o - used), v->id};
        used = o;
    }
    put_all(&b->vocab, raw, n_raw);
    nt_free(raw);
    return NEMOTRON_OK;
}

/* ---- added tokens ---- */

static int trie_add(struct nt_trie *tr, const unsigned char *s, size_t n, int tok, size_t *cap) {
    if (n == 0) return 0; /* an empty pattern never matches in tokenizers' trie */
    int32_t parent = -1;  /* -1: the root, whose children hang from root[first byte] */
    for (size_t i = 0; i < n; i++) {
        int32_t c = parent < 0 ? tr->root[s[0]] : tr->node[parent].child;
        while (c >= 0 && tr->node[c].byte != s[i]) c = tr->node[c].sibling;
        if (c < 0) {
            if (reserve((void **)&tr->node, cap, (size_t)tr->n_node, sizeof *tr->node)) return -1;
            c = tr->n_node++;
            int32_t *link = parent < 0 ? &tr->root[s[0]] : &tr->node[parent].child;
            tr->node[c] = (struct nt_tnode){-1, *link, -1, s[i]};
            *link = c;
        }
        parent = c;
    }
    if (tr->node[parent].tok < 0) { /* of equal patterns the first wins (aho-corasick) */
        tr->node[parent].tok = tok;
        tr->n_tok++;
    }
    return 0;
}

static nemotron_status parse_added(struct ld *L, json_object *root) {
    struct nt_tokenizer *t = L->t;
    json_object *list = member(root, "added_tokens");
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 256; i++) t->trie[k].root[i] = -1;
    }
    if (!list) return NEMOTRON_OK;
    if (!json_object_is_type(list, json_type_array))
        return bad(L, NEMOTRON_ERR_FORMAT, "added_tokens: expected a list");
    size_t n = json_object_array_length(list), total = 0;
    if (n > INT32_MAX / 2) return bad(L, NEMOTRON_ERR_UNSUPPORTED, "added_tokens: too many");
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        json_object *c = member(e, "content");
        if (!e || !json_object_is_type(e, json_type_object))
            return bad(L, NEMOTRON_ERR_FORMAT, "added_tokens[%zu]: expected an object", i);
        if (!c || !json_object_is_type(c, json_type_string))
            return bad(L, NEMOTRON_ERR_FORMAT, "added_tokens[%zu].content: expected a string", i);
        total += (size_t)json_object_get_string_len(c) + 1;
    }
    t->added_arena = nt_alloc(total + 1);
    t->added = nt_calloc(n ? n : 1, sizeof *t->added);
    if (!t->added_arena || !t->added || nt_strmap_init(&t->added_map, n, t->added_arena))
        return nomem(L);
    size_t used = 0;
    int32_t max_added = -1; /* the largest id given so far (added_tokens_map.values().max()) */
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(list, i);
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        const char *s;
        size_t len;
        uint64_t file_id;
        struct nt_added a = {0};
        int sw, ls, rs, nz, sp;
        nemotron_status st;
        char what[96];
        snprintf(what, sizeof what, "%s.id", path);
        if ((st = get_str(L, e, path, "content", 1, &s, &len)) ||
            (st = get_uint(L, member(e, "id"), what, UINT32_MAX, &file_id)) ||
            (st = get_bool(L, e, path, "special", 0, &sp)) ||
            (st = get_bool(L, e, path, "single_word", 0, &sw)) ||
            (st = get_bool(L, e, path, "lstrip", 0, &ls)) ||
            (st = get_bool(L, e, path, "rstrip", 0, &rs)) ||
            (st = get_bool(L, e, path, "normalized", !sp, &nz)))
            return st;
        if (len == 0) continue; /* tokenizers ignores empty tokens */
        int32_t prev = nt_strmap_get(&t->added_map, s, len);
        if (prev >= 0) {
            /* the same content again: its id stays, the flags are the newest */
            for (int j = 0; j < t->n_added; j++)
                if (t->added[j].id == prev && t->added[j].len == len &&
                    !memcmp(t->added[j].text, s, len)) {
                    struct nt_added *o = &t->added[j];
                    o->single_word = (unsigned char)sw;
                    o->lstrip = (unsigned char)ls;
                    o->rstrip = (unsigned char)rs;
                    o->special |= (unsigned char)sp;
                }
            continue;
        }
        int32_t id = nt_strmap_get(&t->vocab_text, s, len);
        if (id < 0) {
            int32_t vs = t->n_model;
            id = max_added < 0 ? vs : (max_added >= vs || vs == 0) ? max_added + 1 : vs;
        }
        if (id < 0 || id >= INT32_MAX - 1)
            return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: id overflow", path);
        if (id > max_added) max_added = id;
        memcpy(t->added_arena + used, s, len);
        t->added_arena[used + len] = 0;
        a.text = t->added_arena + used;
        a.len = (uint32_t)len;
        a.id = id;
        a.single_word = (unsigned char)sw;
        a.lstrip = (unsigned char)ls;
        a.rstrip = (unsigned char)rs;
        a.normalized = (unsigned char)nz;
        a.special = (unsigned char)sp;
        nt_strmap_put(&t->added_map, (uint32_t)used, (uint32_t)len, id);
        used += len + 1;
        t->added[t->n_added++] = a;
    }
    return NEMOTRON_OK;
}

static nemotron_status build_ids(struct ld *L) {
    struct nt_tokenizer *t = L->t;
    int64_t max = -1;
    for (size_t i = 0; i < L->n_ve; i++) max = L->ve[i].id > max ? L->ve[i].id : max;
    for (int i = 0; i < t->n_added; i++) max = t->added[i].id > max ? t->added[i].id : max;
    /* ids index a table (and the model's embedding rows): a vocabulary with ids far beyond
     * its size is refused rather than given a huge table; real files are dense */
    int64_t entries = t->n_model + t->n_added;
    if (max >= 2 * entries + 256)
        return bad(
            L, NEMOTRON_ERR_UNSUPPORTED,
            "model.vocab: id %lld is far beyond the %lld tokens (sparse ids are not supported)",
            (long long)max, (long long)entries);
    t->n_ids = (int32_t)(max + 1);
    t->ids = nt_calloc((size_t)t->n_ids + 1, sizeof *t->ids);
    if (!t->ids) return nomem(L);
    for (size_t i = 0; i < L->n_ve; i++) {
        const struct vent *v = &L->ve[i];
        if (!live(L, v)) continue;
        struct nt_idinfo *d = &t->ids[v->id];
        if (d->text)
            return bad(L, NEMOTRON_ERR_FORMAT,
                       "model.vocab: \"%.*s\" and \"%.*s\" have the same id %d",
                       TOK(d->text, d->len), TOK(t->arena + v->off, v->len), (int)v->id);
        d->text = t->arena + v->off;
        d->len = v->len;
    }
    for (int i = 0; i < t->n_added; i++) {
        const struct nt_added *a = &t->added[i];
        struct nt_idinfo *d = &t->ids[a->id];
        d->text = a->text; /* decode shows the added content (added vocabulary first) */
        d->len = a->len;
        d->special = a->special;
    }
    /* tries: non-normalized tokens match the raw text, normalized ones the normalized text */
    size_t cap[2] = {0, 0};
    for (int i = 0; i < t->n_added; i++) {
        const struct nt_added *a = &t->added[i];
        int k = a->normalized ? 1 : 0;
        if (k && t->n_norm) {
            char *nrm;
            size_t nlen;
            nemotron_status st = nt_normalize(t, NULL, a->text, a->len, &nrm, &nlen, L->err);
            if (st) return st;
            int rc = trie_add(&t->trie[1], (const unsigned char *)nrm, nlen, i, &cap[1]);
            nt_free(nrm);
            if (rc) return nomem(L);
        } else if (trie_add(&t->trie[k], (const unsigned char *)a->text, a->len, i, &cap[k])) {
            return nomem(L);
        }
        if (a->single_word && !t->word_rx) {
            struct nt_rx rx;
            char what[300];
            snprintf(what, sizeof what, "%s: added_tokens", t->name);
            /* Rust regex's \w (Unicode Word): Alphabetic, M, Nd, Pc, Join_Control */
            static const char w[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
            nemotron_status st = nt_rx_compile(t, &rx, w, sizeof w - 1, NT_RX_PCRE, what, L->err);
            if (st) return st;
            t->word_rx = rx.code; /* the code alone: the rest (its source) goes */
            rx.code = NULL;
            nt_rx_free(&rx);
        }
    }
    return NEMOTRON_OK;
}

/* ---- post-processor ---- */

static nemotron_status check_id(struct ld *L, const char *path, uint64_t id) {
    if (id >= (uint64_t)L->t->n_ids)
        return bad(L, NEMOTRON_ERR_FORMAT, "%s: id %llu is outside the vocabulary (%d ids)", path,
                   (unsigned long long)id, (int)L->t->n_ids);
    return NEMOTRON_OK;
}

/* Wraps the current head/tail: new head = pre ++ head, new tail = tail ++ post. */
static nemotron_status wrap(struct ld *L, const int32_t *pre, int n_pre, const int32_t *post,
                            int n_post) {
    if (L->n_head + n_pre > 4096 || L->n_tail + n_post > 4096)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED, "post_processor: more than 4096 added ids");
    int32_t *h = nt_alloc((size_t)(L->n_head + n_pre + 1) * sizeof *h);
    int32_t *t = nt_alloc((size_t)(L->n_tail + n_post + 1) * sizeof *t);
    if (!h || !t) {
        nt_free(h);
        nt_free(t);
        return nomem(L);
    }
    if (n_pre) memcpy(h, pre, (size_t)n_pre * sizeof *h);
    if (L->n_head) memcpy(h + n_pre, L->head, (size_t)L->n_head * sizeof *h);
    if (L->n_tail) memcpy(t, L->tail, (size_t)L->n_tail * sizeof *t);
    if (n_post) memcpy(t + L->n_tail, post, (size_t)n_post * sizeof *t);
    nt_free(L->head);
    nt_free(L->tail);
    L->head = h;
    L->tail = t;
    L->n_head += n_pre;
    L->n_tail += n_post;
    return NEMOTRON_OK;
}

/* Roberta's / Bert's [token, id] pair. */
static nemotron_status get_tok_pair(struct ld *L, json_object *o, const char *path, const char *key,
                                    int32_t *id) {
    json_object *v = member(o, key);
    char what[300];
    snprintf(what, sizeof what, "%s.%s[1]", path, key);
    if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2)
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.%s: expected [token, id]", path, key);
    uint64_t x = 0;
    nemotron_status st = get_uint(L, json_object_array_get_idx(v, 1), what, UINT32_MAX, &x);
    if (!st) st = check_id(L, what, x);
    *id = (int32_t)x;
    return st;
}

static nemotron_status template_single(struct ld *L, json_object *o, const char *path) {
    json_object *single = member(o, "single"), *specials = member(o, "special_tokens");
    if (!single || !json_object_is_type(single, json_type_array))
        return bad(L, NEMOTRON_ERR_FORMAT, "%s.single: expected a list of pieces", path);
    int32_t pre[4096], post[4096];
    int n_pre = 0, n_post = 0, n_seq = 0;
    for (size_t i = 0; i < json_object_array_length(single); i++) {
        json_object *piece = json_object_array_get_idx(single, i);
        json_object *sp = member(piece, "SpecialToken"), *seq = member(piece, "Sequence");
        char where[300];
        snprintf(where, sizeof where, "%s.single[%zu]", path, i);
        if (seq) {
            const char *id;
            size_t len;
            nemotron_status st = get_str(L, seq, where, "id", 1, &id, &len);
            if (st) return st;
            if (strcmp(id, "A"))
                return bad(L, NEMOTRON_ERR_FORMAT, "%s: a single template takes only $A, not $%s",
                           where, id);
            n_seq++;
            continue;
        }
        if (!sp) return bad(L, NEMOTRON_ERR_FORMAT, "%s: expected SpecialToken or Sequence", where);
        const char *name;
        size_t len;
        nemotron_status st = get_str(L, sp, where, "id", 1, &name, &len);
        if (st) return st;
        json_object *def = member(specials, name), *ids = member(def, "ids");
        if (!ids || !json_object_is_type(ids, json_type_array))
            return bad(L, NEMOTRON_ERR_FORMAT, "%s.special_tokens[\"%s\"].ids: missing", path,
                       name);
        for (size_t j = 0; j < json_object_array_length(ids); j++) {
            char what[400];
            snprintf(what, sizeof what, "%s.special_tokens[\"%s\"].ids[%zu]", path, name, j);
            uint64_t x = 0;
            if ((st = get_uint(L, json_object_array_get_idx(ids, j), what, UINT32_MAX, &x)) ||
                (st = check_id(L, what, x)))
                return st;
            if ((n_seq ? n_post : n_pre) >= 4096)
                return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: too many ids", path);
            if (n_seq)
                post[n_post++] = (int32_t)x;
            else
                pre[n_pre++] = (int32_t)x;
        }
    }
    if (n_seq != 1)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                   "%s.single: %d $A pieces (only templates with one are supported)", path, n_seq);
    return wrap(L, pre, n_pre, post, n_post);
}

static nemotron_status add_post(struct ld *L, json_object *o, const char *path, int depth) {
    const char *type;
    nemotron_status st = get_type(L, o, path, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) return each_in_sequence(L, o, path, "processors", depth, add_post);
    if (!strcmp(type, "ByteLevel")) return NEMOTRON_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) return template_single(L, o, path);
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls, sep;
        if ((st = get_tok_pair(L, o, path, "cls", &cls)) ||
            (st = get_tok_pair(L, o, path, "sep", &sep)))
            return st;
        return wrap(L, &cls, 1, &sep, 1);
    }
    return bad(L, NEMOTRON_ERR_UNSUPPORTED,
               "%s.type: post-processor \"%s\" is not supported (supported: TemplateProcessing, "
               "ByteLevel, RobertaProcessing, BertProcessing, Sequence)",
               path, type);
}

/* ---- decoder ---- */

static nemotron_status add_dec(struct ld *L, json_object *o, const char *path, int depth) {
    struct nt_tokenizer *t = L->t;
    const char *type;
    nemotron_status st = get_type(L, o, path, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) return each_in_sequence(L, o, path, "decoders", depth, add_dec);
    static const char *known[] = {"ByteLevel", "ByteFallback", "Fuse", "Strip", "Replace"};
    int k = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(type, known[i])) k = i;
    if (k < 0)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED,
                   "%s.type: decoder \"%s\" is not supported (supported: ByteLevel, ByteFallback, "
                   "Fuse, Strip, Replace, Sequence)",
                   path, type);
    if (t->n_dec >= NT_MAX_STEPS)
        return bad(L, NEMOTRON_ERR_UNSUPPORTED, "%s: more than %d decoders", path, NT_MAX_STEPS);
    struct nt_dec *d = &t->dec[t->n_dec++];
    d->kind = (enum nt_dec_kind)k;
    if (d->kind == NT_DC_STRIP) {
        char what[300];
        uint64_t x = 0;
        if ((st = get_char(L, o, path, "content", d->strip_char, &d->strip_len))) return st;
        snprintf(what, sizeof what, "%s.start", path);
        if ((st = get_uint(L, member(o, "start"), what, SIZE_MAX / 4, &x))) return st;
        d->start = (size_t)x;
        snprintf(what, sizeof what, "%s.stop", path);
        if ((st = get_uint(L, member(o, "stop"), what, SIZE_MAX / 4, &x))) return st;
        d->stop = (size_t)x;
    } else if (d->kind == NT_DC_REPLACE) {
        const char *s;
        size_t len;
        if ((st = get_pattern(L, o, path, &d->rx))) return st;
        if ((st = get_str(L, o, path, "content", 1, &s, &len))) return st;
        d->content = dup_bytes(s, len);
        d->content_len = len;
        if (!d->content) return nomem(L);
    }
    return NEMOTRON_OK;
}

/* A bound on what one push of the streaming decoder writes: the longest token through the
 * decoder steps, each byte possibly a U+FFFD (3 bytes), plus up to 3 held bytes and a space. */
static void set_detok_cap(struct nt_tokenizer *t) {
    size_t longest = 0;
    for (int32_t i = 0; i < t->n_ids; i++)
        if (t->ids[i].len > longest) longest = t->ids[i].len;
    size_t L = longest;
    for (int i = 0; i < t->n_dec; i++) {
        const struct nt_dec *d = &t->dec[i];
        if (d->kind == NT_DC_BYTEFALLBACK && L < 3) L = 3;
        /* a Replace can put its content before every byte and at the end */
        if (d->kind == NT_DC_REPLACE) L = L * (d->content_len + 1) + d->content_len;
    }
    t->detok_cap = 3 * (L + 4) + 16;
}

/* ---- the whole file ---- */

static nemotron_status load(struct ld *L, const char *json, size_t len) {
    struct nt_tokenizer *t = L->t;
    struct nt_jspan vs, ms;
    L->src = json;
    L->n = len;
    L->cur = (struct nt_jcur){.s = json, .n = len, .name = t->name, .err = L->err};
    struct nt_jhooks hooks = {L, hook_member, hook_model};
    nemotron_status st = nt_json_scan(&L->cur, &hooks, &vs, &ms);
    if (st) return st;

    /* json-c reads a copy without the two big values (each replaced by an empty one) */
    struct nt_jspan cut[2] = {vs, ms};
    if (cut[0].end && cut[1].end && cut[1].start < cut[0].start) {
        struct nt_jspan x = cut[0];
        cut[0] = cut[1];
        cut[1] = x;
    }
    if (len > INT32_MAX) return bad(L, NEMOTRON_ERR_UNSUPPORTED, "larger than 2 GiB");
    char *rest = nt_alloc(len + 8);
    if (!rest) return nomem(L);
    size_t o = 0, from = 0;
    for (int i = 0; i < 2; i++) {
        if (!cut[i].end) continue;
        memcpy(rest + o, json + from, cut[i].start - from);
        o += cut[i].start - from;
        rest[o++] = json[cut[i].start] == '{' ? '{' : '[';
        rest[o++] = json[cut[i].start] == '{' ? '}' : ']';
        if (json[cut[i].start] != '{' && json[cut[i].start] != '[') {
            /* not an object or list: keep it, the shape check below names it */
            o -= 2;
            memcpy(rest + o, json + cut[i].start, cut[i].end - cut[i].start);
            o += cut[i].end - cut[i].start;
        }
        from = cut[i].end;
    }
    memcpy(rest + o, json + from, len - from);
    o += len - from;
    /* depth: the scanner allows 128 */
    json_tokener *tok = json_tokener_new_ex(200);
    if (!tok) {
        nt_free(rest);
        return nomem(L);
    }
    json_object *root = json_tokener_parse_ex(tok, rest, (int)o);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    nt_free(rest);
    if (jerr != json_tokener_success) {
        json_object_put(root);
        return bad(L, NEMOTRON_ERR_FORMAT, "json-c: %s", json_tokener_error_desc(jerr));
    }
    if (!json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return bad(L, NEMOTRON_ERR_FORMAT, "expected a JSON object at the top level");
    }
    json_object *model = member(root, "model"), *x;
    const char *type;
    size_t tlen;
    if (!model || !json_object_is_type(model, json_type_object)) {
        st = bad(L, NEMOTRON_ERR_FORMAT, "model: missing or not an object");
        goto done;
    }
    if ((st = get_str(L, model, "model", "type", 0, &type, &tlen))) goto done;
    if (type && strcmp(type, "BPE")) {
        st = bad(L, NEMOTRON_ERR_UNSUPPORTED,
                 "model.type: model \"%s\" is not supported (only BPE)", type);
        goto done;
    }
    if (!type && !L->have_merges) {
        st = bad(L, NEMOTRON_ERR_UNSUPPORTED, "model: no type and no merges: not a BPE model");
        goto done;
    }
    if ((st = build_vocab(L)) || (st = resolve_merges(L))) goto done;
    if ((x = member(root, "normalizer")) && (st = add_norm(L, x, "normalizer", 0))) goto done;
    if ((x = member(root, "pre_tokenizer")) && (st = add_pretok(L, x, "pre_tokenizer", 0)))
        goto done;
    for (int i = 0; i + 1 < t->n_pre; i++)
        if (t->pre[i].kind == NT_PT_BYTELEVEL) {
            st = bad(L, NEMOTRON_ERR_UNSUPPORTED,
                     "pre_tokenizer: ByteLevel followed by other pre-tokenizers is not supported");
            goto done;
        }
    if ((st = build_model(L, model)) || (st = parse_added(L, root)) || (st = build_ids(L)))
        goto done;
    if ((x = member(root, "post_processor")) && (st = add_post(L, x, "post_processor", 0)))
        goto done;
    if ((x = member(root, "decoder"))) {
        t->has_decoder = 1;
        if ((st = add_dec(L, x, "decoder", 0))) goto done;
    }
    t->post_ids = nt_alloc((size_t)(L->n_head + L->n_tail + 1) * sizeof *t->post_ids);
    if (!t->post_ids) {
        st = nomem(L);
        goto done;
    }
    if (L->n_head) memcpy(t->post_ids, L->head, (size_t)L->n_head * sizeof *L->head);
    if (L->n_tail) memcpy(t->post_ids + L->n_head, L->tail, (size_t)L->n_tail * sizeof *L->tail);
    t->n_post_head = L->n_head;
    t->n_post_tail = L->n_tail;
    set_detok_cap(t);
done:
    json_object_put(root);
    return st;
}

nemotron_status nt_tokenizer_load_bytes(const char *json, size_t len, const char *name,
                                        struct nt_tokenizer **out, struct nt_err *err) {
    *out = NULL;
    struct nt_tokenizer *t = nt_calloc(1, sizeof *t);
    if (!t) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", name ? name : "tokenizer");
    t->name = nt_strdup(name ? name : "tokenizer.json");
    if (!t->name) {
        nt_free(t);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory");
    }
    struct ld L = {.t = t, .err = err};
    nemotron_status st = load(&L, json, len);
    nt_free(L.ve);
    nt_free(L.mr);
    nt_free(L.chars);
    nt_free(L.cur.buf);
    nt_free(L.head);
    nt_free(L.tail);
    if (st) {
        nt_tokenizer_free(t);
        return st;
    }
    *out = t;
    return NEMOTRON_OK;
}

nemotron_status nt_tokenizer_load(const char *path, struct nt_tokenizer **out, struct nt_err *err) {
    *out = NULL;
    char *buf;
    size_t n;
    nemotron_status st = nt_read_file(path, MAX_FILE, "a tokenizer.json", &buf, &n, err);
    if (st) return st;
    st = nt_tokenizer_load_bytes(buf, n, path, out, err);
    nt_free(buf);
    return st;
}

void nt_tokenizer_free(struct nt_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < NT_MAX_STEPS; i++) {
        nt_rx_free(&t->pre[i].rx);
        nt_rx_free(&t->norm[i].rx);
        nt_free(t->norm[i].content);
        nt_rx_free(&t->dec[i].rx);
        nt_free(t->dec[i].content);
    }
    if (t->word_rx) pcre2_code_free(t->word_rx);
    if (t->gctx) pcre2_general_context_free(t->gctx);
    nt_strmap_free(&t->vocab_text);
    nt_strmap_free(&t->added_map);
    if (t->bpe_vocab_owned) nt_strmap_free(&t->bpe.vocab);
    nt_pairmap_free(&t->bpe.merges);
    nt_free(t->trie[0].node);
    nt_free(t->trie[1].node);
    nt_free(t->added);
    nt_free(t->ids);
    nt_free(t->post_ids);
    nt_free(t->arena);
    nt_free(t->raw_arena);
    nt_free(t->added_arena);
    nt_free(t->name);
    nt_free(t);
}
