/* SPDX-License-Identifier: MIT */
/*
 * tlslisten: the TLS listener of server.tls, between the configuration and the server. It
 * turns the section into a TLS context (for the start and for --check, which must refuse
 * the same files the start would) and reloads the certificate and key of a running
 * listener: new connections get the new context, open ones keep theirs, and a file that
 * does not load leaves the listener as it was.
 */
#ifndef BM_TLSLISTEN_H
#define BM_TLSLISTEN_H

#include <stddef.h>

#include "app/config.h"
#include "http/server.h"
#include "http/tls.h"

/**
 * Loads the certificate, key and client CA that `t` names. Returns a context (the
 * caller's reference), or NULL with a sentence in `why` (the file and the reason).
 */
bm_tls_ctx_t *bm_tlslisten_ctx(const bm_config_server_tls_t *t, char *why, size_t why_len);

/**
 * Re-reads the files that `t` names into a new context for the connections `srv` accepts
 * from now on. Logs the outcome. Returns 0, or BM_ETLS when a file did not load: the
 * listener then keeps the context it had.
 */
int bm_tlslisten_reload(bm_server_t *srv, const bm_config_server_tls_t *t);

#endif /* BM_TLSLISTEN_H */
