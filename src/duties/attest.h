/* SPDX-License-Identifier: MIT */
/*
 * attest: the fresh-head reads of attesters, sync committee members and the PTC, raced
 * over the nodes so that a validator votes for the freshest head the cluster holds:
 *
 *   GET /eth/v1/validator/attestation_data?slot=S[&committee_index=C]
 *       accept beacon_block_root == the expected head (src/duties/hint.h); in Gloas also
 *       index == 0 when that head is the block of slot S, else 1 when its payload is known
 *       full, else 0. Identical requests share one race (key: path, slot, Accept, and
 *       committee_index only before Electra), so a validator client asking for hundreds
 *       of validators costs one race.
 *   GET /eth/v1/beacon/blocks/head/root
 *       accept data.root == the cluster head.
 *   GET /eth/v1/validator/payload_attestation_data?slot=S        (Gloas)
 *       accept a 200 whose beacon_block_root is the block of slot S the cluster holds
 *       (and payload_present when the cluster knows the payload is full); a 204 ("no
 *       block seen") is usable, never accepted, and a 200 beats it.
 *
 * Checkpoints (attestation_data): the answer's source and target must be the ones a quorum
 * of nodes agrees on (duties.checkpointQuorum, 0 = auto: 2 with 3 or more candidates, else
 * 1), in one of two modes (duties.checkpointMode; docs/duties.md):
 *   - live (default): once a quorum of answers agreed on an epoch's source and target
 *     (remembered per epoch and target root, duties/checkpoints.h), an answer with other
 *     checkpoints is neither accepted nor a fallback; before that the answer is served on
 *     its head alone, and a later agreement that contradicts it is counted and logged;
 *   - strict: an answer is accepted, or a fallback, only when a quorum of the race's nodes
 *     gave the same source and target; meanwhile the race keeps asking.
 * Only whole answers are ever served, never fields of several.
 *
 * Each race re-asks a node whose answer was not accepted every 50 ms until the duty's
 * deadline (hint: min(max(now + holdFloor, due), now + maxHold)), then serves the best
 * answer in hand; with none, it asks every node again after a failure until the later of
 * now + maxHold and the due time (bm_hint_end), then answers the most specific error (a
 * 4xx, else a 503 naming each node's failure). Without a cluster head (start-up) the first 2xx
 * wins. An accepted answer is served at once: a validator client asks when the block arrives, and
 * must not be held when the cluster already has it. Bodies are read by their Content-Type (JSON, or
 * SSZ: AttestationData 128 bytes, PayloadAttestationData 42 bytes); every waiter of a shared race
 * gets the winner's status, headers and body.
 */
#ifndef BM_ATTEST_H
#define BM_ATTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/fork.h"
#include "base/hdrs.h"
#include "cluster/pool.h"
#include "duties/checkpoints.h"
#include "duties/hint.h"
#include "duties/race.h"
#include "duties/serve.h"
#include "duties/shadow.h"
#include "http/router.h"

/** How attestation data's checkpoints are judged (duties.checkpointMode). */
typedef enum bm_attest_checkpoint_mode {
    BM_ATTEST_CHECKPOINTS_LIVE = 0, /* "live": the epoch's agreement, once there is one */
    BM_ATTEST_CHECKPOINTS_STRICT,   /* "strict": a quorum of the race's own answers */
} bm_attest_checkpoint_mode_t;

/* The default of duties.checkpointMode (beside its type, as produce.h's block selection). */
#define BM_ATTEST_DEFAULT_CHECKPOINT_MODE BM_ATTEST_CHECKPOINTS_LIVE

typedef struct bm_attest_opts {
    uint32_t repoll_interval_ms; /* default 50 */
    uint32_t connect_timeout_ms; /* default timeouts.connect */
    uint32_t checkpoint_quorum;  /* nodes that must give the same checkpoints; 0: auto (2 with
                                    3 or more candidates, else 1) (duties.checkpointQuorum) */
    bm_attest_checkpoint_mode_t checkpoint_mode; /* duties.checkpointMode */
} bm_attest_opts_t;

/** Fills `o` with the defaults above. */
void bm_attest_opts_default(bm_attest_opts_t *o);

typedef struct bm_attest bm_attest_t;

/** The policy over `race` and `pool`, judged by `hint`, reading the time of `clock` (the
 *  engine's; all borrowed, they must outlive it). `opts` is copied (NULL: defaults). NULL
 *  on allocation failure. */
