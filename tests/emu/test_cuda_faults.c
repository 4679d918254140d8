/* test_cuda_faults.c - a GPU fault is an error, not an abort; a model a CUDA kernel cannot run is
 * refused when it is loaded. Runs the library with the CUDA backend on the host emulation
 * (tests/emu/cuda_emu.h), which can make a kernel launch fail as an illegal address does on a
 * GPU (NT_EMU_FAIL=launch:N: that launch does not run and every later runtime call fails).
 *
 * Checks that
 *   - a model whose head_dim or ssm_state_size the CUDA kernels do not hold is refused at load
 *     with NEMOTRON_ERR_UNSUPPORTED naming the limit (and loads on the CPU);
 *   - for faults injected at several launches of a session's passes (the first pass, a later
 *     prefill pass, a decode pass, a captured graph's replay): the eval that meets it returns
 *     NEMOTRON_ERR_DEVICE with a message naming the runtime's error and an operation; the session
 *     is refused from then on (eval, and after a reset); a new session on the model is refused;
 *     freeing both and the model works; and the process goes on to load and run a CPU model.
 * Each injection runs in a child process (the emulated device stays failed for its process, as
 * a GPU's context does); a child that aborts or crashes fails the test.
 */
#include "nemotron.h"
#include "support/synth.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEMO "models/nemotron-h-kjv" /* the bundled demo model */

/* A synthetic model of shape "tiny" with head_dim or ssm_state_size changed (0: as it is); its
 * directory, which the caller removes and frees. */
static char *edited_model(int head_dim, int ssm_state_size) {
    struct synth_shape shape;
    if (synth_shape_get("tiny", &shape)) return NULL;
    if (head_dim) shape.head_dim = head_dim;
    if (ssm_state_size) shape.ssm_state_size = ssm_state_size;
    char *dir = synth_mkdtemp("nt-cuda-limits");
    if (!dir) return NULL;
    struct synth_options opt = synth_default_options();
    struct synth_result r;
    if (synth_write(dir, &shape, &opt, &r)) {
        fprintf(stderr, "synth: %s\n", r.err);
        synth_rmtree(dir);
        free(dir);
        return NULL;
    }
    return dir;
}

static void load_refused(const char *what, const char *dir, const char *limit) {
    nemotron_model_params p = nemotron_model_default_params();
    p.device = "cuda";
    nemotron_model *m = NULL;
    nemotron_status st = nemotron_model_load(dir, &p, &m);
    const char *msg = nemotron_model_errmsg(m);
    CHECK(st == NEMOTRON_ERR_UNSUPPORTED, "%s on cuda: status %s (%s)", what, nemotron_status_str(st), msg);
    CHECK(strstr(msg, limit) != NULL, "%s on cuda: the message names '%s': %s", what, limit, msg);
    nemotron_model_free(m);
    p.device = "cpu";
    st = nemotron_model_load(dir, &p, &m);
    CHECK(st == NEMOTRON_OK, "%s on the cpu loads: %s", what, nemotron_model_errmsg(m));
    nemotron_model_free(m);
}

static void test_load_limits(void) {
    char *dir = edited_model(160, 0);
    CHECK(dir != NULL, "synthetic model with head_dim 160 written");
    if (dir) {
        load_refused("head_dim 160", dir, "head_dim 160");
        synth_rmtree(dir);
        free(dir);
    }
    dir = edited_model(0, 12);
    CHECK(dir != NULL, "synthetic model with ssm_state_size 12 written");
    if (dir) {
        load_refused("ssm_state_size 12", dir, "ssm_state_size 12");
        synth_rmtree(dir);
        free(dir);
    }
}

/* ---- one injected fault (the child process) -------------------------------------------------- */

static int32_t prompt[40];

/* The scenario the fault lands in: a 40-token prompt in passes of 16 (16, 16, 8), then decode
 * steps (the second decode pass of a kind is captured, the third replays the graph); then what
 * must hold after the fault. Exits with the child's test summary. */
