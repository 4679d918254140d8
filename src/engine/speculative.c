/* speculative.c - the speculative decoder (nemotron.h, "speculative decoding"): drafters (n-gram
 * prompt lookup, a draft model's session, the model's own MTP step, a caller's function), the
 * verify step that turns drafts into the tokens plain decoding gives, and the decoder's history
 * and counts.
 *
 * The decoder keeps one token "pending": the last emitted token, picked but not yet evaluated
 * (plain decoding evaluates a token only when it goes on). A step verifies [pending, drafts...]
 * in one pass; the token after each verified position is picked from that position's logits
 * exactly as plain decoding would pick it, and the step stops at the first pick that differs from
 * the next draft. Accept then keeps the positions whose tokens were emitted: the session is what
 * plain decoding makes, and the sampler saw what plain decoding shows it, in the same order.
 */
#include "engine.h"

#include <string.h>
#include <time.h>

#define SPEC_DEFAULT_K 16
/* n-gram lookup: the longest suffix of the history it tries to find earlier */
#define NGRAM_MATCH_MAX 8
/* The decoder's own drafters (n-gram and draft model; a caller's function decides for itself)
 * switch speculation off: this many verify steps in a row with nothing accepted turn it off for a
 * number of plain steps that doubles (from BACKOFF_MIN to BACKOFF_MAX) while probes keep failing:
 * a verify pass costs more than a decode step, so drafts that never land only slow it */
#define MISS_LIMIT 3
#define BACKOFF_MIN 8
#define BACKOFF_MAX 256
/* A switch-off because speculation did not pay doubles further; a draft model's lasts at least
 * long enough that what the steps since the last judgement lost against plain decoding (its
 * catch-up and drafts: tens of steps, where an n-gram probe loses a step or two) is at most
 * PROBE_SHARE of it: what made it not pay (the draft's cost on this device) rarely changes, and
 * probing again must not cost more than the bound the pay check keeps (5 %), which the first
 * judgement's loss shares (2 % rather than 3: a 256-token run of the demo's MTP step lost 5 - 8 %
 * with 3, docs/PERF.md). */
#define BACKOFF_MAX_UNPAID 1024
#define PROBE_SHARE 0.02
/* the most tokens a draft model catches up on after a switch-off (draft_catch_up) */
#define CATCH_UP_MAX 32
/* The pay check (both drafters): a verify step that keeps some drafts can still cost more than
 * the plain steps it replaces (a small model on the CPU is compute-bound: a pass of 1+k positions
 * costs nearly k+1 steps; a draft model's passes cost their share too). The decoder times its own
 * steps, drafting included: tokens per second of verify steps against plain steps, each an
 * exponential average (weight RATE_WEIGHT for the newest step) judged once it holds RATE_SAMPLES
 * steps; the plain rate is sampled with forced plain steps once the verify steps have been timed
 * and after RATE_REFRESH verify steps without one, and speculation that does not pay goes off as
 * after misses. Only the speed depends on the clock: every step emits plain decoding's tokens. */
#define RATE_SAMPLES 4
#define RATE_WEIGHT 0.25
#define RATE_REFRESH 64
/* A drafter whose drafts cost passes (a draft model, the MTP step) is judged early: once its
 * verify steps have EARLY_SAMPLES samples at under EARLY_SHARE of the plain rate, or its first
 * one ran under FIRST_SHARE of it (one token for more than two plain steps' time: its drafts
 * all failed), waiting for RATE_SAMPLES would only lose more (on the H200 the demo's MTP drafts
 * cost a short run 15 % before they were judged, and each verify step then still lost about two
 * plain steps: docs/PERF.md). 0.85, not 0.7: the demo's MTP drafts run at 0.6 - 0.75 of the
 * plain rate on the H200, so at 0.7 a 256-token run often waited for 4 samples (x0.92 - 0.97);
 * a drafter that pays and had two unlucky steps comes back at its next probe. */
#define EARLY_SAMPLES 2
#define EARLY_SHARE 0.85
#define FIRST_SHARE 0.5

enum drafter { DRAFT_NGRAM, DRAFT_MODEL, DRAFT_MTP, DRAFT_FN };

