/* nemotron.c - the `nemotron` command: run Nemotron-H models from the shell.
 *
 *   nemotron logits   -m MODEL --tokens 1,2,3 -o out.npy   every position's logits (.npy)
 *   nemotron generate -m MODEL --tokens 1,2,3 -n N         greedy continuation, token ids
 *
 * A thin program over the public header only. Every argument is checked before the model is
 * loaded; errors name the argument and exit with status 2 (usage) or 1 (the run failed).
 * Output files are written to a temporary name and renamed, so a failed run leaves none.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "model/output.h"

static const char *usage_text =
    "usage: nemotron COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  logits    -m MODEL --tokens IDS -o OUT.npy   write every position's logits as a\n"
    "                                                   float32 .npy of shape [n, vocab]\n"
    "  generate  -m MODEL --tokens IDS -n N         print the greedy continuation's ids\n"
    "  run       -m MODEL -p TEXT [-n 256]          stream a continuation of TEXT\n"
    "  chat      -m MODEL [--system TEXT]           talk to the model (/think, /no_think, /exit;\n"
    "                                                   Ctrl-C stops an answer)\n"
    "  tokenize  --tokenizer FILE [--decode]            text on stdin -> JSON ids (or ids -> text)\n"
    "  template  --messages FILE.json [--tools FILE.json] [--no-think] [--no-generation-prompt]\n"
    "                                                   print the Nemotron 3 chat rendering\n"
    "  bench     -m MODEL [-p 512] [-n 128]             prompt (pp) and generation (tg) speed,\n"
    "                                                   and the share of memory bandwidth reached\n"
    "  convert   HF_DIR -o MODEL.nemo [--quant MIX]     one-file model in the packed formats;\n"
    "                                                   MIX: default (q4tp experts, q8_2f\n"
    "                                                   projections), q8_2f, bf16, source\n"
    "  synth     --shape NAME -o MODEL.nemo             a model of a published shape with random\n"
    "                                                   weights (--list: the shapes; --seed S)\n"
    "  version                                          print the version\n"
    "\n"
    "options:\n"
    "  -m, --model MODEL  a Hugging Face model directory (config.json + *.safetensors)\n"
    "                     or a .nemo file (nemotron convert)\n"
    "  --tokens IDS       comma-separated token ids, e.g. 1,2,3\n"
    "  -o, --output FILE  output file (logits)\n"
    "  -n N               tokens to generate (generate; default 16)\n"
    "  -t, --threads N    CPU threads (default: the physical cores)\n"
    "  --device D         cpu (default), cuda or cuda:N (builds with the CUDA backend)\n"
    "  --pass N           positions per pass, 1..1024 (default: the backend's, 64 on the CPU,\n"
    "                     512 on CUDA)\n"
    "  --ctx N            context length of the session (default: what the run needs)\n"
    "  --ignore-eos       generate: do not stop at an end-of-sequence id\n"
    "  -p N               bench: prompt length (default 512)\n"
    "  -r N               bench: repetitions, the best is reported (default 3)\n"
    "  --json             bench: one JSON object instead of the table\n"
    "sampling (run, chat):\n"
    "  --temp T           temperature (default 0.6; 0 = greedy)\n"
    "  --top-k K          keep the K most likely tokens (default 0 = off)\n"
    "  --top-p P          nucleus: the smallest set reaching P (default 0.95)\n"
    "  --min-p P          drop tokens below P x the most likely (default 0 = off)\n"
    "  --repeat-penalty R penalise recent tokens (default 1 = off); --presence-penalty,\n"
    "                     --frequency-penalty X (default 0)\n"
    "  --seed S           random seed (default: from the clock; printed)\n"
    "  --stop TEXT        stop when TEXT appears (repeatable)\n";

static void die_usage(const char *fmt, const char *what) {
    fprintf(stderr, "nemotron: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n(run 'nemotron --help' for usage)\n");
    exit(2);
}

/* A whole decimal integer in [lo, hi], or exit with a message naming the option. */
static long parse_int(const char *s, const char *opt, long lo, long hi) {
    char *end;
    errno = 0;
    /* digits only (an optional leading '-'): strtol alone would take spaces and '+' too */
    int well_formed = (s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9');
    long v = strtol(s, &end, 10);
    if (!well_formed || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "nemotron: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

/* "1,2,3" -> ids; every item a decimal integer >= 0 (the vocabulary bound is the model's). */
static void parse_tokens(struct args *a) {
    const char *s = a->tokens_arg;
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    a->tokens = malloc(cap * sizeof *a->tokens);
    if (!a->tokens) {
        fprintf(stderr, "nemotron: out of memory for %zu token ids\n", cap);
        exit(1);
    }
    a->n_tokens = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item) {
            fprintf(stderr, "nemotron: --tokens: item %d ('%.*s') is not a token id\n", a->n_tokens + 1,
                    (int)(len < 40 ? len : 40), p);
            exit(2);
        }
        memcpy(item, p, len);
        item[len] = 0;
        a->tokens[a->n_tokens++] = (int32_t)parse_int(item, "--tokens", 0, INT32_MAX);
        if (!comma) break;
        p = comma + 1;
    }
}

/* The value after option argv[*i], or exit naming the option. */
static const char *value_of(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die_usage("option %s needs a value", argv[*i]);
    return argv[++*i];
}

/* A finite decimal number in [lo, hi], or exit naming the option. */
static float parse_float(const char *s, const char *opt, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "nemotron: %s: '%s' is not a number in [%g, %g]\n", opt, s, lo, hi);
        exit(2);
    }
    return (float)v;
}

