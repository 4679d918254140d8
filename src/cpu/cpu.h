/* cpu.h - what the CPU backend's files share: the product kernels and their dispatch.
 *
 * matmul.c holds the scalar and AVX2 variants behind nt_cpu_matmul; backend_cpu.c holds the
 * other operations and the ops table. Both variants stay callable: use_simd = 0 runs the scalar
 * reference on any machine.
 */
#ifndef NT_CPU_H
#define NT_CPU_H

#include "../backend.h"

/* One product y[t][r] = act(W[r] . x[t] + bias[r]), t < n. */
struct nt_mm {
    const struct nt_matrix *W;
    const float *bias;        /* [rows] or NULL */
    enum nt_act act;
    const float *x;           /* [n][x_stride], the first W->cols used */
    int x_stride;
    float *y;                 /* [n][y_stride], the first W->rows written */
    int y_stride;
    int n;
};

/* 1 when the processor has AVX2, FMA and F16C. */
int nt_cpu_simd_available(void);
void nt_cpu_matmul(const struct nt_mm *m, int use_simd, int n_threads);
/* Rows [r0, r1) of the product on the calling thread alone. */
void nt_cpu_matmul_rows(const struct nt_mm *m, int use_simd, int r0, int r1);

#endif /* NT_CPU_H */
