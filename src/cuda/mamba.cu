/* mamba.cu - the CUDA backend's Mamba-2 operations: the causal depthwise conv, the selective
 * scan (state in registers for the whole pass) and the gated group norm, each a kernel of its own,
 * and for a pass of one position (decode) the three fused in one kernel (THE FUSED STEP below).
 * mamba_limits says which shapes these kernels hold; a model past them is refused when it is
 * loaded.
 */
#include "ops.cuh"

/* THE CONV. Position t's output needs only the K - 1 inputs before it (from the pass, or from the
 * ring for the first K - 1 positions) and its own: the positions are independent. A pass of one
 * position runs the fused step below, or (its conv called alone) k_mamba_conv_one: a thread per
 * channel, the ring read, shifted and written back. A longer pass runs k_mamba_conv: a thread per
 * (position, channel), each reading its window from the inputs or the ring, then
 * k_mamba_ring_update writes the new ring (its last K - 1 inputs) once every position has read
 * the old one (a second launch: blocks cannot wait for each other). The taps are the same chain in
 * all (conv_taps): acc = bias, + w[k] r[k] for k < K - 1 in order, + w[K - 1] in; then silu.
 * snap (a verify pass; else NULL): slot t gets the ring before position t. */

/* Input p of channel c relative to the pass start: p < 0 is in the ring (ring[K - 1 + p]). */
__device__ __forceinline__ float conv_input(int p, int K, int CD, int I, int zxdw, int c, const float *zxd,
                                            const float *ring) {
    return p < 0 ? ring[(size_t)(K - 1 + p) * CD + c] : zxd[(size_t)p * zxdw + I + c];
}

/* Channel c's output from its window r[0 .. K - 2] (oldest first) and its input: the taps' chain,
 * then silu. Every conv kernel forms it here, so a position's bits are the same in each. KT: K
 * known at compile time (the fused step's Nemotron-H case, 4: the window in registers and the
 * loads of a thread's channels issued together), 0: K as given. */
template <int KT = 0>
__device__ __forceinline__ float conv_taps(int K, const float *conv_w, const float *conv_b, int c, const float *r,
                                           float in) {
    if (KT) K = KT;
    const float *wc = conv_w + (size_t)c * K;
    float acc = conv_b ? conv_b[c] : 0.0f;
    for (int k = 0; k < K - 1; k++) acc = __fadd_rn(acc, __fmul_rn(wc[k], r[k]));
    acc = __fadd_rn(acc, __fmul_rn(wc[K - 1], in));
    return silu_d(acc);
}

/* Channel c at a pass of one position: its window from the ring. advance: also the ring as it was
 * into snapshot slot 0 (snap not NULL) and the ring moved on by this input; otherwise nothing is
 * written (the fused step's other blocks read a channel that one block advances). KT: as conv_taps. */
template <int KT = 0>
__device__ __forceinline__ float conv_one(int c, int K, int CD, int I, const float *conv_w, const float *conv_b,
                                          const float *zxd, float *ring, float *snap, bool advance) {
    if (KT) K = KT;
    float r[KT ? KT : NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K - 1; k++) r[k] = ring[(size_t)k * CD + c];
    float in = zxd[I + c];
    if (advance) {
        if (snap)
            for (int k = 0; k < K - 1; k++) snap[(size_t)k * CD + c] = r[k];
        for (int k = 0; k + 1 < K - 1; k++) ring[(size_t)k * CD + c] = r[k + 1];
        if (K > 1) ring[(size_t)(K - 2) * CD + c] = in;
    }
    return conv_taps<KT>(K, conv_w, conv_b, c, r, in);
}

__global__ void k_mamba_conv_one(int K, int CD, int I, const float *conv_w, const float *conv_b, const float *zxd,
                                 float *ring, float *snap, float *xbc) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= CD) return;
    xbc[c] = conv_one(c, K, CD, I, conv_w, conv_b, zxd, ring, snap, true);
}

__global__ void k_mamba_conv(int n, int K, int CD, int I, int zxdw, const float *conv_w, const float *conv_b,
                             const float *zxd, const float *ring, float *snap, float *xbc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= CD) return;
    float r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K - 1; k++) {
        r[k] = conv_input(t - (K - 1) + k, K, CD, I, zxdw, c, zxd, ring);
        if (snap) snap[((size_t)t * (K - 1) + k) * CD + c] = r[k];
    }
    xbc[(size_t)t * CD + c] = conv_taps(K, conv_w, conv_b, c, r, zxd[(size_t)t * zxdw + I + c]);
}

