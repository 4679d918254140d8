/* tokenizer_impl.h - the inside of struct nt_tokenizer, shared by tokenizer_json.c (the fast
 * JSON scanner), tokenizer_load.c (building it from tokenizer.json) and tokenizer.c (encode,
 * decode, streaming). Not for use outside src/text/tokenizer*.c.
 *
 * Everything here is written once by the loader and read-only afterwards: the compiled
 * patterns (PCRE2 code is shareable; match data is per call), the tables and the strings.
 */
#ifndef NT_TOKENIZER_IMPL_H
#define NT_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe.h"
#include "tokenizer.h"

/* ---- the JSON scanner (tokenizer_json.c) ----
 * json-c builds an object per value: ~0.4 s for a 131072-token file, most of it the vocab and
 * merges. So one pass of a strict validator (JSON as serde_json reads it: RFC 8259, UTF-8,
 * nesting <= 128) walks the file and hands model.vocab and model.merges to the loader's own
 * parsers as it meets them; json-c then parses the rest with those two values cut out. */

/* A value's bytes s[start..end); end == 0: absent. */
struct nt_jspan {
    size_t start, end;
};

/* A cursor over the document. */
struct nt_jcur {
    const char *s;
    size_t n, p;
    const char *name; /* for messages */
    struct nt_err *err;
    int failed;             /* a message is set: keep the first */
    nemotron_status status; /* of the failure; 0 means NEMOTRON_ERR_FORMAT */
    char *buf;              /* decoded strings with escapes land here (caller frees) */
    size_t buf_cap;
};

/* What the scanner calls: member() for the value of model.vocab (which 0) or model.merges
 * (which 1), with the cursor at its first byte; it must consume exactly that value, validating
 * it, and return 0, or -1 with the message set (and c->status, c->failed). model_start() when
 * a top-level "model" member begins (a later one replaces what an earlier one gave). */
struct nt_jhooks {
    void *ctx;
    int (*member)(void *ctx, int which, struct nt_jcur *c);
    void (*model_start)(void *ctx);
};

/* Validates the document c->s[0..c->n) and records the spans of the last model.vocab and
 * model.merges. Bad JSON is NEMOTRON_ERR_FORMAT naming the line, column and byte offset. */
nemotron_status nt_json_scan(struct nt_jcur *c, const struct nt_jhooks *h, struct nt_jspan *vocab,
                             struct nt_jspan *merges);

/* Primitives for the hooks; each returns 0, or -1 with a positioned message. */
void nt_jcur_ws(struct nt_jcur *c);
/* The string at the cursor (at '"'), validated: *out points into the source, or into c->buf
 * when it had escapes (valid until the next call). */
int nt_jcur_string(struct nt_jcur *c, const char **out, size_t *len);
/* A number, validated; when is_uint: whether it is a plain non-negative integer, and its value
 * (anything above UINT32_MAX reads as more than UINT32_MAX). */
int nt_jcur_number(struct nt_jcur *c, int *is_uint, uint64_t *v);
/* Any value, validated (depth: its nesting, for the limit). */
int nt_jcur_skip(struct nt_jcur *c, int depth);
/* Sets the "invalid JSON at line L, column C" message for the cursor's position. */
int nt_jcur_fail(struct nt_jcur *c, const char *what);
/* Line and column (1-based) of byte offset off, for messages. */
void nt_json_line_col(const char *s, size_t off, size_t *line, size_t *col);

/* ---- patterns ---- */

/* A compiled pattern as tokenizers builds one for Split, Replace and the like: a regex (PCRE2,
 * translated from Oniguruma's syntax) or a literal string. */
struct nt_rx {
    pcre2_code *code; /* NULL: a literal */
    int jit;          /* code was JIT-compiled */
    char *lit;        /* the literal; for a regex, its source as written (for messages) */
    size_t lit_len;
};

/* ---- the pipeline's components ---- */

enum nt_behavior { NT_REMOVED, NT_ISOLATED, NT_MERGED_PREV, NT_MERGED_NEXT, NT_CONTIGUOUS };

enum nt_pretok_kind {
    NT_PT_SPLIT,    /* Split, Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiter */
    NT_PT_BYTELEVEL /* ByteLevel: optional prefix space and GPT-2 regex; always the last step */
};

struct nt_pretok {
    enum nt_pretok_kind kind;
    struct nt_rx rx; /* Split's pattern; ByteLevel's GPT-2 regex when use_regex */
    enum nt_behavior behavior;
    int invert;
    int add_prefix_space; /* ByteLevel */
    int use_regex;        /* ByteLevel */
};

