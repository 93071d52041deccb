/* SPDX-License-Identifier: MIT */
/*
 * fdlimit: the file descriptor budget at start (see fdlimit.h).
 */
#include "app/fdlimit.h"

#include <sys/resource.h>

#include "base/err.h"

#define PER_NODE 8 /* a node's event streams (main and extra topics), probes, a reconnect */
#define MARGIN 64  /* the listener, the loop's own descriptors, logs, a metrics listener */

uint64_t bm_fdlimit_need(const bm_config_t *cfg)
{
    uint64_t need = (uint64_t)cfg->server.max_connections + MARGIN;
    size_t nets = bm_config_network_count(cfg);
    for (size_t n = 0; n < nets; n++) {
        bm_config_t net;
        bm_config_network(cfg, n, &net);
        for (size_t i = 0; i < net.n_upstreams; i++)
            need += (uint64_t)net.upstreams[i].max_connections + PER_NODE;
    }
    return need;
}

static uint64_t as_u64(rlim_t v)
{
    return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t)v;
}

int bm_fdlimit_raise(uint64_t need, bm_fdlimit_t *out)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return BM_EIO;
    *out = (bm_fdlimit_t){.need = need,
                          .soft_before = as_u64(rl.rlim_cur),
                          .soft = as_u64(rl.rlim_cur),
                          .hard = as_u64(rl.rlim_max)};
    if (rl.rlim_cur != RLIM_INFINITY &&
        (rl.rlim_max == RLIM_INFINITY || rl.rlim_cur < rl.rlim_max)) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
            out->soft = out->hard;
            out->raised = true;
        }
    }
    out->short_of_need = out->soft < need;
    return 0;
}
