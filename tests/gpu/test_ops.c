/* test_ops.c - every operation of the CUDA backend against the CPU reference, on random inputs.
 *
 * The operation-level check of src/cuda (what ggml's test-backend-ops is to ggml): each case
 * makes fresh random inputs and weights from a seed it prints, gives both backends identical
 * bytes (the CPU backend's memory is host memory; the CUDA backend gets them through upload),
 * fills every output with a poison pattern first (0xFF bytes: a NaN no kernel computes, -1 as an
 * integer), runs the operation on both exactly as src/forward.c calls it, copies the results
 * back and compares them per output row (per position) with the relative error
 * ||cuda - cpu|| / ||cpu|| against a named tolerance. TOL_EXACT asks for identical bits: the
 * operations whose CUDA arithmetic is specified to be the CPU's chain of f32 operations (the
 * float products, which follow matmul.c's AVX2 lanes; integer results). The packed products
 * have CUDA's own arithmetic (src/cuda/products.cu): near the CPU (TOL_PACKED), and bit for bit
 * the same from all its kernels (decode.cu's streams for passes of 1 and of 2 .. 16, dp4a items
 * of 1 and 4, tensor cores for longer passes, and the reference kernel). Every element must have been written, and nothing
 * outside the output (stride padding, rows past n, cache rows past the context) may be.
 * Within CUDA, a position's result must not depend on the pass: a pass of 64 against 64 passes
 * of 1 (products, experts), a prefill of pos0 + n against pos0 then n (attention), and Mamba
 * state carried over passes of 5 and 3 against one pass of 8 - all bit for bit. A verify pass
 * (nt_pass.snap) of the conv and scan must give the plain pass's bits and keep in snapshot slot t
 * the ring and state that t one-position passes leave; write and copy move bytes exactly. Every operation
 * runs inside begin_pass/end_pass with a scratch of its own (so eagerly); test_replay then runs a
 * session-shaped program pass after pass, which the CUDA backend captures into a graph and
 * replays, against a CUDA backend with graphs off (bit for bit) and the CPU.
 *
 * Each comparison prints one line ("ok" or "FAIL", the op, its shape, the seed, the worst row's
 * error against its tolerance, and on failure the worst element with both values and their bits),
 * so a failing op can be fixed from the log alone. `gpu_test_ops [SEED]` changes the base seed
 * (each case's seed derives from it and the case number). Without a CUDA device it prints why
 * and exits 77 (skipped).
 */
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"

#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test.h"

/* ---- tolerances (relative L2 error of one output row) ------------------------------------- */

/* Identical bits: the kernel runs the CPU's f32 operations one for one (__f*_rn, -fmad=false). */
#define TOL_EXACT 0.0
/* Packed products: CUDA's own float order (cuda_backend.h says why this bound). */
#define TOL_PACKED NT_CUDA_PACKED_TOL
/* Float-weight products when the CPU runs its scalar variant (NEMOTRON_CPU=scalar or no AVX2):
 * it rounds the product and the sum separately where CUDA follows the AVX2 FMA, one rounding per
 * term of difference: about sqrt(cols) ulps of the terms over a sum that is itself about
 * sqrt(cols) terms, i.e. a few 1e-7 relative; 4e-6 leaves 10x. */
#define TOL_MATMUL_SCALAR 4e-6
/* rmsnorm: the sum of squares in a fixed block tree instead of one serial sum; positive terms,
 * so each order is within ~H/2 ulp of the exact sum at worst, sqrt(H) typically; it enters the
 * output under a square root, as one common factor of the row. Measured on the H200: up to
 * 1.13e-6 at H = 4096 (the CPU's serial sum drifts ~64 ulp); 4e-6 leaves ~4x. */
#define TOL_NORM 4e-6
/* mamba_conv: the taps are the CPU's chain; only silu's expf is CUDA's (within 2 ulp of glibc),
 * which moves silu by at most ~2 ulp. */
#define TOL_CONV 1e-6
/* gated norm: silu's expf as above, then a group sum of squares in a tree (as TOL_NORM). */
#define TOL_GATED 2e-6
/* mamba_scan: each state element's recurrence is the CPU's chain, but dt goes through
 * log1pf/expf and dA through expf (a few ulp each), which every state term of a head shares and
 * the state carries into later positions (decaying, dA < 1), and y sums its N terms as four
 * quarter chains and a tree where the CPU runs one chain: ~1e-6 expected; 1e-5 leaves room for
 * the cancellation of the signed N-term sums. */
#define TOL_SCAN 1e-5
/* attention: q.k as one fma chain over the dims instead of the CPU's 8 lanes of mul-then-add,
 * CUDA's expf, and the softmax's sums grouped by tiles of 32 keys folded in order (attention.cu)
 * where the CPU runs one online chain over the keys: ~1e-7..1e-6 over a few hundred keys. */
#define TOL_ATTN 1e-5
/* moe_route scores and weights: sigmoid's expf only (then a sum of k and a division). */
#define TOL_ROUTE 1e-6

/* ---- random numbers and seeds ------------------------------------------------------------ */

static uint64_t base_seed = 0x6e656d6f74726f6eull, rng_state = 1, case_seed;
static int case_no;

static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static float uni(float lo, float hi) { return lo + (hi - lo) * (float)((double)(rnd() >> 40) / 16777216.0); }
static int below(int n) { return (int)(rnd() % (uint64_t)n); }
/* Magnitude in [lo, hi] (lo > 0: never zero), random sign. */
static float sval(float lo, float hi) { return (rnd() & 1) ? uni(lo, hi) : -uni(lo, hi); }

/* Each case starts its own stream, so one case reproduces without the ones before it. */
static void new_case(void) {
    case_seed = base_seed + 0x9E3779B97F4A7C15ull * (uint64_t)++case_no;
    rng_state = case_seed ? case_seed : 1;
}

/* ---- the two backends and their memory ----------------------------------------------------- */

/* EAGER: a second CUDA backend with graphs off, made for test_replay only. */
enum { CPU, GPU, EAGER };
static struct nt_backend *BE[3];
static int float_exact; /* the CPU's float products are its AVX2 FMA chains, which CUDA follows */
/* The backend is tests/emu's host emulation (make test): the full-size shapes, minutes there and
 * no coverage the smaller ones lack, are left to the GPU. */
static int emulated;

/* What a group of cases allocated: host scratch (free) and CPU-resident buffers (release). CUDA
 * uploads live until the backend is destroyed, so the CUDA backend is remade per group. */
static void **host_list, **cpu_list;
static size_t n_host, n_cpu, cap_host, cap_cpu;

static void die(const char *msg) {
    fprintf(stderr, "gpu_test_ops: %s\n", msg);
    exit(1);
}

static void track(void ***list, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *list = realloc(*list, *cap * sizeof **list);
        if (!*list) die("out of host memory");
    }
    (*list)[(*n)++] = p;
}

static void *hmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("out of host memory");
    track(&host_list, &n_host, &cap_host, p);
    return p;
}

static void new_gpu(void) {
    struct nt_err err;
    memset(&err, 0, sizeof err);
    if (nt_cuda_backend_new(0, &BE[GPU], &err) != NEMOTRON_OK) die(err.msg);
}

static void group_end(void) {
    for (size_t i = 0; i < n_cpu; i++) BE[CPU]->ops->release(BE[CPU], cpu_list[i]);
    for (size_t i = 0; i < n_host; i++) free(host_list[i]);
    n_cpu = n_host = 0;
    BE[GPU]->ops->destroy(BE[GPU]);
    new_gpu();
}

/* A resident copy of host bytes on side s. */
static void *put(int s, const void *host, size_t bytes) {
    struct nt_backend *be = BE[s];
    void *p;
    if (s == CPU) {
        p = be->ops->alloc(be, bytes);
        if (p) {
            memcpy(p, host, bytes);
            track(&cpu_list, &n_cpu, &cap_cpu, p);
        }
    } else {
        p = (void *)be->ops->upload(be, host, bytes);
    }
    if (!p) {
        fprintf(stderr, "gpu_test_ops: %s: no memory for %zu bytes: %s\n", be->ops->name, bytes, be->alloc_error);
        exit(1);
    }
    return p;
}

/* One buffer on each side with the same bytes. */
struct twin {
    void *p[3];
};
static struct twin twin_in(const void *host, size_t bytes) {
    struct twin t = {{NULL, NULL, NULL}};
    for (int s = 0; s < 3; s++)
        if (BE[s]) t.p[s] = put(s, host, bytes);
    return t;
}
#define POISON 0xFFFFFFFFu
static struct twin twin_poison(size_t bytes) {
    void *h = hmalloc(bytes);
    memset(h, 0xFF, bytes);
    return twin_in(h, bytes);
}
static void *back(int s, const void *p, size_t bytes) {
    void *h = hmalloc(bytes);
    BE[s]->ops->to_host(BE[s], h, p, bytes);
    return h;
}
static float *F(struct twin t, int s) { return (float *)t.p[s]; }

/* The attention scratch each backend asks for, poisoned (its contents must never matter). */
static struct twin twin_attn_scratch(const struct nt_attn_dims *d) {
    size_t most = 1;
    for (int s = 0; s < 3; s++)
        if (BE[s]) {
            size_t f = BE[s]->ops->attention_scratch_floats(BE[s], d);
            if (f > most) most = f;
        }
    return twin_poison(most * 4);
}

/* A pass of n positions at pos0 on side s, with poisoned scratch of the size the backend asks
 * for (its contents must never matter) and tokens (all 0 when none are given). */
static struct nt_pass make_pass(int s, int n, int pos0, int64_t max_cols, const int32_t *tokens) {
    if (!tokens) {
        int32_t *z = hmalloc((size_t)n * sizeof *z);
        memset(z, 0, (size_t)n * sizeof *z);
        tokens = z;
    }
    size_t sb = BE[s]->ops->pass_scratch_bytes(BE[s], max_cols, n);
    void *h = hmalloc(sb);
    memset(h, 0xFF, sb);
    return (struct nt_pass){.n = n, .pos0 = pos0, .tokens = tokens, .scratch = put(s, h, sb)};
}

/* Every operation runs between begin_pass and end_pass, as in forward.c (the CUDA backend reads
 * pos0 and the tokens from the scratch that begin_pass fills, and may capture a pass kind into a
 * graph on its second run). begin() opens a pass with a scratch of its own, so each operation
 * here runs eagerly; test_replay checks captured programs. */
static struct nt_pass open_pass[2];
static const struct nt_pass *begin_kind(int s, int n, int pos0, int64_t max_cols, const int32_t *tokens, int snap) {
    open_pass[s] = make_pass(s, n, pos0, max_cols, tokens);
    open_pass[s].snap = snap;
    BE[s]->ops->begin_pass(BE[s], &open_pass[s]);
    return &open_pass[s];
}
static const struct nt_pass *begin(int s, int n, int pos0, int64_t max_cols, const int32_t *tokens) {
    return begin_kind(s, n, pos0, max_cols, tokens, 0);
}
static void end(int s) { BE[s]->ops->end_pass(BE[s], &open_pass[s]); }

/* ---- comparing ----------------------------------------------------------------------------- */

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* rows x cols floats of ref and got (row stride `stride`): per row ||got - ref|| / ||ref|| (the
 * absolute norm where ref is all zero); tol == 0: identical bits. Every element of got (and of
 * ref) must have been written and be finite. One line either way; returns 1 when it holds. */
static int compare(const char *what, const char *rn, const float *ref, const char *gn, const float *got,
                   int rows, int cols, size_t stride, double tol) {
    double worst = -1;
    int wr = 0, wc = 0, fr = -1, fc = -1, ur = -1, uc = -1, nr = -1, nc = -1;
    long ndiff = 0, nunw = 0, nbad = 0, unw_ref = 0, unw_got = 0;
    for (int r = 0; r < rows; r++) {
        double num = 0, den = 0, big = -1;
        int bc = 0;
        for (int c = 0; c < cols; c++) {
            float a = ref[(size_t)r * stride + c], b = got[(size_t)r * stride + c];
            if (bits(a) == POISON || bits(b) == POISON) {
                if (!nunw++) ur = r, uc = c;
                unw_ref += bits(a) == POISON;
                unw_got += bits(b) == POISON;
                continue;
            }
            if (!isfinite(a) || !isfinite(b)) {
                if (!nbad++) nr = r, nc = c;
                continue;
            }
            if (bits(a) != bits(b) && !ndiff++) fr = r, fc = c;
            double d = (double)b - (double)a;
            num += d * d;
            den += (double)a * a;
            if (fabs(d) > big) big = fabs(d), bc = c;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst) worst = rel, wr = r, wc = bc;
    }
    int ok = nunw == 0 && nbad == 0 && (tol == 0 ? ndiff == 0 : worst <= tol);
    test_checks++;
    if (!ok) test_failures++;
    printf("%s %s [seed %016llx]: %s vs %s, %dx%d: worst row %d rel %.3g (tol %g%s)", ok ? "ok  " : "FAIL", what,
           (unsigned long long)case_seed, gn, rn, rows, cols, wr, worst, tol, tol == 0 ? ": identical bits" : "");
    if (nunw)
        printf("; elements never written (poison left): %ld by %s, %ld by %s; first row %d col %d", unw_got, gn,
               unw_ref, rn, ur, uc);
    if (nbad)
        printf("; %ld non-finite, first row %d col %d: %s %.9g %s %.9g", nbad, nr, nc, rn,
               ref[(size_t)nr * stride + nc], gn, got[(size_t)nr * stride + nc]);
    if (!ok && ndiff) {
        /* the worst element of the worst row; for exact checks also the first differing one */
        int r = tol == 0 && worst == 0 ? fr : wr, c = tol == 0 && worst == 0 ? fc : wc;
        float a = ref[(size_t)r * stride + c], b = got[(size_t)r * stride + c];
        printf("; %ld of %ld elements differ; row %d col %d: %s %.9g (0x%08x) %s %.9g (0x%08x)", ndiff,
               (long)rows * cols, r, c, rn, a, bits(a), gn, b, bits(b));
        if (tol == 0 && (fr != r || fc != c))
            printf("; first difference row %d col %d", fr, fc);
    }
    printf("\n");
    fflush(stdout);
    return ok;
}

static int compare_cuda(const char *what, const float *cpu, const float *cuda, int rows, int cols, size_t stride,
                        double tol) {
    return compare(what, "cpu", cpu, "cuda", cuda, rows, cols, stride, tol);
}

/* Nothing outside the output was written: columns cols..stride-1 of rows < rows, and rows
 * rows..total_rows-1 entirely, still hold the poison. */
