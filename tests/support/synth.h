/* synth.h - writes random Nemotron-H models in Hugging Face layout, for tests and benchmarks.
 *
 * A model is a directory with config.json and model.safetensors, or N shards
 * model-0000i-of-0000N.safetensors plus model.safetensors.index.json. The tensors are exactly
 * the ones src/model/weights.c expects for the shape (MODEL.md 2.2), filled with deterministic
 * pseudo-random values scaled like trained weights so that a forward stays finite: matrices
 * uniform with std 1/sqrt(cols), norms near 1, A_log = log(U[1, 16]), dt_bias = softplus^-1 of
 * a log-uniform dt in [time_step_min, time_step_max], D near 1, small biases.
 *
 * Values depend only on (seed, tensor name), never on the dtype, the shard count or the order
 * of the files: the same seed in F32 with 1 or 3 shards gives bit-identical weights.
 *
 * Writing streams: each safetensors header (names, dtypes, shapes, offsets) is computed and
 * written first, then each tensor's data is generated and written in chunks of at most
 * SYNTH_CHUNK bytes, so a multi-GB model needs only a small buffer.
 *
 * Mutations (struct synth_options) break one thing on purpose, for loader tests: a tensor
 * left out, added, misshapen, of the wrong dtype, overlapping another, a shard missing, the
 * file truncated, config.json missing, replaced by raw text, or with keys edited.
 *
 * Not thread-safe only in the sense that a call writes its own directory; calls on different
 * directories may run at once. Nothing here uses the library: the files are written from
 * this shape alone, so they test the loader independently.
 */
#ifndef NT_SYNTH_H
#define NT_SYNTH_H

#include <stddef.h>
#include <stdint.h>

enum synth_dtype { SYNTH_F32, SYNTH_BF16, SYNTH_F16 };

/* Every config field the loader reads, with Hugging Face names (MODEL.md 1.2). */
struct synth_shape {
    const char *name;            /* a label for messages */
    int vocab_size, hidden_size;
    const char *pattern;         /* hybrid_override_pattern: 'M' Mamba, '*' attention, '-' MLP, 'E' MoE */
    /* attention */
    int num_attention_heads, num_key_value_heads, head_dim;
    /* dense MLP */
    int intermediate_size;
    /* Mamba-2 */
    int mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups, conv_kernel;
    /* MoE */
    int n_routed_experts, num_experts_per_tok, moe_intermediate_size;
    int moe_shared_expert_intermediate_size;
    int moe_latent_size;         /* 0: null (no latent projections) */
    int n_group, topk_group, norm_topk_prob;
    float routed_scaling_factor;
    /* biases and tying */
    int tie_word_embeddings;     /* 1: no lm_head.weight is written (the embeddings serve) */
    int mlp_bias, use_bias, use_conv_bias;
    /* MTP: NULL or "" = off; else num_nextn_predict_layers 1 with this pattern ("*E") */
    const char *mtp_pattern;
    int eos_token_id;
};

/* Named shapes: "tiny" (all four block kinds, hidden 64, vocab 256), "tiny-mtp" (latent MoE,
 * MTP "*E", every bias, grouped routing), "tiny-tied" (tie_word_embeddings, no lm_head),
 * "bench-300m" (bf16 ~357 MB; see synth.c). Returns 0, or -1 for an unknown name. */
int synth_shape_get(const char *name, struct synth_shape *out);
/* "tiny, tiny-mtp, tiny-tied, bench-300m": for usage messages. */
const char *synth_shape_names(void);

/* "f32" / "bf16" / "f16" (any case) -> dtype; returns 0, or -1 when unknown. */
int synth_dtype_parse(const char *s, enum synth_dtype *out);

/* The most mutations of one kind per call. */
#define SYNTH_MAX_EDITS 8

/* config.json edit: replaces the generated value of `key` with `value`, raw JSON text
 * ("\"64\"", "[1, 2]", "null"), or appends the key if the generated config lacks it;
 * value NULL removes the key. */
struct synth_config_edit {
    const char *key;
    const char *value;
};

struct synth_options {
    enum synth_dtype dtype;      /* storage dtype of every tensor but the router bias (F32, as
                                  * in NVIDIA checkpoints) */
    uint64_t seed;
    int n_shards;                /* <= 1: one model.safetensors; else shards + index */

    /* Mutations; a zeroed field is off. A tensor name that the shape does not produce is an
     * error (-1), so a misspelt name fails loudly instead of testing nothing. */
    const char *omit[SYNTH_MAX_EDITS];   /* tensors not written (and not in the index) */
    const char *extra[SYNTH_MAX_EDITS];  /* extra tensors, F32 [4], written last */
    const char *reshape;                 /* this tensor gets shape reshape_dims ... */
    int reshape_ndim;                    /* ... of this many dims; 0: its first dim + 1 */
    int64_t reshape_dims[4];
    const char *retype;                  /* this tensor is written with dtype retype_dtype ... */
    const char *retype_dtype;            /* ... a safetensors name; NULL: "I32" */
    const char *overlap;                 /* this tensor's data_offsets shift back into the tensor
                                          * before it in its file (it must not be the first) */
    uint64_t truncate;                   /* bytes cut from the end of the last safetensors file */
    int missing_shard;                   /* 1-based: listed in the index, never written */
    int no_config;                       /* write no config.json */
    const char *config_text;             /* written verbatim as config.json */
    struct synth_config_edit config_edit[SYNTH_MAX_EDITS]; /* key NULL ends the list */
};

/* F32, seed 1, one file, no mutation. */
struct synth_options synth_default_options(void);

struct synth_result {
    uint64_t bytes;              /* bytes written in all files (after truncation) */
    uint64_t weight_bytes;       /* tensor data bytes (before truncation) */
    int n_tensors;               /* tensors written */
    char err[512];               /* why it failed */
};

/* Writes the model into dir (created if missing; its parent must exist). Existing files of
 * the same names are replaced. Returns 0, or -1 with r->err set; r may be NULL. */
int synth_write(const char *dir, const struct synth_shape *shape, const struct synth_options *opt,
                struct synth_result *r);

/* A fresh directory /tmp/PREFIX.XXXXXX (malloc-ed path; the caller frees), or NULL. */
char *synth_mkdtemp(const char *prefix);
/* Removes dir and everything below it (no symlink is followed). Returns 0 on success. */
int synth_rmtree(const char *dir);

#endif /* NT_SYNTH_H */
