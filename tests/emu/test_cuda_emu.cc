/* test_cuda_emu.cc - the CUDA packed products (src/cuda/products.cu), run on the host through
 * tests/emu/cuda_emu.h, against the CPU backend and against each other.
 *
 * CI has no GPU; this runs the kernels' own code there: the dp4a kernel with items of 1 and 4
 * positions, the tensor-core kernel (items of 32, emulated mma), the reference kernel, plain and
 * grouped (moe_experts' work items, built here as k_moe_plan builds them). Each case checks
 *   - every output against the CPU backend's product within NT_CUDA_PACKED_TOL,
 *   - each position alone (items of 1) against the whole pass: identical bits,
 *   - the reference kernel against the fast one: identical bits,
 *   - grouped items against plain products of each entry's expert: identical bits,
 *   - nothing outside the outputs written (poison bytes stay).
 * Everything a kernel reads or writes is cudaMalloc memory, as on a GPU: the emulation's pointer
 * checks stop a kernel that touches anything else (cuda_emu.h).
 * tests/gpu/test_ops.c repeats all of this on a real GPU; what only hardware shows (speed, the
 * mma fragment layout, races) is its business.
 */
extern "C" {
#include "backend.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"
#include "quant/quant.h"
}
#include "cuda/products.cuh"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failures, verbose;
/* pk_run records a failed launch in a backend's fault (cuda_util.cuh); none may happen here */
static struct nt_backend fault_sink;

static void run_product(const struct pk_product *a, int work) {
    if (!pk_run(&fault_sink, a, work) || fault_sink.fault[0]) {
        fprintf(stderr, "FAIL: product launch: %s\n", fault_sink.fault);
        failures++;
        fault_sink.fault[0] = 0;
    }
}
static uint64_t rng = 0x6e656d6f74726f6eull;

static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1Dull;
}
static float uni(float lo, float hi) { return lo + (hi - lo) * (float)((double)(rnd() >> 40) / 16777216.0); }
static float sval(float lo, float hi) { return (rnd() & 1) ? uni(lo, hi) : -uni(lo, hi); }

/* Device memory (the emulation's: host memory the host code here may also read and write),
 * filled with 0xFF bytes (poison: this test's "never written") or zeros. */
static void *dmem(size_t bytes, int poison) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "test_cuda_emu: out of device memory\n");
        exit(1);
    }
    memset(p, poison ? 0xFF : 0, bytes);
    return p;
}
static void dfree(const void *p) { cudaFree((void *)p); }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* rows x cols at stride: worst per-row ||got - ref|| / ||ref||; tol 0: identical bits. Poison
 * (never written) or non-finite values fail. */
static void compare(const char *what, const float *ref, const float *got, int rows, int cols, size_t stride,
                    double tol) {
    double worst = 0;
    long diff = 0, bad = 0;
    for (int r = 0; r < rows; r++) {
        double num = 0, den = 0;
        for (int c = 0; c < cols; c++) {
            float a = ref[(size_t)r * stride + c], b = got[(size_t)r * stride + c];
            if (bits(a) == 0xFFFFFFFFu || bits(b) == 0xFFFFFFFFu || !isfinite(a) || !isfinite(b)) {
                bad++;
                continue;
            }
            diff += bits(a) != bits(b);
            num += ((double)b - a) * ((double)b - a);
            den += (double)a * a;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst) worst = rel;
    }
    bool ok = bad == 0 && (tol == 0 ? diff == 0 : worst <= tol);
    checks++;
    failures += !ok;
    if (ok && !verbose) return;
    printf("%s %s: %dx%d, worst row rel %.3g (tol %g%s)%s\n", ok ? "ok  " : "FAIL", what, rows, cols, worst, tol,
           tol == 0 ? ": identical bits" : "", bad ? ", unwritten or non-finite elements" : "");
}

/* Rows past `rows` and columns past `cols` (up to stride) still hold the poison. */
static void untouched(const char *what, const float *y, int rows, int cols, size_t stride, int total_rows) {
    long bad = 0;
    for (int r = 0; r < total_rows; r++)
        for (size_t c = r < rows ? (size_t)cols : 0; c < stride; c++) bad += bits(y[(size_t)r * stride + c]) != 0xFFFFFFFFu;
    checks++;
    failures += bad != 0;
    if (bad) printf("FAIL %s: %ld elements written outside the output\n", what, bad);
}

struct matrix {
    enum nt_dtype dt;
    int rows, cols;
    uint8_t *data;
};

