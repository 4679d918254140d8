/* backend_cpu.c - the CPU backend: the reference implementation of every pass operation.
 *
 * Plain C over host memory; the weight products live in matmul.c, and the SIMD variants of the
 * other operations in ops_simd.c (the code here is their scalar reference, run for
 * NEMOTRON_CPU=scalar and for shapes the variants leave out; same bits). Every reduction runs in a
 * fixed order that depends only on the element being computed (a position's own context length
 * for attention), so a position's result never depends on the pass size. Threads (OpenMP) split
 * independent outputs — rows, channels, heads, positions — and never a reduction.
 * Memory is host memory; upload returns the mmap-ed bytes themselves (weights read in place).
 */
#include "cpu.h"
#include "stream_layout.h"
#include "team.h"
#include "../quant/quant.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>


struct cpu_backend {
    struct nt_backend base;
    int n_threads;            /* the most threads an operation uses (and per-thread scratch is for) */
    int isa;                  /* the kernel variant (cpu.h) */
    struct nt_cpu_team team;  /* the threads of each pass (team.c) */
    struct nt_cpu_stream_layouts layouts; /* the model's q8_2f projections for streaming */
};

static struct cpu_backend *cpu(struct nt_backend *be) { return (struct cpu_backend *)be; }

/* Threads for an operation of `work` elementary steps: forking costs a few microseconds, which
 * the small operations of a one-position pass do not repay. */
static int threads_for(struct nt_backend *be, uint64_t work) {
    return work < 32768 ? 1 : nt_cpu_team_threads(&cpu(be)->team);
}

static void destroy(struct nt_backend *be) {
    nt_cpu_team_destroy(&cpu(be)->team);
    nt_cpu_stream_layouts_free(&cpu(be)->layouts);
    nt_free(be);
}
/* Every model the loader accepts runs here. This is also where the backend first sees the model's
 * matrices (before upload, which keeps them in place), so it makes its streaming copies here
 * (stream_layout.c); a backend has one model. */
static nemotron_status check_model(struct nt_backend *be, const struct nt_forward *f, struct nt_err *err) {
    nt_cpu_stream_layouts_free(&cpu(be)->layouts);
    nt_cpu_stream_layouts_build(&cpu(be)->layouts, f, cpu(be)->isa, cpu(be)->n_threads);
    return NEMOTRON_OK;
}

