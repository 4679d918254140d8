/* nemotron.h - the public C API of nemotron.c, an inference engine for Nemotron-H models.
 *
 * This is the only header a client includes. It compiles as C11 and as C++.
 *
 *     nemotron_model *model;
 *     nemotron_model_params mp = nemotron_model_default_params();
 *     if (nemotron_model_load("path/to/hf_dir", &mp, &model) != NEMOTRON_OK) {
 *         fprintf(stderr, "%s\n", nemotron_model_errmsg(model));
 *         nemotron_model_free(model);
 *         return 1;
 *     }
 *     nemotron_session *s;
 *     nemotron_session_params sp = nemotron_session_default_params();
 *     if (nemotron_session_new(model, &sp, &s) != NEMOTRON_OK) { ... nemotron_session_errmsg(s) ... }
 *     int32_t prompt[3] = {1, 2, 3}, next;
 *     nemotron_session_eval(s, prompt, 3, NULL);          // prefill: passes of the backend's size
 *     next = nemotron_session_argmax(s);                  // greedy token after the prompt
 *     nemotron_session_eval(s, &next, 1, NULL);           // decode: a pass of one position
 *     nemotron_session_free(s);
 *     nemotron_model_free(model);
 *
 * Conventions. Every fallible call returns a nemotron_status (0 = NEMOTRON_OK). The object
 * that failed carries a message naming what is wrong (file, tensor, key, expected vs found);
 * constructors hand back an object even when they fail, so the message can be read, and the
 * caller frees it. The library never exits the process and never prints except through the
 * optional log callback. A model is immutable after load and may be shared by sessions on
 * different threads; a session is used by one thread at a time.
 */
#ifndef NEMOTRON_H
#define NEMOTRON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NEMOTRON_VERSION_MAJOR 0
#define NEMOTRON_VERSION_MINOR 1
#define NEMOTRON_VERSION_PATCH 0

/* The most positions one pass may hold: each weight is read once for up to this many. A session
 * picks its pass size up to this (nemotron_session_params.pass_max); by default the backend's:
 * 256 on the CPU (its kernels keep a weight chunk in L2 for more positions), 512 on CUDA (its
 * tensor-core products and expert lists want long passes; a 420-position prompt is then one
 * pass). */
#define NEMOTRON_PASS_MAX 1024

typedef enum nemotron_status {
    NEMOTRON_OK = 0,
    NEMOTRON_ERR_IO,          /* a file could not be opened, read or mapped */
    NEMOTRON_ERR_FORMAT,      /* a file's bytes are malformed: JSON, safetensors header, offsets */
    NEMOTRON_ERR_CONFIG,      /* config.json: a key of the wrong type, out of range, inconsistent */
    NEMOTRON_ERR_TENSOR,      /* a tensor missing, unexpected, of the wrong dtype or shape */
    NEMOTRON_ERR_ARG,         /* a bad argument: token outside the vocabulary, n out of range, ... */
    NEMOTRON_ERR_CONTEXT,     /* the request would pass the session's context length */
    NEMOTRON_ERR_NOMEM,       /* an allocation failed */
    NEMOTRON_ERR_UNSUPPORTED, /* valid input this build cannot run (unknown activation, device) */
    NEMOTRON_ERR_INTERNAL,    /* a broken invariant inside the library: a bug */
    NEMOTRON_ERR_DEVICE,      /* the device failed while running a pass (a GPU kernel's fault, a
                               * lost device): the session that met it is refused from then on
                               * and must be freed; the process keeps running */
    NEMOTRON_ERR_NUMERIC      /* a pass gave logits that are not finite (NaN or infinity), or all
                               * equal, from valid input: the model's weights or config values
                               * overflow (or hold NaN). The message names the first such
                               * position; the positions were taken and their state holds the
                               * same values: reset the session */
} nemotron_status;

/* A static English name of a status ("ok", "i/o error", ...). Never NULL. */
const char *nemotron_status_str(nemotron_status status);

/* "0.1.0" */
const char *nemotron_version(void);