static void untouched(const char *what, int s, const float *y, int rows, int cols, size_t stride, int total_rows) {
    long bad = 0;
    int br = -1, bc = -1;
    for (int r = 0; r < total_rows; r++)
        for (size_t c = r < rows ? (size_t)cols : 0; c < stride; c++)
            if (bits(y[(size_t)r * stride + c]) != POISON && !bad++) br = r, bc = (int)c;
    CHECK(bad == 0, "%s [seed %016llx]: %s wrote %ld elements outside its output (rows %d, cols %d, stride %zu, "
          "%d rows allocated), first row %d col %d = %.9g", what, (unsigned long long)case_seed,
          s == CPU ? "cpu" : "cuda", bad, rows, cols, stride, total_rows, br, bc,
          bad ? y[(size_t)br * stride + bc] : 0.0f);
}

/* Integer results (argmax, expert indices): identical. */
static void compare_i32(const char *what, const int32_t *cpu, const int32_t *cuda, int rows, int cols) {
    int bad = -1;
    for (int i = 0; i < rows * cols && bad < 0; i++)
        if (cpu[i] != cuda[i]) bad = i;
    test_checks++;
    if (bad >= 0) test_failures++;
    printf("%s %s [seed %016llx]: cuda vs cpu, %dx%d integers", bad < 0 ? "ok  " : "FAIL", what,
           (unsigned long long)case_seed, rows, cols);
    if (bad >= 0) {
        int r = bad / cols;
        printf("; row %d differs:\n     cpu ", r);
        for (int c = 0; c < cols && c < 16; c++) printf(" %d", cpu[r * cols + c]);
        printf("\n     cuda");
        for (int c = 0; c < cols && c < 16; c++) printf(" %d", cuda[r * cols + c]);
    }
    printf("\n");
    fflush(stdout);
}

/* ---- weights ------------------------------------------------------------------------------- */

static void put_f16(uint8_t *p, float v) {
    uint16_t h = nt_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* A random rows x cols matrix of llama.cpp's block type dt: random code bytes; block scales (d,
 * m, dmin) as f16 of +-[0.002, 0.02] (K-quants: [0.0005, 0.002], their 6-bit sub-scales reach
 * 63), MXFP4 exponents 2^-8 .. 2^-5; the K-quants' packed sub-scales and Q6_K's int8 ones as
 * the random bytes leave them. */
static uint8_t *random_ggml(enum nt_dtype dt, int64_t rows, int64_t cols, size_t *bytes) {
    int el = 0, bb = 0;
    nt_ggml_block_facts(dt, &el, &bb, NULL);
    size_t nblk = (size_t)(rows * cols / el);
    *bytes = nblk * (size_t)bb;
    uint8_t *p = hmalloc(*bytes);
    for (size_t i = 0; i < *bytes; i++) p[i] = (uint8_t)rnd();
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *blk = p + b * (size_t)bb;
        switch (dt) {
        case NT_DTYPE_GGML_MXFP4: blk[0] = (uint8_t)(120 + below(4)); break;
        case NT_DTYPE_GGML_Q4_K:
        case NT_DTYPE_GGML_Q5_K:
            put_f16(blk, uni(0.0005f, 0.002f));
            put_f16(blk + 2, uni(0.0005f, 0.002f));
            break;
        case NT_DTYPE_GGML_Q6_K: put_f16(blk + 208, sval(0.0005f, 0.002f)); break;
        default:
            put_f16(blk, sval(0.002f, 0.02f));
            if (dt == NT_DTYPE_GGML_Q4_1 || dt == NT_DTYPE_GGML_Q5_1) put_f16(blk + 2, sval(0.002f, 0.02f));
        }
    }
    return p;
}

/* W (f32, rows x cols) in dtype dt: the stored bytes, into *bytes (a block type: random blocks,
 * W unused). */
static uint8_t *pack(enum nt_dtype dt, const float *W, int64_t rows, int64_t cols, size_t *bytes) {
    size_t cnt = (size_t)(rows * cols);
    uint8_t *p;
    if (nt_dtype_is_ggml_block(dt)) {
        p = random_ggml(dt, rows, cols, bytes);
    } else if (dt == NT_DTYPE_Q8_2F || dt == NT_DTYPE_Q4TP) {
        *bytes = (size_t)nt_matrix_bytes(dt, rows, cols);
        p = hmalloc(*bytes);
        nt_quantize_matrix(dt, W, rows, cols, p);
    } else if (dt == NT_DTYPE_F32) {
        *bytes = cnt * 4;
        p = hmalloc(*bytes);
        memcpy(p, W, *bytes);
    } else {
        *bytes = cnt * 2;
        p = hmalloc(*bytes);
        for (size_t i = 0; i < cnt; i++) {
            uint16_t h = dt == NT_DTYPE_F16 ? nt_f32_to_f16(W[i]) : nt_f32_to_bf16(W[i]);
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return p;
}

/* A random rows x cols matrix in dtype dt on both sides: weights +-[0.005, 0.05] with one in
 * 64 eight times larger (outliers stretch the q8_2f column field and the q4tp group scales). */
static void random_matrix(enum nt_dtype dt, int rows, int cols, struct nt_matrix W[2]) {
    float *Wf = hmalloc((size_t)rows * cols * sizeof *Wf);
    for (size_t i = 0; i < (size_t)rows * cols; i++) Wf[i] = sval(0.005f, 0.05f) * (below(64) ? 1.0f : 8.0f);
    size_t nb;
    uint8_t *p = pack(dt, Wf, rows, cols, &nb);
    for (int s = 0; s < 2; s++)
        W[s] = (struct nt_matrix){.dtype = dt, .rows = rows, .cols = cols, .data = put(s, p, nb), .name = "test.W"};
}

static float *random_vec(size_t n, float lo, float hi) {
    float *v = hmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = sval(lo, hi);
    return v;
}

static int is_packed(enum nt_dtype dt) { return dt == NT_DTYPE_Q8_2F || dt == NT_DTYPE_Q4TP; }
/* int8 activations: the packed formats and the block types */
static int quantizes(enum nt_dtype dt) { return is_packed(dt) || nt_dtype_is_ggml_block(dt); }
/* The block types follow the CPU's lane arithmetic term for term (docs/FORMATS-GGUF.md): its bits. */
static double product_tol(enum nt_dtype dt) {
    return nt_dtype_is_ggml_block(dt) ? TOL_EXACT : is_packed(dt) ? TOL_PACKED : float_exact ? TOL_EXACT : TOL_MATMUL_SCALAR;
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* The CUDA pass of matmul_case again with a test switch of the backend on (sw: nt_cuda_*_reference),
 * bit for bit against the first run's rows want. */
static void matmul_switched(void (*sw)(int), const char *what, const char *label, const float *want, int pass_n,
                            int n, const struct nt_matrix *W, const float *bias, enum nt_act act, const float *x,
                            int xs, int ys) {
    struct nt_backend *be = BE[GPU];
    struct twin yr = twin_poison((size_t)pass_n * ys * 4);
    sw(1);
    const struct nt_pass *p = begin(GPU, pass_n, 0, W->cols, NULL);
    be->ops->matmul(be, p, n, W, bias, act, x, xs, F(yr, GPU), ys);
    end(GPU);
    sw(0);
    char w1[240], gn[80];
    snprintf(w1, sizeof w1, "%s: %s", what, label);
    snprintf(gn, sizeof gn, "cuda %s", label);
    compare(w1, "cuda pass", want, gn, back(GPU, yr.p[GPU], (size_t)pass_n * ys * 4), n, (int)W->rows, (size_t)ys,
            TOL_EXACT);
}

/* y = act(W x + b) for n of a pass of pass_n positions. Activations +-[0.02, 1] with one in 50
 * thirty times larger; for the packed formats position 0's second block is all zero (inv = 0)
 * and position 1's first block too small for 127 / amax to be finite. Stride padding and rows
 * past n hold NaN: read, they would show in the output. With `invariance`, CUDA also runs every
 * position as a pass of 1, and packed products on the reference kernel: the same bits. */
static void matmul_case(enum nt_dtype dt, int rows, int cols, int n, int pass_n, int strided, int with_bias,
                        enum nt_act act, int invariance) {
    new_case();
    int xs = cols + (strided ? 5 : 0), ys = rows + (strided ? 3 : 0);
    char what[200];
    snprintf(what, sizeof what, "matmul %s %dx%d n=%d/%d xs=%d ys=%d%s%s", nt_dtype_name(dt), rows, cols, n, pass_n,
             xs, ys, with_bias ? " bias" : "", act == NT_ACT_RELU2 ? " relu2" : "");
    struct nt_matrix W[2];
    random_matrix(dt, rows, cols, W);
    struct twin bias = {{NULL, NULL, NULL}};
    if (with_bias) bias = twin_in(random_vec((size_t)rows, 0.01f, 0.5f), (size_t)rows * 4);
    float *x = hmalloc((size_t)pass_n * xs * sizeof *x);
    for (int t = 0; t < pass_n; t++)
        for (int c = 0; c < xs; c++)
            x[(size_t)t * xs + c] = t < n && c < cols ? sval(0.02f, 1.0f) * (below(50) ? 1.0f : 30.0f) : NAN;
    if (quantizes(dt) && cols >= 64)
        for (int c = 32; c < 64; c++) x[c] = 0.0f;
    if (quantizes(dt) && n > 1)
        for (int c = 0; c < 32 && c < cols; c++) x[(size_t)xs + c] = 1e-38f * (c % 3 ? 1.0f : -1.0f);
    struct twin xt = twin_in(x, (size_t)pass_n * xs * 4), yt = twin_poison((size_t)pass_n * ys * 4);
    for (int s = 0; s < 2; s++) {
        const struct nt_pass *p = begin(s, pass_n, 0, cols, NULL);
        BE[s]->ops->matmul(BE[s], p, n, &W[s], F(bias, s), act, F(xt, s), xs, F(yt, s), ys);
        end(s);
    }
    float *y[2];
    for (int s = 0; s < 2; s++) y[s] = back(s, yt.p[s], (size_t)pass_n * ys * 4);
    compare_cuda(what, y[CPU], y[GPU], n, rows, (size_t)ys, product_tol(dt));
    for (int s = 0; s < 2; s++) untouched(what, s, y[s], n, rows, (size_t)ys, pass_n);
    /* decode.cu's passes of 2 .. 16 (packed: k_decode_multi up to DM_MAX_N; float weights
     * k_float_rows) against products.cu's kernels for longer passes (k_gemv / k_mma, k_float_product) */
    if (!nt_dtype_is_ggml_block(dt) && n >= 2 && n <= 16)
        matmul_switched(nt_cuda_multi_reference, what, "products.cu's kernels", y[GPU], pass_n, n, &W[GPU],
                        F(bias, GPU), act, F(xt, GPU), xs, ys);
    /* products.cu's wide tensor-core kernel (plain q8_2f passes whose blocks fill the SMs) wherever
     * the tensor cores run, against the kernel the pass chose: on a GPU this pass's shapes take it
     * only when forced */
    if (dt == NT_DTYPE_Q8_2F && n >= 13) /* (2 .. 12: decode.cu's k_decode_multi) */
        matmul_switched(nt_cuda_mma_wide_always, what, "k_mma_wide", y[GPU], pass_n, n, &W[GPU], F(bias, GPU), act,
                        F(xt, GPU), xs, ys);
    if (!invariance) return;
    struct nt_backend *be = BE[GPU];
    /* one arithmetic per position: the same rows from passes of one position */
    struct twin y1 = twin_poison((size_t)pass_n * ys * 4);
    for (int t = 0; t < n; t++) {
        const struct nt_pass *p = begin(GPU, 1, t, cols, NULL);
        be->ops->matmul(be, p, 1, &W[GPU], F(bias, GPU), act, F(xt, GPU) + (size_t)t * xs, xs,
                        F(y1, GPU) + (size_t)t * ys, ys);
        end(GPU);
    }
    char w1[240];
    snprintf(w1, sizeof w1, "%s: one arithmetic per position", what);
    compare(w1, "cuda pass", y[GPU], "cuda passes of 1", back(GPU, y1.p[GPU], (size_t)pass_n * ys * 4), n, rows,
            (size_t)ys, TOL_EXACT);
    /* the fast packed kernels against the reference kernel, the whole pass at once (not on the
     * full-size expert: the reference kernel is slow, in the host emulation above all) */
    if (!is_packed(dt) || (int64_t)rows * cols * n > 50000000) return;
    matmul_switched(nt_cuda_packed_reference, what, "reference kernel", y[GPU], pass_n, n, &W[GPU], F(bias, GPU), act,
                    F(xt, GPU), xs, ys);
}

static void test_matmul(void) {
    static const struct {
        int rows, cols;
    } shapes[] = {
        {67, 2688},   /* Nano's hidden size as cols: a multiple of 32, not of 256 */
        {131, 1856},  /* odd rows; Nano's expert width as cols */
        {2688, 1856}, /* a full-size expert down projection */
        {33, 100},    /* q8_2f with cols % 32 != 0 (a short last block of 4) */
        {5, 37},      /* float only: 5 tail columns past the 8-lane chains */
        {3, 4},       /* q8_2f: a single short block */
        {70, 4096},   /* Nano's out_proj width: at one position quantized once (decode.cu) */
        {19, 512},    /* the K-quants' 256-column blocks, small */
    };
    static const enum nt_dtype dts[] = {NT_DTYPE_F32, NT_DTYPE_F16, NT_DTYPE_BF16, NT_DTYPE_Q8_2F, NT_DTYPE_Q4TP,
                                        NT_DTYPE_GGML_Q8_0, NT_DTYPE_GGML_Q4_0, NT_DTYPE_GGML_Q4_1,
                                        NT_DTYPE_GGML_Q5_0, NT_DTYPE_GGML_Q5_1, NT_DTYPE_GGML_IQ4_NL,
                                        NT_DTYPE_GGML_MXFP4, NT_DTYPE_GGML_Q4_K, NT_DTYPE_GGML_Q5_K,
                                        NT_DTYPE_GGML_Q6_K};
    static const int ns[] = {1, 3, 17, 64, 40};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
            int rows = shapes[si].rows, cols = shapes[si].cols;
            enum nt_dtype dt = dts[di];
            int el = 0;
            if (nt_ggml_block_facts(dt, &el, NULL, NULL) ? cols % el != 0 : !nt_format_accepts(dt, rows, cols, NULL))
                continue;
            /* the block types on the emulation: the small shapes (the big ones repeat them) */
            if (el && emulated && rows * cols > 300000) continue;
            if (emulated && rows * cols > 1000000) continue;
            for (int i = 0; i < 5; i++) {
                if (rows * cols > 1000000 && (i == 1 || i == 2)) continue; /* the big one: n = 1, 64, 40 */
                /* bias on odd i, relu^2 from i = 2, strides on i = 1 and 3; n = 64 fills the pass; n = 40
                 * unstrided: f32 runs k_float_tile (a whole and a partial block of positions) */
                matmul_case(dt, rows, cols, ns[i], 64, i & 1, i & 1, i >= 2 ? NT_ACT_RELU2 : NT_ACT_NONE,
                            ns[i] >= 40 || (ns[i] > 1 && quantizes(dt)));
            }
            group_end();
        }
}

/* Passes of 2 .. 16 positions (a verify pass: decode.cu's k_decode_multi to DM_MAX_N, k_float_rows) at every
 * n, in passes of 16: both packed formats with rows that leave a short last tile (odd counts; 8 KB
 * tiles of 3, 6, 4, 8, 2 rows ... at these widths), tiles limited by 256 chains (the narrow
 * shape), Nano's out_proj width (4096: shared-memory rows padded); float weights with tail
 * columns and the router's shape; strides, bias and relu^2 in turn. Each against the CPU,
 * products.cu's kernels of longer passes bit for bit, and for some n (every n on a GPU) passes of
 * one position (and the reference kernel) bit for bit. */
static void test_matmul_multi(void) {
    static const struct {
        enum nt_dtype dt;
        int rows, cols;
    } cases[] = {
        {NT_DTYPE_Q8_2F, 67, 2688}, {NT_DTYPE_Q4TP, 67, 2688}, {NT_DTYPE_Q8_2F, 131, 1856}, {NT_DTYPE_Q4TP, 131, 1856},
        {NT_DTYPE_Q8_2F, 70, 4096}, {NT_DTYPE_Q4TP, 70, 4096}, {NT_DTYPE_Q8_2F, 45, 256},   {NT_DTYPE_Q4TP, 45, 256},
        {NT_DTYPE_F32, 128, 2688},  {NT_DTYPE_BF16, 5, 37},    {NT_DTYPE_F16, 19, 100},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        for (int n = 2; n <= 16; n++) {
            int inv = !emulated || n == 2 || n == 5 || n == 9 || n == 16;
            matmul_case(cases[ci].dt, cases[ci].rows, cases[ci].cols, n, 16, (int)((n + ci / 2) & 1), n % 3 != 0,
                        (n / 2 + (int)ci) & 1 ? NT_ACT_RELU2 : NT_ACT_NONE, inv);
        }
        group_end();
    }
}

/* ---- embed, norms, add, argmax -------------------------------------------------------------- */

static void test_embed(enum nt_dtype dt, int V, int H, int n) {
    new_case();
    char what[120];
    snprintf(what, sizeof what, "embed %s V=%d H=%d n=%d", nt_dtype_name(dt), V, H, n);
    float *Ef = random_vec((size_t)V * H, 0.001f, 2.0f);
    size_t nb;
    uint8_t *p = pack(dt, Ef, V, H, &nb);
    struct nt_matrix E[2];
    for (int s = 0; s < 2; s++)
        E[s] = (struct nt_matrix){.dtype = dt, .rows = V, .cols = H, .data = put(s, p, nb), .name = "test.emb"};
    int32_t *tok = hmalloc((size_t)n * sizeof *tok);
    for (int t = 0; t < n; t++) tok[t] = t == 0 ? V - 1 : t == 1 ? 0 : t % 5 == 2 ? tok[t - 1] : below(V);
    struct twin h = twin_poison((size_t)n * H * 4);
    for (int s = 0; s < 2; s++) {
        BE[s]->ops->embed(BE[s], begin(s, n, 0, H, tok), &E[s], F(h, s));
        end(s);
    }
    compare_cuda(what, back(CPU, h.p[CPU], (size_t)n * H * 4), back(GPU, h.p[GPU], (size_t)n * H * 4), n, H,
                 (size_t)H, TOL_EXACT);
}

static void test_norms(int H, int n) {
    new_case();
    char what[120];
    float eps = 1e-5f;
    /* rows of different scales: 1e-3 .. 30 */
    float *h = hmalloc((size_t)n * H * sizeof *h);
    for (int t = 0; t < n; t++) {
        float scale = powf(10.0f, uni(-3.0f, 1.5f));
        for (int i = 0; i < H; i++) h[(size_t)t * H + i] = sval(0.01f, 1.0f) * scale;
    }
    float *o = random_vec((size_t)n * H, 0.01f, 1.0f), *w = random_vec((size_t)H, 0.2f, 2.0f);
    float *o2 = random_vec((size_t)n * H, 0.01f, 1.0f);
    size_t bytes = (size_t)n * H * 4;
    struct twin ht = twin_in(h, bytes), ot = twin_in(o, bytes), wt = twin_in(w, (size_t)H * 4);
    struct twin h2t = twin_in(h, bytes), o2t = twin_in(o2, bytes);
    /* rmsnorm writes rows 2H apart (as the MTP step's two norms side by side) */
    struct twin y1 = twin_poison(2 * bytes), y2 = twin_poison(bytes), y3 = twin_poison(bytes);
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        const struct nt_pass *p = begin(s, n, 0, H, NULL);
        be->ops->rmsnorm(be, p, F(ht, s), F(wt, s), H, eps, F(y1, s), 2 * H);
        be->ops->add_rmsnorm(be, p, F(ht, s), F(ot, s), NULL, F(wt, s), H, eps, F(y2, s));
        /* a MoE layer's: h += (o + shared) */
        be->ops->add_rmsnorm(be, p, F(h2t, s), F(ot, s), F(o2t, s), F(wt, s), H, eps, F(y3, s));
        end(s);
    }
    snprintf(what, sizeof what, "rmsnorm H=%d n=%d, rows 2H apart", H, n);
    const float *y1s[2] = {back(CPU, y1.p[CPU], 2 * bytes), back(GPU, y1.p[GPU], 2 * bytes)};
    compare_cuda(what, y1s[CPU], y1s[GPU], n, H, 2 * (size_t)H, TOL_NORM);
    for (int s = 0; s < 2; s++) untouched(what, s, y1s[s], n, H, 2 * (size_t)H, n);
    snprintf(what, sizeof what, "add_rmsnorm H=%d n=%d: h += o", H, n);
    compare_cuda(what, back(CPU, ht.p[CPU], bytes), back(GPU, ht.p[GPU], bytes), n, H, (size_t)H, TOL_EXACT);
    snprintf(what, sizeof what, "add_rmsnorm H=%d n=%d: y", H, n);
    compare_cuda(what, back(CPU, y2.p[CPU], bytes), back(GPU, y2.p[GPU], bytes), n, H, (size_t)H, TOL_NORM);
    snprintf(what, sizeof what, "add_rmsnorm H=%d n=%d: h += (o + o2)", H, n);
    compare_cuda(what, back(CPU, h2t.p[CPU], bytes), back(GPU, h2t.p[GPU], bytes), n, H, (size_t)H, TOL_EXACT);
    snprintf(what, sizeof what, "add_rmsnorm H=%d n=%d: y of h + (o + o2)", H, n);
    compare_cuda(what, back(CPU, y3.p[CPU], bytes), back(GPU, y3.p[GPU], bytes), n, H, (size_t)H, TOL_NORM);
}

/* Rows: random; the maximum at three places (the lowest wins); all equal (degenerate: -1); the
 * maximum last; all -inf (-1); NaN at index 0 and in the middle, the maximum elsewhere (-1); all
 * NaN (-1); all equal but a smaller last value (not degenerate: 0); one +inf (-1); then random
 * rows with a tie of two. */
static void test_argmax(int V, int n) {
    new_case();
    char what[120];
    snprintf(what, sizeof what, "argmax vocab=%d n=%d (ties: lowest index)", V, n);
    float *l = random_vec((size_t)n * V, 0.001f, 8.0f);
    for (int t = 0; t < n; t++) {
        float *r = l + (size_t)t * V;
        switch (t) {
        case 1: r[V / 7] = r[V / 2] = r[V - 2] = 20.0f; break;
        case 2: for (int i = 0; i < V; i++) r[i] = -3.5f; break;
        case 3: r[V - 1] = 20.0f; break;
        case 4: for (int i = 0; i < V; i++) r[i] = -INFINITY; break;
        case 5: r[0] = r[V / 3] = NAN; r[V / 5] = 30.0f; break;
        case 6: for (int i = 0; i < V; i++) r[i] = NAN; break;
        case 7: for (int i = 0; i < V; i++) r[i] = i < V - 1 ? 2.0f : 1.0f; break;
        case 8: r[V / 3] = INFINITY; break;
        default: if (t > 0) { int a = below(V), b = below(V); r[a] = r[b] = 9.0f; } break;
        }
    }
    struct twin lt = twin_in(l, (size_t)n * V * 4), ot = twin_poison((size_t)n * 4);
    for (int s = 0; s < 2; s++) {
        begin(s, n, 0, 64, NULL);
        BE[s]->ops->argmax(BE[s], n, F(lt, s), V, (int32_t *)ot.p[s]);
        end(s);
    }
    const int32_t *cpu = back(CPU, ot.p[CPU], (size_t)n * 4);
    compare_i32(what, cpu, back(GPU, ot.p[GPU], (size_t)n * 4), n, 1);
    /* the cpu's answers for the rows made degenerate or nearly so (compare_i32: the GPU's are the same) */
    const int expect[9] = {-2, V / 7, -1, V - 1, -1, -1, -1, 0, -1}; /* -2: not pinned (random) */
    for (int t = 0; t < n && t < 9; t++)
        if (expect[t] != -2) CHECK(cpu[t] == expect[t], "%s: row %d: the cpu's argmax is %d, not %d", what, t, cpu[t], expect[t]);
}

/* write (host bytes into a resident buffer) and copy (resident to resident), outside a pass:
 * count random floats written at an offset into a poisoned buffer, then copied to an offset of a
 * second one; both read back bit for bit, and nothing around either range touched. */
static void test_copy_write(size_t count) {
    new_case();
    size_t pad = 37, total = count + 2 * pad;
    float *src = random_vec(count, 0.001f, 100.0f);
    struct twin a = twin_poison(total * 4), b = twin_poison(total * 4);
    char what[120];
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        be->ops->write(be, F(a, s) + pad, src, count * 4);
        be->ops->copy(be, F(b, s) + pad, F(a, s) + pad, count * 4);
        float *ha = back(s, a.p[s], total * 4), *hb = back(s, b.p[s], total * 4);
        snprintf(what, sizeof what, "write %zu floats (%s)", count, s == CPU ? "cpu" : "cuda");
        compare(what, "host", src, "written", ha + pad, 1, (int)count, count, TOL_EXACT);
        untouched(what, s, ha, 0, 0, pad, 1);
        untouched(what, s, ha + pad + count, 0, 0, pad, 1);
        snprintf(what, sizeof what, "copy %zu floats (%s)", count, s == CPU ? "cpu" : "cuda");
        compare(what, "host", src, "copied", hb + pad, 1, (int)count, count, TOL_EXACT);
        untouched(what, s, hb, 0, 0, pad, 1);
        untouched(what, s, hb + pad + count, 0, 0, pad, 1);
    }
}

