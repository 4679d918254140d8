/* products.cu - the products of the CUDA backend: q8_2f and q4tp weights times int8 activations,
 * and float weights (f32, f16, bf16) times f32 activations; plain (one matrix, the pass's
 * positions) and grouped (moe_experts' work items).
 *
 * FLOAT WEIGHTS follow the CPU's arithmetic exactly (matmul.c's AVX2 lanes: lane l of 8 fmas
 * columns l, l + 8, ... below cols & ~7, a fixed tree joins the lanes, the tail columns are added
 * in order): k_float_product gives the CPU's bits.
 *
 * THE PACKED ARITHMETIC (the CUDA backend's own; the CPU's, matmul_q.c, sums 8 lane chains
 * instead). The activations of a position are quantized per block of 32 columns exactly as the
 * CPU does (for q8_2f after the column field: x'[c] = x[c] cs[c]): d = amax / 127,
 * q = clamp(rint(x' * (127 / amax)), +-127), see quantize_block. Then for output (row r, position t):
 *     isum_b = sum over the block's columns of w[r][c] q[t][c]     (exact int32)
 *     s_b    = d[t][b]  (q8_2f)      or  scale(r, b) * d[t][b]  (q4tp, one f32 multiply)
 *     acc    = fma((float)isum_b, s_b, acc)   for b = 0, 1, ..., nb - 1 in order, acc from 0
 *     y      = rs[r] * acc (q8_2f) or acc (q4tp); + bias[r]; relu^2
 * The integer sum of a block is exact in any order, so the dp4a kernels (any lane split) and
 * the tensor-core kernel (mma m16n8k32: one block of 32 columns is one k step) produce the same
 * isum_b, and all three kernels then run the same float chain: the same bits whatever the pass
 * size (DESIGN.md: one arithmetic per position). Against the CPU this differs only in the order
 * of the float additions (cuda_backend.h: NT_CUDA_PACKED_TOL).
 *
 * LAYOUT OF THE QUANTIZED ACTIVATIONS (pass scratch, pk_qx_stride bytes per row): nb blocks of
 * 32 int8, then nb f32 d values. q8_2f: column order. q4tp: per 8-column word j of a block, its
 * even columns then its odd ones (8j, 8j+2, 8j+4, 8j+6, 8j+1, 8j+3, 8j+5, 8j+7): the order in
 * which a q4tp weight word splits into its low and high nibbles with one mask each, so a word's
 * 8 weights meet their activations as two dp4a / two mma k-slices without any byte shuffling.
 *
 * THE KERNELS.
 * k_gemv (items of 1 or 4 positions: decode, short passes): a block of 256 threads owns RB whole
 * rows, contiguous in memory; every thread issues all its GV_CHUNKS 16-byte weight loads before
 * using any (~32 KB in flight per block, the whole matrix in flight at once for most shapes),
 * computes the block sums with dp4a into shared memory, then RB x P threads run the chains.
 * Items of one position (decode) quantize their activation row themselves into shared memory
 * while the weights load (no k_quantize launch).
 * k_mma (items of 32 positions: prefill): 4 warps x 16 rows x 32 positions; per block of 32
 * columns each warp runs 4 mma.m16n8k32.s8 with a zero accumulator and folds the int32 results
 * into f32 accumulators with the block's scales; activations and scales come from shared memory.
 * k_packed_ref: one warp per (row, position); any shape (q8_2f with cols % 32 != 0, rows too
 * wide for k_gemv). Slow and plain: it also states the arithmetic in its simplest form.
 */
extern "C" {
#include "cuda_backend.h"
}
#include "ops.cuh"
#include "products.cuh"

/* ---- quantized activations ---------------------------------------------------------------- */

/* Block b of the quantized row dst (pk_qx_stride layout) from activation row x, by one whole
 * warp, lane = column: matmul_q.c's step 1 (W: the matrix, whose column field q8_2f applies). */
