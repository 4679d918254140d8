/* products.cu - the products of the CUDA backend: q8_2f and q4tp weights times int8 activations,
 * and float weights (f32, f16, bf16) times f32 activations; plain (one matrix, the pass's
 * positions) and grouped (moe_experts' work items). llama.cpp's block types: ggml.cu, on the
 * activations quantized here.
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
 * k_mma (items of 32 positions: prefill): 4 warps x 16 rows x 32 positions; the weights and
 * activations stream through a pipeline of shared-memory stages (cp.async); per block of 32
 * columns each warp runs 4 mma.m16n8k32.s8 with a zero accumulator and folds the int32 results
 * into f32 accumulators with the block's scales.
 * k_mma_wide (plain q8_2f passes whose blocks fill the SMs): k_mma's arithmetic in blocks of 128
 * rows x 2 items (8 warps of 32 rows x 32 positions), fragments by ldmatrix.
 * k_packed_ref: one warp per (row, position); any shape (q8_2f with cols % 32 != 0, rows too
 * wide for k_gemv). Slow and plain: it also states the arithmetic in its simplest form.
 * Float weights: k_float_product (a warp per row x 4 positions), and k_float_tile for f32 in plain
 * passes of FT_MIN_N or more (tiles of 16 rows x 32 positions): the CPU's bits in both.
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

/* One warp per (row, block of 32 columns). Launched early ahead of a block-type product (its
 * streaming kernel then starts staging weights while this one runs). */
__global__ void k_quantize(struct pk_product a) {
    grid_wait();
    grid_launch_dependents();
    int64_t i = blockIdx.x, b = (int64_t)blockIdx.y * 8 + (threadIdx.x >> 5);
    if (b >= (a.cols + 31) / 32) return; /* whole warps: the reduction is warp-local */
    const uint8_t *W;
    const float *x = quantize_source(a, i, &W);
    quantize_block(a, W, x, b, a.qx + i * (int64_t)pk_qx_stride(a.cols));
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
                /* the weights times 16 (q4_lo16): the same int32 after the shift */
                s = __dp4a(q4_lo16(wv[j].x), (int)qa.x, 0);
                s = __dp4a(q4_hi16(wv[j].x), (int)qa.y, s);
                s = __dp4a(q4_lo16(wv[j].y), (int)qa.z, s);
                s = __dp4a(q4_hi16(wv[j].y), (int)qa.w, s);
                s = __dp4a(q4_lo16(wv[j].z), (int)qb.x, s);
                s = __dp4a(q4_hi16(wv[j].z), (int)qb.y, s);
                s = __dp4a(q4_lo16(wv[j].w), (int)qb.z, s);
                s = __dp4a(q4_hi16(wv[j].w), (int)qb.w, s) >> 4;
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
    float acc = q4 ? pk_chain<true>(is, gs, dv, (int)nb) : pk_chain<false>(is, gs, dv, (int)nb);
    pk_store(a, it, r0 + rl, p, acc);
}

/* ---- k_mma ----------------------------------------------------------------------------------- */

#define MMA_WARPS 4
#define MMA_ROWS (16 * MMA_WARPS)

/* D = A B + C, A 16x32 s8 (row-major fragments), B 32x8 s8 (column-major). Not volatile: a pure
 * function of its operands, which the compiler may schedule freely. */
__device__ __forceinline__ void mma_k32(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const int c[4]) {
#ifdef NT_CUDA_EMULATION
    emu_mma_m16n8k32_s8(d, a, b0, b1, c);
#else
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#endif
}

/* 1: k_mma's products start from SMALL_INT_BIAS, so that turning a block's sum into a float is one
 * float subtract (biased_int_to_float) instead of an integer add and the subtract: one instruction
 * of ~4 per output and block fewer in a loop bound by issue (ncu, session 13: issue slots 50 - 65 %
 * busy, DRAM 4 - 22 %). The same sums, so the same bits; 0: a zero accumulator, as before. */
#ifndef MMA_BIASED_ACC
#define MMA_BIASED_ACC 1
#endif

/* 1: a whole stage's MMA_KC blocks run as one branch-free stretch (only the last stage of a row
 * may hold fewer and keeps a test per block), so that the compiler can load block j + 1's
 * fragments and issue its mma while block j's sums are folded into the accumulators: a warp
 * issues in order, and the test per block made each block wait out its own loads and mma
 * (the scan's same fix: mamba.cu, ILP). The same operations in the same order: the same bits. */
#ifndef MMA_STAGE_ILP
#define MMA_STAGE_ILP 1
#endif

#define MMA_KC 4     /* blocks of 32 columns per stage */
#ifndef MMA_STAGES   /* (dev/cuda variants build other values) */
#define MMA_STAGES 3 /* stages in shared memory: two in flight while one is computed */
#endif
#ifndef MMA_MIN_BLOCKS
#define MMA_MIN_BLOCKS 4 /* resident blocks per SM the registers must allow (the shared memory of 3
                          * stages allows 4) */
