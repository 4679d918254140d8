/* attention.cu - the CUDA backend's attention: the pass's K and V rows appended to the caches,
 * then causal GQA for each position over its own context, as a fold over tiles of 32 keys
 * (the same bits for a position in any pass). attention_limits says which shapes the kernels
 * hold; be_attention_scratch_floats what the parallel path needs.
 *
 * THE ARITHMETIC, per position t and query head h (ctx = pos0 + t + 1 keys). The context is cut
 * into tiles of ATT_TILE keys at absolute positions (tile j: keys 32 j .. 32 j + 31). A tile's
 * partial: each key's score s_u = scale x (the fma chain over the head's dims in order), its
 * maximum m_j (keys past ctx count as -inf), p_u = exp(s_u - m_j), l_j = their sum (a fixed
 * butterfly over the 32 keys), o_j = sum_u p_u v_u (an fma chain over the keys in order). The
 * tiles are folded in order into (m, l, o), starting from (-inf, 0, 0): m' = max(m, m_j),
 * l = l e^(m - m') + l_j e^(m_j - m'), o likewise; the output is o / l. Who computes a tile and
 * where the fold runs change nothing: both depend on the key positions alone (DESIGN.md's one
 * arithmetic per position). Against the CPU's single online-softmax chain the sums are grouped
 * otherwise (last bits; TOL_ATTN in tests/gpu/test_ops.c).
 *
 * TWO PATHS, the same bits (gpu_test_ops compares them). A pass of few positions (decoding, a
 * verify pass) has too few (position, kv head) pairs to fill the GPU, so its tiles are computed
 * in parallel (k_attention_tiles: a persistent grid over (position, kv head, head group, tile)),
 * their partials written to the state's attention scratch, and k_attention_fold folds each
 * head's tiles in order. A long pass has parallelism in its positions: k_attention_seq gives each
 * (position, kv head, head group) one block that walks its tiles and folds as it goes, with no
 * scratch. The parallel path is taken when the scratch holds the pass's partials
 * (be_attention_scratch_floats: up to ATT_PAR_MAX_N positions, within ATT_SCRATCH_BYTES).
 *
 * THE WORK OF A TILE. A block holds one kv head's tile of K and V (32 keys, padded rows: lane u
 * reads key u's row as float4s without bank conflicts) and up to ATT_ROWS query heads of one
 * position; each of its ATT_WARPS warps takes ATT_ROWS_W heads. Scores: lane = key, the head's q
 * broadcast from shared memory. Weighted sum: lane = 4 dims, p_u from lane u by shuffle.
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

#define ATT_TILE 32 /* keys a tile: one a lane */
#define ATT_ROWS_W 4 /* query heads a warp */
#define ATT_WARPS 4
#define ATT_ROWS (ATT_WARPS * ATT_ROWS_W) /* query heads a block: Nano's 16 per kv head */
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_MAX_DH 128 /* 4 dims a lane */
/* blocks an SM the registers must allow: the shared memory (42 KB a block) allows 5, and at 99
 * registers the allocation (8 a thread at a time) would hold only 4 */
#define ATT_MIN_BLOCKS 5
/* Row stride of the shared K, V and q rows, in floats: the head's dims rounded up to 8, plus 4,
 * so that the 8 lanes of a quarter warp reading float4s of 8 keys' rows hit 8 different 16-byte
 * bank groups (stride = 4 mod 8 floats). */
#define ATT_MAX_STRIDE (ATT_MAX_DH + 4)
__host__ __device__ static inline int att_stride(int dh) { return (dh + 7) / 8 * 8 + 4; }
__host__ __device__ static inline int att_tiles(int ctx) { return (ctx + ATT_TILE - 1) / ATT_TILE; }
#ifndef ATT_PAR_MAX_N
#define ATT_PAR_MAX_N 16 /* the most positions the parallel path takes */
#endif
#define ATT_SCRATCH_BYTES ((size_t)64 << 20) /* past one position's partials, what the scratch may take */

struct att_args {
    const struct pass_meta *meta;
    const float *q, *kc, *vc;
    float *out;
    float *part_o;  /* parallel path: [n][nq][tiles_max][dh], each tile's o */
    float *part_ml; /* [n][nq][tiles_max][2]: its m and l */
    int nq, nkv, dh, n, hgroups, tiles_max;
    float scale;
};

