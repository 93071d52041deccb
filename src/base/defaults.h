/* SPDX-License-Identifier: MIT */
/*
 * defaults: the default of every setting a user can change in the configuration file, each
 * defined here and nowhere else.
 *
 * Two readers need the same value: the configuration's key table (src/app/config_keys.c),
 * which names these constants in its default column and so gives them to a key absent from
 * the file, and each module's `_opts_default()`, which uses them for the options a key feeds.
 * A module created without a configuration (unit tests, beaconsim) therefore runs with the
 * very values beaconmux starts with, and changing a default is changing one line here. The
 * header lives in the lowest layer because modules of every layer read it; it holds plain
 * values only. One default lives beside its type instead, because this layer cannot name it:
 * duties.blockSelection (BM_PRODUCE_DEFAULT_SELECTION in duties/produce.h).
 *
 * Names are BM_DEFAULT_<SECTION>_<KEY>, after the key's YAML path; docs/configuration.md
 * describes each key. Options a user cannot set (re-poll intervals, internal caps) keep their
 * defaults in their module's `_opts_default()`, their only home.
 */
#ifndef BM_DEFAULTS_H
#define BM_DEFAULTS_H

#include <stdbool.h>

#include "base/log.h"

/* listen: the address beaconmux serves on */
#define BM_DEFAULT_LISTEN_HOST "127.0.0.1"
#define BM_DEFAULT_LISTEN_PORT 5555

/* Not a setting but the bound behind several: the most nodes beaconmux runs with. Sets of
 * nodes are 64-bit masks (the head tracker's asked nodes, a race's candidates), so 64 is
 * the most there can be; every per-node table is sized by it, and the configuration takes
 * at most this many upstreams. */
#define BM_MAX_NODES 64

/* log */
#define BM_DEFAULT_LOG_LEVEL BM_LOG_INFO
#define BM_DEFAULT_LOG_FORMAT BM_LOG_TEXT
#define BM_DEFAULT_LOG_ACCESS false

/* metrics, journal, ui: what beaconmux shows of itself (observe/observe.h) */
#define BM_DEFAULT_METRICS_ENABLED true
#define BM_DEFAULT_METRICS_PATH "/metrics" /* metrics.path when unset */
#define BM_DEFAULT_JOURNAL_SLOTS 7200      /* a day of 12-s slots */
#define BM_DEFAULT_UI_ENABLED true

/* server: the listener (http/server.h), and the shutdown bound (app/main.c) */
#define BM_DEFAULT_SERVER_MAX_BODY_BYTES (32ull << 20)   /* 32 MiB */
#define BM_DEFAULT_SERVER_MAX_HEADER_BYTES (16ull << 10) /* 16 KiB */
#define BM_DEFAULT_SERVER_MAX_TARGET_BYTES (64ull << 10) /* 64 KiB */
#define BM_DEFAULT_SERVER_HEADER_TIMEOUT_MS 10000
#define BM_DEFAULT_SERVER_BODY_TIMEOUT_MS 30000
#define BM_DEFAULT_SERVER_IDLE_TIMEOUT_MS 120000
#define BM_DEFAULT_SERVER_MAX_CONNECTIONS 10000
#define BM_DEFAULT_SERVER_MAX_CONNECTIONS_PER_CLIENT 1024
#define BM_DEFAULT_SERVER_BODY_DEADLINE_MS 60000
#define BM_DEFAULT_SERVER_SEND_TIMEOUT_MS 30000
#define BM_DEFAULT_SERVER_MEMORY_TRIM_INTERVAL_MS 60000 /* malloc_trim, base/memtrim.h */
#define BM_DEFAULT_SERVER_SHUTDOWN_TIMEOUT_MS 10000

/* timeouts: every request to an upstream */
#define BM_DEFAULT_TIMEOUTS_CONNECT_MS 1000
#define BM_DEFAULT_TIMEOUTS_READ_MS 2000
#define BM_DEFAULT_TIMEOUTS_WRITE_MS 12000 /* one slot */

/* failover (deprecated: failsafe.retry.maxAttempts), discovery, tls, health */
#define BM_DEFAULT_FAILOVER_MAX_ATTEMPTS 3
#define BM_DEFAULT_DISCOVERY_RETRY_INTERVAL_MS 5000
#define BM_DEFAULT_TLS_VERIFY true
#define BM_DEFAULT_HEALTH_MAX_HEAD_LAG 1 /* slots */
#define BM_DEFAULT_HEALTH_HEAD_QUORUM 0  /* 0 = automatic */

/* upstreams[]: per-node read-path settings, and the node's connection pool */
#define BM_DEFAULT_UPSTREAM_PRIORITY 0 /* tier: lower is used first */
#define BM_DEFAULT_UPSTREAM_WEIGHT 1
#define BM_DEFAULT_UPSTREAM_ARCHIVE false
#define BM_DEFAULT_UPSTREAM_SHADOW false
#define BM_DEFAULT_UPSTREAM_AUTOTUNE_MIN 1     /* requests per second */
#define BM_DEFAULT_UPSTREAM_AUTOTUNE_MAX 0     /* 0: no auto-tuned bucket */
#define BM_DEFAULT_UPSTREAM_MAX_CONNECTIONS 64 /* an http:// node's pool (http/upstream.h) */

