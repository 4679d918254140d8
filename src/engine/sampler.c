/* sampler.c - the token sampler of sampler.h: penalties, greedy, top-k, temperature, top-p,
 * min-p and a seeded draw.
 *
 * Owns the sampler's settings, its xoshiro256** state, the history window of the penalties and
 * the scratch of one sample, all allocated by nt_sampler_new for one vocabulary size. Sampling
 * and accepting allocate nothing and call no libc function that may (no qsort, no printf).
 *
 * One sample with temperature T > 0, over the logits l (after the penalties):
 *   order       "more probable first": l descending, then id ascending (NaN counts as -inf).
 *               Every filter keeps a prefix of this order, so every kept set is {key >= K}
 *               for one boundary key K (make_key);
 *   weights     w = e^((l - max l) / T), in float: the max has w = 1 exactly, -inf and NaN 0;
 *   top-k       the first k (radix selection by count);
 *   top-p       the shortest prefix whose weight reaches top_p * (the weight of all that top-k
 *               kept) (radix selection by mass; all of them if rounding keeps the sums below);
 *   min-p       w >= min_p (p >= min_p * p_max, as the max has w = 1);
 *   draw        u = one 53-bit uniform in [0, 1); the token is the first kept id, in ascending
 *               id order, whose running sum of w (in double) exceeds u * (sum of kept w).
 * Every sample with T > 0 takes exactly one 64-bit output of the generator, whatever is kept;
 * greedy samples (T = 0) take none. When every logit is -inf or NaN the answer is the greedy
 * one; when some are +inf, those are the candidates, with equal weights.
 *
 * Cost at a vocabulary V: a max pass, a vectorised pass for the weights, one histogram pass and
 * one gathering pass per selection over V, and passes over ever smaller subsets; nothing is
 * sorted but sets of at most SMALL_N.
 *
 * Determinism: the same seed, params, history and logits give the same token on every IEEE-754
 * machine. The generator is integer arithmetic; e^x is a polynomial of our own (libm's expf may
 * differ in the last bit between versions); the float and double operations are each correctly
 * rounded and done in a fixed order, as long as the compiler fuses none of them (-ffp-contract
 * =off, the Makefile's flag and the default of ISO C modes such as -std=c11; no -ffast-math).
 */
#include "sampler.h"

#include <math.h>

struct nt_sampler {
    struct nt_sampler_params p;
    int vocab;
    uint64_t rng[4];              /* xoshiro256** state, never all zero */

    /* History of the penalties (only when penalty_last_n > 0 and a penalty is on). */
    int track;
    int32_t *ring;                /* [penalty_last_n] the window, oldest at ring_head once full */
    int ring_len, ring_head;
    int32_t *count;               /* [vocab] occurrences of each id in the window */
    int32_t *slot;                /* [vocab] where an id with count > 0 sits in distinct[] */
    int32_t *distinct;            /* [min(penalty_last_n, vocab)] the ids with count > 0 */
    int n_distinct;
    float *pen;                   /* [vocab] logits after the penalties */

    /* Scratch of one sample (temperature > 0 only). */
    float *w;                     /* [vocab] weights of all ids */
    uint16_t *dig;                /* [vocab] coarse digits of all ids (coarse_digit) */
    uint64_t *lkey;               /* [vocab] the kept list: keys, in ascending id order */
    float *lw;                    /* [vocab] ... and weights */
    uint64_t *tkey[2];            /* [vocab] radix selection's ping-pong buffers */
    float *tw[2];
    uint32_t hcnt[2048];          /* radix histogram: 11-bit digits */
    double hmass[2048];
};

/* ---- Random numbers ------------------------------------------------------------------------
 * xoshiro256** 1.0 (Blackman and Vigna, prng.di.unimi.it), seeded with four outputs of
 * splitmix64 from the seed, as its authors recommend. */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* The top 53 bits as a double in [0, 1): every value a multiple of 2^-53. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* ---- Arithmetic ---------------------------------------------------------------------------- */

