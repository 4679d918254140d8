/* gguf_model.c - a llama.cpp GGUF of a Nemotron-H as a model source (gguf_model.h).
 *
 * The engine binds weights by their Hugging Face names (weights.c), so a GGUF is translated, not
 * given a second binder: its metadata becomes a config.json (then parsed and validated as any
 * other, nt_config_parse), its tensors become views under the checkpoint's names, its tokenizer
 * metadata a tokenizer.json (src/text/tokenizer_gguf.c). Nothing is copied or repacked: every
 * view points into the file's mapping. A `convert` of a GGUF writes these files and views into a
 * .nemo, block types kept (src/convert/convert.c).
 *
 * Layer kinds come from the tensors each block holds (ssm_in: Mamba; attn_q: attention;
 * ffn_up_exps: MoE; ffn_up: dense MLP), not from the metadata alone: files exist whose per-layer
 * metadata is zero where it should not be (KV heads of 0 on every layer), and a tensor present
 * is what the forward needs. Head counts come from the attention tensors' shapes and are checked
 * against the metadata where it says anything (a nonzero value).
 *
 * What llama.cpp's converter (convert_hf_to_gguf.py, Mamba2 / NemotronH) does to a checkpoint's
 * tensors, and how each is undone here (GGUF lists dimensions innermost first: ne[0] is a row's
 * length, so a [rows][cols] matrix has ne = {cols, rows} and the same bytes):
 *   - names: backbone.layers.N.* -> blk.N.* (table below); embeddings -> token_embd, norm_f ->
 *     output_norm, lm_head -> output (absent when tied).
 *   - mixer.A_log -> ssm_a holding A = -exp(A_log), shape [nh, 1]: kept as A (the engine holds A,
 *     weights.h), named "mixer.A" for the binder; the extra dimension is dropped.
 *   - mixer.D -> ssm_d, shape [nh, 1]: the extra dimension is dropped.
 *   - mixer.dt_bias -> ssm_dt.bias, [nh]: as is.
 *   - mixer.conv1d.weight [CD, 1, K] -> ssm_conv1d.weight squeezed to [CD, K]: the same bytes,
 *     given back the middle dimension of 1.
 *   - mixer.norm.weight [I] -> ssm_norm.weight reshaped to [G, I/G] (one row per group for
 *     llama.cpp's grouped norm): the same bytes, flattened back.
 *   - mixer.experts.E.{up,down}_proj.weight -> one 3-D ffn_{up,down}_exps.weight [E, rows, cols]:
 *     expert E's matrix is the E-th slice of it, viewed in place.
 *   - mixer.gate.weight -> ffn_gate_inp.weight, mixer.gate.e_score_correction_bias ->
 *     exp_probs_b.bias, shared_experts.* -> ffn_*_shexp, the latent projections fc1/fc2 ->
 *     ffn_latent_down / ffn_latent_up: as is.
 *   - norm weights are stored as they are (Nemotron-H's RMSNorm multiplies by the weight; no +1
 *     is folded in), attention q/k are not permuted (NoPE: there is no rotary layout to undo).
 * MTP layers are not written by llama.cpp's converter; a tensor this table does not know is an
 * error naming it.
 */
#include "gguf_model.h"

#include <json.h>
#include <stdio.h>

#include "../quant/ggml_blocks.h"
#include "../text/tokenizer.h"
#include "gguf.h"
#include "weights.h"

int nt_path_is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char magic[4];
    int ok = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(f);
    return ok;
}

/* How a GGUF tensor's shape becomes the checkpoint's (see the file comment). */
enum reshape {
    AS_IS,        /* the dimensions reversed: ne {cols, rows} -> [rows][cols] */
    CONV,         /* ne {K, CD} -> [CD, 1, K] */
    COLUMN,       /* ne {1, n} (or {n}) -> [n] */
    FLAT,         /* any shape -> [n_elements] */
    EXPERTS       /* ne {cols, rows, E} -> E views [rows][cols], "%d" in the name takes E */
};

