/* SPDX-License-Identifier: MIT */
/*
 * clock: the system clocks, the injectable clock with its two implementations, and the slot
 * formulas of the consensus specs (get_slot_component_duration_ms(bps) =
 * bps * SLOT_DURATION_MS // 10000).
 *
 * How it is built:
 *   - a real timer is a libuv timer. libuv measures timers on the loop's cached, coarse time,
 *     which may lag the monotonic clock by a few milliseconds, so a libuv timer can fire a
 *     little before the due time read with bm_clock_mono_now_us; the real timer then re-arms
 *     itself for the rest, and its callback never runs early;
 *   - a manual timer is a record on its clock's list of open timers. The clock has one libuv
 *     idle handle of its own, the kick, started whenever a timer falls due at the current
 *     time or a close callback is pending: it fires the due timers and runs the close
 *     callbacks from the loop, so that neither ever runs inside a call. It stays active
 *     after a pass that did something (an active idle handle keeps the loop from blocking
 *     in its poll, so a caller running the loop once sees the effect at once) and stops
 *     after a pass with nothing to do. bm_clock_manual_advance fires
 *     the timers due on the way, re-reading the list after every callback (callbacks may
 *     arm, stop and close timers, their own included). Closed manual timers wait on a
 *     second list until the kick (or the clock's own close) runs their close callbacks.
 */
#include "base/clock.h"

#include <stdlib.h>
#include <time.h>

#include "base/list.h"
#include "base/log.h"

#define MANUAL_MONO_START_US (1000000ull * 1000000ull) /* 10^6 s: far from zero */

struct bm_timer {
    bm_clock_t *c;
    bm_timer_fn fn;
    void *ud;
    bool active;
    uint64_t due_us; /* monotonic */
    uint64_t seq;    /* manual: arming order, first armed fires first among equals */
    bm_timer_closed_fn closed;
    void *closed_ud;
    bm_link_t link; /* manual: on the clock's open or closing list */
    uv_timer_t uv;  /* real */
};

struct bm_clock {
    bool manual;
    uv_loop_t *loop;
    size_t open; /* timers made and not closed */
    /* manual */
    uint64_t mono_us;
    int64_t wall_offset_us; /* wall = mono + offset */
    uint64_t seq;
    bm_link_t timers;  /* open timers (bm_timer_t) */
    bm_link_t closing; /* closed, close callback pending (bm_timer_t) */
    bool firing;       /* inside a timer callback of this clock */
    bool freed;
    uv_idle_t kick;
};

uint64_t bm_clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t bm_clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t bm_clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- reading ------------------------------------------------------------------------------ */

uint64_t bm_clock_wall_now(const bm_clock_t *c)
{
    if (!c->manual)
        return bm_clock_now_ms();
    return (uint64_t)((int64_t)c->mono_us + c->wall_offset_us) / 1000u;
}

uint64_t bm_clock_mono_now_us(const bm_clock_t *c)
{
    return c->manual ? c->mono_us : bm_clock_mono_us();
}

uint64_t bm_clock_mono_now(const bm_clock_t *c)
{
    return bm_clock_mono_now_us(c) / 1000u;
}

bool bm_clock_is_manual(const bm_clock_t *c)
{
    return c->manual;
}

/* ---- lists of manual timers ----------------------------------------------------------------- */

/* The armed timer that fires first at or before `until_us`, or NULL. */
static bm_timer_t *earliest_due(const bm_clock_t *c, uint64_t until_us)
{
    bm_timer_t *best = NULL;
    for (const bm_link_t *l = c->timers.next; l != &c->timers; l = l->next) {
        bm_timer_t *t = bm_list_entry(l, bm_timer_t, link);
        if (t->active && t->due_us <= until_us &&
            (!best || t->due_us < best->due_us ||
             (t->due_us == best->due_us && t->seq < best->seq)))
            best = t;
    }
    return best;
}

/* Fires every timer due at or before `until_us`, moving the clock to each due time.
 * Returns how many fired. */
static size_t fire_due(bm_clock_t *c, uint64_t until_us)
{
    bm_timer_t *t;
    size_t n = 0;
    while (!c->freed && (t = earliest_due(c, until_us)) != NULL) {
        if (t->due_us > c->mono_us)
            c->mono_us = t->due_us;
        t->active = false;
        c->firing = true;
        t->fn(t, t->ud);
        c->firing = false;
        n++;
    }
    return n;
}

/* Runs the pending close callbacks; returns how many ran. */
static size_t run_closes(bm_clock_t *c)
{
    size_t n = 0;
    while (!bm_list_empty(&c->closing)) {
        bm_timer_t *t = bm_list_first(&c->closing, bm_timer_t, link);
        bm_link_unlink(&t->link);
        if (t->closed)
            t->closed(t->closed_ud);
        free(t);
        n++;
    }
    return n;
}

static void on_kick(uv_idle_t *k)
{
    bm_clock_t *c = k->data;
    size_t done = fire_due(c, c->mono_us);
    if (!c->freed)
        done += run_closes(c);
    if (!done && !c->freed)
        uv_idle_stop(&c->kick);
}

static void kick(bm_clock_t *c)
{
    if (!c->freed)
        uv_idle_start(&c->kick, on_kick);
}

/* ---- clocks --------------------------------------------------------------------------------- */

/* A clock on `loop` with no timers yet (NULL without a loop or memory). */
static bm_clock_t *clock_alloc(uv_loop_t *loop)
{
    if (!loop)
        return NULL;
    bm_clock_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    bm_link_init(&c->timers);
    bm_link_init(&c->closing);
    c->loop = loop;
    return c;
}

bm_clock_t *bm_clock_real_new(uv_loop_t *loop)
{
    return clock_alloc(loop);
}

