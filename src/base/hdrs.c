/* SPDX-License-Identifier: MIT */
/*
 * hdrs: header storage. Strings go into chunks of at least 1 KiB that are never
 * reallocated, so the pointers in `items` stay valid while the list grows.
 */
#include "base/hdrs.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"

struct bm_hdrs_chunk {
    struct bm_hdrs_chunk *next;
    size_t used;
    size_t cap;
    char data[];
};

/* A chunk and its header stay below 1,008 bytes, the largest request glibc serves from its
 * small bins: a larger one first consolidates the fast bins, which cost ~2k instructions
 * per allocation where answers' fields are copied into fresh lists (the duty races). */
#define CHUNK_MIN (1000 - sizeof(struct bm_hdrs_chunk))

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

/* `need` bytes of chunk storage that never move, or NULL. */
static char *reserve(bm_hdrs_t *h, size_t need)
{
    struct bm_hdrs_chunk *c = h->chunks;
    if (!c || c->cap - c->used < need) {
        size_t cap = need > CHUNK_MIN ? need : CHUNK_MIN;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = h->chunks;
        h->chunks = c;
    }
    char *out = c->data + c->used;
    c->used += need;
    return out;
}

int bm_hdrs_add(bm_hdrs_t *h, const char *name, size_t name_len, const char *value,
                size_t value_len)
{
    bm_header_t *items = bm_grow(h->items, h->n, &h->cap, sizeof *items, 16);
    if (!items)
        return BM_ENOMEM;
    h->items = items;
    /* name and value side by side: one reservation and one bounds check per field */
    char *n = reserve(h, name_len + 1 + value_len + 1);
    if (!n)
        return BM_ENOMEM;
    char *v = n + name_len + 1;
    if (name_len)
        memcpy(n, name, name_len);
    n[name_len] = '\0';
    if (value_len)
        memcpy(v, value, value_len);
    v[value_len] = '\0';
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
    size_t len = strlen(name);
    for (size_t i = 0; i < h->n; i++)
        if (h->items[i].name_len == len && bm_ascii_case_eq(h->items[i].name, name, len))
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
    return strlen(z) == len && bm_ascii_case_eq(name, z, len);
}

bool bm_header_is_hop_by_hop(const char *name, size_t len)
{
    /* The length picks the candidates: most fields are decided without a string comparison
     * (this runs for every field of every proxied head). */
#define IS(lit) bm_ascii_case_eq(name, lit, sizeof lit - 1)
    switch (len) {
    case 2:
        return IS("te");
    case 4:
        return IS("host");
    case 6:
        return IS("expect");
    case 7:
        return IS("trailer") || IS("upgrade");
    case 10:
        return IS("connection") || IS("keep-alive");
    case 14:
        return IS("content-length");
    case 16:
        return IS("proxy-connection");
    case 17:
        return IS("transfer-encoding");
    case 18:
        return IS("proxy-authenticate");
    case 19:
        return IS("proxy-authorization");
    default:
        return false;
    }
#undef IS
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
        if ((size_t)(end - start) == len && bm_ascii_case_eq(start, name, len))
            return true;
    }
    return false;
}

/* tchar (RFC 9110 5.6.2): the characters of methods and field names. */
const unsigned char bm_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1,  ['~'] = 1, ['0'] = 1,
    ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1,  ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,  ['F'] = 1, ['G'] = 1,
    ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1,  ['N'] = 1, ['O'] = 1,
    ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,  ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,  ['d'] = 1, ['e'] = 1,
    ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1,  ['l'] = 1, ['m'] = 1,
    ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1,  ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};
