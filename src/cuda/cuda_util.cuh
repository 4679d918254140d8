/* cuda_util.cuh - what every .cu file of the CUDA backend shares: error checks, the stream, and
 * the small device helpers that read the weight formats (f16/bf16 words, quant.h's payload
 * offsets, the q4tp group scale). Static functions: each translation unit gets its own copy, so
 * no relocatable device code is needed. */
#ifndef NT_CUDA_UTIL_CUH
#define NT_CUDA_UTIL_CUH

extern "C" {
#include "../backend.h"
#include "../quant/quant.h"
}

#ifndef NT_CUDA_EMULATION /* tests/emu/cuda_emu.h stands in for the toolkit's headers */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------------------------- */

static void cuda_die(const char *file, int line, const char *what, cudaError_t e) {
    fprintf(stderr, "nemotron cuda: %s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
    abort();
}
/* Inside a pass there is no way to report an error back (the ops return void) and a failed
 * kernel leaves the context unusable: abort with where it happened. */
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) cuda_die(__FILE__, __LINE__, #call, e_);                            \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

static void fatal(const char *msg, const char *name) {
    fprintf(stderr, "nemotron cuda: %s%s%s\n", msg, name ? ": " : "", name ? name : "");
    abort();
}

/* Every operation goes to the calling thread's default stream: sessions on different threads
 * run concurrently, and one thread's pass is ordered without events. */
#define ST cudaStreamPerThread

/* kernel<<<grid, block, smem, ST>>>(args) and the dynamic shared array: macros, so the host
 * emulation (tests/emu/cuda_emu.h) can stand in for them. */
#ifndef NT_LAUNCH
#define NT_LAUNCH(kernel, grid, block, ...) kernel<<<grid, block, 0, ST>>>(__VA_ARGS__)
#define NT_LAUNCH_SMEM(kernel, grid, block, smem, ...) kernel<<<grid, block, smem, ST>>>(__VA_ARGS__)
#define NT_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

static inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- weight words -------------------------------------------------------------------------- */

__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* Two bytes at any address (q4tp group codes are packed at 5 bits). */
__device__ __forceinline__ uint32_t ld16b(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

/* Element i of a float-weight matrix of dtype dt, as f32. */
__device__ __forceinline__ float load_w(const uint8_t *W, int64_t i, int dt) {
    switch (dt) {
    case NT_DTYPE_BF16: return bf16f(((const uint16_t *)W)[i]);
    case NT_DTYPE_F16: return f16f(((const uint16_t *)W)[i]);
    default: return ((const float *)W)[i];
    }
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* quant.h's payload offsets, for device code (the host versions are plain C inlines). */
__device__ __forceinline__ int64_t d_q8_rs_off(int64_t rows, int64_t cols) { return rows * cols; }
__device__ __forceinline__ int64_t d_q8_cs_off(int64_t rows, int64_t cols) { return rows * cols + 2 * rows; }
__device__ __forceinline__ int64_t d_q4_cstride(int64_t cols) { return (cols / 32 * 5 + 7) / 8; }
__device__ __forceinline__ int64_t d_q4_params_off(int64_t rows, int64_t cols) { return rows * (cols / 32) * 16; }
__device__ __forceinline__ int64_t d_q4_codes_off(int64_t rows, int64_t cols) {
    return d_q4_params_off(rows, cols) + 4 * rows;
}

/* The scale of group g of q4tp row r (W: the payload, R rows, C columns). */
__device__ __forceinline__ float q4_group_scale(const uint8_t *W, int64_t R, int64_t C, int64_t r, int64_t g) {
    uint32_t pr = *(const uint32_t *)(W + d_q4_params_off(R, C) + 4 * r);
    const uint8_t *codes = W + d_q4_codes_off(R, C) + r * d_q4_cstride(C);
    int code = (int)((ld16b(codes + ((5 * g) >> 3)) >> ((5 * g) & 7)) & 31);
    return nt_q4tp_scale(f16f((uint16_t)(pr & 0xffff)), f16f((uint16_t)(pr >> 16)), code);
}

#endif
