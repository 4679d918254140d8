/* q4tp.c - the q4tp quantizer and element readers (FORMATS.md), and the 4-bit group search it
 * shares with the comparison baseline.
 *
 * A row is quantized in three passes over its groups. The first finds each group's own best
 * scale for the levels -8..7 (nt_q4_group_best_scale); from their log2 come two candidate grids:
 * FORMATS.md's (base = the smallest, step = the range / 31, both as f16) and that grid refitted
 * to where the large groups lie (refit_grid). The second codes each group on each grid, trying
 * the grid points around its own scale and keeping the one whose re-rounded nibbles give the
 * smallest error; the grid with the smaller row error wins. The third writes the winner's codes
 * and nibbles. The invariant: every stored nibble is the nearest level of its weight under the
 * group's *coded* scale nt_q4tp_scale(base, step, code), exactly what a reader sees; nothing is
 * clipped to an uncoded scale. No q4tp quantizer can beat the 4.5-bit baseline's error
 * (docs/QUANT.md says why); the refit narrows the gap by 5-40%.
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
/* round(clamp(x, -8, 7)) per lane, equal to clamp(round(x), -8, 7) since the bounds are
 * integers */
static inline v4f round_clamped4(v4f x) {
    const v4f magic = splat4(ROUND_MAGIC);
    x = min4(max4(x, splat4(-8.0f)), splat4(7.0f));
    return (x + magic) - magic;
}
static inline float sum4(v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }

/* A group held in registers: 8 vectors of 4 weights. */
struct group4 {
    v4f x[G / 4];
};

static inline struct group4 load_group(const float *w) {
    struct group4 g;
    for (int i = 0; i < G / 4; i++) g.x[i] = load4(w + 4 * i);
    return g;
}

