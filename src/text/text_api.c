/* text_api.c - the public face of the tokenizer and the chat format (nemotron.h, "text").
 *
 * Thin wrappers: handles that carry a load message, the streaming decoder's buffer, and the
 * copy of parsed replies into public structs. The work is in tokenizer.c and chat*.c.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "../model/gguf_model.h"
#include "../model/nemo.h"
#include "chat.h"
#include "tokenizer.h"

struct nemotron_tokenizer {
    struct nt_err err;
    struct nt_tokenizer *tok;         /* NULL when the load failed */
};

nemotron_status nemotron_tokenizer_load(const char *path, nemotron_tokenizer **out) {
    if (!out) return NEMOTRON_ERR_ARG;
    nemotron_tokenizer *t = nt_calloc(1, sizeof *t);
    *out = t;
    if (!t) return NEMOTRON_ERR_NOMEM;
    if (!path) return nt_fail(&t->err, NEMOTRON_ERR_ARG, "tokenizer path is NULL");
    /* a model directory: its tokenizer.json */
    char file[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (snprintf(file, sizeof file, "%s/tokenizer.json", path) >= (int)sizeof file)
            return nt_fail(&t->err, NEMOTRON_ERR_ARG, "tokenizer path is too long");
        path = file;
    } else if (nt_path_is_gguf(path)) { /* a GGUF: its tokenizer.ggml metadata */
        return nt_tokenizer_load_gguf(path, &t->tok, &t->err);
    } else if (nt_path_is_nemo(path)) { /* a .nemo: the tokenizer.json it carries */
        char *json;
        size_t len;
        nemotron_status st = nt_nemo_read_file(path, "tokenizer.json", &json, &len, &t->err);
        if (st) return st;
        snprintf(file, sizeof file, "%s: tokenizer.json", path);
        st = nt_tokenizer_load_bytes(json, len, file, &t->tok, &t->err);
        nt_free(json);
        return st;
    }
    return nt_tokenizer_load(path, &t->tok, &t->err);
}

void nemotron_tokenizer_free(nemotron_tokenizer *t) {
    if (!t) return;
    nt_tokenizer_free(t->tok);
    nt_free(t);
}

const char *nemotron_tokenizer_errmsg(const nemotron_tokenizer *t) { return t ? t->err.msg : "out of memory"; }

int nemotron_tokenizer_vocab_size(const nemotron_tokenizer *t) {
    return t && t->tok ? nt_tokenizer_vocab_size(t->tok) : 0;
}

int32_t nemotron_tokenizer_token_id(const nemotron_tokenizer *t, const char *token) {
    return t && t->tok && token ? nt_tokenizer_token_id(t->tok, token, strlen(token)) : -1;
}

/* The message of this thread's last encode or decode (nemotron_tokenizer_last_error): the
 * tokenizer is shared by threads, so it cannot hold one. */
static _Thread_local struct nt_err last_err;

const char *nemotron_tokenizer_last_error(void) { return last_err.msg; }

nemotron_status nemotron_tokenize(const nemotron_tokenizer *t, const char *text, size_t len,
                                  int add_special, int32_t *ids, size_t cap, size_t *n_ids) {
    last_err.msg[0] = 0;
    if (!t || !t->tok || (!text && len) || !n_ids || (!ids && cap))
        return nt_fail(&last_err, NEMOTRON_ERR_ARG, "nemotron_tokenize: %s",
                       !t || !t->tok ? "no tokenizer" : !n_ids ? "n_ids is NULL"
                                                      : !ids && cap ? "ids is NULL with cap > 0"
                                                                    : "text is NULL with len > 0");
    return nt_tokenizer_encode(t->tok, text ? text : "", len, add_special, ids, cap, n_ids, &last_err);
}

nemotron_status nemotron_detokenize(const nemotron_tokenizer *t, const int32_t *ids, size_t n,
                                    int skip_special, char *out, size_t cap, size_t *len) {
    last_err.msg[0] = 0;
    if (!t || !t->tok || (!ids && n) || !len || (!out && cap))
        return nt_fail(&last_err, NEMOTRON_ERR_ARG, "nemotron_detokenize: %s",
                       !t || !t->tok ? "no tokenizer" : !len ? "len is NULL"
                                                    : !out && cap ? "out is NULL with cap > 0"
                                                                  : "ids is NULL with n > 0");
    return nt_tokenizer_decode(t->tok, ids, n, skip_special, out, cap, len, &last_err);
}

struct nemotron_detok {
    const struct nt_tokenizer *tok;
    struct nt_detok state;
    int skip_special;
    size_t cap;                       /* nt_detok_cap: enough for any one push or flush */
    char buf[];                       /* cap + 1 for the NUL */
};

