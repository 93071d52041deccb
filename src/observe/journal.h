/* SPDX-License-Identifier: MIT */
/*
 * journal: every duty read beaconmux served, slot by slot, judged against the canonical
 * chain once it is settled, with the vote the first configured node alone would have given.
 * It answers the operator's question: did my validators vote for the right head, and how
 * many votes did having several nodes save?
 *
 * What goes in (bm_journal_add): one record per race that served clients (duties/serve.h:
 * the duty, the slot, the root served and by whom, how long the race took, each node's
 * answer class, and the first node's own first answer). Identical records of one slot (the
 * same duty, root, index, status and counterfactual) are merged, their requests added.
 *
 * What judges them (bm_journal_settle): the canonical chain at a slot, as
 * get_block_root_at_slot gives it (the latest block at or before the slot, so an empty slot
 * has its predecessor's root) for the slot and the slot before. The caller settles a slot
 * twice: provisionally two slots later, and finally once the slot is finalized. The rules
 * (bm_journal_judge), per duty:
 *   - attestation_data, head_root: correct when the root is the canonical root at the slot;
 *   - payload_attestation_data: a 200 is correct when the slot has its own block (its root
 *     differs from the slot before's) and the root is that block; a 204 ("no block seen")
 *     is correct when the slot is empty;
 *   - block: correct when the block's parent is the canonical root at the slot before;
 *   - an answer with no root (an error, a network failure, no answer in time) is missed;
 *     when the chain does not reach the slot, the verdict is unknown.
 * A served read whose verdict is correct while the first node's would not have been
 * (wrong or missed) saved its votes; the reverse lost them. Every count is weighted by the
 * requests the record answered: a vote here is one duty read answered.
 *
 * Counting: every record is counted once provisionally and once finally (at its slot's
 * first settle of each kind, or when it arrives after it), so both families count every
 * served vote. A record pushed out of the ring before its final settle counts as unknown.
 *
 * Memory: a ring of `slots` slot records and a ring of 3 x `slots` entries (7,200 slots:
 * about 3.4 MiB), allocated once. Pure: no I/O, no clock, no loop.
 */
#ifndef BM_JOURNAL_H
#define BM_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "duties/serve.h"

#define BM_JOURNAL_ENTRIES_PER_SLOT 3 /* entry ring = slots x this */
#define BM_JOURNAL_FUTURE_SLOTS 4     /* records this far past the newest slot are refused */

typedef enum bm_verdict {
    BM_VERDICT_PENDING = 0, /* not judged yet */
    BM_VERDICT_CORRECT,
    BM_VERDICT_WRONG,
    BM_VERDICT_MISSED,
    BM_VERDICT_UNKNOWN, /* the chain does not reach the slot */
    BM_VERDICT_COUNT
} bm_verdict_t;

/** The canonical chain at one slot: get_block_root_at_slot(slot) and (slot - 1). */
typedef struct bm_canon {
    bool known;
    uint8_t root[32];
    bool prev_known;
    uint8_t prev[32];
} bm_canon_t;

/** How far a slot has been settled. */
typedef enum bm_journal_stage {
    BM_STAGE_OPEN = 0,    /* not judged yet */
    BM_STAGE_PROVISIONAL, /* judged two slots later */
    BM_STAGE_FINAL,       /* judged once finalized */
} bm_journal_stage_t;

/** Counts, weighted by requests. */
typedef struct bm_journal_counts {
    uint64_t verdicts[BM_DUTY_READ_COUNT][BM_VERDICT_COUNT];
    uint64_t saved; /* served correct, the first node alone would not have been */
    uint64_t lost;  /* served not correct, the first node alone would have been */
} bm_journal_counts_t;

typedef struct bm_journal_stats {
    bm_journal_counts_t provisional;
    bm_journal_counts_t final;
    uint64_t records;          /* records added */
    uint64_t merged;           /* ... merged into an entry of the same slot */
    uint64_t refused;          /* ... outside the ring's window */
    uint64_t evicted_unjudged; /* entries pushed out before their final judgement */
    uint64_t newest_slot;      /* the newest slot seen */
    uint64_t final_slot;       /* the newest slot finally settled (0: none) */
} bm_journal_stats_t;

