/* backend_cuda.cu - the CUDA backend: every operation of nt_backend_ops on one GPU.
 *
 * Resident memory is device memory: uploads are placed 256-byte aligned in 1 GiB slabs, other
 * buffers are their own cudaMalloc. Every operation runs on the calling thread's default stream,
 * so one session's operations are ordered with each other and with to_host without events.
 *
 * One arithmetic per position (DESIGN.md): every kernel computes an output element with a chain
 * of operations fixed by the element alone (its row, its own context length), never by n or by
 * which block of the grid it lands in. Where the CPU reference (src/cpu) specifies the chain
 * exactly - the float products' AVX2 lanes (matmul.c), the MoE combine - the kernels follow it
 * operation for operation with explicit __f*_rn intrinsics (and -fmad=false), so those results
 * are the CPU's bits. The packed products have the backend's own chain (products.cu: integer
 * block sums, one float chain), the same in every kernel. Reductions the CPU runs as one long
 * serial sum (norms, attention dots) are fixed-shape block/warp trees here: equally deterministic,
 * different in the last bits. expf/log1pf are CUDA's (within 2 ulp of glibc's).
 *
 * The products live in products.cu; this file holds memory, pass programs (CUDA graphs), and the
 * other operations.
 */
extern "C" {
#include "cuda_backend.h"
}
#include "cuda_util.cuh"
#include "products.cuh"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the backend -------------------------------------------------------------------------- */

/* Device copy of one expert array's data pointers (grouped products look an expert up by id).
 * Keyed by the host array and its first matrix's data, which live as long as the model. */
struct expert_table {
    const struct nt_matrix *key;
    const void *first;
    int E;
    const uint8_t **dev;
    struct expert_table *next;
};

/* A captured pass program: the kernels one session's passes of n positions asking for `want`
 * launch, with their arguments' fingerprint (graph.h below says why it is checked). */
struct pass_graph {
    const void *scratch;         /* the session's pass scratch: one session, one set of buffers */
    int n, want;
    int runs;                    /* eager runs so far (the program is captured on the second) */
    uint64_t print;              /* fingerprint of every operation and argument of the pass */
    cudaGraphExec_t exec;        /* NULL until captured */
    uint64_t used;               /* clock of the last use: the least recently used is evicted */
};

/* Passes kept captured per backend: a decode kind, a full prefill kind and a remainder or two
 * per live session; more are evicted least-recently-used (a recapture costs ~1 ms). */
#define MAX_GRAPHS 32

/* Uploads are placed in slabs of this size (one cudaMalloc each), 256-byte aligned inside: a
 * model has thousands of expert matrices, and one allocation each would round every one up to
 * the driver's 2 MiB granularity (GBs lost on Nemotron-3-Nano). Larger uploads get their own. */
#ifndef NT_CUDA_EMULATION
#define SLAB_BYTES ((size_t)1 << 30)
#else
#define SLAB_BYTES ((size_t)0) /* the host emulation: every upload its own exact allocation, so
                                * AddressSanitizer sees a kernel read past a tensor */
#endif

struct cuda_backend {
    struct nt_backend base;
    int device;
    pthread_mutex_t lock;        /* slabs, expert tables, graphs: sessions may share a backend */
    void **slabs;                /* every cudaMalloc of uploads */
    size_t n_slabs, cap_slabs;
    uint8_t *slab;               /* the shared slab small uploads are placed in now */
    size_t slab_used;            /* its bytes taken */
    struct expert_table *tables;
    struct pass_graph graphs[MAX_GRAPHS];
    uint64_t clock;
    int no_graphs;               /* NEMOTRON_CUDA_GRAPHS=0: every pass eager (to compare, profile) */
    int profile;                 /* NEMOTRON_CUDA_PROFILE=1: eager passes, each operation timed */
};

static struct cuda_backend *cb(struct nt_backend *be) { return (struct cuda_backend *)be; }

/* ---- small device helpers ------------------------------------------------------------------ */

__device__ __forceinline__ float silu_d(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float softplus_d(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Butterfly sum: every lane ends with the same bits (a + b == b + a at each stage). */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over a block of blockDim.x (a multiple of 32) threads in a fixed tree; all get the result. */
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = threadIdx.x < (unsigned)nw ? sh[threadIdx.x] : 0.0f;
    if (warp == 0) r = warp_sum(r);
    if (threadIdx.x == 0) sh[32] = r;
    __syncthreads();
    r = sh[32];
    __syncthreads();
    return r;
}

#define ELEM_THREADS 256

/* ---- memory -------------------------------------------------------------------------------- */

static void set_oom(struct cuda_backend *b, const char *what, size_t bytes) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError(); /* clear the sticky-free allocation error before asking */
    cudaMemGetInfo(&free_b, &total_b);
    snprintf(b->base.alloc_error, sizeof b->base.alloc_error,
             "cuda device %d: %s of %.3f GB failed: %.3f GB free of %.3f GB", b->device, what,
             bytes / 1e9, free_b / 1e9, total_b / 1e9);
}

static void *be_alloc(struct nt_backend *be, size_t bytes) {
    struct cuda_backend *b = cb(be);
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    CK(cudaSetDevice(b->device));
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        set_oom(b, "alloc", bytes);
        return NULL;
    }
    CK(cudaMemset(p, 0, bytes));
    return p;
}

static void drop_graphs_of(struct cuda_backend *b, const void *scratch);

static void be_release(struct nt_backend *be, void *p) {
    if (!p) return;
    CK(cudaSetDevice(cb(be)->device));
    drop_graphs_of(cb(be), p); /* a pass scratch: its session's programs go with it */
    CK(cudaFree(p));
}

static int keep_slab(struct cuda_backend *b, void *p) {
    if (b->n_slabs == b->cap_slabs) {
        size_t cap = b->cap_slabs ? 2 * b->cap_slabs : 64;
        void **ns = (void **)realloc(b->slabs, cap * sizeof *ns);
        if (!ns) return 0;
        b->slabs = ns;
        b->cap_slabs = cap;
    }
    b->slabs[b->n_slabs++] = p;
    return 1;
}

static const void *be_upload(struct nt_backend *be, const void *host, size_t bytes) {
    struct cuda_backend *b = cb(be);
    size_t need = round_up(bytes ? bytes : 1, 256);
    uint8_t *dst = NULL;
    CK(cudaSetDevice(b->device));
    pthread_mutex_lock(&b->lock);
    if (need > SLAB_BYTES / 4) { /* large: its own allocation, the slab keeps filling */
        void *p = NULL;
        if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) set_oom(b, "upload", need);
        else if (!keep_slab(b, p)) cudaFree(p), p = NULL, set_oom(b, "upload (host list)", need);
        dst = (uint8_t *)p;
    } else {
        if (!b->slab || b->slab_used + need > SLAB_BYTES) {
            void *p = NULL;
            if (cudaMalloc(&p, SLAB_BYTES) != cudaSuccess) set_oom(b, "upload", SLAB_BYTES);
            else if (!keep_slab(b, p)) cudaFree(p), p = NULL, set_oom(b, "upload (host list)", need);
            if (p) {
                b->slab = (uint8_t *)p;
                b->slab_used = 0;
            }
        }
        if (b->slab && b->slab_used + need <= SLAB_BYTES) {
            dst = b->slab + b->slab_used;
            b->slab_used += need;
        }
    }
    pthread_mutex_unlock(&b->lock);
    if (dst && bytes) CK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
    return dst;
}

