/* SPDX-License-Identifier: MIT */
/*
 * fake_node: the beacon nodes, the client and the miniature beaconmux of the unit tests,
 * in one place, so that every test that talks HTTP to a node talks to the same fake.
 *
 *   - A fake node is the project's HTTP server (src/http/server.h) on 127.0.0.1, port 0,
 *     on the test's loop. It answers from a script (request i plays step i, the last step
 *     repeats): a status, header fields and a body after a delay; no answer at all (hang
 *     until the client goes); an answer whose connection is cut mid-body (after the head
 *     and part of the announced body); or a streamed answer (an event stream): the head,
 *     pieces a gap apart, then held open (with optional keep-alive comments), ended, or
 *     cut mid-body. (A connection closed before or inside the head cannot be made with
 *     the server API: test_upstream has a raw socket peer for that.) A node can instead answer
 *     from a handler (the test's code, with helpers for JSON answers and event streams),
 *     or refuse connections (a port nobody listens on). Every node records its requests
 *     (method, target, a few header fields, body, loop time) and counts answers and
 *     requests whose client went away first; the nodes of a set share one ordered log
 *     ("a>" request to a, "a<" answer from a, "a!" a's client went away), so sequencing is
 *     asserted, not guessed.
 *   - A fake call is the test's client: a request through the project's upstream client,
 *     recording status, header fields, body and times.
 *   - A fake mux is beaconmux in miniature for policy tests: a loop, a clock, the pool, the
 *     race engine, a router behind the project's server (the front), fake nodes behind the
 *     engine and calls in front.
 *
 * Time: a set of nodes paces its scripts (delays, stream gaps) on a clock, its own real one
 * unless the test gives it another (fake_nodes_set_clock). With a manual clock (the fake
 * mux's, fake_mux_new_manual) nothing scripted happens until the test advances the clock,
 * and times on the engine's side and the nodes' side are exact: a test moves time to the
 * point it wants, then runs the loop until what that point causes has happened (a node
 * answered, the engine took the answer: fake_nodes_settled).
 *
 * Nothing here sleeps: waits run the loop until a condition holds, with a bound
 * (loop_guard.h), and the teardown checks that the loop closes with nothing left on it.
 * A failed expectation fails the running cmocka test.
 */
#ifndef BM_TEST_FAKE_NODE_H
#define BM_TEST_FAKE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"
#include "loop_guard.h"

#define FAKE_BOUND_MS 5000 /* every wait of this module ends within this, or the test fails */
#define FAKE_MAX_NODES 4
#define FAKE_MAX_STEPS 8
#define FAKE_MAX_HDRS 4
#define FAKE_MAX_PIECES 16
#define FAKE_MAX_RECORDS 128 /* requests recorded per node; later ones are only counted */
#define FAKE_MAX_CALLS 64

/* ---- a scripted answer ---------------------------------------------------------------------- */

/** How a streamed answer ends once its pieces are out. */
typedef enum fake_end {
    FAKE_HOLD = 0, /* stays open (keep-alive comments every keepalive_ms, if set) */
    FAKE_FINISH,   /* ended cleanly, end_after_ms after the last piece */
    FAKE_CUT,      /* the connection is cut mid-body, end_after_ms after the last piece */
} fake_end_t;

/** One answer of a script. Zero is a hang. */
typedef struct fake_step {
    int status;        /* 0: never answer (hang until the client goes) */
    uint32_t delay_ms; /* before the answer (a stream: before its head) */
    const void *body;  /* text, or `len` bytes; NULL: no body */
    size_t len;        /* 0: strlen(body) */
    const char *ctype; /* NULL: application/json with a body, none without (a 204 has neither) */
    const char *hdrs[FAKE_MAX_HDRS][2]; /* more response header fields (name, value) */
    /* cut mid-body: the head announces the whole body, `cut_at` bytes of it go out, then
     * the connection is cut */
    bool cut;
    size_t cut_at;
    /* a streamed answer (chunked): the head (ctype defaults to text/event-stream), then
     * `pieces` one by one, each gap_ms after the one before (the first after the head);
     * then `end`. A node's latest stream is its `stream` (see fake_stream_write) */
    bool stream;
    const char *pieces[FAKE_MAX_PIECES];
    uint32_t gap_ms;
    fake_end_t end;
    uint32_t end_after_ms;
    uint32_t keepalive_ms;
    bool head_with_first_piece; /* a stream's head leaves only together with its first piece
                                   (or comment): Lodestar's Node.js server does that */
} fake_step_t;

