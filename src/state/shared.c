/* SPDX-License-Identifier: MIT */
/*
 * shared: records shared by several instances through Redis; see shared.h for the layout,
 * the newer-wins rule and what happens when Redis is away.
 */
#include "state/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "observe/expo.h"

#define SCAN_COUNT "256"
/* Writes in flight at most: a validator client with 10 000 validators sends as many
 * preparations at once, and each write's deadline counts from when it was sent; the rest
 * wait here, in order, until answers come (up to MAX_QUEUED; then they stay local until the
 * next reconnect writes everything back).
 *
 * Every write and publication waits here for BATCH_MS: the records made within that window
 * (one per served duty, one per sticky client or SSZ refusal) are formatted by hiredis (the
 * script's text included) and written together, one write to Redis, one wake-up of
 * redis-server and of every subscribed instance, instead of one each per record. A validator
 * client's duty reads come in bursts at the same points of every slot, and on a small machine
 * each extra wake-up competes with the next answer for a core. The records of duty answers
 * (replay entries, served duties, producers) come here 1 ms after their answer
 * (duties/replay.c, app/sharing.c), so they never cost the answer itself; 10 ms more is
 * nothing to another instance (a block is signed and published hundreds of ms after its
 * production, a restarted node is re-primed seconds later). */
#define BATCH_MS 10u
#define MAX_IN_FLIGHT 256
#define MAX_QUEUED 262144

/* What the load reads back: records only (the shared cache's entries are looked up one by
 * one when asked, never loaded). */
static const char *const LOAD_TOPICS[] = {"replay.*", "producer:*", "ssz:*", "sticky:*"};
#define N_LOAD_TOPICS (sizeof LOAD_TOPICS / sizeof LOAD_TOPICS[0])

/* A write waiting for room in the window. */
typedef struct qrec {
    struct qrec *next;
    bool publish_only; /* bm_shared_publish: not stored */
    uint64_t time_ms, ttl_ms;
    size_t len;
    char topic[32], key[128];
    char value[];
} qrec_t;

/*
 * KEYS[1] the record; ARGV: time, value, ttl ms, channel, message head. Stores "time value"
 * unless the record there is newer, then publishes "head time value". Returns 1 when
 * stored, 0 when Redis held a newer record.
 */
static const char PUT_SCRIPT[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then\n"
    "  local t = tonumber(string.match(v, '^(%d+) '))\n"
    "  if t and t > tonumber(ARGV[1]) then return 0 end\n"
    "end\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])\n"
    "redis.call('PUBLISH', ARGV[4], ARGV[5] .. ARGV[1] .. ' ' .. ARGV[2])\n"
    "return 1\n";

typedef struct shared_stats {
    uint64_t writes, stored, older, write_failures, skipped;
    uint64_t loaded, received, outages, reconciles;
    uint64_t raw_gets, raw_hits, raw_puts;
    uint64_t published; /* records published without storing them */
    uint64_t batches;   /* batch windows whose records were sent together */
} shared_stats_t;

struct bm_shared {
    bm_clock_t *clock;
    bm_shared_opts_t o;
    bm_redis_t *cmd, *sub;
    char ns[200];      /* "<prefix><network>:" */
    char channel[220]; /* ns + "events" */
    char instance[17]; /* random hex id of this instance */
    bm_shared_record_fn record;
    bm_shared_up_fn up;
    void *ud;
    bool available;
    bool subscribed; /* the subscription is confirmed: no message is missed from now on */
    bool sub_up;     /* the subscription's connection is ready */
    uint64_t sub_since_ms;
    char sub_why[160]; /* why the subscription's connection is not ready */
    uint64_t since_ms; /* wall time of the last change of availability */
    char why[160];     /* why it is not available */
    bool scan_done;
    size_t scan_topic; /* LOAD_TOPICS[scan_topic] is being scanned */
    unsigned puts_in_flight;
    qrec_t *q_head, *q_tail;
    size_t queued;
    bm_timer_t *drain_timer;   /* sends the queue at the end of its batch window; while
                                  flushing, the flush's bound, or its end (see bm_shared_flush) */
    void (*flushed)(void *ud); /* set while flushing */
    void *flushed_ud;
    bool flush_over; /* the flush ended: flushed() runs from the timer */
    unsigned mgets;  /* MGETs of the load still unanswered */
    uint64_t load_count;
    shared_stats_t st;
    bm_log_limit_t lim;
};

/* ---- the load: SCAN the namespace, MGET each page ------------------------------------------ */

typedef struct mget {
    bm_shared_t *sh;
    size_t n;
    char **keys;
} mget_t;

static void mget_free(mget_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m);
}

