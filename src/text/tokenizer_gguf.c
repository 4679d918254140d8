/* tokenizer_gguf.c - a GGUF file's tokenizer (llama.cpp's tokenizer.ggml.* metadata) as the
 * tokenizer.json the `tokenizers` library would have read.
 *
 * A GGUF of a Nemotron-H holds the byte-level BPE of its tokenizer.json, taken apart by
 * llama.cpp's converter: the vocabulary in id order (tokenizer.ggml.tokens, in the byte-level
 * alphabet, "Ġ" for a space), the merges in rank order as "left right" strings, a type per
 * token (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), the special ids and
 * whether a BOS is prepended, and the pre-tokenizer by a name (tokenizer.ggml.pre) that llama.cpp
 * gave after recognising the original's regex. Putting those back together as a tokenizer.json
 * lets the one loader (tokenizer_load.c) build the tokenizer, so a GGUF tokenizes exactly as the
 * model's own tokenizer.json does, and a `convert` of a GGUF carries a usable tokenizer.json.
 *
 * Control and user-defined tokens are the added tokens (control ones special: skipped by
 * decode(skip_special_tokens)). The pre-tokenizer names known are those Nemotron files use; an
 * unknown name is refused, naming it, rather than guessed.
 */
#include <json.h>
#include <stdio.h>

#include "../model/gguf.h"
#include "tokenizer.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4 };

/* The Nemotron (Mistral "tekken") split: words with their leading non-letter, single digits,
 * punctuation runs, newlines, spaces; then byte-level mapping without a second regex. This is
 * the pattern of Nemotron-H's tokenizer.json, which llama.cpp names "tekken". */
static const char TEKKEN_REGEX[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_object *byte_level(int add_prefix_space, int use_regex) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string("ByteLevel"));
    json_object_object_add(o, "add_prefix_space", json_object_new_boolean(add_prefix_space));
    json_object_object_add(o, "trim_offsets", json_object_new_boolean(1));
    json_object_object_add(o, "use_regex", json_object_new_boolean(use_regex));
    return o;
}

/* The pre_tokenizer of tokenizer.ggml.pre `pre` (len bytes), or NULL when unknown. */
static json_object *pre_tokenizer(const char *pre, uint64_t len) {
    if (len == 6 && !memcmp(pre, "tekken", 6)) {
        json_object *split = json_object_new_object(), *pattern = json_object_new_object();
        json_object_object_add(pattern, "Regex", json_object_new_string(TEKKEN_REGEX));
        json_object_object_add(split, "type", json_object_new_string("Split"));
        json_object_object_add(split, "pattern", pattern);
        json_object_object_add(split, "behavior", json_object_new_string("Isolated"));
        json_object_object_add(split, "invert", json_object_new_boolean(0));
        json_object *seq = json_object_new_object(), *list = json_object_new_array();
        json_object_array_add(list, split);
        json_object_array_add(list, byte_level(0, 0));
        json_object_object_add(seq, "type", json_object_new_string("Sequence"));
        json_object_object_add(seq, "pretokenizers", list);
        return seq;
    }
    /* GPT-2's own split, which ByteLevel applies itself */
    if ((len == 7 && !memcmp(pre, "default", 7)) || (len == 5 && !memcmp(pre, "gpt-2", 5)))
        return byte_level(0, 1);
    return NULL;
}

static json_object *string_n(const char *s, uint64_t len) { return json_object_new_string_len(s, (int)len); }

/* The token text of id, from the tokens array (a walk: the array is read in order). */
static nemotron_status token_text(const struct nt_gguf_kv *tokens, uint64_t id, const char **s,
                                  uint64_t *len) {
    uint64_t pos = 0;
    for (uint64_t i = 0; i <= id; i++) nt_gguf_next_str(tokens, &pos, s, len);
    return NEMOTRON_OK;
}

/* A TemplateProcessing that puts the BOS before the text. */
static json_object *bos_template(const char *bos, uint64_t len, int64_t id) {
    json_object *single = json_object_new_array(), *piece = json_object_new_object(),
                *sp = json_object_new_object(), *seq = json_object_new_object(),
                *a = json_object_new_object();
    json_object_object_add(sp, "id", string_n(bos, len));
    json_object_object_add(sp, "type_id", json_object_new_int(0));
    json_object_object_add(piece, "SpecialToken", sp);
    json_object_array_add(single, piece);
    json_object_object_add(a, "id", json_object_new_string("A"));
    json_object_object_add(a, "type_id", json_object_new_int(0));
    json_object_object_add(seq, "Sequence", a);
    json_object_array_add(single, seq);
    json_object *def = json_object_new_object(), *ids = json_object_new_array(),
                *toks = json_object_new_array(), *specials = json_object_new_object();
    json_object_array_add(ids, json_object_new_int64(id));
    json_object_array_add(toks, string_n(bos, len));
    json_object_object_add(def, "id", string_n(bos, len));
    json_object_object_add(def, "ids", ids);
    json_object_object_add(def, "tokens", toks);
    char key[4096];
    snprintf(key, sizeof key, "%.*s", (int)(len < 4000 ? len : 4000), bos);
    json_object_object_add(specials, key, def);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string("TemplateProcessing"));
    json_object_object_add(o, "single", single);
    json_object_object_add(o, "special_tokens", specials);
    return o;
}

