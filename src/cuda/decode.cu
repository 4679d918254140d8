/* decode.cu - the products of a pass of one position (a decode step): every packed matrix of the
 * pass, and the position's routed experts in two kernels (up for its k experts; down for all k
 * with the weighted combine fused), by persistent blocks that stream the weights; and the plain
 * packed products of a pass of 2 .. 16 positions (a verify pass), the same stream applied to all
 * the pass's rows (k_decode_multi, below).
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
 * block per row, the row staged whole (k_float_row; a pass of 2 .. 16 positions: k_float_rows).
 *
 * k_decode'S SOURCE IS KEPT AS IT WAS VERIFIED (session 10, main at 5c45fe7). Session 11's first
 * merge of k_decode_multi and of the experts in units (dev/wip/session11-cuda-merged.patch) made
 * every product of one position 6 - 13 % slower on the H200; its k_decode issued 3 - 8 % more
 * instructions a tile (tests of the units' fields, the shared helpers' other forms) and waited on
 * shared memory more often (dev/wip/README.md, session 12). The helpers k_decode shares with
 * k_decode_multi (dc_issue, dc_quantize) therefore take the differences as parameters that
 * k_decode passes as constants or as main's own expressions, so that its instance compiles to
 * main's machine code (compared instruction for instruction, dev/wip/README.md). What changed it
 * since was measured in a decode step: session 19's chains load 4 blocks' terms at once
 * (pk_chain_vec, products.cuh: tg128 +2.5 %); quantizing the row with 4 rounds' loads issued
 * together timed alike alone and 4 % slower in the step (docs/PERF.md, session 19).
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

#include <limits.h>

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

/* One product of the kernel (by value; 108 bytes: under the 128 bytes past which nvcc 13.0
 * miscompiled a conditional table load, products.cu's pk_item_of). */