/* "<time> <value>" of a record; false when it is not one. */
static bool split_record(const char *p, size_t len, uint64_t *time_ms, const char **value,
                         size_t *vlen)
{
    uint64_t t = 0;
    size_t i = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9' && i < 20)
        t = t * 10 + (uint64_t)(p[i++] - '0');
    if (i == 0 || i >= len || p[i] != ' ')
        return false;
    *time_ms = t;
    *value = p + i + 1;
    *vlen = len - i - 1;
    return true;
}

static void load_finished(bm_shared_t *sh)
{
    if (sh->scan_done && sh->mgets == 0)
        bm_log(BM_LOG_INFO, "state: %llu shared record(s) loaded from redis",
               (unsigned long long)sh->load_count);
}

/* Delivers one stored record: the key names its topic and key after the namespace. */
static void deliver_stored(bm_shared_t *sh, const char *full, const char *p, size_t len)
{
    size_t ns = strlen(sh->ns);
    if (strncmp(full, sh->ns, ns) != 0)
        return;
    char topic[64];
    const char *rest = full + ns, *colon = strchr(rest, ':');
    uint64_t t;
    const char *value;
    size_t vlen;
    if (!colon || (size_t)(colon - rest) >= sizeof topic ||
        !split_record(p, len, &t, &value, &vlen))
        return;
    memcpy(topic, rest, (size_t)(colon - rest));
    topic[colon - rest] = '\0';
    sh->st.loaded++;
    sh->load_count++;
    sh->record(sh->ud, topic, colon + 1, t, value, vlen);
}

static void on_mget(void *ud, int status, const bm_redis_reply_t *reply)
{
    mget_t *m = ud;
    bm_shared_t *sh = m->sh;
    sh->mgets--;
    if (status == 0 && bm_redis_reply_type(reply) == BM_REDIS_ARRAY) {
        size_t n = bm_redis_reply_count(reply);
        for (size_t i = 0; i < n && i < m->n; i++) {
            const bm_redis_reply_t *e = bm_redis_reply_at(reply, i);
            size_t len;
            const char *p = bm_redis_reply_str(e, &len);
            if (bm_redis_reply_type(e) == BM_REDIS_STRING)
                deliver_stored(sh, m->keys[i], p, len);
        }
    }
    mget_free(m);
    load_finished(sh);
}

static void scan_step(bm_shared_t *sh, const char *cursor, size_t clen);

static void send_mget(bm_shared_t *sh, const bm_redis_reply_t *keys)
{
    size_t n = bm_redis_reply_count(keys);
    mget_t *m = calloc(1, sizeof *m);
    const char **argv = calloc(n + 1, sizeof *argv);
    size_t *lens = calloc(n + 1, sizeof *lens);
    if (m)
        m->keys = calloc(n, sizeof *m->keys);
    if (!m || !argv || !lens || !m->keys)
        goto out;
    m->sh = sh;
    argv[0] = "MGET";
    lens[0] = 4;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *k = bm_redis_reply_str(bm_redis_reply_at(keys, i), &len);
        if (!(m->keys[i] = strndup(k, len)))
            goto out;
        m->n = i + 1;
        argv[i + 1] = m->keys[i];
        lens[i + 1] = len;
    }
    if (bm_redis_command(sh->cmd, (int)n + 1, argv, lens, on_mget, m) == 0) {
        sh->mgets++;
        m = NULL;
    }
