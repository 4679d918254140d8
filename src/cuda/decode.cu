/* decode.cu - the products of a pass of one position (a decode step): every packed matrix of the
 * pass, and the position's routed experts in two kernels (up for its k experts; down for all k
 * with the weighted combine fused), by persistent blocks that stream the weights.
 *
 * WHY A KERNEL OF ITS OWN. At one position a product is a stream of weights (1-350 MB) with a
 * little arithmetic. k_gemv's blocks each load 32 KB, quantize the activation row, compute and
 * retire: 2-3 waves in which the memory idles while the blocks of a wave compute, and every block
 * quantizes the row again (docs/PERF.md: 0.6-1.0 TB/s). Here k_decode's grid is what the SMs hold
 * at once (the occupancy the runtime reports for its shared memory); each block walks its tiles
 * (blockIdx.x, + gridDim.x, ...: neighbouring blocks read neighbouring rows) with DC_STAGES - 1
 * tiles' weights in flight through cp.async while it computes one (the tile pipeline, below),
 * and quantizes a single activation row itself while its first tiles load (several rows - the
 * experts' down product - are quantized once by k_dc_quantize). Launched early (programmatic
 * dependent launch), a plain product starts streaming its weights before the kernel before it
 * has finished. The routed experts need no entry lists at one position (its k experts are
 * distinct): the up kernel's tiles run over (slot, rows of its expert), the down kernel's over
 * rows of the output with all k slots in each tile, so the combine happens in the tile (no
 * k_moe_plan, no k_moe_combine: 3 launches instead of 6). Float weights (the router) get one
 * block per row, the row staged whole (k_float_row).
 *
 * THE ARITHMETIC IS products.cu's, TO THE BIT. The activation rows are quantized to the same
 * bytes (the same block maxima, d = amax / 127, inv = 127 / amax, rint and clamp; 8 lanes per
 * block of 32 columns here instead of 32), the block sums are exact int32, the chain over the
 * blocks is the same fma in the same order, the store the same (q8_2f row scale, bias, relu^2),
 * and the combine is k_moe_combine's mul-then-add chain in slot order. So a position gives the
 * same bits alone (here) as inside a longer pass (k_gemv, k_mma): DESIGN.md's one arithmetic per
 * position, checked by gpu_test_ops ("one arithmetic per position") and tests/gpu/run.sh.
 */
extern "C" {
#include "cuda_backend.h"
}
#include "ops.cuh"
#include "products.cuh"

#define DC_THREADS 256
#ifndef DC_CHUNKS /* (dev/cuda/variants.sh builds other values) */
#define DC_CHUNKS 4 /* 16-byte weight loads per thread per tile: 16 KB per tile */
#endif
#ifndef DC_BLOCKS_PER_SM
#define DC_BLOCKS_PER_SM 3 /* resident blocks per SM the grid is sized for: 3 (<= 85 registers, no
                            * spills) beat 4 (64 registers, spills) by 1.1-1.2x on the H200 */
#endif
#ifndef DC_STAGES
#define DC_STAGES 2 /* tiles a block has in flight or in hand (the tile pipeline, below): 2, 3 and 4
                     * timed alike on the H200 (docs/PERF.md); 2 leaves room for 3 blocks an SM */
#endif
#define DC_MAX_QROWS_BYTES (24 * 1024) /* the quantized activation rows a block holds */
#define DC_TILE (DC_THREADS * DC_CHUNKS) /* 16-byte chunks per tile */

enum dc_mode {
    DC_PLAIN, /* one matrix W; x and y row 0 */
    DC_UP,    /* expert idx[s] for tiles of slot s; x row 0 (quantized per slot for q8_2f: its
               * column field); y row s (the inner activations [k][rows]) */
    DC_DOWN   /* every slot in every tile; x row s; y = the weighted sum over the slots */
};

/* One product of the kernel (by value; 100 bytes: under the 128 bytes past which nvcc 13.0
 * miscompiled a conditional table load, products.cu's pk_item_of). */
