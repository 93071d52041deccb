/* SPDX-License-Identifier: MIT */
/* answerhead: what the read path reads of a node's answer head (see answerhead.h). */
#include "read/answerhead.h"

#include <stdlib.h>
#include <string.h>

/* Whether a Connection value holds a token other than keep-alive and close. */
static bool names_fields(const char *conn)
{
    for (const char *p = conn; *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ",");
        size_t t = n;
        while (t && (p[t - 1] == ' ' || p[t - 1] == '\t'))
            t--;
        if (t && !(t == 10 && bm_ascii_case_eq(p, "keep-alive", 10)) &&
            !(t == 5 && bm_ascii_case_eq(p, "close", 5)))
            return true;
        p += n;
    }
    return false;
}

void bm_answer_head_scan(const bm_hdrs_t *h, bm_answer_head_t *hi)
{
    memset(hi, 0, sizeof *hi);
    for (size_t i = 0; i < h->n; i++) {
        const bm_header_t *f = &h->items[i];
        const char **slot = NULL;
        if (f->name_len == 10 && bm_ascii_case_eq(f->name, "connection", 10))
            slot = &hi->connection;
        else if (f->name_len == 12 && bm_ascii_case_eq(f->name, "content-type", 12))
            slot = &hi->content_type;
        else if (f->name_len == 14 && bm_ascii_case_eq(f->name, "content-length", 14))
            slot = &hi->content_length;
        else if (f->name_len == 11 && bm_ascii_case_eq(f->name, "retry-after", 11))
            slot = &hi->retry_after;
        else if (f->name_len == 17 && bm_ascii_case_eq(f->name, "transfer-encoding", 17))
            hi->chunked = true;
        if (slot && !*slot)
            *slot = f->value;
    }
    hi->connection_lists = hi->connection && names_fields(hi->connection);
}

void bm_answer_head_copy(bm_hdrs_t *dst, const bm_hdrs_t *src, const bm_answer_head_t *hi)
{
    bm_hdrs_clear(dst);
    for (size_t i = 0; i < src->n; i++) {
        const bm_header_t *h = &src->items[i];
        if (hi->connection) {
            if (h->name_len == 10 && bm_ascii_case_eq(h->name, "connection", 10))
                continue;
            if (bm_header_listed_in_connection(hi->connection, h->name, h->name_len))
                continue;
        }
        bm_hdrs_add(dst, h->name, h->name_len, h->value, h->value_len);
    }
}

int64_t bm_answer_head_length(const bm_answer_head_t *hi)
{
    if (hi->chunked || !hi->content_length || !*hi->content_length)
        return -1;
    char *end;
    unsigned long long v = strtoull(hi->content_length, &end, 10);
    if (*end != '\0' || hi->content_length[0] == '-')
        return -1;
    return (int64_t)v;
}

uint32_t bm_answer_retry_after_ms(const char *v, uint32_t dflt)
{
    char *end;
    if (!v || !*v)
        return dflt;
    unsigned long s = strtoul(v, &end, 10);
    if (*end != '\0' || v[0] == '-')
        return dflt;
    return s > 3600 ? 3600000u : (uint32_t)(s * 1000);
}
