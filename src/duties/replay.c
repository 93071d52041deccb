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
#include "duties/replay.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "base/url.h"

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
    bm_clock_t *clock;
    bm_upstream_t *up;
    bm_pool_t *pool;
    const bm_chain_info_t *chain;
    bm_replay_opts_t opts;
    table_t tab[BM_REPLAY_KIND_COUNT];
    nrep_t *nodes;
    size_t n_nodes;
    bm_timer_t *sweep_timer, *kick_timer;
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
    o->timeout_ms = BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
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

/* ---- feeding: reading items ----------------------------------------------------------------- */

/*
 * A JSON body is read in one of two ways, with the same result. The fast scanner walks the
 * text once without allocating and notes where the few fields a kind needs lie; it takes
 * the shapes validator clients send (strings without escapes, booleans, plain small
 * integers, ASCII) and gives up on anything else (an escape, a fraction, a non-ASCII byte,
 * deep nesting, a syntax error), and the body is then read by json-c (bm_json_parse, which
 * also checks it against RFC 8259). The scanner exists because a validator client with
 * 10 000 validators sends about 1 MiB of preparations every epoch: json-c takes tens of
 * milliseconds of loop time for it, the scanner a few. fuzz/fuzz_replay.c checks that both
 * ways agree on every input the scanner takes.
 */

/* The fields any kind reads: at the top of an item, and inside its "message". */
enum {
    F_VALIDATOR_INDEX,
    F_FEE_RECIPIENT,
    F_SIGNATURE,
    F_COMMITTEE_INDEX,
    F_COMMITTEES_AT_SLOT,
    F_SLOT,
    F_IS_AGGREGATOR,
    F_SYNC_INDICES,
    F_UNTIL_EPOCH,
    F_TOP_COUNT
};
enum {
    M_FEE_RECIPIENT,
    M_GAS_LIMIT,
    M_TIMESTAMP,
    M_PUBKEY,
    M_DEPENDENT_ROOT,
    M_PROPOSAL_SLOT,
    M_VALIDATOR_INDEX,
    M_TARGET_GAS_LIMIT,
    F_MSG_COUNT
};

static const char *const TOP_NAMES[F_TOP_COUNT] = {
    "validator_index", "fee_recipient",          "signature",
    "committee_index", "committees_at_slot",     "slot",
    "is_aggregator",   "sync_committee_indices", "until_epoch"};
static const char *const MSG_NAMES[F_MSG_COUNT] = {
    "fee_recipient",  "gas_limit",     "timestamp",       "pubkey",
    "dependent_root", "proposal_slot", "validator_index", "target_gas_limit"};

/* Where a value lies in the text: the characters of a string (no quotes), the digits of a
 * number, a literal, or the whole text of an array or object. */
typedef struct span {
    const char *p;
    size_t n;
    char t; /* 0 absent, 's' string, 'n' number, 't' true, 'f' false, 'z' null, 'a', 'o' */
} span_t;

typedef struct fitem {
    span_t top[F_TOP_COUNT];
    span_t msg[F_MSG_COUNT];
} fitem_t;

/* One array item, read either way. */
typedef struct item {
    json_object *jo;   /* json-c */
    const fitem_t *fi; /* the scanner */
} item_t;

/* field ids: top-level ones, or message ones with MSG_BIT */
#define MSG_BIT 0x100

static const span_t *fspan(const item_t *it, int f)
{
    const span_t *s = f & MSG_BIT ? &it->fi->msg[f & 0xff] : &it->fi->top[f];
    return s->t ? s : NULL;
}

static const char *field_ptr(int f, char buf[64])
{
    snprintf(buf, 64, "%s/%s", f & MSG_BIT ? "/message" : "",
             f & MSG_BIT ? MSG_NAMES[f & 0xff] : TOP_NAMES[f]);
    return buf;
}

static bool span_u64(const span_t *s, uint64_t *out)
{
    if (!s || (s->t != 's' && s->t != 'n'))
        return false;
    return bm_json_parse_u64(s->p, s->n, out) == 0;
}

static bool it_u64(const item_t *it, int f, uint64_t *out)
{
    if (it->fi)
        return span_u64(fspan(it, f), out);
    char buf[64];
    return bm_json_get_u64(it->jo, field_ptr(f, buf), out) == 0;
}

