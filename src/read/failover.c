/* SPDX-License-Identifier: MIT */
/*
 * failover: one exchange per client request. The exchange walks a candidate list built
 * when the request arrives; each attempt is one streamed transfer. Until an attempt's
 * head is accepted (status below 500, or the last candidate) nothing reaches the client,
 * so a failed attempt can be replaced by the next one. After that the exchange is
 * "committed" and only streams.
 *
 * Re-entrancy: writing to the client can report the client gone from inside our own
 * callbacks, and the abort callback must not free the exchange under their feet. Every
 * entry point holds `busy`; the exchange is freed when it is finished and not busy.
 */
#include "read/failover.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "base/url.h"

#define MAX_CANDIDATES 32
#define MAX_KEPT_BODY (64 * 1024) /* a failed (5xx) answer kept to relay if all fail */
#define SPARE_MAX 64              /* finished exchanges kept for reuse */

typedef struct exchange exchange_t;

struct bm_failover {
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_failover_opts_t opts;
    size_t active;
    bm_log_limit_t limit;
    bm_str_t url; /* scratch for the URL of an attempt (copied by bm_upstream_start) */
    /* Finished exchanges, reused with their header and string storage: a request then
     * costs no allocation here once the loop has warmed up. */
    exchange_t *spare[SPARE_MAX];
    size_t n_spare;
};

typedef enum {
    PH_IDLE,     /* between attempts */
    PH_HEAD,     /* attempt running, head not seen */
    PH_BUFFER,   /* answer below 500: held until complete or too large for failover */
    PH_KEEP_5XX, /* answer 5xx and another candidate remains: kept in case all fail */
    PH_STREAM,   /* committed: streaming to the client */
} phase_t;

struct exchange {
    bm_failover_t *f;
    bm_req_t *req;
    bm_node_t *cand[MAX_CANDIDATES];
    size_t n_cand;
    size_t next;     /* next candidate to try */
    bm_node_t *node; /* node of the running attempt */
    bm_xfer_t *xfer; /* running attempt, or NULL */
    phase_t phase;
    bool committed;
    bool finished; /* the client request has been ended */
    unsigned busy; /* nesting depth of our callbacks */
    bool paused;
    /* the running attempt's answer while it is held (PH_BUFFER) */
    int held_status;
    int64_t held_length; /* Content-Length of the answer, or -1 */
    /* the last 5xx answer, relayed when every candidate failed */
    int kept_status;

    /* Storage kept when the exchange is reused (exchange_new clears everything above). */
    bm_header_t *view; /* the held answer's fields: pointers into the transfer's storage */
    size_t view_n, view_cap;
    bm_str_t held_body;
    bm_hdrs_t kept_hdrs;
    bm_str_t kept_body;
    bm_str_t errors; /* "node1: connection refused; node2: timed out" */
};

void bm_failover_opts_default(bm_failover_opts_t *o)
{
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->read_timeout_ms = BM_DEFAULT_TIMEOUTS_READ_MS;
    o->write_timeout_ms = BM_DEFAULT_TIMEOUTS_WRITE_MS;
    o->max_attempts = BM_DEFAULT_FAILOVER_MAX_ATTEMPTS;
    o->hold_bytes = 1 << 20;
}

bm_failover_t *bm_failover_new(bm_upstream_t *up, bm_pool_t *pool, const bm_failover_opts_t *o)
{
    bm_failover_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->up = up;
    f->pool = pool;
    if (o)
        f->opts = *o;
    else
        bm_failover_opts_default(&f->opts);
    if (f->opts.max_attempts == 0)
        f->opts.max_attempts = 1;
    f->limit.window_ms = 10000;
    f->limit.burst = 10;
    return f;
}

static void exchange_destroy(exchange_t *ex)
{
    free(ex->view);
    bm_hdrs_dispose(&ex->kept_hdrs);
    bm_str_dispose(&ex->kept_body);
    bm_str_dispose(&ex->held_body);
    bm_str_dispose(&ex->errors);
    free(ex);
}

void bm_failover_free(bm_failover_t *f)
{
    if (!f)
        return;
    while (f->n_spare)
        exchange_destroy(f->spare[--f->n_spare]);
    bm_str_dispose(&f->url);
    free(f);
}

size_t bm_failover_active(const bm_failover_t *f)
{
    return f->active;
}