struct dc_product {
    const uint8_t *W;           /* DC_PLAIN */
    const uint8_t *const *Wtab; /* DC_UP, DC_DOWN: the expert table */
    const int32_t *idx;         /* the position's k experts */
    uint8_t *qx;                /* NULL: each block quantizes the row itself; else the nq rows
                                 * quantized by k_dc_quantize */
    const float *wts;           /* DC_DOWN: their weights */
    const float *x;             /* activation rows, row q at x + q * x_stride (k_dc_quantize) */
    const float *bias;
    float *y;
    int mode, dtype, act;
    int rows, cols;
    int k;     /* slots (DC_UP, DC_DOWN) */
    int nq;    /* activation rows quantized: 1, k (one per slot) or n (k_decode_multi: one per position) */
    int rb;    /* output rows per tile */
    int tiles; /* DC_UP: per slot; else all */
    /* (after main's fields, so that k_decode reads its parameters where main's did) floats between
     * activation rows q (DC_DOWN: cols; DC_UP: 0, every slot quantizes row 0) and between output
     * rows (k_decode_multi's positions) */
    int x_stride, y_stride;
};
static_assert(sizeof(struct dc_product) <= 128, "dc_product: past 128 bytes nvcc 13.0 miscompiled (products.cuh)");

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
 * quantize_block's (products.cu): the maximum is exact in any order. Row q of x: STRIDED
 * (k_decode_multi's positions) at q * x_stride; else as main's kernels read it (the experts' down
 * product: row q; the up product: row 0 for every slot), so that the kernels of one position keep
 * main's machine code. */
template <bool STRIDED>
__device__ void dc_quantize(const struct dc_product &a, const uint8_t *const *mats, uint8_t *dst_rows, int u0_block,
                            int u1) {
    int nb = a.cols / 32, lane = threadIdx.x & 31, l8 = lane & 7;
    size_t qs = pk_qx_stride(a.cols);
    for (int u0 = u0_block + (int)(threadIdx.x >> 5) * 4; u0 < u1; u0 += (int)blockDim.x / 8) {
        int u = u0 + (lane >> 3);
        bool on = u < u1;
        int q = on ? u / nb : 0, b = on ? u % nb : 0, c0 = 32 * b + 4 * l8;
        const float *x = a.x + (STRIDED ? (int64_t)q * a.x_stride : a.mode == DC_DOWN ? (int64_t)q * a.cols : 0);
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

/* The tiles of one block, T = blockIdx.x, + gridDim.x, ...: its slot and row tile carried from one
 * to the next (DC_UP's T / a.tiles and T % a.tiles are an integer division each, ~30 instructions
 * a tile in the q4tp experts' loop; a step is an add and a compare). Other modes: slot 0, rt = T. */
struct dc_walk {
    int slot, rt;
};
__device__ __forceinline__ int dc_walk_per(const struct dc_product &a) { return a.mode == DC_UP ? a.tiles : INT_MAX; }
__device__ __forceinline__ struct dc_walk dc_walk_from(const struct dc_product &a, int T) {
    struct dc_walk w = {T / dc_walk_per(a), T % dc_walk_per(a)};
    return w;
}
/* by = dc_walk_from(a, gridDim.x): the same for every block and tile */
__device__ __forceinline__ void dc_walk_step(const struct dc_product &a, struct dc_walk &w, const struct dc_walk &by) {
    w.slot += by.slot;
    w.rt += by.rt;
    if (w.rt >= dc_walk_per(a)) {
        w.rt -= dc_walk_per(a);
        w.slot++;
    }
}
__device__ __forceinline__ struct dc_tile dc_walk_tile(const struct dc_product &a, const struct dc_walk &w) {
    int r0 = w.rt * a.rb;
    struct dc_tile t = {r0, min(a.rb, a.rows - r0), w.slot};
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

/* Bytes of a stage's parts (host and device agree through these): `tile` chunks of weights, then
 * `words` param / row-scale words (one per copying thread), then (q4tp) a row of codes per word. */
__host__ __device__ static inline int dc_code_words(int cols) { return (int)((cols / 32 * 5 + 7) / 8 + 3) / 4 + 1; }
__host__ __device__ static inline int dc_pairs(const struct dc_product &a) { return (a.mode == DC_DOWN ? a.k : 1) * a.rb; }
__host__ __device__ static inline int dc_stage_bytes_of(const struct dc_product &a, int tile, int per_row) {
    int codes = a.dtype == NT_DTYPE_Q4TP ? per_row * a.rb * dc_code_words(a.cols) * 4 : 0;
    return (16 * tile + 4 * (per_row * a.rb) + codes + 15) / 16 * 16;
}
__host__ __device__ static inline int dc_stage_bytes(const struct dc_product &a) {
    return dc_stage_bytes_of(a, DC_TILE, a.mode == DC_DOWN ? a.k : 1);
}
/* The most any product's stage takes: pairs <= DC_THREADS, and a q4tp tile's pairs hold at most
 * DC_TILE groups of 5 bits plus two partial words a pair. */
#define DC_MAX_STAGE_BYTES (16 * DC_TILE + 4 * DC_THREADS + (DC_TILE * 5 / 8 + 8 * DC_THREADS) + 16)

/* Issues the copies of tile t into stage st (CHUNKS chunks a thread): the thread's weight chunks,
 * and for a thread that copies params (tid < per_row * t.nr: row chain_rl = tid / per_row, slot
 * chain_s of the tile) its row's params / row-scale word as word tid and its codes after pwords
 * such words. k_decode: per_row S, the chain thread of pair tid, pwords the pairs (main's test
 * and layout, which k_decode's code keeps); k_decode_multi: q4tp row tid (per_row 1), or the
 * q8_2f row of chain tid (per_row n). Rows past the tile's are not copied and never read. */
template <bool Q4, int CHUNKS>
__device__ __forceinline__ void dc_issue(const struct dc_product &a, const uint8_t *const *mats, const struct dc_tile &t,
                                         const uint32_t *where, int chain_s, int chain_rl, int per_row, int pwords,
                                         uint8_t *st) {
    int nb = a.cols / 32;
    int64_t row_bytes = Q4 ? (int64_t)nb * 16 : a.cols;
    uint4 *w = (uint4 *)st;
    if (Q4) {
        /* the tile's first row found once (but for DC_DOWN, one matrix a tile), each chunk at a
         * 32-bit offset from it (under 16 DC_TILE bytes): the 64-bit address arithmetic and the
         * table load once a tile instead of once a chunk */
        const uint8_t *Wt = a.mode == DC_DOWN ? NULL : dc_matrix(a, mats, t.slot) + t.r0 * row_bytes;
#pragma unroll
        for (int j = 0; j < CHUNKS; j++) {
            int rl = where_row(where[j]);
            if (rl < t.nr) {
                const uint8_t *W = Wt ? Wt : dc_matrix(a, mats, where_slot(where[j])) + t.r0 * row_bytes;
                cp_async16(w + threadIdx.x + DC_THREADS * j, W + (uint32_t)(rl * nb * 16 + 16 * where_chunk(where[j])));
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < CHUNKS; j++) {
            int rl = where_row(where[j]);
            if (rl < t.nr) {
                const uint8_t *W = dc_matrix(a, mats, a.mode == DC_DOWN ? where_slot(where[j]) : t.slot);
                cp_async16(w + threadIdx.x + DC_THREADS * j,
                           W + (t.r0 + rl) * row_bytes + 16 * (int64_t)where_chunk(where[j]));
            }
        }
    }
    if ((int)threadIdx.x < per_row * t.nr) {
        const uint8_t *W = dc_matrix(a, mats, a.mode == DC_DOWN ? chain_s : t.slot);
        int64_t r = t.r0 + chain_rl;
        uint32_t *pw = (uint32_t *)(st + 16 * DC_THREADS * CHUNKS);
        if (Q4) {
            cp_async4(pw + threadIdx.x, W + d_q4_params_off(a.rows, a.cols) + 4 * r);
            const uint8_t *c0 = W + d_q4_codes_off(a.rows, a.cols) + r * d_q4_cstride(a.cols);
            const uint8_t *c1 = c0 + d_q4_cstride(a.cols);
            const uint8_t *w0 = (const uint8_t *)((uintptr_t)c0 & ~(uintptr_t)3);
            int words = (int)(((uintptr_t)c1 + 3 - (uintptr_t)w0) / 4), cw = dc_code_words(a.cols);
            uint32_t *cd = pw + pwords + threadIdx.x * cw;
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

/* What k_decode's chunks leave its chains: q8_2f the block sums; q4tp the sums as floats (exact:
 * |sum| < 2^15), the first of pk_chain_terms' two terms. */
template <bool Q4> struct dc_sum {
    typedef int32_t type;
};
template <> struct dc_sum<true> {
    typedef float type;
};

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
    /* block sums [row pair * nb + b], two tiles (q4tp: as floats, pk_chain_terms' first terms) */
    __shared__ __align__(16) typename dc_sum<Q4>::type isum[2][DC_TILE];
    __shared__ __align__(16) float gscale[2][Q4 ? DC_TILE : 1]; /* q4tp group scales, the same index */
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
            dc_issue<Q4, DC_CHUNKS>(a, mats, dc_tile_of(a, blockIdx.x + p * gridDim.x), where, chain_s, chain_rl, S,
                                    dc_pairs(a), stages + p * sb);
        cp_async_commit(); /* empty groups past the block's tiles keep the wait counts uniform */
    }
    if (a.mode != DC_UP) grid_wait();
    grid_launch_dependents(); /* past grid_wait: see the experts' comment above */
    uint8_t *sq = stages + DC_STAGES * sb; /* the quantized activation rows */
    /* q4tp: tile i and tile i + DC_STAGES - 1 walked (dc_walk); q8_2f keeps main's dc_tile_of */
    const struct dc_walk walk_by = dc_walk_from(a, q4 ? gridDim.x : 0);
    struct dc_walk walk_cur = dc_walk_from(a, q4 ? blockIdx.x : 0);
    struct dc_walk walk_ahead = dc_walk_from(a, q4 ? blockIdx.x + (DC_STAGES - 1) * gridDim.x : 0);
    if (a.qx) /* several rows: quantized once by k_dc_quantize for all the blocks */
        for (int i = tid; i < (int)(a.nq * qs / 16); i += DC_THREADS) ((uint4 *)sq)[i] = ((const uint4 *)a.qx)[i];
    else
        dc_quantize<false>(a, mats, sq, 0, a.nq * nb);
    __syncthreads();
    for (int i = 0; i < mine_tiles; i++) {
        int ahead = i + DC_STAGES - 1, buf = i & 1;
        if (ahead < mine_tiles) /* into the stage tile i - 1 used: only this thread read its parts */
            dc_issue<Q4, DC_CHUNKS>(a, mats,
                                    q4 ? dc_walk_tile(a, walk_ahead) : dc_tile_of(a, blockIdx.x + ahead * gridDim.x),
                                    where, chain_s, chain_rl, S, dc_pairs(a), stages + (ahead % DC_STAGES) * sb);
        cp_async_commit();
        cp_async_wait<DC_STAGES - 1>(); /* tile i's copies (this thread's) have landed */
        const struct dc_tile cur = q4 ? dc_walk_tile(a, walk_cur) : dc_tile_of(a, blockIdx.x + i * gridDim.x);
        if (q4) {
            dc_walk_step(a, walk_cur, walk_by);
            dc_walk_step(a, walk_ahead, walk_by);
        }
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
            if constexpr (Q4) {
                if (mine) { /* (past the tile's chunks nothing is read: no sum, no scale) */
                    int grp = cc, qrow = a.nq > 1 ? s : 0;
                    const uint4 *qp = (const uint4 *)(sq + qrow * qs + 32 * grp);
                    uint4 qa = qp[0], qb = qp[1];
                    /* the weights times 16 (q4_lo16): the same int32 after the shift */
                    v = __dp4a(q4_lo16(wv.x), (int)qa.x, 0);
                    v = __dp4a(q4_hi16(wv.x), (int)qa.y, v);
                    v = __dp4a(q4_lo16(wv.y), (int)qa.z, v);
                    v = __dp4a(q4_hi16(wv.y), (int)qa.w, v);
                    v = __dp4a(q4_lo16(wv.z), (int)qb.x, v);
                    v = __dp4a(q4_hi16(wv.z), (int)qb.y, v);
                    v = __dp4a(q4_lo16(wv.w), (int)qb.z, v);
                    v = __dp4a(q4_hi16(wv.w), (int)qb.w, v) >> 4;
                    /* the pair whose chain thread copied this row's params and codes */
                    int pr = where_row(where[j]) * S + where_slot(where[j]);
                    const uint8_t *codes = (const uint8_t *)(pw + pairs + pr * cw);
                    int off = (int)(((uintptr_t)(cur.r0 + where_row(where[j])) * d_q4_cstride(a.cols)) & 3);
                    uint32_t code2 = ld16b(codes + off + ((5 * grp) >> 3));
                    int code = (int)((code2 >> ((5 * grp) & 7)) & 31);
                    /* the chain's two terms, formed here (pk_chain_terms): the sum as a float, and
                     * the group scale times the activation block's scale */
                    float gsc = nt_q4tp_scale(f16f((uint16_t)(pw[pr] & 0xffff)), f16f((uint16_t)(pw[pr] >> 16)), code);
                    isum[buf][c] = (float)v;
                    gscale[buf][c] = __fmul_rn(gsc, ((const float *)(sq + qrow * qs + 32 * nb))[grp]);
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
            const float *dv = (const float *)(sq + (a.nq > 1 ? s : 0) * qs + 32 * nb);
            float acc;
            if constexpr (Q4)
                acc = pk_chain_terms(isum[buf] + tid * nb, gscale[buf] + tid * nb, nb);
            else
                acc = pk_chain_vec<Q4>(isum[buf] + tid * nb, gscale[buf], dv, nb);
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
template <bool STRIDED> __global__ void __launch_bounds__(DC_THREADS) k_dc_quantize(struct dc_product a) {
    grid_wait();
    grid_launch_dependents();
    int u0 = blockIdx.x * DC_QUANTIZE_UNITS, units = a.nq * (a.cols / 32);
    dc_quantize<STRIDED>(a, NULL, a.qx, u0, min(u0 + DC_QUANTIZE_UNITS, units));
}

/* ---- passes of 2 .. DM_MAX_N positions: k_decode_multi ------------------------------------------
 *
 * A verify pass (speculative decoding: 1 + k positions) or a short prompt multiplies every matrix
 * by a few activation rows. That is still a stream of weights (the bytes are read once for all n
 * positions), but k_gemv's items of 4 (one wave of blocks that each load 32 KB, compute and
 * retire) took 2.7x the one-position time at n = 4 on the H200 (docs/PERF.md, session 10). Here the
 * pipeline of k_decode carries n positions: the persistent grid, each block walking its tiles
 * (blockIdx.x, + gridDim.x, ...) with DM_STAGES - 1 tiles' weights in flight through cp.async;
 * the n rows are quantized once by k_dc_quantize and copied whole into the block's shared memory;
 * every weight chunk, read from its stage once, meets the n rows' bytes (n block sums a chunk);
 * then one chain per (row, position) runs products.cu's fma chain and store. The arithmetic is
 * k_decode's, so each position gets the bits it gets alone or in a long pass.
 *
 * Shared memory per block: DM_STAGES stages of DM_TILE chunks (8 KB: half k_decode's tile, three
 * stages, so the same 16 KB in flight), the block sums of one tile for n positions (n x 257 words
 * q8_2f, n x 513 q4tp: one buffer, a barrier a tile more than k_decode's two), the q4tp group
 * scales of the tile (shared by the positions), and the n quantized rows (n x ~1.1 bytes a
 * column). At n = 8 and 2688 columns that is 58 KB (q8_2f) to 68 KB (q4tp): 3 blocks an SM, as
 * k_decode; at n = 16, 90-109 KB (4096 columns: 116 KB): 2 or 1 blocks an SM, the grid sized by
 * the occupancy the runtime reports. DM_MAX_N = 12: past ~8 positions the chunk loop reads n x 16
 * bytes of rows from shared memory per 16 bytes of weights (128 bytes a cycle an SM) and the block
 * sums of n positions crowd the shared memory, so the time grows with n from there (H200, session
 * 11: in_proj 27.8 us at n = 8, 53.8 at 16) while k_mma's item of 32 costs the same from 9 to 32
 * positions (in_proj ~49, out_proj ~25, lm_head ~408); interpolated, the two meet at 11 - 15
 * positions (the lm_head first), so passes of 13 or more run k_mma (PK_MMA_MIN_PLAIN). */
#ifndef NT_DECODE_MULTI
#define NT_DECODE_MULTI 1 /* 0: passes of 2 .. DM_MAX_N positions run k_gemv / k_mma (products.cu) */
#endif
#ifndef DM_MAX_N
#define DM_MAX_N 12
#endif
#ifndef DM_CHUNKS
#define DM_CHUNKS 2 /* 16-byte weight loads per thread per tile: 8 KB tiles */
#endif
#ifndef DM_STAGES
#define DM_STAGES 3
#endif
#define DM_TILE (DC_THREADS * DM_CHUNKS)
#define DM_MAX_SMEM (227 * 1024) /* what a block may opt into on sm_90 */
static_assert(DM_TILE <= 4096 && DM_STAGES >= 2 && DM_MAX_N <= DC_THREADS, "k_decode_multi's sizes");

/* Bytes between two positions' quantized rows in shared memory: pk_qx_stride, plus 16 where its
 * words are a multiple of 8, so that the chains of one warp, reading block scale b of up to 8
 * positions at once, read 8 distinct banks (16-byte rows leave no better spread). */
__host__ __device__ static inline int dm_qrow_bytes(int cols) {
    int qs = (int)pk_qx_stride(cols);
    return qs / 4 % 8 == 4 ? qs : qs + 16;
}

/* Where the parts of k_decode_multi's dynamic shared memory start (bytes), and its size. */
struct dm_layout {
    int sb, isum, gscale, sq, total;
};
__host__ __device__ static inline struct dm_layout dm_layout_of(const struct dc_product &a) {
    bool q4 = a.dtype == NT_DTYPE_Q4TP;
    int tb = q4 ? DM_TILE : DM_TILE / 2; /* block sums of a tile */
    struct dm_layout l;
    l.sb = dc_stage_bytes_of(a, DM_TILE, q4 ? 1 : a.nq);
    l.isum = DM_STAGES * l.sb;
    l.gscale = l.isum + 4 * a.nq * (tb + 1);
    l.sq = (l.gscale + (q4 ? 4 * tb : 0) + 15) / 16 * 16;
    l.total = l.sq + a.nq * dm_qrow_bytes(a.cols);
    return l;
}

/* a.nq positions, row t of x quantized by k_dc_quantize into a.qx (pk_qx_stride(cols) bytes a
 * row), y row t at a.y + t a.y_stride. A tile holds a.rb rows; chain thread tid is row tid / n,
 * position tid % n (rb n <= DC_THREADS). The thread that copies a row's params: q4tp row tid (its
 * params and codes serve every chunk of the row, read after a barrier), q8_2f the row of chain tid
 * (its row-scale word, read by that chain alone: the stage is refilled while slower chains may
 * still read it, so no word is read by another thread than its copier after the tile's barrier). */
template <bool Q4>
__global__ void __launch_bounds__(DC_THREADS, DC_BLOCKS_PER_SM) k_decode_multi(struct dc_product a) {
    NT_DYNAMIC_SHARED(uint8_t, smem);
    const bool q4 = Q4;
    const struct dm_layout l = dm_layout_of(a);
    int32_t *isum = (int32_t *)(smem + l.isum); /* [position][row * nb + b], positions tbs apart */
    float *gscale = (float *)(smem + l.gscale);  /* q4tp: [row * nb + b] */
    uint8_t *sq = smem + l.sq;                   /* the quantized rows, qsp bytes apart */
    const int tid = threadIdx.x, n = a.nq, nb = a.cols / 32, cpr = q4 ? nb : 2 * nb;
    const int tbs = (q4 ? DM_TILE : DM_TILE / 2) + 1; /* odd: the chains of one row, n positions, on n banks */
    const int qs = (int)pk_qx_stride(a.cols), qsp = dm_qrow_bytes(a.cols), cw = dc_code_words(a.cols);
    const int words = q4 ? a.rb : a.rb * n, copy_per_row = q4 ? 1 : n, copy_rl = tid / copy_per_row;
    const int mine_tiles = blockIdx.x < (unsigned)a.tiles ? (a.tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    uint32_t where[DM_CHUNKS];
#pragma unroll
    for (int j = 0; j < DM_CHUNKS; j++) where[j] = dc_where(tid + DC_THREADS * j, cpr, 1, a.rb);
    /* the first tiles' weights before grid_wait (constants; launched early, they load while the
     * quantize kernel runs) */
#pragma unroll
    for (int p = 0; p < DM_STAGES - 1; p++) {
        if (p < mine_tiles)
            dc_issue<Q4, DM_CHUNKS>(a, NULL, dc_tile_of(a, blockIdx.x + p * gridDim.x), where, 0, copy_rl, copy_per_row,
                                    words, smem + p * l.sb);
        cp_async_commit();
    }
    grid_wait();
    grid_launch_dependents();
    for (int i = tid; i < n * (qs / 16); i += DC_THREADS) {
        int t = i / (qs / 16), o = i % (qs / 16);
        ((uint4 *)(sq + t * qsp))[o] = ((const uint4 *)(a.qx + (size_t)t * qs))[o];
    }
    for (int i = 0; i < mine_tiles; i++) {
        int ahead = i + DM_STAGES - 1;
        if (ahead < mine_tiles) /* into the stage tile i - 1 used (see above: no other reader left) */
            dc_issue<Q4, DM_CHUNKS>(a, NULL, dc_tile_of(a, blockIdx.x + ahead * gridDim.x), where, 0, copy_rl,
                                    copy_per_row, words, smem + (ahead % DM_STAGES) * l.sb);
        cp_async_commit();
        cp_async_wait<DM_STAGES - 1>(); /* tile i's copies (this thread's) have landed */
        /* everyone's copies of tile i have landed (the q4tp params and codes); the chains of tile
         * i - 1 are done with isum and gscale; (i = 0) the rows are in */
        __syncthreads();
        const struct dc_tile cur = dc_tile_of(a, blockIdx.x + i * gridDim.x);
        const uint8_t *st = smem + (i % DM_STAGES) * l.sb;
        const uint32_t *pw = (const uint32_t *)(st + 16 * DM_TILE);
#pragma unroll
        for (int j = 0; j < DM_CHUNKS; j++) {
            int c = tid + DC_THREADS * j;
            bool mine = where_row(where[j]) < cur.nr;
            int cc = mine ? where_chunk(where[j]) : 0;
            uint4 wv = mine ? ((const uint4 *)st)[c] : make_uint4(0, 0, 0, 0);
            if (q4) {
                int grp = cc;
                if (mine) {
                    int rl = where_row(where[j]);
                    const uint8_t *codes = (const uint8_t *)(pw + words + rl * cw);
                    int off = (int)(((uintptr_t)(cur.r0 + rl) * d_q4_cstride(a.cols)) & 3);
                    uint32_t code2 = ld16b(codes + off + ((5 * grp) >> 3));
                    int code = (int)((code2 >> ((5 * grp) & 7)) & 31);
                    gscale[c] = nt_q4tp_scale(f16f((uint16_t)(pw[rl] & 0xffff)), f16f((uint16_t)(pw[rl] >> 16)), code);
                }
                /* the weights times 16 (q4_lo16): each position's sum shifted back, the same int32 */
                int w0 = q4_lo16(wv.x), w1 = q4_hi16(wv.x), w2 = q4_lo16(wv.y), w3 = q4_hi16(wv.y);
                int w4 = q4_lo16(wv.z), w5 = q4_hi16(wv.z), w6 = q4_lo16(wv.w), w7 = q4_hi16(wv.w);
                for (int t = 0; t < n; t++) {
                    const uint4 *qp = (const uint4 *)(sq + t * qsp + 32 * grp);
                    uint4 qa = qp[0], qb = qp[1];
                    int v = __dp4a(w0, (int)qa.x, 0);
                    v = __dp4a(w1, (int)qa.y, v);
                    v = __dp4a(w2, (int)qa.z, v);
                    v = __dp4a(w3, (int)qa.w, v);
                    v = __dp4a(w4, (int)qb.x, v);
                    v = __dp4a(w5, (int)qb.y, v);
                    v = __dp4a(w6, (int)qb.z, v);
                    v = __dp4a(w7, (int)qb.w, v) >> 4;
                    if (mine) isum[t * tbs + c] = v;
                }
            } else {
                for (int t = 0; t < n; t++) {
                    uint4 qa = *(const uint4 *)(sq + t * qsp + 16 * cc);
                    int v = __dp4a((int)wv.x, (int)qa.x, 0);
                    v = __dp4a((int)wv.y, (int)qa.y, v);
                    v = __dp4a((int)wv.z, (int)qa.z, v);
                    v = __dp4a((int)wv.w, (int)qa.w, v);
                    v += __shfl_xor_sync(0xffffffffu, v, 1); /* the block's other half: chunk c ^ 1 */
                    if (mine && !(c & 1)) isum[t * tbs + (c >> 1)] = v;
                }
            }
        }
        __syncthreads();
        if (tid < n * cur.nr) { /* one chain per (row, position): the blocks in order */
            int t = tid % n, rl = tid / n;
            const float *dv = (const float *)(sq + t * qsp + 32 * nb);
            float acc = pk_chain<Q4>(isum + t * tbs + rl * nb, gscale + rl * nb, dv, nb);
            int r = cur.r0 + rl;
            uint16_t rs = q4 ? 0 : (uint16_t)(pw[tid] >> (16 * (r & 1)));
            a.y[(int64_t)t * a.y_stride + r] = dc_finish(a, rs, a.bias ? a.bias[r] : 0.0f, acc);
        }
    }
    cp_async_wait<0>(); /* no copy outlives the block (the empty trailing groups) */
}

/* ---- float weights ----------------------------------------------------------------------------- */

#define FR_THREADS 128
#define FR_MAX_COLS 4096

/* k_float_product's arithmetic over a row w and a row x staged in shared memory (products.cu),
 * in three steps both float kernels run: lane l's fma chain over columns l, l + 8, ... below c8 =
 * cols & ~7; the lane tree (whole-warp shuffles: the lane 0 of each group of 8 gets its group's
 * sum); then, by that lane 0, the tail columns in order, bias and relu^2 (pk_store). */
__device__ __forceinline__ float fr_lanes(const float *w, const float *x, int l, int c8) {
    float acc = 0.0f;
#pragma unroll 8
    for (int j = l; j < c8; j += 8) acc = __fmaf_rn(w[j], x[j], acc);
    return acc;
}
__device__ __forceinline__ float fr_tree(float acc) {
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 4));
    acc = __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 2));
    return __fadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, 1));
}
__device__ __forceinline__ float fr_finish(const float *w, const float *x, int c8, int cols, const float *bias,
                                           int64_t r, int act, float acc) {
    for (int c = c8; c < cols; c++) acc = __fadd_rn(acc, __fmul_rn(w[c], x[c]));
    if (bias) acc = __fadd_rn(acc, bias[r]);
    if (act == NT_ACT_RELU2) {
        acc = acc > 0.0f ? acc : 0.0f;
        acc = __fmul_rn(acc, acc);
    }
    return acc;
}

/* n floats from src into the shared dst by the block's FR_THREADS threads. As float4s when both
 * are 16-byte aligned and n % 4 == 0, FR_BATCH of them a thread requested before any is stored:
 * a plain loop of one float a step (unrolled 8, the rest one by one) waited out a memory trip
 * for every 8 loads and for each of the rest, 7 trips a thread for the router's 2688 columns,
 * where this is one (session 22: the router cost a decode step 12 us a layer in place). */
#define FR_BATCH 8
__device__ __forceinline__ void fr_stage(float *dst, const float *src, int n) {
    if ((((uintptr_t)src | (uintptr_t)dst) & 15) || n % 4) {
        for (int c = threadIdx.x; c < n; c += FR_THREADS) dst[c] = src[c];
        return;
    }
    const float4 *s4 = (const float4 *)src;
    float4 *d4 = (float4 *)dst;
    int n4 = n / 4;
    for (int c0 = 0; c0 < n4; c0 += FR_BATCH * FR_THREADS) {
        float4 v[FR_BATCH];
#pragma unroll
        for (int k = 0; k < FR_BATCH; k++) {
            int c = c0 + (int)threadIdx.x + k * FR_THREADS;
            if (c < n4) v[k] = s4[c];
        }
#pragma unroll
        for (int k = 0; k < FR_BATCH; k++) {
            int c = c0 + (int)threadIdx.x + k * FR_THREADS;
            if (c < n4) d4[c] = v[k];
        }
    }
}

/* Row r of a float-weight matrix into the shared w, as f32 (f32 rows by fr_stage). */
__device__ __forceinline__ void fr_stage_row(float *w, const uint8_t *W, int dtype, int64_t r, int cols) {
    if (dtype == NT_DTYPE_F32) {
        fr_stage(w, (const float *)W + r * cols, cols);
        return;
    }
#pragma unroll 8
    for (int c = threadIdx.x; c < cols; c += FR_THREADS) w[c] = load_w(W, r * cols + c, dtype);
}

/* One position. One block per row: the row (as f32) and x staged in shared memory by the whole
 * block, every load in flight at once, then lanes 0..7 of warp 0 run the arithmetic over the
 * copy. k_float_product streams 4 rows a block in chunks of 1024 columns: at one position its 32
 * blocks for the router's 128 rows kept too few bytes in flight (18.5 us for 1.4 MB). (Main's
 * kernel of session 10, kept apart from k_float_rows: with the position loop in it the router
 * took 5.56 us instead of 5.22 on the H200, dev/wip/README.md session 12.) */
__global__ void __launch_bounds__(FR_THREADS) k_float_row(const uint8_t *W, int dtype, int cols, const float *bias,
                                                          int act, const float *x, float *y) {
    __shared__ __align__(16) float sw[FR_MAX_COLS], sx[FR_MAX_COLS];
    int64_t r = blockIdx.x;
    /* the weights (constants) before grid_wait: launched early, they load during the kernel before */
    fr_stage_row(sw, W, dtype, r, cols);
    grid_wait();
    grid_launch_dependents();
    fr_stage(sx, x, cols);
    __syncthreads();
    if (threadIdx.x >= 32) return;
    int c8 = cols & ~7;
    float acc = threadIdx.x < 8 ? fr_lanes(sw, sx, threadIdx.x, c8) : 0.0f;
    acc = fr_tree(acc);
    if (threadIdx.x != 0) return;
    y[r] = fr_finish(sw, sx, c8, cols, bias, r, act, acc);
}

/* A pass of 2 .. 16 positions (a verify pass). One block per row: the row (as f32) and the n rows
 * of x staged in shared memory (dynamic: cols floats of the row, then n x cols of x) by the whole
 * block, every load in flight at once, then per position p a group of 8 lanes (lanes 8 (p % 4) ..
 * + 7 of warp p / 4 % 4; 16 positions a round) runs the arithmetic over the copy. At 4 positions
 * k_float_product took 31 us (docs/PERF.md, session 10). */
#define FR_GROUPS (FR_THREADS / 8) /* positions a round */
__global__ void __launch_bounds__(FR_THREADS) k_float_rows(const uint8_t *W, int dtype, int cols, const float *bias,
                                                           int act, int n, const float *x, int x_stride, float *y,
                                                           int y_stride) {
    NT_DYNAMIC_SHARED(float, sw);
    float *sx = sw + cols;
    int64_t r = blockIdx.x;
    /* the weights (constants) before grid_wait: launched early, they load during the kernel before */
    fr_stage_row(sw, W, dtype, r, cols);
    grid_wait();
    grid_launch_dependents();
    for (int p = 0; p < n; p++) fr_stage(sx + (int64_t)p * cols, x + (int64_t)p * x_stride, cols);
    __syncthreads();
    int l = threadIdx.x & 7, c8 = cols & ~7;
    /* warp-uniform rounds: every lane runs the tree's shuffles; a group's lane 0 reads only its own
     * group's lanes (4, then 2, then 1 above it), so the whole-warp shuffle gives it the tree */
    for (int p0 = 0; p0 < n; p0 += FR_GROUPS) {
        int p = p0 + (int)threadIdx.x / 8;
        const float *xp = sx + (int64_t)(p < n ? p : 0) * cols;
        float acc = p < n ? fr_lanes(sw, xp, l, c8) : 0.0f;
        acc = fr_tree(acc);
        if (p >= n || l != 0) continue;
        y[(int64_t)p * y_stride + r] = fr_finish(sw, xp, c8, cols, bias, r, act, acc);
    }
}

/* k_float_rows' dynamic shared memory: the row and n rows of x. */
static size_t fr_smem(int64_t cols, int n) { return (size_t)(1 + n) * (size_t)cols * sizeof(float); }

/* ---- launch -------------------------------------------------------------------------------- */

static int chunks_per_row(int dtype, int64_t cols) { return (int)(dtype == NT_DTYPE_Q4TP ? cols / 32 : cols / 16); }

/* Whether products of a (rows x cols, dtype) matrix with S slots per tile and nq quantized rows
 * fit the kernel: packed, whole blocks of 32 columns, a row (S rows) per tile, the rows in
 * shared memory. */
static bool dc_shape_fits(int dtype, int64_t rows, int64_t cols) {
    return pk_packed(dtype) && !pk_reference_only() && cols > 0 && cols % 32 == 0 && rows > 0 && rows <= INT32_MAX / 2;
}
static bool dc_fits(int dtype, int64_t rows, int64_t cols, int S, int nq) {
    if (!dc_shape_fits(dtype, rows, cols)) return false;
    return (int64_t)S * chunks_per_row(dtype, cols) <= DC_TILE && S <= DC_MAX_K &&
           (int64_t)nq * pk_qx_stride(cols) <= DC_MAX_QROWS_BYTES;
}

/* The persistent grid of k_decode / k_decode_multi for `all` tiles (ops.cuh's resident_grid). */
template <class K> static bool dc_grid(struct nt_backend *be, K k, const char *name, size_t smem, int all, int *grid) {
    return resident_grid(be, k, name, DC_THREADS, smem, all, grid);
}

/* k_dc_quantize of a's nq rows into a->qx, launched early; strided: row q of x at q * x_stride. */
static bool dc_quantize_rows(struct nt_backend *be, const struct dc_product *a, bool strided) {
    unsigned grid = (unsigned)((a->nq * (a->cols / 32) + DC_QUANTIZE_UNITS - 1) / DC_QUANTIZE_UNITS);
    if (strided) return CK(be, NT_LAUNCH_EARLY(k_dc_quantize<true>, grid, DC_THREADS, 0, *a)) && LAUNCHED(be);
    return CK(be, NT_LAUNCH_EARLY(k_dc_quantize<false>, grid, DC_THREADS, 0, *a)) && LAUNCHED(be);
}

/* qx_room: device memory for the nq quantized rows when nq > 1 (k_dc_quantize writes them). */
static bool dc_launch(struct nt_backend *be, struct dc_product *a, uint8_t *qx_room) {
    a->qx = a->nq > 1 ? qx_room : NULL;
    int S = a->mode == DC_DOWN ? a->k : 1;
    a->rb = DC_TILE / (S * chunks_per_row(a->dtype, a->cols));
    if (a->rb > DC_THREADS / S) a->rb = DC_THREADS / S;
    if (a->rb > a->rows) a->rb = a->rows;
    a->tiles = (a->rows + a->rb - 1) / a->rb;
    int all = a->mode == DC_UP ? a->tiles * a->k : a->tiles, grid = 0;
    size_t smem = (size_t)DC_STAGES * dc_stage_bytes(*a) + (size_t)a->nq * pk_qx_stride(a->cols);
    bool q4 = a->dtype == NT_DTYPE_Q4TP;
    if (!(q4 ? dc_grid(be, k_decode<true>, "k_decode", smem, all, &grid)
             : dc_grid(be, k_decode<false>, "k_decode", smem, all, &grid)))
        return false;
    if (a->qx && !dc_quantize_rows(be, a, false)) return false;
    if (q4) return CK(be, NT_LAUNCH_EARLY(k_decode<true>, grid, DC_THREADS, smem, *a)) && LAUNCHED(be);
    return CK(be, NT_LAUNCH_EARLY(k_decode<false>, grid, DC_THREADS, smem, *a)) && LAUNCHED(be);
}

cudaError_t dc_setup(void) {
    cudaError_t e = cudaFuncSetAttribute(k_decode<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         DC_STAGES * DC_MAX_STAGE_BYTES + DC_MAX_QROWS_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_decode<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DC_STAGES * DC_MAX_STAGE_BYTES + DC_MAX_QROWS_BYTES);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_decode_multi<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, DM_MAX_SMEM);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_decode_multi<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, DM_MAX_SMEM);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(k_float_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, DM_MAX_SMEM);
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

static int multi_reference; /* nt_cuda_multi_reference */
extern "C" void nt_cuda_multi_reference(int on) { multi_reference = on; }

/* k_decode_multi's product of W (n positions) with its rows a tile, filled from the shape. */
static struct dc_product dm_product(const struct nt_matrix *W, int n) {
    struct dc_product a;
    memset(&a, 0, sizeof a);
    a.mode = DC_PLAIN;
    a.W = (const uint8_t *)W->data;
    a.dtype = W->dtype;
    a.rows = (int)W->rows;
    a.cols = (int)W->cols;
    a.k = 1;
    a.nq = n;
    a.rb = DM_TILE / chunks_per_row(a.dtype, a.cols);
    if (a.rb > DC_THREADS / n) a.rb = DC_THREADS / n;
    if (a.rb > a.rows) a.rb = a.rows;
    a.tiles = (a.rows + a.rb - 1) / a.rb;
    return a;
}

bool dc_fits_multi(const struct nt_matrix *W, int n) {
    if (!NT_DECODE_MULTI || multi_reference || n < 2 || n > DM_MAX_N || gg_is_block(W->dtype)) return false;
    if (!pk_packed(W->dtype)) /* float weights: k_float_rows, the row and the n rows of x staged */
        return W->cols > 0 && W->rows <= INT32_MAX && fr_smem(W->cols, n) <= DM_MAX_SMEM;
    if (!dc_shape_fits(W->dtype, W->rows, W->cols) || chunks_per_row(W->dtype, W->cols) > DM_TILE) return false;
    return dm_layout_of(dm_product(W, n)).total <= DM_MAX_SMEM;
}

bool dc_matmul_multi(struct nt_backend *be, const struct nt_matrix *W, const float *bias, int act, int n,
                     const float *x, int x_stride, float *y, int y_stride, uint8_t *qx_room) {
    if (!pk_packed(W->dtype)) {
        NT_LAUNCH_EARLY(k_float_rows, (unsigned)W->rows, FR_THREADS, fr_smem(W->cols, n), (const uint8_t *)W->data,
                        W->dtype, (int)W->cols, bias, act, n, x, x_stride, y, y_stride);
        return LAUNCHED(be);
    }
    struct dc_product a = dm_product(W, n);
    a.act = act;
    a.bias = bias;
    a.x = x;
    a.x_stride = x_stride;
    a.y = y;
    a.y_stride = y_stride;
    a.qx = qx_room;
    size_t smem = (size_t)dm_layout_of(a).total;
    bool q4 = a.dtype == NT_DTYPE_Q4TP;
    int grid = 0;
    if (!(q4 ? dc_grid(be, k_decode_multi<true>, "k_decode_multi", smem, a.tiles, &grid)
             : dc_grid(be, k_decode_multi<false>, "k_decode_multi", smem, a.tiles, &grid)) ||
        !dc_quantize_rows(be, &a, true))
        return false;
    if (q4) return CK(be, NT_LAUNCH_EARLY(k_decode_multi<true>, grid, DC_THREADS, smem, a)) && LAUNCHED(be);
    return CK(be, NT_LAUNCH_EARLY(k_decode_multi<false>, grid, DC_THREADS, smem, a)) && LAUNCHED(be);
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
