/* test_alloc_guard.c - the debug allocation guard: an allocation inside a pass must abort.
 *
 * In the debug build (NT_DEBUG: the asan target) a child process that allocates between
 * nt_pass_enter and nt_pass_leave must die of SIGABRT, and one that allocates outside a pass must
 * not. In the release build the guard is compiled out and both children exit normally. The
 * fixture tests run whole passes under the same guard, so every pass of the engine is checked.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "test.h"

/* Runs body in a child; returns its wait status. */
static int in_child(int inside_pass) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);   /* the expected abort message */
        if (inside_pass) nt_pass_enter();
        void *p = nt_alloc(64);
        if (inside_pass) nt_pass_leave();
        nt_free(p);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

int main(void) {
    int outside = in_child(0);
    CHECK(WIFEXITED(outside) && WEXITSTATUS(outside) == 0, "allocation outside a pass: status %d", outside);
    int inside = in_child(1);
#ifdef NT_DEBUG
    CHECK(WIFSIGNALED(inside) && WTERMSIG(inside) == SIGABRT,
          "allocation inside a pass did not abort (status %d)", inside);
#else
    CHECK(WIFEXITED(inside) && WEXITSTATUS(inside) == 0, "release build: status %d", inside);
#endif
    return test_summary("alloc_guard");
}
