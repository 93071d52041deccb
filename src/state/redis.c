/* SPDX-License-Identifier: MIT */
/*
 * redis: hiredis's asynchronous context on our loop. hiredis parses and writes the protocol
 * and tells us, through its event hooks, when it wants to read or write the socket; a
 * uv_poll on that socket gives it the events. Everything that hiredis does not watch (a
 * connection that never completes, a command that is never answered, reconnecting) is done
 * here with two timers. See redis.h for the contract.
 */
#include "state/redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/log.h"
#include "http/uprules.h"

#define BACKOFF_MIN_MS 100u
#define BACKOFF_MAX_MS 5000u
/* A ready connection is asked something at least this often, so that a server that stopped
 * answering (SIGSTOPped, or behind a network black hole) is noticed even when no command is
 * in flight: the command connection sends PING when idle, the subscribing one SUBSCRIBEs to
 * its channel again (hiredis 0.14 routes no PING reply on a subscribed connection). */
#define HEARTBEAT_MS 1000u

typedef enum conn_state { ST_DOWN = 0, ST_CONNECTING, ST_HANDSHAKE, ST_UP } conn_state_t;

/* One command in flight; replies arrive in the order commands were sent. */
typedef struct cmd {
    struct cmd *next;
    bm_redis_t *r;
    uint64_t deadline_ms; /* monotonic */
    bm_redis_reply_fn fn;
    void *ud;
    bool handshake; /* AUTH, SELECT or the PING that ends the handshake */
    bool last;      /* the handshake's last command */
    bool heartbeat; /* an idle connection's PING: its answer only proves the server lives */
} cmd_t;

/* The event hooks' state for one connection; freed when its poll handle has closed. */
typedef struct adapter {
    uv_poll_t poll;
    redisAsyncContext *ac;
    int events;
    bool closing;
} adapter_t;

struct bm_redis {
    uv_loop_t *loop;
    bm_clock_t *clock;
    char name[32];
    bm_redis_opts_t o;
    bm_redis_state_fn state_fn;
    void *state_ud;
    redisAsyncContext *ac;
    conn_state_t st;
    cmd_t *head, *tail;
    int drop_status; /* what commands cut by the last drop are answered */
    bm_timer_t *deadline, *retry, *beat;
    uint64_t connect_deadline_ms;
    uint32_t backoff_ms;
    int reported; /* -1 not yet, 0 down, 1 up: the last readiness told to state_fn */
    char *channel;
    bm_redis_reply_fn sub_fn;
    void *sub_ud;
    bool sub_confirmed;    /* the first SUBSCRIBE of this connection was answered */
    uint64_t sub_beat_due; /* monotonic deadline of the heartbeat SUBSCRIBE in flight, or 0 */
    bool hung;             /* the last drop was a heartbeat left unanswered */
    bool looked;           /* a passed deadline found an answer waiting: the loop reads it first */
    bool freeing;
    int open_timers;
    bm_redis_stats_t stats;
};

static const char *const STATE_NAME[] = {"down", "connecting", "handshake", "up"};

/* The one setter of the connection state: transitions are logged at debug level. */
static void set_state(bm_redis_t *r, conn_state_t st)
{
    if (r->st != st)
        bm_log(BM_LOG_DEBUG, "%s: redis %s -> %s", r->name, STATE_NAME[r->st], STATE_NAME[st]);
    r->st = st;
}

/* ---- replies ------------------------------------------------------------------------------ */

static const redisReply *RR(const bm_redis_reply_t *r)
{
    return (const redisReply *)r;
}

bm_redis_type_t bm_redis_reply_type(const bm_redis_reply_t *r)
{
    switch (RR(r)->type) {
    case REDIS_REPLY_STRING:
        return BM_REDIS_STRING;
    case REDIS_REPLY_ARRAY:
        return BM_REDIS_ARRAY;
    case REDIS_REPLY_INTEGER:
        return BM_REDIS_INTEGER;
    case REDIS_REPLY_STATUS:
        return BM_REDIS_STATUS;
    case REDIS_REPLY_ERROR:
        return BM_REDIS_ERROR;
    default:
        return BM_REDIS_NIL;
    }
}

