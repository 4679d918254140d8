/* metrics.c - Prometheus text exposition format 0.0.4 of the server's counters (metrics.h).
 *
 * Names carry the nemotron_ prefix and the unit, counters end in _total, as Prometheus' naming
 * guide asks, so dashboards written for other servers read them without surprises.
 */
#include "server/metrics.h"

#include <stdio.h>
#include <stdlib.h>

char *metrics_render(struct metrics *m, struct prefix_cache *pc) {
    struct prefix_cache_stats cs;
    prefix_cache_stats(pc, &cs);
    uint64_t gen = atomic_load(&m->generated_tokens), us = atomic_load(&m->gen_micros);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) return NULL;
#define COUNTER(name, help, value) \
    fprintf(f, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", (unsigned long long)(value))
#define GAUGE(name, help, fmt, value) fprintf(f, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", value)
    COUNTER("nemotron_requests_total", "HTTP requests answered.", atomic_load(&m->requests));
    COUNTER("nemotron_requests_failed_total", "HTTP requests answered with an error status.", atomic_load(&m->requests_failed));
    COUNTER("nemotron_prompt_tokens_total", "Prompt tokens of finished generations.", atomic_load(&m->prompt_tokens));
    COUNTER("nemotron_prompt_tokens_evaluated_total", "Prompt tokens run through the model (not restored from the prefix cache).",
            atomic_load(&m->prompt_tokens_evaluated));
    COUNTER("nemotron_generated_tokens_total", "Tokens generated.", gen);
    GAUGE("nemotron_generation_tokens_per_second", "Generated tokens per second of generation time, over the server's life.",
          "%.3f", us ? (double)gen * 1e6 / (double)us : 0.0);
    GAUGE("nemotron_queue_length", "Requests waiting for a slot.", "%d", atomic_load(&m->queued));
    GAUGE("nemotron_slots_busy", "Requests holding a slot.", "%d", atomic_load(&m->running));
    GAUGE("nemotron_device_failed", "1 once a device fault made generation unavailable (GET /health says why).", "%d",
          atomic_load(&m->device_failed));
    COUNTER("nemotron_prefix_cache_lookups_total", "Prompts looked up in the prefix cache.", cs.lookups);
    COUNTER("nemotron_prefix_cache_hits_total", "Prompts that restored a cached prefix.", cs.hits);
    COUNTER("nemotron_prefix_cache_hit_tokens_total", "Prompt tokens restored from the prefix cache.", cs.hit_tokens);
    COUNTER("nemotron_prefix_cache_evictions_total", "Snapshots evicted to stay within --cache-ram.", cs.evictions);
    GAUGE("nemotron_prefix_cache_entries", "Snapshots held.", "%llu", (unsigned long long)cs.entries);
    GAUGE("nemotron_prefix_cache_bytes", "Bytes the held snapshots take.", "%llu", (unsigned long long)cs.bytes);
    if (m->spec_on) {
        uint64_t drafted = atomic_load(&m->spec_drafted), accepted = atomic_load(&m->spec_accepted);
        COUNTER("nemotron_speculative_requests_total", "Generations decoded speculatively.", atomic_load(&m->spec_requests));
        COUNTER("nemotron_speculative_drafted_tokens_total", "Draft tokens checked by verify passes.", drafted);
        COUNTER("nemotron_speculative_accepted_tokens_total", "Draft tokens the model agreed with (emitted).", accepted);
        GAUGE("nemotron_speculative_acceptance_ratio", "Accepted over drafted tokens, over the server's life.", "%.4f",
              drafted ? (double)accepted / (double)drafted : 0.0);
    }
#undef COUNTER
#undef GAUGE
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}
