/* slots.h - generation slots and the queue in front of them.
 *
 * A slot is a worker thread that owns one nemotron_session on the shared model. Requests become
 * jobs: the HTTP side fills a job's input, submits it, and reads its output as the worker writes
 * it (text, counts, the finish reason) under the job's mutex; the condition variable wakes the
 * reader after every token. Jobs wait in one FIFO, bounded, served in arrival order. A job is
 * shared by the two sides through a reference count; the last release frees it.
 */
#ifndef NT_SERVER_SLOTS_H
#define NT_SERVER_SLOTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nemotron.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "server/request.h"

struct job {
    /* input: set before slot_pool_submit, read-only afterwards */
    struct server_request req;
    int32_t *prompt;                 /* owned */
    int n_prompt;
    int checkpoint;                  /* a prompt position that also gets a cache snapshot (a chat's
                                      * history without the generation prompt: the next turn's
                                      * prompt starts with it); 0: none */
    int thinking_in_prompt;          /* the chat's generation prompt opened <think> */
    /* output: written by the worker under mu; cv is broadcast after every change */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;                      /* generated text, stop string and stop ids cut off */
    size_t len, cap;
    size_t ready;                    /* text[0..ready) can be shown: no stop string can begin in it */
    int n_generated, n_cached;       /* tokens made; prompt tokens restored from the cache */
    int started, done, failed;
    const char *finish_reason;       /* "stop" or "length" once done without failure */
    struct api_error error;          /* once done with failure */
    atomic_int cancelled;            /* the client left: the worker stops at its next step */
    int refs;                        /* under mu */
    struct job *next;                /* the queue's link, under the pool's mutex */
};

/* A new job holding req (moved in: the caller's copy is emptied) and prompt (taken over), with
 * one reference for the caller. NULL when out of memory (nothing is taken over then). */
struct job *job_new(struct server_request *req, int32_t *prompt, int n_prompt);
void job_release(struct job *j);
void job_cancel(struct job *j);

struct slot_pool;

/* Speculative decoding in the slots (nemotron_spec_*): max 0 is off; else every slot's session
 * verifies up to max drafts, by default the n-gram drafter's, or draft_model's (a session of it
 * per slot) when set, or the model's MTP step's when mtp is set. A request may turn it off or
 * choose the drafter (request.h). */
struct slot_spec {
    int max;
    nemotron_model *draft_model;     /* NULL: none; else the caller's, outliving the pool */
    int mtp;                         /* 1: every slot's session keeps the MTP step (the model has
                                      * one: nemotron_model_mtp_layers), which drafts by default */
};

/* Starts n_slots workers, each with a session of n_ctx positions on model; jobs beyond them wait
 * in a queue of at most queue_max. 0 on success; -1 with errbuf filled. */
int slot_pool_start(struct slot_pool **out, nemotron_model *model, nemotron_tokenizer *tok, int n_slots, int n_ctx,
                    int queue_max, const struct slot_spec *spec, struct prefix_cache *cache, struct metrics *metrics,
                    char *errbuf, size_t errlen);
/* Whether the pool can decode r as its "speculative" field asks (a drafter the server has, at
 * most its K). 0, or -1 with a 400 in *e. */
int slot_pool_check_spec(const struct slot_pool *p, const struct server_request *r, struct api_error *e);
/* Queues j (taking a reference of its own). -1 when the queue is full, -2 when the pool stops. */
int slot_pool_submit(struct slot_pool *p, struct job *j);
/* Refuses new jobs, fails the queued ones (503), stops the running ones at their next step and
 * joins the workers. The pool stays valid (submit refuses) until slot_pool_free, so HTTP threads
 * still running may use it. */
void slot_pool_stop(struct slot_pool *p);
/* Stops the pool if it runs, frees the sessions and the pool; NULL is a no-op. */
void slot_pool_free(struct slot_pool *p);
int slot_pool_n_ctx(const struct slot_pool *p);
/* NULL while the device works; after a device error that left a slot without a session (the
 * device could not make a new one), the fault's message (it stays: nothing repairs a device). */
const char *slot_pool_device_fault(const struct slot_pool *p);

/* The length of the longest proper tail of s[0..len) that is a beginning of marker: text that
 * may still grow into the marker and so must be held back. */
size_t partial_suffix(const char *s, size_t len, const char *marker);

#endif /* NT_SERVER_SLOTS_H */
