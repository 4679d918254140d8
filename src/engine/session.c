/* session.c - the public session handle: one timeline of a model, run in passes.
 *
 * A session owns its state slot (conv rings, SSM states, KV caches) and the activation buffers
 * of one pass, all allocated at creation. nemotron_session_eval checks every token and the
 * context length before it touches anything, then cuts the tokens into passes of at most
 * pass_max positions; each pass runs inside the allocation guard (no allocation in a pass).
 * A device error (backend.h: nt_backend.fault) met by a pass is returned as NEMOTRON_ERR_DEVICE
 * and leaves the session refused until it is freed: its state is no longer known.
 *
 * Embeddings input goes through a resident buffer written before each pass. A verify pass is one
 * pass that keeps the recurrent state before every position (nt_pass.snap); accept rolls the
 * state back to one of those slots and the position back, which drops the later KV rows (rows
 * past the position are never read). Snapshots copy the state out and back, KV rows included.
 *
 * A session made with mtp keeps the model's MTP step in step (MODEL.md 3.8): each pass of tokens
 * leaves its final hidden rows waiting, and they run through the step before the next pass (the
 * token after the last waiting row is that pass's first), or when a speculative decoder drafts
 * (nt_session_mtp_draft: the waiting rows with the pending token, then steps chained on the
 * step's own outputs). The step's attention has its own KV cache; snapshots carry it.
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>

/* The context a session holds when the caller does not say. */
#define NT_DEFAULT_N_CTX 4096

nemotron_session_params nemotron_session_default_params(void) {
    nemotron_session_params p = {.n_ctx = NT_DEFAULT_N_CTX, .pass_max = 0, .verify_max = 0, .mtp = 0};
    return p;
}

static nemotron_status create(nemotron_session *s, nemotron_model *m, const nemotron_session_params *p) {
    if (!m || !m->loaded)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "the model handle holds no loaded model");
    s->model = m;
    nt_rehearsals_init(s);
    s->n_ctx = p->n_ctx > 0 ? p->n_ctx : NT_DEFAULT_N_CTX;
    s->pass_max = p->pass_max > 0 ? p->pass_max : m->fwd.be->pass_default;
    if (s->pass_max > NEMOTRON_PASS_MAX)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "pass_max %d is larger than NEMOTRON_PASS_MAX (%d)",
                       s->pass_max, NEMOTRON_PASS_MAX);
    if (s->pass_max < 1) s->pass_max = 1; /* a backend that names none */
    if (p->verify_max < 0 || p->verify_max > s->pass_max)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                       "verify_max %d: a verify pass holds 0 (none) to pass_max (%d) positions", p->verify_max,
                       s->pass_max);
    s->verify_max = p->verify_max;
    if (p->mtp && !m->cfg.n_mtp_layer)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                       "mtp: the model has no MTP layers (config.json's num_nextn_predict_layers is 0 or absent)");
    s->mtp = s->mtp_follow = p->mtp != 0;
    nemotron_status st = nt_state_alloc(&m->fwd, s->n_ctx, s->verify_max, s->mtp, &s->state, &s->err);
    if (st) return st;
    if ((st = nt_acts_alloc(&m->fwd, s->pass_max, s->mtp, &s->acts, &s->err))) return st;
    if (s->mtp && !(s->mtp_next = nt_calloc((size_t)s->pass_max, sizeof(int32_t))))
        return nt_fail(&s->err, NEMOTRON_ERR_NOMEM, "out of memory for the MTP step's tokens");
    s->last_logits = nt_calloc((size_t)m->cfg.vocab_size, sizeof(float));
    s->prev_logits = nt_calloc((size_t)m->cfg.vocab_size, sizeof(float));
    s->verify_argmax = nt_calloc((size_t)(s->verify_max > 0 ? s->verify_max : 1), sizeof(int32_t));
    s->hidden_check = nt_calloc((size_t)m->cfg.hidden_size, sizeof(float));
    if (!s->last_logits || !s->prev_logits || !s->verify_argmax || !s->hidden_check)
        return nt_fail(&s->err, NEMOTRON_ERR_NOMEM, "out of memory for the logits");
    nt_state_clear(&m->fwd, &s->state);
    s->last_argmax = -1;
    nt_session_expect(s, NT_PASS_MAIN, 1, NT_LOGITS_LAST); /* a decode step */
    return NEMOTRON_OK;
}

