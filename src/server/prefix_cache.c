/* prefix_cache.c - the server's prefix cache of hybrid state (prefix_cache.h).
 *
 * Entries are few (a snapshot is megabytes), so a plain array scanned linearly is enough: a
 * lookup compares each key against the prompt, an eviction finds the oldest use stamp. The byte
 * budget counts what each snapshot holds (engine/engine.h: nt_snapshot_bytes) plus its key.
 */
#include "server/prefix_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

struct entry {
    int32_t *tokens;
    int n;
    nemotron_snapshot *snap;
    size_t bytes;
    uint64_t last_use;              /* the cache's clock at the entry's last hit or insert */
};

struct prefix_cache {
    pthread_mutex_t mu;
    size_t budget, used;
    struct entry *e;
    int n, cap;
    uint64_t clock;
    struct prefix_cache_stats stats;
};

struct prefix_cache *prefix_cache_new(size_t budget_bytes) {
    struct prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pthread_mutex_init(&pc->mu, NULL);
    pc->budget = budget_bytes;
    return pc;
}

static void drop(struct prefix_cache *pc, int i) {
    pc->used -= pc->e[i].bytes;
    nemotron_snapshot_free(pc->e[i].snap);
    free(pc->e[i].tokens);
    pc->e[i] = pc->e[--pc->n];
}

void prefix_cache_free(struct prefix_cache *pc) {
    if (!pc) return;
    while (pc->n) drop(pc, pc->n - 1);
    free(pc->e);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

int prefix_cache_restore(struct prefix_cache *pc, nemotron_session *s, const int32_t *tokens, int n) {
    pthread_mutex_lock(&pc->mu);
    pc->stats.lookups++;
    int best = -1;
    for (int i = 0; i < pc->n; i++) {
        const struct entry *e = &pc->e[i];
        if (e->n <= n && (best < 0 || e->n > pc->e[best].n) && !memcmp(e->tokens, tokens, (size_t)e->n * sizeof *tokens))
            best = i;
    }
    int got = 0;
    if (best >= 0) {
        if (nemotron_session_restore(s, pc->e[best].snap) == NEMOTRON_OK) {
            got = pc->e[best].n;
            pc->e[best].last_use = ++pc->clock;
            pc->stats.hits++;
            pc->stats.hit_tokens += (uint64_t)got;
        } else {
            nemotron_session_reset(s);
        }
    }
    pthread_mutex_unlock(&pc->mu);
    return got;
}

void prefix_cache_put(struct prefix_cache *pc, nemotron_session *s, const int32_t *tokens, int n) {
    if (!pc->budget || n <= 0) return;
    pthread_mutex_lock(&pc->mu);
    for (int i = 0; i < pc->n; i++)
        if (pc->e[i].n == n && !memcmp(pc->e[i].tokens, tokens, (size_t)n * sizeof *tokens)) {
            pc->e[i].last_use = ++pc->clock;   /* same tokens, same state: keep the one held */
            pthread_mutex_unlock(&pc->mu);
            return;
        }
    nemotron_snapshot *snap = NULL;
    int32_t *key = malloc((size_t)n * sizeof *key);
    struct entry *grown = pc->e;
    if (pc->n == pc->cap) {
        int cap = pc->cap ? 2 * pc->cap : 16;
        grown = realloc(pc->e, (size_t)cap * sizeof *grown);
        if (grown) {
            pc->e = grown;
            pc->cap = cap;
        }
    }
    if (key && grown && nemotron_session_snapshot(s, &snap) == NEMOTRON_OK) {
        size_t bytes = nt_snapshot_bytes(snap) + (size_t)n * sizeof *key;
        if (bytes <= pc->budget) {
            while (pc->used + bytes > pc->budget) {
                int oldest = 0;
                for (int i = 1; i < pc->n; i++)
                    if (pc->e[i].last_use < pc->e[oldest].last_use) oldest = i;
                drop(pc, oldest);
                pc->stats.evictions++;
            }
            memcpy(key, tokens, (size_t)n * sizeof *key);
            pc->e[pc->n++] = (struct entry){key, n, snap, bytes, ++pc->clock};
            pc->used += bytes;
            key = NULL;
            snap = NULL;
        }
    }
    nemotron_snapshot_free(snap);
    free(key);
    pthread_mutex_unlock(&pc->mu);
}

void prefix_cache_stats(struct prefix_cache *pc, struct prefix_cache_stats *out) {
    pthread_mutex_lock(&pc->mu);
    *out = pc->stats;
    out->entries = (uint64_t)pc->n;
    out->bytes = pc->used;
    pthread_mutex_unlock(&pc->mu);
}
