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
 */
#include "replay.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "err.h"
#include "json.h"
#include "log.h"
#include "ssz.h"
#include "url.h"

#define DEFAULT_SWEEP_MS 12000 /* while the slot clock is unknown */
#define FORK_MAX 32            /* characters of a fork name kept with a preference */
#define MAX_SYNC_INDICES 1024  /* per sync subscription (SYNC_COMMITTEE_SIZE is 512) */
#define MAX_PASS_FORKS 8       /* preference forks replayed in separate requests */
#define REG_SSZ_LEN 180        /* SignedValidatorRegistrationV1 */
#define PREF_SSZ_LEN 172       /* Gloas SignedProposerPreferences */

static const uint8_t HASH_KEY[16] = {0x62, 0x6d, 0x2d, 0x72, 0x65, 0x70, 0x6c, 0x61,
                                     0x79, 0x2d, 0x6b, 0x65, 0x79, 0x2d, 0x76, 0x31};

/* ---- entries ----------------------------------------------------------------------------- */

typedef struct ehdr {
    bool live;
    uint64_t seen_ms; /* wall time of the latest write that carried it */
} ehdr_t;

typedef struct prep_e {
    ehdr_t h;
    uint64_t vi; /* key */
    uint8_t fee[20];
} prep_e;

typedef struct reg_e {
    ehdr_t h;
    uint8_t pubkey[48]; /* key */
    uint8_t fee[20];
    uint64_t gas, ts;
    uint8_t sig[96];
} reg_e;

typedef struct pref_e {
    ehdr_t h;
    uint64_t vi, slot; /* key */
    uint8_t dep[32];
    uint8_t fee[20];
    uint64_t gas;
    uint8_t sig[96];
    char fork[FORK_MAX + 1];
} pref_e;

typedef struct csub_e {
    ehdr_t h;
    uint64_t vi, slot, ci; /* key */
    uint64_t cas;
    bool agg;
} csub_e;

typedef struct ssub_e {
    ehdr_t h;
    uint64_t vi; /* key */
    uint64_t until_epoch;
    uint64_t *idx; /* owned */
    uint32_t n_idx;
} ssub_e;

/* ---- tables ------------------------------------------------------------------------------ */

typedef struct table {
    size_t stride, key_off, key_len;
    uint8_t *ents;
    size_t n_ents, cap_ents; /* positions used (holes included), allocated */
    size_t live, max_live;
    uint32_t *idx; /* entry position + 1; 0 = empty */
    size_t idx_cap;
    size_t *holes;
    size_t n_holes, cap_holes;
    unsigned cursors; /* replays walking the table: positions must not move */
    uint64_t dropped;
    void (*dispose)(void *e);
} table_t;

static void *ent_at(const table_t *t, size_t i)
{
    return t->ents + i * t->stride;
}

static const uint8_t *key_of(const table_t *t, const void *e)
{
    return (const uint8_t *)e + t->key_off;
}

static size_t hash_key(const table_t *t, const void *key)
{
    return (size_t)bm_json_siphash(HASH_KEY, key, t->key_len);
}

static void table_init(table_t *t, size_t stride, size_t key_off, size_t key_len, size_t max_live,
                       void (*dispose)(void *))
{
    memset(t, 0, sizeof *t);
    t->stride = stride;
    t->key_off = key_off;
    t->key_len = key_len;
    t->max_live = max_live;
    t->dispose = dispose;
}

static void table_dispose(table_t *t)
{
    if (t->dispose)
        for (size_t i = 0; i < t->n_ents; i++) {
            ehdr_t *h = ent_at(t, i);
            if (h->live)
                t->dispose(h);
        }
    free(t->ents);
    free(t->idx);
    free(t->holes);
    memset(t, 0, sizeof *t);
}

