/* SPDX-License-Identifier: MIT */
/*
 * upstream_curl: the libcurl transport behind bm_upstream, used for https:// nodes
 * (hosted providers: TLS, certificates, h2 multiplexing), and for http:// too when
 * bm_upstream_opts_t.http_via_curl says so. libcurl's multi interface driven by the
 * libuv loop.
 *
 * libcurl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION: one uv_poll_t per
 * socket, found again through curl_multi_assign) and when to wake it up
 * (CURLMOPT_TIMERFUNCTION: one uv_timer_t); we call curl_multi_socket_action when a socket
 * is ready or the timer fires, then read the finished transfers with
 * curl_multi_info_read.
 *
 * Re-entrancy is the delicate part. libcurl refuses multi calls from inside its callbacks
 * (CURLM_RECURSIVE_API_CALL), yet the callers of this module do everything from inside
 * ours: a race cancels the losers from the winner's on_data, a proxy stream pauses from
 * on_data, a policy starts the next request from on_head or on_done. So every libcurl call
 * is bracketed by a depth counter (`in_curl`), and cancel and resume only record their
 * intent on the transfer and queue it (a start too, when libcurl is on the stack; pausing
 * needs no libcurl call at all, see sync_pause). The queue is applied by settle(), which
 * runs once the outermost libcurl call has returned, or at once when none is on the
 * stack: it applies queued operations, then drains curl_multi_info_read and runs on_done
 * for each finished transfer, until neither has anything left. settle() is the only place
 * that frees transfers, and user code running inside it (on_done) only queues work for
 * it, so no pointer held on the stack is ever freed under it.
 *
 * Transfers are recycled through a small free list, each with its own easy handle, while
 * connections stay in the multi handle's cache. A proxy starts one transfer per client
 * request, so the per-request work is kept small (measured with bench/cost.sh): a handle
 * is configured once with the options that never change (callbacks, protocols, proxy,
 * TLS), and each request sets only what varies, every time and explicitly (URL, method,
 * body, timeouts, size limit, header list), so nothing of one request can leak into the
 * next. A handle whose transfer did not end cleanly is curl_easy_reset and configured
 * anew. The header list is a curl_slist laid out by us in one block that the transfer
 * keeps (libcurl only reads it), not one allocation per line, and the URL goes to libcurl
 * pre-parsed when that sends the same bytes (see url_handle).
 */
#include "http/upstream_curl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/list.h"
#include "base/log.h"
#include "base/recycle.h"
#include "http/uprules.h"
#include "http/upstream_impl.h"

#define DEFAULT_MAX_CONNECTS 256
#define DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define CU_CACHE 8 /* parsed URL prefixes kept: one per node is enough */

typedef struct cx cx_t;

typedef enum {
    XS_FREE = 0,  /* in the free list */
    XS_NEW,       /* created, not yet added to the multi handle (queued) */
    XS_RUNNING,   /* in the multi handle */
    XS_DONE,      /* finished; on_done is running or has run */
    XS_CANCELLED, /* cancelled by its owner; waits in the queue to be released */
} xfer_state_t;

/* Watches one of libcurl's sockets. Freed in its close callback. */
typedef struct sock {
    uv_poll_t poll;
    bm_upcurl_t *up;
    curl_socket_t fd;
    bm_link_t link; /* on the client's socks */
} sock_t;

struct cx {
    struct bm_xfer base; /* first: upstream.c dispatches on it */
    bm_upcurl_t *up;
    xfer_state_t state;
    bm_xfer_cbs_t cbs;
    void *ud;

    /* Request. */
    bm_buf_t *req_body; /* referenced until the transfer is released */
    CURLU *curlu;       /* the pre-parsed URL handed to libcurl, or NULL */
    char method[BM_UPRULES_METHOD_MAX + 1];
    char *secret; /* password (or token user name) of the URL, masked in messages */
    bool stream;
    bool gzip; /* an https node was asked for gzip: libcurl inflates what comes */
    size_t max_bytes;

    /* Response. */
    int status;
    bool head_done;
    size_t head_bytes; /* bytes of the current head, bounded by BM_UPRULES_MAX_HEAD_BYTES */
    bm_str_t body;

    /* Flow control: what the owner wants and what libcurl was told. */
    bool want_paused;
    bool curl_paused;

    /* Failure recorded by our own callbacks or timers; wins over libcurl's code. */
    int local_err;
    const char *local_detail;
    bool kill; /* local_err must be applied by removing the handle ourselves */

    /* Idle timer: re-armed lazily from last_rx rather than restarted on every read. When
     * the deadline passed, idle_look is the end of the one more look at the socket asked
     * for then (see on_idle). */
    uint32_t idle_ms;
    uint64_t last_rx;
    uint64_t idle_look;

    uint64_t t_start, t_head;
    bool in_multi;
    bool retried; /* sent once more after its reused connection broke (see handle_done) */

    /* Queue of transfers with pending operations, and the list of all live transfers. */
    bm_link_t queue; /* on the client's queue of pending operations */
    bm_link_t live;  /* on the client's list of live transfers, from start to release */

    /* Kept when the transfer is recycled (xfer_get clears everything above `hdrs`). */
    bm_hdrs_t hdrs; /* response header fields */
    bool idle_init;
    uv_timer_t idle;
    CURL *easy;   /* configured (see configure()); NULL after a failed creation */
    bool clean;   /* the last transfer ended cleanly: no reset needed */
    char *hl_mem; /* the header list block (see build_headers) */
    size_t hl_cap;
    char errbuf[CURL_ERROR_SIZE];
};

struct bm_upcurl {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer; /* libcurl's timeout; `up` is freed in its close callback */
    bm_upstream_opts_t opts;
    char *ca_file;

    int in_curl;   /* depth of libcurl calls (and of our own on_data/on_head calls) */
    bool settling; /* settle() is on the stack */
    bool dying;    /* bm_upstream_free was called */

    bm_link_t queue; /* transfers with pending operations, oldest first (cx_t.queue) */
    bm_link_t xfers; /* transfers started and not released (cx_t.live) */
    bm_link_t socks; /* the sockets libcurl watches (sock_t) */
    size_t active;

