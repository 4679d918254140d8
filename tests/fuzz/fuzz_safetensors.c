/* fuzz_safetensors.c - libFuzzer entry point: any bytes, parsed as one safetensors file.
 *
 * The input is handed to nt_table_add_bytes as borrowed bytes (owned_map = 0), exactly as
 * long as libFuzzer gives it, so AddressSanitizer catches any read past the end of a header
 * that is not NUL-terminated. Beyond "no crash", a file that loads is checked against the
 * table's contract (every tensor found by name, its span inside the input and sized by its
 * shape, spans disjoint), and adding the same bytes again must fail and change nothing.
 * tests/fuzz/README.md says how to build and run it.
 */
#include "model/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken contract is a finding: abort so libFuzzer saves the input. */
#define EXPECT(x) ((x) ? (void)0 : abort())

static int compare_by_data(const void *a, const void *b) {
    const struct nt_tensor *x = *(const struct nt_tensor *const *)a;
    const struct nt_tensor *y = *(const struct nt_tensor *const *)b;
    const uint8_t *p = x->data, *q = y->data;
    return p < q ? -1 : p > q;
}

static void check_loaded(const struct nt_tensor_table *t, const uint8_t *data, size_t size) {
    EXPECT(t->n_files == 1 && t->files[0].map == data && t->files[0].size == size);
    EXPECT(t->hash_cap >= 2 * t->n_tensors);
    const struct nt_tensor **sorted = malloc(((size_t)t->n_tensors + 1) * sizeof *sorted);
    EXPECT(sorted != NULL);
    volatile uint8_t sink = 0;
    for (int i = 0; i < t->n_tensors; i++) {
        const struct nt_tensor *x = &t->tensors[i];
        EXPECT(nt_table_find(t, x->name) == x);
        EXPECT(x->file == 0 && x->ndim >= 0 && x->ndim <= NT_MAX_DIMS);
        uint64_t bytes = nt_dtype_size(x->dtype);
        for (int d = 0; d < x->ndim; d++) {
            EXPECT(x->shape[d] >= 0);
            EXPECT(nt_mul_ok(bytes, (uint64_t)x->shape[d], &bytes));
        }
        EXPECT(bytes == x->nbytes);
        const uint8_t *p = x->data;
        EXPECT(p >= data + 8 && (size_t)(p - data) <= size &&
               x->nbytes <= size - (size_t)(p - data));
        if (x->nbytes) sink ^= p[0] ^ p[x->nbytes - 1]; /* ASan checks both ends */
        sorted[i] = x;
    }
    (void)sink;
    qsort(sorted, (size_t)t->n_tensors, sizeof *sorted, compare_by_data);
    const struct nt_tensor *prev = NULL;
    for (int i = 0; i < t->n_tensors; i++) {
        if (sorted[i]->nbytes == 0) continue;
        if (prev)
            EXPECT((const uint8_t *)prev->data + prev->nbytes <= (const uint8_t *)sorted[i]->data);
        prev = sorted[i];
    }
    free(sorted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct nt_tensor_table t;
    struct nt_err err;
    nt_table_init(&t);
    nemotron_status st = nt_table_add_bytes(&t, "fuzz.safetensors", data, size, 0, &err);
    EXPECT(st == NEMOTRON_OK || st == NEMOTRON_ERR_FORMAT || st == NEMOTRON_ERR_NOMEM);
    if (st == NEMOTRON_OK) {
        check_loaded(&t, data, size);
        /* the same names again: refused when there are any, and the table stays as it was */
        int n = t.n_tensors;
        st = nt_table_add_bytes(&t, "again.safetensors", data, size, 0, &err);
        EXPECT(n == 0 ? st == NEMOTRON_OK : st == NEMOTRON_ERR_FORMAT);
        EXPECT(t.n_tensors == 2 * n || (st != NEMOTRON_OK && t.n_tensors == n && t.n_files == 1));
        if (st != NEMOTRON_OK) check_loaded(&t, data, size);
    } else {
        EXPECT(t.n_tensors == 0 && t.n_files == 0 && err.msg[0] != 0);
    }
    nt_table_close(&t);
    return 0;
}
