/* SPDX-License-Identifier: MIT */
/*
 * journal: the rings of slots and entries, the verdicts and their counts (see journal.h).
 *
 * How it is built: one array of slot records indexed by slot modulo the capacity (a record
 * knows its slot; a newer slot recycles the record of an older one), and one ring of entries
 * written in arrival order, three per slot on average. The entries of one slot form a list
 * in arrival order, from the slot record; since the entry ring is in arrival order too, the
 * entry the ring overwrites next is the head of its slot's list (or already released with
 * its slot record). Entries are kept compact (node classes in four bits) so that a day of
 * slots stays within a few MiB.
 */
#include "observe/journal.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define NONE UINT32_MAX

/* An answer as an entry keeps it. */
typedef struct cans {
    uint8_t root[32];
    uint32_t ms;
    int16_t status;
    int8_t index;
    uint8_t cls;
    bool has_root;
} cans_t;

typedef struct entry {
    uint64_t slot;
    uint64_t started_ms;
    uint32_t race_ms;
    uint32_t requests;
    uint32_t next; /* the next entry of the same slot, or NONE */
    uint8_t duty;
    int8_t node;
    int8_t first_node;
    uint8_t n_nodes;
    uint8_t verdict, first_verdict;
    bool live, counted_prov, counted_final;
    cans_t served, first;
    uint8_t classes[BM_SERVED_MAX_NODES / 2]; /* four bits per node */
} entry_t;

typedef struct srec {
    uint64_t slot;
    bool used;
    uint8_t stage;
    bm_canon_t canon;
    uint32_t head, tail; /* its entries, oldest first */
    uint32_t n;
} srec_t;

struct bm_journal {
    uint32_t cap;     /* slots */
    uint32_t ent_cap; /* entries */
    uint32_t epos;    /* the next entry to write */
    srec_t *slots;
    entry_t *ents;
    bm_journal_stats_t st;
};

bm_journal_t *bm_journal_new(uint32_t slots)
{
    if (slots == 0 || slots > UINT32_MAX / BM_JOURNAL_ENTRIES_PER_SLOT)
        return NULL;
    bm_journal_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->cap = slots;
    j->ent_cap = slots * BM_JOURNAL_ENTRIES_PER_SLOT;
    j->slots = calloc(j->cap, sizeof *j->slots);
    j->ents = calloc(j->ent_cap, sizeof *j->ents);
    if (!j->slots || !j->ents) {
        bm_journal_free(j);
        return NULL;
    }
    return j;
}

void bm_journal_free(bm_journal_t *j)
{
    if (!j)
        return;
    free(j->slots);
    free(j->ents);
    free(j);
}

const char *bm_verdict_name(bm_verdict_t v)
{
    static const char *const names[] = {"pending", "correct", "wrong", "missed", "unknown"};
    return (unsigned)v < BM_VERDICT_COUNT ? names[v] : "?";
}

const char *bm_journal_stage_name(bm_journal_stage_t s)
{
    static const char *const names[] = {"open", "provisional", "final"};
    return (unsigned)s <= BM_STAGE_FINAL ? names[s] : "?";
}

/* ---- the rules -------------------------------------------------------------------------- */

static bool is_2xx(int status)
{
    return status >= 200 && status < 300;
}

bm_verdict_t bm_journal_judge(bm_duty_read_t duty, const bm_served_answer_t *a, const bm_canon_t *c)
{
    bool names_no_block = duty == BM_DUTY_READ_PAYLOAD_ATTESTATION && a->status == 204;
    if (!is_2xx(a->status) || (!a->has_root && !names_no_block))
        return BM_VERDICT_MISSED;
    switch (duty) {
    case BM_DUTY_READ_ATTESTATION_DATA:
    case BM_DUTY_READ_HEAD_ROOT:
        if (!c->known)
            return BM_VERDICT_UNKNOWN;
        return memcmp(a->root, c->root, 32) == 0 ? BM_VERDICT_CORRECT : BM_VERDICT_WRONG;
    case BM_DUTY_READ_PAYLOAD_ATTESTATION: {
        if (!c->known || !c->prev_known)
            return BM_VERDICT_UNKNOWN;
        bool has_block = memcmp(c->root, c->prev, 32) != 0;
        if (names_no_block)
            return has_block ? BM_VERDICT_WRONG : BM_VERDICT_CORRECT;
        return has_block && memcmp(a->root, c->root, 32) == 0 ? BM_VERDICT_CORRECT
                                                              : BM_VERDICT_WRONG;
    }
    case BM_DUTY_READ_BLOCK:
        if (!c->prev_known)
            return BM_VERDICT_UNKNOWN;
        return memcmp(a->root, c->prev, 32) == 0 ? BM_VERDICT_CORRECT : BM_VERDICT_WRONG;
    default:
        return BM_VERDICT_UNKNOWN;
    }
}

