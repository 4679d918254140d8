/* test_cpu_load.c - the CPUs' load reading (src/cpu/cpu_load.c): /proc/stat's per-CPU lines
 * parsed for the CPUs a process may run on, the cores other work kept busy between two readings,
 * and a reading of this machine. */
#include "cpu/cpu_load.h"

#include <string.h>

#include "../test.h"

static int even_cpus(int cpu, void *arg) {
    (void)arg;
    return cpu % 2 == 0;
}
static int all_cpus(int cpu, void *arg) {
    (void)arg;
    return cpu >= 0;
}

static void test_parse(void) {
    /* fields: user nice system idle iowait irq softirq steal guest guest_nice */
    const char *stat = "cpu  400 0 200 9000 10 1 2 3 0 0\n"
                       "cpu0 100 1 50 2000 5 1 1 2 7 0\n"
                       "cpu1 100 0 50 2500 5 0 1 1 0 0\n"
                       "cpu2 200 0 100 4500 0 0 0 0 0 0\n"
                       "cpu3 7 8 9\n" /* too short: not a CPU line */
                       "intr 123456 1 2 3\n"
                       "ctxt 999\n";
    int cpus = 0;
    long long busy = nt_cpu_load_parse(stat, strlen(stat), even_cpus, NULL, &cpus);
    /* cpu0: 100 + 1 + 50 + 1 + 1 + 2 = 155 (idle and iowait out, guest inside user); cpu2: 300 */
    CHECK(busy == 455 && cpus == 2, "even CPUs: busy %lld over %d CPUs (want 455 over 2)", busy, cpus);
    busy = nt_cpu_load_parse(stat, strlen(stat), all_cpus, NULL, &cpus);
    CHECK(busy == 455 + 152 && cpus == 3, "all CPUs: busy %lld over %d CPUs (want 607 over 3)", busy, cpus);
    /* a text cut inside the first line, and one with no CPU line */
    busy = nt_cpu_load_parse(stat, 20, all_cpus, NULL, &cpus);
    CHECK(busy == -1 && cpus == 0, "the total line only: busy %lld, %d CPUs (want -1, 0)", busy, cpus);
    busy = nt_cpu_load_parse("", 0, all_cpus, NULL, &cpus);
    CHECK(busy == -1 && cpus == 0, "empty text: busy %lld, %d CPUs", busy, cpus);
    const char *older = "cpu0 1 2 3 4\n"; /* a kernel with four fields */
    busy = nt_cpu_load_parse(older, strlen(older), all_cpus, NULL, &cpus);
    CHECK(busy == 6 && cpus == 1, "four fields: busy %lld over %d CPUs (want 6 over 1)", busy, cpus);
}

static void test_others(void) {
    struct nt_cpu_load a = {10.0, 1.0, 100.0, 2, 1}, b = {12.0, 3.0, 104.0, 2, 1};
    double o = nt_cpu_load_others(&a, &b); /* busy +4 s, own +2 s over 2 s: one core */
    CHECK(o == 1.0, "others: %g cores (want 1)", o);
    struct nt_cpu_load c = {12.0, 4.5, 103.0, 2, 1}; /* own +3.5 s above busy +3 s: ticks' rounding */
    o = nt_cpu_load_others(&a, &c);
    CHECK(o == 0.0, "own time above the busy time: %g cores (want 0)", o);
    struct nt_cpu_load bad = b;
    bad.ok = 0;
    CHECK(nt_cpu_load_others(&a, &bad) < 0, "a reading not ok: unknown");
    bad = b;
    bad.cpus = 3;
    CHECK(nt_cpu_load_others(&a, &bad) < 0, "the CPU set changed: unknown");
    CHECK(nt_cpu_load_others(&a, &a) < 0, "no time between: unknown");
}

/* This machine: a reading works where /proc/stat exists, and two of them a moment apart show a
 * load within the CPUs counted. */
static void test_machine(void) {
    struct nt_cpu_load a = nt_cpu_load_read();
    if (!a.ok) {
        printf("test_cpu_load: no /proc/stat here: the machine's reading skipped\n");
        return;
    }
    CHECK(a.cpus >= 1 && a.busy > 0, "this machine: %d CPUs, %g s busy", a.cpus, a.busy);
    volatile double x = 0;
    struct nt_cpu_load b;
    do { /* spin at least 0.1 s: ticks of 10 ms */
        for (int i = 0; i < 100000; i++) x += i;
        b = nt_cpu_load_read();
    } while (b.wall - a.wall < 0.1);
    double o = nt_cpu_load_others(&a, &b);
    CHECK(o >= 0 && o <= a.cpus + 0.2, "this machine: others %g cores of %d", o, a.cpus);
}

int main(void) {
    test_parse();
    test_others();
    test_machine();
    return test_summary("cpu_load");
}
