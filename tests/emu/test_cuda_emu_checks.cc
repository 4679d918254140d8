/* test_cuda_emu_checks.cc - tests the emulation itself (tests/emu/cuda_emu.h, cuda_emu.cc): what
 * it promises to catch is caught, so the emulated tests of the CUDA backend cannot pass by
 * accident. Checks that
 *   - nothing starts as zero: a kernel reading fresh cudaMalloc memory, a block's __shared__
 *     array (of a plain kernel and of a template kernel, whose statics gcc treats apart), the
 *     dynamic shared memory, or a local array never written gets the poison, in every block
 *     even after an earlier block wrote its shared memory;
 *   - the pointer checks (release build) stop a kernel that reads through a host malloc pointer,
 *     a freed device buffer, NULL + 0x7000, or stores past the end of a device buffer: the child
 *     process running it dies by abort with a report that names the kernel and the address. In
 *     the ASan build ASan stops the freed buffer, NULL + 0x7000 and the overflow (its report
 *     names the address); a host pointer is valid memory to ASan, so that case is the release
 *     build's alone;
 *   - NT_EMU_FAIL: launch:N leaves the N-th launch (counted through a graph replay) unrun and
 *     every later call failing with cudaErrorIllegalAddress; alloc:N fails the N-th cudaMalloc
 *     once; a malformed value stops the program.
 * Fatal cases run in a forked child whose stderr is read; the NT_EMU_FAIL cases run this program
 * again with the variable set (it is read once per process).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

static int checks, failures, verbose;

static void check(bool ok, const char *what, const std::string &detail = "") {
    checks++;
    if (ok) return;
    failures++;
    printf("FAIL %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
}

static const uint32_t POISON32 = 0x7FFF7FFFu; /* cuda_emu.cc's poison, as one aligned word */

/* ---- kernels --------------------------------------------------------------------------------- */

__global__ void k_copy(const uint32_t *src, uint32_t *dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
__global__ void k_fill(uint32_t *dst, int n, uint32_t mul) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = mul * (uint32_t)i;
}
/* Each block reads its shared array before writing it, then writes it: the next block must
 * read poison again, not this block's values. */
__global__ void k_shared(uint32_t *out) {
    __shared__ uint32_t sh[64];
    int t = threadIdx.x;
    out[blockIdx.x * 64 + t] = sh[t];
    __syncthreads();
    sh[t] = 0x12345678u;
}
template <int N> __global__ void k_shared_t(uint32_t *out) {
    __shared__ uint32_t sh[N];
    int t = threadIdx.x;
    out[blockIdx.x * N + t] = sh[t];
    __syncthreads();
    sh[t] = 0x12345678u;
}
__global__ void k_dyn(uint32_t *out) {
    NT_DYNAMIC_SHARED(uint32_t, sh);
    int t = threadIdx.x;
    out[blockIdx.x * 64 + t] = sh[t];
    __syncthreads();
    sh[t] = 0x12345678u;
}
/* a local array no one wrote: -ftrivial-auto-var-init=pattern fills it with 0xFE bytes */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__global__ void k_local(uint32_t *out, int i) {
    uint32_t v[8];
    out[threadIdx.x] = v[(i + threadIdx.x) & 7];
}
#pragma GCC diagnostic pop

/* ---- device memory ---------------------------------------------------------------------------- */

static uint32_t *dalloc(int n) {
    void *p = NULL;
    if (cudaMalloc(&p, (size_t)n * 4) != cudaSuccess) {
        fprintf(stderr, "test_cuda_emu_checks: cudaMalloc failed\n");
        exit(1);
    }
    return (uint32_t *)p;
}

static bool all_equal(const uint32_t *v, int n, uint32_t want, std::string *first_bad) {
    for (int i = 0; i < n; i++)
        if (v[i] != want) {
            char b[96];
            snprintf(b, sizeof b, "element %d is 0x%08x, not 0x%08x", i, v[i], want);
            *first_bad = b;
            return false;
        }
    return true;
}

