/* SPDX-License-Identifier: MIT */
/*
 * config: everything beaconmux can be told in its configuration file, and how it is told.
 *
 * The model (bm_config_t) is plain data with owned strings, freed by one bm_config_free.
 * It is filled in a fixed order so that every source of a value ends up in the same shape:
 * bm_config_new() gives every key its default (from the key table, whose default column
 * names the constants of base/defaults.h), the YAML file overwrites the keys it names, the
 * command line (app/cli.h) overwrites what its flags name, and bm_config_validate() checks
 * the result. A key absent from the file and a configuration built from flags alone
 * therefore hold the very same default, and so does a module created without any
 * configuration, whose `_opts_default()` reads the same constants. app/options.h turns the
 * model into each module's options.
 *
 * The file is walked once with libyaml against the key table (app/config_keys.h), so that
 * every error names its key and its line and column: `beaconmux.yaml:7:3: unknown key
 * "upstrem" in "upstreams[0]"`. `${VAR}` in a value is replaced by the environment
 * variable's value ("$$" is a literal '$'); see docs/configuration.md for every key.
 *
 * Errors are reported in a fixed buffer the caller provides (bm_config_err_t): nothing to
 * free, never NULL, and the message never contains a password or a header value.
 */
#ifndef BM_CONFIG_H
#define BM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/defaults.h"
#include "base/log.h"
#include "duties/attest.h"
#include "duties/produce.h"
#include "read/balance.h"

/* ---- limits ------------------------------------------------------------------------ */

#define BM_CONFIG_MAX_UPSTREAMS BM_MAX_NODES /* upstreams in the file or on the command line */
#define BM_CONFIG_MAX_HEADERS 64             /* extra request headers per upstream */
#define BM_CONFIG_MAX_ID_LEN 64              /* characters in an upstream id */
#define BM_CONFIG_MAX_FILE_BYTES (1u << 20)  /* a larger configuration file is refused */
#define BM_CONFIG_MAX_RULES 256              /* routeRules, clientRoutes, blockedPaths entries */

/* A duration that is not set: a per-duty one inherits the section's value (duties.holdFloor,
 * duties.maxHold); events.headersTimeout follows the slot (two slots). Never a valid
 * duration (those stop at 24 hours). Route rules use it for every number they leave to
 * failsafe. */
#define BM_CONFIG_UNSET UINT32_MAX

/* Decimal values (failsafe.retry.backoff, failsafe.hedge.maxRatio, ...) are stored in
 * thousandths: 2.0 is 2000, 10 % is 100. */
#define BM_CONFIG_MILLI 1000u

/* journal.slots at most: two weeks of 12-s slots (some 60 MiB). */
#define BM_CONFIG_MAX_JOURNAL_SLOTS 100800u

/* ---- the model ----------------------------------------------------------------------
 * Durations are milliseconds (uint32_t, at most 24 hours), sizes are bytes (uint64_t). */

/** One extra request header sent to an upstream (an API key of a hosted provider). */
typedef struct bm_config_header {
    char *name;  /* owned; an HTTP token, unique per upstream (case-insensitive) */
    char *value; /* owned; no CR, LF or other control character except tab */
} bm_config_header_t;

/** A hosted provider's auto-tuned request rate (upstreams[].autoTune), requests per second. */
typedef struct bm_config_autotune {
    uint32_t min;
    uint32_t max; /* 0: no auto-tuned bucket */
} bm_config_autotune_t;

/** One beacon node. */
typedef struct bm_config_upstream {
    char *id;                    /* owned; [A-Za-z0-9][A-Za-z0-9._-]*, unique */
    char *url;                   /* owned; absolute http(s) URL, may carry user:password */
    bm_config_header_t *headers; /* owned array of n_headers */
    size_t n_headers;
    uint32_t priority; /* read-path tier: lower is used first */
    uint32_t weight;   /* share within its tier */
    bool archive;      /* keeps full history */
    bool shadow;       /* mirrored and scored, never served, never counted (duties/shadow.h) */
    bm_config_autotune_t auto_tune;
    uint32_t max_connections; /* http://: connections to the node at once (its pool) */
    bool forwarded_for;       /* the node is told the client's address (X-Forwarded-For) */
    bool secret_path;         /* the URL's whole path is a secret: masked wherever shown */
} bm_config_upstream_t;

