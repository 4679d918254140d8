/* mamba.cu - the CUDA backend's Mamba-2 operations: the causal depthwise conv, the selective
 * scan (state in registers for the whole pass) and the gated group norm. mamba_limits says which
 * shapes these kernels hold; a model past them is refused when it is loaded.
 */
#include "ops.cuh"

/* THE CONV. Position t's output needs only the K - 1 inputs before it (from the pass, or from the
 * ring for the first K - 1 positions) and its own: the positions are independent. A pass of one
 * position (decode) runs k_mamba_conv_one: a thread per channel, the ring read, shifted and
 * written back. A longer pass runs k_mamba_conv: a thread per (CONV_TP positions, channel), each
 * sliding its window over the inputs (the first from the ring), then k_mamba_ring_update writes the new ring (its last K - 1
 * inputs) once every position has read the old one (a second launch: blocks cannot wait for each
 * other). The taps are the same chain in both: acc = bias, + w[k] r[k] for k < K - 1 in order,
 * + w[K - 1] in; then silu. snap (a verify pass; else NULL): slot t gets the ring before
 * position t. */

/* STATE_EARLY. A layer's conv ring and SSM state are written only by its own kernels of earlier
 * passes (and by a rollback's copies between passes), all finished before any kernel of this
 * pass's layer can start: an early-launched kernel starts only once the kernel before it has
 * passed its own grid_wait (cuda_util.cuh), so everything two kernels back has finished. So
 * k_mamba_conv_one and k_mamba_scan load the state before their grid_wait, overlapping the load
 * with the end of the kernel before. NT_STATE_EARLY=0 at build time: after it (to compare). */
#ifndef NT_STATE_EARLY
#define NT_STATE_EARLY 1
#endif

/* Input p of channel c relative to the pass start: p < 0 is in the ring (ring[K - 1 + p]). */
__device__ __forceinline__ float conv_input(int p, int K, int CD, int I, int zxdw, int c, const float *zxd,
                                            const float *ring) {
    return p < 0 ? ring[(size_t)(K - 1 + p) * CD + c] : zxd[(size_t)p * zxdw + I + c];
}

__global__ void k_mamba_conv_one(int K, int CD, int I, const float *conv_w, const float *conv_b, const float *zxd,
                                 float *ring, float *snap, float *xbc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    bool live = c < CD;
    float r[NT_MAX_CONV_KERNEL];
#if NT_STATE_EARLY
    /* the ring is this layer's state (STATE_EARLY): read while the kernel before ends */
    if (live)
        for (int k = 0; k < K - 1; k++) r[k] = ring[(size_t)k * CD + c];
#endif
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): the input zxd after this */
    grid_launch_dependents();
    if (!live) return;
    const float *wc = conv_w + (size_t)c * K;
#if !NT_STATE_EARLY
    for (int k = 0; k < K - 1; k++) r[k] = ring[(size_t)k * CD + c];
#endif
    if (snap)
        for (int k = 0; k < K - 1; k++) snap[(size_t)k * CD + c] = r[k];
    float in = zxd[I + c];
    float acc = conv_b ? conv_b[c] : 0.0f;
    for (int k = 0; k < K - 1; k++) acc = __fadd_rn(acc, __fmul_rn(wc[k], r[k]));
    acc = __fadd_rn(acc, __fmul_rn(wc[K - 1], in));
    for (int k = 0; k + 1 < K - 1; k++) ring[(size_t)k * CD + c] = r[k + 1];
    if (K > 1) ring[(size_t)(K - 2) * CD + c] = in;
    xbc[c] = silu_d(acc);
}

/* CONV_TP positions of one channel a thread: the window slides in registers, so each input is
 * read once a thread instead of once for every output that needs it (K of them), and the
 * thread's outputs (each its own chain and silu) are independent work for the scheduler. KC: the
 * kernel width as a constant (the window in registers: Nemotron-H's 4), or 0 for K read at run
 * time (the window in local memory). The same chain per output as k_mamba_conv_one: the same
 * bits. */