struct dc_product {
    const uint8_t *W;           /* DC_PLAIN */
    const uint8_t *const *Wtab; /* DC_UP, DC_DOWN: the expert table */
    const int32_t *idx;         /* the position's k experts */
    uint8_t *qx;                /* NULL: each block quantizes the row itself; else the nq rows
                                 * quantized by k_dc_quantize */
    const float *wts;           /* DC_DOWN: their weights */
    const float *x;             /* activation rows, row s at x + s * cols (DC_DOWN) */
    const float *bias;
    float *y;
    int mode, dtype, act;
    int rows, cols;
    int k;     /* slots (DC_UP, DC_DOWN) */
    int nq;    /* activation rows quantized: 1, or k (one per slot) */
    int rb;    /* output rows per tile */
    int tiles; /* DC_UP: per slot; else all */
};

#define DC_MAX_K 64 /* slots a block keeps its matrices' addresses for */

/* The matrix of slot s: in k_decode by one load from the block's table mats, not the two
 * dependent global loads idx[s], Wtab[e] that would hold up every weight load behind them
 * (mats NULL: those loads). */
__device__ __forceinline__ const uint8_t *dc_matrix(const struct dc_product &a, const uint8_t *const *mats, int s) {
    return a.mode == DC_PLAIN ? a.W : mats ? mats[s] : a.Wtab[a.idx[s]];
}

/* Quantizes units u0 .. u1 - 1 (unit = row q, block b of 32 columns: q nb + b) of the nq
 * activation rows into dst (pk_qx_stride(cols) bytes a row): 8 lanes per unit, 4 columns a
 * lane, the block's warps 4 units each per round; whole warps run every shuffle. The bytes are
 * quantize_block's (products.cu): the maximum is exact in any order. */
__device__ void dc_quantize(const struct dc_product &a, const uint8_t *const *mats, uint8_t *dst_rows, int u0_block,
                            int u1) {
    int nb = a.cols / 32, lane = threadIdx.x & 31, l8 = lane & 7;
    size_t qs = pk_qx_stride(a.cols);
    for (int u0 = u0_block + (int)(threadIdx.x >> 5) * 4; u0 < u1; u0 += (int)blockDim.x / 8) {
        int u = u0 + (lane >> 3);
        bool on = u < u1;
        int q = on ? u / nb : 0, b = on ? u % nb : 0, c0 = 32 * b + 4 * l8;
        const float *x = a.x + (a.mode == DC_DOWN ? (int64_t)q * a.cols : 0);
        const uint8_t *W = a.dtype == NT_DTYPE_Q8_2F ? dc_matrix(a, mats, a.nq > 1 ? q : 0) : NULL;
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = on ? x[c0 + i] : 0.0f;
            if (on && W) v[i] = __fmul_rn(v[i], f16f(ld16(W + d_q8_cs_off(a.rows, a.cols) + 2 * (c0 + i))));
        }
        /* from a lane's own value, never from 0: a block of NaN keeps warp_max's NaN maximum */
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        if (!on) continue;
        float d = __fdiv_rn(amax, 127.0f), inv = __fdiv_rn(127.0f, amax);
        if (!(inv < INFINITY)) inv = 0.0f;
        uint8_t *dst = dst_rows + q * qs;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float r = rintf(__fmul_rn(v[i], inv));
            r = fminf(fmaxf(r, -127.0f), 127.0f);
            dst[32 * b + qx_slot(a.dtype, 4 * l8 + i)] = (uint8_t)(int8_t)(int)r;
        }
        if (l8 == 0) ((float *)(dst + 32 * nb))[b] = d;
    }
}

/* Tile T: its first output row, rows, the slot of DC_UP/DC_PLAIN tiles (DC_DOWN: all slots). */
struct dc_tile {
    int r0, nr, slot;
};
__device__ __forceinline__ struct dc_tile dc_tile_of(const struct dc_product &a, int T) {
    int slot = a.mode == DC_UP ? T / a.tiles : 0, rt = a.mode == DC_UP ? T % a.tiles : T;
    int r0 = rt * a.rb;
    struct dc_tile t = {r0, min(a.rb, a.rows - r0), slot};
    return t;
}