static void parse_args(int argc, char **argv, struct args *a) {
    memset(a, 0, sizeof *a);
    a->n_gen = -1;           /* per command: generate 16, run 256, bench 128 */
    a->n_prompt = 512;
    a->reps = 3;
    a->sampling = nemotron_sampler_default_params();
    if (argc < 2) die_usage("%s", "no command given");
    a->command = argv[1];
    if (!strcmp(a->command, "-h") || !strcmp(a->command, "--help") || !strcmp(a->command, "help")) {
        fputs(usage_text, stdout);
        exit(0);
    }
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
#define VALUE() value_of(argc, argv, &i)
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) a->model = VALUE();
        else if (!strcmp(o, "--tokens")) a->tokens_arg = VALUE();
        else if (!strcmp(o, "-o") || !strcmp(o, "--output")) a->output = VALUE();
        else if (!strcmp(o, "-n")) a->n_gen = (int)parse_int(VALUE(), "-n", 0, 1 << 24);
        else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) a->threads = (int)parse_int(VALUE(), o, 1, 1024);
        else if (!strcmp(o, "--device")) a->device = VALUE();
        else if (!strcmp(o, "--pass")) a->pass = (int)parse_int(VALUE(), o, 1, NEMOTRON_PASS_MAX);
        else if (!strcmp(o, "--ctx")) a->ctx = (int)parse_int(VALUE(), o, 1, 1 << 24);
        else if (!strcmp(o, "--ignore-eos")) a->ignore_eos = 1;
        else if (!strcmp(o, "-p")) a->p_arg = VALUE();
        else if (!strcmp(o, "--tokenizer")) a->tokenizer = VALUE();
        else if (!strcmp(o, "--decode")) a->decode = 1;
        else if (!strcmp(o, "--messages")) a->messages = VALUE();
        else if (!strcmp(o, "--tools")) a->tools = VALUE();
        else if (!strcmp(o, "--system")) a->system = VALUE();
        else if (!strcmp(o, "--no-think")) a->no_think = 1;
        else if (!strcmp(o, "--no-generation-prompt")) a->no_generation_prompt = 1;
        else if (!strcmp(o, "--temp")) a->sampling.temperature = parse_float(VALUE(), o, 0, 100);
        else if (!strcmp(o, "--top-k")) a->sampling.top_k = (int)parse_int(VALUE(), o, 0, 1 << 24);
        else if (!strcmp(o, "--top-p")) a->sampling.top_p = parse_float(VALUE(), o, 1e-6, 1);
        else if (!strcmp(o, "--min-p")) a->sampling.min_p = parse_float(VALUE(), o, 0, 1);
        else if (!strcmp(o, "--repeat-penalty")) a->sampling.repeat_penalty = parse_float(VALUE(), o, 1e-3, 100);
        else if (!strcmp(o, "--presence-penalty")) a->sampling.presence_penalty = parse_float(VALUE(), o, -100, 100);
        else if (!strcmp(o, "--frequency-penalty")) a->sampling.frequency_penalty = parse_float(VALUE(), o, -100, 100);
        else if (!strcmp(o, "--seed")) { a->sampling.seed = (uint64_t)parse_int(VALUE(), o, 0, LONG_MAX); a->seed_given = 1; }
        else if (!strcmp(o, "--stop")) {
            if (a->n_stop == CLI_MAX_STOP_STRINGS) die_usage("at most %s --stop strings", "16");
            a->stop[a->n_stop] = VALUE();
            if (!a->stop[a->n_stop][0]) die_usage("%s: an empty --stop string", o);
            a->n_stop++;
        }
        else if (!strcmp(o, "-r")) a->reps = (int)parse_int(VALUE(), "-r", 1, 1000);
        else if (!strcmp(o, "--json")) a->json = 1;
        else if (!strcmp(o, "--quant")) a->quant = VALUE();
        else if (!strcmp(o, "--shape")) a->shape = VALUE();
        else if (!strcmp(o, "--list")) a->list = 1;
        else if (o[0] != '-' && !a->model && !strcmp(a->command, "convert")) a->model = o;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) { fputs(usage_text, stdout); exit(0); }
        else die_usage("unknown option '%s'", o);
