/* SPDX-License-Identifier: MIT */
/*
 * test_journal: the duty journal's verdicts and counts on hand-made chains. The chain of
 * each test is written out as get_block_root_at_slot would give it: an empty slot carries
 * its predecessor's root, a late block re-orged by the next proposer is not on the chain
 * it finally settles on, a forked node's root is on no canonical slot. Every count is
 * checked against what the records say by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "observe/journal.h"

#define id (id) /* a root is 32 bytes of its id */

static void root(uint8_t out[32], unsigned id)
{
    memset(out, (int)id, 32);
}

/* The canon of a slot whose block root is `at` and whose predecessor's is `prev`. */
static bm_canon_t canon(unsigned at, unsigned prev)
{
    bm_canon_t c = {.known = true, .prev_known = true};
    root(c.root, at);
    root(c.prev, prev);
    return c;
}

static bm_served_answer_t ans(int status, unsigned id)
{
    bm_served_answer_t a = {.status = status, .index = -1, .cls = BM_ANSWER_FRESH};
    if (id) {
        a.has_root = true;
        root(a.root, id);
    }
    return a;
}

/* A record: `duty` at `slot` served root `served` (0: an error) to `requests` clients; the
 * first node (index 0) alone would have answered `first` (0: nothing in time). */
static bm_served_t rec(bm_duty_read_t duty, uint64_t slot, unsigned served, unsigned first,
                       uint32_t requests)
{
    bm_served_t r = {.duty = duty, .slot = slot, .requests = requests, .node = 1, .n_nodes = 3};
    r.served = served ? ans(200, served) : ans(503, 0);
    r.first_node = 0;
    r.first = first ? ans(200, first) : ans(0, 0);
    if (!first)
        r.first.cls = BM_ANSWER_HUNG;
    r.classes[0] = (uint8_t)r.first.cls;
    r.classes[1] = BM_ANSWER_FRESH;
    r.classes[2] = BM_ANSWER_HUNG;
    return r;
}

static bm_verdict_t judge(bm_duty_read_t d, bm_served_answer_t a, bm_canon_t c)
{
    return bm_journal_judge(d, &a, &c);
}

/* Slots 10 (A=1), 11 (B=2), 12 empty, 13 (D=4). */
static void test_empty_slot(void **state)
{
    (void)state;
    bm_canon_t s12 = canon(2, 2); /* empty: the root at 12 is B's, as at 11 */
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(200, 2), s12), BM_VERDICT_CORRECT);
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(200, 1), s12), BM_VERDICT_WRONG);
    assert_int_equal(judge(BM_DUTY_READ_HEAD_ROOT, ans(200, 2), s12), BM_VERDICT_CORRECT);
    /* payload attestation: "no block seen" is right for an empty slot, B is not its block */
    assert_int_equal(judge(BM_DUTY_READ_PAYLOAD_ATTESTATION, ans(204, 0), s12), BM_VERDICT_CORRECT);
    assert_int_equal(judge(BM_DUTY_READ_PAYLOAD_ATTESTATION, ans(200, 2), s12), BM_VERDICT_WRONG);
    bm_canon_t s13 = canon(4, 2);
    assert_int_equal(judge(BM_DUTY_READ_PAYLOAD_ATTESTATION, ans(200, 4), s13), BM_VERDICT_CORRECT);
    assert_int_equal(judge(BM_DUTY_READ_PAYLOAD_ATTESTATION, ans(204, 0), s13), BM_VERDICT_WRONG);
    /* the block of 13 is built on the root at 12: B, across the empty slot */
    assert_int_equal(judge(BM_DUTY_READ_BLOCK, ans(200, 2), s13), BM_VERDICT_CORRECT);
    assert_int_equal(judge(BM_DUTY_READ_BLOCK, ans(200, 1), s13), BM_VERDICT_WRONG);
}