/* The shared rows of a block: one tile of K and V, and the q rows of its heads. */
struct att_shared {
    float k[ATT_TILE][ATT_MAX_STRIDE];
    float v[ATT_TILE][ATT_MAX_STRIDE];
    float q[ATT_ROWS][ATT_MAX_STRIDE];
};

/* The block's heads: kv head kvh, head group hg (ATT_ROWS heads from h0; `rows` of them exist). */
struct att_heads {
    int kvh, h0, rows;
};
__device__ __forceinline__ struct att_heads att_heads_of(const struct att_args &a, int kvh, int hg) {
    int rep = a.nq / a.nkv;
    struct att_heads g = {kvh, kvh * rep + hg * ATT_ROWS, min(ATT_ROWS, rep - hg * ATT_ROWS)};
    return g;
}

/* Copies position t's q rows of the block's heads (zeros past dh and past the heads). */
__device__ void att_load_q(const struct att_args &a, struct att_shared &sh, const struct att_heads &g, int t) {
    int S = att_stride(a.dh);
    const float *q = a.q + ((size_t)t * a.nq + g.h0) * a.dh;
    if (a.dh % 4 == 0) { /* whole float4s: the rows are 16-byte aligned */
        int c4 = S / 4;
        for (int i = threadIdx.x; i < ATT_ROWS * c4; i += ATT_THREADS) {
            int r = i / c4, c = 4 * (i % c4);
            *(float4 *)&sh.q[r][c] = r < g.rows && c < a.dh ? *(const float4 *)(q + (size_t)r * a.dh + c)
                                                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
        for (int i = threadIdx.x; i < ATT_ROWS * S; i += ATT_THREADS) {
            int r = i / S, c = i % S;
            sh.q[r][c] = r < g.rows && c < a.dh ? q[(size_t)r * a.dh + c] : 0.0f;
        }
    }
}

/* Copies tile j of kv head kvh (keys past ctx, and dims past dh, as zeros: they are never read
 * from the caches, whose rows past the context may hold anything). The caller's barrier makes
 * the rows visible to the block (each thread has waited for its own copies). */
__device__ void att_load_tile(const struct att_args &a, struct att_shared &sh, int kvh, int j, int ctx) {
    int S = att_stride(a.dh), kvw = a.nkv * a.dh;
    if (a.dh % 4 == 0) { /* whole float4s: the rows are 16-byte aligned */
        int c4 = S / 4;
        for (int i = threadIdx.x; i < ATT_TILE * c4; i += ATT_THREADS) {
            int r = i / c4, c = 4 * (i % c4), u = j * ATT_TILE + r;
            if (u < ctx && c < a.dh) {
                size_t at = (size_t)u * kvw + (size_t)kvh * a.dh + c;
                cp_async16(&sh.k[r][c], a.kc + at);
                cp_async16(&sh.v[r][c], a.vc + at);
            } else {
                *(float4 *)&sh.k[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                *(float4 *)&sh.v[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        /* (cp.async: a thread's ~16 copies all in flight at once; loads into registers, each
         * stored before the next was asked for, waited out the trip from L2 once a copy) */
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        for (int i = threadIdx.x; i < ATT_TILE * S; i += ATT_THREADS) {
            int r = i / S, c = i % S, u = j * ATT_TILE + r;
            size_t at = (size_t)u * kvw + (size_t)kvh * a.dh + c;
            bool in = u < ctx && c < a.dh;
            sh.k[r][c] = in ? a.kc[at] : 0.0f;
            sh.v[r][c] = in ? a.vc[at] : 0.0f;
        }
    }
}

/* A tile's partial for the warp's heads (row r of the warp: head w * ATT_ROWS_W + r of the
 * block): m and l (every lane holds them) and o for the lane's dims 4 lane .. 4 lane + 3. */
struct att_part {
    float m[ATT_ROWS_W], l[ATT_ROWS_W], o[ATT_ROWS_W][4];
};

/* DH: the head's dims when the kernel is built for them (the score loop unrolled), 0 for any.
 * STRETCH: a whole tile's weighted sum as one unrolled stretch (below). It pays in the long passes'
 * k_attention_seq (ctx 2048 n = 512: 940 -> 831 us, docs/PERF.md session 20); in the one-position
 * pass's k_attention_tiles it measured +3 - 4 % (ctx 16384 n = 1, sessions 19 and 20), so that
 * kernel keeps the loop over the valid keys. */
template <int DH, bool STRETCH>
__device__ void att_tile(const struct att_args &a, const struct att_shared &sh, int j, int ctx, struct att_part &t) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, dh4 = DH ? DH : (a.dh + 3) & ~3;
    int valid = min(ATT_TILE, ctx - j * ATT_TILE); /* keys of the tile in the context (>= 1) */
    float s[ATT_ROWS_W];
#pragma unroll
    for (int r = 0; r < ATT_ROWS_W; r++) s[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < dh4; d += 4) { /* zeros past dh add nothing: s is never -0 */
        float4 k4 = *(const float4 *)&sh.k[lane][d];
#pragma unroll
        for (int r = 0; r < ATT_ROWS_W; r++) {
            float4 q4 = *(const float4 *)&sh.q[w * ATT_ROWS_W + r][d];
            s[r] = __fmaf_rn(q4.x, k4.x, s[r]);
            s[r] = __fmaf_rn(q4.y, k4.y, s[r]);
            s[r] = __fmaf_rn(q4.z, k4.z, s[r]);
            s[r] = __fmaf_rn(q4.w, k4.w, s[r]);
        }
    }
    float p[ATT_ROWS_W];
#pragma unroll
    for (int r = 0; r < ATT_ROWS_W; r++) {
        float sc = lane < valid ? __fmul_rn(s[r], a.scale) : -INFINITY;
        t.m[r] = warp_max(sc);
        p[r] = expf(__fsub_rn(sc, t.m[r])); /* 0 past the context */
        t.l[r] = warp_sum(p[r]);
#pragma unroll
        for (int i = 0; i < 4; i++) t.o[r][i] = 0.0f;
    }
    bool mine = 4 * lane < a.dh; /* lanes past the head's dims hold nothing */
    auto key = [&](int u) { /* key u's term of the o chains */
        float4 v4 = mine ? *(const float4 *)&sh.v[u][4 * lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < ATT_ROWS_W; r++) {
            float pu = __shfl_sync(0xffffffffu, p[r], u);
            t.o[r][0] = __fmaf_rn(pu, v4.x, t.o[r][0]);
            t.o[r][1] = __fmaf_rn(pu, v4.y, t.o[r][1]);
            t.o[r][2] = __fmaf_rn(pu, v4.z, t.o[r][2]);
            t.o[r][3] = __fmaf_rn(pu, v4.w, t.o[r][3]);
        }
    };
    if (STRETCH && valid == ATT_TILE) {
        /* a whole tile (all but a position's last): the 32 keys as one stretch without a branch,
         * so key u + 1's load and shuffles issue while key u's fma wait (a warp issues in order) */
#pragma unroll
        for (int u = 0; u < ATT_TILE; u++) key(u);
    } else {
        for (int u = 0; u < valid; u++) key(u); /* keys past the context would add p = 0 times 0 */
    }
}

/* One step of the fold: (m, l, o) and a tile's (mt, lt, ot). From (-inf, 0, 0) the first step
 * gives the tile's own values exactly (e^-inf = 0, e^0 = 1). */
__device__ __forceinline__ void att_fold(float &m, float &l, float *o, float mt, float lt, const float *ot) {
    float mn = fmaxf(m, mt);
    float e = expf(__fsub_rn(m, mn)), et = expf(__fsub_rn(mt, mn));
    l = __fadd_rn(__fmul_rn(l, e), __fmul_rn(lt, et));
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = __fadd_rn(__fmul_rn(o[i], e), __fmul_rn(ot[i], et));
    m = mn;
}

/* out's dims 4 lane .. of head h at position t: o / l. */
__device__ __forceinline__ void att_store(const struct att_args &a, int t, int h, float l, const float *o) {
    int lane = threadIdx.x & 31;
    float *y = a.out + ((size_t)t * a.nq + h) * a.dh;
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (4 * lane + i < a.dh) y[4 * lane + i] = __fdiv_rn(o[i], l);
}

/* A long pass: block (head group, kv head, position) walks the position's tiles, folding. */
template <int DH> __global__ void __launch_bounds__(ATT_THREADS, ATT_MIN_BLOCKS) k_attention_seq(struct att_args a) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ struct att_shared sh;
    int t = blockIdx.z, ctx = a.meta->pos0 + t + 1, w = threadIdx.x >> 5;
    struct att_heads g = att_heads_of(a, blockIdx.y, blockIdx.x);
    att_load_q(a, sh, g, t);
    float m[ATT_ROWS_W], l[ATT_ROWS_W], o[ATT_ROWS_W][4];
#pragma unroll
    for (int r = 0; r < ATT_ROWS_W; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) o[r][i] = 0.0f;
    }
    struct att_part tp;
    for (int j = 0; j < att_tiles(ctx); j++) {
        __syncthreads(); /* the last tile's rows are read */
        att_load_tile(a, sh, g.kvh, j, ctx);
        __syncthreads();
        att_tile<DH, true>(a, sh, j, ctx, tp);
#pragma unroll
        for (int r = 0; r < ATT_ROWS_W; r++) att_fold(m[r], l[r], o[r], tp.m[r], tp.l[r], tp.o[r]);
    }
#pragma unroll
    for (int r = 0; r < ATT_ROWS_W; r++)
        if (w * ATT_ROWS_W + r < g.rows) att_store(a, t, g.h0 + w * ATT_ROWS_W + r, l[r], o[r]);
}

/* A short pass, part 1: a persistent grid over (position, kv head, head group, tile), tile
 * fastest; each item's partials into the scratch. Tiles past a position's context are skipped. */
template <int DH> __global__ void __launch_bounds__(ATT_THREADS, ATT_MIN_BLOCKS) k_attention_tiles(struct att_args a) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    __shared__ struct att_shared sh;
    int pos0 = a.meta->pos0, T = att_tiles(pos0 + a.n), lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int items = a.n * a.nkv * a.hgroups * T;
    struct att_part tp;
    for (int it = blockIdx.x; it < items; it += gridDim.x) {
        int j = it % T, rest = it / T, hg = rest % a.hgroups, kvh = rest / a.hgroups % a.nkv,
            t = rest / a.hgroups / a.nkv, ctx = pos0 + t + 1;
        if (j >= att_tiles(ctx)) continue; /* the same for the whole block */
        struct att_heads g = att_heads_of(a, kvh, hg);
        __syncthreads(); /* the last item's rows are read */
        att_load_q(a, sh, g, t);
        att_load_tile(a, sh, kvh, j, ctx);
        __syncthreads();
        att_tile<DH, false>(a, sh, j, ctx, tp);
#pragma unroll
        for (int r = 0; r < ATT_ROWS_W; r++) {
            int h = g.h0 + w * ATT_ROWS_W + r;
            if (w * ATT_ROWS_W + r >= g.rows) continue;
            size_t at = ((size_t)t * a.nq + h) * a.tiles_max + j;
            if (lane == 0) {
                a.part_ml[2 * at] = tp.m[r];
                a.part_ml[2 * at + 1] = tp.l[r];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (4 * lane + i < a.dh) a.part_o[at * a.dh + 4 * lane + i] = tp.o[r][i];
        }
    }
}

/* A short pass, part 2: a warp per (position, head) folds its tiles' partials in order. */
__global__ void __launch_bounds__(ATT_THREADS) k_attention_fold(struct att_args a) {
    grid_wait(); /* launched early (NT_LAUNCH_EARLY): nothing before this */
    grid_launch_dependents();
    int lane = threadIdx.x & 31, row = blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (row >= a.n * a.nq) return;
    int t = row / a.nq, h = row % a.nq, ctx = a.meta->pos0 + t + 1;
    float m = -INFINITY, l = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t at = (size_t)row * a.tiles_max;
    for (int j = 0; j < att_tiles(ctx); j++) {
        float ot[4];
#pragma unroll
        for (int i = 0; i < 4; i++) ot[i] = 4 * lane + i < a.dh ? a.part_o[(at + j) * a.dh + 4 * lane + i] : 0.0f;
        att_fold(m, l, o, a.part_ml[2 * (at + j)], a.part_ml[2 * (at + j) + 1], ot);
    }
    att_store(a, t, h, l, o);
}

/* The parallel path's partials of one position, in floats. */
static size_t att_partial_floats(const struct nt_attn_dims *d) {
    return (size_t)d->nq * (size_t)att_tiles(d->n_ctx) * (size_t)(d->dh + 2);
}

size_t be_attention_scratch_floats(struct nt_backend *be, const struct nt_attn_dims *d) {
    (void)be;
    size_t one = att_partial_floats(d);
    if (!one) return 0; /* no rows in the caches: nothing to attend to */
    size_t fit = ATT_SCRATCH_BYTES / sizeof(float) / one;
    return one * (fit < 1 ? 1 : fit > ATT_PAR_MAX_N ? ATT_PAR_MAX_N : fit);
}

void be_attention(struct nt_backend *be, const struct nt_pass *p, const struct nt_attn_dims *d, const float *q,
                  const float *k, const float *v, float *k_cache, float *v_cache, float *scratch, float *out) {
    /* runs on every pass, replayed ones too: the kernels trust pos0 (session.c checks it first) */
    if (p->pos0 < 0 || p->pos0 + p->n > d->n_ctx)
        return cuda_fault(be, "attention: positions %d..%d run past the cache of %d", p->pos0, p->pos0 + p->n - 1,
                          d->n_ctx);
    OP_START(be, OP_ATTENTION, DIMS(d), U(q), U(k), U(v), U(k_cache), U(v_cache), U(scratch), U(out));
    PROFILE(be, "attention n=%d", p->n);
    size_t kvw = (size_t)d->nkv * d->dh;
    size_t rows = (size_t)p->n * kvw;
    NT_LAUNCH_EARLY(k_kv_append, (unsigned)((rows + ELEM_THREADS - 1) / ELEM_THREADS), ELEM_THREADS, 0, meta_of(p), rows, kvw,
              k, v, k_cache, v_cache);
    if (!LAUNCHED(be)) return;
    struct att_args a;
    memset(&a, 0, sizeof a);
    a.meta = meta_of(p);
    a.q = q;
    a.kc = k_cache;
    a.vc = v_cache;
    a.out = out;
    a.nq = d->nq;
    a.nkv = d->nkv;
    a.dh = d->dh;
    a.n = p->n;
    a.hgroups = (d->nq / d->nkv + ATT_ROWS - 1) / ATT_ROWS;
    a.tiles_max = att_tiles(d->n_ctx);
    a.scale = 1.0f / sqrtf((float)d->dh); /* correctly rounded on the host as on the device */
    /* Nano's head of 128 dims gets the score loop unrolled; any other runs the general instance */
    void (*tiles)(struct att_args) = d->dh == 128 ? k_attention_tiles<128> : k_attention_tiles<0>;
    void (*seq)(struct att_args) = d->dh == 128 ? k_attention_seq<128> : k_attention_seq<0>;
    size_t one = att_partial_floats(d);
    if (scratch && (size_t)p->n * one <= be_attention_scratch_floats(be, d)) {
        a.part_o = scratch;
        a.part_ml = scratch + (size_t)p->n * d->nq * a.tiles_max * d->dh;
        /* the most items a pass of this kind can have: its last position's context is at most n_ctx */
        int grid = 0;
        if (!resident_grid(be, tiles, "k_attention_tiles", ATT_THREADS, 0,
                           (size_t)p->n * d->nkv * a.hgroups * a.tiles_max, &grid))
            return;
        NT_LAUNCH_EARLY(tiles, (unsigned)grid, ATT_THREADS, 0, a);
        if (!LAUNCHED(be)) return;
        NT_LAUNCH_EARLY(k_attention_fold, (unsigned)(((size_t)p->n * d->nq + ATT_WARPS - 1) / ATT_WARPS), ATT_THREADS, 0, a);
    } else {
        NT_LAUNCH_EARLY(seq, dim3(a.hgroups, d->nkv, p->n), ATT_THREADS, 0, a);
    }
    LAUNCHED(be);
}

void attention_limits(int nq, int nkv, int dh, char *why, size_t cap) {
    if (dh < 1 || dh > ATT_MAX_DH)
        snprintf(why, cap, "head_dim %d: the CUDA attention holds 1 to %d", dh, ATT_MAX_DH);
    else if (nkv < 1 || nq % nkv)
        snprintf(why, cap, "num_key_value_heads %d must divide num_attention_heads %d", nkv, nq);
    else
        why[0] = 0;
}