static void child_scenario(void) {
    test_checks = test_failures = 0; /* the child's own count */
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = "cuda";
    nemotron_model *m = NULL;
    nemotron_status st = nemotron_model_load(DEMO, &mp, &m);
    if (st) { /* a fault injected into the upload path */
        CHECK(st == NEMOTRON_ERR_DEVICE, "load: status %s: %s", nemotron_status_str(st), nemotron_model_errmsg(m));
        nemotron_model_free(m);
        exit(test_summary("test_cuda_faults (child)"));
    }
    nemotron_session_params sp = nemotron_session_default_params();
    sp.pass_max = 16;
    nemotron_session *s = NULL;
    st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK, "session_new: %s", nemotron_session_errmsg(s));
    for (int i = 0; i < 40; i++) prompt[i] = 10 + (i * 37) % 200;
    st = nemotron_session_eval(s, prompt, 40, NULL);
    for (int step = 0; step < 6 && st == NEMOTRON_OK; step++) {
        int32_t t = nemotron_session_argmax(s);
        st = nemotron_session_eval(s, &t, 1, NULL);
    }
    const char *msg = nemotron_session_errmsg(s);
    CHECK(st == NEMOTRON_ERR_DEVICE, "the eval that met the fault: status %s: %s", nemotron_status_str(st), msg);
    CHECK(strstr(msg, "illegal memory access") != NULL, "the message has the runtime's words: %s", msg);
    CHECK(strstr(msg, "(in ") != NULL || strstr(msg, "cuda: ") != NULL, "the message names where: %s", msg);
    CHECK(nemotron_session_logits(s) == NULL && nemotron_session_argmax(s) == -1,
          "a failed session offers no logits");
    int32_t t = 5;
    st = nemotron_session_eval(s, &t, 1, NULL);
    CHECK(st == NEMOTRON_ERR_DEVICE, "refused after the fault: status %s", nemotron_status_str(st));
    CHECK(strstr(nemotron_session_errmsg(s), "free it") != NULL, "the refusal says to free it: %s",
          nemotron_session_errmsg(s));
    nemotron_session_reset(s);
    st = nemotron_session_eval(s, &t, 1, NULL);
    CHECK(st == NEMOTRON_ERR_DEVICE, "refused after a reset too: status %s", nemotron_status_str(st));
    nemotron_session *s2 = NULL;
    st = nemotron_session_new(m, &sp, &s2);
    CHECK(st == NEMOTRON_ERR_DEVICE, "a new session on the failed device: status %s: %s", nemotron_status_str(st),
          nemotron_session_errmsg(s2));
    nemotron_session_free(s2);
    nemotron_session_free(s);
    nemotron_model_free(m);
    /* the process goes on: a CPU model runs */
    mp.device = "cpu";
    st = nemotron_model_load(DEMO, &mp, &m);
    CHECK(st == NEMOTRON_OK, "the cpu model loads after the fault: %s", nemotron_model_errmsg(m));
    if (st == NEMOTRON_OK) {
        st = nemotron_session_new(m, NULL, &s);
        if (st == NEMOTRON_OK) st = nemotron_session_eval(s, prompt, 8, NULL);
        CHECK(st == NEMOTRON_OK, "and evaluates: %s", nemotron_session_errmsg(s));
        nemotron_session_free(s);
    }
    nemotron_model_free(m);
    exit(test_summary("test_cuda_faults (child)"));
}

/* Runs the scenario in a child with the fault at launch `at`; the child must exit 0 normally. */
static void inject(int at) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char spec[64];
        snprintf(spec, sizeof spec, "launch:%d", at);
        setenv("NT_EMU_FAIL", spec, 1);
        child_scenario();
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork for launch %d", at);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "fault at launch %d: the child %s %d (its checks are above)", at,
          WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--child")) child_scenario(); /* by hand, with NT_EMU_FAIL set */
    test_load_limits();
    /* the demo model's pass is ~70 launches: the first pass, a later prefill pass, the first
     * decode pass, and the decode passes that are captured and replayed */
    static const int at[] = {1, 5, 90, 160, 230, 300, 400};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) inject(at[i]);
    return test_summary("test_cuda_faults");
}