/* A cleared exchange: a spare one, or a new one. NULL when out of memory. */
static exchange_t *exchange_new(bm_failover_t *f)
{
    exchange_t *ex;
    if (f->n_spare) {
        ex = f->spare[--f->n_spare];
        memset(ex, 0, offsetof(exchange_t, view));
    } else {
        ex = calloc(1, sizeof *ex);
        if (!ex)
            return NULL;
        bm_hdrs_init(&ex->kept_hdrs);
    }
    ex->f = f;
    return ex;
}

static void exchange_free(exchange_t *ex)
{
    bm_failover_t *f = ex->f;
    f->active--;
    if (f->n_spare == SPARE_MAX) {
        exchange_destroy(ex);
        return;
    }
    bm_hdrs_clear(&ex->kept_hdrs);
    bm_str_clear(&ex->held_body);
    /* a large kept answer is not worth keeping for the next request */
    bm_str_dispose(&ex->kept_body);
    bm_str_clear(&ex->errors);
    f->spare[f->n_spare++] = ex;
}

/* Leaves one of our callbacks; frees the exchange if it is finished and nobody is inside. */
static void leave(exchange_t *ex)
{
    if (--ex->busy == 0 && ex->finished)
        exchange_free(ex);
}

static void finish_end(exchange_t *ex)
{
    if (ex->finished)
        return;
    ex->finished = true;
    bm_resp_end(ex->req);
}

static void finish_abort(exchange_t *ex)
{
    if (ex->finished)
        return;
    ex->finished = true;
    bm_resp_abort(ex->req);
}

/* Cancels the running attempt, if any. */
static void cancel_attempt(exchange_t *ex)
{
    if (!ex->xfer)
        return;
    bm_upstream_cancel(ex->xfer);
    ex->xfer = NULL;
    ex->node->stats.in_flight--;
}

static void on_client_abort(bm_req_t *req, void *ud)
{
    exchange_t *ex = ud;
    (void)req;
    ex->busy++;
    cancel_attempt(ex);
    finish_end(ex); /* writes are dropped now; this releases the request */
    leave(ex);
}

static void on_client_drain(bm_req_t *req, void *ud)
{
    exchange_t *ex = ud;
    (void)req;
    if (ex->paused && ex->xfer) {
        ex->paused = false;
        bm_upstream_resume(ex->xfer);
    }
}

/* What on_head needs to know of a node's answer, found in one pass over its fields. */
typedef struct head_info {
    const char *connection;     /* the first Connection field's value, or NULL */
    const char *content_length; /* the first Content-Length field's value, or NULL */
    const char *content_type;   /* the first Content-Type field's value, or NULL */
    bool chunked;               /* a Transfer-Encoding field is present */
    bool connection_lists;      /* the Connection value names a field (not only
                                   keep-alive or close, which a node sends every time) */
} head_info_t;

/* Whether a Connection value holds a token other than keep-alive and close. */
static bool names_fields(const char *conn)
{
    for (const char *p = conn; *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ",");
        size_t t = n;
        while (t && (p[t - 1] == ' ' || p[t - 1] == '\t'))
            t--;
        if (t && !(t == 10 && strncasecmp(p, "keep-alive", 10) == 0) &&
            !(t == 5 && strncasecmp(p, "close", 5) == 0))
            return true;
        p += n;
    }
    return false;
}

static void scan_head(const bm_hdrs_t *h, head_info_t *hi)
{
    memset(hi, 0, sizeof *hi);
    for (size_t i = 0; i < h->n; i++) {
        const bm_header_t *f = &h->items[i];
        /* the length decides which single name to compare with */
        switch (f->name_len) {
        case 10:
            if (!hi->connection && strncasecmp(f->name, "connection", 10) == 0) {
                hi->connection = f->value;
                hi->connection_lists = names_fields(f->value);
            }
            break;
        case 12:
            if (!hi->content_type && strncasecmp(f->name, "content-type", 12) == 0)
                hi->content_type = f->value;
            break;
        case 14:
            if (!hi->content_length && strncasecmp(f->name, "content-length", 14) == 0)
                hi->content_length = f->value;
            break;
        case 17:
            if (strncasecmp(f->name, "transfer-encoding", 17) == 0)
                hi->chunked = true;
            break;
        default:
            break;
        }
    }
}

