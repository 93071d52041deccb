/* SPDX-License-Identifier: MIT */
/*
 * journal_state: the duty journal's newest slots and its counts as one JSON value, and back
 * (bm_journal_export / bm_journal_import in journal.h), so that the journal and the
 * dashboard survive a restart (app/statedir.h keeps the value in the state file).
 *
 *   {"stats":{"provisional":C,"final":C,"records":"N","merged":"N","refused":"N",
 *             "evictedUnjudged":"N","newestSlot":"N","finalSlot":"N"},
 *    "slots":[{"slot":"N","stage":"final","root":"0x..","prev":"0x..","entries":[E,...]}]}
 *   C: {"verdicts":{"<duty>":{"<verdict>":n,...},...},"saved":"N","lost":"N"}
 *   E: {"duty":"<duty>","startedMs":"N","raceMs":n,"requests":n,"node":"<id>"|null,
 *       "firstNode":"<id>"|null,"served":A,"first":A,"classes":{"<id>":"<class>",...}}
 *   A: {"status":n,"root":"0x.."|null,"index":n,"class":"<class>","ms":n}
 *
 * Duties, verdicts and classes are written by name and nodes by id, not by index: a
 * restart may come with another build or another list of upstreams; an entry of a node no
 * longer configured keeps its answers without the node. Restoring replays the entries
 * through bm_journal_add and each slot's canonical roots through bm_journal_settle, so the
 * ring and the verdicts are rebuilt by the code that built them; the counts are then set
 * to what was saved (the replay counted the entries again).
 */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "observe/journal.h"

/* ---- export ----------------------------------------------------------------------------- */

static void put_u64(bm_str_t *o, const char *key, uint64_t v)
{
    bm_str_printf(o, "\"%s\":\"", key);
    bm_str_u64(o, v);
    bm_str_putc(o, '"');
}

static void put_root(bm_str_t *o, bool known, const uint8_t root[32])
{
    if (!known) {
        bm_str_puts(o, "null");
        return;
    }
    bm_str_putc(o, '"');
    bm_str_hex(o, root, 32);
    bm_str_putc(o, '"');
}

static void put_node(bm_str_t *o, int i, const char *const *ids, size_t n_ids)
{
    if (i >= 0 && (size_t)i < n_ids)
        bm_str_json_string(o, ids[i], strlen(ids[i]));
    else
        bm_str_puts(o, "null");
}

static void put_answer(bm_str_t *o, const bm_served_answer_t *a)
{
    bm_str_printf(o, "{\"status\":%d,\"root\":", a->status);
    put_root(o, a->has_root, a->root);
    bm_str_printf(o, ",\"index\":%d,\"class\":\"%s\",\"ms\":%u}", a->index,
                  bm_answer_class_name(a->cls), (unsigned)a->ms);
}

static void put_counts(bm_str_t *o, const bm_journal_counts_t *c)
{
    bm_str_puts(o, "{\"verdicts\":{");
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++) {
        bm_str_printf(o, "%s\"%s\":{", d ? "," : "", bm_duty_read_name((bm_duty_read_t)d));
        for (int v = 0; v < BM_VERDICT_COUNT; v++) {
            bm_str_printf(o, "%s\"%s\":", v ? "," : "", bm_verdict_name((bm_verdict_t)v));
            bm_str_u64(o, c->verdicts[d][v]);
        }
        bm_str_putc(o, '}');
    }
    bm_str_puts(o, "},");
    put_u64(o, "saved", c->saved);
    bm_str_putc(o, ',');
    put_u64(o, "lost", c->lost);
    bm_str_putc(o, '}');
}

static void put_entry(bm_str_t *o, const bm_served_t *r, const char *const *ids, size_t n_ids)
{
    bm_str_printf(o, "{\"duty\":\"%s\",", bm_duty_read_name(r->duty));
    put_u64(o, "startedMs", r->started_ms);
    bm_str_printf(o, ",\"raceMs\":%u,\"requests\":%u,\"node\":", (unsigned)r->race_ms,
                  (unsigned)r->requests);
    put_node(o, r->node, ids, n_ids);
    bm_str_puts(o, ",\"firstNode\":");
    put_node(o, r->first_node, ids, n_ids);
    bm_str_puts(o, ",\"served\":");
    put_answer(o, &r->served);
    bm_str_puts(o, ",\"first\":");
    put_answer(o, &r->first);
    bm_str_puts(o, ",\"classes\":{");
    size_t k = 0;
    for (size_t i = 0; i < r->n_nodes && i < n_ids; i++) {
        bm_str_puts(o, k++ ? "," : "");
        bm_str_json_string(o, ids[i], strlen(ids[i]));
        bm_str_printf(o, ":\"%s\"", bm_answer_class_name((bm_answer_class_t)r->classes[i]));
    }
    bm_str_puts(o, "}}");
}

