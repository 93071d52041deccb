/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the small containers in base/: the intrusive list (order of pushes,
 * unlinking from anywhere and twice, moving a whole list away while its elements may
 * join the old head again) and the recycle stack (last in first out, the reset prefix
 * cleared and the rest kept, refusal when full).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/list.h"
#include "base/recycle.h"

typedef struct {
    int id;
    bm_link_t link;
} item_t;

/* The ids on the list, in order, as a string of digits ("" for an empty list). */
static void ids(const bm_link_t *head, char *out)
{
    size_t n = 0;
    for (const bm_link_t *l = head->next; l != head; l = l->next)
        out[n++] = (char)('0' + bm_list_entry(l, item_t, link)->id);
    out[n] = '\0';
}

static void test_list_push_unlink(void **state)
{
    (void)state;
    item_t it[4];
    bm_link_t head;
    bm_link_init(&head);
    assert_true(bm_list_empty(&head));
    for (int i = 0; i < 4; i++) {
        it[i].id = i;
        bm_link_init(&it[i].link);
        assert_false(bm_link_linked(&it[i].link));
    }
    bm_list_push_back(&head, &it[1].link);
    bm_list_push_back(&head, &it[2].link);
    bm_list_push_front(&head, &it[0].link);
    bm_list_push_back(&head, &it[3].link);
    char s[8];
    ids(&head, s);
    assert_string_equal(s, "0123");
    assert_int_equal(bm_list_first(&head, item_t, link)->id, 0);

    bm_link_unlink(&it[2].link); /* the middle */
    assert_false(bm_link_linked(&it[2].link));
    bm_link_unlink(&it[2].link); /* twice: harmless */
    bm_link_unlink(&it[0].link); /* the first */
    bm_link_unlink(&it[3].link); /* the last */
    ids(&head, s);
    assert_string_equal(s, "1");
    bm_link_unlink(&it[1].link);
    assert_true(bm_list_empty(&head));
}

static void test_list_move_all(void **state)
{
    (void)state;
    item_t it[3];
    bm_link_t head, taken, empty;
    bm_link_init(&head);
    bm_link_init(&taken);
    bm_link_init(&empty);
    for (int i = 0; i < 3; i++) {
        it[i].id = i;
        bm_list_push_back(&head, &it[i].link);
    }
    bm_list_move_all(&taken, &head);
    assert_true(bm_list_empty(&head));
    char s[8];
    ids(&taken, s);
    assert_string_equal(s, "012");

    /* An element taken off the moved list may join the old head again. */
    bm_link_unlink(&it[1].link);
    bm_list_push_back(&head, &it[1].link);
    ids(&taken, s);
    assert_string_equal(s, "02");
    ids(&head, s);
    assert_string_equal(s, "1");

    /* Moving an empty list leaves the target empty. */
    bm_link_t target;
    bm_link_init(&target);
    bm_list_move_all(&target, &empty);
    assert_true(bm_list_empty(&target));
    assert_true(bm_list_empty(&empty));
}

typedef struct {
    int per_use[3];
    int kept;
} obj_t;

static void test_recycle(void **state)
{
    (void)state;
    static obj_t objs[BM_RECYCLE_MAX + 1];
    bm_recycle_t r = {.n = 0};
    assert_null(bm_recycle_take(&r, 0));
    for (int i = 0; i < BM_RECYCLE_MAX; i++) {
        objs[i].per_use[0] = objs[i].per_use[2] = 7;
        objs[i].kept = i;
        assert_true(bm_recycle_put(&r, &objs[i]));
    }
    assert_false(bm_recycle_put(&r, &objs[BM_RECYCLE_MAX])); /* full: the caller keeps it */

    obj_t *o = bm_recycle_take(&r, offsetof(obj_t, kept));
    assert_ptr_equal(o, &objs[BM_RECYCLE_MAX - 1]); /* last in, first out */
    assert_int_equal(o->per_use[0], 0);
    assert_int_equal(o->per_use[2], 0);
    assert_int_equal(o->kept, BM_RECYCLE_MAX - 1);

    o = bm_recycle_take(&r, 0); /* reset 0: as it was put */
    assert_int_equal(o->per_use[2], 7);
    int left = 0;
    while (bm_recycle_take(&r, 0))
        left++;
    assert_int_equal(left, BM_RECYCLE_MAX - 2);
    assert_true(bm_recycle_put(&r, &objs[0])); /* room again */

    /* get: the kept one first, then a new zeroed one */
    objs[0].per_use[1] = objs[0].kept = 9;
    obj_t *g = bm_recycle_get(&r, sizeof *g, offsetof(obj_t, kept));
    assert_ptr_equal(g, &objs[0]);
    assert_int_equal(g->per_use[1], 0);
    assert_int_equal(g->kept, 9);
    g = bm_recycle_get(&r, sizeof *g, offsetof(obj_t, kept));
    assert_non_null(g);
    for (int i = 0; i <= BM_RECYCLE_MAX; i++)
        assert_ptr_not_equal(g, &objs[i]); /* none was kept */
    assert_int_equal(g->per_use[0] | g->per_use[1] | g->per_use[2] | g->kept, 0);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_push_unlink),
        cmocka_unit_test(test_list_move_all),
        cmocka_unit_test(test_recycle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