/* ---- Mamba-2 ------------------------------------------------------------------------------- */

struct mamba_cfg {
    const char *name;
    int H, nh, P, N, G, K;
    float dt_lo, dt_hi;
    int conv_bias;
};

/* A verify pass (nt_pass.snap) of the conv and the scan: the same outputs, ring and state bits as
 * the plain pass of 8 (xbc_8 ... st_8: test_mamba's results per side), and snapshot slot t equal
 * to the ring and state after t positions run one pass at a time (slot 0: the state carried in):
 * within one backend bit for bit, CUDA against the CPU as the plain pass. The slot past the pass
 * (the buffer holds T + 1) must stay unwritten. */
static void test_mamba_snap(const struct nt_mamba_dims *d, const struct nt_mamba_weights w[2], struct twin zt,
                            struct twin xin, const float *ring0, const float *state0, float *const xbc_8[2],
                            float *const ring_8[2], float *const y_8[2], float *const st_8[2], const char *pre) {
    enum { T = 8 };
    int K = d->K, CD = d->CD, I = d->I, nh = d->nh, hs = d->N * d->P;
    size_t ring_f = (size_t)(K - 1) * CD, state_f = (size_t)nh * hs;
    char what[200];
    struct twin ring = twin_in(ring0, ring_f * 4), state = twin_in(state0, state_f * 4);
    struct twin rsnap = twin_poison((T + 1) * ring_f * 4), ssnap = twin_poison((T + 1) * state_f * 4);
    struct twin xo = twin_poison((size_t)T * CD * 4), yo = twin_poison((size_t)T * I * 4);
    /* the one-position passes' ring and state after each position, per side */
    struct twin r1 = twin_in(ring0, ring_f * 4), s1 = twin_in(state0, state_f * 4);
    struct twin x1 = twin_poison((size_t)T * CD * 4), y1 = twin_poison((size_t)T * I * 4);
    float *ring_at[2][T], *state_at[2][T];
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        const struct nt_pass *p = begin_kind(s, T, 0, d->H, NULL, 1);
        be->ops->mamba_conv(be, p, d, &w[s], F(zt, s), F(ring, s), F(rsnap, s), F(xo, s));
        be->ops->mamba_scan(be, p, d, &w[s], F(zt, s), F(xin, s), F(state, s), F(ssnap, s), F(yo, s));
        end(s);
        for (int t = 0; t < T; t++) {
            ring_at[s][t] = back(s, r1.p[s], ring_f * 4);
            state_at[s][t] = back(s, s1.p[s], state_f * 4);
            p = begin(s, 1, t, d->H, NULL);
            be->ops->mamba_conv(be, p, d, &w[s], F(zt, s) + (size_t)t * d->zxd, F(r1, s), NULL, F(x1, s) + (size_t)t * CD);
            be->ops->mamba_scan(be, p, d, &w[s], F(zt, s) + (size_t)t * d->zxd, F(xin, s) + (size_t)t * CD, F(s1, s),
                                NULL, F(y1, s) + (size_t)t * I);
            end(s);
        }
    }
    float *rs[2], *ss[2];
    for (int s = 0; s < 2; s++) {
        const char *side = s == CPU ? "cpu" : "cuda";
        snprintf(what, sizeof what, "mamba verify pass %s n=8 (%s): xbc, y, ring and state as the plain pass", pre, side);
        compare(what, "plain", xbc_8[s], "verify", back(s, xo.p[s], (size_t)T * CD * 4), T, CD, (size_t)CD, TOL_EXACT);
        compare(what, "plain", y_8[s], "verify", back(s, yo.p[s], (size_t)T * I * 4), T, I, (size_t)I, TOL_EXACT);
        compare(what, "plain", ring_8[s], "verify", back(s, ring.p[s], ring_f * 4), K - 1, CD, (size_t)CD, TOL_EXACT);
        compare(what, "plain", st_8[s], "verify", back(s, state.p[s], state_f * 4), nh, hs, (size_t)hs, TOL_EXACT);
        rs[s] = back(s, rsnap.p[s], (T + 1) * ring_f * 4);
        ss[s] = back(s, ssnap.p[s], (T + 1) * state_f * 4);
        snprintf(what, sizeof what, "mamba verify pass %s (%s): snapshot slots t = 0..7 against passes of 1", pre, side);
        for (int t = 0; t < T; t++) {
            compare(what, "passes of 1", ring_at[s][t], "ring slot", rs[s] + t * ring_f, K - 1, CD, (size_t)CD, TOL_EXACT);
            compare(what, "passes of 1", state_at[s][t], "state slot", ss[s] + t * state_f, nh, hs, (size_t)hs,
                    TOL_EXACT);
        }
        snprintf(what, sizeof what, "mamba verify pass %s (%s): the slots past the pass", pre, side);
        untouched(what, s, rs[s] + T * ring_f, 0, 0, ring_f, 1);
        untouched(what, s, ss[s] + T * state_f, 0, 0, state_f, 1);
    }
    snprintf(what, sizeof what, "mamba verify pass %s: snapshot slots, cuda vs cpu", pre);
    compare_cuda(what, rs[CPU], rs[GPU], T * (K - 1), CD, (size_t)CD, TOL_EXACT);
    compare_cuda(what, ss[CPU], ss[GPU], T * nh, hs, (size_t)hs, TOL_SCAN);
}

