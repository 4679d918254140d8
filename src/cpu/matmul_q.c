/* matmul_q.c - the CPU products with packed weights (q8_2f, q4tp; FORMATS.md): y[t] = act(W x[t] + b).
 *
 * THE ARITHMETIC (fixed: the scalar, AVX2, AVX-VNNI, AVX-512 VNNI and AMX variants here and the CUDA
 * kernels all compute exactly this, so a position's result is the same bits whatever the pass size, the blocking, the thread
 * count or the variant):
 *
 * 1. Activations, per position, in blocks of 32 columns (block b = columns [32b, min(32b+32, cols));
 *    q8_2f allows cols % 32 != 0, so its last block may be short, always a multiple of 4 long):
 *      x'[c] = x[c] * cs[c]  for q8_2f (one f32 multiply, cs widened from f16), x'[c] = x[c] for q4tp;
 *      amax  = max |x'[c]| over the block;
 *      d     = amax / 127.0f                      (f32 division)
 *      inv   = 127.0f / amax                      (f32 division); when that is not finite
 *              (amax == 0, or amax < ~3.7e-37 so the quotient overflows) inv = 0, so q = 0;
 *      q[c]  = clamp(rintf(x'[c] * inv), -127, 127)   (round to nearest even; clamp as
 *              fminf(fmaxf(v, -127), 127), which maps a NaN to -127).
 *    Input that is not finite gives unspecified (but memory-safe) output.
 * 2. q8_2f, row r: per block b, eight integer lane sums isum[l] = sum of qw[r][c] * q[c] over
 *    c = 32b + 4l .. 32b + 4l + 3 (those that exist; an absent lane sums to 0), then
 *      acc[l] = fmaf((float)isum[l], d_b, acc[l])  over b = 0, 1, ... in increasing order (acc = +0);
 *      y = rs[r] * tree(acc),  tree(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
 * 3. q4tp, row r: per group g (= block g): lane l = 0..3 sums (nib - 8) * q[c] over
 *    c = 32g + 8l + {0, 2, 4, 6}, lane 4 + l over c = 32g + 8l + {1, 3, 5, 7} (the low and the high
 *    nibbles of word l); s = nt_q4tp_scale(base_r, step_r, code_rg) * d_g (f32 multiply);
 *      acc[l] = fmaf((float)isum[l], s, acc[l])  over g in increasing order;  y = tree(acc).
 * (llama.cpp's block types read from GGUF files: matmul_ggml.c, with this step 1 and its own
 * integer sums and chain.)
 * 4. Then y = y + bias[r] (if any) and NT_ACT_RELU2: y = max(y, 0), y = y * y, as in matmul.c.
 * Integer sums are exact (|isum| <= 4 * 128 * 127 < 2^24, so the conversion is exact too), and
 * every float operation above is specified, so the variants agree bit for bit.
 *
 * QX, the quantized activations (m->qx, nt_cpu_qx_bytes): position t starts at t * PB, with
 * nb = ceil(cols / 32) and PB = round_up(68 * nb, 64) bytes; inside it, block b's 64-byte record
 * at 64 b and the block's f32 d at 64 nb + 4 b. A record is laid out for its format's kernel:
 *   q8_2f: 32 int16, "A | B": slot i < 16 holds column 4(i/2) + i%2 of the block, slot 16 + i
 *          column 4(i/2) + 2 + i%2. vpmaddwd of A (and of B) with the same arrangement of the
 *          weights gives per 32-bit lane l the sum over columns 4l, 4l+1 (4l+2, 4l+3); A + B is
 *          isum[l] in lane l. Missing columns of a short block are 0.
 *   q4tp:  32 int8, the block's even columns then its odd columns (byte i < 16: column 2i; byte
 *          16 + i: column 2i + 1), which is the order of a group's [low nibbles | high nibbles],
 *          so vpmaddubsw(nibbles, q) then vpmaddwd(., 1) gives lane l the sum M[l] of nib * q;
 *          then 8 int32 corr[l] = 8 * (sum of q over lane l's columns) - 0x4B400000. The nibbles
 *          are stored as value + 8, so isum = M - 8 * sum; the offset makes M - corr the bit
 *          pattern of the f32 1.5 * 2^23 + isum (exact: |isum| < 2^22), and (float)isum is one
 *          exact subtraction of 1.5 * 2^23 instead of a conversion (the subtraction can issue on
 *          the FP add ports; vcvtdq2ps competes with the multiplies: +5 % at n = 64, measured).
   ggml block types (matmul_ggml.c, every variant): 32 int8 q in column order, then the 8
 *          lane sums sx[l] = q[4l] + ... + q[4l+3] as f32 (exact: |sx| <= 508).
 * Those are the scalar and AVX2 variants' records. The VNNI variants (vpdpbusd: 4 products of
 * unsigned x signed bytes added exactly to an int32 lane) write their own, the same 64 bytes:
 *   q8_2f: 32 int8 q in column order, then 8 int32 start[l] = 0x4B400000 - 128 * (sum of q over
 *          columns 4l .. 4l+3). The kernel makes the weights unsigned (w ^ 0x80 = w + 128) and
 *          vpdpbusd(start, w + 128, q) = 0x4B400000 + isum in lane l.
 *   q4tp:  the q bytes as above, then start[l] = 0x4B400000 - 8 * sum (the AVX2 corr negated):
 *          vpdpbusd(start, nibbles, q) = 0x4B400000 + isum.
 * Either way (float)isum is one exact subtraction, the integer sums are the reference's, and so
 * are the results. The record layout follows the variant: nt_cpu_quantize_x and the products of
 * one pass must be given the same isa.
 * The AMX variant (matmul_q_amx.h) takes passes of AMX_MIN_N or more positions in its own layout
 * of the same bytes (below, at AMX_G), the VNNI records' q regrouped so that a tile row is one
 * lane's 4 bytes of 16 positions; shorter passes are the AVX-512 VNNI variant's, records and all.
 * A pass of n positions needs nt_cpu_qx_bytes(n, cols) = n * PB: 2.1 bytes per column (the AMX
 * layout, 576 bytes per 16 positions and block, fits in it for n >= 16).
 *
 * KERNELS, chosen at run time (cpu.h: nt_cpu_isa_selected; NEMOTRON_CPU forces one): a scalar
 * reference (always available) and AVX2 + FMA + F16C, AVX-VNNI, AVX-512 VNNI and AMX (only when
 * forced: slower here, matmul_q_amx.h says why), all bit-identical (tests/unit/test_matmul_q.c). The SIMD kernels are one text, matmul_q_kern.h,
 * compiled once per instruction set around its step (the integer block sum); AVX-512 VNNI
 * replaces the template's streaming kernels and register tiles by 512-bit ones that hold two rows
 * per vector (an odd last row runs the template's 256-bit ones):
 *   - streaming (every q8_2f pass, q4tp passes of up to 8 positions): R rows x P <= 4 positions
 *     at a time read straight from the payload (software prefetch of the next row block) or, for
 *     q8_2f blocks of 6 rows, from the backend's copy in the streaming layout (m->stream: one
 *     sequential stream, below q8z_stream), each weight vector unpacked once in registers for
 *     the P positions; rows in L2-sized chunks that every group of 4 positions sweeps in turn
 *     (so a pass reads the weights from DRAM once);
 *   - tiled (q4tp passes of 9 or more): a tile of 12 rows x 32 groups is unpacked once into
 *     nibble bytes and f32 scales and serves every position in 2 x 6 register tiles, with the
 *     products scale * d made 8 groups per multiply.
 * Each (row, position) chain is the one above in every kernel, so the choice of kernel, the
 * tiles and the thread split never change a result.
 *
 * WHAT BOUNDS THEM (measured by dev/cpu/matmul_q_bench.c and, per instruction set,
 * dev/cpu/int8_dot_peak.c; docs/PERF.md). On AVX2 a step (row, position, 32 columns)
 * costs at least 2 integer multiplies (vpmaddwd x2, or vpmaddubsw + vpmaddwd: no VNNI on AVX2),
 * the conversion and the FMA that the arithmetic above prescribes per block, i.e. 3 - 4 ops on
 * the two ports that also do FMAs: about 0.4 - 0.5 steps (13 - 16 multiply-adds) per cycle per
 * core, the rate of plain f32 FMAs. One position streams weights at 1 (q8_2f) or 0.52 (q4tp)
 * bytes per multiply-add, so a pass of 64 costs per position only what the machine's
 * bandwidth / FMA balance allows (about 2x for q4tp, 3x for q8_2f on a 2-core AVX2 VM).
 * With VNNI the integer sum is one instruction (the step: vpdpbusd, the subtraction, the FMA,
 * q4tp's scale product), and the 512-bit kernels do that for two rows at once.
 */