out:
    if (m)
        mget_free(m);
    free(argv);
    free(lens);
}

static void on_scan(void *ud, int status, const bm_redis_reply_t *reply)
{
    bm_shared_t *sh = ud;
    if (status != 0 || bm_redis_reply_type(reply) != BM_REDIS_ARRAY ||
        bm_redis_reply_count(reply) != 2)
        return; /* the connection went; the next one loads again */
    size_t clen;
    const char *cursor = bm_redis_reply_str(bm_redis_reply_at(reply, 0), &clen);
    const bm_redis_reply_t *keys = bm_redis_reply_at(reply, 1);
    if (bm_redis_reply_count(keys))
        send_mget(sh, keys);
    if (clen == 1 && cursor[0] == '0' && ++sh->scan_topic < N_LOAD_TOPICS) {
        scan_step(sh, "0", 1);
    } else if (clen == 1 && cursor[0] == '0') {
        sh->scan_done = true;
        load_finished(sh);
    } else {
        scan_step(sh, cursor, clen);
    }
}

static void scan_step(bm_shared_t *sh, const char *cursor, size_t clen)
{
    char match[240];
    snprintf(match, sizeof match, "%s%s", sh->ns, LOAD_TOPICS[sh->scan_topic]);
    const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", SCAN_COUNT};
    size_t lens[6] = {4, clen, 5, strlen(match), 5, strlen(SCAN_COUNT)};
    bm_redis_command(sh->cmd, 6, argv, lens, on_scan, sh);
}

/* ---- availability -------------------------------------------------------------------------- */

/* Everything Redis holds, once both connections are up: a record published before the
 * subscription was confirmed is in Redis by then, one published after is heard. */
static void load(bm_shared_t *sh)
{
    sh->scan_done = false;
    sh->scan_topic = 0;
    sh->load_count = 0;
    scan_step(sh, "0", 1);
}

static void drop_queue(bm_shared_t *sh);
static void drain(bm_shared_t *sh);
static void drain_for_room(bm_shared_t *sh);
static void flush_check(bm_shared_t *sh);

static void on_cmd_state(void *ud, bool up, const char *why)
{
    bm_shared_t *sh = ud;
    sh->available = up;
    sh->since_ms = bm_clock_wall_now(sh->clock);
    snprintf(sh->why, sizeof sh->why, "%s", up ? "" : why);
    if (!up) {
        sh->st.outages++;
        drop_queue(sh); /* written back with everything else when Redis returns */
        flush_check(sh);
        return;
    }
    /* our records first (newer wins in Redis), then everyone's: pipelined in this order */
    sh->st.reconciles++;
    sh->up(sh->ud);
    drain(sh); /* not answering anyone here: sent now, before the load asks */
    if (sh->subscribed)
        load(sh);
}

/* The subscription's connection went down: messages may be missed until it is back. */
static void on_sub_state(void *ud, bool up, const char *why)
{
    bm_shared_t *sh = ud;
    sh->sub_up = up;
    sh->sub_since_ms = bm_clock_wall_now(sh->clock);
    snprintf(sh->sub_why, sizeof sh->sub_why, "%s", up ? "" : why);
    if (!up)
        sh->subscribed = false;
}

