/* cpu.h - what the CPU backend's files share: the product kernels and their dispatch.
 *
 * matmul.c holds the scalar and AVX2 variants behind nt_cpu_matmul (f32, f16, bf16 weights) and
 * routes the packed formats (q8_2f, q4tp) to matmul_q.c and, at the AVX-512 BF16 level, bf16
 * weights to matmul_bf16.c; backend_cpu.c holds the other operations
 * (their scalar reference) and the ops table, ops_simd.c their AVX2 and AVX-512 variants. Every
 * variant stays callable: isa = NT_CPU_SCALAR runs the scalar reference on any machine; the
 * backend picks the best the processor has (NEMOTRON_CPU names another).
 */
#ifndef NT_CPU_H
#define NT_CPU_H

#include "../backend.h"
#include "../quant/ggml_blocks.h"

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
    void *qx;                 /* packed W only: scratch of nt_cpu_qx_bytes(n, W->cols) bytes
                               * (64-byte aligned is best) for the quantized activations */
    const uint8_t *stream;    /* q8_2f W only, or NULL: W's weights again in the streaming layout
                               * (nt_cpu_q8_stream_fill), which the SIMD streaming kernels read
                               * instead of W->data where a call's rows allow (matmul_q.c); the
                               * same results */
};

/* The kernel variants, by instruction set; each level has the instructions of those before it.
 * Every function here that takes `isa` runs that variant (the caller checks
 * nt_cpu_isa_available): the float products (f32, f16, bf16) have a scalar and an FMA arithmetic
 * (AVX2, and 512-bit kernels from the AVX-512 VNNI level on), and bf16 weights a third one at the
 * AVX-512 BF16 level (matmul_bf16.c: the activations rounded to bf16); the packed products run
 * each level's own kernels, all bit-identical to the scalar reference. */
enum nt_cpu_isa {
    NT_CPU_SCALAR = 0,   /* the reference, any machine */
    NT_CPU_AVX2,         /* AVX2 + FMA + F16C */
    NT_CPU_AVXVNNI,      /* that + AVX-VNNI (vpdpbusd on 256 bits, VEX) */
    NT_CPU_AVX512VNNI,   /* that + AVX-512 F/VL/BW/VNNI (vpdpbusd, EVEX, 32 registers) */
    NT_CPU_AVX512BF16,   /* that + AVX512_BF16 (vdpbf16ps): bf16 weights' products in their own
                          * arithmetic, the rest as AVX-512 VNNI */
    NT_CPU_AMX,          /* that + AMX-TILE/AMX-INT8 (tdpbssd) for passes of 16 or more positions,
                          * where the OS grants the tile state (nt_cpu_amx_ready) */
    NT_CPU_ISA_COUNT
};
/* 1 when this processor (and OS) runs variant isa. */
int nt_cpu_isa_available(int isa);
/* The variant the backend runs by default: the fastest this processor runs, AVX-512 BF16 and AMX
 * left out. AVX-512 BF16 rounds bf16 models' activations to bf16, which the engine's accuracy
 * against transformers does not survive (docs/PERF.md, session 15: 0.37 relative at a position of
 * the bf16 fixture, against 1.5e-6), so it runs only when asked for; AMX is slower than AVX-512
 * VNNI for this arithmetic (matmul_q_amx.h). */
int nt_cpu_isa_best(void);
/* "scalar", "avx2", "avxvnni", "avx512vnni", "avx512bf16", "amx"; and back (-1 for an unknown
 * name). */
const char *nt_cpu_isa_name(int isa);
int nt_cpu_isa_parse(const char *name);
/* The variant the backend runs: NEMOTRON_CPU's (one of the names above) when this processor has
 * it, else the best (with a warning on stderr naming the variable's value when it was set but
 * cannot be honoured). */
int nt_cpu_isa_selected(void);
/* 1 when the processor has AMX-TILE and AMX-INT8 and the OS lets this process use the tile
 * state (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked for here once, process-wide). */
int nt_cpu_amx_ready(void);
/* 1 when the processor has AVX2, FMA and F16C (nt_cpu_isa_available(NT_CPU_AVX2)). */
int nt_cpu_simd_available(void);
void nt_cpu_matmul(const struct nt_mm *m, int isa, int n_threads);
/* Rows [r0, r1) of the product on the calling thread alone. For packed W, m->qx must hold
 * m->x quantized by nt_cpu_quantize_x (nt_cpu_matmul does that itself). */
void nt_cpu_matmul_rows(const struct nt_mm *m, int isa, int r0, int r1);

/* ---- packed weights (matmul_q.c; the arithmetic and the qx layout are documented there) ---- */

/* 1 for the weights whose products quantize the activations to int8 (qx): the packed formats
 * q8_2f and q4tp and llama.cpp's block types (matmul_ggml.c). */
static inline int nt_cpu_int8_product(enum nt_dtype d) {
    return d == NT_DTYPE_Q8_2F || d == NT_DTYPE_Q4TP || nt_dtype_is_ggml_block(d);
}
/* 1 for the products of variant isa that round the activations to bf16 into qx (matmul_bf16.c). */
static inline int nt_cpu_bf16_product(enum nt_dtype d, int isa) {
    return d == NT_DTYPE_BF16 && isa >= NT_CPU_AVX512BF16;
}
/* 1 for the products that read their activations from qx, filled by nt_cpu_quantize_x. */
static inline int nt_cpu_product_uses_qx(enum nt_dtype d, int isa) {
    return nt_cpu_int8_product(d) || nt_cpu_bf16_product(d, isa);
}