enum nt_norm_kind { NT_NM_STRIP, NT_NM_REPLACE, NT_NM_PREPEND };

struct nt_norm {
    enum nt_norm_kind kind;
    int left, right; /* Strip */
    struct nt_rx rx; /* Replace */
    char *content;   /* Replace's content, Prepend's prefix */
    size_t content_len;
};

enum nt_dec_kind { NT_DC_BYTELEVEL, NT_DC_BYTEFALLBACK, NT_DC_FUSE, NT_DC_STRIP, NT_DC_REPLACE };

struct nt_dec {
    enum nt_dec_kind kind;
    char strip_char[4]; /* Strip: the character, as UTF-8 */
    int strip_len;
    size_t start, stop; /* Strip: how many leading / trailing ones at most */
    struct nt_rx rx;    /* Replace */
    char *content;
    size_t content_len;
};

struct nt_added {
    const char *text; /* content (into the added arena) */
    uint32_t len;
    int32_t id;
    unsigned char single_word, lstrip, rstrip, normalized, special;
};

/* A byte trie of added-token contents: leftmost-longest matching as aho-corasick's
 * MatchKind::LeftmostLongest finds it. */
struct nt_trie {
    int32_t root[256]; /* child of the root per first byte, -1 none */
    struct nt_tnode {
        int32_t child, sibling;
        int32_t tok; /* index into added[], -1 when no token ends here */
        unsigned char byte;
    } * node;
    int n_node;
    int n_tok; /* tokens in this trie */
};

#define NT_MAX_STEPS 16 /* normalizer / pre-tokenizer / decoder steps after flattening */

/* Per-id facts. */
struct nt_idinfo {
    const char *text; /* as stored: added content, else the vocab key; NULL: no token */
    uint32_t len;
    unsigned char special; /* an added token marked special */
};

struct nt_tokenizer {
    char *name;
    char *arena;       /* vocab keys (stored form) */
    char *raw_arena;   /* vocab keys through the inverse byte map (byte-level only) */
    char *added_arena; /* added token contents */
    int32_t n_ids;     /* 1 + the largest id */
    int32_t n_model;   /* entries of model.vocab */
    struct nt_idinfo *ids;
    struct nt_strmap vocab_text; /* stored form -> id, model vocab only */
    struct nt_strmap added_map;  /* added content -> id */
    struct nt_bpe bpe;           /* bpe.vocab is its own table only when byte-level */
    int bpe_vocab_owned;

    struct nt_added *added;
    int n_added;
    struct nt_trie trie[2]; /* [0]: normalized == false (raw text), [1]: normalized */
    pcre2_code *word_rx;    /* \w of Rust's regex, for single_word; NULL if none needs it */

    struct nt_norm norm[NT_MAX_STEPS];
    int n_norm;
    struct nt_pretok pre[NT_MAX_STEPS];
    int n_pre;
    int32_t *post_ids; /* post-processor ids: [0, n_post_head) before, then after */
    int n_post_head, n_post_tail;
    struct nt_dec dec[NT_MAX_STEPS];
    int n_dec;
    int has_decoder;  /* 0: tokens are joined by spaces (tokenizers without one) */
    size_t detok_cap; /* what nt_detok_cap returns */

    pcre2_general_context *gctx; /* PCRE2 allocates through nt_alloc */
};

/* ---- patterns (tokenizer_regex.c) ---- */

enum nt_rx_kind {
    NT_RX_LITERAL, /* a string, matched as is (tokenizers escapes it into a regex) */
    NT_RX_ONIG,    /* a tokenizer.json regex: Oniguruma syntax, translated */
    NT_RX_PCRE     /* one of ours, already in PCRE2 syntax */
};

/* Compiles a pattern into rx (zeroed first; free with nt_rx_free even after a failure). A
 * regex PCRE2 cannot take is NEMOTRON_ERR_UNSUPPORTED. Errors name `what`. */
nemotron_status nt_rx_compile(struct nt_tokenizer *t, struct nt_rx *rx, const char *pat, size_t len,
                              int kind, const char *what, struct nt_err *err);
void nt_rx_free(struct nt_rx *rx);

