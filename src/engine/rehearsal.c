/* rehearsal.c - a session's rehearsals: the pass kinds it expects, recorded as pass programs on
 * a thread of the session's own while its passes go on (backend.h: nt_backend.programs,
 * nt_pass.rehearse).
 *
 * Why: the CUDA backend records a kind's program (a CUDA graph) on the kind's second pass, and
 * recording one costs the host 0.3 - 1 ms on the demo model (docs/PERF.md) - as much as 2 to 5
 * of its decode steps. Speculative decoding meets a new kind at every new draft length, so a
 * 256-token run paid 5 - 6 recordings, 3 - 6 % of it. Rehearsed beforehand, the kind's first pass
 * replays its program (checked against itself as it comes, backend.h end_pass).
 *
 * Why a thread: rehearsing in the waits of the session's own thread fit only while the device
 * ran a long pass the host had queued ahead; on a small model the prompt's pass is launch-bound
 * (the device ends as the host ends queuing it), so a short run still recorded its verify and MTP
 * kinds in the middle of decoding (session 10: 1.3 - 2 ms of a 49 ms run). On a thread of its own
 * a rehearsal takes another core's time, and the session's thread goes on.
 *
 * NEMOTRON_REHEARSE, for development and tests: unset, rehearsals run on the session's rehearsal
 * thread; "inline" runs them on the calling thread after each pass is queued (the order of events
 * fixed: tests that count confirmed programs); "0" turns them off.
 */
#include "engine.h"
#include "../log.h"

#include <stdlib.h>
#include <string.h>

/* The tokens of a rehearsal: never read (nt_pass.rehearse), but a pass of tokens names some. */
static const int32_t unread_tokens[NEMOTRON_SPEC_MAX + 1];

enum rehearse_where { REHEARSE_THREAD, REHEARSE_INLINE, REHEARSE_OFF };

static enum rehearse_where where_from_env(void) {
    const char *v = getenv("NEMOTRON_REHEARSE");
    if (!v || !*v) return REHEARSE_THREAD;
    if (!strcmp(v, "inline")) return REHEARSE_INLINE;
    if (!strcmp(v, "0")) return REHEARSE_OFF;
    nt_log(NEMOTRON_LOG_WARN, "NEMOTRON_REHEARSE=%s: not 0 or inline; rehearsing on a thread", v);
    return REHEARSE_THREAD;
}

void nt_rehearsals_init(nemotron_session *s) {
    struct nt_rehearsals *r = &s->rehearsals;
    pthread_mutex_init(&r->lock, NULL);
    r->where = s->model->fwd.be->programs ? (int)where_from_env() : REHEARSE_OFF;
    r->lock_made = 1;
}

void nt_rehearsals_end(nemotron_session *s) {
    struct nt_rehearsals *r = &s->rehearsals;
    if (!r->lock_made) return;
    pthread_mutex_lock(&r->lock);
    r->n_expected = 0; /* the thread takes nothing more */
    pthread_mutex_unlock(&r->lock);
    if (r->started) pthread_join(r->thread, NULL);
    r->started = 0;
    pthread_mutex_destroy(&r->lock);
    r->lock_made = 0;
}

void nt_session_expect(nemotron_session *s, enum nt_pass_type type, int n, enum nt_logits want) {
    struct nt_rehearsals *r = &s->rehearsals;
    int most = type == NT_PASS_VERIFY ? s->verify_max : s->pass_max;
    if (r->where == REHEARSE_OFF || n < 1 || n > most || n > NEMOTRON_SPEC_MAX + 1 || (type == NT_PASS_MTP && !s->mtp))
        return;
    pthread_mutex_lock(&r->lock);
    int known = 0;
    for (int i = 0; i < r->n_expected && !known; i++)
        known = r->expected[i].type == type && r->expected[i].n == n && r->expected[i].want == want;
    if (!known && r->n_expected < NT_EXPECTED_MAX) r->expected[r->n_expected++] = (struct nt_expected){type, n, want};
    pthread_mutex_unlock(&r->lock);
}

/* Records one kind's program: its pass, built as the session builds it, marked a rehearsal. Reads
 * only what the session fixed at its creation (the model, its buffers), never its position. */
static void rehearse(nemotron_session *s, const struct nt_expected *e) {
    const struct nt_forward *f = &s->model->fwd;
    struct nt_pass p = e->type == NT_PASS_MTP
                           ? nt_session_mtp_pass(s, 0, unread_tokens, e->n, e->want)
                           : nt_session_main_pass(s, 0, unread_tokens, e->n, e->want, e->type == NT_PASS_VERIFY);
    p.rehearse = 1;
    nt_pass_enter();
    if (p.mtp) nt_forward_mtp_pass(f, &s->state, &s->acts, &p);
    else nt_forward_pass(f, &s->state, &s->acts, &p);
    nt_pass_leave();
}

/* The index of the next kind that can be rehearsed now, or -1 (r->lock held): an MTP kind waits
 * for the session's first MTP pass, which makes what its program needs. */
static int next_locked(const struct nt_rehearsals *r) {
    for (int i = 0; i < r->n_expected; i++)
        if (r->expected[i].type != NT_PASS_MTP || r->mtp_ran) return i;
    return -1;
}

/* Rehearses kinds until none is left that can be; `working` is cleared under the lock as it
 * stops, so that a kind expected afterwards starts the thread again. */
static void rehearse_all(nemotron_session *s) {
    struct nt_rehearsals *r = &s->rehearsals;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        int i = s->model->fwd.be->fault[0] ? -1 : next_locked(r);
        struct nt_expected e = i >= 0 ? r->expected[i] : (struct nt_expected){0};
        if (i >= 0) {
            r->n_expected--;
            memmove(&r->expected[i], &r->expected[i + 1], (size_t)(r->n_expected - i) * sizeof r->expected[0]);
        } else {
            r->working = 0;
        }
        pthread_mutex_unlock(&r->lock);
        if (i < 0) return;
        rehearse(s, &e);
    }
}

static void *rehearsal_thread(void *arg) {
    rehearse_all(arg);
    return NULL;
}

void nt_session_rehearse(nemotron_session *s, int after_mtp) {
    struct nt_rehearsals *r = &s->rehearsals;
    if (r->where == REHEARSE_OFF) return;
    pthread_mutex_lock(&r->lock);
    if (after_mtp) r->mtp_ran = 1;
    int start = !r->working && next_locked(r) >= 0;
    if (start) r->working = 1;
    pthread_mutex_unlock(&r->lock);
    if (!start) return;
    if (r->where == REHEARSE_INLINE) return rehearse_all(s);
    if (r->started) pthread_join(r->thread, NULL); /* the last one, done (it cleared working) */
    r->started = pthread_create(&r->thread, NULL, rehearsal_thread, s) == 0;
    if (!r->started) { /* no thread to be had: the kinds are recorded by their passes, as unrehearsed */
        pthread_mutex_lock(&r->lock);
        r->working = 0;
        pthread_mutex_unlock(&r->lock);
    }
}
