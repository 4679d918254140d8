/* model_open.c - opening a model and a session for a command (cli_open).
 *
 * Besides the two library calls it owns what a user should hear while that happens: a load that
 * takes longer than LOAD_QUIET_S says what it is doing on stderr (a .nemo's checksums are all
 * verified, a large GPU upload takes seconds), and a context (--ctx) longer than the model was
 * trained for is warned about, since positions past it are outside what the model learned.
 * For tests only, NEMOTRON_LOAD_DELAY_MS=N makes the load start N ms late, so that a small model
 * shows the line a multi-GB one would (tests/cli/test_cli_habits.sh).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "speculate.h"

/* Loads shorter than this pass without a word: a small model opens in well under a second. */
#define LOAD_QUIET_S 1

struct load_watch {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done, spoke;
    const char *path;
    double t0;
};

/* The watcher: silent unless the load outlasts LOAD_QUIET_S; then one line, and on a terminal
 * the elapsed seconds kept up to date. */
static void *watch_load(void *arg) {
    struct load_watch *w = arg;
    int tty = isatty(STDERR_FILENO);
    pthread_mutex_lock(&w->lock);
    for (int tick = 0; !w->done; tick++) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += tick == 0 ? LOAD_QUIET_S : 1;
        while (!w->done && pthread_cond_timedwait(&w->done_cv, &w->lock, &until) == 0) {}
        if (w->done) break;
        if (!w->spoke || tty) {
            struct stat sb;
            char size[48] = "";
            if (stat(w->path, &sb) == 0 && S_ISREG(sb.st_mode))
                snprintf(size, sizeof size, " (%.2f GB)", (double)sb.st_size / 1e9);
            fprintf(stderr, "%snemotron: loading %s%s: verifying and mapping the weights, %.0f s", tty ? "\r" : "",
                    w->path, size, cli_now() - w->t0);
            if (!tty) fputc('\n', stderr);
            fflush(stderr);
            w->spoke = 1;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int cli_open(const struct args *a, int n_ctx, nemotron_model **m, nemotron_session **s) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.n_threads = a->threads;
    mp.device = a->device;
    struct load_watch w = {.lock = PTHREAD_MUTEX_INITIALIZER, .done_cv = PTHREAD_COND_INITIALIZER,
                           .path = a->model, .t0 = cli_now()};
    pthread_t watcher;
    int watching = pthread_create(&watcher, NULL, watch_load, &w) == 0;
    const char *delay = getenv("NEMOTRON_LOAD_DELAY_MS");
    long ms = delay ? strtol(delay, NULL, 10) : 0;
    if (ms > 0) nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
    nemotron_status st = nemotron_model_load(a->model, &mp, m);
    if (watching) {
        pthread_mutex_lock(&w.lock);
        w.done = 1;
        pthread_cond_signal(&w.done_cv);
        pthread_mutex_unlock(&w.lock);
        pthread_join(watcher, NULL);
        if (w.spoke) fprintf(stderr, "%snemotron: loaded %s in %.1f s\n", isatty(STDERR_FILENO) ? "\n" : "",
                             a->model, cli_now() - w.t0);
    }
    if (st) return cli_fail("loading the model", nemotron_model_errmsg(*m), st);
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = a->ctx ? a->ctx : n_ctx;
    if (a->pass) sp.pass_max = a->pass;
    if (a->verify_max) sp.verify_max = a->verify_max;
    sp.mtp = cli_spec_mtp(a);
    if (sp.mtp && !nemotron_model_mtp_layers(*m)) {
        /* the session would refuse it too; this says which option asked for it */
        fprintf(stderr, "nemotron: --spec mtp: the model %s has no MTP layers (config.json's num_nextn_predict_layers "
                        "is 0 or absent); use --spec ngram or --draft-model MODEL\n", a->model);
        return 1;
    }
    int trained = nemotron_model_ctx_train(*m);
    if (a->ctx > trained)
        fprintf(stderr, "nemotron: warning: --ctx %d is longer than the %d positions the model was trained on "
                        "(config.json max_position_embeddings); positions past them may give poor text\n",
                a->ctx, trained);
    st = nemotron_session_new(*m, &sp, s);
    if (st == NEMOTRON_ERR_ARG && !a->pass && sp.verify_max > nemotron_session_pass_max(*s)) {
        /* the backend's default pass is shorter than the verify pass asked for (--spec-max 64 on
         * the CPU, whose passes hold 64): without a --pass, the pass grows to it */
        nemotron_session_free(*s);
        sp.pass_max = sp.verify_max;
        st = nemotron_session_new(*m, &sp, s);
    }
    if (st) return cli_fail("creating the session", nemotron_session_errmsg(*s), st);
    return 0;
}
