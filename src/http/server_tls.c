/* SPDX-License-Identifier: MIT */
/*
 * server_tls: the part of the HTTP server that runs a connection through its TLS session
 * (http/tls) on a listener given a context (bm_server_set_tls). Everything above the bytes
 * (parsing, limits, timeouts, handlers, the output queue) is the code plain connections
 * run; only the two ends change.
 *
 * Reading: server.c reads the socket into one server-wide buffer and hands the bytes here;
 * they go into the session, and bm_srv_tls_pump decrypts into the connection's input
 * buffer (or straight into a request body) exactly as a plain read would have filled it.
 * Plaintext that does not fit stays in the session: conn_process pumps again once the
 * input was consumed.
 *
 * Writing: bm_srv_tls_send encrypts the front of the output queue, up to TLS_BATCH bytes,
 * and writes the records; the next batch is encrypted only once those are out, so that a
 * slow reader's bytes wait in the queue, where the high-water mark and the send timeout
 * see them, and never pile up encrypted. Small segments (a head, a small body) are joined
 * into one record.
 *
 * Handshake failures are logged with OpenSSL's reason on a limiter of their own: scanners
 * and plain-HTTP clients on the TLS port make many, and they must not crowd out the
 * server's other warnings.
 */
#include <string.h>

#include "base/err.h"
#include "http/server_int.h"

void bm_server_set_tls(bm_server_t *srv, bm_tls_ctx_t *ctx)
{
    bm_tls_ctx_t *old = srv->tls;
    srv->tls = ctx ? bm_tls_ctx_ref(ctx) : NULL;
    bm_tls_ctx_unref(old);
}

/* ---- reading ------------------------------------------------------------------------- */

/* A handshake or record failed: the client learns why from the alert, we from the log. */
static void tls_fail(conn_t *c)
{
    bool ready = bm_tls_conn_ready(c->tls);
    bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN, "server: TLS %s %s failed: %s",
                   ready ? "session with" : "handshake with", c->peer, bm_tls_conn_error(c->tls));
    char alert[256];
    size_t n = bm_tls_conn_take(c->tls, alert, sizeof alert);
    if (n > 0) {
        uv_buf_t one = uv_buf_init(alert, (unsigned)n);
        uv_try_write((uv_stream_t *)&c->tcp, &one, 1); /* best effort: we close anyway */
    }
    bm_srv_conn_close(c);
}

void bm_srv_tls_pump(conn_t *c)
{
    if (c->tls_pumping || c->st == CONN_CLOSED)
        return;
    c->tls_pumping = true;
    bm_srv_conn_hold(c);
    while (c->st != CONN_CLOSED && c->st != CONN_LINGER && !c->peer_eof && bm_srv_input_room(c)) {
        uv_buf_t buf;
        c->alloc_direct = false;
        bm_srv_input_alloc(c, &buf);
        bool direct = c->alloc_direct;
        c->alloc_direct = false;
        if (!buf.base || buf.len == 0) {
            bm_srv_conn_close(c);
            break;
        }
        ssize_t n = bm_tls_conn_read(c->tls, buf.base, buf.len);
        if (n > 0) {
            bm_srv_conn_input(c, n, &buf, direct);
        } else if (n == 0) {
            bm_srv_conn_release_input(c); /* more ciphertext needed */
            break;
        } else if (n == BM_ECLOSED) {
            bm_srv_conn_input(c, UV_EOF, &buf, false); /* close_notify: the client's end */
            break;
        } else {
            tls_fail(c);
            break;
        }
    }
    c->tls_pumping = false;
    /* handshake messages, tickets */
    if (c->st != CONN_CLOSED && bm_tls_conn_out_len(c->tls) > 0)
        bm_srv_conn_flush(c);
    bm_srv_conn_unref(c);
}

void bm_srv_tls_received(conn_t *c, const char *p, size_t n)
{
    if (bm_tls_conn_feed(c->tls, p, n) != 0)
        bm_srv_conn_close(c);
    else
        bm_srv_tls_pump(c);
}

/* ---- writing ------------------------------------------------------------------------- */

/* Encrypts up to TLS_BATCH bytes from the front of the queue; small segments are joined
 * so that a head and a small body make one record. False when the session failed. */
static bool tls_encrypt(conn_t *c)
{
    char stage[TLS_STAGE];
    size_t staged = 0, done = 0;
    while (c->qhead < c->qtail && done < TLS_BATCH) {
        seg_t *s = &c->q[c->qhead];
        size_t k = s->len < TLS_BATCH - done ? s->len : TLS_BATCH - done;
        const char *p = s->b->data + s->off;
        if (k <= TLS_STAGE - staged) {
            memcpy(stage + staged, p, k);
            staged += k;
        } else {
            if ((staged && bm_tls_conn_write(c->tls, stage, staged) != 0) ||
                bm_tls_conn_write(c->tls, p, k) != 0)
                return false;
            staged = 0;
        }
        bm_srv_q_consume(c, k);
        done += k;
    }
    return !staged || bm_tls_conn_write(c->tls, stage, staged) == 0;
}

bool bm_srv_tls_send(conn_t *c)
{
    for (;;) {
        if (bm_tls_conn_out_len(c->tls) == 0 && c->qhead < c->qtail && bm_tls_conn_ready(c->tls) &&
            !tls_encrypt(c)) {
            bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN, "server: TLS to %s failed: %s",
                           c->peer, bm_tls_conn_error(c->tls));
            bm_srv_conn_close(c);
            return false;
        }
        size_t n = bm_tls_conn_out_len(c->tls);
        if (n == 0)
            return true;
        bm_buf_t *b = bm_buf_new(n);
        if (!b) {
            bm_srv_conn_close(c);
            return false;
        }
        b->len = bm_tls_conn_take(c->tls, b->data, n);
        uv_buf_t one = uv_buf_init(b->data, (unsigned)b->len);
        int rc = uv_try_write((uv_stream_t *)&c->tcp, &one, 1);
        if (rc == UV_EAGAIN || rc == UV_ENOSYS)
            rc = 0;
        if (rc >= 0 && (size_t)rc < b->len) {
            one = uv_buf_init(b->data + rc, (unsigned)(b->len - (size_t)rc));
            c->wreq.data = c;
            rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &one, 1, bm_srv_on_write);
            if (rc == 0) {
                c->tls_wbuf = b; /* the plaintext left the queue when it was encrypted */
                c->writing = true;
                c->wbytes = 0;
                return true;
            }
        }
        bm_buf_unref(b);
        if (rc < 0) {
            bm_srv_conn_close(c);
            return false;
        }
    }
}

bool bm_srv_tls_close_notify(conn_t *c)
{
    /* A TLS client knows the answer is complete from the close_notify before the FIN. */
    bm_tls_conn_close_notify(c->tls);
    if (bm_tls_conn_out_len(c->tls) == 0)
        return false;
    bm_srv_conn_flush(c); /* comes back to the shutdown once it is written */
    return true;
}
