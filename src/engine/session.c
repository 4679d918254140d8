/* session.c - the public session handle: one timeline of a model, run in passes.
 *
 * A session owns its state slot (conv rings, SSM states, KV caches) and the activation buffers
 * of one pass, all allocated at creation. nemotron_session_eval checks every token and the
 * context length before it touches anything, then cuts the tokens into passes of at most
 * pass_max positions; each pass runs inside the allocation guard (no allocation in a pass).
 * A device error (backend.h: nt_backend.fault) met by a pass is returned as NEMOTRON_ERR_DEVICE
 * and leaves the session refused until it is freed: its state is no longer known.
 */
#include "engine.h"

#include <stdio.h>

/* The context a session holds when the caller does not say. */
#define NT_DEFAULT_N_CTX 4096

nemotron_session_params nemotron_session_default_params(void) {
    nemotron_session_params p = {.n_ctx = NT_DEFAULT_N_CTX, .pass_max = 0};
    return p;
}

static nemotron_status create(nemotron_session *s, nemotron_model *m, const nemotron_session_params *p) {
    if (!m || !m->loaded)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "the model handle holds no loaded model");
    s->model = m;
    s->n_ctx = p->n_ctx > 0 ? p->n_ctx : NT_DEFAULT_N_CTX;
    s->pass_max = p->pass_max > 0 ? p->pass_max : m->fwd.be->pass_default;
    if (s->pass_max > NEMOTRON_PASS_MAX)
        return nt_fail(&s->err, NEMOTRON_ERR_ARG, "pass_max %d is larger than NEMOTRON_PASS_MAX (%d)",
                       s->pass_max, NEMOTRON_PASS_MAX);
    if (s->pass_max < 1) s->pass_max = 1; /* a backend that names none */
    nemotron_status st = nt_state_alloc(&m->fwd, s->n_ctx, &s->state, &s->err);
    if (st) return st;
    if ((st = nt_acts_alloc(&m->fwd, s->pass_max, &s->acts, &s->err))) return st;
    s->last_logits = nt_calloc((size_t)m->cfg.vocab_size, sizeof(float));
    if (!s->last_logits) return nt_fail(&s->err, NEMOTRON_ERR_NOMEM, "out of memory for the logits");
    nt_state_clear(&m->fwd, &s->state);
    s->last_argmax = -1;
    return NEMOTRON_OK;
}

static void release(nemotron_session *s) {
    if (s->model) {
        nt_state_free(&s->model->fwd, &s->state);
        nt_acts_free(&s->model->fwd, &s->acts);
    }
    nt_free(s->last_logits);
    s->last_logits = NULL;
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

/* Marks the session refused and says why (the device's first fault, which may have come from
 * another session's pass: a GPU's context fails for all of them). */
static nemotron_status device_failed(nemotron_session *s) {
    s->broken = 1;
    s->has_last = 0;
    s->last_argmax = -1;
    return nt_fail(&s->err, NEMOTRON_ERR_DEVICE, "the device failed: %s; this session is unusable: free it",
                   s->model->fwd.be->fault);
}

nemotron_status nemotron_session_eval(nemotron_session *s, const int32_t *tokens, int n, float *logits) {
    if (!s) return NEMOTRON_ERR_ARG; /* no handle to carry a message */
    if (!s->ready) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "the session handle holds no session");
    if (s->broken) return device_failed(s);
    const struct nt_forward *f = &s->model->fwd;
    int V = f->V;
    if (n < 1) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "eval needs at least one token (n = %d)", n);
    if (!tokens) return nt_fail(&s->err, NEMOTRON_ERR_ARG, "tokens is NULL (n = %d)", n);
    /* the length before the tokens: a wrong n must not read past the caller's array */
    if (n > s->n_ctx - s->pos)
        return nt_fail(&s->err, NEMOTRON_ERR_CONTEXT,
                       "%d positions at position %d would pass the context length %d", n, s->pos, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return nt_fail(&s->err, NEMOTRON_ERR_ARG,
                           "token %d at index %d is outside the vocabulary [0, %d)", (int)tokens[i], i, V);
    struct nt_backend *be = f->be;
    if (be->fault[0]) return device_failed(s);
    for (int off = 0; off < n;) {
        int chunk = n - off < s->pass_max ? n - off : s->pass_max;
        int last = off + chunk == n;
        enum nt_logits want = logits ? NT_LOGITS_ALL : last ? NT_LOGITS_LAST : NT_LOGITS_NONE;
        struct nt_pass p = {.n = chunk, .pos0 = s->pos, .tokens = tokens + off, .want = want,
                            .scratch = s->acts.scratch};
        nt_pass_enter();
        nt_forward_pass(f, &s->state, &s->acts, &p);
        nt_pass_leave();
        if (logits)
            be->ops->to_host(be, logits + (size_t)off * V, s->acts.logits, (size_t)chunk * V * sizeof(float));
        if (last) {
            int row = want == NT_LOGITS_ALL ? chunk - 1 : 0;
            be->ops->to_host(be, s->last_logits, s->acts.logits + (size_t)row * V, (size_t)V * sizeof(float));
            be->ops->to_host(be, &s->last_argmax, s->acts.argmax + row, sizeof(int32_t));
            s->has_last = 1;
        }
        if (be->fault[0]) return device_failed(s); /* to_host waited for the pass: any fault shows */
        s->pos += chunk;
        off += chunk;
    }
    s->err.msg[0] = 0;
    return NEMOTRON_OK;
}

/* The getters take NULL (and a handle that holds only a creation failure) as "no session". */
const float *nemotron_session_logits(const nemotron_session *s) {
    return s && s->ready && s->has_last ? s->last_logits : NULL;
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
    s->has_last = 0;
    s->last_argmax = -1;
}
