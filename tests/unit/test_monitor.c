/* SPDX-License-Identifier: MIT */
/*
 * test_monitor: the monitor with the real pool, health, tracker and discovery, against
 * fake beacon nodes on loopback (fake_node.h, answering from this file's handler). A fake
 * node serves what discovery reads (a 500 ms slot chain), /eth/v1/node/syncing, block
 * headers from a small shared chain, and /eth/v1/events: it records the topics asked,
 * refuses the topics it is told to refuse with 400 {"code":400,"message":"Invalid topic: X"},
 * and otherwise holds the stream open so that the test can push events or cut it.
 *
 * What is proven: events reach the tracker before the listeners; header requests are
 * answered and shared; the node's head at connect counts; head_v2 falls back to head on
 * 400; execution_payload_available is asked once Gloas is near and dropped when refused;
 * syncing is polled once per slot and reaches health; a reconnect re-reads the node
 * (discovery) and tells the listeners; stop leaves nothing on the loop. A node whose
 * stream sends its response head only with its first event (Lodestar) is waited for, not
 * cut, and its head is polled meanwhile; without any working stream, polled heads keep
 * the tracker current; an up stream whose node has not followed the cluster head a quarter
 * slot after it moved is polled then, a working one never; a stopped node that does not
 * answer that poll within the probe time is unreachable until it answers again; a cluster
 * head missing while the chain runs is reported.
 *
 * Everything runs on one manual clock (base/clock.h): the monitor, discovery, the streams
 * and the fake nodes. Time moves only when a test advances it, one due timer at a time,
 * and between steps the loop runs until the network has caught up (every transfer the
 * upstream client runs is a stream a node holds open, or a request a stopped node holds).
 * Slot starts, polls and timeouts therefore happen at their exact milliseconds, and counts
 * per slot are exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cluster/discovery.h"
#include "cluster/head.h"
#include "cluster/health.h"
#include "cluster/monitor.h"
#include "cluster/nodestream.h"
#include "cluster/pool.h"
#include "http/server.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000 /* real time a settling loop may take; clock time a test waits at most */
#define SLOT_MS 500
/* The upstream client times its requests on the real clock, not on the test's: a request a
 * stopped node holds would time out (2 s by default) whenever a slow run (a sanitizer build
 * beside busy CPUs) spends that long in real time between the request and its answer, and
 * the test would see a network error it did not script. No test may take this long. */
#define REAL_TIMEOUT_MS 60000
#define SPE 32
#define MAX_NODES 2
#define MAX_STREAMS 16
#define MAX_LOG 64
#define CHAIN 8

/* ---- loop helpers --------------------------------------------------------------------- */

#include "clock_steps.h"
#include "loop_guard.h"

/* ---- the chain the fake nodes share ------------------------------------------------------ */

typedef struct fx fx_t;

static uint64_t g_genesis_s;
static uint64_t g_base_slot; /* slot of block 0 */

static void root_of(int i, uint8_t out[32])
{
    memset(out, 0, 32);
    out[0] = 0xb0;
    out[31] = (uint8_t)(i + 1);
}

static void hex_of(int i, char out[BM_ROOT_HEX_LEN + 1])
{
    uint8_t r[32];
    root_of(i, r);
    bm_root_to_hex(r, out);
}

/* ---- fake nodes -------------------------------------------------------------------------- */

typedef struct fnode {
    fx_t *f;
    int idx;
    fake_node_t *n;
    const char *refuse[4]; /* topics answered with 400 */
    int head_block;        /* its head, index into the chain */
    bool syncing;
    char version[64];
    int syncing_reqs, header_reqs, head_reqs, version_reqs, genesis_reqs;
    uint64_t head_at;  /* wall time (the test's clock) of the last GET .../headers/head */
    bool lazy_stream;  /* the stream's response head leaves only with its first event */
    bool head_fails;   /* GET .../headers/head answers 503 */
    bool streams_fail; /* GET /eth/v1/events answers 503 */
    bool hang_v2;      /* a stream asking head_v2 gets no byte at all (Lodestar < 1.10) */
    bool stopped;      /* a stopped process: every request but the open stream is held */
    bm_req_t *held[8]; /* requests held while stopped, answered when it resumes */
    int hdr_by_block[CHAIN];
    uint64_t genesis_at;           /* wall time (the test's clock) of the last genesis request */
    char topics[MAX_STREAMS][256]; /* query of each event-stream request */
    int n_streams;
} fnode_t;

struct fx {
    uv_loop_t loop;
    bm_clock_t *clock;   /* manual: everyone's */
    clock_steps_t steps; /* moves `clock`, settling after each move */
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_health_t *health;
    bm_head_t *head;
    bm_discovery_t *disc;
    bm_monitor_t *mon;
    fake_nodes_t set;
    fnode_t nodes[MAX_NODES];
    int n;
    uint64_t gloas_epoch; /* UINT64_MAX: not scheduled */
    /* listener records */
    char evlog[MAX_LOG][96];
    int nev;
    bool tracker_saw_it[MAX_LOG];
    int ups[MAX_NODES], downs[MAX_NODES];
    uint64_t up_at[MAX_NODES]; /* wall time (the test's clock) of the last up */
};

static uint64_t wall(const fx_t *f)
{
    return bm_clock_wall_now(f->clock);
}

/* ---- moving time ------------------------------------------------------------------------- */

/* The network has caught up: no timer is due now, and every transfer the upstream client
 * runs (discovery's reads, the monitor's polls and streams) is a stream a node holds open,
 * so no request or answer is on its way. */
static bool settled(const fx_t *f)
{
    uint64_t in;
    if (bm_clock_manual_next(f->clock, &in) && in == 0)
        return false;
    size_t held = 0;
    for (int i = 0; i < f->n; i++) {
        held += (size_t)f->nodes[i].n->holding;
        for (int k = 0; k < 8; k++)
            held += f->nodes[i].held[k] != NULL; /* a stopped node's */
    }
    return bm_upstream_active(f->up) == held;
}