/* The library's log. Everything a call can go wrong on comes back as its status and message;
 * the log carries only what has no caller to return to: an internal error just before the
 * library aborts (NT_ASSERT, the debug build's allocation guard) and warnings about the
 * environment (an unknown NEMOTRON_CPU value, ignored). msg is one line without a newline,
 * valid during the call. By default each goes to stderr as "nemotron: MSG". The setting is
 * process-wide: set it before loading models (it is not synchronised with calls running on
 * other threads). fn NULL restores the default. */
typedef enum nemotron_log_level {
    NEMOTRON_LOG_ERROR = 0, /* the library is about to abort the process */
    NEMOTRON_LOG_WARN = 1   /* something was ignored; the call goes on */
} nemotron_log_level;
typedef void (*nemotron_log_fn)(nemotron_log_level level, const char *msg, void *user);
void nemotron_set_log(nemotron_log_fn fn, void *user);

typedef struct nemotron_model nemotron_model;
typedef struct nemotron_session nemotron_session;

typedef struct nemotron_model_params {
    int n_threads;          /* CPU threads; <= 0: the number of physical cores */
    const char *device;     /* "cpu" (NULL = "cpu"), "cuda" (= "cuda:0") or "cuda:N" where the build
                             * has the CUDA backend (nemotron_model_load says when it has not) */
} nemotron_model_params;

nemotron_model_params nemotron_model_default_params(void);

/* Opens a Hugging Face model directory (config.json plus model.safetensors, or shards listed by
 * model.safetensors.index.json) or a .nemo file (nemotron_convert). Weights are mmap-ed and read
 * in place; a .nemo's checksums are all verified first. Every tensor the config
 * implies is checked for presence, dtype and shape before anything is computed.
 * *out is always set (NULL only when even the handle could not be allocated); on failure it
 * holds just the message. Free it with nemotron_model_free in both cases. */
nemotron_status nemotron_model_load(const char *path, const nemotron_model_params *params,
                                    nemotron_model **out);
void nemotron_model_free(nemotron_model *model);          /* NULL is a no-op */
const char *nemotron_model_errmsg(const nemotron_model *model); /* "" after success */

int nemotron_model_vocab_size(const nemotron_model *model);
int nemotron_model_n_threads(const nemotron_model *model);  /* CPU threads its passes use */
int nemotron_model_hidden_size(const nemotron_model *model);
int nemotron_model_n_layer(const nemotron_model *model);
/* The layers of the model's MTP step (multi-token prediction, which --spec mtp drafts with): 0
 * when it has none. */
int nemotron_model_mtp_layers(const nemotron_model *model);
/* The context length the model was trained for: config.json's max_position_embeddings (4096
 * when the config leaves it out, as transformers reads it). A session may be longer (the
 * layers take any position); past this length the text may degrade. 0 for NULL. */
int nemotron_model_ctx_train(const nemotron_model *model);
/* The layer kinds as the pattern string of the config: 'M' Mamba-2, '*' attention, '-' MLP,
 * 'E' MoE. Valid as long as the model. */
const char *nemotron_model_pattern(const nemotron_model *model);
/* Bytes of weights one single-position pass reads (routed experts: only the chosen ones). */
uint64_t nemotron_model_active_weight_bytes(const nemotron_model *model);
/* Measures, now, how fast the memory that holds the weights is read, in bytes/s, when the
 * device has its own memory (a GPU: a read of a 2 GiB buffer, best of 5); 0 for the CPU, whose
 * weights are in host memory (measure that with the same threads, as `nemotron bench` does).
 * Takes a fraction of a second; not for use while another thread runs a session. */
double nemotron_model_device_read_bandwidth(const nemotron_model *model);
/* The device the model runs on: "cpu", or "cuda:N (NAME)". */
const char *nemotron_model_device(const nemotron_model *model);
/* Every weight of the model in its stored form (all experts; MTP layers excluded): bytes and
 * count (a benchmark table's "size" and "params"). */
uint64_t nemotron_model_weight_bytes(const nemotron_model *model);
uint64_t nemotron_model_n_params(const nemotron_model *model);
/* The end-of-sequence ids of config.json (eos_token_id, one or a list); n_max entries at most.
 * Returns how many there are. */
int nemotron_model_eos_ids(const nemotron_model *model, int32_t *ids, int n_max);

