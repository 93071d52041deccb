/* SPDX-License-Identifier: MIT */
/*
 * upstream_impl: what the two transports behind bm_upstream share with its dispatcher
 * (upstream.c). Every transfer a transport hands out starts with a `struct bm_xfer`, so
 * bm_upstream_cancel/pause/resume can find the transport of any bm_xfer_t without a
 * lookup. Internal to src/http/.
 */
#ifndef BM_UPSTREAM_IMPL_H
#define BM_UPSTREAM_IMPL_H

#include <stdbool.h>

/** The first member of every transport's transfer struct. */
struct bm_xfer {
    bool native; /* true: h1client (http://); false: libcurl (upstream_curl.c) */
};

#endif /* BM_UPSTREAM_IMPL_H */
