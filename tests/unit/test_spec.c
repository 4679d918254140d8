/* test_spec.c - the speculative decoder (nemotron_spec_*) against plain decoding, on every fixture
 * model and the demo model, on the CPU and on CUDA where the library holds it (the host
 * emulation's build under `make test`).
 *
 * Plain decoding here: eval the prompt, then t = pick(logits), emit t, eval(t), ... (pick: the
 * sampler's draw and accept, or argmax). For greedy and a seeded sampler (penalties on, so the
 * sampler's history matters), K = 1..16, and drafters whose drafts are all right (an oracle fed
 * the plain run's tokens), all wrong, and mixed, the decoder must emit the plain run's tokens, end
 * at the plain run's position, and then compute the plain session's logits bit for bit (its state
 * is the plain one's). Then the n-gram drafter on a repetitive prompt and a draft model (the demo
 * model drafting for itself; one fixture for another of the same vocabulary), the same way.
 * The pay check on a clock of the test's own (deterministic): a draft model that costs more than
 * it saves is switched off and probed again now and then, a cheap one stays on, and both emit
 * plain decoding's tokens.
 * On the CPU, the errors: each a status with a message; NULL handles are safe.
 *
 * How much runs where (struct plan): the CPU every K greedy on the fixtures; the CUDA backend,
 * which CI runs on the host emulation (~50x slower than the CPU backend), what proves the
 * backend's part - verify passes of 2, 5 and 17 positions kept whole, in part and not at all,
 * their logits for the sampler, the draft model's snapshot and restore - in short runs. The
 * emulation's build (test_spec_emu, compiled with TEST_SPEC_CUDA_ONLY) leaves the CPU to
 * test_spec, which `make test` runs too.
 */
#include "engine/engine.h"
#include "test.h"

#include <string.h>

/* NGEN: a run's tokens; NGEN_PAY: the pay check's runs (long enough for several switch-offs) */
enum { PROMPT = 6, NGEN = 28, NGEN_PAY = 2400, KMAX = 16, NCTX = 2560 };

/* The runs of one model on one device. Bit K of a mask: run with K drafts per step. */
struct plan {
    int ngen;                         /* tokens per run, at most NGEN */
    uint32_t k_right, k_wrong, k_mixed;   /* greedy, by drafter */
    uint32_t k_sampled;               /* sampled, every drafter (right, wrong, mixed) */
    uint32_t k_sampled_mixed;         /* sampled, the mixed drafter only */
    int ngram;                        /* the n-gram drafter: 0 not, 1 greedy, 2 greedy and sampled */
    uint32_t k_draft;                 /* the draft model's runs, greedy */
    int draft_sampled;                /* and sampled */
    uint32_t k_mtp;                   /* the MTP step's runs, greedy and sampled (models with one) */
};
#define K_(k) (1u << (k))
#define ALL_K (((1u << (KMAX + 1)) - 1) & ~1u)
#define K_1_3_16 (K_(1) | K_(3) | K_(16))
/* the CPU's fixtures: every K greedy; 1, 3, 16 sampled */
static const struct plan plan_cpu_fixture = {NGEN, ALL_K, ALL_K, ALL_K, K_1_3_16, 0, 2, K_(1) | K_(6) | K_(11) | K_(16), 1,
                                             K_(1) | K_(2) | K_(5) | K_(16)};
/* the demo on the CPU: 1, 3, 16 */
static const struct plan plan_cpu_demo = {NGEN, K_1_3_16, K_1_3_16, K_1_3_16, K_1_3_16, 0, 2, K_(1) | K_(16), 1, K_1_3_16};
/* the CUDA backend, the backend's part only (the drafters are host code the CPU's runs cover):
 * 18 tokens hold a whole step of 16 drafts; verify passes of 2, 5 and 17 positions kept in part
 * or rolled back entirely (the mixed drafts' hits and misses: at K = 1 every miss keeps none),
 * one of 17 kept whole (right), the sampler reading a verify pass's logits, and the draft
 * model's session restored after partial acceptances (dense-f16 drafting for hybrid-group-f32).
 * About 45 s of one core on the emulation. */