/* The clock moves of clock_steps.h (f->steps), settled by this file's settled(). */
static bool settled_ud(const void *ud)
{
    return settled(ud);
}

static void advance(fx_t *f, uint64_t ms)
{
    steps_advance(&f->steps, ms);
}

#define ADVANCE_UNTIL(f, cond, ms) STEPS_ADVANCE_UNTIL(&(f)->steps, cond, ms)

static void send_header(bm_req_t *req, int i)
{
    char r[BM_ROOT_HEX_LEN + 1], p[BM_ROOT_HEX_LEN + 1];
    hex_of(i, r);
    hex_of(i - 1, p);
    fake_send_json(
        req, 200,
        "{\"execution_optimistic\":false,\"finalized\":false,\"data\":{\"root\":\"%s\","
        "\"canonical\":true,\"header\":{\"message\":{\"slot\":\"%llu\",\"proposer_index\":"
        "\"1\",\"parent_root\":\"%s\",\"state_root\":\"%s\",\"body_root\":\"%s\"},"
        "\"signature\":\"0x00\"}}}",
        r, (unsigned long long)(g_base_slot + (uint64_t)i), p, r, r);
}

/* A held request whose client went away (its transfer timed out). */
static void on_held_gone(bm_req_t *req, void *ud)
{
    fnode_t *fn = ud;
    for (int i = 0; i < 8; i++)
        if (fn->held[i] == req)
            fn->held[i] = NULL;
    bm_resp_end(req);
}

static void on_request(fake_node_t *n, bm_req_t *req, void *ud);

/* A stopped node: the request waits (the kernel queues it) until the node resumes. */
static bool hold(fnode_t *fn, bm_req_t *req)
{
    for (int i = 0; i < 8; i++)
        if (!fn->held[i]) {
            fn->held[i] = req;
            bm_req_on_abort(req, on_held_gone, fn);
            return true;
        }
    return false;
}

/* The node resumes: what it held is answered now, as a SIGCONT'd process does. */
static void resume(fnode_t *fn)
{
    fn->stopped = false;
    for (int i = 0; i < 8; i++) {
        bm_req_t *req = fn->held[i];
        fn->held[i] = NULL;
        if (req) {
            bm_req_on_abort(req, NULL, NULL);
            on_request(fn->n, req, fn);
        }
    }
}

static void on_request(fake_node_t *n, bm_req_t *req, void *ud)
{
    fnode_t *fn = ud;
    (void)n;
    if (fn->stopped && hold(fn, req))
        return;
    fx_t *f = fn->f;
    size_t plen;
    const char *p = bm_req_path(req, &plen);
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)plen, p);
    if (strcmp(path, "/eth/v1/node/version") == 0) {
        fn->version_reqs++;
        fake_send_json(req, 200, "{\"data\":{\"version\":\"%s\"}}", fn->version);
    } else if (strcmp(path, "/eth/v1/beacon/genesis") == 0) {
        fn->genesis_reqs++;
        fn->genesis_at = wall(f);
        fake_send_json(
            req, 200,
            "{\"data\":{\"genesis_time\":\"%llu\",\"genesis_validators_root\":\"0x%064d\","
            "\"genesis_fork_version\":\"0x10000000\"}}",
            (unsigned long long)g_genesis_s, 7);
    } else if (strcmp(path, "/eth/v1/config/spec") == 0) {
        char gloas[32];
        if (f->gloas_epoch == UINT64_MAX)
            snprintf(gloas, sizeof gloas, "18446744073709551615");
        else
            snprintf(gloas, sizeof gloas, "%llu", (unsigned long long)f->gloas_epoch);
        fake_send_json(req, 200,
                       "{\"data\":{\"SLOT_DURATION_MS\":\"%d\",\"SECONDS_PER_SLOT\":\"1\","
                       "\"SLOTS_PER_EPOCH\":\"%d\",\"FULU_FORK_EPOCH\":\"0\","
                       "\"GLOAS_FORK_EPOCH\":\"%s\"}}",
                       SLOT_MS, SPE, gloas);
    } else if (strcmp(path, "/eth/v1/config/fork_schedule") == 0) {
        fake_send_json(req, 200, "{\"data\":[]}");
    } else if (strcmp(path, "/eth/v1/config/deposit_contract") == 0) {
        fake_send_json(req, 200, "{\"data\":{\"chain_id\":\"1\",\"address\":\"0x%040d\"}}", 0);
    } else if (strcmp(path, "/eth/v1/node/syncing") == 0) {
        fn->syncing_reqs++;
        fake_send_json(
            req, 200,
            "{\"data\":{\"head_slot\":\"%llu\",\"sync_distance\":\"0\",\"is_syncing\":%s,"
            "\"is_optimistic\":false,\"el_offline\":false}}",
            (unsigned long long)(g_base_slot + (uint64_t)fn->head_block),
            fn->syncing ? "true" : "false");
    } else if (strcmp(path, "/eth/v1/beacon/headers/head") == 0) {
        fn->head_reqs++;
        fn->head_at = wall(f);
        if (fn->head_fails)
            fake_send_json(req, 503, "{\"code\":503,\"message\":\"not now\"}");
        else
            send_header(req, fn->head_block);
    } else if (strncmp(path, "/eth/v1/beacon/headers/0x", 25) == 0) {
        fn->header_reqs++;
        uint8_t want[32], r[32];
        int found = -1;
        if (bm_hex_to_root(path + 23, want) == 0)
            for (int i = 0; i < CHAIN && found < 0; i++) {
                root_of(i, r);
                if (memcmp(r, want, 32) == 0)
                    found = i;
            }
        if (found >= 0)
            fn->hdr_by_block[found]++;
        if (found > 0)
            send_header(req, found);
        else
            fake_send_json(req, 404, "{\"code\":404,\"message\":\"not found\"}");
    } else if (strcmp(path, "/eth/v1/events") == 0) {
        size_t ql;
        const char *q = bm_req_query(req, &ql);
        if (fn->n_streams < MAX_STREAMS)
            snprintf(fn->topics[fn->n_streams], sizeof fn->topics[0], "%.*s", (int)ql, q ? q : "");
        fn->n_streams++;
        if (fn->streams_fail) {
            fake_send_json(req, 503, "{\"code\":503,\"message\":\"not now\"}");
            return;
        }
        for (int i = 0; i < 4 && fn->refuse[i]; i++) {
            char needle[80];
            snprintf(needle, sizeof needle, "topics=%s", fn->refuse[i]);
            const char *hit = q ? strstr(q, needle) : NULL;
            if (hit && (hit[strlen(needle)] == '&' || hit[strlen(needle)] == '\0')) {
                fake_send_json(req, 400, "{\"code\":400,\"message\":\"Invalid topic: %s\"}",
                               fn->refuse[i]);
                return;
            }
        }
        if (fn->lazy_stream || (fn->hang_v2 && q && strstr(q, "topics=head_v2")))
            fake_stream_open_lazy(fn->n, req); /* its head leaves with its first event */
        else
            fake_stream_open(fn->n, req);
    } else {
        fake_send_json(req, 404, "{\"code\":404,\"message\":\"no route\"}");
    }
}

