/* int8_dot_peak.c - this machine's int8 dot-product rate: what the packed products' integer block
 * sums (src/cpu/matmul_q.c) can reach per core, by instruction set, with no memory traffic.
 *
 * Each test runs 12 independent accumulator chains per thread (more than latency x pipes needs,
 * so the pipes never wait), the instructions in inline assembly so the compiler can neither
 * merge the chains nor hoist the loop-invariant products:
 *   avx2        vpmaddubsw + vpmaddwd (by 1) + vpaddd: 32 int8 multiply-adds, what AVX2 needs
 *               without a dot-product instruction (the q4tp step; q8_2f's is 2 x vpmaddwd);
 *   avxvnni     {vex} vpdpbusd ymm: 32 multiply-adds in one instruction;
 *   avx512vnni  vpdpbusd ymm (EVEX) and zmm (64 multiply-adds);
 *   fma         vfmadd231ps ymm and zmm, for scale: the f32 rate the step's float chain shares pipes
 *               with;
 *   avx512bf16  vdpbf16ps zmm: 32 bf16 multiply-adds, bf16 weights' products at that level
 *               (src/cpu/matmul_bf16.c); and that kernel's tile of 4 rows x 6 positions with its
 *               loads (4 weight and 6 activation vectors a block of 32 columns for 24
 *               vdpbf16ps), over 16 blocks that stay in L1: what the tile reaches when the
 *               caches keep up;
 *   amx         tdpbssd with K = 64 (the tile unit's peak) and K = 4 (what the arithmetic's 4-column
 *               lanes allow), and K = 4 with each result stored and folded into f32 chains as
 *               src/cpu/matmul_q_amx.h does (needs the OS's permission: nt_cpu_isa_available).
 * A test whose instructions this processor lacks is reported as skipped. Rates are int8 (or f32)
 * multiply-adds per second, every lane counted, for 1 and 2..THREADS threads.
 * build: make build/dev/int8_dot_peak    run: build/dev/int8_dot_peak [THREADS] [SECONDS_PER_TEST]
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The 12 chains of one test: OP(a[i]) is one step of chain i. */
#define CHAINS(OP)                                                                                 \
    do {                                                                                           \
        OP(a0); OP(a1); OP(a2); OP(a3); OP(a4); OP(a5);                                            \
        OP(a6); OP(a7); OP(a8); OP(a9); OP(a10); OP(a11);                                          \
    } while (0)

#define DECL256(T, init)                                                                           \
    T a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init,      \
      a8 = init, a9 = init, a10 = init, a11 = init
#define SUM(add) add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))), add(add(a8, a9), add(a10, a11)))

__attribute__((target("avx2"))) static double run_avx2(long steps) {
    __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    DECL256(__m256i, _mm256_setzero_si256());
#define OP(a) __asm__ volatile("vpmaddubsw %2, %1, %%ymm15\n\tvpmaddwd %3, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %0, %0" \
                               : "+x"(a) : "x"(w), "x"(x), "x"(one) : "xmm15")
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm256_extract_epi32(SUM(_mm256_add_epi32), 0);
}

__attribute__((target("avx2,avxvnni"))) static double run_avxvnni(long steps) {
    __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
    DECL256(__m256i, _mm256_setzero_si256());
#define OP(a) __asm__ volatile("%{vex%} vpdpbusd %2, %1, %0" : "+x"(a) : "x"(w), "x"(x))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm256_extract_epi32(SUM(_mm256_add_epi32), 0);
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static double run_vnni256(long steps) {
    __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-2);
    DECL256(__m256i, _mm256_setzero_si256());
#define OP(a) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(w), "v"(x))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm256_extract_epi32(SUM(_mm256_add_epi32), 0);
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static double run_vnni512(long steps) {
    __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
    DECL256(__m512i, _mm512_setzero_si512());
#define OP(a) __asm__ volatile("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(w), "v"(x))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm512_reduce_add_epi32(SUM(_mm512_add_epi32));
}

__attribute__((target("avx2,fma"))) static double run_fma256(long steps) {
    __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
    DECL256(__m256, _mm256_set1_ps(0.5f));
#define OP(a) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+x"(a) : "x"(b), "x"(c))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm256_cvtss_f32(SUM(_mm256_add_ps));
}

__attribute__((target("avx2,fma,avx512f"))) static double run_fma512(long steps) {
    __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);
    DECL256(__m512, _mm512_set1_ps(0.5f));
#define OP(a) __asm__ volatile("vfmadd231ps %2, %1, %0" : "+v"(a) : "v"(b), "v"(c))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm512_reduce_add_ps(SUM(_mm512_add_ps));
}

