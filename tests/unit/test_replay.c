/* SPDX-License-Identifier: MIT */
/*
 * test_replay: the per-validator replay state and its replay to nodes.
 *
 * The state is tested as data: what a write leaves behind (the latest preparation per
 * validator, the newest registration per key, ...), when it expires (driven by explicit
 * wall times against a slot clock, never by waiting), the caps, malformed input, and a
 * randomized run of inserts and sweeps against a model to hold the hash index honest.
 * Replays are tested against fake nodes on loopback (fake_node.h, recording every POST;
 * each must be a JSON array): chunking, order, headers, the triggers of pool states and stream
 * reconnects, debouncing, and a node that cannot be reached. The loop runs until a
 * condition holds, with a bound; every test ends with uv_loop_close() == 0.
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
#include "base/hdrs.h"
#include "base/log.h"
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "duties/replay.h"
#include "http/server.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000
#define DEBOUNCE_MS 200 /* the replay's default debounce */
/* ---- fixture: a replay state, optionally with fake nodes ----------------------------------- */

typedef struct fx {
    uv_loop_t loop;
    bm_clock_t *clock; /* manual: the replay's and the nodes' */
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_replay_t *rp;
    bm_chain_info_t chain;
    fake_nodes_t nodes;
} fx_t;

/* The items of a POST's body, which must be a JSON array. */
static size_t entries(const fake_req_t *r)
{
    json_object *o = json_tokener_parse(r->body);
    assert_non_null(o);
    assert_true(json_object_is_type(o, json_type_array));
    size_t n = json_object_array_length(o);
    json_object_put(o);
    return n;
}

/* genesis at a round time, 1 s slots, 8 slots per epoch */
#define GENESIS_MS 1700000000000ull
#define AT_SLOT(s, ms) (GENESIS_MS + (uint64_t)(s)*1000 + (ms))

static fx_t *fx_make(int nodes, const bm_replay_opts_t *opts, bool with_clock)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->clock = bm_clock_manual_new(&f->loop, bm_clock_now_ms());
    assert_non_null(f->clock);
    bm_upstream_opts_t uo;
    bm_upstream_opts_default(&uo);
    f->up = bm_upstream_new(&f->loop, &uo);
    f->pool = bm_pool_new();
    assert_non_null(f->up);
    assert_non_null(f->pool);
    fake_nodes_init(&f->nodes, &f->loop, f->pool);
    fake_nodes_set_clock(&f->nodes, f->clock);
    for (int i = 0; i < nodes; i++)
        fake_node_add1(&f->nodes, FAKE_OK(0, NULL));
    if (with_clock) {
        f->chain.known = true;
        f->chain.clock.genesis_ms = GENESIS_MS;
        f->chain.clock.slot_ms = 1000;
        f->chain.clock.slots_per_epoch = 8;
    }
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    if (opts)
        o = *opts;
    f->rp = bm_replay_new(f->clock, f->up, f->pool, &f->chain, &o);
    assert_non_null(f->rp);
    return f;
}

static void fx_free(fx_t *f)
{
    bm_replay_stop(f->rp);
    bm_upstream_free(f->up);
    /* every POST a node took was a JSON array */
    for (int i = 0; i < f->nodes.n; i++)
        for (int k = 0; k < f->nodes.node[i].requests; k++)
            entries(&f->nodes.node[i].reqs[k]);
    fake_nodes_close(&f->nodes);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_replay_free(f->rp);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    bm_pool_free(f->pool);
    free(f);
}

/* ---- feeding helpers ---------------------------------------------------------------------------
 */

static int feed(fx_t *f, bm_replay_kind_t kind, const char *json, uint64_t now_ms)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
    bm_buf_t *b = bm_buf_from_str(json);
    int n = bm_replay_feed(f->rp, kind, &h, b, now_ms);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    return n;
}

static int feed_fork(fx_t *f, const char *fork, const char *json, uint64_t now_ms)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", fork);
    bm_buf_t *b = bm_buf_from_str(json);
    int n = bm_replay_feed(f->rp, BM_REPLAY_PREFERENCES, &h, b, now_ms);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    return n;
}

static int feed_ssz(fx_t *f, bm_replay_kind_t kind, const uint8_t *p, size_t n, uint64_t now_ms)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/octet-stream");
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
    bm_buf_t *b = bm_buf_copy(p, n);
    int r = bm_replay_feed(f->rp, kind, &h, b, now_ms);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    return r;
}

static char *dump(fx_t *f, bm_replay_kind_t kind, uint64_t now_ms)
{
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_replay_dump(f->rp, kind, now_ms, &s), 0);
    char *out = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    return out;
}

static void assert_dump(fx_t *f, bm_replay_kind_t kind, uint64_t now_ms, const char *want)
{
    char *got = dump(f, kind, now_ms);
    assert_string_equal(got, want);
    free(got);
}

static const char *hex_n(char *buf, uint8_t byte, size_t n)
{
    buf[0] = '0';
    buf[1] = 'x';
    for (size_t i = 0; i < n; i++)
        snprintf(buf + 2 + 2 * i, 3, "%02x", byte);
    return buf;
}

static const char *prep_json(char *buf, size_t cap, uint64_t vi, uint8_t fee)
{
    char h[64];
    snprintf(buf, cap, "{\"validator_index\":\"%llu\",\"fee_recipient\":\"%s\"}",
             (unsigned long long)vi, hex_n(h, fee, 20));
    return buf;
}

static const char *reg_json(char *buf, size_t cap, uint8_t pk, uint8_t fee, uint64_t ts)
{
    char f1[64], p1[128], s1[256];
    snprintf(buf, cap,
             "{\"message\":{\"fee_recipient\":\"%s\",\"gas_limit\":\"30000000\",\"timestamp\":"
             "\"%llu\",\"pubkey\":\"%s\"},\"signature\":\"%s\"}",
             hex_n(f1, fee, 20), (unsigned long long)ts, hex_n(p1, pk, 48), hex_n(s1, 0xcc, 96));
    return buf;
}

