/* SPDX-License-Identifier: MIT */
/*
 * test_tls: TLS on the listener.
 *
 * First the session module alone (http/tls): a client SSL object and a bm_tls_conn_t
 * exchange bytes through memory, no socket and no loop, with certificates made here with
 * the OpenSSL API (so the test needs no openssl command): the policy (TLS 1.3 and 1.2
 * accepted, 1.1 refused, ALPN http/1.1, resumption by ticket), client certificates, and
 * files that do not load.
 *
 * Then the listener (bm_server with a context) on a real loopback socket, its client in a
 * second thread with blocking sockets, as test_server does: keep-alive and pipelined
 * requests, a 4 MiB answer (the encrypted output written in batches), and the reload
 * (app/tlslisten) that the SIGHUP handler calls: a new certificate for new connections, an
 * open connection kept on its own, a key that does not match refused with the old context
 * kept.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "app/tlslisten.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "client_thread.h"
#include "http/server.h"
#include "http/tls.h"
#include "loop_guard.h"

#define BOUND_MS 10000
#define BIG_BYTES (4u << 20)

static char dir[64];

static const char *path_of(const char *name)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

/* A self-signed P-256 certificate for `cn`, written as name.crt and name.key. */
static void make_cert(const char *name, const char *cn)
{
    static long serial = 1;
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    assert_non_null(pk);
    assert_non_null(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, pk);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, n);
    assert_true(X509_sign(x, pk, EVP_sha256()) > 0);
    char f[64];
    snprintf(f, sizeof f, "%s.crt", name);
    FILE *out = fopen(path_of(f), "w");
    assert_non_null(out);
    PEM_write_X509(out, x);
    fclose(out);
    snprintf(f, sizeof f, "%s.key", name);
    out = fopen(path_of(f), "w");
    assert_non_null(out);
    PEM_write_PrivateKey(out, pk, NULL, NULL, 0, NULL, NULL);
    fclose(out);
    X509_free(x);
    EVP_PKEY_free(pk);
}

static int setup_files(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bm-test-tls-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    make_cert("a", "server A");
    make_cert("b", "server B");
    make_cert("client", "validator client");
    FILE *f = fopen(path_of("junk.pem"), "w");
    fputs("not a certificate\n", f);
    fclose(f);
    return 0;
}

static int teardown_files(void **state)
{
    (void)state;
    const char *names[] = {"a.crt",      "a.key",      "b.crt",   "b.key",
                           "client.crt", "client.key", "junk.pem"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(path_of(names[i]));
    rmdir(dir);
    return 0;
}

static bm_tls_ctx_t *ctx_of(const char *crt, const char *key, const char *ca, bool require,
                            char *why, size_t n)
{
    bm_tls_files_t f = {path_of(crt), path_of(key), ca ? path_of(ca) : NULL, require};
    return bm_tls_ctx_new(&f, why, n);
}

/* The context of certificate a (no client certificates), which must load. */
static bm_tls_ctx_t *ctx_a(void)
{
    char why[256];
    bm_tls_ctx_t *ctx = ctx_of("a.crt", "a.key", NULL, false, why, sizeof why);
    if (ctx == NULL)
        fail_msg("a.crt: %s", why);
    return ctx;
}

/* ---- the session module through memory ---------------------------------------------- */

typedef struct pair {
    SSL_CTX *cctx;
    SSL *cli;
    BIO *to_cli, *from_cli; /* the client's read and write buffers */
    bm_tls_conn_t *srv;
    char got[4096]; /* plaintext the server read */
    size_t got_len;
    int srv_rc; /* the last failure of bm_tls_conn_read, or 0 */
} pair_t;

static SSL_CTX *client_ctx(int min, int max, const char *alpn, bool with_cert)
{
    SSL_CTX *c = SSL_CTX_new(TLS_client_method());
    assert_non_null(c);
    if (min < TLS1_2_VERSION)
        SSL_CTX_set_security_level(c, 0); /* let the client offer what the server must refuse */
    SSL_CTX_set_min_proto_version(c, min);
    SSL_CTX_set_max_proto_version(c, max);
    if (alpn)
        SSL_CTX_set_alpn_protos(c, (const unsigned char *)alpn, (unsigned)strlen(alpn));
    if (with_cert) {
        assert_int_equal(SSL_CTX_use_certificate_file(c, path_of("client.crt"), SSL_FILETYPE_PEM),
                         1);
        assert_int_equal(SSL_CTX_use_PrivateKey_file(c, path_of("client.key"), SSL_FILETYPE_PEM),
                         1);
    }
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT);
    return c;
}