/* A message: "<instance> <topic> <key> <time> <value>". */
static void on_message(void *ud, int status, const bm_redis_reply_t *reply)
{
    bm_shared_t *sh = ud;
    if (status != 0 || bm_redis_reply_type(reply) != BM_REDIS_ARRAY ||
        bm_redis_reply_count(reply) != 3)
        return;
    size_t len;
    const char *kind = bm_redis_reply_str(bm_redis_reply_at(reply, 0), &len);
    if (len == 9 && memcmp(kind, "subscribe", 9) == 0) {
        sh->subscribed = true;
        if (sh->available)
            load(sh);
        return;
    }
    if (len != 7 || memcmp(kind, "message", 7) != 0)
        return;
    const char *p = bm_redis_reply_str(bm_redis_reply_at(reply, 2), &len);
    const char *end = p + len, *f[3];
    size_t fl[3];
    for (int i = 0; i < 3; i++) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        if (!sp)
            return;
        f[i] = p;
        fl[i] = (size_t)(sp - p);
        p = sp + 1;
    }
    if (fl[0] == strlen(sh->instance) && memcmp(f[0], sh->instance, fl[0]) == 0)
        return; /* our own */
    char topic[64], key[160];
    uint64_t t;
    const char *value;
    size_t vlen;
    if (fl[1] >= sizeof topic || fl[2] >= sizeof key ||
        !split_record(p, (size_t)(end - p), &t, &value, &vlen))
        return;
    memcpy(topic, f[1], fl[1]);
    topic[fl[1]] = '\0';
    memcpy(key, f[2], fl[2]);
    key[fl[2]] = '\0';
    sh->st.received++;
    sh->record(sh->ud, topic, key, t, value, vlen);
}

/* ---- writing ------------------------------------------------------------------------------- */

static void on_put(void *ud, int status, const bm_redis_reply_t *reply)
{
    bm_shared_t *sh = ud;
    sh->puts_in_flight--;
    if (status != 0 || bm_redis_reply_type(reply) != BM_REDIS_INTEGER) {
        sh->st.write_failures++;
        if (status == 0) {
            size_t len;
            const char *e = bm_redis_reply_str(reply, &len);
            bm_log_limited(&sh->lim, BM_LOG_WARN, "state: redis refused a write: %.*s",
                           (int)(len > 200 ? 200 : len), e);
        }
    } else if (bm_redis_reply_int(reply)) {
        sh->st.stored++;
    } else {
        sh->st.older++;
    }
    drain_for_room(sh);
}

static void on_put_raw(void *ud, int status, const bm_redis_reply_t *reply)
{
    bm_shared_t *sh = ud;
    if (status != 0 || bm_redis_reply_type(reply) == BM_REDIS_ERROR)
        sh->st.write_failures++;
}

static int send_put(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                    uint64_t ttl_ms, const char *value, size_t len)
{
    char full[400], head[300], t[24], ttl[24];
    snprintf(full, sizeof full, "%s%s:%s", sh->ns, topic, key);
    snprintf(head, sizeof head, "%s %s %s ", sh->instance, topic, key);
    snprintf(t, sizeof t, "%llu", (unsigned long long)time_ms);
    snprintf(ttl, sizeof ttl, "%llu", (unsigned long long)(ttl_ms ? ttl_ms : 1));
    const char *argv[9] = {"EVAL", PUT_SCRIPT, "1", full, t, value, ttl, sh->channel, head};
    size_t lens[9] = {4,           sizeof PUT_SCRIPT - 1, 1,           strlen(full), strlen(t), len,
                      strlen(ttl), strlen(sh->channel),   strlen(head)};
    int rc = bm_redis_command(sh->cmd, 9, argv, lens, on_put, sh);
    if (rc == 0) {
        sh->st.writes++;
        sh->puts_in_flight++;
    }
    return rc;
}

static int send_publish(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                        const char *value, size_t len);

static void drop_queue(bm_shared_t *sh)
{
    while (sh->q_head) {
        qrec_t *q = sh->q_head;
        sh->q_head = q->next;
        free(q);
        sh->st.skipped++;
    }
    sh->q_tail = NULL;
    sh->queued = 0;
}