static bool saved(bm_verdict_t v, bm_verdict_t fv)
{
    return v == BM_VERDICT_CORRECT && (fv == BM_VERDICT_WRONG || fv == BM_VERDICT_MISSED);
}

static bool lost(bm_verdict_t v, bm_verdict_t fv)
{
    return (v == BM_VERDICT_WRONG || v == BM_VERDICT_MISSED) && fv == BM_VERDICT_CORRECT;
}

static void count(bm_journal_counts_t *c, const entry_t *e, bm_verdict_t v, bm_verdict_t fv,
                  uint64_t n)
{
    c->verdicts[e->duty][v] += n;
    if (saved(v, fv))
        c->saved += n;
    if (lost(v, fv))
        c->lost += n;
}

/* ---- entries ------------------------------------------------------------------------------ */

static void pack_answer(cans_t *o, const bm_served_answer_t *a)
{
    memcpy(o->root, a->root, 32);
    o->ms = a->ms;
    o->status = (int16_t)a->status;
    o->index = (int8_t)(a->index >= -1 && a->index < 127 ? a->index : -1);
    o->cls = (uint8_t)a->cls;
    o->has_root = a->has_root;
}

static void unpack_answer(bm_served_answer_t *o, const cans_t *a)
{
    memcpy(o->root, a->root, 32);
    o->ms = a->ms;
    o->status = a->status;
    o->index = a->index;
    o->cls = (bm_answer_class_t)a->cls;
    o->has_root = a->has_root;
}

static void pack_classes(entry_t *e, const bm_served_t *r)
{
    memset(e->classes, 0, sizeof e->classes);
    e->n_nodes = (uint8_t)(r->n_nodes < BM_SERVED_MAX_NODES ? r->n_nodes : BM_SERVED_MAX_NODES);
    for (size_t i = 0; i < e->n_nodes; i++)
        e->classes[i / 2] |= (uint8_t)((r->classes[i] & 0xf) << (4 * (i % 2)));
}

static void unpack(const entry_t *e, bm_served_t *r)
{
    memset(r, 0, sizeof *r);
    r->duty = (bm_duty_read_t)e->duty;
    r->slot = e->slot;
    r->started_ms = e->started_ms;
    r->race_ms = e->race_ms;
    r->requests = e->requests;
    r->node = e->node;
    r->first_node = e->first_node;
    r->n_nodes = e->n_nodes;
    for (size_t i = 0; i < e->n_nodes; i++)
        r->classes[i] = (e->classes[i / 2] >> (4 * (i % 2))) & 0xf;
    unpack_answer(&r->served, &e->served);
    unpack_answer(&r->first, &e->first);
}

static bool same_answer(const cans_t *a, const bm_served_answer_t *b)
{
    return a->status == b->status && a->has_root == b->has_root && a->index == b->index &&
           (!a->has_root || memcmp(a->root, b->root, 32) == 0);
}

