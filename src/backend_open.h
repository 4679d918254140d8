/* backend_open.h - choosing a backend by device name (src/backend_open.c). */
#ifndef NT_BACKEND_OPEN_H
#define NT_BACKEND_OPEN_H

#include "backend.h"

/* Creates the backend `device` names into *out: NULL or "cpu" (n_threads host threads, <= 0:
 * the physical cores), "cuda" (= "cuda:0") or "cuda:N". On failure *out is NULL and err says
 * why: an unknown name, a missing device or a backend this build lacks (UNSUPPORTED), a
 * malformed device number (ARG), no memory (NOMEM). */
nemotron_status nt_backend_open(const char *device, int n_threads, struct nt_backend **out,
                                struct nt_err *err);

#endif /* NT_BACKEND_OPEN_H */
