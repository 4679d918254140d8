/* common.h - what every file of the library shares: errors, assertions, memory, number formats.
 *
 * Errors: a function that can fail returns a nemotron_status and fills a struct nt_err with a
 * message naming the thing that is wrong; callers add context by prefixing. Broken invariants
 * (bugs, never bad input) go through NT_ASSERT, which is always on.
 *
 * Memory: the library allocates through nt_alloc/nt_calloc/nt_free only. A pass brackets its
 * work with nt_pass_enter/nt_pass_leave; in the debug build (-DNT_DEBUG) any allocation made
 * while a pass is running aborts, which is how "nothing allocates inside a pass" is enforced.
 */
#ifndef NT_COMMON_H
#define NT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nemotron.h"

#define NT_ERR_MAX 1024

struct nt_err {
    char msg[NT_ERR_MAX];
};

/* Sets err->msg from a format and returns status (so `return nt_fail(err, ST, ...)` reads). */
nemotron_status nt_fail(struct nt_err *err, nemotron_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes err->msg with a formatted context ("file.json: " + old message). */
void nt_err_prefix(struct nt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void nt_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define NT_ASSERT(x) ((x) ? (void)0 : nt_assert_fail(#x, __FILE__, __LINE__))

void *nt_alloc(size_t bytes);            /* 64-byte aligned; NULL on failure */
void *nt_calloc(size_t n, size_t size);  /* zeroed, 64-byte aligned; NULL on failure or overflow */
void nt_free(void *p);
char *nt_strdup(const char *s);
/* Reads a whole regular file of at most max_bytes into *buf (NUL-terminated, for nt_free) and
 * *len. Errors name the path: not there, not a regular file, larger than max_bytes (`what` says
 * what it should have been, e.g. "a config"), unreadable. */
nemotron_status nt_read_file(const char *path, size_t max_bytes, const char *what, char **buf,
                             size_t *len, struct nt_err *err);
/* Physical cores this process may run on (affinity-aware; at least 1). */
int nt_physical_cores(void);

void nt_pass_enter(void);
void nt_pass_leave(void);

/* Number formats. bf16 -> f32 is exact (the top half of an f32); f16 -> f32 is exact. */
static inline float nt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
float nt_f16_to_f32(uint16_t h);
/* Round to nearest even; NaN stays NaN; past the f16 range, infinity. */
uint16_t nt_f32_to_f16(float f);
/* Round to nearest even; NaN stays NaN. */
uint16_t nt_f32_to_bf16(float f);

/* Overflow-checked size arithmetic: return 0 on overflow. */
static inline int nt_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

#endif /* NT_COMMON_H */
