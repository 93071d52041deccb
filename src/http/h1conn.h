/* SPDX-License-Identifier: MIT */
/*
 * h1conn: the inside of the native HTTP/1.1 client, shared by its two files: h1client.c
 * (transfers, the deferred work, the client itself and its API) and h1conn.c (nodes,
 * pools, addresses and connections: connecting, sending, reading and parsing responses,
 * the per-connection timer). The objects and the rules that keep their lifetimes safe
 * are described at the top of h1client.c. Internal to h1client.c and h1conn.c.
 */
#ifndef BM_H1CONN_H
#define BM_H1CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "base/list.h"
#include "base/log.h"
#include "base/recycle.h"
#include "http/h1client.h"
#include "http/h1req.h"
#include "http/h1resp.h"
#include "http/upstream_impl.h"

#define BM_H1_READ_BUF_SIZE (64 * 1024) /* one read buffer for every connection */
#define BM_H1_MAX_ADDRS 8               /* addresses of a host name tried in turn */

typedef struct node node_t;
typedef struct pool pool_t;
typedef struct conn conn_t;
typedef struct h1x h1x_t;

typedef enum {
    XS_FREE,      /* in the free list */
    XS_WAITING,   /* waiting for a connection of its node's pool */
    XS_ATTACHED,  /* on a connection: connecting, sending or receiving */
    XS_FAILING,   /* failed inside a call into this module; on_done runs from the loop */
    XS_DONE,      /* on_done is running */
    XS_CANCELLED, /* cancelled inside its own callback; released when that returns */
} xstate_t;

typedef enum {
    CS_RESOLVING,  /* waiting for the node's addresses */
    CS_CONNECTING, /* uv_tcp_connect in progress */
    CS_OPEN,       /* connected: busy with a transfer, or idle in the pool */
    CS_CLOSED,     /* uv_close called; freed when both handles have closed */
} cstate_t;

/* Where connections go: one host and port. Nodes with different credentials for the same
 * host share it, as they share the node's TCP connections under libcurl. */
struct pool {
    bm_h1client_t *c;
    pool_t *next;
    char *hostport; /* as written in the URLs */
    size_t hostport_len;
    char host[256]; /* for the resolver */
    char port[8];
    unsigned refs; /* nodes that use this pool */
    uint32_t max_conns;
    bool limit_set;
    uint32_t n_conns; /* connections of any state but closed */
    bm_link_t idle;   /* idle connections (conn_t.pool_link), most recently used first */
    bm_link_t wait;   /* transfers waiting for a connection (h1x_t.queue), oldest first */
    struct sockaddr_storage addrs[BM_H1_MAX_ADDRS];
    int n_addrs;
    bool literal;         /* the host is an IP literal: addrs never expire */
    uint64_t addrs_until; /* loop time until which the resolved addresses are used */
    bool resolving;
    uv_getaddrinfo_t gai;
    bm_link_t resolve_waiters; /* connections waiting for the addresses (conn_t.rw_link) */
};

/* What requests to one origin "http://[userinfo@]host[:port]" share: the fixed part of
 * their head (Host, Authorization) and the pool of their host. */
struct node {
    bm_h1client_t *c;
    node_t *next;
    char *origin; /* exactly as in the URLs */
    size_t origin_len;
    bm_h1req_origin_t o;
    int url_err;      /* BM_EINVAL: the origin cannot be used (bad port, host) */
    pool_t *pool;     /* NULL when url_err */
    uint32_t n_xfers; /* transfers that refer to the node */
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t write_req;
    bm_h1client_t *c;
    pool_t *pool;
    cstate_t state;
    int open_handles;
    h1x_t *x; /* the transfer being served, or NULL */
    bm_h1resp_t *resp;
    unsigned nreq; /* responses completed on this connection */
    int addr_idx;
    uint64_t connect_deadline;
    uint64_t idle_since;
    uint64_t due; /* when the timer fires (loop time), 0 when not armed */
    bool writing;
    bool write_failed;
    bool reading;
    bool got_bytes; /* a response byte arrived for the current transfer */
    bool pooled;
    bool release_after_write; /* complete, but the write callback has not run yet */
    bm_buf_t *wbody;          /* the request body, referenced until the write completes */
    char *held;               /* unparsed bytes kept while the transfer is paused */
    size_t held_len, held_cap;
    bm_link_t pool_link;   /* on the pool's idle list while `pooled` */
    bm_link_t rw_link;     /* on the pool's resolve waiters while CS_RESOLVING */
    bm_link_t resume_link; /* on the client's resume list: held bytes to hand over */
    bm_link_t all_link;    /* on the client's list of connections not closed */
};