static const struct plan plan_cuda = {18, K_(16), 0, K_(1) | K_(4) | K_(16), 0, K_(16), 0, K_(2), 0, K_(4)};

struct model_case {
    const char *name, *dir;
};
static const struct model_case cases[] = {
    {"dense-f16", FIXTURES "/dense-f16"},
    {"hybrid-group-f32", FIXTURES "/hybrid-group-f32"},
    {"latent-mtp-f32", FIXTURES "/latent-mtp-f32"},
    {"tied-bf16", FIXTURES "/tied-bf16"},
    {"demo", "models/nemotron-h-kjv"},
};

/* mtp: with the model's MTP step (which never changes what the session computes) */
static nemotron_session *new_session_mtp(nemotron_model *m, int verify_max, int mtp) {
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = NCTX;
    sp.verify_max = verify_max;
    sp.mtp = mtp;
    nemotron_session *s = NULL;
    nemotron_status st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK, "session: %s", nemotron_session_errmsg(s));
    if (st) {
        nemotron_session_free(s);
        return NULL;
    }
    return s;
}

static nemotron_session *new_session(nemotron_model *m, int verify_max) { return new_session_mtp(m, verify_max, 0); }

/* A sampler with penalties and a seed (its draws depend on every token it was shown), or NULL. */
static nemotron_sampler *new_sampler(int sampled, int V) {
    if (!sampled) return NULL;
    nemotron_sampler_params p = nemotron_sampler_default_params();
    p.temperature = 0.9f;
    p.top_k = 50;
    p.repeat_penalty = 1.15f;
    p.penalty_last_n = 16;
    p.seed = 1234;
    nemotron_sampler *s = NULL;
    CHECK(nemotron_sampler_new(&p, V, &s) == NEMOTRON_OK, "sampler: %s", nemotron_sampler_errmsg(s));
    return s;
}

/* What a run ends with: the tokens, the position, and the logits after one more token. */
struct outcome {
    int32_t tokens[NGEN_PAY];
    int n, pos;
    float *after;
};

/* The session's logits after evaluating the last emitted token (what plain decoding does next). */
static void finish(nemotron_session *s, struct outcome *o, int V) {
    o->pos = nemotron_session_pos(s);
    o->after = malloc((size_t)V * sizeof(float));
    if (!o->after) exit(1);
    CHECK(nemotron_session_eval(s, &o->tokens[o->n - 1], 1, o->after) == NEMOTRON_OK, "eval after: %s",
          nemotron_session_errmsg(s));
}

static void plain_run(nemotron_model *m, const int32_t *prompt, int n_prompt, int sampled, int ngen, struct outcome *o) {
    int V = nemotron_model_vocab_size(m);
    nemotron_session *s = new_session(m, 0);
    nemotron_sampler *smp = new_sampler(sampled, V);
    memset(o, 0, sizeof *o);
    if (!s) return;
    CHECK(nemotron_session_eval(s, prompt, n_prompt, NULL) == NEMOTRON_OK, "plain prefill");
    for (int i = 0; i < ngen; i++) {
        int32_t t = smp ? nemotron_sampler_sample(smp, nemotron_session_logits(s)) : nemotron_session_argmax(s);
        if (smp) nemotron_sampler_accept(smp, t);
        o->tokens[o->n++] = t;
        if (i + 1 < ngen) CHECK(nemotron_session_eval(s, &t, 1, NULL) == NEMOTRON_OK, "plain eval");
    }
    finish(s, o, V);
    nemotron_sampler_free(smp);
    nemotron_session_free(s);
}

/* The test's drafters: the plain run's tokens after the history, with none, all, or a scattered
 * third of them (by a hash of the token's index in the run, so that no step length K lines the
 * wrong ones up with the correction tokens only) replaced by another token. */
