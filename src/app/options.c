/* SPDX-License-Identifier: MIT */
/*
 * options: which key of the configuration feeds which module option (see options.h).
 */
#include "app/options.h"

#include <string.h>

#include "base/err.h"

/*
 * One line per pair: the key's field in bm_config_t, then the option's field in
 * bm_options_t. A key feeds every option listed after it. Each line is an assignment whose
 * types the compiler checks; the assertion refuses a narrowing one (a 64-bit size into a
 * 32-bit option).
 */
// clang-format off
#define BINDINGS(B)                                                                                \
    /* tls */                                                                                      \
    B(tls.verify,                        upstream.tls_verify)                                      \
    B(tls.ca_file,                       upstream.ca_file)                                         \
    /* server */                                                                                   \
    B(server.max_body_bytes,             server.max_body_bytes)                                    \
    B(server.max_header_bytes,           server.max_header_bytes)                                  \
    B(server.max_target_bytes,           server.max_target_bytes)                                  \
    B(server.header_timeout_ms,          server.header_timeout_ms)                                 \
    B(server.body_timeout_ms,            server.body_timeout_ms)                                   \
    B(server.idle_timeout_ms,            server.idle_timeout_ms)                                   \
    B(server.max_connections,            server.max_connections)                                   \
    /* timeouts.connect: every module that connects to nodes */                                    \
    B(timeouts.connect_ms,               discovery.connect_timeout_ms)                             \
    B(timeouts.connect_ms,               failover.connect_timeout_ms)                              \
    B(timeouts.connect_ms,               monitor.connect_timeout_ms)                               \
    B(timeouts.connect_ms,               events.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               attest.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               produce.connect_timeout_ms)                               \
    B(timeouts.connect_ms,               aggregate.connect_timeout_ms)                             \
    B(timeouts.connect_ms,               duties.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               replay.connect_timeout_ms)                                \
    B(timeouts.connect_ms,               broadcast.connect_timeout_ms)                             \
    /* timeouts.read, timeouts.write */                                                            \
    B(timeouts.read_ms,                  failover.read_timeout_ms)                                 \
    B(timeouts.read_ms,                  monitor.request_timeout_ms)                               \
    B(timeouts.read_ms,                  broadcast.read_timeout_ms)                                \
    B(timeouts.write_ms,                 failover.write_timeout_ms)                                \
    /* failover, discovery, health */                                                              \
    B(failover.max_attempts,             failover.max_attempts)                                    \
    B(discovery.retry_interval_ms,       discovery.retry_interval_ms)                              \
    B(health.max_head_lag,               health.max_head_lag)                                      \
    B(health.head_quorum,                health.head_quorum)                                       \
    /* events */                                                                                   \
    B(events.keepalive_ms,               events.keepalive_ms)                                      \
    B(events.subscriber_max_pending,     events.subscriber_max_pending)                            \
    B(events.dedup_window,               events.dedup_window)                                      \
    B(events.headers_timeout_ms,         events.headers_timeout_ms)                                \
    B(events.headers_timeout_ms,         monitor.headers_timeout_ms)                               \
    /* duties (the per-duty holds are in bm_options_from_config) */                                \
    B(duties.proposal_deadline_ms,       produce.proposal_deadline_ms)                             \
    B(duties.block_selection,            produce.selection)                                        \
    B(duties.best_value_grace_ms,        produce.best_value_grace_ms)                              \
    B(duties.aggregate_grace_ms,         aggregate.grace_ms)                                       \
    B(duties.duties_majority_after_ms,   duties.majority_after_ms)                                 \
    B(duties.write_timeout_ms,           replay.timeout_ms)                                        \
    B(duties.write_timeout_ms,           broadcast.write_timeout_ms)
// clang-format on

#define ASSIGN(from, to)                                                                           \
    _Static_assert(sizeof(((bm_options_t *)0)->to) >= sizeof(((bm_config_t *)0)->from),            \
                   #from " does not fit " #to);                                                    \
    o->to = cfg->from;

/* "0x" + 64 hex digits (checked by the configuration) into 32 bytes. */
static int parse_root(const char *hex, uint8_t out[32])
{
    if (strlen(hex) != 66)
        return BM_EINVAL;
    for (int i = 0; i < 32; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 + 2 * i + j];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                return BM_EINVAL;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

int bm_options_from_config(bm_options_t *o, const bm_config_t *cfg)
{
    /* the per-duty holds: hint's duties and aggregate's kinds, each with its config duty */
    static const struct {
        bm_hint_duty_t hint;
        bm_config_duty_t cfg;
    } hint_holds[] = {
        {BM_HINT_ATTESTATION_DATA, BM_CONFIG_DUTY_ATTESTATION_DATA},
        {BM_HINT_HEAD_ROOT, BM_CONFIG_DUTY_HEAD_ROOT},
        {BM_HINT_PAYLOAD_ATTESTATION, BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA},
        {BM_HINT_AGGREGATE, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION},
        {BM_HINT_SYNC_CONTRIBUTION, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION},
    };
    memset(o, 0, sizeof *o);
    bm_upstream_opts_default(&o->upstream);
    bm_server_opts_default(&o->server);
    bm_health_opts_default(&o->health);
    bm_discovery_opts_default(&o->discovery);
    bm_failover_opts_default(&o->failover);
    bm_monitor_opts_default(&o->monitor);
    bm_events_opts_default(&o->events);
    bm_hint_opts_default(&o->hint);
    bm_attest_opts_default(&o->attest);
    bm_produce_opts_default(&o->produce);
    bm_aggregate_opts_default(&o->aggregate);
    bm_duties_opts_default(&o->duties);
    bm_replay_opts_default(&o->replay);
    bm_broadcast_opts_default(&o->broadcast);

    BINDINGS(ASSIGN)

    for (size_t i = 0; i < sizeof hint_holds / sizeof hint_holds[0]; i++)
        bm_config_duty_hold(cfg, hint_holds[i].cfg, &o->hint.hold[hint_holds[i].hint].hold_floor_ms,
                            &o->hint.hold[hint_holds[i].hint].max_hold_ms);
    bm_config_duty_hold(cfg, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION,
                        &o->aggregate.hold_floor_ms[BM_AGGREGATE_ATTESTATION],
                        &o->aggregate.max_hold_ms[BM_AGGREGATE_ATTESTATION]);
    bm_config_duty_hold(cfg, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION,
                        &o->aggregate.hold_floor_ms[BM_AGGREGATE_CONTRIBUTION],
                        &o->aggregate.max_hold_ms[BM_AGGREGATE_CONTRIBUTION]);
    if (cfg->genesis_validators_root) {
        if (parse_root(cfg->genesis_validators_root, o->discovery.genesis_root) != 0)
            return BM_EINVAL;
        o->discovery.has_genesis_root = true;
    }
    return 0;
}
