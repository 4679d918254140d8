/* cuda_emu.cc - the runtime of the host emulation of the CUDA backend (cuda_emu.h says what the
 * emulation is): device memory and the registry of its live allocations, the poison, streams,
 * graphs and events, the sticky error and NT_EMU_FAIL's fault injection, the fiber scheduler
 * that runs a launch, the warp collectives, and (release build, NT_EMU_CHECKED) the check of every
 * load and store a kernel makes.
 *
 * Linked into every emulated program. It is compiled without -fsanitize=kernel-address: its own
 * accesses are the emulator's, not a kernel's, and the checks must not check themselves.
 */
#include <algorithm>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <vector>
#include <wchar.h>

#if defined(__SANITIZE_ADDRESS__) && !defined(NT_EMU_CHECKED)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

/* ---- poison ---------------------------------------------------------------------------------- */

/* What memory holds before anything wrote it: the 16-bit word 0x7FFF repeated (bytes FF 7F, by
 * address parity, so every aligned word of a region reads the same whatever its start).
 *  - An aligned f32 read from it (0x7FFF7FFF), f16 or bf16 (0x7FFF) is a NaN: it survives every
 *    product, norm and sum into the output, where the tests see it. (A pattern like 0xA5 reads
 *    as -2.9e-16, small enough to vanish inside a tolerance.)
 *  - An aligned pointer read from it is 0x7FFF7FFF7FFF7FFF, which is not a canonical x86-64
 *    address: using it faults, and the pointer check names it. (0xFF bytes make a NaN too, but
 *    0xFFFFFFFFFFFFFFFF is canonical and p[1] of it is NULL + 3.)
 *  - An int32 read from it is 2147450879: an index or a count read from it is far out of range.
 * No single repeated byte does the first two, hence two. int8 data reads as 127 and -1. */
static inline unsigned char poison_byte(const void *p) { return ((uintptr_t)p & 1) ? 0x7F : 0xFF; }

namespace emu {
/* (wmemset: the C library's widest stores; the shared memory is poisoned before every block) */
void poison(void *p, size_t n) {
    unsigned char *b = (unsigned char *)p, *e = b + n;
    while (b < e && ((uintptr_t)b & 3)) *b = poison_byte(b), b++;
    size_t words = (size_t)(e - b) / 4;
    static_assert(sizeof(wchar_t) == 4, "wmemset stores 4-byte words");
    wmemset((wchar_t *)b, (wchar_t)0x7FFF7FFF, words);
    for (b += 4 * words; b < e; b++) *b = poison_byte(b);
}
} // namespace emu

/* The __shared__ variables of every emulated object, gathered into one section by
 * shared_sections.sh (the linker defines these two around it; weak: a program without any). */
extern "C" char __start_emu_shared[] __attribute__((weak));
extern "C" char __stop_emu_shared[] __attribute__((weak));

