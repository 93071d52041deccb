/* SPDX-License-Identifier: MIT */
/*
 * test_broadcast: the broadcast policy end to end on loopback, in the miniature beaconmux
 * of fake_node.h: a front server with the router and the broadcast routes stands where
 * beaconmux listens; fake beacon nodes (answering from a script: request i gets step i,
 * the last step repeats; a step is a status, a body and a delay, or no answer) stand
 * behind it; the test's client is the project's upstream client. Every request a node
 * receives and every answer it sends goes into one ordered log ("a>" request to a, "a<"
 * answer from a, "a!" the request's client went away), so sequencing is asserted.
 *
 * Time is a manual clock the test advances (the nodes' delays, head starts, read and
 * write timeouts, the replay's debounce): nothing waits for real time, and answer times
 * are asserted to the millisecond. Nothing sleeps: the loop runs until a condition holds,
 * with a bound. Each test ends with uv_loop_close() == 0 (in the teardown).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "cluster/pool.h"
#include "duties/broadcast.h"
#include "duties/race.h"
#include "duties/replay.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000
#define WRITE_TIMEOUT_MS 800
#define READ_TIMEOUT_MS 300
#define HEADSTART_MS 250
#define DEBOUNCE_MS 10

typedef struct fx {
    fake_mux_t *m;
    uv_loop_t *loop;    /* m's */
    bm_pool_t *pool;    /* m's */
    fake_node_t *nodes; /* m's: a, b, c */
    char *log;          /* the nodes' log */
    bm_replay_t *replay;
    bm_broadcast_t *b;
    /* the producer lookup's answer */
    int producer;
    uint64_t producer_slot;
    bool producer_has_root;
    uint8_t producer_root[32];
} fx_t;

/* Node `tn` answers from the `n` steps given (its request count restarts). */
static void script(fake_node_t *tn, int n, ...)
{
    fake_step_t steps[FAKE_MAX_STEPS];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        steps[i] = va_arg(ap, fake_step_t);
    va_end(ap);
    fake_node_script(tn, steps, n);
}

/* One answer for each of the three nodes. */
static void script_each(fx_t *f, fake_step_t a, fake_step_t b, fake_step_t c)
{
    script(&f->nodes[0], 1, a);
    script(&f->nodes[1], 1, b);
    script(&f->nodes[2], 1, c);
}

static int producer_lookup(void *ud, uint64_t slot, uint8_t state_root[32], bool *has_state_root)
{
    fx_t *f = ud;
    if (f->producer < 0 || slot != f->producer_slot)
        return -1;
    *has_state_root = f->producer_has_root;
    if (f->producer_has_root)
        memcpy(state_root, f->producer_root, 32);
    return f->producer;
}

/* ---- fixture ---------------------------------------------------------------------------- */

static void module_stop(void *ud)
{
    fx_t *f = ud;
    bm_broadcast_stop(f->b);
    bm_replay_stop(f->replay);
}

static void module_free(void *ud)
{
    fx_t *f = ud;
    bm_broadcast_free(f->b);
    bm_replay_free(f->replay);
}

/* Three nodes a, b, c (all answering 200 at once unless scripted otherwise), broadcast with
 * short timeouts, the front server listening. */
static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->m = fake_mux_new_manual(true);
    f->loop = &f->m->loop;
    f->pool = f->m->pool;
    f->nodes = f->m->nodes.node;
    f->log = f->m->nodes.log;
    f->producer = -1;
    for (int i = 0; i < 3; i++)
        fake_node_add1(&f->m->nodes, FAKE_OK(0, NULL));
    bm_replay_opts_t ro;
    bm_replay_opts_default(&ro);
    ro.debounce_ms = DEBOUNCE_MS;
    f->replay = bm_replay_new(f->m->clock, f->m->up, f->pool, NULL, &ro);
    bm_broadcast_opts_t bo;
    bm_broadcast_opts_default(&bo);
    bo.write_timeout_ms = WRITE_TIMEOUT_MS;
    bo.read_timeout_ms = READ_TIMEOUT_MS;
    bo.producer_headstart_ms = HEADSTART_MS;
    bo.ssz_probe_grace_ms = 100;
    f->b = bm_broadcast_new(f->m->clock, f->m->eng, f->pool, f->replay, &bo);
    if (!f->replay || !f->b)
        return -1;
    f->m->module = f;
    f->m->module_stop = module_stop;
    f->m->module_free = module_free;
    bm_broadcast_set_producer(f->b, producer_lookup, f);
    if (bm_broadcast_register(f->b, f->m->router) != 0)
        return -1;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    /* once every write's time is up, nothing of the broadcast is left */
    fake_mux_advance(f->m, WRITE_TIMEOUT_MS);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    fake_mux_free(f->m);
    free(f);
    return 0;
}

/* ---- the client ---------------------------------------------------------------------------- */

static fake_call_t *send_req(fx_t *f, const char *method, const char *target, const char *ctype,
                             const void *body, size_t len, const char *version)
{
    fake_request_t rq = {.method = method,
                         .target = target,
                         .ctype = ctype,
                         .version = version,
                         .body = body,
                         .len = len,
                         .timeout_ms = BOUND_MS};
    return fake_mux_call(f->m, &rq);
}

static fake_call_t *post_json(fx_t *f, const char *target, const char *json)
{
    return send_req(f, "POST", target, "application/json", json, strlen(json), "electra");
}

static fake_call_t *post_ssz(fx_t *f, const char *target, const void *p, size_t n)
{
    return send_req(f, "POST", target, "application/octet-stream", p, n, "electra");
}

static void wait_client(fx_t *f, fake_call_t *c)
{
    fake_mux_wait(f->m, c);
}

/* Moves time `ms` forward (what each step sets off lands before the next). */
static void go(fx_t *f, uint64_t ms)
{
    fake_mux_advance(f->m, ms);
}

static int total_requests(fx_t *f)
{
    int n = 0;
    for (int i = 0; i < f->m->nodes.n; i++)
        n += f->nodes[i].requests;
    return n;
}

static int total_answered(fx_t *f)
{
    int n = 0;
    for (int i = 0; i < f->m->nodes.n; i++)
        n += f->nodes[i].answered + f->nodes[i].aborted;
    return n;
}

static size_t route_index(const char *method, const char *pattern)
{
    size_t n;
    const bm_broadcast_route_t *r = bm_broadcast_routes(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].method, method) == 0 && strcmp(r[i].pattern, pattern) == 0)
            return i;
    fail_msg("no route %s %s", method, pattern);
    return 0;
}

/* ---- the route table ------------------------------------------------------------------------ */

/* Every write of ENDPOINTS.md (beacon-APIs 7a58b5a: the POST operations whose stability is
 * "write" or "write (DVT)") and the stateful envelope read, with what the spec says of
 * them: SSZ request body ("req" column) and the class the design gives them. */
