/* ggml_blocks.h - which ggml tensor types (GGUF's) the engine runs natively, and as which dtype.
 *
 * This is the minimal form: the float types map onto the engine's own F32, F16 and BF16, every
 * other type is reported unsupported. The block types (Q8_0, Q4_K, ...) come with their own
 * dtypes and products in a later version of this header.
 */
#ifndef NT_GGML_BLOCKS_H
#define NT_GGML_BLOCKS_H

#include <stdint.h>

#include "../model/safetensors.h"

/* The engine dtype holding tensors of ggml type `ggml_type` (enum nt_ggml_type, gguf.h) read in
 * place: 1 and *out set, or 0 when this build cannot run that type. */
int nt_dtype_of_ggml_type(uint32_t ggml_type, enum nt_dtype *out);

#endif /* NT_GGML_BLOCKS_H */
