/* test_log.c - the library's log (nemotron_set_log): where its messages go.
 *
 * The default writes "nemotron: MSG" lines to stderr; a function set by the program gets each
 * message (and stderr nothing); NULL restores the default. The warning comes from a real path
 * (a model loaded with NEMOTRON_CPU set to a value the CPU backend does not know), the error
 * from an assertion failing in a child process, which must reach the function and then abort.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "nemotron.h"
#include "test.h"

#define DEMO "models/nemotron-h-kjv"

static struct {
    int calls;
    nemotron_log_level level;
    char msg[1024];
    void *user;
} got;

static void capture(nemotron_log_level level, const char *msg, void *user) {
    got.calls++;
    got.level = level;
    snprintf(got.msg, sizeof got.msg, "%s", msg);
    got.user = user;
}

/* The child's log function: level and message down a pipe (the child then aborts). */
static int child_fd = -1;
static void to_pipe(nemotron_log_level level, const char *msg, void *user) {
    (void)user;
    char line[1024];
    int n = snprintf(line, sizeof line, "%d %s", (int)level, msg);
    if (write(child_fd, line, (size_t)n) != n) _exit(4);
}

/* Loads the demo model with stderr sent to a temporary file; returns what stderr received. */
static void load_capturing_stderr(char *out, size_t cap) {
    char path[] = "/tmp/nt_test_log_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    nemotron_model *m = NULL;
    nemotron_model_params mp = nemotron_model_default_params();
    mp.n_threads = 1;
    nemotron_status st = nemotron_model_load(DEMO, &mp, &m);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    CHECK(st == NEMOTRON_OK, "loading %s: %s", DEMO, nemotron_model_errmsg(m));
    nemotron_model_free(m);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
}

int main(void) {
    char err[4096];
    setenv("NEMOTRON_CPU", "avx9000", 1);

    /* the default: stderr, one line */
    load_capturing_stderr(err, sizeof err);
    static const char warning[] = "NEMOTRON_CPU=avx9000: no such kernel variant; using ";
    size_t wl = strlen(warning);
    CHECK(!strncmp(err, "nemotron: ", 10) && !strncmp(err + 10, warning, wl) && strchr(err, '\n') == err + strlen(err) - 1,
          "default log on stderr: [%s]", err);

    /* a function: it gets the message, stderr nothing */
    int token;
    nemotron_set_log(capture, &token);
    load_capturing_stderr(err, sizeof err);
    CHECK(err[0] == 0, "stderr with a log function set: [%s]", err);
    CHECK(got.calls == 1 && got.level == NEMOTRON_LOG_WARN && got.user == &token &&
              !strncmp(got.msg, warning, wl) && !strchr(got.msg, '\n'),
          "log function: %d calls, level %d, [%s]", got.calls, (int)got.level, got.msg);

    /* NULL: back to stderr */
    nemotron_set_log(NULL, NULL);
    load_capturing_stderr(err, sizeof err);
    CHECK(strstr(err, "nemotron: NEMOTRON_CPU=avx9000") == err && got.calls == 1,
          "after set_log(NULL): [%s], %d calls", err, got.calls);

    /* the value the backend knows, and none at all, say nothing */
    setenv("NEMOTRON_CPU", "scalar", 1);
    load_capturing_stderr(err, sizeof err);
    CHECK(err[0] == 0, "NEMOTRON_CPU=scalar: [%s]", err);
    unsetenv("NEMOTRON_CPU");
    load_capturing_stderr(err, sizeof err);
    CHECK(err[0] == 0, "no NEMOTRON_CPU: [%s]", err);

    /* an internal error reaches the function, then the process aborts */
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        child_fd = pipefd[1];
        nemotron_set_log(to_pipe, NULL);
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        NT_ASSERT(child_fd < 0); /* fails */
        _exit(0);
    }
    close(pipefd[1]);
    char line[1024];
    ssize_t n = read(pipefd[0], line, sizeof line - 1);
    line[n > 0 ? n : 0] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "failed assertion: status %d", status);
    static const char want[] = "0 internal error: assertion 'child_fd < 0' failed at tests/unit/test_log.c:";
    CHECK(!strncmp(line, want, sizeof want - 1),
          "failed assertion's log line: [%s]", line);
    return test_summary("log");
}
