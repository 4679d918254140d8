/* moe.cu - the CUDA backend's mixture of experts: the router (sigmoid scores, group-limited
 * top-k, weights), the per-expert entry lists built on the device, and the routed experts as two
 * grouped products (products.cu) and the weighted combine; a pass of one position runs its k
 * experts without lists (decode.cu). moe_limits says which shapes and
 * weights these kernels hold.
 */
#include "ops.cuh"
#include "products.cuh"

#define ROUTE_THREADS 256

/* One block per position: the CPU's moe_route with block-wide picks (same winners: largest,
 * then lowest index). */
__global__ void __launch_bounds__(ROUTE_THREADS) k_moe_route(int E, int k, int n_group, int topk_group, int norm,
                                                             float scaling, float *logits, const float *bias,
                                                             int32_t *idx, float *wts) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ float sc[NT_MAX_EXPERTS];
    __shared__ unsigned char taken[NT_MAX_EXPERTS];
    __shared__ float gsc[NT_MAX_EXPERTS / 2];
    __shared__ unsigned char keep[NT_MAX_EXPERTS / 2];
    __shared__ float shv[33];
    __shared__ int shi[33];
    int t = blockIdx.x;
    float *s = logits + (size_t)t * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        float v = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-s[e])));
        s[e] = v;
        sc[e] = __fadd_rn(v, bias[e]);
        taken[e] = 0;
    }
    __syncthreads();
    if (n_group > 1) {
        int per = E / n_group;
        for (int g = threadIdx.x; g < n_group; g += blockDim.x) {
            const float *gs = sc + g * per;
            int a = -1, b = -1;
            for (int i = 0; i < per; i++)
                if (a < 0 || gs[i] > gs[a]) a = i;
            for (int i = 0; i < per; i++)
                if (i != a && (b < 0 || gs[i] > gs[b])) b = i;
            gsc[g] = __fadd_rn(gs[a], gs[b]);
            keep[g] = 0;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < topk_group; i++) {
                int best = -1;
                for (int g = 0; g < n_group; g++)
                    if (!keep[g] && (best < 0 || gsc[g] > gsc[best])) best = g;
                if (best >= 0) keep[best] = 1;
            }
        __syncthreads();
        for (int e = threadIdx.x; e < E; e += blockDim.x) taken[e] = !keep[e / per];
        __syncthreads();
    }
    for (int j = 0; j < k; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (!taken[e] && (bi < 0 || sc[e] > bv)) { bv = sc[e]; bi = e; }
        float rv;
        int ri;
        block_argbest(bv, bi, shv, shi, &rv, &ri);
        if (threadIdx.x == 0) {
            if (ri < 0) ri = 0; /* k <= kept experts is a config invariant; stay in bounds */
            taken[ri] = 1;
            idx[(size_t)t * k + j] = ri;
            wts[(size_t)t * k + j] = s[ri];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum = __fadd_rn(sum, wts[(size_t)t * k + j]);
        for (int j = 0; j < k; j++) {
            float wj = wts[(size_t)t * k + j];
            if (norm) wj = __fdiv_rn(wj, __fadd_rn(sum, 1e-20f));
            wts[(size_t)t * k + j] = __fmul_rn(wj, scaling);
        }
    }
}

/* NT_ROUTE_WARP=1 (the default): passes without expert groups and with E <= ROUTE_THREADS run
 * k_moe_route_warp, one warp per position, no block barriers (k_moe_route's 2 k + 1 barriers and
 * block picks were its 9.2 us at one position on the H200, docs/PERF.md). Bit for bit
 * k_moe_route's outputs for every input, NaN included; NT_ROUTE_WARP=0 launches only the block
 * kernel, to time the two side by side (dev/cuda/README.md). */
#ifndef NT_ROUTE_WARP
#define NT_ROUTE_WARP 1
#endif
#define RW_WARPS 4 /* positions per block */

/* A score as an unsigned key whose order is the floats' (NaN aside): the sign bit flipped for
 * positives, every bit for negatives; -0 first made +0, since k_moe_route's pick treats them as
 * equal (v > bv false both ways: the lower index wins). */
