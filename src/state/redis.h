/* SPDX-License-Identifier: MIT */
/*
 * redis: one asynchronous connection to a Redis server, hiredis's protocol code driven by
 * our own libuv adapter (a uv_poll on the connection's socket).
 *
 * Why our own adapter: the one hiredis ships for libuv reports neither a connection that
 * never completes nor a server that stops answering, and beaconmux must notice both at
 * once to fall back to its local state. Here every command carries a deadline (`timeout_ms`
 * after it was sent); replies come in order on one connection, so one timer watches the
 * oldest command: when it is late the server is slow or gone, every command in flight is
 * answered with BM_ETIMEDOUT and the connection is dropped and made again. Connecting has
 * the same deadline. Reconnects back off from 100 ms to 5 s (doubling), so a Redis that is
 * down costs one connection attempt per few seconds.
 *
 * A command is never queued while the connection is not ready: bm_redis_command returns
 * BM_EUNAVAIL at once and the caller uses its local state. Commands sent one after the
 * other without waiting for replies are pipelined (hiredis writes them in one go).
 * After a connection is made, AUTH (a password, with a user name for Redis 6 ACLs) and
 * SELECT (a database number other than 0) go first; the connection is ready (`up`) when
 * both were answered OK.
 *
 * A subscribing connection (bm_redis_subscribe) is a connection of its own: Redis accepts
 * no other command on it. Its channel is subscribed again after every reconnect.
 *
 * Heartbeat: a server that stops answering while nothing is asked of it (SIGSTOPped, a
 * network black hole) would otherwise go unnoticed, above all by a subscribing connection,
 * which only listens. Every second a ready connection asks something: an idle command
 * connection sends PING, a subscribing one SUBSCRIBEs to its channel again (hiredis 0.14 has
 * no way to route a PING's answer there), and either drops the connection when the answer
 * does not come within the heartbeat's bound, max(timeout_ms, 1 s): nothing waits on a
 * heartbeat, so a Redis briefly not scheduled on a loaded machine is not taken for a hung
 * one. A command sent behind a heartbeat's PING keeps its own deadline (timeout_ms). The
 * drop is reported like any other (state_fn, logged once) and the connection is made again.
 *
 * TLS: Debian 12 packages hiredis 0.14, which has no TLS (hiredis-ssl came with 1.0), so
 * "rediss://" URLs are refused by bm_redis_parse_url.
 *
 * Threading: the loop's thread only. Callbacks never run inside bm_redis_command.
 */
#ifndef BM_REDIS_H
#define BM_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"

typedef struct bm_redis bm_redis_t;

/** Where and how to connect; the strings are copied by bm_redis_new. */
typedef struct bm_redis_opts {
    char host[256];
    int port;            /* default 6379 */
    char user[128];      /* "" : AUTH with the password alone */
    char password[256];  /* "" : no AUTH */
    int db;              /* SELECT db when not 0 */
    uint32_t timeout_ms; /* connect and per-command deadline */
} bm_redis_opts_t;

/**
 * Parses "redis://[user:password@]host[:port][/db]" into `o` (host, port, user, password,
 * db; timeout untouched). Returns NULL when fine, else a static sentence saying why not
 * ("rediss:// (TLS) is not supported by this build's hiredis", ...).
 */
const char *bm_redis_parse_url(const char *url, bm_redis_opts_t *o);

/** A reply, borrowed for the duration of the callback only. */
typedef struct bm_redis_reply bm_redis_reply_t;

typedef enum bm_redis_type {
    BM_REDIS_STRING = 0,
    BM_REDIS_ARRAY,
    BM_REDIS_INTEGER,
    BM_REDIS_NIL,
    BM_REDIS_STATUS,
    BM_REDIS_ERROR,
} bm_redis_type_t;

bm_redis_type_t bm_redis_reply_type(const bm_redis_reply_t *r);
/** STRING, STATUS, ERROR: the bytes (not NUL-terminated for binary strings) and *len. */
const char *bm_redis_reply_str(const bm_redis_reply_t *r, size_t *len);
/** INTEGER: the value. */
long long bm_redis_reply_int(const bm_redis_reply_t *r);
/** ARRAY: the number of elements, and element i. */
size_t bm_redis_reply_count(const bm_redis_reply_t *r);
const bm_redis_reply_t *bm_redis_reply_at(const bm_redis_reply_t *r, size_t i);

/**
 * A command's answer: `status` 0 and `reply` (never NULL; may be an ERROR reply), or a
 * negative BM_E* code (BM_ETIMEDOUT, BM_ECONNRESET, BM_ECANCELED when the client closed)
 * and NULL. For a subscription, called for every message (an ARRAY "message", channel,
 * payload) and with an error when the connection drops (the subscription comes back by
 * itself after the reconnect).
 */
typedef void (*bm_redis_reply_fn)(void *ud, int status, const bm_redis_reply_t *reply);

/** The connection became ready (`up`) or was lost; `why` says why it went down. */
typedef void (*bm_redis_state_fn)(void *ud, bool up, const char *why);

/**
 * A client that starts connecting at once (timers on `clock`, the socket on `loop`; both
 * borrowed). `name` (copied) prefixes its log lines ("state"). `state_fn` (may be NULL)
 * hears every change of readiness. NULL on allocation failure.
 */
bm_redis_t *bm_redis_new(uv_loop_t *loop, bm_clock_t *clock, const char *name,
                         const bm_redis_opts_t *opts, bm_redis_state_fn state_fn, void *ud);

/** True while commands can be sent. */
bool bm_redis_up(const bm_redis_t *r);

/**
 * Sends a command (`argc` arguments, each argv[i] of argvlen[i] bytes, copied). `fn(ud, ...)`
 * runs exactly once, later. Returns 0, BM_EUNAVAIL when the connection is not ready (fn will
 * not run), or BM_ENOMEM.
 */
int bm_redis_command(bm_redis_t *r, int argc, const char **argv, const size_t *argvlen,
                     bm_redis_reply_fn fn, void *ud);

/**
 * Makes this a subscribing connection on `channel` (copied): every message runs `fn`.
 * Call once, before or after the connection is ready. Returns 0 or BM_ENOMEM.
 */
int bm_redis_subscribe(bm_redis_t *r, const char *channel, bm_redis_reply_fn fn, void *ud);

/** Counters for the status page. */
typedef struct bm_redis_stats {
    uint64_t connects;    /* connections that became ready */
    uint64_t failures;    /* connection attempts that failed or timed out */
    uint64_t drops;       /* ready connections lost (error, timeout) */
    uint64_t commands;    /* commands sent */
    uint64_t timeouts;    /* commands answered BM_ETIMEDOUT, heartbeats left unanswered */
    uint64_t unavailable; /* commands refused with BM_EUNAVAIL */
} bm_redis_stats_t;

void bm_redis_stats(const bm_redis_t *r, bm_redis_stats_t *out);

/**
 * Closes the connection: commands in flight are answered BM_ECANCELED (inside this call),
 * no state callback runs afterwards, and the memory is released once the loop ran (the
 * socket's handle closes asynchronously). NULL is ignored.
 */
void bm_redis_free(bm_redis_t *r);

#endif /* BM_REDIS_H */