__attribute__((target("avx2,avx512f,avx512bf16"))) static double run_bf16(long steps) {
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3800); /* 1, 2^-15 */
    DECL256(__m512, _mm512_set1_ps(0.5f));
#define OP(a) __asm__ volatile("vdpbf16ps %2, %1, %0" : "+v"(a) : "v"(b), "v"(c))
    for (long k = 0; k < steps; k++) CHAINS(OP);
#undef OP
    return (double)_mm512_reduce_add_ps(SUM(_mm512_add_ps));
}

/* matmul_bf16.c's tile of 4 rows x 6 positions, one block of 32 columns a step (24 vdpbf16ps =
 * 12 x 64 multiply-adds), over 16 blocks of L1-resident weights and activations. */
__attribute__((target("avx2,avx512f,avx512bw,avx512bf16"))) static double run_bf16_tile(long steps) {
    enum { R = 4, P = 6, NB = 16 };
    static _Alignas(64) uint16_t w[R][NB * 32], x[P][NB * 32];
    for (int i = 0; i < NB * 32; i++) {
        for (int j = 0; j < R; j++) w[j][i] = 0x3f80;  /* 1 */
        for (int p = 0; p < P; p++) x[p][i] = 0x3000;  /* 2^-31 */
    }
    __m512 acc[R][P];
    for (int j = 0; j < R; j++)
        for (int p = 0; p < P; p++) acc[j][p] = _mm512_setzero_ps();
    for (long k = 0; k < steps; k++) {
        int b = (int)(k % NB);
        __m512bh wv[R];
#pragma GCC unroll 4
        for (int j = 0; j < R; j++) wv[j] = (__m512bh)_mm512_load_si512((const void *)&w[j][32 * b]);
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            __m512bh xv = (__m512bh)_mm512_load_si512((const void *)&x[p][32 * b]);
#pragma GCC unroll 4
            for (int j = 0; j < R; j++) acc[j][p] = _mm512_dpbf16_ps(acc[j][p], wv[j], xv);
        }
    }
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < R; j++)
        for (int p = 0; p < P; p++) sum = _mm512_add_ps(sum, acc[j][p]);
    return (double)_mm512_reduce_add_ps(sum);
}

/* AMX (tdpbssd: C[16][16] int32 += A[16][K] int8 . B[K/4][64] int8, in groups of 4 bytes). The
 * packed products' arithmetic sums 4 columns per lane (matmul_q.c), so their tile products run
 * with K = 4 (src/cpu/matmul_q_amx.h); the tile unit takes as long per instruction as with K = 64.
 * Tiles: 4 C in flight (tmm0-3), A in tmm4-5, B in tmm6-7; each step is 12 instructions. "step"
 * adds what the kernel does with each C tile: store it (tilestored, 1 KB) and fold its 16 rows
 * into 16 f32 chains (a load, vsubps and vfmadd231ps each). The tile configuration is per thread. */
#define AMXT __attribute__((target("avx2,fma,avx512f,amx-tile,amx-int8")))
static AMXT void amx_config(int k) {
    _Alignas(64) uint8_t cfg[64] = {0};
    cfg[0] = 1;
    for (int t = 0; t < 8; t++) {
        uint16_t colsb = t < 4 ? 64 : t < 6 ? (uint16_t)k : 64;
        memcpy(cfg + 16 + 2 * t, &colsb, 2);
        cfg[48 + t] = t < 4 ? 16 : t < 6 ? 16 : (uint8_t)(k / 4);
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(*(const uint8_t(*)[64])cfg));
}
#define AMX_4(a0, b0)                                                                              \
    do {                                                                                           \
        _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 5, 7); _tile_dpbssd(2, 4, 7); _tile_dpbssd(3, 5, 6); \
    } while (0)
