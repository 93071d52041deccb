/* SPDX-License-Identifier: MIT */
/*
 * sharing: what one network's modules share with the other instances when state.driver is
 * redis (docs/high-availability.md): the replay memory (every entry a write stores, and
 * every entry another instance stored, given to bm_replay_restore) and the producer memory
 * (slot -> the node that produced the block served, by its configured id: a record naming
 * no configured upstream is ignored), the nodes' SSZ refusals per endpoint (broadcast's
 * memory), the read path's sticky clients (client -> node, by configured id), and the
 * response cache's second tier. The transport is
 * state/shared.h; this module only says what a record means, on both sides.
 */
#ifndef BM_SHARING_H
#define BM_SHARING_H

#include <uv.h>

#include "app/config.h"
#include "base/buf.h"
#include "base/clock.h"
#include "cluster/pool.h"
#include "duties/broadcast.h"
#include "duties/produce.h"
#include "duties/replay.h"
#include "edge/cache.h"
#include "observe/observe.h"
#include "read/readpath.h"

typedef struct bm_sharing bm_sharing_t;

/**
 * Connects the network's replay and producer memories, broadcast and read path (borrowed; they must
 * outlive it) to Redis as `cfg->state` says, under the network id `network` ("default" when NULL).
 * NULL on allocation failure (the caller only calls it for driver redis).
 */
bm_sharing_t *bm_sharing_new(uv_loop_t *loop, bm_clock_t *clock, const bm_config_t *cfg,
                             const char *network, bm_pool_t *pool, bm_replay_t *replay,
                             bm_produce_t *produce, bm_broadcast_t *bcast, bm_readpath_t *readpath);

/** The response cache's second tier (bm_cache_tier_t, `ud` = the sharing): entries under
 *  "<prefix><network>:cache:<cache key>", immutable ones without expiry, chain-relative ones
 *  with their time to live. */
int bm_sharing_cache_get(void *ud, const char *key, size_t n, bm_cache_tier_done_fn done,
                         void *ctx);
void bm_sharing_cache_put(void *ud, const char *key, size_t n, const char *rec, size_t len,
                          uint32_t ttl_ms);

/** A producer record's value: "<upstream id> <0x state root>" or "<upstream id> -". */
void bm_sharing_producer_format(bm_str_t *out, const char *id, const uint8_t *state_root);

/** Reads a producer record's value back: the id (NUL-terminated) and the state root when
 *  there is one (*has_root). Returns 0 or BM_EINVAL. */
int bm_sharing_producer_parse(const char *v, size_t len, char id[128], uint8_t state_root[32],
                              bool *has_root);

/** Shares the duty journal of `observe` (borrowed; NULL: stops): every duty read served
 *  here is published, every one another instance served is journaled here. */
void bm_sharing_set_observe(bm_sharing_t *s, bm_observe_t *observe);

/** Writes every local record (replay entries, producer slots, sticky clients) to Redis,
 *  newer wins, as when Redis returns after an outage; nothing while it is not available
 *  (the return writes them then). A reload calls it for the networks it keeps. */
void bm_sharing_write_back(bm_sharing_t *s);

/** The status page's "state" section (`ud` = the sharing). */
void bm_sharing_status_json(bm_str_t *out, void *ud);

/** At shutdown, once nothing makes records any more: hands the records still waiting for
 *  their answers to go out, and those waiting for their batch window, to Redis now, and
 *  calls done(ud) when Redis answered them all, or bound_ms passed (bm_shared_flush); at
 *  once, from this call, when there is no Redis. */
void bm_sharing_flush(bm_sharing_t *s, uint32_t bound_ms, void (*done)(void *ud), void *ud);

/** Detaches from the memories and closes the connections; run the loop afterwards. NULL is
 *  ignored. */
void bm_sharing_free(bm_sharing_t *s);

#endif /* BM_SHARING_H */
