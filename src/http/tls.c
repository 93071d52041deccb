/* SPDX-License-Identifier: MIT */
/*
 * tls: OpenSSL behind the listener. See tls.h for the shape.
 *
 * The policy is fixed rather than configurable, because every choice here has one right
 * answer for a validator client talking to its own infrastructure: TLS 1.2 as the floor
 * (1.0 and 1.1 are refused), ECDHE with AES-GCM or ChaCha20-Poly1305 for 1.2 in our order
 * (1.3's suites are all fine), no renegotiation (a client could make the server do
 * handshakes at will), no compression, one resumption ticket per handshake (the ticket
 * keys live in the context, so a reload that builds a new context also retires them).
 *
 * OpenSSL's read and write buffers are released while a connection is idle
 * (SSL_MODE_RELEASE_BUFFERS): a keep-alive client between requests costs little memory.
 */
#include "http/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "base/err.h"
#include "base/log.h"

#define TLS12_CIPHERS "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL"
#define SESSION_CONTEXT "beaconmux"

struct bm_tls_ctx {
    SSL_CTX *ssl;
    int refs;
};

struct bm_tls_conn {
    SSL *ssl;
    BIO *in;  /* bytes from the peer (owned by ssl) */
    BIO *out; /* bytes for the peer (owned by ssl) */
    char why[160];
    bool notified;
};

/* ---- contexts ------------------------------------------------------------------------ */

/* The most recent OpenSSL error as a phrase, and the queue emptied. */
static const char *ssl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (r)
        snprintf(buf, n, "%s", r);
    else if (e)
        snprintf(buf, n, "OpenSSL error %lu", e);
    else
        snprintf(buf, n, "unknown TLS error");
    ERR_clear_error();
    return buf;
}

/* False with a sentence when the file cannot be opened for reading: OpenSSL's own message
 * for that case ("system library") says less than errno does. */
static bool readable(const char *what, const char *path, char *why, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, n, "%s %s: %s", what, path, strerror(errno));
        return false;
    }
    fclose(f);
    return true;
}

/* An encrypted key would make OpenSSL prompt on the terminal: refuse instead. */
static int no_passphrase(char *buf, int size, int rwflag, void *ud)
{
    (void)buf, (void)size, (void)rwflag, (void)ud;
    return 0;
}

/* ALPN: http/1.1 when the client offers it; a client that offers only other protocols is
 * told so (RFC 7301: no_application_protocol); one that offers none goes on without. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *ud)
{
    static const unsigned char ours[] = "\x08http/1.1";
    (void)ssl, (void)ud;
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, ours, sizeof ours - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static bool ctx_policy(SSL_CTX *s)
{
    SSL_CTX_set_options(s, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                               SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(s, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(s, no_passphrase);
    SSL_CTX_set_alpn_select_cb(s, select_alpn, NULL);
    SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_num_tickets(s, 1);
    return SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION) == 1 &&
           SSL_CTX_set_cipher_list(s, TLS12_CIPHERS) == 1 &&
           SSL_CTX_set_session_id_context(s, (const unsigned char *)SESSION_CONTEXT,
                                          sizeof SESSION_CONTEXT - 1) == 1;
}

static bool ctx_identity(SSL_CTX *s, const bm_tls_files_t *f, char *why, size_t n)
{
    char r[120];
    if (!readable("certFile", f->cert_file, why, n) || !readable("keyFile", f->key_file, why, n))
        return false;
    if (SSL_CTX_use_certificate_chain_file(s, f->cert_file) != 1) {
        snprintf(why, n, "certFile %s: not a usable PEM certificate (%s)", f->cert_file,
                 ssl_reason(r, sizeof r));
        return false;
    }
    if (SSL_CTX_use_PrivateKey_file(s, f->key_file, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            snprintf(why, n, "keyFile %s does not belong to the certificate in %s", f->key_file,
                     f->cert_file);
            return false;
        }
        snprintf(why, n, "keyFile %s: not a usable PEM private key, or an encrypted one (%s)",
                 f->key_file, ssl_reason(r, sizeof r));
        return false;
    }
    if (SSL_CTX_check_private_key(s) != 1) {
        snprintf(why, n, "keyFile %s does not belong to the certificate in %s (%s)", f->key_file,
                 f->cert_file, ssl_reason(r, sizeof r));
        return false;
    }
    X509 *cert = SSL_CTX_get0_certificate(s);
    if (cert && X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
        bm_log(BM_LOG_WARN, "tls: the certificate in %s has expired: clients will refuse it",
               f->cert_file);
    return true;
}

static bool ctx_clients(SSL_CTX *s, const bm_tls_files_t *f, char *why, size_t n)
{
    char r[120];
    if (!f->client_ca_file) {
        if (f->require_client_cert) {
            snprintf(why, n, "requireClientCert needs clientCaFile");
            return false;
        }
        return true;
    }
    if (!readable("clientCaFile", f->client_ca_file, why, n))
        return false;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f->client_ca_file);
    if (!names || SSL_CTX_load_verify_locations(s, f->client_ca_file, NULL) != 1) {
        if (names)
            sk_X509_NAME_pop_free(names, X509_NAME_free);
        snprintf(why, n, "clientCaFile %s: no usable PEM certificate (%s)", f->client_ca_file,
                 ssl_reason(r, sizeof r));
        return false;
    }
    SSL_CTX_set_client_CA_list(s, names); /* takes `names` */
    int mode = SSL_VERIFY_PEER | (f->require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
    SSL_CTX_set_verify(s, mode, NULL);
    return true;
}

