/* chat.c - `nemotron chat`: a conversation with the model.
 *
 *   nemotron chat -m MODEL [-sys TEXT] [-p TEXT | -f FILE] [--no-think] [-n N] [-c N] [sampling]
 *   (nemotron run -i ... is the same: llama.cpp's interactive mode after a prompt)
 *
 * It owns the conversation (a JSON array of messages, rendered in the Nemotron 3 chat format
 * every turn), the local commands (/help, /think, /no_think, /reset, /exit) and what happens when
 * the conversation outgrows the context. Reading the input is line_input.c's; generating is
 * generation.c's.
 *
 * Each turn renders the whole conversation and tokenizes it. When the session already holds a
 * prefix of those tokens (the previous turn's prompt and answer, as with --no-think), only the
 * rest is processed; otherwise (the format drops the history's reasoning, so a thinking turn's
 * answer no longer matches what the session holds) the session starts again from position 0.
 * With speculation (--spec, --draft-model) every turn starts over, since the decoder begins at
 * position 0. A turn that would leave less than CHAT_ANSWER_ROOM for the answer drops the oldest turns
 * first, and says so; a message that does not fit even alone is refused, and the conversation
 * goes on as it was. -p TEXT or -f FILE is the first message, answered before the input is
 * read. Bad input (invalid UTF-8, a NUL byte, an overlong line, an unknown command) is reported
 * and never sent. Ctrl-C stops an answer; at the input it ends the chat
 * with status 130.
 */
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generation.h"
#include "line_input.h"
#include "text/utf8.h"

/* The room a turn keeps for the answer: -n, but at most a quarter of the context, so that a
 * large -n (default 4096) never pushes the whole conversation out of a small context. */
static int answer_room(const struct args *a, int n_ctx) {
    int room = n_ctx / 4 < a->n_gen ? n_ctx / 4 : a->n_gen;
    return room > 0 ? room : 1;
}

static const char help_text[] =
    "  /help        this list\n"
    "  /think       let the model reason before it answers (the default unless --no-think)\n"
    "  /no_think    answer directly\n"
    "  /reset       forget the conversation (the system prompt stays)\n"
    "  /exit        quit (also /quit, Ctrl-D)\n"
    "  \"\"\"          on its own or before text: a message of several lines, ended by a line\n"
    "               that ends with \"\"\"\n"
    "  //text       sends /text (a message that starts with /)\n"
    "  Ctrl-C stops an answer; at the prompt it ends the chat.\n";

struct chat {
    const struct args *a;
    struct gen g;
    json_object *messages;   /* [{role, content[, reasoning_content]}]: system first when given */
    int n_system;            /* 1 when messages[0] is the system prompt */
    int thinking;
};

/* Appends {"role": role, "content": content[, "reasoning_content": reasoning]} to messages. */
static void add_message(json_object *messages, const char *role, const char *content, const char *reasoning) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string(role));
    json_object_object_add(m, "content", json_object_new_string(content ? content : ""));
    if (reasoning) json_object_object_add(m, "reasoning_content", json_object_new_string(reasoning));
    json_object_array_add(messages, m);
}

static void chat_clear(struct chat *c) {
    json_object_put(c->messages);
    c->messages = json_object_new_array();
    c->n_system = 0;
    if (c->a->system) {
        add_message(c->messages, "system", c->a->system, NULL);
        c->n_system = 1;
    }
}

/* How many messages after the system prompt the oldest `turns` turns span: a turn is a user
 * message and the replies up to the next user message. */
static int span_of_turns(const struct chat *c, int turns) {
    int n = (int)json_object_array_length(c->messages), i = c->n_system;
    for (int t = 0; t < turns && i < n; t++) {
        i++;   /* the user message */
        while (i < n) {
            json_object *role;
            json_object_object_get_ex(json_object_array_get_idx(c->messages, (size_t)i), "role", &role);
            if (!strcmp(json_object_get_string(role), "user")) break;
            i++;
        }
    }
    return i - c->n_system;
}

