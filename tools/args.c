/* args.c - the `nemotron` command line: every option, the commands it applies to, the help.
 *
 * One table lists each option with its names (llama.cpp's where a user reaches for them: -c,
 * -f, -sys, -ngl, -i, -s, --verbose-prompt), the commands it applies to and its help line; the
 * parser refuses an option given to a command it does not apply to, naming both, and
 * `nemotron COMMAND --help` prints that command's options from the same table. Every value is
 * checked here, before a model is loaded; a usage error exits with status 2.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "speculate.h"

#define MODEL_CMDS (CMD_LOGITS | CMD_GENERATE | CMD_RUN | CMD_CHAT | CMD_BENCH)
#define TEXT_GEN_CMDS (CMD_RUN | CMD_CHAT)
#define SPEC_CMDS (CMD_GENERATE | CMD_RUN | CMD_CHAT)

static const struct command {
    const char *name;
    enum cli_command cmd;
    const char *usage, *about;
} commands[] = {
    {"logits", CMD_LOGITS, "-m MODEL --tokens IDS -o OUT.npy",
     "write every position's logits as a float32 .npy of shape [n, vocab]"},
    {"generate", CMD_GENERATE, "-m MODEL --tokens IDS [-n 16]", "print the greedy continuation's ids (1,2,3)"},
    {"run", CMD_RUN, "-m MODEL -p TEXT|- | -f FILE [-n 256]", "stream a continuation of the prompt"},
    {"chat", CMD_CHAT, "-m MODEL [-sys TEXT] [--no-think]",
     "talk to the model (/help in the chat lists its commands)"},
    {"tokenize", CMD_TOKENIZE, "--tokenizer FILE [--decode]",
     "text on stdin -> JSON ids [1, 2, 3]; --decode: ids on stdin (either form) -> text"},
    {"template", CMD_TEMPLATE, "--messages FILE.json [--tools FILE.json]", "print the Nemotron 3 chat rendering"},
    {"bench", CMD_BENCH, "-m MODEL [-p 512[,N...]] [-n 128[,N...]]",
     "prompt (pp) and generation (tg) speed, and the share of memory bandwidth reached"},
    {"convert", CMD_CONVERT, "HF_DIR|FILE.gguf -o MODEL.nemo [--quant MIX]",
     "one-file model: a directory in the packed formats, a GGUF losslessly in its own types"},
    {"synth", CMD_SYNTH, "--shape NAME -o MODEL.nemo", "a model of a published shape with random weights"},
    {"gguf-info", CMD_GGUF_INFO, "FILE.gguf",
     "a GGUF file's metadata and tensor table (-m FILE.gguf runs one)"},
    {"version", CMD_VERSION, "", "print the version"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

enum opt_id {
    O_MODEL, O_TOKENS, O_OUTPUT, O_N, O_THREADS, O_DEVICE, O_NGL, O_PASS, O_CTX, O_IGNORE_EOS, O_PROMPT,
    O_FILE, O_INTERACTIVE, O_VERBOSE_PROMPT, O_TOKENIZER, O_DECODE, O_MESSAGES, O_TOOLS, O_SYSTEM,
    O_NO_THINK, O_NO_GEN_PROMPT, O_TEMP, O_TOP_K, O_TOP_P, O_MIN_P, O_REPEAT, O_PRESENCE, O_FREQUENCY,
    O_SEED, O_STOP, O_SPEC, O_SPEC_MAX, O_DRAFT_MODEL, O_REPS, O_VERIFY, O_JSON, O_QUANT, O_SHAPE, O_LIST, O_HELP
};

static const struct option {
    enum opt_id id;
    const char *names;       /* '|'-separated */
    const char *value;       /* the value's name; NULL: a flag */
    unsigned cmds;
    const char *help;
} options[] = {
    {O_MODEL, "-m|--model", "MODEL", MODEL_CMDS | CMD_CONVERT | CMD_GGUF_INFO,
     "a Hugging Face model directory (config.json + *.safetensors), a .nemo or a GGUF file"},
    {O_TOKENS, "--tokens", "IDS", CMD_LOGITS | CMD_GENERATE, "token ids: 1,2,3 or [1, 2, 3]"},
    {O_OUTPUT, "-o|--output", "FILE", CMD_LOGITS | CMD_CONVERT | CMD_SYNTH, "the output file"},
    {O_N, "-n|--n-predict", "N", CMD_GENERATE | CMD_RUN | CMD_CHAT | CMD_BENCH,
     "tokens to generate (generate 16, run 256, chat 4096; bench: a list, default 128)"},
    {O_THREADS, "-t|--threads", "N", MODEL_CMDS | CMD_CONVERT | CMD_SYNTH, "CPU threads (default: the physical cores)"},
    {O_DEVICE, "--device", "D", MODEL_CMDS, "cpu (default), cuda or cuda:N (builds with the CUDA backend)"},
    {O_NGL, "-ngl|--n-gpu-layers|--gpu-layers", "N", MODEL_CMDS,
     "llama.cpp's GPU offload: N > 0 runs the whole model on the GPU (--device cuda), 0 on the CPU"},
    {O_PASS, "--pass", "N", MODEL_CMDS, "positions per pass, 1..1024 (default: 256 on the CPU, 512 on CUDA)"},
    {O_CTX, "-c|--ctx-size|--ctx", "N", CMD_LOGITS | CMD_GENERATE | CMD_RUN | CMD_CHAT,
     "context length of the session (default: what the run needs; chat 8192)"},
    {O_IGNORE_EOS, "--ignore-eos", NULL, CMD_GENERATE | CMD_RUN, "do not stop at an end-of-sequence id"},
    {O_PROMPT, "-p|--prompt", "TEXT", CMD_RUN | CMD_CHAT | CMD_BENCH,
     "run: the prompt (- reads stdin); chat (run -i): the first message, answered before the input "
     "is read; bench: prompt lengths, e.g. 256,512 (default 512)"},
    {O_FILE, "-f|--file", "FILE", CMD_RUN | CMD_CHAT, "the prompt (chat: the first message) from a file"},
    {O_INTERACTIVE, "-i|--interactive", NULL, CMD_RUN | CMD_CHAT, "run: chat instead (as llama.cpp's -i)"},
    {O_VERBOSE_PROMPT, "--verbose-prompt", NULL, TEXT_GEN_CMDS, "print the prompt's tokens (id -> 'text') on stderr"},
    {O_TOKENIZER, "--tokenizer", "FILE", CMD_TOKENIZE, "a tokenizer.json, a model directory or a .nemo"},
    {O_DECODE, "--decode", NULL, CMD_TOKENIZE, "ids on stdin -> text"},
    {O_MESSAGES, "--messages", "FILE.json", CMD_TEMPLATE, "the conversation: [{\"role\", \"content\"}...]"},
    {O_TOOLS, "--tools", "FILE.json", CMD_TEMPLATE, "tool definitions"},
    {O_SYSTEM, "-sys|--system-prompt|--system", "TEXT", CMD_CHAT, "the system prompt"},
    {O_NO_THINK, "--no-think", NULL, CMD_CHAT | CMD_TEMPLATE, "no reasoning before the answer"},
    {O_NO_GEN_PROMPT, "--no-generation-prompt", NULL, CMD_TEMPLATE, "end without the assistant's opening"},
    {O_TEMP, "--temp", "T", TEXT_GEN_CMDS, "temperature (default 0.6; 0 = greedy)"},
    {O_TOP_K, "--top-k", "K", TEXT_GEN_CMDS, "keep the K most likely tokens (default 0 = off)"},
    {O_TOP_P, "--top-p", "P", TEXT_GEN_CMDS, "nucleus: the smallest set reaching P (default 0.95)"},
    {O_MIN_P, "--min-p", "P", TEXT_GEN_CMDS, "drop tokens below P x the most likely (default 0 = off)"},
    {O_REPEAT, "--repeat-penalty", "R", TEXT_GEN_CMDS, "penalise recent tokens (default 1 = off)"},
    {O_PRESENCE, "--presence-penalty", "X", TEXT_GEN_CMDS, "(default 0)"},
    {O_FREQUENCY, "--frequency-penalty", "X", TEXT_GEN_CMDS, "(default 0)"},
    {O_SEED, "-s|--seed", "S", TEXT_GEN_CMDS | CMD_SYNTH,
     "random seed; -1 (and run/chat's default): a random one, printed on stderr"},
    {O_STOP, "--stop", "TEXT", TEXT_GEN_CMDS, "stop when TEXT appears (repeatable, up to 16)"},
    {O_SPEC, "--spec", "METHOD", SPEC_CMDS,
     "speculative decoding (same output, fewer passes): ngram drafts from earlier text (prompt lookup), mtp "
     "from the model's own MTP layers (models that have them)"},
    {O_SPEC_MAX, "--spec-max", "K", SPEC_CMDS, "speculation: at most K drafted tokens per verify pass (default 16)"},
    {O_DRAFT_MODEL, "--draft-model", "MODEL", SPEC_CMDS,
     "speculation: a smaller Nemotron-H with the same vocabulary drafts greedily"},
    {O_REPS, "-r|--repetitions", "N", CMD_BENCH, "repetitions, mean and deviation reported (default 3)"},
    {O_VERIFY, "--verify", "K[,K...]", CMD_BENCH,
     "time verify passes of 1+K positions (speculative decoding's check) against decode steps"},
    {O_JSON, "--json", NULL, CMD_BENCH, "one JSON object per line instead of the table"},
    {O_QUANT, "--quant", "MIX", CMD_CONVERT | CMD_SYNTH, "default, q8_2f, bf16 (convert: also source, the default for a GGUF, whose block types any MIX keeps)"},
    {O_SHAPE, "--shape", "NAME", CMD_SYNTH, "the published shape (--list shows them)"},
    {O_LIST, "--list", NULL, CMD_SYNTH, "list the shapes"},
    {O_HELP, "-h|--help", NULL, ~0u, "this help"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

void cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nemotron: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(run 'nemotron --help' for usage)\n");
    exit(2);
}

static void print_global_help(void) {
    printf("usage: nemotron COMMAND [options]     (nemotron COMMAND --help: that command's options)\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-9s %s\n            %s\n", commands[i].name, commands[i].usage, commands[i].about);
    printf("\nexit status: 0 done, 1 the run failed, 2 a usage error, 130 Ctrl-C (run, chat, convert, synth)\n");
}

static void print_command_help(const struct command *c) {
    printf("usage: nemotron %s %s\n  %s\n\noptions:\n", c->name, c->usage, c->about);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (!(options[i].cmds & c->cmd)) continue;
        char head[96];
        size_t at = 0;
        for (const char *p = options[i].names; *p && at + 3 < sizeof head; p++) {
            if (*p == '|') head[at++] = ',', head[at++] = ' ';
            else head[at++] = *p;
        }
        snprintf(head + at, sizeof head - at, "%s%s", options[i].value ? " " : "",
                 options[i].value ? options[i].value : "");
        printf("  %-36s %s\n", head, options[i].help);
    }
}

