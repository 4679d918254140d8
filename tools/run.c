/* run.c - `nemotron run` and `nemotron chat`: text in, streamed text out.
 *
 *   nemotron run  -m MODEL_DIR -p TEXT [-n 256] [sampling] [--stop S]...   one continuation
 *   nemotron chat -m MODEL_DIR [--system TEXT] [--no-think] [sampling]     an interactive chat
 *
 * Both tokenize with the model directory's tokenizer.json, sample with the chosen settings,
 * stop at the model's end-of-sequence ids or a --stop string, stream text that never ends inside
 * a UTF-8 character, and end with prompt and generation speed on stderr. Ctrl-C ends the answer
 * being generated, not the program. chat renders the whole conversation in the Nemotron 3 chat
 * format each turn (the history's reasoning is dropped by the format, so the prompt changes and
 * is evaluated again; prefix caching will remove that cost).
 */
#include <json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* SIGINT sets a flag instead of ending the process; no SA_RESTART, so a blocked read returns. */
static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* Everything a generation needs. */
struct gen {
    nemotron_model *model;
    nemotron_session *session;
    nemotron_tokenizer *tok;
    nemotron_sampler *sampler;
    int32_t stop_ids[CLI_MAX_STOP_IDS];
    int n_stop_ids;
    int vocab;
};

static void gen_free(struct gen *g) {
    nemotron_sampler_free(g->sampler);
    nemotron_tokenizer_free(g->tok);
    nemotron_session_free(g->session);
    nemotron_model_free(g->model);
}

static int gen_open(struct gen *g, const struct args *a, int n_ctx) {
    memset(g, 0, sizeof *g);
    if (cli_open(a, n_ctx, &g->model, &g->session)) return 1;
    nemotron_status st = nemotron_tokenizer_load(a->model, &g->tok);
    if (st) return cli_fail("loading the tokenizer", nemotron_tokenizer_errmsg(g->tok), st);
    g->vocab = nemotron_model_vocab_size(g->model);
    if (nemotron_tokenizer_vocab_size(g->tok) > g->vocab) {
        fprintf(stderr, "nemotron: the tokenizer has %d tokens, more than the model's vocabulary (%d)\n",
                nemotron_tokenizer_vocab_size(g->tok), g->vocab);
        return 1;
    }
    st = nemotron_sampler_new(&a->sampling, g->vocab, &g->sampler);
    if (st) return cli_fail("sampling", nemotron_sampler_errmsg(g->sampler), st);
    g->n_stop_ids = nemotron_model_stop_ids(g->model, g->stop_ids, CLI_MAX_STOP_IDS);
    if (g->n_stop_ids > CLI_MAX_STOP_IDS) g->n_stop_ids = CLI_MAX_STOP_IDS;
    return 0;
}

/* A growing byte buffer. */
struct text {
    char *p;
    size_t len, cap;
};

static int text_add(struct text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) return -1;
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
    return 0;
}

/* How much of all[0..len) may be shown now: all of it but the longest tail that could still
 * grow into a stop string. Sets *hit to the start of a stop string found, else -1. */
