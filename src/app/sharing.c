/* SPDX-License-Identifier: MIT */
/*
 * sharing: the meaning of the shared records of one network. Topics:
 *   "replay.<kind>"  key: the entry's key in hex; value: the entry (bm_replay_entry_fn);
 *                    time: when the write that carried it was seen; kept until it expires.
 *   "ssz"            key: "<upstream id>|<endpoint>"; value: "refused <version>": a node
 *                    answered 415 to an SSZ body there while it reported that version
 *                    (/eth/v1/node/version; "refused" alone when unknown); kept an hour, as
 *                    broadcast keeps it. A node that reports another version ignores it.
 *   "producer"       key: the slot; value: "<upstream id> <0x state_root | ->"; kept an
 *                    hour (the producer memory holds BM_PRODUCE_MEMORY_SLOTS slots).
 *   "journal"        key: "<duty>.<slot>"; value: a served duty read (app/servedrec.h);
 *                    published only, never stored: each instance journals it once as it
 *                    comes, and a reload of Redis's records could not count it twice.
 *   "sticky"         key: a client's sticky key (routing.stickySessions) in 16 hex digits;
 *                    value: the upstream id it sticks to; kept an hour after its last move.
 */
#include "app/sharing.h"

#include "app/servedrec.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/url.h"
#include "observe/observe.h"
#include "state/shared.h"

#define PRODUCER_KEEP_MS 3600000u
#define SSZ_KEEP_MS 3600000u /* broadcast's own memory of a refusal (ssz_memory_ms) */
#define MIN_KEEP_MS 1000u
#define STICKY_KEEP_MS 3600000u
/* Served duty reads kept while Redis is away, published when it returns: about a slot of a
 * large operator's reads; the oldest go first beyond it (counted). */
#define JOURNAL_PENDING_MAX 4096u
/* ...and published this long after Redis returned: a record is only published (never
 * stored), so it reaches an instance only once that instance's subscription is back, and
 * every instance tries again at most 5 s apart (state/redis.c's longest backoff). */
#define JOURNAL_REPUBLISH_DELAY_MS 10000u
/* A served duty read and a producer record are made while their answer is being written:
 * they wait here, unformatted, and are formatted and handed to Redis this long after, from
 * a timer. 1 ms, not 0: the server writes a turn's answers in the loop's check phase, and
 * libuv (1.44) runs a 0 ms timer armed from a timer callback (a race answered at its
 * deadline) within the same timers phase, before those answers went out. Before this, a
 * duty race's completion formatted its journal record for Redis (about 15,000 instructions,
 * callgrind) before the check phase wrote its answer. */
#define AFTER_ANSWER_MS 1u
/* ...at most this many of each kind waiting (a burst of races completing in one turn);
 * beyond it a record is handed over at once. */
#define AFTER_ANSWER_MAX 4096u

/* A producer record not yet handed to Redis. */
typedef struct soon_producer {
    uint64_t slot, time_ms;
    int node;
    bool has_root;
    uint8_t state_root[32];
} soon_producer_t;

/* A served duty read not yet published (Redis was not available when it was served). */
typedef struct pending_served {
    char key[48];
    uint64_t time_ms;
    bm_str_t value;
} pending_served_t;

struct bm_sharing {
    bm_clock_t *clock;
    bm_pool_t *pool;
    bm_replay_t *replay;
    bm_produce_t *produce;
    bm_broadcast_t *bcast;
    bm_readpath_t *readpath;
    bm_observe_t *observe; /* NULL until bm_sharing_set_observe */
    bm_shared_t *sh;
    bm_log_limit_t lim;
    uint64_t producers_learnt; /* producer records from other instances taken */
    uint64_t sticky_learnt;    /* sticky clients from other instances taken */
    uint64_t journal_learnt;   /* served duty reads from other instances journaled */
    pending_served_t *pending; /* a ring of JOURNAL_PENDING_MAX, allocated at first use */
    size_t pending_first, pending_n;
    bm_timer_t *republish;    /* publishes the kept ones once Redis has been back a while */
    bm_timer_t *after_answer; /* hands over what waits below (AFTER_ANSWER_MS) */
    bm_served_t *soon_served; /* served duty reads made this turn */
    size_t n_soon_served, cap_soon_served;
    soon_producer_t *soon_producers; /* producer records made this turn */
    size_t n_soon_producers, cap_soon_producers;
    uint64_t journal_kept;    /* served reads kept while Redis was away, */
    uint64_t journal_dropped; /* and of those, pushed out by newer ones before it returned */
};