/* One arithmetic per position across the scan's two shapes (mamba.cu: 4 threads a channel below
 * SCAN_WIDE_MIN positions, 8 from it, one tree over N either way): a pass of 40 positions against
 * the same positions in passes of 1, y and the state after, bit for bit; and against the CPU. */
static void test_scan_shapes(const struct nt_mamba_dims *d, const struct nt_mamba_weights *w, const float *state0,
                             const char *pre) {
    enum { TW = 40 };
    int CD = d->CD, I = d->I;
    float *zxd = random_vec((size_t)TW * d->zxd, 0.01f, 3.0f), *xbc = random_vec((size_t)TW * CD, 0.01f, 1.5f);
    size_t state_b = (size_t)d->nh * d->N * d->P * 4;
    struct twin zt = twin_in(zxd, (size_t)TW * d->zxd * 4), xt = twin_in(xbc, (size_t)TW * CD * 4);
    struct twin sa = twin_in(state0, state_b), sb = twin_in(state0, state_b);
    struct twin ya = twin_poison((size_t)TW * I * 4), yb = twin_poison((size_t)TW * I * 4);
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        be->ops->mamba_scan(be, begin(s, TW, 0, d->H, NULL), d, &w[s], F(zt, s), F(xt, s), F(sa, s), NULL, F(ya, s));
        end(s);
    }
    for (int t = 0; t < TW; t++) {
        BE[GPU]->ops->mamba_scan(BE[GPU], begin(GPU, 1, t, d->H, NULL), d, &w[GPU], F(zt, GPU) + (size_t)t * d->zxd,
                                 F(xt, GPU) + (size_t)t * CD, F(sb, GPU), NULL, F(yb, GPU) + (size_t)t * I);
        end(GPU);
    }
    char what[200];
    int hs = d->N * d->P;
    snprintf(what, sizeof what, "mamba_scan %s: a pass of %d against passes of 1 (the scan's two shapes), y", pre, TW);
    compare(what, "cuda passes of 1", back(GPU, yb.p[GPU], (size_t)TW * I * 4), "cuda pass", back(GPU, ya.p[GPU],
            (size_t)TW * I * 4), TW, I, (size_t)I, TOL_EXACT);
    snprintf(what, sizeof what, "mamba_scan %s: a pass of %d against passes of 1, state after", pre, TW);
    compare(what, "cuda passes of 1", back(GPU, sb.p[GPU], state_b), "cuda pass", back(GPU, sa.p[GPU], state_b), d->nh,
            hs, (size_t)hs, TOL_EXACT);
    snprintf(what, sizeof what, "mamba_scan %s n=%d: y", pre, TW);
    compare_cuda(what, back(CPU, ya.p[CPU], (size_t)TW * I * 4), back(GPU, ya.p[GPU], (size_t)TW * I * 4), TW, I,
                 (size_t)I, TOL_SCAN);
}

/* conv, scan and gated norm, each from identical inputs (the scan from the CPU's conv output,
 * the norm from the CPU's scan output), with random ring and state carried in: one pass of 8,
 * and passes of 5 and 3 that carry the ring and the state between them. */
static void test_mamba(const struct mamba_cfg *mc) {
    new_case();
    struct nt_mamba_dims d = {.H = mc->H, .nh = mc->nh, .P = mc->P, .N = mc->N, .G = mc->G, .K = mc->K,
                              .eps = 1e-5f, .dt_lo = mc->dt_lo, .dt_hi = mc->dt_hi};
    d.I = d.nh * d.P;
    d.CD = d.I + 2 * d.G * d.N;
    d.zxd = d.I + d.CD + d.nh;
    enum { T = 8, T1 = 5 };
    int K = d.K, CD = d.CD, I = d.I, nh = d.nh;
    /* weights: the vectors the three operations read */
    float *conv_w = random_vec((size_t)CD * K, 0.05f, 0.6f), *conv_b = random_vec((size_t)CD, 0.01f, 0.3f);
    float *dt_bias = hmalloc((size_t)nh * 4), *A = hmalloc((size_t)nh * 4), *D = hmalloc((size_t)nh * 4);
    for (int h = 0; h < nh; h++) {
        dt_bias[h] = uni(-4.0f, 0.5f);  /* softplus: dt from ~0.02 to ~1 */
        A[h] = -expf(uni(-0.5f, 2.5f)); /* A = -exp(A_log), weights.h: from -0.6 to -12 */
        D[h] = uni(0.5f, 1.5f);
    }
    float *norm_w = random_vec((size_t)I, 0.5f, 1.5f);
    struct nt_mamba_weights w[2];
    memset(w, 0, sizeof w);
    for (int s = 0; s < 2; s++) {
        w[s].conv_w = put(s, conv_w, (size_t)CD * K * 4);
        w[s].conv_b = mc->conv_bias ? put(s, conv_b, (size_t)CD * 4) : NULL;
        w[s].dt_bias = put(s, dt_bias, (size_t)nh * 4);
        w[s].A = put(s, A, (size_t)nh * 4);
        w[s].D = put(s, D, (size_t)nh * 4);
        w[s].norm_w = put(s, norm_w, (size_t)I * 4);
    }
    float *zxd = random_vec((size_t)T * d.zxd, 0.01f, 3.0f);
    struct twin zt = twin_in(zxd, (size_t)T * d.zxd * 4);
    size_t ring_b = (size_t)(K - 1) * CD * 4, state_b = (size_t)nh * d.N * d.P * 4;
    float *ring0 = random_vec((size_t)(K - 1) * CD, 0.01f, 2.0f);
    float *state0 = random_vec((size_t)nh * d.N * d.P, 0.001f, 0.5f);
    char what[200], pre[120];
    snprintf(pre, sizeof pre, "%s (nh %d P %d N %d G %d K %d)", mc->name, nh, d.P, d.N, d.G, K);

    /* conv */
    struct twin ra = twin_in(ring0, ring_b), rb = twin_in(ring0, ring_b);
    struct twin xa = twin_poison((size_t)T * CD * 4), xb = twin_poison((size_t)T * CD * 4);
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        be->ops->mamba_conv(be, begin(s, T, 0, d.H, NULL), &d, &w[s], F(zt, s), F(ra, s), NULL, F(xa, s));
        end(s);
        be->ops->mamba_conv(be, begin(s, T1, 0, d.H, NULL), &d, &w[s], F(zt, s), F(rb, s), NULL, F(xb, s));
        end(s);
        be->ops->mamba_conv(be, begin(s, T - T1, T1, d.H, NULL), &d, &w[s], F(zt, s) + (size_t)T1 * d.zxd,
                            F(rb, s), NULL, F(xb, s) + (size_t)T1 * CD);
        end(s);
    }
    float *xbc[2], *xbc2[2], *ring[2], *ring2[2];
    for (int s = 0; s < 2; s++) {
        xbc[s] = back(s, xa.p[s], (size_t)T * CD * 4);
        xbc2[s] = back(s, xb.p[s], (size_t)T * CD * 4);
        ring[s] = back(s, ra.p[s], ring_b);
        ring2[s] = back(s, rb.p[s], ring_b);
    }
    snprintf(what, sizeof what, "mamba_conv %s n=8: xbc", pre);
    compare_cuda(what, xbc[CPU], xbc[GPU], T, CD, (size_t)CD, TOL_CONV);
    snprintf(what, sizeof what, "mamba_conv %s n=8: ring after (raw inputs)", pre);
    compare_cuda(what, ring[CPU], ring[GPU], K - 1, CD, (size_t)CD, TOL_EXACT);
    snprintf(what, sizeof what, "mamba_conv %s: ring carried, xbc", pre);
    compare(what, "cuda pass of 8", xbc[GPU], "cuda passes 5+3", xbc2[GPU], T, CD, (size_t)CD, TOL_EXACT);
    compare(what, "cpu pass of 8", xbc[CPU], "cpu passes 5+3", xbc2[CPU], T, CD, (size_t)CD, TOL_EXACT);
    snprintf(what, sizeof what, "mamba_conv %s: ring carried, ring after", pre);
    compare(what, "cuda pass of 8", ring[GPU], "cuda passes 5+3", ring2[GPU], K - 1, CD, (size_t)CD, TOL_EXACT);

    /* scan, from the CPU's xbc on both sides */
    struct twin xin = twin_in(xbc[CPU], (size_t)T * CD * 4);
    struct twin sa = twin_in(state0, state_b), sb = twin_in(state0, state_b);
    struct twin ya = twin_poison((size_t)T * I * 4), yb = twin_poison((size_t)T * I * 4);
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        be->ops->mamba_scan(be, begin(s, T, 0, d.H, NULL), &d, &w[s], F(zt, s), F(xin, s), F(sa, s), NULL, F(ya, s));
        end(s);
        be->ops->mamba_scan(be, begin(s, T1, 0, d.H, NULL), &d, &w[s], F(zt, s), F(xin, s), F(sb, s), NULL, F(yb, s));
        end(s);
        be->ops->mamba_scan(be, begin(s, T - T1, T1, d.H, NULL), &d, &w[s], F(zt, s) + (size_t)T1 * d.zxd,
                            F(xin, s) + (size_t)T1 * CD, F(sb, s), NULL, F(yb, s) + (size_t)T1 * I);
        end(s);
    }
    float *y[2], *y2[2], *st[2], *st2[2];
    for (int s = 0; s < 2; s++) {
        y[s] = back(s, ya.p[s], (size_t)T * I * 4);
        y2[s] = back(s, yb.p[s], (size_t)T * I * 4);
        st[s] = back(s, sa.p[s], state_b);
        st2[s] = back(s, sb.p[s], state_b);
    }
    int hs = d.N * d.P; /* one head's state per compared row */
    snprintf(what, sizeof what, "mamba_scan %s dt [%g, %g] n=8: y", pre, d.dt_lo, d.dt_hi);
    compare_cuda(what, y[CPU], y[GPU], T, I, (size_t)I, TOL_SCAN);
    snprintf(what, sizeof what, "mamba_scan %s n=8: state after (rows = heads)", pre);
    compare_cuda(what, st[CPU], st[GPU], nh, hs, (size_t)hs, TOL_SCAN);
    snprintf(what, sizeof what, "mamba_scan %s: state carried, y", pre);
    compare(what, "cuda pass of 8", y[GPU], "cuda passes 5+3", y2[GPU], T, I, (size_t)I, TOL_EXACT);
    compare(what, "cpu passes 5+3", y2[CPU], "cuda passes 5+3", y2[GPU], T, I, (size_t)I, TOL_SCAN);
    snprintf(what, sizeof what, "mamba_scan %s: state carried, state after", pre);
    compare(what, "cuda pass of 8", st[GPU], "cuda passes 5+3", st2[GPU], nh, hs, (size_t)hs, TOL_EXACT);
    compare(what, "cpu passes 5+3", st2[CPU], "cuda passes 5+3", st2[GPU], nh, hs, (size_t)hs, TOL_SCAN);

    test_mamba_snap(&d, w, zt, xin, ring0, state0, xbc, ring, y, st, pre);
    test_scan_shapes(&d, w, state0, pre);

    /* gated norm, from the CPU's y on both sides */
    struct twin yin = twin_in(y[CPU], (size_t)T * I * 4), g = twin_poison((size_t)T * I * 4);
    for (int s = 0; s < 2; s++) {
        BE[s]->ops->mamba_gated_norm(BE[s], begin(s, T, 0, d.H, NULL), &d, &w[s], F(yin, s), F(zt, s), F(g, s));
        end(s);
    }
    snprintf(what, sizeof what, "mamba_gated_norm %s groups of %d n=8", pre, I / d.G);
    compare_cuda(what, back(CPU, g.p[CPU], (size_t)T * I * 4), back(GPU, g.p[GPU], (size_t)T * I * 4), T, I, (size_t)I,
                 TOL_GATED);
}

/* ---- attention ----------------------------------------------------------------------------- */

struct attn_cfg {
    const char *name;
    int nq, nkv, dh, n_ctx, pre;
};

/* A pass of `pre` positions fills the caches, then a pass of n at pos0 = pre attends to them.
 * The caches start poisoned: rows past a position's context must never be read (a NaN would
 * spread) nor written. Within CUDA, one pass of pre + n from 0 must give the second pass's rows
 * the same bits: a pass of up to 16 positions takes the tiles-in-parallel path and a long one the
 * sequential path (attention.cu), so this compares the two paths too. */