static void poison_checks(void) {
    std::string bad;
    float f;
    memcpy(&f, &POISON32, 4);
    check(f != f, "the poison word is a float NaN");
    uint64_t p64 = (uint64_t)POISON32 << 32 | POISON32;
    check((p64 >> 47) != 0 && (p64 >> 47) != 0x1FFFF, "the poison double word is not a canonical address");

    uint32_t *src = dalloc(256), *dst = dalloc(256);
    cudaMemset(dst, 0, 256 * 4);
    NT_LAUNCH(k_copy, 4, 64, src, dst, 256);
    check(all_equal(dst, 256, POISON32, &bad), "a kernel reads fresh cudaMalloc memory as poison", bad);

    for (int launch = 0; launch < 2; launch++) { /* the second launch after the first wrote */
        cudaMemset(dst, 0, 256 * 4);
        NT_LAUNCH(k_shared, 3, 64, dst);
        check(all_equal(dst, 3 * 64, POISON32, &bad), "__shared__ starts as poison in every block", bad);
        cudaMemset(dst, 0, 256 * 4);
        NT_LAUNCH(k_shared_t<64>, 3, 64, dst);
        check(all_equal(dst, 3 * 64, POISON32, &bad), "__shared__ of a template kernel starts as poison in every block",
              bad);
        cudaMemset(dst, 0, 256 * 4);
        NT_LAUNCH_SMEM(k_dyn, 3, 64, 64 * 4, dst);
        check(all_equal(dst, 3 * 64, POISON32, &bad), "dynamic shared memory starts as poison in every block", bad);
    }
    cudaMemset(dst, 0, 256 * 4);
    NT_LAUNCH(k_local, 1, 32, dst, 3);
    check(all_equal(dst, 32, 0xFEFEFEFEu, &bad), "a local array never written holds gcc's pattern", bad);
    cudaFree(src);
    cudaFree(dst);
}

/* ---- fatal cases, in a child ------------------------------------------------------------------ */

/* The parent's side of a child started with pipe fd: everything the child writes, into out,
 * then its wait status. */
static int collect(pid_t pid, int fd[2], std::string *out) {
    close(fd[1]);
    char buf[4096];
    ssize_t got;
    while ((got = read(fd[0], buf, sizeof buf)) > 0) out->append(buf, (size_t)got);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

/* Runs body in a child with stderr captured; returns its wait status. */
static int in_child(void (*body)(void), std::string *err) {
    int fd[2];
    if (pipe(fd)) return perror("pipe"), -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        body();
        _exit(0); /* not stopped: the parent counts this as a miss */
    }
    return collect(pid, fd, err);
}

/* the address the report names ("... at 0x...") */
static uintptr_t reported_address(const std::string &err, const char *marker) {
    size_t at = err.find(marker);
    if (at == std::string::npos) return 0;
    return (uintptr_t)strtoull(err.c_str() + at + strlen(marker), NULL, 16);
}

static uintptr_t expect_lo, expect_hi; /* where the bad address must be */

static void expect_death(const char *what, void (*body)(void), const char *kernel, const char *asan_kind) {
    std::string err;
    int status = in_child(body, &err);
    std::string tail = err.size() > 600 ? err.substr(0, 600) : err;
    if (verbose) printf("%s: the child's stderr:\n%s", what, tail.c_str());
    char where[96];
    snprintf(where, sizeof where, " (expected an address in [%#zx, %#zx))", (size_t)expect_lo, (size_t)expect_hi);
#if defined(NT_EMU_CHECKED)
    (void)asan_kind;
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, what, "the child was not stopped by abort: " + tail);
    check(err.find(std::string("cuda_emu: ") + kernel + ": ") != std::string::npos, what,
          std::string("the report does not name the kernel ") + kernel + ": " + tail);
    uintptr_t a = reported_address(err, " at 0x");
    check(a >= expect_lo && a < expect_hi, what, "the report does not name the address" + std::string(where) + ": " + tail);
#else
    check(err.find(std::string(" in ") + kernel + "(") != std::string::npos, what,
          std::string("ASan's stack does not name the kernel ") + kernel + ": " + tail);
    check(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), what, "the child was not stopped: " + tail);
    check(err.find(asan_kind) != std::string::npos, what, std::string("no ") + asan_kind + " report: " + tail);
    uintptr_t a = reported_address(err, "address 0x");
    check(a >= expect_lo && a < expect_hi, what, "the report does not name the address" + std::string(where) + ": " + tail);
#endif
}

static uint32_t *out_buf;
static const uint32_t *bad_src;
static void read_bad_src(void) { NT_LAUNCH(k_copy, 1, 32, bad_src, out_buf, 32); }
static uint32_t *bad_dst;
static void write_bad_dst(void) { NT_LAUNCH(k_fill, 1, 1, bad_dst, 1, 1u); }

