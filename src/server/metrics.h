/* metrics.h - the server's counters and their Prometheus text exposition (GET /metrics).
 *
 * Counters are C11 atomics bumped by the HTTP threads and the slot workers without a lock;
 * metrics_render reads each once, so a scrape is a near-instant view, not a transaction.
 */
#ifndef NT_SERVER_METRICS_H
#define NT_SERVER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "server/prefix_cache.h"

struct metrics {
    atomic_uint_fast64_t requests;          /* every HTTP request answered */
    atomic_uint_fast64_t requests_failed;   /* those answered with a 4xx or 5xx */
    atomic_uint_fast64_t prompt_tokens;     /* prompt tokens of finished generations */
    atomic_uint_fast64_t prompt_tokens_evaluated; /* of those, the ones not restored from the cache */
    atomic_uint_fast64_t generated_tokens;
    atomic_uint_fast64_t gen_micros;        /* time spent generating (after the prompt), in us */
    atomic_int queued;                      /* requests waiting for a slot */
    atomic_int running;                     /* requests holding a slot */
    atomic_int device_failed;               /* 1 once a device fault left a slot without a session */
    /* speculative decoding (shown when spec_on: the server was started with it) */
    int spec_on;
    atomic_uint_fast64_t spec_requests;     /* generations decoded speculatively */
    atomic_uint_fast64_t spec_drafted;      /* draft tokens sent to verify passes */
    atomic_uint_fast64_t spec_accepted;     /* of those, the ones the model agreed with */
};

/* The Prometheus text (malloc'ed, NUL-terminated), with the cache's statistics; NULL when out
 * of memory. */
char *metrics_render(struct metrics *m, struct prefix_cache *pc);

#endif /* NT_SERVER_METRICS_H */
