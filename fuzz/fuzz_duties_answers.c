/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the readers of node answers in the duty policies: the bit counter
 * of aggregation answers (bm_aggregate_count_bits, JSON and SSZ, both kinds) and the
 * liveness merge (bm_duties_liveness_merge). The first byte selects the Content-Type and
 * fork (low 3 bits) and where the rest is split into two answers A and B (as a fraction of
 * its length, high 5 bits); the body is copied into an allocation of exactly its size so
 * that ASan flags any read past the end. Properties: every reader gives the same result
 * twice; a count never exceeds its total; the merge is idempotent and does not depend on
 * the order of the answers (merge(A, B) == merge(B, A), merge(A, A) == merge(A)), and its
 * output is the same whatever split was chosen when both halves are unreadable.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "duties/aggregate.h"
#include "duties/duties.h"

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

static const char *const ctypes[] = {"application/json", "application/octet-stream", NULL,
                                     "application/octet-stream; q=1"};
static const char *const forks[] = {"phase0", "electra"};

static void count(bm_aggregate_kind_t kind, const char *ct, const char *fork, const uint8_t *p,
                  size_t n)
{
    size_t s1 = 0, t1 = 0, s2 = 0, t2 = 0;
    int r1 = bm_aggregate_count_bits(kind, ct, fork, p, n, &s1, &t1);
    int r2 = bm_aggregate_count_bits(kind, ct, fork, p, n, &s2, &t2);
    CHECK(r1 == r2);
    if (r1 == 0)
        CHECK(s1 == s2 && t1 == t2 && s1 <= t1);
}

/* The merge of `k` answers as a string (caller frees), with the readable count. */
static char *merge(bm_buf_t *const *ans, size_t k, int *readable)
{
    static const uint64_t idx[] = {0, 1, 2, 7, 18446744073709551615ull, 1};
    bm_str_t out = BM_STR_INIT;
    *readable = bm_duties_liveness_merge(idx, sizeof idx / sizeof idx[0], ans, k, NULL, &out);
    CHECK(*readable >= 0 && (size_t)*readable <= k);
    char *s = strdup(bm_str_data(&out));
    bm_str_dispose(&out);
    if (!s)
        abort();
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    memcpy(buf, data + 1, len);
    const char *ct = ctypes[sel & 3];
    const char *fork = forks[(sel >> 2) & 1];
    count(BM_AGGREGATE_ATTESTATION, ct, fork, buf, len);
    count(BM_AGGREGATE_CONTRIBUTION, ct, fork, buf, len);

    size_t cut = len * (sel >> 3) / 31;
    bm_buf_t *a = bm_buf_copy(buf, cut), *b = bm_buf_copy(buf + cut, len - cut);
    bm_buf_t *whole = bm_buf_copy(buf, len);
    if (!a || !b || !whole)
        abort();
    int ra, rab, rba, raa, rw, rw2;
    bm_buf_t *one[1] = {a}, *ab[2] = {a, b}, *ba[2] = {b, a}, *aa[2] = {a, a}, *w[1] = {whole};
    char *m_a = merge(one, 1, &ra);
    char *m_ab = merge(ab, 2, &rab);
    char *m_ba = merge(ba, 2, &rba);
    char *m_aa = merge(aa, 2, &raa);
    CHECK(strcmp(m_ab, m_ba) == 0 && rab == rba);
    CHECK(strcmp(m_a, m_aa) == 0 && raa == 2 * ra);
    char *m_w = merge(w, 1, &rw);
    char *m_w2 = merge(w, 1, &rw2);
    CHECK(strcmp(m_w, m_w2) == 0 && rw == rw2);
    if (rab == 0)
        CHECK(strcmp(m_ab, m_a) == 0); /* nothing readable: every index is not live */
    free(m_a);
    free(m_ab);
    free(m_ba);
    free(m_aa);
    free(m_w);
    free(m_w2);
    bm_buf_unref(a);
    bm_buf_unref(b);
    bm_buf_unref(whole);
    free(buf);
    return 0;
}
