/* http.c - the HTTP side of `nemotron serve` on libmicrohttpd (server.h).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a plain request waits
 * for its job in the handler, a streamed one in the content reader that feeds its events. Both
 * wait in short slices and look at the socket between them, so a client that hangs up has its
 * job cancelled within one slice (the worker then stops at its next step). This file owns
 * routing, authentication, the body limit, turning prompts into tokens and the process's
 * lifetime (signals, load, shutdown); everything about a request's content is request.c's.
 *
 * The server listens before it loads: the model loads in a thread while every endpoint answers
 * 503 ("loading"), GET /health included, which turns 200 once the slots run. After a device fault
 * that left a slot without a session (slots.c) the device is lost for good: GET /health answers
 * 503 with code "device_failed" and the fault, new generations the same 503; /v1/models and
 * /metrics still answer. For tests only, NEMOTRON_SERVE_LOAD_DELAY_MS=N makes the load thread
 * wait N ms before it starts, so that the loading state can be observed (tests/cli/test_serve.sh).
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/slots.h"

/* 8 MiB of body: a prompt filling a 1M-position context is about 4 MB of text, twice that
 * covers JSON escaping; anything larger is refused with 413 before it is parsed */
#define MAX_BODY_BYTES ((size_t)8 << 20)
/* how long a waiting handler sleeps before it looks at the socket again: the bound on how late
 * a disconnect is noticed (a decode step of the demo model is shorter, of a big model longer) */
#define WAIT_SLICE_MS 20
/* connections served at once: the slots, the queue and health or metrics probes beside them */
#define MAX_CONNECTIONS 1024

struct server {
    const struct server_config *cfg;
    char model_id[256];
    atomic_int ready;
    atomic_int load_ended;         /* the load thread is done, ready or not */
    int load_rc;                   /* its result: 0, or 1 with the reason printed */
    nemotron_model *model;
    nemotron_model *draft_model;   /* --draft-model, or NULL */
    nemotron_tokenizer *tok;
    struct slot_pool *pool;
    struct prefix_cache *cache;
    struct metrics metrics;
    atomic_uint_fast64_t next_id;
    atomic_int in_flight;          /* generation requests not yet answered to the end */
};

/* 503 for what needs the model, while it loads or after the device failed; 0 when it can run. */
static int unavailable(const struct server *sv, struct api_error *e) {
    memset(e, 0, sizeof *e);
    if (!atomic_load(&sv->ready)) return api_fail(e, 503, "server_error", "loading", NULL, "the model is loading");
    const char *fault = slot_pool_device_fault(sv->pool);
    if (fault)
        return api_fail(e, 503, "server_error", "device_failed", NULL,
                        "generation is unavailable until the server is restarted (%s)", fault);
    return 0;
}

/* What one request accumulates while its body arrives. */
struct conn {
    struct sbuf body;
    int too_large;
};

static enum MHD_Result respond(struct server *sv, struct MHD_Connection *c, int status, const char *type, char *body) {
    if (!body) {
        status = 500;
        type = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&sv->metrics.requests, 1);
    if (status >= 400) atomic_fetch_add(&sv->metrics.requests_failed, 1);
    return ok;
}

static enum MHD_Result respond_error(struct server *sv, struct MHD_Connection *c, const struct api_error *e) {
    return respond(sv, c, e->status, "application/json", api_error_json(e));
}

static enum MHD_Result fail(struct server *sv, struct MHD_Connection *c, int status, const char *type, const char *code,
                            const char *msg) {
    struct api_error e;
    memset(&e, 0, sizeof e);
    api_fail(&e, status, type, code, NULL, "%s", msg);
    return respond_error(sv, c, &e);
}

/* The client hung up (or the socket failed), seen without reading: POLLRDHUP is the peer's
 * shutdown of its side. A client that half-closes after its request counts as gone too; HTTP
 * clients keep the socket open while they read the answer. */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void wait_slice(struct job *j) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &until);
}

/* "Authorization: Bearer KEY", compared in constant time so the key cannot be guessed byte by
 * byte from response times. */
static int authorized(const struct server *sv, struct MHD_Connection *c) {
    if (!sv->cfg->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *given = h + 7, *key = sv->cfg->api_key;
    size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = gl != kl;
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)given[i < gl ? i : 0];
    return !diff;
}

