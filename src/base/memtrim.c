/* SPDX-License-Identifier: MIT */
#include "base/memtrim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "base/log.h"

static struct {
    uv_timer_t timer;
    bool on;      /* the timer's handle is open (st.every_ms says whether it runs) */
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

void bm_memtrim_set(uv_loop_t *loop, uint64_t every_ms)
{
    if (g_trim.closing)
        return; /* set after a stop: the process is ending */
    if (!g_trim.on) {
        if (!every_ms)
            return;
        uv_timer_init(loop, &g_trim.timer);
        uv_unref((uv_handle_t *)&g_trim.timer); /* never the reason the loop runs */
        g_trim.on = true;
    }
    if (every_ms == g_trim.st.every_ms)
        return;
    g_trim.st.every_ms = every_ms;
    if (every_ms)
        uv_timer_start(&g_trim.timer, on_timer, every_ms, every_ms);
    else
        uv_timer_stop(&g_trim.timer);
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
    g_trim.st.every_ms = 0;
    uv_close((uv_handle_t *)&g_trim.timer, on_closed);
}

bm_memtrim_stats_t bm_memtrim_stats(void)
{
    return g_trim.st;
}