static const char *pref_json(char *buf, size_t cap, uint64_t vi, uint64_t slot)
{
    char d[80], fee[64], sig[256];
    snprintf(buf, cap,
             "{\"message\":{\"dependent_root\":\"%s\",\"proposal_slot\":\"%llu\",\"validator_"
             "index\":\"%llu\",\"fee_recipient\":\"%s\",\"target_gas_limit\":\"36000000\"},"
             "\"signature\":\"%s\"}",
             hex_n(d, 0xde, 32), (unsigned long long)slot, (unsigned long long)vi,
             hex_n(fee, 0x77, 20), hex_n(sig, 0x99, 96));
    return buf;
}

/* ---- the state ------------------------------------------------------------------------------ */

static void test_preparation_latest_per_validator(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, false);
    char a[128], b[128], c[128], body[512];
    snprintf(body, sizeof body, "[%s,%s]", prep_json(a, sizeof a, 1, 0x11),
             prep_json(b, sizeof b, 2, 0x22));
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, body, 1000), 2);
    /* another validator client (or the next epoch) sends an overlapping set */
    snprintf(body, sizeof body, "[%s,%s]", prep_json(a, sizeof a, 2, 0x2f),
             prep_json(b, sizeof b, 3, 0x33));
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, body, 2000), 2);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 3);
    snprintf(body, sizeof body, "[%s,%s,%s]", prep_json(a, sizeof a, 1, 0x11),
             prep_json(b, sizeof b, 2, 0x2f), prep_json(c, sizeof c, 3, 0x33));
    assert_dump(f, BM_REPLAY_PREPARATION, 3000, body);
    /* the replayed form is the endpoint's: quoted decimals, lowercase hex */
    feed(
        f, BM_REPLAY_PREPARATION,
        "[{\"validator_index\":\"4\",\"fee_recipient\":\"0xABCDEFabcdefABCDEFabcdefABCDEFabcdefABCD"
        "\"}]",
        3000);
    char *d = dump(f, BM_REPLAY_PREPARATION, 3000);
    assert_non_null(strstr(d, "{\"validator_index\":\"4\",\"fee_recipient\":"
                              "\"0xabcdefabcdefabcdefabcdefabcdefabcdefabcd\"}"));
    free(d);
    /* what the fast scanner leaves alone (an escaped key, a plain integer, whitespace)
     * json-c reads */
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION,
                          " [ {\"validator_\\u0069ndex\" : 5 ,\n\"fee_recipient\":"
                          "\"0x5555555555555555555555555555555555555555\"} ] ",
                          3000),
                     1);
    d = dump(f, BM_REPLAY_PREPARATION, 3000);
    assert_non_null(strstr(d, "{\"validator_index\":\"5\",\"fee_recipient\":\"0x5555"));
    free(d);
    fx_free(f);
}

/* ---- shared state: entries given out one by one, taken back with newer wins -------------------
 */

typedef struct heard {
    int n;
    bm_replay_kind_t kind[8];
    char key[8][100];
    char entry[8][600];
    uint64_t seen[8], expires[8];
} heard_t;

static void on_entry(void *ud, bm_replay_kind_t kind, const char *key, const char *entry,
                     size_t len, uint64_t seen_ms, uint64_t expires_ms)
{
    heard_t *h = ud;
    if (h->n >= 8)
        return;
    h->kind[h->n] = kind;
    snprintf(h->key[h->n], sizeof h->key[0], "%s", key);
    snprintf(h->entry[h->n], sizeof h->entry[0], "%.*s", (int)len, entry);
    h->seen[h->n] = seen_ms;
    h->expires[h->n] = expires_ms;
    h->n++;
}

static void test_shared_entries_round_trip_newer_wins(void **state)
{
    (void)state;
    fx_t *a = fx_make(0, NULL, true), *b = fx_make(0, NULL, true);
    heard_t ha = {0}, hb = {0};
    bm_replay_on_entry(a->rp, on_entry, &ha);
    bm_replay_on_entry(b->rp, on_entry, &hb);
    char p[128], q[700], body[800];
    snprintf(body, sizeof body, "[%s]", prep_json(p, sizeof p, 7, 0x77));
    assert_int_equal(feed(a, BM_REPLAY_PREPARATION, body, AT_SLOT(9, 0)), 1);
    /* not inside the feed (the write's answer is written at the end of this turn): 1 ms on */
    assert_int_equal(ha.n, 0);
    bm_clock_manual_advance(a->clock, 1);
    assert_int_equal(ha.n, 1);
    assert_int_equal(ha.kind[0], BM_REPLAY_PREPARATION);
    assert_string_equal(ha.key[0], "0700000000000000"); /* the key's bytes */
    assert_string_equal(ha.entry[0], p);
    assert_int_equal(ha.seen[0], AT_SLOT(9, 0));
    /* slot 9 is in epoch 1: a node keeps it through epoch 3, so it means nothing from 4 on */
    assert_int_equal(ha.expires[0], AT_SLOT(32, 0));
    /* B takes it as A gave it, and tells nobody (it came from elsewhere) */
    assert_int_equal(
        bm_replay_restore(b->rp, ha.kind[0], ha.entry[0], strlen(ha.entry[0]), ha.seen[0]), 1);
    assert_int_equal(hb.n, 0);
    assert_dump(b, BM_REPLAY_PREPARATION, AT_SLOT(9, 0), body);
    /* B is told a newer recipient for 7: an older record from elsewhere does not replace it */
    snprintf(body, sizeof body, "[%s]", prep_json(p, sizeof p, 7, 0x78));
    assert_int_equal(feed(b, BM_REPLAY_PREPARATION, body, AT_SLOT(10, 0)), 1);
    bm_clock_manual_advance(b->clock, 1);
    assert_int_equal(
        bm_replay_restore(b->rp, ha.kind[0], ha.entry[0], strlen(ha.entry[0]), ha.seen[0]), 0);
    assert_dump(b, BM_REPLAY_PREPARATION, AT_SLOT(10, 0), body);
    /* but the newer one replaces A's */
    assert_int_equal(hb.n, 1);
    assert_int_equal(
        bm_replay_restore(a->rp, hb.kind[0], hb.entry[0], strlen(hb.entry[0]), hb.seen[0]), 1);
    assert_dump(a, BM_REPLAY_PREPARATION, AT_SLOT(10, 0), body);
    /* preferences carry their fork */
    snprintf(body, sizeof body, "[%s]", pref_json(q, sizeof q, 8, 30));
    assert_int_equal(feed_fork(a, "gloas", body, AT_SLOT(10, 0)), 1);
    bm_clock_manual_advance(a->clock, 1);
    assert_int_equal(ha.n, 2);
    assert_int_equal(strncmp(ha.entry[1], "gloas {", 7), 0);
    assert_int_equal(bm_replay_restore(b->rp, BM_REPLAY_PREFERENCES, ha.entry[1],
                                       strlen(ha.entry[1]), ha.seen[1]),
                     1);
    assert_dump(b, BM_REPLAY_PREFERENCES, AT_SLOT(10, 0), body);
    assert_int_equal(bm_replay_restore(b->rp, BM_REPLAY_PREFERENCES, q, strlen(q), 1), BM_EINVAL);
    assert_int_equal(bm_replay_restore(b->rp, BM_REPLAY_PREPARATION, "{\"x\":1}", 7, 1), 0);
    /* each: every live entry of A, for writing its state back */
    heard_t all = {0};
    bm_replay_each(a->rp, AT_SLOT(10, 0), on_entry, &all);
    assert_int_equal(all.n, 2);
    assert_string_equal(all.entry[0], hb.entry[0]); /* A holds the newer one, B's */
    assert_string_equal(all.entry[1], ha.entry[1]);
    heard_t later = {0};
    bm_replay_each(a->rp, AT_SLOT(40, 0), on_entry, &later); /* both over by then */
    assert_int_equal(later.n, 0);
    fx_free(a);
    fx_free(b);
}

