/* SPDX-License-Identifier: MIT */
/* Unit tests of chain: genesis/spec parsing, fork schedule, due times, network keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "cluster/chain.h"

#define ROOT "0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"
static const char genesis[] =
    "{\"data\":{\"genesis_time\":\"1606824023\",\"genesis_validators_root\":\"" ROOT
    "\",\"genesis_fork_version\":\"0x00000000\"}}";

static int parse(const char *spec, bm_chain_info_t *c, char *err)
{
    return bm_chain_parse(genesis, strlen(genesis), spec, strlen(spec), c, err, 128);
}

static void test_parse_mainnet_like(void **state)
{
    const char *spec = "{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"32\","
                       "\"ALTAIR_FORK_EPOCH\":\"74240\",\"ELECTRA_FORK_EPOCH\":\"364032\","
                       "\"FULU_FORK_EPOCH\":\"411392\","
                       "\"GLOAS_FORK_EPOCH\":\"18446744073709551615\"}}";
    bm_chain_info_t c;
    char err[128];
    assert_int_equal(parse(spec, &c, err), 0);
    assert_true(c.known);
    assert_int_equal(c.clock.genesis_ms, 1606824023000ull);
    assert_int_equal(c.clock.slot_ms, 12000);
    assert_int_equal(c.clock.slots_per_epoch, 32);
    assert_int_equal(c.genesis_root[0], 0x4b);
    assert_int_equal(c.genesis_root[31], 0x4b);
    assert_int_equal(c.fork_epoch[BM_FORK_ALTAIR], 74240);
    assert_true(c.fork_epoch[BM_FORK_BELLATRIX] == BM_FAR_FUTURE_EPOCH); /* absent key */
    assert_true(c.fork_epoch[BM_FORK_GLOAS] == BM_FAR_FUTURE_EPOCH);
    assert_int_equal(bm_chain_fork_at_epoch(&c, 0), BM_FORK_PHASE0);
    assert_int_equal(bm_chain_fork_at_epoch(&c, 74240), BM_FORK_ALTAIR);
    assert_int_equal(bm_chain_fork_at_epoch(&c, 364031), BM_FORK_ALTAIR);
    assert_int_equal(bm_chain_fork_at_epoch(&c, 411392), BM_FORK_FULU);
    assert_int_equal(bm_chain_fork_at_slot(&c, 411392ull * 32), BM_FORK_FULU);
    /* default due times: 1/3 of the slot for attestations before Gloas */
    uint64_t slot = 411392ull * 32 + 5;
    uint64_t start = bm_slot_start_ms(&c.clock, slot);
    assert_int_equal(bm_chain_due_ms(&c, slot, BM_DUE_ATTESTATION) - start, 3999);
    assert_int_equal(bm_chain_due_ms(&c, slot, BM_DUE_AGGREGATE) - start, 8000);
}

static void test_gloas_due_and_slot_duration_ms(void **state)
{
    const char *spec = "{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOT_DURATION_MS\":\"6000\","
                       "\"SLOTS_PER_EPOCH\":\"8\",\"GLOAS_FORK_EPOCH\":\"2\","
                       "\"ATTESTATION_DUE_BPS\":\"3000\",\"ATTESTATION_DUE_BPS_GLOAS\":\"2000\"}}";
    bm_chain_info_t c;
    char err[128];
    assert_int_equal(parse(spec, &c, err), 0);
    assert_int_equal(c.clock.slot_ms, 6000); /* SLOT_DURATION_MS wins over SECONDS_PER_SLOT */
    uint64_t pre = 8, post = 16;
    assert_int_equal(bm_chain_fork_at_slot(&c, pre), BM_FORK_PHASE0);
    assert_int_equal(bm_chain_fork_at_slot(&c, post), BM_FORK_GLOAS);
    assert_int_equal(bm_chain_due_ms(&c, pre, BM_DUE_ATTESTATION) - bm_slot_start_ms(&c.clock, pre),
                     1800);
    assert_int_equal(
        bm_chain_due_ms(&c, post, BM_DUE_ATTESTATION) - bm_slot_start_ms(&c.clock, post), 1200);
    /* Gloas defaults where the spec has no key: 1/2 and 3/4 */
    assert_int_equal(bm_chain_due_ms(&c, post, BM_DUE_AGGREGATE) - bm_slot_start_ms(&c.clock, post),
                     3000);
    assert_int_equal(bm_chain_due_ms(&c, post, BM_DUE_PAYLOAD_ATTESTATION) -
                         bm_slot_start_ms(&c.clock, post),
                     4500);
}

