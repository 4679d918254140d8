/* model.c - the public model handle: load a checkpoint, describe it, free it.
 *
 * Loading is the loud place: the config is parsed and validated, every tensor the config
 * implies is checked before anything is computed, and limits of this build (the widest head the
 * CPU kernels hold, the device) are checked here, so model code may trust every dimension.
 * A failed load leaves a handle holding only the message.
 */
#include "engine.h"

#include "../backend_open.h"
#include "../quant/ggml_blocks.h"
#include "../quant/quant.h"

#include <errno.h>
#include <json.h>
#include <stdio.h>
#include <sys/stat.h>

const char *nemotron_status_str(nemotron_status s) {
    switch (s) {
    case NEMOTRON_OK: return "ok";
    case NEMOTRON_ERR_IO: return "i/o error";
    case NEMOTRON_ERR_FORMAT: return "malformed file";
    case NEMOTRON_ERR_CONFIG: return "invalid config";
    case NEMOTRON_ERR_TENSOR: return "tensor mismatch";
    case NEMOTRON_ERR_ARG: return "invalid argument";
    case NEMOTRON_ERR_CONTEXT: return "context length exceeded";
    case NEMOTRON_ERR_NOMEM: return "out of memory";
    case NEMOTRON_ERR_UNSUPPORTED: return "unsupported";
    case NEMOTRON_ERR_INTERNAL: return "internal error";
    case NEMOTRON_ERR_DEVICE: return "device error";
    case NEMOTRON_ERR_NUMERIC: return "non-finite values";
    }
    return "unknown status";
}

const char *nemotron_version(void) { return "0.1.0"; }

nemotron_model_params nemotron_model_default_params(void) {
    nemotron_model_params p = {.n_threads = 0, .device = NULL};
    return p;
}

static nemotron_status check_build_limits(const struct nt_config *c, struct nt_err *err) {
    if (c->head_dim > NT_MAX_HEAD_DIM || c->mamba_head_dim > NT_MAX_HEAD_DIM)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "head_dim %d / mamba_head_dim %d: this build holds heads of at most %d",
                       c->head_dim, c->mamba_head_dim, NT_MAX_HEAD_DIM);
    if (c->n_routed_experts > NT_MAX_EXPERTS)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED,
                       "n_routed_experts %d: this build routes at most %d experts",
                       c->n_routed_experts, NT_MAX_EXPERTS);
    if (c->conv_kernel > NT_MAX_CONV_KERNEL)
        return nt_fail(err, NEMOTRON_ERR_UNSUPPORTED, "conv_kernel %d: this build holds at most %d taps",
                       c->conv_kernel, NT_MAX_CONV_KERNEL);
    return NEMOTRON_OK;
}

/* Makes every weight resident on the backend: each matrix's bytes, and the small-vector arena
 * (each vector pointer moves with it). The CPU backend hands back the same host pointers. */
struct upload_ctx {
    struct nt_backend *be;
    const float *host_arena, *resident_arena;
    int failed;
    uint64_t uploaded;                /* bytes made resident so far */
};

static void upload_matrix(struct nt_matrix *mx, void *ctx) {
    struct upload_ctx *u = ctx;
    if (u->failed) return;
    uint64_t bytes = nt_matrix_bytes(mx->dtype, mx->rows, mx->cols);
    const void *r = u->be->ops->upload(u->be, mx->data, (size_t)bytes);
    if (r) {
        mx->data = r;
        u->uploaded += bytes;
    } else {
        u->failed = 1;
    }
}

static void count_matrix(struct nt_matrix *mx, void *ctx) {
    *(uint64_t *)ctx += nt_matrix_bytes(mx->dtype, mx->rows, mx->cols);
}

static void rebase_vector(const float **v, void *ctx) {
    struct upload_ctx *u = ctx;
    if (*v) *v = u->resident_arena + (*v - u->host_arena);
}

static nemotron_status upload_weights(nemotron_model *m) {
    struct nt_weights *w = &m->w;
    struct upload_ctx u = {.be = m->be, .host_arena = w->arena};
    u.resident_arena = m->be->ops->upload(m->be, w->arena, w->arena_floats * sizeof(float));
    if (!u.resident_arena) u.failed = 1;
    else nt_weights_for_each(w, upload_matrix, rebase_vector, &u);
    if (u.failed && m->be->fault[0])
        return nt_fail(&m->err, NEMOTRON_ERR_DEVICE, "uploading the weights: %s", m->be->fault);
    if (u.failed) {
        uint64_t need = w->arena_floats * sizeof(float);
        nt_weights_for_each(w, count_matrix, NULL, &need);
        return nt_fail(&m->err, NEMOTRON_ERR_NOMEM,
                       "not enough %s memory for the weights: they need %.3f GB, %.3f GB were "
                       "placed when %s", m->be->ops->name, need / 1e9, u.uploaded / 1e9,
                       m->be->alloc_error[0] ? m->be->alloc_error : "an allocation failed");
    }
    return NEMOTRON_OK;
}

