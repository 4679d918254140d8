/* stream_layout.c - the CPU backend's second copy of a model's q8_2f projections in the streaming
 * layout (cpu.h, matmul_q.c), made once when the model is loaded and found by matrix at each
 * product.
 *
 * Why a copy: the SIMD kernels of one position (and AVX-512 VNNI's of up to 4) read 6 rows at a
 * time, and from the payload those are 6 streams `cols` bytes apart, which a core streams at 70 -
 * 80 % of a plain read; from this layout they are one sequential stream (matmul_q.c has the
 * figures). Decoding is those reads.
 * Which matrices: the q8_2f ones the backend's matmul takes (Mamba, attention, shared experts,
 * dense MLPs, the latent projections, lm_head, the MTP step's), never the routed experts: a
 * position reads a few of them, and on a large model they are most of the bytes, too many to hold
 * twice. Memory: the copies add those matrices' bytes (mid: 190 MB; Nemotron-3-Nano: ~1.8 GB);
 * the products no longer read the originals' file pages, which the page cache may then drop.
 * The copies are skipped (the kernels read the payload, the same results) for the scalar
 * reference, when NEMOTRON_STREAM_LAYOUT=0, or when they would take more than half the memory
 * available.
 */
#include "stream_layout.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../forward.h"
#include "../log.h"

struct range {
    const struct nt_matrix *lo, *hi; /* [lo, hi): one layer's routed experts, up or down */
};

/* The visitor's state: first it counts (L->e NULL), then it fills. */
struct collect {
    struct nt_cpu_stream_layouts *L;
    const struct range *experts;
    int n_experts;
    int count;
    size_t bytes;
};

static int is_routed_expert(const struct collect *c, const struct nt_matrix *mx) {
    for (int i = 0; i < c->n_experts; i++)
        if (mx >= c->experts[i].lo && mx < c->experts[i].hi) return 1;
    return 0;
}

static void visit(struct nt_matrix *mx, void *ctx) {
    struct collect *c = ctx;
    if (mx->dtype != NT_DTYPE_Q8_2F || is_routed_expert(c, mx)) return;
    size_t bytes = nt_cpu_q8_stream_bytes(mx->rows, mx->cols);
    if (!bytes) return;
    if (c->L->e) c->L->e[c->count] = (struct nt_cpu_stream_layout){.W = *mx, .stream = c->L->buf + c->bytes};
    c->count++;
    c->bytes += (bytes + 63) / 64 * 64;
}

/* The routed experts' matrix arrays of every MoE layer, the MTP step's included; out may be NULL
 * (the count alone). */
static int expert_ranges(const struct nt_weights *w, int E, struct range *out) {
    int n = 0;
    for (int mtp = 0; mtp < 2; mtp++) {
        const struct nt_layer_weights *layers = mtp ? w->mtp.layers : w->layers;
        int count = mtp ? (w->has_mtp ? w->n_mtp_layers : 0) : w->n_layers;
        for (int i = 0; i < count; i++) {
            const struct nt_moe_weights *m = &layers[i].moe;
            const struct nt_matrix *arrays[2] = {m->expert_up, m->expert_down};
            for (int a = 0; a < 2; a++)
                if (arrays[a]) {
                    if (out) out[n] = (struct range){arrays[a], arrays[a] + E};
                    n++;
                }
        }
    }
    return n;
}

static int by_data(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const struct nt_cpu_stream_layout *)a)->W.data;
    uintptr_t y = (uintptr_t)((const struct nt_cpu_stream_layout *)b)->W.data;
    return x < y ? -1 : x > y;
}

/* Linux's MemAvailable (free memory and what the page cache would give back: the model's own file
 * pages, just read for their checksums, count), else the free pages. */
static size_t memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb) return (size_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

void nt_cpu_stream_layouts_build(struct nt_cpu_stream_layouts *L, const struct nt_forward *f, int isa, int n_threads) {
    *L = (struct nt_cpu_stream_layouts){0};
    if (isa == NT_CPU_SCALAR) return; /* the reference reads the payload */
    const char *env = getenv("NEMOTRON_STREAM_LAYOUT");
    if (env && strcmp(env, "0") == 0) return;
    if (env && *env && strcmp(env, "1") != 0)
        nt_log(NEMOTRON_LOG_WARN, "NEMOTRON_STREAM_LAYOUT=%s: not 0 or 1; the streaming copy is made (0 turns it off)", env);
    /* the visitor only reads the matrices (nt_weights_for_each takes them writable, for uploads) */
    struct nt_weights *w = (struct nt_weights *)f->w;
    int n_ranges = expert_ranges(w, f->moe.E, NULL);
    struct range *ranges = n_ranges ? nt_alloc(sizeof *ranges * (size_t)n_ranges) : NULL;
    if (n_ranges && !ranges) return;
    expert_ranges(w, f->moe.E, ranges);
    struct collect c = {.L = L, .experts = ranges, .n_experts = n_ranges};
    nt_weights_for_each(w, visit, NULL, &c);
    size_t avail = memory_available();
    if (c.count && c.bytes > avail / 2) {
        nt_log(NEMOTRON_LOG_WARN, "CPU: the q8_2f projections are read in place: their streaming copy (%.2f GB) "
               "would take more than half the memory available (%.2f GB)", c.bytes / 1e9, avail / 1e9);
    } else if (c.count) {
        /* one mapping for all, huge pages where the system gives them (fewer TLB misses over a
         * stream of hundreds of megabytes) */
        void *buf = mmap(NULL, c.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        L->e = nt_alloc(sizeof *L->e * (size_t)c.count);
        if (buf == MAP_FAILED || !L->e) {
            if (buf != MAP_FAILED) munmap(buf, c.bytes);
            nt_free(L->e);
            *L = (struct nt_cpu_stream_layouts){0};
        } else {
            madvise(buf, c.bytes, MADV_HUGEPAGE);
            L->buf = buf;
            L->buf_bytes = c.bytes;
            L->n = c.count;
            c = (struct collect){.L = L, .experts = ranges, .n_experts = n_ranges};
            nt_weights_for_each(w, visit, NULL, &c);
            for (int i = 0; i < L->n; i++) {
                const struct nt_cpu_stream_layout *e = &L->e[i];
                int64_t blocks = e->W.rows / NT_CPU_Q8_STREAM_ROWS;
#pragma omp parallel for num_threads(n_threads) schedule(static)
                for (int64_t k = 0; k < blocks; k++) nt_cpu_q8_stream_fill(&e->W, e->stream, k, k + 1);
            }
            qsort(L->e, (size_t)L->n, sizeof *L->e, by_data);
        }
    }
    nt_free(ranges);
}

const uint8_t *nt_cpu_stream_layout_of(const struct nt_cpu_stream_layouts *L, const struct nt_matrix *W) {
    if (!L->n || W->dtype != NT_DTYPE_Q8_2F) return NULL;
    int lo = 0, hi = L->n; /* binary search by the payload's address */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        uintptr_t d = (uintptr_t)L->e[mid].W.data;
        if (d == (uintptr_t)W->data) {
            const struct nt_matrix *E = &L->e[mid].W;
            return E->rows == W->rows && E->cols == W->cols ? L->e[mid].stream : NULL;
        }
        if (d < (uintptr_t)W->data) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

void nt_cpu_stream_layouts_free(struct nt_cpu_stream_layouts *L) {
    if (L->buf) munmap(L->buf, L->buf_bytes);
    nt_free(L->e);
    *L = (struct nt_cpu_stream_layouts){0};
}
