/* SPDX-License-Identifier: MIT */
/*
 * hdrs: header storage. Strings go into chunks of at least 1 KiB that are never
 * reallocated, so the pointers in `items` stay valid while the list grows.
 */
#include "base/hdrs.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

struct bm_hdrs_chunk {
    struct bm_hdrs_chunk *next;
    size_t used;
    size_t cap;
    char data[];
};

#define CHUNK_MIN 1024

void bm_hdrs_init(bm_hdrs_t *h)
{
    memset(h, 0, sizeof *h);
}

void bm_hdrs_dispose(bm_hdrs_t *h)
{
    struct bm_hdrs_chunk *c = h->chunks;
    while (c) {
        struct bm_hdrs_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(h->items);
    memset(h, 0, sizeof *h);
}

void bm_hdrs_clear(bm_hdrs_t *h)
{
    /* Keep the newest chunk (usually the only one) for reuse; free the others. */
    struct bm_hdrs_chunk *c = h->chunks;
    if (c) {
        struct bm_hdrs_chunk *rest = c->next;
        while (rest) {
            struct bm_hdrs_chunk *next = rest->next;
            free(rest);
            rest = next;
        }
        c->next = NULL;
        c->used = 0;
    }
    h->n = 0;
}

/* Copies p[0..n) plus a NUL into chunk storage. */
static char *store(bm_hdrs_t *h, const char *p, size_t n)
{
    struct bm_hdrs_chunk *c = h->chunks;
    if (!c || c->cap - c->used < n + 1) {
        size_t cap = n + 1 > CHUNK_MIN ? n + 1 : CHUNK_MIN;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = h->chunks;
        h->chunks = c;
    }
    char *out = c->data + c->used;
    if (n)
        memcpy(out, p, n);
    out[n] = '\0';
    c->used += n + 1;
    return out;
}

int bm_hdrs_add(bm_hdrs_t *h, const char *name, size_t name_len, const char *value,
                size_t value_len)
{
    if (h->n == h->cap) {
        size_t ncap = h->cap ? h->cap * 2 : 16;
        bm_header_t *items = realloc(h->items, ncap * sizeof *items);
        if (!items)
            return BM_ENOMEM;
        h->items = items;
        h->cap = ncap;
    }
    char *n = store(h, name, name_len);
    char *v = n ? store(h, value, value_len) : NULL;
    if (!v)
        return BM_ENOMEM;
    h->items[h->n++] = (bm_header_t){n, v, name_len, value_len};
    return 0;
}

int bm_hdrs_add_z(bm_hdrs_t *h, const char *name, const char *value)
{
    return bm_hdrs_add(h, name, strlen(name), value, strlen(value));
}

size_t bm_hdrs_remove(bm_hdrs_t *h, const char *name)
{
    size_t out = 0, removed = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (bm_header_name_is(h->items[i].name, h->items[i].name_len, name)) {
            removed++;
            continue;
        }
        h->items[out++] = h->items[i];
    }
    h->n = out;
    return removed;
}

int bm_hdrs_set_z(bm_hdrs_t *h, const char *name, const char *value)
{
    bm_hdrs_remove(h, name);
    return bm_hdrs_add_z(h, name, value);
}

const char *bm_hdrs_get(const bm_hdrs_t *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++)
        if (bm_header_name_is(h->items[i].name, h->items[i].name_len, name))
            return h->items[i].value;
    return NULL;
}

bool bm_content_type_is_ssz(const char *ct)
{
    static const char ssz[] = "application/octet-stream";
    const size_t n = sizeof ssz - 1;
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return strncasecmp(ct, ssz, n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

bool bm_hdrs_is_ssz(const bm_hdrs_t *h)
{
    return h && bm_content_type_is_ssz(bm_hdrs_get(h, "content-type"));
}

int bm_hdrs_copy(bm_hdrs_t *dst, const bm_hdrs_t *src)
{
    for (size_t i = 0; i < src->n; i++) {
        const bm_header_t *f = &src->items[i];
        int rc = bm_hdrs_add(dst, f->name, f->name_len, f->value, f->value_len);
        if (rc)
            return rc;
    }
    return 0;
}

bool bm_header_name_is(const char *name, size_t len, const char *z)
{
    return strlen(z) == len && strncasecmp(name, z, len) == 0;
}

bool bm_header_is_hop_by_hop(const char *name, size_t len)
{
    /* Compared by length first: most fields are decided without a string comparison. */
    static const struct {
        const char *name;
        size_t len;
    } hop[] = {
        {"te", 2},
        {"host", 4},
        {"expect", 6},
        {"trailer", 7},
        {"upgrade", 7},
        {"connection", 10},
        {"keep-alive", 10},
        {"content-length", 14},
        {"proxy-connection", 16},
        {"transfer-encoding", 17},
        {"proxy-authenticate", 18},
        {"proxy-authorization", 19},
    };
    for (size_t i = 0; i < sizeof hop / sizeof hop[0] && hop[i].len <= len; i++)
        if (hop[i].len == len && strncasecmp(name, hop[i].name, len) == 0)
            return true;
    return false;
}

bool bm_header_listed_in_connection(const char *conn, const char *name, size_t len)
{
    const char *p = conn;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if ((size_t)(end - start) == len && strncasecmp(start, name, len) == 0)
            return true;
    }
    return false;
}
