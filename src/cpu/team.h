/* team.h - how many threads a CPU pass uses: the configured count, or one when other work has
 * taken the cores (team.c says how that is decided). */
#ifndef NT_CPU_TEAM_H
#define NT_CPU_TEAM_H

#include <pthread.h>

#include "cpu/cpu_load.h"

/* Per kind of pass (0: one position, decode; 1: several, prompts) and per arm (0: one thread,
 * 1: the whole team): the cost of a position, smoothed, and when to try the other arm again. */
struct nt_cpu_team_kind {
    double cost[2];           /* seconds per position; valid where have[] */
    int have[2];
    int since;                /* passes since the other arm last ran */
    int every;                /* run the other arm once every this many passes */
};

struct nt_cpu_team {
    pthread_mutex_t lock;     /* sessions on several threads may share one backend */
    int max;                  /* the configured threads */
    int adapt;                /* 0: always max (NEMOTRON_TEAM=fixed) */
    int watch;                /* 1: hold the team's tries while other work holds the cores (cpu_load.c;
                               * NEMOTRON_TEAM=timed: 0, the tries alone) */
    struct nt_cpu_load last;  /* the last reading, and what it showed against the one before */
    int crowded, known;       /* known: crowded is a verdict (not before the first interval) */
    struct nt_cpu_team_kind kind[2];
};

void nt_cpu_team_init(struct nt_cpu_team *t, int max);
void nt_cpu_team_destroy(struct nt_cpu_team *t);
/* A pass of n positions starts / ends on the calling thread. */
void nt_cpu_team_begin(struct nt_cpu_team *t, int n);
void nt_cpu_team_end(struct nt_cpu_team *t, int n);
/* The threads an operation of the calling thread's pass may use (max outside a pass). A pass on
 * the whole team that has outlasted its budget (1.5x what one thread would have taken for all of
 * it) goes on with one thread from the operation that finds so (team.c). */
int nt_cpu_team_threads(const struct nt_cpu_team *t);

/* What every team of this process chose since it started (nemotron bench reports it, so a run
 * under load shows whether the team or one thread ran, not only how fast): passes by kind (0: one
 * position, 1: several) and by the threads they started on (0: one, 1: the whole team), the team
 * passes that outran their budget and ended on one thread, and the readings of the CPUs' load that
 * gave a verdict, with those that found the cores taken. A team of one thread (max 1) counts its
 * passes as one thread's. */
struct nt_cpu_team_tally {
    long long passes[2][2];
    long long cut[2];
    long long readings, crowded;
};
void nt_cpu_team_tally(struct nt_cpu_team_tally *out);

/* The policy alone, for tests (the functions above hold the lock and read the clock around it).
 * choose: the arm of a kind's next pass, and whether that pass is a try of the arm that is not
 * the cheaper (*explore), and the longest the pass may run on the team before it goes on with
 * one thread (*budget, seconds per position; 0: no bound). crowded: other work holds the cores
 * the team would need (cpu_load.c), so a try of the team now would lose: it waits, and comes at
 * the first pass after the cores are free.
 * learn: the pass of that arm cost `cost` seconds per position; cut: it ran past its budget and
 * ended on one thread (a cut try lost). */
int nt_cpu_team_choose(struct nt_cpu_team_kind *k, int crowded, int *explore, double *budget);
void nt_cpu_team_learn(struct nt_cpu_team_kind *k, int arm, int explore, int cut, double cost);

#endif /* NT_CPU_TEAM_H */
