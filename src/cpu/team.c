/* team.c - graceful under load: the CPU backend's thread team shrinks to one thread while that
 * is faster, and grows back when the cores are free again.
 *
 * Why: every operation of a pass is a fork and a join of the team (OpenMP). When another process
 * takes a core, a team thread waits for its share of that core at every join, a scheduler time
 * slice at a time, and a 2-thread decode that needs hundreds of joins per position ran 2 - 250x
 * slower than one thread would (issue 17: 1,617 -> 710 tokens/s on the demo model with one
 * competing busy loop; 6.4 tokens/s under heavier load). No thread count is right for every
 * machine state, so the backend measures: each pass is timed (per position), and the team size
 * of each kind of pass (decode, prompt) is the one whose recent passes were cheaper. The other
 * size is tried again now and then, every `every` passes: 4 at first, at least doubled each
 * time it loses, and more when it loses by much: a try costs a pass at the loser's rate (a
 * collapsed team: 2 - 100x a pass of one thread), so tries come rarely enough that they cost
 * about 5 % of the time (up to 4096 passes apart); a try that wins takes over, and `every`
 * starts again at 4. The first pass of a kind runs the whole team, the second one thread. Results do not depend on the team size (every split of the
 * products and operations gives the same bits), so only the time changes.
 */
#include "team.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVERY_FIRST 4
#define EVERY_MAX 4096

/* The calling thread's pass: its team (0 outside a pass), its start and arm. */
static _Thread_local int tl_team;
static _Thread_local int tl_arm, tl_explore;
static _Thread_local double tl_t0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nt_cpu_team_init(struct nt_cpu_team *t, int max) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->max = max;
    const char *e = getenv("NEMOTRON_TEAM");
    t->adapt = max > 1 && !(e && !strcmp(e, "fixed"));
    for (int k = 0; k < 2; k++) t->kind[k].every = EVERY_FIRST;
}

void nt_cpu_team_destroy(struct nt_cpu_team *t) { pthread_mutex_destroy(&t->lock); }

void nt_cpu_team_begin(struct nt_cpu_team *t, int n) {
    if (!t->adapt) {
        tl_team = t->max;
        return;
    }
    pthread_mutex_lock(&t->lock);
    struct nt_cpu_team_kind *k = &t->kind[n > 1];
    /* the whole team until both arms have a cost; then the cheaper, and the other now and then */
    int best = !k->have[1] ? 1 : !k->have[0] ? 1 : k->cost[0] < k->cost[1] ? 0 : 1;
    int arm = best, explore = 0;
    if (k->have[1] && !k->have[0]) { /* the second pass of a kind: one thread, to have both */
        arm = 0;
        explore = 1;
    } else if (k->have[1] && ++k->since >= k->every) {
        arm = !best;
        explore = 1;
        k->since = 0;
    }
    pthread_mutex_unlock(&t->lock);
    tl_arm = arm;
    tl_explore = explore;
    tl_team = arm ? t->max : 1;
    tl_t0 = now();
}

void nt_cpu_team_end(struct nt_cpu_team *t, int n) {
    tl_team = 0;
    if (!t->adapt) return;
    double c = (now() - tl_t0) / (double)(n > 0 ? n : 1);
    pthread_mutex_lock(&t->lock);
    struct nt_cpu_team_kind *k = &t->kind[n > 1];
    int arm = tl_arm;
    if (tl_explore) {
        /* a lone sample of the other arm after a while: what it costs now */
        double other = k->cost[!arm];
        if (!k->have[arm] || c < other) {
            k->every = EVERY_FIRST; /* it wins: it takes over */
        } else {
            /* it loses: try it less often, at least twice as rarely, and so rarely that the tries
             * cost under ~5 % of the time (a try costs c - other more than a pass of the best) */
            double far = 20.0 * (c / other - 1.0);
            int every = k->every * 2;
            if (far > every) every = far < EVERY_MAX ? (int)far : EVERY_MAX;
            k->every = every < EVERY_MAX ? every : EVERY_MAX;
        }
        k->cost[arm] = c;
    } else {
        k->cost[arm] = k->have[arm] ? 0.5 * k->cost[arm] + 0.5 * c : c;
    }
    k->have[arm] = 1;
    pthread_mutex_unlock(&t->lock);
}

int nt_cpu_team_threads(const struct nt_cpu_team *t) { return tl_team > 0 ? tl_team : t->max; }
