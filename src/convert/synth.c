/* synth.c - nemotron_synth: a .nemo of a published shape with random weights in the real formats.
 *
 * Benchmarks of full-size models need their bytes, not their knowledge: this writes every tensor
 * the shape's config implies (the binder's own list, nt_weights_list), in the stored form the
 * converter would give it (mix.c), with random contents of sane magnitude, so the forward stays
 * finite through every layer and routing spreads over the experts:
 *   - projections: entries of standard deviation 1/sqrt(cols), so a product keeps the scale of
 *     its input (q8_2f: uniform int8 with a row scale and a column field near 1; q4tp: uniform
 *     nibbles with group scales spread over half an octave);
 *   - the router: the same, in f32; norms and D: 1; A_log: log of 1..16; dt_bias: the inverse
 *     softplus of a dt in [0.001, 0.1] (Mamba-2's initialisation); conv taps 1/sqrt(K);
 *     biases 0; embeddings: unit-variance bf16 rows.
 * Randomness comes from counter-based streams (a seed, the tensor, the block of 64 KiB): the file
 * is the same for a seed whatever the thread count.
 */
#include "nemotron.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "../model/config.h"
#include "../model/nemo.h"
#include "../model/weights.h"
#include "../quant/quant.h"
#include "mix.h"

#define CHUNK_BYTES ((size_t)32 << 20)
#define BLOCK_BYTES ((size_t)64 << 10)

nemotron_synth_params nemotron_synth_default_params(void) {
    nemotron_synth_params p = {.quant = NEMOTRON_QUANT_DEFAULT, .seed = 1};
    return p;
}

/* ---- the shapes ---- */

/* Nemotron-3-Nano-30B-A3B's config.json (MODEL.md 1.3) with the vocabulary, the layer pattern and
 * the routed expert count left open. */
#define NANO_CONFIG                                                                              \
    "{\n"                                                                                        \
    "  \"architectures\": [\"NemotronHForCausalLM\"],\n"                                        \
    "  \"model_type\": \"nemotron_h\",\n"                                                       \
    "  \"vocab_size\": %d, \"hidden_size\": 2688,\n"                                          \
    "  \"num_hidden_layers\": %d, \"hybrid_override_pattern\": \"%s\",\n"                         \
    "  \"num_attention_heads\": 32, \"num_key_value_heads\": 2, \"head_dim\": 128,\n"             \
    "  \"attention_bias\": false, \"max_position_embeddings\": 262144,\n"                        \
    "  \"mamba_num_heads\": 64, \"mamba_head_dim\": 64, \"ssm_state_size\": 128,\n"               \
    "  \"n_groups\": 8, \"conv_kernel\": 4, \"chunk_size\": 128, \"expand\": 2,\n"                \
    "  \"use_conv_bias\": true, \"use_bias\": false, \"mamba_hidden_act\": \"silu\",\n"         \
    "  \"time_step_min\": 0.001, \"time_step_max\": 0.1, \"time_step_floor\": 0.0001,\n"         \
    "  \"intermediate_size\": 1856, \"mlp_hidden_act\": \"relu2\", \"mlp_bias\": false,\n"      \
    "  \"n_routed_experts\": %d, \"num_experts_per_tok\": 6, \"moe_intermediate_size\": 1856,\n" \
    "  \"n_shared_experts\": 1, \"moe_shared_expert_intermediate_size\": 3712,\n"                \
    "  \"n_group\": 1, \"topk_group\": 1, \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5,\n" \
    "  \"layer_norm_epsilon\": 1e-05, \"norm_eps\": 1e-05, \"residual_in_fp32\": false,\n"       \
    "  \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2,\n"              \
    "  \"pad_token_id\": 0, \"torch_dtype\": \"bfloat16\"\n"                                     \
    "}\n"

#define NANO_PATTERN "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
/* Nano's layers at Nano's widths, fewer of them: three Mamba-2, three MoE (128 experts each)
 * and one attention layer, every kernel shape of the real model, 3.3 GB in the default mix. */