static void be_to_host(struct nt_backend *be, void *dst, const void *src, size_t bytes) {
    CK(cudaSetDevice(cb(be)->device));
    if (bytes) CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ST));
    CK(cudaStreamSynchronize(ST));
}

static void be_zero(struct nt_backend *be, void *dst, size_t bytes) {
    CK(cudaSetDevice(cb(be)->device));
    if (bytes) CK(cudaMemsetAsync(dst, 0, bytes, ST));
    CK(cudaStreamSynchronize(ST)); /* a session may next run on another thread's stream */
}

static void prof_print(void);

static void be_destroy(struct nt_backend *be) {
    struct cuda_backend *b = cb(be);
    if (b->profile) prof_print();
    cudaSetDevice(b->device);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (b->graphs[i].exec) cudaGraphExecDestroy(b->graphs[i].exec);
    for (size_t i = 0; i < b->n_slabs; i++) cudaFree(b->slabs[i]);
    free(b->slabs);
    for (struct expert_table *t = b->tables, *nx; t; t = nx) {
        nx = t->next;
        cudaFree(t->dev);
        free(t);
    }
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* ---- pass scratch and pass programs -------------------------------------------------------- */

/* The pass scratch: the meta words (pos0, n: written before each pass, so the kernels that
 * depend on the position read it on the device and one captured program serves every pass of
 * its kind), the pass's tokens (embed reads them on the device), then the quantized activations
 * of one packed product (products.cu: n rows of pk_qx_stride bytes). */
#define META_BYTES 256
struct pass_meta {
    int32_t pos0, n;
};
static size_t tok_bytes(int n) { return round_up((size_t)(n > 0 ? n : 1) * 4, 256); }
static const struct pass_meta *meta_of(const struct nt_pass *p) { return (const struct pass_meta *)p->scratch; }
static const int32_t *tokens_of(const struct nt_pass *p) {
    return (const int32_t *)((const uint8_t *)p->scratch + META_BYTES);
}
static uint8_t *qx_of(const struct nt_pass *p) { return (uint8_t *)p->scratch + META_BYTES + tok_bytes(p->n); }

static size_t be_pass_scratch_bytes(struct nt_backend *be, int64_t max_cols, int n) {
    return META_BYTES + tok_bytes(n) + (size_t)(n > 0 ? n : 0) * pk_qx_stride(max_cols);
}

/* PASS PROGRAMS. forward.c calls the same operations with the same arguments for every pass of
 * one session with equal n and want (DESIGN.md: "a pass is a fixed program"); only pos0 and the
 * tokens change, and those the kernels read from the scratch. So the first pass of a kind runs
 * eagerly, the second is captured into a CUDA graph as it runs, and later ones replay the
 * graph: begin_pass writes meta and tokens, every operation returns at once after adding its
 * arguments to a fingerprint, end_pass launches the graph. The fingerprint is checked against
 * the captured one: a pass whose program changed is a broken invariant and aborts rather than
 * computing with stale buffers. One launch per pass instead of ~600 (Nemotron-3-Nano) removes
 * the launch overhead that otherwise bounds decoding. The state is per host thread: a session
 * runs a pass on one thread. */
enum pass_mode { MODE_NONE, MODE_EAGER, MODE_CAPTURE, MODE_REPLAY };
struct pass_run {
    enum pass_mode mode;
    struct pass_graph *g;
    uint64_t print;
};
static thread_local struct pass_run cur;

static uint64_t mix64(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* Adds an operation and its arguments to the pass's fingerprint; true when the operation is
 * part of a replayed program and must not launch anything itself. */
static bool deferred(int op, const uint64_t *v, int nv) {
    uint64_t h = mix64(cur.print, (uint64_t)op);
    for (int i = 0; i < nv; i++) h = mix64(h, v[i]);
    cur.print = h;
    return cur.mode == MODE_REPLAY;
}
#define U(x) ((uint64_t)(uintptr_t)(x))
/* a small struct's contents (the dims of an op), so a changed dimension changes the print */
static uint64_t bytes_print(const void *p, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = mix64(h, ((const uint8_t *)p)[i]);
    return h;
}
#define DIMS(d) bytes_print(d, sizeof *(d))
static uint64_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#define FLT(x) float_bits(x)
#define DEFER(op, ...)                                                                             \
    do {                                                                                           \
        const uint64_t v_[] = {__VA_ARGS__};                                                       \
        if (deferred(op, v_, (int)(sizeof v_ / sizeof v_[0]))) return;                             \
    } while (0)
enum { OP_EMBED = 1, OP_RMSNORM, OP_ADD_RMSNORM, OP_MATMUL, OP_CONV, OP_SCAN, OP_GNORM, OP_ATTENTION,
       OP_ROUTE, OP_EXPERTS, OP_ADD, OP_ARGMAX };

/* THE PROFILE (NEMOTRON_CUDA_PROFILE=1, a development aid): every operation of the eager passes
 * is timed with events around it, summed per label (operation, and for products the format,
 * shape and positions), and the table is printed to stderr when the backend is destroyed. */
#define PROF_MAX 256
struct prof_row {
    char label[96];
    double ms;
    long calls;
};
static struct prof_row prof_rows[PROF_MAX];
static int prof_n;
static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
struct op_timer {
    bool on;
    char label[96];
    cudaEvent_t t0, t1;
    op_timer(bool profile, const char *fmt, ...) : on(profile && cur.mode == MODE_EAGER) {
        if (!on) return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(label, sizeof label, fmt, ap);
        va_end(ap);
        CK(cudaEventCreate(&t0));
        CK(cudaEventCreate(&t1));
        CK(cudaEventRecord(t0, ST));
    }
    ~op_timer() {
        if (!on) return;
        float ms = 0;
        CK(cudaEventRecord(t1, ST));
        CK(cudaEventSynchronize(t1));
        CK(cudaEventElapsedTime(&ms, t0, t1));
        cudaEventDestroy(t0);
        cudaEventDestroy(t1);
        pthread_mutex_lock(&prof_lock);
        int i = 0;
        while (i < prof_n && strcmp(prof_rows[i].label, label)) i++;
        if (i < PROF_MAX) {
            if (i == prof_n) snprintf(prof_rows[prof_n++].label, sizeof label, "%s", label);
            prof_rows[i].ms += ms;
            prof_rows[i].calls++;
        }
        pthread_mutex_unlock(&prof_lock);
    }
};
static const char *dtype_name(int dt) {
    return dt == NT_DTYPE_Q8_2F ? "q8_2f" : dt == NT_DTYPE_Q4TP ? "q4tp" : dt == NT_DTYPE_BF16 ? "bf16"
         : dt == NT_DTYPE_F16 ? "f16" : "f32";
}
static int prof_cmp(const void *a, const void *b) {
    double x = ((const struct prof_row *)a)->ms, y = ((const struct prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}
static void prof_print(void) {
    if (!prof_n) return;
    qsort(prof_rows, prof_n, sizeof prof_rows[0], prof_cmp);
    double total = 0;
    for (int i = 0; i < prof_n; i++) total += prof_rows[i].ms;
    fprintf(stderr, "cuda profile: %.3f ms in %d kinds of operation\n%10s %8s %10s  %s\n", total, prof_n,
            "ms", "calls", "us/call", "operation");
    for (int i = 0; i < prof_n; i++)
        fprintf(stderr, "%10.3f %8ld %10.2f  %s\n", prof_rows[i].ms, prof_rows[i].calls,
                1000.0 * prof_rows[i].ms / prof_rows[i].calls, prof_rows[i].label);
    prof_n = 0;
}
#define PROFILE(be, ...) op_timer timer_(cb(be)->profile, __VA_ARGS__)

static void drop_graphs_of(struct cuda_backend *b, const void *scratch) {
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < MAX_GRAPHS; i++) {
        struct pass_graph *g = &b->graphs[i];
        if (g->scratch != scratch) continue;
        if (g->exec) cudaGraphExecDestroy(g->exec);
        memset(g, 0, sizeof *g);
    }
    pthread_mutex_unlock(&b->lock);
}

/* The program slot of (scratch, n, want): found, or a fresh one (a free slot, else the least
 * recently used, whose graph is destroyed). */
static struct pass_graph *graph_slot(struct cuda_backend *b, const struct nt_pass *p) {
    pthread_mutex_lock(&b->lock);
    struct pass_graph *g = NULL, *lru = &b->graphs[0];
    for (int i = 0; i < MAX_GRAPHS && !g; i++) {
        struct pass_graph *c = &b->graphs[i];
        if (c->scratch == p->scratch && c->n == p->n && c->want == p->want) g = c;
        else if (!c->scratch || (lru->scratch && c->used < lru->used)) lru = c;
    }
    if (!g) {
        g = lru;
        if (g->exec) cudaGraphExecDestroy(g->exec);
        memset(g, 0, sizeof *g);
        g->scratch = p->scratch;
        g->n = p->n;
        g->want = p->want;
    }
    g->used = ++b->clock;
    pthread_mutex_unlock(&b->lock);
    return g;
}

static void be_begin_pass(struct nt_backend *be, const struct nt_pass *p) {
    struct cuda_backend *b = cb(be);
    CK(cudaSetDevice(b->device));
    if (p->n <= 0 || !p->scratch) fatal("begin_pass: a pass needs positions and its scratch", NULL);
    /* pageable sources: each copy returns once the bytes are staged, so nothing here outlives the
     * call; stream order puts them before the pass's kernels */
    struct pass_meta m = {p->pos0, p->n};
    CK(cudaMemcpyAsync(p->scratch, &m, sizeof m, cudaMemcpyHostToDevice, ST));
    if (p->tokens)
        CK(cudaMemcpyAsync((uint8_t *)p->scratch + META_BYTES, p->tokens, (size_t)p->n * sizeof(int32_t),
                           cudaMemcpyHostToDevice, ST));
    cur.g = graph_slot(b, p);
    cur.print = 0;
    cur.mode = cur.g->exec ? MODE_REPLAY : cur.g->runs ? MODE_CAPTURE : MODE_EAGER;
    if (b->no_graphs) cur.mode = MODE_EAGER;
    if (cur.mode == MODE_CAPTURE) CK(cudaStreamBeginCapture(ST, cudaStreamCaptureModeThreadLocal));
}

static void be_end_pass(struct nt_backend *be, const struct nt_pass *p) {
    struct pass_graph *g = cur.g;
    switch (cur.mode) {
    case MODE_EAGER:
        g->print = cur.print;
        g->runs++;
        break;
    case MODE_CAPTURE: {
        cudaGraph_t graph;
        CK(cudaStreamEndCapture(ST, &graph));
        if (cur.print == g->print) {
            CK(cudaGraphInstantiate(&g->exec, graph, 0));
            CK(cudaGraphLaunch(g->exec, ST));
        } else {
            /* the program differed from the eager run (not expected): run this capture once,
             * keep the new fingerprint, capture again next time */
            cudaGraphExec_t once;
            g->print = cur.print;
            CK(cudaGraphInstantiate(&once, graph, 0));
            CK(cudaGraphLaunch(once, ST));
            CK(cudaStreamSynchronize(ST));
            CK(cudaGraphExecDestroy(once));
        }
        CK(cudaGraphDestroy(graph));
        break;
    }
    case MODE_REPLAY:
        if (cur.print != g->print)
            fatal("end_pass: the pass's operations differ from its captured program (forward.c must "
                  "call the same operations for every pass of one kind)", NULL);
        CK(cudaGraphLaunch(g->exec, ST));
        break;
    case MODE_NONE:
        fatal("end_pass without begin_pass", NULL);
    }
    cur.mode = MODE_NONE;
    cur.g = NULL;
}

/* ---- embed, norms, add, argmax --------------------------------------------------------------- */

__global__ void k_embed(const int32_t *tokens, const uint8_t *emb, int dt, int64_t V, int H, float *h) {
    int t = blockIdx.x;
    int64_t tok = tokens[t];
    float *dst = h + (size_t)t * H;
    for (int c = threadIdx.x; c < H; c += blockDim.x)
        dst[c] = (tok >= 0 && tok < V) ? load_w(emb, tok * H + c, dt) : 0.0f; /* memory-safe */
}

static void be_embed(struct nt_backend *be, const struct nt_pass *p, const struct nt_matrix *emb, float *h) {
    DEFER(OP_EMBED, U(emb->data), (uint64_t)emb->dtype, U(h));
    PROFILE(be, "embed");
    NT_LAUNCH(k_embed, p->n, ELEM_THREADS, tokens_of(p), (const uint8_t *)emb->data, emb->dtype,
                                    emb->rows, (int)emb->cols, h);
    LAUNCHED();
}

/* One block per position: h (+= o), then y = w * (h * inv). */
__global__ void k_rmsnorm(float *h, const float *o, const float *w, int H, float eps, float *y) {
    __shared__ float sh[33];
    int t = blockIdx.x;
    float *ht = h + (size_t)t * H;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = ht[i];
        if (o) {
            v = __fadd_rn(v, o[(size_t)t * H + i]);
            ht[i] = v;
        }
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    ss = block_sum(ss, sh);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)H), eps)));
    for (int i = threadIdx.x; i < H; i += blockDim.x) y[(size_t)t * H + i] = __fmul_rn(w[i], __fmul_rn(ht[i], inv));
}

