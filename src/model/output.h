/* output.h - where an output file the user named may be written.
 *
 * Every writer of the library and the command (.nemo files, .npy logits) writes a temporary file
 * beside the target and renames it over the target once complete, so a failure leaves the old
 * file or nothing. Renaming is only right for a regular file, though: renamed over /dev/null it
 * would replace the device, renamed over a symbolic link it would replace the link, and renamed
 * over an input (convert DIR -o DIR/model.safetensors) it would destroy the data being read.
 * nt_output_target resolves and checks the path first.
 */
#ifndef NT_OUTPUT_H
#define NT_OUTPUT_H

#include "../common.h"

/* The path to write for the user's `path`, in *out (nt_alloc'd; nt_free it): `path` itself, or
 * the file a symbolic link at `path` names (the link is followed, not replaced). Refused
 * (NEMOTRON_ERR_IO, the reason named): an existing target that is not a regular file (a device, a
 * fifo, a directory), a link that names nothing (kept on purpose, as GNU cp refuses to write
 * through a dangling link: its target may be a typo or a file since removed), and a target that
 * is the same file as `input` or, when `input` is a directory, as any file directly in it.
 * input may be NULL. */
nemotron_status nt_output_target(const char *path, const char *input, char **out, struct nt_err *err);

#endif /* NT_OUTPUT_H */