/* The ring after n positions: its entries k = 0 .. K - 2 are inputs n - (K - 1) + k. In place:
 * entry k takes input n - (K - 1) + k, which is the old entry k + n when that is still in the ring
 * (k + n < K - 1), and entries are written in increasing k, each reading a larger one. */
__global__ void k_mamba_ring_update(int n, int K, int CD, int I, int zxdw, const float *zxd, float *ring) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= CD) return;
    for (int k = 0; k < K - 1; k++)
        ring[(size_t)k * CD + c] = conv_input(n - (K - 1) + k, K, CD, I, zxdw, c, zxd, ring);
}

#define CONV_THREADS 128

/* The conv's kernels for a pass of n positions (snap: slot t of a verify pass, else NULL). */
static void launch_conv(struct nt_backend *be, int n, const struct nt_mamba_dims *d, const float *conv_w,
                        const float *conv_b, const float *zxd, float *ring, float *snap, float *xbc) {
    unsigned blocks = (unsigned)((d->CD + CONV_THREADS - 1) / CONV_THREADS);
    if (n == 1) {
        NT_LAUNCH_EARLY(k_mamba_conv_one, blocks, CONV_THREADS, 0, d->K, d->CD, d->I, conv_w, conv_b, zxd, ring, snap,
                        xbc);
        LAUNCHED(be);
        return;
    }
    NT_LAUNCH(k_mamba_conv, dim3(blocks, (unsigned)n), CONV_THREADS, n, d->K, d->CD, d->I, d->zxd, conv_w, conv_b, zxd,
              ring, snap, xbc);
    if (!LAUNCHED(be)) return;
    NT_LAUNCH(k_mamba_ring_update, blocks, CONV_THREADS, n, d->K, d->CD, d->I, d->zxd, zxd, ring);
    LAUNCHED(be);
}

/* THE SCAN. For head h, channel q and state index k, position by position:
 *     dt = clamp(softplus(dt_raw + dt_bias[h]), dt_lo, dt_hi), dA = exp(dt A), A = A_neg[h] (= -exp(A_log), weights.h)
 *     S[k][q] = dA S[k][q] + (dt B[k]) x[q]            y[q] = sum over k of S[k][q] C[k] + D x[q]
 * The positions are a chain; within a position everything is parallel. A block owns one head and
 * SCAN_QB of its channels (grid: heads x channel blocks, so the SMs are busy while each chain is
 * short); thread (q, j) keeps the states of quarter j (k in [j NPT, (j + 1) NPT), NPT =
 * N / SCAN_SPLIT) of channel q in registers for the whole pass. The quarter sums a_j are chains in
 * k order and join as ((a0 + a1) + (a2 + a3)) by two shuffles, the quarters being neighbouring
 * lanes: a fixed tree per element whatever n is (the CPU sums the N terms in one chain: last-bit
 * differences). No barrier inside a position: the inputs of SCAN_TC positions at a time (B and C
 * of the head's group, x of the block's channels, the raw dt) are copied into shared memory with
 * cp.async, the next chunk's while this one is scanned, one barrier per chunk; dt and dA of a
 * chunk's positions are computed up front (independent of the chain). snap (a verify pass; else
 * NULL): slot t gets the state before position t, stored from the registers at the top of the
 * position. */
#define SCAN_SPLIT 4
#define SCAN_MAX_N 256
#ifndef SCAN_QB /* (dev/cuda variants build other values) */
#define SCAN_QB 32 /* channels per block (128 threads): on the H200 32 beat 16 and 8 (more blocks of
                    * fewer warps; conv + scan at n = 512: 349, 372, 446 us) */
#endif

template <int NPT> struct scan_chunk {
    enum {
        TC = NPT >= 64 ? 8 : 16, /* positions per chunk (shared memory under 48 KB) */
        /* floats per quarter of a staged B or C row: whole float4s, plus 4 so that the 4 quarters a
         * warp reads at once (a float4 each) fall on distinct banks */
        QS = (NPT + 3) / 4 * 4 + 4
    };
    float B[TC][SCAN_SPLIT * QS], C[TC][SCAN_SPLIT * QS];
    float x[TC][SCAN_QB];
    float dt[TC];
};

