/* SPDX-License-Identifier: MIT */
/*
 * url: the few URL operations a proxy needs: validate an upstream's base URL, join it
 * with a request path (the path is appended, never interpreted as a URL, so a client can
 * never make beaconmux contact anything but a configured node), and mask credentials
 * for logs and the status page.
 */
#ifndef BM_URL_H
#define BM_URL_H

#include <stdbool.h>

#include "buf.h"

/**
 * Appends base + path_and_query to `out`: the path is appended to the base URL's own
 * path (trailing and leading slashes merged), never interpreted as a URL. Returns 0, or
 * BM_EINVAL when `base` is not an absolute http(s) URL or the path does not start with '/'.
 */
int bm_url_join(bm_str_t *out, const char *base, const char *path_and_query);

/** Appends `url` to `out` with any password replaced by "***" (user names are kept). */
void bm_url_mask(bm_str_t *out, const char *url);

/** True when `url` is an absolute http:// or https:// URL with a host. */
bool bm_url_valid(const char *url);

#endif /* BM_URL_H */
