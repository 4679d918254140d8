/* bench_ops.c - times the CUDA backend's heavy operations alone, at Nemotron-3-Nano-30B-A3B's
 * shapes in the default mix, so a kernel can be tuned in one GPU session: per operation and pass
 * size, the time per call, the weight bytes it reads and what that is in GB/s, and for passes of
 * many positions the int8 / float operations per second.
 *
 *   gpu_bench_ops [--quick]     (--quick: small shapes, to check the program itself)
 *
 * Also attention (decode at a 2048-token context, the last 512-position pass of a 2048-token
 * prompt) and Mamba's conv + scan, whose prefill cost grows with the prompt, not with the weights;
 * and two small operations of a decode step (add_rmsnorm, the router's top-k), whose time is a
 * latency chain: MB read counts what they touch.
 *
 * Each measurement runs the operation R times inside one pass, as forward.c runs a layer's
 * operations: the first pass of the program runs eagerly, the second is captured into a CUDA
 * graph, and the timed passes replay it, so launch costs are what a real pass pays. The weights
 * are random bytes with valid scales (the values do not change a kernel's time). This is a
 * developer's tool; `nemotron bench` is the engine's benchmark (docs/PERF.md).
 */
#include "cuda/cuda_backend.h"
#include "model/weights.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct nt_backend *be;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "gpu_bench_ops: %s%s%s\n", what, be && be->alloc_error[0] ? ": " : "",
            be ? be->alloc_error : "");
    exit(1);
}

static void *dev_bytes(const void *host, size_t bytes) {
    const void *p = be->ops->upload(be, host, bytes);
    if (!p) die("no device memory");
    return (void *)p;
}

static void *dev_floats(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof *h);
    if (!h) die("out of host memory");
    for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * (float)((rnd() >> 40) / 16777216.0);
    void *d = dev_bytes(h, n * sizeof *h);
    free(h);
    return d;
}

/* A matrix of random bytes whose scales are valid numbers (f16 1.0, q4tp rows base -6 step 0.1). */
static struct nt_matrix random_matrix(enum nt_dtype dt, int64_t rows, int64_t cols) {
    size_t bytes = dt == NT_DTYPE_F32 ? (size_t)(rows * cols * 4) : (size_t)nt_matrix_bytes(dt, rows, cols);
    uint8_t *h = malloc(bytes);
    if (!h) die("out of host memory");
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t r = rnd();
        memcpy(h + i, &r, bytes - i < 8 ? bytes - i : 8);
    }
    if (dt == NT_DTYPE_F32)
        for (size_t i = 0; i < (size_t)(rows * cols); i++) ((float *)h)[i] = (float)((rnd() >> 40) / 16777216.0) - 0.5f;
    if (dt == NT_DTYPE_Q8_2F)
        for (uint64_t i = nt_q8_2f_rs_offset(rows, cols); i + 1 < bytes; i += 2) h[i] = 0x00, h[i + 1] = 0x3C;
    if (dt == NT_DTYPE_Q4TP)
        for (int64_t r = 0; r < rows; r++) {
            uint32_t pr = 0xC600u | (uint32_t)0x2E66u << 16; /* f16 -6.0, f16 0.1 */
            memcpy(h + nt_q4tp_params_offset(rows, cols) + 4 * (uint64_t)r, &pr, 4);
        }
    struct nt_matrix m = {.dtype = dt, .rows = rows, .cols = cols, .data = dev_bytes(h, bytes), .name = "bench"};
    free(h);
    return m;
}

/* The pass program: R calls of `op`; two untimed passes (eager, captured), then timed replays
 * until at least 0.2 s. Returns seconds per call. */