/* dt and dA = exp(dt A) of a head at one position from its raw dt: the same in every scan kernel. */
__device__ __forceinline__ void scan_dt(float raw, float bias, float dt_lo, float dt_hi, float A, float &dt,
                                        float &dA) {
    float v = softplus_d(__fadd_rn(raw, bias));
    v = fminf(fmaxf(v, dt_lo), dt_hi);
    dt = v;
    dA = expf(__fmul_rn(v, A));
}

/* One position of thread (q, j)'s NPT states: st advanced, and y[q] = sum over k of S[k][q] C[k]
 * (the quarter chains a_j joined as ((a0 + a1) + (a2 + a3))) + D x[q], which all four lanes of the
 * channel get. Bq, Cq: the quarter's B and C in shared memory (16-byte aligned). Every scan kernel
 * steps here. */
template <int NPT>
__device__ __forceinline__ float scan_position(float (&st)[NPT], const float *Bq, const float *Cq, float x, float dt,
                                               float dA, float Dh) {
    float acc = 0.0f;
#pragma unroll
    for (int kk = 0; kk < NPT; kk += 4) {
        float4 b4 = *(const float4 *)(Bq + kk), c4 = *(const float4 *)(Cq + kk);
        float bv[4] = {b4.x, b4.y, b4.z, b4.w}, cv[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
        for (int e = 0; e < 4 && kk + e < NPT; e++) {
            float dtB = __fmul_rn(dt, bv[e]);
            float sv = __fadd_rn(__fmul_rn(dA, st[kk + e]), __fmul_rn(dtB, x));
            st[kk + e] = sv;
            acc = __fadd_rn(acc, __fmul_rn(sv, cv[e]));
        }
    }
    float pair = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 1)); /* a0 + a1, a2 + a3 */
    float sum = __fadd_rn(pair, __shfl_xor_sync(0xffffffffu, pair, 2));
    return __fadd_rn(sum, __fmul_rn(Dh, x));
}

template <int NPT>
__global__ void __launch_bounds__(SCAN_QB * SCAN_SPLIT)
    k_mamba_scan(int n, int nh, int P, int N, int G, int I, int CD, int zxdw, float dt_lo, float dt_hi,
                 const float *__restrict__ dt_bias, const float *__restrict__ A_neg, const float *__restrict__ Dv,
                 const float *__restrict__ zxd, const float *__restrict__ xbc, float *__restrict__ state,
                 float *__restrict__ snap, float *__restrict__ y) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    typedef scan_chunk<NPT> chunk;
    const int TC = chunk::TC;
    __shared__ __align__(16) chunk ch[2];
    int h = blockIdx.x, tid = threadIdx.x, j = tid % SCAN_SPLIT, ql = tid / SCAN_SPLIT;
    int q0 = blockIdx.y * SCAN_QB, q = q0 + ql, g = h / (nh / G);
    int nq = min(SCAN_QB, P - q0); /* the block's channels; threads past them run, store nothing */
    bool live = ql < nq;
    float A = A_neg[h], Dh = Dv[h], bias = dt_bias[h];
    size_t state_floats = (size_t)nh * N * P, S_off = (size_t)h * N * P + (size_t)j * NPT * P + q;
    float st[NPT];
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = live ? state[S_off + (size_t)kk * P] : 0.0f;

    /* copies chunk c's inputs into ch[c & 1] (nothing past the last chunk) */
    auto issue = [&](int c) {
        int t0 = c * TC, cnt = min(TC, n - t0);
        if (cnt > 0) {
            chunk &S = ch[c & 1];
            for (int u = tid; u < cnt * N; u += blockDim.x) {
                int tl = u / N, k = u % N, slot = (k / NPT) * chunk::QS + k % NPT;
                const float *row = xbc + (size_t)(t0 + tl) * CD + I + (size_t)g * N;
                cp_async4(&S.B[tl][slot], row + k);
                cp_async4(&S.C[tl][slot], row + (size_t)G * N + k);
            }
            for (int u = tid; u < cnt * nq; u += blockDim.x)
                cp_async4(&S.x[u / nq][u % nq], xbc + (size_t)(t0 + u / nq) * CD + (size_t)h * P + q0 + u % nq);
            for (int u = tid; u < cnt; u += blockDim.x)
                cp_async4(&S.dt[u], zxd + (size_t)(t0 + u) * zxdw + I + CD + h);
        }
        cp_async_commit();
    };

    issue(0);
    int nchunks = (n + TC - 1) / TC;
    for (int c = 0; c < nchunks; c++) {
        cp_async_wait<0>(); /* chunk c has landed (this thread's copies) */
        __syncthreads();    /* everyone's; everyone is done with chunk c - 1, whose buffer is next */
        issue(c + 1);
        const chunk &S = ch[c & 1];
        int t0 = c * TC, cnt = min(TC, n - t0);
        float dtv[TC], dAv[TC];
#pragma unroll
        for (int tl = 0; tl < TC; tl++) {
            if (tl >= cnt) break; /* (a decode step computes one) */
            scan_dt(S.dt[tl], bias, dt_lo, dt_hi, A, dtv[tl], dAv[tl]);
        }
#pragma unroll
        for (int tl = 0; tl < TC; tl++) {
            if (tl >= cnt) break;
            int t = t0 + tl;
            if (snap && live) {
                float *Sn = snap + (size_t)t * state_floats + S_off;
#pragma unroll
                for (int kk = 0; kk < NPT; kk++) Sn[(size_t)kk * P] = st[kk];
            }
            float x = S.x[tl][live ? ql : 0], dt = dtv[tl], dA = dAv[tl];
            float yq = scan_position<NPT>(st, &S.B[tl][j * chunk::QS], &S.C[tl][j * chunk::QS], x, dt, dA, Dh);
            if (j == 0 && live) y[(size_t)t * I + (size_t)h * P + q] = yq;
        }
    }
    cp_async_wait<0>();
    if (live)