namespace {
struct range {
    uintptr_t lo, hi;
};

/* The parts of emu_shared to poison before each block: all of it, except under AddressSanitizer,
 * which pads some of the variables with redzones that must keep their shadow (and that memset
 * would report). Found once. */
std::vector<range> shared_parts;
std::once_flag shared_once;
void find_shared_parts(void) {
    uintptr_t lo = (uintptr_t)__start_emu_shared, hi = (uintptr_t)__stop_emu_shared;
    if (!lo || hi <= lo) return;
#if EMU_ASAN
    while (lo < hi) {
        void *bad = __asan_region_is_poisoned((void *)lo, hi - lo);
        uintptr_t stop = bad ? (uintptr_t)bad : hi;
        if (stop > lo) shared_parts.push_back(range{lo, stop});
        if (!bad) break;
        for (lo = stop; lo < hi && __asan_address_is_poisoned((void *)lo);) lo++;
    }
#else
    shared_parts.push_back(range{lo, hi});
#endif
}
void poison_shared(void) {
    std::call_once(shared_once, find_shared_parts);
    for (const range &r : shared_parts) emu::poison((void *)r.lo, r.hi - r.lo);
}

/* ---- errors and fault injection ------------------------------------------------------------- */

std::atomic<int> sticky; /* cudaErrorIllegalAddress once a launch faulted, for good */
thread_local int last;   /* the thread's last failed call, until cudaGetLastError */
int failed(int e) { return last = e; }

/* NT_EMU_FAIL (cuda_emu.h): which launch and which cudaMalloc fail; 0 none */
long fail_launch, fail_alloc;
std::atomic<long> launches, allocs;
std::once_flag fail_once;
void read_fail(void) {
    const char *v = getenv("NT_EMU_FAIL");
    if (!v || !*v) return;
    long n = 0;
    int used = 0;
    if (sscanf(v, "launch:%ld%n", &n, &used) == 1 && !v[used] && n > 0) fail_launch = n;
    else if (sscanf(v, "alloc:%ld%n", &n, &used) == 1 && !v[used] && n > 0) fail_alloc = n;
    else { /* a typo must not quietly test nothing */
        fprintf(stderr, "cuda_emu: NT_EMU_FAIL=%s: expected launch:N or alloc:N, N >= 1\n", v);
        exit(2);
    }
}
void read_fail_once(void) { std::call_once(fail_once, read_fail); }

/* ---- the registry of live device allocations ------------------------------------------------ */

std::mutex reg_mu;
std::vector<range> live; /* sorted by lo, disjoint */
range freed[256];        /* the last frees, for reports */
unsigned n_freed;

/* the live allocation that starts last at or below address a, or NULL (reg_mu held) */
const range *live_below(uintptr_t a) {
    auto it = std::upper_bound(live.begin(), live.end(), a, [](uintptr_t v, const range &r) { return v < r.lo; });
    return it == live.begin() ? NULL : &*(it - 1);
}
/* the live allocation that holds address a, or NULL (reg_mu held) */
const range *live_at(uintptr_t a) {
    const range *r = live_below(a);
    return r && a < r->hi ? r : NULL;
}

/* A copy or memset with a device side outside every live allocation: the same bug as a kernel's
 * wild access, reported the same way. */
void check_device_range(const char *call, const char *side, const void *p, size_t n) {
    if (!n) return;
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> g(reg_mu);
    const range *r = live_at(a);
    if (r && n <= r->hi - a) return;
    fprintf(stderr, "cuda_emu: %s: %s %p + %zu bytes is not inside a live device allocation\n", call, side, p, n);
    abort();
}
} // namespace

/* ---- the runtime's calls --------------------------------------------------------------------- */

#define STICKY()                                                                                   \
    do {                                                                                           \
        if (int s_ = sticky.load(std::memory_order_relaxed)) return failed(s_);                   \
    } while (0)

/* ---- dynamic shared memory limits (cuda_emu.h) ---- */

namespace {
const int default_dynamic_smem = 48 * 1024, most_dynamic_smem = 227 * 1024;
std::mutex smem_mu;
std::map<const void *, int> smem_optin; /* kernel -> the bytes it opted into */
int smem_limit(const void *kernel) {
    std::lock_guard<std::mutex> g(smem_mu);
    auto it = smem_optin.find(kernel);
    return it == smem_optin.end() ? default_dynamic_smem : it->second;
}
} // namespace

cudaError_t emu::set_dynamic_smem(const void *kernel, int bytes) {
    STICKY();
    if (bytes < 0 || bytes > most_dynamic_smem) return failed(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(smem_mu);
    smem_optin[kernel] = bytes;
    return cudaSuccess;
}
bool emu::dynamic_smem_fits(const void *kernel, size_t bytes) { return bytes <= (size_t)smem_limit(kernel); }
bool emu::launch_smem_ok(const void *kernel, size_t bytes) {
    if (dynamic_smem_fits(kernel, bytes)) return true;
    failed(cudaErrorInvalidValue);
    return false;
}

cudaError_t cudaGetLastError(void) {
    if (int s = sticky.load(std::memory_order_relaxed)) return s;
    int e = last;
    last = cudaSuccess;
    return e;
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorNotReady: return "device not ready (emulated)";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (emulated)";
    default: return "emulated failure";
    }
}
cudaError_t cudaGetDeviceCount(int *n) { return *n = 1, cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "host emulation");
    p->major = 9;
    p->totalGlobalMem = (size_t)1 << 34;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) { return *v = 2, cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    STICKY();
    *free_b = *total = (size_t)1 << 34;
    return cudaSuccess;
}

/* exactly `bytes` (256-aligned): under AddressSanitizer a read past the end is reported, and the
 * pointer checks allow [p, p + bytes) only */
cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = NULL;
    read_fail_once();
    STICKY();
    if (fail_alloc && allocs.fetch_add(1) + 1 == fail_alloc) return failed(cudaErrorMemoryAllocation);
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes ? bytes : 1)) return failed(cudaErrorMemoryAllocation);
    emu::poison(m, bytes);
    {
        std::lock_guard<std::mutex> g(reg_mu);
        range r{(uintptr_t)m, (uintptr_t)m + bytes};
        live.insert(std::upper_bound(live.begin(), live.end(), r.lo,
                                     [](uintptr_t v, const range &x) { return v < x.lo; }),
                    r);
    }
    *p = m;
    return cudaSuccess;
}
/* After a sticky error the memory is released all the same (the context's memory is gone on a
 * GPU too), so a test of that path does not leak. */
cudaError_t cudaFree(void *p) {
    if (p) {
        std::lock_guard<std::mutex> g(reg_mu);
        auto it = std::lower_bound(live.begin(), live.end(), (uintptr_t)p,
                                   [](const range &x, uintptr_t v) { return x.lo < v; });
        if (it == live.end() || it->lo != (uintptr_t)p) {
            fprintf(stderr, "cuda_emu: cudaFree(%p): not a live device allocation (freed twice, or never one)\n", p);
            abort();
        }
        freed[n_freed++ % 256] = *it;
        live.erase(it);
    }
    free(p);
    STICKY();
    return cudaSuccess;
}
static void device_sides(const char *call, void *d, const void *s, size_t n, cudaMemcpyKind k) {
    if (k != cudaMemcpyDeviceToHost) check_device_range(call, "destination", d, n);
    if (k != cudaMemcpyHostToDevice) check_device_range(call, "source", s, n);
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    STICKY();
    device_sides("cudaMemcpy", d, s, n, k);
    memcpy(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    STICKY();
    check_device_range("cudaMemset", "destination", d, n);
    memset(d, v, n);
    return cudaSuccess;
}

namespace emu {
struct program {
    std::vector<std::function<void(void)>> steps;
};
struct event {
    double t;
};
} // namespace emu
namespace {
/* the capture in progress on this host thread, or NULL (cudaStreamCaptureModeThreadLocal: the
 * other threads launch as usual meanwhile) */
thread_local emu::program *capturing;
}

void emu::run_or_record(std::function<void(void)> launch) {
    if (sticky.load(std::memory_order_relaxed)) return;
    if (capturing) capturing->steps.push_back(std::move(launch));
    else launch();
}

/* A captured host-to-device copy reads its source at replay in CUDA too (pageable sources are
 * staged at capture: copy the bytes now, as the staging does). The device sides are checked at
 * capture and again at each replay (a buffer may be freed in between). */
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t) {
    STICKY();
    device_sides("cudaMemcpyAsync", d, s, n, k);
    if (!capturing) return memcpy(d, s, n), cudaSuccess;
    if (k != cudaMemcpyHostToDevice) {
        capturing->steps.push_back([=] {
            if (sticky.load(std::memory_order_relaxed)) return;
            device_sides("cudaMemcpyAsync (graph)", d, s, n, k);
            memcpy(d, s, n);
        });
        return cudaSuccess;
    }
    std::vector<unsigned char> staged((const unsigned char *)s, (const unsigned char *)s + n);
    capturing->steps.push_back([d, staged] {
        if (sticky.load(std::memory_order_relaxed)) return;
        check_device_range("cudaMemcpyAsync (graph)", "destination", d, staged.size());
        memcpy(d, staged.data(), staged.size());
    });
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    STICKY();
    check_device_range("cudaMemsetAsync", "destination", d, n);
    emu::run_or_record([=] {
        if (sticky.load(std::memory_order_relaxed)) return;
        check_device_range("cudaMemsetAsync", "destination", d, n);
        memset(d, v, n);
    });
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) {
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned) {
    STICKY();
    static char side_streams; /* any address other than the default stream's 0 */
    *st = &side_streams;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) {
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    STICKY();
    capturing = new emu::program;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    *g = capturing;
    capturing = NULL;
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = NULL;
    STICKY();
    *e = new emu::program(*g);
    return cudaSuccess;
}
/* A fault inside the replay shows from the next call on, as an asynchronous one does on a GPU. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    STICKY();
    for (auto &f : e->steps) f();
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    STICKY();
    return cudaSuccess;
}
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = NULL;
    STICKY();
    *e = new emu::event{0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    STICKY();
    e->t = now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    STICKY();
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

/* ---- fibers ---------------------------------------------------------------------------------- */