__device__ __forceinline__ unsigned route_key(float v) {
    unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* k_moe_route's pick when the warp's scores hold a NaN, where `better` is no order and the
 * winner depends on the tree: there thread e holds expert e (E <= ROUTE_THREADS), warp j's lane 0
 * ends its butterfly with its pick, and thread 0 joins warps 0, 1, ... in turn. Here slot j of
 * the lanes is that warp j: the same butterflies, then the same join. */
template <int SLOTS> __device__ inline int route_pick_exact(const float *sc, unsigned taken, int E) {
    int lane = threadIdx.x & 31;
    float rv[SLOTS];
    int ri[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; j++) {
        int e = lane + 32 * j;
        float v = 0.0f;
        int i = -1;
        if (e < E && !(taken >> j & 1)) v = sc[j], i = e;
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            int i2 = __shfl_xor_sync(0xffffffffu, i, o);
            if (better(v2, i2, v, i)) { v = v2; i = i2; }
        }
        rv[j] = __shfl_sync(0xffffffffu, v, 0);
        ri[j] = __shfl_sync(0xffffffffu, i, 0);
    }
    float bv = rv[0];
    int bi = ri[0];
#pragma unroll
    for (int j = 1; j < SLOTS; j++)
        if (better(rv[j], ri[j], bv, bi)) { bv = rv[j]; bi = ri[j]; }
    return bi;
}

/* One warp per position (RW_WARPS a block), without expert groups, E <= 32 SLOTS <= ROUTE_THREADS:
 * lane l holds experts l + 32 j, j < SLOTS, in registers. k_moe_route's expressions (the sigmoid,
 * the biased score, the weight sum in pick order, the normalisation) and winners: the largest
 * score, then the lowest index - a total order when no score is NaN, so each lane's best of its
 * slots and two warp reductions of route_key then the index find it whatever the tree; a warp
 * with a NaN score takes route_pick_exact. The bias loads before grid_wait (a constant). */
template <int SLOTS>
__global__ void __launch_bounds__(RW_WARPS * 32) k_moe_route_warp(int n, int E, int k, int norm, float scaling,
                                                                   float *logits, const float *bias, int32_t *idx,
                                                                   float *wts) {
    int lane = threadIdx.x & 31, t = blockIdx.x * RW_WARPS + (threadIdx.x >> 5);
    float b[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; j++) b[j] = lane + 32 * j < E ? bias[lane + 32 * j] : 0.0f;
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): only the bias before this */
    grid_launch_dependents();
    if (t >= n) return; /* whole warps */
    float *s = logits + (size_t)t * E;
    float sg[SLOTS], sc[SLOTS];
    unsigned taken = 0; /* bit j: expert lane + 32 j chosen */
    bool has_nan = false;
#pragma unroll
    for (int j = 0; j < SLOTS; j++) {
        int e = lane + 32 * j;
        sg[j] = sc[j] = 0.0f;
        if (e < E) {
            float v = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-s[e])));
            s[e] = v;
            sg[j] = v;
            sc[j] = __fadd_rn(v, b[j]);
            has_nan |= sc[j] != sc[j];
        }
    }
    bool exact = __ballot_sync(0xffffffffu, has_nan) != 0;
    float sum = 0.0f, my_w[SLOTS]; /* lane l keeps the weights of picks l + 32 m */
    int my_i[SLOTS];
#pragma unroll
    for (int m = 0; m < SLOTS; m++) my_w[m] = 0.0f, my_i[m] = 0;
    for (int pick = 0; pick < k; pick++) {
        int bi;
        if (exact) {
            bi = route_pick_exact<SLOTS>(sc, taken, E);
        } else {
            unsigned key = 0;
            int mine = 0x7fffffff;
#pragma unroll
            for (int j = 0; j < SLOTS; j++) { /* increasing index: a tie keeps the first */
                int e = lane + 32 * j;
                unsigned kj = route_key(sc[j]);
                if (e < E && !(taken >> j & 1) && (mine == 0x7fffffff || kj > key)) key = kj, mine = e;
            }
            unsigned best = __reduce_max_sync(0xffffffffu, mine == 0x7fffffff ? 0u : key);
            bi = __reduce_min_sync(0xffffffffu, mine != 0x7fffffff && key == best ? mine : 0x7fffffff);
            if (bi == 0x7fffffff) bi = -1;
        }
        if (bi < 0) bi = 0; /* k <= E is a config invariant; stay in bounds (as k_moe_route) */
        float w = 0.0f;
#pragma unroll
        for (int j = 0; j < SLOTS; j++)
            if (j == bi >> 5) w = sg[j];
        w = __shfl_sync(0xffffffffu, w, bi & 31); /* s[bi], from the lane that wrote it */
        if (lane == (bi & 31)) taken |= 1u << (bi >> 5);
        sum = __fadd_rn(sum, w);
#pragma unroll
        for (int m = 0; m < SLOTS; m++)
            if (pick == lane + 32 * m) my_w[m] = w, my_i[m] = bi;
    }
