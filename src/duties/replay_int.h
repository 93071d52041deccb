/* SPDX-License-Identifier: MIT */
/*
 * replay_int: what the parts of the replay memory share (replay.c: the module, feeding,
 * rendering, expiry, lifetime; replay_store.c: the tables; replay_scan.c: reading items,
 * with the fast scanner beside json-c; replay_send.c: replaying to one node). Private to
 * those files.
 */
#ifndef BM_REPLAY_INT_H
#define BM_REPLAY_INT_H

#include "duties/replay.h"

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/log.h"

#define DEFAULT_SWEEP_MS 12000 /* while the slot clock is unknown */
#define FORK_MAX 32            /* characters of a fork name kept with a preference */
#define MAX_SYNC_INDICES 1024  /* per sync subscription (SYNC_COMMITTEE_SIZE is 512) */
#define MAX_PASS_FORKS 8       /* preference forks replayed in separate requests */
#define REG_SSZ_LEN 180        /* SignedValidatorRegistrationV1 */
#define PREF_SSZ_LEN 172       /* Gloas SignedProposerPreferences */

static const uint8_t HASH_KEY[16] = {0x62, 0x6d, 0x2d, 0x72, 0x65, 0x70, 0x6c, 0x61,
                                     0x79, 0x2d, 0x6b, 0x65, 0x79, 0x2d, 0x76, 0x31};

/* ---- entries ----------------------------------------------------------------------------- */

/* An entry a write stored, waiting to be handed to the listener (bm_replay_on_entry). */
typedef struct emit_key {
    uint8_t kind;
    uint8_t key[48]; /* the longest key: a registration's public key */
} emit_key_t;

typedef struct ehdr {
    bool live;
    uint64_t seen_ms;    /* wall time of the latest write that carried it */
    uint32_t prev, next; /* the submission order (position + 1; 0: none): oldest first */
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
    unsigned cursors;        /* replays walking the table: positions must not move */
    uint32_t oldest, newest; /* ends of the submission order (position + 1; 0: empty) */
    size_t fed_new;          /* entries the write being fed created so far */
    uint64_t dropped;        /* not kept: past a write's share, or no memory */
    uint64_t evicted;        /* pushed out, least recently submitted first, to make room */
    void (*dispose)(void *e);
} table_t;

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
    bm_log_limit_t lim_share, lim_evict; /* their own limits: one must not hide the other */
    bm_replay_entry_fn on_entry;         /* shared state: each entry a write stored (NULL: none) */
    void *on_entry_ud;
    bm_timer_t *emit_timer; /* hands the entries fed to on_entry, after the write's answer */
    emit_key_t *emits;      /* the entries fed since it last ran */
    size_t n_emits, cap_emits;
    bool restoring; /* bm_replay_restore is storing: older than ours loses, nothing emitted */
};

/* ---- time -------------------------------------------------------------------------------- */

typedef struct now {
    bool known;
    uint64_t ms, slot, epoch;
} now_t;

/* ---- reading items ------------------------------------------------------------------------ */

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

typedef struct scan {
    const char *p, *end;
} scan_t;

#define SCAN_MAX_DEPTH 8

/* ---- across the parts ----------------------------------------------------------------------- */

/* replay_store.c: the tables */
void *bm_rp_table_upsert(table_t *t, const void *key, bool may_create, bool *created);
void *bm_rp_table_find(const table_t *t, const void *key);
void *bm_rp_ent_at(const table_t *t, size_t i);
void bm_rp_table_remove(table_t *t, void *e);
void bm_rp_table_compact(table_t *t);
void bm_rp_table_init(table_t *t, size_t stride, size_t key_off, size_t key_len, size_t max_live,
                      void (*dispose)(void *));
void bm_rp_table_dispose(table_t *t);
void bm_rp_ssub_dispose(void *e);

/* replay_scan.c: reading items */
bool bm_rp_it_u64(const item_t *it, int f, uint64_t *out);
bool bm_rp_it_hex(const item_t *it, int f, uint8_t *out, size_t n);
bool bm_rp_it_bool(const item_t *it, int f, bool *out);
uint64_t *bm_rp_it_u64_array(const item_t *it, int f, size_t *n, bool *ok);
void bm_rp_ws(scan_t *s);
bool bm_rp_scan_object(scan_t *s, int depth, fitem_t *fi, bool in_msg);
bool bm_rp_scan_value(scan_t *s, int depth, span_t *out);

/* replay.c */
bool bm_rp_expired(const bm_replay_t *rp, int kind, const void *e, const now_t *now);
void bm_rp_render(bm_str_t *s, int kind, const void *ent);
now_t bm_rp_now_at(const bm_replay_t *rp, uint64_t ms);

/* replay_send.c */
void bm_rp_on_kick(bm_timer_t *tm, void *ud);
void bm_rp_release_cursor(nrep_t *nr);

#endif /* BM_REPLAY_INT_H */
