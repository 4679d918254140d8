/* responses.c - response objects and event streams of the OpenAI API (responses.h).
 *
 * One chunk builder serves every streamed event (a delta, the finish, the usage), so all chunks
 * of a stream carry the same id, object type, creation time and model, as clients check.
 */
#include "server/responses.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_add(struct sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 512;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->p, cap);
        if (!grown) return -1;
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static json_object *usage_json(const struct job *j) {
    json_object *u = json_object_new_object(), *details = json_object_new_object();
    json_object_object_add(u, "prompt_tokens", json_object_new_int(j->n_prompt));
    json_object_object_add(u, "completion_tokens", json_object_new_int(j->n_generated));
    json_object_object_add(u, "total_tokens", json_object_new_int(j->n_prompt + j->n_generated));
    json_object_object_add(details, "cached_tokens", json_object_new_int(j->n_cached));
    json_object_object_add(u, "prompt_tokens_details", details);
    return u;
}

/* The envelope shared by whole responses and chunks. */
static json_object *envelope(const struct job *j, const struct response_ctx *c, int chunk) {
    json_object *o = json_object_new_object();
    int chat = j->req.kind == REQUEST_CHAT;
    json_object_object_add(o, "id", json_object_new_string(c->id));
    json_object_object_add(o, "object", json_object_new_string(chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                                     : "text_completion"));
    json_object_object_add(o, "created", json_object_new_int64(c->created));
    json_object_object_add(o, "model", json_object_new_string(c->model_id));
    return o;
}

