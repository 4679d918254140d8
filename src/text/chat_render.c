/* chat_render.c - the Nemotron 3 chat template, written in C: messages and tools (JSON) in,
 * the prompt text out, byte for byte what jinja2 renders from
 * ../shared/data/nemotron-3-nano-chat-template.jinja (MODEL.md 5.3).
 *
 * Owns the JSON reader the chat code shares (Python's json.loads semantics, into json-c
 * objects) and the printers of Python values that the template's output goes through: str()
 * of None/bools/numbers/lists/dicts, repr() of strings inside containers, transformers' tojson
 * (json.dumps with ensure_ascii=False and the default ", " / ": " separators), str.strip().
 * The template's branches are followed in order, including its odd corners (a tool message
 * first in the conversation gets no user header; a system message without "content" opens no
 * system turn; a string tool_calls renders one empty call per character), so that whatever
 * jinja2 renders, this renders the same, and whatever makes jinja2 raise makes this fail with
 * NEMOTRON_ERR_ARG naming the message.
 *
 * Known gaps (inputs where the bytes differ from Python's, none reachable by a well-formed
 * request): an unassigned code point inside a list or dict that the template prints with
 * repr() comes out raw, where Python escapes it; a lone \ud800-\udfff escape reads as U+FFFD
 * (Python keeps the surrogate, and then cannot encode its own output); a key holding U+0000
 * and nesting deeper than JSON_MAX_DEPTH are refused as NEMOTRON_ERR_FORMAT. Numbers are read
 * and printed with strtod/snprintf, which assumes the "C" LC_NUMERIC locale.
 *
 * Invariant: every string handled here is valid UTF-8 (the reader rejects anything else and
 * turns lone \u surrogates into U+FFFD), so the code-point walks below never see bad bytes.
 */
#include "text/chat.h"
#include "text/utf8.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deeper than any real request, and it bounds the recursion of the reader and the printers
 * (Python's own limit is about 1000; json-c's default of 32 is too low for tool schemas). */
#define JSON_MAX_DEPTH 256

/* ============================================================================================
 * Growing byte buffer. A failed allocation sets `failed` and later writes are dropped; the
 * caller checks once at the end.
 */
struct sb {
    char *p;
    size_t n, cap;
    int failed;
};

static void sb_reserve(struct sb *b, size_t more) {
    if (b->failed) return;
    if (b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) {
        if (cap > SIZE_MAX / 2) {
            b->failed = 1;
            return;
        }
        cap *= 2;
    }
    char *p = nt_alloc(cap);
    if (!p) {
        b->failed = 1;
        return;
    }
    if (b->n) memcpy(p, b->p, b->n);
    nt_free(b->p);
    b->p = p;
    b->cap = cap;
}

static void sb_put(struct sb *b, const char *s, size_t n) {
    if (n == 0) return;
    sb_reserve(b, n);
    if (b->failed) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(struct sb *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_putc(struct sb *b, char c) { sb_put(b, &c, 1); }

static void sb_free(struct sb *b) {
    nt_free(b->p);
    memset(b, 0, sizeof *b);
}

/* ============================================================================================
 * UTF-8 and Python's whitespace
 */

/* 1 when s[0..n) is UTF-8 as Python's strict decoder takes it: no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf)
            k = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            k = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            k = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

/* Decodes the code point at s[*i] (valid UTF-8) and moves *i past it. */
static uint32_t utf8_next(const unsigned char *s, size_t *i) {
    unsigned c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
    uint32_t cp = c & (0x3f >> k);
    for (size_t j = 1; j <= k; j++) cp = cp << 6 | (s[*i + j] & 0x3f);
    *i += k + 1;
    return cp;
}

/* Length of the str.isspace() character that starts at s[0..n), 0 if none. */
static size_t space_at(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf) && s[2] >= 0x80)
        return 3; /* U+2000-200A, 2028, 2029, 202F */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

void nt_chat_strip(const char **s, size_t *len) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t n = *len, k;
    while (n && (k = space_at(p, n)) != 0) p += k, n -= k;
    for (;;) {
        /* a space character of k bytes ends the text: try the three lengths */
        size_t cut = 0;
        for (k = 1; k <= 3 && k <= n && !cut; k++)
            if (space_at(p + n - k, k) == k) cut = k;
        if (!cut) break;
        n -= cut;
    }
    *s = (const char *)p;
    *len = n;
}

/* ============================================================================================
 * The JSON reader (chat.h): Python's json.loads, into json-c objects.
 */
struct jr {
    const unsigned char *s;
    size_t n, i;
    int nonfinite, depth;
    struct sb tmp; /* the string or number being read */
    nemotron_status st;
    struct nt_err *err;
};

static int jr_fail(struct jr *r, nemotron_status st, const char *what) {
    if (r->st == NEMOTRON_OK) {
        r->st = st;
        if (st == NEMOTRON_ERR_NOMEM)
            nt_fail(r->err, st, "out of memory reading JSON");
        else
            nt_fail(r->err, st, "invalid JSON at byte %zu: %s", r->i, what);
    }
    return 0;
}

static void jr_ws(struct jr *r) {
    while (r->i < r->n &&
           (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

static int jr_lit(struct jr *r, const char *lit) {
    size_t k = strlen(lit);
    if (r->n - r->i >= k && memcmp(r->s + r->i, lit, k) == 0) {
        r->i += k;
        return 1;
    }
    return 0;
}

static void put_utf8(struct sb *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80)
        u[0] = (char)cp, k = 1;
    else if (cp < 0x800)
        u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3f)),
        u[2] = (char)(0x80 | (cp & 0x3f)), k = 3;
    else
        u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3f)),
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), k = 4;
    sb_put(b, u, k);
}

