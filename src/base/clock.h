/* SPDX-License-Identifier: MIT */
/*
 * clock: wall-clock and monotonic time in milliseconds, and the slot arithmetic of the
 * beacon chain (genesis time + slot duration). Slots are wall-clock based by definition,
 * so slot math uses the realtime clock; durations and timeouts use the monotonic one.
 */
#ifndef BM_CLOCK_H
#define BM_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

/** Milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t bm_clock_now_ms(void);

/** Milliseconds from an arbitrary fixed point (CLOCK_MONOTONIC); for durations only. */
uint64_t bm_clock_mono_ms(void);

/** Microseconds from an arbitrary fixed point (CLOCK_MONOTONIC); for latency figures. */
uint64_t bm_clock_mono_us(void);

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