static void *alloc(struct nt_backend *be, size_t bytes) { return nt_calloc(1, bytes ? bytes : 1); }
static void release(struct nt_backend *be, void *p) { nt_free(p); }
static const void *upload(struct nt_backend *be, const void *host, size_t bytes) { return host; }
static void to_host(struct nt_backend *be, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void zero(struct nt_backend *be, void *dst, size_t bytes) { memset(dst, 0, bytes); }
static void copy_resident(struct nt_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}
static void copy_many_resident(struct nt_backend *be, int n, const struct nt_copy *r) {
    for (int i = 0; i < n; i++) copy_resident(be, r[i].dst, r[i].src, r[i].bytes);
}
static void write_host(struct nt_backend *be, void *dst, const void *host, size_t bytes) {
    if (bytes) memcpy(dst, host, bytes);
}
static void begin_pass(struct nt_backend *be, const struct nt_pass *p) { nt_cpu_team_begin(&cpu(be)->team, p->n); }
static int end_pass(struct nt_backend *be, const struct nt_pass *p) {
    nt_cpu_team_end(&cpu(be)->team, p->n);
    return 1;
}

/* sum_i a[i] b[i] in a fixed order: eight lanes over i = l, l+8, ... (the compiler may run the
 * lanes as one vector; each lane's order is fixed either way), then a fixed tree, then the
 * tail. The order depends on n only, never on the pass. */
static float dot_f32(const float *restrict a, const float *restrict b, int n) {
    float acc[8] = {0};
    int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    float s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    for (int i = n8; i < n; i++) s += a[i] * b[i];
    return s;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* PyTorch's softplus: x itself above 20 (where log1p(exp(x)) == x in f32). */
static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void embed(struct nt_backend *be, const struct nt_pass *p, const struct nt_matrix *emb, float *h) {
    int H = (int)emb->cols;
    for (int t = 0; t < p->n; t++) {
        size_t row = (size_t)p->tokens[t] * (size_t)H;
        const uint8_t *base = emb->data;
        float *dst = h + (size_t)t * H;
        if (nt_dtype_is_ggml_block(emb->dtype)) { /* a GGUF table: the row decoded exactly */
            nt_matrix_dequant_row(emb->dtype, emb->data, emb->rows, emb->cols, p->tokens[t], dst);
            continue;
        }
        for (int c = 0; c < H; c++) {
            uint16_t v16;
            switch (emb->dtype) {
            case NT_DTYPE_BF16: memcpy(&v16, base + 2 * (row + c), 2); dst[c] = nt_bf16_to_f32(v16); break;
            case NT_DTYPE_F16: memcpy(&v16, base + 2 * (row + c), 2); dst[c] = nt_f16_to_f32(v16); break;
            default: memcpy(&dst[c], base + 4 * (row + c), 4); break;
            }
        }
    }
}

/* Positions normalized together: each position's sum of squares is one chain of dependent adds
 * (index order), so a lone position waits on the add's latency at every element; this many
 * independent chains side by side keep the adder busy (8: the add's latency times its issue
 * rate on current cores, and few enough registers for the scalar code). */
#define NORM_ROWS 8

/* y[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)) for rows r < nr <= NORM_ROWS (x and y rows
 * xs and ys floats apart), each row's sum of squares in index order. R > 0 is nr known at
 * compile time. */
static inline __attribute__((always_inline)) void norm_rows_r(const float *x, size_t xs, const float *w, int H,
                                                              float eps, float *y, size_t ys, int nr, const int R) {
    const int rows = R ? R : nr;
    float ss[NORM_ROWS] = {0};
    for (int i = 0; i < H; i++)
        for (int r = 0; r < rows; r++) ss[r] += x[r * xs + i] * x[r * xs + i];
    for (int r = 0; r < rows; r++) {
        float inv = 1.0f / sqrtf(ss[r] / (float)H + eps);
        for (int i = 0; i < H; i++) y[r * ys + i] = w[i] * (x[r * xs + i] * inv);
    }
}

static void norm_rows(const float *x, size_t xs, const float *w, int H, float eps, float *y, size_t ys, int nr) {
    if (nr == NORM_ROWS)
        norm_rows_r(x, xs, w, H, eps, y, ys, nr, NORM_ROWS);
    else
        norm_rows_r(x, xs, w, H, eps, y, ys, nr, 0);
}

static void rmsnorm(struct nt_backend *be, const struct nt_pass *p, const float *h, const float *w,
                    int H, float eps, float *y, int y_stride) {
    int blocks = (p->n + NORM_ROWS - 1) / NORM_ROWS;
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)p->n * H))
    for (int b = 0; b < blocks; b++) {
        int t = b * NORM_ROWS, nr = p->n - t < NORM_ROWS ? p->n - t : NORM_ROWS;
        norm_rows(h + (size_t)t * H, (size_t)H, w, H, eps, y + (size_t)t * y_stride, (size_t)y_stride, nr);
    }
}

static void add_rmsnorm(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o,
                        const float *o2, const float *w, int H, float eps, float *y) {
    int blocks = (p->n + NORM_ROWS - 1) / NORM_ROWS;
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)p->n * H))
    for (int b = 0; b < blocks; b++) {
        int t0 = b * NORM_ROWS, nr = p->n - t0 < NORM_ROWS ? p->n - t0 : NORM_ROWS;
        for (int t = t0; t < t0 + nr; t++) {
            float *ht = h + (size_t)t * H;
            const float *ot = o + (size_t)t * H, *o2t = o2 ? o2 + (size_t)t * H : NULL;
            if (o2t)
                for (int i = 0; i < H; i++) ht[i] = ht[i] + (ot[i] + o2t[i]);
            else
                for (int i = 0; i < H; i++) ht[i] = ht[i] + ot[i];
        }
        norm_rows(h + (size_t)t0 * H, (size_t)H, w, H, eps, y + (size_t)t0 * H, (size_t)H, nr);
    }
}

/* The pass scratch holds the quantized activations of one packed product at a time. */
static size_t pass_scratch_bytes(struct nt_backend *be, int64_t max_cols, int n) {
    return nt_cpu_qx_bytes(n, max_cols);
}