/*
 * Whether a header field of a node's answer goes to the client. The server drops the
 * hop-by-hop fields of a response head itself (bm_resp_start), so only what it cannot know
 * is dropped here: the Connection field (the node's "close" is not the client's) and the
 * fields it lists, which are hop-by-hop for this message only.
 */
static bool goes_to_client(const bm_header_t *h, const head_info_t *hi)
{
    if (!hi->connection)
        return true;
    if (!hi->connection_lists) /* only "keep-alive" or "close" (hop-by-hop anyway) */
        return h->name_len != 10 || strncasecmp(h->name, "connection", 10) != 0;
    if (h->name_len == 10 && strncasecmp(h->name, "connection", 10) == 0)
        return false;
    return !bm_header_listed_in_connection(hi->connection, h->name, h->name_len);
}

/* Copies the fields that go to the client: for an answer kept beyond its transfer. */
static void copy_response_headers(bm_hdrs_t *dst, const bm_hdrs_t *src, const head_info_t *hi)
{
    for (size_t i = 0; i < src->n; i++)
        if (goes_to_client(&src->items[i], hi))
            bm_hdrs_add(dst, src->items[i].name, src->items[i].name_len, src->items[i].value,
                        src->items[i].value_len);
}

/*
 * Lists the fields that go to the client without copying their text: the held answer is
 * sent (commit, or on_done) while its transfer's fields are still valid (upstream.h).
 * False when out of memory.
 */
static bool view_response_headers(exchange_t *ex, const bm_hdrs_t *src, const head_info_t *hi)
{
    if (src->n > ex->view_cap) {
        size_t cap = src->n > 32 ? src->n : 32;
        bm_header_t *v = realloc(ex->view, cap * sizeof *v);
        if (!v)
            return false;
        ex->view = v;
        ex->view_cap = cap;
    }
    ex->view_n = 0;
    for (size_t i = 0; i < src->n; i++)
        if (goes_to_client(&src->items[i], hi))
            ex->view[ex->view_n++] = src->items[i];
    return true;
}

/* The held answer's fields, for bm_resp_start/bm_resp_send. */
static bm_hdrs_t held_fields(const exchange_t *ex)
{
    return (bm_hdrs_t){.items = ex->view, .n = ex->view_n, .cap = ex->view_n};
}

/* Content-Length of an answer, or -1 when it is chunked, absent or unusable. */
static int64_t response_length(const head_info_t *hi)
{
    if (hi->chunked)
        return -1;
    const char *cl = hi->content_length;
    if (!cl || !*cl)
        return -1;
    char *end;
    unsigned long long v = strtoull(cl, &end, 10);
    if (*end != '\0' || cl[0] == '-')
        return -1;
    return (int64_t)v;
}

static void start_next(exchange_t *ex);

/* Sends the held head and body and switches to streaming. */
static void commit(exchange_t *ex)
{
    ex->phase = PH_STREAM;
    ex->committed = true;
    bm_hdrs_t fields = held_fields(ex);
    if (bm_resp_start(ex->req, ex->held_status, &fields, ex->held_length) != 0) {
        cancel_attempt(ex); /* the client is gone; on_client_abort ends the request */
        return;
    }
    if (bm_str_len(&ex->held_body)) {
        bm_buf_t *b = bm_str_finish(&ex->held_body);
        if (b)
            bm_resp_write(ex->req, b);
        bm_buf_unref(b);
    }
}

/* True for answers that must be streamed at once: event streams never complete, and
 * bodies announced larger than the hold limit would only be held to be sent anyway. */
static bool stream_at_once(const exchange_t *ex, const head_info_t *hi, int64_t length)
{
    const char *ct = hi->content_type;
    if (ct && strncasecmp(ct, "text/event-stream", 17) == 0)
        return true;
    return length > (int64_t)ex->f->opts.hold_bytes;
}

