/* sampler_api.c - the public sampler handle (nemotron.h, "sampling") over sampler.c. */
#include "sampler.h"

struct nemotron_sampler {
    struct nt_err err;
    struct nt_sampler *s;             /* NULL when creation failed */
    int vocab;
};

nemotron_sampler_params nemotron_sampler_default_params(void) {
    struct nt_sampler_params d = nt_sampler_default_params();
    nemotron_sampler_params p = {.temperature = d.temperature, .top_k = d.top_k, .top_p = d.top_p,
                                 .min_p = d.min_p, .repeat_penalty = d.repeat_penalty,
                                 .presence_penalty = d.presence_penalty,
                                 .frequency_penalty = d.frequency_penalty,
                                 .penalty_last_n = d.penalty_last_n, .seed = d.seed};
    return p;
}

nemotron_status nemotron_sampler_new(const nemotron_sampler_params *p, int vocab, nemotron_sampler **out) {
    if (!out) return NEMOTRON_ERR_ARG;
    nemotron_sampler *h = nt_calloc(1, sizeof *h);
    *out = h;
    if (!h) return NEMOTRON_ERR_NOMEM;
    if (!p) return nt_fail(&h->err, NEMOTRON_ERR_ARG, "sampler params are NULL");
    struct nt_sampler_params q = {.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p,
                                  .min_p = p->min_p, .repeat_penalty = p->repeat_penalty,
                                  .presence_penalty = p->presence_penalty,
                                  .frequency_penalty = p->frequency_penalty,
                                  .penalty_last_n = p->penalty_last_n, .seed = p->seed};
    h->vocab = vocab;
    return nt_sampler_new(&q, vocab, &h->s, &h->err);
}

void nemotron_sampler_free(nemotron_sampler *h) {
    if (!h) return;
    nt_sampler_free(h->s);
    nt_free(h);
}

const char *nemotron_sampler_errmsg(const nemotron_sampler *h) { return h ? h->err.msg : "out of memory"; }
int nemotron_sampler_is_greedy(const nemotron_sampler *h) { return h && h->s && nt_sampler_is_greedy(h->s); }
/* A NULL handle, or one whose creation failed (it holds only the message), samples nothing (-1)
 * and accepts nothing (NEMOTRON_ERR_ARG): an error, never a crash. */
int32_t nemotron_sampler_sample(nemotron_sampler *h, const float *logits) {
    return h && h->s && logits ? nt_sampler_sample(h->s, logits) : -1;
}
nemotron_status nemotron_sampler_accept(nemotron_sampler *h, int32_t token) {
    if (!h) return NEMOTRON_ERR_ARG;
    if (!h->s) return NEMOTRON_ERR_ARG; /* its message still says why it was not created */
    if (token < 0 || token >= h->vocab)
        return nt_fail(&h->err, NEMOTRON_ERR_ARG, "token %d is outside the vocabulary [0, %d)", (int)token, h->vocab);
    nt_sampler_accept(h->s, token);
    return NEMOTRON_OK;
}
void nemotron_sampler_reset(nemotron_sampler *h) {
    if (h && h->s) nt_sampler_reset(h->s);
}