struct h1x {
    struct bm_xfer base; /* first: upstream.c dispatches on it */
    bm_h1client_t *c;
    node_t *node;
    conn_t *conn;
    xstate_t state;
    bm_xfer_cbs_t cbs;
    void *ud;
    bool stream;
    bool want_paused;
    bool head_done;
    bool retried;
    bool in_cb; /* one of its callbacks is running */
    bool has_body;
    size_t max_bytes;
    uint32_t connect_ms, timeout_ms, idle_ms;
    uint64_t t_start_us, t_head_us;
    uint64_t start_ms, last_rx_ms; /* loop time */
    /* When the idle deadline passed: the end of the one more look at the socket asked for
     * then (loop time); idle is declared only after it (see bm_h1conn_expired). */
    uint64_t idle_look_ms;
    bm_buf_t *req_body;
    int status;
    int err;
    const char *detail;
    char method[BM_UPRULES_METHOD_MAX + 1];
    size_t line_len; /* the request line at the start of `head` */
    bm_link_t live;  /* on the client's list of live transfers, from start to release */
    bm_link_t queue; /* on its pool's wait list (XS_WAITING) or the client's fail list
                        (XS_FAILING) */

    /* Kept when the transfer is recycled (xfer_get clears everything above). */
    bm_hdrs_t hdrs;
    bm_str_t head; /* request line, then the per-request fields and the empty line */
    bm_str_t body; /* buffered response body */
};

struct bm_h1client {
    uv_loop_t *loop;
    bm_h1client_opts_t opts;
    node_t *nodes;
    node_t *last_node; /* the node of the last start: most requests go to the same one */
    size_t n_nodes;
    pool_t *pools;
    bm_link_t conns; /* connections not closed (conn_t.all_link) */
    bm_link_t live;  /* transfers started and not released (h1x_t.live) */
    size_t active;
    bm_recycle_t recycled; /* released transfers kept for reuse */

    unsigned depth;   /* libuv callbacks of this module on the stack */
    unsigned api;     /* bm_h1client_start on the stack: failures are deferred */
    bool dying;       /* bm_h1client_free was called */
    bool torn;        /* the client's own handles are closing */
    unsigned pending; /* closes and resolver requests still to come back */

    uv_timer_t defer;      /* deferred work: failures found in calls, resumes */
    bm_link_t fail;        /* transfers failed inside a call, oldest first (h1x_t.queue) */
    bm_link_t resume;      /* connections with held bytes to hand over (conn_t.resume_link) */
    uv_timer_t wait_timer; /* deadlines of transfers waiting for a connection */
    uint64_t wait_due;

    char *rbuf; /* one read buffer for every connection (reads never nest) */
    bm_log_limit_t fail_log;
    void (*on_closed)(void *ud);
    void *closed_ud;
};

/* ---- state changes ------------------------------------------------------------------ */

/** The one place a transfer's state changes; transitions are logged in debug builds. */
static inline void bm_h1client_set_state(h1x_t *x, xstate_t to)
{
#ifdef BM_DEBUG
    static const char *const names[] = {"free",    "waiting", "attached",
                                        "failing", "done",    "cancelled"};
    if (x->state != to && bm_log_enabled(BM_LOG_DEBUG))
        bm_log(BM_LOG_DEBUG, "h1client: transfer %p %s -> %s", (void *)x, names[x->state],
               names[to]);
#endif
    x->state = to;
}

