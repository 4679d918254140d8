/* run.c - `nemotron run`: one streamed continuation of a prompt.
 *
 *   nemotron run -m MODEL -p TEXT [-n 256] [sampling] [--stop S]...
 *   nemotron run -m MODEL -f FILE | -p -      the prompt from a file, or from stdin
 *
 * Prints the prompt, then the continuation as it is sampled (generation.c), then the statistics
 * on stderr. Ctrl-C ends the run, at the next pass even while the prompt is processed, with
 * status 130 as a shell reports a process that SIGINT ended.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generation.h"

/* The context `run` opens when --ctx is not given: the prompt's length is known only after the
 * tokenizer (which comes with the model) is loaded, and the session is sized once. 4096 holds
 * every prompt a command line carries; -f and -p - bring longer ones, and --ctx. */
#define RUN_DEFAULT_PROMPT_ROOM 4096

int cmd_run(const struct args *a) {
    size_t len = 0;
    char *file_text = NULL;
    const char *prompt = a->p_arg;
    if (a->prompt_file || !strcmp(a->p_arg, "-")) {
        file_text = cli_read_file(a->prompt_file ? a->prompt_file : "-", &len);
        if (!file_text) return 1;
        if (strlen(file_text) != len) {
            fprintf(stderr, "nemotron: run: the prompt holds a NUL byte\n");
            free(file_text);
            return 2;
        }
        prompt = file_text;
    }
    len = strlen(prompt);
    struct gen g;
    int rc = gen_open(&g, a, a->ctx ? a->ctx : RUN_DEFAULT_PROMPT_ROOM + a->n_gen);
    int n = 0;
    int32_t *ids = rc ? NULL : gen_encode(&g, prompt, len, 1, &n);
    if (!rc && !ids) rc = 1;
    if (!rc && n == 0) {
        fprintf(stderr, "nemotron: run: the prompt is empty\n");
        rc = 2;
    }
    if (!rc) {
        cli_catch_sigint();
        struct text out = {0};
        struct gen_result r;
        fputs(prompt, stdout);
        rc = gen_run(&g, a, ids, n, 0, a->n_gen, &out, &r);
        putchar('\n');
        if (!rc) gen_print_result(&r, nemotron_session_n_ctx(g.session));
        if (!rc && r.was_interrupted) rc = 130;
        free(out.p);
    }
    free(ids);
    free(file_text);
    gen_free(&g);
    return rc;
}
