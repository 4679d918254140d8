/* q4tp.c - the q4tp quantizer and element readers (FORMATS.md), and the 4-bit group search it
 * shares with the comparison baseline.
 *
 * A row is quantized in two passes over its groups. The first finds each group's own best scale
 * for the levels -8..7 (nt_q4_group_best_scale) and from their log2 the row's grid: base = the
 * smallest, step = the range / 31, both as f16. The second codes each group on that grid,
 * trying the grid points around its own scale and keeping the one whose re-rounded nibbles give
 * the smallest error. The invariant: every stored nibble is the nearest level of its weight
 * under the group's *coded* scale nt_q4tp_scale(base, step, code), exactly what a reader sees;
 * nothing is clipped to an uncoded scale.
 *
 * The group loops run on GCC/Clang vector extensions (4 x f32, lowered to SSE2 on baseline
 * x86-64 and to NEON on arm64): the plain loops do not vectorise, because without
 * -ffast-math the compiler may neither reassociate the sums nor if-convert the float clamps.
 * Every operation is element-wise or a fixed-order sum, so the result does not depend on the
 * instruction set the vectors are lowered to.
 */
#include "quant.h"

#include <float.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

/* The rounding trick below needs f32 arithmetic carried out in f32. */
#if FLT_EVAL_METHOD != 0
#error "q4tp.c assumes FLT_EVAL_METHOD == 0 (f32 arithmetic evaluated in f32)"
#endif

/* 1.5 * 2^23: for |x| <= 2^22, x + M lies in [2^23, 2^24) where the f32 spacing is 1, so the
 * addition rounds x to an integer (to nearest, ties to even) and the subtraction is exact. It
 * vectorises, where rintf would be a libm call on baseline x86-64. The values rounded here are
 * clamped to [-8, 7] first, so they are always in range. */
#define ROUND_MAGIC 12582912.0f

#define G NT_Q4TP_GROUP

/* round(clamp(x, -8, 7)), equal to clamp(round(x), -8, 7) since the bounds are integers. */
static inline float round_clamped(float x) {
    x = x < -8.0f ? -8.0f : x;
    x = x > 7.0f ? 7.0f : x;
    return (x + ROUND_MAGIC) - ROUND_MAGIC;
}

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v); /* w has no alignment guarantee */
    return v;
}
static inline v4f splat4(float x) { return (v4f){x, x, x, x}; }
/* m ? a : b per lane, m all ones or all zeros (a vector comparison's result) */
static inline v4f select4(v4i m, v4f a, v4f b) { return (v4f)((m & (v4i)a) | (~m & (v4i)b)); }
/* max(x, lo) and min(x, hi) of non-NaN lanes; one instruction each on x86 (the generic select
 * is three), where they are a third of the work of a rounding pass */
static inline v4f max4(v4f x, v4f lo) {
#ifdef __SSE__
    return _mm_max_ps(x, lo);
#else
    return select4(x < lo, lo, x);
#endif
}
static inline v4f min4(v4f x, v4f hi) {
#ifdef __SSE__
    return _mm_min_ps(x, hi);
#else
    return select4(x > hi, hi, x);
#endif
}
static inline v4f round_clamped4(v4f x) {
    const v4f magic = splat4(ROUND_MAGIC);
    x = min4(max4(x, splat4(-8.0f)), splat4(7.0f));
    return (x + magic) - magic;
}
static inline float sum4(v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }

static float group_amax(const float *w) {
    v4f m = splat4(0.0f);
    const v4i not_sign = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    for (int k = 0; k < G; k += 4) {
        v4f a = (v4f)((v4i)load4(w + k) & not_sign);
        m = select4(a > m, a, m);
    }
    float r = m[0] > m[1] ? m[0] : m[1];
    r = m[2] > r ? m[2] : r;
    return m[3] > r ? m[3] : r;
}

void nt_q4_group_levels(const float *w, float scale, int8_t *levels) {
    float inv = 1.0f / scale;
    for (int i = 0; i < G; i++) levels[i] = (int8_t)round_clamped(w[i] * inv);
}

float nt_q4_group_error(const float *w, float scale) {
    v4f inv = splat4(1.0f / scale), s = splat4(scale), e = splat4(0.0f);
    for (int k = 0; k < G; k += 4) {
        v4f x = load4(w + k), d = x - s * round_clamped4(x * inv);
        e += d * d;
    }
    return sum4(e);
}

