/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for canon (canonical JSON, read/canon.h) and the path patterns of
 * read/rules.h, the two byte readers of the read path.
 *
 * Properties (a __builtin_trap when one fails):
 *   - canonical JSON is a fixed point: the canonical form of an accepted text is accepted and
 *     is its own canonical form; a refused text leaves nothing to compare but its bytes;
 *   - equality agrees with the forms: a text equals its canonical form, and equality is
 *     symmetric;
 *   - a pattern is compiled exactly when bm_pattern_problem finds nothing, and a compiled
 *     pattern matches its own text when that text has no star (a literal path), and the
 *     path normaliser never writes past its buffer and returns a length that fits it.
 * The input is tried whole as JSON, and as a pattern and a path split at the first newline.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "read/canon.h"
#include "read/rules.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

static void check_json(const char *p, size_t n)
{
    bm_str_t a = BM_STR_INIT, b = BM_STR_INIT;
    if (bm_canon_json(p, n, &a) == 0) {
        CHECK(bm_canon_json(bm_str_data(&a), bm_str_len(&a), &b) == 0);
        CHECK(bm_str_len(&a) == bm_str_len(&b));
        CHECK(memcmp(bm_str_data(&a), bm_str_data(&b), bm_str_len(&a)) == 0);
        CHECK(bm_canon_equal(p, n, bm_str_data(&a), bm_str_len(&a), false));
        CHECK(bm_canon_equal(bm_str_data(&a), bm_str_len(&a), p, n, false));
    }
    CHECK(bm_canon_equal(p, n, p, n, false));
    bm_str_dispose(&a);
    bm_str_dispose(&b);
}

static void check_pattern(const char *pat, const char *path, size_t plen)
{
    bm_pattern_t *c = bm_pattern_compile(pat);
    CHECK((c != NULL) == (bm_pattern_problem(pat) == NULL));
    if (c) {
        if (!strchr(pat, '*'))
            CHECK(bm_pattern_match(c, pat, strlen(pat)));
        (void)bm_pattern_match(c, path, plen);
        bm_pattern_free(c);
    }
    char out[64];
    size_t n = bm_rules_normalise(path, plen, out, sizeof out);
    CHECK(n == (size_t)-1 || (n < sizeof out && out[n] == '\0'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    check_json(p, size);
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *nl = memchr(copy, '\n', size);
    const char *path = nl ? nl + 1 : copy;
    if (nl)
        *nl = '\0';
    check_pattern(copy, path, strlen(path));
    free(copy);
    return 0;
}
