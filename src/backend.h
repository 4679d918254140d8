/* backend.h - the contract every backend fills: memory, and the operations of a pass.
 *
 * forward.c writes the layer loop once against this table; the CPU backend (src/cpu/) fills it
 * now and the CUDA backend (src/cuda/) includes this same header so the compiler checks every
 * signature. Pointers marked "resident" live in the backend's memory (host memory for the CPU
 * backend, device memory for CUDA); forward.c only passes them along and never dereferences
 * them. All activations are f32, row-major, one row per position of the pass.
 *
 * Operations return nothing: a backend whose device fails records the fault (nt_backend.fault)
 * and the session reads it after the pass.
 *
 * A pass is n consecutive positions pos0 .. pos0+n-1 of one sequence. Every operation must give
 * each position the same result whatever n is (DESIGN.md "one arithmetic per position"): fixed
 * reduction orders per output element, nothing chosen by the pass size.
 */
#ifndef NT_BACKEND_H
#define NT_BACKEND_H

#include "model/weights.h"

struct nt_backend;
struct nt_forward;

/* Limits every backend accepts (the loader refuses models past them, so kernels may keep one
 * head, one conv window and one position's expert scores on the stack):
 * the widest attention or Mamba head (Nemotron-H: 128 and 64..80), */
#define NT_MAX_HEAD_DIM 1024
/* the most routed experts (Super: 512), */
#define NT_MAX_EXPERTS 4096
/* the longest conv kernel (Nemotron-H: 4; the config reader caps it at this). */
#define NT_MAX_CONV_KERNEL 16

/* What a pass is about; the operations read n and pos0 from here. */
struct nt_pass {
    int n;                    /* positions in the pass, 1 .. pass_max */
    int pos0;                 /* position of the first one in the sequence */
    const int32_t *tokens;    /* host, [n]; valid for the whole pass; NULL when embd is the input */
    const float *embd;        /* resident, [n][hidden]: the positions' input vectors in place of
                               * the tokens' embedding rows (an audio or image encoder's output);
                               * NULL: the input is tokens. A row equal to a token's embedding row
                               * (as f32) gives that token's results bit for bit */
    int snap;                 /* a verify pass: mamba_conv and mamba_scan also write the ring and
                               * the state as they were before each position t into snapshot slot
                               * t (slot 0: the state before the pass), inside the same kernels, so
                               * the sequence can roll back to any position of the pass */
    int want;                 /* the logits it returns (enum nt_logits, forward.h). A session's
                               * passes with equal n, want, snap, mtp and input kind (tokens or
                               * embd) call the same operations with the same arguments, pos0, the
                               * tokens and the embeddings' values aside: a backend may capture
                               * that program once and replay it (the CUDA backend does) */
    int mtp;                  /* the model's MTP step (nt_forward_mtp_pass), not its layers: a
                               * program of its own (a backend that keeps programs keys them by
                               * this too) */
    float *hidden_out;        /* resident [n][hidden] or NULL: the pass also leaves a copy of its
                               * positions' final hidden rows (after norm_f: the MTP step's input)
                               * here; a session sets it on all or none of its main passes */
    int rehearse;             /* only record the program of this pass's kind for the passes of
                               * that kind to come (backend.programs): nothing runs, nothing is
                               * written, pos0 and the tokens are not read. The backend may
                               * decline (a setup the program needs, made by the first pass that
                               * uses it, has not happened yet): the kind is then recorded as if
                               * never rehearsed */
    void *scratch;            /* resident, pass_scratch_bytes for the session's pass_max: the
                               * backend's working memory for the pass (the CPU keeps quantized
                               * activations there); owned by the session, so sessions on
                               * different threads never share it */
};

/* A pass's branch (ops.branch). */
enum nt_branch {
    NT_BRANCH_OPEN,           /* the operations after it form the branch */
    NT_BRANCH_CLOSE,          /* the branch ends; the operations after it run beside it */
    NT_BRANCH_JOIN            /* the operations after it may use the branch's results */
};

/* One range of copy_many. */
struct nt_copy {
    void *dst;
    const void *src;
    size_t bytes;
};

