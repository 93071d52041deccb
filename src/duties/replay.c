/* SPDX-License-Identifier: MIT */
/*
 * replay: per-validator state that beacon nodes keep only in memory, and its replay to a
 * node that lost it (see replay.h for what is kept, how long, and when it is replayed).
 *
 * How it is built:
 *   - one table per kind: entries of a fixed size in one array (positions stay put: a
 *     removed entry leaves a hole that is reused or compacted only while no replay walks
 *     the table, so a replay's cursor never skips or repeats an entry), and an
 *     open-addressing index over the entries' keys (linear probing, backward-shift
 *     deletion, no tombstones);
 *   - one replay cursor per node: kind, position, and for preferences the fork being sent
 *     (Eth-Consensus-Version is per request); a chunk is rendered only when the previous
 *     POST has ended, so memory and loop time per step stay small;
 *   - two timers: the slot timer that sweeps expired entries, and the debounce timer that
 *     starts the replays that are due.
 *
 * This file holds the module, feeding, rendering, expiry and lifetime; replay_store.c the
 * tables, replay_scan.c the reading of items (json-c or the fast scanner), replay_send.c
 * the replay to one node; what they share is in replay_int.h.
 */
#include "duties/replay.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "base/url.h"
#include "duties/replay_int.h"

static const char *const KIND_PATH[BM_REPLAY_KIND_COUNT] = {
    "/eth/v1/validator/prepare_beacon_proposer",
    "/eth/v1/validator/register_validator",
    "/eth/v1/validator/proposer_preferences",
    "/eth/v1/validator/beacon_committee_subscriptions",
    "/eth/v1/validator/sync_committee_subscriptions",
};

static const char *const KIND_NAME[BM_REPLAY_KIND_COUNT] = {
    "preparations", "registrations", "proposer preferences", "committee subscriptions",
    "sync subscriptions"};

const char *bm_replay_kind_path(bm_replay_kind_t kind)
{
    return (unsigned)kind < BM_REPLAY_KIND_COUNT ? KIND_PATH[kind] : "";
}

void bm_replay_opts_default(bm_replay_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_entries[BM_REPLAY_PREPARATION] = 65536;
    o->max_entries[BM_REPLAY_REGISTRATION] = 65536;
    o->max_entries[BM_REPLAY_PREFERENCES] = 8192;
    o->max_entries[BM_REPLAY_COMMITTEE_SUBS] = 131072;
    o->max_entries[BM_REPLAY_SYNC_SUBS] = 65536;
    o->registration_ttl_epochs = 4;
    o->chunk = 512;
    o->debounce_ms = 200;
    o->timeout_ms = BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
}

/* ---- time -------------------------------------------------------------------------------- */

now_t bm_rp_now_at(const bm_replay_t *rp, uint64_t ms)
{
    now_t n = {.ms = ms};
    if (rp->chain && rp->chain->known && bm_slot_clock_valid(&rp->chain->clock)) {
        n.known = true;
        n.slot = bm_slot_at(&rp->chain->clock, ms);
        n.epoch = bm_epoch_of_slot(&rp->chain->clock, n.slot);
    }
    return n;
}

static uint64_t epoch_at_ms(const bm_replay_t *rp, uint64_t ms)
{
    return bm_epoch_of_slot(&rp->chain->clock, bm_slot_at(&rp->chain->clock, ms));
}

bool bm_rp_expired(const bm_replay_t *rp, int kind, const void *e, const now_t *now)
{
    if (!now->known)
        return false;
    const ehdr_t *h = e;
    switch (kind) {
    case BM_REPLAY_PREPARATION:
        /* nodes keep a preparation through its epoch and two more */
        return epoch_at_ms(rp, h->seen_ms) + 2 < now->epoch;
    case BM_REPLAY_REGISTRATION:
        return epoch_at_ms(rp, h->seen_ms) + rp->opts.registration_ttl_epochs < now->epoch;
    case BM_REPLAY_PREFERENCES:
        return ((const pref_e *)e)->slot < now->slot;
    case BM_REPLAY_COMMITTEE_SUBS:
        return ((const csub_e *)e)->slot < now->slot;
    case BM_REPLAY_SYNC_SUBS:
        return ((const ssub_e *)e)->until_epoch <= now->epoch;
    }
    return false;
}

/* ---- feeding: storing items ------------------------------------------------------------------ */

/* How many new entries one write may add to a kind: a quarter of its cap (at least one), so
 * that one request, however large, leaves three quarters of the memory to everyone else. */
static size_t share_of(const table_t *t)
{
    size_t share = t->max_live / BM_REPLAY_SHARE_DIV;
    return share ? share : 1;
}

/* The entry for `key` in `kind`, now the most recently submitted: an existing one is always
 * refreshed; a new one is created while the write being fed is within its share (dropping the
 * least recently submitted entry when the kind is full). NULL when it is not kept: counted,
 * the write is still broadcast. */
static void *keep(bm_replay_t *rp, int kind, const void *key)
{
    table_t *t = &rp->tab[kind];
    uint64_t evicted = t->evicted;
    bool created;
    void *e = bm_rp_table_upsert(t, key, t->fed_new < share_of(t), &created);
    if (!e)
        t->dropped++;
    if (t->evicted != evicted)
        bm_log_limited(&rp->lim_evict, BM_LOG_WARN,
                       "replay: %s at their cap of %zu entries: the least recently submitted "
                       "make room (%llu so far)",
                       KIND_NAME[kind], t->max_live, (unsigned long long)t->evicted);
    return e;
}

