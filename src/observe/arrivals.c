/* SPDX-License-Identifier: MIT */
/*
 * arrivals: per node, a ring of the last BM_ARRIVALS_SLOTS slots it announced a head for,
 * indexed by slot (see arrivals.h). A node that announces two heads at one slot (a re-org
 * within the slot) keeps the later one.
 */
#include "observe/arrivals.h"

#include <stdlib.h>
#include <string.h>

/* Head arrival delays, seconds: a head normally lands within the first second of its slot,
 * a late one within the slot (12 s on mainnet). */
static const double arrival_bounds[] = {0.05, 0.1, 0.2, 0.4, 0.8, 1, 2, 4, 6, 8, 12};

typedef struct cell {
    uint64_t slot;
    int32_t delay_ms; /* INT32_MIN: not known (a polled head) */
    uint8_t root[32];
    bool used;
    bool optimistic;
} cell_t;

typedef struct nrec {
    cell_t cells[BM_ARRIVALS_SLOTS];
    bool has_last;
    uint64_t first_slot; /* of its first arrival: nothing is known of it before */
    uint64_t last_slot;
    uint8_t last_root[32];
    bm_hist_t hist;
} nrec_t;

struct bm_arrivals {
    size_t n;
    bool watching;
    uint64_t since; /* the first slot any node announced: a node silent since is missing */
    nrec_t nodes[];
};

bm_arrivals_t *bm_arrivals_new(size_t n_nodes)
{
    if (n_nodes == 0 || n_nodes > BM_MAX_NODES)
        return NULL;
    bm_arrivals_t *a = calloc(1, sizeof *a + n_nodes * sizeof(nrec_t));
    if (!a)
        return NULL;
    a->n = n_nodes;
    for (size_t i = 0; i < n_nodes; i++)
        bm_hist_init(&a->nodes[i].hist, arrival_bounds,
                     sizeof arrival_bounds / sizeof arrival_bounds[0]);
    return a;
}

void bm_arrivals_free(bm_arrivals_t *a)
{
    free(a);
}

const char *bm_arrival_mark_name(bm_arrival_mark_t m)
{
    static const char *const names[] = {"pending", "ok", "off_chain", "missed", "empty", "unknown"};
    return (unsigned)m <= BM_ARRIVAL_UNKNOWN ? names[m] : "?";
}

bool bm_arrivals_on_view(bm_arrivals_t *a, size_t node, const bm_head_node_view_t *v,
                         const bm_slot_clock_t *clock)
{
    if (node >= a->n || !v->has_head || !clock || !bm_slot_clock_valid(clock))
        return false;
    nrec_t *nr = &a->nodes[node];
    if (nr->has_last && nr->last_slot == v->slot && memcmp(nr->last_root, v->root, 32) == 0)
        return false;
    if (!nr->has_last)
        nr->first_slot = v->slot;
    if (!a->watching || v->slot < a->since)
        a->since = v->slot;
    a->watching = true;
    nr->has_last = true;
    nr->last_slot = v->slot;
    memcpy(nr->last_root, v->root, 32);
    int64_t d = (int64_t)v->received_ms - (int64_t)bm_slot_start_ms(clock, v->slot);
    if (d > INT32_MAX)
        d = INT32_MAX;
    if (d < -INT32_MAX)
        d = -INT32_MAX;
    cell_t *c = &nr->cells[v->slot % BM_ARRIVALS_SLOTS];
    c->used = true;
    c->slot = v->slot;
    /* A polled head (the first one of a node whose stream sends nothing before its first
     * event, or one of a node without a stream) was there when beaconmux asked: that says
     * which block the node had, not when it got it. */
    c->delay_ms = v->polled ? INT32_MIN : (int32_t)d;
    memcpy(c->root, v->root, 32);
    c->optimistic = v->optimistic;
    if (!v->polled)
        bm_hist_add(&nr->hist, (double)d / 1000.0);
    return true;
}

