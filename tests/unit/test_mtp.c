/* test_mtp.c - the model's MTP step (MODEL.md 3.8) against an independent PyTorch reference
 * (tools/reference/mtp_reference.py, run on the GPU machine), and its bookkeeping in a session.
 *
 * For each model with an MTP step and reference files - tests/fixtures/latent-mtp-f32 (random f32
 * weights, latent MoE) and tests/fixtures/demo-mtp (the demo model's trained step, bf16):
 *   - teacher forced: after the ids are evaluated, the step's logits at every position (the main
 *     model's hidden state there and the next id) are within REL_TOL of the reference's (relative
 *     L2 per position) and give its top token;
 *   - chained: the drafts chained on the step's own outputs are the reference's, and each step's
 *     logits are within REL_TOL;
 *   - one arithmetic per position: the ids evaluated in passes of 1, 5 and 64 positions give the
 *     waiting rows' logits, the drafts and the last draft's logits bit for bit;
 *   - a snapshot carries the step's state: drafting after a restore into another session drafts
 *     the same tokens from the same logits;
 *   - settling (the waiting rows but the last run at once, as a decoder's prefill does) drafts
 *     the same tokens from the same logits;
 * on the CPU, and on CUDA where the library holds it (the GPU machine's tests/gpu/run.sh).
 */
#include "engine/engine.h"
#include "test.h"

#include <string.h>

/* As test_fixtures.c: transformers' own float32 evaluation order differs from ours; 1e-5 relative
 * per position is far below what a wrong term (a missed norm, the halves of eh_proj swapped, the
 * wrong hidden state) gives, >= 1e-2 on these models. */
#define REL_TOL 1e-5

struct reference {
    int32_t *ids, *chain;         /* [n]; [1 + n_chain]: the main model's next token g, then drafts */
    float *logits, *chain_logits; /* [n - 1][V]; [n_chain][V] */
    int n, n_chain;
};

static int load_reference(const char *dir, int V, struct reference *r) {
    char path[512];
    size_t b1 = 0, b2 = 0, b3 = 0, b4 = 0;
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/mtp_ids.i32", dir);
    r->ids = test_read_file(path, &b1);
    snprintf(path, sizeof path, "%s/mtp_logits.f32", dir);
    r->logits = test_read_file(path, &b2);
    snprintf(path, sizeof path, "%s/mtp_chain.i32", dir);
    r->chain = test_read_file(path, &b3);
    snprintf(path, sizeof path, "%s/mtp_chain_logits.f32", dir);
    r->chain_logits = test_read_file(path, &b4);
    r->n = (int)(b1 / 4);
    r->n_chain = (int)(b3 / 4) - 1;
    int ok = r->ids && r->logits && r->chain && r->chain_logits && r->n >= 2 && r->n_chain >= 1 && r->n_chain <= 64 &&
             b2 == (size_t)(r->n - 1) * V * 4 && b4 == (size_t)r->n_chain * V * 4;
    CHECK(ok, "%s: the MTP reference files are missing or of the wrong sizes (vocab %d)", dir, V);
    return ok;
}

static void free_reference(struct reference *r) {
    free(r->ids);
    free(r->chain);
    free(r->logits);
    free(r->chain_logits);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static nemotron_session *mtp_session(nemotron_model *m, int pass_max) {
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = 256;
    sp.pass_max = pass_max;
    sp.mtp = 1;
    nemotron_session *s = NULL;
    nemotron_status st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK, "session: %s", nemotron_session_errmsg(s));
    if (st) {
        nemotron_session_free(s);
        return NULL;
    }
    return s;
}

/* The logits the last MTP pass left in row 0 (a draft's last step). */
static void last_mtp_logits(nemotron_session *s, float *out) {
    struct nt_backend *be = s->model->fwd.be;
    be->ops->to_host(be, out, s->acts.logits, (size_t)s->model->fwd.V * sizeof(float));
}

/* What one session computes for the reference's ids: the waiting rows' logits after the ids
 * ([rows][V], the last `rows` positions), then from a snapshot of that point each chain length
 * j = 1..n_chain, its drafts and its last step's logits. */
struct run {
    int rows;
    float *wait_logits;           /* [rows][V] */
    int32_t drafts[64];           /* of the longest chain */
    float *chain_logits;          /* [n_chain][V]: step j - 1's logits, from the chain of length j */
    int32_t chain_drafts[64][64]; /* [j - 1][0 .. j): the drafts of the chain of length j */
};

