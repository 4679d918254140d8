/* forward.c - the layer loop of a pass, written once against the backend contract.
 *
 *     h = embed(tokens)  (or the pass's input embeddings)
 *     x = rmsnorm(h, layer[0].norm)
 *     for each layer:  o = mixer(x)            Mamba-2 | attention | MLP | MoE
 *                      h = h + o;  x = rmsnorm(h, next norm)   (fused; norm_f after the last)
 *     logits = lm_head(x)
 *
 * The loop never touches activations itself: every step is a backend operation over the n
 * positions of the pass, so the CPU and CUDA backends run the same program. The MTP step
 * (nt_forward_mtp_pass) is a pass of its own through the same mixers. This file also owns the
 * allocation of the state and activation buffers (through the backend).
 */
#include "forward.h"

void nt_forward_init(struct nt_forward *f, const struct nt_config *c, const struct nt_weights *w,
                     struct nt_backend *be) {
    memset(f, 0, sizeof *f);
    f->cfg = c;
    f->w = w;
    f->be = be;
    f->H = c->hidden_size;
    f->V = c->vocab_size;
    f->nq = c->num_attention_heads;
    f->nkv = c->num_key_value_heads;
    f->dh = c->head_dim;
    f->eps = c->layer_norm_epsilon;
    struct nt_mamba_dims *m = &f->mamba;
    m->H = c->hidden_size;
    m->nh = c->mamba_num_heads;
    m->P = c->mamba_head_dim;
    m->N = c->ssm_state_size;
    m->G = c->n_groups;
    m->K = c->conv_kernel;
    m->I = m->nh * m->P;
    m->CD = m->I + 2 * m->G * m->N;
    m->zxd = m->I + m->CD + m->nh;
    m->eps = c->layer_norm_epsilon;
    m->dt_lo = (float)c->time_step_limit[0];
    m->dt_hi = (float)c->time_step_limit[1];
    struct nt_moe_dims *e = &f->moe;
    e->E = c->n_routed_experts;
    e->k = c->num_experts_per_tok;
    e->L = c->moe_latent_size ? c->moe_latent_size : c->hidden_size;
    e->mi = c->moe_intermediate_size;
    e->n_group = c->n_group;
    e->topk_group = c->topk_group;
    e->norm_topk_prob = c->norm_topk_prob;
    e->routed_scaling_factor = c->routed_scaling_factor;
    int has_mlp = strchr(c->pattern, NT_LAYER_MLP) != NULL;
    /* the MTP step's MoE layer is a main-model MoE layer in all but name */
    int has_moe = strchr(c->pattern, NT_LAYER_MOE) != NULL || strchr(c->mtp_pattern, NT_LAYER_MOE) != NULL;
    f->mlp_inner = 0;
    if (has_mlp) f->mlp_inner = c->intermediate_size;
    if (has_moe && c->moe_shared_expert_intermediate_size > f->mlp_inner)
        f->mlp_inner = c->moe_shared_expert_intermediate_size;
}

/* ---- buffers ---- */

static int has_kind(const struct nt_forward *f, char kind) {
    return strchr(f->cfg->pattern, kind) != NULL;
}

/* Allocates `floats` resident floats into *p (NULL when floats == 0). Returns 0 on failure. */
static int take(const struct nt_forward *f, void *pp, size_t floats) {
    void **p = pp;
    *p = NULL;
    if (!floats) return 1;
    *p = f->be->ops->alloc(f->be, floats * sizeof(float));
    return *p != NULL;
}

static void give(const struct nt_forward *f, void *pp) {
    void **p = pp;
    if (*p) f->be->ops->release(f->be, *p);
    *p = NULL;
}

size_t nt_state_conv_bytes(const struct nt_forward *f) {
    return (size_t)(f->mamba.K - 1) * f->mamba.CD * sizeof(float);
}

size_t nt_state_ssm_bytes(const struct nt_forward *f) {
    return (size_t)f->mamba.nh * f->mamba.N * f->mamba.P * sizeof(float);
}

