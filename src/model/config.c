/* config.c - reads a Nemotron-H config.json into a struct nt_config and validates it.
 *
 * Owns nothing past a call: the JSON tree (json-c) and the file buffer are freed before
 * returning, and *cfg is written only when everything succeeded, so a failed call leaves it as
 * it was. Every key of MODEL.md 1.2 is read through one table (name, legacy alias, type,
 * HF 5.17 default, accepted range, the layer kind that needs it positive); the few keys with a
 * shape of their own (the layer patterns, eos_token_id, time_step_limit) have their own
 * readers. The invariant to keep: after nt_config_parse returns NEMOTRON_OK, every field is in
 * range and the dimensions that the layer kinds in use combine are consistent, so model code
 * may compute shapes from them (in 64 bits) without checking again.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <json.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* A config.json is a few kB (Nano's is 2 kB). 16 MiB is far above any real one, keeps a
 * hostile or wrong file (a safetensors shard passed by mistake) from being read whole, and is
 * well inside json-c's int length argument. */
#define CONFIG_MAX_BYTES (16u << 20)

/* The deepest nesting a config has is 3 ({"time_step_limit": [0, {"__float__": ...}]}); json-c's
 * default of 32 leaves room and bounds the parser's recursion on hostile input. */
#define JSON_MAX_DEPTH 32

/* Caps on dimensions. They are far above every known model (MODEL.md 1.4: hidden 8192, vocab
 * 262144 at most, 512 experts, intermediate 32768) and are there so that a hostile config
 * cannot make the products later code forms (vocab x hidden, experts x mi x hidden, ...)
 * overflow 64 bits, nor a single per-position width overflow an int. */
#define CAP_VOCAB (1 << 24)     /* vocab_size */
#define CAP_HIDDEN 65536        /* hidden_size, moe_latent_size */
#define CAP_HEADS 4096          /* attention heads, Mamba heads, Mamba groups */
#define CAP_HEAD_DIM 4096       /* head_dim, mamba_head_dim, ssm_state_size */
#define CAP_FFN (1 << 20)       /* dense, expert and shared-expert widths */
#define CAP_EXPERTS 4096        /* n_routed_experts and the counts that select among them */
#define CAP_CHUNK 65536         /* chunk_size: does not change the math; bounded anyway */
/* Any one position's vector (q, k/v, in_proj output) is at most 2^24 wide. A pass's position
 * count times the widest vector must fit an int; nt_acts_alloc refuses a pass size for which it
 * would not (2^24 x 64 does; real models are far narrower, 2^17 x 1024 fits). */
#define CAP_WIDTH (1 << 24)
/* The session's conv ring keeps the last K-1 inputs of every conv channel, and the conv code
 * may hold a window of K taps in a small fixed array; the ring is meant to stay small. Every
 * Nemotron-H model has K = 4; 16 leaves room without letting a config make it large. */
#define CAP_CONV_KERNEL 16

/* ------------------------------------------------------------------------------------------
 * Positions and values in messages
 */

/* 1-based line and column (in bytes) of byte offset `off` of text. */
static void line_col(const char *text, size_t len, size_t off, int *line, int *col) {
    int l = 1;
    size_t start = 0;
    if (off > len) off = len;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            l++;
            start = i + 1;
        }
    }
    *line = l;
    *col = (int)(off - start) + 1;
}

/* The JSON text of a value for a message, cut to 60 bytes. Valid as long as the tree. */
#define SHOW_MAX 60
#define SHOW(v) SHOW_MAX, show(v), (strlen(show(v)) > SHOW_MAX ? "..." : "")
static const char *show(struct json_object *v) {
    if (!v) return "null";
    const char *s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
    return s ? s : "?";
}

static const char *type_name(struct json_object *v) {
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a float";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "a list";
    case json_type_string: return "a string";
    }
    return "an unknown value";
}

/* ------------------------------------------------------------------------------------------
 * Scalar values
 */

/* A string value equal to a C string (JSON strings may hold NUL bytes: compare lengths). */
static bool str_is(struct json_object *v, const char *want) {
    size_t n = strlen(want);
    return json_object_is_type(v, json_type_string) &&
           (size_t)json_object_get_string_len(v) == n &&
           memcmp(json_object_get_string(v), want, n) == 0;
}

/* transformers 5.17 writes floats JSON cannot hold as {"__float__": "Infinity"} (MODEL.md 1.2,
 * "JSON quirk"). The names are Python's and JSON5's spellings of the three values. */