static void emit(bm_replay_t *rp, int kind, const void *e);
/* The listener hears the entries a write stored this long after the feed, from a timer:
 * broadcast feeds a write after its client's answer was queued but in the same turn of the
 * loop, and the server writes that answer only at the turn's end (the check phase; a 0 ms
 * timer armed from a timer callback would still run before it with libuv 1.44). Rendering
 * an entry for Redis cost about 12,000 instructions per preparation (callgrind), before the
 * answer went out. */
#define EMIT_AFTER_MS 1u
/* At most this many entries wait (a validator client's whole set in one write is 10,000s);
 * beyond it an entry is handed over at once. */
#define EMIT_WAITING_MAX 262144u

/* While restoring, an entry of ours seen later than the incoming one stays. */
static bool restore_loses(bm_replay_t *rp, int kind, const void *key, uint64_t now_ms)
{
    if (!rp->restoring)
        return false;
    const ehdr_t *e = bm_rp_table_find(&rp->tab[kind], key);
    return e && e->seen_ms > now_ms;
}

static bool put_prep(bm_replay_t *rp, uint64_t vi, const uint8_t fee[20], uint64_t now_ms)
{
    if (restore_loses(rp, BM_REPLAY_PREPARATION, &vi, now_ms))
        return false;
    prep_e *e = keep(rp, BM_REPLAY_PREPARATION, &vi);
    if (!e)
        return false;
    memcpy(e->fee, fee, 20);
    e->h.seen_ms = now_ms;
    emit(rp, BM_REPLAY_PREPARATION, e);
    return true;
}

static bool put_reg(bm_replay_t *rp, const reg_e *in, uint64_t now_ms)
{
    table_t *t = &rp->tab[BM_REPLAY_REGISTRATION];
    reg_e *e = bm_rp_table_find(t, in->pubkey);
    if (e && in->ts < e->ts)
        return false; /* builders ignore a registration older than the one they have */
    if (e && in->ts == e->ts && restore_loses(rp, BM_REPLAY_REGISTRATION, in->pubkey, now_ms))
        return false;
    e = keep(rp, BM_REPLAY_REGISTRATION, in->pubkey);
    if (!e)
        return false;
    memcpy(e->fee, in->fee, 20);
    e->gas = in->gas;
    e->ts = in->ts;
    memcpy(e->sig, in->sig, 96);
    e->h.seen_ms = now_ms;
    emit(rp, BM_REPLAY_REGISTRATION, e);
    return true;
}

static bool put_pref(bm_replay_t *rp, const pref_e *in, const char *fork, const now_t *now)
{
    if (now->known && in->slot < now->slot)
        return false; /* the proposal is over */
    uint64_t key[2] = {in->vi, in->slot};
    if (restore_loses(rp, BM_REPLAY_PREFERENCES, key, now->ms))
        return false;
    pref_e *e = keep(rp, BM_REPLAY_PREFERENCES, key);
    if (!e)
        return false;
    memcpy(e->dep, in->dep, 32);
    memcpy(e->fee, in->fee, 20);
    e->gas = in->gas;
    memcpy(e->sig, in->sig, 96);
    snprintf(e->fork, sizeof e->fork, "%s", fork);
    e->h.seen_ms = now->ms;
    emit(rp, BM_REPLAY_PREFERENCES, e);
    return true;
}

