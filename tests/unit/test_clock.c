/* SPDX-License-Identifier: MIT */
/*
 * test_clock: the injectable clock. The manual clock: time moves only when advanced; timers
 * fire in order of their due time, each with the clock at that time; callbacks may arm,
 * stop and close timers (their own too) during an advance; a timer due now fires from the
 * loop, never inside the call that armed it; close callbacks run from the loop; a wall step
 * moves no timer. The real clock: a timer never fires before its due time on the clock's
 * monotonic time, stop and re-start work, close callbacks run from the loop. Every test
 * ends with uv_loop_close() == 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/clock.h"
#include "loop_guard.h"

#define WALL0 1700000000000ull

/* ---- recording callbacks --------------------------------------------------------------------- */

typedef struct rec {
    bm_clock_t *c;
    char log[256];     /* one letter per firing timer */
    uint64_t mono[16]; /* the clock's monotonic ms at each firing */
    uint64_t wall[16];
    int n;
    int closed;
} rec_t;

typedef struct tmr {
    rec_t *r;
    char name;
    bm_timer_t *t;
    /* scripts run by the callback */
    bm_timer_t *arm_other; /* arm this timer ... */
    uint64_t arm_ms;       /* ... this much later */
    bm_timer_t *stop_other;
    bool close_self;
    bool rearm_self_ms_set;
    uint64_t rearm_self_ms;
} tmr_t;

static void on_closed(void *ud)
{
    ((rec_t *)ud)->closed++;
}

static void on_fire(bm_timer_t *t, void *ud)
{
    tmr_t *m = ud;
    rec_t *r = m->r;
    assert_ptr_equal(t, m->t);
    assert_false(bm_timer_active(t));
    size_t len = strlen(r->log);
    r->log[len] = m->name;
    r->log[len + 1] = '\0';
    if (r->n < 16) {
        r->mono[r->n] = bm_clock_mono_now(r->c);
        r->wall[r->n] = bm_clock_wall_now(r->c);
    }
    r->n++;
    if (m->arm_other)
        bm_timer_start(m->arm_other, m->arm_ms);
    if (m->stop_other)
        bm_timer_stop(m->stop_other);
    if (m->rearm_self_ms_set) {
        m->rearm_self_ms_set = false;
        bm_timer_start(t, m->rearm_self_ms);
    }
    if (m->close_self) {
        bm_timer_close(t, on_closed, r);
        m->t = NULL;
    }
}

static void tmr_make(tmr_t *m, rec_t *r, char name)
{
    memset(m, 0, sizeof *m);
    m->r = r;
    m->name = name;
    m->t = bm_timer_new(r->c, on_fire, m);
    assert_non_null(m->t);
}

static void tmr_close(tmr_t *m)
{
    if (m->t)
        bm_timer_close(m->t, on_closed, m->r);
    m->t = NULL;
}

static void finish(uv_loop_t *loop, bm_clock_t *c)
{
    bm_clock_free(c);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(loop), 0);
}

/* A loop and a record whose clock is manual, at WALL0; returns its monotonic time. */
static uint64_t start_manual(uv_loop_t *loop, rec_t *r)
{
    uv_loop_init(loop);
    memset(r, 0, sizeof *r);
    r->c = bm_clock_manual_new(loop, WALL0);
    return bm_clock_mono_now(r->c);
}

/* The timers a, b, c and d, recording into r. */
static void tmr_make_abcd(rec_t *r, tmr_t *a, tmr_t *b, tmr_t *c, tmr_t *d)
{
    tmr_make(a, r, 'a');
    tmr_make(b, r, 'b');
    tmr_make(c, r, 'c');
    tmr_make(d, r, 'd');
}

/* ---- the manual clock -------------------------------------------------------------------------
 */