/* e^x for x <= 0 or NaN (giving 0), in float, within 1.4 ulp: the range reduction and polynomial of
 * Cephes' expf. Plain float and integer operations only, so the bits are the same everywhere,
 * and free of branches (the clamp and the underflow are done on the bits) so that gcc
 * vectorises the loop around it. Below -87 (near the end of the normal floats, 2^-126 =
 * e^-87.3) the result is 0: such a token weighs under 1.7e-38 of the most probable one. */
static inline float exp_neg(float x) {
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    /* the bits of negative floats grow with |x|: x < -87 <=> sign set and bits > bits(-87) */
    const uint32_t minus87 = 0xc2ae0000u;
    /* (signed comparisons: SSE2 has them; both sides negative, or both non-negative) */
    uint32_t under = ((xb >> 31) & (uint32_t)((int32_t)xb > (int32_t)minus87)) |
                     (uint32_t)((int32_t)(xb & 0x7fffffffu) > 0x7f800000);
    uint32_t cb = xb ^ ((xb ^ minus87) & (0u - under)); /* under ? minus87 : xb */
    float xc;
    memcpy(&xc, &cb, sizeof xc);
    /* k = round(x / ln 2): adding 1.5 * 2^23 leaves no fraction bits (ties to even) */
    float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    /* r = x - k ln 2 in [-ln2/2, ln2/2], ln 2 = C1 + C2 with C1 short enough that k * C1 is
     * exact */
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    /* times 2^k, k in [-126, 0]: a normal float's exponent field */
    int32_t sb = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float res = y * scale;
    uint32_t rb;
    memcpy(&rb, &res, sizeof rb);
    rb &= under - 1u;              /* 0 below -87 and for NaN */
    memcpy(&res, &rb, sizeof res);
    return res;
}

/* The order key of a candidate: larger key = earlier in the order (logit descending, then id
 * ascending). The high half maps the float's bits to an unsigned integer of the same order
 * (-0 taken as +0 so that equal logits tie, NaN as -inf), the low half is ~id. Keys of distinct
 * ids differ. */
static inline uint64_t make_key(float v, int32_t id) {
    uint32_t u;
    if (v == 0.0f) v = 0.0f;
    if (v != v) v = -INFINITY;
    memcpy(&u, &v, sizeof u);
    u ^= (uint32_t)((int32_t)u >> 31) | 0x80000000u; /* negative: all bits flip; else the sign */
    return ((uint64_t)u << 32) | (uint32_t)~(uint32_t)id;
}

static inline int32_t key_id(uint64_t key) { return (int32_t)~(uint32_t)key; }