static const struct {
    const char *method, *path, *op;
    bm_bcast_class_t cls;
    bool ssz;
    int replay;
} SPEC[] = {
    {"POST", "/eth/v1/beacon/execution_payload_bids", "publishExecutionPayloadBid",
     BM_BCAST_PUBLISH, true, -1},
    {"POST", "/eth/v1/beacon/execution_payload_envelopes", "publishExecutionPayloadEnvelope",
     BM_BCAST_PUBLISH, true, -1},
    {"POST", "/eth/v1/beacon/pool/bls_to_execution_changes", "submitPoolBLSToExecutionChange",
     BM_BCAST_POOL, false, -1},
    {"POST", "/eth/v1/beacon/pool/payload_attestations", "submitPayloadAttestationMessages",
     BM_BCAST_POOL, true, -1},
    {"POST", "/eth/v1/beacon/pool/proposer_slashings", "submitPoolProposerSlashings", BM_BCAST_POOL,
     false, -1},
    {"POST", "/eth/v1/beacon/pool/sync_committees", "submitPoolSyncCommitteeSignatures",
     BM_BCAST_POOL, false, -1},
    {"POST", "/eth/v1/beacon/pool/voluntary_exits", "submitPoolVoluntaryExit", BM_BCAST_POOL, false,
     -1},
    {"POST", "/eth/v2/beacon/blinded_blocks", "publishBlindedBlockV2", BM_BCAST_PUBLISH, true, -1},
    {"POST", "/eth/v2/beacon/blocks", "publishBlockV2", BM_BCAST_PUBLISH, true, -1},
    {"POST", "/eth/v2/beacon/pool/attestations", "submitPoolAttestationsV2", BM_BCAST_POOL, true,
     -1},
    {"POST", "/eth/v2/beacon/pool/attester_slashings", "submitPoolAttesterSlashingsV2",
     BM_BCAST_POOL, false, -1},
    {"POST", "/eth/v1/validator/beacon_committee_selections", "submitBeaconCommitteeSelections",
     BM_BCAST_SELECTIONS, false, -1},
    {"POST", "/eth/v1/validator/beacon_committee_subscriptions", "prepareBeaconCommitteeSubnet",
     BM_BCAST_STATE, false, BM_REPLAY_COMMITTEE_SUBS},
    {"POST", "/eth/v1/validator/contribution_and_proofs", "publishContributionAndProofs",
     BM_BCAST_POOL, false, -1},
    {"POST", "/eth/v1/validator/prepare_beacon_proposer", "prepareBeaconProposer", BM_BCAST_STATE,
     false, BM_REPLAY_PREPARATION},
    {"POST", "/eth/v1/validator/proposer_preferences", "submitProposerPreferences", BM_BCAST_STATE,
     true, BM_REPLAY_PREFERENCES},
    {"POST", "/eth/v1/validator/register_validator", "registerValidator", BM_BCAST_STATE, true,
     BM_REPLAY_REGISTRATION},
    {"POST", "/eth/v1/validator/sync_committee_selections", "submitSyncCommitteeSelections",
     BM_BCAST_SELECTIONS, false, -1},
    {"POST", "/eth/v1/validator/sync_committee_subscriptions", "prepareSyncCommitteeSubnets",
     BM_BCAST_STATE, false, BM_REPLAY_SYNC_SUBS},
    {"POST", "/eth/v2/validator/aggregate_and_proofs", "publishAggregateAndProofsV2", BM_BCAST_POOL,
     true, -1},
    {"GET", "/eth/v1/validator/execution_payload_envelopes/{slot}/{beacon_block_root}",
     "getExecutionPayloadEnvelope", BM_BCAST_PRODUCER_READ, false, -1},
};

static void noop_route(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)req;
    (void)p;
    (void)ud;
}

static void test_route_table_covers_every_write(void **state)
{
    fx_t *f = *state;
    size_t n;
    const bm_broadcast_route_t *r = bm_broadcast_routes(&n);
    size_t spec_n = sizeof SPEC / sizeof SPEC[0];
    size_t ssz = 0;
    for (size_t i = 0; i < spec_n; i++) {
        size_t k = route_index(SPEC[i].method, SPEC[i].path);
        assert_string_equal(r[k].operation_id, SPEC[i].op);
        assert_int_equal(r[k].cls, SPEC[i].cls);
        assert_int_equal(r[k].ssz_body, SPEC[i].ssz);
        assert_int_equal(r[k].replay, SPEC[i].replay);
        assert_false(r[k].legacy);
        assert_int_equal(r[k].producer_first, strstr(SPEC[i].op, "Blinded") != NULL ||
                                                  SPEC[i].cls == BM_BCAST_PRODUCER_READ);
        ssz += SPEC[i].ssz;
    }
    assert_int_equal(ssz, 9); /* ENDPOINTS.md: 9 operations accept an SSZ request body */
    /* everything else in the table is a legacy v1 write */
    size_t legacy = 0;
    for (size_t k = 0; k < n; k++) {
        bool in_spec = false;
        for (size_t i = 0; i < spec_n; i++)
            in_spec |= strcmp(r[k].pattern, SPEC[i].path) == 0;
        if (!in_spec) {
            assert_true(r[k].legacy);
            assert_string_equal(r[k].method, "POST");
            assert_non_null(strstr(r[k].pattern, "/eth/v1/"));
            legacy++;
        }
    }
    assert_int_equal(n, spec_n + legacy);
    /* the registered table routes every path (with a parameter filled in) to broadcast */
    bm_router_t *rt = bm_router_new();
    assert_non_null(rt);
    bm_router_set_fallback(rt, noop_route, NULL);
    assert_int_equal(bm_broadcast_register(f->b, rt), 0);
    for (size_t k = 0; k < n; k++) {
        char path[256];
        snprintf(path, sizeof path, "%s", r[k].pattern);
        char *brace = strstr(path, "/{slot}/{beacon_block_root}");
        if (brace)
            strcpy(brace, "/12/0xabcd");
        bm_route_params_t params;
        void *ud = NULL;
        bm_route_fn fn = bm_router_match(rt, r[k].method, path, strlen(path), &params, &ud);
        assert_ptr_not_equal(fn, noop_route);
        assert_non_null(ud);
    }
    bm_router_free(rt);
}

/* ---- writes -------------------------------------------------------------------------------- */

