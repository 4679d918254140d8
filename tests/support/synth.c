/* synth.c - the writer of random Nemotron-H model directories declared in synth.h.
 *
 * Three steps: list the tensors the shape implies (the same walk as src/model/weights.c, in
 * its order), lay them out (shard, data_offsets), then write each file header first and data
 * after, generated chunk by chunk. The list is the only thing held in memory: a few hundred
 * bytes per tensor. Every value comes from a splitmix64 stream seeded by (seed, tensor name).
 */
#include "synth.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor data is generated and written in pieces of this many bytes: small enough to stay in
 * cache, large enough that fwrite overhead does not matter. */
#define SYNTH_CHUNK (1u << 20)

/* ------------------------------------------------------------------------------------------
 * Named shapes
 */

/* tiny: every block kind once or twice, small enough that a load + a few positions take
 * milliseconds. Mamba: I = 8 x 8 = 64, G x N = 2 x 16, conv width 64 + 64 = 128, in_proj rows
 * 64 + 128 + 8 = 200. Attention: 4 q heads, 2 kv heads, head_dim 16. */
static const struct synth_shape shape_tiny = {
    .name = "tiny",
    .vocab_size = 256,
    .hidden_size = 64,
    .pattern = "M*-EM*E",
    .num_attention_heads = 4,
    .num_key_value_heads = 2,
    .head_dim = 16,
    .intermediate_size = 96,
    .mamba_num_heads = 8,
    .mamba_head_dim = 8,
    .ssm_state_size = 16,
    .n_groups = 2,
    .conv_kernel = 4,
    .n_routed_experts = 8,
    .num_experts_per_tok = 2,
    .moe_intermediate_size = 32,
    .moe_shared_expert_intermediate_size = 48,
    .moe_latent_size = 0,
    .n_group = 1,
    .topk_group = 1,
    .norm_topk_prob = 1,
    .routed_scaling_factor = 1.0f,
    .tie_word_embeddings = 0,
    .mlp_bias = 0,
    .use_bias = 0,
    .use_conv_bias = 1,
    .mtp_pattern = NULL,
    .eos_token_id = 2,
};

/* bench-300m: Nemotron-3-Nano proportions (MODEL.md 1.3) scaled down, every block kind.
 *   hidden 1024, vocab 16384, 15 layers "MEM*EMEM-EMEM*E" = 6 Mamba, 6 MoE, 2 attention, 1 MLP
 *   (Nano: 23 / 23 / 6 / 0 of 52);
 *   Mamba 16 heads x 64 (I = 1024), N 64, 4 groups, K 4: in_proj [2576, 1024];
 *   attention 8 q heads / 2 kv heads x 128 (GQA 4);
 *   MoE 32 experts, top-4, mi 256, shared si 1024, scale 2.5, no latent; dense MLP 2048.
 * In bf16: embeddings and lm_head 33.6 MB each, a Mamba layer 7.4 MB, an attention layer
 * 5.2 MB, the MLP 8.4 MB, a MoE layer 37.8 MB (32 experts of 1.05 MB + shared 4.2 MB):
 * 357 MB in all. Active per token (4 of 32 experts): ~148 MB. mi 256 rather than Nano's
 * mi ~ 0.7 x hidden keeps six MoE layers inside a ~350 MB file; an expert matrix is still
 * 512 KB, large enough to be read as a stream. */
static const struct synth_shape shape_bench_300m = {
    .name = "bench-300m",
    .vocab_size = 16384,
    .hidden_size = 1024,
    .pattern = "MEM*EMEM-EMEM*E",
    .num_attention_heads = 8,
    .num_key_value_heads = 2,
    .head_dim = 128,
    .intermediate_size = 2048,
    .mamba_num_heads = 16,
    .mamba_head_dim = 64,
    .ssm_state_size = 64,
    .n_groups = 4,
    .conv_kernel = 4,
    .n_routed_experts = 32,
    .num_experts_per_tok = 4,
    .moe_intermediate_size = 256,
    .moe_shared_expert_intermediate_size = 1024,
    .moe_latent_size = 0,
    .n_group = 1,
    .topk_group = 1,
    .norm_topk_prob = 1,
    .routed_scaling_factor = 2.5f,
    .tie_word_embeddings = 0,
    .mlp_bias = 0,
    .use_bias = 0,
    .use_conv_bias = 1,
    .mtp_pattern = NULL,
    .eos_token_id = 2,
};

int synth_shape_get(const char *name, struct synth_shape *out) {
    if (!name) return -1;
    if (!strcmp(name, "tiny")) {
        *out = shape_tiny;
        return 0;
    }
    if (!strcmp(name, "tiny-mtp")) {
        /* Super's features on tiny: latent MoE, MTP "*E", every bias, grouped routing
         * (8 experts in 2 groups, 1 group kept, top-2). */
        *out = shape_tiny;
        out->name = "tiny-mtp";
        out->moe_latent_size = 24;
        out->mtp_pattern = "*E";
        out->mlp_bias = 1;
        out->use_bias = 1;
        out->n_group = 2;
        out->topk_group = 1;
        out->routed_scaling_factor = 2.5f;
        return 0;
    }
    if (!strcmp(name, "tiny-tied")) {
        *out = shape_tiny;
        out->name = "tiny-tied";
        out->tie_word_embeddings = 1;
        return 0;
    }
    if (!strcmp(name, "bench-300m")) {
        *out = shape_bench_300m;
        return 0;
    }
    return -1;
}

