/* generation.c - streaming generation for `run` and `chat` (generation.h says what is shared).
 *
 * It owns the session's host mirror (gen.held), the Ctrl-C flag, stop-string handling and the
 * statistics line; it does not know about conversations (chat.c) or prompts from the command
 * line (run.c). The prompt is processed in passes of the session's pass size, one eval call
 * each, so Ctrl-C is noticed between passes instead of after the whole prompt (the arithmetic of
 * a position does not depend on how the prompt is cut into passes).
 */
#include "generation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile sig_atomic_t cli_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    cli_interrupted = 1;
}

void cli_catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

void gen_free(struct gen *g) {
    cli_spec_free(&g->spec);
    nemotron_sampler_free(g->sampler);
    nemotron_tokenizer_free(g->tok);
    nemotron_session_free(g->session);
    nemotron_model_free(g->model);
    free(g->held);
    memset(g, 0, sizeof *g);
}

int gen_open(struct gen *g, const struct args *a, int n_ctx) {
    memset(g, 0, sizeof *g);
    if (cli_open(a, n_ctx, &g->model, &g->session)) return 1;
    g->held = malloc((size_t)nemotron_session_n_ctx(g->session) * sizeof *g->held);
    if (!g->held) return cli_fail("generate", "out of memory for the context's tokens", NEMOTRON_ERR_NOMEM);
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
    g->speculate = cli_spec_wanted(a);
    return g->speculate ? cli_spec_open(&g->spec, a, g->model, g->session) : 0;
}

void gen_reset(struct gen *g) {
    nemotron_session_reset(g->session);
    g->n_held = 0;
}

/* Evaluates ids and records them in the mirror; the session is unchanged on failure. */
static nemotron_status gen_eval(struct gen *g, const int32_t *ids, int n) {
    nemotron_status st = nemotron_session_eval(g->session, ids, n, NULL);
    if (!st) {
        memcpy(g->held + g->n_held, ids, (size_t)n * sizeof *ids);
        g->n_held += n;
    }
    return st;
}

