/* test_team.c - the CPU thread team's policy (src/cpu/team.c), on simulated machines: the pass
 * costs are made up here from the arm, the budget and the machine's state, so every run sees the
 * same sequence and the checks are exact.
 *
 * A machine state is what one pass costs per position on one thread (c1) and on the whole team
 * (cT). A team pass that runs past its budget B (1.5x one thread's cost) is cut: it did B / cT of
 * its work on the team and does the rest on one thread, so it costs B + (1 - B / cT) c1 (the
 * backend switches between operations; here the work is continuous, which is what the budget
 * bounds).
 * Checks:
 *   - the first pass of a kind runs one thread and the second the team, with 1.5x one thread's
 *     cost as its budget;
 *   - quiet (team 1.6x faster): after those two, the team runs >= 95 % of the passes, and the
 *     whole run costs within 5 % of always-team; the tries of one thread are spaced by the 5 %
 *     rule from the first (3 one-thread passes in the first 50);
 *   - one core taken (the team 5x slower than one thread): no pass costs more than 2.5 one-thread
 *     passes (the budget and the rest on one thread), and the whole run costs within 6 % of
 *     always-one-thread (the tries' 5 % rule, plus the first try);
 *   - the load leaves: the team runs again, within the interval the losses had grown to;
 *   - the load arrives while the team is the best: the pass it arrives in is cut, and the next
 *     passes run one thread; one stalled team pass (2x one thread's cost, once) is not cut and
 *     does not flip the arm;
 *   - intervals stay within 4 .. 4096 passes;
 *   - a core taken where the load reading sees it (crowded): the team is never tried, so every
 *     pass costs one thread's, from the first; the reading clears: the team runs at the next pass;
 *     the team the best when the reading turns crowded: the tries of one thread go on as before
 *     (the reading only holds back the team), and a collapsed team pass is cut as before;
 *   - the process's tally (what nemotron bench reports), on real teams: a fixed team of 2 counts
 *     its passes on the team, a team of 1 on one thread, an adaptive one its first pass of a kind
 *     on one thread and its second on the team, and a team pass that outlasts its budget (here by
 *     a 300 ms sleep against a first pass of microseconds) as cut; each kind apart (the prompts'
 *     second pass, given 1.5x a first pass of 50 ms, runs on the team). The sleeps leave a loaded
 *     machine's preemptions (milliseconds) far from deciding either way.
 */
#include "cpu/team.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test.h"

struct machine {
    double c1, cT; /* seconds per position on one thread, on the team */
    int crowded;   /* what the CPUs' load reading shows (cpu_load.c): other work holds the cores */
};

/* One pass of kind k on machine m: chooses, costs, learns; returns the cost, sets *arm, *cut. */
static double pass(struct nt_cpu_team_kind *k, struct machine m, int *arm_out, int *cut_out, double *budget_out) {
    int explore;
    double budget;
    int arm = nt_cpu_team_choose(k, m.crowded, &explore, &budget);
    double c = arm ? m.cT : m.c1;
    int cut = 0;
    if (arm && budget > 0 && m.cT > budget) {
        c = budget + (1.0 - budget / m.cT) * m.c1;
        cut = 1;
    }
    nt_cpu_team_learn(k, arm, explore, cut, c);
    CHECK(k->every >= 4 && k->every <= 4096, "interval %d out of 4 .. 4096", k->every);
    if (arm_out) *arm_out = arm;
    if (cut_out) *cut_out = cut;
    if (budget_out) *budget_out = budget;
    return c;
}

/* Runs n passes of machine m; how many ran on the team. */
static int team_passes(struct nt_cpu_team_kind *k, struct machine m, int n) {
    int team = 0;
    for (int i = 0; i < n; i++) {
        int arm;
        pass(k, m, &arm, NULL, NULL);
        team += arm;
    }
    return team;
}

static struct nt_cpu_team_kind fresh(void) {
    struct nt_cpu_team_kind k;
    memset(&k, 0, sizeof k);
    k.every = 4;
    return k;
}

static void test_first_passes(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine quiet = {1.0, 0.6, 0};
    int arm, cut;
    double budget;
    pass(&k, quiet, &arm, &cut, &budget);
    CHECK(arm == 0 && budget == 0, "first pass: arm %d, budget %g (want one thread, no budget)", arm, budget);
    pass(&k, quiet, &arm, &cut, &budget);
    CHECK(arm == 1 && budget == 1.5 && !cut, "second pass: arm %d budget %g cut %d (want the team, one thread's cost)", arm,
          budget, cut);
}