/* Sends queued writes while the window has room. */
static void drain(bm_shared_t *sh)
{
    while (sh->q_head && sh->puts_in_flight < MAX_IN_FLIGHT) {
        qrec_t *q = sh->q_head;
        int rc = q->publish_only
                     ? send_publish(sh, q->topic, q->key, q->time_ms, q->value, q->len)
                     : send_put(sh, q->topic, q->key, q->time_ms, q->ttl_ms, q->value, q->len);
        if (rc != 0) {
            drop_queue(sh); /* Redis went: everything is written back when it returns */
            return;
        }
        sh->q_head = q->next;
        if (!sh->q_head)
            sh->q_tail = NULL;
        sh->queued--;
        free(q);
    }
}

static void on_drain_timer(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_shared_t *sh = ud;
    if (sh->flushed) { /* the flush is over, or its bound passed */
        void (*done)(void *) = sh->flushed;
        sh->flushed = NULL;
        if (!sh->flush_over)
            bm_log(BM_LOG_WARN,
                   "state: shutdown: %zu record(s) not written to redis and %u write(s) "
                   "unanswered at the end of the shutdown bound",
                   sh->queued, sh->puts_in_flight);
        done(sh->flushed_ud);
        return;
    }
    if (sh->q_head)
        sh->st.batches++;
    drain(sh);
}

/* While flushing: once nothing waits and no write is unanswered, the flush ends from the
 * timer (never from inside a Redis callback: the owner frees everything next). */
static void flush_check(bm_shared_t *sh)
{
    if (!sh->flushed || sh->flush_over || sh->q_head || sh->puts_in_flight)
        return;
    sh->flush_over = true;
    bm_timer_start(sh->drain_timer, 0);
}

/* An answer from Redis made room in the window: the records waiting for room go now; those
 * waiting for their batch window (the timer is armed) wait for it. While flushing nothing
 * waits for a window. */
static void drain_for_room(bm_shared_t *sh)
{
    if (sh->flushed || !bm_timer_active(sh->drain_timer))
        drain(sh);
    flush_check(sh);
}

void bm_shared_flush(bm_shared_t *sh, uint32_t bound_ms, void (*done)(void *ud), void *ud)
{
    sh->flushed = done;
    sh->flushed_ud = ud;
    sh->flush_over = false;
    bm_timer_stop(sh->drain_timer); /* the window ends now */
    if (sh->q_head)
        sh->st.batches++;
    bm_timer_start(sh->drain_timer, bound_ms);
    drain(sh);
    flush_check(sh);
}

/* Queues a record for the end of its batch window (see BATCH_MS). */
static int enqueue(bm_shared_t *sh, bool publish_only, const char *topic, const char *key,
                   uint64_t time_ms, uint64_t ttl_ms, const char *value, size_t len)
{
    if (!bm_redis_up(sh->cmd)) {
        sh->st.skipped++;
        return BM_EUNAVAIL;
    }
    if (strlen(topic) >= sizeof(((qrec_t *)0)->topic) || strlen(key) >= sizeof(((qrec_t *)0)->key))
        return BM_EINVAL;
    qrec_t *q = sh->queued < MAX_QUEUED ? malloc(sizeof *q + len + 1) : NULL;
    if (!q) {
        sh->st.skipped++;
        return BM_ENOMEM;
    }
    q->next = NULL;
    q->publish_only = publish_only;
    q->time_ms = time_ms;
    q->ttl_ms = ttl_ms;
    q->len = len;
    snprintf(q->topic, sizeof q->topic, "%s", topic);
    snprintf(q->key, sizeof q->key, "%s", key);
    memcpy(q->value, value, len);
    q->value[len] = '\0';
    if (sh->q_tail)
        sh->q_tail->next = q;
    else
        sh->q_head = q;
    sh->q_tail = q;
    if (sh->flushed) { /* shutting down: no window */
        sh->queued++;
        drain(sh);
        flush_check(sh);
    } else if (sh->queued++ == 0 && !bm_timer_active(sh->drain_timer)) {
        bm_timer_start(sh->drain_timer, BATCH_MS);
    }
    return 0;
}