static void run_mtp(nemotron_model *m, const struct reference *r, int pass_max, struct run *out) {
    int V = nemotron_model_vocab_size(m);
    memset(out, 0, sizeof *out);
    out->wait_logits = calloc((size_t)(pass_max < r->n ? pass_max : r->n) * V, sizeof(float));
    out->chain_logits = calloc((size_t)r->n_chain * V, sizeof(float));
    nemotron_session *s = mtp_session(m, pass_max), *other = mtp_session(m, pass_max);
    if (!s || !other || !out->wait_logits || !out->chain_logits) goto done;
    CHECK(nemotron_session_eval(s, r->ids, r->n, NULL) == NEMOTRON_OK, "eval: %s", nemotron_session_errmsg(s));
    int32_t g = r->chain[0];
    nemotron_snapshot *snap = NULL;
    CHECK(nemotron_session_snapshot(s, &snap) == NEMOTRON_OK, "snapshot: %s", nemotron_session_errmsg(s));
    CHECK(nt_session_mtp_logits(s, g, out->wait_logits, &out->rows) == NEMOTRON_OK, "mtp logits: %s",
          nemotron_session_errmsg(s));
    for (int j = 1; j <= r->n_chain && snap; j++) {
        /* every other chain in the other session: a restore carries the MTP step's state over */
        nemotron_session *t = j % 2 ? s : other;
        CHECK(nemotron_session_restore(t, snap) == NEMOTRON_OK, "restore: %s", nemotron_session_errmsg(t));
        int got = 0;
        CHECK(nt_session_mtp_draft(t, g, j, out->chain_drafts[j - 1], &got) == NEMOTRON_OK && got == j,
              "draft %d: %d drafts (%s)", j, got, nemotron_session_errmsg(t));
        last_mtp_logits(t, out->chain_logits + (size_t)(j - 1) * V);
    }
    if (r->n_chain >= 1) memcpy(out->drafts, out->chain_drafts[r->n_chain - 1], (size_t)r->n_chain * sizeof(int32_t));
    nemotron_snapshot_free(snap);
done:
    nemotron_session_free(s);
    nemotron_session_free(other);
}

static void free_run(struct run *r) {
    free(r->wait_logits);
    free(r->chain_logits);
}

static void check_against_reference(const char *what, const struct reference *r, const struct run *u, int V) {
    /* one pass held every id: every position waited, the last one's next token being g */
    CHECK(u->rows == r->n, "%s: %d rows waited, %d ids", what, u->rows, r->n);
    if (u->rows != r->n) return;
    double worst = 0;
    int worst_t = 0, top_differs = 0;
    for (int t = 0; t < r->n; t++) {
        const float *ref = t < r->n - 1 ? r->logits + (size_t)t * V : r->chain_logits;
        double e = test_rel_l2(u->wait_logits + (size_t)t * V, ref, V);
        if (e > worst) worst = e, worst_t = t;
        top_differs += argmax(u->wait_logits + (size_t)t * V, V) != argmax(ref, V);
    }
    CHECK(worst <= REL_TOL, "%s: teacher-forced MTP logits: worst rel L2 %.3e at position %d", what, worst, worst_t);
    CHECK(top_differs == 0, "%s: teacher-forced MTP top token differs at %d positions", what, top_differs);
    printf("%s: teacher-forced MTP logits, %d positions: worst rel L2 %.2e\n", what, r->n, worst);
    worst = 0;
    for (int j = 0; j < r->n_chain; j++) {
        double e = test_rel_l2(u->chain_logits + (size_t)j * V, r->chain_logits + (size_t)j * V, V);
        if (e > worst) worst = e, worst_t = j;
        CHECK(u->drafts[j] == r->chain[1 + j], "%s: chained draft %d is %d, the reference's %d", what, j,
              (int)u->drafts[j], (int)r->chain[1 + j]);
    }
    CHECK(worst <= REL_TOL, "%s: chained MTP logits: worst rel L2 %.3e at step %d", what, worst, worst_t);
    printf("%s: %d chained drafts, worst rel L2 %.2e\n", what, r->n_chain, worst);
}

