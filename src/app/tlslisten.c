/* SPDX-License-Identifier: MIT */
/*
 * tlslisten: server.tls to a TLS context, and the reload of a running TLS listener. See
 * tlslisten.h.
 */
#include "app/tlslisten.h"

#include "base/err.h"
#include "base/log.h"

bm_tls_ctx_t *bm_tlslisten_ctx(const bm_config_server_tls_t *t, char *why, size_t why_len)
{
    bm_tls_files_t f = {.cert_file = t->cert_file,
                        .key_file = t->key_file,
                        .client_ca_file = t->client_ca_file,
                        .require_client_cert = t->require_client_cert};
    return bm_tls_ctx_new(&f, why, why_len);
}

int bm_tlslisten_reload(bm_server_t *srv, const bm_config_server_tls_t *t)
{
    char why[512];
    bm_tls_ctx_t *ctx = bm_tlslisten_ctx(t, why, sizeof why);
    if (!ctx) {
        bm_log(BM_LOG_ERROR, "server.tls: reload failed, keeping the current certificate: %s", why);
        return BM_ETLS;
    }
    bm_server_set_tls(srv, ctx);
    bm_tls_ctx_unref(ctx);
    bm_log(BM_LOG_INFO, "server.tls: reloaded %s and %s for new connections", t->cert_file,
           t->key_file);
    return 0;
}