/* Judges `e` against its slot's canon; counts what was not counted for the stage yet. */
static void judge_entry(bm_journal_t *j, entry_t *e, const srec_t *s)
{
    bm_served_answer_t a;
    unpack_answer(&a, &e->served);
    bm_verdict_t v = bm_journal_judge((bm_duty_read_t)e->duty, &a, &s->canon);
    bm_verdict_t fv = BM_VERDICT_UNKNOWN; /* no witness: nothing to compare with */
    if (e->first_node >= 0) {
        unpack_answer(&a, &e->first);
        fv = bm_journal_judge((bm_duty_read_t)e->duty, &a, &s->canon);
    }
    e->verdict = (uint8_t)v;
    e->first_verdict = (uint8_t)fv;
    if (!e->counted_prov) {
        count(&j->st.provisional, e, v, fv, e->requests);
        e->counted_prov = true;
    }
    if (s->stage == BM_STAGE_FINAL && !e->counted_final) {
        count(&j->st.final, e, v, fv, e->requests);
        e->counted_final = true;
    }
}

/* An entry leaves: what it never counted counts as unknown. */
static void release_entry(bm_journal_t *j, entry_t *e)
{
    if (!e->live)
        return;
    e->live = false;
    if (!e->counted_prov)
        count(&j->st.provisional, e, BM_VERDICT_UNKNOWN, BM_VERDICT_UNKNOWN, e->requests);
    if (!e->counted_final) {
        count(&j->st.final, e, BM_VERDICT_UNKNOWN, BM_VERDICT_UNKNOWN, e->requests);
        j->st.evicted_unjudged++;
    }
}

/* ---- slots -------------------------------------------------------------------------------- */

uint64_t bm_journal_oldest(const bm_journal_t *j)
{
    uint64_t n = j->st.newest_slot;
    return n >= j->cap ? n - j->cap + 1 : 0;
}

uint32_t bm_journal_capacity(const bm_journal_t *j)
{
    return j->cap;
}

static bool in_window(const bm_journal_t *j, uint64_t slot)
{
    return slot >= bm_journal_oldest(j) && slot <= j->st.newest_slot + BM_JOURNAL_FUTURE_SLOTS;
}

static srec_t *find_slot(const bm_journal_t *j, uint64_t slot)
{
    srec_t *s = &j->slots[slot % j->cap];
    return s->used && s->slot == slot ? s : NULL;
}

/* The record of `slot`, recycling an older slot's; NULL when a newer slot holds it. */
static srec_t *slot_for_write(bm_journal_t *j, uint64_t slot)
{
    srec_t *s = &j->slots[slot % j->cap];
    if (s->used && s->slot == slot)
        return s;
    if (s->used && s->slot > slot)
        return NULL;
    if (s->used)
        for (uint32_t i = s->head; i != NONE; i = j->ents[i].next)
            release_entry(j, &j->ents[i]);
    memset(s, 0, sizeof *s);
    s->used = true;
    s->slot = slot;
    s->head = s->tail = NONE;
    return s;
}

/* Takes the next entry of the ring, releasing what it held. */
static uint32_t take_entry(bm_journal_t *j)
{
    uint32_t i = j->epos;
    j->epos = (j->epos + 1) % j->ent_cap;
    entry_t *e = &j->ents[i];
    if (e->live) {
        srec_t *s = find_slot(j, e->slot);
        if (s && s->head == i) { /* the oldest of its slot: the ring is in arrival order */
            s->head = e->next;
            if (s->head == NONE)
                s->tail = NONE;
            s->n--;
        }
        release_entry(j, e);
    }
    memset(e, 0, sizeof *e);
    e->next = NONE;
    return i;
}

/* The entry of `s` that `r` merges into, or NULL. */
static entry_t *mergeable(bm_journal_t *j, const srec_t *s, const bm_served_t *r)
{
    for (uint32_t i = s->head; i != NONE; i = j->ents[i].next) {
        entry_t *e = &j->ents[i];
        if (e->duty == r->duty && e->node == r->node && e->first_node == r->first_node &&
            e->served.cls == r->served.cls && same_answer(&e->served, &r->served) &&
            same_answer(&e->first, &r->first) && e->first.cls == r->first.cls)
            return e;
    }
    return NULL;
}