static void pointer_checks(void) {
    out_buf = dalloc(64);
#if defined(NT_EMU_CHECKED)
    uint32_t *host = (uint32_t *)malloc(256);
    memset(host, 0, 256);
    bad_src = host, expect_lo = (uintptr_t)host, expect_hi = expect_lo + 32 * 4;
    expect_death("a kernel reading through a host pointer is stopped", read_bad_src, "k_copy", "");
    free(host);
#endif
    uint32_t *gone = dalloc(64);
    cudaFree(gone);
    bad_src = gone, expect_lo = (uintptr_t)gone, expect_hi = expect_lo + 32 * 4;
    expect_death("a kernel reading a freed device buffer is stopped", read_bad_src, "k_copy", "heap-use-after-free");
    bad_src = (const uint32_t *)(uintptr_t)0x7000, expect_lo = 0x7000, expect_hi = 0x7000 + 32 * 4;
    expect_death("a kernel reading through NULL + 0x7000 is stopped", read_bad_src, "k_copy", "SEGV");
    uint32_t *small = dalloc(16);
    bad_dst = small + 16, expect_lo = (uintptr_t)(small + 16), expect_hi = expect_lo + 4;
    expect_death("a kernel storing past the end of a device buffer is stopped", write_bad_dst, "k_fill", "heap-buffer-overflow");
    cudaFree(small);
    cudaFree(out_buf);
}

/* ---- NT_EMU_FAIL, in this program run again ---------------------------------------------------- */

static void expect_err(cudaError_t got, cudaError_t want, const char *what) {
    char b[64];
    snprintf(b, sizeof b, "returned %d, expected %d", got, want);
    check(got == want, what, b);
}

/* NT_EMU_FAIL=launch:3: an eager launch, then a graph of two launches: the graph's second is the
 * third launch; it does not run, and the context stays failed. */
static void fail_launch_mode(void) {
    uint32_t *a = dalloc(64), *b = dalloc(64), *c = dalloc(64), *d = dalloc(64);
    cudaMemset(a, 0, 256), cudaMemset(b, 0, 256), cudaMemset(c, 0, 256), cudaMemset(d, 0, 256);
    NT_LAUNCH(k_fill, 1, 64, a, 64, 1u);
    check(a[5] == 5, "launch 1 ran");
    expect_err(cudaGetLastError(), cudaSuccess, "no error after launch 1");
    cudaGraph_t g;
    cudaGraphExec_t ge;
    expect_err(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal), cudaSuccess, "capture");
    NT_LAUNCH(k_fill, 1, 64, b, 64, 2u);
    NT_LAUNCH(k_fill, 1, 64, c, 64, 3u);
    expect_err(cudaStreamEndCapture(cudaStreamPerThread, &g), cudaSuccess, "end capture");
    check(b[5] == 0 && c[5] == 0, "a capture runs nothing");
    expect_err(cudaGraphInstantiate(&ge, g, 0), cudaSuccess, "instantiate");
    expect_err(cudaGraphLaunch(ge, cudaStreamPerThread), cudaSuccess, "the faulting graph launch itself");
    check(b[5] == 10, "launch 2 (the graph's first) ran");
    check(c[5] == 0, "launch 3 (the graph's second, the injected fault) did not run");
    expect_err(cudaGetLastError(), cudaErrorIllegalAddress, "cudaGetLastError after the fault");
    expect_err(cudaGetLastError(), cudaErrorIllegalAddress, "cudaGetLastError again (sticky)");
    expect_err(cudaStreamSynchronize(cudaStreamPerThread), cudaErrorIllegalAddress, "cudaStreamSynchronize");
    uint32_t host[4] = {1, 2, 3, 4};
    expect_err(cudaMemcpy(d, host, 16, cudaMemcpyHostToDevice), cudaErrorIllegalAddress, "cudaMemcpy");
    expect_err(cudaMemcpyAsync(host, a, 16, cudaMemcpyDeviceToHost, cudaStreamPerThread), cudaErrorIllegalAddress,
               "cudaMemcpyAsync");
    check(d[0] == 0 && host[0] == 1, "a failed copy copies nothing");
    expect_err(cudaMemset(d, 1, 16), cudaErrorIllegalAddress, "cudaMemset");
    expect_err(cudaMemsetAsync(d, 1, 16, cudaStreamPerThread), cudaErrorIllegalAddress, "cudaMemsetAsync");
    check(d[0] == 0, "a failed memset sets nothing");
    void *p = (void *)1;
    expect_err(cudaMalloc(&p, 64), cudaErrorIllegalAddress, "cudaMalloc");
    check(p == NULL, "a failed cudaMalloc gives NULL");
    expect_err(cudaGraphLaunch(ge, cudaStreamPerThread), cudaErrorIllegalAddress, "cudaGraphLaunch");
    NT_LAUNCH(k_fill, 1, 64, d, 64, 7u);
    check(d[5] == 0, "no launch runs after the fault");
    cudaEvent_t ev;
    expect_err(cudaEventCreate(&ev), cudaErrorIllegalAddress, "cudaEventCreate");
    size_t fb, tb;
    expect_err(cudaMemGetInfo(&fb, &tb), cudaErrorIllegalAddress, "cudaMemGetInfo");
    check(!strcmp(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered (emulated)"),
          "cudaGetErrorString names the illegal address");
    int n = 0;
    expect_err(cudaGetDeviceCount(&n), cudaSuccess, "device queries still answer");
    expect_err(cudaGraphExecDestroy(ge), cudaErrorIllegalAddress, "cudaGraphExecDestroy");
    expect_err(cudaGraphDestroy(g), cudaErrorIllegalAddress, "cudaGraphDestroy");
    expect_err(cudaFree(a), cudaErrorIllegalAddress, "cudaFree");
    cudaFree(b), cudaFree(c), cudaFree(d);
}

