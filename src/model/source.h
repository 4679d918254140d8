/* source.h - a model as it comes in: a Hugging Face directory, a .nemo file or a llama.cpp GGUF,
 * opened alike.
 *
 * Both give the same three things: the parsed config, the tensor table (mmap-ed, validated; a
 * .nemo's checksums verified), and the small text files that travel with a model
 * (generation_config.json, tokenizer.json, ...). The model handle and the converter read
 * models only through this, so every command accepts either kind.
 */
#ifndef NT_SOURCE_H
#define NT_SOURCE_H

#include "config.h"
#include "safetensors.h"

/* The files a model carries besides its weights; a .nemo embeds those the directory had. */
#define NT_MODEL_FILES 5
extern const char *const nt_model_file_names[NT_MODEL_FILES];

struct nt_gguf;

struct nt_model_source {
    int is_nemo;
    struct nt_gguf *gguf;         /* a GGUF source's file (its tensors are views into it), else NULL */
    struct nt_config cfg;
    struct nt_tensor_table table;
    /* file i of nt_model_file_names: bytes and length, NULL when the model has none; for a
     * directory read into memory here, for a .nemo views into its mapping */
    const uint8_t *file_bytes[NT_MODEL_FILES];
    size_t file_lens[NT_MODEL_FILES];
    char *owned[NT_MODEL_FILES];
};

/* Opens `path`: a directory (config.json required, the other files optional, then
 * model.safetensors or its shards), a .nemo file or a GGUF file (src/model/gguf_model.h). n_threads verify a .nemo's checksums. */
nemotron_status nt_model_source_open(struct nt_model_source *s, const char *path, int n_threads,
                                     struct nt_err *err);
void nt_model_source_close(struct nt_model_source *s);

/* A carried file by name (e.g. "tokenizer.json"); NULL when absent. */
const uint8_t *nt_model_source_file(const struct nt_model_source *s, const char *name, size_t *len);

#endif /* NT_SOURCE_H */