static void matmul(struct nt_backend *be, const struct nt_pass *p, int n, const struct nt_matrix *W,
                   const float *bias, enum nt_act act, const float *x, int x_stride, float *y,
                   int y_stride) {
    struct nt_mm m = {.W = W, .bias = bias, .act = act, .x = x, .x_stride = x_stride,
                      .y = y, .y_stride = y_stride, .n = n, .qx = p->scratch,
                      .stream = nt_cpu_stream_layout_of(&cpu(be)->layouts, W)};
    nt_cpu_matmul(&m, cpu(be)->isa, nt_cpu_team_threads(&cpu(be)->team));
}

/* Channel c of the conv over the pass: the scalar reference. */
static void conv_channel(const struct nt_cpu_conv *a, int c) {
    int K = a->K, CD = a->CD;
    const float *wc = a->w + (size_t)c * K;
    float r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K - 1; k++) r[k] = a->ring[(size_t)k * CD + c];
    for (int t = 0; t < a->n; t++) {
        /* a verify pass keeps the ring before each position: rolling back to t restores it */
        if (a->snap)
            for (int k = 0; k < K - 1; k++) a->snap[((size_t)t * (K - 1) + k) * CD + c] = r[k];
        float in = a->in[(size_t)t * a->in_stride + c];
        /* u = b + sum_k w[k] * x[t-K+1+k]: tap K-1 is the newest input */
        float acc = a->b ? a->b[c] : 0.0f;
        for (int k = 0; k < K - 1; k++) acc += wc[k] * r[k];
        acc += wc[K - 1] * in;
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
        a->out[(size_t)t * CD + c] = silu(acc);
    }
    for (int k = 0; k < K - 1; k++) a->ring[(size_t)k * CD + c] = r[k];
}

static void mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                       const struct nt_mamba_weights *w, const float *zxd, float *ring,
                       float *ring_snap, float *xbc) {
    struct nt_cpu_conv a = {.n = p->n, .K = d->K, .CD = d->CD, .w = w->conv_w, .b = w->conv_b,
                            .in = zxd + d->I, .in_stride = (size_t)d->zxd, .ring = ring,
                            .snap = p->snap ? ring_snap : NULL, .out = xbc};
    /* the SIMD variants take blocks of channels (one a lane), the scalar code the rest */
    int isa = cpu(be)->isa, lanes = isa >= NT_CPU_AVX2 ? nt_cpu_conv_lanes(isa) : 1;
    int blocks = isa >= NT_CPU_AVX2 ? d->CD / lanes : 0, c_rest = blocks * lanes;
    int items = blocks + (d->CD - c_rest);
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)p->n * d->CD * d->K))
    for (int i = 0; i < items; i++) {
        if (i < blocks)
            nt_cpu_conv_block(isa, &a, i * lanes);
        else
            conv_channel(&a, c_rest + (i - blocks));
    }
}

