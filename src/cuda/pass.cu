/* pass.cu - the CUDA backend's pass programs: begin_pass and end_pass, the fingerprint every
 * operation adds itself to, CUDA graph capture and replay, and the per-operation profile.
 *
 * PASS PROGRAMS. forward.c calls the same operations with the same arguments for every pass of
 * one session with equal n and want (DESIGN.md: "a pass is a fixed program"); only pos0 and the
 * tokens change, and those the kernels read from the scratch. So the first pass of a kind runs
 * eagerly, the second is captured into a CUDA graph as it runs, and later ones replay the
 * graph: begin_pass writes meta and tokens, every operation returns at once after adding its
 * arguments to a fingerprint, end_pass launches the graph. The fingerprint is checked against
 * the captured one: a pass whose program changed is a broken invariant, recorded as the
 * backend's fault rather than computed with stale buffers. One launch per pass instead of ~600
 * (Nemotron-3-Nano) removes the launch overhead that otherwise bounds decoding. The state is per
 * host thread: a session runs a pass on one thread.
 *
 * REHEARSALS (nt_pass.rehearse). Capturing costs the host 0.3 - 1 ms a kind on the demo model,
 * paid in the middle of decoding; a session instead rehearses the kinds it expects while the device
 * runs its prompt's pass (src/engine/rehearsal.c): the program is captured (thread-local capture
 * mode, on the thread's stream) and instantiated without launching, and the kind's first pass
 * replays it, its operations adding to the fingerprint as a replay's do; should the fingerprints
 * differ (a broken contract), nothing has run: the program is dropped and end_pass returns 0, and
 * forward.c runs the pass again, eagerly. An operation whose first use makes a setup (an
 * allocation and a wait: the expert tables) declines a rehearsal instead. The program slots are
 * shared by the threads of all sessions (ops.cuh, pass_graph: held, rehearsing).
 *
 * The environment, for development: NEMOTRON_CUDA_GRAPHS=0 runs every pass eagerly, =log prints
 * each capture and rehearsal with its cost (NEMOTRON_REHEARSE, rehearsal.c, sets where sessions
 * rehearse).
 */
#include "ops.cuh"
#include "products.cuh"

#include <stdarg.h>
#include <time.h>

/* MODE_REHEARSE captures without launching; MODE_SKIP, like MODE_REPLAY, only fingerprints (a
 * rehearsal of a kind already recorded, or under NEMOTRON_CUDA_GRAPHS=0). */
enum pass_mode { MODE_NONE, MODE_EAGER, MODE_CAPTURE, MODE_REPLAY, MODE_REHEARSE, MODE_SKIP };
struct pass_run {
    enum pass_mode mode;
    struct pass_graph *g;
    uint64_t print;
    enum cuda_op op; /* the operation running now, for fault messages */
    bool declined;   /* an operation of the rehearsal declined it (pass_decline) */
    double t0_ms;    /* when the pass began (a capture's or a rehearsal's recording is one-off) */
};
/* The thread's seconds recording programs: captures and rehearsals (be_one_off_seconds). */
static thread_local double one_off_s;
static thread_local struct pass_run cur;

thread_local cudaStream_t nt_stream = cudaStreamPerThread;

/* BRANCHES (backend.h, ops.branch): in a pass of one position a MoE layer's shared expert runs on
 * the thread's side stream beside the route and the routed experts, which at one position are
 * chains of latency (docs/PERF.md: 32 us for 31 MB) that leave the memory idle. A fork event lets
 * the side stream start after the operations before the branch, a join event makes the main
 * stream wait for it before the next operation; captured, they are the graph's edges. Longer
 * passes run their branches in order: their products share the pass scratch's quantized rows.
 * NT_SIDE_STREAM=0 at build time: no branch runs beside (to compare). The side stream and the
 * events are made by the thread's first pass (outside any capture), kept for the thread's life
 * and destroyed when it ends (a server's worker threads come and go). */
#ifndef NT_SIDE_STREAM
#define NT_SIDE_STREAM 1
#endif
struct side_stream {
    cudaStream_t side = NULL;
    cudaEvent_t fork = NULL, join = NULL;
    int device = -1;
    bool open = false; /* a branch of the pass now is on the side stream */
    void release() {
        if (side) cudaStreamDestroy(side);
        if (fork) cudaEventDestroy(fork);
        if (join) cudaEventDestroy(join);
        side = NULL;
        fork = join = NULL;
    }
    ~side_stream() { release(); }
};
static thread_local side_stream br;