/* The scale search. Candidate k rounds the group with the inverse scale (DIV_LO + k * DIV_STEP)
 * / max|w|, i.e. puts the largest weight at level DIV_LO + k * DIV_STEP; for those levels L the
 * least-squares scale sum(w L) / sum(L L) leaves the error sum(w^2) - sum(w L)^2 / sum(L L), so
 * the best candidate maximises sum(w L)^2 / sum(L L). Divisors 6.5..10: below 7 the largest
 * weight is clipped to 7 (right for a lone positive outlier only after the least-squares
 * refit), 8 puts a negative maximum on -8, and up to 10 lets a Gaussian group clip its tails.
 * 24 candidates: dev/quant/tensor_error.c and the measurement in the report of this search
 * (against 2000 candidates, the RMS error is within 0.1% of the fine search) set the count. */
#define DIV_LO 6.5f
#define DIV_STEP 0.15f
#define N_CANDIDATES 24
#define TINY_AMAX 0x1p-120f

float nt_q4_group_best_scale(const float *w) {
    float amax = group_amax(w);
    if (amax == 0.0f) return 0.0f;
    /* far below the smallest coded scale 2^-126 no search is worth it, and (DIV_LO + ...) / amax
     * could overflow */
    if (amax < TINY_AMAX) return amax / 7.0f;
    float best_num = -1.0f, best_den = 1.0f, best_scale = amax / 7.0f;
    for (int k = 0; k < N_CANDIDATES; k++) {
        v4f inv = splat4((DIV_LO + (float)k * DIV_STEP) / amax), wl = splat4(0.0f), ll = splat4(0.0f);
        for (int i = 0; i < G; i += 4) {
            v4f x = load4(w + i), l = round_clamped4(x * inv);
            wl += x * l;
            ll += l * l;
        }
        float swl = sum4(wl), sll = sum4(ll);
        /* swl^2 / sll > best_num / best_den, without dividing; swl > 0 since inv > 0 */
        if (sll > 0.0f && swl * swl * best_den > best_num * sll) {
            best_num = swl * swl;
            best_den = sll;
            best_scale = swl / sll;
        }
    }
    return best_scale;
}

/* ---- the row grid ----------------------------------------------------------------------- */

/* f16 roundings that never overshoot in one direction: the nearest f16, then one step toward
 * the wanted side if it landed on the other (the f16 neighbours of x bracket it). */
static uint16_t f16_round_down(float x) {
    uint16_t h = nt_f32_to_f16(x);
    if (nt_f16_to_f32(h) > x) h = (h & 0x8000u) ? (uint16_t)(h + 1) : h == 0 ? 0x8001u : (uint16_t)(h - 1);
    return h;
}
static uint16_t f16_round_up(float x) {
    uint16_t h = nt_f32_to_f16(x);
    if (nt_f16_to_f32(h) < x) h = (h & 0x8000u) ? (h == 0x8000u ? 0x0001u : (uint16_t)(h - 1)) : (uint16_t)(h + 1);
    return h;
}

/* log2 of a group scale, inside the range nt_q4tp_scale can produce. */
static float clamped_log2(float s) {
    float l = log2f(s);
    return l < -126.0f ? -126.0f : l > 126.0f ? 126.0f : l;
}

/* The codes tried per group: the grid points from floor(c) - CODE_BELOW to floor(c) + 1 +
 * CODE_ABOVE around the group's own position c = (log2 s - base) / step. One extra point on
 * each side of floor/ceil lowered the error measurably (a different rounding pattern of the
 * nibbles is sometimes better than the nearer scale); a second one did not. */
#define CODE_BELOW 1
#define CODE_ABOVE 1

/* Nibbles of one group at its coded scale, in FORMATS.md's order: byte b of the group holds
 * columns 2b (low half) and 2b + 1 (high half), which is word j = b / 4, nibbles 2(b % 4) and
 * 2(b % 4) + 1, i.e. columns 8j + n in bits [4n, 4n + 4) of a little-endian word. */
static void write_nibbles(const float *w, float scale, uint8_t *out) {
    int8_t l[G];
    nt_q4_group_levels(w, scale, l);
    for (int b = 0; b < G / 2; b++) out[b] = (uint8_t)((l[2 * b] + 8) | ((l[2 * b + 1] + 8) << 4));
}

