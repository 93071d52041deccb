/* SPDX-License-Identifier: MIT */
/*
 * systemd: socket activation and sd_notify over their documented protocols. See systemd.h.
 */
#include "app/systemd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/err.h"

/* A decimal environment variable; false when unset or not a plain number. */
static bool env_u64(const char *name, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-')
        return false;
    *out = n;
    return true;
}

static bool names_us(const char *pid_var)
{
    uint64_t pid;
    return env_u64(pid_var, &pid) && pid == (uint64_t)getpid();
}

int bm_systemd_listen_fds(void)
{
    uint64_t n = 0;
    bool ours = names_us("LISTEN_PID") && env_u64("LISTEN_FDS", &n) && n > 0 && n < 64;
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    if (!ours)
        return 0;
    for (int fd = BM_SYSTEMD_FIRST_FD; fd < BM_SYSTEMD_FIRST_FD + (int)n; fd++)
        fcntl(fd, F_SETFD, FD_CLOEXEC); /* not inherited by anything we might run */
    return (int)n;
}

static bool local_addr(int fd, struct sockaddr_storage *ss)
{
    socklen_t sl = sizeof *ss;
    return getsockname(fd, (struct sockaddr *)ss, &sl) == 0 &&
           (ss->ss_family == AF_INET || ss->ss_family == AF_INET6);
}

bool bm_systemd_socket_is(int fd, const char *host, uint16_t port)
{
    struct sockaddr_storage ss;
    if (!host || !local_addr(fd, &ss))
        return false;
    bool v6 = ss.ss_family == AF_INET6;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
    if (ntohs(v6 ? s6->sin6_port : s4->sin_port) != port)
        return false;
    if (strcmp(host, "localhost") == 0)
        host = v6 ? "::1" : "127.0.0.1";
    unsigned char want[sizeof(struct in6_addr)];
    if (inet_pton(ss.ss_family, host, want) != 1)
        return false; /* the other family's literal: another address */
    return v6 ? memcmp(want, &s6->sin6_addr, sizeof s6->sin6_addr) == 0
              : memcmp(want, &s4->sin_addr, sizeof s4->sin_addr) == 0;
}

void bm_systemd_socket_name(int fd, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    char host[INET6_ADDRSTRLEN];
    if (!local_addr(fd, &ss)) {
        snprintf(out, cap, "?");
        return;
    }
    bool v6 = ss.ss_family == AF_INET6;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
    inet_ntop(ss.ss_family, v6 ? (const void *)&s6->sin6_addr : (const void *)&s4->sin_addr, host,
              sizeof host);
    snprintf(out, cap, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "",
             ntohs(v6 ? s6->sin6_port : s4->sin_port));
}

int bm_systemd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof sa.sun_path)
        return BM_EINVAL;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* the abstract namespace */
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return BM_EIO;
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, sl);
    close(fd);
    return w == (ssize_t)strlen(state) ? 0 : BM_EIO;
}

uint64_t bm_systemd_watchdog_ms(void)
{
    uint64_t usec;
    if (!env_u64("WATCHDOG_USEC", &usec) || usec == 0)
        return 0;
    if (getenv("WATCHDOG_PID") && !names_us("WATCHDOG_PID"))
        return 0;
    return usec / 1000 ? usec / 1000 : 1;
}
