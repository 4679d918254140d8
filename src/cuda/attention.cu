/* attention.cu - the CUDA backend's attention: the pass's K and V rows appended to the caches,
 * then causal GQA for each position over its own context, split over the context by absolute
 * position and merged in a fixed order (the same bits for a position in any pass).
 * attention_limits says which shapes the kernel holds.
 */
#include "ops.cuh"

/* The pass's K and V rows into the caches at pos0 (read from the meta words, so a captured pass
 * appends wherever the sequence is). */
__global__ void k_kv_append(const struct pass_meta *meta, size_t rows, size_t kvw, const float *k, const float *v,
                            float *k_cache, float *v_cache) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= rows) return;
    size_t at = (size_t)meta->pos0 * kvw + i;
    k_cache[at] = k[i];
    v_cache[at] = v[i];
}

/* Causal GQA, split over the context, then merged. A block serves one position and ATT_HEADS
 * query heads of one kv head (each K/V row is loaded once for them); its ATT_WARPS warps split
 * the position's context by absolute position: chunk u / ATT_CHUNK goes to warp
 * (u / ATT_CHUNK) % ATT_WARPS, which runs the online softmax over its chunks in increasing u.
 * The warps' (m, l, o) are then merged in warp order. Who handles which u depends on u alone, so
 * a position gets the same bits in every pass (DESIGN.md); against the CPU's single chain over
 * u the sums are reassociated (last bits). A lane holds DPL = ceil(dh / 32) dims of each head:
 * dims lane + 32 i. */
#define ATT_WARPS 8
#define ATT_CHUNK 32
#define ATT_HEADS 4
template <int DPL>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(const struct pass_meta *meta, int nq, int nkv, int dh, int hpb, const float *__restrict__ q,
                const float *__restrict__ kc, const float *__restrict__ vc, float *__restrict__ out) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float sm_m[ATT_WARPS][ATT_HEADS], sm_l[ATT_WARPS][ATT_HEADS];
    __shared__ float sm_o[ATT_WARPS][ATT_HEADS][DPL * 32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int t = blockIdx.z, kvh = blockIdx.y, rep = nq / nkv;
    int h0 = kvh * rep + blockIdx.x * hpb, ctx = meta->pos0 + t + 1;
    int kvw = nkv * dh, qw = nq * dh;
    float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)dh));
    float qv[ATT_HEADS][DPL], o[ATT_HEADS][DPL], m[ATT_HEADS], l[ATT_HEADS];
