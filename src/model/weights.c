/* weights.c - binds a checkpoint's tensors to the model's weight structs, checking each one.
 *
 * The binder runs the same walk twice: the first walk only counts the floats of the small
 * vectors (and stops at the first tensor that is missing or misshapen), the second allocates the
 * arena once and converts them into it. Matrices are never copied. A tensor claimed by the walk
 * is marked used; whatever is left unmarked is reported as unexpected, so a checkpoint and its
 * config must agree exactly.
 */
#include "weights.h"

#include "../quant/ggml_blocks.h"
#include "../quant/quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

struct binder {
    struct nt_tensor_table *table;
    const struct nt_config *cfg;
    struct nt_err *err;
    int filling;          /* 0: counting walk, 1: converting walk */
    /* listing walk (nt_weights_list): no table; every tensor the config implies is reported */
    void (*list)(void *ctx, const char *name, int ndim, const int64_t *dims);
    void *list_ctx;
    struct nt_tensor placeholder;
    float *arena;
    size_t used, cap;     /* floats */
};

static int is_float_dtype(enum nt_dtype d) {
    return d == NT_DTYPE_F32 || d == NT_DTYPE_F16 || d == NT_DTYPE_BF16;
}

static int is_packed_dtype(enum nt_dtype d) { return d == NT_DTYPE_Q8_2F || d == NT_DTYPE_Q4TP; }

/* Which stored forms a tensor may take: every projection may be packed (FORMATS.md's mix puts
 * q8_2f or q4tp on them) or in a GGUF file's block types (docs/FORMATS-GGUF.md); the embeddings
 * (one row read per position, decoded exactly) may be float or a GGUF block type; the router and
 * the small vectors stay float. */
enum stored { FLOAT_ONLY, FLOAT_OR_ROWS, FLOAT_OR_PACKED };