#endif
/* Bytes per staged row. The 8 rows (g) x 4 lanes (t) of a fragment load must fall on distinct
 * banks: 8-byte loads (q8_2f weights, activations) want rows 8 words apart modulo 32, 4-byte loads
 * (q4tp weights) 4 words apart: 40 and 20 words. */
#define MMA_XSTRIDE (MMA_KC * 32 + 32)
#define MMA_Q8_WSTRIDE (MMA_KC * 32 + 32)
#define MMA_Q4_WSTRIDE (MMA_KC * 16 + 16)
#define MMA_MAX_CSTRIDE 160 /* q4tp: bytes of a row's group codes staged (cols <= 8192) */

template <bool Q4> struct mma_stage {
    uint8_t w[MMA_ROWS][Q4 ? MMA_Q4_WSTRIDE : MMA_Q8_WSTRIDE]; /* the tile's weights, MMA_KC blocks */
    uint8_t x[PK_MMA_N][MMA_XSTRIDE];                          /* the item's activations */
    float d[PK_MMA_N][MMA_KC];                                 /* their block scales */
    float s[Q4 ? MMA_ROWS : 1][MMA_KC];                        /* q4tp: the weights' group scales */
};

/* Whether a q4tp matrix's group codes fit k_mma's stage of them. */
static bool mma_fits(int dtype, int64_t cols) {
    return dtype != NT_DTYPE_Q4TP || (cols / 32 * 5 + 7) / 8 <= MMA_MAX_CSTRIDE;
}

/* The fragments (PTX ISA, mma.m16n8k32 .s8): lane = 4 g + t; A registers 0..3 hold row g k 4t..,
 * row g + 8 k 4t.., row g k 16 + 4t.., row g + 8 k 16 + 4t..; B registers 0, 1 hold column g
 * k 4t.. and k 16 + 4t..; C holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Since a
 * block's integer sum does not depend on the order of its columns, k slot 4t + i is given
 * column 8t + i and slot 16 + 4t + i column 8t + 4 + i (in the quantized row's order): each lane
 * then reads 8 contiguous bytes of a q8_2f row and of an activation row, or one word of a q4tp
 * group (low nibbles: the first 4 slots, high: the next 4).
 *
 * A block (4 warps, 64 rows x the item's 32 positions) streams its rows' weights and the item's
 * activations through MMA_STAGES stages of MMA_KC blocks of 32 columns in shared memory, copied
 * with cp.async (16 bytes per copy, coalesced): the copies of the next MMA_STAGES - 1 stages are in
 * flight while a stage is computed, so every block keeps 2 x 8-16 KB of loads outstanding without
 * holding registers. A q4tp block stages its rows' group codes once and computes each stage's
 * group scales when it issues the stage's copies. Per block of 32 columns each warp runs 4
 * mma.m16n8k32.s8 (its 16 rows x 4 x 8 positions) with a zero accumulator and folds the int32
 * results into f32 accumulators with the block's scales: the arithmetic of products.cu's header. */
