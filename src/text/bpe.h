/* bpe.h - the BPE model of a tokenizer.json: vocabulary lookup, merge ranks, and the merging
 * of one pre-tokenized word into ids, as `tokenizers`' models::bpe does it.
 *
 * Owns two hash tables: strings -> id (nt_strmap) and id pairs -> (rank, merged id)
 * (nt_pairmap). Both are built once at load and read-only afterwards, so lookups and
 * nt_bpe_word may run on many threads at once; per-call memory lives in a caller-owned
 * nt_bpe_scratch.
 *
 * Merging (Word::merge_all): repeatedly merge the adjacent pair with the lowest rank, the
 * leftmost of equal ranks, until no adjacent pair has a merge. tokenizers pops (rank, position)
 * from a heap; with unique ids (the loader checks) that is exactly the order of a linear scan
 * for the minimum, which is what short words use; long ones use the heap.
 */
#ifndef NT_BPE_H
#define NT_BPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* string -> int32 value; keys are (offset, length) into an arena that must not move while the
 * map is used. */
struct nt_strmap {
    uint32_t mask; /* slot count - 1 (a power of two minus one); 0 when empty */
    struct nt_strslot {
        uint32_t hash, off, len;
        int32_t val; /* -1: empty slot */
    } * slots;
    const char *arena;
};

uint32_t nt_hash_bytes(const void *p, size_t n);
/* Sizes the table for up to n keys; 0, or -1 when out of memory. */
int nt_strmap_init(struct nt_strmap *m, size_t n, const char *arena);
void nt_strmap_free(struct nt_strmap *m);
/* Inserts arena[off..off+len) -> val, replacing the value of an equal key; returns the old value
 * or -1 when the key was new. The map never fills: init sized it for n keys. */
int32_t nt_strmap_put(struct nt_strmap *m, uint32_t off, uint32_t len, int32_t val);
int32_t nt_strmap_get(const struct nt_strmap *m, const char *s, size_t len);
/* The same with the key's nt_hash_bytes given, and a prefetch of its slot: loading issues
 * hundreds of thousands of lookups that miss the cache; hashing a few keys ahead and
 * prefetching lets the misses overlap. */
int32_t nt_strmap_put_h(struct nt_strmap *m, uint32_t off, uint32_t len, int32_t val, uint32_t h);
int32_t nt_strmap_get_h(const struct nt_strmap *m, const char *s, size_t len, uint32_t h);
static inline void nt_strmap_prefetch(const struct nt_strmap *m, uint32_t h) {
    if (m->slots) __builtin_prefetch(&m->slots[h & m->mask]);
}

/* (left id, right id) -> (rank, merged id). */
struct nt_pairmap {
    unsigned bits; /* log2 of the slot count */
    struct nt_pairslot {
        uint64_t key; /* left << 32 | right; NT_PAIR_EMPTY when free */
        uint32_t rank;
        int32_t id;
    } * slots;
};
#define NT_PAIR_EMPTY UINT64_MAX

int nt_pairmap_init(struct nt_pairmap *m, size_t n);
void nt_pairmap_free(struct nt_pairmap *m);
/* Inserts or overwrites (a later duplicate merge wins, as a Rust HashMap collect does). */
void nt_pairmap_put(struct nt_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);

static inline uint64_t nt_pair_key(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}
static inline size_t nt_pair_slot(const struct nt_pairmap *m, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - m->bits));
}
/* The merge of (a, b): its rank, or UINT32_MAX when the pair has none; *id the merged token. */
static inline uint32_t nt_pairmap_get(const struct nt_pairmap *m, int32_t a, int32_t b,
                                      int32_t *id) {
    if (!m->slots) return UINT32_MAX;
    uint64_t key = nt_pair_key(a, b);
    size_t mask = ((size_t)1 << m->bits) - 1;
    for (size_t i = nt_pair_slot(m, key);; i = (i + 1) & mask) {
        const struct nt_pairslot *s = &m->slots[i];
        if (s->key == key) {
            *id = s->id;
            return s->rank;
        }
        if (s->key == NT_PAIR_EMPTY) return UINT32_MAX;
    }
}

struct nt_bpe {
    struct nt_pairmap merges;
    struct nt_strmap vocab;   /* lookup form -> id: raw bytes when byte_level, else the text */
    int byte_level;           /* words are bytes shown through GPT-2's alphabet (ByteLevel) */
    int32_t byte_id[256];     /* byte_level: id of the one-character token of byte b, or -1 */
    int32_t fallback_id[256]; /* id of "<0xHH>", or -1 (used when byte_fallback) */
    int byte_fallback;
    int ignore_merges; /* a word that is itself in the vocabulary is one token */
    int fuse_unk;
    int32_t unk_id; /* -1: no unk_token; -2: named but not in the vocabulary */
};

/* Per-call working memory of nt_bpe_word; zero-initialise, free with nt_bpe_scratch_free. */
struct nt_bpe_scratch {
    int32_t *sym;    /* the word's symbols */
    size_t sym_cap;  /* in symbols */
    void *work;      /* links and heap of long words */
    size_t work_cap; /* in bytes */
};
void nt_bpe_scratch_free(struct nt_bpe_scratch *sc);

/* Tokenizes word w[0..n) (n >= 1): its characters (bytes when byte_level) become symbols, an
 * unknown one through byte_fallback or unk_token or dropped, as BPE::merge_word; then merged.
 * On success *ids points into sc (valid until its next use) and *n_ids is the count. Returns 0;
 * -1 when memory ran out; -2 when an unknown character needs an unk_token missing from the
 * vocabulary. */
int nt_bpe_word(const struct nt_bpe *m, const char *w, size_t n, struct nt_bpe_scratch *sc,
                const int32_t **ids, size_t *n_ids);

/* Merges sym[0..n) in place; returns the new count, or (size_t)-1 when memory ran out. */
size_t nt_bpe_merge(const struct nt_pairmap *m, int32_t *sym, size_t n, struct nt_bpe_scratch *sc);

#endif /* NT_BPE_H */