const char *bm_redis_reply_str(const bm_redis_reply_t *r, size_t *len)
{
    const redisReply *x = RR(r);
    bool text = x->type == REDIS_REPLY_STRING || x->type == REDIS_REPLY_STATUS ||
                x->type == REDIS_REPLY_ERROR;
    *len = text ? x->len : 0;
    return text ? x->str : "";
}

long long bm_redis_reply_int(const bm_redis_reply_t *r)
{
    return RR(r)->type == REDIS_REPLY_INTEGER ? RR(r)->integer : 0;
}

size_t bm_redis_reply_count(const bm_redis_reply_t *r)
{
    return RR(r)->type == REDIS_REPLY_ARRAY ? RR(r)->elements : 0;
}

const bm_redis_reply_t *bm_redis_reply_at(const bm_redis_reply_t *r, size_t i)
{
    return (const bm_redis_reply_t *)RR(r)->element[i];
}

/* ---- URL ---------------------------------------------------------------------------------- */

static bool copy_part(char *dst, size_t cap, const char *p, size_t n)
{
    if (n >= cap)
        return false;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return true;
}

const char *bm_redis_parse_url(const char *url, bm_redis_opts_t *o)
{
    o->host[0] = o->user[0] = o->password[0] = '\0';
    o->port = 6379;
    o->db = 0;
    if (strncmp(url, "rediss://", 9) == 0)
        return "rediss:// (TLS) is not supported: Debian 12's hiredis 0.14 has no TLS";
    if (strncmp(url, "redis://", 8) != 0)
        return "must start with redis://";
    const char *p = url + 8, *end = p + strcspn(p, "/?#");
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : 0;
        if (!copy_part(o->user, sizeof o->user, p, ulen))
            return "has a user name that is too long";
        const char *pw = colon ? colon + 1 : p;
        if (!copy_part(o->password, sizeof o->password, pw, (size_t)(at - pw)))
            return "has a password that is too long";
        p = at + 1;
    }
    const char *host = p, *host_end;
    if (*p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            return "has an IPv6 address without its closing ]";
        p = host_end + 1;
    } else {
        host_end = memchr(p, ':', (size_t)(end - p));
        if (!host_end)
            host_end = end;
        p = host_end;
    }
    if (host_end == host || !copy_part(o->host, sizeof o->host, host, (size_t)(host_end - host)))
        return "must name a host";
    if (p < end && *p == ':') {
        char *num_end;
        long port = strtol(p + 1, &num_end, 10);
        if (num_end != end || num_end == p + 1 || port < 1 || port > 65535)
            return "has a port that is not a number from 1 to 65535";
        o->port = (int)port;
    } else if (p != end) {
        return "has something after the host that is not a port";
    }
    if (strpbrk(end, "?#"))
        return "has a query or fragment, which means nothing to Redis";
    if (*end == '/' && end[1]) {
        char *num_end;
        long db = strtol(end + 1, &num_end, 10);
        if (*num_end || num_end == end + 1 || db < 0 || db > 65535)
            return "has a database that is not a number";
        o->db = (int)db;
    }
    return NULL;
}

/* ---- the event hooks ---------------------------------------------------------------------- */

static void on_poll(uv_poll_t *h, int status, int events)
{
    adapter_t *a = h->data;
    if (a->closing)
        return;
    if (status < 0)
        events = a->events; /* let hiredis meet the socket's error */
    if (events & UV_READABLE)
        redisAsyncHandleRead(a->ac);
    if (!a->closing && (events & UV_WRITABLE))
        redisAsyncHandleWrite(a->ac);
}

static void poll_update(adapter_t *a, int events)
{
    if (a->closing || a->events == events)
        return;
    a->events = events;
    if (events)
        uv_poll_start(&a->poll, events, on_poll);
    else
        uv_poll_stop(&a->poll);
}

static void add_read(void *p)
{
    adapter_t *a = p;
    poll_update(a, a->events | UV_READABLE);
}

static void del_read(void *p)
{
    adapter_t *a = p;
    poll_update(a, a->events & ~UV_READABLE);
}

static void add_write(void *p)
{
    adapter_t *a = p;
    poll_update(a, a->events | UV_WRITABLE);
}

static void del_write(void *p)
{
    adapter_t *a = p;
    poll_update(a, a->events & ~UV_WRITABLE);
}