static void test_registration_newest_timestamp_wins(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, false);
    char r[512], body[600];
    snprintf(body, sizeof body, "[%s]", reg_json(r, sizeof r, 0xaa, 0x01, 100));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, 1000), 1);
    char *first = dump(f, BM_REPLAY_REGISTRATION, 1000);
    /* an older registration of the same key never replaces the newer one */
    snprintf(body, sizeof body, "[%s]", reg_json(r, sizeof r, 0xaa, 0x02, 50));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, 2000), 0);
    assert_dump(f, BM_REPLAY_REGISTRATION, 2000, first);
    free(first);
    /* a newer one does */
    snprintf(body, sizeof body, "[%s]", reg_json(r, sizeof r, 0xaa, 0x03, 200));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, 3000), 1);
    snprintf(body, sizeof body, "[%s]", reg_json(r, sizeof r, 0xaa, 0x03, 200));
    assert_dump(f, BM_REPLAY_REGISTRATION, 3000, body);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_REGISTRATION), 1);
    /* SSZ: List[SignedValidatorRegistrationV1], 180 bytes each */
    uint8_t ssz[360];
    memset(ssz, 0, sizeof ssz);
    for (int k = 0; k < 2; k++) {
        uint8_t *p = ssz + 180 * k;
        memset(p, 0x04, 20);
        p[20] = 0x80; /* gas 0x1c9c380 = 30000000 */
        p[21] = 0xc3;
        p[22] = 0xc9;
        p[23] = 0x01;
        p[28] = (uint8_t)(150 + k); /* timestamp */
        memset(p + 36, k ? 0xbb : 0xaa, 48);
        memset(p + 84, 0xcc, 96);
    }
    /* 0xaa at timestamp 150 is older than 200: only 0xbb is new */
    assert_int_equal(feed_ssz(f, BM_REPLAY_REGISTRATION, ssz, sizeof ssz, 4000), 1);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_REGISTRATION), 2);
    char bb[512];
    char *d = dump(f, BM_REPLAY_REGISTRATION, 4000);
    assert_non_null(strstr(d, reg_json(bb, sizeof bb, 0xbb, 0x04, 151)));
    free(d);
    assert_int_equal(feed_ssz(f, BM_REPLAY_REGISTRATION, ssz, 179, 4000), BM_EINVAL);
    fx_free(f);
}

static void test_expiry_follows_each_kind(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.registration_ttl_epochs = 4;
    fx_t *f = fx_make(0, &o, true);
    char a[512], p2[512], body[1200];
    uint64_t t0 = AT_SLOT(80, 500); /* epoch 10 */
    snprintf(body, sizeof body, "[%s]", prep_json(a, sizeof a, 1, 0x11));
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, body, t0), 1);
    snprintf(body, sizeof body, "[%s]", reg_json(a, sizeof a, 0xaa, 0x11, 1));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, t0), 1);
    snprintf(body, sizeof body, "[%s,%s]", pref_json(a, sizeof a, 7, 90),
             pref_json(p2, sizeof p2, 7, 70));
    /* the preference for slot 70 is over already: not kept */
    assert_int_equal(feed(f, BM_REPLAY_PREFERENCES, body, t0), 1);
    assert_int_equal(
        feed(f, BM_REPLAY_COMMITTEE_SUBS,
             "[{\"validator_index\":\"1\",\"committee_index\":\"3\",\"committees_at_slot\":\"4\","
             "\"slot\":\"85\",\"is_aggregator\":true},{\"validator_index\":\"2\",\"committee_"
             "index\":\"3\",\"committees_at_slot\":\"4\",\"slot\":\"79\",\"is_aggregator\":false}]",
             t0),
        1);
    assert_int_equal(feed(f, BM_REPLAY_SYNC_SUBS,
                          "[{\"validator_index\":\"5\",\"sync_committee_indices\":[\"1\",\"300\"],"
                          "\"until_epoch\":\"12\"},{\"validator_index\":\"6\",\"sync_committee_"
                          "indices\":[\"2\"],\"until_epoch\":\"10\"}]",
                          t0),
                     1);
    /* nothing goes early */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(85, 999)), 0);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_COMMITTEE_SUBS), 1);
    /* a subscription ends with its slot */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(86, 0)), 1);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_COMMITTEE_SUBS), 0);
    /* preferences end with their proposal slot */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(90, 999)), 0);
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(91, 0)), 1);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREFERENCES), 0);
    /* a sync subscription at its until_epoch (exclusive): epoch 12 starts at slot 96 */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(95, 999)), 0);
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(96, 0)), 1);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_SYNC_SUBS), 0);
    /* a preparation lasts through its epoch (10) and two more */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(103, 999)), 0);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 1);
    /* dump already hides what a sweep would drop */
    assert_dump(f, BM_REPLAY_PREPARATION, AT_SLOT(104, 0), "[]");
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(104, 0)), 1);
    /* a registration lasts registration_ttl_epochs after it was last sent */
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_REGISTRATION), 1);
    snprintf(body, sizeof body, "[%s]", reg_json(a, sizeof a, 0xaa, 0x11, 1));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, AT_SLOT(112, 0)), 1); /* epoch 14 */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(151, 999)), 0);              /* epoch 18 */
    assert_int_equal(bm_replay_sweep(f->rp, AT_SLOT(152, 0)), 1);                /* epoch 19 */
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        assert_int_equal(bm_replay_count(f->rp, (bm_replay_kind_t)k), 0);
    fx_free(f);
}

