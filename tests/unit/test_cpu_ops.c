/* test_cpu_ops.c - the CPU backend's non-product operations: every SIMD variant gives the scalar
 * reference's bits.
 *
 * backend_cpu.c keeps the scalar code of attention, the Mamba conv, scan and gated norm, and the
 * norms; ops_simd.c vectorizes them across independent elements only, so each variant this
 * processor runs (NEMOTRON_CPU: avx2, avxvnni, avx512vnni; one it lacks is reported as skipped)
 * must write exactly the scalar's bytes: outputs, the KV cache, the conv ring, the scan state and
 * a verify pass's snapshots. Random inputs through the backend's own table, as passes of 1, 7 and
 * all positions on 1 and 2 threads (every position's result is the same chain however the
 * positions are passed: the all-positions scalar run is the reference for all of them), on the
 * demo model's shapes and on odd ones that leave tails past every vector width (head dims 36 and
 * 20, channels not a multiple of 16, a group of 60 elements, conv kernel 3 without bias).
 */
#include "backend.h"
#include "cpu/cpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; /* [-1, 1) */
}
static float *rand_floats(size_t n, float scale) {
    float *v = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = uniform() * scale;
    return v;
}

struct shape {
    const char *name;
    int n;                     /* positions */
    struct nt_attn_dims a;
    struct nt_mamba_dims m;
    int conv_bias;
};

/* The inputs of one shape, and everything the operations write. */
struct inputs {
    float *q, *k, *v, *zxd, *h, *o, *o2, *norm_w;
    float *conv_w, *conv_b, *dt_bias, *A, *D, *gnorm_w;
    float *ring0, *state0;     /* the ring and state before the first position */
};
struct outputs {
    float *attn, *k_cache, *v_cache;
    float *xbc, *ring, *ring_snap, *y, *state, *state_snap, *gated;
    float *norm, *h_sum, *norm2;
    size_t n_attn, n_cache, n_xbc, n_ring, n_ring_snap, n_y, n_state, n_state_snap, n_gated, n_norm;
};

static void make_inputs(const struct shape *s, struct inputs *in) {
    const struct nt_attn_dims *a = &s->a;
    const struct nt_mamba_dims *m = &s->m;
    int n = s->n;
    /* scores of a few units, so the softmax's max moves often and the weights spread */
    in->q = rand_floats((size_t)n * a->nq * a->dh, 2.0f);
    in->k = rand_floats((size_t)n * a->nkv * a->dh, 2.0f);
    in->v = rand_floats((size_t)n * a->nkv * a->dh, 1.0f);
    in->zxd = rand_floats((size_t)n * m->zxd, 3.0f);
    in->h = rand_floats((size_t)n * m->H, 1.0f);
    in->o = rand_floats((size_t)n * m->H, 1.0f);
    in->o2 = rand_floats((size_t)n * m->H, 1.0f);
    in->norm_w = rand_floats((size_t)m->H, 1.0f);
    in->conv_w = rand_floats((size_t)m->CD * m->K, 0.5f);
    in->conv_b = s->conv_bias ? rand_floats((size_t)m->CD, 0.5f) : NULL;
    in->dt_bias = rand_floats((size_t)m->nh, 1.0f);
    in->A = rand_floats((size_t)m->nh, 1.0f);
    for (int i = 0; i < m->nh; i++) in->A[i] = -expf(in->A[i]); /* A = -exp(A_log) < 0 */
    in->D = rand_floats((size_t)m->nh, 1.0f);
    in->gnorm_w = rand_floats((size_t)m->I, 1.0f);
    in->ring0 = rand_floats((size_t)(m->K - 1) * m->CD, 1.0f);
    in->state0 = rand_floats((size_t)m->nh * m->N * m->P, 0.5f);
}

static float *filled(size_t n) { /* a value no operation writes, so a missed element shows */
    float *v = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = 12345.0f;
    return v;
}

/* Every operation over the shape's positions, as passes of `pass` positions on backend be. The
 * last pass is a verify pass (snapshots written) when `snap`. */