static bool float_object(struct json_object *v, double *out) {
    static const struct {
        const char *name;
        double value;
    } names[] = {{"Infinity", INFINITY}, {"-Infinity", -INFINITY}, {"inf", INFINITY},
                 {"-inf", -INFINITY},    {"NaN", NAN},             {"nan", NAN}};
    struct json_object *s;
    if (!json_object_is_type(v, json_type_object) || json_object_object_length(v) != 1 ||
        !json_object_object_get_ex(v, "__float__", &s))
        return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (str_is(s, names[i].name)) {
            *out = names[i].value;
            return true;
        }
    }
    return false;
}

/* Any JSON number, bare NaN/Infinity (json-c's non-strict mode reads them as doubles), or the
 * __float__ form. */
static bool number(struct json_object *v, double *out) {
    if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) {
        *out = json_object_get_double(v);
        return true;
    }
    return float_object(v, out);
}

/* An integer in [lo, hi]: a JSON integer, or a float with an integral value (64.0). */
static nemotron_status int_value(struct json_object *v, const char *key, double lo, double hi,
                                 int *out, struct nt_err *err) {
    double d;
    if (json_object_is_type(v, json_type_int)) {
        /* json-c saturates out-of-range integers to INT64_MIN/MAX (and keeps values above
         * INT64_MAX as uint64, which get_int64 saturates): out of [lo, hi] either way. */
        int64_t i = json_object_get_int64(v);
        if ((double)i < lo || (double)i > hi)
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s = %.*s%s is out of range [%.0f, %.0f]",
                           key, SHOW(v), lo, hi);
        *out = (int)i;
        return NEMOTRON_OK;
    }
    if (!json_object_is_type(v, json_type_double))
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected an integer, found %s %.*s%s", key,
                       type_name(v), SHOW(v));
    d = json_object_get_double(v);
    if (!isfinite(d) || d != floor(d))
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected an integer, found %.*s%s", key,
                       SHOW(v));
    if (d < lo || d > hi)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s = %.*s%s is out of range [%.0f, %.0f]", key,
                       SHOW(v), lo, hi);
    *out = (int)d;
    return NEMOTRON_OK;
}

/* ------------------------------------------------------------------------------------------
 * The key table: every scalar key of MODEL.md 1.2 with its HF 5.17 default
 */

enum key_type { KEY_INT, KEY_BOOL, KEY_FLOAT, KEY_STRING };

/* The key is read and checked but not stored: the forward does not use it (MODEL.md 1.2). */
#define UNUSED_KEY SIZE_MAX
#define OFF(field) offsetof(struct nt_config, field)

struct key {
    const char *name;
    const char *alias;    /* legacy name HF renames to `name`, or NULL; `name` wins */
    enum key_type type;
    size_t off;           /* offset of the int (KEY_INT, KEY_BOOL) or float field */
    double def;           /* HF 5.17 default when absent */
    double lo, hi;        /* accepted range of a given value (ints and floats) */
    bool nullable;        /* HF's default is None: JSON null stores `if_null` */
    double if_null;
    char need;            /* > 0 required: 'A' always, a layer kind char if that kind is used */
    const char *want;     /* KEY_STRING: the only value this engine runs, or NULL for any */
};

/* num_key_value_heads = null means "as many as num_attention_heads"; resolved after reading. */
#define KV_HEADS_FROM_Q (-1)