static int put_item(bm_replay_t *rp, bm_replay_kind_t kind, const item_t *it, const char *fork,
                    const now_t *now)
{
    switch (kind) {
    case BM_REPLAY_PREPARATION: {
        uint64_t vi;
        uint8_t fee[20];
        if (!bm_rp_it_u64(it, F_VALIDATOR_INDEX, &vi) ||
            !bm_rp_it_hex(it, F_FEE_RECIPIENT, fee, 20))
            return 0;
        return put_prep(rp, vi, fee, now->ms);
    }
    case BM_REPLAY_REGISTRATION: {
        reg_e r;
        memset(&r, 0, sizeof r);
        if (!bm_rp_it_hex(it, MSG_BIT | M_FEE_RECIPIENT, r.fee, 20) ||
            !bm_rp_it_u64(it, MSG_BIT | M_GAS_LIMIT, &r.gas) ||
            !bm_rp_it_u64(it, MSG_BIT | M_TIMESTAMP, &r.ts) ||
            !bm_rp_it_hex(it, MSG_BIT | M_PUBKEY, r.pubkey, 48) ||
            !bm_rp_it_hex(it, F_SIGNATURE, r.sig, 96))
            return 0;
        return put_reg(rp, &r, now->ms);
    }
    case BM_REPLAY_PREFERENCES: {
        pref_e p;
        memset(&p, 0, sizeof p);
        if (!bm_rp_it_hex(it, MSG_BIT | M_DEPENDENT_ROOT, p.dep, 32) ||
            !bm_rp_it_u64(it, MSG_BIT | M_PROPOSAL_SLOT, &p.slot) ||
            !bm_rp_it_u64(it, MSG_BIT | M_VALIDATOR_INDEX, &p.vi) ||
            !bm_rp_it_hex(it, MSG_BIT | M_FEE_RECIPIENT, p.fee, 20) ||
            !bm_rp_it_u64(it, MSG_BIT | M_TARGET_GAS_LIMIT, &p.gas) ||
            !bm_rp_it_hex(it, F_SIGNATURE, p.sig, 96))
            return 0;
        return put_pref(rp, &p, fork, now);
    }
    case BM_REPLAY_COMMITTEE_SUBS: {
        uint64_t key[3], cas;
        bool agg;
        if (!bm_rp_it_u64(it, F_VALIDATOR_INDEX, &key[0]) || !bm_rp_it_u64(it, F_SLOT, &key[1]) ||
            !bm_rp_it_u64(it, F_COMMITTEE_INDEX, &key[2]) ||
            !bm_rp_it_u64(it, F_COMMITTEES_AT_SLOT, &cas) ||
            !bm_rp_it_bool(it, F_IS_AGGREGATOR, &agg))
            return 0;
        if (now->known && key[1] < now->slot)
            return 0; /* the duty is over */
        if (restore_loses(rp, BM_REPLAY_COMMITTEE_SUBS, key, now->ms))
            return 0;
        csub_e *e = keep(rp, BM_REPLAY_COMMITTEE_SUBS, key);
        if (!e)
            return 0;
        e->cas = cas;
        e->agg = agg;
        e->h.seen_ms = now->ms;
        emit(rp, BM_REPLAY_COMMITTEE_SUBS, e);
        return 1;
    }
    case BM_REPLAY_SYNC_SUBS: {
        uint64_t vi, until;
        if (!bm_rp_it_u64(it, F_VALIDATOR_INDEX, &vi) || !bm_rp_it_u64(it, F_UNTIL_EPOCH, &until))
            return 0;
        size_t k;
        bool ok;
        uint64_t *idx = bm_rp_it_u64_array(it, F_SYNC_INDICES, &k, &ok);
        if (!ok || (now->known && until <= now->epoch)) {
            free(idx);
            return 0;
        }
        ssub_e *e = restore_loses(rp, BM_REPLAY_SYNC_SUBS, &vi, now->ms)
                        ? NULL
                        : keep(rp, BM_REPLAY_SYNC_SUBS, &vi);
        if (!e) {
            free(idx);
            return 0;
        }
        free(e->idx);
        e->idx = idx;
        e->n_idx = (uint32_t)k;
        e->until_epoch = until;
        e->h.seen_ms = now->ms;
        emit(rp, BM_REPLAY_SYNC_SUBS, e);
        return 1;
    }
    default:
        return 0;
    }
}

/* The scanner's pass: -1 when it gives up (json-c reads the body then), else the count.
 * Items are stored as they are read, so it first checks the whole text, then stores. */
static int feed_fast(bm_replay_t *rp, bm_replay_kind_t kind, const char *p, size_t len,
                     const char *fork, const now_t *now)
{
    for (int pass = 0; pass < 2; pass++) {
        scan_t s = {p, p + len};
        int n = 0;
        bm_rp_ws(&s);
        if (s.p >= s.end || *s.p != '[')
            return -1;
        s.p++;
        bm_rp_ws(&s);
        bool first = true;
        while (s.p < s.end && *s.p != ']') {
            if (!first) {
                if (*s.p != ',')
                    return -1;
                s.p++;
                bm_rp_ws(&s);
            }
            first = false;
            fitem_t fi;
            memset(&fi, 0, sizeof fi);
            span_t v;
            if (s.p < s.end && *s.p == '{') {
                if (!bm_rp_scan_object(&s, 1, &fi, false))
                    return -1;
                if (pass) {
                    item_t it = {NULL, &fi};
                    n += put_item(rp, kind, &it, fork, now);
                }
            } else if (!bm_rp_scan_value(&s, 1, &v)) {
                return -1;
            }
            bm_rp_ws(&s);
        }
        if (s.p >= s.end)
            return -1;
        s.p++;
        bm_rp_ws(&s);
        if (s.p != s.end)
            return -1;
        if (pass)
            return n;
    }
    return -1;
}

/* List[SignedValidatorRegistrationV1]: message {fee_recipient 20, gas_limit 8, timestamp 8,
 * pubkey 48}, signature 96; fixed size, so the list is the items back to back. */
static int feed_registrations_ssz(bm_replay_t *rp, const uint8_t *p, size_t len, uint64_t now_ms)
{
    if (len % REG_SSZ_LEN != 0)
        return BM_EINVAL;
    int n = 0;
    for (size_t at = 0; at < len; at += REG_SSZ_LEN) {
        reg_e r;
        memcpy(r.fee, p + at, 20);
        r.gas = bm_ssz_u64(p + at + 20);
        r.ts = bm_ssz_u64(p + at + 28);
        memcpy(r.pubkey, p + at + 36, 48);
        memcpy(r.sig, p + at + 84, 96);
        n += put_reg(rp, &r, now_ms);
    }
    return n;
}

/* List[SignedProposerPreferences]: message {dependent_root 32, proposal_slot 8,
 * validator_index 8, fee_recipient 20, target_gas_limit 8}, signature 96. */
static int feed_preferences_ssz(bm_replay_t *rp, const uint8_t *p, size_t len, const char *fork,
                                const now_t *now)
{
    if (len % PREF_SSZ_LEN != 0)
        return BM_EINVAL;
    int n = 0;
    for (size_t at = 0; at < len; at += PREF_SSZ_LEN) {
        pref_e e;
        memcpy(e.dep, p + at, 32);
        e.slot = bm_ssz_u64(p + at + 32);
        e.vi = bm_ssz_u64(p + at + 40);
        memcpy(e.fee, p + at + 48, 20);
        e.gas = bm_ssz_u64(p + at + 68);
        memcpy(e.sig, p + at + 76, 96);
        n += put_pref(rp, &e, fork, now);
    }
    return n;
}