#pragma unroll
    for (int m = 0; m < SLOTS; m++) {
        int pick = lane + 32 * m;
        if (pick < k) {
            float wj = my_w[m];
            if (norm) wj = __fdiv_rn(wj, __fadd_rn(sum, 1e-20f));
            idx[(size_t)t * k + pick] = my_i[m];
            wts[(size_t)t * k + pick] = __fmul_rn(wj, scaling);
        }
    }
}

static int route_reference; /* nt_cuda_route_reference */
extern "C" void nt_cuda_route_reference(int on) { route_reference = on; }

/* The warp kernel's slots for E experts (a power of two up to ROUTE_THREADS / 32); 0: the
 * block kernel's shape (expert groups, more experts, NT_ROUTE_WARP=0 or the tests' reference). */
static int route_warp_slots(const struct nt_moe_dims *d) {
    if (!NT_ROUTE_WARP || route_reference || d->n_group > 1 || d->E > ROUTE_THREADS) return 0;
    int slots = 1;
    while (32 * slots < d->E) slots *= 2;
    return slots;
}

void be_moe_route(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d, float *logits,
                  const float *score_bias, int32_t *idx, float *wts) {
    OP_START(be, OP_ROUTE, DIMS(d), U(logits), U(score_bias), U(idx), U(wts));
    PROFILE(be, "moe_route n=%d", p->n);
    int blocks = (p->n + RW_WARPS - 1) / RW_WARPS;
#define ROUTE_WARP(S)                                                                                                \
    NT_LAUNCH_EARLY(k_moe_route_warp<S>, blocks, RW_WARPS * 32, 0, p->n, d->E, d->k, d->norm_topk_prob,              \
                    d->routed_scaling_factor, logits, score_bias, idx, wts)
    switch (route_warp_slots(d)) {
    case 1: ROUTE_WARP(1); break;
    case 2: ROUTE_WARP(2); break;
    case 4: ROUTE_WARP(4); break;
    case 8: ROUTE_WARP(8); break;
    default:
        NT_LAUNCH_EARLY(k_moe_route, p->n, ROUTE_THREADS, 0, d->E, d->k, d->n_group, d->topk_group,
                        d->norm_topk_prob, d->routed_scaling_factor, logits, score_bias, idx, wts);
    }
#undef ROUTE_WARP
    LAUNCHED(be);
}

/* moe_experts' scratch, each part 256-byte aligned: per-(position, slot) outputs eo [n*k][L],
 * inner activations [n*k][mi] (entry order), the quantized activations of the up and down
 * products (entry order), then ints: count, start [E] each, the work items (moe_items), their
 * number, entries [n*k]. */
struct moe_layout {
    size_t eo, inner, qup, qdn, count, start, items, n_items, entries, total;
};

/* The most work items n positions can make with items of G entries: sum over experts of
 * ceil(count / G) <= n k / G + (experts with entries) <= n k / G + min(E, n k); G >= 1. */
static int moe_items(const struct nt_moe_dims *d, int n) {
    int nk = n * d->k;
    return nk + (d->E < nk ? d->E : nk) + 1;
}

static struct moe_layout moe_layout(const struct nt_moe_dims *d, int n) {
    struct moe_layout m;
    size_t nk = (size_t)n * d->k, at = 0;
#define PART(f, bytes) (m.f = at, at = round_up(at + (bytes), 256))
    PART(eo, nk * d->L * sizeof(float));
    PART(inner, nk * d->mi * sizeof(float));
    PART(qup, nk * pk_qx_stride(d->L));
    PART(qdn, nk * pk_qx_stride(d->mi));
    PART(count, (size_t)d->E * 4);
    PART(start, (size_t)d->E * 4);
    PART(items, (size_t)moe_items(d, n) * 4);
    PART(n_items, 4);
    PART(entries, nk * 4);
#undef PART
    m.total = at;
    return m;
}