/* Pushes one event on node i's open stream. */
static void push(fx_t *f, int i, const char *topic, const char *data)
{
    fake_stream_event(f->nodes[i].n, topic, data);
}

/* A head event of chain block b from node i. */
static void push_head(fx_t *f, int i, const char *topic, int b)
{
    char r[BM_ROOT_HEX_LEN + 1], data[512];
    hex_of(b, r);
    unsigned long long slot = (unsigned long long)(g_base_slot + (uint64_t)b);
    if (strcmp(topic, "head_v2") == 0)
        snprintf(data, sizeof data,
                 "{\"version\":\"fulu\",\"data\":{\"slot\":\"%llu\",\"block\":\"%s\",\"state\":"
                 "\"%s\",\"payload_status\":\"empty\",\"execution_optimistic\":false}}",
                 slot, r, r);
    else
        snprintf(data, sizeof data,
                 "{\"slot\":\"%llu\",\"block\":\"%s\",\"state\":\"%s\","
                 "\"execution_optimistic\":false}",
                 slot, r, r);
    f->nodes[i].head_block = b;
    push(f, i, topic, data);
}

/* Ends node i's open stream (the node closes it). */
static void cut(fx_t *f, int i)
{
    fake_stream_end(f->nodes[i].n);
}

/* ---- listeners ------------------------------------------------------------------------------ */

static void on_mon_event(size_t node, const bm_node_event_t *e, void *ud)
{
    fx_t *f = ud;
    const char *topic = e->topic;
    assert_int_equal(strlen(e->data), e->len);
    assert_null(memchr(e->data, '\n', e->len));
    /* the object handed over is the line parsed: listeners need not parse it again */
    json_object *text = NULL;
    assert_int_equal(bm_json_parse(e->data, e->len, 0, &text, NULL), 0);
    assert_non_null(e->doc);
    assert_true(json_object_equal(text, e->doc));
    json_object_put(text);
    if (f->nev >= MAX_LOG)
        return;
    snprintf(f->evlog[f->nev], sizeof f->evlog[0], "%zu:%s", node, topic);
    /* the tracker saw a head before the listener runs */
    if (strncmp(topic, "head", 4) == 0) {
        json_object *d = bm_json_get(e->doc, "/data") ? bm_json_get(e->doc, "/data") : e->doc;
        uint8_t root[32];
        assert_int_equal(bm_json_get_root(d, "/block", root), 0);
        bm_head_node_view_t v;
        assert_int_equal(bm_head_node_view(f->head, node, &v), 0);
        f->tracker_saw_it[f->nev] = memcmp(v.root, root, 32) == 0;
    } else {
        f->tracker_saw_it[f->nev] = true;
    }
    f->nev++;
}

static void on_mon_conn(size_t node, bool up, void *ud)
{
    fx_t *f = ud;
    assert_true(node < MAX_NODES);
    if (up) {
        f->ups[node]++;
        f->up_at[node] = wall(f);
    } else
        f->downs[node]++;
}

/* ---- fixture ----------------------------------------------------------------------------- */

static uint32_t g_idle_slots = 40; /* the monitor's idle_slots for the next fx_new */

