/* SPDX-License-Identifier: MIT */
/*
 * serve: one client request served from a race, end to end. The race engine knows nothing
 * of clients (it sits below the router); every duty policy answers its clients the same
 * way, so that way lives here once: join the race already running under the request's key
 * or start one, carry the policy's judging context with the race, send the race's answer
 * to every request that waits for it, and leave the race when a client goes away. A duty
 * policy is then its rules (accept, usable, score, complete, the deadline and the
 * candidates) and the counters it keeps; it holds no list of races or requests.
 *
 * Two ways to answer:
 *   - the race's single answer (bm_serve with `respond` NULL): every request waiting on the
 *     race gets the chosen answer as it is (status, headers, body); requests with the same
 *     key share one race. A client that goes away leaves the race: a read whose last waiter
 *     left is cancelled (see race.h);
 *   - every node's answer (`respond` set): the race has no waiter and the request is
 *     answered by `respond` from the race's completion, which sees each node's answer (e.g.
 *     an OR over the nodes). A client that goes away does not stop the race; its answers
 *     still reach `on_complete`.
 *
 * Shadow nodes: a race serve starts (not one a request joins) is mirrored to the shadow
 * nodes when the policy names them (`shadow`); the served answer is handed to the mirror
 * when it goes out (the first waiter's), and the mirror is let go with the race.
 *
 * Lifetime: the context is copied into memory the race owns (race.h `ud_dispose`) and
 * freed with the race, whatever ended it, so nothing of a request or a race outlives the
 * engine's own bookkeeping. The client requests must end before the engine is freed (a
 * server shutdown ends them): serving state is reachable from a request's abort callback
 * only while its race lives.
 *
 * Callbacks: on_answer, respond and on_complete run from the loop (inside the engine's
 * waiter and completion callbacks), never inside bm_serve. serve reads no clock: every
 * point in time comes in the policy (deadline, hard timeout), from the caller's clock.
 */
#ifndef BM_SERVE_H
#define BM_SERVE_H

#include <stdbool.h>
#include <stddef.h>

#include "cluster/pool.h"
#include "duties/race.h"
#include "duties/shadow.h"
#include "http/server.h"

/* ---- what was served, for the duty journal and the metrics above this layer ------------ */

#define BM_SERVED_MAX_NODES 64 /* node classes kept per record (the tracker's node limit) */

/** The duty reads whose served head the journal judges (observe/journal.h). */
typedef enum bm_duty_read {
    BM_DUTY_READ_ATTESTATION_DATA = 0, /* attestation_data: beacon_block_root */
    BM_DUTY_READ_HEAD_ROOT,            /* blocks/head/root: sync committee messages */
    BM_DUTY_READ_PAYLOAD_ATTESTATION,  /* payload_attestation_data (Gloas): its block */
    BM_DUTY_READ_BLOCK,                /* block production: the block's parent_root */
    BM_DUTY_READ_COUNT
} bm_duty_read_t;

/** What a node had answered when the race served its clients. */
typedef enum bm_answer_class {
    BM_ANSWER_NOT_ASKED = 0, /* not a candidate */
    BM_ANSWER_FRESH,         /* accepted: built on the expected head */
    BM_ANSWER_STALE,         /* a usable 2xx that was not accepted */
    BM_ANSWER_ERROR,         /* an error status, a network failure, an unusable 2xx */
    BM_ANSWER_HUNG,          /* asked, no answer (yet, or by the deadline for the witness) */
    BM_ANSWER_CLASS_COUNT
} bm_answer_class_t;

/** One answer as a record keeps it. */
typedef struct bm_served_answer {
    int status;       /* HTTP status; 0: none (a network failure, or no answer in time) */
    bool has_root;    /* the body named the root the duty is about */
    uint8_t root[32]; /* attestation data's beacon_block_root, a block's parent_root, ... */
    int index;        /* attestation data's payload index (Gloas); -1: none */
    bm_answer_class_t cls;
    uint32_t ms; /* when it arrived, after the race's start */
} bm_served_answer_t;

/** One duty read served from one race (coalesced requests share it). */
typedef struct bm_served {
    bm_duty_read_t duty;
    uint64_t slot;       /* the slot the read is about (head root: the slot it was asked in) */
    uint64_t started_ms; /* wall time the race started */
    uint32_t race_ms;    /* from the start until the answer went to the clients */
    uint32_t requests;   /* clients given this answer */
    int node;            /* pool index of the node whose answer was served; -1: beaconmux's */
    bm_served_answer_t served;
    size_t n_nodes;                       /* classes[0..n_nodes) are set */
    uint8_t classes[BM_SERVED_MAX_NODES]; /* bm_answer_class_t per pool index */
    int first_node;                       /* pool index of the witness; -1: none */
    bm_served_answer_t first;             /* the witness's answer to its first request */
} bm_served_t;

