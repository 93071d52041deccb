/* SPDX-License-Identifier: MIT */
/*
 * replay: the node-local state validator clients put into beacon nodes, kept per validator
 * so that it can be given again to a node that lost it.
 *
 * A beacon node keeps some of what a validator client tells it only in memory: the fee
 * recipient of each validator (prepare_beacon_proposer), its builder registration
 * (register_validator), its Gloas proposer preferences (proposer_preferences) and the
 * subnets it must join (beacon_committee_subscriptions, sync_committee_subscriptions).
 * Behind beaconmux every write reaches every node, but a node that restarts forgets all
 * of it, and the validator client does not know it has to send it again: until the next
 * periodic call (an epoch later, or never for a subscription) that node would build a
 * block paying the wrong fee recipient or miss the subnets of its validators' duties.
 *
 * So broadcast feeds every successful write here (bm_replay_feed), and the state is kept
 * per validator, not per request body: the latest preparation per validator index, the
 * newest registration per public key (an older timestamp never replaces a newer one), the
 * preferences per (validator, proposal slot), the committee subscriptions per (validator,
 * slot, committee) and the sync subscription per validator. Each entry expires with the
 * meaning it has for a node: a preparation after the epoch it was sent in and two more
 * (what the spec tells nodes to keep), a registration `registration_ttl_epochs` after
 * the validator client last sent it, preferences and committee subscriptions after their
 * slot, a sync subscription at its `until_epoch` (exclusive). Expired entries are swept
 * on a slot timer and never replayed. Every submission refreshes the entries it carries.
 * Nobody can fill the memory: every kind has a cap on entries, and a full kind makes room
 * by dropping its least recently submitted entry (never by refusing the newest, which would
 * let the first to fill it keep it), while one write may add at most 1/BM_REPLAY_SHARE_DIV
 * of the cap as new entries; the rest of that write is still broadcast, only not
 * remembered (counted, logged at a bounded rate).
 *
 * A replay to one node sends every live entry of every kind as JSON arrays, one endpoint
 * after the other (preparations first: the fee recipient matters most), in chunks of at
 * most `chunk` entries, one POST in flight per node. JSON is accepted by every node, so a
 * node that refuses SSZ gets its replay anyway. Chunks are built lazily, one at a time,
 * so a large validator set never blocks the loop or holds a big body, and replays use
 * their own transfers beside live writes, which they never wait for or delay.
 *
 * Triggers (each debounced by `debounce_ms`, so that a stream reconnect and a state
 * change at the same moment give one replay): a node's event stream reconnected
 * (bm_replay_node_connection, the monitor's connection listener; at most once a slot, so
 * that a stream that keeps dropping cannot cause a replay storm), a node that was unknown,
 * unreachable or on the wrong network came back (first discovery at start-up included),
 * a syncing node became ready (bm_replay_node_state, a pool state listener), and explicit
 * requests (bm_replay_node). A node that only went from lagging back to ready has not
 * lost anything; it is replayed at most once per epoch on that account.
 */
#ifndef BM_REPLAY_H
#define BM_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "http/upstream.h"

typedef struct bm_replay bm_replay_t;

/** One write may add at most 1/BM_REPLAY_SHARE_DIV of a kind's cap as new entries. */
#define BM_REPLAY_SHARE_DIV 4

/** What is kept, in replay order. */
typedef enum bm_replay_kind {
    BM_REPLAY_PREPARATION = 0, /* POST /eth/v1/validator/prepare_beacon_proposer */
    BM_REPLAY_REGISTRATION,    /* POST /eth/v1/validator/register_validator */
    BM_REPLAY_PREFERENCES,     /* POST /eth/v1/validator/proposer_preferences (Gloas) */
    BM_REPLAY_COMMITTEE_SUBS,  /* POST /eth/v1/validator/beacon_committee_subscriptions */
    BM_REPLAY_SYNC_SUBS,       /* POST /eth/v1/validator/sync_committee_subscriptions */
    BM_REPLAY_KIND_COUNT
} bm_replay_kind_t;

