/* speculate.c - speculative decoding for generate, run and chat (speculate.h says what is
 * shared): loading the draft model, one decoder per run and the line of its counts.
 */
#include "speculate.h"

#include <stdio.h>
#include <string.h>

int cli_spec_wanted(const struct args *a) { return a->spec != NULL || a->draft_model != NULL; }

int cli_spec_mtp(const struct args *a) { return a->spec && !strcmp(a->spec, "mtp"); }

const char *cli_spec_check(const char *spec, const char *draft_model, int spec_max, char *buf, size_t cap) {
    if (spec && strcmp(spec, "ngram") && strcmp(spec, "mtp"))
        snprintf(buf, cap, "--spec '%s': the methods are ngram (prompt lookup) and mtp (the model's MTP layers); a "
                           "draft model is --draft-model MODEL", spec);
    else if (spec && draft_model)
        snprintf(buf, cap, "--spec %s and --draft-model: one drafter at a time", spec);
    else if (spec_max && !spec && !draft_model)
        snprintf(buf, cap, "--spec-max %d: speculation is off (give --spec ngram, --spec mtp or --draft-model MODEL)", spec_max);
    else
        return NULL;
    return buf;
}

int cli_spec_open(struct cli_spec *cs, const struct args *a, const nemotron_model *model,
                  const nemotron_session *target) {
    memset(cs, 0, sizeof *cs);
    if (!a->draft_model) return 0;
    /* the draft model opens as the model does (device, threads, the load's progress), with a
     * session as long as the target's: it follows every token the target holds */
    struct args d = *a;
    d.model = a->draft_model;
    d.verify_max = 0;
    if (cli_open(&d, nemotron_session_n_ctx(target), &cs->draft_model, &cs->draft)) {
        fprintf(stderr, "nemotron: --draft-model %s could not be opened (above: why)\n", a->draft_model);
        return 1;
    }
    /* said before any output (the decoder would refuse it too, at the first run) */
    int v = nemotron_model_vocab_size(model), dv = nemotron_model_vocab_size(cs->draft_model);
    if (dv != v) {
        fprintf(stderr, "nemotron: --draft-model %s: its vocabulary has %d tokens, the model's %d: a draft model must "
                        "share the model's tokenizer\n", a->draft_model, dv, v);
        return 2;
    }
    return 0;
}

int cli_spec_start(struct cli_spec *cs, const struct args *a, nemotron_session *target, nemotron_sampler *sampler) {
    cli_spec_end(cs);
    nemotron_session_reset(target);
    if (cs->draft) nemotron_session_reset(cs->draft);
    nemotron_spec_params p = nemotron_spec_default_params();
    p.spec_max = a->spec_max;
    p.draft = cs->draft;
    p.mtp = cli_spec_mtp(a);
    nemotron_status st = nemotron_spec_new(target, sampler, &p, &cs->dec);
    if (st) {
        int rc = cli_fail(a->draft_model ? "--draft-model" : "--spec", nemotron_spec_errmsg(cs->dec), st);
        cli_spec_end(cs);
        return rc;
    }
    return 0;
}

void cli_spec_report(const nemotron_spec_stats *s, const struct args *a, double tokens_per_s) {
    const char *drafter = a->draft_model ? "draft model" : a->spec;
    fprintf(stderr, "[speculative (%s, --spec-max %d): drafted %lld, accepted %lld (%.1f %%); %lld passes for %lld "
                    "tokens: %.1f tokens/s]\n",
            drafter, a->spec_max, s->drafted, s->accepted, s->drafted ? 100.0 * (double)s->accepted / (double)s->drafted : 0.0,
            s->passes, s->emitted, tokens_per_s);
}

void cli_spec_end(struct cli_spec *cs) {
    nemotron_spec_free(cs->dec);
    cs->dec = NULL;
}

void cli_spec_free(struct cli_spec *cs) {
    cli_spec_end(cs);
    nemotron_session_free(cs->draft);
    nemotron_model_free(cs->draft_model);
    memset(cs, 0, sizeof *cs);
}