    bm_recycle_t recycled; /* released transfers kept for reuse */

    bm_log_limit_t fail_log;
    void (*on_closed)(void *ud);
    void *closed_ud;

    /* Parsed "scheme://authority" prefixes of recent URLs (see url_handle). */
    struct {
        char *prefix;
        size_t len;
        CURLU *u;
    } cu[CU_CACHE];
    unsigned cu_next;
};

/* ---- global initialisation ------------------------------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc = CURLE_FAILED_INIT;

/*
 * curl_global_init is process-wide and, before libcurl 7.84, not thread-safe; pthread_once
 * makes the first bm_upcurl_new of any thread do it exactly once. curl_global_cleanup is
 * never called: the library stays initialised for the life of the process.
 */
static void global_init(void)
{
    g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- small helpers -------------------------------------------------------------------- */

static void kick(bm_upcurl_t *up);
static void settle(bm_upcurl_t *up);
static size_t on_header(char *p, size_t size, size_t nmemb, void *ud);
static size_t on_body(char *p, size_t size, size_t nmemb, void *ud);

static void enqueue(bm_upcurl_t *up, cx_t *x)
{
    if (!bm_link_linked(&x->queue))
        bm_list_push_back(&up->queue, &x->queue);
}

static int map_curl(CURLcode c)
{
    switch (c) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
        return BM_ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return BM_ETIMEDOUT;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2_STREAM:
        return BM_ECONNRESET;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED:
        return BM_ETLS;
    case CURLE_FILESIZE_EXCEEDED:
        return BM_ETOOBIG;
    case CURLE_OUT_OF_MEMORY:
        return BM_ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return BM_EINVAL;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP3:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_RANGE_ERROR:
        return BM_EPROTO;
    default:
        return BM_EIO;
    }
}

/* ---- sockets and libcurl's timer -------------------------------------------------------- */

static void on_sock_closed(uv_handle_t *h)
{
    free(h->data);
}

static void sock_close(bm_upcurl_t *up, sock_t *sk)
{
    (void)up; /* the list it leaves is the client's: no head to update */
    bm_link_unlink(&sk->link);
    uv_close((uv_handle_t *)&sk->poll, on_sock_closed);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    sock_t *sk = h->data;
    bm_upcurl_t *up = sk->up;
    int flags = 0;
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
    } else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    int running;
    up->in_curl++;
    CURLMcode mc = curl_multi_socket_action(up->multi, sk->fd, flags, &running);
    up->in_curl--;
    bm_assert(mc != CURLM_RECURSIVE_API_CALL);
    kick(up);
}

/* CURLMOPT_SOCKETFUNCTION: start, change or stop watching one socket. */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    bm_upcurl_t *up = userp;
    sock_t *sk = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            curl_multi_assign(up->multi, s, NULL);
            sock_close(up, sk);
        }
        return 0;
    }
    if (!sk) {
        sk = calloc(1, sizeof *sk);
        if (!sk)
            return -1;
        if (uv_poll_init_socket(up->loop, &sk->poll, s) != 0) {
            free(sk);
            return -1;
        }
        sk->poll.data = sk;
        sk->up = up;
        sk->fd = s;
        bm_list_push_front(&up->socks, &sk->link);
        curl_multi_assign(up->multi, s, sk);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    if (uv_poll_start(&sk->poll, ev, on_poll) != 0)
        return -1;
    return 0;
}