#define CONV_TP 8
template <int KC>
__global__ void k_mamba_conv(int n, int K_run, int CD, int I, int zxdw, const float *conv_w, const float *conv_b,
                             const float *zxd, const float *ring, float *snap, float *xbc) {
    const int K = KC ? KC : K_run;
    int c = blockIdx.x * blockDim.x + threadIdx.x, t0 = blockIdx.y * CONV_TP;
    if (c >= CD) return;
    const float *wc = conv_w + (size_t)c * K;
    float w[KC ? KC : NT_MAX_CONV_KERNEL], r[KC ? KC : NT_MAX_CONV_KERNEL];
#pragma unroll
    for (int k = 0; k < K; k++) w[k] = wc[k];
#pragma unroll
    for (int k = 0; k < K - 1; k++) r[k] = conv_input(t0 - (K - 1) + k, K, CD, I, zxdw, c, zxd, ring);
    float bias = conv_b ? conv_b[c] : 0.0f;
    float ins[CONV_TP]; /* the thread's inputs, all requested before the first store */
#pragma unroll
    for (int i = 0; i < CONV_TP; i++) ins[i] = t0 + i < n ? zxd[(size_t)(t0 + i) * zxdw + I + c] : 0.0f;
#pragma unroll
    for (int i = 0; i < CONV_TP; i++) {
        int t = t0 + i;
        bool on = t < n;
        float in = ins[i], acc = bias;
#pragma unroll
        for (int k = 0; k < K - 1; k++) {
            if (snap && on) snap[((size_t)t * (K - 1) + k) * CD + c] = r[k];
            acc = __fadd_rn(acc, __fmul_rn(w[k], r[k]));
        }
        acc = __fadd_rn(acc, __fmul_rn(w[K - 1], in));
        if (on) xbc[(size_t)t * CD + c] = silu_d(acc);
#pragma unroll
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
    }
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

void be_mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, float *ring, float *ring_snap, float *xbc) {
    float *snap = p->snap ? ring_snap : NULL;
    OP_START(be, OP_CONV, DIMS(d), U(w->conv_w), U(w->conv_b), U(zxd), U(ring), U(snap), U(xbc));
    PROFILE(be, "mamba_conv n=%d%s", p->n, snap ? " snap" : "");
    unsigned blocks = (unsigned)((d->CD + CONV_THREADS - 1) / CONV_THREADS);
    if (p->n == 1) {
        NT_LAUNCH_EARLY(k_mamba_conv_one, blocks, CONV_THREADS, 0, d->K, d->CD, d->I, w->conv_w, w->conv_b, zxd, ring, snap,
                  xbc);
        LAUNCHED(be);
        return;
    }
    dim3 grid(blocks, (unsigned)((p->n + CONV_TP - 1) / CONV_TP));
    if (d->K == 4)
        NT_LAUNCH(k_mamba_conv<4>, grid, CONV_THREADS, p->n, d->K, d->CD, d->I, d->zxd, w->conv_w, w->conv_b, zxd,
                  ring, snap, xbc);
    else
        NT_LAUNCH(k_mamba_conv<0>, grid, CONV_THREADS, p->n, d->K, d->CD, d->I, d->zxd, w->conv_w, w->conv_b, zxd,
                  ring, snap, xbc);
    if (!LAUNCHED(be)) return;
    NT_LAUNCH(k_mamba_ring_update, blocks, CONV_THREADS, p->n, d->K, d->CD, d->I, d->zxd, zxd, ring);
    LAUNCHED(be);
}

/* THE SCAN. For head h, channel q and state index k, position by position:
 *     dt = clamp(softplus(dt_raw + dt_bias[h]), dt_lo, dt_hi), dA = exp(dt A), A = A_neg[h] (= -exp(A_log), weights.h)
 *     S[k][q] = dA S[k][q] + (dt B[k]) x[q]            y[q] = sum over k of S[k][q] C[k] + D x[q]
 * The positions are a chain; within a position everything is parallel. A block owns one head and
 * SCAN_QB of its channels (grid: heads x channel blocks, so the SMs are busy while each chain is
 * short); PARTS threads (neighbouring lanes) share a channel, thread (q, j) keeping the states of
 * k in [j NPT, (j + 1) NPT), NPT = N / PARTS, in registers for the whole pass.
 *
 * THE SUM OVER k is one fixed tree whatever the pass: N splits into eighths e_0 .. e_7 of N / 8
 * terms, each a chain in k order, joined pairwise: ((e0 + e1) + (e2 + e3)) + ((e4 + e5) + (e6 +
 * e7)) (the CPU sums the N terms in one chain: last-bit differences). Two shapes compute it:
 * PARTS = 4 (a thread holds two eighths and adds them, then two shuffles) for short passes, where
 * a position's latency is the pass's, and PARTS = 8 (a thread an eighth, three shuffles: chains
 * half as long, twice the warps) from SCAN_WIDE_MIN positions, where the SMs' instruction streams
 * bound it (conv + scan at n = 512 on the H200: 359 against 302 us; at n = 1: 5.95 against 7.6).
 * Same tree, same bits: one arithmetic per position.
 *
 * No barrier inside a position: the inputs of TC positions at a time (B and C of the head's
 * group, x of the block's channels, the raw dt) are copied into shared memory with cp.async, the
 * next chunk's while this one is scanned, one barrier per chunk; dt and dA of a chunk's positions
 * are computed up front (independent of the chain), one position a lane. snap (a verify pass;
 * else NULL): slot t gets the state before position t, stored from the registers at the top of
 * the position. */