static void test_manual_time_stands_still(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    bm_clock_t *c = bm_clock_manual_new(&loop, WALL0);
    assert_non_null(c);
    assert_true(bm_clock_is_manual(c));
    assert_int_equal(bm_clock_wall_now(c), WALL0);
    uint64_t m0 = bm_clock_mono_now(c);
    assert_true(m0 > 1000000); /* well above zero, as the system's */
    assert_int_equal(bm_clock_mono_now_us(c), m0 * 1000);
    RUN_FOR(&loop, 20);
    assert_int_equal(bm_clock_wall_now(c), WALL0);
    assert_int_equal(bm_clock_mono_now(c), m0);
    bm_clock_manual_advance(c, 1500);
    assert_int_equal(bm_clock_wall_now(c), WALL0 + 1500);
    assert_int_equal(bm_clock_mono_now(c), m0 + 1500);
    /* an NTP step: the wall clock jumps, the monotonic one does not */
    bm_clock_manual_set_wall(c, WALL0 - 10000);
    assert_int_equal(bm_clock_wall_now(c), WALL0 - 10000);
    assert_int_equal(bm_clock_mono_now(c), m0 + 1500);
    bm_clock_manual_advance(c, 1);
    assert_int_equal(bm_clock_wall_now(c), WALL0 - 9999);
    finish(&loop, c);
}

/* Timers fire in order of due time (first armed first among equals), each with the clock
 * at its due time; an advance that stops short fires nothing more. */
static void test_manual_order(void **state)
{
    (void)state;
    uv_loop_t loop;
    rec_t r;
    uint64_t m0 = start_manual(&loop, &r);
    tmr_t a, b, c, d;
    tmr_make_abcd(&r, &a, &b, &c, &d);
    bm_timer_start(a.t, 300);
    bm_timer_start(b.t, 100);
    bm_timer_start(c.t, 300); /* armed after a, due with it: after a */
    bm_timer_start(d.t, 500);
    uint64_t in;
    assert_true(bm_clock_manual_next(r.c, &in));
    assert_int_equal(in, 100);
    assert_int_equal(bm_timer_due_in(d.t), 500);
    bm_clock_manual_advance(r.c, 99);
    assert_string_equal(r.log, "");
    bm_clock_manual_advance(r.c, 301);
    assert_string_equal(r.log, "bac");
    assert_int_equal(r.mono[0], m0 + 100);
    assert_int_equal(r.mono[1], m0 + 300);
    assert_int_equal(r.mono[2], m0 + 300);
    assert_int_equal(r.wall[0], WALL0 + 100);
    assert_int_equal(bm_clock_mono_now(r.c), m0 + 400);
    assert_true(bm_timer_active(d.t));
    assert_int_equal(bm_timer_due_in(d.t), 100);
    /* re-arming moves it; stopping disarms it */
    bm_timer_start(d.t, 50);
    bm_clock_manual_advance(r.c, 50);
    assert_string_equal(r.log, "bacd");
    bm_timer_start(a.t, 10);
    bm_timer_stop(a.t);
    assert_false(bm_timer_active(a.t));
    assert_false(bm_clock_manual_next(r.c, NULL));
    bm_clock_manual_advance(r.c, 1000);
    assert_string_equal(r.log, "bacd");
    tmr_close(&a);
    tmr_close(&b);
    tmr_close(&c);
    tmr_close(&d);
    assert_int_equal(r.closed, 0); /* never inside the call */
    RUN_UNTIL(&loop, r.closed == 4, 2000);
    assert_int_equal(r.closed, 4);
    finish(&loop, r.c);
}

/* Callbacks may arm, stop and close timers during an advance: what they arm within the
 * advance fires in it, at its own due time; a timer stopped by an earlier callback does
 * not fire; a timer may re-arm or close itself. */