static bool it_hex(const item_t *it, int f, uint8_t *out, size_t n)
{
    const char *str;
    size_t len;
    if (it->fi) {
        const span_t *s = fspan(it, f);
        if (!s || s->t != 's')
            return false;
        str = s->p;
        len = s->n;
    } else {
        char buf[64];
        str = bm_json_get_str(it->jo, field_ptr(f, buf));
        if (!str)
            return false;
        len = strlen(str);
    }
    uint8_t tmp[96];
    size_t got;
    if (n > sizeof tmp || bm_hex_decode(str, len, tmp, n, &got) != 0 || got != n)
        return false;
    memcpy(out, tmp, n);
    return true;
}

static bool it_bool(const item_t *it, int f, bool *out)
{
    if (it->fi) {
        const span_t *s = fspan(it, f);
        if (!s || (s->t != 't' && s->t != 'f'))
            return false;
        *out = s->t == 't';
        return true;
    }
    char buf[64];
    return bm_json_get_bool(it->jo, field_ptr(f, buf), out) == 0;
}

/* ---- the fast scanner ------------------------------------------------------------------------ */

typedef struct scan {
    const char *p, *end;
} scan_t;

#define SCAN_MAX_DEPTH 8

static void ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* A string without escapes, control characters or non-ASCII bytes. */
static bool scan_string(scan_t *s, span_t *out)
{
    if (s->p >= s->end || *s->p != '"')
        return false;
    const char *q = ++s->p;
    while (q < s->end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c == '\\' || c < 0x20 || c >= 0x80)
            return false;
        q++;
    }
    if (q >= s->end)
        return false;
    out->p = s->p;
    out->n = (size_t)(q - s->p);
    out->t = 's';
    s->p = q + 1;
    return true;
}

static bool scan_literal(scan_t *s, const char *lit, char t, span_t *out)
{
    size_t n = strlen(lit);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return false;
    out->p = s->p;
    out->n = n;
    out->t = t;
    s->p += n;
    return true;
}

/* A plain non-negative integer below 10^19 ("0" or no leading zero); anything else (a
 * sign, a fraction, an exponent, more digits) is left to json-c. */
static bool scan_number(scan_t *s, span_t *out)
{
    const char *q = s->p;
    while (q < s->end && *q >= '0' && *q <= '9')
        q++;
    size_t n = (size_t)(q - s->p);
    if (n == 0 || n > 19 || (n > 1 && *s->p == '0'))
        return false;
    if (q < s->end && (*q == '.' || *q == 'e' || *q == 'E'))
        return false;
    out->p = s->p;
    out->n = n;
    out->t = 'n';
    s->p = q;
    return true;
}

static bool scan_value(scan_t *s, int depth, span_t *out);

/* Members of an object (the '{' is next), each value passed to `member`, or skipped. */
static bool scan_object(scan_t *s, int depth, fitem_t *fi, bool in_msg)
{
    s->p++; /* '{' */
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return true;
    }
    for (;;) {
        span_t key, val;
        ws(s);
        if (!scan_string(s, &key))
            return false;
        ws(s);
        if (s->p >= s->end || *s->p != ':')
            return false;
        s->p++;
        ws(s);
        span_t *slot = NULL;
        bool message = false;
        if (fi && !in_msg) {
            for (int k = 0; k < F_TOP_COUNT && !slot; k++)
                if (strlen(TOP_NAMES[k]) == key.n && memcmp(TOP_NAMES[k], key.p, key.n) == 0)
                    slot = &fi->top[k];
            message = key.n == 7 && memcmp(key.p, "message", 7) == 0;
        } else if (fi) {
            for (int k = 0; k < F_MSG_COUNT && !slot; k++)
                if (strlen(MSG_NAMES[k]) == key.n && memcmp(MSG_NAMES[k], key.p, key.n) == 0)
                    slot = &fi->msg[k];
        }
        if (message) {
            /* a later "message" replaces an earlier one entirely, as in json-c */
            memset(fi->msg, 0, sizeof fi->msg);
            if (s->p < s->end && *s->p == '{') {
                if (depth + 1 > SCAN_MAX_DEPTH || !scan_object(s, depth + 1, fi, true))
                    return false;
            } else if (!scan_value(s, depth + 1, &val)) {
                return false;
            }
        } else {
            if (!scan_value(s, depth + 1, &val))
                return false;
            if (slot)
                *slot = val; /* the last of duplicate keys wins, as in json-c */
        }
        ws(s);
        if (s->p >= s->end)
            return false;
        if (*s->p == '}') {
            s->p++;
            return true;
        }
        if (*s->p != ',')
            return false;
        s->p++;
    }
}