/* The option whose names include `arg`, or NULL. */
static const struct option *find_option(const char *arg) {
    size_t n = strlen(arg);
    for (size_t i = 0; i < N_OPTIONS; i++)
        for (const char *p = options[i].names; *p;) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (len == n && !memcmp(p, arg, n)) return &options[i];
            p += len + (bar != NULL);
        }
    return NULL;
}

/* A whole decimal integer in [lo, hi], or exit naming the option. */
static long parse_int(const char *s, const char *opt, long lo, long hi) {
    char *end;
    errno = 0;
    /* digits only (an optional leading '-'): strtol alone would take spaces and '+' too */
    int well_formed = (s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9');
    long v = strtol(s, &end, 10);
    if (!well_formed || *end || errno || v < lo || v > hi)
        cli_usage_error("%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
    return v;
}

/* A finite decimal number in [lo, hi], or exit naming the option. */
static float parse_float(const char *s, const char *opt, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi))
        cli_usage_error("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
    return (float)v;
}

/* bench's "256,512": up to CLI_MAX_BENCH_SIZES integers in [lo, hi]. */
static int parse_int_list(const char *s, const char *opt, long lo, long hi, int *out) {
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (n == CLI_MAX_BENCH_SIZES) cli_usage_error("%s: at most %d values", opt, CLI_MAX_BENCH_SIZES);
        if (len == 0 || len >= sizeof item) cli_usage_error("%s: item %d of '%s' is not a number", opt, n + 1, s);
        memcpy(item, p, len);
        item[len] = 0;
        out[n++] = (int)parse_int(item, opt, lo, hi);
        if (!comma) return n;
        p = comma + 1;
    }
}