static struct matrix random_matrix(enum nt_dtype dt, int rows, int cols) {
    float *w = (float *)malloc((size_t)rows * cols * sizeof *w);
    for (size_t i = 0; i < (size_t)rows * cols; i++) w[i] = sval(0.005f, 0.05f) * (rnd() % 64 ? 1.0f : 8.0f);
    struct matrix m = {dt, rows, cols, (uint8_t *)dmem(nt_matrix_bytes(dt, rows, cols), 0)};
    nt_quantize_matrix(dt, w, rows, cols, m.data);
    free(w);
    return m;
}

/* The CPU backend's y = act(W x + bias) for n positions. */
static void cpu_product(struct nt_backend *cpu, const struct matrix *W, const float *bias, enum nt_act act, int n,
                        const float *x, int xs, float *y, int ys) {
    size_t sb = cpu->ops->pass_scratch_bytes(cpu, W->cols, n);
    void *scratch = cpu->ops->alloc(cpu, sb);
    int32_t *tok = (int32_t *)calloc((size_t)n, sizeof *tok);
    struct nt_pass p;
    memset(&p, 0, sizeof p);
    p.n = n;
    p.tokens = tok;
    p.scratch = scratch;
    struct nt_matrix m;
    memset(&m, 0, sizeof m);
    m.dtype = W->dt;
    m.rows = W->rows;
    m.cols = W->cols;
    m.data = W->data;
    m.name = "test.W";
    cpu->ops->begin_pass(cpu, &p);
    cpu->ops->matmul(cpu, &p, n, &m, bias, act, x, xs, y, ys);
    cpu->ops->end_pass(cpu, &p);
    cpu->ops->release(cpu, scratch);
    free(tok);
}

/* The emulated plain product over n positions, items of `group`. */
static void cuda_product(const struct matrix *W, const float *bias, enum nt_act act, int n, const float *x, int xs,
                         float *y, int ys, int group) {
    struct pk_product a;
    memset(&a, 0, sizeof a);
    a.W = W->data;
    a.dtype = W->dt;
    a.rows = W->rows;
    a.cols = W->cols;
    a.bias = bias;
    a.act = act;
    a.x = x;
    a.x_stride = xs;
    a.y = y;
    a.y_stride = ys;
    a.qx = (uint8_t *)dmem((size_t)n * pk_qx_stride(W->cols), 1);
    a.n = n;
    a.group = group;
    run_product(&a, (n + group - 1) / group);
    dfree(a.qx);
}

static void plain_case(struct nt_backend *cpu, enum nt_dtype dt, int rows, int cols, int n, int variant) {
    char what[160];
    snprintf(what, sizeof what, "%s %dx%d n=%d%s%s", nt_dtype_name(dt), rows, cols, n, variant & 1 ? " bias" : "",
             variant & 2 ? " relu2" : "");
    struct matrix W = random_matrix(dt, rows, cols);
    int xs = cols + (variant & 1 ? 5 : 0), ys = rows + (variant & 1 ? 3 : 0);
    float *bias = NULL;
    if (variant & 1) {
        bias = (float *)dmem((size_t)rows * 4, 0);
        for (int r = 0; r < rows; r++) bias[r] = sval(0.01f, 0.5f);
    }
    enum nt_act act = variant & 2 ? NT_ACT_RELU2 : NT_ACT_NONE;
    float *x = (float *)dmem((size_t)n * xs * 4, 0);
    for (int t = 0; t < n; t++)
        for (int c = 0; c < xs; c++) x[(size_t)t * xs + c] = c < cols ? sval(0.02f, 1.0f) * (rnd() % 50 ? 1.0f : 30.0f) : NAN;
    if (cols >= 64)
        for (int c = 32; c < 64; c++) x[c] = 0.0f; /* an all-zero block: d = 0 */
    if (n > 1)
        for (int c = 0; c < 32 && c < cols; c++) x[(size_t)xs + c] = 1e-38f * (c % 3 ? 1.0f : -1.0f);
    size_t yb = (size_t)(n + 1) * ys * 4;
    float *yc = (float *)dmem(yb, 1), *yg = (float *)dmem(yb, 1), *y1 = (float *)dmem(yb, 1);
    float *yr = (float *)dmem(yb, 1);
    cpu_product(cpu, &W, bias, act, n, x, xs, yc, ys);
    cuda_product(&W, bias, act, n, x, xs, yg, ys, pk_group_plain(dt, n));
    compare(what, yc, yg, n, rows, (size_t)ys, NT_CUDA_PACKED_TOL);
    untouched(what, yg, n, rows, (size_t)ys, n + 1);
    for (int t = 0; t < n; t++) cuda_product(&W, bias, act, 1, x + (size_t)t * xs, xs, y1 + (size_t)t * ys, ys, 1);
    char w2[200];
    snprintf(w2, sizeof w2, "%s: positions alone", what);
    compare(w2, yg, y1, n, rows, (size_t)ys, 0);
    nt_cuda_packed_reference(1);
    cuda_product(&W, bias, act, n, x, xs, yr, ys, pk_group_plain(dt, n));
    nt_cuda_packed_reference(0);
    snprintf(w2, sizeof w2, "%s: reference kernel", what);
    compare(w2, yg, yr, n, rows, (size_t)ys, 0);
    dfree(W.data), dfree(bias), dfree(x), dfree(yc), dfree(yg), dfree(y1), dfree(yr);
}