/* NT_EMU_FAIL=alloc:2: the second cudaMalloc fails once, as an out-of-memory does. */
static void fail_alloc_mode(void) {
    void *p1 = NULL, *p2 = (void *)1, *p3 = NULL;
    expect_err(cudaMalloc(&p1, 64), cudaSuccess, "cudaMalloc 1");
    expect_err(cudaMalloc(&p2, 64), cudaErrorMemoryAllocation, "cudaMalloc 2 (the injected failure)");
    check(p2 == NULL, "the failed cudaMalloc gives NULL");
    expect_err(cudaGetLastError(), cudaErrorMemoryAllocation, "cudaGetLastError reports the failed cudaMalloc");
    expect_err(cudaGetLastError(), cudaSuccess, "and clears it (not sticky)");
    expect_err(cudaMalloc(&p3, 256), cudaSuccess, "cudaMalloc 3");
    cudaMemset(p3, 0, 256);
    NT_LAUNCH(k_fill, 1, 64, (uint32_t *)p3, 64, 2u);
    check(((uint32_t *)p3)[5] == 10, "launches run after a failed cudaMalloc");
    expect_err(cudaGetLastError(), cudaSuccess, "no error after the launch");
    cudaFree(p1), cudaFree(p3);
}

/* argv0 mode with NT_EMU_FAIL=value: its exit status and output */
static int run_again(const char *mode, const char *value, std::string *out) {
    int fd[2];
    if (pipe(fd)) return perror("pipe"), -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1), dup2(fd[1], 2);
        setenv("NT_EMU_FAIL", value, 1);
        execl("/proc/self/exe", "test_cuda_emu_checks", mode, (char *)NULL);
        _exit(127);
    }
    return collect(pid, fd, out);
}

static void fault_injection(void) {
    std::string out;
    int st = run_again("fail-launch", "launch:3", &out);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "NT_EMU_FAIL=launch:3", out);
    out.clear();
    st = run_again("fail-alloc", "alloc:2", &out);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "NT_EMU_FAIL=alloc:2", out);
    out.clear();
    st = run_again("fail-alloc", "launch:x", &out);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 2 && out.find("NT_EMU_FAIL=launch:x") != std::string::npos,
          "a malformed NT_EMU_FAIL stops the program", out);
}

int main(int argc, char **argv) {
    verbose = argc > 1 && !strcmp(argv[1], "-v"); /* -v: the reports the children printed */
    if (argc > 1 && !verbose) { /* a run with NT_EMU_FAIL set (run_again) */
        if (!strcmp(argv[1], "fail-launch")) fail_launch_mode();
        else if (!strcmp(argv[1], "fail-alloc")) fail_alloc_mode();
        else return fprintf(stderr, "usage: test_cuda_emu_checks\n"), 2;
        return failures ? 1 : 0;
    }
    poison_checks();
    pointer_checks();
    fault_injection();
    printf("%-28s %d checks, %d failed\n", "test_cuda_emu_checks", checks, failures);
    if (checks == 0) fprintf(stderr, "FAIL test_cuda_emu_checks: no check ran\n");
    return failures || checks == 0 ? 1 : 0;
}