static void on_curl_timeout(uv_timer_t *t)
{
    bm_upcurl_t *up = t->data;
    int running;
    up->in_curl++;
    CURLMcode mc = curl_multi_socket_action(up->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    up->in_curl--;
    bm_assert(mc != CURLM_RECURSIVE_API_CALL);
    kick(up);
}

/* CURLMOPT_TIMERFUNCTION: -1 stops the timer, 0 means "as soon as possible" (next turn). */
static int on_timer_set(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    bm_upcurl_t *up = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&up->timer);
    else
        uv_timer_start(&up->timer, on_curl_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- transfer lifetime ------------------------------------------------------------------ */

static void on_xfer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void xfer_destroy(cx_t *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    x->easy = NULL;
    free(x->hl_mem);
    x->hl_mem = NULL;
    bm_hdrs_dispose(&x->hdrs);
    if (x->idle_init)
        uv_close((uv_handle_t *)&x->idle, on_xfer_closed);
    else
        free(x);
}

#define SETOPT(opt, val)                                                                           \
    do {                                                                                           \
        if (curl_easy_setopt(e, opt, val) != CURLE_OK)                                             \
            return BM_EINVAL;                                                                      \
    } while (0)

/*
 * The options that are the same for every request of this client, set once per easy
 * handle (and again after a curl_easy_reset). The transfer is bound to its handle for
 * the handle's whole life, so the callbacks' data pointers never change either.
 */
static int configure(bm_upcurl_t *up, cx_t *x)
{
    CURL *e = x->easy;
    SETOPT(CURLOPT_PRIVATE, (void *)x);
    SETOPT(CURLOPT_ERRORBUFFER, x->errbuf);
    SETOPT(CURLOPT_HEADERFUNCTION, on_header);
    SETOPT(CURLOPT_HEADERDATA, (void *)x);
    SETOPT(CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(CURLOPT_WRITEDATA, (void *)x);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    /* Never route through a proxy from the environment (http_proxy, ...). NOPROXY "*"
     * also spares libcurl reading no_proxy and NO_PROXY from the environment for every
     * request. */
    SETOPT(CURLOPT_PROXY, "");
    SETOPT(CURLOPT_NOPROXY, "*");
    SETOPT(CURLOPT_TCP_NODELAY, 1L);
    SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    SETOPT(CURLOPT_SSL_VERIFYPEER, up->opts.tls_verify ? 1L : 0L);
    SETOPT(CURLOPT_SSL_VERIFYHOST, up->opts.tls_verify ? 2L : 0L);
    if (up->ca_file)
        SETOPT(CURLOPT_CAINFO, up->ca_file);
    return 0;
}

/* A transfer with a configured easy handle: recycled, or new. */
static cx_t *xfer_get(bm_upcurl_t *up)
{
    /* Keep what is worth keeping (header storage, the idle timer, the easy handle and the
     * header list block), reset the rest. */
    cx_t *x = bm_recycle_get(&up->recycled, sizeof *x, offsetof(cx_t, hdrs));
    if (!x)
        return NULL;
    bm_hdrs_clear(&x->hdrs); /* kept storage, or a new zeroed (empty) list */
    x->base.native = false;
    x->errbuf[0] = '\0';
    x->up = up;
    bm_link_init(&x->queue);
    bm_link_init(&x->live);
    if (x->easy && !x->clean) {
        /* What the last transfer left behind (a pause, an error) is not worth reasoning
         * about: start from libcurl's defaults. */
        curl_easy_reset(x->easy);
        if (configure(up, x) != 0) {
            curl_easy_cleanup(x->easy);
            x->easy = NULL;
        }
    }
    if (!x->easy) {
        x->easy = curl_easy_init();
        if (x->easy && configure(up, x) != 0) {
            curl_easy_cleanup(x->easy);
            x->easy = NULL;
        }
    }
    x->clean = false;
    return x;
}

/* Drops everything a transfer holds and recycles it. Only settle() and teardown call this. */
static void release(bm_upcurl_t *up, cx_t *x)
{
    bm_link_unlink(&x->queue);
    if (x->in_multi) {
        up->in_curl++;
        curl_multi_remove_handle(up->multi, x->easy);
        up->in_curl--;
        x->in_multi = false;
    }
    bm_buf_unref(x->req_body);
    x->req_body = NULL;
    if (x->curlu) {
        /* libcurl keeps the pointer (set.uh): clear it before the handle is freed */
        curl_easy_setopt(x->easy, CURLOPT_CURLU, NULL);
        curl_url_cleanup(x->curlu);
        x->curlu = NULL;
    }
    bm_str_dispose(&x->body);
    free(x->secret);
    x->secret = NULL;
    if (x->idle_init)
        uv_timer_stop(&x->idle);
    bm_link_unlink(&x->live);
    x->state = XS_FREE;
    if (up->dying || !bm_recycle_put(&up->recycled, x))
        xfer_destroy(x);
}

/* Runs on_done and releases the transfer. Only called from settle(). */
static void finish(bm_upcurl_t *up, cx_t *x, CURLcode code)
{
    int err = x->local_err ? x->local_err : map_curl(code);
    if (!err && !x->head_done) {
        /* libcurl 7.88 ends a transfer whose head the node cut short without an error */
        err = BM_ECONNRESET;
        x->local_detail = "connection closed before the response head was complete";
    }
    /* Only a handle whose transfer ran to a normal end is reused without a reset. */
    x->clean = err == 0 && code == CURLE_OK && !x->curl_paused && !x->kill;
    x->state = XS_DONE;
    up->active--;
    if (x->idle_init)
        uv_timer_stop(&x->idle);

    const char *cause = x->local_detail;
    if (!cause)
        cause = x->errbuf[0] ? x->errbuf : curl_easy_strerror(code);
    char detail[CURL_ERROR_SIZE + 64];
    bm_xfer_result_t res;
    bm_xfer_result_fill(&res,
                        &(bm_xfer_end_t){
                            .err = err,
                            .cause = cause,
                            .secret = x->secret,
                            .stream = x->stream,
                            .head_done = x->head_done,
                            .status = x->status,
                            .hdrs = &x->hdrs,
                            .body = &x->body,
                            .start_us = x->t_start,
                            .head_us = x->t_head,
                        },
                        detail, sizeof detail);

    if (res.err && bm_log_enabled(BM_LOG_DEBUG)) {
        const char *url = NULL;
        if (x->easy)
            curl_easy_getinfo(x->easy, CURLINFO_EFFECTIVE_URL, &url);
        bm_uprules_log_failure(&up->fail_log, x->method, url, res.err, detail);
    }

    if (!up->dying && x->cbs.on_done)
        x->cbs.on_done(&x->base, &res, x->ud);
    bm_buf_unref(res.body);
    release(up, x);
}

/* ---- libcurl's data callbacks ----------------------------------------------------------- */

static bool alive(const cx_t *x)
{
    return x->state == XS_RUNNING && !x->up->dying;
}

/* The final head is complete: judge its framing as the native client does, preallocate a
 * buffered body and tell the owner. False when the head fails the transfer. */
static bool deliver_head(cx_t *x)
{
    bm_upcurl_t *up = x->up;
    int64_t cl;
    const char *why;
    if (bm_uprules_content_length(&x->hdrs, &cl, &why) != 0) {
        x->local_err = BM_EPROTO;
        x->local_detail = why;
        return false;
    }
    /* a buffered body too large for the caller is refused from its length already (no HEAD:
     * its length describes a body that does not come), as the native client does */
    bool head = strcmp(x->method, "HEAD") == 0;
    if (!x->stream && !head && cl > 0 && (uint64_t)cl > x->max_bytes) {
        x->local_err = BM_ETOOBIG;
        x->local_detail = "response body larger than max_response_bytes";
        return false;
    }
    x->head_done = true;
    x->t_head = bm_clock_mono_us();
    if (x->gzip) {
        /* the body reaches the owner inflated: the coding and the compressed length go */
        const char *ce = bm_hdrs_get(&x->hdrs, "Content-Encoding");
        if (ce && strcasecmp(ce, "gzip") == 0) {
            bm_hdrs_remove(&x->hdrs, "Content-Encoding");
            bm_hdrs_remove(&x->hdrs, "Content-Length");
            cl = -1; /* the inflated length is not known */
        }
    }
    if (!x->stream && !x->body.b && bm_status_2xx(x->status) && !head && cl > 0)
        x->body.b = bm_buf_new((size_t)cl);
    if (x->cbs.on_head) {
        up->in_curl++;
        x->cbs.on_head(&x->base, x->status, &x->hdrs, x->ud);
        up->in_curl--;
    }
    return true;
}

/* Parses the status code of "HTTP/1.1 200 OK" or "HTTP/2 200"; 0 when malformed. */
static int parse_status(const char *p, size_t n)
{
    const char *sp = memchr(p, ' ', n);
    if (!sp || (size_t)(p + n - sp) < 4)
        return 0;
    int v = 0;
    for (int i = 1; i <= 3; i++) {
        char c = sp[i];
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + (c - '0');
    }
    return v;
}

/* Fails the transfer for its response head (the rules of uprules.h, as h1resp applies
 * them on the native transport). */
static size_t refuse_head(cx_t *x, const char *why)
{
    x->local_err = BM_EPROTO;
    x->local_detail = why;
    return 0;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    cx_t *x = ud;
    size_t n = size * nmemb;
    if (!alive(x))
        return 0;
    if (x->head_done)
        return n; /* trailer fields of a chunked body: not part of the head */
    x->last_rx = uv_now(x->up->loop);
    size_t len = n;
    while (len && (p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    bool status_line = len >= 5 && memcmp(p, "HTTP/", 5) == 0;
    x->head_bytes = status_line ? n : x->head_bytes + n;
    if (x->head_bytes > BM_UPRULES_MAX_HEAD_BYTES)
        return refuse_head(x, "response head larger than 64 KiB");
    if (len == 0) {
        /* libcurl checks the status line before it calls us, but a head that ends without
         * one must never reach the owner as status 0 (found by fuzz/fuzz_curlresp.c) */
        if (x->status == 0)
            return refuse_head(x, "response head without a status line");
        if (x->status >= 100 && x->status < 200) {
            /* end of an interim head; the final one follows, if this one may be skipped */
            if (!bm_uprules_interim_skipped(x->status))
                return refuse_head(x, x->status == 101 ? "unexpected 101 Switching Protocols"
                                                       : "unexpected interim response");
            return n;
        }
        return deliver_head(x) && alive(x) ? n : 0;
    }
    if (status_line) {
        /* A new head starts (after 1xx heads too): forget the previous one. */
        bm_hdrs_clear(&x->hdrs);
        x->status = parse_status(p, len);
        if (x->status < 100)
            return refuse_head(x, "invalid status code");
        return n;
    }
    for (size_t i = 0; i < len; i++)
        if (!bm_uprules_value_byte_ok((unsigned char)p[i]))
            return refuse_head(x, "invalid character in a header value");
    if ((p[0] == ' ' || p[0] == '\t') && x->hdrs.n > 0) {
        /* obs-fold: a continuation line joins the previous value with one space. */
        bm_header_t last = x->hdrs.items[x->hdrs.n - 1];
        size_t s = 0;
        while (s < len && (p[s] == ' ' || p[s] == '\t'))
            s++;
        bm_str_t v = BM_STR_INIT;
        /* Reserving first also keeps the zero-length appends below away from a NULL buffer. */
        bm_str_reserve(&v, last.value_len + 1 + (len - s));
        bm_str_append(&v, last.value, last.value_len);
        bm_str_putc(&v, ' ');
        bm_str_append(&v, p + s, len - s);
        int rc = v.oom ? BM_ENOMEM
                       : bm_hdrs_add(&x->hdrs, last.name, last.name_len, bm_str_data(&v),
                                     bm_str_len(&v));
        bm_str_dispose(&v);
        if (rc) {
            x->local_err = BM_ENOMEM;
            x->local_detail = "out of memory for response headers";
            return 0;
        }
        x->hdrs.items[x->hdrs.n - 2] = x->hdrs.items[x->hdrs.n - 1];
        x->hdrs.n--;
        return n;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return n; /* libcurl accepted the line; we have no use for it */
    size_t name_len = (size_t)(colon - p);
    while (name_len && (p[name_len - 1] == ' ' || p[name_len - 1] == '\t'))
        name_len--;
    const char *v = colon + 1;
    const char *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (bm_hdrs_add(&x->hdrs, p, name_len, v, (size_t)(end - v)) != 0) {
        x->local_err = BM_ENOMEM;
        x->local_detail = "out of memory for response headers";
        return 0;
    }
    return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    cx_t *x = ud;
    bm_upcurl_t *up = x->up;
    size_t n = size * nmemb;
    if (!alive(x))
        return CURL_WRITEFUNC_ERROR;
    x->last_rx = uv_now(up->loop);
    if (!x->head_done && (!deliver_head(x) || !alive(x)))
        return CURL_WRITEFUNC_ERROR;
    if (n == 0)
        return 0;
    if (x->want_paused) {
        /* The owner asked for no more data: libcurl keeps these bytes and stops reading
         * until the resume (curl_easy_pause(CONT) hands them to us again). */
        x->curl_paused = true;
        return CURL_WRITEFUNC_PAUSE;
    }
    if (!x->stream) {
        if (n > x->max_bytes - bm_str_len(&x->body)) {
            x->local_err = BM_ETOOBIG;
            x->local_detail = "response body larger than max_response_bytes";
            return CURL_WRITEFUNC_ERROR;
        }
        bm_str_append(&x->body, p, n);
        if (x->body.oom) {
            x->local_err = BM_ENOMEM;
            x->local_detail = "out of memory for the response body";
            return CURL_WRITEFUNC_ERROR;
        }
        return n;
    }
    up->in_curl++;
    int rc = x->cbs.on_data(&x->base, p, n, x->ud);
    up->in_curl--;
    if (!alive(x))
        return CURL_WRITEFUNC_ERROR;
    if (rc == BM_XFER_PAUSE)
        x->want_paused = true; /* takes effect with the next piece (see sync_pause) */
    return n;
}

/* ---- applying queued operations --------------------------------------------------------- */

static void idle_arm(cx_t *x, uint64_t ms);

static void on_idle(uv_timer_t *t)
{
    cx_t *x = t->data;
    bm_upcurl_t *up = x->up;
    if (x->state != XS_RUNNING)
        return;
    if (x->kill) {
        enqueue(up, x); /* a failure decided elsewhere, delivered from the loop */
        kick(up);
        return;
    }
    if (x->want_paused) {
        /* The silence is ours, not the node's: restart the count. */
        x->last_rx = uv_now(up->loop);
        idle_arm(x, x->idle_ms);
        return;
    }
    uint64_t now = uv_now(up->loop);
    uint64_t quiet = now - x->last_rx;
    if (quiet < x->idle_ms) {
        idle_arm(x, x->idle_ms - quiet);
        return;
    }
    /* Idle means the node was silent; the rule and its reason are those of the native
     * client (bm_h1conn_expired): look at the socket once after the deadline, through a
     * poll of the loop 1 ms later, and count bytes that wait unread as heard. */
    if (x->idle_look <= x->last_rx + x->idle_ms) {
        x->idle_look = now + 1;
        idle_arm(x, 1);
        return;
    }
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (curl_easy_getinfo(x->easy, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK &&
        fd != CURL_SOCKET_BAD && bm_uprules_socket_has_input((int)fd)) {
        x->last_rx = now; /* its bytes wait for us: we were late, not the node */
        idle_arm(x, x->idle_ms);
        return;
    }
    x->local_err = BM_ETIMEDOUT;
    x->local_detail = "no data received within idle_timeout_ms";
    x->kill = true;
    enqueue(up, x);
    kick(up);
}

static void idle_arm(cx_t *x, uint64_t ms)
{
    if (!x->idle_init) {
        uv_timer_init(x->up->loop, &x->idle);
        x->idle.data = x;
        x->idle_init = true;
    }
    uv_timer_start(&x->idle, on_idle, ms, 0);
}

static int add(bm_upcurl_t *up, cx_t *x)
{
    up->in_curl++;
    CURLMcode mc = curl_multi_add_handle(up->multi, x->easy);
    up->in_curl--;
    if (mc != CURLM_OK)
        return mc == CURLM_OUT_OF_MEMORY ? BM_ENOMEM : BM_EIO;
    x->in_multi = true;
    x->state = XS_RUNNING;
    if (x->idle_ms) {
        x->last_rx = uv_now(up->loop);
        idle_arm(x, x->idle_ms);
    }
    return 0;
}

/* Makes libcurl's pause state follow the owner's wish. Resuming may run on_data at once. */
static void sync_pause(bm_upcurl_t *up, cx_t *x)
{
    /*
     * Pausing is lazy: the next piece of body returns CURL_WRITEFUNC_PAUSE from on_body,
     * which pauses libcurl with that piece held (at most one read buffer). An explicit
     * curl_easy_pause(CURLPAUSE_RECV) would fail with CURLE_BAD_FUNCTION_ARGUMENT for a
     * transfer that has no connection yet (queued, resolving) or has just completed.
     * Only resuming needs libcurl: it delivers the held piece before returning.
     */
    if (x->want_paused || !x->curl_paused)
        return;
    x->curl_paused = false;
    up->in_curl++;
    CURLcode rc = curl_easy_pause(x->easy, CURLPAUSE_CONT);
    up->in_curl--;
    if (rc != CURLE_OK && x->state == XS_RUNNING && !x->kill) {
        /* The held bytes could not be delivered: the stream is broken, fail it. on_done
         * runs from the loop, never inside the bm_upstream_resume call that got here. */
        if (!x->local_err) {
            x->local_err = map_curl(rc);
            x->local_detail = "resuming the transfer failed";
        }
        x->kill = true;
        idle_arm(x, 0);
    }
}

static void apply(bm_upcurl_t *up, cx_t *x)
{
    switch (x->state) {
    case XS_CANCELLED:
        release(up, x);
        break;
    case XS_NEW: {
        int rc = add(up, x);
        if (rc) {
            x->local_err = rc;
            x->local_detail = "could not add the transfer to the multi handle";
            finish(up, x, CURLE_OK);
        }
        break;
    }
    case XS_RUNNING:
        if (x->kill) {
            up->in_curl++;
            curl_multi_remove_handle(up->multi, x->easy);
            up->in_curl--;
            x->in_multi = false;
            finish(up, x, CURLE_OK);
        } else {
            sync_pause(up, x);
        }
        break;
    default:
        break;
    }
}

/*
 * A request whose reused connection broke before any byte of an answer came (the node
 * closed or reset an idle keep-alive as we sent) is sent once more, on a fresh connection,
 * whatever its method: the native transport's rule (h1client.h). libcurl retries by itself
 * only when the reused connection ends cleanly, not when it is reset.
 */
static bool should_retry(cx_t *x, CURLcode code)
{
    if (x->retried || x->local_err || x->head_bytes > 0 || x->head_done ||
        (code != CURLE_RECV_ERROR && code != CURLE_SEND_ERROR && code != CURLE_GOT_NOTHING))
        return false;
    long connects = 1;
    curl_easy_getinfo(x->easy, CURLINFO_NUM_CONNECTS, &connects);
    return connects == 0; /* the transfer ran on a connection it did not open */
}

static void handle_done(bm_upcurl_t *up, CURL *easy, CURLcode code)
{
    char *priv = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    cx_t *x = (cx_t *)priv;
    if (!x || x->easy != easy || x->state != XS_RUNNING)
        return; /* a cancelled transfer: its queue entry releases it */
    bm_link_unlink(&x->queue);
    up->in_curl++;
    curl_multi_remove_handle(up->multi, easy);
    up->in_curl--;
    x->in_multi = false;
    if (should_retry(x, code)) {
        x->retried = true;
        x->curl_paused = false;
        int rc = add(up, x); /* the same options: the same request, on a new connection */
        if (rc == 0)
            return;
        x->local_err = rc;
        x->local_detail = "could not send the request again";
    }
    finish(up, x, code);
}

static void teardown(bm_upcurl_t *up);

/*
 * Applies queued operations and runs on_done for finished transfers until neither has
 * anything left. Runs only when no libcurl call is on the stack.
 */
static void settle(bm_upcurl_t *up)
{
    up->settling = true;
    while (!up->dying) {
        if (!bm_list_empty(&up->queue)) {
            cx_t *x = bm_list_first(&up->queue, cx_t, queue);
            bm_link_unlink(&x->queue);
            apply(up, x);
            continue;
        }
        int left;
        CURLMsg *m = curl_multi_info_read(up->multi, &left);
        if (!m)
            break;
        if (m->msg == CURLMSG_DONE) {
            /* Copy: the message is invalid after the next multi call. */
            CURL *easy = m->easy_handle;
            CURLcode code = m->data.result;
            handle_done(up, easy, code);
        }
    }
    up->settling = false;
    if (up->dying)
        teardown(up);
}

static void kick(bm_upcurl_t *up)
{
    if (up->in_curl == 0 && !up->settling)
        settle(up);
}

/* ---- client ------------------------------------------------------------------------------- */

bm_upcurl_t *bm_upcurl_new(uv_loop_t *loop, const bm_upstream_opts_t *opts,
                           void (*on_closed)(void *ud), void *ud)
{
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK) {
        bm_log(BM_LOG_ERROR, "upstream: curl_global_init failed: %s",
               curl_easy_strerror(g_init_rc));
        return NULL;
    }
    bm_upcurl_t *up = calloc(1, sizeof *up);
    if (!up) {
        bm_log(BM_LOG_ERROR, "upstream: out of memory");
        return NULL;
    }
    bm_link_init(&up->socks);
    bm_link_init(&up->queue);
    bm_link_init(&up->xfers);
    up->opts = *opts;
    up->on_closed = on_closed;
    up->closed_ud = ud;
    if (up->opts.ca_file) {
        up->ca_file = strdup(up->opts.ca_file);
        if (!up->ca_file) {
            free(up);
            bm_log(BM_LOG_ERROR, "upstream: out of memory");
            return NULL;
        }
    }
    up->opts.ca_file = up->ca_file;
    up->loop = loop;
    up->multi = curl_multi_init();
    if (!up->multi) {
        free(up->ca_file);
        free(up);
        bm_log(BM_LOG_ERROR, "upstream: curl_multi_init failed");
        return NULL;
    }
    long maxconn = up->opts.max_connects ? (long)up->opts.max_connects : DEFAULT_MAX_CONNECTS;
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(up->multi, CURLMOPT_SOCKETDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERFUNCTION, on_timer_set);
    curl_multi_setopt(up->multi, CURLMOPT_TIMERDATA, up);
    curl_multi_setopt(up->multi, CURLMOPT_MAXCONNECTS, maxconn);
    curl_multi_setopt(up->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                      (long)up->opts.max_host_connections);
    /* HTTP/1.1 pipelining is gone from libcurl; this allows h2 multiplexing over TLS only. */
    curl_multi_setopt(up->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
    uv_timer_init(loop, &up->timer);
    up->timer.data = up;
    return up;
}

void bm_upcurl_set_host_limit(bm_upcurl_t *up, uint32_t max)
{
    up->opts.max_host_connections = max;
    curl_multi_setopt(up->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)max);
}

static void on_up_closed(uv_handle_t *h)
{
    bm_upcurl_t *up = h->data;
    void (*cb)(void *) = up->on_closed;
    void *ud = up->closed_ud;
    free(up->ca_file);
    free(up);
    if (cb)
        cb(ud);
}

/* Cancels everything without callbacks, then closes every handle. */
static void teardown(bm_upcurl_t *up)
{
    up->dying = true;
    up->settling = true; /* nothing may settle any more */
    while (!bm_list_empty(&up->xfers)) {
        cx_t *x = bm_list_first(&up->xfers, cx_t, live);
        x->state = XS_CANCELLED;
        release(up, x);
    }
    for (cx_t *x; (x = bm_recycle_take(&up->recycled, 0));)
        xfer_destroy(x);
    for (unsigned i = 0; i < CU_CACHE; i++) {
        free(up->cu[i].prefix);
        curl_url_cleanup(up->cu[i].u);
        up->cu[i].prefix = NULL;
        up->cu[i].u = NULL;
    }
    up->in_curl++;
    curl_multi_cleanup(up->multi);
    up->in_curl--;
    up->multi = NULL;
    while (!bm_list_empty(&up->socks))
        sock_close(up, bm_list_first(&up->socks, sock_t, link));
    uv_close((uv_handle_t *)&up->timer, on_up_closed);
}

void bm_upcurl_free(bm_upcurl_t *up)
{
    if (!up || up->dying)
        return;
    up->dying = true;
    /* Inside a callback: settle() tears down once the stack has unwound. */
    if (up->in_curl > 0 || up->settling)
        return;
    teardown(up);
}

size_t bm_upcurl_active(const bm_upcurl_t *up)
{
    return up ? up->active : 0;
}

/* ---- starting a transfer ------------------------------------------------------------------ */

/*
 * The request's header list. libcurl takes a curl_slist for CURLOPT_HTTPHEADER and only
 * reads it while the transfer runs, so the nodes and their text are laid out here in one
 * block that the transfer keeps from request to request: no allocation per line. The
 * block is sized for the worst case first (every field kept), so nothing moves while the
 * list is being filled.
 */
typedef struct hlist {
    struct curl_slist *nodes; /* at the start of the block */
    size_t n, max;
    char *text; /* after the nodes */
    size_t used;
} hlist_t;

/* Appends "Name: value" (or "Name;" for an empty value, libcurl's way to send one). The
 * room was reserved by build_headers. */
static void hl_add(void *ctx, const char *name, size_t nlen, const char *value, size_t vlen)
{
    hlist_t *l = ctx;
    char *line = l->text + l->used;
    memcpy(line, name, nlen);
    if (vlen == 0) {
        line[nlen] = ';';
        line[nlen + 1] = '\0';
        l->used += nlen + 2;
    } else {
        line[nlen] = ':';
        line[nlen + 1] = ' ';
        memcpy(line + nlen + 2, value, vlen);
        line[nlen + 2 + vlen] = '\0';
        l->used += nlen + vlen + 3;
    }
    struct curl_slist *node = &l->nodes[l->n];
    node->data = line;
    node->next = NULL;
    if (l->n)
        l->nodes[l->n - 1].next = node;
    l->n++;
}

/* Appends a line as is (a literal such as "Expect:"). */
static void hl_add_raw(hlist_t *l, const char *line, size_t len)
{
    memcpy(l->text + l->used, line, len + 1);
    struct curl_slist *node = &l->nodes[l->n];
    node->data = l->text + l->used;
    node->next = NULL;
    if (l->n)
        l->nodes[l->n - 1].next = node;
    l->n++;
    l->used += len + 1;
}

#define LIT(s) s, sizeof(s) - 1

/*
 * Builds the header list of a request into the transfer's block: the caller's fields,
 * the node's extra fields, Accept-Encoding: identity, and for a request with a body an
 * empty Expect: and (unless the caller sent one) an empty Content-Type:, which keep
 * libcurl from adding its own (without a body libcurl adds neither). *out is NULL when
 * the list is empty.
 */
static int build_headers(cx_t *x, const bm_xfer_req_t *req, bool has_body, bool drop_auth,
                         struct curl_slist **out)
{
    static const char fixed[] = "Accept-Encoding: identity\0Expect:\0Content-Type:";
    size_t max = (req->headers ? req->headers->n : 0) + (req->extra ? req->extra->n : 0) + 4;
    size_t ff = req->forwarded_for ? strlen(req->forwarded_for) : 0;
    /* bm_uprules_fields_bytes counts ": " and CRLF; a list line needs ": " and a NUL. */
    size_t need = max * sizeof(struct curl_slist) + bm_uprules_fields_bytes(req->headers) +
                  bm_uprules_fields_bytes(req->extra) + sizeof fixed + (ff ? ff + 24 : 0);
    if (need > x->hl_cap) {
        char *mem = malloc(need);
        if (!mem)
            return BM_ENOMEM;
        free(x->hl_mem);
        x->hl_mem = mem;
        x->hl_cap = need;
    }
    hlist_t l = {.nodes = (struct curl_slist *)(void *)x->hl_mem, .max = max};
    l.text = x->hl_mem + max * sizeof(struct curl_slist);
    unsigned saw = 0;
    int rc = bm_uprules_caller_fields(req->headers, req->extra, drop_auth, hl_add, &l, &saw);
    if (!rc)
        rc = bm_uprules_fields(req->extra, false, hl_add, &l, &saw);
    if (!rc && ff) {
        if (!bm_uprules_value(req->forwarded_for, ff))
            return BM_EINVAL;
        hl_add(&l, "X-Forwarded-For", 15, req->forwarded_for, ff);
    }
    if (rc)
        return rc;
    bool has_ct = saw & BM_UPRULES_SAW_CONTENT_TYPE;
    if (!x->gzip) /* else libcurl sends its own Accept-Encoding: gzip */
        hl_add_raw(&l, LIT("Accept-Encoding: identity"));
    if (has_body) {
        /* "Name:" with nothing after it removes a field libcurl would add itself. */
        hl_add_raw(&l, LIT("Expect:"));
        if (!has_ct)
            hl_add_raw(&l, LIT("Content-Type:"));
    }
    bm_assert(l.n <= l.max && (size_t)(l.text + l.used - x->hl_mem) <= x->hl_cap);
    *out = l.n ? l.nodes : NULL;
    return 0;
}

/*
 * A pre-parsed URL for libcurl (CURLOPT_CURLU), or NULL to let libcurl parse the string.
 *
 * libcurl 7.88 parses every request's URL string (curl_url_set) and prints it back out
 * (curl_url_get of the whole URL, character by character through its printf): about 15k
 * instructions per request, a sixth of the whole proxy path (bench/cost.sh). With
 * CURLOPT_CURLU it copies a parsed URL instead. The "scheme://authority" prefix, which
 * names a node and so repeats, is parsed once and kept (a few per client); each request
 * copies it and sets its path and query. CURLOPT_URL is still set to the same string:
 * libcurl uses that string (not the parsed URL) when it retries a request on a fresh
 * connection, and for CURLINFO_EFFECTIVE_URL.
 *
 * Only plain paths take this way: setting a path part lower-cases percent-escapes and
 * skips the removal of dot segments and fragments that parsing the whole URL does, so
 * a path or query with '%', '#', a backslash or a "." or ".." segment is left to libcurl's
 * parser, and so is an empty query. The bytes sent are then the same either way.
 */
static bool plain_target(const char *p)
{
    bool seg_start = true;
    for (; *p; p++) {
        char c = *p;
        if (c == '%' || c == '#' || c == '\\')
            return false;
        if (c == '?')
            return p[1] != '\0' && strpbrk(p + 1, "%#\\") == NULL;
        if (seg_start && c == '.') {
            size_t dots = p[1] == '.' ? 2 : 1;
            char after = p[dots];
            if (after == '/' || after == '?' || after == '\0')
                return false;
        }
        seg_start = c == '/';
    }
    return true;
}

static CURLU *url_handle(bm_upcurl_t *up, const char *url)
{
    const char *sep = strstr(url, "://");
    if (!sep)
        return NULL;
    size_t plen = (size_t)(sep + 3 - url) + strcspn(sep + 3, "/?#");
    const char *target = url + plen;
    if (*target != '/' || !plain_target(target))
        return NULL;
    CURLU *base = NULL;
    for (unsigned i = 0; i < CU_CACHE && !base; i++)
        if (up->cu[i].u && up->cu[i].len == plen && memcmp(up->cu[i].prefix, url, plen) == 0)
            base = up->cu[i].u;
    if (!base) {
        char *prefix = strndup(url, plen);
        CURLU *u = curl_url();
        if (!prefix || !u ||
            curl_url_set(u, CURLUPART_URL, prefix, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) !=
                CURLUE_OK) {
            free(prefix);
            curl_url_cleanup(u);
            return NULL; /* libcurl's own parse reports the problem */
        }
        unsigned k = up->cu_next++ % CU_CACHE;
        free(up->cu[k].prefix);
        curl_url_cleanup(up->cu[k].u);
        up->cu[k].prefix = prefix;
        up->cu[k].len = plen;
        up->cu[k].u = u;
        base = u;
    }
    CURLU *h = curl_url_dup(base);
    if (!h)
        return NULL;
    const char *q = strchr(target, '?');
    char *path = q ? strndup(target, (size_t)(q - target)) : NULL;
    if ((q && !path) || curl_url_set(h, CURLUPART_PATH, path ? path : target, 0) != CURLUE_OK ||
        (q && curl_url_set(h, CURLUPART_QUERY, q + 1, 0) != CURLUE_OK)) {
        free(path);
        curl_url_cleanup(h);
        return NULL;
    }
    free(path);
    return h;
}

/*
 * Configures the handle for one request. Every option a request may change is set here,
 * each time, so that a recycled handle carries nothing over from its previous request:
 * HTTPGET first (it also clears NOBODY, which POSTFIELDS would not), CUSTOMREQUEST set or
 * cleared, a timeout of 0 and a size limit of 0 when there is none.
 */
static int setup(cx_t *x, const bm_xfer_req_t *req, bool https, bool has_userinfo)
{
    CURL *e = x->easy;
    x->gzip = req->compress && https;
    SETOPT(CURLOPT_URL, req->url);
    x->curlu = url_handle(x->up, req->url);
    SETOPT(CURLOPT_CURLU, x->curlu); /* NULL: libcurl parses the string */
    SETOPT(
        CURLOPT_CONNECTTIMEOUT_MS,
        (long)(req->connect_timeout_ms ? req->connect_timeout_ms : BM_DEFAULT_TIMEOUTS_CONNECT_MS));
    SETOPT(CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    /* Wait for the first TLS connection to a host to learn whether it multiplexes (h2)
     * rather than opening one connection per concurrent transfer. */
    SETOPT(CURLOPT_HTTP_VERSION,
           https ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
    SETOPT(CURLOPT_PIPEWAIT, https ? 1L : 0L);

    const char *m = req->method;
    bm_buf_t *b = req->body;
    bool head = strcmp(m, "HEAD") == 0;
    bool post = strcmp(m, "POST") == 0;
    bool has_body = false;
    SETOPT(CURLOPT_HTTPGET, 1L);
    if (head) {
        /* NOBODY is what tells libcurl not to wait for a body; a HEAD body is dropped. */
        SETOPT(CURLOPT_NOBODY, 1L);
    } else if (post || b) {
        /* POSTFIELDS sends the buffer as is (no copy): the reference keeps it alive. */
        x->req_body = bm_buf_ref(b);
        has_body = true;
        SETOPT(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(b ? b->len : 0));
        SETOPT(CURLOPT_POSTFIELDS, b ? b->data : "");
    }
    /* libcurl sends what its options imply: GET, HEAD, or POST once POSTFIELDS is set. Any
     * other method, and a GET with a body (which libcurl would turn into a POST), is named
     * explicitly, so the method sent is always the caller's. */
    bool custom = !head && !post && (strcmp(m, "GET") != 0 || has_body);
    SETOPT(CURLOPT_CUSTOMREQUEST, custom ? m : NULL);

    struct curl_slist *list = NULL;
    int rc = build_headers(x, req, has_body, has_userinfo, &list);
    if (rc)
        return rc;
    SETOPT(CURLOPT_HTTPHEADER, list);
    SETOPT(CURLOPT_ACCEPT_ENCODING, x->gzip ? "gzip" : NULL);
    /* No CURLOPT_MAXFILESIZE: libcurl would judge the Content-Length before we do (an
     * overflowing one as "too large"); deliver_head refuses a too large body from its
     * length, on_body while counting. */
    return 0;
}

bm_xfer_t *bm_upcurl_start(bm_upcurl_t *up, const bm_xfer_req_t *req, const bm_uprules_url_t *u,
                           const bm_xfer_cbs_t *cbs, void *ud)
{
    if (!up || up->dying)
        return NULL;
    cx_t *x = xfer_get(up);
    if (!x)
        return NULL;
    x->cbs = *cbs;
    x->ud = ud;
    x->stream = req->stream;
    x->max_bytes = req->max_response_bytes ? req->max_response_bytes : DEFAULT_MAX_RESPONSE;
    x->idle_ms = req->idle_timeout_ms;
    size_t mlen = strlen(req->method); /* at most BM_UPRULES_METHOD_MAX: checked by the caller */
    memcpy(x->method, req->method, mlen + 1);
    x->t_start = bm_clock_mono_us();
    x->state = XS_NEW;
    bm_list_push_front(&up->xfers, &x->live);
    up->active++;

    int rc = x->easy ? 0 : BM_ENOMEM;
    bool oom = false;
    /* Remember what to hide: the password, or a lone user name (a token). */
    x->secret = bm_uprules_secret(u->userinfo, u->userinfo_len, &oom);
    if (!rc && oom)
        rc = BM_ENOMEM;
    if (!rc)
        rc = setup(x, req, u->https, u->userinfo != NULL);
    if (!rc && up->in_curl == 0)
        rc = add(up, x);
    else if (!rc)
        enqueue(up, x); /* libcurl is on the stack: added once it has returned */
    if (rc) {
        bm_log_limited(&up->fail_log, BM_LOG_WARN, "upstream: cannot start a request: %s",
                       bm_strerror(rc));
        up->active--;
        x->state = XS_CANCELLED;
        release(up, x);
        return NULL;
    }
    return &x->base;
}

void bm_upcurl_cancel(bm_xfer_t *bx)
{
    cx_t *x = (cx_t *)bx;
    if (!x || (x->state != XS_NEW && x->state != XS_RUNNING))
        return;
    bm_upcurl_t *up = x->up;
    x->state = XS_CANCELLED;
    up->active--;
    enqueue(up, x);
    kick(up);
}

void bm_upcurl_pause(bm_xfer_t *bx)
{
    cx_t *x = (cx_t *)bx;
    /* Nothing to tell libcurl yet: the next piece of body pauses it (see sync_pause). */
    if (x && (x->state == XS_NEW || x->state == XS_RUNNING))
        x->want_paused = true;
}

void bm_upcurl_resume(bm_xfer_t *bx)
{
    cx_t *x = (cx_t *)bx;
    if (!x || (x->state != XS_NEW && x->state != XS_RUNNING) || !x->want_paused)
        return;
    x->want_paused = false;
    x->last_rx = uv_now(x->up->loop); /* time spent paused never counts as idle */
    if (x->curl_paused) {
        /* libcurl holds a piece for us: hand it over once libcurl is off the stack. */
        enqueue(x->up, x);
        kick(x->up);
    }
}