static void release(nemotron_session *s) {
    if (s->model) {
        nt_state_free(&s->model->fwd, &s->state);
        nt_acts_free(&s->model->fwd, &s->acts);
    }
    nt_free(s->last_logits);
    nt_free(s->prev_logits);
    nt_free(s->verify_argmax);
    nt_free(s->mtp_next);
    nt_free(s->hidden_check);
    s->hidden_check = NULL;
    s->last_logits = s->prev_logits = NULL;
    s->verify_argmax = NULL;
    s->mtp_next = NULL;
}

nemotron_status nemotron_session_new(nemotron_model *m, const nemotron_session_params *params,
                                     nemotron_session **out) {
    if (!out) return NEMOTRON_ERR_ARG;
    nemotron_session *s = nt_calloc(1, sizeof *s);
    *out = s;
    if (!s) return NEMOTRON_ERR_NOMEM;
    nemotron_session_params defaults = nemotron_session_default_params();
    nemotron_status st = create(s, m, params ? params : &defaults);
    if (st != NEMOTRON_OK && s->model && s->model->fwd.be->fault[0])
        st = nt_fail(&s->err, NEMOTRON_ERR_DEVICE, "the device failed: %s", s->model->fwd.be->fault);
    if (st != NEMOTRON_OK) {
        release(s);
        return st;
    }
    s->ready = 1;
    return NEMOTRON_OK;
}

void nemotron_session_free(nemotron_session *s) {
    if (!s) return;
    release(s);
    nt_free(s);
}

const char *nemotron_session_errmsg(const nemotron_session *s) { return s ? s->err.msg : "out of memory"; }

/* The session holds no last logits (nor their argmax) from here on. */
static void forget_last(nemotron_session *s) {
    s->has_last = 0;
    s->logits_dev = NULL;
    s->last_argmax = -1;
}

/* Marks the session refused and says why (the device's first fault, which may have come from
 * another session's pass: a GPU's context fails for all of them). */
static nemotron_status device_failed(nemotron_session *s) {
    s->broken = 1;
    forget_last(s);
    return nt_fail(&s->err, NEMOTRON_ERR_DEVICE, "the device failed: %s; this session is unusable: free it",
                   s->model->fwd.be->fault);
}

/* NEMOTRON_OK when the session can run: a handle that holds a session that no device error
 * broke. */
static nemotron_status usable(nemotron_session *s) {
    if (!s) return NEMOTRON_ERR_ARG; /* no handle to carry a message */
    if (!s->ready) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "the session handle holds no session");
    if (s->broken) return device_failed(s);
    return NEMOTRON_OK;
}

/* n positions from the session's position fit its context (checked before the input is read: a
 * wrong n must not read past the caller's array). */
static nemotron_status fits(nemotron_session *s, int n, const void *input, const char *what) {
    if (n < 1) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "%s needs at least one position (n = %d)", what, n);
    if (!input) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "%s: the input is NULL (n = %d)", what, n);
    if (n > s->n_ctx - s->pos)
        return nt_fail(&s->err, NEMOTRON_ERR_CONTEXT,
                       "%d positions at position %d would pass the context length %d", n, s->pos, s->n_ctx);
    return NEMOTRON_OK;
}

static nemotron_status tokens_valid(nemotron_session *s, const int32_t *tokens, int n) {
    int V = s->model->fwd.V;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                           "token %d at index %d is outside the vocabulary [0, %d)", (int)tokens[i], i, V);
    return NEMOTRON_OK;
}

/* The first of `rows` logits rows of V values that holds a NaN or an infinity, or whose values
 * are all equal, or -1. Both come from finite weights and inputs only through an overflow or a
 * non-finite weight or config value (all equal: a norm whose sum of squares overflowed scales
 * the hidden state to zero, and every logit is the same); sampling from them would print
 * garbage as if it were text, so a pass that returns them fails. */
static long first_degenerate_row(const float *logits, long rows, int V) {
    for (long r = 0; r < rows; r++) {
        const float *l = logits + (size_t)r * V;
        int all_equal = V > 1;
        for (int i = 0; i < V; i++) {
            if (!isfinite(l[i])) return r;
            all_equal &= l[i] == l[0];
        }
        if (all_equal) return r;
    }
    return -1;
}

/* The first position of a pass of n whose final hidden row (acts.x) holds a NaN or an infinity,
 * or -1. Such a value reaches every later position through the recurrence and the attention, so
 * the last row tells whether there is one; the others are read back only then. row: host [H]. */
