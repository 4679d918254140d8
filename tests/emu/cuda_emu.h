/* cuda_emu.h - runs CUDA kernels on the host, so machines without a GPU (CI) execute them.
 *
 * Force-included (g++ -include) ahead of a .cu file compiled as C++20 with NT_CUDA_EMULATION:
 * the CUDA keywords become plain C++, every CUDA thread of a block is a host thread, and the
 * block-wide and warp-wide operations (__syncthreads, __syncwarp, shuffles, ballots, integer
 * reductions, mma.m16n8k32.s8) meet through barriers. Blocks run one after another, so a
 * kernel's __shared__ arrays (function statics here) belong to the running block. Float
 * intrinsics map to the IEEE operation they name (__fmaf_rn: fma), integer SIMD intrinsics to
 * their definitions in the CUDA Math API, and __ldg checks its pointer's alignment: a misaligned
 * vector load, which faults on a GPU, aborts here.
 *
 * Each scheduling round runs the block's threads in another order, so a read of another thread's
 * write that no barrier orders goes wrong in some round. What it cannot show: speed, the memory
 * model between blocks, and whether the hardware's mma fragment layout is the one written below
 * (it is the PTX ISA's, section "Matrix Fragments for mma.m16n8k32"). The GPU checks
 * (tests/gpu/run.sh) remain the word on those.
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
#include <ctime>
#include <functional>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))

/* ---- types and the runtime's few calls -------------------------------------------------- */

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

/* The runtime: device memory is host memory (256-byte aligned, as cudaMalloc's), the stream
 * runs everything at once, and a stream capture records launches and copies as closures that a
 * graph launch replays, in order: what a CUDA graph does, seen from the kernels. */
typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
#define cudaErrorMemoryAllocation 2
#define cudaStreamPerThread ((cudaStream_t)0)
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeThreadLocal = 1 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};
namespace emu {
typedef std::vector<std::function<void(void)>> program;
inline program *capturing; /* the capture in progress, or NULL */
inline void run_or_record(std::function<void(void)> f) {
    if (capturing) capturing->push_back(std::move(f));
    else f();
}
} // namespace emu
typedef emu::program *cudaGraph_t;
typedef emu::program *cudaGraphExec_t;
typedef struct emu_event {
    double t;
} *cudaEvent_t;

static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated failure" : "no error"; }
static inline cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "host emulation");
    p->major = 9;
    p->totalGlobalMem = (size_t)1 << 34;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) { return *v = 2, cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *free_b = *total = (size_t)1 << 34;
    return cudaSuccess;
}
/* exactly `bytes` (256-aligned): under AddressSanitizer a read past the end is reported */
static inline cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (posix_memalign(p, 256, bytes ? bytes : 1)) *p = NULL;
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) { return free(p), cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
    memcpy(d, s, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemset(void *d, int v, size_t n) {
    memset(d, v, n);
    return cudaSuccess;
}
/* A captured host-to-device copy reads its source at replay in CUDA too (pageable sources are
 * staged at capture: copy the bytes now, as the staging does). */
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    if (!emu::capturing) return memcpy(d, s, n), cudaSuccess;
    std::vector<unsigned char> staged((const unsigned char *)s, (const unsigned char *)s + n);
    emu::capturing->push_back([d, staged] { memcpy(d, staged.data(), staged.size()); });
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    emu::run_or_record([=] { memset(d, v, n); });
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    emu::capturing = new emu::program;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    *g = emu::capturing;
    emu::capturing = NULL;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new emu::program(*g);
    return cudaSuccess;
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    for (auto &f : *e) f();
    return cudaSuccess;
}
static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { return delete e, cudaSuccess; }
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g) { return delete g, cudaSuccess; }
static inline double emu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return *e = new emu_event{0}, cudaSuccess; }
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { return delete e, cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { return e->t = emu_now(), cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

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

/* ---- threads of the running block ----------------------------------------------------------- */

/* Each CUDA thread of a block is a fiber of the calling host thread; a barrier is where a fiber
 * yields until every live thread of its block (or warp) has arrived. One OS thread and
 * cooperative switches: cheap, reproducible, and a deadlock is detected, not hung on.
 *
 * The switch: saves the callee-saved registers on the current stack, stores the stack pointer in
 * *save, continues on stack `load` where the same layout was saved (x86-64 System V; ucontext's
 * swapcontext would also work, but makes a system call per switch). Weak: every translation
 * unit that includes this header emits the same bytes. */
extern "C" void emu_switch(void **save, void *load);
__asm__(".text\n.weak emu_switch\n.type emu_switch,@function\nemu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n");

/* AddressSanitizer must be told of every stack switch (or it takes the fibers' frames for
 * overflows of the scheduler's stack). */
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {
struct barrier {
    unsigned expected, arrived;
    uint64_t phase;
};
struct fiber {
    void *sp;      /* its saved stack pointer while switched out */
    char *stack;   /* its stack (EMU_STACK bytes) */
    void *fake;    /* AddressSanitizer's fake stack while switched out */
    barrier *wait; /* the barrier it waits at, or NULL */
    uint64_t phase;
    bool done;
};
struct block {
    barrier all, warps[64];
    uint64_t xchg[64][32][6]; /* per warp, per lane: what a collective operation exchanges */
    fiber *f;
    void *sched; /* the launch loop's saved stack pointer */
    void *sched_fake;
    const void *sched_bottom; /* the launch loop's stack, as AddressSanitizer reports it */
    size_t sched_size;
};
inline block *cur;
inline unsigned tid;
inline uint64_t *slot(unsigned lane) { return cur->xchg[tid >> 5][lane]; }
inline void release_if_full(barrier &b) {
    if (b.arrived && b.arrived == b.expected) b.arrived = 0, b.phase++;
}
inline void to_scheduler(fiber &me, bool dying);
inline void arrive_and_wait(barrier &b) {
    b.arrived++;
    if (b.arrived == b.expected) {
        b.arrived = 0, b.phase++;
        return;
    }
    fiber &me = cur->f[tid];
    me.wait = &b;
    me.phase = b.phase;
    to_scheduler(me, false);
}
inline void warp_wait() { arrive_and_wait(cur->warps[tid >> 5]); }
#define EMU_STACK (64 * 1024)
/* a fiber back to the launch loop (dying: its fake stack is released) and back again */
inline void to_scheduler(fiber &me, bool dying) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? NULL : &me.fake, cur->sched_bottom, cur->sched_size);
#endif
    emu_switch(&me.sp, cur->sched);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(me.fake, NULL, NULL);
#endif
}
/* the launch loop into fiber f */
inline void to_fiber(fiber &f) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&cur->sched_fake, f.stack, EMU_STACK);
#endif
    emu_switch(&cur->sched, f.sp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(cur->sched_fake, &cur->sched_bottom, &cur->sched_size);
#endif
}
} // namespace emu

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

