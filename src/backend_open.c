/* backend_open.c - turns a device name ("cpu", "cuda", "cuda:N") into a backend.
 *
 * The one place that knows which backends this build holds: the CUDA backend is compiled in
 * when the Makefile found nvcc (it defines NT_HAVE_CUDA for this file only), so model and
 * engine code never test for it. Names are parsed strictly: anything else is an error that
 * lists what this build accepts.
 */
#include "backend_open.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef NT_HAVE_CUDA
#include "cuda/cuda_backend.h"
#define DEVICES_AVAILABLE "cpu, cuda, cuda:N"
#else
#define DEVICES_AVAILABLE "cpu"
#endif

/* 1 when `device` names a CUDA device ("cuda" or "cuda:..."), malformed or not. */
static int is_cuda_name(const char *device) {
    return device && strncmp(device, "cuda", 4) == 0 && (device[4] == '\0' || device[4] == ':');
}

nemotron_status nt_backend_open(const char *device, int n_threads, struct nt_backend **out,
                                struct nt_err *err) {
    *out = NULL;
    if (!device || strcmp(device, "cpu") == 0) {
        *out = nt_cpu_backend_new(n_threads);
        return *out ? NEMOTRON_OK
                    : nt_fail(err, NEMOTRON_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    if (!is_cuda_name(device))
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "device '%s': unknown (this build has: " DEVICES_AVAILABLE ")", device);
    long index = 0;
    if (device[4] == ':') {
        char *end;
        errno = 0;
        index = strtol(device + 5, &end, 10);
        if (device[5] < '0' || device[5] > '9' || *end != '\0' || errno || index > 1024)
            return nt_fail(err, NEMOTRON_ERR_ARG,
                           "device '%s': expected cuda:N with N a device number", device);
    }
#ifdef NT_HAVE_CUDA
    return nt_cuda_backend_new((int)index, out, err);
#else
    return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                   "device '%s' is not available in this build (available: " DEVICES_AVAILABLE
                   "; build with nvcc on the PATH or in /usr/local/cuda for CUDA)", device);
#endif
}