/* Where a thread's chunk j lies in every tile, found once per kernel (no division per tile):
 * chunk c = tid + DC_THREADS j is row pair pr = c / cpr, its 16 bytes cc = c % cpr; row pair
 * pr = rl S + s is slot s (DC_DOWN; else the tile's) of the tile's row rl. Packed rl << 18 |
 * s << 12 | cc (cc < DC_TILE <= 4096, s < DC_MAX_K = 64, rl <= DC_THREADS); rl = 0x3fff past the
 * tile's chunks. A tile of nr rows holds the chunks with rl < nr. */
static_assert(DC_TILE <= 4096 && DC_MAX_K <= 64 && DC_THREADS < 0x3fff, "dc_where's fields");
#define DC_NOWHERE 0xfffc0000u
__device__ __forceinline__ uint32_t dc_where(int c, int cpr, int S, int rb) {
    int pr = c / cpr;
    if (pr >= S * rb) return DC_NOWHERE;
    return (uint32_t)(pr / S) << 18 | (uint32_t)(pr % S) << 12 | (uint32_t)(c % cpr);
}
__device__ __forceinline__ int where_row(uint32_t w) { return (int)(w >> 18); }
__device__ __forceinline__ int where_slot(uint32_t w) { return (int)(w >> 12 & 63); }
__device__ __forceinline__ int where_chunk(uint32_t w) { return (int)(w & 4095); }

/* ---- the tile pipeline -------------------------------------------------------------------------
 * Each block keeps DC_STAGES tiles in flight through shared memory: while it computes tile i, the
 * copies of tiles i+1 .. i+DC_STAGES-1 run (cp.async: no registers held, nothing waits on them
 * until their turn). With one tile ahead in registers (session 6's kernel) only 16 KB a block were
 * in flight, and only while the chains ran: the products streamed at 1-2 TB/s, a memory latency
 * per tile (docs/PERF.md). A stage holds the tile's weight chunks (chunk c where the thread that
 * computes it copied it, so no barrier guards the weights), then per (slot, row) pair its q4tp
 * params or q8_2f row-scale word, then (q4tp) each pair's row of 5-bit codes as whole 32-bit words
 * from the word holding its first byte (the payload is padded so the last row's word exists). */

/* Bytes of a stage's parts (host and device agree through these). */
__host__ __device__ static inline int dc_code_words(int cols) { return (int)((cols / 32 * 5 + 7) / 8 + 3) / 4 + 1; }
__host__ __device__ static inline int dc_pairs(const struct dc_product &a) { return (a.mode == DC_DOWN ? a.k : 1) * a.rb; }
__host__ __device__ static inline int dc_stage_bytes(const struct dc_product &a) {
    int codes = a.dtype == NT_DTYPE_Q4TP ? dc_pairs(a) * dc_code_words(a.cols) * 4 : 0;
    return (16 * DC_TILE + 4 * dc_pairs(a) + codes + 15) / 16 * 16;
}
/* The most any product's stage takes: pairs <= DC_THREADS, and a q4tp tile's pairs hold at most
 * DC_TILE groups of 5 bits plus two partial words a pair. */
#define DC_MAX_STAGE_BYTES (16 * DC_TILE + 4 * DC_THREADS + (DC_TILE * 5 / 8 + 8 * DC_THREADS) + 16)

/* Issues the copies of tile t into stage st: the thread's weight chunks, and for a thread that
 * runs a chain (pair tid) its row's params / row-scale word and codes. Rows past the tile's are
 * not copied and never read. */
