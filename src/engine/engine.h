/* engine.h - the structs behind the public handles, shared by model.c and session.c.
 *
 * A nemotron_model owns the parsed config, the opened model source (mapped tensor table and
 * carried files), the bound weights and the backend; it is immutable once loaded. A nemotron_session owns one sequence slot's state and
 * the activation buffers of its passes, and borrows the model.
 */
#ifndef NT_ENGINE_H
#define NT_ENGINE_H

#include "../forward.h"
#include "../model/source.h"

struct nemotron_model {
    struct nt_err err;
    int loaded;                       /* 0: the handle only carries a load failure's message */
    struct nt_config cfg;
    struct nt_model_source src;       /* the directory or .nemo: table and carried files */
    struct nt_weights w;
    struct nt_backend *be;
    struct nt_forward fwd;
    int32_t stop_ids[NT_MAX_EOS];     /* generation_config.json's eos_token_id, else config's */
    int n_stop;
};

/* The kinds of pass a session runs, as far as a backend's pass programs tell them apart. */
enum nt_pass_type {
    NT_PASS_MAIN,                     /* the model's layers over tokens, e.g. a decode step */
    NT_PASS_VERIFY,                   /* the same with snapshots (nemotron_session_verify) */
    NT_PASS_MTP                       /* the MTP step (nt_forward_mtp_pass) */
};
struct nt_expected {
    enum nt_pass_type type;
    int n;
    enum nt_logits want;
};
/* rehearsal.c: a decode step, the verify sizes of 1, 2, 4, 8 and 16 drafts, two MTP sizes */
#define NT_EXPECTED_MAX 12

/* A session's rehearsals (rehearsal.c): the kinds it expects and has not rehearsed yet, in the
 * order they will likely come. */
struct nt_rehearsals {
    int on;                           /* the backend keeps programs (and NEMOTRON_REHEARSE is not 0) */
    struct nt_expected expected[NT_EXPECTED_MAX];
    int n_expected;
    int mtp_ran;                      /* an MTP pass ran, so its kinds can be rehearsed */
};

struct nemotron_session {
    struct nt_err err;
    nemotron_model *model;
    int ready;                        /* 0: the handle only carries a creation failure's message */
    int n_ctx, pass_max, pos;
    int verify_max;                   /* positions a verify pass may hold (state.snap_max) */
    struct nt_state state;
    struct nt_acts acts;
    float *last_logits;               /* host [V] */
    /* The last logits while they are only on the device (their pass's row of acts.logits), read
     * back into last_logits when first asked for (logits_fetch): a decode step needs only their
     * argmax, and the copy cost it ~0.07 ms on the GPU (session 22). NULL: last_logits holds them. */
    const float *logits_dev;
    int has_last;
    int32_t last_argmax;
    /* The verify pass that accept may still cut short: its first position and its size (0: none,
     * or it was accepted or superseded); the last logits, their argmax and has_last from before it
     * (accept(0) puts them back); every position's argmax (host [verify_max]). */
    int verify_pos0, verify_n;
    float *prev_logits;
    int prev_has_last;
    int32_t prev_argmax;
    int32_t *verify_argmax;
    float *hidden_check;              /* host [H]: a pass's hidden rows read back for finiteness */
    int broken;                       /* a device error happened in one of its passes: refused until
                                       * freed (its state is whatever the device left) */
    /* The MTP step (made with nemotron_session_params.mtp). Every main pass of tokens leaves its
     * final hidden rows in acts.hidden; the MTP has run positions [0, pos - mtp_rows), and the
     * last mtp_rows positions wait there, mtp_next holding the token after each but the last
     * (the next pass's first token, or a draft's start, gives that one). While mtp_follow is set
     * the waiting rows run before the next main pass; cleared (a speculative decoder that
     * switched itself off), they are dropped instead, and the MTP skips those positions. */
    int mtp, mtp_follow, mtp_rows;
    int32_t *mtp_next;                /* host [pass_max] */
    struct nt_rehearsals rehearsals;
};