static void adapter_closed(uv_handle_t *h)
{
    free(h->data);
}

/* hiredis is done with the context: the handle closes, the adapter follows. */
static void cleanup(void *p)
{
    adapter_t *a = p;
    a->closing = true;
    uv_poll_stop(&a->poll);
    uv_close((uv_handle_t *)&a->poll, adapter_closed);
}

/* ---- connection life ---------------------------------------------------------------------- */

static void report(bm_redis_t *r, bool up, const char *why)
{
    if (r->reported == (int)up || r->freeing)
        return;
    r->reported = up;
    /* a subscribing connection follows the command connection: only that one speaks up,
     * unless the subscription alone stopped answering (the other may still be fine) */
    bm_log_level_t warn = r->channel && !r->hung ? BM_LOG_DEBUG : BM_LOG_WARN;
    if (up)
        bm_log(r->channel ? BM_LOG_DEBUG : BM_LOG_INFO, "%s: redis at %s:%d is ready", r->name,
               r->o.host, r->o.port);
    else
        bm_log(warn,
               "%s: redis at %s:%d is not available (%s); using local state until "
               "it is",
               r->name, r->o.host, r->o.port, why);
    if (r->state_fn)
        r->state_fn(r->state_ud, up, why);
}

/* The command whose deadline comes first. Replies come in order, so that is the oldest
 * one, except behind an idle heartbeat's PING: it has the heartbeat's longer bound (only
 * ever sent with nothing in flight, so it can only be the oldest), and a command sent after
 * it keeps its own deadline, the sooner one. */
static const cmd_t *first_due(const bm_redis_t *r)
{
    const cmd_t *c = r->head;
    if (c && c->heartbeat && c->next && c->next->deadline_ms < c->deadline_ms)
        c = c->next;
    return c;
}

static void arm_deadline(bm_redis_t *r)
{
    if (r->freeing)
        return;
    uint64_t due = 0, now = bm_clock_mono_now(r->clock);
    const cmd_t *c = first_due(r);
    if (r->st == ST_CONNECTING)
        due = r->connect_deadline_ms;
    else if (c)
        due = c->deadline_ms;
    if (r->st == ST_UP && r->sub_beat_due && (!due || r->sub_beat_due < due))
        due = r->sub_beat_due;
    if (due)
        bm_timer_start(r->deadline, due > now ? due - now : 0);
    else
        bm_timer_stop(r->deadline);
}