#pragma unroll
        for (int kk = 0; kk < NPT; kk++) state[S_off + (size_t)kk * P] = st[kk];
}
/* The scan's kernel for a pass of n positions (snap: slot t of a verify pass, else NULL). */
static void launch_scan(struct nt_backend *be, int n, const struct nt_mamba_dims *d, const float *dt_bias,
                        const float *A, const float *D, const float *zxd, const float *xbc, float *state, float *snap,
                        float *y) {
    dim3 grid((unsigned)d->nh, (unsigned)((d->P + SCAN_QB - 1) / SCAN_QB)), block(SCAN_QB * SCAN_SPLIT);
#define SCAN_CASE(v)                                                                                             \
    case v:                                                                                                      \
        NT_LAUNCH_EARLY(k_mamba_scan<v>, grid, block, 0, n, d->nh, d->P, d->N, d->G, d->I, d->CD, d->zxd, d->dt_lo, \
                        d->dt_hi, dt_bias, A, D, zxd, xbc, state, snap, y);                                          \
        break;
    switch (d->N / SCAN_SPLIT) {
        SCAN_CASE(1) SCAN_CASE(2) SCAN_CASE(4) SCAN_CASE(8) SCAN_CASE(16) SCAN_CASE(32) SCAN_CASE(64)
    default: /* mamba_limits refused the model at load */
        return cuda_fault(be, "mamba_scan: ssm_state_size %d is not one the scan holds", d->N);
    }
#undef SCAN_CASE
    LAUNCHED(be);
}

/* THE GATED NORM. o = y * silu(z), then per position and group of gs = I / G channels
 *     out = norm_w * o / sqrt(mean(o^2) + eps)
 * with the sum of squares in one fixed tree: ELEM_THREADS lanes, lane l's chain over o[l],
 * o[l + ELEM_THREADS], ..., then block_sum's tree over them. k_gated_norm runs a block of
 * ELEM_THREADS per (position, group); the fused step's last block of a group forms the same tree
 * with its fewer threads (gnorm_sumsq). */
__device__ __forceinline__ float gated(float y, float z) { return __fmul_rn(y, silu_d(z)); }

/* The sum of squares of o[lo, hi) in the tree above, by a block of any multiple of 32 threads up
 * to ELEM_THREADS: warp w plays the tree's warps w, w + (its warps), ...; every thread gets the
 * sum. o is read from L2 (__ldcg): other blocks of the fused step wrote it. sh: 33 floats. */