/* Builds the tokenizer.json object; the caller owns it. */
static nemotron_status build(const struct nt_gguf *g, json_object *root, struct nt_err *err) {
    const char *s;
    uint64_t len;
    nemotron_status st = nt_gguf_get_str(g, "tokenizer.ggml.model", &s, &len, err);
    if (st) return st;
    if (len != 4 || memcmp(s, "gpt2", 4))
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "tokenizer.ggml.model is \"%.*s\": only \"gpt2\" (byte-level BPE, what "
                       "Nemotron-H uses) is supported", (int)(len < 64 ? len : 64), s);
    const struct nt_gguf_kv *tokens, *types = NULL, *merges = NULL;
    if ((st = nt_gguf_get_array(g, "tokenizer.ggml.tokens", NT_GGUF_STRING, &tokens, err))) return st;
    if (nt_gguf_find(g, "tokenizer.ggml.token_type") &&
        (st = nt_gguf_get_array(g, "tokenizer.ggml.token_type", NT_GGUF_I32, &types, err)))
        return st;
    if (types && types->n != tokens->n)
        return nt_fail(err, NEMOTRON_ERR_CONFIG,
                       "tokenizer.ggml.token_type: %llu types for %llu tokens",
                       (unsigned long long)types->n, (unsigned long long)tokens->n);
    if ((st = nt_gguf_get_array(g, "tokenizer.ggml.merges", NT_GGUF_STRING, &merges, err))) return st;
    const char *pre = "default";
    uint64_t pre_len = 7;
    if (nt_gguf_find(g, "tokenizer.ggml.pre") &&
        (st = nt_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len, err)))
        return st;
    json_object *pretok = pre_tokenizer(pre, pre_len);
    if (!pretok)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "tokenizer.ggml.pre is \"%.*s\": this build knows the pre-tokenizers "
                       "\"tekken\" (Nemotron-H), \"gpt-2\" and \"default\"",
                       (int)(pre_len < 64 ? pre_len : 64), pre);

    json_object *vocab = json_object_new_object(), *added = json_object_new_array();
    uint64_t pos = 0;
    for (uint64_t i = 0; i < tokens->n; i++) {
        nt_gguf_next_str(tokens, &pos, &s, &len);
        char key[1024];
        if (len >= sizeof key || memchr(s, 0, len)) {
            json_object_put(vocab);
            json_object_put(added);
            json_object_put(pretok);
            return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                           "tokenizer.ggml.tokens[%llu]: %llu bytes%s (this reader takes tokens "
                           "of at most %zu bytes, without NUL)", (unsigned long long)i,
                           (unsigned long long)len, len < sizeof key ? " holding a NUL" : "",
                           sizeof key - 1);
        }
        memcpy(key, s, len);
        key[len] = 0;
        json_object_object_add(vocab, key, json_object_new_int64((int64_t)i));
        int64_t type = types ? nt_gguf_int_at(types, i) : 1;
        if (type == TOKEN_CONTROL || type == TOKEN_USER_DEFINED) {
            json_object *a = json_object_new_object();
            json_object_object_add(a, "id", json_object_new_int64((int64_t)i));
            json_object_object_add(a, "content", string_n(s, len));
            json_object_object_add(a, "single_word", json_object_new_boolean(0));
            json_object_object_add(a, "lstrip", json_object_new_boolean(0));
            json_object_object_add(a, "rstrip", json_object_new_boolean(0));
            json_object_object_add(a, "normalized", json_object_new_boolean(0));
            json_object_object_add(a, "special", json_object_new_boolean(type == TOKEN_CONTROL));
            json_object_array_add(added, a);
        }
    }
    json_object *merge_list = json_object_new_array();
    pos = 0;
    for (uint64_t i = 0; i < merges->n; i++) {
        nt_gguf_next_str(merges, &pos, &s, &len);
        const char *space = memchr(s, ' ', len);
        if (!space || memchr(space + 1, ' ', len - (uint64_t)(space + 1 - s))) {
            json_object_put(vocab);
            json_object_put(added);
            json_object_put(pretok);
            json_object_put(merge_list);
            return nt_fail(err, NEMOTRON_ERR_FORMAT,
                           "tokenizer.ggml.merges[%llu] \"%.*s\": expected two tokens separated by "
                           "one space", (unsigned long long)i, (int)(len < 64 ? len : 64), s);
        }
        json_object *pair = json_object_new_array();
        json_object_array_add(pair, string_n(s, (uint64_t)(space - s)));
        json_object_array_add(pair, string_n(space + 1, len - (uint64_t)(space + 1 - s)));
        json_object_array_add(merge_list, pair);
    }

    json_object *model = json_object_new_object();
    json_object_object_add(model, "type", json_object_new_string("BPE"));
    json_object_object_add(model, "dropout", NULL);
    json_object *unk = NULL;
    uint64_t id;
    if (nt_gguf_find(g, "tokenizer.ggml.unknown_token_id") &&
        !nt_gguf_get_uint(g, "tokenizer.ggml.unknown_token_id", &id, err) && id < tokens->n) {
        token_text(tokens, id, &s, &len);
        unk = string_n(s, len);
    }
    json_object_object_add(model, "unk_token", unk);
    json_object_object_add(model, "continuing_subword_prefix", NULL);
    json_object_object_add(model, "end_of_word_suffix", NULL);
    json_object_object_add(model, "fuse_unk", json_object_new_boolean(0));
    json_object_object_add(model, "byte_fallback", json_object_new_boolean(0));
    json_object_object_add(model, "ignore_merges", json_object_new_boolean(0));
    json_object_object_add(model, "vocab", vocab);
    json_object_object_add(model, "merges", merge_list);

    json_object *post = NULL;
    int add_bos = 0;
    if (nt_gguf_find(g, "tokenizer.ggml.add_bos_token") &&
        (st = nt_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, err))) {
        json_object_put(model);
        json_object_put(added);
        json_object_put(pretok);
        return st;
    }
    if (add_bos) {
        if ((st = nt_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", &id, err)) || id >= tokens->n) {
            json_object_put(model);
            json_object_put(added);
            json_object_put(pretok);
            return st ? st : nt_fail(err, NEMOTRON_ERR_CONFIG,
                                     "tokenizer.ggml.bos_token_id %llu: past the %llu tokens",
                                     (unsigned long long)id, (unsigned long long)tokens->n);
        }
        token_text(tokens, id, &s, &len);
        post = bos_template(s, len, (int64_t)id);
    }
    json_object_object_add(root, "version", json_object_new_string("1.0"));
    json_object_object_add(root, "truncation", NULL);
    json_object_object_add(root, "padding", NULL);
    json_object_object_add(root, "added_tokens", added);
    json_object_object_add(root, "normalizer", NULL);
    json_object_object_add(root, "pre_tokenizer", pretok);
    json_object_object_add(root, "post_processor", post);
    json_object_object_add(root, "decoder", byte_level(1, 1));
    json_object_object_add(root, "model", model);
    return NEMOTRON_OK;
}