static fx_t *fx_new(int n, uint64_t gloas_epoch)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    /* genesis a whole second in the past so that the chain's blocks are all in the past */
    uint64_t now = bm_clock_now_ms();
    f->clock = bm_clock_manual_new(&f->loop, now);
    f->steps = (clock_steps_t){&f->loop, f->clock, settled_ud, f, BOUND_MS};
    assert_non_null(f->clock);
    g_genesis_s = now / 1000 - 30;
    uint64_t cur = (now - g_genesis_s * 1000) / SLOT_MS;
    g_base_slot = cur - CHAIN - 2;
    f->gloas_epoch = gloas_epoch == 1 ? (cur / SPE) + 1 : gloas_epoch;
    f->up = bm_upstream_new(&f->loop, NULL);
    f->pool = bm_pool_new();
    assert_non_null(f->up);
    assert_non_null(f->pool);
    f->n = n;
    fake_nodes_init(&f->set, &f->loop, f->pool);
    fake_nodes_set_clock(&f->set, f->clock);
    for (int i = 0; i < n; i++) {
        fnode_t *fn = &f->nodes[i];
        fn->f = f;
        fn->idx = i;
        fn->head_block = 2;
        snprintf(fn->version, sizeof fn->version, "Lighthouse/v7.0.0/x86_64-linux");
        fn->n = fake_node_add_handler(&f->set, on_request, fn);
    }
    f->health = bm_health_new(f->pool, NULL);
    f->head = bm_head_new((size_t)n, NULL);
    assert_non_null(f->health);
    assert_non_null(f->head);
    assert_int_equal(bm_health_set_head(f->health, f->head), 0);
    bm_discovery_opts_t dopt;
    bm_discovery_opts_default(&dopt);
    dopt.retry_interval_ms = 200;
    dopt.timeout_ms = REAL_TIMEOUT_MS;
    f->disc = bm_discovery_new(f->clock, f->up, f->pool, &dopt);
    assert_non_null(f->disc);
    bm_monitor_opts_t mo;
    bm_monitor_opts_default(&mo);
    mo.headers_timeout_ms = 1000;
    mo.request_timeout_ms = REAL_TIMEOUT_MS;
    /* The fake nodes' streams stay quiet between the events a test sends, and the slots
     * are short (500 ms): with the default two-slot idle timer a slow run would see a
     * stream dropped that the test never touched. The idle rule is tested in
     * test_nodestream. */
    mo.idle_slots = g_idle_slots;
    f->mon = bm_monitor_new(f->clock, f->up, f->pool, f->disc, f->head, f->health, &mo);
    assert_non_null(f->mon);
    assert_ptr_equal(bm_monitor_head(f->mon), f->head);
    assert_int_equal(bm_monitor_on_event(f->mon, on_mon_event, f), 0);
    assert_int_equal(bm_monitor_on_connection(f->mon, on_mon_conn, f), 0);
    return f;
}

static void start(fx_t *f)
{
    assert_int_equal(bm_discovery_start(f->disc), 0);
    assert_int_equal(bm_monitor_start(f->mon), 0);
}

static bool all_connected(fx_t *f)
{
    for (int i = 0; i < f->n; i++) {
        bm_monitor_node_info_t mi;
        if (bm_monitor_node_info(f->mon, (size_t)i, &mi) != 0 || !mi.connected ||
            !f->nodes[i].n->stream)
            return false;
    }
    return true;
}

static bool cluster_is(fx_t *f, int b)
{
    bm_head_info_t h;
    uint8_t r[32];
    root_of(b, r);
    return bm_head_cluster(f->head, &h) && memcmp(h.root, r, 32) == 0;
}

static void fx_free(fx_t *f)
{
    bm_monitor_stop(f->mon);
    bm_discovery_stop(f->disc);
    bm_upstream_free(f->up);
    fake_nodes_close(&f->set);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_monitor_free(f->mon);
    bm_discovery_free(f->disc);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    bm_health_free(f->health);
    bm_head_free(f->head);
    bm_pool_free(f->pool);
    free(f);
}

static bm_head_node_view_t node_view(fx_t *f, size_t i)
{
    bm_head_node_view_t v;
    assert_int_equal(bm_head_node_view(f->head, i, &v), 0);
    return v;
}

static bm_node_state_t state_of(fx_t *f, size_t i)
{
    return bm_pool_node(f->pool, i)->state;
}

static uint64_t bad_events(fx_t *f, size_t i)
{
    bm_monitor_node_info_t mi;
    return bm_monitor_node_info(f->mon, i, &mi) == 0 ? mi.bad_events : 0;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* Heads at connect count; events reach the tracker before the listeners; one header
 * request per new root, whichever node announced it. */
static void test_feeds_tracker_then_listeners(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    start(f);
    ADVANCE_UNTIL(f, all_connected(f) && cluster_is(f, 2), BOUND_MS);
    assert_true(cluster_is(f, 2)); /* from GET /eth/v1/beacon/headers/head at connect */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(f->nodes[i].head_reqs, 1);
        assert_int_equal(f->ups[i], 1);
        assert_string_equal(f->nodes[i].topics[0],
                            "topics=head_v2&topics=block&topics=finalized_checkpoint&"
                            "topics=chain_reorg");
    }
    push_head(f, 0, "head_v2", 3);
    ADVANCE_UNTIL(f, cluster_is(f, 3), BOUND_MS);
    assert_true(cluster_is(f, 3)); /* an extension, from one node */
    push_head(f, 1, "head_v2", 3);
    push(f, 1, "finalized_checkpoint",
         "{\"block\":\"0x00\",\"state\":\"0x00\",\"epoch\":\"1\",\"execution_optimistic\":false}");
    ADVANCE_UNTIL(f, f->nev == 3, BOUND_MS);
    assert_int_equal(f->nev, 3);
    assert_string_equal(f->evlog[0], "0:head_v2");
    assert_string_equal(f->evlog[1], "1:head_v2");
    assert_string_equal(f->evlog[2], "1:finalized_checkpoint");
    for (int k = 0; k < 3; k++)
        assert_true(f->tracker_saw_it[k]);
    /* block 3's header was asked once, of the node that announced it */
    assert_int_equal(f->nodes[0].hdr_by_block[3], 1);
    assert_int_equal(f->nodes[1].hdr_by_block[3], 0);
    /* not JSON, and a block event without its fields: counted, not delivered */
    push(f, 0, "head_v2", "{not json");
    push(f, 0, "block", "{\"slot\":\"1\"}");
    ADVANCE_UNTIL(f, bad_events(f, 0) == 2, BOUND_MS);
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, 0, &mi), 0);
    assert_int_equal(mi.bad_events, 2);
    assert_int_equal(mi.events, 3);
    assert_int_equal(f->nev, 3);
    assert_int_equal(bm_monitor_node_info(f->mon, 2, &mi), BM_EINVAL);
    fx_free(f);
}

