/* SPDX-License-Identifier: MIT */
/* Unit tests of the access log's target masking (bm_access_mask_target): a secret query value
 * is never shown, the target's shape stays, and the output is cut to its buffer even when
 * masking makes it longer than the target (an empty secret value becomes "***"), the case
 * fuzz/fuzz_observe_text.c's property first judged wrongly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "observe/access.h"

static void test_secret_values_masked(void **state)
{
    (void)state;
    char out[256];
    size_t n = bm_access_mask_target("/eth/v1/x?api_key=s3cr3t&slot=5&token=", out, sizeof out);
    assert_string_equal(out, "/eth/v1/x?api_key=***&slot=5&token=***");
    assert_int_equal(n, strlen(out));
}

static void test_masking_that_lengthens_is_cut_to_the_buffer(void **state)
{
    (void)state;
    const char *in = "/x?token=&token=&token=&token=&token=&token=&token=";
    char out[64], again[64];
    assert_true(strlen(in) < sizeof out); /* the target fits; its masked form does not */
    size_t n = bm_access_mask_target(in, out, sizeof out);
    assert_int_equal(n, sizeof out - 1);
    assert_int_equal(strlen(out), n);
    assert_memory_equal(out, "/x?token=***&token=***&token=***&", 33);
    /* masking the cut form changes nothing more */
    assert_int_equal(bm_access_mask_target(out, again, sizeof again), n);
    assert_string_equal(out, again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_values_masked),
        cmocka_unit_test(test_masking_that_lengthens_is_cut_to_the_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
