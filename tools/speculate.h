/* speculate.h - speculative decoding for the commands that generate (generate, run, chat):
 * the drafter the command line chose (--spec ngram|mtp, --draft-model MODEL), the decoder of a run
 * and the line that reports its counts.
 *
 * The decoder (nemotron_spec_*) gives the tokens plain decoding gives, so a command only swaps
 * its token source: prefill the prompt, then take 1..K+1 tokens per step and handle each as it
 * handles a plainly decoded one. The decoder starts from position 0 and reads the whole prompt
 * as its history, so a run with speculation begins with an empty session.
 */
#ifndef NEMOTRON_SPECULATE_H
#define NEMOTRON_SPECULATE_H

#include "cli.h"

/* --spec-max's default: the library's (nemotron_spec_params: 0 means 16), said in the help */
#define CLI_SPEC_DEFAULT_K 16

struct cli_spec {
    nemotron_model *draft_model;     /* --draft-model: loaded once, on the target's device */
    nemotron_session *draft;         /* its session, as long as the target's */
    nemotron_spec *dec;              /* the decoder of the run in progress */
};

/* Whether the command line asked for speculation; for the model's MTP step (--spec mtp: the
 * session must be made with it). */
int cli_spec_wanted(const struct args *a);
int cli_spec_mtp(const struct args *a);
/* --spec METHOD, --draft-model MODEL and --spec-max K (0: not given) together, as the commands
 * and serve take them: NULL when they fit, else buf holding what is wrong. */
const char *cli_spec_check(const char *spec, const char *draft_model, int spec_max, char *buf, size_t cap);
/* Loads the draft model (when --draft-model) with a session of the target session's length and
 * checks that its vocabulary is the model's. 0 on success; else a message was printed (2: the
 * draft model does not fit the model), and cli_spec_free frees what was made. */
int cli_spec_open(struct cli_spec *cs, const struct args *a, const nemotron_model *model,
                  const nemotron_session *target);
/* A decoder for one run on target (reset to position 0 here, and the draft session too), picking
 * with sampler (NULL: greedy); then nemotron_spec_prefill/next on cs->dec. 0 or 1 after a
 * message. */
int cli_spec_start(struct cli_spec *cs, const struct args *a, nemotron_session *target, nemotron_sampler *sampler);
/* The decoder's line on stderr: the drafter, drafted and accepted tokens, the acceptance, the
 * passes (nemotron_spec_get_stats of a run) and the generation speed the command measured. */
void cli_spec_report(const nemotron_spec_stats *s, const struct args *a, double tokens_per_s);
/* Frees the run's decoder (the draft model stays for the next run). */
void cli_spec_end(struct cli_spec *cs);
void cli_spec_free(struct cli_spec *cs);

#endif /* NEMOTRON_SPECULATE_H */
