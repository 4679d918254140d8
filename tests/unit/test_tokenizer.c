/* test_tokenizer.c - tokenizer.json loading, encoding and decoding against HF tokenizers 0.23.
 *
 * The fixture cases (tests/fixtures/tokenizer/cases.json, made by
 * tools/reference/make_tokenizer_fixtures.py) give, for 45 hard texts, the ids, decodes and
 * skip-special decodes tokenizers produced with small.json, big.json (build/fixtures/big.json,
 * decompressed by `make build/fixtures/big.json`; skipped with a note when absent) and
 * small-bos.json: ours must be equal, byte for byte. Around them: round trips, streaming ==
 * batch (with every buffer size that can fail), threads, the merge order against a naive
 * reference, hand-made tokenizer.json files for the components the fixtures do not use (their
 * expected ids worked out by hand from tokenizers' rules, which each test names), and the
 * error paths. Bounded matching: runs of white space of 1 and 10 MiB against tokenizers
 * (ws_runs.json, made by tools/reference/make_ws_fixtures.js), the same ids whatever window a
 * match first sees, and a pathological pattern stopped by the encode's budget in linear time.
 * Runs from the repository root.
 */
#include "text/tokenizer.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"
#include "text/bpe.h"
#include "text/tokenizer_impl.h"

#define TOKDIR FIXTURES "/tokenizer"
#define BIG_JSON "build/fixtures/big.json"

static struct nt_err err;

/* ---- helpers ---- */

static size_t b64_decode(const char *s, unsigned char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned acc = 0;
    int bits = 0;
    size_t n = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(tab, *s);
        if (!p) continue;
        acc = acc << 6 | (unsigned)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

static struct nt_tokenizer *load(const char *path) {
    struct nt_tokenizer *t = NULL;
    nemotron_status st = nt_tokenizer_load(path, &t, &err);
    CHECK(st == NEMOTRON_OK && t, "load %s: %d %s", path, st, err.msg);
    return t;
}

static struct nt_tokenizer *load_str(const char *json) {
    struct nt_tokenizer *t = NULL;
    nemotron_status st = nt_tokenizer_load_bytes(json, strlen(json), "test.json", &t, &err);
    CHECK(st == NEMOTRON_OK && t, "load: %d %s\n%s", st, err.msg, json);
    return t;
}

/* Encodes into a fresh array (exactly sized through the two-call protocol). */
static int32_t *encode(const struct nt_tokenizer *t, const char *s, size_t n, int special,
                       size_t *count) {
    size_t need = 0;
    nemotron_status st = nt_tokenizer_encode(t, s, n, special, NULL, 0, &need, &err);
    CHECK(st == NEMOTRON_OK, "encode (count): %d %s", st, err.msg);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    size_t got = 0;
    st = nt_tokenizer_encode(t, s, n, special, ids, need, &got, &err);
    CHECK(st == NEMOTRON_OK && got == need, "encode: %d %s (%zu vs %zu)", st, err.msg, got, need);
    *count = got;
    return ids;
}

static char *decode(const struct nt_tokenizer *t, const int32_t *ids, size_t n, int skip,
                    size_t *len) {
    size_t need = 0;
    nemotron_status st = nt_tokenizer_decode(t, ids, n, skip, NULL, 0, &need, &err);
    CHECK(st == NEMOTRON_OK, "decode (size): %d %s", st, err.msg);
    char *out = malloc(need + 1);
    size_t got = 0;
    st = nt_tokenizer_decode(t, ids, n, skip, out, need + 1, &got, &err);
    CHECK(st == NEMOTRON_OK && got == need && out[need] == 0, "decode: %d %s", st, err.msg);
    *len = got;
    return out;
}

/* Streams ids through nt_detok_* with output buffers of size cap (0: nt_detok_cap), retrying
 * each refused push with a larger buffer; returns the concatenation. */
static char *stream(const struct nt_tokenizer *t, const int32_t *ids, size_t n, int skip,
                    size_t cap, size_t *len) {
    size_t full = nt_detok_cap(t), total = 0, room = 64 + n * full;
    char *out = malloc(room);
    char *buf = malloc(full);
    struct nt_detok d;
    nt_detok_init(&d);
    for (size_t i = 0; i < n; i++) {
        size_t c = cap ? cap : full;
        int w;
        for (;;) {
            struct nt_detok before = d;
            w = nt_detok_push(t, &d, ids[i], skip, buf, c, &err);
            if (w >= 0) break;
            CHECK(!memcmp(&before, &d, sizeof d), "a refused push changed the state");
            CHECK(c < full, "push refused with the full cap %zu: %s", c, err.msg);
            if (c >= full) break;
            c = full;
        }
        if (w > 0) {
            memcpy(out + total, buf, (size_t)w);
            total += (size_t)w;
        }
    }
    int w = nt_detok_flush(&d, buf, full);
    CHECK(w >= 0, "flush");
    if (w > 0) {
        memcpy(out + total, buf, (size_t)w);
        total += (size_t)w;
    }
    out[total] = 0;
    free(buf);
    *len = total;
    return out;
}

static int ids_equal(const int32_t *a, size_t na, json_object *want) {
    if (na != json_object_array_length(want)) return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i] != json_object_get_int(json_object_array_get_idx(want, i))) return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *a, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)a[i]);
    fputc('\n', stderr);
}

static void print_want(json_object *want) {
    fprintf(stderr, "  want:");
    for (size_t i = 0; i < json_object_array_length(want); i++)
        fprintf(stderr, " %d", json_object_get_int(json_object_array_get_idx(want, i)));
    fputc('\n', stderr);
}

/* ---- the fixture cases ---- */

static json_object *cases;

static void check_case_with(const struct nt_tokenizer *t, const char *tname, json_object *c,
                            json_object *want_ids, int special, const char *want_dec,
                            size_t want_dec_len, const char *want_skip, size_t want_skip_len) {
    const char *name = json_object_get_string(json_object_object_get(c, "name"));
    const char *b64 = json_object_get_string(json_object_object_get(c, "text_b64"));
    json_object *jtext = json_object_object_get(c, "text");
    const char *text = json_object_get_string(jtext);
    size_t text_len = (size_t)json_object_get_string_len(jtext);
    unsigned char *raw = malloc(strlen(b64) + 4);
    size_t raw_len = b64_decode(b64, raw);

    /* the raw bytes (invalid UTF-8 repaired inside) and the repaired text give the same ids */
    size_t n, n2;
    int32_t *ids = encode(t, (const char *)raw, raw_len, special, &n);
    int ok = ids_equal(ids, n, want_ids);
    CHECK(ok, "%s/%s: ids differ (%zu vs %zu)", tname, name, n, json_object_array_length(want_ids));
    if (!ok) {
        print_ids("ours", ids, n);
        print_want(want_ids);
    }
    int32_t *ids2 = encode(t, text, text_len, special, &n2);
    CHECK(n2 == n && !memcmp(ids, ids2, n * sizeof *ids), "%s/%s: text vs raw bytes", tname, name);

    size_t len;
    char *dec = decode(t, ids, n, 0, &len);
    CHECK(len == want_dec_len && !memcmp(dec, want_dec, len),
          "%s/%s: decode\n  ours: %s\n  want: %s", tname, name, dec, want_dec);
    char *skip = decode(t, ids, n, 1, &len);
    size_t skip_len = len;
    CHECK(len == want_skip_len && !memcmp(skip, want_skip, len),
          "%s/%s: decode skip\n  ours: %s\n  want: %s", tname, name, skip, want_skip);
    /* the round trip (the text is valid UTF-8; these tokenizers lose nothing) */
    if (!special)
        CHECK(want_dec_len == text_len && !memcmp(dec, text, text_len), "%s/%s: round trip", tname,
              name);

    /* streaming == batch, with the full cap and with caps that refuse pushes */
    static const size_t caps[] = {0, 1, 3, 7};
    for (int skipping = 0; skipping < 2; skipping++)
        for (int k = 0; k < 4; k++) {
            size_t slen;
            char *s = stream(t, ids, n, skipping, caps[k], &slen);
            const char *want = skipping ? skip : dec;
            size_t wlen = skipping ? skip_len : want_dec_len;
            CHECK(slen == wlen && !memcmp(s, want, slen), "%s/%s: stream (skip %d cap %zu)\n  %s",
                  tname, name, skipping, caps[k], s);
            free(s);
        }
    free(skip);
    free(dec);
    free(ids2);
    free(ids);
    free(raw);
}