static AMXT double run_amx(long steps, int k, int fold) {
    static _Alignas(64) int8_t src[64 * 64];
    _Alignas(64) int32_t c[4][16][16];
    amx_config(k);
    _tile_loadd(4, src, 64);
    _tile_loadd(5, src, 64);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    __m512 acc[16], one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (long s = 0; s < 3 * steps; s++) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        AMX_4(0, 0);
        if (fold) {
#define FOLD(T)                                                                                     \
    do {                                                                                            \
        _tile_stored(T, c[T], 64);                                                                  \
        for (int i = 0; i < 16; i++)                                                                \
            acc[i] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_load_ps((const float *)c[T][i]), one), one, acc[i]); \
    } while (0)
            FOLD(0); FOLD(1); FOLD(2); FOLD(3);
#undef FOLD
        }
    }
    _tile_stored(0, c[0], 64);
    _tile_release();
    for (int i = 1; i < 16; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]);
    return (double)c[0][0][0] + (double)_mm512_reduce_add_ps(acc[0]);
}
static double run_amx64(long steps) { return run_amx(steps, 64, 0); }
static double run_amx4(long steps) { return run_amx(steps, 4, 0); }
static double run_amx4_step(long steps) { return run_amx(steps, 4, 1); }

static const struct test {
    const char *name, *what;
    int isa;      /* the variant whose instructions it needs (cpu.h) */
    int need512;  /* 1: AVX-512 F (for the fma zmm test) */
    int lanes;    /* multiply-adds per chain step */
    double (*run)(long);
} tests[] = {
    {"avx2", "vpmaddubsw+vpmaddwd+vpaddd ymm", NT_CPU_AVX2, 0, 32, run_avx2},
    {"avxvnni", "{vex} vpdpbusd ymm", NT_CPU_AVXVNNI, 0, 32, run_avxvnni},
    {"avx512vnni", "vpdpbusd ymm (EVEX)", NT_CPU_AVX512VNNI, 0, 32, run_vnni256},
    {"avx512vnni", "vpdpbusd zmm", NT_CPU_AVX512VNNI, 0, 64, run_vnni512},
    {"fma", "vfmadd231ps ymm (f32)", NT_CPU_AVX2, 0, 8, run_fma256},
    {"fma", "vfmadd231ps zmm (f32)", NT_CPU_AVX512VNNI, 1, 16, run_fma512},
    {"avx512bf16", "vdpbf16ps zmm (bf16 pairs, f32)", NT_CPU_AVX512BF16, 0, 32, run_bf16},
    {"avx512bf16", "4x6 tile + loads, in L1", NT_CPU_AVX512BF16, 0, 64, run_bf16_tile},
    {"amx", "tdpbssd K=64 (16x16x64)", NT_CPU_AMX, 0, 16 * 16 * 64, run_amx64},
    {"amx", "tdpbssd K=4 (one 4-column lane)", NT_CPU_AMX, 0, 16 * 16 * 4, run_amx4},
    {"amx", "K=4 + tilestored + fold (step)", NT_CPU_AMX, 0, 16 * 16 * 4, run_amx4_step},
};

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : omp_get_num_procs();
    double secs = argc > 2 ? atof(argv[2]) : 0.5;
    if (max_threads < 1 || !(secs > 0)) {
        fprintf(stderr, "usage: int8_dot_peak [THREADS >= 1] [SECONDS_PER_TEST > 0]\n");
        return 2;
    }
    printf("12 chains per thread, best of 3 runs of ~%.2f s; G multiply-adds/s (every lane)\n", secs);
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const struct test *t = &tests[i];
        if (!nt_cpu_isa_available(t->isa)) {
            printf("%-11s %-32s skipped: this processor lacks the instructions\n", t->name, t->what);
            continue;
        }
        /* calibrate: steps for ~secs on one thread */
        long steps = 1000000;
        double t0 = now();
        volatile double sink = t->run(steps);
        double dt = now() - t0;
        steps = (long)((double)steps * secs / (dt > 1e-6 ? dt : 1e-6));
        if (steps < 1000) steps = 1000;
        printf("%-11s %-32s", t->name, t->what);
        for (int th = 1; th <= max_threads; th++) {
            double best = 0;
            for (int rep = 0; rep < 3; rep++) {
                double s0 = now();
#pragma omp parallel num_threads(th)
                sink = t->run(steps);
                double rate = (double)steps * 12.0 * t->lanes * th / (now() - s0);
                if (rate > best) best = rate;
            }
            printf("  %d thr %7.1f", th, best * 1e-9);
        }
        (void)sink;
        printf("\n");
    }
    return 0;
}
