/* forward.h - the layer loop of a pass, and the buffers it runs in.
 *
 * nt_forward describes a loaded model to the loop (config, weights, backend, dimensions).
 * nt_state is one sequence slot's recurrent and attention state (conv rings, SSM states, KV
 * caches); nt_acts is the activation space of one pass of up to pass_max positions. Both are
 * allocated once, through the backend, when a session is created: a pass allocates nothing.
 */
#ifndef NT_FORWARD_H
#define NT_FORWARD_H

#include "backend.h"

struct nt_forward {
    const struct nt_config *cfg;
    const struct nt_weights *w;
    struct nt_backend *be;
    struct nt_mamba_dims mamba;
    struct nt_moe_dims moe;
    int H, V, nq, nkv, dh;
    int mlp_inner;            /* the widest relu^2 inner width: dense MLP or shared expert */
    float eps;
};

/* Fills f from a config and bound weights. */
void nt_forward_init(struct nt_forward *f, const struct nt_config *cfg, const struct nt_weights *w,
                     struct nt_backend *be);

/* One sequence slot. Per-layer arrays hold NULL where the layer kind has no such state.
 * The recurrent state at a position is the conv rings and SSM states; the KV caches need only a
 * length (rows past the position are never read), so rolling back is a copy of the former. */
struct nt_state {
    int n_layer;
    struct nt_attn_dims attn;         /* n_ctx = rows of each KV cache */
    float **conv;                     /* [n_layer] -> resident [K-1][CD] */
    float **ssm;                      /* [n_layer] -> resident [nh][N][P] f32 */
    float **k_cache, **v_cache;       /* [n_layer] -> resident [n_ctx][nkv*dh] */
    int snap_max;                     /* positions a verify pass (nt_pass.snap) may hold; 0: none */
    float **conv_snap;                /* [n_layer] -> resident [snap_max][K-1][CD]: slot t = the ring
                                       * before position t of the last verify pass */
    float **ssm_snap;                 /* [n_layer] -> resident [snap_max][nh][N][P], as conv_snap */
    int n_mtp;                        /* the MTP step's layers it holds state for (0: no MTP) */
    struct nt_attn_dims mtp_attn;     /* n_ctx = rows of the MTP's KV caches: the context and the
                                       * positions a chain of drafts runs past it */
    float **mtp_k_cache, **mtp_v_cache; /* [n_mtp] -> resident [mtp n_ctx][nkv*dh]; NULL for MoE */
    float *attn_scratch;              /* resident, the backend's attention_scratch_floats for the
                                       * larger of attn and mtp_attn (NULL when that is 0) */
};

/* Activations of one pass (resident), sized for pass_max positions. */
struct nt_acts {
    int pass_max;
    float *h, *x, *o;                 /* [n][H]: residual stream, normed input, mixer output */
    float *zxd, *xbc, *y, *g;         /* Mamba: in_proj out, conv out, scan out, gated norm */
    float *q, *k, *v, *att;           /* attention */
    float *inner;                     /* [n][mlp_inner] relu^2 activations */
    float *router, *wts;              /* [n][E], [n][k] */
    int32_t *idx;                     /* [n][k] chosen experts */
    float *xl, *yl, *shared;          /* latent input [n][L], routed output [n][L], shared [n][H] */
    float *moe_scratch;
    float *logits;                    /* [n][V] */
    int32_t *argmax;                  /* [n] */
    float *embd;                      /* [n][H]: input embeddings written from the host */
    float *hidden;                    /* [n][H] (sessions with MTP): the MTP step's input hidden
                                       * rows - a main pass's final rows (nt_pass.hidden_out), or
                                       * row 0 = the last output of an MTP pass (a chain's next) */
    float *mtp_in;                    /* [n][2H] (sessions with MTP): enorm(e) | hnorm(h) */
    void *scratch;                    /* the backend's pass scratch (nt_pass.scratch) */
};