/* Index slot holding the key, or the empty slot where it would go. */
static size_t idx_probe(const table_t *t, const void *key, bool *found)
{
    size_t mask = t->idx_cap - 1;
    size_t i = hash_key(t, key) & mask;
    for (;;) {
        uint32_t v = t->idx[i];
        if (!v) {
            *found = false;
            return i;
        }
        if (memcmp(key_of(t, ent_at(t, v - 1)), key, t->key_len) == 0) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

/* Fills a fresh index with every live entry. */
static void idx_fill(table_t *t)
{
    for (size_t i = 0; i < t->n_ents; i++) {
        ehdr_t *h = ent_at(t, i);
        if (!h->live)
            continue;
        bool found;
        size_t s = idx_probe(t, key_of(t, h), &found);
        t->idx[s] = (uint32_t)(i + 1);
    }
}

static int idx_rebuild(table_t *t, size_t cap)
{
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx)
        return BM_ENOMEM;
    free(t->idx);
    t->idx = idx;
    t->idx_cap = cap;
    idx_fill(t);
    return 0;
}

static void *table_find(const table_t *t, const void *key)
{
    if (!t->idx_cap)
        return NULL;
    bool found;
    size_t s = idx_probe(t, key, &found);
    return found ? ent_at(t, t->idx[s] - 1) : NULL;
}

/* The entry for `key`, created zeroed (and live, key set) when absent; NULL when the kind
 * is at its cap or memory ran out (*created tells which happened otherwise). */
static void *table_upsert(table_t *t, const void *key, bool *created)
{
    *created = false;
    void *e = table_find(t, key);
    if (e)
        return e;
    if (t->live >= t->max_live)
        return NULL;
    if ((t->live + 1) * 4 > t->idx_cap * 3 && idx_rebuild(t, t->idx_cap ? t->idx_cap * 2 : 64) != 0)
        return NULL;
    size_t pos;
    if (t->n_holes && !t->cursors) {
        pos = t->holes[--t->n_holes];
    } else {
        if (t->n_ents == t->cap_ents) {
            size_t cap = t->cap_ents ? t->cap_ents * 2 : 64;
            if (cap > 2 * t->max_live + 64)
                cap = 2 * t->max_live + 64;
            if (cap <= t->n_ents)
                return NULL; /* only holes left, and a replay is walking: rare, dropped */
            uint8_t *ents = realloc(t->ents, cap * t->stride);
            if (!ents)
                return NULL;
            t->ents = ents;
            t->cap_ents = cap;
        }
        pos = t->n_ents++;
    }
    e = ent_at(t, pos);
    memset(e, 0, t->stride);
    memcpy((uint8_t *)e + t->key_off, key, t->key_len);
    ((ehdr_t *)e)->live = true;
    bool found;
    size_t s = idx_probe(t, key, &found);
    t->idx[s] = (uint32_t)(pos + 1);
    t->live++;
    *created = true;
    return e;
}

static void table_remove(table_t *t, void *e)
{
    ehdr_t *h = e;
    if (!h->live)
        return;
    bool found;
    size_t i = idx_probe(t, key_of(t, e), &found);
    bm_assert(found);
    /* backward-shift deletion: pull later members of the probe run into the gap */
    size_t mask = t->idx_cap - 1;
    size_t j = i;
    t->idx[i] = 0;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t v = t->idx[j];
        if (!v)
            break;
        size_t k = hash_key(t, key_of(t, ent_at(t, v - 1))) & mask;
        bool between = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (between)
            continue;
        t->idx[i] = v;
        t->idx[j] = 0;
        i = j;
    }
    if (t->dispose)
        t->dispose(e);
    h->live = false;
    t->live--;
    size_t pos = (size_t)((uint8_t *)e - t->ents) / t->stride;
    if (pos + 1 == t->n_ents && !t->cursors) {
        t->n_ents--;
        return;
    }
    if (t->n_holes == t->cap_holes) {
        size_t cap = t->cap_holes ? t->cap_holes * 2 : 64;
        size_t *holes = realloc(t->holes, cap * sizeof *holes);
        if (!holes)
            return; /* the hole stays unused until the next compaction */
        t->holes = holes;
        t->cap_holes = cap;
    }
    t->holes[t->n_holes++] = pos;
}

/* Moves the live entries together (only while no replay walks the table). The new index
 * is allocated first, so that running out of memory leaves the table as it was. */
static void table_compact(table_t *t)
{
    if (t->cursors || t->n_ents == t->live || !t->idx_cap)
        return;
    uint32_t *idx = calloc(t->idx_cap, sizeof *idx);
    if (!idx)
        return;
    size_t w = 0;
    for (size_t i = 0; i < t->n_ents; i++) {
        ehdr_t *h = ent_at(t, i);
        if (!h->live)
            continue;
        if (w != i)
            memcpy(ent_at(t, w), h, t->stride);
        w++;
    }
    t->n_ents = w;
    t->n_holes = 0;
    free(t->idx);
    t->idx = idx;
    idx_fill(t);
}

static void ssub_dispose(void *e)
{
    ssub_e *s = e;
    free(s->idx);
    s->idx = NULL;
    s->n_idx = 0;
}

