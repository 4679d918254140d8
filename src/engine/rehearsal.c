/* rehearsal.c - a session's rehearsals: the pass kinds it expects, recorded as pass programs
 * right after a pass of the session is queued (backend.h: nt_backend.programs, nt_pass.rehearse).
 *
 * Why: the CUDA backend records a kind's program (a CUDA graph) on the kind's second pass, and
 * recording one costs the host 0.2 - 1 ms on the demo model (docs/PERF.md) - as much as 1 to 5
 * of its decode steps. Speculative decoding meets a new kind at every new draft length, so a
 * 256-token run paid 5 - 6 recordings, 3 - 6 % of it. Rehearsed beforehand, the kind's first pass
 * replays its program (checked against itself as it comes, backend.h end_pass).
 *
 * When: every kind expected so far, right after the next pass is queued - in practice the
 * prompt's pass, while the device runs it. On a large model that pass outlasts the rehearsals;
 * on the demo it is launch-bound, so they add to the time before the first token (~0.25 ms a
 * kind). Measured against the alternatives (docs/PERF.md, session 11): only while the device is
 * busy (session 10: one kind fit, the rest were recorded in the middle of decoding) and on a
 * thread of the session's own (the captures there slowed the session's own launches by more than
 * they saved: x0.94 - 0.97 of plain decoding against x0.97 - 0.98 inline).
 *
 * NEMOTRON_REHEARSE=0 turns rehearsals off (to compare).
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

/* The tokens of a rehearsal: never read (nt_pass.rehearse), but a pass of tokens names some. */
static const int32_t unread_tokens[NEMOTRON_SPEC_MAX + 1];

void nt_rehearsals_init(nemotron_session *s) {
    const char *off = getenv("NEMOTRON_REHEARSE");
    s->rehearsals.on = s->model->fwd.be->programs && !(off && !strcmp(off, "0"));
}

void nt_session_expect(nemotron_session *s, enum nt_pass_type type, int n, enum nt_logits want) {
    struct nt_rehearsals *r = &s->rehearsals;
    int most = type == NT_PASS_VERIFY ? s->verify_max : s->pass_max;
    if (!r->on || n < 1 || n > most || n > NEMOTRON_SPEC_MAX + 1 || (type == NT_PASS_MTP && !s->mtp))
        return;
    int known = 0;
    for (int i = 0; i < r->n_expected && !known; i++)
        known = r->expected[i].type == type && r->expected[i].n == n && r->expected[i].want == want;
    if (!known && r->n_expected < NT_EXPECTED_MAX) r->expected[r->n_expected++] = (struct nt_expected){type, n, want};
}

/* Records one kind's program: its pass, built as the session builds it, marked a rehearsal. */
static void rehearse(nemotron_session *s, const struct nt_expected *e) {
    const struct nt_forward *f = &s->model->fwd;
    struct nt_pass p = e->type == NT_PASS_MTP
                           ? nt_session_mtp_pass(s, 0, unread_tokens, e->n, e->want)
                           : nt_session_main_pass(s, unread_tokens, e->n, e->want, e->type == NT_PASS_VERIFY);
    p.rehearse = 1;
    nt_pass_enter();
    if (p.mtp) nt_forward_mtp_pass(f, &s->state, &s->acts, &p);
    else nt_forward_pass(f, &s->state, &s->acts, &p);
    nt_pass_leave();
}

void nt_session_rehearse(nemotron_session *s, int after_mtp) {
    struct nt_rehearsals *r = &s->rehearsals;
    if (!r->on) return;
    if (after_mtp) r->mtp_ran = 1;
    struct nt_backend *be = s->model->fwd.be;
    for (int i = 0; i < r->n_expected && !be->fault[0];) {
        /* an MTP kind after the session's first MTP pass, which makes what its program needs */
        if (r->expected[i].type == NT_PASS_MTP && !r->mtp_ran) {
            i++;
            continue;
        }
        struct nt_expected e = r->expected[i];
        r->n_expected--;
        memmove(&r->expected[i], &r->expected[i + 1], (size_t)(r->n_expected - i) * sizeof r->expected[0]);
        rehearse(s, &e);
    }
}