static inline void __syncthreads(void) { emu::arrive_and_wait(emu::cur->all); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_wait(); }

/* Every lane puts v, all meet, each reads lane `from`, all meet again before the slots change. */
template <class T> static inline T emu_exchange(T v, unsigned from) {
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    emu::slot(emu::tid & 31)[0] = b;
    emu::warp_wait();
    b = emu::slot(from & 31)[0];
    emu::warp_wait();
    T r;
    memcpy(&r, &b, sizeof r);
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_exchange(v, (emu::tid & 31) ^ o); }
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned o) {
    unsigned l = emu::tid & 31;
    return emu_exchange(v, l + o < 32 ? l + o : l);
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_exchange(v, (unsigned)src); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned o) {
    unsigned l = emu::tid & 31;
    return emu_exchange(v, l >= o ? l - o : l);
}
static inline unsigned __ballot_sync(unsigned, int p) {
    emu::slot(emu::tid & 31)[0] = p != 0;
    emu::warp_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; l++) m |= (unsigned)emu::slot(l)[0] << l;
    emu::warp_wait();
    return m;
}
static inline int __reduce_add_sync(unsigned, int v) {
    emu::slot(emu::tid & 31)[0] = (uint64_t)(uint32_t)v;
    emu::warp_wait();
    uint32_t s = 0;
    for (unsigned l = 0; l < 32; l++) s += (uint32_t)emu::slot(l)[0];
    emu::warp_wait();
    return (int)s;
}

/* mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 with a zero accumulator (PTX ISA fragments):
 * lane 4g + t holds A row g k 4t..4t+3 (a0), row g+8 k 4t.. (a1), row g k 16+4t.. (a2),
 * row g+8 k 16+4t.. (a3); B column g k 4t.. (b0), k 16+4t.. (b1); D (g, 2t), (g, 2t+1),
 * (g+8, 2t), (g+8, 2t+1). */
static inline void emu_mma_m16n8k32_s8(int d[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    uint64_t *me = emu::slot(emu::tid & 31);
    int mine[6] = {a0, a1, a2, a3, b0, b1};
    for (int i = 0; i < 6; i++) me[i] = (uint64_t)(uint32_t)mine[i];
    emu::warp_wait();
    auto byte = [](uint64_t w, int k) { return (int)(int8_t)(uint8_t)(w >> (8 * (k & 3))); };
    auto A = [&](int row, int k) {
        int g = row & 7, t = (k & 15) >> 2, reg = (row >= 8) + 2 * (k >= 16);
        return byte(emu::slot(4 * g + t)[reg], k);
    };
    auto B = [&](int k, int col) { return byte(emu::slot(4 * col + ((k & 15) >> 2))[4 + (k >= 16)], k); };
    int g = (emu::tid & 31) >> 2, t = emu::tid & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1), s = 0;
        for (int k = 0; k < 32; k++) s += A(row, k) * B(k, col);
        d[i] = s;
    }
    emu::warp_wait();
}

/* ---- intrinsics ------------------------------------------------------------------------------ */

