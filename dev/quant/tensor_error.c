/* tensor_error.c - per-tensor error of q8_2f, q4tp and the 4-bit baselines on a checkpoint.
 *
 *   build/dev/tensor_error MODEL_DIR [--alpha A]
 *
 * For every 2-D F32/F16/BF16 tensor whose cols % 32 == 0 (so every format takes it) prints
 * the relative RMS error ||W - deq(quant(W))|| / ||W|| of each format and its bits per weight
 * (padding included), then totals: the error over all weights together (sqrt of summed squared
 * errors over summed squares) and the mean of the per-tensor errors, over every tensor and over
 * the projections alone (without the embeddings and the router, which FORMATS.md's mix keeps in
 * float). The kind column marks which is which: emb, router, expert (q4tp in the mix), proj.
 * --alpha overrides q8_2f's column field exponent (NT_Q8_2F_ALPHA), to choose it.
 * The quantizers run as the library runs them (OpenMP over rows); the speed printed is weights
 * per wall second over all threads, and on small tensors it mostly measures the thread team's
 * start-up (for the quantizers' own speed, time nt_q4tp_quantize_rows on one large matrix).
 */
#include "quant/baseline.h"
#include "quant/quant.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FMT_Q8, FMT_Q4TP, FMT_BASE, FMT_BASE_S, FMT_Q4_0, N_FMT };
static const char *fmt_names[N_FMT] = {"q8_2f", "q4tp", "base4", "base4s", "q4_0"};

/* The part of the checkpoint a tensor is: which FORMATS.md's mix decides the format of. */
static const char *tensor_kind(const char *name) {
    if (strstr(name, "embed")) return "emb";
    if (strstr(name, ".gate.") || strstr(name, "router")) return "router";
    if (strstr(name, ".experts.")) return "expert";
    return "proj";
}

struct totals {
    double err2[N_FMT], time_s[N_FMT], rel_sum[N_FMT], bits[N_FMT];
    double norm2, weights;
    int tensors;
};

static void to_f32(const struct nt_tensor *t, float *out, size_t n) {
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == NT_DTYPE_F32) memcpy(out + i, p + 4 * i, 4);
        else if (t->dtype == NT_DTYPE_F16) out[i] = nt_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        else out[i] = nt_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
    }
}

/* alpha for q8_2f, applied through the _alpha variant of the column field (the library's
 * nt_quantize_matrix uses the default; this tool builds the q8_2f payload itself) */
static void quantize_q8(const float *W, int64_t rows, int64_t cols, float alpha, uint8_t *dst) {
    float *colmax = calloc((size_t)cols, sizeof *colmax);
    uint16_t *cs = malloc((size_t)cols * 2), *rs = malloc((size_t)rows * 2);
    if (!colmax || !cs || !rs) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    nt_q8_2f_col_stats(colmax, W, rows, cols);
    nt_q8_2f_col_field_choose_alpha(colmax, cols, alpha, cs);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++)
        nt_q8_2f_quantize_rows(W + r * cols, 1, cols, cs, (int8_t *)dst + r * cols, rs + r);
    uint8_t *p = dst + nt_q8_2f_rs_offset(rows, cols);
    for (int64_t r = 0; r < rows; r++) p[2 * r] = (uint8_t)rs[r], p[2 * r + 1] = (uint8_t)(rs[r] >> 8);
    p = dst + nt_q8_2f_cs_offset(rows, cols);
    for (int64_t c = 0; c < cols; c++) p[2 * c] = (uint8_t)cs[c], p[2 * c + 1] = (uint8_t)(cs[c] >> 8);
    free(colmax);
    free(cs);
    free(rs);
}

/* squared error of a payload against W, row by row */
static double payload_err2(enum nt_dtype fmt, const uint8_t *pay, const float *W, int64_t rows, int64_t cols) {
    double e2 = 0;
#pragma omp parallel reduction(+ : e2)
    {
        float *row = malloc((size_t)cols * sizeof *row);
#pragma omp for schedule(dynamic, 16)
        for (int64_t r = 0; r < rows; r++) {
            nt_matrix_dequant_row(fmt, pay, rows, cols, r, row);
            for (int64_t c = 0; c < cols; c++) {
                double d = (double)W[r * cols + c] - row[c];
                e2 += d * d;
            }
        }
        free(row);
    }
    return e2;
}