static enum MHD_Result models(struct server *sv, struct MHD_Connection *c) {
    json_object *o = json_object_new_object(), *data = json_object_new_array(), *m = json_object_new_object();
    json_object_object_add(m, "id", json_object_new_string(sv->model_id));
    json_object_object_add(m, "object", json_object_new_string("model"));
    json_object_object_add(m, "created", json_object_new_int64(0));
    json_object_object_add(m, "owned_by", json_object_new_string("nemotron.c"));
    json_object_array_add(data, m);
    json_object_object_add(o, "object", json_object_new_string("list"));
    json_object_object_add(o, "data", data);
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return respond(sv, c, 200, "application/json", s);
}

/* Tokenizes text into a new array; NULL (with *n = -1) when the tokenizer failed or memory ran out. */
static int32_t *encode(const struct server *sv, const char *text, int add_special, int *n) {
    size_t need = 0, len = strlen(text);
    *n = -1;
    if (nemotron_tokenize(sv->tok, text, len, add_special, NULL, 0, &need) || need > INT32_MAX) return NULL;
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || nemotron_tokenize(sv->tok, text, len, add_special, ids, need, &need)) {
        free(ids);
        return NULL;
    }
    *n = (int)need;
    return ids;
}

/* The prompt's tokens and the chat's checkpoint (where the generation prompt starts). 0, or -1
 * with *e filled. */
static int build_prompt(struct server *sv, struct server_request *r, int32_t **ids, int *n, int *checkpoint,
                        struct api_error *e) {
    *ids = NULL;
    *checkpoint = 0;
    if (r->kind == REQUEST_COMPLETION && r->prompt_ids) {
        *ids = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
        return 0;
    }
    if (r->kind == REQUEST_COMPLETION) {
        *ids = encode(sv, r->prompt_text, 1, n);
        return *ids ? 0 : api_fail(e, 500, "server_error", NULL, "prompt", "tokenizing the prompt failed");
    }
    nemotron_chat_options o = nemotron_chat_default_options();
    o.enable_thinking = r->enable_thinking;
    char *text = NULL, err[512];
    nemotron_status st = nemotron_chat_render(r->messages_json, r->tools_json, &o, &text, err, sizeof err);
    if (st) return api_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", err);
    *ids = encode(sv, text, 0, n);
    nemotron_free(text);
    if (!*ids) return api_fail(e, 500, "server_error", NULL, "messages", "tokenizing the prompt failed");
    /* the history alone is what the next turn's prompt will start with: a snapshot there lets
     * that turn skip it even though this turn's generation prompt is not repeated */
    o.add_generation_prompt = 0;
    if (nemotron_chat_render(r->messages_json, r->tools_json, &o, &text, err, sizeof err) == NEMOTRON_OK) {
        int hn;
        int32_t *history = encode(sv, text, 0, &hn);
        if (history && hn > 0 && hn < *n && !memcmp(history, *ids, (size_t)hn * sizeof *history)) *checkpoint = hn;
        free(history);
        nemotron_free(text);
    }
    return 0;
}

/* ---- streaming ---- */

