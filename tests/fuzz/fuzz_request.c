/* fuzz_request.c - libFuzzer target for the server's request parser (src/server/request.c):
 * arbitrary bytes as the body of a chat completions or a completions request.
 *
 * Input layout: byte 0 holds flags (bit 0 the endpoint: 0 chat, 1 completions; bit 1 the
 * server names its model "demo", else it takes any name; bits 2-3 the vocabulary that bounds
 * token-id prompts: 1, 1000, 131072 or INT32_MAX); the rest is the body, not NUL-terminated.
 *
 * Besides crashes, leaks and sanitizer reports, it aborts when request.h's contract breaks:
 *  - a success that leaves the request incomplete or out of range: the kind asked for; chat with
 *    a messages array that parses back as non-empty objects of the template's four roles
 *    (developer made system) and string or null content, tools NULL or a non-empty array, no
 *    prompt; a completion with exactly one of a non-empty text and 1.. ids in [0, vocab), no
 *    messages; each sampling field in its range and the untouched ones at their defaults;
 *    max_tokens 0 or in [1, 2^24]; 0..4 stop strings, non-empty; flags 0 or 1; speculative
 *    and its max in range; a model only where the server's name matches;
 *  - a request that does not say what the body says: the model name, the text prompt, the stop
 *    strings and the token ids compared (bytes and length) with json-c's own reading of the body;
 *  - a failure that is not -1 with a 400 (or a 404 model_not_found naming "model", only when
 *    the server names its model), a type and a message, or that leaves anything in the request;
 *    an error whose api_error_json does not parse back to {"error": {"message", "type", ...}};
 *  - a second parse of the same bytes with another outcome, field by field;
 *  - request_free leaving anything but zeros.
 *
 * Build: `make fuzz` (build/fuzz/fuzz_request); run on a copy of the corpus, e.g.
 *   rm -rf /tmp/fuzz_req && cp -r tests/fuzz/corpus/request /tmp/fuzz_req &&
 *   build/fuzz/fuzz_request -max_total_time=300 -max_len=4096 -dict=/tmp/fuzz_req.dict /tmp/fuzz_req
 * Seeds: tests/fuzz/make_corpus.sh (the unit test's good and bad bodies, OpenAI's shapes).
 * Dictionary: tests/fuzz/README.md (the field names, the roles, the speculative types, NaN,
 * 1e999, 18446744073709551616, \u0000, \ud800).
 *
 * Last run (clang 14, one process, the seeds and that dictionary, -max_len=4096, a build running
 * next to it): 6,428,102 executions in 301 s, corpus 61 -> 124 inputs, 271 -> 312 edges; then
 * 3,441,363 in 181 s on that corpus with -max_len=16384 (137 inputs, 312 edges); no crash, leak
 * or contract failure. Before it, the seeds' contract checks found a \u0000 inside the prompt,
 * a stop string or the model name cut short as a C string (an empty prompt accepted, a stop
 * string "" that matches everywhere, "demo\u0000x" taken as "demo"), fixed in request.c.
 */
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "server/request.h"

/* The string field key of o, as json-c reads it (bytes and length); NULL when absent or not a
 * string. */
static const char *body_string(json_object *o, const char *key, size_t *len) {
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) return NULL;
    *len = (size_t)json_object_get_string_len(v);
    return json_object_get_string(v);
}

static int same_string(const char *c, const char *body, size_t len) {
    return c && body && strlen(c) == len && memcmp(c, body, len) == 0;
}

static int is_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

static void check_messages(const char *messages_json) {
    NT_ASSERT(messages_json);
    json_object *a = json_tokener_parse(messages_json);
    NT_ASSERT(a && json_object_is_type(a, json_type_array) && json_object_array_length(a) > 0);
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *m = json_object_array_get_idx(a, i), *role, *content;
        NT_ASSERT(json_object_is_type(m, json_type_object));
        NT_ASSERT(json_object_object_get_ex(m, "role", &role) && json_object_is_type(role, json_type_string));
        const char *r = json_object_get_string(role);
        NT_ASSERT(!strcmp(r, "system") || !strcmp(r, "user") || !strcmp(r, "assistant") || !strcmp(r, "tool"));
        if (json_object_object_get_ex(m, "content", &content))
            NT_ASSERT(!content || json_object_is_type(content, json_type_string));
    }
    json_object_put(a);
}