/* Each CUDA thread of a block is a fiber of the calling host thread; a barrier is where a fiber
 * yields until every live thread of its block (or warp) has arrived. One OS thread and
 * cooperative switches: cheap, reproducible, and a deadlock is detected, not hung on.
 *
 * The switch: saves the callee-saved registers on the current stack, stores the stack pointer in
 * *save, continues on stack `load` where the same layout was saved (x86-64 System V; ucontext's
 * swapcontext would also work, but makes a system call per switch). */
extern "C" void emu_switch(void **save, void *load);
__asm__(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
        ".size emu_switch, .-emu_switch\n");

#define EMU_STACK (64 * 1024)

namespace {
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
struct block_state {
    barrier all, warps[64];
    uint64_t xchg[64][32][6]; /* per warp, per lane: what a collective operation exchanges */
    fiber *f;
    unsigned tid;   /* the running thread */
    void *sched;    /* the launch loop's saved stack pointer */
    void *sched_fake;
    const void *sched_bottom; /* the launch loop's stack, as AddressSanitizer reports it */
    size_t sched_size;
};
block_state blk; /* one block runs at a time (blocks run in order; launches do not nest) */
void (*entry)(const void *);
const void *entry_bound;
const char *kernel_name; /* the running kernel, or NULL */

#if defined(NT_EMU_CHECKED)
/* What the pointer checks allow besides the live allocations, while `on` (a kernel's thread runs).
 * Thread-local: host code on other threads is never checked. */
struct check_state {
    bool on;
    uintptr_t stack_lo;            /* the running thread's stack */
    range hot[2];                  /* the two ranges the latest accesses hit, the latest first */
    uintptr_t dyn_lo, dyn_n;       /* the block's dynamic shared memory */
    uintptr_t shared_lo, shared_n; /* emu_shared */
    range cache[8];                /* allocations hit before those */
    unsigned next;
};
thread_local check_state chk;
#endif

uint64_t *slot(unsigned lane) { return blk.xchg[blk.tid >> 5][lane]; }
void release_if_full(barrier &b) {
    if (b.arrived && b.arrived == b.expected) b.arrived = 0, b.phase++;
}
/* a fiber back to the launch loop (dying: its fake stack is released) and back again */
void to_scheduler(fiber &me, bool dying) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? NULL : &me.fake, blk.sched_bottom, blk.sched_size);
#endif
    emu_switch(&me.sp, blk.sched);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(me.fake, NULL, NULL);
#endif
}
/* the launch loop into fiber f */
void to_fiber(fiber &f) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&blk.sched_fake, f.stack, EMU_STACK);
#endif
#if defined(NT_EMU_CHECKED)
    chk.on = true;
    chk.stack_lo = (uintptr_t)f.stack;
#endif
    emu_switch(&blk.sched, f.sp);
#if defined(NT_EMU_CHECKED)
    chk.on = false;
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(blk.sched_fake, &blk.sched_bottom, &blk.sched_size);
#endif
}
void arrive_and_wait(barrier &b) {
    b.arrived++;
    if (b.arrived == b.expected) {
        b.arrived = 0, b.phase++;
        return;
    }
    fiber &me = blk.f[blk.tid];
    me.wait = &b;
    me.phase = b.phase;
    to_scheduler(me, false);
}
void warp_wait(void) { arrive_and_wait(blk.warps[blk.tid >> 5]); }

struct stack_pool { /* fiber stacks, kept for the next launch, released at exit */
    std::vector<char *> v;
    ~stack_pool() {
        for (char *p : v) free(p);
    }
};
stack_pool stacks;

