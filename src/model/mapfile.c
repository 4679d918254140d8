/* mapfile.c - a model file mapped read-only in place (mapfile.h). */
#include "model/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* O_NONBLOCK: opening a FIFO given by mistake must not hang; the fstat check then refuses it.
 * It changes nothing for regular files. */
#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK)

nemotron_status nt_map_file(const char *path, size_t min_size, const char *what, void **map,
                            size_t *size, struct nt_err *err) {
    *map = NULL;
    *size = 0;
    int fd = open(path, OPEN_FLAGS);
    if (fd < 0) return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size < min_size) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_FORMAT, "%s: file is %lld bytes, shorter than %s", path,
                       (long long)sb.st_size, what);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return nt_fail(err, NEMOTRON_ERR_IO, "%s: %lld bytes do not fit the address space", path,
                       (long long)sb.st_size);
    }
    /* mmap refuses a length of 0: an empty file (min_size 0) maps to nothing */
    if (sb.st_size == 0) {
        close(fd);
        return NEMOTRON_OK;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file */
    if (m == MAP_FAILED)
        return nt_fail(err, NEMOTRON_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    *map = m;
    *size = (size_t)sb.st_size;
    return NEMOTRON_OK;
}
