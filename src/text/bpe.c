/* bpe.c - hash tables of the BPE model and the merging of one word (see bpe.h).
 *
 * Owns nothing global. Tables use open addressing with linear probing at a load factor of at
 * most 1/2, sized once at load; they never grow or delete.
 */
#include "bpe.h"

#include "../common.h"
#include "utf8.h"

uint32_t nt_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0x94D049BB133111EBull;
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

/* The smallest power of two >= 2 * n (load <= 1/2), at least 16. */
static size_t table_size(size_t n) {
    size_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

int nt_strmap_init(struct nt_strmap *m, size_t n, const char *arena) {
    size_t size = table_size(n);
    m->slots = nt_alloc(size * sizeof *m->slots);
    m->arena = arena;
    if (!m->slots) {
        m->mask = 0;
        return -1;
    }
    for (size_t i = 0; i < size; i++) m->slots[i].val = -1;
    m->mask = (uint32_t)(size - 1);
    return 0;
}

void nt_strmap_free(struct nt_strmap *m) {
    nt_free(m->slots);
    m->slots = NULL;
    m->mask = 0;
}

int32_t nt_strmap_put_h(struct nt_strmap *m, uint32_t off, uint32_t len, int32_t val, uint32_t h) {
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct nt_strslot *s = &m->slots[i];
        if (s->val < 0) {
            s->hash = h;
            s->off = off;
            s->len = len;
            s->val = val;
            return -1;
        }
        if (s->hash == h && s->len == len && !memcmp(m->arena + s->off, m->arena + off, len)) {
            int32_t old = s->val;
            s->val = val;
            return old;
        }
    }
}

int32_t nt_strmap_put(struct nt_strmap *m, uint32_t off, uint32_t len, int32_t val) {
    return nt_strmap_put_h(m, off, len, val, nt_hash_bytes(m->arena + off, len));
}

int32_t nt_strmap_get_h(const struct nt_strmap *m, const char *str, size_t len, uint32_t h) {
    if (!m->slots || len > UINT32_MAX) return -1;
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct nt_strslot *s = &m->slots[i];
        if (s->val < 0) return -1;
        if (s->hash == h && s->len == len && !memcmp(m->arena + s->off, str, len)) return s->val;
    }
}

int32_t nt_strmap_get(const struct nt_strmap *m, const char *str, size_t len) {
    return nt_strmap_get_h(m, str, len, nt_hash_bytes(str, len));
}

int nt_pairmap_init(struct nt_pairmap *m, size_t n) {
    size_t size = table_size(n);
    unsigned bits = 0;
    while (((size_t)1 << bits) < size) bits++;
    m->bits = bits;
    m->slots = nt_alloc(size * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < size; i++) m->slots[i].key = NT_PAIR_EMPTY;
    return 0;
}

void nt_pairmap_free(struct nt_pairmap *m) {
    nt_free(m->slots);
    m->slots = NULL;
}

void nt_pairmap_put(struct nt_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t key = nt_pair_key(a, b);
    size_t mask = ((size_t)1 << m->bits) - 1;
    for (size_t i = nt_pair_slot(m, key);; i = (i + 1) & mask) {
        struct nt_pairslot *s = &m->slots[i];
        if (s->key == key || s->key == NT_PAIR_EMPTY) {
            s->key = key;
            s->rank = rank;
            s->id = id;
            return;
        }
    }
}

void nt_bpe_scratch_free(struct nt_bpe_scratch *sc) {
    nt_free(sc->sym);
    nt_free(sc->work);
    memset(sc, 0, sizeof *sc);
}

static int grow(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *p = nt_alloc(c);
    if (!p) return -1;
    nt_free(*buf);
    *buf = p;
    *cap = c;
    return 0;
}

/* Words up to this many symbols merge by a linear scan over an array of pair ranks (the
 * arrays live on the stack); longer ones by the heap. 64: most words of any language are
 * shorter, and a scan of 64 ranks costs less than the heap's bookkeeping. */