/* The MTP step's KV caches (its attention layers'), rows for the context and a chain past it. */
static int take_mtp_state(const struct nt_forward *f, int n_ctx, struct nt_state *s) {
    const struct nt_config *c = f->cfg;
    s->n_mtp = c->n_mtp_layer;
    s->mtp_attn = s->attn;
    s->mtp_attn.n_ctx = n_ctx + NT_MTP_CHAIN_ROWS;
    s->mtp_k_cache = nt_calloc((size_t)s->n_mtp, sizeof *s->mtp_k_cache);
    s->mtp_v_cache = nt_calloc((size_t)s->n_mtp, sizeof *s->mtp_v_cache);
    if (!s->mtp_k_cache || !s->mtp_v_cache) return 0;
    size_t kv_floats = (size_t)s->mtp_attn.n_ctx * (size_t)f->nkv * (size_t)f->dh;
    for (int i = 0; i < s->n_mtp; i++)
        if (c->mtp_pattern[i] == NT_LAYER_ATTENTION &&
            !(take(f, &s->mtp_k_cache[i], kv_floats) && take(f, &s->mtp_v_cache[i], kv_floats)))
            return 0;
    return 1;
}

nemotron_status nt_state_alloc(const struct nt_forward *f, int n_ctx, int snap_max, int mtp, struct nt_state *s,
                               struct nt_err *err) {
    memset(s, 0, sizeof *s);
    const struct nt_config *c = f->cfg;
    s->n_layer = c->n_layer;
    s->snap_max = snap_max;
    s->attn = (struct nt_attn_dims){.nq = f->nq, .nkv = f->nkv, .dh = f->dh, .n_ctx = n_ctx};
    s->conv = nt_calloc((size_t)c->n_layer, sizeof *s->conv);
    s->ssm = nt_calloc((size_t)c->n_layer, sizeof *s->ssm);
    s->k_cache = nt_calloc((size_t)c->n_layer, sizeof *s->k_cache);
    s->v_cache = nt_calloc((size_t)c->n_layer, sizeof *s->v_cache);
    s->conv_snap = nt_calloc((size_t)c->n_layer, sizeof *s->conv_snap);
    s->ssm_snap = nt_calloc((size_t)c->n_layer, sizeof *s->ssm_snap);
    int ok = s->conv && s->ssm && s->k_cache && s->v_cache && s->conv_snap && s->ssm_snap;
    uint64_t kv_floats = (uint64_t)n_ctx * (uint64_t)f->nkv * (uint64_t)f->dh;
    size_t conv_floats = nt_state_conv_bytes(f) / sizeof(float), ssm_floats = nt_state_ssm_bytes(f) / sizeof(float);
    for (int i = 0; ok && i < c->n_layer; i++) {
        if (c->pattern[i] == NT_LAYER_MAMBA) {
            ok = take(f, &s->conv[i], conv_floats) && take(f, &s->ssm[i], ssm_floats) &&
                 take(f, &s->conv_snap[i], (size_t)snap_max * conv_floats) &&
                 take(f, &s->ssm_snap[i], (size_t)snap_max * ssm_floats);
        } else if (c->pattern[i] == NT_LAYER_ATTENTION) {
            ok = take(f, &s->k_cache[i], kv_floats) && take(f, &s->v_cache[i], kv_floats);
        }
    }
    NT_ASSERT(!mtp || c->n_mtp_layer > 0);
    if (ok && mtp) ok = take_mtp_state(f, n_ctx, s);
    int attn = strchr(c->pattern, NT_LAYER_ATTENTION) || (mtp && strchr(c->mtp_pattern, NT_LAYER_ATTENTION));
    if (ok && attn) { /* one scratch for the layers' caches and the MTP's: the larger ask */
        size_t floats = f->be->ops->attention_scratch_floats(f->be, &s->attn);
        if (mtp) {
            size_t m = f->be->ops->attention_scratch_floats(f->be, &s->mtp_attn);
            if (m > floats) floats = m;
        }
        ok = take(f, &s->attn_scratch, floats);
    }
    if (!ok) {
        nt_state_free(f, s);
        return nt_fail(err, NEMOTRON_ERR_NOMEM,
                       "out of %s memory for the session state (context of %d positions: %.1f "
                       "MiB of KV cache per attention layer; %d verify snapshots: %.1f MiB per Mamba "
                       "layer)%s%s", f->be->ops->name, n_ctx, (double)kv_floats * 8 / 1048576.0, snap_max,
                       (double)snap_max * (double)(conv_floats + ssm_floats) * 4 / 1048576.0,
                       f->be->alloc_error[0] ? ": " : "", f->be->alloc_error);
    }
    return NEMOTRON_OK;
}

