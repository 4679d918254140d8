/* ggml_blocks.c - ggml tensor types onto engine dtypes (minimal: the float types only). */
#include "ggml_blocks.h"

#include "../model/gguf.h"

int nt_dtype_of_ggml_type(uint32_t ggml_type, enum nt_dtype *out) {
    switch (ggml_type) {
    case NT_GGML_F32: *out = NT_DTYPE_F32; return 1;
    case NT_GGML_F16: *out = NT_DTYPE_F16; return 1;
    case NT_GGML_BF16: *out = NT_DTYPE_BF16; return 1;
    default: return 0;
    }
}
