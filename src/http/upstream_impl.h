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
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "http/upstream.h"

/** The first member of every transport's transfer struct. */
struct bm_xfer {
    bool native; /* true: h1client (http://); false: libcurl (upstream_curl.c) */
};

/** What a transport hands bm_xfer_result_fill about a transfer that ended. */
typedef struct bm_xfer_end {
    int err;            /* 0 when a complete response arrived, else a BM_E* code */
    const char *cause;  /* with err: the transport's words for it, masked into the detail */
    const char *secret; /* the URL's secret, masked out of the cause (NULL: none) */
    bool stream;        /* streamed: no body to take */
    bool head_done;     /* the final head arrived */
    int status;
    bm_hdrs_t *hdrs;
    bm_str_t *body;             /* buffered mode: the bytes received */
    uint64_t start_us, head_us; /* bm_clock_mono_us at the start and at the head */
} bm_xfer_end_t;

/**
 * Both transports end a transfer the same way: the masked cause in detail[0..n) ("" without
 * an error), a buffered transfer's body taken from e->body (when there is no memory for it the
 * transfer fails and the detail says so), the headers of a head that never completed
 * cleared, the times measured. The caller runs on_done with *res, then unrefs res->body.
 */
void bm_xfer_result_fill(bm_xfer_result_t *res, const bm_xfer_end_t *e, char *detail, size_t n);

#endif /* BM_UPSTREAM_IMPL_H */