/* ---- the module -------------------------------------------------------------------------- */

typedef struct nrep {
    bm_replay_t *rp;
    size_t index;
    uint64_t due_ms; /* monotonic time the pending replay starts; 0: none pending */
    const char *why;
    bool running;
    bool again; /* triggered while running: run once more afterwards */
    int kind;
    size_t cursor;
    bool counted;            /* this replay holds a cursor on table[kind] */
    char fork[FORK_MAX + 1]; /* preferences: the fork of the current pass */
    char done_forks[MAX_PASS_FORKS][FORK_MAX + 1];
    int n_done_forks;
    bm_xfer_t *xfer;
    size_t chunk_entries;
    uint64_t last_done_ms; /* monotonic; 0: never */
    uint64_t started_ms;
} nrep_t;

struct bm_replay {
    uv_loop_t *loop;
    bm_upstream_t *up;
    bm_pool_t *pool;
    const bm_chain_info_t *chain;
    bm_replay_opts_t opts;
    table_t tab[BM_REPLAY_KIND_COUNT];
    nrep_t *nodes;
    size_t n_nodes;
    uv_timer_t sweep_timer, kick_timer;
    int open_handles;
    bool stopped;
    bm_replay_stats_t stats;
    bm_log_limit_t lim;
};

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
    o->timeout_ms = 12000;
    o->connect_timeout_ms = 1000;
}

/* ---- time -------------------------------------------------------------------------------- */

typedef struct now {
    bool known;
    uint64_t ms, slot, epoch;
} now_t;

static now_t now_at(const bm_replay_t *rp, uint64_t ms)
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

static bool expired(const bm_replay_t *rp, int kind, const void *e, const now_t *now)
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

/* ---- feeding ------------------------------------------------------------------------------ */

static bool get_u64(json_object *o, const char *ptr, uint64_t *out)
{
    return bm_json_get_u64(o, ptr, out) == 0;
}

static bool get_hex(json_object *o, const char *ptr, uint8_t *out, size_t n)
{
    const char *s = bm_json_get_str(o, ptr);
    uint8_t tmp[96];
    size_t len;
    if (!s || n > sizeof tmp || bm_hex_decode(s, strlen(s), tmp, n, &len) != 0 || len != n)
        return false;
    memcpy(out, tmp, n);
    return true;
}

static bool is_ssz(const bm_hdrs_t *h)
{
    const char *ct = h ? bm_hdrs_get(h, "content-type") : NULL;
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return strncasecmp(ct, "application/octet-stream", 24) == 0 &&
           (ct[24] == '\0' || ct[24] == ';' || ct[24] == ' ' || ct[24] == '\t');
}

/* Remembers one dropped entry (the kind is full) with a rate-limited line. */
static void note_dropped(bm_replay_t *rp, int kind)
{
    rp->tab[kind].dropped++;
    bm_log_limited(&rp->lim, BM_LOG_WARN,
                   "replay: %s at their cap of %zu entries: a new one is broadcast but not kept "
                   "for replay",
                   KIND_NAME[kind], rp->tab[kind].max_live);
}

static bool put_prep(bm_replay_t *rp, uint64_t vi, const uint8_t fee[20], uint64_t now_ms)
{
    bool created;
    prep_e *e = table_upsert(&rp->tab[BM_REPLAY_PREPARATION], &vi, &created);
    if (!e) {
        note_dropped(rp, BM_REPLAY_PREPARATION);
        return false;
    }
    memcpy(e->fee, fee, 20);
    e->h.seen_ms = now_ms;
    return true;
}

static bool put_reg(bm_replay_t *rp, const reg_e *in, uint64_t now_ms)
{
    table_t *t = &rp->tab[BM_REPLAY_REGISTRATION];
    reg_e *e = table_find(t, in->pubkey);
    if (e && in->ts < e->ts)
        return false; /* builders ignore a registration older than the one they have */
    bool created = false;
    if (!e)
        e = table_upsert(t, in->pubkey, &created);
    if (!e) {
        note_dropped(rp, BM_REPLAY_REGISTRATION);
        return false;
    }
    memcpy(e->fee, in->fee, 20);
    e->gas = in->gas;
    e->ts = in->ts;
    memcpy(e->sig, in->sig, 96);
    e->h.seen_ms = now_ms;
    return true;
}