/* ---- local -> Redis ------------------------------------------------------------------------ */

static void put_entry(void *ud, bm_replay_kind_t kind, const char *key, const char *entry,
                      size_t len, uint64_t seen_ms, uint64_t expires_ms)
{
    bm_sharing_t *s = ud;
    uint64_t now = bm_clock_wall_now(s->clock);
    char topic[16];
    snprintf(topic, sizeof topic, "replay.%d", (int)kind);
    uint64_t ttl = expires_ms > now + MIN_KEEP_MS ? expires_ms - now : MIN_KEEP_MS;
    bm_shared_put(s->sh, topic, key, seen_ms, ttl, entry, len);
}

static void hand_producer(void *ud, uint64_t slot, int node, const uint8_t *state_root,
                          uint64_t time_ms)
{
    bm_sharing_t *s = ud;
    const bm_node_t *n = node >= 0 ? bm_pool_node(s->pool, (size_t)node) : NULL;
    if (!n)
        return;
    bm_str_t v = BM_STR_INIT;
    bm_sharing_producer_format(&v, n->id, state_root);
    char key[24];
    snprintf(key, sizeof key, "%" PRIu64, slot);
    if (!v.oom && v.b)
        bm_shared_put(s->sh, "producer", key, time_ms, PRODUCER_KEEP_MS, v.b->data, v.b->len);
    bm_str_dispose(&v);
}

/* Grows a waiting list to hold one more; false when it cannot (full, or no memory). */
static bool soon_room(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    if (n >= AFTER_ANSWER_MAX)
        return false;
    void *p = bm_grow(*items, n, cap, size, 16);
    if (!p)
        return false;
    *items = p;
    return true;
}

/* A production served (bm_produce_on_remember): called before its answer is written, so
 * the record only waits for the next turn here (the memory itself already has it). */
static void put_producer(void *ud, uint64_t slot, int node, const uint8_t *state_root,
                         uint64_t time_ms)
{
    bm_sharing_t *s = ud;
    if (!soon_room((void **)&s->soon_producers, &s->cap_soon_producers, s->n_soon_producers,
                   sizeof *s->soon_producers)) {
        hand_producer(s, slot, node, state_root, time_ms);
        return;
    }
    soon_producer_t *p = &s->soon_producers[s->n_soon_producers++];
    *p = (soon_producer_t){.slot = slot, .time_ms = time_ms, .node = node};
    if ((p->has_root = state_root != NULL))
        memcpy(p->state_root, state_root, 32);
    if (!bm_timer_active(s->after_answer))
        bm_timer_start(s->after_answer, AFTER_ANSWER_MS);
}

/* A client of the read path sticking to a node: "<key>" -> "<upstream id>", made at time_ms. */
static void put_sticky_at(bm_sharing_t *s, uint64_t key, int node, uint64_t time_ms)
{
    const bm_node_t *n = bm_pool_node(s->pool, (size_t)node);
    char k[24];
    snprintf(k, sizeof k, "%016" PRIx64, key);
    if (n)
        bm_shared_put(s->sh, "sticky", k, time_ms, STICKY_KEEP_MS, n->id, strlen(n->id));
}

/* A client now sticking to another node. */
static void put_sticky(void *ud, uint64_t key, int node)
{
    bm_sharing_t *s = ud;
    put_sticky_at(s, key, node, bm_clock_wall_now(s->clock));
}

/* Written back when Redis returns: stamped with the time of its last use, so that a move
 * another instance made later wins. */
static void put_sticky_back(void *ud, uint64_t key, int node, uint64_t age_ms)
{
    bm_sharing_t *s = ud;
    uint64_t now = bm_clock_wall_now(s->clock);
    put_sticky_at(s, key, node, now > age_ms ? now - age_ms : 0);
}

