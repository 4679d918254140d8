/* server.h - `nemotron serve`: an OpenAI-compatible HTTP server over the public API.
 *
 * The server is split by concern: http.c (libmicrohttpd: routing, authentication, body limits,
 * responses and event streams), request.c (request bodies into plain structs), slots.c
 * (sessions, the queue and generation), prefix_cache.c (snapshots of hybrid state by prompt
 * prefix), responses.c (response JSON and stream chunks) and metrics.c (Prometheus text). This
 * header is what the command (tools/serve.c) calls.
 */
#ifndef NT_SERVER_H
#define NT_SERVER_H

#include <stddef.h>

struct server_config {
    const char *model_path;
    const char *tokenizer_path;   /* NULL: the model's own; else a tokenizer.json, a model directory
                                   * or a .nemo (a synthetic model carries none) */
    const char *host;             /* an IPv4 or IPv6 address to listen on */
    int port;
    const char *api_key;          /* NULL: no authentication */
    int parallel;                 /* slots: sequences generated at once */
    int queue_max;                /* requests that may wait for a slot */
    int n_ctx;                    /* positions per slot */
    const char *device;           /* NULL: cpu */
    int threads;                  /* CPU threads; <= 0: the physical cores */
    size_t cache_bytes;           /* the prefix cache's budget */
    /* speculative decoding for every slot (a request may turn it off, or choose the drafter):
     * spec_max 0: off; else n-gram drafts, the draft model's when draft_model is set, or the
     * model's MTP step's when mtp is set */
    int spec_max;                 /* K, 1..NEMOTRON_SPEC_MAX: the most drafts a request may use */
    const char *draft_model;      /* a smaller model of the same vocabulary, or NULL */
    int mtp;                      /* 1 (--spec mtp): the slots keep the model's MTP step and draft
                                   * with it; a model without MTP layers fails the start */
};

/* Listens, then loads the model in a thread (every endpoint answers 503 "loading" meanwhile; a
 * signal during the load ends the process at once, status 0), serves until SIGINT or SIGTERM,
 * then stops accepting, ends the running requests and returns. Logs to stderr. 0 after a clean
 * shutdown; 1 when the server could not start (the message said why). */
int server_run(const struct server_config *cfg);

#endif /* NT_SERVER_H */