#undef VALUE
    }
    if (!a->seed_given) a->sampling.seed = (uint64_t)time(NULL);
}

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

int cli_open(const struct args *a, int n_ctx, nemotron_model **m, nemotron_session **s) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.n_threads = a->threads;
    mp.device = a->device;
    nemotron_status st = nemotron_model_load(a->model, &mp, m);
    if (st) return cli_fail("loading the model", nemotron_model_errmsg(*m), st);
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = a->ctx ? a->ctx : n_ctx;
    if (a->pass) sp.pass_max = a->pass;
    st = nemotron_session_new(*m, &sp, s);
    if (st) return cli_fail("creating the session", nemotron_session_errmsg(*s), st);
    return 0;
}

static int cmd_logits(const struct args *a) {
    if (!a->output) die_usage("%s", "logits needs -o OUT.npy");
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
        printf("\n");
        fflush(stdout);
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
    if (!strcmp(a->command, "version")) {
        printf("nemotron %s\n", nemotron_version());
        return 0;
    }
    int is_logits = !strcmp(a->command, "logits"), is_generate = !strcmp(a->command, "generate");
    int is_bench = !strcmp(a->command, "bench");
    if (!strcmp(a->command, "tokenize")) return cmd_tokenize(a);
    if (!strcmp(a->command, "template")) return cmd_template(a);
    if (!strcmp(a->command, "convert")) return cmd_convert(a);
    if (!strcmp(a->command, "synth")) return cmd_synth(a);
    int is_run = !strcmp(a->command, "run"), is_chat = !strcmp(a->command, "chat");
    if (!is_logits && !is_generate && !is_bench && !is_run && !is_chat)
        die_usage("unknown command '%s'", a->command);
    if (!a->model) die_usage("%s: -m MODEL is required", a->command);
    if (is_run) {
        if (!a->p_arg) die_usage("%s: -p TEXT is required", "run");
        if (a->n_gen < 0) a->n_gen = 256;
        return cmd_run(a);
    }
    if (is_chat) {
        if (a->n_gen < 0) a->n_gen = 4096;
        return cmd_chat(a);
    }
    if (is_bench) {
        if (a->p_arg) a->n_prompt = (int)parse_int(a->p_arg, "-p", 1, 1 << 20);
        if (a->n_gen < 0) a->n_gen = 128;
        return cmd_bench(a);
    }
    if (a->n_gen < 0) a->n_gen = 16;
    if (!a->tokens_arg) die_usage("%s: --tokens IDS is required", a->command);
    parse_tokens(a);
    int rc = is_logits ? cmd_logits(a) : cmd_generate(a);
    free(a->tokens);
    return rc;
}

/* Output that never arrived is a failure (a full disk, a closed pipe): stdout is flushed and its
 * error state read before the exit status is decided. */
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "serve")) return cmd_serve(argc, argv);   /* its own options */
    struct args a;
    parse_args(argc, argv, &a);
    int rc = dispatch(&a);
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "nemotron: %s: writing the output failed: %s\n", a.command,
                errno ? strerror(errno) : "stdout is in an error state");
        return rc ? rc : 1;
    }
    return rc;
}