static void test_write_reaches_every_node_lagging_and_syncing_included(void **state)
{
    fx_t *f = *state;
    bm_pool_set_state(f->pool, f->nodes[0].node, BM_NODE_READY, "test");
    bm_pool_set_state(f->pool, f->nodes[1].node, BM_NODE_LAGGING, "test");
    bm_pool_set_state(f->pool, f->nodes[2].node, BM_NODE_SYNCING, "test");
    static const char *block = "{\"message\":{\"slot\":\"5\"},\"signature\":\"0x01\"}";
    fake_call_t *c = send_req(f, "POST", "/eth/v2/beacon/blocks?broadcast_validation=consensus",
                              "application/json", block, strlen(block), "fulu");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(total_answered(f), 3);
    for (int i = 0; i < 3; i++) {
        fake_node_t *tn = &f->nodes[i];
        assert_int_equal(tn->requests, 1);
        /* query string, headers and body unchanged */
        assert_string_equal(fake_node_last(tn)->target,
                            "/eth/v2/beacon/blocks?broadcast_validation=consensus");
        assert_string_equal(fake_node_last(tn)->version, "fulu");
        assert_string_equal(fake_node_last(tn)->ctype, "application/json");
        assert_string_equal(fake_node_last(tn)->body, block);
    }
    /* a node judged unreachable gets it too: the verdict may be a moment old */
    bm_pool_set_state(f->pool, f->nodes[2].node, BM_NODE_UNREACHABLE, "test");
    c = post_json(f, "/eth/v2/beacon/pool/attestations", "[]");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(total_answered(f), 6);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f->nodes[i].requests, 2);
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.requests, 2);
    assert_int_equal(st.answered_2xx, 2);
}

/* Every node that can answer refused the write: the client has the most specific error then,
 * not when the unreachable node (hung here) answers or the write times out; that node still
 * gets the write. */
static void test_error_does_not_wait_for_an_unreachable_node(void **state)
{
    fx_t *f = *state;
    bm_pool_set_state(f->pool, f->nodes[2].node, BM_NODE_UNREACHABLE, "test");
    script_each(f, FAKE_STATUS(400, 0, "{\"code\":400,\"message\":\"bad exit\"}"),
                FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"busy\"}"), FAKE_OK(400, NULL));
    fake_call_t *c = post_json(f, "/eth/v1/beacon/pool/voluntary_exits", "{}");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 400); /* a's: more specific than b's 503 */
    assert_int_equal(fake_call_ms(c), 0);
    go(f, 400);
    assert_int_equal(f->nodes[2].answered, 1); /* c got it all the same */
    assert_int_equal(bm_broadcast_active(f->b), 0);
}

static void test_answered_at_first_2xx_with_a_hung_node(void **state)
{
    fx_t *f = *state;
    script_each(f, FAKE_HANG, FAKE_OK(150, NULL), FAKE_OK(10, NULL));
    fake_call_t *c = post_json(f, "/eth/v1/beacon/pool/sync_committees", "[]");
    go(f, 10);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    /* the fastest 2xx, neither the slow one nor the hung one */
    assert_int_equal(fake_call_ms(c), 10);
    assert_int_equal(f->nodes[2].answered, 1);
    assert_int_equal(f->nodes[1].answered, 0);
    assert_int_equal(f->nodes[0].requests, 1);
    /* the rest runs detached: the slow node still answers, the hung one is cut at the
     * write timeout and only then is the write over */
    go(f, 140);
    assert_int_equal(f->nodes[1].answered, 1);
    assert_int_equal(f->nodes[0].aborted, 0);
    go(f, WRITE_TIMEOUT_MS - 150 - 1);
    assert_int_equal(bm_broadcast_active(f->b), 1);
    go(f, 1);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(f->nodes[0].aborted, 1);
}

static void test_most_specific_error_when_none_took_it(void **state)
{
    fx_t *f = *state;
    script_each(f, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"),
                FAKE_STATUS(400, 20, "{\"code\":400,\"message\":\"bad exit\"}"),
                FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"syncing\"}"));
    fake_call_t *c = post_json(f, "/eth/v1/beacon/pool/voluntary_exits", "{}");
    go(f, 20);
    wait_client(f, c);
    assert_int_equal(fake_call_ms(c), 20);
    assert_int_equal(c->status, 400);
    assert_string_equal(c->body, "{\"code\":400,\"message\":\"bad exit\"}");
    assert_string_equal(fake_call_header(c, "content-type"), "application/json");
    /* nobody answers at all: the engine's 503 naming each node */
    bm_pool_set_state(f->pool, f->nodes[0].node, BM_NODE_UNREACHABLE, "test");
    bm_pool_set_state(f->pool, f->nodes[1].node, BM_NODE_UNREACHABLE, "test");
    bm_pool_set_state(f->pool, f->nodes[2].node, BM_NODE_WRONG_NETWORK, "test");
    script(&f->nodes[0], 1, FAKE_HANG);
    script(&f->nodes[1], 1, FAKE_HANG);
    c = post_json(f, "/eth/v1/beacon/pool/voluntary_exits", "{}");
    go(f, WRITE_TIMEOUT_MS);
    wait_client(f, c);
    assert_int_equal(fake_call_ms(c), WRITE_TIMEOUT_MS);
    assert_int_equal(c->status, 503);
    assert_non_null(strstr(c->body, "\"code\":503"));
    assert_int_equal(f->nodes[2].requests, 1); /* wrong network: never asked again */
}

/* No node can take it: a pool write, a block publish and a DVT selection (one node at a
 * time) keep their bound, writeTimeout, with all nodes hung, one hung and the others
 * failing, one hung and the others down. A write relays the most specific answer (the
 * nodes' 500), or the engine's 503 naming each node when none gave an HTTP answer. */
static void test_no_node_takes_it_bounded(void **state)
{
    fx_t *f = *state;
    static const char *const targets[] = {"/eth/v1/beacon/pool/sync_committees",
                                          "/eth/v2/beacon/blocks",
                                          "/eth/v1/validator/beacon_committee_selections"};
    static const char *const bodies[] = {"[]", "{}", "[]"};
    const char *to = bm_strerror(BM_ETIMEDOUT), *refused = bm_strerror(BM_ECONNREFUSED);
    for (int kase = 0; kase < 3; kase++) {
        if (kase == 2) {
            fake_node_down(&f->nodes[1]);
            fake_node_down(&f->nodes[2]);
        }
        for (size_t r = 0; r < 3; r++) {
            /* each from reachable nodes (the earlier time-outs would change the order) */
            for (int i = 0; i < 3; i++)
                bm_pool_record(f->pool, f->nodes[i].node, BM_OUTCOME_OK, false, 1000, NULL);
            script(&f->nodes[0], 1, FAKE_HANG);
            fake_step_t other =
                kase == 0 ? FAKE_HANG : FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}");
            if (kase < 2) {
                script(&f->nodes[1], 1, other);
                script(&f->nodes[2], 1, other);
            }
            fake_call_t *c = post_json(f, targets[r], bodies[r]);
            go(f, WRITE_TIMEOUT_MS - 1);
            assert_false(c->done);
            go(f, 1);
            wait_client(f, c);
            assert_int_equal(fake_call_ms(c), WRITE_TIMEOUT_MS);
            char want[256];
            if (r == 2) /* one at a time: the hung first node holds the bound */
                snprintf(want, sizeof want,
                         "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: not asked; "
                         "c: not asked\"}",
                         to);
            else if (kase == 1)
                snprintf(want, sizeof want, "{\"code\":500,\"message\":\"boom\"}");
            else
                snprintf(want, sizeof want,
                         "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: "
                         "%s\"}",
                         to, kase ? refused : to, kase ? refused : to);
            if (strcmp(c->body, want) != 0)
                fail_msg("%s, case %d: %d %s", targets[r], kase, c->status, c->body);
            go(f, WRITE_TIMEOUT_MS); /* the detached rest is over */
        }
    }
}

