/* cli.h - what the files of the `nemotron` command share: parsed arguments and small helpers.
 *
 * args.c parses the command line (every option, the commands it applies to, the help);
 * nemotron.c runs logits/generate; bench.c the benchmark; text_cmds.c tokenize and template;
 * run.c run and chat.c chat over generation.c (line_input.c reads the chat's input);
 * speculate.c the speculative decoding of generate, run and chat;
 * model_cmds.c convert and synth; gguf_info.c gguf-info. All use the public header; a few private
 * library helpers (output paths, UTF-8, config.json) are reused rather than written twice.
 */
#ifndef NEMOTRON_CLI_H
#define NEMOTRON_CLI_H

#include <stdint.h>

#include "nemotron.h"

/* Stop ids a model may list (generation configs list 2 or 3). */
#define CLI_MAX_STOP_IDS 16

/* --stop strings one run may give */
#define CLI_MAX_STOP_STRINGS 16

/* The commands, as bits: an option lists the commands it applies to. */
enum cli_command {
    CMD_LOGITS = 1 << 0, CMD_GENERATE = 1 << 1, CMD_RUN = 1 << 2, CMD_CHAT = 1 << 3,
    CMD_TOKENIZE = 1 << 4, CMD_TEMPLATE = 1 << 5, CMD_BENCH = 1 << 6, CMD_CONVERT = 1 << 7,
    CMD_SYNTH = 1 << 8, CMD_VERSION = 1 << 9, CMD_GGUF_INFO = 1 << 10
};

/* bench -p and -n lists (llama-bench's `-p 256,512`) */
#define CLI_MAX_BENCH_SIZES 16

struct args {
    const char *command;             /* as typed; run -i is "chat" */
    enum cli_command cmd;
    const char *model, *tokens_arg, *output;
    int n_gen, threads, pass, ctx, ignore_eos;
    const char *p_arg;               /* -p: run's prompt text ("-": stdin) */
    const char *prompt_file;         /* -f: run's prompt from a file */
    int verbose_prompt;              /* --verbose-prompt: print the prompt's tokens */
    int n_prompt, reps, json;        /* bench: the first -p, -r, --json */
    int bench_p[CLI_MAX_BENCH_SIZES], n_bench_p;   /* bench -p list */
    int bench_n[CLI_MAX_BENCH_SIZES], n_bench_n;   /* bench -n list */
    int bench_v[CLI_MAX_BENCH_SIZES], n_bench_v;   /* bench --verify list: drafted positions k */
    int verify_max;                  /* sessions keep snapshots for verify passes this long (0: none) */
    /* speculative decoding (speculate.h): --spec METHOD ("ngram"), --draft-model MODEL, and K */
    const char *spec, *draft_model;
    int spec_max;
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

/* Parses the command line into *a (args.c); on a usage error prints it and exits with 2, on
 * --help prints the help and exits with 0. */
void cli_parse_args(int argc, char **argv, struct args *a);
/* Prints "nemotron: MESSAGE" and the pointer to --help on stderr and exits with 2. */
void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* A token-id list in either form the command prints: "1,2,3" (generate) or "[1, 2, 3]"
 * (tokenize), white space allowed around items. Every id in [0, limit). Returns the ids
 * (malloc'd, *n of them, maybe 0) or NULL with why in err. */
int32_t *cli_parse_ids(const char *s, int32_t limit, int *n, char *err, size_t err_len);


double cli_now(void);
/* The exit status of a command that would end with rc: rc, or 1 (with a message naming the
 * command) when stdout cannot be flushed or was in an error state: a full disk, a closed pipe. */
int cli_exit_status(const char *command, int rc);
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
int cmd_gguf_info(const struct args *a); /* gguf_info.c */
int cmd_serve(int argc, char **argv);   /* serve.c: reads its own options (argv[1] is "serve") */
/* Reads a whole file (or stdin for "-") into a NUL-terminated buffer to free(); NULL with a
 * message printed on failure. */
char *cli_read_file(const char *path, size_t *len);

#endif /* NEMOTRON_CLI_H */
