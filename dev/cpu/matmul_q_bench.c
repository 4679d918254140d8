/* matmul_q_bench.c - times the packed-weight products (q8_2f, q4tp; src/cpu/matmul_q.c) alone, on
 * Nemotron-3-Nano's shapes, against what the machine allows:
 *   - the read bandwidth of a plain streaming read (1 GiB, AVX2 loads), 1 and THREADS threads;
 *   - the arithmetic ceiling of each kernel's inner step: the exact instruction mix of one
 *     (row, position, 32-column block) step in independent register chains, no memory
 *     (q8_2f: 2 vpmaddwd + vpaddd + vcvtdq2ps + vfmadd; q4tp: vpmaddubsw + vpmaddwd + vpsubd +
 *     vsubps + vfmadd), reported as multiply-adds per second (32 per step); and the plain 8-lane
 *     f32 FMA peak for comparison (its rate / 16 is the clock in GHz: 2 FMA pipes x 8 lanes);
 *   - per shape: a pass of 1 position (GB/s of weight bytes, sweeping enough copies of the
 *     matrix to miss the last-level cache) and of 2, 4, 16, 64 positions (G multiply-adds/s),
 *     best of several runs, on 1 and THREADS threads; the ratio "time per position at n = 1 /
 *     time per position at n = 64" (q8_2f twice: reading the payload, then the streaming layout
 *     of src/cpu/stream_layout.c); and a check that the kernel variant == scalar bit for bit
 *     (the backend's variant; NEMOTRON_CPU chooses another, as in the backend: cpu.h).
 * build: gcc -std=c11 -D_GNU_SOURCE -O3 -Iinclude -Isrc -ffp-contract=off -fopenmp \
 *          dev/cpu/matmul_q_bench.c src/cpu/matmul.c src/cpu/matmul_q.c src/common.c \
 *          src/model/safetensors.c -ljson-c -lm -o build/dev/matmul_q_bench
 *        (or make build/dev/matmul_q_bench)
 * run:   build/dev/matmul_q_bench [THREADS [FORMAT ROWS COLS]]
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
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

/* ---- machine ceilings ---------------------------------------------------------------------- */

__attribute__((target("avx2"))) static double read_gbs(const uint8_t *buf, size_t bytes, int threads) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        long long sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t lo = bytes / 64 * id / nt * 64, hi = bytes / 64 * (id + 1) / nt * 64;
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
            for (size_t i = lo; i < hi; i += 128) {
                a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(const void *)(buf + i)));
                a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(const void *)(buf + i + 32)));
                a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(const void *)(buf + i + 64)));
                a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(const void *)(buf + i + 96)));
            }
            a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
            sink += _mm256_extract_epi64(a0, 0);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (sink == 42) printf(" ");
    }
    return (double)bytes / best / 1e9;
}

#define STEPS 20000000L
/* The kernels' inner steps on L1-resident operands: 12 independent (row, position) chains per
 * iteration, each with its own weight and activation vectors (so nothing can be shared or
 * hoisted: the memory clobber makes every iteration reload them), as the register tiles do. */
static __m256i PW[3][2], PX[6][2];
static float PS[12];

