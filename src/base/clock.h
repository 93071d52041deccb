/* SPDX-License-Identifier: MIT */
/*
 * clock: time for the modules that judge it, and the slot arithmetic of the beacon chain.
 *
 * Two clocks matter here, and every time in this project is on one of them:
 *   - the wall clock (Unix milliseconds, CLOCK_REALTIME): slots are wall-clock based by
 *     definition (genesis time + slot duration), so deadlines derived from slots, due times
 *     and "when did this arrive" figures are wall times;
 *   - the monotonic clock (milliseconds or microseconds from an arbitrary fixed point,
 *     CLOCK_MONOTONIC): durations, intervals and timers, which an NTP step of the wall clock
 *     must neither stretch nor shorten.
 *
 * The injectable clock (bm_clock_t) gives a module both, plus one-shot timers, behind one
 * interface with two implementations:
 *   - the real clock (bm_clock_real_new): the system clocks and libuv timers on a loop;
 *     what beaconmux runs on;
 *   - the manual clock (bm_clock_manual_new): time stands still until the owner (a unit
 *     test) moves it with bm_clock_manual_advance, which fires the timers that fall due on
 *     the way, in order of their due time, each with the clock set to its due time. Unit
 *     tests thereby advance time instead of waiting for it, and the times they assert are
 *     exact.
 * A module that judges time takes a bm_clock_t and reads and arms time only through it, so
 * the same code runs on either. The free functions bm_clock_now_ms, bm_clock_mono_ms and
 * bm_clock_mono_us read the system clocks directly: for logs and figures that no test
 * needs to control.
 *
 * Timers are one-shot and measured on the monotonic clock: bm_timer_start(t, delay) fires
 * once `delay` ms after the call (on the clock's monotonic time), never before; starting an
 * armed timer re-arms it. A periodic timer re-starts itself from its callback.
 *
 * Callbacks and re-entrancy: a timer callback runs from the loop (real clock: a libuv timer
 * callback; manual clock: from bm_clock_manual_advance, or from the loop for a timer due at
 * the current time), never inside a bm_clock_* or bm_timer_* call of the module that armed
 * it. It may call anything: start, stop or close any timer (its own included), free the
 * module that owns it. The manual clock is driven only from where the loop could run a
 * callback (the test's own code, not from inside a module's call).
 *
 * Ownership: whoever creates a clock frees it, after every timer made on it was closed (the
 * modules using it were freed); modules borrow it. A timer belongs to whoever made it and is
 * released with bm_timer_close, whose callback runs later from the loop (never inside the
 * call) and is the owner's cue that nothing of the timer is left: like a libuv handle's close
 * callback, it is where a struct that owns a timer may free itself. Run the loop after
 * freeing a clock so that its own handle closes.
 */
#ifndef BM_CLOCK_H
#define BM_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/** Milliseconds since the Unix epoch (CLOCK_REALTIME), read from the system. */
uint64_t bm_clock_now_ms(void);

/** Milliseconds from an arbitrary fixed point (CLOCK_MONOTONIC), read from the system. */
uint64_t bm_clock_mono_ms(void);

/** Microseconds from an arbitrary fixed point (CLOCK_MONOTONIC), read from the system. */
uint64_t bm_clock_mono_us(void);

/* ---- the injectable clock --------------------------------------------------------------- */

typedef struct bm_clock bm_clock_t;
typedef struct bm_timer bm_timer_t;

/** A timer's callback: the timer fired (it is not armed any more). */
typedef void (*bm_timer_fn)(bm_timer_t *t, void *ud);

/** Runs once after bm_timer_close, from the loop: the timer is gone. */
typedef void (*bm_timer_closed_fn)(void *ud);

/** The real clock: system time, timers on `loop` (borrowed; it must outlive the clock's
 *  timers). NULL on allocation failure. */
bm_clock_t *bm_clock_real_new(uv_loop_t *loop);

/**
 * A manual clock whose wall time starts at `wall_ms` (Unix ms) and whose monotonic time
 * starts at an arbitrary point well above zero (as the system's does). Timers due at the
 * current time fire from `loop` (borrowed); later ones only when bm_clock_manual_advance
 * reaches them. NULL on allocation failure.
 */
bm_clock_t *bm_clock_manual_new(uv_loop_t *loop, uint64_t wall_ms);

