/* chat_parse.c - generated text split back into reasoning, content and tool calls.
 *
 * The model writes its reasoning, "</think>", the answer, and tool calls in the template's XML
 * form (the format the system prompt shows, vLLM's qwen3_coder parser reads):
 *   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...
 *   </function>\n</tool_call>
 * Rules (chat.h has the contract):
 *  - Reasoning. With thinking_in_prompt the text starts inside the reasoning; otherwise it does
 *    only if, after leading space, it opens with "<think>" (a "<think>" at the start is skipped
 *    in both cases). The reasoning ends at the first "</think>"; without one everything is
 *    reasoning (reasoning_unclosed) and the content is empty. Tool calls inside the reasoning
 *    stay reasoning text. reasoning is NULL when there is no think block at all.
 *  - Calls. After the reasoning, each "<tool_call>" up to the next "</tool_call>" that matches
 *    the grammar below becomes a call and leaves the content; anything else stays content as
 *    written. Grammar (ws = spaces, tabs, newlines):
 *      <tool_call> ws <function=NAME> ( ws <parameter=KEY> VALUE </parameter> )*
 *        ws </function> ws </tool_call>
 *    NAME and KEY: no '<', '>', newline or NUL, trimmed, not empty. VALUE: up to the first
 *    "</parameter>", minus one leading and one trailing "\n" (the template writes them); it
 *    cannot hold "</tool_call>". A value that is one valid JSON text (RFC 8259, no NaN) keeps
 *    its JSON type; any other value is a JSON string. A repeated key keeps the last value.
 *  - reasoning and content are trimmed as str.strip() does.
 * Owns nothing after the call but what it returns in struct nt_chat_parsed.
 */
#include "text/chat.h"

#include <json-c/json.h>
#include <limits.h>
#include <string.h>

/* Python's whitespace and "\r" aside, the model separates the call's tags with these. */
static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *find(const char *s, const char *end, const char *needle) {
    return memmem(s, (size_t)(end - s), needle, strlen(needle));
}

static int starts(const char *s, const char *end, const char *lit) {
    size_t k = strlen(lit);
    return (size_t)(end - s) >= k && memcmp(s, lit, k) == 0;
}

static char *dup_range(const char *s, size_t n) {
    char *p = nt_alloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static char *dup_stripped(const char *s, size_t n) {
    nt_chat_strip(&s, &n);
    return dup_range(s, n);
}

/* Reads "=NAME>" at *p (after "<function" or "<parameter"): the trimmed name, *p past '>'.
 * A NUL ends no C string the caller could use, so it makes the name malformed. */
static int read_name(const char **p, const char *end, const char **name, size_t *len) {
    const char *s = *p;
    if (s >= end || *s != '=') return 0;
    const char *q = ++s;
    while (q < end && *q != '>' && *q != '<' && *q != '\n' && *q != '\0') q++;
    if (q >= end || *q != '>') return 0;
    const char *a = s, *b = q;
    while (a < b && is_ws(*a)) a++;
    while (b > a && is_ws(b[-1])) b--;
    if (a == b) return 0;
    *name = a;
    *len = (size_t)(b - a);
    *p = q + 1;
    return 1;
}

/* A parameter's value into *o (NULL is JSON null): JSON when it is one JSON text, else a
 * string. 0: out of memory. */
static int param_value(const char *v, size_t n, struct json_object **o) {
    struct nt_err e;
    nemotron_status st = nt_chat_json_read(v, n, 0, o, &e);
    if (st == NEMOTRON_OK) return 1;
    if (st == NEMOTRON_ERR_NOMEM) return 0;
    *o = json_object_new_string_len(v, (int)n);
    return *o != NULL;
}

/* A well-formed call in [s, end) (s just past "<tool_call>", end at "</tool_call>"): fills
 * call and returns 1; 0 if it does not match the grammar; -1 out of memory. */
static int parse_call(const char *s, const char *end, struct nt_chat_call *call) {
    const char *name, *key;
    size_t name_len, key_len;
    while (s < end && is_ws(*s)) s++;
    if (!starts(s, end, "<function")) return 0;
    s += 9;
    if (!read_name(&s, end, &name, &name_len)) return 0;
    struct json_object *args = json_object_new_object();
    if (!args) return -1;
    int rc = 0;
    for (;;) {
        while (s < end && is_ws(*s)) s++;
        if (starts(s, end, "<parameter")) {
            s += 10;
            if (!read_name(&s, end, &key, &key_len)) break;
            const char *close = find(s, end, "</parameter>");
            if (!close) break;
            const char *v = s, *ve = close;
            if (v < ve && *v == '\n') v++;
            if (ve > v && ve[-1] == '\n') ve--;
            s = close + 12;
            char *k = dup_range(key, key_len);
            struct json_object *val = NULL;
            if (!k || !param_value(v, (size_t)(ve - v), &val) ||
                json_object_object_add(args, k, val) != 0) {
                json_object_put(val);
                nt_free(k);
                rc = -1;
                break;
            }
            nt_free(k);
            continue;
        }
        if (starts(s, end, "</function>")) {
            s += 11;
            while (s < end && is_ws(*s)) s++;
            rc = s == end;
        }
        break;
    }
    if (rc == 1) {
        const char *j = json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN |
                                                                 JSON_C_TO_STRING_NOSLASHESCAPE);
        call->name = dup_range(name, name_len);
        call->arguments_json = j ? nt_strdup(j) : NULL;
        if (!call->name || !call->arguments_json) {
            nt_free(call->name);
            nt_free(call->arguments_json);
            call->name = call->arguments_json = NULL;
            rc = -1;
        }
    }
    json_object_put(args);
    return rc;
}