/* routing: how the read path picks among candidates */
#define BM_DEFAULT_ROUTING_SCORE_WEIGHT_ERROR_RATE 4
#define BM_DEFAULT_ROUTING_SCORE_WEIGHT_LATENCY 8
#define BM_DEFAULT_ROUTING_SCORE_WEIGHT_HEAD_LAG 2
#define BM_DEFAULT_ROUTING_SCORE_WEIGHT_SYNC_DISTANCE 1
#define BM_DEFAULT_ROUTING_STICKY_ENABLED false
#define BM_DEFAULT_ROUTING_STICKY_KEY "address"
#define BM_DEFAULT_ROUTING_STICKY_REBALANCE_FACTOR 2000 /* thousandths: 2.0 */
#define BM_DEFAULT_ROUTING_RETENTION_BLOB_EPOCHS 4096   /* MIN_EPOCHS_FOR_BLOB_SIDECARS_REQUESTS */
#define BM_DEFAULT_ROUTING_RETENTION_BLOCK_EPOCHS 33024 /* MIN_EPOCHS_FOR_BLOCK_REQUESTS */
#define BM_DEFAULT_ROUTING_RETENTION_STATE_SLOTS 8192   /* SLOTS_PER_HISTORICAL_ROOT */

/* failsafe: the read path's deadline, retries, hedges and breakers */
#define BM_DEFAULT_FAILSAFE_TIMEOUT_MS 4000
#define BM_DEFAULT_FAILSAFE_HEAVY_TIMEOUT_MS 300000 /* full states, every validator: minutes */
#define BM_DEFAULT_FAILSAFE_RETRY_DELAY_MS 50
#define BM_DEFAULT_FAILSAFE_RETRY_BACKOFF 2000 /* thousandths: 2.0 */
#define BM_DEFAULT_FAILSAFE_RETRY_MAX_DELAY_MS 1000
#define BM_DEFAULT_FAILSAFE_RETRY_JITTER_MS 25
#define BM_DEFAULT_FAILSAFE_HEDGE_DELAY_MS 250
#define BM_DEFAULT_FAILSAFE_HEDGE_MAX_COUNT 1
#define BM_DEFAULT_FAILSAFE_HEDGE_MAX_RATIO 100  /* thousandths: 10 % of reads */
#define BM_DEFAULT_FAILSAFE_HEDGE_MAX_PRIORITY 0 /* hedges go to tier 0 only */
#define BM_DEFAULT_FAILSAFE_CB_FAILURE_THRESHOLD 5
#define BM_DEFAULT_FAILSAFE_CB_SUCCESS_THRESHOLD 2
#define BM_DEFAULT_FAILSAFE_CB_HALF_OPEN_AFTER_MS 30000

/* events: the cluster event stream and the nodes' streams */
#define BM_DEFAULT_EVENTS_KEEPALIVE_MS 15000
#define BM_DEFAULT_EVENTS_SUBSCRIBER_MAX_PENDING (1ull << 20) /* 1 MiB */
#define BM_DEFAULT_EVENTS_DEDUP_WINDOW 4096                   /* events */
/* events.headersTimeout: 0 is "not set": an event stream then waits two slots for its
 * response head (cluster/nodestream.h, bm_nodestream_head_wait_ms), never less; the key is
 * unset in the configuration unless the file names it */
#define BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS 0

/* duties: the duty policies and the broadcast */
#define BM_DEFAULT_DUTIES_HOLD_FLOOR_MS 400
#define BM_DEFAULT_DUTIES_MAX_HOLD_MS 1000
#define BM_DEFAULT_DUTIES_PROPOSAL_DEADLINE_MS 2000
#define BM_DEFAULT_DUTIES_BEST_VALUE_GRACE_MS 100
#define BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS 12000 /* one slot */
#define BM_DEFAULT_DUTIES_MAJORITY_AFTER_MS 1000
#define BM_DEFAULT_DUTIES_AGGREGATE_GRACE_MS 100
#define BM_DEFAULT_DUTIES_CHECKPOINT_QUORUM 0 /* 0 = automatic */

/* cache: the response cache of the edge (edge/cache.h) */
#define BM_DEFAULT_CACHE_ENABLED true

/* state: local (0) or redis (1); Redis's connect and per-command deadline: short, because
 * nothing on a duty's path ever waits for it */
#define BM_DEFAULT_STATE_DRIVER 0
#define BM_DEFAULT_STATE_REDIS_TIMEOUT_MS 50
#define BM_DEFAULT_CACHE_MAX_ENTRIES 16384
#define BM_DEFAULT_CACHE_MAX_BYTES (64ull << 20)      /* 64 MiB */
#define BM_DEFAULT_CACHE_MAX_ENTRY_BYTES (4ull << 20) /* 4 MiB */
#define BM_DEFAULT_CACHE_CHAIN_TTL_MS 384000          /* 32 slots of 12 s */
#define BM_DEFAULT_CACHE_CLOCK_TTL_MS 2000
#define BM_DEFAULT_CACHE_GZIP_MIN_BYTES 1024
#define BM_DEFAULT_CACHE_GZIP_LEVEL 6

/* cors: off until allowedOrigins names an origin (edge/cors.h) */
#define BM_DEFAULT_CORS_METHODS "GET, POST, OPTIONS"
#define BM_DEFAULT_CORS_EXPOSED                                                                    \
    "Eth-Consensus-Version, Eth-Execution-Payload-Blinded, Eth-Execution-Payload-Value, "          \
    "Eth-Consensus-Block-Value"
#define BM_DEFAULT_CORS_MAX_AGE_MS 600000 /* 10 min */

/* rateLimit: off until a rate is set (edge/limit.h) */
#define BM_DEFAULT_RATE_LIMIT_CLIENTS 65536 /* per-client buckets kept */

#endif /* BM_DEFAULTS_H */