#define SCAN_MAX 64

static size_t merge_scan(const struct nt_pairmap *m, int32_t *sym, size_t n) {
    uint32_t rank[SCAN_MAX];
    int32_t nid[SCAN_MAX];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = nt_pairmap_get(m, sym[i], sym[i + 1], &nid[i]);
    while (n > 1) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) {
                best = rank[i];
                bi = i;
            }
        if (best == UINT32_MAX) break;
        /* sym[bi] absorbs sym[bi + 1]; pair bi + 1 becomes pair bi */
        sym[bi] = nid[bi];
        /* plain loops: the arrays are short, a memmove call costs more */
        for (size_t i = bi + 1; i + 1 < n; i++) sym[i] = sym[i + 1];
        for (size_t i = bi; i + 2 < n; i++) {
            rank[i] = rank[i + 1];
            nid[i] = nid[i + 1];
        }
        n--;
        if (bi > 0) rank[bi - 1] = nt_pairmap_get(m, sym[bi - 1], sym[bi], &nid[bi - 1]);
        if (bi + 1 < n) rank[bi] = nt_pairmap_get(m, sym[bi], sym[bi + 1], &nid[bi]);
    }
    return n;
}

struct hent {
    uint32_t rank;
    uint32_t pos; /* index of the left symbol */
    int32_t id;   /* the merged token */
};