#define SCAN_MAX_N 256
#ifndef SCAN_QB /* (dev/cuda variants build other values) */
#define SCAN_QB 32 /* channels per block: on the H200 32 beat 16 and 8 (more blocks of fewer warps;
                    * conv + scan at n = 512: 349, 372, 446 us) */
#endif
/* ILP. Within a position the states are independent and the sum over k is a chain (adds, then
 * shuffles); the next position's states wait only on this one's states, not on its sum. A warp
 * issues in order, so the chain's latency is hidden only where the compiler puts the next
 * position's work between its links, which it does only inside one basic block: whole chunks
 * without snapshots run as one branch-free stretch (NT_SCAN_ILP=0 at build time: every chunk
 * takes the loop with its per-position tests, to compare). The same operations in the same
 * order for each value: the same bits. */
#ifndef NT_SCAN_ILP
#define NT_SCAN_ILP 1
#endif
#ifndef SCAN_WIDE_MIN /* (dev/cuda variants build other values) */
#define SCAN_WIDE_MIN 32 /* passes of this many positions and more scan with 8 threads a channel */
#endif

template <int NPT, int PARTS> struct scan_chunk {
    enum {
        /* positions per chunk (shared memory under 48 KB) */
        TC = NPT * PARTS >= 512 ? 4 : NPT * PARTS >= 256 ? 8 : 16,
        /* floats per part of a staged B or C row: whole float4s, plus 4 so that the parts a warp
         * reads at once (a float4 each) fall on distinct banks */
        QS = (NPT + 3) / 4 * 4 + 4
    };
    float B[TC][PARTS * QS], C[TC][PARTS * QS];
    float x[TC][SCAN_QB];
    float dt[TC];
};

template <int NPT, int PARTS>
__global__ void __launch_bounds__(SCAN_QB * PARTS)
    k_mamba_scan(int n, int nh, int P, int N, int G, int I, int CD, int zxdw, float dt_lo, float dt_hi,
                 const float *__restrict__ dt_bias, const float *__restrict__ A_neg, const float *__restrict__ Dv,
                 const float *__restrict__ zxd, const float *__restrict__ xbc, float *__restrict__ state,
                 float *__restrict__ snap, float *__restrict__ y) {
    typedef scan_chunk<NPT, PARTS> chunk;
    const int TC = chunk::TC;
    static_assert(chunk::TC <= 32, "a chunk's dt and dA are held one position a lane");
    const int EIGHTHS = 8 / PARTS, L = NPT / EIGHTHS; /* a thread's eighths of N, and their length */
    __shared__ __align__(16) chunk ch[2];
    int h = blockIdx.x, tid = threadIdx.x, j = tid % PARTS, ql = tid / PARTS;
    int q0 = blockIdx.y * SCAN_QB, q = q0 + ql, g = h / (nh / G);
    int nq = min(SCAN_QB, P - q0); /* the block's channels; threads past them run, store nothing */
    bool live = ql < nq;
    float A = A_neg[h], Dh = Dv[h], bias = dt_bias[h];
    size_t state_floats = (size_t)nh * N * P, S_off = (size_t)h * N * P + (size_t)j * NPT * P + q;
    float *y_q = y + (size_t)h * P + q; /* channel q's output at position 0 */
    float st[NPT];
#if NT_STATE_EARLY
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = live ? state[S_off + (size_t)kk * P] : 0.0f;
#endif
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): the inputs xbc and zxd after this */
    grid_launch_dependents();
