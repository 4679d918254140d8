/* request.c - parses OpenAI request bodies into struct server_request (request.h).
 *
 * Every field is looked up by name, its JSON type checked (a number where a number belongs, a
 * boolean is not one), its range checked, and then copied; unknown fields are ignored as OpenAI's
 * own server does for fields it does not use. The first problem found is the one reported, with
 * the field's name in `param`. Nothing here allocates more than the body's size in total.
 */
#include "server/request.h"

#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_fail(struct api_error *e, int status, const char *type, const char *code, const char *param,
             const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

char *api_error_json(const struct api_error *e) {
    json_object *err = json_object_new_object(), *root = json_object_new_object();
    json_object_object_add(err, "message", json_object_new_string(e->message));
    json_object_object_add(err, "type", json_object_new_string(e->type ? e->type : "server_error"));
    json_object_object_add(err, "param", e->param[0] ? json_object_new_string(e->param) : NULL);
    json_object_object_add(err, "code", e->code ? json_object_new_string(e->code) : NULL);
    json_object_object_add(root, "error", err);
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

static int bad(struct api_error *e, const char *param, const char *what) {
    return api_fail(e, 400, "invalid_request_error", NULL, param, "'%s' %s", param, what);
}

static int is_number(json_object *v) {
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/* A number field in [lo, hi]; absent leaves *out as it was. */
static int get_number(json_object *o, const char *key, double lo, double hi, float *out, struct api_error *e) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return 0;
    if (!is_number(v)) return bad(e, key, "must be a number");
    double d = json_object_get_double(v);
    if (!isfinite(d) || d < lo || d > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be a number in [%g, %g]", lo, hi);
        return bad(e, key, what);
    }
    *out = (float)d;
    return 0;
}

/* An integer field in [lo, hi] (json-c keeps integers as int64); absent: *present = 0. */
static int get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out, int *present,
                   struct api_error *e) {
    json_object *v;
    *present = 0;
    if (!json_object_object_get_ex(o, key, &v) || !v) return 0;
    if (!json_object_is_type(v, json_type_int)) return bad(e, key, "must be an integer");
    int64_t i = json_object_get_int64(v);
    if (i < lo || i > hi) {
        char what[96];
        snprintf(what, sizeof what, "must be an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        return bad(e, key, what);
    }
    *out = i;
    *present = 1;
    return 0;
}

static int get_bool(json_object *o, const char *key, int *out, struct api_error *e) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !v) return 0;
    if (!json_object_is_type(v, json_type_boolean)) return bad(e, key, "must be a boolean");
    *out = json_object_get_boolean(v);
    return 0;
}

/* A string field's value, copied. A NUL inside it (\u0000) is refused: as a C string it would
 * be cut short there, into a stop string "" that matches everywhere, an empty prompt, or a
 * model name that matches the served one by a prefix. */
static int copy_string(json_object *v, const char *param, char **out, struct api_error *e) {
    const char *s = json_object_get_string(v);
    if (memchr(s, 0, (size_t)json_object_get_string_len(v)))
        return bad(e, param, "must not hold a NUL character (\\u0000)");
    if (!(*out = strdup(s))) return api_fail(e, 500, "server_error", NULL, param, "out of memory");
    return 0;
}