/* Preparations of validators [from, to) at fee `fee`, as one body (caller frees). */
static char *preps(uint64_t from, uint64_t to, uint8_t fee)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '[');
    for (uint64_t v = from; v < to; v++) {
        char it[128];
        bm_str_printf(&s, "%s%s", v > from ? "," : "", prep_json(it, sizeof it, v, fee));
    }
    bm_str_putc(&s, ']');
    char *out = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    return out;
}

static int feed_preps(fx_t *f, uint64_t from, uint64_t to, uint8_t fee, uint64_t now_ms)
{
    char *body = preps(from, to, fee);
    int n = feed(f, BM_REPLAY_PREPARATION, body, now_ms);
    free(body);
    return n;
}

static bool kept_prep(fx_t *f, uint64_t vi, uint64_t now_ms)
{
    char *d = dump(f, BM_REPLAY_PREPARATION, now_ms);
    char want[64];
    snprintf(want, sizeof want, "\"validator_index\":\"%llu\",", (unsigned long long)vi);
    bool found = strstr(d, want) != NULL;
    free(d);
    return found;
}

/* A full kind makes room by dropping the least recently submitted entries (a refresh counts
 * as a submission), never by refusing the newest; one write adds at most a quarter of the
 * cap as new entries, the rest not kept (counted). */
static void test_caps_drop_the_least_recently_submitted(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.max_entries[BM_REPLAY_PREPARATION] = 8; /* a share of 2 */
    fx_t *f = fx_make(0, &o, false);
    for (uint64_t v = 0; v < 8; v += 2)
        assert_int_equal(feed_preps(f, v, v + 2, 0x10, 1000 + v * 1000), 2);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 8);
    /* validators 0 and 1 submit again: now 2 and 3 are the least recently submitted */
    assert_int_equal(feed_preps(f, 0, 2, 0x11, 10000), 2);
    /* a write of five new validators: two kept (its share), pushing out 2 and 3 */
    assert_int_equal(feed_preps(f, 100, 105, 0x20, 11000), 2);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 8);
    assert_int_equal(bm_replay_evicted(f->rp, BM_REPLAY_PREPARATION), 2);
    assert_int_equal(bm_replay_dropped(f->rp, BM_REPLAY_PREPARATION), 3);
    assert_true(kept_prep(f, 0, 11000) && kept_prep(f, 1, 11000));
    assert_false(kept_prep(f, 2, 11000) || kept_prep(f, 3, 11000));
    assert_true(kept_prep(f, 100, 11000) && kept_prep(f, 101, 11000));
    assert_false(kept_prep(f, 102, 11000));
    for (uint64_t v = 4; v < 8; v++)
        assert_true(kept_prep(f, v, 11000));
    /* refreshing is never limited by the share: every kept entry at once */
    char *body = preps(4, 8, 0x12);
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, body, 12000), 4);
    free(body);
    assert_int_equal(feed_preps(f, 0, 2, 0x12, 12000), 2);
    assert_int_equal(bm_replay_dropped(f->rp, BM_REPLAY_PREPARATION), 3);
    /* now 100 and 101 are the oldest: the next new ones replace them */
    assert_int_equal(feed_preps(f, 200, 202, 0x30, 13000), 2);
    assert_false(kept_prep(f, 100, 13000) || kept_prep(f, 101, 13000));
    assert_true(kept_prep(f, 0, 13000) && kept_prep(f, 4, 13000) && kept_prep(f, 200, 13000));
    /* expiry still frees room (a slot clock is needed for it: tested in
     * test_expiry_follows_each_kind), and a sweep keeps the order consistent */
    fx_free(f);
}

/* The attack of issue 12: one unauthenticated POST of 70 000 bogus preparations filled the
 * 65 536 entries and pushed the real validators out. Now it takes a quarter of the memory. */
static void test_one_write_cannot_fill_the_memory(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, false);
    assert_int_equal(feed_preps(f, 0, 1000, 0x10, 1000), 1000);
    int kept = feed_preps(f, 1000000, 1070000, 0xee, 2000);
    assert_int_equal(kept, 65536 / BM_REPLAY_SHARE_DIV);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 1000 + 65536 / 4);
    assert_int_equal(bm_replay_dropped(f->rp, BM_REPLAY_PREPARATION), 70000 - 65536 / 4);
    assert_int_equal(bm_replay_evicted(f->rp, BM_REPLAY_PREPARATION), 0);
    assert_true(kept_prep(f, 0, 2000) && kept_prep(f, 999, 2000));
    /* the real validator client's next submission is kept */
    assert_int_equal(feed_preps(f, 0, 1000, 0x10, 3000), 1000);
    fx_free(f);
}

/* Evictions, expiry sweeps (which compact the table) and refreshes in any order keep the
 * submission order intact: the entry dropped to make room is always the one submitted least
 * recently, checked against a model. */
