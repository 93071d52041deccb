/* SPDX-License-Identifier: MIT */
/*
 * statefile: whole-file reads and crash-safe whole-file writes, for state kept across
 * restarts (app/statedir.h owns the files; the duty journal may use the same calls).
 *
 * A write never leaves a half-written file under the final name: the bytes go to a
 * temporary file beside it ("<name>.tmp.<pid>"), which is fsync'ed, renamed over the
 * final name, and then the directory is fsync'ed so the rename itself is durable. Any
 * failure on the way (a full disk, a read-only file system, a file size limit) removes
 * the temporary file and leaves the previous file untouched.
 */
#ifndef BM_STATEFILE_H
#define BM_STATEFILE_H

#include <stddef.h>

#include "base/buf.h"

/**
 * Writes p[0..n) to `dir`/`name` atomically as described above. Returns 0, BM_EINVAL (a
 * path too long), or BM_EIO; on BM_EIO, `why` (may be NULL, `why_len` bytes) names the
 * step and the system's reason, e.g. "write: No space left on device".
 */
int bm_statefile_write(const char *dir, const char *name, const void *p, size_t n, char *why,
                       size_t why_len);

/**
 * Reads the whole file `path` into `out` (appended). Returns 0, BM_ENOTFOUND when it does
 * not exist, BM_ETOOBIG when it is larger than `max` bytes, BM_ENOMEM, or BM_EIO
 * (unreadable; `why` says why, as above).
 */
int bm_statefile_read(const char *path, size_t max, bm_str_t *out, char *why, size_t why_len);

#endif /* BM_STATEFILE_H */
