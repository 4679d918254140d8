/* model_cmds.c - `nemotron convert` and `nemotron synth`: writing .nemo model files.
 *
 *   nemotron convert HF_DIR|FILE.gguf -o MODEL.nemo [--quant default|q8_2f|bf16|source] [-t N]
 *   nemotron synth --shape NAME -o MODEL.nemo [--quant default|q8_2f|bf16] [--seed S]
 *   nemotron synth --list
 *
 * Both stream through the library (nemotron_convert, nemotron_synth), which writes to a
 * temporary name and renames on success. On a terminal, stderr shows a progress bar. Ctrl-C (or
 * SIGTERM) removes the temporary file and exits with 130.
 *
 * A GGUF converts with --quant source unless a mix is asked for: its weights are quantized
 * already, and the point of converting one is a .nemo that computes exactly what it did.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "model/gguf_model.h"

/* The library writes `TARGET.partial` and renames it over TARGET when complete, and removes it
 * when it fails; a SIGINT would end the process in between and leave it behind (a full-size
 * .nemo). The handler removes it (unlink is async-signal-safe) and exits with 128 + the signal
 * (130 for SIGINT), as the signal's own status would be. TARGET is the file a symbolic link names, as the library resolves it. */
static char partial_path[PATH_MAX + sizeof ".partial"];

static void on_sigint_remove_partial(int sig) {
    unlink(partial_path);
    _exit(128 + sig);
}

static void remove_partial_on_sigint(const char *output) {
    struct stat sb;
    char resolved[PATH_MAX];
    const char *target = output;
    if (lstat(output, &sb) == 0 && S_ISLNK(sb.st_mode) && realpath(output, resolved)) target = resolved;
    if (snprintf(partial_path, sizeof partial_path, "%s.partial", target) >= (int)sizeof partial_path) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint_remove_partial;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

struct progress {
    const char *what;
    double t0, last;
    int shown;
};

/* Redraws at most ten times a second: a bar, the share done, the rate and the time left. */
static void draw_progress(void *ctx, uint64_t done, uint64_t total) {
    struct progress *p = ctx;
    double now = cli_now();
    if (done < total && now - p->last < 0.1) return;
    p->last = now;
    p->shown = 1;
    double f = total ? (double)done / (double)total : 1.0, el = now - p->t0;
    double rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    char bar[31];
    int fill = (int)(f * 30 + 0.5);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%  %.2f / %.2f GB  %.0f MB/s  %3.0f s left ", p->what, bar,
            100 * f, (double)done / 1e9, (double)total / 1e9, rate / 1e6, eta);
    fflush(stderr);
}

static int parse_quant(const char *s, nemotron_quant *q) {
    static const struct { const char *name; nemotron_quant q; } names[] = {
        {"default", NEMOTRON_QUANT_DEFAULT}, {"q8_2f", NEMOTRON_QUANT_Q8_2F},
        {"bf16", NEMOTRON_QUANT_BF16}, {"source", NEMOTRON_QUANT_SOURCE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) {
            *q = names[i].q;
            return 1;
        }
    return 0;
}

static int finish(struct progress *p, const char *what, nemotron_status st, const char *msg,
                  const char *out) {
    if (p->shown) fputc('\n', stderr);
    if (st) return cli_fail(what, msg, st);
    fprintf(stderr, "%s: wrote %s in %.1f s\n", what, out, cli_now() - p->t0);
    return 0;
}

int cmd_convert(const struct args *a) {
    if (!a->model || !a->output) {
        fprintf(stderr, "nemotron: convert: usage: nemotron convert HF_DIR|FILE.gguf -o MODEL.nemo [--quant MIX]\n");
        return 2;
    }
    nemotron_convert_params p = nemotron_convert_default_params();
    if (a->quant && !parse_quant(a->quant, &p.quant)) {
        fprintf(stderr, "nemotron: --quant: '%s' is not one of default, q8_2f, bf16, source\n", a->quant);
        return 2;
    }
    if (!a->quant && nt_path_is_gguf(a->model)) p.quant = NEMOTRON_QUANT_SOURCE;
    p.n_threads = a->threads;
    struct progress pr = {.what = "convert", .t0 = cli_now()};
    if (isatty(STDERR_FILENO)) {
        p.progress = draw_progress;
        p.progress_ctx = &pr;
    }
    char msg[1024];
    remove_partial_on_sigint(a->output);
    nemotron_status st = nemotron_convert(a->model, a->output, &p, msg, sizeof msg);
    return finish(&pr, "convert", st, msg, a->output);
}

int cmd_synth(const struct args *a) {
    if (a->list) {
        for (int i = 0; nemotron_synth_shape_name(i); i++)
            printf("%-26s %s\n", nemotron_synth_shape_name(i), nemotron_synth_shape_about(i));
        return 0;
    }
    if (!a->shape || !a->output) {
        fprintf(stderr, "nemotron: synth: usage: nemotron synth --shape NAME -o MODEL.nemo "
                        "(--list shows the shapes)\n");
        return 2;
    }
    nemotron_synth_params p = nemotron_synth_default_params();
    if (a->quant && (!parse_quant(a->quant, &p.quant) || p.quant == NEMOTRON_QUANT_SOURCE)) {
        fprintf(stderr, "nemotron: --quant: '%s' is not one of default, q8_2f, bf16\n", a->quant);
        return 2;
    }
    if (a->seed_given) p.seed = a->sampling.seed;
    p.n_threads = a->threads;
    struct progress pr = {.what = "synth", .t0 = cli_now()};
    if (isatty(STDERR_FILENO)) {
        p.progress = draw_progress;
        p.progress_ctx = &pr;
    }
    char msg[1024];
    remove_partial_on_sigint(a->output);
    nemotron_status st = nemotron_synth(a->shape, a->output, &p, msg, sizeof msg);
    return finish(&pr, "synth", st, msg, a->output);
}