static int feed_json(bm_replay_t *rp, bm_replay_kind_t kind, const bm_buf_t *body, const char *fork,
                     const now_t *now);

static int feed_body(bm_replay_t *rp, bm_replay_kind_t kind, const bm_hdrs_t *headers,
                     const bm_buf_t *body, uint64_t now_ms)
{
    if (!rp || (unsigned)kind >= BM_REPLAY_KIND_COUNT || !body || body->len == 0)
        return BM_EINVAL;
    now_t now = bm_rp_now_at(rp, now_ms);
    const char *fork = headers ? bm_hdrs_get(headers, "eth-consensus-version") : NULL;
    if (kind == BM_REPLAY_PREFERENCES && (!fork || !*fork || strlen(fork) > FORK_MAX))
        return BM_EINVAL; /* required: a replay must send it again */
    if (bm_hdrs_is_ssz(headers)) {
        const uint8_t *p = (const uint8_t *)body->data;
        if (kind == BM_REPLAY_REGISTRATION)
            return feed_registrations_ssz(rp, p, body->len, now_ms);
        if (kind == BM_REPLAY_PREFERENCES)
            return feed_preferences_ssz(rp, p, body->len, fork, &now);
        return BM_EINVAL; /* the other kinds have no SSZ form */
    }
    return feed_json(rp, kind, body, fork, &now);
}

/* A JSON array of items: the fast scanner, else json-c. */
static int feed_json(bm_replay_t *rp, bm_replay_kind_t kind, const bm_buf_t *body, const char *fork,
                     const now_t *now)
{
    if (!rp->opts.json_c_only) {
        int n = feed_fast(rp, kind, body->data, body->len, fork, now);
        if (n >= 0)
            return n;
    }
    json_object *arr = NULL;
    if (bm_json_parse_buf(body, 0, &arr, NULL) != 0)
        return BM_EINVAL;
    int n = BM_EINVAL;
    if (arr && json_object_is_type(arr, json_type_array)) {
        n = 0;
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
            item_t it = {json_object_array_get_idx(arr, i), NULL};
            n += put_item(rp, kind, &it, fork, now);
        }
    }
    json_object_put(arr);
    return n;
}

int bm_replay_feed(bm_replay_t *rp, bm_replay_kind_t kind, const bm_hdrs_t *headers,
                   const bm_buf_t *body, uint64_t now_ms)
{
    if (!rp || (unsigned)kind >= BM_REPLAY_KIND_COUNT)
        return BM_EINVAL;
    table_t *t = &rp->tab[kind];
    t->fed_new = 0;
    uint64_t dropped = t->dropped;
    int n = feed_body(rp, kind, headers, body, now_ms);
    if (t->dropped != dropped)
        bm_log_limited(&rp->lim_share, BM_LOG_WARN,
                       "replay: one write carried more new %s than its share of the memory "
                       "(%zu, 1/%d of the cap): %llu of them are broadcast but not kept for replay",
                       KIND_NAME[kind], share_of(t), BM_REPLAY_SHARE_DIV,
                       (unsigned long long)(t->dropped - dropped));
    return n;
}

/* ---- rendering ---------------------------------------------------------------------------- */

static void put_u64(bm_str_t *s, const char *name, uint64_t v, bool comma)
{
    bm_str_printf(s, "%s\"%s\":\"", comma ? "," : "", name);
    bm_str_u64(s, v);
    bm_str_putc(s, '"');
}

static void put_hex(bm_str_t *s, const char *name, const uint8_t *p, size_t n, bool comma)
{
    bm_str_printf(s, "%s\"%s\":\"", comma ? "," : "", name);
    bm_str_hex(s, p, n);
    bm_str_putc(s, '"');
}

/* Appends one entry in its endpoint's request shape. */
void bm_rp_render(bm_str_t *s, int kind, const void *ent)
{
    switch (kind) {
    case BM_REPLAY_PREPARATION: {
        const prep_e *e = ent;
        bm_str_putc(s, '{');
        put_u64(s, "validator_index", e->vi, false);
        put_hex(s, "fee_recipient", e->fee, 20, true);
        bm_str_putc(s, '}');
        break;
    }
    case BM_REPLAY_REGISTRATION: {
        const reg_e *e = ent;
        bm_str_puts(s, "{\"message\":{");
        put_hex(s, "fee_recipient", e->fee, 20, false);
        put_u64(s, "gas_limit", e->gas, true);
        put_u64(s, "timestamp", e->ts, true);
        put_hex(s, "pubkey", e->pubkey, 48, true);
        bm_str_putc(s, '}');
        put_hex(s, "signature", e->sig, 96, true);
        bm_str_putc(s, '}');
        break;
    }
    case BM_REPLAY_PREFERENCES: {
        const pref_e *e = ent;
        bm_str_puts(s, "{\"message\":{");
        put_hex(s, "dependent_root", e->dep, 32, false);
        put_u64(s, "proposal_slot", e->slot, true);
        put_u64(s, "validator_index", e->vi, true);
        put_hex(s, "fee_recipient", e->fee, 20, true);
        put_u64(s, "target_gas_limit", e->gas, true);
        bm_str_putc(s, '}');
        put_hex(s, "signature", e->sig, 96, true);
        bm_str_putc(s, '}');
        break;
    }
    case BM_REPLAY_COMMITTEE_SUBS: {
        const csub_e *e = ent;
        bm_str_putc(s, '{');
        put_u64(s, "validator_index", e->vi, false);
        put_u64(s, "committee_index", e->ci, true);
        put_u64(s, "committees_at_slot", e->cas, true);
        put_u64(s, "slot", e->slot, true);
        bm_str_printf(s, ",\"is_aggregator\":%s}", e->agg ? "true" : "false");
        break;
    }
    case BM_REPLAY_SYNC_SUBS: {
        const ssub_e *e = ent;
        bm_str_putc(s, '{');
        put_u64(s, "validator_index", e->vi, false);
        bm_str_puts(s, ",\"sync_committee_indices\":[");
        for (uint32_t i = 0; i < e->n_idx; i++) {
            bm_str_printf(s, "%s\"", i ? "," : "");
            bm_str_u64(s, e->idx[i]);
            bm_str_putc(s, '"');
        }
        bm_str_putc(s, ']');
        put_u64(s, "until_epoch", e->until_epoch, true);
        bm_str_putc(s, '}');
        break;
    }
    }
}

