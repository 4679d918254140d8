/* mapfile.h - a model file mapped read-only in place, for the readers that parse their files
 * over the mapping (safetensors.c, gguf.c): the same checks and messages for both.
 */
#ifndef NT_MAPFILE_H
#define NT_MAPFILE_H

#include <stddef.h>

#include "common.h"

/* Maps the regular file at path (PROT_READ, MAP_PRIVATE) into *map and *size, for munmap by the
 * caller. Errors name the path: cannot open or stat (NEMOTRON_ERR_IO), not a regular file (IO; a
 * FIFO does not block the open), larger than the address space (IO), shorter than min_size bytes
 * (NEMOTRON_ERR_FORMAT: "file is N bytes, shorter than <what>"), cannot mmap (IO). */
nemotron_status nt_map_file(const char *path, size_t min_size, const char *what, void **map,
                            size_t *size, struct nt_err *err);

#endif /* NT_MAPFILE_H */