template <class T> static inline T __ldg(const T *p) {
    if ((uintptr_t)p % sizeof(T)) {
        fprintf(stderr, "cuda_emu: misaligned %zu-byte load at %p\n", sizeof(T), (const void *)p);
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

/* ---- launch --------------------------------------------------------------------------------- */

namespace emu {
struct stack_pool { /* fiber stacks, kept for the next launch, released at exit */
    std::vector<char *> v;
    ~stack_pool() {
        for (char *p : v) free(p);
    }
};
inline stack_pool stacks;
inline void (*entry)(void); /* the running kernel with its arguments bound */
inline void *dyn_smem;       /* the running block's dynamic shared memory */
inline void fiber_main(void) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &cur->sched_bottom, &cur->sched_size);
#endif
    entry();
    /* a returned thread no longer holds the others at a barrier */
    block *b = cur;
    b->f[tid].done = true;
    b->all.expected--, release_if_full(b->all);
    barrier &w = b->warps[tid >> 5];
    w.expected--, release_if_full(w);
    to_scheduler(b->f[tid], true); /* never resumed */
}
/* The scheduler's order: a fixed sequence, so a run reproduces. */
inline uint64_t order_state = 0x853c49e6748fea9bull;
inline uint64_t order_rng() {
    order_state = order_state * 6364136223846793005ull + 1442695040888963407ull;
    return order_state >> 11;
}
/* A fresh fiber's stack as emu_switch leaves a switched-out one: six zero registers, then
 * fiber_main as the return address, placed so fiber_main starts with the alignment of a call. */
inline void make_fiber(fiber &f, char *stack) {
    f.wait = NULL;
    f.done = false;
    f.stack = stack;
    f.fake = NULL;
    uintptr_t *sp = (uintptr_t *)((uintptr_t)(stack + EMU_STACK) & ~(uintptr_t)15);
    *--sp = 0;
    *--sp = (uintptr_t)fiber_main;
    for (int i = 0; i < 6; i++) *--sp = 0;
    f.sp = sp;
}
} // namespace emu

/* Runs kernel k over grid x block, blocks in order, a fiber per CUDA thread; smem bytes of
 * dynamic shared memory (NT_DYNAMIC_SHARED). Under a capture the launch is recorded instead. */
template <class... P, class... A> static void emu_run(void (*k)(P...), dim3 grid, dim3 block, size_t smem, A... args) {
    static std::vector<char> dyn;
    if (dyn.size() < smem) dyn.resize(smem);
    emu::dyn_smem = dyn.data();
    unsigned nt = block.x * block.y * block.z, nw = (nt + 31) / 32;
    if (nw > 64) {
        fprintf(stderr, "cuda_emu: more than 2048 threads in a block\n");
        abort();
    }
    gridDim = grid;
    blockDim = block;
    static emu::block b; /* large (the exchange slots): one, reused by every block in turn */
    std::vector<emu::fiber> fibers(nt);
    b.f = fibers.data();
    while (emu::stacks.v.size() < nt) emu::stacks.v.push_back((char *)malloc(EMU_STACK));
    auto run = [&] { k(args...); };
    static thread_local decltype(&run) bound;
    bound = &run;
    emu::entry = [] { (*bound)(); };
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                b.all = emu::barrier{nt, 0, 0};
                for (unsigned w = 0; w < nw; w++) b.warps[w] = emu::barrier{w + 1 < nw ? 32 : nt - 32 * w, 0, 0};
                emu::cur = &b;
                for (unsigned i = 0; i < nt; i++) emu::make_fiber(fibers[i], emu::stacks.v[i]);
                for (unsigned live = nt; live;) {
                    bool moved = false;
                    live = 0;
                    /* each round runs the threads in another order (a rotation, either way), so
                     * a kernel that reads what another thread wrote without a barrier between
                     * sees it missing in some round instead of by luck of a fixed order */
                    uint64_t pick = emu::order_rng();
                    unsigned rot = (unsigned)(pick % nt);
                    bool down = (pick >> 32) & 1;
                    for (unsigned j = 0; j < nt; j++) {
                        unsigned i = ((down ? nt - 1 - j : j) + rot) % nt;
                        emu::fiber &f = fibers[i];
                        if (f.done) continue;
                        live++;
                        if (f.wait && f.wait->phase == f.phase) continue; /* still held */
                        f.wait = NULL;
                        emu::tid = i;
                        threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
                        blockIdx = dim3(bx, by, bz);
                        emu::to_fiber(f);
                        moved = true;
                    }
                    if (live && !moved) {
                        fprintf(stderr, "cuda_emu: deadlock: every live thread of block (%u,%u,%u) waits\n", bx, by, bz);
                        abort();
                    }
                }
            }
}

/* (the arguments take the kernel's parameter types at the call, as in a <<< >>> launch) */
template <class... P>
static void emu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, std::type_identity_t<P>... args) {
    emu::run_or_record([=] { emu_run(k, grid, block, smem, args...); });
}

#define NT_LAUNCH(kernel, grid, block, ...) emu_launch(kernel, dim3(grid), dim3(block), 0, __VA_ARGS__)
#define NT_LAUNCH_SMEM(kernel, grid, block, smem, ...) emu_launch(kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)
#define NT_DYNAMIC_SHARED(type, name) type *name = (type *)emu::dyn_smem

#endif
