/* tokenizer_regex.c - the patterns of tokenizer.json on PCRE2: Oniguruma syntax translated,
 * compiled once (JIT), and matched with the find_iter semantics of the `onig` crate that
 * `tokenizers` uses.
 *
 * Owns the compiled code of each nt_rx (freed by nt_rx_free). Matching takes caller-owned
 * match data, so one compiled pattern serves many threads.
 *
 * Translation (Oniguruma, Unicode mode -> PCRE2 with PCRE2_UTF | PCRE2_UCP):
 *   \s \S  Oniguruma: U+0009..U+000D, U+0085, Zs, Zl, Zp = White_Space. PCRE2's \s adds
 *          U+180E, so both become \p{White_Space} / \P{White_Space}.
 *   \w \W  Oniguruma: Letter | Mark | Number | Connector_Punctuation. PCRE2 10.42's \w lacks
 *          Mark and Pc, so \w becomes [\p{L}\p{M}\p{N}\p{Pc}] (inside a class without the
 *          brackets); \W inside a class has no PCRE2 spelling and is refused.
 *   \h \H  Oniguruma: a hex digit (PCRE2: horizontal space): [0-9a-fA-F].
 *   \uHHHH Oniguruma (Ruby) escape: \x{HHHH}.
 *   (?m)   Ruby's dot-matches-newline: (?s).
 *   \d, \p{..}, classes, groups, lookaround mean the same in both and are copied.
 * Refused as unsupported: nested classes and && intersections (no PCRE2 equivalent).
 * Not translated: \b \B (word boundaries use PCRE2's \w), ^ $ (PCRE2 defaults); the
 * pre-tokenizer patterns of real tokenizers use neither.
 */
#include <stdio.h>

#include "tokenizer_impl.h"
#include "utf8.h"

#define W_CLASS "\\p{L}\\p{M}\\p{N}\\p{Pc}"

/* Appends src to out. out has room: the caller sized it for the largest expansion. */
static void put(char *out, size_t *o, const char *src) {
    size_t len = strlen(src);
    memcpy(out + *o, src, len);
    *o += len;
}

/* Copies p[*i] and the following bytes up to and including the first `close` (or the end). */
static void copy_through(const char *p, size_t n, size_t *i, char close, char *out, size_t *o) {
    while (*i < n) {
        char c = p[(*i)++];
        out[(*o)++] = c;
        if (c == close) break;
    }
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Translates p[0..n) into out (room for 12 * n + 16 bytes: "\w" -> 22 bytes is the largest
 * growth). Returns NULL, or a description of what cannot be translated. */
static const char *translate(const char *p, size_t n, char *out, size_t *olen) {
    size_t i = 0, o = 0;
    int in_class = 0;
    while (i < n) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            switch (e) {
            case 's':
                put(out, &o, "\\p{White_Space}");
                i += 2;
                continue;
            case 'S':
                put(out, &o, "\\P{White_Space}");
                i += 2;
                continue;
            case 'w':
                put(out, &o, in_class ? W_CLASS : "[" W_CLASS "]");
                i += 2;
                continue;
            case 'W':
                if (in_class) return "\\W inside a character class";
                put(out, &o, "[^" W_CLASS "]");
                i += 2;
                continue;
            case 'h':
                put(out, &o, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
                i += 2;
                continue;
            case 'H':
                if (in_class) return "\\H inside a character class";
                put(out, &o, "[^0-9a-fA-F]");
                i += 2;
                continue;
            case 'u':
                if (i + 5 < n && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
                    is_hex(p[i + 5])) {
                    put(out, &o, "\\x{");
                    memcpy(out + o, p + i + 2, 4);
                    o += 4;
                    out[o++] = '}';
                    i += 6;
                    continue;
                }
                break;
            case 'p':
            case 'P':
            case 'x':
                out[o++] = '\\';
                out[o++] = e;
                i += 2;
                if (i < n && p[i] == '{') copy_through(p, n, &i, '}', out, &o);
                continue;
            default: break;
            }
            /* any other escape: the backslash and the whole next character */
            out[o++] = '\\';
            i++;
            size_t len;
            uint32_t cp;
            if (nt_utf8_step((const unsigned char *)p + i, n - i, &len, &cp) != NT_U8_OK) len = 1;
            memcpy(out + o, p + i, len);
            o += len;
            i += len;
            continue;
        }
        if (in_class) {
            if (c == '[') {
                if (i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
                    copy_through(p, n, &i, ']', out, &o);
                    continue;
                }
                return "a nested character class";
            }
            if (c == '&' && i + 1 < n && p[i + 1] == '&') return "a class intersection (&&)";
            if (c == ']') in_class = 0;
            out[o++] = c;
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            out[o++] = p[i++];
            if (i < n && p[i] == '^') out[o++] = p[i++];
            if (i < n && p[i] == ']') out[o++] = p[i++]; /* a leading ']' is literal */
            continue;
        }
        if (c == '(' && i + 2 < n && p[i + 1] == '?') {
            /* inline options: Ruby's m is PCRE2's s */
            size_t j = i + 2;
            while (j < n && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) j++;
            if (j > i + 2 && j < n && (p[j] == ')' || p[j] == ':')) {
                out[o++] = '(';
                out[o++] = '?';
                for (size_t k = i + 2; k < j; k++) out[o++] = p[k] == 'm' ? 's' : p[k];
                i = j;
                continue;
            }
        }
        out[o++] = c;
        i++;
    }
    *olen = o;
    return NULL;
}