static json_object *get2(json_object *c, const char *k1, const char *k2) {
    return json_object_object_get(json_object_object_get(c, k1), k2);
}

static void test_cases(const char *tname, const struct nt_tokenizer *t, int bos) {
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        const char *key = bos ? "small" : tname;
        json_object *dec = get2(c, "decoded", key), *skip = get2(c, "decoded_skip", key);
        size_t dl = (size_t)json_object_get_string_len(dec),
               sl = (size_t)json_object_get_string_len(skip);
        if (bos) {
            /* small-bos has the same decoder: its decodes are small's after "<s>" */
            char *with = malloc(dl + 4);
            memcpy(with, "<s>", 3);
            memcpy(with + 3, json_object_get_string(dec), dl + 1);
            check_case_with(t, tname, c, json_object_object_get(c, "ids_bos"), 1, with, dl + 3,
                            json_object_get_string(skip), sl);
            free(with);
        }
        /* without add_special, small-bos is small */
        check_case_with(t, tname, c, get2(c, "ids", key), 0, json_object_get_string(dec), dl,
                        json_object_get_string(skip), sl);
    }
}

/* ---- threads: the same results from four threads at once ---- */

struct job {
    const struct nt_tokenizer *t;
    int failures;
};

static void *thread_main(void *arg) {
    struct job *j = arg;
    struct nt_err e;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < json_object_array_length(cases); i++) {
            json_object *c = json_object_array_get_idx(cases, i);
            json_object *jt = json_object_object_get(c, "text");
            json_object *want = json_object_object_get(json_object_object_get(c, "ids"), "small");
            int32_t ids[1024];
            size_t n;
            if (nt_tokenizer_encode(j->t, json_object_get_string(jt),
                                    (size_t)json_object_get_string_len(jt), 0, ids, 1024, &n, &e) ||
                !ids_equal(ids, n, want))
                j->failures++;
            char out[4096];
            size_t len;
            if (nt_tokenizer_decode(j->t, ids, n, 0, out, sizeof out, &len, &e) ||
                len != (size_t)json_object_get_string_len(jt) ||
                memcmp(out, json_object_get_string(jt), len))
                j->failures++;
        }
    return NULL;
}

static void test_threads(const struct nt_tokenizer *t) {
    pthread_t th[4];
    struct job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){t, 0};
        CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].failures == 0, "thread %d: %d failures", i, jobs[i].failures);
    }
}

/* ---- merge order: nt_bpe_merge against the rule written out naively ---- */

static size_t naive_merge(const struct nt_pairmap *m, int32_t *s, size_t n) {
    for (;;) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        int32_t bid = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t id;
            uint32_t r = nt_pairmap_get(m, s[i], s[i + 1], &id);
            if (r < best) {
                best = r;
                bi = i;
                bid = id;
            }
        }
        if (best == UINT32_MAX) return n;
        s[bi] = bid;
        memmove(s + bi + 1, s + bi + 2, (n - bi - 2) * sizeof *s);
        n--;
    }
}

static void test_merge_order(const struct nt_tokenizer *t, const char *tname) {
    /* words of frequent letters (so that many pairs merge), short and long (the heap path) */
    const char *letters = "eeeetttaaoinshrdlu  ";
    unsigned seed = 12345;
    struct nt_bpe_scratch sc = {0};
    int bad = 0;
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 2 + (size_t)(trial % 300);
        int32_t a[400], b[400];
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            a[i] = t->bpe.byte_id[(unsigned char)letters[(seed >> 16) % 20]];
        }
        memcpy(b, a, n * sizeof *a);
        size_t na = nt_bpe_merge(&t->bpe.merges, a, n, &sc);
        size_t nb = naive_merge(&t->bpe.merges, b, n);
        if (na != nb || memcmp(a, b, na * sizeof *a)) bad++;
    }
    CHECK(bad == 0, "%s: %d words merged differently from the naive rule", tname, bad);
    nt_bpe_scratch_free(&sc);
}

/* ---- the Oniguruma -> PCRE2 translation ---- */

/* Whether the ONIG pattern pat matches all of the UTF-8 text s. */
static int rx_whole(struct nt_tokenizer *t, const char *pat, const char *s) {
    struct nt_rx rx;
    if (nt_rx_compile(t, &rx, pat, strlen(pat), NT_RX_ONIG, "test", &err)) {
        CHECK(0, "compile %s: %s", pat, err.msg);
        return -1;
    }
    struct nt_rx_run run;
    CHECK(nt_rx_run_init(&run, t, strlen(s), &err) == NEMOTRON_OK, "run_init: %s", err.msg);
    size_t ms = 0, me = 0;
    int r = nt_rx_find(&rx, &run, s, strlen(s), 0, &ms, &me);
    nt_rx_run_free(&run);
    nt_rx_free(&rx);
    return r == 1 && ms == 0 && me == strlen(s);
}

static void test_regex_translation(void) {
    struct nt_tokenizer *t = calloc(1, sizeof *t);
    /* \s is White_Space (Oniguruma, Rust): U+180E is not, U+0085 and U+3000 are */
    CHECK(rx_whole(t, "\\s", "\xC2\x85") == 1 && rx_whole(t, "\\s", "\xE3\x80\x80") == 1, "\\s");
    CHECK(rx_whole(t, "\\s", "\xE1\xA0\x8E") == 0 && rx_whole(t, "\\S", "\xE1\xA0\x8E") == 1,
          "U+180E");
    CHECK(rx_whole(t, "[^\\s\\p{L}]", "\xE1\xA0\x8E") == 1 &&
              rx_whole(t, "[^\\s]", "\xE3\x80\x80") == 0,
          "\\s in a class");
    /* \w takes marks and all numbers: U+0301 (Mn), U+2160 (Nl), '_'; not '-' */
    CHECK(rx_whole(t, "\\w+", "e\xCC\x81\xE2\x85\xA0_") == 1 && rx_whole(t, "\\w", "-") == 0,
          "\\w");
    CHECK(rx_whole(t, "\\W", "-") == 1 && rx_whole(t, "[\\w-]+", "a\xCC\x81-") == 1, "\\W, class");
    /* \h is a hex digit; \uHHHH an escape; (?m) is dot-all */
    CHECK(rx_whole(t, "\\h+", "09afAF") == 1 && rx_whole(t, "\\h", " ") == 0, "\\h");
    CHECK(rx_whole(t, "\\u00e9", "\xC3\xA9") == 1, "\\u");
    CHECK(rx_whole(t, "(?m)a.b", "a\nb") == 1 && rx_whole(t, "a.b", "a\nb") == 0, "(?m)");
    /* escapes keep their next character: \[ is literal, \p{..} intact */
    CHECK(rx_whole(t, "\\[\\p{Lu}\\]", "[A]") == 1, "escapes");
    struct nt_rx rx;
    CHECK(nt_rx_compile(t, &rx, "[a&&b]", 6, NT_RX_ONIG, "test", &err) ==
                  NEMOTRON_ERR_UNSUPPORTED &&
              strstr(err.msg, "&&"),
          "intersection: %s", err.msg);
    nt_rx_free(&rx);
    CHECK(nt_rx_compile(t, &rx, "[\\W]", 4, NT_RX_ONIG, "test", &err) == NEMOTRON_ERR_UNSUPPORTED,
          "\\W in a class");
    nt_rx_free(&rx);
    if (t->gctx) pcre2_general_context_free(t->gctx);
    free(t);
}

/* ---- lookups ---- */