typedef struct bm_config_log {
    bm_log_level_t level;
    bm_log_format_t format;
    bool access; /* one line per request */
} bm_config_log_t;

/** server.tls: a second listener that speaks TLS, beside the plain one (docs/operations.md). */
typedef struct bm_config_server_tls {
    char *listen_host;        /* owned; NULL: no TLS listener */
    uint16_t listen_port;     /* 0 lets the system pick (tests) */
    char *cert_file;          /* owned PEM path: certificate and intermediates, or NULL */
    char *key_file;           /* owned PEM path: its private key, or NULL */
    char *client_ca_file;     /* owned PEM path: CAs for client certificates, or NULL */
    bool require_client_cert; /* refuse a client without a certificate */
} bm_config_server_tls_t;

typedef struct bm_config_metrics {
    bool enabled;
    char *path;   /* owned; "/metrics" by default */
    char *listen; /* owned; "host:port" of a listener of their own, or NULL: on `listen` */
} bm_config_metrics_t;

typedef struct bm_config_journal {
    uint32_t slots; /* slots kept; 0: no journal */
} bm_config_journal_t;

typedef struct bm_config_ui {
    bool enabled;
} bm_config_ui_t;

typedef struct bm_config_server {
    uint64_t max_body_bytes;
    uint64_t max_header_bytes;
    uint64_t max_target_bytes;
    uint32_t header_timeout_ms;
    uint32_t body_timeout_ms;
    uint32_t body_deadline_ms;
    uint32_t idle_timeout_ms;
    uint32_t max_connections;
    uint32_t max_connections_per_client;
    uint32_t send_timeout_ms;
    uint32_t shutdown_timeout_ms;     /* bound for in-flight requests on SIGTERM */
    uint32_t memory_trim_interval_ms; /* free memory back to the kernel; 0: never */
    char **allowed_clients;           /* owned CIDR blocks; none: every client address */
    size_t n_allowed_clients;
    bool reuse_port; /* SO_REUSEPORT on the listener (upgrades beside the old process) */
    bm_config_server_tls_t tls;
} bm_config_server_t;

typedef struct bm_config_timeouts {
    uint32_t connect_ms;
    uint32_t read_ms;  /* small reads */
    uint32_t write_ms; /* writes */
} bm_config_timeouts_t;

typedef struct bm_config_failover {
    uint32_t max_attempts; /* deprecated (failsafe.retry.maxAttempts); BM_CONFIG_UNSET: not given */
} bm_config_failover_t;

/** routing.scoreWeights */
typedef struct bm_config_score_weights {
    uint32_t error_rate, latency, head_lag, sync_distance;
} bm_config_score_weights_t;

/** routing.stickySessions */
typedef struct bm_config_sticky {
    bool enabled;
    char *key;                 /* owned; "address" or a header name; NULL: address */
    uint32_t rebalance_factor; /* thousandths */
} bm_config_sticky_t;

/** routing.retention: how long pruned nodes keep history */
typedef struct bm_config_retention {
    uint32_t blob_epochs, block_epochs, state_slots;
} bm_config_retention_t;

typedef struct bm_config_routing {
    bm_balance_strategy_t load_balancing;
    bm_config_score_weights_t score_weights;
    bm_config_sticky_t sticky;
    bm_config_retention_t retention;
} bm_config_routing_t;

/** failsafe.retry, and a route rule's retry (there, BM_CONFIG_UNSET inherits) */
typedef struct bm_config_retry {
    uint32_t max_attempts; /* BM_CONFIG_UNSET: failover.maxAttempts, else 3 */
    uint32_t delay_ms;
    uint32_t backoff; /* thousandths */
    uint32_t max_delay_ms;
    uint32_t jitter_ms;
} bm_config_retry_t;

