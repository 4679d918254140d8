/* cpu_load.h - how much of this process's CPUs other work is using: the signal the thread team
 * (team.c) holds its tries back on (cpu_load.c says how it is measured and where it is not). */
#ifndef NT_CPU_LOAD_H
#define NT_CPU_LOAD_H

#include <stddef.h>

/* One reading: wall clock, this process's CPU time, and the busy time of the CPUs it may run on
 * (seconds each); ok = 0 where the busy time could not be read (no /proc/stat). */
struct nt_cpu_load {
    double wall, own, busy;
    int cpus; /* the CPUs counted in busy */
    int ok;
};

/* Reads the process's state now. */
struct nt_cpu_load nt_cpu_load_read(void);
/* The cores other work kept busy between two readings, on average (busy time not this process's,
 * over the wall time between them); negative when unknown (a reading not ok, no time between). */
double nt_cpu_load_others(const struct nt_cpu_load *before, const struct nt_cpu_load *after);

/* /proc/stat's text (len bytes) -> the busy time in clock ticks of the CPUs for which
 * counted(cpu, arg) is nonzero, and how many there were (*cpus); -1 when no such CPU line parses.
 * Busy: user, nice, system, irq, softirq and steal (a VM's CPU taken by its host counts as taken). */
long long nt_cpu_load_parse(const char *text, size_t len, int (*counted)(int cpu, void *arg), void *arg, int *cpus);

#endif /* NT_CPU_LOAD_H */
