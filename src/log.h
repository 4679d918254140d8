/* log.h - the library's log (nemotron_set_log): the messages that have no caller to return to.
 *
 * nt_log formats one line and hands it to the function the program set, or writes it to stderr
 * as "nemotron: MSG". Errors that a call can report go into its status and message instead.
 */
#ifndef NT_LOG_H
#define NT_LOG_H

#include "nemotron.h"

void nt_log(nemotron_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* NT_LOG_H */
