/* SPDX-License-Identifier: MIT */
/*
 * fdlimit: the process's file descriptors against what the configuration may need at once.
 * Every client connection, every connection to a node and every event stream is a
 * descriptor; a process that runs out cannot accept (libuv then closes new connections
 * silently) nor reach its nodes. So at start beaconmux raises its soft limit to the hard
 * one, as servers do, and warns when even the hard limit is short of what
 * server.maxConnections and the upstreams need.
 */
#ifndef BM_FDLIMIT_H
#define BM_FDLIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "app/config.h"

/** What bm_fdlimit_raise found and did. */
typedef struct bm_fdlimit {
    uint64_t need;        /* descriptors the configuration may use at once */
    uint64_t soft_before; /* the soft limit found (RLIM_INFINITY as UINT64_MAX) */
    uint64_t soft;        /* the soft limit now */
    uint64_t hard;        /* the hard limit */
    bool raised;          /* the soft limit was raised */
    bool short_of_need;   /* the soft limit now is below `need` */
} bm_fdlimit_t;

/** Descriptors `cfg` may use at once: the client connections (server.maxConnections), each
 *  node's pool (upstreams[].maxConnections, in every network), a few per node for its event streams
 * and probes, and a margin for the listener, the loop and logs. */
uint64_t bm_fdlimit_need(const bm_config_t *cfg);

/**
 * Raises the soft RLIMIT_NOFILE to the hard one when it is lower, and reports into `out`
 * how it stands against `need`. Returns 0, or a BM_E* code when the limits cannot be read
 * (then `out` says nothing). A failed raise is not an error: `out` shows the limit kept.
 */
int bm_fdlimit_raise(uint64_t need, bm_fdlimit_t *out);

#endif /* BM_FDLIMIT_H */
