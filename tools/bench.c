/* bench.c - `nemotron bench`: prompt and generation speed, held against the memory bandwidth.
 *
 * Reports, as llama-bench does, a table of the model (size, params), the backend and threads, and
 * pp N (a prompt of N positions, in passes of the backend's size or --pass's) and tg N (N positions
 * decoded one pass each) in tokens/s as the mean +- standard deviation of -r repetitions (--json
 * also gives every sample). It also measures this machine's memory read bandwidth with the same
 * threads, and reports which share of it decoding reaches: (weight bytes a one-position pass reads:
 * every matrix it touches, only the chosen experts, in their stored sizes) x (tg tokens/s) /
 * bandwidth, for the mean and for the best repetition. And the cost of one full pass against
 * single-position passes (best against best): the point of passes is that a 64-position pass costs
 * far less than 64 one-position passes.
 * -p and -n take lists (-p 256,512), one row each as llama-bench gives; the bandwidth share and
 * the pass are the first length's. --json gives "pp" and "tg" as one object each, or as arrays
 * of them for lists. Token ids are a fixed pseudo-random sequence, so runs are comparable.
 * --verify K,... times a verify pass of 1 + K positions (speculative decoding's check of K
 * drafted tokens, snapshots written) against a decode step, best against best, and the accept
 * that keeps one of them: the ceiling of what speculation can gain on this device.
 * On the CPU it also says on how many threads the passes ran (src/cpu/team.c: under other load the
 * team runs one thread), so a figure under load can be read as the team's choice or the host's
 * (--json: "cpu_team", prompt_passes and decode_passes as [on one thread, on the team], cut as
 * [prompt, decode] team passes that ended on one thread, and the load readings).
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cpu/cpu.h"  /* which kernel variant the CPU backend runs, for the report */
#include "cpu/team.h" /* how many threads its passes ran on */

/* The bandwidth probe reads a buffer this large: far beyond the last-level cache (32 MiB here),
 * so what is timed is DRAM, as for the weights of a model of hundreds of MB. */
#define PROBE_BYTES ((size_t)1 << 30)

/* Sums one thread's part with four independent AVX2 accumulators: enough loads in flight to
 * reach DRAM's speed (a plain scalar sum tops out far below it). */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 12)));
    }
    __m256i a = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}