enum wrongness { RIGHT, WRONG, MIXED };
struct oracle {
    const struct outcome *plain;
    int n_prompt;
    enum wrongness wrong;
    int V;
};
static int is_wrong(enum wrongness w, int at) {
    return w == WRONG || (w == MIXED && (((uint32_t)at * 2654435761u) >> 13) % 3 == 0);
}
static int oracle_draft(void *user, const int32_t *history, int n, int32_t *draft, int max) {
    const struct oracle *o = user;
    int k = 0;
    for (int at = n - o->n_prompt; k < max && at < o->plain->n; at++, k++) {
        int32_t t = o->plain->tokens[at];
        draft[k] = is_wrong(o->wrong, at) ? (t + 1) % o->V : t;
    }
    return k;
}

/* The session of the decoder's run in progress (the pay check's clock reads it). */
static nemotron_session *run_target;

/* Runs the decoder to the plain run's length and compares with it; returns its stats. */
static nemotron_spec_stats spec_run(const char *what, nemotron_model *m, const int32_t *prompt, int n_prompt,
                                    int sampled, int K, nemotron_spec_params *p, const struct outcome *plain) {
    nemotron_spec_stats none = {0};
    int V = nemotron_model_vocab_size(m);
    nemotron_session *s = new_session_mtp(m, K + 1, p->mtp);
    nemotron_sampler *smp = new_sampler(sampled, V);
    nemotron_spec *spec = NULL;
    if (!s) return none;
    run_target = s;
    p->spec_max = K;
    nemotron_status st = nemotron_spec_new(s, smp, p, &spec);
    CHECK(st == NEMOTRON_OK, "%s: spec_new: %s", what, nemotron_spec_errmsg(spec));
    struct outcome o = {.n = 0};
    const int ngen = plain->n;
    if (!st) st = nemotron_spec_prefill(spec, prompt, n_prompt);
    CHECK(st == NEMOTRON_OK, "%s: prefill: %s", what, nemotron_spec_errmsg(spec));
    while (!st && o.n < ngen) {
        int got = 0;
        st = nemotron_spec_next(spec, o.tokens + o.n, ngen - o.n, &got);
        CHECK(st == NEMOTRON_OK, "%s: next: %s", what, nemotron_spec_errmsg(spec));
        CHECK(got >= 1 && got <= K + 1 && got <= ngen - o.n, "%s: next emitted %d", what, got);
        if (got < 1) break;
        o.n += got;
    }
    nemotron_spec_stats stats = nemotron_spec_get_stats(spec);
    if (o.n == ngen) {
        finish(s, &o, V);
        int first_diff = -1;
        for (int i = 0; i < ngen && first_diff < 0; i++)
            if (o.tokens[i] != plain->tokens[i]) first_diff = i;
        CHECK(first_diff < 0, "%s: token %d differs from plain decoding", what, first_diff);
        CHECK(o.pos == plain->pos, "%s: position %d, plain %d", what, o.pos, plain->pos);
        CHECK(memcmp(o.after, plain->after, (size_t)V * sizeof(float)) == 0,
              "%s: the state differs from plain decoding's (the next logits)", what);
        CHECK(stats.emitted == ngen && stats.accepted <= stats.drafted, "%s: stats", what);
    }
    free(o.after);
    nemotron_spec_free(spec);
    nemotron_sampler_free(smp);
    nemotron_session_free(s);
    run_target = NULL;
    return stats;
}