/** failsafe.hedge, and a route rule's hedge (delay and maxCount; BM_CONFIG_UNSET inherits) */
typedef struct bm_config_hedge {
    uint32_t delay_ms;
    uint32_t max_count;
    uint32_t max_ratio;    /* thousandths of reads */
    uint32_t max_priority; /* hedges go to tiers up to this one */
} bm_config_hedge_t;

/** failsafe.circuitBreaker */
typedef struct bm_config_breaker {
    uint32_t failure_threshold, success_threshold, half_open_after_ms;
} bm_config_breaker_t;

typedef struct bm_config_failsafe {
    uint32_t timeout_ms;       /* a read's total deadline */
    uint32_t heavy_timeout_ms; /* the same for heavy reads (full states, every validator) */
    bm_config_retry_t retry;
    bm_config_hedge_t hedge;
    bm_config_breaker_t circuit_breaker;
} bm_config_failsafe_t;

/** clientRoutes[]: a path prefix served by some nodes only. */
typedef struct bm_config_client_route {
    char *prefix;     /* owned; "/lighthouse" */
    char **upstreams; /* owned ids, n_upstreams */
    size_t n_upstreams;
    char *client; /* owned; a client brand ("lighthouse"), instead of upstreams */
    bool strip_prefix;
} bm_config_client_route_t;

/** routeRules[].consensus */
typedef struct bm_config_consensus {
    uint32_t query, agree; /* 0: no consensus */
} bm_config_consensus_t;

/** routeRules[]: method and path pattern -> settings; numbers at BM_CONFIG_UNSET inherit. */
typedef struct bm_config_route_rule {
    char *method; /* owned; NULL: any */
    char *path;   /* owned; a pattern (read/rules.h) */
    uint32_t timeout_ms;
    bm_config_retry_t retry;
    bm_config_hedge_t hedge; /* only delay_ms and max_count */
    bm_config_consensus_t consensus;
    int strategy;     /* 0: inherit; else bm_balance_strategy_t + 1 */
    char **upstreams; /* owned ids */
    size_t n_upstreams;
    char **tiers; /* owned priorities, as text */
    size_t n_tiers;
    bool blocked;
} bm_config_route_rule_t;

typedef struct bm_config_discovery {
    uint32_t retry_interval_ms; /* how often a down upstream is retried at start-up */
} bm_config_discovery_t;

typedef struct bm_config_tls {
    bool verify;   /* verify upstream certificates and host names */
    char *ca_file; /* owned; CA bundle (PEM) instead of the system's, or NULL */
} bm_config_tls_t;

typedef struct bm_config_health {
    uint32_t max_head_lag; /* slots behind the cluster head a ready node may be */
    uint32_t head_quorum;  /* nodes needed to move the head other than by extension; 0 = auto */
} bm_config_health_t;

typedef struct bm_config_events {
    uint32_t keepalive_ms;           /* ':' comment interval on the cluster stream */
    uint64_t subscriber_max_pending; /* bytes unsent to a subscriber before it is dropped */
    uint32_t dedup_window;           /* events remembered for first-copy-wins */
    uint32_t headers_timeout_ms;     /* an upstream stream must send its response head within
                                        this, never less than two slots (BM_CONFIG_UNSET: two
                                        slots) */
} bm_config_events_t;

/** The duty reads a race may hold, each with its own hold (duties.<name>.holdFloor/maxHold). */
typedef enum bm_config_duty {
    BM_CONFIG_DUTY_ATTESTATION_DATA = 0,        /* duties.attestationData */
    BM_CONFIG_DUTY_HEAD_ROOT,                   /* duties.headRoot (beacon/blocks/head/root) */
    BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA,    /* duties.payloadAttestationData */
    BM_CONFIG_DUTY_AGGREGATE_ATTESTATION,       /* duties.aggregateAttestation */
    BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION, /* duties.syncCommitteeContribution */
    BM_CONFIG_DUTY_COUNT
} bm_config_duty_t;