/* The logit of a key (make_key's high half undone; NaN came back as -inf). */
static inline float key_logit(uint64_t key) {
    uint32_t u = (uint32_t)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A coarse digit of a candidate from d = (l - max) / T (<= 0, or NaN): 2047 - floor(-d * 8 /
 * ln 2), floored at 0, so that one digit holds the weights of 1/8 of an octave (w in (2^-(j+1)/8,
 * 2^-j/8]) and the digits of weights below 2^-255 (none above 1e-77 of the max) share digit 0.
 * Built from monotonic operations only (correctly rounded products, a clamp on the bits of a
 * non-negative float, truncation), so a larger logit never has a smaller digit: the digits
 * split the order into consecutive runs, as the key's own top bits would, but far more evenly.
 * NaN and -inf go to digit 0. */
static inline uint32_t coarse_digit(float d) {
    float q = d * -11.5415603271f;             /* 8 / ln 2 */
    uint32_t qb;
    memcpy(&qb, &q, sizeof qb);
    qb &= 0x7fffffffu;                         /* -0 as 0; NaN stays above the cap */
    const int32_t cap = 0x44ffe000;            /* 2047.0f */
    qb = (int32_t)qb > cap ? (uint32_t)cap : qb;
    float qc;
    memcpy(&qc, &qb, sizeof qc);
    return 2047u - (uint32_t)(int32_t)qc;
}

/* ---- Prefix selection ----------------------------------------------------------------------
 * The candidates come unsorted; a filter needs only its boundary, the smallest key it keeps.
 * An MSD radix selection finds it in a few linear passes, with no sort of the whole set: a
 * histogram of 11-bit digits (count and weight per digit) gives the digit where the prefix
 * ends; only the candidates with that digit are gathered, and the next digit splits them,
 * until at most SMALL_N are left, which an insertion sort orders. Over the whole vocabulary
 * the first digit is coarse_digit (read from s->dig, no keys needed); over a set of keys it is
 * the top few of the bits where the keys differ. Keys are distinct, so it always ends. */

/* The most bits of one digit: the histogram (2048 counts and weights, 24 KB) stays in L1. */
#define RADIX_BITS 11
/* Below this an insertion sort (about n^2/4 moves) costs less than another histogram pass. */
#define SMALL_N 64

enum { BY_COUNT, BY_MASS };

/* Above this vocabulary size the first pass of a selection over all ids uses coarse digits,
 * which needs no keys; at or below, listing every id with its key first costs less than that
 * pass's 2048-digit histogram. */
#define FULL_MIN 1024

/* A pass's digit walk: from the top of the order down, the digit where the prefix ends, adding
 * what comes before it to *above_n / *above_m; -1 if rounding kept the sums below target
 * (BY_MASS only). The first pass of a BY_MASS selection sets *target from the total. */
static int walk_digits(const struct nt_sampler *s, int n_digit, int mode, int count, double frac,
                       int64_t *above_n, double *above_m, double *target) {
    if (mode == BY_MASS && *target < 0) {
        double total = 0;  /* summed as the walk below sums */
        for (int d = n_digit - 1; d >= 0; d--) total += s->hmass[d];
        *target = frac * total;
    }
    for (int d = n_digit - 1; d >= 0; d--) {
        if (!s->hcnt[d]) continue;
        if (mode == BY_COUNT) {
            if (*above_n + s->hcnt[d] >= count) return d;
            *above_n += s->hcnt[d];
        } else {
            if (*above_m + s->hmass[d] >= *target) return d;
            *above_m += s->hmass[d];
        }
    }
    return -1;
}

/* Boundary key of the prefix that keeps `count` candidates (BY_COUNT, 1 <= count <= n), or the
 * shortest whose weight reaches frac of the whole (BY_MASS); the kept set is {key >= boundary}.
 * The candidates are key[0..n) with weights w (n >= 1), or, with key NULL, all n = vocab ids
 * with logits x, weights s->w and digits s->dig; then *first_digit receives the boundary's
 * coarse digit. Reads them only. */
static uint64_t select_prefix(struct nt_sampler *s, const float *x, const uint64_t *key,
                              const float *w, int n, int mode, int count, double frac,
                              uint32_t *first_digit) {
    int64_t above_n = 0;             /* candidates before the current set, in the order */
    double above_m = 0, target = -1; /* their weight; the weight to reach (-1: not yet known) */
    const uint64_t *ck = key;
    const float *cw = w;
    int buf = 0;
    if (!key) {
        /* the first pass over the whole vocabulary, by coarse digit */
        const float *aw = s->w;
        const uint16_t *dig = s->dig;
        memset(s->hcnt, 0, sizeof s->hcnt);
        if (mode == BY_COUNT) {
            for (int i = 0; i < n; i++) s->hcnt[dig[i]]++;
        } else {
            memset(s->hmass, 0, sizeof s->hmass);
            for (int i = 0; i < n; i++) {
                s->hcnt[dig[i]]++;
                s->hmass[dig[i]] += aw[i];
            }
        }
        int d = walk_digits(s, 2048, mode, count, frac, &above_n, &above_m, &target);
        NT_ASSERT(d >= 0);           /* the walk's last sum is the total, which reaches target */
        *first_digit = (uint32_t)d;
        uint64_t *dk = s->tkey[buf];
        float *dw = s->tw[buf];
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (dig[i] == d) {
                dk[m] = make_key(x[i], i);
                dw[m] = aw[i];
                m++;
            }
        }
        ck = dk;
        cw = dw;
        n = m;
        buf ^= 1;
    }
    for (;;) {
        if (n <= SMALL_N) {
            uint64_t sk[SMALL_N];
            float sw[SMALL_N];
            for (int i = 0; i < n; i++) {  /* insertion sort, key descending */
                int j = i;
                for (; j > 0 && sk[j - 1] < ck[i]; j--) {
                    sk[j] = sk[j - 1];
                    sw[j] = sw[j - 1];
                }
                sk[j] = ck[i];
                sw[j] = cw[i];
            }
            if (mode == BY_COUNT) {
                int64_t j = count - above_n - 1;
                NT_ASSERT(j >= 0 && j < n);
                return sk[j];
            }
            if (target < 0) {
                double total = 0;
                for (int i = 0; i < n; i++) total += sw[i];
                target = frac * total;
            }
            double m = above_m;
            for (int i = 0; i < n; i++) {
                m += sw[i];
                if (m >= target) return sk[i];
            }
            return sk[n - 1];      /* rounding kept the sum short: all of this set */
        }
        /* the digit: the top bits of those where the keys differ, about log2(n) of them (at
         * most RADIX_BITS) so that clearing the histogram costs no more than filling it */
        uint64_t diff = 0, lo = ck[0];
        for (int i = 1; i < n; i++) {
            diff |= ck[i] ^ ck[0];
            lo = ck[i] < lo ? ck[i] : lo;
        }
        NT_ASSERT(diff != 0);      /* distinct keys */
        int top = 64 - __builtin_clzll(diff);
        int bits = 32 - __builtin_clz((unsigned)n);
        bits = bits < RADIX_BITS ? bits : RADIX_BITS;
        int shift = top > bits ? top - bits : 0;
        uint32_t mask = (1u << (top - shift)) - 1;
        int n_digit = (int)mask + 1;
        memset(s->hcnt, 0, sizeof s->hcnt[0] * (size_t)n_digit);
        if (mode == BY_COUNT) {
            for (int i = 0; i < n; i++) s->hcnt[(ck[i] >> shift) & mask]++;
        } else {
            memset(s->hmass, 0, sizeof s->hmass[0] * (size_t)n_digit);
            for (int i = 0; i < n; i++) {
                uint32_t d = (uint32_t)(ck[i] >> shift) & mask;
                s->hcnt[d]++;
                s->hmass[d] += cw[i];
            }
        }
        int d = walk_digits(s, n_digit, mode, count, frac, &above_n, &above_m, &target);
        if (d < 0) return lo;      /* (BY_MASS) rounding kept the sum short: all of this set */
        uint64_t *dk = s->tkey[buf];
        float *dw = s->tw[buf];
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (((uint32_t)(ck[i] >> shift) & mask) == (uint32_t)d) {
                dk[m] = ck[i];
                dw[m] = cw[i];
                m++;
            }
        }
        ck = dk;
        cw = dw;
        n = m;
        buf ^= 1;
    }
}

