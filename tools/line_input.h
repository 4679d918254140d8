/* line_input.h - the chat's input: one message at a time from a terminal or a pipe.
 *
 * On a terminal, lines are read through libedit (Debian's libedit: cursor keys, editing,
 * history of this session); from a pipe or a file, plainly, with the prompt on stderr. A line is
 * never cut into two messages: a line longer than LINE_INPUT_MAX is read to its end and
 * reported as too long. A line that starts with three double quotes opens a block that runs
 * until a line that ends with three double quotes; the block is one message, its lines joined
 * with newlines.
 */
#ifndef NEMOTRON_LINE_INPUT_H
#define NEMOTRON_LINE_INPUT_H

#include <stddef.h>

/* The longest message read: 4 MiB is far more text than the largest context (262144 positions,
 * a few bytes each) can hold, so nothing usable is refused, and a runaway input (a binary file
 * on stdin) is not held in memory whole. */
#define LINE_INPUT_MAX ((size_t)4 << 20)

enum line_status {
    LINE_OK,              /* a message: *text, *len */
    LINE_EOF,             /* end of input */
    LINE_INTERRUPTED,     /* Ctrl-C while waiting for input */
    LINE_TOO_LONG,        /* a message longer than LINE_INPUT_MAX, read to its end and dropped */
    LINE_UNTERMINATED     /* the input ended inside a block; the block is dropped */
};

struct line_input {
    int tty;              /* stdin is a terminal: libedit reads it */
    char *line;           /* the current physical line */
    size_t line_cap;
    char *msg;            /* the message being assembled */
    size_t msg_len, msg_cap;
};

void line_input_open(struct line_input *in);
void line_input_close(struct line_input *in);
/* Reads the next message; on LINE_OK *text (NUL-terminated, valid until the next call) and *len.
 * The message may hold NUL bytes (len says how long it is). */
enum line_status line_input_read(struct line_input *in, const char **text, size_t *len);

#endif /* NEMOTRON_LINE_INPUT_H */