static bool put_pref(bm_replay_t *rp, const pref_e *in, const char *fork, const now_t *now)
{
    if (now->known && in->slot < now->slot)
        return false; /* the proposal is over */
    uint64_t key[2] = {in->vi, in->slot};
    bool created;
    pref_e *e = table_upsert(&rp->tab[BM_REPLAY_PREFERENCES], key, &created);
    if (!e) {
        note_dropped(rp, BM_REPLAY_PREFERENCES);
        return false;
    }
    memcpy(e->dep, in->dep, 32);
    memcpy(e->fee, in->fee, 20);
    e->gas = in->gas;
    memcpy(e->sig, in->sig, 96);
    snprintf(e->fork, sizeof e->fork, "%s", fork);
    e->h.seen_ms = now->ms;
    return true;
}

static int feed_preparations(bm_replay_t *rp, json_object *arr, uint64_t now_ms)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        uint64_t vi;
        uint8_t fee[20];
        if (!get_u64(it, "/validator_index", &vi) || !get_hex(it, "/fee_recipient", fee, 20))
            continue;
        n += put_prep(rp, vi, fee, now_ms);
    }
    return n;
}

static int feed_registrations_json(bm_replay_t *rp, json_object *arr, uint64_t now_ms)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        reg_e r;
        memset(&r, 0, sizeof r);
        if (!get_hex(it, "/message/fee_recipient", r.fee, 20) ||
            !get_u64(it, "/message/gas_limit", &r.gas) ||
            !get_u64(it, "/message/timestamp", &r.ts) ||
            !get_hex(it, "/message/pubkey", r.pubkey, 48) || !get_hex(it, "/signature", r.sig, 96))
            continue;
        n += put_reg(rp, &r, now_ms);
    }
    return n;
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

static int feed_preferences_json(bm_replay_t *rp, json_object *arr, const char *fork,
                                 const now_t *now)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        pref_e p;
        memset(&p, 0, sizeof p);
        if (!get_hex(it, "/message/dependent_root", p.dep, 32) ||
            !get_u64(it, "/message/proposal_slot", &p.slot) ||
            !get_u64(it, "/message/validator_index", &p.vi) ||
            !get_hex(it, "/message/fee_recipient", p.fee, 20) ||
            !get_u64(it, "/message/target_gas_limit", &p.gas) ||
            !get_hex(it, "/signature", p.sig, 96))
            continue;
        n += put_pref(rp, &p, fork, now);
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

static int feed_committee_subs(bm_replay_t *rp, json_object *arr, const now_t *now)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        uint64_t key[3], cas;
        bool agg;
        if (!get_u64(it, "/validator_index", &key[0]) || !get_u64(it, "/slot", &key[1]) ||
            !get_u64(it, "/committee_index", &key[2]) ||
            !get_u64(it, "/committees_at_slot", &cas) ||
            bm_json_get_bool(it, "/is_aggregator", &agg) != 0)
            continue;
        if (now->known && key[1] < now->slot)
            continue; /* the duty is over */
        bool created;
        csub_e *e = table_upsert(&rp->tab[BM_REPLAY_COMMITTEE_SUBS], key, &created);
        if (!e) {
            note_dropped(rp, BM_REPLAY_COMMITTEE_SUBS);
            continue;
        }
        e->cas = cas;
        e->agg = agg;
        e->h.seen_ms = now->ms;
        n++;
    }
    return n;
}

static int feed_sync_subs(bm_replay_t *rp, json_object *arr, const now_t *now)
{
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        uint64_t vi, until;
        json_object *ind = bm_json_get(it, "/sync_committee_indices");
        if (!get_u64(it, "/validator_index", &vi) || !get_u64(it, "/until_epoch", &until) || !ind ||
            !json_object_is_type(ind, json_type_array))
            continue;
        size_t k = json_object_array_length(ind);
        if (k > MAX_SYNC_INDICES)
            continue;
        if (now->known && until <= now->epoch)
            continue;
        uint64_t *idx = k ? malloc(k * sizeof *idx) : NULL;
        if (k && !idx)
            continue;
        bool ok = true;
        for (size_t j = 0; j < k && ok; j++) {
            char ptr[24];
            snprintf(ptr, sizeof ptr, "/%zu", j);
            ok = get_u64(ind, ptr, &idx[j]);
        }
        if (!ok) {
            free(idx);
            continue;
        }
        bool created;
        ssub_e *e = table_upsert(&rp->tab[BM_REPLAY_SYNC_SUBS], &vi, &created);
        if (!e) {
            free(idx);
            note_dropped(rp, BM_REPLAY_SYNC_SUBS);
            continue;
        }
        free(e->idx);
        e->idx = idx;
        e->n_idx = (uint32_t)k;
        e->until_epoch = until;
        e->h.seen_ms = now->ms;
        n++;
    }
    return n;
}

