/* team.c - graceful under load: the CPU backend's thread team shrinks to one thread while that
 * is faster, and grows back when the cores are free again.
 *
 * Why: every operation of a pass is a fork and a join of the team (OpenMP). When another process
 * takes a core, a team thread waits for its share of that core at every join, a scheduler time
 * slice at a time, and a 2-thread decode that needs hundreds of joins per position ran 2 - 250x
 * slower than one thread would (issue 17: 1,617 -> 710 tokens/s on the demo model with one
 * competing busy loop; 6.4 tokens/s under heavier load). No thread count is right for every
 * machine state, so the backend measures: each pass is timed (per position), and the team size
 * of each kind of pass (decode, prompt) is the one whose recent passes were cheaper.
 *
 * The policy (nt_cpu_team_choose / nt_cpu_team_learn):
 *   - the first pass of a kind runs one thread: it cannot collapse, and its cost bounds the next;
 *   - the second runs the whole team, and so does every pass on the team later, under a budget:
 *     when a team pass has run 1.5x longer than one thread would have taken for all of it (the one
 *     thread's recent cost), its remaining operations run on one thread ("cut"). So a try of the
 *     team while a core is taken costs at most about 2.5 one-thread passes, not the 2 - 100 of a
 *     collapsed team (and loses), and a team that collapses in the middle of a pass stops
 *     collapsing there (that pass is one more sample of the team's cost);
 *   - after that the cheaper arm runs, and the other is tried again every `every` passes, so
 *     rarely that the tries cost ~5 % of the time: a try costs c_loser - c_best more than a pass
 *     of the best, so it comes every 20 (c_loser / c_best - 1) passes or more (4 to 4096); a lost
 *     try at least doubles the interval, a won try takes over and spaces the tries of the arm it
 *     beat by the same rule;
 *   - no try of the team while other work holds the cores it would need (cpu_load.c: the busy
 *     time of this process's CPUs not its own, read at most every LOAD_PERIOD seconds, above the
 *     cores the team leaves spare by more than half a core): each would lose, and their dips were
 *     what remained of a run under load. The try waits for the first pass after the cores are
 *     free, instead of the interval the losses had grown to.
 * Results do not depend on the team size (every split of the products and operations, and a
 * switch between operations, gives the same bits), so only the time changes.
 */
#include "team.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVERY_FIRST 4
#define EVERY_MAX 4096
/* A team pass is cut at this many times one thread's cost for the pass, not at 1: a collapsed
 * team runs 2 - 100x one thread, while a quiet machine's host still stalls a pass now and then
 * for a few milliseconds (measured: 2.6 - 8 ms gaps in empty 2-thread regions, nothing else
 * running), and a cut at 1x turned such stalls into a flip to one thread (mid, tg64 2 threads:
 * runs of 106 - 143 tokens/s between runs of 180, against 166 - 201 without cuts). */
#define BUDGET_SLACK 1.5
/* Seconds between two readings of the CPUs' load: /proc/stat counts in ticks of 10 ms, so a
 * shorter interval reads too coarsely; a reading costs ~20 us. The first verdict comes sooner, from
 * a coarser interval: until it, the team's first try waits (a try in the first passes of a loaded
 * machine costs up to 2.5 one-thread passes: the slow first repetitions of bench under load). */
#define LOAD_PERIOD 0.2
#define LOAD_FIRST 0.05

/* The calling thread's pass: its team (0 outside a pass), its start, arm, whether it is a try,
 * the time after which its operations run on one thread (0: never), and whether they did. */
static _Thread_local int tl_team;
static _Thread_local int tl_arm, tl_explore, tl_cut;
static _Thread_local double tl_t0, tl_deadline;

/* The process's tally (team.h): counters any thread's pass may add to, read together by the report
 * (a read while passes run may mix counts of two moments; each count is exact). */
static _Atomic long long tally_passes[2][2], tally_cut[2], tally_readings, tally_crowded;