typedef struct nemotron_session_params {
    int n_ctx;              /* positions the session can hold; <= 0: 4096 */
    int pass_max;           /* positions per pass, 1..NEMOTRON_PASS_MAX; <= 0: the backend's */
    int verify_max;         /* the most positions one nemotron_session_verify may hold, 0..pass_max;
                             * 0 (the default): no verify. Each one costs a copy of the recurrent
                             * state (every Mamba layer's conv ring and SSM state) in the device's
                             * memory, allocated with the session */
    int mtp;                /* 1: keep the model's MTP step (its multi-token prediction layers; the
                             * model must have them) in step with the session, so that a speculative
                             * decoder can draft with it (nemotron_spec_params.mtp): the step's own
                             * KV cache, allocated here, and an MTP pass over each pass's positions
                             * before the next pass (positions given as embeddings are skipped). It
                             * never changes what the session computes. 0 (the default): none */
} nemotron_session_params;

nemotron_session_params nemotron_session_default_params(void);

/* Creates a session: one timeline with its KV cache, Mamba conv rings and SSM states, all
 * allocated here, never inside a pass. The model must outlive the session. *out is always set
 * as for nemotron_model_load. */
nemotron_status nemotron_session_new(nemotron_model *model, const nemotron_session_params *params,
                                     nemotron_session **out);
void nemotron_session_free(nemotron_session *session);    /* NULL is a no-op */
const char *nemotron_session_errmsg(const nemotron_session *session);

/* Runs tokens[0..n) at the next positions, in passes of up to pass_max positions (n >= 1).
 * logits, when not NULL, receives float[n][vocab_size]: every position's next-token logits.
 * The last position's logits are kept in the session either way.
 * Errors (a token outside the vocabulary, pos + n > n_ctx) are found before any work and leave
 * the session exactly as it was. */
nemotron_status nemotron_session_eval(nemotron_session *session, const int32_t *tokens, int n,
                                      float *logits);
/* The last evaluated position's logits, float[vocab_size]; NULL before the first eval, or when
 * the GPU failed copying them back (nemotron_session_errmsg says why; the session is refused as
 * after any device error). Valid until the next eval or reset. On a GPU they are copied back by
 * the first call after a pass, not by the pass: greedy decoding, which needs only
 * nemotron_session_argmax (or a sampler for which nemotron_sampler_is_greedy holds), never waits
 * for the copy. */
const float *nemotron_session_logits(const nemotron_session *session);
/* argmax of those logits (the lowest index among equals); -1 before the first eval. */
int32_t nemotron_session_argmax(const nemotron_session *session);
int nemotron_session_pos(const nemotron_session *session);  /* positions held */
int nemotron_session_n_ctx(const nemotron_session *session);
int nemotron_session_pass_max(const nemotron_session *session); /* positions per pass */
void nemotron_session_reset(nemotron_session *session);     /* back to position 0 */

/* ---- embeddings, verify passes and snapshots ------------------------------------------------ */

/* The embedding row of a token as the model's first step reads it (its stored form widened to
 * float): out receives hidden_size floats. NEMOTRON_ERR_ARG for a token outside the vocabulary or
 * a NULL argument (out is then untouched); NEMOTRON_ERR_DEVICE when the model's device failed. */
nemotron_status nemotron_model_token_embedding(const nemotron_model *model, int32_t token, float *out);

/* As nemotron_session_eval, with each position's input vector given instead of a token:
 * embd[n][hidden_size] (an audio or image encoder's output, in the model's embedding space). A
 * row equal to nemotron_model_token_embedding of a token gives that token's logits and state bit
 * for bit, so embeddings and tokens mix freely in one timeline. Every value must be finite; bad
 * input (n, NULL, a non-finite value, the context length) is found before any work and leaves the
 * session as it was. */
nemotron_status nemotron_session_eval_embd(nemotron_session *session, const float *embd, int n,
                                           float *logits);

/* Runs tokens[0..n) (drafted continuations) at the next positions in ONE pass, keeping the state
 * before every one of them, and writes argmax[i], the greedy token after tokens[0..i], for each i
 * (argmax may be NULL); the n x vocab logits stay on the device. 1 <= n <= the session's
 * verify_max. Afterwards the session is exactly as after nemotron_session_eval of the n tokens,
 * until nemotron_session_accept keeps fewer. A position's results are those of any other pass
 * (one arithmetic per position). Errors as for eval, plus NEMOTRON_ERR_ARG when n exceeds
 * verify_max (0 when the session was made without verify). */