static void check_model(const char *name, nemotron_model *m, nemotron_model *draft_model, const struct plan *pl) {
    int V = nemotron_model_vocab_size(m);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    /* a prompt that repeats itself, for the n-gram drafter */
    int32_t rep[4 * PROMPT];
    for (int i = 0; i < 4 * PROMPT; i++) rep[i] = prompt[i % 3];
    char what[160];
    for (int sampled = 0; sampled < 2; sampled++) {
        struct outcome plain;
        plain_run(m, prompt, PROMPT, sampled, pl->ngen, &plain);
        for (int K = 1; K <= KMAX; K++) {
            static const enum wrongness wrong[] = {RIGHT, WRONG, MIXED};
            static const char *const label[] = {"right", "wrong", "mixed"};
            uint32_t greedy_masks[3] = {pl->k_right, pl->k_wrong, pl->k_mixed};
            for (int w = 0; w < 3; w++) {
                uint32_t mask = sampled ? pl->k_sampled | (w == 2 ? pl->k_sampled_mixed : 0) : greedy_masks[w];
                if (!(mask & K_(K))) continue;
                struct oracle orc = {&plain, PROMPT, wrong[w], V};
                nemotron_spec_params p = nemotron_spec_default_params();
                p.draft_fn = oracle_draft;
                p.draft_user = &orc;
                snprintf(what, sizeof what, "%s %s K=%d drafts %s", name, sampled ? "sampled" : "greedy", K, label[w]);
                nemotron_spec_stats st = spec_run(what, m, prompt, PROMPT, sampled, K, &p, &plain);
                if (w == 0) CHECK(st.accepted == st.drafted && st.drafted > 0, "%s: all accepted", what);
                if (w == 1) CHECK(st.accepted == 0 && st.drafted > 0, "%s: none accepted", what);
                if (w == 2) CHECK(st.accepted < st.drafted && st.accepted > 0, "%s: some accepted", what);
                if (w == 0) CHECK(st.passes < pl->ngen - 1, "%s: %lld passes", what, st.passes);
            }
        }
        /* n-gram prompt lookup on a repetitive prompt */
        if (pl->ngram > sampled) {
            struct outcome plain_rep;
            plain_run(m, rep, 4 * PROMPT, sampled, pl->ngen, &plain_rep);
            nemotron_spec_params p = nemotron_spec_default_params();
            snprintf(what, sizeof what, "%s %s n-gram", name, sampled ? "sampled" : "greedy");
            nemotron_spec_stats st = spec_run(what, m, rep, 4 * PROMPT, sampled, KMAX, &p, &plain_rep);
            CHECK(st.drafted > 0, "%s: nothing drafted", what);
            free(plain_rep.after);
        }
        /* a draft model */
        if (draft_model && pl->k_draft && (!sampled || pl->draft_sampled)) {
            for (int K = 1; K <= KMAX; K++) {
                if (!(pl->k_draft & K_(K))) continue;
                nemotron_session *ds = new_session(draft_model, 0);
                if (!ds) break;
                nemotron_spec_params p = nemotron_spec_default_params();
                p.draft = ds;
                snprintf(what, sizeof what, "%s %s K=%d draft model", name, sampled ? "sampled" : "greedy", K);
                nemotron_spec_stats st = spec_run(what, m, prompt, PROMPT, sampled, K, &p, &plain);
                CHECK(st.drafted > 0, "%s: nothing drafted", what);
                if (draft_model == m && !sampled)
                    CHECK(st.accepted == st.drafted, "%s: the model drafting for itself greedily: %lld of %lld", what,
                          st.accepted, st.drafted);
                nemotron_session_free(ds);
            }
        }
        /* the model's MTP step (random weights in the fixture: its drafts land now and then) */
        if (pl->k_mtp && nemotron_model_mtp_layers(m) > 0) {
            for (int K = 1; K <= KMAX; K++) {
                if (!(pl->k_mtp & K_(K))) continue;
                nemotron_spec_params p = nemotron_spec_default_params();
                p.mtp = 1;
                snprintf(what, sizeof what, "%s %s K=%d MTP", name, sampled ? "sampled" : "greedy", K);
                nemotron_spec_stats st = spec_run(what, m, prompt, PROMPT, sampled, K, &p, &plain);
                CHECK(st.drafted > 0, "%s: nothing drafted", what);
            }
        }
        free(plain.after);
    }
}

