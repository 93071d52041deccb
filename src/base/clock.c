/* SPDX-License-Identifier: MIT */
/*
 * clock: thin wrappers over clock_gettime and the slot formulas of the consensus specs
 * (get_slot_component_duration_ms(bps) = bps * SLOT_DURATION_MS // 10000).
 */
#include "base/clock.h"

#include <time.h>

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
