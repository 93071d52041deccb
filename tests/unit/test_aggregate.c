/* SPDX-License-Identifier: MIT */
/*
 * test_aggregate: the aggregation read policy. Bit counting is tested on synthetic bodies
 * (JSON Bitlists and Bitvectors, SSZ phase0 and Electra Attestations, SSZ sync
 * contributions); the race rules end to end through the front server against scripted
 * fake nodes (fake_node.h): most bits wins, zero-bit and unreadable answers are
 * ignored, a full answer ends the wait early, the grace is counted from the first usable
 * answer, the deadline caps the grace, a 404 never beats a 2xx, identical requests share
 * one race, and the answer keeps the winner's headers. Time is a manual clock the test
 * advances (the nodes' delays too), so every answer time is asserted to the millisecond.
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
#include "base/log.h"
#include "fake_chain.h"
#include "fake_node.h"

#include "duties/aggregate.h"

#define AGG_T                                                                                      \
    "/eth/v2/validator/"                                                                           \
    "aggregate_attestation?attestation_data_root=0x%064x&slot=%d&committee_index=0"

/* A JSON v2 aggregate whose aggregation_bits is `bits` (hex with 0x). */
static char *agg_json(const char *bits)
{
    static char buf[FAKE_MAX_NODES * 4][512];
    static int next;
    char *b = buf[next++ % (FAKE_MAX_NODES * 4)];
    snprintf(b, 512,
             "{\"version\":\"electra\",\"data\":{\"aggregation_bits\":\"%s\",\"data\":{\"slot\":"
             "\"1\"},\"signature\":\"0x00\",\"committee_bits\":\"0x0100000000000000\"}}",
             bits);
    return b;
}

static fake_step_t agg(uint32_t ms, const char *bits)
{
    fake_step_t s = FAKE_OK(ms, agg_json(bits));
    s.hdrs[0][0] = "Eth-Consensus-Version";
    s.hdrs[0][1] = "electra";
    return s;
}

static bm_aggregate_t *make(fake_mux_t *f, uint32_t floor_ms, uint32_t max_ms, uint32_t grace_ms)
{
    bm_aggregate_opts_t o;
    bm_aggregate_opts_default(&o);
    for (int k = 0; k < BM_AGGREGATE_KINDS; k++) {
        o.hold_floor_ms[k] = floor_ms;
        o.max_hold_ms[k] = max_ms;
    }
    o.grace_ms = grace_ms;
    bm_aggregate_t *a = bm_aggregate_new(f->clock, f->eng, f->pool, &f->chain, &o);
    assert_non_null(a);
    f->module = a;
    f->module_free = (void (*)(void *))bm_aggregate_free;
    assert_int_equal(bm_aggregate_register(a, f->router), 0);
    return a;
}

/* The target of an aggregate for a past slot (its due time is over: deadline now + floor). */
static const char *target(int root)
{
    static char t[256];
    snprintf(t, sizeof t, AGG_T, root, 30);
    return t;
}

/* ---- bit counting --------------------------------------------------------------------------- */

static void test_count_json(void **state)
{
    (void)state;
    size_t set = 99, total = 99;
    const char *b = agg_json("0x0f01");
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, "application/json", NULL, b,
                                             strlen(b), &set, &total),
                     0);
    assert_int_equal(set, 4); /* the delimiter is not a participant */
    assert_int_equal(total, 8);
    b = agg_json("0xff1f");
    assert_int_equal(
        bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, b, strlen(b), &set, &total),
        0);
    assert_int_equal(set, 12);
    assert_int_equal(total, 12); /* full */
    b = agg_json("0x01");
    assert_int_equal(
        bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, b, strlen(b), &set, &total),
        0);
    assert_int_equal(set, 0);
    assert_int_equal(total, 0);
    /* a Bitlist without delimiter, bad hex, no field, not JSON */
    b = agg_json("0x0f00");
    assert_int_equal(
        bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, b, strlen(b), &set, &total),
        BM_EINVAL);
    b = agg_json("0xzz");
    assert_int_equal(
        bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, b, strlen(b), &set, &total),
        BM_EINVAL);
    const char *nobits = "{\"data\":{}}";
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, nobits,
                                             strlen(nobits), &set, &total),
                     BM_EINVAL);
    assert_int_equal(
        bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, NULL, NULL, "{", 1, &set, &total),
        BM_EINVAL);

    /* sync contributions: a Bitvector[128], every bit counts */
    const char *sc = "{\"data\":{\"slot\":\"1\",\"aggregation_bits\":"
                     "\"0xffffffffffffffffffffffffffffff01\"}}";
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_CONTRIBUTION, "application/json", NULL,
                                             sc, strlen(sc), &set, &total),
                     0);
    assert_int_equal(set, 121);
    assert_int_equal(total, 128);
    const char *full = "{\"data\":{\"aggregation_bits\":\"0xffffffffffffffffffffffffffffffff\"}}";
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_CONTRIBUTION, NULL, NULL, full,
                                             strlen(full), &set, &total),
                     0);
    assert_int_equal(set, 128);
    assert_int_equal(total, 128);
}