/* A run in other passes against the one-pass run: bit for bit. */
static void check_same(const char *what, const struct reference *r, const struct run *one, const struct run *u,
                       int V) {
    CHECK(u->rows >= 1 && u->rows <= one->rows, "%s: %d rows waited", what, u->rows);
    if (u->rows < 1 || u->rows > one->rows) return;
    const float *tail = one->wait_logits + (size_t)(one->rows - u->rows) * V;
    CHECK(!memcmp(u->wait_logits, tail, (size_t)u->rows * V * sizeof(float)),
          "%s: the waiting rows' MTP logits differ from one pass's", what);
    CHECK(!memcmp(u->chain_logits, one->chain_logits, (size_t)r->n_chain * V * sizeof(float)),
          "%s: the chained MTP logits differ from one pass's", what);
    for (int j = 1; j <= r->n_chain; j++)
        CHECK(!memcmp(u->chain_drafts[j - 1], one->chain_drafts[j - 1], (size_t)j * sizeof(int32_t)),
              "%s: the chain of %d drafts differs from one pass's", what, j);
}

/* Settled after the ids, then the longest chain: the one-pass run's drafts and last logits. */
static void check_settled(const char *what, nemotron_model *m, const struct reference *r, const struct run *one) {
    int V = nemotron_model_vocab_size(m);
    nemotron_session *s = mtp_session(m, 64);
    float *l = calloc((size_t)V, sizeof(float));
    int32_t drafts[64];
    int got = 0;
    if (s && l) {
        CHECK(nemotron_session_eval(s, r->ids, r->n, NULL) == NEMOTRON_OK, "%s: eval", what);
        CHECK(nt_session_mtp_settle(s) == NEMOTRON_OK && s->mtp_rows == 1, "%s: settle: %d rows wait (%s)", what,
              s->mtp_rows, nemotron_session_errmsg(s));
        CHECK(nt_session_mtp_draft(s, r->chain[0], r->n_chain, drafts, &got) == NEMOTRON_OK && got == r->n_chain,
              "%s: draft after settling", what);
        last_mtp_logits(s, l);
        CHECK(got == r->n_chain && !memcmp(drafts, one->chain_drafts[r->n_chain - 1], (size_t)got * sizeof(int32_t)),
              "%s: settled, the drafts differ from one pass's", what);
        CHECK(!memcmp(l, one->chain_logits + (size_t)(r->n_chain - 1) * V, (size_t)V * sizeof(float)),
              "%s: settled, the last draft's logits differ from one pass's", what);
    }
    free(l);
    nemotron_session_free(s);
}

static void check_model(const char *name, const char *model_dir, const char *ref_dir, const char *device) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = device;
    mp.n_threads = 2;
    nemotron_model *m = NULL;
    nemotron_status st = nemotron_model_load(model_dir, &mp, &m);
    if (st && strcmp(device, "cpu") && (st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_ARG)) {
        printf("test_mtp: no %s device in this build or machine: its checks skipped\n", device);
        nemotron_model_free(m);
        return;
    }
    CHECK(st == NEMOTRON_OK, "%s: load: %s", name, nemotron_model_errmsg(m));
    CHECK(!st && nemotron_model_mtp_layers(m) == 2, "%s: %d MTP layers", name, nemotron_model_mtp_layers(m));
    struct reference r;
    if (st || !load_reference(ref_dir, nemotron_model_vocab_size(m), &r)) {
        nemotron_model_free(m);
        return;
    }
    int V = nemotron_model_vocab_size(m);
    char what[160];
    struct run one;
    run_mtp(m, &r, 64, &one);
    snprintf(what, sizeof what, "%s on %s", name, device);
    check_against_reference(what, &r, &one, V);
    static const int passes[] = {1, 5};
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
        struct run u;
        run_mtp(m, &r, passes[i], &u);
        snprintf(what, sizeof what, "%s on %s, passes of %d", name, device, passes[i]);
        check_same(what, &r, &one, &u, V);
        free_run(&u);
    }
    snprintf(what, sizeof what, "%s on %s, settled", name, device);
    check_settled(what, m, &r, &one);
    free_run(&one);
    free_reference(&r);
    nemotron_model_free(m);
}

int main(void) {
    static const char *const devices[] = {"cpu", "cuda"};
    for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
        check_model("latent-mtp-f32", FIXTURES "/latent-mtp-f32", FIXTURES "/latent-mtp-f32", devices[d]);
        check_model("demo", "models/nemotron-h-kjv", FIXTURES "/demo-mtp", devices[d]);
    }
    return test_summary("test_mtp");
}