static void learn_sticky(bm_sharing_t *s, const char *key, const char *v, size_t len)
{
    char *end, id[128];
    uint64_t k = strtoull(key, &end, 16);
    if (*end || end == key || len == 0 || len >= sizeof id)
        return;
    memcpy(id, v, len);
    id[len] = '\0';
    const bm_node_t *n = bm_pool_find(s->pool, id); /* only a node configured here */
    if (n) {
        bm_readpath_sticky_learn(s->readpath, k, (int)n->index);
        s->sticky_learnt++;
    }
}

/* ---- the duty journal -------------------------------------------------------------------- */

static const char *id_of(void *ud, int i)
{
    const bm_node_t *n = i >= 0 ? bm_pool_node(((bm_sharing_t *)ud)->pool, (size_t)i) : NULL;
    return n ? n->id : NULL;
}

static int index_of(void *ud, const char *id)
{
    const bm_node_t *n = bm_pool_find(((bm_sharing_t *)ud)->pool, id);
    return n ? (int)n->index : -1;
}

/* Keeps a served read that could not be published, for when Redis returns. */
static void keep_served(bm_sharing_t *s, const char *key, uint64_t time_ms, bm_str_t *v)
{
    if (!s->pending && !(s->pending = calloc(JOURNAL_PENDING_MAX, sizeof *s->pending)))
        return;
    pending_served_t *p;
    if (s->pending_n == JOURNAL_PENDING_MAX) { /* full: the oldest gives way */
        p = &s->pending[s->pending_first];
        s->pending_first = (s->pending_first + 1) % JOURNAL_PENDING_MAX;
        bm_str_dispose(&p->value);
        s->journal_dropped++;
    } else {
        p = &s->pending[(s->pending_first + s->pending_n++) % JOURNAL_PENDING_MAX];
    }
    snprintf(p->key, sizeof p->key, "%s", key);
    p->time_ms = time_ms;
    p->value = *v; /* taken over */
    *v = (bm_str_t)BM_STR_INIT;
    s->journal_kept++;
}

/* A duty read this instance served: published to the others (never stored, so that no
 * reconnect's load counts it twice). While Redis is away it is kept and published when
 * Redis returns: the other instances' journals still show every read the pair served. */
static void hand_served(bm_sharing_t *s, const bm_served_t *rec)
{
    bm_str_t v = BM_STR_INIT;
    char key[48];
    snprintf(key, sizeof key, "%d.%" PRIu64, (int)rec->duty, rec->slot);
    uint64_t now = bm_clock_wall_now(s->clock);
    if (bm_servedrec_format(&v, rec, id_of, s) == 0 &&
        bm_shared_publish(s->sh, "journal", key, now, bm_str_data(&v), bm_str_len(&v)) ==
            BM_EUNAVAIL)
        keep_served(s, key, now, &v);
    bm_str_dispose(&v);
}

/* A duty race completed (bm_observe_on_local_served), mostly in the turn its answer is
 * written in: the record waits for the next turn, copied, unformatted. */
static void put_served(const bm_served_t *rec, void *ud)
{
    bm_sharing_t *s = ud;
    if (!soon_room((void **)&s->soon_served, &s->cap_soon_served, s->n_soon_served,
                   sizeof *s->soon_served)) {
        hand_served(s, rec);
        return;
    }
    s->soon_served[s->n_soon_served++] = *rec;
    if (!bm_timer_active(s->after_answer))
        bm_timer_start(s->after_answer, AFTER_ANSWER_MS);
}

/* The answers went out: what waited is formatted and handed to Redis, in order. */
static void after_answer(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_sharing_t *s = ud;
    for (size_t i = 0; i < s->n_soon_producers; i++) {
        const soon_producer_t *p = &s->soon_producers[i];
        hand_producer(s, p->slot, p->node, p->has_root ? p->state_root : NULL, p->time_ms);
    }
    s->n_soon_producers = 0;
    for (size_t i = 0; i < s->n_soon_served; i++)
        hand_served(s, &s->soon_served[i]);
    s->n_soon_served = 0;
}