template <bool Q4>
__global__ void __launch_bounds__(MMA_WARPS * 32, MMA_MIN_BLOCKS) k_mma(struct pk_product a) {
    __shared__ __align__(16) struct mma_stage<Q4> st[MMA_STAGES];
    __shared__ uint8_t codes[Q4 ? MMA_ROWS * MMA_MAX_CSTRIDE + 8 : 1];
    __shared__ uint32_t params[Q4 ? MMA_ROWS : 1];
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    int64_t cols = a.cols, nb = cols / 32, rows = a.rows;
    int64_t row0 = (int64_t)blockIdx.y * MMA_ROWS;
    int nrows = (int)min((int64_t)MMA_ROWS, rows - row0); /* rows past the end: row0 + nrows - 1 */
    const int RB = Q4 ? 16 : 32;                           /* weight bytes of a row per block */
    const int64_t wrow = Q4 ? nb * 16 : cols;              /* weight bytes of a row */
    const int nsteps = (int)((nb + MMA_KC - 1) / MMA_KC);
    int64_t cstride = 0;
    if (Q4) { /* the rows' group codes (5 bits each, packed per row) and base/step words, once */
        cstride = (nb * 5 + 7) / 8;
        const uint8_t *cs = it.W + d_q4_codes_off(rows, cols) + row0 * cstride;
        for (int64_t u = tid; u < nrows * cstride; u += MMA_WARPS * 32) codes[u] = cs[u];
        if (tid < nrows) params[tid] = *(const uint32_t *)(it.W + d_q4_params_off(rows, cols) + 4 * (row0 + tid));
        __syncthreads();
    }

    /* issues the copies of stage `step` into st[step % MMA_STAGES] (nothing past the last) */
    /* Each thread's copies are the same every stage but for the column offset: their sources
     * and places are found once (the integer divisions and 64-bit products of finding them per
     * stage made the kernel issue-bound). A stage of kc < MMA_KC blocks (the last) leaves out
     * the copies past its blocks. */
    const int WCPR = MMA_KC * RB / 16;                           /* 16-byte weight copies per row */
    const int WCOP = MMA_ROWS * WCPR / (MMA_WARPS * 32);         /* ... per thread */
    const int XCOP = PK_MMA_N * MMA_KC * 2 / (MMA_WARPS * 32);   /* activation copies per thread */
    static_assert(MMA_ROWS * WCPR % (MMA_WARPS * 32) == 0 && PK_MMA_N * MMA_KC * 2 % (MMA_WARPS * 32) == 0 &&
                      PK_MMA_N * MMA_KC == MMA_WARPS * 32 && MMA_ROWS * MMA_KC % (MMA_WARPS * 32) == 0,
                  "k_mma's copies divide evenly among the threads");
    const uint8_t *wsrc[WCOP], *xsrc[XCOP];
    int wdst[WCOP], wcol[WCOP], xdst[XCOP], xcol[XCOP];
#pragma unroll
    for (int i = 0; i < WCOP; i++) {
        int u = tid + MMA_WARPS * 32 * i, rl = u / WCPR, c = u % WCPR;
        wsrc[i] = it.W + (row0 + min(rl, nrows - 1)) * wrow + 16 * c;
        wdst[i] = rl * (int)sizeof st[0].w[0] + 16 * c;
        wcol[i] = 16 * c / RB; /* the block of the stage this copy belongs to */
    }
    /* positions past P stage position P - 1: computed, never stored */
#pragma unroll
    for (int i = 0; i < XCOP; i++) {
        int u = tid + MMA_WARPS * 32 * i, pos = u / (MMA_KC * 2), c = u % (MMA_KC * 2);
        xsrc[i] = pk_qrow(a, it, min(pos, it.P - 1)) + 16 * c;
        xdst[i] = pos * MMA_XSTRIDE + 16 * c;
        xcol[i] = c / 2;
    }
    const int dpos = tid / MMA_KC, dcol = tid % MMA_KC; /* one block scale per thread */
    const float *dsrc = (const float *)(pk_qrow(a, it, min(dpos, it.P - 1)) + 32 * nb) + dcol;

    /* issues the copies of stage `step` into st[step % MMA_STAGES] (nothing past the last) */
    const sh_addr_t st0 = sh_addr(&st[0]);
    auto issue = [&](int step) {
        if (step < nsteps) {
            struct mma_stage<Q4> &S = st[step % MMA_STAGES];
            const sh_addr_t sa = st0 + (step % MMA_STAGES) * (int)sizeof(st[0]);
            int64_t b0 = (int64_t)step * MMA_KC;
            int kc = (int)min((int64_t)MMA_KC, nb - b0);
#pragma unroll
            for (int i = 0; i < WCOP; i++)
                if (wcol[i] < kc) cp_async16_at(sa + (int)offsetof(mma_stage<Q4>, w) + wdst[i], wsrc[i] + b0 * RB);
#pragma unroll
            for (int i = 0; i < XCOP; i++)
                if (xcol[i] < kc) cp_async16_at(sa + (int)offsetof(mma_stage<Q4>, x) + xdst[i], xsrc[i] + 32 * b0);
            if (dcol < kc)
                cp_async4_at(sa + (int)(offsetof(mma_stage<Q4>, d) + sizeof(float) * (MMA_KC * dpos + dcol)), dsrc + b0);
            if (Q4)
#pragma unroll
                for (int i = 0; i < MMA_ROWS * MMA_KC / (MMA_WARPS * 32); i++) {
                    int u = tid + MMA_WARPS * 32 * i, rl = u / MMA_KC, j = u % MMA_KC, rc = min(rl, nrows - 1);
                    if (j >= kc) continue;
                    int64_t gb = b0 + j;
                    int code = (int)((ld16b(codes + rc * cstride + ((5 * gb) >> 3)) >> ((5 * gb) & 7)) & 31);
                    uint32_t pr = params[rc];
                    S.s[rl][j] = nt_q4tp_scale(f16f((uint16_t)(pr & 0xffff)), f16f((uint16_t)(pr >> 16)), code);
                }
        }
        cp_async_commit(); /* an empty group past the last stage keeps the wait counts uniform */
    };

    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[j][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) issue(s);
    const int rA = 16 * warp + g, rB = rA + 8; /* the warp's fragment rows in the tile */
    const int cb = MMA_BIASED_ACC ? SMALL_INT_BIAS : 0, c0[4] = {cb, cb, cb, cb};
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<MMA_STAGES - 2>(); /* this thread's copies of `step` have landed */
        __syncthreads();                 /* everyone's have; everyone is done with step - 1 */
        issue(step + MMA_STAGES - 1);    /* into step - 1's stage */
        const struct mma_stage<Q4> &S = st[step % MMA_STAGES];
        int kc = (int)min((int64_t)MMA_KC, nb - (int64_t)step * MMA_KC);
        /* block j of the stage: the warp's 16 rows x 32 positions */
        auto block = [&](int j) {
            uint32_t A[4];
            float sA = 1.0f, sB = 1.0f;
            if (Q4) {
                uint32_t xa = *(const uint32_t *)&S.w[rA][16 * j + 4 * t];
                uint32_t xb = *(const uint32_t *)&S.w[rB][16 * j + 4 * t];
                A[0] = q4_lo(xa), A[2] = q4_hi(xa), A[1] = q4_lo(xb), A[3] = q4_hi(xb);
                sA = S.s[rA][j];
                sB = S.s[rB][j];
            } else {
                uint2 xa = *(const uint2 *)&S.w[rA][32 * j + 8 * t];
                uint2 xb = *(const uint2 *)&S.w[rB][32 * j + 8 * t];
                A[0] = xa.x, A[2] = xa.y, A[1] = xb.x, A[3] = xb.y;
            }
#pragma unroll
            for (int jt = 0; jt < 4; jt++) {
                uint2 xq = *(const uint2 *)&S.x[8 * jt + g][32 * j + 8 * t];
                /* |sum| <= 32 x 128 x 127 < 2^22: its float (small_int_to_float) is exact */
                int c[4];
                mma_k32(c, A, xq.x, xq.y, c0);
                float f[4];
#pragma unroll
                for (int i = 0; i < 4; i++) f[i] = MMA_BIASED_ACC ? biased_int_to_float(c[i]) : small_int_to_float(c[i]);
                float d0 = S.d[8 * jt + 2 * t][j], d1 = S.d[8 * jt + 2 * t + 1][j];
                if (Q4) {
                    acc[jt][0] = __fmaf_rn(f[0], __fmul_rn(sA, d0), acc[jt][0]);
                    acc[jt][1] = __fmaf_rn(f[1], __fmul_rn(sA, d1), acc[jt][1]);
                    acc[jt][2] = __fmaf_rn(f[2], __fmul_rn(sB, d0), acc[jt][2]);
                    acc[jt][3] = __fmaf_rn(f[3], __fmul_rn(sB, d1), acc[jt][3]);
                } else {
                    acc[jt][0] = __fmaf_rn(f[0], d0, acc[jt][0]);
                    acc[jt][1] = __fmaf_rn(f[1], d1, acc[jt][1]);
                    acc[jt][2] = __fmaf_rn(f[2], d0, acc[jt][2]);
                    acc[jt][3] = __fmaf_rn(f[3], d1, acc[jt][3]);
                }
            }
        };
#if MMA_STAGE_ILP
        if (kc == MMA_KC) {
            /* a whole stage: one branch-free stretch of MMA_KC blocks (MMA_STAGE_ILP, above) */
#pragma unroll
            for (int j = 0; j < MMA_KC; j++) block(j);
            continue;
        }
#endif
#pragma unroll
        for (int j = 0; j < MMA_KC; j++) {
            if (j >= kc) break;
            block(j);
        }
    }
    cp_async_wait<0>(); /* no copy outlives the block (the empty trailing groups) */
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t r = row0 + (i < 2 ? rA : rB);
            int p = 8 * j + 2 * t + (i & 1);
            if (r < rows && p < it.P) pk_store(a, it, r, p, acc[j][i]);
        }
}