bm_tls_ctx_t *bm_tls_ctx_new(const bm_tls_files_t *f, char *why, size_t why_len)
{
    snprintf(why, why_len, "out of memory");
    if (!f->cert_file || !f->key_file) {
        snprintf(why, why_len, "certFile and keyFile are both needed");
        return NULL;
    }
    bm_tls_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ERR_clear_error();
    ctx->refs = 1;
    ctx->ssl = SSL_CTX_new(TLS_server_method());
    if (!ctx->ssl || !ctx_policy(ctx->ssl) || !ctx_identity(ctx->ssl, f, why, why_len) ||
        !ctx_clients(ctx->ssl, f, why, why_len)) {
        ERR_clear_error();
        SSL_CTX_free(ctx->ssl);
        free(ctx);
        return NULL;
    }
    why[0] = '\0';
    return ctx;
}

bm_tls_ctx_t *bm_tls_ctx_ref(bm_tls_ctx_t *ctx)
{
    ctx->refs++;
    return ctx;
}

void bm_tls_ctx_unref(bm_tls_ctx_t *ctx)
{
    if (!ctx || --ctx->refs > 0)
        return;
    SSL_CTX_free(ctx->ssl);
    free(ctx);
}

/* ---- connections --------------------------------------------------------------------- */

bm_tls_conn_t *bm_tls_conn_new(bm_tls_ctx_t *ctx)
{
    bm_tls_conn_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ssl = SSL_new(ctx->ssl); /* holds its own reference on the SSL_CTX */
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (!t->ssl || !t->in || !t->out) {
        BIO_free(t->in);
        BIO_free(t->out);
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return NULL;
    }
    /* An empty input buffer means "more to come", not the end of the stream. */
    BIO_set_mem_eof_return(t->in, -1);
    SSL_set_bio(t->ssl, t->in, t->out);
    SSL_set_accept_state(t->ssl);
    return t;
}

void bm_tls_conn_free(bm_tls_conn_t *t)
{
    if (!t)
        return;
    SSL_free(t->ssl); /* frees both BIOs */
    free(t);
}

int bm_tls_conn_feed(bm_tls_conn_t *t, const void *p, size_t n)
{
    while (n > 0) {
        int k = n > (1u << 30) ? 1 << 30 : (int)n;
        int w = BIO_write(t->in, p, k);
        if (w <= 0) {
            ERR_clear_error();
            return BM_ENOMEM;
        }
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t bm_tls_conn_read(bm_tls_conn_t *t, void *buf, size_t n)
{
    ERR_clear_error();
    int k = n > (1u << 30) ? 1 << 30 : (int)n;
    int r = SSL_read(t->ssl, buf, k);
    if (r > 0)
        return r;
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        return BM_ECLOSED;
    default:
        if (!t->why[0]) /* the first reason; a session that failed fails again without one */
            ssl_reason(t->why, sizeof t->why);
        ERR_clear_error();
        return BM_ETLS;
    }
}

bool bm_tls_conn_has_input(const bm_tls_conn_t *t)
{
    return SSL_pending(t->ssl) > 0 || BIO_ctrl_pending(t->in) > 0;
}

bool bm_tls_conn_ready(const bm_tls_conn_t *t)
{
    return SSL_is_init_finished(t->ssl);
}

int bm_tls_conn_write(bm_tls_conn_t *t, const void *p, size_t n)
{
    if (!bm_tls_conn_ready(t))
        return BM_EINVAL;
    while (n > 0) {
        int k = n > (1u << 30) ? 1 << 30 : (int)n;
        ERR_clear_error();
        int w = SSL_write(t->ssl, p, k);
        if (w <= 0) {
            if (!t->why[0])
                ssl_reason(t->why, sizeof t->why);
            ERR_clear_error();
            return BM_ETLS;
        }
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

size_t bm_tls_conn_out_len(const bm_tls_conn_t *t)
{
    return BIO_ctrl_pending(t->out);
}

size_t bm_tls_conn_take(bm_tls_conn_t *t, void *buf, size_t n)
{
    int k = n > (1u << 30) ? 1 << 30 : (int)n;
    int r = BIO_read(t->out, buf, k);
    return r > 0 ? (size_t)r : 0;
}

void bm_tls_conn_close_notify(bm_tls_conn_t *t)
{
    if (t->notified || !bm_tls_conn_ready(t))
        return;
    t->notified = true;
    SSL_shutdown(t->ssl);
    ERR_clear_error();
}

const char *bm_tls_conn_error(const bm_tls_conn_t *t)
{
    return t->why;
}

const char *bm_tls_conn_version(const bm_tls_conn_t *t)
{
    return bm_tls_conn_ready(t) ? SSL_get_version(t->ssl) : "";
}

bool bm_tls_conn_resumed(const bm_tls_conn_t *t)
{
    return SSL_session_reused(t->ssl) == 1;
}
