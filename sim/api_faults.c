/* SPDX-License-Identifier: MIT */
/*
 * api_faults: the faults a node's answers can carry before any route handler runs, for the
 * read path's tests and benchmark: throttling (429 with Retry-After) and pruned history
 * (404 for old blocks, headers and states, a custody 400 for old blob sidecars).
 */
#include <stdio.h>
#include <string.h>

#include "api_int.h"

/* A 429 with the node's Retry-After. */
void api_reply_throttled(ctx_t *x)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    char ra[24];
    if (x->n->behav.retry_after_s > 0) {
        snprintf(ra, sizeof ra, "%lld", (long long)x->n->behav.retry_after_s);
        bm_hdrs_add_z(&h, "Retry-After", ra);
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"code\":429,\"message\":\"Too many requests (simulated by throttle)\"}");
    api_reply_str(x, 429, &s, &h);
    bm_hdrs_dispose(&h);
}

/* With `prune`, what a path asks for that this node no longer keeps: a block, header, state
 * or blob sidecars named by a slot older than prune_slots below its current slot. Returns
 * the kind for the message, or NULL. */
const char *api_pruned(ctx_t *x, const char *path, size_t plen)
{
    static const struct {
        const char *prefix, *what;
    } hist[] = {
        {"/eth/v1/beacon/blob_sidecars/", "Blob sidecars"},
        {"/eth/v2/beacon/blocks/", "Block"},
        {"/eth/v1/beacon/blocks/", "Block"},
        {"/eth/v1/beacon/headers/", "Header"},
        {"/eth/v1/beacon/states/", "State"},
    };
    int64_t keep = x->n->behav.prune_slots;
    if (keep <= 0)
        return NULL;
    for (size_t i = 0; i < sizeof hist / sizeof hist[0]; i++) {
        size_t l = strlen(hist[i].prefix);
        if (plen <= l || memcmp(path, hist[i].prefix, l) != 0)
            continue;
        uint64_t slot = 0;
        size_t k = l;
        for (; k < plen && path[k] >= '0' && path[k] <= '9' && k - l < 19; k++)
            slot = slot * 10 + (uint64_t)(path[k] - '0');
        if (k == l || (k < plen && path[k] != '/'))
            return NULL; /* head, finalized, a root: kept */
        return slot + (uint64_t)keep < x->slot_now ? hist[i].what : NULL;
    }
    return NULL;
}
