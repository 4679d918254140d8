/* test_load_errors.c - the loader and the session against good and broken inputs.
 *
 * Every model is written by tests/support/synth.h into a directory under one mkdtemp root in
 * /tmp, removed at the end. Through the public API only:
 *   - the unmutated tiny model loads in F32, BF16 and F16 and from 3 shards (bit-identical
 *     logits to one file), as do tiny-mtp (latent MoE, MTP, biases, grouped routing) and
 *     tiny-tied; a few tokens give finite logits;
 *   - each broken input fails with the right status and a message naming the culprit
 *     (tensor, key, file, shape), and leaves a handle that holds only the message;
 *   - a bad eval (token outside the vocabulary, past the context, n < 1) fails before any
 *     work and leaves the session exactly as it was: the next valid eval is bit-identical to a
 *     fresh session fed the same valid tokens.
 * TEST_VERBOSE=1 prints every case with the status and message it got.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "nemotron.h"
#include "support/synth.h"
#include "test.h"

static char *root;   /* the mkdtemp directory holding every model of this run */
static int verbose;  /* TEST_VERBOSE=1: print every case with its status and message */
static int n_models; /* subdirectories made so far */

/* Writes `shape` with options o (NULL: defaults) into a fresh subdirectory of root. Returns
 * the path (static storage, valid until the 8th next call), or NULL after a failed CHECK. */
static const char *make(const char *shape_name, const struct synth_options *o) {
    static char paths[8][512];
    char *p = paths[n_models % 8];
    snprintf(p, sizeof paths[0], "%s/m%03d", root, n_models);
    n_models++;
    struct synth_shape s;
    CHECK(synth_shape_get(shape_name, &s) == 0, "no shape %s", shape_name);
    struct synth_result r;
    int rc = synth_write(p, &s, o, &r);
    CHECK(rc == 0, "synth_write %s: %s", p, r.err);
    return rc == 0 ? p : NULL;
}

/* Loads dir and checks the status and that the message holds each string of `needles`
 * (NULL-terminated); also that a failed handle holds nothing but the message. */
static void expect_load(const char *what, const char *dir, nemotron_status want,
                        const char *const *needles) {
    if (!dir) return;
    nemotron_model *m = NULL;
    nemotron_status st = nemotron_model_load(dir, NULL, &m);
    const char *msg = nemotron_model_errmsg(m);
    CHECK(m != NULL, "%s: no handle", what);
    CHECK(st == want, "%s: status %d (%s), expected %d (%s); message: %s", what, st,
          nemotron_status_str(st), want, nemotron_status_str(want), msg);
    for (int i = 0; needles && needles[i]; i++)
        CHECK(strstr(msg, needles[i]) != NULL, "%s: message lacks \"%s\": %s", what, needles[i], msg);
    if (want == NEMOTRON_OK) {
        CHECK(msg[0] == 0, "%s: message after success: %s", what, msg);
    } else {
        CHECK(msg[0] != 0, "%s: failed with an empty message", what);
        CHECK(nemotron_model_vocab_size(m) == 0 && nemotron_model_n_layer(m) == 0,
              "%s: a failed handle describes a model", what);
        /* a session from a failed handle is refused too, with a message */
        nemotron_session *s = NULL;
        nemotron_status ss = nemotron_session_new(m, NULL, &s);
        CHECK(ss == NEMOTRON_ERR_ARG && s && nemotron_session_errmsg(s)[0],
              "%s: session on a failed model: status %d", what, ss);
        nemotron_session_free(s);
    }
    if (verbose) printf("  %-36s %-16s %s\n", what, nemotron_status_str(st), msg[0] ? msg : "(loaded)");
    nemotron_model_free(m); /* msg dies with it */
}

#define EXPECT_LOAD(what, dir, want, ...) \
    expect_load(what, dir, want, (const char *const[]){__VA_ARGS__, NULL})

static int all_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

static const int32_t prompt[5] = {1, 7, 42, 255, 3};

/* Loads dir, runs the prompt as one eval and returns every position's logits (malloc-ed,
 * [5][V]), or NULL. *vocab gets V. */