const char *synth_shape_names(void) { return "tiny, tiny-mtp, tiny-tied, bench-300m"; }

int synth_dtype_parse(const char *s, enum synth_dtype *out) {
    if (!s) return -1;
    if (!strcasecmp(s, "f32") || !strcasecmp(s, "float32")) *out = SYNTH_F32;
    else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = SYNTH_BF16;
    else if (!strcasecmp(s, "f16") || !strcasecmp(s, "float16")) *out = SYNTH_F16;
    else return -1;
    return 0;
}

struct synth_options synth_default_options(void) {
    struct synth_options o;
    memset(&o, 0, sizeof o);
    o.dtype = SYNTH_F32;
    o.seed = 1;
    o.n_shards = 1;
    return o;
}

/* ------------------------------------------------------------------------------------------
 * Random numbers and number formats
 */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* [0, 1) with 24 bits: exact in a float. */
static double uniform01(uint64_t *state) { return (double)(splitmix64(state) >> 40) * 0x1p-24; }

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Round to nearest even. The values written are finite, so no NaN case is needed, but one is
 * kept quiet anyway. */
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* Round to nearest even, with subnormals and overflow to infinity. */
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, au = u & 0x7fffffffu;
    if (au > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (au >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* rounds to >= 65520: inf */
    if (au < 0x38800000u) {                                        /* below 2^-14: subnormal */
        if (au < 0x33000000u) return (uint16_t)sign;               /* below 2^-25: zero */
        uint32_t m = (au & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(au >> 23);                         /* to units of 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((au >> 13) - (112u << 10));                      /* rebias 127 -> 15 */
    uint32_t rem = au & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

/* ------------------------------------------------------------------------------------------
 * The tensor list
 */

enum init {
    INIT_MATRIX,      /* uniform, std = scale (1/sqrt(cols)) */
    INIT_NORM,        /* 1 + U(-0.1, 0.1): RMSNorm weights, D */
    INIT_A_LOG,       /* log U[1, 16] (HF init): A = -exp(A_log) in [-16, -1] */
    INIT_DT_BIAS,     /* softplus^-1(dt), dt log-uniform in [time_step_min, time_step_max] */
    INIT_BIAS,        /* U(-0.02, 0.02) */
    INIT_ROUTER_BIAS, /* U(-0.01, 0.01): e_score_correction_bias */
    INIT_RAW          /* random bytes: a non-float dtype */
};

/* HF's defaults, which the generated config writes (dt_bias is drawn from this range). */
#define TIME_STEP_MIN 0.001
#define TIME_STEP_MAX 0.1
#define TIME_STEP_FLOOR 1e-4

struct tspec {
    char *name;
    char dtype[12];   /* safetensors name */
    int esize;        /* bytes per element */
    int is_float;     /* F32/F16/BF16: generated as floats */
    enum synth_dtype fdtype;
    int ndim;
    int64_t dims[4];
    enum init init;
    double scale;
    int shard;
    uint64_t begin, end;  /* data_offsets as written to the data section */
    uint64_t hbegin;      /* as stated in the header (differs only for `overlap`) */
};

struct tlist {
    struct tspec *t;
    int n, cap;
    int failed;           /* out of memory */
};

static const char *float_dtype_name(enum synth_dtype d) {
    return d == SYNTH_F32 ? "F32" : d == SYNTH_BF16 ? "BF16" : "F16";
}

static int float_dtype_size(enum synth_dtype d) { return d == SYNTH_F32 ? 4 : 2; }

static void add(struct tlist *l, enum synth_dtype dtype, enum init init, double scale, int ndim,
                const int64_t *dims, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add(struct tlist *l, enum synth_dtype dtype, enum init init, double scale, int ndim,
                const int64_t *dims, const char *fmt, ...) {
    if (l->failed) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        struct tspec *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (!t) {
            l->failed = 1;
            return;
        }
        l->t = t;
        l->cap = cap;
    }
    struct tspec *s = &l->t[l->n];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s->name, fmt, ap) < 0) {
        va_end(ap);
        l->failed = 1;
        return;
    }
    va_end(ap);
    snprintf(s->dtype, sizeof s->dtype, "%s", float_dtype_name(dtype));
    s->esize = float_dtype_size(dtype);
    s->is_float = 1;
    s->fdtype = dtype;
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++) s->dims[i] = dims[i];
    s->init = init;
    s->scale = scale;
    l->n++;
}

static void add_matrix(struct tlist *l, enum synth_dtype d, int64_t rows, int64_t cols,
                       const char *prefix, const char *name) {
    int64_t dims[2] = {rows, cols};
    add(l, d, INIT_MATRIX, 1.0 / sqrt((double)cols), 2, dims, "%s%s", prefix, name);
}

static void add_vec(struct tlist *l, enum synth_dtype d, enum init init, int64_t n,
                    const char *prefix, const char *name) {
    add(l, d, init, 0, 1, &n, "%s%s", prefix, name);
}

static void list_mlp(struct tlist *l, const struct synth_shape *s, enum synth_dtype d,
                     int64_t in, int64_t inner, int64_t out, const char *p) {
    add_matrix(l, d, inner, in, p, "up_proj.weight");
    add_matrix(l, d, out, inner, p, "down_proj.weight");
    if (s->mlp_bias) {
        add_vec(l, d, INIT_BIAS, inner, p, "up_proj.bias");
        add_vec(l, d, INIT_BIAS, out, p, "down_proj.bias");
    }
}

/* One block under prefix p ("backbone.layers.3."), in weights.c's order. */
static void list_layer(struct tlist *l, const struct synth_shape *s, enum synth_dtype d,
                       char kind, const char *p) {
    int64_t H = s->hidden_size;
    char q[256];
    add_vec(l, d, INIT_NORM, H, p, "norm.weight");
    snprintf(q, sizeof q, "%smixer.", p);
    switch (kind) {
    case 'M': {
        int64_t nh = s->mamba_num_heads, I = nh * s->mamba_head_dim;
        int64_t CD = I + 2 * (int64_t)s->n_groups * s->ssm_state_size;
        add_matrix(l, d, I + CD + nh, H, q, "in_proj.weight");
        add_matrix(l, d, H, I, q, "out_proj.weight");
        if (s->use_bias) {
            add_vec(l, d, INIT_BIAS, I + CD + nh, q, "in_proj.bias");
            add_vec(l, d, INIT_BIAS, H, q, "out_proj.bias");
        }
        /* depthwise conv: fan-in K, std 1/sqrt(K) */
        int64_t conv[3] = {CD, 1, s->conv_kernel};
        add(l, d, INIT_MATRIX, 1.0 / sqrt((double)s->conv_kernel), 3, conv, "%sconv1d.weight", q);
        if (s->use_conv_bias) add_vec(l, d, INIT_BIAS, CD, q, "conv1d.bias");
        add_vec(l, d, INIT_DT_BIAS, nh, q, "dt_bias");
        add_vec(l, d, INIT_A_LOG, nh, q, "A_log");
        add_vec(l, d, INIT_NORM, nh, q, "D");
        add_vec(l, d, INIT_NORM, I, q, "norm.weight");
        break;
    }
    case '*': {
        int64_t nq = (int64_t)s->num_attention_heads * s->head_dim;
        int64_t nkv = (int64_t)s->num_key_value_heads * s->head_dim;
        add_matrix(l, d, nq, H, q, "q_proj.weight");
        add_matrix(l, d, nkv, H, q, "k_proj.weight");
        add_matrix(l, d, nkv, H, q, "v_proj.weight");
        add_matrix(l, d, H, nq, q, "o_proj.weight");
        break;
    }
    case '-': list_mlp(l, s, d, H, s->intermediate_size, H, q); break;
    case 'E': {
        int64_t E = s->n_routed_experts, mi = s->moe_intermediate_size;
        int64_t L = s->moe_latent_size > 0 ? s->moe_latent_size : H;
        add_matrix(l, d, E, H, q, "gate.weight");
        /* F32 in NVIDIA checkpoints, and HF keeps it in fp32 (MODEL.md 2.1) */
        add_vec(l, SYNTH_F32, INIT_ROUTER_BIAS, E, q, "gate.e_score_correction_bias");
        for (int64_t j = 0; j < E; j++) {
            char e[288];
            snprintf(e, sizeof e, "%sexperts.%lld.", q, (long long)j);
            add_matrix(l, d, mi, L, e, "up_proj.weight");
            add_matrix(l, d, L, mi, e, "down_proj.weight");
        }
        char sp[288];
        snprintf(sp, sizeof sp, "%sshared_experts.", q);
        list_mlp(l, s, d, H, s->moe_shared_expert_intermediate_size, H, sp);
        if (s->moe_latent_size > 0) {
            add_matrix(l, d, L, H, q, "fc1_latent_proj.weight");
            add_matrix(l, d, H, L, q, "fc2_latent_proj.weight");
            if (s->mlp_bias) {
                add_vec(l, d, INIT_BIAS, L, q, "fc1_latent_proj.bias");
                add_vec(l, d, INIT_BIAS, H, q, "fc2_latent_proj.bias");
            }
        }
        break;
    }
    }
}

static void list_model(struct tlist *l, const struct synth_shape *s, enum synth_dtype d) {
    int64_t H = s->hidden_size, V = s->vocab_size;
    char p[64];
    add_matrix(l, d, V, H, "", "backbone.embeddings.weight");
    for (int i = 0; s->pattern[i]; i++) {
        snprintf(p, sizeof p, "backbone.layers.%d.", i);
        list_layer(l, s, d, s->pattern[i], p);
    }
    add_vec(l, d, INIT_NORM, H, "", "backbone.norm_f.weight");
    if (!s->tie_word_embeddings) add_matrix(l, d, V, H, "", "lm_head.weight");
    if (s->mtp_pattern && s->mtp_pattern[0]) {
        int n = (int)strlen(s->mtp_pattern);
        add_vec(l, d, INIT_NORM, H, "", "mtp.layers.0.enorm.weight");
        add_vec(l, d, INIT_NORM, H, "", "mtp.layers.0.hnorm.weight");
        add_matrix(l, d, H, 2 * H, "", "mtp.layers.0.eh_proj.weight");
        for (int i = 0; i < n; i++) {
            snprintf(p, sizeof p, "mtp.layers.%d.", i);
            list_layer(l, s, d, s->mtp_pattern[i], p);
        }
        snprintf(p, sizeof p, "mtp.layers.%d.", n - 1);
        add_vec(l, d, INIT_NORM, H, p, "final_layernorm.weight");
    }
}

static void free_list(struct tlist *l) {
    for (int i = 0; i < l->n; i++) free(l->t[i].name);
    free(l->t);
    memset(l, 0, sizeof *l);
}

static int find(const struct tlist *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->t[i].name, name)) return i;
    return -1;
}