static char *dup_json(json_object *v) {
    return strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* stop: a string or an array of up to 4 non-empty strings. */
static int parse_stop(json_object *o, struct server_request *r, struct api_error *e) {
    json_object *v;
    if (!json_object_object_get_ex(o, "stop", &v) || !v) return 0;
    if (json_object_is_type(v, json_type_string)) {
        if (!json_object_get_string_len(v)) return bad(e, "stop", "must not be empty");
        if (copy_string(v, "stop", &r->stop[0], e)) return -1;
        r->n_stop = 1;
        return 0;
    }
    if (!json_object_is_type(v, json_type_array)) return bad(e, "stop", "must be a string or an array of strings");
    size_t n = json_object_array_length(v);
    if (n > REQUEST_MAX_STOP) return bad(e, "stop", "may hold at most 4 strings");
    for (size_t i = 0; i < n; i++) {
        json_object *s = json_object_array_get_idx(v, i);
        if (!json_object_is_type(s, json_type_string) || !json_object_get_string_len(s))
            return bad(e, "stop", "must hold non-empty strings");
        if (copy_string(s, "stop", &r->stop[r->n_stop], e)) return -1;
        r->n_stop++;
    }
    return 0;
}

/* "speculative": false, true, or {"type": "ngram" | "draft" | "mtp" | "none", "max": K}. Whether the
 * server can do what it asks is the server's check: this one knows only the field's shape. */
static int parse_speculative(json_object *o, struct server_request *r, struct api_error *e) {
    json_object *v, *t, *k;
    if (!json_object_object_get_ex(o, "speculative", &v) || !v) return 0;
    if (json_object_is_type(v, json_type_boolean)) {
        r->speculative = json_object_get_boolean(v) ? REQUEST_SPEC_ON : REQUEST_SPEC_OFF;
        return 0;
    }
    if (!json_object_is_type(v, json_type_object))
        return bad(e, "speculative", "must be a boolean or an object {\"type\": \"ngram\" | \"draft\" | \"mtp\" | \"none\", \"max\": K}");
    r->speculative = REQUEST_SPEC_ON;
    if (json_object_object_get_ex(v, "type", &t) && t) {
        const char *type = json_object_is_type(t, json_type_string) ? json_object_get_string(t) : "";
        if (!strcmp(type, "ngram")) r->speculative = REQUEST_SPEC_NGRAM;
        else if (!strcmp(type, "draft")) r->speculative = REQUEST_SPEC_DRAFT;
        else if (!strcmp(type, "mtp")) r->speculative = REQUEST_SPEC_MTP;
        else if (!strcmp(type, "none")) r->speculative = REQUEST_SPEC_OFF;
        else return bad(e, "speculative.type", "must be \"ngram\", \"draft\", \"mtp\" or \"none\"");
    }
    if (json_object_object_get_ex(v, "max", &k) && k) {
        if (!json_object_is_type(k, json_type_int) || json_object_get_int64(k) < 1 ||
            json_object_get_int64(k) > NEMOTRON_SPEC_MAX) {
            char what[64];
            snprintf(what, sizeof what, "must be an integer in [1, %d]", NEMOTRON_SPEC_MAX);
            return bad(e, "speculative.max", what);
        }
        r->spec_max = (int)json_object_get_int64(k);
    }
    return 0;
}

/* Sampling, length, stop, stream and speculation fields shared by both endpoints. */
static int parse_common(json_object *o, struct server_request *r, struct api_error *e) {
    nemotron_sampler_params *p = &r->sampling;
    int64_t i;
    int present;
    /* OpenAI's ranges: temperature [0, 2], penalties [-2, 2] */
    if (get_number(o, "temperature", 0, 2, &p->temperature, e) || get_number(o, "top_p", 0, 1, &p->top_p, e) ||
        get_number(o, "min_p", 0, 1, &p->min_p, e) ||
        get_number(o, "presence_penalty", -2, 2, &p->presence_penalty, e) ||
        get_number(o, "frequency_penalty", -2, 2, &p->frequency_penalty, e))
        return -1;
    if (json_object_object_get_ex(o, "top_p", NULL) && p->top_p <= 0) return bad(e, "top_p", "must be above 0");
    /* top_k: 0 is off; the vocabulary bounds it anyway, 1<<24 keeps it an int */
    if (get_int(o, "top_k", 0, 1 << 24, &i, &present, e)) return -1;
    if (present) p->top_k = (int)i;
    if (get_int(o, "seed", INT64_MIN, INT64_MAX, &i, &present, e)) return -1;
    if (present) {
        p->seed = (uint64_t)i;
        r->seed_given = 1;
    }
    /* max_completion_tokens is the newer name; either gives the limit, 1 << 24 keeps it an int */
    if (get_int(o, "max_tokens", 1, 1 << 24, &i, &present, e)) return -1;
    if (present) r->max_tokens = (int)i;
    if (get_int(o, "max_completion_tokens", 1, 1 << 24, &i, &present, e)) return -1;
    if (present) r->max_tokens = (int)i;
    if (parse_stop(o, r, e) || get_bool(o, "stream", &r->stream, e) || parse_speculative(o, r, e)) return -1;
    json_object *so;
    if (json_object_object_get_ex(o, "stream_options", &so) && so) {
        if (!json_object_is_type(so, json_type_object)) return bad(e, "stream_options", "must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    }
    json_object *n;
    if (json_object_object_get_ex(o, "n", &n) && n &&
        (!json_object_is_type(n, json_type_int) || json_object_get_int64(n) != 1))
        return bad(e, "n", "must be 1 (one choice per request)");
    return 0;
}

static int valid_role(const char *role) {
    return !strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant") || !strcmp(role, "tool") ||
           !strcmp(role, "developer");
}

/* content: a string, null (assistant turns with tool calls), or an array of {"type": "text",
 * "text": ...} parts, which are joined into one string so the template sees text only. */
static int normalise_content(json_object *m, size_t idx, struct api_error *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    json_object *c;
    if (!json_object_object_get_ex(m, "content", &c) || !c || json_object_is_type(c, json_type_string)) return 0;
    if (!json_object_is_type(c, json_type_array))
        return api_fail(e, 400, "invalid_request_error", NULL, param, "'%s' must be a string, null or an array of text parts", param);
    size_t n = json_object_array_length(c), total = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *part = json_object_array_get_idx(c, i), *type, *text;
        if (!json_object_is_type(part, json_type_object) || !json_object_object_get_ex(part, "type", &type) ||
            !json_object_is_type(type, json_type_string) || strcmp(json_object_get_string(type), "text") ||
            !json_object_object_get_ex(part, "text", &text) || !json_object_is_type(text, json_type_string))
            return api_fail(e, 400, "invalid_request_error", NULL, param,
                            "'%s' parts must be {\"type\": \"text\", \"text\": string} (this model reads text only)", param);
        total += (size_t)json_object_get_string_len(text);
    }
    char *joined = malloc(total + 1);
    if (!joined) return api_fail(e, 500, "server_error", NULL, param, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *text;
        json_object_object_get_ex(json_object_array_get_idx(c, i), "text", &text);
        size_t l = (size_t)json_object_get_string_len(text);
        memcpy(joined + at, json_object_get_string(text), l);
        at += l;
    }
    joined[at] = 0;
    json_object_object_add(m, "content", json_object_new_string_len(joined, (int)at));
    free(joined);
    return 0;
}

static int parse_chat(json_object *o, struct server_request *r, struct api_error *e) {
    json_object *msgs;
    if (!json_object_object_get_ex(o, "messages", &msgs) || !msgs)
        return api_fail(e, 400, "invalid_request_error", NULL, "messages", "'messages' is required");
    if (!json_object_is_type(msgs, json_type_array) || json_object_array_length(msgs) == 0)
        return bad(e, "messages", "must be a non-empty array");
    size_t n = json_object_array_length(msgs);
    for (size_t i = 0; i < n; i++) {
        json_object *m = json_object_array_get_idx(msgs, i), *role;
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_object_is_type(m, json_type_object)) return bad(e, param, "must be an object");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_object_object_get_ex(m, "role", &role) || !json_object_is_type(role, json_type_string) ||
            !valid_role(json_object_get_string(role)))
            return bad(e, param, "must be one of system, developer, user, assistant, tool");
        /* the template knows "system"; OpenAI's newer "developer" means the same */
        if (!strcmp(json_object_get_string(role), "developer"))
            json_object_object_add(m, "role", json_object_new_string("system"));
        if (normalise_content(m, i, e)) return -1;
    }
    r->messages_json = dup_json(msgs);
    json_object *tools, *choice;
    int tools_off = json_object_object_get_ex(o, "tool_choice", &choice) && json_object_is_type(choice, json_type_string) &&
                    !strcmp(json_object_get_string(choice), "none");
    if (json_object_object_get_ex(o, "tools", &tools) && tools) {
        if (!json_object_is_type(tools, json_type_array)) return bad(e, "tools", "must be an array");
        for (size_t i = 0; i < json_object_array_length(tools); i++) {
            json_object *t = json_object_array_get_idx(tools, i), *f, *name;
            if (!json_object_is_type(t, json_type_object) || !json_object_object_get_ex(t, "function", &f) ||
                !json_object_is_type(f, json_type_object) || !json_object_object_get_ex(f, "name", &name) ||
                !json_object_is_type(name, json_type_string))
                return bad(e, "tools", "must hold {\"type\": \"function\", \"function\": {\"name\": ...}} objects");
        }
        if (!tools_off && json_object_array_length(tools) > 0) r->tools_json = dup_json(tools);
    }
    json_object *kw;
    if (json_object_object_get_ex(o, "chat_template_kwargs", &kw) && kw) {
        if (!json_object_is_type(kw, json_type_object)) return bad(e, "chat_template_kwargs", "must be an object");
        if (get_bool(kw, "enable_thinking", &r->enable_thinking, e)) return -1;
    }
    return 0;
}

