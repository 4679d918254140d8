/* sampler_api.c - the public sampler handle (nemotron.h, "sampling") over sampler.c. */
#include "sampler.h"

struct nemotron_sampler {
    struct nt_err err;
    struct nt_sampler *s;             /* NULL when creation failed */
};

nemotron_sampler_params nemotron_sampler_default_params(void) {
    struct nt_sampler_params d = nt_sampler_default_params();
    nemotron_sampler_params p = {d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty,
                                 d.presence_penalty, d.frequency_penalty, d.penalty_last_n, d.seed};
    return p;
}

nemotron_status nemotron_sampler_new(const nemotron_sampler_params *p, int vocab, nemotron_sampler **out) {
    nemotron_sampler *h = nt_calloc(1, sizeof *h);
    *out = h;
    if (!h) return NEMOTRON_ERR_NOMEM;
    if (!p) return nt_fail(&h->err, NEMOTRON_ERR_ARG, "sampler params are NULL");
    struct nt_sampler_params q = {p->temperature, p->top_k, p->top_p, p->min_p, p->repeat_penalty,
                                  p->presence_penalty, p->frequency_penalty, p->penalty_last_n, p->seed};
    return nt_sampler_new(&q, vocab, &h->s, &h->err);
}

void nemotron_sampler_free(nemotron_sampler *h) {
    if (!h) return;
    nt_sampler_free(h->s);
    nt_free(h);
}

const char *nemotron_sampler_errmsg(const nemotron_sampler *h) { return h ? h->err.msg : "out of memory"; }
int32_t nemotron_sampler_sample(nemotron_sampler *h, const float *logits) { return nt_sampler_sample(h->s, logits); }
void nemotron_sampler_accept(nemotron_sampler *h, int32_t token) { nt_sampler_accept(h->s, token); }
void nemotron_sampler_reset(nemotron_sampler *h) { nt_sampler_reset(h->s); }