static bool scan_array(scan_t *s, int depth)
{
    s->p++; /* '[' */
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return true;
    }
    for (;;) {
        span_t v;
        ws(s);
        if (!scan_value(s, depth + 1, &v))
            return false;
        ws(s);
        if (s->p >= s->end)
            return false;
        if (*s->p == ']') {
            s->p++;
            return true;
        }
        if (*s->p != ',')
            return false;
        s->p++;
    }
}

/* Any value; arrays and objects are checked and their whole text is the span. */
static bool scan_value(scan_t *s, int depth, span_t *out)
{
    if (s->p >= s->end || depth > SCAN_MAX_DEPTH)
        return false;
    const char *start = s->p;
    switch (*s->p) {
    case '"':
        return scan_string(s, out);
    case 't':
        return scan_literal(s, "true", 't', out);
    case 'f':
        return scan_literal(s, "false", 'f', out);
    case 'n':
        return scan_literal(s, "null", 'z', out);
    case '[':
        if (!scan_array(s, depth))
            return false;
        out->t = 'a';
        break;
    case '{':
        if (!scan_object(s, depth, NULL, false))
            return false;
        out->t = 'o';
        break;
    default:
        return scan_number(s, out);
    }
    out->p = start;
    out->n = (size_t)(s->p - start);
    return true;
}

/* The array of sync committee indices: every element a u64 (string or plain integer).
 * NULL with *ok false when an element is not; caller frees. */
static uint64_t *it_u64_array(const item_t *it, int f, size_t *n, bool *ok)
{
    *n = 0;
    *ok = false;
    if (it->fi) {
        const span_t *sp = fspan(it, f);
        if (!sp || sp->t != 'a')
            return NULL;
        /* count, then read: the span was checked already */
        size_t cap = 0;
        for (int pass = 0; pass < 2; pass++) {
            uint64_t *out = pass ? (cap ? malloc(cap * sizeof *out) : NULL) : NULL;
            if (pass && cap && !out)
                return NULL;
            scan_t s = {sp->p + 1, sp->p + sp->n};
            size_t k = 0;
            ws(&s);
            while (s.p < s.end && *s.p != ']') {
                span_t v;
                if (!scan_value(&s, 1, &v) || (pass && !span_u64(&v, &out[k])) ||
                    (!pass && v.t != 's' && v.t != 'n') || ++k > MAX_SYNC_INDICES) {
                    free(out);
                    return NULL;
                }
                ws(&s);
                if (s.p < s.end && *s.p == ',')
                    s.p++;
                ws(&s);
            }
            if (!pass) {
                cap = k;
                continue;
            }
            *n = k;
            *ok = true;
            return out;
        }
        return NULL;
    }
    char buf[64];
    json_object *a = bm_json_get(it->jo, field_ptr(f, buf));
    if (!a || !json_object_is_type(a, json_type_array))
        return NULL;
    size_t k = json_object_array_length(a);
    if (k > MAX_SYNC_INDICES)
        return NULL;
    uint64_t *out = k ? malloc(k * sizeof *out) : NULL;
    if (k && !out)
        return NULL;
    for (size_t j = 0; j < k; j++) {
        char ptr[24];
        snprintf(ptr, sizeof ptr, "/%zu", j);
        if (bm_json_get_u64(a, ptr, &out[j]) != 0) {
            free(out);
            return NULL;
        }
    }
    *n = k;
    *ok = true;
    return out;
}

/* ---- feeding: storing items ------------------------------------------------------------------ */

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