__device__ inline float gnorm_sumsq(const float *o, int lo, int hi, float *sh) {
    const int tree_warps = ELEM_THREADS / 32;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int tw = warp; tw < tree_warps; tw += nw) {
        float ss = 0.0f;
        for (int i = lo + tw * 32 + lane; i < hi; i += ELEM_THREADS) {
            float v = __ldcg(o + i);
            ss = __fadd_rn(ss, __fmul_rn(v, v));
        }
        ss = warp_sum(ss);
        if (lane == 0) sh[tw] = ss;
    }
    __syncthreads();
    float r = threadIdx.x < (unsigned)tree_warps ? sh[threadIdx.x] : 0.0f;
    if (warp == 0) r = warp_sum(r);
    if (threadIdx.x == 0) sh[32] = r;
    __syncthreads();
    r = sh[32];
    __syncthreads();
    return r;
}

/* out[lo, hi) = norm_w * o * inv, o the gated values already there; inv = 1 / sqrt(ss / gs + eps). */
__device__ inline void gnorm_finish(float *out, const float *norm_w, int lo, int hi, float ss, float eps) {
    float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)(hi - lo)), eps)));
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) out[i] = __fmul_rn(norm_w[i], __fmul_rn(__ldcg(out + i), inv));
}

__global__ void k_gated_norm(int I, int G, int zxdw, float eps, const float *norm_w, const float *y,
                             const float *zxd, float *out) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float sh[33];
    int t = blockIdx.x / G, q = blockIdx.x % G, gs = I / G;
    const float *yt = y + (size_t)t * I, *z = zxd + (size_t)t * zxdw;
    float *o = out + (size_t)t * I;
    for (int i = q * gs + threadIdx.x; i < (q + 1) * gs; i += blockDim.x) o[i] = gated(yt[i], z[i]);
    /* each thread reads back what it wrote (blockDim.x == ELEM_THREADS): no barrier needed */
    float ss = gnorm_sumsq(o, q * gs, (q + 1) * gs, sh);
    gnorm_finish(o, norm_w, q * gs, (q + 1) * gs, ss, eps);
}

static void launch_gnorm(struct nt_backend *be, int n, const struct nt_mamba_dims *d, const float *norm_w,
                         const float *y, const float *zxd, float *out) {
    NT_LAUNCH_EARLY(k_gated_norm, n * d->G, ELEM_THREADS, 0, d->I, d->G, d->zxd, d->eps, norm_w, y, zxd, out);
    LAUNCHED(be);
}

/* THE FUSED STEP. A pass of one position (decode) runs conv, scan and gated norm as one kernel,
 * k_mamba_step, where three kernels would each pay a launch gap and a round trip of their outputs
 * through memory. Its grid is the scan's: block (h, channel block) owns head h's channels q0 ..
 * q0 + SCAN_QB - 1: their conv (ring advanced, xbc written), their states (in registers for the one
 * position), y and the gated value o. The B and C rows its scan needs are conv outputs of the head's
 * group g, which the group's (nh / G) x (channel blocks) blocks all need: each block computes all
 * 2N of them from the ring and writes none of them, and the group's last block (the one that takes
 * the group's count of finished blocks, a counter in the pass scratch's meta words, to the group's
 * number of blocks) writes their xbc, snapshot slot and advanced ring, once every other block of
 * the group has read the old ring. That last block also holds every o of the group (the norm's
 * groups of I / G channels are the scan's head groups: I / G = (nh / G) P), so it forms the norm's
 * sum of squares and writes out, then puts the counter back to zero for the next layer.
 *
 * The arithmetic is the three kernels' to the bit: every value goes through the functions their
 * kernels use (conv_one and conv_taps, scan_dt, scan_position, gated, gnorm_sumsq, gnorm_finish),
 * with the same inputs, so a position's results do not depend on which path ran it. Before its
 * grid_wait the kernel reads only weights and asks L2 for the lines of the state and the ring: a
 * prefetch brings no value into the kernel, so it is right whatever the kernel before it writes. */
#define MAMBA_STEP_THREADS (SCAN_QB * SCAN_SPLIT)