/* Errors are missed votes; an unknown chain judges nothing. */
static void test_missed_and_unknown(void **state)
{
    (void)state;
    bm_canon_t c = canon(2, 1);
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(503, 0), c), BM_VERDICT_MISSED);
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(0, 0), c), BM_VERDICT_MISSED);
    bm_served_answer_t noroot = ans(200, 0); /* a 2xx whose body names no root */
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, noroot, c), BM_VERDICT_MISSED);
    assert_int_equal(judge(BM_DUTY_READ_BLOCK, ans(204, 0), c), BM_VERDICT_MISSED);
    bm_canon_t unknown = {0};
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(200, 2), unknown),
                     BM_VERDICT_UNKNOWN);
    bm_canon_t half = canon(2, 1);
    half.prev_known = false;
    assert_int_equal(judge(BM_DUTY_READ_ATTESTATION_DATA, ans(200, 2), half), BM_VERDICT_CORRECT);
    assert_int_equal(judge(BM_DUTY_READ_BLOCK, ans(200, 1), half), BM_VERDICT_UNKNOWN);
    assert_int_equal(judge(BM_DUTY_READ_PAYLOAD_ATTESTATION, ans(204, 0), half),
                     BM_VERDICT_UNKNOWN);
}

/*
 * A late block re-orged by the next proposer: D=4 at 13, the late L=5 at 14 arrives after
 * the attestation deadline, the proposer of 15 builds on D (E=6). Two slots later the
 * cluster may still hold L (the provisional verdict follows what it holds); at finality the
 * root at 14 is D. The validator voted D at 14 (what beaconmux served, on time); the first
 * node, which only had L by the time it answered, voted L.
 */
static void test_late_block_reorged(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(64);
    assert_non_null(j);
    bm_journal_advance(j, 14);
    bm_served_t r = rec(BM_DUTY_READ_ATTESTATION_DATA, 14, 4, 5, 1);
    assert_int_equal(bm_journal_add(j, &r), 0);
    bm_served_t b = rec(BM_DUTY_READ_BLOCK, 15, 4, 5, 1); /* the block of 15 on D */
    assert_int_equal(bm_journal_add(j, &b), 0);
    bm_journal_advance(j, 16);
    /* two slots later the cluster still follows L: provisionally L is the root at 14 */
    bm_canon_t prov14 = canon(5, 4);
    bm_journal_settle(j, 14, &prov14, false);
    const bm_journal_stats_t *st = bm_journal_stats(j);
    assert_int_equal(st->provisional.verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_WRONG], 1);
    assert_int_equal(st->provisional.lost, 1);
    /* then E on D re-orgs L out; at finality: 14 is empty on the chain, its root D */
    bm_canon_t fin14 = canon(4, 4);
    bm_canon_t fin15 = canon(6, 4);
    bm_journal_settle(j, 14, &fin14, true);
    bm_journal_settle(j, 15, &fin15, true);
    assert_int_equal(st->final.verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_CORRECT], 1);
    assert_int_equal(st->final.verdicts[BM_DUTY_READ_BLOCK][BM_VERDICT_CORRECT], 1);
    assert_int_equal(st->final.saved, 2);
    assert_int_equal(st->final.lost, 0);
    /* the provisional count of the block came at its final settle: once */
    assert_int_equal(st->provisional.verdicts[BM_DUTY_READ_BLOCK][BM_VERDICT_CORRECT], 1);
    bm_journal_entry_t e;
    assert_true(bm_journal_entry(j, 14, 0, &e));
    assert_int_equal(e.verdict, BM_VERDICT_CORRECT);
    assert_int_equal(e.first_verdict, BM_VERDICT_WRONG);
    assert_true(e.final);
    /* a final slot is never settled again */
    bm_journal_settle(j, 14, &prov14, false);
    assert_true(bm_journal_entry(j, 14, 0, &e));
    assert_int_equal(e.verdict, BM_VERDICT_CORRECT);
    assert_int_equal(st->final_slot, 15);
    bm_journal_free(j);
}

/* A fork: the node beaconmux served from was on a minority fork (F=9) at 20, the first
 * node on the canonical chain (C=8): lost. The first node hung at 21, beaconmux served the
 * canonical root: saved. Missed both ways: neither. */