static uint64_t sum_scalar(const uint64_t *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

/* Best-of read bandwidth in bytes/s with `threads` threads, each summing its own contiguous
 * part of the buffer. */
static double read_bandwidth(int threads, int reps) {
    size_t n = PROBE_BYTES / sizeof(uint64_t);
    uint64_t *buf = malloc(PROBE_BYTES);
    if (!buf) return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;   /* touch every page */
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2");
    double best = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps + 1; r++) {           /* the first round warms up */
        uint64_t sum = 0;
        double t0 = cli_now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        {
            size_t per = n / (size_t)omp_get_num_threads() / 16 * 16;
            const uint64_t *part = buf + per * (size_t)omp_get_thread_num();
            sum += avx2 ? sum_avx2(part, per) : sum_scalar(part, per);
        }
        double dt = cli_now() - t0;
        sink += sum;
        double bytes = (double)(n / (size_t)threads / 16 * 16) * threads * sizeof(uint64_t);
        if (r > 0 && bytes / dt > best) best = bytes / dt;
    }
    (void)sink;
    free(buf);
    return best;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped. */
static void print_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void fill_tokens(int32_t *t, int n, int vocab) {
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
}

/* tokens/s of each repetition of one test, and what the table shows of them. */
struct samples {
    double *v;
    int n;
    double mean, sd, best;
};

static void summarize(struct samples *s) {
    double sum = 0, sq = 0;
    s->best = 0;
    for (int i = 0; i < s->n; i++) {
        sum += s->v[i];
        if (s->v[i] > s->best) s->best = s->v[i];
    }
    s->mean = sum / s->n;
    for (int i = 0; i < s->n; i++) sq += (s->v[i] - s->mean) * (s->v[i] - s->mean);
    s->sd = s->n > 1 ? sqrt(sq / (s->n - 1)) : 0;
}

/* One row per -p length (pp) and per -n length (tg), as llama-bench's lists give. */
struct result {
    struct samples pp[CLI_MAX_BENCH_SIZES], tg[CLI_MAX_BENCH_SIZES];
    double pass_s;              /* one full pass from position 0, the best repetition */
    double verify_s[CLI_MAX_BENCH_SIZES], accept_s[CLI_MAX_BENCH_SIZES]; /* --verify: the best */
};

static int run(const struct args *a, nemotron_session *s, const int32_t *tok, struct result *r) {
    nemotron_status st;
    int pass = nemotron_session_pass_max(s), full = a->bench_p[0] < pass ? a->bench_p[0] : pass;
    r->pass_s = 0;
    /* a warm-up, as llama-bench does: the first touch of the mapped weights and of the session's
     * buffers (page faults) is not what a repetition measures */
    nemotron_session_reset(s);
    if ((st = nemotron_session_eval(s, tok, full, NULL))) goto fail;
    if (a->n_bench_v) { /* and of the snapshot slots a verify pass writes */
        int32_t argmax[NEMOTRON_PASS_MAX];
        nemotron_session_reset(s);
        if ((st = nemotron_session_eval(s, tok, 1, NULL)) ||
            (st = nemotron_session_verify(s, tok + 1, a->verify_max, argmax)) ||
            (st = nemotron_session_accept(s, 1)))
            goto fail;
    }
    for (int rep = 0; rep < a->reps; rep++) {
        /* pp: each whole prompt from position 0 */
        double t0;
        for (int i = 0; i < a->n_bench_p; i++) {
            nemotron_session_reset(s);
            t0 = cli_now();
            if ((st = nemotron_session_eval(s, tok, a->bench_p[i], NULL))) goto fail;
            r->pp[i].v[rep] = a->bench_p[i] / (cli_now() - t0);
        }
        /* one full pass from position 0 */
        nemotron_session_reset(s);
        t0 = cli_now();
        if ((st = nemotron_session_eval(s, tok, full, NULL))) goto fail;
        double dt = cli_now() - t0;
        if (r->pass_s == 0 || dt < r->pass_s) r->pass_s = dt;
        /* tg: one position per pass after a one-token start */
        for (int k = 0; k < a->n_bench_n; k++) {
            nemotron_session_reset(s);
            if ((st = nemotron_session_eval(s, tok, 1, NULL))) goto fail;
            t0 = cli_now();
            for (int i = 0; i < a->bench_n[k]; i++) {
                int32_t next = nemotron_session_argmax(s);
                if ((st = nemotron_session_eval(s, &next, 1, NULL))) goto fail;
            }
            r->tg[k].v[rep] = a->bench_n[k] / (cli_now() - t0);
        }
        /* verify: 1 + k drafted positions in one pass after a one-token start, every position's
         * argmax brought back (as a speculative step needs them); then keep the first */
        for (int v = 0; v < a->n_bench_v; v++) {
            int32_t argmax[NEMOTRON_PASS_MAX];
            nemotron_session_reset(s);
            if ((st = nemotron_session_eval(s, tok, 1, NULL))) goto fail;
            t0 = cli_now();
            if ((st = nemotron_session_verify(s, tok + 1, a->bench_v[v] + 1, argmax))) goto fail;
            double tv = cli_now() - t0;
            t0 = cli_now();
            if ((st = nemotron_session_accept(s, 1))) goto fail;
            double ta = cli_now() - t0;
            if (rep == 0 || tv < r->verify_s[v]) r->verify_s[v] = tv;
            if (rep == 0 || ta < r->accept_s[v]) r->accept_s[v] = ta;
        }
    }
    for (int i = 0; i < a->n_bench_p; i++) {
        r->pp[i].n = a->reps;
        summarize(&r->pp[i]);
    }
    for (int k = 0; k < a->n_bench_n; k++) {
        r->tg[k].n = a->reps;
        summarize(&r->tg[k]);
    }
    return 0;
fail:
    return cli_fail("bench", nemotron_session_errmsg(s), st);
}

static void json_samples(int n, const struct samples *s) {
    printf("{\"n\": %d, \"tokens_per_s\": %.3f, \"stddev\": %.3f, \"best\": %.3f, \"samples\": [",
           n, s->mean, s->sd, s->best);
    for (int i = 0; i < s->n; i++) printf("%s%.3f", i ? ", " : "", s->v[i]);
    printf("]}");
}

/* The file name without its directories: the table's "model" column. */
static const char *base_name(const char *path) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;   /* a directory given as DIR/ */
    const char *b = path;
    for (size_t i = 0; i + 1 < len; i++)
        if (path[i] == '/') b = path + i + 1;
    return b;
}