template <bool Q4>
__device__ __forceinline__ void dc_issue(const struct dc_product &a, const uint8_t *const *mats, const struct dc_tile &t,
                                         const uint32_t *where, int chain_s, int chain_rl, uint8_t *st) {
    int nb = a.cols / 32, S = a.mode == DC_DOWN ? a.k : 1;
    int64_t row_bytes = Q4 ? (int64_t)nb * 16 : a.cols;
    uint4 *w = (uint4 *)st;
#pragma unroll
    for (int j = 0; j < DC_CHUNKS; j++) {
        int rl = where_row(where[j]);
        if (rl < t.nr) {
            const uint8_t *W = dc_matrix(a, mats, a.mode == DC_DOWN ? where_slot(where[j]) : t.slot);
            cp_async16(w + threadIdx.x + DC_THREADS * j, W + (t.r0 + rl) * row_bytes + 16 * (int64_t)where_chunk(where[j]));
        }
    }
    if ((int)threadIdx.x < S * t.nr) {
        const uint8_t *W = dc_matrix(a, mats, a.mode == DC_DOWN ? chain_s : t.slot);
        int64_t r = t.r0 + chain_rl;
        uint32_t *pw = (uint32_t *)(st + 16 * DC_TILE);
        if (Q4) {
            cp_async4(pw + threadIdx.x, W + d_q4_params_off(a.rows, a.cols) + 4 * r);
            const uint8_t *c0 = W + d_q4_codes_off(a.rows, a.cols) + r * d_q4_cstride(a.cols);
            const uint8_t *c1 = c0 + d_q4_cstride(a.cols);
            const uint8_t *w0 = (const uint8_t *)((uintptr_t)c0 & ~(uintptr_t)3);
            int words = (int)(((uintptr_t)c1 + 3 - (uintptr_t)w0) / 4), cw = dc_code_words(a.cols);
            uint32_t *cd = pw + dc_pairs(a) + threadIdx.x * cw;
            for (int i = 0; i < words; i++) cp_async4(cd + i, w0 + 4 * i);
        } else {
            cp_async4(pw + threadIdx.x, (const uint8_t *)((uintptr_t)(W + d_q8_rs_off(a.rows, a.cols) + 2 * r) & ~(uintptr_t)3));
        }
    }
}

/* The output from a chain value: pk_store's arithmetic (q8_2f row scale, bias, relu^2). */
__device__ __forceinline__ float dc_finish(const struct dc_product &a, uint16_t rs, float bias, float acc) {
    float v = acc;
    if (a.dtype == NT_DTYPE_Q8_2F) v = __fmul_rn(f16f(rs), v);
    if (a.bias) v = __fadd_rn(v, bias);
    if (a.act == NT_ACT_RELU2) {
        v = v > 0.0f ? v : 0.0f;
        v = __fmul_rn(v, v);
    }
    return v;
}

/* Q4: the matrices are q4tp (else q8_2f): each instance holds only its format's registers. The
 * dynamic shared memory is DC_STAGES stages of dc_stage_bytes(a), then the nq quantized rows.
 *
 * The block quantizes the activation rows itself, while its first tiles' weights are in flight
 * (no quantize kernel, no launch between). Launched early (NT_LAUNCH_EARLY: programmatic
 * dependent launch), a plain product's block issues those weight copies before it waits for the
 * kernel before it (grid_wait): the weights are constants, only the activations are that kernel's
 * output. The experts wait first: their matrices come from the router's choice. */