#if !NT_STATE_EARLY
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = live ? state[S_off + (size_t)kk * P] : 0.0f;
#endif

    /* copies chunk c's inputs into ch[c & 1] (nothing past the last chunk). The indices divide by
     * N as NPT * PARTS (the launch's npt is N / parts), a constant, and by the block's channels as
     * SCAN_QB where the block has them all: shifts, not divisions; and the copies take shared
     * addresses formed once (cp_async4_at). Together a third of the instructions a copy. */
    const int NQ = NPT * PARTS;
    const sh_addr_t ch0 = sh_addr(&ch[0]);
    auto issue = [&](int c) {
        int t0 = c * TC, cnt = min(TC, n - t0);
        if (cnt > 0) {
            const sh_addr_t sa = ch0 + (c & 1) * (int)sizeof(chunk);
            const sh_addr_t sB = sa + (int)offsetof(chunk, B), sC = sa + (int)offsetof(chunk, C);
            for (int u = tid; u < cnt * NQ; u += blockDim.x) {
                int tl = u / NQ, k = u % NQ, slot = (k / NPT) * chunk::QS + k % NPT;
                const float *row = xbc + (size_t)(t0 + tl) * CD + I + (size_t)g * NQ;
                int o = (int)sizeof(float) * (tl * PARTS * chunk::QS + slot);
                cp_async4_at(sB + o, row + k);
                cp_async4_at(sC + o, row + (size_t)G * NQ + k);
            }
            const sh_addr_t sx = sa + (int)offsetof(chunk, x), sdt = sa + (int)offsetof(chunk, dt);
            const float *xs = xbc + (size_t)t0 * CD + (size_t)h * P + q0;
            if (nq == SCAN_QB)
                for (int u = tid; u < cnt * SCAN_QB; u += blockDim.x)
                    cp_async4_at(sx + (int)sizeof(float) * u, xs + (size_t)(u / SCAN_QB) * CD + u % SCAN_QB);
            else
                for (int u = tid; u < cnt * nq; u += blockDim.x)
                    cp_async4_at(sx + (int)sizeof(float) * ((u / nq) * SCAN_QB + u % nq), xs + (size_t)(u / nq) * CD + u % nq);
            for (int u = tid; u < cnt; u += blockDim.x)
                cp_async4_at(sdt + (int)sizeof(float) * u, zxd + (size_t)(t0 + u) * zxdw + I + CD + h);
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
        /* dt and dA of the chunk's positions, position tl's computed once by lane tl % TC of
         * each warp and read by the others with a shuffle (not by every thread: a softplus and
         * an exp cost ~40 instructions, a third of a position's share of the chain) */
        float lane_dt = 0.0f, lane_dA = 0.0f;
        if ((tid & 31) % TC < cnt) {
            lane_dt = softplus_d(__fadd_rn(S.dt[(tid & 31) % TC], bias));
            lane_dt = fminf(fmaxf(lane_dt, dt_lo), dt_hi);
            lane_dA = expf(__fmul_rn(lane_dt, A));
        }
        /* Position tl of the chunk: the states' step and the sum over k (THE SUM OVER k). */
        auto position = [&](int tl, bool every_lane_stores) {
            int t = t0 + tl;
            float x = S.x[tl][live ? ql : 0];
            float dt = __shfl_sync(0xffffffffu, lane_dt, tl), dA = __shfl_sync(0xffffffffu, lane_dA, tl);
            const float *Bq = &S.B[tl][j * chunk::QS], *Cq = &S.C[tl][j * chunk::QS];
            float acc[EIGHTHS] = {};
#pragma unroll
            for (int kk = 0; kk < NPT; kk += 4) {
                float4 b4 = *(const float4 *)(Bq + kk), c4 = *(const float4 *)(Cq + kk);
                float bv[4] = {b4.x, b4.y, b4.z, b4.w}, cv[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
                for (int e = 0; e < 4 && kk + e < NPT; e++) {
                    float dtB = __fmul_rn(dt, bv[e]);
                    float sv = __fadd_rn(__fmul_rn(dA, st[kk + e]), __fmul_rn(dtB, x));
                    st[kk + e] = sv;
                    acc[(kk + e) / L] = __fadd_rn(acc[(kk + e) / L], __fmul_rn(sv, cv[e]));
                }
            }
            /* the eighths joined pairwise: within the thread, then over neighbouring lanes */
            float sum = EIGHTHS == 2 ? __fadd_rn(acc[0], acc[EIGHTHS - 1]) : acc[0];
#pragma unroll
            for (int o = 1; o < PARTS; o *= 2) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
            /* The butterfly leaves the same bits in all PARTS lanes of the channel (each add's
             * operands in either order), so where every thread of the block is live all may
             * store: no branch around the store to cut the stretch below into blocks. */
            float out = __fadd_rn(sum, __fmul_rn(Dh, x));
            if (every_lane_stores)
                y_q[(size_t)t * I] = out;
            else if (j == 0 && live)
                y_q[(size_t)t * I] = out;
        };
#if NT_SCAN_ILP
        if (cnt == TC && !snap && nq == SCAN_QB) {
            /* A whole chunk without snapshots, every channel live: one branch-free stretch of TC
             * positions, so that the compiler interleaves position tl + 1's states (which wait
             * only on tl's states) with tl's chain of adds and shuffles (ILP, above). */
#pragma unroll
            for (int tl = 0; tl < TC; tl++) position(tl, true);
            continue;
        }
#endif
#pragma unroll
        for (int tl = 0; tl < TC; tl++) {
            if (tl >= cnt) break;
            if (snap && live) {
                float *Sn = snap + (size_t)(t0 + tl) * state_floats + S_off;
#pragma unroll
                for (int kk = 0; kk < NPT; kk++) Sn[(size_t)kk * P] = st[kk];
            }
            position(tl, false);
        }
    }
    cp_async_wait<0>();
    if (live)
#pragma unroll
        for (int kk = 0; kk < NPT; kk++) state[S_off + (size_t)kk * P] = st[kk];
}
void be_mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, const float *xbc, float *state,
                   float *state_snap, float *y) {
    float *snap = p->snap ? state_snap : NULL;
    OP_START(be, OP_SCAN, DIMS(d), U(w->A), U(w->dt_bias), U(w->D), U(zxd), U(xbc), U(state), U(snap), U(y));
    PROFILE(be, "mamba_scan n=%d%s", p->n, snap ? " snap" : "");
    int parts = p->n >= SCAN_WIDE_MIN ? 8 : 4, npt = d->N / parts;
    dim3 grid((unsigned)d->nh, (unsigned)((d->P + SCAN_QB - 1) / SCAN_QB)), block(SCAN_QB * parts);
#define SCAN_CASE(v, k)                                                                            \
    case v * 16 + k:                                                                               \
        NT_LAUNCH_EARLY((k_mamba_scan<v, k>), grid, block, 0, p->n, d->nh, d->P, d->N, d->G, d->I, d->CD, d->zxd, \
                        d->dt_lo, d->dt_hi, w->dt_bias, w->A, w->D, zxd, xbc, state, snap, y);                  \
        break;
    switch (npt * 16 + parts) {
        SCAN_CASE(2, 4) SCAN_CASE(4, 4) SCAN_CASE(8, 4) SCAN_CASE(16, 4) SCAN_CASE(32, 4) SCAN_CASE(64, 4)
        SCAN_CASE(1, 8) SCAN_CASE(2, 8) SCAN_CASE(4, 8) SCAN_CASE(8, 8) SCAN_CASE(16, 8) SCAN_CASE(32, 8)
    default: /* mamba_limits refused the model at load */
        return cuda_fault(be, "mamba_scan: ssm_state_size %d is not one the scan holds", d->N);
    }
#undef SCAN_CASE
    LAUNCHED(be);
}