static const struct block_tensor {
    const char *gguf;             /* after "blk.N." */
    const char *hf;               /* after "backbone.layers.N." */
    enum reshape reshape;
} block_tensors[] = {
    {"attn_norm.weight", "norm.weight", AS_IS},
    {"ssm_in.weight", "mixer.in_proj.weight", AS_IS},
    {"ssm_in.bias", "mixer.in_proj.bias", AS_IS},
    {"ssm_conv1d.weight", "mixer.conv1d.weight", CONV},
    {"ssm_conv1d.bias", "mixer.conv1d.bias", AS_IS},
    {"ssm_dt.bias", "mixer.dt_bias", AS_IS},
    {"ssm_a", "mixer.A", COLUMN},
    {"ssm_d", "mixer.D", COLUMN},
    {"ssm_norm.weight", "mixer.norm.weight", FLAT},
    {"ssm_out.weight", "mixer.out_proj.weight", AS_IS},
    {"ssm_out.bias", "mixer.out_proj.bias", AS_IS},
    {"attn_q.weight", "mixer.q_proj.weight", AS_IS},
    {"attn_k.weight", "mixer.k_proj.weight", AS_IS},
    {"attn_v.weight", "mixer.v_proj.weight", AS_IS},
    {"attn_output.weight", "mixer.o_proj.weight", AS_IS},
    {"ffn_up.weight", "mixer.up_proj.weight", AS_IS},
    {"ffn_up.bias", "mixer.up_proj.bias", AS_IS},
    {"ffn_down.weight", "mixer.down_proj.weight", AS_IS},
    {"ffn_down.bias", "mixer.down_proj.bias", AS_IS},
    {"ffn_gate_inp.weight", "mixer.gate.weight", AS_IS},
    {"exp_probs_b.bias", "mixer.gate.e_score_correction_bias", AS_IS},
    {"ffn_up_exps.weight", "mixer.experts.%d.up_proj.weight", EXPERTS},
    {"ffn_down_exps.weight", "mixer.experts.%d.down_proj.weight", EXPERTS},
    {"ffn_up_shexp.weight", "mixer.shared_experts.up_proj.weight", AS_IS},
    {"ffn_up_shexp.bias", "mixer.shared_experts.up_proj.bias", AS_IS},
    {"ffn_down_shexp.weight", "mixer.shared_experts.down_proj.weight", AS_IS},
    {"ffn_down_shexp.bias", "mixer.shared_experts.down_proj.bias", AS_IS},
    {"ffn_latent_down.weight", "mixer.fc1_latent_proj.weight", AS_IS},
    {"ffn_latent_down.bias", "mixer.fc1_latent_proj.bias", AS_IS},
    {"ffn_latent_up.weight", "mixer.fc2_latent_proj.weight", AS_IS},
    {"ffn_latent_up.bias", "mixer.fc2_latent_proj.bias", AS_IS},
};

static const struct { const char *gguf, *hf; } top_tensors[] = {
    {"token_embd.weight", "backbone.embeddings.weight"},
    {"output_norm.weight", "backbone.norm_f.weight"},
    {"output.weight", "lm_head.weight"},
};

/* The state of one open: the file, its architecture prefix, and messages. */
struct gm {
    const struct nt_gguf *g;
    const char *path, *arch;
    struct nt_err *err;
    int n_layer;
    char key[256];
};

static const char *akey(struct gm *m, const char *suffix) {
    snprintf(m->key, sizeof m->key, "%s.%s", m->arch, suffix);
    return m->key;
}

static const struct nt_gguf_tensor *blk(const struct gm *m, int layer, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    return nt_gguf_tensor(m->g, name);
}

/* "{arch}.suffix" as an unsigned integer: *out, or dflt when absent and not required. */
static nemotron_status meta_uint(struct gm *m, const char *suffix, int required, int64_t dflt,
                                 int64_t *out) {
    const char *key = akey(m, suffix);
    if (!nt_gguf_find(m->g, key)) {
        if (required)
            return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s' is missing", m->path, key);
        *out = dflt;
        return NEMOTRON_OK;
    }
    uint64_t v;
    nemotron_status st = nt_gguf_get_uint(m->g, key, &v, m->err);
    if (st) return st;
    if (v > INT32_MAX)
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s' is %llu, too large", m->path,
                       key, (unsigned long long)v);
    *out = (int64_t)v;
    return NEMOTRON_OK;
}

static nemotron_status meta_float(struct gm *m, const char *suffix, double dflt, double *out) {
    const char *key = akey(m, suffix);
    if (!nt_gguf_find(m->g, key)) {
        *out = dflt;
        return NEMOTRON_OK;
    }
    return nt_gguf_get_float(m->g, key, out, m->err);
}

static nemotron_status meta_bool(struct gm *m, const char *suffix, int dflt, int *out) {
    const char *key = akey(m, suffix);
    if (!nt_gguf_find(m->g, key)) {
        *out = dflt;
        return NEMOTRON_OK;
    }
    return nt_gguf_get_bool(m->g, key, out, m->err);
}

static int is_int_vtype(uint32_t t) {
    return t <= NT_GGUF_I32 || t == NT_GGUF_U64 || t == NT_GGUF_I64;
}

/* A per-layer key ("{arch}.attention.head_count_kv", "{arch}.feed_forward_length"): a scalar
 * for every layer or an array of n_layer integers. Layer `layer`'s value, or 0 when absent. */