/* A success: complete, in range, and what the body says. */
static void check_request(const struct server_request *r, enum request_kind kind, const struct request_limits *lim,
                          const char *body, size_t len) {
    NT_ASSERT(r->kind == kind);
    if (kind == REQUEST_CHAT) {
        check_messages(r->messages_json);
        if (r->tools_json) {
            json_object *t = json_tokener_parse(r->tools_json);
            NT_ASSERT(t && json_object_is_type(t, json_type_array) && json_object_array_length(t) > 0);
            json_object_put(t);
        }
        NT_ASSERT(!r->prompt_text && !r->prompt_ids && r->n_prompt_ids == 0);
    } else {
        NT_ASSERT(!r->messages_json && !r->tools_json);
        NT_ASSERT(!r->prompt_text != !r->prompt_ids);
        if (r->prompt_text) NT_ASSERT(r->prompt_text[0] && r->n_prompt_ids == 0);
        else NT_ASSERT(r->n_prompt_ids >= 1);
        for (int i = 0; i < r->n_prompt_ids; i++) NT_ASSERT(r->prompt_ids[i] >= 0 && r->prompt_ids[i] < lim->vocab);
    }
    const nemotron_sampler_params *p = &r->sampling, d = nemotron_sampler_default_params();
    NT_ASSERT(p->temperature >= 0 && p->temperature <= 2);
    NT_ASSERT(p->top_p > 0 && p->top_p <= 1);
    NT_ASSERT(p->min_p >= 0 && p->min_p <= 1);
    NT_ASSERT(p->presence_penalty >= -2 && p->presence_penalty <= 2);
    NT_ASSERT(p->frequency_penalty >= -2 && p->frequency_penalty <= 2);
    NT_ASSERT(p->top_k >= 0 && p->top_k <= 1 << 24);
    NT_ASSERT(p->repeat_penalty == d.repeat_penalty && p->penalty_last_n == d.penalty_last_n);
    NT_ASSERT(r->seed_given == 0 || r->seed_given == 1);
    if (!r->seed_given) NT_ASSERT(p->seed == d.seed);
    NT_ASSERT(r->max_tokens >= 0 && r->max_tokens <= 1 << 24);
    NT_ASSERT(r->n_stop >= 0 && r->n_stop <= REQUEST_MAX_STOP);
    for (int i = 0; i < REQUEST_MAX_STOP; i++) NT_ASSERT(i < r->n_stop ? r->stop[i] && r->stop[i][0] : !r->stop[i]);
    NT_ASSERT((r->stream == 0 || r->stream == 1) && (r->include_usage == 0 || r->include_usage == 1));
    NT_ASSERT(r->enable_thinking == 0 || r->enable_thinking == 1);
    NT_ASSERT(r->speculative >= REQUEST_SPEC_DEFAULT && r->speculative <= REQUEST_SPEC_MTP);
    NT_ASSERT(r->spec_max >= 0 && r->spec_max <= NEMOTRON_SPEC_MAX);

    /* What the body says, as json-c reads it: a success means the body is one JSON object. */
    json_tokener *tok = json_tokener_new_ex(64);
    NT_ASSERT(tok);
    json_object *o = json_tokener_parse_ex(tok, body, (int)len);
    json_tokener_free(tok);
    NT_ASSERT(o && json_object_is_type(o, json_type_object));
    size_t n = 0;
    const char *model = body_string(o, "model", &n);
    if (model) NT_ASSERT(same_string(r->model, model, n) && (!lim->model_id || same_string(lim->model_id, model, n)));
    else NT_ASSERT(!r->model);
    json_object *v;
    if (json_object_object_get_ex(o, "stop", &v) && v) {
        if (json_object_is_type(v, json_type_string)) {
            NT_ASSERT(r->n_stop == 1 && same_string(r->stop[0], json_object_get_string(v),
                                                    (size_t)json_object_get_string_len(v)));
        } else {
            NT_ASSERT(r->n_stop == (int)json_object_array_length(v));
            for (int i = 0; i < r->n_stop; i++) {
                json_object *s = json_object_array_get_idx(v, (size_t)i);
                NT_ASSERT(same_string(r->stop[i], json_object_get_string(s), (size_t)json_object_get_string_len(s)));
            }
        }
    } else {
        NT_ASSERT(r->n_stop == 0);
    }
    if (kind == REQUEST_COMPLETION) {
        NT_ASSERT(json_object_object_get_ex(o, "prompt", &v) && v);
        if (json_object_is_type(v, json_type_array) && r->prompt_text) {
            NT_ASSERT(json_object_array_length(v) == 1);
            v = json_object_array_get_idx(v, 0);
        }
        if (r->prompt_text) {
            NT_ASSERT(json_object_is_type(v, json_type_string));
            NT_ASSERT(same_string(r->prompt_text, json_object_get_string(v), (size_t)json_object_get_string_len(v)));
        } else {
            NT_ASSERT((int)json_object_array_length(v) == r->n_prompt_ids);
            for (int i = 0; i < r->n_prompt_ids; i++)
                NT_ASSERT(json_object_get_int64(json_object_array_get_idx(v, (size_t)i)) == r->prompt_ids[i]);
        }
    }
    json_object_put(o);
}