static void test_eviction_order_against_a_model(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    enum { CAP = 64, KEYS = 200 };
    o.max_entries[BM_REPLAY_PREPARATION] = CAP;
    fx_t *f = fx_make(0, &o, true);
    static uint64_t last[KEYS]; /* model: wall time of the latest kept submission; 0: absent */
    memset(last, 0, sizeof last);
    uint64_t rng = 0x2545f4914f6cdd1dull;
    uint64_t now = AT_SLOT(100, 0);
    for (int round = 0; round < 3000; round++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint64_t vi = rng % KEYS;
        now += 1 + (rng >> 40) % 400;
        size_t live = 0;
        uint64_t oldest = 0;
        int oldest_vi = -1;
        for (int k = 0; k < KEYS; k++)
            if (last[k]) {
                live++;
                if (oldest_vi < 0 || last[k] < oldest)
                    oldest = last[k], oldest_vi = k;
            }
        bool is_new = !last[vi];
        assert_int_equal(feed_preps(f, vi, vi + 1, 0x42, now), 1);
        if (is_new && live == CAP)
            last[oldest_vi] = 0;
        last[vi] = now;
        if (round % 97 == 0) {
            /* what a sweep drops: older than its epoch and two more (8 slots of 1 s) */
            size_t gone = bm_replay_sweep(f->rp, now);
            uint64_t ep_now = (now - GENESIS_MS) / 8000;
            size_t model_gone = 0;
            for (int k = 0; k < KEYS; k++)
                if (last[k] && (last[k] - GENESIS_MS) / 8000 + 2 < ep_now)
                    last[k] = 0, model_gone++;
            assert_int_equal(gone, model_gone);
        }
        size_t model = 0;
        for (int k = 0; k < KEYS; k++)
            model += last[k] != 0;
        assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), model);
    }
    uint64_t ep_now = (now - GENESIS_MS) / 8000;
    for (int k = 0; k < KEYS; k++)
        assert_int_equal(kept_prep(f, (uint64_t)k, now),
                         last[k] != 0 && (last[k] - GENESIS_MS) / 8000 + 2 >= ep_now);
    assert_true(bm_replay_evicted(f->rp, BM_REPLAY_PREPARATION) > 100);
    fx_free(f);
}

static void test_malformed_input(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, false);
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, "{\"validator_index\":\"1\"}", 0), BM_EINVAL);
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, "[1,2", 0), BM_EINVAL);
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, "", 0), BM_EINVAL);
    /* bad items are skipped, good ones kept */
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION,
                          "[{\"validator_index\":\"x\",\"fee_recipient\":\"0x11\"},"
                          "{\"validator_index\":\"1\",\"fee_recipient\":\"0x1111\"},"
                          "{\"validator_index\":\"2\",\"fee_recipient\":"
                          "\"0x2222222222222222222222222222222222222222\"},"
                          "{\"validator_index\":\"99999999999999999999\",\"fee_recipient\":"
                          "\"0x2222222222222222222222222222222222222222\"},7,null]",
                          0),
                     1);
    assert_int_equal(feed(f, BM_REPLAY_SYNC_SUBS,
                          "[{\"validator_index\":\"5\",\"sync_committee_indices\":[\"a\"],\"until_"
                          "epoch\":\"12\"},{\"validator_index\":\"5\",\"sync_committee_indices\":"
                          "\"1\",\"until_epoch\":\"12\"}]",
                          0),
                     0);
    assert_int_equal(feed(f, BM_REPLAY_COMMITTEE_SUBS,
                          "[{\"validator_index\":\"1\",\"committee_index\":\"0\",\"committees_at_"
                          "slot\":\"1\",\"slot\":\"10\",\"is_aggregator\":\"yes\"}]",
                          0),
                     0);
    /* preferences need their fork: a replay must name it again */
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");
    bm_buf_t *b = bm_buf_from_str("[]");
    assert_int_equal(bm_replay_feed(f->rp, BM_REPLAY_PREFERENCES, &h, b, 0), BM_EINVAL);
    /* SSZ only where the endpoint has it */
    bm_hdrs_set_z(&h, "Content-Type", "application/octet-stream");
    assert_int_equal(bm_replay_feed(f->rp, BM_REPLAY_PREPARATION, &h, b, 0), BM_EINVAL);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_PREPARATION), 1);
    assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_SYNC_SUBS), 0);
    fx_free(f);
}

/* A randomized run of inserts, refreshes and sweeps checked against a model: after any
 * sequence of backward-shift deletions every kept key is still found (a refresh does not
 * add an entry) and every expired one is gone. */
static void test_index_against_a_model(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, true);
    enum { KEYS = 3000 };
    static uint64_t slot_of[KEYS]; /* 0: not in the model */
    memset(slot_of, 0, sizeof slot_of);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    uint64_t now_slot = 100;
    for (int round = 0; round < 40; round++) {
        char *body = malloc(200 * 160 + 2);
        assert_non_null(body);
        strcpy(body, "[");
        size_t len = 1;
        for (int i = 0; i < 200; i++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            uint64_t vi = rng % KEYS;
            uint64_t slot = slot_of[vi] ? slot_of[vi] : now_slot + 1 + (rng >> 32) % 30;
            slot_of[vi] = slot;
            len += (size_t)sprintf(body + len,
                                   "%s{\"validator_index\":\"%llu\",\"committee_index\":\"1\","
                                   "\"committees_at_slot\":\"2\",\"slot\":\"%llu\","
                                   "\"is_aggregator\":false}",
                                   i ? "," : "", (unsigned long long)vi, (unsigned long long)slot);
        }
        strcpy(body + len, "]");
        assert_int_equal(feed(f, BM_REPLAY_COMMITTEE_SUBS, body, AT_SLOT(now_slot, 0)), 200);
        free(body);
        now_slot += 2;
        bm_replay_sweep(f->rp, AT_SLOT(now_slot, 0));
        size_t model = 0;
        for (int k = 0; k < KEYS; k++) {
            if (slot_of[k] && slot_of[k] < now_slot)
                slot_of[k] = 0;
            model += slot_of[k] != 0;
        }
        assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_COMMITTEE_SUBS), model);
        /* every kept key is found: refreshing them all adds nothing */
        bm_str_t all = BM_STR_INIT;
        bm_str_putc(&all, '[');
        size_t n = 0;
        for (int k = 0; k < KEYS; k++)
            if (slot_of[k])
                bm_str_printf(&all,
                              "%s{\"validator_index\":\"%d\",\"committee_index\":\"1\","
                              "\"committees_at_slot\":\"2\",\"slot\":\"%llu\","
                              "\"is_aggregator\":false}",
                              n++ ? "," : "", k, (unsigned long long)slot_of[k]);
        bm_str_putc(&all, ']');
        assert_int_equal(feed(f, BM_REPLAY_COMMITTEE_SUBS, bm_str_data(&all), AT_SLOT(now_slot, 0)),
                         (int)model);
        bm_str_dispose(&all);
        assert_int_equal(bm_replay_count(f->rp, BM_REPLAY_COMMITTEE_SUBS), model);
    }
    fx_free(f);
}

/* ---- replays to nodes -------------------------------------------------------------------------
 */