#include "cpu.h"

#include <immintrin.h>
#include <math.h>

#include "../quant/quant.h"

#define QB 32          /* columns per activation block (= q4tp group) */
#define QREC 64        /* bytes of one block record in qx */

static inline int64_t q_blocks(int64_t cols) { return (cols + QB - 1) / QB; }
static inline size_t q_pos_bytes(int64_t cols) {
    size_t nb = (size_t)q_blocks(cols);
    return (nb * (QREC + 4) + 63) / 64 * 64;
}

size_t nt_cpu_qx_bytes(int n, int64_t cols) { return (size_t)(n > 0 ? n : 0) * q_pos_bytes(cols); }

static inline int is_packed(enum nt_dtype dt) { return nt_cpu_int8_product(dt); }

static inline uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* q4tp's corr carries an offset: M - corr = isum + Q_MAGIC, whose bits as an f32 are
 * 1.5 * 2^23 + isum exactly (|isum| <= 4 * 15 * 127 < 2^22), so (float)isum is one exact
 * subtraction of 1.5 * 2^23 instead of a conversion (vsubps can issue where vcvtdq2ps cannot:
 * the conversion shares the two FMA / integer-multiply ports with every other step). */
#define Q_MAGIC 0x4B400000
#define Q_MAGIC_F 12582912.0f

/* Slot of column o (0..31) of a block inside its record. */
static inline int q8_slot(int o) { return (o & 3) < 2 ? 2 * (o >> 2) + (o & 1) : 16 + 2 * (o >> 2) + (o & 1); }
static inline int q4_slot(int o) { return (o & 1) ? 16 + (o >> 1) : o >> 1; }

/* The q4tp code of group g of a row whose codes start at `codes`. */
static inline int q4_code(const uint8_t *codes, int64_t g) {
    return (rd16(codes + ((5 * g) >> 3)) >> ((5 * g) & 7)) & 31;
}

/* Where a q4tp streaming kernel reads: rows from r, positions from t. */
struct q4_view {
    int64_t gpr, cstride;
    const uint8_t *params;    /* the matrix's row parameters */
    const uint8_t *codes;     /* row r's codes */
    const uint8_t *nib;       /* row r's nibbles */
    const uint8_t *qx;        /* position t's records */
    size_t pb, rowb;          /* bytes per position of qx, per row of nibbles */
};
static inline struct q4_view q4_view(const struct nt_mm *m, int r, int t) {
    const struct nt_matrix *W = m->W;
    int64_t rows = W->rows, cols = W->cols;
    const uint8_t *Wp = (const uint8_t *)W->data;
    struct q4_view v = {.gpr = nt_q4tp_gpr(cols), .cstride = nt_q4tp_cstride(cols), .pb = q_pos_bytes(cols)};
    v.rowb = (size_t)v.gpr * 16;
    v.params = Wp + nt_q4tp_params_offset(rows, cols);
    v.codes = Wp + nt_q4tp_codes_offset(rows, cols) + (size_t)r * (size_t)v.cstride;
    v.nib = Wp + (size_t)r * v.rowb;
    v.qx = (const uint8_t *)m->qx + (size_t)t * v.pb;
    return v;
}

/* Step 1's scalar parts, shared by both variants. */
static inline float q_inv(float amax) {
    float inv = 127.0f / amax;
    return inv < INFINITY ? inv : 0.0f;
}
static inline int q_round(float v, float inv) {
    float r = rintf(v * inv);
    r = fminf(fmaxf(r, -127.0f), 127.0f);
    return (int)r;
}

/* Writes the record and d of one block from its x' values v[0..len), in the AVX2 / scalar layout
 * or (vnni) the VNNI kernels' one. */
