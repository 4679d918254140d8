/* weights.h - a Nemotron-H model's weights, bound from a tensor table and checked against the config.
 *
 * nt_weights_bind walks every tensor the config implies (MODEL.md 2.2, 2.4), checks presence,
 * dtype and shape, and fills the structs below; then any tensor of the checkpoint that nothing
 * claimed is an error. After a successful bind, model code may trust every shape.
 *
 * Matrices stay where they are (views into the mmap-ed files, uploaded as-is by a backend).
 * Small per-channel vectors (norms, conv taps, dt_bias, A, D, biases, the router correction
 * bias) are converted to f32 once, into one arena: they are a few MB even for the largest models
 * and every backend wants them in f32.
 */
#ifndef NT_WEIGHTS_H
#define NT_WEIGHTS_H

#include "config.h"
#include "safetensors.h"

/* A weight matrix W[rows][cols], y = W x (rows are outputs, as in nn.Linear.weight). */
struct nt_matrix {
    enum nt_dtype dtype;          /* F32, F16, BF16, or a packed format: Q8_2F, Q4TP (projections) */
    int64_t rows, cols;
    const void *data;             /* backend-resident bytes: row-major elements or the packed
                                   * payload (src/quant/quant.h); no alignment guaranteed */
    const char *name;             /* the checkpoint tensor name, for messages */
};

struct nt_mamba_weights {
    struct nt_matrix in_proj;     /* [I + CD + nh][H]: z | xBC | dt rows */
    const float *in_proj_bias;    /* f32 [I + CD + nh], NULL unless use_bias */
    const float *conv_w;          /* f32 [CD][K], tap K-1 multiplies the newest input */
    const float *conv_b;          /* f32 [CD], NULL unless use_conv_bias */
    const float *dt_bias;         /* f32 [nh] */
    const float *A;               /* f32 [nh], A = -exp(A_log): computed once at bind from a
                                   * checkpoint's A_log, or a GGUF's ssm_a as stored */
    const float *D;               /* f32 [nh] */
    const float *norm_w;          /* f32 [I], gated group RMSNorm */
    struct nt_matrix out_proj;    /* [H][I] */
    const float *out_proj_bias;   /* f32 [H], NULL unless use_bias */
};

struct nt_attention_weights {
    struct nt_matrix q_proj;      /* [nq*dh][H] */
    struct nt_matrix k_proj;      /* [nkv*dh][H] */
    struct nt_matrix v_proj;      /* [nkv*dh][H] */
    struct nt_matrix o_proj;      /* [H][nq*dh] */
};

/* An ungated relu^2 MLP: down(relu(up x)^2). Dense layers and shared experts. */
struct nt_mlp_weights {
    struct nt_matrix up_proj;     /* [inner][in] */
    const float *up_bias;         /* f32 [inner], NULL unless mlp_bias */
    struct nt_matrix down_proj;   /* [out][inner] */
    const float *down_bias;       /* f32 [out], NULL unless mlp_bias */
};

struct nt_moe_weights {
    struct nt_matrix gate;        /* router [E][H], computed in f32 */
    const float *score_bias;      /* f32 [E] e_score_correction_bias: selection only */
    struct nt_matrix *expert_up;  /* E of [mi][l] */
    struct nt_matrix *expert_down;/* E of [l][mi] */
    struct nt_mlp_weights shared; /* [si][H], [H][si] */
    int latent;                   /* moe_latent_size set: routed experts work in l < H */
    struct nt_matrix fc1_latent;  /* [l][H] when latent */
    const float *fc1_bias;        /* f32 [l], NULL unless latent && mlp_bias */
    struct nt_matrix fc2_latent;  /* [H][l] when latent */
    const float *fc2_bias;        /* f32 [H], NULL unless latent && mlp_bias */
};

struct nt_layer_weights {
    enum nt_layer_kind kind;
    const float *norm_w;          /* f32 [H] block pre-norm */
    struct nt_mamba_weights mamba;
    struct nt_attention_weights attn;
    struct nt_mlp_weights mlp;
    struct nt_moe_weights moe;
};

/* One MTP step (MODEL.md 3.8): loaded and validated now; drafting uses it later. */
struct nt_mtp_weights {
    const float *enorm_w, *hnorm_w;       /* f32 [H] */
    struct nt_matrix eh_proj;             /* [H][2H] */
    struct nt_layer_weights *layers;      /* n_mtp_layer blocks ('*' / 'E') */
    const float *final_norm_w;            /* f32 [H] on the last MTP layer */
};

struct nt_weights {
    struct nt_matrix embeddings;          /* [V][H]; one row read per position */
    struct nt_layer_weights *layers;      /* n_layers entries (the config's n_layer) */
    int n_layers, n_mtp_layers;           /* lengths of layers and mtp.layers */
    const float *norm_f;                  /* f32 [H] */
    struct nt_matrix lm_head;             /* [V][H]; the embeddings when tied and absent */
    int has_mtp;
    struct nt_mtp_weights mtp;
    const struct nt_config *cfg;          /* the config it was bound for */
    float *arena;                         /* the converted small vectors */
    size_t arena_floats;
    size_t arena_main_floats;             /* of which the main model's (the rest is MTP's) */
    uint64_t active_bytes;                /* weight bytes a one-position pass reads */
    uint64_t total_bytes, n_params;       /* every main-model weight: stored bytes, count */
};

/* Binds and validates. On failure every allocation is released and w is zeroed; the message
 * names the tensor and expected vs found. The table's tensors get `used` set. */
nemotron_status nt_weights_bind(struct nt_weights *w, const struct nt_config *cfg,
                                struct nt_tensor_table *table, struct nt_err *err);
void nt_weights_free(struct nt_weights *w);

/* Reports every tensor the config implies (name and shape, in binding order) without a
 * checkpoint: the names a writer of synthetic models must produce. A tied config lists no
 * lm_head. */
nemotron_status nt_weights_list(const struct nt_config *cfg,
                                void (*fn)(void *ctx, const char *name, int ndim, const int64_t *dims),
                                void *ctx, struct nt_err *err);

/* Visits every matrix and every small-vector pointer of the model (MTP included), e.g. to move
 * them into a backend's memory. Either callback may be NULL. */
void nt_weights_for_each(struct nt_weights *w, void (*on_matrix)(struct nt_matrix *m, void *ctx),
                         void (*on_vector)(const float **v, void *ctx), void *ctx);

#endif /* NT_WEIGHTS_H */