/* The conversation without its first `skip` messages after the system prompt, rendered with a
 * generation prompt and tokenized: ids to free(), or NULL after a message. */
static int32_t *render(struct chat *c, int skip, int *n) {
    json_object *view = json_object_new_array();
    int len = (int)json_object_array_length(c->messages);
    for (int i = 0; i < len; i++)
        if (i < c->n_system || i >= c->n_system + skip)
            json_object_array_add(view, json_object_get(json_object_array_get_idx(c->messages, (size_t)i)));
    nemotron_chat_options o = nemotron_chat_default_options();
    o.enable_thinking = c->thinking;
    char *prompt = NULL, err[1024];
    const char *mj = json_object_to_json_string_ext(view, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    nemotron_status st = nemotron_chat_render(mj, NULL, &o, &prompt, err, sizeof err);
    json_object_put(view);
    if (st) {
        cli_fail("chat template", err, st);
        return NULL;
    }
    int32_t *ids = gen_encode(&c->g, prompt, strlen(prompt), 0, n);
    nemotron_free(prompt);
    return ids;
}

/* One turn for the user message `text`: 0 (answered, refused or interrupted: the chat goes on),
 * or 1 when the model failed (the message was printed). */
static int chat_turn(struct chat *c, const char *text) {
    int n_ctx = nemotron_session_n_ctx(c->g.session), room = answer_room(c->a, n_ctx);
    add_message(c->messages, "user", text, NULL);
    int turns = 0, n_turns = 0, n = 0;
    for (int len = (int)json_object_array_length(c->messages), i = c->n_system; i < len; i++) {
        json_object *role;
        json_object_object_get_ex(json_object_array_get_idx(c->messages, (size_t)i), "role", &role);
        n_turns += !strcmp(json_object_get_string(role), "user");
    }
    /* drop the fewest oldest turns that make the prompt and the answer's room fit */
    int32_t *ids = NULL;
    for (turns = 0; turns < n_turns; turns++) {
        free(ids);
        if (!(ids = render(c, span_of_turns(c, turns), &n))) return 1;
        if (n + room <= n_ctx) break;
    }
    if (turns == n_turns) {
        fprintf(stderr, "[this message needs %d tokens with the system prompt; with %d kept for the answer it "
                        "does not fit the context of %d positions (-c N holds more): not sent]\n",
                n, room, n_ctx);
        json_object_array_del_idx(c->messages, json_object_array_length(c->messages) - 1, 1);
        free(ids);
        return 0;
    }
    if (turns) {
        json_object_array_del_idx(c->messages, (size_t)c->n_system, (size_t)span_of_turns(c, turns));
        fprintf(stderr, "[the conversation outgrew the context of %d positions: the %d oldest turn%s "
                        "dropped]\n", n_ctx, turns, turns == 1 ? " was" : "s were");
    }
    /* only the new tokens when the session holds a prefix of the rendered conversation */
    int reuse = c->g.n_held;
    if (reuse >= n || memcmp(c->g.held, ids, (size_t)reuse * sizeof *ids)) reuse = 0;
    /* speculation's decoder reads the whole conversation from position 0 (its drafts come from
     * it): every turn starts over, at the cost of processing the history again */
    if (c->g.speculate) reuse = 0;
    if (!reuse) gen_reset(&c->g);
    struct text out = {0};
    struct gen_result r;
    if (c->thinking) fputs("<think>\n", stdout);   /* the generation prompt opened it */
    int rc = gen_run(&c->g, c->a, ids, n, reuse, c->a->n_gen, &out, &r);
    free(ids);
    putchar('\n');   /* an answer ends its line: piped, each answer's end can be found */
    if (!rc) {
        gen_print_result(&r, n_ctx);
        nemotron_chat_reply reply;
        if (nemotron_chat_parse(out.p ? out.p : "", out.len, c->thinking, &reply) == NEMOTRON_OK) {
            add_message(c->messages, "assistant", reply.content, reply.reasoning);
            nemotron_chat_reply_free(&reply);
        } else {
            add_message(c->messages, "assistant", out.p, NULL);
        }
    }
    free(out.p);
    return rc;
}

/* Whether text[0..len) can be sent: valid UTF-8 without a NUL byte; else says why, naming it
 * `what`. */
static int message_ok(const char *text, size_t len, const char *what) {
    size_t valid = nt_utf8_valid_prefix((const unsigned char *)text, len);
    if (valid < len) {
        fprintf(stderr, "[%s is not valid UTF-8 (byte %zu): not sent]\n", what, valid + 1);
        return 0;
    }
    if (strlen(text) < len) {
        fprintf(stderr, "[%s holds a NUL byte (byte %zu): not sent]\n", what, strlen(text) + 1);
        return 0;
    }
    return 1;
}

/* -p TEXT or -f FILE (run -i, as llama.cpp's -i after a prompt): the first message, sent and
 * answered before the input is read. 0, or the chat's status when it cannot go on. */
static int first_message(struct chat *c, const struct args *a) {
    if (!a->p_arg && !a->prompt_file) return 0;
    size_t len;
    char *file_text = NULL;
    const char *text = a->p_arg;
    if (a->prompt_file) {
        if (!(file_text = cli_read_file(a->prompt_file, &len))) return 1;
        text = file_text;
    } else {
        len = strlen(text);
    }
    int rc = 0;
    if (len && message_ok(text, len, a->prompt_file ? "the first message (-f)" : "the first message (-p)")) {
        fprintf(stderr, "> %s\n", text);   /* the transcript shows what was sent */
        rc = chat_turn(c, text);
    }
    free(file_text);
    return rc;
}

/* A line that starts with '/' (but not "//"): handled here, never sent. 1 when it ends the chat. */
static int chat_command(struct chat *c, const char *line) {
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return 1;
    if (!strcmp(line, "/help")) fputs(help_text, stderr);
    else if (!strcmp(line, "/think") || !strcmp(line, "/no_think")) {
        c->thinking = !strcmp(line, "/think");
        fprintf(stderr, "reasoning %s\n", c->thinking ? "on" : "off");
    } else if (!strcmp(line, "/reset")) {
        chat_clear(c);
        gen_reset(&c->g);
        fprintf(stderr, "conversation cleared\n");
    } else {
        fprintf(stderr, "unknown command '%.64s' (/help lists them; //text sends /text)\n", line);
    }
    return 0;
}

int cmd_chat(const struct args *a) {
    struct chat c = {.a = a, .thinking = !a->no_think};
    int rc = gen_open(&c.g, a, a->ctx ? a->ctx : 8192);
    if (rc) {
        gen_free(&c.g);
        return rc;
    }
    cli_catch_sigint();
    chat_clear(&c);
    struct line_input in;
    line_input_open(&in);
    fprintf(stderr, "chat with %s (reasoning %s); /help lists the commands.\n", a->model,
            c.thinking ? "on" : "off");
    rc = first_message(&c, a);
    for (long line_no = 1; !rc; line_no++) {
        const char *text;
        size_t len;
        cli_interrupted = 0;
        enum line_status st = line_input_read(&in, &text, &len);
        if (st == LINE_EOF) break;
        if (st == LINE_INTERRUPTED) {
            fputc('\n', stderr);
            rc = 130;
            break;
        }
        if (st == LINE_TOO_LONG) {
            fprintf(stderr, "[message %ld is longer than %zu MiB: not sent]\n", line_no, LINE_INPUT_MAX >> 20);
            continue;
        }
        if (st == LINE_UNTERMINATED) {
            fprintf(stderr, "[the input ended inside a \"\"\" block: the block was not sent]\n");
            break;
        }
        if (len == 0) continue;
        char what[48];
        snprintf(what, sizeof what, "message %ld", line_no);
        if (!message_ok(text, len, what)) continue;
        if (text[0] == '/' && text[1] != '/') {
            if (chat_command(&c, text)) break;
            continue;
        }
        if ((rc = chat_turn(&c, text[0] == '/' ? text + 1 : text))) break;
    }
    line_input_close(&in);
    json_object_put(c.messages);
    gen_free(&c.g);
    return rc;
}