struct nemotron_spec {
    struct nt_err err;
    int ready;                        /* 0: the handle only carries a creation failure's message */
    nemotron_session *target;
    nemotron_sampler *sampler;        /* NULL: greedy */
    int K, V;
    enum drafter kind;
    nemotron_spec_draft_fn draft_fn;
    void *draft_user;
    nemotron_session *draft;          /* DRAFT_MODEL */
    int draft_done;                   /* history tokens the draft session has evaluated (a prefix) */
    int draft_lags;                   /* it lacks tokens of the prompt or of plain steps */
    /* the prompt and every emitted token; the last one is pending once started */
    int32_t *history;
    int n_hist, cap_hist;
    int started;                      /* the first token was emitted: history's last is pending */
    /* adaptation (n-gram and draft model): the draft length now, the verify steps in a row that
     * accepted nothing, the plain steps left before the next probe and the length of the next
     * switch-off */
    int draft_len, misses, off_steps, backoff;
    /* the pay check: tokens/s of plain and verify steps, the steps each average holds, verify
     * steps since the last plain one, and whether speculation is off because it did not pay */
    double rate_plain, rate_spec;
    int n_rate_plain, n_rate_spec, since_plain, unpaid;
    double plain_rates[RATE_SAMPLES]; /* the latest plain steps' rates (rate_plain: the highest) */
    int plain_next;
    /* since the last judgement: the seconds of verify steps and of the draft's catch-ups, and the
     * tokens those steps emitted (what they lost against plain steps) */
    double probe_s;
    int probe_tokens;
    /* a draft model's catch-ups: their seconds since the last judgement (part of probe_s), and the
     * latest one's seconds per token (what a probe's catch-up of CATCH_UP_MAX tokens will cost) */
    double catch_up_s, catch_up_token_s;
    float *logits;                    /* host [V]: one verified position's logits (sampling) */
    int32_t drafts[NEMOTRON_SPEC_MAX + 1], argmax[NEMOTRON_SPEC_MAX + 1];
    nemotron_spec_stats stats;
};

nemotron_spec_params nemotron_spec_default_params(void) {
    nemotron_spec_params p = {.spec_max = SPEC_DEFAULT_K};
    return p;
}

/* Whether the drafter's drafts cost passes: a draft model's or the MTP step's (n-gram lookup's
 * cost nothing; a caller's function is the caller's). */
static int costly(const nemotron_spec *sp) { return sp->kind == DRAFT_MODEL || sp->kind == DRAFT_MTP; }

/* On a backend that records a program per pass size (backend.h, programs), the decoder's own
 * drafters draft 1, 2, 4, 8 or 16 tokens: the verify passes the session rehearsed (expect_passes),
 * where every other length costs its first pass's launches and its second's recording, a few
 * steps of a small model each (docs/PERF.md). */
static int pass_size_drafts(const nemotron_spec *sp, int n) {
    if (!sp->target->model->fwd.be->programs || n < 2) return n;
    int p = 1;
    while (2 * p <= n) p *= 2;
    return p;
}

/* The passes the decoder's first steps run, for the session to rehearse (rehearsal.c, in this
 * order, while the prompt's pass runs): the verify pass of the first draft length, the MTP step's
 * draft (one row, or the two a kept draft leaves waiting), then verify passes of 1, 2, 4, ...
 * drafts, the lengths pass_size_drafts leaves. */
static void expect_passes(nemotron_spec *sp) {
    nemotron_session *s = sp->target;
    nt_session_expect(s, NT_PASS_VERIFY, 1 + pass_size_drafts(sp, sp->draft_len), NT_LOGITS_ARGMAX);
    if (sp->kind == DRAFT_MTP) {
        nt_session_expect(s, NT_PASS_MTP, 1, NT_LOGITS_LAST);
        nt_session_expect(s, NT_PASS_MTP, 2, NT_LOGITS_LAST);
    }
    /* a costly drafter's longer drafts come only once its first ones land (rarely, where the pay
     * check keeps it on at all): rehearsing them (~0.25 ms a kind on the demo, before the first
     * token) would mostly be paid for nothing */
    int longest = costly(sp) ? 2 : sp->K;
    for (int d = 1; d <= longest; d *= 2) nt_session_expect(s, NT_PASS_VERIFY, 1 + d, NT_LOGITS_ARGMAX);
}

