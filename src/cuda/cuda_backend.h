/* cuda_backend.h - the CUDA backend's C entry points (the ops table itself is backend.h's).
 *
 * The backend keeps every resident pointer in device memory of one GPU; forward.c passes them
 * along and never dereferences them. Operations that fail inside a pass (a kernel launch error,
 * an illegal address) abort with a message: the ops table has no error channel, and a device
 * error leaves the context unusable anyway.
 */
#ifndef NT_CUDA_BACKEND_H
#define NT_CUDA_BACKEND_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the backend on CUDA device `device` (0 = the first) into *out. On failure *out is NULL
 * and err says why: no such device or no driver, a device older than sm_61 (the packed products
 * use dp4a) (UNSUPPORTED, ARG), or out of memory (NOMEM). */
nemotron_status nt_cuda_backend_new(int device, struct nt_backend **out, struct nt_err *err);

#ifdef __cplusplus
}
#endif

#endif /* NT_CUDA_BACKEND_H */
