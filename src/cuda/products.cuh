/* products.cuh - the products of the CUDA backend (packed q8_2f, q4tp, llama.cpp's block types
 * and float weights), plain and grouped.
 *
 * products.cu holds the kernels, says what their arithmetic is, and runs the matmul operation;
 * moe.cu fills a grouped pk_product and calls pk_run, which (packed weights) quantizes the
 * activations into the scratch and launches the product kernel chosen by the work item size. */
#ifndef NT_CUDA_PRODUCTS_CUH
#define NT_CUDA_PRODUCTS_CUH

#include <stddef.h>
#include <stdint.h>

#include "ggml_blocks.cuh"

/* Positions per work item: a pass of fewer positions (plain) or an expert with fewer entries on
 * average (grouped) runs the dp4a kernels with items of 1 or 4; more runs the int8 tensor-core
 * kernel with items of PK_MMA_N. Every kernel computes the same bits (products.cu). (Plain passes
 * of 1 .. DM_MAX_N positions whose matrix fits them run decode.cu's streaming kernels instead.) */
#define PK_MMA_N 32
#define PK_FLOAT_GROUP 4     /* float weights: items of 4 positions (k_float_product) */
/* When the tensor cores run (k_mma, items of PK_MMA_N positions) rather than k_gemv (items of 1 or
 * 4). Measured on the H200 (session 7, cp.async k_mma, docs/PERF.md): an item of 32 costs about
 * what k_gemv's item of 4 does once there are enough items to fill the GPU (in_proj: 31 us at
 * n = 64), but a plain pass of 4 is one item per row block (in_proj 61 us against k_gemv's 35), and
 * at 8 they are even (k_gemv's two items: in_proj 58 us, k_mma at 16: 49; session 11). So plain
 * products from 9 positions (those of 2 .. 12 mostly run decode.cu's k_decode_multi: DM_MAX_N);
 * grouped ones from half an entry per expert on average (n k >= E / 2; experts at n = 64, 3 per
 * expert: 645 us against 946; at n = 4, 0.2 per expert: 170 against 131; a verify pass of 17
 * positions, 0.8: 11.4 -> 8.5 ms). */
#ifndef PK_MMA_MIN_PLAIN
#define PK_MMA_MIN_PLAIN 9
#endif
#ifndef PK_MMA_GROUPED_HALF_ENTRIES
#define PK_MMA_GROUPED_HALF_ENTRIES 1 /* grouped: from this many half entries per expert */
#endif

/* One product y = act(W x + bias).
 * Plain: W, positions 0 .. n - 1, x row t, y row t.
 * Grouped (moe_experts): the work items (expert e, group g) of k_moe_plan, packed e << 16 | g,
 * the expert's entries start[e] .. start[e] + count[e] - 1 (gi), the item's `group` of them from
 * g * group; matrix Wtab[e]; x row entries[gi] / k (xmode 1) or gi (xmode 2); y row entries[gi]
 * (ymode 1) or gi (ymode 0). The quantized activations are written in row gi (grouped) or t. */
struct pk_product {
    const uint8_t *W;
    const uint8_t *const *Wtab;
    int dtype;
    int64_t rows, cols;
    const float *bias;
    int act;
    const float *x;
    int64_t x_stride;
    float *y;
    int64_t y_stride;
    uint8_t *qx; /* packed: room for n (plain) or nk (grouped) rows of pk_qx_stride(cols) bytes */
    int n;       /* plain: positions; grouped: entries (n k) */
    int group;   /* positions per work item: pk_group_plain / pk_group_grouped */
    int grouped, k, xmode, ymode;
    const int32_t *idx, *count, *start, *items, *n_items, *entries;
};

/* Bytes of one position's quantized activations: ceil(cols / 32) blocks of 32 int8 (a short
 * last block padded with 0), then one f32 scale per block; a multiple of 16. */
__host__ __device__ static inline size_t pk_qx_stride(int64_t cols) {
    size_t nb = (size_t)((cols + 31) / 32);
    return (nb * 32 + nb * 4 + 15) / 16 * 16;
}