static void *rx_malloc(PCRE2_SIZE size, void *data) {
    (void)data;
    return nt_alloc(size);
}
static void rx_free(void *p, void *data) {
    (void)data;
    nt_free(p);
}

nemotron_status nt_rx_compile(struct nt_tokenizer *t, struct nt_rx *rx, const char *pat, size_t len,
                              int kind, const char *what, struct nt_err *err) {
    memset(rx, 0, sizeof *rx);
    if (kind == NT_RX_LITERAL) {
        rx->lit = nt_alloc(len + 1);
        if (!rx->lit) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
        memcpy(rx->lit, pat, len);
        rx->lit[len] = 0;
        rx->lit_len = len;
        return NEMOTRON_OK;
    }
    if (!t->gctx) {
        t->gctx = pcre2_general_context_create(rx_malloc, rx_free, NULL);
        if (!t->gctx) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
    }
    const char *src = pat;
    size_t slen = len;
    char *buf = NULL;
    if (kind == NT_RX_ONIG) {
        if (len > (SIZE_MAX - 16) / 12)
            return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: too long", what);
        buf = nt_alloc(12 * len + 16);
        if (!buf) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
        const char *bad = translate(pat, len, buf, &slen);
        if (bad) {
            nt_free(buf);
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "%s: the regex /%.*s/ uses %s, which this reader does not support", what,
                           (int)(len > 200 ? 200 : len), pat, bad);
        }
        src = buf;
    }
    pcre2_compile_context *cc = pcre2_compile_context_create(t->gctx);
    if (!cc) {
        nt_free(buf);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
    }
    int ec;
    PCRE2_SIZE eo;
    /* \C could split a UTF-8 character: matches must stay on character boundaries */
    rx->code = pcre2_compile((PCRE2_SPTR)src, slen, PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C,
                             &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!rx->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        nemotron_status st = nt_fail(
            err, NEMOTRON_ERR_UNSUPPORTED, "%s: the regex /%.*s/ does not compile (%s, at %zu)",
            what, (int)(len > 200 ? 200 : len), pat, (const char *)msg, (size_t)eo);
        nt_free(buf);
        return st;
    }
    nt_free(buf);
    /* the source as written, for the messages of failed matches */
    if (!(rx->lit = nt_alloc(len + 1)))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
    memcpy(rx->lit, pat, len);
    rx->lit[len] = 0;
    rx->lit_len = len;
    /* JIT is an optimisation: a pattern it cannot handle still runs in the interpreter. Both
     * modes nt_rx_find uses: complete matching, and hard partial matching of a window. */
    rx->jit = pcre2_jit_compile(rx->code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
    return NEMOTRON_OK;
}

void nt_rx_free(struct nt_rx *rx) {
    if (rx->code) pcre2_code_free(rx->code);
    nt_free(rx->lit);
    memset(rx, 0, sizeof *rx);
}

size_t nt_rx_first_window = NT_RX_FIRST_WINDOW;

nemotron_status nt_rx_run_init(struct nt_rx_run *r, const struct nt_tokenizer *t, size_t text_len,
                               struct nt_err *err) {
    memset(r, 0, sizeof *r);
    r->text_len = text_len;
    r->budget = NT_RX_BUDGET_BASE;
    r->budget += text_len > (UINT64_MAX - r->budget) / NT_RX_BUDGET_PER_BYTE
                     ? UINT64_MAX - r->budget
                     : (uint64_t)text_len * NT_RX_BUDGET_PER_BYTE;
    r->left = r->budget;
    if (!t->gctx) return NEMOTRON_OK; /* no pattern to match */
    if (!(r->md = pcre2_match_data_create(1, t->gctx)) ||
        !(r->mc = pcre2_match_context_create(t->gctx)))
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
    return NEMOTRON_OK;
}

void nt_rx_run_free(struct nt_rx_run *r) {
    if (r->md) pcre2_match_data_free(r->md);
    if (r->mc) pcre2_match_context_free(r->mc);
    r->md = NULL;
    r->mc = NULL;
}

/* One PCRE2 match of s[0..end) from pos under the context's limit; options: 0 or
 * PCRE2_PARTIAL_HARD. */
