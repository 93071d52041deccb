/* SPDX-License-Identifier: MIT */
/*
 * addr: CIDR parsing and matching on the bytes inet_pton gives, IPv4-mapped IPv6 peers
 * matched as IPv4.
 */
#include "edge/addr.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Parses an address into family and bytes; an IPv4-mapped IPv6 address becomes IPv4. */
static bool parse_addr(const char *s, size_t n, int *family, uint8_t out[16])
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET, buf, out) == 1) {
        *family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, buf, out) != 1)
        return false;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(out, mapped, 12) == 0) {
        memmove(out, out + 12, 4);
        *family = AF_INET;
    } else {
        *family = AF_INET6;
    }
    return true;
}

int bm_cidr_parse(const char *s, bm_cidr_t *out)
{
    memset(out, 0, sizeof *out);
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (!parse_addr(s, n, &out->family, out->addr))
        return BM_EINVAL;
    unsigned max = out->family == AF_INET ? 32 : 128;
    out->bits = max;
    if (slash) {
        char *end;
        if (!slash[1] || slash[1] == '-' || slash[1] == '+')
            return BM_EINVAL;
        unsigned long b = strtoul(slash + 1, &end, 10);
        if (*end || b > max)
            return BM_EINVAL;
        out->bits = (unsigned)b;
    }
    return 0;
}

const char *bm_cidr_problem(const char *s)
{
    bm_cidr_t c;
    return bm_cidr_parse(s, &c) == 0 ? NULL
                                     : "must be an IP address or a CIDR block (\"10.0.0.0/8\")";
}

static bool in_block(const bm_cidr_t *c, int family, const uint8_t a[16])
{
    if (c->family != family)
        return false;
    unsigned full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, a, full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (c->addr[full] & mask) == (a[full] & mask);
}

static bool match_n(const bm_cidr_t *list, size_t n, const char *addr, size_t len)
{
    int family;
    uint8_t a[16];
    if (!parse_addr(addr, len, &family, a))
        return false;
    for (size_t i = 0; i < n; i++)
        if (in_block(&list[i], family, a))
            return true;
    return false;
}

bool bm_cidr_match(const bm_cidr_t *list, size_t n, const char *addr)
{
    return addr && match_n(list, n, addr, strlen(addr));
}

static void copy_out(char *out, size_t cap, const char *s, size_t n)
{
    if (cap == 0)
        return;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

const char *bm_client_addr(const char *peer, const char *xff, const bm_cidr_t *trusted,
                           size_t n_trusted, char *out, size_t cap)
{
    copy_out(out, cap, peer, strlen(peer));
    if (!xff || n_trusted == 0 || !bm_cidr_match(trusted, n_trusted, peer))
        return out;
    /* from the right: each hop was added by the proxy before it */
    size_t end = strlen(xff);
    while (end > 0) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',')
            start--;
        size_t a = start, b = end;
        while (a < b && (xff[a] == ' ' || xff[a] == '\t'))
            a++;
        while (b > a && (xff[b - 1] == ' ' || xff[b - 1] == '\t'))
            b--;
        int family;
        uint8_t tmp[16];
        if (b == a || !parse_addr(xff + a, b - a, &family, tmp))
            return out; /* malformed: the last trusted hop stands */
        copy_out(out, cap, xff + a, b - a);
        if (!match_n(trusted, n_trusted, xff + a, b - a))
            return out;
        end = start > 0 ? start - 1 : 0;
    }
    return out;
}

bool bm_host_is_loopback(const char *host)
{
    if (strcmp(host, "localhost") == 0)
        return true;
    int family;
    uint8_t a[16];
    if (!parse_addr(host, strlen(host), &family, a))
        return false;
    if (family == AF_INET)
        return a[0] == 127;
    static const uint8_t one[16] = {[15] = 1};
    return memcmp(a, one, 16) == 0;
}
