/* SPDX-License-Identifier: MIT */
/*
 * statefile: atomic whole-file writes (temporary file, fsync, rename, fsync of the
 * directory) and bounded whole-file reads. See statefile.h.
 */
#include "base/statefile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

static int fail(char *why, size_t why_len, const char *step, int err)
{
    if (why && why_len)
        snprintf(why, why_len, "%s: %s", step, strerror(err));
    return BM_EIO;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int bm_statefile_write(const char *dir, const char *name, const void *p, size_t n, char *why,
                       size_t why_len)
{
    char final[PATH_MAX], tmp[PATH_MAX];
    int a = snprintf(final, sizeof final, "%s/%s", dir, name);
    int b = snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld", dir, name, (long)getpid());
    if (a < 0 || b < 0 || (size_t)a >= sizeof final || (size_t)b >= sizeof tmp) {
        if (why && why_len)
            snprintf(why, why_len, "path too long");
        return BM_EINVAL;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(why, why_len, "create", errno);
    int err = write_all(fd, p, n);
    const char *step = "write";
    if (!err && fsync(fd) != 0) {
        err = errno;
        step = "fsync";
    }
    if (close(fd) != 0 && !err) {
        err = errno; /* NFS and some file systems report a failed write only here */
        step = "close";
    }
    if (!err && rename(tmp, final) != 0) {
        err = errno;
        step = "rename";
    }
    if (err) {
        unlink(tmp);
        return fail(why, why_len, step, err);
    }
    /* the rename is in the directory: without this a crash may bring back the old file */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return fail(why, why_len, "open directory", errno);
    err = fsync(dfd) != 0 ? errno : 0;
    close(dfd);
    return err ? fail(why, why_len, "fsync directory", err) : 0;
}

int bm_statefile_read(const char *path, size_t max, bm_str_t *out, char *why, size_t why_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? BM_ENOTFOUND : fail(why, why_len, "open", errno);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fail(why, why_len, "stat", e);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (why && why_len)
            snprintf(why, why_len, "not a regular file");
        return BM_EIO;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return BM_ETOOBIG;
    }
    char chunk[65536];
    size_t total = 0;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return fail(why, why_len, "read", e);
        }
        if (r == 0)
            break;
        total += (size_t)r;
        if (total > max) { /* grew while we read it */
            close(fd);
            return BM_ETOOBIG;
        }
        bm_str_append(out, chunk, (size_t)r);
    }
    close(fd);
    return out->oom ? BM_ENOMEM : 0;
}