static void fill_state(fx_t *f)
{
    /* 250 preparations in one body */
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '[');
    for (int v = 0; v < 250; v++) {
        char it[128];
        bm_str_printf(&s, "%s%s", v ? "," : "", prep_json(it, sizeof it, (uint64_t)v, 0x10));
    }
    bm_str_putc(&s, ']');
    assert_int_equal(feed(f, BM_REPLAY_PREPARATION, bm_str_data(&s), 1000), 250);
    bm_str_dispose(&s);
    char a[512], b[512], c[512], body[1600];
    snprintf(body, sizeof body, "[%s,%s,%s]", reg_json(a, sizeof a, 1, 1, 1),
             reg_json(b, sizeof b, 2, 2, 1), reg_json(c, sizeof c, 3, 3, 1));
    assert_int_equal(feed(f, BM_REPLAY_REGISTRATION, body, 1000), 3);
    /* preferences of two forks (around a fork boundary): one request per fork */
    snprintf(body, sizeof body, "[%s,%s]", pref_json(a, sizeof a, 1, 100),
             pref_json(b, sizeof b, 2, 101));
    assert_int_equal(feed_fork(f, "gloas", body, 1000), 2);
    snprintf(body, sizeof body, "[%s]", pref_json(a, sizeof a, 3, 108));
    assert_int_equal(feed_fork(f, "heze", body, 1000), 1);
    assert_int_equal(
        feed(f, BM_REPLAY_COMMITTEE_SUBS,
             "[{\"validator_index\":\"1\",\"committee_index\":\"3\",\"committees_at_slot\":\"4\","
             "\"slot\":\"85\",\"is_aggregator\":true},{\"validator_index\":\"2\",\"committee_"
             "index\":\"0\",\"committees_at_slot\":\"4\",\"slot\":\"86\",\"is_aggregator\":false}]",
             1000),
        2);
    assert_int_equal(feed(f, BM_REPLAY_SYNC_SUBS,
                          "[{\"validator_index\":\"5\",\"sync_committee_indices\":[\"1\",\"300\"],"
                          "\"until_epoch\":\"12\"}]",
                          1000),
                     1);
}

/* A reload: a new state takes every entry of the old one as it is, expiry included. */
static void test_adopt_copies_every_entry_as_it_is(void **state)
{
    (void)state;
    fx_t *a = fx_make(0, NULL, true), *b = fx_make(0, NULL, true);
    fill_state(a);
    char p[256], body[512];
    snprintf(body, sizeof body, "[%s]", prep_json(p, sizeof p, 900, 0x90));
    uint64_t t0 = AT_SLOT(80, 500); /* epoch 10: kept through epoch 12 */
    assert_int_equal(feed(a, BM_REPLAY_PREPARATION, body, t0), 1);
    /* b already holds a sync subscription of validator 5: replaced by a's */
    assert_int_equal(feed(b, BM_REPLAY_SYNC_SUBS,
                          "[{\"validator_index\":\"5\",\"sync_committee_indices\":[\"7\"],"
                          "\"until_epoch\":\"11\"}]",
                          1000),
                     1);
    assert_int_equal(bm_replay_adopt(b->rp, a->rp), 0);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        assert_int_equal(bm_replay_count(b->rp, (bm_replay_kind_t)k),
                         bm_replay_count(a->rp, (bm_replay_kind_t)k));
        char *da = dump(a, (bm_replay_kind_t)k, 1000), *db = dump(b, (bm_replay_kind_t)k, 1000);
        assert_string_equal(db, da);
        free(da);
        free(db);
    }
    /* the time each was last sent came along: 900's preparation ends when a's would */
    assert_int_equal(bm_replay_sweep(b->rp, AT_SLOT(103, 999)),
                     bm_replay_sweep(a->rp, AT_SLOT(103, 999)));
    assert_dump(b, BM_REPLAY_PREPARATION, AT_SLOT(104, 0), "[]");
    fx_free(a);
    fx_free(b);
}

static bm_replay_stats_t stats(fx_t *f)
{
    bm_replay_stats_t st;
    bm_replay_stats(f->rp, &st);
    return st;
}

/* Moves the manual clock `ms` forward and runs the loop until what that set off has
 * happened (nothing in transit to or from the nodes, no timer due now). */
static void step(fx_t *f, uint64_t ms)
{
    fake_nodes_advance(&f->nodes, ms);
}

static void test_replay_batches_every_kind_in_chunks(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.chunk = 100;
    fx_t *f = fx_make(2, &o, false);
    fill_state(f);
    bm_replay_node(f->rp, f->nodes.node[0].node, "test");
    step(f, DEBOUNCE_MS - 1); /* the debounce is not over */
    assert_int_equal(stats(f).replays_started, 0);
    step(f, 1);
    bm_replay_stats_t st = stats(f);
    assert_int_equal(st.replays_completed, 1);
    assert_int_equal(st.posts, 8);
    assert_int_equal(st.entries_sent, 250 + 3 + 3 + 2 + 1);
    assert_int_equal(st.posts_rejected, 0);
    fake_node_t *n = &f->nodes.node[0];
    assert_int_equal(n->requests, 8);
    static const struct {
        const char *target;
        size_t entries;
        const char *version;
    } want[] = {
        {"/eth/v1/validator/prepare_beacon_proposer", 100, ""},
        {"/eth/v1/validator/prepare_beacon_proposer", 100, ""},
        {"/eth/v1/validator/prepare_beacon_proposer", 50, ""},
        {"/eth/v1/validator/register_validator", 3, ""},
        {"/eth/v1/validator/proposer_preferences", 2, "gloas"},
        {"/eth/v1/validator/proposer_preferences", 1, "heze"},
        {"/eth/v1/validator/beacon_committee_subscriptions", 2, ""},
        {"/eth/v1/validator/sync_committee_subscriptions", 1, ""},
    };
    for (int i = 0; i < 8; i++) {
        assert_string_equal(n->reqs[i].target, want[i].target);
        assert_int_equal(entries(&n->reqs[i]), want[i].entries);
        assert_string_equal(n->reqs[i].version, want[i].version);
        assert_string_equal(n->reqs[i].ctype, "application/json");
    }
    /* every validator once, in the endpoint's shape */
    assert_non_null(strstr(n->reqs[2].body, "{\"validator_index\":\"249\",\"fee_recipient\""));
    assert_non_null(strstr(n->reqs[7].body, "\"sync_committee_indices\":[\"1\",\"300\"],"
                                            "\"until_epoch\":\"12\""));
    assert_non_null(strstr(n->reqs[6].body, "\"is_aggregator\":true"));
    /* nobody else was replayed to */
    assert_int_equal(f->nodes.node[1].requests, 0);
    fx_free(f);
}