void fiber_main(void) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &blk.sched_bottom, &blk.sched_size);
#endif
    entry(entry_bound);
    /* a returned thread no longer holds the others at a barrier */
    blk.f[blk.tid].done = true;
    blk.all.expected--, release_if_full(blk.all);
    barrier &w = blk.warps[blk.tid >> 5];
    w.expected--, release_if_full(w);
    to_scheduler(blk.f[blk.tid], true); /* never resumed */
}
/* The scheduler's order: a fixed sequence, so a run reproduces. */
uint64_t order_state = 0x853c49e6748fea9bull;
uint64_t order_rng(void) {
    order_state = order_state * 6364136223846793005ull + 1442695040888963407ull;
    return order_state >> 11;
}
/* A fresh fiber's stack as emu_switch leaves a switched-out one: six zero registers, then
 * fiber_main as the return address, placed so fiber_main starts with the alignment of a call. */
void make_fiber(fiber &f, char *stack) {
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
} // namespace

void emu::sync_block(void) { arrive_and_wait(blk.all); }
void emu::sync_warp(void) { warp_wait(); }
const char *emu::running_kernel(void) { return kernel_name ? kernel_name : "(host)"; }

/* Every lane puts v, all meet, each reads lane `from`, all meet again before the slots change. */
uint64_t emu::exchange(uint64_t v, unsigned from) {
    slot(blk.tid & 31)[0] = v;
    warp_wait();
    v = slot(from & 31)[0];
    warp_wait();
    return v;
}
unsigned emu::ballot(int p) {
    slot(blk.tid & 31)[0] = p != 0;
    warp_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < 32; l++) m |= (unsigned)slot(l)[0] << l;
    warp_wait();
    return m;
}
int emu::reduce_add(int v) {
    slot(blk.tid & 31)[0] = (uint64_t)(uint32_t)v;
    warp_wait();
    uint32_t s = 0;
    for (unsigned l = 0; l < 32; l++) s += (uint32_t)slot(l)[0];
    warp_wait();
    return (int)s;
}

/* mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (PTX ISA fragments): lane 4g + t holds A row g
 * k 4t..4t+3 (a[0]), row g+8 k 4t.. (a[1]), row g k 16+4t.. (a[2]), row g+8 k 16+4t.. (a[3]); B
 * column g k 4t.. (b0), k 16+4t.. (b1); C and D (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). */
void emu_mma_m16n8k32_s8(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, const int c[4]) {
    uint64_t *me = slot(blk.tid & 31);
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    for (int i = 0; i < 6; i++) me[i] = mine[i];
    int cin[4] = {c[0], c[1], c[2], c[3]}; /* d may be c */
    warp_wait();
    auto byte = [](uint64_t w, int k) { return (int)(int8_t)(uint8_t)(w >> (8 * (k & 3))); };
    auto A = [&](int row, int k) {
        int g = row & 7, t = (k & 15) >> 2, reg = (row >= 8) + 2 * (k >= 16);
        return byte(slot(4 * g + t)[reg], k);
    };
    auto B = [&](int k, int col) { return byte(slot(4 * col + ((k & 15) >> 2))[4 + (k >= 16)], k); };
    int g = (blk.tid & 31) >> 2, t = blk.tid & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i >> 1), col = 2 * t + (i & 1), s = 0;
        for (int k = 0; k < 32; k++) s += A(row, k) * B(k, col);
        d[i] = (int)((uint32_t)s + (uint32_t)cin[i]); /* the s32 accumulate wraps */
    }
    warp_wait();
}

/* ldmatrix.sync.aligned.m8n8.x4.shared.b16: lane 8i + j gives the address of row j of matrix i (16
 * bytes, 16-byte aligned); lane 4g + t receives bytes 4t..4t+3 of row g of matrix i in r[i]. */
void emu_ldmatrix_x4(uint32_t r[4], const uint8_t *row) {
    if ((uintptr_t)row % 16) {
        fprintf(stderr, "cuda_emu: %s: ldmatrix row address %p not 16-byte aligned\n", emu::running_kernel(),
                (const void *)row);
        abort();
    }
    unsigned lane = blk.tid & 31;
    slot(lane)[0] = (uint64_t)(uintptr_t)row;
    warp_wait();
    for (int i = 0; i < 4; i++) {
        const uint8_t *src = (const uint8_t *)(uintptr_t)slot(8 * i + (lane >> 2))[0];
        memcpy(&r[i], src + 4 * (lane & 3), 4);
    }
    warp_wait();
}

/* ---- launch ---------------------------------------------------------------------------------- */

