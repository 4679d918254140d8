/* matmul_q_amx.h - the AMX kernels of the packed products (NT_CPU_AMX), a part of matmul_q.c:
 * included once by it after the AVX-512 VNNI kernels, whose helpers it shares and which serve
 * the passes too short for tiles (n < AMX_MIN_N: one position stays the same bits either way).
 *
 * THE ARITHMETIC is matmul_q.c's, unchanged: per (row, position) eight lane chains, lane l of
 * block b adding fmaf((float)isum[l], d_b or s_b, acc[l]) in increasing b, then tree8. A lane's
 * isum is a sum over 4 columns only, so a tile product may not sum over more than one lane's 4
 * bytes: tdpbssd runs with K = 4 (A: 16 weight rows x the lane's 4 int8 weights; B: one row of 16
 * positions x the lane's 4 q bytes; C: 16 x 16 exact int32 isum, one tile instruction per lane
 * and block). The tile unit's time per instruction is the same for K = 4 as for K = 64
 * (measured: dev/cpu/int8_dot_peak.c), so this uses 1/16 of its multiply rate; what AMX gives
 * here is that the integer sums leave the vector pipes, which are left with the conversion and
 * the FMA of each chain step (the AVX-512 VNNI kernels also spend a vpdpbusd there).
 *
 * Signed x signed (tdpbssd): q8_2f's weights are read as stored, straight from the payload (tile
 * rows = weight rows, stride = cols) for whole groups of 16 rows; q4tp's nibbles are unpacked
 * (value - 8) into a per-call buffer per chunk of AMX_TB blocks, which every position group then
 * reuses (a last group of fewer than 16 rows goes through the same buffer, zero rows after it).
 * The activations come in the AMX layout of matmul_q.c (nt_cpu_quantize_x_q: lane-major units, so a
 * B tile is one 64-byte row), written for passes of AMX_MIN_N or more.
 *
 * Chains live in registers over a unit of AMX_UB blocks for one lane (16 rows x 16 positions =
 * 16 zmm) and in memory between units; per block the C tile is stored, each of its 16 rows
 * (16 positions of one weight row) converted (vcvtdq2ps) and folded by one FMA with d (q8_2f:
 * the 16 positions' d of the block) or with s = scale * d (q4tp: made once per unit for the 8
 * lanes). Four C tiles are in flight so the tile unit's latency overlaps the folds.
 *
 * WHY IT IS NOT THE DEFAULT (measured on a Sapphire Rapids guest; docs/PERF.md "AMX int8"): every
 * lane sum leaves the tile unit through memory, 4 bytes stored and loaded per (row, position,
 * lane) where AVX-512 VNNI keeps it in a register, and there is no tile-to-vector move on this
 * processor. tilestored of a 16 x 16 result and the vector work on it do not overlap with the
 * tile unit's instructions (they share a port: tdpbssd + the fold with vcvtdq2ps took the sum of
 * their times), so the step (int8_dot_peak's "K=4 + tilestored + fold") runs at ~70 G
 * multiply-adds/s a core against ~110 for the AVX-512 VNNI q8_2f kernel whole; the products
 * measure 1.4 - 1.9x slower. A larger K would need a coarser arithmetic (one sum per 32-column
 * block), which would change every variant's bits and the CUDA kernels'.
 */

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define AMXT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,amx-tile,amx-int8")))

#define AMX_TB 32 /* blocks per weight chunk (q4tp unpacked once per chunk, 16 KB) */
#define AMX_UB 8  /* blocks per unit: the span of a lane's chains in registers */
#define AMX_MAXG 4 /* position groups per sweep (64 positions) */