static void be_rmsnorm(struct nt_backend *be, const struct nt_pass *p, const float *h, const float *w,
                       int H, float eps, float *y) {
    DEFER(OP_RMSNORM, U(h), U(w), (uint64_t)H, FLT(eps), U(y));
    PROFILE(be, "rmsnorm n=%d", p->n);
    NT_LAUNCH(k_rmsnorm, p->n, ELEM_THREADS, (float *)h, NULL, w, H, eps, y); /* h only read when o is NULL */
    LAUNCHED();
}

static void be_add_rmsnorm(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o,
                           const float *w, int H, float eps, float *y) {
    DEFER(OP_ADD_RMSNORM, U(h), U(o), U(w), (uint64_t)H, FLT(eps), U(y));
    PROFILE(be, "add_rmsnorm n=%d", p->n);
    NT_LAUNCH(k_rmsnorm, p->n, ELEM_THREADS, h, o, w, H, eps, y);
    LAUNCHED();
}

__global__ void k_add(float *y, const float *x, size_t count) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], x[i]);
}

static void be_add(struct nt_backend *be, float *y, const float *x, size_t count) {
    DEFER(OP_ADD, U(y), U(x), (uint64_t)count);
    PROFILE(be, "add");
    if (!count) return;
    size_t blocks = (count + ELEM_THREADS - 1) / ELEM_THREADS;
    if (blocks > 65536) blocks = 65536;
    NT_LAUNCH(k_add, (unsigned)blocks, ELEM_THREADS, y, x, count);
    LAUNCHED();
}