struct stream_ctx {
    struct server *sv;
    struct MHD_Connection *c;
    struct job *job;
    struct response_ctx rc;
    struct stream st;
    struct sbuf pending;
    size_t off;
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    struct stream_ctx *sc = cls;
    struct job *j = sc->job;
    for (;;) {
        if (sc->off < sc->pending.len) {
            size_t n = sc->pending.len - sc->off < max ? sc->pending.len - sc->off : max;
            memcpy(buf, sc->pending.p + sc->off, n);
            sc->off += n;
            return (ssize_t)n;
        }
        sc->pending.len = sc->off = 0;
        if (sc->st.phase == STREAM_ENDED) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        int rc = stream_advance(&sc->st, j, &sc->rc, &sc->pending);
        if (!rc && !sc->pending.len) wait_slice(j);
        pthread_mutex_unlock(&j->mu);
        if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!sc->pending.len && client_gone(sc->c)) {
            job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* Called when the stream ended for any reason, the client's hang-up included. */
static void stream_free(void *cls) {
    struct stream_ctx *sc = cls;
    job_cancel(sc->job);            /* a no-op for a finished job; stops one the client left */
    job_release(sc->job);
    atomic_fetch_sub(&sc->sv->in_flight, 1);
    free(sc->pending.p);
    free(sc);
}

static enum MHD_Result start_stream(struct server *sv, struct MHD_Connection *c, struct job *j,
                                    const struct response_ctx *rc) {
    struct stream_ctx *sc = calloc(1, sizeof *sc);
    struct MHD_Response *r = NULL;
    if (sc) {
        sc->sv = sv;
        sc->c = c;
        sc->job = j;
        sc->rc = *rc;
        /* 4 KiB blocks: an event is one token's chunk, far smaller */
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, sc, stream_free);
    }
    if (!r) {
        free(sc);
        job_cancel(j);
        job_release(j);
        atomic_fetch_sub(&sv->in_flight, 1);
        return fail(sv, c, 500, "server_error", NULL, "out of memory");
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&sv->metrics.requests, 1);
    return ok;
}

/* ---- generation endpoints ---- */

static enum MHD_Result generate(struct server *sv, struct MHD_Connection *c, struct conn *cn, enum request_kind kind) {
    struct request_limits lim = {sv->model_id, nemotron_model_vocab_size(sv->model)};
    struct server_request req;
    struct api_error e;
    if (request_parse(cn->body.p ? cn->body.p : "", cn->body.len, kind, &lim, &req, &e)) return respond_error(sv, c, &e);
    if (slot_pool_check_spec(sv->pool, &req, &e)) {
        request_free(&req);
        return respond_error(sv, c, &e);
    }
    int32_t *ids;
    int n, checkpoint;
    if (build_prompt(sv, &req, &ids, &n, &checkpoint, &e)) {
        request_free(&req);
        return respond_error(sv, c, &e);
    }
    const char *param = kind == REQUEST_CHAT ? "messages" : "prompt";
    int n_ctx = slot_pool_n_ctx(sv->pool);
    if (n == 0 || n + 1 > n_ctx) {
        free(ids);
        request_free(&req);
        if (n == 0) api_fail(&e, 400, "invalid_request_error", NULL, param, "the prompt is empty");
        else
            api_fail(&e, 400, "invalid_request_error", "context_length_exceeded", param,
                     "This model's context is %d tokens; the prompt has %d, leaving no room to generate", n_ctx, n);
        return respond_error(sv, c, &e);
    }
    int stream = req.stream, thinking = kind == REQUEST_CHAT && req.enable_thinking;
    struct job *j = job_new(&req, ids, n);
    if (!j) {
        free(ids);
        request_free(&req);
        return fail(sv, c, 500, "server_error", NULL, "out of memory");
    }
    j->checkpoint = checkpoint;
    j->thinking_in_prompt = thinking;
    int queued = slot_pool_submit(sv->pool, j);
    if (queued) {
        job_release(j);
        if (queued == -2) return fail(sv, c, 503, "server_error", "shutting_down", "the server is shutting down");
        return fail(sv, c, 429, "rate_limit_exceeded", "queue_full",
                    "every slot is busy and the queue is full; retry later");
    }
    atomic_fetch_add(&sv->in_flight, 1);
    struct response_ctx rc = {.model_id = sv->model_id, .created = (long)time(NULL)};
    snprintf(rc.id, sizeof rc.id, "%s-%llu", kind == REQUEST_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&sv->next_id, 1));
    if (stream) return start_stream(sv, c, j, &rc);
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        wait_slice(j);
        if (!j->done && client_gone(c)) {
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            job_release(j);
            atomic_fetch_sub(&sv->in_flight, 1);
            return MHD_NO;             /* nobody to answer: close the connection */
        }
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ok = j->failed ? respond_error(sv, c, &j->error)
                                   : respond(sv, c, 200, "application/json", response_json(j, &rc));
    job_release(j);
    atomic_fetch_sub(&sv->in_flight, 1);
    return ok;
}

