/* test_verify.c - verify passes and accept, session snapshots and embeddings input, on every
 * fixture model and the demo model, on every backend this build runs: the CPU, and CUDA where the
 * library holds it (the host emulation's build under `make test`, a GPU under tests/gpu/run.sh).
 *
 * For each model and backend, with a prompt of P tokens and n = 4 drafted tokens, checks that
 *   - verify + accept(m), for every m = 0..n, leaves the session bit for bit as eval of the prompt
 *     then eval of the first m drafts does: the position, every Mamba layer's conv ring and SSM
 *     state, every attention layer's KV rows below the position, the last logits and argmax; and
 *     that both then compute the same logits (bits) for two more tokens;
 *   - verify's argmax of every position is the argmax of that position's logits from eval;
 *   - the embeddings of the tokens (nemotron_model_token_embedding) given to eval_embd give the
 *     tokens' logits and state bit for bit, alone and mixed with tokens in one timeline;
 *   - a snapshot restored into its own session after it moved on, and into a second session,
 *     makes both compute what the session computed from the snapshot's position (bits).
 * Two sessions on two threads at once (a server's slots): one runs passes of new kinds (each
 * captured as a pass program on CUDA) while the other takes, restores and frees snapshots; every
 * call succeeds and the passes give the logits they give alone (bits).
 * Then, on the CPU, the errors: accept without a verify, twice, or with a bad m; a verify past
 * verify_max or in a session without verify; verify_max past pass_max; a snapshot of another
 * model or past the context; non-finite embeddings; NULL handles - each a status with a
 * message, the session unchanged.
 * The comparisons read the session's state through src/engine (the test sees the internals).
 */
#include "engine/engine.h"
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

enum { P = 3, NDRAFT = 4, NMORE = 2, NTOK = P + NDRAFT + NMORE };

struct model_case {
    const char *name, *dir;
};
static const struct model_case cases[] = {
    {"dense-f16", FIXTURES "/dense-f16"},
    {"hybrid-group-f32", FIXTURES "/hybrid-group-f32"},
    {"latent-mtp-f32", FIXTURES "/latent-mtp-f32"},
    {"tied-bf16", FIXTURES "/tied-bf16"},
    {"demo", "models/nemotron-h-kjv"},
};

/* The fixture's own token ids (ids.i32) where it has enough, else a spread over the vocabulary. */
static void pick_tokens(const char *dir, int V, int32_t *ids) {
    char path[512];
    snprintf(path, sizeof path, "%s/ids.i32", dir);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(ids, sizeof *ids, NTOK, f) : 0;
    if (f) fclose(f);
    for (size_t i = 0; i < NTOK; i++)
        if (i >= got || ids[i] < 0 || ids[i] >= V) ids[i] = (int32_t)((i * 7919 + 13) % (size_t)V);
}

static nemotron_session *new_session(nemotron_model *m, int verify_max) {
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = 64;
    sp.verify_max = verify_max;
    nemotron_session *s = NULL;
    nemotron_status st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK, "session: %s", nemotron_session_errmsg(s));
    if (st) {
        nemotron_session_free(s);
        return NULL;
    }
    return s;
}

/* Resident bytes of session s's backend, read back into a fresh host buffer. */
static void *read_back(nemotron_session *s, const void *p, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
        fprintf(stderr, "test_verify: out of memory\n");
        exit(1);
    }
    struct nt_backend *be = s->model->fwd.be;
    be->ops->to_host(be, h, p, bytes);
    return h;
}

