/* SPDX-License-Identifier: MIT */
/*
 * server_hello: the throughput check of the server module. Answers every request with
 * the same 100-byte JSON body (one shared buffer, written without copies) so that wrk
 * measures the server's own cost per request: parsing, dispatch, head building and the
 * write. Not part of the CMake build; bench/server/run.sh compiles it against the
 * release bmcore and runs wrk against it, pinned to separate cores.
 *
 *   server_hello [port]     (port 0 or absent: an ephemeral port, printed on stdout)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "http/server.h"

static bm_buf_t *body;
static bm_server_t *srv;
static uv_signal_t sig_int, sig_term;

static void handler(bm_req_t *req, void *ud)
{
    (void)ud;
    bm_resp_send(req, 200, "application/json", body, NULL);
}

static void on_done(bm_server_t *s, void *ud)
{
    (void)ud;
    bm_server_free(s);
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_term, NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
    (void)signum;
    uv_signal_stop(&sig_int);
    uv_signal_stop(&sig_term);
    bm_server_shutdown(srv, 1000, on_done, NULL);
    (void)s;
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 0;
    bm_log_setup(BM_LOG_WARN, BM_LOG_TEXT, NULL);
    /* {"data":{"version":"beaconmux/0.1.0","pad":"..."}} padded to exactly 100 bytes */
    char json[101];
    int n = snprintf(json, sizeof json, "{\"data\":{\"version\":\"beaconmux/0.1.0\",\"pad\":\"");
    while (n < 100 - 3)
        json[n++] = 'x';
    memcpy(json + n, "\"}}", 3);
    body = bm_buf_copy(json, 100);

    uv_loop_t loop;
    uv_loop_init(&loop);
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    srv = bm_server_new(&loop, &o, handler, NULL);
    if (!srv || bm_server_listen(srv, "127.0.0.1", port) != 0)
        return 1;
    printf("%d\n", bm_server_port(srv));
    fflush(stdout);
    uv_signal_init(&loop, &sig_int);
    uv_signal_init(&loop, &sig_term);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_run(&loop, UV_RUN_DEFAULT);
    bm_buf_unref(body);
    return uv_loop_close(&loop) == 0 ? 0 : 2;
}
