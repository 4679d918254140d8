/* sampler.h - choosing the next token from logits: greedy, or sampled with the usual filters.
 *
 * A sampler owns its settings, its random state (seeded: the same seed and logits give the same
 * tokens on every machine) and the scratch it needs, allocated once by nt_sampler_new for a
 * vocabulary size; sampling allocates nothing. Order of operations (as llama.cpp and HF apply
 * them): penalties over the recent tokens (repetition: divide positive / multiply negative
 * logits; presence: subtract once per seen token; frequency: subtract per occurrence) ->
 * temperature 0 means greedy (argmax, lowest index among equals) -> top-k -> softmax with
 * temperature -> top-p (smallest set reaching p) -> min-p (drop below min_p * max prob) ->
 * draw.
 */
#ifndef NT_SAMPLER_H
#define NT_SAMPLER_H

#include "../common.h"

struct nt_sampler_params {
    float temperature;            /* 0: greedy */
    int top_k;                    /* 0: off */
    float top_p;                  /* 1: off */
    float min_p;                  /* 0: off */
    float repeat_penalty;         /* 1: off */
    float presence_penalty;       /* 0: off */
    float frequency_penalty;      /* 0: off */
    int penalty_last_n;           /* how many recent tokens the penalties look at; 0: none */
    uint64_t seed;
};

struct nt_sampler;

/* Default params: temperature 0.6 (what NVIDIA suggests for Nemotron 3 with reasoning), top_p
 * 0.95, everything else off, penalty_last_n 64, seed 0. */
struct nt_sampler_params nt_sampler_default_params(void);
/* Checks the params (ranges named in err) and allocates for vocab ids. */
nemotron_status nt_sampler_new(const struct nt_sampler_params *p, int vocab,
                               struct nt_sampler **out, struct nt_err *err);
void nt_sampler_free(struct nt_sampler *s);
/* 1 when every choice is the argmax of the logits as given (temperature 0, no penalty). */
int nt_sampler_is_greedy(const struct nt_sampler *s);
/* Chooses a token from logits[vocab] (not modified). */
int32_t nt_sampler_sample(struct nt_sampler *s, const float *logits);
/* Records a token of the sequence (prompt or generated) for the penalties. */
void nt_sampler_accept(struct nt_sampler *s, int32_t token);
void nt_sampler_reset(struct nt_sampler *s);  /* forget the history; the random state stays */

#endif /* NT_SAMPLER_H */