nemotron_status nemotron_session_verify(nemotron_session *session, const int32_t *tokens, int n,
                                        int32_t *argmax);
/* Keeps the first m (0 <= m <= n) positions of the verify pass just run: the session becomes bit
 * for bit what nemotron_session_eval of those m tokens would have made it (state, position, last
 * logits and argmax; m = 0: as before the verify), by device-side copies, without running a pass.
 * Only directly after nemotron_session_verify (any other eval, verify, restore or reset in between
 * makes it NEMOTRON_ERR_ARG), once; a bad m is NEMOTRON_ERR_ARG and changes nothing. */
nemotron_status nemotron_session_accept(nemotron_session *session, int m);

/* Copies the logits of position i (0 <= i < n) of the verify pass just run into logits[vocab]:
 * bit for bit the logits nemotron_session_eval gives after tokens[0..i] (one arithmetic per
 * position). Valid directly after nemotron_session_verify, before accept or any other pass; else,
 * or for a bad i or a NULL logits, NEMOTRON_ERR_ARG. The session is not changed. */
nemotron_status nemotron_session_verify_logits(nemotron_session *session, int i, float *logits);

/* A session's whole state at one position - conv rings, SSM states, the KV rows below the
 * position, the position and the last logits - held in the memory of the session's device. The
 * caller owns it: free it with nemotron_snapshot_free before the model it came from. */
typedef struct nemotron_snapshot nemotron_snapshot;

/* Takes a snapshot of the session as it is now (device-side copies; the KV rows are copied too,
 * so the snapshot stays valid whatever the session does next). *out is NULL on failure
 * (NEMOTRON_ERR_NOMEM with the session's message saying how much was asked; a NULL argument:
 * NEMOTRON_ERR_ARG). The session is not changed. */
nemotron_status nemotron_session_snapshot(nemotron_session *session, nemotron_snapshot **out);
/* Puts a snapshot's state into a session of the same model handle (the session it came from or
 * any other): afterwards the session computes exactly what the snapshotted one would have. A
 * snapshot of another model handle is NEMOTRON_ERR_ARG; one past the session's n_ctx
 * NEMOTRON_ERR_CONTEXT; both leave the session as it was. The snapshot is unchanged and may be
 * restored again. */
nemotron_status nemotron_session_restore(nemotron_session *session, const nemotron_snapshot *snap);
int nemotron_snapshot_pos(const nemotron_snapshot *snap);   /* its position; 0 for NULL */
void nemotron_snapshot_free(nemotron_snapshot *snap);      /* NULL is a no-op */


/* ---- text: tokenizer and chat format ---------------------------------------------------- */

typedef struct nemotron_tokenizer nemotron_tokenizer;

/* Loads a Hugging Face tokenizer.json (byte-level BPE), or the tokenizer.json inside a model
 * directory or a .nemo (only the carried files' checksums are verified then). Encodes and
 * decodes exactly as the `tokenizers` library does. *out is always set
 * as for nemotron_model_load. Immutable after load: the calls below may run on many threads. */
nemotron_status nemotron_tokenizer_load(const char *path, nemotron_tokenizer **out);
void nemotron_tokenizer_free(nemotron_tokenizer *t);
const char *nemotron_tokenizer_errmsg(const nemotron_tokenizer *t);   /* the load's message */
int nemotron_tokenizer_vocab_size(const nemotron_tokenizer *t);
/* The id of a token written exactly (e.g. "<|im_end|>"), or -1. */
int32_t nemotron_tokenizer_token_id(const nemotron_tokenizer *t, const char *token);

/* Encodes UTF-8 text[0..len) (invalid bytes count as U+FFFD). add_special: apply the
 * tokenizer's post-processor (e.g. a BOS). Writes at most cap ids; *n_ids gets the number the
 * text needs (call again with a larger buffer when it is > cap). */
nemotron_status nemotron_tokenize(const nemotron_tokenizer *t, const char *text, size_t len,
                                  int add_special, int32_t *ids, size_t cap, size_t *n_ids);