/** One duty's hold; BM_CONFIG_UNSET inherits duties.holdFloor / duties.maxHold. */
typedef struct bm_config_duty_hold {
    uint32_t hold_floor_ms;
    uint32_t max_hold_ms;
} bm_config_duty_hold_t;

typedef struct bm_config_duties {
    uint32_t hold_floor_ms; /* every duty's holdFloor unless its own is set */
    uint32_t max_hold_ms;   /* every duty's maxHold unless its own is set */
    uint32_t proposal_deadline_ms;
    bm_produce_selection_t block_selection; /* first or best-value (duties/produce.h) */
    uint32_t best_value_grace_ms;
    uint32_t write_timeout_ms;
    uint32_t duties_majority_after_ms;
    uint32_t aggregate_grace_ms;
    uint32_t checkpoint_quorum;                       /* 0 = auto */
    bm_attest_checkpoint_mode_t checkpoint_mode;      /* live or strict (duties/attest.h) */
    bm_config_duty_hold_t hold[BM_CONFIG_DUTY_COUNT]; /* per duty; BM_CONFIG_UNSET inherits */
} bm_config_duties_t;

/** cache: the response cache of each network (edge/cache.h) */
typedef struct bm_config_cache {
    bool enabled;
    uint32_t max_entries;
    uint64_t max_bytes;
    uint64_t max_entry_bytes;
    uint32_t chain_ttl_ms;
    uint32_t clock_ttl_ms;
    uint64_t gzip_min_bytes;
    uint32_t gzip_level;
} bm_config_cache_t;

/** cors (edge/cors.h); off while allowedOrigins is empty */
typedef struct bm_config_cors {
    char **allowed_origins; /* owned */
    size_t n_allowed_origins;
    char **allowed_methods; /* owned; none: GET, POST, OPTIONS */
    size_t n_allowed_methods;
    char **allowed_headers; /* owned; none: those the preflight asks for */
    size_t n_allowed_headers;
    char **exposed_headers; /* owned; none: the consensus headers */
    size_t n_exposed_headers;
    bool allow_credentials;
    uint32_t max_age_ms;
} bm_config_cors_t;

/** A token bucket: requests per second and burst; rate 0 is no limit. */
typedef struct bm_config_rate {
    uint32_t rate, burst;
} bm_config_rate_t;

/** rateLimit.duties */
typedef struct bm_config_rate_duties {
    bm_config_rate_t per_client, global;
} bm_config_rate_duties_t;

/** rateLimit */
typedef struct bm_config_rate_limit {
    bm_config_rate_t per_client, global;
    bm_config_rate_duties_t duties;
    uint32_t max_clients; /* per-client buckets kept */
} bm_config_rate_limit_t;

/** auth.keys[] */
typedef struct bm_config_key {
    char *id;        /* owned */
    char *secret;    /* owned; never logged nor dumped unmasked */
    char **networks; /* owned ids; none: every network */
    size_t n_networks;
    char **routes; /* owned: read, duties, admin; none: read */
    size_t n_routes;
    bm_config_rate_t rate_limit; /* its own per-client limit; rate 0: rateLimit.perClient */
} bm_config_key_t;

typedef struct bm_config_auth {
    bm_config_key_t *keys; /* owned array */
    size_t n_keys;
} bm_config_auth_t;

/** state.driver: where the state several instances share lives (docs/high-availability.md) */
typedef enum bm_state_driver {
    BM_STATE_LOCAL = 0, /* each instance alone (the default) */
    BM_STATE_REDIS,     /* shared through Redis: state.redis */
} bm_state_driver_t;

/** state.redis */
typedef struct bm_config_redis {
    char *url;           /* owned; "redis://[user:password@]host[:port][/db]", masked in messages */
    char *password;      /* owned; never logged nor dumped unmasked; overrides the URL's */
    char *prefix;        /* owned; key prefix, NULL: "beaconmux:" */
    uint32_t timeout_ms; /* connect and per-command deadline */
} bm_config_redis_t;

/** state */
typedef struct bm_config_state {
    bm_state_driver_t driver;
    bm_config_redis_t redis;
} bm_config_state_t;

