/* SPDX-License-Identifier: MIT */
/*
 * events_client: the load of bench/events.sh. Opens N subscriptions to beaconmux's
 * cluster event stream and one direct subscription to a beacon node (the fastest), reads
 * them all from one epoll loop, and takes every arrival time from the kernel
 * (SO_TIMESTAMPNS), so the figures are the server's delivery delays and not this
 * client's reading order. One more subscription can be made to stop reading at once
 * (a tiny receive buffer, never read) to show that it is dropped without hurting the
 * others.
 *
 * Output, after --seconds: per head slot seen directly, every subscriber's delay
 * (beaconmux arrival - direct arrival), summarised as p50/p99/max over all (slot,
 * subscriber) pairs; heads missing or duplicated per subscriber; whether the stalled
 * subscriber was cut by the server (its socket reaches EOF once drained).
 *
 * A benchmark tool, not part of beaconmux: plain libc, printf allowed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS 4096
#define BUF 65536

typedef struct conn {
    int fd;
    bool direct;
    char *in; /* undecoded bytes */
    size_t in_len, in_cap;
    bool head_done;
    int status;
    bool chunked;
    char *sse; /* decoded body not yet split into events */
    size_t sse_len, sse_cap;
    double *head_ts; /* per slot (index slot - base), 0 when not seen */
    uint16_t *head_n;
    bool eof;
    uint64_t bytes;
    double up_ts; /* when its response head arrived */
} conn_t;

static uint64_t base_slot = UINT64_MAX;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void append(char **b, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *b = realloc(*b, *cap);
        if (!*b)
            die("realloc");
    }
    memcpy(*b + *len, p, n);
    *len += n;
    (*b)[*len] = '\0';
}

static int connect_to(const char *host, int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("connect");
    return fd;
}

static void send_req(int fd, const char *path, const char *accept)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: %s\r\n\r\n",
                     path, accept);
    if (write(fd, req, (size_t)n) != n)
        die("write");
}

/* One complete SSE event: note head arrivals by slot. */
static void on_event(conn_t *c, const char *ev, size_t len, double ts)
{
    const char *p = ev;
    if (len < 12 || strncmp(p, "event: head\n", 12) != 0)
        if (len < 11 || strncmp(p, "event:head\n", 11) != 0)
            return;
    const char *s = strstr(p, "\"slot\":\"");
    if (!s || s > ev + len)
        return;
    uint64_t slot = strtoull(s + 8, NULL, 10);
    if (base_slot == UINT64_MAX)
        base_slot = slot > 64 ? slot - 64 : 0;
    if (slot < base_slot || slot - base_slot >= MAX_SLOTS)
        return;
    size_t i = (size_t)(slot - base_slot);
    if (!c->head_n[i])
        c->head_ts[i] = ts;
    c->head_n[i]++;
}

static void parse(conn_t *c, double ts)
{
    if (!c->head_done) {
        char *e = strstr(c->in, "\r\n\r\n");
        if (!e)
            return;
        c->head_done = true;
        c->up_ts = ts;
        c->status = atoi(c->in + 9);
        c->chunked = strcasestr(c->in, "transfer-encoding: chunked") != NULL;
        size_t off = (size_t)(e + 4 - c->in);
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
        c->in[c->in_len] = '\0';
    }
    if (c->chunked) {
        size_t pos = 0;
        for (;;) {
            char *crlf = memmem(c->in + pos, c->in_len - pos, "\r\n", 2);
            if (!crlf)
                break;
            size_t size = strtoul(c->in + pos, NULL, 16);
            size_t data = (size_t)(crlf - c->in) + 2;
            if (size == 0) {
                c->eof = true;
                break;
            }
            if (c->in_len < data + size + 2)
                break;
            append(&c->sse, &c->sse_len, &c->sse_cap, c->in + data, size);
            pos = data + size + 2;
        }
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
        c->in[c->in_len] = '\0';
    } else {
        append(&c->sse, &c->sse_len, &c->sse_cap, c->in, c->in_len);
        c->in_len = 0;
    }
    size_t pos = 0;
    for (;;) {
        char *e = memmem(c->sse + pos, c->sse_len - pos, "\n\n", 2);
        if (!e)
            break;
        on_event(c, c->sse + pos, (size_t)(e - c->sse - pos) + 1, ts);
        pos = (size_t)(e - c->sse) + 2;
    }
    memmove(c->sse, c->sse + pos, c->sse_len - pos);
    c->sse_len -= pos;
}