size_t be_moe_scratch_floats(struct nt_backend *be, const struct nt_moe_dims *d, int n) {
    return (moe_layout(d, n).total + 255) / sizeof(float) + 64; /* + 256 bytes: base alignment */
}

/* Exclusive prefix sums over the block of two counts per thread (a, b), in thread order; every
 * thread gets its own offsets and the totals. Integers: exact in any order. */
__device__ inline void block_scan2(int a, int b, int *pa, int *pb, int *ta, int *tb) {
    __shared__ int wa[32], wb[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    int ia = a, ib = b; /* inclusive within the warp */
    for (int o = 1; o < 32; o <<= 1) {
        int xa = __shfl_up_sync(0xffffffffu, ia, o), xb = __shfl_up_sync(0xffffffffu, ib, o);
        if (lane >= o) ia += xa, ib += xb;
    }
    if (lane == 31) wa[warp] = ia, wb[warp] = ib;
    __syncthreads();
    if (warp == 0) {
        int va = lane < nw ? wa[lane] : 0, vb = lane < nw ? wb[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int xa = __shfl_up_sync(0xffffffffu, va, o), xb = __shfl_up_sync(0xffffffffu, vb, o);
            if (lane >= o) va += xa, vb += xb;
        }
        wa[lane] = va, wb[lane] = vb; /* inclusive over the warps */
    }
    __syncthreads();
    int ba = warp ? wa[warp - 1] : 0, bb = warp ? wb[warp - 1] : 0;
    *pa = ba + ia - a;
    *pb = bb + ib - b;
    *ta = wa[nw - 1];
    *tb = wb[nw - 1];
    __syncthreads(); /* wa, wb free again */
}

/* The per-expert entry lists in one block: counts (integer atomics: exact); their exclusive scan
 * and the work items of the grouped products, (expert, group of G of its entries) in
 * increasing order, packed e << 16 | g (each thread a contiguous run of experts, offsets from a
 * block scan); then entries[start[e] + rank] = ts in position order, one warp per expert with
 * ballots over idx in order. The lists depend only on idx, never on how the work is split.
 * Shared: 2 E ints. */
#define PLAN_THREADS 1024
__global__ void __launch_bounds__(PLAN_THREADS) k_moe_plan(int E, int nk, int G, const int32_t *idx, int32_t *count,
                                                           int32_t *start, int32_t *items, int32_t *n_items,
                                                           int32_t *entries) {
    NT_DYNAMIC_SHARED(int32_t, plan_sh);
    int32_t *cnt = plan_sh, *st = plan_sh + E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int ts = threadIdx.x; ts < nk; ts += blockDim.x) {
        int e = idx[ts];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    {
        int per = (E + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per, e1 = min(e0 + per, E);
        int my_entries = 0, my_items = 0;
        for (int e = e0; e < e1; e++) my_entries += cnt[e], my_items += (cnt[e] + G - 1) / G;
        int at, ni, total_entries, total_items;
        block_scan2(my_entries, my_items, &at, &ni, &total_entries, &total_items);
        for (int e = e0; e < e1; e++) {
            st[e] = at;
            at += cnt[e];
            for (int g = 0; g * G < cnt[e]; g++) items[ni++] = e << 16 | g;
        }
        if (threadIdx.x == 0) *n_items = total_items;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        count[e] = cnt[e];
        start[e] = st[e];
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int e = warp; e < E; e += nw) {
        if (!cnt[e]) continue;
        int c = 0;
        for (int ts0 = 0; ts0 < nk; ts0 += 32) {
            int ts = ts0 + lane;
            bool mine = ts < nk && idx[ts] == e;
            unsigned m = __ballot_sync(0xffffffffu, mine);
            if (mine) entries[st[e] + c + __popc(m & ((1u << lane) - 1))] = ts;
            c += __popc(m);
        }
    }
}

/* y[t][c] = sum over slots in slot order of wts * eo (the CPU's mul-then-add chain). */
__global__ void k_moe_combine(int n, int k, int L, const float *wts, const float *eo, float *y) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)n * L) return;
    int t = (int)(i / L), c = (int)(i % L);
    float acc = 0.0f;
    for (int s = 0; s < k; s++)
        acc = __fadd_rn(acc, __fmul_rn(wts[(size_t)t * k + s], eo[((size_t)t * k + s) * L + c]));
    y[i] = acc;
}