/* ---- k_mma_wide ------------------------------------------------------------------------------ */

/* Plain q8_2f products of many row blocks (long passes): the same arithmetic as k_mma in larger
 * tiles. A block is 8 warps, 4 along the rows x 2 along the positions, each warp 32 rows (two m16
 * tiles) x one item of 32 positions (four n8 tiles): 128 rows x two neighbouring items. Against
 * k_mma's 64 x 32 (ncu, session 17: L2 67 % and L1 72 % busy at in_proj n = 512) each weight byte
 * crosses L2 half as often (two items share it), each activation byte half as often (128 rows),
 * a warp loads each activation fragment once for two weight tiles, and ldmatrix loads a fragment
 * in one instruction: in_proj at n = 512 119 us against 158 (H100, session 17). With few row
 * blocks it loses (out_proj at n = 64: 21 blocks, 42 us against 22), so pk_run takes it only
 * when its blocks are at least the SMs (pk_setup counts them). */
#define WIDE_RW 4    /* warps along the rows */
#define WIDE_ITEMS 2 /* items (warps along the positions) */
#define WIDE_ROWS (32 * WIDE_RW)
#define WIDE_THREADS (WIDE_RW * WIDE_ITEMS * 32)
#ifndef WIDE_MIN_BLOCKS
#define WIDE_MIN_BLOCKS 2 /* resident blocks an SM the registers must allow (the shared memory's too) */
#endif
/* Bytes per staged row: ldmatrix reads 8 rows x 16 bytes at once, conflict-free when rows are an
 * odd number of 16-byte units apart (144 = 9 x 16). */
#define WIDE_STRIDE (MMA_KC * 32 + 16)