bm_attest_t *bm_attest_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                           bm_hint_t *hint, const bm_attest_opts_t *opts);

/** Mirrors every race of the policy to the shadow nodes (borrowed; NULL: none). */
void bm_attest_set_shadow(bm_attest_t *a, bm_shadow_t *shadow);

/** Frees the policy. Free the race engine first when shutting down: its races judge with
 *  this policy (their contexts are the races' own and go with them). */
void bm_attest_free(bm_attest_t *a);

/** Registers the three routes above (GET). */
int bm_attest_register(bm_attest_t *a, bm_router_t *r);

/**
 * Asks for a record of every race served (duties/serve.h): `fn` gets it when the race
 * completed. With `witness`, the first configured node's first answer is learned in every
 * race (race.h `witness`), to say what it alone would have served. NULL `fn`: none.
 */
void bm_attest_on_served(bm_attest_t *a, bm_served_fn fn, void *ud, bool witness);

/** Requests served by each endpoint, how many joined a running race, how many were served
 *  an answer that was not accepted (deadline fallback or nothing better); attestation data
 *  answers refused for their checkpoints, and answers served before their epoch's
 *  checkpoints were agreed that the agreement then contradicted (live mode). */
typedef struct bm_attest_stats {
    uint64_t requests;
    uint64_t races;
    uint64_t joined;
    uint64_t fallback;
    uint64_t checkpoint_refused;
    uint64_t checkpoint_disagreements;
} bm_attest_stats_t;

/** Counters since the start. */
bm_attest_stats_t bm_attest_stats(const bm_attest_t *a);

/* ---- the rules, pure (exported for tests) ------------------------------------------ */

/** An attestation_data answer. */
typedef struct bm_attest_data {
    uint64_t slot;
    uint64_t index;
    uint8_t beacon_block_root[32];
    bm_checkpoint_pair_t checkpoints; /* source and target */
} bm_attest_data_t;

/** Reads an attestation_data body by its Content-Type (SSZ: 128 bytes; else JSON `data`,
 *  its source and target included). Returns 0 or BM_EINVAL. */
int bm_attest_parse_data(const bm_hdrs_t *headers, const bm_buf_t *body, bm_attest_data_t *out);

/**
 * Whether attestation data for `slot` is built on the expected head `e` (`gloas`: the
 * fork of `slot` is Gloas or later, where `index` is the payload status). Any data is
 * acceptable when no expected head is known.
 */
bool bm_attest_data_ok(const bm_expected_t *e, bool gloas, uint64_t slot,
                       const bm_attest_data_t *d);

/** The Gloas `index` expected for data about `slot` built on `e`, or -1 when it cannot be
 *  judged (the head is an older block whose payload status is not known). */
int bm_attest_expected_index(const bm_expected_t *e, uint64_t slot);

/** Reads data.root of a blocks/{id}/root body (JSON). Returns 0 or BM_EINVAL. */
int bm_attest_parse_root(const bm_buf_t *body, uint8_t out[32]);

/** A payload_attestation_data answer. */
typedef struct bm_attest_payload {
    uint8_t beacon_block_root[32];
    uint64_t slot;
    bool payload_present;
    bool blob_data_available;
} bm_attest_payload_t;

/** Reads a payload_attestation_data 200 body (SSZ: 42 bytes; else JSON `data`). */
int bm_attest_parse_payload(const bm_hdrs_t *headers, const bm_buf_t *body,
                            bm_attest_payload_t *out);

/**
 * Whether a 200 payload_attestation_data answer for `slot` is acceptable for the
 * expected head `e` (the hint's expected head about `slot`): its root is that block and
 * that block is the one of `slot`; payload_present must be true when the cluster knows
 * the payload is full. Any 200 is acceptable when no expected head is known.
 */
bool bm_attest_payload_ok(const bm_expected_t *e, uint64_t slot, const bm_attest_payload_t *p);

/**
 * The coalescing key of an attestation_data request into out[0..cap): path, slot, Accept,
 * and committee_index only when `pre_electra` (from Electra on the index is always 0, so
 * every committee shares the race). Returns the key's length, or -1 when it does not fit.
 */
int bm_attest_data_key(char *out, size_t cap, uint64_t slot, const char *committee_index,
                       const char *accept, bool pre_electra);

#endif /* BM_ATTEST_H */