const bm_hist_t *bm_arrivals_hist(const bm_arrivals_t *a, size_t node)
{
    return node < a->n ? &a->nodes[node].hist : NULL;
}

bm_arrival_mark_t bm_arrivals_mark(const bm_arrivals_t *a, size_t node, uint64_t slot,
                                   bm_arrivals_canon_fn canon, void *ud, int32_t *delay_ms,
                                   bool *optimistic)
{
    *delay_ms = INT32_MIN;
    *optimistic = false;
    const nrec_t *nr = node < a->n ? &a->nodes[node] : NULL;
    const cell_t *c = nr ? &nr->cells[slot % BM_ARRIVALS_SLOTS] : NULL;
    bool seen = c && c->used && c->slot == slot;
    /* before the node's first arrival (or, for a node never heard, before anyone's) the
     * node's silence says nothing: beaconmux was not watching it */
    uint64_t since = nr && nr->has_last ? nr->first_slot : a->since;
    if (!seen && (!a->watching || slot < since))
        return BM_ARRIVAL_UNKNOWN;
    if (seen) {
        *delay_ms = c->delay_ms;
        *optimistic = c->optimistic;
    }
    uint8_t at[32], before[32];
    if (canon(slot, at, ud) != 0)
        return BM_ARRIVAL_PENDING;
    if (seen)
        return memcmp(c->root, at, 32) == 0 ? BM_ARRIVAL_OK : BM_ARRIVAL_OFF_CHAIN;
    if (slot == 0 || canon(slot - 1, before, ud) != 0)
        return BM_ARRIVAL_UNKNOWN;
    return memcmp(at, before, 32) != 0 ? BM_ARRIVAL_MISSED : BM_ARRIVAL_EMPTY;
}

void bm_arrivals_json(const bm_arrivals_t *a, uint64_t to_slot, bm_arrivals_canon_fn canon,
                      void *ud, const char *const *ids, size_t n_ids, bm_str_t *o)
{
    uint64_t from = to_slot >= BM_ARRIVALS_SLOTS - 1 ? to_slot - (BM_ARRIVALS_SLOTS - 1) : 0;
    bm_str_printf(o, "{\"from_slot\":\"%llu\",\"to_slot\":\"%llu\",\"own_block\":[",
                  (unsigned long long)from, (unsigned long long)to_slot);
    for (uint64_t s = from; s <= to_slot; s++) {
        uint8_t at[32], before[32];
        bool known = canon(s, at, ud) == 0 && s > 0 && canon(s - 1, before, ud) == 0;
        bm_str_printf(o, "%s%s", s > from ? "," : "",
                      !known                   ? "null"
                      : memcmp(at, before, 32) ? "true"
                                               : "false");
    }
    bm_str_puts(o, "],\"nodes\":[");
    for (size_t i = 0; i < a->n; i++) {
        bm_str_puts(o, i ? ",{\"id\":" : "{\"id\":");
        if (i < n_ids)
            bm_str_json_string(o, ids[i], strlen(ids[i]));
        else
            bm_str_printf(o, "\"#%zu\"", i);
        bm_str_puts(o, ",\"cells\":[");
        for (uint64_t s = from; s <= to_slot; s++) {
            int32_t d;
            bool opt;
            bm_arrival_mark_t m = bm_arrivals_mark(a, i, s, canon, ud, &d, &opt);
            bm_str_puts(o, s > from ? ",{\"d\":" : "{\"d\":");
            if (d == INT32_MIN)
                bm_str_puts(o, "null");
            else
                bm_str_printf(o, "%d", (int)d);
            bm_str_printf(o, ",\"m\":\"%s\",\"o\":%s}", bm_arrival_mark_name(m),
                          opt ? "true" : "false");
        }
        bm_str_puts(o, "]}");
    }
    bm_str_puts(o, "]}");
}