int nt_cpu_amx_ready(void) {
    static _Atomic int ready = -1;
    int v = ready;
    if (v >= 0) return v;
    v = 0;
#if defined(__linux__)
    unsigned a, b, c, d;
    /* CPUID.7.0:EDX bit 24 AMX-TILE, bit 25 AMX-INT8; CPUID.1:ECX bit 27 OSXSAVE */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) && __get_cpuid(1, &a, &b, &c, &d) &&
        (c >> 27 & 1)) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        /* XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state; Linux then
         * hands the data state out per process on request (ARCH_REQ_XCOMP_PERM 0x1023,
         * XFEATURE_XTILEDATA 18), and ARCH_GET_XCOMP_PERM (0x1022) says whether it was granted */
        unsigned long perm = 0;
        if ((lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, 0x1023, 18) == 0 &&
            syscall(SYS_arch_prctl, 0x1022, &perm) == 0 && (perm >> 18 & 1))
            v = 1;
    }
#endif
    ready = v;
    return v;
}

/* The tile shapes (palette 1): tmm0-3 C (16 x 64 bytes), tmm4-5 A (16 rows x 4 bytes), tmm6-7 B
 * (1 row x 64 bytes). Loaded per call: the configuration is per thread. */
static AMXT void amx_config(void) {
    _Alignas(64) uint8_t cfg[64] = {0};
    static const uint16_t colsb[8] = {64, 64, 64, 64, 4, 4, 64, 64};
    static const uint8_t trows[8] = {16, 16, 16, 16, 16, 16, 1, 1};
    cfg[0] = 1;
    memcpy(cfg + 16, colsb, sizeof colsb);
    memcpy(cfg + 48, trows, sizeof trows);
    /* (not _tile_loadconfig: its asm names only the first 8 bytes as read, so the compiler may
     * drop the stores of the rest) */
    __asm__ volatile("ldtilecfg %0" ::"m"(*(const uint8_t(*)[64])cfg));
}

struct amx_work {
    _Alignas(64) int8_t w[16 * AMX_TB * 32];      /* [row][block][32] int8 weights (q4tp, or a short row group) */
    _Alignas(64) float sc[16][AMX_TB];           /* q4tp scales [row][block] */
    _Alignas(64) float S[AMX_UB][16][16];        /* q4tp s = scale * d [block][row][position] */
    _Alignas(64) float acc[AMX_MAXG][8][16][16]; /* chains [group][lane][row][position] */
    _Alignas(64) int32_t c[4][16][16];           /* the C tiles, stored [tile][row][position] */
    float tab[16][32];                           /* q4tp: the scales each row's codes select */
};

/* tiles T (C), TA (A) and TB (B) for block b of the unit */
#define AMX_DP(T, TA, TB_, b)                                                  \
    do {                                                                       \
        _tile_zero(T);                                                         \
        _tile_loadd(TA, a + 32 * (size_t)(b), (long)astride);                  \
        _tile_loadd(TB_, x + AMX_UNIT * (size_t)(b), 64);                      \
        _tile_dpbssd(T, TA, TB_);                                              \
    } while (0)
/* C tile T of block b folded into the 16 chains */
#define AMX_FOLD(T, b)                                                                                  \
    do {                                                                                                \
        _tile_stored(T, wk->c[T], 64);                                                                  \
        __m512 dv = q4 ? _mm512_setzero_ps() : _mm512_loadu_ps((const float *)(const void *)(x - 64 * l + AMX_UNIT * (size_t)(b) + 512)); \
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) {                                         \
            __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(wk->c[T][i]));                              \
            acc[i] = _mm512_fmadd_ps(v, q4 ? _mm512_load_ps(wk->S[b][i]) : dv, acc[i]);                 \
        }                                                                                               \
    } while (0)

/* Lane l of 16 rows x 16 positions over nbu blocks: a = the lane's weights in the unit's first
 * block (rows astride apart, +32 a block), x = the group's unit of that block + 64 l (+AMX_UNIT a
 * block), accp = the chains [row][position]. */