void nt_cpu_team_tally(struct nt_cpu_team_tally *out) {
    for (int k = 0; k < 2; k++) {
        for (int a = 0; a < 2; a++) out->passes[k][a] = atomic_load(&tally_passes[k][a]);
        out->cut[k] = atomic_load(&tally_cut[k]);
    }
    out->readings = atomic_load(&tally_readings);
    out->crowded = atomic_load(&tally_crowded);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Passes between tries of an arm that costs `loser` against the best's `best` (the 5 % rule). */
static int retry_gap(double loser, double best) {
    double g = best > 0 ? 20.0 * (loser / best - 1.0) : EVERY_MAX;
    return g < EVERY_FIRST ? EVERY_FIRST : g > EVERY_MAX ? EVERY_MAX : (int)g;
}

int nt_cpu_team_choose(struct nt_cpu_team_kind *k, int crowded, int *explore, double *budget) {
    int arm;
    *explore = 0;
    if (!k->have[0]) {
        arm = 0;                      /* the first pass of a kind */
    } else if (!k->have[1]) {
        arm = crowded ? 0 : 1;        /* the second: the team's first try, once the cores are free */
        *explore = !crowded;
    } else {
        int best = k->cost[0] < k->cost[1] ? 0 : 1;
        arm = best;
        if (++k->since >= k->every) {
            if (crowded && best == 0) {
                k->since = k->every;  /* the team's try waits for free cores */
            } else {
                arm = !best;
                *explore = 1;
                k->since = 0;
            }
        }
    }
    *budget = arm == 1 ? BUDGET_SLACK * k->cost[0] : 0.0;
    return arm;
}

void nt_cpu_team_learn(struct nt_cpu_team_kind *k, int arm, int explore, int cut, double cost) {
    if (explore) {
        /* a lone sample of the arm that was not the cheaper: what it costs now (a cut try lost) */
        double other = k->cost[!arm];
        if (!cut && (!k->have[!arm] || cost < other)) {
            k->every = k->have[!arm] ? retry_gap(other, cost) : EVERY_FIRST; /* it takes over */
        } else {
            int every = k->every * 2, far = retry_gap(cost, other);
            k->every = far > every ? far : every < EVERY_MAX ? every : EVERY_MAX; /* it lost */
        }
        k->since = 0;
        k->cost[arm] = cost;
    } else {
        /* the cheaper arm's pass, cut or not, is one more sample: a stall of the host's in one
         * pass does not flip the arm, a team that keeps outrunning one thread does in a pass or two */
        k->cost[arm] = k->have[arm] ? 0.5 * k->cost[arm] + 0.5 * cost : cost;
    }
    k->have[arm] = 1;
}

void nt_cpu_team_init(struct nt_cpu_team *t, int max) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->max = max;
    const char *e = getenv("NEMOTRON_TEAM");
    t->adapt = max > 1 && !(e && !strcmp(e, "fixed"));
    t->watch = t->adapt && !(e && !strcmp(e, "timed"));
    if (t->watch) t->last = nt_cpu_load_read();
    for (int k = 0; k < 2; k++) t->kind[k].every = EVERY_FIRST;
}

/* Whether other work holds the cores the team would need, from a reading at most LOAD_PERIOD old
 * (the lock held). The team needs max - 1 cores besides the one the pass runs on now. Before the
 * first verdict: yes where the readings work (wait for it), no where they do not (the tries
 * decide). */
static int crowded(struct nt_cpu_team *t, double at) {
    if (!t->watch) return 0;
    if (at - t->last.wall < (t->known ? LOAD_PERIOD : LOAD_FIRST)) return t->known ? t->crowded : t->last.ok;
    struct nt_cpu_load now_load = nt_cpu_load_read();
    double others = nt_cpu_load_others(&t->last, &now_load);
    t->last = now_load;
    if (others >= 0) {
        int spare = now_load.cpus - t->max; /* cores the whole team leaves to other work */
        t->crowded = others > (spare > 0 ? spare : 0) + 0.5;
        t->known = 1;
        atomic_fetch_add(&tally_readings, 1);
        if (t->crowded) atomic_fetch_add(&tally_crowded, 1);
    } else {
        t->crowded = 0; /* unknown: the tries decide */
        t->known = 0;
        t->watch = now_load.ok; /* readings that do not work are not tried again */
    }
    return t->crowded;
}

void nt_cpu_team_destroy(struct nt_cpu_team *t) { pthread_mutex_destroy(&t->lock); }

void nt_cpu_team_begin(struct nt_cpu_team *t, int n) {
    tl_cut = 0;
    tl_deadline = 0;
    if (!t->adapt) {
        tl_team = t->max;
        return;
    }
    double budget, at = now();
    pthread_mutex_lock(&t->lock);
    tl_arm = nt_cpu_team_choose(&t->kind[n > 1], crowded(t, at), &tl_explore, &budget);
    pthread_mutex_unlock(&t->lock);
    tl_team = tl_arm ? t->max : 1;
    tl_t0 = now(); /* after the load reading, which the pass's cost should not hold */
    if (budget > 0) tl_deadline = tl_t0 + budget * (double)(n > 0 ? n : 1);
}

void nt_cpu_team_end(struct nt_cpu_team *t, int n) {
    int on_team = t->adapt ? tl_arm : t->max > 1;
    atomic_fetch_add(&tally_passes[n > 1][on_team], 1);
    if (tl_cut) atomic_fetch_add(&tally_cut[n > 1], 1);
    tl_team = 0;
    if (!t->adapt) return;
    double c = (now() - tl_t0) / (double)(n > 0 ? n : 1);
    pthread_mutex_lock(&t->lock);
    nt_cpu_team_learn(&t->kind[n > 1], tl_arm, tl_explore, tl_cut, c);
    pthread_mutex_unlock(&t->lock);
}

int nt_cpu_team_threads(const struct nt_cpu_team *t) {
    if (tl_team > 1 && tl_deadline > 0 && now() > tl_deadline) {
        tl_team = 1; /* this pass has outrun one thread: its other operations run on one */
        tl_cut = 1;
    }
    return tl_team > 0 ? tl_team : t->max;
}
