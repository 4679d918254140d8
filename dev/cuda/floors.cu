/* floors.cu - what this GPU can do at best, measured by small kernels of its own: the floors
 * docs/PERF.md holds each operation of a pass against (issue 13's account of every microsecond).
 *
 *   build/bin/gpu_floors [--quick]      (--quick: fewer sizes and replays, to check the program)
 *
 * 1. Streaming reads. One kernel reads B bytes once (every SM's blocks, 16-byte loads, four in
 *    flight a thread); the captured graph runs it R times, each on another slice of a ring of
 *    buffers over 8 GB, so the 50 MB L2 holds none of a slice when it is read. The time a launch
 *    (median of the graph's replays, CUDA events) is the floor of an operation that must read B
 *    bytes from HBM, launch included. B: 1 MB .. 1 GB and the sizes of Nano's matrices.
 * 2. The gap between dependent kernels: a graph of K kernels of one warp that do nothing, in one
 *    stream, (t(K) - t(1)) / (K - 1): plain launches, and with programmatic dependent launch (the
 *    attribute the backend launches with, each kernel waiting on the one before it).
 * 3. Arithmetic from registers, no memory: int8 mma.sync m16n8k32 (k_mma's instruction), bf16
 *    mma.sync m16n8k16, f32 fma and dp4a, each with independent chains enough to hide latency, at
 *    SMs x 4 blocks of 8 warps: operations a second (a multiply-add counts two).
 *
 * A developer's measurement, not part of the engine: dev/cuda/README.md. Built where nvcc and the
 * CUDA runtime are (`make build/bin/gpu_floors`, and gpu-test); CI compiles it.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gpu_floors: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cudaStream_t stream;
static int sms;

/* Median seconds of one replay of `graph` over `reps` replays (after one untimed). */
static double replay_seconds(cudaGraphExec_t graph, int reps) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaGraphLaunch(graph, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CHECK(cudaEventRecord(a, stream));
        CHECK(cudaGraphLaunch(graph, stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e-3);
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* Captures what `launch` puts on the stream into an executable graph. */
template <class F> static cudaGraphExec_t capture(F launch) {
    cudaGraph_t g;
    cudaGraphExec_t x;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    launch();
    CHECK(cudaStreamEndCapture(stream, &g));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphDestroy(g));
    return x;
}

/* ---- 1. streaming reads ------------------------------------------------------------------- */

#define STREAM_THREADS 512
#define STREAM_BLOCKS_PER_SM 4

/* Reads n 16-byte words, four loads in flight a thread; writes only if the xor of all is a
 * value `never` says it is not (so the loads cannot be dropped, and nothing is written). */
__global__ void __launch_bounds__(STREAM_THREADS) k_stream(const uint4 *p, size_t n, unsigned never, unsigned *sink) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    unsigned x = 0;
    for (; i + 3 * step < n; i += 4 * step) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + step), c = __ldcs(p + i + 2 * step), d = __ldcs(p + i + 3 * step);
        x ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += step) {
        uint4 a = __ldcs(p + i);
        x ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (x == never) *sink = x;
}

static void streaming(bool quick, unsigned *sink) {
    const size_t ring = (quick ? (size_t)1 : (size_t)8) << 30;
    uint8_t *buf;
    CHECK(cudaMalloc(&buf, ring));
    CHECK(cudaMemset(buf, 1, ring));
    static const double mb[] = {1, 1.4, 4, 10.0, 11.0, 15.6, 27.7, 31.2, 33, 64, 128, 352.6, 666.2, 1024};
    printf("%-34s %10s %10s %10s\n", "streaming read (one kernel)", "MB", "us", "GB/s");
    for (size_t s = 0; s < sizeof mb / sizeof mb[0]; s++) {
        size_t bytes = (size_t)(mb[s] * 1e6) / 16 * 16;
        if (bytes > ring / 2) continue;
        /* R launches on R distinct slices, together far more than L2 (512 MB, or what the ring
         * holds): a replay finds none of its slices still cached from the one before */
        size_t fit = ring / (bytes + 4096) - 1, want = ((size_t)512 << 20) / bytes + 1;
        int R = (int)std::max<size_t>(1, std::min<size_t>({fit, std::max<size_t>(want, 8), 512}));
        cudaGraphExec_t g = capture([&] {
            for (int r = 0; r < R; r++) {
                size_t at = (size_t)r * (bytes + 4096);
                k_stream<<<sms * STREAM_BLOCKS_PER_SM, STREAM_THREADS, 0, stream>>>((const uint4 *)(buf + at), bytes / 16,
                                                                                   0x9E3779B9u, sink);
            }
        });
        /* replays: 15, fewer where a replay reads tens of GB (the median needs only a few) */
        int reps = quick ? 3 : (int)std::max<double>(3, std::min<double>(15, 20e9 / ((double)R * bytes)));
        double t = replay_seconds(g, reps) / R;
        printf("%-34s %10.1f %10.2f %10.1f\n", "stream", bytes / 1e6, t * 1e6, bytes / t / 1e9);
        CHECK(cudaGraphExecDestroy(g));
    }
    CHECK(cudaFree(buf));
}

/* ---- 2. the gap between dependent kernels ------------------------------------------------- */

template <bool PDL> __global__ void k_empty(void) {
    if (PDL) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;\n" ::);
    }
}

template <bool PDL> static void launch_empty(void) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = PDL;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, k_empty<PDL>));
}

template <bool PDL> static double gap_seconds(bool quick) {
    const int K = quick ? 20 : 400;
    cudaGraphExec_t one = capture([] { launch_empty<PDL>(); });
    cudaGraphExec_t many = capture([&] {
        for (int i = 0; i < K; i++) launch_empty<PDL>();
    });
    double t1 = replay_seconds(one, quick ? 3 : 21), tk = replay_seconds(many, quick ? 3 : 21);
    CHECK(cudaGraphExecDestroy(one));
    CHECK(cudaGraphExecDestroy(many));
    return (tk - t1) / (K - 1);
}