static nemotron_status meta_per_layer(struct gm *m, const char *suffix, int layer, int64_t *out) {
    const char *key = akey(m, suffix);
    const struct nt_gguf_kv *kv = nt_gguf_find(m->g, key);
    *out = 0;
    if (!kv) return NEMOTRON_OK;
    if (!is_int_vtype(kv->arr_type) || (kv->type == NT_GGUF_ARRAY && kv->n != (uint64_t)m->n_layer))
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG,
                       "%s: GGUF key '%s' must be an integer or an array of %d integers (one per "
                       "block), found %s%s", m->path, key, m->n_layer,
                       kv->type == NT_GGUF_ARRAY ? "an array of " : "", nt_gguf_vtype_name(kv->arr_type));
    *out = nt_gguf_int_at(kv, kv->type == NT_GGUF_ARRAY ? (uint64_t)layer : 0);
    if (*out < 0 || *out > INT32_MAX)
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s'[%d] is %lld, out of range",
                       m->path, key, layer, (long long)*out);
    return NEMOTRON_OK;
}

/* A tensor's rows (ne[1]) as a 2-D matrix; 0 when it is not 2-D. */
static int64_t rows_of(const struct nt_gguf_tensor *t) { return t && t->ndim == 2 ? t->ne[1] : 0; }

/* Where the metadata speaks (nonzero), it must agree with what the tensors say. */
static nemotron_status agree(struct gm *m, const char *suffix, int layer, int64_t from_tensors,
                             const char *tensor) {
    int64_t meta;
    nemotron_status st = meta_per_layer(m, suffix, layer, &meta);
    if (st || meta == 0 || meta == from_tensors) return st;
    return nt_fail(m->err, NEMOTRON_ERR_CONFIG,
                   "%s: GGUF key '%s' says %lld for block %d, but blk.%d.%s gives %lld", m->path,
                   akey(m, suffix), (long long)meta, layer, layer, tensor, (long long)from_tensors);
}

static void put_int(json_object *o, const char *k, int64_t v) { json_object_object_add(o, k, json_object_new_int64(v)); }

/* The layer kinds, from the tensors of each block. */
static nemotron_status layer_kinds(struct gm *m, json_object *cfg, char *pattern) {
    static const struct { const char *tensor, *kind; char c; } marks[] = {
        {"ssm_in.weight", "mamba", 'M'}, {"attn_q.weight", "attention", '*'},
        {"ffn_up_exps.weight", "moe", 'E'}, {"ffn_up.weight", "mlp", '-'},
    };
    json_object *kinds = json_object_new_array();
    json_object_object_add(cfg, "layers_block_type", kinds);
    for (int i = 0; i < m->n_layer; i++) {
        int found = -1;
        for (int k = 0; k < 4; k++) {
            if (!blk(m, i, marks[k].tensor)) continue;
            if (found >= 0)
                return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                               "%s: block %d holds both blk.%d.%s and blk.%d.%s: one block is one "
                               "kind (Mamba, attention, MoE or MLP)", m->path, i, i,
                               marks[found].tensor, i, marks[k].tensor);
            found = k;
        }
        if (found < 0)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                           "%s: block %d has none of blk.%d.ssm_in.weight, attn_q.weight, "
                           "ffn_up_exps.weight or ffn_up.weight: its kind is unknown",
                           m->path, i, i);
        pattern[i] = marks[found].c;
        json_object_array_add(kinds, json_object_new_string(marks[found].kind));
    }
    pattern[m->n_layer] = 0;
    return NEMOTRON_OK;
}

#define TRY(x)                              \
    do {                                    \
        nemotron_status st_ = (x);          \
        if (st_ != NEMOTRON_OK) return st_; \
    } while (0)

/* The first block of a kind, or -1. */
static int first_of(const char *pattern, char kind) {
    const char *p = strchr(pattern, kind);
    return p ? (int)(p - pattern) : -1;
}

static nemotron_status attention_config(struct gm *m, json_object *cfg, const char *pattern) {
    int64_t heads = 0, head_dim = 0, H = 0;
    TRY(meta_uint(m, "embedding_length", 1, 0, &H));
    int first = first_of(pattern, '*');
    TRY(meta_per_layer(m, "attention.head_count", first < 0 ? 0 : first, &heads));
    TRY(meta_uint(m, "attention.key_length", 0, heads ? H / heads : 0, &head_dim));
    int64_t kv_heads = 0;
    for (int i = 0; i < m->n_layer; i++) {
        if (pattern[i] != '*') continue;
        if (head_dim <= 0)
            return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s' is missing (the head "
                           "size of the attention blocks)", m->path, akey(m, "attention.key_length"));
        int64_t q = rows_of(blk(m, i, "attn_q.weight")), k = rows_of(blk(m, i, "attn_k.weight"));
        if (!k)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: tensor 'blk.%d.attn_k.weight' is "
                           "missing or not 2-D (block %d is attention)", m->path, i, i);
        if (q % head_dim || k % head_dim || !q)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                           "%s: blk.%d.attn_q.weight has %lld rows and attn_k.weight %lld: not whole "
                           "heads of %lld (%s)", m->path, i, (long long)q, (long long)k,
                           (long long)head_dim, akey(m, "attention.key_length"));
        if (i == first) {
            heads = q / head_dim;
            kv_heads = k / head_dim;
        }
        TRY(agree(m, "attention.head_count", i, q / head_dim, "attn_q.weight"));
        TRY(agree(m, "attention.head_count_kv", i, k / head_dim, "attn_k.weight"));
    }
    /* no attention block: the values do not matter, but must pass the config's checks */
    put_int(cfg, "num_attention_heads", heads ? heads : 1);
    put_int(cfg, "num_key_value_heads", kv_heads ? kv_heads : 1);
    put_int(cfg, "head_dim", head_dim ? head_dim : H);
    return NEMOTRON_OK;
}

