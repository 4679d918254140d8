/* mamba.cu - the CUDA backend's Mamba-2 operations: the causal depthwise conv, the selective
 * scan (state in registers for the whole pass) and the gated group norm. mamba_limits says which
 * shapes these kernels hold; a model past them is refused when it is loaded.
 */
#include "ops.cuh"

/* One thread per channel, positions in order, the ring in registers-or-local memory. snap (a
 * verify pass; else NULL): slot t gets the ring before position t, written from the registers
 * as the pass goes, so the rollback costs no extra pass. */
__global__ void k_mamba_conv(int n, int K, int CD, int I, int zxdw, const float *conv_w, const float *conv_b,
                             const float *zxd, float *ring, float *snap, float *xbc) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= CD) return;
    const float *wc = conv_w + (size_t)c * K;
    float r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K - 1; k++) r[k] = ring[(size_t)k * CD + c];
    for (int t = 0; t < n; t++) {
        if (snap)
            for (int k = 0; k < K - 1; k++) snap[((size_t)t * (K - 1) + k) * CD + c] = r[k];
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

void be_mamba_conv(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, float *ring, float *ring_snap, float *xbc) {
    float *snap = p->snap ? ring_snap : NULL;
    OP_START(be, OP_CONV, DIMS(d), U(w->conv_w), U(w->conv_b), U(zxd), U(ring), U(snap), U(xbc));
    PROFILE(be, "mamba_conv n=%d%s", p->n, snap ? " snap" : "");
    NT_LAUNCH(k_mamba_conv, (d->CD + 127) / 128, 128, p->n, d->K, d->CD, d->I, d->zxd, w->conv_w, w->conv_b, zxd,
              ring, snap, xbc);
    LAUNCHED(be);
}

/* One block per head, SCAN_SPLIT * P threads: thread (j, q) keeps the states S[k][q] of its
 * quarter k in [j*NPT, (j+1)*NPT), NPT = N / SCAN_SPLIT, in registers for the whole pass (the
 * state is read and written once per pass, not once per position), and advances them position
 * by position. y[t] = ((a0 + a1) + (a2 + a3)) + D x, a_j the quarter sums in k order: a fixed
 * tree per element, whatever n is (the CPU sums the N terms in one chain: last-bit differences).
 * B and C of the position go through shared memory. snap (a verify pass; else NULL): slot t gets
 * the state before position t, stored from the registers at the top of the position. */
#define SCAN_SPLIT 4
#define SCAN_MAX_N 256
#define SCAN_MAX_P 128 /* a block's 65536 registers must hold SCAN_SPLIT * P threads: nvcc 13.0 gives
                         * the kernel 96 registers at NPT = 32 (P <= 170) and 166 at NPT = 64 (N =
                         * 256: P <= 98, held to 64 by mamba_limits); 1024 threads could not launch */
template <int NPT>
__global__ void k_mamba_scan(int n, int nh, int P, int N, int G, int I, int CD, int zxdw, float dt_lo, float dt_hi,
                             const float *__restrict__ dt_bias, const float *__restrict__ A_log,
                             const float *__restrict__ Dv, const float *__restrict__ zxd,
                             const float *__restrict__ xbc, float *__restrict__ state, float *__restrict__ snap,
                             float *__restrict__ y) {
    __shared__ float sB[SCAN_MAX_N], sC[SCAN_MAX_N], part[SCAN_SPLIT][SCAN_MAX_P];
    int h = blockIdx.x, q = threadIdx.x % P, j = threadIdx.x / P, g = h / (nh / G);
    float A = -expf(A_log[h]);
    float *S = state + (size_t)h * N * P + (size_t)j * NPT * P + q;
    float st[NPT];
#pragma unroll
    for (int kk = 0; kk < NPT; kk++) st[kk] = S[(size_t)kk * P];
    size_t S_off = (size_t)(S - state), state_floats = (size_t)nh * N * P;
    for (int t = 0; t < n; t++) {
        if (snap) {
            float *Sn = snap + (size_t)t * state_floats + S_off;
#pragma unroll
            for (int kk = 0; kk < NPT; kk++) Sn[(size_t)kk * P] = st[kk];
        }
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

void be_mamba_scan(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                   const struct nt_mamba_weights *w, const float *zxd, const float *xbc, float *state,
                   float *state_snap, float *y) {
    float *snap = p->snap ? state_snap : NULL;
    OP_START(be, OP_SCAN, DIMS(d), U(w->A_log), U(w->dt_bias), U(w->D), U(zxd), U(xbc), U(state), U(snap), U(y));
    PROFILE(be, "mamba_scan n=%d%s", p->n, snap ? " snap" : "");
    int npt = d->N / SCAN_SPLIT;
    dim3 grid(d->nh), block(SCAN_SPLIT * d->P);
#define SCAN_CASE(v)                                                                               \
    case v:                                                                                        \
        NT_LAUNCH(k_mamba_scan<v>, grid, block, p->n, d->nh, d->P, d->N, d->G, d->I, d->CD, d->zxd, d->dt_lo,    \
                  d->dt_hi, w->dt_bias, w->A_log, w->D, zxd, xbc, state, snap, y);                         \
        break;
    switch (npt) {
        SCAN_CASE(1) SCAN_CASE(2) SCAN_CASE(4) SCAN_CASE(8) SCAN_CASE(16) SCAN_CASE(32) SCAN_CASE(64)
    default: /* mamba_limits refused the model at load */
        return cuda_fault(be, "mamba_scan: ssm_state_size %d is not one the scan holds", d->N);
    }
#undef SCAN_CASE
    LAUNCHED(be);
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

void be_mamba_gated_norm(struct nt_backend *be, const struct nt_pass *p, const struct nt_mamba_dims *d,
                         const struct nt_mamba_weights *w, const float *y, const float *zxd, float *out) {
    OP_START(be, OP_GNORM, DIMS(d), U(w->norm_w), U(y), U(zxd), U(out));
    PROFILE(be, "mamba_gated_norm n=%d", p->n);
    NT_LAUNCH(k_gated_norm, p->n * d->G, ELEM_THREADS, d->I, d->G, d->zxd, d->eps, w->norm_w, y, zxd, out);
    LAUNCHED(be);
}
void mamba_limits(const struct nt_mamba_dims *d, char *why, size_t cap) {
    int npt = d->N / SCAN_SPLIT;
    if (d->K < 1 || d->K > NT_MAX_CONV_KERNEL)
        snprintf(why, cap, "conv_kernel %d: the CUDA conv holds 1 to %d taps", d->K, NT_MAX_CONV_KERNEL);
    else if (d->N % SCAN_SPLIT || d->N > SCAN_MAX_N || (npt & (npt - 1)))
        snprintf(why, cap, "ssm_state_size %d: the CUDA scan holds 4, 8, 16, ... %d (a power of two from 4)", d->N,
                 SCAN_MAX_N);
    else if (d->P < 1 || d->P > (d->N > 128 ? SCAN_MAX_P / 2 : SCAN_MAX_P))
        snprintf(why, cap, "mamba_head_dim %d: the CUDA scan holds 1 to %d with ssm_state_size %d", d->P,
                 d->N > 128 ? SCAN_MAX_P / 2 : SCAN_MAX_P, d->N);
    else if (d->G < 1 || d->nh % d->G || d->I % d->G)
        snprintf(why, cap, "n_groups %d must divide mamba_num_heads %d", d->G, d->nh);
    else
        why[0] = 0;
}
