/* SPDX-License-Identifier: MIT */
/*
 * test_memtrim: the once-a-minute trim of the C library's free memory: its timer trims on
 * time and counts, an interval of 0 turns it off and a new one on again (a reload), it
 * never keeps the loop alive, and (glibc's own allocator only, so not
 * under AddressSanitizer, whose allocator keeps freed memory in quarantine) free pages in
 * the middle of the heap go back to the kernel.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/memtrim.h"
#include "loop_guard.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static void test_timer_trims_on_time_and_counts(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    bm_memtrim_stats_t before = bm_memtrim_stats();
    bm_memtrim_set(&loop, 20);
    assert_int_equal(bm_memtrim_stats().every_ms, 20);
    RUN_FOR(&loop, 10);
    assert_int_equal(bm_memtrim_stats().runs, before.runs); /* not before its interval */
    RUN_UNTIL(&loop, bm_memtrim_stats().runs >= before.runs + 3, 2000);
    bm_memtrim_stats_t after = bm_memtrim_stats();
    assert_true(after.runs >= before.runs + 3);
    assert_true(after.max_us >= after.last_us);
    /* the timer alone does not keep the loop running: uv_run returns at once */
    assert_int_equal(uv_run(&loop, UV_RUN_NOWAIT), 0);
    /* a reload to 0 turns it off, and to an interval on again, with the new interval */
    bm_memtrim_set(&loop, 0);
    assert_int_equal(bm_memtrim_stats().every_ms, 0);
    uint64_t off = bm_memtrim_stats().runs;
    RUN_FOR(&loop, 60);
    assert_int_equal(bm_memtrim_stats().runs, off);
    bm_memtrim_set(&loop, 5);
    assert_int_equal(bm_memtrim_stats().every_ms, 5);
    RUN_UNTIL(&loop, bm_memtrim_stats().runs > off, 2000);
    assert_true(bm_memtrim_stats().runs > off);
    bm_memtrim_stop();
    assert_int_equal(bm_memtrim_stats().every_ms, 0);
    uint64_t stopped = bm_memtrim_stats().runs;
    RUN_FOR(&loop, 60);
    assert_int_equal(bm_memtrim_stats().runs, stopped); /* stopped means stopped */
    /* and it can start again once its handle closed (the run above closed it) */
    bm_memtrim_set(&loop, 5);
    RUN_UNTIL(&loop, bm_memtrim_stats().runs > stopped, 2000);
    assert_true(bm_memtrim_stats().runs > stopped);
    bm_memtrim_stop();
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

#if !defined(UNDER_ASAN) && defined(__GLIBC__)
static long resident_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    long size = 0, res = 0;
    assert_int_equal(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}
#endif

static void test_free_pages_in_the_heap_go_back(void **state)
{
    (void)state;
#if defined(UNDER_ASAN) || !defined(__GLIBC__)
    skip(); /* glibc's allocator is not the one in use */
#else
    /* 48 MiB in small chunks (below the mmap threshold: on the heap), every chunk written;
     * then all freed but one in 64, so that the free memory lies between live chunks, not
     * at the top, where free() would give it back by itself */
    enum { N = 96 * 1024, SIZE = 512 };
    char **p = calloc(N, sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < N; i++) {
        p[i] = malloc(SIZE);
        assert_non_null(p[i]);
        memset(p[i], 0x5a, SIZE);
    }
    for (size_t i = 0; i < N; i++)
        if (i % 64 != 63) {
            free(p[i]);
            p[i] = NULL;
        }
    long held = resident_kb();
    assert_true(bm_memtrim_now());
    long trimmed = resident_kb();
    /* 63 of 64 chunks were free: nearly all of the 48 MiB, in runs of 31.5 KiB, so about
     * seven of every eight pages were whole free pages */
    assert_true(held - trimmed > 32 * 1024);
    for (size_t i = 0; i < N; i++)
        free(p[i]);
    free(p);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timer_trims_on_time_and_counts),
        cmocka_unit_test(test_free_pages_in_the_heap_go_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