static int all_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}
static long first_nonfinite_row(nemotron_session *s, int n, float *row) {
    const struct nt_forward *f = &s->model->fwd;
    size_t H = (size_t)f->H;
    f->be->ops->to_host(f->be, row, s->acts.x + (size_t)(n - 1) * H, H * sizeof(float));
    if (f->be->fault[0] || all_finite(row, H)) return -1;
    for (int t = 0; t < n - 1; t++) {
        f->be->ops->to_host(f->be, row, s->acts.x + (size_t)t * H, H * sizeof(float));
        if (!all_finite(row, H)) return t;
    }
    return n - 1;
}

/* The error of a pass whose logits at position pos are degenerate (first_degenerate_row; for the
 * rows only their argmax came back for, the backend's argmax of -1). */
static nemotron_status numeric_failure(nemotron_session *s, long pos) {
    return nt_fail(&s->err, NEMOTRON_ERR_NUMERIC,
                   "the logits of position %ld are not finite (NaN or infinity) or all equal: the model's "
                   "weights or config values overflow; the session holds them now: reset it",
                   pos);
}

/* The last logits into last_logits, when they are still only on the device (logits_dev): before
 * they are read, and before a pass that writes acts.logits while they must stay (verify keeps them
 * for accept(0); the MTP step's passes). */
static void logits_fetch(nemotron_session *s) {
    if (!s->logits_dev) return;
    struct nt_backend *be = s->model->fwd.be;
    be->ops->to_host(be, s->last_logits, s->logits_dev, (size_t)s->model->fwd.V * sizeof(float));
    s->logits_dev = NULL;
}

/* ---- passes ---- */

struct nt_pass nt_session_main_pass(const nemotron_session *s, const int32_t *tokens, int n, enum nt_logits want,
                                    int snap) {
    struct nt_pass p = {.n = n, .pos0 = s->pos, .tokens = tokens, .snap = snap, .want = want,
                        .hidden_out = s->mtp ? s->acts.hidden : NULL, .scratch = s->acts.scratch};
    return p;
}

struct nt_pass nt_session_mtp_pass(const nemotron_session *s, int pos0, const int32_t *tokens, int n,
                                   enum nt_logits want) {
    struct nt_pass p = {.n = n, .pos0 = pos0, .tokens = tokens, .mtp = 1, .want = want, .scratch = s->acts.scratch};
    return p;
}

/* Queues a pass on the backend (a CPU pass runs now); the kinds the session expects are then
 * rehearsed while it runs (rehearsal.c; after it was queued, so that what its first run sets up
 * exists). */
static void launch(nemotron_session *s, const struct nt_pass *p) {
    nt_pass_enter();
    nt_forward_pass(&s->model->fwd, &s->state, &s->acts, p);
    nt_pass_leave();
    nt_session_rehearse(s, 0);
}

static void launch_mtp(nemotron_session *s, const struct nt_pass *p) {
    nt_pass_enter();
    nt_forward_mtp_pass(&s->model->fwd, &s->state, &s->acts, p);
    nt_pass_leave();
    nt_session_rehearse(s, 1);
}

/* ---- the MTP step ---- */

/* Runs the MTP step over the first n waiting rows (their tokens after them in mtp_next; want:
 * the logits it leaves in acts). The caller says what waits afterwards. */
static void mtp_run(nemotron_session *s, int n, enum nt_logits want) {
    NT_ASSERT(n > 0 && n <= s->mtp_rows && s->mtp_rows <= s->pass_max);
    struct nt_pass p = nt_session_mtp_pass(s, s->pos - s->mtp_rows, s->mtp_next, n, want);
    launch_mtp(s, &p);
}

/* Runs the MTP step over every waiting row, next being the token after the last. No row waits
 * afterwards. */
static void mtp_run_waiting(nemotron_session *s, int32_t next, enum nt_logits want) {
    s->mtp_next[s->mtp_rows - 1] = next;
    mtp_run(s, s->mtp_rows, want);
    s->mtp_rows = 0;
}

/* Before a main pass whose first token is `first`: the waiting rows run (or, not following, are
 * dropped). */
static void mtp_before_pass(nemotron_session *s, int32_t first) {
    if (s->mtp_rows && s->mtp_follow) mtp_run_waiting(s, first, NT_LOGITS_NONE);
    s->mtp_rows = 0;
}

/* After a main pass of tokens[0..n) that left its hidden rows in acts.hidden: they wait. */
static void mtp_after_pass(nemotron_session *s, const int32_t *tokens, int n) {
    memcpy(s->mtp_next, tokens + 1, (size_t)(n - 1) * sizeof(int32_t));
    s->mtp_rows = n;
}

