/* test_demo.c - the bundled demo model (models/nemotron-h-kjv) against transformers 5.17.
 *
 * tests/fixtures/demo/reference.json holds transformers' greedy continuations of five prompts
 * (32 tokens each: the prompt in one call, then one token per call) and the logits of a text's
 * full forward (logits.f32), in float32 arithmetic on the bf16 weights with no dt floor
 * (tools/train_demo.py). The engine must give the same greedy tokens exactly and every
 * position's logits within REL_TOL.
 */
#include <json.h>
#include <math.h>
#include <string.h>

#include "nemotron.h"
#include "test.h"

/* The same bound as test_fixtures.c and for the same reason: transformers' own f32 error is
 * ~1e-6; real mistakes are >= 1e-3. */
#define REL_TOL 1e-5

#define MODEL "models/nemotron-h-kjv"
#define REF "tests/fixtures/demo"

static int ids_of(json_object *arr, int32_t *out, int cap) {
    int n = (int)json_object_array_length(arr);
    for (int i = 0; i < n && i < cap; i++) out[i] = json_object_get_int(json_object_array_get_idx(arr, i));
    return n < cap ? n : cap;
}

int main(void) {
    json_object *ref = json_object_from_file(REF "/reference.json");
    CHECK(ref != NULL, "cannot read %s/reference.json", REF);
    nemotron_model *m;
    nemotron_status st = nemotron_model_load(MODEL, NULL, &m);
    CHECK(st == NEMOTRON_OK, "load %s: %s", MODEL, nemotron_model_errmsg(m));
    if (!ref || st) {
        nemotron_model_free(m);
        return test_summary("demo");
    }
    int V = nemotron_model_vocab_size(m);
    nemotron_session *s;
    nemotron_session_params sp = nemotron_session_default_params();
    sp.n_ctx = 512;
    st = nemotron_session_new(m, &sp, &s);
    CHECK(st == NEMOTRON_OK, "session: %s", nemotron_session_errmsg(s));

    json_object *greedy = json_object_object_get(ref, "greedy");
    int n_prompts = (int)json_object_array_length(greedy), bad_prompts = 0;
    for (int p = 0; p < n_prompts && !st; p++) {
        json_object *g = json_object_array_get_idx(greedy, p);
        int32_t prompt[256], want[256];
        int np = ids_of(json_object_object_get(g, "prompt_ids"), prompt, 256);
        int nw = ids_of(json_object_object_get(g, "greedy_ids"), want, 256);
        nemotron_session_reset(s);
        st = nemotron_session_eval(s, prompt, np, NULL);
        int first_diff = -1;
        for (int i = 0; i < nw && !st; i++) {
            int32_t next = nemotron_session_argmax(s);
            if (next != want[i] && first_diff < 0) first_diff = i;
            if (i + 1 < nw) st = nemotron_session_eval(s, &next, 1, NULL);
        }
        CHECK(first_diff < 0, "prompt %d ('%s'): greedy token %d differs", p,
              json_object_get_string(json_object_object_get(g, "prompt")), first_diff);
        bad_prompts += first_diff >= 0;
    }
    CHECK(st == NEMOTRON_OK, "eval: %s", nemotron_session_errmsg(s));
    printf("  demo greedy: %d of %d prompts x 32 tokens identical to transformers\n", n_prompts - bad_prompts, n_prompts);

    int32_t ids[512];
    int n = ids_of(json_object_object_get(ref, "logits_ids"), ids, 512);
    float *want = malloc((size_t)n * V * sizeof(float)), *got = malloc((size_t)n * V * sizeof(float));
    FILE *f = fopen(REF "/logits.f32", "rb");
    size_t read = f ? fread(want, sizeof(float), (size_t)n * V, f) : 0;
    if (f) fclose(f);
    CHECK(read == (size_t)n * V, "logits.f32 holds %zu floats, expected %d x %d", read, n, V);
    nemotron_session_reset(s);
    st = nemotron_session_eval(s, ids, n, got);
    CHECK(st == NEMOTRON_OK, "eval: %s", nemotron_session_errmsg(s));
    double worst = 0;
    for (int t = 0; t < n && read == (size_t)n * V; t++) {
        double d = 0, r = 0;
        for (int i = 0; i < V; i++) {
            double e = (double)got[(size_t)t * V + i] - want[(size_t)t * V + i];
            d += e * e;
            r += (double)want[(size_t)t * V + i] * want[(size_t)t * V + i];
        }
        if (sqrt(d / r) > worst) worst = sqrt(d / r);
    }
    CHECK(worst <= REL_TOL, "demo logits: worst position rel L2 %.3e > %.0e", worst, REL_TOL);
    printf("  demo logits: %d positions, worst rel L2 %.2e\n", n, worst);
    free(want);
    free(got);
    nemotron_session_free(s);
    nemotron_model_free(m);
    json_object_put(ref);
    return test_summary("demo");
}