static void measure(const struct nt_tensor *t, float alpha, struct totals *tot_all, struct totals *tot_proj) {
    int64_t rows = t->shape[0], cols = t->shape[1];
    size_t n = (size_t)rows * (size_t)cols;
    float *W = malloc(n * sizeof *W), *deq = malloc(n * sizeof *deq);
    uint64_t cap = nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols);
    uint8_t *pay = malloc(cap);
    if (!W || !deq || !pay) {
        fprintf(stderr, "out of memory for %s\n", t->name);
        exit(1);
    }
    to_f32(t, W, n);
    double norm2 = 0;
    for (size_t i = 0; i < n; i++) norm2 += (double)W[i] * W[i];

    double err2[N_FMT], secs[N_FMT], bits[N_FMT];
    double t0 = omp_get_wtime();
    quantize_q8(W, rows, cols, alpha, pay);
    secs[FMT_Q8] = omp_get_wtime() - t0;
    err2[FMT_Q8] = payload_err2(NT_DTYPE_Q8_2F, pay, W, rows, cols);
    bits[FMT_Q8] = 8.0 * (double)nt_matrix_bytes(NT_DTYPE_Q8_2F, rows, cols);

    t0 = omp_get_wtime();
    nt_quantize_matrix(NT_DTYPE_Q4TP, W, rows, cols, pay);
    secs[FMT_Q4TP] = omp_get_wtime() - t0;
    err2[FMT_Q4TP] = payload_err2(NT_DTYPE_Q4TP, pay, W, rows, cols);
    bits[FMT_Q4TP] = 8.0 * (double)nt_matrix_bytes(NT_DTYPE_Q4TP, rows, cols);

    static const struct {
        int fmt;
        void (*roundtrip)(const float *, int64_t, int64_t, float *);
    } baselines[] = {{FMT_BASE, nt_q4_baseline_roundtrip},
                     {FMT_BASE_S, nt_q4_baseline_signed_roundtrip},
                     {FMT_Q4_0, nt_q4_baseline_amax_roundtrip}};
    for (size_t b = 0; b < sizeof baselines / sizeof baselines[0]; b++) {
        int f = baselines[b].fmt;
        t0 = omp_get_wtime();
#pragma omp parallel for schedule(dynamic, 16)
        for (int64_t r = 0; r < rows; r++) baselines[b].roundtrip(W + r * cols, 1, cols, deq + r * cols);
        secs[f] = omp_get_wtime() - t0;
        double e2 = 0;
        for (size_t i = 0; i < n; i++) e2 += ((double)W[i] - deq[i]) * ((double)W[i] - deq[i]);
        err2[f] = e2;
        bits[f] = NT_Q4_BASELINE_BITS * (double)n;
    }

    const char *kind = tensor_kind(t->name);
    char shape[48];
    snprintf(shape, sizeof shape, "%lldx%lld", (long long)rows, (long long)cols);
    printf("%-56s %-12s %-6s", t->name, shape, kind);
    for (int f = 0; f < N_FMT; f++) printf(" %9.3e", norm2 > 0 ? sqrt(err2[f] / norm2) : 0.0);
    for (int f = 0; f < N_FMT; f++) printf(" %6.3f", bits[f] / (double)n);
    printf("\n");

    int is_proj = strcmp(kind, "emb") != 0 && strcmp(kind, "router") != 0;
    for (int k = 0; k < 2; k++) {
        struct totals *tot = k == 0 ? tot_all : tot_proj;
        if (k == 1 && !is_proj) continue;
        for (int f = 0; f < N_FMT; f++) {
            tot->err2[f] += err2[f];
            tot->time_s[f] += secs[f];
            tot->bits[f] += bits[f];
            tot->rel_sum[f] += norm2 > 0 ? sqrt(err2[f] / norm2) : 0.0;
        }
        tot->norm2 += norm2;
        tot->weights += (double)n;
        tot->tensors++;
    }
    free(W);
    free(deq);
    free(pay);
}

static void print_totals(const char *label, const struct totals *t) {
    if (!t->tensors) return;
    printf("%s: %d tensors, %.0f weights\n", label, t->tensors, t->weights);
    printf("  %-6s %12s %12s %10s %12s\n", "format", "rel_rms_all", "mean_rel", "bits/w", "Mweights/s");
    for (int f = 0; f < N_FMT; f++)
        printf("  %-6s %12.4e %12.4e %10.4f %12.1f\n", fmt_names[f], sqrt(t->err2[f] / t->norm2),
               t->rel_sum[f] / t->tensors, t->bits[f] / t->weights,
               t->time_s[f] > 0 ? t->weights / t->time_s[f] / 1e6 : 0.0);
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    float alpha = NT_Q8_2F_ALPHA;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--alpha") == 0 && i + 1 < argc) {
            char *end;
            alpha = strtof(argv[++i], &end);
            if (*end || !(alpha >= 0.0f && alpha <= 1.0f)) {
                fprintf(stderr, "--alpha wants a number in [0, 1]\n");
                return 2;
            }
        } else if (!dir && argv[i][0] != '-') {
            dir = argv[i];
        } else {
            dir = NULL;
            break;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: tensor_error MODEL_DIR [--alpha A]\n");
        return 2;
    }
    struct nt_tensor_table table;
    struct nt_err err;
    nt_table_init(&table);
    if (nt_table_open_dir(&table, dir, &err) != NEMOTRON_OK) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        return 1;
    }
    printf("# %s, q8_2f alpha %.3f, %d threads; rel RMS error of q8_2f q4tp base4 base4s q4_0, then bits/weight\n",
           dir, alpha, omp_get_max_threads());
    struct totals all = {0}, proj = {0};
    for (int i = 0; i < table.n_tensors; i++) {
        const struct nt_tensor *t = &table.tensors[i];
        if (t->ndim != 2 || t->shape[1] % 32 != 0) continue;
        if (t->dtype != NT_DTYPE_F32 && t->dtype != NT_DTYPE_F16 && t->dtype != NT_DTYPE_BF16) continue;
        measure(t, alpha, &all, &proj);
    }
    print_totals("all 2-D tensors", &all);
    print_totals("projections (no emb, router)", &proj);
    nt_table_close(&table);
    return 0;
}
