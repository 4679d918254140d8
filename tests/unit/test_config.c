/* test_config.c - config.json parsing: HF 5.17 defaults, the Nano-30B-A3B config, both layer
 * forms, the JSON quirks, aliases, MTP, every error class, and the four fixture configs.
 *
 * Expected values come from MODEL.md section 1 (the defaults table of 1.2, the Nano config of
 * 1.3), not from the code under test. Runs from the repository root (fixture paths).
 */
#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"

static struct nt_err err;

static nemotron_status parse(const char *json, struct nt_config *c) {
    memset(&err, 0, sizeof err);
    return nt_config_parse(json, strlen(json), "test.json", c, &err);
}

/* Parses json, expecting status `want` and a message holding each of the non-NULL needles. */
static void expect_fail_at(int line, const char *json, nemotron_status want, const char *needle1,
                           const char *needle2) {
    struct nt_config c;
    nemotron_status st = parse(json, &c);
    CHECK(st == want, "line %d: status %d, want %d (%s) for %s", line, st, want, err.msg, json);
    CHECK(strstr(err.msg, "test.json") != NULL, "line %d: message lacks the name: %s", line,
          err.msg);
    if (needle1)
        CHECK(strstr(err.msg, needle1) != NULL, "line %d: message lacks \"%s\": %s", line, needle1,
              err.msg);
    if (needle2)
        CHECK(strstr(err.msg, needle2) != NULL, "line %d: message lacks \"%s\": %s", line, needle2,
              err.msg);
}
#define EXPECT_FAIL(json, st, n1, n2) expect_fail_at(__LINE__, json, st, n1, n2)

/* Parses json, which must succeed. */
static int ok_at(int line, const char *json, struct nt_config *c) {
    nemotron_status st = parse(json, c);
    CHECK(st == NEMOTRON_OK, "line %d: status %d: %s (for %s)", line, st, err.msg, json);
    return st == NEMOTRON_OK;
}
#define OK(json, c) ok_at(__LINE__, json, c)

static int count(const char *s, char ch) {
    int n = 0;
    for (; *s; s++) n += *s == ch;
    return n;
}

