/* backend_cuda.cu - the CUDA backend itself: device memory, faults, the check a model must pass
 * to be loaded, the bandwidth probe, and the ops table whose operations live in the other files
 * (ops.cuh lists them).
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
 * FAULTS (cuda_util.cuh): a failed call, a kernel's illegal address, a broken invariant inside an
 * operation is recorded in base.fault and the backend does nothing more; sessions report it as
 * NEMOTRON_ERR_DEVICE. Shapes the kernels cannot run are refused at load (be_check_model).
 */
extern "C" {
#include "cuda_backend.h"
#include "../forward.h"
}
#include "ops.cuh"
#include "products.cuh"

#include <stdarg.h>

/* Uploads are placed in slabs of this size (one cudaMalloc each), 256-byte aligned inside: a
 * model has thousands of expert matrices, and one allocation each would round every one up to
 * the driver's 2 MiB granularity (GBs lost on Nemotron-3-Nano). Larger uploads get their own. */
#ifndef NT_CUDA_EMULATION
#define SLAB_BYTES ((size_t)1 << 30)
#else
#define SLAB_BYTES ((size_t)0) /* the host emulation: every upload its own exact allocation, so
                                * its checks see a kernel read past a tensor */
#endif

/* ---- faults -------------------------------------------------------------------------------- */

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

/* The first fault wins: later ones are its consequences. */
static void record_fault(struct nt_backend *be, const char *msg) {
    pthread_mutex_lock(&fault_lock);
    if (!FAULTED(be)) snprintf(be->fault, sizeof be->fault, "%s", msg);
    pthread_mutex_unlock(&fault_lock);
}

bool cuda_ok(struct nt_backend *be, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return true;
    char msg[sizeof be->fault];
    snprintf(msg, sizeof msg, "cuda: %s: %s (in %s, %s:%d)", call, cudaGetErrorString(e), op_now(), file, line);
    record_fault(be, msg);
    return false;
}

void cuda_fault(struct nt_backend *be, const char *fmt, ...) {
    char msg[sizeof be->fault];
    int at = snprintf(msg, sizeof msg, "cuda: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + at, sizeof msg - at, fmt, ap);
    va_end(ap);
    record_fault(be, msg);
}

/* ---- memory -------------------------------------------------------------------------------- */

/* Why an allocation of `bytes` failed, for alloc_error: the fault, or the memory free now. */
static void set_alloc_error(struct cuda_backend *b, const char *what, size_t bytes, cudaError_t e) {
    if (e != cudaErrorMemoryAllocation) cuda_ok(&b->base, e, what, __FILE__, __LINE__);
    if (FAULTED(&b->base)) {
        snprintf(b->base.alloc_error, sizeof b->base.alloc_error, "%s", b->base.fault);
        return;
    }
    size_t free_b = 0, total_b = 0;
    cudaGetLastError(); /* clear the non-sticky allocation error before asking */
    cudaMemGetInfo(&free_b, &total_b);
    snprintf(b->base.alloc_error, sizeof b->base.alloc_error,
             "cuda device %d: %s of %.3f GB failed: %.3f GB free of %.3f GB", b->device, what,
             bytes / 1e9, free_b / 1e9, total_b / 1e9);
}

/* cudaMalloc, with the reason recorded when it fails. */
static void *device_malloc(struct cuda_backend *b, const char *what, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaSuccess;
    if (!FAULTED(&b->base) && (e = cudaMalloc(&p, bytes)) == cudaSuccess) return p;
    set_alloc_error(b, what, bytes, e);
    return NULL;
}

static void *be_alloc(struct nt_backend *be, size_t bytes) {
    struct cuda_backend *b = cb(be);
    if (bytes == 0) bytes = 1;
    if (!FAULTED(be)) CK(be, cudaSetDevice(b->device));
    void *p = device_malloc(b, "alloc", bytes);
    /* on this thread's stream, never the legacy one: a legacy-stream call (cudaMemset) while
     * another thread captures a pass program fails ("would make the legacy stream depend on a
     * capturing blocking stream"), as a server's slots do at once */
    if (p && !(CK(be, cudaMemsetAsync(p, 0, bytes, ST)) && CK(be, cudaStreamSynchronize(ST)))) {
        cudaFree(p);
        set_alloc_error(b, "alloc", bytes, cudaSuccess);
        return NULL;
    }
    return p;
}

/* Whether p is one of the upload list's allocations (a slab, or a large upload of its own). */
static bool kept_allocation(struct cuda_backend *b, const void *p) {
    pthread_mutex_lock(&b->lock);
    bool kept = false;
    for (size_t i = 0; i < b->n_slabs && !kept; i++) kept = b->slabs[i] == p;
    pthread_mutex_unlock(&b->lock);
    return kept;
}

static void be_release(struct nt_backend *be, void *p) {
    if (!p) return;
    struct cuda_backend *b = cb(be);
    /* an upload's memory is the model's until the backend goes: freeing a slab's start would take
     * every upload placed in it along */
    if (kept_allocation(b, p)) return cuda_fault(be, "release: %p is upload's memory, not alloc's", p);
    drop_graphs_of(b, p); /* a pass scratch: its session's programs go with it */
    if (FAULTED(be)) { /* the frees may fail too: the memory goes with the context */
        cudaSetDevice(b->device);
        cudaFree(p);
        cudaGetLastError();
        return;
    }
    /* a pointer alloc did not give (an upload's, inside a slab) fails here, named as the release,
     * not left for the next launch's check to report as its own */
    if (CK(be, cudaSetDevice(b->device))) CK(be, cudaFree(p));
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

/* A new allocation of `bytes` kept in the slab list, or NULL with alloc_error set. */
static uint8_t *kept_malloc(struct cuda_backend *b, size_t bytes) {
    void *p = device_malloc(b, "upload", bytes);
    if (p && !keep_slab(b, p)) {
        cudaFree(p);
        p = NULL;
        snprintf(b->base.alloc_error, sizeof b->base.alloc_error, "out of host memory for the upload list");
    }
    return (uint8_t *)p;
}

static const void *be_upload(struct nt_backend *be, const void *host, size_t bytes) {
    struct cuda_backend *b = cb(be);
    size_t need = round_up(bytes ? bytes : 1, 256);
    uint8_t *dst = NULL;
    if (!FAULTED(be)) CK(be, cudaSetDevice(b->device));
    pthread_mutex_lock(&b->lock);
    if (need > SLAB_BYTES / 4) { /* large: its own allocation, the slab keeps filling */
        dst = kept_malloc(b, bytes ? bytes : 1);
    } else {
        if (!b->slab || b->slab_used + need > SLAB_BYTES) {
            uint8_t *p = kept_malloc(b, SLAB_BYTES);
            if (p) {
                b->slab = p;
                b->slab_used = 0;
            }
        }
        if (b->slab && b->slab_used + need <= SLAB_BYTES) {
            dst = b->slab + b->slab_used;
            b->slab_used += need;
        }
    }
    pthread_mutex_unlock(&b->lock);
    if (dst && bytes &&
        !(CK(be, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ST)) && CK(be, cudaStreamSynchronize(ST)))) {
        set_alloc_error(b, "upload", bytes, cudaSuccess);
        return NULL; /* the device is unusable: what was placed stays with the context */
    }
    return dst;
}

/* After a fault the destination is left as it was: the caller sees the fault and discards it. */
static void be_to_host(struct nt_backend *be, void *dst, const void *src, size_t bytes) {
    if (op_start(be, OP_TO_HOST, NULL, 0)) return;
    CK(be, cudaSetDevice(cb(be)->device)) &&
        (!bytes || CK(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ST))) &&
        CK(be, cudaStreamSynchronize(ST));
}

