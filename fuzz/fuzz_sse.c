/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for sse. Property: the input fed whole, cut at 1..3 positions derived
 * from the input, and (for inputs up to 2 KiB) fed one byte at a time gives the identical
 * transcript: every event (topic, data, id), comment and dropped-event report, in order.
 * Small limits (2 KiB data, 128-byte lines) make the drop-and-resync path reachable.
 * ASan and UBSan watch every run for out-of-bounds access and undefined behaviour.
 * The byte-at-a-time pass runs sse_plain.c, the same parser built without coverage
 * instrumentation (see there): it checks the property without tracing every comparison of
 * up to 2,048 calls, which made this harness the slowest (about 1k executions a second).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "http/sse.h"

/* sse_plain.c: src/http/sse.c under these names */
bm_sse_t *bm_sse_plain_new(const bm_sse_config_t *cfg);
void bm_sse_plain_free(bm_sse_t *p);
int bm_sse_plain_feed(bm_sse_t *p, const void *data, size_t len);
int64_t bm_sse_plain_retry_ms(const bm_sse_t *p);
bm_sse_stats_t bm_sse_plain_stats(const bm_sse_t *p);

typedef struct {
    bm_sse_t *(*new_)(const bm_sse_config_t *cfg);
    void (*free_)(bm_sse_t *p);
    int (*feed)(bm_sse_t *p, const void *data, size_t len);
    int64_t (*retry_ms)(const bm_sse_t *p);
    bm_sse_stats_t (*stats)(const bm_sse_t *p);
} sse_ops_t;

static const sse_ops_t TRACED = {bm_sse_new, bm_sse_free, bm_sse_feed, bm_sse_retry_ms,
                                 bm_sse_stats};
static const sse_ops_t PLAIN = {bm_sse_plain_new, bm_sse_plain_free, bm_sse_plain_feed,
                                bm_sse_plain_retry_ms, bm_sse_plain_stats};

#define MAX_DATA 2048
#define MAX_LINE 128

static void put_field(bm_str_t *s, const char *p, size_t n)
{
    bm_str_printf(s, "%zu:", n);
    if (n)
        bm_str_append(s, p, n);
}

static int on_event(void *ud, const bm_sse_event_t *ev)
{
    bm_str_t *s = ud;
    if (ev->topic_len == 0 || ev->data[ev->data_len] != '\0' || ev->id[ev->id_len] != '\0')
        __builtin_trap();
    bm_str_puts(s, "E");
    put_field(s, ev->topic, ev->topic_len);
    put_field(s, ev->data, ev->data_len);
    put_field(s, ev->id, ev->id_len);
    return 0;
}

static void on_comment(void *ud, const char *text, size_t len)
{
    if (len > MAX_LINE)
        __builtin_trap();
    bm_str_puts(ud, "C");
    put_field(ud, text, len);
}

static void on_error(void *ud, int err, const char *reason)
{
    bm_str_printf(ud, "X%d", err);
}

/* Feeds data cut at cuts[0..ncuts) (ascending) to the parser of ops and returns the
 * transcript in *out. */
static void run(const sse_ops_t *ops, const uint8_t *data, size_t size, const size_t *cuts,
                size_t ncuts, bm_str_t *out)
{
    bm_sse_config_t cfg = {.max_data = MAX_DATA,
                           .max_line = MAX_LINE,
                           .on_event = on_event,
                           .on_comment = on_comment,
                           .on_error = on_error,
                           .ud = out};
    bm_sse_t *p = ops->new_(&cfg);
    if (!p)
        abort();
    size_t at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : size;
        if (ops->feed(p, data + at, end - at) != 0)
            __builtin_trap();
        at = end;
    }
    bm_sse_stats_t st = ops->stats(p);
    if (st.bytes != size)
        __builtin_trap();
    bm_str_printf(out, "|%llu/%llu/%llu/%llu/%lld", (unsigned long long)st.events,
                  (unsigned long long)st.comments, (unsigned long long)st.dropped,
                  (unsigned long long)st.empty, (long long)ops->retry_ms(p));
    ops->free_(p);
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void must_equal(const bm_str_t *a, const bm_str_t *b)
{
    if (bm_str_len(a) != bm_str_len(b) || memcmp(bm_str_data(a), bm_str_data(b), bm_str_len(a)))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bm_str_t whole = BM_STR_INIT, split = BM_STR_INIT;
    run(&TRACED, data, size, NULL, 0, &whole);

    /* 1..3 cut positions from an FNV-1a hash of the input */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ULL;
    size_t cuts[3], ncuts = 1 + (size_t)(h % 3);
    for (size_t i = 0; i < ncuts; i++) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        cuts[i] = size ? (size_t)((h >> 33) % (size + 1)) : 0;
    }
    qsort(cuts, ncuts, sizeof *cuts, cmp_size);
    run(&TRACED, data, size, cuts, ncuts, &split);
    must_equal(&whole, &split);

    if (size <= 2048) {
        size_t *all = malloc((size ? size : 1) * sizeof *all);
        if (!all)
            abort();
        for (size_t i = 0; i + 1 < size; i++)
            all[i] = i + 1;
        bm_str_clear(&split);
        run(&PLAIN, data, size, all, size ? size - 1 : 0, &split);
        must_equal(&whole, &split);
        free(all);
    }
    bm_str_dispose(&whole);
    bm_str_dispose(&split);
    return 0;
}