static void test_triggers_and_debounce(void **state)
{
    (void)state;
    fx_t *f = fx_make(1, NULL, false);
    assert_int_equal(bm_pool_on_state(f->pool, bm_replay_node_state, f->rp), 0);
    bm_node_t *node = f->nodes.node[0].node;
    /* with nothing to replay, a trigger sends nothing */
    bm_pool_set_state(f->pool, node, BM_NODE_READY, "discovered");
    assert_true(bm_replay_busy(f->rp, 0));
    step(f, DEBOUNCE_MS);
    assert_false(bm_replay_busy(f->rp, 0));
    assert_int_equal(stats(f).replays_started, 0);
    char a[128], body[300];
    snprintf(body, sizeof body, "[%s]", prep_json(a, sizeof a, 1, 0x11));
    feed(f, BM_REPLAY_PREPARATION, body, 1000);
    /* came back from unreachable */
    bm_pool_set_state(f->pool, node, BM_NODE_UNREACHABLE, "down");
    bm_pool_set_state(f->pool, node, BM_NODE_LAGGING, "back");
    step(f, DEBOUNCE_MS);
    assert_int_equal(stats(f).replays_completed, 1);
    assert_int_equal(stats(f).replays_started, 1);
    /* lagging back to ready right after a replay: nothing was lost */
    bm_pool_set_state(f->pool, node, BM_NODE_READY, "caught up");
    bm_pool_set_state(f->pool, node, BM_NODE_LAGGING, "behind");
    bm_pool_set_state(f->pool, node, BM_NODE_READY, "caught up");
    step(f, 1000);
    assert_int_equal(stats(f).replays_started, 1);
    /* synced after a restart: replayed (a node answers 503 to subscriptions while syncing) */
    bm_pool_set_state(f->pool, node, BM_NODE_SYNCING, "restarted");
    bm_pool_set_state(f->pool, node, BM_NODE_READY, "synced");
    step(f, DEBOUNCE_MS);
    assert_int_equal(stats(f).replays_completed, 2);
    /* a stream reconnect, reported twice at once, and a state change with it: one replay */
    bm_replay_node_connection(0, true, f->rp);
    bm_replay_node_connection(0, true, f->rp);
    bm_pool_set_state(f->pool, node, BM_NODE_UNREACHABLE, "down");
    bm_pool_set_state(f->pool, node, BM_NODE_READY, "back");
    step(f, DEBOUNCE_MS);
    assert_int_equal(stats(f).replays_completed, 3);
    step(f, 1000);
    assert_int_equal(stats(f).replays_started, 3);
    /* a stream going down, an unknown node index: nothing */
    bm_replay_node_connection(0, false, f->rp);
    bm_replay_node_connection(7, true, f->rp);
    /* wrong network: never */
    bm_pool_set_state(f->pool, node, BM_NODE_WRONG_NETWORK, "other chain");
    bm_replay_node(f->rp, node, "test");
    step(f, 1000);
    assert_int_equal(stats(f).replays_started, 3);
    assert_int_equal(f->nodes.node[0].requests, 3);
    fx_free(f);
}

static void test_reconnects_replay_at_most_once_per_interval(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.reconnect_min_interval_ms = 300;
    fx_t *f = fx_make(1, &o, false);
    assert_int_equal(bm_pool_on_state(f->pool, bm_replay_node_state, f->rp), 0);
    char a[128], body[300];
    snprintf(body, sizeof body, "[%s]", prep_json(a, sizeof a, 1, 0x11));
    feed(f, BM_REPLAY_PREPARATION, body, 1000);
    /* t = 0: a reconnect; the replay starts after the debounce, at 200 */
    bm_replay_node_connection(0, true, f->rp);
    step(f, DEBOUNCE_MS);
    assert_int_equal(stats(f).replays_completed, 1);
    /* a stream that drops again at once: deferred to 300 ms after the last replay's start
     * (500), not dropped */
    bm_replay_node_connection(0, true, f->rp);
    step(f, 299);
    assert_int_equal(stats(f).replays_started, 1);
    assert_true(bm_replay_busy(f->rp, 0));
    step(f, 1);
    assert_int_equal(stats(f).replays_completed, 2);
    /* a node coming back is replayed to after the debounce all the same */
    bm_pool_set_state(f->pool, f->nodes.node[0].node, BM_NODE_UNREACHABLE, "down");
    bm_pool_set_state(f->pool, f->nodes.node[0].node, BM_NODE_READY, "back");
    step(f, DEBOUNCE_MS);
    assert_int_equal(stats(f).replays_completed, 3);
    fx_free(f);
}

static void test_trigger_while_running_runs_again(void **state)
{
    (void)state;
    bm_replay_opts_t o;
    bm_replay_opts_default(&o);
    o.chunk = 100;
    fx_t *f = fx_make(1, &o, false);
    fake_node_script(&f->nodes.node[0], &FAKE_OK(60, NULL), 1);
    fill_state(f);
    bm_replay_node(f->rp, f->nodes.node[0].node, "first");
    step(f, DEBOUNCE_MS); /* the replay starts: its first POST waits 60 ms for its answer */
    assert_int_equal(f->nodes.node[0].requests, 1);
    bm_replay_node(f->rp, f->nodes.node[0].node, "second");
    /* eight POSTs of 60 ms each: the second replay starts when the first ends */
    for (int i = 0; i < 8; i++)
        step(f, 60);
    assert_int_equal(stats(f).replays_completed, 1);
    assert_int_equal(stats(f).replays_started, 2);
    for (int i = 0; i < 8; i++)
        step(f, 60);
    assert_int_equal(stats(f).replays_completed, 2);
    assert_int_equal(stats(f).replays_started, 2);
    assert_int_equal(f->nodes.node[0].requests, 16);
    /* a write arriving during a replay is kept: positions in the table never move under a
     * replay's cursor, new entries are appended */
    fx_free(f);
}