static float *run_prompt(const char *what, const char *dir, int *vocab) {
    if (!dir) return NULL;
    nemotron_model *m;
    nemotron_status st = nemotron_model_load(dir, NULL, &m);
    CHECK(st == NEMOTRON_OK, "%s: load: %s", what, nemotron_model_errmsg(m));
    if (st) {
        nemotron_model_free(m);
        return NULL;
    }
    int V = nemotron_model_vocab_size(m);
    *vocab = V;
    nemotron_session *s;
    st = nemotron_session_new(m, NULL, &s);
    CHECK(st == NEMOTRON_OK, "%s: session: %s", what, nemotron_session_errmsg(s));
    float *out = malloc(5 * (size_t)V * sizeof(float));
    if (st == NEMOTRON_OK) st = nemotron_session_eval(s, prompt, 5, out);
    CHECK(st == NEMOTRON_OK, "%s: eval: %s", what, nemotron_session_errmsg(s));
    if (st == NEMOTRON_OK) {
        CHECK(all_finite(out, 5 * (size_t)V), "%s: logits not finite", what);
        CHECK(nemotron_session_pos(s) == 5, "%s: pos %d after 5 tokens", what, nemotron_session_pos(s));
        int32_t a = nemotron_session_argmax(s);
        CHECK(a >= 0 && a < V, "%s: argmax %d", what, a);
        const float *last = nemotron_session_logits(s);
        CHECK(last && memcmp(last, out + 4 * (size_t)V, (size_t)V * sizeof(float)) == 0,
              "%s: session logits differ from the last row", what);
    } else {
        free(out);
        out = NULL;
    }
    nemotron_session_free(s);
    nemotron_model_free(m);
    return out;
}

/* ------------------------------------------------------------------------------------------
 * Models that must load
 */

static void test_good_models(void) {
    static const enum synth_dtype dtypes[3] = {SYNTH_F32, SYNTH_BF16, SYNTH_F16};
    static const char *names[3] = {"f32", "bf16", "f16"};
    float *ref = NULL;
    int V = 0;
    for (int i = 0; i < 3; i++) {
        struct synth_options o = synth_default_options();
        o.dtype = dtypes[i];
        const char *dir = make("tiny", &o);
        char what[64];
        snprintf(what, sizeof what, "tiny %s", names[i]);
        EXPECT_LOAD(what, dir, NEMOTRON_OK, "");
        nemotron_model *m = NULL;
        if (dir && nemotron_model_load(dir, NULL, &m) == NEMOTRON_OK) {
            CHECK(nemotron_model_vocab_size(m) == 256, "%s: vocab %d", what, nemotron_model_vocab_size(m));
            CHECK(nemotron_model_hidden_size(m) == 64, "%s: hidden %d", what, nemotron_model_hidden_size(m));
            CHECK(nemotron_model_n_layer(m) == 7, "%s: %d layers", what, nemotron_model_n_layer(m));
            CHECK(nemotron_model_ctx_train(m) == 4096, "%s: trained context %d", what,
                  nemotron_model_ctx_train(m));
            CHECK(!strcmp(nemotron_model_pattern(m), "M*-EM*E"), "%s: pattern %s", what, nemotron_model_pattern(m));
            CHECK(nemotron_model_active_weight_bytes(m) > 0, "%s: no active bytes", what);
            int32_t eos[4];
            CHECK(nemotron_model_eos_ids(m, eos, 4) == 1 && eos[0] == 2, "%s: eos ids", what);
        }
        nemotron_model_free(m);
        float *logits = run_prompt(what, dir, &V);
        if (i == 0) ref = logits;
        else free(logits);
    }

    /* 3 shards hold the same tensors as one file: the same logits, bit for bit */
    struct synth_options o = synth_default_options();
    o.n_shards = 3;
    const char *dir = make("tiny", &o);
    EXPECT_LOAD("tiny f32, 3 shards", dir, NEMOTRON_OK, "");
    int V3 = 0;
    float *sharded = run_prompt("tiny f32, 3 shards", dir, &V3);
    CHECK(ref && sharded && V3 == V && memcmp(ref, sharded, 5 * (size_t)V * sizeof(float)) == 0,
          "3 shards: logits differ from one file");
    free(sharded);
    free(ref);

    free(run_prompt("tiny-mtp bf16", make("tiny-mtp", &(struct synth_options){.dtype = SYNTH_BF16, .seed = 5}), &V));
    free(run_prompt("tiny-mtp f32, 4 shards",
                    make("tiny-mtp", &(struct synth_options){.dtype = SYNTH_F32, .seed = 2, .n_shards = 4}), &V));
    /* tied: no lm_head.weight in the file, the embeddings serve as the head */
    dir = make("tiny-tied", NULL);
    EXPECT_LOAD("tied config without lm_head", dir, NEMOTRON_OK, "");
    free(run_prompt("tied config without lm_head", dir, &V));
    /* a tied config with an lm_head in the file uses it (HF never ties) */
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"tie_word_embeddings", "true"};
    EXPECT_LOAD("tied config with lm_head", make("tiny", &o), NEMOTRON_OK, "");
    /* the list form of the layers, with legacy names, wins over the pattern string */
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){
        "layers_block_type",
        "[\"mamba\", \"attention\", \"mlp\", \"moe\", \"linear_attention\", \"full_attention\", \"moe\"]"};
    o.config_edit[1] = (struct synth_config_edit){"hybrid_override_pattern", "\"MMMMMMM\""};
    EXPECT_LOAD("layers_block_type list", make("tiny", &o), NEMOTRON_OK, "");
}