int text_add(struct text *t, const char *s, size_t n) {
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

/* --verbose-prompt: every prompt token as llama.cpp shows it, id -> 'text', on stderr; `held`
 * of them the session already holds. */
static void print_prompt_tokens(const struct gen *g, const int32_t *ids, int n, int held) {
    fprintf(stderr, "prompt: %d tokens (%d already held)\n", n, held);
    for (int i = 0; i < n; i++) {
        char piece[256];
        size_t len = 0;
        nemotron_status st = nemotron_detokenize(g->tok, &ids[i], 1, 0, piece, sizeof piece, &len);
        if (st || len >= sizeof piece) len = 0;
        fprintf(stderr, "%6d -> '", (int)ids[i]);
        /* control bytes escaped: a token per line, whatever its text */
        for (size_t k = 0; k < len; k++) {
            unsigned char ch = (unsigned char)piece[k];
            if (ch == '\n') fputs("\\n", stderr);
            else if (ch < 0x20 || ch == 0x7f) fprintf(stderr, "\\x%02x", ch);
            else fputc(ch, stderr);
        }
        fputs("'\n", stderr);
    }
}

/* Handles one generated token as a stream shows it: the stop ids, the text (held back while it
 * may grow into a stop string), the limit. 0: go on; 1: the generation ended (r says why); -1:
 * a failure, printed. The sampler is the caller's to tell. */
static int take_token(struct gen *g, const struct args *a, nemotron_detok *dt, int32_t next, int n_max,
                      struct text *out, size_t *shown, struct gen_result *r) {
    for (int i = 0; i < g->n_stop_ids && !a->ignore_eos; i++)
        if (next == g->stop_ids[i]) {
            r->hit_stop_id = 1;
            return 1;
        }
    r->n_generated++;
    const char *piece = nemotron_detok_push(dt, next);
    if (!piece || text_add(out, piece, strlen(piece))) return -cli_fail("generate", "decoding failed", NEMOTRON_ERR_ARG);
    long hit;
    size_t safe = safe_prefix(a, out->p, out->len, *shown, &hit);
    if (safe > *shown) fwrite(out->p + *shown, 1, safe - *shown, stdout);
    fflush(stdout);
    *shown = safe;
    if (hit >= 0) {
        out->len = (size_t)hit;
        out->p[out->len] = 0;
        r->hit_stop_string = 1;
        return 1;
    }
    if (r->n_generated == n_max) {
        if (r->hit_ctx) r->hit_ctx = 1;
        else r->hit_limit = 1;
        return 1;
    }
    return 0;
}

/* The prompt's next n tokens into the session (through the decoder with speculation), mirrored. */
static nemotron_status feed_prompt(struct gen *g, const int32_t *ids, int n) {
    if (!g->speculate) return gen_eval(g, ids, n);
    nemotron_status st = nemotron_spec_prefill(g->spec.dec, ids, n);
    if (!st) {
        memcpy(g->held + g->n_held, ids, (size_t)n * sizeof *ids);
        g->n_held += n;
    }
    return st;
}

int gen_run(struct gen *g, const struct args *a, const int32_t *prompt, int n_prompt, int n_reuse,
            int n_max, struct text *out, struct gen_result *r) {
    memset(r, 0, sizeof *r);
    int n_ctx = nemotron_session_n_ctx(g->session);
    r->n_reused = n_reuse;
    if (n_prompt >= n_ctx) {
        fprintf(stderr, "nemotron: the prompt (%d tokens) leaves no room in the context of %d\n", n_prompt, n_ctx);
        return 1;
    }
    if (n_prompt + n_max > n_ctx) {
        n_max = n_ctx - n_prompt;
        r->hit_ctx = -1;     /* the limit is the context's: reaching it is hit_ctx, not hit_limit */
    }
    if (a->verbose_prompt) print_prompt_tokens(g, prompt, n_prompt, n_reuse);
    if (g->speculate) {
        /* the decoder reads the whole prompt from position 0 (its drafters' history) */
        g->n_held = 0;
        if (n_reuse || cli_spec_start(&g->spec, a, g->session, g->sampler)) {
            if (n_reuse) fprintf(stderr, "nemotron: speculation starts from an empty session, not %d held tokens\n", n_reuse);
            return 1;
        }
        r->spec_args = a;
    }
    nemotron_sampler_reset(g->sampler);
    for (int i = 0; i < n_prompt; i++) nemotron_sampler_accept(g->sampler, prompt[i]);
    nemotron_status st = NEMOTRON_OK;
    double t0 = cli_now();
    int pass = nemotron_session_pass_max(g->session);
    for (int at = n_reuse; at < n_prompt && !st; at += pass) {
        if (cli_interrupted) {
            r->was_interrupted = 1;
            break;
        }
        int n = n_prompt - at < pass ? n_prompt - at : pass;
        st = feed_prompt(g, prompt + at, n);
        if (!st) r->n_prompt += n;
    }
    double t1 = cli_now();
    r->prompt_s = t1 - t0;
    const char *why = g->speculate ? nemotron_spec_errmsg(g->spec.dec) : nemotron_session_errmsg(g->session);
    if (st) return cli_fail("evaluating", why, st);
    if (r->was_interrupted) return 0;
    nemotron_detok *dt = nemotron_detok_new(g->tok, 0);
    if (!dt) return cli_fail("generate", "out of memory", NEMOTRON_ERR_NOMEM);
    size_t shown = 0;
    int end = 0;
    while (!st && !end) {
        if (cli_interrupted) {
            r->was_interrupted = 1;
            break;
        }
        if (!g->speculate) {
            int32_t next = nemotron_sampler_is_greedy(g->sampler)
                               ? nemotron_session_argmax(g->session) /* the logits stay on a GPU */
                               : nemotron_sampler_sample(g->sampler, nemotron_session_logits(g->session));
            if (next < 0) { /* no logits came back: the device failed (the session says so) */
                st = NEMOTRON_ERR_DEVICE;
                break;
            }
            if ((end = take_token(g, a, dt, next, n_max, out, &shown, r))) break;
            nemotron_sampler_accept(g->sampler, next);
            st = gen_eval(g, &next, 1);
            continue;
        }
        /* the decoder samples and tells the sampler itself, token by token as above; it never
         * emits more than the limit leaves */
        int32_t next[NEMOTRON_SPEC_MAX + 1];
        int n_next = 0, room = n_max - r->n_generated;
        st = nemotron_spec_next(g->spec.dec, next, room > 1 ? room : 1, &n_next);
        for (int i = 0; i < n_next && !end; i++) end = take_token(g, a, dt, next[i], n_max, out, &shown, r);
    }
    int rc = end < 0;
    if (r->hit_ctx < 0) r->hit_ctx = 0;
    if (!rc && !r->hit_stop_string) {
        const char *rest = nemotron_detok_flush(dt);
        text_add(out, rest, strlen(rest));
        if (out->len > shown) fwrite(out->p + shown, 1, out->len - shown, stdout);
    }
    fflush(stdout);
    r->gen_s = cli_now() - t1;
    nemotron_detok_free(dt);
    if (st) {
        why = g->speculate ? nemotron_spec_errmsg(g->spec.dec) : nemotron_session_errmsg(g->session);
        rc = cli_fail("evaluating", why, st);
    }
    if (g->speculate) {
        r->spec = nemotron_spec_get_stats(g->spec.dec);
        cli_spec_end(&g->spec);
        gen_reset(g);   /* the session holds tokens the mirror does not (past a stop): start empty */
    }
    return rc;
}

void gen_print_result(const struct gen_result *r, int n_ctx) {
    char reused[64] = "";
    if (r->n_reused) snprintf(reused, sizeof reused, " (%d reused)", r->n_reused);
    fprintf(stderr, "\n[prompt %d tokens%s: %.1f tokens/s; generated %d tokens: %.1f tokens/s%s]\n",
            r->n_prompt, reused, r->prompt_s > 0 ? r->n_prompt / r->prompt_s : 0.0, r->n_generated,
            r->gen_s > 0 ? r->n_generated / r->gen_s : 0.0,
            r->was_interrupted ? "; interrupted" : r->hit_stop_string ? "; stop string" : "");
    if (r->hit_ctx)
        fprintf(stderr, "[the context of %d positions is full: the text was cut there (--ctx N holds more)]\n",
                n_ctx);
    if (r->spec_args) cli_spec_report(&r->spec, r->spec_args, r->gen_s > 0 ? r->n_generated / r->gen_s : 0.0);
}

int32_t *gen_encode(const struct gen *g, const char *text, size_t len, int add_special, int *n) {
    size_t need = 0;
    nemotron_status st = nemotron_tokenize(g->tok, text, len, add_special, NULL, 0, &need);
    int32_t *ids = st ? NULL : malloc((need ? need : 1) * sizeof *ids);
    if (ids) st = nemotron_tokenize(g->tok, text, len, add_special, ids, need, &need);
    /* 2^30 ids: beyond any context, and the count must fit an int */
    if (st || !ids || need > (size_t)1 << 30) {
        free(ids);
        cli_fail("tokenize", st ? nemotron_tokenizer_last_error() : "out of memory for the ids",
                 st ? st : NEMOTRON_ERR_NOMEM);
        return NULL;
    }
    *n = (int)need;
    return ids;
}
