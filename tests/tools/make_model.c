/* make_model.c - writes a random Nemotron-H model directory (tests/support/synth.h).
 *
 *   build/make_model OUT_DIR [--shape tiny|tiny-mtp|tiny-tied|bench-300m]
 *                            [--dtype bf16|f16|f32] [--seed N] [--shards N]
 *
 * For the command-line tests and the benchmark. Defaults: tiny, f32, seed 1, one file. Prints
 * what it wrote and the byte size; on any error prints a message and exits with status 2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/synth.h"

static void usage_exit(const char *fmt, const char *what) {
    fprintf(stderr, "make_model: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr,
            "\nusage: make_model OUT_DIR [--shape %s] [--dtype bf16|f16|f32] [--seed N] "
            "[--shards N]\n",
            synth_shape_names());
    exit(2);
}

/* A whole decimal number in [lo, hi], or exit naming the option. */
static unsigned long long number(const char *s, const char *opt, unsigned long long lo,
                                 unsigned long long hi) {
    char *end;
    errno = 0;
    if (!*s || *s == '-' || *s == '+') usage_exit("%s needs a decimal number", opt);
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < lo || v > hi) {
        fprintf(stderr, "make_model: %s: '%s' is not a number in [%llu, %llu]\n", opt, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *shape_name = "tiny";
    struct synth_options o = synth_default_options();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: make_model OUT_DIR [--shape %s] [--dtype bf16|f16|f32] [--seed N] "
                   "[--shards N]\n",
                   synth_shape_names());
            return 0;
        }
        if (a[0] == '-') {
            if (i + 1 >= argc) usage_exit("option %s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--shape")) shape_name = v;
            else if (!strcmp(a, "--dtype")) {
                if (synth_dtype_parse(v, &o.dtype)) usage_exit("--dtype: unknown dtype '%s'", v);
            } else if (!strcmp(a, "--seed")) o.seed = number(v, "--seed", 0, UINT64_MAX);
            /* 99999: the widest shard number model-NNNNN-of-NNNNN holds */
            else if (!strcmp(a, "--shards")) o.n_shards = (int)number(v, "--shards", 1, 99999);
            else usage_exit("unknown option '%s'", a);
        } else if (!dir) {
            dir = a;
        } else {
            usage_exit("unexpected argument '%s' (one OUT_DIR only)", a);
        }
    }
    if (!dir) usage_exit("%s", "no OUT_DIR given");
    struct synth_shape shape;
    if (synth_shape_get(shape_name, &shape)) usage_exit("--shape: unknown shape '%s'", shape_name);
    struct synth_result r;
    if (synth_write(dir, &shape, &o, &r) != 0) {
        fprintf(stderr, "make_model: %s\n", r.err);
        return 2;
    }
    printf("%s: %s, %s, seed %llu, %d tensor%s in %d file%s: %llu bytes\n", dir, shape.name,
           o.dtype == SYNTH_F32 ? "f32" : o.dtype == SYNTH_BF16 ? "bf16" : "f16",
           (unsigned long long)o.seed, r.n_tensors, r.n_tensors == 1 ? "" : "s", o.n_shards,
           o.n_shards == 1 ? "" : "s", (unsigned long long)r.bytes);
    return 0;
}
