/* SPDX-License-Identifier: MIT */
/*
 * memtrim: gives the C library's free memory back to the kernel, once a minute.
 *
 * glibc's malloc keeps the pages of freed chunks. A long run that churns the cache, answer
 * bodies and connection state leaves whole free pages scattered through its heap, and the
 * process's resident memory creeps up although what it holds does not grow: in the soak, a
 * steady 15-30 kB a minute while the live heap, traced with heaptrack, stayed flat, and
 * malloc_trim(0) called on that process gave the creep back. malloc_trim(0) returns every
 * whole free page (madvise), so resident memory follows what is held.
 *
 * One per process (the C library's heap is): set by main from server.memoryTrimInterval (and
 * again on a reload), read by the status page. The trim runs from a loop timer that does not
 * keep the loop alive, on the loop that serves duties, so how long it takes is kept and
 * shown: it grows with the free memory it walks (about 4 ms for a 64 MiB heap half freed,
 * 40-60 ms for 512 MiB: bench/trim_cost.c, glibc 2.36), which is why the interval can be
 * longer or off. Without glibc it does nothing.
 */
#ifndef BM_MEMTRIM_H
#define BM_MEMTRIM_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct bm_memtrim_stats {
    uint64_t every_ms; /* the interval now, 0 when the timer is off */
    uint64_t runs;     /* trims done */
    uint64_t released; /* trims that gave memory back */
    uint64_t last_us;  /* how long the last one took */
    uint64_t max_us;   /* and the longest */
} bm_memtrim_stats_t;

/**
 * Trims every `every_ms` milliseconds on `loop` from now on; 0 turns the timer off. Called
 * again (a reload), a new interval restarts the timer, the same one leaves it as it is.
 * The loop must stay the same until bm_memtrim_stop.
 */
void bm_memtrim_set(uv_loop_t *loop, uint64_t every_ms);

/** One trim now, counted like the timer's. Returns whether memory was given back. */
bool bm_memtrim_now(void);

/** Stops the timer and closes its handle (the loop must run once more to finish it). */
void bm_memtrim_stop(void);

/** The counts so far. */
bm_memtrim_stats_t bm_memtrim_stats(void);

#endif /* BM_MEMTRIM_H */