int bm_replay_feed(bm_replay_t *rp, bm_replay_kind_t kind, const bm_hdrs_t *headers,
                   const bm_buf_t *body, uint64_t now_ms)
{
    if (!rp || (unsigned)kind >= BM_REPLAY_KIND_COUNT || !body || body->len == 0)
        return BM_EINVAL;
    now_t now = now_at(rp, now_ms);
    const char *fork = headers ? bm_hdrs_get(headers, "eth-consensus-version") : NULL;
    if (kind == BM_REPLAY_PREFERENCES && (!fork || !*fork || strlen(fork) > FORK_MAX))
        return BM_EINVAL; /* required: a replay must send it again */
    if (is_ssz(headers)) {
        const uint8_t *p = (const uint8_t *)body->data;
        if (kind == BM_REPLAY_REGISTRATION)
            return feed_registrations_ssz(rp, p, body->len, now_ms);
        if (kind == BM_REPLAY_PREFERENCES)
            return feed_preferences_ssz(rp, p, body->len, fork, &now);
        return BM_EINVAL; /* the other kinds have no SSZ form */
    }
    json_object *arr = NULL;
    if (bm_json_parse_buf(body, 0, &arr, NULL) != 0)
        return BM_EINVAL;
    int n = BM_EINVAL;
    if (arr && json_object_is_type(arr, json_type_array)) {
        switch (kind) {
        case BM_REPLAY_PREPARATION:
            n = feed_preparations(rp, arr, now_ms);
            break;
        case BM_REPLAY_REGISTRATION:
            n = feed_registrations_json(rp, arr, now_ms);
            break;
        case BM_REPLAY_PREFERENCES:
            n = feed_preferences_json(rp, arr, fork, &now);
            break;
        case BM_REPLAY_COMMITTEE_SUBS:
            n = feed_committee_subs(rp, arr, &now);
            break;
        case BM_REPLAY_SYNC_SUBS:
            n = feed_sync_subs(rp, arr, &now);
            break;
        default:
            break;
        }
    }
    json_object_put(arr);
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
static void render(bm_str_t *s, int kind, const void *ent)
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
    now_t now = now_at(rp, now_ms);
    const table_t *t = &rp->tab[kind];
    bm_str_putc(out, '[');
    size_t k = 0;
    for (size_t i = 0; i < t->n_ents; i++) {
        const ehdr_t *h = ent_at(t, i);
        if (!h->live || expired(rp, kind, h, &now))
            continue;
        if (k++)
            bm_str_putc(out, ',');
        render(out, kind, h);
    }
    bm_str_putc(out, ']');
    return out->oom ? BM_ENOMEM : 0;
}

/* ---- expiry -------------------------------------------------------------------------------- */

size_t bm_replay_sweep(bm_replay_t *rp, uint64_t now_ms)
{
    now_t now = now_at(rp, now_ms);
    size_t dropped = 0;
    if (!now.known)
        return 0;
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++) {
        table_t *t = &rp->tab[k];
        for (size_t i = 0; i < t->n_ents; i++) {
            ehdr_t *h = ent_at(t, i);
            if (h->live && expired(rp, k, h, &now)) {
                table_remove(t, h);
                dropped++;
            }
        }
        if (t->n_ents - t->live > 64 && t->n_ents - t->live > t->n_ents / 2)
            table_compact(t);
    }
    return dropped;
}

static void on_sweep(uv_timer_t *tm)
{
    bm_replay_t *rp = tm->data;
    size_t n = bm_replay_sweep(rp, bm_clock_now_ms());
    if (n)
        bm_log(BM_LOG_DEBUG, "replay: %zu expired entr%s dropped", n, n == 1 ? "y" : "ies");
    uint64_t every = DEFAULT_SWEEP_MS;
    if (rp->chain && rp->chain->known && rp->chain->clock.slot_ms) {
        /* just after the next slot boundary, so that a slot's entries go when it ends */
        const bm_slot_clock_t *c = &rp->chain->clock;
        uint64_t now = bm_clock_now_ms();
        uint64_t next = bm_slot_start_ms(c, bm_slot_at(c, now) + 1);
        every = next > now ? next - now + 5 : c->slot_ms;
    }
    uv_timer_start(&rp->sweep_timer, on_sweep, every, 0);
}

