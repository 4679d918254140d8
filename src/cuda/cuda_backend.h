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

/* Creates the backend on CUDA device `device` (0 = the first). NULL with err filled when there
 * is no such device, it is older than sm_61 (the packed products use dp4a), or out of memory. */
struct nt_backend *nt_cuda_backend_new(int device, struct nt_err *err);

/* The message of the last failed alloc/upload on this backend ("" when none): alloc and upload
 * can only return NULL, so the bytes asked for and the bytes free (cudaMemGetInfo) are kept
 * here for the caller's error message. */
const char *nt_cuda_last_error(struct nt_backend *be);

#ifdef __cplusplus
}
#endif

#endif /* NT_CUDA_BACKEND_H */