/* An SSZ Attestation: offset, 128 bytes of data, 96 of signature, [committee_bits], bits. */
static size_t ssz_att(uint8_t *out, bool electra, const uint8_t *bits, size_t nbits)
{
    size_t fixed = electra ? 236 : 228;
    memset(out, 0, fixed);
    out[0] = (uint8_t)fixed;
    out[1] = (uint8_t)(fixed >> 8);
    out[4] = 30; /* data.slot */
    if (electra)
        out[228] = 1; /* committee 0 */
    memcpy(out + fixed, bits, nbits);
    return fixed + nbits;
}

static void test_count_ssz(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t set = 0, total = 0;
    const uint8_t bits[] = {0xff, 0x07, 0x08}; /* 11 set + delimiter at bit 19 */
    size_t n = ssz_att(buf, false, bits, sizeof bits);
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, "application/octet-stream",
                                             "deneb", buf, n, &set, &total),
                     0);
    assert_int_equal(set, 11);
    assert_int_equal(total, 19);
    /* the same bytes read as Electra are inconsistent (offset 228 is not 236) */
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, "application/octet-stream",
                                             "electra", buf, n, &set, &total),
                     BM_EINVAL);
    n = ssz_att(buf, true, bits, sizeof bits);
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION,
                                             "Application/Octet-Stream; x=y", "electra", buf, n,
                                             &set, &total),
                     0);
    assert_int_equal(set, 11);
    assert_int_equal(total, 19);
    /* no fork: SSZ attestations cannot be read */
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, "application/octet-stream",
                                             NULL, buf, n, &set, &total),
                     BM_EINVAL);
    /* truncated */
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_ATTESTATION, "application/octet-stream",
                                             "electra", buf, 200, &set, &total),
                     BM_EINVAL);
    /* SyncCommitteeContribution: 160 bytes, bits at 48..64 */
    uint8_t sc[160] = {0};
    sc[48] = 0xff;
    sc[63] = 0x80;
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_CONTRIBUTION, "application/octet-stream",
                                             NULL, sc, sizeof sc, &set, &total),
                     0);
    assert_int_equal(set, 9);
    assert_int_equal(total, 128);
    assert_int_equal(bm_aggregate_count_bits(BM_AGGREGATE_CONTRIBUTION, "application/octet-stream",
                                             NULL, sc, 159, &set, &total),
                     BM_EINVAL);
}

/* ---- the race ------------------------------------------------------------------------------- */

/* A GET through the front, time moved `ms` forward, and its answer (asserted to come). */
static fake_call_t *get_after(fake_mux_t *f, const char *t, const char *accept, uint64_t ms)
{
    fake_call_t *c = fake_mux_send(f, "GET", t, NULL, accept);
    fake_mux_advance(f, ms);
    fake_mux_wait(f, c);
    return c;
}

static void test_most_bits_wins(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 400, 1000, 100);
    fake_node_t *n0 = fake_node_add1(&f->nodes, agg(5, "0x0301"));  /* 2 bits, first */
    fake_node_t *n1 = fake_node_add1(&f->nodes, agg(30, "0x3f01")); /* 6 bits */
    fake_node_t *n2 = fake_node_add1(&f->nodes, agg(50, "0x1f01")); /* 5 bits */
    fake_call_t *c = get_after(f, target(1), NULL, 50);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0x3f01"));
    assert_string_equal(fake_call_header(c, "eth-consensus-version"),
                        "electra"); /* the winner's headers */
    assert_int_equal(n0->requests + n1->requests + n2->requests, 3);
    assert_int_equal(fake_call_ms(c), 50); /* everybody answered: no need to wait */
    assert_int_equal(bm_aggregate_stats(a)->partial, 1);
    assert_int_equal(bm_aggregate_stats(a)->requests[BM_AGGREGATE_ATTESTATION], 1);
}

