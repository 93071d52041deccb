/* SPDX-License-Identifier: MIT */
/*
 * test_options: the configuration reaches every module option it feeds, and each default
 * has one home: a module created without a configuration (its `_opts_default()`) holds the
 * very values beaconmux gets from an empty configuration file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "app/options.h"
#include "base/defaults.h"
#include "base/err.h"

static bm_options_t *options_of(const char *yaml)
{
    bm_config_err_t err;
    bm_config_t *cfg = bm_config_parse(yaml, strlen(yaml), "t.yaml", NULL, NULL, &err);
    if (!cfg)
        print_error("%s\n", err.msg);
    assert_non_null(cfg);
    bm_options_t *o = malloc(sizeof *o);
    assert_non_null(o);
    assert_int_equal(bm_options_from_config(o, cfg), 0);
    bm_config_free(cfg); /* nothing below reads a borrowed string */
    return o;
}

/* A module's options from its own defaults, compared with those from an empty file. */
#define ASSERT_SAME_AS_DEFAULT(type, fn, got)                                                      \
    do {                                                                                           \
        type def;                                                                                  \
        memset(&def, 0, sizeof def);                                                               \
        fn(&def);                                                                                  \
        if (memcmp(&def, &(got), sizeof def) != 0)                                                 \
            print_error("%s differs from what an empty configuration gives\n", #fn);               \
        assert_memory_equal(&def, &(got), sizeof def);                                             \
    } while (0)

static void test_defaults_have_one_home(void **state)
{
    (void)state;
    bm_options_t *o = options_of("");
    ASSERT_SAME_AS_DEFAULT(bm_upstream_opts_t, bm_upstream_opts_default, o->upstream);
    ASSERT_SAME_AS_DEFAULT(bm_server_opts_t, bm_server_opts_default, o->server);
    ASSERT_SAME_AS_DEFAULT(bm_health_opts_t, bm_health_opts_default, o->health);
    ASSERT_SAME_AS_DEFAULT(bm_discovery_opts_t, bm_discovery_opts_default, o->discovery);
    ASSERT_SAME_AS_DEFAULT(bm_readpath_opts_t, bm_readpath_opts_default, o->readpath);
    ASSERT_SAME_AS_DEFAULT(bm_monitor_opts_t, bm_monitor_opts_default, o->monitor);
    ASSERT_SAME_AS_DEFAULT(bm_events_opts_t, bm_events_opts_default, o->events);
    ASSERT_SAME_AS_DEFAULT(bm_hint_opts_t, bm_hint_opts_default, o->hint);
    ASSERT_SAME_AS_DEFAULT(bm_attest_opts_t, bm_attest_opts_default, o->attest);
    ASSERT_SAME_AS_DEFAULT(bm_produce_opts_t, bm_produce_opts_default, o->produce);
    ASSERT_SAME_AS_DEFAULT(bm_aggregate_opts_t, bm_aggregate_opts_default, o->aggregate);
    ASSERT_SAME_AS_DEFAULT(bm_duties_opts_t, bm_duties_opts_default, o->duties);
    ASSERT_SAME_AS_DEFAULT(bm_replay_opts_t, bm_replay_opts_default, o->replay);
    ASSERT_SAME_AS_DEFAULT(bm_broadcast_opts_t, bm_broadcast_opts_default, o->broadcast);
    /* and those are the documented defaults, not merely equal to each other */
    assert_int_equal(o->attest.connect_timeout_ms, 1000);
    assert_int_equal(o->monitor.request_timeout_ms, 2000);
    assert_int_equal(o->readpath.write_timeout_ms, 12000);
    assert_int_equal(o->readpath.max_attempts, 3);
    assert_int_equal(o->readpath.hedge_delay_ms, 250);
    assert_int_equal(o->readpath.breaker.failure_threshold, 5);
    assert_int_equal(o->hint.hold[BM_HINT_HEAD_ROOT].hold_floor_ms, 400);
    assert_int_equal(o->hint.hold[BM_HINT_HEAD_ROOT].max_hold_ms, 1000);
    assert_true(o->server.max_body_bytes == 32u << 20);
    free(o);
}

static void test_every_key_reaches_its_modules(void **state)
{
    (void)state;
    bm_options_t *o = options_of(
        "genesisValidatorsRoot: "
        "0x4b363db94e286120d76eb905340fdd4e54bfe9f06bf33ff6cf5ad27f511bfe95\n"
        "server: {maxBodyBytes: 2MiB, maxHeaderBytes: 2KiB, maxTargetBytes: 3KiB,\n"
        "         headerTimeout: 11s, bodyTimeout: 12s, idleTimeout: 13s, maxConnections: 14}\n"
        "timeouts: {connect: 1234ms, read: 2345ms, write: 3456ms}\n"
        "failover: {maxAttempts: 5}\n"
        "discovery: {retryInterval: 6s}\n"
        "tls: {verify: false}\n"
        "health: {maxHeadLag: 7, headQuorum: 0}\n"
        "events: {keepalive: 8s, subscriberMaxPending: 9KiB, dedupWindow: 10,\n"
        "         headersTimeout: 11ms}\n"
        "duties: {holdFloor: 12ms, maxHold: 13ms, proposalDeadline: 14ms,\n"
        "         blockSelection: best-value, bestValueGrace: 15ms, writeTimeout: 16ms,\n"
        "         dutiesMajorityAfter: 17ms, aggregateGrace: 18ms,\n"
        "         headRoot: {maxHold: 19ms}, syncCommitteeContribution: {holdFloor: 1ms}}\n");
    /* timeouts.connect feeds every module that connects to nodes */
    const uint32_t connect[] = {o->discovery.connect_timeout_ms, o->readpath.connect_timeout_ms,
                                o->monitor.connect_timeout_ms,   o->events.connect_timeout_ms,
                                o->attest.connect_timeout_ms,    o->produce.connect_timeout_ms,
                                o->aggregate.connect_timeout_ms, o->duties.connect_timeout_ms,
                                o->replay.connect_timeout_ms,    o->broadcast.connect_timeout_ms};
    for (size_t i = 0; i < sizeof connect / sizeof connect[0]; i++)
        assert_int_equal(connect[i], 1234);
    assert_int_equal(o->readpath.read_timeout_ms, 2345);
    assert_int_equal(o->monitor.request_timeout_ms, 2345);
    assert_int_equal(o->broadcast.read_timeout_ms, 2345);
    assert_int_equal(o->readpath.write_timeout_ms, 3456);
    assert_int_equal(o->readpath.max_attempts, 5); /* the deprecated key still applies */
    assert_int_equal(o->discovery.retry_interval_ms, 6000);
    assert_true(o->discovery.has_genesis_root);
    assert_int_equal(o->discovery.genesis_root[0], 0x4b);
    assert_int_equal(o->discovery.genesis_root[31], 0x95);
    assert_false(o->upstream.tls_verify);
    assert_null(o->upstream.ca_file);
    assert_int_equal(o->health.max_head_lag, 7);
    assert_true(o->server.max_body_bytes == 2u << 20);
    assert_true(o->server.max_header_bytes == 2u << 10);
    assert_true(o->server.max_target_bytes == 3u << 10);
    assert_int_equal(o->server.header_timeout_ms, 11000);
    assert_int_equal(o->server.body_timeout_ms, 12000);
    assert_int_equal(o->server.idle_timeout_ms, 13000);
    assert_int_equal(o->server.max_connections, 14);
    assert_int_equal(o->events.keepalive_ms, 8000);
    assert_true(o->events.subscriber_max_pending == 9u << 10);
    assert_int_equal(o->events.dedup_window, 10);
    assert_int_equal(o->events.headers_timeout_ms, 11);
    assert_int_equal(o->monitor.headers_timeout_ms, 11);
    assert_int_equal(o->produce.proposal_deadline_ms, 14);
    assert_int_equal(o->produce.selection, BM_PRODUCE_BEST_VALUE);
    assert_int_equal(o->produce.best_value_grace_ms, 15);
    assert_int_equal(o->replay.timeout_ms, 16);
    assert_int_equal(o->broadcast.write_timeout_ms, 16);
    assert_int_equal(o->duties.majority_after_ms, 17);
    assert_int_equal(o->aggregate.grace_ms, 18);
    /* per-duty holds: their own where set, the section's otherwise */
    assert_int_equal(o->hint.hold[BM_HINT_ATTESTATION_DATA].hold_floor_ms, 12);
    assert_int_equal(o->hint.hold[BM_HINT_ATTESTATION_DATA].max_hold_ms, 13);
    assert_int_equal(o->hint.hold[BM_HINT_HEAD_ROOT].max_hold_ms, 19);
    assert_int_equal(o->hint.hold[BM_HINT_SYNC_CONTRIBUTION].hold_floor_ms, 1);
    assert_int_equal(o->aggregate.hold_floor_ms[BM_AGGREGATE_CONTRIBUTION], 1);
    assert_int_equal(o->aggregate.max_hold_ms[BM_AGGREGATE_CONTRIBUTION], 13);
    assert_int_equal(o->aggregate.hold_floor_ms[BM_AGGREGATE_ATTESTATION], 12);
    free(o);
}

static void test_read_path_keys(void **state)
{
    (void)state;
    const char *yaml =
        "upstreams:\n"
        "  - {id: a, url: \"http://127.0.0.1:1\", priority: 1, weight: 3, archive: true,\n"
        "     autoTune: {min: 5, max: 50}}\n"
        "  - {id: b, url: \"http://127.0.0.1:2\"}\n"
        "routing:\n"
        "  loadBalancing: least-conn\n"
        "  scoreWeights: {errorRate: 1, latency: 2, headLag: 3, syncDistance: 4}\n"
        "  stickySessions: {enabled: true, key: X-Client, rebalanceFactor: 1.5}\n"
        "  retention: {blobEpochs: 10, blockEpochs: 20, stateSlots: 30}\n"
        "failover: {maxAttempts: 2}\n"
        "failsafe:\n"
        "  timeout: 9s\n"
        "  retry: {maxAttempts: 4, delay: 10ms, backoff: 3.5, maxDelay: 2s, jitter: 0}\n"
        "  hedge: {delay: 100ms, maxCount: 2, maxRatio: 25%, maxPriority: 1}\n"
        "  circuitBreaker: {failureThreshold: 7, successThreshold: 3, halfOpenAfter: 1m}\n"
        "blockedPaths: [\"/eth/v1/debug/*\"]\n"
        "clientRoutes: [{prefix: /a, upstreams: [a], stripPrefix: true}]\n"
        "routeRules:\n"
        "  - {method: GET, path: \"/eth/v1/beacon/states/*/validators\", timeout: 10s,\n"
        "     consensus: {query: 2, agree: 2}, tiers: [\"0\"], strategy: random}\n";
    bm_options_t *o = options_of(yaml);
    const bm_readpath_opts_t *r = &o->readpath;
    assert_int_equal(r->strategy, BM_BALANCE_LEAST_CONN);
    assert_true(r->weights.error_rate == 1 && r->weights.sync_distance == 4);
    assert_true(r->sticky && r->sticky_factor_milli == 1500);
    assert_non_null(r->sticky_header); /* borrowed from the freed configuration: not read */
    assert_true(r->retention.blob_epochs == 10 && r->retention.state_slots == 30);
    assert_int_equal(r->timeout_ms, 9000);
    assert_int_equal(r->max_attempts, 4); /* failsafe wins over the deprecated key */
    assert_true(r->retry_delay_ms == 10 && r->retry_backoff_milli == 3500);
    assert_true(r->retry_max_delay_ms == 2000 && r->retry_jitter_ms == 0);
    assert_true(r->hedge_delay_ms == 100 && r->hedge_max_count == 2);
    assert_true(r->hedge_max_ratio_milli == 250 && r->hedge_max_priority == 1);
    assert_true(r->breaker.failure_threshold == 7 && r->breaker.success_threshold == 3);
    assert_int_equal(r->breaker.half_open_after_ms, 60000);

    bm_config_err_t err;
    bm_config_t *cfg = bm_config_parse(yaml, strlen(yaml), "t.yaml", NULL, NULL, &err);
    assert_non_null(cfg);
    assert_non_null(bm_config_deprecation(cfg));
    bm_readpath_node_opts_t no;
    bm_options_readpath_node(cfg, 0, &no);
    assert_true(no.priority == 1 && no.weight == 3 && no.archive);
    assert_true(no.autotune_min == 5 && no.autotune_max == 50);
    bm_options_readpath_node(cfg, 1, &no);
    assert_true(no.priority == 0 && no.weight == 1 && !no.archive && no.autotune_max == 0);
    bm_rules_t *rules = bm_options_rules(cfg);
    assert_non_null(rules);
    assert_true(bm_rules_blocked(rules, "/eth/v1/debug/fork_choice", 25));
    const char *v = "/eth/v1/beacon/states/head/validators";
    const bm_rule_t *rule = bm_rules_match(rules, "GET", v, strlen(v));
    assert_non_null(rule);
    assert_true(rule->consensus_query == 2 && rule->timeout_ms == 10000);
    assert_true(rule->restrict_nodes && rule->nodes == 2); /* tier 0: b */
    assert_int_equal(rule->strategy, BM_BALANCE_RANDOM);
    assert_int_equal(rule->max_attempts, BM_RULE_INHERIT);
    size_t rest;
    const bm_client_route_t *cr = bm_rules_client_route(rules, "/a/x", 4, &rest);
    assert_true(cr && cr->nodes == 1 && cr->strip_prefix && rest == 2);
    cr = bm_rules_client_route(rules, "/lighthouse/x", 13, &rest); /* built in */
    assert_true(cr && cr->client == BM_CLIENT_LIGHTHOUSE && !cr->strip_prefix);
    bm_rules_free(rules);
    bm_config_free(cfg);
    free(o);
}

static void test_borrowed_ca_file(void **state)
{
    (void)state;
    bm_config_t *cfg = bm_config_new();
    assert_non_null(cfg);
    cfg->tls.ca_file = strdup("/etc/ssl/certs/ca-certificates.crt");
    bm_options_t o;
    assert_int_equal(bm_options_from_config(&o, cfg), 0);
    assert_ptr_equal(o.upstream.ca_file, cfg->tls.ca_file);
    /* a root the validation would refuse is refused here too */
    cfg->genesis_validators_root = strdup("0xzz");
    assert_int_equal(bm_options_from_config(&o, cfg), BM_EINVAL);
    bm_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_have_one_home),
        cmocka_unit_test(test_every_key_reaches_its_modules),
        cmocka_unit_test(test_read_path_keys),
        cmocka_unit_test(test_borrowed_ca_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