/* Where column c of a block (0..31) goes in the quantized row: q4tp's nibble order (products.cu: the layout of the quantized activations). */
__device__ __forceinline__ int qx_slot(int dtype, int c) {
    if (dtype != NT_DTYPE_Q4TP) return c;
    int o = c & 7;
    return (c & ~7) + ((o & 1) << 2) + (o >> 1);
}

/* Block-type products (ggml.cu): the most positions of a work item. */
#define GG_MAXP 8

static inline bool pk_packed(int dtype) { return dtype == NT_DTYPE_Q8_2F || dtype == NT_DTYPE_Q4TP; }
static inline int pk_group_plain(int dtype, int n) {
    if (gg_is_block(dtype)) return n > 1 ? GG_MAXP : 1;
    if (!pk_packed(dtype)) return PK_FLOAT_GROUP;
    return n >= PK_MMA_MIN_PLAIN ? PK_MMA_N : n > 1 ? 4 : 1;
}
/* Grouped: one list of items serves the up and the down product, so both must take its size.
 * One position's experts are distinct, so a pass of one has one entry per expert. */
static inline int pk_group_grouped(int up_dtype, int down_dtype, int n, int k, int E) {
    if (!pk_packed(up_dtype) || !pk_packed(down_dtype)) return PK_FLOAT_GROUP;
    return n == 1 ? 1 : 2 * (int64_t)n * k >= (int64_t)PK_MMA_GROUPED_HALF_ENTRIES * E ? PK_MMA_N : 4;
}

/* ---- what a block of a product kernel works on (products.cu, ggml.cu) ------------------------ */

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

/* One output's chain over its nb block sums is[b] and the activation row's block scales dv[b], in
 * order (q4tp: times the weights' group scales gsc[b]): the arithmetic's fma chain (products.cu),
 * run by every dp4a kernel. */
template <bool Q4>
__device__ __forceinline__ float pk_chain(const int32_t *is, const float *gsc, const float *dv, int nb) {
    float acc = 0.0f;
    if (Q4) {
#pragma unroll 4
        for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], __fmul_rn(gsc[b], dv[b]), acc);
    } else {
#pragma unroll 4
        for (int b = 0; b < nb; b++) acc = __fmaf_rn((float)is[b], dv[b], acc);
    }
    return acc;
}

/* pk_chain with 4 blocks' terms in one 16-byte load of each row, where every chain of the warp
 * can: nb % 4 == 0 and the rows 16-byte aligned (else pk_chain's loop; the test is the same for
 * the warp's chains when their rows are nb apart in one aligned array, so no warp runs both
 * forms). In a product of one position one thread runs a row's whole chain (84 - 128 blocks), and
 * the chain's instructions (a scalar load of each operand: 7 - 9 a block), not its fmas' latency,
 * held up each tile (k_decode, session 19: tg128 +2.5 %). The same fmas in the same order: the
 * same bits. Passes of several positions keep pk_chain (their chains of rows nb apart in tiles of
 * other strides mixed both forms in a warp: verify passes 7 % slower). */
template <bool Q4>
__device__ __forceinline__ float pk_chain_vec(const int32_t *is, const float *gsc, const float *dv, int nb) {
    if (nb % 4 || ((uintptr_t)is | (uintptr_t)dv | (Q4 ? (uintptr_t)gsc : 0)) % 16)
        return pk_chain<Q4>(is, gsc, dv, nb);
    float acc = 0.0f;
#pragma unroll 4
    for (int b = 0; b < nb; b += 4) {
        uint4 i4 = *(const uint4 *)(is + b); /* the four int32 sums, as their bits */
        float4 d4 = *(const float4 *)(dv + b);
        if (Q4) {
            float4 g4 = *(const float4 *)(gsc + b);
            d4 = make_float4(__fmul_rn(g4.x, d4.x), __fmul_rn(g4.y, d4.y), __fmul_rn(g4.z, d4.z),
                             __fmul_rn(g4.w, d4.w));
        }
        acc = __fmaf_rn((float)(int32_t)i4.x, d4.x, acc);
        acc = __fmaf_rn((float)(int32_t)i4.y, d4.y, acc);
        acc = __fmaf_rn((float)(int32_t)i4.z, d4.z, acc);
        acc = __fmaf_rn((float)(int32_t)i4.w, d4.w, acc);
    }
    return acc;
}