struct pass_ctx {
    struct nt_pass p;
    void *sink;
};
static double time_op(int n, int pos0, int64_t max_cols, int R, void (*op)(const struct nt_pass *, void *),
                      void *arg) {
    struct pass_ctx c;
    memset(&c, 0, sizeof c);
    int32_t *tok = calloc((size_t)n, sizeof *tok);
    c.p.n = n;
    c.p.pos0 = pos0;
    c.p.tokens = tok;
    c.p.scratch = be->ops->alloc(be, be->ops->pass_scratch_bytes(be, max_cols, n));
    c.sink = be->ops->alloc(be, 256);
    if (!tok || !c.p.scratch || !c.sink) die("no memory for a pass");
    double t0 = 0;
    int timed = 0;
    for (int pass = 0;; pass++) {
        if (pass == 2) t0 = now();
        be->ops->begin_pass(be, &c.p);
        for (int r = 0; r < R; r++) op(&c.p, arg);
        be->ops->end_pass(be, &c.p);
        if (pass >= 2) timed++;
        if (pass >= 2 && (timed & 3) == 0) {
            int32_t x;
            be->ops->to_host(be, &x, c.sink, sizeof x); /* waits for the stream */
            if (now() - t0 > 0.2) break;
        }
        if (pass < 2) {
            int32_t x;
            be->ops->to_host(be, &x, c.sink, sizeof x);
        }
    }
    double s = (now() - t0) / ((double)timed * R);
    be->ops->release(be, c.p.scratch);
    be->ops->release(be, c.sink);
    free(tok);
    return s;
}

struct mm_case {
    struct nt_matrix W;
    float *x, *y;
};
static void mm_op(const struct nt_pass *p, void *arg) {
    struct mm_case *c = arg;
    be->ops->matmul(be, p, p->n, &c->W, NULL, NT_ACT_NONE, c->x, (int)c->W.cols, c->y, (int)c->W.rows);
}

#define MOE_SETS 4
struct moe_case {
    struct nt_moe_dims d;
    struct nt_moe_weights w;
    float *x, *wts, *scratch, *y;
    int32_t *idx[MOE_SETS]; /* the choices of call r: idx[r % sets] */
    int sets, calls;
};
static void moe_op(const struct nt_pass *p, void *arg) {
    struct moe_case *c = arg;
    const int32_t *idx = c->idx[c->calls++ % c->sets];
    be->ops->moe_experts(be, p, &c->d, &c->w, c->x, idx, c->wts, c->scratch, c->y);
}

/* The small operations of a decode step (latency chains, not bandwidth): a MoE layer's
 * add_rmsnorm (h += o + shared, then the norm) and the router's top-k. */
struct small_case {
    struct nt_moe_dims d;
    float *h, *o, *o2, *w, *y, *logits, *bias, *wts;
    int32_t *idx;
    int H;
};
static void norm_op(const struct nt_pass *p, void *arg) {
    struct small_case *c = arg;
    be->ops->add_rmsnorm(be, p, c->h, c->o, c->o2, c->w, c->H, 1e-5f, c->y);
}
static void route_op(const struct nt_pass *p, void *arg) {
    struct small_case *c = arg;
    be->ops->moe_route(be, p, &c->d, c->logits, c->bias, c->idx, c->wts);
}

struct attn_case {
    struct nt_attn_dims d;
    float *q, *k, *v, *kc, *vc, *scratch, *out;
};
static void attn_op(const struct nt_pass *p, void *arg) {
    struct attn_case *c = arg;
    be->ops->attention(be, p, &c->d, c->q, c->k, c->v, c->kc, c->vc, c->scratch, c->out);
}

struct mamba_case {
    struct nt_mamba_dims d;
    struct nt_mamba_weights w;
    float *zxd, *ring, *xbc, *state, *y;
};
static void mamba_op(const struct nt_pass *p, void *arg) {
    struct mamba_case *c = arg;
    be->ops->mamba_conv(be, p, &c->d, &c->w, c->zxd, c->ring, NULL, c->xbc);
    be->ops->mamba_scan(be, p, &c->d, &c->w, c->zxd, c->xbc, c->state, NULL, c->y);
}

static void row(const char *op, int n, double s, double bytes, double ops) {
    printf("%-34s %5d %10.2f %9.1f %9.1f %9.2f\n", op, n, s * 1e6, bytes / 1e6, bytes / s / 1e9, ops / s / 1e12);
    fflush(stdout);
}