int bm_shared_put(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                  uint64_t ttl_ms, const char *value, size_t len)
{
    return enqueue(sh, false, topic, key, time_ms, ttl_ms, value, len);
}

static void on_published(void *ud, int status, const bm_redis_reply_t *reply)
{
    bm_shared_t *sh = ud;
    sh->puts_in_flight--;
    if (status != 0 || bm_redis_reply_type(reply) == BM_REDIS_ERROR)
        sh->st.write_failures++;
    drain_for_room(sh);
}

static int send_publish(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                        const char *value, size_t len)
{
    bm_str_t m = BM_STR_INIT;
    bm_str_printf(&m, "%s %s %s %llu ", sh->instance, topic, key, (unsigned long long)time_ms);
    bm_str_append(&m, value, len);
    int rc = m.oom ? BM_ENOMEM : 0;
    const char *argv[3] = {"PUBLISH", sh->channel, bm_str_data(&m)};
    size_t lens[3] = {7, strlen(sh->channel), bm_str_len(&m)};
    if (rc == 0)
        rc = bm_redis_command(sh->cmd, 3, argv, lens, on_published, sh);
    if (rc == 0) {
        sh->st.published++;
        sh->puts_in_flight++; /* in the window like a write: on_published drains */
    }
    bm_str_dispose(&m);
    return rc;
}

int bm_shared_publish(bm_shared_t *sh, const char *topic, const char *key, uint64_t time_ms,
                      const char *value, size_t len)
{
    return enqueue(sh, true, topic, key, time_ms, 0, value, len);
}

/* ---- raw values (the shared cache) ----------------------------------------------------------- */

typedef struct rawq {
    bm_shared_t *sh;
    bm_shared_got_fn got;
    void *ctx;
} rawq_t;

static void on_raw(void *ud, int status, const bm_redis_reply_t *reply)
{
    rawq_t *q = ud;
    size_t len = 0;
    const char *v = NULL;
    if (status == 0 && bm_redis_reply_type(reply) == BM_REDIS_STRING)
        v = bm_redis_reply_str(reply, &len);
    if (v)
        q->sh->st.raw_hits++;
    q->got(q->ctx, v, len);
    free(q);
}

static int raw_key(const bm_shared_t *sh, const char *topic, const char *key, size_t n,
                   bm_str_t *out)
{
    bm_str_printf(out, "%s%s:", sh->ns, topic);
    bm_str_append(out, key, n);
    return out->oom ? BM_ENOMEM : 0;
}

int bm_shared_get_raw(bm_shared_t *sh, const char *topic, const char *key, size_t key_len,
                      bm_shared_got_fn got, void *ctx)
{
    if (!bm_redis_up(sh->cmd))
        return BM_EUNAVAIL;
    bm_str_t k = BM_STR_INIT;
    rawq_t *q = calloc(1, sizeof *q);
    int rc = q ? raw_key(sh, topic, key, key_len, &k) : BM_ENOMEM;
    if (rc == 0) {
        *q = (rawq_t){sh, got, ctx};
        const char *argv[2] = {"GET", bm_str_data(&k)};
        size_t lens[2] = {3, bm_str_len(&k)};
        rc = bm_redis_command(sh->cmd, 2, argv, lens, on_raw, q);
    }
    if (rc == 0)
        sh->st.raw_gets++;
    else
        free(q);
    bm_str_dispose(&k);
    return rc;
}

int bm_shared_put_raw(bm_shared_t *sh, const char *topic, const char *key, size_t key_len,
                      const char *value, size_t len, uint64_t ttl_ms)
{
    if (!bm_redis_up(sh->cmd))
        return BM_EUNAVAIL;
    bm_str_t k = BM_STR_INIT;
    int rc = raw_key(sh, topic, key, key_len, &k);
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%llu", (unsigned long long)ttl_ms);
    const char *argv[5] = {"SET", bm_str_data(&k), value, "PX", ttl};
    size_t lens[5] = {3, bm_str_len(&k), len, 2, strlen(ttl)};
    if (rc == 0)
        rc = bm_redis_command(sh->cmd, ttl_ms ? 5 : 3, argv, lens, on_put_raw, sh);
    if (rc == 0)
        sh->st.raw_puts++;
    bm_str_dispose(&k);
    return rc;
}