template <bool Q4>
__global__ void __launch_bounds__(DC_THREADS, DC_BLOCKS_PER_SM) k_decode(struct dc_product a) {
    __shared__ int32_t isum[2][DC_TILE]; /* block sums [row pair * nb + b], two tiles */
    __shared__ float gscale[2][Q4 ? DC_TILE : 1]; /* q4tp group scales, the same index */
    __shared__ float eo[2][DC_THREADS];  /* DC_DOWN: each (slot, row) pair's output */
    __shared__ const uint8_t *mats[DC_MAX_K];
    NT_DYNAMIC_SHARED(uint8_t, stages);
    const bool q4 = Q4;
    const int tid = threadIdx.x, nb = a.cols / 32, cpr = q4 ? nb : 2 * nb;
    const int S = a.mode == DC_DOWN ? a.k : 1, all = a.mode == DC_UP ? a.tiles * a.k : a.tiles;
    const size_t qs = pk_qx_stride(a.cols);
    const int sb = dc_stage_bytes(a), pairs = dc_pairs(a), cw = dc_code_words(a.cols);
    const int mine_tiles = blockIdx.x < (unsigned)all ? (all - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;

    /* the experts' up product waits before it reads the router's choice, made by the kernel just
     * before it; the down product's was made two kernels back, complete once that kernel started
     * (every kernel lets its dependents start only after its own grid_wait) */
    if (a.mode == DC_UP) grid_wait();
    if (a.mode != DC_PLAIN && tid < a.k) mats[tid] = a.Wtab[a.idx[tid]];
    uint32_t where[DC_CHUNKS];
#pragma unroll
    for (int j = 0; j < DC_CHUNKS; j++) where[j] = dc_where(tid + DC_THREADS * j, cpr, S, a.rb);
    const int chain_s = tid % S, chain_rl = tid / S; /* a chain thread's (slot, row): pr = tid */
    __syncthreads();
#pragma unroll
    for (int p = 0; p < DC_STAGES - 1; p++) {
        if (p < mine_tiles)
            dc_issue<Q4>(a, mats, dc_tile_of(a, blockIdx.x + p * gridDim.x), where, chain_s, chain_rl, stages + p * sb);
        cp_async_commit(); /* empty groups past the block's tiles keep the wait counts uniform */
    }
    if (a.mode != DC_UP) grid_wait();
    grid_launch_dependents(); /* past grid_wait: see the experts' comment above */
    uint8_t *sq = stages + DC_STAGES * sb; /* the quantized activation rows */
    if (a.qx) /* several rows: quantized once by k_dc_quantize for all the blocks */
        for (int i = tid; i < (int)(a.nq * qs / 16); i += DC_THREADS) ((uint4 *)sq)[i] = ((const uint4 *)a.qx)[i];
    else
        dc_quantize(a, mats, sq, 0, a.nq * nb);
    __syncthreads();
    for (int i = 0; i < mine_tiles; i++) {
        int ahead = i + DC_STAGES - 1, buf = i & 1;
        if (ahead < mine_tiles) /* into the stage tile i - 1 used: only this thread read its parts */
            dc_issue<Q4>(a, mats, dc_tile_of(a, blockIdx.x + ahead * gridDim.x), where, chain_s, chain_rl,
                         stages + (ahead % DC_STAGES) * sb);
        cp_async_commit();
        cp_async_wait<DC_STAGES - 1>(); /* tile i's copies (this thread's) have landed */
        const struct dc_tile cur = dc_tile_of(a, blockIdx.x + i * gridDim.x);
        const uint8_t *st = stages + (i % DC_STAGES) * sb;
        const uint32_t *pw = (const uint32_t *)(st + 16 * DC_TILE);
        if (q4) __syncthreads(); /* the chain threads' params and codes, read by every chunk */
        /* this tile's block sums (and q4tp scales) */
#pragma unroll
        for (int j = 0; j < DC_CHUNKS; j++) {
            int c = tid + DC_THREADS * j;
            bool mine = where_row(where[j]) < cur.nr;
            int cc = mine ? where_chunk(where[j]) : 0, s = a.mode == DC_DOWN ? where_slot(where[j]) : cur.slot;
            const uint8_t *q = sq + (a.nq > 1 && mine ? s : 0) * qs;
            uint4 wv = mine ? ((const uint4 *)st)[c] : make_uint4(0, 0, 0, 0);
            int v;
            if (q4) {
                int grp = cc;
                const uint4 *qp = (const uint4 *)(q + 32 * grp);
                uint4 qa = qp[0], qb = qp[1];
                v = __dp4a(q4_lo(wv.x), (int)qa.x, 0);
                v = __dp4a(q4_hi(wv.x), (int)qa.y, v);
                v = __dp4a(q4_lo(wv.y), (int)qa.z, v);
                v = __dp4a(q4_hi(wv.y), (int)qa.w, v);
                v = __dp4a(q4_lo(wv.z), (int)qb.x, v);
                v = __dp4a(q4_hi(wv.z), (int)qb.y, v);
                v = __dp4a(q4_lo(wv.w), (int)qb.z, v);
                v = __dp4a(q4_hi(wv.w), (int)qb.w, v);
                if (mine) {
                    /* the pair whose chain thread copied this row's params and codes */
                    int pr = where_row(where[j]) * S + where_slot(where[j]);
                    const uint8_t *codes = (const uint8_t *)(pw + pairs + pr * cw);
                    int off = (int)(((uintptr_t)(cur.r0 + where_row(where[j])) * d_q4_cstride(a.cols)) & 3);
                    uint32_t code2 = ld16b(codes + off + ((5 * grp) >> 3));
                    int code = (int)((code2 >> ((5 * grp) & 7)) & 31);
                    isum[buf][c] = v;
                    gscale[buf][c] = nt_q4tp_scale(f16f((uint16_t)(pw[pr] & 0xffff)), f16f((uint16_t)(pw[pr] >> 16)), code);
                }
            } else {
                uint4 qa = *(const uint4 *)(q + 16 * cc);
                v = __dp4a((int)wv.x, (int)qa.x, 0);
                v = __dp4a((int)wv.y, (int)qa.y, v);
                v = __dp4a((int)wv.z, (int)qa.z, v);
                v = __dp4a((int)wv.w, (int)qa.w, v);
                v += __shfl_xor_sync(0xffffffffu, v, 1); /* the block's other half: chunk c ^ 1 */
                if (mine && !(c & 1)) isum[buf][c >> 1] = v;
            }
        }
        __syncthreads();
        if (tid < S * cur.nr) { /* one chain per (slot, row): the blocks in order */
            int s = a.mode == DC_DOWN ? chain_s : cur.slot, rl = chain_rl;
            const int32_t *is = isum[buf] + tid * nb;
            const float *dv = (const float *)(sq + (a.nq > 1 ? s : 0) * qs + 32 * nb);
            float acc = 0.0f;
            if (q4) {
                const float *gsc = gscale[buf] + tid * nb;
#pragma unroll 4
                for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], __fmul_rn(gsc[b], dv[b]), acc);
            } else {
#pragma unroll 4
                for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], dv[b], acc);
            }
            int r = cur.r0 + rl;
            uint16_t rs = q4 ? 0 : (uint16_t)(pw[tid] >> (16 * (r & 1)));
            float v = dc_finish(a, rs, a.bias ? a.bias[r] : 0.0f, acc);
            if (a.mode == DC_DOWN) eo[buf][tid] = v;
            else a.y[(int64_t)s * a.rows + r] = v;
        }
        if (a.mode == DC_DOWN) { /* the combine: k_moe_combine's chain over the slots in order */
            __syncthreads();
            if (tid < cur.nr) {
                float acc = 0.0f;
                for (int s = 0; s < a.k; s++) acc = __fadd_rn(acc, __fmul_rn(a.wts[s], eo[buf][tid * a.k + s]));
                a.y[cur.r0 + tid] = acc;
            }
        }
    }
    cp_async_wait<0>(); /* no copy outlives the block (the empty trailing groups) */
}