/* pk_chain<true>'s fmas over terms formed before it, by the threads that summed the blocks: sf[b] =
 * (float)is[b] and gd[b] = gsc[b] * dv[b] (__fmul_rn), so the same operations in the same order
 * give the same bits, and the one thread that runs a row's chain issues 2 of its 5 instructions a
 * block (k_decode's q4tp tiles, where the chain thread is the tile's longest path). Its rows: 16-byte
 * aligned; pk_chain's loop where nb % 4 != 0. */
__device__ __forceinline__ float pk_chain_terms(const float *sf, const float *gd, int nb) {
    float acc = 0.0f;
    if (nb % 4 || ((uintptr_t)sf | (uintptr_t)gd) % 16) {
        for (int b = 0; b < nb; b++) acc = __fmaf_rn(sf[b], gd[b], acc);
        return acc;
    }
#pragma unroll 4
    for (int b = 0; b < nb; b += 4) {
        float4 s4 = *(const float4 *)(sf + b), g4 = *(const float4 *)(gd + b);
        acc = __fmaf_rn(s4.x, g4.x, acc);
        acc = __fmaf_rn(s4.y, g4.y, acc);
        acc = __fmaf_rn(s4.z, g4.z, acc);
        acc = __fmaf_rn(s4.w, g4.w, acc);
    }
    return acc;
}

__device__ __forceinline__ const uint8_t *pk_qrow(const struct pk_product &a, const struct pk_item &it, int p) {
    return a.qx + (int64_t)(it.base + it.t0 + p) * (int64_t)pk_qx_stride(a.cols);
}

/* Quantizes the activations and runs the product; work = the number of work items (plain:
 * ceil(n / group); grouped: a bound on the items, the kernel reads their number). False, with
 * be's fault recorded, when a launch failed. */
bool pk_run(struct nt_backend *be, const struct pk_product *a, int work);

/* Once per device, before any product: the shared memory k_mma_wide opts into, the SMs it fills. */
cudaError_t pk_setup(int device);

/* ggml.cu: the block-type product over quantized activations (pk_run quantizes them first);
 * the most rows its grid holds. */
bool gg_launch(struct nt_backend *be, const struct pk_product *a, int work);
int64_t gg_rows_limit(void);

/* nt_cuda_packed_reference's switch: every packed product on the reference kernel. */
bool pk_reference_only(void);

/* decode.cu: products of a pass of one position. Whether a plain product of W fits its kernels;
 * the product (call only when it fits; false, with be's fault recorded, when a launch failed).
 * The kernels quantize the activation row(s) themselves, in shared memory. */
bool dc_fits_plain(const struct nt_matrix *W);
/* Once per device, before any product: the shared memory decode.cu's kernels opt into. */
cudaError_t dc_setup(void);
bool dc_matmul(struct nt_backend *be, const struct nt_matrix *W, const float *bias, int act, const float *x, float *y);
/* decode.cu: plain products of a pass of 2 .. DM_MAX_N positions (k_decode_multi; float weights:
 * k_float_rows). Whether W's product at n positions fits the kernel (and NT_DECODE_MULTI, nt_cuda_multi_reference leave it
 * on); the product, x row t at x + t x_stride, y row t at y + t y_stride, the n quantized rows in
 * qx_room (pk_qx_stride(cols) bytes each). */
bool dc_fits_multi(const struct nt_matrix *W, int n);
bool dc_matmul_multi(struct nt_backend *be, const struct nt_matrix *W, const float *bias, int act, int n,
                     const float *x, int x_stride, float *y, int y_stride, uint8_t *qx_room);
/* Whether the routed experts of one position fit its kernels; their up and down products with the
 * weighted combine: y = sum over slots s in order of wts[s] * down_e(relu2(up_e x)), e = idx[s];
 * inner: [k][mi] floats of scratch; up_room, down_room: room for k quantized rows of each. */
bool dc_fits_experts(const struct nt_moe_dims *d, const struct nt_matrix *up, const struct nt_matrix *down);
bool dc_experts(struct nt_backend *be, const struct nt_moe_dims *d, const uint8_t *const *up_tab,
                const uint8_t *const *down_tab, int up_dtype, int down_dtype, const float *x, const int32_t *idx,
                const float *wts, float *inner, float *y, uint8_t *up_room, uint8_t *down_room);

#endif