static void test_fork_saved_and_lost(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(64);
    bm_journal_advance(j, 22);
    bm_served_t r20 = rec(BM_DUTY_READ_ATTESTATION_DATA, 20, 9, 8, 3);
    bm_served_t r21 = rec(BM_DUTY_READ_ATTESTATION_DATA, 21, 10, 0, 2);
    bm_served_t r22 = rec(BM_DUTY_READ_ATTESTATION_DATA, 22, 0, 0, 1);
    assert_int_equal(bm_journal_add(j, &r20), 0);
    assert_int_equal(bm_journal_add(j, &r21), 0);
    assert_int_equal(bm_journal_add(j, &r22), 0);
    bm_canon_t c20 = canon(8, 7), c21 = canon(10, 8), c22 = canon(11, 10);
    bm_journal_settle(j, 20, &c20, false);
    bm_journal_settle(j, 21, &c21, false);
    bm_journal_settle(j, 22, &c22, false);
    const bm_journal_counts_t *p = &bm_journal_stats(j)->provisional;
    assert_int_equal(p->verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_WRONG], 3);
    assert_int_equal(p->verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_CORRECT], 2);
    assert_int_equal(p->verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_MISSED], 1);
    assert_int_equal(p->lost, 3);
    assert_int_equal(p->saved, 2);
    /* settled again (the cluster moved), provisional counts stay once per record */
    bm_journal_settle(j, 20, &c20, false);
    assert_int_equal(p->verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_WRONG], 3);
    assert_int_equal(bm_journal_stats(j)->final.saved, 0);
    bm_journal_free(j);
}

/* Identical records of a slot merge, their requests add up, also after the slot was
 * judged; a record without a witness has no counterfactual. */
static void test_merge_and_late_records(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(64);
    bm_journal_advance(j, 30);
    bm_served_t r = rec(BM_DUTY_READ_ATTESTATION_DATA, 30, 3, 2, 2);
    bm_journal_add(j, &r);
    bm_journal_add(j, &r);
    bm_journal_slot_t s;
    assert_true(bm_journal_slot(j, 30, &s));
    assert_int_equal(s.n_entries, 1);
    bm_canon_t c = canon(3, 2);
    bm_journal_settle(j, 30, &c, false);
    const bm_journal_stats_t *st = bm_journal_stats(j);
    assert_int_equal(st->provisional.saved, 4);
    bm_journal_add(j, &r); /* after the settle: judged and counted at once */
    assert_int_equal(st->provisional.saved, 6);
    assert_int_equal(st->merged, 2);
    bm_served_t other = rec(BM_DUTY_READ_ATTESTATION_DATA, 30, 3, 3, 1);
    other.first_node = -1; /* no witness */
    bm_journal_add(j, &other);
    assert_true(bm_journal_slot(j, 30, &s));
    assert_int_equal(s.n_entries, 2);
    bm_journal_entry_t e;
    assert_true(bm_journal_entry(j, 30, 0, &e));
    assert_int_equal(e.rec.requests, 6);
    assert_int_equal(e.rec.classes[2], BM_ANSWER_HUNG);
    assert_true(bm_journal_entry(j, 30, 1, &e));
    assert_int_equal(e.first_verdict, BM_VERDICT_UNKNOWN);
    assert_int_equal(st->provisional.verdicts[BM_DUTY_READ_ATTESTATION_DATA][BM_VERDICT_CORRECT],
                     7);
    assert_false(bm_journal_entry(j, 30, 2, &e));
    bm_journal_free(j);
}

/* The ring: slots outside the window are refused; a slot record recycled before its final
 * settle counts its records as unknown; the entry ring overwrites the oldest entry. */
static void test_ring_bounds(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(4);
    bm_journal_advance(j, 10);
    assert_int_equal(bm_journal_oldest(j), 7);
    bm_served_t r = rec(BM_DUTY_READ_HEAD_ROOT, 6, 1, 1, 1);
    assert_int_equal(bm_journal_add(j, &r), BM_EINVAL); /* too old */
    r.slot = 10 + BM_JOURNAL_FUTURE_SLOTS + 1;
    assert_int_equal(bm_journal_add(j, &r), BM_EINVAL); /* too far ahead */
    r.slot = 7;
    assert_int_equal(bm_journal_add(j, &r), 0);
    const bm_journal_stats_t *st = bm_journal_stats(j);
    assert_int_equal(st->refused, 2);
    bm_journal_advance(j, 11); /* slot 11 takes 7's record */
    r.slot = 11;
    assert_int_equal(bm_journal_add(j, &r), 0);
    assert_int_equal(st->evicted_unjudged, 1);
    assert_int_equal(st->final.verdicts[BM_DUTY_READ_HEAD_ROOT][BM_VERDICT_UNKNOWN], 1);
    bm_journal_slot_t s;
    assert_false(bm_journal_slot(j, 7, &s));
    /* 12 entries fit (4 slots x 3): the 13th distinct record overwrites the first */
    for (unsigned i = 0; i < 12; i++) {
        bm_served_t d = rec(BM_DUTY_READ_ATTESTATION_DATA, 11, 20 + i, 1, 1);
        assert_int_equal(bm_journal_add(j, &d), 0);
    }
    assert_true(bm_journal_slot(j, 11, &s));
    assert_int_equal(s.n_entries, 12);
    bm_journal_entry_t e;
    assert_true(bm_journal_entry(j, 11, 0, &e));
    assert_int_equal(e.rec.duty, BM_DUTY_READ_ATTESTATION_DATA); /* the head root one is gone */
    assert_int_equal(st->evicted_unjudged, 2);
    bm_journal_free(j);
}