static void test_manual_reentrant(void **state)
{
    (void)state;
    uv_loop_t loop;
    rec_t r;
    uint64_t m0 = start_manual(&loop, &r);
    tmr_t a, b, c, d;
    tmr_make_abcd(&r, &a, &b, &c, &d);
    a.arm_other = b.t; /* a at 100 arms b for 150 later (250) */
    a.arm_ms = 150;
    a.stop_other = c.t;         /* and stops c (due at 200) */
    d.rearm_self_ms_set = true; /* d at 120 re-arms itself for 0 ms (120 again), then closes */
    d.rearm_self_ms = 0;
    bm_timer_start(a.t, 100);
    bm_timer_start(c.t, 200);
    bm_timer_start(d.t, 120);
    bm_clock_manual_advance(r.c, 300);
    assert_string_equal(r.log, "addb");
    assert_int_equal(r.mono[0], m0 + 100);
    assert_int_equal(r.mono[1], m0 + 120);
    assert_int_equal(r.mono[2], m0 + 120);
    assert_int_equal(r.mono[3], m0 + 250);
    /* a timer closing itself from its callback */
    b.close_self = true;
    bm_timer_start(b.t, 10);
    bm_clock_manual_advance(r.c, 10);
    assert_string_equal(r.log, "addbb");
    assert_null(b.t);
    assert_int_equal(r.closed, 0);
    RUN_UNTIL(&loop, r.closed == 1, 2000);
    tmr_close(&a);
    tmr_close(&c);
    tmr_close(&d);
    RUN_UNTIL(&loop, r.closed == 4, 2000);
    assert_int_equal(r.closed, 4);
    finish(&loop, r.c);
}

/* A timer due now fires from the loop, never inside the call that armed it, and without
 * the clock moving. */
static void test_manual_due_now(void **state)
{
    (void)state;
    uv_loop_t loop;
    rec_t r;
    uint64_t m0 = start_manual(&loop, &r);
    tmr_t a;
    tmr_make(&a, &r, 'a');
    bm_timer_start(a.t, 0);
    assert_string_equal(r.log, "");
    RUN_UNTIL(&loop, r.n == 1, 2000);
    assert_string_equal(r.log, "a");
    assert_int_equal(r.mono[0], m0);
    /* a timer armed for later does not fire from the loop */
    bm_timer_start(a.t, 1);
    RUN_FOR(&loop, 20);
    assert_string_equal(r.log, "a");
    tmr_close(&a);
    finish(&loop, r.c); /* the close callback runs as the clock closes */
    assert_int_equal(r.closed, 1);
}

/* ---- the real clock ---------------------------------------------------------------------------
 */

static void test_real(void **state)
{
    (void)state;
    uv_loop_t loop;
    uv_loop_init(&loop);
    rec_t r = {0};
    r.c = bm_clock_real_new(&loop);
    assert_non_null(r.c);
    assert_false(bm_clock_is_manual(r.c));
    uint64_t w = bm_clock_now_ms();
    assert_true(bm_clock_wall_now(r.c) >= w && bm_clock_wall_now(r.c) < w + 1000);
    tmr_t a, b;
    tmr_make(&a, &r, 'a');
    tmr_make(&b, &r, 'b');
    uint64_t t0 = bm_clock_mono_now(r.c);
    bm_timer_start(a.t, 30);
    bm_timer_start(b.t, 10);
    assert_true(bm_timer_active(a.t));
    assert_true(bm_timer_due_in(a.t) <= 30);
    RUN_UNTIL(&loop, r.n == 2, 2000);
    assert_string_equal(r.log, "ba");
    assert_true(r.mono[0] >= t0 + 10); /* never before its due time */
    assert_true(r.mono[1] >= t0 + 30);
    /* stopped: never fires */
    bm_timer_start(a.t, 5);
    bm_timer_stop(a.t);
    RUN_FOR(&loop, 30);
    assert_int_equal(r.n, 2);
    tmr_close(&a);
    tmr_close(&b);
    assert_int_equal(r.closed, 0);
    finish(&loop, r.c);
    assert_int_equal(r.closed, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manual_time_stands_still),
        cmocka_unit_test(test_manual_order),
        cmocka_unit_test(test_manual_reentrant),
        cmocka_unit_test(test_manual_due_now),
        cmocka_unit_test(test_real),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