int32_t *cli_parse_ids(const char *s, int32_t limit, int *n, char *err, size_t err_len) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    int bracketed = *s == '[';
    if (bracketed) s++;
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        snprintf(err, err_len, "out of memory for %zu ids", cap);
        return NULL;
    }
    *n = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*n == 0 && (*p == 0 || (bracketed && *p == ']'))) break;   /* an empty list */
        const char *start = p;
        while (*p >= '0' && *p <= '9') p++;
        /* digits only, up to the item's end: "1.5", "-1" and "abc" are refused whole */
        int item_end = !*p || strchr(",] \t\r\n", *p);
        long long v = item_end && p > start && p - start <= 18 ? strtoll(start, NULL, 10) : -1;
        if (v < 0 || v >= limit) {
            size_t shown = strcspn(start, ",] \t\r\n");
            snprintf(err, err_len, "item %d ('%.*s') is not a token id in [0, %ld)", *n + 1,
                     (int)(shown < 40 ? shown : 40), start, (long)limit);
            free(ids);
            return NULL;
        }
        ids[(*n)++] = (int32_t)v;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == ',') {
            p++;
            continue;
        }
        break;
    }
    if (bracketed && *p++ != ']') {
        snprintf(err, err_len, "the list opened with '[' does not end with ']'");
        free(ids);
        return NULL;
    }
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p) {
        snprintf(err, err_len, "'%.20s' follows the list", p);
        free(ids);
        return NULL;
    }
    return ids;
}