static const struct key keys[] = {
    /* Columns: name, alias, type, field, default, lo, hi, nullable, if_null, need, want.
     * Sizes every model needs have lo = 1; the others may be 0 unless a layer kind in use
     * needs them (`need`). */
    {"vocab_size", NULL, KEY_INT, OFF(vocab_size), 131072, 1, CAP_VOCAB, false, 0, 0, NULL},
    {"hidden_size", NULL, KEY_INT, OFF(hidden_size), 4096, 1, CAP_HIDDEN, false, 0, 0, NULL},
    {"tie_word_embeddings", NULL, KEY_BOOL, OFF(tie_word_embeddings), 0, 0, 1, false, 0, 0, NULL},
    {"use_cache", NULL, KEY_BOOL, UNUSED_KEY, 1, 0, 1, false, 0, 0, NULL},
    {"num_logits_to_keep", NULL, KEY_INT, UNUSED_KEY, 1, 0, INT_MAX, false, 0, 0, NULL},
    /* Token ids are generation-only; null (no such token) is stored as -1. */
    {"pad_token_id", NULL, KEY_INT, OFF(pad_token_id), 0, -1, INT_MAX, true, -1, 0, NULL},
    {"bos_token_id", NULL, KEY_INT, OFF(bos_token_id), 1, -1, INT_MAX, true, -1, 0, NULL},
    {"max_position_embeddings", NULL, KEY_INT, OFF(max_position_embeddings), 4096, 0, INT_MAX,
     false, 0, 0, NULL},

    {"num_attention_heads", NULL, KEY_INT, OFF(num_attention_heads), 32, 0, CAP_HEADS, false, 0,
     '*', NULL},
    {"num_key_value_heads", NULL, KEY_INT, OFF(num_key_value_heads), 8, 0, CAP_HEADS, true,
     KV_HEADS_FROM_Q, '*', NULL},
    {"head_dim", NULL, KEY_INT, OFF(head_dim), 128, 0, CAP_HEAD_DIM, false, 0, '*', NULL},
    {"attention_bias", NULL, KEY_BOOL, UNUSED_KEY, 0, 0, 1, false, 0, 0, NULL},
    {"attention_dropout", NULL, KEY_FLOAT, UNUSED_KEY, 0.0, 0, 1, false, 0, 0, NULL},
    {"sliding_window", NULL, KEY_INT, UNUSED_KEY, 0, 0, INT_MAX, true, 0, 0, NULL},

    {"intermediate_size", NULL, KEY_INT, OFF(intermediate_size), 21504, 0, CAP_FFN, false, 0,
     '-', NULL},
    {"mlp_hidden_act", NULL, KEY_STRING, UNUSED_KEY, 0, 0, 0, false, 0, 0, "relu2"},
    {"mlp_bias", NULL, KEY_BOOL, OFF(mlp_bias), 0, 0, 1, false, 0, 0, NULL},

    {"use_mamba_kernels", NULL, KEY_BOOL, UNUSED_KEY, 1, 0, 1, false, 0, 0, NULL},
    {"ssm_state_size", NULL, KEY_INT, OFF(ssm_state_size), 128, 0, CAP_HEAD_DIM, false, 0, 'M',
     NULL},
    {"mamba_num_heads", NULL, KEY_INT, OFF(mamba_num_heads), 128, 0, CAP_HEADS, false, 0, 'M',
     NULL},
    {"mamba_head_dim", NULL, KEY_INT, OFF(mamba_head_dim), 64, 0, CAP_HEAD_DIM, false, 0, 'M',
     NULL},
    {"mamba_hidden_act", NULL, KEY_STRING, UNUSED_KEY, 0, 0, 0, false, 0, 0, "silu"},
    {"n_groups", "mamba_n_groups", KEY_INT, OFF(n_groups), 8, 0, CAP_HEADS, false, 0, 'M', NULL},
    {"conv_kernel", "mamba_d_conv", KEY_INT, OFF(conv_kernel), 4, 0, CAP_CONV_KERNEL, false, 0,
     'M', NULL},
    {"expand", "mamba_expand", KEY_INT, UNUSED_KEY, 2, 0, INT_MAX, false, 0, 0, NULL},
    /* The time-step constants are rates; finite and not negative. */
    {"time_step_min", "mamba_dt_min", KEY_FLOAT, OFF(time_step_min), 0.001, 0, FLT_MAX, false, 0,
     0, NULL},
    {"time_step_max", "mamba_dt_max", KEY_FLOAT, OFF(time_step_max), 0.1, 0, FLT_MAX, false, 0, 0,
     NULL},
    {"time_step_floor", "mamba_dt_init_floor", KEY_FLOAT, OFF(time_step_floor), 1e-4, 0, FLT_MAX,
     false, 0, 0, NULL},
    {"use_conv_bias", "mamba_conv_bias", KEY_BOOL, OFF(use_conv_bias), 1, 0, 1, false, 0, 0, NULL},
    {"chunk_size", "mamba_chunk_size", KEY_INT, OFF(chunk_size), 128, 0, CAP_CHUNK, false, 0, 'M',
     NULL},
    {"mamba_proj_bias", NULL, KEY_BOOL, UNUSED_KEY, 0, 0, 1, false, 0, 0, NULL},
    {"mamba_ssm_cache_dtype", NULL, KEY_STRING, UNUSED_KEY, 0, 0, 0, false, 0, 0, NULL},
    {"use_bias", NULL, KEY_BOOL, OFF(use_bias), 0, 0, 1, false, 0, 0, NULL},

    {"n_routed_experts", "num_local_experts", KEY_INT, OFF(n_routed_experts), 8, 0, CAP_EXPERTS,
     false, 0, 'E', NULL},
    {"n_shared_experts", NULL, KEY_INT, OFF(n_shared_experts), 1, 0, CAP_EXPERTS, false, 0, 0,
     NULL},
    {"moe_intermediate_size", NULL, KEY_INT, OFF(moe_intermediate_size), 7688, 0, CAP_FFN, false,
     0, 'E', NULL},
    {"moe_shared_expert_intermediate_size", NULL, KEY_INT,
     OFF(moe_shared_expert_intermediate_size), 7688, 0, CAP_FFN, false, 0, 'E', NULL},
    /* null (and absent) = no latent projections; a given size must be >= 1. */
    {"moe_latent_size", NULL, KEY_INT, OFF(moe_latent_size), 0, 1, CAP_HIDDEN, true, 0, 0, NULL},
    {"moe_shared_expert_overlap", NULL, KEY_BOOL, UNUSED_KEY, 1, 0, 1, false, 0, 0, NULL},
    {"num_experts_per_tok", NULL, KEY_INT, OFF(num_experts_per_tok), 2, 0, CAP_EXPERTS, false, 0,
     'E', NULL},
    {"routed_scaling_factor", NULL, KEY_FLOAT, OFF(routed_scaling_factor), 1.0, 0, FLT_MAX, false,
     0, 0, NULL},
    {"n_group", NULL, KEY_INT, OFF(n_group), 1, 0, CAP_EXPERTS, false, 0, 'E', NULL},
    {"topk_group", NULL, KEY_INT, OFF(topk_group), 1, 0, CAP_EXPERTS, false, 0, 'E', NULL},
    {"norm_topk_prob", NULL, KEY_BOOL, OFF(norm_topk_prob), 1, 0, 1, false, 0, 0, NULL},

    /* The number of MTP steps; its pattern is bounded by the mtp_pattern buffer. */
    {"num_nextn_predict_layers", NULL, KEY_INT, OFF(num_nextn_predict_layers), 0, 0,
     NT_MAX_MTP_LAYERS, false, 0, 0, NULL},

    {"initializer_range", NULL, KEY_FLOAT, UNUSED_KEY, 0.02, 0, FLT_MAX, false, 0, 0, NULL},
    /* eps must be > 0 (checked after the conversion to float, which may round a tiny one to 0). */
    {"layer_norm_epsilon", NULL, KEY_FLOAT, OFF(layer_norm_epsilon), 1e-5, 0, FLT_MAX, false, 0,
     'A', NULL},
    {"residual_in_fp32", NULL, KEY_BOOL, UNUSED_KEY, 0, 0, 1, false, 0, 0, NULL},
    {"hidden_dropout", NULL, KEY_FLOAT, UNUSED_KEY, 0.0, 0, 1, false, 0, 0, NULL},
    {"rescale_prenorm_residual", NULL, KEY_BOOL, UNUSED_KEY, 1, 0, 1, false, 0, 0, NULL},
};

