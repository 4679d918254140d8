/* serve.c - `nemotron serve`: the OpenAI-compatible HTTP server (src/server/server.h).
 *
 *   nemotron serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY | --api-key-file F]
 *                  [--parallel 4] [--queue 64] [--ctx 4096] [--device D] [--cache-ram 1024] [-t N]
 *                  [--spec ngram | --spec mtp | --draft-model M] [--spec-max 16] [--tokenizer FILE]
 *
 * serve has options no other command has, so it reads its own command line; everything else is
 * the server's. Bad arguments exit with status 2 before anything is loaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "speculate.h"
#include "server/server.h"

static const char *serve_usage =
    "usage: nemotron serve -m MODEL [options]\n"
    "  --host ADDR         address to listen on (default 127.0.0.1)\n"
    "  --port N            port (default 8080)\n"
    "  --api-key KEY       require 'Authorization: Bearer KEY' (all but /health)\n"
    "  --api-key-file F    the same, the key read from F's first line\n"
    "  --parallel N        sequences generated at once, one session each (default 4)\n"
    "  --queue N           requests that may wait for a slot; more get 429 (default 64)\n"
    "  --ctx N             context length of each slot (default 4096)\n"
    "  --device D          cpu (default), cuda or cuda:N\n"
    "  --cache-ram MiB     prefix cache of sequence state (default 1024; 0: off)\n"
    "  -t, --threads N     CPU threads (default: the physical cores)\n"
    "  --spec ngram        speculative decoding in every slot, n-gram drafts (same output, fewer passes);\n"
    "                      a request turns it off with \"speculative\": false\n"
    "  --spec mtp          the same, drafts of the model's own MTP layers (the model must have them)\n"
    "  --draft-model M     speculative decoding with drafts of M (a smaller model, same vocabulary)\n"
    "  --spec-max K        at most K drafts per verify pass (default 16; a request may ask fewer)\n"
    "  --tokenizer FILE    the tokenizer (a tokenizer.json, a model directory or a .nemo) when the\n"
    "                      model carries none, as a synthetic one (nemotron synth); at most the\n"
    "                      model's vocabulary size\n"
    "endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions,\n"
    "           GET /metrics\n";

static void serve_die(const char *fmt, const char *what) {
    fprintf(stderr, "nemotron serve: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n(run 'nemotron serve --help' for usage)\n");
    exit(2);
}

static long serve_int(const char *s, const char *opt, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!(s[0] >= '0' && s[0] <= '9') || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "nemotron serve: %s: '%s' is not an integer in [%ld, %ld]\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

/* The key from the file's first line (without its line end); exits when unreadable or empty. */
static char *read_key(const char *path) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) exit(2);
    text[strcspn(text, "\r\n")] = 0;
    if (!text[0]) serve_die("--api-key-file %s: the first line is empty", path);
    return text;
}

int cmd_serve(int argc, char **argv) {
    struct server_config cfg = {.host = "127.0.0.1", .port = 8080, .parallel = 4, .queue_max = 64, .n_ctx = 4096,
                                .cache_bytes = (size_t)1024 << 20};
    char *key_from_file = NULL;
    const char *spec = NULL;         /* --spec: checked once the line is read */
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            fputs(serve_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) serve_die("option %s needs a value (or is unknown)", o);
        const char *v = argv[++i];
        if (!strcmp(o, "-m") || !strcmp(o, "--model")) cfg.model_path = v;
        else if (!strcmp(o, "--host")) cfg.host = v;
        else if (!strcmp(o, "--port")) cfg.port = (int)serve_int(v, o, 0, 65535);
        else if (!strcmp(o, "--api-key")) cfg.api_key = v;
        else if (!strcmp(o, "--api-key-file")) cfg.api_key = key_from_file = read_key(v);
        else if (!strcmp(o, "--parallel")) cfg.parallel = (int)serve_int(v, o, 1, 256);
        else if (!strcmp(o, "--queue")) cfg.queue_max = (int)serve_int(v, o, 0, 1 << 16);
        else if (!strcmp(o, "--ctx")) cfg.n_ctx = (int)serve_int(v, o, 2, 1 << 24);
        else if (!strcmp(o, "--device")) cfg.device = v;
        else if (!strcmp(o, "--cache-ram")) cfg.cache_bytes = (size_t)serve_int(v, o, 0, 1L << 30) << 20;
        else if (!strcmp(o, "-t") || !strcmp(o, "--threads")) cfg.threads = (int)serve_int(v, o, 1, 1024);
        else if (!strcmp(o, "--spec")) spec = v;
        else if (!strcmp(o, "--spec-max")) cfg.spec_max = (int)serve_int(v, o, 1, NEMOTRON_SPEC_MAX);
        else if (!strcmp(o, "--draft-model")) cfg.draft_model = v;
        else if (!strcmp(o, "--tokenizer")) cfg.tokenizer_path = v;
        else serve_die("unknown option '%s'", o);
    }
    if (!cfg.model_path) serve_die("%s", "-m MODEL is required");
    char why[256];
    if (cli_spec_check(spec, cfg.draft_model, cfg.spec_max, why, sizeof why)) serve_die("%s", why);
    if ((spec || cfg.draft_model) && !cfg.spec_max) cfg.spec_max = CLI_SPEC_DEFAULT_K;
    cfg.mtp = spec && !strcmp(spec, "mtp");
    if (cfg.api_key && !cfg.api_key[0]) serve_die("%s", "--api-key is empty");
    int rc = server_run(&cfg);
    free(key_from_file);
    return rc;
}