static void mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                       const struct nt_mamba_weights *w, const float *zxd, const float *xbc,
                       float *state, float *state_snap, float *y) {
    int nh = d->nh, P = d->P, N = d->N, G = d->G, I = d->I, CD = d->CD;
    int heads_per_group = nh / G;
    size_t state_floats = (size_t)nh * N * P;
    float *snap = p->snap ? state_snap : NULL;
    int isa = cpu(be)->isa, simd = isa >= NT_CPU_AVX2 && nt_cpu_scan_simd(isa, P);
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)p->n * nh * P * N))
    for (int h = 0; h < nh; h++) {
        int g = h / heads_per_group;
        float A = w->A[h];                     /* A = -exp(A_log), weights.h */
        float *restrict S = state + (size_t)h * N * P;  /* [N][P] */
        for (int t = 0; t < p->n; t++) {
            /* a verify pass keeps this head's state before each position (slot t) */
            if (snap) memcpy(snap + (size_t)t * state_floats + (size_t)h * N * P, S, (size_t)N * P * sizeof(float));
            const float *row = xbc + (size_t)t * CD;
            const float *restrict x = row + (size_t)h * P;
            const float *B = row + I + (size_t)g * N;
            const float *C = row + I + (size_t)G * N + (size_t)g * N;
            /* dt = clamp(softplus(dt_raw + dt_bias), time_step_limit): no floor (MODEL.md 3.3.6) */
            float dt = softplus(zxd[(size_t)t * d->zxd + I + CD + h] + w->dt_bias[h]);
            dt = fminf(fmaxf(dt, d->dt_lo), d->dt_hi);
            float dA = expf(dt * A);
            float *yt = y + (size_t)t * I + (size_t)h * P;
            if (simd) { /* the same arithmetic, vectorized over the head's dims */
                nt_cpu_scan_step(isa, S, x, B, C, N, P, dt, dA, w->D[h], yt);
                continue;
            }
            float acc[NT_MAX_HEAD_DIM];
            for (int q = 0; q < P; q++) acc[q] = 0.0f;
            for (int n = 0; n < N; n++) {
                float *restrict Sn = S + (size_t)n * P;
                float dtB = dt * B[n];
                /* S[p][n] = dA * S[p][n] + dt * x[p] * B[n];  y[p] += S[p][n] * C[n] */
                for (int q = 0; q < P; q++) {
                    Sn[q] = dA * Sn[q] + dtB * x[q];
                    acc[q] += Sn[q] * C[n];
                }
            }
            for (int q = 0; q < P; q++) yt[q] = acc[q] + w->D[h] * x[q];   /* + D x skip */
        }
    }
}

static void mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p,
                             const struct nt_mamba_dims *d, const struct nt_mamba_weights *w,
                             const float *y, const float *zxd, float *out) {
    int I = d->I, gs = d->I / d->G;
    int isa = cpu(be)->isa, simd = isa >= NT_CPU_AVX2 && gs % 8 == 0;
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)p->n * I))
    for (int t = 0; t < p->n; t++) {
        const float *yt = y + (size_t)t * I, *z = zxd + (size_t)t * d->zxd;
        float *o = out + (size_t)t * I;
        if (simd) { /* the same arithmetic, vectorized over a group's elements */
            for (int q = 0; q < d->G; q++)
                nt_cpu_gated_group(isa, yt + q * gs, z + q * gs, w->norm_w + q * gs, gs, d->eps, o + q * gs);
            continue;
        }
        for (int q = 0; q < d->G; q++) {
            /* norm(y * silu(z)) per group: the gate comes first (norm_before_gate = False) */
            float ss = 0.0f;
            for (int i = q * gs; i < (q + 1) * gs; i++) {
                o[i] = yt[i] * silu(z[i]);
                ss += o[i] * o[i];
            }
            float inv = 1.0f / sqrtf(ss / (float)gs + d->eps);
            for (int i = q * gs; i < (q + 1) * gs; i++) o[i] = w->norm_w[i] * (o[i] * inv);
        }
    }
}

static void attention(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d,
                      const float *q, const float *k, const float *v, float *k_cache,
                      float *v_cache, float *scratch, float *out) {
    (void)scratch; /* one chain per (position, head): nothing to keep between threads */
    int kvw = d->nkv * d->dh, qw = d->nq * d->dh, dh = d->dh, rep = d->nq / d->nkv;
    memcpy(k_cache + (size_t)p->pos0 * kvw, k, (size_t)p->n * kvw * sizeof(float));
    memcpy(v_cache + (size_t)p->pos0 * kvw, v, (size_t)p->n * kvw * sizeof(float));
    float scale = 1.0f / sqrtf((float)dh);
    int pairs = p->n * d->nq;
    uint64_t work = (uint64_t)pairs * (uint64_t)(p->pos0 + p->n) * (uint64_t)dh;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(be, work))
    for (int pj = 0; pj < pairs; pj++) {
        int t = pj / d->nq, j = pj % d->nq, kvh = j / rep, ctx = p->pos0 + t + 1;
        const float *qt = q + (size_t)t * qw + (size_t)j * dh;
        if (cpu(be)->isa >= NT_CPU_AVX2) { /* the same arithmetic, vectorized over the head dims */
            nt_cpu_attn_row(cpu(be)->isa, qt, k_cache + (size_t)kvh * dh, v_cache + (size_t)kvh * dh,
                            (size_t)kvw, ctx, dh, scale, out + (size_t)t * qw + (size_t)j * dh);
            continue;
        }
        /* online softmax over u = 0 .. ctx-1 in order: running max m, sum l, weighted sum o */
        float o[NT_MAX_HEAD_DIM], m = -INFINITY, l = 0.0f;
        for (int i = 0; i < dh; i++) o[i] = 0.0f;
        for (int u = 0; u < ctx; u++) {
            const float *ku = k_cache + (size_t)u * kvw + (size_t)kvh * dh;
            const float *vu = v_cache + (size_t)u * kvw + (size_t)kvh * dh;
            float s = dot_f32(qt, ku, dh) * scale;
            if (s > m) {
                float corr = expf(m - s);
                l *= corr;
                for (int i = 0; i < dh; i++) o[i] *= corr;
                m = s;
            }
            float e = expf(s - m);
            l += e;
            for (int i = 0; i < dh; i++) o[i] += e * vu[i];
        }
        float *ot = out + (size_t)t * qw + (size_t)j * dh;
        for (int i = 0; i < dh; i++) ot[i] = o[i] / l;
    }
}