int bm_journal_export(const bm_journal_t *j, uint32_t max_slots, const char *const *ids,
                      size_t n_ids, bm_str_t *o)
{
    const bm_journal_stats_t *st = bm_journal_stats(j);
    bm_str_puts(o, "{\"stats\":{\"provisional\":");
    put_counts(o, &st->provisional);
    bm_str_puts(o, ",\"final\":");
    put_counts(o, &st->final);
    const struct {
        const char *key;
        uint64_t v;
    } figures[] = {
        {"records", st->records},        {"merged", st->merged},
        {"refused", st->refused},        {"evictedUnjudged", st->evicted_unjudged},
        {"newestSlot", st->newest_slot}, {"finalSlot", st->final_slot},
    };
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        bm_str_putc(o, ',');
        put_u64(o, figures[i].key, figures[i].v);
    }
    bm_str_puts(o, "},\"slots\":[");
    uint64_t last = st->newest_slot + BM_JOURNAL_FUTURE_SLOTS;
    uint64_t first = bm_journal_oldest(j);
    if (max_slots && last >= max_slots && last - max_slots + 1 > first)
        first = last - max_slots + 1;
    size_t written = 0;
    for (uint64_t slot = first; slot <= last; slot++) {
        bm_journal_slot_t s;
        if (!bm_journal_slot(j, slot, &s))
            continue;
        bm_str_puts(o, written++ ? ",{" : "{");
        put_u64(o, "slot", slot);
        bm_str_printf(o, ",\"stage\":\"%s\",\"root\":", bm_journal_stage_name(s.stage));
        put_root(o, s.canon.known, s.canon.root);
        bm_str_puts(o, ",\"prev\":");
        put_root(o, s.canon.prev_known, s.canon.prev);
        bm_str_puts(o, ",\"entries\":[");
        bm_journal_entry_t e;
        for (size_t i = 0; bm_journal_entry(j, slot, i, &e); i++) {
            bm_str_puts(o, i ? "," : "");
            put_entry(o, &e.rec, ids, n_ids);
        }
        bm_str_puts(o, "]}");
    }
    bm_str_puts(o, "]}");
    return o->oom ? BM_ENOMEM : 0;
}

/* ---- import ----------------------------------------------------------------------------- */

static int duty_named(const char *s)
{
    for (int d = 0; s && d < BM_DUTY_READ_COUNT; d++)
        if (strcmp(s, bm_duty_read_name((bm_duty_read_t)d)) == 0)
            return d;
    return -1;
}

static int class_named(const char *s)
{
    for (int c = 0; s && c < BM_ANSWER_CLASS_COUNT; c++)
        if (strcmp(s, bm_answer_class_name((bm_answer_class_t)c)) == 0)
            return c;
    return -1;
}

static int stage_named(const char *s)
{
    for (int k = BM_STAGE_OPEN; s && k <= BM_STAGE_FINAL; k++)
        if (strcmp(s, bm_journal_stage_name((bm_journal_stage_t)k)) == 0)
            return k;
    return -1;
}

static int node_named(const char *id, const char *const *ids, size_t n_ids)
{
    for (size_t i = 0; id && i < n_ids; i++)
        if (strcmp(id, ids[i]) == 0)
            return (int)i;
    return -1;
}

/* An int field in [lo, hi]; false when absent or out of range. */
static bool get_int(json_object *obj, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, json_type_int))
        return false;
    int64_t n = json_object_get_int64(v);
    if (n < lo || n > hi)
        return false;
    *out = n;
    return true;
}

static bool get_answer(json_object *e, const char *key, bm_served_answer_t *a)
{
    json_object *o = bm_json_get(e, key);
    int64_t status, index, ms;
    if (!o || !get_int(o, "status", 0, 999, &status) || !get_int(o, "index", -1, 126, &index) ||
        !get_int(o, "ms", 0, UINT32_MAX, &ms))
        return false;
    int cls = class_named(bm_json_get_str(o, "/class"));
    if (cls < 0)
        return false;
    a->status = (int)status;
    a->index = (int)index;
    a->ms = (uint32_t)ms;
    a->cls = (bm_answer_class_t)cls;
    a->has_root = bm_json_get_root(o, "/root", a->root) == 0;
    return true;
}

