/* replay.c - runs a libFuzzer target's entry point over a committed corpus, without libFuzzer:
 * the fuzzers' seeds and every input they once crashed on are replayed by `make test` (and
 * under ASan by `make asan`) with the targets' own contract checks, which abort on a finding.
 *
 * Built as build/bin/test_fuzz_NAME from tests/fuzz/fuzz_NAME.c; it replays every file of
 * tests/fuzz/corpus/NAME/ (run from the repository root, as tests/run.sh does), or the files and
 * directories given as arguments. Fails when there was no input to replay: a replay of nothing
 * proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole file, in a buffer of exactly its size (so ASan sees a read past the end); NULL with
 * the reason printed when it cannot be read. */
static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t n = 0;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size >= 0) {
        buf = malloc((size_t)sb.st_size ? (size_t)sb.st_size : 1);
        if (buf) n = fread(buf, 1, (size_t)sb.st_size, f);
        if (buf && n != (size_t)sb.st_size) {
            fprintf(stderr, "replay: %s: short read\n", path);
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    *size = n;
    return buf;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays one file, or every regular file of a directory in name order; returns the count, or
 * -1 when something could not be read. */
static long replay(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        size_t size;
        uint8_t *data = read_all(path, &size);
        if (!data) return -1;
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        return 1;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) break;
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names); /* names is NULL for an empty directory */
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        long c = replay(names[i]);
        if (c < 0) count = -1;
        else if (count >= 0) count += c;
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    const char *name = strncmp(base, "test_fuzz_", 10) == 0 ? base + 10 : base;
    char dflt[512];
    snprintf(dflt, sizeof dflt, "tests/fuzz/corpus/%s", name);
    long total = 0;
    int bad = 0;
    for (int i = argc > 1 ? 1 : 0; i < (argc > 1 ? argc : 1); i++) {
        long c = replay(argc > 1 ? argv[i] : dflt);
        if (c < 0) bad = 1;
        else total += c;
    }
    printf("%-28s %ld inputs replayed%s\n", base, total, bad ? ", some unreadable" : "");
    return bad || total == 0;
}