/* A main pass of tokens (snap: a verify pass) and an MTP pass as the session runs them, built in
 * one place so that a rehearsal of a kind (rehearsal.c) is the kind's pass. */
struct nt_pass nt_session_main_pass(const nemotron_session *s, const int32_t *tokens, int n, enum nt_logits want,
                                    int snap);
struct nt_pass nt_session_mtp_pass(const nemotron_session *s, int pos0, const int32_t *tokens, int n,
                                   enum nt_logits want);

/* Sets up the session's rehearsals (after its model is set). */
void nt_rehearsals_init(nemotron_session *s);
/* Adds a kind to the passes the session expects (duplicates and kinds it cannot run are
 * ignored); nothing on a backend that keeps no pass programs. */
void nt_session_expect(nemotron_session *s, enum nt_pass_type type, int n, enum nt_logits want);
/* Called after a pass was queued (after_mtp: an MTP pass): rehearses the kinds expected and not
 * rehearsed yet, while the device runs the pass. */
void nt_session_rehearse(nemotron_session *s, int after_mtp);

/* Drafts up to k tokens with the session's MTP step (a session made with mtp), `next` being the
 * token after the session's last position (picked, not evaluated): the step runs the waiting
 * rows with next, which drafts the first, then k - 1 more steps chained on its own outputs, each
 * drafting one. *n is k, or 0 when no row waits (after a reset, embeddings input, or a restore
 * without MTP rows: plain decoding must evaluate one token first), or fewer when a step's logits
 * are degenerate (the backend's argmax -1: the drafts before it). The session's own state and
 * logits do not change; its MTP state is as after the waiting rows. */
nemotron_status nt_session_mtp_draft(nemotron_session *s, int32_t next, int k, int32_t *drafts, int *n);
/* Runs every waiting row but the last through the MTP step now (their next tokens are known), so
 * that what waits for the next token is one row: a prompt's MTP work is done with the prompt. */
nemotron_status nt_session_mtp_settle(nemotron_session *s);
/* Runs the waiting rows through the MTP step now, `next` being the token after the last, without
 * logits: a decoder whose first steps are plain keeps the prompt in the step's context. */
nemotron_status nt_session_mtp_catch_up(nemotron_session *s, int32_t next);
/* The MTP step's logits for every waiting row (the tests' window on the step): runs them as
 * nt_session_mtp_draft does, with next after the last, into logits[rows][vocab]; *rows = how many
 * (0: none waited). logits must hold pass_max rows. */
nemotron_status nt_session_mtp_logits(nemotron_session *s, int32_t next, float *logits, int *rows);

/* A session's state at one position, on the model's backend (nemotron.h). */
struct nemotron_snapshot {
    nemotron_model *model;
    int pos;
    void *recurrent;                  /* resident: per Mamba layer, in layer order, the conv ring
                                       * then the SSM state; NULL when the model has no Mamba layer */
    void *kv;                         /* resident: per attention layer, K rows [0, pos) then V rows
                                       * [0, pos); NULL when there are none */
    float *logits;                    /* host [V]: the session's last logits */
    int has_last;
    int32_t argmax;
    /* a session with MTP's: the MTP KV rows [0, pos - mtp_rows) then its waiting hidden rows
     * (resident, NULL when it had no MTP), their count and the tokens after them */
    void *mtp;
    int mtp_rows;
    int32_t *mtp_next;
};

/* The memory a snapshot holds (device state plus its host logits), in bytes; 0 for NULL. The
 * server's prefix cache sizes its budget by it (not public: the header is frozen for now). */
size_t nt_snapshot_bytes(const nemotron_snapshot *snap);

/* The speculative decoder's clock (speculative.c), in seconds: it times plain and verify steps for
 * the pay check, which only decides how fast tokens come, never which. CLOCK_MONOTONIC; a test
 * replaces it with a deterministic one (tests/unit/test_spec.c), nothing else does. */
extern double (*nt_spec_clock)(void);

#endif /* NT_ENGINE_H */
