/* cuda_emu.h - runs CUDA kernels on the host, so machines without a GPU (CI) execute them.
 *
 * Force-included (g++ -include) ahead of a .cu file compiled as C++20 with NT_CUDA_EMULATION:
 * the CUDA keywords become plain C++, every CUDA thread of a block is a fiber of the calling host
 * thread, and the block-wide and warp-wide operations (__syncthreads, __syncwarp, shuffles,
 * ballots, integer reductions, mma.m16n8k32.s8) meet through barriers. This header is the
 * language; tests/emu/cuda_emu.cc, linked into every emulated program, is the runtime (memory,
 * streams and graphs, the scheduler, the checks). Float intrinsics map to the IEEE operation they
 * name (__fmaf_rn: fma), integer SIMD intrinsics to their definitions in the CUDA Math API, and
 * __ldg checks its pointer's alignment: a misaligned vector load, which faults on a GPU, aborts.
 *
 * Each scheduling round runs the block's threads in another order, so a read of another thread's
 * write that no barrier orders goes wrong in some round.
 *
 * NOTHING STARTS AS ZERO. Memory a kernel may read before anything wrote it holds poison
 * (cuda_emu.cc says which bytes and why): every cudaMalloc allocation, the dynamic shared memory
 * and the __shared__ variables at the start of every block, and (with
 * -ftrivial-auto-var-init=pattern, which the Makefile sets) a kernel's local variables. Code that
 * needs zeros calls cudaMemset, as on the hardware, where nothing clears memory either.
 *
 * POINTER CHECKS (the release emulated build, NT_EMU_CHECKED): the emulated objects are compiled
 * with -fsanitize=kernel-address, so every load and store that is not provably to a local or a
 * global variable calls cuda_emu.cc first. While a kernel's thread runs, an access must fall in a
 * live cudaMalloc allocation, the block's shared memory or the thread's own stack; anything else
 * (a host pointer, a freed buffer, NULL + offset, a pointer read from poison) aborts naming the
 * kernel, the block, the thread and the address. The emulator's own functions are exempt
 * (EMU_EXEMPT), host code runs unchecked. The ASan build checks bounds and lifetimes its own way
 * and leaves these checks out.
 *
 * FAULT INJECTION, for tests of the error paths: NT_EMU_FAIL, read once per process,
 *   launch:N  the N-th launch that runs (1-based; eager launches and graph replays count, a
 *             capture does not) does not run and leaves the context in a sticky error, as an
 *             illegal address does on a GPU: from then on every call that touches the context
 *             (cudaGetLastError, cudaStreamSynchronize, cudaMemcpy*, cudaMemset*, cudaMalloc,
 *             cudaFree, the graph and event calls, cudaMemGetInfo) returns cudaErrorIllegalAddress
 *             and does nothing, no kernel runs, and nothing clears it (no cudaDeviceReset);
 *             device queries (count, properties, attributes) still answer;
 *   alloc:N   the N-th cudaMalloc fails with cudaErrorMemoryAllocation, once (not sticky).
 * As in the CUDA runtime, a call that fails also leaves its error for the next cudaGetLastError
 * of the thread, which returns and clears it (a sticky error is never cleared).
 *
 * What it cannot show: speed, the memory model between blocks (blocks run one after another),
 * whether the hardware's mma fragment layout is the one written in cuda_emu.cc (it is the PTX
 * ISA's, section "Matrix Fragments for mma.m16n8k32"), and what nvcc's device compiler does with
 * the source (a miscompiled kernel runs correctly here). The GPU checks (tests/gpu/run.sh) remain
 * the word on those.
 */
#ifndef NT_CUDA_EMU_H
#define NT_CUDA_EMU_H

#if !defined(__x86_64__)
#error "cuda_emu.h switches fibers with x86-64 assembly"
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* retain: gcc 12 drops a section attribute from the statics of a template (every product kernel
 * is one), but keeps this flag, and gives each variable that has it a section of its own;
 * shared_sections.sh then moves exactly those sections into emu_shared, one range that
 * cuda_emu.cc poisons before every block. */
#define __shared__ static __attribute__((retain))
#define __launch_bounds__(...)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))

/* The emulator's functions that run inside a kernel's thread and touch the emulator's memory:
 * not instrumented, so the pointer checks see only what the kernel itself does. */