static void run(struct nt_backend *be, const struct shape *s, const struct inputs *in, int pass, int snap,
                struct outputs *out) {
    const struct nt_attn_dims *a = &s->a;
    const struct nt_mamba_dims *m = &s->m;
    int n = s->n, qw = a->nq * a->dh, kvw = a->nkv * a->dh, H = m->H;
    out->n_attn = (size_t)n * qw, out->n_cache = (size_t)a->n_ctx * kvw;
    out->n_xbc = (size_t)n * m->CD, out->n_ring = (size_t)(m->K - 1) * m->CD;
    out->n_ring_snap = (size_t)pass * out->n_ring, out->n_y = (size_t)n * m->I;
    out->n_state = (size_t)m->nh * m->N * m->P, out->n_state_snap = (size_t)pass * out->n_state;
    out->n_gated = (size_t)n * m->I, out->n_norm = (size_t)n * H;
    out->attn = filled(out->n_attn), out->k_cache = filled(out->n_cache), out->v_cache = filled(out->n_cache);
    out->xbc = filled(out->n_xbc), out->ring = malloc(sizeof(float) * out->n_ring);
    memcpy(out->ring, in->ring0, sizeof(float) * out->n_ring);
    out->ring_snap = filled(out->n_ring_snap), out->y = filled(out->n_y);
    out->state = malloc(sizeof(float) * out->n_state);
    memcpy(out->state, in->state0, sizeof(float) * out->n_state);
    out->state_snap = filled(out->n_state_snap), out->gated = filled(out->n_gated);
    out->norm = filled(out->n_norm), out->norm2 = filled(out->n_norm), out->h_sum = malloc(sizeof(float) * out->n_norm);
    memcpy(out->h_sum, in->h, sizeof(float) * out->n_norm);
    struct nt_mamba_weights w = {.conv_w = in->conv_w, .conv_b = in->conv_b, .dt_bias = in->dt_bias,
                                 .A = in->A, .D = in->D, .norm_w = in->gnorm_w};
    const struct nt_backend_ops *ops = be->ops;
    /* the attention scratch the backend asks for (the CPU's: none) */
    size_t scratch_floats = ops->attention_scratch_floats(be, a);
    float *scratch = scratch_floats ? malloc(sizeof(float) * scratch_floats) : NULL;
    for (int t0 = 0; t0 < n; t0 += pass) {
        int k = n - t0 < pass ? n - t0 : pass;
        struct nt_pass p = {.n = k, .pos0 = t0, .snap = snap && t0 + k == n};
        ops->begin_pass(be, &p);
        ops->attention(be, &p, a, in->q + (size_t)t0 * qw, in->k + (size_t)t0 * kvw, in->v + (size_t)t0 * kvw,
                       out->k_cache, out->v_cache, scratch, out->attn + (size_t)t0 * qw);
        const float *zxd = in->zxd + (size_t)t0 * m->zxd;
        ops->mamba_conv(be, &p, m, &w, zxd, out->ring, out->ring_snap, out->xbc + (size_t)t0 * m->CD);
        ops->mamba_scan(be, &p, m, &w, zxd, out->xbc + (size_t)t0 * m->CD, out->state, out->state_snap,
                        out->y + (size_t)t0 * m->I);
        ops->mamba_gated_norm(be, &p, m, &w, out->y + (size_t)t0 * m->I, zxd, out->gated + (size_t)t0 * m->I);
        ops->rmsnorm(be, &p, in->h + (size_t)t0 * H, in->norm_w, H, 1e-5f, out->norm + (size_t)t0 * H, H);
        /* the residual add alone, then with a shared expert's output (the second y kept) */
        for (int with_o2 = 0; with_o2 < 2; with_o2++)
            ops->add_rmsnorm(be, &p, out->h_sum + (size_t)t0 * H, in->o + (size_t)t0 * H,
                             with_o2 ? in->o2 + (size_t)t0 * H : NULL, in->norm_w, H, 1e-5f,
                             out->norm2 + (size_t)t0 * H);
        ops->end_pass(be, &p);
    }
    free(scratch);
}

