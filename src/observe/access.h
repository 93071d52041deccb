/* SPDX-License-Identifier: MIT */
/*
 * access: the access log (log.access): one line per request, as text or JSON as log.format
 * says, with the time (the logger's), the client's address, the method, the path with its
 * secrets masked, the status, the body bytes, the duration, the route class and the nodes
 * that served it.
 *
 * What is masked, so that a log shipped elsewhere carries no credential:
 *   - the value of a query parameter whose name says it is one (key, token, secret,
 *     password, auth, signature, credential: in any case, anywhere in the name);
 *   - a path segment that follows a segment named like that ("/key/<k>/...");
 *   - a path segment that looks like a generated key: 20 characters or more of letters,
 *     digits, '-', '_' and '.', with at least one letter and one digit, not 0x-hex (roots
 *     and public keys are public and kept).
 * Pure formatting on fixed buffers: no allocation per request.
 */
#ifndef BM_ACCESS_H
#define BM_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

#include "http/server.h"

/** Writes `target` with its secrets masked into out[0..cap) (cut to fit, NUL-terminated);
 *  returns the length written. */
size_t bm_access_mask_target(const char *target, char *out, size_t cap);

/**
 * Writes the fields of the line of `s` (node names from ids[0..n_ids)) into out[0..cap):
 * as text, or as JSON object members when `json`. Returns the length written.
 */
size_t bm_access_fields(const bm_req_summary_t *s, const char *const *ids, size_t n_ids, bool json,
                        char *out, size_t cap);

/** Writes the line of `s` through the logger, in its format (base/log.h bm_log_record). */
void bm_access_log(const bm_req_summary_t *s, const char *const *ids, size_t n_ids);

#endif /* BM_ACCESS_H */