/* The ids generation stops on: eos_token_id of generation_config.json (an int or a list) when
 * the model carries that file, else config.json's. A malformed file is an error, not ignored. */
static nemotron_status read_stop_ids(nemotron_model *m, const char *path) {
    m->n_stop = 0;
    for (int i = 0; i < m->cfg.n_eos; i++) m->stop_ids[m->n_stop++] = m->cfg.eos_token_id[i];
    size_t len;
    const uint8_t *text = nt_model_source_file(&m->src, "generation_config.json", &len);
    if (!text) return NEMOTRON_OK;
    json_tokener *tok = json_tokener_new();
    json_object *root = tok ? json_tokener_parse_ex(tok, (const char *)text, (int)len) : NULL;
    json_tokener_free(tok);
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return nt_fail(&m->err, NEMOTRON_ERR_FORMAT, "%s: generation_config.json: not a JSON object", path);
    }
    json_object *eos;
    nemotron_status st = NEMOTRON_OK;
    if (json_object_object_get_ex(root, "eos_token_id", &eos) && !json_object_is_type(eos, json_type_null)) {
        int is_list = json_object_is_type(eos, json_type_array);
        size_t n = is_list ? json_object_array_length(eos) : 1;
        if (n > NT_MAX_EOS) n = NT_MAX_EOS;
        m->n_stop = 0;
        for (size_t i = 0; i < n && !st; i++) {
            json_object *v = is_list ? json_object_array_get_idx(eos, i) : eos;
            int64_t id = json_object_get_int64(v);
            if (!json_object_is_type(v, json_type_int) || id < 0 || id >= m->cfg.vocab_size)
                st = nt_fail(&m->err, NEMOTRON_ERR_CONFIG,
                             "%s: generation_config.json: eos_token_id must be token ids in [0, %d)",
                             path, m->cfg.vocab_size);
            else
                m->stop_ids[m->n_stop++] = (int32_t)id;
        }
    }
    json_object_put(root);
    return st;
}

static nemotron_status load(nemotron_model *m, const char *path, const nemotron_model_params *p) {
    nemotron_status st = nt_backend_open(p->device, p->n_threads, &m->be, &m->err);
    if (st) return st;
    /* the checksums of a .nemo are verified on the host's threads whatever the device */
    int host_threads = p->n_threads > 0 ? p->n_threads : nt_physical_cores();
    st = nt_model_source_open(&m->src, path, host_threads, &m->err);
    if (st) return st;
    m->cfg = m->src.cfg;
    if ((st = check_build_limits(&m->cfg, &m->err))) {
        nt_err_prefix(&m->err, "%s: config.json: ", path);
        return st;
    }
    if ((st = read_stop_ids(m, path))) return st;
    if ((st = nt_weights_bind(&m->w, &m->cfg, &m->src.table, &m->err))) {
        nt_err_prefix(&m->err, "%s: ", path);
        return st;
    }
    /* the backend's own limits, before gigabytes go to the device */
    nt_forward_init(&m->fwd, &m->cfg, &m->w, m->be);
    if (m->be->ops->check_model && (st = m->be->ops->check_model(m->be, &m->fwd, &m->err))) {
        nt_err_prefix(&m->err, "%s: ", path);
        return st;
    }
    return upload_weights(m);
}

nemotron_status nemotron_model_load(const char *path, const nemotron_model_params *params,
                                    nemotron_model **out) {
    if (!out) return NEMOTRON_ERR_ARG;
    nemotron_model *m = nt_calloc(1, sizeof *m);
    *out = m;
    if (!m) return NEMOTRON_ERR_NOMEM;
    nemotron_model_params defaults = nemotron_model_default_params();
    if (!path) return nt_fail(&m->err, NEMOTRON_ERR_ARG, "model path is NULL");
    nemotron_status st = load(m, path, params ? params : &defaults);
    if (st != NEMOTRON_OK) {
        /* keep only the message: release everything else now */
        nt_weights_free(&m->w);
        nt_model_source_close(&m->src);
        if (m->be) m->be->ops->destroy(m->be);
        m->be = NULL;
        return st;
    }
    m->loaded = 1;
    m->err.msg[0] = 0;
    return NEMOTRON_OK;
}

void nemotron_model_free(nemotron_model *m) {
    if (!m) return;
    nt_weights_free(&m->w);
    nt_model_source_close(&m->src);
    if (m->be) m->be->ops->destroy(m->be);
    nt_free(m);
}