static bool get_entry(json_object *e, const char *const *ids, size_t n_ids, bm_served_t *r)
{
    memset(r, 0, sizeof *r);
    int duty = duty_named(bm_json_get_str(e, "/duty"));
    int64_t race, requests;
    if (duty < 0 || bm_json_get_u64(e, "/startedMs", &r->started_ms) != 0 ||
        !get_int(e, "raceMs", 0, UINT32_MAX, &race) ||
        !get_int(e, "requests", 1, UINT32_MAX, &requests) ||
        !get_answer(e, "/served", &r->served) || !get_answer(e, "/first", &r->first))
        return false;
    r->duty = (bm_duty_read_t)duty;
    r->race_ms = (uint32_t)race;
    r->requests = (uint32_t)requests;
    r->node = node_named(bm_json_get_str(e, "/node"), ids, n_ids);
    r->first_node = node_named(bm_json_get_str(e, "/firstNode"), ids, n_ids);
    r->n_nodes = n_ids < BM_SERVED_MAX_NODES ? n_ids : BM_SERVED_MAX_NODES;
    json_object *classes = bm_json_get(e, "/classes");
    if (classes && json_object_is_type(classes, json_type_object)) {
        json_object_object_foreach(classes, id, v)
        {
            int i = node_named(id, ids, r->n_nodes);
            int c = json_object_is_type(v, json_type_string)
                        ? class_named(json_object_get_string(v))
                        : -1;
            if (i >= 0 && c >= 0)
                r->classes[i] = (uint8_t)c;
        }
    }
    return true;
}

static bool get_counts(json_object *st, const char *key, bm_journal_counts_t *c)
{
    json_object *o = bm_json_get(st, key);
    json_object *verdicts = o ? bm_json_get(o, "/verdicts") : NULL;
    if (!verdicts || !json_object_is_type(verdicts, json_type_object) ||
        bm_json_get_u64(o, "/saved", &c->saved) != 0 || bm_json_get_u64(o, "/lost", &c->lost) != 0)
        return false;
    json_object_object_foreach(verdicts, duty, per)
    {
        int d = duty_named(duty);
        if (d < 0 || !json_object_is_type(per, json_type_object))
            continue; /* a duty this build does not know */
        for (int v = 0; v < BM_VERDICT_COUNT; v++) {
            json_object *n;
            if (json_object_object_get_ex(per, bm_verdict_name((bm_verdict_t)v), &n) &&
                json_object_is_type(n, json_type_int) && json_object_get_int64(n) >= 0)
                c->verdicts[d][v] = (uint64_t)json_object_get_int64(n);
        }
    }
    return true;
}

static bool get_stats(json_object *doc, bm_journal_stats_t *st)
{
    json_object *o = bm_json_get(doc, "/stats");
    memset(st, 0, sizeof *st);
    return o && get_counts(o, "/provisional", &st->provisional) &&
           get_counts(o, "/final", &st->final) &&
           bm_json_get_u64(o, "/records", &st->records) == 0 &&
           bm_json_get_u64(o, "/merged", &st->merged) == 0 &&
           bm_json_get_u64(o, "/refused", &st->refused) == 0 &&
           bm_json_get_u64(o, "/evictedUnjudged", &st->evicted_unjudged) == 0 &&
           bm_json_get_u64(o, "/newestSlot", &st->newest_slot) == 0 &&
           bm_json_get_u64(o, "/finalSlot", &st->final_slot) == 0;
}

/* One slot: its entries added, then settled as it was. Returns the entries restored. */
static int restore_slot(bm_journal_t *j, json_object *s, const char *const *ids, size_t n_ids)
{
    uint64_t slot;
    int stage = stage_named(bm_json_get_str(s, "/stage"));
    json_object *entries = bm_json_get(s, "/entries");
    if (bm_json_get_u64(s, "/slot", &slot) != 0 || stage < 0 || !entries ||
        !json_object_is_type(entries, json_type_array))
        return 0;
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(entries); i++) {
        bm_served_t r;
        if (get_entry(json_object_array_get_idx(entries, i), ids, n_ids, &r)) {
            r.slot = slot;
            n += bm_journal_add(j, &r) == 0;
        }
    }
    if (stage != BM_STAGE_OPEN) {
        bm_canon_t c = {0};
        c.known = bm_json_get_root(s, "/root", c.root) == 0;
        c.prev_known = bm_json_get_root(s, "/prev", c.prev) == 0;
        bm_journal_settle(j, slot, &c, stage == BM_STAGE_FINAL);
    }
    return n;
}

int bm_journal_import(bm_journal_t *j, const char *json, size_t len, const char *const *ids,
                      size_t n_ids)
{
    json_object *doc = NULL;
    if (bm_json_parse(json, len, 0, &doc, NULL) != 0)
        return BM_EINVAL;
    bm_journal_stats_t st;
    json_object *slots = bm_json_get(doc, "/slots");
    if (!get_stats(doc, &st) || !slots || !json_object_is_type(slots, json_type_array)) {
        json_object_put(doc);
        return BM_EINVAL;
    }
    bm_journal_advance(j, st.newest_slot); /* the window the slots were written in */
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(slots); i++)
        n += restore_slot(j, json_object_array_get_idx(slots, i), ids, n_ids);
    bm_journal_set_stats(j, &st);
    json_object_put(doc);
    return n;
}