bm_clock_t *bm_clock_manual_new(uv_loop_t *loop, uint64_t wall_ms)
{
    bm_clock_t *c = clock_alloc(loop);
    if (!c)
        return NULL;
    c->manual = true;
    c->mono_us = MANUAL_MONO_START_US;
    c->wall_offset_us = (int64_t)(wall_ms * 1000u) - (int64_t)c->mono_us;
    uv_idle_init(loop, &c->kick);
    c->kick.data = c;
    return c;
}

static void on_kick_closed(uv_handle_t *h)
{
    bm_clock_t *c = h->data;
    run_closes(c);
    free(c);
}

void bm_clock_free(bm_clock_t *c)
{
    if (!c)
        return;
    bm_assert(c->open == 0);
    if (!c->manual) {
        free(c);
        return;
    }
    bm_assert(!c->firing);
    c->freed = true;
    uv_close((uv_handle_t *)&c->kick, on_kick_closed);
}

void bm_clock_manual_advance(bm_clock_t *c, uint64_t ms)
{
    bm_assert(c->manual && !c->firing && !c->freed);
    uint64_t target = c->mono_us + ms * 1000u;
    fire_due(c, target);
    c->mono_us = target;
}

void bm_clock_manual_set_wall(bm_clock_t *c, uint64_t wall_ms)
{
    bm_assert(c->manual);
    c->wall_offset_us = (int64_t)(wall_ms * 1000u) - (int64_t)c->mono_us;
}

bool bm_clock_manual_next(const bm_clock_t *c, uint64_t *in_ms)
{
    bm_timer_t *t = earliest_due(c, UINT64_MAX);
    if (!t)
        return false;
    if (in_ms)
        *in_ms = t->due_us > c->mono_us ? (t->due_us - c->mono_us + 999) / 1000 : 0;
    return true;
}

/* ---- timers --------------------------------------------------------------------------------- */

static void on_uv_timer(uv_timer_t *h)
{
    bm_timer_t *t = h->data;
    uint64_t now = bm_clock_mono_us();
    if (now < t->due_us) { /* the loop's coarse clock ran ahead of ours: not yet */
        uv_timer_start(&t->uv, on_uv_timer, (t->due_us - now + 999) / 1000, 0);
        return;
    }
    t->active = false;
    t->fn(t, t->ud);
}

bm_timer_t *bm_timer_new(bm_clock_t *c, bm_timer_fn fn, void *ud)
{
    if (!c || !fn || c->freed)
        return NULL;
    bm_timer_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->c = c;
    t->fn = fn;
    t->ud = ud;
    if (c->manual) {
        bm_list_push_front(&c->timers, &t->link);
    } else {
        uv_timer_init(c->loop, &t->uv);
        t->uv.data = t;
    }
    c->open++;
    return t;
}

void bm_timer_start(bm_timer_t *t, uint64_t delay_ms)
{
    bm_clock_t *c = t->c;
    t->active = true;
    t->due_us = bm_clock_mono_now_us(c) + delay_ms * 1000u;
    if (!c->manual) {
        uv_timer_start(&t->uv, on_uv_timer, delay_ms, 0);
        return;
    }
    t->seq = ++c->seq;
    if (delay_ms == 0)
        kick(c); /* due now: fired from the loop (or by the advance running, if any) */
}

void bm_timer_stop(bm_timer_t *t)
{
    t->active = false;
    if (!t->c->manual)
        uv_timer_stop(&t->uv);
}

bool bm_timer_active(const bm_timer_t *t)
{
    return t->active;
}

uint64_t bm_timer_due_in(const bm_timer_t *t)
{
    if (!t->active)
        return 0;
    uint64_t now = bm_clock_mono_now_us(t->c);
    return t->due_us > now ? (t->due_us - now + 999) / 1000 : 0;
}

static void on_uv_closed(uv_handle_t *h)
{
    bm_timer_t *t = h->data;
    if (t->closed)
        t->closed(t->closed_ud);
    free(t);
}

void bm_timer_close(bm_timer_t *t, bm_timer_closed_fn closed, void *ud)
{
    if (!t)
        return;
    bm_clock_t *c = t->c;
    t->active = false;
    t->closed = closed;
    t->closed_ud = ud;
    c->open--;
    if (!c->manual) {
        uv_close((uv_handle_t *)&t->uv, on_uv_closed);
        return;
    }
    bm_link_unlink(&t->link);
    bm_list_push_front(&c->closing, &t->link);
    kick(c);
}

/* ---- slot arithmetic ------------------------------------------------------------------------ */

bool bm_slot_clock_valid(const bm_slot_clock_t *c)
{
    return c->slot_ms > 0 && c->slots_per_epoch > 0;
}

uint64_t bm_slot_at(const bm_slot_clock_t *c, uint64_t now_ms)
{
    if (!bm_slot_clock_valid(c) || now_ms < c->genesis_ms)
        return 0;
    return (now_ms - c->genesis_ms) / c->slot_ms;
}

uint64_t bm_slot_start_ms(const bm_slot_clock_t *c, uint64_t slot)
{
    return c->genesis_ms + slot * (uint64_t)c->slot_ms;
}

uint64_t bm_epoch_of_slot(const bm_slot_clock_t *c, uint64_t slot)
{
    return c->slots_per_epoch ? slot / c->slots_per_epoch : 0;
}

uint64_t bm_epoch_start_slot(const bm_slot_clock_t *c, uint64_t epoch)
{
    return epoch * (uint64_t)c->slots_per_epoch;
}

uint64_t bm_slot_point_ms(const bm_slot_clock_t *c, uint64_t slot, uint32_t bps)
{
    return bm_slot_start_ms(c, slot) + (uint64_t)bps * c->slot_ms / 10000u;
}