static nemotron_status add_call(struct nt_chat_parsed *out, int *cap, struct nt_chat_call *c) {
    if (out->n_calls == *cap) {
        int ncap = *cap ? *cap * 2 : 4;
        struct nt_chat_call *p = nt_calloc((size_t)ncap, sizeof *p);
        if (!p) return NEMOTRON_ERR_NOMEM;
        if (out->n_calls) memcpy(p, out->calls, (size_t)out->n_calls * sizeof *p);
        nt_free(out->calls);
        out->calls = p;
        *cap = ncap;
    }
    out->calls[out->n_calls++] = *c;
    return NEMOTRON_OK;
}

/* The text after the reasoning: calls out, the rest (joined) into out->content. */
static nemotron_status parse_answer(const char *s, const char *end, struct nt_chat_parsed *out) {
    char *content = nt_alloc((size_t)(end - s) + 1); /* never longer than the text */
    if (!content) return NEMOTRON_ERR_NOMEM;
    size_t n = 0;
    int cap = 0;
    const char *copied = s, *at = s;
    nemotron_status st = NEMOTRON_OK;
    while ((at = find(at, end, "<tool_call>")) != NULL) {
        const char *close = find(at + 11, end, "</tool_call>");
        if (!close) break; /* no call can close after this one */
        struct nt_chat_call c = {NULL, NULL};
        int rc = parse_call(at + 11, close, &c);
        if (rc < 0 || (rc == 1 && (st = add_call(out, &cap, &c)) != NEMOTRON_OK)) {
            nt_free(c.name);
            nt_free(c.arguments_json);
            st = NEMOTRON_ERR_NOMEM;
            break;
        }
        if (rc == 1) {
            memcpy(content + n, copied, (size_t)(at - copied));
            n += (size_t)(at - copied);
            copied = at = close + 12;
        } else {
            at++; /* malformed: stays content */
        }
    }
    if (st != NEMOTRON_OK) {
        nt_free(content);
        return st;
    }
    memcpy(content + n, copied, (size_t)(end - copied));
    n += (size_t)(end - copied);
    out->content = dup_stripped(content, n);
    nt_free(content);
    return out->content ? NEMOTRON_OK : NEMOTRON_ERR_NOMEM;
}

nemotron_status nt_chat_parse(const char *text, size_t len, int thinking_in_prompt,
                              struct nt_chat_parsed *out, struct nt_err *err) {
    memset(out, 0, sizeof *out);
    if (!text && len) return nt_fail(err, NEMOTRON_ERR_ARG, "chat parse: text is NULL");
    /* json-c measures strings in int */
    if (len > INT_MAX) return nt_fail(err, NEMOTRON_ERR_ARG, "chat parse: text over 2 GiB");
    const char *s = text ? text : "", *end = s + len;
    const char *lead = s;
    size_t lead_n = len;
    nt_chat_strip(&lead, &lead_n);
    int in_think = thinking_in_prompt != 0;
    if (starts(lead, end, "<think>")) {
        s = lead + 7;
        in_think = 1;
    }
    nemotron_status st = NEMOTRON_OK;
    if (in_think) {
        const char *close = find(s, end, "</think>");
        const char *r_end = close ? close : end;
        out->reasoning = dup_stripped(s, (size_t)(r_end - s));
        if (!out->reasoning) st = NEMOTRON_ERR_NOMEM;
        out->reasoning_unclosed = close == NULL;
        s = close ? close + 8 : end;
    }
    if (st == NEMOTRON_OK) st = parse_answer(s, end, out);
    if (st != NEMOTRON_OK) {
        nt_chat_parsed_free(out);
        return nt_fail(err, st, "chat parse: out of memory");
    }
    return NEMOTRON_OK;
}

void nt_chat_parsed_free(struct nt_chat_parsed *p) {
    if (!p) return;
    for (int i = 0; i < p->n_calls; i++) {
        nt_free(p->calls[i].name);
        nt_free(p->calls[i].arguments_json);
    }
    nt_free(p->calls);
    nt_free(p->reasoning);
    nt_free(p->content);
    memset(p, 0, sizeof *p);
}