#define N_KEYS (sizeof keys / sizeof keys[0])

/* json-c represents a JSON null member as a NULL value; member() returns this marker for it,
 * so that NULL can mean "absent". It is never dereferenced. */
static int null_marker_storage;
#define JSON_NULL ((struct json_object *)&null_marker_storage)

/* The value of `name`, or of `alias` when `name` is absent (the canonical key wins); NULL when
 * neither is there, JSON_NULL for a null. *used gets the key found, for messages. */
static struct json_object *member(struct json_object *root, const char *name, const char *alias,
                                  const char **used) {
    struct json_object *v = NULL;
    *used = name;
    if (json_object_object_get_ex(root, name, &v)) return v ? v : JSON_NULL;
    if (alias && json_object_object_get_ex(root, alias, &v)) {
        *used = alias;
        return v ? v : JSON_NULL;
    }
    return NULL;
}

static void store_int(struct nt_config *c, size_t off, int value) {
    if (off != UNUSED_KEY) memcpy((char *)c + off, &value, sizeof value);
}

static int load_int(const struct nt_config *c, size_t off) {
    int value;
    memcpy(&value, (const char *)c + off, sizeof value);
    return value;
}

static void store_float(struct nt_config *c, size_t off, float value) {
    if (off != UNUSED_KEY) memcpy((char *)c + off, &value, sizeof value);
}

static float load_float(const struct nt_config *c, size_t off) {
    float value;
    memcpy(&value, (const char *)c + off, sizeof value);
    return value;
}