typedef struct bm_replay_opts {
    size_t max_entries[BM_REPLAY_KIND_COUNT]; /* cap per kind (defaults: 65536, 65536, 8192,
                                                 131072, 65536); 0 takes the default */
    uint32_t registration_ttl_epochs;         /* a registration not sent again for this many
                                                 epochs is dropped (default 4) */
    size_t chunk;                             /* entries per replay POST (default 512) */
    uint32_t debounce_ms;                     /* triggers closer than this coalesce (default 200) */
    uint32_t timeout_ms;                      /* per replay POST (default duties.writeTimeout) */
    uint32_t connect_timeout_ms;              /* default timeouts.connect */
    uint32_t reconnect_min_interval_ms;       /* a stream reconnect replays at most once per this
                                                 long, later ones are deferred (0: one slot) */
    bool json_c_only; /* tests: read every JSON body with json-c, never with the fast scanner
                         (both must agree) */
} bm_replay_opts_t;

/** Fills `o` with the defaults above. */
void bm_replay_opts_default(bm_replay_opts_t *o);

/**
 * Creates the replay state on `clock` (its timers and times; the real clock in beaconmux).
 * `clock`, `up` and `pool` are borrowed and must outlive it;
 * `chain` (borrowed, may be NULL; typically bm_discovery_chain()) gives the slot clock for
 * expiry: while it is unknown nothing expires and the sweep runs every 12 s. Starts the
 * sweep timer. NULL on allocation failure.
 */
bm_replay_t *bm_replay_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool,
                           const bm_chain_info_t *chain, const bm_replay_opts_t *opts);

/** Cancels replays in flight and closes the timers; no callback runs afterwards. Entries a
 *  write stored that still wait for the listener (bm_replay_on_entry) are handed to it from
 *  inside this call, first. The timers close asynchronously: run the loop, then
 *  bm_replay_free. Idempotent. */
void bm_replay_stop(bm_replay_t *rp);

/** Frees the state (after bm_replay_stop and a loop run). NULL is ignored. */
void bm_replay_free(bm_replay_t *rp);

/** The endpoint (POST path) of a kind, e.g. "/eth/v1/validator/prepare_beacon_proposer". */
const char *bm_replay_kind_path(bm_replay_kind_t kind);

/**
 * Remembers the entries of a write that a node accepted: `body` as sent by the client,
 * JSON, or SSZ (application/octet-stream in `headers`) for registrations and preferences;
 * `headers` are the request's (Content-Type, and Eth-Consensus-Version for preferences).
 * Entries are upserted per validator as described above, at wall time `now_ms`; malformed
 * items are skipped (the node rejected them too). Returns the number of entries stored or
 * refreshed, or BM_EINVAL when the body is not an array of the kind (nothing stored).
 */
int bm_replay_feed(bm_replay_t *rp, bm_replay_kind_t kind, const bm_hdrs_t *headers,
                   const bm_buf_t *body, uint64_t now_ms);

/** Drops every entry expired at wall time `now_ms` (the slot timer calls it with the
 *  current time). Returns how many were dropped. */
size_t bm_replay_sweep(bm_replay_t *rp, uint64_t now_ms);

/**
 * Copies every entry of `from` into `to`, as it is (the time it was last sent, and so its
 * expiry, the fork of a preference), over an entry `to` has for the same key: what a
 * network built by a configuration reload takes from the one it replaces, before it starts.
 * Entries past `to`'s caps are dropped (counted). Returns 0, or BM_ENOMEM when an entry
 * could not be copied whole.
 */
int bm_replay_adopt(bm_replay_t *to, const bm_replay_t *from);

/** Live entries of a kind (expired ones count until the next sweep). */
size_t bm_replay_count(const bm_replay_t *rp, bm_replay_kind_t kind);

/** Entries not remembered: past their write's share of the cap (or out of memory). */
uint64_t bm_replay_dropped(const bm_replay_t *rp, bm_replay_kind_t kind);

/** Entries dropped, least recently submitted first, to make room for newer ones. */
uint64_t bm_replay_evicted(const bm_replay_t *rp, bm_replay_kind_t kind);

/**
 * Appends every entry of `kind` not expired at `now_ms` to `out` as the one JSON array a
 * replay would send (in chunks), in the endpoint's request shape: for the status page and
 * tests. Preferences of every fork go into the one array. Returns 0 or BM_ENOMEM.
 */
int bm_replay_dump(const bm_replay_t *rp, bm_replay_kind_t kind, uint64_t now_ms, bm_str_t *out);