void nt_state_free(const struct nt_forward *f, struct nt_state *s) {
    for (int i = 0; i < s->n_layer; i++) {
        if (s->conv) give(f, &s->conv[i]);
        if (s->ssm) give(f, &s->ssm[i]);
        if (s->k_cache) give(f, &s->k_cache[i]);
        if (s->v_cache) give(f, &s->v_cache[i]);
        if (s->conv_snap) give(f, &s->conv_snap[i]);
        if (s->ssm_snap) give(f, &s->ssm_snap[i]);
    }
    nt_free(s->conv);
    nt_free(s->ssm);
    nt_free(s->k_cache);
    nt_free(s->v_cache);
    nt_free(s->conv_snap);
    nt_free(s->ssm_snap);
    for (int i = 0; i < s->n_mtp; i++) {
        if (s->mtp_k_cache) give(f, &s->mtp_k_cache[i]);
        if (s->mtp_v_cache) give(f, &s->mtp_v_cache[i]);
    }
    nt_free(s->mtp_k_cache);
    nt_free(s->mtp_v_cache);
    give(f, &s->attn_scratch);
    memset(s, 0, sizeof *s);
}

void nt_copy_batch_add(struct nt_copy_batch *b, void *dst, const void *src, size_t bytes) {
    if (b->n == NT_COPY_BATCH) nt_copy_batch_flush(b);
    b->r[b->n++] = (struct nt_copy){dst, src, bytes};
}

void nt_copy_batch_flush(struct nt_copy_batch *b) {
    if (b->n) b->be->ops->copy_many(b->be, b->n, b->r);
    b->n = 0;
}

void nt_state_roll_back(const struct nt_forward *f, struct nt_state *s, int t) {
    NT_ASSERT(t >= 0 && t < s->snap_max);
    size_t cb = nt_state_conv_bytes(f), sb = nt_state_ssm_bytes(f);
    struct nt_copy_batch b = {.be = f->be};
    for (int i = 0; i < s->n_layer; i++) {
        if (!s->conv[i]) continue;
        nt_copy_batch_add(&b, s->conv[i], (const uint8_t *)s->conv_snap[i] + (size_t)t * cb, cb);
        nt_copy_batch_add(&b, s->ssm[i], (const uint8_t *)s->ssm_snap[i] + (size_t)t * sb, sb);
    }
    nt_copy_batch_flush(&b);
}

void nt_state_clear(const struct nt_forward *f, struct nt_state *s) {
    const struct nt_mamba_dims *m = &f->mamba;
    for (int i = 0; i < s->n_layer; i++) {
        if (s->conv[i]) f->be->ops->zero(f->be, s->conv[i], (size_t)(m->K - 1) * m->CD * sizeof(float));
        if (s->ssm[i]) f->be->ops->zero(f->be, s->ssm[i], (size_t)m->nh * m->N * m->P * sizeof(float));
        /* KV rows past the position are never read: a length is all the cache needs */
    }
}

/* The most columns any matrix of the model has (the widest product input). */
static int64_t widest_input(const struct nt_forward *f) {
    const struct nt_config *c = f->cfg;
    int64_t widths[] = {f->H, c->n_mtp_layer ? 2 * (int64_t)f->H : 0, f->mamba.I,
                        (int64_t)f->nq * f->dh, f->mlp_inner, f->moe.L, f->moe.mi};
    int64_t w = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] > w) w = widths[i];
    return w;
}

/* The widest vector one position has in a pass (its row of any activation buffer). */
static int64_t widest_row(const struct nt_forward *f) {
    int64_t widths[] = {widest_input(f), f->V, f->mamba.zxd, (int64_t)f->nq * f->dh, f->moe.E};
    int64_t w = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] > w) w = widths[i];
    return w;
}