/* Redis is back, and has been for a while: the kept reads are published, oldest first. */
static void publish_kept_served(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_sharing_t *s = ud;
    while (s->pending_n > 0) {
        pending_served_t *p = &s->pending[s->pending_first];
        if (bm_shared_publish(s->sh, "journal", p->key, p->time_ms, bm_str_data(&p->value),
                              bm_str_len(&p->value)) == BM_EUNAVAIL)
            return; /* gone again: the rest waits for the next return */
        bm_str_dispose(&p->value);
        s->pending_first = (s->pending_first + 1) % JOURNAL_PENDING_MAX;
        s->pending_n--;
    }
}

static void free_kept_served(bm_sharing_t *s)
{
    for (size_t i = 0; s->pending && i < s->pending_n; i++)
        bm_str_dispose(&s->pending[(s->pending_first + i) % JOURNAL_PENDING_MAX].value);
    free(s->pending);
}

static void learn_served(bm_sharing_t *s, const char *key, const char *v, size_t len)
{
    char *end;
    unsigned long duty = strtoul(key, &end, 10);
    if (!s->observe || end == key || *end != '.' || duty >= BM_DUTY_READ_COUNT)
        return;
    const char *slot_text = end + 1;
    uint64_t slot = strtoull(slot_text, &end, 10);
    bm_served_t rec;
    memset(&rec, 0, sizeof rec);
    rec.duty = (bm_duty_read_t)duty;
    rec.slot = slot;
    if (*end || end == slot_text ||
        bm_servedrec_parse(v, len, &rec, bm_pool_count(s->pool), index_of, s) != 0) {
        bm_log_limited(&s->lim, BM_LOG_WARN,
                       "state: a journal record from redis is not one: "
                       "ignored");
        return;
    }
    bm_observe_served_remote(s->observe, &rec);
    s->journal_learnt++;
}

static void metrics(bm_str_t *out, void *ud)
{
    bm_shared_metrics(out, ((bm_sharing_t *)ud)->sh);
}

void bm_sharing_set_observe(bm_sharing_t *s, bm_observe_t *observe)
{
    if (s->observe) {
        bm_observe_on_local_served(s->observe, NULL, NULL);
        bm_observe_set_metrics_extra(s->observe, NULL, NULL);
    }
    s->observe = observe;
    if (observe) {
        bm_observe_on_local_served(observe, put_served, s);
        bm_observe_set_metrics_extra(observe, metrics, s);
    }
}

/* A node newly refusing SSZ on an endpoint: "<upstream id>|<endpoint>". */
static void put_refusal(void *ud, size_t node, const char *pattern)
{
    bm_sharing_t *s = ud;
    const bm_node_t *n = bm_pool_node(s->pool, node);
    char key[256], value[200];
    if (!n || snprintf(key, sizeof key, "%s|%s", n->id, pattern) >= (int)sizeof key)
        return;
    int len = snprintf(value, sizeof value, "refused%s%s", n->version ? " " : "",
                       n->version ? n->version : "");
    if (len >= (int)sizeof value)
        len = (int)sizeof value - 1; /* a version that long is cut; compared as cut */
    bm_shared_put(s->sh, "ssz", key, bm_clock_wall_now(s->clock), SSZ_KEEP_MS, value, (size_t)len);
}

static void learn_refusal(bm_sharing_t *s, const char *key, const char *value, size_t len)
{
    char version[200] = "";
    if (len > 8 && len - 8 < sizeof version && memcmp(value, "refused ", 8) == 0) {
        memcpy(version, value + 8, len - 8);
        version[len - 8] = '\0';
    }
    const char *bar = strchr(key, '|');
    char id[128];
    if (!bar || (size_t)(bar - key) >= sizeof id)
        return;
    memcpy(id, key, (size_t)(bar - key));
    id[bar - key] = '\0';
    const bm_node_t *n = bm_pool_find(s->pool, id);
    if (n)
        bm_broadcast_learn_ssz_refusal(s->bcast, (size_t)n->index, bar + 1, version);
}

/* Everything we remember goes to Redis, newer wins by the time each record was made: the
 * replay memory, the producer memory (a block produced through this instance during an
 * outage, or before a reload onto an empty Redis, must still reach its producer first when
 * published through another) and the sticky clients. */
void bm_sharing_write_back(bm_sharing_t *s)
{
    bm_replay_each(s->replay, bm_clock_wall_now(s->clock), put_entry, s);
    bm_produce_each(s->produce, hand_producer, s);
    bm_readpath_sticky_each(s->readpath, put_sticky_back, s);
}