static void on_head(bm_xfer_t *x, int status, const bm_hdrs_t *headers, void *ud)
{
    exchange_t *ex = ud;
    (void)x;
    ex->busy++;
    bool more = ex->next < ex->n_cand;
    head_info_t hi;
    scan_head(headers, &hi);
    if (status >= 500 && more) {
        ex->phase = PH_KEEP_5XX;
        ex->kept_status = status;
        bm_hdrs_clear(&ex->kept_hdrs);
        copy_response_headers(&ex->kept_hdrs, headers, &hi);
        bm_str_clear(&ex->kept_body);
    } else {
        ex->phase = PH_BUFFER;
        ex->held_status = status;
        ex->held_length = response_length(&hi);
        bm_str_clear(&ex->held_body);
        if (!view_response_headers(ex, headers, &hi)) {
            cancel_attempt(ex);
            finish_abort(ex); /* nothing was sent: the client gets a 502 */
        } else if (stream_at_once(ex, &hi, ex->held_length))
            commit(ex);
        else if (ex->held_length > 0)
            bm_str_reserve(&ex->held_body, (size_t)ex->held_length); /* one allocation */
    }
    leave(ex);
}

static int on_data(bm_xfer_t *x, const char *p, size_t n, void *ud)
{
    exchange_t *ex = ud;
    (void)x;
    int rc = 0;
    ex->busy++;
    switch (ex->phase) {
    case PH_BUFFER:
        bm_str_append(&ex->held_body, p, n);
        if (bm_str_len(&ex->held_body) > ex->f->opts.hold_bytes)
            commit(ex);
        break;
    case PH_STREAM:
        if (!ex->finished)
            bm_resp_write_copy(ex->req, p, n);
        break;
    case PH_KEEP_5XX:
        if (bm_str_len(&ex->kept_body) < MAX_KEPT_BODY) {
            size_t room = MAX_KEPT_BODY - bm_str_len(&ex->kept_body);
            bm_str_append(&ex->kept_body, p, n < room ? n : room);
        }
        break;
    default:
        break;
    }
    if (ex->phase == PH_STREAM && !ex->finished && !bm_resp_writable(ex->req)) {
        ex->paused = true;
        rc = BM_XFER_PAUSE;
    }
    leave(ex);
    return rc;
}

static void send_kept_answer(exchange_t *ex)
{
    bm_buf_t *body = bm_str_finish(&ex->kept_body);
    bm_resp_send(ex->req, ex->kept_status, NULL, body, &ex->kept_hdrs);
    bm_buf_unref(body);
    ex->finished = true;
}

static void on_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    exchange_t *ex = ud;
    (void)x;
    ex->busy++;
    ex->xfer = NULL;
    bm_node_t *node = ex->node;
    node->stats.in_flight--;
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    bm_pool_record(ex->f->pool, node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us,
                   res->err ? (res->detail && *res->detail ? res->detail : bm_strerror(res->err))
                            : NULL);
    if (outcome != BM_OUTCOME_OK) {
        size_t plen;
        const char *path = bm_req_path(ex->req, &plen);
        if (res->err)
            bm_log_limited(&ex->f->limit, BM_LOG_WARN, "%s %.*s via %s: %s", bm_req_method(ex->req),
                           (int)plen, path, node->id,
                           res->detail && *res->detail ? res->detail : bm_strerror(res->err));
        else
            bm_log_limited(&ex->f->limit, BM_LOG_WARN, "%s %.*s via %s: HTTP %d",
                           bm_req_method(ex->req), (int)plen, path, node->id, res->status);
    }

    if (ex->committed) {
        if (res->err)
            finish_abort(ex); /* never splice: the client sees a broken connection */
        else
            finish_end(ex);
    } else if (!ex->finished && !res->err && ex->phase == PH_BUFFER) {
        /* the whole answer arrived while held: send it with its exact length */
        bm_buf_t *body = bm_str_finish(&ex->held_body);
        ex->finished = true;
        bm_hdrs_t fields = held_fields(ex);
        bm_resp_send(ex->req, ex->held_status, NULL, body, &fields);
        bm_buf_unref(body);
    } else if (!ex->finished) {
        if (res->err) {
            if (bm_str_len(&ex->errors))
                bm_str_puts(&ex->errors, "; ");
            bm_str_printf(&ex->errors, "%s: %s", node->id, bm_strerror(res->err));
        } else if (bm_str_len(&ex->errors)) {
            bm_str_printf(&ex->errors, "; %s: HTTP %d", node->id, res->status);
        } else {
            bm_str_printf(&ex->errors, "%s: HTTP %d", node->id, res->status);
        }
        ex->phase = PH_IDLE;
        start_next(ex);
    }
    leave(ex);
}

static const bm_xfer_cbs_t xfer_cbs = {on_head, on_data, on_done};