__device__ __forceinline__ void quantize_block(const struct pk_product &a, const uint8_t *W, const float *x,
                                               int64_t b, uint8_t *dst) {
    int lane = threadIdx.x & 31;
    int64_t nb = (a.cols + 31) / 32, c = 32 * b + lane;
    float v = 0.0f;
    if (c < a.cols) {
        v = x[c];
        if (a.dtype == NT_DTYPE_Q8_2F) v = __fmul_rn(v, f16f(ld16(W + d_q8_cs_off(a.rows, a.cols) + 2 * c)));
    }
    float amax = warp_max(fabsf(v));
    float d = __fdiv_rn(amax, 127.0f);
    float inv = __fdiv_rn(127.0f, amax);
    if (!(inv < INFINITY)) inv = 0.0f;
    float r = rintf(__fmul_rn(v, inv));
    r = fminf(fmaxf(r, -127.0f), 127.0f);
    dst[32 * b + qx_slot(a.dtype, lane)] = (uint8_t)(int8_t)(c < a.cols ? (int)r : 0);
    if (lane == 0) ((float *)(dst + 32 * nb))[b] = d;
}

/* The matrix and activation row of quantized row i (plain: row i; grouped: entry i's expert,
 * and its position's row (xmode 1) or row i (xmode 2)). */
__device__ __forceinline__ const float *quantize_source(const struct pk_product &a, int64_t i, const uint8_t **Wout) {
    int64_t xrow = i;
    const uint8_t *W = a.W; /* in a scalar until the end: see pk_item_of */
    if (a.grouped) {
        int ts = a.entries[i];
        W = a.Wtab[a.idx[ts]];
        if (a.xmode == 1) xrow = ts / a.k;
    }
    *Wout = W;
    return a.x + xrow * a.x_stride;
}

/* One warp per (row, block of 32 columns). */
__global__ void k_quantize(struct pk_product a) {
    int64_t i = blockIdx.x, b = (int64_t)blockIdx.y * 8 + (threadIdx.x >> 5);
    if (b >= (a.cols + 31) / 32) return; /* whole warps: the reduction is warp-local */
    const uint8_t *W;
    const float *x = quantize_source(a, i, &W);
    quantize_block(a, W, x, b, a.qx + i * (int64_t)pk_qx_stride(a.cols));
}

/* ---- what a block works on ------------------------------------------------------------------ */

/* The work item of this block: its matrix, first entry (gi of position 0), positions P (0: the
 * block has no work). Computed in scalars and returned whole. The earlier form - fields of an
 * out-parameter written, W overwritten inside `if (a.grouped)` - was miscompiled by nvcc 13.0
 * (V13.0.88): with pk_product larger than 128 bytes as a by-value kernel parameter, the PTX of
 * every kernel stored a.W (NULL) in place of Wtab[e], so grouped products read weights at small
 * addresses. The host emulation, compiled by g++, ran the source as written (docs/TESTING.md). */
struct pk_item {
    const uint8_t *W;
    int base, t0, P;
};

__device__ __forceinline__ struct pk_item pk_item_of(const struct pk_product &a, int it) {
    const uint8_t *W = a.W;
    int base = 0, t0 = it * a.group, cnt = a.n;
    if (a.grouped) {
        if (it < *a.n_items) {
            int item = a.items[it], e = item >> 16;
            t0 = (item & 0xffff) * a.group;
            cnt = a.count[e];
            base = a.start[e];
            W = a.Wtab[e];
        } else {
            cnt = 0;
        }
    }
    struct pk_item o = {W, base, t0, t0 < cnt ? min(a.group, cnt - t0) : 0};
    return o;
}

/* The output of row r for the item's position p, chain value acc: the arithmetic's last line. */
__device__ __forceinline__ void pk_store(const struct pk_product &a, const struct pk_item &it, int64_t r, int p,
                                         float acc) {
    float v = acc;
    if (a.dtype == NT_DTYPE_Q8_2F) v = __fmul_rn(f16f(ld16(it.W + d_q8_rs_off(a.rows, a.cols) + 2 * r)), v);
    if (a.bias) v = __fadd_rn(v, a.bias[r]);
    if (a.act == NT_ACT_RELU2) {
        v = v > 0.0f ? v : 0.0f;
        v = __fmul_rn(v, v);
    }
    int gi = it.base + it.t0 + p;
    int64_t yrow = a.grouped && a.ymode ? a.entries[gi] : gi;
    a.y[yrow * a.y_stride + r] = v;
}