/* ------------------------------------------------------------------------------------------
 * Broken tensors
 */

static void test_bad_tensors(void) {
    struct synth_options o = synth_default_options();
    o.omit[0] = "backbone.layers.1.mixer.o_proj.weight";
    EXPECT_LOAD("missing tensor", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'backbone.layers.1.mixer.o_proj.weight'", "missing", "[64, 64]");

    o = synth_default_options();
    o.omit[0] = "backbone.layers.6.mixer.experts.7.down_proj.weight";
    EXPECT_LOAD("missing expert", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "backbone.layers.6.mixer.experts.7.down_proj.weight", "missing");

    o = synth_default_options();
    o.omit[0] = "backbone.layers.4.mixer.A_log";
    o.n_shards = 3;
    EXPECT_LOAD("missing tensor, 3 shards", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "backbone.layers.4.mixer.A_log", "missing");

    o = synth_default_options();
    o.extra[0] = "backbone.layers.0.mixer.bogus.weight";
    EXPECT_LOAD("extra tensor", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'backbone.layers.0.mixer.bogus.weight'", "unexpected", "model.safetensors");

    o = synth_default_options();
    o.extra[0] = "lm_head.bias";
    o.n_shards = 2;
    EXPECT_LOAD("extra tensor, 2 shards", make("tiny", &o), NEMOTRON_ERR_TENSOR, "'lm_head.bias'",
                "unexpected", "model-00002-of-00002.safetensors");

    o = synth_default_options();
    o.reshape = "backbone.layers.1.mixer.q_proj.weight";
    EXPECT_LOAD("misshapen tensor", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'backbone.layers.1.mixer.q_proj.weight'", "has shape [65, 64]", "expected [64, 64]");

    o = synth_default_options();
    o.reshape = "backbone.layers.0.mixer.conv1d.weight";
    o.reshape_ndim = 2;
    o.reshape_dims[0] = 128;
    o.reshape_dims[1] = 4;
    EXPECT_LOAD("tensor with a dimension less", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'backbone.layers.0.mixer.conv1d.weight'", "[128, 4]", "expected [128, 1, 4]");

    o = synth_default_options();
    o.reshape = "backbone.embeddings.weight";
    o.dtype = SYNTH_BF16;
    EXPECT_LOAD("misshapen embeddings", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "backbone.embeddings.weight", "[257, 64]", "expected [256, 64]");

    o = synth_default_options();
    o.retype = "backbone.norm_f.weight";
    EXPECT_LOAD("wrong dtype I32", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'backbone.norm_f.weight'", "I32", "expected F32, F16 or BF16");

    o = synth_default_options();
    o.retype = "backbone.layers.2.mixer.up_proj.weight";
    o.retype_dtype = "F8_E4M3";
    EXPECT_LOAD("wrong dtype F8_E4M3", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "backbone.layers.2.mixer.up_proj.weight", "F8_E4M3");

    /* lm_head: only a tied config may leave it out */
    o = synth_default_options();
    o.omit[0] = "lm_head.weight";
    EXPECT_LOAD("untied config without lm_head", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "'lm_head.weight'", "missing");

    /* config and tensors disagree */
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"hidden_size", "32"};
    EXPECT_LOAD("config hidden_size 32, tensors 64", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "backbone.embeddings.weight", "[256, 64]", "expected [256, 32]");
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"num_nextn_predict_layers", "1"};
    EXPECT_LOAD("config with MTP, no MTP tensors", make("tiny", &o), NEMOTRON_ERR_TENSOR,
                "mtp.layers.0.enorm.weight", "missing");
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"num_nextn_predict_layers", "0"};
    EXPECT_LOAD("MTP tensors, config without MTP", make("tiny-mtp", &o), NEMOTRON_ERR_TENSOR,
                "unexpected tensor 'mtp.layers.");
}

/* ------------------------------------------------------------------------------------------
 * Broken config.json
 */

static void test_bad_config(void) {
    struct synth_options o = synth_default_options();
    o.config_text = "{\"vocab_size\": 256,, \"hidden_size\": 64}";
    EXPECT_LOAD("malformed config JSON", make("tiny", &o), NEMOTRON_ERR_FORMAT, "config.json",
                "line 1");

    o = synth_default_options();
    o.config_text = "{\n  \"vocab_size\": 256,\n  \"hidden_size\": 64\n";
    EXPECT_LOAD("config JSON cut short", make("tiny", &o), NEMOTRON_ERR_FORMAT, "config.json");

    o = synth_default_options();
    o.config_text = "";
    EXPECT_LOAD("empty config.json", make("tiny", &o), NEMOTRON_ERR_FORMAT, "config.json");

    o = synth_default_options();
    o.config_text = "[1, 2, 3]";
    EXPECT_LOAD("config that is a list", make("tiny", &o), NEMOTRON_ERR_CONFIG, "config.json");

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"hidden_size", "\"64\""};
    EXPECT_LOAD("config key of the wrong type", make("tiny", &o), NEMOTRON_ERR_CONFIG,
                "hidden_size", "a string");

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"tie_word_embeddings", "1"};
    EXPECT_LOAD("config bool given as int", make("tiny", &o), NEMOTRON_ERR_CONFIG,
                "tie_word_embeddings");

    /* the trained context length is the config's, not a constant */
    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"max_position_embeddings", "1000"};
    const char *short_ctx = make("tiny", &o);
    nemotron_model *m = NULL;
    CHECK(short_ctx && nemotron_model_load(short_ctx, NULL, &m) == NEMOTRON_OK &&
              nemotron_model_ctx_train(m) == 1000,
          "max_position_embeddings 1000: trained context %d", nemotron_model_ctx_train(m));
    nemotron_model_free(m);

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"hybrid_override_pattern", "\"M*X-E\""};
    EXPECT_LOAD("unknown layer kind (pattern)", make("tiny", &o), NEMOTRON_ERR_CONFIG,
                "hybrid_override_pattern", "'X'");

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"layers_block_type", "[\"mamba\", \"mamba2\"]"};
    EXPECT_LOAD("unknown layer kind (list)", make("tiny", &o), NEMOTRON_ERR_CONFIG,
                "layers_block_type[1]", "mamba2");

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"num_key_value_heads", "3"};
    EXPECT_LOAD("inconsistent heads", make("tiny", &o), NEMOTRON_ERR_CONFIG, "num_key_value_heads");

    o = synth_default_options();
    o.config_edit[0] = (struct synth_config_edit){"vocab_size", "-5"};
    EXPECT_LOAD("negative vocab_size", make("tiny", &o), NEMOTRON_ERR_CONFIG, "vocab_size");
}