static void on_readable(conn_t *c)
{
    char buf[BUF];
    char ctrl[256];
    for (;;) {
        struct iovec iov = {buf, sizeof buf};
        struct msghdr m = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof ctrl};
        ssize_t n = recvmsg(c->fd, &m, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            c->eof = true;
            return;
        }
        if (n == 0) {
            c->eof = true;
            return;
        }
        double ts = 0;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
            if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec t;
                memcpy(&t, CMSG_DATA(h), sizeof t);
                ts = (double)t.tv_sec + t.tv_nsec / 1e9;
            }
        if (ts == 0)
            ts = now_s();
        c->bytes += (uint64_t)n;
        append(&c->in, &c->in_len, &c->in_cap, buf, (size_t)n);
        parse(c, ts);
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void)
{
    fprintf(stderr, "usage: events_client --mux PORT --node PORT [--n N] [--seconds S] "
                    "[--topics LIST] [--accept VALUE] [--stall]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int mux_port = 0, node_port = 0, n = 1000, seconds = 30;
    bool stall = false;
    const char *accept = "text/event-stream";
    const char *topics = "head,head_v2,block,block_gossip,payload_attributes,finalized_checkpoint";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mux") && i + 1 < argc)
            mux_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--node") && i + 1 < argc)
            node_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--topics") && i + 1 < argc)
            topics = argv[++i];
        else if (!strcmp(argv[i], "--accept") && i + 1 < argc)
            accept = argv[++i];
        else if (!strcmp(argv[i], "--stall"))
            stall = true;
        else
            usage();
    }
    if (!mux_port || !node_port || n < 1)
        usage();
    int ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    conn_t *cs = calloc((size_t)n + 1, sizeof *cs);
    if (!cs)
        die("calloc");
    char path[512];
    /* the direct subscriber first, then the N */
    for (int i = 0; i <= n; i++) {
        conn_t *c = &cs[i];
        c->direct = i == n;
        c->head_ts = calloc(MAX_SLOTS, sizeof *c->head_ts);
        c->head_n = calloc(MAX_SLOTS, sizeof *c->head_n);
        if (!c->head_ts || !c->head_n)
            die("calloc");
    }
    cs[n].fd = connect_to("127.0.0.1", node_port, 0);
    send_req(cs[n].fd, "/eth/v1/events?topics=head", "text/event-stream, */*;q=0.1");
    snprintf(path, sizeof path, "/eth/v1/events?topics=%s", topics);
    for (int i = 0; i < n; i++) {
        cs[i].fd = connect_to("127.0.0.1", mux_port, 0);
        send_req(cs[i].fd, path, accept);
    }
    for (int i = 0; i <= n; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &cs[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &e) != 0)
            die("epoll_ctl");
    }
    int stall_fd = -1;
    if (stall) {
        stall_fd = connect_to("127.0.0.1", mux_port, 2048);
        send_req(stall_fd, path, accept);
    }
    fprintf(stderr, "events_client: %d subscribers%s connected, running %d s\n", n,
            stall ? " + 1 that never reads" : "", seconds);
    double end = now_s() + seconds;
    struct epoll_event evs[256];
    while (now_s() < end) {
        int k = epoll_wait(ep, evs, 256, 100);
        for (int i = 0; i < k; i++) {
            conn_t *c = evs[i].data.ptr;
            on_readable(c);
            if (c->eof)
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        }
    }
    /* results */
    conn_t *d = &cs[n];
    size_t cap = (size_t)n * MAX_SLOTS, nl = 0;
    double *lat = malloc(cap * sizeof *lat);
    uint64_t missing = 0, dup = 0, slots = 0, failed = 0, bad_status = 0;
    if (!lat)
        die("malloc");
    /* count only heads that came after every subscriber was in */
    double all_up = 0;
    for (int i = 0; i < n; i++)
        if (cs[i].up_ts > all_up)
            all_up = cs[i].up_ts;
    /* the last slot may still be on its way: leave it out */
    size_t last = 0;
    for (size_t s = 0; s < MAX_SLOTS; s++)
        if (d->head_n[s])
            last = s;
    for (size_t s = 0; s < last; s++) {
        if (!d->head_n[s] || d->head_ts[s] < all_up + 0.05)
            continue;
        slots++;
        for (int i = 0; i < n; i++) {
            if (!cs[i].head_n[s]) {
                missing++;
                continue;
            }
            if (cs[i].head_n[s] > 1)
                dup += cs[i].head_n[s] - 1u;
            lat[nl++] = (cs[i].head_ts[s] - d->head_ts[s]) * 1000.0;
        }
    }
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (cs[i].eof)
            failed++;
        if (cs[i].status != 200)
            bad_status++;
        bytes += cs[i].bytes;
    }
    qsort(lat, nl, sizeof *lat, cmp_d);
    double p50 = nl ? lat[nl / 2] : 0, p99 = nl ? lat[(size_t)((double)(nl - 1) * 0.99)] : 0,
           mx = nl ? lat[nl - 1] : 0;
    printf("slots measured: %" PRIu64 "\n", slots);
    printf("head deliveries: %zu (missing %" PRIu64 ", duplicated %" PRIu64 ")\n", nl, missing,
           dup);
    printf("delivery delay vs a direct subscriber of the fastest node: p50 %.2f ms, p99 %.2f ms, "
           "max %.2f ms\n",
           p50, p99, mx);
    printf("subscribers cut: %" PRIu64 ", not 200: %" PRIu64 ", bytes received: %" PRIu64 "\n",
           failed, bad_status, bytes);
    int rc = (missing || dup || failed || bad_status || !slots) ? 1 : 0;
    if (stall) {
        /* drain what the kernel holds: EOF means the server cut it */
        fcntl(stall_fd, F_SETFL, 0);
        struct timeval tv = {1, 0};
        setsockopt(stall_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[BUF];
        ssize_t r;
        uint64_t got = 0;
        double until = now_s() + 5; /* a stream that still flows is not cut */
        while ((r = read(stall_fd, buf, sizeof buf)) > 0 && now_s() < until)
            got += (uint64_t)r;
        bool cut = r == 0 || (r < 0 && errno == ECONNRESET);
        printf("stalled subscriber: %s (%" PRIu64 " bytes were still buffered for it)\n",
               cut ? "cut by the server" : "NOT cut", got);
        if (!cut)
            rc = 1;
        close(stall_fd);
    }
    for (int i = 0; i <= n; i++) {
        close(cs[i].fd);
        free(cs[i].in);
        free(cs[i].sse);
        free(cs[i].head_ts);
        free(cs[i].head_n);
    }
    free(cs);
    free(lat);
    close(ep);
    return rc;
}
