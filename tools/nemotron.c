/* nemotron.c - the `nemotron` command: run Nemotron-H models from the shell.
 *
 *   nemotron logits   -m MODEL --tokens 1,2,3 -o out.npy   every position's logits (.npy)
 *   nemotron generate -m MODEL --tokens 1,2,3 -n N         greedy continuation, token ids
 *
 * main and the two token-id commands; args.c parses the line, the other commands have their
 * own files. Every argument is checked before the model is loaded; errors name the argument and
 * exit with status 2 (usage) or 1 (the run failed).
 * Output files are written to a temporary name and renamed, so a failed run leaves none.
 * A model file cut short while the run reads it (it is mapped, not copied) raises SIGBUS; the
 * command says what happened and exits with 1 instead of dying with a bare "Bus error".
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "model/output.h"
#include "speculate.h"

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_fail(const char *what, const char *msg, nemotron_status st) {
    fprintf(stderr, "nemotron: %s: %s (%s)\n", what, msg, nemotron_status_str(st));
    return 1;
}

/* A float32 .npy of shape [rows, cols]: magic, version 1.0, a header padded to 64 bytes. */
static int write_npy(const char *path, const float *data, int rows, int cols) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "nemotron: output path is too long\n");
        return 1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "nemotron: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char dict[128];
    int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
    int total = 10 + dl + 1, pad = (64 - total % 64) % 64;
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int hl = dl + pad + 1;
    head[8] = (unsigned char)(hl & 255);
    head[9] = (unsigned char)(hl >> 8);
    int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)dl, f) == (size_t)dl;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    /* the data is little-endian f32 on every machine this builds for (x86-64, aarch64) */
    ok = ok && fwrite(data, sizeof(float), (size_t)rows * cols, f) == (size_t)rows * cols;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "nemotron: %s: write failed: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

static int cmd_logits(const struct args *a) {
    if (!a->output) cli_usage_error("logits needs -o OUT.npy");
    /* the output is checked before any work: not a device, not the model, a link followed */
    struct nt_err err = {{0}};
    char *out = NULL;
    nemotron_status ost = nt_output_target(a->output, a->model, &out, &err);
    if (ost) return cli_fail("-o", err.msg, ost);
    nemotron_model *m = NULL;
    nemotron_session *s = NULL;
    int rc = cli_open(a, a->n_tokens, &m, &s);
    if (!rc) {
        int V = nemotron_model_vocab_size(m);
        float *logits = malloc((size_t)a->n_tokens * (size_t)V * sizeof(float));
        if (!logits) {
            rc = cli_fail("logits", "out of memory for the output", NEMOTRON_ERR_NOMEM);
        } else {
            double t0 = cli_now();
            nemotron_status st = nemotron_session_eval(s, a->tokens, a->n_tokens, logits);
            double dt = cli_now() - t0;
            if (st) rc = cli_fail("evaluating", nemotron_session_errmsg(s), st);
            else rc = write_npy(out, logits, a->n_tokens, V);
            if (!rc)
                fprintf(stderr, "%d positions in %.3f s (%.1f tokens/s)\n", a->n_tokens, dt, a->n_tokens / dt);
            free(logits);
        }
    }
    nemotron_session_free(s);
    nemotron_model_free(m);
    nt_free(out);
    return rc;
}

/* generate with speculation: the same ids as plain greedy decoding, taken 1..K+1 per step from
 * the decoder (speculate.h); stops as the plain loop does, on an end id or after n. */
static int generate_speculative(const struct args *a, nemotron_model *m, nemotron_session *s, const int32_t *eos,
                                int n_eos) {
    struct cli_spec cs;
    int rc = cli_spec_open(&cs, a, m, s);
    if (!rc) rc = cli_spec_start(&cs, a, s, NULL);
    double t0 = cli_now();
    nemotron_status st = rc ? NEMOTRON_OK : nemotron_spec_prefill(cs.dec, a->tokens, a->n_tokens);
    if (st) rc = cli_fail("evaluating", nemotron_spec_errmsg(cs.dec), st);
    double t1 = cli_now();
    int made = 0, stop = a->n_gen == 0;
    while (!rc && !stop) {
        int32_t out[NEMOTRON_SPEC_MAX + 1];
        int n_out = 0;
        /* never more than n asks for: the decoder drafts within what is left */
        st = nemotron_spec_next(cs.dec, out, a->n_gen - made, &n_out);
        if (st) {
            rc = cli_fail("evaluating", nemotron_spec_errmsg(cs.dec), st);
            break;
        }
        for (int i = 0; i < n_out && !stop; i++) {
            printf("%s%d", made ? "," : "", (int)out[i]);
            made++;
            stop = made == a->n_gen;
            for (int e = 0; e < n_eos && !a->ignore_eos; e++) stop |= out[i] == eos[e];
        }
        fflush(stdout);
    }
    double t2 = cli_now();
    if (made) {
        printf("\n");
        fflush(stdout);
    }
    if (!rc) {
        double rate = made > 1 ? (made - 1) / (t2 - t1) : 0.0;
        fprintf(stderr, "prompt %d tokens: %.1f tokens/s; generated %d tokens: %.1f tokens/s\n", a->n_tokens,
                a->n_tokens / (t1 - t0), made, rate);
        nemotron_spec_stats stats = nemotron_spec_get_stats(cs.dec);
        cli_spec_report(&stats, a, rate);
    }
    cli_spec_free(&cs);
    return rc;
}

