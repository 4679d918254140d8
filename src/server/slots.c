/* slots.c - the generation workers and their queue (slots.h).
 *
 * Each worker takes the oldest queued job, restores the longest cached prefix of its prompt into
 * its session, evaluates the rest of the prompt one pass at a time (so a cancelled job stops
 * within one pass), snapshots the prompt's end into the cache, then samples token by token,
 * publishing text to the job after each. A device error fails the job (500); the worker replaces
 * its session (a broken session refuses every call) and goes on. When the device cannot even give
 * it a new session (a GPU's context after an illegal address is lost for good), the pool records
 * the fault: the server then refuses new generations (503) and says why in /health.
 *
 * With speculation the tokens come from a decoder (nemotron_spec_*) several per pass, and are
 * published one by one exactly as sampled ones (they are the same tokens). The decoder starts at
 * position 0 and reads the whole prompt as its drafters' history, so such a job does not restore
 * a cached prefix; it still leaves its prompt's snapshots in the cache for the jobs after it.
 */
#include "server/slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Stop ids a model may list (generation configs list 2 or 3). */
#define MAX_STOP_IDS 16

struct slot_pool {
    nemotron_model *model;
    nemotron_tokenizer *tok;
    struct prefix_cache *cache;
    struct metrics *metrics;
    int n_slots, n_ctx, vocab, queue_max;
    int32_t stop_ids[MAX_STOP_IDS];
    int n_stop_ids;
    pthread_t *threads;
    nemotron_session **sessions;
    nemotron_session **drafts;       /* the draft model's session per slot, or NULL */
    struct slot_spec spec;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;         /* the queue, oldest first */
    int queued, stopping, n_started;
    atomic_uint_fast64_t seed_counter;
    /* the device fault that cost a slot its session: written once under mu, then flagged */
    char device_fault[512];
    atomic_int device_failed;
};

struct worker_arg {
    struct slot_pool *pool;
    int index;
};

size_t partial_suffix(const char *s, size_t len, const char *marker) {
    size_t ml = strlen(marker);
    for (size_t k = ml - 1; k > 0; k--)
        if (k <= len && !memcmp(s + len - k, marker, k)) return k;
    return 0;
}

struct job *job_new(struct server_request *req, int32_t *prompt, int n_prompt) {
    struct job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    return j;
}

