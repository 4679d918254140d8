/* chat.h - the Nemotron 3 chat format, produced natively, and model output parsed back.
 *
 * nt_chat_render gives byte for byte what ../shared/data/nemotron-3-nano-chat-template.jinja
 * renders under Python's jinja2 for the same messages, tools and options (MODEL.md 5.3): no
 * template engine, the template's logic written in C. Messages and tools come as JSON in the
 * OpenAI chat shape (what the server will receive): messages = [{"role", "content",
 * "reasoning_content"?, "tool_calls"?: [{"function": {"name", "arguments": object|string}}]}],
 * tools = [{"type": "function", "function": {"name", "description", "parameters"}}].
 * nt_chat_parse splits generated text into reasoning, content and tool calls.
 */
#ifndef NT_CHAT_H
#define NT_CHAT_H

#include "../common.h"

struct nt_chat_options {
    int add_generation_prompt;        /* end with the assistant turn's opening */
    int enable_thinking;              /* template default: 1 */
    int truncate_history_thinking;    /* template default: 1 */
};

/* Renders messages_json (and tools_json, NULL for none) into a new NUL-terminated string
 * (*out, free with nt_free; *out_len its length, which counts any U+0000 the content holds;
 * out_len may be NULL). messages_json must be a JSON array; tools_json JSON null or an array
 * of objects (transformers' rule). One step comes before the template, as in an OpenAI server
 * (vLLM): a tool call's "arguments" given as a string is read as the JSON it holds.
 * Errors (*out NULL): JSON that Python's json.loads would refuse is NEMOTRON_ERR_FORMAT;
 * where jinja2 would raise (no messages, a message that is not an object or has no string
 * role, a system message whose content is not a string, a role the template does not know
 * without string content, arguments that are not an object or a string of one) it is
 * NEMOTRON_ERR_ARG naming messages[i] and the key; out of memory NEMOTRON_ERR_NOMEM. Every
 * other input, however odd, renders as jinja2 does (chat_render.c lists the known gaps). */
nemotron_status nt_chat_render(const char *messages_json, size_t messages_len,
                               const char *tools_json, size_t tools_len,
                               const struct nt_chat_options *opt, char **out, size_t *out_len,
                               struct nt_err *err);

struct nt_chat_call {
    char *name;
    char *arguments_json;             /* a JSON object of the parameters, values typed as parsed */
};

struct nt_chat_parsed {
    char *reasoning;                  /* text inside <think>...</think>, or NULL */
    char *content;                    /* the answer text, trimmed as the server would send it */
    struct nt_chat_call *calls;
    int n_calls;
    int reasoning_unclosed;           /* a <think> without </think>: everything is reasoning */
};

/* Parses generated text (after the generation prompt, without the end-of-turn token).
 * thinking_in_prompt: the prompt already opened <think> (thinking on), so the text starts
 * inside the reasoning; without it the text is reasoning only if it opens with <think>.
 * The reasoning ends at the first </think>; reasoning is NULL when there was no think block,
 * else its trimmed text (possibly ""). content is never NULL on success. Calls are the
 * well-formed <tool_call> blocks after the reasoning (the grammar is in chat_parse.c); each
 * arguments_json is a compact JSON object, a value kept as JSON when it is one valid JSON
 * text, else a JSON string. Never fails on malformed model output: what is not a well-formed
 * call stays content. Fails only for NULL text with len > 0 or len > INT_MAX
 * (NEMOTRON_ERR_ARG) and out of memory; then *out is empty. Free with nt_chat_parsed_free
 * (safe on an emptied struct). */
nemotron_status nt_chat_parse(const char *text, size_t len, int thinking_in_prompt,
                              struct nt_chat_parsed *out, struct nt_err *err);
void nt_chat_parsed_free(struct nt_chat_parsed *p);

/* Internal to src/text (chat_render.c reads requests with it, chat_parse.c parameter values);
 * not part of the contract above. */
struct json_object;
/* Reads the whole of s[0..len) as one JSON text the way Python's json.loads does: strict
 * RFC 8259 (no comments, single quotes, trailing commas, leading zeros, raw control characters
 * in strings, bytes that are not UTF-8, text after the value), plus NaN, Infinity and -Infinity
 * when allow_nonfinite. Objects keep their key order; a repeated key keeps its first place and
 * takes the last value (as a Python dict). Integers in [-2^63, 2^64) are json-c ints; other
 * numbers are doubles that keep their text (json_object_new_double_s), so json-c writes them
 * as given and an integer beyond 64 bits stays exact (a double whose text has no '.', 'e'). *out (NULL for JSON null) belongs to the caller: json_object_put. Fails with
 * NEMOTRON_ERR_FORMAT (the byte offset named), or NEMOTRON_ERR_NOMEM. */
nemotron_status nt_chat_json_read(const char *s, size_t len, int allow_nonfinite,
                                  struct json_object **out, struct nt_err *err);
/* Python's str.strip() on UTF-8 text: moves *s and shortens *len past the characters that
 * str.isspace() accepts (ASCII \t\n\v\f\r, \x1c-\x1f, space, U+0085, U+00A0, U+1680,
 * U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). Safe on invalid UTF-8. */
void nt_chat_strip(const char **s, size_t *len);

#endif /* NT_CHAT_H */