static INL AMXT void amx_lane(struct amx_work *wk, const int8_t *a, size_t astride, const uint8_t *x, int l, int nbu,
                              float *accp, int q4) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_load_ps(accp + 16 * i);
    int b = 0;
    for (; b + 4 <= nbu; b += 4) {
        AMX_DP(0, 4, 6, b);
        AMX_DP(1, 5, 7, b + 1);
        AMX_DP(2, 4, 6, b + 2);
        AMX_DP(3, 5, 7, b + 3);
        AMX_FOLD(0, b);
        AMX_FOLD(1, b + 1);
        AMX_FOLD(2, b + 2);
        AMX_FOLD(3, b + 3);
    }
    for (; b < nbu; b++) {
        AMX_DP(0, 4, 6, b);
        AMX_FOLD(0, b);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_store_ps(accp + 16 * i, acc[i]);
}
#undef AMX_DP
#undef AMX_FOLD

static AMXT void amx_lane_q8(struct amx_work *wk, const int8_t *a, size_t astride, const uint8_t *x, int l, int nbu, float *accp) {
    amx_lane(wk, a, astride, x, l, nbu, accp, 0);
}
static AMXT void amx_lane_q4(struct amx_work *wk, const int8_t *a, size_t astride, const uint8_t *x, int l, int nbu, float *accp) {
    amx_lane(wk, a, astride, x, l, nbu, accp, 1);
}

/* Blocks g0 .. g0+nbc-1 of rows r .. r+nr-1 into wk->w as int8 (zero rows from nr on); q4tp also
 * their scales into wk->sc. */
static AMXT void amx_fill(const struct nt_mm *m, struct amx_work *wk, int r, int nr, int64_t g0, int nbc) {
    const struct nt_matrix *W = m->W;
    int64_t rows = W->rows, cols = W->cols;
    const uint8_t *Wp = (const uint8_t *)W->data;
    memset(wk->w, 0, sizeof wk->w);
    if (W->dtype == NT_DTYPE_Q8_2F) {
        for (int i = 0; i < nr; i++)
            for (int b = 0; b < nbc; b++) {
                int64_t c0 = 32 * (g0 + b), len = cols - c0 < 32 ? cols - c0 : 32;
                memcpy(wk->w + ((size_t)i * AMX_TB + (size_t)b) * 32, Wp + (size_t)(r + i) * (size_t)cols + (size_t)c0, (size_t)len);
            }
        return;
    }
    int64_t gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    const uint8_t *codes = Wp + nt_q4tp_codes_offset(rows, cols);
    memset(wk->sc, 0, sizeof wk->sc);
    for (int i = 0; i < nr; i++) {
        const uint8_t *nib = Wp + (size_t)(r + i) * (size_t)gpr * 16, *cr = codes + (size_t)(r + i) * (size_t)cstride;
        for (int b = 0; b < nbc; b++) {
            int64_t g = g0 + b;
            __m256i v = _mm256_sub_epi8(q4_unpack(nib + 16 * g), _mm256_set1_epi8(8));
            _mm256_store_si256((__m256i *)(void *)(wk->w + ((size_t)i * AMX_TB + (size_t)b) * 32), v);
            wk->sc[i][b] = wk->tab[i][q4_code(cr, g)];
        }
    }
}

