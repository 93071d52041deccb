/* SPDX-License-Identifier: MIT */
/*
 * peers: how many connections each client address holds, so that the server can cap them
 * per client (server.maxConnectionsPerClient): one client must not take every connection
 * the process may have. A small hash table from the address (as text, "127.0.0.1" or
 * "::1", what the server shows in logs) to a count; an address leaves the table when its
 * last connection closes, so the table holds the clients connected now and nothing more.
 *
 * Decisions without I/O: no loop, no clock, no socket; the server calls it at accept and at
 * close.
 */
#ifndef BM_PEERS_H
#define BM_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bm_peers bm_peers_t;

/** An empty table. NULL on allocation failure. */
bm_peers_t *bm_peers_new(void);

/** Frees the table (NULL is ignored). */
void bm_peers_free(bm_peers_t *p);

/**
 * Counts one more connection of `addr` (copied), unless it holds `cap` of them already (0:
 * no cap). True when counted: the caller must bm_peers_release it once. False when the cap
 * is reached, or when memory for a new address ran out (then the connection is refused too:
 * an uncounted connection could never be released).
 */
bool bm_peers_take(bm_peers_t *p, const char *addr, uint32_t cap);

/** Forgets one connection of `addr` that bm_peers_take counted. */
void bm_peers_release(bm_peers_t *p, const char *addr);

/** Connections `addr` holds now. */
uint32_t bm_peers_count(const bm_peers_t *p, const char *addr);

/** Addresses holding at least one connection. */
size_t bm_peers_clients(const bm_peers_t *p);

#endif /* BM_PEERS_H */