/* The envelope read with no node able to serve it: one node at a time, each for at most the
 * read timeout, the whole bounded by writeTimeout. */
static void test_envelope_read_no_node_has_it_bounded(void **state)
{
    fx_t *f = *state;
    const char *to = bm_strerror(BM_ETIMEDOUT), *refused = bm_strerror(BM_ECONNREFUSED);
    const char *target = "/eth/v1/validator/execution_payload_envelopes/12/0xab";
    static const uint64_t at[] = {WRITE_TIMEOUT_MS, READ_TIMEOUT_MS, READ_TIMEOUT_MS};
    for (int kase = 0; kase < 3; kase++) {
        if (kase == 2) {
            fake_node_down(&f->nodes[1]);
            fake_node_down(&f->nodes[2]);
        }
        for (int i = 0; i < 3; i++)
            bm_pool_record(f->pool, f->nodes[i].node, BM_OUTCOME_OK, false, 1000, NULL);
        script(&f->nodes[0], 1, FAKE_HANG);
        fake_step_t other =
            kase == 0 ? FAKE_HANG : FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}");
        if (kase < 2) {
            script(&f->nodes[1], 1, other);
            script(&f->nodes[2], 1, other);
        }
        fake_call_t *c = send_req(f, "GET", target, NULL, NULL, 0, NULL);
        go(f, at[kase] - 1);
        assert_false(c->done);
        go(f, 1);
        wait_client(f, c);
        assert_int_equal(fake_call_ms(c), at[kase]);
        char want[256];
        if (kase == 1)
            snprintf(want, sizeof want, "{\"code\":500,\"message\":\"boom\"}");
        else
            snprintf(want, sizeof want,
                     "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: %s\"}", to,
                     kase ? refused : to, kase ? refused : to);
        if (strcmp(c->body, want) != 0)
            fail_msg("case %d: %d %s", kase, c->status, c->body);
        go(f, WRITE_TIMEOUT_MS);
    }
}

/* Batches refused item by item (the indexed error): the answers are merged. Each node
 * refuses items the other took, or calls them duplicates (another node gossiped them: a
 * real Lodestar answers 500 with PublishError.Duplicate): 200, as soon as every item was
 * taken somewhere, without waiting for a hung node. An item that failed on every node that
 * answered is a 400 with only that item, each node's message in it. */
static void test_indexed_errors_merged(void **state)
{
    fx_t *f = *state;
    const char *batch = "[{\"x\":0},{\"x\":1},{\"x\":2}]";
    script(&f->nodes[0], 1,
           FAKE_STATUS(400, 0,
                       "{\"code\":400,\"message\":\"some failed\",\"failures\":[{\"index\":0,"
                       "\"message\":\"invalid signature\"}]}"));
    script(&f->nodes[1], 1,
           FAKE_STATUS(500, 10,
                       "{\"code\":500,\"message\":\"x\",\"failures\":[{\"index\":1,\"message\":"
                       "\"PublishError.Duplicate\"},{\"index\":2,\"message\":\"bad\"}]}"));
    script(&f->nodes[2], 1, FAKE_HANG);
    fake_call_t *c = post_json(f, "/eth/v1/validator/contribution_and_proofs", batch);
    go(f, 9);
    assert_false(c->done); /* item 0 was refused by a, and b has not answered */
    go(f, 1);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(c->body_len, 0);
    assert_int_equal(fake_call_ms(c), 10);
    assert_int_equal(f->nodes[2].requests, 1); /* the hung node still has it */
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.indexed_merged, 1);

    /* the Lodestar case: every node calls some items duplicates */
    const char *dup = "{\"code\":500,\"message\":\"Error processing contributions\",\"failures\":"
                      "[{\"index\":1,\"message\":\"PublishError.Duplicate\"}]}";
    for (int i = 0; i < 3; i++)
        script(&f->nodes[i], 1, FAKE_STATUS(500, 0, dup));
    c = post_json(f, "/eth/v1/validator/contribution_and_proofs", batch);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);

    /* item 0 fails on every node that answered (c: a plain error takes nothing) */
    script(&f->nodes[0], 1,
           FAKE_STATUS(400, 0,
                       "{\"code\":400,\"message\":\"x\",\"failures\":[{\"index\":0,\"message\":"
                       "\"invalid signature\"}]}"));
    script(&f->nodes[1], 1,
           FAKE_STATUS(400, 0,
                       "{\"code\":400,\"message\":\"x\",\"failures\":[{\"index\":\"0\",\"message\":"
                       "\"unknown block\"},{\"index\":1,\"message\":\"already known\"}]}"));
    script(&f->nodes[2], 1, FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"syncing\"}"));
    c = post_json(f, "/eth/v1/beacon/pool/sync_committees", batch);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 400);
    assert_string_equal(c->body, "{\"code\":400,\"message\":\"1 item(s) failed on every node that "
                                 "answered\",\"failures\":[{\"index\":0,\"message\":\"a: invalid "
                                 "signature; b: unknown block; c: 503 syncing\"}]}");
    assert_string_equal(fake_call_header(c, "content-type"), "application/json");
    /* plain errors only: the most specific one, as before */
    for (int i = 0; i < 3; i++)
        script(&f->nodes[i], 1, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"));
    c = post_json(f, "/eth/v1/beacon/pool/sync_committees", batch);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 500);
    assert_string_equal(c->body, "{\"code\":500,\"message\":\"boom\"}");
}

static void test_client_hangup_does_not_stop_a_block(void **state)
{
    fx_t *f = *state;
    for (int i = 0; i < 3; i++)
        script(&f->nodes[i], 1, FAKE_OK(150, NULL));
    static const char *block = "{\"message\":{\"slot\":\"9\"},\"signature\":\"0x02\"}";
    fake_call_t *c = send_req(f, "POST", "/eth/v2/beacon/blocks", "application/json", block,
                              strlen(block), "fulu");
    go(f, 0);
    assert_int_equal(total_requests(f), 3);
    bm_upstream_cancel(c->x); /* the client times out and hangs up */
    c->x = NULL;
    go(f, 150);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->nodes[i].answered, 1);
        assert_int_equal(f->nodes[i].aborted, 0);
    }
    assert_int_equal(bm_broadcast_active(f->b), 0);
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.node_deliveries, 3);
}

/* ---- SSZ and 415 ------------------------------------------------------------------------------
 */