static char *to_string(json_object *o) {
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

/* OpenAI's tool_calls array: ids are unique within the response, arguments a JSON string. */
static json_object *tool_calls_json(const nemotron_chat_reply *r, const struct response_ctx *c, int with_index) {
    json_object *calls = json_object_new_array();
    for (int i = 0; i < r->n_calls; i++) {
        json_object *call = json_object_new_object(), *fn = json_object_new_object();
        char id[80];
        snprintf(id, sizeof id, "call_%s_%d", c->id, i);
        if (with_index) json_object_object_add(call, "index", json_object_new_int(i));
        json_object_object_add(call, "id", json_object_new_string(id));
        json_object_object_add(call, "type", json_object_new_string("function"));
        json_object_object_add(fn, "name", json_object_new_string(r->calls[i].name));
        json_object_object_add(fn, "arguments", json_object_new_string(r->calls[i].arguments_json));
        json_object_object_add(call, "function", fn);
        json_object_array_add(calls, call);
    }
    return calls;
}

char *response_json(const struct job *j, const struct response_ctx *c) {
    json_object *o = envelope(j, c, 0), *choices = json_object_new_array(), *choice = json_object_new_object();
    const char *text = j->text ? j->text : "";
    json_object_object_add(choice, "index", json_object_new_int(0));
    const char *finish = j->finish_reason;
    if (j->req.kind == REQUEST_CHAT) {
        nemotron_chat_reply r;
        json_object *msg = json_object_new_object();
        json_object_object_add(msg, "role", json_object_new_string("assistant"));
        if (nemotron_chat_parse(text, j->len, j->thinking_in_prompt, &r) == NEMOTRON_OK) {
            json_object_object_add(msg, "content", json_object_new_string(r.content ? r.content : ""));
            if (r.reasoning) json_object_object_add(msg, "reasoning_content", json_object_new_string(r.reasoning));
            if (r.n_calls) {
                json_object_object_add(msg, "tool_calls", tool_calls_json(&r, c, 0));
                finish = "tool_calls";
            }
            nemotron_chat_reply_free(&r);
        } else {
            json_object_object_add(msg, "content", json_object_new_string_len(text, (int)j->len));
        }
        json_object_object_add(choice, "message", msg);
    } else {
        json_object_object_add(choice, "text", json_object_new_string_len(text, (int)j->len));
    }
    json_object_object_add(choice, "finish_reason", json_object_new_string(finish));
    json_object_array_add(choices, choice);
    json_object_object_add(o, "choices", choices);
    json_object_object_add(o, "usage", usage_json(j));
    return to_string(o);
}

/* "data: <chunk>\n\n" with one choice: a chat delta {key: text} (key NULL: an empty delta), or a
 * completion's text; finish NULL while the stream goes on. */
static int emit(struct sbuf *out, const struct job *j, const struct response_ctx *c, const char *key, json_object *value,
                const char *finish) {
    json_object *o = envelope(j, c, 1), *choices = json_object_new_array(), *choice = json_object_new_object();
    json_object_object_add(choice, "index", json_object_new_int(0));
    if (j->req.kind == REQUEST_CHAT) {
        json_object *delta = json_object_new_object();
        if (key) json_object_object_add(delta, key, value);
        else json_object_put(value);
        json_object_object_add(choice, "delta", delta);
    } else {
        json_object_object_add(choice, "text", value ? value : json_object_new_string(""));
    }
    json_object_object_add(choice, "finish_reason", finish ? json_object_new_string(finish) : NULL);
    json_object_array_add(choices, choice);
    json_object_object_add(o, "choices", choices);
    char *s = to_string(o);
    int rc = !s || sbuf_add(out, "data: ", 6) || sbuf_add(out, s, strlen(s)) || sbuf_add(out, "\n\n", 2) ? -1 : 0;
    free(s);
    return rc;
}

static int emit_text(struct sbuf *out, const struct job *j, const struct response_ctx *c, const char *key, const char *s,
                     size_t n) {
    if (!n) return 0;
    return emit(out, j, c, key, json_object_new_string_len(s, (int)n), NULL);
}

/* Emits text[sent..end) as `key`, holding back a tail that may grow into marker; when marker is
 * found, emits up to it and returns its offset (else -1). */
static long emit_until(struct stream *st, const struct job *j, const struct response_ctx *c, struct sbuf *out,
                       const char *key, const char *marker, size_t end, int final, int *err) {
    const char *text = j->text;
    char *at = memmem(text + st->sent, end - st->sent, marker, strlen(marker));
    size_t stop = at ? (size_t)(at - text) : end - (final ? 0 : partial_suffix(text + st->sent, end - st->sent, marker));
    if (emit_text(out, j, c, key, text + st->sent, stop - st->sent)) *err = 1;
    st->sent = stop;
    return at ? (long)stop : -1;
}

static int finish_stream(struct stream *st, const struct job *j, const struct response_ctx *c, struct sbuf *out) {
    int err = 0;
    if (j->failed) {
        char *e = api_error_json(&j->error);
        err = !e || sbuf_add(out, "data: ", 6) || sbuf_add(out, e, strlen(e)) || sbuf_add(out, "\n\n", 2);
        free(e);
    } else {
        const char *finish = j->finish_reason;
        if (st->phase == STREAM_TOOLS) {
            /* the calls are known only now: parse the whole reply, send them (or, when they did not
             * parse, the held text as content) */
            nemotron_chat_reply r;
            if (nemotron_chat_parse(j->text, j->len, j->thinking_in_prompt, &r) == NEMOTRON_OK) {
                if (r.n_calls) {
                    err |= emit(out, j, c, "tool_calls", tool_calls_json(&r, c, 1), NULL);
                    finish = "tool_calls";
                } else {
                    err |= emit_text(out, j, c, "content", j->text + st->tools_at, j->len - st->tools_at);
                }
                nemotron_chat_reply_free(&r);
            }
        }
        err |= emit(out, j, c, NULL, NULL, finish);
        if (j->req.include_usage) {
            json_object *o = envelope(j, c, 1);
            json_object_object_add(o, "choices", json_object_new_array());
            json_object_object_add(o, "usage", usage_json(j));
            char *s = to_string(o);
            err |= !s || sbuf_add(out, "data: ", 6) || sbuf_add(out, s, strlen(s)) || sbuf_add(out, "\n\n", 2);
            free(s);
        }
    }
    err |= sbuf_add(out, "data: [DONE]\n\n", 14);
    st->phase = STREAM_ENDED;
    return err ? -1 : 0;
}

int stream_advance(struct stream *st, const struct job *j, const struct response_ctx *c, struct sbuf *out) {
    if (st->phase == STREAM_ENDED) return 0;
    int err = 0;
    if (!st->role_sent && j->req.kind == REQUEST_CHAT && !j->failed) {
        err |= emit(out, j, c, "role", json_object_new_string("assistant"), NULL);
        st->role_sent = 1;
    }
    int final = j->done && !j->failed;
    size_t end = final ? j->len : j->ready;
    if (j->req.kind == REQUEST_COMPLETION) {
        err |= emit_text(out, j, c, NULL, j->text + st->sent, end - st->sent);
        st->sent = end;
    } else {
        if (st->phase == STREAM_START && end > st->sent) {
            /* the reply may open with "<think>" (nemotron_chat_parse skips it either way) */
            size_t have = end - st->sent;
            if (have >= 7 && !memcmp(j->text + st->sent, "<think>", 7)) {
                st->sent += 7;
                st->phase = STREAM_REASONING;
            } else if (have < 7 && !final && !memcmp(j->text + st->sent, "<think>", have)) {
                /* wait: it may still become "<think>" */
            } else {
                st->phase = j->thinking_in_prompt ? STREAM_REASONING : STREAM_CONTENT;
            }
        }
        if (st->phase == STREAM_REASONING) {
            long at = emit_until(st, j, c, out, "reasoning_content", "</think>", end, final, &err);
            if (at >= 0) {
                st->sent = (size_t)at + 8;
                st->skip_blank = 1;
                st->phase = STREAM_CONTENT;
            }
        }
        if (st->phase == STREAM_CONTENT && st->skip_blank) {
            /* the answer starts after the blank the template puts behind "</think>", which may
             * arrive in later pieces */
            while (st->sent < end && (j->text[st->sent] == '\n' || j->text[st->sent] == ' ')) st->sent++;
            if (st->sent < end) st->skip_blank = 0;
        }
        if (st->phase == STREAM_CONTENT) {
            long at = emit_until(st, j, c, out, "content", "<tool_call>", end, final, &err);
            if (at >= 0) {
                st->tools_at = (size_t)at;
                st->phase = STREAM_TOOLS;
            }
        }
        if (final && st->phase == STREAM_START) st->phase = STREAM_CONTENT;
    }
    if (j->done) err |= finish_stream(st, j, c, out);
    return err ? -1 : 0;
}
