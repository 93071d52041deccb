/* SPDX-License-Identifier: MIT */
/*
 * systemd: the two documented protocols beaconmux speaks with its service manager,
 * without libsystemd (they are a few lines each, and the binary then runs the same with
 * or without systemd):
 *
 * - socket activation: systemd binds the listening sockets (beaconmux.socket) and passes
 *   them as fds 3, 4, ... with LISTEN_PID (our pid) and LISTEN_FDS (how many). The sockets
 *   outlive beaconmux: during a restart, connections wait in their backlog instead of being
 *   refused. app/main.c gives each to the listener whose address it is bound to.
 * - notification: datagrams such as "READY=1" to the AF_UNIX socket named by NOTIFY_SOCKET
 *   (a path, or an abstract name written with a leading '@'); WATCHDOG_USEC asks for a
 *   "WATCHDOG=1" at least that often, else systemd restarts the service.
 *
 * Outside systemd the variables are absent and every call is a no-op.
 */
#ifndef BM_SYSTEMD_H
#define BM_SYSTEMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** The first socket systemd passes. */
#define BM_SYSTEMD_FIRST_FD 3

/**
 * How many listening sockets systemd passed to this process (fds 3, 4, ...), 0 when none
 * (no LISTEN_FDS, or LISTEN_PID names another process). Unsets LISTEN_PID, LISTEN_FDS and
 * LISTEN_FDNAMES so that nothing started later takes them for its own.
 */
int bm_systemd_listen_fds(void);

/**
 * Whether socket `fd` is bound to `host` (an IPv4 or IPv6 literal, or "localhost", which
 * is 127.0.0.1 or ::1) and `port`: how a socket systemd passed is matched to the listener
 * of the configuration it serves. False when `fd` is not a bound IP socket.
 */
bool bm_systemd_socket_is(int fd, const char *host, uint16_t port);

/** The local address of socket `fd` as "127.0.0.1:5555" or "[::1]:5555" in `out` (for
 *  logs; "?" when unknown). */
void bm_systemd_socket_name(int fd, char *out, size_t cap);

/**
 * Sends `state` (e.g. "READY=1\nSTATUS=serving") to NOTIFY_SOCKET. Returns 0 when sent or
 * when there is no NOTIFY_SOCKET, BM_EINVAL for an unusable address, BM_EIO when sending
 * failed.
 */
int bm_systemd_notify(const char *state);

/** The watchdog interval systemd asks for (WATCHDOG_USEC, when WATCHDOG_PID is unset or
 *  ours), in milliseconds; 0 when none. */
uint64_t bm_systemd_watchdog_ms(void);

#endif /* BM_SYSTEMD_H */