static nemotron_status create(nemotron_spec *sp, nemotron_session *target, nemotron_sampler *sampler,
                              const nemotron_spec_params *p) {
    if (!target || !target->ready)
        return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the session handle holds no session");
    sp->K = p->spec_max ? p->spec_max : SPEC_DEFAULT_K;
    if (sp->K < 1 || sp->K > NEMOTRON_SPEC_MAX)
        return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "spec_max %d: 1..%d (0: %d)", p->spec_max, NEMOTRON_SPEC_MAX,
                       SPEC_DEFAULT_K);
    if (target->verify_max < sp->K + 1)
        return nt_fail(&sp->err, NEMOTRON_ERR_ARG,
                       "the session's verify_max is %d: a step of spec_max %d drafts verifies %d positions",
                       target->verify_max, sp->K, sp->K + 1);
    if (target->pos != 0)
        return nt_fail(&sp->err, NEMOTRON_ERR_ARG,
                       "the session is at position %d: the decoder starts at 0 (its history is the drafters' input)",
                       target->pos);
    sp->V = target->model->cfg.vocab_size;
    if (p->draft_fn) {
        sp->kind = DRAFT_FN;
    } else if (p->draft) {
        nemotron_session *d = p->draft;
        if (!d->ready) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the draft session handle holds no session");
        if (d == target) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the draft session is the session itself");
        if (d->model->cfg.vocab_size != sp->V)
            return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the draft model's vocabulary has %d tokens, the model's %d",
                           d->model->cfg.vocab_size, sp->V);
        if (d->n_ctx < target->n_ctx)
            return nt_fail(&sp->err, NEMOTRON_ERR_ARG,
                           "the draft session's context (%d) is shorter than the session's (%d): it follows every token",
                           d->n_ctx, target->n_ctx);
        if (d->pos != 0)
            return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the draft session is at position %d: it starts at 0", d->pos);
        sp->kind = DRAFT_MODEL;
    } else if (p->mtp) {
        if (!target->mtp)
            return nt_fail(&sp->err, NEMOTRON_ERR_ARG,
                           "mtp drafting: the session was made without its MTP step (nemotron_session_params.mtp)");
        sp->kind = DRAFT_MTP;
    } else {
        sp->kind = DRAFT_NGRAM;
    }
    sp->target = target;
    sp->sampler = sampler;
    sp->draft_fn = p->draft_fn;
    sp->draft_user = p->draft_user;
    sp->draft = p->draft_fn ? NULL : p->draft;
    /* n-gram drafts cost nothing to make; a draft model's or the MTP step's cost a pass each: it
     * starts with one and doubles while all land */
    sp->draft_len = sp->kind == DRAFT_NGRAM ? (sp->K < 4 ? sp->K : 4) : 1;
    sp->draft_lags = 1;
    sp->backoff = BACKOFF_MIN;
    /* the history never outgrows the context plus one step's emitted tokens */
    sp->cap_hist = target->n_ctx + NEMOTRON_SPEC_MAX + 2;
    sp->history = nt_calloc((size_t)sp->cap_hist, sizeof(int32_t));
    sp->logits = nt_calloc((size_t)sp->V, sizeof(float));
    if (!sp->history || !sp->logits) return nt_fail(&sp->err, NEMOTRON_ERR_NOMEM, "out of memory for the history");
    expect_passes(sp);
    return NEMOTRON_OK;
}

static void release(nemotron_spec *sp) {
    nt_free(sp->history);
    nt_free(sp->logits);
    sp->history = NULL;
    sp->logits = NULL;
}

nemotron_status nemotron_spec_new(nemotron_session *session, nemotron_sampler *sampler,
                                  const nemotron_spec_params *params, nemotron_spec **out) {
    if (!out) return NEMOTRON_ERR_ARG;
    nemotron_spec *sp = nt_calloc(1, sizeof *sp);
    *out = sp;
    if (!sp) return NEMOTRON_ERR_NOMEM;
    nemotron_spec_params defaults = nemotron_spec_default_params();
    nemotron_status st = create(sp, session, sampler, params ? params : &defaults);
    if (st) {
        release(sp);
        return st;
    }
    sp->ready = 1;
    return NEMOTRON_OK;
}

void nemotron_spec_free(nemotron_spec *sp) {
    if (!sp) return;
    release(sp);
    nt_free(sp);
}

const char *nemotron_spec_errmsg(const nemotron_spec *sp) { return sp ? sp->err.msg : "out of memory"; }