/** The one place a connection's state changes; transitions are logged in debug builds. */
static inline void bm_h1conn_set_state(conn_t *k, cstate_t to)
{
#ifdef BM_DEBUG
    static const char *const names[] = {"resolving", "connecting", "open", "closed"};
    if (k->state != to && bm_log_enabled(BM_LOG_DEBUG))
        bm_log(BM_LOG_DEBUG, "h1client: connection %p %s -> %s", (void *)k, names[k->state],
               names[to]);
#endif
    k->state = to;
}

/* ---- h1client.c --------------------------------------------------------------------- */

/** Loop time in milliseconds (what the timers count in). */
static inline uint64_t bm_h1client_now(const bm_h1client_t *c)
{
    return uv_now(c->loop);
}

/**
 * The loop time from which a deadline starting now is counted: the precise clock
 * (uv_hrtime) rounded up, because the loop's cached time (uv_now) may be a whole loop
 * turn old, or on a coarse clock. A deadline counted from it never expires early: a
 * timeout of 200 ms fires after at least 200 ms, as with libcurl.
 */
static inline uint64_t bm_h1client_deadline_base(uint64_t hrtime_ns)
{
    return hrtime_ns / 1000000 + 1;
}

/** Closes the client's own handles once, then frees it when everything came back. */
void bm_h1client_teardown(bm_h1client_t *c);

/** Brackets every libuv callback of the client: a teardown asked for inside waits for
 *  the outermost one to return. */
static inline void bm_h1client_enter(bm_h1client_t *c)
{
    c->depth++;
}

static inline void bm_h1client_leave(bm_h1client_t *c)
{
    if (--c->depth == 0 && c->dying && !c->torn)
        bm_h1client_teardown(c);
}

/** Runs on_done for x (detached from everything) and recycles it. Only from a libuv
 *  callback of the client. */
void bm_h1client_finish(h1x_t *x);

/** Fails x: detached (its connection closed), then on_done now, or from the loop when a
 *  call into the client is on the stack (bm_h1client_fail_later always defers). */
void bm_h1client_fail(h1x_t *x, int err, const char *detail);
void bm_h1client_fail_later(h1x_t *x, int err, const char *detail);

/** Recycles a transfer that is done or cancelled. */
void bm_h1client_release(h1x_t *x);

/** After a callback of x returned: false when x must not be touched any more (cancelled
 *  in it, and released here, or the client is going away). */
bool bm_h1client_after_cb(h1x_t *x);

/* ---- h1conn.c ----------------------------------------------------------------------- */

/** The node of a URL's origin (and its pool), created on first use; NULL when out of
 *  memory. A node whose origin cannot be used has url_err set and no pool. */
node_t *bm_h1conn_node(bm_h1client_t *c, const char *url, const bm_uprules_url_t *u);

/** Frees every node and pool (the client's teardown, when no connection is left). */
void bm_h1conn_forget_all(bm_h1client_t *c);

/** Gives x a connection of its pool: an idle one (sends at once) or a new one. False when
 *  the pool is full: the caller queues x for a turn. */
bool bm_h1conn_acquire(h1x_t *x);

/** Opens connections for waiting transfers while the pool has room. */
void bm_h1conn_kick(pool_t *pl);

/** Opens a connection for x to address addr_idx of the pool, bypassing idle ones;
 *  `deadline` (loop time) bounds the connect, 0: x's connect timeout from now. */
void bm_h1conn_open(pool_t *pl, h1x_t *x, int addr_idx, uint64_t deadline);

/** Closes a connection (detaching its transfer); freed when its handles have closed. */
void bm_h1conn_close(conn_t *k);

/** Arms the connection's timer for its earliest deadline, unless it fires earlier. */
void bm_h1conn_timer_update(conn_t *k);

/** The earliest of a transfer's own deadlines (overall, idle unless paused; loop time),
 *  0 when it has none. */
uint64_t bm_h1conn_xfer_deadline(const h1x_t *x);

/** What expired for a transfer at `now` (loop time), or NULL. */
const char *bm_h1conn_expired(h1x_t *x, uint64_t now);

/** Hands the held bytes to a resumed transfer and reads again. From the loop. */
void bm_h1conn_resume(conn_t *k);

#endif /* BM_H1CONN_H */