#define FAKE_HANG ((fake_step_t){0})
#define FAKE_OK(ms, text) ((fake_step_t){.status = 200, .delay_ms = (ms), .body = (text)})
#define FAKE_STATUS(code, ms, text)                                                                \
    ((fake_step_t){.status = (code), .delay_ms = (ms), .body = (text)})

/* ---- fake nodes ------------------------------------------------------------------------------ */

/** One request a node received. */
typedef struct fake_req {
    char method[16];
    char target[512];
    char accept[128];
    char ctype[64];   /* Content-Type */
    char version[32]; /* Eth-Consensus-Version */
    char *body;       /* NUL-terminated copy ("" without a body) */
    size_t body_len;
    uint64_t at_ms; /* monotonic ms of its arrival: the loop's time (uv_now after an update),
                       or the set's manual clock */
} fake_req_t;

typedef struct fake_nodes fake_nodes_t;
typedef struct fake_node fake_node_t;
typedef struct fake_held fake_held_t;

/** A handler answers a request itself (with bm_resp_* or the helpers below); it runs
 *  after the request was recorded. */
typedef void (*fake_handler_fn)(fake_node_t *n, bm_req_t *req, void *ud);

struct fake_node {
    fake_nodes_t *set;
    char id[8];   /* "a", "b", ... in the order of creation */
    char url[64]; /* http://127.0.0.1:port */
    int port;
    bm_node_t *node;  /* its pool entry (NULL when the set has no pool) */
    bm_server_t *srv; /* NULL: refuses connections */
    bool srv_done;
    bool down; /* fake_node_down: its server is closed, its port refuses connections */
    fake_step_t steps[FAKE_MAX_STEPS];
    int nsteps;
    fake_handler_fn handler;
    void *ud;
    /* what happened (since the last fake_node_script for `requests` and the records) */
    int requests;
    int answered; /* answers sent (a stream: its head) */
    int aborted;  /* requests whose client went away before the node ended them */
    int holding;  /* requests received and not ended yet (delayed, hung, an open stream) */
    fake_req_t reqs[FAKE_MAX_RECORDS];
    bm_req_t *stream; /* its latest event stream still open, or NULL */
    fake_held_t *stream_held;
};

/** The fake nodes of one test, on one loop. */
struct fake_nodes {
    uv_loop_t *loop;
    bm_clock_t *clock;     /* what scripts are paced on (own_clock unless set) */
    bm_clock_t *own_clock; /* a real clock on `loop` */
    bm_pool_t *pool;       /* NULL: nodes are not added to a pool */
    fake_node_t node[FAKE_MAX_NODES];
    int n;
    int held;       /* requests the nodes have not ended yet */
    char log[2048]; /* "a>" request, "a<" answer, "a!" the client went away */
};

/** Empties `s` for nodes on `loop`, added to `pool` (may be NULL) as they are created;
 *  scripts are paced on a real clock of its own. */
void fake_nodes_init(fake_nodes_t *s, uv_loop_t *loop, bm_pool_t *pool);

/** Paces the scripts on `clock` (borrowed, e.g. the test's manual clock; NULL: the set's own
 *  real clock) from now on; no request may be held at the call (asserted). */
void fake_nodes_set_clock(fake_nodes_t *s, bm_clock_t *clock);

/**
 * True when nothing is in transit between the engine side and the nodes, and (on a manual
 * clock) no timer of the set's clock is due now: for every node, the transfers the pool
 * counts in flight (stats.in_flight) are exactly the requests the node holds (received,
 * neither answered nor gone; an open stream counts as held). A request on its way to a node,
 * an answer on its way back and a cancel the node has not seen yet all make it false. Needs
 * the set's pool; a handler node holds nothing but its open stream. With a manual clock,
 * RUN_UNTIL(loop, fake_nodes_settled(s), ...) after each advance waits until what the
 * advance set off has happened.
 */
bool fake_nodes_settled(const fake_nodes_t *s);

/**
 * Moves the set's manual clock `ms` forward one due timer at a time: before the first step
 * and after each, the loop runs until fake_nodes_settled (asserted, bounded) and then turns
 * a few more times without blocking (ready I/O lands), so what a timer sets off (a request,
 * an answer, a re-ask) lands before the next timer fires, as if the network took no time.
 * Timers fire at their exact due times.
 */
void fake_nodes_advance(fake_nodes_t *s, uint64_t ms);

/** A node answering from `steps[0..n)` (1..FAKE_MAX_STEPS). */
fake_node_t *fake_node_add(fake_nodes_t *s, const fake_step_t *steps, int n);