static inline int hless(const struct hent *a, const struct hent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(struct hent *h, size_t *n, struct hent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct hent hpop(struct hent *h, size_t *n) {
    struct hent top = h[0], last = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= len) break;
        if (c + 1 < len && hless(&h[c + 1], &h[c])) c++;
        if (!hless(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (len) h[i] = last;
    return top;
}

/* Word::merge_all: a heap of (rank, position) over a linked list of symbols. A heap entry is
 * stale when its left symbol was absorbed, or the pair at its position no longer merges into
 * the same token (its right neighbour grew); stale entries are skipped when popped. */
static size_t merge_heap(const struct nt_pairmap *m, int32_t *sym, size_t n,
                         struct nt_bpe_scratch *sc) {
    /* each merge pushes at most two entries: the heap never exceeds 3n */
    size_t need = n * 2 * sizeof(int32_t) + 3 * n * sizeof(struct hent);
    if (grow(&sc->work, &sc->work_cap, need)) return (size_t)-1;
    int32_t *prev = sc->work, *next = prev + n;
    struct hent *heap = (struct hent *)(next + n);
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t id;
        uint32_t r = nt_pairmap_get(m, sym[i], sym[i + 1], &id);
        if (r != UINT32_MAX) hpush(heap, &hn, (struct hent){r, (uint32_t)i, id});
    }
    /* an absorbed symbol is marked by sym = -1 (ids are >= 0) */
    while (hn) {
        struct hent top = hpop(heap, &hn);
        size_t p = top.pos;
        if (sym[p] < 0 || next[p] < 0) continue;
        size_t q = (size_t)next[p];
        int32_t id;
        if (nt_pairmap_get(m, sym[p], sym[q], &id) == UINT32_MAX || id != top.id) continue;
        sym[p] = top.id;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)p;
        if (prev[p] >= 0) {
            size_t l = (size_t)prev[p];
            uint32_t r = nt_pairmap_get(m, sym[l], sym[p], &id);
            if (r != UINT32_MAX) hpush(heap, &hn, (struct hent){r, (uint32_t)l, id});
        }
        if (next[p] >= 0) {
            uint32_t r = nt_pairmap_get(m, sym[p], sym[next[p]], &id);
            if (r != UINT32_MAX) hpush(heap, &hn, (struct hent){r, (uint32_t)p, id});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    return k;
}

size_t nt_bpe_merge(const struct nt_pairmap *m, int32_t *sym, size_t n, struct nt_bpe_scratch *sc) {
    if (n < 2) return n;
    if (n <= SCAN_MAX) return merge_scan(m, sym, n);
    return merge_heap(m, sym, n, sc);
}

/* The "unk" state of BPE::merge_word: an unknown character waits here, so that with fuse_unk
 * a run of them becomes one unk symbol. */
struct unk_state {
    int pending;
};

/* Adds the symbols of one character chr[0..len) whose own token is `id` (-1: not in the
 * vocabulary). Mirrors merge_word: a known character first flushes a pending unk; an unknown
 * one tries byte fallback (all "<0xHH>" present) without flushing, then unk_token. */
static int add_char(const struct nt_bpe *m, const unsigned char *chr, size_t len, int32_t id,
                    int32_t *sym, size_t *k, struct unk_state *u) {
    if (id >= 0) {
        if (u->pending) {
            sym[(*k)++] = m->unk_id;
            u->pending = 0;
        }
        sym[(*k)++] = id;
        return 0;
    }
    if (m->byte_fallback) {
        size_t i = 0;
        while (i < len && m->fallback_id[chr[i]] >= 0) i++;
        if (i == len) {
            for (i = 0; i < len; i++) sym[(*k)++] = m->fallback_id[chr[i]];
            return 0;
        }
    }
    if (m->unk_id == -1) return 0; /* no unk_token: the character is dropped */
    if (m->unk_id < 0) return -2;
    if (u->pending && !m->fuse_unk) sym[(*k)++] = m->unk_id;
    u->pending = 1;
    return 0;
}

int nt_bpe_word(const struct nt_bpe *m, const char *w, size_t n, struct nt_bpe_scratch *sc,
                const int32_t **ids, size_t *n_ids) {
    /* a byte-level character is at most 2 UTF-8 bytes (U+0100..U+0143), hence at most 2
     * fallback symbols per byte; other characters at most one symbol per byte */
    if (n > SIZE_MAX / 8 - 1) return -1;
    size_t need = (2 * n + 1) * sizeof(int32_t);
    void *buf = sc->sym;
    size_t cap = sc->sym_cap * sizeof(int32_t);
    if (grow(&buf, &cap, need)) return -1;
    sc->sym = buf;
    sc->sym_cap = cap / sizeof(int32_t);
    int32_t *sym = sc->sym;
    *ids = sym;
    if (m->ignore_merges) {
        int32_t id = nt_strmap_get(&m->vocab, w, n);
        if (id >= 0) {
            sym[0] = id;
            *n_ids = 1;
            return 0;
        }
    }
    const unsigned char *s = (const unsigned char *)w;
    size_t k = 0;
    struct unk_state u = {0};
    int rc = 0;
    if (m->byte_level) {
        for (size_t i = 0; i < n && !rc; i++) {
            int32_t id = m->byte_id[s[i]];
            if (id >= 0 && !u.pending) {
                sym[k++] = id; /* the common case, without the bookkeeping */
                continue;
            }
            char chr[4];
            int len = nt_utf8_put(nt_byte_to_cp[s[i]], chr);
            rc = add_char(m, (const unsigned char *)chr, (size_t)len, id, sym, &k, &u);
        }
    } else {
        for (size_t i = 0; i < n && !rc;) {
            size_t len;
            uint32_t cp;
            if (nt_utf8_step(s + i, n - i, &len, &cp) != NT_U8_OK) len = 1; /* not reached */
            int32_t id = nt_strmap_get(&m->vocab, w + i, len);
            rc = add_char(m, s + i, len, id, sym, &k, &u);
            i += len;
        }
    }
    if (rc) return rc;
    if (u.pending) sym[k++] = m->unk_id;
    size_t r = nt_bpe_merge(&m->merges, sym, k, sc);
    if (r == (size_t)-1) return -1;
    *n_ids = r;
    return 0;
}
