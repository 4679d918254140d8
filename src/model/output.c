/* output.c - the checks before an output file is written (output.h says why). */
#include "output.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* 1 when a and b are the same file. */
static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* The first file of `input` (itself, or a regular file directly in it when it is a directory)
 * that is the file *target; its path in name (or "" when none). */
static void find_input(const char *input, const struct stat *target, char *name, size_t cap) {
    name[0] = 0;
    struct stat sb;
    if (stat(input, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        if (same_file(&sb, target)) snprintf(name, cap, "%s", input);
        return;
    }
    DIR *d = opendir(input);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", input, e->d_name) >= (int)sizeof p) continue;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && same_file(&sb, target)) {
            snprintf(name, cap, "%s", p);
            break;
        }
    }
    closedir(d);
}

nemotron_status nt_output_target(const char *path, const char *input, char **out, struct nt_err *err) {
    *out = NULL;
    if (!path || !path[0]) return nt_fail(err, NEMOTRON_ERR_ARG, "output path is empty");
    struct stat lsb, sb;
    char resolved[PATH_MAX];
    const char *t = path;
    if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        if (!realpath(path, resolved))
            return nt_fail(err, NEMOTRON_ERR_IO, "%s: a symbolic link to nothing that can be written (%s)", path,
                           strerror(errno));
        t = resolved;
    }
    nemotron_status st = NEMOTRON_OK;
    if (stat(t, &sb) == 0) {
        char name[PATH_MAX];
        if (S_ISDIR(sb.st_mode))
            st = nt_fail(err, NEMOTRON_ERR_IO, "%s: is a directory, not a file name for the output", path);
        else if (!S_ISREG(sb.st_mode))
            st = nt_fail(err, NEMOTRON_ERR_IO,
                         "%s: is not a regular file (a device, a fifo or a socket): the output is written as a new "
                         "file and renamed into place, which would replace it",
                         path);
        else if (input && (find_input(input, &sb, name, sizeof name), name[0]))
            st = nt_fail(err, NEMOTRON_ERR_IO, "%s: is the input %s: writing there would destroy what is read", path,
                         name);
    }
    if (!st) {
        *out = nt_strdup(t);
        if (!*out) st = nt_fail(err, NEMOTRON_ERR_NOMEM, "%s: out of memory", path);
    }
    return st;
}