/* Several activation rows (the experts' down product: one per slot) quantized once for all of
 * k_decode's blocks, 32 units a block: each block quantizing 6 rows itself read them from L2 396
 * times, more bytes than the weights (one H200 run: experts 39.4 against 32.8 us). One row is
 * quantized in k_decode, while its first tiles load. */
#define DC_QUANTIZE_UNITS 32
__global__ void __launch_bounds__(DC_THREADS) k_dc_quantize(struct dc_product a) {
    grid_wait();
    grid_launch_dependents();
    int u0 = blockIdx.x * DC_QUANTIZE_UNITS, units = a.nq * (a.cols / 32);
    dc_quantize(a, NULL, a.qx, u0, min(u0 + DC_QUANTIZE_UNITS, units));
}

/* ---- float weights ----------------------------------------------------------------------------- */

#define FR_THREADS 128
#define FR_MAX_COLS 4096

/* One block per row: the row (as f32) and x staged in shared memory by the whole block, every
 * load in flight at once, then lanes 0..7 of warp 0 run k_float_product's arithmetic over the
 * copy: lane l's fma chain over columns l, l + 8, ... below cols & ~7, the same lane tree, the
 * tail columns in order by lane 0, then bias and relu^2 (products.cu's pk_store). k_float_product
 * streams 4 rows a block in chunks of 1024 columns: at one position its 32 blocks for the
 * router's 128 rows kept too few bytes in flight (18.5 us for 1.4 MB). */