enum nt_act {
    NT_ACT_NONE,
    NT_ACT_RELU2              /* y = max(y, 0)^2 after the bias */
};

/* Dimensions a Mamba-2 operation needs (from the config). */
struct nt_mamba_dims {
    int H, nh, P, N, G, K;    /* hidden, heads, head dim, state, groups, conv kernel */
    int I, CD, zxd;           /* nh*P, I + 2*G*N, I + CD + nh (the in_proj width) */
    float eps;                /* gated norm */
    float dt_lo, dt_hi;       /* time_step_limit: dt = clamp(softplus(.), lo, hi) */
};

struct nt_attn_dims {
    int nq, nkv, dh;
    int n_ctx;                /* rows of the layer's K and V caches */
};

struct nt_moe_dims {
    int E, k, L, mi;          /* experts, chosen per position, expert in/out width, inner */
    int n_group, topk_group, norm_topk_prob;
    float routed_scaling_factor;
};

struct nt_backend_ops {
    const char *name;
    void (*destroy)(struct nt_backend *be);
    /* Optional (NULL: every model the loader accepts). Whether this backend's kernels run a model
     * of f's shapes and weights: NEMOTRON_OK, or NEMOTRON_ERR_UNSUPPORTED with the limit that is
     * passed named in err. Called when a model is loaded, before its weights are made resident,
     * so a model a kernel cannot run is refused then, never at its first pass. */
    nemotron_status (*check_model)(struct nt_backend *be, const struct nt_forward *f, struct nt_err *err);