/* Redis is back (or there for the first time): our records go there, and the served duty
 * reads kept meanwhile are published a while later. */
static void on_up(void *ud)
{
    bm_sharing_t *s = ud;
    bm_sharing_write_back(s);
    if (s->pending_n > 0 && s->republish)
        bm_timer_start(s->republish, JOURNAL_REPUBLISH_DELAY_MS);
}

/* ---- Redis -> local ------------------------------------------------------------------------ */

void bm_sharing_producer_format(bm_str_t *out, const char *id, const uint8_t *state_root)
{
    bm_str_printf(out, "%s ", id);
    if (state_root)
        bm_str_hex(out, state_root, 32); /* "0x" and 64 digits */
    else
        bm_str_putc(out, '-');
}

int bm_sharing_producer_parse(const char *v, size_t len, char id[128], uint8_t state_root[32],
                              bool *has_root)
{
    const char *sp = memchr(v, ' ', len);
    if (!sp || sp == v || (size_t)(sp - v) >= 128)
        return BM_EINVAL;
    memcpy(id, v, (size_t)(sp - v));
    id[sp - v] = '\0';
    const char *root = sp + 1;
    size_t rlen = len - (size_t)(root - v);
    *has_root = false;
    if (rlen == 1 && root[0] == '-')
        return 0;
    char text[BM_ROOT_HEX_LEN + 1];
    if (rlen != BM_ROOT_HEX_LEN)
        return BM_EINVAL;
    memcpy(text, root, rlen);
    text[rlen] = '\0';
    if (bm_hex_to_root(text, state_root) != 0)
        return BM_EINVAL;
    *has_root = true;
    return 0;
}

static void learn_producer(bm_sharing_t *s, const char *key, uint64_t time_ms, const char *v,
                           size_t len)
{
    char *end;
    uint64_t slot = strtoull(key, &end, 10);
    char id[128];
    uint8_t sr[32];
    bool has_root;
    if (*end || end == key || bm_sharing_producer_parse(v, len, id, sr, &has_root) != 0)
        return;
    const bm_node_t *n = bm_pool_find(s->pool, id);
    if (!n) {
        /* never contact anything from Redis that is not configured here */
        bm_log_limited(&s->lim, BM_LOG_WARN,
                       "state: a producer record names upstream \"%.64s\", which is not "
                       "configured here: ignored",
                       id);
        return;
    }
    bm_produce_learn(s->produce, slot, (int)n->index, has_root ? sr : NULL, time_ms);
    s->producers_learnt++;
}

static void on_record(void *ud, const char *topic, const char *key, uint64_t time_ms,
                      const char *value, size_t len)
{
    bm_sharing_t *s = ud;
    if (strncmp(topic, "replay.", 7) == 0) {
        char *end;
        unsigned long kind = strtoul(topic + 7, &end, 10);
        if (*end || end == topic + 7 || kind >= BM_REPLAY_KIND_COUNT)
            return;
        bm_replay_restore(s->replay, (bm_replay_kind_t)kind, value, len, time_ms);
    } else if (strcmp(topic, "producer") == 0) {
        learn_producer(s, key, time_ms, value, len);
    } else if (strcmp(topic, "ssz") == 0) {
        learn_refusal(s, key, value, len);
    } else if (strcmp(topic, "sticky") == 0) {
        learn_sticky(s, key, value, len);
    } else if (strcmp(topic, "journal") == 0) {
        learn_served(s, key, value, len);
    }
}

/* ---- the cache's second tier (edge/cache.h)
 * ------------------------------------------------------ */

int bm_sharing_cache_get(void *ud, const char *key, size_t n, bm_cache_tier_done_fn done, void *ctx)
{
    bm_sharing_t *s = ud;
    return bm_shared_get_raw(s->sh, "cache", key, n, done, ctx);
}

void bm_sharing_cache_put(void *ud, const char *key, size_t n, const char *rec, size_t len,
                          uint32_t ttl_ms)
{
    bm_sharing_t *s = ud;
    bm_shared_put_raw(s->sh, "cache", key, n, rec, len, ttl_ms);
}

/* ---- life ---------------------------------------------------------------------------------- */