static void be_zero(struct nt_backend *be, void *dst, size_t bytes) {
    if (op_start(be, OP_MEMORY, NULL, 0)) return;
    CK(be, cudaSetDevice(cb(be)->device)) && (!bytes || CK(be, cudaMemsetAsync(dst, 0, bytes, ST))) &&
        CK(be, cudaStreamSynchronize(ST)); /* a session may next run on another thread's stream */
}

/* Inside a pass the copy joins the pass's program (captured with it); outside one it is done
 * when it returns, as zero, for the same reason. */
static void be_copy(struct nt_backend *be, void *dst, const void *src, size_t bytes) {
    OP_START(be, OP_MEMORY, U(dst), U(src), (uint64_t)bytes);
    if (pass_open()) {
        if (bytes) CK(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ST));
        return;
    }
    CK(be, cudaSetDevice(cb(be)->device)) &&
        (!bytes || CK(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ST))) &&
        CK(be, cudaStreamSynchronize(ST));
}

/* The ranges queued on the thread's stream, then one wait (outside a pass) for all: a rollback
 * (2 copies a Mamba layer, 46 on Nano) was 46 synchronous copies, 0.6-0.7 ms (docs/PERF.md). */
static void be_copy_many(struct nt_backend *be, int n, const struct nt_copy *ranges) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += ranges[i].bytes;
    OP_START(be, OP_MEMORY, (uint64_t)n, n ? U(ranges[0].dst) : 0, total);
    bool inside = pass_open();
    if (!inside && !CK(be, cudaSetDevice(cb(be)->device))) return;
    for (int i = 0; i < n; i++)
        if (ranges[i].bytes &&
            !CK(be, cudaMemcpyAsync(ranges[i].dst, ranges[i].src, ranges[i].bytes, cudaMemcpyDeviceToDevice, ST)))
            return;
    if (!inside) CK(be, cudaStreamSynchronize(ST));
}

/* Host bytes into a resident buffer: never inside a pass (backend.h), where a capture would keep
 * the bytes it saw; the caller's bytes may be reused once it returns (it waits). */