/* ---- 3. arithmetic from registers ------------------------------------------------------------ */

#define ARITH_WARPS 8
#define ARITH_BLOCKS_PER_SM 4
#define CHAINS 8 /* independent accumulators a thread: enough to cover each unit's latency */

__global__ void __launch_bounds__(ARITH_WARPS * 32) k_mma_s8(int iters, int seed, int *sink) {
    int a0 = seed ^ threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 * 11, b1 = a0 * 13;
    int c[CHAINS][4] = {};
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int j = 0; j < CHAINS; j++)
            asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};\n"
                         : "+r"(c[j][0]), "+r"(c[j][1]), "+r"(c[j][2]), "+r"(c[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    int x = 0;
#pragma unroll
    for (int j = 0; j < CHAINS; j++) x ^= c[j][0] ^ c[j][1] ^ c[j][2] ^ c[j][3];
    if (x == 0x7fffffff) *sink = x;
}

__global__ void __launch_bounds__(ARITH_WARPS * 32) k_mma_bf16(int iters, int seed, int *sink) {
    unsigned a0 = 0x3f803f80u ^ (unsigned)(seed & 0xff), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0;
    float c[CHAINS][4] = {};
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int j = 0; j < CHAINS; j++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};\n"
                         : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    float x = 0;
#pragma unroll
    for (int j = 0; j < CHAINS; j++) x += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (x == -1.0f) *sink = 1;
}

__global__ void __launch_bounds__(ARITH_WARPS * 32) k_ffma(int iters, int seed, int *sink) {
    float m = 1.0f + 1e-7f * (float)(seed & 7), c[CHAINS];
#pragma unroll
    for (int j = 0; j < CHAINS; j++) c[j] = (float)(threadIdx.x + j);
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int j = 0; j < CHAINS; j++) c[j] = __fmaf_rn(c[j], m, 0.5f);
    float x = 0;
#pragma unroll
    for (int j = 0; j < CHAINS; j++) x += c[j];
    if (x == -1.0f) *sink = 1;
}

__global__ void __launch_bounds__(ARITH_WARPS * 32) k_dp4a(int iters, int seed, int *sink) {
    int a = seed ^ (int)threadIdx.x, b = a * 7, c[CHAINS];
#pragma unroll
    for (int j = 0; j < CHAINS; j++) c[j] = j;
    for (int it = 0; it < iters; it++)
#pragma unroll
        for (int j = 0; j < CHAINS; j++) c[j] = __dp4a(a, b, c[j]);
    int x = 0;
#pragma unroll
    for (int j = 0; j < CHAINS; j++) x ^= c[j];
    if (x == 0x7fffffff) *sink = x;
}

/* Ops a second of kernel k, `ops_per_thread_iter` operations a thread an iteration. */
static double arith_rate(void (*k)(int, int, int *), double ops_per_thread_iter, bool quick, int *sink) {
    const int iters = quick ? 64 : 4096;
    unsigned grid = (unsigned)(sms * ARITH_BLOCKS_PER_SM);
    cudaGraphExec_t g = capture([&] { k<<<grid, ARITH_WARPS * 32, 0, stream>>>(iters, 12345, sink); });
    double t = replay_seconds(g, quick ? 3 : 11);
    CHECK(cudaGraphExecDestroy(g));
    return (double)grid * ARITH_WARPS * 32 * iters * ops_per_thread_iter / t;
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (argc > 1 && !quick) {
        fprintf(stderr, "usage: gpu_floors [--quick]\n");
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop;
    CHECK(cudaSetDevice(dev));
    CHECK(cudaGetDeviceProperties(&prop, dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    printf("gpu_floors on %s: %d SMs, %.0f MHz max, L2 %.0f MB%s\n", prop.name, sms, clock_khz / 1e3,
           prop.l2CacheSize / 1e6, quick ? " (quick)" : "");
    unsigned *sink;
    CHECK(cudaMalloc(&sink, 64));

    streaming(quick, sink);

    printf("%-34s %10.3f us\n", "launch gap, plain", gap_seconds<false>(quick) * 1e6);
    printf("%-34s %10.3f us\n", "launch gap, programmatic (PDL)", gap_seconds<true>(quick) * 1e6);

    /* per thread an iteration: CHAINS instructions; an m16n8k32 is 16 x 8 x 32 multiply-adds a warp */
    double warp_mma = (double)CHAINS / 32;
    printf("%-34s %10.1f Tops/s\n", "int8 mma.sync m16n8k32",
           arith_rate(k_mma_s8, warp_mma * 2 * 16 * 8 * 32, quick, (int *)sink) / 1e12);
    printf("%-34s %10.1f Tflop/s\n", "bf16 mma.sync m16n8k16",
           arith_rate(k_mma_bf16, warp_mma * 2 * 16 * 8 * 16, quick, (int *)sink) / 1e12);
    printf("%-34s %10.1f Tflop/s\n", "f32 fma", arith_rate(k_ffma, 2.0 * CHAINS, quick, (int *)sink) / 1e12);
    printf("%-34s %10.1f Tops/s\n", "dp4a (4 int8 multiply-adds)", arith_rate(k_dp4a, 8.0 * CHAINS, quick, (int *)sink) / 1e12);
    printf("%-34s %10.1f G/s\n", "f32 fma instructions, a warp's",
           arith_rate(k_ffma, (double)CHAINS / 32, quick, (int *)sink) / 1e9);
    CHECK(cudaFree(sink));
    return 0;
}