/* 2^n for |n| <= 126, exactly */
static inline float pow2f(int n) {
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* x * 2^n for |n| <= 252 in two exact steps (each factor a normal f32); exact whenever the
 * result is a normal f32 */
static inline float mul_pow2(float x, int n) { return x * pow2f(n / 2) * pow2f(n - n / 2); }

/* g *= 2^shift, exactly while the results are normal (see mul_pow2) */
static inline void scale_group(struct group4 *g, int shift) {
    v4f lo = splat4(pow2f(shift / 2)), hi = splat4(pow2f(shift - shift / 2));
    for (int i = 0; i < G / 4; i++) g->x[i] = g->x[i] * lo * hi;
}

static float group4_amax(const struct group4 *g) {
    v4f m = splat4(0.0f);
    const v4i not_sign = {0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff};
    for (int i = 0; i < G / 4; i++) {
        v4f a = (v4f)((v4i)g->x[i] & not_sign);
        m = select4(a > m, a, m);
    }
    float amax = m[0] > m[1] ? m[0] : m[1];
    amax = m[2] > amax ? m[2] : amax;
    return m[3] > amax ? m[3] : amax;
}

/* The group scaled by 2^shift so that its largest |w| lies in [1, 2). The quantizer's sums of
 * squares then neither overflow (weights near FLT_MAX would) nor lose their low bits to
 * subnormals, and since the scaling is by a power of two, every level and every comparison of
 * errors comes out as it would unscaled in exact range. Returns 0 for an all-zero group. */
static int load_group_normalised(const float *w, struct group4 *g, int *shift) {
    *g = load_group(w);
    float amax = group4_amax(g);
    if (amax == 0.0f) return 0;
    uint32_t bits;
    memcpy(&bits, &amax, sizeof bits);
    int e = (int)(bits >> 23); /* biased exponent: amax in [2^(e-127), 2^(e-126)) */
    if (e == 0) {
        frexpf(amax, &e); /* a subnormal: amax = f 2^e with f in [0.5, 1) */
        e += 126;
    }
    *shift = 127 - e; /* in [-127, 149] */
    scale_group(g, *shift);
    return 1;
}

/* The loops below keep two accumulators each: a pass over the 8 vectors is bound by the latency
 * of the dependent additions, and two chains halve it. */
static float group4_error(const struct group4 *g, float scale) {
    v4f inv = splat4(1.0f / scale), s = splat4(scale), e0 = splat4(0.0f), e1 = e0;
    for (int i = 0; i < G / 4; i += 2) {
        v4f d0 = g->x[i] - s * round_clamped4(g->x[i] * inv);
        v4f d1 = g->x[i + 1] - s * round_clamped4(g->x[i + 1] * inv);
        e0 += d0 * d0;
        e1 += d1 * d1;
    }
    return sum4(e0 + e1);
}

/* sum(w L) and sum(L L) for the levels L of the inverse scale inv */
static void group4_fit(const struct group4 *g, float inv, float *wl, float *ll) {
    v4f vinv = splat4(inv), a0 = splat4(0.0f), a1 = a0, b0 = a0, b1 = a0;
    for (int i = 0; i < G / 4; i += 2) {
        v4f l0 = round_clamped4(g->x[i] * vinv), l1 = round_clamped4(g->x[i + 1] * vinv);
        a0 += g->x[i] * l0;
        a1 += g->x[i + 1] * l1;
        b0 += l0 * l0;
        b1 += l1 * l1;
    }
    *wl = sum4(a0 + a1);
    *ll = sum4(b0 + b1);
}

float nt_q4_group_error(const float *w, float scale) {
    struct group4 g = load_group(w);
    return group4_error(&g, scale);
}

/* The scale search, on a normalised group (max |x| in [1, 2)). A candidate rounds the group
 * with the inverse scale d / max|x|, i.e. puts the largest weight at level d; for those levels
 * L the least-squares scale sum(x L) / sum(L L) leaves the error sum(x^2) - sum(x L)^2 / sum(L L),
 * so the best candidate maximises sum(x L)^2 / sum(L L). The error-minimising plain scale puts
 * the largest weight between levels 5.5 and 9.5 for Gaussian groups, mostly between 6.5 and 9
 * (measured), so a coarse pass tries N_COARSE divisors from DIV_LO to DIV_HI (below 7 the
 * largest weight is clipped, 8 puts a negative maximum on -8), then the two points half a
 * coarse step either side of the best, then one refit: the levels re-rounded at the best scale,
 * and their least-squares scale (never worse: the re-rounded levels fit that scale at least as
 * well, and the refit scale fits them best). Measured on Gaussian, Student-t(3) and the demo
 * model's weights against a search of 400 divisors from 5 to 12 with two refits (RMS error
 * above it): this search (10 passes over the group) +0.09% / +0.02% / +0.10%; 12 uniform
 * divisors + refit (13 passes) +0.10%; 24 divisors + local + refit (27 passes) +0.06%. */
#define DIV_LO 6.5f
#define DIV_HI 9.5f
#define N_COARSE 7
#define DIV_STEP ((DIV_HI - DIV_LO) / (N_COARSE - 1))

struct fit_best {
    float num, den, scale, div;
};

static void try_divisor(const struct group4 *g, float rinv, float div, struct fit_best *best) {
    float swl, sll;
    group4_fit(g, div * rinv, &swl, &sll);
    /* swl^2 / sll > num / den, without dividing; swl > 0 since the inverse scale is > 0 */
    if (sll > 0.0f && swl * swl * best->den > best->num * sll) {
        best->num = swl * swl;
        best->den = sll;
        best->scale = swl / sll;
        best->div = div;
    }
}

static float group4_best_scale(const struct group4 *g) {
    float amax = group4_amax(g), rinv = 1.0f / amax;
    struct fit_best best = {-1.0f, 1.0f, amax / 7.0f, DIV_LO};
    for (int k = 0; k < N_COARSE; k++) try_divisor(g, rinv, DIV_LO + (float)k * DIV_STEP, &best);
    float center = best.div;
    try_divisor(g, rinv, center - 0.5f * DIV_STEP, &best);
    try_divisor(g, rinv, center + 0.5f * DIV_STEP, &best);
    float swl, sll;
    group4_fit(g, 1.0f / best.scale, &swl, &sll);
    return swl > 0.0f && sll > 0.0f ? swl / sll : best.scale;
}

float nt_q4_group_best_scale(const float *w) {
    struct group4 g;
    int shift;
    if (!load_group_normalised(w, &g, &shift)) return 0.0f;
    return mul_pow2(group4_best_scale(&g), -shift);
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
 * CODE_ABOVE around the group's own position c = (log2 s - base) / step (a different rounding
 * pattern of the nibbles is sometimes better than the nearer scale). Measured as the excess RMS
 * error over the f16-scale baseline at 84 groups per row (Gaussian / Student-t(3) / outlier
 * columns): only the nearest code +0.44 / +1.03 / +1.74%, floor - 1 .. ceil + 1 +0.43 / +0.97 /
 * +1.37%, three more either side +0.41 / +0.96 / +1.31%, all 32 codes +0.36 / +0.96 / +1.30%. */
#define CODE_BELOW 1
#define CODE_ABOVE 1

/* The levels of a group at a scale, as integers: the same arithmetic as group4_error. */
static void group4_levels(const struct group4 *g, float scale, int32_t *levels) {
    v4f inv = splat4(1.0f / scale);
    for (int i = 0; i < G / 4; i++) {
        v4i l = __builtin_convertvector(round_clamped4(g->x[i] * inv), v4i); /* exact: integers */
        memcpy(levels + 4 * i, &l, sizeof l);
    }
}

void nt_q4_group_levels(const float *w, float scale, int8_t *levels) {
    struct group4 g = load_group(w);
    int32_t l[G];
    group4_levels(&g, scale, l);
    for (int i = 0; i < G; i++) levels[i] = (int8_t)l[i];
}

/* Nibbles of one group at its coded scale, in FORMATS.md's order: byte b of the group holds
 * columns 2b (low half) and 2b + 1 (high half), which is word j = b / 4, nibbles 2(b % 4) and
 * 2(b % 4) + 1, i.e. columns 8j + n in bits [4n, 4n + 4) of a little-endian word. */
static void write_nibbles(const struct group4 *g, float scale, uint8_t *out) {
    int32_t l[G];
    group4_levels(g, scale, l);
    for (int b = 0; b < G / 2; b++) out[b] = (uint8_t)((l[2 * b] + 8) | ((l[2 * b + 1] + 8) << 4));
}

/* What pass 1 leaves of a group in its 16 nibble bytes for the later passes (see quantize_row):
 * whether it is nonzero, its own scale's log2, its weight in the grid fit, its normalising shift,
 * and the code it gets on each of the two candidate grids. */
struct group_scratch {
    float log2_scale, weight;
    int16_t shift; /* in [-127, 149] */
    uint8_t live, code[2];
};
_Static_assert(sizeof(struct group_scratch) <= 16, "the scratch must fit in a group's nibble bytes");

/* The refit of a row's grid (below) stops when its objective stops falling; measured on
 * Gaussian, Student-t(3) and outlier-column rows of 58-116 groups and on the demo model, it
 * settles within 2-6 rounds. The cap only bounds the work on rows that would creep on. */
#define REFIT_ROUNDS 16

/* A grid fitted to where the groups' own scales lie rather than to their extremes. The cost of
 * coding a group at 2^(log2 s + d) instead of its own scale s grows about as s^2 d^2 (the error
 * of a fixed set of levels is a parabola in the scale, and the group's squared error scales
 * with s^2), so the grid should sit close to the large groups, while a small group may be coded
 * a little off (clipped to the grid's lowest point, say) at little cost. That is the
 * least-squares problem: minimise sum_g weight_g (log2 s_g - base - code_g step)^2 with
 * weight_g = (s_g / s_max)^2, over integer codes in [0, 31] and base, step. It is solved by
 * alternating its two easy halves, each of which never raises the sum: the nearest code of
 * every group under the grid, then the weighted straight line through (code_g, log2 s_g) under
 * those codes. Starts from the min / max grid (*base, *step) and leaves the best grid seen
 * there; step stays > 0. The result is only a candidate: the caller keeps it where the real
 * error of the re-rounded nibbles says it is better. */
static void refit_grid(const uint8_t *nib, int64_t gpr, float *base, float *step) {
    float b = *base, h = *step;
    double best = INFINITY;
    for (int round = 0; round < REFIT_ROUNDS; round++) {
        double sw = 0, sc = 0, sl = 0, scc = 0, scl = 0, obj = 0;
        for (int64_t g = 0; g < gpr; g++) {
            struct group_scratch sc_g;
            memcpy(&sc_g, nib + g * 16, sizeof sc_g);
            if (!sc_g.live) continue;
            double l = sc_g.log2_scale, w = sc_g.weight, c = rint((l - b) / h);
            c = c < 0 ? 0 : c > 31 ? 31 : c;
            double d = l - b - c * h;
            obj += w * d * d;
            sw += w;
            sc += w * c;
            sl += w * l;
            scc += w * c * c;
            scl += w * c * l;
        }
        if (!(obj < best)) break;
        best = obj;
        *base = b;
        *step = h;
        /* the weighted line l = b + c h through the points at these codes; a degenerate one
         * (every weighted group on one code) leaves the grid as it is */
        double den = sw * scc - sc * sc, nh = den > 0 ? (sw * scl - sc * sl) / den : 0;
        if (!(nh > 0)) break;
        h = (float)nh;
        b = (float)((sl - nh * sc) / sw);
    }
}

/* The best code of a group on a grid, by the squared error of the group's re-rounded nibbles
 * (in its normalised units; *err receives it). */
static int best_code(const struct group4 *grp, int shift, float log2_scale, float base, float step, float *err) {
    /* c lies in [0, 31] on the min / max grid up to rounding; a refitted grid may leave a group
     * outside, which then tries the end codes */
    float c = step > 0.0f ? (log2_scale - base) / step : 0.0f;
    c = c < 0.0f ? 0.0f : c > 31.0f ? 31.0f : c;
    int lo = (int)c - CODE_BELOW, hi = (int)c + 1 + CODE_ABOVE, code = 0;
    lo = lo < 0 ? 0 : lo;
    hi = hi > 31 ? 31 : hi;
    float best = INFINITY;
    for (int k = lo; k <= hi; k++) {
        /* the coded scale in the group's normalised units: within 2^(+-17) of 1 on the min /
         * max grid, as the code is within two steps (<= 8.2 each) of the group's own scale;
         * farther on a refitted grid only for groups it clips, and mul_pow2 is exact for any
         * result in f32's normal range */
        float e = group4_error(grp, mul_pow2(nt_q4tp_scale(base, step, k), shift));
        /* a coded scale that leaves f32's range in these units (a row whose groups span more
         * than 2^100) gives no finite error: such a code is never preferred, and a grid with
         * such a group is never chosen over the min / max grid, where this cannot happen */
        if (!(e <= FLT_MAX)) e = INFINITY;
        if (e < best || k == lo) {
            best = e;
            code = k;
        }
    }
    *err = best;
    return code;
}

static void quantize_row(const float *w, int64_t gpr, int64_t cstride, uint8_t *nib, uint32_t *params,
                         uint8_t *codes) {
    /* pass 1: each group's own scale, kept in the group's 16 nibble bytes until pass 3
     * overwrites them with the nibbles (the row's output is its own scratch; no allocation) */
    float lmin = INFINITY, lmax = -INFINITY;
    for (int64_t g = 0; g < gpr; g++) {
        /* the scale of a group of subnormal weights may underflow to 0: it is then a zero group
         * (every level would be 0 under the smallest coded scale 2^-126 anyway) */
        struct group_scratch sc = {0.0f, 0.0f, 0, 0, {0, 0}};
        struct group4 grp;
        int shift;
        float scale = 0.0f;
        if (load_group_normalised(w + g * G, &grp, &shift)) scale = mul_pow2(group4_best_scale(&grp), -shift);
        if (scale > 0.0f) {
            sc.live = 1;
            sc.shift = (int16_t)shift;
            sc.log2_scale = clamped_log2(scale);
            lmin = sc.log2_scale < lmin ? sc.log2_scale : lmin;
            lmax = sc.log2_scale > lmax ? sc.log2_scale : lmax;
        }
        memcpy(nib + g * 16, &sc, sizeof sc);
    }

    /* the grids: [0] spans the groups' scales from the smallest to the largest, base rounded
     * down and step up so that it still reaches both ends after the f16 rounding (base <= lmin,
     * base + 31 step >= lmax; step 0 and base the nearest f16 when all scales are equal);
     * [1] is that grid refitted to the groups (refit_grid), rounded to the nearest f16s */
    uint16_t base_h[2] = {0, 0}, step_h[2] = {0, 0};
    int n_grids = 1;
    if (lmin < lmax) {
        base_h[0] = f16_round_down(lmin);
        step_h[0] = f16_round_up((lmax - nt_f16_to_f32(base_h[0])) / 31.0f);
        for (int64_t g = 0; g < gpr; g++) {
            struct group_scratch sc;
            memcpy(&sc, nib + g * 16, sizeof sc);
            sc.weight = exp2f(2.0f * (sc.log2_scale - lmax)); /* (s_g / s_max)^2, in (0, 1] */
            memcpy(nib + g * 16, &sc, sizeof sc);
        }
        float b = nt_f16_to_f32(base_h[0]), h = nt_f16_to_f32(step_h[0]);
        refit_grid(nib, gpr, &b, &h);
        base_h[1] = nt_f32_to_f16(b);
        step_h[1] = nt_f32_to_f16(h);
        /* a fit that did not move (or left f16's range) adds nothing to try */
        if ((base_h[1] != base_h[0] || step_h[1] != step_h[0]) && isfinite(nt_f16_to_f32(base_h[1])) &&
            isfinite(nt_f16_to_f32(step_h[1])))
            n_grids = 2;
    } else if (lmin == lmax) {
        base_h[0] = nt_f32_to_f16(lmin);
    }

    /* pass 2: every group's best code on each grid, and each grid's error over the row (the
     * group errors scaled back to the row's units, in double: the shifts span 2^(+-149)) */
    double total[2] = {0.0, 0.0};
    for (int64_t g = 0; g < gpr; g++) {
        struct group_scratch sc;
        memcpy(&sc, nib + g * 16, sizeof sc);
        if (!sc.live) continue;
        struct group4 grp = load_group(w + g * G);
        scale_group(&grp, sc.shift);
        for (int k = 0; k < n_grids; k++) {
            float e;
            sc.code[k] = (uint8_t)best_code(&grp, sc.shift, sc.log2_scale, nt_f16_to_f32(base_h[k]),
                                            nt_f16_to_f32(step_h[k]), &e);
            total[k] += ldexp((double)e, -2 * sc.shift);
        }
        memcpy(nib + g * 16, &sc, sizeof sc);
    }
    int k = n_grids == 2 && total[1] < total[0];
    *params = (uint32_t)base_h[k] | (uint32_t)step_h[k] << 16;
    float base = nt_f16_to_f32(base_h[k]), step = nt_f16_to_f32(step_h[k]);

    /* pass 3: the chosen grid's codes, and the nibbles under the coded scales */
    memset(codes, 0, (size_t)cstride);
    for (int64_t g = 0; g < gpr; g++) {
        struct group_scratch sc;
        memcpy(&sc, nib + g * 16, sizeof sc);
        int code = sc.code[k];
        if (!sc.live) {
            memset(nib + g * 16, 0x88, 16); /* level 0 everywhere, under any scale */
        } else {
            struct group4 grp = load_group(w + g * G);
            scale_group(&grp, sc.shift);
            write_nibbles(&grp, mul_pow2(nt_q4tp_scale(base, step, code), sc.shift), nib + g * 16);
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
        quantize_row(W + r * cols, gpr, cstride, nibbles + r * gpr * 16, params + r, codes + r * cstride);
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
