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
 * (*out, free with nt_free; *out_len its length). Bad JSON or a message of the wrong shape is
 * NEMOTRON_ERR_FORMAT / NEMOTRON_ERR_ARG with the message index and key named. */
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

/* Parses generated text (after the generation prompt). thinking_in_prompt: the prompt already
 * opened <think> (thinking on), so the text starts inside the reasoning. Never fails on
 * malformed model output: what is not a well-formed call stays content. */
nemotron_status nt_chat_parse(const char *text, size_t len, int thinking_in_prompt,
                              struct nt_chat_parsed *out, struct nt_err *err);
void nt_chat_parsed_free(struct nt_chat_parsed *p);

#endif /* NT_CHAT_H */