template <int NPT, int KT>
__global__ void __launch_bounds__(MAMBA_STEP_THREADS)
    k_mamba_step(struct nt_mamba_dims d, const float *__restrict__ conv_w, const float *__restrict__ conv_b,
                 const float *__restrict__ dt_bias, const float *__restrict__ A_neg, const float *__restrict__ Dv,
                 const float *__restrict__ norm_w, const float *__restrict__ zxd, float *ring, float *ring_snap,
                 float *xbc, float *__restrict__ state, float *__restrict__ state_snap, float *y, float *out,
                 unsigned *group_done) {
    typedef scan_chunk<NPT> chunk; /* (its quarter stride QS: B and C staged as the scan stages them) */
    __shared__ __align__(16) float Bs[SCAN_SPLIT * chunk::QS], Cs[SCAN_SPLIT * chunk::QS];
    __shared__ float xs[SCAN_QB], sh[33];
    __shared__ int last;
    const int N = d.N, P = d.P, I = d.I, CD = d.CD, K = KT ? KT : d.K, G = d.G;
    int h = blockIdx.x, tid = threadIdx.x, j = tid % SCAN_SPLIT, ql = tid / SCAN_SPLIT;
    int q0 = blockIdx.y * SCAN_QB, q = q0 + ql, g = h / (d.nh / G);
    int nq = min(SCAN_QB, P - q0); /* the block's channels; threads past them run, store nothing */
    bool live = ql < nq;
    size_t S_off = (size_t)h * N * P + (size_t)j * NPT * P + q;
    /* the block's conv channels u: the group's B row (u < N), its C row (u < 2N), then x of q0 + u - 2N */
    int nconv = 2 * N + nq, cB = I + g * N, cC = I + G * N + g * N, cx = h * P + q0;
    auto channel = [&](int u) { return u < N ? cB + u : u < 2 * N ? cC + (u - N) : cx + (u - 2 * N); };

    /* weights, and hints for what comes after the wait */
    float A = A_neg[h], Dh = Dv[h], bias = dt_bias[h];
    for (int k = 0; k < K - 1; k++) {
        prefetch_l2_run(ring + (size_t)k * CD + cB, N);
        prefetch_l2_run(ring + (size_t)k * CD + cC, N);
        prefetch_l2_run(ring + (size_t)k * CD + cx, nq);
    }
    prefetch_l2_run(conv_w + (size_t)cB * K, N * K);
    prefetch_l2_run(conv_w + (size_t)cC * K, N * K);
    prefetch_l2_run(conv_w + (size_t)cx * K, nq * K);
    for (int k = tid; k < N; k += blockDim.x) prefetch_l2(state + (size_t)h * N * P + (size_t)k * P + q0);

    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing read before this but weights */
    grid_launch_dependents();
    /* the conv: B and C read-only (the last block advances them), x advanced by its owner, here;
     * a thread's channels in unrolled rounds, so their loads can go out together */
    const int rounds = (2 * SCAN_SPLIT * NPT + SCAN_QB + MAMBA_STEP_THREADS - 1) / MAMBA_STEP_THREADS;
#pragma unroll
    for (int rd = 0; rd < rounds; rd++) {
        int u = tid + rd * MAMBA_STEP_THREADS, c = channel(u);
        if (u >= nconv) break;
        if (u < 2 * N) {
            int k = u % N;
            (u < N ? Bs : Cs)[(k / NPT) * chunk::QS + k % NPT] =
                conv_one<KT>(c, K, CD, I, conv_w, conv_b, zxd, ring, NULL, false);
        } else {
            float v = conv_one<KT>(c, K, CD, I, conv_w, conv_b, zxd, ring, ring_snap, true);
            xbc[c] = v;
            xs[u - 2 * N] = v;
        }
    }
    float dt, dA;
    scan_dt(zxd[I + CD + h], bias, d.dt_lo, d.dt_hi, A, dt, dA);
    float st[NPT];
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = live ? state[S_off + (size_t)kk * P] : 0.0f;
    __syncthreads();
    /* the scan */
    if (state_snap && live)
#pragma unroll
        for (int kk = 0; kk < NPT; kk++) state_snap[S_off + (size_t)kk * P] = st[kk];
    float x = xs[live ? ql : 0];
    float yq = scan_position<NPT>(st, Bs + j * chunk::QS, Cs + j * chunk::QS, x, dt, dA, Dh);
    if (live)
#pragma unroll
        for (int kk = 0; kk < NPT; kk++) state[S_off + (size_t)kk * P] = st[kk];
    if (j == 0 && live) {
        y[h * P + q] = yq;
        out[h * P + q] = gated(yq, zxd[h * P + q]);
    }
    /* the group's last block: the norm, and B and C's xbc, snapshot slot and ring */
    __threadfence(); /* this block's writes before its count */
    __syncthreads();
    if (tid == 0) last = atomicAdd(group_done + g, 1u) == (unsigned)(d.nh / G) * gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence(); /* the other blocks' writes, counted before this block's */
    int gs = I / G;
    float ss = gnorm_sumsq(out, g * gs, (g + 1) * gs, sh);
    gnorm_finish(out, norm_w, g * gs, (g + 1) * gs, ss, d.eps);
    for (int u = tid; u < 2 * N; u += blockDim.x) {
        int c = channel(u);
        xbc[c] = conv_one<KT>(c, K, CD, I, conv_w, conv_b, zxd, ring, ring_snap, true);
    }
    if (tid == 0) group_done[g] = 0;
}