/* The routed experts of Nano (E 128, k 6, L 2688, mi 1856) in dtype up / down for passes of ns[0 ..
 * nn - 1], random distinct choices per position; label names the row. sets 1: every call the same
 * choices (at one position their 31 MB can stay in the H200's 50 MB L2 from call to call); sets
 * MOE_SETS: call r takes set r % MOE_SETS, drawn from experts 32 (r % MOE_SETS) .. + 31, so a
 * call reads what the 3 calls before it did not (124 MB): DRAM, as in a decode step, where each
 * layer has its own experts. */
static void bench_experts(enum nt_dtype up_dt, enum nt_dtype down_dt, int sc, const int *ns, int nn,
                          const char *label, int sets) {
    struct moe_case c;
    memset(&c, 0, sizeof c);
    c.d = (struct nt_moe_dims){.E = 128, .k = 6, .L = 2688 / sc / 32 * 32, .mi = 1856 / sc / 32 * 32,
                               .n_group = 1, .topk_group = 1, .norm_topk_prob = 1, .routed_scaling_factor = 1};
    struct nt_matrix *up = calloc(128, sizeof *up), *dn = calloc(128, sizeof *dn);
    if (!up || !dn) die("out of host memory");
    for (int e = 0; e < 128; e++) {
        up[e] = random_matrix(up_dt, c.d.mi, c.d.L);
        dn[e] = random_matrix(down_dt, c.d.L, c.d.mi);
    }
    c.w.expert_up = up;
    c.w.expert_down = dn;
    double expert_bytes =
        (double)nt_matrix_bytes(up_dt, c.d.mi, c.d.L) + (double)nt_matrix_bytes(down_dt, c.d.L, c.d.mi);
    for (int j = 0; j < nn; j++) {
        int n = ns[j], nk = n * 6;
        int32_t *idx = malloc((size_t)nk * 4);
        if (!idx) die("out of host memory");
        int touched[128] = {0}, distinct = 0;
        c.sets = sets;
        c.calls = 0;
        for (int set = 0; set < sets; set++) {
            int span = sets > 1 ? 128 / MOE_SETS : 128, first = sets > 1 ? span * set : 0;
            for (int t = 0; t < n; t++)
                for (int s = 0; s < 6; s++) {
                    int e, dup;
                    do {
                        e = first + (int)(rnd() % (uint64_t)span);
                        dup = 0;
                        for (int s2 = 0; s2 < s; s2++) dup |= idx[t * 6 + s2] == e;
                    } while (dup);
                    idx[t * 6 + s] = e;
                    distinct += set == 0 && !touched[e]++;
                }
            c.idx[set] = dev_bytes(idx, (size_t)nk * 4);
        }
        c.x = dev_floats((size_t)n * c.d.L, -1.0f, 1.0f);
        c.wts = dev_floats((size_t)nk, 0.05f, 0.3f);
        c.scratch = be->ops->alloc(be, be->ops->moe_scratch_floats(be, &c.d, n) * sizeof(float));
        c.y = be->ops->alloc(be, (size_t)n * c.d.L * sizeof(float));
        if (!c.scratch || !c.y) die("no device memory");
        double s = time_op(n, 0, c.d.L > c.d.mi ? c.d.L : c.d.mi, 4, moe_op, &c);
        char name[80];
        if (sets > 1)
            snprintf(name, sizeof name, "experts %s, %d sets (%d a call)", label, sets, distinct);
        else
            snprintf(name, sizeof name, "experts %s (%d of 128 touched)", label, distinct);
        row(name, n, s, distinct * expert_bytes, 4.0 * nk * c.d.L * c.d.mi);
        be->ops->release(be, c.scratch);
        be->ops->release(be, c.y);
        free(idx);
    }
    free(up);
    free(dn);
}

/* A rows x cols matrix of dtype dt at passes of ns[0 .. nn - 1] positions, each timed with the
 * kernels of main and, given a test switch of the backend (nt_cuda_*_reference), with it on ("old"). */
