/* SPDX-License-Identifier: MIT */
/*
 * events: the cluster's event stream, GET /eth/v1/events?topics=...
 *
 * A validator client subscribes to one beaconmux as if it were one beacon node. What it
 * receives is the cluster's view, not any single node's:
 *   - `head` / `head_v2` when the cluster head moves (the head tracker decides; an
 *     optimistic copy never goes out), and a second `head_v2` when the cluster head's
 *     payload becomes full (Gloas); the data is the announcing node's own, the other
 *     topic's form synthesised from it when that node sent only one;
 *   - `chain_reorg` only when the cluster head re-orgs;
 *   - every other topic from the nodes' streams, first copy wins: a bounded window of
 *     keys (topic + keyed hash of the data in canonical key order) suppresses the copies
 *     the other nodes send later.
 * Topics the nodes' main streams (the monitor's) do not carry are fetched on a second
 * stream per node, opened while some subscriber wants them, for the topics that node was
 * seen to accept (each topic is probed alone first, so that a topic one node refuses or
 * hangs on can neither touch its main stream nor the other extra topics).
 *
 * Every event is serialised once, as `event: <topic>\ndata: <one-line JSON>\n\n` (no `id:`
 * lines), into one immutable buffer written to every subscriber that asked for the topic.
 * A `:` comment goes out every keepalive period. A subscriber whose unsent bytes pass
 * subscriber_max_pending is dropped (a log line, a counter) so that it can neither grow
 * memory nor slow the others. docs/events.md says why.
 */
#ifndef BM_EVENTS_H
#define BM_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "cluster/chain.h"
#include "cluster/discovery.h"
#include "cluster/head.h"
#include "cluster/monitor.h"
#include "cluster/pool.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"

/** The topics of the Beacon API event stream (apis/eventstream/index.yaml). */
typedef enum bm_topic {
    BM_TOPIC_HEAD = 0,
    BM_TOPIC_HEAD_V2,
    BM_TOPIC_BLOCK,
    BM_TOPIC_BLOCK_GOSSIP,
    BM_TOPIC_ATTESTATION,
    BM_TOPIC_SINGLE_ATTESTATION,
    BM_TOPIC_VOLUNTARY_EXIT,
    BM_TOPIC_BLS_TO_EXECUTION_CHANGE,
    BM_TOPIC_PROPOSER_SLASHING,
    BM_TOPIC_ATTESTER_SLASHING,
    BM_TOPIC_FINALIZED_CHECKPOINT,
    BM_TOPIC_CHAIN_REORG,
    BM_TOPIC_CONTRIBUTION_AND_PROOF,
    BM_TOPIC_LIGHT_CLIENT_FINALITY_UPDATE,
    BM_TOPIC_LIGHT_CLIENT_OPTIMISTIC_UPDATE,
    BM_TOPIC_PAYLOAD_ATTRIBUTES,
    BM_TOPIC_DATA_COLUMN_SIDECAR,
    BM_TOPIC_EXECUTION_PAYLOAD,
    BM_TOPIC_EXECUTION_PAYLOAD_GOSSIP,
    BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE,
    BM_TOPIC_EXECUTION_PAYLOAD_BID,
    BM_TOPIC_PAYLOAD_ATTESTATION_MESSAGE,
    BM_TOPIC_FAST_CONFIRMATION,
    BM_TOPIC_PROPOSER_PREFERENCES,
    BM_TOPIC_COUNT
} bm_topic_t;

/** A set of topics: bit (1u << topic). */
typedef uint32_t bm_topic_mask_t;

#define BM_TOPIC_BIT(t) ((bm_topic_mask_t)1u << (t))
#define BM_TOPIC_ALL ((bm_topic_mask_t)((1u << BM_TOPIC_COUNT) - 1u))

/** The spec's name of a topic ("head_v2"); "" for a bad value. */
const char *bm_topic_name(bm_topic_t t);

/** Parses an exact topic name s[0..n). Returns 0 or BM_EINVAL. */
int bm_topic_parse(const char *s, size_t n, bm_topic_t *out);