/* ------------------------------------------------------------------------------------------
 * Broken files and paths
 */

static void test_bad_files(void) {
    struct synth_options o = synth_default_options();
    o.truncate = 1;
    EXPECT_LOAD("truncated by 1 byte", make("tiny", &o), NEMOTRON_ERR_FORMAT, "model.safetensors",
                "truncated", "1 byte missing");

    o = synth_default_options();
    o.truncate = 5000;
    o.n_shards = 3;
    EXPECT_LOAD("last shard truncated", make("tiny", &o), NEMOTRON_ERR_FORMAT,
                "model-00003-of-00003.safetensors", "truncated");

    /* cut inside the header, and inside the 8-byte length */
    const char *dir = make("tiny", NULL);
    if (dir) {
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(truncate(path, 100) == 0, "truncate %s", path);
        EXPECT_LOAD("truncated inside the header", dir, NEMOTRON_ERR_FORMAT, "model.safetensors",
                    "truncated");
        CHECK(truncate(path, 5) == 0, "truncate %s", path);
        EXPECT_LOAD("truncated to 5 bytes", dir, NEMOTRON_ERR_FORMAT, "model.safetensors");
        CHECK(truncate(path, 0) == 0, "truncate %s", path);
        EXPECT_LOAD("empty model.safetensors", dir, NEMOTRON_ERR_FORMAT, "model.safetensors");
    }

    o = synth_default_options();
    o.overlap = "backbone.layers.0.mixer.out_proj.weight";
    EXPECT_LOAD("overlapping data_offsets", make("tiny", &o), NEMOTRON_ERR_FORMAT, "overlaps",
                "backbone.layers.0.mixer.out_proj.weight", "backbone.layers.0.mixer.in_proj.weight");

    o = synth_default_options();
    o.n_shards = 3;
    o.missing_shard = 2;
    EXPECT_LOAD("shard listed in the index missing", make("tiny", &o), NEMOTRON_ERR_IO,
                "model-00002-of-00003.safetensors", "model.safetensors.index.json");

    o = synth_default_options();
    o.no_config = 1;
    EXPECT_LOAD("directory without config.json", make("tiny", &o), NEMOTRON_ERR_IO, "config.json");

    dir = make("tiny", NULL);
    if (dir) {
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(unlink(path) == 0, "unlink %s", path);
        EXPECT_LOAD("directory without safetensors", dir, NEMOTRON_ERR_IO, "model.safetensors");
        snprintf(path, sizeof path, "%s/config.json", dir);
        EXPECT_LOAD("path that is a file", path, NEMOTRON_ERR_IO, path, "not a directory");
    }

    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-model", root);
    EXPECT_LOAD("nonexistent path", missing, NEMOTRON_ERR_IO, missing);

    nemotron_model *m = NULL;
    nemotron_status st = nemotron_model_load(NULL, NULL, &m);
    CHECK(st == NEMOTRON_ERR_ARG && m && nemotron_model_errmsg(m)[0], "NULL path: status %d", st);
    nemotron_model_free(m);
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = "tpu";
    st = nemotron_model_load(make("tiny", NULL), &mp, &m);
    CHECK(st == NEMOTRON_ERR_UNSUPPORTED && strstr(nemotron_model_errmsg(m), "tpu"),
          "device tpu: status %d: %s", st, nemotron_model_errmsg(m));
    nemotron_model_free(m);
    /* malformed CUDA device numbers are argument errors, whether or not the build has CUDA */
    const char *bad_cuda[] = {"cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:99999", "cuda: 1"};
    for (size_t i = 0; i < sizeof bad_cuda / sizeof bad_cuda[0]; i++) {
        mp.device = bad_cuda[i];
        st = nemotron_model_load(make("tiny", NULL), &mp, &m);
        CHECK(st == NEMOTRON_ERR_ARG && strstr(nemotron_model_errmsg(m), bad_cuda[i]),
              "device '%s': status %d: %s", bad_cuda[i], st, nemotron_model_errmsg(m));
        nemotron_model_free(m);
    }
}