int bm_replay_dump(const bm_replay_t *rp, bm_replay_kind_t kind, uint64_t now_ms, bm_str_t *out)
{
    if (!rp || (unsigned)kind >= BM_REPLAY_KIND_COUNT)
        return BM_EINVAL;
    now_t now = bm_rp_now_at(rp, now_ms);
    const table_t *t = &rp->tab[kind];
    bm_str_putc(out, '[');
    size_t k = 0;
    for (size_t i = 0; i < t->n_ents; i++) {
        const ehdr_t *h = bm_rp_ent_at(t, i);
        if (!h->live || bm_rp_expired(rp, kind, h, &now))
            continue;
        if (k++)
            bm_str_putc(out, ',');
        bm_rp_render(out, kind, h);
    }
    bm_str_putc(out, ']');
    return out->oom ? BM_ENOMEM : 0;
}

/* ---- shared state: entries one by one ------------------------------------------------------ */

/* An hour: how long an entry is kept elsewhere while the slot clock is unknown. */
#define UNKNOWN_CLOCK_KEEP_MS 3600000u

/* The wall time at which an entry stops meaning anything to a node (bm_rp_expired() in ms). */
static uint64_t expires_ms(const bm_replay_t *rp, int kind, const void *e)
{
    const ehdr_t *h = e;
    if (!rp->chain || !rp->chain->known || !bm_slot_clock_valid(&rp->chain->clock))
        return h->seen_ms + UNKNOWN_CLOCK_KEEP_MS;
    const bm_slot_clock_t *c = &rp->chain->clock;
    switch (kind) {
    case BM_REPLAY_PREPARATION:
        return bm_slot_start_ms(c, bm_epoch_start_slot(c, epoch_at_ms(rp, h->seen_ms) + 3));
    case BM_REPLAY_REGISTRATION:
        return bm_slot_start_ms(c,
                                bm_epoch_start_slot(c, epoch_at_ms(rp, h->seen_ms) +
                                                           rp->opts.registration_ttl_epochs + 1));
    case BM_REPLAY_PREFERENCES:
        return bm_slot_start_ms(c, ((const pref_e *)e)->slot + 1);
    case BM_REPLAY_COMMITTEE_SUBS:
        return bm_slot_start_ms(c, ((const csub_e *)e)->slot + 1);
    default:
        return bm_slot_start_ms(c, bm_epoch_start_slot(c, ((const ssub_e *)e)->until_epoch));
    }
}

/* An entry as bm_replay_restore reads it back: its item, after "<fork> " for preferences. */
static void entry_out(const bm_replay_t *rp, int kind, const void *e, bm_replay_entry_fn fn,
                      void *ud)
{
    const table_t *t = &rp->tab[kind];
    char key[2 * 48 + 1] = ""; /* the longest key: a registration's public key */
    const uint8_t *k = (const uint8_t *)e + t->key_off;
    for (size_t i = 0; i < t->key_len && i < 48; i++)
        snprintf(key + 2 * i, 3, "%02x", k[i]);
    bm_str_t s = BM_STR_INIT;
    if (kind == BM_REPLAY_PREFERENCES)
        bm_str_printf(&s, "%s ", ((const pref_e *)e)->fork);
    bm_rp_render(&s, kind, e);
    if (!s.oom && s.b)
        fn(ud, (bm_replay_kind_t)kind, key, s.b->data, s.b->len, ((const ehdr_t *)e)->seen_ms,
           expires_ms(rp, kind, e));
    bm_str_dispose(&s);
}

/* Room for one more entry to hand over; false when there is none (then it goes at once). */
static bool emit_room(bm_replay_t *rp)
{
    if (rp->n_emits < rp->cap_emits)
        return true;
    if (rp->stopped || rp->n_emits >= EMIT_WAITING_MAX)
        return false;
    emit_key_t *p = bm_grow(rp->emits, rp->n_emits, &rp->cap_emits, sizeof *p, 64);
    if (!p)
        return false;
    rp->emits = p;
    return true;
}

/* An entry a write stored: its key waits for the timer (see EMIT_AFTER_MS). */
static void emit(bm_replay_t *rp, int kind, const void *e)
{
    if (!rp->on_entry || rp->restoring)
        return;
    if (!emit_room(rp)) {
        entry_out(rp, kind, e, rp->on_entry, rp->on_entry_ud);
        return;
    }
    const table_t *t = &rp->tab[kind];
    emit_key_t *k = &rp->emits[rp->n_emits++];
    k->kind = (uint8_t)kind;
    memcpy(k->key, (const uint8_t *)e + t->key_off, t->key_len < 48 ? t->key_len : 48);
    if (!bm_timer_active(rp->emit_timer))
        bm_timer_start(rp->emit_timer, EMIT_AFTER_MS);
}

