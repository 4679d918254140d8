/* tokenizer.c - encoding and decoding with a loaded tokenizer.json, step for step as
 * `tokenizers` (0.23) does it, and the streaming decoder.
 *
 * Encode (Tokenizer::encode_single_sequence): repair invalid UTF-8 -> split out added tokens
 * that match the raw text (normalized == false) -> normalize each remaining piece -> split out
 * added tokens that match the normalized text -> pre-tokenize (each step splits every piece
 * the previous one left; empty pieces vanish) -> BPE each word -> post-processor ids around it.
 * Decode (Tokenizer::decode): ids -> token strings (added content first) without skipped
 * special tokens -> the decoder's steps over the list of strings.
 *
 * Owns no state: every call keeps its working memory (PCRE2 match data, BPE scratch, copies)
 * to itself, so a const tokenizer can be used from any number of threads.
 */
#include <limits.h>
#include <stdio.h>

#include "tokenizer_impl.h"
#include "utf8.h"

static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* ---- a growable byte buffer ---- */

struct buf {
    char *p;
    size_t len, cap;
};

static int buf_need(struct buf *b, size_t more) {
    if (more > SIZE_MAX - b->len) return -1;
    if (b->len + more <= b->cap) return 0;
    size_t c = b->cap ? b->cap : 256;
    while (c < b->len + more) {
        if (c > SIZE_MAX / 2) return -1;
        c *= 2;
    }
    char *q = nt_alloc(c);
    if (!q) return -1;
    if (b->len) memcpy(q, b->p, b->len);
    nt_free(b->p);
    b->p = q;
    b->cap = c;
    return 0;
}