static void test_quiet(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine quiet = {1.0, 0.6, 0};
    double total = 0;
    int team = 0, n = 2000, one_early = 0;
    for (int i = 0; i < n; i++) {
        int arm;
        total += pass(&k, quiet, &arm, NULL, NULL);
        team += arm;
        if (i < 50) one_early += !arm;
    }
    /* the team's first try won by 1 / 0.6: one thread is tried again after 20 (1 / 0.6 - 1) = 13
     * passes, then (losing) after 26: the first pass and two tries in the first 50 */
    CHECK(one_early == 3, "quiet: one thread ran %d of the first 50 passes (want 3)", one_early);
    CHECK(team >= 0.95 * n, "quiet: the team ran %d of %d passes", team, n);
    CHECK(total <= 1.05 * n * quiet.cT, "quiet: %.1f against %.1f always on the team", total, n * quiet.cT);
}

static void test_loaded(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine loaded = {1.0, 5.0, 0};
    double total = 0, worst = 0;
    int n = 2000, team = 0;
    for (int i = 0; i < n; i++) {
        int arm;
        double c = pass(&k, loaded, &arm, NULL, NULL);
        total += c;
        team += arm;
        if (c > worst) worst = c;
    }
    CHECK(worst <= 2.5 * loaded.c1, "loaded: a pass cost %.2f one-thread passes", worst / loaded.c1);
    CHECK(total <= 1.06 * n * loaded.c1, "loaded: %.1f against %.1f always on one thread", total, n * loaded.c1);
    CHECK(team < 0.05 * n, "loaded: the team ran %d of %d passes", team, n);

    /* the load leaves: the team is tried again within the interval reached, and stays */
    struct machine quiet = {1.0, 0.6, 0};
    int limit = k.every + 1, back = -1;
    for (int i = 0; i < limit + 50; i++) {
        int arm;
        pass(&k, quiet, &arm, NULL, NULL);
        if (arm && back < 0) back = i;
    }
    CHECK(back >= 0 && back <= limit, "load gone: the team ran again after %d passes (interval %d)", back, limit - 1);
    int team_after = team_passes(&k, quiet, 100);
    CHECK(team_after >= 95, "load gone: the team ran %d of the next 100 passes", team_after);
}

static void test_load_arrives(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine quiet = {1.0, 0.6, 0}, loaded = {1.0, 5.0, 0};
    for (int i = 0; i < 200; i++) pass(&k, quiet, NULL, NULL, NULL);
    /* the next team pass meets the load: it is cut at one thread's cost */
    int arm = 0, cut = 0;
    double c = 0;
    for (int i = 0; i < 8 && !arm; i++) c = pass(&k, loaded, &arm, &cut, NULL);
    CHECK(arm && cut && c <= 2.5 * loaded.c1, "load arrives: team pass %d, cut %d, cost %.2f", arm, cut, c);
    int team = team_passes(&k, loaded, 20);
    CHECK(team == 0, "load arrives: the team ran %d of the next 20 passes", team);
}

/* A quiet machine whose host stalls one team pass: it costs 2x one thread's pass, once. */
static void test_stall(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine quiet = {1.0, 0.6, 0}, stalled = {1.0, 1.2, 0};
    for (int i = 0; i < 200; i++) pass(&k, quiet, NULL, NULL, NULL);
    int arm = 0, cut = 1;
    for (int i = 0; i < 8 && !arm; i++) pass(&k, stalled, &arm, &cut, NULL);
    CHECK(arm && !cut, "stall: team pass %d cut %d (want the team, not cut)", arm, cut);
    int team = team_passes(&k, quiet, 20);
    CHECK(team >= 19, "stall: the team ran %d of the next 20 passes", team);
}

static void test_crowded(void) {
    struct nt_cpu_team_kind k = fresh();
    struct machine seen = {1.0, 5.0, 1};
    double worst = 0;
    int team = 0, n = 2000;
    for (int i = 0; i < n; i++) {
        int arm;
        double c = pass(&k, seen, &arm, NULL, NULL);
        team += arm;
        if (c > worst) worst = c;
    }
    CHECK(team == 0 && worst == seen.c1, "crowded: the team ran %d of %d passes, the worst cost %.2f one-thread passes",
          team, n, worst / seen.c1);
    /* the reading clears with the load: the team is tried at the next pass and stays */
    struct machine quiet = {1.0, 0.6, 0};
    int arm, cut;
    pass(&k, quiet, &arm, &cut, NULL);
    CHECK(arm && !cut, "crowded, then free: the next pass ran arm %d cut %d (want the team)", arm, cut);
    int team_after = team_passes(&k, quiet, 100);
    CHECK(team_after >= 95, "crowded, then free: the team ran %d of the next 100 passes", team_after);

    /* the team the best when the reading turns crowded (a load it does not collapse under, say):
     * its passes go on, one thread's tries too, and a collapsed pass is still cut */
    struct nt_cpu_team_kind b = fresh();
    for (int i = 0; i < 200; i++) pass(&b, quiet, NULL, NULL, NULL);
    struct machine crowded_fast = {1.0, 0.6, 1}, crowded_slow = {1.0, 5.0, 1};
    int team_fast = 0, ones = 0, limit = b.every + 1; /* one thread's next try comes within it */
    for (int i = 0; i < limit; i++) {
        pass(&b, crowded_fast, &arm, NULL, NULL);
        team_fast += arm;
        ones += !arm;
    }
    CHECK(ones == 1 && team_fast == limit - 1, "crowded, team the best: the team ran %d of %d passes, one thread %d",
          team_fast, limit, ones);
    arm = 0;
    double c = 0;
    for (int i = 0; i < 8 && !arm; i++) c = pass(&b, crowded_slow, &arm, &cut, NULL);
    CHECK(arm && cut && c <= 2.5 * crowded_slow.c1, "crowded, team collapses: team pass %d, cut %d, cost %.2f", arm,
          cut, c);
}

