/* ops.cuh - what the files of the CUDA backend share beyond cuda_util.cuh: the backend's state,
 * the pass scratch's layout, the hooks every operation opens with (the fault check, the pass
 * program's fingerprint, the profile) and each operation's declaration.
 *
 * The backend's files, one concern each:
 *     backend_cuda.cu  the backend: memory, the model check, the bandwidth probe, the ops table
 *     pass.cu          pass programs (CUDA graphs): begin/end pass, fingerprints, the profile
 *     norms.cu         embed, rmsnorm (+ the residual add), argmax
 *     products.cu      matmul: the packed and float product kernels, plain and grouped
 *     ggml.cu          the products of llama.cpp's block types (ggml_blocks.cuh: their unpacking)
 *     decode.cu        the products of a pass of one position: streaming kernel, experts fused
 *     mamba.cu         Mamba-2 conv, scan, gated norm
 *     attention.cu     the KV append and attention (tiles of keys folded in order)
 *     moe.cu           the router, the per-expert entry lists, the routed experts
 *
 * Every operation runs on the calling thread's default stream (ST), so one session's operations
 * are ordered with each other and with to_host without events.
 */
#ifndef NT_CUDA_OPS_CUH
#define NT_CUDA_OPS_CUH

#include "cuda_util.cuh"

#include <pthread.h>

/* ---- the backend ------------------------------------------------------------------------- */

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
 * launch, with their arguments' fingerprint (pass.cu says why it is checked). */
struct pass_graph {
    const void *scratch;         /* the session's pass scratch: one session, one set of buffers */
    int n, want;
    int snap, embd;              /* a verify pass; the input is embeddings (not tokens) */
    int mtp, keep;               /* the MTP step's program; the pass keeps its hidden rows */
    int runs;                    /* eager runs so far (the program is captured on the second) */
    int rehearsed;               /* exec was recorded by a rehearsal: the kind's first pass replays
                                  * it if its fingerprint is the same, else drops it and runs again */
    uint64_t print;              /* fingerprint of every operation and argument of the pass */
    cudaGraphExec_t exec;        /* NULL until captured */
    uint64_t used;               /* clock of the last use: the least recently used is evicted */
    /* Sessions on other threads share the slots (src/engine/rehearsal.c), so a kind may be
     * rehearsed on one thread while its pass runs on another. Both flags are b->lock's: a slot
     * held or being rehearsed is never evicted; a pass of a kind being rehearsed runs eagerly
     * (never captures: the rehearsal's program comes), and a rehearsal skips a held kind. */
    int held;                    /* a pass of the kind is between begin_pass and end_pass */
    int rehearsing;              /* a rehearsal is recording the kind's program */
};

/* Passes kept captured per backend: a decode kind, a full prefill kind and a remainder or two
 * per live session, and with speculation a verify kind per draft length (2 .. K + 1) and an MTP
 * kind per kept length; more are evicted least-recently-used (a recapture costs ~1 ms). */
#define MAX_GRAPHS 96

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
    int log_graphs;              /* NEMOTRON_CUDA_GRAPHS=log: each capture's kind and cost on stderr */
    int profile;                 /* NEMOTRON_CUDA_PROFILE=1: eager passes, each operation timed */
};

static inline struct cuda_backend *cb(struct nt_backend *be) { return (struct cuda_backend *)be; }

/* ---- the pass scratch ---------------------------------------------------------------------- */

/* The meta words (pos0, n: written before each pass, so the kernels that depend on the position
 * read them on the device and one captured program serves every pass of its kind), the pass's
 * tokens (embed reads them on the device), then the quantized activations of one packed product
 * (products.cu: n rows of pk_qx_stride bytes). */
#define META_BYTES 256
struct pass_meta {
    int32_t pos0, n;
};
static inline size_t tok_bytes(int n) { return round_up((size_t)(n > 0 ? n : 1) * 4, 256); }
static inline const struct pass_meta *meta_of(const struct nt_pass *p) {
    return (const struct pass_meta *)p->scratch;
}
static inline const int32_t *tokens_of(const struct nt_pass *p) {
    return (const int32_t *)((const uint8_t *)p->scratch + META_BYTES);
}
static inline uint8_t *qx_of(const struct nt_pass *p) {
    return (uint8_t *)p->scratch + META_BYTES + tok_bytes(p->n);
}

/* ---- what every operation opens with ------------------------------------------------------ */

/* The operations, for fingerprints and for the fault message's "in <operation>". */
enum cuda_op {
    OP_NONE, OP_EMBED, OP_RMSNORM, OP_ADD_RMSNORM, OP_MATMUL, OP_CONV, OP_SCAN, OP_GNORM, OP_ATTENTION,
    OP_ROUTE, OP_EXPERTS, OP_ARGMAX, OP_BEGIN_PASS, OP_END_PASS, OP_TO_HOST, OP_MEMORY, OP_BRANCH
};

/* Starts operation `op` with the arguments v[0..nv): names it for fault messages, adds it to the
 * pass's fingerprint, and says whether it must return at once: the backend has faulted, or the
 * operation is part of a replayed program (pass.cu). */