static void format_shape(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Finds `name`, checks its dtype against `allowed` and the exact shape, marks it used. */
static nemotron_status claim(struct binder *b, const char *name, int ndim, const int64_t *dims,
                             enum stored allowed, struct nt_tensor **out) {
    if (b->list) {
        b->list(b->list_ctx, name, ndim, dims);
        b->placeholder.dtype = NT_DTYPE_F32;
        *out = &b->placeholder;
        return NEMOTRON_OK;
    }
    char want[128], got[128];
    format_shape(want, sizeof want, ndim, dims);
    const char *kinds = allowed == FLOAT_ONLY      ? "F32, F16 or BF16"
                        : allowed == FLOAT_OR_ROWS ? "F32, F16, BF16 or a GGUF block type"
                                                   : "F32, F16, BF16, q8_2f, q4tp or a GGUF block type";
    struct nt_tensor *t = nt_table_find(b->table, name);
    if (!t)
        return nt_fail(b->err, NEMOTRON_ERR_TENSOR, "tensor '%s' is missing (expected %s %s)", name,
                       kinds, want);
    int block = nt_dtype_is_ggml_block(t->dtype);
    if (!is_float_dtype(t->dtype) && !(allowed == FLOAT_OR_PACKED && (is_packed_dtype(t->dtype) || block)) &&
        !(allowed == FLOAT_OR_ROWS && block))
        return nt_fail(b->err, NEMOTRON_ERR_TENSOR, "tensor '%s' has dtype %s, expected %s", name,
                       nt_dtype_name(t->dtype), kinds);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == dims[i];
    if (!same) {
        format_shape(got, sizeof got, t->ndim, t->shape);
        return nt_fail(b->err, NEMOTRON_ERR_TENSOR, "tensor '%s' has shape %s, expected %s", name,
                       got, want);
    }
    t->used = 1;
    *out = t;
    return NEMOTRON_OK;
}

static nemotron_status matrix_as(struct binder *b, struct nt_matrix *m, enum stored allowed,
                                 int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static nemotron_status matrix_as(struct binder *b, struct nt_matrix *m, enum stored allowed,
                                 int64_t rows, int64_t cols, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t dims[2] = {rows, cols};
    struct nt_tensor *t;
    nemotron_status st = claim(b, name, 2, dims, allowed, &t);
    if (st) return st;
    m->dtype = t->dtype;
    m->rows = rows;
    m->cols = cols;
    m->data = t->data;
    m->name = t->name;
    return NEMOTRON_OK;
}

/* A projection (any stored form) and a float-only matrix. */
#define matrix(b, m, ...) matrix_as(b, m, FLOAT_OR_PACKED, __VA_ARGS__)
#define float_matrix(b, m, ...) matrix_as(b, m, FLOAT_ONLY, __VA_ARGS__)

static float element_to_f32(const struct nt_tensor *t, int64_t i) {
    const uint8_t *p = (const uint8_t *)t->data;
    uint16_t h;
    float f;
    switch (t->dtype) {
    case NT_DTYPE_F32: memcpy(&f, p + 4 * i, 4); return f;
    case NT_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return nt_bf16_to_f32(h);
    case NT_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return nt_f16_to_f32(h);
    default: NT_ASSERT(0 && "claim() admits float dtypes only"); return 0;
    }
}

/* A small tensor of the given shape, converted to f32 into the arena. */
static nemotron_status vec_n(struct binder *b, const float **out, int ndim, const int64_t *dims,
                             const char *name) {
    struct nt_tensor *t;
    nemotron_status st = claim(b, name, ndim, dims, FLOAT_ONLY, &t);
    if (st) return st;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    if (b->filling) {
        NT_ASSERT(b->used + (size_t)n <= b->cap);
        float *dst = b->arena + b->used;
        for (int64_t i = 0; i < n; i++) dst[i] = element_to_f32(t, i);
        *out = dst;
    } else {
        *out = NULL;
    }
    b->used += (size_t)n;
    return NEMOTRON_OK;
}

static nemotron_status vec(struct binder *b, const float **out, int64_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static nemotron_status vec(struct binder *b, const float **out, int64_t n, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return vec_n(b, out, 1, &n, name);
}

#define TRY(x)                              \
    do {                                    \
        nemotron_status st_ = (x);          \
        if (st_ != NEMOTRON_OK) return st_; \
    } while (0)

static nemotron_status bind_mlp(struct binder *b, struct nt_mlp_weights *m, int64_t in,
                                int64_t inner, int64_t out, const char *p) {
    TRY(matrix(b, &m->up_proj, inner, in, "%sup_proj.weight", p));
    TRY(matrix(b, &m->down_proj, out, inner, "%sdown_proj.weight", p));
    m->up_bias = m->down_bias = NULL;
    if (b->cfg->mlp_bias) {
        TRY(vec(b, &m->up_bias, inner, "%sup_proj.bias", p));
        TRY(vec(b, &m->down_bias, out, "%sdown_proj.bias", p));
    }
    return NEMOTRON_OK;
}

/* A = -exp(A_log) is what the scan multiplies by, so the engine holds A. A checkpoint stores
 * A_log: exp is taken here once, with the same expf the scan once took per step, so the values
 * are those it always had. A GGUF stores A itself (llama.cpp's converter writes -exp(A_log) as
 * ssm_a); its loader names that tensor "mixer.A" (src/model/gguf_model.c) and it is used as
 * stored: taking a log to get back to A_log would round. A listing (nt_weights_list) names
 * A_log, the checkpoint's tensor. */
static nemotron_status bind_A(struct binder *b, struct nt_mamba_weights *m, int64_t nh,
                              const char *p) {
    char name[256];
    snprintf(name, sizeof name, "%smixer.A", p);
    int stored_A = b->table && nt_table_find(b->table, name);
    if (!stored_A) snprintf(name, sizeof name, "%smixer.A_log", p);
    TRY(vec_n(b, &m->A, 1, &nh, name));
    if (!b->filling) return NEMOTRON_OK;
    float *A = (float *)m->A; /* the arena's: ours to rewrite */
    for (int64_t h = 0; h < nh; h++) {
        if (!stored_A) A[h] = -expf(A[h]);
        if (!(A[h] <= 0.0f)) /* also NaN; -exp never gives a positive A */
            return nt_fail(b->err, NEMOTRON_ERR_TENSOR,
                           "tensor '%s' element %lld: A = %g, expected A <= 0 (A = -exp(A_log))",
                           name, (long long)h, (double)A[h]);
    }
    return NEMOTRON_OK;
}

static nemotron_status bind_mamba(struct binder *b, struct nt_mamba_weights *m, const char *p) {
    const struct nt_config *c = b->cfg;
    int64_t H = c->hidden_size, nh = c->mamba_num_heads, I = nh * c->mamba_head_dim;
    int64_t CD = I + 2 * (int64_t)c->n_groups * c->ssm_state_size;
    TRY(matrix(b, &m->in_proj, I + CD + nh, H, "%smixer.in_proj.weight", p));
    TRY(matrix(b, &m->out_proj, H, I, "%smixer.out_proj.weight", p));
    m->in_proj_bias = m->out_proj_bias = m->conv_b = NULL;
    if (c->use_bias) {
        TRY(vec(b, &m->in_proj_bias, I + CD + nh, "%smixer.in_proj.bias", p));
        TRY(vec(b, &m->out_proj_bias, H, "%smixer.out_proj.bias", p));
    }
    char name[256];
    snprintf(name, sizeof name, "%smixer.conv1d.weight", p);
    int64_t conv_dims[3] = {CD, 1, c->conv_kernel};
    TRY(vec_n(b, &m->conv_w, 3, conv_dims, name));
    if (c->use_conv_bias) TRY(vec(b, &m->conv_b, CD, "%smixer.conv1d.bias", p));
    TRY(vec(b, &m->dt_bias, nh, "%smixer.dt_bias", p));
    TRY(bind_A(b, m, nh, p));
    TRY(vec(b, &m->D, nh, "%smixer.D", p));
    TRY(vec(b, &m->norm_w, I, "%smixer.norm.weight", p));
    return NEMOTRON_OK;
}

static nemotron_status bind_attention(struct binder *b, struct nt_attention_weights *a,
                                      const char *p) {
    const struct nt_config *c = b->cfg;
    int64_t H = c->hidden_size, q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    TRY(matrix(b, &a->q_proj, q, H, "%smixer.q_proj.weight", p));
    TRY(matrix(b, &a->k_proj, kv, H, "%smixer.k_proj.weight", p));
    TRY(matrix(b, &a->v_proj, kv, H, "%smixer.v_proj.weight", p));
    TRY(matrix(b, &a->o_proj, H, q, "%smixer.o_proj.weight", p));
    return NEMOTRON_OK;
}

static nemotron_status bind_moe(struct binder *b, struct nt_moe_weights *m, const char *p) {
    const struct nt_config *c = b->cfg;
    int64_t H = c->hidden_size, E = c->n_routed_experts, mi = c->moe_intermediate_size;
    int64_t L = c->moe_latent_size ? c->moe_latent_size : H;
    TRY(float_matrix(b, &m->gate, E, H, "%smixer.gate.weight", p));
    TRY(vec(b, &m->score_bias, E, "%smixer.gate.e_score_correction_bias", p));
    if (b->filling && !m->expert_up) {
        m->expert_up = nt_calloc((size_t)E, sizeof *m->expert_up);
        m->expert_down = nt_calloc((size_t)E, sizeof *m->expert_down);
        if (!m->expert_up || !m->expert_down)
            return nt_fail(b->err, NEMOTRON_ERR_NOMEM, "out of memory for %lld experts", (long long)E);
    }
    struct nt_matrix scratch;
    for (int64_t j = 0; j < E; j++) {
        TRY(matrix(b, b->filling ? &m->expert_up[j] : &scratch, mi, L,
                   "%smixer.experts.%lld.up_proj.weight", p, (long long)j));
        TRY(matrix(b, b->filling ? &m->expert_down[j] : &scratch, L, mi,
                   "%smixer.experts.%lld.down_proj.weight", p, (long long)j));
    }
    char sp[256];
    snprintf(sp, sizeof sp, "%smixer.shared_experts.", p);
    TRY(bind_mlp(b, &m->shared, H, c->moe_shared_expert_intermediate_size, H, sp));
    m->latent = c->moe_latent_size > 0;
    m->fc1_bias = m->fc2_bias = NULL;
    if (m->latent) {
        TRY(matrix(b, &m->fc1_latent, L, H, "%smixer.fc1_latent_proj.weight", p));
        TRY(matrix(b, &m->fc2_latent, H, L, "%smixer.fc2_latent_proj.weight", p));
        if (c->mlp_bias) {
            TRY(vec(b, &m->fc1_bias, L, "%smixer.fc1_latent_proj.bias", p));
            TRY(vec(b, &m->fc2_bias, H, "%smixer.fc2_latent_proj.bias", p));
        }
    }
    return NEMOTRON_OK;
}

/* One block: its pre-norm and its mixer, under the prefix "backbone.layers.{i}." etc. */
static nemotron_status bind_layer(struct binder *b, struct nt_layer_weights *l, char kind,
                                  const char *p) {
    const struct nt_config *c = b->cfg;
    l->kind = (enum nt_layer_kind)kind;
    TRY(vec(b, &l->norm_w, c->hidden_size, "%snorm.weight", p));
    switch (kind) {
    case NT_LAYER_MAMBA: return bind_mamba(b, &l->mamba, p);
    case NT_LAYER_ATTENTION: return bind_attention(b, &l->attn, p);
    case NT_LAYER_MOE: return bind_moe(b, &l->moe, p);
    case NT_LAYER_MLP: {
        char mp[256];
        snprintf(mp, sizeof mp, "%smixer.", p);
        return bind_mlp(b, &l->mlp, c->hidden_size, c->intermediate_size, c->hidden_size, mp);
    }
    }
    return nt_fail(b->err, NEMOTRON_ERR_INTERNAL, "layer kind '%c' reached the binder", kind);
}

static nemotron_status walk(struct binder *b, struct nt_weights *w) {
    const struct nt_config *c = b->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size;
    const char *emb = "backbone.embeddings.weight";
    /* Some conversions name it in the singular (MODEL.md 2.2); accept either, not both. */
    if (b->table && !nt_table_find(b->table, emb) && nt_table_find(b->table, "backbone.embedding.weight"))
        emb = "backbone.embedding.weight";
    TRY(matrix_as(b, &w->embeddings, FLOAT_OR_ROWS, V, H, "%s", emb));
    char p[64];
    for (int i = 0; i < c->n_layer; i++) {
        snprintf(p, sizeof p, "backbone.layers.%d.", i);
        TRY(bind_layer(b, &w->layers[i], c->pattern[i], p));
    }
    TRY(vec(b, &w->norm_f, H, "backbone.norm_f.weight"));
    /* HF never ties (MODEL.md 1.2): an lm_head in the file is always used. Only a tied config
     * may leave it out, and then the embeddings serve as the head. */
    if ((b->table && nt_table_find(b->table, "lm_head.weight")) || !c->tie_word_embeddings)
        TRY(matrix(b, &w->lm_head, V, H, "lm_head.weight"));
    else
        w->lm_head = w->embeddings;

    w->arena_main_floats = b->used;
    w->has_mtp = c->n_mtp_layer > 0;
    if (w->has_mtp) {
        struct nt_mtp_weights *m = &w->mtp;
        TRY(vec(b, &m->enorm_w, H, "mtp.layers.0.enorm.weight"));
        TRY(vec(b, &m->hnorm_w, H, "mtp.layers.0.hnorm.weight"));
        TRY(matrix(b, &m->eh_proj, H, 2 * H, "mtp.layers.0.eh_proj.weight"));
        for (int i = 0; i < c->n_mtp_layer; i++) {
            snprintf(p, sizeof p, "mtp.layers.%d.", i);
            TRY(bind_layer(b, &m->layers[i], c->mtp_pattern[i], p));
        }
        TRY(vec(b, &m->final_norm_w, H, "mtp.layers.%d.final_layernorm.weight", c->n_mtp_layer - 1));
    }
    return NEMOTRON_OK;
}

static uint64_t matrix_bytes(const struct nt_matrix *m) { return nt_matrix_bytes(m->dtype, m->rows, m->cols); }

static uint64_t active_bytes(const struct nt_weights *w, const struct nt_config *c) {
    uint64_t sum = matrix_bytes(&w->lm_head) + w->arena_main_floats * 4;
    for (int i = 0; i < c->n_layer; i++) {
        const struct nt_layer_weights *l = &w->layers[i];
        switch (l->kind) {
        case NT_LAYER_MAMBA: sum += matrix_bytes(&l->mamba.in_proj) + matrix_bytes(&l->mamba.out_proj); break;
        case NT_LAYER_ATTENTION:
            sum += matrix_bytes(&l->attn.q_proj) + matrix_bytes(&l->attn.k_proj) +
                   matrix_bytes(&l->attn.v_proj) + matrix_bytes(&l->attn.o_proj);
            break;
        case NT_LAYER_MLP: sum += matrix_bytes(&l->mlp.up_proj) + matrix_bytes(&l->mlp.down_proj); break;
        case NT_LAYER_MOE: {
            const struct nt_moe_weights *m = &l->moe;
            uint64_t experts = 0;
            for (int j = 0; j < c->n_routed_experts; j++)
                experts += matrix_bytes(&m->expert_up[j]) + matrix_bytes(&m->expert_down[j]);
            sum += matrix_bytes(&m->gate) + matrix_bytes(&m->shared.up_proj) +
                   matrix_bytes(&m->shared.down_proj) +
                   experts / (uint64_t)c->n_routed_experts * (uint64_t)c->num_experts_per_tok;
            if (m->latent) sum += matrix_bytes(&m->fc1_latent) + matrix_bytes(&m->fc2_latent);
            break;
        }
        }
    }
    return sum;
}

/* Every weight of the main model (all experts, the embeddings; not MTP's): their stored bytes
 * and their count, for reports ("size" and "params" of a benchmark table). */
static void add_matrix(const struct nt_matrix *m, uint64_t *bytes, uint64_t *params) {
    *bytes += matrix_bytes(m);
    *params += (uint64_t)m->rows * (uint64_t)m->cols;
}

static void total_weights(const struct nt_weights *w, const struct nt_config *c, uint64_t *bytes,
                          uint64_t *params) {
    *bytes = w->arena_main_floats * 4;
    *params = w->arena_main_floats;
    add_matrix(&w->embeddings, bytes, params);
    if (w->lm_head.data != w->embeddings.data) add_matrix(&w->lm_head, bytes, params); /* tied: one */
    for (int i = 0; i < c->n_layer; i++) {
        const struct nt_layer_weights *l = &w->layers[i];
        switch (l->kind) {
        case NT_LAYER_MAMBA:
            add_matrix(&l->mamba.in_proj, bytes, params);
            add_matrix(&l->mamba.out_proj, bytes, params);
            break;
        case NT_LAYER_ATTENTION:
            add_matrix(&l->attn.q_proj, bytes, params);
            add_matrix(&l->attn.k_proj, bytes, params);
            add_matrix(&l->attn.v_proj, bytes, params);
            add_matrix(&l->attn.o_proj, bytes, params);
            break;
        case NT_LAYER_MLP:
            add_matrix(&l->mlp.up_proj, bytes, params);
            add_matrix(&l->mlp.down_proj, bytes, params);
            break;
        case NT_LAYER_MOE: {
            const struct nt_moe_weights *m = &l->moe;
            add_matrix(&m->gate, bytes, params);
            add_matrix(&m->shared.up_proj, bytes, params);
            add_matrix(&m->shared.down_proj, bytes, params);
            for (int j = 0; j < c->n_routed_experts; j++) {
                add_matrix(&m->expert_up[j], bytes, params);
                add_matrix(&m->expert_down[j], bytes, params);
            }
            if (m->latent) {
                add_matrix(&m->fc1_latent, bytes, params);
                add_matrix(&m->fc2_latent, bytes, params);
            }
            break;
        }
        }
    }
}

static nemotron_status check_unused(const struct nt_tensor_table *t, const struct nt_config *c,
                                    struct nt_err *err) {
    int unused = 0, first = -1;
    for (int i = 0; i < t->n_tensors; i++)
        if (!t->tensors[i].used) {
            if (first < 0) first = i;
            unused++;
        }
    if (!unused) return NEMOTRON_OK;
    const struct nt_tensor *x = &t->tensors[first];
    return nt_fail(err, NEMOTRON_ERR_TENSOR,
                   "unexpected tensor '%s' in %s: the config (layers \"%s\"%s) implies no such "
                   "tensor (%d unexpected in all)",
                   x->name, t->files[x->file].path, c->pattern,
                   c->n_mtp_layer ? ", with MTP" : "", unused);
}

nemotron_status nt_weights_bind(struct nt_weights *w, const struct nt_config *cfg,
                                struct nt_tensor_table *table, struct nt_err *err) {
    memset(w, 0, sizeof *w);
    for (int i = 0; i < table->n_tensors; i++) table->tensors[i].used = 0;
    w->layers = nt_calloc((size_t)cfg->n_layer, sizeof *w->layers);
    if (cfg->n_mtp_layer) w->mtp.layers = nt_calloc((size_t)cfg->n_mtp_layer, sizeof *w->mtp.layers);
    w->n_layers = cfg->n_layer;
    w->cfg = cfg;
    w->n_mtp_layers = cfg->n_mtp_layer;
    if (!w->layers || (cfg->n_mtp_layer && !w->mtp.layers)) {
        nt_weights_free(w);
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for %d layers", cfg->n_layer);
    }
    struct binder b = {.table = table, .cfg = cfg, .err = err};
    nemotron_status st = walk(&b, w);
    if (st == NEMOTRON_OK) {
        b.cap = b.used;
        b.used = 0;
        b.filling = 1;
        b.arena = nt_alloc((b.cap ? b.cap : 1) * sizeof(float));
        w->arena = b.arena;
        w->arena_floats = b.cap;
        st = b.arena ? walk(&b, w)
                     : nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for %zu small weights", b.cap);
    }
    if (st == NEMOTRON_OK) st = check_unused(table, cfg, err);
    if (st != NEMOTRON_OK) {
        nt_weights_free(w);
        return st;
    }
    w->active_bytes = active_bytes(w, cfg);
    total_weights(w, cfg, &w->total_bytes, &w->n_params);
    return NEMOTRON_OK;
}

nemotron_status nt_weights_list(const struct nt_config *cfg,
                                void (*fn)(void *ctx, const char *name, int ndim, const int64_t *dims),
                                void *ctx, struct nt_err *err) {
    struct nt_weights w;
    memset(&w, 0, sizeof w);
    w.layers = nt_calloc((size_t)cfg->n_layer, sizeof *w.layers);
    if (cfg->n_mtp_layer) w.mtp.layers = nt_calloc((size_t)cfg->n_mtp_layer, sizeof *w.mtp.layers);
    w.n_layers = cfg->n_layer;
    w.n_mtp_layers = cfg->n_mtp_layer;
    nemotron_status st;
    if (!w.layers || (cfg->n_mtp_layer && !w.mtp.layers)) {
        st = nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for %d layers", cfg->n_layer);
    } else {
        struct binder b = {.cfg = cfg, .err = err, .list = fn, .list_ctx = ctx};
        st = walk(&b, &w);
    }
    nt_weights_free(&w);
    return st;
}

static void free_layers(struct nt_layer_weights *l, int n) {
    for (int i = 0; l && i < n; i++) {
        nt_free(l[i].moe.expert_up);
        nt_free(l[i].moe.expert_down);
    }
    nt_free(l);
}

void nt_weights_free(struct nt_weights *w) {
    free_layers(w->layers, w->n_layers);
    free_layers(w->mtp.layers, w->n_mtp_layers);
    nt_free(w->arena);
    memset(w, 0, sizeof *w);
}

/* ---- visiting every weight ---- */

struct visit {
    void (*on_matrix)(struct nt_matrix *m, void *ctx);
    void (*on_vector)(const float **v, void *ctx);
    void *ctx;
};

static void vm(const struct visit *v, struct nt_matrix *m) {
    if (v->on_matrix && m->data) v->on_matrix(m, v->ctx);
}

static void vv(const struct visit *v, const float **p) {
    if (v->on_vector && *p) v->on_vector(p, v->ctx);
}

static void visit_mlp(const struct visit *v, struct nt_mlp_weights *m) {
    vm(v, &m->up_proj);
    vm(v, &m->down_proj);
    vv(v, &m->up_bias);
    vv(v, &m->down_bias);
}

static void visit_layer(const struct visit *v, struct nt_layer_weights *l, const struct nt_config *c) {
    vv(v, &l->norm_w);
    switch (l->kind) {
    case NT_LAYER_MAMBA: {
        struct nt_mamba_weights *m = &l->mamba;
        vm(v, &m->in_proj);
        vm(v, &m->out_proj);
        const float **vecs[] = {&m->in_proj_bias, &m->conv_w, &m->conv_b, &m->dt_bias, &m->A,
                                &m->D, &m->norm_w, &m->out_proj_bias};
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) vv(v, vecs[i]);
        break;
    }
    case NT_LAYER_ATTENTION:
        vm(v, &l->attn.q_proj);
        vm(v, &l->attn.k_proj);
        vm(v, &l->attn.v_proj);
        vm(v, &l->attn.o_proj);
        break;
    case NT_LAYER_MLP: visit_mlp(v, &l->mlp); break;
    case NT_LAYER_MOE: {
        struct nt_moe_weights *m = &l->moe;
        vm(v, &m->gate);
        vv(v, &m->score_bias);
        for (int j = 0; j < c->n_routed_experts; j++) {
            vm(v, &m->expert_up[j]);
            vm(v, &m->expert_down[j]);
        }
        visit_mlp(v, &m->shared);
        if (m->latent) {
            vm(v, &m->fc1_latent);
            vm(v, &m->fc2_latent);
            vv(v, &m->fc1_bias);
            vv(v, &m->fc2_bias);
        }
        break;
    }
    }
}

void nt_weights_for_each(struct nt_weights *w, void (*on_matrix)(struct nt_matrix *m, void *ctx),
                         void (*on_vector)(const float **v, void *ctx), void *ctx) {
    struct visit v = {on_matrix, on_vector, ctx};
    const struct nt_config *c = w->cfg;
    int tied = w->lm_head.data == w->embeddings.data;
    vm(&v, &w->embeddings);
    if (tied) w->lm_head = w->embeddings;
    else vm(&v, &w->lm_head);
    vv(&v, &w->norm_f);
    for (int i = 0; i < w->n_layers; i++) visit_layer(&v, &w->layers[i], c);
    if (w->has_mtp) {
        vv(&v, &w->mtp.enorm_w);
        vv(&v, &w->mtp.hnorm_w);
        vm(&v, &w->mtp.eh_proj);
        for (int i = 0; i < w->n_mtp_layers; i++) visit_layer(&v, &w->mtp.layers[i], c);
        vv(&v, &w->mtp.final_norm_w);
    }
}