/* The device table of an expert array's data pointers, made on first use (moe_limits checked at
 * load that all experts share dtype and shape: the grouped kernels read one shape). NULL, with
 * the fault recorded, when the table cannot be made; NULL, with the rehearsal declined, when a
 * rehearsal needs a table no pass has made yet. */
static const uint8_t *const *expert_table(struct nt_backend *be, const struct nt_matrix *m, int E) {
    struct cuda_backend *b = cb(be);
    pthread_mutex_lock(&b->lock);
    for (struct expert_table *t = b->tables; t; t = t->next)
        if (t->key == m && t->first == m[0].data && t->E == E) {
            pthread_mutex_unlock(&b->lock);
            return t->dev;
        }
    if (pass_rehearsing()) { /* the table is made with an allocation and a wait: by a pass that runs */
        pthread_mutex_unlock(&b->lock);
        pass_decline();
        return NULL;
    }
    const uint8_t **host = (const uint8_t **)malloc((size_t)E * sizeof *host);
    struct expert_table *t = (struct expert_table *)calloc(1, sizeof *t);
    const uint8_t **dev = NULL;
    if (!host || !t) {
        cuda_fault(be, "moe_experts: out of host memory for the expert table");
    } else {
        for (int e = 0; e < E; e++) host[e] = (const uint8_t *)m[e].data;
        if (CK(be, cudaMalloc((void **)&dev, (size_t)E * sizeof *host)) &&
            CK(be, cudaMemcpyAsync(dev, host, (size_t)E * sizeof *host, cudaMemcpyHostToDevice, ST)) &&
            CK(be, cudaStreamSynchronize(ST))) { /* this thread's stream: see be_alloc */
            t->key = m;
            t->first = m[0].data;
            t->E = E;
            t->dev = dev;
            t->next = b->tables;
            b->tables = t;
            t = NULL; /* kept */
        } else if (dev) {
            cudaFree(dev);
        }
    }
    free(host);
    free(t);
    pthread_mutex_unlock(&b->lock);
    return FAULTED(be) ? NULL : dev;
}

/* One grouped product of moe_experts on the lists in `lists`: xmode 1: x row entries[gi] / k
 * (the position), 2: row gi; ymode 1: y row entries[gi], 0: row gi. */
static bool grouped_product(struct nt_backend *be, const struct pk_product *lists, const uint8_t *const *tab,
                            int dtype, int64_t rows, int64_t cols, int act, const float *x, int xmode, float *y,
                            int ymode, uint8_t *qx, int items) {
    struct pk_product a = *lists;
    a.Wtab = tab;
    a.dtype = dtype;
    a.rows = rows;
    a.cols = cols;
    a.act = act;
    a.x = x;
    a.x_stride = cols;
    a.xmode = xmode;
    a.y = y;
    a.y_stride = rows;
    a.ymode = ymode;
    a.qx = qx;
    return pk_run(be, &a, items);
}

