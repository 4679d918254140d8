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
 * k_ggml: a block of GG_WARPS warps owns GG_ROWS rows, a warp 4 rows x the 8 lanes; each thread
 * keeps the chains of the item's positions (up to GG_MAXP), so a weight is read once per item.
 * Plain and simple: the weights are read bytewise (blocks are not aligned), nothing staged.
 */
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

__global__ void __launch_bounds__(GG_WARPS * 32) k_ggml(struct pk_product a) {
    const struct pk_item it = pk_item_of(a, blockIdx.x);
    if (!it.P) return; /* the whole block: no warp of it shuffles */
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, l = lane & 7;
    int64_t r = (int64_t)blockIdx.y * GG_ROWS + warp * 4 + (lane >> 3);
    bool live = r < a.rows; /* dead rows run on row 0 (their lanes take part in the shuffles) */
    int dt = a.dtype;
    int64_t nb = a.cols / 32;
    const uint8_t *row = it.W + (live ? r : 0) * gg_row_bytes(dt, a.cols);
    const uint8_t *q0 = pk_qrow(a, it, 0);
    int64_t qs = (int64_t)pk_qx_stride(a.cols);
    float acc[GG_MAXP];
#pragma unroll
    for (int p = 0; p < GG_MAXP; p++) acc[p] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int j;
        const uint8_t *blk = gg_block(dt, row, b, &j);
        struct gg_scales s = gg_scales_of(dt, blk, j, l >> 2);
        int codes = gg_codes4(dt, blk, j, l);
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
    NT_LAUNCH(k_ggml, dim3((unsigned)work, (unsigned)row_blocks), GG_WARPS * 32, *a);
    return LAUNCHED(be);
}

int64_t gg_rows_limit(void) { return (int64_t)65535 * GG_ROWS; }