static void quantize_row(const float *w, int64_t gpr, uint8_t *nib, uint32_t *params, uint8_t *codes) {
    /* pass 1: each group's own scale, kept in the group's 16 nibble bytes until pass 2
     * overwrites them with the nibbles (the row's output is its own scratch; no allocation) */
    float lmin = INFINITY, lmax = -INFINITY;
    for (int64_t g = 0; g < gpr; g++) {
        float s = nt_q4_group_best_scale(w + g * G);
        memcpy(nib + g * 16, &s, sizeof s);
        if (s > 0.0f) {
            float l = clamped_log2(s);
            lmin = l < lmin ? l : lmin;
            lmax = l > lmax ? l : lmax;
        }
    }
    uint16_t base_h = 0, step_h = 0;
    if (lmin <= lmax) {
        if (lmin == lmax) {
            base_h = nt_f32_to_f16(lmin);
        } else {
            /* base rounded down and step up, so that the grid still reaches both ends after
             * the f16 rounding: base <= lmin and base + 31 step >= lmax */
            base_h = f16_round_down(lmin);
            step_h = f16_round_up((lmax - nt_f16_to_f32(base_h)) / 31.0f);
        }
    }
    *params = (uint32_t)base_h | (uint32_t)step_h << 16;
    float base = nt_f16_to_f32(base_h), step = nt_f16_to_f32(step_h);

    /* pass 2: codes and nibbles */
    memset(codes, 0, (size_t)nt_q4tp_cstride(gpr * G));
    for (int64_t g = 0; g < gpr; g++) {
        const float *wg = w + g * G;
        float s;
        memcpy(&s, nib + g * 16, sizeof s);
        int code = 0;
        if (s == 0.0f) {
            memset(nib + g * 16, 0x88, 16); /* level 0 everywhere, under any scale */
        } else {
            float c = step > 0.0f ? (clamped_log2(s) - base) / step : 0.0f;
            int lo = (int)floorf(c) - CODE_BELOW, hi = (int)floorf(c) + 1 + CODE_ABOVE;
            lo = lo < 0 ? 0 : lo > 31 ? 31 : lo;
            hi = hi < 0 ? 0 : hi > 31 ? 31 : hi;
            float best = INFINITY;
            for (int k = lo; k <= hi; k++) {
                float e = nt_q4_group_error(wg, nt_q4tp_scale(base, step, k));
                if (e < best) {
                    best = e;
                    code = k;
                }
            }
            write_nibbles(wg, nt_q4tp_scale(base, step, code), nib + g * 16);
        }
        /* 5 bits at bit 5g, LSB first; they reach into the next byte when 5g % 8 > 3 */
        int64_t bit = 5 * g;
        codes[bit >> 3] |= (uint8_t)(code << (bit & 7));
        if ((bit & 7) > 3) codes[(bit >> 3) + 1] |= (uint8_t)(code >> (8 - (bit & 7)));
    }
}

void nt_q4tp_quantize_rows(const float *W, int64_t nrows, int64_t cols, uint8_t *nibbles,
                           uint32_t *params, uint8_t *codes) {
    NT_ASSERT(cols > 0 && cols % G == 0);
    int64_t gpr = nt_q4tp_gpr(cols), cstride = nt_q4tp_cstride(cols);
    for (int64_t r = 0; r < nrows; r++)
        quantize_row(W + r * cols, gpr, nibbles + r * gpr * 16, params + r, codes + r * cstride);
}

/* ---- readers ---------------------------------------------------------------------------- */

int nt_q4tp_code(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t g) {
    const uint8_t *p = payload + nt_q4tp_codes_offset(rows, cols) + (uint64_t)(r * nt_q4tp_cstride(cols)) +
                       (uint64_t)((5 * g) >> 3);
    unsigned two = (unsigned)p[0] | (unsigned)p[1] << 8;
    return (int)((two >> ((5 * g) & 7)) & 31u);
}

float nt_q4tp_group_scale(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t g) {
    const uint8_t *p = payload + nt_q4tp_params_offset(rows, cols) + 4u * (uint64_t)r;
    float base = nt_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    float step = nt_f16_to_f32((uint16_t)(p[2] | p[3] << 8));
    return nt_q4tp_scale(base, step, nt_q4tp_code(payload, rows, cols, r, g));
}

int nt_q4tp_nibble(const uint8_t *payload, int64_t rows, int64_t cols, int64_t r, int64_t c) {
    (void)rows; /* the nibbles start at byte 0 whatever the row count */
    int64_t gpr = nt_q4tp_gpr(cols), g = c / G, k = c % G;
    uint8_t byte = payload[(uint64_t)(r * gpr + g) * 16u + (uint64_t)(k / 2)];
    return (int)((byte >> (4 * (k & 1))) & 15u) - 8;
}