static const uint8_t SSZ_BODY[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

typedef struct refusals {
    int n;
    size_t node;
    const char *pattern;
} refusals_t;

static void on_refusal(void *ud, size_t node, const char *pattern)
{
    refusals_t *r = ud;
    r->n++;
    r->node = node;
    r->pattern = pattern;
}

/* Shared state: a new refusal is told once; one learnt from another instance is remembered
 * as if seen here, and not told. */
static void test_ssz_refusals_told_and_learnt(void **state)
{
    fx_t *f = *state;
    refusals_t r = {0};
    bm_broadcast_on_ssz_refusal(f->b, on_refusal, &r);
    size_t route = route_index("POST", "/eth/v2/beacon/blocks");
    script(&f->nodes[0], 1, FAKE_STATUS(415, 0, "{\"code\":415,\"message\":\"no ssz\"}"));
    fake_call_t *c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 10);
    wait_client(f, c);
    go(f, 20);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.node, 0);
    assert_string_equal(r.pattern, "/eth/v2/beacon/blocks");
    size_t reg = route_index("POST", "/eth/v1/validator/register_validator");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, reg), BM_SSZ_UNKNOWN);
    assert_int_equal(
        bm_broadcast_learn_ssz_refusal(f->b, 2, "/eth/v1/validator/register_validator", NULL), 0);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, reg), BM_SSZ_REFUSED);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, route), BM_SSZ_ACCEPTED);
    assert_int_equal(bm_broadcast_learn_ssz_refusal(f->b, 2, "/eth/v1/nothing", NULL),
                     BM_ENOTFOUND);
    assert_int_equal(bm_broadcast_learn_ssz_refusal(f->b, 9, "/eth/v2/beacon/blocks", NULL),
                     BM_ENOTFOUND);
    assert_int_equal(r.n, 1);
    bm_broadcast_on_ssz_refusal(f->b, NULL, NULL);
}

static void test_ssz_block_never_415_when_a_node_took_it(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v2/beacon/blocks");
    script_each(f, FAKE_STATUS(415, 0, "{\"code\":415,\"message\":\"no ssz\"}"), FAKE_OK(40, NULL),
                FAKE_OK(60, NULL));
    fake_call_t *c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 40);
    wait_client(f, c);
    assert_int_equal(c->status, 200); /* b took it */
    go(f, 20);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_REFUSED);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 1, route), BM_SSZ_ACCEPTED);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, route), BM_SSZ_ACCEPTED);
    assert_int_equal(fake_node_last(&f->nodes[1])->body_len, sizeof SSZ_BODY);
    assert_string_equal(fake_node_last(&f->nodes[1])->ctype, "application/octet-stream");
    /* remembered: the next SSZ block is not sent to a at all, and still answered 200 */
    c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 40);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    go(f, 20);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(f->nodes[0].requests, 1);
    assert_int_equal(f->nodes[1].requests, 2);
    /* a JSON block still goes to a */
    c = post_json(f, "/eth/v2/beacon/blocks", "{}");
    go(f, 60);
    wait_client(f, c);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(f->nodes[0].requests, 2);
    /* when no other node takes the block, the answer is 415: a JSON resend may reach a */
    script(&f->nodes[1], 1, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"x\"}"));
    script(&f->nodes[2], 1, FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"y\"}"));
    f->nodes[1].requests = f->nodes[2].requests = 0;
    c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 415);
    assert_non_null(strstr(c->body, "\"code\":415"));
    /* forgetting the node (it came back from unreachable: maybe upgraded) asks it again */
    bm_pool_set_state(f->pool, f->nodes[0].node, BM_NODE_UNREACHABLE, "test");
    bm_pool_set_state(f->pool, f->nodes[0].node, BM_NODE_READY, "test");
    bm_broadcast_node_state(f->nodes[0].node, BM_NODE_UNREACHABLE, f->b);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_UNKNOWN);
}

/* Node 0 refuses an SSZ block once (415): broadcast learns the refusal for `route`. */
static void learn_block_refusal_of_node0(fx_t *f, size_t route)
{
    script(&f->nodes[0], 1, FAKE_STATUS(415, 0, "{\"code\":415,\"message\":\"no ssz\"}"));
    fake_call_t *c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 40);
    wait_client(f, c);
    go(f, 20);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_REFUSED);
}

/* stateDir: a refusal learned here comes back in a new broadcast (a restarted beaconmux),
 * survives that node's first discovery, is forgotten when the node comes back a second
 * time, and is not restored once older than the SSZ memory or over a refusal learned live. */
static void test_ssz_refusals_survive_a_restart(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v2/beacon/blocks");
    learn_block_refusal_of_node0(f, route);
    uint64_t now = bm_clock_wall_now(f->m->clock);
    bm_str_t ex = BM_STR_INIT;
    assert_int_equal(bm_broadcast_export_ssz(f->b, now, &ex), 0);
    char want[64];
    snprintf(want, sizeof want, "\"node\":\"%s\"", bm_pool_node(f->pool, 0)->id);
    assert_non_null(strstr(bm_str_data(&ex), want));
    snprintf(want, sizeof want, "\"node\":\"%s\"", bm_pool_node(f->pool, 1)->id);
    assert_null(strstr(bm_str_data(&ex), want)); /* it took SSZ */

    bm_broadcast_opts_t bo;
    bm_broadcast_opts_default(&bo);
    bm_broadcast_t *b2 = bm_broadcast_new(f->m->clock, f->m->eng, f->pool, NULL, &bo);
    assert_non_null(b2);
    const char *t = bm_str_data(&ex);
    /* older than the memory (an hour): nothing */
    assert_int_equal(bm_broadcast_import_ssz(b2, t, strlen(t), now + bo.ssz_memory_ms), 0);
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_UNKNOWN);
    assert_int_equal(bm_broadcast_import_ssz(b2, t, strlen(t), now + 1000), 1);
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_REFUSED);
    assert_int_equal(bm_broadcast_ssz_support(b2, 1, route), BM_SSZ_UNKNOWN);
    /* the node's first discovery keeps it; a later return forgets it */
    bm_node_t *n0 = bm_pool_node(f->pool, 0);
    bm_pool_set_state(f->pool, n0, BM_NODE_READY, "test");
    bm_broadcast_node_state(n0, BM_NODE_UNKNOWN, b2);
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_REFUSED);
    bm_broadcast_node_state(n0, BM_NODE_UNREACHABLE, b2);
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_UNKNOWN);
    /* what is not an export restores nothing */
    const char *bad[] = {"{}", "[{\"node\":1}]", "nope",
                         "[{\"node\":\"zz\",\"method\":\"POST\","
                         "\"route\":\"/x\",\"sinceMs\":\"1\"}]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = bm_broadcast_import_ssz(b2, bad[i], strlen(bad[i]), now);
        assert_true(n == BM_EINVAL || n == 0);
    }
    bm_broadcast_stop(b2);
    go(f, 1);
    bm_broadcast_free(b2);
    /* a refusal learned live is not replaced by a file's */
    assert_int_equal(bm_broadcast_import_ssz(f->b, t, strlen(t), now), 0);
    bm_str_dispose(&ex);
}

static void set_version(bm_node_t *n, const char *v)
{
    free(n->version); /* the pool frees it, as discovery's */
    n->version = strdup(v);
    assert_non_null(n->version);
}