/* A seed nobody chose: the clock's nanoseconds and the process id (two runs started in the
 * same second still differ). */
static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
}

static void set_option(struct args *a, const struct option *o, const char *name, const char *v, int *ngl) {
    switch (o->id) {
    case O_MODEL: a->model = v; break;
    case O_TOKENS: a->tokens_arg = v; break;
    case O_OUTPUT: a->output = v; break;
    case O_N:
        if (a->cmd == CMD_BENCH) {
            a->n_bench_n = parse_int_list(v, name, 1, 1 << 24, a->bench_n);
            a->n_gen = a->bench_n[0];
        } else {
            a->n_gen = (int)parse_int(v, name, 0, 1 << 24);
        }
        break;
    case O_THREADS: a->threads = (int)parse_int(v, name, 1, 1024); break;
    case O_DEVICE: a->device = v; break;
    case O_NGL: *ngl = (int)parse_int(v, name, -1, INT_MAX); break;
    case O_PASS: a->pass = (int)parse_int(v, name, 1, NEMOTRON_PASS_MAX); break;
    case O_CTX: a->ctx = (int)parse_int(v, name, 1, 1 << 24); break;
    case O_IGNORE_EOS: a->ignore_eos = 1; break;
    case O_PROMPT:
        /* chat's standard input is the conversation itself */
        if (a->cmd == CMD_CHAT && !strcmp(v, "-"))
            cli_usage_error("%s -p -: chat reads its messages from stdin already; give the first "
                            "message as -p TEXT or -f FILE", a->command);
        a->p_arg = v;
        if (a->cmd == CMD_BENCH) {
            a->n_bench_p = parse_int_list(v, name, 1, 1 << 20, a->bench_p);
            a->n_prompt = a->bench_p[0];
        }
        break;
    case O_FILE: a->prompt_file = v; break;
    case O_VERIFY:
        a->n_bench_v = parse_int_list(v, name, 1, NEMOTRON_PASS_MAX - 1, a->bench_v);
        for (int i = 0; i < a->n_bench_v; i++)
            if (a->bench_v[i] + 1 > a->verify_max) a->verify_max = a->bench_v[i] + 1;
        break;
    case O_INTERACTIVE: break;   /* handled before the parse: it changes the command */
    case O_VERBOSE_PROMPT: a->verbose_prompt = 1; break;
    case O_TOKENIZER: a->tokenizer = v; break;
    case O_DECODE: a->decode = 1; break;
    case O_MESSAGES: a->messages = v; break;
    case O_TOOLS: a->tools = v; break;
    case O_SYSTEM: a->system = v; break;
    case O_NO_THINK: a->no_think = 1; break;
    case O_NO_GEN_PROMPT: a->no_generation_prompt = 1; break;
    case O_TEMP: a->sampling.temperature = parse_float(v, name, 0, 100); break;
    case O_TOP_K: a->sampling.top_k = (int)parse_int(v, name, 0, 1 << 24); break;
    case O_TOP_P: a->sampling.top_p = parse_float(v, name, 1e-6, 1); break;
    case O_MIN_P: a->sampling.min_p = parse_float(v, name, 0, 1); break;
    case O_REPEAT: a->sampling.repeat_penalty = parse_float(v, name, 1e-3, 100); break;
    case O_PRESENCE: a->sampling.presence_penalty = parse_float(v, name, -100, 100); break;
    case O_FREQUENCY: a->sampling.frequency_penalty = parse_float(v, name, -100, 100); break;
    case O_SEED: {
        long s = parse_int(v, name, -1, LONG_MAX);
        a->seed_given = 1;
        a->sampling.seed = s >= 0 ? (uint64_t)s : random_seed();
        if (s < 0) fprintf(stderr, "nemotron: seed %llu\n", (unsigned long long)a->sampling.seed);
        break;
    }
    case O_STOP:
        if (a->n_stop == CLI_MAX_STOP_STRINGS) cli_usage_error("at most %d --stop strings", CLI_MAX_STOP_STRINGS);
        if (!v[0]) cli_usage_error("%s: an empty --stop string", name);
        a->stop[a->n_stop++] = v;
        break;
    case O_SPEC: a->spec = v; break;
    case O_SPEC_MAX: a->spec_max = (int)parse_int(v, name, 1, NEMOTRON_SPEC_MAX); break;
    case O_DRAFT_MODEL: a->draft_model = v; break;
    case O_REPS: a->reps = (int)parse_int(v, name, 1, 1000); break;
    case O_JSON: a->json = 1; break;
    case O_QUANT: a->quant = v; break;
    case O_SHAPE: a->shape = v; break;
    case O_LIST: a->list = 1; break;
    case O_HELP: break;
    }
}