bm_sharing_t *bm_sharing_new(uv_loop_t *loop, bm_clock_t *clock, const bm_config_t *cfg,
                             const char *network, bm_pool_t *pool, bm_replay_t *replay,
                             bm_produce_t *produce, bm_broadcast_t *bcast, bm_readpath_t *readpath)
{
    const bm_config_redis_t *rc = &cfg->state.redis;
    bm_shared_opts_t o;
    memset(&o, 0, sizeof o);
    const char *why = rc->url ? bm_redis_parse_url(rc->url, &o.redis) : "is missing";
    if (why) {
        bm_log(BM_LOG_ERROR, "state.redis.url %s", why); /* validated before: defensive */
        return NULL;
    }
    if (rc->password)
        snprintf(o.redis.password, sizeof o.redis.password, "%s", rc->password);
    o.redis.timeout_ms = rc->timeout_ms;
    bm_str_t m = BM_STR_INIT;
    bm_url_mask(&m, rc->url);
    snprintf(o.url_masked, sizeof o.url_masked, "%.*s", m.b ? (int)m.b->len : 0,
             m.b ? m.b->data : "");
    bm_str_dispose(&m);
    snprintf(o.prefix, sizeof o.prefix, "%s", rc->prefix ? rc->prefix : "beaconmux:");
    snprintf(o.network, sizeof o.network, "%s", network ? network : "default");
    bm_sharing_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->clock = clock;
    s->pool = pool;
    s->replay = replay;
    s->produce = produce;
    s->bcast = bcast;
    s->readpath = readpath;
    s->republish = bm_timer_new(clock, publish_kept_served, s);
    s->after_answer = bm_timer_new(clock, after_answer, s);
    s->sh = s->republish && s->after_answer ? bm_shared_new(loop, clock, &o, on_record, on_up, s)
                                            : NULL;
    memset(&o, 0, sizeof o); /* the password */
    if (!s->sh) {
        if (s->republish)
            bm_timer_close(s->republish, NULL, NULL);
        if (s->after_answer)
            bm_timer_close(s->after_answer, NULL, NULL);
        free(s);
        return NULL;
    }
    bm_replay_on_entry(replay, put_entry, s);
    bm_produce_on_remember(produce, put_producer, s);
    bm_broadcast_on_ssz_refusal(bcast, put_refusal, s);
    bm_readpath_on_sticky(readpath, put_sticky, s);
    return s;
}

void bm_sharing_status_json(bm_str_t *out, void *ud)
{
    bm_sharing_t *s = ud;
    bm_str_putc(out, '{');
    bm_shared_status_fields(out, s->sh);
    bm_str_printf(out,
                  ",\"producers_learnt\":%llu,\"sticky_learnt\":%llu,\"journal_learnt\":%llu,"
                  "\"journal_kept\":%llu,\"journal_dropped\":%llu,\"journal_waiting\":%zu}",
                  (unsigned long long)s->producers_learnt, (unsigned long long)s->sticky_learnt,
                  (unsigned long long)s->journal_learnt, (unsigned long long)s->journal_kept,
                  (unsigned long long)s->journal_dropped, s->pending_n);
}

void bm_sharing_flush(bm_sharing_t *s, uint32_t bound_ms, void (*done)(void *ud), void *ud)
{
    if (!s || !s->sh) {
        done(ud);
        return;
    }
    bm_timer_stop(s->after_answer);
    after_answer(s->after_answer, s); /* the records of the last answers, handed over now */
    bm_shared_flush(s->sh, bound_ms, done, ud);
}

void bm_sharing_free(bm_sharing_t *s)
{
    if (!s)
        return;
    bm_replay_on_entry(s->replay, NULL, NULL);
    bm_produce_on_remember(s->produce, NULL, NULL);
    bm_broadcast_on_ssz_refusal(s->bcast, NULL, NULL);
    bm_readpath_on_sticky(s->readpath, NULL, NULL);
    bm_sharing_set_observe(s, NULL);
    bm_shared_free(s->sh);
    if (s->republish)
        bm_timer_close(s->republish, NULL, NULL);
    bm_timer_close(s->after_answer, NULL, NULL); /* what waited is dropped with the network */
    free(s->soon_served);
    free(s->soon_producers);
    free_kept_served(s);
    free(s);
}