struct wide_stage {
    uint8_t w[WIDE_ROWS][WIDE_STRIDE];              /* the tile's weights, MMA_KC blocks */
    uint8_t x[WIDE_ITEMS * PK_MMA_N][WIDE_STRIDE];  /* the items' activations */
    /* their block scales, [item][block j][t][2 n + e] = the scale of position 8 n + 2 t + e: the 8
     * a lane of fragment column t needs for block j are two float4 loads */
    float d[WIDE_ITEMS][MMA_KC][4][8];
};
#define WIDE_SMEM (MMA_STAGES * sizeof(struct wide_stage)) /* dynamic shared memory */

/* Four 8x16-byte matrices from shared memory: lanes 8i .. 8i + 7 give the row addresses of matrix
 * i, and lane 4g + t receives bytes 4t .. 4t + 3 of row g of each (ldmatrix .x4 .b16). Volatile:
 * it must stay between the barriers that guard the stage it reads. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], sh_addr_t row) {
#ifdef NT_CUDA_EMULATION
    emu_ldmatrix_x4(r, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
#endif
}

/* The fragments as in k_mma, but k slot = the block's column (both operands are q8_2f rows in
 * column order, and a block's integer sum does not depend on the order): ldmatrix's matrices are
 * then 16-byte halves of the staged rows. A: matrix 0 rows 0..7 bytes 0..15, 1 rows 8..15 bytes
 * 0..15, 2 rows 0..7 bytes 16..31, 3 rows 8..15 bytes 16..31 (registers a0..a3); B for n tiles
 * 2h, 2h + 1: matrix 0 positions 0..7 bytes 0..15 (b0 of 2h), 1 the same positions bytes 16..31
 * (b1), 2 and 3 positions 8..15 (tile 2h + 1).
 *
 * A stage past the last block (cols / 32 not a multiple of MMA_KC) gets zero scales for its
 * missing blocks instead of a branch per block, so the loop over a stage's blocks has none: the
 * sums of whatever bytes the stage held (integers, |sum| <= 2^19, so finite floats) times a zero
 * scale add +0 to a chain that is never -0 (it starts at +0; x + (-x) is +0; a product of a
 * nonzero block sum and a nonzero scale is at least the smallest subnormal), the same bits as
 * leaving them out. */