/* moe_experts' products for chosen expert indices: the lists as k_moe_plan makes them, then up
 * (x gathered by position, relu^2) and down (to each entry's own row) as grouped products. */
static void grouped_case(struct nt_backend *cpu, enum nt_dtype dt, int E, int k, int L, int mi, int n) {
    int nk = n * k, group = pk_group_grouped(dt, dt, n, k, E);
    char what[160];
    snprintf(what, sizeof what, "experts %s E %d k %d L %d mi %d n=%d (items of %d)", nt_dtype_name(dt), E, k, L, mi,
             n, group);
    struct matrix *up = (struct matrix *)malloc((size_t)E * sizeof *up), *dn = (struct matrix *)malloc((size_t)E * sizeof *dn);
    const uint8_t **tup = (const uint8_t **)dmem((size_t)E * sizeof *tup, 0), **tdn = (const uint8_t **)dmem((size_t)E * sizeof *tdn, 0);
    for (int e = 0; e < E; e++) {
        up[e] = random_matrix(dt, mi, L), dn[e] = random_matrix(dt, L, mi);
        tup[e] = up[e].data, tdn[e] = dn[e].data;
    }
    int32_t *idx = (int32_t *)dmem((size_t)nk * 4, 0);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = rnd() % 3 == 0 ? 1 : (int)(rnd() % (uint64_t)E); /* one hot expert */
                dup = 0;
                for (int j2 = 0; j2 < j; j2++) dup |= idx[t * k + j2] == e;
            } while (dup);
            idx[t * k + j] = e;
        }
    /* the lists: count, start, items (e << 16 | g), entries in position order */
    int32_t *count = (int32_t *)dmem((size_t)E * 4, 0), *start = (int32_t *)dmem((size_t)E * 4, 0);
    int32_t *items = (int32_t *)dmem((size_t)(2 * nk + 1) * 4, 0), *entries = (int32_t *)dmem((size_t)nk * 4, 0);
    int32_t *n_items_d = (int32_t *)dmem(4, 0), n_items = 0;
    for (int i = 0; i < nk; i++) count[idx[i]]++;
    for (int e = 0, at = 0; e < E; e++) {
        start[e] = at;
        int c = 0;
        for (int i = 0; i < nk; i++)
            if (idx[i] == e) entries[at + c++] = i;
        at += count[e];
        for (int g = 0; g * group < count[e]; g++) items[n_items++] = e << 16 | g;
    }
    *n_items_d = n_items;
    float *x = (float *)dmem((size_t)n * L * 4, 0);
    for (size_t i = 0; i < (size_t)n * L; i++) x[i] = sval(0.02f, 4.0f);
    float *inner = (float *)dmem((size_t)(nk + 1) * mi * 4, 1), *eo = (float *)dmem((size_t)(nk + 1) * L * 4, 1);
    struct pk_product a;
    memset(&a, 0, sizeof a);
    a.grouped = 1;
    a.k = k;
    a.n = nk;
    a.group = group;
    a.idx = idx;
    a.count = count;
    a.start = start;
    a.items = items;
    a.n_items = n_items_d;
    a.entries = entries;
    a.qx = (uint8_t *)dmem((size_t)nk * pk_qx_stride(L > mi ? L : mi), 1);
    struct pk_product u = a;
    u.Wtab = tup, u.dtype = dt, u.rows = mi, u.cols = L, u.act = NT_ACT_RELU2, u.x = x, u.x_stride = L, u.xmode = 1;
    u.y = inner, u.y_stride = mi, u.ymode = 0;
    run_product(&u, n_items);
    struct pk_product d = a;
    d.Wtab = tdn, d.dtype = dt, d.rows = L, d.cols = mi, d.act = NT_ACT_NONE, d.x = inner, d.x_stride = mi, d.xmode = 2;
    d.y = eo, d.y_stride = L, d.ymode = 1;
    run_product(&d, n_items);
    untouched(what, inner, nk, mi, (size_t)mi, nk + 1);
    untouched(what, eo, nk, L, (size_t)L, nk + 1);

    /* each entry on its own: the CPU's product and the plain CUDA one of its expert */
    float *ic = (float *)dmem((size_t)nk * mi * 4, 1), *ig = (float *)dmem((size_t)nk * mi * 4, 1);
    float *oc = (float *)dmem((size_t)nk * L * 4, 1), *og = (float *)dmem((size_t)nk * L * 4, 1);
    for (int gi = 0; gi < nk; gi++) {
        int ts = entries[gi], e = idx[ts];
        const float *xp = x + (size_t)(ts / k) * L;
        cpu_product(cpu, &up[e], NULL, NT_ACT_RELU2, 1, xp, L, ic + (size_t)gi * mi, mi);
        cuda_product(&up[e], NULL, NT_ACT_RELU2, 1, xp, L, ig + (size_t)gi * mi, mi, 1);
        const float *ip = inner + (size_t)gi * mi;
        cpu_product(cpu, &dn[e], NULL, NT_ACT_NONE, 1, ip, mi, oc + (size_t)ts * L, L);
        cuda_product(&dn[e], NULL, NT_ACT_NONE, 1, ip, mi, og + (size_t)ts * L, L, 1);
    }
    char w2[220];
    snprintf(w2, sizeof w2, "%s: up vs cpu", what);
    compare(w2, ic, inner, nk, mi, (size_t)mi, NT_CUDA_PACKED_TOL);
    snprintf(w2, sizeof w2, "%s: up vs plain cuda", what);
    compare(w2, ig, inner, nk, mi, (size_t)mi, 0);
    snprintf(w2, sizeof w2, "%s: down vs cpu", what);
    compare(w2, oc, eo, nk, L, (size_t)L, NT_CUDA_PACKED_TOL);
    snprintf(w2, sizeof w2, "%s: down vs plain cuda", what);
    compare(w2, og, eo, nk, L, (size_t)L, 0);
    for (int e = 0; e < E; e++) dfree(up[e].data), dfree(dn[e].data);
    free(up), free(dn);
    dfree(tup), dfree(tdn), dfree(idx), dfree(count), dfree(start), dfree(items), dfree(entries), dfree(n_items_d);
    dfree(x), dfree(inner), dfree(eo), dfree(a.qx), dfree(ic), dfree(ig), dfree(oc), dfree(og);
}