/* Runs n checked positions (tokens, or host embeddings [n][H]) in passes of up to pass_max. */
static nemotron_status run(nemotron_session *s, const int32_t *tokens, const float *embd, int n, float *logits) {
    const struct nt_forward *f = &s->model->fwd;
    int V = f->V, H = f->H;
    struct nt_backend *be = f->be;
    if (be->fault[0]) return device_failed(s);
    s->verify_n = 0; /* the state moves on: a verify pass before can no longer be cut short */
    for (int off = 0; off < n;) {
        int chunk = n - off < s->pass_max ? n - off : s->pass_max;
        int last = off + chunk == n;
        enum nt_logits want = logits ? NT_LOGITS_ALL : last ? NT_LOGITS_LAST : NT_LOGITS_NONE;
        struct nt_pass p;
        if (embd) {
            be->ops->write(be, s->acts.embd, embd + (size_t)off * H, (size_t)chunk * H * sizeof(float));
            p = (struct nt_pass){.n = chunk, .pos0 = s->pos, .embd = s->acts.embd, .want = want,
                                 .scratch = s->acts.scratch};
            s->mtp_rows = 0; /* the MTP step takes tokens: it skips what waits and these */
        } else {
            p = nt_session_main_pass(s, tokens + off, chunk, want, 0);
            if (s->mtp) mtp_before_pass(s, p.tokens[0]);
        }
        if (want != NT_LOGITS_NONE) forget_last(s); /* the pass writes over the last logits' row */
        launch(s, &p);
        if (p.hidden_out) mtp_after_pass(s, p.tokens, chunk);
        if (logits)
            be->ops->to_host(be, logits + (size_t)off * V, s->acts.logits, (size_t)chunk * V * sizeof(float));
        if (last) { /* the logits stay on the device until asked for (logits_fetch) */
            int row = want == NT_LOGITS_ALL ? chunk - 1 : 0;
            be->ops->to_host(be, &s->last_argmax, s->acts.argmax + row, sizeof(int32_t));
            s->logits_dev = s->acts.logits + (size_t)row * V;
            s->has_last = 1;
        }
        if (be->fault[0]) return device_failed(s); /* to_host waited for the pass: any fault shows */
        int pos0 = s->pos;
        s->pos += chunk;
        off += chunk;
        /* Non-finite values are named where they first appear: a pass without logits (a prefill's
         * earlier ones) by its hidden rows; a pass with logits by them (a non-finite lm_head, or
         * logits all equal from a hidden state an overflowed norm scaled to zero), refined to the
         * first non-finite hidden row when there is one. Decoding pays nothing for it. */
        long bad = -1;
        if (want == NT_LOGITS_NONE) {
            bad = first_nonfinite_row(s, chunk, s->hidden_check);
        } else {
            if (logits) bad = first_degenerate_row(logits + (size_t)(off - chunk) * V, chunk, V);
            if (bad < 0 && last && s->last_argmax < 0) bad = chunk - 1; /* backend.h's argmax */
            long first = bad >= 0 ? first_nonfinite_row(s, chunk, s->hidden_check) : -1;
            if (first >= 0) bad = first;
        }
        if (be->fault[0]) return device_failed(s);
        if (bad >= 0) return numeric_failure(s, (long)pos0 + bad);
    }
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nemotron_session_eval(nemotron_session *s, const int32_t *tokens, int n, float *logits) {
    nemotron_status st = usable(s);
    if (!st) st = fits(s, n, tokens, "eval");
    if (!st) st = tokens_valid(s, tokens, n);
    return st ? st : run(s, tokens, NULL, n, logits);
}

nemotron_status nemotron_session_eval_embd(nemotron_session *s, const float *embd, int n, float *logits) {
    nemotron_status st = usable(s);
    if (!st) st = fits(s, n, embd, "eval_embd");
    if (st) return st;
    size_t count = (size_t)n * (size_t)s->model->fwd.H;
    for (size_t i = 0; i < count; i++)
        if (!isfinite(embd[i]))
            return nt_fail(&s->err, NEMOTRON_ERR_ARG, "embedding value %zu (position %zu) is not finite", i,
                           i / (size_t)s->model->fwd.H);
    return run(s, NULL, embd, n, logits);
}

nemotron_status nemotron_session_verify(nemotron_session *s, const int32_t *tokens, int n, int32_t *argmax) {
    nemotron_status st = usable(s);
    if (st) return st;
    if (n > s->verify_max)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                       "a verify pass of %d positions: this session holds at most %d (session parameter "
                       "verify_max)", n, s->verify_max);
    if ((st = fits(s, n, tokens, "verify")) || (st = tokens_valid(s, tokens, n))) return st;
    const struct nt_forward *f = &s->model->fwd;
    struct nt_backend *be = f->be;
    if (be->fault[0]) return device_failed(s);
    if (s->mtp) mtp_before_pass(s, tokens[0]);
    logits_fetch(s); /* the last logits before the pass stay at hand for accept(0) */
    struct nt_pass p = nt_session_main_pass(s, tokens, n, NT_LOGITS_ARGMAX, 1);
    launch(s, &p);
    if (p.hidden_out) mtp_after_pass(s, tokens, n);
    float *before = s->last_logits;
    s->last_logits = s->prev_logits;
    s->prev_logits = before;
    s->prev_has_last = s->has_last;
    s->prev_argmax = s->last_argmax;
    be->ops->to_host(be, s->verify_argmax, s->acts.argmax, (size_t)n * sizeof(int32_t));
    if (be->fault[0]) return device_failed(s);
    s->last_argmax = s->verify_argmax[n - 1];
    s->logits_dev = s->acts.logits + (size_t)(n - 1) * f->V;
    s->has_last = 1;
    s->verify_pos0 = s->pos;
    s->pos += n;
    for (int i = 0; i < n; i++) /* a degenerate row (backend.h's argmax -1) fails the pass, as in run */
        if (s->verify_argmax[i] < 0) return numeric_failure(s, (long)s->verify_pos0 + i);
    if (argmax) memcpy(argmax, s->verify_argmax, (size_t)n * sizeof(int32_t));
    s->verify_n = n;
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nemotron_session_accept(nemotron_session *s, int m) {
    nemotron_status st = usable(s);
    if (st) return st;
    if (!s->verify_n)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                       "accept: no verify pass to cut short (accept follows nemotron_session_verify directly, once)");
    int n = s->verify_n;
    if (m < 0 || m > n)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "accept %d positions of a verify pass of %d", m, n);
    s->verify_n = 0;
    s->err.msg[0] = 0;
    if (s->mtp) s->mtp_rows = m; /* the kept positions' hidden rows wait for the MTP step */
    if (m == n) return NEMOTRON_OK; /* the pass left the state after its last position */
    const struct nt_forward *f = &s->model->fwd;
    struct nt_backend *be = f->be;
    nt_state_roll_back(f, &s->state, m);
    s->pos = s->verify_pos0 + m;
    if (m == 0) { /* the logits from before the pass, on the host since it started */
        float *t = s->last_logits;
        s->last_logits = s->prev_logits;
        s->prev_logits = t;
        s->logits_dev = NULL;
        s->has_last = s->prev_has_last;
        s->last_argmax = s->prev_argmax;
    } else {
        s->logits_dev = s->acts.logits + (size_t)(m - 1) * f->V;
        s->last_argmax = s->verify_argmax[m - 1];
        s->has_last = 1;
    }
    if (be->fault[0]) return device_failed(s);
    return NEMOTRON_OK;
}