/* A failure: an OpenAI-shaped 4xx and an empty request. */
static void check_error(const struct api_error *e, const struct server_request *r, const struct request_limits *lim) {
    NT_ASSERT(is_zero(r, sizeof *r));
    NT_ASSERT(memchr(e->message, 0, sizeof e->message) && e->message[0]);
    NT_ASSERT(memchr(e->param, 0, sizeof e->param) && e->type && e->type[0]);
    if (e->status == 404) {
        NT_ASSERT(lim->model_id && e->code && !strcmp(e->code, "model_not_found") && !strcmp(e->param, "model"));
    } else {
        NT_ASSERT(e->status == 400 && !e->code && !strcmp(e->type, "invalid_request_error"));
    }
    char *j = api_error_json(e);
    NT_ASSERT(j);
    json_object *o = json_tokener_parse(j), *err, *msg, *type, *param;
    NT_ASSERT(o && json_object_object_get_ex(o, "error", &err) && json_object_is_type(err, json_type_object));
    NT_ASSERT(json_object_object_get_ex(err, "message", &msg) && json_object_is_type(msg, json_type_string) &&
              !strcmp(json_object_get_string(msg), e->message));
    NT_ASSERT(json_object_object_get_ex(err, "type", &type) && !strcmp(json_object_get_string(type), e->type));
    NT_ASSERT(json_object_object_get_ex(err, "param", &param) &&
              (e->param[0] ? param && !strcmp(json_object_get_string(param), e->param) : !param));
    NT_ASSERT(json_object_object_get_ex(err, "code", NULL));
    json_object_put(o);
    free(j);
}

static int same_opt_string(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static void check_same(int rc, const struct server_request *a, const struct api_error *ea, int rc2,
                       const struct server_request *b, const struct api_error *eb) {
    NT_ASSERT(rc == rc2);
    if (rc) {
        NT_ASSERT(ea->status == eb->status && ea->type == eb->type && ea->code == eb->code);
        NT_ASSERT(!strcmp(ea->param, eb->param) && !strcmp(ea->message, eb->message));
        return;
    }
    NT_ASSERT(a->kind == b->kind && same_opt_string(a->model, b->model));
    NT_ASSERT(same_opt_string(a->messages_json, b->messages_json) && same_opt_string(a->tools_json, b->tools_json));
    NT_ASSERT(a->enable_thinking == b->enable_thinking && same_opt_string(a->prompt_text, b->prompt_text));
    NT_ASSERT(a->n_prompt_ids == b->n_prompt_ids && !a->prompt_ids == !b->prompt_ids);
    if (a->n_prompt_ids) NT_ASSERT(!memcmp(a->prompt_ids, b->prompt_ids, (size_t)a->n_prompt_ids * sizeof *a->prompt_ids));
    const nemotron_sampler_params *p = &a->sampling, *q = &b->sampling;
    NT_ASSERT(p->temperature == q->temperature && p->top_k == q->top_k && p->top_p == q->top_p &&
              p->min_p == q->min_p && p->repeat_penalty == q->repeat_penalty &&
              p->presence_penalty == q->presence_penalty && p->frequency_penalty == q->frequency_penalty &&
              p->penalty_last_n == q->penalty_last_n && p->seed == q->seed);
    NT_ASSERT(a->seed_given == b->seed_given && a->max_tokens == b->max_tokens && a->n_stop == b->n_stop);
    for (int i = 0; i < a->n_stop; i++) NT_ASSERT(!strcmp(a->stop[i], b->stop[i]));
    NT_ASSERT(a->stream == b->stream && a->include_usage == b->include_usage);
    NT_ASSERT(a->speculative == b->speculative && a->spec_max == b->spec_max);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int vocabs[4] = {1, 1000, 131072, INT32_MAX};
    int flags = data[0];
    enum request_kind kind = flags & 1 ? REQUEST_COMPLETION : REQUEST_CHAT;
    struct request_limits lim = {flags & 2 ? "demo" : NULL, vocabs[(flags >> 2) & 3]};
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    struct server_request r, again;
    struct api_error e, e2;
    int rc = request_parse(body, len, kind, &lim, &r, &e);
    NT_ASSERT(rc == 0 || rc == -1);
    if (rc == 0) check_request(&r, kind, &lim, body, len);
    else check_error(&e, &r, &lim);
    int rc2 = request_parse(body, len, kind, &lim, &again, &e2);
    check_same(rc, &r, &e, rc2, &again, &e2);
    request_free(&r);
    request_free(&again);
    NT_ASSERT(is_zero(&r, sizeof r) && is_zero(&again, sizeof again));
    return 0;
}