/* Keeps (in place, in their order) the listed candidates with key >= lo; returns how many. */
static int keep_from(uint64_t *key, float *w, int n, uint64_t lo) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (key[i] >= lo) {
            key[m] = key[i];
            w[m] = w[i];
            m++;
        }
    }
    return m;
}

/* Lists (in id order, into s->lkey / s->lw) the ids of the whole vocabulary with key >= lo and
 * a positive weight; returns how many. dlo is coarse_digit of lo's logit (what select_prefix
 * gives in *first_digit; 0: s->dig is not read): a smaller digit means a smaller key, so the key
 * is computed only for ids at dlo or above. */
static int list_from(struct nt_sampler *s, const float *x, uint64_t lo, uint32_t dlo) {
    const float *w = s->w;
    const uint16_t *dig = s->dig;
    int m = 0;
    for (int i = 0; i < s->vocab; i++) {
        if ((dlo == 0 || dig[i] >= dlo) && w[i] > 0.0f) {
            uint64_t k = make_key(x[i], i);
            if (k >= lo) {
                s->lkey[m] = k;
                s->lw[m] = w[i];
                m++;
            }
        }
    }
    return m;
}

/* The largest logit that is not NaN; -inf if none. Eight running maxima: max is exact, so the
 * grouping changes nothing, and the eight chains run side by side. */