/* ------------------------------------------------------------------------------------------
 * Sessions: bad evals change nothing
 */

/* A fresh session (n_ctx) fed the same evals; returns the last eval's logits for n tokens. */
static float *fresh_logits(nemotron_model *m, int n_ctx, const int32_t *a, int na,
                           const int32_t *b, int nb) {
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = n_ctx;
    nemotron_session *s;
    int V = nemotron_model_vocab_size(m);
    float *out = malloc((size_t)nb * V * sizeof(float));
    nemotron_status st = nemotron_session_new(m, &sp, &s);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(s, a, na, NULL);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(s, b, nb, out);
    CHECK(st == NEMOTRON_OK, "fresh session: %s", nemotron_session_errmsg(s));
    nemotron_session_free(s);
    if (st) {
        free(out);
        return NULL;
    }
    return out;
}

static void test_sessions(void) {
    const char *dir = make("tiny", NULL);
    if (!dir) return;
    nemotron_model *m;
    nemotron_status st = nemotron_model_load(dir, NULL, &m);
    CHECK(st == NEMOTRON_OK, "load: %s", nemotron_model_errmsg(m));
    if (st) {
        nemotron_model_free(m);
        return;
    }
    int V = nemotron_model_vocab_size(m);
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = 8;
    nemotron_session *s;
    st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK && nemotron_session_n_ctx(s) == 8, "session: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_logits(s) == NULL && nemotron_session_argmax(s) == -1,
          "logits before the first eval");

    const int32_t first[3] = {1, 2, 3};
    st = nemotron_session_eval(s, first, 3, NULL);
    CHECK(st == NEMOTRON_OK, "eval: %s", nemotron_session_errmsg(s));
    float *before = malloc((size_t)V * sizeof(float));
    memcpy(before, nemotron_session_logits(s), (size_t)V * sizeof(float));
    int32_t argmax_before = nemotron_session_argmax(s);

    /* each bad eval: the status, the message, and nothing moved */
    struct {
        const char *what;
        int32_t tokens[4];
        int n;
        int null_tokens;
        nemotron_status want;
        const char *needle[3];
    } bad[] = {
        {"token = vocab", {4, 256, 5}, 3, 0, NEMOTRON_ERR_ARG, {"token 256", "index 1", "vocabulary"}},
        {"token -1", {-1}, 1, 0, NEMOTRON_ERR_ARG, {"token -1", "index 0", NULL}},
        {"token INT32_MAX last", {4, 5, 6, INT32_MAX}, 4, 0, NEMOTRON_ERR_ARG, {"2147483647", "index 3", NULL}},
        {"n = 0", {4}, 0, 0, NEMOTRON_ERR_ARG, {"n = 0", NULL, NULL}},
        {"n = -3", {4}, -3, 0, NEMOTRON_ERR_ARG, {"-3", NULL, NULL}},
        {"tokens NULL", {0}, 2, 1, NEMOTRON_ERR_ARG, {NULL, NULL, NULL}},
        /* a wrong n is caught before the tokens are read: no read past the 4 given */
        {"n = INT_MAX", {4, 5, 6, 7}, INT_MAX, 0, NEMOTRON_ERR_CONTEXT, {"2147483647 positions", NULL, NULL}},
        {"past the context", {4, 5, 6, 7}, 4, 0, NEMOTRON_ERR_CONTEXT, {"context length 8", "position 5", NULL}},
    };
    float *scratch = malloc(4 * (size_t)V * sizeof(float));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (i == sizeof bad / sizeof bad[0] - 1) {
            /* the context case: fill to pos 5 first (then 5 + 4 > 8) */
            const int32_t two[2] = {4, 5};
            st = nemotron_session_eval(s, two, 2, NULL);
            CHECK(st == NEMOTRON_OK, "eval to pos 5: %s", nemotron_session_errmsg(s));
            memcpy(before, nemotron_session_logits(s), (size_t)V * sizeof(float));
            argmax_before = nemotron_session_argmax(s);
        }
        int pos = nemotron_session_pos(s);
        for (size_t k = 0; k < 4 * (size_t)V; k++) scratch[k] = -7.0f;
        st = nemotron_session_eval(s, bad[i].null_tokens ? NULL : bad[i].tokens, bad[i].n, scratch);
        const char *msg = nemotron_session_errmsg(s);
        CHECK(st == bad[i].want, "%s: status %d (%s), expected %d: %s", bad[i].what, st,
              nemotron_status_str(st), bad[i].want, msg);
        CHECK(msg[0] != 0, "%s: no message", bad[i].what);
        for (int k = 0; k < 3; k++)
            if (bad[i].needle[k])
                CHECK(strstr(msg, bad[i].needle[k]) != NULL, "%s: message lacks \"%s\": %s",
                      bad[i].what, bad[i].needle[k], msg);
        CHECK(nemotron_session_pos(s) == pos, "%s: pos %d -> %d", bad[i].what, pos, nemotron_session_pos(s));
        CHECK(nemotron_session_logits(s) &&
                  memcmp(nemotron_session_logits(s), before, (size_t)V * sizeof(float)) == 0,
              "%s: the session's logits changed", bad[i].what);
        CHECK(nemotron_session_argmax(s) == argmax_before, "%s: argmax changed", bad[i].what);
        int untouched = 1;
        for (size_t k = 0; k < 4 * (size_t)V; k++) untouched &= scratch[k] == -7.0f;
        CHECK(untouched, "%s: the caller's logits buffer was written", bad[i].what);
        if (verbose) printf("  session: %-27s %-16s %s\n", bad[i].what, nemotron_status_str(st), msg);
    }
    free(scratch);

    /* now at pos 5 of 8: three more fill it exactly, bit-identical to a fresh session fed
     * the same valid evals (3, then 2, then 3 tokens) */
    const int32_t upto5[5] = {1, 2, 3, 4, 5}, last3[3] = {6, 7, 8};
    float *got = malloc(3 * (size_t)V * sizeof(float));
    st = nemotron_session_eval(s, last3, 3, got);
    CHECK(st == NEMOTRON_OK && nemotron_session_pos(s) == 8, "eval to the end: %s", nemotron_session_errmsg(s));
    /* the fresh session runs [1,2,3] + [4,5] as one eval of 5, then [6,7,8]: to run the very
     * same passes, split the first part as the session above did */
    nemotron_session *f;
    float *want = malloc(3 * (size_t)V * sizeof(float));
    st = nemotron_session_new(m, &sp, &f);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(f, upto5, 3, NULL);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(f, upto5 + 3, 2, NULL);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(f, last3, 3, want);
    CHECK(st == NEMOTRON_OK, "fresh session: %s", nemotron_session_errmsg(f));
    CHECK(memcmp(got, want, 3 * (size_t)V * sizeof(float)) == 0,
          "logits after rejected evals differ from a fresh session's");
    CHECK(all_finite(got, 3 * (size_t)V), "logits not finite");
    nemotron_session_free(f);
    free(want);
    free(got);

    /* full: one more is past the context; then reset and run again */
    st = nemotron_session_eval(s, last3, 1, NULL);
    CHECK(st == NEMOTRON_ERR_CONTEXT && nemotron_session_pos(s) == 8, "eval at a full context: %d", st);
    nemotron_session_reset(s);
    CHECK(nemotron_session_pos(s) == 0 && nemotron_session_logits(s) == NULL, "reset");
    float *again = malloc(2 * (size_t)V * sizeof(float));
    st = nemotron_session_eval(s, upto5, 3, NULL);
    if (st == NEMOTRON_OK) st = nemotron_session_eval(s, upto5 + 3, 2, again);
    float *fresh = fresh_logits(m, 8, upto5, 3, upto5 + 3, 2);
    CHECK(st == NEMOTRON_OK && fresh && memcmp(again, fresh, 2 * (size_t)V * sizeof(float)) == 0,
          "after reset: logits differ from a fresh session's");
    free(fresh);
    free(again);
    free(before);
    nemotron_session_free(s);

    /* a bad token in a fresh session: still no logits, pos 0 */
    st = nemotron_session_new(m, &sp, &s);
    const int32_t oov[2] = {3, 1000};
    CHECK(st == NEMOTRON_OK && nemotron_session_eval(s, oov, 2, NULL) == NEMOTRON_ERR_ARG &&
              nemotron_session_pos(s) == 0 && nemotron_session_logits(s) == NULL &&
              nemotron_session_argmax(s) == -1,
          "bad first eval changed a fresh session");
    nemotron_session_free(s);

    /* pass_max */
    sp = nemotron_session_default_params();
    sp.pass_max = NEMOTRON_PASS_MAX + 1;
    st = nemotron_session_new(m, &sp, &s);
    char too_big[32];
    snprintf(too_big, sizeof too_big, "%d", NEMOTRON_PASS_MAX + 1);
    CHECK(st == NEMOTRON_ERR_ARG && s && strstr(nemotron_session_errmsg(s), too_big),
          "pass_max %s: status %d: %s", too_big, st, s ? nemotron_session_errmsg(s) : "(no handle)");
    if (verbose) printf("  session: pass_max %-18s %-16s %s\n", too_big, nemotron_status_str(st),
           s ? nemotron_session_errmsg(s) : "");
    const int32_t one = 1;
    CHECK(nemotron_session_eval(s, &one, 1, NULL) == NEMOTRON_ERR_ARG, "eval on a failed session");
    CHECK(nemotron_session_logits(s) == NULL && nemotron_session_argmax(s) == -1,
          "a failed session has logits");
    nemotron_session_free(s);
    sp.pass_max = NEMOTRON_PASS_MAX;
    st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK && nemotron_session_pass_max(s) == NEMOTRON_PASS_MAX, "pass_max %d: %s",
          NEMOTRON_PASS_MAX, nemotron_session_errmsg(s));
    nemotron_session_free(s);
    /* no choice: the backend's (the CPU's 256) */
    sp = nemotron_session_default_params();
    st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK && nemotron_session_pass_max(s) == 256, "default pass_max: %d: %s",
          nemotron_session_pass_max(s), nemotron_session_errmsg(s));
    nemotron_session_free(s);
    st = nemotron_session_new(NULL, NULL, &s);
    CHECK(st == NEMOTRON_ERR_ARG && s, "session of a NULL model: status %d", st);
    nemotron_session_free(s);

    nemotron_model_free(m);
}