static void test_zero_bits_and_unreadable_ignored(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 400, 1000, 100);
    fake_node_add1(&f->nodes, agg(5, "0x01")); /* a 2xx with no participant */
    fake_node_add1(&f->nodes, FAKE_OK(5, "{\"data\":\"nonsense\"}")); /* unreadable */
    fake_node_add1(&f->nodes, agg(60, "0x0201"));                     /* one bit, last */
    fake_call_t *c = get_after(f, target(2), NULL, 60);
    assert_int_equal(fake_call_ms(c), 60); /* every node answered */
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0x0201"));
    assert_int_equal(bm_aggregate_stats(a)->ignored, 2);
}

static void test_full_answer_ends_the_grace(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 2000, 3000, 1500);
    fake_node_add1(&f->nodes, agg(5, "0x0301"));
    fake_node_add1(&f->nodes, agg(40, "0xff01")); /* all 8 of 8 */
    fake_node_t *slow = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_call_t *c = get_after(f, target(3), NULL, 40);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0xff01"));
    assert_int_equal(fake_call_ms(c), 40); /* not the 1.5 s grace, nor the deadline */
    assert_int_equal(bm_aggregate_stats(a)->full, 1);
    RUN_UNTIL(&f->loop, slow->aborted == 1, FAKE_BOUND_MS); /* the loser was cancelled */
    assert_int_equal(slow->aborted, 1);
}

static void test_grace_counts_from_first_usable(void **state)
{
    fake_mux_t *f = *state;
    make(f, 2000, 3000, 100);
    fake_node_add1(&f->nodes, agg(5, "0x0301"));
    fake_node_add1(&f->nodes, agg(600, "0x7f01")); /* better, but far past the grace */
    fake_call_t *c = get_after(f, target(4), NULL, 105);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0x0301"));
    assert_int_equal(fake_call_ms(c), 105); /* the first usable answer (5) + the grace */
}