static float max_logit(const float *x, int n) {
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    for (int j = 1; j < 8; j++) m[0] = m[j] > m[0] ? m[j] : m[0];
    return m[0];
}

/* ---- Penalties and history ----------------------------------------------------------------- */

static int penalties_on(const struct nt_sampler_params *p) {
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

/* The logits to sample from: the caller's, or a copy with the penalties of the window. */
static const float *apply_penalties(struct nt_sampler *s, const float *logits) {
    if (!s->track || s->n_distinct == 0) return logits;
    const struct nt_sampler_params *p = &s->p;
    memcpy(s->pen, logits, sizeof(float) * (size_t)s->vocab);
    for (int i = 0; i < s->n_distinct; i++) {
        int32_t t = s->distinct[i];
        float l = s->pen[t];
        /* llama.cpp's penalties: repetition once per distinct token, then
         * logit -= count * frequency + presence */
        l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->pen[t] = l;
    }
    return s->pen;
}

static void count_add(struct nt_sampler *s, int32_t t) {
    if (s->count[t]++ == 0) {
        s->slot[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void count_remove(struct nt_sampler *s, int32_t t) {
    if (--s->count[t] == 0) {      /* move the last distinct id into t's slot */
        int32_t j = s->slot[t], last = s->distinct[--s->n_distinct];
        s->distinct[j] = last;
        s->slot[last] = j;
    }
}

/* ---- Public --------------------------------------------------------------------------------- */

struct nt_sampler_params nt_sampler_default_params(void) {
    struct nt_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.6f;
    p.top_k = 0;
    p.top_p = 0.95f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    return p;
}

void nt_sampler_free(struct nt_sampler *s) {
    if (!s) return;
    nt_free(s->ring);
    nt_free(s->count);
    nt_free(s->slot);
    nt_free(s->distinct);
    nt_free(s->pen);
    nt_free(s->w);
    nt_free(s->dig);
    nt_free(s->lkey);
    nt_free(s->lw);
    for (int i = 0; i < 2; i++) {
        nt_free(s->tkey[i]);
        nt_free(s->tw[i]);
    }
    nt_free(s);
}

nemotron_status nt_sampler_new(const struct nt_sampler_params *params, int vocab,
                               struct nt_sampler **out, struct nt_err *err) {
    if (!out) return nt_fail(err, NEMOTRON_ERR_ARG, "sampler: out is NULL");
    *out = NULL;
    struct nt_sampler_params p = params ? *params : nt_sampler_default_params();
    if (vocab < 1)
        return nt_fail(err, NEMOTRON_ERR_ARG, "sampler: vocab must be >= 1, got %d", vocab);
    if (!isfinite(p.temperature) || p.temperature < 0)
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "sampler: temperature must be finite and >= 0 (0: greedy), got %g",
                       (double)p.temperature);
    if (p.top_k < 0)
        return nt_fail(err, NEMOTRON_ERR_ARG, "sampler: top_k must be >= 0 (0: off), got %d",
                       p.top_k);
    if (!(p.top_p > 0 && p.top_p <= 1))
        return nt_fail(err, NEMOTRON_ERR_ARG, "sampler: top_p must be in (0, 1] (1: off), got %g",
                       (double)p.top_p);
    if (!(p.min_p >= 0 && p.min_p <= 1))
        return nt_fail(err, NEMOTRON_ERR_ARG, "sampler: min_p must be in [0, 1] (0: off), got %g",
                       (double)p.min_p);
    if (!isfinite(p.repeat_penalty) || !(p.repeat_penalty > 0))
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "sampler: repeat_penalty must be finite and > 0 (1: off), got %g",
                       (double)p.repeat_penalty);
    if (!isfinite(p.presence_penalty))
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "sampler: presence_penalty must be finite (0: off), got %g",
                       (double)p.presence_penalty);
    if (!isfinite(p.frequency_penalty))
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "sampler: frequency_penalty must be finite (0: off), got %g",
                       (double)p.frequency_penalty);
    if (p.penalty_last_n < 0)
        return nt_fail(err, NEMOTRON_ERR_ARG,
                       "sampler: penalty_last_n must be >= 0 (0: no penalties), got %d",
                       p.penalty_last_n);

    struct nt_sampler *s = nt_calloc(1, sizeof *s);
    if (!s) return nt_fail(err, NEMOTRON_ERR_NOMEM, "sampler: out of memory");
    s->p = p;
    s->vocab = vocab;
    uint64_t x = p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);

    size_t v = (size_t)vocab;
    int ok = 1;
    s->track = penalties_on(&p);
    if (s->track) {
        int n_distinct = p.penalty_last_n < vocab ? p.penalty_last_n : vocab;
        ok &= (s->ring = nt_calloc((size_t)p.penalty_last_n, sizeof(int32_t))) != NULL;
        ok &= (s->distinct = nt_calloc((size_t)n_distinct, sizeof(int32_t))) != NULL;
        ok &= (s->count = nt_calloc(v, sizeof(int32_t))) != NULL;
        ok &= (s->slot = nt_calloc(v, sizeof(int32_t))) != NULL;
        ok &= (s->pen = nt_calloc(v, sizeof(float))) != NULL;
    }
    if (p.temperature > 0) {
        ok &= (s->w = nt_calloc(v, sizeof(float))) != NULL;
        ok &= (s->dig = nt_calloc(v, sizeof(uint16_t))) != NULL;
        ok &= (s->lkey = nt_calloc(v, sizeof(uint64_t))) != NULL;
        ok &= (s->lw = nt_calloc(v, sizeof(float))) != NULL;
        for (int i = 0; i < 2; i++) {
            ok &= (s->tkey[i] = nt_calloc(v, sizeof(uint64_t))) != NULL;
            ok &= (s->tw[i] = nt_calloc(v, sizeof(float))) != NULL;
        }
    }
    if (!ok) {
        nt_sampler_free(s);
        return nt_fail(err, NEMOTRON_ERR_NOMEM,
                       "sampler: out of memory for a vocabulary of %d and penalty_last_n %d",
                       vocab, p.penalty_last_n);
    }
    *out = s;
    return NEMOTRON_OK;
}

