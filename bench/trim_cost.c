/* SPDX-License-Identifier: MIT */
/*
 * trim_cost: what one malloc_trim(0) costs the loop that runs it (server.memoryTrimInterval,
 * base/memtrim.h), for a heap of a given size half freed: HEAP_MIB of blocks of 64 bytes to
 * 64 + MAX_BLOCK bytes, every other one freed, then two trims timed (the first gives the free
 * pages back, the second walks the same free memory again with nothing new to give).
 *   cc -O2 -o /tmp/trim_cost bench/trim_cost.c && /tmp/trim_cost 64 8192
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atol(argv[1]) <= 0 || atol(argv[2]) <= 0) {
        fprintf(stderr, "usage: trim_cost HEAP_MIB MAX_BLOCK\n");
        return 2;
    }
    size_t total = (size_t)atol(argv[1]) << 20, max_block = (size_t)atol(argv[2]);
    size_t cap = total / 64 + 1, n = 0, got = 0;
    char **p = malloc(cap * sizeof *p);
    if (!p)
        return 1;
    srand(1);
    while (got < total && n < cap) {
        size_t s = 64 + (size_t)rand() % max_block;
        if (!(p[n] = malloc(s)))
            return 1;
        memset(p[n], 1, s); /* resident, as a cache's entries are */
        got += s;
        n++;
    }
    for (size_t i = 0; i < n; i += 2)
        free(p[i]);
    double t = now_ms();
    int released = malloc_trim(0);
    double first = now_ms() - t;
    t = now_ms();
    malloc_trim(0);
    double second = now_ms() - t;
    printf("%zu MiB in %zu blocks of up to %zu bytes, half freed: a trim took %.2f ms "
           "(gave memory back: %s), the next one %.2f ms\n",
           total >> 20, n, 64 + max_block, first, released ? "yes" : "no", second);
    return 0;
}
