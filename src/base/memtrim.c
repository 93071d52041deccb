/* SPDX-License-Identifier: MIT */
#include "base/memtrim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "base/log.h"

static struct {
    uv_timer_t timer;
    bool on;      /* the timer runs */
    bool closing; /* its handle is being closed: it cannot start again yet */
    bm_memtrim_stats_t st;
} g_trim;

bool bm_memtrim_now(void)
{
    uint64_t t0 = uv_hrtime();
    bool released = false;
#if defined(__GLIBC__)
    released = malloc_trim(0) == 1;
#endif
    uint64_t us = (uv_hrtime() - t0) / 1000;
    bm_memtrim_stats_t *s = &g_trim.st;
    s->runs++;
    s->released += released;
    s->last_us = us;
    if (us > s->max_us)
        s->max_us = us;
    bm_log(BM_LOG_DEBUG, "memory: %s in %llu us",
           released ? "free pages given back to the kernel" : "no free page to give back",
           (unsigned long long)us);
    return released;
}

static void on_timer(uv_timer_t *t)
{
    (void)t;
    bm_memtrim_now();
}

void bm_memtrim_start(uv_loop_t *loop, uint64_t every_ms)
{
    if (g_trim.on || g_trim.closing)
        return;
    if (!every_ms)
        every_ms = BM_MEMTRIM_EVERY_MS;
    uv_timer_init(loop, &g_trim.timer);
    g_trim.on = true;
    uv_timer_start(&g_trim.timer, on_timer, every_ms, every_ms);
    uv_unref((uv_handle_t *)&g_trim.timer); /* never the reason the loop runs */
}

static void on_closed(uv_handle_t *h)
{
    (void)h;
    g_trim.closing = false;
}

void bm_memtrim_stop(void)
{
    if (!g_trim.on)
        return;
    g_trim.on = false;
    g_trim.closing = true;
    uv_close((uv_handle_t *)&g_trim.timer, on_closed);
}

bm_memtrim_stats_t bm_memtrim_stats(void)
{
    return g_trim.st;
}