/* A node restarted as another version (an upgrade, seen by discovery without the node ever
 * looking unreachable, or while beaconmux was down) is asked for SSZ again: its refusals
 * were recorded under the version it ran then, kept in the state file and in the shared
 * record. */
static void test_ssz_refusals_forgotten_when_the_node_is_upgraded(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v2/beacon/blocks");
    bm_node_t *n0 = bm_pool_node(f->pool, 0);
    set_version(n0, "Lighthouse/v7.0.0/x86_64-linux");
    learn_block_refusal_of_node0(f, route);
    uint64_t now = bm_clock_wall_now(f->m->clock);
    bm_str_t ex = BM_STR_INIT;
    assert_int_equal(bm_broadcast_export_ssz(f->b, now, &ex), 0);
    assert_non_null(strstr(bm_str_data(&ex), "\"version\":\"Lighthouse/v7.0.0/x86_64-linux\""));

    /* the same version after a restart: still refused; an upgrade: asked again */
    set_version(n0, "Lighthouse/v7.0.0/x86_64-linux");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_REFUSED);
    set_version(n0, "Lighthouse/v7.1.0/x86_64-linux");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_UNKNOWN);
    script(&f->nodes[0], 1, FAKE_OK(0, NULL)); /* the new version takes SSZ */
    fake_call_t *c = post_ssz(f, "/eth/v2/beacon/blocks", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 40);
    wait_client(f, c);
    go(f, 20);
    assert_int_equal(f->nodes[0].requests, 1); /* the SSZ copy reached it */
    assert_string_equal(fake_node_last(&f->nodes[0])->ctype, "application/octet-stream");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_ACCEPTED);

    /* the state file of the old version, read by a restarted beaconmux: the refusal comes
     * back, and counts only while the node still reports the version it was made under */
    bm_broadcast_opts_t bo;
    bm_broadcast_opts_default(&bo);
    bm_broadcast_t *b2 = bm_broadcast_new(f->m->clock, f->m->eng, f->pool, NULL, &bo);
    assert_non_null(b2);
    const char *t = bm_str_data(&ex);
    assert_int_equal(bm_broadcast_import_ssz(b2, t, strlen(t), now + 1000), 1);
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_UNKNOWN);
    set_version(n0, "Lighthouse/v7.0.0/x86_64-linux");
    assert_int_equal(bm_broadcast_ssz_support(b2, 0, route), BM_SSZ_REFUSED);
    bm_broadcast_stop(b2);
    go(f, 1);
    bm_broadcast_free(b2);
    bm_str_dispose(&ex);

    /* a shared refusal made under another version than the node's now is stale */
    size_t reg = route_index("POST", "/eth/v1/validator/register_validator");
    bm_node_t *n2 = bm_pool_node(f->pool, 2);
    set_version(n2, "teku/v25.1.0");
    const char *p = "/eth/v1/validator/register_validator";
    assert_int_equal(bm_broadcast_learn_ssz_refusal(f->b, 2, p, "teku/v24.12.0"), 0);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, reg), BM_SSZ_UNKNOWN);
    assert_int_equal(bm_broadcast_learn_ssz_refusal(f->b, 2, p, "teku/v25.1.0"), 0);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, reg), BM_SSZ_REFUSED);
    set_version(n2, "teku/v25.2.0");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, reg), BM_SSZ_UNKNOWN);
}

static void test_ssz_pool_write_refused_then_415_at_once(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v2/beacon/pool/attestations");
    script_each(f, FAKE_STATUS(415, 0, "{\"code\":415,\"message\":\"no ssz\"}"), FAKE_OK(20, NULL),
                FAKE_OK(0, NULL));
    fake_call_t *c = post_ssz(f, "/eth/v2/beacon/pool/attestations", SSZ_BODY, sizeof SSZ_BODY);
    go(f, 20);
    wait_client(f, c);
    /* the nodes that take SSZ got it; the client is told to resend JSON for a's sake */
    assert_int_equal(c->status, 415);
    assert_string_equal(c->body, "{\"code\":415,\"message\":\"no ssz\"}");
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(f->nodes[1].answered, 1);
    assert_int_equal(f->nodes[2].answered, 1);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, route), BM_SSZ_REFUSED);
    /* from now on an SSZ copy is refused before anything is sent: no double delivery */
    int before = total_requests(f);
    c = post_ssz(f, "/eth/v2/beacon/pool/attestations", SSZ_BODY, sizeof SSZ_BODY);
    wait_client(f, c); /* at once: nothing is sent */
    assert_int_equal(c->status, 415);
    assert_int_equal(total_requests(f), before);
    /* the JSON resend reaches everyone, a included */
    c = post_json(f, "/eth/v2/beacon/pool/attestations", "[{\"x\":1}]");
    go(f, 20);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(total_requests(f), before + 3);
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.ssz_refused_at_once, 1);
    /* another endpoint is remembered separately */
    size_t agg = route_index("POST", "/eth/v2/validator/aggregate_and_proofs");
    assert_int_equal(bm_broadcast_ssz_support(f->b, 0, agg), BM_SSZ_UNKNOWN);
}

/* A node judged unreachable whose SSZ support is unknown (forgotten when it came back, gone
 * again) gets an SSZ write too, but the client's 2xx does not wait the probe grace for it. */
static void test_ssz_write_does_not_wait_for_an_unreachable_node(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v1/validator/register_validator");
    uint8_t reg[180];
    memset(reg, 0x11, sizeof reg);
    fake_call_t *c = post_ssz(f, "/eth/v1/validator/register_validator", reg, sizeof reg);
    go(f, 0);
    wait_client(f, c);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(bm_broadcast_ssz_support(f->b, i, route), BM_SSZ_ACCEPTED);
    bm_broadcast_forget_node(f->b, 2);
    bm_pool_set_state(f->pool, f->nodes[2].node, BM_NODE_UNREACHABLE, "test");
    script(&f->nodes[2], 1, FAKE_OK(500, NULL));
    c = post_ssz(f, "/eth/v1/validator/register_validator", reg, sizeof reg);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 0); /* not the 100 ms grace */
    go(f, 500);
    assert_int_equal(f->nodes[2].requests, 1); /* c got it (counted since its script) */
    assert_int_equal(f->nodes[2].answered, 2);
    assert_int_equal(bm_broadcast_ssz_support(f->b, 2, route), BM_SSZ_ACCEPTED);
}