static void test_json(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(16);
    bm_journal_advance(j, 5);
    bm_served_t r = rec(BM_DUTY_READ_ATTESTATION_DATA, 5, 3, 2, 2);
    r.served.index = 1;
    bm_journal_add(j, &r);
    bm_canon_t c = canon(3, 2);
    bm_journal_settle(j, 5, &c, false);
    bm_str_t o = BM_STR_INIT;
    const char *ids[] = {"first", "second"};
    assert_int_equal(bm_journal_json(j, 0, 100, ids, 2, &o), 1);
    struct json_object *doc = json_tokener_parse(bm_str_data(&o));
    assert_non_null(doc);
    struct json_object *slots, *s0, *ents, *e0, *v;
    assert_true(json_object_object_get_ex(doc, "slots", &slots));
    assert_int_equal(json_object_array_length(slots), 1);
    s0 = json_object_array_get_idx(slots, 0);
    assert_true(json_object_object_get_ex(s0, "slot", &v));
    assert_string_equal(json_object_get_string(v), "5");
    assert_true(json_object_object_get_ex(s0, "stage", &v));
    assert_string_equal(json_object_get_string(v), "provisional");
    assert_true(json_object_object_get_ex(s0, "own_block", &v));
    assert_true(json_object_get_boolean(v));
    assert_true(json_object_object_get_ex(s0, "entries", &ents));
    e0 = json_object_array_get_idx(ents, 0);
    assert_true(json_object_object_get_ex(e0, "saved", &v));
    assert_true(json_object_get_boolean(v));
    struct json_object *served, *first, *nodes;
    assert_true(json_object_object_get_ex(e0, "served", &served));
    assert_true(json_object_object_get_ex(served, "node", &v));
    assert_string_equal(json_object_get_string(v), "second");
    assert_true(json_object_object_get_ex(served, "index", &v));
    assert_int_equal(json_object_get_int(v), 1);
    assert_true(json_object_object_get_ex(e0, "first", &first));
    assert_true(json_object_object_get_ex(first, "root", &v));
    assert_string_equal(json_object_get_string(v),
                        "0x0202020202020202020202020202020202020202020202020202020202020202");
    assert_true(json_object_object_get_ex(e0, "nodes", &nodes));
    assert_true(json_object_object_get_ex(nodes, "#2", &v)); /* past the ids given */
    assert_string_equal(json_object_get_string(v), "hung");
    json_object_put(doc);
    bm_str_clear(&o);
    assert_int_equal(bm_journal_json(j, 6, 4, ids, 2, &o), 0); /* an empty range */
    assert_string_equal(bm_str_data(&o), "{\"slots\":[]}");
    bm_str_dispose(&o);
    bm_journal_free(j);
}

/* State kept across restarts: what a journal exports, a new journal imports as it was
 * (entries, verdicts, stages, counts); nodes follow their ids into a new pool order; the
 * newest slots only are kept when asked; what is not an export restores nothing. */