nemotron_status nemotron_session_verify_logits(nemotron_session *s, int i, float *logits) {
    nemotron_status st = usable(s);
    if (st) return st;
    if (!s->verify_n)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                       "verify_logits: no verify pass to read (it follows nemotron_session_verify, before accept)");
    if (i < 0 || i >= s->verify_n || !logits)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "verify_logits of position %d of a verify pass of %d%s", i,
                       s->verify_n, logits ? "" : " into NULL");
    const struct nt_forward *f = &s->model->fwd;
    struct nt_backend *be = f->be;
    /* the pass's rows stay in the activation buffer until the next pass: accept only moves state */
    be->ops->to_host(be, logits, s->acts.logits + (size_t)i * f->V, (size_t)f->V * sizeof(float));
    if (be->fault[0]) return device_failed(s);
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

/* ---- snapshots ---- */

static int n_kind(const struct nt_forward *f, char kind) {
    int k = 0;
    for (const char *c = f->cfg->pattern; *c; c++) k += *c == kind;
    return k;
}

/* Bytes of one layer's K (or V) rows [0, pos). */
static size_t kv_rows_bytes(const struct nt_forward *f, int pos) {
    return (size_t)pos * (size_t)f->nkv * (size_t)f->dh * sizeof(float);
}

/* Bytes of a snapshot's recurrent part (every Mamba layer's conv ring and SSM state) and of its
 * KV part at position pos (every attention layer's K and V rows below pos). */
static size_t recurrent_bytes(const struct nt_forward *f) {
    return (size_t)n_kind(f, NT_LAYER_MAMBA) * (nt_state_conv_bytes(f) + nt_state_ssm_bytes(f));
}
static size_t kv_bytes(const struct nt_forward *f, int pos) {
    return (size_t)n_kind(f, NT_LAYER_ATTENTION) * 2 * kv_rows_bytes(f, pos);
}

