/* safetensors.h - the tensors of a checkpoint: safetensors files mmap-ed and indexed by name.
 *
 * A tensor table owns the mappings of one or more .safetensors files (a single
 * model.safetensors, or the shards named by model.safetensors.index.json) and one entry per
 * tensor pointing into them. Every header is validated when a file is added: JSON shape, dtype
 * names, shape x element size == byte span, spans inside the file, spans not overlapping,
 * names unique across all files. Entries are read-only views; they live as long as the table.
 */
#ifndef NT_SAFETENSORS_H
#define NT_SAFETENSORS_H

#include "../common.h"

enum nt_dtype {
    NT_DTYPE_F32,
    NT_DTYPE_F16,
    NT_DTYPE_BF16,
    NT_DTYPE_F64,
    NT_DTYPE_I64,
    NT_DTYPE_I32,
    NT_DTYPE_I16,
    NT_DTYPE_I8,
    NT_DTYPE_U8,
    NT_DTYPE_BOOL,
    NT_DTYPE_F8_E4M3,
    NT_DTYPE_F8_E5M2,
    NT_DTYPE_COUNT,               /* the dtypes a safetensors header may name end here */
    /* The engine's packed matrix formats (FORMATS.md). They are never a safetensors dtype: a
     * .nemo stores them as U8 payloads and names the format in its metadata (src/model/nemo.h). */
    NT_DTYPE_Q8_2F = NT_DTYPE_COUNT,
    NT_DTYPE_Q4TP,
    /* llama.cpp's (ggml's) block types, read in place from GGUF files (src/quant/ggml_blocks.h). */
    NT_DTYPE_GGML_Q8_0,
    NT_DTYPE_GGML_Q4_0,
    NT_DTYPE_GGML_Q4_1,
    NT_DTYPE_GGML_Q5_0,
    NT_DTYPE_GGML_Q5_1,
    NT_DTYPE_GGML_IQ4_NL,
    NT_DTYPE_GGML_MXFP4,
    NT_DTYPE_GGML_Q4_K,
    NT_DTYPE_GGML_Q5_K,
    NT_DTYPE_GGML_Q6_K,
    NT_DTYPE_ALL_COUNT
};

/* "F32", "BF16", ... as safetensors spells them; "q8_2f" and "q4tp" for the packed formats;
 * "Q4_K", ... (ggml's spelling) for the GGUF block types. */
const char *nt_dtype_name(enum nt_dtype d);
/* Bytes per element; 0 for the packed formats (their size is src/quant/quant.h's
 * nt_matrix_bytes). */
size_t nt_dtype_size(enum nt_dtype d);

#define NT_MAX_DIMS 8

struct nt_tensor {
    const char *name;             /* owned by the table */
    enum nt_dtype dtype;
    int ndim;
    int64_t shape[NT_MAX_DIMS];
    const void *data;             /* inside a read-only mapping; no alignment guaranteed */
    uint64_t nbytes;
    int file;                     /* index into the table's files */
    int used;                     /* set by the weight binder; unused tensors are reported */
};

struct nt_st_file {
    char *path;
    const uint8_t *map;           /* the whole file, mapped read-only (NULL when empty) */
    size_t size;
    int owned_map;                /* 1: munmap on close; 0: borrowed bytes (tests, fuzzing) */
};

/* A file carried inside a container (a .nemo's "nemotron.file/<name>" entries, nemo.h): not a
 * tensor, reached by name through nt_table_file. */
struct nt_embedded_file {
    char *name;                   /* without the container's prefix; owned by the table */
    const uint8_t *data;          /* inside a read-only mapping */
    size_t len;
    int file;                     /* index into the table's files */
};

struct nt_tensor_table {
    struct nt_tensor *tensors;
    int n_tensors, cap_tensors;
    struct nt_st_file *files;
    int n_files, cap_files;
    struct nt_embedded_file *embedded;
    int n_embedded, cap_embedded;
    /* open-addressing hash from name to tensor index; -1 = empty */
    int *hash;
    int hash_cap;
};

void nt_table_init(struct nt_tensor_table *t);
void nt_table_close(struct nt_tensor_table *t);

/* Parses and validates the safetensors file in bytes[0..size) and adds its tensors.
 * `path` names the file in messages. The bytes must outlive the table (they are not copied);
 * `owned_map` says whether nt_table_close munmaps them. On failure the table is unchanged
 * except that nothing of this file was added. */
nemotron_status nt_table_add_bytes(struct nt_tensor_table *t, const char *path,
                                   const uint8_t *bytes, size_t size, int owned_map,
                                   struct nt_err *err);

/* mmaps one .safetensors file and adds it. */
nemotron_status nt_table_add_file(struct nt_tensor_table *t, const char *path, struct nt_err *err);

/* Opens a model directory: model.safetensors.index.json if present (every shard it names is
 * opened, every tensor it lists must be in the shard it names, and no shard may hold tensors
 * the index does not list), else model.safetensors. */
nemotron_status nt_table_open_dir(struct nt_tensor_table *t, const char *dir, struct nt_err *err);

/* Adds tensors that are views into bytes the table does not own (a GGUF file's mapping, held by
 * src/model/gguf_model.c) under one file entry named `path`. The names are copied; they must be
 * unique and new to the table. */
nemotron_status nt_table_add_views(struct nt_tensor_table *t, const char *path,
                                   const struct nt_tensor *views, int n, struct nt_err *err);

/* NULL when absent. */
struct nt_tensor *nt_table_find(const struct nt_tensor_table *t, const char *name);

/* An embedded file by name (e.g. "config.json"): its bytes and *len, or NULL (and *len = 0)
 * when the table has none of that name. The bytes live as long as the table. */
const uint8_t *nt_table_file(const struct nt_tensor_table *t, const char *name, size_t *len);

/* ---- for container formats layered on safetensors (src/model/nemo.c) -------------------- */

/* Drops the files from n_files on, the tensors from n_tensors on and the embedded files of the
 * dropped files: undoes the nt_table_add_* calls that took the table past those counts.
 * Allocates nothing, so it cannot fail. */
void nt_table_truncate(struct nt_tensor_table *t, int n_files, int n_tensors);

/* Moves every tensor at index >= first whose name starts with `prefix` out of the tensor list
 * into the embedded files, named without the prefix (the remaining tensors keep their order).
 * Fails, leaving the table unchanged, on out of memory or when an embedded file of that name
 * is already in the table (NEMOTRON_ERR_FORMAT, naming both files). */
nemotron_status nt_table_embed(struct nt_tensor_table *t, int first, const char *prefix,
                               struct nt_err *err);

/* Parses text[0..len) as one JSON object, as strictly as a safetensors header is parsed: json-c
 * strict mode, valid UTF-8, nothing but whitespace after it, nesting at most 8 deep, and no
 * top-level key twice or containing an escaped NUL (json-c would silently keep the last
 * duplicate). `path` and `what` name the text in messages ("x.nemo: nemotron.tensors: ...").
 * On success *out is the object (json_object_put it); on failure NULL. */
struct json_object;
nemotron_status nt_json_parse_object(const char *path, const char *what, const char *text,
                                     size_t len, struct json_object **out, struct nt_err *err);

#endif /* NT_SAFETENSORS_H */