#pragma unroll
    for (int hh = 0; hh < ATT_HEADS; hh++) {
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            int c = lane + 32 * i;
            qv[hh][i] = hh < hpb && c < dh ? q[(size_t)t * qw + (size_t)(h0 + hh) * dh + c] : 0.0f;
            o[hh][i] = 0.0f;
        }
    }
    for (int c0 = warp * ATT_CHUNK; c0 < ctx; c0 += ATT_WARPS * ATT_CHUNK) {
        int c1 = min(c0 + ATT_CHUNK, ctx);
        for (int u = c0; u < c1; u++) {
            const float *ku = kc + (size_t)u * kvw + (size_t)kvh * dh;
            const float *vu = vc + (size_t)u * kvw + (size_t)kvh * dh;
            float kr[DPL], vr[DPL];
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                int c = lane + 32 * i;
                kr[i] = c < dh ? ku[c] : 0.0f;
                vr[i] = c < dh ? vu[c] : 0.0f;
            }
#pragma unroll
            for (int hh = 0; hh < ATT_HEADS; hh++) {
                if (hh >= hpb) break;
                float part = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) part = __fmaf_rn(qv[hh][i], kr[i], part);
                float sc = __fmul_rn(warp_sum(part), scale);
                if (sc > m[hh]) {
                    float corr = expf(__fsub_rn(m[hh], sc));
                    l[hh] = __fmul_rn(l[hh], corr);
#pragma unroll
                    for (int i = 0; i < DPL; i++) o[hh][i] = __fmul_rn(o[hh][i], corr);
                    m[hh] = sc;
                }
                float ev = expf(__fsub_rn(sc, m[hh]));
                l[hh] = __fadd_rn(l[hh], ev);
#pragma unroll
                for (int i = 0; i < DPL; i++) o[hh][i] = __fadd_rn(o[hh][i], __fmul_rn(ev, vr[i]));
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < ATT_HEADS; hh++) {
        if (lane == 0) {
            sm_m[warp][hh] = m[hh];
            sm_l[warp][hh] = l[hh];
        }
#pragma unroll
        for (int i = 0; i < DPL; i++) sm_o[warp][hh][lane + 32 * i] = o[hh][i];
    }
    __syncthreads();
    /* the merge: thread (hh, c) combines the warps' partials in warp order */
    for (int j = threadIdx.x; j < hpb * dh; j += blockDim.x) {
        int hh = j / dh, c = j % dh;
        float mx = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm_m[w][hh]);
        float den = 0.0f, num = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) {
            if (sm_m[w][hh] == -INFINITY) continue; /* a warp whose chunks all lie past ctx */
            float f = expf(__fsub_rn(sm_m[w][hh], mx));
            den = __fadd_rn(den, __fmul_rn(sm_l[w][hh], f));
            num = __fadd_rn(num, __fmul_rn(sm_o[w][hh][c], f));
        }
        out[(size_t)t * qw + (size_t)(h0 + hh) * dh + c] = __fdiv_rn(num, den);
    }
}

void be_attention(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d, const float *q,
                  const float *k, const float *v, float *k_cache, float *v_cache, float *out) {
    /* runs on every pass, replayed ones too: the kernels trust pos0 (session.c checks it first) */
    if (p->pos0 < 0 || p->pos0 + p->n > d->n_ctx)
        return cuda_fault(be, "attention: positions %d..%d run past the cache of %d", p->pos0, p->pos0 + p->n - 1,
                          d->n_ctx);
    OP_START(be, OP_ATTENTION, DIMS(d), U(q), U(k), U(v), U(k_cache), U(v_cache), U(out));
    PROFILE(be, "attention n=%d", p->n);
    size_t kvw = (size_t)d->nkv * d->dh;
    size_t rows = (size_t)p->n * kvw;
    NT_LAUNCH_EARLY(k_kv_append, (unsigned)((rows + ELEM_THREADS - 1) / ELEM_THREADS), ELEM_THREADS, 0, meta_of(p), rows, kvw,
              k, v, k_cache, v_cache);
    if (!LAUNCHED(be)) return;
    int rep = d->nq / d->nkv, hpb = rep % 4 == 0 ? 4 : rep % 2 == 0 ? 2 : 1;
    dim3 grid(rep / hpb, d->nkv, p->n);
    int dpl = (d->dh + 31) / 32;
#define ATT_CASE(v)                                                                                \
    case v:                                                                                        \
        NT_LAUNCH_EARLY(k_attention<v>, grid, ATT_WARPS * 32, 0, meta_of(p), d->nq, d->nkv, d->dh, hpb, q, k_cache,       \
                  v_cache, out);                                                                           \
        break;
    switch (dpl) {
        ATT_CASE(1) ATT_CASE(2) ATT_CASE(3) ATT_CASE(4)
    default: /* attention_limits refused the model at load */
        return cuda_fault(be, "attention: head_dim %d is more than the kernel holds", d->dh);
    }
#undef ATT_CASE
    LAUNCHED(be);
}
void attention_limits(int nq, int nkv, int dh, char *why, size_t cap) {
    if (dh < 1 || dh > 32 * 4)
        snprintf(why, cap, "head_dim %d: the CUDA attention holds 1 to %d", dh, 32 * 4);
    else if (nkv < 1 || nq % nkv)
        snprintf(why, cap, "num_key_value_heads %d must divide num_attention_heads %d", nkv, nq);
    else
        why[0] = 0;
}
