/* SPDX-License-Identifier: MIT */
/*
 * monitor: listens to every node and feeds the cluster head tracker. Per node it runs
 * one main event stream (nodestream) for the topics beaconmux itself needs: `head_v2`
 * (falling back to `head` when the node answers 400), `block`, `finalized_checkpoint`,
 * `chain_reorg`, and `execution_payload_available` once the chain is in or near Gloas.
 * Each event is parsed and fed to the tracker as docs/head-tracker.md's wiring table
 * says; the tracker's header requests are answered with GET /eth/v1/beacon/headers/{root};
 * on every (re)connect the node's current head (GET /eth/v1/beacon/headers/head) is fed
 * as a head event, and so is the answer of the same request whenever the node's stream
 * does not deliver its heads (not up yet, down, or the node has not followed the cluster
 * head a quarter slot after it moved; src/cluster/headpoll.h says when), so that the
 * tracker knows every node's head within a slot whether its stream works or not; a head
 * request unanswered after bm_headpoll_probe_ms makes the node unreachable until it
 * answers again (a stopped node is not ready for new work); /eth/v1/node/syncing
 * is polled once per slot per node for health; the tracker is ticked at every slot start
 * and at its own next wake-up; the tracker's clock follows discovery's chain information.
 * Then the event and connection listeners run (the cluster event stream, replay of
 * validator state). A cluster head missing while the chain runs is logged (rate-limited).
 * docs/monitor.md says why.
 */
#ifndef BM_MONITOR_H
#define BM_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "cluster/discovery.h"
#include "cluster/head.h"
#include "cluster/health.h"
#include "cluster/pool.h"
#include "http/upstream.h"

#define BM_MONITOR_MAX_LISTENERS 8

typedef struct bm_monitor bm_monitor_t;

typedef struct bm_monitor_opts {
    uint32_t connect_timeout_ms; /* streams and requests (default timeouts.connect) */
    uint32_t headers_timeout_ms; /* events.headersTimeout (0: not set); the streams wait for
                                    their response head at least two slots and at least their
                                    idle timeout (see nodestream.h) */
    uint32_t request_timeout_ms; /* headers and syncing requests (default timeouts.read) */
    uint32_t idle_slots;         /* stream idle timeout in slots (default 2, minimum 2) */
    uint32_t gloas_lead_epochs;  /* subscribe to execution_payload_available this many
                                    epochs before the Gloas fork epoch (default 1) */
} bm_monitor_opts_t;

/** Fills `o` with the defaults. */
void bm_monitor_opts_default(bm_monitor_opts_t *o);

/**
 * One event of a node's stream, parsed once: every listener reads the same object rather
 * than parse the text again. All of it is borrowed for the call.
 */
typedef struct bm_node_event {
    const char *topic;       /* as the node named it (NUL-terminated) */
    const char *data;        /* its data as one line of JSON (NUL-terminated) */
    size_t len;              /* strlen(data) */
    struct json_object *doc; /* data parsed: a JSON object */
} bm_node_event_t;

/**
 * Every event of a node's main stream, after the tracker saw it. Events whose data is not
 * a valid JSON object are dropped before this (and counted).
 */
typedef void (*bm_monitor_event_fn)(size_t node, const bm_node_event_t *e, void *ud);

/**
 * A node's main stream came up (`up` true, after every (re)connect: replay state) or went
 * down (`up` false).
 */
typedef void (*bm_monitor_conn_fn)(size_t node, bool up, void *ud);