static int match_once(const struct nt_rx *rx, struct nt_rx_run *run, const char *s, size_t end,
                      size_t pos, uint32_t options) {
    int rc;
    if (rx->jit) {
        rc = pcre2_jit_match(rx->code, (PCRE2_SPTR)s, end, pos, options, run->md, run->mc);
        /* the JIT's 32 KB machine stack ran out: the interpreter keeps its frames on the heap */
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT) return rc;
    }
    return pcre2_match(rx->code, (PCRE2_SPTR)s, end, pos, options | PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK,
                       run->md, run->mc);
}

int nt_rx_find(const struct nt_rx *rx, struct nt_rx_run *run, const char *s, size_t n, size_t pos,
               size_t *ms, size_t *me) {
    if (!rx->code) {
        if (rx->lit_len == 0) {
            *ms = *me = pos;
            return 1;
        }
        if (n - pos < rx->lit_len) return 0;
        const char *hit = memmem(s + pos, n - pos, rx->lit, rx->lit_len);
        if (!hit) return 0;
        *ms = (size_t)(hit - s);
        *me = *ms + rx->lit_len;
        return 1;
    }
    /* The match first sees a window of the text after pos; PCRE2_PARTIAL_HARD reports when any
     * path of the match reached the window's end (its result could depend on what follows),
     * and the window grows by 4. A complete match or no match that never touched the end is
     * the one the whole text gives. The step limit grows by 4 likewise. Each attempt is
     * charged its step limit, and the window's bytes once it has grown past the first (a
     * single counted step may scan the window: a possessive repeat is one step). */
    uint64_t limit = NT_RX_FIRST_LIMIT;
    size_t window = nt_rx_first_window;
    int rc;
    for (;;) {
        size_t end = n;
        if (n - pos > window) {
            end = pos + window;
            while (end < n && ((unsigned char)s[end] & 0xC0) == 0x80) end++; /* a character's start */
        }
        if (limit > run->left) limit = run->left;
        if (limit > UINT32_MAX) limit = UINT32_MAX;
        uint64_t charge = limit + (window > nt_rx_first_window ? end - pos : 0);
        if (limit == 0 || charge > run->left) return NT_RX_OVER_BUDGET;
        run->left -= charge;
        pcre2_set_match_limit(run->mc, (uint32_t)limit);
        rc = match_once(rx, run, s, end, pos, end < n ? PCRE2_PARTIAL_HARD : 0);
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
            if (run->left == 0) return NT_RX_OVER_BUDGET;
            limit *= 4;
        } else if (rc == PCRE2_ERROR_PARTIAL) {
            window = window > SIZE_MAX / 4 ? SIZE_MAX : window * 4;
        } else {
            break;
        }
    }
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return rc;
    /* rc == 0: more groups than the ovector holds; the whole match is still there */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(run->md);
    *ms = ov[0];
    *me = ov[1];
    if (*ms > *me) *ms = *me; /* \K in a lookahead can report a start after the end */
    return 1;
}

int nt_rx_next(const struct nt_rx *rx, struct nt_rx_run *run, const char *s, size_t n,
               struct nt_rx_iter *it, size_t *ms, size_t *me) {
    for (;;) {
        if (it->pos > n) return 0;
        int r = nt_rx_find(rx, run, s, n, it->pos, ms, me);
        if (r <= 0) return r;
        if (*ms == *me && it->has_last && it->last_end == *me) {
            /* onig's FindMatches: no empty match right where the previous one ended; search
             * again one character further */
            if (it->pos >= n) {
                it->pos = n + 1;
            } else {
                size_t len;
                uint32_t cp;
                if (nt_utf8_step((const unsigned char *)s + it->pos, n - it->pos, &len, &cp) !=
                    NT_U8_OK)
                    len = 1;
                it->pos += len;
            }
            continue;
        }
        it->pos = *me;
        it->last_end = *me;
        it->has_last = 1;
        return 1;
    }
}

nemotron_status nt_rx_error(int rc, const struct nt_rx *rx, const struct nt_rx_run *run,
                            const char *what, struct nt_err *err) {
    int shown = rx->lit_len > 200 ? 200 : (int)rx->lit_len;
    const char *pat = rx->lit ? rx->lit : "", *more = rx->lit_len > 200 ? "..." : "";
    if (rc == NT_RX_OVER_BUDGET)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: the regex /%.*s%s/ backtracks too much: matching it over this %zu-byte "
                       "text needs more than %llu match steps (%u + %u per byte); the pattern, not "
                       "the text, is at fault",
                       what, shown, pat, more, run->text_len, (unsigned long long)run->budget,
                       NT_RX_BUDGET_BASE, NT_RX_BUDGET_PER_BYTE);
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "%s: matching the regex /%.*s%s/ failed: %s", what,
                   shown, pat, more, (const char *)msg);
}