static void q_block_scalar(enum nt_dtype fmt, int vnni, const float *v, int len, uint8_t *rec, float *d) {
    float amax = 0.0f;
    for (int c = 0; c < len; c++) {
        float a = fabsf(v[c]);
        if (a > amax) amax = a;
    }
    float inv = q_inv(amax);
    *d = amax / 127.0f;
    memset(rec, 0, QREC);
    if (nt_dtype_is_ggml_block(fmt)) { /* matmul_ggml.c's record: q in column order, lane sums */
        int8_t q[32] = {0};
        float sum[8];
        for (int c = 0; c < len; c++) q[c] = (int8_t)q_round(v[c], inv);
        for (int l = 0; l < 8; l++) sum[l] = (float)(q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
        memcpy(rec, q, 32);
        memcpy(rec + 32, sum, 32);
    } else if (fmt == NT_DTYPE_Q8_2F && vnni) {
        int8_t q[32] = {0};
        int32_t start[8];
        for (int c = 0; c < len; c++) q[c] = (int8_t)q_round(v[c], inv);
        for (int l = 0; l < 8; l++) start[l] = Q_MAGIC - 128 * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
        memcpy(rec, q, 32);
        memcpy(rec + 32, start, 32);
    } else if (fmt == NT_DTYPE_Q8_2F) {
        int16_t s[32] = {0};
        for (int c = 0; c < len; c++) s[q8_slot(c)] = (int16_t)q_round(v[c], inv);
        memcpy(rec, s, 64);
    } else {
        int8_t q[32] = {0};
        int32_t corr[8];
        for (int c = 0; c < len; c++) q[q4_slot(c)] = (int8_t)q_round(v[c], inv);
        for (int l = 0; l < 8; l++) {
            int32_t s8 = 8 * (q[4 * l] + q[4 * l + 1] + q[4 * l + 2] + q[4 * l + 3]);
            corr[l] = vnni ? Q_MAGIC - s8 : s8 - Q_MAGIC; /* VNNI: the start value, AVX2: what is subtracted */
        }
        memcpy(rec, q, 32);
        memcpy(rec + 32, corr, 32);
    }
}

static void quantize_pos_scalar(const struct nt_matrix *W, const float *x, uint8_t *dst) {
    int64_t cols = W->cols, nb = q_blocks(cols);
    const uint8_t *cs = (const uint8_t *)W->data + nt_q8_2f_cs_offset(W->rows, cols);
    float *dv = (float *)(void *)(dst + QREC * nb);
    for (int64_t b = 0; b < nb; b++) {
        int len = cols - 32 * b < 32 ? (int)(cols - 32 * b) : 32;
        float v[32];
        for (int c = 0; c < len; c++) {
            int64_t col = 32 * b + c;
            v[c] = W->dtype == NT_DTYPE_Q8_2F ? x[col] * nt_f16_to_f32(rd16(cs + 2 * col)) : x[col];
        }
        float d;
        q_block_scalar(W->dtype, 0, v, len, dst + QREC * b, &d);
        memcpy(dv + b, &d, 4);
    }
}

/* ---- AVX2 ------------------------------------------------------------------------------------ */

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INL __attribute__((always_inline)) inline

static INL AVX2 float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* The fixed lane tree of step 2, as matmul.c's hsum8. */
static INL AVX2 float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* clamp(rint(v * inv)) of step 1 on 8 lanes: max then min (a NaN becomes -127, as fmaxf does),
 * then the conversion, which rounds to nearest even (MXCSR default). */
static INL AVX2 __m256i q_round8(__m256 v, __m256 inv) {
    __m256 p = _mm256_mul_ps(v, inv);
    p = _mm256_max_ps(p, _mm256_set1_ps(-127.0f));
    p = _mm256_min_ps(p, _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(p);
}

/* One full block (32 x' values in v0..v3, columns 0-7, 8-15, 16-23, 24-31). */
static INL AVX2 void q_block_avx2(enum nt_dtype fmt, int vnni, __m256 v0, __m256 v1, __m256 v2, __m256 v3,
                                  uint8_t *rec, float *dv) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    float amax = hmax8(a);
    float d = amax / 127.0f;
    __m256 inv = _mm256_set1_ps(q_inv(amax));
    memcpy(dv, &d, 4);
    if ((fmt == NT_DTYPE_Q8_2F && vnni) || nt_dtype_is_ggml_block(fmt)) {
        /* int8 in column order: the packs interleave 4-column words across the 128-bit halves
         * (c0-3, c8-11, c16-19, c24-27 | c4-7, ...), the permutation restores their order */
        __m256i p01 = _mm256_packs_epi32(q_round8(v0, inv), q_round8(v1, inv));
        __m256i p23 = _mm256_packs_epi32(q_round8(v2, inv), q_round8(v3, inv));
        __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        _mm256_storeu_si256((__m256i *)(void *)rec, q);
        if (fmt != NT_DTYPE_Q8_2F) /* a ggml type: the lane sums as f32 (matmul_ggml.c) */
            _mm256_storeu_ps((float *)(void *)(rec + 32), _mm256_cvtepi32_ps(sum));
        else
            _mm256_storeu_si256((__m256i *)(void *)(rec + 32), _mm256_sub_epi32(_mm256_set1_epi32(Q_MAGIC), _mm256_slli_epi32(sum, 7)));
    } else if (fmt == NT_DTYPE_Q8_2F) {
        /* column pairs as 64-bit units: A takes pairs (0,1),(4,5),..., B pairs (2,3),(6,7),... */
        __m256d p0 = _mm256_castps_pd(v0), p1 = _mm256_castps_pd(v1);
        __m256d p2 = _mm256_castps_pd(v2), p3 = _mm256_castps_pd(v3);
        __m256 a0 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_shuffle_pd(p0, p1, 0x0), 0xD8));
        __m256 b0 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_shuffle_pd(p0, p1, 0xF), 0xD8));
        __m256 a1 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_shuffle_pd(p2, p3, 0x0), 0xD8));
        __m256 b1 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_shuffle_pd(p2, p3, 0xF), 0xD8));
        __m256i A = _mm256_permute4x64_epi64(_mm256_packs_epi32(q_round8(a0, inv), q_round8(a1, inv)), 0xD8);
        __m256i B = _mm256_permute4x64_epi64(_mm256_packs_epi32(q_round8(b0, inv), q_round8(b1, inv)), 0xD8);
        _mm256_storeu_si256((__m256i *)(void *)rec, A);
        _mm256_storeu_si256((__m256i *)(void *)(rec + 32), B);
    } else {
        __m256 e0 = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
        __m256 o0 = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
        __m256 e1 = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(v2, v3, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
        __m256 o1 = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(v2, v3, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
        __m256i pe = _mm256_packs_epi32(q_round8(e0, inv), q_round8(e1, inv));
        __m256i po = _mm256_packs_epi32(q_round8(o0, inv), q_round8(o1, inv));
        __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(pe, po), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        __m256i corr = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        _mm256_storeu_si256((__m256i *)(void *)rec, q);
        corr = _mm256_slli_epi32(corr, 3);
        corr = vnni ? _mm256_sub_epi32(_mm256_set1_epi32(Q_MAGIC), corr) : _mm256_sub_epi32(corr, _mm256_set1_epi32(Q_MAGIC));
        _mm256_storeu_si256((__m256i *)(void *)(rec + 32), corr);
    }
}

/* AMX layout (matmul_q_amx.h): position t of a pass of n >= AMX_MIN_N positions lives in slot
 * t % AMX_G of group t / AMX_G, whose unit for block b (AMX_UNIT bytes at (group * nb + b) *
 * AMX_UNIT) holds per lane l the 4 q bytes of each slot (64 l + 4 slot: one tile row) and then
 * the slots' d (512 + 4 slot). The q bytes of lane l are bytes 4l .. 4l+3 of the VNNI record. */
#define AMX_G 16
#define AMX_UNIT (8 * 64 + 64)
#define AMX_MIN_N 16

/* llama.cpp's block types have no AMX kernel: at that level they run AVX-512 VNNI's, on its records */
static inline int amx_layout(const struct nt_mm *m, int isa) {
    return isa == NT_CPU_AMX && m->n >= AMX_MIN_N && !nt_dtype_is_ggml_block(m->W->dtype);
}

static void amx_scatter(uint8_t *unit, int slot, const uint8_t *rec, float d) {
    for (int l = 0; l < 8; l++) memcpy(unit + 64 * l + 4 * slot, rec + 4 * l, 4);
    memcpy(unit + 512 + 4 * slot, &d, 4);
}

/* slot < 0: the position's records at dst (the layout above); slot >= 0: the AMX layout, dst the
 * unit of block 0 of the position's group, the VNNI records scattered into the slot. */
static AVX2 void quantize_pos_avx2(const struct nt_matrix *W, int vnni, const float *x, uint8_t *dst, int slot) {
    int64_t cols = W->cols, nb = q_blocks(cols), nfull = cols / 32;
    const uint8_t *cs = (const uint8_t *)W->data + nt_q8_2f_cs_offset(W->rows, cols);
    float *dv = (float *)(void *)(dst + QREC * nb);
    _Alignas(32) uint8_t rec[QREC];
    float d;
    for (int64_t b = 0; b < nfull; b++) {
        const float *xb = x + 32 * b;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        if (W->dtype == NT_DTYPE_Q8_2F) {
            const uint8_t *c = cs + 64 * b;
            v0 = _mm256_mul_ps(v0, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)c)));
            v1 = _mm256_mul_ps(v1, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(c + 16))));
            v2 = _mm256_mul_ps(v2, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(c + 32))));
            v3 = _mm256_mul_ps(v3, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(c + 48))));
        }
        if (slot < 0) {
            q_block_avx2(W->dtype, vnni, v0, v1, v2, v3, dst + QREC * b, dv + b);
        } else {
            q_block_avx2(W->dtype, vnni, v0, v1, v2, v3, rec, &d);
            amx_scatter(dst + AMX_UNIT * (size_t)b, slot, rec, d);
        }
    }
    if (nfull < nb) { /* the short last block of a q8_2f row: the scalar code, the same operations */
        int len = (int)(cols - 32 * nfull);
        float v[32];
        for (int c = 0; c < len; c++) {
            int64_t col = 32 * nfull + c;
            v[c] = x[col] * nt_f16_to_f32(rd16(cs + 2 * col));
        }
        q_block_scalar(W->dtype, vnni, v, len, slot < 0 ? dst + QREC * nfull : rec, &d);
        if (slot < 0)
            memcpy(dv + nfull, &d, 4);
        else
            amx_scatter(dst + AMX_UNIT * (size_t)nfull, slot, rec, d);
    }
}