__device__ __forceinline__ const uint8_t *pk_qrow(const struct pk_product &a, const struct pk_item &it, int p) {
    return a.qx + (int64_t)(it.base + it.t0 + p) * (int64_t)pk_qx_stride(a.cols);
}

/* ---- k_gemv -------------------------------------------------------------------------------- */

#define GV_THREADS 256
#ifndef GV_CHUNKS /* (dev/cuda variants build with other values) */
#define GV_CHUNKS 8                            /* 16-byte weight loads per thread */
#endif
#ifndef GV_MIN_BLOCKS
#define GV_MIN_BLOCKS 3 /* blocks per SM the registers must allow: 3 (<= 85 registers) beat 1 (98
                         * registers, 2 blocks) by 1.3-1.5x at n = 1 on the H200 (docs/PERF.md) */
#endif
#define GV_MAX_CHUNKS (GV_THREADS * GV_CHUNKS) /* per block: 32 KB */

/* Chunks of 16 bytes per row: q8_2f half a block, q4tp one group (a block). */
static int64_t chunks_per_row(int dtype, int64_t cols) { return dtype == NT_DTYPE_Q4TP ? cols / 32 : cols / 16; }

/* Items of one position may quantize their row themselves (FUSED: no k_quantize launch, the
 * quantized row in shared memory; every block computes the same bytes): columns up to this. */
#define GV_FUSED_COLS 8192
#define GV_FUSED_BLOCKS 1024

template <int MAXP, bool FUSED>
__global__ void __launch_bounds__(GV_THREADS, GV_MIN_BLOCKS) k_gemv(struct pk_product a, int RB) {
    /* block sums [position][row_local * nb + b]; q4tp group scales [row_local * nb + b] */
    __shared__ int32_t isum[MAXP][GV_MAX_CHUNKS];
    __shared__ float gscale[GV_MAX_CHUNKS];
    __shared__ __align__(16) uint8_t sq[FUSED ? GV_FUSED_COLS + GV_FUSED_COLS / 8 : 16];
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return;
    int tid = threadIdx.x;
    const bool q4 = a.dtype == NT_DTYPE_Q4TP;
    int64_t cols = a.cols, nb = cols / 32, cpr = q4 ? nb : 2 * nb;
    int64_t r0 = (int64_t)blockIdx.y * RB;
    int nrows = (int)min((int64_t)RB, a.rows - r0);
    int nch = nrows * (int)cpr;
    const uint8_t *wb = it.W + r0 * (q4 ? nb * 16 : cols); /* the block's rows: contiguous */

    uint4 wv[GV_CHUNKS];
#pragma unroll
    for (int j = 0; j < GV_CHUNKS; j++) {
        int c = tid + GV_THREADS * j;
        wv[j] = c < nch ? __ldg((const uint4 *)(wb + 16 * (int64_t)c)) : make_uint4(0, 0, 0, 0);
    }
    if (q4) {
#pragma unroll
        for (int j = 0; j < GV_CHUNKS; j++) {
            int c = tid + GV_THREADS * j;
            if (c < nch) gscale[c] = q4_group_scale(it.W, a.rows, cols, r0 + c / cpr, c % cpr);
        }
    }
    if (FUSED) { /* while the weights load: the item's one row, a warp per block of 32 columns */
        const uint8_t *W;
        const float *x = quantize_source(a, it.base + it.t0, &W);
        for (int64_t b = tid >> 5; b < nb; b += GV_THREADS / 32) quantize_block(a, W, x, b, sq);
        __syncthreads();
    }
    for (int p = 0; p < it.P; p++) {
        const uint8_t *q = FUSED ? sq : pk_qrow(a, it, p);
#pragma unroll
        for (int j = 0; j < GV_CHUNKS; j++) {
            int c = tid + GV_THREADS * j;
            int cc = c < nch ? c : 0;
            int s;
            if (q4) {
                const uint4 *qp = (const uint4 *)(q + 32 * (int64_t)(cc % cpr));
                uint4 qa = qp[0], qb = qp[1]; /* global (L1) or the shared row */
                s = __dp4a(q4_lo(wv[j].x), (int)qa.x, 0);
                s = __dp4a(q4_hi(wv[j].x), (int)qa.y, s);
                s = __dp4a(q4_lo(wv[j].y), (int)qa.z, s);
                s = __dp4a(q4_hi(wv[j].y), (int)qa.w, s);
                s = __dp4a(q4_lo(wv[j].z), (int)qb.x, s);
                s = __dp4a(q4_hi(wv[j].z), (int)qb.y, s);
                s = __dp4a(q4_lo(wv[j].w), (int)qb.z, s);
                s = __dp4a(q4_hi(wv[j].w), (int)qb.w, s);
                if (c < nch) isum[p][c] = s;
            } else {
                uint4 qa = *(const uint4 *)(q + 16 * (int64_t)(cc % cpr));
                s = __dp4a((int)wv[j].x, (int)qa.x, 0);
                s = __dp4a((int)wv[j].y, (int)qa.y, s);
                s = __dp4a((int)wv[j].z, (int)qa.z, s);
                s = __dp4a((int)wv[j].w, (int)qa.w, s);
                s += __shfl_xor_sync(0xffffffffu, s, 1); /* the block's other half: thread c ^ 1 */
                if (c < nch && !(c & 1)) isum[p][c >> 1] = s;
            }
        }
    }
    __syncthreads();
    if (tid >= nrows * it.P) return;
    int p = tid % it.P, rl = tid / it.P;
    const float *dv = (const float *)((FUSED ? sq : pk_qrow(a, it, p)) + 32 * nb);
    const int32_t *is = isum[p] + (int64_t)rl * nb;
    const float *gs = gscale + (int64_t)rl * nb;
    float acc = 0.0f;
    if (q4) {
#pragma unroll 4
        for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], __fmul_rn(gs[b], dv[b]), acc);
    } else {
#pragma unroll 4
        for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], dv[b], acc);
    }
    pk_store(a, it, r0 + rl, p, acc);
}