static size_t attention_scratch_floats(struct nt_backend *be, const struct nt_attn_dims *d) {
    (void)be;
    (void)d;
    return 0;
}

/* Index of the largest v[i] among allowed ones; the lowest index wins a tie. */
static int pick_max(const float *v, const unsigned char *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

static void moe_route(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                      float *logits, const float *score_bias, int32_t *idx, float *wts) {
    int E = d->E, k = d->k;
    for (int t = 0; t < p->n; t++) {
        float *s = logits + (size_t)t * E;     /* becomes the sigmoid scores, in place */
        float sc[NT_MAX_EXPERTS];              /* biased scores: for the choice only */
        unsigned char taken[NT_MAX_EXPERTS];
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-s[e]));
            sc[e] = s[e] + score_bias[e];
            taken[e] = 0;
        }
        if (d->n_group > 1) {
            /* group score = sum of its 2 best biased scores; keep the topk_group best groups.
             * gs reuses the front of a stack array sized for the most groups (one per expert). */
            int per = E / d->n_group;
            float gs[NT_MAX_EXPERTS];
            unsigned char keep[NT_MAX_EXPERTS];
            for (int g = 0; g < d->n_group; g++) {
                /* per >= 2 is a config invariant, so both picks exist */
                const float *gsc = sc + g * per;
                unsigned char *gt = taken + g * per;
                int a = pick_max(gsc, gt, per);
                NT_ASSERT(a >= 0);
                gt[a] = 1;
                int b = pick_max(gsc, gt, per);
                NT_ASSERT(b >= 0);
                gt[a] = 0;
                gs[g] = gsc[a] + gsc[b];
                keep[g] = 0;
            }
            for (int i = 0; i < d->topk_group; i++) {
                int g = pick_max(gs, keep, d->n_group);
                NT_ASSERT(g >= 0);
                keep[g] = 1;
            }
            for (int e = 0; e < E; e++) taken[e] = !keep[e / per];   /* masked out: never picked */
        }
        float sum = 0.0f;
        for (int j = 0; j < k; j++) {
            int e = pick_max(sc, taken, E);
            NT_ASSERT(e >= 0);   /* k <= experts in the kept groups: a config invariant */
            taken[e] = 1;
            idx[(size_t)t * k + j] = e;
            wts[(size_t)t * k + j] = s[e];         /* weight from the unbiased score */
            sum += s[e];
        }
        for (int j = 0; j < k; j++) {
            float wj = wts[(size_t)t * k + j];
            if (d->norm_topk_prob) wj = wj / (sum + 1e-20f);
            wts[(size_t)t * k + j] = wj * d->routed_scaling_factor;
        }
    }
}

/* moe_experts' scratch: the per-(position, slot) outputs [n][k][L]; the entry lists (ints:
 * per-expert counts, starts and owners [E] each, entries [n*k]); and per thread the gathered
 * inputs [n][L], inner activations [n][mi] and outputs [n][L] of the expert it is running, and
 * the quantized activations of its packed products (64-byte aligned: 16 floats of slack). */