void job_release(struct job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    request_free(&j->req);
    free(j->prompt);
    free(j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_cancel(struct job *j) {
    atomic_store(&j->cancelled, 1);
}

/* Ends a job: a finish reason, or a failure (err != NULL). */
static void job_finish(struct job *j, const char *reason, const struct api_error *err) {
    pthread_mutex_lock(&j->mu);
    if (err) {
        j->failed = 1;
        j->error = *err;
    } else {
        j->finish_reason = reason;
        j->ready = j->len;
    }
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Fails a job with an error of OpenAI's shape; code may be NULL. */
static void job_fail_code(struct job *j, int status, const char *type, const char *code, const char *fmt,
                          const char *detail) {
    struct api_error e;
    memset(&e, 0, sizeof e);
    api_fail(&e, status, type, code, NULL, fmt, detail);
    job_finish(j, NULL, &e);
}

static void job_fail(struct job *j, int status, const char *type, const char *fmt, const char *detail) {
    job_fail_code(j, status, type, NULL, fmt, detail);
}

/* Appends a piece of generated text (the text of one more token when is_token, else bytes the
 * decoder held back); cuts at a stop string. Returns 1 when one was hit. */
static int job_append(struct job *j, const char *piece, size_t n, int is_token) {
    pthread_mutex_lock(&j->mu);
    int ok = 1;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *grown = realloc(j->text, cap);
        if (grown) {
            j->text = grown;
            j->cap = cap;
        } else {
            ok = 0;
        }
    }
    int hit = 0;
    if (ok) {
        size_t before = j->len;
        memcpy(j->text + j->len, piece, n);
        j->len += n;
        j->text[j->len] = 0;
        /* a stop string can begin up to its length - 1 bytes before the new piece; the earliest
         * one found ends the text */
        size_t held = 0, full = j->len, cut = full;
        for (int i = 0; i < j->req.n_stop; i++) {
            const char *stop = j->req.stop[i];
            size_t sl = strlen(stop), from = before >= sl ? before - sl + 1 : 0;
            char *at = memmem(j->text + from, full - from, stop, sl);
            if (at && (size_t)(at - j->text) < cut) {
                cut = (size_t)(at - j->text);
                hit = 1;
            }
        }
        j->len = cut;
        j->text[j->len] = 0;
        for (int i = 0; !hit && i < j->req.n_stop; i++) {
            size_t k = partial_suffix(j->text, j->len, j->req.stop[i]);
            if (k > held) held = k;
        }
        j->ready = j->len - held;
    }
    j->n_generated += is_token;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return hit;
}

static int should_stop(struct slot_pool *p, struct job *j) {
    return atomic_load(&j->cancelled) || __atomic_load_n(&p->stopping, __ATOMIC_ACQUIRE);
}

/* Evaluates tokens[0..n) in passes (through the decoder dec when not NULL), checking for
 * cancellation between them. 0, 1 (cancelled) or -1 with the status of a failed eval. */
static int eval_in_passes(struct slot_pool *p, struct job *j, nemotron_session *s, nemotron_spec *dec,
                          const int32_t *tokens, int n, nemotron_status *st) {
    int pass = nemotron_session_pass_max(s);
    for (int at = 0; at < n; at += pass) {
        if (should_stop(p, j)) return 1;
        int k = n - at < pass ? n - at : pass;
        *st = dec ? nemotron_spec_prefill(dec, tokens + at, k) : nemotron_session_eval(s, tokens + at, k, NULL);
        if (*st) return -1;
    }
    return 0;
}

/* A slot's session of model: the pool's length; verify passes of the pool's K + 1 positions and
 * the MTP step when the pool drafts with it for the target (verify), neither for a draft. 0, or
 * the status with *out holding the message. */
static nemotron_status open_session(struct slot_pool *p, nemotron_model *model, int verify, nemotron_session **out) {
    nemotron_session_params params = nemotron_session_default_params();
    params.n_ctx = p->n_ctx;
    params.verify_max = verify && p->spec.max ? p->spec.max + 1 : 0;
    params.mtp = verify && p->spec.max && p->spec.mtp;
    nemotron_status st = nemotron_session_new(model, &params, out);
    if (st == NEMOTRON_ERR_ARG && params.verify_max > nemotron_session_pass_max(*out)) {
        /* the backend's default pass is shorter than the verify pass (K 64 on the CPU): it grows */
        nemotron_session_free(*out);
        params.pass_max = params.verify_max;
        st = nemotron_session_new(model, &params, out);
    }
    return st;
}

enum drafter_kind { DRAFTER_NONE, DRAFTER_NGRAM, DRAFTER_MODEL, DRAFTER_MTP };

/* The drafter a job runs with; *k its K. */
static enum drafter_kind job_drafter(const struct slot_pool *p, const struct server_request *r, int *k) {
    *k = r->spec_max ? r->spec_max : p->spec.max;
    switch (r->speculative) {
    case REQUEST_SPEC_OFF: return DRAFTER_NONE;
    case REQUEST_SPEC_NGRAM: return DRAFTER_NGRAM;
    case REQUEST_SPEC_DRAFT: return DRAFTER_MODEL;
    case REQUEST_SPEC_MTP: return DRAFTER_MTP;
    case REQUEST_SPEC_DEFAULT:
    case REQUEST_SPEC_ON: break;
    }
    return !p->spec.max ? DRAFTER_NONE : p->spec.draft_model ? DRAFTER_MODEL : p->spec.mtp ? DRAFTER_MTP : DRAFTER_NGRAM;
}

int slot_pool_check_spec(const struct slot_pool *p, const struct server_request *r, struct api_error *e) {
    int k;
    enum drafter_kind drafter = job_drafter(p, r, &k);
    if (r->speculative == REQUEST_SPEC_OFF || (r->speculative == REQUEST_SPEC_DEFAULT && !r->spec_max)) return 0;
    if (!p->spec.max)
        return api_fail(e, 400, "invalid_request_error", NULL, "speculative",
                        "speculative decoding is off on this server (start it with --spec ngram, --spec mtp or "
                        "--draft-model MODEL)");
    if (drafter == DRAFTER_MODEL && !p->spec.draft_model)
        return api_fail(e, 400, "invalid_request_error", NULL, "speculative.type",
                        "this server has no draft model (start it with --draft-model MODEL); \"ngram\" needs none");
    /* the MTP step's state is part of every slot's session, made (or not) at start-up */
    if (drafter == DRAFTER_MTP && !p->spec.mtp)
        return api_fail(e, 400, "invalid_request_error", NULL, "speculative.type",
                        "this server does not draft with the model's MTP layers (start it with --spec mtp); "
                        "\"ngram\" needs nothing");
    if (k > p->spec.max)
        return api_fail(e, 400, "invalid_request_error", NULL, "speculative.max",
                        "'speculative.max' %d is more than this server's --spec-max %d", k, p->spec.max);
    return 0;
}

/* The device could not give a slot a new session after a fault: the first such fault is kept. */
static void record_device_fault(struct slot_pool *p, const char *fault) {
    pthread_mutex_lock(&p->mu);
    if (!atomic_load(&p->device_failed)) {
        snprintf(p->device_fault, sizeof p->device_fault, "%s", fault);
        atomic_store(&p->device_failed, 1);
        atomic_store(&p->metrics->device_failed, 1);
    }
    pthread_mutex_unlock(&p->mu);
    fprintf(stderr, "nemotron serve: the device failed (%s); new generations are refused\n", fault);
}

const char *slot_pool_device_fault(const struct slot_pool *p) {
    return atomic_load(&p->device_failed) ? p->device_fault : NULL;
}

/* Runs one job on slot `index`. A device error replaces the slot's sessions. */
static void run_job(struct slot_pool *p, int index, struct job *j) {
    nemotron_session **sp = &p->sessions[index];
    nemotron_session *s = *sp;
    struct metrics *m = p->metrics;
    nemotron_sampler_params sp_params = j->req.sampling;
    if (!j->req.seed_given) sp_params.seed = (uint64_t)time(NULL) * 1000003u + atomic_fetch_add(&p->seed_counter, 1);
    nemotron_sampler *sampler = NULL;
    nemotron_status st = nemotron_sampler_new(&sp_params, p->vocab, &sampler);
    if (st) {
        job_fail(j, 400, "invalid_request_error", "%s", nemotron_sampler_errmsg(sampler));
        nemotron_sampler_free(sampler);
        return;
    }
    nemotron_detok *dt = nemotron_detok_new(p->tok, 0);
    if (!dt) {
        nemotron_sampler_free(sampler);
        job_fail(j, 500, "server_error", "%s", "out of memory");
        return;
    }
    int n_ctx = nemotron_session_n_ctx(s);
    int n_max = n_ctx - j->n_prompt + 1;   /* the last generated token is never evaluated */
    if (j->req.max_tokens && j->req.max_tokens < n_max) n_max = j->req.max_tokens;
    /* speculation: a decoder on the session from position 0 (no cached prefix restored) */
    nemotron_spec *dec = NULL;
    int k;
    enum drafter_kind drafter = job_drafter(p, &j->req, &k);
    int cached = 0;
    if (drafter != DRAFTER_NONE) {
        nemotron_session_reset(s);
        nemotron_spec_params sparams = nemotron_spec_default_params();
        sparams.spec_max = k;
        if (drafter == DRAFTER_MODEL) {
            sparams.draft = p->drafts[index];
            nemotron_session_reset(sparams.draft);
        }
        sparams.mtp = drafter == DRAFTER_MTP;
        st = nemotron_spec_new(s, sampler, &sparams, &dec);
        if (st) {
            job_fail(j, 500, "server_error", "speculative decoding: %s", nemotron_spec_errmsg(dec));
            nemotron_spec_free(dec);
            nemotron_detok_free(dt);
            nemotron_sampler_free(sampler);
            return;
        }
    } else {
        cached = prefix_cache_restore(p->cache, s, j->prompt, j->n_prompt);
        if (!cached) nemotron_session_reset(s);
    }
    pthread_mutex_lock(&j->mu);
    j->n_cached = cached;
    j->started = 1;
    pthread_mutex_unlock(&j->mu);
    int rc = 0;
    if (j->checkpoint > cached && j->checkpoint < j->n_prompt) {
        rc = eval_in_passes(p, j, s, dec, j->prompt + cached, j->checkpoint - cached, &st);
        if (!rc) prefix_cache_put(p->cache, s, j->prompt, j->checkpoint);
        if (!rc) cached = j->checkpoint;
    }
    if (!rc && cached < j->n_prompt) rc = eval_in_passes(p, j, s, dec, j->prompt + cached, j->n_prompt - cached, &st);
    if (!rc) prefix_cache_put(p->cache, s, j->prompt, j->n_prompt);
    atomic_fetch_add(&m->prompt_tokens, (uint64_t)j->n_prompt);
    atomic_fetch_add(&m->prompt_tokens_evaluated, (uint64_t)(j->n_prompt - j->n_cached));
    for (int i = 0; i < j->n_prompt; i++) nemotron_sampler_accept(sampler, j->prompt[i]);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *reason = NULL;
    /* the decoder's tokens not published yet: next[at..n_next) */
    int32_t next[NEMOTRON_SPEC_MAX + 1];
    int at = 0, n_next = 0;
    while (!rc && !reason) {
        if (should_stop(p, j)) {
            rc = 1;
            break;
        }
        int32_t t;
        if (dec) {
            if (at == n_next) {
                /* never more tokens than the limit leaves (the decoder drafts within it) */
                int room = n_max - j->n_generated;
                at = 0;
                st = nemotron_spec_next(dec, next, room > 1 ? room : 1, &n_next);
                if (st) {
                    rc = -1;
                    break;
                }
            }
            t = next[at++];       /* sampled and shown to the sampler by the decoder */
        } else {
            t = nemotron_sampler_is_greedy(sampler) ? nemotron_session_argmax(s) /* the logits stay on a GPU */
                                                    : nemotron_sampler_sample(sampler, nemotron_session_logits(s));
            if (t < 0) { /* no logits came back: the device failed (the session's message says so) */
                rc = -1;
                break;
            }
        }
        int is_stop_id = 0;
        for (int i = 0; i < p->n_stop_ids; i++) is_stop_id |= t == p->stop_ids[i];
        if (is_stop_id) {
            reason = "stop";
            break;
        }
        if (!dec) nemotron_sampler_accept(sampler, t);
        atomic_fetch_add(&m->generated_tokens, 1);
        const char *piece = nemotron_detok_push(dt, t);
        if (job_append(j, piece ? piece : "", piece ? strlen(piece) : 0, 1)) reason = "stop";
        else if (j->n_generated >= n_max) reason = "length";
        else if (!dec) {
            st = nemotron_session_eval(s, &t, 1, NULL);
            if (st) rc = -1;
        }
    }
    if (!rc && !strcmp(reason, "length")) {
        const char *rest = nemotron_detok_flush(dt);
        if (rest[0]) job_append(j, rest, strlen(rest), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    atomic_fetch_add(&m->gen_micros, (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000));
    if (dec) {
        nemotron_spec_stats stats = nemotron_spec_get_stats(dec);
        atomic_fetch_add(&m->spec_requests, 1);
        atomic_fetch_add(&m->spec_drafted, (uint64_t)stats.drafted);
        atomic_fetch_add(&m->spec_accepted, (uint64_t)stats.accepted);
    }
    if (rc == 1) {
        job_fail(j, 503, "server_error", "%s", atomic_load(&j->cancelled) ? "the request was cancelled" : "the server is shutting down");
    } else if (rc < 0) {
        const char *why = dec ? nemotron_spec_errmsg(dec) : nemotron_session_errmsg(s);
        if (st == NEMOTRON_ERR_DEVICE) job_fail_code(j, 500, "server_error", "device_error", "%s", why);
        else job_fail(j, 400, "invalid_request_error", "%s", why);
        if (st == NEMOTRON_ERR_DEVICE) {
            /* the fault as the device reported it, without the session's advice to its caller */
            char fault[sizeof p->device_fault];
            snprintf(fault, sizeof fault, "%s", why);
            fault[strcspn(fault, ";")] = 0;
            /* a broken session refuses every call from now on: make fresh ones for this slot (the
             * decoder's failure may be its draft session's) */
            nemotron_session_free(s);
            *sp = NULL;
            if (open_session(p, p->model, 1, sp) != NEMOTRON_OK) {
                nemotron_session_free(*sp);
                *sp = NULL;
            }
            if (p->drafts && p->drafts[index]) {
                nemotron_session_free(p->drafts[index]);
                p->drafts[index] = NULL;
                if (open_session(p, p->spec.draft_model, 0, &p->drafts[index]) != NEMOTRON_OK) {
                    nemotron_session_free(p->drafts[index]);
                    p->drafts[index] = NULL;
                    nemotron_session_free(*sp);  /* a slot without its draft session serves no one */
                    *sp = NULL;
                }
            }
            if (!*sp) record_device_fault(p, fault);
        }
    } else {
        job_finish(j, reason, NULL);
    }
    nemotron_spec_free(dec);
    nemotron_detok_free(dt);
    nemotron_sampler_free(sampler);
}

static void *worker(void *arg) {
    struct worker_arg *wa = arg;
    struct slot_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        struct job *j = p->head;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        p->queued--;
        atomic_fetch_sub(&p->metrics->queued, 1);
        atomic_fetch_add(&p->metrics->running, 1);
        pthread_mutex_unlock(&p->mu);
        if (!p->sessions[index]) job_fail(j, 500, "server_error", "%s", "this slot lost its session after a device error");
        else if (atomic_load(&j->cancelled)) job_fail(j, 503, "server_error", "%s", "the request was cancelled");
        else run_job(p, index, j);
        atomic_fetch_sub(&p->metrics->running, 1);
        job_release(j);
    }
    return NULL;
}

int slot_pool_start(struct slot_pool **out, nemotron_model *model, nemotron_tokenizer *tok, int n_slots, int n_ctx,
                    int queue_max, const struct slot_spec *spec, struct prefix_cache *cache, struct metrics *metrics,
                    char *errbuf, size_t errlen) {
    *out = NULL;
    struct slot_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)n_slots, sizeof *p->threads)) ||
        !(p->sessions = calloc((size_t)n_slots, sizeof *p->sessions)) ||
        (spec && spec->draft_model && !(p->drafts = calloc((size_t)n_slots, sizeof *p->drafts)))) {
        if (p) {
            free(p->threads);
            free(p->sessions);
        }
        free(p);
        snprintf(errbuf, errlen, "out of memory for %d slots", n_slots);
        return -1;
    }
    p->model = model;
    p->tok = tok;
    p->cache = cache;
    p->metrics = metrics;
    p->n_slots = n_slots;
    p->n_ctx = n_ctx;
    p->queue_max = queue_max;
    p->vocab = nemotron_model_vocab_size(model);
    p->n_stop_ids = nemotron_model_stop_ids(model, p->stop_ids, MAX_STOP_IDS);
    if (p->n_stop_ids > MAX_STOP_IDS) p->n_stop_ids = MAX_STOP_IDS;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    *out = p;
    if (spec) p->spec = *spec;
    for (int i = 0; i < n_slots; i++) {
        nemotron_status st = open_session(p, model, 1, &p->sessions[i]);
        if (st) {
            snprintf(errbuf, errlen, "slot %d: %s (%s)", i, nemotron_session_errmsg(p->sessions[i]), nemotron_status_str(st));
            return -1;
        }
        if (p->drafts && (st = open_session(p, p->spec.draft_model, 0, &p->drafts[i]))) {
            snprintf(errbuf, errlen, "slot %d: the draft model's session: %s (%s)", i,
                     nemotron_session_errmsg(p->drafts[i]), nemotron_status_str(st));
            return -1;
        }
    }
    for (int i = 0; i < n_slots; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (struct worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa)) {
            free(wa);
            snprintf(errbuf, errlen, "could not start the worker of slot %d", i);
            return -1;
        }
        p->n_started++;
    }
    return 0;
}

