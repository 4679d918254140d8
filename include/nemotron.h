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
 *     nemotron_session_eval(s, prompt, 3, NULL);          // prefill: passes of up to 64 positions
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

/* The most positions one pass may hold: each weight is read once for up to this many. */
#define NEMOTRON_PASS_MAX 64

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
    NEMOTRON_ERR_INTERNAL     /* a broken invariant inside the library: a bug */
} nemotron_status;

/* A static English name of a status ("ok", "i/o error", ...). Never NULL. */
const char *nemotron_status_str(nemotron_status status);

/* "0.1.0" */
const char *nemotron_version(void);

typedef struct nemotron_model nemotron_model;
typedef struct nemotron_session nemotron_session;

typedef struct nemotron_model_params {
    int n_threads;          /* CPU threads; <= 0: the number of physical cores */
    const char *device;     /* "cpu" (NULL = "cpu") */
} nemotron_model_params;

nemotron_model_params nemotron_model_default_params(void);

/* Opens a Hugging Face model directory (config.json plus model.safetensors, or shards listed by
 * model.safetensors.index.json). Weights are mmap-ed and read in place. Every tensor the config
 * implies is checked for presence, dtype and shape before anything is computed.
 * *out is always set (NULL only when even the handle could not be allocated); on failure it
 * holds just the message. Free it with nemotron_model_free in both cases. */
nemotron_status nemotron_model_load(const char *path, const nemotron_model_params *params,
                                    nemotron_model **out);
void nemotron_model_free(nemotron_model *model);          /* NULL is a no-op */
const char *nemotron_model_errmsg(const nemotron_model *model); /* "" after success */

int nemotron_model_vocab_size(const nemotron_model *model);
int nemotron_model_hidden_size(const nemotron_model *model);
int nemotron_model_n_layer(const nemotron_model *model);
/* The layer kinds as the pattern string of the config: 'M' Mamba-2, '*' attention, '-' MLP,
 * 'E' MoE. Valid as long as the model. */
const char *nemotron_model_pattern(const nemotron_model *model);
/* Bytes of weights one single-position pass reads (routed experts: only the chosen ones). */
uint64_t nemotron_model_active_weight_bytes(const nemotron_model *model);
/* The end-of-sequence ids of config.json (eos_token_id, one or a list); n_max entries at most.
 * Returns how many there are. */
int nemotron_model_eos_ids(const nemotron_model *model, int32_t *ids, int n_max);

typedef struct nemotron_session_params {
    int n_ctx;              /* positions the session can hold; <= 0: 4096 */
    int pass_max;           /* positions per pass, 1..NEMOTRON_PASS_MAX; <= 0: NEMOTRON_PASS_MAX */
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
/* The last evaluated position's logits, float[vocab_size]; NULL before the first eval.
 * Valid until the next eval or reset. */
const float *nemotron_session_logits(const nemotron_session *session);
/* argmax of those logits (the lowest index among equals); -1 before the first eval. */
int32_t nemotron_session_argmax(const nemotron_session *session);
int nemotron_session_pos(const nemotron_session *session);  /* positions held */
int nemotron_session_n_ctx(const nemotron_session *session);
void nemotron_session_reset(nemotron_session *session);     /* back to position 0 */

#ifdef __cplusplus
}
#endif

#endif /* NEMOTRON_H */