nemotron_spec_stats nemotron_spec_get_stats(const nemotron_spec *sp) {
    nemotron_spec_stats none = {0};
    return sp ? sp->stats : none;
}

static nemotron_status usable(nemotron_spec *sp) {
    if (!sp) return NEMOTRON_ERR_ARG;
    if (!sp->ready) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "the decoder handle holds no decoder");
    return NEMOTRON_OK;
}

/* A session's failure as the decoder's: same status, its message. */
static nemotron_status from_session(nemotron_spec *sp, nemotron_status st, const nemotron_session *s,
                                    const char *what) {
    return nt_fail(&sp->err, st, "%s: %s", what, nemotron_session_errmsg(s));
}

nemotron_status nemotron_spec_prefill(nemotron_spec *sp, const int32_t *tokens, int n) {
    nemotron_status st = usable(sp);
    if (st) return st;
    if (sp->started) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "prefill after the first nemotron_spec_next");
    if (n < 1 || !tokens) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "prefill of %d tokens%s", n, tokens ? "" : " (NULL)");
    sp->target->mtp_follow = 1; /* the MTP step sees the whole prompt */
    if ((st = nemotron_session_eval(sp->target, tokens, n, NULL))) return from_session(sp, st, sp->target, "prefill");
    /* and does so now, with the prompt, all but the row that waits for the first token */
    if (sp->kind == DRAFT_MTP && (st = nt_session_mtp_settle(sp->target)))
        return from_session(sp, st, sp->target, "prefill's MTP step");
    /* the session took them, so they fit its context and so the history */
    memcpy(sp->history + sp->n_hist, tokens, (size_t)n * sizeof(int32_t));
    sp->n_hist += n;
    sp->err.msg[0] = 0;
    return NEMOTRON_OK;
}

/* The token plain decoding picks from logits (the sampler's draw, recorded; or argmax). */
static nemotron_status pick(nemotron_spec *sp, const float *logits, int32_t argmax, int32_t *token) {
    *token = argmax;
    if (!sp->sampler) return NEMOTRON_OK;
    if (!logits) return nt_fail(&sp->err, NEMOTRON_ERR_DEVICE, "the logits did not come back from the device");
    *token = nemotron_sampler_sample(sp->sampler, logits);
    nemotron_status st = nemotron_sampler_accept(sp->sampler, *token);
    if (st) return nt_fail(&sp->err, st, "sampler: %s", nemotron_sampler_errmsg(sp->sampler));
    return NEMOTRON_OK;
}

/* ---- drafters ---- */

/* n-gram prompt lookup: the tokens that followed the latest earlier occurrence of the longest
 * suffix of the history (up to NGRAM_MATCH_MAX tokens) that occurred before. */
static int draft_ngram(const int32_t *h, int n, int32_t *draft, int max) {
    for (int len = n - 1 < NGRAM_MATCH_MAX ? n - 1 : NGRAM_MATCH_MAX; len >= 1; len--) {
        const int32_t *suffix = h + n - len;
        /* an occurrence starting at i ends before the suffix starts, or overlaps it: either way
         * it is earlier text, and its continuation h[i + len ..] exists */
        for (int i = n - len - 1; i >= 0; i--) {
            if (memcmp(h + i, suffix, (size_t)len * sizeof(int32_t))) continue;
            int k = 0;
            while (k < max && i + len + k < n) {
                draft[k] = h[i + len + k];
                k++;
            }
            return k;
        }
    }
    return 0;
}

/* Brings the draft session to the history without its pending token (one eval of what it lacks).
 * After a switch-off it lacks the plain steps' tokens, up to BACKOFF_MAX_UNPAID of them, which
 * would cost it a long pass at every probe: past CATCH_UP_MAX it starts again on the latest
 * CATCH_UP_MAX tokens (its drafts then see less of the text; which tokens are emitted does not
 * depend on them). The prompt, which it has never seen, it evaluates whole. */
static nemotron_status draft_catch_up(nemotron_spec *sp, int *evaluated) {
    int want = sp->n_hist - 1;
    *evaluated = 0;
    if (sp->draft_done >= want) return NEMOTRON_OK;
    if (sp->draft_done > 0 && want - sp->draft_done > CATCH_UP_MAX) {
        nemotron_session_reset(sp->draft);
        sp->draft_done = want - CATCH_UP_MAX;
    }
    nemotron_status st = nemotron_session_eval(sp->draft, sp->history + sp->draft_done, want - sp->draft_done, NULL);
    if (st) return from_session(sp, st, sp->draft, "draft session");
    *evaluated = want - sp->draft_done;
    sp->draft_done = want;
    return NEMOTRON_OK;
}

