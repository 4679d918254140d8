/* matmul_bench.c - times the CPU backend's products alone, outside the library (a scratch place
 * for kernel work, as llm.c's dev/). For a bf16 matrix of ROWS x COLS it reports, for passes of
 * 1 and of 64 positions, the time, the weight bytes per second and the multiply-adds per second,
 * and the largest difference of the variant's result from the scalar one's.
 * build: make build/dev/matmul_bench    run: build/dev/matmul_bench [ROWS COLS THREADS]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/cpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 4096, cols = argc > 2 ? atoi(argv[2]) : 2048;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    /* 8 matrices: more than the 32 MiB L3, so n = 1 times DRAM, not cache */
    enum { COPIES = 8 };
    size_t count = (size_t)rows * cols;
    uint16_t *w = malloc(count * 2 * COPIES);
    float *x = malloc(sizeof(float) * 64 * cols), *y = malloc(sizeof(float) * 64 * rows);
    float *yref = malloc(sizeof(float) * 64 * rows);
    void *qx = malloc(nt_cpu_qx_bytes(64, cols)); /* the AVX-512 BF16 level's rounded activations */
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < count * COPIES; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        w[i] = nt_f32_to_bf16(((float)(s % 2001) - 1000.0f) / 1000.0f / sqrtf((float)cols));
    }
    for (int i = 0; i < 64 * cols; i++) x[i] = sinf((float)i);
    /* the variant the backend runs (NEMOTRON_CPU picks another): before session 13 this was
     * nt_cpu_simd_available(), which is 1, AVX2, whatever the machine has */
    int simd = nt_cpu_isa_selected();
    printf("variant %s\n", nt_cpu_isa_name(simd));
    for (int n = 1; n <= 64; n *= 64) {
        struct nt_matrix W = {.dtype = NT_DTYPE_BF16, .rows = rows, .cols = cols, .data = w};
        struct nt_mm m = {.W = &W, .x = x, .x_stride = cols, .y = y, .y_stride = rows, .n = n, .qx = qx};
        int reps = n == 1 ? 200 : 10;
        double best = 1e9, total = 0;
        for (int r = 0; r < reps; r++) {
            W.data = w + (size_t)(r % COPIES) * count;
            double t0 = now();
            nt_cpu_matmul(&m, simd, threads);
            double dt = now() - t0;
            total += dt;
            if (dt < best) best = dt;
        }
        printf("n=%2d  mean %8.3f ms (%6.2f GB/s)  ", n, total / reps * 1e3, count * 2 / (total / reps) / 1e9);
        W.data = w;
        nt_cpu_matmul(&m, simd, threads);
        struct nt_mm ref = m;
        ref.y = yref;
        nt_cpu_matmul(&ref, 0, threads);
        double err = 0;
        for (int i = 0; i < n * rows; i++) err = fmax(err, fabs(y[i] - yref[i]));
        printf("n=%2d  %8.3f ms  %6.2f GB/s of weights  %6.2f GFMA/s  max|simd-scalar| %.2e\n", n,
               best * 1e3, count * 2 / best / 1e9, (double)count * n / best / 1e9, err);
    }
    return 0;
}