static void print_row(const char *model, double gib, double bparams, const char *backend, int threads,
                      const char *test,
                      int n, const struct samples *s) {
    char name[32];
    snprintf(name, sizeof name, "%s%d", test, n);
    printf("| %-24.24s | %8.2f GiB | %8.2f B | %-7s | %7d | %8s | %9.2f ± %5.2f |\n", model, gib,
           bparams, backend, threads, name, s->mean, s->sd);
}

/* "pp": {...} for one length, "pp": [{...}, ...] for a list */
static void json_tests(const char *name, const int *sizes, int n, const struct samples *s) {
    printf("\"%s\": %s", name, n > 1 ? "[" : "");
    for (int i = 0; i < n; i++) {
        printf("%s", i ? ", " : "");
        json_samples(sizes[i], &s[i]);
    }
    printf("%s", n > 1 ? "]" : "");
}

static int max_of(const int *v, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

int cmd_bench(const struct args *a) {
    nemotron_model *m = NULL;
    nemotron_session *s = NULL;
    int max_p = max_of(a->bench_p, a->n_bench_p), max_n = max_of(a->bench_n, a->n_bench_n);
    int max_v = a->n_bench_v ? max_of(a->bench_v, a->n_bench_v) + 2 : 0; /* a start, then 1 + k */
    int ctx = max_p > max_n ? max_p : max_n;
    int rc = cli_open(a, (ctx > max_v ? ctx : max_v) + 1, &m, &s);
    int32_t *tok = NULL;
    struct result r = {0};
    for (int i = 0; i < a->n_bench_p; i++)
        if (!(r.pp[i].v = calloc((size_t)a->reps, sizeof(double)))) rc = rc ? rc : cli_fail("bench", "out of memory", NEMOTRON_ERR_NOMEM);
    for (int i = 0; i < a->n_bench_n; i++)
        if (!(r.tg[i].v = calloc((size_t)a->reps, sizeof(double)))) rc = rc ? rc : cli_fail("bench", "out of memory", NEMOTRON_ERR_NOMEM);
    if (!rc) {
        int vocab = nemotron_model_vocab_size(m);
        int pass = nemotron_session_pass_max(s), len = (max_p > pass ? max_p : pass) + 1;
        tok = malloc((size_t)len * sizeof *tok);
        if (!tok) rc = cli_fail("bench", "out of memory", NEMOTRON_ERR_NOMEM);
        else fill_tokens(tok, len, vocab);
    }
    if (!rc) rc = run(a, s, tok, &r);
    struct nt_cpu_team_tally team;
    nt_cpu_team_tally(&team); /* the bench's passes (the only ones of this process) */
    if (!rc) {
        int threads = nemotron_model_n_threads(m);
        /* the table's backend column: CUDA when the weights live on a GPU */
        const char *backend = strncmp(nemotron_model_device(m), "cuda", 4) == 0 ? "CUDA" : "CPU";
        /* the memory the weights are read from: the device's own, else host memory */
        double bw = nemotron_model_device_read_bandwidth(m);
        if (bw <= 0) bw = read_bandwidth(threads, 5);
        double wbytes = (double)nemotron_model_active_weight_bytes(m);
        double size = (double)nemotron_model_weight_bytes(m), params = (double)nemotron_model_n_params(m);
        /* the share of the bandwidth: the first -n length's decoding */
        double decode_bw = wbytes * r.tg[0].mean, share = bw > 0 ? decode_bw / bw : 0;
        double share_best = bw > 0 ? wbytes * r.tg[0].best / bw : 0;
        double pass_ratio = r.pass_s * r.tg[0].best;     /* the pass in single-position passes */
        int full = a->bench_p[0] < nemotron_session_pass_max(s) ? a->bench_p[0] : nemotron_session_pass_max(s);
        if (a->json) {
            printf("{\"model\": ");
            print_json_string(a->model);
            printf(", \"device\": ");
            print_json_string(nemotron_model_device(m));
            printf(", \"pattern\": \"%s\", \"backend\": \"%s\", \"threads\": %d, "
                   "\"weight_bytes\": %.0f, \"n_params\": %.0f, \"repetitions\": %d, "
                   "\"active_weight_bytes\": %.0f, \"read_bandwidth_gbs\": %.3f, ",
                   nemotron_model_pattern(m), backend, threads, size, params, a->reps, wbytes, bw / 1e9);
            json_tests("pp", a->bench_p, a->n_bench_p, r.pp);
            printf(", ");
            json_tests("tg", a->bench_n, a->n_bench_n, r.tg);
            printf(", \"decode_weight_gbs\": %.3f, \"decode_bandwidth_share\": %.4f, "
                   "\"decode_bandwidth_share_best\": %.4f, "
                   "\"pass\": {\"n\": %d, \"seconds\": %.6f, \"single_seconds\": %.6f, "
                   "\"in_single_passes\": %.3f, \"per_position_speedup\": %.3f}",
                   decode_bw / 1e9, share, share_best, full, r.pass_s, 1.0 / r.tg[0].best, pass_ratio,
                   full / pass_ratio);
            if (!strcmp(backend, "CPU"))
                printf(", \"cpu_team\": {\"prompt_passes\": [%lld, %lld], \"decode_passes\": [%lld, %lld], "
                       "\"cut\": [%lld, %lld], \"load_readings\": %lld, \"load_crowded\": %lld}",
                       team.passes[1][0], team.passes[1][1], team.passes[0][0], team.passes[0][1], team.cut[1],
                       team.cut[0], team.readings, team.crowded);
            if (a->n_bench_v) {
                printf(", \"verify\": [");
                for (int v = 0; v < a->n_bench_v; v++)
                    printf("%s{\"k\": %d, \"seconds\": %.6f, \"decode_steps\": %.3f, \"accept_seconds\": %.6f}",
                           v ? ", " : "", a->bench_v[v], r.verify_s[v], r.verify_s[v] * r.tg[0].best, r.accept_s[v]);
                printf("]");
            }
            printf("}\n");
        } else {
            printf("| %-24s | %12s | %10s | %-7s | %7s | %8s | %17s |\n", "model", "size", "params",
                   "backend", "threads", "test", "t/s");
            printf("| %-24s | %12s | %10s | %-7s | %7s | %8s | %17s |\n", "------------------------",
                   "-----------:", "---------:", "-------", "------:", "-------:", "----------------:");
            const char *name = base_name(a->model);
            for (int i = 0; i < a->n_bench_p; i++)
                print_row(name, size / 1073741824.0, params / 1e9, backend, threads, "pp", a->bench_p[i], &r.pp[i]);
            for (int i = 0; i < a->n_bench_n; i++)
                print_row(name, size / 1073741824.0, params / 1e9, backend, threads, "tg", a->bench_n[i], &r.tg[i]);
            printf("\n%d repetitions (mean ± standard deviation); layers %s; device %s; prompts in passes of "
                   "up to %d positions\n",
                   a->reps, nemotron_model_pattern(m), nemotron_model_device(m), nemotron_session_pass_max(s));
            if (!strcmp(backend, "CPU")) {
                printf("CPU kernels: %s (NEMOTRON_CPU chooses: scalar, avx2, avxvnni, avx512vnni, avx512bf16, amx; by default "
                       "the best this processor runs, avx512bf16 and amx only when named)\n", nt_cpu_isa_name(nt_cpu_isa_selected()));
                if (threads > 1)
                    printf("CPU team: prompt passes on one thread %lld, on %d %lld (%lld cut to one); decode passes %lld, "
                           "%lld (%lld cut); load readings %lld, cores taken in %lld\n",
                           team.passes[1][0], threads, team.passes[1][1], team.cut[1], team.passes[0][0],
                           team.passes[0][1], team.cut[0], team.readings, team.crowded);
            }
            printf("memory read bandwidth (measured, best of 5): %.2f GB/s\n", bw / 1e9);
            printf("decode streams %.2f GB/s of weights (%.1f MB per position): %.1f%% of the measured "
                   "bandwidth (best repetition: %.1f%%)\n",
                   decode_bw / 1e9, wbytes / 1e6, 100 * share, 100 * share_best);
            printf("one %d-position pass: %.2f ms = %.2f single-position passes "
                   "(%.2fx cheaper per position than decode)\n",
                   full, 1e3 * r.pass_s, pass_ratio, full / pass_ratio);
            for (int v = 0; v < a->n_bench_v; v++)
                printf("verify pass of 1+%d positions: %.2f ms = %.2f decode steps; accept(1): %.3f ms\n",
                       a->bench_v[v], 1e3 * r.verify_s[v], r.verify_s[v] * r.tg[0].best, 1e3 * r.accept_s[v]);
        }
    }
    for (int i = 0; i < CLI_MAX_BENCH_SIZES; i++) {
        free(r.pp[i].v);
        free(r.tg[i].v);
    }
    free(tok);
    nemotron_session_free(s);
    nemotron_model_free(m);
    return rc;
}