static void test_attention(const struct attn_cfg *ac, int n) {
    new_case();
    struct nt_attn_dims d = {.nq = ac->nq, .nkv = ac->nkv, .dh = ac->dh, .n_ctx = ac->n_ctx};
    int qw = d.nq * d.dh, kvw = d.nkv * d.dh, pre = ac->pre, tot = pre + n;
    char what[200];
    NT_ASSERT(tot <= d.n_ctx);
    /* q up to 3: scores of about unit spread, softmaxes from flat to peaked */
    struct twin q = twin_in(random_vec((size_t)tot * qw, 0.01f, 3.0f), (size_t)tot * qw * 4);
    struct twin k = twin_in(random_vec((size_t)tot * kvw, 0.01f, 1.0f), (size_t)tot * kvw * 4);
    struct twin v = twin_in(random_vec((size_t)tot * kvw, 0.01f, 1.0f), (size_t)tot * kvw * 4);
    size_t cb = (size_t)d.n_ctx * kvw * 4;
    struct twin kc = twin_poison(cb), vc = twin_poison(cb);
    struct twin o1 = twin_poison((size_t)pre * qw * 4), o2 = twin_poison((size_t)n * qw * 4);
    struct twin scr = twin_attn_scratch(&d);
    for (int s = 0; s < 2; s++) {
        struct nt_backend *be = BE[s];
        be->ops->attention(be, begin(s, pre, 0, qw, NULL), &d, F(q, s), F(k, s), F(v, s), F(kc, s), F(vc, s),
                           F(scr, s), F(o1, s));
        end(s);
        be->ops->attention(be, begin(s, n, pre, qw, NULL), &d, F(q, s) + (size_t)pre * qw,
                           F(k, s) + (size_t)pre * kvw, F(v, s) + (size_t)pre * kvw, F(kc, s), F(vc, s), F(scr, s),
                           F(o2, s));
        end(s);
    }
    snprintf(what, sizeof what, "attention %s (nq %d nkv %d dh %d ctx %d) prefill n=%d pos0=0", ac->name, d.nq, d.nkv,
             d.dh, d.n_ctx, pre);
    compare_cuda(what, back(CPU, o1.p[CPU], (size_t)pre * qw * 4), back(GPU, o1.p[GPU], (size_t)pre * qw * 4), pre, qw,
                 (size_t)qw, TOL_ATTN);
    float *out2[2];
    for (int s = 0; s < 2; s++) out2[s] = back(s, o2.p[s], (size_t)n * qw * 4);
    snprintf(what, sizeof what, "attention %s (nq %d nkv %d dh %d ctx %d) n=%d pos0=%d", ac->name, d.nq, d.nkv, d.dh,
             d.n_ctx, n, pre);
    compare_cuda(what, out2[CPU], out2[GPU], n, qw, (size_t)qw, TOL_ATTN);
    for (int c = 0; c < 2; c++) {
        struct twin cache = c ? vc : kc;
        float *h[2];
        for (int s = 0; s < 2; s++) h[s] = back(s, cache.p[s], cb);
        char wc[240];
        snprintf(wc, sizeof wc, "%s: %s cache", what, c ? "v" : "k");
        compare_cuda(wc, h[CPU], h[GPU], tot, kvw, (size_t)kvw, TOL_EXACT);
        for (int s = 0; s < 2; s++) untouched(wc, s, h[s], tot, kvw, (size_t)kvw, d.n_ctx);
    }
    /* within CUDA: the same positions in one pass from 0 */
    struct twin kc2 = twin_poison(cb), vc2 = twin_poison(cb), o3 = twin_poison((size_t)tot * qw * 4);
    BE[GPU]->ops->attention(BE[GPU], begin(GPU, tot, 0, qw, NULL), &d, F(q, GPU), F(k, GPU), F(v, GPU), F(kc2, GPU),
                            F(vc2, GPU), F(scr, GPU), F(o3, GPU));
    end(GPU);
    float *all = back(GPU, o3.p[GPU], (size_t)tot * qw * 4);
    snprintf(what, sizeof what, "attention %s n=%d pos0=%d: pass split", ac->name, n, pre);
    compare(what, "cuda one pass from 0", all + (size_t)pre * qw, "cuda prefill then pass", out2[GPU], n, qw,
            (size_t)qw, TOL_EXACT);
}

/* ---- MoE ----------------------------------------------------------------------------------- */

struct route_cfg {
    const char *name;
    int E, k, n_group, topk_group, norm;
    float scale;
};

/* Router logits of one position by scenario: 0 random; 1 k-1 clear winners and an exact tie of
 * a and a + period (same bias: the lower index must win the last slot); 2 the same with a + period
 * ahead by 3e-4 (~200 ulps of score: CUDA's expf cannot reorder it); 3 grouped: two groups with
 * identical scores competing for the last kept group (ungrouped: all logits equal); 4 all equal. */
static void route_row(float *l, const struct route_cfg *rc, int period, int scen) {
    int E = rc->E, k = rc->k;
    if (scen == 0) {
        for (int e = 0; e < E; e++) l[e] = uni(-4.0f, 4.0f);
    } else if (scen == 1 || scen == 2) {
        for (int e = 0; e < E; e++) l[e] = uni(-4.0f, 0.0f);
        for (int i = 0; i < k - 1; i++) {
            int e;
            do e = below(E); while (l[e] >= 3.0f);
            l[e] = 3.0f + 0.25f * (float)i;
        }
        int a;
        do a = below(E - period); while (l[a] >= 3.0f || l[a + period] >= 3.0f);
        l[a] = 2.0f;
        l[a + period] = scen == 1 ? 2.0f : 2.0f + 3e-4f;
    } else if (scen == 3 && rc->n_group > 1) {
        int G = rc->n_group, per = E / G, perm[NT_MAX_EXPERTS];
        for (int g = 0; g < G; g++) perm[g] = g;
        for (int g = G - 1; g > 0; g--) {
            int j = below(g + 1), tmp = perm[g];
            perm[g] = perm[j];
            perm[j] = tmp;
        }
        for (int e = 0; e < E; e++) l[e] = uni(-4.0f, -1.0f);
        for (int i = 0; i < rc->topk_group - 1; i++)
            for (int j = 0; j < per; j++) l[perm[i] * per + j] = uni(3.0f, 4.0f);
        int g1 = perm[rc->topk_group - 1], g2 = perm[rc->topk_group];
        for (int j = 0; j < per; j++) l[g2 * per + j] = l[g1 * per + j] = uni(1.0f, 2.0f);
    } else {
        for (int e = 0; e < E; e++) l[e] = scen == 3 ? 0.5f : 0.25f;
    }
}

static void test_route(const struct route_cfg *rc, int n) {
    new_case();
    struct nt_moe_dims d = {.E = rc->E, .k = rc->k, .L = 0, .mi = 0, .n_group = rc->n_group,
                            .topk_group = rc->topk_group, .norm_topk_prob = rc->norm,
                            .routed_scaling_factor = rc->scale};
    int E = d.E, k = d.k, period = d.n_group > 1 ? E / d.n_group : (E > 16 ? 16 : E / 2);
    char what[200];
    snprintf(what, sizeof what, "moe_route %s (E %d k %d groups %d/%d norm %d scale %g) n=%d", rc->name, E, k,
             d.n_group, d.topk_group, d.norm_topk_prob, d.routed_scaling_factor, n);
    /* the correction bias repeats with the period, so a and a + period tie exactly */
    float *tab = random_vec((size_t)period, 0.0001f, 0.004f), *bias = hmalloc((size_t)E * 4);
    for (int e = 0; e < E; e++) bias[e] = tab[e % period];
    float *l = hmalloc((size_t)n * E * 4);
    for (int t = 0; t < n; t++) route_row(l + (size_t)t * E, rc, period, t % 5);
    struct twin lt = twin_in(l, (size_t)n * E * 4), bt = twin_in(bias, (size_t)E * 4);
    struct twin it = twin_poison((size_t)n * k * 4), wt = twin_poison((size_t)n * k * 4);
    for (int s = 0; s < 2; s++) {
        BE[s]->ops->moe_route(BE[s], begin(s, n, 0, E, NULL), &d, F(lt, s), F(bt, s), (int32_t *)it.p[s], F(wt, s));
        end(s);
    }
    float *sc[2], *wts[2];
    int32_t *idx[2];
    for (int s = 0; s < 2; s++) {
        sc[s] = back(s, lt.p[s], (size_t)n * E * 4);
        wts[s] = back(s, wt.p[s], (size_t)n * k * 4);
        idx[s] = back(s, it.p[s], (size_t)n * k * 4);
    }
    char w2[240];
    snprintf(w2, sizeof w2, "%s: sigmoid scores (in place)", what);
    compare_cuda(w2, sc[CPU], sc[GPU], n, E, (size_t)E, TOL_ROUTE);
    snprintf(w2, sizeof w2, "%s: expert indices", what);
    compare_i32(w2, idx[CPU], idx[GPU], n, k);
    /* a differing choice: the scores that decided it */
    for (int i = 0; i < n * k; i++)
        if (idx[CPU][i] != idx[GPU][i]) {
            int t = i / k, a = idx[CPU][i], b = idx[GPU][i];
            for (int j = 0; j < 2; j++) {
                int e = j ? b : a;
                if (e < 0 || e >= E) continue;
                printf("     position %d (scenario %d) slot %d expert %d: logit %.9g bias %.9g score cpu %.9g "
                       "cuda %.9g\n", t, t % 5, i % k, e, l[(size_t)t * E + e], bias[e], sc[CPU][(size_t)t * E + e],
                       sc[GPU][(size_t)t * E + e]);
            }
            break;
        }
    int valid = 1;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e = idx[GPU][t * k + j];
            valid &= e >= 0 && e < E;
            for (int j2 = 0; j2 < j; j2++) valid &= idx[GPU][t * k + j2] != e;
        }
    CHECK(valid, "%s [seed %016llx]: cuda expert indices out of range or repeated", what,
          (unsigned long long)case_seed);
    snprintf(w2, sizeof w2, "%s: weights", what);
    compare_cuda(w2, wts[CPU], wts[GPU], n, k, (size_t)k, TOL_ROUTE);
}

/* Identical bytes, NaN included (compare() holds values to be finite): one line either way. */
static void same_bytes(const char *what, const char *rn, const void *ref, const char *gn, const void *got,
                       size_t elems) {
    const uint32_t *a = ref, *b = got;
    size_t bad = elems;
    for (size_t i = 0; i < elems && bad == elems; i++)
        if (a[i] != b[i]) bad = i;
    CHECK(bad == elems, "%s [seed %016llx]: %s vs %s, %zu words: word %zu differs: 0x%08x against 0x%08x", what,
          (unsigned long long)case_seed, gn, rn, elems, bad, bad < elems ? b[bad] : 0, bad < elems ? a[bad] : 0);
}

/* Router logits whose choice only CUDA against CUDA can judge, by scenario: 0 random; 1 NaN at
 * an eighth of the experts; 2 all NaN; 3 NaN at expert 0 and at the warp edges, the rest equal;
 * 4 all equal; 5 +-inf among random logits (sigmoid 1 and 0: ties); 6 three levels (wide ties);
 * 7 NaN at the last expert only. */
static void route_row_special(float *l, int E, int scen) {
    for (int e = 0; e < E; e++) l[e] = uni(-4.0f, 4.0f);
    if (scen == 1)
        for (int i = 0; i < (E + 7) / 8; i++) l[below(E)] = NAN;
    for (int e = 0; e < E; e++) {
        if (scen == 2) l[e] = NAN;
        if (scen == 3) l[e] = e == 0 || e % 32 == 31 || e % 32 == 0 ? NAN : 0.75f;
        if (scen == 4) l[e] = -1.5f;
        if (scen == 5 && below(4) == 0) l[e] = below(2) ? INFINITY : -INFINITY;
        if (scen == 6) l[e] = (float)below(3);
    }
    if (scen == 7) l[E - 1] = NAN;
}

/* moe.cu's one-warp router (no expert groups, E <= 256) against the block kernel it stands in
 * for (nt_cuda_route_reference), bit for bit - scores, indices and weights - on rows the CPU
 * comparison cannot take (NaN, whose winner the block kernel's tree decides; infinities; wide
 * ties under a bias that repeats every 8 experts), and each position alike in passes of 64, 7
 * and 1 (the first rows of the 64). */
static void test_route_warp(const struct route_cfg *rc) {
    new_case();
    struct nt_moe_dims d = {.E = rc->E, .k = rc->k, .L = 0, .mi = 0, .n_group = rc->n_group,
                            .topk_group = rc->topk_group, .norm_topk_prob = rc->norm,
                            .routed_scaling_factor = rc->scale};
    enum { N = 64 };
    static const int pass_n[] = {N, 7, 1};
    int E = d.E, k = d.k;
    float *tab = random_vec(8, 0.0001f, 0.004f), *bias = hmalloc((size_t)E * 4);
    for (int e = 0; e < E; e++) bias[e] = tab[e % 8];
    float *l = hmalloc((size_t)N * E * 4);
    for (int t = 0; t < N; t++) route_row_special(l + (size_t)t * E, E, t % 8);
    struct twin bt = twin_in(bias, (size_t)E * 4);
    void *out[2][3][3]; /* [reference][pass][scores, indices, weights] */
    for (int ref = 0; ref < 2; ref++) {
        nt_cuda_route_reference(ref);
        for (int pi = 0; pi < 3; pi++) {
            int n = pass_n[pi];
            struct twin lt = twin_in(l, (size_t)n * E * 4);
            struct twin it = twin_poison((size_t)n * k * 4), wt = twin_poison((size_t)n * k * 4);
            BE[GPU]->ops->moe_route(BE[GPU], begin(GPU, n, 0, E, NULL), &d, F(lt, GPU), F(bt, GPU),
                                    (int32_t *)it.p[GPU], F(wt, GPU));
            end(GPU);
            out[ref][pi][0] = back(GPU, lt.p[GPU], (size_t)n * E * 4);
            out[ref][pi][1] = back(GPU, it.p[GPU], (size_t)n * k * 4);
            out[ref][pi][2] = back(GPU, wt.p[GPU], (size_t)n * k * 4);
        }
    }
    nt_cuda_route_reference(0);
    static const char *part[] = {"sigmoid scores", "expert indices", "weights"};
    for (int pi = 0; pi < 3; pi++)
        for (int j = 0; j < 3; j++) {
            char what[200];
            snprintf(what, sizeof what, "moe_route %s (E %d k %d) NaN/inf/ties n=%d: %s", rc->name, E, k,
                     pass_n[pi], part[j]);
            size_t elems = (size_t)pass_n[pi] * (j ? k : E);
            same_bytes(what, "block kernel", out[1][pi][j], "warp kernel", out[0][pi][j], elems);
            if (pi) same_bytes(what, "pass of 64", out[0][0][j], "this pass", out[0][pi][j], elems);
        }
    int valid = 1;
    for (int i = 0; i < N * k; i++) valid &= ((int32_t *)out[0][0][1])[i] >= 0 && ((int32_t *)out[0][0][1])[i] < E;
    CHECK(valid, "moe_route %s NaN/inf/ties [seed %016llx]: expert indices out of range", rc->name,
          (unsigned long long)case_seed);
}

/* rmsnorm and add_rmsnorm of the same 64 rows in passes of 64, 7 and 1 (its first rows): each
 * row's bits alike in every pass (one arithmetic per position: the block tree depends on H
 * only), the CPU within TOL_NORM; and with w one float off 16-byte alignment (norms.cu's
 * float-at-a-time path) the same bits as aligned (float4). */
