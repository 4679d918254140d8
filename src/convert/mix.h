/* mix.h - which stored form each tensor of a Nemotron-H checkpoint gets in a .nemo.
 *
 * One place decides it for the converter and for synthetic models, from the tensor's Hugging
 * Face name and shape (MODEL.md 2.2 names every tensor), so a converted and a synthetic model
 * of one shape are laid out alike. The default is FORMATS.md's mix.
 */
#ifndef NT_MIX_H
#define NT_MIX_H

#include "../model/safetensors.h"
#include "nemotron.h"

/* The role a tensor plays, as far as storage is concerned. */
enum nt_role {
    NT_ROLE_EXPERT,       /* a routed expert's up or down projection */
    NT_ROLE_PROJECTION,   /* every other weight matrix a product reads: Mamba in/out, attention
                           * q/k/v/o, shared expert, dense MLP, latent fc1/fc2, lm_head, MTP eh */
    NT_ROLE_ROUTER,       /* the MoE gate: computed in f32 */
    NT_ROLE_EMBEDDINGS,   /* one row read per position */
    NT_ROLE_SMALL         /* norms, conv taps, A_log, D, dt_bias, biases: f32 */
};

enum nt_role nt_tensor_role(const char *name, int ndim);

/* The stored form of a tensor of this role and shape under `quant`. `source` is the dtype it
 * has in the checkpoint (NEMOTRON_QUANT_SOURCE keeps it; embeddings keep f16 when given f16,
 * else become bf16; a GGUF's block types, docs/FORMATS-GGUF.md, are kept under every mix: they
 * are quantized already). A packed choice that the shape does not admit falls back: q4tp -> q8_2f
 * -> bf16. */
enum nt_dtype nt_stored_form(enum nt_role role, enum nt_dtype source, int64_t rows, int64_t cols,
                             nemotron_quant quant);

/* "default", "q8_2f", "bf16", "source"; NULL for a value outside the enum. */
const char *nt_quant_name(nemotron_quant q);

#endif /* NT_MIX_H */
