/* common.c - errors, the always-on assertion, the allocation guard, half-float conversions and
 * the host's core count.
 *
 * Owns nothing but a per-thread counter: the passes running on the thread (read by the
 * allocation guard). See common.h for the contracts.
 */
#include "common.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

nemotron_status nt_fail(struct nt_err *err, nemotron_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void nt_err_prefix(struct nt_err *err, const char *fmt, ...) {
    if (!err) return;
    char head[NT_ERR_MAX], old[NT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* head then as much of the old message as fits (truncation is fine for a message) */
    size_t hl = strlen(head), ol = strlen(old);
    if (hl > NT_ERR_MAX - 1) hl = NT_ERR_MAX - 1;
    if (ol > NT_ERR_MAX - 1 - hl) ol = NT_ERR_MAX - 1 - hl;
    memcpy(err->msg, head, hl);
    memcpy(err->msg + hl, old, ol);
    err->msg[hl + ol] = 0;
}

void nt_assert_fail(const char *expr, const char *file, int line) {
    nt_log(NEMOTRON_LOG_ERROR, "internal error: assertion '%s' failed at %s:%d", expr, file, line);
    abort();
}

/* Passes this thread is running. Per thread: another thread may load a model or create a
 * session while a pass runs here. (A pass's OpenMP workers allocate nothing.) */
static _Thread_local int passes_running;

void nt_pass_enter(void) { passes_running++; }
void nt_pass_leave(void) { passes_running--; }

static void check_not_in_pass(size_t bytes) {
#ifdef NT_DEBUG
    if (passes_running > 0) {
        nt_log(NEMOTRON_LOG_ERROR, "internal error: %zu-byte allocation inside a pass", bytes);
        abort();
    }
#else
    (void)bytes;
#endif
}

/* 64 bytes: a cache line, and enough for any SIMD load the kernels make. */
#define NT_ALIGN 64

void *nt_alloc(size_t bytes) {
    check_not_in_pass(bytes);
    void *p = NULL;
    size_t rounded = (bytes + NT_ALIGN - 1) / NT_ALIGN * NT_ALIGN;
    if (rounded < bytes) return NULL;
    if (posix_memalign(&p, NT_ALIGN, rounded ? rounded : NT_ALIGN) != 0) return NULL;
    return p;
}

void *nt_calloc(size_t n, size_t size) {
    uint64_t bytes;
    if (!nt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) return NULL;
    void *p = nt_alloc((size_t)bytes);
    if (p) memset(p, 0, (size_t)bytes);
    return p;
}

void nt_free(void *p) { free(p); }

char *nt_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = nt_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

float nt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023, u;
    if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);            /* inf / nan */
    } else if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);     /* rebias 15 -> 127 */
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t nt_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds past 65504: inf */
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal f16, man * 2^-24; the float's value in units of 2^-24 rounds
         * to nearest even (exact: the scaling is by a power of two) */
        float m = fabsf(f) * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)rintf(m));
    }
    /* normal: drop 13 mantissa bits with round to nearest even; a carry into the exponent is
     * the correct result */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);
    return (uint16_t)(sign | (uint16_t)((r - 0x38000000u) >> 13));
}

uint16_t nt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

nemotron_status nt_read_file(const char *path, size_t max_bytes, const char *what, char **buf,
                             size_t *len, struct nt_err *err) {
    *buf = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO given by mistake must not hang the open; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: %lld bytes, more than %s may have (%zu)", path,
                       (long long)sb.st_size, what, max_bytes);
    }
    size_t size = (size_t)sb.st_size, got = 0;
    char *b = nt_alloc(size + 1);
    if (!b) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
    }
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            nt_free(b);
            close(fd);
            return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot read: %s", path, strerror(e));
        }
        if (r == 0) break; /* the file shrank: what is there is the file */
        got += (size_t)r;
    }
    close(fd);
    b[got] = 0;
    *buf = b;
    *len = got;
    return NEMOTRON_OK;
}

/* Physical cores this process may run on: the distinct (package, core) pairs, in sysfs, of the
 * CPUs in its affinity mask (taskset, cpusets); the mask's CPU count when sysfs is unreadable. */
int nt_physical_cores(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        return online > 0 ? (int)online : 1;
    }
    enum { MAX_IDS = CPU_SETSIZE };
    long ids[MAX_IDS];
    int seen = 0, allowed = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &mask)) continue;
        allowed++;
        char path[128];
        long core = -1, pkg = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        FILE *f = fopen(path, "r");
        if (!f) return CPU_COUNT(&mask);
        if (fscanf(f, "%ld", &core) != 1) core = c;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        long id = pkg * 65536 + core;
        int dup = 0;
        for (int i = 0; i < seen && !dup; i++) dup = ids[i] == id;
        if (!dup) ids[seen++] = id;
    }
    return seen > 0 ? seen : (allowed > 0 ? allowed : 1);
}