/* One pass of n positions on team t; with sleep_ms, it sleeps that long and then asks for its
 * threads (where a cut is found). Returns the threads it was given. */
static int real_pass(struct nt_cpu_team *t, int n, int sleep_ms) {
    nt_cpu_team_begin(t, n);
    if (sleep_ms) {
        struct timespec ts = {0, sleep_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
    int threads = nt_cpu_team_threads(t);
    nt_cpu_team_end(t, n);
    return threads;
}

static void test_tally(void) {
    struct nt_cpu_team_tally a, b;
    struct nt_cpu_team t;

    setenv("NEMOTRON_TEAM", "fixed", 1);
    nt_cpu_team_init(&t, 2);
    nt_cpu_team_tally(&a);
    for (int i = 0; i < 3; i++) real_pass(&t, 1, 0);
    real_pass(&t, 8, 0);
    nt_cpu_team_tally(&b);
    nt_cpu_team_destroy(&t);
    CHECK(b.passes[0][1] - a.passes[0][1] == 3 && b.passes[1][1] - a.passes[1][1] == 1 &&
              b.passes[0][0] == a.passes[0][0] && b.passes[1][0] == a.passes[1][0],
          "tally, fixed team of 2: decode on the team +%lld (want 3), prompts +%lld (want 1), one thread +%lld +%lld",
          b.passes[0][1] - a.passes[0][1], b.passes[1][1] - a.passes[1][1], b.passes[0][0] - a.passes[0][0],
          b.passes[1][0] - a.passes[1][0]);

    nt_cpu_team_init(&t, 1);
    nt_cpu_team_tally(&a);
    real_pass(&t, 1, 0);
    nt_cpu_team_tally(&b);
    nt_cpu_team_destroy(&t);
    CHECK(b.passes[0][0] - a.passes[0][0] == 1 && b.passes[0][1] == a.passes[0][1],
          "tally, team of 1: one thread +%lld, team +%lld", b.passes[0][0] - a.passes[0][0],
          b.passes[0][1] - a.passes[0][1]);

    /* timed: no load readings, so the arms are the policy's first two and nothing else decides */
    setenv("NEMOTRON_TEAM", "timed", 1);
    nt_cpu_team_init(&t, 2);
    nt_cpu_team_tally(&a);
    int first = real_pass(&t, 1, 0), second = real_pass(&t, 1, 300);
    /* the first prompt pass sleeps, so that the second's budget (1.5x it) is far past its own start */
    int pfirst = real_pass(&t, 4, 50), psecond = real_pass(&t, 4, 0);
    nt_cpu_team_tally(&b);
    nt_cpu_team_destroy(&t);
    unsetenv("NEMOTRON_TEAM");
    CHECK(first == 1 && second == 1, "tally, adaptive: the first pass's threads %d (want 1), the second's after its "
          "budget %d (want 1: cut)", first, second);
    CHECK(b.passes[0][0] - a.passes[0][0] == 1 && b.passes[0][1] - a.passes[0][1] == 1 && b.cut[0] - a.cut[0] == 1,
          "tally, adaptive decode: one thread +%lld, team +%lld, cut +%lld (want 1 each)",
          b.passes[0][0] - a.passes[0][0], b.passes[0][1] - a.passes[0][1], b.cut[0] - a.cut[0]);
    CHECK(pfirst == 1 && psecond == 2 && b.passes[1][0] - a.passes[1][0] == 1 && b.passes[1][1] - a.passes[1][1] == 1 &&
              b.cut[1] == a.cut[1],
          "tally, adaptive prompts: threads %d then %d, one thread +%lld, team +%lld, cut +%lld",
          pfirst, psecond, b.passes[1][0] - a.passes[1][0], b.passes[1][1] - a.passes[1][1], b.cut[1] - a.cut[1]);
}

int main(void) {
    test_tally();
    test_crowded();
    test_stall();
    test_first_passes();
    test_quiet();
    test_loaded();
    test_load_arrives();
    return test_summary("team");
}