static size_t safe_prefix(const struct args *a, const char *all, size_t len, size_t from, long *hit) {
    *hit = -1;
    for (int i = 0; i < a->n_stop; i++) {
        size_t sl = strlen(a->stop[i]);
        size_t start = from > sl ? from - sl : 0;
        for (size_t p = start; p + sl <= len; p++)
            if (memcmp(all + p, a->stop[i], sl) == 0 && (*hit < 0 || (long)p < *hit)) {
                *hit = (long)p;
                break;
            }
    }
    if (*hit >= 0) return (size_t)*hit;
    size_t keep = 0;
    for (int i = 0; i < a->n_stop; i++) {
        size_t sl = strlen(a->stop[i]);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= len && memcmp(all + len - k, a->stop[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return len - keep;
}

struct gen_result {
    int n_prompt, n_generated;
    double prompt_s, gen_s;
    int hit_stop_id, hit_stop_string, hit_limit, was_interrupted;
};

/* Evaluates the prompt ids, then samples up to n_max tokens, streaming text to stdout. The
 * generated text (special tokens included, stop strings and ids excluded) goes to *out. */
static int generate(struct gen *g, const struct args *a, const int32_t *prompt, int n_prompt,
                    int n_max, struct text *out, struct gen_result *r) {
    memset(r, 0, sizeof *r);
    r->n_prompt = n_prompt;
    if (n_prompt + n_max > nemotron_session_n_ctx(g->session)) n_max = nemotron_session_n_ctx(g->session) - n_prompt;
    if (n_max < 1) {
        fprintf(stderr, "nemotron: the prompt (%d tokens) leaves no room in the context of %d\n", n_prompt,
                nemotron_session_n_ctx(g->session));
        return 1;
    }
    nemotron_detok *dt = nemotron_detok_new(g->tok, 0);
    if (!dt) return cli_fail("generate", "out of memory", NEMOTRON_ERR_NOMEM);
    nemotron_sampler_reset(g->sampler);
    for (int i = 0; i < n_prompt; i++) nemotron_sampler_accept(g->sampler, prompt[i]);
    double t0 = cli_now();
    nemotron_status st = nemotron_session_eval(g->session, prompt, n_prompt, NULL);
    double t1 = cli_now();
    r->prompt_s = t1 - t0;
    size_t shown = 0;
    int rc = 0;
    interrupted = 0;
    while (!st && !rc) {
        if (interrupted) { r->was_interrupted = 1; break; }
        int32_t next = nemotron_sampler_sample(g->sampler, nemotron_session_logits(g->session));
        int is_stop = 0;
        for (int i = 0; i < g->n_stop_ids; i++) is_stop |= next == g->stop_ids[i];
        if (is_stop) { r->hit_stop_id = 1; break; }
        r->n_generated++;
        nemotron_sampler_accept(g->sampler, next);
        const char *piece = nemotron_detok_push(dt, next);
        if (!piece || text_add(out, piece, strlen(piece))) { rc = cli_fail("generate", "decoding failed", NEMOTRON_ERR_ARG); break; }
        long hit;
        size_t safe = safe_prefix(a, out->p, out->len, shown, &hit);
        if (safe > shown) fwrite(out->p + shown, 1, safe - shown, stdout);
        fflush(stdout);
        shown = safe;
        if (hit >= 0) {
            out->len = (size_t)hit;
            out->p[out->len] = 0;
            r->hit_stop_string = 1;
            break;
        }
        if (r->n_generated == n_max) { r->hit_limit = 1; break; }
        st = nemotron_session_eval(g->session, &next, 1, NULL);
    }
    if (!rc && !r->hit_stop_string) {
        const char *rest = nemotron_detok_flush(dt);
        text_add(out, rest, strlen(rest));
        if (out->len > shown) fwrite(out->p + shown, 1, out->len - shown, stdout);
    }
    fflush(stdout);
    r->gen_s = cli_now() - t1;
    nemotron_detok_free(dt);
    if (st) rc = cli_fail("evaluating", nemotron_session_errmsg(g->session), st);
    return rc;
}

static void print_speed(const struct gen_result *r) {
    fprintf(stderr, "\n[prompt %d tokens: %.1f tokens/s; generated %d tokens: %.1f tokens/s%s]\n",
            r->n_prompt, r->prompt_s > 0 ? r->n_prompt / r->prompt_s : 0.0, r->n_generated,
            r->gen_s > 0 ? r->n_generated / r->gen_s : 0.0,
            r->was_interrupted ? "; interrupted" : r->hit_stop_string ? "; stop string" : "");
}

/* Tokenizes text into a new array (free()); NULL on failure with a message printed. */
static int32_t *encode(const struct gen *g, const char *text, int add_special, int *n) {
    size_t need = 0;
    nemotron_status st = nemotron_tokenize(g->tok, text, strlen(text), add_special, NULL, 0, &need);
    int32_t *ids = st ? NULL : malloc((need ? need : 1) * sizeof *ids);
    if (ids) st = nemotron_tokenize(g->tok, text, strlen(text), add_special, ids, need, &need);
    if (st || !ids || need > (size_t)1 << 30) {
        free(ids);
        cli_fail("tokenize", "encoding the prompt failed", st ? st : NEMOTRON_ERR_NOMEM);
        return NULL;
    }
    *n = (int)need;
    return ids;
}

int cmd_run(const struct args *a) {
    struct gen g;
    /* the context: the prompt's length is known only after tokenizing, so open generously and
     * let --ctx override; the session is sized once */
    int rc = gen_open(&g, a, a->ctx ? a->ctx : 4096 + a->n_gen);
    int n = 0;
    int32_t *ids = rc ? NULL : encode(&g, a->p_arg, 1, &n);
    if (!rc && !ids) rc = 1;
    if (!rc && n == 0) {
        fprintf(stderr, "nemotron: run: the prompt is empty\n");
        rc = 2;
    }
    if (!rc) {
        catch_sigint();
        struct text out = {0};
        struct gen_result r;
        fputs(a->p_arg, stdout);
        rc = generate(&g, a, ids, n, a->n_gen, &out, &r);
        putchar('\n');
        if (!rc) print_speed(&r);
        free(out.p);
    }
    free(ids);
    gen_free(&g);
    return rc;
}

/* Appends {"role": role, "content": content[, "reasoning_content": reasoning]} to messages. */
static void add_message(json_object *messages, const char *role, const char *content, const char *reasoning) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string(role));
    json_object_object_add(m, "content", json_object_new_string(content ? content : ""));
    if (reasoning) json_object_object_add(m, "reasoning_content", json_object_new_string(reasoning));
    json_object_array_add(messages, m);
}

static void strip_newline(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
}

int cmd_chat(const struct args *a) {
    struct gen g;
    int rc = gen_open(&g, a, a->ctx ? a->ctx : 8192);
    if (rc) {
        gen_free(&g);
        return rc;
    }
    catch_sigint();
    int thinking = !a->no_think;
    json_object *messages = json_object_new_array();
    if (a->system) add_message(messages, "system", a->system, NULL);
    fprintf(stderr, "chat with %s (reasoning %s). /think, /no_think, /reset, /exit; Ctrl-C stops an answer.\n",
            a->model, thinking ? "on" : "off");
    char line[65536];
    for (;;) {
        fprintf(stderr, "\n> ");
        interrupted = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (interrupted && !feof(stdin)) {
                clearerr(stdin);
                fprintf(stderr, "\n(/exit or Ctrl-D quits)");
                continue;
            }
            break;
        }
        strip_newline(line);
        if (!line[0]) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/think") || !strcmp(line, "/no_think")) {
            thinking = !strcmp(line, "/think");
            fprintf(stderr, "reasoning %s", thinking ? "on" : "off");
            continue;
        }
        if (!strcmp(line, "/reset")) {
            json_object_put(messages);
            messages = json_object_new_array();
            if (a->system) add_message(messages, "system", a->system, NULL);
            fprintf(stderr, "conversation cleared");
            continue;
        }
        add_message(messages, "user", line, NULL);
        nemotron_chat_options o = nemotron_chat_default_options();
        o.enable_thinking = thinking;
        char *prompt = NULL, err[1024];
        const char *mj = json_object_to_json_string_ext(messages, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        nemotron_status st = nemotron_chat_render(mj, NULL, &o, &prompt, err, sizeof err);
        if (st) { rc = cli_fail("chat template", err, st); break; }
        int n = 0;
        int32_t *ids = encode(&g, prompt, 0, &n);
        nemotron_free(prompt);
        if (!ids) { rc = 1; break; }
        nemotron_session_reset(g.session);
        struct text out = {0};
        struct gen_result r;
        if (thinking) fputs("<think>\n", stdout);   /* the generation prompt opened it */
        rc = generate(&g, a, ids, n, a->n_gen, &out, &r);
        free(ids);
        if (rc) { free(out.p); break; }
        print_speed(&r);
        nemotron_chat_reply reply;
        if (nemotron_chat_parse(out.p ? out.p : "", out.len, thinking, &reply) == NEMOTRON_OK) {
            add_message(messages, "assistant", reply.content, reply.reasoning);
            nemotron_chat_reply_free(&reply);
        } else {
            add_message(messages, "assistant", out.p, NULL);
        }
        free(out.p);
    }
    json_object_put(messages);
    gen_free(&g);
    return rc;
}
