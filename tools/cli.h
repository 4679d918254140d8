/* cli.h - what the files of the `nemotron` command share: parsed arguments and small helpers.
 *
 * nemotron.c parses the command line and runs logits/generate; bench.c runs the benchmark;
 * text_cmds.c tokenize and template; run.c run and chat; model_cmds.c convert and synth. All use only the public header.
 */
#ifndef NEMOTRON_CLI_H
#define NEMOTRON_CLI_H

#include <stdint.h>

#include "nemotron.h"

/* Stop ids a model may list (generation configs list 2 or 3). */
#define CLI_MAX_STOP_IDS 16

/* --stop strings one run may give */
#define CLI_MAX_STOP_STRINGS 16

struct args {
    const char *command, *model, *tokens_arg, *output;
    int n_gen, threads, pass, ctx, ignore_eos;
    const char *p_arg;               /* -p: bench's prompt length, run's prompt text */
    int n_prompt, reps, json;        /* bench: -p, -r, --json */
    int32_t *tokens;
    int n_tokens;
    /* text */
    const char *tokenizer, *messages, *tools, *system;
    int decode, no_think, no_generation_prompt;
    nemotron_sampler_params sampling;
    const char *stop[CLI_MAX_STOP_STRINGS];
    int n_stop;
    int seed_given;
    const char *device;              /* --device: NULL = cpu */
    /* model files */
    const char *quant, *shape;       /* --quant, --shape */
    int list;                        /* synth --list */
};

double cli_now(void);
/* Prints "nemotron: WHAT: MSG (status)" and returns 1. */
int cli_fail(const char *what, const char *msg, nemotron_status st);
/* Loads a->model and makes a session of n_ctx positions (a->ctx wins when set). 0 on success;
 * on failure prints why, and the handles it made are still the caller's to free. */
int cli_open(const struct args *a, int n_ctx, nemotron_model **m, nemotron_session **s);

int cmd_bench(const struct args *a);
int cmd_tokenize(const struct args *a);
int cmd_template(const struct args *a);
int cmd_run(const struct args *a);
int cmd_chat(const struct args *a);
int cmd_convert(const struct args *a);
int cmd_synth(const struct args *a);
int cmd_serve(int argc, char **argv);   /* serve.c: reads its own options (argv[1] is "serve") */
/* Reads a whole file (or stdin for "-") into a NUL-terminated buffer to free(); NULL with a
 * message printed on failure. */
char *cli_read_file(const char *path, size_t *len);

#endif /* NEMOTRON_CLI_H */
