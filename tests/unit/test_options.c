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
    ASSERT_SAME_AS_DEFAULT(bm_failover_opts_t, bm_failover_opts_default, o->failover);
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
    assert_int_equal(o->failover.write_timeout_ms, 12000);
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
    const uint32_t connect[] = {o->discovery.connect_timeout_ms, o->failover.connect_timeout_ms,
                                o->monitor.connect_timeout_ms,   o->events.connect_timeout_ms,
                                o->attest.connect_timeout_ms,    o->produce.connect_timeout_ms,
                                o->aggregate.connect_timeout_ms, o->duties.connect_timeout_ms,
                                o->replay.connect_timeout_ms,    o->broadcast.connect_timeout_ms};
    for (size_t i = 0; i < sizeof connect / sizeof connect[0]; i++)
        assert_int_equal(connect[i], 1234);
    assert_int_equal(o->failover.read_timeout_ms, 2345);
    assert_int_equal(o->monitor.request_timeout_ms, 2345);
    assert_int_equal(o->broadcast.read_timeout_ms, 2345);
    assert_int_equal(o->failover.write_timeout_ms, 3456);
    assert_int_equal(o->failover.max_attempts, 5);
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
        cmocka_unit_test(test_borrowed_ca_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