static void launch_step(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                        const float *conv_w, const float *conv_b, const float *dt_bias, const float *A, const float *D,
                        const float *norm_w, const float *zxd, float *ring, float *ring_snap, float *xbc, float *state,
                        float *state_snap, float *y, float *out) {
    unsigned *done = (unsigned *)((uint8_t *)p->scratch + offsetof(struct pass_meta, mamba_done));
    dim3 grid((unsigned)d->nh, (unsigned)((d->P + SCAN_QB - 1) / SCAN_QB));
#define STEP_CASE(v)                                                                                             \
    case v:                                                                                                      \
        if (d->K == 4)                                                                                           \
            NT_LAUNCH_EARLY((k_mamba_step<v, 4>), grid, MAMBA_STEP_THREADS, 0, *d, conv_w, conv_b, dt_bias, A, D, \
                            norm_w, zxd, ring, ring_snap, xbc, state, state_snap, y, out, done);                 \
        else                                                                                                     \
            NT_LAUNCH_EARLY((k_mamba_step<v, 0>), grid, MAMBA_STEP_THREADS, 0, *d, conv_w, conv_b, dt_bias, A, D, \
                            norm_w, zxd, ring, ring_snap, xbc, state, state_snap, y, out, done);                 \
        break;
    switch (d->N / SCAN_SPLIT) {
        STEP_CASE(1) STEP_CASE(2) STEP_CASE(4) STEP_CASE(8) STEP_CASE(16) STEP_CASE(32) STEP_CASE(64)
    default: /* mamba_limits refused the model at load */
        return cuda_fault(be, "mamba step: ssm_state_size %d is not one the scan holds", d->N);
    }
#undef STEP_CASE
    LAUNCHED(be);
}

/* THE OPERATIONS. backend.h has three (conv, scan, gated norm); at a pass of one position they are
 * held back so that the third launches the fused step: mamba_conv only records its arguments,
 * mamba_scan adds its own when it continues that conv (the same zxd, the conv's xbc as its input),
 * and mamba_gated_norm, continuing that scan (its y as the input), launches k_mamba_step. Anything
 * else that starts first launches what is held with the separate kernels (mamba_flush: op_start
 * calls it for every other operation, end_pass before the pass ends), so any sequence of calls
 * gets the contract's results in its order, and forward.c's sequence gets one kernel. Held per host
 * thread (a pass runs on one) and only inside a pass (the step's counters live in its scratch).
 * NT_MAMBA_FUSED=0 at build time: nothing held, three kernels (dev/cuda/variants.sh builds it). */
#ifndef NT_MAMBA_FUSED
#define NT_MAMBA_FUSED 1
#endif

struct mamba_held {
    int stage; /* 0: nothing; 1: a conv; 2: a conv and the scan after it */
    struct nt_backend *be;
    struct nt_mamba_dims d;
    const float *conv_w, *conv_b, *dt_bias, *A, *D, *zxd;
    float *ring, *ring_snap, *xbc, *state, *state_snap, *y;
};
static thread_local struct mamba_held held;

void mamba_flush(void) {
    if (!held.stage) return;
    struct mamba_held m = held;
    held.stage = 0;
    if (FAULTED(m.be)) return;
    launch_conv(m.be, 1, &m.d, m.conv_w, m.conv_b, m.zxd, m.ring, m.ring_snap, m.xbc);
    if (m.stage == 2 && !FAULTED(m.be))
        launch_scan(m.be, 1, &m.d, m.dt_bias, m.A, m.D, m.zxd, m.xbc, m.state, m.state_snap, m.y);
}

