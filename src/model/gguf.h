/* gguf.h - llama.cpp's GGUF files (v2 and v3, little-endian) read in place: the header, every
 * metadata key and value, the tensor infos and where each tensor's bytes lie, all validated.
 *
 * A file is mmap-ed (or borrowed bytes are used) and nothing is copied but the keys, the tensor
 * names and the architecture, which are kept NUL-terminated for lookups. Values point into the
 * mapping: a scalar's bytes, a string's bytes (not NUL-terminated: GGUF strings carry a length
 * and may hold NUL), an array's first element. Every length, count, dimension and offset was
 * checked at open, so the accessors below read without further bounds checks.
 *
 * What the reader refuses (each with a message naming the file and the key or tensor): a short
 * file, a wrong magic or version, a big-endian file, counts or lengths that run past the end,
 * unknown value types, arrays nested past NT_GGUF_MAX_DEPTH, duplicate keys or tensor names,
 * keys or names holding NUL, more than NT_GGUF_MAX_DIMS dimensions or a dimension of 0, element
 * counts past int64, a ggml type it does not know, a row length (ne[0]) not a whole number of
 * the type's blocks, offsets not a multiple of the alignment, overlapping or past the end, and
 * the known keys of the wrong type (general.alignment must be a power-of-two uint32, ...).
 * Split files (llama.cpp's NAME-0000K-of-0000N.gguf, split.count > 1) are read from their first
 * part's path: every part is opened and checked (split.count, split.no, split.tensors.count) and
 * their tensors joined into one table under the first part's metadata. A later part's path, or
 * a part whose name does not say where the others are, is refused naming the first part.
 */
#ifndef NT_GGUF_H
#define NT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define NT_GGUF_MAX_DIMS 4   /* ggml's GGML_MAX_DIMS */
#define NT_GGUF_MAX_DEPTH 8  /* arrays of arrays this deep at most */
#define NT_GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types (the numbers are the file's). */
enum nt_gguf_vtype {
    NT_GGUF_U8 = 0, NT_GGUF_I8 = 1, NT_GGUF_U16 = 2, NT_GGUF_I16 = 3, NT_GGUF_U32 = 4,
    NT_GGUF_I32 = 5, NT_GGUF_F32 = 6, NT_GGUF_BOOL = 7, NT_GGUF_STRING = 8, NT_GGUF_ARRAY = 9,
    NT_GGUF_U64 = 10, NT_GGUF_I64 = 11, NT_GGUF_F64 = 12, NT_GGUF_VTYPE_COUNT
};

/* ggml tensor types the reader sizes (the numbers are ggml's; gaps are types ggml removed). */
enum nt_ggml_type {
    NT_GGML_F32 = 0, NT_GGML_F16 = 1, NT_GGML_Q4_0 = 2, NT_GGML_Q4_1 = 3, NT_GGML_Q5_0 = 6,
    NT_GGML_Q5_1 = 7, NT_GGML_Q8_0 = 8, NT_GGML_Q8_1 = 9, NT_GGML_Q2_K = 10, NT_GGML_Q3_K = 11,
    NT_GGML_Q4_K = 12, NT_GGML_Q5_K = 13, NT_GGML_Q6_K = 14, NT_GGML_Q8_K = 15,
    NT_GGML_IQ2_XXS = 16, NT_GGML_IQ2_XS = 17, NT_GGML_IQ3_XXS = 18, NT_GGML_IQ1_S = 19,
    NT_GGML_IQ4_NL = 20, NT_GGML_IQ3_S = 21, NT_GGML_IQ2_S = 22, NT_GGML_IQ4_XS = 23,
    NT_GGML_I8 = 24, NT_GGML_I16 = 25, NT_GGML_I32 = 26, NT_GGML_I64 = 27, NT_GGML_F64 = 28,
    NT_GGML_IQ1_M = 29, NT_GGML_BF16 = 30, NT_GGML_TQ1_0 = 34, NT_GGML_TQ2_0 = 35,
    NT_GGML_MXFP4 = 39, NT_GGML_TYPE_COUNT
};

struct nt_gguf_kv {
    const char *key;          /* NUL-terminated copy */
    uint32_t type;            /* enum nt_gguf_vtype */
    /* arrays: the element type and count; other types: arr_type = type, n = 1 */
    uint32_t arr_type;
    uint64_t n;
    /* the value's bytes in the file: a scalar, a string's characters (str_len of them), an
     * array's first element (elements follow one another; val_bytes in all) */
    const uint8_t *val;
    uint64_t val_bytes;
    uint64_t str_len;         /* strings only */
};