/* (value, index) better: larger value, then lower index (the CPU's first maximum). */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return bi < 0 || (i >= 0 && (v > bv || (v == bv && i < bi)));
}

/* Block-wide pick of the best allowed element; each thread scans its stride in increasing index
 * order, so within a thread a tie keeps the lower index, and the combine keeps it across. */
__device__ void block_argbest(float v, int i, float *shv, int *shi, float *ov, int *oi) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(v2, i2, v, i)) { v = v2; i = i2; }
    }
    if (lane == 0) { shv[warp] = v; shi[warp] = i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bv = shv[0];
        int bi = shi[0];
        for (int w2 = 1; w2 < nw; w2++)
            if (better(shv[w2], shi[w2], bv, bi)) { bv = shv[w2]; bi = shi[w2]; }
        shv[32] = bv;
        shi[32] = bi;
    }
    __syncthreads();
    *ov = shv[32];
    *oi = shi[32];
    __syncthreads();
}

__global__ void k_argmax(const float *logits, int vocab, int32_t *out) {
    __shared__ float shv[33];
    __shared__ int shi[33];
    const float *l = logits + (size_t)blockIdx.x * vocab;
    float bv = 0.0f;
    int bi = -1;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x)
        if (bi < 0 || l[i] > bv) { bv = l[i]; bi = i; }
    float rv;
    int ri;
    block_argbest(bv, bi, shv, shi, &rv, &ri);
    if (threadIdx.x == 0) out[blockIdx.x] = ri < 0 ? 0 : ri;
}

static void be_argmax(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out) {
    DEFER(OP_ARGMAX, (uint64_t)n, U(logits), (uint64_t)vocab, U(out));
    PROFILE(be, "argmax n=%d", n);
    if (n <= 0) return;
    NT_LAUNCH(k_argmax, n, 1024, logits, vocab, out); /* 1024: a vocabulary of 131072 is 128 each */
    LAUNCHED();
}

/* ---- products ------------------------------------------------------------------------------ */

static int is_packed(int dt) { return dt == NT_DTYPE_Q8_2F || dt == NT_DTYPE_Q4TP; }

/* The alignment the kernels' loads assume (16 bytes: the packed kernels load uint4): uploads are
 * 256-byte aligned, so this only fails for a matrix pointing inside a larger upload. */
static void check_matrix(const struct nt_matrix *W) {
    uintptr_t a = (uintptr_t)W->data;
    size_t need = is_packed(W->dtype) ? 16 : W->dtype == NT_DTYPE_F32 ? 4 : 2;
    if (W->dtype != NT_DTYPE_F32 && W->dtype != NT_DTYPE_F16 && W->dtype != NT_DTYPE_BF16 &&
        W->dtype != NT_DTYPE_Q8_2F && W->dtype != NT_DTYPE_Q4TP)
        fatal("matmul: unsupported weight dtype", W->name);
    if (a % need) fatal("matmul: weight data not aligned for its dtype", W->name);
}

static void be_matmul(struct nt_backend *be, const struct nt_pass *p, int n, const struct nt_matrix *W,
                      const float *bias, enum nt_act act, const float *x, int x_stride, float *y,
                      int y_stride) {
    DEFER(OP_MATMUL, (uint64_t)n, U(W->data), (uint64_t)W->dtype, (uint64_t)W->rows, (uint64_t)W->cols, U(bias),
          (uint64_t)act, U(x), (uint64_t)x_stride, U(y), (uint64_t)y_stride);
    PROFILE(be, "matmul %s %lldx%lld n=%d", dtype_name(W->dtype), (long long)W->rows, (long long)W->cols, n);
    if (n <= 0) return;
    check_matrix(W);
    struct pk_product a;
    memset(&a, 0, sizeof a);
    a.W = (const uint8_t *)W->data;
    a.dtype = W->dtype;
    a.rows = W->rows;
    a.cols = W->cols;
    a.bias = bias;
    a.act = act;
    a.x = x;
    a.x_stride = x_stride;
    a.y = y;
    a.y_stride = y_stride;
    a.qx = qx_of(p);
    a.n = n;
    a.group = pk_group_plain(W->dtype, n);
    pk_run(&a, (n + a.group - 1) / a.group);
}

/* ---- Mamba-2 ------------------------------------------------------------------------------- */

/* One thread per channel, positions in order, the ring in registers-or-local memory. */
__global__ void k_mamba_conv(int n, int K, int CD, int I, int zxdw, const float *conv_w, const float *conv_b,
                             const float *zxd, float *ring, float *xbc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= CD) return;
    const float *wc = conv_w + (size_t)c * K;
    float r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K - 1; k++) r[k] = ring[(size_t)k * CD + c];
    for (int t = 0; t < n; t++) {
        float in = zxd[(size_t)t * zxdw + I + c];
        float acc = conv_b ? conv_b[c] : 0.0f;
        for (int k = 0; k < K - 1; k++) acc = __fadd_rn(acc, __fmul_rn(wc[k], r[k]));
        acc = __fadd_rn(acc, __fmul_rn(wc[K - 1], in));
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
        xbc[(size_t)t * CD + c] = silu_d(acc);
    }
    for (int k = 0; k < K - 1; k++) ring[(size_t)k * CD + c] = r[k];
}

static void be_mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                          const struct nt_mamba_weights *w, const float *zxd, float *ring, float *xbc) {
    DEFER(OP_CONV, DIMS(d), U(w->conv_w), U(w->conv_b), U(zxd), U(ring), U(xbc));
    PROFILE(be, "mamba_conv n=%d", p->n);
    if (d->K < 1 || d->K > NT_MAX_CONV_KERNEL) fatal("mamba_conv: conv kernel out of range", NULL);
    NT_LAUNCH(k_mamba_conv, (d->CD + 127) / 128, 128, p->n, d->K, d->CD, d->I, d->zxd, w->conv_w, w->conv_b, zxd,
                                               ring, xbc);
    LAUNCHED();
}

/* One block per head, SCAN_SPLIT * P threads: thread (j, q) keeps the states S[k][q] of its
 * quarter k in [j*NPT, (j+1)*NPT), NPT = N / SCAN_SPLIT, in registers for the whole pass (the
 * state is read and written once per pass, not once per position), and advances them position
 * by position. y[t] = ((a0 + a1) + (a2 + a3)) + D x, a_j the quarter sums in k order: a fixed
 * tree per element, whatever n is (the CPU sums the N terms in one chain: last-bit differences).
 * B and C of the position go through shared memory. */