__global__ void __launch_bounds__(FR_THREADS) k_float_row(const uint8_t *W, int dtype, int cols, const float *bias,
                                                          int act, const float *x, float *y) {
    __shared__ float sw[FR_MAX_COLS], sx[FR_MAX_COLS];
    int64_t r = blockIdx.x;
    /* the weights (constants) before grid_wait: launched early, they load during the kernel before */
#pragma unroll 8
    for (int c = threadIdx.x; c < cols; c += FR_THREADS) sw[c] = load_w(W, r * cols + c, dtype);
    grid_wait();
    grid_launch_dependents();
#pragma unroll 8
    for (int c = threadIdx.x; c < cols; c += FR_THREADS) sx[c] = x[c];
    __syncthreads();
    if (threadIdx.x >= 32) return;
    int c8 = cols & ~7;
    float acc = 0.0f;
    if (threadIdx.x < 8)
#pragma unroll 8
        for (int j = threadIdx.x; j < c8; j += 8) acc = __fmaf_rn(sw[j], sx[j], acc);
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1));
    if (threadIdx.x != 0) return;
    for (int c = c8; c < cols; c++) acc = __fadd_rn(acc, __fmul_rn(sw[c], sx[c]));
    if (bias) acc = __fadd_rn(acc, bias[r]);
    if (act == NT_ACT_RELU2) {
        acc = acc > 0.0f ? acc : 0.0f;
        acc = __fmul_rn(acc, acc);
    }
    y[r] = acc;
}

/* ---- launch -------------------------------------------------------------------------------- */

static int chunks_per_row(int dtype, int64_t cols) { return (int)(dtype == NT_DTYPE_Q4TP ? cols / 32 : cols / 16); }

/* Whether products of a (rows x cols, dtype) matrix with S slots per tile and nq quantized rows
 * fit the kernel: packed, whole blocks of 32 columns, a row (S rows) per tile, the rows in
 * shared memory. */
static bool dc_fits(int dtype, int64_t rows, int64_t cols, int S, int nq) {
    if (!pk_packed(dtype) || pk_reference_only() || cols <= 0 || cols % 32 || rows <= 0 || rows > INT32_MAX / 2)
        return false;
    return (int64_t)S * chunks_per_row(dtype, cols) <= DC_TILE && S <= DC_MAX_K &&
           (int64_t)nq * pk_qx_stride(cols) <= DC_MAX_QROWS_BYTES;
}

/* qx_room: device memory for the nq quantized rows when nq > 1. */
static bool dc_launch(struct nt_backend *be, struct dc_product *a, uint8_t *qx_room) {
    a->qx = a->nq > 1 ? qx_room : NULL;
    int S = a->mode == DC_DOWN ? a->k : 1;
    a->rb = DC_TILE / (S * chunks_per_row(a->dtype, a->cols));
    if (a->rb > DC_THREADS / S) a->rb = DC_THREADS / S;
    if (a->rb > a->rows) a->rb = a->rows;
    a->tiles = (a->rows + a->rb - 1) / a->rb;
    int all = a->mode == DC_UP ? a->tiles * a->k : a->tiles, sms = 0, per_sm = 0;
    size_t smem = (size_t)DC_STAGES * dc_stage_bytes(*a) + (size_t)a->nq * pk_qx_stride(a->cols);
    bool q4 = a->dtype == NT_DTYPE_Q4TP;
    if (!CK(be, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cb(be)->device)) ||
        !CK(be, q4 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_decode<true>, DC_THREADS, smem)
                   : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_decode<false>, DC_THREADS, smem)))
        return false;
    if (per_sm < 1) {
        cuda_fault(be, "k_decode: %zu bytes of stages leave no room for a block", smem);
        return false;
    }
    /* the grid is what the SMs hold at once: a second wave would wait for the first one's tail */
    int grid = sms * per_sm < all ? sms * per_sm : all;
    if (a->qx) {
        int units = a->nq * (a->cols / 32);
        if (!CK(be, NT_LAUNCH_EARLY(k_dc_quantize, (units + DC_QUANTIZE_UNITS - 1) / DC_QUANTIZE_UNITS, DC_THREADS, 0,
                                    *a)) ||
            !LAUNCHED(be))
            return false;
    }
    if (q4) return CK(be, NT_LAUNCH_EARLY(k_decode<true>, grid, DC_THREADS, smem, *a)) && LAUNCHED(be);
    return CK(be, NT_LAUNCH_EARLY(k_decode<false>, grid, DC_THREADS, smem, *a)) && LAUNCHED(be);
}