/* Decodes ids into out (at most cap bytes, NUL-terminated when cap > 0); *len gets the full
 * length. skip_special drops special tokens. An id outside the vocabulary: NEMOTRON_ERR_ARG. */
nemotron_status nemotron_detokenize(const nemotron_tokenizer *t, const int32_t *ids, size_t n,
                                    int skip_special, char *out, size_t cap, size_t *len);
/* The message of this thread's last nemotron_tokenize or nemotron_detokenize: what failed
 * (e.g. which regex of the tokenizer.json backtracked past the encode's budget), "" when it
 * succeeded. Per thread, since a tokenizer is shared by threads; valid until the thread's next
 * call of either. */
const char *nemotron_tokenizer_last_error(void);

/* Streaming decode: feed generated ids one by one, get text that never ends inside a UTF-8
 * character (bytes wait until the character completes). */
typedef struct nemotron_detok nemotron_detok;
nemotron_detok *nemotron_detok_new(const nemotron_tokenizer *t, int skip_special); /* NULL: no memory */
/* The text id completes, NUL-terminated, valid until the next call; NULL for an id outside the
 * vocabulary or a NULL d. */
const char *nemotron_detok_push(nemotron_detok *d, int32_t id);
const char *nemotron_detok_flush(nemotron_detok *d);   /* what is still held, as U+FFFD ("" for NULL) */
void nemotron_detok_free(nemotron_detok *d);

typedef struct nemotron_chat_options {
    int add_generation_prompt;        /* default 1 */
    int enable_thinking;              /* default 1 (the template's default) */
    int truncate_history_thinking;    /* default 1 */
} nemotron_chat_options;

nemotron_chat_options nemotron_chat_default_options(void);

/* Renders a conversation in the Nemotron 3 chat format, byte for byte what the model's chat
 * template gives under jinja2. messages_json: an OpenAI-style array of {role, content,
 * reasoning_content?, tool_calls?}; tools_json: an array of {type: "function", function: {...}}
 * or NULL. On success *out is a NUL-terminated string to release with nemotron_free; on failure
 * *out is NULL and errbuf (when not NULL) holds the message. */
nemotron_status nemotron_chat_render(const char *messages_json, const char *tools_json,
                                     const nemotron_chat_options *opt, char **out, char *errbuf,
                                     size_t errlen);

typedef struct nemotron_tool_call {
    char *name;
    char *arguments_json;             /* a JSON object */
} nemotron_tool_call;

typedef struct nemotron_chat_reply {
    char *reasoning;                  /* NULL when the reply has none */
    char *content;
    nemotron_tool_call *calls;
    int n_calls;
    int reasoning_unclosed;           /* <think> was never closed */
} nemotron_chat_reply;

/* Splits generated text into reasoning, content and tool calls. thinking_in_prompt: the
 * generation prompt opened <think> (enable_thinking). Malformed calls stay content. Release
 * with nemotron_chat_reply_free. */
nemotron_status nemotron_chat_parse(const char *text, size_t len, int thinking_in_prompt,
                                    nemotron_chat_reply *out);
void nemotron_chat_reply_free(nemotron_chat_reply *r);

void nemotron_free(void *p);          /* for strings the library hands out */

/* ---- sampling ----------------------------------------------------------------------------- */

typedef struct nemotron_sampler_params {
    float temperature;                /* 0: greedy */
    int top_k;                        /* 0: off */
    float top_p;                      /* 1: off */
    float min_p;                      /* 0: off */
    float repeat_penalty;             /* 1: off */
    float presence_penalty;           /* 0: off */
    float frequency_penalty;          /* 0: off */
    int penalty_last_n;               /* recent tokens the penalties see */
    uint64_t seed;
} nemotron_sampler_params;

nemotron_sampler_params nemotron_sampler_default_params(void);

typedef struct nemotron_sampler nemotron_sampler;
/* *out is always set as for nemotron_model_load; bad params name the parameter. */
nemotron_status nemotron_sampler_new(const nemotron_sampler_params *p, int vocab,
                                     nemotron_sampler **out);
