/* config.h - a Nemotron-H config.json, parsed and validated.
 *
 * Field names are the Hugging Face config's (MODEL.md 1.2). Every key MODEL.md lists is read,
 * with transformers 5.17's default when absent; keys that only matter for training are read
 * (type-checked) but do not change the forward. After nt_config_parse succeeds, the fields are
 * consistent (divisibility, ranges) and model code may trust them.
 */
#ifndef NT_CONFIG_H
#define NT_CONFIG_H

#include "../common.h"

/* The largest layer count accepted: Nemotron-H 56B has 118; room for much larger. */
#define NT_MAX_LAYERS 1024
/* MTP layers (Super has 2: "*E"). */
#define NT_MAX_MTP_LAYERS 16
/* eos_token_id may be a list; generation configs list 2. */
#define NT_MAX_EOS 16

enum nt_layer_kind {
    NT_LAYER_MAMBA = 'M',     /* "linear_attention" / legacy "mamba" */
    NT_LAYER_ATTENTION = '*', /* "full_attention" / legacy "attention" */
    NT_LAYER_MLP = '-',       /* "mlp" */
    NT_LAYER_MOE = 'E'        /* "moe" */
};

struct nt_config {
    int vocab_size;
    int hidden_size;
    int n_layer;                          /* derived: the length of the layer pattern */
    char pattern[NT_MAX_LAYERS + 1];      /* one nt_layer_kind char per layer, NUL-terminated */
    int tie_word_embeddings;
    int pad_token_id, bos_token_id;
    int eos_token_id[NT_MAX_EOS];
    int n_eos;
    int max_position_embeddings;          /* not read by the forward (NoPE) */

    /* attention */
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim;

    /* dense MLP */
    int intermediate_size;
    int mlp_bias;                         /* bias on MLP, shared-expert and latent projections */

    /* Mamba-2 */
    int ssm_state_size;                   /* N */
    int mamba_num_heads;                  /* nh */
    int mamba_head_dim;                   /* P */
    int n_groups;                         /* G */
    int conv_kernel;                      /* K */
    int use_conv_bias;
    int use_bias;                         /* in_proj / out_proj bias */
    int chunk_size;                       /* does not change the math */
    float time_step_min, time_step_max, time_step_floor;
    double time_step_limit[2];            /* dt is clamped to [lo, hi]; (0, inf) by default */

    /* MoE */
    int n_routed_experts;                 /* E */
    int num_experts_per_tok;              /* k */
    int moe_intermediate_size;            /* mi */
    int moe_shared_expert_intermediate_size; /* si */
    int n_shared_experts;                 /* read, not used: HF builds one shared MLP of width si */
    int moe_latent_size;                  /* l; 0 when null (no latent projections) */
    int n_group, topk_group;
    int norm_topk_prob;
    float routed_scaling_factor;

    float layer_norm_epsilon;             /* eps of every RMSNorm */

    /* MTP */
    int num_nextn_predict_layers;
    int n_mtp_layer;                      /* length of the MTP pattern when MTP is on, else 0 */
    char mtp_pattern[NT_MAX_MTP_LAYERS + 1];
};

/* Parses config JSON text (len bytes, need not be NUL-terminated). `name` is used in messages
 * (usually the file path). Accepts hybrid_override_pattern or layers_block_type (new or legacy
 * names; the list wins when both are present), time_step_limit as [lo, hi] where hi may be a
 * number, bare Infinity, or {"__float__": "Infinity"}. Unknown layer kinds, wrong types, values
 * out of range and inconsistent dimensions are NEMOTRON_ERR_CONFIG with the key named; text that
 * is not JSON is NEMOTRON_ERR_FORMAT with the line and column. */
nemotron_status nt_config_parse(const char *text, size_t len, const char *name,
                                struct nt_config *cfg, struct nt_err *err);

/* Reads and parses a config.json file. */
nemotron_status nt_config_load(const char *path, struct nt_config *cfg, struct nt_err *err);

#endif /* NT_CONFIG_H */
