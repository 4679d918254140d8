/* ops_simd_body.h - attention's weighted sum, the Mamba conv and the selective scan of ops_simd.c,
 * written once and compiled once per vector width: ops_simd.c includes this file for 256-bit
 * (AVX2) and 512-bit (AVX-512) vectors. The two copies differ only in the vector type and its
 * intrinsics, so this text keeps a single statement of each chain of operations; ops_simd.c's
 * header says why the chains give the scalar reference's bits at every width.
 *
 * The includer defines:
 *   VT            the target attribute of every function here;
 *   VN(name)      name with the width's suffix (both widths live in one file);
 *   VF, VW        the float vector type and its lane count;
 *   VZERO()       a vector of zeros; VSET1(x) x in every lane;
 *   VLOAD(p), VLOADU(p), VSTORE(p, a), VSTOREU(p, a)
 *                 aligned and unaligned loads and stores of VW floats;
 *   VADD(a, b), VMUL(a, b), VDIV(a, b)
 *                 the lane-wise operations, each one rounding.
 * and, before the first inclusion, INLINE, ATT_BLOCK, scores_block and softmax_block (attention's
 * scores and softmax are the 256-bit ones at every width: the reference's 8-lane dot products).
 * The names above are undefined again at the end of this file.
 */

/* ---- attention ---- */

/* One query row over keys 0 .. ctx-1 (k, v: the cache's rows of its KV head, `stride` floats
 * apart), out = softmax(q.k * scale) v, the reference's online softmax (backend_cpu.c's
 * attention): the scores and their softmax a block of keys at a time, then the weighted sum VW
 * dims a step. DH > 0 is dh known at compile time (the weighted sum then stays in registers);
 * 0 reads dh. */
static VT INLINE void VN(attn_row_dh)(const float *q, const float *k, const float *v, size_t stride, int ctx,
                                      int dh_run, float scale, float *out, const int DH) {
    const int dh = DH ? DH : dh_run, dv = dh & ~(VW - 1);
    float o[NT_MAX_HEAD_DIM] __attribute__((aligned(sizeof(VF))));
    float s[ATT_BLOCK], e[ATT_BLOCK], corr[ATT_BLOCK], m = -INFINITY, l = 0.0f;
    unsigned char flag[ATT_BLOCK];
    for (int i = 0; i < dh; i++) o[i] = 0.0f;
    for (int u0 = 0; u0 < ctx; u0 += ATT_BLOCK) {
        int nb = ctx - u0 < ATT_BLOCK ? ctx - u0 : ATT_BLOCK;
        scores_block(q, k, stride, u0, nb, dh, scale, s);
        softmax_block(s, nb, &m, &l, e, corr, flag);
        for (int b = 0; b < nb; b++) {
            const float *vu = v + (size_t)(u0 + b) * stride;
            /* o = o * corr (where the max rose), then o = o + e * v, per dim */
            VF ev = VSET1(e[b]), cv = VSET1(corr[b]);
            for (int i = 0; i < dv; i += VW) {
                VF ov = VLOAD(o + i);
                if (flag[b]) ov = VMUL(ov, cv);
                VSTORE(o + i, VADD(ov, VMUL(ev, VLOADU(vu + i))));
            }
            for (int i = dv; i < dh; i++) {
                if (flag[b]) o[i] *= corr[b];
                o[i] += e[b] * vu[i];
            }
        }
    }
    VF lv = VSET1(l);
    for (int i = 0; i < dv; i += VW) VSTOREU(out + i, VDIV(VLOAD(o + i), lv));
    for (int i = dv; i < dh; i++) out[i] = o[i] / l;
}

static VT void VN(attn_row)(const float *q, const float *k, const float *v, size_t stride, int ctx, int dh,
                            float scale, float *out) {
    switch (dh) { /* the head dims of the family's checkpoints and of the demo */
    case 64: VN(attn_row_dh)(q, k, v, stride, ctx, dh, scale, out, 64); break;
    case 128: VN(attn_row_dh)(q, k, v, stride, ctx, dh, scale, out, 128); break;
    default: VN(attn_row_dh)(q, k, v, stride, ctx, dh, scale, out, 0); break;
    }
}

/* ---- the Mamba conv ---- */

/* The reference's silu, x / (1 + expf(-x)), of the VW lanes of a: libm's expf lane by lane, the
 * add and the divide on the vector (both correctly rounded, so the scalar's bits). */
static VT INLINE VF VN(silu)(VF a) {
    float x[VW] __attribute__((aligned(sizeof(VF)))), ex[VW] __attribute__((aligned(sizeof(VF))));
    VSTORE(x, a);
    for (int j = 0; j < VW; j++) ex[j] = expf(-x[j]);
    return VDIV(a, VADD(VSET1(1.0f), VLOAD(ex)));
}

