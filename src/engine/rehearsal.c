/* rehearsal.c - a session's rehearsals: the pass kinds it expects, recorded as pass programs
 * while the device is busy with its passes (backend.h: nt_backend.programs, nt_pass.rehearse).
 *
 * Why: the CUDA backend records a kind's program (a CUDA graph) on the kind's second pass, and
 * recording one costs the host 0.3 - 1 ms on the demo model (docs/PERF.md) - as much as 2 to 5
 * of its decode steps. Speculative decoding meets a new kind at every new draft length, so a
 * 256-token run paid 5 - 6 recordings, 3 - 6 % of it. Rehearsed while the device runs a prompt's
 * pass, which the host only waits for, the recording costs the run nothing; the kind's first pass
 * replays the rehearsed program, checked against itself as it comes (backend.h, end_pass).
 */
#include "engine.h"

/* Only a pass of this many positions is waited for long enough: a rehearsal costs the host 0.1 -
 * 0.5 ms on the demo model, a decode step of it 0.2 ms of the device, so rehearsing in decode
 * steps' waits cost a 256-token run 3 - 5 % in kinds it never used (docs/PERF.md); a prompt's
 * pass (8 positions and more) gives the host milliseconds to fill. What was not rehearsed is
 * recorded as before, by the kind's second pass. */
#define NT_REHEARSE_MIN_N 8

/* The tokens of a rehearsal: never read (nt_pass.rehearse), but a pass of tokens names some. */
static const int32_t unread_tokens[NEMOTRON_SPEC_MAX + 1];

void nt_session_expect(nemotron_session *s, enum nt_pass_type type, int n, enum nt_logits want) {
    if (!s->model->fwd.be->programs || s->n_expected == NT_EXPECTED_MAX) return;
    int most = type == NT_PASS_VERIFY ? s->verify_max : s->pass_max;
    if (n < 1 || n > most || n > NEMOTRON_SPEC_MAX + 1 || (type == NT_PASS_MTP && !s->mtp)) return;
    for (int i = 0; i < s->n_expected; i++)
        if (s->expected[i].type == type && s->expected[i].n == n && s->expected[i].want == want) return;
    s->expected[s->n_expected++] = (struct nt_expected){type, n, want};
}

/* Records one kind's program: its pass, built as the session builds it, marked a rehearsal. */
static void rehearse(nemotron_session *s, const struct nt_expected *e) {
    const struct nt_forward *f = &s->model->fwd;
    struct nt_pass p = e->type == NT_PASS_MTP ? nt_session_mtp_pass(s, 0, unread_tokens, e->n, e->want)
                                              : nt_session_main_pass(s, unread_tokens, e->n, e->want,
                                                                     e->type == NT_PASS_VERIFY);
    p.rehearse = 1;
    nt_pass_enter();
    if (p.mtp) nt_forward_mtp_pass(f, &s->state, &s->acts, &p);
    else nt_forward_pass(f, &s->state, &s->acts, &p);
    nt_pass_leave();
}

void nt_session_rehearse_while_busy(nemotron_session *s, int n) {
    struct nt_backend *be = s->model->fwd.be;
    if (n < NT_REHEARSE_MIN_N || !s->n_expected || !be->ops->busy) return;
    for (int i = 0; i < s->n_expected && !be->fault[0] && be->ops->busy(be);) {
        /* an MTP kind after the session's first MTP pass, which makes what its program needs */
        if (s->expected[i].type == NT_PASS_MTP && !s->mtp_ran) {
            i++;
            continue;
        }
        rehearse(s, &s->expected[i]);
        s->n_expected--;
        memmove(&s->expected[i], &s->expected[i + 1], (size_t)(s->n_expected - i) * sizeof s->expected[0]);
    }
}