/* ---- replaying to one node ------------------------------------------------------------------ */

static void kick(bm_replay_t *rp);
static void next_chunk(nrep_t *nr);

static void release_cursor(nrep_t *nr)
{
    if (nr->counted) {
        nr->rp->tab[nr->kind].cursors--;
        nr->counted = false;
    }
}

static void replay_end(nrep_t *nr, bool completed)
{
    bm_replay_t *rp = nr->rp;
    release_cursor(nr);
    nr->running = false;
    if (completed) {
        rp->stats.replays_completed++;
        nr->last_done_ms = bm_clock_mono_ms();
    } else {
        rp->stats.replays_failed++;
    }
    if (nr->again) {
        nr->again = false;
        nr->due_ms = bm_clock_mono_ms();
        kick(rp);
    }
}

static void on_post_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    nrep_t *nr = ud;
    bm_replay_t *rp = nr->rp;
    (void)x;
    nr->xfer = NULL;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    node->stats.in_flight--;
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    const char *detail =
        res->err ? (res->detail && *res->detail ? res->detail : bm_strerror(res->err)) : NULL;
    bm_pool_record(rp->pool, node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us, detail);
    if (rp->stopped)
        return;
    if (res->err) {
        bm_log_limited(&rp->lim, BM_LOG_INFO, "replay to %s: %s: %s; the next trigger redoes it",
                       node->id, KIND_PATH[nr->kind], detail);
        replay_end(nr, false);
        return;
    }
    if (res->status < 200 || res->status > 299) {
        rp->stats.posts_rejected++;
        bm_log_limited(&rp->lim, BM_LOG_INFO, "replay to %s: %s answered %d: %.*s", node->id,
                       KIND_PATH[nr->kind], res->status,
                       res->body ? (int)(res->body->len > 200 ? 200 : res->body->len) : 0,
                       res->body ? res->body->data : "");
    }
    next_chunk(nr);
}

static bool fork_done(const nrep_t *nr, const char *fork)
{
    for (int i = 0; i < nr->n_done_forks; i++)
        if (strcmp(nr->done_forks[i], fork) == 0)
            return true;
    return false;
}

/* Renders the next chunk of the current kind from the cursor; 0 entries at its end. */
static size_t build_chunk(nrep_t *nr, const now_t *now, bm_str_t *body)
{
    bm_replay_t *rp = nr->rp;
    table_t *t = &rp->tab[nr->kind];
    size_t k = 0;
    bm_str_putc(body, '[');
    for (; nr->cursor < t->n_ents && k < rp->opts.chunk; nr->cursor++) {
        const ehdr_t *h = ent_at(t, nr->cursor);
        if (!h->live || expired(rp, nr->kind, h, now))
            continue;
        if (nr->kind == BM_REPLAY_PREFERENCES) {
            const pref_e *p = (const pref_e *)h;
            if (!nr->fork[0]) {
                if (fork_done(nr, p->fork))
                    continue;
                snprintf(nr->fork, sizeof nr->fork, "%s", p->fork);
            } else if (strcmp(p->fork, nr->fork) != 0) {
                continue;
            }
        }
        if (k++)
            bm_str_putc(body, ',');
        render(body, nr->kind, h);
    }
    bm_str_putc(body, ']');
    return k;
}

