/* generation.h - what `run` and `chat` share: a model with its tokenizer and sampler, the
 * session's tokens mirrored on the host, and streaming generation with stop ids and strings.
 *
 * The mirror (gen.held) is what lets chat process only the new tokens of a turn: the session
 * holds exactly gen.held[0..n_held) after every call here (gen_eval appends only after a
 * successful eval; gen_reset empties both). Ctrl-C sets cli_interrupted; generation and prompt
 * processing stop at the next pass boundary and say so in the result.
 */
#ifndef NEMOTRON_GENERATION_H
#define NEMOTRON_GENERATION_H

#include <signal.h>
#include <stddef.h>

#include "cli.h"
#include "speculate.h"

/* Set by SIGINT once cli_catch_sigint ran; the code that honours it clears it. */
extern volatile sig_atomic_t cli_interrupted;
/* SIGINT sets cli_interrupted instead of ending the process; no SA_RESTART, so a blocked read
 * returns with EINTR. */
void cli_catch_sigint(void);

struct gen {
    nemotron_model *model;
    nemotron_session *session;
    nemotron_tokenizer *tok;
    nemotron_sampler *sampler;
    int32_t stop_ids[CLI_MAX_STOP_IDS];
    int n_stop_ids;
    int vocab;
    int32_t *held;           /* the tokens the session holds, in order */
    int n_held;
    int speculate;           /* --spec / --draft-model: gen_run decodes through spec.dec */
    struct cli_spec spec;
};

/* Loads the model, the tokenizer next to it, a sampler and a session of n_ctx positions. 0 on
 * success; else a message was printed and gen_free still frees what was made. */
int gen_open(struct gen *g, const struct args *a, int n_ctx);
void gen_free(struct gen *g);
/* Back to an empty session. */
void gen_reset(struct gen *g);

/* A growing NUL-terminated byte buffer. */
struct text {
    char *p;
    size_t len, cap;
};
int text_add(struct text *t, const char *s, size_t n);   /* -1: out of memory */

struct gen_result {
    int n_prompt;            /* prompt tokens processed by this call */
    int n_reused;            /* prompt tokens the session already held */
    int n_generated;
    double prompt_s, gen_s;
    int hit_stop_id, hit_stop_string, hit_limit, hit_ctx, was_interrupted;
    const struct args *spec_args;  /* speculation was on: its line is printed too */
    nemotron_spec_stats spec;
};

/* Continues the session with prompt[n_reuse..n_prompt) (the first n_reuse tokens must be what
 * the session holds, gen.held), then samples up to n_max tokens, streaming text to stdout; the
 * sampler's penalties see the whole prompt. With speculation the decoder starts from an empty
 * session (n_reuse must be 0) and the same tokens come, several per pass; the session is empty
 * again afterwards (the decoder evaluates tokens past a stop). The generated text (special tokens included, stop
 * strings and ids excluded) goes to *out. Generation that reaches the end of the context stops
 * there with hit_ctx set. Returns 0 (also when interrupted: see r->was_interrupted) or 1 after
 * printing why. */
int gen_run(struct gen *g, const struct args *a, const int32_t *prompt, int n_prompt, int n_reuse,
            int n_max, struct text *out, struct gen_result *r);

/* The statistics line on stderr: speed, what ended the generation; speculation's counts. */
void gen_print_result(const struct gen_result *r, int n_ctx);

/* Tokenizes text into a new array (free()); NULL on failure with a message printed. */
int32_t *gen_encode(const struct gen *g, const char *text, size_t len, int add_special, int *n);

#endif /* NEMOTRON_GENERATION_H */