/** Receives a record when its race completed (after every waiter had its answer). */
typedef void (*bm_served_fn)(const bm_served_t *s, void *ud);

/** Asks bm_serve for a record of the read (bm_serve_t `record`). */
typedef struct bm_serve_record {
    bm_duty_read_t duty;
    uint64_t slot;
    size_t n_nodes;     /* the pool's size */
    bm_node_t *witness; /* the first configured node (race.h `witness`); NULL: none */
    /* the root an answer is about, read by the policy (`ctx` is the race's context): 0 with
     * root (and index, -1 when none) filled, or non-zero when the body names none */
    int (*root_of)(const bm_race_answer_t *a, void *ctx, uint8_t root[32], int *index);
    bm_served_fn fn; /* receives the record (NULL: no record) */
    void *ud;
} bm_serve_record_t;

/** The journal's witness: the first configured node that is not a shadow (the one a
 *  validator client with a single node would use); NULL when there is none. */
bm_node_t *bm_serve_witness_node(bm_pool_t *pool);

/** "not_asked", "fresh", "stale", "error", "hung". */
const char *bm_answer_class_name(bm_answer_class_t c);

/** "attestation_data", "head_root", "payload_attestation_data", "block". */
const char *bm_duty_read_name(bm_duty_read_t d);

/** How to serve one request. Read during bm_serve only; nothing is kept but copies (and
 *  what the context holds, see ctx_dispose). */
typedef struct bm_serve {
    /* the race: its rules (copied; `ud` and `ud_dispose` are serve's and ignored here) */
    bm_race_policy_t policy;
    /* requests with the same key share one race while it runs (copied; NULL: a race of its
     * own). Keys must name the policy (e.g. start with its path) so that a joined race's
     * context is one of the caller's. Ignored when `respond` is set */
    const char *key;
    bm_node_t *const *nodes; /* candidates in order (borrowed for the call; the pool owns them) */
    size_t n;
    bool forward_body; /* send the request body to the nodes (false: none) */

    /* the policy's judging context, handed to the predicates as their `ud` and to the
     * callbacks below as `ctx`: ctx_size bytes moved from `ctx` into memory the race owns
     * (a joined race keeps the context it was started with). ctx_dispose (may be NULL)
     * releases what a context holds (not the context itself) and runs exactly once per
     * bm_serve call: on the race's copy from its close callback (see race.h ud_dispose:
     * the policy may be gone by then), or on `ctx` itself, before bm_serve returns, when
     * no race took it (the request joined a running race, or bm_serve failed) */
    void *ctx;
    size_t ctx_size;
    void (*ctx_dispose)(void *ctx);

    /* optional: sees the race's answer right before it goes to `req`'s client (counters,
     * logs); it must not answer `req` */
    void (*on_answer)(bm_req_t *req, const bm_race_answer_t *a, void *ctx);
    /* set: the request is answered from every node's answer instead (see above), by this
     * callback, which must answer `req` (it runs only while the client still waits) */
    void (*respond)(bm_req_t *req, const bm_race_answer_t *answers, size_t n, void *ctx);
    /* optional: every node's answer when the race completes, in candidate order (as
     * race.h's completion), after `respond`; for bookkeeping only */
    void (*on_complete)(const bm_race_answer_t *answers, size_t n, void *ctx);
    /* optional (not with `respond`): a record of what the race served, given to
     * record->fn when it completes (copied; a joined race keeps its starter's). It sets
     * the race's `seen` and `witness` (the policy's own are replaced) */
    const bm_serve_record_t *record;

    /* optional: the shadow nodes (duties/shadow.h). Every race serve starts is mirrored to
     * them (the same request, once each), read as `shadow_read` says, and their answers are
     * compared with the one served (none, when `respond` builds the answer), by the
     * policy's deadline; they never reach a client */
    bm_shadow_t *shadow;
    bm_shadow_read_t shadow_read;
} bm_serve_t;

/**
 * Serves `req` from a race: joins the race running under `s->key`, or starts one over
 * `s->nodes` with a copy of the context. The request is answered later, from the loop; on
 * failure (allocation, or the engine refused to start a race) it is answered at once with
 * a 503 and NULL is returned. Otherwise returns the race (valid until the loop runs again:
 * e.g. to set a policy timer with bm_race_at and bm_race_ctx) and sets `*joined` (may be
 * NULL) to whether it was already running.
 */
bm_race_t *bm_serve(bm_race_engine_t *e, bm_req_t *req, const bm_serve_t *s, bool *joined);

/**
 * Answers `req` with the race answer `a`: its status, headers (hop-by-hop fields already
 * removed by the engine) and body, as they are, the body without a copy; a status a
 * client cannot be given (outside 200..599) becomes 502. Ends the request.
 */
void bm_serve_reply(bm_req_t *req, const bm_race_answer_t *a);

#endif /* BM_SERVE_H */