static size_t moe_qx_floats(const struct nt_moe_dims *d, int n) {
    size_t bytes = nt_cpu_qx_bytes(n, d->L > d->mi ? d->L : d->mi);
    return (bytes + sizeof(float) - 1) / sizeof(float) + 16;
}

static size_t moe_thread_floats(const struct nt_moe_dims *d, int n) {
    return (size_t)n * d->L + (size_t)n * d->mi + (size_t)n * d->L + moe_qx_floats(d, n);
}

static size_t moe_scratch_floats(struct nt_backend *be, const struct nt_moe_dims *d, int n) {
    return (size_t)n * d->k * d->L + 3 * (size_t)d->E + (size_t)n * d->k +
           (size_t)cpu(be)->n_threads * moe_thread_floats(d, n);
}

/* Expert e for its cnt entries (ts = t * k + slot), with the products split over `threads`
 * threads (1: on the calling thread alone). buf: moe_thread_floats floats. */
static void run_expert(struct nt_backend *be, const struct nt_moe_weights *w, const struct nt_moe_dims *d,
                       int e, const int32_t *entries, int cnt, const float *x, float *buf, float *eo,
                       int threads) {
    int L = d->L, mi = d->mi, k = d->k;
    float *gx = buf, *inner = gx + (size_t)cnt * L, *dout = inner + (size_t)cnt * mi;
    /* the per-thread area is sized for n entries; the quantized activations start after it */
    uintptr_t qa = (uintptr_t)(dout + (size_t)cnt * L);
    void *qx = (void *)((qa + 63) & ~(uintptr_t)63);
    for (int i = 0; i < cnt; i++)
        memcpy(gx + (size_t)i * L, x + (size_t)(entries[i] / k) * L, (size_t)L * sizeof(float));
    struct nt_mm up = {.W = &w->expert_up[e], .act = NT_ACT_RELU2, .x = gx, .x_stride = L,
                       .y = inner, .y_stride = mi, .n = cnt, .qx = qx};
    struct nt_mm down = {.W = &w->expert_down[e], .act = NT_ACT_NONE, .x = inner, .x_stride = mi,
                         .y = dout, .y_stride = L, .n = cnt, .qx = qx};
    int isa = cpu(be)->isa;
    if (threads == 1) {
        nt_cpu_quantize_x(&up, isa);
        nt_cpu_matmul_rows(&up, isa, 0, mi);
        nt_cpu_quantize_x(&down, isa);
        nt_cpu_matmul_rows(&down, isa, 0, L);
    } else {
        nt_cpu_matmul(&up, isa, threads);
        nt_cpu_matmul(&down, isa, threads);
    }
    for (int i = 0; i < cnt; i++)
        memcpy(eo + (size_t)entries[i] * L, dout + (size_t)i * L, (size_t)L * sizeof(float));
}

