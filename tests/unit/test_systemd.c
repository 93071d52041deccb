/* SPDX-License-Identifier: MIT */
/*
 * test_systemd: how a socket systemd passes is matched to a configured listener
 * (bm_systemd_socket_is): by address and port, IPv4 and IPv6, "localhost" as either
 * loopback, never across families or ports; and the address it is named by in the log.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app/systemd.h"

/* A listening socket on `host` (a literal of `family`) and a port the system picks; -1 when
 * the family is not available here. */
static int bound(int family, const char *host, uint16_t *port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, host, &s4->sin_addr);
        sl = sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, host, &s6->sin6_addr);
        sl = sizeof *s6;
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

static void test_ipv4(void **state)
{
    (void)state;
    uint16_t port;
    int fd = bound(AF_INET, "127.0.0.1", &port);
    assert_true(fd >= 0);
    assert_true(bm_systemd_socket_is(fd, "127.0.0.1", port));
    assert_true(bm_systemd_socket_is(fd, "localhost", port));
    assert_false(bm_systemd_socket_is(fd, "127.0.0.1", (uint16_t)(port + 1)));
    assert_false(bm_systemd_socket_is(fd, "127.0.0.2", port));
    assert_false(bm_systemd_socket_is(fd, "0.0.0.0", port)); /* another address */
    assert_false(bm_systemd_socket_is(fd, "::1", port));     /* another family */
    assert_false(bm_systemd_socket_is(fd, "example.com", port));
    assert_false(bm_systemd_socket_is(fd, NULL, port));
    char name[80], want[80];
    bm_systemd_socket_name(fd, name, sizeof name);
    snprintf(want, sizeof want, "127.0.0.1:%u", port);
    assert_string_equal(name, want);
    close(fd);
    assert_false(bm_systemd_socket_is(fd, "127.0.0.1", port)); /* not a socket any more */
    bm_systemd_socket_name(fd, name, sizeof name);
    assert_string_equal(name, "?");
}

static void test_ipv6(void **state)
{
    (void)state;
    uint16_t port;
    int fd = bound(AF_INET6, "::1", &port);
    if (fd < 0)
        skip(); /* no IPv6 loopback here */
    assert_true(bm_systemd_socket_is(fd, "::1", port));
    assert_true(bm_systemd_socket_is(fd, "0:0::1", port)); /* the same address, spelt otherwise */
    assert_true(bm_systemd_socket_is(fd, "localhost", port));
    assert_false(bm_systemd_socket_is(fd, "127.0.0.1", port));
    assert_false(bm_systemd_socket_is(fd, "::", port));
    char name[80], want[80];
    bm_systemd_socket_name(fd, name, sizeof name);
    snprintf(want, sizeof want, "[::1]:%u", port);
    assert_string_equal(name, want);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4),
        cmocka_unit_test(test_ipv6),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