/* Reads one table key into c: its default when absent, else the checked value. */
static nemotron_status read_key(struct json_object *root, const struct key *k, struct nt_config *c,
                                struct nt_err *err) {
    const char *name;
    struct json_object *v = member(root, k->name, k->alias, &name);
    if (!v) {
        if (k->type == KEY_FLOAT) store_float(c, k->off, (float)k->def);
        else if (k->type != KEY_STRING) store_int(c, k->off, (int)k->def);
        return NEMOTRON_OK;
    }
    if (v == JSON_NULL) {
        if (!k->nullable)
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected %s, found null", name,
                           k->type == KEY_BOOL     ? "a boolean"
                           : k->type == KEY_STRING ? "a string"
                           : k->type == KEY_INT    ? "an integer"
                                                   : "a number");
        store_int(c, k->off, (int)k->if_null);
        return NEMOTRON_OK;
    }
    switch (k->type) {
    case KEY_INT: {
        int i;
        nemotron_status st = int_value(v, name, k->lo, k->hi, &i, err);
        if (st) return st;
        store_int(c, k->off, i);
        return NEMOTRON_OK;
    }
    case KEY_BOOL:
        if (!json_object_is_type(v, json_type_boolean))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected true or false, found %s %.*s%s",
                           name, type_name(v), SHOW(v));
        store_int(c, k->off, json_object_get_boolean(v) ? 1 : 0);
        return NEMOTRON_OK;
    case KEY_FLOAT: {
        double d;
        if (!number(v, &d))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected a number, found %s %.*s%s", name,
                           type_name(v), SHOW(v));
        /* The range test also rejects NaN; hi <= FLT_MAX keeps the float conversion defined. */
        if (!(d >= k->lo && d <= k->hi))
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "%s = %.*s%s is out of range (a finite number in [%g, %g])", name,
                           SHOW(v), k->lo, k->hi);
        store_float(c, k->off, (float)d);
        return NEMOTRON_OK;
    }
    case KEY_STRING:
        if (!json_object_is_type(v, json_type_string))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected a string, found %s %.*s%s", name,
                           type_name(v), SHOW(v));
        if (k->want && !str_is(v, k->want))
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "%s = %.*s%s is not supported (Nemotron-H uses \"%s\", the only one "
                           "this engine runs)",
                           name, SHOW(v), k->want);
        return NEMOTRON_OK;
    }
    return nt_fail(err, NEMOTRON_ERR_INTERNAL, "%s: unknown key type", name);
}

/* ------------------------------------------------------------------------------------------
 * Layer patterns
 */

static const struct {
    const char *name;
    char kind;
} layer_names[] = {
    {"linear_attention", NT_LAYER_MAMBA}, {"full_attention", NT_LAYER_ATTENTION},
    {"mlp", NT_LAYER_MLP},                {"moe", NT_LAYER_MOE},
    /* legacy names, mapped as HF's remap_legacy_layer_types does */
    {"mamba", NT_LAYER_MAMBA},            {"conv", NT_LAYER_MAMBA},
    {"attention", NT_LAYER_ATTENTION},
};

static bool kind_allowed(char c, const char *allowed) {
    return c != '\0' && strchr(allowed, c) != NULL;
}

/* What a pattern may hold: the main one any kind, the MTP one attention and MoE only. */
struct pattern_rule {
    const char *allowed; /* pattern chars */
    int max;             /* layers; the size of the buffer less its NUL */
    const char *names;   /* the list names, for messages */
};
static const struct pattern_rule main_rule = {
    "M*-E", NT_MAX_LAYERS,
    "linear_attention, full_attention, mlp or moe; legacy mamba, conv, attention"};
static const struct pattern_rule mtp_rule = {"*E", NT_MAX_MTP_LAYERS,
                                             "full_attention or moe; legacy attention"};

/* Reads a layers_block_type-style list or a hybrid_override_pattern-style string into out
 * (NUL-terminated, at most rule->max kinds, each one of rule->allowed). */