/* Sends the next chunk, moving through the kinds; ends the replay after the last. */
static void next_chunk(nrep_t *nr)
{
    bm_replay_t *rp = nr->rp;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    now_t now = now_at(rp, bm_clock_now_ms());
    while (nr->kind < BM_REPLAY_KIND_COUNT) {
        if (!nr->counted) {
            rp->tab[nr->kind].cursors++;
            nr->counted = true;
        }
        bm_str_t body = BM_STR_INIT;
        size_t k = build_chunk(nr, &now, &body);
        if (k == 0) {
            bm_str_dispose(&body);
            /* preferences: another pass for the next fork, if any is left */
            if (nr->kind == BM_REPLAY_PREFERENCES && nr->fork[0] &&
                nr->n_done_forks < MAX_PASS_FORKS) {
                snprintf(nr->done_forks[nr->n_done_forks++], FORK_MAX + 1, "%s", nr->fork);
                nr->fork[0] = '\0';
                nr->cursor = 0;
                continue;
            }
            release_cursor(nr);
            nr->kind++;
            nr->cursor = 0;
            nr->fork[0] = '\0';
            nr->n_done_forks = 0;
            continue;
        }
        bm_buf_t *b = bm_str_finish(&body);
        bm_str_t url = BM_STR_INIT;
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_hdrs_add_z(&h, "Content-Type", "application/json");
        if (nr->kind == BM_REPLAY_PREFERENCES)
            bm_hdrs_add_z(&h, "Eth-Consensus-Version", nr->fork);
        int rc = b ? bm_url_join(&url, node->url, KIND_PATH[nr->kind]) : BM_ENOMEM;
        if (rc == 0) {
            bm_xfer_req_t xr = {
                .method = "POST",
                .url = bm_str_data(&url),
                .headers = &h,
                .extra = &node->extra,
                .body = b,
                .connect_timeout_ms = rp->opts.connect_timeout_ms,
                .timeout_ms = rp->opts.timeout_ms,
                .max_response_bytes = 1 << 20,
            };
            static const bm_xfer_cbs_t cbs = {NULL, NULL, on_post_done};
            nr->xfer = bm_upstream_start(rp->up, &xr, &cbs, nr);
            if (!nr->xfer)
                rc = BM_EIO;
        }
        bm_hdrs_dispose(&h);
        bm_str_dispose(&url);
        bm_buf_unref(b);
        if (rc != 0) {
            bm_log_limited(&rp->lim, BM_LOG_WARN, "replay to %s: cannot send %s: %s", node->id,
                           KIND_PATH[nr->kind], bm_strerror(rc));
            replay_end(nr, false);
            return;
        }
        node->stats.in_flight++;
        rp->stats.posts++;
        rp->stats.entries_sent += k;
        return;
    }
    uint64_t took = bm_clock_mono_ms() - nr->started_ms;
    bm_log(BM_LOG_DEBUG, "replay to %s done in %llu ms", node->id, (unsigned long long)took);
    replay_end(nr, true);
}

static bool anything_to_replay(const bm_replay_t *rp)
{
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        if (rp->tab[k].live)
            return true;
    return false;
}

static void replay_start(nrep_t *nr)
{
    bm_replay_t *rp = nr->rp;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    if (node->state == BM_NODE_WRONG_NETWORK || !anything_to_replay(rp))
        return;
    nr->running = true;
    nr->kind = 0;
    nr->cursor = 0;
    nr->fork[0] = '\0';
    nr->n_done_forks = 0;
    nr->started_ms = bm_clock_mono_ms();
    rp->stats.replays_started++;
    bm_log(BM_LOG_INFO,
           "replay to %s (%s): %zu preparations, %zu registrations, %zu "
           "preferences, %zu committee and %zu sync subscriptions",
           node->id, nr->why ? nr->why : "requested", rp->tab[0].live, rp->tab[1].live,
           rp->tab[2].live, rp->tab[3].live, rp->tab[4].live);
    next_chunk(nr);
}

static void on_kick(uv_timer_t *tm)
{
    bm_replay_t *rp = tm->data;
    kick(rp);
}

/* Starts what is due and arms the debounce timer for the rest. */
static void kick(bm_replay_t *rp)
{
    if (rp->stopped)
        return;
    uint64_t now = bm_clock_mono_ms();
    uint64_t next = 0;
    for (size_t i = 0; i < rp->n_nodes; i++) {
        nrep_t *nr = &rp->nodes[i];
        if (!nr->due_ms)
            continue;
        if (nr->due_ms <= now) {
            nr->due_ms = 0;
            if (nr->running)
                nr->again = true;
            else
                replay_start(nr);
            if (rp->stopped)
                return;
            continue;
        }
        if (!next || nr->due_ms < next)
            next = nr->due_ms;
    }
    if (next)
        uv_timer_start(&rp->kick_timer, on_kick, next - now, 0);
}

void bm_replay_node(bm_replay_t *rp, bm_node_t *node, const char *why)
{
    if (!rp || rp->stopped || !node || node->index < 0 || (size_t)node->index >= rp->n_nodes)
        return;
    nrep_t *nr = &rp->nodes[node->index];
    nr->why = why;
    if (!nr->due_ms)
        nr->due_ms = bm_clock_mono_ms() + rp->opts.debounce_ms;
    uint64_t now = bm_clock_mono_ms();
    uv_timer_start(&rp->kick_timer, on_kick, nr->due_ms > now ? nr->due_ms - now : 0, 0);
}

static bool absent(bm_node_state_t s)
{
    return s == BM_NODE_UNKNOWN || s == BM_NODE_UNREACHABLE || s == BM_NODE_WRONG_NETWORK;
}