/**
 * Parses the `topics` of a query string (the part after '?', without it): the repeated
 * form (topics=head&topics=block), the comma form (topics=head,block), both mixed, values
 * percent-decoded (topics=head%2Cblock). Other parameters are ignored; a topic named twice
 * counts once. Returns 0 with *mask set; BM_EINVAL when a name is not a topic of the spec
 * (an empty one included), with that name, percent-decoded and cut to bad_cap - 1 bytes,
 * in bad (NUL-terminated; may be NULL); BM_ENOTFOUND when no topic is named at all.
 */
int bm_events_parse_topics(const char *query, size_t len, bm_topic_mask_t *mask, char *bad,
                           size_t bad_cap);

/**
 * Serialises one event as `event: <topic>\ndata: <data as one-line JSON>\n\n` into a new
 * buffer (refs = 1, caller owns it). NULL when data is not valid JSON or on no memory.
 */
bm_buf_t *bm_events_serialise(const char *topic, const char *data, size_t len);

typedef struct bm_events_opts {
    uint32_t keepalive_ms; /* ':' comment interval (events.keepalive; 0: default) */
    uint64_t
        subscriber_max_pending; /* unsent bytes: subscriber dropped (events.subscriberMaxPending) */
    uint32_t dedup_window;      /* events remembered for first-copy-wins (events.dedupWindow) */
    uint32_t headers_timeout_ms;       /* events.headersTimeout (0: not set): a probe's response
                                          head within this, never less than two slots; extra
                                          streams wait at least their idle timeout (a node may
                                          send its head only with its first event) */
    uint32_t connect_timeout_ms;       /* extra streams and probes (timeouts.connect) */
    uint32_t extra_idle_ms;            /* extra streams: longest silence before a reconnect;
                                          rare topics are quiet, so longer than the main
                                          stream's (default 60000) */
    uint32_t reprobe_ms;               /* a combined extra stream refused again within this
                                          does not re-probe its topics (default 60000) */
    uint32_t linger_ms;                /* an extra topic nobody wants any more is kept this
                                          long before its streams shrink (default 1000) */
    uint32_t coalesce_ms;              /* with many subscribers, other topics' events wait up
                                          to this for the head that follows them, so both
                                          leave in one write per subscriber (default 3) */
    uint32_t coalesce_min_subscribers; /* ... from this many subscribers on (default 64;
                                          0: never) */
} bm_events_opts_t;

/** Counters for the status page and the tests (monotonic unless marked "now"). */
typedef struct bm_events_stats {
    uint64_t subscribers;   /* now */
    uint64_t subscribed;    /* accepted since start */
    uint64_t rejected;      /* requests answered 400 (bad or missing topics) */
    uint64_t events_out;    /* events written to subscribers (one per subscriber) */
    uint64_t bytes_out;     /* their bytes */
    uint64_t serialised;    /* distinct events serialised (one buffer each) */
    uint64_t dropped;       /* subscribers dropped for falling behind */
    uint64_t keepalives;    /* ':' comments written (one per subscriber) */
    uint64_t heads;         /* cluster heads emitted */
    uint64_t payload_heads; /* second head_v2 (payload full) emitted */
    uint64_t reorgs;        /* chain_reorg emitted */
    uint64_t heads_unsent;  /* cluster heads without any usable node data (not emitted) */
    uint64_t node_events;   /* events received from nodes (main and extra streams) */
    uint64_t duplicates;    /* copies suppressed by the dedup window */
    uint64_t untrusted;     /* events dropped: optimistic data or an untrusted node */
    uint64_t shadow_events; /* events of shadow nodes, left out entirely (not in node_events) */
    uint64_t bad_events;    /* events dropped: unknown topic or invalid JSON */
    uint64_t extra_streams; /* extra streams open now (all nodes) */
    uint64_t probes;        /* topic probes started */
    uint64_t unsupported;   /* (node, topic) pairs found unsupported */
} bm_events_stats_t;

typedef struct bm_events bm_events_t;

/** Fills `o` with the defaults. */
void bm_events_opts_default(bm_events_opts_t *o);