static int cmd_generate(const struct args *a) {
    nemotron_model *m = NULL;
    nemotron_session *s = NULL;
    int rc = cli_open(a, a->n_tokens + a->n_gen, &m, &s);
    if (!rc) {
        int32_t eos[CLI_MAX_STOP_IDS];
        int n_eos = nemotron_model_stop_ids(m, eos, CLI_MAX_STOP_IDS);
        if (n_eos > CLI_MAX_STOP_IDS) n_eos = CLI_MAX_STOP_IDS;
        /* the last generated token is never evaluated: prompt + n - 1 positions are needed */
        int need = a->n_tokens + (a->n_gen > 0 ? a->n_gen - 1 : 0);
        if (need > nemotron_session_n_ctx(s)) {
            fprintf(stderr, "nemotron: generate: %d prompt tokens + %d generated need a context of %d, "
                    "but --ctx is %d\n", a->n_tokens, a->n_gen, need, nemotron_session_n_ctx(s));
            nemotron_session_free(s);
            nemotron_model_free(m);
            return 2;
        }
        if (cli_spec_wanted(a)) {
            rc = generate_speculative(a, m, s, eos, n_eos);
            nemotron_session_free(s);
            nemotron_model_free(m);
            return rc;
        }
        double t0 = cli_now();
        nemotron_status st = nemotron_session_eval(s, a->tokens, a->n_tokens, NULL);
        double t1 = cli_now(), t2;
        int made = 0;
        while (!st && made < a->n_gen) {
            int32_t next = nemotron_session_argmax(s);
            printf("%s%d", made ? "," : "", (int)next);
            fflush(stdout);
            made++;
            int stop = made == a->n_gen;
            for (int i = 0; i < n_eos && !a->ignore_eos; i++) stop |= next == eos[i];
            if (stop) break;
            st = nemotron_session_eval(s, &next, 1, NULL);
        }
        t2 = cli_now();
        if (made) { /* the ids' line; a prompt that failed printed none */
            printf("\n");
            fflush(stdout);
        }
        if (st) rc = cli_fail("evaluating", nemotron_session_errmsg(s), st);
        else
            fprintf(stderr, "prompt %d tokens: %.1f tokens/s; generated %d tokens: %.1f tokens/s\n",
                    a->n_tokens, a->n_tokens / (t1 - t0), made,
                    made > 1 ? (made - 1) / (t2 - t1) : 0.0);
    }
    nemotron_session_free(s);
    nemotron_model_free(m);
    return rc;
}

/* Runs the parsed command; its exit status. */
static int dispatch(struct args *a) {
    switch (a->cmd) {
    case CMD_VERSION: printf("nemotron %s\n", nemotron_version()); return 0;
    case CMD_TOKENIZE: return cmd_tokenize(a);
    case CMD_TEMPLATE: return cmd_template(a);
    case CMD_CONVERT: return cmd_convert(a);
    case CMD_SYNTH: return cmd_synth(a);
    case CMD_GGUF_INFO:
        if (!a->model) cli_usage_error("gguf-info: give the file: nemotron gguf-info FILE.gguf");
        return cmd_gguf_info(a);
    default: break;
    }
    if (!a->model) cli_usage_error("%s: -m MODEL is required", a->command);
    if (a->cmd == CMD_RUN) {
        if (!a->p_arg == !a->prompt_file) cli_usage_error("run: give the prompt with -p TEXT (- for stdin) or -f FILE");
        if (a->n_gen < 0) a->n_gen = 256;
        return cmd_run(a);
    }
    if (a->cmd == CMD_CHAT) {
        if (a->p_arg && a->prompt_file) cli_usage_error("chat: give the first message with -p TEXT or -f FILE, not both");
        if (a->n_gen < 0) a->n_gen = 4096;
        return cmd_chat(a);
    }
    if (a->cmd == CMD_BENCH) {
        if (a->n_gen < 0) a->n_gen = 128;
        if (!a->n_bench_p) a->bench_p[a->n_bench_p++] = a->n_prompt;
        if (!a->n_bench_n) a->bench_n[a->n_bench_n++] = a->n_gen;
        return cmd_bench(a);
    }
    if (a->n_gen < 0) a->n_gen = 16;
    if (!a->tokens_arg) cli_usage_error("%s: --tokens IDS is required", a->command);
    char err[160];
    /* the vocabulary bound is the model's, checked when it is loaded */
    a->tokens = cli_parse_ids(a->tokens_arg, INT32_MAX, &a->n_tokens, err, sizeof err);
    if (!a->tokens) cli_usage_error("--tokens: %s", err);
    if (a->n_tokens == 0) cli_usage_error("--tokens: the list is empty");
    int rc = a->cmd == CMD_LOGITS ? cmd_logits(a) : cmd_generate(a);
    free(a->tokens);
    return rc;
}

/* SIGBUS: a read of the mapped weights past the file's end, after the file shrank under the run
 * (the library maps model files; nothing a process can do stops another from truncating them).
 * Only async-signal-safe calls here. */
static void on_sigbus(int sig) {
    (void)sig;
    static const char msg[] =
        "nemotron: a model file changed while in use: it was cut short (truncated or rewritten in "
        "place) and the weights past its new end cannot be read; restart the run on a complete "
        "file\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(1);
}

/* Output that never arrived is a failure (a full disk, a closed pipe): stdout is flushed and its
 * error state read before the exit status is decided. */
int cli_exit_status(const char *command, int rc) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "nemotron: %s: writing the output failed: %s\n", command,
                errno ? strerror(errno) : "stdout is in an error state");
        return rc ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);
    if (argc > 1 && !strcmp(argv[1], "serve")) /* its own options */
        return cli_exit_status("serve", cmd_serve(argc, argv));
    struct args a;
    cli_parse_args(argc, argv, &a);
    return cli_exit_status(a.command, dispatch(&a));
}
