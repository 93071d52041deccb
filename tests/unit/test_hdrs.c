/* SPDX-License-Identifier: MIT */
/*
 * test_hdrs: header lists as the server and the client keep them, and the one SSZ media
 * type check every policy uses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/hdrs.h"

static void test_get_is_case_insensitive(void **state)
{
    (void)state;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_int_equal(bm_hdrs_add_z(&h, "Content-Type", "application/json"), 0);
    assert_int_equal(bm_hdrs_add_z(&h, "content-type", "text/plain"), 0);
    assert_string_equal(bm_hdrs_get(&h, "CONTENT-TYPE"), "application/json"); /* the first */
    assert_null(bm_hdrs_get(&h, "Accept"));
    assert_int_equal(bm_hdrs_remove(&h, "Content-type"), 2);
    assert_null(bm_hdrs_get(&h, "content-type"));
    bm_hdrs_dispose(&h);
}

static void test_ssz_media_type(void **state)
{
    (void)state;
    static const char *const yes[] = {
        "application/octet-stream",        "Application/Octet-Stream",
        "  application/octet-stream",      "\tapplication/octet-stream",
        "application/octet-stream; q=1",   "application/octet-stream ;x=y",
        "application/octet-stream\t; x=1",
    };
    static const char *const no[] = {
        "",
        "application/json",
        "application/octet-streamx",
        "application/octet",
        "text/application/octet-stream",
        "application/octet-stream2",
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (!bm_content_type_is_ssz(yes[i]))
            fail_msg("\"%s\" is SSZ", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (bm_content_type_is_ssz(no[i]))
            fail_msg("\"%s\" is not SSZ", no[i]);
    assert_false(bm_content_type_is_ssz(NULL));

    bm_hdrs_t h;
    bm_hdrs_init(&h);
    assert_false(bm_hdrs_is_ssz(&h)); /* no Content-Type */
    assert_false(bm_hdrs_is_ssz(NULL));
    assert_int_equal(bm_hdrs_add_z(&h, "content-type", "application/octet-stream"), 0);
    assert_true(bm_hdrs_is_ssz(&h));
    bm_hdrs_dispose(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_is_case_insensitive),
        cmocka_unit_test(test_ssz_media_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