static void test_state_round_trip(void **state)
{
    (void)state;
    bm_journal_t *j = bm_journal_new(64);
    bm_journal_advance(j, 22);
    bm_served_t r20 = rec(BM_DUTY_READ_ATTESTATION_DATA, 20, 9, 8, 3);
    bm_served_t r21 = rec(BM_DUTY_READ_ATTESTATION_DATA, 21, 10, 0, 2);
    bm_served_t b21 = rec(BM_DUTY_READ_BLOCK, 21, 8, 8, 1);
    bm_served_t r22 = rec(BM_DUTY_READ_HEAD_ROOT, 22, 11, 11, 4);
    r22.served.index = 1;
    assert_int_equal(bm_journal_add(j, &r20), 0);
    assert_int_equal(bm_journal_add(j, &r21), 0);
    assert_int_equal(bm_journal_add(j, &b21), 0);
    assert_int_equal(bm_journal_add(j, &r22), 0);
    bm_canon_t c20 = canon(8, 7), c21 = canon(10, 8);
    bm_journal_settle(j, 20, &c20, false);
    bm_journal_settle(j, 21, &c21, true);
    const char *ids[] = {"a", "b", "c"};
    bm_str_t ex = BM_STR_INIT;
    assert_int_equal(bm_journal_export(j, 0, ids, 3, &ex), 0);

    bm_journal_t *k = bm_journal_new(64);
    assert_int_equal(bm_journal_import(k, bm_str_data(&ex), strlen(bm_str_data(&ex)), ids, 3), 4);
    assert_memory_equal(bm_journal_stats(k), bm_journal_stats(j), sizeof(bm_journal_stats_t));
    bm_str_t want = BM_STR_INIT, got = BM_STR_INIT;
    bm_journal_json(j, 0, 30, ids, 3, &want);
    bm_journal_json(k, 0, 30, ids, 3, &got);
    assert_string_equal(bm_str_data(&got), bm_str_data(&want));
    assert_non_null(strstr(bm_str_data(&got), "\"stage\":\"final\""));
    /* new judgements count on top of the restored counts */
    bm_canon_t c22 = canon(11, 10);
    bm_journal_settle(k, 22, &c22, false);
    assert_int_equal(
        bm_journal_stats(k)->provisional.verdicts[BM_DUTY_READ_HEAD_ROOT][BM_VERDICT_CORRECT], 4);
    assert_int_equal(bm_journal_stats(k)->provisional.lost, bm_journal_stats(j)->provisional.lost);
    bm_journal_free(k);

    /* another pool: "b" (the served node) moved to index 0, "a" (the witness) is gone */
    const char *ids2[] = {"b", "c"};
    k = bm_journal_new(64);
    assert_int_equal(bm_journal_import(k, bm_str_data(&ex), strlen(bm_str_data(&ex)), ids2, 2), 4);
    bm_journal_entry_t e;
    assert_true(bm_journal_entry(k, 20, 0, &e));
    assert_int_equal(e.rec.node, 0);
    assert_int_equal(e.rec.first_node, -1);
    assert_int_equal(e.rec.classes[0], BM_ANSWER_FRESH); /* b's class */
    assert_int_equal(e.rec.classes[1], BM_ANSWER_HUNG);  /* c's */
    assert_int_equal(e.verdict, BM_VERDICT_WRONG);       /* judged as it was */
    bm_journal_free(k);

    /* the newest slots only */
    bm_str_t two = BM_STR_INIT;
    assert_int_equal(bm_journal_export(j, 6, ids, 3, &two), 0); /* 21..26 (22 + future) */
    k = bm_journal_new(64);
    assert_int_equal(bm_journal_import(k, bm_str_data(&two), strlen(bm_str_data(&two)), ids, 3), 3);
    assert_false(bm_journal_entry(k, 20, 0, &e));
    assert_true(bm_journal_entry(k, 21, 1, &e));
    bm_journal_free(k);

    /* not an export: nothing restored, the journal stays empty */
    const char *bad[] = {"", "[]", "{\"slots\":[]}", "{\"stats\":{},\"slots\":[]}", "nope"};
    k = bm_journal_new(64);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(bm_journal_import(k, bad[i], strlen(bad[i]), ids, 3), BM_EINVAL);
    assert_int_equal(bm_journal_stats(k)->records, 0);
    bm_journal_free(k);
    bm_str_dispose(&two);
    bm_str_dispose(&want);
    bm_str_dispose(&got);
    bm_str_dispose(&ex);
    bm_journal_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_slot),
        cmocka_unit_test(test_missed_and_unknown),
        cmocka_unit_test(test_late_block_reorged),
        cmocka_unit_test(test_fork_saved_and_lost),
        cmocka_unit_test(test_merge_and_late_records),
        cmocka_unit_test(test_ring_bounds),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_state_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
