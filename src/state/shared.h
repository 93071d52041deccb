/* SPDX-License-Identifier: MIT */
/*
 * shared: state that several beaconmux instances share through Redis (state.driver: redis),
 * as records: a topic ("replay.0", "producer"), a key within it, the wall time the record
 * was made (newer wins) and an opaque value. What a record means is the business of whoever
 * wires this module (app/sharing.c); this module only moves records and never trusts one
 * as anything but data.
 *
 * Records live under "<prefix><network>:<topic>:<key>" as "<time_ms> <value>", each with
 * a time to live; a write stores only when Redis holds nothing newer (one small Lua script,
 * atomic) and then publishes the record on "<prefix><network>:events", so that the other
 * instances act on it at once. Messages carry this instance's random id, and an instance
 * ignores its own.
 *
 * Never on a duty's wait: every operation is asynchronous with the short `timeout` of the
 * connection (state/redis.h), and while Redis is not available bm_shared_put returns at
 * once (the caller's local state is the truth meanwhile). When Redis becomes available
 * (at start and after each outage) the owner's `up` callback writes its local records back
 * (newer wins), and then every record Redis holds is delivered to `record` (SCAN + MGET,
 * pipelined): an instance that started alone, or missed messages, converges.
 */
#ifndef BM_SHARED_H
#define BM_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "state/redis.h"

typedef struct bm_shared bm_shared_t;

typedef struct bm_shared_opts {
    bm_redis_opts_t redis;
    char url_masked[512]; /* for the status page and logs */
    char prefix[128];     /* key prefix, e.g. "beaconmux:" */
    char network[64];     /* the network's id, e.g. "default" */
} bm_shared_opts_t;

/** A record from another instance (pub/sub) or from Redis (the load after connecting).
 *  Everything is borrowed for the call; `value` is not NUL-terminated. */
typedef void (*bm_shared_record_fn)(void *ud, const char *topic, const char *key, uint64_t time_ms,
                                    const char *value, size_t len);

/** Redis became available: write the local records back with bm_shared_put. */
typedef void (*bm_shared_up_fn)(void *ud);

/** Starts connecting (two connections: commands, and the subscription). `loop` and `clock`
 *  are borrowed. NULL on allocation failure. */
bm_shared_t *bm_shared_new(uv_loop_t *loop, bm_clock_t *clock, const bm_shared_opts_t *opts,
                           bm_shared_record_fn record, bm_shared_up_fn up, void *ud);

/**
 * Stores a record (`topic` and `key` without spaces or ':' in topic; `value` copied) for
 * `ttl_ms`, unless Redis holds a newer one, and publishes it. Returns 0 (queued: sent with
 * the other records of a 10 ms window, in one write, never within the turn that queued it;
 * the outcome is counted, not reported), BM_EUNAVAIL when Redis is not available (nothing
 * sent), or BM_ENOMEM. Never blocks, and never formats a Redis command inside the call.
 */
int bm_shared_put(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                  uint64_t ttl_ms, const char *value, size_t len);

/**
 * Publishes a record to the other instances without storing it (a fact that counts once,
 * such as a served duty: loading it again after a reconnect would count it twice). Lost
 * while Redis is not available. Returns 0, BM_EUNAVAIL or BM_ENOMEM. Never blocks.
 */
int bm_shared_publish(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                      const char *value, size_t len);

/** A raw value's lookup: `value` NULL when absent or on any failure. Borrowed for the call. */
typedef void (*bm_shared_got_fn)(void *ctx, const char *value, size_t len);

/**
 * Looks up the raw value under "<namespace><topic>:<key>" (no record time, no newer-wins:
 * the shared cache). Returns 0 and calls `got` once, later (never inside this call), or
 * BM_EUNAVAIL / BM_ENOMEM at once (got never runs).
 */
int bm_shared_get_raw(bm_shared_t *sh, const char *topic, const char *key, size_t key_len,
                      bm_shared_got_fn got, void *ctx);

/** Stores a raw value there for `ttl_ms` (0: no expiry), unpublished; the outcome is only
 *  counted. Returns 0, BM_EUNAVAIL or BM_ENOMEM. */
int bm_shared_put_raw(bm_shared_t *sh, const char *topic, const char *key, size_t key_len,
                      const char *value, size_t len, uint64_t ttl_ms);

/** True while Redis is available for commands. */
bool bm_shared_available(const bm_shared_t *sh);

/** Appends the status page's "state" section's fields ("driver":"redis",... without the
 *  braces: the owner adds its own). */
void bm_shared_status_fields(bm_str_t *out, const bm_shared_t *sh);

/** Appends the Prometheus families of the connections (observe/expo.h): whether each is
 *  available, its drops and its timeouts, and the records kept local meanwhile. */
void bm_shared_metrics(bm_str_t *out, const bm_shared_t *sh);

/**
 * At shutdown: sends every record waiting for its batch window now (and any queued later at
 * once), and calls done(ud) once each has been answered by Redis, Redis went away, or
 * bound_ms passed (logged with what was left). done runs from a timer of this module, never
 * from inside a Redis callback, so it may free `sh`. Records still reach Redis after a
 * SIGTERM: the last window's would otherwise be dropped with the process.
 */
void bm_shared_flush(bm_shared_t *sh, uint32_t bound_ms, void (*done)(void *ud), void *ud);

/** Closes both connections (commands in flight are cancelled inside this call when it is
 *  not made from a Redis callback) and frees once the loop ran (run it afterwards). NULL
 *  is ignored. */
void bm_shared_free(bm_shared_t *sh);

#endif /* BM_SHARED_H */
