/* tokenizer.h - a Hugging Face tokenizer.json (byte-level BPE), encoded and decoded exactly as
 * the `tokenizers` library does.
 *
 * Owns the vocabulary, merges, added tokens and the compiled pre-tokenizer (PCRE2, UTF + Unicode
 * properties, JIT). Immutable after load: encode and decode may run on many threads at once.
 * Text is UTF-8 bytes; invalid sequences are replaced by U+FFFD before anything else (what
 * Python's bytes.decode("utf-8", "replace") gives, the text `tokenizers` would have seen).
 * What the file declares (normalizer, pre_tokenizer, model, post_processor, decoder) is honoured;
 * a component this reader does not implement is NEMOTRON_ERR_UNSUPPORTED naming it.
 */
#ifndef NT_TOKENIZER_H
#define NT_TOKENIZER_H

#include "../common.h"

struct nt_tokenizer;

/* Loads a tokenizer.json file. On failure *out is NULL and err names the file, the key and what
 * was wrong. */
nemotron_status nt_tokenizer_load(const char *path, struct nt_tokenizer **out, struct nt_err *err);
/* The same from bytes in memory (fuzzing, tests); `name` is used in messages. */
nemotron_status nt_tokenizer_load_bytes(const char *json, size_t len, const char *name,
                                        struct nt_tokenizer **out, struct nt_err *err);
void nt_tokenizer_free(struct nt_tokenizer *t);

int nt_tokenizer_vocab_size(const struct nt_tokenizer *t);      /* model vocab + added tokens */
/* The id of a token's exact text (vocab or added), or -1. */
int32_t nt_tokenizer_token_id(const struct nt_tokenizer *t, const char *text, size_t len);
/* The token's text as stored (byte-level form for vocab entries, literal for added tokens),
 * NULL for an id out of range. Valid as long as the tokenizer. */
const char *nt_tokenizer_token_text(const struct nt_tokenizer *t, int32_t id);
int nt_tokenizer_is_special(const struct nt_tokenizer *t, int32_t id);

/* Encodes text[0..len). add_special: apply the post-processor (e.g. a BOS), as
 * encode(text, add_special_tokens=True). Writes at most cap ids to ids (ids may be NULL when cap
 * is 0) and sets *n_ids to how many the text needs: call again with a larger buffer when
 * *n_ids > cap. */
nemotron_status nt_tokenizer_encode(const struct nt_tokenizer *t, const char *text, size_t len,
                                    int add_special, int32_t *ids, size_t cap, size_t *n_ids,
                                    struct nt_err *err);

/* Decodes ids through the declared decoder into out (at most cap bytes, always NUL-terminated
 * when cap > 0); *len gets the full length. skip_special drops special tokens, as
 * decode(ids, skip_special_tokens=True). An id out of range is NEMOTRON_ERR_ARG. */
nemotron_status nt_tokenizer_decode(const struct nt_tokenizer *t, const int32_t *ids, size_t n,
                                    int skip_special, char *out, size_t cap, size_t *len,
                                    struct nt_err *err);

/* Streaming decode, one id at a time: bytes are held back until they complete a UTF-8
 * character, so a stream never shows a broken sequence; what stays invalid is emitted as U+FFFD
 * once it can no longer complete. The state is small and caller-owned. */
struct nt_detok {
    unsigned char pending[8];
    int n_pending;
    int started;                 /* for decoders that treat the first token specially */
};
void nt_detok_init(struct nt_detok *d);
/* Appends the printable bytes of id to out (cap >= 64 is always enough for one token plus what
 * was pending... or the token's byte length + 8); returns the number of bytes written, or -1 on
 * an id out of range / cap too small (err says which). */
int nt_detok_push(const struct nt_tokenizer *t, struct nt_detok *d, int32_t id, int skip_special,
                  char *out, size_t cap, struct nt_err *err);
/* Flushes what is still pending at the end of the stream (as U+FFFD where incomplete). */
int nt_detok_flush(struct nt_detok *d, char *out, size_t cap);

#endif /* NT_TOKENIZER_H */
