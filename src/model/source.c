/* source.c - opening a model directory or a .nemo into config + tensor table + carried files. */
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "gguf.h"
#include "gguf_model.h"
#include "nemo.h"

const char *const nt_model_file_names[NT_MODEL_FILES] = {
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json",
};

/* A carried text file is at most this large (tokenizer.json of a 262k vocabulary is ~20 MB). */
#define MAX_CARRIED_BYTES ((size_t)256 << 20)

static nemotron_status open_dir(struct nt_model_source *s, const char *dir, struct nt_err *err) {
    char path[4096];
    for (int i = 0; i < NT_MODEL_FILES; i++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, nt_model_file_names[i]) >= (int)sizeof path)
            return nt_fail(err, NEMOTRON_ERR_ARG, "model path is too long");
        struct stat sb;
        if (i > 0 && stat(path, &sb) != 0 && errno == ENOENT) continue;   /* optional */
        size_t len;
        nemotron_status st = nt_read_file(path, MAX_CARRIED_BYTES, "a model's text file", &s->owned[i], &len, err);
        if (st) return st;
        s->file_bytes[i] = (const uint8_t *)s->owned[i];
        s->file_lens[i] = len;
    }
    return nt_table_open_dir(&s->table, dir, err);
}

/* Whether a file starts as a safetensors container does: an 8-byte header length that fits the
 * file, then '{'. A file that does not is no .nemo at all (a config.json given by mistake, say),
 * and the error says so rather than what the container reader found wrong. */
static int looks_like_safetensors(const char *path, uint64_t file_size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1; /* let the container reader report it */
    uint8_t b[9];
    int ok = fread(b, 1, 9, f) == 9;
    fclose(f);
    if (!ok) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n <= file_size - 8 && b[8] == '{';
}

static nemotron_status open_nemo(struct nt_model_source *s, const char *path, uint64_t file_size,
                                 int n_threads, struct nt_err *err) {
    s->is_nemo = 1;
    if (!looks_like_safetensors(path, file_size))
        return nt_fail(err, NEMOTRON_ERR_IO,
                       "%s: not a directory, and not a .nemo or GGUF file (expected a Hugging Face "
                       "model directory, a .nemo written by 'nemotron convert' or a GGUF)", path);
    nemotron_status st = nt_nemo_open(&s->table, path, n_threads, err);
    if (st) return st;
    for (int i = 0; i < NT_MODEL_FILES; i++)
        s->file_bytes[i] = nt_table_file(&s->table, nt_model_file_names[i], &s->file_lens[i]);
    if (!s->file_bytes[0])
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: the .nemo carries no config.json", path);
    return NEMOTRON_OK;
}

nemotron_status nt_model_source_open(struct nt_model_source *s, const char *path, int n_threads,
                                     struct nt_err *err) {
    memset(s, 0, sizeof *s);
    nt_table_init(&s->table);
    struct stat sb;
    if (stat(path, &sb) != 0) return nt_fail(err, NEMOTRON_ERR_IO, "%s: %s", path, strerror(errno));
    nemotron_status st;
    if (S_ISDIR(sb.st_mode)) st = open_dir(s, path, err);
    else if (S_ISREG(sb.st_mode) && nt_path_is_gguf(path)) st = nt_gguf_source_open(s, path, err);
    else if (S_ISREG(sb.st_mode)) st = open_nemo(s, path, (uint64_t)sb.st_size, n_threads, err);
    else
        st = nt_fail(err, NEMOTRON_ERR_IO,
                     "%s: neither a directory nor a file (expected a Hugging Face model directory "
                     "or a .nemo)", path);
    if (!st) {
        char name[4200];
        snprintf(name, sizeof name, "%s%s", path,
                 s->gguf ? ": GGUF metadata (as config.json)" : s->is_nemo ? ": config.json" : "/config.json");
        st = nt_config_parse((const char *)s->file_bytes[0], s->file_lens[0], name, &s->cfg, err);
    }
    if (st) nt_model_source_close(s);
    return st;
}

void nt_model_source_close(struct nt_model_source *s) {
    nt_table_close(&s->table);
    nt_gguf_close(s->gguf);
    for (int i = 0; i < NT_MODEL_FILES; i++) nt_free(s->owned[i]);
    memset(s, 0, sizeof *s);
}

const uint8_t *nt_model_source_file(const struct nt_model_source *s, const char *name, size_t *len) {
    for (int i = 0; i < NT_MODEL_FILES; i++)
        if (!strcmp(name, nt_model_file_names[i])) {
            *len = s->file_lens[i];
            return s->file_bytes[i];
        }
    *len = 0;
    return NULL;
}
