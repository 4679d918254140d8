/* fuzz_config.c - libFuzzer target for nt_config_parse: arbitrary bytes as config.json.
 *
 * Besides crashes and sanitizer reports, it checks the contract of config.h on every input: a
 * failure is one of the statuses a config can produce and carries a NUL-terminated message; a
 * success leaves a config whose invariants (pattern, counts, divisibility, ranges) hold, so a
 * hole in the validation shows up as an abort here rather than in model code. Seed it with the
 * fixture configs: the config.json of every directory under tests/fixtures.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/config.h"

static int count_not_in(const char *s, const char *allowed) {
    int n = 0;
    for (; *s; s++) n += strchr(allowed, *s) == NULL;
    return n;
}

static void check_config(const struct nt_config *c) {
    NT_ASSERT(c->n_layer >= 1 && c->n_layer <= NT_MAX_LAYERS);
    NT_ASSERT(strlen(c->pattern) == (size_t)c->n_layer && count_not_in(c->pattern, "M*-E") == 0);
    NT_ASSERT(c->num_nextn_predict_layers >= 0);
    if (c->num_nextn_predict_layers == 0) {
        NT_ASSERT(c->n_mtp_layer == 0 && c->mtp_pattern[0] == '\0');
    } else {
        NT_ASSERT(c->n_mtp_layer >= 1 && c->n_mtp_layer <= NT_MAX_MTP_LAYERS);
        NT_ASSERT(strlen(c->mtp_pattern) == (size_t)c->n_mtp_layer);
        NT_ASSERT(count_not_in(c->mtp_pattern, "*E") == 0);
    }
    NT_ASSERT(c->vocab_size > 0 && c->hidden_size > 0);
    NT_ASSERT(c->n_eos >= 0 && c->n_eos <= NT_MAX_EOS);
    for (int i = 0; i < c->n_eos; i++) NT_ASSERT(c->eos_token_id[i] >= 0);
    NT_ASSERT(c->layer_norm_epsilon > 0 && isfinite(c->layer_norm_epsilon));
    NT_ASSERT(c->time_step_limit[0] >= 0 && isfinite(c->time_step_limit[0]));
    NT_ASSERT(c->time_step_limit[1] >= c->time_step_limit[0]);
    NT_ASSERT(c->moe_latent_size >= 0);

    int attn = strchr(c->pattern, '*') || strchr(c->mtp_pattern, '*');
    int mamba = strchr(c->pattern, 'M') != NULL;
    int mlp = strchr(c->pattern, '-') != NULL;
    int moe = strchr(c->pattern, 'E') || strchr(c->mtp_pattern, 'E');
    if (attn) {
        NT_ASSERT(c->num_attention_heads > 0 && c->num_key_value_heads > 0 && c->head_dim > 0);
        NT_ASSERT(c->num_attention_heads % c->num_key_value_heads == 0);
    }
    if (mamba) {
        NT_ASSERT(c->mamba_num_heads > 0 && c->mamba_head_dim > 0 && c->ssm_state_size > 0);
        NT_ASSERT(c->n_groups > 0 && c->mamba_num_heads % c->n_groups == 0);
        NT_ASSERT(c->conv_kernel >= 1 && c->conv_kernel <= 16 && c->chunk_size > 0);
        /* in_proj width, computed as model code does (64 bits), fits an int. */
        int64_t I = (int64_t)c->mamba_num_heads * c->mamba_head_dim;
        NT_ASSERT(2 * I + 2 * (int64_t)c->n_groups * c->ssm_state_size + c->mamba_num_heads <
                  INT32_MAX / 64);
    }
    if (mlp) NT_ASSERT(c->intermediate_size > 0);
    if (moe) {
        int E = c->n_routed_experts;
        NT_ASSERT(E > 0 && c->num_experts_per_tok > 0 && c->num_experts_per_tok <= E);
        NT_ASSERT(c->moe_intermediate_size > 0 && c->moe_shared_expert_intermediate_size > 0);
        NT_ASSERT(c->n_group > 0 && E % c->n_group == 0);
        NT_ASSERT(c->topk_group > 0 && c->topk_group <= c->n_group);
        if (c->n_group > 1) {
            NT_ASSERT(E / c->n_group >= 2);
            NT_ASSERT(c->topk_group * (E / c->n_group) >= c->num_experts_per_tok);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct nt_config cfg;
    struct nt_err err;
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_config_parse((const char *)data, size, "fuzz.json", &cfg, &err);
    if (st == NEMOTRON_OK) {
        check_config(&cfg);
    } else {
        NT_ASSERT(st == NEMOTRON_ERR_FORMAT || st == NEMOTRON_ERR_CONFIG ||
                  st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_NOMEM);
        NT_ASSERT(memchr(err.msg, '\0', sizeof err.msg) != NULL && err.msg[0] != '\0');
    }
    return 0;
}