/* MODEL.md 1.2: every key absent gives HF 5.17's defaults. */
static void test_defaults(void) {
    struct nt_config c;
    if (!OK("{}", &c)) return;
    CHECK(c.vocab_size == 131072, "%d", c.vocab_size);
    CHECK(c.hidden_size == 4096, "%d", c.hidden_size);
    CHECK(!strcmp(c.pattern, "ME*-") && c.n_layer == 4, "%s %d", c.pattern, c.n_layer);
    CHECK(c.tie_word_embeddings == 0, "%d", c.tie_word_embeddings);
    CHECK(c.pad_token_id == 0 && c.bos_token_id == 1, "%d %d", c.pad_token_id, c.bos_token_id);
    CHECK(c.n_eos == 1 && c.eos_token_id[0] == 2, "%d", c.n_eos);
    CHECK(c.max_position_embeddings == 4096, "%d", c.max_position_embeddings);
    CHECK(c.num_attention_heads == 32 && c.num_key_value_heads == 8 && c.head_dim == 128,
          "%d %d %d", c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    CHECK(c.intermediate_size == 21504 && c.mlp_bias == 0, "%d", c.intermediate_size);
    CHECK(c.ssm_state_size == 128 && c.mamba_num_heads == 128 && c.mamba_head_dim == 64, "mamba");
    CHECK(c.n_groups == 8 && c.conv_kernel == 4 && c.chunk_size == 128, "%d %d %d", c.n_groups,
          c.conv_kernel, c.chunk_size);
    CHECK(c.use_conv_bias == 1 && c.use_bias == 0, "%d %d", c.use_conv_bias, c.use_bias);
    CHECK(c.time_step_min == 0.001f && c.time_step_max == 0.1f && c.time_step_floor == 1e-4f,
          "%g %g %g", c.time_step_min, c.time_step_max, c.time_step_floor);
    CHECK(c.time_step_limit[0] == 0.0 && isinf(c.time_step_limit[1]) && c.time_step_limit[1] > 0,
          "%g %g", c.time_step_limit[0], c.time_step_limit[1]);
    CHECK(c.n_routed_experts == 8 && c.num_experts_per_tok == 2, "%d %d", c.n_routed_experts,
          c.num_experts_per_tok);
    CHECK(c.moe_intermediate_size == 7688 && c.moe_shared_expert_intermediate_size == 7688, "moe");
    CHECK(c.n_shared_experts == 1 && c.moe_latent_size == 0, "%d %d", c.n_shared_experts,
          c.moe_latent_size);
    CHECK(c.n_group == 1 && c.topk_group == 1 && c.norm_topk_prob == 1, "groups");
    CHECK(c.routed_scaling_factor == 1.0f, "%g", c.routed_scaling_factor);
    CHECK(c.layer_norm_epsilon == 1e-5f, "%g", c.layer_norm_epsilon);
    CHECK(c.num_nextn_predict_layers == 0 && c.n_mtp_layer == 0 && c.mtp_pattern[0] == '\0',
          "%d %d", c.num_nextn_predict_layers, c.n_mtp_layer);
}

/* MODEL.md 1.3, complete. */
static const char nano_json[] =
    "{\n"
    "  \"architectures\": [\"NemotronHForCausalLM\"],\n"
    "  \"auto_map\": {\"AutoConfig\": \"configuration_nemotron_h.NemotronHConfig\",\n"
    "               \"AutoModel\": \"modeling_nemotron_h.NemotronHForCausalLM\",\n"
    "               \"AutoModelForCausalLM\": \"modeling_nemotron_h.NemotronHForCausalLM\"},\n"
    "  \"model_type\": \"nemotron_h\",\n"
    "  \"vocab_size\": 131072, \"hidden_size\": 2688, \"num_hidden_layers\": 52,\n"
    "  \"hybrid_override_pattern\": "
    "\"MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME\",\n"
    "  \"num_attention_heads\": 32, \"num_key_value_heads\": 2, \"head_dim\": 128,\n"
    "  \"attention_bias\": false, \"attention_dropout\": 0.0, \"sliding_window\": null,\n"
    "  \"max_position_embeddings\": 262144, \"rope_theta\": 10000, \"partial_rotary_factor\": 1.0,\n"
    "  \"mamba_num_heads\": 64, \"mamba_head_dim\": 64, \"ssm_state_size\": 128, \"n_groups\": 8,\n"
    "  \"conv_kernel\": 4, \"chunk_size\": 128, \"expand\": 2, \"use_conv_bias\": true,\n"
    "  \"use_bias\": false, \"mamba_proj_bias\": false, \"mamba_hidden_act\": \"silu\",\n"
    "  \"mamba_ssm_cache_dtype\": \"float32\",\n"
    "  \"time_step_min\": 0.001, \"time_step_max\": 0.1, \"time_step_floor\": 0.0001,\n"
    "  \"intermediate_size\": 1856, \"mlp_hidden_act\": \"relu2\", \"mlp_bias\": false,\n"
    "  \"n_routed_experts\": 128, \"num_experts_per_tok\": 6, \"moe_intermediate_size\": 1856,\n"
    "  \"n_shared_experts\": 1, \"moe_shared_expert_intermediate_size\": 3712,\n"
    "  \"n_group\": 1, \"topk_group\": 1, \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5,\n"
    "  \"layer_norm_epsilon\": 1e-05, \"norm_eps\": 1e-05, \"residual_in_fp32\": false,\n"
    "  \"rescale_prenorm_residual\": true, \"initializer_range\": 0.02, \"hidden_dropout\": 0.0,\n"
    "  \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2,\n"
    "  \"pad_token_id\": 0, \"num_logits_to_keep\": 1, \"use_cache\": true,\n"
    "  \"use_mamba_kernels\": true, \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.55.4\"\n"
    "}\n";

static void test_nano(void) {
    struct nt_config c;
    if (!OK(nano_json, &c)) return;
    CHECK(!strcmp(c.pattern, "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"), "%s",
          c.pattern);
    CHECK(c.n_layer == 52, "%d", c.n_layer);
    CHECK(count(c.pattern, 'M') == 23 && count(c.pattern, 'E') == 23 &&
              count(c.pattern, '*') == 6 && count(c.pattern, '-') == 0,
          "M/E/* = %d/%d/%d", count(c.pattern, 'M'), count(c.pattern, 'E'), count(c.pattern, '*'));
    static const int attn[6] = {5, 12, 19, 26, 33, 42};
    for (int i = 0; i < 6; i++) CHECK(c.pattern[attn[i]] == '*', "layer %d", attn[i]);
    CHECK(c.vocab_size == 131072 && c.hidden_size == 2688, "%d %d", c.vocab_size, c.hidden_size);
    CHECK(c.num_attention_heads == 32 && c.num_key_value_heads == 2 && c.head_dim == 128, "attn");
    CHECK(c.mamba_num_heads == 64 && c.mamba_head_dim == 64 && c.ssm_state_size == 128 &&
              c.n_groups == 8 && c.conv_kernel == 4,
          "mamba");
    CHECK(c.n_routed_experts == 128 && c.num_experts_per_tok == 6 &&
              c.moe_intermediate_size == 1856 && c.moe_shared_expert_intermediate_size == 3712,
          "moe");
    CHECK(c.moe_latent_size == 0 && c.routed_scaling_factor == 2.5f, "%d %g", c.moe_latent_size,
          c.routed_scaling_factor);
    CHECK(c.layer_norm_epsilon == 1e-5f, "%g", c.layer_norm_epsilon);
    CHECK(c.max_position_embeddings == 262144, "%d", c.max_position_embeddings);
    CHECK(c.time_step_min == 0.001f && isinf(c.time_step_limit[1]), "dt");
    CHECK(c.n_eos == 1 && c.eos_token_id[0] == 2 && c.bos_token_id == 1 && c.pad_token_id == 0,
          "ids");
    CHECK(c.n_mtp_layer == 0, "%d", c.n_mtp_layer);
    /* Derived dims of MODEL.md 1.3. */
    int I = c.mamba_num_heads * c.mamba_head_dim, GN = c.n_groups * c.ssm_state_size;
    CHECK(I + (I + 2 * GN) + c.mamba_num_heads == 10304, "in_proj %d", I + I + 2 * GN);

    /* num_hidden_layers is derived by HF: a different given value is ignored. */
    char buf[sizeof nano_json + 16];
    const char *at = strstr(nano_json, "\"num_hidden_layers\": 52");
    CHECK(at != NULL, "fixture text");
    if (at) {
        size_t pre = (size_t)(at - nano_json);
        snprintf(buf, sizeof buf, "%.*s\"num_hidden_layers\": 99%s", (int)pre, nano_json,
                 at + strlen("\"num_hidden_layers\": 52"));
        if (OK(buf, &c)) CHECK(c.n_layer == 52, "%d", c.n_layer);
    }
}

static void test_layer_forms(void) {
    struct nt_config c;
    if (OK("{\"layers_block_type\": [\"linear_attention\", \"full_attention\", \"mlp\", \"moe\"]}",
           &c))
        CHECK(!strcmp(c.pattern, "M*-E") && c.n_layer == 4, "%s", c.pattern);
    if (OK("{\"layers_block_type\": [\"mamba\", \"attention\", \"mlp\", \"moe\", \"conv\"]}", &c))
        CHECK(!strcmp(c.pattern, "M*-EM"), "legacy names: %s", c.pattern);
    if (OK("{\"hybrid_override_pattern\": \"M-M*E\"}", &c))
        CHECK(!strcmp(c.pattern, "M-M*E") && c.n_layer == 5, "%s", c.pattern);
    /* The list wins over the string. */
    if (OK("{\"hybrid_override_pattern\": \"MMMM\", \"layers_block_type\": [\"mlp\", \"moe\"]}", &c))
        CHECK(!strcmp(c.pattern, "-E"), "precedence: %s", c.pattern);
    if (OK("{\"layers_block_type\": [\"mlp\"], \"hybrid_override_pattern\": \"MMMM\"}", &c))
        CHECK(!strcmp(c.pattern, "-"), "precedence, other order: %s", c.pattern);
    /* A null list is absent. */
    if (OK("{\"layers_block_type\": null, \"hybrid_override_pattern\": \"*-\"}", &c))
        CHECK(!strcmp(c.pattern, "*-"), "null list: %s", c.pattern);
    if (OK("{\"hybrid_override_pattern\": null}", &c))
        CHECK(!strcmp(c.pattern, "ME*-"), "null string: %s", c.pattern);

    /* NT_MAX_LAYERS is accepted, one more is not. */
    static char big[NT_MAX_LAYERS + 64];
    int n = snprintf(big, sizeof big, "{\"hybrid_override_pattern\": \"");
    memset(big + n, '-', NT_MAX_LAYERS);
    strcpy(big + n + NT_MAX_LAYERS, "\"}");
    if (OK(big, &c)) CHECK(c.n_layer == NT_MAX_LAYERS, "%d", c.n_layer);
    memset(big + n, '-', NT_MAX_LAYERS + 1);
    strcpy(big + n + NT_MAX_LAYERS + 1, "\"}");
    EXPECT_FAIL(big, NEMOTRON_ERR_CONFIG, "hybrid_override_pattern", "1025");

    EXPECT_FAIL("{\"hybrid_override_pattern\": \"\"}", NEMOTRON_ERR_CONFIG,
                "hybrid_override_pattern", "empty");
    EXPECT_FAIL("{\"layers_block_type\": []}", NEMOTRON_ERR_CONFIG, "layers_block_type", "empty");
    EXPECT_FAIL("{\"layers_block_type\": [\"mamba\", \"transformer\"]}", NEMOTRON_ERR_CONFIG,
                "layers_block_type[1]", "transformer");
    EXPECT_FAIL("{\"layers_block_type\": [\"mamba\", 3]}", NEMOTRON_ERR_CONFIG,
                "layers_block_type[1]", "3");
    EXPECT_FAIL("{\"layers_block_type\": [\"Mamba\"]}", NEMOTRON_ERR_CONFIG,
                "layers_block_type[0]", "Mamba");
    EXPECT_FAIL("{\"hybrid_override_pattern\": \"M*X-\"}", NEMOTRON_ERR_CONFIG,
                "hybrid_override_pattern[2]", "'X'");
    EXPECT_FAIL("{\"hybrid_override_pattern\": \"M\\u0000\"}", NEMOTRON_ERR_CONFIG,
                "hybrid_override_pattern[1]", "\\x00");
    EXPECT_FAIL("{\"hybrid_override_pattern\": [\"mamba\"]}", NEMOTRON_ERR_CONFIG,
                "hybrid_override_pattern", "string");
    EXPECT_FAIL("{\"layers_block_type\": \"M*\"}", NEMOTRON_ERR_CONFIG, "layers_block_type",
                "list");
}

static void test_time_step_limit(void) {
    struct nt_config c;
    if (OK("{\"time_step_limit\": [0.0, Infinity]}", &c))
        CHECK(c.time_step_limit[0] == 0 && isinf(c.time_step_limit[1]), "bare Infinity");
    if (OK("{\"time_step_limit\": [0.0, {\"__float__\": \"Infinity\"}]}", &c))
        CHECK(isinf(c.time_step_limit[1]) && c.time_step_limit[1] > 0, "__float__");
    if (OK("{\"time_step_limit\": [0.0, 1e30]}", &c))
        CHECK(c.time_step_limit[1] == 1e30, "%g", c.time_step_limit[1]);
    if (OK("{\"time_step_limit\": [0.001, 0.1]}", &c))
        CHECK(c.time_step_limit[0] == 0.001 && c.time_step_limit[1] == 0.1, "finite");
    if (OK("{\"time_step_limit\": [0, 1]}", &c))
        CHECK(c.time_step_limit[0] == 0 && c.time_step_limit[1] == 1, "integers");
    if (OK("{\"mamba_dt_limit\": [0.01, Infinity]}", &c))
        CHECK(c.time_step_limit[0] == 0.01, "alias %g", c.time_step_limit[0]);
    if (OK("{\"time_step_limit\": [0.02, 5], \"mamba_dt_limit\": [0.01, 1]}", &c))
        CHECK(c.time_step_limit[0] == 0.02, "canonical wins %g", c.time_step_limit[0]);
    EXPECT_FAIL("{\"time_step_limit\": [0.1, 0.05]}", NEMOTRON_ERR_CONFIG, "time_step_limit",
                "lo <= hi");
    EXPECT_FAIL("{\"time_step_limit\": [0.0, NaN]}", NEMOTRON_ERR_CONFIG, "time_step_limit", NULL);
    EXPECT_FAIL("{\"time_step_limit\": [0.0, {\"__float__\": \"NaN\"}]}", NEMOTRON_ERR_CONFIG,
                "time_step_limit", NULL);
    EXPECT_FAIL("{\"time_step_limit\": [-Infinity, 1]}", NEMOTRON_ERR_CONFIG, "time_step_limit",
                NULL);
    EXPECT_FAIL("{\"time_step_limit\": [0.0]}", NEMOTRON_ERR_CONFIG, "time_step_limit", "[lo, hi]");
    EXPECT_FAIL("{\"time_step_limit\": null}", NEMOTRON_ERR_CONFIG, "time_step_limit", NULL);
    EXPECT_FAIL("{\"time_step_limit\": [0.0, \"inf\"]}", NEMOTRON_ERR_CONFIG, "time_step_limit[1]",
                "string");
    EXPECT_FAIL("{\"time_step_limit\": [0.0, {\"__float__\": \"big\"}]}", NEMOTRON_ERR_CONFIG,
                "time_step_limit[1]", "object");
}

static void test_token_ids(void) {
    struct nt_config c;
    if (OK("{\"eos_token_id\": 11}", &c))
        CHECK(c.n_eos == 1 && c.eos_token_id[0] == 11, "%d", c.n_eos);
    if (OK("{\"eos_token_id\": [2, 11]}", &c))
        CHECK(c.n_eos == 2 && c.eos_token_id[0] == 2 && c.eos_token_id[1] == 11, "%d", c.n_eos);
    if (OK("{\"eos_token_id\": []}", &c)) CHECK(c.n_eos == 0, "%d", c.n_eos);
    if (OK("{\"eos_token_id\": null, \"bos_token_id\": null, \"pad_token_id\": null}", &c))
        CHECK(c.n_eos == 0 && c.bos_token_id == -1 && c.pad_token_id == -1, "%d %d %d", c.n_eos,
              c.bos_token_id, c.pad_token_id);
    if (OK("{\"bos_token_id\": 5, \"pad_token_id\": 3}", &c))
        CHECK(c.bos_token_id == 5 && c.pad_token_id == 3, "%d %d", c.bos_token_id, c.pad_token_id);
    EXPECT_FAIL("{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
                NEMOTRON_ERR_CONFIG, "eos_token_id", "17");
    EXPECT_FAIL("{\"eos_token_id\": [2, \"11\"]}", NEMOTRON_ERR_CONFIG, "eos_token_id[1]",
                "string");
    EXPECT_FAIL("{\"eos_token_id\": -3}", NEMOTRON_ERR_CONFIG, "eos_token_id", "-3");
    EXPECT_FAIL("{\"bos_token_id\": \"<s>\"}", NEMOTRON_ERR_CONFIG, "bos_token_id", "<s>");
}

static void test_aliases(void) {
    struct nt_config c;
    const char *legacy =
        "{\"mamba_n_groups\": 4, \"mamba_d_conv\": 3, \"mamba_expand\": 1, "
        "\"mamba_dt_min\": 0.002, \"mamba_dt_max\": 0.2, \"mamba_dt_limit\": [0.0, 7.0], "
        "\"mamba_dt_init_floor\": 0.0002, \"mamba_conv_bias\": false, \"mamba_chunk_size\": 64, "
        "\"num_local_experts\": 16}";
    if (OK(legacy, &c)) {
        CHECK(c.n_groups == 4 && c.conv_kernel == 3, "%d %d", c.n_groups, c.conv_kernel);
        CHECK(c.time_step_min == 0.002f && c.time_step_max == 0.2f && c.time_step_floor == 0.0002f,
              "dt %g %g %g", c.time_step_min, c.time_step_max, c.time_step_floor);
        CHECK(c.time_step_limit[1] == 7.0 && c.use_conv_bias == 0 && c.chunk_size == 64,
              "%g %d %d", c.time_step_limit[1], c.use_conv_bias, c.chunk_size);
        CHECK(c.n_routed_experts == 16, "%d", c.n_routed_experts);
    }
    /* The canonical key wins when both are present, in either order. */
    if (OK("{\"mamba_n_groups\": 4, \"n_groups\": 2, \"conv_kernel\": 2, \"mamba_d_conv\": 5, "
           "\"num_local_experts\": 16, \"n_routed_experts\": 32, \"chunk_size\": 32, "
           "\"mamba_chunk_size\": 16, \"mamba_conv_bias\": false, \"use_conv_bias\": true}",
           &c)) {
        CHECK(c.n_groups == 2 && c.conv_kernel == 2 && c.n_routed_experts == 32 &&
                  c.chunk_size == 32 && c.use_conv_bias == 1,
              "%d %d %d %d", c.n_groups, c.conv_kernel, c.n_routed_experts, c.chunk_size);
    }
    /* A message names the key the value came from. */
    EXPECT_FAIL("{\"mamba_d_conv\": \"4\"}", NEMOTRON_ERR_CONFIG, "mamba_d_conv", NULL);
    /* Unknown keys are ignored. */
    if (OK("{\"quantization_config\": {\"quant_method\": \"fp8\"}, \"rope_theta\": 10000, "
           "\"some_future_key\": [1, {\"a\": null}]}",
           &c))
        CHECK(c.hidden_size == 4096, "%d", c.hidden_size);
}

static void test_mtp(void) {
    struct nt_config c;
    if (OK("{\"num_nextn_predict_layers\": 1}", &c))
        CHECK(c.n_mtp_layer == 2 && !strcmp(c.mtp_pattern, "*E"), "default %d %s", c.n_mtp_layer,
              c.mtp_pattern);
    if (OK("{\"num_nextn_predict_layers\": 1, \"mtp_hybrid_override_pattern\": \"*E*E\"}", &c))
        CHECK(c.n_mtp_layer == 4 && !strcmp(c.mtp_pattern, "*E*E"), "string %s", c.mtp_pattern);
    if (OK("{\"num_nextn_predict_layers\": 2, \"mtp_layers_block_type\": [\"moe\"]}", &c))
        CHECK(c.n_mtp_layer == 1 && !strcmp(c.mtp_pattern, "E") &&
                  c.num_nextn_predict_layers == 2,
              "list %s", c.mtp_pattern);
    if (OK("{\"num_nextn_predict_layers\": 1, \"mtp_layers_block_type\": [\"attention\"], "
           "\"mtp_hybrid_override_pattern\": \"EE\"}",
           &c))
        CHECK(!strcmp(c.mtp_pattern, "*"), "list wins %s", c.mtp_pattern);
    if (OK("{\"num_nextn_predict_layers\": 0, \"mtp_hybrid_override_pattern\": \"*E\"}", &c))
        CHECK(c.n_mtp_layer == 0 && c.mtp_pattern[0] == '\0', "off %d", c.n_mtp_layer);
    EXPECT_FAIL("{\"num_nextn_predict_layers\": 1, \"mtp_layers_block_type\": [\"mamba\"]}",
                NEMOTRON_ERR_CONFIG, "mtp_layers_block_type[0]", "mamba");
    EXPECT_FAIL("{\"num_nextn_predict_layers\": 1, \"mtp_hybrid_override_pattern\": \"*-\"}",
                NEMOTRON_ERR_CONFIG, "mtp_hybrid_override_pattern[1]", "'-'");
    EXPECT_FAIL("{\"num_nextn_predict_layers\": 1, \"mtp_hybrid_override_pattern\": \"\"}",
                NEMOTRON_ERR_CONFIG, "mtp_hybrid_override_pattern", "empty");
    EXPECT_FAIL("{\"num_nextn_predict_layers\": 1, \"mtp_hybrid_override_pattern\": "
                "\"EEEEEEEEEEEEEEEEE\"}",
                NEMOTRON_ERR_CONFIG, "mtp_hybrid_override_pattern", "17");
    EXPECT_FAIL("{\"num_nextn_predict_layers\": -1}", NEMOTRON_ERR_CONFIG,
                "num_nextn_predict_layers", NULL);
    /* MTP layers need their kinds' sizes even when the main pattern has none of them. */
    EXPECT_FAIL("{\"hybrid_override_pattern\": \"M-\", \"num_nextn_predict_layers\": 1, "
                "\"n_routed_experts\": 0}",
                NEMOTRON_ERR_CONFIG, "n_routed_experts", "MoE");
}

static void test_types(void) {
    struct nt_config c;
    if (OK("{\"hidden_size\": 64.0}", &c)) CHECK(c.hidden_size == 64, "%d", c.hidden_size);
    EXPECT_FAIL("{\"hidden_size\": \"64\"}", NEMOTRON_ERR_CONFIG, "hidden_size", "string");
    EXPECT_FAIL("{\"hidden_size\": 64.5}", NEMOTRON_ERR_CONFIG, "hidden_size", "64.5");
    EXPECT_FAIL("{\"hidden_size\": true}", NEMOTRON_ERR_CONFIG, "hidden_size", "boolean");
    EXPECT_FAIL("{\"hidden_size\": null}", NEMOTRON_ERR_CONFIG, "hidden_size", "null");
    EXPECT_FAIL("{\"vocab_size\": [384]}", NEMOTRON_ERR_CONFIG, "vocab_size", "list");
    EXPECT_FAIL("{\"hidden_size\": -64}", NEMOTRON_ERR_CONFIG, "hidden_size", "-64");
    EXPECT_FAIL("{\"hidden_size\": 1e30}", NEMOTRON_ERR_CONFIG, "hidden_size", "1e30");
    EXPECT_FAIL("{\"hidden_size\": Infinity}", NEMOTRON_ERR_CONFIG, "hidden_size", NULL);
    EXPECT_FAIL("{\"hidden_size\": 99999999999999999999}", NEMOTRON_ERR_CONFIG, "hidden_size",
                NULL);
    EXPECT_FAIL("{\"hidden_size\": -99999999999999999999}", NEMOTRON_ERR_CONFIG, "hidden_size",
                NULL);
    EXPECT_FAIL("{\"hidden_size\": 65537}", NEMOTRON_ERR_CONFIG, "hidden_size", "65537");
    EXPECT_FAIL("{\"vocab_size\": 16777217}", NEMOTRON_ERR_CONFIG, "vocab_size", NULL);
    EXPECT_FAIL("{\"n_routed_experts\": 4097}", NEMOTRON_ERR_CONFIG, "n_routed_experts", NULL);
    EXPECT_FAIL("{\"tie_word_embeddings\": 1}", NEMOTRON_ERR_CONFIG, "tie_word_embeddings", NULL);
    EXPECT_FAIL("{\"use_conv_bias\": \"true\"}", NEMOTRON_ERR_CONFIG, "use_conv_bias", NULL);
    EXPECT_FAIL("{\"use_cache\": null}", NEMOTRON_ERR_CONFIG, "use_cache", NULL);
    EXPECT_FAIL("{\"layer_norm_epsilon\": \"1e-5\"}", NEMOTRON_ERR_CONFIG, "layer_norm_epsilon",
                NULL);
    EXPECT_FAIL("{\"routed_scaling_factor\": NaN}", NEMOTRON_ERR_CONFIG, "routed_scaling_factor",
                NULL);
    EXPECT_FAIL("{\"time_step_min\": 1e300}", NEMOTRON_ERR_CONFIG, "time_step_min", NULL);
    EXPECT_FAIL("{\"time_step_max\": -0.1}", NEMOTRON_ERR_CONFIG, "time_step_max", NULL);
    EXPECT_FAIL("{\"mamba_ssm_cache_dtype\": 32}", NEMOTRON_ERR_CONFIG, "mamba_ssm_cache_dtype",
                NULL);
    EXPECT_FAIL("{\"attention_dropout\": 2}", NEMOTRON_ERR_CONFIG, "attention_dropout", NULL);
    if (OK("{\"tie_word_embeddings\": true, \"routed_scaling_factor\": 5}", &c))
        CHECK(c.tie_word_embeddings == 1 && c.routed_scaling_factor == 5.0f, "bool/int float");
    /* Keys whose HF default is None. */
    if (OK("{\"num_attention_heads\": 4, \"num_key_value_heads\": null}", &c))
        CHECK(c.num_key_value_heads == 4, "nkv %d", c.num_key_value_heads);
    if (OK("{\"moe_latent_size\": null, \"sliding_window\": null}", &c))
        CHECK(c.moe_latent_size == 0, "%d", c.moe_latent_size);
    if (OK("{\"moe_latent_size\": 1024}", &c)) CHECK(c.moe_latent_size == 1024, "latent");
    EXPECT_FAIL("{\"moe_latent_size\": 0}", NEMOTRON_ERR_CONFIG, "moe_latent_size", NULL);
    EXPECT_FAIL("{\"sliding_window\": \"none\"}", NEMOTRON_ERR_CONFIG, "sliding_window", NULL);
    EXPECT_FAIL("[1, 2]", NEMOTRON_ERR_CONFIG, "object", NULL);
}

static void test_validation(void) {
    struct nt_config c;
    EXPECT_FAIL("{\"num_attention_heads\": 32, \"num_key_value_heads\": 5}", NEMOTRON_ERR_CONFIG,
                "num_attention_heads = 32", "num_key_value_heads = 5");
    EXPECT_FAIL("{\"mamba_num_heads\": 10, \"n_groups\": 4}", NEMOTRON_ERR_CONFIG,
                "mamba_num_heads = 10", "n_groups = 4");
    EXPECT_FAIL("{\"num_experts_per_tok\": 9, \"n_routed_experts\": 8}", NEMOTRON_ERR_CONFIG,
                "num_experts_per_tok = 9", "n_routed_experts = 8");
    EXPECT_FAIL("{\"n_routed_experts\": 8, \"n_group\": 3}", NEMOTRON_ERR_CONFIG,
                "n_routed_experts = 8", "n_group = 3");
    EXPECT_FAIL("{\"n_group\": 2, \"topk_group\": 3}", NEMOTRON_ERR_CONFIG, "topk_group = 3",
                "n_group = 2");
    EXPECT_FAIL("{\"n_routed_experts\": 8, \"n_group\": 8, \"topk_group\": 8}",
                NEMOTRON_ERR_CONFIG, "n_group", "top 2");
    EXPECT_FAIL("{\"n_routed_experts\": 8, \"n_group\": 4, \"topk_group\": 1, "
                "\"num_experts_per_tok\": 3}",
                NEMOTRON_ERR_CONFIG, "topk_group", "num_experts_per_tok = 3");
    if (OK("{\"n_routed_experts\": 8, \"n_group\": 4, \"topk_group\": 2, \"num_experts_per_tok\": 4}",
           &c))
        CHECK(c.n_group == 4 && c.topk_group == 2, "groups");
    EXPECT_FAIL("{\"conv_kernel\": 17}", NEMOTRON_ERR_CONFIG, "conv_kernel", "17");
    EXPECT_FAIL("{\"conv_kernel\": 0}", NEMOTRON_ERR_CONFIG, "conv_kernel", "Mamba");
    EXPECT_FAIL("{\"layer_norm_epsilon\": 0}", NEMOTRON_ERR_CONFIG, "layer_norm_epsilon", NULL);
    EXPECT_FAIL("{\"layer_norm_epsilon\": 1e-60}", NEMOTRON_ERR_CONFIG, "layer_norm_epsilon", NULL);
    EXPECT_FAIL("{\"layer_norm_epsilon\": -1e-5}", NEMOTRON_ERR_CONFIG, "layer_norm_epsilon",
                NULL);
    EXPECT_FAIL("{\"vocab_size\": 0}", NEMOTRON_ERR_CONFIG, "vocab_size", NULL);
    EXPECT_FAIL("{\"hidden_size\": 0}", NEMOTRON_ERR_CONFIG, "hidden_size", NULL);
    EXPECT_FAIL("{\"head_dim\": 0}", NEMOTRON_ERR_CONFIG, "head_dim", "attention");
    EXPECT_FAIL("{\"intermediate_size\": 0}", NEMOTRON_ERR_CONFIG, "intermediate_size", "MLP");
    EXPECT_FAIL("{\"moe_intermediate_size\": 0}", NEMOTRON_ERR_CONFIG, "moe_intermediate_size",
                "MoE");
    if (OK("{\"num_attention_heads\": 4096, \"head_dim\": 4096, \"num_key_value_heads\": 1}", &c))
        CHECK(c.num_attention_heads * c.head_dim == 1 << 24, "widest attention");
    EXPECT_FAIL("{\"mamba_num_heads\": 4096, \"mamba_head_dim\": 4096}", NEMOTRON_ERR_CONFIG,
                "in_proj", "wider");
    /* Sizes of kinds the pattern does not use may be 0, but never negative. */
    if (OK("{\"hybrid_override_pattern\": \"M-\", \"n_routed_experts\": 0, "
           "\"num_experts_per_tok\": 0, \"moe_intermediate_size\": 0, "
           "\"moe_shared_expert_intermediate_size\": 0, \"n_group\": 0, \"topk_group\": 0, "
           "\"num_attention_heads\": 0, \"num_key_value_heads\": 0, \"head_dim\": 0}",
           &c))
        CHECK(c.n_routed_experts == 0 && c.num_attention_heads == 0, "unused kinds");
    if (OK("{\"hybrid_override_pattern\": \"*E\", \"conv_kernel\": 0, \"mamba_num_heads\": 3}", &c))
        CHECK(c.conv_kernel == 0, "no Mamba: %d", c.conv_kernel);
    EXPECT_FAIL("{\"hybrid_override_pattern\": \"M-\", \"n_routed_experts\": -1}",
                NEMOTRON_ERR_CONFIG, "n_routed_experts", "-1");
    EXPECT_FAIL("{\"hybrid_override_pattern\": \"M-\", \"num_attention_heads\": 32, "
                "\"num_key_value_heads\": -8}",
                NEMOTRON_ERR_CONFIG, "num_key_value_heads", NULL);
}

static void test_activations(void) {
    EXPECT_FAIL("{\"mamba_hidden_act\": \"gelu\"}", NEMOTRON_ERR_UNSUPPORTED, "mamba_hidden_act",
                "gelu");
    EXPECT_FAIL("{\"mlp_hidden_act\": \"silu\"}", NEMOTRON_ERR_UNSUPPORTED, "mlp_hidden_act",
                "silu");
    EXPECT_FAIL("{\"mlp_hidden_act\": \"relu2 \"}", NEMOTRON_ERR_UNSUPPORTED, "mlp_hidden_act",
                NULL);
    EXPECT_FAIL("{\"mlp_hidden_act\": 2}", NEMOTRON_ERR_CONFIG, "mlp_hidden_act", NULL);
    struct nt_config c;
    OK("{\"mamba_hidden_act\": \"silu\", \"mlp_hidden_act\": \"relu2\"}", &c);
}

static void test_bad_json(void) {
    EXPECT_FAIL("{\n  \"vocab_size\": 10,\n  \"hidden_size\": x\n}", NEMOTRON_ERR_FORMAT,
                "line 3, column 18", NULL);
    EXPECT_FAIL("{\"vocab_size\" 10}", NEMOTRON_ERR_FORMAT, "line 1, column 15", NULL);
    EXPECT_FAIL("{\"vocab_size\": 10", NEMOTRON_ERR_FORMAT, "end", NULL);
    EXPECT_FAIL("", NEMOTRON_ERR_FORMAT, "line 1, column 1", NULL);
    EXPECT_FAIL("{}\n{}", NEMOTRON_ERR_FORMAT, "line 2, column 1", NULL);
    EXPECT_FAIL("{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
                NEMOTRON_ERR_FORMAT, "invalid JSON", NULL);
    /* A NUL byte inside the text. */
    struct nt_config c;
    static const char with_nul[] = "{\"vocab_size\": 10,\n \0 }";
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_config_parse(with_nul, sizeof with_nul - 1, "nul.json", &c, &err);
    CHECK(st == NEMOTRON_ERR_FORMAT && strstr(err.msg, "nul.json") &&
              strstr(err.msg, "line 2, column 2"),
          "%d %s", st, err.msg);
    /* The length is explicit: the text need not be NUL-terminated, and bytes past it are not
     * read. */
    static const char longer[] = "{\"hidden_size\": 64}garbage";
    memset(&err, 0, sizeof err);
    st = nt_config_parse(longer, strlen("{\"hidden_size\": 64}"), "len.json", &c, &err);
    CHECK(st == NEMOTRON_OK && c.hidden_size == 64, "%d %s", st, err.msg);
    /* Trailing whitespace is fine. */
    if (OK("{\"hidden_size\": 64}\n\n  ", &c)) CHECK(c.hidden_size == 64, "ws");
    /* A failed parse leaves the struct untouched. */
    struct nt_config before, after;
    memset(&before, 0x5a, sizeof before);
    after = before;
    memset(&err, 0, sizeof err);
    st = nt_config_parse("{\"hidden_size\": -1}", 19, "x", &after, &err);
    CHECK(st == NEMOTRON_ERR_CONFIG && !memcmp(&before, &after, sizeof before), "untouched");
    /* A NULL name still gives a message. */
    st = nt_config_parse("{", 1, NULL, &c, &err);
    CHECK(st == NEMOTRON_ERR_FORMAT && err.msg[0], "%s", err.msg);
}

static void test_fixtures(void) {
    static const struct {
        const char *dir, *pattern;
    } fx[] = {{"hybrid-group-f32", "M*-EMEM*E-M"},
              {"latent-mtp-f32", "ME*EMEM-"},
              {"tied-bf16", "MEM*E-ME"},
              {"dense-f16", "M-M*-M-M"}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char path[256];
        struct nt_config c;
        snprintf(path, sizeof path, "%s/%s/config.json", FIXTURES, fx[i].dir);
        memset(&err, 0, sizeof err);
        nemotron_status st = nt_config_load(path, &c, &err);
        CHECK(st == NEMOTRON_OK, "%s: %s", path, err.msg);
        if (st) continue;
        CHECK(!strcmp(c.pattern, fx[i].pattern), "%s: %s", fx[i].dir, c.pattern);
        CHECK(c.n_layer == (int)strlen(fx[i].pattern), "%s: %d", fx[i].dir, c.n_layer);
        CHECK(c.vocab_size == 384 && c.hidden_size == 64, "%s", fx[i].dir);
        CHECK(c.time_step_limit[1] >= 1e30, "%s: %g", fx[i].dir, c.time_step_limit[1]);
        if (!strcmp(fx[i].dir, "hybrid-group-f32"))
            CHECK(c.n_group == 4 && c.topk_group == 2 && c.n_groups == 2 && c.n_mtp_layer == 0 &&
                      isinf(c.time_step_limit[1]),
                  "hybrid-group");
        if (!strcmp(fx[i].dir, "latent-mtp-f32"))
            CHECK(c.moe_latent_size == 24 && c.num_nextn_predict_layers == 1 &&
                      c.n_mtp_layer == 2 && !strcmp(c.mtp_pattern, "*E") &&
                      c.n_routed_experts == 16 && c.num_experts_per_tok == 4 &&
                      c.routed_scaling_factor == 5.0f && c.chunk_size == 48,
                  "latent-mtp: %d %d %s", c.moe_latent_size, c.n_mtp_layer, c.mtp_pattern);
        if (!strcmp(fx[i].dir, "tied-bf16"))
            CHECK(c.tie_word_embeddings == 1 && c.norm_topk_prob == 0 && c.n_group == 2 &&
                      c.time_step_limit[1] == 1e30,
                  "tied");
        if (!strcmp(fx[i].dir, "dense-f16"))
            CHECK(c.tie_word_embeddings == 0 && c.n_groups == 4 && c.mamba_head_dim == 16 &&
                      c.intermediate_size == 80 && isinf(c.time_step_limit[1]) &&
                      c.moe_latent_size == 0,
                  "dense");
    }
    struct nt_config c;
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_config_load("tests/fixtures/no-such-dir/config.json", &c, &err);
    CHECK(st == NEMOTRON_ERR_IO && strstr(err.msg, "no-such-dir/config.json") &&
              strstr(err.msg, "No such file"),
          "%d %s", st, err.msg);
    st = nt_config_load(FIXTURES, &c, &err);
    CHECK(st == NEMOTRON_ERR_IO && strstr(err.msg, FIXTURES), "directory: %d %s", st, err.msg);
    /* A file over the size cap is refused before it is read (a sparse file: no disk used). */
    char big[64];
    snprintf(big, sizeof big, "/tmp/test_config_big_%d.json", (int)getpid());
    FILE *f = fopen(big, "wb");
    CHECK(f && ftruncate(fileno(f), (16 << 20) + 1) == 0, "cannot make %s", big);
    if (f) {
        fclose(f);
        st = nt_config_load(big, &c, &err);
        CHECK(st == NEMOTRON_ERR_FORMAT && strstr(err.msg, big) && strstr(err.msg, "16777217"),
              "big: %d %s", st, err.msg);
        remove(big);
    }
    /* A file that is not a config: the message names the file. */
    st = nt_config_load(FIXTURES "/dense-f16/ids.i32", &c, &err);
    CHECK(st == NEMOTRON_ERR_FORMAT && strstr(err.msg, "ids.i32"), "binary: %d %s", st, err.msg);
}

int main(void) {
    test_defaults();
    test_nano();
    test_layer_forms();
    test_time_step_limit();
    test_token_ids();
    test_aliases();
    test_mtp();
    test_types();
    test_validation();
    test_activations();
    test_bad_json();
    test_fixtures();
    return test_summary("config");
}
