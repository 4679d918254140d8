/* baseline.c - the comparison baseline of baseline.h: 4-bit levels with one f16 scale per 32.
 *
 * Per group: the searched scale (shared with q4tp), rounded to f16 both ways, and of those two
 * the one whose re-rounded levels leave the smaller error (the counterpart of q4tp trying the
 * grid codes around a group's scale). Levels are always rounded against the decoded f16 scale.
 * The signed variant runs that search twice, for a positive and for a negative scale, and keeps
 * the better group.
 */
#include "baseline.h"

#include <math.h>

#include "quant.h"

#define G NT_Q4TP_GROUP

/* The decoded f16 candidates of a scale: its nearest f16 and the neighbour on the other side.
 * Scales below f16's range become the smallest subnormal, so a tiny group rounds to zeros. */
static int f16_candidates(float s, float cand[2]) {
    if (s >= 65504.0f) {
        cand[0] = 65504.0f;
        return 1;
    }
    uint16_t h = nt_f32_to_f16(s);
    if (h == 0) h = 1;
    float near = nt_f16_to_f32(h);
    cand[0] = near;
    if (near == s) return 1;
    uint16_t other = near > s ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
    if (other == 0 || other >= 0x7c00u) return 1;
    cand[1] = nt_f16_to_f32(other);
    return 2;
}

/* One group with the searched positive f16 scale: writes its dequantized values, returns its
 * squared error (in f32, as nt_q4_group_error). */
static float searched_group(const float *w, float *out) {
    float s = nt_q4_group_best_scale(w), cand[2];
    if (s == 0.0f) {
        /* all zero, or subnormals whose scale underflows: every level is 0 */
        memset(out, 0, G * sizeof(float));
        float e = 0.0f;
        for (int k = 0; k < G; k++) e += w[k] * w[k];
        return e;
    }
    int n = f16_candidates(s, cand);
    float best = cand[0], e = nt_q4_group_error(w, cand[0]);
    if (n == 2) {
        float e1 = nt_q4_group_error(w, cand[1]);
        if (e1 < e) {
            best = cand[1];
            e = e1;
        }
    }
    int8_t l[G];
    nt_q4_group_levels(w, best, l);
    for (int k = 0; k < G; k++) out[k] = best * (float)l[k];
    return e;
}

void nt_q4_baseline_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out) {
    NT_ASSERT(cols > 0 && cols % G == 0);
    for (int64_t i = 0; i < nrows * cols; i += G) searched_group(W + i, out + i);
}

void nt_q4_baseline_signed_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out) {
    NT_ASSERT(cols > 0 && cols % G == 0);
    for (int64_t i = 0; i < nrows * cols; i += G) {
        /* a negative scale s < 0 with levels L is the positive scale -s on the negated group */
        float neg[G], neg_out[G];
        for (int k = 0; k < G; k++) neg[k] = -W[i + k];
        float e_pos = searched_group(W + i, out + i), e_neg = searched_group(neg, neg_out);
        if (e_neg < e_pos)
            for (int k = 0; k < G; k++) out[i + k] = -neg_out[k];
    }
}

void nt_q4_baseline_amax_roundtrip(const float *W, int64_t nrows, int64_t cols, float *out) {
    NT_ASSERT(cols > 0 && cols % G == 0);
    for (int64_t i = 0; i < nrows * cols; i += G) {
        const float *w = W + i;
        float m = 0.0f;
        for (int k = 0; k < G; k++)
            if (fabsf(w[k]) > fabsf(m)) m = w[k];
        float d = nt_f16_to_f32(nt_f32_to_f16(m / -8.0f));
        if (d == 0.0f) {
            memset(out + i, 0, G * sizeof(float));
            continue;
        }
        float inv = 1.0f / d;
        for (int k = 0; k < G; k++) {
            float l = rintf(w[k] * inv);
            l = l < -8.0f ? -8.0f : l > 7.0f ? 7.0f : l;
            out[i + k] = d * l;
        }
    }
}