bool bm_shared_available(const bm_shared_t *sh)
{
    return sh && bm_redis_up(sh->cmd);
}

/* ---- life ---------------------------------------------------------------------------------- */

static void random_id(char out[17])
{
    uint8_t b[8] = {0};
    if (uv_random(NULL, NULL, b, sizeof b, 0, NULL) != 0) {
        uint64_t x = bm_clock_now_ms() ^ (uint64_t)uv_os_getpid() << 32;
        memcpy(b, &x, sizeof b);
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

bm_shared_t *bm_shared_new(uv_loop_t *loop, bm_clock_t *clock, const bm_shared_opts_t *opts,
                           bm_shared_record_fn record, bm_shared_up_fn up, void *ud)
{
    bm_shared_t *sh = calloc(1, sizeof *sh);
    if (!sh)
        return NULL;
    sh->clock = clock;
    sh->o = *opts;
    sh->record = record;
    sh->up = up;
    sh->ud = ud;
    snprintf(sh->ns, sizeof sh->ns, "%s%s:", opts->prefix, opts->network);
    snprintf(sh->channel, sizeof sh->channel, "%sevents", sh->ns);
    snprintf(sh->why, sizeof sh->why, "connecting");
    snprintf(sh->sub_why, sizeof sh->sub_why, "connecting");
    random_id(sh->instance);
    sh->since_ms = sh->sub_since_ms = bm_clock_wall_now(clock);
    sh->drain_timer = bm_timer_new(clock, on_drain_timer, sh);
    sh->cmd = bm_redis_new(loop, clock, "state", &opts->redis, on_cmd_state, sh);
    sh->sub = bm_redis_new(loop, clock, "state (subscription)", &opts->redis, on_sub_state, sh);
    if (!sh->drain_timer || !sh->cmd || !sh->sub ||
        bm_redis_subscribe(sh->sub, sh->channel, on_message, sh) != 0) {
        bm_shared_free(sh);
        return NULL;
    }
    bm_log(BM_LOG_INFO, "state: shared through redis %s under %s* (instance %s)", opts->url_masked,
           sh->ns, sh->instance);
    return sh;
}

void bm_shared_status_fields(bm_str_t *out, const bm_shared_t *sh)
{
    bm_redis_stats_t r;
    bm_redis_stats(sh->cmd, &r);
    bm_str_puts(out, "\"driver\":\"redis\",\"url\":");
    bm_str_json_string(out, sh->o.url_masked, strlen(sh->o.url_masked));
    bm_str_puts(out, ",\"namespace\":");
    bm_str_json_string(out, sh->ns, strlen(sh->ns));
    bm_str_printf(out, ",\"instance\":\"%s\",\"available\":%s,\"since_ms\":%llu", sh->instance,
                  sh->available ? "true" : "false", (unsigned long long)sh->since_ms);
    if (!sh->available) {
        bm_str_puts(out, ",\"why\":");
        bm_str_json_string(out, sh->why, strlen(sh->why));
    }
    /* the subscription on its own: it can stop answering while commands still work */
    bm_redis_stats_t sr;
    bm_redis_stats(sh->sub, &sr);
    bm_str_printf(out, ",\"subscription\":{\"available\":%s,\"since_ms\":%llu,",
                  sh->sub_up && sh->subscribed ? "true" : "false",
                  (unsigned long long)sh->sub_since_ms);
    if (!sh->sub_up) {
        bm_str_puts(out, "\"why\":");
        bm_str_json_string(out, sh->sub_why, strlen(sh->sub_why));
        bm_str_putc(out, ',');
    }
    bm_str_printf(out, "\"connects\":%llu,\"drops\":%llu,\"timeouts\":%llu}",
                  (unsigned long long)sr.connects, (unsigned long long)sr.drops,
                  (unsigned long long)sr.timeouts);
#define U(x) ((unsigned long long)(x))
    bm_str_printf(out,
                  ",\"writes\":%llu,\"published\":%llu,\"batches\":%llu,\"stored\":%llu,"
                  "\"older_in_redis\":%llu,"
                  "\"write_failures\":%llu,\"local_only\":%llu,\"queued\":%llu,\"loaded\":%llu,"
                  "\"received\":%llu,\"outages\":%llu,\"reconciles\":%llu,"
                  "\"cache\":{\"gets\":%llu,\"hits\":%llu,\"puts\":%llu},"
                  "\"redis\":{\"connects\":%llu,\"failures\":%llu,\"drops\":%llu,"
                  "\"commands\":%llu,\"timeouts\":%llu}",
                  U(sh->st.writes), U(sh->st.published), U(sh->st.batches), U(sh->st.stored),
                  U(sh->st.older), U(sh->st.write_failures), U(sh->st.skipped), U(sh->queued),
                  U(sh->st.loaded), U(sh->st.received), U(sh->st.outages), U(sh->st.reconciles),
                  U(sh->st.raw_gets), U(sh->st.raw_hits), U(sh->st.raw_puts), U(r.connects),
                  U(r.failures), U(r.drops), U(r.commands), U(r.timeouts));
#undef U
}

void bm_shared_metrics(bm_str_t *out, const bm_shared_t *sh)
{
    bm_redis_stats_t st[2];
    bm_redis_stats(sh->cmd, &st[0]);
    bm_redis_stats(sh->sub, &st[1]);
    const char *names[2] = {"commands", "subscription"};
    bool up[2] = {sh->available, sh->sub_up && sh->subscribed};
    bm_expo_family(out, "beaconmux_state_redis_up", BM_EXPO_GAUGE,
                   "1 while the connection to Redis (state.driver redis) is available: "
                   "commands, and the subscription that hears the other instances.");
    for (int i = 0; i < 2; i++) {
        bm_label_t l[] = {{"connection", names[i]}};
        bm_expo_u64(out, "beaconmux_state_redis_up", l, 1, up[i]);
    }
    bm_expo_family(out, "beaconmux_state_redis_drops_total", BM_EXPO_COUNTER,
                   "Ready connections to Redis lost (closed, failed, or no answer in time, a "
                   "heartbeat's included).");
    for (int i = 0; i < 2; i++) {
        bm_label_t l[] = {{"connection", names[i]}};
        bm_expo_u64(out, "beaconmux_state_redis_drops_total", l, 1, st[i].drops);
    }
    bm_expo_family(out, "beaconmux_state_redis_timeouts_total", BM_EXPO_COUNTER,
                   "Redis commands not answered within state.redis.timeout, and heartbeats "
                   "not answered within the larger of that and 1 s.");
    for (int i = 0; i < 2; i++) {
        bm_label_t l[] = {{"connection", names[i]}};
        bm_expo_u64(out, "beaconmux_state_redis_timeouts_total", l, 1, st[i].timeouts);
    }
    bm_expo_family(out, "beaconmux_state_local_only_total", BM_EXPO_COUNTER,
                   "Shared records kept local because Redis was not available (written back "
                   "when it returns, where the record is one that is stored).");
    bm_expo_u64(out, "beaconmux_state_local_only_total", NULL, 0, sh->st.skipped);
}

static void drain_timer_closed(void *ud)
{
    free(ud);
}

void bm_shared_free(bm_shared_t *sh)
{
    if (!sh)
        return;
    bm_redis_free(sh->cmd);
    bm_redis_free(sh->sub);
    drop_queue(sh);
    if (sh->drain_timer)
        bm_timer_close(sh->drain_timer, drain_timer_closed, sh);
    else
        free(sh);
}
