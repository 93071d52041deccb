/* SPDX-License-Identifier: MIT */
/*
 * peers: the per-client connection counts (see peers.h). Separate chaining over a power of
 * two of buckets that doubles when the table holds more addresses than buckets, so a lookup
 * stays a hash and a short walk however many clients connect; one allocation per address,
 * freed with its last connection.
 */
#include "http/peers.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BUCKETS 64

typedef struct entry {
    struct entry *next;
    uint32_t hash;
    uint32_t count;
    char addr[]; /* NUL-terminated */
} entry_t;

struct bm_peers {
    entry_t **buckets;
    size_t n_buckets; /* a power of two */
    size_t n;         /* addresses in the table */
};

static uint32_t hash_of(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

bm_peers_t *bm_peers_new(void)
{
    bm_peers_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->buckets = calloc(MIN_BUCKETS, sizeof *p->buckets);
    if (!p->buckets) {
        free(p);
        return NULL;
    }
    p->n_buckets = MIN_BUCKETS;
    return p;
}

void bm_peers_free(bm_peers_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_buckets; i++) {
        entry_t *e = p->buckets[i];
        while (e) {
            entry_t *next = e->next;
            free(e);
            e = next;
        }
    }
    free(p->buckets);
    free(p);
}

static entry_t **find(const bm_peers_t *p, const char *addr, uint32_t h)
{
    entry_t **pp = &p->buckets[h & (p->n_buckets - 1)];
    while (*pp && ((*pp)->hash != h || strcmp((*pp)->addr, addr) != 0))
        pp = &(*pp)->next;
    return pp;
}

/* Doubles the buckets; on allocation failure the table just stays denser. */
static void grow(bm_peers_t *p)
{
    size_t nb = p->n_buckets * 2;
    entry_t **b = calloc(nb, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < p->n_buckets; i++) {
        entry_t *e = p->buckets[i];
        while (e) {
            entry_t *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    free(p->buckets);
    p->buckets = b;
    p->n_buckets = nb;
}

bool bm_peers_take(bm_peers_t *p, const char *addr, uint32_t cap)
{
    uint32_t h = hash_of(addr);
    entry_t **pp = find(p, addr, h);
    if (*pp) {
        if (cap && (*pp)->count >= cap)
            return false;
        (*pp)->count++;
        return true;
    }
    size_t len = strlen(addr);
    entry_t *e = malloc(sizeof *e + len + 1);
    if (!e)
        return false;
    e->hash = h;
    e->count = 1;
    memcpy(e->addr, addr, len + 1);
    e->next = NULL;
    *pp = e;
    if (++p->n > p->n_buckets)
        grow(p);
    return true;
}

void bm_peers_release(bm_peers_t *p, const char *addr)
{
    entry_t **pp = find(p, addr, hash_of(addr));
    entry_t *e = *pp;
    if (!e)
        return;
    if (--e->count > 0)
        return;
    *pp = e->next;
    free(e);
    p->n--;
}

uint32_t bm_peers_count(const bm_peers_t *p, const char *addr)
{
    entry_t *e = *find(p, addr, hash_of(addr));
    return e ? e->count : 0;
}

size_t bm_peers_clients(const bm_peers_t *p)
{
    return p->n;
}