#define SCAN_SPLIT 4
#define SCAN_MAX_N 256
#define SCAN_MAX_P 256
template <int NPT>
__global__ void k_mamba_scan(int n, int nh, int P, int N, int G, int I, int CD, int zxdw, float dt_lo, float dt_hi,
                             const float *__restrict__ dt_bias, const float *__restrict__ A_log,
                             const float *__restrict__ Dv, const float *__restrict__ zxd,
                             const float *__restrict__ xbc, float *__restrict__ state, float *__restrict__ y) {
    __shared__ float sB[SCAN_MAX_N], sC[SCAN_MAX_N], part[SCAN_SPLIT][SCAN_MAX_P];
    int h = blockIdx.x, q = threadIdx.x % P, j = threadIdx.x / P, g = h / (nh / G);
    float A = -expf(A_log[h]);
    float *S = state + (size_t)h * N * P + (size_t)j * NPT * P + q;
    float st[NPT];
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = S[(size_t)kk * P];
    for (int t = 0; t < n; t++) {
        const float *row = xbc + (size_t)t * CD;
        for (int k = threadIdx.x; k < N; k += blockDim.x) {
            sB[k] = row[I + (size_t)g * N + k];
            sC[k] = row[I + (size_t)G * N + (size_t)g * N + k];
        }
        float x = row[(size_t)h * P + q];
        float dt = softplus_d(__fadd_rn(zxd[(size_t)t * zxdw + I + CD + h], dt_bias[h]));
        dt = fminf(fmaxf(dt, dt_lo), dt_hi);
        float dA = expf(__fmul_rn(dt, A));
        __syncthreads();
        float acc = 0.0f;
#pragma unroll
        for (int kk = 0; kk < NPT; kk++) {
            int k = j * NPT + kk;
            float dtB = __fmul_rn(dt, sB[k]);
            float sv = __fadd_rn(__fmul_rn(dA, st[kk]), __fmul_rn(dtB, x));
            st[kk] = sv;
            acc = __fadd_rn(acc, __fmul_rn(sv, sC[k]));
        }
        part[j][q] = acc;
        __syncthreads();
        if (j == 0) {
            float sum = __fadd_rn(__fadd_rn(part[0][q], part[1][q]), __fadd_rn(part[2][q], part[3][q]));
            y[(size_t)t * I + (size_t)h * P + q] = __fadd_rn(sum, __fmul_rn(Dv[h], x));
        }
        /* the next position's B, C and parts are written only after every thread passed here */
        __syncthreads();
    }
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) S[(size_t)kk * P] = st[kk];
}

static void be_mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                          const struct nt_mamba_weights *w, const float *zxd, const float *xbc,
                          float *state, float *y) {
    DEFER(OP_SCAN, DIMS(d), U(w->A_log), U(w->dt_bias), U(w->D), U(zxd), U(xbc), U(state), U(y));
    PROFILE(be, "mamba_scan n=%d", p->n);
    if (d->N % SCAN_SPLIT || d->N > SCAN_MAX_N || d->P > SCAN_MAX_P || d->P < 1)
        fatal("mamba_scan: the CUDA scan holds ssm_state_size a multiple of 4 up to 256 and "
              "mamba_head_dim up to 256", NULL);
    int npt = d->N / SCAN_SPLIT;
    dim3 grid(d->nh), block(SCAN_SPLIT * d->P);
#define SCAN_CASE(v)                                                                               \
    case v:                                                                                        \
        NT_LAUNCH(k_mamba_scan<v>, grid, block, p->n, d->nh, d->P, d->N, d->G, d->I, d->CD, d->zxd, d->dt_lo,   \
                                                 d->dt_hi, w->dt_bias, w->A_log, w->D, zxd, xbc, state, y); \
        break;
    switch (npt) {
        SCAN_CASE(1) SCAN_CASE(2) SCAN_CASE(4) SCAN_CASE(8) SCAN_CASE(16) SCAN_CASE(32) SCAN_CASE(64)
    default:
        fatal("mamba_scan: ssm_state_size / 4 must be a power of two up to 64", NULL);
    }
#undef SCAN_CASE
    LAUNCHED();
}

/* One block per (position, group): o = y * silu(z), then the group's RMS norm. */
__global__ void k_gated_norm(int I, int G, int zxdw, float eps, const float *norm_w, const float *y,
                             const float *zxd, float *out) {
    __shared__ float sh[33];
    int t = blockIdx.x / G, q = blockIdx.x % G, gs = I / G;
    const float *yt = y + (size_t)t * I, *z = zxd + (size_t)t * zxdw;
    float *o = out + (size_t)t * I;
    float ss = 0.0f;
    for (int i = q * gs + threadIdx.x; i < (q + 1) * gs; i += blockDim.x) {
        float v = __fmul_rn(yt[i], silu_d(z[i]));
        o[i] = v;
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    ss = block_sum(ss, sh);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)gs), eps)));
    for (int i = q * gs + threadIdx.x; i < (q + 1) * gs; i += blockDim.x) o[i] = __fmul_rn(norm_w[i], __fmul_rn(o[i], inv));
}

static void be_mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                                const struct nt_mamba_weights *w, const float *y, const float *zxd, float *out) {
    DEFER(OP_GNORM, DIMS(d), U(w->norm_w), U(y), U(zxd), U(out));
    PROFILE(be, "mamba_gated_norm n=%d", p->n);
    NT_LAUNCH(k_gated_norm, p->n * d->G, ELEM_THREADS, d->I, d->G, d->zxd, d->eps, w->norm_w, y, zxd, out);
    LAUNCHED();
}

/* ---- attention ----------------------------------------------------------------------------- */

/* The pass's K and V rows into the caches at pos0 (read from the meta words, so a captured pass
 * appends wherever the sequence is). */
__global__ void k_kv_append(const struct pass_meta *meta, size_t rows, size_t kvw, const float *k, const float *v,
                            float *k_cache, float *v_cache) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= rows) return;
    size_t at = (size_t)meta->pos0 * kvw + i;
    k_cache[at] = k[i];
    v_cache[at] = v[i];
}

/* Causal GQA, split over the context, then merged. A block serves one position and ATT_HEADS
 * query heads of one kv head (each K/V row is loaded once for them); its ATT_WARPS warps split
 * the position's context by absolute position: chunk u / ATT_CHUNK goes to warp
 * (u / ATT_CHUNK) % ATT_WARPS, which runs the online softmax over its chunks in increasing u.
 * The warps' (m, l, o) are then merged in warp order. Who handles which u depends on u alone, so
 * a position gets the same bits in every pass (DESIGN.md); against the CPU's single chain over
 * u the sums are reassociated (last bits). A lane holds DPL = ceil(dh / 32) dims of each head:
 * dims lane + 32 i. */
#define ATT_WARPS 8
#define ATT_CHUNK 32
#define ATT_HEADS 4
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const struct pass_meta *meta, int nq, int nkv, int dh, int hpb, const float *__restrict__ q,
                const float *__restrict__ kc, const float *__restrict__ vc, float *__restrict__ out) {
    __shared__ float sm_m[ATT_WARPS][ATT_HEADS], sm_l[ATT_WARPS][ATT_HEADS];
    __shared__ float sm_o[ATT_WARPS][ATT_HEADS][DPL * 32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = blockIdx.z, kvh = blockIdx.y, rep = nq / nkv;
    int h0 = kvh * rep + blockIdx.x * hpb, ctx = meta->pos0 + t + 1;
    int kvw = nkv * dh, qw = nq * dh;
    float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)dh));
    float qv[ATT_HEADS][DPL], o[ATT_HEADS][DPL], m[ATT_HEADS], l[ATT_HEADS];
