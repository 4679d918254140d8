/* cli.h - what the files of the `nemotron` command share: parsed arguments and small helpers.
 *
 * nemotron.c parses the command line and runs logits/generate; bench.c runs the benchmark.
 * Both use only the public header.
 */
#ifndef NEMOTRON_CLI_H
#define NEMOTRON_CLI_H

#include <stdint.h>

#include "nemotron.h"

/* Stop ids a model may list (generation configs list 2 or 3). */
#define CLI_MAX_STOP_IDS 16

struct args {
    const char *command, *model, *tokens_arg, *output;
    int n_gen, threads, pass, ctx, ignore_eos;
    int n_prompt, reps, json;        /* bench: -p, -r, --json */
    int32_t *tokens;
    int n_tokens;
};

double cli_now(void);
/* Prints "nemotron: WHAT: MSG (status)" and returns 1. */
int cli_fail(const char *what, const char *msg, nemotron_status st);
/* Loads a->model and makes a session of n_ctx positions (a->ctx wins when set). 0 on success;
 * on failure prints why, and the handles it made are still the caller's to free. */
int cli_open(const struct args *a, int n_ctx, nemotron_model **m, nemotron_session **s);

int cmd_bench(const struct args *a);

#endif /* NEMOTRON_CLI_H */
