/* ggml.cu - the products of llama.cpp's block types (a GGUF's weights, read in place): plain and
 * grouped, any pass size, with docs/FORMATS-GGUF.md's arithmetic, the CPU's bits.
 *
 * The activations are quantized by products.cu's k_quantize (the same int8 blocks and scales as
 * for q8_2f). Then for output (row r, position t), eight lanes l = 0..7 per row, lane l owning
 * columns 4l .. 4l + 3 of every 32-column sub-block, each lane one chain over the sub-blocks in
 * order:
 *     isum = k * dot(codes, q)              (dp4a: exact int32; k the sub-scale of the lane's half)
 *     acc  = fma((float)isum, d * d_b, acc)
 *     acc  = fma((float)(mk * sx), m * d_b, acc)    (types with a minimum; sx = the lane's q sum)
 *     y    = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), + bias, relu^2
 * which is the CPU's lane arithmetic (matmul_ggml.c) term for term, so the results are the CPU's
 * bit for bit, whatever the pass size.
 *
 * k_ggml_stream (the default: NT_GGML_STREAM) streams the weights: persistent blocks walk tiles
 * of 32 rows chunk by chunk (each row's chunk one contiguous byte range) through cp.async stages
 * in shared memory and run the chains on the staged bytes (its section below). k_ggml, the plain
 * one, is the tests' reference (nt_cuda_ggml_reference) and NT_GGML_STREAM=0's kernel: a block
 * of GG_WARPS warps owns GG_ROWS rows, a warp 4 rows x the 8 lanes, the weights read bytewise
 * from global memory (blocks are not aligned), nothing staged. Both run gg_row_steps and
 * gg_row_store (each thread the chains of the item's positions, up to GG_MAXP, so a weight is
 * read once per item): the same bits.
 */
extern "C" {
#include "cuda_backend.h"
}
#include "ggml_blocks.cuh"
#include "ops.cuh"
#include "products.cuh"

#define GG_WARPS 4
#define GG_ROWS (GG_WARPS * 4)

/* A lane's 4 codes of a sub-block, packed as the int8 x 4 that dp4a takes (byte i: column
 * 4 lane + i). */
__device__ __forceinline__ int gg_codes4(int dt, const uint8_t *blk, int j, int lane8) {
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) w |= (uint32_t)(uint8_t)(int8_t)gg_code(dt, blk, j, 4 * lane8 + i) << (8 * i);
    return (int)w;
}

/* ---- reading staged bytes (k_ggml_stream) ----------------------------------------------------
 * The same integer codes as gg_codes4, read a word at a time: a stage has room past its bytes,
 * so the aligned words around any 4 bytes of it may be read whole (global memory may end there). */