static int put_item(bm_replay_t *rp, bm_replay_kind_t kind, const item_t *it, const char *fork,
                    const now_t *now)
{
    switch (kind) {
    case BM_REPLAY_PREPARATION: {
        uint64_t vi;
        uint8_t fee[20];
        if (!it_u64(it, F_VALIDATOR_INDEX, &vi) || !it_hex(it, F_FEE_RECIPIENT, fee, 20))
            return 0;
        return put_prep(rp, vi, fee, now->ms);
    }
    case BM_REPLAY_REGISTRATION: {
        reg_e r;
        memset(&r, 0, sizeof r);
        if (!it_hex(it, MSG_BIT | M_FEE_RECIPIENT, r.fee, 20) ||
            !it_u64(it, MSG_BIT | M_GAS_LIMIT, &r.gas) ||
            !it_u64(it, MSG_BIT | M_TIMESTAMP, &r.ts) ||
            !it_hex(it, MSG_BIT | M_PUBKEY, r.pubkey, 48) || !it_hex(it, F_SIGNATURE, r.sig, 96))
            return 0;
        return put_reg(rp, &r, now->ms);
    }
    case BM_REPLAY_PREFERENCES: {
        pref_e p;
        memset(&p, 0, sizeof p);
        if (!it_hex(it, MSG_BIT | M_DEPENDENT_ROOT, p.dep, 32) ||
            !it_u64(it, MSG_BIT | M_PROPOSAL_SLOT, &p.slot) ||
            !it_u64(it, MSG_BIT | M_VALIDATOR_INDEX, &p.vi) ||
            !it_hex(it, MSG_BIT | M_FEE_RECIPIENT, p.fee, 20) ||
            !it_u64(it, MSG_BIT | M_TARGET_GAS_LIMIT, &p.gas) ||
            !it_hex(it, F_SIGNATURE, p.sig, 96))
            return 0;
        return put_pref(rp, &p, fork, now);
    }
    case BM_REPLAY_COMMITTEE_SUBS: {
        uint64_t key[3], cas;
        bool agg;
        if (!it_u64(it, F_VALIDATOR_INDEX, &key[0]) || !it_u64(it, F_SLOT, &key[1]) ||
            !it_u64(it, F_COMMITTEE_INDEX, &key[2]) || !it_u64(it, F_COMMITTEES_AT_SLOT, &cas) ||
            !it_bool(it, F_IS_AGGREGATOR, &agg))
            return 0;
        if (now->known && key[1] < now->slot)
            return 0; /* the duty is over */
        bool created;
        csub_e *e = table_upsert(&rp->tab[BM_REPLAY_COMMITTEE_SUBS], key, &created);
        if (!e) {
            note_dropped(rp, BM_REPLAY_COMMITTEE_SUBS);
            return 0;
        }
        e->cas = cas;
        e->agg = agg;
        e->h.seen_ms = now->ms;
        return 1;
    }
    case BM_REPLAY_SYNC_SUBS: {
        uint64_t vi, until;
        if (!it_u64(it, F_VALIDATOR_INDEX, &vi) || !it_u64(it, F_UNTIL_EPOCH, &until))
            return 0;
        size_t k;
        bool ok;
        uint64_t *idx = it_u64_array(it, F_SYNC_INDICES, &k, &ok);
        if (!ok || (now->known && until <= now->epoch)) {
            free(idx);
            return 0;
        }
        bool created;
        ssub_e *e = table_upsert(&rp->tab[BM_REPLAY_SYNC_SUBS], &vi, &created);
        if (!e) {
            free(idx);
            note_dropped(rp, BM_REPLAY_SYNC_SUBS);
            return 0;
        }
        free(e->idx);
        e->idx = idx;
        e->n_idx = (uint32_t)k;
        e->until_epoch = until;
        e->h.seen_ms = now->ms;
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
        ws(&s);
        if (s.p >= s.end || *s.p != '[')
            return -1;
        s.p++;
        ws(&s);
        bool first = true;
        while (s.p < s.end && *s.p != ']') {
            if (!first) {
                if (*s.p != ',')
                    return -1;
                s.p++;
                ws(&s);
            }
            first = false;
            fitem_t fi;
            memset(&fi, 0, sizeof fi);
            span_t v;
            if (s.p < s.end && *s.p == '{') {
                if (!scan_object(&s, 1, &fi, false))
                    return -1;
                if (pass) {
                    item_t it = {NULL, &fi};
                    n += put_item(rp, kind, &it, fork, now);
                }
            } else if (!scan_value(&s, 1, &v)) {
                return -1;
            }
            ws(&s);
        }
        if (s.p >= s.end)
            return -1;
        s.p++;
        ws(&s);
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
    if (!rp->opts.json_c_only) {
        int n = feed_fast(rp, kind, body->data, body->len, fork, &now);
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
            n += put_item(rp, kind, &it, fork, &now);
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
        nr->last_done_ms = bm_clock_mono_now(rp->clock);
    } else {
        rp->stats.replays_failed++;
    }
    if (nr->again) {
        nr->again = false;
        nr->due_ms = bm_clock_mono_now(rp->clock);
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
    now_t now = now_at(rp, bm_clock_wall_now(rp->clock));
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
    uint64_t took = bm_clock_mono_now(rp->clock) - nr->started_ms;
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
    nr->started_ms = bm_clock_mono_now(rp->clock);
    rp->stats.replays_started++;
    bm_log(BM_LOG_INFO,
           "replay to %s (%s): %zu preparations, %zu registrations, %zu "
           "preferences, %zu committee and %zu sync subscriptions",
           node->id, nr->why ? nr->why : "requested", rp->tab[0].live, rp->tab[1].live,
           rp->tab[2].live, rp->tab[3].live, rp->tab[4].live);
    next_chunk(nr);
}

static void on_kick(bm_timer_t *tm, void *ud)
{
    (void)tm;
    bm_replay_t *rp = ud;
    kick(rp);
}

/* Starts what is due and arms the debounce timer for the rest. */
static void kick(bm_replay_t *rp)
{
    if (rp->stopped)
        return;
    uint64_t now = bm_clock_mono_now(rp->clock);
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
        bm_timer_start(rp->kick_timer, next - now);
}

/* Arms the debounce timer at the earliest replay due. */
static void arm_kick(bm_replay_t *rp)
{
    uint64_t next = 0;
    for (size_t i = 0; i < rp->n_nodes; i++)
        if (rp->nodes[i].due_ms && (!next || rp->nodes[i].due_ms < next))
            next = rp->nodes[i].due_ms;
    if (!next)
        return;
    uint64_t now = bm_clock_mono_now(rp->clock);
    bm_timer_start(rp->kick_timer, next > now ? next - now : 0);
}

/* A replay to `nr` after the debounce and not before `not_before` (monotonic ms); a replay
 * due sooner already stands. */
static void schedule(bm_replay_t *rp, nrep_t *nr, const char *why, uint64_t not_before)
{
    uint64_t at = bm_clock_mono_now(rp->clock) + rp->opts.debounce_ms;
    if (at < not_before)
        at = not_before;
    if (!nr->due_ms || at < nr->due_ms) {
        nr->due_ms = at;
        nr->why = why;
    }
    arm_kick(rp);
}

void bm_replay_node(bm_replay_t *rp, bm_node_t *node, const char *why)
{
    if (!rp || rp->stopped || !node || node->index < 0 || (size_t)node->index >= rp->n_nodes)
        return;
    if (node->shadow)
        return; /* no write is sent to a shadow, so nothing is replayed to it either */
    schedule(rp, &rp->nodes[node->index], why, 0);
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
    if (nr->last_done_ms && bm_clock_mono_now(rp->clock) - nr->last_done_ms < epoch_ms)
        return;
    bm_replay_node(rp, node, "ready again");
}

void bm_replay_node_connection(size_t node, bool up, void *ud)
{
    bm_replay_t *rp = ud;
    if (!rp || rp->stopped || !up || node >= rp->n_nodes)
        return;
    const bm_node_t *n = bm_pool_node(rp->pool, node);
    if (n->state == BM_NODE_WRONG_NETWORK || n->shadow)
        return;
    /* a stream that keeps dropping must not turn into a replay storm: at most one replay
     * per interval on this account, deferred rather than dropped (it may hide a restart) */
    nrep_t *nr = &rp->nodes[node];
    uint64_t gap = rp->opts.reconnect_min_interval_ms;
    if (!gap)
        gap = rp->chain && rp->chain->known && rp->chain->clock.slot_ms ? rp->chain->clock.slot_ms
                                                                        : DEFAULT_SWEEP_MS;
    schedule(rp, nr, "stream reconnected", nr->started_ms ? nr->started_ms + gap : 0);
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
    rp->sweep_timer = bm_timer_new(clock, on_sweep, rp);
    rp->kick_timer = bm_timer_new(clock, on_kick, rp);
    if (!rp->nodes || !rp->sweep_timer || !rp->kick_timer) {
        bm_timer_close(rp->sweep_timer, NULL, NULL);
        bm_timer_close(rp->kick_timer, NULL, NULL);
        for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
            table_dispose(&rp->tab[k]);
        free(rp->nodes);
        free(rp);
        return NULL;
    }
    for (size_t i = 0; i < rp->n_nodes; i++) {
        rp->nodes[i].rp = rp;
        rp->nodes[i].index = i;
    }
    rp->open_handles = 2;
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
        release_cursor(nr);
        nr->running = false;
        nr->due_ms = 0;
    }
    bm_timer_close(rp->sweep_timer, on_timer_closed, rp);
    bm_timer_close(rp->kick_timer, on_timer_closed, rp);
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
