/* SPDX-License-Identifier: MIT */
/*
 * test_indexed: the item-by-item merge of a batch write's answers: an item failed only if it
 * failed on every node that answered; duplicates count as taken; a 2xx takes everything, a
 * plain error nothing; a node's retry replaces its earlier answer; the merged answer is 200
 * or a 400 IndexedErrorMessage listing only the items that failed everywhere, with every
 * node's message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/err.h"
#include "duties/indexed.h"

static bm_buf_t *b(const char *s)
{
    bm_buf_t *x = bm_buf_from_str(s);
    assert_non_null(x);
    return x;
}

static void add(bm_indexed_t *m, size_t node, const char *id, int status, const char *body)
{
    bm_buf_t *x = body ? b(body) : NULL;
    bm_indexed_add(m, node, id, status, x);
    bm_buf_unref(x);
}

static void expect(const bm_indexed_t *m, int status, const char *body)
{
    bm_buf_t *got = NULL;
    assert_int_equal(bm_indexed_answer(m, &got), status);
    if (!body) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got->data, body);
    bm_buf_unref(got);
}

static void test_duplicates(void **state)
{
    (void)state;
    assert_true(bm_indexed_is_duplicate("PublishError.Duplicate"));
    assert_true(bm_indexed_is_duplicate("ALREADY_KNOWN"));
    assert_true(bm_indexed_is_duplicate("AttestationAlreadyKnown"));
    assert_true(bm_indexed_is_duplicate("contribution already seen"));
    assert_true(bm_indexed_is_duplicate("Already Seen"));
    assert_false(bm_indexed_is_duplicate("invalid signature"));
    assert_false(bm_indexed_is_duplicate(""));
    assert_false(bm_indexed_is_duplicate(NULL));
}

/* The Lodestar case: every node refuses some items as duplicates (another node gossiped
 * them): every item was taken, 200. */
static void test_all_taken_by_duplicates(void **state)
{
    (void)state;
    bm_indexed_t *m = bm_indexed_new();
    assert_false(bm_indexed_active(m));
    add(m, 0, "a", 500,
        "{\"code\":500,\"message\":\"some failed\",\"failures\":[{\"index\":0,\"message\":"
        "\"PublishError.Duplicate\"},{\"index\":2,\"message\":\"PublishError.Duplicate\"}]}");
    assert_true(bm_indexed_active(m));
    assert_true(bm_indexed_all_taken(m));
    add(m, 1, "b", 500,
        "{\"code\":500,\"message\":\"x\",\"failures\":[{\"index\":\"1\",\"message\":"
        "\"PublishError.Duplicate\"}]}");
    assert_true(bm_indexed_all_taken(m));
    expect(m, 200, NULL);
    bm_indexed_free(m);
}

/* What a real Lodestar v1.5.1 answers (its fastify error body, no indexes): a 500 whose
 * message lists each failed item's error, here only duplicates. Such a node has every item;
 * one error that is not a duplicate among them, and it took none. */
static void test_lodestar_plain_duplicates(void **state)
{
    (void)state;
    bm_indexed_t *m = bm_indexed_new();
    add(m, 0, "a", 500,
        "{\"statusCode\":500,\"error\":\"Internal Server Error\",\"message\":"
        "\"Multiple errors on publishContributionAndProofs\\nPublishError.Duplicate\\n"
        "PublishError.Duplicate\"}");
    assert_true(bm_indexed_active(m));
    assert_true(bm_indexed_all_taken(m));
    expect(m, 200, NULL);
    bm_indexed_free(m);

    m = bm_indexed_new();
    add(m, 0, "a", 500,
        "{\"statusCode\":500,\"error\":\"Internal Server Error\",\"message\":"
        "\"PublishError.Duplicate\"}");
    assert_true(bm_indexed_all_taken(m));
    bm_indexed_free(m);

    m = bm_indexed_new();
    add(m, 0, "a", 500,
        "{\"statusCode\":500,\"error\":\"Internal Server Error\",\"message\":"
        "\"Multiple errors on submitPoolAttestations\\nPublishError.Duplicate\\n"
        "PublishError.InsufficientPeers\"}");
    add(m, 1, "b", 500, "{\"code\":500,\"message\":\"Multiple errors on x\"}");
    add(m, 2, "c", 500, "{\"code\":500,\"message\":\"\\n \\n\"}");
    assert_false(bm_indexed_active(m)); /* took none, each of them */
    bm_indexed_free(m);
}

/* Different nodes refuse different items: each was taken by the other. An item every node
 * that answered refused is in the 400, with their messages; a node that did not answer says
 * nothing; a plain error takes nothing. */
static void test_failed_everywhere_only(void **state)
{
    (void)state;
    bm_indexed_t *m = bm_indexed_new();
    add(m, 0, "a", 400,
        "{\"code\":400,\"message\":\"x\",\"failures\":[{\"index\":1,\"message\":\"bad sig\"},"
        "{\"index\":3,\"message\":\"unknown head\"}]}");
    assert_false(bm_indexed_all_taken(m));
    add(m, 1, "b", 400,
        "{\"code\":400,\"message\":\"x\",\"failures\":[{\"index\":3,\"message\":\"no "
        "\\\"head\\\"\"},"
        "{\"index\":0,\"message\":\"late\"}]}");
    assert_false(bm_indexed_all_taken(m)); /* 3 failed on both */
    expect(m, 400,
           "{\"code\":400,\"message\":\"1 item(s) failed on every node that answered\","
           "\"failures\":[{\"index\":3,\"message\":\"a: unknown head; b: no \\\"head\\\"\"}]}");
    /* a third node with a plain error takes nothing: item 3 still failed everywhere, and
     * item 1 still was taken by b */
    add(m, 2, "c", 503, "{\"code\":503,\"message\":\"syncing\"}");
    expect(m, 400,
           "{\"code\":400,\"message\":\"1 item(s) failed on every node that answered\","
           "\"failures\":[{\"index\":3,\"message\":\"a: unknown head; b: no \\\"head\\\"; c: 503 "
           "syncing\"}]}");
    /* c retries and takes everything: 200 */
    add(m, 2, "c", 200, "");
    assert_true(bm_indexed_all_taken(m));
    expect(m, 200, NULL);
    bm_indexed_free(m);
}

/* Plain errors only, or no indexed error at all: the merge has nothing to say. A body that
 * is not the indexed form counts as a plain error. */
static void test_not_indexed(void **state)
{
    (void)state;
    bm_indexed_t *m = bm_indexed_new();
    add(m, 0, "a", 500, "{\"code\":500,\"message\":\"boom\"}");
    add(m, 1, "b", 400,
        "{\"code\":400,\"message\":\"x\",\"failures\":[{\"message\":\"no index\"}]}");
    add(m, 2, "c", 400, "not json");
    add(m, 3, "d", 400, NULL);
    assert_false(bm_indexed_active(m));
    add(m, 64, "z", 400, "{\"failures\":[{\"index\":0,\"message\":\"x\"}]}"); /* out of range */
    assert_false(bm_indexed_active(m));
    bm_indexed_free(m);
    bm_indexed_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_all_taken_by_duplicates),
        cmocka_unit_test(test_lodestar_plain_duplicates),
        cmocka_unit_test(test_failed_everywhere_only),
        cmocka_unit_test(test_not_indexed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