/* argmax, the lowest id among equals; NaN never wins; 0 when every logit is NaN. */
static int32_t argmax(const float *x, int n) {
    int32_t best = -1;
    float bv = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] == x[i] && (best < 0 || x[i] > bv)) {
            best = i;
            bv = x[i];
        }
    }
    return best < 0 ? 0 : best;
}

int nt_sampler_is_greedy(const struct nt_sampler *s) { return s->p.temperature == 0.0f && !s->track; }

int32_t nt_sampler_sample(struct nt_sampler *s, const float *logits) {
    NT_ASSERT(s && logits);
    const struct nt_sampler_params *p = &s->p;
    const float *x = apply_penalties(s, logits);
    if (p->temperature == 0.0f) return argmax(x, s->vocab);

    double u = rng_uniform(s->rng);   /* one draw per sample, whatever is kept */
    const float temp = p->temperature, mx = max_logit(x, s->vocab);
    if (mx == -INFINITY) return argmax(x, s->vocab);  /* no token has any probability */
    const int vocab = s->vocab, top_k = p->top_k > 0 && p->top_k < vocab ? p->top_k : 0;
    uint64_t *lk = s->lkey;
    float *lw = s->lw;
    int n;                            /* the kept list lk/lw[0..n) */
    int k_done = 0, p_done = 0;       /* top-k / top-p applied already */
    if (mx == INFINITY) {
        /* the limit of ever larger equal logits: the +inf ones, equally likely */
        n = 0;
        for (int i = 0; i < vocab; i++) {
            if (x[i] == INFINITY) {
                lk[n] = make_key(x[i], i);
                lw[n] = 1.0f;
                n++;
            }
        }
    } else {
        /* w = e^((l - max) / T) for every id; a division, not a product with 1/T, so that a
         * subnormal T cannot give 0 * inf */
        float *w = s->w;
        int full = vocab > FULL_MIN && (top_k || p->top_p < 1.0f);
        if (full) {
            uint16_t *dig = s->dig;
            for (int i = 0; i < vocab; i++) {
                float d = (x[i] - mx) / temp;
                w[i] = exp_neg(d);
                dig[i] = (uint16_t)coarse_digit(d);
            }
        } else {
            for (int i = 0; i < vocab; i++) w[i] = exp_neg((x[i] - mx) / temp);
        }
        uint32_t dlo = 0;
        if (full && top_k) {
            uint64_t lo = select_prefix(s, x, NULL, NULL, vocab, BY_COUNT, top_k, 0, &dlo);
            n = list_from(s, x, lo, dlo);
            k_done = 1;
        } else if (full) {
            uint64_t lo =
                select_prefix(s, x, NULL, NULL, vocab, BY_MASS, 0, (double)p->top_p, &dlo);
            n = list_from(s, x, lo, dlo);
            p_done = 1;
        } else {
            n = list_from(s, x, 0, 0); /* every id of positive weight: a prefix of the order */
        }
    }
    if (!k_done && top_k && top_k < n)
        n = keep_from(lk, lw, n, select_prefix(s, x, lk, lw, n, BY_COUNT, top_k, 0, NULL));
    if (!p_done && p->top_p < 1.0f && n > 1)
        n = keep_from(lk, lw, n,
                      select_prefix(s, x, lk, lw, n, BY_MASS, 0, (double)p->top_p, NULL));

    if (p->min_p > 0.0f) {
        /* the most probable token has w = 1 >= min_p: at least one stays */
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (lw[i] >= p->min_p) {
                lk[m] = lk[i];
                lw[m] = lw[i];
                m++;
            }
        }
        n = m;
    }
    NT_ASSERT(n >= 1);

    /* inverse CDF over the kept ids in ascending order */
    double z = 0;
    for (int i = 0; i < n; i++) z += lw[i];
    double t = u * z, c = 0;
    for (int i = 0; i < n; i++) {
        c += lw[i];
        if (c > t) return key_id(lk[i]);
    }
    return key_id(lk[n - 1]);         /* u * z rounded up to z: the last kept token */
}

void nt_sampler_accept(struct nt_sampler *s, int32_t token) {
    NT_ASSERT(s && token >= 0 && token < s->vocab);
    if (!s->track) return;
    int cap = s->p.penalty_last_n;
    if (s->ring_len == cap) {
        count_remove(s, s->ring[s->ring_head]);
    } else {
        s->ring_len++;
    }
    s->ring[s->ring_head] = token;
    s->ring_head = s->ring_head + 1 == cap ? 0 : s->ring_head + 1;
    count_add(s, token);
}

void nt_sampler_reset(struct nt_sampler *s) {
    NT_ASSERT(s);
    if (!s->track) return;
    for (int i = 0; i < s->n_distinct; i++) s->count[s->distinct[i]] = 0;
    s->n_distinct = 0;
    s->ring_len = 0;
    s->ring_head = 0;
}