int slot_pool_submit(struct slot_pool *p, struct job *j) {
    pthread_mutex_lock(&p->mu);
    if (p->stopping || p->queued >= p->queue_max) {
        int stopping = p->stopping;
        pthread_mutex_unlock(&p->mu);
        return stopping ? -2 : -1;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    j->next = NULL;
    if (p->tail) p->tail->next = j;
    else p->head = j;
    p->tail = j;
    p->queued++;
    atomic_fetch_add(&p->metrics->queued, 1);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void slot_pool_stop(struct slot_pool *p) {
    if (!p || p->stopping) return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stopping, 1, __ATOMIC_RELEASE);
    struct job *queued = p->head;
    p->head = p->tail = NULL;
    p->queued = 0;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    while (queued) {
        struct job *next = queued->next;
        atomic_fetch_sub(&p->metrics->queued, 1);
        job_fail(queued, 503, "server_error", "%s", "the server is shutting down");
        job_release(queued);
        queued = next;
    }
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

void slot_pool_free(struct slot_pool *p) {
    if (!p) return;
    slot_pool_stop(p);
    for (int i = 0; i < p->n_slots; i++) {
        nemotron_session_free(p->sessions[i]);
        if (p->drafts) nemotron_session_free(p->drafts[i]);
    }
    free(p->drafts);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->sessions);
    free(p);
}

int slot_pool_n_ctx(const struct slot_pool *p) {
    return p->n_ctx;
}