void nt_cpu_quantize_x_q(const struct nt_mm *m, int isa, int t0, int t1) {
    size_t pb = q_pos_bytes(m->W->cols);
    if (amx_layout(m, isa)) {
        int64_t nb = q_blocks(m->W->cols);
        uint8_t *qx = (uint8_t *)m->qx;
        for (int t = t0; t < t1; t++)
            quantize_pos_avx2(m->W, 1, m->x + (size_t)t * (size_t)m->x_stride,
                              qx + (size_t)(t / AMX_G) * (size_t)nb * AMX_UNIT, t % AMX_G);
        /* the last group's empty slots: q = 0 and d = 0 (their sums are computed and dropped) */
        if (t1 == m->n && m->n % AMX_G) {
            static const uint8_t zero[QREC];
            for (int s = m->n % AMX_G; s < AMX_G; s++)
                for (int64_t b = 0; b < nb; b++)
                    amx_scatter(qx + ((size_t)(m->n / AMX_G) * (size_t)nb + (size_t)b) * AMX_UNIT, s, zero, 0.0f);
        }
        return;
    }
    for (int t = t0; t < t1; t++) {
        const float *x = m->x + (size_t)t * (size_t)m->x_stride;
        uint8_t *dst = (uint8_t *)m->qx + (size_t)t * pb;
        if (isa != NT_CPU_SCALAR) /* every SIMD variant quantizes with AVX2; the layout is its kernels' */
            quantize_pos_avx2(m->W, isa >= NT_CPU_AVXVNNI, x, dst, -1);
        else
            quantize_pos_scalar(m->W, x, dst);
    }
}

/* ---- scalar kernels (the reference) ---------------------------------------------------------- */

static void rows_scalar_q8(const struct nt_mm *m, int r0, int r1) {
    const struct nt_matrix *W = m->W;
    int64_t rows = W->rows, cols = W->cols, nb = q_blocks(cols);
    const uint8_t *P = (const uint8_t *)W->data;
    const uint8_t *rs = P + nt_q8_2f_rs_offset(rows, cols);
    size_t pb = q_pos_bytes(cols);
    for (int r = r0; r < r1; r++) {
        const int8_t *qw = (const int8_t *)(const void *)(P + (size_t)r * (size_t)cols);
        float rsf = nt_f16_to_f32(rd16(rs + 2 * (size_t)r));
        for (int t = 0; t < m->n; t++) {
            const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t * pb;
            float acc[8] = {0};
            for (int64_t b = 0; b < nb; b++) {
                int16_t s[32];
                float d;
                memcpy(s, qx + QREC * b, 64);
                memcpy(&d, qx + QREC * nb + 4 * b, 4);
                int32_t isum[8] = {0};
                for (int o = 0; o < 32 && 32 * b + o < cols; o++) isum[o >> 2] += qw[32 * b + o] * s[q8_slot(o)];
                for (int l = 0; l < 8; l++) acc[l] = fmaf((float)isum[l], d, acc[l]);
            }
            m->y[(size_t)t * m->y_stride + r] = nt_cpu_apply_act(rsf * nt_cpu_tree8(acc), m->bias, r, m->act);
        }
    }
}

static void rows_scalar_q4(const struct nt_mm *m, int r0, int r1) {
    const struct nt_matrix *W = m->W;
    int64_t rows = W->rows, cols = W->cols, gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    const uint8_t *P = (const uint8_t *)W->data;
    const uint8_t *params = P + nt_q4tp_params_offset(rows, cols), *codes = P + nt_q4tp_codes_offset(rows, cols);
    size_t pb = q_pos_bytes(cols);
    for (int r = r0; r < r1; r++) {
        uint32_t pr = rd32(params + 4 * (size_t)r);
        float base = nt_f16_to_f32((uint16_t)(pr & 0xffff)), step = nt_f16_to_f32((uint16_t)(pr >> 16));
        const uint8_t *nib = P + (size_t)r * (size_t)gpr * 16, *cr = codes + (size_t)r * (size_t)cstride;
        for (int t = 0; t < m->n; t++) {
            const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t * pb;
            float acc[8] = {0};
            for (int64_t g = 0; g < gpr; g++) {
                const int8_t *q = (const int8_t *)(const void *)(qx + QREC * g);
                float d;
                memcpy(&d, qx + QREC * gpr + 4 * g, 4);
                float s = nt_q4tp_scale(base, step, q4_code(cr, g)) * d;
                int32_t isum[8] = {0};
                for (int l = 0; l < 4; l++)
                    for (int k = 0; k < 4; k++) {
                        uint8_t byte = nib[16 * g + 4 * l + k];
                        isum[l] += ((byte & 15) - 8) * q[q4_slot(8 * l + 2 * k)];
                        isum[4 + l] += ((byte >> 4) - 8) * q[q4_slot(8 * l + 2 * k + 1)];
                    }
                for (int l = 0; l < 8; l++) acc[l] = fmaf((float)isum[l], s, acc[l]);
            }
            m->y[(size_t)t * m->y_stride + r] = nt_cpu_apply_act(nt_cpu_tree8(acc), m->bias, r, m->act);
        }
    }
}

/* ---- AVX2 kernels ---------------------------------------------------------------------------- */

/* nt_q4tp_scale on 8 lanes, bit for bit: the same fma, clamps (max/min keep a NaN's -126 the way
 * the scalar comparisons do), nearest-even rounding, Horner chain and power-of-two multiply. */
static INL AVX2 __m256 q4_scale8(__m256 code, __m256 base, __m256 step) {
    __m256 t = _mm256_fmadd_ps(code, step, base);
    t = _mm256_max_ps(t, _mm256_set1_ps(-126.0f));
    t = _mm256_min_ps(t, _mm256_set1_ps(126.0f));
    __m256 i = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, i);
    __m256 p = _mm256_set1_ps(NT_EXP2_C7);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C6));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(NT_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(i), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The 32 scales a row's codes can select. */
static INL AVX2 void q4_row_table(const uint8_t *params, int64_t r, float *tab) {
    uint32_t pr = rd32(params + 4 * (size_t)r);
    __m256 base = _mm256_set1_ps(nt_f16_to_f32((uint16_t)(pr & 0xffff)));
    __m256 step = _mm256_set1_ps(nt_f16_to_f32((uint16_t)(pr >> 16)));
    __m256 c = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(tab + 8 * i, q4_scale8(c, base, step));
        c = _mm256_add_ps(c, _mm256_set1_ps(8.0f));
    }
}

/* A q4tp group's 16 bytes as [low nibbles | high nibbles], one byte per weight (value + 8). */
static INL AVX2 __m256i q4_unpack(const uint8_t *p) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* 32 int8 weights of a q8_2f block as the A | B int16 halves of the record layout. */
static INL AVX2 void q8_unpack(__m256i w, __m256i *A, __m256i *B) {
    const __m256i sh = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    w = _mm256_shuffle_epi8(w, sh);
    *A = _mm256_srai_epi16(_mm256_unpacklo_epi8(w, w), 8);
    *B = _mm256_srai_epi16(_mm256_unpackhi_epi8(w, w), 8);
}

/* The 32 weights of row block b of a q8_2f row; a short last block is loaded masked (whole
 * 4-column words), so nothing past the row is read. */
static INL AVX2 __m256i q8_load_block(const uint8_t *row, int64_t b, int64_t cols) {
    int64_t left = cols - 32 * b;
    if (left >= 32) return _mm256_loadu_si256((const __m256i *)(const void *)(row + 32 * b));
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left / 4)), idx);
    return _mm256_maskload_epi32((const int *)(const void *)(row + 32 * b), mask);
}

#define SP_MAX 4
#define SR_MAX 6
#define Q8_SR(P) ((P) == 1 ? 6 : (P) == 2 ? 4 : (P) == 3 ? 3 : 2)
#define Q4_SR(P) ((P) == 1 ? 4 : (P) == 2 ? 4 : (P) == 3 ? 3 : 2)