static nemotron_status mamba_config(struct gm *m, json_object *cfg, const char *pattern) {
    int first = first_of(pattern, 'M');
    int required = first >= 0;
    int64_t state = 0, groups = 0, inner = 0, nh = 0, conv = 0;
    TRY(meta_uint(m, "ssm.state_size", required, 128, &state));
    TRY(meta_uint(m, "ssm.group_count", required, 8, &groups));
    TRY(meta_uint(m, "ssm.inner_size", required, 4096, &inner));
    TRY(meta_uint(m, "ssm.time_step_rank", required, 64, &nh));
    TRY(meta_uint(m, "ssm.conv_kernel", required, 4, &conv));
    if (nh <= 0 || inner % nh)
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG,
                       "%s: GGUF key '%s' = %lld is not a whole number of heads (%s = %lld)", m->path,
                       akey(m, "ssm.inner_size"), (long long)inner, "ssm.time_step_rank", (long long)nh);
    put_int(cfg, "ssm_state_size", state);
    put_int(cfg, "n_groups", groups);
    put_int(cfg, "mamba_num_heads", nh);
    put_int(cfg, "mamba_head_dim", inner / nh);
    put_int(cfg, "conv_kernel", conv);
    json_object_object_add(cfg, "use_conv_bias",
                           json_object_new_boolean(first < 0 || blk(m, first, "ssm_conv1d.bias")));
    json_object_object_add(cfg, "use_bias", json_object_new_boolean(first >= 0 && blk(m, first, "ssm_in.bias")));
    return NEMOTRON_OK;
}

static nemotron_status ffn_config(struct gm *m, json_object *cfg, const char *pattern) {
    int mlp = first_of(pattern, '-'), moe = first_of(pattern, 'E');
    int64_t inter = 0;
    if (mlp >= 0) {
        inter = rows_of(blk(m, mlp, "ffn_up.weight"));
        for (int i = 0; i < m->n_layer; i++)
            if (pattern[i] == '-') TRY(agree(m, "feed_forward_length", i, inter, "ffn_up.weight"));
    }
    put_int(cfg, "intermediate_size", inter ? inter : 1);
    int bias = (mlp >= 0 && blk(m, mlp, "ffn_up.bias")) || (moe >= 0 && blk(m, moe, "ffn_up_shexp.bias"));
    json_object_object_add(cfg, "mlp_bias", json_object_new_boolean(bias));

    int required = moe >= 0;
    int64_t E = 0, k = 0, mi = 0, si = 0, n_shared = 0, n_group = 0, topk_group = 0, gating = 0;
    TRY(meta_uint(m, "expert_count", required, 8, &E));
    TRY(meta_uint(m, "expert_used_count", required, 2, &k));
    TRY(meta_uint(m, "expert_feed_forward_length", 0, 0, &mi));
    if (!mi && moe >= 0) TRY(meta_per_layer(m, "feed_forward_length", moe, &mi));
    if (!mi && moe >= 0)
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s' is missing", m->path,
                       akey(m, "expert_feed_forward_length"));
    TRY(meta_uint(m, "expert_shared_feed_forward_length", required, 0, &si));
    TRY(meta_uint(m, "expert_shared_count", 0, 1, &n_shared));
    TRY(meta_uint(m, "expert_group_count", 0, 1, &n_group));
    TRY(meta_uint(m, "expert_group_used_count", 0, 1, &topk_group));
    TRY(meta_uint(m, "expert_gating_func", 0, 2, &gating));
    if (gating != 2) /* llama.cpp: 1 softmax, 2 sigmoid; Nemotron-H routes by sigmoid */
        return nt_fail(m->err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: GGUF key '%s' is %lld: Nemotron-H routes by sigmoid (2)", m->path,
                       akey(m, "expert_gating_func"), (long long)gating);
    int norm;
    double scale;
    /* llama.cpp's defaults when absent: no renormalisation, a scale of 1 */
    TRY(meta_bool(m, "expert_weights_norm", 0, &norm));
    TRY(meta_float(m, "expert_weights_scale", 1.0, &scale));
    put_int(cfg, "n_routed_experts", E);
    put_int(cfg, "num_experts_per_tok", k);
    put_int(cfg, "moe_intermediate_size", mi ? mi : 1);
    put_int(cfg, "moe_shared_expert_intermediate_size", si ? si : 1);
    put_int(cfg, "n_shared_experts", n_shared);
    put_int(cfg, "n_group", n_group);
    put_int(cfg, "topk_group", topk_group);
    json_object_object_add(cfg, "norm_topk_prob", json_object_new_boolean(norm));
    json_object_object_add(cfg, "routed_scaling_factor", json_object_new_double(scale));
    /* the latent size is the rows of fc1 (ffn_latent_down), when the blocks have one */
    int64_t latent = moe >= 0 ? rows_of(blk(m, moe, "ffn_latent_down.weight")) : 0;
    if (latent) put_int(cfg, "moe_latent_size", latent);
    else json_object_object_add(cfg, "moe_latent_size", NULL);
    return NEMOTRON_OK;
}