static void bench_matmul(const char *name, enum nt_dtype dt, int rows, int cols, const int *ns, int nn,
                         void (*old_switch)(int)) {
    int nmax = 1;
    for (int j = 0; j < nn; j++) nmax = ns[j] > nmax ? ns[j] : nmax;
    struct mm_case c;
    c.W = random_matrix(dt, rows, cols);
    c.x = dev_floats((size_t)nmax * cols, -1.0f, 1.0f);
    c.y = be->ops->alloc(be, (size_t)nmax * rows * sizeof(float));
    if (!c.y) die("no device memory");
    double bytes = dt == NT_DTYPE_F32 ? 4.0 * rows * cols : (double)nt_matrix_bytes(dt, rows, cols);
    for (int j = 0; j < nn; j++)
        for (int old = 0; old < (old_switch ? 2 : 1); old++) {
            if (old_switch) old_switch(old);
            double s = time_op(ns[j], 0, cols, 10, mm_op, &c);
            if (old_switch) old_switch(0);
            char label[80];
            snprintf(label, sizeof label, "%s%s", name, old ? " old" : "");
            row(label, ns[j], s, bytes, 2.0 * rows * cols * ns[j]);
        }
    be->ops->release(be, c.y);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    struct nt_err err;
    memset(&err, 0, sizeof err);
    if (nt_cuda_backend_new(0, &be, &err) != NEMOTRON_OK) {
        printf("gpu_bench_ops: %s\n", err.msg);
        return 77;
    }
    printf("gpu_bench_ops on %s%s\n", be->device, quick ? " (--quick: small shapes)" : "");
    printf("%-34s %5s %10s %9s %9s %9s\n", "operation", "n", "us/call", "MB read", "GB/s", "Tops/s");
    int sc = quick ? 16 : 1; /* --quick divides every dimension */
    static const struct {
        const char *name;
        enum nt_dtype dt;
        int rows, cols;
    } mm[] = {
        {"mamba in_proj q8_2f", NT_DTYPE_Q8_2F, 10304, 2688}, {"mamba out_proj q8_2f", NT_DTYPE_Q8_2F, 2688, 4096},
        {"shared up q8_2f", NT_DTYPE_Q8_2F, 3712, 2688},      {"shared down q8_2f", NT_DTYPE_Q8_2F, 2688, 3712},
        {"attention q q8_2f", NT_DTYPE_Q8_2F, 4096, 2688},    {"router f32", NT_DTYPE_F32, 128, 2688},
        {"lm_head q8_2f", NT_DTYPE_Q8_2F, 131072, 2688},
    };
    static const int ns[] = {1, 4, 64, 512};
    for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
        int rows = mm[i].rows / sc;
        /* lm_head: one row of logits per pass, so not at 512 */
        bench_matmul(mm[i].name, mm[i].dt, rows, mm[i].cols / sc / 32 * 32, ns, rows >= 100000 / sc ? 3 : 4, NULL);
    }
    /* passes of 2 .. 16 positions (a verify pass of 1 + k): decode.cu's streaming k_decode_multi to
     * DM_MAX_N (the router: k_float_rows) and products.cu's k_gemv / k_mma / k_float_product ("old":
     * nt_cuda_multi_reference) in one run */
    {
        static const struct {
            const char *name;
            enum nt_dtype dt;
            int rows, cols;
        } vm[] = {
            {"mamba in_proj q8_2f", NT_DTYPE_Q8_2F, 10304, 2688}, {"mamba in_proj q4tp", NT_DTYPE_Q4TP, 10304, 2688},
            {"mamba out_proj q8_2f", NT_DTYPE_Q8_2F, 2688, 4096}, {"shared up q8_2f", NT_DTYPE_Q8_2F, 3712, 2688},
            {"shared down q8_2f", NT_DTYPE_Q8_2F, 2688, 3712},    {"router f32", NT_DTYPE_F32, 128, 2688},
            {"lm_head q8_2f", NT_DTYPE_Q8_2F, 131072, 2688},
        };
        static const int vn[] = {2, 4, 8, 12, 16};
        for (size_t i = 0; i < sizeof vm / sizeof vm[0]; i++)
            bench_matmul(vm[i].name, vm[i].dt, vm[i].rows / sc, vm[i].cols / sc / 32 * 32, vn, 5,
                          nt_cuda_multi_reference);
    }
    /* routed experts, q4tp */
    bench_experts(NT_DTYPE_Q4TP, NT_DTYPE_Q4TP, sc, ns, 4, "q4tp", 1);
    /* and at one position from DRAM (the experts of a decode step's layers differ) */
    bench_experts(NT_DTYPE_Q4TP, NT_DTYPE_Q4TP, sc, ns, 1, "q4tp", MOE_SETS);
    /* llama.cpp's block types (a GGUF's weights) at the shapes real Nano files hold them in: the
     * streaming kernel (ggml.cu's k_ggml_stream) and the plain one (k_ggml, "old") in one run */
    {
        static const struct {
            const char *name;
            enum nt_dtype dt;
            int rows, cols;
        } gm[] = {
            {"in_proj", NT_DTYPE_GGML_Q8_0, 10304, 2688},  {"in_proj", NT_DTYPE_GGML_Q5_0, 10304, 2688},
            {"out_proj", NT_DTYPE_GGML_Q6_K, 2688, 4096}, {"shared up", NT_DTYPE_GGML_Q5_1, 3712, 2688},
        };
        static const int gn[] = {1, 4, 64};
        for (size_t i = 0; i < sizeof gm / sizeof gm[0]; i++) {
            int el = 0;
            nt_ggml_block_facts(gm[i].dt, &el, NULL, NULL);
            char name[64];
            snprintf(name, sizeof name, "%s %s", gm[i].name, nt_dtype_name(gm[i].dt));
            bench_matmul(name, gm[i].dt, gm[i].rows / sc, gm[i].cols / sc / el * el, gn, 3, nt_cuda_ggml_reference);
        }
        static const int en[] = {1, 4};
        for (int old = 0; old < 2; old++) {
            nt_cuda_ggml_reference(old);
            bench_experts(NT_DTYPE_GGML_MXFP4, NT_DTYPE_GGML_MXFP4, sc, en, 2, old ? "MXFP4 old" : "MXFP4", 1);
            bench_experts(NT_DTYPE_GGML_Q5_1, NT_DTYPE_GGML_Q5_1, sc, en, 2, old ? "Q5_1 old" : "Q5_1", 1);
            nt_cuda_ggml_reference(0);
        }
    }
    /* add_rmsnorm at Nano's width and the router (E 128, k 6): a decode step runs 53 and 23 */
    {
        struct small_case m;
        memset(&m, 0, sizeof m);
        int nmax = 64;
        m.H = 2688 / sc;
        m.d = (struct nt_moe_dims){.E = 128, .k = 6, .n_group = 1, .topk_group = 1, .norm_topk_prob = 1,
                                   .routed_scaling_factor = 2.5f};
        m.h = dev_floats((size_t)nmax * m.H, -1.0f, 1.0f);
        m.o = dev_floats((size_t)nmax * m.H, -0.01f, 0.01f);
        m.o2 = dev_floats((size_t)nmax * m.H, -0.01f, 0.01f);
        m.w = dev_floats((size_t)m.H, 0.5f, 1.5f);
        m.logits = dev_floats((size_t)nmax * 128, -4.0f, 4.0f);
        m.bias = dev_floats(128, 0.0f, 0.004f);
        m.y = be->ops->alloc(be, (size_t)nmax * m.H * sizeof(float));
        m.wts = be->ops->alloc(be, (size_t)nmax * 6 * sizeof(float));
        m.idx = be->ops->alloc(be, (size_t)nmax * 6 * sizeof(int32_t));
        if (!m.y || !m.wts || !m.idx) die("no device memory");
        static const int sn[] = {1, 4, 64};
        for (int j = 0; j < 3; j++) {
            double s = time_op(sn[j], 0, m.H, 20, norm_op, &m);
            row("add_rmsnorm (+ shared) 2688", sn[j], s, 16.0 * sn[j] * m.H, 0);
            s = time_op(sn[j], 0, 128, 20, route_op, &m);
            row("moe_route E 128 k 6", sn[j], s, 4.0 * sn[j] * 128, 0);
        }
    }
    /* attention: Nano's 32 query heads over 2 kv heads of 128; decoding and a verify pass of 13 at
     * a 2048-token context, the last 512-position pass of a 2048-token prompt, and decoding at
     * 16384 (the caches of that size: the scratch and the tiles' grid follow n_ctx) */
    static const int actx[] = {2048, 2048, 2048, 16384}, an[] = {1, 13, 512, 1};
    for (int j = 0; j < 4; j++) {
        int ctx = actx[j] / sc;
        struct attn_case a;
        a.d = (struct nt_attn_dims){.nq = 32, .nkv = 2, .dh = 128, .n_ctx = ctx};
        int qw = 32 * 128, kvw = 2 * 128, nmax = 512 / sc;
        a.q = dev_floats((size_t)nmax * qw, -1.0f, 1.0f);
        a.k = dev_floats((size_t)nmax * kvw, -1.0f, 1.0f);
        a.v = dev_floats((size_t)nmax * kvw, -1.0f, 1.0f);
        a.kc = dev_floats((size_t)ctx * kvw, -1.0f, 1.0f);
        a.vc = dev_floats((size_t)ctx * kvw, -1.0f, 1.0f);
        size_t sf = be->ops->attention_scratch_floats(be, &a.d);
        a.scratch = sf ? be->ops->alloc(be, sf * sizeof(float)) : NULL;
        a.out = be->ops->alloc(be, (size_t)nmax * qw * sizeof(float));
        if (!a.out || (sf && !a.scratch)) die("no device memory");
        int n = an[j] / sc > 0 ? an[j] / sc : 1, pos0 = ctx - n;
        double pairs = (double)n * (pos0 + (n + 1) / 2.0); /* (position, context row) pairs */
        double s = time_op(n, pos0, qw, 4, attn_op, &a);
        char name[64];
        snprintf(name, sizeof name, "attention ctx %d", ctx);
        row(name, n, s, (double)(pos0 + n) * 2 * kvw * 4, 4.0 * pairs * qw); /* the cache, once */
        /* only what alloc gave back: the uploaded inputs stay with the backend (release is for
         * alloc's memory; the CUDA backend's uploads are parts of shared slabs) */
        if (a.scratch) be->ops->release(be, a.scratch);
        be->ops->release(be, a.out);
    }
    /* Mamba-2 conv and scan: 64 heads of 64, state 128, 8 groups (Nano) */
    {
        struct mamba_case m;
        memset(&m, 0, sizeof m);
        m.d = (struct nt_mamba_dims){.H = 2688, .nh = 64 / sc, .P = 64, .N = 128, .G = 8 / sc > 0 ? 8 / sc : 1,
                                     .K = 4, .eps = 1e-5f, .dt_lo = 0.0f, .dt_hi = 1e30f};
        m.d.I = m.d.nh * m.d.P;
        m.d.CD = m.d.I + 2 * m.d.G * m.d.N;
        m.d.zxd = m.d.I + m.d.CD + m.d.nh;
        int nmax = 512;
        m.w.conv_w = dev_floats((size_t)m.d.CD * m.d.K, -0.5f, 0.5f);
        m.w.conv_b = dev_floats((size_t)m.d.CD, -0.1f, 0.1f);
        m.w.dt_bias = dev_floats((size_t)m.d.nh, 0.5f, 2.0f);
        m.w.A = dev_floats((size_t)m.d.nh, -2.7f, -1.0f); /* A = -exp(A_log), A_log in [0, 1] */
        m.w.D = dev_floats((size_t)m.d.nh, 0.5f, 1.5f);
        m.zxd = dev_floats((size_t)nmax * m.d.zxd, -1.0f, 1.0f);
        m.ring = dev_floats((size_t)(m.d.K - 1) * m.d.CD, -1.0f, 1.0f);
        m.state = dev_floats((size_t)m.d.nh * m.d.N * m.d.P, -0.1f, 0.1f);
        m.xbc = be->ops->alloc(be, (size_t)nmax * m.d.CD * sizeof(float));
        m.y = be->ops->alloc(be, (size_t)nmax * m.d.I * sizeof(float));
        if (!m.xbc || !m.y) die("no device memory");
        static const int mn[] = {1, 64, 512};
        for (int j = 0; j < 3; j++) {
            int n = mn[j];
            double s = time_op(n, 0, m.d.zxd, 4, mamba_op, &m);
            double state_bytes = 4.0 * m.d.nh * m.d.N * m.d.P;
            row("mamba conv + scan", n, s, 2 * state_bytes, 6.0 * n * state_bytes / 4);
        }
    }
    be->ops->destroy(be);
    return 0;
}