/* Starts the next candidate, or answers when none is left. Called with busy held. */
static void start_next(exchange_t *ex)
{
    bm_failover_t *f = ex->f;
    while (ex->next < ex->n_cand && !ex->finished) {
        bm_node_t *node = ex->cand[ex->next++];
        bm_str_t *url = &f->url;
        bm_str_clear(url);
        if (bm_url_join(url, node->url, bm_req_target(ex->req)) != 0)
            continue;
        const char *method = bm_req_method(ex->req);
        bool is_read = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        bm_xfer_req_t xr = {
            .method = method,
            .url = bm_str_data(url),
            .headers = bm_req_headers(ex->req),
            .extra = &node->extra,
            .body = bm_req_body(ex->req),
            .connect_timeout_ms = f->opts.connect_timeout_ms,
            .timeout_ms = is_read ? 0 : f->opts.write_timeout_ms,
            .idle_timeout_ms = is_read ? f->opts.read_timeout_ms : 0,
            .stream = true,
        };
        ex->node = node;
        ex->phase = PH_HEAD;
        ex->xfer = bm_upstream_start(f->up, &xr, &xfer_cbs, ex);
        if (ex->xfer) {
            node->stats.in_flight++;
            return;
        }
        if (bm_str_len(&ex->errors))
            bm_str_puts(&ex->errors, "; ");
        bm_str_printf(&ex->errors, "%s: could not start a request", node->id);
    }
    if (ex->finished)
        return;
    if (ex->kept_status) {
        send_kept_answer(ex);
    } else {
        ex->finished = true;
        bm_resp_error(ex->req, 503, "no upstream answered: %s",
                      bm_str_len(&ex->errors) ? bm_str_data(&ex->errors) : "none available");
    }
}

/* Builds the candidate list: usable nodes of the wanted client, best rank first, then
 * configuration order (a stable insertion sort: the lists are short). */
static size_t pick_candidates(bm_failover_t *f, bm_client_t only, bool ready_only, bm_node_t **out,
                              size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < bm_pool_count(f->pool) && n < MAX_CANDIDATES; i++) {
        bm_node_t *node = bm_pool_node(f->pool, i);
        if (!bm_node_usable(node) || (ready_only && node->state != BM_NODE_READY))
            continue;
        if (only != BM_CLIENT_UNKNOWN && node->client != only)
            continue;
        size_t k = n++;
        while (k > 0 && bm_node_rank(out[k - 1]) > bm_node_rank(node)) {
            out[k] = out[k - 1];
            k--;
        }
        out[k] = node;
    }
    return n < max ? n : max;
}

static void handle(bm_failover_t *f, bm_req_t *req, bm_client_t only, bool ready_only)
{
    exchange_t *ex = exchange_new(f);
    if (!ex) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    f->active++;
    ex->req = req;
    ex->n_cand = pick_candidates(f, only, ready_only, ex->cand, f->opts.max_attempts);
    ex->busy++;
    if (ex->n_cand == 0) {
        ex->finished = true;
        if (ready_only)
            bm_resp_error(req, 503, "no ready upstream");
        else if (only != BM_CLIENT_UNKNOWN)
            bm_resp_error(req, 503, "no usable %s upstream", bm_client_name(only));
        else
            bm_resp_error(req, 503, "no usable upstream");
    } else {
        bm_req_on_abort(req, on_client_abort, ex);
        bm_resp_on_drain(req, on_client_drain, ex);
        start_next(ex);
    }
    leave(ex);
}

void bm_failover_handle(bm_failover_t *f, bm_req_t *req, bm_client_t only)
{
    handle(f, req, only, false);
}

/* Only ready nodes, best first (for answers that must come from a node in sync, such as
 * peer_count); 503 when none is ready. */
void bm_failover_handle_ready(bm_failover_t *f, bm_req_t *req)
{
    handle(f, req, BM_CLIENT_UNKNOWN, true);
}

void bm_failover_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_failover_handle(ud, req, BM_CLIENT_UNKNOWN);
}

void bm_failover_route_client(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    size_t len;
    const char *path = bm_req_path(req, &len);
    const char *seg = path + 1;
    size_t seg_len = strcspn(seg, "/?");
    bm_client_t c = bm_client_parse(seg, seg_len);
    if (c == BM_CLIENT_UNKNOWN) {
        bm_resp_error(req, 404, "unknown client-specific path");
        return;
    }
    bm_failover_handle(ud, req, c);
}