/** One entry, for readers. */
typedef struct bm_journal_entry {
    bm_served_t rec;            /* the record (requests: summed over merged ones) */
    bm_verdict_t verdict;       /* of what was served */
    bm_verdict_t first_verdict; /* of the first node's own answer */
    bool final;
} bm_journal_entry_t;

/** One slot, for readers. */
typedef struct bm_journal_slot {
    uint64_t slot;
    bm_journal_stage_t stage;
    bm_canon_t canon; /* known once settled */
    size_t n_entries;
} bm_journal_slot_t;

typedef struct bm_journal bm_journal_t;

/** A journal of `slots` slots (>= 1). NULL on allocation failure. */
bm_journal_t *bm_journal_new(uint32_t slots);

/** Frees it (NULL is ignored). */
void bm_journal_free(bm_journal_t *j);

/** The verdict of answer `a` to `duty` against `c` (see above). Pure. */
bm_verdict_t bm_journal_judge(bm_duty_read_t duty, const bm_served_answer_t *a,
                              const bm_canon_t *c);

/** Adds a record (copied). Judged at once when its slot is settled already. Returns 0,
 *  or BM_EINVAL when its slot is outside the window (counted as refused). */
int bm_journal_add(bm_journal_t *j, const bm_served_t *rec);

/** Settles `slot` against `c` (`final`: finally; a final slot is never settled again).
 *  Every entry of the slot is judged; the counts follow the rules above. */
void bm_journal_settle(bm_journal_t *j, uint64_t slot, const bm_canon_t *c, bool final);

/** Makes `slot` the newest slot seen (the clock's): the window moves with it. */
void bm_journal_advance(bm_journal_t *j, uint64_t slot);

/** The slot's record into `out`; false when the ring does not hold it. */
bool bm_journal_slot(const bm_journal_t *j, uint64_t slot, bm_journal_slot_t *out);

/** Entry `i` (0..n_entries) of `slot` into `out`, in arrival order; false when none. */
bool bm_journal_entry(const bm_journal_t *j, uint64_t slot, size_t i, bm_journal_entry_t *out);

/** Counters. */
const bm_journal_stats_t *bm_journal_stats(const bm_journal_t *j);

/** The oldest slot the ring can hold now. */
uint64_t bm_journal_oldest(const bm_journal_t *j);

/** Slots the ring holds. */
uint32_t bm_journal_capacity(const bm_journal_t *j);

/** "pending", "correct", "wrong", "missed", "unknown". */
const char *bm_verdict_name(bm_verdict_t v);

/** "open", "provisional", "final". */
const char *bm_journal_stage_name(bm_journal_stage_t s);

/**
 * Appends the slots from..to (inclusive, clamped to the ring) as JSON: {"slots":[...]}
 * newest last, each with its stage, canonical root, whether it had its own block, and its
 * entries (node ids from `ids[0..n_ids)`, "#i" past them). Returns the slots written.
 */
size_t bm_journal_json(const bm_journal_t *j, uint64_t from, uint64_t to, const char *const *ids,
                       size_t n_ids, bm_str_t *o);

/**
 * State kept across restarts (observe/journal_state.c, app/statedir.h): appends the counts
 * and the newest `max_slots` slots (0: all the ring holds) with their entries as one JSON
 * value; nodes by their id in `ids[0..n_ids)` (pool order). Returns 0 or BM_ENOMEM.
 */
int bm_journal_export(const bm_journal_t *j, uint32_t max_slots, const char *const *ids,
                      size_t n_ids, bm_str_t *o);

/**
 * Restores what bm_journal_export wrote into `j` (new and empty): the slots it still holds,
 * their entries judged as they were, and the counts as saved. Nodes are found by id in
 * `ids` (an id no longer there leaves the entry without that node). Returns the entries
 * restored, or BM_EINVAL (nothing restored) when the text is not such an export.
 */
int bm_journal_import(bm_journal_t *j, const char *json, size_t len, const char *const *ids,
                      size_t n_ids);

/** Replaces the counters (bm_journal_import: the counts saved, after its replay). */
void bm_journal_set_stats(bm_journal_t *j, const bm_journal_stats_t *st);

#endif /* BM_JOURNAL_H */