/* ---- k_mma ----------------------------------------------------------------------------------- */

#define MMA_WARPS 4
#define MMA_ROWS (16 * MMA_WARPS)

/* D = A B with A 16x32 s8 (row-major fragments), B 32x8 s8 (column-major), a zero accumulator. */
__device__ __forceinline__ void mma_s8(int c[4], int a0, int a1, int a2, int a3, int b0, int b1) {
#ifdef NT_CUDA_EMULATION
    emu_mma_m16n8k32_s8(c, a0, a1, a2, a3, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#endif
}

#define MMA_KC 4                       /* blocks of 32 columns staged per step */
#define MMA_BSTRIDE (MMA_KC * 32 + 32) /* bytes per staged position: 40 words, so the 8 rows a
                                        * fragment load reads fall on distinct banks */

/* The fragments (PTX ISA, mma.m16n8k32 .s8): lane = 4 g + t; A registers 0..3 hold row g k 4t..,
 * row g + 8 k 4t.., row g k 16 + 4t.., row g + 8 k 16 + 4t..; B registers 0, 1 hold column g
 * k 4t.. and k 16 + 4t..; C holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Since a
 * block's integer sum does not depend on the order of its columns, k slot 4t + i is given
 * column 8t + i and slot 16 + 4t + i column 8t + 4 + i (in the quantized row's order): each lane
 * then loads 8 contiguous bytes of a q8_2f row and of an activation row, or one word of a q4tp
 * group (low nibbles: the first 4 slots, high: the next 4).
 * Per step of MMA_KC blocks the item's 32 activation rows, their d values and (q4tp) the group
 * scales of the block's 64 rows are staged in shared memory once for the 4 warps; each warp
 * reads its weight fragments straight from memory (every weight byte is used once per block),
 * the next block's while this one's mma run. */
template <bool Q4>
__global__ void __launch_bounds__(MMA_WARPS * 32) k_mma(struct pk_product a) {
    __shared__ __align__(16) uint8_t sb[PK_MMA_N][MMA_BSTRIDE];
    __shared__ float sd[PK_MMA_N][MMA_KC];
    __shared__ float ss[MMA_ROWS][MMA_KC];
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    int64_t cols = a.cols, nb = cols / 32, rows = a.rows;
    int64_t row0 = (int64_t)blockIdx.y * MMA_ROWS;
    int64_t rA = row0 + 16 * warp + g, rB = rA + 8;
    int64_t lA = min(rA, rows - 1), lB = min(rB, rows - 1); /* rows past the end: loaded, not stored */
    const uint8_t *wA, *wB;
    if (Q4) {
        wA = it.W + lA * nb * 16 + 4 * t;
        wB = it.W + lB * nb * 16 + 4 * t;
    } else {
        wA = it.W + lA * cols + 8 * t;
        wB = it.W + lB * cols + 8 * t;
    }
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;

    /* the weight fragments of block b: q8_2f 8 bytes of each row, q4tp one word */
    uint2 na, nbw;
    if (Q4) {
        na.x = __ldg((const uint32_t *)wA), nbw.x = __ldg((const uint32_t *)wB);
        na.y = nbw.y = 0;
    } else {
        na = __ldg((const uint2 *)wA), nbw = __ldg((const uint2 *)wB);
    }
    for (int64_t b0 = 0; b0 < nb; b0 += MMA_KC) {
        int kc = (int)min((int64_t)MMA_KC, nb - b0);
        __syncthreads(); /* the last step's reads of the stage are done */
        /* positions past P stage position P - 1: computed, never stored */
        for (int u = tid; u < PK_MMA_N * kc * 4; u += MMA_WARPS * 32) {
            int pos = u / (kc * 4), w8 = u % (kc * 4);
            const uint8_t *q = pk_qrow(a, it, min(pos, it.P - 1));
            *(uint2 *)&sb[pos][8 * w8] = __ldg((const uint2 *)(q + 32 * b0 + 8 * w8));
        }
        for (int u = tid; u < PK_MMA_N * kc; u += MMA_WARPS * 32) {
            int pos = u / kc, j = u % kc;
            sd[pos][j] = __ldg((const float *)(pk_qrow(a, it, min(pos, it.P - 1)) + 32 * nb) + b0 + j);
        }
        if (Q4)
            for (int u = tid; u < MMA_ROWS * kc; u += MMA_WARPS * 32) {
                int rl = u / kc, j = u % kc;
                ss[rl][j] = q4_group_scale(it.W, rows, cols, min(row0 + rl, rows - 1), b0 + j);
            }
        __syncthreads();
        for (int j = 0; j < kc; j++) {
            int64_t b = b0 + j;
            uint2 xa = na, xb = nbw;
            if (b + 1 < nb) { /* the next block's fragments, in flight during this one's mma */
                if (Q4) {
                    na.x = __ldg((const uint32_t *)(wA + 16 * (b + 1)));
                    nbw.x = __ldg((const uint32_t *)(wB + 16 * (b + 1)));
                } else {
                    na = __ldg((const uint2 *)(wA + 32 * (b + 1)));
                    nbw = __ldg((const uint2 *)(wB + 32 * (b + 1)));
                }
            }
            int a0, a1, a2, a3;
            float sA = 1.0f, sB = 1.0f;
            if (Q4) {
                a0 = q4_lo(xa.x), a2 = q4_hi(xa.x), a1 = q4_lo(xb.x), a3 = q4_hi(xb.x);
                sA = ss[16 * warp + g][j];
                sB = ss[16 * warp + g + 8][j];
            } else {
                a0 = (int)xa.x, a2 = (int)xa.y, a1 = (int)xb.x, a3 = (int)xb.y;
            }
#pragma unroll
            for (int jt = 0; jt < 4; jt++) {
                uint2 xq = *(const uint2 *)&sb[8 * jt + g][32 * j + 8 * t];
                int c[4];
                mma_s8(c, a0, a1, a2, a3, (int)xq.x, (int)xq.y);
                float d0 = sd[8 * jt + 2 * t][j], d1 = sd[8 * jt + 2 * t + 1][j];
                if (Q4) {
                    acc[jt][0] = __fmaf_rn((float)c[0], __fmul_rn(sA, d0), acc[jt][0]);
                    acc[jt][1] = __fmaf_rn((float)c[1], __fmul_rn(sA, d1), acc[jt][1]);
                    acc[jt][2] = __fmaf_rn((float)c[2], __fmul_rn(sB, d0), acc[jt][2]);
                    acc[jt][3] = __fmaf_rn((float)c[3], __fmul_rn(sB, d1), acc[jt][3]);
                } else {
                    acc[jt][0] = __fmaf_rn((float)c[0], d0, acc[jt][0]);
                    acc[jt][1] = __fmaf_rn((float)c[1], d1, acc[jt][1]);
                    acc[jt][2] = __fmaf_rn((float)c[2], d0, acc[jt][2]);
                    acc[jt][3] = __fmaf_rn((float)c[3], d1, acc[jt][3]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t r = i < 2 ? rA : rB;
            int p = 8 * j + 2 * t + (i & 1);
            if (r < rows && p < it.P) pk_store(a, it, r, p, acc[j][i]);
        }
}

/* ---- k_float_product -------------------------------------------------------------------------- */

#define FP_WARPS 4
#define FP_CHUNK 1024 /* columns of a row staged per step */
#define FP_XPAD 8     /* the 4 positions' staged x rows 8 floats apart: their lanes hit distinct banks */

/* One warp = one row x up to PK_FLOAT_GROUP positions (8 lanes each). The rows and the item's
 * activation rows are staged in chunks of FP_CHUNK columns through shared memory (the x chunk
 * once for the block's 4 warps), the next weight chunk's loads in flight while this one's chains
 * run: every chain reads shared memory only (reading x from global memory inside the dependent
 * chain made the f32 router 60 us for 1.4 MB). */
__global__ void __launch_bounds__(FP_WARPS * 32) k_float_product(struct pk_product a) {
    __shared__ float wf[FP_WARPS][FP_CHUNK];
    __shared__ float sx[PK_FLOAT_GROUP][FP_CHUNK + FP_XPAD];
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.y * FP_WARPS + warp;
    bool row = r < a.rows; /* a warp past the last row still stages x with the others */
    int p = lane >> 3, l = lane & 7;
    bool chain = row && p < it.P;
    int64_t cols = a.cols, c8 = cols & ~(int64_t)7;
    const float *xs[PK_FLOAT_GROUP]; /* the activation row of each position of the item */
#pragma unroll
    for (int q = 0; q < PK_FLOAT_GROUP; q++) {
        int gi = it.base + it.t0 + min(q, it.P - 1);
        int64_t xrow = a.grouped && a.xmode == 1 ? a.entries[gi] / a.k : gi;
        xs[q] = a.x + xrow * a.x_stride;
    }
    const uint8_t *W = it.W;
    float *sm = wf[warp];
    float acc = 0.0f;
    float nx[FP_CHUNK / 32];
#pragma unroll
    for (int j = 0; j < FP_CHUNK / 32; j++) {
        int64_t c = lane + 32 * j;
        nx[j] = row && c < c8 ? load_w(W, r * cols + c, a.dtype) : 0.0f;
    }
    for (int64_t c0 = 0; c0 < c8; c0 += FP_CHUNK) {
        int len = (int)min((int64_t)FP_CHUNK, c8 - c0);
        __syncthreads(); /* the last chunk's chains are done with the stage */
        for (int u = threadIdx.x; u < it.P * FP_CHUNK; u += FP_WARPS * 32) {
            int q = u / FP_CHUNK, j = u % FP_CHUNK;
            sx[q][j] = j < len ? xs[q][c0 + j] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < FP_CHUNK / 32; j++) {
            sm[lane + 32 * j] = nx[j];
            int64_t c = c0 + FP_CHUNK + lane + 32 * j;
            nx[j] = row && c < c8 ? load_w(W, r * cols + c, a.dtype) : 0.0f;
        }
        __syncthreads();
        if (chain)
#pragma unroll 8
            for (int j = l; j < len; j += 8) acc = __fmaf_rn(sm[j], sx[p][j], acc);
    }
    /* the fixed lane tree ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1));
    if (!chain || l != 0) return;
    const float *xp = xs[p];
    for (int64_t c = c8; c < cols; c++) acc = __fadd_rn(acc, __fmul_rn(load_w(W, r * cols + c, a.dtype), xp[c]));
    pk_store(a, it, r, p, acc);
}

/* ---- k_packed_ref ---------------------------------------------------------------------------- */

#define REF_WARPS 4

/* One warp per row, the item's positions in turn; lane = column of the block. */
__global__ void __launch_bounds__(REF_WARPS * 32) k_packed_ref(struct pk_product a) {
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.y * REF_WARPS + warp;
    if (r >= a.rows) return; /* whole warps */
    const bool q4 = a.dtype == NT_DTYPE_Q4TP;
    int64_t cols = a.cols, nb = (cols + 31) / 32;
    for (int p = 0; p < it.P; p++) {
        const uint8_t *q = pk_qrow(a, it, p);
        const float *dv = (const float *)(q + 32 * nb);
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            int64_t c = 32 * b + lane;
            int w = 0;
            if (c < cols) {
                if (q4) {
                    uint32_t word = *(const uint32_t *)(it.W + (r * nb + b) * 16 + 4 * (lane >> 3));
                    w = (int)((word >> (4 * (lane & 7))) & 15) - 8;
                } else {
                    w = (int8_t)it.W[r * cols + c];
                }
            }
            int xq = (int8_t)q[32 * b + qx_slot(a.dtype, lane)];
            int isum = __reduce_add_sync(0xffffffffu, w * xq);
            float s = q4 ? __fmul_rn(q4_group_scale(it.W, a.rows, cols, r, b), dv[b]) : dv[b];
            acc = __fmaf_rn((float)isum, s, acc);
        }
        if (lane == 0) pk_store(a, it, r, p, acc);
    }
}

/* ---- launch -------------------------------------------------------------------------------- */

static int reference_only; /* nt_cuda_packed_reference */

extern "C" void nt_cuda_packed_reference(int on) { reference_only = on; }
bool pk_reference_only(void) { return reference_only != 0; }

/* Rows one k_gemv block owns for a matrix of cpr chunks per row and items of up to maxp
 * positions: as many whole rows as GV_MAX_CHUNKS chunks hold, one chain per thread. */
static int64_t gemv_rows_per_block(int64_t cpr, int maxp, int64_t rows) {
    int64_t rb = GV_MAX_CHUNKS / cpr;
    if (rb > GV_THREADS / maxp) rb = GV_THREADS / maxp;
    return rb < rows ? rb : rows;
}

/* The grid's y dimension counts blocks of rows: at most 65535. */
#define MAX_ROW_BLOCKS 65535

void product_limits(const struct nt_matrix *W, char *why, size_t cap) {
    why[0] = 0;
    int dt = W->dtype;
    if (dt != NT_DTYPE_F32 && dt != NT_DTYPE_F16 && dt != NT_DTYPE_BF16 && !pk_packed(dt)) {
        snprintf(why, cap, "%s: the CUDA products take f32, f16, bf16, q8_2f and q4tp weights", W->name);
        return;
    }
    /* the fewest rows per block of any kernel pk_run may pick (the reference kernel's 4, the float
     * kernel's FP_WARPS, k_gemv's rows per block for items of 4) must still fit the grid */
    int64_t per_block = pk_packed(dt) ? REF_WARPS : FP_WARPS, cpr = chunks_per_row(dt, W->cols);
    if (pk_packed(dt) && cpr <= GV_MAX_CHUNKS) {
        int64_t rb = gemv_rows_per_block(cpr > 0 ? cpr : 1, 4, W->rows);
        if (rb < per_block) per_block = rb;
    }
    if ((W->rows + per_block - 1) / per_block > MAX_ROW_BLOCKS)
        snprintf(why, cap, "%s: %lld rows: the CUDA products hold at most %lld rows of %lld columns", W->name,
                 (long long)W->rows, (long long)(MAX_ROW_BLOCKS * per_block), (long long)W->cols);
}

/* Launches kernel over work items x row blocks, after checking the grid (product_limits refused
 * larger matrices at load; this keeps a broken invariant an error). */
static bool row_grid(struct nt_backend *be, const struct pk_product *a, int work, int64_t row_blocks, dim3 *grid) {
    if (row_blocks > MAX_ROW_BLOCKS) {
        cuda_fault(be, "product: %lld rows make %lld row blocks, more than one grid holds", (long long)a->rows,
                   (long long)row_blocks);
        return false;
    }
    *grid = dim3((unsigned)work, (unsigned)row_blocks);
    return true;
}

bool pk_run(struct nt_backend *be, const struct pk_product *a, int work) {
    if (work <= 0) return true;
    dim3 grid;
    if (!pk_packed(a->dtype)) {
        if (a->group != PK_FLOAT_GROUP) {
            cuda_fault(be, "float product: items must hold PK_FLOAT_GROUP positions");
            return false;
        }
        if (!row_grid(be, a, work, (a->rows + FP_WARPS - 1) / FP_WARPS, &grid)) return false;
        NT_LAUNCH(k_float_product, grid, FP_WARPS * 32, *a);
        return LAUNCHED(be);
    }
    const bool q4 = a->dtype == NT_DTYPE_Q4TP;
    int64_t nb = (a->cols + 31) / 32, cpr = chunks_per_row(a->dtype, a->cols);
    bool whole_blocks = !reference_only && (q4 || a->cols % 32 == 0);
    bool mma = whole_blocks && a->group == PK_MMA_N;
    bool gemv = whole_blocks && !mma && cpr <= GV_MAX_CHUNKS && a->group <= 4;
    int maxp = a->group == 1 ? 1 : 4;
    int64_t rb = gemv ? gemv_rows_per_block(cpr, maxp, a->rows) : 1;
    int64_t gemv_blocks = (a->rows + rb - 1) / rb;
    /* Every block of a fused product reads the activation row again (from L2: 4-6 bytes per
     * column against the 0.5-1 byte per column of each of its RB rows); worth a launch saved only
     * while the blocks are few (not the lm_head's 11,000). */
    bool fused = gemv && a->group == 1 && a->cols <= GV_FUSED_COLS && gemv_blocks <= GV_FUSED_BLOCKS;
    if (!fused) {
        dim3 qgrid((unsigned)a->n, (unsigned)((nb + 7) / 8));
        NT_LAUNCH(k_quantize, qgrid, 256, *a);
        if (!LAUNCHED(be)) return false;
    }
    if (mma) {
        if (!row_grid(be, a, work, (a->rows + MMA_ROWS - 1) / MMA_ROWS, &grid)) return false;
        if (q4) NT_LAUNCH(k_mma<true>, grid, MMA_WARPS * 32, *a);
        else NT_LAUNCH(k_mma<false>, grid, MMA_WARPS * 32, *a);
    } else if (gemv) {
        if (!row_grid(be, a, work, gemv_blocks, &grid)) return false;
        if (fused) NT_LAUNCH((k_gemv<1, true>), grid, GV_THREADS, *a, (int)rb);
        else if (maxp == 1) NT_LAUNCH((k_gemv<1, false>), grid, GV_THREADS, *a, (int)rb);
        else NT_LAUNCH((k_gemv<4, false>), grid, GV_THREADS, *a, (int)rb);
    } else {
        if (!row_grid(be, a, work, (a->rows + REF_WARPS - 1) / REF_WARPS, &grid)) return false;
        NT_LAUNCH(k_packed_ref, grid, REF_WARPS * 32, *a);
    }
    return LAUNCHED(be);
}

/* ---- the operation ------------------------------------------------------------------------- */

void be_matmul(struct nt_backend *be, const struct nt_pass *p, int n, const struct nt_matrix *W, const float *bias,
               enum nt_act act, const float *x, int x_stride, float *y, int y_stride) {
    OP_START(be, OP_MATMUL, (uint64_t)n, U(W->data), (uint64_t)W->dtype, (uint64_t)W->rows, (uint64_t)W->cols,
             U(bias), (uint64_t)act, U(x), (uint64_t)x_stride, U(y), (uint64_t)y_stride);
    PROFILE(be, "matmul %s %lldx%lld n=%d", dtype_name(W->dtype), (long long)W->rows, (long long)W->cols, n);
    if (n <= 0) return;
    /* the kernels' loads assume 16 bytes (packed: uint4) or the element's alignment; uploads are
     * 256-byte aligned, so this only fails for a matrix pointing inside a larger upload */
    size_t need = pk_packed(W->dtype) ? 16 : W->dtype == NT_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)W->data % need) return cuda_fault(be, "matmul: %s: weight data not aligned for its dtype", W->name);
    if (n == 1 && dc_fits_plain(W)) { /* decode: decode.cu's streaming kernel */
        dc_matmul(be, W, bias, act, x, y, qx_of(p));
        return;
    }
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
    pk_run(be, &a, (n + a.group - 1) / a.group);
}