static int parse_completion(json_object *o, struct server_request *r, const struct request_limits *lim,
                            struct api_error *e) {
    json_object *p;
    if (!json_object_object_get_ex(o, "prompt", &p) || !p)
        return api_fail(e, 400, "invalid_request_error", NULL, "prompt", "'prompt' is required");
    if (json_object_is_type(p, json_type_string)) {
        if (!json_object_get_string_len(p)) return bad(e, "prompt", "must not be empty");
        return copy_string(p, "prompt", &r->prompt_text, e);
    }
    /* a batch of prompts (an array of strings or of arrays) is one request per prompt in
     * OpenAI's API; this server answers one prompt per request */
    if (!json_object_is_type(p, json_type_array) || json_object_array_length(p) == 0)
        return bad(e, "prompt", "must be a string or a non-empty array of token ids");
    size_t n = json_object_array_length(p);
    if (n == 1 && json_object_is_type(json_object_array_get_idx(p, 0), json_type_string)) {
        if (copy_string(json_object_array_get_idx(p, 0), "prompt", &r->prompt_text, e)) return -1;
        if (!r->prompt_text[0]) return bad(e, "prompt", "must not be empty");
        return 0;
    }
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return api_fail(e, 500, "server_error", NULL, "prompt", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_object *id = json_object_array_get_idx(p, i);
        if (!json_object_is_type(id, json_type_int) || json_object_get_int64(id) < 0 ||
            json_object_get_int64(id) >= lim->vocab) {
            char what[96];
            snprintf(what, sizeof what, "must hold token ids in [0, %d) (item %zu does not)", lim->vocab, i);
            return bad(e, "prompt", what);
        }
        r->prompt_ids[i] = (int32_t)json_object_get_int64(id);
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

void request_free(struct server_request *r) {
    free(r->model);
    free(r->messages_json);
    free(r->tools_json);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* The body as one JSON object: anything but whitespace after it is an error, as is a NUL byte
 * (json-c would stop there and read a prefix). */
static json_object *parse_body(const char *body, size_t len, struct api_error *e) {
    if (len == 0) {
        api_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body is empty (a JSON object was expected)");
        return NULL;
    }
    if (memchr(body, 0, len) || len > (size_t)INT32_MAX) {
        api_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body is not valid JSON (it holds a NUL byte)");
        return NULL;
    }
    /* 64 levels: deeper than any request needs, shallow enough that json-c's recursion is safe */
    json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) {
        api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    json_object *o = json_tokener_parse_ex(tok, body, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (o && used < len && (body[used] == ' ' || body[used] == '\n' || body[used] == '\r' || body[used] == '\t')) used++;
    if (!o || jerr != json_tokener_success || used != len) {
        api_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body is not valid JSON (%s at byte %zu)",
                 o && jerr == json_tokener_success ? "trailing bytes" : json_tokener_error_desc(jerr), used);
        json_object_put(o);
        return NULL;
    }
    if (!json_object_is_type(o, json_type_object)) {
        api_fail(e, 400, "invalid_request_error", NULL, NULL, "the request body must be a JSON object");
        json_object_put(o);
        return NULL;
    }
    return o;
}

int request_parse(const char *body, size_t len, enum request_kind kind, const struct request_limits *lim,
                  struct server_request *out, struct api_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    json_object *o = parse_body(body, len, err);
    if (!o) return -1;
    out->kind = kind;
    out->sampling = nemotron_sampler_default_params();
    out->enable_thinking = 1;
    int rc = 0;
    json_object *model;
    if (json_object_object_get_ex(o, "model", &model) && model) {
        if (!json_object_is_type(model, json_type_string)) rc = bad(err, "model", "must be a string");
        else if (!(rc = copy_string(model, "model", &out->model, err)) && lim->model_id && strcmp(out->model, lim->model_id))
            rc = api_fail(err, 404, "invalid_request_error", "model_not_found", "model",
                          "The model '%.200s' does not exist (this server has '%.200s')", out->model, lim->model_id);
    }
    if (!rc) rc = parse_common(o, out, err);
    if (!rc) rc = kind == REQUEST_CHAT ? parse_chat(o, out, err) : parse_completion(o, out, lim, err);
    json_object_put(o);
    if (rc) request_free(out);
    return rc;
}