/* The writes were answered: each entry they stored goes to the listener as it is now (an
 * entry gone meanwhile, swept or evicted, is left out). */
static void on_emit_timer(bm_timer_t *tm, void *ud)
{
    (void)tm;
    bm_replay_t *rp = ud;
    for (size_t i = 0; i < rp->n_emits && rp->on_entry; i++) {
        const emit_key_t *k = &rp->emits[i];
        const ehdr_t *h = bm_rp_table_find(&rp->tab[k->kind], k->key);
        if (h && h->live)
            entry_out(rp, k->kind, h, rp->on_entry, rp->on_entry_ud);
    }
    rp->n_emits = 0;
}

void bm_replay_on_entry(bm_replay_t *rp, bm_replay_entry_fn fn, void *ud)
{
    rp->on_entry = fn;
    rp->on_entry_ud = ud;
}

int bm_replay_restore(bm_replay_t *rp, bm_replay_kind_t kind, const char *entry, size_t len,
                      uint64_t seen_ms)
{
    if (!rp || (unsigned)kind >= BM_REPLAY_KIND_COUNT || !entry)
        return BM_EINVAL;
    char fork[FORK_MAX + 1] = "";
    if (kind == BM_REPLAY_PREFERENCES) {
        const char *sp = memchr(entry, ' ', len);
        if (!sp || sp == entry || (size_t)(sp - entry) > FORK_MAX)
            return BM_EINVAL;
        memcpy(fork, entry, (size_t)(sp - entry));
        fork[sp - entry] = '\0';
        len -= (size_t)(sp + 1 - entry);
        entry = sp + 1;
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '[');
    bm_str_append(&s, entry, len);
    bm_str_putc(&s, ']');
    bm_buf_t *body = bm_str_finish(&s);
    if (!body)
        return BM_ENOMEM;
    now_t now = bm_rp_now_at(rp, seen_ms);
    rp->restoring = true;
    int n = feed_json(rp, kind, body, fork[0] ? fork : NULL, &now);
    rp->restoring = false;
    bm_buf_unref(body);
    return n;
}

void bm_replay_each(const bm_replay_t *rp, uint64_t now_ms, bm_replay_entry_fn fn, void *ud)
{
    now_t now = bm_rp_now_at(rp, now_ms);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        const table_t *t = &rp->tab[k];
        for (size_t i = 0; i < t->n_ents; i++) {
            const ehdr_t *h = bm_rp_ent_at(t, i);
            if (h->live && !bm_rp_expired(rp, k, h, &now))
                entry_out(rp, k, h, fn, ud);
        }
    }
}

/* ---- expiry -------------------------------------------------------------------------------- */

size_t bm_replay_sweep(bm_replay_t *rp, uint64_t now_ms)
{
    now_t now = bm_rp_now_at(rp, now_ms);
    size_t dropped = 0;
    if (!now.known)
        return 0;
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        table_t *t = &rp->tab[k];
        for (size_t i = 0; i < t->n_ents; i++) {
            ehdr_t *h = bm_rp_ent_at(t, i);
            if (h->live && bm_rp_expired(rp, k, h, &now)) {
                bm_rp_table_remove(t, h);
                dropped++;
            }
        }
        if (t->n_ents - t->live > 64 && t->n_ents - t->live > t->n_ents / 2)
            bm_rp_table_compact(t);
    }
    return dropped;
}

