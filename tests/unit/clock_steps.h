/* SPDX-License-Identifier: MIT */
/*
 * clock_steps: moving a manual clock (base/clock.h) under a loop that also does real I/O
 * (test_monitor, test_nodestream): after every move the loop runs until the test's own
 * `settled` condition holds again, so the clock never runs ahead of the sockets. The real
 * time a settling may take is bounded (bound_ms); the test asserts the condition anyway.
 */
#ifndef BM_TEST_CLOCK_STEPS_H
#define BM_TEST_CLOCK_STEPS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "loop_guard.h"

typedef struct clock_steps {
    uv_loop_t *loop;
    bm_clock_t *clock;               /* a manual clock on `loop` */
    bool (*settled)(const void *ud); /* nothing is in flight that real time must finish */
    const void *ud;
    uint64_t bound_ms; /* real time one settling may take */
} clock_steps_t;

/* Runs the loop until settled, lets ready bytes land (turns that never block), settles. */
static inline void steps_settle(const clock_steps_t *s)
{
    RUN_UNTIL(s->loop, s->settled(s->ud), s->bound_ms);
    assert_true(s->settled(s->ud));
    for (int i = 0; i < 8; i++)
        uv_run(s->loop, UV_RUN_NOWAIT);
    RUN_UNTIL(s->loop, s->settled(s->ud), s->bound_ms);
    assert_true(s->settled(s->ud));
}

/* Moves the clock to its next due timer, or by `most` when none is due sooner, and settles. */
static inline void steps_step(const clock_steps_t *s, uint64_t most)
{
    uint64_t in;
    if (!bm_clock_manual_next(s->clock, &in) || in > most)
        in = most;
    bm_clock_manual_advance(s->clock, in);
    steps_settle(s);
}

/* Moves the clock `ms` forward one due timer at a time, settling after each. */
static inline void steps_advance(const clock_steps_t *s, uint64_t ms)
{
    steps_settle(s);
    uint64_t end = bm_clock_mono_now(s->clock) + ms;
    while (bm_clock_mono_now(s->clock) < end)
        steps_step(s, end - bm_clock_mono_now(s->clock));
}

/* Moves the clock, one due timer at a time, until `cond` holds or `ms` of clock time
 * passed (the caller then asserts `cond`). */
#define STEPS_ADVANCE_UNTIL(s, cond, ms)                                                           \
    do {                                                                                           \
        steps_settle(s);                                                                           \
        uint64_t end_ = bm_clock_mono_now((s)->clock) + (ms);                                      \
        while (!(cond) && bm_clock_mono_now((s)->clock) < end_)                                    \
            steps_step((s), end_ - bm_clock_mono_now((s)->clock));                                 \
    } while (0)

#endif /* BM_TEST_CLOCK_STEPS_H */
