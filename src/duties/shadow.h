/* SPDX-License-Identifier: MIT */
/*
 * shadow: the shadow nodes' mirror and score (upstreams[].shadow: true). An operator tries a
 * new client release on live traffic before giving it a vote: the node gets a copy of every
 * duty read beaconmux races, and its answers are compared with the answer served, never
 * served themselves. Everything else about a shadow (its event stream followed, its head
 * judged, and that it counts for nothing: no vote, no quorum, no candidate, no write, no
 * replay, no event on the cluster stream) lives in the modules that would otherwise count
 * it (pool.h's bm_node_usable, head.h's observers, health, discovery, events, the read
 * path, replay). docs/shadow.md says why it is built this way.
 *
 * The mirror of one race: serve (duties/serve.h) starts it beside every race it starts, with
 * the race's request (method, target, headers, body) and how the policy reads an answer
 * (bm_shadow_read_t). Each shadow node is asked once, at once, as a validator client with
 * that node alone would ask it: no re-ask, no hold, no fallback. The transfers run on the
 * race engine as a detached race without waiters (the engine's `write` mode: nobody is
 * answered from it, and it ends when every shadow answered or at `end_ms`), so they are
 * recorded in the pool like any exchange, cut on the engine's clock and cancelled with it.
 *
 * The score, per shadow node and per duty, once both the mirror and the race are done:
 *   - answered (2xx the policy can read), errors (any other status, a network failure, a
 *     timeout, a 2xx it cannot read), and the latency of its 2xx answers;
 *   - compared: a readable 2xx about a block (attestation data and head root: the head;
 *     payload attestation data: the slot's block; block production: the parent; duties:
 *     the dependent root) against a served 2xx about a block;
 *   - agreed (the same block), else behind (an ancestor of the block served: it lags),
 *     ahead (a descendant: it had a block the cluster did not follow yet), other (another
 *     branch, or ancestry the tracker does not know: it forks);
 *   - checkpoints (attestation data): the same source and target as served, or not;
 *   - in time: agreed (checkpoints included) and arrived by the race's deadline (the hint's,
 *     docs/duties.md; without one, by the time the answer was served); late: agreed after it.
 * Aggregates, contributions and liveness are scored on answers, errors and latency only.
 *
 * Lifetime: a mirror is shared by serve (which gives the served answer, bm_shadow_served, and
 * lets go with bm_shadow_release when its race is freed) and its own race (whose completion
 * gives the shadows' answers); the comparison runs when the second of the two arrives, from
 * the engine's callbacks. bm_shadow_release may run after the engine and this module are
 * gone (from a race's close callback): it only frees the mirror's own memory. Free the race
 * engine before this module.
 *
 * Time: arrival times are the engine's (its injected clock); latencies are the upstream's.
 */
#ifndef BM_SHADOW_H
#define BM_SHADOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "cluster/head.h"
#include "cluster/pool.h"
#include "duties/checkpoints.h"
#include "duties/race.h"

/** The duty reads a shadow is scored on. */
typedef enum bm_shadow_duty {
    BM_SHADOW_ATTESTATION_DATA = 0,
    BM_SHADOW_HEAD_ROOT,
    BM_SHADOW_PAYLOAD_ATTESTATION,
    BM_SHADOW_AGGREGATE,
    BM_SHADOW_CONTRIBUTION,
    BM_SHADOW_BLOCK,
    BM_SHADOW_DUTIES,
    BM_SHADOW_LIVENESS,
    BM_SHADOW_DUTY_COUNT
} bm_shadow_duty_t;

/** What an answer is about, for the comparison. */
typedef struct bm_shadow_view {
    bool has_root;
    uint8_t root[32]; /* the block it is built on (head, slot's block, parent, dependent root) */
    bool has_checkpoints;
    bm_checkpoint_pair_t checkpoints; /* attestation data's source and target */
} bm_shadow_view_t;

/**
 * Reads what a 2xx answer is about. False when the body cannot be read (the answer then
 * counts as an error of the node that gave it). `arg` is the policy's (bm_shadow_read_t).
 */
