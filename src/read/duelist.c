/* SPDX-License-Identifier: MIT */
/*
 * duelist: one timer for many waiting items, earliest first (see duelist.h).
 */
#include "read/duelist.h"

#include <stdlib.h>

struct bm_duelist {
    uv_timer_t timer;  /* first: the struct is freed in the timer's close callback */
    uint64_t timer_at; /* loop ms the timer is armed for; 0: not armed */
    bm_duelink_t *first, *last;
    uint64_t seq; /* stamps each scheduling */
    bm_duelist_fn fn;
    void *ud;
};

static void on_timer(uv_timer_t *t);

bm_duelist_t *bm_duelist_new(uv_loop_t *loop, bm_duelist_fn fn, void *ud)
{
    bm_duelist_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    uv_timer_init(loop, &l->timer);
    l->timer.data = l;
    uv_unref((uv_handle_t *)&l->timer);
    l->fn = fn;
    l->ud = ud;
    return l;
}

static void on_closed(uv_handle_t *h)
{
    free(h->data);
}

void bm_duelist_free(bm_duelist_t *l)
{
    if (l)
        uv_close((uv_handle_t *)&l->timer, on_closed);
}

void bm_duelist_cancel(bm_duelist_t *l, bm_duelink_t *d)
{
    if (!d->at)
        return;
    *(d->prev ? &d->prev->next : &l->first) = d->next;
    *(d->next ? &d->next->prev : &l->last) = d->prev;
    d->prev = d->next = NULL;
    d->at = 0;
}

/* Arms the timer for `at` unless it fires earlier already. */
static void arm(bm_duelist_t *l, uint64_t at)
{
    if (l->timer_at && l->timer_at <= at)
        return;
    uint64_t now = uv_now(l->timer.loop);
    l->timer_at = at;
    uv_timer_start(&l->timer, on_timer, at > now ? at - now : 0, 0);
}

void bm_duelist_schedule(bm_duelist_t *l, bm_duelink_t *d, uint64_t at)
{
    bm_duelist_cancel(l, d);
    bm_duelink_t *before = l->last;
    while (before && before->at > at)
        before = before->prev;
    d->prev = before;
    d->next = before ? before->next : l->first;
    *(d->next ? &d->next->prev : &l->last) = d;
    *(before ? &before->next : &l->first) = d;
    d->at = at;
    d->seq = ++l->seq;
    arm(l, at);
}

/* Runs every item due, each once: one listed again during the pass (by itself or another)
 * waits for the next. */
static void on_timer(uv_timer_t *t)
{
    bm_duelist_t *l = t->data;
    uint64_t now = uv_now(t->loop), seq = l->seq;
    l->timer_at = 0;
    bm_duelink_t *d;
    while ((d = l->first) && d->at <= now && d->seq <= seq) {
        bm_duelist_cancel(l, d);
        l->fn(d, l->ud);
    }
    if (l->first)
        arm(l, l->first->at);
}
