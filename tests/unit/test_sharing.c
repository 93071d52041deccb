/* SPDX-License-Identifier: MIT */
/*
 * test_sharing: what a shared producer record says, written by one instance and read by
 * another: the upstream id and the block's state root (or none), and what is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "app/sharing.h"
#include "base/buf.h"
#include "base/err.h"

static void test_producer_record_round_trip(void **state)
{
    (void)state;
    uint8_t root[32], back[32];
    for (int i = 0; i < 32; i++)
        root[i] = (uint8_t)(i * 7 + 1);
    char id[128];
    bool has;
    bm_str_t v = BM_STR_INIT;
    bm_sharing_producer_format(&v, "lighthouse-1", root);
    assert_int_equal(bm_sharing_producer_parse(bm_str_data(&v), bm_str_len(&v), id, back, &has), 0);
    assert_string_equal(id, "lighthouse-1");
    assert_true(has);
    assert_memory_equal(back, root, 32);
    bm_str_dispose(&v);
    bm_sharing_producer_format(&v, "n2", NULL);
    assert_int_equal(bm_sharing_producer_parse(bm_str_data(&v), bm_str_len(&v), id, back, &has), 0);
    assert_string_equal(id, "n2");
    assert_false(has);
    bm_str_dispose(&v);
    const char *bad[] = {
        "n1",    " 0x00", "n1 0x1234",
        "n1 xx", "n1 --", "n1 0xzz00000000000000000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(bm_sharing_producer_parse(bad[i], strlen(bad[i]), id, back, &has),
                         BM_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_producer_record_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