static void be_write(struct nt_backend *be, void *dst, const void *host, size_t bytes) {
    if (op_start(be, OP_MEMORY, NULL, 0)) return;
    if (pass_open()) return cuda_fault(be, "write: host bytes written inside a pass (backend.h forbids it)");
    CK(be, cudaSetDevice(cb(be)->device)) &&
        (!bytes || CK(be, cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ST))) &&
        CK(be, cudaStreamSynchronize(ST));
}

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

/* ---- the model check ----------------------------------------------------------------------- */

struct limits_walk {
    char why[256];
};

static void matrix_limits(struct nt_matrix *m, void *ctx) {
    struct limits_walk *lw = (struct limits_walk *)ctx;
    if (!lw->why[0]) product_limits(m, lw->why, sizeof lw->why);
}

/* Every kernel's limits against the model's shapes and weights, before anything is uploaded. */
static nemotron_status be_check_model(struct nt_backend *be, const struct nt_forward *f, struct nt_err *err) {
    struct limits_walk lw;
    lw.why[0] = 0;
    const char *pattern = f->cfg->pattern;
    if (strchr(pattern, NT_LAYER_MAMBA)) mamba_limits(&f->mamba, lw.why, sizeof lw.why);
    if (!lw.why[0] && strchr(pattern, NT_LAYER_ATTENTION)) attention_limits(f->nq, f->nkv, f->dh, lw.why, sizeof lw.why);
    for (int i = 0; i < f->cfg->n_layer && !lw.why[0]; i++)
        if (f->w->layers[i].kind == NT_LAYER_MOE) moe_limits(&f->moe, &f->w->layers[i].moe, lw.why, sizeof lw.why);
    if (!lw.why[0]) nt_weights_for_each((struct nt_weights *)f->w, matrix_limits, NULL, &lw);
    if (lw.why[0]) return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "%s: %s", be->device, lw.why);
    return NEMOTRON_OK;
}

/* ---- the bandwidth probe ------------------------------------------------------------------- */

/* Sums a buffer with 16-byte loads (the sum is written so the reads cannot be dropped). */
__global__ void k_read(const uint4 *__restrict__ p, size_t n, uint32_t *sink) {
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* practically never: keeps the loads live */
}

/* 2 GiB: far beyond the 60 MB L2, so every read comes from device memory. Best of 5; 0 when it
 * cannot be measured (no memory free for the buffer, a fault). */
static double be_read_bandwidth(struct nt_backend *be) {
    const size_t bytes = (size_t)2 << 30;
    if (op_start(be, OP_MEMORY, NULL, 0) || !CK(be, cudaSetDevice(cb(be)->device))) return 0;
    void *buf = NULL;
    if (cudaMalloc(&buf, bytes + 256) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    cudaEvent_t t0 = NULL, t1 = NULL;
    int sms = 0;
    double best = 0;
    bool ok = CK(be, cudaMemsetAsync(buf, 1, bytes + 256, ST)) && CK(be, cudaEventCreate(&t0)) &&
              CK(be, cudaEventCreate(&t1)) &&
              CK(be, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cb(be)->device));
    for (int rep = 0; ok && rep < 6; rep++) { /* the first is a warm-up */
        float ms = 0;
        ok = CK(be, cudaEventRecord(t0, ST));
        if (!ok) break;
        NT_LAUNCH(k_read, sms * 8, 512, (const uint4 *)buf, bytes / 16, (uint32_t *)((uint8_t *)buf + bytes));
        ok = LAUNCHED(be) && CK(be, cudaEventRecord(t1, ST)) && CK(be, cudaEventSynchronize(t1)) &&
             CK(be, cudaEventElapsedTime(&ms, t0, t1));
        if (ok && rep > 0 && ms > 0 && bytes / (ms * 1e-3) > best) best = bytes / (ms * 1e-3);
    }
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    cudaFree(buf);
    return ok ? best : 0;
}

/* ---- the table ----------------------------------------------------------------------------- */

static const struct nt_backend_ops cuda_ops = {
    "cuda",
    be_destroy,
    be_check_model,
    be_alloc,
    be_release,
    be_upload,
    be_to_host,
    be_zero,
    be_copy,
    be_copy_many,
    be_write,
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
    be_attention_scratch_floats,
    be_moe_route,
    be_moe_experts,
    be_moe_scratch_floats,
    be_argmax,
    be_branch,
    be_one_off_seconds,
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
    if ((e = dc_setup()) != cudaSuccess || (e = pk_setup(device)) != cudaSuccess)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "cuda: device %d: preparing the product kernels: %s", device,
                       cudaGetErrorString(e));
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
    b->log_graphs = graphs && !strcmp(graphs, "log");
    b->base.programs = !b->no_graphs;
    pthread_mutex_init(&b->lock, NULL);
    *out = &b->base;
    return NEMOTRON_OK;
}