/* snap_max: the positions a verify pass may hold (0: no snapshot slots); mtp: also the state of
 * the model's MTP step (its KV caches), which the model must have. */
nemotron_status nt_state_alloc(const struct nt_forward *f, int n_ctx, int snap_max, int mtp, struct nt_state *s,
                               struct nt_err *err);
void nt_state_free(const struct nt_forward *f, struct nt_state *s);
void nt_state_clear(const struct nt_forward *f, struct nt_state *s);   /* zero conv and SSM */
/* Bytes of one layer's conv ring and of its SSM state (0 for a layer without them). */
size_t nt_state_conv_bytes(const struct nt_forward *f);
size_t nt_state_ssm_bytes(const struct nt_forward *f);
/* Puts the recurrent state back to snapshot slot t of the last verify pass (t < the pass's n):
 * the state after its first t positions. Device-side copies, done when it returns. */
void nt_state_roll_back(const struct nt_forward *f, struct nt_state *s, int t);

/* Copies gathered and handed to the backend's copy_many in groups (add, then flush once). */
#define NT_COPY_BATCH 32
struct nt_copy_batch {
    struct nt_backend *be;
    int n;
    struct nt_copy r[NT_COPY_BATCH];
};
void nt_copy_batch_add(struct nt_copy_batch *b, void *dst, const void *src, size_t bytes);
void nt_copy_batch_flush(struct nt_copy_batch *b);

/* mtp: also the MTP step's buffers (hidden, mtp_in). */
nemotron_status nt_acts_alloc(const struct nt_forward *f, int pass_max, int mtp, struct nt_acts *a,
                              struct nt_err *err);
void nt_acts_free(const struct nt_forward *f, struct nt_acts *a);

/* Which logits a pass computes. */
enum nt_logits {
    NT_LOGITS_NONE,           /* a prefill pass before the last one */
    NT_LOGITS_LAST,           /* the last position only: row 0 of a->logits / a->argmax */
    NT_LOGITS_ALL,            /* every position: rows 0 .. n-1 */
    NT_LOGITS_ARGMAX          /* every position, as ALL, for the argmax rows a->argmax[0 .. n-1]:
                               * the caller reads those back and leaves the n x V logits resident */
};

/* Runs one pass: positions p->pos0 .. p->pos0 + p->n - 1 (the caller has checked tokens and the
 * context length), leaving the logits p->want asks for in a->logits and their argmax in
 * a->argmax. The input is p->embd when set (resident [n][H]), else the tokens' embedding rows. A
 * p->snap pass needs p->n <= s->snap_max. */
void nt_forward_pass(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a,
                     const struct nt_pass *p);

/* The positions MTP KV caches hold past the context: a chain of drafts runs up to
 * NEMOTRON_SPEC_MAX positions ahead of the last verified one. */
#define NT_MTP_CHAIN_ROWS NEMOTRON_SPEC_MAX

/* Runs the model's MTP step (MODEL.md 3.8) over p->n positions at MTP positions p->pos0.. (p->mtp
 * set, tokens only, no snap): row t reads the hidden row a->hidden[t] (the main model's final
 * hidden state at position pos0 + t, or a chained step's input) and p->tokens[t], the token after
 * that position, and predicts the token after that one:
 *     x = eh_proj (enorm(emb[token]) | hnorm(hidden));  x += attn(norm x);  x += moe(norm x)
 *     out = final_layernorm(x);  logits = lm_head(out)       (as p->want asks)
 * Its attention appends KV rows at pos0.. to the MTP caches, which hold the rows of earlier MTP
 * passes below. Afterwards a->hidden row 0 holds the last row's out: the input of a chained step.
 * The state must have been allocated with mtp. */
void nt_forward_mtp_pass(const struct nt_forward *f, struct nt_state *s, struct nt_acts *a,
                         const struct nt_pass *p);

#endif /* NT_FORWARD_H */