/* A token id key of the tokenizer metadata, when present. */
static nemotron_status token_id(struct gm *m, const char *key, int64_t *id) {
    *id = -1;
    if (!nt_gguf_find(m->g, key)) return NEMOTRON_OK;
    uint64_t v;
    TRY(nt_gguf_get_uint(m->g, key, &v, m->err));
    *id = v > INT32_MAX ? INT32_MAX : (int64_t)v;
    return NEMOTRON_OK;
}

/* The ids generation ends on: the EOS, llama.cpp's end-of-turn / end-of-message ids, and the
 * chat format's end of turn (<|im_end|>, as Nemotron's generation_config.json lists it). */
static nemotron_status stop_ids(struct gm *m, json_object *list, int64_t eos) {
    int64_t ids[4] = {eos, -1, -1, -1};
    TRY(token_id(m, "tokenizer.ggml.eot_token_id", &ids[1]));
    TRY(token_id(m, "tokenizer.ggml.eom_token_id", &ids[2]));
    const struct nt_gguf_kv *tokens = nt_gguf_find(m->g, "tokenizer.ggml.tokens");
    if (tokens && tokens->type == NT_GGUF_ARRAY && tokens->arr_type == NT_GGUF_STRING) {
        uint64_t pos = 0;
        const char *s;
        uint64_t len;
        for (uint64_t i = 0; i < tokens->n && ids[3] < 0; i++) {
            nt_gguf_next_str(tokens, &pos, &s, &len);
            if (len == 10 && !memcmp(s, "<|im_end|>", 10)) ids[3] = (int64_t)i;
        }
    }
    for (int i = 0; i < 4; i++) {
        int seen = ids[i] < 0;
        for (int j = 0; j < i && !seen; j++) seen = ids[j] == ids[i];
        if (!seen) json_object_array_add(list, json_object_new_int64(ids[i]));
    }
    return NEMOTRON_OK;
}