/* Rows r .. r+nr-1 (nr <= 16), every position of the pass. */
static AMXT void amx_rows16(const struct nt_mm *m, struct amx_work *wk, int r, int nr) {
    const struct nt_matrix *W = m->W;
    int q4 = W->dtype == NT_DTYPE_Q4TP;
    int64_t rows = W->rows, cols = W->cols, nb = q_blocks(cols);
    const uint8_t *Wp = (const uint8_t *)W->data;
    const uint8_t *qx = (const uint8_t *)m->qx;
    int tail = (int)(cols - 32 * (nb - 1)); /* columns of the last block (q8_2f's may be short) */
    if (q4)
        for (int i = 0; i < nr; i++) q4_row_table(Wp + nt_q4tp_params_offset(rows, cols), r + i, wk->tab[i]);
    for (int ts = 0; ts < m->n; ts += AMX_G * AMX_MAXG) {
        int np = m->n - ts < AMX_G * AMX_MAXG ? m->n - ts : AMX_G * AMX_MAXG, ng = (np + AMX_G - 1) / AMX_G;
        memset(wk->acc, 0, sizeof wk->acc[0] * (size_t)ng);
        for (int64_t g0 = 0; g0 < nb; g0 += AMX_TB) {
            int nbc = nb - g0 < AMX_TB ? (int)(nb - g0) : AMX_TB;
            const int8_t *src;
            size_t stride;
            if (!q4 && nr == 16) {
                src = (const int8_t *)(const void *)(Wp + (size_t)r * (size_t)cols + 32 * (size_t)g0);
                stride = (size_t)cols;
            } else {
                amx_fill(m, wk, r, nr, g0, nbc);
                src = wk->w;
                stride = AMX_TB * 32;
            }
            for (int G = 0; G < ng; G++) {
                const uint8_t *unit = qx + ((size_t)(ts / AMX_G + G) * (size_t)nb + (size_t)g0) * AMX_UNIT;
                for (int u0 = 0; u0 < nbc; u0 += AMX_UB) {
                    int nbu = nbc - u0 < AMX_UB ? nbc - u0 : AMX_UB;
                    const uint8_t *ux = unit + (size_t)u0 * AMX_UNIT;
                    if (q4)
                        for (int b = 0; b < nbu; b++) {
                            __m512 d = _mm512_loadu_ps((const float *)(const void *)(ux + AMX_UNIT * (size_t)b + 512));
                            for (int i = 0; i < 16; i++) _mm512_store_ps(wk->S[b][i], _mm512_mul_ps(_mm512_set1_ps(wk->sc[i][u0 + b]), d));
                        }
                    /* the tile loads read wk->w and the unit through asm the compiler cannot see into */
                    __asm__ volatile("" ::: "memory");
                    int last = g0 + u0 + nbu == nb;
                    for (int l = 0; l < 8; l++) {
                        /* a lane absent from a short last block adds fmaf(0, d, acc) = acc: skipped */
                        int nl = last && 4 * l >= tail ? nbu - 1 : nbu;
                        const int8_t *a = src + 32 * (size_t)u0 + 4 * (size_t)l;
                        if (q4)
                            amx_lane_q4(wk, a, stride, ux + 64 * l, l, nl, wk->acc[G][l][0]);
                        else
                            amx_lane_q8(wk, a, stride, ux + 64 * l, l, nl, wk->acc[G][l][0]);
                    }
                }
            }
        }
        const uint8_t *rs = Wp + nt_q8_2f_rs_offset(rows, cols);
        for (int G = 0; G < ng; G++) {
            int gp = np - AMX_G * G < AMX_G ? np - AMX_G * G : AMX_G;
            for (int i = 0; i < nr; i++) {
                __m512 a[8];
                for (int l = 0; l < 8; l++) a[l] = _mm512_load_ps(wk->acc[G][l][i]);
                /* tree8, 16 positions at a time */
                __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                         _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
                if (!q4) t = _mm512_mul_ps(_mm512_set1_ps(nt_f16_to_f32(rd16(rs + 2 * (size_t)(r + i)))), t);
                _Alignas(64) float out[16];
                _mm512_store_ps(out, t);
                for (int p = 0; p < gp; p++)
                    m->y[(size_t)(ts + AMX_G * G + p) * m->y_stride + r + i] = nt_cpu_apply_act(out[p], m->bias, r + i, m->act);
            }
        }
    }
}

static AMXT void rows_q_amx(const struct nt_mm *m, int r0, int r1) {
    if (m->n < AMX_MIN_N) { /* the VNNI records (nt_cpu_quantize_x_q); the same bits */
        rows_q_avx512vnni(m, r0, r1);
        return;
    }
    struct amx_work wk; /* ~80 KB of stack: nothing is allocated inside a pass */
    amx_config();
    for (int r = r0; r < r1; r += 16) amx_rows16(m, &wk, r, r1 - r < 16 ? r1 - r : 16);
    _tile_release();
}