/* NULL where a handle or an out argument belongs, in every handle of the public API: an error
 * or an empty answer, never a crash. */
static void test_null_handles(void) {
    const int32_t t[1] = {1};
    CHECK(nemotron_session_eval(NULL, t, 1, NULL) == NEMOTRON_ERR_ARG, "eval(NULL)");
    CHECK(nemotron_session_pos(NULL) == 0 && nemotron_session_n_ctx(NULL) == 0 &&
              nemotron_session_pass_max(NULL) == 0 && nemotron_session_logits(NULL) == NULL &&
              nemotron_session_argmax(NULL) == -1,
          "session getters of NULL");
    nemotron_session_reset(NULL);
    nemotron_session_free(NULL);
    CHECK(nemotron_model_vocab_size(NULL) == 0 && nemotron_model_hidden_size(NULL) == 0 &&
              nemotron_model_n_layer(NULL) == 0 && nemotron_model_n_threads(NULL) == 0 &&
              nemotron_model_ctx_train(NULL) == 0 &&
              !strcmp(nemotron_model_pattern(NULL), "") && !strcmp(nemotron_model_device(NULL), "") &&
              nemotron_model_weight_bytes(NULL) == 0 && nemotron_model_n_params(NULL) == 0 &&
              nemotron_model_active_weight_bytes(NULL) == 0 && nemotron_model_device_read_bandwidth(NULL) == 0,
          "model getters of NULL");
    int32_t ids[4];
    CHECK(nemotron_model_eos_ids(NULL, ids, 4) == 0, "eos ids of NULL");
    CHECK(nemotron_model_load("x", NULL, NULL) == NEMOTRON_ERR_ARG, "load with out NULL");
    CHECK(nemotron_session_new(NULL, NULL, NULL) == NEMOTRON_ERR_ARG, "session_new with out NULL");
    nemotron_session *s = NULL;
    CHECK(nemotron_session_new(NULL, NULL, &s) == NEMOTRON_ERR_ARG && s && nemotron_session_errmsg(s)[0],
          "session_new on a NULL model: %s", nemotron_session_errmsg(s));
    nemotron_session_free(s);

    /* the other handles: samplers (NULL, and one whose creation failed), tokenizers, streaming
     * decoders, the chat calls' out arguments */
    float l[4] = {0, 1, 0, 0};
    CHECK(nemotron_sampler_new(NULL, 4, NULL) == NEMOTRON_ERR_ARG, "sampler_new with out NULL");
    CHECK(nemotron_sampler_sample(NULL, l) == -1, "sample(NULL)");
    CHECK(!nemotron_sampler_is_greedy(NULL), "is_greedy(NULL)");
    CHECK(nemotron_sampler_accept(NULL, 1) == NEMOTRON_ERR_ARG, "accept(NULL)");
    nemotron_sampler_reset(NULL);
    nemotron_sampler_free(NULL);
    nemotron_sampler_params bad = nemotron_sampler_default_params();
    bad.top_p = 2.0f;
    nemotron_sampler *failed = NULL;
    CHECK(nemotron_sampler_new(&bad, 4, &failed) == NEMOTRON_ERR_ARG && failed, "sampler of top_p 2");
    if (failed) {
        CHECK(nemotron_sampler_sample(failed, l) == -1, "sample on a failed sampler");
        CHECK(!nemotron_sampler_is_greedy(failed), "is_greedy of a failed sampler");
        CHECK(nemotron_sampler_accept(failed, 1) == NEMOTRON_ERR_ARG &&
                  strstr(nemotron_sampler_errmsg(failed), "top_p"),
              "accept on a failed sampler (its message still the creation's): %s",
              nemotron_sampler_errmsg(failed));
        nemotron_sampler_reset(failed);
        nemotron_sampler_free(failed);
    }
    nemotron_sampler *good = NULL;
    nemotron_sampler_params greedy = nemotron_sampler_default_params();
    greedy.temperature = 0;
    CHECK(nemotron_sampler_new(&greedy, 4, &good) == NEMOTRON_OK, "greedy sampler");
    CHECK(nemotron_sampler_sample(good, NULL) == -1, "sample of NULL logits");
    CHECK(nemotron_sampler_is_greedy(good), "temperature 0, no penalty: not greedy");
    nemotron_sampler_free(good);
    /* a penalty or a temperature: the logits are needed */
    nemotron_sampler_params pen = greedy, warm = nemotron_sampler_default_params();
    pen.repeat_penalty = 1.1f;
    nemotron_sampler *ps = NULL, *ws = NULL;
    CHECK(nemotron_sampler_new(&pen, 4, &ps) == NEMOTRON_OK && !nemotron_sampler_is_greedy(ps),
          "temperature 0 with a repeat penalty: greedy");
    CHECK(nemotron_sampler_new(&warm, 4, &ws) == NEMOTRON_OK && !nemotron_sampler_is_greedy(ws),
          "temperature %g: greedy", (double)warm.temperature);
    nemotron_sampler_free(ps);
    nemotron_sampler_free(ws);
    CHECK(nemotron_tokenizer_load("x", NULL) == NEMOTRON_ERR_ARG, "tokenizer_load with out NULL");
    CHECK(nemotron_detok_new(NULL, 0) == NULL, "detok_new(NULL)");
    CHECK(nemotron_detok_push(NULL, 1) == NULL && !strcmp(nemotron_detok_flush(NULL), ""), "detok of NULL");
    nemotron_detok_free(NULL);
    char msg[64] = "";
    CHECK(nemotron_chat_render("[]", NULL, NULL, NULL, msg, sizeof msg) == NEMOTRON_ERR_ARG &&
              strstr(msg, "out is NULL"),
          "chat_render with out NULL: %s", msg);
    CHECK(nemotron_chat_parse("abc", 3, 0, NULL) == NEMOTRON_ERR_ARG, "chat_parse with out NULL");
}

int main(void) {
    const char *v = getenv("TEST_VERBOSE");
    verbose = v && *v && strcmp(v, "0") != 0;
    root = synth_mkdtemp("nemotron-test-load");
    CHECK(root != NULL, "mkdtemp failed");
    if (!root) return test_summary("load_errors");
    test_good_models();
    test_bad_tensors();
    test_bad_config();
    test_bad_files();
    test_sessions();
    test_null_handles();
    CHECK(synth_rmtree(root) == 0, "could not remove %s", root);
    free(root);
    return test_summary("load_errors");
}