    /* Memory. alloc returns zeroed resident memory, NULL when there is not enough. */
    void *(*alloc)(struct nt_backend *be, size_t bytes);
    /* Frees what alloc returned (and nothing else: not upload's memory). */
    void (*release)(struct nt_backend *be, void *p);
    /* Makes `bytes` host bytes (e.g. in the mmap) resident for the model's life; the CPU returns
     * `host` itself. NULL when out of memory. */
    const void *(*upload)(struct nt_backend *be, const void *host, size_t bytes);
    void (*to_host)(struct nt_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(struct nt_backend *be, void *dst, size_t bytes);
    /* dst = src, `bytes` bytes between resident buffers (state snapshots and their restore, a
     * pass's input embeddings). May be called inside a pass (it is then part of the pass's
     * program) or outside one (done when it returns, as zero). The ranges must not overlap. */
    void (*copy)(struct nt_backend *be, void *dst, const void *src, size_t bytes);
    /* copy for n ranges at once, in any order (they must not overlap each other): a rollback's or
     * a snapshot's dozens of buffers for the price of one (outside a pass: one wait for all). */
    void (*copy_many)(struct nt_backend *be, int n, const struct nt_copy *ranges);
    /* Writes `bytes` host bytes into the existing resident buffer dst, done when it returns (the
     * host bytes may be reused at once). Never inside a pass: a captured program would replay
     * the bytes of its capture. */
    void (*write)(struct nt_backend *be, void *dst, const void *host, size_t bytes);

    /* Pass operations. end_pass returns 0 when the pass did not run and must be run again, from
     * begin_pass (a backend that replays a rehearsed program checks the pass against it as the
     * operations come and runs nothing until end_pass: a pass that turned out not to match drops
     * the program and runs again, eagerly; at most once a pass), else 1 (also after a fault). */
    void (*begin_pass)(struct nt_backend *be, const struct nt_pass *p);
    int (*end_pass)(struct nt_backend *be, const struct nt_pass *p);

    /* h[t] = emb[tokens[t]] as f32. h: [n][H]. */
    void (*embed)(struct nt_backend *be, const struct nt_pass *p, const struct nt_matrix *emb,
                  float *h);
    /* y[t] = w * h[t] / sqrt(mean(h[t]^2) + eps); h: [n][H], y rows y_stride floats apart (>= H:
     * the MTP step writes two norms side by side into one [n][2H] input). */
    void (*rmsnorm)(struct nt_backend *be, const struct nt_pass *p, const float *h,
                    const float *w, int H, float eps, float *y, int y_stride);
    /* h[t] += o[t] (o2 not NULL: h[t] += (o[t] + o2[t]), the sum rounded before it is added);
     * then y[t] = rmsnorm(h[t]): the residual add - and a MoE layer's shared expert's add - fused
     * with the next norm. */
    void (*add_rmsnorm)(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o,
                        const float *o2, const float *w, int H, float eps, float *y);
    /* Bytes of nt_pass.scratch for passes of up to n positions over matrices of at most
     * max_cols columns. */
    size_t (*pass_scratch_bytes)(struct nt_backend *be, int64_t max_cols, int n);

    /* y[t][r] = act(sum_c W[r][c] x[t][c] + bias[r]) for t < n <= p->n; x: [n][W.cols] with
     * row stride x_stride floats, y: [n][W.rows] with row stride y_stride. bias may be NULL.
     * W is in any stored form (F32, F16, BF16, Q8_2F, Q4TP; the packed products follow the
     * arithmetic src/cpu/matmul_q.c specifies). n is explicit (the head may run on the last
     * position only). */
    void (*matmul)(struct nt_backend *be, const struct nt_pass *p, int n, const struct nt_matrix *W,
                   const float *bias, enum nt_act act, const float *x, int x_stride, float *y,
                   int y_stride);

    /* Mamba-2 causal depthwise conv over the pass, ring advanced position by position:
     * xbc[t][c] = silu(b[c] + sum_k w[c][k] * in[t-K+1+k][c]), in = zxd[.][I + c];
     * ring: [K-1][CD], the last K-1 inputs, oldest first. When p->snap, ring_snap
     * ([>= n][K-1][CD]) slot t receives the ring as it was before position t, t = 0 .. n-1 (the
     * ring after the last position is `ring` itself); otherwise ring_snap is not touched (may be
     * NULL). The snapshots never change xbc or the ring's bits. */
    void (*mamba_conv)(struct nt_backend *be, const struct nt_pass *p,
                       const struct nt_mamba_dims *d, const struct nt_mamba_weights *w,
                       const float *zxd, float *ring, float *ring_snap, float *xbc);
    /* Selective scan over the pass, state advanced position by position (MODEL.md 3.3.4-5).
     * state: [nh][N][P] f32; y: [n][I]. dt from zxd[t][I + CD + h]. When p->snap, state_snap
     * ([>= n][nh][N][P]) slot t receives the state as it was before position t, as ring_snap. */
    void (*mamba_scan)(struct nt_backend *be, const struct nt_pass *p,
                       const struct nt_mamba_dims *d, const struct nt_mamba_weights *w,
                       const float *zxd, const float *xbc, float *state, float *state_snap,
                       float *y);
    /* out[t] = norm_w * groupnorm(y[t] * silu(z[t])), z = zxd[t][0..I), groups of I/G. */
    void (*mamba_gated_norm)(struct nt_backend *be, const struct nt_pass *p,
                             const struct nt_mamba_dims *d, const struct nt_mamba_weights *w,
                             const float *y, const float *zxd, float *out);

    /* Appends the pass's K/V rows (k, v: [n][nkv*dh]) at pos0.. to the caches ([n_ctx][nkv*dh])
     * and computes causal GQA for each position over its own context 0..pos0+t:
     * out[t][j*dh..] = softmax(q.k / sqrt(dh)) v, kv head j / (nq/nkv). q: [n][nq*dh].
     * scratch: attention_scratch_floats(be, d) floats, or more (the session state's; may be NULL
     * when that is 0). */
    void (*attention)(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d,
                      const float *q, const float *k, const float *v, float *k_cache,
                      float *v_cache, float *scratch, float *out);
    /* Floats of the attention scratch for caches of d's shape (0: none needed); a scratch of the
     * larger of two shapes' asks serves both. */
    size_t (*attention_scratch_floats)(struct nt_backend *be, const struct nt_attn_dims *d);

    /* Router (MODEL.md 3.6): logits [n][E] (x . gate, f32) -> sigmoid scores (written over the
     * logits) -> + correction bias for selection -> group-limited top-k -> weights from the
     * unbiased scores, normalised and scaled. idx, wts: [n][k], slot order = descending biased
     * score. */
    void (*moe_route)(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                      float *logits, const float *score_bias, int32_t *idx, float *wts);
    /* Routed experts: for each expert, the (position, slot) entries that chose it, the expert
     * read once for all of them (up, relu^2, down); then y[t] = sum over slots in slot order of
     * wts[t][s] * out[t][s]. x, y: [n][L]. scratch: moe_scratch_floats(be, d, n) floats. */
    void (*moe_experts)(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                        const struct nt_moe_weights *w, const float *x, const int32_t *idx,
                        const float *wts, float *scratch, float *y);
    /* Scratch floats moe_experts needs for a pass of n positions (each backend organises its
     * own: per-thread buffers on the CPU, per-expert lists on a GPU). */
    size_t (*moe_scratch_floats)(struct nt_backend *be, const struct nt_moe_dims *d, int n);
    /* out[t] = the lowest index of the largest logits[t][.] (rows of `vocab`), for t < n; -1 for
     * a degenerate row: one that holds a NaN or an infinity, or whose values are all equal (vocab
     * > 1). The session fails such a pass (NEMOTRON_ERR_NUMERIC) from this alone, without reading
     * the logits back. */
    void (*argmax)(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out);

    /* Optional (NULL: a pass runs its operations in order). Between NT_BRANCH_OPEN and
     * NT_BRANCH_CLOSE a pass calls operations that read only what the operations before the open
     * wrote, and whose results only the operations after NT_BRANCH_JOIN read (forward.c: a MoE
     * layer's shared expert, before its router product and its routed experts): a backend may
     * run them beside the operations between the close and the join. Part of the pass's program
     * (called the same way in every pass of a kind); every pass closes and joins what it opens. */
    void (*branch)(struct nt_backend *be, const struct nt_pass *p, enum nt_branch what);

    /* Optional (NULL: none). The seconds (CLOCK_MONOTONIC) the calling thread has spent so far in
     * one-off work of passes on backends of this kind: recording pass programs (a capture's host
     * time, rehearsals). A caller that times passes to choose between them (the speculative
     * decoder's pay check) takes them off: they say nothing of the kind's cost. */
    double (*one_off_seconds)(struct nt_backend *be);

    /* Optional (NULL: none). The read bandwidth of the backend's resident memory in bytes/s,
     * measured now (benchmarks hold decoding against it); 0 when it cannot be measured. */
    double (*read_bandwidth)(struct nt_backend *be);
};

struct nt_backend {
    const struct nt_backend_ops *ops;
    int n_threads;            /* host threads the backend's operations use */
    int pass_default;         /* the pass size sessions take when they do not choose one */
    int programs;             /* it keeps pass programs (the CUDA backend's graphs: begin_pass
                               * records a kind's program once and replays it) and asks sessions
                               * to rehearse the kinds they expect (nt_pass.rehearse), which takes
                               * the recording off the kind's passes (src/engine/rehearsal.c). A
                               * rehearsal on one thread may meet passes on others (a server's
                               * sessions), of the same kind too: the backend keeps its programs
                               * whole through that */
    char device[128];         /* what it runs on, for people: "cpu", "cuda:0 (NVIDIA H200)" */
    char alloc_error[256];    /* why the last alloc/upload returned NULL: the bytes asked for and
                               * the bytes free ("" when none failed); the loader quotes it */
    char fault[256];          /* "" while the device works. A device error (a failed launch, a
                               * kernel's illegal address, a lost device, a broken invariant inside
                               * an operation) is recorded here, the first one's message naming the
                               * call and the operation, instead of aborting the process; from then
                               * on every operation does nothing (a GPU's context is unusable after
                               * such an error). Sessions report it as NEMOTRON_ERR_DEVICE. The CPU
                               * backend never sets it. */
};

/* Creates the CPU backend with n_threads threads (<= 0: physical cores). NULL when out of memory.
 * NEMOTRON_CPU=scalar in the environment selects the scalar kernels (the SIMD ones by default
 * where the processor has AVX2, FMA and F16C). */
struct nt_backend *nt_cpu_backend_new(int n_threads);

#endif /* NT_BACKEND_H */