void bm_replay_node_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    bm_replay_t *rp = ud;
    bm_node_state_t now = node->state;
    if (!rp || absent(now) || now == old)
        return;
    if (absent(old)) {
        bm_replay_node(rp, node, old == BM_NODE_UNKNOWN ? "discovered" : "back");
        return;
    }
    if (now != BM_NODE_READY)
        return;
    if (old == BM_NODE_SYNCING) {
        bm_replay_node(rp, node, "synced");
        return;
    }
    /* lagging, optimistic, forked or time-discrepant back to ready: nothing was lost, at
     * most one replay per epoch on this account */
    if (node->index < 0 || (size_t)node->index >= rp->n_nodes)
        return;
    const nrep_t *nr = &rp->nodes[node->index];
    uint64_t epoch_ms = 384000;
    if (rp->chain && rp->chain->known && rp->chain->clock.slot_ms)
        epoch_ms = (uint64_t)rp->chain->clock.slot_ms * rp->chain->clock.slots_per_epoch;
    if (nr->last_done_ms && bm_clock_mono_ms() - nr->last_done_ms < epoch_ms)
        return;
    bm_replay_node(rp, node, "ready again");
}

void bm_replay_node_connection(size_t node, bool up, void *ud)
{
    bm_replay_t *rp = ud;
    if (!rp || !up || node >= rp->n_nodes)
        return;
    bm_replay_node(rp, bm_pool_node(rp->pool, node), "stream reconnected");
}

/* ---- lifetime ------------------------------------------------------------------------------ */

bm_replay_t *bm_replay_new(uv_loop_t *loop, bm_upstream_t *up, bm_pool_t *pool,
                           const bm_chain_info_t *chain, const bm_replay_opts_t *opts)
{
    if (!loop || !up || !pool)
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
    rp->loop = loop;
    rp->up = up;
    rp->pool = pool;
    rp->chain = chain;
    rp->lim.window_ms = 10000;
    rp->lim.burst = 10;
    const size_t *cap = rp->opts.max_entries;
    table_init(&rp->tab[BM_REPLAY_PREPARATION], sizeof(prep_e), offsetof(prep_e, vi), 8,
               cap[BM_REPLAY_PREPARATION], NULL);
    table_init(&rp->tab[BM_REPLAY_REGISTRATION], sizeof(reg_e), offsetof(reg_e, pubkey), 48,
               cap[BM_REPLAY_REGISTRATION], NULL);
    table_init(&rp->tab[BM_REPLAY_PREFERENCES], sizeof(pref_e), offsetof(pref_e, vi), 16,
               cap[BM_REPLAY_PREFERENCES], NULL);
    table_init(&rp->tab[BM_REPLAY_COMMITTEE_SUBS], sizeof(csub_e), offsetof(csub_e, vi), 24,
               cap[BM_REPLAY_COMMITTEE_SUBS], NULL);
    table_init(&rp->tab[BM_REPLAY_SYNC_SUBS], sizeof(ssub_e), offsetof(ssub_e, vi), 8,
               cap[BM_REPLAY_SYNC_SUBS], ssub_dispose);
    rp->n_nodes = bm_pool_count(pool);
    rp->nodes = calloc(rp->n_nodes ? rp->n_nodes : 1, sizeof *rp->nodes);
    if (!rp->nodes) {
        free(rp);
        return NULL;
    }
    for (size_t i = 0; i < rp->n_nodes; i++) {
        rp->nodes[i].rp = rp;
        rp->nodes[i].index = i;
    }
    uv_timer_init(loop, &rp->sweep_timer);
    uv_timer_init(loop, &rp->kick_timer);
    rp->sweep_timer.data = rp->kick_timer.data = rp;
    rp->open_handles = 2;
    uv_timer_start(&rp->sweep_timer, on_sweep, DEFAULT_SWEEP_MS, 0);
    return rp;
}

static void on_timer_closed(uv_handle_t *h)
{
    bm_replay_t *rp = h->data;
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
        release_cursor(nr);
        nr->running = false;
        nr->due_ms = 0;
    }
    uv_close((uv_handle_t *)&rp->sweep_timer, on_timer_closed);
    uv_close((uv_handle_t *)&rp->kick_timer, on_timer_closed);
}

void bm_replay_free(bm_replay_t *rp)
{
    if (!rp)
        return;
    bm_assert(rp->stopped && rp->open_handles == 0);
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        table_dispose(&rp->tab[k]);
    free(rp->nodes);
    free(rp);
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
