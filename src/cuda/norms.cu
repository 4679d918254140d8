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

#include <float.h>

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
 * every pass, so a position's sum has one tree whatever n is. NT_NORM_FAST=0 launches only this
 * kernel (the reference k_rmsnorm_fast is timed against, dev/cuda/README.md); with the default
 * 1 it runs for rows wider than k_rmsnorm_fast holds. */
#ifndef NT_NORM_FAST
#define NT_NORM_FAST 1
#endif
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

/* k_rmsnorm as a short chain (its 5.5 us at one position on the H200 were ~6 dependent trips to
 * memory and three barriers, docs/PERF.md). The row is cut into chunks of 4 (the last one padded
 * with zeros), chunk c = thread c mod T's, T = norm_fast_threads(H): each thread holds its HOLD
 * chunks of the row and of w in registers, loads w's before grid_wait (a constant: launched early,
 * they load while the kernel before ends), then h, o and o2 together, and writes y from the
 * registers. Its sum of squares: per chunk (x x + y y) + (z z + w w), the chunks of a thread in
 * turn, warp butterflies, and one barrier before every warp sums the warps' partials with the
 * same butterfly - a tree fixed by H alone (T is), so a position's bits are the same in any pass.
 * vec: the rows are 16-byte aligned (H, the stride and every pointer multiples of 4 floats) and go
 * as float4 loads and stores; otherwise one float at a time - the same values, the same bits. */
#define NORM_HOLD_MAX 4
__device__ __forceinline__ float4 norm_load(const float *p, int c, int H, bool vec) {
    if (vec) return *(const float4 *)(p + 4 * c);
    int i = 4 * c;
    float4 v;
    v.x = p[i];
    v.y = i + 1 < H ? p[i + 1] : 0.0f;
    v.z = i + 2 < H ? p[i + 2] : 0.0f;
    v.w = i + 3 < H ? p[i + 3] : 0.0f;
    return v;
}
__device__ __forceinline__ void norm_store(float *p, int c, int H, bool vec, float4 v) {
    if (vec) {
        *(float4 *)(p + 4 * c) = v;
        return;
    }
    int i = 4 * c;
    p[i] = v.x;
    if (i + 1 < H) p[i + 1] = v.y;
    if (i + 2 < H) p[i + 2] = v.z;
    if (i + 3 < H) p[i + 3] = v.w;
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    float4 r;
    r.x = __fadd_rn(a.x, b.x);
    r.y = __fadd_rn(a.y, b.y);
    r.z = __fadd_rn(a.z, b.z);
    r.w = __fadd_rn(a.w, b.w);
    return r;
}
template <int HOLD>
__global__ void __launch_bounds__(NORM_THREADS)
    k_rmsnorm_fast(float *h, const float *o, const float *o2, const float *w, int H, float eps, float *y, int y_stride,
                   bool vec) {
    __shared__ float sh[32];
    int C = (H + 3) >> 2, T = blockDim.x, t = blockIdx.x, lane = threadIdx.x & 31;
    float4 wv[HOLD], hv[HOLD];
#pragma unroll
    for (int u = 0; u < HOLD; u++) {
        int c = threadIdx.x + u * T;
        wv[u] = hv[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* chunks past the row: never read */
        if (c < C) wv[u] = norm_load(w, c, H, vec);
    }
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): only w before this */
    grid_launch_dependents();
    float *ht = h + (size_t)t * H;
    const float *ot = o ? o + (size_t)t * H : NULL, *o2t = o2 ? o2 + (size_t)t * H : NULL;
    float ss = 0.0f;
#pragma unroll
    for (int u = 0; u < HOLD; u++) {
        int c = threadIdx.x + u * T;
        if (c >= C) break;
        float4 v = norm_load(ht, c, H, vec);
        if (ot) {
            float4 a = norm_load(ot, c, H, vec);
            if (o2t) a = add4(a, norm_load(o2t, c, H, vec)); /* the shared expert's add */
            v = add4(v, a);
            norm_store(ht, c, H, vec, v);
        }
        hv[u] = v;
        float q = __fadd_rn(__fadd_rn(__fmul_rn(v.x, v.x), __fmul_rn(v.y, v.y)),
                            __fadd_rn(__fmul_rn(v.z, v.z), __fmul_rn(v.w, v.w)));
        ss = __fadd_rn(ss, q);
    }
    ss = warp_sum(ss);
    if (lane == 0) sh[threadIdx.x >> 5] = ss;
    __syncthreads();
    ss = warp_sum(lane < (T >> 5) ? sh[lane] : 0.0f);
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)H), eps)));
    float *yt = y + (size_t)t * y_stride;