/**
 * The cluster stream, its keepalive, coalescing and reconcile timers on `clock` (borrowed;
 * it outlives the stream). `opts` may be NULL (defaults). Nothing is attached yet:
 * see the bm_events_attach_* functions. NULL on no memory.
 */
bm_events_t *bm_events_new(bm_clock_t *clock, const bm_events_opts_t *opts);

/**
 * A tap on the stream: `fn` sees every event the cluster stream emits, subscribers or not,
 * after the trust check and the first-copy window (a finalized_checkpoint from a trusted
 * node, once), as (topic, data JSON, length); borrowed for the call. One tap; NULL
 * removes it. It must not free the module.
 */
typedef void (*bm_events_tap_fn)(bm_topic_t t, const char *data, size_t len, void *ud);
void bm_events_set_tap(bm_events_t *ev, bm_events_tap_fn fn, void *ud);

/**
 * Listens to the head tracker (bm_head_listen; not owned; must outlive the events
 * module or be detached by bm_events_free): cluster head moves, payload becomes full.
 * Also used to judge whether a node's events are trusted (not forked, optimistic or
 * time-discrepant). Returns 0 or BM_ENOMEM.
 */
int bm_events_attach_head(bm_events_t *ev, bm_head_t *head);

/**
 * The nodes and the upstream client for the extra streams (both not owned, must outlive
 * the module). Without them only the main streams' topics are served.
 */
void bm_events_attach_nodes(bm_events_t *ev, bm_upstream_t *up, bm_pool_t *pool);

/**
 * Where the chain comes from (fork names for synthesised head_v2, epochs): discovery's
 * chain information, read when needed (not owned; must outlive the module).
 */
void bm_events_attach_discovery(bm_events_t *ev, const bm_discovery_t *disc);

/** The chain when no discovery is attached (tests); copied. NULL forgets it. */
void bm_events_set_chain(bm_events_t *ev, const bm_chain_info_t *chain);

/** Registers GET /eth/v1/events on `r`. Returns 0 or a bm_router_add error. */
int bm_events_register(bm_events_t *ev, bm_router_t *r);

/** The route handler itself (ud: the bm_events_t). */
void bm_events_route(bm_req_t *req, const bm_route_params_t *params, void *ud);

/**
 * One event of `node`, parsed by the monitor (the bm_monitor_event_fn signature; ud: the
 * bm_events_t); the event is only read. head, head_v2 and chain_reorg are never forwarded
 * as such (the tracker decides them); the others go out first copy wins.
 */
void bm_events_node_event(size_t node, const bm_node_event_t *e, void *ud);

/**
 * The same for an event still in text form (the extra streams' events, tests): `topic`
 * is NUL-terminated, `data` JSON text; parsed once, then as bm_events_node_event.
 */
void bm_events_node_text(size_t node, const char *topic, const char *data, size_t len, void *ud);

/**
 * `node`'s main stream went up or down (the bm_monitor_conn_fn signature; ud: the
 * bm_events_t). Up again, the node may have been restarted or upgraded: topics it refused
 * are probed again and its extra streams reconnect without waiting for their backoff.
 * Until the first call a node counts as up.
 */
void bm_events_node_conn(size_t node, bool up, void *ud);

/**
 * Ends every subscriber's stream (cleanly: the last chunk) and refuses new ones with 503;
 * stops the extra streams (NULL is ignored). For a graceful shutdown: call before
 * bm_server_shutdown, so the server need not wait its grace period for streams that never end.
 */
void bm_events_shutdown(bm_events_t *ev);

/** The counters (borrowed; updated in place). */
const bm_events_stats_t *bm_events_stats(const bm_events_t *ev);

/**
 * Detaches from the tracker, ends subscribers, stops streams and timers,
 * and frees the module once its handles have closed: run the loop afterwards. NULL is
 * ignored. Not from inside one of its own callbacks. The monitor has no way to forget a
 * listener: stop it (bm_monitor_stop) before freeing this module.
 */
void bm_events_free(bm_events_t *ev);

#endif /* BM_EVENTS_H */