nemotron_status nt_acts_alloc(const struct nt_forward *f, int n, int mtp, struct nt_acts *a,
                              struct nt_err *err) {
    memset(a, 0, sizeof *a);
    /* kernels index a pass's rows with int position x width products */
    int64_t widest = widest_row(f);
    if ((int64_t)n * widest > INT32_MAX)
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "a pass of %d positions times the widest per-position vector (%lld) is more than "
                       "2^31 - 1 elements: choose a smaller pass size",
                       n, (long long)widest);
    a->pass_max = n;
    const struct nt_mamba_dims *m = &f->mamba;
    const struct nt_moe_dims *e = &f->moe;
    size_t N = (size_t)n;
    int mamba = has_kind(f, NT_LAYER_MAMBA), attn = has_kind(f, NT_LAYER_ATTENTION);
    int moe = has_kind(f, NT_LAYER_MOE) || (mtp && strchr(f->cfg->mtp_pattern, NT_LAYER_MOE));
    attn |= mtp && strchr(f->cfg->mtp_pattern, NT_LAYER_ATTENTION) != NULL;
    size_t scratch = f->be->ops->pass_scratch_bytes(f->be, widest_input(f), n);
    int ok = take(f, &a->scratch, (scratch + sizeof(float) - 1) / sizeof(float)) &&
             take(f, &a->h, N * f->H) && take(f, &a->x, N * f->H) && take(f, &a->o, N * f->H) &&
             take(f, &a->logits, N * f->V) && take(f, &a->argmax, N) &&
             take(f, &a->inner, N * f->mlp_inner) && take(f, &a->embd, N * f->H);
    if (ok && mamba)
        ok = take(f, &a->zxd, N * m->zxd) && take(f, &a->xbc, N * m->CD) &&
             take(f, &a->y, N * m->I) && take(f, &a->g, N * m->I);
    if (ok && attn)
        ok = take(f, &a->q, N * f->nq * f->dh) && take(f, &a->k, N * f->nkv * f->dh) &&
             take(f, &a->v, N * f->nkv * f->dh) && take(f, &a->att, N * f->nq * f->dh);
    if (ok && moe)
        ok = take(f, &a->router, N * e->E) && take(f, &a->wts, N * e->k) &&
             take(f, &a->idx, N * e->k) && take(f, &a->yl, N * e->L) &&
             take(f, &a->shared, N * f->H) && take(f, &a->moe_scratch, f->be->ops->moe_scratch_floats(f->be, e, n)) &&
             (!f->cfg->moe_latent_size || take(f, &a->xl, N * e->L));
    if (ok && mtp) ok = take(f, &a->hidden, N * f->H) && take(f, &a->mtp_in, N * 2 * f->H);
    if (!ok) {
        nt_acts_free(f, a);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of %s memory for the activations of a %d-position pass%s%s",
                       f->be->ops->name, n, f->be->alloc_error[0] ? ": " : "", f->be->alloc_error);
    }
    return NEMOTRON_OK;
}

void nt_acts_free(const struct nt_forward *f, struct nt_acts *a) {
    void *all[] = {&a->h, &a->x, &a->o, &a->zxd, &a->xbc, &a->y, &a->g, &a->q, &a->k, &a->v,
                   &a->att, &a->inner, &a->router, &a->wts, &a->idx, &a->xl, &a->yl, &a->shared,
                   &a->moe_scratch, &a->logits, &a->argmax, &a->embd, &a->hidden, &a->mtp_in, &a->scratch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) give(f, all[i]);
}

/* ---- the mixers ---- */

static void mamba_mixer(const struct nt_forward *f, const struct nt_mamba_weights *w,
                        struct nt_state *s, int layer, struct nt_acts *a, const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    const struct nt_mamba_dims *d = &f->mamba;
    int n = p->n;
    /* zxd = x W_in^T: z | xBC | dt */
    be->ops->matmul(be, p, n, &w->in_proj, w->in_proj_bias, NT_ACT_NONE, a->x, f->H, a->zxd, d->zxd);
    /* a verify pass (p->snap) keeps the ring and state before every position in the slots */
    be->ops->mamba_conv(be, p, d, w, a->zxd, s->conv[layer], s->conv_snap[layer], a->xbc);
    be->ops->mamba_scan(be, p, d, w, a->zxd, a->xbc, s->ssm[layer], s->ssm_snap[layer], a->y);
    be->ops->mamba_gated_norm(be, p, d, w, a->y, a->zxd, a->g);
    be->ops->matmul(be, p, n, &w->out_proj, w->out_proj_bias, NT_ACT_NONE, a->g, d->I, a->o, f->H);
}