#define STREAM_CHUNK_BYTES (192 * 1024)

/* -- q4tp, many positions: unpack a row tile once, run every position over it -- */

/* For q4tp the streaming kernel pays, per (row, position, group), the scale multiply
 * s = scale * d and, per (row, group), the nibble unpack; for a larger pass a tile of TR rows x
 * TB groups is unpacked once into [low | high] nibble bytes and f32 scales, the products s of
 * a register tile are made 8 groups per multiply, and the tile (12 KB + 1.5 KB, in a 32 KB L1
 * with the 6 positions' activations) serves every position. Measured on a 1024 x 2688 matrix in cache,
 * one thread: n = 16 and 64 run at ~0.4 (row, position, group) steps per cycle, the ceiling of
 * the step's instruction mix (dev/cpu/matmul_q_bench.c), ~20 % above streaming. For q8_2f
 * the streaming kernel already reaches its step's ceiling (the int16 unpack is cheap when
 * shared by 4 positions and a tile was no faster), so it serves every pass size.
 * Accumulators of the tile's rows x the sweep's positions live in memory between column
 * chunks (a store and a load are exact, so chunking the columns changes no chain). */
#define TB 32                 /* groups per column chunk */
#define TR 12                 /* rows per tile */
#define Q4_MR 2               /* register tile: rows x positions (12 accumulators; 2 x 6 measured */
#define Q4_MP 6               /* 4 % above 3 x 4 and 4 x 3) */
#define MAXP 64               /* positions per sweep over a tile (longer passes: several sweeps) */

struct tile {
    int64_t g0, nbc;          /* first group of the chunk, groups in it */
    int nr;                   /* rows in the tile */
    _Alignas(64) uint8_t w[TR * TB * 32];    /* [row][group] [low | high] nibble bytes */
    _Alignas(64) float sc[TR * TB];          /* [row][group] scale */
    _Alignas(64) float acc[TR * MAXP * 8];   /* [row][position][lane] */
};

static AVX2 void tile_unpack(struct tile *T, const struct nt_matrix *W, int r) {
    int64_t rows = W->rows, cols = W->cols, gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    const uint8_t *P = (const uint8_t *)W->data;
    const uint8_t *params = P + nt_q4tp_params_offset(rows, cols), *codes = P + nt_q4tp_codes_offset(rows, cols);
    for (int i = 0; i < T->nr; i++) {
        float tab[32];
        q4_row_table(params, r + i, tab);
        const uint8_t *nib = P + (size_t)(r + i) * (size_t)gpr * 16, *cr = codes + (size_t)(r + i) * (size_t)cstride;
        uint8_t *dst = T->w + (size_t)i * TB * 32;
        float *sc = T->sc + (size_t)i * TB;
        for (int64_t b = 0; b < T->nbc; b++) {
            int64_t g = T->g0 + b;
            _mm256_store_si256((__m256i *)(void *)(dst + 32 * b), q4_unpack(nib + 16 * g));
            sc[b] = tab[q4_code(cr, g)];
        }
    }
}

/* The nibbles of the tile after the one at (r, g0) in rows_tiled_q4's order (the next chunk of the
 * same rows, else the next rows' first chunk), fetched into L2 a few lines at a time between the
 * register tiles of this one: a pass reads each tile's nibbles from DRAM, and tile_unpack waited on
 * them (about half its samples on one load; 6 - 7 % of a mid prompt). Spread out, because a burst
 * of ~100 prefetches holds the miss buffers the running kernel needs. */
struct tile_fetch {
    const uint8_t *base; /* the next tile's first row's first group */
    size_t row_stride;   /* bytes between its rows */
    int lines, rows;     /* 64-byte lines per row; rows */
    int row, line;       /* the next line to fetch */
};
static inline struct tile_fetch tile_fetch_next(const struct nt_matrix *W, int r, int r1, int64_t g0) {
    int64_t gpr = nt_q4tp_gpr(W->cols);
    int same = g0 + TB < gpr;
    int64_t g = same ? g0 + TB : 0;
    int rn = same ? r : r + TR;
    struct tile_fetch f = {.row_stride = (size_t)gpr * 16};
    f.rows = rn < r1 ? (r1 - rn < TR ? r1 - rn : TR) : 0;
    f.lines = (int)(((gpr - g < TB ? gpr - g : TB) * 16 + 63) / 64);
    if (f.rows > 0) /* (past the last tile there is nothing to point at) */
        f.base = (const uint8_t *)W->data + ((size_t)rn * (size_t)gpr + (size_t)g) * 16;
    return f;
}
static inline void tile_fetch_some(struct tile_fetch *f, int count) {
    for (int k = 0; k < count && f->row < f->rows; k++) {
        _mm_prefetch((const char *)(f->base + (size_t)f->row * f->row_stride + 64 * (size_t)f->line), _MM_HINT_T1);
        if (++f->line == f->lines) {
            f->line = 0;
            f->row++;
        }
    }
}

#define Q4_TILE_MIN_N 9

/* ---- the SIMD kernels, one copy per instruction set (matmul_q_kern.h) ----------------------- */

typedef void (*stream_fn)(const struct nt_mm *, int, int);
typedef void (*kern_fn)(struct tile *, const uint8_t *, size_t, int64_t, int, int);
#define KCAT2(a, b) a##b
#define KCAT(a, b) KCAT2(a, b)

/* AVX2 has no int8 dot product. q8_2f: the weights widened to the record's A | B int16 halves
 * (q8_unpack) and two vpmaddwd; q4tp: vpmaddubsw (nibble unsigned x q signed; a pair is at most
 * 2 * 15 * 127, no saturation), vpmaddwd by 1 sums the pairs into lanes, and the record's corr
 * (8 * sum q - Q_MAGIC) is subtracted. */
static INL AVX2 __m256 q8_dot_avx2(__m256i A, __m256i B, const uint8_t *xr) {
    __m256i s = _mm256_add_epi32(_mm256_madd_epi16(A, _mm256_loadu_si256((const __m256i *)(const void *)xr)),
                                 _mm256_madd_epi16(B, _mm256_loadu_si256((const __m256i *)(const void *)(xr + 32))));
    return _mm256_cvtepi32_ps(s);
}
static INL AVX2 __m256 q4_dot_avx2(__m256i w, const uint8_t *xr) {
    __m256i v = _mm256_maddubs_epi16(w, _mm256_loadu_si256((const __m256i *)(const void *)xr));
    v = _mm256_sub_epi32(_mm256_madd_epi16(v, _mm256_set1_epi16(1)), _mm256_loadu_si256((const __m256i *)(const void *)(xr + 32)));
    return _mm256_sub_ps(_mm256_castsi256_ps(v), _mm256_set1_ps(Q_MAGIC_F));
}
#define KT AVX2
#define KN(n) KCAT(n, _avx2)
#define KQ8_WEIGHTS(w, A, B) q8_unpack(w, &A, &B)
#define KQ8_DOT(A, B, xr) q8_dot_avx2(A, B, xr)
#define KQ4_DOT(w, xr) q4_dot_avx2(w, xr)
#include "matmul_q_kern.h"

/* VNNI: vpdpbusd adds to each int32 lane the 4 products of its bytes, unsigned x signed, exactly
 * (no saturation, no wrap at these sizes). The start value is the record's second half,
 * Q_MAGIC - offset x (the lane's sum of q), where offset is what makes the weights unsigned, so
 * the lane ends as Q_MAGIC + isum and (float)isum is one exact subtraction (as q4tp's AVX2 step).
 * q8_2f: w ^ 0x80 = w + 128 as unsigned, record q in column order, offset 128 (a weight vector is
 * made unsigned once per row block and serves every position; the correction is per position,
 * in the record, made once per pass); q4tp: the nibbles as stored (value + 8), offset 8, the
 * record's q as AVX2's. The integer sums are the scalar reference's; the float chain is the
 * template's. */