const char *nemotron_model_errmsg(const nemotron_model *m) {
    return m ? m->err.msg : "out of memory";
}

/* The getters take NULL (and a handle that holds only a load failure) as "no model": 0 or "". */
int nemotron_model_vocab_size(const nemotron_model *m) { return m && m->loaded ? m->cfg.vocab_size : 0; }
int nemotron_model_n_threads(const nemotron_model *m) { return m && m->loaded ? m->be->n_threads : 0; }
int nemotron_model_hidden_size(const nemotron_model *m) { return m && m->loaded ? m->cfg.hidden_size : 0; }
int nemotron_model_n_layer(const nemotron_model *m) { return m && m->loaded ? m->cfg.n_layer : 0; }
int nemotron_model_mtp_layers(const nemotron_model *m) { return m && m->loaded ? m->cfg.n_mtp_layer : 0; }
int nemotron_model_ctx_train(const nemotron_model *m) { return m && m->loaded ? m->cfg.max_position_embeddings : 0; }
const char *nemotron_model_pattern(const nemotron_model *m) { return m && m->loaded ? m->cfg.pattern : ""; }
uint64_t nemotron_model_active_weight_bytes(const nemotron_model *m) {
    return m && m->loaded ? m->w.active_bytes : 0;
}
uint64_t nemotron_model_weight_bytes(const nemotron_model *m) { return m && m->loaded ? m->w.total_bytes : 0; }
uint64_t nemotron_model_n_params(const nemotron_model *m) { return m && m->loaded ? m->w.n_params : 0; }

double nemotron_model_device_read_bandwidth(const nemotron_model *m) {
    if (!m || !m->loaded || !m->be->ops->read_bandwidth) return 0;
    return m->be->ops->read_bandwidth(m->be);
}

const char *nemotron_model_device(const nemotron_model *m) { return m && m->loaded ? m->be->device : ""; }

int nemotron_model_stop_ids(const nemotron_model *m, int32_t *ids, int n_max) {
    if (!m || !m->loaded) return 0;
    for (int i = 0; i < m->n_stop && i < n_max; i++) ids[i] = m->stop_ids[i];
    return m->n_stop;
}

int nemotron_model_eos_ids(const nemotron_model *m, int32_t *ids, int n_max) {
    if (!m || !m->loaded) return 0;
    for (int i = 0; i < m->cfg.n_eos && i < n_max; i++) ids[i] = m->cfg.eos_token_id[i];
    return m->cfg.n_eos;
}

nemotron_status nemotron_model_token_embedding(const nemotron_model *m, int32_t token, float *out) {
    if (!m || !m->loaded || !out || token < 0 || token >= m->cfg.vocab_size) return NEMOTRON_ERR_ARG;
    const struct nt_matrix *e = &m->w.embeddings;
    int H = (int)e->cols;
    int block_elems, block_bytes;
    if (nt_ggml_block_facts(e->dtype, &block_elems, &block_bytes, NULL)) {
        /* a GGUF table (Q4_K, ...): the row block by block through a small buffer, decoded exactly */
        const uint8_t *row = (const uint8_t *)e->data + (size_t)token * nt_matrix_bytes(e->dtype, 1, H);
        uint8_t block[256];
        NT_ASSERT(block_bytes <= (int)sizeof block);
        for (int b = 0; b < H / block_elems; b++) {
            m->be->ops->to_host(m->be, block, row + (size_t)b * block_bytes, (size_t)block_bytes);
            if (m->be->fault[0]) return NEMOTRON_ERR_DEVICE;
            nt_ggml_dequant_blocks(e->dtype, block, 1, out + (size_t)b * block_elems);
        }
        return NEMOTRON_OK;
    }
    size_t esize = e->dtype == NT_DTYPE_F32 ? 4 : 2; /* otherwise embeddings are f32, f16 or bf16 */
    /* the stored row lands in the front of out, then is widened in place from the back (element c
     * is read at byte esize*c before any write at 4*c' >= 4*(c+1) could reach it) */
    m->be->ops->to_host(m->be, out, (const uint8_t *)e->data + (size_t)token * H * esize, (size_t)H * esize);
    if (m->be->fault[0]) return NEMOTRON_ERR_DEVICE;
    if (esize == 4) return NEMOTRON_OK;
    for (int c = H - 1; c >= 0; c--) {
        uint16_t v;
        memcpy(&v, (const uint8_t *)out + 2 * (size_t)c, 2);
        out[c] = e->dtype == NT_DTYPE_BF16 ? nt_bf16_to_f32(v) : nt_f16_to_f32(v);
    }
    return NEMOTRON_OK;
}