#pragma unroll
    for (int hh = 0; hh < ATT_HEADS; hh++) {
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            int c = lane + 32 * i;
            qv[hh][i] = hh < hpb && c < dh ? q[(size_t)t * qw + (size_t)(h0 + hh) * dh + c] : 0.0f;
            o[hh][i] = 0.0f;
        }
    }
    for (int c0 = warp * ATT_CHUNK; c0 < ctx; c0 += ATT_WARPS * ATT_CHUNK) {
        int c1 = min(c0 + ATT_CHUNK, ctx);
        for (int u = c0; u < c1; u++) {
            const float *ku = kc + (size_t)u * kvw + (size_t)kvh * dh;
            const float *vu = vc + (size_t)u * kvw + (size_t)kvh * dh;
            float kr[DPL], vr[DPL];
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                int c = lane + 32 * i;
                kr[i] = c < dh ? ku[c] : 0.0f;
                vr[i] = c < dh ? vu[c] : 0.0f;
            }
#pragma unroll
            for (int hh = 0; hh < ATT_HEADS; hh++) {
                if (hh >= hpb) break;
                float part = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) part = __fmaf_rn(qv[hh][i], kr[i], part);
                float sc = __fmul_rn(warp_sum(part), scale);
                if (sc > m[hh]) {
                    float corr = expf(__fsub_rn(m[hh], sc));
                    l[hh] = __fmul_rn(l[hh], corr);
#pragma unroll
                    for (int i = 0; i < DPL; i++) o[hh][i] = __fmul_rn(o[hh][i], corr);
                    m[hh] = sc;
                }
                float ev = expf(__fsub_rn(sc, m[hh]));
                l[hh] = __fadd_rn(l[hh], ev);
#pragma unroll
                for (int i = 0; i < DPL; i++) o[hh][i] = __fadd_rn(o[hh][i], __fmul_rn(ev, vr[i]));
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < ATT_HEADS; hh++) {
        if (lane == 0) {
            sm_m[warp][hh] = m[hh];
            sm_l[warp][hh] = l[hh];
        }
#pragma unroll
        for (int i = 0; i < DPL; i++) sm_o[warp][hh][lane + 32 * i] = o[hh][i];
    }
    __syncthreads();
    /* the merge: thread (hh, c) combines the warps' partials in warp order */
    for (int j = threadIdx.x; j < hpb * dh; j += blockDim.x) {
        int hh = j / dh, c = j % dh;
        float mx = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm_m[w][hh]);
        float den = 0.0f, num = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
            if (sm_m[w][hh] == -INFINITY) continue; /* a warp whose chunks all lie past ctx */
            float f = expf(__fsub_rn(sm_m[w][hh], mx));
            den = __fadd_rn(den, __fmul_rn(sm_l[w][hh], f));
            num = __fadd_rn(num, __fmul_rn(sm_o[w][hh][c], f));
        }
        out[(size_t)t * qw + (size_t)(h0 + hh) * dh + c] = __fdiv_rn(num, den);
    }
}

static void be_attention(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d,
                         const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                         float *out) {
    /* the checks run on every pass, replayed ones too: the kernels trust pos0 */
    if (d->dh > NT_MAX_HEAD_DIM) fatal("attention: head dim over NT_MAX_HEAD_DIM", NULL);
    if (p->pos0 < 0 || p->pos0 + p->n > d->n_ctx) fatal("attention: pass runs past the cache", NULL);
    DEFER(OP_ATTENTION, DIMS(d), U(q), U(k), U(v), U(k_cache), U(v_cache), U(out));
    PROFILE(be, "attention n=%d", p->n);
    size_t kvw = (size_t)d->nkv * d->dh;
    size_t rows = (size_t)p->n * kvw;
    NT_LAUNCH(k_kv_append, (unsigned)((rows + ELEM_THREADS - 1) / ELEM_THREADS), ELEM_THREADS, 
        meta_of(p), rows, kvw, k, v, k_cache, v_cache);
    LAUNCHED();
    int rep = d->nq / d->nkv, hpb = rep % 4 == 0 ? 4 : rep % 2 == 0 ? 2 : 1;
    dim3 grid(rep / hpb, d->nkv, p->n);
    int dpl = (d->dh + 31) / 32;
#define ATT_CASE(v)                                                                                \
    case v:                                                                                        \
        NT_LAUNCH(k_attention<v>, grid, ATT_WARPS * 32, meta_of(p), d->nq, d->nkv, d->dh, hpb, q, k_cache, v_cache, out); \
        break;
    switch (dpl) {
        ATT_CASE(1) ATT_CASE(2) ATT_CASE(3) ATT_CASE(4)
    default:
        fatal("attention: the CUDA kernel holds head_dim up to 128", NULL);
    }
#undef ATT_CASE
    LAUNCHED();
}

/* ---- MoE ----------------------------------------------------------------------------------- */

#define ROUTE_THREADS 256

/* One block per position: the CPU's moe_route with block-wide picks (same winners: largest,
 * then lowest index). */
__global__ void __launch_bounds__(ROUTE_THREADS) k_moe_route(int E, int k, int n_group, int topk_group, int norm,
                                                             float scaling, float *logits, const float *bias,
                                                             int32_t *idx, float *wts) {
    __shared__ float sc[NT_MAX_EXPERTS];
    __shared__ unsigned char taken[NT_MAX_EXPERTS];
    __shared__ float gsc[NT_MAX_EXPERTS / 2];
    __shared__ unsigned char keep[NT_MAX_EXPERTS / 2];
    __shared__ float shv[33];
    __shared__ int shi[33];
    int t = blockIdx.x;
    float *s = logits + (size_t)t * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float v = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-s[e])));
        s[e] = v;
        sc[e] = __fadd_rn(v, bias[e]);
        taken[e] = 0;
    }
    __syncthreads();
    if (n_group > 1) {
        int per = E / n_group;
        for (int g = threadIdx.x; g < n_group; g += blockDim.x) {
            const float *gs = sc + g * per;
            int a = -1, b = -1;
            for (int i = 0; i < per; i++)
                if (a < 0 || gs[i] > gs[a]) a = i;
            for (int i = 0; i < per; i++)
                if (i != a && (b < 0 || gs[i] > gs[b])) b = i;
            gsc[g] = __fadd_rn(gs[a], gs[b]);
            keep[g] = 0;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < topk_group; i++) {
                int best = -1;
                for (int g = 0; g < n_group; g++)
                    if (!keep[g] && (best < 0 || gsc[g] > gsc[best])) best = g;
                if (best >= 0) keep[best] = 1;
            }
        __syncthreads();
        for (int e = threadIdx.x; e < E; e += blockDim.x) taken[e] = !keep[e / per];
        __syncthreads();
    }
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (!taken[e] && (bi < 0 || sc[e] > bv)) { bv = sc[e]; bi = e; }
        float rv;
        int ri;
        block_argbest(bv, bi, shv, shi, &rv, &ri);
        if (threadIdx.x == 0) {
            if (ri < 0) ri = 0; /* k <= kept experts is a config invariant; stay in bounds */
            taken[ri] = 1;
            idx[(size_t)t * k + j] = ri;
            wts[(size_t)t * k + j] = s[ri];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum = __fadd_rn(sum, wts[(size_t)t * k + j]);
        for (int j = 0; j < k; j++) {
            float wj = wts[(size_t)t * k + j];
            if (norm) wj = __fdiv_rn(wj, __fadd_rn(sum, 1e-20f));
            wts[(size_t)t * k + j] = __fmul_rn(wj, scaling);
        }
    }
}

static void be_moe_route(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                         float *logits, const float *score_bias, int32_t *idx, float *wts) {
    DEFER(OP_ROUTE, DIMS(d), U(logits), U(score_bias), U(idx), U(wts));
    PROFILE(be, "moe_route n=%d", p->n);
    if (d->E > NT_MAX_EXPERTS || (d->n_group > 1 && d->n_group > NT_MAX_EXPERTS / 2))
        fatal("moe_route: too many experts or groups", NULL);
    NT_LAUNCH(k_moe_route, p->n, ROUTE_THREADS, d->E, d->k, d->n_group, d->topk_group, d->norm_topk_prob,
                                         d->routed_scaling_factor, logits, score_bias, idx, wts);
    LAUNCHED();
}

