/* SPDX-License-Identifier: MIT */
/*
 * breaker: the circuit breaker's state machine (see breaker.h). Every transition goes
 * through set_state, which logs it in debug builds.
 */
#include "read/breaker.h"

#include <stddef.h>

#include "base/defaults.h"
#include "base/log.h"

void bm_breaker_opts_default(bm_breaker_opts_t *o)
{
    o->failure_threshold = BM_DEFAULT_FAILSAFE_CB_FAILURE_THRESHOLD;
    o->success_threshold = BM_DEFAULT_FAILSAFE_CB_SUCCESS_THRESHOLD;
    o->half_open_after_ms = BM_DEFAULT_FAILSAFE_CB_HALF_OPEN_AFTER_MS;
}

static void set_state(bm_breaker_t *b, bm_breaker_state_t s, uint64_t now_ms)
{
    if (b->state == s)
        return;
    bm_log(BM_LOG_DEBUG, "breaker: %s -> %s", bm_breaker_state_name(b->state),
           bm_breaker_state_name(s));
    b->state = s;
    b->failures = 0;
    b->successes = 0;
    if (s == BM_BREAKER_OPEN) {
        b->opened_ms = now_ms;
        b->opens++;
    }
}

void bm_breaker_init(bm_breaker_t *b, const bm_breaker_opts_t *o)
{
    *b = (bm_breaker_t){0};
    if (o)
        b->opts = *o;
    else
        bm_breaker_opts_default(&b->opts);
    if (b->opts.success_threshold == 0)
        b->opts.success_threshold = 1;
}

bool bm_breaker_allows(bm_breaker_t *b, uint64_t now_ms)
{
    switch (b->state) {
    case BM_BREAKER_CLOSED:
        return true;
    case BM_BREAKER_OPEN:
        if (now_ms < b->opened_ms + b->opts.half_open_after_ms)
            return false;
        set_state(b, BM_BREAKER_HALF_OPEN, now_ms);
        b->probes = 0;
        return true;
    default:
        return b->probes == 0;
    }
}

void bm_breaker_start(bm_breaker_t *b)
{
    if (b->state == BM_BREAKER_HALF_OPEN)
        b->probes++;
}

void bm_breaker_done(bm_breaker_t *b, bool failed, bool cancelled, uint64_t now_ms)
{
    if (b->state == BM_BREAKER_HALF_OPEN && b->probes > 0)
        b->probes--;
    if (cancelled)
        return;
    switch (b->state) {
    case BM_BREAKER_CLOSED:
        if (!failed) {
            b->failures = 0;
        } else if (b->opts.failure_threshold && ++b->failures >= b->opts.failure_threshold) {
            set_state(b, BM_BREAKER_OPEN, now_ms);
        }
        break;
    case BM_BREAKER_HALF_OPEN:
        if (failed)
            set_state(b, BM_BREAKER_OPEN, now_ms);
        else if (++b->successes >= b->opts.success_threshold)
            set_state(b, BM_BREAKER_CLOSED, now_ms);
        break;
    default:
        /* open: an attempt sent before it opened ended; it proves nothing new */
        break;
    }
}

const char *bm_breaker_state_name(bm_breaker_state_t s)
{
    switch (s) {
    case BM_BREAKER_CLOSED:
        return "closed";
    case BM_BREAKER_OPEN:
        return "open";
    case BM_BREAKER_HALF_OPEN:
        return "half-open";
    }
    return "invalid";
}