cudaError_t dc_setup(void) {
    cudaError_t e = cudaFuncSetAttribute(k_decode<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         DC_STAGES * DC_MAX_STAGE_BYTES + DC_MAX_QROWS_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_decode<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DC_STAGES * DC_MAX_STAGE_BYTES + DC_MAX_QROWS_BYTES);
    return e;
}

bool dc_fits_plain(const struct nt_matrix *W) {
    if (gg_is_block(W->dtype)) return false; /* ggml.cu's kernel at every n */
    if (!pk_packed(W->dtype)) return W->cols <= FR_MAX_COLS && W->rows <= INT32_MAX;
    return dc_fits(W->dtype, W->rows, W->cols, 1, 1);
}

bool dc_matmul(struct nt_backend *be, const struct nt_matrix *W, const float *bias, int act, const float *x,
               float *y) {
    if (!pk_packed(W->dtype)) {
        NT_LAUNCH_EARLY(k_float_row, (unsigned)W->rows, FR_THREADS, 0, (const uint8_t *)W->data, W->dtype, (int)W->cols, bias,
                  act, x, y);
        return LAUNCHED(be);
    }
    struct dc_product a;
    memset(&a, 0, sizeof a);
    a.mode = DC_PLAIN;
    a.W = (const uint8_t *)W->data;
    a.dtype = W->dtype;
    a.act = act;
    a.rows = (int)W->rows;
    a.cols = (int)W->cols;
    a.bias = bias;
    a.x = x;
    a.y = y;
    a.k = 1;
    a.nq = 1;
    return dc_launch(be, &a, NULL);
}

/* q8_2f experts quantize the row once per slot (the column field is the expert's); q4tp once. */
static int up_qrows(int dtype, int k) { return dtype == NT_DTYPE_Q8_2F ? k : 1; }

bool dc_fits_experts(const struct nt_moe_dims *d, const struct nt_matrix *up, const struct nt_matrix *down) {
    return d->k <= DC_MAX_K && dc_fits(up->dtype, d->mi, d->L, 1, up_qrows(up->dtype, d->k)) &&
           dc_fits(down->dtype, d->L, d->mi, d->k, d->k);
}

bool dc_experts(struct nt_backend *be, const struct nt_moe_dims *d, const uint8_t *const *up_tab,
                const uint8_t *const *down_tab, int up_dtype, int down_dtype, const float *x, const int32_t *idx,
                const float *wts, float *inner, float *y, uint8_t *up_room, uint8_t *down_room) {
    struct dc_product a;
    memset(&a, 0, sizeof a);
    a.mode = DC_UP;
    a.Wtab = up_tab;
    a.idx = idx;
    a.dtype = up_dtype;
    a.act = NT_ACT_RELU2;
    a.rows = d->mi;
    a.cols = d->L;
    a.x = x;
    a.y = inner;
    a.k = d->k;
    a.nq = up_qrows(up_dtype, d->k);
    if (!dc_launch(be, &a, up_room)) return false;
    a.mode = DC_DOWN;
    a.Wtab = down_tab;
    a.wts = wts;
    a.dtype = down_dtype;
    a.act = NT_ACT_NONE;
    a.rows = d->L;
    a.cols = d->mi;
    a.x = inner;
    a.y = y;
    a.nq = d->k;
    return dc_launch(be, &a, down_room);
}