nemotron_status nt_tokenizer_json_from_gguf(const struct nt_gguf *g, char **json, size_t *len,
                                            struct nt_err *err) {
    *json = NULL;
    *len = 0;
    json_object *root = json_object_new_object();
    if (!root) return nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the tokenizer", g->path);
    nemotron_status st = build(g, root, err);
    if (st) {
        json_object_put(root);
        nt_err_prefix(err, "%s: ", g->path);
        return st;
    }
    size_t n;
    const char *text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN, &n);
    *json = text ? nt_alloc(n + 1) : NULL;
    if (*json) {
        memcpy(*json, text, n + 1);
        *len = n;
    }
    json_object_put(root);
    return *json ? NEMOTRON_OK : nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory for the tokenizer", g->path);
}

nemotron_status nt_tokenizer_load_gguf(const char *path, struct nt_tokenizer **out, struct nt_err *err) {
    *out = NULL;
    struct nt_gguf *g;
    nemotron_status st = nt_gguf_open(path, &g, err);
    if (st) return st;
    char *json;
    size_t len;
    st = nt_tokenizer_json_from_gguf(g, &json, &len, err);
    if (!st) {
        char name[4200];
        snprintf(name, sizeof name, "%s: tokenizer.ggml metadata", path);
        st = nt_tokenizer_load_bytes(json, len, name, out, err);
        nt_free(json);
    }
    nt_gguf_close(g);
    return st;
}