static void schedule_retry(bm_redis_t *r)
{
    if (r->freeing)
        return;
    bm_timer_start(r->retry, r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/* The connection is gone (or never came): note it, tell once, try again later. */
static void went_down(bm_redis_t *r, bool was_up, const char *why)
{
    set_state(r, ST_DOWN);
    r->sub_confirmed = false;
    r->sub_beat_due = 0;
    bm_timer_stop(r->beat);
    if (was_up)
        r->stats.drops++;
    else
        r->stats.failures++;
    report(r, false, why);
    arm_deadline(r);
    schedule_retry(r);
}

/* Drops the connection ourselves (a deadline passed, the handshake failed). Commands in
 * flight are answered `status` by hiredis's free, now or when the callback running returns. */
static void drop(bm_redis_t *r, int status, const char *why)
{
    redisAsyncContext *ac = r->ac;
    if (!ac)
        return;
    bool was_up = r->st == ST_UP;
    r->ac = NULL;
    r->looked = false;
    r->drop_status = status;
    set_state(r, ST_DOWN);
    redisAsyncFree(ac);
    went_down(r, was_up, why);
}

static void unlink_cmd(bm_redis_t *r, cmd_t *c)
{
    cmd_t **pp = &r->head, *prev = NULL;
    while (*pp && *pp != c) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = c->next;
    if (r->tail == c)
        r->tail = prev;
}

static void handshake_reply(bm_redis_t *r, cmd_t *c, const redisReply *reply)
{
    if (!reply || r->st != ST_HANDSHAKE)
        return; /* the connection went down already */
    if (reply->type == REDIS_REPLY_ERROR) {
        char why[160];
        snprintf(why, sizeof why, "the server refused the handshake: %.120s", reply->str);
        drop(r, BM_ECONNRESET, why);
        return;
    }
    if (!c->last)
        return;
    set_state(r, ST_UP);
    r->backoff_ms = BACKOFF_MIN_MS;
    r->stats.connects++;
    r->hung = false;
    bm_timer_start(r->beat, HEARTBEAT_MS);
    report(r, true, NULL);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    cmd_t *c = priv;
    bm_redis_t *r = c->r;
    unlink_cmd(r, c);
    r->looked = false;
    arm_deadline(r);
    if (c->handshake) {
        handshake_reply(r, c, reply);
    } else if (c->heartbeat) {
        /* alive; a late one was answered by the drop's BM_ETIMEDOUT */
    } else {
        int status = reply ? 0 : (r->freeing ? BM_ECANCELED : r->drop_status);
        if (status == BM_ETIMEDOUT)
            r->stats.timeouts++;
        c->fn(c->ud, status, reply);
    }
    free(c);
}

static uint32_t beat_deadline_ms(const bm_redis_t *r);

static int send_cmd(bm_redis_t *r, cmd_t *c, int argc, const char **argv, const size_t *lens)
{
    c->r = r;
    c->deadline_ms =
        bm_clock_mono_now(r->clock) + (c->heartbeat ? beat_deadline_ms(r) : r->o.timeout_ms);
    if (redisAsyncCommandArgv(r->ac, on_reply, c, argc, argv, lens) != REDIS_OK) {
        free(c);
        return BM_ENOMEM;
    }
    if (r->tail)
        r->tail->next = c;
    else
        r->head = c;
    r->tail = c;
    if (first_due(r) == c) /* the oldest, or the first behind a heartbeat */
        arm_deadline(r);
    return 0;
}

static void send_handshake(bm_redis_t *r, int argc, const char **argv, bool last)
{
    size_t lens[3];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    cmd_t *c = calloc(1, sizeof *c);
    if (!c || send_cmd(r, c, argc, argv, lens) < 0) { /* send_cmd frees c when it fails */
        drop(r, BM_ENOMEM, "out of memory");
        return;
    }
    c->handshake = true;
    c->last = last;
}

/* True for the server's confirmation of a SUBSCRIBE: ["subscribe", channel, count]. */
static bool is_subscribe_confirmation(const redisReply *x)
{
    return x->type == REDIS_REPLY_ARRAY && x->elements == 3 &&
           x->element[0]->type == REDIS_REPLY_STRING && x->element[0]->len == 9 &&
           strncasecmp(x->element[0]->str, "subscribe", 9) == 0;
}

static void on_sub_message(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    bm_redis_t *r = priv;
    if (!reply || r->freeing)
        return; /* a drop: the reconnect subscribes again */
    r->looked = false;
    if (is_subscribe_confirmation(reply)) {
        if (r->sub_confirmed) { /* a heartbeat's answer: the owner heard the first one */
            r->sub_beat_due = 0;
            arm_deadline(r);
            return;
        }
        r->sub_confirmed = true;
    }
    r->sub_fn(r->sub_ud, 0, reply);
}

static void subscribe_now(bm_redis_t *r)
{
    const char *argv[2] = {"SUBSCRIBE", r->channel};
    size_t lens[2] = {9, strlen(r->channel)};
    if (redisAsyncCommandArgv(r->ac, on_sub_message, r, 2, argv, lens) != REDIS_OK)
        drop(r, BM_ENOMEM, "out of memory");
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    bm_redis_t *r = ac->data;
    if (ac != r->ac)
        return;
    r->sub_confirmed = false;
    r->sub_beat_due = 0;
    if (status != REDIS_OK) {
        char why[160];
        snprintf(why, sizeof why, "cannot connect: %.120s", ac->errstr);
        r->ac = NULL; /* hiredis frees it when this returns */
        went_down(r, false, why);
        return;
    }
    set_state(r, ST_HANDSHAKE);
    if (r->o.password[0]) {
        const char *auth[3] = {"AUTH", r->o.user[0] ? r->o.user : r->o.password, r->o.password};
        send_handshake(r, r->o.user[0] ? 3 : 2, auth, false);
    }
    if (r->ac && r->o.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->o.db);
        const char *sel[2] = {"SELECT", db};
        send_handshake(r, 2, sel, false);
    }
    if (r->ac) {
        const char *ping[1] = {"PING"};
        send_handshake(r, 1, ping, true);
    }
    if (r->ac && r->channel)
        subscribe_now(r);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    bm_redis_t *r = ac->data;
    if (ac != r->ac)
        return; /* dropped by us */
    bool was_up = r->st == ST_UP;
    r->ac = NULL;
    went_down(r, was_up,
              status == REDIS_OK ? "the server closed the connection"
                                 : (ac->errstr[0] ? ac->errstr : "connection lost"));
}

static void connect_now(bm_redis_t *r)
{
    r->drop_status = BM_ECONNRESET;
    redisAsyncContext *ac = redisAsyncConnect(r->o.host, r->o.port);
    if (!ac || ac->err) {
        char why[160];
        snprintf(why, sizeof why, "cannot connect: %.120s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        went_down(r, false, why);
        return;
    }
    adapter_t *a = calloc(1, sizeof *a);
    if (!a || uv_poll_init_socket(r->loop, &a->poll, ac->c.fd) != 0) {
        free(a);
        redisAsyncFree(ac);
        went_down(r, false, "cannot watch the socket");
        return;
    }
    a->ac = ac;
    a->poll.data = a;
    ac->data = r;
    ac->ev.data = a;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    r->ac = ac;
    set_state(r, ST_CONNECTING);
    r->connect_deadline_ms = bm_clock_mono_now(r->clock) + r->o.timeout_ms;
    arm_deadline(r);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    redisAsyncSetConnectCallback(ac, on_connect); /* asks for the first write event */
}

/* The heartbeat of a subscription waits longer than a command: a missed one costs a
 * reconnect and a reload of every shared record, so a loaded moment must not cause it. */
static uint32_t beat_deadline_ms(const bm_redis_t *r)
{
    return r->o.timeout_ms > HEARTBEAT_MS ? r->o.timeout_ms : HEARTBEAT_MS;
}

static void on_retry(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_redis_t *r = ud;
    if (!r->ac && !r->freeing)
        connect_now(r);
}

/* libuv runs due timers before it polls the sockets: after a scheduling stall a deadline
 * can be found passed while Redis's answer already waits in the socket. Such a deadline is
 * looked at again 1 ms later, once, after the loop has read the socket; only an answer
 * still missing then is Redis's lateness (docs/upstream.md, "Idle means the node was
 * silent": the same rule as for the nodes). */
static bool answer_waits(bm_redis_t *r)
{
    if (r->looked || !r->ac || !bm_uprules_socket_has_input(r->ac->c.fd))
        return false;
    r->looked = true;
    bm_timer_start(r->deadline, 1);
    return true;
}

static void on_deadline(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_redis_t *r = ud;
    char why[96];
    if (answer_waits(r))
        return;
    const cmd_t *c = first_due(r);
    if (r->st == ST_CONNECTING) {
        snprintf(why, sizeof why, "no connection within %u ms", r->o.timeout_ms);
        drop(r, BM_ETIMEDOUT, why);
    } else if (c && c->heartbeat && bm_clock_mono_now(r->clock) >= c->deadline_ms) {
        snprintf(why, sizeof why, "no answer to a heartbeat within %u ms", beat_deadline_ms(r));
        r->hung = true;
        r->stats.timeouts++;
        drop(r, BM_ETIMEDOUT, why);
    } else if (c && bm_clock_mono_now(r->clock) >= c->deadline_ms) {
        snprintf(why, sizeof why, "no answer within %u ms", r->o.timeout_ms);
        drop(r, BM_ETIMEDOUT, why);
    } else if (r->sub_beat_due && bm_clock_mono_now(r->clock) >= r->sub_beat_due) {
        snprintf(why, sizeof why, "the subscription did not answer a heartbeat within %u ms",
                 beat_deadline_ms(r));
        r->hung = true;
        r->stats.timeouts++;
        drop(r, BM_ETIMEDOUT, why);
    } else {
        arm_deadline(r);
    }
}

/* Every HEARTBEAT_MS while ready: an idle command connection sends PING, a subscribing one
 * SUBSCRIBEs again; both wait for the answer up to the heartbeat's bound (beat_deadline_ms),
 * not a command's: nothing waits on a heartbeat, and a Redis that was briefly not scheduled
 * on a loaded machine must not be taken for a hung one (a drop costs a reconnect and a
 * reload of every shared record). */
static void on_beat(bm_timer_t *t, void *ud)
{
    bm_redis_t *r = ud;
    if (r->st != ST_UP || r->freeing)
        return;
    if (r->channel) {
        if (r->sub_confirmed && !r->sub_beat_due) {
            r->sub_beat_due = bm_clock_mono_now(r->clock) + beat_deadline_ms(r);
            subscribe_now(r);
            if (r->st == ST_UP)
                arm_deadline(r);
        }
    } else if (!r->head) {
        const char *argv[1] = {"PING"};
        size_t lens[1] = {4};
        cmd_t *c = calloc(1, sizeof *c);
        if (c) {
            c->heartbeat = true; /* before send_cmd: it gives the heartbeat's deadline */
            send_cmd(r, c, 1, argv, lens);
        }
    }
    if (r->st == ST_UP)
        bm_timer_start(t, HEARTBEAT_MS);
}

/* ---- public ------------------------------------------------------------------------------- */

bm_redis_t *bm_redis_new(uv_loop_t *loop, bm_clock_t *clock, const char *name,
                         const bm_redis_opts_t *opts, bm_redis_state_fn state_fn, void *ud)
{
    bm_redis_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->loop = loop;
    r->clock = clock;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->o = *opts;
    if (!r->o.timeout_ms)
        r->o.timeout_ms = 50;
    r->state_fn = state_fn;
    r->state_ud = ud;
    r->reported = -1;
    r->backoff_ms = BACKOFF_MIN_MS;
    r->deadline = bm_timer_new(clock, on_deadline, r);
    r->retry = bm_timer_new(clock, on_retry, r);
    r->beat = bm_timer_new(clock, on_beat, r);
    if (!r->deadline || !r->retry || !r->beat) {
        bm_timer_t *timers[3] = {r->deadline, r->retry, r->beat};
        for (int i = 0; i < 3; i++)
            if (timers[i])
                bm_timer_close(timers[i], NULL, NULL);
        free(r);
        return NULL;
    }
    r->open_timers = 3;
    bm_timer_start(r->retry, 0); /* connect from the loop, never inside this call */
    return r;
}

bool bm_redis_up(const bm_redis_t *r)
{
    return r && r->st == ST_UP && !r->freeing;
}

int bm_redis_command(bm_redis_t *r, int argc, const char **argv, const size_t *argvlen,
                     bm_redis_reply_fn fn, void *ud)
{
    if (!bm_redis_up(r) || r->channel) {
        r->stats.unavailable++;
        return BM_EUNAVAIL;
    }
    cmd_t *c = calloc(1, sizeof *c);
    if (!c)
        return BM_ENOMEM;
    c->fn = fn;
    c->ud = ud;
    int rc = send_cmd(r, c, argc, argv, argvlen);
    if (rc == 0)
        r->stats.commands++;
    return rc;
}

int bm_redis_subscribe(bm_redis_t *r, const char *channel, bm_redis_reply_fn fn, void *ud)
{
    r->channel = strdup(channel);
    if (!r->channel)
        return BM_ENOMEM;
    r->sub_fn = fn;
    r->sub_ud = ud;
    if (r->ac && r->st != ST_CONNECTING)
        subscribe_now(r);
    return 0;
}

void bm_redis_stats(const bm_redis_t *r, bm_redis_stats_t *out)
{
    *out = r->stats;
}

static void timer_closed(void *ud)
{
    bm_redis_t *r = ud;
    if (--r->open_timers == 0) {
        free(r->channel);
        free(r);
    }
}

void bm_redis_free(bm_redis_t *r)
{
    if (!r || r->freeing)
        return;
    r->freeing = true;
    if (r->ac) {
        redisAsyncContext *ac = r->ac;
        r->ac = NULL;
        set_state(r, ST_DOWN);
        redisAsyncFree(ac);
    }
    bm_timer_close(r->deadline, timer_closed, r);
    bm_timer_close(r->retry, timer_closed, r);
    bm_timer_close(r->beat, timer_closed, r);
}
