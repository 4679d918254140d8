/* line_input.c - reading the chat's messages (line_input.h says what a message is).
 *
 * It owns the physical-line readers (libedit on a terminal, getc from a pipe) and the assembly
 * of three-quote blocks; it does not judge the text (chat.c checks UTF-8 and commands).
 */
#include "line_input.h"

#include <editline/readline.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generation.h"

static const char block_mark[] = "\"\"\"";
#define BLOCK_MARK_LEN (sizeof block_mark - 1)

void line_input_open(struct line_input *in) {
    memset(in, 0, sizeof *in);
    in->tty = isatty(STDIN_FILENO);
    if (in->tty) using_history();
}

void line_input_close(struct line_input *in) {
    free(in->line);
    free(in->msg);
    memset(in, 0, sizeof *in);
}

/* Appends n bytes to buf (growing it); -1 when that would pass LINE_INPUT_MAX or memory ran out. */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n > LINE_INPUT_MAX) return -1;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *q = realloc(*buf, c);
        if (!q) return -1;
        *buf = q;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

/* One physical line, without its line end, into in->line / *len. */
static enum line_status read_physical(struct line_input *in, const char *prompt, size_t *len) {
    *len = 0;
    if (in->tty) {
        /* the blank line before a prompt is printed apart: libedit redraws a prompt holding a
         * newline twice */
        if (prompt[0] == '\n') {
            fputc('\n', stdout);
            fflush(stdout);
            prompt++;
        }
        char *l = readline(prompt);
        if (!l) return cli_interrupted ? LINE_INTERRUPTED : LINE_EOF;
        size_t n = strlen(l);
        int bad = append(&in->line, len, &in->line_cap, l, n);
        free(l);
        if (in->line) in->line[*len] = 0;
        return bad ? LINE_TOO_LONG : LINE_OK;
    }
    fputs(prompt, stderr);
    fflush(stderr);
    int too_long = 0, c, any = 0;
    char chunk[4096];
    size_t k = 0;
    for (;;) {
        c = getc(stdin);
        if (c == EOF) {
            if (ferror(stdin) && errno == EINTR && cli_interrupted) {
                clearerr(stdin);
                return LINE_INTERRUPTED;
            }
            break;
        }
        any = 1;
        if (c == '\n') break;
        chunk[k++] = (char)c;
        if (k == sizeof chunk) {
            /* past the limit the rest of the line is read and dropped, never made a new line */
            if (!too_long && append(&in->line, len, &in->line_cap, chunk, k)) too_long = 1;
            k = 0;
        }
    }
    if (!too_long && append(&in->line, len, &in->line_cap, chunk, k)) too_long = 1;
    if (!any) return LINE_EOF;
    if (too_long) return LINE_TOO_LONG;
    if (*len && in->line[*len - 1] == '\r') in->line[--*len] = 0;   /* a CRLF line end */
    return LINE_OK;
}

static int ends_with_mark(const char *s, size_t n) {
    return n >= BLOCK_MARK_LEN && !memcmp(s + n - BLOCK_MARK_LEN, block_mark, BLOCK_MARK_LEN);
}

enum line_status line_input_read(struct line_input *in, const char **text, size_t *len) {
    size_t n;
    in->msg_len = 0;
    enum line_status st = read_physical(in, "\n> ", &n);
    if (st != LINE_OK) return st;
    int block = n >= BLOCK_MARK_LEN && !memcmp(in->line, block_mark, BLOCK_MARK_LEN);
    if (!block) {
        if (append(&in->msg, &in->msg_len, &in->msg_cap, in->line ? in->line : "", n)) return LINE_TOO_LONG;
    } else {
        /* the first line after the opening mark; a block may also close on its first line */
        const char *rest = in->line + BLOCK_MARK_LEN;
        size_t rn = n - BLOCK_MARK_LEN;
        int closed = ends_with_mark(rest, rn);
        if (closed) rn -= BLOCK_MARK_LEN;
        int bad = append(&in->msg, &in->msg_len, &in->msg_cap, rest, rn);
        int lines = rn > 0;   /* the opening line's text, when there is some, is the first line */
        while (!closed) {
            st = read_physical(in, "... ", &n);
            if (st == LINE_EOF) return LINE_UNTERMINATED;
            if (st == LINE_TOO_LONG) {
                bad = 1;
                continue;
            }
            if (st != LINE_OK) return st;
            closed = ends_with_mark(in->line, n);
            if (closed) n -= BLOCK_MARK_LEN;
            if (closed && n == 0) break;   /* a closing mark on its own line adds no line */
            /* lines are joined by one newline: none before the first line of the block */
            if (!bad && lines++) bad = append(&in->msg, &in->msg_len, &in->msg_cap, "\n", 1);
            if (!bad) bad = append(&in->msg, &in->msg_len, &in->msg_cap, in->line, n);
        }
        if (bad) return LINE_TOO_LONG;
    }
    if (!in->msg && append(&in->msg, &in->msg_len, &in->msg_cap, "", 0)) return LINE_TOO_LONG;
    if (in->tty && in->msg_len && strlen(in->msg) == in->msg_len) add_history(in->msg);
    *text = in->msg;
    *len = in->msg_len;
    return LINE_OK;
}