/* The pay check's clock (nt_spec_clock, engine.h): it counts work, not time. A pass of the model
 * costs 1 whatever its positions (a model whose step is bound by reading its weights, where
 * speculation can pay), a position the draft session evaluates costs draft_cost. A reading adds
 * what the sessions did since the one before: the model's position moved (one pass: the model
 * runs one pass between a step's two readings), the draft's by so many positions. */
static struct {
    nemotron_session *draft;
    int target_pos, draft_pos;
    double now, draft_cost;
} work;
static double work_clock(void) {
    int tp = run_target ? nemotron_session_pos(run_target) : 0, dp = nemotron_session_pos(work.draft);
    if (tp != work.target_pos) work.now += 1;
    work.now += work.draft_cost * (dp > work.draft_pos ? dp - work.draft_pos : work.draft_pos - dp);
    work.target_pos = tp;
    work.draft_pos = dp;
    return work.now;
}

/* The pay check of a draft model: m drafting for itself (greedy: every draft right) at K = 4. When
 * a draft position costs as much as a pass of the model, a step of 4 drafts costs 1 + 5 (four
 * drafting passes and the last draft's, evaluated at the next step) for 5 tokens, less than the 1
 * token per 1 of plain steps: speculation must go off, and come back for probes. The first
 * switch-off comes after RATE_SAMPLES plain steps and RATE_SAMPLES = 4 verify steps of 1, 2, 4
 * and 4 drafts (11), which with the draft's catch-up on the prompt cost 28 for 15 tokens: 13
 * lost; the next probe's catch-up will cover CATCH_UP_MAX = 32 tokens (32, where the prompt's
 * cost 6), so it is off for (13 + 26) / PROBE_SHARE (0.02) = 1950 steps; that probe comes within
 * NGEN_PAY.
 * When a draft position costs 1/20, a step costs 1.25 for 5 tokens: it must stay on. */
static void check_pay(const char *name, nemotron_model *m) {
    enum { K = 4, FIRST_OFF_DRAFTS = 1 + 2 + 4 + 4 };
    int V = nemotron_model_vocab_size(m);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    struct outcome plain;
    plain_run(m, prompt, PROMPT, 0, NGEN_PAY, &plain);
    static const double cost[2] = {1.0, 0.05};
    nemotron_spec_stats st[2] = {{0}};
    double (*real_clock)(void) = nt_spec_clock;
    char what[160];
    for (int c = 0; c < 2; c++) {
        nemotron_session *ds = new_session(m, 0);
        if (!ds) break;
        memset(&work, 0, sizeof work);
        work.draft = ds;
        work.draft_cost = cost[c];
        nt_spec_clock = work_clock;
        nemotron_spec_params p = nemotron_spec_default_params();
        p.draft = ds;
        snprintf(what, sizeof what, "%s pay check, a draft position costing %g passes", name, cost[c]);
        st[c] = spec_run(what, m, prompt, PROMPT, 0, K, &p, &plain);
        nt_spec_clock = real_clock;
        nemotron_session_free(ds);
        /* (after a switch-off the draft restarts on the latest tokens, and may then miss) */
        if (c == 1)
            CHECK(st[c].accepted == st[c].drafted, "%s: every draft right (%lld of %lld)", what, st[c].accepted,
                  st[c].drafted);
    }
    CHECK(st[0].drafted > FIRST_OFF_DRAFTS && st[0].drafted < st[1].drafted / 2,
          "%s: a draft model that does not pay drafted %lld tokens (more than %d: probed again; fewer than half of "
          "the %lld of one that pays: off most of the time)",
          name, st[0].drafted, FIRST_OFF_DRAFTS, st[1].drafted);
    CHECK(st[1].drafted > NGEN_PAY / 2, "%s: a draft model that pays drafted only %lld of %d tokens", name,
          st[1].drafted, NGEN_PAY);
    free(plain.after);
}

