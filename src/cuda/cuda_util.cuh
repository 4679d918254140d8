/* cuda_util.cuh - what every .cu file of the CUDA backend shares: error checks, the stream, and
 * the small device helpers (the weight formats' words, quant.h's payload offsets, the q4tp group
 * scale; activations; warp and block reductions). Device functions are static or inline: each
 * translation unit gets its own copy, so no relocatable device code is needed. */
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
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------- */

/* A failed CUDA call is recorded, never fatal (a server must survive one bad request): the first
 * failure's message - the call, the operation it served, the file and line, the runtime's words
 * - goes to be->fault (backend.h), and from then on every operation of the backend returns at
 * once. After an illegal address CUDA's context is unusable for the whole process (the error is
 * sticky), so nothing more is tried; session.c turns the fault into NEMOTRON_ERR_DEVICE.
 * cuda_ok returns whether e is cudaSuccess. */
bool cuda_ok(struct nt_backend *be, cudaError_t e, const char *call, const char *file, int line);
/* Records a broken invariant or an unsupported argument met inside an operation as the fault. */
void cuda_fault(struct nt_backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define CK(be, call) cuda_ok((be), (call), #call, __FILE__, __LINE__)
#define LAUNCHED(be) CK((be), cudaGetLastError())
#define FAULTED(be) ((be)->fault[0] != '\0')

/* Every operation goes to the calling thread's default stream: sessions on different threads
 * run concurrently, and one thread's pass is ordered without events; inside a pass's branch
 * (pass.cu, be_branch) the thread's side stream. */
extern thread_local cudaStream_t nt_stream;
#define ST nt_stream

/* kernel<<<grid, block, smem, ST>>>(args) and the dynamic shared array: macros, so the host
 * emulation (tests/emu/cuda_emu.h) can stand in for them. */
#ifndef NT_LAUNCH
#define NT_LAUNCH(kernel, grid, block, ...) kernel<<<grid, block, 0, ST>>>(__VA_ARGS__)
#define NT_LAUNCH_SMEM(kernel, grid, block, smem, ...) kernel<<<grid, block, smem, ST>>>(__VA_ARGS__)
#define NT_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
/* A launch that may begin while the kernel before it in the stream still runs (programmatic
 * dependent launch, sm_90): the kernel must call grid_wait() before it reads anything an earlier
 * kernel wrote; what it does before (loads of constants: weights) overlaps that kernel's end and
 * the launch gap. Returns the launch's cudaError_t. NT_EARLY_LAUNCH=0 at build time: a plain one. */
#ifndef NT_EARLY_LAUNCH
#define NT_EARLY_LAUNCH 1
#endif
template <class T> struct nt_as_param { typedef T type; }; /* the arguments take the kernel's types */
template <class... P>
static inline cudaError_t nt_launch_early(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                          typename nt_as_param<P>::type... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = NT_EARLY_LAUNCH;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ST;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}
#define NT_LAUNCH_EARLY(kernel, grid, block, smem, ...) nt_launch_early(kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)
#endif

/* Waits until the kernel before this one in the stream has finished and its writes are visible
 * (a no-op unless this kernel was launched by NT_LAUNCH_EARLY). Its partner: a kernel calls
 * grid_launch_dependents() only after its own grid_wait(), so an early kernel that started knows
 * every kernel before the one just before it has finished. */
__device__ __forceinline__ void grid_wait(void) {
#ifndef NT_CUDA_EMULATION
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/* Lets the early-launched kernel after this one start its blocks (as this one's retire) and run up
 * to its grid_wait. */
__device__ __forceinline__ void grid_launch_dependents(void) {
#ifndef NT_CUDA_EMULATION
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

static inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- weight words -------------------------------------------------------------------------- */

__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* Two bytes at any address (q4tp group codes are packed at 5 bits). */
__device__ __forceinline__ uint32_t ld16b(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }

/* q4tp word -> its even (low nibbles) and odd (high nibbles) weights as signed bytes. */
__device__ __forceinline__ int q4_lo(uint32_t w) { return (int)__vsub4(w & 0x0F0F0F0Fu, 0x08080808u); }
__device__ __forceinline__ int q4_hi(uint32_t w) { return (int)__vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u); }
/* The same weights times 16, each nibble moved to its byte's top half with its top bit flipped:
 * (nib ^ 8) << 4 is (nib - 8) * 16 as a signed byte. One logic op (hi) or a shift and one (lo)
 * against __vsub4's several; a dp4a sum of them is 16 times the signed nibbles' sum, exactly (at
 * most 16 * 32 * 8 * 127 a block of 32), so an arithmetic shift by 4 gives the same int32. */
__device__ __forceinline__ int q4_lo16(uint32_t w) { return (int)(((w << 4) & 0xF0F0F0F0u) ^ 0x80808080u); }
__device__ __forceinline__ int q4_hi16(uint32_t w) { return (int)((w & 0xF0F0F0F0u) ^ 0x80808080u); }

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

/* ---- asynchronous copies to shared memory ------------------------------------------------------
 * cp.async (sm_80+): the copy runs while the thread goes on; cp_async_commit closes a group of the
 * thread's copies, cp_async_wait<N> waits until at most N of its groups are still in flight (other
 * threads see the bytes after a barrier). The emulation copies at once: the same bytes, earlier. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
#ifdef NT_CUDA_EMULATION
    *(uint4 *)smem = __ldg((const uint4 *)gmem);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((uint32_t)__cvta_generic_to_shared(smem)),
                 "l"(gmem));
#endif
}
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
#ifdef NT_CUDA_EMULATION
    *(uint32_t *)smem = __ldg((const uint32_t *)gmem);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((uint32_t)__cvta_generic_to_shared(smem)),
                 "l"(gmem));
#endif
}
/* The same with the destination as a shared-memory address (sh_addr of a pointer, plus byte
 * offsets), for loops that issue copies to the same buffers every step: from a generic pointer
 * nvcc forms the shared address again at every copy (a special-register read, a move, a shift and
 * an add: ~5 instructions a copy in k_mma's loop), which an address formed once saves. */
#ifdef NT_CUDA_EMULATION
typedef uint8_t *sh_addr_t;
static inline sh_addr_t sh_addr(void *smem) { return (uint8_t *)smem; }
static inline void cp_async16_at(sh_addr_t s, const void *gmem) { cp_async16(s, gmem); }
static inline void cp_async4_at(sh_addr_t s, const void *gmem) { cp_async4(s, gmem); }
#else
typedef uint32_t sh_addr_t;
__device__ __forceinline__ sh_addr_t sh_addr(void *smem) { return (uint32_t)__cvta_generic_to_shared(smem); }
__device__ __forceinline__ void cp_async16_at(sh_addr_t s, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async4_at(sh_addr_t s, const void *gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}
#endif
__device__ __forceinline__ void cp_async_commit(void) {
#ifndef NT_CUDA_EMULATION
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
#ifndef NT_CUDA_EMULATION
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* (float)i for |i| < 2^22, exactly, without the conversion unit (16 conversions per clock per SM
 * on sm_90 against 64 integer adds and 128 float adds): 0x4B400000 is 1.5 * 2^23, whose unit in
 * the last place is 1, so the integer add writes i into the mantissa and the float subtract takes
 * the 1.5 * 2^23 away again. Both steps are exact: the same value as the conversion. */
#define SMALL_INT_BIAS 0x4B400000 /* the bits of 1.5 * 2^23 */
__device__ __forceinline__ float small_int_to_float(int i) {
    return __fsub_rn(__uint_as_float((uint32_t)(i + SMALL_INT_BIAS)), 12582912.0f);
}
/* The same for a sum that already holds SMALL_INT_BIAS (an accumulator started from it: the add
 * comes free with the products, e.g. k_mma's mma.sync). */
__device__ __forceinline__ float biased_int_to_float(int biased) {
    return __fsub_rn(__uint_as_float((uint32_t)biased), 12582912.0f);
}

/* ---- activations and reductions ------------------------------------------------------------ */

#define ELEM_THREADS 256 /* threads of the element-wise and per-row kernels */

__device__ __forceinline__ float silu_d(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float softplus_d(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Butterfly sum: every lane ends with the same bits (a + b == b + a at each stage). */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Sum over a block of blockDim.x (a multiple of 32) threads in a fixed tree; all get the result.
 * sh: 33 floats of shared memory. */
__device__ inline float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = threadIdx.x < (unsigned)nw ? sh[threadIdx.x] : 0.0f;
    if (warp == 0) r = warp_sum(r);
    if (threadIdx.x == 0) sh[32] = r;
    __syncthreads();
    r = sh[32];
    __syncthreads();
    return r;
}

/* (value, index) better: larger value, then lower index (the CPU's first maximum). */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return bi < 0 || (i >= 0 && (v > bv || (v == bv && i < bi)));
}

/* Block-wide pick of the best allowed element; each thread scans its stride in increasing index
 * order, so within a thread a tie keeps the lower index, and the combine keeps it across.
 * shv, shi: 33 entries of shared memory. */
__device__ inline void block_argbest(float v, int i, float *shv, int *shi, float *ov, int *oi) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(v2, i2, v, i)) { v = v2; i = i2; }
    }
    if (lane == 0) { shv[warp] = v; shi[warp] = i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bv = shv[0];
        int bi = shi[0];
        for (int w2 = 1; w2 < nw; w2++)
            if (better(shv[w2], shi[w2], bv, bi)) { bv = shv[w2]; bi = shi[w2]; }
        shv[32] = bv;
        shi[32] = bi;
    }
    __syncthreads();
    *ov = shv[32];
    *oi = shi[32];
    __syncthreads();
}

#endif