static void test_norm_passes(int H) {
    new_case();
    enum { N = 64 };
    static const int pass_n[] = {N, 7, 1};
    float eps = 1e-5f;
    float *h = hmalloc((size_t)N * H * 4);
    for (int t = 0; t < N; t++) {
        float scale = powf(10.0f, uni(-3.0f, 1.5f));
        for (int i = 0; i < H; i++) h[(size_t)t * H + i] = sval(0.01f, 1.0f) * scale;
    }
    float *o = random_vec((size_t)N * H, 0.01f, 1.0f), *o2 = random_vec((size_t)N * H, 0.01f, 1.0f);
    float *w = random_vec((size_t)H + 4, 0.2f, 2.0f);
    memmove(w + 1, w, (size_t)H * 4); /* the same weights at w + 1 */
    struct twin wt = twin_in(w + 1, (size_t)H * 4), wot = twin_in(w, (size_t)(H + 4) * 4);
    float *y[2][3], *hs[2][3]; /* [w aligned, w off][pass] */
    for (int off = 0; off < 2; off++)
        for (int pi = 0; pi < 3; pi++) {
            int n = pass_n[pi];
            size_t bytes = (size_t)n * H * 4;
            struct twin ht = twin_in(h, bytes), ot = twin_in(o, bytes), o2t = twin_in(o2, bytes);
            struct twin y1 = twin_poison(bytes), y2 = twin_poison(bytes);
            const float *wg = off ? F(wot, GPU) + 1 : F(wt, GPU);
            const struct nt_pass *p = begin(GPU, n, 0, H, NULL);
            BE[GPU]->ops->rmsnorm(BE[GPU], p, F(ht, GPU), wg, H, eps, F(y1, GPU), H);
            BE[GPU]->ops->add_rmsnorm(BE[GPU], p, F(ht, GPU), F(ot, GPU), F(o2t, GPU), wg, H, eps, F(y2, GPU));
            end(GPU);
            float *both = hmalloc(2 * bytes);
            memcpy(both, back(GPU, y1.p[GPU], bytes), bytes);
            memcpy((uint8_t *)both + bytes, back(GPU, y2.p[GPU], bytes), bytes);
            y[off][pi] = both;
            hs[off][pi] = back(GPU, ht.p[GPU], bytes);
        }
    /* the CPU on the pass of 64 */
    struct twin ht = twin_in(h, (size_t)N * H * 4), ot = twin_in(o, (size_t)N * H * 4);
    struct twin o2t = twin_in(o2, (size_t)N * H * 4), y1 = twin_poison((size_t)N * H * 4);
    struct twin y2 = twin_poison((size_t)N * H * 4);
    const struct nt_pass *p = begin(CPU, N, 0, H, NULL);
    BE[CPU]->ops->rmsnorm(BE[CPU], p, F(ht, CPU), F(wt, CPU), H, eps, F(y1, CPU), H);
    BE[CPU]->ops->add_rmsnorm(BE[CPU], p, F(ht, CPU), F(ot, CPU), F(o2t, CPU), F(wt, CPU), H, eps, F(y2, CPU));
    end(CPU);
    char what[160];
    if (H <= 8192) { /* TOL_NORM's widths: wider, the CPU's serial sum drifts towards it */
        snprintf(what, sizeof what, "rmsnorm H=%d n=%d", H, N);
        compare_cuda(what, F(y1, CPU), y[0][0], N, H, (size_t)H, TOL_NORM);
        snprintf(what, sizeof what, "add_rmsnorm H=%d n=%d: y of h + (o + o2)", H, N);
        compare_cuda(what, F(y2, CPU), y[0][0] + (size_t)N * H, N, H, (size_t)H, TOL_NORM);
    }
    for (int off = 0; off < 2; off++)
        for (int pi = 0; pi < 3; pi++) {
            int n = pass_n[pi];
            if (off) {
                snprintf(what, sizeof what, "rmsnorm, add_rmsnorm H=%d n=%d, w unaligned", H, n);
                same_bytes(what, "w aligned", y[0][pi], "w unaligned", y[off][pi], 2 * (size_t)n * H);
            }
            if (pi) {
                snprintf(what, sizeof what, "rmsnorm H=%d n=%d%s: y, h", H, n, off ? ", w unaligned" : "");
                same_bytes(what, "rmsnorm pass of 64", y[off][0], "this pass", y[off][pi], (size_t)n * H);
                same_bytes(what, "add_rmsnorm pass of 64", y[off][0] + (size_t)N * H, "this pass",
                           y[off][pi] + (size_t)n * H, (size_t)n * H);
                same_bytes(what, "h of the pass of 64", hs[off][0], "this pass", hs[off][pi], (size_t)n * H);
            }
        }
}

struct experts_cfg {
    const char *name;
    int E, k, L, mi;
    enum nt_dtype dt;
};

/* CUDA against the CPU for packed experts whose pass quantizes thousands of inner activations:
 * the up products sum in other float orders (TOL_PACKED: ~2e-7 of a value), so an inner value
 * within that of an int8 rounding step (a chance of ~5e-5 each) rounds the other way now and
 * then - expected about once in 20,000 values, and seen on the H200 at n = 64 - and the down
 * product moves by that step (1/127 of its block's largest value) times a weight: 1e-4 to 2e-3
 * of a row. A wrong kernel is off by far more, and the passes of one position must still match
 * the pass bit for bit. Below EXPERTS_FEW_INNER values a step is unlikely: TOL_PACKED holds. */
#define TOL_EXPERTS_STEP 5e-3
#define EXPERTS_FEW_INNER 2000

/* The routed experts for passes of 1, 9 and 64 positions with chosen (not routed) indices:
 * distinct per position, a third of the choices from two hot experts, the rest from the first
 * three quarters (the last quarter never chosen). Within CUDA, each position alone must give the
 * same bits as its pass. */
static void test_experts(const struct experts_cfg *ec) {
    new_case();
    struct nt_moe_dims d = {.E = ec->E, .k = ec->k, .L = ec->L, .mi = ec->mi, .n_group = 1, .topk_group = 1,
                            .norm_topk_prob = 1, .routed_scaling_factor = 1.0f};
    int E = d.E, k = d.k, L = d.L, mi = d.mi;
    struct nt_matrix *up[2], *dn[2];
    for (int s = 0; s < 2; s++) {
        up[s] = hmalloc((size_t)E * sizeof **up);
        dn[s] = hmalloc((size_t)E * sizeof **dn);
    }
    for (int e = 0; e < E; e++) {
        struct nt_matrix u[2], w2[2];
        random_matrix(ec->dt, mi, L, u);
        random_matrix(ec->dt, L, mi, w2);
        for (int s = 0; s < 2; s++) up[s][e] = u[s], dn[s][e] = w2[s];
    }
    struct nt_moe_weights w[2];
    memset(w, 0, sizeof w);
    for (int s = 0; s < 2; s++) w[s].expert_up = up[s], w[s].expert_down = dn[s];
    static const int ns[] = {1, 9, 64};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int n = ns[ni];
        char what[200];
        snprintf(what, sizeof what, "moe_experts %s (%s E %d k %d L %d mi %d) n=%d", ec->name, nt_dtype_name(ec->dt), E,
                 k, L, mi, n);
        int32_t *idx = hmalloc((size_t)n * k * 4);
        int span = E * 3 / 4 > k + 1 ? E * 3 / 4 : E;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++) {
                int e, dup;
                do {
                    e = below(3) == 0 ? (below(2) ? 1 : 3 % E) : below(span);
                    dup = 0;
                    for (int j2 = 0; j2 < j; j2++) dup |= idx[t * k + j2] == e;
                } while (dup);
                idx[t * k + j] = e;
            }
        /* x up to 4: relu^2 inner values of order 1 for these weights */
        struct twin xt = twin_in(random_vec((size_t)n * L, 0.02f, 4.0f), (size_t)n * L * 4);
        struct twin it = twin_in(idx, (size_t)n * k * 4);
        struct twin wt = twin_in(random_vec((size_t)n * k, 0.05f, 1.0f), (size_t)n * k * 4);
        struct twin yt = twin_poison((size_t)n * L * 4), scr = {{NULL, NULL, NULL}};
        for (int s = 0; s < 2; s++) {
            size_t sb = BE[s]->ops->moe_scratch_floats(BE[s], &d, n) * 4;
            void *h = hmalloc(sb);
            memset(h, 0xFF, sb);
            scr.p[s] = put(s, h, sb);
        }
        for (int s = 0; s < 2; s++) {
            BE[s]->ops->moe_experts(BE[s], begin(s, n, 0, L > mi ? L : mi, NULL), &d, &w[s], F(xt, s),
                                    (int32_t *)it.p[s], F(wt, s), F(scr, s), F(yt, s));
            end(s);
        }
        float *y[2];
        for (int s = 0; s < 2; s++) y[s] = back(s, yt.p[s], (size_t)n * L * 4);
        int steps = is_packed(ec->dt) && (int64_t)n * k * mi >= EXPERTS_FEW_INNER;
        compare_cuda(what, y[CPU], y[GPU], n, L, (size_t)L, steps ? TOL_EXPERTS_STEP : product_tol(ec->dt));
        if (n == 1) continue;
        struct twin y1 = twin_poison((size_t)n * L * 4);
        struct nt_backend *be = BE[GPU];
        for (int t = 0; t < n; t++) {
            be->ops->moe_experts(be, begin(GPU, 1, t, L > mi ? L : mi, NULL), &d, &w[GPU], F(xt, GPU) + (size_t)t * L,
                                 (int32_t *)it.p[GPU] + t * k, F(wt, GPU) + (size_t)t * k, F(scr, GPU),
                                 F(y1, GPU) + (size_t)t * L);
            end(GPU);
        }
        char w1[240];
        snprintf(w1, sizeof w1, "%s: one arithmetic per position", what);
        compare(w1, "cuda pass of n", y[GPU], "cuda passes of 1", back(GPU, y1.p[GPU], (size_t)n * L * 4), n, L,
                (size_t)L, TOL_EXACT);
    }
}

/* ---- the block types' streaming kernel ------------------------------------------------------- */

/* The products of dt on both CUDA kernels, the streaming one (ggml.cu's k_ggml_stream, the
 * default) and k_ggml (nt_cuda_ggml_reference): identical bits. Plain: rows x cols, its bytes
 * `off` bytes into their upload (a matrix starting at any address; the end lands anywhere too),
 * passes of n in a pass of 40. */
static void ggml_stream_plain(enum nt_dtype dt, int rows, int cols, int n, int off) {
    char what[200];
    snprintf(what, sizeof what, "ggml stream %s %dx%d n=%d, matrix at +%d", nt_dtype_name(dt), rows, cols, n, off);
    size_t nb;
    uint8_t *w = random_ggml(dt, rows, cols, &nb), *h = hmalloc(nb + (size_t)off);
    memset(h, 0x5A, (size_t)off);
    memcpy(h + off, w, nb);
    struct nt_matrix W = {.dtype = dt, .rows = rows, .cols = cols, .data = (uint8_t *)put(GPU, h, nb + off) + off,
                          .name = "test.W"};
    enum { PASS = 40 };
    struct twin xt = twin_in(random_vec((size_t)PASS * cols, 0.02f, 1.0f), (size_t)PASS * cols * 4);
    struct nt_backend *be = BE[GPU];
    float *y[2];
    for (int ref = 0; ref < 2; ref++) {
        struct twin yt = twin_poison((size_t)PASS * rows * 4);
        nt_cuda_ggml_reference(ref);
        be->ops->matmul(be, begin(GPU, PASS, 0, cols, NULL), n, &W, NULL, n > 1 ? NT_ACT_RELU2 : NT_ACT_NONE, F(xt, GPU),
                        cols, F(yt, GPU), rows);
        end(GPU);
        nt_cuda_ggml_reference(0);
        y[ref] = back(GPU, yt.p[GPU], (size_t)PASS * rows * 4);
        untouched(what, GPU, y[ref], n, rows, (size_t)rows, PASS);
    }
    same_bytes(what, "k_ggml", y[1], "k_ggml_stream", y[0], (size_t)n * rows);
}

/* Grouped: moe_experts with E experts of dt (up mi x L, down L x mi), k picks per position, for
 * passes of n; the experts' output of both kernels identical. */
static void ggml_stream_experts(enum nt_dtype dt, int E, int k, int L, int mi, int n) {
    char what[200];
    snprintf(what, sizeof what, "ggml stream %s experts E %d k %d L %d mi %d n=%d", nt_dtype_name(dt), E, k, L, mi, n);
    struct nt_moe_dims d = {.E = E, .k = k, .L = L, .mi = mi, .n_group = 1, .topk_group = 1, .norm_topk_prob = 1,
                            .routed_scaling_factor = 1.0f};
    struct nt_matrix *up = hmalloc((size_t)E * sizeof *up), *dn = hmalloc((size_t)E * sizeof *dn);
    for (int e = 0; e < E; e++) {
        size_t nb;
        uint8_t *w = random_ggml(dt, mi, L, &nb);
        up[e] = (struct nt_matrix){.dtype = dt, .rows = mi, .cols = L, .data = put(GPU, w, nb), .name = "test.up"};
        w = random_ggml(dt, L, mi, &nb);
        dn[e] = (struct nt_matrix){.dtype = dt, .rows = L, .cols = mi, .data = put(GPU, w, nb), .name = "test.down"};
    }
    struct nt_moe_weights mw;
    memset(&mw, 0, sizeof mw);
    mw.expert_up = up, mw.expert_down = dn;
    int32_t *idx = hmalloc((size_t)n * k * 4);
    for (int t = 0; t < n; t++) { /* distinct per position: k neighbours from a random one */
        int e0 = below(E);
        for (int j = 0; j < k; j++) idx[t * k + j] = (e0 + j) % E;
    }
    struct twin xt = twin_in(random_vec((size_t)n * L, 0.02f, 4.0f), (size_t)n * L * 4);
    struct twin it = twin_in(idx, (size_t)n * k * 4);
    struct twin wt = twin_in(random_vec((size_t)n * k, 0.05f, 1.0f), (size_t)n * k * 4);
    size_t sb = BE[GPU]->ops->moe_scratch_floats(BE[GPU], &d, n) * 4;
    void *hs = hmalloc(sb);
    memset(hs, 0xFF, sb);
    float *scr = put(GPU, hs, sb), *y[2];
    struct nt_backend *be = BE[GPU];
    for (int ref = 0; ref < 2; ref++) {
        struct twin yt = twin_poison((size_t)n * L * 4);
        nt_cuda_ggml_reference(ref);
        be->ops->moe_experts(be, begin(GPU, n, 0, L > mi ? L : mi, NULL), &d, &mw, F(xt, GPU), (int32_t *)it.p[GPU],
                             F(wt, GPU), scr, F(yt, GPU));
        end(GPU);
        nt_cuda_ggml_reference(0);
        y[ref] = back(GPU, yt.p[GPU], (size_t)n * L * 4);
    }
    same_bytes(what, "k_ggml", y[1], "k_ggml_stream", y[0], (size_t)n * L);
}

/* Every block type: rows no multiple of a tile (32 rows) and fewer than one, Nano's widths (2688,
 * 1856, 4096: rows of several chunks, the last one partial) and small ones (a row in one chunk),
 * passes of 1, 2, 7 and 40, matrices at +0 and at odd offsets; the experts' grouped items at
 * passes of 1, 2, 7 and 40. */