#if defined(NT_EMU_CHECKED)
#define EMU_EXEMPT __attribute__((no_sanitize("kernel-address")))
#else
#define EMU_EXEMPT
#endif

/* ---- types and the runtime's calls (cuda_emu.cc) ---------------------------------------------- */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint2 {
    unsigned x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

/* Device memory is host memory (256-byte aligned, as cudaMalloc's), the stream runs everything
 * at once, and a stream capture records launches and copies that a graph launch replays, in
 * order: what a CUDA graph does, seen from the kernels. */
typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
#define cudaErrorInvalidValue 1
#define cudaErrorMemoryAllocation 2
#define cudaErrorNotReady 600
#define cudaErrorIllegalAddress 700
#define cudaStreamPerThread ((cudaStream_t)0)
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeThreadLocal = 1 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};
namespace emu {
struct program; /* a captured graph: its launches and copies, in order */
struct event;
} // namespace emu
typedef emu::program *cudaGraph_t;
typedef emu::program *cudaGraphExec_t;
typedef emu::event *cudaEvent_t;

cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemset(void *d, int v, size_t n);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st);
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st);
cudaError_t cudaStreamSynchronize(cudaStream_t st);
/* the emulated stream has always finished (cudaSuccess), or reports its sticky fault */
cudaError_t cudaStreamQuery(cudaStream_t st);
/* Other streams run in the same order as the default one (everything at once): a side stream is a
 * name, and an event's wait is already met. */
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t st);
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode m);
cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t st);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

struct __half {
    uint16_t bits;
};
static inline __half __ushort_as_half(uint16_t u) { return __half{u}; }
static inline float __half2float(__half h) {
    uint32_t s = (uint32_t)(h.bits >> 15) << 31, e = (h.bits >> 10) & 31, m = h.bits & 1023, f;
    if (e == 31) f = s | 0x7F800000u | (m << 13);
    else if (e) f = s | ((e + 112) << 23) | (m << 13);
    else if (!m) f = s;
    else { /* subnormal: normalise */
        e = 113;
        while (!(m & 1024)) m <<= 1, e--;
        f = s | (e << 23) | ((m & 1023) << 13);
    }
    float r;
    memcpy(&r, &f, 4);
    return r;
}

/* ---- threads of the running block ------------------------------------------------------------ */

/* Set by the scheduler (cuda_emu.cc) before it switches to a thread. */
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
inline void *dyn_smem; /* the running block's dynamic shared memory (NT_DYNAMIC_SHARED) */
/* cuda_emu.cc: the block-wide and warp-wide meeting points */
void sync_block(void);
void sync_warp(void);
uint64_t exchange(uint64_t v, unsigned from_lane); /* every lane puts v, gets lane from_lane's */
unsigned ballot(int p);
int reduce_add(int v);
const char *running_kernel(void); /* for messages: the kernel now running, or "(host)" */
} // namespace emu

static inline void __syncthreads(void) { emu::sync_block(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }

template <class T> static inline T emu_exchange(T v, unsigned from) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = emu::exchange(b, from & 31);
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}
static inline unsigned emu_lane(void) { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31; }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_exchange(v, emu_lane() ^ o); }
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned o) {
    unsigned l = emu_lane();
    return emu_exchange(v, l + o < 32 ? l + o : l);
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_exchange(v, (unsigned)src); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned o) {
    unsigned l = emu_lane();
    return emu_exchange(v, l >= o ? l - o : l);
}
static inline unsigned __ballot_sync(unsigned, int p) { return emu::ballot(p); }
static inline int __reduce_add_sync(unsigned, int v) { return emu::reduce_add(v); }
/* redux.sync's max and min (every lane gets the warp's), as butterflies of exchanges */
static inline unsigned __reduce_max_sync(unsigned, unsigned v) {
    for (int o = 16; o > 0; o >>= 1) v = std::max(v, emu_exchange(v, emu_lane() ^ o));
    return v;
}
static inline int __reduce_min_sync(unsigned, int v) {
    for (int o = 16; o > 0; o >>= 1) v = std::min(v, emu_exchange(v, emu_lane() ^ o));
    return v;
}

/* mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 and ldmatrix .x4 (.b16): cuda_emu.cc. */
void emu_mma_m16n8k32_s8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const int c[4]);
void emu_ldmatrix_x4(uint32_t r[4], const uint8_t *row);