static void pair_open(pair_t *p, bm_tls_ctx_t *sctx, SSL_CTX *cctx, SSL_SESSION *resume)
{
    memset(p, 0, sizeof *p);
    p->cctx = cctx;
    p->cli = SSL_new(cctx);
    p->to_cli = BIO_new(BIO_s_mem());
    p->from_cli = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(p->to_cli, -1);
    SSL_set_bio(p->cli, p->to_cli, p->from_cli);
    SSL_set_connect_state(p->cli);
    if (resume)
        SSL_set_session(p->cli, resume);
    p->srv = bm_tls_conn_new(sctx);
    assert_non_null(p->srv);
}

static void pair_close(pair_t *p)
{
    /* as if closed cleanly: OpenSSL spoils the client's session of a session cut short */
    SSL_set_shutdown(p->cli, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(p->cli);
    bm_tls_conn_free(p->srv);
    ERR_clear_error();
}

/* Moves bytes both ways until neither side has anything to say. The client reads what
 * arrives (handshake, tickets, the server's plaintext, which is dropped here). */
static void pump(pair_t *p)
{
    char buf[16384];
    for (int round = 0; round < 32; round++) {
        bool moved = false;
        if (!SSL_is_init_finished(p->cli))
            SSL_do_handshake(p->cli);
        else
            while (SSL_read(p->cli, buf, sizeof buf) > 0)
                ;
        int n;
        while ((n = BIO_read(p->from_cli, buf, sizeof buf)) > 0) {
            assert_int_equal(bm_tls_conn_feed(p->srv, buf, (size_t)n), 0);
            moved = true;
        }
        for (;;) {
            ssize_t r =
                bm_tls_conn_read(p->srv, p->got + p->got_len, sizeof p->got - p->got_len - 1);
            if (r <= 0) {
                if (r < 0)
                    p->srv_rc = (int)r;
                break;
            }
            p->got_len += (size_t)r;
        }
        size_t k;
        while ((k = bm_tls_conn_take(p->srv, buf, sizeof buf)) > 0) {
            BIO_write(p->to_cli, buf, (int)k);
            moved = true;
        }
        if (!moved)
            return;
    }
}

static void test_files_that_do_not_load(void **state)
{
    (void)state;
    char why[512];
    assert_null(ctx_of("missing.crt", "a.key", NULL, false, why, sizeof why));
    assert_non_null(strstr(why, "missing.crt"));
    assert_non_null(strstr(why, "No such file"));
    assert_null(ctx_of("junk.pem", "a.key", NULL, false, why, sizeof why));
    assert_non_null(strstr(why, "not a usable PEM certificate"));
    assert_null(ctx_of("a.crt", "junk.pem", NULL, false, why, sizeof why));
    assert_non_null(strstr(why, "not a usable PEM private key"));
    assert_null(ctx_of("a.crt", "b.key", NULL, false, why, sizeof why));
    assert_non_null(strstr(why, "does not belong to the certificate"));
    assert_null(ctx_of("a.crt", "a.key", NULL, true, why, sizeof why));
    assert_non_null(strstr(why, "requireClientCert needs clientCaFile"));
    assert_null(ctx_of("a.crt", "a.key", "junk.pem", false, why, sizeof why));
    assert_non_null(strstr(why, "clientCaFile"));
    bm_tls_ctx_t *ok = ctx_of("a.crt", "a.key", NULL, false, why, sizeof why);
    assert_non_null(ok);
    assert_string_equal(why, "");
    bm_tls_ctx_unref(ok);
}

static void test_handshake_alpn_and_data(void **state)
{
    (void)state;
    bm_tls_ctx_t *ctx = ctx_a();
    int versions[] = {TLS1_3_VERSION, TLS1_2_VERSION};
    for (size_t i = 0; i < 2; i++) {
        pair_t p;
        pair_open(&p, ctx, client_ctx(versions[i], versions[i], "\x02h2\x08http/1.1", false), NULL);
        pump(&p);
        assert_true(bm_tls_conn_ready(p.srv));
        assert_string_equal(bm_tls_conn_version(p.srv), i == 0 ? "TLSv1.3" : "TLSv1.2");
        const unsigned char *proto;
        unsigned len;
        SSL_get0_alpn_selected(p.cli, &proto, &len);
        assert_int_equal(len, 8);
        assert_memory_equal(proto, "http/1.1", 8);
        /* plaintext both ways */
        assert_int_equal(SSL_write(p.cli, "GET / HTTP/1.1\r\n\r\n", 18), 18);
        pump(&p);
        assert_int_equal(p.got_len, 18);
        assert_memory_equal(p.got, "GET / HTTP/1.1\r\n\r\n", 18);
        assert_int_equal(bm_tls_conn_write(p.srv, "HTTP/1.1 200 OK\r\n", 17), 0);
        char out[512];
        size_t k = bm_tls_conn_take(p.srv, out, sizeof out);
        BIO_write(p.to_cli, out, (int)k);
        char back[64];
        assert_int_equal(SSL_read(p.cli, back, sizeof back), 17);
        assert_memory_equal(back, "HTTP/1.1 200 OK\r\n", 17);
        /* the client's close_notify is the end of the stream */
        SSL_shutdown(p.cli);
        pump(&p);
        assert_int_equal(p.srv_rc, BM_ECLOSED);
        SSL_CTX_free(p.cctx);
        pair_close(&p);
    }
    bm_tls_ctx_unref(ctx);
}

static void test_refused_clients(void **state)
{
    (void)state;
    bm_tls_ctx_t *ctx = ctx_a();
    pair_t p;
    /* TLS 1.1 */
    pair_open(&p, ctx, client_ctx(TLS1_1_VERSION, TLS1_1_VERSION, NULL, false), NULL);
    pump(&p);
    assert_int_equal(p.srv_rc, BM_ETLS);
    assert_false(bm_tls_conn_ready(p.srv));
    assert_non_null(strstr(bm_tls_conn_error(p.srv), "protocol"));
    SSL_CTX_free(p.cctx);
    pair_close(&p);
    /* ALPN with h2 only: no_application_protocol */
    pair_open(&p, ctx, client_ctx(TLS1_2_VERSION, TLS1_3_VERSION, "\x02h2", false), NULL);
    pump(&p);
    assert_int_equal(p.srv_rc, BM_ETLS);
    assert_false(SSL_is_init_finished(p.cli));
    SSL_CTX_free(p.cctx);
    pair_close(&p);
    /* a record damaged in transit after the handshake: the session fails, nothing is read */
    pair_open(&p, ctx, client_ctx(TLS1_2_VERSION, TLS1_3_VERSION, NULL, false), NULL);
    pump(&p);
    assert_true(bm_tls_conn_ready(p.srv));
    assert_int_equal(SSL_write(p.cli, "GET / HTTP/1.1\r\n\r\n", 18), 18);
    char rec[256];
    int rn = BIO_read(p.from_cli, rec, sizeof rec);
    assert_true(rn > 20);
    rec[rn - 5] ^= 0x40; /* inside the authentication tag */
    assert_int_equal(bm_tls_conn_feed(p.srv, rec, (size_t)rn), 0);
    char plain[64];
    assert_int_equal(bm_tls_conn_read(p.srv, plain, sizeof plain), BM_ETLS);
    assert_non_null(strstr(bm_tls_conn_error(p.srv), "bad record mac"));
    assert_true(bm_tls_conn_write(p.srv, "x", 1) < 0); /* and stays failed */
    SSL_CTX_free(p.cctx);
    pair_close(&p);
    /* garbage */
    pair_open(&p, ctx, client_ctx(TLS1_2_VERSION, TLS1_3_VERSION, NULL, false), NULL);
    assert_int_equal(bm_tls_conn_feed(p.srv, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 0);
    char buf[64];
    assert_int_equal(bm_tls_conn_read(p.srv, buf, sizeof buf), BM_ETLS);
    assert_string_not_equal(bm_tls_conn_error(p.srv), "");
    SSL_CTX_free(p.cctx);
    pair_close(&p);
    bm_tls_ctx_unref(ctx);
}

static void test_client_certificates(void **state)
{
    (void)state;
    char why[256];
    /* the client certificate is self-signed: it is its own CA */
    bm_tls_ctx_t *req = ctx_of("a.crt", "a.key", "client.crt", true, why, sizeof why);
    bm_tls_ctx_t *opt = ctx_of("a.crt", "a.key", "client.crt", false, why, sizeof why);
    assert_non_null(req);
    assert_non_null(opt);
    struct {
        bm_tls_ctx_t *ctx;
        bool cert;
        bool ok;
    } cases[] = {{req, true, true}, {req, false, false}, {opt, false, true}, {opt, true, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pair_t p;
        pair_open(&p, cases[i].ctx, client_ctx(TLS1_2_VERSION, TLS1_3_VERSION, NULL, cases[i].cert),
                  NULL);
        pump(&p);
        SSL_write(p.cli, "x", 1); /* in TLS 1.3 the refusal comes after the client's Finished */
        pump(&p);
        if (cases[i].ok) {
            assert_true(bm_tls_conn_ready(p.srv));
            assert_int_equal(p.got_len, 1);
        } else {
            assert_int_equal(p.srv_rc, BM_ETLS);
            assert_int_equal(p.got_len, 0);
            assert_non_null(strstr(bm_tls_conn_error(p.srv), "certificate"));
        }
        SSL_CTX_free(p.cctx);
        pair_close(&p);
    }
    bm_tls_ctx_unref(req);
    bm_tls_ctx_unref(opt);
}

static void test_resumption(void **state)
{
    (void)state;
    bm_tls_ctx_t *ctx = ctx_a();
    int versions[] = {TLS1_3_VERSION, TLS1_2_VERSION};
    for (size_t i = 0; i < 2; i++) {
        SSL_CTX *c = client_ctx(versions[i], versions[i], NULL, false);
        pair_t p;
        pair_open(&p, ctx, c, NULL);
        pump(&p);
        assert_false(bm_tls_conn_resumed(p.srv));
        SSL_SESSION *s = SSL_get1_session(p.cli); /* with the ticket read by pump */
        assert_non_null(s);
        assert_true(SSL_SESSION_is_resumable(s));
        pair_close(&p);
        pair_open(&p, ctx, c, s);
        pump(&p);
        assert_true(bm_tls_conn_ready(p.srv));
        assert_true(bm_tls_conn_resumed(p.srv));
        SSL_SESSION_free(s);
        pair_close(&p);
        /* a ticket of one context is not taken by another (a reload retires them) */
        bm_tls_ctx_t *other = ctx_a();
        pair_open(&p, other, c, NULL);
        pump(&p);
        s = SSL_get1_session(p.cli);
        pair_close(&p);
        pair_open(&p, ctx, c, s);
        pump(&p);
        assert_true(bm_tls_conn_ready(p.srv));
        assert_false(bm_tls_conn_resumed(p.srv));
        SSL_SESSION_free(s);
        pair_close(&p);
        bm_tls_ctx_unref(other);
        SSL_CTX_free(c);
    }
    bm_tls_ctx_unref(ctx);
}

/* ---- the listener on a socket, its client in a thread -------------------------------- */

typedef struct fx {
    uv_loop_t loop;
    bm_server_t *srv;
    int port;
    uv_async_t cmd_async;
    client_thread_t ct;
    bool server_done;
    const char *cmd; /* the client asks the loop: "reload-b", "reload-bad" */
    int cmd_rc;
    bm_buf_t *big;
} fx_t;

#define CHECK(f, cond) CT_CHECK(&(f)->ct, cond)

static void handler(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    if (strcmp(bm_req_path(req, NULL), "/big") == 0)
        bm_resp_send(req, 200, "application/octet-stream", f->big, NULL);
    else
        bm_resp_send(req, 200, "text/plain", NULL, NULL);
}

/* The loop side of a client's command: the reload SIGHUP would run. */
static void on_cmd(uv_async_t *a)
{
    fx_t *f = a->data;
    bm_config_server_tls_t t = {.cert_file = (char *)path_of("b.crt"),
                                .key_file = (char *)path_of("b.key")};
    if (strcmp(f->cmd, "reload-bad") == 0)
        t.key_file = (char *)path_of("a.key");
    f->cmd_rc = bm_tlslisten_reload(f->srv, &t);
    sem_post(&f->ct.sem);
}

/* Client side: asks the loop to run a command and waits for it, bounded. */
static bool ask(fx_t *f, const char *cmd)
{
    f->cmd = cmd;
    uv_async_send(&f->cmd_async);
    return ct_wait(&f->ct, BOUND_MS);
}

typedef struct tconn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
} tconn_t;

static bool tc_open(tconn_t *c, int port)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {BOUND_MS / 1000, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return false;
    c->ctx = SSL_CTX_new(TLS_client_method());
    c->ssl = SSL_new(c->ctx);
    SSL_set_fd(c->ssl, c->fd);
    return SSL_connect(c->ssl) == 1;
}

static void tc_close(tconn_t *c)
{
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
    close(c->fd);
    ERR_clear_error();
}

/* The common name of the server's certificate on this connection. */
static const char *tc_peer(tconn_t *c, char *buf, size_t n)
{
    X509 *x = SSL_get1_peer_certificate(c->ssl);
    buf[0] = '\0';
    if (x) {
        X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, (int)n);
        X509_free(x);
    }
    return buf;
}

/* Reads one response with a Content-Length; returns its status, the body length in *len and
 * whether every body byte was (i & 0xff). */
static int tc_response(tconn_t *c, size_t *len, bool *pattern_ok)
{
    static char head[4096];
    size_t h = 0;
    while (h < 4 || memcmp(head + h - 4, "\r\n\r\n", 4) != 0) {
        if (h == sizeof head || SSL_read(c->ssl, head + h, 1) != 1)
            return -1;
        h++;
    }
    head[h] = '\0';
    const char *cl = strcasestr(head, "content-length:");
    size_t want = cl ? strtoul(cl + 15, NULL, 10) : 0, got = 0;
    *pattern_ok = true;
    char buf[16384];
    while (got < want) {
        int r = SSL_read(c->ssl, buf, (int)(want - got < sizeof buf ? want - got : sizeof buf));
        if (r <= 0)
            return -1;
        for (int i = 0; i < r; i++)
            if ((unsigned char)buf[i] != ((got + (size_t)i) & 0xff))
                *pattern_ok = false;
        got += (size_t)r;
    }
    *len = got;
    return atoi(head + 9);
}

static bool tc_get(tconn_t *c, const char *path, int *status, size_t *len, bool *ok)
{
    char req[128];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    if (SSL_write(c->ssl, req, n) != n)
        return false;
    *status = tc_response(c, len, ok);
    return *status > 0;
}

static void client(void *arg)
{
    fx_t *f = arg;
    tconn_t c1, c2, c3;
    char cn[64];
    int st;
    size_t len;
    bool ok;
    CHECK(f, tc_open(&c1, f->port));
    CHECK(f, strcmp(tc_peer(&c1, cn, sizeof cn), "server A") == 0);
    CHECK(f, strcmp(SSL_get_version(c1.ssl), "TLSv1.3") == 0);
    CHECK(f, tc_get(&c1, "/small", &st, &len, &ok) && st == 200 && len == 0);
    /* a large answer, then two pipelined requests in one write, on the same connection */
    CHECK(f, tc_get(&c1, "/big", &st, &len, &ok) && st == 200 && len == BIG_BYTES && ok);
    const char two[] = "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /big HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(f, SSL_write(c1.ssl, two, (int)sizeof two - 1) == (int)sizeof two - 1);
    CHECK(f, tc_response(&c1, &len, &ok) == 200 && len == 0);
    CHECK(f, tc_response(&c1, &len, &ok) == 200 && len == BIG_BYTES && ok);
    /* reload: new connections get B, the open one goes on */
    CHECK(f, ask(f, "reload-b") && f->cmd_rc == 0);
    CHECK(f, tc_get(&c1, "/after", &st, &len, &ok) && st == 200);
    CHECK(f, tc_open(&c2, f->port));
    CHECK(f, strcmp(tc_peer(&c2, cn, sizeof cn), "server B") == 0);
    CHECK(f, tc_get(&c2, "/b", &st, &len, &ok) && st == 200);
    /* a key that does not belong to the certificate: refused, B stays */
    CHECK(f, ask(f, "reload-bad") && f->cmd_rc == BM_ETLS);
    CHECK(f, tc_open(&c3, f->port));
    CHECK(f, strcmp(tc_peer(&c3, cn, sizeof cn), "server B") == 0);
    CHECK(f, tc_get(&c3, "/b", &st, &len, &ok) && st == 200);
    CHECK(f, tc_get(&c1, "/still-a", &st, &len, &ok) && st == 200);
    CHECK(f, strcmp(tc_peer(&c1, cn, sizeof cn), "server A") == 0);
    /* Connection: close ends with the server's close_notify: a clean end, not a cut */
    const char bye[] = "GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(f, SSL_write(c3.ssl, bye, (int)sizeof bye - 1) == (int)sizeof bye - 1);
    CHECK(f, tc_response(&c3, &len, &ok) == 200);
    char rest[16];
    int r = SSL_read(c3.ssl, rest, sizeof rest);
    CHECK(f, r <= 0 && SSL_get_error(c3.ssl, r) == SSL_ERROR_ZERO_RETURN);
    tc_close(&c1);
    tc_close(&c2);
    tc_close(&c3);
}

static void on_shutdown_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    ((fx_t *)ud)->server_done = true;
}