void emu::run(const char *name, dim3 grid, dim3 block, size_t smem, void (*enter)(const void *), const void *bound) {
    read_fail_once();
    if (sticky.load(std::memory_order_relaxed)) return;
    if (fail_launch && launches.fetch_add(1) + 1 == fail_launch) { /* NT_EMU_FAIL=launch:N */
        sticky.store(cudaErrorIllegalAddress);
        return;
    }
    unsigned nt = block.x * block.y * block.z, nw = (nt + 31) / 32;
    if (nw > 64) {
        fprintf(stderr, "cuda_emu: %s: more than 2048 threads in a block\n", name);
        abort();
    }
    /* exactly smem bytes: under AddressSanitizer an access past them is reported */
    char *dyn = smem ? (char *)malloc(smem) : NULL;
    emu::dyn_smem = dyn;
    gridDim = grid;
    blockDim = block;
    std::vector<fiber> fibers(nt);
    blk.f = fibers.data();
    while (stacks.v.size() < nt) stacks.v.push_back((char *)malloc(EMU_STACK));
    entry = enter;
    entry_bound = bound;
    kernel_name = name;
#if defined(NT_EMU_CHECKED)
    chk.dyn_lo = (uintptr_t)dyn, chk.dyn_n = smem;
    chk.shared_lo = (uintptr_t)__start_emu_shared;
    chk.shared_n = chk.shared_lo ? (uintptr_t)__stop_emu_shared - chk.shared_lo : 0;
    /* an allocation may have been freed since the last launch */
    for (range &r : chk.cache) r = range{0, 0};
    chk.hot[0] = chk.hot[1] = range{0, 0};
#endif
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                /* every block starts from poison, as a GPU block finds whatever its SM's shared
                 * memory last held */
                poison_shared();
                emu::poison(dyn, smem);
                blk.all = barrier{nt, 0, 0};
                for (unsigned w = 0; w < nw; w++) blk.warps[w] = barrier{w + 1 < nw ? 32 : nt - 32 * w, 0, 0};
                for (unsigned i = 0; i < nt; i++) make_fiber(fibers[i], stacks.v[i]);
                blockIdx = dim3(bx, by, bz);
                for (unsigned live_n = nt; live_n;) {
                    bool moved = false;
                    live_n = 0;
                    /* each round runs the threads in another order (a rotation, either way), so
                     * a kernel that reads what another thread wrote without a barrier between
                     * sees it missing in some round instead of by luck of a fixed order */
                    uint64_t pick = order_rng();
                    unsigned rot = (unsigned)(pick % nt);
                    bool down = (pick >> 32) & 1;
                    for (unsigned j = 0; j < nt; j++) {
                        unsigned i = ((down ? nt - 1 - j : j) + rot) % nt;
                        fiber &f = fibers[i];
                        if (f.done) continue;
                        live_n++;
                        if (f.wait && f.wait->phase == f.phase) continue; /* still held */
                        f.wait = NULL;
                        blk.tid = i;
                        threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
                        to_fiber(f);
                        moved = true;
                    }
                    if (live_n && !moved) {
                        fprintf(stderr, "cuda_emu: %s: deadlock: every live thread of block (%u,%u,%u) waits\n", name,
                                bx, by, bz);
                        abort();
                    }
                }
            }
    kernel_name = NULL;
    emu::dyn_smem = NULL;
    free(dyn);
}

/* ---- pointer checks (release build) ---------------------------------------------------------- */