#define AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
static INL AVXVNNI __m256 dot_avxvnni(__m256i u, const uint8_t *xr) {
    __m256i s = _mm256_dpbusd_avx_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(xr + 32)), u,
                                        _mm256_loadu_si256((const __m256i *)(const void *)xr));
    return _mm256_sub_ps(_mm256_castsi256_ps(s), _mm256_set1_ps(Q_MAGIC_F));
}
#define KT AVXVNNI
#define KN(n) KCAT(n, _avxvnni)
#define KQ8_WEIGHTS(w, A, B) (A = B = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)))
#define KQ8_DOT(A, B, xr) dot_avxvnni(A, xr)
#define KQ4_DOT(w, xr) dot_avxvnni(w, xr)
#include "matmul_q_kern.h"

/* AVX-512 VNNI: its 256-bit step (for an odd last row) is AVX-VNNI's in the EVEX encoding. */
static INL __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) __m256 dot_avx512vnni(__m256i u, const uint8_t *xr) {
    __m256i s = _mm256_dpbusd_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(xr + 32)), u,
                                    _mm256_loadu_si256((const __m256i *)(const void *)xr));
    return _mm256_sub_ps(_mm256_castsi256_ps(s), _mm256_set1_ps(Q_MAGIC_F));
}

/* AVX-512 VNNI on 512-bit vectors: two rows per vector. The float chain of a (row, position)
 * pair has 8 lanes, a zmm 16: its low half holds row i's 8 lanes, its high half row i+1's, so
 * each lane is still exactly one chain of the arithmetic, and one vpdpbusd, one subtraction and
 * one FMA do the step of two rows. The activations (record, start value, d) are the same for
 * both halves and come as broadcast loads, which need no shuffle; the two rows' weights are
 * joined once per row pair and serve every position. The kernels take rows in pairs (3 pairs
 * per streaming kernel, 2 per register tile); an odd last row runs the 256-bit kernels of the
 * same instruction set (the template below), the same chain. */
#define Z512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

/* the step: lanes of isum + Q_MAGIC from the record at xr (broadcast to both halves) and the
 * unsigned weights u, as f32 isum */
static INL Z512 __m512 dot_zmm(__m512i u, const uint8_t *xr) {
    __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)xr));
    __m512i s = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(xr + 32)));
    s = _mm512_dpbusd_epi32(s, u, x);
    return _mm512_sub_ps(_mm512_castsi512_ps(s), _mm512_set1_ps(Q_MAGIC_F));
}

static INL Z512 __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
static INL Z512 __m512 join_ps(float lo, float hi) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
}
static INL Z512 __m256 high_ps(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

#define ZP 3 /* row pairs per streaming kernel */

/* The streaming layout (cpu.h): a kernel call's 2ZP rows as one sequential stream. Read from the
 * payload, the call's rows are 2ZP streams `cols` bytes apart, and a core kept fewer lines in
 * flight than a plain read: one position, 10304 x 2688 from DRAM, this kernel's step on Zen 5
 * (scratch benchmark, alternating, session 12): 22 - 28 GB/s a core from the payload (with its
 * best software prefetch), 28 - 35 from this layout with none, 28 - 38 a plain read; 2 threads 43 -
 * 54, 54 - 66, 63 - 79. Same bytes, same steps: the results do not change. */
#if NT_CPU_Q8_STREAM_ROWS != 2 * ZP
#error "the streaming layout's row block is the 512-bit kernel's rows"
#endif
#define Q8_STREAM_BLOCK (NT_CPU_Q8_STREAM_ROWS * 32) /* bytes of one column block of a row block */

size_t nt_cpu_q8_stream_bytes(int64_t rows, int64_t cols) {
    return (size_t)(rows / NT_CPU_Q8_STREAM_ROWS) * (size_t)q_blocks(cols) * Q8_STREAM_BLOCK;
}

void nt_cpu_q8_stream_fill(const struct nt_matrix *W, uint8_t *dst, int64_t k0, int64_t k1) {
    NT_ASSERT(W->dtype == NT_DTYPE_Q8_2F);
    int64_t cols = W->cols, nb = q_blocks(cols);
    const uint8_t *Wp = (const uint8_t *)W->data;
    for (int64_t k = k0; k < k1; k++) {
        uint8_t *blk = dst + (size_t)k * (size_t)nb * Q8_STREAM_BLOCK;
        for (int64_t b = 0; b < nb; b++)
            for (int i = 0; i < NT_CPU_Q8_STREAM_ROWS; i++) {
                /* a short last column block is padded with zeros: its record's q are 0 there */
                int64_t c0 = 32 * b, len = cols - c0 < 32 ? cols - c0 : 32;
                uint8_t *o = blk + (size_t)b * Q8_STREAM_BLOCK + 32 * (size_t)i;
                memcpy(o, Wp + (size_t)(k * NT_CPU_Q8_STREAM_ROWS + i) * (size_t)cols + (size_t)c0, (size_t)len);
                memset(o + len, 0, (size_t)(32 - len));
            }
    }
}

/* Rows r .. r+2ZP-1 x positions t .. t+P-1, q8_2f (as q8_stream). */
static INL Z512 void q8z_stream(const struct nt_mm *m, int r, int t, int P) {
    const struct nt_matrix *W = m->W;
    int64_t cols = W->cols, nb = q_blocks(cols), nfull = cols / 32;
    const uint8_t *Wp = (const uint8_t *)W->data;
    size_t pb = q_pos_bytes(cols);
    const uint8_t *qx = (const uint8_t *)m->qx + (size_t)t * pb;
    const uint8_t *row0 = Wp + (size_t)r * (size_t)cols;
    __m512 acc[ZP * SP_MAX];
#pragma GCC unroll 12
    for (int i = 0; i < ZP * P; i++) acc[i] = _mm512_setzero_ps();
    /* the row pairs' weights u first, then position by position: a position's record, start
     * value and d are loaded once and serve every pair (pairs inside positions keeps ZP weight
     * vectors and one position's 3 broadcasts live, not P positions' 3: with the loops the other
     * way round gcc hoisted the broadcasts out of the pair loop and spilled) */
#define Q8Z_POSITIONS(b)                                                                                      \
    _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {                                                 \
        const uint8_t *xr = qx + (size_t)p * pb + QREC * (b);                                             \
        __m512 d = _mm512_set1_ps(((const float *)(const void *)(qx + (size_t)p * pb + QREC * nb))[b]); \
        _Pragma("GCC unroll 4") for (int j = 0; j < ZP; j++)                                              \
            acc[j * P + p] = _mm512_fmadd_ps(dot_zmm(u[j], xr), d, acc[j * P + p]);                      \
    }
    if (m->stream && r % (2 * ZP) == 0) {
        /* the streaming layout: pair j's two rows are 64 bytes in a row, one load; no software
         * prefetch (a sequential stream, which the hardware's prefetchers follow: adding one
         * 2 - 16 KB ahead measured no gain) */
        const uint8_t *blk = m->stream + (size_t)(r / (2 * ZP)) * (size_t)nb * Q8_STREAM_BLOCK;
        for (int64_t b = 0; b < nb; b++) {
            __m512i u[ZP];
#pragma GCC unroll 4
            for (int j = 0; j < ZP; j++)
                u[j] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(blk + (size_t)b * Q8_STREAM_BLOCK + 64 * (size_t)j)),
                                        _mm512_set1_epi8((char)0x80));
            Q8Z_POSITIONS(b)
        }
    } else {
        uintptr_t next = (uintptr_t)(row0 + (size_t)(2 * ZP) * (size_t)cols); /* prefetch into L2, as q8_stream */
        for (int64_t b = 0; b < nb; b++) {
            if ((b & 1) == 0 && b < nfull)
#pragma GCC unroll 8
                for (int i = 0; i < 2 * ZP; i++) _mm_prefetch((const char *)(next + (size_t)i * (size_t)cols + 32 * (size_t)b), _MM_HINT_T1);
            __m512i u[ZP];
#pragma GCC unroll 4
            for (int j = 0; j < ZP; j++) {
                const uint8_t *row = row0 + (size_t)(2 * j) * (size_t)cols;
                u[j] = _mm512_xor_si512(join256(q8_load_block(row, b, cols), q8_load_block(row + cols, b, cols)),
                                        _mm512_set1_epi8((char)0x80));
            }
            Q8Z_POSITIONS(b)
        }
    }