/* 4 bytes at any address of a stage, little-endian. */
__device__ __forceinline__ uint32_t gs_u32(const uint8_t *p) {
    uintptr_t at = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(at & ~(uintptr_t)3);
    return (uint32_t)((((uint64_t)w[1] << 32) | w[0]) >> (8 * (at & 3)));
}
/* Lane l's 4 nibbles of a 32-element block's qs[16] (columns 4l .. 4l + 3), one a byte. */
__device__ __forceinline__ uint32_t gs_nibbles(const uint8_t *qs, int l) {
    uint32_t w = gs_u32(qs + 4 * (l & 3));
    return (l < 4 ? w : w >> 4) & 0x0F0F0F0Fu;
}
/* Bits 4l .. 4l + 3 of the 32-bit word at qh (a fifth bit per column), each as bit 4 of its byte. */
__device__ __forceinline__ uint32_t gs_fifth_bits(const uint8_t *qh, int l) {
    uint32_t h = gs_u32(qh) >> (4 * l);
    return ((h & 1u) | (h & 2u) << 7 | (h & 4u) << 14 | (h & 8u) << 21) << 4;
}
/* Each byte n (0..15) of nib replaced by entry n of a 16-entry int8 table (gg_table's words). */
__device__ __forceinline__ uint32_t gs_lookup(uint32_t nib, uint64_t lo, uint64_t hi) {
    uint32_t s = nib & 0x07070707u;
    s = (s & 0x7u) | ((s >> 4) & 0x70u) | ((s >> 8) & 0x700u) | ((s >> 12) & 0x7000u); /* 4 selectors */
    uint32_t from_lo = __byte_perm((uint32_t)lo, (uint32_t)(lo >> 32), s);
    uint32_t from_hi = __byte_perm((uint32_t)hi, (uint32_t)(hi >> 32), s);
    uint32_t m = ((nib >> 3) & 0x01010101u) * 0xFFu; /* bytes whose entry is 8..15 */
    return (from_lo & ~m) | (from_hi & m);
}
/* gg_codes4 on staged bytes (dt a constant where it matters: k_ggml_stream's template). */
__device__ __forceinline__ int gs_codes4(int dt, const uint8_t *blk, int j, int l) {
    switch (dt) {
    case NT_DTYPE_GGML_Q8_0: return (int)gs_u32(blk + 2 + 4 * l);
    case NT_DTYPE_GGML_Q4_0: return (int)__vsub4(gs_nibbles(blk + 2, l), 0x08080808u);
    case NT_DTYPE_GGML_Q4_1: return (int)gs_nibbles(blk + 4, l);
    case NT_DTYPE_GGML_Q5_0: return (int)__vsub4(gs_nibbles(blk + 6, l) | gs_fifth_bits(blk + 2, l), 0x10101010u);
    case NT_DTYPE_GGML_Q5_1: return (int)(gs_nibbles(blk + 8, l) | gs_fifth_bits(blk + 4, l));
    case NT_DTYPE_GGML_IQ4_NL: return (int)gs_lookup(gs_nibbles(blk + 2, l), GG_IQ4NL_LO, GG_IQ4NL_HI);
    case NT_DTYPE_GGML_MXFP4: return (int)gs_lookup(gs_nibbles(blk + 1, l), GG_MXFP4_LO, GG_MXFP4_HI);
    case NT_DTYPE_GGML_Q6_K: {
        int h = j / 4, k = j % 4;
        uint32_t lo = gs_u32(blk + 64 * h + 32 * (k & 1) + 4 * l);
        lo = (k < 2 ? lo : lo >> 4) & 0x0F0F0F0Fu;
        uint32_t hi = (gs_u32(blk + 128 + 32 * h + 4 * l) >> (2 * k)) & 0x03030303u;
        return (int)__vsub4(lo | hi << 4, 0x20202020u);
    }
    default: { /* Q4_K, Q5_K */
        uint32_t w = gs_u32(blk + (dt == NT_DTYPE_GGML_Q5_K ? 48 : 16) + 32 * (j / 2) + 4 * l);
        uint32_t n = (j % 2 ? w >> 4 : w) & 0x0F0F0F0Fu;
        if (dt == NT_DTYPE_GGML_Q5_K) n |= ((gs_u32(blk + 16 + 4 * l) >> j) & 0x01010101u) << 4;
        return (int)n;
    }
    }
}

/* Steps b0 .. b1 - 1 of the item's chains of one row for lane l of its 8 (b0 a block's first
 * sub-block; row: the bytes of that block on, anywhere: global or staged): the header's
 * arithmetic, the sub-blocks in order. Both kernels run exactly this. */
__device__ __forceinline__ void gg_row_steps(const struct pk_product &a, const struct pk_item &it, int dt, bool staged,
                                             const uint8_t *row, int64_t b0, int64_t b1, int l, float acc[GG_MAXP]) {
    int64_t nb = a.cols / 32;
    const uint8_t *q0 = pk_qrow(a, it, 0);
    int64_t qs = (int64_t)pk_qx_stride(a.cols);
    for (int64_t b = b0; b < b1; b++) {
        int j;
        const uint8_t *blk = gg_block(dt, row, b - b0, &j);
        struct gg_scales s = gg_scales_of(dt, blk, j, l >> 2);
        int codes = staged ? gs_codes4(dt, blk, j, l) : gg_codes4(dt, blk, j, l);
#pragma unroll
        for (int p = 0; p < GG_MAXP; p++) {
            if (p >= it.P) break;
            const uint8_t *q = q0 + p * qs;
            int xq = *(const int *)(q + 32 * b + 4 * l);
            float db = ((const float *)(q + 32 * nb))[b];
            acc[p] = __fmaf_rn((float)(s.k * __dp4a(codes, xq, 0)), __fmul_rn(s.d, db), acc[p]);
            if (s.has_min) acc[p] = __fmaf_rn((float)(s.mk * __dp4a(xq, 0x01010101, 0)), __fmul_rn(s.m, db), acc[p]);
        }
    }
}

/* The lane tree of each position's chains and the store of row r (by lane 0 of the 8, when
 * live); every lane of the warp takes part in the shuffles. */