static uint64_t tensor_bytes(const struct tspec *t) {
    uint64_t n = (uint64_t)t->esize;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->dims[i];
    return n;
}

/* safetensors dtypes by name, with element sizes (the retype mutation may pick any). */
static const struct {
    const char *name;
    int size;
} st_dtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
                 {"F8_E4M3", 1}, {"F8_E5M2", 1}};

/* ------------------------------------------------------------------------------------------
 * Values
 */

static double draw(const struct tspec *t, uint64_t *state) {
    double u = uniform01(state);
    switch (t->init) {
    case INIT_MATRIX: return (2 * u - 1) * sqrt(3.0) * t->scale;
    case INIT_NORM: return 1 + 0.1 * (2 * u - 1);
    case INIT_A_LOG: return log(1 + 15 * u);
    case INIT_DT_BIAS: {
        double dt = exp(log(TIME_STEP_MIN) + u * (log(TIME_STEP_MAX) - log(TIME_STEP_MIN)));
        if (dt < TIME_STEP_FLOOR) dt = TIME_STEP_FLOOR;
        return dt + log(-expm1(-dt)); /* softplus^-1 */
    }
    case INIT_BIAS: return 0.02 * (2 * u - 1);
    case INIT_ROUTER_BIAS: return 0.01 * (2 * u - 1);
    case INIT_RAW: return 0;
    }
    return 0;
}