static void test_ggml_stream(void) {
    static const enum nt_dtype dts[] = {NT_DTYPE_GGML_Q8_0, NT_DTYPE_GGML_Q4_0,  NT_DTYPE_GGML_Q4_1,
                                        NT_DTYPE_GGML_Q5_0, NT_DTYPE_GGML_Q5_1,  NT_DTYPE_GGML_IQ4_NL,
                                        NT_DTYPE_GGML_MXFP4, NT_DTYPE_GGML_Q4_K, NT_DTYPE_GGML_Q5_K,
                                        NT_DTYPE_GGML_Q6_K};
    static const struct {
        int rows, cols;
    } shapes[] = {{37, 2688}, {45, 1856}, {23, 4096}, {70, 256}, {19, 512}};
    static const int ns[] = {1, 2, 7, 40};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        enum nt_dtype dt = dts[di];
        int el = 0;
        nt_ggml_block_facts(dt, &el, NULL, NULL);
        new_case();
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            int rows = shapes[si].rows, cols = shapes[si].cols;
            if (cols % el) continue;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                /* the emulation: the long pass on the small shapes only */
                if (emulated && ns[ni] == 40 && (int64_t)rows * cols > 20000) continue;
                ggml_stream_plain(dt, rows, cols, ns[ni], (int)(ni * 5 % 16));
            }
        }
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) ggml_stream_experts(dt, 8, 3, 512, 256, ns[ni]);
        group_end();
    }
}

/* ---- pass programs (CUDA graphs) ------------------------------------------------------------ */

/* Packed products downstream of a norm: the norm's last-bit differences can move an activation
 * across an int8 rounding boundary (one step is 1/127 of its block's largest value), which moves
 * an output by ~1/127 of one term of a few hundred: ~5e-4 relative per flip; 1e-2 allows many. */
#define TOL_CHAIN_PACKED 1e-2

/* Rehearsals (nt_pass.rehearse, pass.cu): a rehearsal runs nothing; the kind's first pass replays
 * the rehearsed program when it is that pass's, and when it is not (here another output buffer: a
 * broken contract) end_pass returns 0 having run nothing, and the pass run again gives the eager
 * result, bit for bit in both cases. */
static void rehearsal_pass(const struct nt_pass *p, const float *h, const float *w, int H, float *y, int want_ran,
                           const char *what) {
    struct nt_backend *be = BE[GPU];
    be->ops->begin_pass(be, p);
    be->ops->rmsnorm(be, p, h, w, H, 1e-5f, y, H);
    int ran = be->ops->end_pass(be, p);
    CHECK(ran == want_ran, "rehearsal: %s: end_pass returned %d, not %d", what, ran, want_ran);
}
static void test_rehearsal(void) {
    new_case();
    enum { H = 256 };
    const char *graphs = getenv("NEMOTRON_CUDA_GRAPHS");
    if (graphs && !strcmp(graphs, "0")) return; /* (no programs to rehearse) */
    struct twin ht = twin_in(random_vec(H, 0.01f, 1.0f), H * 4), wt = twin_in(random_vec(H, 0.2f, 2.0f), H * 4);
    struct twin ye = twin_poison(H * 4), y1 = twin_poison(H * 4), y2 = twin_poison(H * 4);
    const float *h = F(ht, GPU), *w = F(wt, GPU);
    const struct nt_pass *pe = begin(GPU, 1, 0, H, NULL); /* the eager result, on a scratch of its own */
    BE[GPU]->ops->rmsnorm(BE[GPU], pe, h, w, H, 1e-5f, F(ye, GPU), H);
    end(GPU);
    float *ref = back(GPU, ye.p[GPU], H * 4);
    for (int same = 1; same >= 0; same--) {
        struct nt_pass p = make_pass(GPU, 1, 0, H, NULL), r = p;
        r.rehearse = 1;
        float *out = same ? F(y1, GPU) : F(y2, GPU);
        rehearsal_pass(&r, h, w, H, F(y1, GPU), 1, "the rehearsal");
        float *untouched = back(GPU, out, H * 4);
        int poison = 1;
        for (int i = 0; i < H; i++) poison &= bits(untouched[i]) == POISON;
        CHECK(poison, "rehearsal: a rehearsal wrote its output");
        /* the kind's first pass: the rehearsal's program, or (not the same) nothing run, then again */
        rehearsal_pass(&p, h, w, H, out, same, same ? "the rehearsed pass" : "a pass not the rehearsal's");
        if (!same) {
            untouched = back(GPU, out, H * 4);
            poison = 1;
            for (int i = 0; i < H; i++) poison &= bits(untouched[i]) == POISON;
            CHECK(poison, "rehearsal: a pass end_pass said did not run wrote its output");
            rehearsal_pass(&p, h, w, H, out, 1, "the same pass again");
        }
        compare(same ? "rehearsal: a rehearsed program replayed by its pass" : "rehearsal: the pass run again",
                "eager", ref, "rehearsed", back(GPU, out, H * 4), 1, H, H, 0);
        /* and a second pass of the kind replays */
        rehearsal_pass(&p, h, w, H, out, 1, "the kind's second pass");
        compare("rehearsal: the kind's second pass", "eager", ref, "replayed", back(GPU, out, H * 4), 1, H, H, 0);
    }
}

/* A rehearsal on another thread (a session's rehearsal thread, src/engine/rehearsal.c) while this
 * thread runs passes of the same kind: the rehearsal stops, recording, while two passes of the
 * kind run here - eagerly, as the kind's second would otherwise be captured while its program is
 * being recorded - then ends; the next pass replays the rehearsed program. All give the eager
 * bits; the rehearsal writes nothing. */
struct rehearsal_thread {
    const struct nt_pass *r;
    const float *h, *w;
    float *y;
    int H, ran;
    sem_t recording, go_on;
};
static void *rehearse_on_thread(void *arg) {
    struct rehearsal_thread *t = arg;
    struct nt_backend *be = BE[GPU];
    be->ops->begin_pass(be, t->r);
    be->ops->rmsnorm(be, t->r, t->h, t->w, t->H, 1e-5f, t->y, t->H);
    sem_post(&t->recording);
    sem_wait(&t->go_on);
    t->ran = be->ops->end_pass(be, t->r);
    return NULL;
}
static void test_rehearsal_beside(void) {
    new_case();
    enum { H = 256 };
    const char *graphs = getenv("NEMOTRON_CUDA_GRAPHS");
    if (graphs && !strcmp(graphs, "0")) return; /* (no programs to rehearse) */
    struct twin ht = twin_in(random_vec(H, 0.01f, 1.0f), H * 4), wt = twin_in(random_vec(H, 0.2f, 2.0f), H * 4);
    struct twin ye = twin_poison(H * 4), yt = twin_poison(H * 4);
    const float *h = F(ht, GPU), *w = F(wt, GPU);
    float *out = F(yt, GPU);
    const struct nt_pass *pe = begin(GPU, 1, 0, H, NULL);
    BE[GPU]->ops->rmsnorm(BE[GPU], pe, h, w, H, 1e-5f, F(ye, GPU), H);
    end(GPU);
    float *ref = back(GPU, ye.p[GPU], H * 4);
    struct nt_pass p = make_pass(GPU, 1, 0, H, NULL), r = p;
    r.rehearse = 1;
    struct rehearsal_thread t = {.r = &r, .h = h, .w = w, .y = out, .H = H};
    sem_init(&t.recording, 0, 0);
    sem_init(&t.go_on, 0, 0);
    pthread_t thread;
    if (pthread_create(&thread, NULL, rehearse_on_thread, &t)) die("rehearsal beside: no thread");
    sem_wait(&t.recording);
    float *untouched = back(GPU, out, H * 4);
    int poison = 1;
    for (int i = 0; i < H; i++) poison &= bits(untouched[i]) == POISON;
    CHECK(poison, "rehearsal beside: the rehearsal wrote its output");
    for (int i = 0; i < 2; i++) {
        rehearsal_pass(&p, h, w, H, out, 1, i ? "the kind's second pass, beside the rehearsal"
                                               : "the kind's first pass, beside the rehearsal");
        compare(i ? "rehearsal beside: the kind's second pass while another thread records its program"
                  : "rehearsal beside: the kind's first pass while another thread records its program",
                "eager", ref, "beside", back(GPU, out, H * 4), 1, H, H, 0);
    }
    sem_post(&t.go_on);
    pthread_join(thread, NULL);
    CHECK(t.ran == 1, "rehearsal beside: the rehearsal's end_pass returned %d", t.ran);
    sem_destroy(&t.recording);
    sem_destroy(&t.go_on);
    BE[GPU]->ops->zero(BE[GPU], out, H * 4);
    rehearsal_pass(&p, h, w, H, out, 1, "the pass after the rehearsal");
    compare("rehearsal beside: the pass after the rehearsal (its program)", "eager", ref, "replayed",
            back(GPU, out, H * 4), 1, H, H, 0);
}

/* A session-shaped program, run pass after pass with the same buffers and the same scratch:
 * the tokens pick rows of tables holding each position's q, k, v and Mamba in_proj output
 * (embed), then attention at the pass's pos0, a copy of its output (a copy inside a pass is part
 * of the program), rmsnorm, a q4tp product, argmax, and conv, scan and gated norm carrying the
 * ring and the state. Passes of 1 at pos0 0..3, then of 3 at 4, 7, 10, then verify passes of 3
 * (snap: the ring and state before each position kept) at 13, 16, 19, then a plain pass of 3 at
 * 22 (its kind's fourth run: the verify kind is a program of its own, never the plain one's):
 * the CUDA backend runs each kind eagerly, captures it on its second run and replays it after.
 * The same passes run on the CPU and on a second CUDA backend made with NEMOTRON_CUDA_GRAPHS=0:
 * after every pass the graph backend's outputs must be the eager one's bits, and near the CPU's. */
