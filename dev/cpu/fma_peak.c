/* fma_peak.c - this machine's multiply-add ceiling: 12 independent AVX2 FMA chains per thread,
 * no memory traffic, for 1 and 2..THREADS threads. docs/PERF.md holds products against it.
 * build: make build/dev/fma_peak    run: build/dev/fma_peak [THREADS]
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 12 chains: more than FMA latency (4) x FMA pipes (2) needs, so the pipes never wait */
__attribute__((target("avx2,fma"))) static float chains(long steps) {
    __m256 a[12], b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(0.001f * (float)i);
    for (long k = 0; k < steps; k++) {
        a[0] = _mm256_fmadd_ps(a[0], b, c); a[1] = _mm256_fmadd_ps(a[1], b, c);
        a[2] = _mm256_fmadd_ps(a[2], b, c); a[3] = _mm256_fmadd_ps(a[3], b, c);
        a[4] = _mm256_fmadd_ps(a[4], b, c); a[5] = _mm256_fmadd_ps(a[5], b, c);
        a[6] = _mm256_fmadd_ps(a[6], b, c); a[7] = _mm256_fmadd_ps(a[7], b, c);
        a[8] = _mm256_fmadd_ps(a[8], b, c); a[9] = _mm256_fmadd_ps(a[9], b, c);
        a[10] = _mm256_fmadd_ps(a[10], b, c); a[11] = _mm256_fmadd_ps(a[11], b, c);
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    return _mm256_cvtss_f32(s);
}

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : omp_get_num_procs();
    long steps = 20000000;
    for (int th = 1; th <= max_threads; th++) {
        float sink = 0;
        double t0 = now();
#pragma omp parallel num_threads(th) reduction(+ : sink)
        sink += chains(steps);
        double dt = now() - t0;
        printf("threads %d: %.1f GFMA/s (8-lane FMAs x 8)  [%g]\n", th, (double)steps * 12 * 8 * th / dt / 1e9, (double)sink);
    }
    return 0;
}
