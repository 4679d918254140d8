/* prefix_cache.h - snapshots of sequence state keyed by the tokens that produced them.
 *
 * A hybrid model's recurrent state cannot be cut back to an earlier position the way a KV cache
 * can, so the server keeps whole-state snapshots (nemotron_session_snapshot) at prompt ends and
 * restores the longest one a new prompt starts with. The cache owns its snapshots; its total
 * size stays within the byte budget, least recently used out. Thread-safe: one mutex, held while
 * a snapshot is copied into or out of a session (copies are device-side and short).
 */
#ifndef NT_SERVER_PREFIX_CACHE_H
#define NT_SERVER_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "nemotron.h"

struct prefix_cache;

/* budget_bytes 0: the cache keeps nothing (every lookup misses). NULL when out of memory. */
struct prefix_cache *prefix_cache_new(size_t budget_bytes);
void prefix_cache_free(struct prefix_cache *pc);

/* Restores into s the longest cached prefix of tokens[0..n) and returns its length (0: none
 * found, s untouched). A restore that fails returns 0 with s reset. */
int prefix_cache_restore(struct prefix_cache *pc, nemotron_session *s, const int32_t *tokens, int n);
/* Snapshots s, whose state is exactly tokens[0..n), under that key (an entry with the same key is
 * refreshed instead). Nothing happens when the snapshot alone exceeds the budget or cannot be
 * taken; the session is unchanged either way. */
void prefix_cache_put(struct prefix_cache *pc, nemotron_session *s, const int32_t *tokens, int n);

struct prefix_cache_stats {
    uint64_t lookups, hits, hit_tokens, entries, bytes, evictions;
};
void prefix_cache_stats(struct prefix_cache *pc, struct prefix_cache_stats *out);

#endif /* NT_SERVER_PREFIX_CACHE_H */