/* One block per (position, group): o = y * silu(z), then the group's RMS norm. */
__global__ void k_gated_norm(int I, int G, int zxdw, float eps, const float *norm_w, const float *y,
                             const float *zxd, float *out) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
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

void be_mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                         const struct nt_mamba_weights *w, const float *y, const float *zxd, float *out) {
    OP_START(be, OP_GNORM, DIMS(d), U(w->norm_w), U(y), U(zxd), U(out));
    PROFILE(be, "mamba_gated_norm n=%d", p->n);
    NT_LAUNCH_EARLY(k_gated_norm, p->n * d->G, ELEM_THREADS, 0, d->I, d->G, d->zxd, d->eps, w->norm_w, y, zxd, out);
    LAUNCHED(be);
}
void mamba_limits(const struct nt_mamba_dims *d, char *why, size_t cap) {
    int eighth = d->N / 8;
    if (d->K < 1 || d->K > NT_MAX_CONV_KERNEL)
        snprintf(why, cap, "conv_kernel %d: the CUDA conv holds 1 to %d taps", d->K, NT_MAX_CONV_KERNEL);
    else if (d->N % 8 || d->N > SCAN_MAX_N || (eighth & (eighth - 1)))
        snprintf(why, cap, "ssm_state_size %d: the CUDA scan holds 8, 16, 32, ... %d (a power of two from 8)", d->N,
                 SCAN_MAX_N);
    else if (d->P < 1 || (d->P + SCAN_QB - 1) / SCAN_QB > 65535)
        snprintf(why, cap, "mamba_head_dim %d: the CUDA scan holds 1 to %d", d->P, 65535 * SCAN_QB);
    else if (d->G < 1 || d->nh % d->G || d->I % d->G)
        snprintf(why, cap, "n_groups %d must divide mamba_num_heads %d", d->G, d->nh);
    else
        why[0] = 0;
}