/* 400 on head_v2: the node is asked for head instead, at once, and counts. */
static void test_head_v2_falls_back_to_head(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    f->nodes[1].refuse[0] = "head_v2";
    start(f);
    ADVANCE_UNTIL(f, all_connected(f), BOUND_MS);
    assert_true(all_connected(f));
    assert_int_equal(f->nodes[1].n_streams, 2);
    assert_non_null(strstr(f->nodes[1].topics[0], "topics=head_v2&"));
    assert_string_equal(f->nodes[1].topics[1],
                        "topics=head&topics=block&topics=finalized_checkpoint&"
                        "topics=chain_reorg");
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, 1, &mi), 0);
    assert_false(mi.head_v2);
    assert_int_equal(mi.failures, 0);
    assert_int_equal(f->ups[1], 1);
    push_head(f, 1, "head", 3);
    ADVANCE_UNTIL(f, cluster_is(f, 3), BOUND_MS);
    assert_true(cluster_is(f, 3));
    fx_free(f);
}

/* Gloas in the next epoch: execution_payload_available is asked for; a node that refuses
 * it keeps its head feed without it. */
static void test_payload_topic_near_gloas(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, 1 /* next epoch */);
    f->nodes[1].refuse[0] = "execution_payload_available";
    start(f);
    ADVANCE_UNTIL(
        f,
        all_connected(f) && f->nodes[0].n_streams >= 1 &&
            strstr(f->nodes[0].topics[f->nodes[0].n_streams - 1], "execution_payload_available"),
        BOUND_MS);
    assert_true(all_connected(f));
    fnode_t *a = &f->nodes[0], *b = &f->nodes[1];
    assert_string_equal(a->topics[a->n_streams - 1],
                        "topics=head_v2&topics=block&topics=finalized_checkpoint&"
                        "topics=chain_reorg&topics=execution_payload_available");
    assert_string_equal(b->topics[b->n_streams - 1],
                        "topics=head_v2&topics=block&topics=finalized_checkpoint&"
                        "topics=chain_reorg");
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, 0, &mi), 0);
    assert_true(mi.payload_topic && mi.head_v2);
    assert_int_equal(bm_monitor_node_info(f->mon, 1, &mi), 0);
    assert_true(!mi.payload_topic && mi.head_v2);
    char r[BM_ROOT_HEX_LEN + 1], data[256];
    hex_of(2, r);
    snprintf(data, sizeof data, "{\"slot\":\"%llu\",\"block_root\":\"%s\"}",
             (unsigned long long)(g_base_slot + 2), r);
    push(f, 0, "execution_payload_available", data);
    ADVANCE_UNTIL(f, bm_head_payload_full(f->head), BOUND_MS);
    assert_true(bm_head_payload_full(f->head));
    fx_free(f);
}

/* One syncing poll per slot per node; an is_syncing answer makes the node syncing. */
static bm_monitor_node_info_t info(fx_t *f, size_t i);

static void test_syncing_polled_once_per_slot(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    start(f);
    ADVANCE_UNTIL(f, all_connected(f) && f->nodes[0].syncing_reqs > 0, BOUND_MS);
    /* Count over six whole slots starting 2 ms past a slot start: a slot's poll goes out at
     * its start or 1 ms after (the monitor's timer lands 1 ms past its instant unless
     * another wake-up lands there first), so a window from a slot start itself would hold
     * five or six of them depending on where the last one landed. */
    uint64_t w = wall(f), genesis = g_genesis_s * 1000;
    uint64_t next_start = genesis + ((w - genesis) / SLOT_MS + 1) * SLOT_MS;
    advance(f, next_start + 2 - w);
    int a0 = f->nodes[0].syncing_reqs, b0 = f->nodes[1].syncing_reqs;
    uint64_t sent0[2] = {info(f, 0).syncing_polls, info(f, 1).syncing_polls};
    advance(f, 6 * SLOT_MS);
    int da = f->nodes[0].syncing_reqs - a0, db = f->nodes[1].syncing_reqs - b0;
    if (da != 6 || db != 6) /* sent but not received, or not sent: say which */
        for (int i = 0; i < 2; i++)
            fprintf(stderr, "node %d: received %d, monitor sent %llu, failures %llu\n", i,
                    i ? db : da, (unsigned long long)(info(f, i).syncing_polls - sent0[i]),
                    (unsigned long long)info(f, i).failures);
    assert_int_equal(da, 6); /* six slot starts in three seconds */
    assert_int_equal(db, 6);
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_READY);
    f->nodes[1].syncing = true;
    ADVANCE_UNTIL(f, bm_pool_node(f->pool, 1)->state == BM_NODE_SYNCING, 3 * SLOT_MS);
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_SYNCING);
    assert_int_equal(bm_pool_node(f->pool, 0)->state, BM_NODE_READY);
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, 1, &mi), 0);
    assert_int_equal(mi.syncing_polls, (uint64_t)f->nodes[1].syncing_reqs);
    fx_free(f);
}

/* The node closes the stream: down for the tracker and the listeners, then up again,
 * the node re-read by discovery and its head asked again. */

