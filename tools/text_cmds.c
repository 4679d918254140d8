/* text_cmds.c - `nemotron tokenize` and `nemotron template`: the text side without a model.
 *
 *   nemotron tokenize --tokenizer FILE [--decode]     stdin text -> JSON array of ids, or back
 *                                                     (--decode also takes generate's 1,2,3)
 *   nemotron template --messages FILE.json [--tools FILE.json] [--no-think] [--no-generation-prompt]
 *
 * Output is written only after all input was read and processed, so a failure prints nothing
 * on stdout.
 */
#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Files these commands read whole: far beyond any prompt or conversation, small enough that a
 * mistaken path to a model file is refused instead of read. */
#define CLI_MAX_INPUT (256u << 20)

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "nemotron: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= CLI_MAX_INPUT) {
                fprintf(stderr, "nemotron: %s: larger than %u MiB\n", path, CLI_MAX_INPUT >> 20);
                free(buf);
                buf = NULL;
                break;
            }
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, "nemotron: %s: read error\n", path);
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

static int load_tokenizer(const char *path, nemotron_tokenizer **t) {
    nemotron_status st = nemotron_tokenizer_load(path, t);
    if (st) return cli_fail("loading the tokenizer", nemotron_tokenizer_errmsg(*t), st);
    return 0;
}

static int encode_stdin(nemotron_tokenizer *t) {
    size_t len, n = 0;
    char *text = cli_read_file("-", &len);
    if (!text) return 1;
    nemotron_status st = nemotron_tokenize(t, text, len, 1, NULL, 0, &n);
    int32_t *ids = st ? NULL : malloc((n ? n : 1) * sizeof *ids);
    if (!st && !ids) st = NEMOTRON_ERR_NOMEM;
    if (!st) st = nemotron_tokenize(t, text, len, 1, ids, n, &n);
    free(text);
    if (st) {
        free(ids);
        return cli_fail("tokenize", ids || st != NEMOTRON_ERR_NOMEM ? nemotron_tokenizer_last_error()
                                                                 : "out of memory for the ids", st);
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", (int)ids[i]);
    printf("]\n");
    free(ids);
    return 0;
}

/* The ids in either form the command prints (generate's 1,2,3 or tokenize's [1, 2, 3]). */
static int decode_stdin(nemotron_tokenizer *t) {
    size_t len;
    char *text = cli_read_file("-", &len);
    if (!text) return 1;
    char err[160];
    int n = 0, rc = 0;
    int32_t *ids = strlen(text) == len ? cli_parse_ids(text, nemotron_tokenizer_vocab_size(t), &n, err, sizeof err)
                                       : NULL;
    if (strlen(text) != len) snprintf(err, sizeof err, "stdin holds a NUL byte");
    free(text);
    if (!ids) {
        fprintf(stderr, "nemotron: tokenize --decode: stdin is not a list of token ids (1,2,3 or [1, 2, 3]): %s\n", err);
        return 2;
    }
    size_t out_len = 0;
    nemotron_status st = nemotron_detokenize(t, ids, (size_t)n, 0, NULL, 0, &out_len);
    char *out = (!rc && !st) ? malloc(out_len + 1) : NULL;
    if (!rc && !st && !out) st = NEMOTRON_ERR_NOMEM;
    if (!rc && !st) st = nemotron_detokenize(t, ids, (size_t)n, 0, out, out_len + 1, &out_len);
    if (!rc && st) rc = cli_fail("tokenize --decode", nemotron_tokenizer_last_error(), st);
    if (!rc) fwrite(out, 1, out_len, stdout);
    free(out);
    free(ids);
    return rc;
}

int cmd_tokenize(const struct args *a) {
    if (!a->tokenizer) {
        fprintf(stderr, "nemotron: tokenize: --tokenizer FILE is required\n");
        return 2;
    }
    nemotron_tokenizer *t = NULL;
    int rc = load_tokenizer(a->tokenizer, &t);
    if (!rc) rc = a->decode ? decode_stdin(t) : encode_stdin(t);
    nemotron_tokenizer_free(t);
    return rc;
}

int cmd_template(const struct args *a) {
    if (!a->messages) {
        fprintf(stderr, "nemotron: template: --messages FILE.json is required\n");
        return 2;
    }
    size_t len;
    char *messages = cli_read_file(a->messages, &len), *tools = NULL;
    if (!messages) return 1;
    if (a->tools && !(tools = cli_read_file(a->tools, &len))) {
        free(messages);
        return 1;
    }
    nemotron_chat_options o = nemotron_chat_default_options();
    o.enable_thinking = !a->no_think;
    o.add_generation_prompt = !a->no_generation_prompt;
    char *out = NULL, err[1024];
    nemotron_status st = nemotron_chat_render(messages, tools, &o, &out, err, sizeof err);
    free(messages);
    free(tools);
    if (st) return cli_fail("template", err, st);
    fputs(out, stdout);
    nemotron_free(out);
    return 0;
}