static void test_lookups(const struct nt_tokenizer *t) {
    CHECK(nt_tokenizer_vocab_size(t) == 4096, "%d", nt_tokenizer_vocab_size(t));
    CHECK(nt_tokenizer_token_id(t, "<|im_end|>", 10) == 11, "im_end");
    CHECK(nt_tokenizer_token_id(t, "<s>", 3) == 1, "<s>");
    CHECK(nt_tokenizer_token_id(t, "nope-not-a-token", 16) == -1, "absent");
    CHECK(!strcmp(nt_tokenizer_token_text(t, 10), "<|im_start|>"), "%s",
          nt_tokenizer_token_text(t, 10));
    CHECK(nt_tokenizer_token_text(t, 4096) == NULL && nt_tokenizer_token_text(t, -1) == NULL,
          "range");
    CHECK(nt_tokenizer_is_special(t, 11) && nt_tokenizer_is_special(t, 0), "special");
    int32_t a = nt_tokenizer_token_id(t, "a", 1);
    CHECK(a >= 0 && !nt_tokenizer_is_special(t, a), "a: %d", a);
    /* byte-level stored form: a space is "Ġ" */
    int32_t sp = nt_tokenizer_token_id(t, "\xC4\xA0", 2);
    CHECK(sp >= 0 && !strcmp(nt_tokenizer_token_text(t, sp), "\xC4\xA0"), "space token %d", sp);
    size_t n;
    int32_t *ids = encode(t, " ", 1, 0, &n);
    CHECK(n == 1 && ids[0] == sp, "' ' -> %zu ids", n);
    free(ids);
    ids = encode(t, "", 0, 1, &n);
    CHECK(n == 0, "empty: %zu", n);
    free(ids);
    /* a buffer too small: the count is still right, the prefix written */
    int32_t few[2] = {-7, -7};
    size_t need;
    CHECK(nt_tokenizer_encode(t, "Hello, world! Again.", 20, 0, few, 1, &need, &err) ==
                  NEMOTRON_OK &&
              need > 2 && few[0] >= 0 && few[1] == -7,
          "short buffer: %zu", need);
    /* decode into a short buffer: truncated, NUL-terminated, full length reported */
    int32_t hw[64];
    size_t nh;
    nt_tokenizer_encode(t, "Hello, world!", 13, 0, hw, 64, &nh, &err);
    char small[6];
    size_t len;
    CHECK(nt_tokenizer_decode(t, hw, nh, 0, small, sizeof small, &len, &err) == NEMOTRON_OK &&
              len == 13 && !strcmp(small, "Hello"),
          "short decode: %zu '%s'", len, small);
}

/* ---- errors ---- */

static void expect_load_fail(int line, const char *json, nemotron_status want, const char *n1,
                             const char *n2) {
    struct nt_tokenizer *t = (struct nt_tokenizer *)1;
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_tokenizer_load_bytes(json, strlen(json), "test.json", &t, &err);
    CHECK(st == want && t == NULL, "line %d: status %d, want %d: %s", line, st, want, err.msg);
    CHECK(strstr(err.msg, "test.json") != NULL, "line %d: no file name: %s", line, err.msg);
    if (n1) CHECK(strstr(err.msg, n1) != NULL, "line %d: lacks \"%s\": %s", line, n1, err.msg);
    if (n2) CHECK(strstr(err.msg, n2) != NULL, "line %d: lacks \"%s\": %s", line, n2, err.msg);
}
#define LOAD_FAIL(json, st, n1, n2) expect_load_fail(__LINE__, json, st, n1, n2)

/* A minimal byte-level tokenizer with pieces substituted in: vocab a b c ab abc plus the
 * bytes of " " (Ġ) and "!" and "<x>", merges a+b, ab+c. */
#define VOCAB "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"\xC4\xA0\":5,\"!\":6,\"<x>\":7}"
#define MINI(NORM, PRE, POST, DEC, MERGES, ADDED)                                           \
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" ADDED     \
    ",\"normalizer\":" NORM ",\"pre_tokenizer\":" PRE ",\"post_processor\":" POST           \
    ",\"decoder\":" DEC ",\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null," \
    "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"    \
    "\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":" VOCAB ",\"merges\":" MERGES "}}"
#define BL \
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}"
#define MERGES_STR "[\"a b\",\"ab c\"]"
#define MERGES_PAIR "[[\"a\",\"b\"],[\"ab\",\"c\"]]"