void be_moe_experts(struct nt_backend *be, const struct nt_pass *p, const struct nt_moe_dims *d,
                    const struct nt_moe_weights *w, const float *x, const int32_t *idx, const float *wts,
                    float *scratch, float *y) {
    OP_START(be, OP_EXPERTS, DIMS(d), U(w->expert_up), U(w->expert_up[0].data), U(w->expert_down[0].data), U(x),
             U(idx), U(wts), U(scratch), U(y));
    PROFILE(be, "moe_experts %s n=%d", dtype_name(w->expert_up[0].dtype), p->n);
    int n = p->n, k = d->k, E = d->E, L = d->L, mi = d->mi, nk = n * k;
    const struct nt_matrix *up = w->expert_up, *dn = w->expert_down;
    const uint8_t *const *tup = expert_table(be, up, E), *const *tdn = tup ? expert_table(be, dn, E) : NULL;
    if (!tdn) return;
    uint8_t *base = (uint8_t *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255);
    struct moe_layout ml = moe_layout(d, n);
    float *eo = (float *)(base + ml.eo), *inner = (float *)(base + ml.inner);
    if (n == 1 && dc_fits_experts(d, up, dn)) { /* decode: its k experts, no lists (decode.cu) */
        dc_experts(be, d, tup, tdn, up[0].dtype, dn[0].dtype, x, idx, wts, inner, y, base + ml.qup, base + ml.qdn);
        return;
    }
    struct pk_product lists;
    memset(&lists, 0, sizeof lists);
    lists.grouped = 1;
    lists.k = k;
    lists.n = nk;
    lists.idx = idx;
    lists.count = (const int32_t *)(base + ml.count);
    lists.start = (const int32_t *)(base + ml.start);
    lists.items = (const int32_t *)(base + ml.items);
    lists.n_items = (const int32_t *)(base + ml.n_items);
    lists.entries = (const int32_t *)(base + ml.entries);
    lists.group = pk_group_grouped(up[0].dtype, dn[0].dtype, n, k, E);

    /* the entry lists, on the device (E <= NT_MAX_EXPERTS: 32 KB of shared memory at most) */
    NT_LAUNCH_SMEM(k_moe_plan, 1, PLAN_THREADS, 2 * (size_t)E * sizeof(int32_t), E, nk, lists.group, idx,
                   (int32_t *)lists.count, (int32_t *)lists.start, (int32_t *)lists.items, (int32_t *)lists.n_items,
                   (int32_t *)lists.entries);
    if (!LAUNCHED(be)) return;

    /* up: x gathered by position -> inner[gi], relu^2; down: inner[gi] -> eo[entries[gi]] */
    int items = nk / lists.group + (E < nk ? E : nk) + 1;
    if (!grouped_product(be, &lists, tup, up[0].dtype, mi, L, NT_ACT_RELU2, x, 1, inner, 0, base + ml.qup, items) ||
        !grouped_product(be, &lists, tdn, dn[0].dtype, L, mi, NT_ACT_NONE, inner, 2, eo, 1, base + ml.qdn, items))
        return;

    size_t tot = (size_t)n * L;
    NT_LAUNCH(k_moe_combine, (unsigned)((tot + ELEM_THREADS - 1) / ELEM_THREADS), ELEM_THREADS, n, k, L, wts, eo, y);
    LAUNCHED(be);
}
void moe_limits(const struct nt_moe_dims *d, const struct nt_moe_weights *w, char *why, size_t cap) {
    why[0] = 0;
    if (d->E < 1 || d->E > NT_MAX_EXPERTS || d->k < 1 || d->k > d->E) {
        snprintf(why, cap, "n_routed_experts %d, num_experts_per_tok %d: the CUDA router holds 1 <= k <= E <= %d",
                 d->E, d->k, NT_MAX_EXPERTS);
        return;
    }
    if (d->n_group > 1 && (d->n_group > NT_MAX_EXPERTS / 2 || d->E % d->n_group)) {
        snprintf(why, cap, "n_group %d: the CUDA router holds groups that divide the %d experts, at most %d", d->n_group,
                 d->E, NT_MAX_EXPERTS / 2);
        return;
    }
    const struct nt_matrix *up = w->expert_up, *dn = w->expert_down;
    for (int e = 0; e < d->E; e++) {
        const struct nt_matrix *m[2] = {&up[e], &dn[e]};
        for (int j = 0; j < 2; j++) {
            const struct nt_matrix *first = j ? &dn[0] : &up[0];
            int64_t rows = j ? d->L : d->mi, cols = j ? d->mi : d->L;
            if (m[j]->dtype != first->dtype || m[j]->rows != rows || m[j]->cols != cols) {
                snprintf(why, cap, "%s: the CUDA experts need every expert's %s projection %lldx%lld in one dtype",
                         m[j]->name, j ? "down" : "up", (long long)rows, (long long)cols);
                return;
            }
            product_limits(m[j], why, cap);
            if (why[0]) return;
        }
    }
}