/* ---- intrinsics ------------------------------------------------------------------------------ */

template <class T> static inline T __ldg(const T *p) {
    if ((uintptr_t)p % sizeof(T)) {
        fprintf(stderr, "cuda_emu: %s: misaligned %zu-byte load at %p\n", emu::running_kernel(), sizeof(T),
                (const void *)p);
        abort();
    }
    return *p;
}
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xFFu) << (8 * i);
    return r;
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
template <class T> static inline T atomicAdd(T *p, T v) { /* fibers switch only at barriers */
    T o = *p;
    *p = o + v;
    return o;
}
using std::max;
using std::min;

/* ---- launch ---------------------------------------------------------------------------------- */

namespace emu {
/* cuda_emu.cc: runs `launch` now, or records it into the capture in progress; drops it while
 * the context is in a sticky error */
void run_or_record(std::function<void(void)> launch);
/* cuda_emu.cc: runs a kernel over grid x block, blocks in order, a fiber per CUDA thread, with
 * smem bytes of dynamic shared memory; each thread calls enter(bound) */
void run(const char *name, dim3 grid, dim3 block, size_t smem, void (*enter)(const void *), const void *bound);
template <class... P> struct bound {
    void (*k)(P...);
    std::tuple<P...> args;
};
/* The call itself: it copies the arguments from the launch's closure, which no kernel may read,
 * onto the thread's stack, where the kernel's parameters live. */
template <class... P, size_t... I>
EMU_EXEMPT static void call(void (*k)(P...), const std::tuple<P...> &a, std::index_sequence<I...>) {
    k(std::get<I>(a)...);
}
template <class... P> EMU_EXEMPT static void enter(const void *b) {
    const bound<P...> *x = (const bound<P...> *)b;
    call(x->k, x->args, std::index_sequence_for<P...>{});
}
} // namespace emu

/* Dynamic shared memory, as on an H200: every kernel may take 48 KB; one that opted in through
 * cudaFuncSetAttribute up to what it asked (at most 227 KB). A launch past its limit fails with
 * cudaErrorInvalidValue and runs nothing, as the runtime's does. */
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
namespace emu {
cudaError_t set_dynamic_smem(const void *kernel, int bytes); /* cuda_emu.cc */
bool dynamic_smem_fits(const void *kernel, size_t bytes);
bool launch_smem_ok(const void *kernel, size_t bytes); /* false: the thread's last error set */
} // namespace emu
template <class... P> static inline cudaError_t cudaFuncSetAttribute(void (*k)(P...), cudaFuncAttribute, int bytes) {
    return emu::set_dynamic_smem(reinterpret_cast<const void *>(k), bytes);
}
/* Two blocks per emulated SM where the memory fits (two SMs: cudaDeviceGetAttribute), none where
 * it does not, as the runtime answers. */
template <class... P>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void (*k)(P...), int, size_t smem) {
    *n = emu::dynamic_smem_fits(reinterpret_cast<const void *>(k), smem) ? 2 : 0;
    return cudaSuccess;
}

/* (the arguments take the kernel's parameter types at the call, as in a <<< >>> launch) */
template <class... P>
static void emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                       std::type_identity_t<P>... args) {
    if (!emu::launch_smem_ok(reinterpret_cast<const void *>(k), smem)) return;
    emu::bound<P...> b{k, std::tuple<P...>(args...)};
    emu::run_or_record([=] { emu::run(name, grid, block, smem, &emu::enter<P...>, &b); });
}

#define NT_LAUNCH(kernel, grid, block, ...) emu_launch(#kernel, kernel, dim3(grid), dim3(block), 0, __VA_ARGS__)
#define NT_LAUNCH_SMEM(kernel, grid, block, smem, ...)                                                           \
    emu_launch(#kernel, kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)
#define NT_DYNAMIC_SHARED(type, name) type *name = (type *)emu::dyn_smem
/* The emulation runs kernels one after another: an early launch is a plain one (what the kernel
 * does before grid_wait() then simply comes after the kernel before it). */
#define NT_LAUNCH_EARLY(kernel, grid, block, smem, ...)                                                          \
    (emu_launch(#kernel, kernel, dim3(grid), dim3(block), smem, __VA_ARGS__), cudaSuccess)

#endif
