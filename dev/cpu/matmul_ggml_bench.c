/* matmul_ggml_bench.c - times the CPU products with llama.cpp's block types (src/cpu/matmul_ggml.c)
 * next to q8_2f on one shape: passes of 1 and 64 positions, best of 5 after a warm-up, on the
 * variant the backend would pick (NEMOTRON_CPU chooses another).
 *
 * Weights are random codes with ordinary scales (f16 d around 2^-8, MXFP4 exponents 118-127: no
 * subnormal or non-finite scale, which would time the processor's slow paths instead); the
 * matrix is one copy, so a pass of 1 position reads it from wherever it fits (a 2688 x 4096 Q8_0
 * matrix is 11.7 MB: the last-level cache of some machines, not of others).
 * build: make build/dev/matmul_ggml_bench
 * run:   build/dev/matmul_ggml_bench [THREADS [ROWS COLS]]   (default 1, 2688 4096)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Random bytes, then each block's scale fields set to ordinary values. */
static uint8_t *make_weights(enum nt_dtype d, int rows, int cols, size_t *bytes) {
    *bytes = nt_matrix_bytes(d, rows, cols);
    uint8_t *w = malloc(*bytes);
    for (size_t i = 0; i < *bytes; i++) w[i] = (uint8_t)next_u64();
    int be = 0, bb = 0;
    if (!nt_ggml_block_facts(d, &be, &bb, NULL)) {
        float *f = malloc(sizeof(float) * (size_t)rows * cols);
        for (size_t i = 0; i < (size_t)rows * cols; i++) f[i] = (float)((int)(next_u64() % 2001) - 1000) / 1000.0f;
        nt_quantize_matrix(d, f, rows, cols, w);
        free(f);
        return w;
    }
    uint16_t h = nt_f32_to_f16(1.0f / 256);
    for (size_t i = 0; i < *bytes; i += (size_t)bb) {
        if (d == NT_DTYPE_GGML_MXFP4) {
            w[i] = (uint8_t)(118 + next_u64() % 10);
        } else {
            size_t at = d == NT_DTYPE_GGML_Q6_K ? 208 : 0;
            memcpy(w + i + at, &h, 2);
            if (d == NT_DTYPE_GGML_Q4_1 || d == NT_DTYPE_GGML_Q5_1 || d == NT_DTYPE_GGML_Q4_K || d == NT_DTYPE_GGML_Q5_K)
                memcpy(w + i + 2, &h, 2);
        }
    }
    return w;
}

static double time_pass(const struct nt_matrix *W, const float *x, float *y, void *qx, int n, int isa, int threads) {
    struct nt_mm m = {.W = W, .x = x, .x_stride = (int)W->cols, .y = y, .y_stride = (int)W->rows, .n = n, .qx = qx};
    nt_cpu_matmul(&m, isa, threads);
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t = now();
        nt_cpu_matmul(&m, isa, threads);
        t = now() - t;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int rows = argc > 3 ? atoi(argv[2]) : 2688, cols = argc > 3 ? atoi(argv[3]) : 4096;
    if (threads < 1 || rows < 1 || cols < 256 || cols % 256) {
        fprintf(stderr, "usage: matmul_ggml_bench [THREADS [ROWS COLS]] (COLS a multiple of 256)\n");
        return 2;
    }
    int isa = nt_cpu_isa_selected();
    static const enum nt_dtype types[] = {NT_DTYPE_Q8_2F,       NT_DTYPE_GGML_Q8_0, NT_DTYPE_GGML_Q4_0, NT_DTYPE_GGML_Q4_1,
                                          NT_DTYPE_GGML_Q5_0,   NT_DTYPE_GGML_Q5_1, NT_DTYPE_GGML_IQ4_NL,
                                          NT_DTYPE_GGML_MXFP4,  NT_DTYPE_GGML_Q4_K, NT_DTYPE_GGML_Q5_K,
                                          NT_DTYPE_GGML_Q6_K};
    int n_max = 64;
    float *x = malloc(sizeof(float) * (size_t)n_max * cols), *y = malloc(sizeof(float) * (size_t)n_max * rows);
    for (size_t i = 0; i < (size_t)n_max * cols; i++) x[i] = (float)((int)(next_u64() % 2001) - 1000) / 1000.0f;
    void *qx = aligned_alloc(64, (nt_cpu_qx_bytes(n_max, cols) + 63) / 64 * 64);
    printf("%d x %d, %s, %d thread(s)\n%-7s %9s %9s %9s | %9s %9s\n", rows, cols, nt_cpu_isa_name(isa), threads, "type",
           "bytes/w", "n=1 ms", "n=1 GB/s", "n=64 ms", "G MAC/s");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        size_t bytes;
        uint8_t *w = make_weights(types[i], rows, cols, &bytes);
        struct nt_matrix W = {.dtype = types[i], .rows = rows, .cols = cols, .data = w, .name = "bench"};
        double t1 = time_pass(&W, x, y, qx, 1, isa, threads), t64 = time_pass(&W, x, y, qx, n_max, isa, threads);
        printf("%-7s %9.3f %9.3f %9.2f | %9.3f %9.2f\n", nt_dtype_name(types[i]), (double)bytes / ((double)rows * cols),
               t1 * 1e3, (double)bytes / t1 / 1e9, t64 * 1e3, (double)rows * cols * n_max / t64 / 1e9);
        fflush(stdout);
        free(w);
    }
    free(qx);
    free(x);
    free(y);
    return 0;
}
