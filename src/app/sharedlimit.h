/* SPDX-License-Identifier: MIT */
/*
 * sharedlimit: the global rate limits (rateLimit.global, rateLimit.duties.global) held by
 * all instances together when state.driver is redis (docs/high-availability.md).
 *
 * A request is still judged at once by the instance's own global bucket: nothing waits for
 * Redis. Every 100 ms each instance tells Redis how many tokens its bucket gave since it last
 * told, and one Lua script takes them from a token bucket in Redis (same rate and burst,
 * refilled on Redis's clock, atomic) and answers what is left; the instance's bucket then
 * keeps at most that, less what it gave meanwhile. So the instances together admit the
 * global rate, with at most 100 ms of each instance's admissions beyond it; when Redis is
 * not available each instance limits alone (the global rate each) until it is back.
 *
 * The per-client buckets (rateLimit.perClient, rateLimit.duties.perClient, a key's own
 * rate) are shared the same way, one Redis bucket per client and class: every 100 ms each
 * instance tells, for every client it admitted in the period (at most 1,024 per period),
 * how many tokens that client's bucket gave, and caps the client's bucket with the answer.
 * A client that spreads its requests over several instances gets its rate once, not once
 * per instance.
 */
#ifndef BM_SHAREDLIMIT_H
#define BM_SHAREDLIMIT_H

#include <uv.h>

#include "app/config.h"
#include "edge/front.h"

typedef struct bm_sharedlimit bm_sharedlimit_t;

/** Shares `front`'s global and per-client buckets (borrowed; it must outlive this) through
 *  the Redis of `cfg->state.redis`. NULL when there is no limit to share, or on no memory. */
bm_sharedlimit_t *bm_sharedlimit_new(uv_loop_t *loop, const bm_config_t *cfg, bm_front_t *front);

/** Stops sharing and closes the connection and timer (run the loop, then the memory goes).
 *  NULL is ignored. */
void bm_sharedlimit_free(bm_sharedlimit_t *s);

#endif /* BM_SHAREDLIMIT_H */