/** The whole configuration. Create with bm_config_new/_parse/_load, free with bm_config_free. */
typedef struct bm_config {
    char *path;                    /* owned; the file it was loaded from, or NULL */
    char *listen_host;             /* owned; IPv4/IPv6 literal (no brackets) or "localhost" */
    uint16_t listen_port;          /* 0 lets the system pick (tests) */
    char *genesis_validators_root; /* owned; "0x" + 64 lowercase hex digits, or NULL */
    char *state_dir; /* owned; where state survives restarts (app/statedir.h); NULL or "": none */
    bm_config_log_t log;
    bm_config_upstream_t *upstreams; /* owned array of n_upstreams */
    size_t n_upstreams;
    bm_config_server_t server;
    bm_config_timeouts_t timeouts;
    bm_config_failover_t failover;
    bm_config_discovery_t discovery;
    bm_config_tls_t tls;
    bm_config_health_t health;
    bm_config_events_t events;
    bm_config_duties_t duties;
    bm_config_routing_t routing;
    bm_config_failsafe_t failsafe;
    bm_config_metrics_t metrics;
    bm_config_journal_t journal;
    bm_config_ui_t ui;
    char **blocked_paths; /* owned patterns */
    size_t n_blocked_paths;
    bm_config_client_route_t *client_routes; /* owned array */
    size_t n_client_routes;
    bm_config_route_rule_t *route_rules; /* owned array */
    size_t n_route_rules;
    bm_config_cache_t cache;
    bm_config_cors_t cors;
    bm_config_rate_limit_t rate_limit;
    char **trusted_proxies; /* owned CIDR blocks */
    size_t n_trusted_proxies;
    bm_config_auth_t auth;
    bm_config_state_t state;
    /*
     * networks[]: each entry is a bm_config_t of which only the per-network keys are set
     * (id, upstreams, genesisValidatorsRoot, routing, failsafe, cache, routeRules,
     * blockedPaths, clientRoutes, duties, health, events); a per-network section it does
     * not give is the top level's (bm_config_network). `network_given` says which it gave.
     */
    struct bm_config *networks; /* owned array */
    size_t n_networks;
    char *network_id;       /* owned; a networks[] entry's id */
    uint64_t network_given; /* a networks[] entry: bit i, row i of its keys was given */
} bm_config_t;

/** An error message; set by every function below that fails. Never contains secrets. */
typedef struct bm_config_err {
    char msg[512];
} bm_config_err_t;

/** Looks up an environment variable for `${NAME}`; returns NULL when it is not set. */
typedef const char *(*bm_config_getenv_fn)(void *ud, const char *name);

/* ---- building a configuration ------------------------------------------------------ */

/** A configuration holding every default and no upstream. Caller frees; NULL on OOM. */
bm_config_t *bm_config_new(void);

/** Frees `cfg` and every string it owns. NULL is ignored. */
void bm_config_free(bm_config_t *cfg);

/**
 * Parses the YAML document text[0..len) on top of the defaults. `name` prefixes error
 * positions ("name:line:col: ..."). `env` resolves `${VAR}` (NULL: the process
 * environment, via getenv). Every value is checked here, with its position; what depends
 * on the whole configuration (at least one upstream, head quorum against the number of
 * upstreams, ...) is left to bm_config_validate, because flags may still change it. The
 * first error in reading order is the one reported.
 * Returns a new configuration (caller frees) or NULL with `err` set.
 */
bm_config_t *bm_config_parse(const char *text, size_t len, const char *name,
                             bm_config_getenv_fn env, void *env_ud, bm_config_err_t *err);

/**
 * Checks the whole configuration: every value in range, upstream ids and URLs, headers,
 * at least one upstream that is not a shadow, duties.holdFloor <= duties.maxHold (for the
 * section and for every duty, with inherited values), health.headQuorum and
 * duties.checkpointQuorum <= number of upstreams that are not shadows, tls.caFile
 * readable. Returns 0 or BM_EINVAL with `err` set.
 */
int bm_config_validate(const bm_config_t *cfg, bm_config_err_t *err);