int bm_journal_add(bm_journal_t *j, const bm_served_t *r)
{
    j->st.records++;
    srec_t *s =
        in_window(j, r->slot) && r->duty < BM_DUTY_READ_COUNT ? slot_for_write(j, r->slot) : NULL;
    if (!s) {
        j->st.refused++;
        return BM_EINVAL;
    }
    entry_t *e = mergeable(j, s, r);
    if (e) {
        j->st.merged++;
        /* the merged requests count where the entry's did */
        entry_t add = *e;
        add.requests = r->requests;
        if (e->counted_prov)
            count(&j->st.provisional, &add, (bm_verdict_t)e->verdict,
                  (bm_verdict_t)e->first_verdict, r->requests);
        if (e->counted_final)
            count(&j->st.final, &add, (bm_verdict_t)e->verdict, (bm_verdict_t)e->first_verdict,
                  r->requests);
        e->requests += r->requests;
        if (r->race_ms > e->race_ms)
            e->race_ms = r->race_ms;
        pack_classes(e, r); /* the latest race's view of the nodes */
        return 0;
    }
    uint32_t i = take_entry(j);
    s = find_slot(j, r->slot); /* taking an entry never recycles a slot record */
    e = &j->ents[i];
    e->slot = r->slot;
    e->started_ms = r->started_ms;
    e->race_ms = r->race_ms;
    e->requests = r->requests;
    e->duty = (uint8_t)r->duty;
    e->node = (int8_t)(r->node >= 0 && r->node < BM_SERVED_MAX_NODES ? r->node : -1);
    e->first_node =
        (int8_t)(r->first_node >= 0 && r->first_node < BM_SERVED_MAX_NODES ? r->first_node : -1);
    pack_answer(&e->served, &r->served);
    pack_answer(&e->first, &r->first);
    pack_classes(e, r);
    e->live = true;
    if (s->tail == NONE)
        s->head = i;
    else
        j->ents[s->tail].next = i;
    s->tail = i;
    s->n++;
    if (s->stage != BM_STAGE_OPEN)
        judge_entry(j, e, s);
    return 0;
}

void bm_journal_advance(bm_journal_t *j, uint64_t slot)
{
    if (slot > j->st.newest_slot)
        j->st.newest_slot = slot;
}

void bm_journal_settle(bm_journal_t *j, uint64_t slot, const bm_canon_t *c, bool final)
{
    if (!in_window(j, slot))
        return;
    srec_t *s = slot_for_write(j, slot);
    if (!s || s->stage == BM_STAGE_FINAL)
        return;
    s->canon = *c;
    s->stage = final ? BM_STAGE_FINAL : BM_STAGE_PROVISIONAL;
    for (uint32_t i = s->head; i != NONE; i = j->ents[i].next)
        judge_entry(j, &j->ents[i], s);
    if (final && slot > j->st.final_slot)
        j->st.final_slot = slot;
}

/* ---- readers ------------------------------------------------------------------------------ */

bool bm_journal_slot(const bm_journal_t *j, uint64_t slot, bm_journal_slot_t *out)
{
    const srec_t *s = find_slot(j, slot);
    if (!s)
        return false;
    out->slot = slot;
    out->stage = (bm_journal_stage_t)s->stage;
    out->canon = s->canon;
    out->n_entries = s->n;
    return true;
}

bool bm_journal_entry(const bm_journal_t *j, uint64_t slot, size_t i, bm_journal_entry_t *out)
{
    const srec_t *s = find_slot(j, slot);
    if (!s)
        return false;
    uint32_t k = s->head;
    for (; k != NONE && i > 0; i--)
        k = j->ents[k].next;
    if (k == NONE)
        return false;
    const entry_t *e = &j->ents[k];
    unpack(e, &out->rec);
    out->verdict = (bm_verdict_t)e->verdict;
    out->first_verdict = (bm_verdict_t)e->first_verdict;
    out->final = e->counted_final;
    return true;
}

const bm_journal_stats_t *bm_journal_stats(const bm_journal_t *j)
{
    return &j->st;
}

void bm_journal_set_stats(bm_journal_t *j, const bm_journal_stats_t *st)
{
    j->st = *st;
}

/* ---- JSON --------------------------------------------------------------------------------- */

static void node_name(bm_str_t *o, int i, const char *const *ids, size_t n_ids)
{
    if (i < 0)
        bm_str_puts(o, "null");
    else if ((size_t)i < n_ids)
        bm_str_json_string(o, ids[i], strlen(ids[i]));
    else
        bm_str_printf(o, "\"#%d\"", i);
}

