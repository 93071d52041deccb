/* SPDX-License-Identifier: MIT */
/*
 * duelist: many items waiting for a time under one libuv timer. The read path lists every
 * exchange that waits for its hedge, a retry or its deadline here, so that a proxied request
 * costs no timer of its own.
 *
 * Items are kept in one list, earliest first. Most are added at the end (their times are now
 * plus the same delays), so adding, moving and removing cost a few pointer writes. The timer
 * is armed lazily: an item that leaves the list or moves to a later time leaves the timer as
 * it is; when it fires with nothing due it is armed again for the first item. The timer heap
 * is touched only when an item comes before the armed time (usually: the list was empty).
 * Times are the loop's milliseconds (uv_now).
 */
#ifndef BM_DUELIST_H
#define BM_DUELIST_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/** A listed item's link, embedded in the caller's struct; zeroed means not listed. */
typedef struct bm_duelink {
    struct bm_duelink *prev, *next;
    uint64_t at;  /* loop ms when it is due; 0: not listed */
    uint64_t seq; /* when it was listed (a pass runs only items listed before it began) */
} bm_duelink_t;

/** Runs for an item that became due; it is no longer listed and may be listed again. */
typedef void (*bm_duelist_fn)(bm_duelink_t *d, void *ud);

typedef struct bm_duelist bm_duelist_t;

/** A list on `loop` calling `fn(d, ud)` for each due item. Its timer does not keep the loop
 *  alive (the items' owners do). NULL when out of memory. */
bm_duelist_t *bm_duelist_new(uv_loop_t *loop, bm_duelist_fn fn, void *ud);

/** Closes the timer (freed in its close callback); listed items are forgotten, not called.
 *  NULL is ignored. */
void bm_duelist_free(bm_duelist_t *l);

/** Lists `d` to be due at `at` (loop ms, > 0), after items due at the same time; moves it
 *  when it is listed already. */
void bm_duelist_schedule(bm_duelist_t *l, bm_duelink_t *d, uint64_t at);

/** Takes `d` off the list (nothing when it is not listed). */
void bm_duelist_cancel(bm_duelist_t *l, bm_duelink_t *d);

#endif /* BM_DUELIST_H */