#if defined(NT_EMU_CHECKED)
namespace {
/* [a, a + n) inside [lo, lo + span) (no overflow: a below lo wraps to a huge offset) */
inline bool inside(uintptr_t a, size_t n, uintptr_t lo, uintptr_t span) {
    uintptr_t o = a - lo;
    return o < span && n <= span - o;
}

[[noreturn]] void report(uintptr_t a, size_t n, bool store) {
    /* a hint at what the address is: the most specific first */
    char why[200] = "";
    uintptr_t top = a >> 47;
    if (a < ((uintptr_t)1 << 20)) snprintf(why, sizeof why, " (NULL + 0x%zx)", (size_t)a);
    else if (top != 0 && top != 0x1FFFF)
        snprintf(why, sizeof why, " (not a canonical address: a pointer read from poison, never written?)");
    std::lock_guard<std::mutex> g(reg_mu);
    for (unsigned i = 0; !why[0] && i < 256 && i < n_freed; i++) {
        const range &f = freed[(n_freed - 1 - i) % 256];
        if (a >= f.lo && a < f.hi + (f.hi == f.lo))
            snprintf(why, sizeof why, " (inside the freed device allocation %p of %zu bytes)", (void *)f.lo,
                     (size_t)(f.hi - f.lo));
    }
    const range *r = live_below(a);
    if (!why[0] && r && a < r->hi)
        snprintf(why, sizeof why, " (running past the end of the device allocation %p of %zu bytes)", (void *)r->lo,
                 (size_t)(r->hi - r->lo));
    else if (!why[0] && r && a - r->hi < 4096)
        snprintf(why, sizeof why, " (%zu bytes past the end of the device allocation %p of %zu bytes)",
                 (size_t)(a - r->hi), (void *)r->lo, (size_t)(r->hi - r->lo));
    for (char *s : stacks.v)
        if (!why[0] && inside(a, 1, (uintptr_t)s, EMU_STACK)) snprintf(why, sizeof why, " (another thread's stack)");
    fprintf(stderr,
            "cuda_emu: %s: %zu-byte %s at %p%s: not in a live device allocation, the block's shared memory or "
            "the thread's stack; block (%u,%u,%u), thread (%u,%u,%u)\n",
            emu::running_kernel(), n, store ? "store" : "load", (void *)a, why, blockIdx.x, blockIdx.y, blockIdx.z,
            threadIdx.x, threadIdx.y, threadIdx.z);
    abort();
}

/* Everything but the two latest ranges and the stack; a hit becomes the latest range. */
__attribute__((noinline)) void check_rest(uintptr_t a, size_t n, bool store) {
    range hit{0, 0};
    if (inside(a, n, chk.shared_lo, chk.shared_n)) hit = range{chk.shared_lo, chk.shared_lo + chk.shared_n};
    else if (inside(a, n, chk.dyn_lo, chk.dyn_n)) hit = range{chk.dyn_lo, chk.dyn_lo + chk.dyn_n};
    else {
        for (const range &r : chk.cache)
            if (inside(a, n, r.lo, r.hi - r.lo)) hit = r;
        if (!hit.hi) {
            std::lock_guard<std::mutex> g(reg_mu);
            const range *r = live_at(a);
            if (r && inside(a, n, r->lo, r->hi - r->lo)) hit = chk.cache[chk.next++ % 8] = *r;
        }
    }
    if (hit.hi) {
        chk.hot[1] = chk.hot[0];
        chk.hot[0] = hit;
        return;
    }
    /* the emulator's variables that stand for the hardware's registers */
    for (const dim3 *v : {&threadIdx, &blockIdx, &blockDim, &gridDim})
        if (inside(a, n, (uintptr_t)v, sizeof *v)) return;
    report(a, n, store);
}
/* The cost of the checks is this function's: most accesses return at the first or second test
 * (a kernel's loop reads one or two buffers), the rest at the stack. */
inline void check(uintptr_t a, size_t n, bool store) {
    if (!chk.on) return;
    if (inside(a, n, chk.hot[0].lo, chk.hot[0].hi - chk.hot[0].lo) ||
        inside(a, n, chk.hot[1].lo, chk.hot[1].hi - chk.hot[1].lo) || inside(a, n, chk.stack_lo, EMU_STACK))
        return;
    check_rest(a, n, store);
}
} // namespace

/* What gcc calls for every instrumented access under -fsanitize=kernel-address with
 * asan-instrumentation-with-call-threshold=0 (the _noabort forms: kernel-address recovers by
 * default), and the few other hooks it emits, which have nothing to do here. */
extern "C" {
#define EMU_ACCESS(n)                                                                              \
    void __asan_load##n##_noabort(void *p) { check((uintptr_t)p, n, false); }                      \
    void __asan_store##n##_noabort(void *p) { check((uintptr_t)p, n, true); }
EMU_ACCESS(1)
EMU_ACCESS(2)
EMU_ACCESS(4)
EMU_ACCESS(8)
EMU_ACCESS(16)
void __asan_loadN_noabort(void *p, size_t n) { check((uintptr_t)p, n, false); }
void __asan_storeN_noabort(void *p, size_t n) { check((uintptr_t)p, n, true); }
void __asan_handle_no_return(void) {}
void __asan_before_dynamic_init(const char *) {}
void __asan_after_dynamic_init(void) {}
}
#endif