/* Whether an operation of this pass continues the chain held at `stage`. */
static bool continues(int stage, struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                      const float *zxd) {
    return held.stage == stage && held.be == be && p->n == 1 && held.zxd == zxd && !memcmp(&held.d, d, sizeof *d);
}

void be_mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, float *ring, float *ring_snap, float *xbc) {
    float *snap = p->snap ? ring_snap : NULL;
    OP_START(be, OP_CONV, DIMS(d), U(w->conv_w), U(w->conv_b), U(zxd), U(ring), U(snap), U(xbc));
    if (NT_MAMBA_FUSED && p->n == 1 && pass_open() && d->G <= MAMBA_MAX_GROUPS) {
        held = mamba_held{};
        held.stage = 1;
        held.be = be;
        held.d = *d;
        held.conv_w = w->conv_w;
        held.conv_b = w->conv_b;
        held.zxd = zxd;
        held.ring = ring;
        held.ring_snap = snap;
        held.xbc = xbc;
        return;
    }
    PROFILE(be, "mamba_conv n=%d%s", p->n, snap ? " snap" : "");
    launch_conv(be, p->n, d, w->conv_w, w->conv_b, zxd, ring, snap, xbc);
}

void be_mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, const float *xbc, float *state,
                   float *state_snap, float *y) {
    float *snap = p->snap ? state_snap : NULL;
    OP_START(be, OP_SCAN, DIMS(d), U(w->A), U(w->dt_bias), U(w->D), U(zxd), U(xbc), U(state), U(snap), U(y));
    if (continues(1, be, p, d, zxd) && held.xbc == xbc) {
        held.stage = 2;
        held.dt_bias = w->dt_bias;
        held.A = w->A;
        held.D = w->D;
        held.state = state;
        held.state_snap = snap;
        held.y = y;
        return;
    }
    mamba_flush();
    PROFILE(be, "mamba_scan n=%d%s", p->n, snap ? " snap" : "");
    launch_scan(be, p->n, d, w->dt_bias, w->A, w->D, zxd, xbc, state, snap, y);
}

void be_mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                         const struct nt_mamba_weights *w, const float *y, const float *zxd, float *out) {
    OP_START(be, OP_GNORM, DIMS(d), U(w->norm_w), U(y), U(zxd), U(out));
    if (continues(2, be, p, d, zxd) && held.y == y) {
        struct mamba_held m = held;
        held.stage = 0;
        PROFILE(be, "mamba conv + scan + gated norm n=1%s (one kernel)", m.state_snap ? " snap" : "");
        launch_step(be, p, d, m.conv_w, m.conv_b, m.dt_bias, m.A, m.D, w->norm_w, zxd, m.ring, m.ring_snap, m.xbc,
                    m.state, m.state_snap, m.y, out);
        return;
    }
    mamba_flush();
    PROFILE(be, "mamba_gated_norm n=%d", p->n);
    launch_gnorm(be, p->n, d, w->norm_w, y, zxd, out);
}

void mamba_limits(const struct nt_mamba_dims *d, char *why, size_t cap) {
    int npt = d->N / SCAN_SPLIT;
    if (d->K < 1 || d->K > NT_MAX_CONV_KERNEL)
        snprintf(why, cap, "conv_kernel %d: the CUDA conv holds 1 to %d taps", d->K, NT_MAX_CONV_KERNEL);
    else if (d->N % SCAN_SPLIT || d->N > SCAN_MAX_N || (npt & (npt - 1)))
        snprintf(why, cap, "ssm_state_size %d: the CUDA scan holds 4, 8, 16, ... %d (a power of two from 4)", d->N,
                 SCAN_MAX_N);
    else if (d->P < 1 || (d->P + SCAN_QB - 1) / SCAN_QB > 65535)
        snprintf(why, cap, "mamba_head_dim %d: the CUDA scan holds 1 to %d", d->P, 65535 * SCAN_QB);
    else if (d->G < 1 || d->nh % d->G || d->I % d->G)
        snprintf(why, cap, "n_groups %d must divide mamba_num_heads %d", d->G, d->nh);
    else
        why[0] = 0;
}