typedef bool (*bm_shadow_read_fn)(const bm_hdrs_t *headers, const bm_buf_t *body, uint32_t arg,
                                  bm_shadow_view_t *out);

/** How a policy's answers are read, given to serve with the race (bm_serve_t). */
typedef struct bm_shadow_read {
    bm_shadow_duty_t duty;
    bm_shadow_read_fn read; /* NULL: every 2xx is an answer, none is compared */
    uint32_t arg;           /* passed to `read` (e.g. the production form) */
} bm_shadow_read_t;

typedef struct bm_shadow bm_shadow_t;
typedef struct bm_shadow_mirror bm_shadow_mirror_t;

/**
 * The mirror over the shadow nodes of `pool` (those marked with bm_pool_set_shadow: read
 * once, here), asking through `race` and judging blocks' relations with `head` (may be NULL:
 * a different block then counts as other). All borrowed; they must outlive the module. NULL
 * on allocation failure.
 */
bm_shadow_t *bm_shadow_new(bm_race_engine_t *race, bm_pool_t *pool, const bm_head_t *head);

/** Frees the module (after the race engine: its mirrors' races report here). NULL is fine. */
void bm_shadow_free(bm_shadow_t *s);

/** The number of shadow nodes (0: bm_shadow_mirror never starts anything). */
size_t bm_shadow_count(const bm_shadow_t *s);

/**
 * Starts the mirror of a race: `rq` (copied) to every shadow node, read as `how` says,
 * scored in time when it arrives by `deadline_ms` (wall time on the engine's clock; 0: by
 * the time the race's answer was served), cut at `end_ms` (0: the engine's default) or after
 * `connect_timeout_ms` to connect (0: the default). Returns the mirror with one reference
 * for the caller, or NULL when there is no shadow node or on failure (nothing to release).
 */
bm_shadow_mirror_t *bm_shadow_mirror(bm_shadow_t *s, const bm_race_request_t *rq,
                                     const bm_shadow_read_t *how, uint64_t deadline_ms,
                                     uint64_t end_ms, uint32_t connect_timeout_ms);

/**
 * The answer the race served (borrowed; NULL: none to compare with, as for an answer built
 * from every node's). Only the first call counts. From an engine callback.
 */
void bm_shadow_served(bm_shadow_mirror_t *m, const bm_race_answer_t *a);

/** Drops the caller's reference. Touches nothing but the mirror's memory. NULL is fine. */
void bm_shadow_release(bm_shadow_mirror_t *m);

/** One node's figures (for one duty, or all). */
typedef struct bm_shadow_counts {
    uint64_t mirrored; /* duty reads sent to it */
    uint64_t answered; /* readable 2xx answers */
    uint64_t errors;   /* any other status, no answer, or an unreadable 2xx */
    uint64_t compared; /* answers about a block compared with a served answer about one */
    uint64_t agreed;   /* the block served */
    uint64_t behind;   /* an ancestor of it */
    uint64_t ahead;    /* a descendant of it */
    uint64_t other;    /* neither: another branch, or unknown ancestry */
    uint64_t checkpoints_compared;
    uint64_t checkpoints_agreed;
    uint64_t in_time; /* agreed (checkpoints too) and arrived by the race's deadline */
    uint64_t late;    /* agreed, after it */
} bm_shadow_counts_t;

typedef struct bm_shadow_stats {
    bm_shadow_counts_t total;
    bm_shadow_counts_t duty[BM_SHADOW_DUTY_COUNT];
    double latency_p50_ms; /* of its last 64 2xx answers to mirrored reads (0: none) */
    double latency_p90_ms;
} bm_shadow_stats_t;

/** The figures of the node with pool index `node`. 0, or BM_EINVAL when it is no shadow. */
int bm_shadow_node_stats(const bm_shadow_t *s, size_t node, bm_shadow_stats_t *out);

/** "attestation_data", "head_root", ..., "liveness". */
const char *bm_shadow_duty_name(bm_shadow_duty_t d);

/**
 * The status page's "shadow" section (an admin section function, `ud` the module): every
 * shadow node with its state, lag and relation to the cluster head, and its figures.
 */
void bm_shadow_status_json(bm_str_t *o, void *ud);

#endif /* BM_SHADOW_H */