static void test_ssz_late_refusal_replays_state_as_json(void **state)
{
    fx_t *f = *state;
    size_t route = route_index("POST", "/eth/v1/validator/register_validator");
    /* one SignedValidatorRegistrationV1: fee 0x11.., gas 30000000, ts 1700000000 */
    uint8_t reg[180];
    memset(reg, 0, sizeof reg);
    memset(reg, 0x11, 20);
    uint64_t gas = 30000000, ts = 1700000000;
    for (int i = 0; i < 8; i++) {
        reg[20 + i] = (uint8_t)(gas >> (8 * i));
        reg[28 + i] = (uint8_t)(ts >> (8 * i));
    }
    memset(reg + 36, 0xaa, 48);
    memset(reg + 84, 0xcc, 96);
    fake_call_t *c = post_ssz(f, "/eth/v1/validator/register_validator", reg, sizeof reg);
    /* every node's SSZ support is unknown: the answer would wait the probe grace for a 415,
     * but every node answered at once: nothing more can come */
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 0);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(bm_broadcast_ssz_support(f->b, i, route), BM_SSZ_ACCEPTED);
    assert_int_equal(bm_replay_count(f->replay, BM_REPLAY_REGISTRATION), 1);
    /* a is replaced by a build without SSZ; it refuses after the client had its 200 */
    script(&f->nodes[0], 2, FAKE_STATUS(415, 300, "{\"code\":415,\"message\":\"no ssz\"}"),
           FAKE_OK(0, NULL));
    f->nodes[0].requests = 0;
    c = post_ssz(f, "/eth/v1/validator/register_validator", reg, sizeof reg);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200); /* every node's SSZ support was known: no grace */
    assert_int_equal(fake_call_ms(c), 0);
    go(f, 300);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.ssz_refused_late, 1);
    /* the replay gives a its registration as JSON, after the replay's debounce */
    assert_int_equal(f->nodes[0].requests, 1);
    go(f, DEBOUNCE_MS);
    assert_false(bm_replay_busy(f->replay, 0));
    assert_int_equal(f->nodes[0].requests, 2);
    assert_string_equal(fake_node_last(&f->nodes[0])->target,
                        "/eth/v1/validator/register_validator");
    assert_string_equal(fake_node_last(&f->nodes[0])->ctype, "application/json");
    assert_non_null(strstr(fake_node_last(&f->nodes[0])->body, "\"gas_limit\":\"30000000\""));
    assert_non_null(strstr(fake_node_last(&f->nodes[0])->body, "\"timestamp\":\"1700000000\""));
    assert_int_equal(f->nodes[1].requests, 2); /* nobody else was replayed to */
}

/* ---- producer first ------------------------------------------------------------------------- */

static const char *blinded_json(char *buf, size_t cap, uint64_t slot, uint8_t root_byte)
{
    char root[67] = "0x";
    for (int i = 0; i < 32; i++)
        snprintf(root + 2 + 2 * i, 3, "%02x", root_byte);
    snprintf(buf, cap,
             "{\"message\":{\"slot\":\"%llu\",\"state_root\":\"%s\"},\"signature\":\"0x\"}",
             (unsigned long long)slot, root);
    return buf;
}

/* Publishes a blinded block of `slot` whose state_root is `root_byte` repeated. */
static fake_call_t *post_blinded(fx_t *f, uint64_t slot, uint8_t root_byte)
{
    char body[256];
    return post_json(f, "/eth/v2/beacon/blinded_blocks",
                     blinded_json(body, sizeof body, slot, root_byte));
}

static void test_blinded_block_goes_first_to_its_producer(void **state)
{
    fx_t *f = *state;
    f->producer = 2;
    f->producer_slot = 77;
    f->producer_has_root = true;
    memset(f->producer_root, 0x5e, 32);
    script(&f->nodes[2], 1, FAKE_OK(60, NULL));
    fake_call_t *c = post_blinded(f, 77, 0x5e);
    go(f, 60);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 60);
    assert_int_equal(total_answered(f), 3);
    /* the producer alone, then everyone else once it answered */
    assert_true(strncmp(f->log, "c>c<", 4) == 0);
    assert_int_equal(f->nodes[0].requests, 1);
    assert_int_equal(f->nodes[1].requests, 1);
    /* another node's block for that slot (other state_root): everyone at once */
    f->log[0] = '\0';
    c = post_blinded(f, 77, 0x01);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(fake_call_ms(c), 0); /* a and b answered at once */
    go(f, 60);
    assert_int_equal(total_answered(f), 6);
    assert_null(strstr(f->log, "c>c<"));
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.producer_first, 1);
}

static void test_blinded_producer_hung_others_after_head_start(void **state)
{
    fx_t *f = *state;
    f->producer = 0;
    f->producer_slot = 8;
    script(&f->nodes[0], 1, FAKE_OK(600, NULL));
    fake_call_t *c = post_blinded(f, 8, 1);
    /* the client hangs up while only the producer has it */
    go(f, 0);
    assert_int_equal(f->nodes[0].requests, 1);
    bm_upstream_cancel(c->x);
    c->x = NULL;
    /* after the head start the others get it anyway */
    go(f, HEADSTART_MS - 1);
    assert_int_equal(f->nodes[1].requests + f->nodes[2].requests, 0);
    go(f, 1);
    assert_int_equal(f->nodes[1].answered + f->nodes[2].answered, 2);
    assert_int_equal(f->nodes[0].answered, 0);
    assert_true(strncmp(f->log, "a>", 2) == 0); /* the producer was asked first */
    go(f, 600 - HEADSTART_MS);
    assert_int_equal(f->nodes[0].answered, 1);
    assert_int_equal(f->nodes[0].aborted, 0);
}

/* A producer judged unreachable gets the block with everyone else, not a head start the
 * others would wait out: it may be gone (it may also be back, so it is still sent). */
static void test_blinded_producer_unreachable_no_head_start(void **state)
{
    fx_t *f = *state;
    f->producer = 0;
    f->producer_slot = 9;
    bm_pool_set_state(f->pool, f->nodes[0].node, BM_NODE_UNREACHABLE, "test");
    script(&f->nodes[0], 1, FAKE_OK(600, NULL));
    fake_call_t *c = post_blinded(f, 9, 1);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 0); /* b and c answered at once */
    assert_int_equal(f->nodes[0].requests, 1);
    assert_int_equal(f->nodes[1].answered + f->nodes[2].answered, 2);
    go(f, 600);
    assert_int_equal(f->nodes[0].answered, 1);
    bm_broadcast_stats_t st;
    bm_broadcast_stats(f->b, &st);
    assert_int_equal(st.producer_first, 0);
}

static void test_blinded_producer_fails_answer_from_the_others(void **state)
{
    fx_t *f = *state;
    f->producer = 1;
    f->producer_slot = 3;
    script(&f->nodes[1], 1, FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"relay down\"}"));
    script(&f->nodes[0], 1, FAKE_STATUS(400, 0, "{\"code\":400,\"message\":\"unknown payload\"}"));
    script(&f->nodes[2], 1, FAKE_OK(30, NULL));
    fake_call_t *c = post_blinded(f, 3, 1);
    go(f, 30);
    wait_client(f, c);
    assert_int_equal(c->status, 200); /* c took it after the producer failed */
    assert_int_equal(fake_call_ms(c), 30);
    assert_true(strncmp(f->log, "b>b<", 4) == 0);
    /* every node refuses: the most specific error of both phases */
    script(&f->nodes[2], 1, FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"z\"}"));
    c = post_blinded(f, 3, 1);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 400);
    assert_string_equal(c->body, "{\"code\":400,\"message\":\"unknown payload\"}");
}