/** A node answering every request with `step`. */
fake_node_t *fake_node_add1(fake_nodes_t *s, fake_step_t step);

/** A node whose requests `fn` answers. */
fake_node_t *fake_node_add_handler(fake_nodes_t *s, fake_handler_fn fn, void *ud);

/** A node whose port refuses connections (bound once to learn a free port, then closed). */
fake_node_t *fake_node_add_refused(fake_nodes_t *s);

/** Takes a node down: its server closes (requests it holds are cut) and its port refuses
 *  connections from now on (runs the loop until the server is closed, bounded). */
void fake_node_down(fake_node_t *n);

/** The duty tests' three cases of "no node can serve", on three nodes a, b, c where a hangs
 *  throughout: 0, b and c hang too; 1, b answers 500 boom and c 503 busy; 2, b and c are
 *  down. Scripts b and c for case `kase` (taken in order: 0, 1, 2). */
void fake_fail_case(int kase, fake_node_t *b, fake_node_t *c);

/** The 503 the race engine answers in case `kase` of fake_fail_case, a having timed out
 *  (a static buffer). */
const char *fake_fail_case_answer(int kase);

/** Replaces a node's script; its request count and records restart. */
void fake_node_script(fake_node_t *n, const fake_step_t *steps, int nsteps);

/** The node's latest request (asserts there is one; past FAKE_MAX_RECORDS requests, the
 *  last one recorded). */
const fake_req_t *fake_node_last(const fake_node_t *n);

/** Shuts every node down, runs the loop until all are closed and no request is held
 *  (asserted, bounded), and frees the servers and records. Run the loop afterwards for
 *  the close callbacks. */
void fake_nodes_close(fake_nodes_t *s);

/* ---- answering from a handler ------------------------------------------------------------- */

/** Answers `req` with `status` and a JSON body formatted from `fmt`. */
void fake_send_json(bm_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Answers `req` with a 200 event stream held open as the node's `stream` (an older one
 *  is ended); the client going away ends it. */
void fake_stream_open(fake_node_t *n, bm_req_t *req);

/** fake_stream_open, but the response head leaves only with the first write (Lodestar). */
void fake_stream_open_lazy(fake_node_t *n, bm_req_t *req);

/** Writes `text` on the node's open stream (asserts there is one). */
void fake_stream_write(fake_node_t *n, const char *text);

/** Writes one event (`event: topic`, `data: data`) on the node's open stream. */
void fake_stream_event(fake_node_t *n, const char *topic, const char *data);

/** Ends the node's open stream cleanly, as a node closing it (asserts there is one). */
void fake_stream_end(fake_node_t *n);

/* ---- the client ------------------------------------------------------------------------------ */

/** A request for fake_call_start. */
typedef struct fake_request {
    const char *method; /* NULL: GET */
    const char *target; /* path and query */
    const char *accept; /* header fields sent when not NULL */
    const char *ctype;
    const char *version; /* Eth-Consensus-Version */
    const void *body;    /* NULL: none */
    size_t len;          /* 0: strlen(body) */
    uint32_t timeout_ms; /* 0: 10 s */
} fake_request_t;

/** A client request and what came back. */
typedef struct fake_call {
    bm_xfer_t *x; /* running, or NULL */
    bool done;
    int err, status;
    bm_hdrs_t hdrs;
    char *body; /* NUL-terminated copy ("" without one) */
    size_t body_len;
    const bm_clock_t *clock;   /* what the times are read on (NULL: the system's wall clock) */
    uint64_t start_ms, end_ms; /* wall time */
} fake_call_t;

/** Sends `rq` to 127.0.0.1:`port` with `up`; the loop must run for it to complete. Its
 *  times are read on `clock` (NULL: the system's wall clock). */
void fake_call_start(fake_call_t *c, bm_upstream_t *up, const bm_clock_t *clock, int port,
                     const fake_request_t *rq);

/** A response header field of a finished call, "" when absent. */
const char *fake_call_header(const fake_call_t *c, const char *name);

/** How long a finished call took, in ms (wall time of its clock). */
uint64_t fake_call_ms(const fake_call_t *c);

/** Cancels a running call and frees what it holds. */
void fake_call_dispose(fake_call_t *c);

/* ---- beaconmux in miniature ----------------------------------------------------------------- */