/* Reads a string (r->s[r->i] == '"') into r->tmp. */
static int jr_string(struct jr *r) {
    r->tmp.n = 0;
    sb_reserve(&r->tmp, 16);
    r->i++;
    for (;;) {
        size_t start = r->i;
        while (r->i < r->n && r->s[r->i] != '"' && r->s[r->i] != '\\' && r->s[r->i] >= 0x20) r->i++;
        sb_put(&r->tmp, (const char *)r->s + start, r->i - start);
        if (r->i >= r->n) return jr_fail(r, NEMOTRON_ERR_FORMAT, "unterminated string");
        unsigned c = r->s[r->i];
        if (c == '"') {
            r->i++;
            break;
        }
        if (c < 0x20) return jr_fail(r, NEMOTRON_ERR_FORMAT, "control character in a string");
        /* a backslash */
        if (r->n - r->i < 2) return jr_fail(r, NEMOTRON_ERR_FORMAT, "unterminated string");
        c = r->s[r->i + 1];
        const char *simple = strchr("\"\\/bfnrt", (int)c);
        if (c && simple) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            sb_putc(&r->tmp, out[simple - "\"\\/bfnrt"]);
            r->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (c != 'u' || r->n - r->i < 6 || !nt_hex4(r->s + r->i + 2, &cp))
            return jr_fail(r, NEMOTRON_ERR_FORMAT, "bad escape in a string");
        r->i += 6;
        if (cp >= 0xd800 && cp <= 0xdbff && r->n - r->i >= 6 && r->s[r->i] == '\\' &&
            r->s[r->i + 1] == 'u' && nt_hex4(r->s + r->i + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            r->i += 6;
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            /* a lone surrogate: Python keeps it (and could not encode the result); json-c
             * and this reader store U+FFFD */
            cp = 0xfffd;
        }
        put_utf8(&r->tmp, cp);
    }
    if (r->tmp.failed) return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    r->tmp.p[r->tmp.n] = 0; /* sb_put leaves an empty string unterminated */
    return 1;
}

static int jr_value(struct jr *r, struct json_object **out);

static int jr_number(struct jr *r, struct json_object **out) {
    size_t start = r->i;
    int is_float = 0;
    if (r->s[r->i] == '-') r->i++;
    if (r->i < r->n && r->s[r->i] == '0') {
        r->i++;
    } else if (r->i < r->n && r->s[r->i] >= '1' && r->s[r->i] <= '9') {
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    } else {
        return jr_fail(r, NEMOTRON_ERR_FORMAT, "expected a value");
    }
    if (r->i < r->n && r->s[r->i] == '.') {
        size_t d = ++r->i;
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
        if (r->i == d) return jr_fail(r, NEMOTRON_ERR_FORMAT, "no digit after the decimal point");
        is_float = 1;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        size_t d = r->i;
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
        if (r->i == d) return jr_fail(r, NEMOTRON_ERR_FORMAT, "no digit in the exponent");
        is_float = 1;
    }
    r->tmp.n = 0;
    sb_put(&r->tmp, (const char *)r->s + start, r->i - start);
    if (r->tmp.failed) return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    const char *text = r->tmp.p;
    struct json_object *o = NULL;
    if (!is_float) {
        char *end;
        errno = 0;
        if (text[0] == '-') {
            long long v = strtoll(text, &end, 10);
            if (errno == 0) o = json_object_new_int64(v);
        } else {
            unsigned long long v = strtoull(text, &end, 10);
            if (errno == 0)
                o = v <= INT64_MAX ? json_object_new_int64((int64_t)v) : json_object_new_uint64(v);
        }
        if (errno == 0 && !o) return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    }
    /* a float, or an integer too large for json-c: a double that keeps its text */
    if (!o) o = json_object_new_double_s(strtod(text, NULL), text);
    if (!o) return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    *out = o;
    return 1;
}

static int jr_value(struct jr *r, struct json_object **out) {
    *out = NULL;
    jr_ws(r);
    if (r->i >= r->n) return jr_fail(r, NEMOTRON_ERR_FORMAT, "expected a value");
    unsigned c = r->s[r->i];
    if (c == '{' || c == '[') {
        if (++r->depth > JSON_MAX_DEPTH)
            return jr_fail(r, NEMOTRON_ERR_FORMAT, "nested too deeply");
        int obj = c == '{';
        struct json_object *o = obj ? json_object_new_object() : json_object_new_array();
        if (!o) return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
        r->i++;
        jr_ws(r);
        if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
            r->i++;
            r->depth--;
            *out = o;
            return 1;
        }
        for (;;) {
            struct json_object *v;
            if (obj) {
                jr_ws(r);
                if (r->i >= r->n || r->s[r->i] != '"') {
                    json_object_put(o);
                    return jr_fail(r, NEMOTRON_ERR_FORMAT, "expected a key");
                }
                if (!jr_string(r)) {
                    json_object_put(o);
                    return 0;
                }
                if (memchr(r->tmp.p, 0, r->tmp.n)) {
                    /* json-c keys are C strings */
                    json_object_put(o);
                    return jr_fail(r, NEMOTRON_ERR_FORMAT, "a key holds U+0000");
                }
                jr_ws(r);
                if (r->i >= r->n || r->s[r->i] != ':') {
                    json_object_put(o);
                    return jr_fail(r, NEMOTRON_ERR_FORMAT, "expected ':'");
                }
                r->i++;
                char *key = nt_strdup(r->tmp.p);
                if (!key) {
                    json_object_put(o);
                    return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
                }
                int ok = jr_value(r, &v);
                if (ok && json_object_object_add(o, key, v) != 0) {
                    json_object_put(v);
                    ok = jr_fail(r, NEMOTRON_ERR_NOMEM, "");
                }
                nt_free(key);
                if (!ok) {
                    json_object_put(o);
                    return 0;
                }
            } else {
                if (!jr_value(r, &v)) {
                    json_object_put(o);
                    return 0;
                }
                if (json_object_array_add(o, v) != 0) {
                    json_object_put(v);
                    json_object_put(o);
                    return jr_fail(r, NEMOTRON_ERR_NOMEM, "");
                }
            }
            jr_ws(r);
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                continue;
            }
            if (r->i < r->n && r->s[r->i] == (obj ? '}' : ']')) {
                r->i++;
                break;
            }
            json_object_put(o);
            return jr_fail(r, NEMOTRON_ERR_FORMAT,
                           obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
        r->depth--;
        *out = o;
        return 1;
    }
    if (c == '"') {
        if (!jr_string(r)) return 0;
        *out = json_object_new_string_len(r->tmp.p, (int)r->tmp.n);
        return *out ? 1 : jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    }
    if (jr_lit(r, "null")) return 1;
    int t = jr_lit(r, "true");
    if (t || jr_lit(r, "false")) {
        *out = json_object_new_boolean(t);
        return *out ? 1 : jr_fail(r, NEMOTRON_ERR_NOMEM, "");
    }
    if (r->nonfinite) {
        const char *lit = jr_lit(r, "NaN")         ? "NaN"
                          : jr_lit(r, "Infinity")  ? "Infinity"
                          : jr_lit(r, "-Infinity") ? "-Infinity"
                                                   : NULL;
        if (lit) {
            double d = lit[0] == 'N' ? NAN : lit[0] == '-' ? -INFINITY : INFINITY;
            *out = json_object_new_double_s(d, lit);
            return *out ? 1 : jr_fail(r, NEMOTRON_ERR_NOMEM, "");
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return jr_number(r, out);
    return jr_fail(r, NEMOTRON_ERR_FORMAT, "expected a value");
}

nemotron_status nt_chat_json_read(const char *s, size_t len, int allow_nonfinite,
                                  struct json_object **out, struct nt_err *err) {
    *out = NULL;
    if (!s && len) return nt_fail(err, NEMOTRON_ERR_ARG, "JSON text is NULL");
    /* json-c measures strings in int */
    if (len > INT_MAX) return nt_fail(err, NEMOTRON_ERR_FORMAT, "JSON text longer than 2 GiB");
    if (!utf8_valid((const unsigned char *)s, len))
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "invalid JSON: not UTF-8");
    struct jr r = {(const unsigned char *)(s ? s : ""), len, 0, allow_nonfinite, 0, {0}, 0, err};
    struct json_object *o;
    int ok = jr_value(&r, &o);
    if (ok) {
        jr_ws(&r);
        if (r.i != r.n) {
            json_object_put(o);
            ok = jr_fail(&r, NEMOTRON_ERR_FORMAT, "text after the value");
        }
    }
    sb_free(&r.tmp);
    if (!ok) return r.st;
    *out = o;
    return NEMOTRON_OK;
}

/* ============================================================================================
 * Python's printing of JSON values
 */

/* The text of a double that stands for an integer too large for json-c, or NULL. */
static const char *bigint_text(struct json_object *o) {
    const char *t = json_object_get_userdata(o);
    if (!t || strpbrk(t, ".eEnNI")) return NULL;
    return t;
}

static void put_int(struct sb *b, struct json_object *o) {
    char t[32];
    int64_t v = json_object_get_int64(o);
    if (v == INT64_MAX)
        snprintf(t, sizeof t, "%llu", (unsigned long long)json_object_get_uint64(o));
    else
        snprintf(t, sizeof t, "%lld", (long long)v);
    sb_puts(b, t);
}

/* The decimal digits of the shortest string that reads back as x > 0, finite (what Python's
 * repr finds with David Gay's dtoa, mode 0): digits[0..*nd) and the decimal point's place
 * (x = 0.DIGITS * 10^*decpt). %.*e gives the nearest p-digit decimal; when it does not read
 * back, a neighbour one unit away still can (the wide side of a power of two), so both are
 * tried before p grows. 17 digits always read back. */
static void shortest_digits(double x, char digits[24], int *nd, int *decpt) {
    char t[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, x);
        /* t = D[.DDD]e±XX */
        uint64_t m = 0;
        const char *q = t;
        for (; *q && *q != 'e'; q++)
            if (*q != '.') m = m * 10 + (uint64_t)(*q - '0');
        int e = atoi(q + 1);
        uint64_t pow_p = 1;
        for (int j = 0; j < p; j++) pow_p *= 10;
        uint64_t cand_m[3] = {m, m + 1, m - 1};
        int cand_e[3] = {e, e, e};
        if (cand_m[1] == pow_p) cand_m[1] = pow_p / 10, cand_e[1] = e + 1;
        if (cand_m[2] < pow_p / 10) cand_m[2] = pow_p - 1, cand_e[2] = e - 1;
        for (int c = 0; c < 3; c++) {
            if (cand_m[c] == 0) continue;
            snprintf(t, sizeof t, "%llue%d", (unsigned long long)cand_m[c], cand_e[c] - p + 1);
            if (strtod(t, NULL) != x && p < 17) continue;
            snprintf(digits, 24, "%llu", (unsigned long long)cand_m[c]);
            int n = (int)strlen(digits);
            while (n > 1 && digits[n - 1] == '0') n--;
            *nd = n;
            *decpt = cand_e[c] + 1;
            return;
        }
    }
}

/* Python's repr(float) (== str(float)); json=1 gives json.dumps' spelling of the non-finite. */
static void put_float(struct sb *b, double d, int json) {
    if (isnan(d)) {
        sb_puts(b, json ? "NaN" : "nan");
        return;
    }
    if (isinf(d)) {
        sb_puts(b, d < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf"));
        return;
    }
    if (signbit(d)) sb_putc(b, '-');
    d = fabs(d);
    if (d == 0) {
        sb_puts(b, "0.0");
        return;
    }
    char digits[24] = "0", t[40];
    int nd = 1, decpt = 1; /* always set: 17 digits read back */
    shortest_digits(d, digits, &nd, &decpt);
    /* float_repr_style 'short', format code 'r': exponent form when decpt is outside (-4, 16] */
    if (decpt <= -4 || decpt > 16) {
        sb_putc(b, digits[0]);
        if (nd > 1) {
            sb_putc(b, '.');
            sb_put(b, digits + 1, (size_t)nd - 1);
        }
        snprintf(t, sizeof t, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
        sb_puts(b, t);
    } else if (decpt <= 0) {
        sb_puts(b, "0.");
        for (int j = 0; j < -decpt; j++) sb_putc(b, '0');
        sb_put(b, digits, (size_t)nd);
    } else if (decpt >= nd) {
        sb_put(b, digits, (size_t)nd);
        for (int j = 0; j < decpt - nd; j++) sb_putc(b, '0');
        sb_puts(b, ".0");
    } else {
        sb_put(b, digits, (size_t)decpt);
        sb_putc(b, '.');
        sb_put(b, digits + decpt, (size_t)(nd - decpt));
    }
}

static void put_number(struct sb *b, struct json_object *o, int json) {
    if (json_object_get_type(o) == json_type_int) {
        put_int(b, o);
        return;
    }
    const char *big = bigint_text(o);
    if (big)
        sb_puts(b, big);
    else
        put_float(b, json_object_get_double(o), json);
}

/* Assigned code points above U+007F that Python's str.isprintable() rejects, from Python 3.11
 * (Unicode 14): the categories Cc, Cf, Cs, Co, Zl, Zp and Zs other than space. Unassigned
 * code points (Cn), which Python also escapes, print raw here: a known gap, reached only by the
 * repr of a list or dict that holds one. */
static const uint32_t nonprintable[][2] = {
    {0x80, 0xa0},       {0xad, 0xad},       {0x600, 0x605},       {0x61c, 0x61c},
    {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},       {0x8e2, 0x8e2},
    {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f},     {0x2028, 0x202f},
    {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},     {0xd800, 0xf8ff},
    {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0x110bd, 0x110bd},   {0x110cd, 0x110cd},
    {0x13430, 0x13438}, {0x1bca0, 0x1bca3}, {0x1d173, 0x1d17a},   {0xe0001, 0xe0001},
    {0xe0020, 0xe007f}, {0xf0000, 0xffffd}, {0x100000, 0x10fffd},
};

static int printable(uint32_t cp) {
    if (cp < 0x80) return cp >= 0x20 && cp < 0x7f;
    for (size_t j = 0; j < sizeof nonprintable / sizeof nonprintable[0]; j++)
        if (cp >= nonprintable[j][0] && cp <= nonprintable[j][1]) return 0;
    return 1;
}

/* Python's repr(str): single quotes unless the text has ' and no ". */
static void put_str_repr(struct sb *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    char t[16];
    sb_putc(b, q);
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t cp = utf8_next(u, &i);
        if (cp == (uint32_t)q || cp == '\\') {
            sb_putc(b, '\\');
            sb_putc(b, (char)cp);
        } else if (cp == '\t') {
            sb_puts(b, "\\t");
        } else if (cp == '\n') {
            sb_puts(b, "\\n");
        } else if (cp == '\r') {
            sb_puts(b, "\\r");
        } else if (printable(cp)) {
            sb_put(b, s + at, i - at);
        } else {
            snprintf(t, sizeof t,
                     cp <= 0xff     ? "\\x%02x"
                     : cp <= 0xffff ? "\\u%04x"
                                    : "\\U%08x",
                     cp);
            sb_puts(b, t);
        }
    }
    sb_putc(b, q);
}

/* json.dumps(s, ensure_ascii=False) of a string. */
static void put_str_json(struct sb *b, const char *s, size_t n) {
    char t[8];
    sb_putc(b, '"');
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                                      : NULL;
        if (!esc && c >= 0x20) continue;
        sb_put(b, s + start, i - start);
        if (!esc) {
            snprintf(t, sizeof t, "\\u%04x", c);
            esc = t;
        }
        sb_puts(b, esc);
        start = i + 1;
    }
    sb_put(b, s + start, n - start);
    sb_putc(b, '"');
}

/* repr (mode 0) or json.dumps (mode 1) of any JSON value. */
static void put_value(struct sb *b, struct json_object *o, int json) {
    switch (json_object_get_type(o)) {
    case json_type_null: sb_puts(b, json ? "null" : "None"); break;
    case json_type_boolean:
        sb_puts(b,
                json_object_get_boolean(o) ? (json ? "true" : "True") : (json ? "false" : "False"));
        break;
    case json_type_int:
    case json_type_double: put_number(b, o, json); break;
    case json_type_string:
        if (json)
            put_str_json(b, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        else
            put_str_repr(b, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        break;
    case json_type_array: {
        size_t n = json_object_array_length(o);
        sb_putc(b, '[');
        for (size_t i = 0; i < n; i++) {
            if (i) sb_puts(b, ", ");
            put_value(b, json_object_array_get_idx(o, i), json);
        }
        sb_putc(b, ']');
        break;
    }
    case json_type_object: {
        int first = 1;
        sb_putc(b, '{');
        json_object_object_foreach(o, key, val) {
            if (!first) sb_puts(b, ", ");
            first = 0;
            if (json)
                put_str_json(b, key, strlen(key));
            else
                put_str_repr(b, key, strlen(key));
            sb_puts(b, ": ");
            put_value(b, val, json);
        }
        sb_putc(b, '}');
        break;
    }
    }
}

/* ============================================================================================
 * Template values: a JSON value, or jinja2's Undefined (a key that is not there; it prints as
 * nothing). JSON null is a defined value with o == NULL.
 */
struct val {
    struct json_object *o;
    int defined;
};

static struct val jv(struct json_object *o) {
    struct val v = {o, 1};
    return v;
}

/* x.key and x["key"]: jinja2 tries the attribute, then the item; none of the keys the template
 * reads is an attribute of a Python dict, str, list or number, so only a dict's entry counts. */
static struct val attr(struct val x, const char *key) {
    struct val v = {NULL, 0};
    if (x.defined && json_object_is_type(x.o, json_type_object))
        v.defined = json_object_object_get_ex(x.o, key, &v.o);
    return v;
}

static int is_str(struct val v) { return v.defined && json_object_is_type(v.o, json_type_string); }
static int is_map(struct val v) { return v.defined && json_object_is_type(v.o, json_type_object); }
static int is_list(struct val v) { return v.defined && json_object_is_type(v.o, json_type_array); }
static const char *sp(struct val v) { return json_object_get_string(v.o); }
static size_t sn(struct val v) { return (size_t)json_object_get_string_len(v.o); }

static int str_eq(struct val v, const char *s) {
    return is_str(v) && sn(v) == strlen(s) && memcmp(sp(v), s, sn(v)) == 0;
}

/* Python truth (the `default('', true)` filter keeps a value only when it is true). */
static int truthy(struct val v) {
    if (!v.defined || !v.o) return 0;
    switch (json_object_get_type(v.o)) {
    case json_type_boolean: return json_object_get_boolean(v.o);
    case json_type_int: return json_object_get_int64(v.o) != 0;
    case json_type_double: return bigint_text(v.o) || json_object_get_double(v.o) != 0;
    case json_type_string: return sn(v) > 0;
    case json_type_array: return json_object_array_length(v.o) > 0;
    case json_type_object: return json_object_object_length(v.o) > 0;
    default: return 1;
    }
}

/* str(v): what `{{ v }}`, `~` and the `string` filter print. */
static void put_str(struct sb *b, struct val v) {
    if (!v.defined) return;
    if (is_str(v))
        sb_put(b, sp(v), sn(v));
    else
        put_value(b, v.o, 0);
}

/* `v | trim`: str(v).strip() */
static void put_trimmed(struct sb *b, struct val v) {
    struct sb t = {0};
    if (!is_str(v)) put_str(&t, v);
    const char *s = is_str(v) ? sp(v) : t.p ? t.p : "";
    size_t n = is_str(v) ? sn(v) : t.n;
    if (t.failed) b->failed = 1;
    nt_chat_strip(&s, &n);
    sb_put(b, s, n);
    sb_free(&t);
}

/* A dict or list prints as tojson, anything else as str(); the template's rule for tool-call
 * arguments and extra schema keys. */
static void put_json_or_str(struct sb *b, struct val v) {
    if (is_map(v) || is_list(v))
        put_value(b, v.o, 1);
    else
        put_str(b, v);
}

static const char *find(const char *s, size_t n, const char *needle) {
    return memmem(s, n, needle, strlen(needle));
}

static const char *find_last(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    const char *last = NULL, *p = s;
    while ((p = memmem(p, n - (size_t)(p - s), needle, k)) != NULL) last = p++;
    return last;
}

/* ============================================================================================
 * The template
 */

/* The macro render_extra_keys: every key of a dict not in `handled`, as <key>value</key>. */
static void extra_keys(struct sb *b, struct val d, const char *const *handled) {
    if (!is_map(d)) return;
    json_object_object_foreach(d.o, key, val) {
        int skip = 0;
        for (const char *const *h = handled; *h; h++) skip |= strcmp(key, *h) == 0;
        if (skip) continue;
        sb_puts(b, "\n<");
        sb_puts(b, key);
        sb_putc(b, '>');
        put_json_or_str(b, jv(val));
        sb_puts(b, "</");
        sb_puts(b, key);
        sb_putc(b, '>');
    }
}

static const char TOOLS_HEAD[] =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";

/* Copied from the template (the literal after "\n</tools>"). */
static const char TOOLS_TAIL[] =
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...>"
    "</function> block must be nested within <tool_call></tool_call> XML tags\n- Required "
    "parameters MUST be specified\n- You may provide optional reasoning for your function call "
    "in natural language BEFORE the function call, but NOT after\n- If there is no function "
    "call available, answer the question like normal with your current knowledge and do not "
    "tell the user about function calls\n</IMPORTANT>";

static void render_tools(struct sb *b, struct json_object *tools) {
    static const char *const param_handled[] = {"name", "type", "description", "enum", NULL};
    static const char *const params_handled[] = {"type", "properties", "required", NULL};
    static const char *const tool_handled[] = {"type", "name", "description", "parameters", NULL};
    sb_puts(b, TOOLS_HEAD);
    size_t n = json_object_array_length(tools);
    for (size_t i = 0; i < n; i++) {
        struct val t = jv(json_object_array_get_idx(tools, i));
        struct val f = attr(t, "function");
        if (f.defined) t = f;
        sb_puts(b, "\n<function>\n<name>");
        put_str(b, attr(t, "name"));
        sb_puts(b, "</name>");
        struct val d = attr(t, "description");
        if (d.defined) {
            sb_puts(b, "\n<description>");
            put_trimmed(b, d);
            sb_puts(b, "</description>");
        }
        sb_puts(b, "\n<parameters>");
        struct val p = attr(t, "parameters"), props = attr(p, "properties");
        if (is_map(p) && is_map(props)) {
            json_object_object_foreach(props.o, name, fields) {
                struct val pf = jv(fields);
                sb_puts(b, "\n<parameter>\n<name>");
                sb_puts(b, name);
                sb_puts(b, "</name>");
                struct val v = attr(pf, "type");
                if (v.defined) {
                    sb_puts(b, "\n<type>");
                    put_str(b, v);
                    sb_puts(b, "</type>");
                }
                v = attr(pf, "description");
                if (v.defined) {
                    sb_puts(b, "\n<description>");
                    put_trimmed(b, v);
                    sb_puts(b, "</description>");
                }
                v = attr(pf, "enum");
                if (v.defined) {
                    sb_puts(b, "\n<enum>");
                    put_value(b, v.o, 1);
                    sb_puts(b, "</enum>");
                }
                extra_keys(b, pf, param_handled);
                sb_puts(b, "\n</parameter>");
            }
        }
        extra_keys(b, p, params_handled);
        struct val req = attr(p, "required");
        if (req.defined) {
            sb_puts(b, "\n<required>");
            put_value(b, req.o, 1);
            sb_puts(b, "</required>");
        }
        sb_puts(b, "\n</parameters>");
        extra_keys(b, t, tool_handled);
        sb_puts(b, "\n</function>");
    }
    sb_puts(b, TOOLS_TAIL);
}

/* Everything one render needs. */
struct render {
    struct sb *out;
    int trunc;     /* truncate_history_thinking */
    int last_user; /* ns.last_user_idx, relative to loop_messages */
    struct nt_err *err;
};

/* The tool calls of the assistant message messages[abs]. */
static nemotron_status render_calls(struct render *R, struct val calls, int abs) {
    struct sb *b = R->out;
    if (!is_list(calls)) {
        /* a dict iterates its keys, a string its characters: values with no attributes, so
         * each renders as a call without name or arguments */
        size_t n = 0;
        if (is_map(calls)) {
            n = (size_t)json_object_object_length(calls.o);
        } else {
            const unsigned char *s = (const unsigned char *)sp(calls);
            for (size_t i = 0; i < sn(calls);) utf8_next(s, &i), n++;
        }
        for (size_t i = 0; i < n; i++)
            sb_puts(b, "<tool_call>\n<function=>\n</function>\n</tool_call>\n");
        return NEMOTRON_OK;
    }
    size_t n = json_object_array_length(calls.o);
    for (size_t j = 0; j < n; j++) {
        struct val c = jv(json_object_array_get_idx(calls.o, j));
        struct val f = attr(c, "function");
        if (f.defined) c = f;
        sb_puts(b, "<tool_call>\n<function=");
        put_str(b, attr(c, "name"));
        sb_puts(b, ">\n");
        struct val args = attr(c, "arguments");
        if (args.defined) {
            struct json_object *parsed = NULL;
            if (is_str(args)) {
                /* the server step (chat.h): a string is the arguments' JSON */
                struct nt_err e;
                nemotron_status st = nt_chat_json_read(sp(args), sn(args), 1, &parsed, &e);
                if (st == NEMOTRON_ERR_NOMEM) return nt_fail(R->err, st, "out of memory");
                if (st != NEMOTRON_OK)
                    return nt_fail(R->err, NEMOTRON_ERR_ARG,
                                   "messages[%d].tool_calls[%zu]: \"arguments\" is a string but "
                                   "not JSON (%s)",
                                   abs, j, e.msg);
                args = jv(parsed);
            }
            if (!is_map(args)) {
                json_object_put(parsed);
                return nt_fail(R->err, NEMOTRON_ERR_ARG,
                               "messages[%d].tool_calls[%zu]: \"arguments\" is not an object (the "
                               "template fails: Can only get item pairs from a mapping.)",
                               abs, j);
            }
            json_object_object_foreach(args.o, key, val) {
                sb_puts(b, "<parameter=");
                sb_puts(b, key);
                sb_puts(b, ">\n");
                put_json_or_str(b, jv(val));
                sb_puts(b, "\n</parameter>\n");
            }
            json_object_put(parsed);
        }
        sb_puts(b, "</function>\n</tool_call>\n");
    }
    return NEMOTRON_OK;
}

static nemotron_status render_assistant(struct render *R, struct val m, int idx, int abs) {
    struct sb *b = R->out;
    struct val mc = attr(m, "content"), rc = attr(m, "reasoning_content");
    /* content: a string (text) or, when the message's content is a true non-string, that value */
    struct sb text = {0};
    int c_is_str = 1;
    const char *rs = is_str(rc) ? sp(rc) : NULL;
    size_t rn = rs ? sn(rc) : 0;
    if (rs) nt_chat_strip(&rs, &rn);
    if (rs && rn > 0) {
        sb_puts(&text, "<think>\n");
        sb_put(&text, sp(rc), sn(rc));
        sb_puts(&text, "\n</think>\n");
        if (truthy(mc)) put_str(&text, mc);
    } else if (!truthy(mc) || is_str(mc)) {
        const char *s = truthy(mc) ? sp(mc) : "";
        size_t n = truthy(mc) ? sn(mc) : 0;
        if (!find(s, n, "<think>") && !find(s, n, "</think>")) sb_puts(&text, "<think></think>");
        sb_put(&text, s, n);
    } else {
        c_is_str = 0;
    }
    if (text.failed) b->failed = 1;
    const char *cs = text.p ? text.p : "";
    size_t cn = text.n;
    int include = !(R->trunc && idx < R->last_user);
    struct val calls = attr(m, "tool_calls");
    int has_calls = 0;
    if (is_list(calls))
        has_calls = json_object_array_length(calls.o) > 0;
    else if (is_map(calls))
        has_calls = json_object_object_length(calls.o) > 0;
    else if (is_str(calls))
        has_calls = sn(calls) > 0;
    nemotron_status st = NEMOTRON_OK;
    if (has_calls) {
        sb_puts(b, "<|im_start|>assistant\n");
        const char *t = cs;
        size_t tn = cn;
        nt_chat_strip(&t, &tn);
        if (c_is_str && tn > 0) {
            if (include) {
                sb_put(b, t, tn);
                sb_putc(b, '\n');
            } else {
                const char *c = cs;
                size_t n = cn;
                const char *e = find_last(c, n, "</think>");
                if (e) {
                    n -= (size_t)(e + 8 - c);
                    c = e + 8;
                } else if ((e = find(c, n, "<think>")) != NULL) {
                    n = (size_t)(e - c);
                }
                nt_chat_strip(&c, &n);
                sb_puts(b, "<think></think>");
                sb_put(b, c, n);
                sb_putc(b, '\n');
            }
        } else {
            sb_puts(b, "<think></think>");
        }
        st = render_calls(R, calls, abs);
        sb_puts(b, "<|im_end|>\n");
    } else {
        /* content | default('', true) | string: the text, or str() of the non-string value */
        struct sb d = {0};
        if (!c_is_str) {
            put_str(&d, jv(mc.o));
            if (d.failed) b->failed = 1;
            cs = d.p ? d.p : "", cn = d.n;
        }
        const char *c = cs;
        size_t n = cn;
        sb_puts(b, "<|im_start|>assistant\n");
        if (!include && find(c, n, "<think>") && find(c, n, "</think>")) {
            /* c = "<think></think>" ~ c.split('</think>')[-1], then c | trim: only the end of
             * the rest is trimmed (its leading space stays unless the rest is all space) */
            const char *rest = find_last(c, n, "</think>") + 8, *t = rest;
            size_t tn = (size_t)(c + n - rest);
            nt_chat_strip(&t, &tn);
            sb_puts(b, "<think></think>");
            if (tn) sb_put(b, rest, (size_t)(t + tn - rest));
        } else {
            nt_chat_strip(&c, &n);
            sb_put(b, c, n);
        }
        sb_puts(b, "<|im_end|>\n");
        sb_free(&d);
    }
    sb_free(&text);
    return st;
}

static nemotron_status render_messages(struct render *R, struct json_object *msgs, int start) {
    struct sb *b = R->out;
    int n = (int)json_object_array_length(msgs);
    for (int i = start; i < n; i++) {
        int idx = i - start;
        struct val m = jv(json_object_array_get_idx(msgs, i));
        struct val role = attr(m, "role");
        if (str_eq(role, "assistant")) {
            nemotron_status st = render_assistant(R, m, idx, i);
            if (st != NEMOTRON_OK) return st;
        } else if (str_eq(role, "user") || str_eq(role, "system")) {
            sb_puts(b, "<|im_start|>");
            put_str(b, role);
            sb_putc(b, '\n');
            put_str(b, attr(m, "content"));
            sb_puts(b, "<|im_end|>\n");
        } else if (str_eq(role, "tool")) {
            /* loop.previtem is undefined for the first message: no user header then */
            if (idx > 0 &&
                !str_eq(attr(jv(json_object_array_get_idx(msgs, i - 1)), "role"), "tool"))
                sb_puts(b, "<|im_start|>user\n");
            sb_puts(b, "<tool_response>\n");
            put_str(b, attr(m, "content"));
            sb_puts(b, "\n</tool_response>\n");
            if (i == n - 1 ||
                !str_eq(attr(jv(json_object_array_get_idx(msgs, i + 1)), "role"), "tool"))
                sb_puts(b, "<|im_end|>\n");
        } else {
            /* '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' */
            if (!is_map(m))
                return nt_fail(R->err, NEMOTRON_ERR_ARG,
                               "messages[%d] is not an object (the template fails: no attribute "
                               "'role')",
                               i);
            if (!role.defined)
                return nt_fail(R->err, NEMOTRON_ERR_ARG,
                               "messages[%d] has no \"role\" (the template fails: 'dict object' "
                               "has no attribute 'role')",
                               i);
            if (!is_str(role))
                return nt_fail(R->err, NEMOTRON_ERR_ARG,
                               "messages[%d]: \"role\" is not a string (the template fails: can "
                               "only concatenate str)",
                               i);
            struct val c = attr(m, "content");
            if (!is_str(c))
                return nt_fail(R->err, NEMOTRON_ERR_ARG,
                               "messages[%d]: a message of role \"%.40s\" needs a string "
                               "\"content\" (the template fails: %s)",
                               i, sp(role),
                               c.defined ? "can only concatenate str"
                                         : "'dict object' has no attribute 'content'");
            sb_puts(b, "<|im_start|>");
            put_str(b, role);
            sb_putc(b, '\n');
            put_str(b, c);
            sb_puts(b, "<|im_end|>\n");
        }
    }
    return NEMOTRON_OK;
}

static nemotron_status render(struct json_object *msgs, struct json_object *tools,
                              const struct nt_chat_options *opt, struct sb *b, struct nt_err *err) {
    int n = (int)json_object_array_length(msgs);
    if (n == 0)
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "messages[0]: messages is empty (the template fails: list object has no "
                       "element 0)");
    struct val first = jv(json_object_array_get_idx(msgs, 0));
    struct val sys = {NULL, 1}; /* system_message = "" (defined, a string) */
    int start = 0;
    if (str_eq(attr(first, "role"), "system")) {
        sys = attr(first, "content");
        start = 1;
        if (sys.defined && !is_str(sys))
            return nt_fail(err, NEMOTRON_ERR_ARG,
                           "messages[0]: the system message's \"content\" is not a string (the "
                           "template fails: can only concatenate str)");
    }
    struct render R = {b, opt->truncate_history_thinking != 0, -1, err};
    for (int i = start; i < n; i++)
        if (str_eq(attr(jv(json_object_array_get_idx(msgs, i)), "role"), "user"))
            R.last_user = i - start;
    int have_tools = tools && json_object_array_length(tools) > 0;
    const char *ss = sys.defined && sys.o ? sp(sys) : "";
    size_t sl = sys.defined && sys.o ? sn(sys) : 0;
    if (sys.defined || have_tools) sb_puts(b, "<|im_start|>system\n");
    sb_put(b, ss, sl);
    if (have_tools) {
        if (sys.defined && sl > 0) sb_puts(b, "\n\n");
        render_tools(b, tools);
    }
    if (sys.defined || have_tools) sb_puts(b, "<|im_end|>\n");
    nemotron_status st = render_messages(&R, msgs, start);
    if (st != NEMOTRON_OK) return st;
    if (opt->add_generation_prompt)
        sb_puts(b, opt->enable_thinking ? "<|im_start|>assistant\n<think>\n"
                                        : "<|im_start|>assistant\n<think></think>");
    return NEMOTRON_OK;
}

nemotron_status nt_chat_render(const char *messages_json, size_t messages_len,
                               const char *tools_json, size_t tools_len,
                               const struct nt_chat_options *opt, char **out, size_t *out_len,
                               struct nt_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!opt) return nt_fail(err, NEMOTRON_ERR_ARG, "chat render: no options");
    struct json_object *msgs = NULL, *tools = NULL;
    nemotron_status st = nt_chat_json_read(messages_json, messages_len, 1, &msgs, err);
    if (st != NEMOTRON_OK) {
        nt_err_prefix(err, "messages: ");
        return st;
    }
    if (!json_object_is_type(msgs, json_type_array)) {
        json_object_put(msgs);
        return nt_fail(err, NEMOTRON_ERR_ARG, "messages is not a JSON array");
    }
    if (tools_json) {
        st = nt_chat_json_read(tools_json, tools_len, 1, &tools, err);
        if (st != NEMOTRON_OK) {
            nt_err_prefix(err, "tools: ");
            json_object_put(msgs);
            return st;
        }
        /* transformers takes a list of dicts (JSON schemas) or None */
        if (tools && !json_object_is_type(tools, json_type_array))
            st = nt_fail(err, NEMOTRON_ERR_ARG, "tools is not a JSON array or null");
        for (size_t i = 0; st == NEMOTRON_OK && tools && i < json_object_array_length(tools); i++)
            if (!json_object_is_type(json_object_array_get_idx(tools, i), json_type_object))
                st = nt_fail(err, NEMOTRON_ERR_ARG, "tools[%zu] is not an object", i);
    }
    struct sb b = {0};
    if (st == NEMOTRON_OK) st = render(msgs, tools, opt, &b, err);
    json_object_put(msgs);
    json_object_put(tools);
    if (st == NEMOTRON_OK && b.failed)
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "chat render: out of memory");
    if (st == NEMOTRON_OK && !b.p) {
        b.p = nt_alloc(1);
        if (!b.p)
            st = nt_fail(err, NEMOTRON_ERR_NOMEM, "chat render: out of memory");
        else
            b.p[0] = 0;
    }
    if (st != NEMOTRON_OK) {
        sb_free(&b);
        return st;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return NEMOTRON_OK;
}