/**
 * Frees the clock. Every timer made on it must have been closed (asserted). Close
 * callbacks still pending run from the loop; run the loop afterwards. NULL is ignored.
 */
void bm_clock_free(bm_clock_t *c);

/** Wall time, Unix milliseconds. */
uint64_t bm_clock_wall_now(const bm_clock_t *c);

/** Monotonic time, milliseconds. */
uint64_t bm_clock_mono_now(const bm_clock_t *c);

/** Monotonic time, microseconds (for latency figures). */
uint64_t bm_clock_mono_now_us(const bm_clock_t *c);

/** True for a manual clock. */
bool bm_clock_is_manual(const bm_clock_t *c);

/**
 * Moves a manual clock's wall and monotonic time `ms` forward. Every timer due on the way
 * fires in order of its due time (first armed first among equals), with the clock standing
 * at that due time while its callback runs; timers armed by those callbacks fire too when
 * they fall due within the advance. Returns with the clock `ms` later. Must not be called
 * from a timer callback, nor on a real clock (asserted).
 */
void bm_clock_manual_advance(bm_clock_t *c, uint64_t ms);

/** Sets a manual clock's wall time (an NTP step: the monotonic time and the timers do not
 *  move). */
void bm_clock_manual_set_wall(bm_clock_t *c, uint64_t wall_ms);

/** A manual clock's earliest armed timer: true and the ms until it is due in *in_ms (0 when
 *  it is due now), or false when no timer is armed. */
bool bm_clock_manual_next(const bm_clock_t *c, uint64_t *in_ms);

/* ---- timers ------------------------------------------------------------------------------ */

/** A timer on `c` calling `fn(t, ud)`, not armed. NULL on allocation failure. */
bm_timer_t *bm_timer_new(bm_clock_t *c, bm_timer_fn fn, void *ud);

/** Arms the timer to fire once, `delay_ms` from now on the monotonic clock (re-arms it when
 *  armed already). The callback never runs inside this call, even for a delay of 0. */
void bm_timer_start(bm_timer_t *t, uint64_t delay_ms);

/** Disarms the timer (nothing happens when it is not armed). */
void bm_timer_stop(bm_timer_t *t);

/** True while the timer is armed. */
bool bm_timer_active(const bm_timer_t *t);

/** Milliseconds until an armed timer is due (0 when due now or not armed). */
uint64_t bm_timer_due_in(const bm_timer_t *t);

/**
 * Disarms and releases the timer: its callback never runs again, and `closed(ud)` (may be
 * NULL) runs once, later, from the loop, never inside this call; the timer's memory is gone
 * after that. The timer pointer must not be used after this call.
 */
void bm_timer_close(bm_timer_t *t, bm_timer_closed_fn closed, void *ud);

/* ---- slot arithmetic --------------------------------------------------------------------- */

/** The chain's time base. Zero-initialised means "unknown" (bm_slot_clock_valid is false). */
typedef struct bm_slot_clock {
    uint64_t genesis_ms;      /* genesis time in Unix milliseconds */
    uint32_t slot_ms;         /* SLOT_DURATION_MS, or SECONDS_PER_SLOT * 1000 */
    uint32_t slots_per_epoch; /* SLOTS_PER_EPOCH */
} bm_slot_clock_t;

/** True when the clock has a slot duration and an epoch length. */
bool bm_slot_clock_valid(const bm_slot_clock_t *c);

/** The slot at wall time `now_ms` (0 before genesis). */
uint64_t bm_slot_at(const bm_slot_clock_t *c, uint64_t now_ms);

/** Wall time (Unix ms) at which `slot` starts. */
uint64_t bm_slot_start_ms(const bm_slot_clock_t *c, uint64_t slot);

/** The epoch containing `slot`. */
uint64_t bm_epoch_of_slot(const bm_slot_clock_t *c, uint64_t slot);

/** The first slot of `epoch`. */
uint64_t bm_epoch_start_slot(const bm_slot_clock_t *c, uint64_t epoch);

/** The point `bps` basis points (1/10000) into `slot`, in Unix ms. */
uint64_t bm_slot_point_ms(const bm_slot_clock_t *c, uint64_t slot, uint32_t bps);

#endif /* BM_CLOCK_H */