static enum MHD_Result route(struct server *sv, struct MHD_Connection *c, const char *url, const char *method,
                             struct conn *cn) {
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    struct api_error e;
    if (!strcmp(url, "/health")) {
        if (!get) return fail(sv, c, 405, "invalid_request_error", NULL, "use GET /health");
        if (unavailable(sv, &e)) return respond_error(sv, c, &e);
        return respond(sv, c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    }
    if (!authorized(sv, c))
        return fail(sv, c, 401, "authentication_error", "invalid_api_key",
                    "a valid API key is required (Authorization: Bearer KEY)");
    if (cn->too_large) {
        memset(&e, 0, sizeof e);
        api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL, "the request body is over the limit of %zu bytes",
                 MAX_BODY_BYTES);
        return respond_error(sv, c, &e);
    }
    int is_chat = !strcmp(url, "/v1/chat/completions"), is_completion = !strcmp(url, "/v1/completions");
    int is_models = !strcmp(url, "/v1/models"), is_metrics = !strcmp(url, "/metrics");
    if (!is_chat && !is_completion && !is_models && !is_metrics)
        return fail(sv, c, 404, "invalid_request_error", "not_found", "no such endpoint");
    if ((is_chat || is_completion) ? !post : !get)
        return fail(sv, c, 405, "invalid_request_error", NULL, "method not allowed on this endpoint");
    if (!atomic_load(&sv->ready)) return fail(sv, c, 503, "server_error", "loading", "the model is loading");
    if (is_models) return models(sv, c);
    if (is_metrics) return respond(sv, c, 200, "text/plain; version=0.0.4", metrics_render(&sv->metrics, sv->cache));
    if (unavailable(sv, &e)) return respond_error(sv, c, &e);
    return generate(sv, c, cn, is_chat ? REQUEST_CHAT : REQUEST_COMPLETION);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length && strtoull(length, NULL, 10) > MAX_BODY_BYTES) cn->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        /* past the limit the rest is read and dropped, so the 413 reaches the client */
        if (!cn->too_large && (cn->body.len + *upload_size > MAX_BODY_BYTES || sbuf_add(&cn->body, upload, *upload_size))) {
            cn->too_large = 1;
            free(cn->body.p);
            memset(&cn->body, 0, sizeof cn->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return route(sv, c, url, method, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    struct conn *cn = *con_cls;
    if (!cn) return;
    free(cn->body.p);
    free(cn);
    *con_cls = NULL;
}

/* The id clients send as "model": the model path's last component. */
static void model_id_of(const char *path, char *out, size_t cap) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(out, cap, "%.*s", (int)(len - start), path + start);
}

static struct MHD_Daemon *listen_on(struct server *sv, const struct server_config *cfg) {
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    memset(&v4, 0, sizeof v4);
    memset(&v6, 0, sizeof v6);
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, cfg->host, &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons((uint16_t)cfg->port);
        addr = (const struct sockaddr *)&v4;
    } else if (inet_pton(AF_INET6, cfg->host, &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons((uint16_t)cfg->port);
        addr = (const struct sockaddr *)&v6;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "nemotron serve: --host '%s' is not an IPv4 or IPv6 address\n", cfg->host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR, addr,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_CONNECTION_LIMIT,
                                            (unsigned)MAX_CONNECTIONS, MHD_OPTION_END);
    if (!d) fprintf(stderr, "nemotron serve: cannot listen on %s port %d: %s\n", cfg->host, cfg->port, strerror(errno));
    return d;
}

/* Loads the model, tokenizer, cache and slots. 0, or 1 with the reason printed. */
static int load(struct server *sv, const struct server_config *cfg) {
    nemotron_model_params mp = nemotron_model_default_params();
    mp.device = cfg->device;
    mp.n_threads = cfg->threads;
    nemotron_status st = nemotron_model_load(cfg->model_path, &mp, &sv->model);
    if (st) {
        fprintf(stderr, "nemotron serve: loading the model: %s (%s)\n", nemotron_model_errmsg(sv->model), nemotron_status_str(st));
        return 1;
    }
    st = nemotron_tokenizer_load(cfg->tokenizer_path ? cfg->tokenizer_path : cfg->model_path, &sv->tok);
    if (st) {
        fprintf(stderr, "nemotron serve: loading the tokenizer: %s (%s)%s\n", nemotron_tokenizer_errmsg(sv->tok),
                nemotron_status_str(st), cfg->tokenizer_path ? "" : "; a model without one needs --tokenizer FILE");
        return 1;
    }
    if (nemotron_tokenizer_vocab_size(sv->tok) > nemotron_model_vocab_size(sv->model)) {
        fprintf(stderr, "nemotron serve: the tokenizer has %d tokens, more than the model's vocabulary (%d)\n",
                nemotron_tokenizer_vocab_size(sv->tok), nemotron_model_vocab_size(sv->model));
        return 1;
    }
    struct slot_spec spec = {.max = cfg->spec_max, .mtp = cfg->mtp};
    if (cfg->mtp && !nemotron_model_mtp_layers(sv->model)) {
        fprintf(stderr, "nemotron serve: --spec mtp: the model %s has no MTP layers (config.json's "
                        "num_nextn_predict_layers is 0 or absent); use --spec ngram or --draft-model MODEL\n",
                cfg->model_path);
        return 1;
    }
    if (cfg->draft_model) {
        st = nemotron_model_load(cfg->draft_model, &mp, &sv->draft_model);
        if (st) {
            fprintf(stderr, "nemotron serve: loading the draft model: %s (%s)\n", nemotron_model_errmsg(sv->draft_model),
                    nemotron_status_str(st));
            return 1;
        }
        if (nemotron_model_vocab_size(sv->draft_model) != nemotron_model_vocab_size(sv->model)) {
            fprintf(stderr, "nemotron serve: --draft-model %s: its vocabulary has %d tokens, the model's %d: a draft model "
                            "must share the model's tokenizer\n", cfg->draft_model,
                    nemotron_model_vocab_size(sv->draft_model), nemotron_model_vocab_size(sv->model));
            return 1;
        }
        spec.draft_model = sv->draft_model;
    }
    sv->metrics.spec_on = cfg->spec_max > 0;
    sv->cache = prefix_cache_new(cfg->cache_bytes);
    char err[512];
    if (!sv->cache || slot_pool_start(&sv->pool, sv->model, sv->tok, cfg->parallel, cfg->n_ctx, cfg->queue_max, &spec,
                                      sv->cache, &sv->metrics, err, sizeof err)) {
        fprintf(stderr, "nemotron serve: %s\n", sv->cache ? err : "out of memory");
        return 1;
    }
    return 0;
}

/* The load thread: load() (after NEMOTRON_SERVE_LOAD_DELAY_MS, tests only), then ready. */
static void *load_thread(void *arg) {
    struct server *sv = arg;
    const char *delay = getenv("NEMOTRON_SERVE_LOAD_DELAY_MS");
    long ms = delay ? strtol(delay, NULL, 10) : 0;
    if (ms > 0) nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
    sv->load_rc = load(sv, sv->cfg);
    if (!sv->load_rc) atomic_store(&sv->ready, 1);
    atomic_store(&sv->load_ended, 1);
    return NULL;
}

int server_run(const struct server_config *cfg) {
    static struct server sv;       /* one server per process: the signal handling is process-wide */
    memset(&sv, 0, sizeof sv);
    sv.cfg = cfg;
    model_id_of(cfg->model_path, sv.model_id, sizeof sv.model_id);
    /* every thread started from here on inherits the blocked signals; only sigwait below sees them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);      /* a write to a closed socket is an error return, not death */
    struct MHD_Daemon *d = listen_on(&sv, cfg);
    if (!d) return 1;
    fprintf(stderr, "nemotron serve: listening on %s:%d, loading %s\n", cfg->host, cfg->port, cfg->model_path);
    pthread_t loader;
    if (pthread_create(&loader, NULL, load_thread, &sv)) {
        fprintf(stderr, "nemotron serve: could not start the load thread\n");
        MHD_stop_daemon(d);
        return 1;
    }
    /* a signal while the model loads: the load cannot be interrupted (a big model takes minutes),
     * and nothing runs yet that could be ended, so the process exits at once */
    int sig = 0;
    while (!atomic_load(&sv.load_ended)) {
        sig = sigtimedwait(&sigs, NULL, &(struct timespec){0, 50 * 1000000L});
        if (sig > 0) {
            fprintf(stderr, "nemotron serve: %s during the load: stopped\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            MHD_stop_daemon(d);
            _exit(0);
        }
    }
    pthread_join(loader, NULL);
    int rc = sv.load_rc;
    if (!rc) {
        char spec[160] = "";
        if (cfg->spec_max)
            snprintf(spec, sizeof spec, ", speculative decoding (%s%s, up to %d drafts)",
                     cfg->draft_model ? "draft model " : cfg->mtp ? "mtp" : "ngram", cfg->draft_model ? cfg->draft_model : "",
                     cfg->spec_max);
        fprintf(stderr, "nemotron serve: ready: model '%s', %d slots of %d positions, queue %d, prefix cache %zu MiB%s\n",
                sv.model_id, cfg->parallel, cfg->n_ctx, cfg->queue_max, cfg->cache_bytes >> 20, spec);
        sigwait(&sigs, &sig);
        fprintf(stderr, "nemotron serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    /* stop accepting, end the jobs (their handlers then answer and return), then the connections */
    MHD_socket listener = MHD_quiesce_daemon(d);
    slot_pool_stop(sv.pool);
    /* the ended jobs' last events (an error, [DONE]) reach their clients before the connections
     * close; 3 s bounds it, within the 5 s a stop may take, should a client not read */
    for (int waited = 0; atomic_load(&sv.in_flight) > 0 && waited < 3000; waited += WAIT_SLICE_MS)
        nanosleep(&(struct timespec){0, WAIT_SLICE_MS * 1000000L}, NULL);
    MHD_stop_daemon(d);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    slot_pool_free(sv.pool);
    prefix_cache_free(sv.cache);
    nemotron_tokenizer_free(sv.tok);
    nemotron_model_free(sv.draft_model);
    nemotron_model_free(sv.model);
    if (!rc) fprintf(stderr, "nemotron serve: stopped\n");
    return rc;
}