static nemotron_status build_config(struct gm *m, json_object *cfg, json_object *gen, json_object *tcfg,
                                    char *pattern) {
    int64_t n_layer = 0, H = 0, ctx = 0;
    TRY(meta_uint(m, "block_count", 1, 0, &n_layer));
    if (n_layer < 1 || n_layer > NT_MAX_LAYERS)
        return nt_fail(m->err, NEMOTRON_ERR_CONFIG, "%s: GGUF key '%s' is %lld, expected 1..%d",
                       m->path, akey(m, "block_count"), (long long)n_layer, NT_MAX_LAYERS);
    m->n_layer = (int)n_layer;
    TRY(meta_uint(m, "embedding_length", 1, 0, &H));
    TRY(meta_uint(m, "context_length", 0, 4096, &ctx));
    const struct nt_gguf_tensor *emb = nt_gguf_tensor(m->g, "token_embd.weight");
    if (!emb || emb->ndim != 2)
        return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: tensor 'token_embd.weight' is %s", m->path,
                       emb ? "not 2-D" : "missing");
    if (emb->ne[0] != H)
        return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                       "%s: token_embd.weight rows hold %lld values, but GGUF key '%s' is %lld",
                       m->path, (long long)emb->ne[0], akey(m, "embedding_length"), (long long)H);
    if (emb->ne[1] > INT32_MAX)
        return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: token_embd.weight: %lld tokens, too many",
                       m->path, (long long)emb->ne[1]);
    json_object_object_add(cfg, "model_type", json_object_new_string("nemotron_h"));
    put_int(cfg, "vocab_size", emb->ne[1]);
    put_int(cfg, "hidden_size", H);
    put_int(cfg, "max_position_embeddings", ctx);
    json_object_object_add(cfg, "tie_word_embeddings",
                           json_object_new_boolean(!nt_gguf_tensor(m->g, "output.weight")));
    double eps;
    TRY(meta_float(m, "attention.layer_norm_rms_epsilon", 1e-5, &eps));
    json_object_object_add(cfg, "layer_norm_epsilon", json_object_new_double(eps));
    put_int(cfg, "num_nextn_predict_layers", 0);
    TRY(layer_kinds(m, cfg, pattern));
    TRY(attention_config(m, cfg, pattern));
    TRY(mamba_config(m, cfg, pattern));
    TRY(ffn_config(m, cfg, pattern));

    int64_t bos, eos, pad;
    TRY(token_id(m, "tokenizer.ggml.bos_token_id", &bos));
    TRY(token_id(m, "tokenizer.ggml.eos_token_id", &eos));
    TRY(token_id(m, "tokenizer.ggml.padding_token_id", &pad));
    json_object *cfg_ids[] = {cfg, gen};
    for (int i = 0; i < 2; i++) {
        if (bos >= 0) put_int(cfg_ids[i], "bos_token_id", bos);
        if (pad >= 0) put_int(cfg_ids[i], "pad_token_id", pad);
    }
    if (eos >= 0) put_int(cfg, "eos_token_id", eos);
    json_object *stops = json_object_new_array();
    json_object_object_add(gen, "eos_token_id", stops);
    TRY(stop_ids(m, stops, eos));

    int add_bos = 0, add_eos = 0;
    if (nt_gguf_find(m->g, "tokenizer.ggml.add_bos_token"))
        TRY(nt_gguf_get_bool(m->g, "tokenizer.ggml.add_bos_token", &add_bos, m->err));
    if (nt_gguf_find(m->g, "tokenizer.ggml.add_eos_token"))
        TRY(nt_gguf_get_bool(m->g, "tokenizer.ggml.add_eos_token", &add_eos, m->err));
    json_object_object_add(tcfg, "add_bos_token", json_object_new_boolean(add_bos));
    json_object_object_add(tcfg, "add_eos_token", json_object_new_boolean(add_eos));
    if (nt_gguf_find(m->g, "tokenizer.chat_template")) {
        const char *s;
        uint64_t len;
        TRY(nt_gguf_get_str(m->g, "tokenizer.chat_template", &s, &len, m->err));
        json_object_object_add(tcfg, "chat_template", json_object_new_string_len(s, (int)len));
    }
    return NEMOTRON_OK;
}

/* ---- tensors ---- */

struct views {
    struct nt_tensor *v;
    int n, cap;
};