__device__ __forceinline__ void gg_row_store(const struct pk_product &a, const struct pk_item &it, int64_t r, bool live,
                                             int l, const float acc[GG_MAXP]) {
#pragma unroll
    for (int p = 0; p < GG_MAXP; p++) {
        if (p >= it.P) break;
        /* lane 0 of the 8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
        float v = __fadd_rn(acc[p], __shfl_xor_sync(0xffffffffu, acc[p], 4));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if (live && l == 0) pk_store(a, it, r, p, v);
    }
}

__global__ void __launch_bounds__(GG_WARPS * 32) k_ggml(struct pk_product a) {
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return; /* the whole block: no warp of it shuffles */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, l = lane & 7;
    int64_t r = (int64_t)blockIdx.y * GG_ROWS + warp * 4 + (lane >> 3);
    bool live = r < a.rows; /* dead rows run on row 0 (their lanes take part in the shuffles) */
    const uint8_t *row = it.W + (live ? r : 0) * gg_row_bytes(a.dtype, a.cols);
    float acc[GG_MAXP];
#pragma unroll
    for (int p = 0; p < GG_MAXP; p++) acc[p] = 0.0f;
    gg_row_steps(a, it, a.dtype, false, row, 0, a.cols / 32, l, acc);
    gg_row_store(a, it, r, live, l, acc);
}

/* ---- k_ggml_stream ------------------------------------------------------------------------------
 * The same chains over weights streamed through shared memory. A tile is GS_ROWS rows of one
 * item's matrix, a thread per (row, lane) holding the chains of the item's positions in
 * registers; the tile's rows are walked in chunks of whole blocks (cb blocks a chunk), each row's
 * chunk one contiguous byte range copied with 16-byte cp.async into its slot of a stage (rs
 * bytes a slot). A range's start and end need not be aligned: the slot holds the 16-byte
 * granules covering it, the bytes (start & 15) in; granules reaching outside the matrix (only at
 * its first and last byte, when those are unaligned) are copied bytewise, their bytes of the
 * range only. The grid is what the SMs hold at once; each block walks its tiles (blockIdx.x,
 * + gridDim.x, ...: item-major, so neighbouring blocks read neighbouring rows) chunk after chunk
 * with GS_STAGES - 1 chunks in flight while it computes one, and after a tile's last chunk the
 * lane tree and the store: gg_row_steps and gg_row_store over the staged bytes, the bits of
 * k_ggml. Rows past the matrix run on the tile's first row (whole warps take part in the
 * shuffles), warps of such rows only sit out. Launched early: a plain product's first chunks are
 * issued before grid_wait (the weights are constants); the quantized activations are read only
 * after it, and a grouped product's items (k_moe_plan's lists, which name the matrices) too. */
#ifndef NT_GGML_STREAM
#define NT_GGML_STREAM 1 /* 0: k_ggml for every block-type product (dev/cuda/README.md) */
#endif
#define GS_THREADS 256
#define GS_ROWS (GS_THREADS / 8) /* rows of a tile: a thread per (row, lane) */
#ifndef GS_STAGES
#define GS_STAGES 4 /* chunks a block has in flight or in hand: 4 x 9 KB, under the 48 KB a kernel
                     * takes without opting in */
#endif
/* A slot holds the covering granules (the range + up to 15 bytes before it) and the 3 bytes past
 * it that gs_u32 may read: rs >= cb bb + GS_SLOT_SPARE bytes, rs = 32 (mod 128) so that the 4 rows
 * of a warp read words 8 banks apart (up to their ranges' own offsets), at most GS_SLOT_BYTES. */
#define GS_SLOT_SPARE 19
#define GS_SLOT_BYTES 288
#define GS_STAGE_BYTES (GS_ROWS * GS_SLOT_BYTES)

/* The walk: tile t is item t / tiles_per_item, rows r0 .. r0 + nr - 1; chunk c its blocks
 * c cb .. min((c + 1) cb, blocks of a row) - 1. */
struct gs_walk {
    int cb, rs, chunks, tiles_per_item, all; /* all: tiles */
};
struct gs_chunk {
    int item, nr, c;
    int64_t r0, blk0, blk1;
};
__device__ __forceinline__ struct gs_chunk gs_chunk_of(const struct pk_product &a, int dt, const struct gs_walk &w,
                                                       int tile, int c) {
    struct gs_chunk o;
    int64_t nblk = a.cols / gg_block_elems(dt);
    o.item = tile / w.tiles_per_item;
    o.r0 = (int64_t)(tile % w.tiles_per_item) * GS_ROWS;
    o.nr = (int)min((int64_t)GS_ROWS, a.rows - o.r0);
    o.c = c;
    o.blk0 = (int64_t)c * w.cb;
    o.blk1 = min(o.blk0 + w.cb, nblk);
    return o;
}

/* Issues the copies of a chunk of matrix W (row_bytes rb, blocks of bb bytes) into stage st. */
__device__ __forceinline__ void gs_issue(const struct pk_product &a, const uint8_t *W, int64_t rb, int bb,
                                         const struct gs_walk &w, const struct gs_chunk &k, uint8_t *st) {
    uintptr_t lo = (uintptr_t)W, hi = lo + (uintptr_t)(a.rows * rb);
    int64_t len = (k.blk1 - k.blk0) * bb;
    int per_row = (int)((len + 15) / 16) + 1; /* granules covering a range of len bytes, at most */
    for (int i = threadIdx.x; i < k.nr * per_row; i += GS_THREADS) {
        int rl = i / per_row, g = i % per_row;
        uintptr_t s0 = lo + (uintptr_t)((k.r0 + rl) * rb + k.blk0 * bb), s1 = s0 + (uintptr_t)len;
        uintptr_t a0 = s0 & ~(uintptr_t)15, ga = a0 + 16 * (uintptr_t)g;
        if (ga >= s1) continue;
        uint8_t *slot = st + rl * w.rs;
        if (ga >= lo && ga + 16 <= hi) {
            cp_async16(slot + 16 * g, (const void *)ga);
        } else { /* the matrix's unaligned first or last granule: its bytes of the range only */
            uintptr_t b0 = ga < s0 ? s0 : ga, b1 = ga + 16 < s1 ? ga + 16 : s1;
            for (uintptr_t b = b0; b < b1; b++) slot[b - a0] = *(const uint8_t *)b;
        }
    }
}

template <int DT>
__global__ void __launch_bounds__(GS_THREADS) k_ggml_stream(struct pk_product a, struct gs_walk w) {
    NT_DYNAMIC_SHARED(uint4, gs_words);
    uint8_t *stages = (uint8_t *)gs_words;
    const int tid = threadIdx.x, rl = tid >> 3, l = tid & 7;
    const int64_t rb = gg_row_bytes(DT, a.cols);
    const int bb = gg_block_bytes(DT), per = gg_block_elems(DT) / 32;
    const int mine = blockIdx.x < (unsigned)w.all ? (w.all - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int steps = mine * w.chunks; /* (tile, chunk) pairs, in order */
    if (a.grouped) grid_wait();        /* the items name the matrices: k_moe_plan's lists */
#pragma unroll
    for (int p = 0; p < GS_STAGES - 1; p++) {
        if (p < steps) {
            const struct gs_chunk k = gs_chunk_of(a, DT, w, blockIdx.x + (p / w.chunks) * gridDim.x, p % w.chunks);
            const struct pk_item it = pk_item_of(a, k.item);
            if (it.P) gs_issue(a, it.W, rb, bb, w, k, stages + p * GS_STAGE_BYTES);
        }
        cp_async_commit(); /* empty groups past the block's chunks keep the wait counts uniform */
    }
    if (!a.grouped) grid_wait(); /* before the quantized activations */
    grid_launch_dependents();
    float acc[GG_MAXP];
    for (int i = 0; i < steps; i++) {
        int ahead = i + GS_STAGES - 1;
        if (ahead < steps) { /* into the stage chunk i - 1 used: the barrier below freed it */
            const struct gs_chunk k =
                gs_chunk_of(a, DT, w, blockIdx.x + (ahead / w.chunks) * gridDim.x, ahead % w.chunks);
            const struct pk_item it = pk_item_of(a, k.item);
            if (it.P) gs_issue(a, it.W, rb, bb, w, k, stages + (ahead % GS_STAGES) * GS_STAGE_BYTES);
        }
        cp_async_commit();
        cp_async_wait<GS_STAGES - 1>(); /* chunk i's copies (this thread's) have landed */
        __syncthreads();                 /* and everyone's */
        const struct gs_chunk k = gs_chunk_of(a, DT, w, blockIdx.x + (i / w.chunks) * gridDim.x, i % w.chunks);
        const struct pk_item it = pk_item_of(a, k.item);
        if (it.P && (tid >> 5) * 4 < k.nr) { /* whole warps: rows past the matrix run on row 0 */
            bool live = rl < k.nr;
            int srl = live ? rl : 0;
            const uint8_t *row = stages + (i % GS_STAGES) * GS_STAGE_BYTES + srl * w.rs +
                                 (((uintptr_t)it.W + (uintptr_t)((k.r0 + srl) * rb + k.blk0 * bb)) & 15);
            if (k.c == 0) {
#pragma unroll
                for (int p = 0; p < GG_MAXP; p++) acc[p] = 0.0f;
            }
            gg_row_steps(a, it, DT, true, row, k.blk0 * per, k.blk1 * per, l, acc);
            if (k.c == w.chunks - 1) gg_row_store(a, it, k.r0 + rl, live, l, acc);
        }
        __syncthreads(); /* the stage is free for the copies issued next */
    }
    cp_async_wait<0>(); /* no copy outlives the block (the empty trailing groups) */
}

/* k_ggml_stream<DT>'s launch: the grid is what the SMs hold at once (a second wave would wait for
 * the first one's tail). False: the kernel does not fit an SM (k_ggml's then). */
template <int DT>
static bool gs_start(struct nt_backend *be, const struct pk_product *a, const struct gs_walk *w, bool *ok) {
    int sms = 0, per_sm = 0;
    size_t smem = (size_t)GS_STAGES * GS_STAGE_BYTES;
    if (!CK(be, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cb(be)->device)) ||
        !CK(be, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_ggml_stream<DT>, GS_THREADS, smem))) {
        *ok = false;
        return true;
    }
    if (per_sm < 1) return false;
    int64_t grid = (int64_t)sms * per_sm < w->all ? (int64_t)sms * per_sm : w->all;
    *ok = CK(be, NT_LAUNCH_EARLY(k_ggml_stream<DT>, (unsigned)grid, GS_THREADS, smem, *a, *w)) && LAUNCHED(be);
    return true;
}