static void make_side_stream(struct cuda_backend *b) {
    struct nt_backend *be = &b->base;
    if (!NT_SIDE_STREAM || (br.side && br.device == b->device)) return;
    br.release(); /* another device's, or an unfinished one */
    if (CK(be, cudaStreamCreateWithFlags(&br.side, cudaStreamNonBlocking)) &&
        CK(be, cudaEventCreateWithFlags(&br.fork, cudaEventDisableTiming)) &&
        CK(be, cudaEventCreateWithFlags(&br.join, cudaEventDisableTiming)))
        br.device = b->device;
    else
        br.release();
}

void be_branch(struct nt_backend *be, const struct nt_pass *p, enum nt_branch what) {
    OP_START(be, OP_BRANCH, (uint64_t)what, (uint64_t)p->n);
    if (!NT_SIDE_STREAM || p->n != 1 || !br.side) return;
    switch (what) {
    case NT_BRANCH_OPEN:
        if (CK(be, cudaEventRecord(br.fork, cudaStreamPerThread)) && CK(be, cudaStreamWaitEvent(br.side, br.fork, 0))) {
            nt_stream = br.side;
            br.open = true;
        }
        break;
    case NT_BRANCH_CLOSE:
        nt_stream = cudaStreamPerThread;
        break;
    case NT_BRANCH_JOIN:
        if (br.open) {
            CK(be, cudaEventRecord(br.join, br.side)) && CK(be, cudaStreamWaitEvent(cudaStreamPerThread, br.join, 0));
            br.open = false;
        }
        break;
    }
}

static const char *const op_names[] = {
    "(no operation)", "embed", "rmsnorm", "add_rmsnorm", "matmul", "mamba_conv", "mamba_scan", "mamba_gated_norm",
    "attention", "moe_route", "moe_experts", "argmax", "begin_pass", "end_pass", "to_host", "memory", "branch"};

const char *op_now(void) { return op_names[cur.op]; }

bool pass_open(void) { return cur.mode != MODE_NONE; }

bool pass_rehearsing(void) { return cur.mode == MODE_REHEARSE; }

void pass_decline(void) { cur.declined = true; }

size_t be_pass_scratch_bytes(struct nt_backend *be, int64_t max_cols, int n) {
    return META_BYTES + tok_bytes(n) + (size_t)(n > 0 ? n : 0) * pk_qx_stride(max_cols);
}

