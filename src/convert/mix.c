/* mix.c - the stored form of each tensor: its role from the name, then the mix's choice. */
#include "mix.h"

#include "../quant/ggml_blocks.h"
#include "../quant/quant.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

enum nt_role nt_tensor_role(const char *name, int ndim) {
    if (!strcmp(name, "backbone.embeddings.weight") || !strcmp(name, "backbone.embedding.weight"))
        return NT_ROLE_EMBEDDINGS;
    /* conv1d.weight is [CD, 1, K] and every vector is 1-D: only true matrices are products */
    if (ndim != 2 || !ends_with(name, ".weight")) return NT_ROLE_SMALL;
    if (ends_with(name, ".mixer.gate.weight")) return NT_ROLE_ROUTER;
    if (strstr(name, ".mixer.experts.")) return NT_ROLE_EXPERT;
    return NT_ROLE_PROJECTION;
}

static enum nt_dtype packed_or_fallback(enum nt_dtype want, int64_t rows, int64_t cols) {
    if (want == NT_DTYPE_Q4TP && !nt_format_accepts(NT_DTYPE_Q4TP, rows, cols, NULL)) want = NT_DTYPE_Q8_2F;
    if (want == NT_DTYPE_Q8_2F && !nt_format_accepts(NT_DTYPE_Q8_2F, rows, cols, NULL)) want = NT_DTYPE_BF16;
    return want;
}

enum nt_dtype nt_stored_form(enum nt_role role, enum nt_dtype source, int64_t rows, int64_t cols,
                             nemotron_quant quant) {
    /* a GGUF's block types are already quantized: any other form would quantize a second time */
    if (quant == NEMOTRON_QUANT_SOURCE || nt_dtype_is_ggml_block(source)) return source;
    switch (role) {
    case NT_ROLE_SMALL:
    case NT_ROLE_ROUTER: return NT_DTYPE_F32;
    case NT_ROLE_EMBEDDINGS: return source == NT_DTYPE_F16 ? NT_DTYPE_F16 : NT_DTYPE_BF16;
    case NT_ROLE_EXPERT:
    case NT_ROLE_PROJECTION:
        if (quant == NEMOTRON_QUANT_BF16) return NT_DTYPE_BF16;
        /* the default mix stores routed experts in q4tp; the other mixes treat them as any
         * projection */
        if (role == NT_ROLE_EXPERT && quant == NEMOTRON_QUANT_DEFAULT)
            return packed_or_fallback(NT_DTYPE_Q4TP, rows, cols);
        return packed_or_fallback(NT_DTYPE_Q8_2F, rows, cols);
    }
    return source;
}

const char *nt_quant_name(nemotron_quant q) {
    switch (q) {
    case NEMOTRON_QUANT_DEFAULT: return "default";
    case NEMOTRON_QUANT_Q8_2F: return "q8_2f";
    case NEMOTRON_QUANT_BF16: return "bf16";
    case NEMOTRON_QUANT_SOURCE: return "source";
    }
    return NULL;
}
