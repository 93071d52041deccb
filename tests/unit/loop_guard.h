/* SPDX-License-Identifier: MIT */
/*
 * loop_guard: how a unit test waits on a libuv loop. RUN_UNTIL runs the loop until a
 * condition holds or a bound passes (the caller then asserts the condition), so no test
 * ever sleeps as synchronisation; RUN_FOR runs it for a while only to show that nothing
 * more happens. Shared by every test binary that drives a loop.
 */
#ifndef BM_TEST_LOOP_GUARD_H
#define BM_TEST_LOOP_GUARD_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include <cmocka.h>

typedef struct guard {
    uv_timer_t t;
    bool expired;
} guard_t;

static inline void guard_on_timer(uv_timer_t *t)
{
    ((guard_t *)t->data)->expired = true;
}

static inline void guard_on_closed(uv_handle_t *h)
{
    free(h->data);
}

/** A one-shot timer that sets `expired` after `ms`; free it with guard_stop. */
static inline guard_t *guard_start(uv_loop_t *loop, uint64_t ms)
{
    guard_t *g = calloc(1, sizeof *g);
    assert_non_null(g);
    uv_timer_init(loop, &g->t);
    g->t.data = g;
    uv_timer_start(&g->t, guard_on_timer, ms, 0);
    return g;
}

/** Closes the guard's timer; its memory goes in the close callback. */
static inline void guard_stop(guard_t *g)
{
    uv_close((uv_handle_t *)&g->t, guard_on_closed);
}

/* Runs the loop until `cond` holds or `ms` passed (the caller then asserts `cond`). */
#define RUN_UNTIL(loop, cond, ms)                                                                  \
    do {                                                                                           \
        guard_t *g_ = guard_start((loop), (ms));                                                   \
        while (!(cond) && !g_->expired)                                                            \
            uv_run((loop), UV_RUN_ONCE);                                                           \
        guard_stop(g_);                                                                            \
    } while (0)

/* Runs the loop for `ms`: only to show that nothing more happens in that time. */
#define RUN_FOR(loop, ms) RUN_UNTIL(loop, false, ms)

#endif /* BM_TEST_LOOP_GUARD_H */