static int same_bytes(nemotron_session *a, const void *pa, nemotron_session *b, const void *pb, size_t bytes) {
    void *ha = read_back(a, pa, bytes), *hb = read_back(b, pb, bytes);
    int same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

/* Whether sessions a and b hold bit-identical states; what differs first goes to why. */
static int same_state(nemotron_session *a, nemotron_session *b, char *why, size_t cap) {
    const struct nt_forward *f = &a->model->fwd;
    if (a->pos != b->pos) return snprintf(why, cap, "position %d vs %d", a->pos, b->pos), 0;
    size_t cb = nt_state_conv_bytes(f), sb = nt_state_ssm_bytes(f);
    size_t kb = (size_t)a->pos * f->nkv * f->dh * sizeof(float);
    for (int i = 0; i < a->state.n_layer; i++) {
        if (a->state.conv[i] && !same_bytes(a, a->state.conv[i], b, b->state.conv[i], cb))
            return snprintf(why, cap, "layer %d's conv ring", i), 0;
        if (a->state.ssm[i] && !same_bytes(a, a->state.ssm[i], b, b->state.ssm[i], sb))
            return snprintf(why, cap, "layer %d's SSM state", i), 0;
        if (a->state.k_cache[i] && kb &&
            (!same_bytes(a, a->state.k_cache[i], b, b->state.k_cache[i], kb) ||
             !same_bytes(a, a->state.v_cache[i], b, b->state.v_cache[i], kb)))
            return snprintf(why, cap, "layer %d's KV rows below %d", i, a->pos), 0;
    }
    const float *la = nemotron_session_logits(a), *lb = nemotron_session_logits(b);
    if (!la != !lb || (la && memcmp(la, lb, (size_t)f->V * sizeof(float))))
        return snprintf(why, cap, "the last logits"), 0;
    if (nemotron_session_argmax(a) != nemotron_session_argmax(b))
        return snprintf(why, cap, "the last argmax %d vs %d", nemotron_session_argmax(a), nemotron_session_argmax(b)), 0;
    return 1;
}

/* Both sessions run the same tokens; their logits must be the same bits. */
static int same_next(nemotron_session *a, nemotron_session *b, const int32_t *tokens, int n) {
    int V = a->model->fwd.V;
    float *la = calloc((size_t)n * V, sizeof(float)), *lb = calloc((size_t)n * V, sizeof(float));
    int ok = la && lb && nemotron_session_eval(a, tokens, n, la) == NEMOTRON_OK &&
             nemotron_session_eval(b, tokens, n, lb) == NEMOTRON_OK &&
             memcmp(la, lb, (size_t)n * V * sizeof(float)) == 0;
    free(la);
    free(lb);
    return ok;
}

static int32_t host_argmax(const float *l, int V) {
    int best = -1;
    for (int i = 0; i < V; i++)
        if (l[i] == l[i] && (best < 0 || l[i] > l[best])) best = i;
    return best < 0 ? 0 : best;
}

/* verify + accept(m) against plain evals, m = 0..NDRAFT; verify's argmax against eval's logits. */
static void check_verify(const char *what, nemotron_model *m, const int32_t *ids) {
    int V = nemotron_model_vocab_size(m);
    nemotron_session *sv = new_session(m, NDRAFT), *sr = new_session(m, 0);
    if (!sv || !sr) goto out;
    const int32_t *drafts = ids + P, *more = ids + P + NDRAFT;
    float *logits = calloc((size_t)NDRAFT * V, sizeof(float));
    int32_t argmax[NDRAFT];
    CHECK(logits && nemotron_session_eval(sr, ids, P, NULL) == NEMOTRON_OK &&
              nemotron_session_eval(sr, drafts, NDRAFT, logits) == NEMOTRON_OK,
          "%s: eval: %s", what, nemotron_session_errmsg(sr));
    for (int acc = 0; acc <= NDRAFT; acc++) {
        nemotron_session_reset(sv);
        nemotron_session_reset(sr);
        nemotron_status st = nemotron_session_eval(sv, ids, P, NULL);
        if (!st) st = nemotron_session_verify(sv, drafts, NDRAFT, argmax);
        if (!st) st = nemotron_session_accept(sv, acc);
        CHECK(st == NEMOTRON_OK, "%s: verify %d, accept %d: %s", what, NDRAFT, acc, nemotron_session_errmsg(sv));
        if (acc == 0)
            for (int t = 0; t < NDRAFT; t++)
                CHECK(argmax[t] == host_argmax(logits + (size_t)t * V, V),
                      "%s: verify's argmax of position %d is %d, eval's logits say %d", what, t, argmax[t],
                      host_argmax(logits + (size_t)t * V, V));
        CHECK(nemotron_session_eval(sr, ids, P, NULL) == NEMOTRON_OK, "%s: eval", what);
        if (acc) CHECK(nemotron_session_eval(sr, drafts, acc, NULL) == NEMOTRON_OK, "%s: eval", what);
        char why[160] = "";
        CHECK(same_state(sv, sr, why, sizeof why),
              "%s: verify %d then accept %d differs from a plain eval of %d: %s", what, NDRAFT, acc, acc, why);
        CHECK(same_next(sv, sr, more, NMORE), "%s: after accept %d, the next tokens' logits differ", what, acc);
    }
    free(logits);
out:
    nemotron_session_free(sv);
    nemotron_session_free(sr);
}

/* eval_embd of the tokens' embedding rows against eval of the tokens: alone, and mixed. */
static void check_embd(const char *what, nemotron_model *m, const int32_t *ids) {
    int V = nemotron_model_vocab_size(m), H = nemotron_model_hidden_size(m);
    nemotron_session *se = new_session(m, 0), *st = new_session(m, 0);
    float *embd = calloc((size_t)NTOK * H, sizeof(float));
    float *le = calloc((size_t)NTOK * V, sizeof(float)), *lt = calloc((size_t)NTOK * V, sizeof(float));
    if (!se || !st || !embd || !le || !lt) goto out;
    for (int i = 0; i < NTOK; i++)
        CHECK(nemotron_model_token_embedding(m, ids[i], embd + (size_t)i * H) == NEMOTRON_OK, "%s: token_embedding",
              what);
    CHECK(nemotron_session_eval_embd(se, embd, NTOK, le) == NEMOTRON_OK, "%s: eval_embd: %s", what,
          nemotron_session_errmsg(se));
    CHECK(nemotron_session_eval(st, ids, NTOK, lt) == NEMOTRON_OK, "%s: eval", what);
    CHECK(memcmp(le, lt, (size_t)NTOK * V * sizeof(float)) == 0, "%s: eval_embd's logits differ from the tokens'",
          what);
    char why[160] = "";
    CHECK(same_state(se, st, why, sizeof why), "%s: eval_embd's state differs from the tokens': %s", what, why);
    /* one timeline: tokens, embeddings, tokens */
    nemotron_session_reset(se);
    nemotron_session_reset(st);
    CHECK(nemotron_session_eval(se, ids, 2, NULL) == NEMOTRON_OK &&
              nemotron_session_eval_embd(se, embd + 2 * (size_t)H, NTOK - 4, NULL) == NEMOTRON_OK &&
              nemotron_session_eval(se, ids + NTOK - 2, 2, NULL) == NEMOTRON_OK,
          "%s: mixed eval: %s", what, nemotron_session_errmsg(se));
    CHECK(nemotron_session_eval(st, ids, NTOK, NULL) == NEMOTRON_OK, "%s: eval", what);
    CHECK(same_state(se, st, why, sizeof why), "%s: tokens, embeddings, tokens: state differs: %s", what, why);
out:
    free(embd);
    free(le);
    free(lt);
    nemotron_session_free(se);
    nemotron_session_free(st);
}

/* A snapshot after the prompt, restored into its session after it moved on and into another. */
static void check_snapshot(const char *what, nemotron_model *m, const int32_t *ids) {
    int V = nemotron_model_vocab_size(m), n = NTOK - P;
    nemotron_session *a = new_session(m, 0), *b = new_session(m, NDRAFT);
    float *l1 = calloc((size_t)n * V, sizeof(float)), *l2 = calloc((size_t)n * V, sizeof(float));
    nemotron_snapshot *snap = NULL;
    if (!a || !b || !l1 || !l2) goto out;
    CHECK(nemotron_session_eval(a, ids, P, NULL) == NEMOTRON_OK, "%s: eval", what);
    CHECK(nemotron_session_snapshot(a, &snap) == NEMOTRON_OK && snap, "%s: snapshot: %s", what,
          nemotron_session_errmsg(a));
    if (!snap) goto out;
    CHECK(nemotron_snapshot_pos(snap) == P, "%s: the snapshot's position is %d, not %d", what,
          nemotron_snapshot_pos(snap), P);
    CHECK(nemotron_session_eval(a, ids + P, n, l1) == NEMOTRON_OK, "%s: eval", what);
    CHECK(nemotron_session_restore(a, snap) == NEMOTRON_OK && nemotron_session_pos(a) == P, "%s: restore: %s", what,
          nemotron_session_errmsg(a));
    CHECK(nemotron_session_eval(a, ids + P, n, l2) == NEMOTRON_OK, "%s: eval", what);
    CHECK(memcmp(l1, l2, (size_t)n * V * sizeof(float)) == 0, "%s: logits after restoring into the same session differ",
          what);
    /* the other session first runs something else, so every row and state it holds is replaced */
    CHECK(nemotron_session_eval(b, ids + 1, NTOK - 1, NULL) == NEMOTRON_OK, "%s: eval", what);
    CHECK(nemotron_session_restore(b, snap) == NEMOTRON_OK, "%s: restore into another session: %s", what,
          nemotron_session_errmsg(b));
    memset(l2, 0, (size_t)n * V * sizeof(float));
    CHECK(nemotron_session_eval(b, ids + P, n, l2) == NEMOTRON_OK, "%s: eval", what);
    CHECK(memcmp(l1, l2, (size_t)n * V * sizeof(float)) == 0,
          "%s: logits after restoring into another session differ", what);
    char why[160] = "";
    CHECK(same_state(a, b, why, sizeof why), "%s: restored sessions differ: %s", what, why);
out:
    nemotron_snapshot_free(snap);
    free(l1);
    free(l2);
    nemotron_session_free(a);
    nemotron_session_free(b);
}

/* Two threads, as a server's slots: passes of kinds 1..THREAD_KINDS positions, each run twice (on
 * CUDA the second is captured into a graph) against snapshots taken, restored and freed (device
 * allocations and copies) and single-position evals, all at once. */
enum { THREAD_KINDS = 12, THREAD_SNAPS = 60 };
struct thread_run {
    nemotron_session *s;
    const int32_t *ids;
    float *logits;                    /* passes: [THREAD_KINDS][V], the last position's after each */
    int failures;
};
static void *thread_passes(void *arg) {
    struct thread_run *r = arg;
    int V = nemotron_model_vocab_size(r->s->model);
    int32_t ids[THREAD_KINDS];
    for (int i = 0; i < THREAD_KINDS; i++) ids[i] = r->ids[i % NTOK];
    for (int n = 1; n <= THREAD_KINDS; n++)
        for (int rep = 0; rep < 2; rep++) {
            nemotron_session_reset(r->s);
            r->failures += nemotron_session_eval(r->s, ids, n, NULL) != NEMOTRON_OK;
            const float *l = nemotron_session_logits(r->s);
            if (l) memcpy(r->logits + (size_t)(n - 1) * V, l, (size_t)V * sizeof(float));
        }
    return NULL;
}
static void *thread_snapshots(void *arg) {
    struct thread_run *r = arg;
    for (int i = 0; i < THREAD_SNAPS; i++) {
        nemotron_snapshot *snap = NULL;
        r->failures += nemotron_session_eval(r->s, &r->ids[i % NTOK], 1, NULL) != NEMOTRON_OK;
        r->failures += nemotron_session_snapshot(r->s, &snap) != NEMOTRON_OK;
        r->failures += snap && nemotron_session_restore(r->s, snap) != NEMOTRON_OK;
        nemotron_snapshot_free(snap);
        if (nemotron_session_pos(r->s) >= 48) nemotron_session_reset(r->s); /* n_ctx 64 */
    }
    return NULL;
}
static void check_threads(const char *what, nemotron_model *m, const int32_t *ids) {
    if (strstr(m->be->device, "host emulation")) {
        /* the emulator runs the kernels of one host thread at a time (tests/emu) */
        printf("test_verify: %s: two threads at once left to a GPU (tests/gpu/run.sh)\n", what);
        return;
    }
    int V = nemotron_model_vocab_size(m);
    struct thread_run alone = {new_session(m, 0), ids, calloc((size_t)THREAD_KINDS * V, sizeof(float)), 0};
    struct thread_run a = {new_session(m, 0), ids, calloc((size_t)THREAD_KINDS * V, sizeof(float)), 0};
    struct thread_run b = {new_session(m, 0), ids, NULL, 0};
    pthread_t ta, tb;
    if (alone.s && a.s && b.s && alone.logits && a.logits) {
        thread_passes(&alone);
        int started = pthread_create(&ta, NULL, thread_passes, &a) == 0;
        int started_b = pthread_create(&tb, NULL, thread_snapshots, &b) == 0;
        if (started) pthread_join(ta, NULL);
        if (started_b) pthread_join(tb, NULL);
        CHECK(started && started_b, "%s: threads started", what);
        CHECK(!a.failures && !b.failures && !alone.failures,
              "%s: two threads at once: %d pass and %d snapshot calls failed (%s / %s)", what, a.failures, b.failures,
              nemotron_session_errmsg(a.s), nemotron_session_errmsg(b.s));
        CHECK(!memcmp(a.logits, alone.logits, (size_t)THREAD_KINDS * V * sizeof(float)),
              "%s: passes beside another thread give other logits than alone", what);
    }
    free(alone.logits);
    free(a.logits);
    nemotron_session_free(alone.s);
    nemotron_session_free(a.s);
    nemotron_session_free(b.s);
}

/* Errors: statuses with messages, the session unchanged; NULL handles are safe. */
static void check_errors(nemotron_model *m, nemotron_model *other, const int32_t *ids) {
    nemotron_session *s = new_session(m, NDRAFT), *plain = new_session(m, 0), *o = new_session(other, 0);
    if (!s || !plain || !o) goto out;
    int32_t am[NDRAFT + 1];
    CHECK(nemotron_session_accept(s, 0) == NEMOTRON_ERR_ARG && strstr(nemotron_session_errmsg(s), "verify"),
          "accept without a verify: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_verify(s, ids, NDRAFT + 1, am) == NEMOTRON_ERR_ARG &&
              strstr(nemotron_session_errmsg(s), "verify_max") && nemotron_session_pos(s) == 0,
          "verify past verify_max: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_verify(plain, ids, 1, am) == NEMOTRON_ERR_ARG && nemotron_session_pos(plain) == 0,
          "verify in a session without verify: %s", nemotron_session_errmsg(plain));
    CHECK(nemotron_session_verify(s, ids, 0, am) == NEMOTRON_ERR_ARG, "verify of 0 tokens");
    CHECK(nemotron_session_verify(s, NULL, 2, am) == NEMOTRON_ERR_ARG, "verify of NULL tokens");
    int32_t bad[2] = {ids[0], -5};
    CHECK(nemotron_session_verify(s, bad, 2, am) == NEMOTRON_ERR_ARG && nemotron_session_pos(s) == 0,
          "verify of a token outside the vocabulary: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_verify(s, ids, NDRAFT, am) == NEMOTRON_OK, "verify: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_accept(s, NDRAFT + 1) == NEMOTRON_ERR_ARG && nemotron_session_pos(s) == NDRAFT,
          "accept more than verified: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_accept(s, -1) == NEMOTRON_ERR_ARG, "accept -1");
    CHECK(nemotron_session_accept(s, 1) == NEMOTRON_OK && nemotron_session_pos(s) == 1, "accept 1: %s",
          nemotron_session_errmsg(s));
    CHECK(nemotron_session_accept(s, 1) == NEMOTRON_ERR_ARG, "accept twice");
    CHECK(nemotron_session_verify(s, ids, 2, am) == NEMOTRON_OK && nemotron_session_eval(s, ids, 1, NULL) == NEMOTRON_OK,
          "verify then eval");
    CHECK(nemotron_session_accept(s, 0) == NEMOTRON_ERR_ARG && nemotron_session_pos(s) == 4,
          "accept after an eval that followed the verify: %s", nemotron_session_errmsg(s));
    nemotron_session_params sp = nemotron_session_default_params();
    sp.pass_max = 4;
    sp.verify_max = 5;
    nemotron_session *t = NULL;
    CHECK(nemotron_session_new(m, &sp, &t) == NEMOTRON_ERR_ARG && strstr(nemotron_session_errmsg(t), "verify_max"),
          "verify_max past pass_max: %s", nemotron_session_errmsg(t));
    nemotron_session_free(t);
    nemotron_snapshot *snap = NULL;
    CHECK(nemotron_session_snapshot(o, &snap) == NEMOTRON_OK, "snapshot: %s", nemotron_session_errmsg(o));
    int pos = nemotron_session_pos(s);
    CHECK(nemotron_session_restore(s, snap) == NEMOTRON_ERR_ARG && strstr(nemotron_session_errmsg(s), "model") &&
              nemotron_session_pos(s) == pos,
          "restore of another model's snapshot: %s", nemotron_session_errmsg(s));
    nemotron_snapshot_free(snap);
    /* a snapshot at position 4 does not fit a session of 2 positions */
    snap = NULL;
    sp = nemotron_session_default_params();
    sp.n_ctx = 2;
    CHECK(nemotron_session_new(m, &sp, &t) == NEMOTRON_OK, "session: %s", nemotron_session_errmsg(t));
    CHECK(nemotron_session_snapshot(s, &snap) == NEMOTRON_OK, "snapshot: %s", nemotron_session_errmsg(s));
    CHECK(nemotron_session_restore(t, snap) == NEMOTRON_ERR_CONTEXT && nemotron_session_pos(t) == 0,
          "restore past the context: %s", nemotron_session_errmsg(t));
    nemotron_snapshot_free(snap);
    nemotron_session_free(t);
    CHECK(nemotron_session_restore(s, NULL) == NEMOTRON_ERR_ARG, "restore of NULL");
    CHECK(nemotron_session_snapshot(s, NULL) == NEMOTRON_ERR_ARG, "snapshot into NULL");
    int H = nemotron_model_hidden_size(m);
    float *e = calloc((size_t)H, sizeof(float));
    if (e) {
        e[H / 2] = NAN;
        CHECK(nemotron_session_eval_embd(s, e, 1, NULL) == NEMOTRON_ERR_ARG && nemotron_session_pos(s) == pos,
              "eval_embd of a NaN: %s", nemotron_session_errmsg(s));
        CHECK(nemotron_model_token_embedding(m, -1, e) == NEMOTRON_ERR_ARG, "token_embedding of -1");
        CHECK(nemotron_model_token_embedding(m, nemotron_model_vocab_size(m), e) == NEMOTRON_ERR_ARG,
              "token_embedding of vocab_size");
    }
    free(e);
    CHECK(nemotron_session_eval_embd(s, NULL, 1, NULL) == NEMOTRON_ERR_ARG, "eval_embd of NULL");
    /* NULL handles */
    nemotron_snapshot *none = (nemotron_snapshot *)1;
    CHECK(nemotron_session_snapshot(NULL, &none) == NEMOTRON_ERR_ARG && none == NULL, "snapshot of NULL");
    CHECK(nemotron_session_restore(NULL, NULL) == NEMOTRON_ERR_ARG, "restore into NULL");
    CHECK(nemotron_session_verify(NULL, ids, 1, am) == NEMOTRON_ERR_ARG, "verify of NULL");
    CHECK(nemotron_session_accept(NULL, 0) == NEMOTRON_ERR_ARG, "accept of NULL");
    CHECK(nemotron_session_eval_embd(NULL, NULL, 1, NULL) == NEMOTRON_ERR_ARG, "eval_embd of NULL");
    CHECK(nemotron_model_token_embedding(NULL, 0, NULL) == NEMOTRON_ERR_ARG, "token_embedding of NULL");
    CHECK(nemotron_snapshot_pos(NULL) == 0, "snapshot_pos of NULL");
    nemotron_snapshot_free(NULL);
out:
    nemotron_session_free(s);
    nemotron_session_free(plain);
    nemotron_session_free(o);
}

static nemotron_model *load(const char *dir, const char *device, nemotron_status *st) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = device;
    mp.n_threads = 2;
    nemotron_model *m = NULL;
    *st = nemotron_model_load(dir, &mp, &m);
    if (*st == NEMOTRON_OK) return m;
    nemotron_model_free(m);
    return NULL;
}

int main(void) {
    static const char *const devices[] = {"cpu", "cuda"};
    for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            nemotron_status st;
            nemotron_model *m = load(cases[c].dir, devices[d], &st);
            if (!m && d > 0 && (st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_ARG)) {
                printf("test_verify: no %s device in this build or machine: its checks skipped\n", devices[d]);
                break;
            }
            CHECK(m != NULL, "%s on %s: load failed (%s)", cases[c].name, devices[d], nemotron_status_str(st));
            if (!m) continue;
            char what[96];
            snprintf(what, sizeof what, "%s on %s", cases[c].name, devices[d]);
            int32_t ids[NTOK];
            pick_tokens(cases[c].dir, nemotron_model_vocab_size(m), ids);
            check_verify(what, m, ids);
            check_embd(what, m, ids);
            check_snapshot(what, m, ids);
            if (c == sizeof cases / sizeof cases[0] - 1) check_threads(what, m, ids);
            if (d == 0 && c == 0) {
                nemotron_model *other = load(cases[1].dir, "cpu", &st);
                CHECK(other != NULL, "load %s", cases[1].dir);
                if (other) check_errors(m, other, ids);
                nemotron_model_free(other);
            }
            nemotron_model_free(m);
        }
    }
    return test_summary("test_verify");
}
