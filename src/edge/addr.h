/* SPDX-License-Identifier: MIT */
/*
 * addr: client addresses. CIDR lists (trustedProxies, server.allowedClients), the address a
 * request is from when it came through trusted proxies (X-Forwarded-For), and whether a
 * listen host is loopback (secure by default). Pure.
 */
#ifndef BM_ADDR_H
#define BM_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One CIDR block ("10.0.0.0/8", "::1/128"; a bare address is /32 or /128). */
typedef struct bm_cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    unsigned bits;
} bm_cidr_t;

/** Parses `s`. Returns 0 or BM_EINVAL. */
int bm_cidr_parse(const char *s, bm_cidr_t *out);

/** Why `s` is not a CIDR block, or NULL (for the configuration's checks). */
const char *bm_cidr_problem(const char *s);

/** Whether the address text `addr` (IPv4, IPv6, IPv4-mapped IPv6) is in one of list[0..n). */
bool bm_cidr_match(const bm_cidr_t *list, size_t n, const char *addr);

/**
 * The client's address: `peer` unless it is a trusted proxy, then walking the
 * X-Forwarded-For list (`xff`, may be NULL) from the right past trusted proxies; the first
 * address that is not trusted is the client (a malformed one ends the walk at the last
 * trusted hop). Copies it into out[0..cap) and returns out.
 */
const char *bm_client_addr(const char *peer, const char *xff, const bm_cidr_t *trusted,
                           size_t n_trusted, char *out, size_t cap);

/** Whether a listen host (an IP literal or "localhost") is a loopback address. */
bool bm_host_is_loopback(const char *host);

#endif /* BM_ADDR_H */
