/* SPDX-License-Identifier: MIT */
/*
 * recycle: a small stack of objects of one kind kept for reuse instead of freed. Both
 * upstream clients (the native HTTP/1.1 one and the libcurl one) start and end a transfer
 * object for every request; recycling them keeps malloc, free and the setup of what a
 * transfer keeps between uses (header storage, a timer, a libcurl handle) off the hot path.
 *
 * A recycled object is laid out with what belongs to one use first and what is kept
 * between uses after it: taking an object clears the first `reset` bytes and leaves the
 * rest as the last user left it.
 *
 * Ownership: the stack holds the objects put on it and frees none of them; its owner takes
 * every one back (bm_recycle_take with reset 0) and frees it before going away.
 */
#ifndef BM_RECYCLE_H
#define BM_RECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define BM_RECYCLE_MAX 64 /* objects kept at most; more are freed by their owner */

typedef struct bm_recycle {
    void *items[BM_RECYCLE_MAX];
    size_t n;
} bm_recycle_t;

/**
 * The object put back last, with its first `reset` bytes zeroed, or NULL when none is
 * kept. The caller owns it.
 */
static inline void *bm_recycle_take(bm_recycle_t *r, size_t reset)
{
    if (!r->n)
        return NULL;
    void *obj = r->items[--r->n];
    memset(obj, 0, reset);
    return obj;
}

/**
 * An object for a new use: the one put back last with its first `reset` bytes zeroed, or,
 * when none is kept, a new zeroed one of `size` bytes (NULL when out of memory). The caller
 * owns it.
 */
static inline void *bm_recycle_get(bm_recycle_t *r, size_t size, size_t reset)
{
    void *obj = bm_recycle_take(r, reset);
    return obj ? obj : calloc(1, size);
}

/**
 * Keeps `obj` for a later bm_recycle_take: true, or false when the stack is full and the
 * caller still owns (and frees) `obj`.
 */
static inline bool bm_recycle_put(bm_recycle_t *r, void *obj)
{
    if (r->n == BM_RECYCLE_MAX)
        return false;
    r->items[r->n++] = obj;
    return true;
}

#endif /* BM_RECYCLE_H */