static nemotron_status read_pattern(struct json_object *v, const char *key, bool is_list,
                                    const struct pattern_rule *rule, char *out,
                                    struct nt_err *err) {
    size_t n;
    if (is_list) {
        if (!json_object_is_type(v, json_type_array))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected a list of layer kinds, found %s "
                           "%.*s%s", key, type_name(v), SHOW(v));
        n = json_object_array_length(v);
    } else {
        if (!json_object_is_type(v, json_type_string))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected a string of layer kinds, found "
                           "%s %.*s%s", key, type_name(v), SHOW(v));
        n = (size_t)json_object_get_string_len(v);
    }
    if (n == 0) return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s is empty: no layers", key);
    if (n > (size_t)rule->max)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s has %zu layers, more than the %d accepted",
                       key, n, rule->max);
    const char *s = is_list ? NULL : json_object_get_string(v);
    for (size_t i = 0; i < n; i++) {
        char kind = 0;
        if (is_list) {
            struct json_object *e = json_object_array_get_idx(v, i);
            for (size_t j = 0; j < sizeof layer_names / sizeof layer_names[0]; j++)
                if (str_is(e, layer_names[j].name)) kind = layer_names[j].kind;
            if (!kind_allowed(kind, rule->allowed))
                return nt_fail(err, NEMOTRON_ERR_CONFIG,
                               "%s[%zu]: unknown layer kind %.*s%s (expected %s)", key, i, SHOW(e),
                               rule->names);
        } else {
            kind = s[i];
            if (!kind_allowed(kind, rule->allowed)) {
                unsigned char u = (unsigned char)kind;
                char shown[8];
                if (u >= 0x20 && u < 0x7f) snprintf(shown, sizeof shown, "'%c'", kind);
                else snprintf(shown, sizeof shown, "\\x%02x", u);
                return nt_fail(err, NEMOTRON_ERR_CONFIG,
                               "%s[%zu]: unknown layer kind %s (expected one of \"%s\")", key, i,
                               shown, rule->allowed);
            }
        }
        out[i] = kind;
    }
    out[n] = '\0';
    return NEMOTRON_OK;
}

/* The main pattern: layers_block_type wins over hybrid_override_pattern (HF uses the list and
 * ignores the string); neither gives HF's default. num_hidden_layers is not read: HF derives
 * it from the pattern and ignores a given value. A null list or string counts as absent (both
 * default to None in HF). */
static nemotron_status read_layers(struct json_object *root, struct nt_config *c,
                                   struct nt_err *err) {
    struct json_object *v;
    const char *key;
    nemotron_status st;
    if ((v = member(root, "layers_block_type", NULL, &key)) && v != JSON_NULL)
        st = read_pattern(v, key, true, &main_rule, c->pattern, err);
    else if ((v = member(root, "hybrid_override_pattern", NULL, &key)) && v != JSON_NULL)
        st = read_pattern(v, key, false, &main_rule, c->pattern, err);
    else {
        /* HF 5.17: ["linear_attention", "moe", "full_attention", "mlp"] */
        strcpy(c->pattern, "ME*-");
        st = NEMOTRON_OK;
    }
    if (st) return st;
    c->n_layer = (int)strlen(c->pattern);

    /* MTP: only read when there are MTP steps; an MTP layer is attention or MoE. The list wins
     * as for the main pattern. */
    c->mtp_pattern[0] = '\0';
    c->n_mtp_layer = 0;
    if (c->num_nextn_predict_layers == 0) return NEMOTRON_OK;
    if ((v = member(root, "mtp_layers_block_type", NULL, &key)) && v != JSON_NULL)
        st = read_pattern(v, key, true, &mtp_rule, c->mtp_pattern, err);
    else if ((v = member(root, "mtp_hybrid_override_pattern", NULL, &key)) && v != JSON_NULL)
        st = read_pattern(v, key, false, &mtp_rule, c->mtp_pattern, err);
    else {
        /* HF 5.17: ["full_attention", "moe"] */
        strcpy(c->mtp_pattern, "*E");
        st = NEMOTRON_OK;
    }
    if (st) return st;
    c->n_mtp_layer = (int)strlen(c->mtp_pattern);
    return NEMOTRON_OK;
}

/* ------------------------------------------------------------------------------------------
 * eos_token_id and time_step_limit
 */

/* An int or a list of ints; null = no end token. Default 2. */
static nemotron_status read_eos(struct json_object *root, struct nt_config *c, struct nt_err *err) {
    const char *key;
    struct json_object *v = member(root, "eos_token_id", NULL, &key);
    c->n_eos = 0;
    if (!v) {
        c->eos_token_id[c->n_eos++] = 2;
        return NEMOTRON_OK;
    }
    if (v == JSON_NULL) return NEMOTRON_OK;
    if (!json_object_is_type(v, json_type_array))
        return int_value(v, key, 0, INT_MAX, &c->eos_token_id[c->n_eos++], err);
    size_t n = json_object_array_length(v);
    if (n > NT_MAX_EOS)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s lists %zu ids, more than the %d accepted",
                       key, n, NT_MAX_EOS);
    for (size_t i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s[%zu]", key, i);
        nemotron_status st =
            int_value(json_object_array_get_idx(v, i), name, 0, INT_MAX, &c->eos_token_id[i], err);
        if (st) return st;
    }
    c->n_eos = (int)n;
    return NEMOTRON_OK;
}