static void test_envelope_read_goes_first_to_the_producer(void **state)
{
    fx_t *f = *state;
    f->producer = 2;
    f->producer_slot = 12;
    script(&f->nodes[2], 1, FAKE_STATUS(404, 0, "{\"code\":404,\"message\":\"not cached\"}"));
    script(&f->nodes[0], 1, FAKE_STATUS(200, 0, "{\"version\":\"gloas\",\"data\":{}}"));
    fake_call_t *c = send_req(f, "GET", "/eth/v1/validator/execution_payload_envelopes/12/0xab",
                              NULL, NULL, 0, NULL);
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "{\"version\":\"gloas\",\"data\":{}}");
    /* one at a time, the producer first; b never asked */
    assert_string_equal(f->log, "c>c<a>a<");
    assert_int_equal(f->nodes[1].requests, 0);
    /* a hung producer costs one read timeout (300 ms here), not the slot */
    f->log[0] = '\0';
    script(&f->nodes[2], 1, FAKE_HANG);
    c = send_req(f, "GET", "/eth/v1/validator/execution_payload_envelopes/12/0xab", NULL, NULL, 0,
                 NULL);
    go(f, READ_TIMEOUT_MS - 1);
    assert_false(c->done);
    assert_int_equal(f->nodes[0].requests, 1); /* a is asked only once c timed out */
    go(f, 1);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), READ_TIMEOUT_MS);
    assert_true(strncmp(f->log, "c>", 2) == 0);
    assert_non_null(strstr(f->log, "a>a<"));
    assert_int_equal(f->nodes[2].aborted, 1); /* cut at its read timeout */
}

static void test_dvt_selections_one_node_at_a_time(void **state)
{
    fx_t *f = *state;
    script(&f->nodes[0], 1,
           FAKE_STATUS(501, 0, "{\"code\":501,\"message\":\"not a DVT middleware\"}"));
    script(&f->nodes[1], 1, FAKE_STATUS(200, 10, "{\"data\":[{\"selection_proof\":\"0x01\"}]}"));
    fake_call_t *c =
        post_json(f, "/eth/v1/validator/beacon_committee_selections",
                  "[{\"validator_index\":\"1\",\"slot\":\"2\",\"selection_proof\":\"0x00\"}]");
    go(f, 10);
    wait_client(f, c);
    assert_int_equal(fake_call_ms(c), 10);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->body, "{\"data\":[{\"selection_proof\":\"0x01\"}]}");
    assert_string_equal(f->log, "a>a<b>b<");
    assert_int_equal(f->nodes[2].requests, 0); /* not broadcast */
}

/* ---- replay feed ------------------------------------------------------------------------------
 */

static void test_successful_state_writes_feed_replay(void **state)
{
    fx_t *f = *state;
    fake_call_t *c = post_json(
        f, "/eth/v1/validator/prepare_beacon_proposer",
        "[{\"validator_index\":\"1\",\"fee_recipient\":\"0x1111111111111111111111111111111111"
        "111111\"},{\"validator_index\":\"2\",\"fee_recipient\":\"0x2222222222222222222222222"
        "222222222222222\"}]");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(bm_replay_count(f->replay, BM_REPLAY_PREPARATION), 2);
    /* a write that no node took is not remembered */
    for (int i = 0; i < 3; i++)
        script(&f->nodes[i], 1, FAKE_STATUS(400, 0, "{\"code\":400,\"message\":\"bad\"}"));
    c = post_json(
        f, "/eth/v1/validator/prepare_beacon_proposer",
        "[{\"validator_index\":\"3\",\"fee_recipient\":\"0x3333333333333333333333333333333333"
        "333333\"}]");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 400);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    assert_int_equal(bm_replay_count(f->replay, BM_REPLAY_PREPARATION), 2);
    /* fed at the first 2xx, not when a hung node finally gives up */
    script_each(f, FAKE_OK(0, NULL), FAKE_OK(0, NULL), FAKE_HANG);
    c = post_json(
        f, "/eth/v1/validator/prepare_beacon_proposer",
        "[{\"validator_index\":\"9\",\"fee_recipient\":\"0x9999999999999999999999999999999999"
        "999999\"}]");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(bm_broadcast_active(f->b), 1); /* the hung node's transfer still runs */
    assert_int_equal(bm_replay_count(f->replay, BM_REPLAY_PREPARATION), 3);
    go(f, WRITE_TIMEOUT_MS);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    /* a pool write is never fed */
    for (int i = 0; i < 3; i++)
        script(&f->nodes[i], 1, FAKE_OK(0, NULL));
    c = post_json(f, "/eth/v1/beacon/pool/sync_committees", "[]");
    go(f, 0);
    wait_client(f, c);
    assert_int_equal(bm_broadcast_active(f->b), 0);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        if (k != BM_REPLAY_PREPARATION)
            assert_int_equal(bm_replay_count(f->replay, (bm_replay_kind_t)k), 0);
}

static void test_stop_sends_waiting_blinded_blocks_on(void **state)
{
    fx_t *f = *state;
    f->producer = 0;
    f->producer_slot = 4;
    script(&f->nodes[0], 1, FAKE_OK(400, NULL));
    fake_call_t *c = post_blinded(f, 4, 1);
    go(f, 0);
    assert_int_equal(f->nodes[0].requests, 1);
    /* shutdown begins: the others get the block without waiting for the head start (the
     * clock does not move) */
    bm_broadcast_stop(f->b);
    go(f, 0);
    assert_int_equal(f->nodes[1].answered + f->nodes[2].answered, 2);
    wait_client(f, c);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_route_table_covers_every_write),
        T(test_write_reaches_every_node_lagging_and_syncing_included),
        T(test_answered_at_first_2xx_with_a_hung_node),
        T(test_most_specific_error_when_none_took_it),
        T(test_no_node_takes_it_bounded),
        T(test_envelope_read_no_node_has_it_bounded),
        T(test_indexed_errors_merged),
        T(test_client_hangup_does_not_stop_a_block),
        T(test_ssz_refusals_told_and_learnt),
        T(test_ssz_refusals_survive_a_restart),
        T(test_ssz_refusals_forgotten_when_the_node_is_upgraded),
        T(test_ssz_block_never_415_when_a_node_took_it),
        T(test_ssz_pool_write_refused_then_415_at_once),
        T(test_ssz_late_refusal_replays_state_as_json),
        T(test_ssz_write_does_not_wait_for_an_unreachable_node),
        T(test_error_does_not_wait_for_an_unreachable_node),
        T(test_blinded_block_goes_first_to_its_producer),
        T(test_blinded_producer_hung_others_after_head_start),
        T(test_blinded_producer_unreachable_no_head_start),
        T(test_blinded_producer_fails_answer_from_the_others),
        T(test_envelope_read_goes_first_to_the_producer),
        T(test_dvt_selections_one_node_at_a_time),
        T(test_successful_state_writes_feed_replay),
        T(test_stop_sends_waiting_blinded_blocks_on),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