static void test_errors(const struct nt_tokenizer *small) {
    struct nt_tokenizer *t = NULL;
    nemotron_status st = nt_tokenizer_load(TOKDIR "/no-such-file.json", &t, &err);
    CHECK(st == NEMOTRON_ERR_IO && !t && strstr(err.msg, "no-such-file.json"), "missing: %d %s", st,
          err.msg);
    st = nt_tokenizer_load(TOKDIR, &t, &err);
    CHECK(st == NEMOTRON_ERR_IO && !t, "directory: %d %s", st, err.msg);

    /* malformed JSON: the position is named */
    LOAD_FAIL("{\"model\": {\"vocab\": {\"a\": 0,}}}", NEMOTRON_ERR_FORMAT, "line 1, column 29",
              NULL);
    LOAD_FAIL("{\n  \"model\": {\n    \"vocab\": {\"a\": 0}\n  }\n", NEMOTRON_ERR_FORMAT, "line 5",
              NULL);
    LOAD_FAIL("", NEMOTRON_ERR_FORMAT, "line 1, column 1", NULL);
    LOAD_FAIL("{} x", NEMOTRON_ERR_FORMAT, "trailing", NULL);
    LOAD_FAIL("{\"a\": \"\xFF\"}", NEMOTRON_ERR_FORMAT, "UTF-8", NULL);
    LOAD_FAIL("{\"a\": \"\\uD800\"}", NEMOTRON_ERR_FORMAT, "surrogate", NULL);
    LOAD_FAIL("{\"a\": NaN}", NEMOTRON_ERR_FORMAT, "column 7", NULL);
    LOAD_FAIL("{\"a\": 01}", NEMOTRON_ERR_FORMAT, "column 8", NULL);
    LOAD_FAIL("{\"a\": \"tab\there\"}", NEMOTRON_ERR_FORMAT, "control", NULL);
    {
        static char deep[401];
        memset(deep, '[', 200);
        memset(deep + 200, ']', 200);
        LOAD_FAIL(deep, NEMOTRON_ERR_FORMAT, "128", NULL);
    }
    LOAD_FAIL("[]", NEMOTRON_ERR_FORMAT, "top level", NULL);
    LOAD_FAIL("{}", NEMOTRON_ERR_FORMAT, "model", NULL);

    /* shapes */
    LOAD_FAIL(MINI("null", BL, "null", "null", "[\"a x\"]", "[]"), NEMOTRON_ERR_FORMAT,
              "model.merges[0]", "\"x\" is not in the vocabulary");
    LOAD_FAIL(MINI("null", BL, "null", "null", "[[\"b\",\"c\"]]", "[]"), NEMOTRON_ERR_FORMAT,
              "model.merges[0]", "merged token \"bc\"");
    LOAD_FAIL(MINI("null", BL, "null", "null", "[\"a b\",[\"ab\",\"c\"]]", "[]"),
              NEMOTRON_ERR_FORMAT, "model.merges[1]", NULL);
    LOAD_FAIL(MINI("null", BL, "null", "null", "[\"a  b\"]", "[]"), NEMOTRON_ERR_FORMAT,
              "model.merges[0]", "one space");
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
              NEMOTRON_ERR_FORMAT, "model.vocab[\"a\"]", NULL);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}",
              NEMOTRON_ERR_FORMAT, "model.vocab[\"a\"]", NULL);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", NEMOTRON_ERR_FORMAT,
              "model.vocab", NULL);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
              NEMOTRON_ERR_FORMAT, "same id 0", NULL);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":900000},\"merges\":[]}}",
              NEMOTRON_ERR_UNSUPPORTED, "sparse", NULL);
    LOAD_FAIL(MINI("null",
                   "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}",
                   "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_FORMAT, "pre_tokenizer.behavior", "Sideways");
    LOAD_FAIL(MINI("null", "{\"type\":\"Split\",\"pattern\":\"a\",\"behavior\":\"Isolated\"}",
                   "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_FORMAT, "pre_tokenizer.pattern", NULL);
    LOAD_FAIL(MINI("null", BL, "null", "null", MERGES_STR, "[{\"id\":9}]"), NEMOTRON_ERR_FORMAT,
              "added_tokens[0].content", NULL);
    LOAD_FAIL(
        MINI("null", BL,
             "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<q>\","
             "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{}}",
             "null", MERGES_STR, "[]"),
        NEMOTRON_ERR_FORMAT, "<q>", NULL);
    LOAD_FAIL(MINI("null", BL, "{\"type\":\"BertProcessing\",\"sep\":[\"x\",99],\"cls\":[\"y\",0]}",
                   "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_FORMAT, "99", "outside the vocabulary");

    /* unsupported components are named */
    LOAD_FAIL(MINI("null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", "null", "null",
                   MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "pre_tokenizer.type", "Metaspace");
    LOAD_FAIL(MINI("null",
                   "{\"type\":\"Sequence\",\"pretokenizers\":[" BL
                   ",{\"type\":\"UnicodeScripts\"}]}",
                   "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1].type", "UnicodeScripts");
    LOAD_FAIL(MINI("{\"type\":\"NFC\"}", BL, "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "normalizer.type", "NFC");
    LOAD_FAIL(MINI("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}", BL, "null",
                   "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "normalizer.normalizers[0].type", "Lowercase");
    LOAD_FAIL(MINI("null", BL, "{\"type\":\"Weird\"}", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "post_processor.type", "Weird");
    LOAD_FAIL(MINI("null", BL, "null", "{\"type\":\"WordPiece\"}", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "decoder.type", "WordPiece");
    LOAD_FAIL("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", NEMOTRON_ERR_UNSUPPORTED,
              "model.type", "Unigram");
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{},\"merges\":[]}}",
              NEMOTRON_ERR_UNSUPPORTED, "model.dropout", NULL);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",\"vocab\":{},"
              "\"merges\":[]}}",
              NEMOTRON_ERR_UNSUPPORTED, "continuing_subword_prefix", NULL);
    LOAD_FAIL(MINI("null",
                   "{\"type\":\"Sequence\",\"pretokenizers\":[" BL ",{\"type\":\"Digits\"}]}",
                   "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "ByteLevel", NULL);
    LOAD_FAIL(
        MINI("null",
             "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[a[b]]\"},\"behavior\":\"Isolated\"}",
             "null", "null", MERGES_STR, "[]"),
        NEMOTRON_ERR_UNSUPPORTED, "nested", NULL);
    LOAD_FAIL(MINI("null",
                   "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}",
                   "null", "null", MERGES_STR, "[]"),
              NEMOTRON_ERR_UNSUPPORTED, "does not compile", NULL);

    /* decode: ids out of range */
    int32_t bad_ids[3] = {5, 4096, 6};
    char out[64];
    size_t len;
    st = nt_tokenizer_decode(small, bad_ids, 3, 0, out, sizeof out, &len, &err);
    CHECK(st == NEMOTRON_ERR_ARG && strstr(err.msg, "ids[1] = 4096"), "decode range: %d %s", st,
          err.msg);
    bad_ids[1] = -1;
    st = nt_tokenizer_decode(small, bad_ids, 3, 0, out, sizeof out, &len, &err);
    CHECK(st == NEMOTRON_ERR_ARG, "decode -1: %d", st);
    struct nt_detok d;
    nt_detok_init(&d);
    CHECK(nt_detok_push(small, &d, 4096, 0, out, sizeof out, &err) == -1 && strstr(err.msg, "4096"),
          "push range: %s", err.msg);
    CHECK(nt_detok_push(small, &d, 5, 0, out, sizeof out, NULL) >= 0, "push with a NULL err");
    CHECK(nt_tokenizer_encode(small, NULL, 3, 0, NULL, 0, &len, &err) == NEMOTRON_ERR_ARG,
          "NULL text");
}

/* ---- hand-made tokenizers: components the fixtures do not exercise ---- */

static void expect_ids_at(int line, const struct nt_tokenizer *t, const char *text, int special,
                          const int32_t *want, size_t nw) {
    if (!t) return;
    size_t n;
    int32_t *ids = encode(t, text, strlen(text), special, &n);
    int ok = n == nw && !memcmp(ids, want, n * sizeof *ids);
    CHECK(ok, "line %d: \"%s\": wrong ids", line, text);
    if (!ok) {
        print_ids("ours", ids, n);
        print_ids("want", want, nw);
    }
    free(ids);
}
#define EXPECT_IDS(t, text, special, ...)                                      \
    do {                                                                       \
        static const int32_t w_[] = {__VA_ARGS__};                             \
        expect_ids_at(__LINE__, t, text, special, w_, sizeof w_ / sizeof *w_); \
    } while (0)
#define EXPECT_NO_IDS(t, text, special) expect_ids_at(__LINE__, t, text, special, NULL, 0)

static void expect_decode_at(int line, const struct nt_tokenizer *t, const int32_t *ids, size_t n,
                             int skip, const char *want) {
    if (!t) return;
    size_t len, slen;
    char *s = decode(t, ids, n, skip, &len);
    CHECK(len == strlen(want) && !memcmp(s, want, len), "line %d: decode \"%s\", want \"%s\"", line,
          s, want);
    char *st = stream(t, ids, n, skip, 0, &slen);
    CHECK(slen == len && !memcmp(st, s, len), "line %d: stream \"%s\" vs \"%s\"", line, st, s);
    free(st);
    free(s);
}
#define EXPECT_DECODE(t, skip, want, ...)                                      \
    do {                                                                       \
        static const int32_t i_[] = {__VA_ARGS__};                             \
        expect_decode_at(__LINE__, t, i_, sizeof i_ / sizeof *i_, skip, want); \
    } while (0)

static void test_merges_forms(void) {
    /* both merge forms; "abc" = a+b then ab+c; "cab": no merge across c|a, then a+b */
    struct nt_tokenizer *s = load_str(MINI("null", BL, "null", "null", MERGES_STR, "[]"));
    struct nt_tokenizer *p = load_str(MINI("null", BL, "null", "null", MERGES_PAIR, "[]"));
    EXPECT_IDS(s, "abc", 0, 4);
    EXPECT_IDS(p, "abc", 0, 4);
    EXPECT_IDS(s, "cab", 0, 2, 3);
    EXPECT_IDS(p, "cabab!", 0, 2, 3, 3, 6);
    /* "#version" lines are not merges and take no rank */
    struct nt_tokenizer *v =
        load_str(MINI("null", BL, "null", "null", "[\"#version: 0.2\",\"a b\"]", "[]"));
    EXPECT_IDS(v, "abc", 0, 3, 2);
    /* characters outside the vocabulary vanish (no unk_token, no byte fallback) */
    EXPECT_IDS(s, "a?b", 0, 0, 1);
    /* no decoder: tokens joined by spaces */
    EXPECT_DECODE(s, 0, "a ab \xC4\xA0", 0, 3, 5);
    nt_tokenizer_free(s);
    nt_tokenizer_free(p);
    nt_tokenizer_free(v);
}

/* The scanner's own parsers of model.vocab and model.merges: escapes, order, duplicates. */
static void test_json_paths(void) {
    /* an escaped key is the same token; merges may come before the vocabulary */
    struct nt_tokenizer *t = load_str(
        "{\"model\":{\"merges\":[\"a b\"],\"type\":\"BPE\",\"vocab\":{\"\\u0061\":0,\"b\":1,"
        "\"a\\u0062\":2,\"\\ud83d\\ude00\":3}}}");
    EXPECT_IDS(t, "ab", 0, 2);
    if (t) CHECK(nt_tokenizer_token_id(t, "\xF0\x9F\x98\x80", 4) == 3, "surrogate pair key");
    nt_tokenizer_free(t);
    /* a later duplicate key wins: "a" is id 5 in the end, 0 is left without a token */
    t = load_str(
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"a\":2},\"merges\":[]}}");
    if (t) {
        CHECK(nt_tokenizer_token_id(t, "a", 1) == 2 && nt_tokenizer_token_text(t, 0) == NULL,
              "duplicate key: %d", nt_tokenizer_token_id(t, "a", 1));
        CHECK(nt_tokenizer_vocab_size(t) == 3, "%d", nt_tokenizer_vocab_size(t));
    }
    nt_tokenizer_free(t);
    /* a later "model" replaces the earlier one entirely; so does a later "vocab" */
    t = load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0},\"merges\":[]},"
                 "\"model\":{\"type\":\"BPE\",\"vocab\":{\"q\":0},\"vocab\":{\"a\":0,\"b\":1,"
                 "\"ab\":2},\"merges\":[[\"a\",\"b\"]]}}");
    EXPECT_IDS(t, "abq", 0, 2);
    nt_tokenizer_free(t);
    LOAD_FAIL("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"x\":0},\"merges\":[]},\"model\":{\"type\":"
              "\"BPE\",\"merges\":[]}}",
              NEMOTRON_ERR_FORMAT, "model.vocab: missing", NULL);
    /* syntax errors inside the two big values keep their positions */
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a a\" \"b\"]}}", NEMOTRON_ERR_FORMAT,
              "column 43", "expected ','");
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\" 0}}}", NEMOTRON_ERR_FORMAT, "column 24", "':'");
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":0, \"b\\x\":1}}}", NEMOTRON_ERR_FORMAT, "escape", NULL);
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":00}}}", NEMOTRON_ERR_FORMAT, "column 25", NULL);
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":true}}}", NEMOTRON_ERR_FORMAT, "model.vocab[\"a\"]",
              NULL);
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":4294967296}}}", NEMOTRON_ERR_FORMAT,
              "model.vocab[\"a\"]", NULL);
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[[\"a\",\"a\",\"a\"]]}}",
              NEMOTRON_ERR_FORMAT, "model.merges[0]", "pair");
    LOAD_FAIL("{\"model\":{\"vocab\":{\"a\":0},\"merges\":{}}}", NEMOTRON_ERR_FORMAT,
              "model.merges: expected a list", NULL);
}

static void test_split_behaviors(void) {
    /* Split on "b" over "abab" -> find_matches: a|b|a|b (m = b) */
#define SPLIT(B, INV)                                                                 \
    MINI("null",                                                                      \
         "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":" \
         "{\"String\":\"b\"},\"behavior\":\"" B "\",\"invert\":" INV "}," BL "]}",    \
         "null", "{\"type\":\"ByteLevel\"}", MERGES_STR, "[]")
    struct nt_tokenizer *t;
    t = load_str(SPLIT("Isolated", "false"));
    EXPECT_IDS(t, "abcab", 0, 0, 1, 2, 0, 1); /* a | b | c a | b */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("Removed", "false"));
    EXPECT_IDS(t, "abcab", 0, 0, 2, 0); /* a, ca */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("MergedWithPrevious", "false"));
    EXPECT_IDS(t, "abcab", 0, 3, 2, 3); /* ab | cab -> ab, c ab */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("MergedWithNext", "false"));
    EXPECT_IDS(t, "abcab", 0, 0, 1, 2, 0, 1); /* a | bca | b -> a, b c a, b */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("MergedWithNext", "false"));
    EXPECT_IDS(t, "bbc", 0, 1, 1, 2); /* b | bc */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("Contiguous", "false"));
    EXPECT_IDS(t, "abbc", 0, 0, 1, 1, 2); /* a | bb | c */
    nt_tokenizer_free(t);
    t = load_str(SPLIT("Removed", "true"));
    EXPECT_IDS(t, "abcab", 0, 1, 1); /* inverted: the non-b runs are removed */
    nt_tokenizer_free(t);
#undef SPLIT
    /* an empty regex matches between all characters: every character alone */
    t = load_str(MINI("null",
                      "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                      "{\"Regex\":\"\"},\"behavior\":\"Isolated\",\"invert\":false}," BL "]}",
                      "null", "null", MERGES_STR, "[]"));
    EXPECT_IDS(t, "abc", 0, 0, 1, 2);
    nt_tokenizer_free(t);
    /* ByteLevel's add_prefix_space on every piece, and GPT-2's regex */
    t = load_str(MINI("null",
                      "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                      "\"use_regex\":true}",
                      "null", "{\"type\":\"ByteLevel\"}", MERGES_STR, "[]"));
    EXPECT_IDS(t, "abc!", 0, 5, 4, 6);
    EXPECT_IDS(t, " abc", 0, 5, 4);
    EXPECT_DECODE(t, 0, " abc!", 5, 4, 6);
    nt_tokenizer_free(t);
    /* Whitespace and Digits and Punctuation on a plain (not byte-level) vocabulary */
#define PLAIN(PRE)                                                                             \
    "{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":" PRE ",\"decoder\":null,"     \
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"1\":2,\"2\":3,\"!\":4,\"ab\":5," \
    "\"12\":6},\"merges\":[\"a b\",\"1 2\"]}}"
    t = load_str(PLAIN("{\"type\":\"Whitespace\"}"));
    EXPECT_IDS(t, "ab !! 12", 0, 5, 4, 4, 6);
    nt_tokenizer_free(t);
    t = load_str(PLAIN("{\"type\":\"WhitespaceSplit\"}"));
    EXPECT_IDS(t, "ab!\t12", 0, 5, 4, 6);
    nt_tokenizer_free(t);
    t = load_str(PLAIN("{\"type\":\"Digits\",\"individual_digits\":true}"));
    EXPECT_IDS(t, "ab12", 0, 5, 2, 3);
    nt_tokenizer_free(t);
    t = load_str(PLAIN("{\"type\":\"Digits\",\"individual_digits\":false}"));
    EXPECT_IDS(t, "ab12", 0, 5, 6);
    nt_tokenizer_free(t);
    t = load_str(PLAIN("{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"}"));
    EXPECT_IDS(t, "a!b", 0, 0, 4, 1);
    nt_tokenizer_free(t);
    t = load_str(PLAIN("{\"type\":\"CharDelimiterSplit\",\"delimiter\":\"!\"}"));
    EXPECT_IDS(t, "ab!12", 0, 5, 6);
    nt_tokenizer_free(t);
#undef PLAIN
}

static void test_added_tokens(void) {
    /* <x> is in the vocabulary (id 7); <y> and <z> are new: ids after the 8 entries */
#define ADDED(FLAGS_X, FLAGS_Y)                                                         \
    "[{\"id\":7,\"content\":\"<x>\",\"special\":true,\"normalized\":false" FLAGS_X "}," \
    "{\"id\":8,\"content\":\"<y>\",\"special\":false,\"normalized\":false" FLAGS_Y "}," \
    "{\"id\":9,\"content\":\"<z>\",\"special\":true,\"normalized\":false}]"
    struct nt_tokenizer *t =
        load_str(MINI("null", BL, "null", "{\"type\":\"ByteLevel\"}", MERGES_STR, ADDED("", "")));
    if (t) {
        CHECK(nt_tokenizer_vocab_size(t) == 10, "%d", nt_tokenizer_vocab_size(t));
        CHECK(nt_tokenizer_token_id(t, "<y>", 3) == 8 && nt_tokenizer_token_id(t, "<z>", 3) == 9,
              "ids");
        CHECK(nt_tokenizer_is_special(t, 7) && !nt_tokenizer_is_special(t, 8), "special");
    }
    EXPECT_IDS(t, "ab<x>c<y><z>", 0, 3, 7, 2, 8, 9);
    /* "<x " | <x> | ">": of the text pieces only the space is in the vocabulary */
    EXPECT_IDS(t, "<x <x>>", 0, 5, 7);
    EXPECT_DECODE(t, 0, "ab<x>c<y><z>", 3, 7, 2, 8, 9);
    EXPECT_DECODE(t, 1, "abc<y>", 3, 7, 2, 8, 9);
    nt_tokenizer_free(t);
    /* lstrip / rstrip eat the whitespace beside the token */
    t = load_str(MINI("null", BL, "null", "{\"type\":\"ByteLevel\"}", MERGES_STR,
                      ADDED(",\"lstrip\":true", ",\"rstrip\":true")));
    EXPECT_IDS(t, "a  <x> b", 0, 0, 7, 5, 1);
    EXPECT_IDS(t, "a <y>  b", 0, 0, 5, 8, 1);
    nt_tokenizer_free(t);
    /* single_word: only where no word character touches the token */
    t = load_str(MINI("null", BL, "null", "{\"type\":\"ByteLevel\"}", MERGES_STR,
                      ADDED(",\"single_word\":true", "")));
    EXPECT_IDS(t, "a <x> b", 0, 0, 5, 7, 5, 1);
    nt_tokenizer_free(t);
#undef ADDED
}

/* ByteLevel decodes a token with a character outside its alphabet as the token's own bytes
 * (batch and stream alike). */
static void test_added_outside_alphabet(void) {
    struct nt_tokenizer *t = load_str(
        MINI("null", BL, "null", "{\"type\":\"ByteLevel\"}", MERGES_STR,
             "[{\"id\":8,\"content\":\"\xE6\x97\xA5\",\"special\":false,\"normalized\":false}]"));
    EXPECT_IDS(t,
               "ab\xE6\x97\xA5"
               "c",
               0, 3, 8, 2);
    EXPECT_DECODE(t, 0,
                  "ab\xE6\x97\xA5"
                  "c",
                  3, 8, 2);
    EXPECT_DECODE(t, 0, "\xE6\x97\xA5\xE6\x97\xA5", 8, 8);
    nt_tokenizer_free(t);
}

static void test_added_single_word(void) {
    struct nt_tokenizer *t =
        load_str(MINI("null", BL, "null", "{\"type\":\"ByteLevel\"}", MERGES_STR,
                      "[{\"id\":7,\"content\":\"<x>\",\"special\":true,\"normalized\":false,"
                      "\"single_word\":true}]"));
    if (!t) return;
    /* "a<x>": <x> touches the word character 'a', so it is not split out; "<x>" is then bytes
     * '<' 'x' '>' of which the vocabulary has none: dropped. Only "a" remains. */
    EXPECT_IDS(t, "a<x>", 0, 0);
    nt_tokenizer_free(t);
}

static void test_models(void) {
    /* byte_fallback: an unknown character becomes its <0xHH> tokens; unk_token + fuse_unk */
#define M(OPTS)                                                                                  \
    "{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,\"decoder\":"               \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"_\"}," \
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","    \
    "\"content\":\" \",\"start\":1,\"stop\":0}]},"                                               \
    "\"model\":{\"type\":\"BPE\"," OPTS ",\"vocab\":{\"<unk>\":0,\"<0xC3>\":1,\"<0xA9>\":2,"     \
    "\"a\":3,\"b\":4,\"_\":5,\"_a\":6,\"ab\":7,\"b_\":8},\"merges\":[\"_ a\",\"a b\"]}}"
    struct nt_tokenizer *t = load_str(M("\"byte_fallback\":true,\"unk_token\":\"<unk>\""));
    EXPECT_IDS(t, "_ab\xC3\xA9", 0, 6, 4, 1, 2);
    EXPECT_IDS(t,
               "a\xE2\x82\xAC"
               "b",
               0, 3, 0, 4); /* no <0xE2>: unk */
    /* Replace _ -> space, bytes -> UTF-8, fuse, strip one leading space */
    EXPECT_DECODE(t, 0, "ab\xC3\xA9", 6, 4, 1, 2);
    EXPECT_DECODE(t, 0, "a b", 5, 3, 5, 4);
    /* an invalid byte run: one U+FFFD per byte (batch only: streaming shows them as it can) */
    {
        int32_t ids[] = {1, 3};
        size_t len;
        char *s = decode(t, ids, 2, 0, &len);
        CHECK(!strcmp(s, "\xEF\xBF\xBD"
                         "a"),
              "fallback run: %s", s);
        free(s);
    }
    nt_tokenizer_free(t);
    t = load_str(M("\"unk_token\":\"<unk>\",\"fuse_unk\":true"));
    EXPECT_IDS(t,
               "a\xC3\xA9\xC3\xA9"
               "b",
               0, 3, 0, 4);
    nt_tokenizer_free(t);
    t = load_str(M("\"unk_token\":\"<unk>\",\"fuse_unk\":false"));
    EXPECT_IDS(t,
               "a\xC3\xA9\xC3\xA9"
               "b",
               0, 3, 0, 0, 4);
    nt_tokenizer_free(t);
    /* ignore_merges: a word in the vocabulary is one token even if merges would differ */
    t = load_str(M("\"ignore_merges\":true"));
    EXPECT_IDS(t, "b_", 0, 8);
    EXPECT_IDS(t, "_ab", 0, 6, 4);
    nt_tokenizer_free(t);
    t = load_str(M("\"ignore_merges\":false"));
    EXPECT_IDS(t, "b_", 0, 4, 5);
    nt_tokenizer_free(t);
    /* an unk_token missing from the vocabulary fails only when needed */
    t = load_str(M("\"unk_token\":\"<missing>\""));
    EXPECT_IDS(t, "ab", 0, 7);
    if (t) {
        size_t n;
        CHECK(nt_tokenizer_encode(t, "a\xC3\xA9", 3, 0, NULL, 0, &n, &err) == NEMOTRON_ERR_FORMAT &&
                  strstr(err.msg, "unk_token"),
              "missing unk: %s", err.msg);
    }
    nt_tokenizer_free(t);
#undef M
}

static void test_normalizers_and_post(void) {
#define N(NORM, POST)                                                                          \
    "{\"added_tokens\":[{\"id\":9,\"content\":\"[s]\",\"special\":true,\"normalized\":false}," \
    "{\"id\":10,\"content\":\"Bq\",\"special\":false,\"normalized\":true}],"                   \
    "\"normalizer\":" NORM ",\"pre_tokenizer\":null,\"post_processor\":" POST ","              \
    "\"decoder\":{\"type\":\"Fuse\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,"  \
    "\"_\":2,\"q\":3,\"B\":4,\"ab\":5,\"_a\":6,\"[s]\":9},\"merges\":[\"a b\",\"_ a\"]}}"
    /* Replace ' ' -> '_' then Prepend '_' then Strip; the added token "Bq" is matched after
     * normalization; [s] before it */
    struct nt_tokenizer *t = load_str(
        N("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Strip\",\"strip_left\":true,"
          "\"strip_right\":true},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
          "\"content\":\"_\"},"
          "{\"type\":\"Prepend\",\"prepend\":\"_\"}]}",
          "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[s]\","
          "\"type_id\":0}},"
          "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[s]\","
          "\"type_id\":0}}],"
          "\"special_tokens\":{\"[s]\":{\"id\":\"[s]\",\"ids\":[9],\"tokens\":[\"[s]\"]}}}"));
    /* "  a b  " -> strip "a b" -> "a_b" -> "_a_b" -> _a, _, b */
    EXPECT_IDS(t, "  a b  ", 0, 6, 2, 1);
    EXPECT_IDS(t, "  a b  ", 1, 9, 6, 2, 1, 9);
    /* "ab[s]a" -> "ab" | [s] | "a" -> each normalized: "_ab" -> _ ab; "_a" */
    EXPECT_IDS(t, "ab[s]a", 0, 2, 5, 9, 6);
    /* the normalized added token is matched in its normalized form "_Bq" (tokenizers
     * normalizes the content too): alone it matches, inside "_aBq" it does not */
    EXPECT_IDS(t, "Bq", 0, 10);
    EXPECT_IDS(t, "aBq", 0, 6, 4, 3);
    EXPECT_DECODE(t, 1, "_ab", 2, 5, 9);
    nt_tokenizer_free(t);
    /* Bert-style post-processor inside a Sequence with ByteLevel (a no-op for ids) */
    t = load_str(N("null",
                   "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},"
                   "{\"type\":\"BertProcessing\",\"sep\":[\"[s]\",9],\"cls\":[\"a\",0]}]}"));
    EXPECT_IDS(t, "ab", 1, 0, 5, 9);
    EXPECT_IDS(t, "ab", 0, 5);
    EXPECT_IDS(t, "", 1, 0, 9);
    nt_tokenizer_free(t);
#undef N
}

static void test_streaming_utf8(const struct nt_tokenizer *t) {
    /* single bytes of a 4-byte character, pushed one by one: nothing shows until it completes */
    const char *emoji = "\xF0\x9F\x98\x80";
    int32_t ids[4];
    for (int i = 0; i < 4; i++) ids[i] = t->bpe.byte_id[(unsigned char)emoji[i]];
    struct nt_detok d;
    nt_detok_init(&d);
    char out[64];
    int w[4];
    for (int i = 0; i < 4; i++) w[i] = nt_detok_push(t, &d, ids[i], 0, out, sizeof out, &err);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 4 && !memcmp(out, emoji, 4),
          "held back: %d %d %d %d", w[0], w[1], w[2], w[3]);
    /* a broken sequence: the start of one character then ASCII -> U+FFFD then the ASCII */
    nt_detok_init(&d);
    w[0] = nt_detok_push(t, &d, ids[0], 0, out, sizeof out, &err);
    w[1] = nt_detok_push(t, &d, ids[1], 0, out, sizeof out, &err);
    int32_t a = nt_tokenizer_token_id(t, "a", 1);
    w[2] = nt_detok_push(t, &d, a, 0, out, sizeof out, &err);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 4 &&
              !memcmp(out,
                      "\xEF\xBF\xBD"
                      "a",
                      4),
          "broken: %d", w[2]);
    /* the end of the stream in the middle of a character */
    nt_detok_init(&d);
    nt_detok_push(t, &d, ids[0], 0, out, sizeof out, &err);
    CHECK(nt_detok_flush(&d, out, 2) == -1, "flush into 2 bytes");
    CHECK(nt_detok_flush(&d, out, sizeof out) == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "flush");
    CHECK(nt_detok_flush(&d, out, sizeof out) == 0, "flush twice");
    size_t len;
    char *s = decode(t, ids, 1, 0, &len);
    CHECK(!strcmp(s, "\xEF\xBF\xBD"), "batch of a lone lead byte: %s", s);
    free(s);
}

/* ---- bounded matching: long white-space runs, windows, a pathological pattern ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ws_runs.json's text: prefix + unit * repeat + suffix. */
static char *spec_text(json_object *c, size_t *len) {
    const char *pre = json_object_get_string(json_object_object_get(c, "prefix"));
    const char *unit = json_object_get_string(json_object_object_get(c, "unit"));
    const char *suf = json_object_get_string(json_object_object_get(c, "suffix"));
    size_t rep = (size_t)json_object_get_int64(json_object_object_get(c, "repeat"));
    size_t lp = strlen(pre), lu = strlen(unit), ls = strlen(suf);
    char *t = malloc(lp + lu * rep + ls + 1), *o = t;
    memcpy(o, pre, lp);
    o += lp;
    for (size_t i = 0; i < rep; i++, o += lu) memcpy(o, unit, lu);
    memcpy(o, suf, ls);
    o += ls;
    *o = 0;
    *len = (size_t)(o - t);
    return t;
}

/* Encodes a long text in one call (the two-call protocol of encode() would do it twice): at
 * most one id per byte, since every token of these tokenizers spells at least one byte. */
static int32_t *encode_long(const struct nt_tokenizer *t, const char *s, size_t n, size_t *count) {
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    nemotron_status st = nt_tokenizer_encode(t, s, n, 0, ids, n + 1, count, &err);
    CHECK(st == NEMOTRON_OK && *count <= n + 1, "encode %zu bytes: %d %s", n, st, err.msg);
    if (st) *count = 0;
    return ids;
}

/* Compares ids with ws_runs.json's [[period], repeats] pairs; reports the first difference. */
static void check_pairs(const char *what, const int32_t *ids, size_t n, json_object *pairs) {
    size_t at = 0;
    for (size_t i = 0; i < json_object_array_length(pairs); i++) {
        json_object *pr = json_object_array_get_idx(pairs, i);
        json_object *period = json_object_array_get_idx(pr, 0);
        size_t plen = json_object_array_length(period);
        int64_t reps = json_object_get_int64(json_object_array_get_idx(pr, 1));
        for (int64_t r = 0; r < reps; r++)
            for (size_t k = 0; k < plen; k++, at++) {
                int32_t want = json_object_get_int(json_object_array_get_idx(period, k));
                if (at >= n || ids[at] != want) {
                    CHECK(0, "%s: id %zu is %d, tokenizers gives %d (%zu ids)", what, at,
                          at < n ? ids[at] : -1, want, n);
                    return;
                }
            }
    }
    CHECK(at == n, "%s: %zu ids, tokenizers gives %zu", what, n, at);
}

/* tests/fixtures/tokenizer/ws_runs.json (tools/reference/make_ws_fixtures.js: tokenizers
 * 0.23.2): runs of 1 MiB and 10 MiB, which the match of one piece spans whole; then a 10 MiB
 * run of spaces, on which tokenizers itself aborts, against the rule its 1 MiB run shows (one
 * id, repeated). The fast tier: the small and the demo model's tokenizers, the 10 MiB spaces on
 * the demo's (its BPE merges no spaces: a second); the full tier adds big, and the 10 MiB
 * spaces on all three (a heap of 30 million merges each for small and big). */
static void test_ws_runs(const struct nt_tokenizer *small, const struct nt_tokenizer *big,
                         const struct nt_tokenizer *demo) {
    json_object *runs = json_object_from_file(TOKDIR "/ws_runs.json");
    CHECK(runs && json_object_array_length(runs) == 10, "ws_runs.json: 10 runs");
    if (!runs) return;
    int full = test_full_tier();
    const struct nt_tokenizer *toks[3] = {small, full ? big : NULL, demo};
    const char *names[3] = {"small", "big", "demo"};
    int32_t unit_id[3] = {-1, -1, -1};     /* the id a run of spaces repeats, from the 1 MiB run */
    size_t unit_len[3] = {0, 0, 0};        /* how many spaces it spells */
    for (size_t i = 0; i < json_object_array_length(runs); i++) {
        json_object *c = json_object_array_get_idx(runs, i);
        const char *name = json_object_get_string(json_object_object_get(c, "name"));
        size_t len;
        char *text = spec_text(c, &len);
        for (int k = 0; k < 3; k++) {
            if (!toks[k]) continue;
            char what[96];
            snprintf(what, sizeof what, "%s, %s tokenizer", name, names[k]);
            size_t n;
            int32_t *ids = encode_long(toks[k], text, len, &n);
            json_object *pairs = get2(c, "ids", names[k]);
            check_pairs(what, ids, n, pairs);
            if (!strcmp(name, "spaces_1m")) {
                json_object *first = json_object_array_get_idx(pairs, 0);
                json_object *period = json_object_array_get_idx(first, 0);
                int64_t reps = json_object_get_int64(json_object_array_get_idx(first, 1));
                CHECK(json_object_array_length(pairs) == 1 && json_object_array_length(period) == 1 &&
                          reps > 0 && len % (size_t)reps == 0,
                      "%s: one id repeated", what);
                unit_id[k] = json_object_get_int(json_object_array_get_idx(period, 0));
                unit_len[k] = reps > 0 ? len / (size_t)reps : 0;
            }
            free(ids);
        }
        free(text);
    }
    json_object_put(runs);

    size_t len = (size_t)10 << 20;
    char *text = malloc(len);
    memset(text, ' ', len);
    for (int k = 0; k < 3; k++) {
        if (!toks[k] || (!full && k != 2) || !unit_len[k]) continue;
        size_t n;
        int32_t *ids = encode_long(toks[k], text, len, &n);
        size_t bad = 0;
        while (bad < n && ids[bad] == unit_id[k]) bad++;
        CHECK(n == len / unit_len[k] && bad == n,
              "10 MiB of spaces, %s tokenizer: %zu ids, id %zu is %d; the rule: %zu times %d",
              names[k], n, bad, bad < n ? ids[bad] : -1, len / unit_len[k], unit_id[k]);
        free(ids);
    }
    free(text);
}

/* The ids do not depend on the window a match first sees: the fixture cases with a window of
 * one byte (every match grows it, and every lookahead reaches its end), and a long text of every
 * kind of piece with windows of 1, 256 and the whole text. */
static void test_windows(const char *tname, const struct nt_tokenizer *t) {
    size_t saved = nt_rx_first_window;
    nt_rx_first_window = 1;
    test_cases(tname, t, 0);
    /* the long text: each fixture text, then runs of digits, punctuation, letters, CJK */
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    for (size_t i = 0; i < json_object_array_length(cases); i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        const char *b64 = json_object_get_string(json_object_object_get(c, "text_b64"));
        len += b64_decode(b64, (unsigned char *)text + len);
    }
    static const char *runs[] = {"0123456789", "!?.,;:-_/", "abcdefghij", "ABCDEFGHIJ",
                                 "\xe4\xb8\xad\xe6\x96\x87", " \t", "'s 're "};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
        for (int k = 0; k < 300; k++) {
            size_t l = strlen(runs[r]);
            memcpy(text + len, runs[r], l);
            len += l;
        }
    size_t windows[3] = {1, NT_RX_FIRST_WINDOW, SIZE_MAX}, n[3];
    int32_t *ids[3];
    for (int w = 0; w < 3; w++) {
        nt_rx_first_window = windows[w];
        ids[w] = encode(t, text, len, 0, &n[w]);
    }
    for (int w = 0; w < 2; w++)
        CHECK(n[w] == n[2] && !memcmp(ids[w], ids[2], n[2] * sizeof *ids[2]),
              "%s: a %zu-byte text, window %zu: %zu ids, whole text: %zu ids", tname, len,
              windows[w], n[w], n[2]);
    for (int w = 0; w < 3; w++) free(ids[w]);
    free(text);
    nt_rx_first_window = saved;
}


/* A Split pattern that backtracks cubically over a run of spaces (each match stays under
 * PCRE2's per-call limit, and took 3.7 s per KB): the encode's budget stops it, naming the
 * pattern, in time linear in the text; the same pattern over text it matches cheaply works. */
static const char cubic_json[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\" \": 0, \"a\": 1, \"b\": 2, \"q\": 3},"
    " \"merges\": []},"
    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s*\\\\s*\\\\s*q|\\\\s|\\\\S\"},"
    " \"behavior\": \"Isolated\", \"invert\": false}}";

/* The public API's message of a failed encode (nemotron_tokenizer_last_error): per thread. */
static void *other_thread_error(void *arg) {
    (void)arg;
    return (void *)nemotron_tokenizer_last_error();
}

static void test_public_last_error(void) {
    char path[] = "/tmp/nt_test_cubic_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, cubic_json, sizeof cubic_json - 1) == (ssize_t)(sizeof cubic_json - 1),
          "writing %s", path);
    if (fd >= 0) close(fd);
    nemotron_tokenizer *t = NULL;
    CHECK(nemotron_tokenizer_load(path, &t) == NEMOTRON_OK, "load: %s", nemotron_tokenizer_errmsg(t));
    unlink(path);
    char spaces[2048];
    memset(spaces, ' ', sizeof spaces);
    size_t n = 0;
    CHECK(nemotron_tokenize(t, spaces, sizeof spaces, 0, NULL, 0, &n) == NEMOTRON_ERR_UNSUPPORTED &&
              strstr(nemotron_tokenizer_last_error(), "backtracks too much") &&
              strstr(nemotron_tokenizer_last_error(), "/\\s*\\s*\\s*q|\\s|\\S/"),
          "public encode's message: [%s]", nemotron_tokenizer_last_error());
    pthread_t th;
    void *other = NULL;
    pthread_create(&th, NULL, other_thread_error, NULL);
    pthread_join(th, &other);
    CHECK(other && !strcmp((const char *)other, ""), "another thread's last error: [%s]",
          other ? (const char *)other : "(null)");
    CHECK(nemotron_tokenize(t, "ab", 2, 0, NULL, 0, &n) == NEMOTRON_OK && n == 2 &&
              !strcmp(nemotron_tokenizer_last_error(), ""),
          "after a success: [%s]", nemotron_tokenizer_last_error());
    CHECK(nemotron_tokenize(t, NULL, 3, 0, NULL, 0, &n) == NEMOTRON_ERR_ARG &&
              strstr(nemotron_tokenizer_last_error(), "text is NULL"),
          "NULL text: [%s]", nemotron_tokenizer_last_error());
    int32_t bad = 999;
    char out[8];
    CHECK(nemotron_detokenize(t, &bad, 1, 0, out, sizeof out, &n) == NEMOTRON_ERR_ARG &&
              strstr(nemotron_tokenizer_last_error(), "999"),
          "decode of an id outside the vocabulary: [%s]", nemotron_tokenizer_last_error());
    nemotron_tokenizer_free(t);
}

static void test_pathological_regex(void) {
    struct nt_tokenizer *t = load_str(cubic_json);
    if (!t) return;
    size_t sizes[2] = {1024, 100 * 1024};
    for (int i = 0; i < 2; i++) {
        char *text = malloc(sizes[i]);
        memset(text, ' ', sizes[i]);
        size_t n = 0;
        double t0 = now_s();
        nemotron_status st = nt_tokenizer_encode(t, text, sizes[i], 0, NULL, 0, &n, &err);
        double dt = now_s() - t0;
        CHECK(st == NEMOTRON_ERR_UNSUPPORTED && strstr(err.msg, "backtracks too much") &&
                  strstr(err.msg, "/\\s*\\s*\\s*q|\\s|\\S/") && strstr(err.msg, "pre_tokenizer step 0"),
              "%zu spaces: %d %s", sizes[i], st, err.msg);
        /* linear: ~0.5 s for 100 KB here; without the budget 1 KB took 3.7 s */
        CHECK(dt < 20.0, "%zu spaces: the budget ran out after %.1f s", sizes[i], dt);
        for (size_t k = 0; k < sizes[i]; k++) text[k] = "ab "[k % 3];
        int32_t *ids = encode(t, text, sizes[i], 0, &n);
        CHECK(n == sizes[i] && ids[0] == 1 && ids[1] == 2 && ids[2] == 0, "%zu bytes of 'ab ': %zu ids",
              sizes[i], n);
        free(ids);
        free(text);
    }
    nt_tokenizer_free(t);
}

int main(void) {
    FILE *f = fopen(TOKDIR "/cases.json", "rb");
    CHECK(f != NULL, "cannot open cases.json");
    if (!f) return test_summary("tokenizer");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *js = malloc((size_t)size + 1);
    CHECK(fread(js, 1, (size_t)size, f) == (size_t)size, "read cases.json");
    js[size] = 0;
    fclose(f);
    cases = json_tokener_parse(js);
    free(js);
    CHECK(cases && json_object_array_length(cases) == 45, "cases.json: 45 cases");

    struct nt_tokenizer *small = load(TOKDIR "/small.json");
    struct nt_tokenizer *bos = load(TOKDIR "/small-bos.json");
    if (small) {
        test_cases("small", small, 0);
        test_lookups(small);
        test_threads(small);
        test_merge_order(small, "small");
        test_streaming_utf8(small);
        test_errors(small);
    }
    if (bos) test_cases("small-bos", bos, 1);
    FILE *bf = fopen(BIG_JSON, "rb");
    struct nt_tokenizer *big = NULL;
    if (bf) {
        fclose(bf);
        big = load(BIG_JSON);
        if (big) {
            test_cases("big", big, 0);
            test_merge_order(big, "big");
            CHECK(nt_tokenizer_vocab_size(big) == 131072, "%d", nt_tokenizer_vocab_size(big));
            test_windows("big", big);
        }
    } else {
        printf("test_tokenizer: %s absent (make build/fixtures/big.json): big cases skipped\n",
               BIG_JSON);
    }
    if (small) test_windows("small", small);
    struct nt_tokenizer *demo = load("models/nemotron-h-kjv/tokenizer.json");
    test_ws_runs(small, big, demo);
    nt_tokenizer_free(demo);
    test_pathological_regex();
    test_public_last_error();
    test_regex_translation();
    test_merges_forms();
    test_json_paths();
    test_split_behaviors();
    test_added_tokens();
    test_added_single_word();
    test_added_outside_alphabet();
    test_models();
    test_normalizers_and_post();
    nt_tokenizer_free(small);
    nt_tokenizer_free(bos);
    nt_tokenizer_free(big);
    json_object_put(cases);
    return test_summary("tokenizer");
}
