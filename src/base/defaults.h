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

/* log */
#define BM_DEFAULT_LOG_LEVEL BM_LOG_INFO
#define BM_DEFAULT_LOG_FORMAT BM_LOG_TEXT

/* upstreams[]: per node (http/upstream.h) */
#define BM_DEFAULT_UPSTREAMS_MAX_CONNECTIONS 64 /* an http:// node's keep-alive pool */

/* server: the listener (http/server.h), and the shutdown bound (app/main.c) */
#define BM_DEFAULT_SERVER_MAX_BODY_BYTES (32ull << 20)   /* 32 MiB */
#define BM_DEFAULT_SERVER_MAX_HEADER_BYTES (16ull << 10) /* 16 KiB */
#define BM_DEFAULT_SERVER_MAX_TARGET_BYTES (64ull << 10) /* 64 KiB */
#define BM_DEFAULT_SERVER_HEADER_TIMEOUT_MS 10000
#define BM_DEFAULT_SERVER_BODY_TIMEOUT_MS 30000
#define BM_DEFAULT_SERVER_IDLE_TIMEOUT_MS 120000
#define BM_DEFAULT_SERVER_MAX_CONNECTIONS 10000
#define BM_DEFAULT_SERVER_SHUTDOWN_TIMEOUT_MS 10000

/* timeouts: every request to an upstream */
#define BM_DEFAULT_TIMEOUTS_CONNECT_MS 1000
#define BM_DEFAULT_TIMEOUTS_READ_MS 2000
#define BM_DEFAULT_TIMEOUTS_WRITE_MS 12000 /* one slot */

/* failover, discovery, tls, health */
#define BM_DEFAULT_FAILOVER_MAX_ATTEMPTS 3
#define BM_DEFAULT_DISCOVERY_RETRY_INTERVAL_MS 5000
#define BM_DEFAULT_TLS_VERIFY true
#define BM_DEFAULT_HEALTH_MAX_HEAD_LAG 1 /* slots */
#define BM_DEFAULT_HEALTH_HEAD_QUORUM 0  /* 0 = automatic */

/* events: the cluster event stream and the nodes' streams */
#define BM_DEFAULT_EVENTS_KEEPALIVE_MS 15000
#define BM_DEFAULT_EVENTS_SUBSCRIBER_MAX_PENDING (1ull << 20) /* 1 MiB */
#define BM_DEFAULT_EVENTS_DEDUP_WINDOW 4096                   /* events */
#define BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS 5000

/* duties: the duty policies and the broadcast */
#define BM_DEFAULT_DUTIES_HOLD_FLOOR_MS 400
#define BM_DEFAULT_DUTIES_MAX_HOLD_MS 1000
#define BM_DEFAULT_DUTIES_PROPOSAL_DEADLINE_MS 2000
#define BM_DEFAULT_DUTIES_BEST_VALUE_GRACE_MS 100
#define BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS 12000 /* one slot */
#define BM_DEFAULT_DUTIES_MAJORITY_AFTER_MS 1000
#define BM_DEFAULT_DUTIES_AGGREGATE_GRACE_MS 100

#endif /* BM_DEFAULTS_H */