/**
 * State kept across restarts (app/statedir.h): appends every live entry of every kind to
 * `out` as one JSON object {"preparations":[{"seenMs":"N","item":{...}}, ...], ...}, each
 * item in its endpoint's request shape with the wall time it was last sent (preferences
 * also carry their fork). Returns 0 or BM_ENOMEM.
 */
int bm_replay_export(const bm_replay_t *rp, uint64_t now_ms, bm_str_t *out);

/**
 * Restores what bm_replay_export wrote, each entry with its own last-sent time (so it
 * expires as it would have), then sweeps what expired by `now_ms`. Entries it cannot read
 * are skipped; caps apply. Only an empty state is restored (at start): entries this
 * process already holds are newer than any file, so then nothing is imported (0).
 * Returns the entries restored and still live, or BM_EINVAL when `json` is not
 * such an object (nothing restored).
 */
int bm_replay_import(bm_replay_t *rp, const char *json, size_t len, uint64_t now_ms);

/**
 * Replays everything to `node` after the debounce (`why` is logged; static string). A
 * replay already running for the node is run again once it finished. Wrong-network nodes
 * are never replayed to.
 */
void bm_replay_node(bm_replay_t *rp, bm_node_t *node, const char *why);

/** Pool state listener (register with bm_pool_on_state, `ud` = the replay): see the
 *  triggers above. */
void bm_replay_node_state(bm_node_t *node, bm_node_state_t old, void *ud);

/** The monitor's connection listener (bm_monitor_on_connection, `ud` = the replay): a
 *  node's event stream came up (`up`), so the node may have restarted: replay to it. */
void bm_replay_node_connection(size_t node, bool up, void *ud);

/** What replays did so far. */
typedef struct bm_replay_stats {
    uint64_t replays_started;   /* replays to a node begun */
    uint64_t replays_completed; /* ... that sent every chunk (whatever the node answered) */
    uint64_t replays_failed;    /* ... cut by a network error (the next trigger redoes it) */
    uint64_t posts;             /* chunks sent */
    uint64_t posts_rejected;    /* chunks a node answered with a non-2xx status */
    uint64_t entries_sent;      /* entries in those chunks */
} bm_replay_stats_t;

/** Copies the counters into `out`. */
void bm_replay_stats(const bm_replay_t *rp, bm_replay_stats_t *out);

/** True while a replay is due or running for the node at `index`. */
bool bm_replay_busy(const bm_replay_t *rp, size_t index);

/* ---- shared state (src/state/: several instances, one memory) ---------------------------- */

/**
 * One entry, as given to another instance: `key` (hex of the entry's key, NUL-terminated)
 * names it within its kind; `entry[0..len)` is its item in the endpoint's JSON shape, after
 * "<fork> " for preferences (what bm_replay_restore reads); `seen_ms` the wall time of the
 * write that carried it; `expires_ms` the wall time after which it means nothing to a node.
 * All borrowed for the call.
 */
typedef void (*bm_replay_entry_fn)(void *ud, bm_replay_kind_t kind, const char *key,
                                   const char *entry, size_t len, uint64_t seen_ms,
                                   uint64_t expires_ms);

/** Calls `fn` for every entry a write stores or refreshes (bm_replay_feed), never for those
 *  bm_replay_restore stores. Runs from a timer 1 ms after bm_replay_feed (after the turn of
 *  the loop that writes the write's answer), with the entry as it is then, in the order
 *  fed; an entry gone by then is left out. NULL stops it. */
void bm_replay_on_entry(bm_replay_t *rp, bm_replay_entry_fn fn, void *ud);

/**
 * Stores one entry that another instance remembered (`entry` as bm_replay_entry_fn gives it,
 * seen at `seen_ms`): as a write would, except that an entry of ours seen later stays (newer
 * wins) and no listener hears it. Returns 1 when stored, 0 when ours was newer or the entry
 * is over, BM_EINVAL when `entry` is not one.
 */
int bm_replay_restore(bm_replay_t *rp, bm_replay_kind_t kind, const char *entry, size_t len,
                      uint64_t seen_ms);

/** Calls `fn` for every entry live at `now_ms` (writing the local state back to Redis). */
void bm_replay_each(const bm_replay_t *rp, uint64_t now_ms, bm_replay_entry_fn fn, void *ud);

#endif /* BM_REPLAY_H */