static void test_replay(void) {
    new_case();
    setenv("NEMOTRON_CUDA_GRAPHS", "0", 1);
    struct nt_err err;
    memset(&err, 0, sizeof err);
    if (nt_cuda_backend_new(0, &BE[EAGER], &err) != NEMOTRON_OK) die(err.msg);
    unsetenv("NEMOTRON_CUDA_GRAPHS");
    enum { V = 25, PMAX = 3, R = 40 };
    struct nt_attn_dims ad = {.nq = 4, .nkv = 2, .dh = 64, .n_ctx = V};
    struct twin ascr = twin_attn_scratch(&ad);
    struct nt_mamba_dims md = {.H = 256, .nh = 4, .P = 16, .N = 16, .G = 2, .K = 4, .eps = 1e-5f, .dt_lo = 0.0f,
                               .dt_hi = INFINITY};
    md.I = md.nh * md.P;
    md.CD = md.I + 2 * md.G * md.N;
    md.zxd = md.I + md.CD + md.nh;
    int qw = ad.nq * ad.dh, kvw = ad.nkv * ad.dh, I = md.I, CD = md.CD;
    struct nt_matrix Eq[3], Ek[3], Ev[3], Ez[3], W[3];
    struct {
        struct nt_matrix *m;
        int cols;
    } tabs[] = {{Eq, qw}, {Ek, kvw}, {Ev, kvw}, {Ez, md.zxd}};
    for (size_t i = 0; i < sizeof tabs / sizeof tabs[0]; i++) {
        struct twin t = twin_in(random_vec((size_t)V * tabs[i].cols, 0.01f, 2.0f), (size_t)V * tabs[i].cols * 4);
        for (int s = 0; s < 3; s++)
            tabs[i].m[s] = (struct nt_matrix){.dtype = NT_DTYPE_F32, .rows = V, .cols = tabs[i].cols,
                                              .data = t.p[s], .name = "test.table"};
    }
    {
        float *Wf = random_vec((size_t)R * qw, 0.005f, 0.05f);
        size_t nb;
        uint8_t *packed = pack(NT_DTYPE_Q4TP, Wf, R, qw, &nb);
        struct twin t = twin_in(packed, nb);
        for (int s = 0; s < 3; s++)
            W[s] = (struct nt_matrix){.dtype = NT_DTYPE_Q4TP, .rows = R, .cols = qw, .data = t.p[s], .name = "test.W"};
    }
    struct twin nw = twin_in(random_vec((size_t)qw, 0.5f, 1.5f), (size_t)qw * 4);
    struct twin cw = twin_in(random_vec((size_t)CD * md.K, 0.05f, 0.6f), (size_t)CD * md.K * 4);
    struct twin cbias = twin_in(random_vec((size_t)CD, 0.01f, 0.3f), (size_t)CD * 4);
    struct twin dtb = twin_in(random_vec((size_t)md.nh, 0.5f, 3.0f), (size_t)md.nh * 4);
    float *A = random_vec((size_t)md.nh, 0.1f, 2.0f); /* A_log, then the A the engine holds */
    for (int h = 0; h < md.nh; h++) A[h] = -expf(A[h]);
    struct twin Av = twin_in(A, (size_t)md.nh * 4);
    struct twin Dv = twin_in(random_vec((size_t)md.nh, 0.5f, 1.5f), (size_t)md.nh * 4);
    struct twin gw = twin_in(random_vec((size_t)I, 0.5f, 1.5f), (size_t)I * 4);
    struct nt_mamba_weights mw[3];
    for (int s = 0; s < 3; s++)
        mw[s] = (struct nt_mamba_weights){.conv_w = F(cw, s), .conv_b = F(cbias, s), .dt_bias = F(dtb, s),
                                          .A = F(Av, s), .D = F(Dv, s), .norm_w = F(gw, s)};
    size_t cb = (size_t)V * kvw * 4;
    struct twin kc = twin_poison(cb), vc = twin_poison(cb);
    struct twin ring = twin_in(random_vec((size_t)(md.K - 1) * CD, 0.01f, 2.0f), (size_t)(md.K - 1) * CD * 4);
    struct twin state = twin_in(random_vec((size_t)md.nh * md.N * md.P, 0.001f, 0.5f),
                                (size_t)md.nh * md.N * md.P * 4);
    struct twin q = twin_poison((size_t)PMAX * qw * 4), k = twin_poison((size_t)PMAX * kvw * 4);
    struct twin v = twin_poison((size_t)PMAX * kvw * 4), att = twin_poison((size_t)PMAX * qw * 4);
    struct twin x = twin_poison((size_t)PMAX * qw * 4), y = twin_poison((size_t)PMAX * R * 4);
    struct twin idx = twin_poison((size_t)PMAX * 4), zxd = twin_poison((size_t)PMAX * md.zxd * 4);
    struct twin xbc = twin_poison((size_t)PMAX * CD * 4), ys = twin_poison((size_t)PMAX * I * 4);
    struct twin g = twin_poison((size_t)PMAX * I * 4), att2 = twin_poison((size_t)PMAX * qw * 4);
    size_t ring_f = (size_t)(md.K - 1) * CD, state_f = (size_t)md.nh * md.N * md.P;
    struct twin rsnap = twin_poison(PMAX * ring_f * 4), ssnap = twin_poison(PMAX * state_f * 4);
    struct nt_pass P[3];
    int32_t tok[PMAX] = {0};
    for (int s = 0; s < 3; s++) P[s] = make_pass(s, PMAX, 0, qw, tok); /* one session's scratch */
    static const int sched[][4] = {/* n, pos0, snap, run of its kind (1 eager, 2 captured, 3.. replayed) */
                                   {1, 0, 0, 1},  {1, 1, 0, 2},  {1, 2, 0, 3},  {1, 3, 0, 4},
                                   {3, 4, 0, 1},  {3, 7, 0, 2},  {3, 10, 0, 3}, {3, 13, 1, 1},
                                   {3, 16, 1, 2}, {3, 19, 1, 3}, {3, 22, 0, 4}};
    for (size_t pi = 0; pi < sizeof sched / sizeof sched[0]; pi++) {
        int n = sched[pi][0], pos0 = sched[pi][1], snap = sched[pi][2], kind_run = sched[pi][3];
        for (int t = 0; t < n; t++) tok[t] = pos0 + t;
        for (int s = 0; s < 3; s++) {
            struct nt_backend *be = BE[s];
            const struct nt_pass *p = &P[s];
            P[s].n = n;
            P[s].pos0 = pos0;
            P[s].snap = snap;
            be->ops->begin_pass(be, p);
            be->ops->embed(be, p, &Eq[s], F(q, s));
            be->ops->embed(be, p, &Ek[s], F(k, s));
            be->ops->embed(be, p, &Ev[s], F(v, s));
            be->ops->attention(be, p, &ad, F(q, s), F(k, s), F(v, s), F(kc, s), F(vc, s), F(ascr, s), F(att, s));
            be->ops->copy(be, F(att2, s), F(att, s), (size_t)n * qw * 4);
            be->ops->rmsnorm(be, p, F(att2, s), F(nw, s), qw, 1e-5f, F(x, s), qw);
            be->ops->matmul(be, p, n, &W[s], NULL, NT_ACT_NONE, F(x, s), qw, F(y, s), R);
            be->ops->argmax(be, n, F(y, s), R, (int32_t *)idx.p[s]);
            be->ops->embed(be, p, &Ez[s], F(zxd, s));
            be->ops->mamba_conv(be, p, &md, &mw[s], F(zxd, s), F(ring, s), F(rsnap, s), F(xbc, s));
            be->ops->mamba_scan(be, p, &md, &mw[s], F(zxd, s), F(xbc, s), F(state, s), F(ssnap, s), F(ys, s));
            be->ops->mamba_gated_norm(be, p, &md, &mw[s], F(ys, s), F(zxd, s), F(g, s));
            be->ops->end_pass(be, p);
        }
        struct {
            const char *name;
            struct twin t;
            int cols;
            double tol;
        } outs[] = {{"attention", att, qw, TOL_ATTN}, {"attention copied in the pass", att2, qw, TOL_ATTN},
                    {"q4tp product", y, R, TOL_CHAIN_PACKED}, {"gated norm", g, I, TOL_SCAN}};
        for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
            char what[200];
            snprintf(what, sizeof what, "pass program n=%d pos0=%d (run %d of its kind): %s", n, pos0, kind_run,
                     outs[oi].name);
            size_t bytes = (size_t)n * outs[oi].cols * 4;
            float *o[3];
            for (int s = 0; s < 3; s++) o[s] = back(s, outs[oi].t.p[s], bytes);
            compare(what, "cuda eager", o[EAGER], "cuda graphs", o[GPU], n, outs[oi].cols, (size_t)outs[oi].cols,
                    TOL_EXACT);
            compare(what, "cpu", o[CPU], "cuda graphs", o[GPU], n, outs[oi].cols, (size_t)outs[oi].cols,
                    outs[oi].tol);
        }
        char what[200];
        snprintf(what, sizeof what, "pass program n=%d pos0=%d (run %d of its kind): argmax", n, pos0, kind_run);
        compare_i32(what, back(EAGER, idx.p[EAGER], (size_t)n * 4), back(GPU, idx.p[GPU], (size_t)n * 4), n, 1);
        if (!snap) continue;
        /* the verify pass's slots: the ring and the state before each of its positions */
        snprintf(what, sizeof what, "verify pass program n=%d pos0=%d (run %d of its kind): ring slots", n, pos0,
                 kind_run);
        float *rs[3], *ss[3];
        for (int s = 0; s < 3; s++) {
            rs[s] = back(s, rsnap.p[s], (size_t)n * ring_f * 4);
            ss[s] = back(s, ssnap.p[s], (size_t)n * state_f * 4);
        }
        compare(what, "cuda eager", rs[EAGER], "cuda graphs", rs[GPU], n * (md.K - 1), CD, (size_t)CD, TOL_EXACT);
        compare(what, "cpu", rs[CPU], "cuda graphs", rs[GPU], n * (md.K - 1), CD, (size_t)CD, TOL_EXACT);
        snprintf(what, sizeof what, "verify pass program n=%d pos0=%d (run %d of its kind): state slots", n, pos0,
                 kind_run);
        compare(what, "cuda eager", ss[EAGER], "cuda graphs", ss[GPU], n * md.nh, md.N * md.P, (size_t)md.N * md.P,
                TOL_EXACT);
        compare(what, "cpu", ss[CPU], "cuda graphs", ss[GPU], n * md.nh, md.N * md.P, (size_t)md.N * md.P, TOL_SCAN);
    }
    /* the state the passes leave: caches (positions 0..24 written), ring, Mamba state */
    struct {
        const char *name;
        struct twin t;
        int rows, cols;
    } st[] = {{"k cache", kc, V, kvw}, {"v cache", vc, V, kvw}, {"conv ring", ring, md.K - 1, CD},
              {"ssm state", state, md.nh, md.N * md.P}};
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        char what[200];
        snprintf(what, sizeof what, "pass program, after 11 passes: %s", st[i].name);
        size_t bytes = (size_t)st[i].rows * st[i].cols * 4;
        compare(what, "cuda eager", back(EAGER, st[i].t.p[EAGER], bytes), "cuda graphs",
                back(GPU, st[i].t.p[GPU], bytes), st[i].rows, st[i].cols, (size_t)st[i].cols, TOL_EXACT);
    }
    BE[EAGER]->ops->destroy(BE[EAGER]);
    BE[EAGER] = NULL;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* release is for alloc's memory: given an upload's, the CUDA backend faults naming it and frees
 * nothing (a slab's start would take every upload placed in it along). Leaves the backend
 * faulted: the caller remakes it. */
static void test_release_of_upload(void) {
    struct nt_backend *be = BE[GPU];
    float h[64] = {0};
    void *p = (void *)be->ops->upload(be, h, sizeof h);
    CHECK(p != NULL, "release of an upload: the upload: %s", be->alloc_error);
    if (!p) return;
    be->ops->release(be, p);
    CHECK(strstr(be->fault, "upload's memory") != NULL, "release of an upload: the backend's fault names it: '%s'",
          be->fault);
}

int main(int argc, char **argv) {
    if (argc > 1) base_seed = strtoull(argv[1], NULL, 0);
    struct nt_err err;
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_cuda_backend_new(0, &BE[GPU], &err);
    if (st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_ARG) {
        printf("no CUDA device: %s (skipped)\n", err.msg);
        return 77;
    }
    if (st != NEMOTRON_OK) die(err.msg);
    BE[CPU] = nt_cpu_backend_new(0);
    if (!BE[CPU]) die("no memory for the CPU backend");
    const char *force = getenv("NEMOTRON_CPU");
    float_exact = nt_cpu_simd_available() && !(force && strcmp(force, "scalar") == 0);
    emulated = strstr(BE[GPU]->device, "host emulation") != NULL;
    printf("gpu_test_ops on %s: base seed 0x%llx; cpu backend %d threads, float products %s%s\n", BE[GPU]->device,
           (unsigned long long)base_seed, BE[CPU]->n_threads,
           float_exact ? "AVX2 FMA (cuda must match bit for bit)" : "scalar (tolerance)",
           emulated ? "; full-size shapes left to a GPU" : "");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    test_matmul();
    test_matmul_multi();

    test_embed(NT_DTYPE_BF16, 1000, 2688, 17);
    test_embed(NT_DTYPE_F16, 1000, 2688, 64);
    test_embed(NT_DTYPE_F32, 101, 37, 5);
    /* block-typed embeddings (a GGUF's token_embd): decoded as the CPU decodes them */
    test_embed(NT_DTYPE_GGML_Q4_K, 50, 512, 9);
    test_embed(NT_DTYPE_GGML_Q6_K, 50, 256, 9);
    test_embed(NT_DTYPE_GGML_Q5_1, 50, 96, 9);
    test_embed(NT_DTYPE_GGML_MXFP4, 50, 64, 9);
    static const int norm_h[] = {2688, 4096, 1001, 37};
    for (size_t i = 0; i < sizeof norm_h / sizeof norm_h[0]; i++) {
        test_norms(norm_h[i], 1);
        test_norms(norm_h[i], 17);
    }
    test_argmax(131072, 9);
    test_argmax(1001, 17);
    group_end();

    static const struct mamba_cfg mcfg[] = {
        {"nano", 2688, 64, 64, 128, 8, 4, 0.0f, INFINITY, 1},
        /* clamped dt, no conv bias, odd sizes (the CUDA scan takes N = 8 x a power of two) */
        {"small", 40, 6, 10, 8, 2, 3, 0.05f, 0.5f, 0},
    };
    for (size_t i = 0; i < sizeof mcfg / sizeof mcfg[0]; i++) {
        test_mamba(&mcfg[i]);
        group_end();
    }

    static const struct attn_cfg acfg[] = {
        {"nano", 32, 2, 128, 300, 150},
        {"small", 6, 3, 40, 100, 23}, /* dh not a multiple of 32 */
        {"odd", 5, 1, 38, 100, 40},   /* dh not a multiple of 4, 5 heads of one kv head */
        {"long", 4, 2, 32, 400, 345}, /* ~12 tiles, the last ones partly past the context */
    };
    for (size_t i = 0; i < sizeof acfg / sizeof acfg[0]; i++) {
        test_attention(&acfg[i], 1);
        test_attention(&acfg[i], 16);
        test_attention(&acfg[i], 17);
        test_attention(&acfg[i], 55);
        group_end();
    }

    static const struct route_cfg rcfg[] = {
        {"nano", 128, 6, 1, 1, 1, 2.5f},
        {"grouped", 128, 6, 8, 4, 0, 1.75f},
        {"grouped-norm", 128, 8, 8, 4, 1, 2.5f},
        {"small", 16, 3, 4, 2, 1, 0.5f},
        /* without groups: moe.cu's one-warp router, up to 16 experts a lane */
        {"super", 512, 22, 1, 1, 1, 5.0f},
        {"odd", 40, 5, 1, 1, 0, 1.0f},
    };
    for (size_t i = 0; i < sizeof rcfg / sizeof rcfg[0]; i++) {
        test_route(&rcfg[i], 1);
        test_route(&rcfg[i], 40);
    }
    group_end();

    static const struct experts_cfg ecfg[] = {
        {"q4tp-128", 128, 6, 256, 96, NT_DTYPE_Q4TP},
        {"q4tp-wide", 8, 2, 2688, 224, NT_DTYPE_Q4TP},
        /* one position: q8_2f up tiles of 6 rows, a unit of 32 rows in 6 tiles (decode.cu) */
        {"q8_2f-wide", 8, 2, 2688, 224, NT_DTYPE_Q8_2F},
        {"q4tp-dense", 16, 4, 256, 96, NT_DTYPE_Q4TP}, /* n = 64: tensor-core items */
        {"q8_2f", 16, 4, 256, 128, NT_DTYPE_Q8_2F},
        /* long inner rows (decode.cu's k_decode holds k of them in shared memory) */
        {"q4tp-long-inner", 16, 6, 128, 640, NT_DTYPE_Q4TP},
        {"q8_2f-long-inner", 16, 4, 128, 1024, NT_DTYPE_Q8_2F},
        {"q8_2f-short-blocks", 32, 4, 100, 68, NT_DTYPE_Q8_2F},
        {"bf16", 16, 4, 100, 44, NT_DTYPE_BF16},
        {"f32-tails", 8, 3, 37, 21, NT_DTYPE_F32},
    };
    for (size_t i = 0; i < sizeof ecfg / sizeof ecfg[0]; i++) {
        test_experts(&ecfg[i]);
        group_end();
    }

    test_replay();
    test_rehearsal();
    test_rehearsal_beside();
    group_end();

    /* new cases go last: a case's seed derives from its number, so the ones above keep theirs */
    test_copy_write(100003);
    test_copy_write(1);
    group_end();

    /* the short-chain kernels of a decode step (moe.cu's warp router, norms.cu's k_rmsnorm_fast) */
    static const struct route_cfg wcfg[] = {
        {"nano", 128, 6, 1, 1, 1, 2.5f},
        {"odd", 40, 5, 1, 1, 0, 1.0f},     /* E no multiple of 32 */
        {"tiny", 16, 3, 1, 1, 1, 0.5f},    /* one expert a lane at most */
        {"all", 33, 33, 1, 1, 1, 1.0f},    /* k = E: every expert picked */
        {"wide", 200, 22, 1, 1, 1, 5.0f},  /* 8 slots a lane, the last ones partly empty */
        {"max", 256, 40, 1, 1, 0, 2.0f},   /* the most experts the warp kernel takes; more picks than lanes */
        {"grouped", 128, 6, 8, 4, 1, 2.5f}, /* the block kernel on both sides */
    };
    for (size_t i = 0; i < sizeof wcfg / sizeof wcfg[0]; i++) test_route_warp(&wcfg[i]);
    group_end();
    static const int pass_h[] = {2688, 1001, 37, 4100, 8192, 16000, 20000};
    for (size_t i = 0; i < sizeof pass_h / sizeof pass_h[0]; i++) {
        test_norm_passes(pass_h[i]);
        group_end();
    }

    test_ggml_stream();

    /* short passes over a long cache (a verify pass late in a long prompt): 64 - 66 tiles a
     * position in the parallel path, its grid held to what the SMs take at once. A GPU's case:
     * its 2,040-position prefills take minutes each in the host emulation. */
    if (!emulated) {
        static const struct attn_cfg long_cache = {"long cache", 4, 2, 32, 2100, 2040};
        static const int ns[] = {1, 13, 16, 17, 55};
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) test_attention(&long_cache, ns[j]);
        group_end();
    }
    test_release_of_upload();
    group_end();

    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("gpu_test_ops: %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    BE[GPU]->ops->destroy(BE[GPU]);
    BE[CPU]->ops->destroy(BE[CPU]);
    free(host_list);
    free(cpu_list);
    return test_summary("gpu_test_ops");
}
