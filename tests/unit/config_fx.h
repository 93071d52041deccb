/* SPDX-License-Identifier: MIT */
/*
 * config_fx: helpers shared by the tests of the configuration and of the command line:
 * a configuration as its YAML dump, the comparison of two configurations, a temporary file.
 */
#ifndef BM_TEST_CONFIG_FX_H
#define BM_TEST_CONFIG_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/config.h"

/* The configuration as YAML text (caller frees). */
static inline char *dump(const bm_config_t *cfg, bool mask)
{
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_config_dump(cfg, mask, &s), 0);
    char *r = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    assert_non_null(r);
    return r;
}

/* Two configurations are the same when they dump to the same YAML. */
static inline void assert_same_config(const bm_config_t *a, const bm_config_t *b)
{
    char *da = dump(a, false), *db = dump(b, false);
    if (strcmp(da, db) != 0)
        print_error("first:\n%s\nsecond:\n%s\n", da, db);
    assert_string_equal(da, db);
    free(da);
    free(db);
}

/* A new file holding `text`; the caller unlinks it and frees the path. */
static inline char *write_tmp(const char *text)
{
    char *path = strdup("/tmp/bm_test_config_XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

#endif /* BM_TEST_CONFIG_FX_H */