/* [lo, hi]; hi may be a number (1e30), bare Infinity or {"__float__": "Infinity"}. Default
 * (0, inf). */
static nemotron_status read_time_step_limit(struct json_object *root, struct nt_config *c,
                                            struct nt_err *err) {
    const char *key;
    struct json_object *v = member(root, "time_step_limit", "mamba_dt_limit", &key);
    c->time_step_limit[0] = 0.0;
    c->time_step_limit[1] = INFINITY;
    if (!v) return NEMOTRON_OK;
    if (v == JSON_NULL || !json_object_is_type(v, json_type_array) ||
        json_object_array_length(v) != 2)
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s: expected a list [lo, hi], found %.*s%s", key,
                       SHOW(v == JSON_NULL ? NULL : v));
    double lim[2];
    for (size_t i = 0; i < 2; i++) {
        struct json_object *e = json_object_array_get_idx(v, i);
        if (!number(e, &lim[i]))
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s[%zu]: expected a number, found %s %.*s%s",
                           key, i, type_name(e), SHOW(e));
    }
    /* dt is clamped to [lo, hi]: lo finite and >= 0 (dt is positive anyway), hi >= lo (may be
     * inf). The negated comparisons reject NaN. */
    if (!(lim[0] >= 0 && lim[0] < INFINITY && lim[1] >= lim[0]))
        return nt_fail(err, NEMOTRON_ERR_CONFIG,
                       "%s = %.*s%s: expected 0 <= lo <= hi with lo finite", key, SHOW(v));
    c->time_step_limit[0] = lim[0];
    c->time_step_limit[1] = lim[1];
    return NEMOTRON_OK;
}

/* ------------------------------------------------------------------------------------------
 * Validation: what model code relies on
 */

static bool uses(const struct nt_config *c, char kind) {
    return strchr(c->pattern, kind) != NULL || strchr(c->mtp_pattern, kind) != NULL;
}

static const char *kind_words(char kind) {
    switch (kind) {
    case NT_LAYER_MAMBA: return "Mamba ('M')";
    case NT_LAYER_ATTENTION: return "attention ('*')";
    case NT_LAYER_MLP: return "MLP ('-')";
    case NT_LAYER_MOE: return "MoE ('E')";
    }
    return "?";
}

static nemotron_status validate(const struct nt_config *c, struct nt_err *err) {
    /* Sizes the layer kinds in use need positive (ranges, negatives included, were checked when
     * read). */
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct key *k = &keys[i];
        if (!k->need || k->off == UNUSED_KEY) continue;
        bool positive = k->type == KEY_FLOAT ? load_float(c, k->off) > 0 : load_int(c, k->off) > 0;
        if (positive) continue;
        if (k->need == 'A')
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "%s = %g: must be > 0", k->name,
                           k->type == KEY_FLOAT ? (double)load_float(c, k->off)
                                                : (double)load_int(c, k->off));
        if (uses(c, k->need))
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "%s = %d, but the layers%s include %s layers, which need it > 0",
                           k->name, load_int(c, k->off), c->n_mtp_layer ? " (with MTP)" : "",
                           kind_words(k->need));
    }

    /* q and k/v widths need no test: CAP_HEADS x CAP_HEAD_DIM = CAP_WIDTH. */
    if (uses(c, NT_LAYER_ATTENTION)) {
        int nq = c->num_attention_heads, nkv = c->num_key_value_heads;
        if (nq % nkv != 0)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "num_attention_heads = %d is not a multiple of num_key_value_heads = %d",
                           nq, nkv);
    }

    if (uses(c, NT_LAYER_MAMBA)) {
        int nh = c->mamba_num_heads, G = c->n_groups;
        int64_t I = (int64_t)nh * c->mamba_head_dim, GN = (int64_t)G * c->ssm_state_size;
        if (nh % G != 0)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "mamba_num_heads = %d is not a multiple of n_groups = %d", nh, G);
        /* The gated RMSNorm normalises I in G groups. */
        if (I % G != 0)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "mamba_num_heads x mamba_head_dim = %lld is not a multiple of "
                           "n_groups = %d",
                           (long long)I, G);
        /* in_proj output: z, x, B, C, dt = I + (I + 2 GN) + nh */
        int64_t width = 2 * I + 2 * GN + nh;
        if (width > CAP_WIDTH)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "the Mamba in_proj width 2 x mamba_num_heads x mamba_head_dim + 2 x "
                           "n_groups x ssm_state_size + mamba_num_heads = %lld is wider than %d",
                           (long long)width, CAP_WIDTH);
    }

    if (uses(c, NT_LAYER_MOE)) {
        int E = c->n_routed_experts, k = c->num_experts_per_tok, ng = c->n_group,
            tg = c->topk_group;
        if (k > E)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "num_experts_per_tok = %d is more than n_routed_experts = %d", k, E);
        if (E % ng != 0)
            return nt_fail(err, NEMOTRON_ERR_CONFIG,
                           "n_routed_experts = %d is not a multiple of n_group = %d", E, ng);
        if (tg > ng)
            return nt_fail(err, NEMOTRON_ERR_CONFIG, "topk_group = %d is more than n_group = %d",
                           tg, ng);
        if (ng > 1) {
            int per = E / ng;
            /* A group's score is the sum of its two best experts (MODEL.md 3.6). */
            if (per < 2)
                return nt_fail(err, NEMOTRON_ERR_CONFIG,
                               "n_routed_experts / n_group = %d / %d leaves %d expert per group; "
                               "group scores sum the top 2, so each group needs 2",
                               E, ng, per);
            if ((int64_t)tg * per < k)
                return nt_fail(err, NEMOTRON_ERR_CONFIG,
                               "topk_group x (n_routed_experts / n_group) = %d x %d < "
                               "num_experts_per_tok = %d: too few experts left to choose from",
                               tg, per, k);
        }
    }
    return NEMOTRON_OK;
}