void nemotron_sampler_free(nemotron_sampler *s);
const char *nemotron_sampler_errmsg(const nemotron_sampler *s);
/* The next token from logits[vocab] (penalties, then the filters, then a seeded draw); -1 for a
 * NULL sampler or logits, or a handle whose creation failed. */
int32_t nemotron_sampler_sample(nemotron_sampler *s, const float *logits);
/* 1 when the sampler's every choice is the argmax of the logits as given (temperature 0 and no
 * penalty), so that nemotron_session_argmax gives the same token without reading the logits
 * (which a GPU session leaves on the device until asked for); 0 otherwise, and for a NULL or
 * failed handle. */
int nemotron_sampler_is_greedy(const nemotron_sampler *s);
/* Records a token of the sequence for the penalties; a token outside the vocabulary (or a NULL
 * or failed handle) is NEMOTRON_ERR_ARG and is not recorded. reset of such a handle does nothing. */
nemotron_status nemotron_sampler_accept(nemotron_sampler *s, int32_t token);
void nemotron_sampler_reset(nemotron_sampler *s);

/* ---- speculative decoding ------------------------------------------------------------------ */
/*
 * A speculative decoder drafts up to K tokens cheaply, checks them with ONE verify pass of the
 * session, and emits the accepted drafts plus the token the model itself picks after them. The
 * tokens are those plain decoding gives, by construction: each emitted token is picked from the
 * logits of its own verified position (the logits plain decoding would give, bit for bit), by the
 * sampler (one nemotron_sampler_sample then nemotron_sampler_accept per emitted token, in order,
 * as plain decoding does) or, without a sampler, by argmax (the lowest index among equals).
 * Plain decoding here means: t = pick(logits); emit t; eval(t); t = pick(logits); ...
 *
 *     nemotron_spec_new(session, sampler, &params, &spec);  // session: verify_max >= K + 1
 *     nemotron_spec_prefill(spec, prompt, n);               // evals the prompt (the draft's too)
 *     while (...) nemotron_spec_next(spec, out, room, &n_out); // 1..K+1 tokens; caller stops
 */
#define NEMOTRON_SPEC_MAX 64  /* the most drafts one step may hold */

typedef struct nemotron_spec nemotron_spec;

/* A caller's drafter: writes up to max guesses of the tokens that follow history[0..n) (the
 * prompt and every emitted token) into draft and returns how many (0: none this step). */
typedef int (*nemotron_spec_draft_fn)(void *user, const int32_t *history, int n, int32_t *draft, int max);

typedef struct nemotron_spec_params {
    int spec_max;                     /* K, 1..NEMOTRON_SPEC_MAX; 0: 16 */
    /* The drafter: draft_fn when set; else draft (a session of a smaller model with the same
     * vocabulary, at position 0, with n_ctx at least the session's, owned by the caller and used only through this decoder until it
     * is freed) when set; else the MTP step when mtp is set; else n-gram prompt lookup. */
    nemotron_spec_draft_fn draft_fn;
    void *draft_user;
    nemotron_session *draft;
    /* 1 (when neither of those is set): the model's own MTP step drafts, chained on its outputs;
     * the session must have been made with nemotron_session_params.mtp */
    int mtp;
} nemotron_spec_params;

nemotron_spec_params nemotron_spec_default_params(void);

/* Binds a decoder to session (at position 0, verify_max >= K + 1), sampler (NULL: greedy) and the
 * drafter of params (NULL: the defaults). Neither session nor sampler is owned; both must outlive
 * the decoder and not be used by others meanwhile. *out is always set (as for
 * nemotron_session_new: on failure it only carries the message, or is NULL for NOMEM); bad
 * arguments are NEMOTRON_ERR_ARG naming the argument. */
nemotron_status nemotron_spec_new(nemotron_session *session, nemotron_sampler *sampler,
                                  const nemotron_spec_params *params, nemotron_spec **out);
void nemotron_spec_free(nemotron_spec *spec);              /* NULL is a no-op */
const char *nemotron_spec_errmsg(const nemotron_spec *spec);
/* Evaluates tokens[0..n) at the next positions of the session (and of the draft session) and
 * adds them to the history the drafters read. Only before the first nemotron_spec_next. The
 * sampler is not told (accept prompt tokens into it yourself where plain decoding would). Errors
 * as for nemotron_session_eval. */