static void on_sweep(bm_timer_t *tm, void *ud)
{
    (void)tm;
    bm_replay_t *rp = ud;
    size_t n = bm_replay_sweep(rp, bm_clock_wall_now(rp->clock));
    if (n)
        bm_log(BM_LOG_DEBUG, "replay: %zu expired entr%s dropped", n, n == 1 ? "y" : "ies");
    uint64_t every = DEFAULT_SWEEP_MS;
    if (rp->chain && rp->chain->known && rp->chain->clock.slot_ms) {
        /* just after the next slot boundary, so that a slot's entries go when it ends */
        const bm_slot_clock_t *c = &rp->chain->clock;
        uint64_t now = bm_clock_wall_now(rp->clock);
        uint64_t next = bm_slot_start_ms(c, bm_slot_at(c, now) + 1);
        every = next > now ? next - now + 5 : c->slot_ms;
    }
    bm_timer_start(rp->sweep_timer, every);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

bm_replay_t *bm_replay_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool,
                           const bm_chain_info_t *chain, const bm_replay_opts_t *opts)
{
    if (!clock || !up || !pool)
        return NULL;
    bm_replay_t *rp = calloc(1, sizeof *rp);
    if (!rp)
        return NULL;
    bm_replay_opts_t def;
    bm_replay_opts_default(&def);
    rp->opts = opts ? *opts : def;
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        if (!rp->opts.max_entries[k])
            rp->opts.max_entries[k] = def.max_entries[k];
    if (!rp->opts.registration_ttl_epochs)
        rp->opts.registration_ttl_epochs = def.registration_ttl_epochs;
    if (!rp->opts.chunk)
        rp->opts.chunk = def.chunk;
    if (!rp->opts.timeout_ms)
        rp->opts.timeout_ms = def.timeout_ms;
    if (!rp->opts.connect_timeout_ms)
        rp->opts.connect_timeout_ms = def.connect_timeout_ms;
    rp->clock = clock;
    rp->up = up;
    rp->pool = pool;
    rp->chain = chain;
    const size_t *cap = rp->opts.max_entries;
    bm_rp_table_init(&rp->tab[BM_REPLAY_PREPARATION], sizeof(prep_e), offsetof(prep_e, vi), 8,
                     cap[BM_REPLAY_PREPARATION], NULL);
    bm_rp_table_init(&rp->tab[BM_REPLAY_REGISTRATION], sizeof(reg_e), offsetof(reg_e, pubkey), 48,
                     cap[BM_REPLAY_REGISTRATION], NULL);
    bm_rp_table_init(&rp->tab[BM_REPLAY_PREFERENCES], sizeof(pref_e), offsetof(pref_e, vi), 16,
                     cap[BM_REPLAY_PREFERENCES], NULL);
    bm_rp_table_init(&rp->tab[BM_REPLAY_COMMITTEE_SUBS], sizeof(csub_e), offsetof(csub_e, vi), 24,
                     cap[BM_REPLAY_COMMITTEE_SUBS], NULL);
    bm_rp_table_init(&rp->tab[BM_REPLAY_SYNC_SUBS], sizeof(ssub_e), offsetof(ssub_e, vi), 8,
                     cap[BM_REPLAY_SYNC_SUBS], bm_rp_ssub_dispose);
    rp->n_nodes = bm_pool_count(pool);
    rp->nodes = calloc(rp->n_nodes ? rp->n_nodes : 1, sizeof *rp->nodes);
    rp->sweep_timer = bm_timer_new(clock, on_sweep, rp);
    rp->kick_timer = bm_timer_new(clock, bm_rp_on_kick, rp);
    rp->emit_timer = bm_timer_new(clock, on_emit_timer, rp);
    if (!rp->nodes || !rp->sweep_timer || !rp->kick_timer || !rp->emit_timer) {
        bm_timer_close(rp->sweep_timer, NULL, NULL);
        bm_timer_close(rp->kick_timer, NULL, NULL);
        bm_timer_close(rp->emit_timer, NULL, NULL);
        for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
            bm_rp_table_dispose(&rp->tab[k]);
        free(rp->nodes);
        free(rp);
        return NULL;
    }
    for (size_t i = 0; i < rp->n_nodes; i++) {
        rp->nodes[i].rp = rp;
        rp->nodes[i].index = i;
    }
    rp->open_handles = 3;
    bm_timer_start(rp->sweep_timer, DEFAULT_SWEEP_MS);
    return rp;
}

static void on_timer_closed(void *ud)
{
    bm_replay_t *rp = ud;
    rp->open_handles--;
}

void bm_replay_stop(bm_replay_t *rp)
{
    if (!rp || rp->stopped)
        return;
    rp->stopped = true;
    for (size_t i = 0; i < rp->n_nodes; i++) {
        nrep_t *nr = &rp->nodes[i];
        if (nr->xfer) {
            bm_upstream_cancel(nr->xfer);
            nr->xfer = NULL;
            bm_pool_node(rp->pool, i)->stats.in_flight--;
        }
        bm_rp_release_cursor(nr);
        nr->running = false;
        nr->due_ms = 0;
    }
    /* What waits for its timer goes to the listener now (at shutdown, to Redis before the
     * exit); with no listener (detached first) it is dropped. */
    on_emit_timer(rp->emit_timer, rp);
    bm_timer_close(rp->sweep_timer, on_timer_closed, rp);
    bm_timer_close(rp->kick_timer, on_timer_closed, rp);
    bm_timer_close(rp->emit_timer, on_timer_closed, rp);
}

void bm_replay_free(bm_replay_t *rp)
{
    if (!rp)
        return;
    bm_assert(rp->stopped && rp->open_handles == 0);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        bm_rp_table_dispose(&rp->tab[k]);
    free(rp->emits);
    free(rp->nodes);
    free(rp);
}

/* ---- adopting another's memory ------------------------------------------------------------ */

/* A copy of `src` into `dst` (same kind): everything, the time it was last sent included,
 * but `dst`'s place in its own table's submission order. */
static int copy_entry(table_t *t, void *dst, const void *src, int kind)
{
    ehdr_t *dh = dst;
    uint32_t prev = dh->prev, next = dh->next;
    memcpy(dst, src, t->stride);
    dh->prev = prev;
    dh->next = next;
    if (kind != BM_REPLAY_SYNC_SUBS)
        return 0;
    ssub_e *d = dst;
    const ssub_e *from = src;
    d->idx = from->n_idx ? malloc(from->n_idx * sizeof *d->idx) : NULL;
    if (from->n_idx && !d->idx) {
        d->n_idx = 0;
        return BM_ENOMEM;
    }
    if (from->n_idx)
        memcpy(d->idx, from->idx, from->n_idx * sizeof *d->idx);
    return 0;
}

int bm_replay_adopt(bm_replay_t *to, const bm_replay_t *from)
{
    int rc = 0;
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        const table_t *ft = &from->tab[k];
        table_t *t = &to->tab[k];
        /* oldest first, so that the new table's submission order is the old one's */
        for (uint32_t link = ft->oldest; link;) {
            const ehdr_t *h = bm_rp_ent_at(ft, link - 1);
            link = h->next;
            bool created;
            void *e = bm_rp_table_upsert(t, (const uint8_t *)h + ft->key_off, true, &created);
            if (!e) {
                t->dropped++; /* no memory: counted like a write's entry not kept */
                continue;
            }
            if (!created && t->dispose)
                t->dispose(e); /* what it held is replaced below */
            if (copy_entry(t, e, h, k) != 0)
                rc = BM_ENOMEM;
        }
    }
    return rc;
}

