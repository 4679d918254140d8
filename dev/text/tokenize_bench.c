/* tokenize_bench.c - load time and single-thread encode / decode speed of the tokenizer.
 *
 * Loads a tokenizer.json (best of 3), builds a text by repeating a file up to a size (default
 * the GPL-3 licence to 5 MB: English prose), and times on one thread: one encode of the whole
 * text, the same text in 4 KB pieces (split at newlines, the size of a chat turn), and one
 * decode of all the ids. Prints MB/s (1 MB = 10^6 bytes of UTF-8 input or output).
 *
 * Build: make build/dev/tokenize_bench
 * Run:
 *   make build/fixtures/big.json
 *   build/dev/tokenize_bench build/fixtures/big.json /usr/share/common-licenses/GPL-3 5
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv) {
    const char *tok_path = argc > 1 ? argv[1] : "build/fixtures/big.json";
    const char *text_path = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
    double mb = argc > 3 ? atof(argv[3]) : 5.0;
    struct nt_err err;
    struct nt_tokenizer *t = NULL;

    size_t json_len;
    char *json = read_file(tok_path, &json_len);
    if (!json) {
        fprintf(stderr, "cannot read %s\n", tok_path);
        return 1;
    }
    free(json);
    double best_load = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        if (nt_tokenizer_load(tok_path, &t, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best_load) best_load = dt;
        if (rep < 2) nt_tokenizer_free(t);
    }
    printf("load %s: %.1f MB, %d tokens: %.3f s (%.1f ms/MB; a 17 MB file: ~%.2f s)\n", tok_path,
           (double)json_len / 1e6, nt_tokenizer_vocab_size(t), best_load,
           best_load * 1e3 / ((double)json_len / 1e6), best_load / ((double)json_len / 1e6) * 17);

    size_t src_len;
    char *src = read_file(text_path, &src_len);
    if (!src || !src_len) {
        fprintf(stderr, "cannot read %s\n", text_path);
        return 1;
    }
    size_t want = (size_t)(mb * 1e6), len = 0;
    char *text = malloc(want + src_len);
    while (len < want) {
        memcpy(text + len, src, src_len);
        len += src_len;
    }
    size_t cap = len / 2 + 16; /* byte-level BPE: far fewer ids than bytes */
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n_ids = 0;

    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        if (nt_tokenizer_encode(t, text, len, 0, ids, cap, &n_ids, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("encode %s x%zu: %.2f MB -> %zu ids (%.2f bytes/id): %.3f s, %.1f MB/s\n", text_path,
           (len + src_len - 1) / src_len, (double)len / 1e6, n_ids, (double)len / (double)n_ids,
           best, (double)len / 1e6 / best);

    /* 4 KB pieces, cut after a newline */
    best = 1e9;
    size_t pieces = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        pieces = 0;
        for (size_t at = 0; at < len;) {
            size_t end = at + 4096 < len ? at + 4096 : len;
            while (end < len && text[end - 1] != '\n') end++;
            size_t n;
            if (nt_tokenizer_encode(t, text + at, end - at, 0, ids, cap, &n, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            at = end;
            pieces++;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("encode in %zu pieces of ~4 KB: %.3f s, %.1f MB/s\n", pieces, best,
           (double)len / 1e6 / best);

    nt_tokenizer_encode(t, text, len, 0, ids, cap, &n_ids, &err);
    char *out = malloc(len + 16);
    size_t out_len = 0;
    best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
        if (nt_tokenizer_decode(t, ids, n_ids, 0, out, len + 16, &out_len, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("decode %zu ids: %.3f s, %.1f MB/s; round trip %s\n", n_ids, best,
           (double)out_len / 1e6 / best,
           out_len == len && !memcmp(out, text, len) ? "exact" : "DIFFERS");
    nt_tokenizer_free(t);
    free(out);
    free(ids);
    free(text);
    free(src);
    return 0;
}