/* Generates and writes the tensor's data in chunks. */
static int write_data(FILE *f, const struct tspec *t, uint64_t seed, unsigned char *buf) {
    uint64_t state = seed ^ fnv1a(t->name);
    splitmix64(&state); /* decorrelate nearby seeds */
    uint64_t left = tensor_bytes(t);
    while (left) {
        size_t n = left < SYNTH_CHUNK ? (size_t)left : SYNTH_CHUNK;
        if (t->is_float) {
            size_t count = n / (size_t)t->esize;
            for (size_t i = 0; i < count; i++) {
                float v = (float)draw(t, &state);
                if (t->fdtype == SYNTH_F32) {
                    memcpy(buf + 4 * i, &v, 4);
                } else {
                    uint16_t h = t->fdtype == SYNTH_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
                    buf[2 * i] = (unsigned char)(h & 0xff); /* little-endian */
                    buf[2 * i + 1] = (unsigned char)(h >> 8);
                }
            }
        } else {
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(splitmix64(&state) >> 56);
        }
        if (fwrite(buf, 1, n, f) != n) return -1;
        left -= n;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Text: a growable string, JSON escaping, float formatting
 */

struct str {
    char *s;
    size_t len, cap;
    int failed;
};

static void sputs(struct str *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sprintf_(struct str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sprintf_(struct str *b, const char *fmt, ...) {
    char *p;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    sputs(b, p, (size_t)n);
    free(p);
}

/* A JSON string literal of s. */
static void squote(struct str *b, const char *s) {
    sputs(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sputs(b, e, 2);
        } else if (c < 0x20) {
            sprintf_(b, "\\u%04x", c);
        } else {
            sputs(b, s, 1);
        }
    }
    sputs(b, "\"", 1);
}

/* A float as JSON, always with a '.' or an exponent, as Python writes floats. */
static char *json_float(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", v);
    if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
    return strdup(buf);
}

/* ------------------------------------------------------------------------------------------
 * config.json
 */

struct kv {
    char *key, *value;
};

struct kvlist {
    struct kv e[96 + SYNTH_MAX_EDITS];
    int n;
    int failed;
};

/* Takes ownership of value. */
static void kv_add(struct kvlist *l, const char *key, char *value) {
    if (!value || l->n == (int)(sizeof l->e / sizeof l->e[0])) {
        free(value);
        l->failed = 1;
        return;
    }
    l->e[l->n].key = strdup(key);
    l->e[l->n].value = value;
    if (!l->e[l->n].key) l->failed = 1;
    l->n++;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    char *p;
    va_list ap;
    va_start(ap, f);
    int n = vasprintf(&p, f, ap);
    va_end(ap);
    return n < 0 ? NULL : p;
}

static char *quoted(const char *s) {
    struct str b = {0};
    squote(&b, s);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static const char *torch_dtype(enum synth_dtype d) {
    return d == SYNTH_F32 ? "float32" : d == SYNTH_BF16 ? "bfloat16" : "float16";
}

/* The keys of a hub config (MODEL.md 1.3), in its order where it has one. */
static void config_keys(struct kvlist *l, const struct synth_shape *s, enum synth_dtype d) {
#define B(x) strdup((x) ? "true" : "false")
    int mtp = s->mtp_pattern && s->mtp_pattern[0];
    kv_add(l, "architectures", strdup("[\"NemotronHForCausalLM\"]"));
    kv_add(l, "model_type", strdup("\"nemotron_h\""));
    kv_add(l, "vocab_size", fmt("%d", s->vocab_size));
    kv_add(l, "hidden_size", fmt("%d", s->hidden_size));
    kv_add(l, "num_hidden_layers", fmt("%d", (int)strlen(s->pattern)));
    kv_add(l, "hybrid_override_pattern", quoted(s->pattern));
    kv_add(l, "num_attention_heads", fmt("%d", s->num_attention_heads));
    kv_add(l, "num_key_value_heads", fmt("%d", s->num_key_value_heads));
    kv_add(l, "head_dim", fmt("%d", s->head_dim));
    kv_add(l, "attention_bias", strdup("false"));
    kv_add(l, "attention_dropout", strdup("0.0"));
    kv_add(l, "sliding_window", strdup("null"));
    kv_add(l, "max_position_embeddings", strdup("4096"));
    kv_add(l, "mamba_num_heads", fmt("%d", s->mamba_num_heads));
    kv_add(l, "mamba_head_dim", fmt("%d", s->mamba_head_dim));
    kv_add(l, "ssm_state_size", fmt("%d", s->ssm_state_size));
    kv_add(l, "n_groups", fmt("%d", s->n_groups));
    kv_add(l, "conv_kernel", fmt("%d", s->conv_kernel));
    kv_add(l, "chunk_size", strdup("128"));
    kv_add(l, "expand", strdup("2"));
    kv_add(l, "use_conv_bias", B(s->use_conv_bias));
    kv_add(l, "use_bias", B(s->use_bias));
    kv_add(l, "mamba_proj_bias", strdup("false"));
    kv_add(l, "mamba_hidden_act", strdup("\"silu\""));
    kv_add(l, "mamba_ssm_cache_dtype", strdup("\"float32\""));
    kv_add(l, "time_step_min", json_float(TIME_STEP_MIN));
    kv_add(l, "time_step_max", json_float(TIME_STEP_MAX));
    kv_add(l, "time_step_floor", json_float(TIME_STEP_FLOOR));
    /* as transformers 5.17 saves it (MODEL.md 1.2, "JSON quirk") */
    kv_add(l, "time_step_limit", strdup("[0.0, {\"__float__\": \"Infinity\"}]"));
    kv_add(l, "intermediate_size", fmt("%d", s->intermediate_size));
    kv_add(l, "mlp_hidden_act", strdup("\"relu2\""));
    kv_add(l, "mlp_bias", B(s->mlp_bias));
    kv_add(l, "n_routed_experts", fmt("%d", s->n_routed_experts));
    kv_add(l, "num_experts_per_tok", fmt("%d", s->num_experts_per_tok));
    kv_add(l, "moe_intermediate_size", fmt("%d", s->moe_intermediate_size));
    kv_add(l, "n_shared_experts", strdup("1"));
    kv_add(l, "moe_shared_expert_intermediate_size",
           fmt("%d", s->moe_shared_expert_intermediate_size));
    kv_add(l, "moe_latent_size",
           s->moe_latent_size > 0 ? fmt("%d", s->moe_latent_size) : strdup("null"));
    kv_add(l, "moe_shared_expert_overlap", strdup("true"));
    kv_add(l, "n_group", fmt("%d", s->n_group));
    kv_add(l, "topk_group", fmt("%d", s->topk_group));
    kv_add(l, "norm_topk_prob", B(s->norm_topk_prob));
    kv_add(l, "routed_scaling_factor", json_float(s->routed_scaling_factor));
    kv_add(l, "num_nextn_predict_layers", strdup(mtp ? "1" : "0"));
    if (mtp) kv_add(l, "mtp_hybrid_override_pattern", quoted(s->mtp_pattern));
    kv_add(l, "layer_norm_epsilon", strdup("1e-05"));
    kv_add(l, "norm_eps", strdup("1e-05"));
    kv_add(l, "residual_in_fp32", strdup("false"));
    kv_add(l, "rescale_prenorm_residual", strdup("true"));
    kv_add(l, "initializer_range", strdup("0.02"));
    kv_add(l, "hidden_dropout", strdup("0.0"));
    kv_add(l, "tie_word_embeddings", B(s->tie_word_embeddings));
    kv_add(l, "bos_token_id", strdup("1"));
    kv_add(l, "eos_token_id", fmt("%d", s->eos_token_id));
    kv_add(l, "pad_token_id", strdup("0"));
    kv_add(l, "num_logits_to_keep", strdup("1"));
    kv_add(l, "use_cache", strdup("true"));
    kv_add(l, "use_mamba_kernels", strdup("true"));
    kv_add(l, "torch_dtype", fmt("\"%s\"", torch_dtype(d)));
#undef B
}

static void config_edit(struct kvlist *l, const struct synth_config_edit *e) {
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->e[i].key, e->key) != 0) continue;
        free(l->e[i].value);
        if (e->value) {
            l->e[i].value = strdup(e->value);
            if (!l->e[i].value) l->failed = 1;
        } else {
            free(l->e[i].key);
            memmove(&l->e[i], &l->e[i + 1], (size_t)(l->n - i - 1) * sizeof l->e[0]);
            l->n--;
        }
        return;
    }
    if (e->value) kv_add(l, e->key, strdup(e->value));
}

/* ------------------------------------------------------------------------------------------
 * Files
 */

static int fail(struct synth_result *r, const char *f, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct synth_result *r, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    vsnprintf(r->err, sizeof r->err, f, ap);
    va_end(ap);
    return -1;
}

static char *join(const char *dir, const char *name) { return fmt("%s/%s", dir, name); }

/* Writes text to dir/name; adds its size to r->bytes. */
static int write_text(const char *dir, const char *name, const char *text, size_t len,
                      struct synth_result *r) {
    char *path = join(dir, name);
    if (!path) return fail(r, "out of memory");
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(path);
        return fail(r, "%s/%s: %s", dir, name, strerror(e));
    }
    int ok = fwrite(text, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    free(path);
    if (!ok) return fail(r, "%s/%s: write failed", dir, name);
    r->bytes += len;
    return 0;
}

static int write_config(const char *dir, const struct synth_shape *s,
                        const struct synth_options *o, struct synth_result *r) {
    char *path = join(dir, "config.json");
    if (!path) return fail(r, "out of memory");
    unlink(path); /* no stale one may remain when none is written */
    free(path);
    if (o->no_config) return 0;
    if (o->config_text) return write_text(dir, "config.json", o->config_text, strlen(o->config_text), r);

    struct kvlist *l = calloc(1, sizeof *l);
    if (!l) return fail(r, "out of memory");
    config_keys(l, s, o->dtype);
    for (int i = 0; i < SYNTH_MAX_EDITS && o->config_edit[i].key; i++) config_edit(l, &o->config_edit[i]);
    struct str b = {0};
    sputs(&b, "{\n", 2);
    for (int i = 0; i < l->n; i++) {
        sputs(&b, "  ", 2);
        squote(&b, l->e[i].key);
        sprintf_(&b, ": %s%s\n", l->e[i].value, i + 1 < l->n ? "," : "");
    }
    sputs(&b, "}\n", 2);
    int rc = l->failed || b.failed ? fail(r, "out of memory")
                                   : write_text(dir, "config.json", b.s, b.len, r);
    for (int i = 0; i < l->n; i++) {
        free(l->e[i].key);
        free(l->e[i].value);
    }
    free(l);
    free(b.s);
    return rc;
}

static char *shard_name(int i, int n) {
    if (n <= 1) return strdup("model.safetensors");
    return fmt("model-%05d-of-%05d.safetensors", i + 1, n);
}

/* The header of shard `shard`: its tensors with their stated offsets, padded with spaces to
 * a multiple of 8 bytes (as the safetensors writer does, so the data section is aligned). */
static int header_text(const struct tlist *l, int shard, struct str *b) {
    sputs(b, "{\"__metadata__\":{\"format\":\"pt\"}", strlen("{\"__metadata__\":{\"format\":\"pt\"}"));
    for (int i = 0; i < l->n; i++) {
        const struct tspec *t = &l->t[i];
        if (t->shard != shard) continue;
        sputs(b, ",", 1);
        squote(b, t->name);
        sprintf_(b, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int k = 0; k < t->ndim; k++) sprintf_(b, "%s%lld", k ? "," : "", (long long)t->dims[k]);
        sprintf_(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->hbegin,
                 (unsigned long long)(t->hbegin + (t->end - t->begin)));
    }
    sputs(b, "}", 1);
    while (b->len % 8) sputs(b, " ", 1);
    return b->failed ? -1 : 0;
}

static int write_shard(const char *dir, const struct tlist *l, int shard, int n_shards,
                       uint64_t seed, unsigned char *buf, struct synth_result *r, char **path_out) {
    char *name = shard_name(shard, n_shards);
    char *path = name ? join(dir, name) : NULL;
    free(name);
    if (!path) return fail(r, "out of memory");
    struct str h = {0};
    if (header_text(l, shard, &h)) {
        free(h.s);
        free(path);
        return fail(r, "out of memory");
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(h.s);
        fail(r, "%s: %s", path, strerror(e));
        free(path);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.s, 1, h.len, f) == h.len;
    uint64_t size = 8 + h.len;
    for (int i = 0; ok && i < l->n; i++) {
        if (l->t[i].shard != shard) continue;
        ok = write_data(f, &l->t[i], seed, buf) == 0;
        size += l->t[i].end - l->t[i].begin;
    }
    ok = (fclose(f) == 0) && ok;
    free(h.s);
    if (!ok) {
        fail(r, "%s: write failed: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    r->bytes += size;
    *path_out = path;
    return 0;
}

static int write_index(const char *dir, const struct tlist *l, int n_shards, uint64_t total,
                       struct synth_result *r) {
    struct str b = {0};
    sprintf_(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
             (unsigned long long)total);
    for (int i = 0; i < l->n; i++) {
        char *name = shard_name(l->t[i].shard, n_shards);
        if (!name) {
            b.failed = 1;
            break;
        }
        sputs(&b, "    ", 4);
        squote(&b, l->t[i].name);
        sputs(&b, ": ", 2);
        squote(&b, name);
        sputs(&b, i + 1 < l->n ? ",\n" : "\n", i + 1 < l->n ? 2 : 1);
        free(name);
    }
    sputs(&b, "  }\n}\n", 6);
    int rc = b.failed ? fail(r, "out of memory")
                      : write_text(dir, "model.safetensors.index.json", b.s, b.len, r);
    free(b.s);
    return rc;
}

/* Shards by size: a tensor goes to the shard its first byte falls in (of n equal parts of
 * the total), moving on one shard at a time and early enough that every shard gets at least
 * one tensor. */
static void assign_shards(struct tlist *l, int n) {
    uint64_t total = 0, at = 0;
    for (int i = 0; i < l->n; i++) total += tensor_bytes(&l->t[i]);
    int shard = 0;
    for (int i = 0; i < l->n; i++) {
        if (i > 0) { /* the current shard holds a tensor already */
            int want = total ? (int)((at * (uint64_t)n) / total) : 0;
            int tensors_left = l->n - i, shards_left = n - 1 - shard;
            if (want > shard || tensors_left <= shards_left) shard++;
        }
        l->t[i].shard = shard;
        at += tensor_bytes(&l->t[i]);
    }
}

/* Applies the tensor mutations to the list; -1 with a message when one names no tensor. */
static int mutate(struct tlist *l, const struct synth_options *o, struct synth_result *r) {
    for (int i = 0; i < SYNTH_MAX_EDITS && o->omit[i]; i++) {
        int k = find(l, o->omit[i]);
        if (k < 0) return fail(r, "omit: this shape has no tensor '%s'", o->omit[i]);
        free(l->t[k].name);
        memmove(&l->t[k], &l->t[k + 1], (size_t)(l->n - k - 1) * sizeof l->t[0]);
        l->n--;
    }
    if (o->reshape) {
        int k = find(l, o->reshape);
        if (k < 0) return fail(r, "reshape: this shape has no tensor '%s'", o->reshape);
        struct tspec *t = &l->t[k];
        if (o->reshape_ndim > 0) {
            if (o->reshape_ndim > 4) return fail(r, "reshape: at most 4 dimensions");
            t->ndim = o->reshape_ndim;
            for (int i = 0; i < t->ndim; i++) t->dims[i] = o->reshape_dims[i];
        } else {
            t->dims[0] += 1;
        }
    }
    if (o->retype) {
        int k = find(l, o->retype);
        if (k < 0) return fail(r, "retype: this shape has no tensor '%s'", o->retype);
        const char *dn = o->retype_dtype ? o->retype_dtype : "I32";
        size_t j = 0, nd = sizeof st_dtypes / sizeof st_dtypes[0];
        while (j < nd && strcmp(st_dtypes[j].name, dn)) j++;
        if (j == nd) return fail(r, "retype: unknown safetensors dtype '%s'", dn);
        struct tspec *t = &l->t[k];
        snprintf(t->dtype, sizeof t->dtype, "%s", dn);
        t->esize = st_dtypes[j].size;
        t->is_float = !strcmp(dn, "F32") || !strcmp(dn, "F16") || !strcmp(dn, "BF16");
        if (t->is_float) t->fdtype = !strcmp(dn, "F32") ? SYNTH_F32 : !strcmp(dn, "F16") ? SYNTH_F16 : SYNTH_BF16;
        else t->init = INIT_RAW;
    }
    for (int i = 0; i < SYNTH_MAX_EDITS && o->extra[i]; i++) {
        if (find(l, o->extra[i]) >= 0) return fail(r, "extra: tensor '%s' exists already", o->extra[i]);
        int64_t four = 4;
        add(l, SYNTH_F32, INIT_NORM, 0, 1, &four, "%s", o->extra[i]);
    }
    if (o->overlap && find(l, o->overlap) < 0)
        return fail(r, "overlap: this shape has no tensor '%s'", o->overlap);
    return l->failed ? fail(r, "out of memory") : 0;
}

int synth_write(const char *dir, const struct synth_shape *s, const struct synth_options *opt,
                struct synth_result *res) {
    struct synth_result scratch;
    struct synth_result *r = res ? res : &scratch;
    memset(r, 0, sizeof *r);
    struct synth_options defaults = synth_default_options();
    const struct synth_options *o = opt ? opt : &defaults;
    if (!dir || !s || !s->pattern || !s->pattern[0]) return fail(r, "no directory or no layer pattern");
    for (const char *c = s->pattern; *c; c++)
        if (!strchr("M*-E", *c)) return fail(r, "pattern \"%s\": unknown layer kind '%c'", s->pattern, *c);
    if (s->mtp_pattern)
        for (const char *c = s->mtp_pattern; *c; c++)
            if (!strchr("*E", *c)) return fail(r, "MTP pattern \"%s\": '%c' is not '*' or 'E'", s->mtp_pattern, *c);
    if (s->vocab_size < 1 || s->hidden_size < 1) return fail(r, "vocab_size and hidden_size must be >= 1");
    int n_shards = o->n_shards > 1 ? o->n_shards : 1;
    if (n_shards > 99999) return fail(r, "%d shards: at most 99999", n_shards);
    if (o->missing_shard && (n_shards < 2 || o->missing_shard > n_shards))
        return fail(r, "missing_shard %d: needs 2 or more shards and a shard number in 1..%d",
                    o->missing_shard, n_shards);

    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return fail(r, "%s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return fail(r, "%s: not a directory", dir);

    struct tlist l = {0};
    list_model(&l, s, o->dtype);
    int rc = l.failed ? fail(r, "out of memory") : mutate(&l, o, r);
    if (rc == 0 && l.n < n_shards) rc = fail(r, "%d tensors cannot fill %d shards", l.n, n_shards);
    unsigned char *buf = rc == 0 ? malloc(SYNTH_CHUNK) : NULL;
    if (rc == 0 && !buf) rc = fail(r, "out of memory");
    if (rc == 0) {
        assign_shards(&l, n_shards);
        /* offsets, per shard in list order */
        for (int sh = 0; sh < n_shards; sh++) {
            uint64_t at = 0;
            int prev = -1;
            for (int i = 0; i < l.n; i++) {
                struct tspec *t = &l.t[i];
                if (t->shard != sh) continue;
                t->begin = t->hbegin = at;
                t->end = at + tensor_bytes(t);
                at = t->end;
                if (o->overlap && !strcmp(t->name, o->overlap)) {
                    uint64_t pn = prev < 0 ? 0 : l.t[prev].end - l.t[prev].begin, n = t->end - t->begin;
                    uint64_t d = (pn < n ? pn : n) / 2;
                    if (d == 0) d = 1;
                    if (prev < 0 || pn == 0 || n == 0)
                        rc = fail(r, "overlap: tensor '%s' is the first non-empty one of its file",
                                  t->name);
                    else
                        t->hbegin = t->begin - d;
                }
                prev = i;
            }
        }
    }
    if (rc == 0) rc = write_config(dir, s, o, r);
    char *last_path = NULL;
    for (int sh = 0; rc == 0 && sh < n_shards; sh++) {
        char *path = NULL;
        if (o->missing_shard == sh + 1) {
            char *name = shard_name(sh, n_shards);
            path = name ? join(dir, name) : NULL;
            free(name);
            if (path) unlink(path);
            free(path);
            continue;
        }
        rc = write_shard(dir, &l, sh, n_shards, o->seed, buf, r, &path);
        if (rc == 0) {
            free(last_path);
            last_path = path;
        }
    }
    for (int i = 0; i < l.n; i++) r->weight_bytes += l.t[i].end - l.t[i].begin;
    if (rc == 0) {
        char *index = join(dir, "model.safetensors.index.json");
        if (!index) rc = fail(r, "out of memory");
        else if (n_shards > 1) rc = write_index(dir, &l, n_shards, r->weight_bytes, r);
        else unlink(index); /* a stale index would win over model.safetensors */
        free(index);
    }
    if (rc == 0 && o->truncate && last_path) {
        if (stat(last_path, &sb) != 0) rc = fail(r, "%s: %s", last_path, strerror(errno));
        else if (o->truncate > (uint64_t)sb.st_size)
            rc = fail(r, "truncate %llu: %s has only %lld bytes", (unsigned long long)o->truncate,
                      last_path, (long long)sb.st_size);
        else if (truncate(last_path, sb.st_size - (off_t)o->truncate) != 0)
            rc = fail(r, "%s: truncate: %s", last_path, strerror(errno));
        else r->bytes -= o->truncate;
    }
    r->n_tensors = l.n;
    free(last_path);
    free(buf);
    free_list(&l);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Temporary directories
 */

char *synth_mkdtemp(const char *prefix) {
    char *path = fmt("/tmp/%s.XXXXXX", prefix ? prefix : "synth");
    if (!path) return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

int synth_rmtree(const char *dir) {
    if (!dir) return -1;
    /* 16 file descriptors: the depth of what tests create is 2 */
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}