/* Bytes of the MTP part of a snapshot at position pos with `rows` waiting hidden rows: the MTP
 * attention layers' K and V rows below the first waiting position, then the waiting rows. */
static size_t mtp_bytes(const struct nt_forward *f, int pos, int rows) {
    int n_attn = 0;
    for (const char *c = f->cfg->mtp_pattern; *c; c++) n_attn += *c == NT_LAYER_ATTENTION;
    return (size_t)n_attn * 2 * kv_rows_bytes(f, pos - rows) + (size_t)rows * f->H * sizeof(float);
}

size_t nt_snapshot_bytes(const nemotron_snapshot *snap) {
    if (!snap) return 0;
    const struct nt_forward *f = &snap->model->fwd;
    size_t mtp = snap->mtp ? mtp_bytes(f, snap->pos, snap->mtp_rows) + (size_t)snap->mtp_rows * sizeof(int32_t) : 0;
    return recurrent_bytes(f) + kv_bytes(f, snap->pos) + (size_t)f->V * sizeof(float) + mtp;
}

void nemotron_snapshot_free(nemotron_snapshot *snap) {
    if (!snap) return;
    struct nt_backend *be = snap->model->fwd.be;
    if (snap->recurrent) be->ops->release(be, snap->recurrent);
    if (snap->kv) be->ops->release(be, snap->kv);
    if (snap->mtp) be->ops->release(be, snap->mtp);
    nt_free(snap->logits);
    nt_free(snap->mtp_next);
    nt_free(snap);
}

int nemotron_snapshot_pos(const nemotron_snapshot *snap) { return snap ? snap->pos : 0; }

/* One buffer of the session and its place in a snapshot, copied the way copy_state goes. */
static void copy_pair(struct nt_copy_batch *b, void *ses, void *snap, size_t bytes, int to_snap) {
    if (to_snap) nt_copy_batch_add(b, snap, ses, bytes);
    else nt_copy_batch_add(b, ses, snap, bytes);
}

/* Copies every Mamba layer's ring and state, and every attention layer's rows [0, pos), between
 * the session and the snapshot (to_snap: out of the session), in one batch. */
static void copy_state(const struct nt_forward *f, struct nt_state *st, const nemotron_snapshot *snap, int to_snap) {
    size_t cb = nt_state_conv_bytes(f), sb = nt_state_ssm_bytes(f), kb = kv_rows_bytes(f, snap->pos);
    uint8_t *rec = snap->recurrent, *kv = snap->kv;
    struct nt_copy_batch b = {.be = f->be};
    for (int i = 0; i < st->n_layer; i++) {
        if (st->conv[i]) {
            copy_pair(&b, st->conv[i], rec, cb, to_snap);
            copy_pair(&b, st->ssm[i], rec + cb, sb, to_snap);
            rec += cb + sb;
        } else if (st->k_cache[i] && kb) {
            copy_pair(&b, st->k_cache[i], kv, kb, to_snap);
            copy_pair(&b, st->v_cache[i], kv + kb, kb, to_snap);
            kv += 2 * kb;
        }
    }
    nt_copy_batch_flush(&b);
}

/* The MTP step's part, as copy_state (both the session and the snapshot have one). */
static void copy_mtp_state(const struct nt_forward *f, nemotron_session *s, const nemotron_snapshot *snap,
                           int to_snap) {
    struct nt_state *st = &s->state;
    size_t kb = kv_rows_bytes(f, snap->pos - snap->mtp_rows);
    uint8_t *at = snap->mtp;
    struct nt_copy_batch b = {.be = f->be};
    for (int i = 0; i < st->n_mtp; i++) {
        if (!st->mtp_k_cache[i] || !kb) continue;
        copy_pair(&b, st->mtp_k_cache[i], at, kb, to_snap);
        copy_pair(&b, st->mtp_v_cache[i], at + kb, kb, to_snap);
        at += 2 * kb;
    }
    if (snap->mtp_rows) copy_pair(&b, s->acts.hidden, at, (size_t)snap->mtp_rows * f->H * sizeof(float), to_snap);
    nt_copy_batch_flush(&b);
}