static void test_parse_errors(void **state)
{
    bm_chain_info_t c;
    char err[128];
    assert_int_equal(parse("{\"data\":{\"SLOTS_PER_EPOCH\":\"32\"}}", &c, err), BM_EINVAL);
    assert_non_null(strstr(err, "SECONDS_PER_SLOT"));
    assert_int_equal(
        parse("{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"x\"}}", &c, err),
        BM_EINVAL);
    assert_int_equal(
        parse("{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"0\"}}", &c, err),
        BM_EINVAL);
    assert_int_equal(parse("not json", &c, err), BM_EINVAL);
    const char *bad_genesis =
        "{\"data\":{\"genesis_time\":\"1\",\"genesis_validators_root\":\"0x12\"}}";
    const char *spec = "{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"32\"}}";
    assert_int_equal(
        bm_chain_parse(bad_genesis, strlen(bad_genesis), spec, strlen(spec), &c, err, 128),
        BM_EINVAL);
    assert_non_null(strstr(err, "genesis_validators_root"));
    assert_false(c.known);
}

static void test_compatible(void **state)
{
    char why[160];
    const char *a =
        "{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"32\","
        "\"ELECTRA_FORK_VERSION\":\"0x05000000\",\"GLOAS_FORK_EPOCH\":\"18446744073709551615\","
        "\"DOMAIN_BEACON_ATTESTER\":\"0x01000000\",\"MAX_BLOBS\":\"6\"}}";
    /* other client: more keys, a different non-critical value, a scheduled Gloas (rolling upgrade)
     */
    const char *b = "{\"data\":{\"SECONDS_PER_SLOT\":\"12\",\"SLOTS_PER_EPOCH\":\"32\","
                    "\"ELECTRA_FORK_VERSION\":\"0x05000000\",\"GLOAS_FORK_EPOCH\":\"500\","
                    "\"MAX_BLOBS\":\"9\",\"EXTRA\":\"1\"}}";
    assert_true(bm_chain_spec_compatible(a, strlen(a), b, strlen(b), why, sizeof why));
    assert_true(bm_chain_spec_compatible(b, strlen(b), a, strlen(a), why, sizeof why));
    const char *c = "{\"data\":{\"SECONDS_PER_SLOT\":\"6\",\"SLOTS_PER_EPOCH\":\"32\"}}";
    assert_false(bm_chain_spec_compatible(a, strlen(a), c, strlen(c), why, sizeof why));
    assert_non_null(strstr(why, "SECONDS_PER_SLOT"));
    const char *d = "{\"data\":{\"ELECTRA_FORK_VERSION\":\"0x05000001\"}}";
    assert_false(bm_chain_spec_compatible(a, strlen(a), d, strlen(d), why, sizeof why));
    assert_non_null(strstr(why, "ELECTRA_FORK_VERSION"));
    const char *e = "{\"data\":{\"GLOAS_FORK_EPOCH\":\"400\"}}";
    assert_false(bm_chain_spec_compatible(b, strlen(b), e, strlen(e), why, sizeof why));
    assert_non_null(strstr(why, "GLOAS_FORK_EPOCH"));
}

static void test_fork_names(void **state)
{
    bm_fork_t f;
    assert_int_equal(bm_fork_parse("Electra", &f), 0);
    assert_int_equal(f, BM_FORK_ELECTRA);
    assert_int_equal(bm_fork_parse("gloas", &f), 0);
    assert_int_equal(f, BM_FORK_GLOAS);
    assert_int_equal(bm_fork_parse("glo-x", &f), BM_EINVAL);
    assert_string_equal(bm_fork_name(BM_FORK_FULU), "fulu");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_mainnet_like),
        cmocka_unit_test(test_gloas_due_and_slot_duration_ms),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_compatible),
        cmocka_unit_test(test_fork_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