#define MINI_PATTERN "MEM*EME"
/* Every width of Nano in 6 layers with 16 experts and a 4096-token vocabulary: 521 M params
 * (~380 MB default mix), small enough that a 2-core machine runs it next to llama.cpp on the same
 * weights (issue 17's CPU comparison); every product kernel shape of Nano but the head's. */
#define MID_PATTERN "MEM*EM"

static const struct shape {
    const char *name, *about, *pattern;
    int vocab, experts;
} shapes[] = {
    {"nemotron-3-nano-30b-a3b", "NVIDIA-Nemotron-3-Nano-30B-A3B: 52 layers, 128 experts top-6 (~17 GB default mix)",
     NANO_PATTERN, 131072, 128},
    {"mini", "Nano's widths with 7 layers (MEM*EME): every kernel shape of Nano, ~3.3 GB default mix",
     MINI_PATTERN, 131072, 128},
    {"mid", "Nano's widths, 6 layers (MEM*EM), 16 experts top-6, vocab 4096: 521 M params, ~380 MB default mix",
     MID_PATTERN, 4096, 16},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

const char *nemotron_synth_shape_name(int i) { return i >= 0 && i < N_SHAPES ? shapes[i].name : NULL; }
const char *nemotron_synth_shape_about(int i) { return i >= 0 && i < N_SHAPES ? shapes[i].about : NULL; }

/* ---- random streams ---- */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t stream_seed(uint64_t seed, uint64_t tensor, uint64_t part, uint64_t block) {
    uint64_t s = seed ^ (tensor * 0xd1342543de82ef95ull) ^ (part << 56) ^ (block * 0x2545f4914f6cdd1dull);
    splitmix(&s);
    return s;
}

/* Uniform in [0, 1). */
static double uniform(uint64_t *s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

/* ---- the writer side ---- */

struct tensor {
    char name[256];
    int ndim;
    int64_t shape[NT_MAX_DIMS];
    int64_t rows, cols;
    enum nt_dtype to;
};

struct synth {
    struct nt_nemo_writer *w;
    struct nt_err *err;
    nemotron_quant quant;
    uint64_t seed;
    int threads;
    struct tensor *t;
    int n, cap;
    int failed;                   /* out of memory while listing */
    uint8_t *buf;                 /* CHUNK_BYTES */
    uint64_t done, total;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
};

static void on_tensor(void *ctx, const char *name, int ndim, const int64_t *dims) {
    struct synth *s = ctx;
    if (s->failed) return;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        struct tensor *t = nt_alloc((size_t)cap * sizeof *t);
        if (!t) { s->failed = 1; return; }
        if (s->n) memcpy(t, s->t, (size_t)s->n * sizeof *t);
        nt_free(s->t);
        s->t = t;
        s->cap = cap;
    }
    struct tensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    memcpy(t->shape, dims, (size_t)ndim * sizeof *dims);
    t->rows = ndim == 1 ? 1 : dims[0];
    t->cols = ndim == 1 ? dims[0] : 1;
    for (int d = 1; d < ndim; d++) t->cols *= dims[d];
    t->to = nt_stored_form(nt_tensor_role(name, ndim), NT_DTYPE_BF16, t->rows, t->cols, s->quant);
}

static nemotron_status emit(struct synth *s, const void *p, size_t n) {
    nemotron_status st = nt_nemo_writer_append(s->w, p, n, s->err);
    s->done += n;
    if (s->progress) s->progress(s->progress_ctx, s->done, s->total);
    return st;
}

/* n random bytes in chunks; int8 mode maps -128 to -127 (q8_2f codes are symmetric). Each
 * 64 KiB block has its own stream, so threads split the chunk without changing the bytes. */
static nemotron_status emit_random_bytes(struct synth *s, int ti, int part, uint64_t n, int int8) {
    for (uint64_t off = 0; off < n; off += CHUNK_BYTES) {
        size_t len = n - off < CHUNK_BYTES ? (size_t)(n - off) : CHUNK_BYTES;
        size_t nb = (len + BLOCK_BYTES - 1) / BLOCK_BYTES;
        uint8_t *buf = s->buf;
#pragma omp parallel for num_threads(s->threads) schedule(static)
        for (size_t b = 0; b < nb; b++) {
            uint64_t rng = stream_seed(s->seed, (uint64_t)ti, (uint64_t)part, (off + b * BLOCK_BYTES) / BLOCK_BYTES);
            size_t lo = b * BLOCK_BYTES, hi = lo + BLOCK_BYTES < len ? lo + BLOCK_BYTES : len;
            for (size_t i = lo; i < hi; i += 8) {
                uint64_t r = splitmix(&rng);
                size_t k = hi - i < 8 ? hi - i : 8;
                memcpy(buf + i, &r, k);
                if (int8)
                    for (size_t j = i; j < i + k; j++)
                        if (buf[j] == 0x80) buf[j] = 0x81;
            }
        }
        nemotron_status st = emit(s, buf, len);
        if (st) return st;
    }
    return NEMOTRON_OK;
}

static nemotron_status emit_zeros(struct synth *s, uint64_t n) {
    memset(s->buf, 0, n < CHUNK_BYTES ? (size_t)n : CHUNK_BYTES);
    for (uint64_t off = 0; off < n; off += CHUNK_BYTES) {
        nemotron_status st = emit(s, s->buf, n - off < CHUNK_BYTES ? (size_t)(n - off) : CHUNK_BYTES);
        if (st) return st;
    }
    return NEMOTRON_OK;
}

static int ends_with(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    return n >= m && !strcmp(a + n - m, b);
}

/* The value of element i of a float tensor (small vectors, the router, plain projections). */
static float float_value(const struct tensor *t, uint64_t *rng, int64_t i, int K) {
    const char *n = t->name;
    if (ends_with(n, "A_log")) return (float)log(1.0 + 15.0 * uniform(rng));
    if (ends_with(n, ".D")) return 1.0f;
    if (ends_with(n, "dt_bias")) {
        double dt = exp(log(0.001) + (log(0.1) - log(0.001)) * uniform(rng));
        return (float)log(expm1(dt));
    }
    if (ends_with(n, "conv1d.weight")) return (float)((2 * uniform(rng) - 1) * sqrt(3.0 / K));
    if (ends_with(n, "norm.weight") || ends_with(n, "norm_f.weight") || ends_with(n, "enorm.weight") ||
        ends_with(n, "hnorm.weight") || ends_with(n, "layernorm.weight"))
        return 1.0f;
    if (t->ndim == 1) return 0.0f;                       /* biases, the routing correction */
    (void)i;
    double sd = nt_tensor_role(n, t->ndim) == NT_ROLE_EMBEDDINGS ? 1.0 : 1.0 / sqrt((double)t->cols);
    return (float)((2 * uniform(rng) - 1) * sd * sqrt(3.0));
}

static nemotron_status write_float(struct synth *s, int ti, int K) {
    const struct tensor *t = &s->t[ti];
    size_t esz = nt_dtype_size(t->to);
    uint64_t n = (uint64_t)t->rows * (uint64_t)t->cols, per = CHUNK_BYTES / 4;
    for (uint64_t off = 0; off < n; off += per) {
        size_t len = n - off < per ? (size_t)(n - off) : (size_t)per;
        size_t nb = (len + 4095) / 4096;
        uint8_t *buf = s->buf;
#pragma omp parallel for num_threads(s->threads) schedule(static)
        for (size_t b = 0; b < nb; b++) {
            uint64_t rng = stream_seed(s->seed, (uint64_t)ti, 0, (off + b * 4096) / 4096);
            size_t hi = (b + 1) * 4096 < len ? (b + 1) * 4096 : len;
            for (size_t i = b * 4096; i < hi; i++) {
                float v = float_value(t, &rng, (int64_t)(off + i), K);
                if (t->to == NT_DTYPE_F32) memcpy(buf + 4 * i, &v, 4);
                else {
                    uint16_t h = t->to == NT_DTYPE_BF16 ? nt_f32_to_bf16(v) : nt_f32_to_f16(v);
                    memcpy(buf + 2 * i, &h, 2);
                }
            }
        }
        nemotron_status st = emit(s, buf, len * esz);
        if (st) return st;
    }
    return NEMOTRON_OK;
}

/* q8_2f: uniform int8 codes (sd 127/sqrt(3)), row scales that bring the sd to 1/sqrt(cols) over
 * a column field uniform in [0.75, 1.25]. */
static nemotron_status write_q8(struct synth *s, int ti) {
    const struct tensor *t = &s->t[ti];
    nemotron_status st = emit_random_bytes(s, ti, 1, (uint64_t)t->rows * (uint64_t)t->cols, 1);
    uint64_t rng = stream_seed(s->seed, (uint64_t)ti, 2, 0);
    uint16_t *f = (uint16_t *)(void *)s->buf;   /* rs then cs: both far under a chunk */
    double rs = 1.0 / sqrt((double)t->cols) / (127.0 / sqrt(3.0));
    for (int64_t r = 0; r < t->rows; r++) f[r] = nt_f32_to_f16((float)(rs * (0.9 + 0.2 * uniform(&rng))));
    for (int64_t c = 0; c < t->cols; c++) f[t->rows + c] = nt_f32_to_f16((float)(0.75 + 0.5 * uniform(&rng)));
    if (!st) st = emit(s, f, (size_t)(t->rows + t->cols) * 2);
    uint64_t used = nt_q8_2f_cs_offset(t->rows, t->cols) + 2u * (uint64_t)t->cols;
    if (!st) st = emit_zeros(s, nt_matrix_bytes(NT_DTYPE_Q8_2F, t->rows, t->cols) - used);
    return st;
}

/* q4tp: uniform nibbles (sd ~4.6), random 5-bit codes, every row's scales on
 * 2^(base + code/62): half an octave above a base that gives sd 1/sqrt(cols). */
static nemotron_status write_q4(struct synth *s, int ti) {
    const struct tensor *t = &s->t[ti];
    int64_t rows = t->rows, cols = t->cols;
    nemotron_status st = emit_random_bytes(s, ti, 1, nt_q4tp_params_offset(rows, cols), 0);
    float base = (float)(log2(1.0 / sqrt((double)cols) / 4.61) - 0.25), step = 1.0f / 62.0f;
    uint32_t prm = (uint32_t)nt_f32_to_f16(base) | (uint32_t)nt_f32_to_f16(step) << 16;
    uint32_t *p = (uint32_t *)(void *)s->buf;
    for (int64_t r = 0; r < rows; r++) p[r] = prm;
    if (!st) st = emit(s, p, (size_t)rows * 4);
    if (!st) st = emit_random_bytes(s, ti, 3, (uint64_t)(rows * nt_q4tp_cstride(cols)), 0);
    uint64_t used = nt_q4tp_codes_offset(rows, cols) + (uint64_t)(rows * nt_q4tp_cstride(cols));
    if (!st) st = emit_zeros(s, nt_matrix_bytes(NT_DTYPE_Q4TP, rows, cols) - used);
    return st;
}

static nemotron_status synth(const struct shape *sh, const char *dst, const nemotron_synth_params *p,
                             struct nt_err *err) {
    if (p->quant == NEMOTRON_QUANT_SOURCE || !nt_quant_name(p->quant))
        return nt_fail(err, NEMOTRON_ERR_ARG, "synth: the mix must be default, q8_2f or bf16");
    int layers = (int)strlen(sh->pattern);
    char cfg_text[4096];
    snprintf(cfg_text, sizeof cfg_text, NANO_CONFIG, sh->vocab, layers, sh->pattern, sh->experts);
    struct nt_config cfg;
    nemotron_status st = nt_config_parse(cfg_text, strlen(cfg_text), sh->name, &cfg, err);
    if (st) return st;

    struct synth s = {.err = err, .quant = p->quant, .seed = p->seed, .progress = p->progress,
                      .progress_ctx = p->progress_ctx};
    s.threads = p->n_threads > 0 ? p->n_threads : omp_get_num_procs();
    if ((st = nt_weights_list(&cfg, on_tensor, &s, err))) goto out;
    if (s.failed) { st = nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory listing the tensors"); goto out; }
    s.buf = nt_alloc(CHUNK_BYTES);
    if (!s.buf) { st = nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory for the write buffer"); goto out; }

    char seed_text[32], gen[] = "{\"bos_token_id\": 1, \"eos_token_id\": [2, 11], \"pad_token_id\": 0}\n";
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)p->seed);
    if ((st = nt_nemo_writer_new(&s.w, dst, NULL, err))) goto out;
    if (!st) st = nt_nemo_writer_meta(s.w, "nemotron.synthetic", sh->name, err);
    if (!st) st = nt_nemo_writer_meta(s.w, "nemotron.seed", seed_text, err);
    if (!st) st = nt_nemo_writer_meta(s.w, "nemotron.quant", nt_quant_name(p->quant), err);
    if (!st) st = nt_nemo_writer_declare_file(s.w, "config.json", cfg_text, strlen(cfg_text), err);
    if (!st) st = nt_nemo_writer_declare_file(s.w, "generation_config.json", gen, strlen(gen), err);
    for (int i = 0; i < s.n && !st; i++) {
        const struct tensor *t = &s.t[i];
        int packed = t->to == NT_DTYPE_Q8_2F || t->to == NT_DTYPE_Q4TP;
        int64_t rc[2] = {t->rows, t->cols};
        st = nt_nemo_writer_declare(s.w, t->name, t->to, packed ? 2 : t->ndim, packed ? rc : t->shape, err);
        s.total += nt_matrix_bytes(t->to, t->rows, t->cols);
    }
    if (!st) st = nt_nemo_writer_begin(s.w, err);
    for (int i = 0; i < s.n && !st; i++) {
        switch (s.t[i].to) {
        case NT_DTYPE_Q8_2F: st = write_q8(&s, i); break;
        case NT_DTYPE_Q4TP: st = write_q4(&s, i); break;
        default: st = write_float(&s, i, cfg.conv_kernel); break;
        }
    }
    if (!st) st = nt_nemo_writer_commit(s.w, err);
out:
    nt_nemo_writer_free(s.w);
    nt_free(s.buf);
    nt_free(s.t);
    return st;
}

nemotron_status nemotron_synth(const char *shape, const char *dst, const nemotron_synth_params *params,
                               char *errbuf, size_t errlen) {
    struct nt_err err = {{0}};
    nemotron_synth_params defaults = nemotron_synth_default_params();
    nemotron_status st = NEMOTRON_OK;
    const struct shape *sh = NULL;
    for (int i = 0; shape && i < N_SHAPES; i++)
        if (!strcmp(shape, shapes[i].name)) sh = &shapes[i];
    if (!shape || !dst) {
        st = nt_fail(&err, NEMOTRON_ERR_ARG, "synth: %s is NULL", shape ? "dst" : "shape");
    } else if (!sh) {
        char names[512] = "";
        for (int i = 0; i < N_SHAPES; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", shapes[i].name);
        st = nt_fail(&err, NEMOTRON_ERR_ARG, "synth: unknown shape '%s' (known: %s)", shape, names);
    } else {
        st = synth(sh, dst, params ? params : &defaults, &err);
    }
    if (errbuf && errlen) snprintf(errbuf, errlen, "%s", st ? err.msg : "");
    return st;
}
