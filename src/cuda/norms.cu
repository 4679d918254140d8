/* norms.cu - the CUDA backend's row operations: the embedding lookup (any weight dtype, the block
 * types decoded as the CPU does), RMS norm (with the
 * residual add - and a MoE layer's shared expert - fused in front), and the argmax of logits rows.
 *
 * Reductions the CPU runs as one serial sum (the norm's sum of squares) are fixed-shape block
 * trees here (block_sum): deterministic whatever the pass, different from the CPU in the last
 * bits. The argmax keeps the CPU's winner exactly (largest, then lowest index).
 */
#include "ggml_blocks.cuh"
#include "ops.cuh"

__global__ void k_embed(const int32_t *tokens, const uint8_t *emb, int dt, int64_t V, int H, float *h) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    int t = blockIdx.x;
    int64_t tok = tokens[t];
    float *dst = h + (size_t)t * H;
    bool in = tok >= 0 && tok < V; /* memory-safe */
    const uint8_t *row = gg_is_block(dt) && in ? emb + tok * gg_row_bytes(dt, H) : NULL;
    for (int c = threadIdx.x; c < H; c += blockDim.x)
        dst[c] = !in ? 0.0f : row ? gg_value(dt, row, c) : load_w(emb, tok * H + c, dt);
}

void be_embed(struct nt_backend *be, const struct nt_pass *p, const struct nt_matrix *emb, float *h) {
    OP_START(be, OP_EMBED, U(emb->data), (uint64_t)emb->dtype, U(h));
    PROFILE(be, "embed");
    NT_LAUNCH_EARLY(k_embed, p->n, ELEM_THREADS, 0, tokens_of(p), (const uint8_t *)emb->data, emb->dtype, emb->rows,
              (int)emb->cols, h);
    LAUNCHED(be);
}

/* One block of NORM_THREADS per position: h (+= o), then y = w * (h * inv). A decode step runs
 * 53 of these on one position each: with 256 threads each thread walked ~10 dependent loads of a
 * 2688-wide row twice (ncu: 10.9 us a call); 1024 threads walk ~3. The block size is the same for
 * every pass, so a position's sum has one tree whatever n is. */
#define NORM_THREADS 1024
__global__ void __launch_bounds__(NORM_THREADS)
    k_rmsnorm(float *h, const float *o, const float *o2, const float *w, int H, float eps, float *y, int y_stride) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float sh[33];
    int t = blockIdx.x;
    float *ht = h + (size_t)t * H;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float v = ht[i];
        if (o) {
            float a = o[(size_t)t * H + i];
            if (o2) a = __fadd_rn(a, o2[(size_t)t * H + i]); /* the shared expert's add */
            v = __fadd_rn(v, a);
            ht[i] = v;
        }
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    ss = block_sum(ss, sh);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)H), eps)));
    for (int i = threadIdx.x; i < H; i += blockDim.x) y[(size_t)t * y_stride + i] = __fmul_rn(w[i], __fmul_rn(ht[i], inv));
}

void be_rmsnorm(struct nt_backend *be, const struct nt_pass *p, const float *h, const float *w, int H, float eps,
                float *y, int y_stride) {
    OP_START(be, OP_RMSNORM, U(h), U(w), (uint64_t)H, FLT(eps), U(y), (uint64_t)y_stride);
    PROFILE(be, "rmsnorm n=%d", p->n);
    /* h only read when o is NULL */
    NT_LAUNCH_EARLY(k_rmsnorm, p->n, NORM_THREADS, 0, (float *)h, NULL, NULL, w, H, eps, y, y_stride);
    LAUNCHED(be);
}

void be_add_rmsnorm(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o, const float *o2,
                    const float *w, int H, float eps, float *y) {
    OP_START(be, OP_ADD_RMSNORM, U(h), U(o), U(o2), U(w), (uint64_t)H, FLT(eps), U(y));
    PROFILE(be, "add_rmsnorm n=%d", p->n);
    NT_LAUNCH_EARLY(k_rmsnorm, p->n, NORM_THREADS, 0, h, o, o2, w, H, eps, y, H);
    LAUNCHED(be);
}

/* One block per row: the lowest index of the largest value that is a number (0 when none is). */
__global__ void k_argmax(const float *logits, int vocab, int32_t *out) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float shv[33];
    __shared__ int shi[33];
    const float *l = logits + (size_t)blockIdx.x * vocab;
    float bv = 0.0f;
    int bi = -1;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = l[i];
        if (v == v && (bi < 0 || v > bv)) { bv = v; bi = i; } /* a NaN never wins */
    }
    float rv;
    int ri;
    block_argbest(bv, bi, shv, shi, &rv, &ri);
    if (threadIdx.x == 0) out[blockIdx.x] = ri < 0 ? 0 : ri;
}

void be_argmax(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out) {
    OP_START(be, OP_ARGMAX, (uint64_t)n, U(logits), (uint64_t)vocab, U(out));
    PROFILE(be, "argmax n=%d", n);
    if (n <= 0) return;
    NT_LAUNCH_EARLY(k_argmax, n, 1024, 0, logits, vocab, out); /* 1024: a vocabulary of 131072 is 128 each */
    LAUNCHED(be);
}