static void test_reconnect_tells_everyone(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    start(f);
    ADVANCE_UNTIL(f, all_connected(f), BOUND_MS);
    assert_true(all_connected(f));
    f->nodes[1].streams_fail = true; /* it stays down a few backoff steps */
    cut(f, 1);
    ADVANCE_UNTIL(f, f->downs[1] == 1, BOUND_MS);
    assert_int_equal(f->downs[1], 1);
    bm_head_node_view_t v;
    assert_int_equal(bm_head_node_view(f->head, 1, &v), 0);
    assert_false(v.connected);
    assert_true(v.stale);
    /* while its stream is down, its head is polled, once per slot */
    int polls0 = f->nodes[1].head_reqs;
    uint64_t t0 = wall(f);
    ADVANCE_UNTIL(f, f->nodes[1].head_reqs >= polls0 + 2, BOUND_MS);
    assert_int_equal(f->ups[1], 1);
    assert_true(f->nodes[1].head_reqs >= polls0 + 2);
    assert_true(wall(f) - t0 >= SLOT_MS / 2); /* not twice in one slot */
    bm_monitor_node_info_t mi0;
    assert_int_equal(bm_monitor_node_info(f->mon, 1, &mi0), 0);
    assert_true(mi0.head_polls >= 3);
    assert_string_equal(mi0.last_poll_why, "no stream");
    assert_false(node_view(f, 1).stale); /* a polled head is a live vote again */
    /* its stream stays down through at least one refused attempt (503) */
    ADVANCE_UNTIL(f, info(f, 1).failures >= 2, BOUND_MS);
    assert_true(info(f, 1).failures >= 2);
    assert_int_equal(f->ups[1], 1);
    f->nodes[1].streams_fail = false;
    /* and asked again at the reconnect */
    ADVANCE_UNTIL(f, f->ups[1] == 2 && f->nodes[1].head_at >= f->up_at[1], BOUND_MS);
    assert_int_equal(f->ups[1], 2);
    assert_true(f->nodes[1].head_at >= f->up_at[1]);
    /* discovery re-reads it at the reconnect itself, not at its next periodic round (an
     * epoch, 16 s, apart) */
    ADVANCE_UNTIL(f, f->nodes[1].genesis_at >= f->up_at[1], BOUND_MS);
    assert_true(f->nodes[1].genesis_at >= f->up_at[1]);
    assert_int_equal(f->nodes[1].genesis_at, f->up_at[1]);
    /* its head at reconnect (GET /eth/v1/beacon/headers/head) makes it a live vote again */
    ADVANCE_UNTIL(f, !node_view(f, 1).stale, BOUND_MS);
    v = node_view(f, 1);
    assert_true(v.connected);
    assert_false(v.stale);
    assert_int_equal(f->downs[0], 0);
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, 1, &mi), 0);
    assert_int_equal(mi.connects, 2);
    assert_true(mi.failures >= 2); /* the drop and at least one refused attempt */
    fx_free(f);
}

static bool view_is(fx_t *f, size_t i, int b)
{
    uint8_t r[32];
    root_of(b, r);
    bm_head_node_view_t v = node_view(f, i);
    return v.has_head && memcmp(v.root, r, 32) == 0;
}

static bm_monitor_node_info_t info(fx_t *f, size_t i)
{
    bm_monitor_node_info_t mi;
    assert_int_equal(bm_monitor_node_info(f->mon, i, &mi), 0);
    return mi;
}

/* Lodestar: the response head comes only with the first event. The stream waits past
 * events.headersTimeout (1 s here) without a failure, the node's head is polled meanwhile
 * (so it is ready, not no-head), and the first event brings the stream up. */
static void test_head_only_with_first_event(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    f->nodes[1].lazy_stream = true;
    start(f);
    ADVANCE_UNTIL(f, f->nodes[1].n_streams == 1 && view_is(f, 1, 2), BOUND_MS);
    assert_true(view_is(f, 1, 2)); /* polled: its stream has not answered */
    bm_monitor_node_info_t mi = info(f, 1);
    assert_false(mi.connected);
    assert_true(mi.head_polled);
    assert_true(mi.polled_heads >= 1);
    assert_int_equal(mi.stream_state, BM_NODESTREAM_CONNECTING);
    assert_true(mi.waiting_since_ms > 0);
    advance(f, 3 * SLOT_MS); /* 1.5 s: past the configured headersTimeout */
    mi = info(f, 1);
    assert_int_equal(mi.failures, 0);
    assert_int_equal(f->nodes[1].n_streams, 1); /* the same request, still waiting */
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_READY);
    assert_int_equal(f->ups[1], 0);
    /* its next block: head and first event together */
    push_head(f, 1, "head_v2", 3);
    ADVANCE_UNTIL(f, f->ups[1] == 1 && view_is(f, 1, 3) && cluster_is(f, 3), BOUND_MS);
    mi = info(f, 1);
    assert_true(mi.connected);
    assert_false(mi.head_polled); /* the stream announced it */
    assert_int_equal(mi.failures, 0);
    assert_int_equal(mi.events, 1);
    assert_int_equal(mi.waiting_since_ms, 0);
    assert_true(cluster_is(f, 3));
    fx_free(f);
}

/* No stream ever answers: the nodes' heads are polled once per slot and the tracker
 * follows every move of theirs within about a slot; the cluster head moves with them. */
static void test_polled_heads_without_streams(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    for (int i = 0; i < 2; i++)
        f->nodes[i].lazy_stream = true;
    start(f);
    ADVANCE_UNTIL(f, cluster_is(f, 2), BOUND_MS);
    assert_true(cluster_is(f, 2));
    for (int b = 3; b <= 5; b++) {
        f->nodes[0].head_block = b;
        f->nodes[1].head_block = b;
        ADVANCE_UNTIL(f, view_is(f, 0, b) && view_is(f, 1, b) && cluster_is(f, b),
                      2 * SLOT_MS + 250);
        assert_true(view_is(f, 0, b) && view_is(f, 1, b) && cluster_is(f, b));
    }
    int a0 = f->nodes[0].head_reqs;
    advance(f, 4 * SLOT_MS);
    int polls = f->nodes[0].head_reqs - a0;
    assert_int_equal(polls, 4); /* once per slot */
    for (int i = 0; i < 2; i++) {
        bm_monitor_node_info_t mi = info(f, (size_t)i);
        assert_false(mi.connected);
        assert_true(mi.head_polled);
        assert_int_equal(mi.failures, 0);
        assert_string_equal(mi.last_poll_why, "no stream");
        assert_int_equal(bm_pool_node(f->pool, (size_t)i)->state, BM_NODE_READY);
        assert_false(node_view(f, (size_t)i).stale);
    }
    fx_free(f);
}