static void attention_mixer(const struct nt_forward *f, const struct nt_attention_weights *w,
                            const struct nt_attn_dims *d, float *k_cache, float *v_cache, float *scratch,
                            struct nt_acts *a, const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    int n = p->n, qw = f->nq * f->dh, kvw = f->nkv * f->dh;
    be->ops->matmul(be, p, n, &w->q_proj, NULL, NT_ACT_NONE, a->x, f->H, a->q, qw);
    be->ops->matmul(be, p, n, &w->k_proj, NULL, NT_ACT_NONE, a->x, f->H, a->k, kvw);
    be->ops->matmul(be, p, n, &w->v_proj, NULL, NT_ACT_NONE, a->x, f->H, a->v, kvw);
    be->ops->attention(be, p, d, a->q, a->k, a->v, k_cache, v_cache, scratch, a->att);
    be->ops->matmul(be, p, n, &w->o_proj, NULL, NT_ACT_NONE, a->att, qw, a->o, f->H);
}

/* out = down(relu(up x)^2) */
static void mlp(const struct nt_forward *f, const struct nt_mlp_weights *w, const struct nt_pass *p,
                const float *x, float *inner, float *out) {
    struct nt_backend *be = f->be;
    int n = p->n;
    int in = (int)w->up_proj.cols, mid = (int)w->up_proj.rows, o = (int)w->down_proj.rows;
    be->ops->matmul(be, p, n, &w->up_proj, w->up_bias, NT_ACT_RELU2, x, in, inner, mid);
    be->ops->matmul(be, p, n, &w->down_proj, w->down_bias, NT_ACT_NONE, inner, mid, out, o);
}

static void moe_mixer(const struct nt_forward *f, const struct nt_moe_weights *w, struct nt_acts *a,
                      const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    const struct nt_moe_dims *d = &f->moe;
    int n = p->n;
    /* the shared expert sees the full input; its output joins o in the next add_rmsnorm. It needs
     * neither the router, the route nor the routed experts: a branch beside them (backend.h),
     * opened before the router so that its weights stream while the router's latency-bound chain
     * and the route run (the routed path waits on both; session 22: the router cost a decode
     * step 12 us a layer in place) */
    if (be->ops->branch) be->ops->branch(be, p, NT_BRANCH_OPEN);
    mlp(f, &w->shared, p, a->x, a->inner, a->shared);
    if (be->ops->branch) be->ops->branch(be, p, NT_BRANCH_CLOSE);
    /* router logits in f32, the choice and the weights, then the routed experts */
    be->ops->matmul(be, p, n, &w->gate, NULL, NT_ACT_NONE, a->x, f->H, a->router, d->E);
    be->ops->moe_route(be, p, d, a->router, w->score_bias, a->idx, a->wts);
    if (w->latent) {
        /* routed experts work in the latent space: x -> fc1 -> experts -> fc2 */
        be->ops->matmul(be, p, n, &w->fc1_latent, w->fc1_bias, NT_ACT_NONE, a->x, f->H, a->xl, d->L);
        be->ops->moe_experts(be, p, d, w, a->xl, a->idx, a->wts, a->moe_scratch, a->yl);
        be->ops->matmul(be, p, n, &w->fc2_latent, w->fc2_bias, NT_ACT_NONE, a->yl, d->L, a->o, f->H);
    } else {
        be->ops->moe_experts(be, p, d, w, a->x, a->idx, a->wts, a->moe_scratch, a->o);
    }
    if (be->ops->branch) be->ops->branch(be, p, NT_BRANCH_JOIN);
}

/* A layer's residual step: h += o (+ a MoE layer's shared expert's output), x = the next norm. */
static void residual(const struct nt_forward *f, const struct nt_layer_weights *l, const float *next_norm,
                     struct nt_acts *a, const struct nt_pass *p) {
    const float *shared = l->kind == NT_LAYER_MOE ? a->shared : NULL; /* o + shared, then h += */
    f->be->ops->add_rmsnorm(f->be, p, a->h, a->o, shared, next_norm, f->H, f->eps, a->x);
}

/* The logits p->want asks for, from the final normed rows a->x. */
static void head(const struct nt_forward *f, struct nt_acts *a, const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    enum nt_logits want = (enum nt_logits)p->want;
    if (want == NT_LOGITS_NONE) return;
    int every = want == NT_LOGITS_ALL || want == NT_LOGITS_ARGMAX;
    int rows = every ? p->n : 1;
    const float *x = every ? a->x : a->x + (size_t)(p->n - 1) * f->H;
    be->ops->matmul(be, p, rows, &f->w->lm_head, NULL, NT_ACT_NONE, x, f->H, a->logits, f->V);
    be->ops->argmax(be, rows, a->logits, f->V, a->argmax);
}