static int buf_add(struct buf *b, const void *s, size_t n) {
    if (buf_need(b, n)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

/* ---- character helpers ---- */

static uint32_t cp_at(const char *s, size_t n, size_t *len) {
    uint32_t cp = 0xFFFD;
    if (nt_utf8_step((const unsigned char *)s, n, len, &cp) != NT_U8_OK) cp = 0xFFFD;
    return cp;
}

/* The start of the last character of s[0..n), n > 0. */
static size_t last_char(const char *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

/* Length of the run of White_Space characters at the start of s[0..n). */
static size_t ws_prefix(const char *s, size_t n) {
    size_t i = 0, len;
    while (i < n && nt_is_white_space(cp_at(s + i, n - i, &len))) i += len;
    return i;
}

/* Where the run of White_Space characters at the end of s[0..n) begins. */
static size_t ws_suffix_start(const char *s, size_t n) {
    size_t i = n, len;
    while (i > 0) {
        size_t j = last_char(s, i);
        if (!nt_is_white_space(cp_at(s + j, i - j, &len))) break;
        i = j;
    }
    return i;
}

/* ---- normalizer ---- */

/* One Replace over s[0..n) into out (tokenizers: find_matches, every match replaced). */
static nemotron_status replace(const struct nt_tokenizer *t, const struct nt_rx *rx,
                               struct nt_rx_run *run, const char *content, size_t clen,
                               const char *s, size_t n, struct buf *out, const char *what,
                               struct nt_err *err) {
    out->len = 0;
    if (n == 0) return NEMOTRON_OK; /* find_matches("") is one empty non-match */
    struct nt_rx_iter it = {0};
    size_t prev = 0, ms, me;
    int r;
    while ((r = nt_rx_next(rx, run, s, n, &it, &ms, &me)) > 0) {
        if (buf_add(out, s + prev, ms - prev) || buf_add(out, content, clen)) goto oom;
        prev = me;
    }
    if (r < 0) return nt_rx_error(r, rx, run, what, err);
    if (buf_add(out, s + prev, n - prev)) goto oom;
    (void)t;
    return NEMOTRON_OK;
oom:
    return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", what);
}

nemotron_status nt_normalize(const struct nt_tokenizer *t, struct nt_rx_run *run, const char *s,
                             size_t n, char **out, size_t *out_len, struct nt_err *err) {
    struct buf a = {0}, b = {0};
    struct nt_rx_run own = {0};
    nemotron_status st = NEMOTRON_OK;
    *out = NULL;
    *out_len = 0;
    if (!run) {
        run = &own;
        if ((st = nt_rx_run_init(&own, t, n, err))) goto done;
    }
    if (buf_add(&a, s, n)) goto oom;
    for (int i = 0; i < t->n_norm; i++) {
        const struct nt_norm *nm = &t->norm[i];
        b.len = 0;
        switch (nm->kind) {
        case NT_NM_STRIP: {
            size_t lo = nm->left ? ws_prefix(a.p, a.len) : 0;
            size_t hi = nm->right ? ws_suffix_start(a.p + lo, a.len - lo) + lo : a.len;
            if (buf_add(&b, a.p + lo, hi - lo)) goto oom;
            break;
        }
        case NT_NM_PREPEND:
            if (a.len && buf_add(&b, nm->content, nm->content_len)) goto oom;
            if (buf_add(&b, a.p, a.len)) goto oom;
            break;
        case NT_NM_REPLACE:
            st = replace(t, &nm->rx, run, nm->content, nm->content_len, a.p, a.len, &b, t->name,
                         err);
            if (st) goto done;
            break;
        }
        struct buf x = a;
        a = b;
        b = x;
    }
    if (buf_need(&a, 1)) goto oom;
    *out = a.p;
    *out_len = a.len;
    a.p = NULL;
    goto done;
oom:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
done:
    nt_free(a.p);
    nt_free(b.p);
    nt_rx_run_free(&own);
    return st;
}

/* ---- encode ---- */

/* A cache of words -> ids for one encode call (tokenizers keeps one too; a per-call one needs
 * no lock). Prose repeats its words (Zipf): most words of a long text are hits, and a hit costs
 * one probe instead of the dozen merge-table lookups of BPE. Only words up to CACHE_WORD bytes;
 * at most half the slots fill, then nothing more is added. */
#define CACHE_WORD 48
struct wcache {
    uint32_t mask; /* slots - 1; 0: no cache */
    struct wslot {
        uint32_t hash;
        uint16_t len; /* 0: empty */
        uint16_t n_ids;
        uint32_t key, ids; /* offsets into keys and idbuf */
    } * slot;
    size_t used, max;
    struct buf keys, idbuf;
};

struct enc {
    const struct nt_tokenizer *t;
    int32_t *ids;
    size_t cap, n;
    struct nt_rx_run run; /* one pair suffices: every level copies its offsets out at once */
    struct nt_bpe_scratch bs;
    struct buf prefixed; /* ByteLevel's add_prefix_space copy */
    struct wcache wc;
    struct nt_err *err;
};

static void emit(struct enc *e, int32_t id) {
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

/* Sizes the cache for a text of len bytes: about one slot per 8 bytes, 256..65536 slots. A
 * failed allocation just means no cache. */
static void cache_init(struct wcache *c, size_t len) {
    size_t slots = 256;
    while (slots < 65536 && slots * 8 < len) slots *= 2;
    c->slot = nt_calloc(slots, sizeof *c->slot);
    c->mask = c->slot ? (uint32_t)(slots - 1) : 0;
    c->max = slots / 2;
}

static void cache_free(struct wcache *c) {
    nt_free(c->slot);
    nt_free(c->keys.p);
    nt_free(c->idbuf.p);
}

static nemotron_status word(struct enc *e, const char *s, size_t n) {
    struct wcache *c = &e->wc;
    uint32_t h = 0, i = 0;
    int cacheable = c->mask && n <= CACHE_WORD;
    if (cacheable) {
        h = nt_hash_bytes(s, n);
        for (i = h & c->mask; c->slot[i].len; i = (i + 1) & c->mask) {
            const struct wslot *w = &c->slot[i];
            if (w->hash == h && w->len == n && !memcmp(c->keys.p + w->key, s, n)) {
                const int32_t *ids = (const int32_t *)(void *)(c->idbuf.p + w->ids);
                for (uint32_t k = 0; k < w->n_ids; k++) emit(e, ids[k]);
                return NEMOTRON_OK;
            }
        }
    }
    const int32_t *ids;
    size_t k;
    int rc = nt_bpe_word(&e->t->bpe, s, n, &e->bs, &ids, &k);
    if (rc == -1) return nt_fail(e->err, NEMOTRON_ERR_NOMEM, "%s: out of memory", e->t->name);
    if (rc == -2)
        return nt_fail(e->err, NEMOTRON_ERR_FORMAT,
                       "%s: model.unk_token is not in the vocabulary, and the text needs it",
                       e->t->name);
    for (size_t j = 0; j < k; j++) emit(e, ids[j]);
    /* i is the empty slot the probe ended on */
    if (cacheable && c->used < c->max && c->keys.len < UINT32_MAX / 2 &&
        c->idbuf.len < UINT32_MAX / 2) {
        struct wslot w = {h, (uint16_t)n, (uint16_t)k, (uint32_t)c->keys.len,
                          (uint32_t)c->idbuf.len};
        if (!buf_add(&c->keys, s, n) && !buf_add(&c->idbuf, ids, k * sizeof *ids)) {
            c->slot[i] = w;
            c->used++;
        }
    }
    return NEMOTRON_OK;
}

static nemotron_status run(struct enc *e, int step, const char *s, size_t n);

/* The split of one piece by behaviour: a pending segment for the merging behaviours. */
struct splitter {
    struct enc *e;
    int step;
    const char *s;
    enum nt_behavior behavior;
    int invert;
    int prev_match;
    int has; /* a pending segment [a, b) */
    size_t a, b;
};

static nemotron_status out_piece(struct splitter *sp, size_t a, size_t b) {
    return run(sp->e, sp->step + 1, sp->s + a, b - a);
}

/* One segment of find_matches, in order: (a, b, is_match). Follows NormalizedString::split. */
static nemotron_status segment(struct splitter *sp, size_t a, size_t b, int m) {
    nemotron_status st = NEMOTRON_OK;
    if (sp->invert) m = !m;
    switch (sp->behavior) {
    case NT_ISOLATED: return out_piece(sp, a, b);
    case NT_REMOVED: return m ? NEMOTRON_OK : out_piece(sp, a, b);
    case NT_MERGED_PREV: /* a match joins the segment before it, unless that was a match */
        if (m && !sp->prev_match && sp->has) {
            sp->b = b;
        } else {
            if (sp->has) st = out_piece(sp, sp->a, sp->b);
            sp->has = 1;
            sp->a = a;
            sp->b = b;
        }
        break;
    case NT_MERGED_NEXT: /* a match joins the segment after it, unless that is a match */
        if (sp->has) {
            sp->has = 0;
            if (!m) return out_piece(sp, sp->a, b);
            if ((st = out_piece(sp, sp->a, sp->b))) return st;
        }
        if (m) {
            sp->has = 1;
            sp->a = a;
            sp->b = b;
            return NEMOTRON_OK;
        }
        return out_piece(sp, a, b);
    case NT_CONTIGUOUS: /* runs of matches, runs of non-matches */
        if (sp->has && m == sp->prev_match) {
            sp->b = b;
        } else {
            if (sp->has) st = out_piece(sp, sp->a, sp->b);
            sp->has = 1;
            sp->a = a;
            sp->b = b;
        }
        break;
    }
    sp->prev_match = m;
    return st;
}

/* Splits s[0..n) by rx (Pattern::find_matches: the gaps and the matches, in order). */
static nemotron_status split(struct enc *e, int step, const struct nt_rx *rx,
                             enum nt_behavior behavior, int invert, const char *s, size_t n) {
    struct splitter sp = {e, step, s, behavior, invert, 0, 0, 0, 0};
    struct nt_rx_iter it = {0};
    size_t prev = 0, ms, me;
    nemotron_status st;
    int r;
    while ((r = nt_rx_next(rx, &e->run, s, n, &it, &ms, &me)) > 0) {
        if (prev != ms && (st = segment(&sp, prev, ms, 0))) return st;
        if ((st = segment(&sp, ms, me, 1))) return st;
        prev = me;
    }
    if (r < 0) {
        char what[300];
        snprintf(what, sizeof what, "%s: pre_tokenizer step %d", e->t->name, step);
        return nt_rx_error(r, rx, &e->run, what, e->err);
    }
    if (prev != n && (st = segment(&sp, prev, n, 0))) return st;
    if (sp.has) return out_piece(&sp, sp.a, sp.b);
    return NEMOTRON_OK;
}

/* Pre-tokenizer step `step` on one piece; past the last step the piece is a word. */
static nemotron_status run(struct enc *e, int step, const char *s, size_t n) {
    const struct nt_tokenizer *t = e->t;
    if (n == 0) return NEMOTRON_OK; /* PreTokenizedString::split drops empty pieces */
    if (step == t->n_pre) return word(e, s, n);
    const struct nt_pretok *p = &t->pre[step];
    if (p->kind == NT_PT_BYTELEVEL) {
        /* the last step (the loader checks), so nothing below reuses e->prefixed */
        if (p->add_prefix_space && s[0] != ' ') {
            e->prefixed.len = 0;
            if (buf_add(&e->prefixed, " ", 1) || buf_add(&e->prefixed, s, n))
                return nt_fail(e->err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
            s = e->prefixed.p;
            n = e->prefixed.len;
        }
        if (!p->use_regex) return run(e, step + 1, s, n);
    }
    return split(e, step, &p->rx, p->behavior, p->invert, s, n);
}

/* Rust regex's \w at the character starting at s[0..n). */
static int is_word_char(const struct enc *e, const char *s, size_t n) {
    size_t len;
    cp_at(s, n, &len);
    int rc = pcre2_match(e->t->word_rx, (PCRE2_SPTR)s, len, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         e->run.md, NULL);
    return rc >= 0;
}

static nemotron_status normalized_piece(struct enc *e, const char *s, size_t n);

/* AddedVocabulary::find_matches + split_with_indices: the added tokens of trie k in s[0..n),
 * each emitted as its id; the text between goes on (k == 0: to normalization, else to the
 * pre-tokenizer). */
static nemotron_status added_split(struct enc *e, int k, const char *s, size_t n) {
    const struct nt_tokenizer *t = e->t;
    const struct nt_trie *tr = &t->trie[k];
    size_t start_offset = 0, i = 0;
    nemotron_status st;
    while (i < n) {
        int32_t node = tr->root[(unsigned char)s[i]];
        if (node < 0) {
            i++;
            continue;
        }
        /* the longest token starting at i */
        int best = -1;
        size_t j = i, best_end = 0;
        while (node >= 0) {
            j++;
            if (tr->node[node].tok >= 0) {
                best = tr->node[node].tok;
                best_end = j;
            }
            if (j >= n) break;
            int32_t c = tr->node[node].child;
            while (c >= 0 && tr->node[c].byte != (unsigned char)s[j]) c = tr->node[c].sibling;
            node = c;
        }
        if (best < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = best_end;
        i = best_end; /* the automaton resumes after the match, whatever becomes of it */
        const struct nt_added *a = &t->added[best];
        if (a->single_word) {
            int start_space = start == 0 || !is_word_char(e, s + last_char(s, start),
                                                          start - last_char(s, start));
            int stop_space = stop == n || !is_word_char(e, s + stop, n - stop);
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = ws_suffix_start(s, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) stop += ws_prefix(s + stop, n - stop);
        if (start_offset < start) {
            st = k == 0 ? normalized_piece(e, s + start_offset, start - start_offset)
                        : run(e, 0, s + start_offset, start - start_offset);
            if (st) return st;
        }
        emit(e, a->id);
        start_offset = stop;
    }
    if (start_offset < n)
        return k == 0 ? normalized_piece(e, s + start_offset, n - start_offset)
                      : run(e, 0, s + start_offset, n - start_offset);
    return NEMOTRON_OK;
}

/* A piece between raw-text added tokens: normalized, then split by the normalized ones. */
static nemotron_status normalized_piece(struct enc *e, const char *s, size_t n) {
    const struct nt_tokenizer *t = e->t;
    if (n == 0) return NEMOTRON_OK;
    char *norm = NULL;
    if (t->n_norm) {
        nemotron_status st = nt_normalize(t, &e->run, s, n, &norm, &n, e->err);
        if (st) return st;
        s = norm;
    }
    nemotron_status st = t->trie[1].n_tok ? added_split(e, 1, s, n) : run(e, 0, s, n);
    nt_free(norm);
    return st;
}

nemotron_status nt_tokenizer_encode(const struct nt_tokenizer *t, const char *text, size_t len,
                                    int add_special, int32_t *ids, size_t cap, size_t *n_ids,
                                    struct nt_err *err) {
    *n_ids = 0;
    if (!text && len) return nt_fail(err, NEMOTRON_ERR_ARG, "encode: text is NULL");
    if (!ids) cap = 0;
    struct enc e = {.t = t, .ids = ids, .cap = cap, .err = err};
    char *fixed = NULL;
    nemotron_status st = NEMOTRON_OK;
    if (len && nt_utf8_valid_prefix((const unsigned char *)text, len) < len) {
        /* what tokenizers saw: Python's decode("utf-8", "replace") of the bytes */
        if (len > SIZE_MAX / 3) goto oom;
        if (!(fixed = nt_alloc(3 * len))) goto oom;
        len = nt_utf8_repair((const unsigned char *)text, len, fixed);
        text = fixed;
    }
    if ((st = nt_rx_run_init(&e.run, t, len, err))) goto done;
    /* below 1 KB (a chat turn) the cache would cost more than it saves */
    if (len >= 1024) cache_init(&e.wc, len);
    if (add_special)
        for (int i = 0; i < t->n_post_head; i++) emit(&e, t->post_ids[i]);
    if (len)
        st = t->trie[0].n_tok ? added_split(&e, 0, text, len) : normalized_piece(&e, text, len);
    if (!st && add_special)
        for (int i = 0; i < t->n_post_tail; i++) emit(&e, t->post_ids[t->n_post_head + i]);
    goto done;
oom:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
done:
    nt_rx_run_free(&e.run);
    nt_bpe_scratch_free(&e.bs);
    cache_free(&e.wc);
    nt_free(e.prefixed.p);
    nt_free(fixed);
    *n_ids = st ? 0 : e.n;
    return st;
}

/* ---- lookups ---- */

int nt_tokenizer_vocab_size(const struct nt_tokenizer *t) { return t->n_ids; }

int32_t nt_tokenizer_token_id(const struct nt_tokenizer *t, const char *text, size_t len) {
    int32_t id = nt_strmap_get(&t->added_map, text, len);
    return id >= 0 ? id : nt_strmap_get(&t->vocab_text, text, len);
}

const char *nt_tokenizer_token_text(const struct nt_tokenizer *t, int32_t id) {
    const struct nt_idinfo *d = nt_tok_info(t, id);
    return d ? d->text : NULL;
}

int nt_tokenizer_is_special(const struct nt_tokenizer *t, int32_t id) {
    const struct nt_idinfo *d = nt_tok_info(t, id);
    return d ? d->special : 0;
}

size_t nt_detok_cap(const struct nt_tokenizer *t) { return t->detok_cap; }

/* ---- decode: a list of strings through the decoder's steps ---- */

struct tlist {
    struct buf b;
    struct titem {
        size_t off, len;
    } * it;
    size_t n, cap;
};

static int tl_add(struct tlist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 64;
        struct titem *q = nt_alloc(c * sizeof *q);
        if (!q) return -1;
        if (l->n) memcpy(q, l->it, l->n * sizeof *q);
        nt_free(l->it);
        l->it = q;
        l->cap = c;
    }
    l->it[l->n++] = (struct titem){l->b.len, n};
    /* one spare byte: the buffer exists even when every string is empty */
    return buf_need(&l->b, n + 1) || buf_add(&l->b, s, n);
}

/* Appends to the last item. */
static int tl_cat(struct tlist *l, const char *s, size_t n) {
    l->it[l->n - 1].len += n;
    return buf_add(&l->b, s, n);
}

static void tl_free(struct tlist *l) {
    nt_free(l->b.p);
    nt_free(l->it);
}

/* ByteLevel's per-token rule: every character in GPT-2's alphabet -> those bytes; otherwise
 * the token's own bytes. Writes to out (room for n bytes; out == s is allowed: the check comes
 * before any write); returns the count. */
static size_t bytelevel_bytes(const char *s, size_t n, char *out) {
    size_t i = 0, len;
    while (i < n) {
        if (nt_cp_to_byte(cp_at(s + i, n - i, &len)) < 0) {
            if (out != s) memcpy(out, s, n);
            return n;
        }
        i += len;
    }
    size_t o = 0;
    for (i = 0; i < n; i += len) out[o++] = (char)nt_cp_to_byte(cp_at(s + i, n - i, &len));
    return o;
}

/* ByteFallback: "<0xHH>" -> the byte (u8::from_str_radix takes a leading '+' too). */
static int fallback_byte(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (i == 3 && c == '+') continue;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Strip: up to `start` leading and `stop` trailing copies of the character, of one string. */
static void strip_span(const struct nt_dec *d, const char *s, size_t n, size_t *lo, size_t *hi) {
    size_t a = 0, b = n;
    for (size_t k = 0; k < d->start && a < n; k++) {
        if (n - a < (size_t)d->strip_len || memcmp(s + a, d->strip_char, (size_t)d->strip_len))
            break;
        a += (size_t)d->strip_len;
    }
    for (size_t k = 0; k < d->stop && b > a; k++) {
        if (b - a < (size_t)d->strip_len ||
            memcmp(s + b - (size_t)d->strip_len, d->strip_char, (size_t)d->strip_len))
            break;
        b -= (size_t)d->strip_len;
    }
    *lo = a;
    *hi = b;
}

static nemotron_status dec_step(const struct nt_tokenizer *t, const struct nt_dec *d,
                                struct nt_rx_run *run, const struct tlist *in, struct tlist *out,
                                struct nt_err *err) {
    const char *base = in->b.p;
    struct buf tmp = {0}, rep = {0};
    nemotron_status st = NEMOTRON_OK;
    switch (d->kind) {
    case NT_DC_BYTELEVEL: {
        /* all tokens to bytes, then String::from_utf8_lossy of the lot: one string */
        if (buf_need(&tmp, in->b.len + 1)) goto oom;
        for (size_t i = 0; i < in->n; i++)
            tmp.len += bytelevel_bytes(base + in->it[i].off, in->it[i].len, tmp.p + tmp.len);
        if (tl_add(out, "", 0) || buf_need(&out->b, 3 * tmp.len)) goto oom;
        size_t w = nt_utf8_repair((unsigned char *)tmp.p, tmp.len, out->b.p + out->b.len);
        out->b.len += w;
        out->it[out->n - 1].len = w;
        break;
    }
    case NT_DC_BYTEFALLBACK: {
        /* a run of byte tokens: its string if valid UTF-8, else one U+FFFD per byte */
        for (size_t i = 0; i <= in->n; i++) {
            int byte = i < in->n ? fallback_byte(base + in->it[i].off, in->it[i].len) : -1;
            if (byte >= 0) {
                char c = (char)byte;
                if (buf_add(&tmp, &c, 1)) goto oom;
                continue;
            }
            if (tmp.len) {
                if (nt_utf8_valid_prefix((unsigned char *)tmp.p, tmp.len) == tmp.len) {
                    if (tl_add(out, tmp.p, tmp.len)) goto oom;
                } else {
                    for (size_t k = 0; k < tmp.len; k++)
                        if (tl_add(out, fffd, 3)) goto oom;
                }
                tmp.len = 0;
            }
            if (i < in->n && tl_add(out, base + in->it[i].off, in->it[i].len)) goto oom;
        }
        break;
    }
    case NT_DC_FUSE:
        if (tl_add(out, "", 0)) goto oom;
        for (size_t i = 0; i < in->n; i++)
            if (tl_cat(out, base + in->it[i].off, in->it[i].len)) goto oom;
        break;
    case NT_DC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            size_t lo, hi;
            strip_span(d, base + in->it[i].off, in->it[i].len, &lo, &hi);
            if (tl_add(out, base + in->it[i].off + lo, hi - lo)) goto oom;
        }
        break;
    case NT_DC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            st = replace(t, &d->rx, run, d->content, d->content_len, base + in->it[i].off,
                         in->it[i].len, &rep, t->name, err);
            if (st) goto done;
            if (tl_add(out, rep.p ? rep.p : "", rep.len)) goto oom;
        }
        break;
    }
    goto done;
oom:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
done:
    nt_free(tmp.p);
    nt_free(rep.p);
    return st;
}

nemotron_status nt_tokenizer_decode(const struct nt_tokenizer *t, const int32_t *ids, size_t n,
                                    int skip_special, char *out, size_t cap, size_t *len,
                                    struct nt_err *err) {
    *len = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_ids)
            return nt_fail(err, NEMOTRON_ERR_ARG,
                           "decode: ids[%zu] = %d is outside the vocabulary (%d ids)", i,
                           (int)ids[i], (int)t->n_ids);
    struct tlist a = {0}, b = {0};
    struct nt_rx_run run = {0};
    nemotron_status st = NEMOTRON_OK;
    for (size_t i = 0; i < n; i++) {
        const struct nt_idinfo *d = nt_tok_info(t, ids[i]);
        if (!d || (skip_special && d->special)) continue; /* ids without a token are skipped */
        if (tl_add(&a, d->text, d->len)) goto oom;
    }
    /* the budget: the text as the tokens spell it (a decoder step changes its length by little) */
    if ((st = nt_rx_run_init(&run, t, a.b.len, err))) goto done;
    for (int k = 0; k < t->n_dec; k++) {
        b.n = 0;
        b.b.len = 0;
        if ((st = dec_step(t, &t->dec[k], &run, &a, &b, err))) goto done;
        struct tlist x = a;
        a = b;
        b = x;
    }
    /* join: nothing between strings with a decoder, a space without one */
    size_t total = 0;
    for (size_t i = 0; i < a.n; i++) total += a.it[i].len + (!t->has_decoder && i > 0);
    *len = total;
    if (cap) {
        size_t o = 0;
        for (size_t i = 0; i < a.n && o + 1 < cap; i++) {
            if (!t->has_decoder && i > 0) out[o++] = ' ';
            size_t l = a.it[i].len;
            if (l > cap - 1 - o) l = cap - 1 - o;
            if (l) memcpy(out + o, a.b.p + a.it[i].off, l);
            o += l;
        }
        out[o < cap ? o : cap - 1] = 0;
    }
    goto done;
oom:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
done:
    nt_rx_run_free(&run);
    tl_free(&a);
    tl_free(&b);
    if (st) *len = 0;
    return st;
}

/* ---- streaming decode ---- */

void nt_detok_init(struct nt_detok *d) { memset(d, 0, sizeof *d); }

/* d->started after a Strip step that follows a fusing step: how many leading characters the
 * stream has stripped so far, or STRIP_DONE once it showed another character. */
#define STRIP_DONE INT_MAX

/* One token's bytes through the decoder in stream form, into tok (grown as needed). Per-token
 * steps are applied as such; after ByteLevel or Fuse the steps see the stream: ByteLevel emits
 * raw bytes (the UTF-8 repair happens in the hold-back), Strip's start counts from the start of
 * the stream. Exact for every chain except: a ByteFallback run holding invalid bytes, a Strip
 * with stop after a fusing step, a Replace whose match spans two tokens. */
static nemotron_status stream_token(const struct nt_tokenizer *t, struct nt_detok *d,
                                    struct nt_rx_run *run, const struct nt_idinfo *info,
                                    struct buf *tok, struct nt_err *err) {
    struct buf tmp = {0};
    nemotron_status st = NEMOTRON_OK;
    tok->len = 0;
    if (buf_add(tok, info->text, info->len)) goto oom;
    int fused = 0;
    for (int k = 0; k < t->n_dec; k++) {
        const struct nt_dec *dc = &t->dec[k];
        switch (dc->kind) {
        case NT_DC_BYTELEVEL:
            tok->len = bytelevel_bytes(tok->p, tok->len, tok->p);
            fused = 1;
            break;
        case NT_DC_BYTEFALLBACK: {
            int byte = fallback_byte(tok->p, tok->len);
            if (byte >= 0) {
                tok->p[0] = (char)byte;
                tok->len = 1;
            }
            break;
        }
        case NT_DC_FUSE: fused = 1; break;
        case NT_DC_STRIP: {
            size_t lo = 0, hi = tok->len;
            if (!fused) {
                strip_span(dc, tok->p, tok->len, &lo, &hi);
            } else {
                while (d->started != STRIP_DONE && lo < hi) {
                    if ((size_t)d->started < dc->start && hi - lo >= (size_t)dc->strip_len &&
                        !memcmp(tok->p + lo, dc->strip_char, (size_t)dc->strip_len)) {
                        lo += (size_t)dc->strip_len;
                        d->started++;
                    } else {
                        d->started = STRIP_DONE;
                    }
                }
            }
            memmove(tok->p, tok->p + lo, hi - lo);
            tok->len = hi - lo;
            break;
        }
        case NT_DC_REPLACE:
            if ((st = replace(t, &dc->rx, run, dc->content, dc->content_len, tok->p, tok->len, &tmp,
                              t->name, err)))
                goto done;
            tok->len = 0;
            if (buf_add(tok, tmp.p ? tmp.p : "", tmp.len)) goto oom;
            break;
        }
    }
    goto done;
oom:
    st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
done:
    nt_free(tmp.p);
    return st;
}

int nt_detok_push(const struct nt_tokenizer *t, struct nt_detok *d, int32_t id, int skip_special,
                  char *out, size_t cap, struct nt_err *err) {
    if (id < 0 || id >= t->n_ids) {
        nt_fail(err, NEMOTRON_ERR_ARG, "decode: id %d is outside the vocabulary (%d ids)", (int)id,
                (int)t->n_ids);
        return -1;
    }
    const struct nt_idinfo *info = nt_tok_info(t, id);
    if (!info || (skip_special && info->special)) return 0;
    struct nt_detok nd = *d; /* committed only when the bytes fit */
    struct buf tok = {0};
    struct nt_rx_run run;
    int result = -1;
    if (nt_rx_run_init(&run, t, info->len, err)) goto done;
    if (!t->has_decoder) {
        /* tokens joined by spaces */
        if ((nd.started && buf_add(&tok, " ", 1)) || buf_add(&tok, info->text, info->len)) {
            nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
            goto done;
        }
        nd.started = 1;
    } else if (stream_token(t, &nd, &run, info, &tok, err)) {
        goto done;
    }
    /* the hold-back: pending bytes + this token, complete characters out, an incomplete tail
     * (at most 3 bytes) kept */
    unsigned char stack[256];
    size_t n = (size_t)d->n_pending + tok.len;
    unsigned char *s = n <= sizeof stack ? stack : nt_alloc(n);
    if (!s) {
        nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", t->name);
        goto done;
    }
    memcpy(s, d->pending, (size_t)d->n_pending);
    if (tok.len) memcpy(s + d->n_pending, tok.p, tok.len);
    size_t i = 0, o = 0;
    int over = 0;
    nd.n_pending = 0;
    while (i < n) {
        size_t len;
        uint32_t cp;
        enum nt_u8 r = nt_utf8_step(s + i, n - i, &len, &cp);
        if (r == NT_U8_SHORT) {
            memcpy(nd.pending, s + i, len);
            nd.n_pending = (int)len;
            break;
        }
        const char *src = r == NT_U8_OK ? (const char *)s + i : fffd;
        size_t w = r == NT_U8_OK ? len : 3;
        if (o + w > cap) {
            over = 1;
            break;
        }
        memcpy(out + o, src, w);
        o += w;
        i += len;
    }
    if (s != stack) nt_free(s);
    if (over || o > INT_MAX) {
        nt_fail(err, NEMOTRON_ERR_ARG,
                "decode: the output buffer (%zu bytes) is too small for token %d"
                " (nt_detok_cap: %zu)",
                cap, (int)id, t->detok_cap);
        goto done;
    }
    *d = nd;
    result = (int)o;
done:
    nt_rx_run_free(&run);
    nt_free(tok.p);
    return result;
}

int nt_detok_flush(struct nt_detok *d, char *out, size_t cap) {
    if (!d->n_pending) return 0;
    /* the held bytes are the valid start of one character: one maximal subpart */
    if (cap < 3) return -1;
    memcpy(out, fffd, 3);
    d->n_pending = 0;
    return 3;
}
