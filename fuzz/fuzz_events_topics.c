/* SPDX-License-Identifier: MIT */
/*
 * fuzz_events_topics: arbitrary bytes as the query string of GET /eth/v1/events, parsed
 * for its `topics` (both forms, percent-decoded).
 *
 * Properties checked on every input:
 *   - no crash, no leak, no undefined behaviour (ASan, LSan, UBSan), with and without room
 *     for the offending name (which is always NUL-terminated and within bounds);
 *   - the same text always gives the same result;
 *   - "split the input anywhere" in the form that applies to a query string: cut at any
 *     '&', the two halves parse to the union of the whole (a valid whole has valid halves;
 *     a whole refused for a bad name has a half refused too);
 *   - a mask that parses re-serialises, in the comma form and in the repeated form, to a
 *     query that parses to the same mask.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cluster/events.h"

static int parse(const char *q, size_t n, bm_topic_mask_t *m)
{
    char bad[32];
    memset(bad, 'x', sizeof bad);
    *m = 0;
    int rc = bm_events_parse_topics(q, n, m, bad, sizeof bad);
    if (rc == BM_EINVAL && memchr(bad, '\0', sizeof bad) == NULL)
        abort();
    if (rc != 0 && rc != BM_EINVAL && rc != BM_ENOTFOUND && rc != BM_ENOMEM)
        abort();
    return rc;
}

static void reserialise(bm_topic_mask_t m, bool comma)
{
    char q[2048];
    size_t o = 0;
    for (int t = 0; t < BM_TOPIC_COUNT; t++) {
        if (!(m & BM_TOPIC_BIT(t)))
            continue;
        const char *name = bm_topic_name((bm_topic_t)t);
        if (comma)
            o += (size_t)snprintf(q + o, sizeof q - o, "%s%s", o ? "," : "topics=", name);
        else
            o += (size_t)snprintf(q + o, sizeof q - o, "%stopics=%s", o ? "&" : "", name);
    }
    bm_topic_mask_t back = 0;
    if (bm_events_parse_topics(q, o, &back, NULL, 0) != 0 || back != m)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    const char *q = (const char *)data;
    bm_topic_mask_t m, m2;
    int rc = parse(q, size, &m);
    if (parse(q, size, &m2) != rc || (rc == 0 && m2 != m))
        abort();
    bm_topic_mask_t nm = 0;
    if (bm_events_parse_topics(q, size, &nm, NULL, 0) != rc) /* no room for the name */
        abort();
    if (rc == BM_ENOMEM)
        return 0;
    for (size_t i = 0; i < size; i++) {
        if (q[i] != '&')
            continue;
        bm_topic_mask_t a, b;
        int ra = parse(q, i, &a), rb = parse(q + i + 1, size - i - 1, &b);
        if (ra == BM_ENOMEM || rb == BM_ENOMEM)
            return 0;
        if (rc == 0) {
            /* both halves fine (or without topics), and together the whole */
            if ((ra != 0 && ra != BM_ENOTFOUND) || (rb != 0 && rb != BM_ENOTFOUND))
                abort();
            if (((ra == 0 ? a : 0) | (rb == 0 ? b : 0)) != m)
                abort();
        } else if (rc == BM_EINVAL) {
            if (ra != BM_EINVAL && rb != BM_EINVAL)
                abort();
        } else if (ra != BM_ENOTFOUND || rb != BM_ENOTFOUND) {
            abort();
        }
    }
    if (rc == 0) {
        reserialise(m, true);
        reserialise(m, false);
    }
    return 0;
}