/* A stream that is up but whose node has not followed the cluster head a quarter slot after
 * it moved is polled then, within the slot; a node that follows on its stream never is. */
static void test_behind_stream_polled_working_not(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    start(f);
    ADVANCE_UNTIL(f, all_connected(f) && cluster_is(f, 2), BOUND_MS);
    advance(f, SLOT_MS + 100); /* a slot of silence from both */
    int h0 = f->nodes[0].head_reqs, h1 = f->nodes[1].head_reqs;
    f->nodes[1].head_block = 3; /* node 1 has the block, its stream does not say so */
    push_head(f, 0, "head_v2", 3);
    ADVANCE_UNTIL(f, cluster_is(f, 3), SLOT_MS);
    assert_true(cluster_is(f, 3));
    uint64_t moved = wall(f);
    ADVANCE_UNTIL(f, view_is(f, 1, 3), SLOT_MS);
    assert_true(view_is(f, 1, 3));
    /* asked a quarter slot after the move, not at the next slot start: the monitor's timer
     * lands 1 ms past its instant, or at it when another of its wake-ups (itself 1 ms past
     * its own instant) lands there first and finds the poll due (2 of ~450 runs beside two
     * busy processes) */
    uint64_t asked = f->nodes[1].head_at - moved;
    assert_true(asked == SLOT_MS / 4 + 1 || asked == SLOT_MS / 4);
    assert_int_equal(f->nodes[1].head_reqs, h1 + 1);
    assert_string_equal(info(f, 1).last_poll_why, "behind");
    assert_true(info(f, 1).head_polled);
    assert_int_equal(info(f, 1).unanswered, 0);
    /* node 0 announces every block on its stream: never polled */
    for (int b = 4; b <= 6; b++) {
        advance(f, SLOT_MS / 2);
        f->nodes[1].head_block = b;
        push_head(f, 1, "head_v2", b);
        push_head(f, 0, "head_v2", b);
        ADVANCE_UNTIL(f, cluster_is(f, b) && view_is(f, 0, b), SLOT_MS);
    }
    advance(f, SLOT_MS / 2);
    assert_int_equal(f->nodes[0].head_reqs, h0);
    assert_false(info(f, 0).head_polled);
    fx_free(f);
}

/* A stopped node (its stream silent, every request held, as a SIGSTOP'd process) that does
 * not follow the cluster head and does not answer the head request within the probe time
 * leaves `ready` within the slot; it is back as soon as it answers again. */
static void test_stopped_node_not_ready_until_it_answers(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    start(f);
    ADVANCE_UNTIL(f, all_connected(f) && cluster_is(f, 2) && state_of(f, 1) == BM_NODE_READY,
                  BOUND_MS);
    assert_int_equal(state_of(f, 1), BM_NODE_READY);
    f->nodes[1].stopped = true;
    push_head(f, 0, "head_v2", 3);
    ADVANCE_UNTIL(f, cluster_is(f, 3), SLOT_MS);
    assert_true(cluster_is(f, 3));
    uint64_t moved = wall(f);
    ADVANCE_UNTIL(f, state_of(f, 1) == BM_NODE_UNREACHABLE, SLOT_MS);
    assert_int_equal(state_of(f, 1), BM_NODE_UNREACHABLE);
    /* a quarter slot to follow, a quarter slot (at most 1 s) to answer the probe; each of the
     * two monitor timers lands 1 ms past its instant; then the one more look at the sockets
     * before the verdict (asked 1 ms ahead, landing 1 ms past that). 1 ms sooner when
     * another of the monitor's wake-ups (the slot's own timeline; where the head moved in the
     * slot depends on when the pushed event was read) lands 1 ms before the probe's instant:
     * the timer then finds the probe time passed at its instant, not 1 ms after it (2 of 150
     * runs beside two busy loops) */
    uint64_t judged = wall(f) - moved;
    assert_true(judged == SLOT_MS / 2 + 2 + 2 || judged == SLOT_MS / 2 + 2 + 1);
    assert_non_null(strstr(bm_pool_node(f->pool, 1)->state_reason, "no answer within 125 ms"));
    bm_monitor_node_info_t mi = info(f, 1);
    assert_int_equal(mi.unanswered, 1);
    assert_string_equal(mi.last_poll_why, "behind");
    assert_int_equal(state_of(f, 0), BM_NODE_READY);
    /* it stays out while it says nothing (the next slot's requests are held too) */
    advance(f, SLOT_MS);
    assert_int_equal(state_of(f, 1), BM_NODE_UNREACHABLE);
    /* it resumes: the held requests are answered, it is reachable and at the head again */
    f->nodes[1].head_block = 3;
    resume(&f->nodes[1]);
    ADVANCE_UNTIL(f, state_of(f, 1) == BM_NODE_READY, SLOT_MS);
    assert_int_equal(state_of(f, 1), BM_NODE_READY);
    fx_free(f);
}

/* Nobody's head can be had (streams wait, polls fail): the chain runs without a cluster
 * head, the monitor says so and the nodes are no-head; once polls answer, all is back. */