/* The draft model's greedy continuation of the history (the draft session caught up with it):
 * evaluates the pending token, then each draft but the last. *snap, when the draft session may
 * have to be put back, holds its state from before (the caller frees it). */
static nemotron_status draft_model(nemotron_spec *sp, int max, int *n_draft, nemotron_snapshot **snap) {
    *n_draft = 0;
    *snap = NULL;
    nemotron_status st;
    int room = sp->draft->n_ctx - sp->draft->pos;
    if (max > room) max = room; /* each draft needs the position before it evaluated */
    if (max < 1) return NEMOTRON_OK;
    if (max > 1 && (st = nemotron_session_snapshot(sp->draft, snap)))
        return from_session(sp, st, sp->draft, "draft snapshot");
    int32_t token = sp->history[sp->n_hist - 1];
    for (int i = 0; i < max; i++) {
        if (i > 0) token = sp->drafts[i - 1];
        if ((st = nemotron_session_eval(sp->draft, &token, 1, NULL)))
            return from_session(sp, st, sp->draft, "draft session");
        sp->drafts[i] = nemotron_session_argmax(sp->draft);
    }
    *n_draft = max;
    return NEMOTRON_OK;
}

/* After a step that drafted n_draft tokens and kept `kept` of them. The draft session evaluated
 * pending + drafts[0..n_draft - 1) (the last draft needs no eval to be drafted); it stays where
 * that all matches the history, else the snapshot puts it back and the kept tokens are run again. */
static nemotron_status draft_settle(nemotron_spec *sp, int base, int n_draft, int kept, nemotron_snapshot *snap) {
    if (kept >= n_draft - 1) {
        sp->draft_done = base + n_draft;
        return NEMOTRON_OK;
    }
    nemotron_status st = nemotron_session_restore(sp->draft, snap);
    if (st) return from_session(sp, st, sp->draft, "draft restore");
    sp->draft_done = base;
    /* one pass over pending and the kept drafts (one arithmetic per position: the same state) */
    if ((st = nemotron_session_eval(sp->draft, sp->history + base, kept + 1, NULL)))
        return from_session(sp, st, sp->draft, "draft session");
    sp->draft_done = base + kept + 1;
    return NEMOTRON_OK;
}

/* ---- steps ---- */

/* Appends a token to the history (room: cap_hist covers the context and one step). */
static void remember(nemotron_spec *sp, int32_t t) { sp->history[sp->n_hist++] = t; }

/* pick from a session's last logits; greedy decoding reads only their argmax, which leaves the
 * logits on the device (session.c: logits_fetch). */
static nemotron_status pick_last(nemotron_spec *sp, const nemotron_session *s, int32_t *token) {
    return pick(sp, sp->sampler ? nemotron_session_logits(s) : NULL, nemotron_session_argmax(s), token);
}

/* One plain decode step: evaluate the pending token, pick the next. */
static nemotron_status plain_step(nemotron_spec *sp, int32_t *out) {
    nemotron_session *s = sp->target;
    nemotron_status st = nemotron_session_eval(s, &sp->history[sp->n_hist - 1], 1, NULL);
    if (st) return from_session(sp, st, s, "decode");
    sp->stats.passes++;
    if ((st = pick_last(sp, s, out))) return st;
    remember(sp, *out);
    return NEMOTRON_OK;
}


/* Whether this step drafts: not while switched off, nor when the pay check wants a timed plain
 * step because the verify steps were timed and its plain rate has too few samples, or an old one
 * (n-gram drafting starts at once: the text right after a prompt is often the most quotable; a
 * costly drafter's plain steps come first, so that its verify steps are judged as soon as they
 * have samples). A caller's function always drafts. */
static int drafting_now(nemotron_spec *sp) {
    if (sp->kind == DRAFT_FN) return 1;
    if (sp->off_steps > 0) {
        sp->off_steps--;
        return 0;
    }
    if (costly(sp) && sp->n_rate_plain < RATE_SAMPLES) return 0;
    return !(sp->n_rate_spec >= RATE_SAMPLES && (sp->n_rate_plain < RATE_SAMPLES || sp->since_plain >= RATE_REFRESH));
}

