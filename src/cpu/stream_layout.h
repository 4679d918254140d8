/* stream_layout.h - the CPU backend's copies of a model's q8_2f projections in the streaming layout
 * (stream_layout.c says which, why and when not). */
#ifndef NT_CPU_STREAM_LAYOUT_H
#define NT_CPU_STREAM_LAYOUT_H

#include "cpu.h"

struct nt_cpu_stream_layout {
    struct nt_matrix W;       /* the matrix as bound (its payload address is the key) */
    uint8_t *stream;          /* its rows in the streaming layout, nt_cpu_q8_stream_bytes long */
};

struct nt_cpu_stream_layouts {
    struct nt_cpu_stream_layout *e; /* n entries, by payload address */
    int n;
    uint8_t *buf;             /* one mapping holds every copy, each 64-byte aligned */
    size_t buf_bytes;
};

/* Makes the copies of f's matrices for the kernel variant isa (none, and L empty, where
 * stream_layout.c says), filling them on n_threads threads. Never fails: without copies the
 * products read the payload. */
void nt_cpu_stream_layouts_build(struct nt_cpu_stream_layouts *L, const struct nt_forward *f, int isa, int n_threads);
/* W's copy, or NULL (not a q8_2f projection of the model, or no copies). */
const uint8_t *nt_cpu_stream_layout_of(const struct nt_cpu_stream_layouts *L, const struct nt_matrix *W);
void nt_cpu_stream_layouts_free(struct nt_cpu_stream_layouts *L);

#endif /* NT_CPU_STREAM_LAYOUT_H */