static void test_listener_and_reload(void **state)
{
    (void)state;
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->big = bm_buf_new(BIG_BYTES);
    for (size_t i = 0; i < BIG_BYTES; i++)
        f->big->data[i] = (char)(i & 0xff);
    f->big->len = BIG_BYTES;
    f->srv = bm_server_new(&f->loop, NULL, handler, f);
    char why[256];
    bm_tls_ctx_t *a = ctx_of("a.crt", "a.key", NULL, false, why, sizeof why);
    assert_non_null(a);
    bm_server_set_tls(f->srv, a);
    bm_tls_ctx_unref(a); /* the server holds its own reference */
    assert_int_equal(bm_server_listen(f->srv, "127.0.0.1", 0), 0);
    f->port = bm_server_port(f->srv);
    uv_async_init(&f->loop, &f->cmd_async, on_cmd);
    f->cmd_async.data = f;
    ct_start(&f->ct, &f->loop, client, f);
    RUN_UNTIL(&f->loop, f->ct.done, BOUND_MS * 3);
    ct_join(&f->ct);
    bm_server_shutdown(f->srv, 0, on_shutdown_done, f);
    RUN_UNTIL(&f->loop, f->server_done, BOUND_MS);
    assert_true(f->server_done);
    bm_server_free(f->srv);
    ct_close(&f->ct);
    uv_close((uv_handle_t *)&f->cmd_async, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    bm_buf_unref(f->big);
    free(f);
}

int main(void)
{
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_that_do_not_load),
        cmocka_unit_test(test_handshake_alpn_and_data),
        cmocka_unit_test(test_refused_clients),
        cmocka_unit_test(test_client_certificates),
        cmocka_unit_test(test_resumption),
        cmocka_unit_test(test_listener_and_reload),
    };
    return cmocka_run_group_tests(tests, setup_files, teardown_files);
}