__global__ void __launch_bounds__(WIDE_THREADS, WIDE_MIN_BLOCKS) k_mma_wide(struct pk_product a) {
    NT_DYNAMIC_SHARED(uint8_t, smem);
    struct wide_stage *st = (struct wide_stage *)smem;
    static_assert(offsetof(struct wide_stage, d) % 16 == 0 && sizeof(struct wide_stage) % 16 == 0,
                  "k_mma_wide's stage: 16-byte copies and float4 loads");
    const struct pk_item it0 = pk_item_of(a, blockIdx.x * WIDE_ITEMS), it1 = pk_item_of(a, blockIdx.x * WIDE_ITEMS + 1);
    if (!it0.P) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wr = warp % WIDE_RW, wi = warp / WIDE_RW; /* the warp's rows 32 wr.., its item wi */
    const int64_t cols = a.cols, nb = cols / 32, rows = a.rows;
    const int64_t row0 = (int64_t)blockIdx.y * WIDE_ROWS;
    const int nrows = (int)min((int64_t)WIDE_ROWS, rows - row0); /* rows past the end: row0 + nrows - 1 */
    const int nsteps = (int)((nb + MMA_KC - 1) / MMA_KC);

    /* Each thread's copies are the same every stage but for the column offset: their sources and
     * places are found once. Weight copy i: row wrl + i WRSTEP (clamped to the last), bytes 16 wc..
     * of the stage's (one base pointer, not one per copy: the 32 accumulators need the registers).
     * Positions past an item's P stage its position P - 1 (computed, never stored); the second item
     * of an odd count (no positions) stages the first's. */
    const int WCPR = MMA_KC * 2, WRSTEP = WIDE_THREADS / WCPR, WCOP = WIDE_ROWS / WRSTEP;
    const int XCPR = MMA_KC * 2, XCOP = WIDE_ITEMS * PK_MMA_N * XCPR / WIDE_THREADS;
    static_assert(WIDE_ROWS % WRSTEP == 0 && WIDE_ITEMS * PK_MMA_N * XCPR % WIDE_THREADS == 0 &&
                      WIDE_ITEMS * PK_MMA_N * MMA_KC == WIDE_THREADS,
                  "k_mma_wide's copies divide evenly among the threads");
    const int wrl = tid / WCPR, wc = tid % WCPR, wcol = wc / 2;
    const uint8_t *wsrc = it0.W + row0 * cols + 16 * wc;
    const int wdst = wrl * WIDE_STRIDE + 16 * wc;
    auto qrow = [&](int pos) { /* the quantized row staged as the block's position pos */
        const struct pk_item &ih = pos >= PK_MMA_N && it1.P ? it1 : it0;
        return pk_qrow(a, ih, min(pos % PK_MMA_N, ih.P - 1));
    };
    const uint8_t *xsrc[XCOP];
    int xdst[XCOP], xcol[XCOP];
#pragma unroll
    for (int i = 0; i < XCOP; i++) {
        int u = tid + WIDE_THREADS * i, pos = u / XCPR, c = u % XCPR;
        xsrc[i] = qrow(pos) + 16 * c;
        xdst[i] = pos * WIDE_STRIDE + 16 * c;
        xcol[i] = c / 2;
    }
    /* one block scale per thread: position dpos of the block, block dcol of the stage */
    const int dpos = tid / MMA_KC, dcol = tid % MMA_KC, dn = dpos % PK_MMA_N;
    const int dslot = (((dpos / PK_MMA_N) * MMA_KC + dcol) * 4 + dn % 8 / 2) * 8 + 2 * (dn / 8) + dn % 2;
    const float *dsrc = (const float *)(qrow(dpos) + 32 * nb) + dcol;

    /* issues the copies of stage `step` into st[step % MMA_STAGES] (nothing past the last) */
    const sh_addr_t st0 = sh_addr(smem);
    auto issue = [&](int step) {
        if (step < nsteps) {
            const sh_addr_t sa = st0 + (step % MMA_STAGES) * (int)sizeof(struct wide_stage);
            int64_t b0 = (int64_t)step * MMA_KC;
            int kc = (int)min((int64_t)MMA_KC, nb - b0);
            if (wcol < kc)
#pragma unroll
                for (int i = 0; i < WCOP; i++)
                    cp_async16_at(sa + (int)offsetof(struct wide_stage, w) + wdst + i * WRSTEP * WIDE_STRIDE,
                                  wsrc + (int64_t)min(wrl + i * WRSTEP, nrows - 1) * cols + 32 * b0);
#pragma unroll
            for (int i = 0; i < XCOP; i++)
                if (xcol[i] < kc)
                    cp_async16_at(sa + (int)offsetof(struct wide_stage, x) + xdst[i], xsrc[i] + 32 * b0);
            if (dcol < kc)
                cp_async4_at(sa + (int)(offsetof(struct wide_stage, d) + sizeof(float) * dslot), dsrc + b0);
            else
                (&st[step % MMA_STAGES].d[0][0][0][0])[dslot] = 0.0f; /* a block past the last: scale 0 */
        }
        cp_async_commit(); /* an empty group past the last stage keeps the wait counts uniform */
    };

    float acc[2][4][4]; /* [m tile][n tile][fragment element] */
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f;
    const int c0[4] = {SMALL_INT_BIAS, SMALL_INT_BIAS, SMALL_INT_BIAS, SMALL_INT_BIAS};
    const int rw = 32 * wr; /* the warp's first row in the tile */
    /* ldmatrix row addresses within a stage: A of m tile m at + 16 m rows, B of n tiles 2h, 2h + 1
     * at + 16 h positions; + 32 j for block j */
    const int a_off = (int)offsetof(struct wide_stage, w) + (rw + (lane & 7) + 8 * ((lane >> 3) & 1)) * WIDE_STRIDE +
                      16 * (lane >> 4);
    const int b_off = (int)offsetof(struct wide_stage, x) + (PK_MMA_N * wi + (lane & 7) + 8 * (lane >> 4)) * WIDE_STRIDE +
                      16 * ((lane >> 3) & 1);

#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) issue(s);
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<MMA_STAGES - 2>(); /* this thread's copies of `step` have landed */
        __syncthreads();                 /* everyone's have; everyone is done with step - 1 */
        issue(step + MMA_STAGES - 1);    /* into step - 1's stage */
        const struct wide_stage &S = st[step % MMA_STAGES];
        const sh_addr_t sa = st0 + (step % MMA_STAGES) * (int)sizeof(struct wide_stage);
#pragma unroll
        for (int j = 0; j < MMA_KC; j++) {
            uint32_t A[2][4], B[4][2];
#pragma unroll
            for (int m = 0; m < 2; m++) ldmatrix_x4(A[m], sa + a_off + 16 * m * WIDE_STRIDE + 32 * j);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t r[4];
                ldmatrix_x4(r, sa + b_off + 16 * h * WIDE_STRIDE + 32 * j);
                B[2 * h][0] = r[0], B[2 * h][1] = r[1], B[2 * h + 1][0] = r[2], B[2 * h + 1][1] = r[3];
            }
            const float4 dlo = *(const float4 *)&S.d[wi][j][t][0], dhi = *(const float4 *)&S.d[wi][j][t][4];
            const float dv[8] = {dlo.x, dlo.y, dlo.z, dlo.w, dhi.x, dhi.y, dhi.z, dhi.w};
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    int c[4];
                    mma_k32(c, A[m], B[n][0], B[n][1], c0);
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[m][n][i] = __fmaf_rn(biased_int_to_float(c[i]), dv[2 * n + (i & 1)], acc[m][n][i]);
                }
        }
    }
    cp_async_wait<0>(); /* no copy outlives the block (the empty trailing groups) */
    const struct pk_item mine = wi ? it1 : it0;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int64_t r = row0 + rw + 16 * m + g + 8 * (i >> 1);
                int p = 8 * n + 2 * t + (i & 1);
                if (r < rows && p < mine.P) pk_store(a, mine, r, p, acc[m][n][i]);
            }
}

