/* SPDX-License-Identifier: MIT */
/*
 * server_int: what the parts of the HTTP server share (server.c: connections, the output
 * queue, reading and parsing, timers, the listener; server_resp.c: the request and response
 * API handlers call, and the response heads). Private to those files.
 */
#ifndef BM_SERVER_INT_H
#define BM_SERVER_INT_H

#include "http/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "base/buf.h"
#include "base/list.h"
#include "base/log.h"
#include "http/http1.h"
#include "http/peers.h"
#include "http/tls.h"

#define IN_BUF_SIZE (16 * 1024)       /* input buffer; also the read-ahead bound while handling */
#define POOL_MAX 64                   /* spare input buffers kept by the server */
#define ACC_CAP 4096                  /* accumulator for heads, framing and small bodies */
#define STREAM_ACC_CAP 128            /* accumulator of a stream: chunk framing only */
#define SMALL_COPY 512                /* bodies up to this many bytes are copied, not referenced */
#define MAX_IOV 64                    /* buffers per write */
#define MAX_WRITE_BYTES (1024 * 1024) /* bytes per uv_write, so that progress is visible */
#define LINGER_MS 2000                /* reading after our FIN, so the client sees the answer */
#define BODY_PREALLOC (1024 * 1024)   /* Content-Length bodies up to this are sized at once */
#define TLS_BATCH (256 * 1024)        /* plaintext encrypted per write: the rest stays queued */
#define TLS_STAGE (16 * 1024)         /* small segments are joined into one record */
#define TLS_RBUF (17 * 1024)          /* ciphertext per read: a record of 16 KiB and its framing */

typedef struct conn conn_t;

typedef struct seg {
    bm_buf_t *b; /* one reference held */
    size_t off;
    size_t len;
} seg_t;

typedef enum {
    RESP_NONE,        /* not started */
    RESP_FIXED,       /* Content-Length */
    RESP_CHUNKED,     /* Transfer-Encoding: chunked */
    RESP_UNTIL_CLOSE, /* HTTP/1.0 stream: the end is the close */
    RESP_NOBODY,      /* 204, 304: no body whatever the handler says */
} resp_mode_t;

typedef enum {
    DL_NONE,
    DL_FRESH,  /* a new connection: its first byte must come within header_timeout */
    DL_IDLE,   /* keep-alive between requests */
    DL_HEAD,   /* receiving a head */
    DL_BODY,   /* receiving a body (max gap) */
    DL_SEND,   /* output queued and no handler: bytes must keep moving */
    DL_LINGER, /* after our FIN */
} deadline_kind_t;

struct bm_req {
    conn_t *conn;
    const bm_http1_head_t *head;
    char *target;     /* owned: a target set by bm_req_set_target, or NULL (the head's) */
    bm_hdrs_t *extra; /* owned: fields added to the response head (bm_req_add_resp_fields) */
    const char *path;
    size_t path_len;
    const char *query;
    size_t query_len;
    bm_buf_t *body;
    uint64_t start_us;
    void *data;
    void (*abort_cb)(bm_req_t *req, void *ud);
    void *abort_ud;
    void (*drain_cb)(bm_req_t *req, void *ud);
    void *drain_ud;
    void (*end_cb)(void *ud); /* bm_req_on_end */
    void *end_ud;
    resp_mode_t mode;
    uint64_t remaining; /* RESP_FIXED: body bytes still owed */
    bool owned;         /* dispatched and not ended yet */
    bool aborted;       /* the abort callback ran (or was due with none registered) */
    bool started;
    bool suppress_body; /* HEAD, 204, 304 */
    int status;         /* the status sent (for the summary) */
    uint64_t body_bytes;
    uint64_t upstreams;
    const char *route_class;
    void *scope;        /* bm_req_set_scope */
    size_t masked_path; /* bm_req_mask_path_prefix */
    char client[64];    /* bm_req_set_client; "": the peer */
};

/*
 * A connection's way to its end, in order; it only ever moves forward (bm_srv_conn_set_state),
 * and any state may jump to CLOSED (an error, a reset, the grace period's end).
 */