nemotron_detok *nemotron_detok_new(const nemotron_tokenizer *t, int skip_special) {
    if (!t || !t->tok) return NULL;
    size_t cap = nt_detok_cap(t->tok);
    nemotron_detok *d = nt_calloc(1, sizeof *d + cap + 1);
    if (!d) return NULL;
    d->cap = cap;
    d->tok = t->tok;
    d->skip_special = skip_special;
    nt_detok_init(&d->state);
    return d;
}

/* A NULL decoder (nemotron_detok_new's answer to a bad tokenizer) pushes nothing (NULL, as an
 * id outside the vocabulary) and flushes nothing (""). */
const char *nemotron_detok_push(nemotron_detok *d, int32_t id) {
    if (!d) return NULL;
    int n = nt_detok_push(d->tok, &d->state, id, d->skip_special, d->buf, d->cap, NULL);
    if (n < 0) return NULL;
    d->buf[n] = 0;
    return d->buf;
}

const char *nemotron_detok_flush(nemotron_detok *d) {
    if (!d) return "";
    int n = nt_detok_flush(&d->state, d->buf, d->cap);
    d->buf[n < 0 ? 0 : n] = 0;
    return d->buf;
}

void nemotron_detok_free(nemotron_detok *d) { nt_free(d); }

nemotron_chat_options nemotron_chat_default_options(void) {
    nemotron_chat_options o = {.add_generation_prompt = 1, .enable_thinking = 1, .truncate_history_thinking = 1};
    return o;
}

nemotron_status nemotron_chat_render(const char *messages_json, const char *tools_json,
                                     const nemotron_chat_options *opt, char **out, char *errbuf,
                                     size_t errlen) {
    struct nt_err err = {{0}};
    nemotron_chat_options defaults = nemotron_chat_default_options();
    if (!opt) opt = &defaults;
    if (out) *out = NULL;
    nemotron_status st;
    if (!out) {
        st = nt_fail(&err, NEMOTRON_ERR_ARG, "out is NULL");
    } else if (!messages_json) {
        st = nt_fail(&err, NEMOTRON_ERR_ARG, "messages JSON is NULL");
    } else {
        struct nt_chat_options o = {.add_generation_prompt = opt->add_generation_prompt,
                                    .enable_thinking = opt->enable_thinking,
                                    .truncate_history_thinking = opt->truncate_history_thinking};
        size_t len;
        st = nt_chat_render(messages_json, strlen(messages_json), tools_json,
                            tools_json ? strlen(tools_json) : 0, &o, out, &len, &err);
        /* the result is a C string: a U+0000 in a message would silently cut the conversation
         * there for every caller, so it is refused instead */
        if (st == NEMOTRON_OK && strlen(*out) != len) {
            st = nt_fail(&err, NEMOTRON_ERR_ARG,
                         "the conversation contains a NUL character (\\u0000) at byte %zu of its rendering, "
                         "which a C string cannot hold",
                         strlen(*out));
            nt_free(*out);
            *out = NULL;
        }
    }
    if (st && errbuf && errlen) snprintf(errbuf, errlen, "%s", err.msg);
    return st;
}

nemotron_status nemotron_chat_parse(const char *text, size_t len, int thinking_in_prompt,
                                    nemotron_chat_reply *out) {
    if (!out) return NEMOTRON_ERR_ARG;
    memset(out, 0, sizeof *out);
    struct nt_chat_parsed p;
    nemotron_status st = nt_chat_parse(text, len, thinking_in_prompt, &p, NULL);
    if (st) return st;
    /* the public struct mirrors the internal one field by field; ownership moves over */
    out->reasoning = p.reasoning;
    out->content = p.content;
    out->n_calls = p.n_calls;
    out->reasoning_unclosed = p.reasoning_unclosed;
    if (p.n_calls) {
        out->calls = nt_calloc((size_t)p.n_calls, sizeof *out->calls);
        if (!out->calls) {
            nt_chat_parsed_free(&p);
            memset(out, 0, sizeof *out);
            return NEMOTRON_ERR_NOMEM;
        }
        for (int i = 0; i < p.n_calls; i++) {
            out->calls[i].name = p.calls[i].name;
            out->calls[i].arguments_json = p.calls[i].arguments_json;
        }
        nt_free(p.calls);
    }
    return NEMOTRON_OK;
}

void nemotron_chat_reply_free(nemotron_chat_reply *r) {
    if (!r) return;
    for (int i = 0; i < r->n_calls; i++) {
        nt_free(r->calls[i].name);
        nt_free(r->calls[i].arguments_json);
    }
    nt_free(r->calls);
    nt_free(r->reasoning);
    nt_free(r->content);
    memset(r, 0, sizeof *r);
}

void nemotron_free(void *p) { nt_free(p); }