#undef Q8Z_POSITIONS
    const uint8_t *rs = Wp + nt_q8_2f_rs_offset(W->rows, cols);
#pragma GCC unroll 4
    for (int j = 0; j < ZP; j++) {
        float rs0 = nt_f16_to_f32(rd16(rs + 2 * (size_t)(r + 2 * j))), rs1 = nt_f16_to_f32(rd16(rs + 2 * (size_t)(r + 2 * j + 1)));
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            float *y = m->y + (size_t)(t + p) * m->y_stride + r + 2 * j;
            y[0] = nt_cpu_apply_act(rs0 * hsum8(_mm512_castps512_ps256(acc[j * P + p])), m->bias, r + 2 * j, m->act);
            y[1] = nt_cpu_apply_act(rs1 * hsum8(high_ps(acc[j * P + p])), m->bias, r + 2 * j + 1, m->act);
        }
    }
}

/* Group g of two q4tp rows as [row a: low | high nibbles, row b: low | high]. */
static INL Z512 __m512i q4z_unpack(const uint8_t *a, const uint8_t *b) {
    __m512i v = join256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
                        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)b)));
    v = _mm512_srlv_epi32(v, _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(15));
}

/* The scales of 8 groups g .. g+7 (g a multiple of 8) of a row pair, [row a's 8 | row b's 8]:
 * the 8 codes of a row are the 40 bits at byte 5g/8 of its codes; dword lane m takes code m % 8
 * of its row by a shift of the word that holds it whole (bits 0 - 31 for codes 0 - 5, bits 8 - 39
 * for codes 6 and 7), and a two-register permutation looks the codes up in the row's 32-entry
 * table. The scales are tab[code] as loaded, so every product s = scale * d made from them is the
 * per-group code's f32 multiply. (The streaming kernel at one position spent more instructions on
 * extracting and broadcasting the codes of each group than on its dot product.) */
static INL Z512 __m512 q4z_scales8(const float *taba, const float *tabb, const uint8_t *ca, const uint8_t *cb) {
    __m512i v = _mm512_set1_epi32((int)rd32(ca));
    v = _mm512_mask_set1_epi32(v, 0x00C0, (int)rd32(ca + 1));
    v = _mm512_mask_set1_epi32(v, 0xFF00, (int)rd32(cb));
    v = _mm512_mask_set1_epi32(v, 0xC000, (int)rd32(cb + 1));
    v = _mm512_srlv_epi32(v, _mm512_setr_epi32(0, 5, 10, 15, 20, 25, 22, 27, 0, 5, 10, 15, 20, 25, 22, 27));
    v = _mm512_and_si512(v, _mm512_set1_epi32(31));
    __m512 sa = _mm512_permutex2var_ps(_mm512_loadu_ps(taba), v, _mm512_loadu_ps(taba + 16));
    __m512 sb = _mm512_permutex2var_ps(_mm512_loadu_ps(tabb), v, _mm512_loadu_ps(tabb + 16));
    return _mm512_mask_blend_ps(0xFF00, sa, sb);
}

/* Rows r .. r+2ZP-1 x positions t .. t+P-1, q4tp (as q4_stream). At one position (decode) the
 * groups go in runs of 8: the pairs' 8 scales come as one vector (q4z_scales8), times the 8
 * groups' d in one multiply, and each group's s = scale * d is one permutation away (measured
 * +15 % on this step, which extracting each group's codes dominated); with more positions, and
 * for the rest (gpr % 8), group by group (the 8-group form measured 3 - 8 % slower at 2 - 4
 * positions). Either way s is the same f32 product of the group's scale and d. */
static INL Z512 void q4z_stream(const struct nt_mm *m, int r, int t, int P) {
    const struct q4_view v = q4_view(m, r, t);
    const int64_t gpr = v.gpr, cstride = v.cstride;
    const uint8_t *params = v.params, *codes = v.codes, *qx = v.qx, *nib = v.nib;
    const size_t pb = v.pb, rowb = v.rowb;
    uintptr_t next = (uintptr_t)(nib + (size_t)2 * (2 * ZP) * rowb); /* two row blocks ahead, as q4_stream */
    _Alignas(64) float tab[2 * ZP][32];
    for (int i = 0; i < 2 * ZP; i++) q4_row_table(params, r + i, tab[i]);
    __m512 acc[ZP * SP_MAX];
#pragma GCC unroll 12
    for (int i = 0; i < ZP * P; i++) acc[i] = _mm512_setzero_ps();
    /* group g of the pairs, with s of pair j and position p as SD(j, p) */
#define Q4Z_STEP(g, SD)                                                                                   \
    do {                                                                                                  \
        if (((g) & 3) == 0)                                                                               \
            _Pragma("GCC unroll 8") for (int i = 0; i < 2 * ZP; i++)                                      \
                _mm_prefetch((const char *)(next + (size_t)i * rowb + 16 * (size_t)(g)), _MM_HINT_T0);   \
        /* the pairs' weights, then position by position (as q8z_stream, which says why) */               \
        __m512i w[ZP];                                                                                    \
        _Pragma("GCC unroll 4") for (int j = 0; j < ZP; j++) {                                            \
            const uint8_t *na = nib + (size_t)(2 * j) * rowb + 16 * (size_t)(g);                          \
            w[j] = q4z_unpack(na, na + rowb);                                                             \
        }                                                                                                 \
        _Pragma("GCC unroll 4") for (int p = 0; p < P; p++) {                                             \
            const uint8_t *xr = qx + (size_t)p * pb + QREC * (g);                                         \
            _Pragma("GCC unroll 4") for (int j = 0; j < ZP; j++)                                          \
                acc[j * P + p] = _mm512_fmadd_ps(dot_zmm(w[j], xr), SD(j, p), acc[j * P + p]);           \
        }                                                                                                 \
    } while (0)
    int64_t g = 0;
    /* one position: the 8 groups' s = scale * d of a pair made in one multiply (sd[j], row a's
     * then row b's), each group's one permutation away */
    if (P == 1)
        for (; g + 8 <= gpr; g += 8) {
            __m512 sd[ZP];
            const __m512 d8 = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)(const void *)(qx + QREC * gpr + 4 * g))));
#pragma GCC unroll 4
            for (int j = 0; j < ZP; j++) {
                const uint8_t *ca = codes + (size_t)(2 * j) * (size_t)cstride + (size_t)(5 * g / 8);
                sd[j] = _mm512_mul_ps(q4z_scales8(tab[2 * j], tab[2 * j + 1], ca, ca + cstride), d8);
            }
#define Q4Z_SD8(j, p) _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(k), _mm512_set1_epi32(k + 8)), sd[j])
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) Q4Z_STEP(g + k, Q4Z_SD8);
#undef Q4Z_SD8
        }
    for (; g < gpr; g++) {
        __m512 sc[ZP];
#pragma GCC unroll 4
        for (int j = 0; j < ZP; j++) {
            const uint8_t *ca = codes + (size_t)(2 * j) * (size_t)cstride;
            sc[j] = join_ps(tab[2 * j][q4_code(ca, g)], tab[2 * j + 1][q4_code(ca + cstride, g)]);
        }
#define Q4Z_SD1(j, p) _mm512_mul_ps(sc[j], _mm512_set1_ps(((const float *)(const void *)(qx + (size_t)(p) * pb + QREC * gpr))[g]))
        Q4Z_STEP(g, Q4Z_SD1);
#undef Q4Z_SD1
    }