/* -ngl as llama.cpp users mean it: whether the model runs on the GPU. nemotron does not split
 * layers between the CPU and the GPU, so any N > 0 means all of them (said on stderr). */
static void apply_ngl(struct args *a, int ngl) {
    if (ngl < 0 && ngl != -1) return;
    if (ngl == 0) {
        if (a->device && strcmp(a->device, "cpu"))
            cli_usage_error("-ngl 0 (the CPU) contradicts --device %s", a->device);
        a->device = "cpu";
        return;
    }
    if (a->device && strncmp(a->device, "cuda", 4))
        cli_usage_error("-ngl %d (the GPU) contradicts --device %s", ngl, a->device);
    if (!a->device) a->device = "cuda";
    fprintf(stderr, "nemotron: -ngl %d: every layer runs on the GPU (--device %s); nemotron does not split "
                    "layers between the CPU and the GPU\n", ngl, a->device);
}

/* --spec, --spec-max and --draft-model together: one drafter, a K the verify pass holds. */
static void check_spec(struct args *a) {
    char why[256];
    if (cli_spec_check(a->spec, a->draft_model, a->spec_max, why, sizeof why)) cli_usage_error("%s", why);
    if (!a->spec && !a->draft_model) return;
    if (!a->spec_max) a->spec_max = CLI_SPEC_DEFAULT_K;
    /* a step verifies the pending token and K drafts in one pass */
    if (a->pass && a->spec_max + 1 > a->pass)
        cli_usage_error("--spec-max %d verifies %d positions in one pass: more than --pass %d", a->spec_max,
                        a->spec_max + 1, a->pass);
    a->verify_max = a->spec_max + 1;
}