/* moe_experts' scratch, each part 256-byte aligned: per-(position, slot) outputs eo [n*k][L],
 * inner activations [n*k][mi] (entry order), the quantized activations of the up and down
 * products (entry order), then ints: count, start [E] each, the work items (moe_items), their
 * number, entries [n*k]. */
struct moe_layout {
    size_t eo, inner, qup, qdn, count, start, items, n_items, entries, total;
};

/* The most work items n positions can make with items of G entries: sum over experts of
 * ceil(count / G) <= n k / G + (experts with entries) <= n k / G + min(E, n k); G >= 1. */
static int moe_items(const struct nt_moe_dims *d, int n) {
    int nk = n * d->k;
    return nk + (d->E < nk ? d->E : nk) + 1;
}

static struct moe_layout moe_layout(const struct nt_moe_dims *d, int n) {
    struct moe_layout m;
    size_t nk = (size_t)n * d->k, at = 0;
#define PART(f, bytes) (m.f = at, at = round_up(at + (bytes), 256))
    PART(eo, nk * d->L * sizeof(float));
    PART(inner, nk * d->mi * sizeof(float));
    PART(qup, nk * pk_qx_stride(d->L));
    PART(qdn, nk * pk_qx_stride(d->mi));
    PART(count, (size_t)d->E * 4);
    PART(start, (size_t)d->E * 4);
    PART(items, (size_t)moe_items(d, n) * 4);
    PART(n_items, 4);
    PART(entries, nk * 4);
#undef PART
    m.total = at;
    return m;
}

static size_t be_moe_scratch_floats(struct nt_backend *be, const struct nt_moe_dims *d, int n) {
    return (moe_layout(d, n).total + 255) / sizeof(float) + 64; /* + 256 bytes: base alignment */
}

/* Exclusive prefix sums over the block of two counts per thread (a, b), in thread order; every
 * thread gets its own offsets and the totals. Integers: exact in any order. */
__device__ void block_scan2(int a, int b, int *pa, int *pb, int *ta, int *tb) {
    __shared__ int wa[32], wb[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    int ia = a, ib = b; /* inclusive within the warp */
    for (int o = 1; o < 32; o <<= 1) {
        int xa = __shfl_up_sync(0xffffffffu, ia, o), xb = __shfl_up_sync(0xffffffffu, ib, o);
        if (lane >= o) ia += xa, ib += xb;
    }
    if (lane == 31) wa[warp] = ia, wb[warp] = ib;
    __syncthreads();
    if (warp == 0) {
        int va = lane < nw ? wa[lane] : 0, vb = lane < nw ? wb[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int xa = __shfl_up_sync(0xffffffffu, va, o), xb = __shfl_up_sync(0xffffffffu, vb, o);
            if (lane >= o) va += xa, vb += xb;
        }
        wa[lane] = va, wb[lane] = vb; /* inclusive over the warps */
    }
    __syncthreads();
    int ba = warp ? wa[warp - 1] : 0, bb = warp ? wb[warp - 1] : 0;
    *pa = ba + ia - a;
    *pb = bb + ib - b;
    *ta = wa[nw - 1];
    *tb = wb[nw - 1];
    __syncthreads(); /* wa, wb free again */
}

/* The per-expert entry lists in one block: counts (integer atomics: exact); their exclusive scan
 * and the work items of the grouped products, (expert, group of G of its entries) in
 * increasing order, packed e << 16 | g (each thread a contiguous run of experts, offsets from a
 * block scan); then entries[start[e] + rank] = ts in position order, one warp per expert with
 * ballots over idx in order. The lists depend only on idx, never on how the work is split.
 * Shared: 2 E ints. */
#define PLAN_THREADS 1024
__global__ void __launch_bounds__(PLAN_THREADS) k_moe_plan(int E, int nk, int G, const int32_t *idx, int32_t *count,
                                                           int32_t *start, int32_t *items, int32_t *n_items,
                                                           int32_t *entries) {
    NT_DYNAMIC_SHARED(int32_t, plan_sh);
    int32_t *cnt = plan_sh, *st = plan_sh + E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int ts = threadIdx.x; ts < nk; ts += blockDim.x) {
        int e = idx[ts];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    {
        int per = (E + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per, e1 = min(e0 + per, E);
        int my_entries = 0, my_items = 0;
        for (int e = e0; e < e1; e++) my_entries += cnt[e], my_items += (cnt[e] + G - 1) / G;
        int at, ni, total_entries, total_items;
        block_scan2(my_entries, my_items, &at, &ni, &total_entries, &total_items);
        for (int e = e0; e < e1; e++) {
            st[e] = at;
            at += cnt[e];
            for (int g = 0; g * G < cnt[e]; g++) items[ni++] = e << 16 | g;
        }
        if (threadIdx.x == 0) *n_items = total_items;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        count[e] = cnt[e];
        start[e] = st[e];
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int e = warp; e < E; e += nw) {
        if (!cnt[e]) continue;
        int c = 0;
        for (int ts0 = 0; ts0 < nk; ts0 += 32) {
            int ts = ts0 + lane;
            bool mine = ts < nk && idx[ts] == e;
            unsigned m = __ballot_sync(0xffffffffu, mine);
            if (mine) entries[st[e] + c + __popc(m & ((1u << lane) - 1))] = ts;
            c += __popc(m);
        }
    }
}

/* y[t][c] = sum over slots in slot order of wts * eo (the CPU's mul-then-add chain). */
__global__ void k_moe_combine(int n, int k, int L, const float *wts, const float *eo, float *y) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)n * L) return;
    int t = (int)(i / L), c = (int)(i % L);
    float acc = 0.0f;
    for (int s = 0; s < k; s++)
        acc = __fadd_rn(acc, __fmul_rn(wts[(size_t)t * k + s], eo[((size_t)t * k + s) * L + c]));
    y[i] = acc;
}

/* The device table of an expert array's data pointers, made on first use. All experts must share
 * dtype and shape (the grouped kernels read one shape). */
static const uint8_t *const *expert_table(struct cuda_backend *b, const struct nt_matrix *m, int E) {
    pthread_mutex_lock(&b->lock);
    for (struct expert_table *t = b->tables; t; t = t->next)
        if (t->key == m && t->first == m[0].data && t->E == E) {
            pthread_mutex_unlock(&b->lock);
            return t->dev;
        }
    const uint8_t **host = (const uint8_t **)malloc((size_t)E * sizeof *host);
    struct expert_table *t = (struct expert_table *)calloc(1, sizeof *t);
    if (!host || !t) fatal("moe_experts: out of host memory for the expert table", NULL);
    for (int e = 0; e < E; e++) {
        if (m[e].dtype != m[0].dtype || m[e].rows != m[0].rows || m[e].cols != m[0].cols)
            fatal("moe_experts: experts differ in dtype or shape", m[e].name);
        check_matrix(&m[e]);
        host[e] = (const uint8_t *)m[e].data;
    }
    CK(cudaMalloc((void **)&t->dev, (size_t)E * sizeof *host));
    CK(cudaMemcpy(t->dev, host, (size_t)E * sizeof *host, cudaMemcpyHostToDevice));
    free(host);
    t->key = m;
    t->first = m[0].data;
    t->E = E;
    t->next = b->tables;
    b->tables = t;
    pthread_mutex_unlock(&b->lock);
    return t->dev;
}

