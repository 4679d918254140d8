/* tokenizer_json.c - a strict, fast JSON validator for tokenizer.json that hands model.vocab
 * and model.merges to the loader's own parsers as it meets them, and the cursor primitives
 * those parsers read with.
 *
 * Why: json-c takes ~0.27 s to parse a 9.7 MB tokenizer.json and ~0.15 s to free it (one
 * object per vocab entry and merge); this validates the same bytes in one pass of a few tens
 * of ms. The grammar is RFC 8259 as serde_json (what `tokenizers` uses) accepts it: UTF-8
 * text, no comments or trailing commas, no NaN, \u escapes with paired surrogates, nesting up
 * to 128. The hooks must consume exactly one value and validate what they read (they use the
 * same primitives, so every byte of the file is checked once). Owns nothing; the cursor's
 * decode buffer belongs to the caller.
 */
#include <stdio.h>

#include "tokenizer_impl.h"
#include "utf8.h"

/* serde_json's default recursion limit: deeper documents are refused by tokenizers too. */
#define MAX_DEPTH 128

void nt_json_line_col(const char *s, size_t off, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int nt_jcur_fail(struct nt_jcur *c, const char *what) {
    if (!c->failed) {
        size_t line, col;
        nt_json_line_col(c->s, c->p, &line, &col);
        nt_fail(c->err, NEMOTRON_ERR_FORMAT,
                "%s: invalid JSON at line %zu, column %zu (byte %zu): %s", c->name, line, col, c->p,
                what);
        c->failed = 1;
    }
    return -1;
}

/* Eight bytes that are all spaces: pretty-printed files are half indentation. */
static int eight_spaces(const char *s, size_t p, size_t n) {
    if (n - p < 8) return 0;
    uint64_t w;
    memcpy(&w, s + p, 8);
    return w == 0x2020202020202020ull;
}

void nt_jcur_ws(struct nt_jcur *c) {
    while (eight_spaces(c->s, c->p, c->n)) c->p += 8;
    while (c->p < c->n) {
        char ch = c->s[c->p];
        if (ch != ' ' && ch != '\n' && ch != '\r' && ch != '\t') break;
        c->p++;
    }
}

/* Validates the string at c->p (a '"'), leaving c->p after it. When out is not NULL, decodes
 * it: *out points into the source when it has no escapes, else into c->buf. */
static int string(struct nt_jcur *c, const char **out, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)c->s;
    size_t n = c->n, p = c->p + 1, k = 0;
    int escapes = 0;
    size_t start = p;
    /* pass 0 validates (and measures the decoded length); pass 1, only for strings with
     * escapes, decodes into c->buf */
    for (int pass = 0; pass < 2; pass++) {
        char *dst = pass ? c->buf : NULL;
        p = start;
        k = 0;
        for (;;) {
            size_t q = p;
            /* plain ASCII up to a quote, backslash, control or non-ASCII byte; eight bytes at
             * a time while none of those is among them */
            while (n - q >= 8) {
                uint64_t w, ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
                memcpy(&w, s + q, 8);
                uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');
                uint64_t stop =
                    ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | (w - ones * 0x20) | w;
                if (stop & high) break;
                q += 8;
            }
            while (q < n && s[q] != '"' && s[q] != '\\' && s[q] >= 0x20 && s[q] < 0x80) q++;
            if (dst) memcpy(dst + k, s + p, q - p);
            k += q - p;
            p = q;
            if (p >= n) {
                c->p = p;
                return nt_jcur_fail(c, "unterminated string");
            }
            unsigned char ch = s[p];
            if (ch == '"') break;
            if (ch < 0x20) {
                c->p = p;
                return nt_jcur_fail(c, "control character in a string");
            }
            if (ch >= 0x80) {
                size_t len;
                uint32_t cp;
                if (nt_utf8_step(s + p, n - p, &len, &cp) != NT_U8_OK) {
                    c->p = p;
                    return nt_jcur_fail(c, "invalid UTF-8");
                }
                if (dst) memcpy(dst + k, s + p, len);
                k += len;
                p += len;
                continue;
            }
            /* an escape */
            escapes = 1;
            if (p + 1 >= n) {
                c->p = p;
                return nt_jcur_fail(c, "unterminated string");
            }
            unsigned char e = s[p + 1];
            uint32_t cp;
            const char *map = e ? strchr("\"\\/bfnrt", e) : NULL;
            if (map) {
                static const char dec[] = "\"\\/\b\f\n\r\t";
                cp = (unsigned char)dec[map - "\"\\/bfnrt"];
                p += 2;
            } else if (e == 'u') {
                uint32_t v;
                if (p + 6 > n || !nt_hex4(s + p + 2, &v)) {
                    c->p = p;
                    return nt_jcur_fail(c, "bad \\u escape");
                }
                if (v >= 0xDC00 && v <= 0xDFFF) {
                    c->p = p;
                    return nt_jcur_fail(c, "lone trailing surrogate in a \\u escape");
                }
                if (v >= 0xD800 && v <= 0xDBFF) {
                    uint32_t lo;
                    if (p + 12 > n || s[p + 6] != '\\' || s[p + 7] != 'u' || !nt_hex4(s + p + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) {
                        c->p = p;
                        return nt_jcur_fail(c, "lone leading surrogate in a \\u escape");
                    }
                    p += 6;
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                }
                p += 6;
                cp = v;
            } else {
                c->p = p;
                return nt_jcur_fail(c, "invalid escape");
            }
            char u[4];
            int len = nt_utf8_put(cp, u);
            if (dst) memcpy(dst + k, u, (size_t)len);
            k += (size_t)len;
        }
        /* valid; decode into the buffer only when there were escapes */
        if (!out) break;
        if (!escapes) {
            *out = c->s + start;
            *out_len = p - start;
            break;
        }
        if (pass == 1) {
            *out = c->buf;
            *out_len = k;
            break;
        }
        if (k + 1 > c->buf_cap) {
            size_t cap = c->buf_cap ? c->buf_cap : 256;
            while (cap < k + 1) cap *= 2;
            char *b = nt_alloc(cap);
            if (!b) {
                nt_fail(c->err, NEMOTRON_ERR_NOMEM, "%s: out of memory", c->name);
                c->failed = 1;
                c->status = NEMOTRON_ERR_NOMEM;
                return -1;
            }
            nt_free(c->buf);
            c->buf = b;
            c->buf_cap = cap;
        }
    }
    c->p = p + 1;
    return 0;
}

int nt_jcur_string(struct nt_jcur *c, const char **out, size_t *len) { return string(c, out, len); }

static int digits(struct nt_jcur *c) {
    size_t p0 = c->p;
    while (c->p < c->n && c->s[c->p] >= '0' && c->s[c->p] <= '9') c->p++;
    return c->p > p0 ? 0 : nt_jcur_fail(c, "expected a digit");
}

int nt_jcur_number(struct nt_jcur *c, int *is_uint, uint64_t *v) {
    size_t p0 = c->p;
    int neg = c->p < c->n && c->s[c->p] == '-', frac = 0;
    if (neg) c->p++;
    if (c->p < c->n && c->s[c->p] == '0') {
        c->p++;
    } else if (digits(c)) {
        return -1;
    }
    size_t int_end = c->p;
    if (c->p < c->n && c->s[c->p] == '.') {
        c->p++;
        frac = 1;
        if (digits(c)) return -1;
    }
    if (c->p < c->n && (c->s[c->p] == 'e' || c->s[c->p] == 'E')) {
        c->p++;
        frac = 1;
        if (c->p < c->n && (c->s[c->p] == '+' || c->s[c->p] == '-')) c->p++;
        if (digits(c)) return -1;
    }
    if (is_uint) {
        /* a u32 for serde: digits only, within range (larger ones saturate past UINT32_MAX) */
        uint64_t x = 0;
        for (size_t i = p0; i < int_end && x <= UINT32_MAX; i++)
            x = x * 10 + (uint64_t)(c->s[i] - '0');
        *is_uint = !neg && !frac;
        *v = x;
    }
    return 0;
}

static int literal(struct nt_jcur *c, const char *word) {
    size_t len = strlen(word);
    if (c->n - c->p < len || memcmp(c->s + c->p, word, len))
        return nt_jcur_fail(c, "unexpected character");
    c->p += len;
    return 0;
}

/* What an object's walk looks for: at depth 1 the "model" member, inside it (model == 1) the
 * two big members. */
struct walk {
    const struct nt_jhooks *h;
    struct nt_jspan *vocab, *merges;
};

static int value(struct nt_jcur *c, int depth, struct walk *w, int model);

static int object(struct nt_jcur *c, int depth, struct walk *w, int model) {
    c->p++;
    nt_jcur_ws(c);
    if (c->p < c->n && c->s[c->p] == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        if (c->p >= c->n || c->s[c->p] != '"') return nt_jcur_fail(c, "expected a member name");
        const char *key = NULL;
        size_t klen = 0;
        if (string(c, w ? &key : NULL, &klen)) return -1;
        nt_jcur_ws(c);
        if (c->p >= c->n || c->s[c->p] != ':') return nt_jcur_fail(c, "expected ':'");
        c->p++;
        nt_jcur_ws(c);
        int which = -1, is_model = 0;
        if (w && model && klen == 5 && !memcmp(key, "vocab", 5)) which = 0;
        if (w && model && klen == 6 && !memcmp(key, "merges", 6)) which = 1;
        if (w && !model && depth == 1 && klen == 5 && !memcmp(key, "model", 5)) is_model = 1;
        size_t start = c->p;
        if (which >= 0) {
            /* the loader's parser reads (and validates) the value */
            if (c->p >= c->n) return nt_jcur_fail(c, "unexpected end of input");
            if (w->h->member(w->h->ctx, which, c)) return -1;
            struct nt_jspan *sp = which ? w->merges : w->vocab;
            sp->start = start;
            sp->end = c->p;
        } else if (is_model) {
            /* a later "model" replaces an earlier one (json-c and serde keep the last) */
            w->h->model_start(w->h->ctx);
            w->vocab->start = w->vocab->end = w->merges->start = w->merges->end = 0;
            if (c->p < c->n && c->s[c->p] == '{') {
                if (object(c, depth + 1, w, 1)) return -1;
            } else if (value(c, depth + 1, NULL, 0)) {
                return -1;
            }
        } else if (value(c, depth + 1, NULL, 0)) {
            return -1;
        }
        nt_jcur_ws(c);
        if (c->p >= c->n) return nt_jcur_fail(c, "unterminated object");
        if (c->s[c->p] == ',') {
            c->p++;
            nt_jcur_ws(c);
            continue;
        }
        if (c->s[c->p] == '}') {
            c->p++;
            return 0;
        }
        return nt_jcur_fail(c, "expected ',' or '}'");
    }
}

static int array(struct nt_jcur *c, int depth) {
    c->p++;
    nt_jcur_ws(c);
    if (c->p < c->n && c->s[c->p] == ']') {
        c->p++;
        return 0;
    }
    for (;;) {
        if (value(c, depth + 1, NULL, 0)) return -1;
        nt_jcur_ws(c);
        if (c->p >= c->n) return nt_jcur_fail(c, "unterminated array");
        if (c->s[c->p] == ',') {
            c->p++;
            nt_jcur_ws(c);
            continue;
        }
        if (c->s[c->p] == ']') {
            c->p++;
            return 0;
        }
        return nt_jcur_fail(c, "expected ',' or ']'");
    }
}

static int value(struct nt_jcur *c, int depth, struct walk *w, int model) {
    if (depth > MAX_DEPTH) return nt_jcur_fail(c, "nested more than 128 deep");
    if (c->p >= c->n) return nt_jcur_fail(c, "unexpected end of input");
    switch (c->s[c->p]) {
    case '{': return object(c, depth, w, model);
    case '[': return array(c, depth);
    case '"': return string(c, NULL, NULL);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default:
        if (c->s[c->p] == '-' || (c->s[c->p] >= '0' && c->s[c->p] <= '9'))
            return nt_jcur_number(c, NULL, NULL);
        return nt_jcur_fail(c, "unexpected character");
    }
}

int nt_jcur_skip(struct nt_jcur *c, int depth) { return value(c, depth, NULL, 0); }

nemotron_status nt_json_scan(struct nt_jcur *c, const struct nt_jhooks *h, struct nt_jspan *vocab,
                             struct nt_jspan *merges) {
    struct walk w = {h, vocab, merges};
    vocab->start = vocab->end = merges->start = merges->end = 0;
    c->p = 0;
    c->failed = 0;
    nt_jcur_ws(c);
    int rc = c->p < c->n && c->s[c->p] == '{' ? object(c, 1, &w, 0) : value(c, 1, NULL, 0);
    if (rc) return c->status ? c->status : NEMOTRON_ERR_FORMAT;
    nt_jcur_ws(c);
    if (c->p != c->n) {
        nt_jcur_fail(c, "trailing characters after the document");
        return NEMOTRON_ERR_FORMAT;
    }
    return NEMOTRON_OK;
}
