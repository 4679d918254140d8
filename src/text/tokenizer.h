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

/* A GGUF file's tokenizer (tokenizer.ggml.* metadata, src/text/tokenizer_gguf.c), loaded as the
 * tokenizer.json it was converted from would be. */
struct nt_gguf;
nemotron_status nt_tokenizer_load_gguf(const char *path, struct nt_tokenizer **out, struct nt_err *err);
/* That tokenizer.json's text (nt_free it): what a model opened from a GGUF carries. */
nemotron_status nt_tokenizer_json_from_gguf(const struct nt_gguf *g, char **json, size_t *len,
                                            struct nt_err *err);

/* 1 + the largest id: the model vocab plus the added tokens not in it (files are dense; one
 * whose ids run far past its token count is refused at load). Ids in range that no token has
 * decode to nothing, as in tokenizers. */
int nt_tokenizer_vocab_size(const struct nt_tokenizer *t);
/* The id of a token's exact text (vocab or added), or -1. */
int32_t nt_tokenizer_token_id(const struct nt_tokenizer *t, const char *text, size_t len);
/* The token's text as stored (byte-level form for vocab entries, literal for added tokens),
 * NUL-terminated; NULL for an id out of range or one no token has. Valid as long as the
 * tokenizer. */
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
/* Writes the bytes id completes to out (not NUL-terminated): complete UTF-8 characters only;
 * returns how many, or -1 on an id out of range or cap too small (err says which; the state is
 * then unchanged, so the push can be retried with a larger buffer). A cap of
 * nt_detok_cap(t) is always enough. Ids without a token, and special tokens when skip_special,
 * write nothing. Concatenated pushes and the flush equal nt_tokenizer_decode of the same ids
 * for a ByteLevel decoder (and for every decoder chain but the corner cases tokenizer.c names
 * at stream_token). */
int nt_detok_push(const struct nt_tokenizer *t, struct nt_detok *d, int32_t id, int skip_special,
                  char *out, size_t cap, struct nt_err *err);
/* Flushes what is still pending at the end of the stream: an incomplete character becomes one
 * U+FFFD (3 bytes). Returns the bytes written (0 or 3), or -1 when cap < 3 and something is
 * pending. */
int nt_detok_flush(struct nt_detok *d, char *out, size_t cap);
/* A buffer size that always suffices for one nt_detok_push or nt_detok_flush: 3 bytes per byte
 * of the longest token through the decoder, plus what can be pending. */
size_t nt_detok_cap(const struct nt_tokenizer *t);

#endif /* NT_TOKENIZER_H */