#undef Q4Z_STEP
#pragma GCC unroll 4
    for (int j = 0; j < ZP; j++)
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            float *y = m->y + (size_t)(t + p) * m->y_stride + r + 2 * j;
            y[0] = nt_cpu_apply_act(hsum8(_mm512_castps512_ps256(acc[j * P + p])), m->bias, r + 2 * j, m->act);
            y[1] = nt_cpu_apply_act(hsum8(high_ps(acc[j * P + p])), m->bias, r + 2 * j + 1, m->act);
        }
}

#define Q8Z(P) static Z512 void q8z_##P(const struct nt_mm *m, int r, int t) { q8z_stream(m, r, t, P); }
#define Q4Z(P) static Z512 void q4z_##P(const struct nt_mm *m, int r, int t) { q4z_stream(m, r, t, P); }
Q8Z(1) Q8Z(2) Q8Z(3) Q8Z(4) Q4Z(1) Q4Z(2) Q4Z(3) Q4Z(4)
#undef Q8Z
#undef Q4Z
static stream_fn const zmm_stream_kerns[2][SP_MAX] = {{q8z_1, q8z_2, q8z_3, q8z_4}, {q4z_1, q4z_2, q4z_3, q4z_4}};

/* Register tile of the q4tp tile: NPR row pairs from tile row i0 x positions tp0 .. tp0+P-1 over
 * the chunk (as q4_kernel; s = scale * d is the same one f32 multiply, made per step here from
 * the pair's joined scales). */
static INL Z512 void q4z_kernel(struct tile *T, const uint8_t *qx, size_t pb, int64_t nb, int i0, int tp0, int NPR, int P) {
    __m512 acc[2][Q4_MP];
#pragma GCC unroll 2
    for (int j = 0; j < NPR; j++)
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            const float *a = T->acc + ((size_t)(i0 + 2 * j) * MAXP + tp0 + p) * 8;
            acc[j][p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_load_ps(a))),
                                                              _mm256_castps_pd(_mm256_load_ps(a + MAXP * 8)), 1));
        }
    const uint8_t *x0 = qx + QREC * T->g0;
    const float *d0 = (const float *)(const void *)(qx + QREC * nb) + T->g0;
    for (int64_t b = 0; b < T->nbc; b++) {
        /* the pairs' weights and scales, then position by position (as q8z_stream, which says why) */
        __m512i u[2];
        __m512 s2[2];
#pragma GCC unroll 2
        for (int j = 0; j < NPR; j++) {
            const uint8_t *w = T->w + ((size_t)(i0 + 2 * j) * TB + (size_t)b) * 32;
            u[j] = join256(_mm256_load_si256((const __m256i *)(const void *)w),
                           _mm256_load_si256((const __m256i *)(const void *)(w + TB * 32)));
            const float *sc = T->sc + (size_t)(i0 + 2 * j) * TB + b;
            s2[j] = join_ps(sc[0], sc[TB]);
        }
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            __m512 d = _mm512_set1_ps(((const float *)(const void *)((const uint8_t *)d0 + (size_t)p * pb))[b]);
#pragma GCC unroll 2
            for (int j = 0; j < NPR; j++)
                acc[j][p] = _mm512_fmadd_ps(dot_zmm(u[j], x0 + (size_t)p * pb + QREC * b), _mm512_mul_ps(s2[j], d), acc[j][p]);
        }
    }
#pragma GCC unroll 2
    for (int j = 0; j < NPR; j++)
#pragma GCC unroll 6
        for (int p = 0; p < P; p++) {
            float *a = T->acc + ((size_t)(i0 + 2 * j) * MAXP + tp0 + p) * 8;
            _mm256_store_ps(a, _mm512_castps512_ps256(acc[j][p]));
            _mm256_store_ps(a + MAXP * 8, high_ps(acc[j][p]));
        }
}

#define Q4ZK(N, P) static Z512 void q4zk_##N##_##P(struct tile *T, const uint8_t *qx, size_t pb, int64_t nb, int i0, int tp0) \
    { q4z_kernel(T, qx, pb, nb, i0, tp0, N, P); }
Q4ZK(1, 1) Q4ZK(1, 2) Q4ZK(1, 3) Q4ZK(1, 4) Q4ZK(1, 5) Q4ZK(1, 6)
Q4ZK(2, 1) Q4ZK(2, 2) Q4ZK(2, 3) Q4ZK(2, 4) Q4ZK(2, 5) Q4ZK(2, 6)
#undef Q4ZK
static kern_fn const zmm_tile_kerns[2][Q4_MP] = {{q4zk_1_1, q4zk_1_2, q4zk_1_3, q4zk_1_4, q4zk_1_5, q4zk_1_6},
                                                 {q4zk_2_1, q4zk_2_2, q4zk_2_3, q4zk_2_4, q4zk_2_5, q4zk_2_6}};

/* The tile's rows from i: two pairs, one pair, or (an odd last row) the 256-bit kernel. */
#define ZMM_TILE(T, qx, pb, nb, i, tp, P)                                                                   \
    ((T)->nr - (i) >= 2 ? (zmm_tile_kerns[(T)->nr - (i) >= 4][(P) - 1](T, qx, pb, nb, i, tp), (T)->nr - (i) >= 4 ? 4 : 2) \
                        : (KN(q4_kerns)[0][(P) - 1](T, qx, pb, nb, i, tp), 1))

#define KT Z512
#define KN(n) KCAT(n, _avx512vnni)
#define KQ8_WEIGHTS(w, A, B) (A = B = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)))
#define KQ8_DOT(A, B, xr) dot_avx512vnni(A, xr)
#define KQ4_DOT(w, xr) dot_avx512vnni(w, xr)
#define KSTREAM(q4, P) zmm_stream_kerns[q4][(P) - 1]
#define KSTREAM_R(q4, P) (2 * ZP)
#define KTILE ZMM_TILE
#include "matmul_q_kern.h"

/* ---- dispatch (called from matmul.c) --------------------------------------------------------- */

#include "matmul_q_amx.h"

void nt_cpu_matmul_q_rows(const struct nt_mm *m, int isa, int r0, int r1) {
    NT_ASSERT(is_packed(m->W->dtype) && m->qx);
    if (nt_dtype_is_ggml_block(m->W->dtype)) {
        nt_cpu_matmul_ggml_rows(m, isa, r0, r1);
        return;
    }
    switch (isa) {
    case NT_CPU_AMX: rows_q_amx(m, r0, r1); break;
    case NT_CPU_AVX512BF16:
    case NT_CPU_AVX512VNNI: rows_q_avx512vnni(m, r0, r1); break;
    case NT_CPU_AVXVNNI: rows_q_avxvnni(m, r0, r1); break;
    case NT_CPU_AVX2: rows_q_avx2(m, r0, r1); break;
    default:
        if (m->W->dtype == NT_DTYPE_Q8_2F)
            rows_scalar_q8(m, r0, r1);
        else
            rows_scalar_q4(m, r0, r1);
    }
}

/* Row ranges per thread are whole multiples of this (any split gives the same bits; this one
 * keeps the kernels at their full shapes). */
#define Q_ROW_GRAIN 12

int nt_cpu_q_row_grain(int isa) {
    return isa == NT_CPU_AMX ? AMX_G : Q_ROW_GRAIN; /* AMX: whole tiles of 16 rows */
}