static void answer_json(bm_str_t *o, const bm_served_answer_t *a)
{
    bm_str_printf(o, "\"status\":%d,\"class\":\"%s\",\"ms\":%u,\"root\":", a->status,
                  bm_answer_class_name(a->cls), (unsigned)a->ms);
    if (a->has_root) {
        bm_str_putc(o, '"');
        bm_str_hex(o, a->root, 32);
        bm_str_putc(o, '"');
    } else {
        bm_str_puts(o, "null");
    }
    if (a->index >= 0)
        bm_str_printf(o, ",\"index\":%d", a->index);
}

static void entry_json(bm_str_t *o, const bm_journal_entry_t *e, const char *const *ids,
                       size_t n_ids)
{
    const bm_served_t *r = &e->rec;
    bm_str_printf(
        o,
        "{\"duty\":\"%s\",\"requests\":%u,\"race_ms\":%u,\"started_ms\":%llu,"
        "\"verdict\":\"%s\",\"first_verdict\":\"%s\",\"saved\":%s,\"lost\":%s,"
        "\"final\":%s,\"served\":{\"node\":",
        bm_duty_read_name(r->duty), (unsigned)r->requests, (unsigned)r->race_ms,
        (unsigned long long)r->started_ms, bm_verdict_name(e->verdict),
        bm_verdict_name(e->first_verdict), saved(e->verdict, e->first_verdict) ? "true" : "false",
        lost(e->verdict, e->first_verdict) ? "true" : "false", e->final ? "true" : "false");
    node_name(o, r->node, ids, n_ids);
    bm_str_putc(o, ',');
    answer_json(o, &r->served);
    bm_str_puts(o, "},\"first\":{\"node\":");
    node_name(o, r->first_node, ids, n_ids);
    bm_str_putc(o, ',');
    answer_json(o, &r->first);
    bm_str_puts(o, "},\"nodes\":{");
    for (size_t i = 0; i < r->n_nodes; i++) {
        if (i)
            bm_str_putc(o, ',');
        node_name(o, (int)i, ids, n_ids);
        bm_str_printf(o, ":\"%s\"", bm_answer_class_name((bm_answer_class_t)r->classes[i]));
    }
    bm_str_puts(o, "}}");
}

size_t bm_journal_json(const bm_journal_t *j, uint64_t from, uint64_t to, const char *const *ids,
                       size_t n_ids, bm_str_t *o)
{
    uint64_t oldest = bm_journal_oldest(j);
    uint64_t newest = j->st.newest_slot + BM_JOURNAL_FUTURE_SLOTS;
    if (from < oldest)
        from = oldest;
    if (to > newest)
        to = newest;
    size_t written = 0;
    bm_str_puts(o, "{\"slots\":[");
    for (uint64_t slot = from; slot <= to && from <= to; slot++) {
        bm_journal_slot_t s;
        if (!bm_journal_slot(j, slot, &s))
            continue;
        bm_str_printf(o, "%s{\"slot\":\"%llu\",\"stage\":\"%s\"", written ? "," : "",
                      (unsigned long long)slot, bm_journal_stage_name(s.stage));
        if (s.stage != BM_STAGE_OPEN && s.canon.known) {
            bm_str_puts(o, ",\"canonical_root\":\"");
            bm_str_hex(o, s.canon.root, 32);
            bm_str_putc(o, '"');
            if (s.canon.prev_known)
                bm_str_printf(o, ",\"own_block\":%s",
                              memcmp(s.canon.root, s.canon.prev, 32) ? "true" : "false");
        }
        bm_str_puts(o, ",\"entries\":[");
        bm_journal_entry_t e;
        for (size_t i = 0; bm_journal_entry(j, slot, i, &e); i++) {
            if (i)
                bm_str_putc(o, ',');
            entry_json(o, &e, ids, n_ids);
        }
        bm_str_puts(o, "]}");
        written++;
        if (slot == UINT64_MAX)
            break;
    }
    bm_str_putc(o, ']');
    bm_str_putc(o, '}');
    return written;
}