#pragma unroll
    for (int u = 0; u < HOLD; u++) {
        int c = threadIdx.x + u * T;
        if (c >= C) break;
        float4 v = hv[u], r;
        r.x = __fmul_rn(wv[u].x, __fmul_rn(v.x, inv));
        r.y = __fmul_rn(wv[u].y, __fmul_rn(v.y, inv));
        r.z = __fmul_rn(wv[u].z, __fmul_rn(v.z, inv));
        r.w = __fmul_rn(wv[u].w, __fmul_rn(v.w, inv));
        norm_store(yt, c, H, vec, r);
    }
}

/* k_rmsnorm_fast's threads for a row of H: a thread a chunk of 4 up to NORM_THREADS, whole warps. */
static int norm_fast_threads(int H) {
    int C = (H + 3) / 4, T = C < NORM_THREADS ? C : NORM_THREADS;
    return (T + 31) / 32 * 32;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* One norm of the pass's n rows: k_rmsnorm_fast where it holds the row (chunks a thread: a power
 * of two up to NORM_HOLD_MAX), k_rmsnorm otherwise (or with NT_NORM_FAST=0). h is only read when
 * o is NULL. */
static void launch_rmsnorm(int n, float *h, const float *o, const float *o2, const float *w, int H, float eps,
                           float *y, int y_stride) {
    int T = norm_fast_threads(H), hold = 1;
    while (hold < NORM_HOLD_MAX && hold * T * 4 < H) hold *= 2;
    bool vec = H % 4 == 0 && y_stride % 4 == 0 && aligned16(h) && aligned16(o) && aligned16(o2) && aligned16(w) &&
               aligned16(y);
    if (NT_NORM_FAST && hold * T * 4 >= H) {
        if (hold == 1) NT_LAUNCH_EARLY(k_rmsnorm_fast<1>, n, T, 0, h, o, o2, w, H, eps, y, y_stride, vec);
        else if (hold == 2) NT_LAUNCH_EARLY(k_rmsnorm_fast<2>, n, T, 0, h, o, o2, w, H, eps, y, y_stride, vec);
        else NT_LAUNCH_EARLY(k_rmsnorm_fast<4>, n, T, 0, h, o, o2, w, H, eps, y, y_stride, vec);
    } else {
        NT_LAUNCH_EARLY(k_rmsnorm, n, NORM_THREADS, 0, h, o, o2, w, H, eps, y, y_stride);
    }
}

void be_rmsnorm(struct nt_backend *be, const struct nt_pass *p, const float *h, const float *w, int H, float eps,
                float *y, int y_stride) {
    OP_START(be, OP_RMSNORM, U(h), U(w), (uint64_t)H, FLT(eps), U(y), (uint64_t)y_stride);
    PROFILE(be, "rmsnorm n=%d", p->n);
    launch_rmsnorm(p->n, (float *)h, NULL, NULL, w, H, eps, y, y_stride);
    LAUNCHED(be);
}

void be_add_rmsnorm(struct nt_backend *be, const struct nt_pass *p, float *h, const float *o, const float *o2,
                    const float *w, int H, float eps, float *y) {
    OP_START(be, OP_ADD_RMSNORM, U(h), U(o), U(o2), U(w), (uint64_t)H, FLT(eps), U(y));
    PROFILE(be, "add_rmsnorm n=%d", p->n);
    launch_rmsnorm(p->n, h, o, o2, w, H, eps, y, H);
    LAUNCHED(be);
}

