/* SPDX-License-Identifier: MIT */
/*
 * nodestream: one long-lived, reconnecting SSE subscription to one beacon node
 * (GET /eth/v1/events?topics=a&topics=b, one `topics=` parameter per topic, the spec's
 * form: a real Lodestar node hangs on the comma form and on topics it does not know).
 *
 * The stream is a libcurl transfer in stream mode with no total timeout, parsed
 * incrementally with our SSE parser. It keeps itself alive:
 *   - a stream that was sent and has received nothing yet is waiting, not failed: real
 *     nodes (Lodestar, on Node.js) send their response head only together with their first
 *     event. Only no response head at all within headers_timeout_ms counts as a failed
 *     attempt (a node that hangs); owners make that at least two slots
 *     (bm_nodestream_head_wait_ms), so a node announcing its next block is never cut;
 *   - no byte at all (comments included) for idle_timeout_ms (at least two slots) drops
 *     the stream and reconnects;
 *   - a failed attempt or a dropped stream reconnects after a backoff of 1 s doubling to
 *     16 s, with jitter (each delay is drawn in [3/4, 1] of its step), reset to the first
 *     step once a stream stayed up for stable_ms (5 s), or waited that long for its head
 *     without the connection failing (the node is there; it had nothing to say);
 *   - a 400 answer means the node refused the topic list: it is reported to the owner
 *     (on_rejected, with the node's error body) instead of being retried blindly. The owner
 *     changes the topics (bm_nodestream_set_topics: head_v2 -> head, drop a topic), which
 *     reconnects at once, or stops the stream; when it does neither, the same topics are
 *     tried again only after the longest backoff step.
 * Other answers than 200 (404, 5xx, ...) and network errors are plain failures.
 *
 * Every callback runs from the loop; from inside any of them the owner may call every
 * function here, bm_nodestream_free included (the struct goes away later, in a close
 * callback, and no callback of this stream runs after a stop or a free).
 */
#ifndef BM_NODESTREAM_H
#define BM_NODESTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "base/hdrs.h"
#include "http/upstream.h"

#define BM_NODESTREAM_MAX_TOPICS 32    /* topics in one stream */
#define BM_NODESTREAM_MAX_TOPIC_LEN 64 /* characters in one topic name */

typedef struct bm_nodestream bm_nodestream_t;

typedef struct bm_nodestream_opts {
    uint32_t connect_timeout_ms; /* TCP/TLS connect (default timeouts.connect) */
    uint32_t headers_timeout_ms; /* no response head within this fails the attempt (default
                                    24000: two 12 s slots; see bm_nodestream_head_wait_ms) */
    uint32_t idle_timeout_ms;    /* longest silence, comments count as bytes (default 24000:
                                    two 12 s slots; the owner sets it from the slot) */
    uint32_t backoff_min_ms;     /* first reconnect step (default 1000) */
    uint32_t backoff_max_ms;     /* last step (default 16000) */
    uint32_t stable_ms;          /* up (or connected and waiting for the response head) this
                                    long resets the backoff (default 5000) */
    size_t max_event_bytes;      /* one event's data; larger ones are dropped (default 1 MiB) */
    const char *path;            /* default "/eth/v1/events"; copied */
} bm_nodestream_opts_t;

/** The connection state (one setter in nodestream.c logs transitions at debug level). */
typedef enum bm_nodestream_state {
    BM_NODESTREAM_IDLE = 0,   /* created, not started */
    BM_NODESTREAM_CONNECTING, /* request sent, waiting for the response head (which some
                                 nodes send only with their first event) */
    BM_NODESTREAM_UP,         /* 200 received, events flowing */
    BM_NODESTREAM_BACKOFF,    /* waiting before the next attempt */
    BM_NODESTREAM_STOPPED,    /* bm_nodestream_stop, or freed */
} bm_nodestream_state_t;

/** Why a stream went down or an attempt failed. */
typedef struct bm_nodestream_failure {
    int err;            /* BM_E*: ETIMEDOUT (headers or idle), EPROTO (status not 200),
                           ECONNREFUSED, ECONNRESET (the node closed the stream), ... */
    int status;         /* HTTP status when one arrived, else 0 */
    bool was_up;        /* the stream had delivered its 200 head */
    bool head_timeout;  /* no byte at all (not even the response head) within the head wait:
                           a hang, or a node that had nothing to say; Lodestar before 1.10
                           also answers a topic it does not know this way */
    const char *detail; /* human-readable cause, borrowed for the callback */
    uint32_t retry_ms;  /* the next attempt starts after this long */
} bm_nodestream_failure_t;

typedef struct bm_nodestream_cbs {
    /**
     * An event: topic ("message" when the node sent none) and data (the `data:` lines
     * joined with "\n"), both NUL-terminated and borrowed for the call.
     */
    void (*on_event)(bm_nodestream_t *s, const char *topic, size_t topic_len, const char *data,
                     size_t data_len, void *ud);
    /** The node answered 200: the stream is up (after every (re)connect). */
    void (*on_up)(bm_nodestream_t *s, void *ud);
    /**
     * An attempt failed or an up stream dropped; a reconnect is scheduled (f->retry_ms)
     * unless the owner stops or changes the stream from here. Not called for 400.
     */
    void (*on_down)(bm_nodestream_t *s, const bm_nodestream_failure_t *f, void *ud);
    /**
     * The node answered 400 to the topic list: `body` (may be empty, at most 4 KiB,
     * borrowed) is its error, usually {"code":400,"message":"..."} naming the topic.
     */
    void (*on_rejected)(bm_nodestream_t *s, int status, const char *body, size_t body_len,
                        void *ud);
} bm_nodestream_cbs_t;