static int ggml_reference; /* nt_cuda_ggml_reference */
extern "C" void nt_cuda_ggml_reference(int on) { ggml_reference = on; }

/* The streaming kernel's launch, when it takes the product (false: k_ggml's); ok false when a
 * runtime call failed (be's fault recorded). */
static bool gs_launch(struct nt_backend *be, const struct pk_product *a, int work, bool *ok) {
    *ok = true;
    int dt = a->dtype, bb = gg_block_bytes(dt);
    int64_t nblk = a->cols / gg_block_elems(dt);
    struct gs_walk w;
    int64_t cbm = (GS_SLOT_BYTES - GS_SLOT_SPARE) / bb; /* the most blocks a slot holds */
    if (!NT_GGML_STREAM || ggml_reference || nblk <= 0 || cbm < 1) return false;
    w.cb = (int)(cbm < nblk ? cbm : nblk);
    w.rs = 32 + (int)round_up((size_t)w.cb * bb + GS_SLOT_SPARE - 32, 128); /* (a block: 17 bytes or more) */
    int64_t chunks = (nblk + w.cb - 1) / w.cb, tiles_per_item = (a->rows + GS_ROWS - 1) / GS_ROWS;
    int64_t all = tiles_per_item * work;
    if (all * chunks > INT32_MAX) return false;
    w.chunks = (int)chunks;
    w.tiles_per_item = (int)tiles_per_item;
    w.all = (int)all;
    switch (dt) {
    case NT_DTYPE_GGML_Q8_0: return gs_start<NT_DTYPE_GGML_Q8_0>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q4_0: return gs_start<NT_DTYPE_GGML_Q4_0>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q4_1: return gs_start<NT_DTYPE_GGML_Q4_1>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q5_0: return gs_start<NT_DTYPE_GGML_Q5_0>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q5_1: return gs_start<NT_DTYPE_GGML_Q5_1>(be, a, &w, ok);
    case NT_DTYPE_GGML_IQ4_NL: return gs_start<NT_DTYPE_GGML_IQ4_NL>(be, a, &w, ok);
    case NT_DTYPE_GGML_MXFP4: return gs_start<NT_DTYPE_GGML_MXFP4>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q4_K: return gs_start<NT_DTYPE_GGML_Q4_K>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q5_K: return gs_start<NT_DTYPE_GGML_Q5_K>(be, a, &w, ok);
    case NT_DTYPE_GGML_Q6_K: return gs_start<NT_DTYPE_GGML_Q6_K>(be, a, &w, ok);
    default: return false;
    }
}

bool gg_launch(struct nt_backend *be, const struct pk_product *a, int work) {
    if (a->group > GG_MAXP || a->cols % gg_block_elems(a->dtype)) {
        cuda_fault(be, "block-type product: items of %d positions, %lld columns", a->group, (long long)a->cols);
        return false;
    }
    int64_t row_blocks = (a->rows + GG_ROWS - 1) / GG_ROWS;
    if (row_blocks > 65535) {
        cuda_fault(be, "block-type product: %lld rows are more than one grid holds", (long long)a->rows);
        return false;
    }
    bool ok;
    if (gs_launch(be, a, work, &ok)) return ok;
    NT_LAUNCH(k_ggml, dim3((unsigned)work, (unsigned)row_blocks), GG_WARPS * 32, *a);
    return LAUNCHED(be);
}

int64_t gg_rows_limit(void) { return (int64_t)65535 * GG_ROWS; }
