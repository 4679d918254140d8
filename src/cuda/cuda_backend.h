/* cuda_backend.h - the CUDA backend's C entry points (the ops table itself is backend.h's).
 *
 * The backend keeps every resident pointer in device memory of one GPU; forward.c passes them
 * along and never dereferences them. An operation that fails inside a pass (a kernel launch
 * error, an illegal address) records the backend's fault (backend.h: nt_backend.fault) and the
 * backend does nothing more, since a device error leaves the context unusable; the session reports
 * NEMOTRON_ERR_DEVICE and the process runs on.
 */
#ifndef NT_CUDA_BACKEND_H
#define NT_CUDA_BACKEND_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the backend on CUDA device `device` (0 = the first) into *out. On failure *out is NULL
 * and err says why: no such device or no driver, a device older than sm_90 (the build holds
 * sm_90 code and its PTX) (UNSUPPORTED, ARG), or out of memory (NOMEM). */
nemotron_status nt_cuda_backend_new(int device, struct nt_backend **out, struct nt_err *err);

/* How far a packed product may be from the CPU backend's, relative L2 over a position's outputs.
 * Both quantize the activations alike (identical bytes) and use the same scales; the CPU sums
 * each block of 32 columns as 8 four-column integer dots in 8 float chains joined by a tree,
 * CUDA sums the block in integers (exact) and runs one float chain over the blocks
 * (src/cuda/products.cu). Each order is within ~sqrt(nb) roundings of the exact sum of
 * nb <= 128 terms: a few 1e-7 of the row's norm; 1e-5 leaves >10x for cancellation. */
#define NT_CUDA_PACKED_TOL 1e-5

/* For tests: nonzero runs every packed product on products.cu's plain reference kernel (one warp
 * per row and position), whose bits the fast kernels must reproduce. Affects the whole process. */
void nt_cuda_packed_reference(int on);

/* For tests: nonzero runs every plain q8_2f product that takes the tensor cores on products.cu's
 * k_mma_wide, which otherwise runs only where its blocks fill the SMs (long passes), and whose bits
 * k_mma must reproduce. Affects the whole process. */
void nt_cuda_mma_wide_always(int on);

/* For tests: nonzero runs every product of llama.cpp's block types on ggml.cu's plain kernel
 * (k_ggml), whose bits the streaming kernel must reproduce. Affects the whole process. */
void nt_cuda_ggml_reference(int on);

/* For tests and gpu_bench_ops: nonzero runs the plain packed products of 2 .. DM_MAX_N positions
 * (decode.cu's k_decode_multi) on products.cu's k_gemv / k_mma (the path before it), whose bits
 * that kernel must reproduce. Affects the whole process. */
void nt_cuda_multi_reference(int on);

/* For tests: nonzero routes every MoE pass with moe.cu's block kernel (k_moe_route), whose
 * outputs the one-warp router must reproduce bit for bit. Affects the whole process. */
void nt_cuda_route_reference(int on);

#ifdef __cplusplus
}
#endif

#endif /* NT_CUDA_BACKEND_H */