/** Counters and timings, for status pages and tests. */
typedef struct bm_nodestream_stats {
    uint64_t attempts;   /* requests started */
    uint64_t connects;   /* 200 heads received */
    uint64_t failures;   /* attempts failed or streams dropped (400 not counted) */
    uint64_t rejections; /* 400 answers */
    uint64_t header_timeouts;
    uint64_t idle_timeouts;
    uint64_t events;
    uint64_t dropped_events; /* over max_event_bytes */
    uint64_t bytes;
    uint64_t up_since_ms;      /* wall time of the current stream's 200 (0: not up) */
    uint64_t last_byte_ms;     /* wall time of the last byte received (0: never) */
    uint64_t attempt_since_ms; /* wall time the current attempt was sent, while it waits for
                                  its response head (0: not waiting) */
    uint32_t step;             /* backoff steps taken since the last stable stream */
    uint32_t last_retry_ms;    /* the last backoff delay drawn */
    int last_err;              /* BM_E* of the last failure (0: none) */
    int last_status;           /* HTTP status of the last answer (0: none) */
} bm_nodestream_stats_t;

/** Fills `o` with the defaults above. */
void bm_nodestream_opts_default(bm_nodestream_opts_t *o);

/**
 * How long a stream may wait for its response head: `configured_ms` (events.headersTimeout;
 * 0: not set) but never less than two slots of `slot_ms` (0: slot unknown, two 12 s slots).
 * A node that sends its head only with its first event answers within a slot when blocks
 * come; two slots leave room for one empty slot. Pure; saturates at UINT32_MAX.
 */
uint32_t bm_nodestream_head_wait_ms(uint32_t configured_ms, uint32_t slot_ms);

/**
 * The backoff delay for failure number `step` (1 = the first failure after a stable
 * stream): min(min_ms * 2^(step-1), max_ms), scaled into [3/4, 1] of itself by `rnd`
 * (uniform over uint32_t). Pure; exposed for tests and status pages.
 */
uint32_t bm_nodestream_backoff_ms(const bm_nodestream_opts_t *o, uint32_t step, uint32_t rnd);

/**
 * A stream to the node at `base_url` (credentials allowed; copied), sending `extra`
 * (per-node headers such as API keys; copied; may be NULL), for `topics` (n_topics
 * names, 1..BM_NODESTREAM_MAX_TOPICS, each a non-empty token of [A-Za-z0-9_.-]; copied).
 * `cbs` is copied, `opts` may be NULL (defaults). Its timeouts and backoff run on `clock`
 * (borrowed): the clock and the upstream client must outlive the stream. Nothing is sent before
 * bm_nodestream_start. NULL on bad arguments or no memory.
 */
bm_nodestream_t *bm_nodestream_new(bm_clock_t *clock, bm_upstream_t *up, const char *base_url,
                                   const bm_hdrs_t *extra, const char *const *topics,
                                   size_t n_topics, const bm_nodestream_opts_t *opts,
                                   const bm_nodestream_cbs_t *cbs, void *ud);

/** Connects (now). Returns 0, BM_ECLOSED after stop or free, or BM_EINVAL when running. */
int bm_nodestream_start(bm_nodestream_t *s);

/**
 * Replaces the topic list (same rules as bm_nodestream_new) and, when the stream was
 * started, reconnects at once with it (after a 400, or to add a topic). The backoff step
 * is kept. Returns 0, BM_EINVAL or BM_ENOMEM (the old list stays).
 */
int bm_nodestream_set_topics(bm_nodestream_t *s, const char *const *topics, size_t n_topics);

/**
 * Drops the current stream and reconnects at once (e.g. the owner knows the node
 * restarted). Does nothing unless started. The backoff step is kept.
 */
void bm_nodestream_reconnect(bm_nodestream_t *s);

/**
 * Sets the idle timeout (e.g. two slots once the slot duration is known); applies to the
 * running stream from its next byte.
 */
void bm_nodestream_set_idle_timeout(bm_nodestream_t *s, uint32_t idle_timeout_ms);

/**
 * Sets the response-head limit (e.g. bm_nodestream_head_wait_ms once the slot duration is
 * known); applies to the attempt waiting now, counted from when it was sent.
 */
void bm_nodestream_set_headers_timeout(bm_nodestream_t *s, uint32_t headers_timeout_ms);

/** Stops for good: cancels the transfer and the timer. No callback runs afterwards. */
void bm_nodestream_stop(bm_nodestream_t *s);

/**
 * Stops (if needed) and frees the stream; the memory goes when its timer handle has
 * closed, so run the loop afterwards. NULL is ignored. Safe from inside a callback.
 */
void bm_nodestream_free(bm_nodestream_t *s);

/** The current state. */
bm_nodestream_state_t bm_nodestream_state(const bm_nodestream_t *s);

/** True while the stream is up (200 received, not dropped). */
bool bm_nodestream_connected(const bm_nodestream_t *s);

/** Number of topics, and topic i (borrowed until the list changes). */
size_t bm_nodestream_topic_count(const bm_nodestream_t *s);
const char *bm_nodestream_topic(const bm_nodestream_t *s, size_t i);

/** A copy of the counters. */
bm_nodestream_stats_t bm_nodestream_stats(const bm_nodestream_t *s);

/** "idle", "connecting", "up", "backoff", "stopped". */
const char *bm_nodestream_state_name(bm_nodestream_state_t st);

#endif /* BM_NODESTREAM_H */
