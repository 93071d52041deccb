/* SPDX-License-Identifier: MIT */
/*
 * config_tls: the key table's `server.tls` section: the TLS listener beside the plain one
 * (docs/operations.md). The rows follow the rules of config_keys.h.
 */
#include "app/config_keys.h"
#include "app/config_rows.h"

// clang-format off
#define T bm_config_server_tls_t
static const bm_cfg_key_t server_tls_keys[] = {
    LISTEN(T, "listen",            listen_host, listen_port, NULL, 0),
    PATH(T,   "certFile",          cert_file),
    PATH(T,   "keyFile",           key_file),
    PATH(T,   "clientCaFile",      client_ca_file),
    BOOL(T,   "requireClientCert", require_client_cert, false),
};
#undef T
// clang-format on

const bm_cfg_section_t bm_cfg_server_tls =
    SECTION_OF(bm_config_server_tls_t, server_tls_keys, NULL);