/* One block per row: the lowest index of the largest value, or -1 for a degenerate row (a NaN or
 * an infinity anywhere, or every value equal when vocab > 1: backend.h's argmax), which the
 * session turns into its numeric error without reading the logits back (its host scan of 131072
 * logits cost a decode step ~0.2 ms on the H100 machine's CPU, session 22). A row 16-byte aligned
 * is read as float4s, ARGMAX_BATCH of them a thread requested at once before any is compared: the loop of one float a step kept one load of a thread in flight, 128
 * trips from memory a thread for a vocabulary of 131072 (54 us under ncu, session 18). Any
 * assignment of indices to threads gives the same answer (better(): the larger value, then the
 * lower index; each thread visits its indices in increasing order). */
#define ARGMAX_BATCH 8
__global__ void __launch_bounds__(1024) k_argmax(const float *logits, int vocab, int32_t *out) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float shv[33];
    __shared__ int shi[33];
    __shared__ int shflags[32]; /* a warp's: 1 a value not finite, 2 a value unlike the first */
    const float *l = logits + (size_t)blockIdx.x * vocab;
    float bv = 0.0f;
    int bi = -1;
    const float first = l[0];
    bool nonfinite = false, unlike = false; /* a NaN or an infinity; a value unlike the first */
    auto take = [&](float v, int i) {
        nonfinite |= !(fabsf(v) <= FLT_MAX);
        unlike |= v != first;
        if (v == v && (bi < 0 || v > bv)) { bv = v; bi = i; }
    };
    const int nq = (uintptr_t)l % 16 == 0 ? vocab / 4 : 0, step = (int)blockDim.x; /* float4s */
    const float4 *l4 = (const float4 *)l;
    for (int base = threadIdx.x; base < nq; base += step * ARGMAX_BATCH) {
        float4 q[ARGMAX_BATCH];
#pragma unroll
        for (int k = 0; k < ARGMAX_BATCH; k++) {
            const float nan = __uint_as_float(0x7fffffffu); /* past the row: not taken (below) */
            q[k] = base + k * step < nq ? l4[base + k * step] : make_float4(nan, nan, nan, nan);
        }
#pragma unroll
        for (int k = 0; k < ARGMAX_BATCH; k++) {
            int i = 4 * (base + k * step);
            if (i < 4 * nq) take(q[k].x, i), take(q[k].y, i + 1), take(q[k].z, i + 2), take(q[k].w, i + 3);
        }
    }
    for (int i = 4 * nq + (int)threadIdx.x; i < vocab; i += step) take(l[i], i);
    unsigned nf = __ballot_sync(0xffffffffu, nonfinite), ul = __ballot_sync(0xffffffffu, unlike);
    if ((threadIdx.x & 31) == 0) shflags[threadIdx.x >> 5] = (nf ? 1 : 0) | (ul ? 2 : 0);
    float rv;
    int ri;
    block_argbest(bv, bi, shv, shi, &rv, &ri); /* its barriers publish shflags too */
    if (threadIdx.x == 0) {
        int f = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) f |= shflags[w];
        out[blockIdx.x] = (f & 1) || (vocab > 1 && !(f & 2)) ? -1 : ri;
    }
}

void be_argmax(struct nt_backend *be, int n, const float *logits, int vocab, int32_t *out) {
    OP_START(be, OP_ARGMAX, (uint64_t)n, U(logits), (uint64_t)vocab, U(out));
    PROFILE(be, "argmax n=%d", n);
    if (n <= 0) return;
    NT_LAUNCH_EARLY(k_argmax, n, 1024, 0, logits, vocab, out); /* 1024: a vocabulary of 131072 is 128 each */
    LAUNCHED(be);
}