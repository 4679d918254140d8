/* log.c - the library's log: nemotron_set_log's function, or stderr by default.
 *
 * Owns the process-wide log setting (the function and its user pointer). A message is formatted
 * into a fixed buffer on the stack: nt_log must work where allocating is not allowed (inside a
 * pass, or just before an abort after memory ran out).
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static nemotron_log_fn log_fn;
static void *log_user;

void nemotron_set_log(nemotron_log_fn fn, void *user) {
    log_fn = fn;
    log_user = fn ? user : NULL;
}

void nt_log(nemotron_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap); /* a longer message is cut: it is one line of a log */
    va_end(ap);
    if (log_fn) log_fn(level, msg, log_user);
    else fprintf(stderr, "nemotron: %s\n", msg);
}
