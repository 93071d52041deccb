/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for bm_json_pick, the tree-free reader of the duty races' answers.
 *
 * The input is a JSON text. Property: pick agrees with the json-c tree bm_json_parse builds,
 * for the pointers the races read and a few that cross arrays, nulls and repeated members:
 *   - pick refuses the text (BM_EINVAL, BM_ETOOBIG) exactly when bm_json_parse does;
 *   - pick declines (1) only for a text with a backslash;
 *   - otherwise every pointer reads the same through bm_json_pick_u64/_root/_bool as through
 *     bm_json_get_u64/_root/_bool: the same return code and, on success, the same value.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "base/err.h"
#include "base/json.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static const char *const ptrs[] = {
    "/data/slot",
    "/data/index",
    "/data/beacon_block_root",
    "/data/source/epoch",
    "/data/source/root",
    "/data/target/epoch",
    "/data/target/root",
    "/data/root",
    "/data/payload_present",
    "/data",
    "/slot",
    "/data/source",
    "/a/b/c/d/e/f/g/h",
};

#define N_PTRS (sizeof ptrs / sizeof ptrs[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bm_json_pick_t f[N_PTRS];
    for (size_t k = 0; k < N_PTRS; k++)
        f[k].ptr = ptrs[k];
    int pr = bm_json_pick(data, size, 0, f, N_PTRS);
    struct json_object *tree = NULL;
    int tr = bm_json_parse(data, size, 0, &tree, NULL);
    if (pr == 1) {
        CHECK(memchr(data, '\\', size) != NULL);
    } else if (pr != 0) {
        CHECK(tr != 0);
        CHECK(pr == tr || tr == BM_ENOMEM);
    } else {
        CHECK(tr == 0 || tr == BM_ENOMEM);
        for (size_t k = 0; tr == 0 && k < N_PTRS; k++) {
            uint64_t u1 = 0, u2 = 0;
            int r1 = bm_json_pick_u64(&f[k], &u1), r2 = bm_json_get_u64(tree, ptrs[k], &u2);
            CHECK(r1 == r2 && (r1 != 0 || u1 == u2));
            uint8_t h1[32], h2[32];
            r1 = bm_json_pick_root(&f[k], h1);
            r2 = bm_json_get_root(tree, ptrs[k], h2);
            CHECK(r1 == r2 && (r1 != 0 || memcmp(h1, h2, 32) == 0));
            bool b1 = false, b2 = false;
            r1 = bm_json_pick_bool(&f[k], &b1);
            r2 = bm_json_get_bool(tree, ptrs[k], &b2);
            CHECK(r1 == r2 && (r1 != 0 || b1 == b2));
        }
    }
    json_object_put(tree);
    return 0;
}