/** The upstreams that serve (every one but the shadows). */
size_t bm_config_serving_upstreams(const bm_config_t *cfg);

/**
 * Appends the configuration as YAML that bm_config_parse reads back to the same
 * configuration (`$` written as `$$`). With `mask_secrets`, URL passwords and header
 * values are written as "***" (for --check and logs). Returns 0 or BM_ENOMEM.
 */
int bm_config_dump(const bm_config_t *cfg, bool mask_secrets, bm_str_t *out);

/**
 * The hold of `duty` in effect: its own holdFloor and maxHold, each falling back to
 * duties.holdFloor and duties.maxHold when not set. A bad `duty` gives the section's.
 */
void bm_config_duty_hold(const bm_config_t *cfg, bm_config_duty_t duty, uint32_t *hold_floor_ms,
                         uint32_t *max_hold_ms);

/**
 * The read path's attempts per read: failsafe.retry.maxAttempts when set, else the
 * deprecated failover.maxAttempts when set, else 3.
 */
uint32_t bm_config_max_attempts(const bm_config_t *cfg);

/**
 * The number of networks served: n_networks, or 1 for a file without `networks:`.
 */
size_t bm_config_network_count(const bm_config_t *cfg);

/**
 * The effective configuration of network i: a shallow copy of `cfg` whose per-network keys
 * are networks[i]'s where it gives them (without `networks:`, cfg itself, i = 0). Borrows
 * everything from cfg: never free it, never use it after cfg is freed.
 */
void bm_config_network(const bm_config_t *cfg, size_t i, bm_config_t *out);

/** A deprecation notice for keys still read but replaced (failover.maxAttempts), or NULL. */
const char *bm_config_deprecation(const bm_config_t *cfg);

/** The YAML name of a duty ("attestationData", ...), or "?" for a bad value. */
const char *bm_config_duty_name(bm_config_duty_t duty);

/**
 * Reads the file at `path` and parses it (bm_config_parse, `${VAR}` from the process
 * environment); the configuration remembers `path`. Not validated: the command line may
 * still change it. Returns a new configuration (caller frees) or NULL with `err` set.
 */
bm_config_t *bm_config_read(const char *path, bm_config_err_t *err);

/** What a key of the file holds. */
typedef enum bm_config_key_shape {
    BM_CONFIG_KEY_VALUE,   /* a single value ("server.maxBodyBytes") */
    BM_CONFIG_KEY_SECTION, /* a mapping of other keys ("server", "duties.headRoot") */
    BM_CONFIG_KEY_LIST,    /* a list of mappings of other keys ("upstreams") */
    BM_CONFIG_KEY_MAP,     /* a mapping of free-form names to values ("upstreams[].headers") */
} bm_config_key_shape_t;

/**
 * Calls `fn` for every key of the file in file order, with its dotted path
 * ("server.maxBodyBytes"; a key of a list's entries as "upstreams[].url") and its shape.
 * For the check that the documentation describes every key and nothing else.
 */
void bm_config_keys(void (*fn)(void *ud, const char *path, bm_config_key_shape_t shape), void *ud);

/* ---- value syntax, shared with whoever reads durations and sizes -------------------- */

/**
 * Parses a duration: an integer of milliseconds ("400") or an integer with a unit ("400ms",
 * "2s", "1m", "1h"). Returns 0, or BM_EINVAL for anything else or more than 24 hours.
 */
int bm_config_parse_duration(const char *s, uint32_t *ms);

/**
 * Parses a size: an integer of bytes ("1024") or an integer with a unit ("16KiB", "32MiB",
 * "1GiB"). Returns 0, or BM_EINVAL for anything else or more than 1 TiB.
 */
int bm_config_parse_size(const char *s, uint64_t *bytes);

/**
 * Splits "host:port" (IPv6 as "[::1]:port"; host an IP literal or "localhost") and copies
 * the host without brackets into host[0..host_size). Returns 0 or BM_EINVAL.
 */
int bm_config_parse_listen(const char *s, char *host, size_t host_size, uint16_t *port);

#endif /* BM_CONFIG_H */