/* ------------------------------------------------------------------------------------------
 * Entry points
 */

static nemotron_status parse_tree(struct json_object *root, struct nt_config *c,
                                  struct nt_err *err) {
    nemotron_status st;
    if (!json_object_is_type(root, json_type_object))
        return nt_fail(err, NEMOTRON_ERR_CONFIG, "expected a JSON object at the top, found %s",
                       type_name(root));
    for (size_t i = 0; i < N_KEYS; i++)
        if ((st = read_key(root, &keys[i], c, err))) return st;
    if (c->num_key_value_heads == KV_HEADS_FROM_Q) c->num_key_value_heads = c->num_attention_heads;
    if ((st = read_eos(root, c, err))) return st;
    if ((st = read_time_step_limit(root, c, err))) return st;
    if ((st = read_layers(root, c, err))) return st;
    return validate(c, err);
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

nemotron_status nt_config_parse(const char *text, size_t len, const char *name,
                                struct nt_config *cfg, struct nt_err *err) {
    int line, col;
    if (!name) name = "config.json";
    if (len > CONFIG_MAX_BYTES)
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: %zu bytes, more than the %u a config may have", name, len,
                       CONFIG_MAX_BYTES);
    /* json-c takes a NUL byte for the end of the text ("unexpected end of data"); a config
     * never holds one, so say what it is. */
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul) {
        line_col(text, len, (size_t)(nul - text), &line, &col);
        return nt_fail(err, NEMOTRON_ERR_FORMAT,
                       "%s: invalid JSON: NUL byte at line %d, column %d", name, line, col);
    }

    struct json_tokener *tok = json_tokener_new_ex(JSON_MAX_DEPTH);
    if (!tok)
        return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the JSON parser", name);
    /* Non-strict mode: it reads the bare NaN/Infinity that Python's json module writes. */
    struct json_object *root = json_tokener_parse_ex(tok, text ? text : "", (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || jerr != json_tokener_success) {
        json_object_put(root);
        line_col(text, len, end, &line, &col);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", name,
                       line, col,
                       jerr == json_tokener_continue ? "unexpected end of text"
                                                     : json_tokener_error_desc(jerr));
    }
    for (size_t i = end; i < len; i++) {
        if (!is_space(text[i])) {
            json_object_put(root);
            line_col(text, len, i, &line, &col);
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "%s: invalid JSON at line %d, column %d: text after the top-level value",
                           name, line, col);
        }
    }

    struct nt_config c;
    memset(&c, 0, sizeof c);
    nemotron_status st = parse_tree(root, &c, err);
    json_object_put(root);
    if (st) {
        nt_err_prefix(err, "%s: ", name);
        return st;
    }
    *cfg = c;
    return NEMOTRON_OK;
}

nemotron_status nt_config_load(const char *path, struct nt_config *cfg, struct nt_err *err) {
    char *buf;
    size_t len;
    nemotron_status st = nt_read_file(path, CONFIG_MAX_BYTES, "a config", &buf, &len, err);
    if (st) return st;
    st = nt_config_parse(buf, len, path, cfg, err);
    nt_free(buf);
    return st;
}