static void test_missing_cluster_head_reported(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    for (int i = 0; i < 2; i++) {
        f->nodes[i].lazy_stream = true;
        f->nodes[i].head_fails = true;
    }
    start(f);
    ADVANCE_UNTIL(f,
                  bm_pool_node(f->pool, 0)->state == BM_NODE_NO_HEAD &&
                      bm_pool_node(f->pool, 1)->state == BM_NODE_NO_HEAD,
                  BOUND_MS);
    uint64_t since = 0;
    assert_true(bm_monitor_head_missing(f->mon, wall(f), &since));
    assert_true(since > 0);
    assert_non_null(strstr(bm_pool_node(f->pool, 0)->state_reason, "no head known"));
    ADVANCE_UNTIL(f, info(f, 0).poll_failures >= 2, 3 * SLOT_MS);
    assert_true(info(f, 0).poll_failures >= 2); /* asked again, one slot later */
    assert_true(bm_monitor_head_missing(f->mon, wall(f), NULL));
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_NO_HEAD);
    for (int i = 0; i < 2; i++)
        f->nodes[i].head_fails = false;
    ADVANCE_UNTIL(f, cluster_is(f, 2), 3 * SLOT_MS);
    assert_true(cluster_is(f, 2));
    assert_false(bm_monitor_head_missing(f->mon, wall(f), NULL));
    ADVANCE_UNTIL(f, bm_pool_node(f->pool, 0)->state == BM_NODE_READY, SLOT_MS);
    assert_int_equal(bm_pool_node(f->pool, 0)->state, BM_NODE_READY);
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_READY);
    fx_free(f);
}

static void count_ready(bm_node_t *node, bm_node_state_t old, void *ud)
{
    int *readies = ud;
    (void)old;
    if (node->state == BM_NODE_READY)
        readies[node->index]++;
}

/* A node of a running chain is not ready before its head is known, not even for the moment
 * between its discovery and the chain's arrival that discovery also brings (clients were
 * served by a node "ready" for 12 ms, then got 503 once it was "no-head"). */
static void test_not_ready_before_its_head_is_known(void **state)
{
    (void)state;
    fx_t *f = fx_new(2, UINT64_MAX);
    int readies[2] = {0, 0};
    assert_int_equal(bm_pool_on_state(f->pool, count_ready, readies), 0);
    for (int i = 0; i < 2; i++) {
        f->nodes[i].lazy_stream = true;
        f->nodes[i].head_fails = true;
    }
    start(f);
    ADVANCE_UNTIL(f, state_of(f, 0) == BM_NODE_NO_HEAD && state_of(f, 1) == BM_NODE_NO_HEAD,
                  BOUND_MS);
    assert_int_equal(state_of(f, 0), BM_NODE_NO_HEAD);
    assert_int_equal(state_of(f, 1), BM_NODE_NO_HEAD);
    assert_int_equal(readies[0], 0);
    assert_int_equal(readies[1], 0);
    f->nodes[0].head_fails = false;
    ADVANCE_UNTIL(f, state_of(f, 0) == BM_NODE_READY, 3 * SLOT_MS);
    assert_int_equal(readies[0], 1);
    assert_int_equal(readies[1], 0);
    fx_free(f);
}

/* Lodestar before 1.10 never answers a topic it does not know (head_v2): no byte for the
 * whole head wait from a node that answers its other requests takes the next rung of the
 * ladder, as a 400 would: head. */
static void test_silent_head_v2_falls_back_to_head(void **state)
{
    (void)state;
    g_idle_slots = 2; /* a head wait of two slots (1 s), not the fixture's 20 s */
    fx_t *f = fx_new(2, UINT64_MAX);
    g_idle_slots = 40;
    f->nodes[1].hang_v2 = true;
    start(f);
    ADVANCE_UNTIL(f, f->nodes[1].n_streams >= 2 && info(f, 1).connected, BOUND_MS);
    assert_true(info(f, 1).connected);
    assert_non_null(strstr(f->nodes[1].topics[0], "topics=head_v2&"));
    assert_string_equal(f->nodes[1].topics[1],
                        "topics=head&topics=block&topics=finalized_checkpoint&"
                        "topics=chain_reorg");
    bm_monitor_node_info_t mi = info(f, 1);
    assert_false(mi.head_v2);
    assert_int_equal(mi.failures, 1); /* the one silent attempt */
    /* meanwhile its head was polled: it was never without one */
    assert_int_equal(bm_pool_node(f->pool, 1)->state, BM_NODE_READY);
    push_head(f, 1, "head", 3);
    ADVANCE_UNTIL(f, cluster_is(f, 3), BOUND_MS);
    assert_true(cluster_is(f, 3));
    fx_free(f);
}

/* Stopped before anything happened, and freed without a stop: the loop closes clean. */
static void test_stop_early_and_bad_args(void **state)
{
    (void)state;
    fx_t *f = fx_new(1, UINT64_MAX);
    assert_null(bm_monitor_new(f->clock, f->up, f->pool, f->disc, NULL, f->health, NULL));
    bm_head_t *small = bm_head_new(1, NULL);
    bm_pool_t *two = bm_pool_new();
    assert_non_null(bm_pool_add(two, "a", "http://127.0.0.1:1", NULL));
    assert_non_null(bm_pool_add(two, "b", "http://127.0.0.1:2", NULL));
    assert_null(bm_monitor_new(f->clock, f->up, two, f->disc, small, f->health, NULL));
    bm_pool_free(two);
    bm_head_free(small);
    start(f);
    bm_monitor_stop(f->mon);
    assert_int_equal(bm_monitor_start(f->mon), BM_ECLOSED);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feeds_tracker_then_listeners),
        cmocka_unit_test(test_head_v2_falls_back_to_head),
        cmocka_unit_test(test_payload_topic_near_gloas),
        cmocka_unit_test(test_syncing_polled_once_per_slot),
        cmocka_unit_test(test_reconnect_tells_everyone),
        cmocka_unit_test(test_head_only_with_first_event),
        cmocka_unit_test(test_polled_heads_without_streams),
        cmocka_unit_test(test_behind_stream_polled_working_not),
        cmocka_unit_test(test_stopped_node_not_ready_until_it_answers),
        cmocka_unit_test(test_missing_cluster_head_reported),
        cmocka_unit_test(test_silent_head_v2_falls_back_to_head),
        cmocka_unit_test(test_not_ready_before_its_head_is_known),
        cmocka_unit_test(test_stop_early_and_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