/* The operations of a pass of the model's layers (nt_forward_pass). */
static void main_ops(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a, const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    const struct nt_weights *w = f->w;
    const struct nt_config *c = f->cfg;
    if (p->embd)
        be->ops->copy(be, a->h, p->embd, (size_t)p->n * f->H * sizeof(float));
    else
        be->ops->embed(be, p, &w->embeddings, a->h);
    be->ops->rmsnorm(be, p, a->h, w->layers[0].norm_w, f->H, f->eps, a->x, f->H);
    for (int i = 0; i < c->n_layer; i++) {
        const struct nt_layer_weights *l = &w->layers[i];
        switch (l->kind) {
        case NT_LAYER_MAMBA: mamba_mixer(f, &l->mamba, s, i, a, p); break;
        case NT_LAYER_ATTENTION:
            attention_mixer(f, &l->attn, &s->attn, s->k_cache[i], s->v_cache[i], s->attn_scratch, a, p);
            break;
        case NT_LAYER_MLP: mlp(f, &l->mlp, p, a->x, a->inner, a->o); break;
        case NT_LAYER_MOE: moe_mixer(f, &l->moe, a, p); break;
        }
        residual(f, l, i + 1 < c->n_layer ? w->layers[i + 1].norm_w : w->norm_f, a, p);
    }
    head(f, a, p);
    if (p->hidden_out) be->ops->copy(be, p->hidden_out, a->x, (size_t)p->n * f->H * sizeof(float));
}

void nt_forward_pass(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a,
                     const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    NT_ASSERT(p->n >= 1 && p->n <= a->pass_max);
    NT_ASSERT(!p->snap || p->n <= s->snap_max);
    NT_ASSERT((p->embd || p->tokens) && !p->mtp);
    do { /* (again when the backend ran nothing: backend.h, end_pass) */
        be->ops->begin_pass(be, p);
        main_ops(f, s, a, p);
    } while (!be->ops->end_pass(be, p));
}

/* The operations of the MTP step's pass (nt_forward_mtp_pass). */
static void mtp_ops(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a, const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    const struct nt_mtp_weights *m = &f->w->mtp;
    int n = p->n, H = f->H;
    /* the input: the two normed halves side by side, fused by eh_proj (embedding half first) */
    be->ops->embed(be, p, &f->w->embeddings, a->h);
    be->ops->rmsnorm(be, p, a->h, m->enorm_w, H, f->eps, a->mtp_in, 2 * H);
    be->ops->rmsnorm(be, p, a->hidden, m->hnorm_w, H, f->eps, a->mtp_in + H, 2 * H);
    be->ops->matmul(be, p, n, &m->eh_proj, NULL, NT_ACT_NONE, a->mtp_in, 2 * H, a->h, H);
    be->ops->rmsnorm(be, p, a->h, m->layers[0].norm_w, H, f->eps, a->x, H);
    for (int i = 0; i < s->n_mtp; i++) {
        const struct nt_layer_weights *l = &m->layers[i];
        switch (l->kind) {
        case NT_LAYER_ATTENTION:
            attention_mixer(f, &l->attn, &s->mtp_attn, s->mtp_k_cache[i], s->mtp_v_cache[i], s->attn_scratch, a, p);
            break;
        case NT_LAYER_MOE: moe_mixer(f, &l->moe, a, p); break;
        default: NT_ASSERT(!"an MTP layer is attention or MoE (the config reader checks)");
        }
        residual(f, l, i + 1 < s->n_mtp ? m->layers[i + 1].norm_w : m->final_norm_w, a, p);
    }
    head(f, a, p);
    /* the last row's out is the next chained step's hidden input */
    be->ops->copy(be, a->hidden, a->x + (size_t)(n - 1) * H, (size_t)H * sizeof(float));
}

void nt_forward_mtp_pass(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a,
                         const struct nt_pass *p) {
    struct nt_backend *be = f->be;
    NT_ASSERT(p->n >= 1 && p->n <= a->pass_max && s->n_mtp > 0 && a->hidden && a->mtp_in);
    NT_ASSERT(p->mtp && p->tokens && !p->embd && !p->snap && !p->hidden_out);
    NT_ASSERT(p->pos0 + p->n <= s->mtp_attn.n_ctx);
    do { /* (again when the backend ran nothing: backend.h, end_pass) */
        be->ops->begin_pass(be, p);
        mtp_ops(f, s, a, p);
    } while (!be->ops->end_pass(be, p));
}