int main(int argc, char **argv) {
    struct nt_backend *cpu = nt_cpu_backend_new(1);
    if (!cpu) {
        fprintf(stderr, "test_cuda_emu: no CPU backend\n");
        return 1;
    }
    verbose = argc > 1 && !strcmp(argv[1], "-v"); /* -v: a line per check, not only failures */
    if (pk_setup(0) != cudaSuccess) { /* what the backend does at open: k_mma_wide's shared memory, the SMs */
        fprintf(stderr, "test_cuda_emu: pk_setup failed\n");
        return 1;
    }
    static const struct {
        int rows, cols;
    } shapes[] = {
        {67, 2688}, /* Nano's hidden size as cols */
        {131, 256}, /* odd rows, more than one tensor-core row block */
        {40, 1856}, /* Nano's expert width as cols */
        {33, 100},  /* q8_2f: cols % 32 != 0, the reference kernel */
        {20, 8224}, /* wider than a decode product quantizes itself: k_quantize, then k_gemv */
    };
    static const int ns[] = {1, 3, 17, 40};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (enum nt_dtype dt : {NT_DTYPE_Q8_2F, NT_DTYPE_Q4TP}) {
            if (!nt_format_accepts(dt, shapes[si].rows, shapes[si].cols, NULL)) continue;
            for (int i = 0; i < 4; i++) plain_case(cpu, dt, shapes[si].rows, shapes[si].cols, ns[i], i);
        }
    for (enum nt_dtype dt : {NT_DTYPE_Q4TP, NT_DTYPE_Q8_2F})
        for (int n : {1, 9, 40}) grouped_case(cpu, dt, 6, 2, 256, 96, n);
    cpu->ops->destroy(cpu);
    printf("%-28s %d checks, %d failed\n", "test_cuda_emu", checks, failures);
    if (checks == 0) fprintf(stderr, "FAIL test_cuda_emu: no check ran\n");
    return failures || checks == 0 ? 1 : 0;
}
