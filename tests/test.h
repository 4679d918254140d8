/* test.h - the few macros the unit tests share: CHECK, a failure count, and fixture paths.
 *
 * A test program calls CHECK(cond, fmt, ...) as often as it likes, and returns
 * test_summary(name) from main: 0 when every check held and at least one ran (a program whose
 * checks were all skipped, or that returned before its first, proves nothing). Tests run from
 * the repository root (tests/run.sh does that), so fixture paths are relative to it.
 */
#ifndef NT_TEST_H
#define NT_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int test_checks, test_failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        test_checks++;                                                      \
        if (!(cond)) {                                                      \
            test_failures++;                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static inline int test_summary(const char *name) {
    printf("%-28s %d checks, %d failed\n", name, test_checks, test_failures);
    if (test_checks == 0) fprintf(stderr, "FAIL %s: no check ran\n", name);
    return test_failures || test_checks == 0 ? 1 : 0;
}

#define FIXTURES "tests/fixtures"

/* The full tier (NEMOTRON_TEST_FULL=1: CI, scripts/test.sh): the checks that take seconds and
 * repeat, at larger sizes or on more inputs, what the fast tier (make test) already covers.
 * docs/TESTING.md lists what each tier runs. */
static inline int test_full_tier(void) {
    const char *e = getenv("NEMOTRON_TEST_FULL");
    return e && *e && !(e[0] == '0' && !e[1]);
}

/* A whole file into malloc'd memory (NULL when it cannot be read); *size its bytes. */
static inline void *test_read_file(const char *path, size_t *size) {
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = n >= 0 ? malloc(n > 0 ? (size_t)n : 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *size = (size_t)n;
    return buf;
}

/* ||a - ref|| / ||ref|| in double (the fixtures' per-position measure). */
static inline double test_rel_l2(const float *a, const float *ref, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? __builtin_sqrt(d / r) : __builtin_sqrt(d);
}

#endif /* NT_TEST_H */