typedef enum conn_state {
    CONN_OPEN,        /* serving requests */
    CONN_CLOSE_AFTER, /* to close once no request is owned and the output is written */
    CONN_FINISHING,   /* that close is being carried out: the output drains */
    CONN_SHUT,        /* uv_shutdown was issued: our FIN is on its way */
    CONN_LINGER,      /* our FIN is out: input is read and dropped until the client's */
    CONN_CLOSED,      /* uv_close was called */
} conn_state_t;

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    bm_server_t *srv;
    bm_link_t link;       /* on the server's open connections */
    bm_link_t dirty_link; /* on the server's connections to flush (linked: it is dirty) */
    int refs;
    int handles_open;
    bm_http1_t *parser;
    bm_req_t req;
    char peer[64];

    /* input */
    char *in; /* pool buffer of IN_BUF_SIZE, or NULL */
    size_t in_off, in_len;
    bool reading;
    bool alloc_direct; /* the last allocation pointed into the request body */
    bool peer_eof;

    /* output */
    seg_t *q;
    size_t qhead, qtail, qcap;
    bm_buf_t *acc; /* accumulator; one reference held */
    size_t acc_start;
    size_t pending; /* bytes queued or in flight */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    size_t wbytes; /* bytes of the write in flight */
    bool writing;
    bool drain_armed;

    /* state */
    conn_state_t st;
    bool in_process;
    bool need_process; /* conn_process is due from the check handle */
    bool broken;       /* an allocation failed mid-response: close from the loop */
    bool error_sent;   /* the server answered an error itself: close after it */
    bool keep_alive;
    bool fresh;        /* no request seen yet */
    bool counted;      /* counted in the server's peers (per-client cap) */
    uint64_t body_end; /* loop ms by which the body being received must be complete */
    uint64_t deadline;
    deadline_kind_t dl_kind;
    bool dl_looked; /* this deadline passed once with input waiting: it was read first */

    /* TLS, on a TLS listener only (server_tls.c) */
    bm_tls_conn_t *tls;
    bm_buf_t *tls_wbuf; /* ciphertext of the write in flight; one reference held */
    bool tls_pumping;   /* bm_srv_tls_pump is on the stack */
};

struct bm_server {
    uv_loop_t *loop;
    bm_server_opts_t opts;
    bm_http1_limits_t lim;
    bm_server_handler_fn handler;
    void *ud;

    uv_tcp_t listener;
    uv_timer_t grace;
    uv_check_t check;
    uv_idle_t idle;
    int handles_open;
    bool listening;
    bool listener_closing;
    bool listener_closed;
    bool freeing;
    int port;

    bm_link_t conns; /* open connections (conn_t) */
    size_t nconns;   /* open connections (in `conns`) */
    size_t nalloc;   /* connection structs not yet freed */
    bm_link_t dirty; /* connections to flush (conn_t) */

    char *pool[POOL_MAX];
    size_t npool;
    char discard[4096]; /* read target while lingering */

    bool shutting_down;
    bool done_pending;
    bool done_called;
    void (*done)(bm_server_t *srv, void *ud);
    void *done_ud;

    bm_peers_t *peers; /* connections per client address */

    time_t date_sec;
    char date[64]; /* "Date: ...\r\n" */
    size_t date_len;
    bm_log_limit_t log_lim;

    bm_tls_ctx_t *tls;          /* one reference; NULL: plain HTTP */
    bm_log_limit_t tls_log_lim; /* handshake failures: scanners make many */
    char tls_rbuf[TLS_RBUF];    /* ciphertext read target: fed to the session at once */
    bm_server_stats_t stats;
    void (*on_end)(const bm_req_summary_t *s, void *ud);
    void *on_end_ud;
};

/* ---- across the parts ----------------------------------------------------------------------- */

/* server.c: connections and the output queue */
void bm_srv_acc_commit(conn_t *c, size_t n);
char *bm_srv_acc_reserve(conn_t *c, size_t n);
void bm_srv_arm_drain(conn_t *c);
void bm_srv_conn_close(conn_t *c);
void bm_srv_conn_hold(conn_t *c);
void bm_srv_conn_mark_dirty(conn_t *c);
void bm_srv_conn_schedule(conn_t *c);
void bm_srv_conn_set_state(conn_t *c, conn_state_t to);
void bm_srv_conn_unref(conn_t *c);
void bm_srv_dirty_add(conn_t *c);
void bm_srv_split_target(bm_req_t *r);
bool bm_srv_queue_buf(conn_t *c, bm_buf_t *b, size_t off, size_t n);
bool bm_srv_queue_copy(conn_t *c, const void *p, size_t n);
/* the same, for server_tls.c: the input side and the write path under TLS */
void bm_srv_conn_flush(conn_t *c);
void bm_srv_conn_input(conn_t *c, ssize_t nread, const uv_buf_t *buf, bool direct);
void bm_srv_conn_release_input(conn_t *c);
void bm_srv_input_alloc(conn_t *c, uv_buf_t *buf);
bool bm_srv_input_room(const conn_t *c);
void bm_srv_on_write(uv_write_t *w, int status);
void bm_srv_q_consume(conn_t *c, size_t n);

/* server_resp.c */
void bm_srv_conn_send_error(conn_t *c, int status, const char *msg);

/* server_tls.c: the connection's TLS session between the socket and the rest */
bool bm_srv_tls_close_notify(conn_t *c); /* true: wait, the alert is being written */
void bm_srv_tls_pump(conn_t *c);
void bm_srv_tls_received(conn_t *c, const char *p, size_t n);
bool bm_srv_tls_send(conn_t *c); /* false: the connection closed */

#endif /* BM_SERVER_INT_H */