/* ---- figures ------------------------------------------------------------------------------ */

size_t bm_replay_count(const bm_replay_t *rp, bm_replay_kind_t kind)
{
    return rp && (unsigned)kind < BM_REPLAY_KIND_COUNT ? rp->tab[kind].live : 0;
}

uint64_t bm_replay_dropped(const bm_replay_t *rp, bm_replay_kind_t kind)
{
    return rp && (unsigned)kind < BM_REPLAY_KIND_COUNT ? rp->tab[kind].dropped : 0;
}

uint64_t bm_replay_evicted(const bm_replay_t *rp, bm_replay_kind_t kind)
{
    return rp && (unsigned)kind < BM_REPLAY_KIND_COUNT ? rp->tab[kind].evicted : 0;
}

void bm_replay_stats(const bm_replay_t *rp, bm_replay_stats_t *out)
{
    *out = rp->stats;
}

bool bm_replay_busy(const bm_replay_t *rp, size_t index)
{
    if (!rp || index >= rp->n_nodes)
        return false;
    return rp->nodes[index].running || rp->nodes[index].due_ms != 0;
}

/* ---- state kept across restarts (app/statedir.h) -------------------------------------------- */

/* The keys of the exported object, one per kind; stable: they are in state files. */
static const char *const KIND_KEY[BM_REPLAY_KIND_COUNT] = {
    "preparations", "registrations", "preferences", "committeeSubscriptions", "syncSubscriptions"};

int bm_replay_export(const bm_replay_t *rp, uint64_t now_ms, bm_str_t *out)
{
    if (!rp)
        return BM_EINVAL;
    now_t now = bm_rp_now_at(rp, now_ms);
    bm_str_putc(out, '{');
    for (int kind = 0; kind < BM_REPLAY_KIND_COUNT; kind++) {
        const table_t *t = &rp->tab[kind];
        bm_str_printf(out, "%s\"%s\":[", kind ? "," : "", KIND_KEY[kind]);
        size_t k = 0;
        for (size_t i = 0; i < t->n_ents; i++) {
            const ehdr_t *h = bm_rp_ent_at(t, i);
            if (!h->live || bm_rp_expired(rp, kind, h, &now))
                continue;
            bm_str_puts(out, k++ ? ",{\"seenMs\":\"" : "{\"seenMs\":\"");
            bm_str_u64(out, h->seen_ms);
            bm_str_putc(out, '"');
            if (kind == BM_REPLAY_PREFERENCES) {
                const char *fork = ((const pref_e *)h)->fork;
                bm_str_puts(out, ",\"fork\":");
                bm_str_json_string(out, fork, strlen(fork));
            }
            bm_str_puts(out, ",\"item\":");
            bm_rp_render(out, kind, h);
            bm_str_putc(out, '}');
        }
        bm_str_putc(out, ']');
    }
    bm_str_putc(out, '}');
    return out->oom ? BM_ENOMEM : 0;
}

/* One exported entry back into its table, with the time it was last sent (never later than
 * now), so that it expires when it would have without the restart. */
static int import_entry(bm_replay_t *rp, int kind, json_object *e, uint64_t now_ms)
{
    uint64_t seen;
    json_object *item, *fork = NULL;
    if (!json_object_is_type(e, json_type_object) || bm_json_get_u64(e, "/seenMs", &seen) != 0 ||
        !json_object_object_get_ex(e, "item", &item) ||
        !json_object_is_type(item, json_type_object))
        return 0;
    const char *fork_name = NULL;
    if (kind == BM_REPLAY_PREFERENCES) {
        if (!json_object_object_get_ex(e, "fork", &fork) ||
            !json_object_is_type(fork, json_type_string) || json_object_get_string_len(fork) == 0 ||
            json_object_get_string_len(fork) > FORK_MAX)
            return 0;
        fork_name = json_object_get_string(fork);
    }
    now_t at = bm_rp_now_at(rp, seen < now_ms ? seen : now_ms);
    item_t it = {item, NULL};
    return put_item(rp, (bm_replay_kind_t)kind, &it, fork_name, &at);
}

int bm_replay_import(bm_replay_t *rp, const char *json, size_t len, uint64_t now_ms)
{
    json_object *doc = NULL;
    if (!rp || bm_json_parse(json, len, 0, &doc, NULL) != 0)
        return BM_EINVAL;
    for (int kind = 0; kind < BM_REPLAY_KIND_COUNT; kind++) {
        if (rp->tab[kind].live) { /* what this process holds is newer than any file */
            json_object_put(doc);
            return 0;
        }
    }
    if (!json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        return BM_EINVAL;
    }
    int n = 0;
    for (int kind = 0; kind < BM_REPLAY_KIND_COUNT; kind++) {
        json_object *arr;
        if (!json_object_object_get_ex(doc, KIND_KEY[kind], &arr) ||
            !json_object_is_type(arr, json_type_array))
            continue;
        for (size_t i = 0; i < json_object_array_length(arr); i++)
            n += import_entry(rp, kind, json_object_array_get_idx(arr, i), now_ms);
    }
    json_object_put(doc);
    size_t gone = bm_replay_sweep(rp, now_ms); /* what expired while beaconmux was down */
    return n > (int)gone ? n - (int)gone : 0;
}