nemotron_status nemotron_spec_prefill(nemotron_spec *spec, const int32_t *tokens, int n);
/* Emits the next tokens into out[0..*n_out), 1 <= *n_out <= min(max_out, K + 1): the first call
 * emits the one token picked from the prefill's logits, each later call the accepted drafts then
 * the model's own next token. Afterwards the session is exactly as after plain decoding of every
 * emitted token but the last (which plain decoding evaluates only when it goes on: the next call
 * does), and the sampler as after plain decoding's accept of every emitted token. Stops (end of
 * sequence, a length) are the caller's: it reads out and stops calling. NEMOTRON_ERR_CONTEXT when
 * the session has no room for the last emitted token; NEMOTRON_ERR_ARG for max_out < 1, a NULL
 * out or n_out, or no prefill; a device error as the session's. On error *n_out is 0. */
nemotron_status nemotron_spec_next(nemotron_spec *spec, int32_t *out, int max_out, int *n_out);

typedef struct nemotron_spec_stats {
    long long drafted;                /* draft tokens sent to verify passes */
    long long accepted;               /* of those, emitted */
    long long passes;                 /* passes of the session after the prefill (verify or plain) */
    long long emitted;                /* tokens emitted by nemotron_spec_next */
} nemotron_spec_stats;
/* The counts so far; all 0 for NULL. */
nemotron_spec_stats nemotron_spec_get_stats(const nemotron_spec *spec);

/* The end-of-sequence ids to stop on: generation_config.json's eos_token_id when the model
 * directory has one (Nemotron 3: 2 and 11), else config.json's. Returns how many. */
int nemotron_model_stop_ids(const nemotron_model *model, int32_t *ids, int n_max);

/* ---- model files: conversion and synthetic models ----------------------------------------- */

/* How a .nemo stores the weights (FORMATS.md). */
typedef enum nemotron_quant {
    NEMOTRON_QUANT_DEFAULT,   /* routed experts q4tp; other projections and lm_head q8_2f; router,
                               * norms and other vectors f32; embeddings bf16 (f16 kept) */
    NEMOTRON_QUANT_Q8_2F,     /* every projection q8_2f, the rest as the default */
    NEMOTRON_QUANT_BF16,      /* every projection bf16 (unquantized), the rest as the default */
    NEMOTRON_QUANT_SOURCE     /* every tensor exactly as the checkpoint stores it */
} nemotron_quant;

typedef struct nemotron_convert_params {
    nemotron_quant quant;
    int n_threads;            /* <= 0: the physical cores */
    /* Called now and then with the bytes done of the total (a progress bar); may be NULL. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} nemotron_convert_params;

nemotron_convert_params nemotron_convert_default_params(void);

/* Converts a Hugging Face model directory into one .nemo file at dst: the weights in the chosen
 * mix, plus config.json, tokenizer.json, tokenizer_config.json and generation_config.json where
 * the directory has them, each tensor with a checksum. The checkpoint is validated against its
 * config before anything is written; it is read in chunks (memory stays bounded whatever its
 * size); dst appears only when complete. On failure the message goes to errbuf[errlen]. */
nemotron_status nemotron_convert(const char *src_dir, const char *dst,
                                 const nemotron_convert_params *params, char *errbuf,
                                 size_t errlen);

typedef struct nemotron_synth_params {
    nemotron_quant quant;     /* DEFAULT, Q8_2F or BF16 */
    uint64_t seed;
    int n_threads;            /* <= 0: the physical cores */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
} nemotron_synth_params;

nemotron_synth_params nemotron_synth_default_params(void);

/* The shapes nemotron_synth knows, by index (NULL past the last), e.g.
 * "nemotron-3-nano-30b-a3b", "mini"; and a one-line description of each. */
const char *nemotron_synth_shape_name(int i);
const char *nemotron_synth_shape_about(int i);

/* Writes a .nemo of a published shape with random weights in the real formats (for benchmarks
 * without downloading weights): the shape's config.json and weights of sane magnitude, no
 * tokenizer (it runs on token ids: bench, logits, generate). Same seed, same file. */
nemotron_status nemotron_synth(const char *shape, const char *dst, const nemotron_synth_params *params,
                               char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* NEMOTRON_H */