typedef struct fake_mux {
    uv_loop_t loop;
    bm_clock_t *clock;  /* the engine's, the policies', the nodes' and the calls' */
    bm_upstream_t *up;  /* the engine's (and the policies') */
    bm_upstream_t *cup; /* the calls' */
    bm_pool_t *pool;
    bm_race_engine_t *eng;
    bm_router_t *router;
    bm_server_t *front;
    bool front_done;
    int front_port;
    fake_nodes_t nodes; /* in the pool */
    /* chain information for the policies under test (the mux itself reads none): 12 s
     * slots, 8 per epoch, slot 40 half gone at creation (on the mux's clock), every fork up
     * to Fulu */
    bm_chain_info_t chain;
    fake_call_t calls[FAKE_MAX_CALLS];
    int n_calls;
    int dispatched; /* requests the front handed to the router */
    /* the policies under test: `stop` runs once the front is drained, before the engine
     * goes (stop background work); `free` once the loop ran every close callback, before
     * the loop is closed and the pool goes */
    void *module;
    void (*module_stop)(void *module);
    void (*module_free)(void *module);
} fake_mux_t;

/** A new miniature beaconmux on a real clock, listening; `pool_records`: the engine records
 *  transfers in the pool (bm_pool_record), as beaconmux does. */
fake_mux_t *fake_mux_new(bool pool_records);

/** The same on a manual clock (starting at the system's wall time), which the nodes' scripts
 *  and the calls' times share: time moves only with fake_mux_advance. */
fake_mux_t *fake_mux_new_manual(bool pool_records);

/** Moves the manual clock `ms` forward as fake_nodes_advance does, where settled also means
 *  that every call has reached the front (or is done), and after each step the loop turns
 *  a few times without blocking, so that an answer the front gave reaches its call before
 *  time moves on (the front flushes a response at the end of a loop turn, the call reads
 *  it in the next). */
void fake_mux_advance(fake_mux_t *m, uint64_t ms);

/** Runs the loop until every call reached the front (or is done) and the nodes are settled
 *  (asserted, bounded), letting ready answers reach their calls. */
void fake_mux_settle(fake_mux_t *m);

/** Milliseconds on the mux's clock since `t0_ms` (a wall time read on it). */
uint64_t fake_mux_since(const fake_mux_t *m, uint64_t t0_ms);

/** cmocka setup and teardown: a fake_mux_new(true) (fake_mux_manual_setup: on a manual
 *  clock) in *state, and its fake_mux_free. */
int fake_mux_setup(void **state);
int fake_mux_manual_setup(void **state);
int fake_mux_teardown(void **state);

/** A node of the mux answering from `steps[0..n)`, ready (its pool state set directly:
 *  no state listener runs). */
fake_node_t *fake_mux_node(fake_mux_t *m, const fake_step_t *steps, int n);

/** A node of the mux giving the one answer `step` (fake_node_add1 for the mux). */
fake_node_t *fake_mux_node1(fake_mux_t *m, fake_step_t step);

/** Sends `rq` to the front; the loop must run for it to complete. */
fake_call_t *fake_mux_call(fake_mux_t *m, const fake_request_t *rq);

/** Sends `method target` with the JSON body `json` (NULL: none; else with its
 *  Content-Type) and `accept` (may be NULL) to the front; the loop must run for it. */
fake_call_t *fake_mux_send(fake_mux_t *m, const char *method, const char *target, const char *json,
                           const char *accept);

/** fake_mux_send, then fake_mux_wait. */
fake_call_t *fake_mux_send_wait(fake_mux_t *m, const char *method, const char *target,
                                const char *json, const char *accept);

/** Runs the loop until `c` finished; asserts it did, without a transport error. */
void fake_mux_wait(fake_mux_t *m, fake_call_t *c);

/** Moves the manual clock `ms` forward, asserting `c` is not done yet, then 1 ms more, and
 *  waits for it: its answer came at `ms` + 1 to the millisecond. A macro, so that a failure
 *  names the test's line (the file including this one includes cmocka.h). */
#define fake_mux_done_1ms_after(m, c, ms)                                                          \
    do {                                                                                           \
        fake_mux_advance((m), (ms));                                                               \
        assert_false((c)->done);                                                                   \
        fake_mux_advance((m), 1);                                                                  \
        fake_mux_wait((m), (c));                                                                   \
    } while (0)

/** A GET through the front (accept may be NULL); the loop must run for it to complete. */
fake_call_t *fake_mux_get(fake_mux_t *m, const char *target, const char *accept);

/** Tears everything down: running calls cancelled, the front drained, the module stopped,
 *  the engine, upstreams and nodes closed, the loop run, the module freed, the loop
 *  closed (asserted: nothing left on it), then the rest. */
void fake_mux_free(fake_mux_t *m);

#endif /* BM_TEST_FAKE_NODE_H */