static void check_errors(nemotron_model *m, nemotron_model *other_vocab) {
    nemotron_session *s = new_session(m, 5), *s0 = new_session(m, 0), *d = new_session(other_vocab, 0);
    nemotron_spec *spec = NULL;
    nemotron_spec_params p = nemotron_spec_default_params();
    if (!s || !s0 || !d) goto out;
    p.spec_max = 4;
    CHECK(nemotron_spec_new(s0, NULL, &p, &spec) == NEMOTRON_ERR_ARG && strstr(nemotron_spec_errmsg(spec), "verify_max"),
          "verify_max 0: %s", nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    p.spec_max = 5;
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_ERR_ARG, "K + 1 past verify_max: %s",
          nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    p.spec_max = NEMOTRON_SPEC_MAX + 1;
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_ERR_ARG && strstr(nemotron_spec_errmsg(spec), "spec_max"),
          "spec_max too large: %s", nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    p.spec_max = 4;
    p.draft = d;
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_ERR_ARG && strstr(nemotron_spec_errmsg(spec), "vocabulary"),
          "draft of another vocabulary: %s", nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    p.draft = s;
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_ERR_ARG, "draft is the session: %s",
          nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    p.draft = NULL;
    CHECK(nemotron_spec_new(NULL, NULL, &p, &spec) == NEMOTRON_ERR_ARG, "NULL session: %s", nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    CHECK(nemotron_spec_new(s, NULL, &p, NULL) == NEMOTRON_ERR_ARG, "NULL out");
    int32_t t = 1, out[8];
    int n = -1;
    CHECK(nemotron_session_eval(s, &t, 1, NULL) == NEMOTRON_OK, "eval");
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_ERR_ARG && strstr(nemotron_spec_errmsg(spec), "position"),
          "session not at 0: %s", nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    nemotron_session_reset(s);
    CHECK(nemotron_spec_new(s, NULL, NULL, &spec) == NEMOTRON_ERR_ARG, "default K=16 past verify_max 5: %s",
          nemotron_spec_errmsg(spec));
    nemotron_spec_free(spec);
    CHECK(nemotron_spec_new(s, NULL, &p, &spec) == NEMOTRON_OK, "spec: %s", nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_next(spec, out, 8, &n) == NEMOTRON_ERR_ARG && n == 0, "next before prefill: %s",
          nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_prefill(spec, NULL, 1) == NEMOTRON_ERR_ARG, "prefill of NULL");
    CHECK(nemotron_spec_prefill(spec, &t, 0) == NEMOTRON_ERR_ARG, "prefill of 0");
    int32_t bad = nemotron_model_vocab_size(m);
    CHECK(nemotron_spec_prefill(spec, &bad, 1) == NEMOTRON_ERR_ARG && nemotron_session_pos(s) == 0,
          "prefill of a token outside the vocabulary: %s", nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_prefill(spec, &t, 1) == NEMOTRON_OK, "prefill: %s", nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_next(spec, out, 0, &n) == NEMOTRON_ERR_ARG && n == 0, "max_out 0: %s", nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_next(spec, NULL, 8, &n) == NEMOTRON_ERR_ARG, "out NULL");
    CHECK(nemotron_spec_next(spec, out, 8, NULL) == NEMOTRON_ERR_ARG, "n_out NULL");
    CHECK(nemotron_spec_next(spec, out, 8, &n) == NEMOTRON_OK && n == 1, "first next: %s", nemotron_spec_errmsg(spec));
    CHECK(nemotron_spec_prefill(spec, &t, 1) == NEMOTRON_ERR_ARG, "prefill after next");
    nemotron_spec_free(spec);
    /* verify_logits: only between verify and accept, a position of the pass, into a buffer */
    float *lg = malloc((size_t)nemotron_model_vocab_size(m) * sizeof(float));
    nemotron_session_reset(s);
    if (lg) {
        CHECK(nemotron_session_verify_logits(s, 0, lg) == NEMOTRON_ERR_ARG, "verify_logits without verify");
        int32_t two[2] = {1, 2};
        CHECK(nemotron_session_verify(s, two, 2, NULL) == NEMOTRON_OK, "verify: %s", nemotron_session_errmsg(s));
        CHECK(nemotron_session_verify_logits(s, 2, lg) == NEMOTRON_ERR_ARG, "verify_logits past the pass");
        CHECK(nemotron_session_verify_logits(s, -1, lg) == NEMOTRON_ERR_ARG, "verify_logits of -1");
        CHECK(nemotron_session_verify_logits(s, 0, NULL) == NEMOTRON_ERR_ARG, "verify_logits into NULL");
        CHECK(nemotron_session_verify_logits(s, 1, lg) == NEMOTRON_OK &&
                  memcmp(lg, nemotron_session_logits(s), (size_t)nemotron_model_vocab_size(m) * sizeof(float)) == 0,
              "verify_logits of the last position are the session's last logits");
        CHECK(nemotron_session_accept(s, 1) == NEMOTRON_OK, "accept");
        CHECK(nemotron_session_verify_logits(s, 0, lg) == NEMOTRON_ERR_ARG, "verify_logits after accept");
    }
    free(lg);
out:
    /* NULL handles */
    CHECK(nemotron_session_verify_logits(NULL, 0, NULL) == NEMOTRON_ERR_ARG, "verify_logits of NULL");
    CHECK(nemotron_spec_prefill(NULL, &t, 1) == NEMOTRON_ERR_ARG, "prefill of NULL");
    CHECK(nemotron_spec_next(NULL, out, 8, &n) == NEMOTRON_ERR_ARG && n == 0, "next of NULL");
    CHECK(nemotron_spec_get_stats(NULL).drafted == 0, "stats of NULL");
    CHECK(nemotron_spec_errmsg(NULL) != NULL, "errmsg of NULL");
    nemotron_spec_free(NULL);
    nemotron_session_free(s);
    nemotron_session_free(s0);
    nemotron_session_free(d);
}

static nemotron_model *load(const char *dir, const char *device, nemotron_status *st) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = device;
    mp.n_threads = 2;
    nemotron_model *m = NULL;
    *st = nemotron_model_load(dir, &mp, &m);
    if (*st == NEMOTRON_OK) return m;
    nemotron_model_free(m);
    return NULL;
}

int main(void) {
    static const char *const devices[] = {"cpu", "cuda"};
#ifdef TEST_SPEC_CUDA_ONLY
    size_t first_device = 1;
#else
    size_t first_device = 0;
#endif
    for (size_t d = first_device; d < sizeof devices / sizeof devices[0]; d++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            /* the CUDA backend (in CI: its host emulation, ~50x slower) on the fixtures only */
            if (d > 0 && c == 4) continue;
            nemotron_status st;
            nemotron_model *m = load(cases[c].dir, devices[d], &st);
            if (!m && d > 0 && (st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_ARG)) {
                printf("test_spec: no %s device in this build or machine: its checks skipped\n", devices[d]);
                break;
            }
            CHECK(m != NULL, "%s on %s: load failed (%s)", cases[c].name, devices[d], nemotron_status_str(st));
            if (!m) continue;
            char what[96];
            snprintf(what, sizeof what, "%s on %s", cases[c].name, devices[d]);
            /* draft models: the demo drafts for itself, dense-f16 for hybrid-group-f32 */
            nemotron_model *draft = NULL, *loaded_draft = NULL;
            if (c == 4) draft = m;
            if (c == 1) draft = loaded_draft = load(cases[0].dir, devices[d], &st);
            check_model(what, m, draft, d > 0 ? &plan_cuda : c == 4 ? &plan_cpu_demo : &plan_cpu_fixture);
            if (d == 0 && c == 4) check_pay(what, m);
            if (d == 0 && c == 0) {
                nemotron_model *demo = load(cases[4].dir, "cpu", &st);
                CHECK(demo != NULL, "load the demo");
                if (demo) check_errors(m, demo);
                nemotron_model_free(demo);
            }
            nemotron_model_free(loaded_draft);
            nemotron_model_free(m);
        }
    }
    return test_summary("test_spec");
}