/* The drafts this step asks for, at most max: 0 means a plain step. */
static nemotron_status want_drafts(nemotron_spec *sp, int max, int *n, nemotron_snapshot **snap) {
    *n = 0;
    int len = pass_size_drafts(sp, max < sp->draft_len ? max : sp->draft_len);
    switch (sp->kind) {
    case DRAFT_FN: {
        int got = sp->draft_fn(sp->draft_user, sp->history, sp->n_hist, sp->drafts, max);
        *n = got < 0 ? 0 : got > max ? max : got;
        for (int i = 0; i < *n; i++)
            if (sp->drafts[i] < 0 || sp->drafts[i] >= sp->V) *n = i; /* an impossible draft ends it */
        return NEMOTRON_OK;
    }
    case DRAFT_MODEL:
        return draft_model(sp, len, n, snap);
    case DRAFT_MTP: {
        nemotron_status st = nt_session_mtp_draft(sp->target, sp->history[sp->n_hist - 1], len, sp->drafts, n);
        return st ? from_session(sp, st, sp->target, "MTP draft") : NEMOTRON_OK;
    }
    case DRAFT_NGRAM:
        *n = pass_size_drafts(sp, draft_ngram(sp->history, sp->n_hist, sp->drafts, len));
        return NEMOTRON_OK;
    }
    return NEMOTRON_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double (*nt_spec_clock)(void) = now_s;

/* Adds a verify step's tokens per second to the pay check's average. */
static void add_rate(double *rate, int *n, double tokens, double seconds) {
    double r = tokens / (seconds > 1e-9 ? seconds : 1e-9);
    *rate = *n ? *rate + RATE_WEIGHT * (r - *rate) : r;
    if (*n < RATE_SAMPLES) ++*n;
}

/* Adds a plain step's rate: the plain rate is the highest of the latest RATE_SAMPLES. A plain
 * step costs the same every time but for one-off costs that only slow it (the first pass of its
 * kind on a backend that records pass programs, a busy host); an average of the first steps,
 * which carry them, made speculation that loses look as if it paid (the demo's MTP step on the
 * H200, docs/PERF.md). */
static void add_plain_rate(nemotron_spec *sp, double seconds) {
    sp->plain_rates[sp->plain_next] = 1.0 / (seconds > 1e-9 ? seconds : 1e-9);
    sp->plain_next = (sp->plain_next + 1) % RATE_SAMPLES;
    if (sp->n_rate_plain < RATE_SAMPLES) sp->n_rate_plain++;
    sp->rate_plain = 0;
    for (int i = 0; i < sp->n_rate_plain; i++)
        if (sp->plain_rates[i] > sp->rate_plain) sp->rate_plain = sp->plain_rates[i];
}

/* The seconds this thread has spent in one-off work of passes (backend.h, one_off_seconds: the
 * recording of pass programs) on the sessions' backends: the pay check takes them off the step
 * they fell in. Without this, a short run's first verify steps - the second pass of each length
 * is captured, 0.4 - 0.6 ms on the demo against 0.4 ms for the pass - looked as if speculation
 * did not pay (docs/PERF.md). Counted once per kind of backend (the count is the thread's). */
static double one_off_seconds(const nemotron_spec *sp) {
    struct nt_backend *be = sp->target->model->fwd.be, *dbe = sp->draft ? sp->draft->model->fwd.be : NULL;
    double s = be->ops->one_off_seconds ? be->ops->one_off_seconds(be) : 0;
    if (dbe && dbe->ops != be->ops && dbe->ops->one_off_seconds) s += dbe->ops->one_off_seconds(dbe);
    return s;
}

/* The clock's seconds since t0 less the one-off work since o0. */
static double step_seconds(const nemotron_spec *sp, double t0, double o0) {
    return nt_spec_clock() - t0 - (one_off_seconds(sp) - o0);
}

/* Speculation off for the next `backoff` steps, then a probe; the next switch-off waits twice as
 * long (up to BACKOFF_MAX, or BACKOFF_MAX_UNPAID while speculation does not pay). */
static void switch_off(nemotron_spec *sp) {
    int most = sp->unpaid ? BACKOFF_MAX_UNPAID : BACKOFF_MAX;
    sp->off_steps = sp->backoff;
    sp->backoff = sp->backoff * 2 > most ? most : sp->backoff * 2;
}

/* After a verify step of the decoder's own drafters: longer drafts after a full acceptance,
 * shorter after a partial one (a draft model's drafts cost a pass each); off for a while after
 * MISS_LIMIT steps with nothing accepted, or while the verify steps return fewer tokens per
 * second than plain steps (the pay check). */
static void adapt(nemotron_spec *sp, int n_draft, int kept) {
    if (kept == n_draft) {
        sp->draft_len = sp->draft_len * 2 > sp->K ? sp->K : sp->draft_len * 2;
    } else {
        sp->draft_len = kept + 1 > 1 ? kept + 1 : 1;
    }
    int early = costly(sp) && ((sp->n_rate_spec >= EARLY_SAMPLES && sp->rate_spec < EARLY_SHARE * sp->rate_plain) ||
                               (sp->n_rate_spec == 1 && sp->rate_spec < FIRST_SHARE * sp->rate_plain));
    if (sp->n_rate_plain >= RATE_SAMPLES && (sp->n_rate_spec >= RATE_SAMPLES || early)) {
        sp->unpaid = sp->rate_spec < sp->rate_plain;
        double lost_steps = sp->probe_s * sp->rate_plain - sp->probe_tokens;
        /* the next probe's loss: this judgement's, its catch-up counted as a full one if that costs
         * more (the first judgement's covered a short prompt; a probe's covers CATCH_UP_MAX tokens) */
        double caught = sp->catch_up_s * sp->rate_plain, full = sp->catch_up_token_s * CATCH_UP_MAX * sp->rate_plain;
        if (sp->kind == DRAFT_MODEL && full > caught) lost_steps += full - caught;
        sp->probe_s = 0;
        sp->probe_tokens = 0;
        sp->catch_up_s = 0;
        if (sp->unpaid) {
            switch_off(sp);
            sp->n_rate_spec = 0; /* the probe after it is judged on its own steps */
            if (costly(sp)) {
                if (lost_steps / PROBE_SHARE > sp->off_steps)
                    sp->off_steps = lost_steps / PROBE_SHARE < BACKOFF_MAX_UNPAID ? (int)(lost_steps / PROBE_SHARE)
                                                                                  : BACKOFF_MAX_UNPAID;
                sp->draft_len = 1; /* and its probe starts small: long drafts cost the most */
            }
            return;
        }
    }
    if (kept > 0) {
        sp->misses = 0;
        if (!sp->unpaid) sp->backoff = BACKOFF_MIN; /* a probe after a switch-off for cost has yet to pay */
        return;
    }
    if (++sp->misses < MISS_LIMIT) return;
    switch_off(sp);
    sp->misses = MISS_LIMIT - 1; /* a failed probe switches off again at once */
    sp->draft_len = 1;
}

nemotron_status nemotron_spec_next(nemotron_spec *sp, int32_t *out, int max_out, int *n_out) {
    if (n_out) *n_out = 0;
    nemotron_status st = usable(sp);
    if (st) return st;
    if (!out || !n_out || max_out < 1)
        return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "next: out %s, n_out %s, max_out %d (at least 1)",
                       out ? "given" : "NULL", n_out ? "given" : "NULL", max_out);
    nemotron_session *s = sp->target;
    if (sp->n_hist == 0) return nt_fail(&sp->err, NEMOTRON_ERR_ARG, "next before a prefill: no logits to pick from");
    if (!sp->started) {
        /* the first token comes from the prefill's logits */
        if ((st = pick_last(sp, s, &out[0]))) return st;
        /* the MTP step takes in the prompt's last row now (the prefill settled the others): its
         * first steps are plain ones, which skip it */
        if (sp->kind == DRAFT_MTP && (st = nt_session_mtp_catch_up(s, out[0])))
            return from_session(sp, st, s, "MTP step");
        remember(sp, out[0]);
        sp->started = 1;
        sp->stats.emitted++;
        *n_out = 1;
        sp->err.msg[0] = 0;
        return NEMOTRON_OK;
    }
    if (s->pos + 1 > s->n_ctx)
        return nt_fail(&sp->err, NEMOTRON_ERR_CONTEXT, "the session's context (%d) has no room for the last token",
                       s->n_ctx);
    /* drafts: at most K, one fewer than the caller takes, and what the context holds after the
     * pending token */
    int max = sp->K;
    if (max > max_out - 1) max = max_out - 1;
    if (max > s->n_ctx - s->pos - 1) max = s->n_ctx - s->pos - 1;
    int n_draft = 0;
    nemotron_snapshot *snap = NULL;
    int base = sp->n_hist - 1; /* the pending token's place in the history */
    int drafting = max > 0 && drafting_now(sp);
    /* the MTP step runs only for drafts: a plain step costs what plain decoding costs (the pay
     * check's yardstick), and the positions it skips are missing from the step's attention */
    if (sp->kind == DRAFT_MTP) s->mtp_follow = drafting;
    /* the tokens a draft model missed in the prompt and plain steps, before the step's clock
     * starts: the price of coming back (one pass, counted against the probe), not of this step;
     * after a verify step it lacks at most that step's last token, which is part of drafting */
    if (drafting && sp->kind == DRAFT_MODEL && sp->draft_lags) {
        double c0 = nt_spec_clock(), o0 = one_off_seconds(sp);
        int caught = 0;
        if ((st = draft_catch_up(sp, &caught))) goto done;
        sp->draft_lags = 0;
        double seconds = step_seconds(sp, c0, o0);
        sp->probe_s += seconds;
        sp->catch_up_s += seconds;
        if (caught > 0) sp->catch_up_token_s = seconds / caught;
    }
    /* the step's time, drafting included, for the pay check */
    double t0 = nt_spec_clock(), o0 = one_off_seconds(sp);
    int caught = 0; /* (the last step's last draft: part of this step) */
    if (drafting && sp->kind == DRAFT_MODEL && (st = draft_catch_up(sp, &caught))) goto done;
    if (drafting && (st = want_drafts(sp, max, &n_draft, &snap))) goto done;
    if (n_draft == 0) {
        if ((st = plain_step(sp, &out[0]))) goto done;
        sp->stats.emitted++;
        *n_out = 1;
        sp->draft_lags = 1;
        if (sp->kind != DRAFT_FN) {
            add_plain_rate(sp, step_seconds(sp, t0, o0));
            sp->since_plain = 0;
        }
        goto done;
    }
    /* verify [pending, drafts...]: position j's logits give the token after drafts[0..j) */
    int32_t tokens[NEMOTRON_SPEC_MAX + 1];
    tokens[0] = sp->history[base];
    memcpy(tokens + 1, sp->drafts, (size_t)n_draft * sizeof(int32_t));
    if ((st = nemotron_session_verify(s, tokens, n_draft + 1, sp->argmax))) {
        st = from_session(sp, st, s, "verify");
        goto done;
    }
    sp->stats.passes++;
    sp->stats.drafted += n_draft;
    int kept = 0, emitted = 0;
    for (int j = 0; j <= n_draft; j++) {
        if (sp->sampler && (st = nemotron_session_verify_logits(s, j, sp->logits))) {
            st = from_session(sp, st, s, "verify logits");
            goto done;
        }
        int32_t t;
        if ((st = pick(sp, sp->logits, sp->argmax[j], &t))) goto done;
        out[emitted++] = t;
        remember(sp, t);
        if (j == n_draft || t != sp->drafts[j]) break;
        kept++;
    }
    /* keep pending and the drafts emitted; the last emitted token is the new pending one */
    if ((st = nemotron_session_accept(s, kept + 1))) {
        st = from_session(sp, st, s, "accept");
        goto done;
    }
    sp->stats.accepted += kept;
    sp->stats.emitted += emitted;
    *n_out = emitted;
    if (sp->kind == DRAFT_MODEL) st = draft_settle(sp, base, n_draft, kept, snap);
    if (!st && sp->kind != DRAFT_FN) {
        double seconds = step_seconds(sp, t0, o0);
        add_rate(&sp->rate_spec, &sp->n_rate_spec, emitted, seconds);
        sp->probe_s += seconds;
        sp->probe_tokens += emitted;
        sp->since_plain++;
        adapt(sp, n_draft, kept);
    }
done:
    nemotron_snapshot_free(snap);
    if (st) *n_out = 0;
    else sp->err.msg[0] = 0;
    return st;
}