static nemotron_status add_view(struct gm *m, struct views *vs, const char *name, enum nt_dtype dt,
                                int ndim, const int64_t *shape, const void *data, uint64_t nbytes) {
    if (vs->n == vs->cap) {
        int cap = vs->cap ? 2 * vs->cap : 256;
        struct nt_tensor *p = nt_calloc((size_t)cap, sizeof *p);
        if (!p) return nt_fail(m->err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the tensor table", m->path);
        if (vs->n) memcpy(p, vs->v, (size_t)vs->n * sizeof *p);
        nt_free(vs->v);
        vs->v = p;
        vs->cap = cap;
    }
    char *copy = nt_strdup(name);
    if (!copy) return nt_fail(m->err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the tensor table", m->path);
    struct nt_tensor *t = &vs->v[vs->n++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    return NEMOTRON_OK;
}

static void free_views(struct views *vs) {
    for (int i = 0; i < vs->n; i++) nt_free((char *)vs->v[i].name);
    nt_free(vs->v);
}

static nemotron_status map_tensor(struct gm *m, struct views *vs, const struct nt_gguf_tensor *t,
                                  int64_t n_experts) {
    const char *hf = NULL;
    enum reshape rs = AS_IS;
    char prefix[64] = "";
    for (size_t i = 0; i < sizeof top_tensors / sizeof *top_tensors && !hf; i++)
        if (!strcmp(t->name, top_tensors[i].gguf)) hf = top_tensors[i].hf;
    int layer, used = 0;
    if (!hf && sscanf(t->name, "blk.%d.%n", &layer, &used) == 1 && used > 0) {
        if (layer < 0 || layer >= m->n_layer)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: tensor '%s': block %d, but GGUF key "
                           "'%s' is %d", m->path, t->name, layer, akey(m, "block_count"), m->n_layer);
        for (size_t i = 0; i < sizeof block_tensors / sizeof *block_tensors && !hf; i++)
            if (!strcmp(t->name + used, block_tensors[i].gguf)) {
                hf = block_tensors[i].hf;
                rs = block_tensors[i].reshape;
            }
        snprintf(prefix, sizeof prefix, "backbone.layers.%d.", layer);
    }
    if (!hf)
        return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                       "%s: tensor '%s' is not one of a %s model (llama.cpp's names: token_embd, "
                       "output_norm, output, blk.N.ssm_*, attn_*, ffn_*)", m->path, t->name, m->arch);
    enum nt_dtype dt;
    if (!nt_dtype_of_ggml_type(t->type, &dt)) {
        const char *tn = nt_ggml_type_name(t->type);
        return nt_fail(m->err, NEMOTRON_ERR_UNSUPPORTED, "%s: %s: GGUF type %s is not supported",
                       m->path, t->name, tn ? tn : "?");
    }
    char name[256];
    int64_t shape[4];
    int ndim = t->ndim;
    for (int i = 0; i < ndim; i++) shape[i] = t->ne[ndim - 1 - i];
    switch (rs) {
    case AS_IS: break;
    case CONV:
        if (t->ndim != 2)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: tensor '%s' is %d-D, expected 2-D "
                           "{kernel, channels}", m->path, t->name, t->ndim);
        ndim = 3;
        shape[0] = t->ne[1];
        shape[1] = 1;
        shape[2] = t->ne[0];
        break;
    case COLUMN:
        if (t->ndim > 2 || (t->ndim == 2 && t->ne[0] != 1))
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR, "%s: tensor '%s' has ne0 = %lld and %d "
                           "dimensions, expected {1, heads}", m->path, t->name, (long long)t->ne[0], t->ndim);
        /* one value per head */
        /* fall through */
    case FLAT:
        ndim = 1;
        shape[0] = (int64_t)t->n_elements;
        break;
    case EXPERTS: {
        if (t->ndim != 3 || t->ne[2] != n_experts)
            return nt_fail(m->err, NEMOTRON_ERR_TENSOR,
                           "%s: tensor '%s' is %d-D with %lld in its last dimension, expected 3-D "
                           "{cols, rows, %lld experts} (%s)", m->path, t->name, t->ndim,
                           (long long)t->ne[t->ndim - 1], (long long)n_experts, akey(m, "expert_count"));
        uint64_t slice = t->nbytes / (uint64_t)n_experts;
        int64_t dims[2] = {t->ne[1], t->ne[0]};
        for (int64_t e = 0; e < n_experts; e++) {
            char hf_e[128];
            snprintf(hf_e, sizeof hf_e, hf, (int)e);
            snprintf(name, sizeof name, "%s%s", prefix, hf_e);
            TRY(add_view(m, vs, name, dt, 2, dims, (const uint8_t *)t->data + e * slice, slice));
        }
        return NEMOTRON_OK;
    }
    }
    snprintf(name, sizeof name, "%s%s", prefix, hf);
    return add_view(m, vs, name, dt, ndim, shape, t->data, t->nbytes);
}

static nemotron_status build_table(struct gm *m, struct nt_tensor_table *table) {
    int64_t E = 0;
    TRY(meta_uint(m, "expert_count", 0, 0, &E));
    struct views vs = {0};
    nemotron_status st = NEMOTRON_OK;
    for (int64_t i = 0; i < m->g->n_tensors && !st; i++) st = map_tensor(m, &vs, &m->g->tensors[i], E);
    if (!st) st = nt_table_add_views(table, m->path, vs.v, vs.n, m->err);
    free_views(&vs);
    return st;
}

/* The GGUF name of a checkpoint name this loader gives (the tables above, read backwards), for
 * messages: "blk.3.ffn_up_exps.weight (expert 5)". */
static void gguf_name_of(const char *hf, char *out, size_t len) {
    for (size_t i = 0; i < sizeof top_tensors / sizeof *top_tensors; i++)
        if (!strcmp(hf, top_tensors[i].hf)) {
            snprintf(out, len, "%s", top_tensors[i].gguf);
            return;
        }
    int layer, used = 0, expert, eused = 0;
    snprintf(out, len, "%s", hf);
    if (sscanf(hf, "backbone.layers.%d.%n", &layer, &used) != 1 || !used) return;
    const char *rest = hf + used;
    if (sscanf(rest, "mixer.experts.%d.%n", &expert, &eused) == 1 && eused) {
        snprintf(out, len, "blk.%d.ffn_%s_exps.weight (expert %d)", layer,
                 strncmp(rest + eused, "up_", 3) ? "down" : "up", expert);
        return;
    }
    if (!strcmp(rest, "mixer.A_log")) rest = "mixer.A";
    for (size_t i = 0; i < sizeof block_tensors / sizeof *block_tensors; i++)
        if (!strcmp(rest, block_tensors[i].hf)) {
            snprintf(out, len, "blk.%d.%s", layer, block_tensors[i].gguf);
            return;
        }
}

