/* nemo.h - the .nemo model container: one safetensors file holding a whole converted model.
 *
 * A .nemo is a valid safetensors file (docs/NEMO.md has the byte layout): the packed matrices
 * (q8_2f, q4tp; FORMATS.md) and matrices in llama.cpp's block types (docs/FORMATS-GGUF.md:
 * a GGUF tensor's bytes as they were) are stored as U8 tensors of their payload bytes, plain tensors
 * (F32, F16, BF16) as themselves, and the model's small files (config.json, tokenizer.json, ...)
 * as U8 tensors named "nemotron.file/<name>". The header's __metadata__ says what each entry
 * really is: "nemotron.format" = "1" and "nemotron.tensors", a JSON object giving every
 * entry's format, logical shape and CRC-32. Any safetensors reader lists the file; this reader
 * checks all of it, every checksum included, before one byte is computed on.
 *
 * The writer streams: it holds the header and the embedded files, never tensor data, so a
 * converter can write a 60 GB model in small memory. Its output appears at the final path
 * only on a successful commit (it writes "<path>.partial" and renames it).
 */
#ifndef NT_NEMO_H
#define NT_NEMO_H

#include "safetensors.h"

/* The version of the container this build reads and writes ("nemotron.format"). */
#define NT_NEMO_FORMAT "1"
/* Name prefix of the embedded files' entries. */
#define NT_NEMO_FILE_PREFIX "nemotron.file/"

/* ---- reading ---------------------------------------------------------------------------- */

/* mmaps the .nemo at `path` (read-only) and adds it to the table: the safetensors header is
 * validated as nt_table_add_file does, then the nemotron metadata (a known format version;
 * every entry listed in both the header and nemotron.tensors, nothing extra; known format
 * tags; logical shapes the formats accept; stored sizes matching them; the data section
 * covered without holes), then every checksum, on n_threads threads (<= 0: one per
 * processor).
 *
 * On success the table holds the file's tensors: a packed one with dtype NT_DTYPE_Q8_2F or
 * NT_DTYPE_Q4TP, ndim 2, shape [rows, cols], nbytes = nt_matrix_bytes and data at its payload;
 * plain ones as a safetensors file gives them. The embedded files are not tensors: they are
 * reached with nt_table_file (e.g. "config.json"). On failure (NEMOTRON_ERR_IO, _FORMAT for
 * bad bytes, a checksum mismatch included, _UNSUPPORTED for another format version, _NOMEM)
 * the message names the file and the entry, and the table is as it was. */
nemotron_status nt_nemo_open(struct nt_tensor_table *t, const char *path, int n_threads,
                             struct nt_err *err);

/* The same on bytes[0..size) that the caller holds (tests, fuzzing); `path` names them in
 * messages; owned_map as for nt_table_add_bytes (1: the table munmaps them on close, also on
 * failure here; 0: borrowed, they must outlive the table). */
nemotron_status nt_nemo_open_bytes(struct nt_tensor_table *t, const char *path,
                                   const uint8_t *bytes, size_t size, int owned_map,
                                   int n_threads, struct nt_err *err);

/* 1 when `path` is a regular file whose safetensors header parses and has a
 * "nemotron.format" in its __metadata__ (what a command uses to tell a .nemo from a model
 * directory); 0 otherwise. It reads only the header and checks nothing more: nt_nemo_open does. */
int nt_path_is_nemo(const char *path);

/* A copy (NUL-terminated, nt_free) of the file `name` carried by the .nemo at `path`, with the
 * container checked as nt_nemo_open does except that only the carried files' checksums are
 * verified: what a tokenizer loader needs, without reading gigabytes of weights. */
nemotron_status nt_nemo_read_file(const char *path, const char *name, char **out, size_t *len,
                                  struct nt_err *err);

/* ---- writing ---------------------------------------------------------------------------- */

struct nt_nemo_writer;

/* Starts a .nemo at `path`: creates "<path>.partial" (replacing a stale one) beside the file
 * nt_output_target (output.h) resolves and checks, `input` being what the caller reads (a model
 * directory or file, or NULL). Fails when the target is refused or the partial file cannot be
 * created. *out is NULL on failure. */
nemotron_status nt_nemo_writer_new(struct nt_nemo_writer **out, const char *path, const char *input,
                                   struct nt_err *err);

/* An extra metadata string, e.g. ("nemotron.quant", "default"). The key starts with
 * "nemotron.", is not "nemotron.format" / "nemotron.tensors", and is set once; key and value
 * are UTF-8. Before begin. */
nemotron_status nt_nemo_writer_meta(struct nt_nemo_writer *w, const char *key, const char *value,
                                    struct nt_err *err);

/* Declares the next tensor; tensors are stored in declaration order. fmt is NT_DTYPE_Q8_2F,
 * NT_DTYPE_Q4TP or a ggml block dtype (ndim 2, [rows, cols] accepted by nt_format_accepts;
 * stored as nt_matrix_bytes payload bytes) or NT_DTYPE_F32 / F16 / BF16 (any ndim up to NT_MAX_DIMS,
 * dimensions >= 0). The name is UTF-8, unique, not "__metadata__" and not under
 * "nemotron.file/". Before begin. */
nemotron_status nt_nemo_writer_declare(struct nt_nemo_writer *w, const char *name,
                                       enum nt_dtype fmt, int ndim, const int64_t *shape,
                                       struct nt_err *err);

/* Declares an embedded file (stored as "nemotron.file/<filename>"): the bytes are copied now
 * and written by commit, after every tensor (so the tensors start at the aligned beginning of
 * the data section). filename is a plain UTF-8 name: no '/', no control characters, not "."
 * or "..", unique. Before begin. */
nemotron_status nt_nemo_writer_declare_file(struct nt_nemo_writer *w, const char *filename,
                                            const void *bytes, size_t len, struct nt_err *err);

/* Writes the header, with placeholder checksums of fixed width that commit fills in. After
 * it nothing more can be declared. */
nemotron_status nt_nemo_writer_begin(struct nt_nemo_writer *w, struct nt_err *err);

/* The next n payload bytes, in declaration order: one call may end inside a tensor or run on
 * through any number of them; tensors are just consecutive in the byte stream. The checksums
 * accumulate as the bytes pass (large calls in parallel). Appending more bytes than the
 * tensors still need is refused before anything is written. After begin. */
nemotron_status nt_nemo_writer_append(struct nt_nemo_writer *w, const void *bytes, size_t n,
                                      struct nt_err *err);

/* Checks that every tensor got all its bytes, writes the embedded files, patches the
 * checksums into the header in place, fsyncs and renames the partial file to the path. */
nemotron_status nt_nemo_writer_commit(struct nt_nemo_writer *w, struct nt_err *err);

/* Frees the writer (NULL is fine); without a successful commit it removes the partial file,
 * so nothing half-written is ever left at the path or beside it.
 *
 * Any failed call from begin on (I/O error, misuse, an incomplete commit) leaves the writer
 * failed: later calls fail too, and only free is left. A failed declaration before begin
 * changes nothing and the writer stays usable. */
void nt_nemo_writer_free(struct nt_nemo_writer *w);

#endif /* NT_NEMO_H */