bool op_start(struct nt_backend *be, enum cuda_op op, const uint64_t *v, int nv);
/* The name of the operation running on this thread (for fault messages). */
const char *op_now(void);

#define U(x) ((uint64_t)(uintptr_t)(x))
/* a small struct's contents (the dims of an op), so a changed dimension changes the print */
uint64_t bytes_print(const void *p, size_t n);
#define DIMS(d) bytes_print(d, sizeof *(d))
static inline uint64_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#define FLT(x) float_bits(x)
#define OP_START(be, op, ...)                                                                      \
    do {                                                                                           \
        const uint64_t v_[] = {__VA_ARGS__};                                                       \
        if (op_start(be, op, v_, (int)(sizeof v_ / sizeof v_[0]))) return;                         \
    } while (0)

/* THE PROFILE (NEMOTRON_CUDA_PROFILE=1, a development aid): every operation of the eager passes
 * is timed with events around it, summed per label (operation, and for products the format,
 * shape and positions); pass.cu prints the table when the backend is destroyed. */
struct op_timer {
    bool on;
    char label[96];
    cudaEvent_t t0, t1;
    op_timer(struct nt_backend *be, const char *fmt, ...);
    ~op_timer();
};
#define PROFILE(be, ...) op_timer timer_(be, __VA_ARGS__)
void prof_print(void);
const char *dtype_name(int dt);

/* Whether a pass is open on this thread (between begin_pass and end_pass): an operation that
 * would wait for the stream must not then (a capture cannot contain a wait). */
bool pass_open(void);
/* Whether the open pass is a rehearsal (nt_pass.rehearse): an operation whose setup has not
 * happened yet (it would allocate and wait) declines it with pass_decline instead. */
bool pass_rehearsing(void);
void pass_decline(void);

/* Drops the captured programs of the session whose pass scratch is `scratch`. */
void drop_graphs_of(struct cuda_backend *b, const void *scratch);

/* ---- the operations (backend_cuda.cu puts them in the table) -------------------------------- */

double be_one_off_seconds(struct nt_backend *be);
void be_branch(struct nt_backend *be, const struct nt_pass *p, enum nt_branch what);
void be_begin_pass(struct nt_backend *be, const struct nt_pass *p);
int be_end_pass(struct nt_backend *be, const struct nt_pass *p);
size_t be_pass_scratch_bytes(struct nt_backend *be, int64_t max_cols, int n);
void be_embed(struct nt_backend *be, const struct nt_pass *p, const struct nt_matrix *emb, float *h);
void be_rmsnorm(struct nt_backend *be, const struct nt_pass *p, const float *h, const float *w, int H, float eps,
                float *y, int y_stride);
void be_add_rmsnorm(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o, const float *o2,
                    const float *w, int H, float eps, float *y);
void be_argmax(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out);
void be_matmul(struct nt_backend *be, const struct nt_pass *p, int n, const struct nt_matrix *W, const float *bias,
               enum nt_act act, const float *x, int x_stride, float *y, int y_stride);
void be_mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, float *ring, float *ring_snap, float *xbc);
void be_mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, const float *xbc, float *state,
                   float *state_snap, float *y);
void be_mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                         const struct nt_mamba_weights *w, const float *y, const float *zxd, float *out);
void be_attention(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d, const float *q,
                  const float *k, const float *v, float *k_cache, float *v_cache, float *scratch, float *out);
size_t be_attention_scratch_floats(struct nt_backend *be, const struct nt_attn_dims *d);
void be_moe_route(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d, float *logits,
                  const float *score_bias, int32_t *idx, float *wts);
void be_moe_experts(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                    const struct nt_moe_weights *w, const float *x, const int32_t *idx, const float *wts,
                    float *scratch, float *y);
size_t be_moe_scratch_floats(struct nt_backend *be, const struct nt_moe_dims *d, int n);

/* The grid of a persistent kernel k (blocks of `threads` threads, smem bytes of dynamic shared
 * memory) over `work` items: what the SMs hold at once (the occupancy the runtime reports), no
 * more than the items; a second wave would wait for the first one's tail. False (and the backend
 * faulted) when the runtime says no or no block fits. */
template <class K>
static inline bool resident_grid(struct nt_backend *be, K k, const char *name, int threads, size_t smem, size_t work,
                                 int *grid) {
    int sms = 0, per_sm = 0;
    if (!CK(be, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cb(be)->device)) ||
        !CK(be, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem)))
        return false;
    if (per_sm < 1) {
        cuda_fault(be, "%s: %zu bytes of shared memory leave no room for a block", name, smem);
        return false;
    }
    size_t most = (size_t)sms * (size_t)per_sm;
    *grid = (int)(work < most ? work : most);
    return true;
}

/* The limits each file's kernels hold, for the model check at load (backend_cuda.cu): "" when
 * the shapes are held, else the limit that is not, written to why. */
void mamba_limits(const struct nt_mamba_dims *d, char *why, size_t cap);
void attention_limits(int nq, int nkv, int dh, char *why, size_t cap);
void moe_limits(const struct nt_moe_dims *d, const struct nt_moe_weights *w, char *why, size_t cap);
void product_limits(const struct nt_matrix *W, char *why, size_t cap);

#endif