/* q8_2f: 2 rows x 6 positions; per chain 2 vpmaddwd + vpaddd + vcvtdq2ps + vfmadd (d broadcast) */
__attribute__((target("avx2,fma"))) static float peak_q8(void) {
    __m256 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm256_setzero_ps();
    for (long k = 0; k < STEPS; k++) {
        __asm__ volatile("" ::: "memory");
        for (int p = 0; p < 6; p++) {
            __m256i xa = _mm256_load_si256(&PX[p][0]), xb = _mm256_load_si256(&PX[p][1]);
            __m256 d = _mm256_broadcast_ss(&PS[p]);
            for (int r = 0; r < 2; r++) {
                __m256i s = _mm256_add_epi32(_mm256_madd_epi16(xa, _mm256_load_si256(&PW[r][0])),
                                             _mm256_madd_epi16(xb, _mm256_load_si256(&PW[r][1])));
                a[r * 6 + p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, a[r * 6 + p]);
            }
        }
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    return _mm256_cvtss_f32(s);
}

/* q4tp: 3 rows x 4 positions; per chain vpmaddubsw + vpmaddwd + vpsubd + vsubps (the exact
 * int -> float of matmul_q.c) + vfmadd */
__attribute__((target("avx2,fma"))) static float peak_q4(void) {
    __m256 a[12];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < 12; i++) a[i] = _mm256_setzero_ps();
    for (long k = 0; k < STEPS; k++) {
        __asm__ volatile("" ::: "memory");
        for (int r = 0; r < 3; r++) {
            __m256i w = _mm256_load_si256(&PW[r][0]);
            for (int p = 0; p < 4; p++) {
                __m256i v = _mm256_maddubs_epi16(w, _mm256_load_si256(&PX[p][0]));
                v = _mm256_sub_epi32(_mm256_madd_epi16(v, ones), _mm256_load_si256(&PX[p][1]));
                __m256 f = _mm256_sub_ps(_mm256_castsi256_ps(v), _mm256_set1_ps(12582912.0f));
                a[r * 4 + p] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&PS[r * 4 + p]), a[r * 4 + p]);
            }
        }
    }
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    return _mm256_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float peak_fma(void) {
    __m256 a[12], b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(0.001f * (float)i);
    for (long k = 0; k < STEPS; k++)
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    return _mm256_cvtss_f32(s);
}

/* steps/s summed over threads, best of 3 */
static double peak(float (*fn)(void), int threads) {
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        float sink = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += fn();
        double dt = now() - t0;
        if (dt < best) best = dt;
        if (sink == 42.0f) printf(" ");
    }
    return (double)STEPS * 12 * threads / best;
}

/* ---- payloads -------------------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static uint8_t *make_payload(enum nt_dtype fmt, int64_t rows, int64_t cols, size_t *bytes) {
    size_t n;
    if (fmt == NT_DTYPE_Q8_2F)
        n = (size_t)((rows * cols + 2 * rows + 2 * cols + 3) / 4 * 4);
    else
        n = (size_t)((rows * (cols / 32) * 16 + 4 * rows + rows * nt_q4tp_cstride(cols) + 3) / 4 * 4 + 4);
    uint8_t *p = aligned_alloc(64, (n + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)next_u64();
    if (fmt == NT_DTYPE_Q8_2F) {
        for (int64_t r = 0; r < rows; r++) put16(p + rows * cols + 2 * r, nt_f32_to_f16(0.001f));
        for (int64_t c = 0; c < cols; c++) put16(p + rows * cols + 2 * rows + 2 * c, nt_f32_to_f16(1.0f + (float)(c % 7) / 8));
    } else {
        uint8_t *params = p + nt_q4tp_params_offset(rows, cols);
        for (int64_t r = 0; r < rows; r++) {
            put16(params + 4 * r, nt_f32_to_f16(-12.0f));
            put16(params + 4 * r + 2, nt_f32_to_f16(0.2f));
        }
    }
    *bytes = n;
    return p;
}

/* ---- one shape ----------------------------------------------------------------------------- */

struct result {
    double gbs1, t1, gmacs[5], t64;
};

static const int NS[] = {1, 2, 4, 16, 64};