/* The SMs of the device pk_setup saw last: k_mma_wide runs where its blocks fill them (a heuristic
 * only: both kernels compute the same bits). */
static int wide_sms = 1;

/* Once per device, before any product: the shared memory k_mma_wide opts into. */
cudaError_t pk_setup(int device) {
    cudaError_t e = cudaDeviceGetAttribute(&wide_sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mma_wide, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WIDE_SMEM);
    return e;
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

/* ---- k_float_tile ------------------------------------------------------------------------------ */

/* f32 weights in plain passes of FT_MIN_N positions or more (the router at prefill): the same
 * arithmetic as k_float_product (lane chains l = column mod 8 in column order, the fixed tree, the
 * tail columns in order), tiled for reuse. A block owns FT_ROWS rows x FT_POS positions; its rows
 * and positions stream through shared memory FT_KC columns at a time (cp.async, two stages); each
 * thread computes 2 rows x 2 positions, all 8 chains of each in registers, so a staged value is
 * read once per 2 outputs instead of once per output (k_float_product: 4 positions per row staged,
 * 193 us for the router at n = 512 on the H200). */
#define FT_ROWS 16
#define FT_POS 32
#define FT_KC 64
#define FT_THREADS (FT_ROWS / 2 * FT_POS / 2)
#define FT_STRIDE (FT_KC + 4) /* floats per staged row: 16 rows a warp reads at once, 4 banks apart */
#define FT_MIN_N 256 /* positions from which the tile wins: n = 64 gives 16 blocks (58 us against 34) */

static bool float_tile_fits(const struct pk_product *a) {
    return !a->grouped && a->dtype == NT_DTYPE_F32 && a->n >= FT_MIN_N && a->cols % 4 == 0 && a->x_stride % 4 == 0 &&
           (uintptr_t)a->x % 16 == 0 && (uintptr_t)a->W % 16 == 0;
}

__global__ void __launch_bounds__(FT_THREADS) k_float_tile(struct pk_product a) {
    __shared__ __align__(16) float sw[2][FT_ROWS][FT_STRIDE];
    __shared__ __align__(16) float sx[2][FT_POS][FT_STRIDE];
    int tid = threadIdx.x, tr = tid / (FT_POS / 2), tp = tid % (FT_POS / 2);
    int64_t rows = a.rows, cols = a.cols, c8 = cols & ~(int64_t)7;
    int64_t r0 = (int64_t)blockIdx.y * FT_ROWS;
    int t0 = blockIdx.x * FT_POS;
    const float *W = (const float *)a.W;
    int nsteps = (int)((c8 + FT_KC - 1) / FT_KC);
    auto issue = [&](int step) {
        if (step < nsteps) {
            int64_t c0 = (int64_t)step * FT_KC;
            int q4 = (int)(min((int64_t)FT_KC, c8 - c0) / 4); /* float4s per staged row */
            for (int u = tid; u < FT_ROWS * q4; u += FT_THREADS) {
                int rl = u / q4, c = u % q4;
                cp_async16(&sw[step & 1][rl][4 * c], W + min(r0 + rl, rows - 1) * cols + c0 + 4 * c);
            }
            for (int u = tid; u < FT_POS * q4; u += FT_THREADS) {
                int pl = u / q4, c = u % q4;
                cp_async16(&sx[step & 1][pl][4 * c], a.x + (int64_t)min(t0 + pl, a.n - 1) * a.x_stride + c0 + 4 * c);
            }
        }
        cp_async_commit();
    };
    float acc[2][2][8];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int l = 0; l < 8; l++) acc[i][j][l] = 0.0f;
    issue(0);
    for (int step = 0; step < nsteps; step++) {
        cp_async_wait<0>();
        __syncthreads(); /* the stage has landed; everyone is done with the other one */
        issue(step + 1);
        int b = step & 1, kc = (int)min((int64_t)FT_KC, c8 - (int64_t)step * FT_KC);
        for (int c = 0; c < kc; c += 8) {
            float w[2][8], x[2][8];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float4 lo = *(const float4 *)&sw[b][2 * tr + i][c], hi = *(const float4 *)&sw[b][2 * tr + i][c + 4];
                w[i][0] = lo.x, w[i][1] = lo.y, w[i][2] = lo.z, w[i][3] = lo.w;
                w[i][4] = hi.x, w[i][5] = hi.y, w[i][6] = hi.z, w[i][7] = hi.w;
                lo = *(const float4 *)&sx[b][2 * tp + i][c], hi = *(const float4 *)&sx[b][2 * tp + i][c + 4];
                x[i][0] = lo.x, x[i][1] = lo.y, x[i][2] = lo.z, x[i][3] = lo.w;
                x[i][4] = hi.x, x[i][5] = hi.y, x[i][6] = hi.z, x[i][7] = hi.w;
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int l = 0; l < 8; l++) acc[i][j][l] = __fmaf_rn(w[i][l], x[j][l], acc[i][j][l]);
        }
    }
    cp_async_wait<0>();
    const struct pk_item it = {a.W, 0, t0, min(FT_POS, a.n - t0)};
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int64_t r = r0 + 2 * tr + i;
            int p = 2 * tp + j;
            if (r >= rows || p >= it.P) continue;
            const float *e = acc[i][j]; /* the fixed lane tree ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
            float v = __fadd_rn(__fadd_rn(__fadd_rn(e[0], e[4]), __fadd_rn(e[2], e[6])),
                                __fadd_rn(__fadd_rn(e[1], e[5]), __fadd_rn(e[3], e[7])));
            const float *xp = a.x + (int64_t)(t0 + p) * a.x_stride;
            for (int64_t c = c8; c < cols; c++) v = __fadd_rn(v, __fmul_rn(W[r * cols + c], xp[c]));
            pk_store(a, it, r, p, v);
        }
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
static int mma_wide_always; /* nt_cuda_mma_wide_always */