static void test_deadline_caps_the_grace(void **state)
{
    fake_mux_t *f = *state;
    make(f, 200, 1000, 1500); /* deadline now + 200 (the slot's due time is over) */
    fake_node_add1(&f->nodes, agg(10, "0x0301"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_call_t *c = get_after(f, target(5), NULL, 200);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0x0301"));
    assert_int_equal(fake_call_ms(c), 200);
}

static void test_deadline_from_due_time(void **state)
{
    fake_mux_t *f = *state;
    /* 1 s slots: slot 40 is half gone, slot 41's aggregate is due 667 ms into it, i.e.
     * about 1167 ms from now, past maxHold: the deadline is now + 600 */
    fake_chain_now(&f->chain, 1000, 8, 40, BM_FORK_FULU);
    f->chain.clock.genesis_ms = bm_clock_wall_now(f->clock) - 40 * 1000 - 500;
    make(f, 100, 600, 5000);
    fake_node_add1(&f->nodes, agg(10, "0x0301"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    char t[256];
    snprintf(t, sizeof t, AGG_T, 6, 41);
    fake_call_t *c = get_after(f, t, NULL, 600);
    assert_int_equal(c->status, 200);
    assert_int_equal(fake_call_ms(c), 600);
}

static void test_404_never_beats_a_2xx(void **state)
{
    fake_mux_t *f = *state;
    make(f, 400, 1000, 100);
    fake_node_add1(&f->nodes, FAKE_STATUS(404, 5, "{\"code\":404,\"message\":\"No aggregate\"}"));
    fake_node_add1(&f->nodes, agg(150, "0x0101"));
    fake_call_t *c = get_after(f, target(7), NULL, 150);
    assert_int_equal(fake_call_ms(c), 150);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0x0101"));
}

static void test_only_errors_relay_the_most_specific(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 400, 1000, 100);
    fake_node_t *n0 =
        fake_node_add1(&f->nodes, FAKE_STATUS(503, 5, "{\"code\":503,\"message\":\"optimistic\"}"));
    fake_node_add1(&f->nodes, FAKE_STATUS(404, 10, "{\"code\":404,\"message\":\"No aggregate\"}"));
    fake_node_add1(&f->nodes, agg(10, "0x01")); /* 2xx with nothing in it ranks below a 404 */
    /* the 503 node is asked again until the end (the slot's aggregate is due: now +
     * maxHold = 1000), since it may recover; the last attempt starts at 950 and fails at
     * 955, after which nothing more can come: the most specific answer, the 404 */
    fake_call_t *c = fake_mux_send(f, "GET", target(8), NULL, NULL);
    fake_mux_done_1ms_after(f, c, 954);
    assert_int_equal(c->status, 404);
    assert_non_null(strstr(c->body, "No aggregate"));
    assert_int_equal(fake_call_ms(c), 955);
    assert_int_equal(n0->requests, 20); /* at 0, 50, ..., 950 */
    assert_int_equal(bm_aggregate_stats(a)->errors, 1);
    /* only answers a later attempt would repeat (4xx, a 2xx with no bit): at once */
    fake_node_script(n0, &FAKE_STATUS(404, 5, "{\"code\":404,\"message\":\"No aggregate\"}"), 1);
    c = get_after(f, target(8), NULL, 10);
    assert_int_equal(c->status, 404);
    assert_int_equal(fake_call_ms(c), 10); /* nothing more could come */
}

static void test_hung_nodes_answer_by_the_end(void **state)
{
    fake_mux_t *f = *state;
    make(f, 200, 300, 100); /* deadline now + 200, end now + maxHold (300): due is past */
    fake_node_add1(&f->nodes, FAKE_STATUS(404, 5, "{\"code\":404,\"message\":\"No aggregate\"}"));
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_call_t *c = fake_mux_send(f, "GET", target(9), NULL, NULL);
    fake_mux_done_1ms_after(f, c, 299);
    assert_int_equal(c->status, 404);
    assert_int_equal(fake_call_ms(c), 300);
}

/* Nothing any node can serve (all hung; hung + 5xx; hung + down): a 503 naming each
 * node's failure at the end, max(now + maxHold, the aggregate's due time). */
static void test_nothing_usable_answers_by_the_end(void **state)
{
    fake_mux_t *f = *state;
    make(f, 200, 300, 100);
    fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *b = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_node_t *c3 = fake_node_add1(&f->nodes, FAKE_HANG);
    for (int kase = 0; kase < 3; kase++) {
        fake_fail_case(kase, b, c3); /* all hung; hung + 5xx; hung + down */
        fake_call_t *c = fake_mux_send(f, "GET", target(20 + kase), NULL, NULL);
        fake_mux_done_1ms_after(f, c, 299);
        assert_int_equal(fake_call_ms(c), 300);
        assert_int_equal(c->status, 503);
        assert_string_equal(c->body, fake_fail_case_answer(kase));
    }
}

static void test_identical_requests_share_one_race(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 400, 1000, 100);
    fake_node_t *n0 = fake_node_add1(&f->nodes, agg(80, "0x0701"));
    fake_node_t *n1 = fake_node_add1(&f->nodes, agg(90, "0x0301"));
    fake_call_t *c1 = fake_mux_send(f, "GET", target(10), NULL, NULL);
    fake_call_t *c2 = fake_mux_send(f, "GET", target(10), NULL, NULL);
    fake_call_t *c3 =
        fake_mux_send(f, "GET", target(10), NULL, "application/octet-stream"); /* another key */
    fake_mux_advance(f, 90); /* every node answered */
    fake_mux_wait(f, c1);
    fake_mux_wait(f, c2);
    fake_mux_wait(f, c3);
    assert_int_equal(fake_call_ms(c1), 90);
    assert_int_equal(c1->status, 200);
    assert_int_equal(c2->status, 200);
    assert_string_equal(c1->body, c2->body);
    assert_non_null(strstr(c2->body, "0x0701"));
    assert_int_equal(n0->requests, 2); /* one race for c1 + c2, one for c3 */
    assert_int_equal(n1->requests, 2);
    assert_int_equal(bm_aggregate_stats(a)->races, 2);
    assert_int_equal(bm_aggregate_stats(a)->requests[BM_AGGREGATE_ATTESTATION], 3);
}

static void test_ssz_answers_by_their_own_content_type(void **state)
{
    fake_mux_t *f = *state;
    make(f, 400, 1000, 100);
    static uint8_t small[300], big[300];
    const uint8_t b1[] = {0x03, 0x01}, b2[] = {0x1f, 0x01};
    size_t n1 = ssz_att(small, true, b1, sizeof b1);
    size_t n2 = ssz_att(big, true, b2, sizeof b2);
    fake_step_t s1 = {.status = 200,
                      .delay_ms = 5,
                      .body = small,
                      .len = n1,
                      .ctype = "application/octet-stream",
                      .hdrs = {{"Eth-Consensus-Version", "electra"}}};
    /* no version header: the fork of the requested slot (fulu from genesis) is used */
    fake_step_t s2 = {
        .status = 200, .delay_ms = 20, .body = big, .len = n2, .ctype = "application/octet-stream"};
    fake_node_add1(&f->nodes, s1);
    fake_node_add1(&f->nodes, s2);
    fake_node_add1(&f->nodes,
                   agg(30, "0x0701")); /* JSON from a node that does not do SSZ: 3 bits */
    fake_call_t *c = get_after(f, target(11), "application/octet-stream", 30);
    assert_int_equal(c->status, 200);
    assert_string_equal(fake_call_header(c, "content-type"), "application/octet-stream");
    assert_int_equal(c->body_len, n2);
    assert_memory_equal(c->body, big, n2);
}

static void test_contribution(void **state)
{
    fake_mux_t *f = *state;
    bm_aggregate_t *a = make(f, 400, 1000, 100);
    fake_node_add1(
        &f->nodes,
        FAKE_OK(5, "{\"data\":{\"aggregation_bits\":\"0x0f000000000000000000000000000000\"}}"));
    fake_node_add1(
        &f->nodes,
        FAKE_OK(20, "{\"data\":{\"aggregation_bits\":\"0xff0f0000000000000000000000000000\"}}"));
    fake_node_add1(
        &f->nodes,
        FAKE_OK(20, "{\"data\":{\"aggregation_bits\":\"0x00000000000000000000000000000000\"}}"));
    fake_call_t *c = get_after(f,
                               "/eth/v1/validator/sync_committee_contribution?slot=30&"
                               "subcommittee_index=1&beacon_block_root=0x01",
                               NULL, 20);
    assert_int_equal(c->status, 200);
    assert_non_null(strstr(c->body, "0xff0f"));
    assert_int_equal(bm_aggregate_stats(a)->requests[BM_AGGREGATE_CONTRIBUTION], 1);
    assert_int_equal(bm_aggregate_stats(a)->ignored, 1);
}

static void test_no_node(void **state)
{
    fake_mux_t *f = *state;
    make(f, 400, 1000, 100);
    fake_call_t *c = fake_mux_send_wait(f, "GET", target(12), NULL, NULL);
    assert_int_equal(c->status, 503);
    assert_non_null(strstr(c->body, "\"code\":503"));
}

static void test_client_leaving_cancels_the_race(void **state)
{
    fake_mux_t *f = *state;
    make(f, 400, 1000, 100);
    fake_node_t *n = fake_node_add1(&f->nodes, FAKE_HANG);
    fake_call_t *c = fake_mux_send(f, "GET", target(13), NULL, NULL);
    fake_mux_settle(f);
    assert_int_equal(n->requests, 1);
    bm_upstream_cancel(c->x); /* the client hangs up */
    c->x = NULL;
    RUN_UNTIL(&f->loop, n->aborted == 1, FAKE_BOUND_MS);
    assert_int_equal(n->aborted, 1);
    RUN_UNTIL(&f->loop, bm_race_engine_active(f->eng) == 0, FAKE_BOUND_MS);
    assert_int_equal(bm_race_engine_active(f->eng), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fake_mux_manual_setup, fake_mux_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_json),
        cmocka_unit_test(test_count_ssz),
        T(test_most_bits_wins),
        T(test_zero_bits_and_unreadable_ignored),
        T(test_full_answer_ends_the_grace),
        T(test_grace_counts_from_first_usable),
        T(test_deadline_caps_the_grace),
        T(test_deadline_from_due_time),
        T(test_404_never_beats_a_2xx),
        T(test_only_errors_relay_the_most_specific),
        T(test_hung_nodes_answer_by_the_end),
        T(test_nothing_usable_answers_by_the_end),
        T(test_identical_requests_share_one_race),
        T(test_ssz_answers_by_their_own_content_type),
        T(test_contribution),
        T(test_no_node),
        T(test_client_leaving_cancels_the_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
