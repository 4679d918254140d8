/* request.h - an OpenAI request body turned into a plain C struct, and OpenAI-shaped errors.
 *
 * request.c owns the only code that reads a request's JSON: it checks every field's type and
 * range and copies what generation needs into struct server_request, so nothing after it touches
 * untrusted JSON. It knows nothing of HTTP, the model or the tokenizer (a test feeds it garbage).
 * Invariant: request_parse either fills the request completely and returns 0, or leaves it
 * empty (request_free-able) and fills a 4xx api_error.
 */
#ifndef NT_SERVER_REQUEST_H
#define NT_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "nemotron.h"

/* OpenAI allows at most 4 stop strings */
#define REQUEST_MAX_STOP 4

/* An error as OpenAI reports it: {"error": {"message", "type", "param", "code"}} with status. */
struct api_error {
    int status;                 /* HTTP status: 400, 401, 404, 413, 429, 500, 503 */
    const char *type;           /* "invalid_request_error", "authentication_error", ... */
    const char *code;           /* NULL or a machine-readable code ("model_not_found") */
    char param[64];             /* the offending field, "" when none */
    char message[512];
};

/* Fills e; returns -1 so callers can `return api_fail(...)`. */
int api_fail(struct api_error *e, int status, const char *type, const char *code, const char *param,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error as a JSON body (malloc'ed, NUL-terminated); NULL when out of memory. */
char *api_error_json(const struct api_error *e);

enum request_kind { REQUEST_CHAT, REQUEST_COMPLETION };

/* A request's "speculative" field: absent (the server's setting), false, true (the server's
 * drafter), or {"type": "ngram" | "draft" | "mtp" | "none", "max": K}. */
enum request_spec {
    REQUEST_SPEC_DEFAULT,
    REQUEST_SPEC_OFF,
    REQUEST_SPEC_ON,
    REQUEST_SPEC_NGRAM,
    REQUEST_SPEC_DRAFT,
    REQUEST_SPEC_MTP
};

struct server_request {
    enum request_kind kind;
    char *model;                /* as the client named it; NULL when absent */
    /* chat */
    char *messages_json;        /* the validated messages array, re-serialized for chat_render */
    char *tools_json;           /* the tools array, or NULL (also when tool_choice is "none") */
    int enable_thinking;        /* chat_template_kwargs.enable_thinking (the template's default 1) */
    /* completion: text or ids, exactly one of them */
    char *prompt_text;
    int32_t *prompt_ids;
    int n_prompt_ids;
    /* both */
    nemotron_sampler_params sampling;
    int seed_given;
    int max_tokens;             /* 0: until the context is full */
    char *stop[REQUEST_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    enum request_spec speculative;
    int spec_max;               /* "speculative": {"max": K}, 1..NEMOTRON_SPEC_MAX; 0: the server's */
};

/* What the parser checks a request against. */
struct request_limits {
    const char *model_id;       /* the one model served: any other name is a 404 */
    int vocab;                  /* token ids of a completion prompt lie in [0, vocab) */
};

/* Parses body[0..len) (not necessarily NUL-terminated) as a request of kind. 0 on success;
 * -1 with *err filled (400 malformed or wrongly typed, 404 unknown model). The request is
 * request_free-able in both cases. */
int request_parse(const char *body, size_t len, enum request_kind kind, const struct request_limits *lim,
                  struct server_request *out, struct api_error *err);
void request_free(struct server_request *r);

#endif /* NT_SERVER_REQUEST_H */