/* Every tensor the config implies, present and of the checkpoint's shape, checked here so that
 * the message names the GGUF tensor (the binder would name the checkpoint's). */
struct expect {
    struct gm *m;
    const struct nt_tensor_table *table;
    const char *pattern;
    nemotron_status st;
};

static void format_dims(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

static void expect_tensor(void *ctx, const char *name, int ndim, const int64_t *dims) {
    struct expect *x = ctx;
    if (x->st) return;
    char look[256], gname[300], want[128], got[128];
    snprintf(look, sizeof look, "%s", name);
    size_t n = strlen(look);
    if (n > 6 && !strcmp(look + n - 6, ".A_log")) look[n - 4] = 0; /* the engine's A (weights.c) */
    gguf_name_of(look, gname, sizeof gname);
    const struct nt_tensor *t = nt_table_find(x->table, look);
    if (!t && !strcmp(look, "lm_head.weight")) return; /* tied: the binder decides */
    format_dims(want, sizeof want, ndim, dims);
    if (!t) {
        x->st = nt_fail(x->m->err, NEMOTRON_ERR_TENSOR,
                        "%s: tensor '%s' is missing (the blocks are \"%s\": M Mamba, * attention, "
                        "E MoE, - MLP; the checkpoint's %s %s)", x->m->path, gname, x->pattern,
                        look, want);
        return;
    }
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == dims[i];
    if (same) return;
    format_dims(got, sizeof got, t->ndim, t->shape);
    x->st = nt_fail(x->m->err, NEMOTRON_ERR_TENSOR,
                    "%s: tensor '%s' has the shape %s (GGUF's ne reversed), expected %s for the "
                    "checkpoint's %s", x->m->path, gname, got, want, look);
}

static nemotron_status check_shapes(struct gm *m, const struct nt_model_source *s, const char *pattern) {
    struct nt_config cfg;
    char name[4200];
    snprintf(name, sizeof name, "%s: GGUF metadata (as config.json)", m->path);
    TRY(nt_config_parse((const char *)s->file_bytes[0], s->file_lens[0], name, &cfg, m->err));
    struct expect x = {.m = m, .table = &s->table, .pattern = pattern};
    TRY(nt_weights_list(&cfg, expect_tensor, &x, m->err));
    return x.st;
}

/* The text of a built JSON object into s's carried file `index`. */
static nemotron_status carry(struct nt_model_source *s, int index, json_object *o, struct nt_err *err) {
    size_t n;
    const char *text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PRETTY, &n);
    char *copy = text ? nt_alloc(n + 1) : NULL;
    if (!copy) return nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for %s", nt_model_file_names[index]);
    memcpy(copy, text, n + 1);
    s->owned[index] = copy;
    s->file_bytes[index] = (const uint8_t *)copy;
    s->file_lens[index] = n;
    return NEMOTRON_OK;
}

nemotron_status nt_gguf_source_open(struct nt_model_source *s, const char *path, struct nt_err *err) {
    struct nt_gguf *g;
    nemotron_status st = nt_gguf_open(path, &g, err);
    return st ? st : nt_gguf_source_from(s, g, err);
}

nemotron_status nt_gguf_source_from(struct nt_model_source *s, struct nt_gguf *g, struct nt_err *err) {
    s->gguf = g;
    const char *path = g->path;
    nemotron_status st;
    struct gm m = {.g = g, .path = path, .arch = g->arch, .err = err};
    if (!m.arch || (strcmp(m.arch, "nemotron_h") && strcmp(m.arch, "nemotron_h_moe")))
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "%s: GGUF architecture '%s': this engine runs nemotron_h and nemotron_h_moe",
                       path, m.arch ? m.arch : "(general.architecture missing)");
    json_object *cfg = json_object_new_object(), *gen = json_object_new_object(),
                *tcfg = json_object_new_object();
    char pattern[NT_MAX_LAYERS + 1];
    st = cfg && gen && tcfg ? build_config(&m, cfg, gen, tcfg, pattern)
                            : nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", path);
    if (!st) st = carry(s, 0, cfg, err);
    if (!st) st = carry(s, 1, gen, err);
    if (!st) st = carry(s, 3, tcfg, err);
    json_object_put(cfg);
    json_object_put(gen);
    json_object_put(tcfg);
    if (!st && nt_gguf_find(s->gguf, "tokenizer.ggml.model")) {
        char *json;
        size_t len;
        st = nt_tokenizer_json_from_gguf(s->gguf, &json, &len, err);
        if (!st) {
            s->owned[2] = json;
            s->file_bytes[2] = (const uint8_t *)json;
            s->file_lens[2] = len;
        }
    }
    if (!st) st = build_table(&m, &s->table);
    if (!st) st = check_shapes(&m, s, pattern);
    return st;
}
