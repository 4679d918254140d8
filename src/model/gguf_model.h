/* gguf_model.h - a llama.cpp GGUF file of a Nemotron-H (architectures nemotron_h and
 * nemotron_h_moe) opened as a model source: its metadata as the config, its tensors under the
 * Hugging Face names the binder walks, its tokenizer as a tokenizer.json.
 */
#ifndef NT_GGUF_MODEL_H
#define NT_GGUF_MODEL_H

#include "source.h"

/* Whether the file at path starts with GGUF's magic. */
int nt_path_is_gguf(const char *path);

/* Opens the GGUF at path (a split: its first part) into s (zeroed, its table initialised):
 * s->gguf holds the file; the carried files are config.json, generation_config.json,
 * tokenizer.json and tokenizer_config.json made from the metadata; the table holds views of the
 * tensors. Errors name the file and the GGUF key or tensor. */
nemotron_status nt_gguf_source_open(struct nt_model_source *s, const char *path, struct nt_err *err);
/* The same from a GGUF already open (fuzzing: one read from bytes), which s then owns: it is
 * closed with s (nt_model_source_close), also when this fails. */
struct nt_gguf;
nemotron_status nt_gguf_source_from(struct nt_model_source *s, struct nt_gguf *g, struct nt_err *err);

#endif /* NT_GGUF_MODEL_H */
