/* SPDX-License-Identifier: MIT */
/*
 * sharedlimit: the global token buckets of every instance as one bucket in Redis; see
 * sharedlimit.h. Keys: "<prefix>limit:global" and "<prefix>limit:duties" (hashes of tokens
 * and the Redis time they were counted at), not per network: the front's buckets are not.
 */
#include "app/sharedlimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "state/redis.h"

#define SYNC_MS 100u
#define KEY_KEEP_MS "60000"
/* Clients told per period at most (each costs one pipelined command); the others are
 * limited by this instance alone for that period (bm_front_clients_unshared counts them). */
#define CLIENTS_PER_SYNC 1024u

/*
 * KEYS[1] the bucket; ARGV: rate per second, burst, tokens spent. Refills by Redis's own
 * clock (one clock for every instance), takes what was spent (it was given already, so the
 * bucket may go below zero: a debt), answers what is left as a string (a Lua number would
 * be cut to an integer).
 */
static const char TAKE_SCRIPT[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local v = redis.call('HMGET', KEYS[1], 'tokens', 'ms')\n"
    "local tokens, ms = tonumber(v[1]), tonumber(v[2])\n"
    "if not tokens or not ms then tokens = burst; ms = now end\n"
    "if now > ms then tokens = math.min(burst, tokens + (now - ms) * rate / 1000) end\n"
    "tokens = tokens - tonumber(ARGV[3])\n"
    "redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ms', tostring(math.max(now, ms)))\n"
    "redis.call('PEXPIRE', KEYS[1], " KEY_KEEP_MS ")\n"
    "return tostring(tokens)\n";

typedef struct pending {
    struct bm_sharedlimit *s;
    int which;
} pending_t;

/* One client's bucket asked of Redis: what to cap when the answer comes. */
typedef struct client_ask {
    struct bm_sharedlimit *s;
    int cls;
    bm_rate_t rate;
    size_t len;
    char key[BM_SPENDS_KEY_MAX + 1];
} client_ask_t;

struct bm_sharedlimit {
    bm_clock_t *clock;
    bm_front_t *front;
    bm_redis_t *r;
    bm_timer_t *tick;
    bm_rate_t rates[2];
    char key[2][160];
    bool in_flight[2];
    pending_t p[2];
    bool clients;               /* per-client buckets are shared too */
    unsigned clients_in_flight; /* their commands not answered yet */
    char prefix[128];
    bool stopping;
};

/* A number the take script answered; false when it is not one. */
static bool reply_number(int status, const bm_redis_reply_t *reply, double *out)
{
    size_t len;
    const char *str = reply ? bm_redis_reply_str(reply, &len) : NULL;
    if (status != 0 || bm_redis_reply_type(reply) != BM_REDIS_STRING || len > 40)
        return false;
    char num[48];
    memcpy(num, str, len);
    num[len] = '\0';
    char *end;
    *out = strtod(num, &end);
    return end != num;
}

static void on_taken(void *ud, int status, const bm_redis_reply_t *reply)
{
    pending_t *p = ud;
    bm_sharedlimit_t *s = p->s;
    s->in_flight[p->which] = false;
    double left;
    if (!s->stopping && reply_number(status, reply, &left)) /* else it limits alone meanwhile */
        bm_front_global_cap(s->front, p->which, left);
}

/* Sends the take script for `key`: `spent` tokens from a bucket of rate `r`. */
static int send_take(bm_sharedlimit_t *s, const char *key, const bm_rate_t *r, uint32_t spent,
                     bm_redis_reply_fn fn, void *ud)
{
    char rate[32], burst[32], n[16];
    snprintf(rate, sizeof rate, "%.6f", r->rate);
    snprintf(burst, sizeof burst, "%.6f", r->burst);
    snprintf(n, sizeof n, "%u", spent);
    const char *argv[7] = {"EVAL", TAKE_SCRIPT, "1", key, rate, burst, n};
    size_t lens[7] = {4,        sizeof TAKE_SCRIPT - 1, 1, strlen(key), strlen(rate), strlen(burst),
                      strlen(n)};
    return bm_redis_command(s->r, 7, argv, lens, fn, ud);
}

static void on_client_taken(void *ud, int status, const bm_redis_reply_t *reply)
{
    client_ask_t *q = ud;
    bm_sharedlimit_t *s = q->s;
    s->clients_in_flight--;
    double left;
    if (!s->stopping && reply_number(status, reply, &left))
        bm_front_client_cap(s->front, q->cls, q->key, q->len, &q->rate, left);
    free(q);
}

/* One client's spending of the period: taken from its bucket in Redis, keyed by class and
 * limiter key ("<prefix>limit:client:<r|d>:<address or key:id>"). */
static void tell_client(void *ud, int cls, const char *key, size_t n, const bm_rate_t *r,
                        uint32_t spent)
{
    bm_sharedlimit_t *s = ud;
    client_ask_t *q = bm_redis_up(s->r) ? calloc(1, sizeof *q) : NULL;
    if (!q)
        return; /* Redis away: this instance limited it alone */
    *q = (client_ask_t){.s = s, .cls = cls, .rate = *r, .len = n};
    memcpy(q->key, key, n);
    char rkey[300];
    snprintf(rkey, sizeof rkey, "%slimit:client:%c:%s", s->prefix, cls ? 'd' : 'r', q->key);
    if (send_take(s, rkey, r, spent, on_client_taken, q) == 0)
        s->clients_in_flight++;
    else
        free(q);
}

static void on_tick(bm_timer_t *t, void *ud)
{
    bm_sharedlimit_t *s = ud;
    /* the clients first: their commands are independent of the global ones' */
    if (s->clients && s->clients_in_flight == 0)
        bm_front_clients_spent(s->front, tell_client, s); /* drained even when Redis is away */
    if (s->in_flight[0] || s->in_flight[1]) {
        bm_timer_start(t, SYNC_MS);
        return; /* told once the answer is in: spending keeps counting meanwhile */
    }
    uint32_t spent[2];
    bm_front_global_spent(s->front, spent); /* when Redis is away: not told, limited alone */
    for (int i = 0; i < 2 && bm_redis_up(s->r); i++)
        if (s->rates[i].rate > 0 &&
            send_take(s, s->key[i], &s->rates[i], spent[i], on_taken, &s->p[i]) == 0)
            s->in_flight[i] = true;
    bm_timer_start(t, SYNC_MS);
}

bm_sharedlimit_t *bm_sharedlimit_new(uv_loop_t *loop, const bm_config_t *cfg, bm_front_t *front)
{
    const bm_config_redis_t *rc = &cfg->state.redis;
    bm_rate_t rates[2];
    bm_front_global_rates(front, rates);
    bool clients = bm_front_client_limits(front);
    if (rates[0].rate <= 0 && rates[1].rate <= 0 && !clients)
        return NULL;
    bm_redis_opts_t o;
    memset(&o, 0, sizeof o);
    if (!rc->url || bm_redis_parse_url(rc->url, &o))
        return NULL; /* validated before */
    if (rc->password)
        snprintf(o.password, sizeof o.password, "%s", rc->password);
    o.timeout_ms = rc->timeout_ms;
    bm_sharedlimit_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->front = front;
    memcpy(s->rates, rates, sizeof rates);
    const char *prefix = rc->prefix ? rc->prefix : "beaconmux:";
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    s->clients = clients && bm_front_share_clients(front, CLIENTS_PER_SYNC) == 0;
    snprintf(s->key[0], sizeof s->key[0], "%slimit:global", prefix);
    snprintf(s->key[1], sizeof s->key[1], "%slimit:duties", prefix);
    for (int i = 0; i < 2; i++)
        s->p[i] = (pending_t){s, i};
    s->clock = bm_clock_real_new(loop);
    s->tick = s->clock ? bm_timer_new(s->clock, on_tick, s) : NULL;
    s->r = s->clock ? bm_redis_new(loop, s->clock, "rate limits", &o, NULL, NULL) : NULL;
    memset(&o, 0, sizeof o); /* the password */
    if (!s->tick || !s->r) {
        bm_sharedlimit_free(s);
        return NULL;
    }
    bm_timer_start(s->tick, SYNC_MS);
    bm_log(BM_LOG_INFO, "rate limits: the %s buckets are shared through redis (%s*)",
           s->clients ? "global and per-client" : "global", prefix);
    return s;
}

static void tick_closed(void *ud)
{
    bm_sharedlimit_t *s = ud;
    bm_clock_free(s->clock);
    free(s);
}

void bm_sharedlimit_free(bm_sharedlimit_t *s)
{
    if (!s)
        return;
    s->stopping = true;
    bm_redis_free(s->r); /* answers what is in flight (stopping: ignored) */
    if (s->tick) {
        bm_timer_close(s->tick, tick_closed, s);
        return;
    }
    bm_clock_free(s->clock);
    free(s);
}