static uint64_t mix64(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

uint64_t bytes_print(const void *p, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = mix64(h, ((const uint8_t *)p)[i]);
    return h;
}

/* KNOCK-OUTS (NEMOTRON_CUDA_KNOCKOUT, a development aid for timing, never for results): the named
 * operations are left out of every captured or rehearsed program, so the replayed passes run
 * without them and `nemotron bench` times a step less those operations in place (their share of
 * the step with everything else overlapping as it does), where the profile and ncu time each
 * alone (docs/PERF.md, session 22: the account of a decode step this way). Names are op_names',
 * joined by '+' (dev/cuda/ab.sh's NAME:VAR=VAL splits at commas); "matmul:RxC" names the products
 * of one shape. Only operations that write floats can be left out: a stale or unwritten float is
 * harmless to the rest (the route picks valid experts from any scores, NaN included), a stale
 * expert index or token (moe_route, argmax) is not. The logits a knocked-out pass leaves are an
 * earlier pass's (the first run of each kind is eager, whole), so the session's check of them
 * passes; were they degenerate, it would fail the run (NEMOTRON_ERR_NUMERIC), never time garbage.
 * The outputs are wrong: the program says so once. */
#define KNOCKOUT_MAX 16
struct knockout {
    enum cuda_op op;
    uint64_t rows, cols; /* matmul:RxC; 0: every product */
};
static int knockouts_of(struct knockout *k) {
    const char *env = getenv("NEMOTRON_CUDA_KNOCKOUT");
    int n = 0;
    char name[64];
    for (const char *p = env; p && *p && n < KNOCKOUT_MAX;) {
        size_t len = strcspn(p, "+");
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        p += len + (p[len] == '+');
        unsigned long long r = 0, c = 0;
        char *shape = strchr(name, ':');
        if (shape) {
            *shape++ = 0;
            if (sscanf(shape, "%llux%llu", &r, &c) != 2) {
                fprintf(stderr, "nemotron: NEMOTRON_CUDA_KNOCKOUT: '%s': a shape is ROWSxCOLS\n", shape);
                continue;
            }
        }
        int op = -1;
        for (int i = OP_EMBED; i <= OP_ARGMAX; i++)
            if (!strcmp(name, op_names[i])) op = i;
        if (op < 0 || op == OP_ROUTE || op == OP_ARGMAX || (shape && op != OP_MATMUL)) {
            fprintf(stderr, "nemotron: NEMOTRON_CUDA_KNOCKOUT: '%s' is not an operation that can be left out\n", name);
            continue;
        }
        k[n++] = {(enum cuda_op)op, r, c};
    }
    if (n) fprintf(stderr, "nemotron: NEMOTRON_CUDA_KNOCKOUT: %d operation(s) left out of replayed passes: "
                           "timing only, the outputs are wrong\n", n);
    return n;
}
static bool knocked_out(enum cuda_op op, const uint64_t *v, int nv) {
    static struct knockout k[KNOCKOUT_MAX];
    static const int n = knockouts_of(k); /* read once, thread-safe (a function-local static) */
    for (int i = 0; i < n; i++)
        if (k[i].op == op && (!k[i].rows || (op == OP_MATMUL && nv >= 5 && v[3] == k[i].rows && v[4] == k[i].cols)))
            return true;
    return false;
}

bool op_start(struct nt_backend *be, enum cuda_op op, const uint64_t *v, int nv) {
    cur.op = op;
    if (FAULTED(be)) return true;
    uint64_t h = mix64(cur.print, (uint64_t)op);
    for (int i = 0; i < nv; i++) h = mix64(h, v[i]);
    cur.print = h;
    return cur.mode == MODE_REPLAY || cur.mode == MODE_SKIP || cur.declined ||
           ((cur.mode == MODE_CAPTURE || cur.mode == MODE_REHEARSE) && knocked_out(op, v, nv));
}

/* ---- the profile --------------------------------------------------------------------------- */

#define PROF_MAX 256
struct prof_row {
    char label[96];
    double ms;
    long calls;
};
static struct prof_row prof_rows[PROF_MAX];
static int prof_n;
static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;

op_timer::op_timer(struct nt_backend *be, const char *fmt, ...) : on(cb(be)->profile && cur.mode == MODE_EAGER) {
    if (!on) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(label, sizeof label, fmt, ap);
    va_end(ap);
    /* a development aid: a failing event call just ends the timing */
    on = cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess &&
         cudaEventRecord(t0, ST) == cudaSuccess;
}

op_timer::~op_timer() {
    if (!on) return;
    float ms = 0;
    bool timed = cudaEventRecord(t1, ST) == cudaSuccess && cudaEventSynchronize(t1) == cudaSuccess &&
                 cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess;
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    if (!timed) return;
    pthread_mutex_lock(&prof_lock);
    int i = 0;
    while (i < prof_n && strcmp(prof_rows[i].label, label)) i++;
    if (i < PROF_MAX) {
        if (i == prof_n) snprintf(prof_rows[prof_n++].label, sizeof label, "%s", label);
        prof_rows[i].ms += ms;
        prof_rows[i].calls++;
    }
    pthread_mutex_unlock(&prof_lock);
}

const char *dtype_name(int dt) {
    return dt == NT_DTYPE_Q8_2F ? "q8_2f" : dt == NT_DTYPE_Q4TP ? "q4tp" : dt == NT_DTYPE_BF16 ? "bf16"
         : dt == NT_DTYPE_F16 ? "f16" : "f32";
}

static int prof_cmp(const void *a, const void *b) {
    double x = ((const struct prof_row *)a)->ms, y = ((const struct prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

void prof_print(void) {
    if (!prof_n) return;
    qsort(prof_rows, prof_n, sizeof prof_rows[0], prof_cmp);
    double total = 0;
    for (int i = 0; i < prof_n; i++) total += prof_rows[i].ms;
    fprintf(stderr, "cuda profile: %.3f ms in %d kinds of operation\n%10s %8s %10s  %s\n", total, prof_n,
            "ms", "calls", "us/call", "operation");
    for (int i = 0; i < prof_n; i++)
        fprintf(stderr, "%10.3f %8ld %10.2f  %s\n", prof_rows[i].ms, prof_rows[i].calls,
                1000.0 * prof_rows[i].ms / prof_rows[i].calls, prof_rows[i].label);
    prof_n = 0;
}

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* ---- programs ------------------------------------------------------------------------------ */

void drop_graphs_of(struct cuda_backend *b, const void *scratch) {
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < MAX_GRAPHS; i++) {
        struct pass_graph *g = &b->graphs[i];
        if (g->scratch != scratch) continue;
        if (g->exec) cudaGraphExecDestroy(g->exec);
        memset(g, 0, sizeof *g);
    }
    pthread_mutex_unlock(&b->lock);
}

/* The program slot of (scratch, n, want, snap, input kind, mtp, kept hidden rows): found, or a
 * fresh one (a free slot, else the least recently used that no thread holds or rehearses, whose
 * graph is destroyed); NULL when every slot is held (a pass then runs eagerly). b->lock held. */
static struct pass_graph *graph_slot(struct cuda_backend *b, const struct nt_pass *p) {
    struct pass_graph *g = NULL, *lru = NULL;
    for (int i = 0; i < MAX_GRAPHS && !g; i++) {
        struct pass_graph *c = &b->graphs[i];
        if (c->scratch == p->scratch && c->n == p->n && c->want == p->want && c->snap == !!p->snap &&
            c->embd == (p->embd != NULL) && c->mtp == !!p->mtp && c->keep == (p->hidden_out != NULL))
            g = c;
        else if (!c->held && !c->rehearsing &&
                 (!lru || !c->scratch || (lru->scratch && c->used < lru->used)))
            lru = c;
    }
    if (!g) {
        if (!lru) return NULL;
        g = lru;
        if (g->exec) cudaGraphExecDestroy(g->exec);
        memset(g, 0, sizeof *g);
        g->scratch = p->scratch;
        g->n = p->n;
        g->want = p->want;
        g->snap = !!p->snap;
        g->embd = p->embd != NULL;
        g->mtp = !!p->mtp;
        g->keep = p->hidden_out != NULL;
    }
    g->used = ++b->clock;
    return g;
}

double be_one_off_seconds(struct nt_backend *be) {
    (void)be;
    return one_off_s;
}

/* The rehearsal's end: the slot gets its program (exec, or NULL: none) and is free again. */
static void release_rehearsal(struct cuda_backend *b, struct pass_graph *g, cudaGraphExec_t exec) {
    pthread_mutex_lock(&b->lock);
    if (exec) {
        g->exec = exec;
        g->print = cur.print;
        g->rehearsed = 1;
    }
    g->rehearsing = 0;
    pthread_mutex_unlock(&b->lock);
}

/* A rehearsal (nt_pass.rehearse): the kind's program captured and instantiated, not launched,
 * unless the kind already has one, a pass of it is running on another thread, another rehearsal
 * records it (or graphs are off): then the operations only fingerprint. The meta and tokens are
 * not written: the device may still be running a pass that reads them, and the kind's passes
 * write their own. */
static void begin_rehearsal(struct cuda_backend *b, const struct nt_pass *p) {
    struct nt_backend *be = &b->base;
    cur.mode = MODE_SKIP;
    pthread_mutex_lock(&b->lock);
    struct pass_graph *g = b->no_graphs ? NULL : graph_slot(b, p);
    bool record = g && !g->exec && !g->held && !g->rehearsing;
    if (record) g->rehearsing = 1;
    pthread_mutex_unlock(&b->lock);
    if (!record) return;
    cur.g = g;
    cur.t0_ms = wall_ms();
    if (CK(be, cudaStreamBeginCapture(ST, cudaStreamCaptureModeThreadLocal)))
        cur.mode = MODE_REHEARSE;
    else
        release_rehearsal(b, g, NULL);
}

static void end_rehearsal(struct nt_backend *be, struct pass_graph *g) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (CK(be, cudaStreamEndCapture(ST, &graph))) {
        if (!cur.declined && !CK(be, cudaGraphInstantiate(&exec, graph, 0))) exec = NULL;
        cudaGraphDestroy(graph);
    }
    if (cb(be)->log_graphs)
        fprintf(stderr, "cuda graph: rehearsed n=%d want=%d snap=%d embd=%d mtp=%d keep=%d%s: %.3f ms\n", g->n,
                g->want, g->snap, g->embd, g->mtp, g->keep, cur.declined ? " (declined: a setup is missing)" : "",
                wall_ms() - cur.t0_ms);
    release_rehearsal(cb(be), g, exec);
}

/* The end of a pass's hold on its slot (be_begin_pass). */
static void release_slot(struct cuda_backend *b, struct pass_graph *g) {
    if (!g) return;
    pthread_mutex_lock(&b->lock);
    g->held = 0;
    pthread_mutex_unlock(&b->lock);
}

void be_begin_pass(struct nt_backend *be, const struct nt_pass *p) {
    struct cuda_backend *b = cb(be);
    cur.mode = MODE_NONE;
    cur.g = NULL;
    cur.print = 0;
    cur.declined = false;
    cur.op = OP_BEGIN_PASS;
    if (FAULTED(be)) return;
    if (p->n <= 0 || !p->scratch) return cuda_fault(be, "begin_pass: a pass needs positions and its scratch");
    nt_stream = cudaStreamPerThread;
    br.open = false;
    if (!CK(be, cudaSetDevice(b->device))) return;
    make_side_stream(b);
    if (p->rehearse) return begin_rehearsal(b, p);
    /* pageable sources: each copy returns once the bytes are staged, so nothing here outlives the
     * call; stream order puts them before the pass's kernels */
    struct pass_meta m = {p->pos0, p->n};
    if (!CK(be, cudaMemcpyAsync(p->scratch, &m, sizeof m, cudaMemcpyHostToDevice, ST))) return;
    if (p->tokens && !CK(be, cudaMemcpyAsync((uint8_t *)p->scratch + META_BYTES, p->tokens,
                                             (size_t)p->n * sizeof(int32_t), cudaMemcpyHostToDevice, ST)))
        return;
    /* the kind's program: replayed (a rehearsed one is checked by its first pass as it replays,
     * be_end_pass), captured on the second eager run, or not yet: eager (also while another
     * thread rehearses the kind, whose program will come) */
    enum pass_mode mode = MODE_EAGER;
    pthread_mutex_lock(&b->lock);
    struct pass_graph *g = b->no_graphs ? NULL : graph_slot(b, p);
    if (g) {
        g->held = 1;
        mode = g->exec ? MODE_REPLAY : g->runs && !g->rehearsing ? MODE_CAPTURE : MODE_EAGER;
    }
    pthread_mutex_unlock(&b->lock);
    cur.g = g;
    cur.t0_ms = wall_ms(); /* a capture's recording is one-off work (be_one_off_seconds) */
    if (mode == MODE_CAPTURE && !CK(be, cudaStreamBeginCapture(ST, cudaStreamCaptureModeThreadLocal))) {
        release_slot(b, g);
        return;
    }
    cur.mode = mode;
}

/* A capture that will not be launched: ended and dropped, and the slot forgotten (the stream must
 * leave capture mode whatever happened inside it). */
static void abandon_capture(struct cuda_backend *b, enum pass_mode mode, struct pass_graph *g) {
    cudaGraph_t graph = NULL;
    if (cudaStreamEndCapture(ST, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    if (mode == MODE_REHEARSE) return release_rehearsal(b, g, NULL);
    pthread_mutex_lock(&b->lock);
    g->runs = 0;
    pthread_mutex_unlock(&b->lock);
}

/* Launches the program just captured (graph) and keeps it for the next passes when its
 * fingerprint is the eager run's; otherwise runs it once and captures again next time. The slot
 * is held (be_begin_pass): its fields are this thread's until end_pass lets it go, but exec is
 * written under the lock (a rehearsal on another thread reads it). */
static void launch_captured(struct nt_backend *be, struct pass_graph *g, cudaGraph_t graph) {
    if (cur.print == g->print) {
        cudaGraphExec_t exec = NULL;
        if (CK(be, cudaGraphInstantiate(&exec, graph, 0))) {
            pthread_mutex_lock(&cb(be)->lock);
            g->exec = exec;
            pthread_mutex_unlock(&cb(be)->lock);
            CK(be, cudaGraphLaunch(exec, ST));
        }
    } else {
        /* the program differed from the eager run (not expected): run this capture once, keep
         * the new fingerprint, capture again next time */
        cudaGraphExec_t once;
        g->print = cur.print;
        if (CK(be, cudaGraphInstantiate(&once, graph, 0))) {
            CK(be, cudaGraphLaunch(once, ST)) && CK(be, cudaStreamSynchronize(ST));
            cudaGraphExecDestroy(once);
        }
    }
    cudaGraphDestroy(graph);
}

/* The pass in mode (EAGER, CAPTURE, REPLAY) on its held slot g, at end_pass: 0 when a rehearsed
 * program turned out not to be the pass's (nothing ran), else 1. */
static int finish_pass(struct nt_backend *be, enum pass_mode mode, struct pass_graph *g) {
    switch (mode) {
    case MODE_EAGER:
        if (!g) return 1; /* every slot was held: nothing to keep */
        pthread_mutex_lock(&cb(be)->lock);
        g->print = cur.print;
        g->runs++;
        pthread_mutex_unlock(&cb(be)->lock);
        return 1;
    case MODE_CAPTURE: {
        cudaGraph_t graph;
        if (CK(be, cudaStreamEndCapture(ST, &graph))) launch_captured(be, g, graph);
        if (cb(be)->log_graphs)
            fprintf(stderr, "cuda graph: captured n=%d want=%d snap=%d embd=%d mtp=%d keep=%d after %d eager runs: %.3f ms\n",
                    g->n, g->want, g->snap, g->embd, g->mtp, g->keep, g->runs, wall_ms() - cur.t0_ms);
        return 1;
    }
    case MODE_REPLAY:
        if (g->rehearsed) {
            /* the kind's first pass: the rehearsal's program is its own (the contract: one program
             * per kind), or it is dropped and the pass, of which nothing ran, runs again eagerly */
            g->rehearsed = 0;
            bool same = cur.print == g->print;
            if (cb(be)->log_graphs)
                fprintf(stderr, "cuda graph: n=%d want=%d snap=%d mtp=%d keep=%d: the rehearsed program %s\n", g->n,
                        g->want, g->snap, g->mtp, g->keep, same ? "is the pass's" : "differs: dropped, the pass runs again");
            if (!same) {
                pthread_mutex_lock(&cb(be)->lock);
                cudaGraphExecDestroy(g->exec);
                g->exec = NULL;
                g->runs = 0;
                pthread_mutex_unlock(&cb(be)->lock);
                return 0;
            }
        } else if (cur.print != g->print) {
            cuda_fault(be, "end_pass: the pass's operations differ from its captured program (forward.c must call "
                           "the same operations for every pass of one kind)");
            return 1;
        }
        CK(be, cudaGraphLaunch(g->exec, ST));
        return 1;
    default:
        return 1;
    }
}

int be_end_pass(struct nt_backend *be, const struct nt_pass *p) {
    (void)p;
    struct cuda_backend *b = cb(be);
    struct pass_graph *g = cur.g;
    enum pass_mode mode = cur.mode;
    bool in_branch = nt_stream != cudaStreamPerThread || br.open;
    cur.mode = MODE_NONE;
    cur.g = NULL;
    cur.op = OP_END_PASS;
    nt_stream = cudaStreamPerThread;
    br.open = false;
    if (mode == MODE_NONE) {
        if (!FAULTED(be)) cuda_fault(be, "end_pass without begin_pass");
        return 1;
    }
    bool capturing = mode == MODE_CAPTURE || mode == MODE_REHEARSE;
    if (FAULTED(be) || in_branch) {
        if (capturing) abandon_capture(b, mode, g);
        if (mode != MODE_REHEARSE) release_slot(b, g);
        if (in_branch && !FAULTED(be))
            cuda_fault(be, "end_pass inside a branch (forward.c closes and joins every branch it opens)");
        return 1;
    }
    int ran = 1;
    if (mode == MODE_REHEARSE) end_rehearsal(be, g);
    else if (mode != MODE_SKIP) {
        ran = finish_pass(be, mode, g);
        release_slot(b, g);
    }
    /* (a first run is not counted: its launches overlap its kernels, whose time is the pass's) */
    if (capturing) one_off_s += 1e-3 * (wall_ms() - cur.t0_ms);
    return ran;
}
