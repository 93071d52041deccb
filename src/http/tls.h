/* SPDX-License-Identifier: MIT */
/*
 * tls: the server side of TLS on our listener, with OpenSSL, and nothing else of OpenSSL.
 *
 * A context (bm_tls_ctx_t) is one loaded certificate, key and optional client CA with our
 * fixed policy: TLS 1.2 and 1.3 only, forward-secret AEAD suites in the server's order,
 * no renegotiation, ALPN "http/1.1", session resumption by tickets and a server cache.
 * Contexts are reference-counted and immutable once built, so a reload builds a new one
 * and hands it to the listener: new connections use it, open ones keep theirs.
 *
 * A connection (bm_tls_conn_t) is one TLS session over two memory buffers: the caller
 * feeds it the bytes read from the socket, reads plaintext out, writes plaintext in and
 * takes the encrypted bytes to send. No socket, no loop and no clock inside: the HTTP
 * server drives it from its own read and write paths, and a test can pair it with an
 * in-memory client.
 */
#ifndef BM_TLS_H
#define BM_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct bm_tls_ctx bm_tls_ctx_t;
typedef struct bm_tls_conn bm_tls_conn_t;

/** What a context is built from. The strings are borrowed for the call only. */
typedef struct bm_tls_files {
    const char *cert_file;      /* PEM: the certificate, then its intermediates */
    const char *key_file;       /* PEM: its private key (not encrypted) */
    const char *client_ca_file; /* PEM: CAs a client certificate must chain to, or NULL */
    bool require_client_cert;   /* refuse a client without a certificate (needs the CA file) */
} bm_tls_files_t;

/**
 * Loads the files and builds a context (one reference, the caller's). NULL when a file is
 * missing, unreadable or unusable, or the key does not belong to the certificate: `why`
 * then holds a sentence naming the file and the reason.
 */
bm_tls_ctx_t *bm_tls_ctx_new(const bm_tls_files_t *f, char *why, size_t why_len);

/** Takes a reference; returns `ctx`. */
bm_tls_ctx_t *bm_tls_ctx_ref(bm_tls_ctx_t *ctx);

/** Drops a reference (NULL is fine); the context goes with the last one. */
void bm_tls_ctx_unref(bm_tls_ctx_t *ctx);

/**
 * A server-side session on `ctx` (which it keeps alive by itself, so the caller's
 * reference may go at once). NULL on allocation failure.
 */
bm_tls_conn_t *bm_tls_conn_new(bm_tls_ctx_t *ctx);

/** Frees the session (NULL is fine). */
void bm_tls_conn_free(bm_tls_conn_t *t);

/** Takes p[0..n) received from the peer. 0 or BM_ENOMEM. */
int bm_tls_conn_feed(bm_tls_conn_t *t, const void *p, size_t n);

/**
 * Advances the handshake and decrypts into buf[0..n) (n > 0). Returns the number of
 * plaintext bytes (> 0); 0 when more input is needed; BM_ECLOSED when the peer closed
 * the session cleanly (close_notify); BM_ETLS when the handshake or a record failed (the
 * reason is in bm_tls_conn_error; an alert for the peer may be waiting to be sent). Any
 * call may leave bytes to send (handshake messages, tickets, alerts).
 */
ssize_t bm_tls_conn_read(bm_tls_conn_t *t, void *buf, size_t n);

/** True while decrypted or received bytes wait that bm_tls_conn_read can return. */
bool bm_tls_conn_has_input(const bm_tls_conn_t *t);

/** True once the handshake completed. */
bool bm_tls_conn_ready(const bm_tls_conn_t *t);

/**
 * Encrypts p[0..n) (only once ready). Every byte is taken: the records go to the output
 * (bm_tls_conn_take). Returns 0, BM_EINVAL before the handshake, or BM_ETLS.
 */
int bm_tls_conn_write(bm_tls_conn_t *t, const void *p, size_t n);

/** Bytes waiting to be sent to the peer. */
size_t bm_tls_conn_out_len(const bm_tls_conn_t *t);

/** Moves up to n waiting bytes into buf; returns how many. */
size_t bm_tls_conn_take(bm_tls_conn_t *t, void *buf, size_t n);

/** Queues a close_notify alert (once, after the handshake; otherwise nothing). */
void bm_tls_conn_close_notify(bm_tls_conn_t *t);

/** Why the last bm_tls_conn_read failed, in words ("unsupported protocol"); "" if none. */
const char *bm_tls_conn_error(const bm_tls_conn_t *t);

/** The negotiated protocol version ("TLSv1.3") once ready, or "". */
const char *bm_tls_conn_version(const bm_tls_conn_t *t);

/** True when the session was resumed (a ticket or the cache) instead of a full handshake. */
bool bm_tls_conn_resumed(const bm_tls_conn_t *t);

#endif /* BM_TLS_H */
