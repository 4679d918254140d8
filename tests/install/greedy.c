/* greedy.c - a client of the installed library, built by tests/cli/test_install.sh with only
 * `pkg-config --cflags --libs nemotron`: loads a model, runs a prompt and prints the greedy
 * continuation's ids as `nemotron generate` does (1,2,3), so the test can compare the two.
 *
 *   greedy MODEL N ID...
 */
#include <stdio.h>
#include <stdlib.h>

#include <nemotron.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: greedy MODEL N ID...\n");
        return 2;
    }
    int n_gen = atoi(argv[2]), n = argc - 3;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return 1;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)atoi(argv[3 + i]);
    nemotron_model *m = NULL;
    nemotron_session *s = NULL;
    nemotron_model_params mp = nemotron_model_default_params();
    nemotron_status st = nemotron_model_load(argv[1], &mp, &m);
    if (!st) {
        nemotron_session_params sp = nemotron_session_default_params();
        sp.n_ctx = n + n_gen;
        st = nemotron_session_new(m, &sp, &s);
    }
    if (!st) st = nemotron_session_eval(s, ids, n, NULL);
    for (int i = 0; !st && i < n_gen; i++) {
        int32_t next = nemotron_session_argmax(s);
        printf("%s%d", i ? "," : "", (int)next);
        if (i + 1 < n_gen) st = nemotron_session_eval(s, &next, 1, NULL);
    }
    printf("\n");
    if (st) fprintf(stderr, "greedy: %s: %s %s\n", nemotron_status_str(st), nemotron_model_errmsg(m),
                    nemotron_session_errmsg(s));
    nemotron_session_free(s);
    nemotron_model_free(m);
    free(ids);
    printf("version %s\n", nemotron_version());
    return st ? 1 : 0;
}