/* One grouped product of moe_experts on the lists in `lists`: xmode 1: x row entries[gi] / k
 * (the position), 2: row gi; ymode 1: y row entries[gi], 0: row gi. */
static void grouped_product(const struct pk_product *lists, const uint8_t *const *tab, int dtype, int64_t rows,
                            int64_t cols, int act, const float *x, int xmode, float *y, int ymode, uint8_t *qx,
                            int items) {
    struct pk_product a = *lists;
    a.Wtab = tab;
    a.dtype = dtype;
    a.rows = rows;
    a.cols = cols;
    a.act = act;
    a.x = x;
    a.x_stride = cols;
    a.xmode = xmode;
    a.y = y;
    a.y_stride = rows;
    a.ymode = ymode;
    a.qx = qx;
    pk_run(&a, items);
}

static void be_moe_experts(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                           const struct nt_moe_weights *w, const float *x, const int32_t *idx,
                           const float *wts, float *scratch, float *y) {
    DEFER(OP_EXPERTS, DIMS(d), U(w->expert_up), U(w->expert_up[0].data), U(w->expert_down[0].data), U(x), U(idx),
          U(wts), U(scratch), U(y));
    PROFILE(be, "moe_experts %s n=%d", dtype_name(w->expert_up[0].dtype), p->n);
    int n = p->n, k = d->k, E = d->E, L = d->L, mi = d->mi, nk = n * k;
    const struct nt_matrix *up = w->expert_up, *dn = w->expert_down;
    const uint8_t *const *tup = expert_table(cb(be), up, E);
    const uint8_t *const *tdn = expert_table(cb(be), dn, E);
    if (up[0].rows != mi || up[0].cols != L || dn[0].rows != L || dn[0].cols != mi)
        fatal("moe_experts: expert shapes do not match the dims", up[0].name);
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255);
    struct moe_layout ml = moe_layout(d, n);
    float *eo = (float *)(base + ml.eo), *inner = (float *)(base + ml.inner);
    struct pk_product lists;
    memset(&lists, 0, sizeof lists);
    lists.grouped = 1;
    lists.k = k;
    lists.n = nk;
    lists.idx = idx;
    lists.count = (const int32_t *)(base + ml.count);
    lists.start = (const int32_t *)(base + ml.start);
    lists.items = (const int32_t *)(base + ml.items);
    lists.n_items = (const int32_t *)(base + ml.n_items);
    lists.entries = (const int32_t *)(base + ml.entries);
    lists.group = pk_group_grouped(up[0].dtype, dn[0].dtype, n, k, E);

    /* the entry lists, on the device (E <= NT_MAX_EXPERTS: 32 KB of shared memory at most) */
    NT_LAUNCH_SMEM(k_moe_plan, 1, PLAN_THREADS, 2 * (size_t)E * sizeof(int32_t), 
        E, nk, lists.group, idx, (int32_t *)lists.count, (int32_t *)lists.start, (int32_t *)lists.items,
        (int32_t *)lists.n_items, (int32_t *)lists.entries);
    LAUNCHED();

    /* up: x gathered by position -> inner[gi], relu^2; down: inner[gi] -> eo[entries[gi]] */
    int items = nk / lists.group + (E < nk ? E : nk) + 1;
    grouped_product(&lists, tup, up[0].dtype, mi, L, NT_ACT_RELU2, x, 1, inner, 0, base + ml.qup, items);
    grouped_product(&lists, tdn, dn[0].dtype, L, mi, NT_ACT_NONE, inner, 2, eo, 1, base + ml.qdn, items);

    size_t tot = (size_t)n * L;
    NT_LAUNCH(k_moe_combine, (unsigned)((tot + ELEM_THREADS - 1) / ELEM_THREADS), ELEM_THREADS, n, k, L, wts, eo, y);
    LAUNCHED();
}

/* ---- the bandwidth probe ------------------------------------------------------------------ */

/* Sums a buffer with 16-byte loads (the sum is written so the reads cannot be dropped). */
__global__ void k_read(const uint4 *__restrict__ p, size_t n, uint32_t *sink) {
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* practically never: keeps the loads live */
}

/* 2 GiB: far beyond the 60 MB L2, so every read comes from device memory. Best of 5. */
static double be_read_bandwidth(struct nt_backend *be) {
    const size_t bytes = (size_t)2 << 30;
    CK(cudaSetDevice(cb(be)->device));
    void *buf = NULL;
    if (cudaMalloc(&buf, bytes + 256) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    CK(cudaMemsetAsync(buf, 1, bytes + 256, ST));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cb(be)->device));
    double best = 0;
    for (int rep = 0; rep < 6; rep++) { /* the first is a warm-up */
        float ms = 0;
        CK(cudaEventRecord(t0, ST));
        NT_LAUNCH(k_read, sms * 8, 512, (const uint4 *)buf, bytes / 16, (uint32_t *)((uint8_t *)buf + bytes));
        LAUNCHED();
        CK(cudaEventRecord(t1, ST));
        CK(cudaEventSynchronize(t1));
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (rep > 0 && ms > 0 && bytes / (ms * 1e-3) > best) best = bytes / (ms * 1e-3);
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    CK(cudaFree(buf));
    return best;
}

/* ---- the table ----------------------------------------------------------------------------- */

static const struct nt_backend_ops cuda_ops = {
    "cuda",
    be_destroy,
    be_alloc,
    be_release,
    be_upload,
    be_to_host,
    be_zero,
    be_begin_pass,
    be_end_pass,
    be_embed,
    be_rmsnorm,
    be_add_rmsnorm,
    be_pass_scratch_bytes,
    be_matmul,
    be_mamba_conv,
    be_mamba_scan,
    be_mamba_gated_norm,
    be_attention,
    be_moe_route,
    be_moe_experts,
    be_moe_scratch_floats,
    be_add,
    be_argmax,
    be_read_bandwidth,
};

extern "C" nemotron_status nt_cuda_backend_new(int device, struct nt_backend **out, struct nt_err *err) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "cuda: no usable device: %s", cudaGetErrorString(e));
    if (device < 0 || device >= count)
        return nt_fail(err, NEMOTRON_ERR_ARG, "cuda: device %d does not exist (%d found)", device, count);
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess || (e = cudaSetDevice(device)) != cudaSuccess)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "cuda: device %d: %s", device, cudaGetErrorString(e));
    if (prop.major < 9)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "cuda: device %d (%s) is sm_%d%d; this build holds code for sm_90 (Hopper) and newer",
                       device, prop.name, prop.major, prop.minor);
    struct cuda_backend *b = (struct cuda_backend *)calloc(1, sizeof *b);
    if (!b) return nt_fail(err, NEMOTRON_ERR_NOMEM, "cuda: out of host memory");
    b->base.ops = &cuda_ops;
    b->base.n_threads = 1;
    b->base.pass_default = 512; /* tensor-core tiles and per-expert lists fill with long passes */
    snprintf(b->base.device, sizeof b->base.device, "cuda:%d (%.100s)", device, prop.name);
    b->device = device;
    const char *graphs = getenv("NEMOTRON_CUDA_GRAPHS"), *prof = getenv("NEMOTRON_CUDA_PROFILE");
    b->profile = prof && !strcmp(prof, "1");
    b->no_graphs = (graphs && !strcmp(graphs, "0")) || b->profile;
    pthread_mutex_init(&b->lock, NULL);
    *out = &b->base;
    return NEMOTRON_OK;
}

