/* responses.h - OpenAI response bodies and server-sent-event streams built from a job's output.
 *
 * responses.c turns what a slot produced (slots.h: text, counts, finish reason) into the JSON
 * OpenAI clients expect: chat.completion and text_completion objects, and their streamed
 * chunks. Reasoning and tool calls are split out of the text by nemotron_chat_parse; while
 * streaming, text that might still turn into "</think>" or "<tool_call>" is held back until it
 * is known. It never touches HTTP; the caller holds the job's mutex while calling.
 */
#ifndef NT_SERVER_RESPONSES_H
#define NT_SERVER_RESPONSES_H

#include <stddef.h>

#include "server/slots.h"

/* A growing byte buffer; .p is NUL-terminated once anything was added. */
struct sbuf {
    char *p;
    size_t len, cap;
};
/* 0, or -1 when out of memory (the buffer is unchanged then). */
int sbuf_add(struct sbuf *b, const char *s, size_t n);

struct response_ctx {
    char id[48];                  /* "chatcmpl-..." or "cmpl-..." */
    const char *model_id;
    long created;                 /* Unix seconds */
};

/* The whole response of a finished, successful job (malloc'ed JSON); NULL when out of memory. */
char *response_json(const struct job *j, const struct response_ctx *c);

enum stream_phase { STREAM_START, STREAM_REASONING, STREAM_CONTENT, STREAM_TOOLS, STREAM_ENDED };

struct stream {
    enum stream_phase phase;
    size_t sent;                  /* bytes of the job's text consumed */
    size_t tools_at;              /* where "<tool_call>" began (STREAM_TOOLS) */
    int role_sent;
    int skip_blank;               /* after "</think>": drop the blank before the answer */
};

/* Appends to out the events for what the job produced since the last call; when the job is done,
 * also the final chunk, the usage chunk (stream_options.include_usage) and "data: [DONE]". The
 * stream's phase is STREAM_ENDED afterwards. Call with the job's mutex held. -1: out of memory. */
int stream_advance(struct stream *st, const struct job *j, const struct response_ctx *c, struct sbuf *out);

#endif /* NT_SERVER_RESPONSES_H */
