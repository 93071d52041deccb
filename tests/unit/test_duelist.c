/* SPDX-License-Identifier: MIT */
/*
 * test_duelist: many items under one timer. Items run in the order of their times (equal
 * times in the order listed), never before their time, once per listing; a cancelled or
 * moved item is not run at its old time; an item listed again from its own callback for the
 * same moment runs again (at a later pass) and the list empties. The loop closes clean after
 * bm_duelist_free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "loop_guard.h"
#include "read/duelist.h"

typedef struct item {
    bm_duelink_t link;
    int id;
    uint64_t due; /* loop ms it was listed for */
    int relist;   /* times it lists itself again for now */
} item_t;

typedef struct {
    uv_loop_t *loop;
    bm_duelist_t *l;
    int order[16];
    int n;
    bool early; /* an item ran before its time */
} world_t;

static void on_due(bm_duelink_t *d, void *ud)
{
    world_t *w = ud;
    item_t *it = (item_t *)((char *)d - offsetof(item_t, link));
    uint64_t now = uv_now(w->loop);
    if (now < it->due)
        w->early = true;
    if (w->n < 16)
        w->order[w->n++] = it->id;
    if (it->relist > 0) {
        it->relist--;
        it->due = now;
        bm_duelist_schedule(w->l, &it->link, now); /* due at once: the next pass runs it */
    }
}

static void list(world_t *w, item_t *it, uint64_t in_ms)
{
    it->due = uv_now(w->loop) + in_ms;
    bm_duelist_schedule(w->l, &it->link, it->due);
}

static void test_order_cancel_move(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    world_t w = {.loop = &loop};
    w.l = bm_duelist_new(&loop, on_due, &w);
    assert_non_null(w.l);
    item_t it[6];
    memset(it, 0, sizeof it);
    for (int i = 0; i < 6; i++)
        it[i].id = i;
    list(&w, &it[0], 60);
    list(&w, &it[1], 20);
    list(&w, &it[2], 20); /* same time as 1: after it */
    list(&w, &it[3], 40);
    list(&w, &it[4], 10);
    list(&w, &it[5], 30);
    bm_duelist_cancel(w.l, &it[4].link); /* never runs */
    bm_duelist_cancel(w.l, &it[4].link); /* a second cancel does nothing */
    list(&w, &it[3], 80);                /* moved later: not at 40 */
    RUN_UNTIL(&loop, w.n == 5, 2000);
    assert_int_equal(w.n, 5);
    int want[] = {1, 2, 5, 0, 3};
    for (int i = 0; i < 5; i++)
        assert_int_equal(w.order[i], want[i]);
    assert_false(w.early);
    RUN_FOR(&loop, 30); /* nothing more: each listing runs once */
    assert_int_equal(w.n, 5);
    for (int i = 0; i < 6; i++)
        assert_int_equal(it[i].link.at, 0); /* none listed */
    bm_duelist_free(w.l);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_relisted_runs_next_pass(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    world_t w = {.loop = &loop};
    w.l = bm_duelist_new(&loop, on_due, &w);
    item_t a = {.id = 1, .relist = 3};
    list(&w, &a, 5);
    RUN_UNTIL(&loop, w.n == 4, 2000);
    assert_int_equal(w.n, 4); /* the first run and three more */
    assert_false(w.early);
    assert_int_equal(a.link.at, 0);
    /* an earlier item listed after a later one re-arms the timer for the earlier time */
    item_t late = {.id = 7}, soon = {.id = 8};
    list(&w, &late, 500);
    list(&w, &soon, 5);
    RUN_UNTIL(&loop, w.n == 5, 400);
    assert_int_equal(w.n, 5);
    assert_int_equal(w.order[4], 8);
    bm_duelist_cancel(w.l, &late.link);
    bm_duelist_free(w.l);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_cancel_move),
        cmocka_unit_test(test_relisted_runs_next_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