void cli_parse_args(int argc, char **argv, struct args *a) {
    memset(a, 0, sizeof *a);
    a->n_gen = -1;           /* per command: generate 16, run 256, chat 4096, bench 128 */
    a->n_prompt = 512;
    a->reps = 3;
    a->sampling = nemotron_sampler_default_params();
    if (argc < 2) cli_usage_error("no command given");
    a->command = argv[1];
    if (!strcmp(a->command, "-h") || !strcmp(a->command, "--help") || !strcmp(a->command, "help")) {
        print_global_help();
        exit(cli_exit_status("help", 0));
    }
    const struct command *c = NULL;
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(a->command, commands[i].name)) c = &commands[i];
    if (!c) cli_usage_error("unknown command '%s'", a->command);
    /* run -i is a chat: the rest of the line is checked against chat's options */
    int interactive = 0;
    for (int i = 2; i < argc; i++) interactive |= !strcmp(argv[i], "-i") || !strcmp(argv[i], "--interactive");
    if (interactive && c->cmd == CMD_RUN) {
        c = &commands[3];
        a->command = c->name;
    }
    a->cmd = c->cmd;
    int ngl = -2;   /* not given */
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' && (c->cmd == CMD_CONVERT || c->cmd == CMD_GGUF_INFO) && !a->model) {
            a->model = arg;   /* convert HF_DIR, gguf-info FILE */
            continue;
        }
        const struct option *o = find_option(arg);
        if (!o) cli_usage_error("unknown option '%s' (nemotron %s --help lists its options)", arg, c->name);
        if (o->id == O_HELP) {
            print_command_help(c);
            exit(cli_exit_status(c->name, 0));
        }
        if (!(o->cmds & c->cmd))
            cli_usage_error("option '%s' does not apply to '%s'%s (nemotron %s --help lists its options)", arg,
                            c->name, interactive && o->cmds & CMD_RUN ? " (-i makes run a chat)" : "", c->name);
        const char *v = NULL;
        if (o->value) {
            if (i + 1 >= argc) cli_usage_error("option %s needs a value", arg);
            v = argv[++i];
        }
        set_option(a, o, arg, v, &ngl);
    }
    if (ngl != -2) apply_ngl(a, ngl);
    check_spec(a);
    /* run and chat sample with a seed nobody chose unless one is given: said, so a run can be
     * repeated (synth's default seed is the library's fixed one) */
    if (!a->seed_given && a->cmd & TEXT_GEN_CMDS) {
        a->sampling.seed = random_seed();
        fprintf(stderr, "nemotron: seed %llu\n", (unsigned long long)a->sampling.seed);
    }
}