static void test_unreachable_node_fails_the_replay(void **state)
{
    (void)state;
    fx_t *f = fx_make(0, NULL, false);
    /* the replay state sized its nodes at creation: make a new one with a node on a port
     * nobody listens on */
    bm_replay_stop(f->rp);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_replay_free(f->rp);
    bm_node_t *node = fake_node_add_refused(&f->nodes)->node;
    f->rp = bm_replay_new(f->clock, f->up, f->pool, NULL, NULL);
    assert_non_null(f->rp);
    char a[128], body[300];
    snprintf(body, sizeof body, "[%s]", prep_json(a, sizeof a, 1, 0x11));
    feed(f, BM_REPLAY_PREPARATION, body, 1000);
    bm_replay_node(f->rp, node, "test");
    bm_clock_manual_advance(f->clock, DEBOUNCE_MS);
    RUN_UNTIL(&f->loop, stats(f).replays_failed == 1, BOUND_MS);
    assert_int_equal(stats(f).replays_failed, 1);
    assert_int_equal(stats(f).replays_completed, 0);
    assert_false(bm_replay_busy(f->rp, 0));
    fx_free(f);
}

/* stateDir: what bm_replay_export wrote comes back entry for entry with its own last-sent
 * time, so expiry after a restart is what it would have been without one. */
static void test_export_import_round_trip(void **state)
{
    (void)state;
    fx_t *a = fx_make(0, NULL, true);
    char p[512], q[512], body[1200];
    uint64_t t0 = AT_SLOT(80, 500); /* epoch 10 */
    snprintf(body, sizeof body, "[%s]", prep_json(p, sizeof p, 1, 0x11));
    assert_int_equal(feed(a, BM_REPLAY_PREPARATION, body, t0), 1);
    snprintf(body, sizeof body, "[%s]", prep_json(p, sizeof p, 2, 0x22));
    assert_int_equal(feed(a, BM_REPLAY_PREPARATION, body, AT_SLOT(96, 0)), 1); /* epoch 12 */
    snprintf(body, sizeof body, "[%s]", reg_json(p, sizeof p, 0xaa, 0x11, 7));
    assert_int_equal(feed(a, BM_REPLAY_REGISTRATION, body, t0), 1);
    snprintf(body, sizeof body, "[%s,%s]", pref_json(p, sizeof p, 7, 120),
             pref_json(q, sizeof q, 8, 121));
    assert_int_equal(feed_fork(a, "heze", body, t0), 2);
    assert_int_equal(
        feed(a, BM_REPLAY_COMMITTEE_SUBS,
             "[{\"validator_index\":\"1\",\"committee_index\":\"3\",\"committees_at_slot\":\"4\","
             "\"slot\":\"99\",\"is_aggregator\":true}]",
             t0),
        1);
    assert_int_equal(feed(a, BM_REPLAY_SYNC_SUBS,
                          "[{\"validator_index\":\"5\",\"sync_committee_indices\":[\"1\",\"300\"],"
                          "\"until_epoch\":\"14\"}]",
                          t0),
                     1);
    uint64_t saved = AT_SLOT(97, 0);
    bm_str_t ex = BM_STR_INIT;
    assert_int_equal(bm_replay_export(a->rp, saved, &ex), 0);

    /* the same state, every kind, after a restart shortly after */
    fx_t *b = fx_make(0, NULL, true);
    assert_int_equal(bm_replay_import(b->rp, bm_str_data(&ex), bm_str_len(&ex), saved + 500), 7);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        char *want = dump(a, (bm_replay_kind_t)k, saved);
        char *got = dump(b, (bm_replay_kind_t)k, saved);
        assert_string_equal(got, want);
        free(want);
        free(got);
    }
    /* the preference's fork came back: a replay sends it with its Eth-Consensus-Version */
    assert_non_null(strstr(bm_str_data(&ex), "\"fork\":\"heze\""));
    /* expiry follows the original times: the first preparation (epoch 10) ends with
     * epoch 12, the second (epoch 12) lives on */
    assert_int_equal(bm_replay_sweep(b->rp, AT_SLOT(104, 0)), 2); /* + the subscription */
    assert_int_equal(bm_replay_count(b->rp, BM_REPLAY_PREPARATION), 1);

    /* restored long after: what expired meanwhile is not restored */
    fx_t *c = fx_make(0, NULL, true);
    assert_int_equal(bm_replay_import(c->rp, bm_str_data(&ex), bm_str_len(&ex), AT_SLOT(200, 0)),
                     0);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        assert_int_equal(bm_replay_count(c->rp, (bm_replay_kind_t)k), 0);

    /* a state that already holds entries (a reload's new generation) keeps its own */
    assert_int_equal(bm_replay_import(b->rp, bm_str_data(&ex), bm_str_len(&ex), saved + 500), 0);
    assert_int_equal(bm_replay_count(b->rp, BM_REPLAY_PREPARATION), 1);

    /* what is not an export restores nothing */
    const char *bad[] = {"[]", "{\"preparations\":{}}", "not json", "{\"preparations\":[1,{}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = bm_replay_import(c->rp, bad[i], strlen(bad[i]), saved);
        assert_true(n == BM_EINVAL || n == 0);
        assert_int_equal(bm_replay_count(c->rp, BM_REPLAY_PREPARATION), 0);
    }
    bm_str_dispose(&ex);
    fx_free(a);
    fx_free(b);
    fx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preparation_latest_per_validator),
        cmocka_unit_test(test_shared_entries_round_trip_newer_wins),
        cmocka_unit_test(test_registration_newest_timestamp_wins),
        cmocka_unit_test(test_expiry_follows_each_kind),
        cmocka_unit_test(test_caps_drop_the_least_recently_submitted),
        cmocka_unit_test(test_one_write_cannot_fill_the_memory),
        cmocka_unit_test(test_eviction_order_against_a_model),
        cmocka_unit_test(test_malformed_input),
        cmocka_unit_test(test_index_against_a_model),
        cmocka_unit_test(test_adopt_copies_every_entry_as_it_is),
        cmocka_unit_test(test_replay_batches_every_kind_in_chunks),
        cmocka_unit_test(test_triggers_and_debounce),
        cmocka_unit_test(test_reconnects_replay_at_most_once_per_interval),
        cmocka_unit_test(test_trigger_while_running_runs_again),
        cmocka_unit_test(test_unreachable_node_fails_the_replay),
        cmocka_unit_test(test_export_import_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