/* The matching state of one call (an encode, a decode, a streamed token): PCRE2's match data
 * (one ovector pair) and match context, and the match steps the call may still spend.
 *
 * PCRE2's match limit bounds one match call; a pattern that backtracks over what follows each
 * position (\s*\s*\s*q over a run of spaces) stays under it at every call and still took 3.7 s
 * per KB. So a call gets one budget for all its matches, NT_RX_BUDGET_BASE +
 * NT_RX_BUDGET_PER_BYTE per byte of its text, and each match is charged an upper bound of what
 * it did (nt_rx_find): its step limit starts at NT_RX_FIRST_LIMIT and is quadrupled while PCRE2
 * reports it reached, each attempt charged in full; the text it sees starts as a window of
 * NT_RX_FIRST_WINDOW bytes and is quadrupled while the match reaches the window's end, the
 * bytes of each larger window charged too. The window keeps the cost of one counted step (a
 * possessive repeat scans in one step) to what the match needs to see. That pattern now fails
 * in 0.08 s at 1 KB and 0.5 s at 100 KB, naming the regex. What is left: a pattern that at
 * every position scans to the end of the text in possessive steps ([^q]*[^q]*q over text
 * without q) grows its window to the whole text, paying the text's length per match: the
 * budget stops it after O(sqrt(budget)) matches, each of which may cost the square of the
 * text's length (7 s at 10 KB). */
struct nt_rx_run {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    uint64_t left, budget; /* steps left; what the call started with */
    size_t text_len;       /* the text the budget was made for (for the message) */
};
/* PCRE2's own limit for one match call: a text that one call could match before still can. */
#define NT_RX_BUDGET_BASE 10000000u
/* Measured on the GPT-style patterns of the bundled and fixture tokenizers over texts of 20 KB
 * to 10 MiB (prose, code, CJK, runs of digits, punctuation, letters and white space): at most
 * 64 per byte, a run of digits (one match per digit, each charged NT_RX_FIRST_LIMIT); a 10 MiB
 * run of spaces is charged 2 per byte. The budget is 16 times that most. */
#define NT_RX_BUDGET_PER_BYTE 1024u
#define NT_RX_FIRST_LIMIT 64u
/* The text a match first sees past its start (bytes); grown while the match reaches its end. */
#define NT_RX_FIRST_WINDOW 256u
/* What nt_rx_find uses: NT_RX_FIRST_WINDOW. test_tokenizer sets it (1: every match grows its
 * window from one byte; SIZE_MAX: whole texts, no window) to show the ids do not depend on it. */
extern size_t nt_rx_first_window;
/* nt_rx_find's result when the call's budget is spent (PCRE2's codes are all above it). */
#define NT_RX_OVER_BUDGET (-100000)

/* Sets up r for a call over a text of text_len bytes; NEMOTRON_ERR_NOMEM on failure (r can be
 * freed either way). */
nemotron_status nt_rx_run_init(struct nt_rx_run *r, const struct nt_tokenizer *t, size_t text_len,
                               struct nt_err *err);
void nt_rx_run_free(struct nt_rx_run *r);

/* The first match in s[0..n) starting at or after pos: 1 and [*ms, *me); 0: none; < 0: a
 * PCRE2 error code, or NT_RX_OVER_BUDGET (the call's budget is spent). */
int nt_rx_find(const struct nt_rx *rx, struct nt_rx_run *run, const char *s, size_t n, size_t pos,
               size_t *ms, size_t *me);

/* Successive matches as the onig crate's find_iter yields them (empty matches included, but
 * none right at the end of the previous match). Zero-initialise. */
struct nt_rx_iter {
    size_t pos, last_end;
    int has_last;
};
int nt_rx_next(const struct nt_rx *rx, struct nt_rx_run *run, const char *s, size_t n,
               struct nt_rx_iter *it, size_t *ms, size_t *me);
/* Sets err for nt_rx_find's error rc from matching rx (`what`: where it sits in the file),
 * naming the regex; returns the status (NEMOTRON_ERR_UNSUPPORTED). */
nemotron_status nt_rx_error(int rc, const struct nt_rx *rx, const struct nt_rx_run *run,
                            const char *what, struct nt_err *err);

/* ---- shared by the loader (tokenizer.c) ---- */

/* Runs the normalizer over s[0..n): *out (nt_alloc'd, free with nt_free) gets the result, of
 * *out_len bytes. With no normalizer *out is a copy. run: the calling encode's matching state
 * (its budget), or NULL for a call of its own. */
nemotron_status nt_normalize(const struct nt_tokenizer *t, struct nt_rx_run *run, const char *s,
                             size_t n, char **out, size_t *out_len, struct nt_err *err);

/* The ids and text one token decodes to, before the decoder: NULL when id is a hole. */
static inline const struct nt_idinfo *nt_tok_info(const struct nt_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->ids[id].text ? &t->ids[id] : NULL;
}

#endif /* NT_TOKENIZER_IMPL_H */