extern "C" void nt_cuda_packed_reference(int on) { reference_only = on; }
extern "C" void nt_cuda_mma_wide_always(int on) { mma_wide_always = on; }
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
    if (gg_is_block(dt)) {
        if (W->rows > gg_rows_limit())
            snprintf(why, cap, "%s: %lld rows: the CUDA block-type products hold at most %lld rows", W->name,
                     (long long)W->rows, (long long)gg_rows_limit());
        return;
    }
    if (dt != NT_DTYPE_F32 && dt != NT_DTYPE_F16 && dt != NT_DTYPE_BF16 && !pk_packed(dt)) {
        snprintf(why, cap, "%s: %s weights: the CUDA products take f32, f16, bf16, q8_2f, q4tp and llama.cpp's block types",
                 W->name, nt_dtype_name((enum nt_dtype)dt));
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
    if (gg_is_block(a->dtype)) {
        return CK(be, NT_LAUNCH_EARLY(k_quantize, dim3((unsigned)a->n, (unsigned)((a->cols / 32 + 7) / 8)), 256, 0,
                                      *a)) &&
               LAUNCHED(be) && gg_launch(be, a, work);
    }
    if (!pk_packed(a->dtype)) {
        if (a->group != PK_FLOAT_GROUP) {
            cuda_fault(be, "float product: items must hold PK_FLOAT_GROUP positions");
            return false;
        }
        if (float_tile_fits(a)) {
            if (!row_grid(be, a, (a->n + FT_POS - 1) / FT_POS, (a->rows + FT_ROWS - 1) / FT_ROWS, &grid)) return false;
            NT_LAUNCH(k_float_tile, grid, FT_THREADS, *a);
            return LAUNCHED(be);
        }
        if (!row_grid(be, a, work, (a->rows + FP_WARPS - 1) / FP_WARPS, &grid)) return false;
        NT_LAUNCH(k_float_product, grid, FP_WARPS * 32, *a);
        return LAUNCHED(be);
    }
    const bool q4 = a->dtype == NT_DTYPE_Q4TP;
    int64_t nb = (a->cols + 31) / 32, cpr = chunks_per_row(a->dtype, a->cols);
    bool whole_blocks = !reference_only && (q4 || a->cols % 32 == 0);
    bool mma = whole_blocks && a->group == PK_MMA_N && mma_fits(a->dtype, a->cols);
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
    if (mma && !a->grouped && a->dtype == NT_DTYPE_Q8_2F) { /* (a grouped block's items: other experts) */
        int64_t blocks = (work + WIDE_ITEMS - 1) / WIDE_ITEMS * ((a->rows + WIDE_ROWS - 1) / WIDE_ROWS);
        if (mma_wide_always || blocks >= wide_sms) {
            if (!row_grid(be, a, (work + WIDE_ITEMS - 1) / WIDE_ITEMS, (a->rows + WIDE_ROWS - 1) / WIDE_ROWS, &grid))
                return false;
            NT_LAUNCH_SMEM(k_mma_wide, grid, WIDE_THREADS, WIDE_SMEM, *a);
            return LAUNCHED(be);
        }
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
    size_t need = pk_packed(W->dtype) ? 16 : gg_is_block(W->dtype) ? 1 : W->dtype == NT_DTYPE_F32 ? 4 : 2;
    if ((uintptr_t)W->data % need) return cuda_fault(be, "matmul: %s: weight data not aligned for its dtype", W->name);
    if (n == 1 && dc_fits_plain(W)) { /* decode: decode.cu's streaming kernel */
        dc_matmul(be, W, bias, act, x, y);
        return;
    }
    if (dc_fits_multi(W, n)) { /* a few positions (a verify pass): the same stream for n rows */
        dc_matmul_multi(be, W, bias, act, n, x, x_stride, y, y_stride, qx_of(p));
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