static void moe_experts(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                        const struct nt_moe_weights *w, const float *x, const int32_t *idx,
                        const float *wts, float *scratch, float *y) {
    int n = p->n, k = d->k, L = d->L, E = d->E, threads = nt_cpu_team_threads(&cpu(be)->team);
    float *eo = scratch;                                          /* [n][k][L] */
    int32_t *count = (int32_t *)(void *)(eo + (size_t)n * k * L); /* [E] */
    int32_t *start = count + E, *owner = start + E;               /* [E], [E] */
    int32_t *entries = owner + E;                                 /* [n*k], grouped by expert */
    float *bufs = (float *)(void *)(entries + (size_t)n * k);     /* threads x moe_thread_floats */
    size_t per_thread = moe_thread_floats(d, n);

    /* group the (position, slot) entries by expert, in position order within an expert */
    memset(count, 0, (size_t)E * sizeof *count);
    for (int ts = 0; ts < n * k; ts++) count[idx[ts]]++;
    int active = 0;
    for (int e = 0, at = 0; e < E; e++) {
        start[e] = at;
        at += count[e];
        active += count[e] > 0;
        count[e] = 0;
    }
    for (int ts = 0; ts < n * k; ts++) entries[start[idx[ts]] + count[idx[ts]]++] = ts;

    if (active >= threads && threads > 1) {
        /* whole experts per thread, each to the least-loaded thread so far (load = entries):
         * no fork per product. Which thread runs an expert never changes its arithmetic. */
        int64_t load[256] = {0};   /* threads <= 256 here; more would only split rows below */
        int nt = threads < 256 ? threads : 256;
        for (int e = 0; e < E; e++) {
            owner[e] = -1;
            if (!count[e]) continue;
            int best = 0;
            for (int t = 1; t < nt; t++)
                if (load[t] < load[best]) best = t;
            owner[e] = best;
            load[best] += count[e];
        }
#pragma omp parallel num_threads(nt)
        {
            /* the team may be smaller than asked (OMP_THREAD_LIMIT, nesting): fold the owners
             * onto it so every expert still runs exactly once */
            int me = omp_get_thread_num(), got = omp_get_num_threads();
            float *buf = bufs + (size_t)me * per_thread;
            for (int e = 0; e < E; e++)
                if (owner[e] >= 0 && owner[e] % got == me)
                    run_expert(be, w, d, e, entries + start[e], count[e], x, buf, eo, 1);
        }
    } else {
        /* fewer experts than threads: the rows of each product are split instead */
        for (int e = 0; e < E; e++)
            if (count[e]) run_expert(be, w, d, e, entries + start[e], count[e], x, bufs, eo, threads);
    }

    /* y[t][c] = 0 + the slots' w * out in slot order; the positions split over the team and each
     * slot's pass over c a vector loop (a position's chains are the same whoever runs them) */
#pragma omp parallel for num_threads(threads_for(be, (uint64_t)n * k * L))
    for (int t = 0; t < n; t++) {
        float *restrict yt = y + (size_t)t * L;
        for (int c = 0; c < L; c++) yt[c] = 0.0f;
        for (int s = 0; s < k; s++) {                     /* slot order */
            float ws = wts[(size_t)t * k + s];
            const float *restrict es = eo + ((size_t)t * k + s) * L;
            for (int c = 0; c < L; c++) yt[c] += ws * es[c];
        }
    }
}

static void argmax(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out) {
    for (int t = 0; t < n; t++) {
        const float *l = logits + (size_t)t * vocab;
        int best = 0, nonfinite = 0, unlike = 0;
        for (int i = 0; i < vocab; i++) {
            nonfinite |= !(fabsf(l[i]) <= FLT_MAX);
            unlike |= l[i] != l[0];
            if (l[i] > l[best]) best = i;
        }
        out[t] = nonfinite || (vocab > 1 && !unlike) ? -1 : best; /* degenerate: backend.h */
    }
}

static const struct nt_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = destroy,
    .check_model = check_model,
    .alloc = alloc,
    .release = release,
    .upload = upload,
    .to_host = to_host,
    .zero = zero,
    .copy = copy_resident,
    .copy_many = copy_many_resident,
    .write = write_host,
    .begin_pass = begin_pass,
    .end_pass = end_pass,
    .embed = embed,
    .rmsnorm = rmsnorm,
    .add_rmsnorm = add_rmsnorm,
    .pass_scratch_bytes = pass_scratch_bytes,
    .matmul = matmul,
    .mamba_conv = mamba_conv,
    .mamba_scan = mamba_scan,
    .mamba_gated_norm = mamba_gated_norm,
    .attention = attention,
    .attention_scratch_floats = attention_scratch_floats,
    .moe_route = moe_route,
    .moe_experts = moe_experts,
    .moe_scratch_floats = moe_scratch_floats,
    .argmax = argmax,
};

struct nt_backend *nt_cpu_backend_new(int n_threads) {
    struct cpu_backend *b = nt_calloc(1, sizeof *b);
    if (!b) return NULL;
    b->base.ops = &cpu_ops;
    b->n_threads = n_threads > 0 ? n_threads : nt_physical_cores();
    b->base.n_threads = b->n_threads;
    /* positions per pass: each weight chunk a kernel holds in L2 serves more position groups and each
     * call's fork more work (prompts on 2 threads, session 13: 256 against 64 +15 - 18 % on the
     * demo model, +12 - 13 % on mid; 512 no faster than 256) */
    b->base.pass_default = 256;
    snprintf(b->base.device, sizeof b->base.device, "cpu");
    b->isa = nt_cpu_isa_selected();
    nt_cpu_team_init(&b->team, b->n_threads);
    return &b->base;
}