/** A node's stream, for the status page. */
typedef struct bm_monitor_node_info {
    bool connected;            /* the main stream is up */
    bool head_v2;              /* subscribed to head_v2 (false: fell back to head) */
    bool payload_topic;        /* execution_payload_available is in the topic list */
    uint64_t connects;         /* 200 answers since start */
    uint64_t failures;         /* failed attempts and dropped streams */
    uint64_t events;           /* events received */
    uint64_t bad_events;       /* events whose data could not be used */
    uint64_t up_since_ms;      /* wall time the current stream came up (0: down) */
    uint64_t last_event_ms;    /* wall time of the last event (0: never) */
    uint64_t syncing_polls;    /* /eth/v1/node/syncing requests sent */
    uint64_t header_fetches;   /* /eth/v1/beacon/headers/{root} requests sent */
    uint64_t head_polls;       /* /eth/v1/beacon/headers/head requests sent (at connect, and
                                  whenever the stream does not deliver) */
    uint64_t polled_heads;     /* their answers fed to the tracker */
    uint64_t poll_failures;    /* their failures */
    uint64_t unanswered;       /* polls unanswered after the probe time (bm_headpoll_probe_ms):
                                  each made the node unreachable */
    uint64_t last_poll_ms;     /* wall time of the last one sent (0: never) */
    const char *last_poll_why; /* why (bm_headpoll_reason_name, or "connect"); static */
    bool head_polled;          /* the tracker's head for this node came from a poll, and
                                  its stream has not announced that root since */
    int stream_state;          /* bm_nodestream_state_t of the main stream */
    uint64_t waiting_since_ms; /* wall time the stream's current attempt was sent, while it
                                  has received no response head yet (0: not waiting) */
    int last_err;              /* BM_E* of the stream's last failure (0: none) */
    int last_status;           /* HTTP status of the stream's last answer (0: none) */
} bm_monitor_node_info_t;

/**
 * A monitor over every node of `pool` (n nodes: the tracker must have at least n). Feeds
 * `head` (not owned), reports syncing answers to `health` (not owned), takes the chain
 * from `disc` (registers itself as discovery's chain listener) and asks discovery to
 * refresh a node whose stream reconnected. Time (the tracker's inputs, the slot timer, the
 * streams' timeouts) is read and armed on `clk`. All must outlive the monitor. Nothing is sent
 * before bm_monitor_start. NULL on bad arguments or no memory.
 */
bm_monitor_t *bm_monitor_new(bm_clock_t *clk, bm_upstream_t *up, bm_pool_t *pool,
                             bm_discovery_t *disc, bm_head_t *head, bm_health_t *health,
                             const bm_monitor_opts_t *opts);

/** Starts the streams, the slot timer and the syncing polls. Returns 0 or BM_E*. */
int bm_monitor_start(bm_monitor_t *m);

/**
 * Stops everything: streams, requests in flight, timers (no listener runs afterwards).
 * Handles close asynchronously: run the loop before bm_monitor_free.
 */
void bm_monitor_stop(bm_monitor_t *m);

/** Frees the monitor. Call after bm_monitor_stop and one loop run. NULL is ignored. */
void bm_monitor_free(bm_monitor_t *m);

/** Adds an event listener (at most BM_MONITOR_MAX_LISTENERS). 0 or BM_ENOMEM. */
int bm_monitor_on_event(bm_monitor_t *m, bm_monitor_event_fn fn, void *ud);

/** Adds a connection listener (at most BM_MONITOR_MAX_LISTENERS). 0 or BM_ENOMEM. */
int bm_monitor_on_connection(bm_monitor_t *m, bm_monitor_conn_fn fn, void *ud);

/** The tracker it feeds. */
bm_head_t *bm_monitor_head(bm_monitor_t *m);

/** `node`'s stream figures into `out`. 0 or BM_EINVAL. */
int bm_monitor_node_info(const bm_monitor_t *m, size_t node, bm_monitor_node_info_t *out);

/**
 * Whether the cluster head is unknown while the chain runs, at `now_ms` (the freshness
 * guarantee is off): true with `since_slot` (may be NULL) the first slot it was seen
 * missing in. False before genesis, before the chain is known, and with a cluster head.
 */
bool bm_monitor_head_missing(const bm_monitor_t *m, uint64_t now_ms, uint64_t *since_slot);

#endif /* BM_MONITOR_H */