/* Channels c .. c+VW-1 of the conv over the pass (backend_cpu.c's mamba_conv, one lane a
 * channel): u = b + sum_k w[k] x[t-K+1+k] in k order, out = silu(u); the ring holds the last K-1
 * inputs. KC > 0 is the kernel width known at compile time (the ring then stays in registers). */
static VT INLINE void VN(conv_k)(const struct nt_cpu_conv *a, int c, const int KC) {
    const int K = KC ? KC : a->K, CD = a->CD;
    VF wk[NT_MAX_CONV_KERNEL], r[NT_MAX_CONV_KERNEL];
    for (int k = 0; k < K; k++) {
        float wl[VW];
        for (int j = 0; j < VW; j++) wl[j] = a->w[(size_t)(c + j) * K + k];
        wk[k] = VLOADU(wl);
    }
    VF b = a->b ? VLOADU(a->b + c) : VZERO();
    for (int k = 0; k < K - 1; k++) r[k] = VLOADU(a->ring + (size_t)k * CD + c);
    for (int t = 0; t < a->n; t++) {
        if (a->snap)
            for (int k = 0; k < K - 1; k++) VSTOREU(a->snap + ((size_t)t * (K - 1) + k) * CD + c, r[k]);
        VF in = VLOADU(a->in + (size_t)t * a->in_stride + c);
        VF acc = b;
        for (int k = 0; k < K - 1; k++) acc = VADD(acc, VMUL(wk[k], r[k]));
        acc = VADD(acc, VMUL(wk[K - 1], in));
        for (int k = 0; k + 1 < K - 1; k++) r[k] = r[k + 1];
        if (K > 1) r[K - 2] = in;
        VSTOREU(a->out + (size_t)t * CD + c, VN(silu)(acc));
    }
    for (int k = 0; k < K - 1; k++) VSTOREU(a->ring + (size_t)k * CD + c, r[k]);
}

static VT void VN(conv)(const struct nt_cpu_conv *a, int c) {
    if (a->K == 4) VN(conv_k)(a, c, 4); /* every Nemotron-H's conv_kernel */
    else VN(conv_k)(a, c, 0);
}

/* ---- the selective scan ---- */

/* One head's step of the scan at one position (backend_cpu.c's mamba_scan, one lane a head dim
 * q): for n in order, S[n][q] = dA S[n][q] + (dt B[n]) x[q] and acc[q] += S[n][q] C[n]; then
 * y[q] = acc[q] + D x[q]. P is a multiple of VW. PC > 0 is P known at compile time (acc and x
 * stay in registers). */
static VT INLINE void VN(scan_p)(float *S, const float *x, const float *B, const float *C, int N, int P_run,
                                 float dt, float dA, float D, float *y, const int PC) {
    const int P = PC ? PC : P_run;
    VF acc[NT_MAX_HEAD_DIM / VW], xv[NT_MAX_HEAD_DIM / VW];
    VF dAv = VSET1(dA);
    for (int j = 0; j < P / VW; j++) acc[j] = VZERO(), xv[j] = VLOADU(x + VW * j);
    for (int n = 0; n < N; n++) {
        float *Sn = S + (size_t)n * P;
        VF dtB = VSET1(dt * B[n]), Cn = VSET1(C[n]);
        for (int j = 0; j < P / VW; j++) {
            VF sv = VADD(VMUL(dAv, VLOADU(Sn + VW * j)), VMUL(dtB, xv[j]));
            VSTOREU(Sn + VW * j, sv);
            acc[j] = VADD(acc[j], VMUL(sv, Cn));
        }
    }
    VF Dv = VSET1(D);
    for (int j = 0; j < P / VW; j++) VSTOREU(y + VW * j, VADD(acc[j], VMUL(Dv, xv[j])));
}

static VT void VN(scan)(float *S, const float *x, const float *B, const float *C, int N, int P, float dt,
                        float dA, float D, float *y) {
    switch (P) { /* mamba_head_dim: the demo's, and the family's checkpoints' */
    case 32: VN(scan_p)(S, x, B, C, N, P, dt, dA, D, y, 32); break;
    case 64: VN(scan_p)(S, x, B, C, N, P, dt, dA, D, y, 64); break;
    default: VN(scan_p)(S, x, B, C, N, P, dt, dA, D, y, 0); break;
    }
}

#undef VT
#undef VN
#undef VF
#undef VW
#undef VZERO
#undef VSET1
#undef VLOAD
#undef VLOADU
#undef VSTORE
#undef VSTOREU
#undef VADD
#undef VMUL
#undef VDIV