static void free_outputs(struct outputs *o) {
    float *all[] = {o->attn, o->k_cache, o->v_cache, o->xbc, o->ring, o->ring_snap, o->y,
                    o->state, o->state_snap, o->gated, o->norm, o->h_sum, o->norm2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Index of the first element whose bytes differ, or -1. */
static long first_diff(const float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0) return (long)i;
    return -1;
}

static void compare(const char *what, const struct outputs *ref, const struct outputs *got, int same_pass) {
    struct { const char *name; const float *r, *g; size_t n; } parts[] = {
        {"attention", ref->attn, got->attn, ref->n_attn},
        {"k cache", ref->k_cache, got->k_cache, ref->n_cache},
        {"v cache", ref->v_cache, got->v_cache, ref->n_cache},
        {"conv out", ref->xbc, got->xbc, ref->n_xbc},
        {"conv ring", ref->ring, got->ring, ref->n_ring},
        {"scan y", ref->y, got->y, ref->n_y},
        {"scan state", ref->state, got->state, ref->n_state},
        {"gated norm", ref->gated, got->gated, ref->n_gated},
        {"rmsnorm", ref->norm, got->norm, ref->n_norm},
        {"add_rmsnorm h", ref->h_sum, got->h_sum, ref->n_norm},
        {"add_rmsnorm y", ref->norm2, got->norm2, ref->n_norm},
        /* the snapshots are of the last pass: comparable where the passes are the same */
        {"conv snapshots", ref->ring_snap, got->ring_snap, same_pass ? ref->n_ring_snap : 0},
        {"scan snapshots", ref->state_snap, got->state_snap, same_pass ? ref->n_state_snap : 0},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        long d = first_diff(parts[i].r, parts[i].g, parts[i].n);
        CHECK(d < 0, "%s: %s differs from the scalar reference at element %ld (%.9g vs %.9g)", what,
              parts[i].name, d, d < 0 ? 0.0 : (double)parts[i].r[d], d < 0 ? 0.0 : (double)parts[i].g[d]);
    }
}

static struct nt_backend *backend(int isa, int threads) {
    setenv("NEMOTRON_CPU", nt_cpu_isa_name(isa), 1);
    return nt_cpu_backend_new(threads);
}

static void mamba_dims(struct nt_mamba_dims *m, int H, int nh, int P, int N, int G, int K) {
    *m = (struct nt_mamba_dims){.H = H, .nh = nh, .P = P, .N = N, .G = G, .K = K, .eps = 1e-5f,
                                .dt_lo = 0.0f, .dt_hi = INFINITY};
    m->I = nh * P;
    m->CD = m->I + 2 * G * N;
    m->zxd = m->I + m->CD + nh;
}

int main(void) {
    struct shape shapes[4];
    /* the demo model: attention 4 / 2 heads of 64, Mamba 8 heads of 32, state 32, 2 groups */
    shapes[0] = (struct shape){.name = "demo", .n = 70, .a = {.nq = 4, .nkv = 2, .dh = 64, .n_ctx = 70}, .conv_bias = 1};
    mamba_dims(&shapes[0].m, 256, 8, 32, 32, 2, 4);
    /* tails: head dim 36 (8 past 16 and 4 past 8), 82 channels (2 past 16), group of 72, K 3 */
    shapes[1] = (struct shape){.name = "tails", .n = 41, .a = {.nq = 3, .nkv = 1, .dh = 36, .n_ctx = 41}};
    mamba_dims(&shapes[1].m, 40, 3, 24, 5, 1, 3);
    /* head dim 20 (the scan's scalar path), a group of 60 (the gated norm's), K 2 */
    shapes[2] = (struct shape){.name = "scalar paths", .n = 23, .a = {.nq = 2, .nkv = 2, .dh = 20, .n_ctx = 23}, .conv_bias = 1};
    mamba_dims(&shapes[2].m, 24, 3, 20, 4, 1, 2);
    /* head dim 128 and Mamba heads of 64: the family's checkpoints */
    shapes[3] = (struct shape){.name = "checkpoint dims", .n = 19, .a = {.nq = 2, .nkv = 1, .dh = 128, .n_ctx = 19}, .conv_bias = 1};
    mamba_dims(&shapes[3].m, 64, 2, 64, 16, 2, 4);

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        struct inputs in;
        make_inputs(s, &in);
        const int passes[] = {1, 7, s->n};
        struct outputs ref[3];
        struct nt_backend *sb = backend(NT_CPU_SCALAR, 1);
        for (int pi = 0; pi < 3; pi++) run(sb, s, &in, passes[pi], 1, &ref[pi]);
        sb->ops->destroy(sb);
        for (int pi = 0; pi < 2; pi++) { /* the scalar code itself is pass-invariant */
            char what[96];
            snprintf(what, sizeof what, "%s, scalar, passes of %d", s->name, passes[pi]);
            compare(what, &ref[2], &ref[pi], 0);
        }
        for (int isa = NT_CPU_AVX2; isa <= NT_CPU_AVX512VNNI; isa++) {
            if (!nt_cpu_isa_available(isa)) {
                printf("test_cpu_ops: %s skipped: this processor lacks its instructions\n", nt_cpu_isa_name(isa));
                continue;
            }
            for (int threads = 1; threads <= 2; threads++) {
                struct nt_backend *be = backend(isa, threads);
                for (int pi = 0; pi < 3; pi++) {
                    struct outputs got;
                    run(be, s, &in, passes[pi], 1, &got);
                    char what[96];
                    snprintf(what, sizeof what, "%s, %s, %d thread(s), passes of %d", s->name,
                             nt_cpu_isa_name(isa), threads, passes[pi]);
                    compare(what, &ref[pi], &got, 1);
                    free_outputs(&got);
                }
                be->ops->destroy(be);
            }
        }
        for (int pi = 0; pi < 3; pi++) free_outputs(&ref[pi]);
        float *all[] = {in.q, in.k, in.v, in.zxd, in.h, in.o, in.o2, in.norm_w, in.conv_w, in.conv_b,
                        in.dt_bias, in.A, in.D, in.gnorm_w, in.ring0, in.state0};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    }
    unsetenv("NEMOTRON_CPU");
    return test_summary("test_cpu_ops");
}
