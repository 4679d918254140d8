/* cpu_load.c - the cores other work is using, from the kernel's per-CPU busy times.
 *
 * Why: the thread team (team.c) learns by timing which team size is faster, and must try the
 * larger team now and then to see a core come back. While another process holds a core, each such
 * try loses (a 2-thread pass cut at 1.5x one thread's cost: docs/PERF.md, issue 17 item 3): the
 * dips of a run under load. The kernel already knows whether the cores are taken: /proc/stat's
 * busy time of the CPUs this process may run on (its affinity mask), less this process's own CPU
 * time, over the wall time between two readings, is the cores other work kept busy. team.c does
 * not try the larger team while that exceeds the cores the team leaves spare.
 *
 * Where this does not see the load (no /proc/stat, a CPU quota rather than a CPU set, another
 * container's work on the same cores without steal time), the reading is not ok or shows less
 * load, and the team falls back to its tries, which bound the cost of being wrong. */
#include "cpu/cpu_load.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long long nt_cpu_load_parse(const char *text, size_t len, int (*counted)(int cpu, void *arg), void *arg, int *cpus) {
    long long busy = 0;
    int found = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        /* "cpuN user nice system idle iowait irq softirq steal ..." (not the "cpu " total) */
        if (eol - p > 4 && !memcmp(p, "cpu", 3) && p[3] >= '0' && p[3] <= '9') {
            char line[512];
            size_t n = (size_t)(eol - p) < sizeof line - 1 ? (size_t)(eol - p) : sizeof line - 1;
            memcpy(line, p, n);
            line[n] = 0;
            char *q = line + 3, *e;
            long cpu = strtol(q, &e, 10);
            long long v[8];
            int got = 0;
            for (q = e; got < 8; got++) {
                v[got] = strtoll(q, &e, 10);
                if (e == q) break;
                q = e;
            }
            if (got >= 4 && cpu >= 0 && counted((int)cpu, arg)) {
                /* user nice system [idle] [iowait] irq softirq steal: the fields present */
                long long b = v[0] + v[1] + v[2];
                for (int i = 5; i < got && i < 8; i++) b += v[i];
                busy += b;
                found++;
            }
        }
        p = eol + 1;
    }
    *cpus = found;
    return found ? busy : -1;
}

static int in_mask(int cpu, void *arg) { return cpu < CPU_SETSIZE && CPU_ISSET(cpu, (cpu_set_t *)arg); }

struct nt_cpu_load nt_cpu_load_read(void) {
    struct nt_cpu_load r = {seconds(CLOCK_MONOTONIC), seconds(CLOCK_PROCESS_CPUTIME_ID), 0.0, 0, 0};
    cpu_set_t mask;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0 || sched_getaffinity(0, sizeof mask, &mask) != 0) return r;
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return r;
    char buf[1 << 16]; /* the CPU lines come first: ~1,000 CPUs' fit; the interrupt counts after them
                        * (long on large machines) are not needed */
    size_t len = 0;
    ssize_t got;
    while (len < sizeof buf && (got = read(fd, buf + len, sizeof buf - len)) > 0) len += (size_t)got;
    close(fd);
    int cpus = 0;
    long long ticks = nt_cpu_load_parse(buf, len, in_mask, &mask, &cpus);
    if (ticks < 0) return r;
    r.busy = (double)ticks / (double)hz;
    r.cpus = cpus;
    r.ok = 1;
    return r;
}

double nt_cpu_load_others(const struct nt_cpu_load *before, const struct nt_cpu_load *after) {
    double wall = after->wall - before->wall;
    if (!before->ok || !after->ok || before->cpus != after->cpus || wall <= 0) return -1.0;
    double others = ((after->busy - before->busy) - (after->own - before->own)) / wall;
    return others > 0 ? others : 0.0;
}