/* Bytes of qx for n positions of a product with `cols` columns (either packed format; grows with
 * cols, so the size for the widest product serves every narrower one). */
size_t nt_cpu_qx_bytes(int n, int64_t cols);
/* Fills m->qx from m->x[0 .. m->n) when the product reads it (nt_cpu_product_uses_qx; a no-op
 * otherwise): int8 blocks for packed W (every variant gives the same bytes), bf16 for bf16 W at
 * the AVX-512 BF16 level. */
void nt_cpu_quantize_x(const struct nt_mm *m, int isa);
/* matmul_q.c's part of it: positions [t0, t1) of packed W's activations. */
void nt_cpu_quantize_x_q(const struct nt_mm *m, int isa, int t0, int t1);
/* What matmul.c's entry points call for packed W: the rows, and the multiple of rows a thread's
 * range of them is. */
void nt_cpu_matmul_q_rows(const struct nt_mm *m, int isa, int r0, int r1);
int nt_cpu_q_row_grain(int isa);
/* The streaming layout of a q8_2f matrix (matmul_q.c says why): its first rows - rows % 6 rows in
 * blocks of NT_CPU_Q8_STREAM_ROWS, each block the 32-byte column blocks of its rows side by side,
 * column block by column block. nt_cpu_q8_stream_bytes is its size (0 when the matrix has fewer
 * than 6 rows); nt_cpu_q8_stream_fill writes row blocks [k0, k1) of it from W's payload. */
#define NT_CPU_Q8_STREAM_ROWS 6
size_t nt_cpu_q8_stream_bytes(int64_t rows, int64_t cols);
void nt_cpu_q8_stream_fill(const struct nt_matrix *W, uint8_t *dst, int64_t k0, int64_t k1);

/* ---- bf16 weights at the AVX-512 BF16 level (matmul_bf16.c: the arithmetic, the qx layout) ---- */

/* Positions [t0, t1) of m->x rounded to bf16 into m->qx. */
void nt_cpu_bf16_round_x(const struct nt_mm *m, int t0, int t1);
/* Rows [r0, r1) of the product, m->qx filled by nt_cpu_bf16_round_x. */
void nt_cpu_matmul_bf16_rows(const struct nt_mm *m, int r0, int r1);

/* What the products share: the int8 products' fixed tree over their 8 float lanes, and step 4 of
 * every product, float ones (matmul.c) included: bias, then relu^2 as max(v, 0) squared. */
static inline float nt_cpu_tree8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
static inline float nt_cpu_apply_act(float v, const float *bias, int r, enum nt_act act) {
    if (bias) v += bias[r];
    if (act == NT_ACT_RELU2) {
        v = v > 0.0f ? v : 0.0f;
        v = v * v;
    }
    return v;
}
/* Rows [r0, r1) of a product with a ggml block type (matmul_ggml.c), m->qx filled by
 * nt_cpu_quantize_x; what nt_cpu_matmul_q_rows calls for those types. */
void nt_cpu_matmul_ggml_rows(const struct nt_mm *m, int isa, int r0, int r1);

/* ---- the SIMD variants of the other operations (ops_simd.c), isa >= NT_CPU_AVX2 ---- */

/* One query row of attention over keys 0 .. ctx-1: out[0 .. dh) = softmax(q . k_u * scale) v,
 * k and v the cache's rows of the row's KV head, `stride` floats apart; the scalar reference's
 * online softmax (backend_cpu.c) and its bits. */
void nt_cpu_attn_row(int isa, const float *q, const float *k, const float *v, size_t stride, int ctx,
                     int dh, float scale, float *out);

/* The Mamba conv over a pass (backend_cpu.c's mamba_conv): in[t][c] the conv's inputs (zxd's xBC
 * part), ring [K-1][CD] the last inputs before the pass (updated), snap NULL or [n][K-1][CD]
 * (the ring before each position), out[t][c] = silu(b[c] + sum_k w[c][k] x[t-K+1+k]). */
struct nt_cpu_conv {
    int n, K, CD;
    const float *w, *b;       /* [CD][K]; [CD] or NULL */
    const float *in;          /* [n][in_stride] */
    size_t in_stride;
    float *ring, *snap, *out; /* out: [n][CD] */
};
/* Channels per call of nt_cpu_conv_block for variant isa. */
int nt_cpu_conv_lanes(int isa);
/* Channels c .. c + nt_cpu_conv_lanes(isa) - 1 of the conv, the reference's bits. */
void nt_cpu_conv_block(int isa, const struct nt_cpu_conv *a, int c);

/* 1 when nt_cpu_scan_step runs heads of P dims (a multiple of 8). */
int nt_cpu_scan_simd(int isa, int P);
/* One head's scan step at one position (backend_cpu.c's mamba_scan): S [N][P] advanced,
 * y[0 .. P) = sum_n S[n] C[n] + D x, the reference's bits. */
void nt_cpu_scan_step(int isa, float *S, const float *x, const float *B, const float *C, int N, int P,
                      float dt, float dA, float D, float *y);
/* One group of gs elements (a multiple of 8) of the gated norm at one position:
 * o = w * groupnorm(y * silu(z)), the reference's bits. */
void nt_cpu_gated_group(int isa, const float *y, const float *z, const float *w, int gs, float eps, float *o);

#endif /* NT_CPU_H */