nemotron_status nemotron_session_snapshot(nemotron_session *s, nemotron_snapshot **out) {
    if (out) *out = NULL;
    nemotron_status st = usable(s);
    if (st) return st;
    if (!out) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "snapshot: out is NULL");
    const struct nt_forward *f = &s->model->fwd;
    struct nt_backend *be = f->be;
    if (be->fault[0]) return device_failed(s);
    nemotron_snapshot *snap = nt_calloc(1, sizeof *snap);
    if (!snap) return nt_fail(&s->err, NEMOTRON_ERR_NOMEM, "out of host memory for a snapshot");
    snap->model = s->model;
    snap->pos = s->pos;
    size_t rec = recurrent_bytes(f), kv = kv_bytes(f, s->pos);
    size_t mtp = s->mtp ? mtp_bytes(f, s->pos, s->mtp_rows) : 0;
    snap->logits = nt_calloc((size_t)f->V, sizeof(float));
    snap->mtp_rows = s->mtp_rows;
    int ok = snap->logits && (!rec || (snap->recurrent = be->ops->alloc(be, rec))) &&
             (!kv || (snap->kv = be->ops->alloc(be, kv)));
    /* a session with MTP keeps its MTP part too (its snapshot has one even when it is empty) */
    if (ok && s->mtp)
        ok = (snap->mtp = be->ops->alloc(be, mtp ? mtp : 1)) &&
             (snap->mtp_next = nt_calloc((size_t)(s->mtp_rows ? s->mtp_rows : 1), sizeof(int32_t)));
    if (!ok) {
        nemotron_snapshot_free(snap);
        if (be->fault[0]) return device_failed(s);
        return nt_fail(&s->err, NEMOTRON_ERR_NOMEM, "out of %s memory for a snapshot at position %d (%.1f MiB)%s%s",
                       be->ops->name, s->pos, (double)(rec + kv + mtp) / 1048576.0, be->alloc_error[0] ? ": " : "",
                       be->alloc_error);
    }
    copy_state(f, &s->state, snap, 1);
    if (snap->mtp) {
        copy_mtp_state(f, s, snap, 1);
        memcpy(snap->mtp_next, s->mtp_next, (size_t)s->mtp_rows * sizeof(int32_t));
    }
    logits_fetch(s);
    memcpy(snap->logits, s->last_logits, (size_t)f->V * sizeof(float));
    snap->has_last = s->has_last;
    snap->argmax = s->last_argmax;
    if (be->fault[0]) {
        nemotron_snapshot_free(snap);
        return device_failed(s);
    }
    *out = snap;
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nemotron_session_restore(nemotron_session *s, const nemotron_snapshot *snap) {
    nemotron_status st = usable(s);
    if (st) return st;
    if (!snap) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "restore: the snapshot is NULL");
    if (snap->model != s->model)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "restore: the snapshot is of another model handle than the session's");
    if (snap->pos > s->n_ctx)
        return nt_fail(&s->err, NEMOTRON_ERR_CONTEXT, "restore: the snapshot's position %d is past the context length %d",
                       snap->pos, s->n_ctx);
    const struct nt_forward *f = &s->model->fwd;
    if (f->be->fault[0]) return device_failed(s);
    copy_state(f, &s->state, snap, 0);
    s->pos = snap->pos;
    s->verify_n = 0;
    /* the MTP step follows on from the snapshot's, or (none kept) starts on the next pass's rows */
    s->mtp_rows = 0;
    if (s->mtp && snap->mtp && snap->mtp_rows <= s->pass_max) {
        copy_mtp_state(f, s, snap, 0);
        memcpy(s->mtp_next, snap->mtp_next, (size_t)snap->mtp_rows * sizeof(int32_t));
        s->mtp_rows = snap->mtp_rows;
    }
    memcpy(s->last_logits, snap->logits, (size_t)f->V * sizeof(float));
    s->logits_dev = NULL;
    s->has_last = snap->has_last;
    s->last_argmax = snap->argmax;
    if (f->be->fault[0]) return device_failed(s);
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

/* The getters take NULL (and a handle that holds only a creation failure) as "no session". The
 * logits getter is const to the caller: the session's logits are the same before and after, only
 * where they are kept changes (logits_fetch), so the const is cast away for that. */
const float *nemotron_session_logits(const nemotron_session *s) {
    if (!s || !s->ready || !s->has_last) return NULL;
    nemotron_session *held = (nemotron_session *)s;
    logits_fetch(held);
    if (s->model->fwd.be->fault[0]) { /* nothing came back: the session's message says why */
        device_failed(held);
        return NULL;
    }
    return s->last_logits;
}

int32_t nemotron_session_argmax(const nemotron_session *s) {
    return s && s->ready && s->has_last ? s->last_argmax : -1;
}

int nemotron_session_pos(const nemotron_session *s) { return s ? s->pos : 0; }
int nemotron_session_n_ctx(const nemotron_session *s) { return s ? s->n_ctx : 0; }
int nemotron_session_pass_max(const nemotron_session *s) { return s ? s->pass_max : 0; }

