/* fuzz_tokenizer.c - libFuzzer targets for the tokenizer: arbitrary bytes as text to encode
 * (default), or as a tokenizer.json to load (built with -DFUZZ_TOKENIZER_LOAD).
 *
 * Text mode loads tests/fixtures/tokenizer/small.json once (or $NT_FUZZ_TOKENIZER) and checks,
 * besides crashes and sanitizer reports: every id is in the vocabulary; decode(encode(x)) is x
 * for valid UTF-8 and x with its invalid sequences repaired to U+FFFD otherwise (a byte-level
 * tokenizer loses nothing); a buffer too small gives the same count and prefix; streaming
 * decode, pushed one id at a time, equals batch decode, with and without special tokens.
 *
 * Load mode feeds the bytes to nt_tokenizer_load_bytes. A failure must carry a message naming
 * the file; a tokenizer that loads must then encode a few fixed texts and the input itself
 * without failing (except on regex match limits), give ids in range, decode them, and stream
 * them through a buffer of nt_detok_cap bytes; for a ByteLevel-only decoder the stream must
 * equal the batch decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

#define CHECKX(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_tokenizer: check failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Decodes ids in a batch and as a stream; returns the batch text (malloc'd) and its length. */
static char *both_decodes(const struct nt_tokenizer *t, const int32_t *ids, size_t n, int skip,
                          int must_equal, size_t *len) {
    struct nt_err err;
    size_t need = 0;
    CHECKX(nt_tokenizer_decode(t, ids, n, skip, NULL, 0, &need, &err) == NEMOTRON_OK);
    char *out = malloc(need + 1);
    size_t got;
    CHECKX(nt_tokenizer_decode(t, ids, n, skip, out, need + 1, &got, &err) == NEMOTRON_OK);
    CHECKX(got == need && out[need] == 0);
    size_t cap = nt_detok_cap(t), total = 0;
    char *piece = malloc(cap);
    char *s = malloc(n * cap + 4);
    struct nt_detok d;
    nt_detok_init(&d);
    for (size_t i = 0; i < n; i++) {
        int w = nt_detok_push(t, &d, ids[i], skip, piece, cap, &err);
        CHECKX(w >= 0 && (size_t)w <= cap);
        /* what a push shows is always complete UTF-8 */
        CHECKX(nt_utf8_valid_prefix((unsigned char *)piece, (size_t)w) == (size_t)w);
        memcpy(s + total, piece, (size_t)w);
        total += (size_t)w;
    }
    int w = nt_detok_flush(&d, piece, cap);
    CHECKX(w >= 0);
    memcpy(s + total, piece, (size_t)w);
    total += (size_t)w;
    if (must_equal) CHECKX(total == got && !memcmp(s, out, got));
    free(s);
    free(piece);
    *len = got;
    return out;
}

static int32_t *encode_all(const struct nt_tokenizer *t, const char *s, size_t n, int special,
                           size_t *count, nemotron_status *st) {
    struct nt_err err;
    size_t need = 0;
    *st = nt_tokenizer_encode(t, s, n, special, NULL, 0, &need, &err);
    if (*st) return NULL;
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    size_t got;
    *st = nt_tokenizer_encode(t, s, n, special, ids, need, &got, &err);
    CHECKX(*st == NEMOTRON_OK && got == need);
    for (size_t i = 0; i < got; i++) CHECKX(ids[i] >= 0 && ids[i] < nt_tokenizer_vocab_size(t));
    if (got > 1) {
        /* a short buffer: the same count, the same prefix */
        int32_t *few = malloc(sizeof *few);
        size_t n2;
        CHECKX(nt_tokenizer_encode(t, s, n, special, few, 1, &n2, &err) == NEMOTRON_OK);
        CHECKX(n2 == got && few[0] == ids[0]);
        free(few);
    }
    *count = got;
    return ids;
}

#ifndef FUZZ_TOKENIZER_LOAD

static struct nt_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) {
        const char *path = getenv("NT_FUZZ_TOKENIZER");
        struct nt_err err;
        if (nt_tokenizer_load(path ? path : "tests/fixtures/tokenizer/small.json", &tok, &err)) {
            fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root)\n", err.msg);
            abort();
        }
    }
    const char *text = (const char *)data;
    size_t count;
    nemotron_status st;
    int32_t *ids = encode_all(tok, text, size, 0, &count, &st);
    CHECKX(st == NEMOTRON_OK);
    size_t len;
    char *dec = both_decodes(tok, ids, count, 0, 1, &len);
    char *want = malloc(3 * size + 1);
    size_t wlen = nt_utf8_repair(data, size, want);
    CHECKX(len == wlen && !memcmp(dec, want, wlen));
    free(both_decodes(tok, ids, count, 1, 1, &len));
    free(dec);
    free(want);
    free(ids);
    return 0;
}

#else

/* Texts every loaded tokenizer must get through. */
static const char *const texts[] = {
    "Hello, world! It's 2026.",
    "  spaces\t\ttabs\r\nnew lines\n\n",
    "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80 <s></s><|im_end|> <0x41>",
    "\xFF\xFE broken \xE2\x82",
    "",
};

static int decoder_is_bytelevel_only(const struct nt_tokenizer *t) {
    return t->n_dec == 1 && t->dec[0].kind == NT_DC_BYTELEVEL;
}

static void exercise(const struct nt_tokenizer *t, const char *s, size_t n) {
    for (int special = 0; special < 2; special++) {
        size_t count;
        nemotron_status st;
        int32_t *ids = encode_all(t, s, n, special, &count, &st);
        /* a fuzzed regex may hit PCRE2's match limit, and an unk_token may be missing */
        CHECKX(st == NEMOTRON_OK || st == NEMOTRON_ERR_UNSUPPORTED || st == NEMOTRON_ERR_FORMAT);
        if (!ids) continue;
        size_t len;
        free(both_decodes(t, ids, count, special, decoder_is_bytelevel_only(t), &len));
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct nt_tokenizer *t = (struct nt_tokenizer *)1;
    struct nt_err err;
    memset(&err, 0, sizeof err);
    nemotron_status st = nt_tokenizer_load_bytes((const char *)data, size, "fuzz.json", &t, &err);
    if (st) {
        CHECKX(t == NULL);
        CHECKX(memchr(err.msg, 0, sizeof err.msg) != NULL && strstr(err.msg, "fuzz.json"));
        return 0;
    }
    CHECKX(t != NULL && nt_tokenizer_vocab_size(t) >= 0);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        exercise(t, texts[i], strlen(texts[i]));
    exercise(t, (const char *)data, size < 512 ? size : 512);
    for (int32_t id = 0; id < nt_tokenizer_vocab_size(t) && id < 64; id++) {
        const char *txt = nt_tokenizer_token_text(t, id);
        if (txt)
            CHECKX(nt_tokenizer_token_id(t, txt, strlen(txt)) >= 0 || strlen(txt) < t->ids[id].len);
    }
    nt_tokenizer_free(t);
    return 0;
}

#endif