struct nt_gguf_tensor {
    const char *name;         /* NUL-terminated copy */
    int ndim;
    int64_t ne[NT_GGUF_MAX_DIMS]; /* ne[0] is the row length (the fastest-varying); unused: 1 */
    uint32_t type;            /* enum nt_ggml_type */
    uint64_t offset;          /* from the data section's start */
    uint64_t n_elements;
    uint64_t nbytes;
    const void *data;         /* in the mapping */
    int part;                 /* the split part holding it (0: the first, or a whole file) */
};

struct nt_gguf {
    char *path;
    const uint8_t *map;
    size_t size;
    int owned_map;            /* munmap at close */
    uint32_t version;
    uint32_t alignment;       /* general.alignment, or 32 */
    uint64_t data_start;      /* the aligned start of the data section */
    int64_t n_kv, n_tensors;
    struct nt_gguf_kv *kv;
    struct nt_gguf_tensor *tensors;
    const char *arch;         /* general.architecture (a NUL-terminated copy), or NULL */
    struct nt_gguf_names *names; /* the copies of the keys and names (gguf.c) */
    /* open-addressing hashes of indices + 1 (0: empty) */
    int64_t *kv_hash, *tensor_hash;
    uint64_t kv_hash_cap, tensor_hash_cap;
    /* a split: n_parts handles, parts[0] this one (map, size and data_start are the first
     * part's; each tensor's data points into its own part's mapping); a whole file: 1, NULL */
    int n_parts;
    struct nt_gguf **parts;
};

/* Opens a GGUF file (a split: its first part, and so all its parts), mmap-ed. On failure *out
 * is NULL and err names the file and the fault. */
nemotron_status nt_gguf_open(const char *path, struct nt_gguf **out, struct nt_err *err);
/* The same over one file's bytes already in memory (a part of a split is refused); owned_map:
 * munmap(bytes, size) at close (else they must outlive the handle). name is used in messages. */
nemotron_status nt_gguf_open_bytes(const char *name, const uint8_t *bytes, size_t size,
                                   int owned_map, struct nt_gguf **out, struct nt_err *err);
void nt_gguf_close(struct nt_gguf *g); /* NULL is a no-op */

/* The key's entry, or NULL. */
const struct nt_gguf_kv *nt_gguf_find(const struct nt_gguf *g, const char *key);
/* The tensor, or NULL; tensors are also g->tensors[0 .. n_tensors-1], in the file's order. */
const struct nt_gguf_tensor *nt_gguf_tensor(const struct nt_gguf *g, const char *name);

/* Typed getters. Each fails with NEMOTRON_ERR_CONFIG naming the key: missing, or of another
 * type than asked ("KEY: is f32, expected an unsigned integer"). Integers are accepted from any
 * integer type whose value fits; floats from f32 or f64. */
nemotron_status nt_gguf_get_uint(const struct nt_gguf *g, const char *key, uint64_t *out,
                                 struct nt_err *err);
nemotron_status nt_gguf_get_int(const struct nt_gguf *g, const char *key, int64_t *out,
                                struct nt_err *err);
nemotron_status nt_gguf_get_float(const struct nt_gguf *g, const char *key, double *out,
                                  struct nt_err *err);
nemotron_status nt_gguf_get_bool(const struct nt_gguf *g, const char *key, int *out,
                                 struct nt_err *err);
/* *s points into the file (not NUL-terminated), *len bytes. */
nemotron_status nt_gguf_get_str(const struct nt_gguf *g, const char *key, const char **s,
                                uint64_t *len, struct nt_err *err);
/* An array whose elements are of elem_type; *kv is its entry (n, val). */
nemotron_status nt_gguf_get_array(const struct nt_gguf *g, const char *key, uint32_t elem_type,
                                  const struct nt_gguf_kv **kv, struct nt_err *err);

/* Reads an array's elements in order. Start with *pos = 0; each call gives the next string
 * (nt_gguf_next_str, for arrays of strings) and advances *pos past it. Only for entries of this
 * handle, and at most kv->n times. */
void nt_gguf_next_str(const struct nt_gguf_kv *kv, uint64_t *pos, const char **s, uint64_t *len);
/* An integer element i of an array of integers, as int64 (u64 values past INT64_MAX: -1), or
 * an integer scalar's value for i = 0. */
int64_t nt_gguf_int_at(const struct nt_gguf_kv *kv, uint64_t i);

/* "u8", "string", "array", ...; "?" outside the enum. */
const char *nt_gguf_vtype_name(uint32_t vtype);
/* "Q4_K", ...; NULL for a number ggml never used or this reader does not know. */
const char *nt_ggml_type_name(uint32_t type);
/* The type's block: elements per block and bytes per block; 0 when unknown. */
int nt_ggml_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);

#endif /* NT_GGUF_H */