void nemotron_session_reset(nemotron_session *s) {
    if (!s || !s->ready || s->broken) return; /* a broken session stays refused */
    nt_state_clear(&s->model->fwd, &s->state);
    s->pos = 0;
    s->verify_n = 0;
    forget_last(s);
    s->mtp_rows = 0;
    s->mtp_follow = s->mtp;
}

/* A session with the MTP step that can run (usable, its device not failed). */
static nemotron_status mtp_usable(nemotron_session *s) {
    nemotron_status st = usable(s);
    if (st) return st;
    NT_ASSERT(s->mtp);
    return s->model->fwd.be->fault[0] ? device_failed(s) : NEMOTRON_OK;
}

nemotron_status nt_session_mtp_draft(nemotron_session *s, int32_t next, int k, int32_t *drafts, int *n) {
    *n = 0;
    nemotron_status st = mtp_usable(s);
    if (st) return st;
    NT_ASSERT(k >= 1 && k <= NT_MTP_CHAIN_ROWS && next >= 0 && next < s->model->fwd.V);
    struct nt_backend *be = s->model->fwd.be;
    if (!s->mtp_rows) return NEMOTRON_OK;
    s->verify_n = 0; /* its passes overwrite the verify pass's rows */
    logits_fetch(s); /* and the last logits' row */
    mtp_run_waiting(s, next, NT_LOGITS_LAST);
    be->ops->to_host(be, &drafts[0], s->acts.argmax, sizeof(int32_t));
    /* each chained step at the position after the last: its KV row is the MTP's guess, redone
     * by the waiting rows' run once the position is verified. A degenerate step (argmax -1: the
     * MTP layers' logits overflow) ends the drafts before it: no token to chain or to verify. */
    int got = drafts[0] < 0 ? 0 : 1;
    for (int j = 1; j < k && got == j && !be->fault[0]; j++) {
        struct nt_pass p = nt_session_mtp_pass(s, s->pos + j - 1, &drafts[j - 1], 1, NT_LOGITS_LAST);
        launch_mtp(s, &p);
        be->ops->to_host(be, &drafts[j], s->acts.argmax, sizeof(int32_t));
        if (drafts[j] >= 0) got++;
    }
    if (be->fault[0]) return device_failed(s);
    *n = got;
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nt_session_mtp_settle(nemotron_session *s) {
    nemotron_status st = mtp_usable(s);
    if (st) return st;
    const struct nt_forward *f = &s->model->fwd;
    struct nt_backend *be = f->be;
    int r = s->mtp_rows;
    if (r < 2) return NEMOTRON_OK;
    /* the last row waits on: kept aside in the embeddings buffer (free between passes) while the
     * pass runs the others, whose last output row 0 receives */
    size_t row = (size_t)f->H * sizeof(float);
    s->verify_n = 0;
    be->ops->copy(be, s->acts.embd, s->acts.hidden + (size_t)(r - 1) * f->H, row);
    mtp_run(s, r - 1, NT_LOGITS_NONE);
    be->ops->copy(be, s->acts.hidden, s->acts.embd, row);
    s->mtp_rows = 1;
    if (be->fault[0]) return device_failed(s);
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nt_session_mtp_catch_up(nemotron_session *s, int32_t next) {
    nemotron_status st = mtp_usable(s);
    if (st) return st;
    NT_ASSERT(next >= 0 && next < s->model->fwd.V);
    struct nt_backend *be = s->model->fwd.be;
    if (!s->mtp_rows) return NEMOTRON_OK;
    s->verify_n = 0;
    mtp_run_waiting(s, next, NT_LOGITS_NONE);
    if (be->fault[0]) return device_failed(s);
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

nemotron_status nt_session_mtp_logits(nemotron_session *s, int32_t next, float *logits, int *rows) {
    *rows = 0;
    nemotron_status st = mtp_usable(s);
    if (st) return st;
    NT_ASSERT(next >= 0 && next < s->model->fwd.V);
    struct nt_backend *be = s->model->fwd.be;
    int r = s->mtp_rows;
    if (!r) return NEMOTRON_OK;
    s->verify_n = 0;
    logits_fetch(s); /* the step's logits take acts.logits */
    mtp_run_waiting(s, next, NT_LOGITS_ALL);
    be->ops->to_host(be, logits, s->acts.logits, (size_t)r * s->model->fwd.V * sizeof(float));
    if (be->fault[0]) return device_failed(s);
    *rows = r;
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}