/* layout: q8_2f only, the products read the streaming layout (src/cpu/stream_layout.c) of each copy */
static struct result bench_shape(enum nt_dtype fmt, int64_t rows, int64_t cols, int threads, int simd, int verbose, int layout) {
    struct result res = {0};
    size_t bytes;
    uint8_t *first = make_payload(fmt, rows, cols, &bytes);
    /* enough copies for 768 MB: a sweep misses any last-level cache */
    int copies = (int)(768e6 / (double)bytes) + 1;
    size_t stride = (bytes + 63) / 64 * 64;
    uint8_t *all = aligned_alloc(64, stride * (size_t)copies);
    for (int c = 0; c < copies; c++) memcpy(all + (size_t)c * stride, first, bytes);
    size_t sbytes = layout ? (nt_cpu_q8_stream_bytes(rows, cols) + 63) / 64 * 64 : 0;
    uint8_t *streams = sbytes ? aligned_alloc(64, sbytes * (size_t)copies) : NULL;
    struct nt_matrix W = {.dtype = fmt, .rows = rows, .cols = cols, .data = all};
    for (int c = 0; streams && c < copies; c++) {
        W.data = all + (size_t)c * stride;
        nt_cpu_q8_stream_fill(&W, streams + (size_t)c * sbytes, 0, rows / NT_CPU_Q8_STREAM_ROWS);
    }
    W.data = all;
    float *x = malloc(sizeof(float) * 64 * (size_t)cols), *y = malloc(sizeof(float) * 64 * (size_t)rows);
    float *y2 = malloc(sizeof(float) * 64 * (size_t)rows);
    for (int64_t i = 0; i < 64 * cols; i++) x[i] = sinf((float)i * 0.37f);
    void *qx = aligned_alloc(64, (nt_cpu_qx_bytes(64, cols) + 63) / 64 * 64);
    for (size_t k = 0; k < sizeof NS / sizeof NS[0]; k++) {
        int n = NS[k];
        struct nt_mm m = {.W = &W, .x = x, .x_stride = (int)cols, .y = y, .y_stride = (int)rows, .n = n, .qx = qx,
                          .stream = streams};
        if (n == 1) {
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now();
                for (int c = 0; c < copies; c++) {
                    W.data = all + (size_t)c * stride;
                    m.stream = streams ? streams + (size_t)c * sbytes : NULL;
                    nt_cpu_matmul(&m, simd, threads);
                }
                double dt = (now() - t0) / copies;
                if (dt < best) best = dt;
            }
            res.t1 = best;
            res.gbs1 = (double)bytes / best / 1e9;
            W.data = all;
            m.stream = streams;
        }
        int reps = n == 1 ? 50 : 3 + 200 / n;
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = now();
            nt_cpu_matmul(&m, simd, threads);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        res.gmacs[k] = (double)rows * (double)cols * n / best / 1e9;
        if (n == 64) res.t64 = best;
        if (simd && verbose && (n == 1 || n == 64)) { /* the variant == scalar */
            nt_cpu_matmul(&m, simd, threads);
            memcpy(y2, y, sizeof(float) * (size_t)n * (size_t)rows);
            nt_cpu_matmul(&m, 0, threads);
            if (memcmp(y, y2, sizeof(float) * (size_t)n * (size_t)rows) != 0)
                printf("  !! %s != scalar at n=%d\n", nt_cpu_isa_name(simd), n);
        }
    }
    free(first);
    free(all);
    free(streams);
    free(x);
    free(y);
    free(y2);
    free(qx);
    return res;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int simd = nt_cpu_isa_selected(); /* the backend's choice; NEMOTRON_CPU names another */
    printf("kernels: %s\n", nt_cpu_isa_name(simd));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) memset(&PW[i][j], 3 + i + j, 32);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) memset(&PX[i][j], 1 + i + j, 32);
    for (int i = 0; i < 12; i++) PS[i] = 1e-9f;
    size_t bb = (size_t)1 << 30;
    uint8_t *buf = aligned_alloc(64, bb);
    memset(buf, 1, bb);
    double bw1 = read_gbs(buf, bb, 1), bwt = read_gbs(buf, bb, threads);
    free(buf);
    double f1 = peak(peak_fma, 1), q81 = peak(peak_q8, 1), q41 = peak(peak_q4, 1);
    double ft = peak(peak_fma, threads), q8t = peak(peak_q8, threads), q4t = peak(peak_q4, threads);
    printf("read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n", bw1, bwt, threads);
    printf("f32 FMA peak:   %.1f GFMA/s (8 lanes each; %.2f GHz if 16/cycle) 1 thread, %.1f on %d\n", f1 * 8 / 1e9,
           f1 * 8 / 16 / 1e9, ft * 8 / 1e9, threads);
    printf("q8_2f step:     %.1f G MAC/s 1 thread (%.2f steps/cycle at that clock), %.1f on %d\n", q81 * 32 / 1e9,
           q81 / (f1 * 8 / 16), q8t * 32 / 1e9, threads);
    printf("q4tp step:      %.1f G MAC/s 1 thread (%.2f steps/cycle), %.1f on %d\n", q41 * 32 / 1e9, q41 / (f1 * 8 / 16),
           q4t * 32 / 1e9, threads);
    struct {
        enum nt_dtype fmt;
        int64_t rows, cols;
        const char *what;
    } shapes[] = {
        {NT_DTYPE_Q4TP, 1856, 2688, "expert up"},     {NT_DTYPE_Q4TP, 2688, 1856, "expert down"},
        {NT_DTYPE_Q8_2F, 4096, 2688, "attn q"},       {NT_DTYPE_Q8_2F, 2688, 4096, "mamba out / attn o"},
        {NT_DTYPE_Q8_2F, 10304, 2688, "mamba in"},    {NT_DTYPE_Q8_2F, 3712, 2688, "shared up"},
        {NT_DTYPE_Q8_2F, 2688, 3712, "shared down"},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    if (argc > 4) {
        shapes[0].fmt = strcmp(argv[2], "q4tp") == 0 ? NT_DTYPE_Q4TP : NT_DTYPE_Q8_2F;
        shapes[0].rows = atoi(argv[3]);
        shapes[0].cols = atoi(argv[4]);
        shapes[0].what = "argument";
        nshapes = 1;
    }
    printf("\n%-6s %-18s %-11s %3s | %8s %6s | %7s %7s %7s %7s %7s | %s\n", "format", "shape", "", "thr", "n=1 GB/s",
           "%bw", "n=1", "n=2", "n=4", "n=16", "n=64", "t(1)/(t(64)/64)");
    printf("%-6s %-18s %-11s %3s | %8s %6s | %39s |\n", "", "", "", "", "", "", "G multiply-adds/s");
    /* the bandwidth reference of each row is re-measured next to it (a shared machine's
     * bandwidth drifts): the better of the first reading and this one */
    buf = aligned_alloc(64, bb);
    memset(buf, 1, bb);
    for (int s = 0; s < nshapes; s++)
        for (int th = 1; th <= threads; th += threads > 1 ? threads - 1 : 1) {
            double bw = read_gbs(buf, bb, th);
            if (th == 1 && bw < bw1) bw = bw1;
            if (th != 1 && bw < bwt) bw = bwt;
            /* q8_2f: from the payload, then from the streaming layout (what the backend reads when
             * it made the copies) */
            for (int layout = 0; layout <= (shapes[s].fmt == NT_DTYPE_Q8_2F && simd != 0); layout++) {
                struct result r = bench_shape(shapes[s].fmt, shapes[s].rows, shapes[s].cols, th, simd, th == threads, layout);
                char shp[32];
                snprintf(shp, sizeof shp, "%lldx%lld", (long long)shapes[s].rows, (long long)shapes[s].cols);
                printf("%-6s %-18s %-11s %3d | %8.2f %5.0f%% | %7.2f %7.2f %7.2f %7.2f %7.2f | %.2f\n",
                       shapes[s].fmt == NT_DTYPE_Q4TP ? "q4tp" : "q8_2f", shp, layout ? "+ stream" : shapes[s].what, th,
                       r.gbs1, 100 * r.gbs1 / bw, r.gmacs[0], r.gmacs[1], r.gmacs[2], r.gmacs[3], r.gmacs[4],
                       r.t1 / (r.t64 / 64));
                fflush(stdout);
            }
        }
    free(buf);
    return 0;
}
