/* SPDX-License-Identifier: MIT */
/*
 * race: the generic multi-node request engine (see race.h for the contract and
 * docs/race-engine.md for the state machine).
 *
 * How it is built:
 *   - one race is one allocation with a slot per candidate node (its running transfer,
 *     its latest answer, its repoll time) and one timer on the engine's clock (base/clock.h). The
 * timer is always armed at the race's next point in time (grace end, deadline, a repoll, a policy
 *     timer, the hard timeout, or "now" when an answer or a completion is due), computed
 *     from wall time because policies give deadlines in wall time (slot arithmetic);
 *   - answers are small reference-counted records (status, filtered headers, a body
 *     reference): a node's latest answer, the best accepted, the best usable, the most
 *     specific error and the final answer share them without copies, and each is dropped
 *     as soon as nothing can need it any more;
 *   - decisions (the answer is chosen) happen anywhere, but user callbacks (waiters,
 *     completion, policy timers) run only from a transfer's on_done or the race's timer,
 *     never from inside a bm_race_* call: an API call that decides arms the timer at 0;
 *   - races and the engine are freed only in their timers' close callbacks (which run from
 *     the loop), so a pointer held on the stack stays valid across any callback; after each callout
 * the code checks whether the race was closed (engine freed) and stops there.
 */
#include "duties/race.h"

#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/list.h"
#include "base/log.h"
#include "base/url.h"

#define DEFAULT_REPOLL_MS 50
#define HARD_AFTER_DEADLINE_MS 10000
#define HARD_WITHOUT_DEADLINE_MS 30000
/* The upstream client's own time limit of a transfer without one of its own: past the
 * hard timeout, by this much. The race's timer cuts the transfer at the hard timeout; the
 * client's limit is only a backstop, and must not cut first (it measures real time, the
 * race its clock's, which in tests is a manual one). */
#define TRANSFER_BACKSTOP_MS 30000
#define KEY_BUCKETS 256 /* keyed races at once are few (coalesced duty reads) */

/* Fallback ranks of HTTP answers that were neither accepted nor usable: lower wins. */
enum { RANK_4XX = 0, RANK_OTHER, RANK_5XX, RANK_UNUSABLE_2XX };

typedef enum race_state {
    RS_RUNNING,   /* asking nodes and judging their answers */
    RS_DECIDED,   /* the answer is chosen; the waiters get it from the loop */
    RS_ANSWERED,  /* the waiters got it; a write's transfers may still run */
    RS_CANCELLED, /* a read abandoned by its last waiter: it never answers */
    RS_DONE,      /* the completion ran; the race is closing */
} race_state_t;

typedef struct ans {
    unsigned refs;
    bool embedded; /* the race's own synthesized answer: not separately allocated */
    int rank;
    double score;
    bm_race_answer_t a;
    bm_hdrs_t hdrs;
} ans_t;

typedef struct slot {
    bm_race_t *r;
    bm_node_t *node;
    bm_xfer_t *xfer;     /* running transfer, or NULL */
    ans_t *last;         /* latest answer (or failure), or NULL */
    unsigned attempts;   /* transfers started */
    uint64_t asked_ms;   /* wall time of the latest start */
    uint64_t xfer_us;    /* monotonic start of the running transfer */
    uint64_t xfer_end;   /* race time at which the running transfer is cut (the policy's
                            transfer_timeout_ms); 0: none */
    uint64_t repoll_at;  /* wall time of the next re-ask; 0: none */
    uint64_t repoll_end; /* no re-ask starts at or after this */
    int end_err;         /* why a node without an answer has none */
    bool tried;
} slot_t;

typedef struct at_timer {
    uint64_t at_ms;
    void (*fn)(bm_race_t *r, void *ud);
    void *ud;
    struct at_timer *next;
} at_timer_t;

struct bm_race_waiter {
    bm_race_t *r;
    bm_race_answer_fn fn;
    void *ud;
    bool left;
    bool answered;
    bm_link_t link; /* on its race's waiters, in joining order */
};

struct bm_race {
    bm_race_engine_t *e;
    bm_timer_t *timer;
    race_state_t state;
    bool closing;   /* its timer is closing: no more work, memory valid until the callback */
    bool drain_cut; /* cut by a drain already */
    bm_race_policy_t pol;
    uint64_t start_ms, start_us, hard_ms;
    char *method, *target, *key;
    bm_hdrs_t req_hdrs;
    bm_buf_t *req_body;
    bm_race_complete_fn complete;
    void *complete_ud;

    bm_link_t waiters; /* bm_race_waiter_t, in joining order */
    size_t n_waiting;
    unsigned delivering; /* waiters are being called: leaving ones are only marked */
    at_timer_t *ats;

    ans_t *acc;      /* best accepted answer (grace running) */
    ans_t *usable;   /* best usable, not accepted */
    ans_t *fallback; /* most specific other HTTP answer */
    ans_t *final;    /* the decision, until delivered */
    ans_t synth;     /* the synthesized 503, when needed */
    uint64_t grace_end;
    bool acc_done; /* `complete` said an accepted answer cannot be beaten */
    size_t in_flight;

    bm_link_t link;    /* on the engine's live races */
    bm_race_t *k_next; /* key bucket chain */
    bool keyed;
    /* the witness (race.h): its candidate slot, or -1; or a slot of its own (wslot) */
    int witness_i;
    bool has_wslot;
    bool wslot_running;
    bool witness_outlives; /* its first transfer outlives the decision (until witness_until) */
    uint64_t witness_until;
    slot_t wslot;
    bm_race_answer_t *view; /* bm_race_answers and the completion */
    size_t n;
    slot_t slots[];
};

struct bm_race_engine {
    bm_clock_t *clock;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_link_t races; /* the live races (bm_race_t) */
    size_t active;
    size_t writes;
    size_t open_handles; /* the drain timer and every race's timer; freed at 0 */
    bool dying;
    bm_timer_t *drain_timer;
    bool draining;
    uint64_t drain_until; /* monotonic ms */
    void (*drain_done)(bm_race_engine_t *e, void *ud);
    void *drain_ud;
    bm_buf_t *oom_body; /* the 503 body when even formatting one fails */
    bm_hdrs_t empty;
    bm_log_limit_t lim;
    bm_race_t *keys[KEY_BUCKETS];
};

static void on_tick(bm_timer_t *t, void *ud);
static void on_drain(bm_timer_t *t, void *ud);
static void advance(bm_race_t *r, bool from_loop);

/* ---- answers ---------------------------------------------------------------------------- */

static ans_t *ans_new(void)
{
    ans_t *an = calloc(1, sizeof *an);
    if (!an)
        return NULL;
    an->refs = 1;
    bm_hdrs_init(&an->hdrs);
    an->a.headers = &an->hdrs;
    return an;
}

static ans_t *ans_ref(ans_t *an)
{
    if (an)
        an->refs++;
    return an;
}

static void ans_dispose(ans_t *an)
{
    bm_hdrs_dispose(&an->hdrs);
    bm_buf_unref(an->a.body);
    an->a.body = NULL;
}

static void ans_unref(ans_t *an)
{
    if (!an || --an->refs > 0)
        return;
    ans_dispose(an);
    if (!an->embedded)
        free(an);
}

/* Replaces the answer held in *slot. */
static void ans_set(ans_t **slot, ans_t *an)
{
    ans_t *old = *slot;
    *slot = ans_ref(an);
    ans_unref(old);
}

/* Response headers a policy may forward: everything but hop-by-hop and framing fields. */
static void copy_response_headers(bm_hdrs_t *dst, const bm_hdrs_t *src)
{
    if (!src)
        return;
    const char *conn = bm_hdrs_get(src, "connection");
    for (size_t i = 0; i < src->n; i++) {
        const bm_header_t *h = &src->items[i];
        if (bm_header_is_hop_by_hop(h->name, h->name_len))
            continue;
        if (conn && bm_header_listed_in_connection(conn, h->name, h->name_len))
            continue;
        bm_hdrs_add(dst, h->name, h->name_len, h->value, h->value_len);
    }
}

bm_buf_t *bm_race_error_body(int code, const char *message)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"code\":%d,\"message\":", code);
    const char *m = message ? message : "";
    bm_str_json_string(&s, m, strlen(m));
    bm_str_putc(&s, '}');
    return bm_str_finish(&s);
}

/* ---- small helpers ---------------------------------------------------------------------- */

static const char *state_name(race_state_t s)
{
    switch (s) {
    case RS_RUNNING:
        return "running";
    case RS_DECIDED:
        return "decided";
    case RS_ANSWERED:
        return "answered";
    case RS_CANCELLED:
        return "cancelled";
    case RS_DONE:
        return "done";
    }
    return "?";
}

static void set_state(bm_race_t *r, race_state_t s)
{
#ifdef BM_DEBUG
    bm_log(BM_LOG_DEBUG, "race %p %s %s: %s -> %s", (void *)r, r->method, r->target,
           state_name(r->state), state_name(s));
#else
    (void)state_name;
#endif
    r->state = s;
}

static int rank_of(int status)
{
    if (status >= 400 && status <= 499)
        return RANK_4XX;
    if (status >= 500)
        return RANK_5XX;
    return RANK_OTHER;
}

static double score_of(const bm_race_t *r, const ans_t *an)
{
    if (!r->pol.score)
        return 0;
    double v = r->pol.score(&an->a, r->pol.ud);
    return isnan(v) ? -INFINITY : v;
}

/*
 * The race's clock: wall time read once at the start, advanced by the monotonic clock.
 * Deadlines are wall times (slot arithmetic), but a wall clock step during a race (NTP)
 * must neither stretch it nor end it early.
 */
static uint64_t race_now(const bm_race_t *r)
{
    return r->start_ms + (bm_clock_mono_now_us(r->e->clock) - r->start_us) / 1000;
}

/* Eight bytes at a time (a multiply and a shift per word): every client request of a
 * coalesced read hashes its key, some 80 bytes, and FNV-1a byte by byte was 300 of the
 * instructions of an attestation_data answer. */
static uint32_t key_hash(const char *k)
{
    const uint64_t mul = 0xff51afd7ed558ccdu;
    size_t n = strlen(k);
    uint64_t h = 0x9e3779b97f4a7c15u ^ n;
    for (; n >= 8; n -= 8, k += 8) {
        uint64_t x;
        memcpy(&x, k, 8);
        h = (h ^ x) * mul;
        h ^= h >> 32;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < n; i++)
        tail |= (uint64_t)(unsigned char)k[i] << (8 * i);
    h = (h ^ tail) * mul;
    h ^= h >> 29;
    return (uint32_t)(h % KEY_BUCKETS);
}

static void key_remove(bm_race_t *r)
{
    if (!r->keyed)
        return;
    bm_race_t **pp = &r->e->keys[key_hash(r->key)];
    while (*pp && *pp != r)
        pp = &(*pp)->k_next;
    if (*pp)
        *pp = r->k_next;
    r->k_next = NULL;
    r->keyed = false;
}

static void drop_judgement(bm_race_t *r)
{
    ans_set(&r->acc, NULL);
    ans_set(&r->usable, NULL);
    ans_set(&r->fallback, NULL);
    while (r->ats) {
        at_timer_t *t = r->ats;
        r->ats = t->next;
        free(t);
    }
    for (size_t i = 0; i < r->n; i++)
        r->slots[i].repoll_at = 0;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

static void free_waiters(bm_race_t *r)
{
    while (!bm_list_empty(&r->waiters)) {
        bm_race_waiter_t *w = bm_list_first(&r->waiters, bm_race_waiter_t, link);
        bm_link_unlink(&w->link);
        free(w);
    }
}

static void engine_release(bm_race_engine_t *e)
{
    if (--e->open_handles > 0)
        return;
    bm_buf_unref(e->oom_body);
    bm_hdrs_dispose(&e->empty);
    free(e);
}

/* Frees the race's copy of its request and the race itself: all there is of a race that
 * never started, the last step for one that ran. */
static void race_free_unstarted(bm_race_t *r)
{
    bm_hdrs_dispose(&r->req_hdrs);
    bm_buf_unref(r->req_body);
    free(r->method);
    free(r->target);
    free(r->key);
    free(r->view);
    free(r);
}

static void on_race_closed(void *ud)
{
    bm_race_t *r = ud;
    bm_race_engine_t *e = r->e;
    free_waiters(r);
    drop_judgement(r);
    ans_set(&r->final, NULL);
    for (size_t i = 0; i < r->n; i++)
        ans_set(&r->slots[i].last, NULL);
    ans_set(&r->wslot.last, NULL);
    if (r->synth.refs)
        ans_dispose(&r->synth); /* built: only the race's own reference is left */
    if (r->pol.ud_dispose)
        r->pol.ud_dispose(r->pol.ud); /* the policy's context, last: see race.h */
    race_free_unstarted(r);
    engine_release(e);
}

/* Closes the race's timer; the race is freed in its close callback. */
static void race_close(bm_race_t *r)
{
    if (r->closing)
        return;
    r->closing = true;
    key_remove(r);
    bm_link_unlink(&r->link);
    bm_timer_close(r->timer, on_race_closed, r);
}

/* True while the witness's first transfer may outlive the decision (race.h `witness`). */
static bool witness_kept(const bm_race_t *r, const slot_t *s, uint64_t now)
{
    if (!r->witness_outlives || now >= r->witness_until)
        return false;
    if (s == &r->wslot)
        return true;
    return r->witness_i >= 0 && s == &r->slots[r->witness_i] && s->attempts == 1;
}

/* Stops the witness's own transfer (not a candidate's: cancel_all does those). */
static void cancel_wslot(bm_race_t *r, int err)
{
    slot_t *s = &r->wslot;
    if (!s->xfer)
        return;
    bm_upstream_cancel(s->xfer);
    s->xfer = NULL;
    r->wslot_running = false;
    s->node->stats.in_flight--;
    s->end_err = err;
}

/* Cancels every running transfer, but the witness's while `keep_witness` and its time lasts.
 * `err` is what the nodes without an answer report. Nothing is recorded in the pool: a race
 * that ends itself (decided, abandoned, cut by its hard timeout or a drain) says nothing
 * about a node that had not answered yet (issue 12: two block productions for a past slot,
 * cut at maxHold, made every node unreachable). */
static void cancel_all(bm_race_t *r, int err, bool keep_witness)
{
    uint64_t now = keep_witness ? race_now(r) : 0;
    if (!keep_witness || !witness_kept(r, &r->wslot, now))
        cancel_wslot(r, err);
    for (size_t i = 0; i < r->n; i++) {
        slot_t *s = &r->slots[i];
        if (!s->xfer || (keep_witness && witness_kept(r, s, now)))
            continue;
        bm_upstream_cancel(s->xfer);
        s->xfer = NULL;
        r->in_flight--;
        s->node->stats.in_flight--;
        s->end_err = err;
    }
}

/* ---- transfers ---------------------------------------------------------------------------- */

static void on_xfer_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud);
static const bm_xfer_cbs_t xfer_cbs = {NULL, NULL, on_xfer_done};
static void take_answer(bm_race_t *r, slot_t *s, ans_t *an, uint64_t now);

/* A node that failed without a transfer (bad URL, could not start, out of memory). */
static void fail_slot(bm_race_t *r, slot_t *s, int err, uint64_t now)
{
    s->end_err = err;
    ans_t *an = ans_new();
    if (!an)
        return;
    an->a.node = s->node;
    an->a.err = err;
    an->a.arrived_ms = now;
    an->a.attempt = s->attempts ? s->attempts - 1 : 0;
    take_answer(r, s, an, now);
    ans_unref(an);
}

/* Asks the node of `s`. A failure to start counts as the node's answer. */
static void start_slot(bm_race_t *r, slot_t *s, uint64_t now)
{
    bm_race_engine_t *e = r->e;
    s->tried = true;
    s->repoll_at = 0;
    s->asked_ms = now;
    s->attempts++;
    bm_str_t url = BM_STR_INIT;
    int rc = bm_url_join_valid_base(&url, s->node->url, r->target);
    if (rc == 0) {
        uint64_t left = (r->hard_ms > now ? r->hard_ms - now : 1) + TRANSFER_BACKSTOP_MS;
        bm_xfer_req_t xr = {
            .method = r->method,
            .url = bm_str_data(&url),
            .headers = &r->req_hdrs,
            .extra = &s->node->extra,
            .body = r->req_body,
            .connect_timeout_ms = r->pol.connect_timeout_ms,
            .timeout_ms = r->pol.transfer_timeout_ms
                              ? r->pol.transfer_timeout_ms + TRANSFER_BACKSTOP_MS
                          : left > UINT32_MAX ? UINT32_MAX
                                              : (uint32_t)left,
            .max_response_bytes = r->pol.max_response_bytes,
        };
        s->xfer_us = bm_clock_mono_now_us(e->clock);
        s->xfer = bm_upstream_start(e->up, &xr, &xfer_cbs, s);
        if (!s->xfer)
            rc = BM_EIO;
    }
    bm_str_dispose(&url);
    if (s->xfer) {
        if (s == &r->wslot)
            r->wslot_running = true; /* beside the race: never part of `pending` */
        else
            r->in_flight++;
        s->node->stats.in_flight++;
        s->xfer_end = r->pol.transfer_timeout_ms ? now + r->pol.transfer_timeout_ms : 0;
        return;
    }
    bm_log_limited(&e->lim, BM_LOG_WARN, "race %s %s: cannot ask %s: %s", r->method, r->target,
                   s->node->id, rc == BM_EINVAL ? "invalid request target" : bm_strerror(rc));
    fail_slot(r, s, rc, now);
}

/* Cuts the transfers whose own limit (the policy's transfer_timeout_ms, on the engine's
 * clock) passed: each is its node's failure, BM_ETIMEDOUT, recorded in the pool as a
 * network error. The upstream client's own limit is only a backstop behind this one. */
static void expire_transfers(bm_race_t *r, uint64_t now)
{
    bm_race_engine_t *e = r->e;
    for (size_t i = 0; i < r->n && !r->closing && !e->dying; i++) {
        slot_t *s = &r->slots[i];
        if (!s->xfer || !s->xfer_end || now < s->xfer_end)
            continue;
        bm_upstream_cancel(s->xfer);
        s->xfer = NULL;
        s->xfer_end = 0;
        r->in_flight--;
        s->node->stats.in_flight--;
        uint64_t took_us = bm_clock_mono_now_us(e->clock) - s->xfer_us;
        bm_log_limited(&e->lim, BM_LOG_DEBUG, "race %s %s: %s: no answer within %u ms", r->method,
                       r->target, s->node->id, r->pol.transfer_timeout_ms);
        if (e->pool)
            bm_pool_record(e->pool, s->node, BM_OUTCOME_NET_ERROR, false, took_us,
                           bm_strerror(BM_ETIMEDOUT));
        if (r->closing || e->dying)
            return; /* a pool listener freed the engine */
        fail_slot(r, s, BM_ETIMEDOUT, now);
    }
}

/* The earliest time a running transfer is cut by its own limit (UINT64_MAX: none). */
static uint64_t next_transfer_end(const bm_race_t *r)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < r->n; i++)
        if (r->slots[i].xfer && r->slots[i].xfer_end && r->slots[i].xfer_end < next)
            next = r->slots[i].xfer_end;
    return next;
}

/* Forgets re-asks whose time is over. */
static void expire_repolls(bm_race_t *r, uint64_t now)
{
    for (size_t i = 0; i < r->n; i++) {
        slot_t *s = &r->slots[i];
        if (s->repoll_at && now >= s->repoll_end)
            s->repoll_at = 0;
    }
}

/* Starts what is due: every node at first (one at a time when sequential), then re-asks. */
static void pump(bm_race_t *r, uint64_t now)
{
    expire_repolls(r, now);
    if (r->has_wslot && !r->wslot.tried)
        start_slot(r, &r->wslot, now); /* the witness that is no candidate: once, beside */
    if (!r->pol.sequential) {
        for (size_t i = 0; i < r->n && r->state == RS_RUNNING; i++) {
            slot_t *s = &r->slots[i];
            if (s->xfer)
                continue;
            if (!s->tried || (s->repoll_at && s->repoll_at <= now))
                start_slot(r, s, now);
        }
        return;
    }
    /* one at a time, and an accepted answer ends the walk (no grace: nobody else runs) */
    while (r->state == RS_RUNNING && r->in_flight == 0 && !r->acc) {
        slot_t *next = NULL;
        for (size_t i = 0; i < r->n && !next; i++)
            if (!r->slots[i].tried)
                next = &r->slots[i];
        if (!next) { /* every node was asked: the earliest due re-ask */
            for (size_t i = 0; i < r->n; i++) {
                slot_t *s = &r->slots[i];
                if (s->repoll_at && s->repoll_at <= now &&
                    (!next || s->repoll_at < next->repoll_at))
                    next = s;
            }
        }
        if (!next)
            break;
        start_slot(r, next, now);
    }
}

/* ---- judging answers ------------------------------------------------------------------------ */

static void consider_fallback(bm_race_t *r, ans_t *an, int rank)
{
    an->rank = rank;
    if (!r->fallback || rank < r->fallback->rank)
        ans_set(&r->fallback, an);
}

/* A failure worth asking again (reask_failures): a 5xx, a 429, or a network error that a
 * later attempt may not have (not our own cancel, not a request we cannot even form). */
static bool retryable(const bm_race_answer_t *a)
{
    if (a->err)
        return a->err != BM_ECANCELED && a->err != BM_EINVAL && a->err != BM_ENOMEM;
    return a->status >= 500 || a->status == 429;
}

/* Asks a failed node again (reask_failures) until the hard timeout, at most once per
 * repoll_interval. */
static void schedule_retry(bm_race_t *r, slot_t *s, uint64_t now)
{
    uint64_t at = s->asked_ms + r->pol.repoll_interval_ms;
    if (at < now)
        at = now;
    if (at < r->hard_ms) {
        s->repoll_at = at;
        s->repoll_end = r->hard_ms;
    }
}

static void schedule_repoll(bm_race_t *r, slot_t *s, bool usable, uint64_t now)
{
    const bm_race_policy_t *p = &r->pol;
    if (p->repoll == BM_REPOLL_NONE)
        return;
    uint64_t at = s->asked_ms + p->repoll_interval_ms;
    if (at < now)
        at = now;
    uint64_t end = r->hard_ms;
    /* until-any-2xx re-asks a node whose 2xx was not usable past the deadline */
    if (p->deadline_ms && (p->repoll == BM_REPOLL_UNTIL_ACCEPTED || usable) && p->deadline_ms < end)
        end = p->deadline_ms;
    if (at < end) {
        s->repoll_at = at;
        s->repoll_end = end;
    }
}

/* Files a node's answer: it becomes the node's latest, and while the race runs it is
 * judged (the witness that is no candidate never is); `judged` says how. Never decides by
 * itself (evaluate does) and calls nothing but the predicates. */
static void take_answer(bm_race_t *r, slot_t *s, ans_t *an, uint64_t now)
{
    ans_set(&s->last, an);
    bool answer_2xx = !an->a.err && bm_status_2xx(an->a.status);
    an->a.judged = answer_2xx ? BM_RACE_UNJUDGED : BM_RACE_ERROR;
    if (r->state != RS_RUNNING || s == &r->wslot)
        return;
    const bm_race_policy_t *p = &r->pol;
    if (!answer_2xx) {
        if (!an->a.err)
            consider_fallback(r, an, rank_of(an->a.status));
        if (p->reask_failures && retryable(&an->a))
            schedule_retry(r, s, now);
        return;
    }
    if (!p->accept || p->accept(&an->a, p->ud)) {
        an->score = score_of(r, an);
        if (!r->acc) {
            ans_set(&r->acc, an);
            r->grace_end = now + p->grace_ms;
            if (p->deadline_ms && p->deadline_ms < r->grace_end)
                r->grace_end = p->deadline_ms;
        } else if (an->score > r->acc->score) {
            ans_set(&r->acc, an);
        }
        if (p->complete && p->complete(&an->a, p->ud))
            r->acc_done = true;
        an->a.judged = BM_RACE_ACCEPTED;
        return;
    }
    bool usable = !p->usable || p->usable(&an->a, p->ud);
    if (usable) {
        an->score = score_of(r, an);
        if (!r->usable || an->score > r->usable->score)
            ans_set(&r->usable, an);
    } else {
        consider_fallback(r, an, RANK_UNUSABLE_2XX);
    }
    an->a.judged = usable ? BM_RACE_USABLE : BM_RACE_REJECTED;
    schedule_repoll(r, s, usable, now);
}

/* True while something may still change the outcome. */
static bool pending(const bm_race_t *r)
{
    if (r->in_flight || r->ats)
        return true;
    for (size_t i = 0; i < r->n; i++) {
        const slot_t *s = &r->slots[i];
        if (s->repoll_at || !s->tried)
            return true;
    }
    return false;
}

void bm_race_describe(bm_str_t *m, const bm_race_answer_t *a)
{
    if (a->err) {
        bm_str_puts(m, bm_strerror(a->err));
        return;
    }
    if (bm_status_2xx(a->status)) {
        bm_str_printf(m, "%d, not usable", a->status);
        return;
    }
    bm_str_printf(m, "%d", a->status);
    struct json_object *j = NULL;
    const char *msg = NULL;
    if (a->body && bm_json_parse_buf(a->body, 64 * 1024, &j, NULL) == 0 && j)
        msg = bm_json_get_str(j, "/message");
    if (msg && *msg) {
        bm_str_puts(m, " ");
        size_t k = 0;
        for (const char *c = msg; *c && k < 120; c++, k++)
            bm_str_putc(m, (unsigned char)*c < 0x20 || *c == '"' || *c == '\\' ? ' ' : *c);
    }
    json_object_put(j);
}

/* The 503 answered when no node gave an HTTP answer (or, with name_failures, none a usable
 * or 4xx one): it names each node's failure. */
static ans_t *synthesize(bm_race_t *r)
{
    ans_t *an = &r->synth;
    if (an->refs)
        return an;
    an->refs = 1; /* the race's own; dropped in on_race_closed */
    an->embedded = true;
    bm_hdrs_init(&an->hdrs);
    an->a.headers = &an->hdrs;
    bool any_http = false;
    for (size_t i = 0; i < r->n; i++)
        any_http |= r->slots[i].last && !r->slots[i].last->a.err;
    bm_str_t m = BM_STR_INIT;
    if (r->n == 0)
        bm_str_puts(&m, "no upstream available");
    else if (any_http)
        bm_str_puts(&m, "no usable answer: ");
    else
        bm_str_puts(&m, "no upstream answered: ");
    for (size_t i = 0; i < r->n; i++) {
        const slot_t *s = &r->slots[i];
        bm_str_printf(&m, "%s%s: ", i ? "; " : "", s->node->id);
        if (s->last)
            bm_race_describe(&m, &s->last->a);
        else if (s->xfer)
            bm_str_puts(&m, "no answer yet");
        else if (!s->tried)
            bm_str_puts(&m, "not asked");
        else
            bm_str_puts(&m, bm_strerror(s->end_err ? s->end_err : BM_EIO));
    }
    an->a.body = bm_race_error_body(503, bm_str_data(&m));
    if (!an->a.body)
        an->a.body = bm_buf_ref(r->e->oom_body);
    bm_str_dispose(&m);
    an->a.status = 503;
    an->a.judged = BM_RACE_ERROR;
    an->a.arrived_ms = race_now(r);
    an->a.elapsed_us = bm_clock_mono_now_us(r->e->clock) - r->start_us;
    bm_hdrs_add_z(&an->hdrs, "Content-Type", "application/json");
    bm_log_limited(&r->e->lim, BM_LOG_WARN, "race %s %s: %.*s", r->method, r->target,
                   (int)an->a.body->len, an->a.body->data);
    return an;
}

static ans_t *best_in_hand(bm_race_t *r)
{
    if (r->acc)
        return r->acc;
    if (r->usable)
        return r->usable;
    if (r->fallback && (!r->pol.name_failures || r->fallback->rank == RANK_4XX))
        return r->fallback;
    return synthesize(r);
}

/* Chooses the answer. A read cancels the transfers it no longer needs. No callouts. */
static void decide(bm_race_t *r, ans_t *an)
{
    ans_set(&r->final, an);
    set_state(r, RS_DECIDED);
    drop_judgement(r);
    if (!r->pol.write && !r->pol.keep_losers)
        cancel_all(r, BM_ECANCELED, true);
}

/* Decides when the rules say so (see race.h). No callouts but the predicates. */
static void evaluate(bm_race_t *r, uint64_t now)
{
    if (r->state != RS_RUNNING)
        return;
    const bm_race_policy_t *p = &r->pol;
    expire_repolls(r, now);
    bool more = pending(r);
    if (r->acc) {
        if (p->sequential || r->acc_done || !p->score || p->grace_ms == 0 || now >= r->grace_end ||
            !more)
            decide(r, r->acc);
        return;
    }
    if (p->deadline_ms && now >= p->deadline_ms && r->usable) {
        decide(r, r->usable);
        return;
    }
    if (!more)
        decide(r, best_in_hand(r));
}

/* Ends what runs (hard timeout or drain) and decides with what is in hand. */
static void cut_race(bm_race_t *r, int err)
{
    size_t cut = r->in_flight;
    cancel_all(r, err, false);
    if (r->closing)
        return;
    for (size_t i = 0; i < r->n; i++)
        r->slots[i].repoll_at = 0;
    if (cut || r->state == RS_RUNNING)
        bm_log_limited(&r->e->lim, BM_LOG_INFO, "race %s %s: %s, %zu node(s) without an answer",
                       r->method, r->target, err == BM_ETIMEDOUT ? "hard timeout" : "drained", cut);
    if (r->state == RS_RUNNING)
        decide(r, best_in_hand(r));
}

/* ---- callouts ------------------------------------------------------------------------------ */

/* Gives the decision to every waiter. Runs from the loop only. */
static void deliver(bm_race_t *r)
{
    bm_race_engine_t *e = r->e;
    ans_t *f = r->final;
    r->final = NULL; /* our reference now */
    key_remove(r);
    set_state(r, RS_ANSWERED);
    r->delivering++;
    /* waiters that join from a callback are appended, and answered in this pass too */
    for (bm_link_t *l = r->waiters.next; l != &r->waiters; l = l->next) {
        bm_race_waiter_t *w = bm_list_entry(l, bm_race_waiter_t, link);
        if (w->left || w->answered)
            continue;
        w->answered = true;
        r->n_waiting--;
        w->fn(w, &f->a, w->ud);
        if (e->dying || r->closing)
            break;
    }
    r->delivering--;
    ans_unref(f);
    if (!r->closing)
        free_waiters(r);
}

static const bm_race_answer_t *fill_view(bm_race_t *r, bool all, size_t *n)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        const slot_t *s = &r->slots[i];
        if (s->last) {
            r->view[k++] = s->last->a;
        } else if (all) {
            r->view[k++] = (bm_race_answer_t){
                .node = s->node,
                .err = s->end_err ? s->end_err : BM_ECANCELED,
                .headers = &r->e->empty,
                .attempt = s->attempts ? s->attempts - 1 : 0,
                .judged = BM_RACE_ERROR,
            };
        }
    }
    *n = k;
    return r->view;
}

/* The race is over: run the completion and close. Runs from the loop only. */
static void finish(bm_race_t *r)
{
    bm_race_engine_t *e = r->e;
    set_state(r, RS_DONE);
    e->active--;
    if (r->pol.write)
        e->writes--;
    race_close(r);
    if (r->complete) {
        size_t n;
        const bm_race_answer_t *v = fill_view(r, true, &n);
        r->complete(r, v, n, r->complete_ud);
    }
    if (r->pol.write && !e->dying && e->draining && e->writes == 0)
        bm_timer_start(e->drain_timer, 0);
}

/* True while a transfer of the witness runs beside the race: its own, or its candidate's
 * first once the race decided (unless the policy keeps every loser anyway). */
static bool witness_running(const bm_race_t *r)
{
    if (r->wslot_running)
        return true;
    return r->state != RS_RUNNING && !r->pol.keep_losers && r->witness_i >= 0 &&
           r->slots[r->witness_i].xfer;
}

/* The witness's time is over: what still runs of it is cut. */
static void cut_witness(bm_race_t *r)
{
    cancel_wslot(r, BM_ECANCELED);
    if (r->state == RS_RUNNING || r->pol.keep_losers || r->witness_i < 0)
        return;
    slot_t *s = &r->slots[r->witness_i];
    if (!s->xfer)
        return;
    bm_upstream_cancel(s->xfer);
    s->xfer = NULL;
    s->xfer_end = 0;
    r->in_flight--;
    s->node->stats.in_flight--;
    s->end_err = BM_ECANCELED;
}

/* Arms the race's timer at its next point in time. */
static void arm(bm_race_t *r, uint64_t now)
{
    if (r->closing)
        return;
    uint64_t next = UINT64_MAX;
    switch (r->state) {
    case RS_DECIDED:
    case RS_CANCELLED:
        next = now;
        break;
    case RS_ANSWERED:
        next = r->in_flight || r->wslot_running ? r->hard_ms : now;
        if (r->in_flight && next_transfer_end(r) < next)
            next = next_transfer_end(r);
        break;
    case RS_RUNNING:
        next = r->hard_ms;
        if (next_transfer_end(r) < next)
            next = next_transfer_end(r);
        if (r->pol.deadline_ms > now && r->pol.deadline_ms < next)
            next = r->pol.deadline_ms;
        if (r->acc && r->grace_end < next)
            next = r->grace_end;
        /* a sequential race re-asks only between transfers: the end of the running one
         * moves it on, not the timer */
        for (size_t i = 0; i < r->n && !(r->pol.sequential && r->in_flight); i++)
            if (r->slots[i].repoll_at && r->slots[i].repoll_at < next)
                next = r->slots[i].repoll_at;
        for (const at_timer_t *t = r->ats; t; t = t->next)
            if (t->at_ms < next)
                next = t->at_ms;
        break;
    case RS_DONE:
        return;
    }
    if (witness_running(r) && r->witness_outlives && r->witness_until < next)
        next = r->witness_until > now ? r->witness_until : now;
    /* A wait measured on the monotonic clock from the race's own time (race_now). */
    bm_timer_start(r->timer, next > now ? next - now : 0);
}

/*
 * Moves the race on after any event: starts what is due, decides, and, from the loop
 * only, delivers the answer and completes. From an API call it only arms the timer.
 */
static void advance(bm_race_t *r, bool from_loop)
{
    if (r->closing)
        return;
    uint64_t now = race_now(r);
    if (r->state == RS_RUNNING) {
        pump(r, now);
        evaluate(r, now);
    }
    if (!from_loop) {
        arm(r, now);
        return;
    }
    if (r->state == RS_DECIDED) {
        deliver(r);
        if (r->closing || r->e->dying)
            return;
    }
    if ((r->state == RS_ANSWERED || r->state == RS_CANCELLED) && r->in_flight == 0 &&
        !r->wslot_running) {
        finish(r);
        return;
    }
    arm(r, now);
}

static void on_tick(bm_timer_t *t, void *arg)
{
    (void)t;
    bm_race_t *r = arg;
    bm_race_engine_t *e = r->e;
    if (r->closing)
        return;
    uint64_t now = race_now(r);
    if (r->witness_outlives && now >= r->witness_until && witness_running(r))
        cut_witness(r);
    if (now >= r->hard_ms && (r->state == RS_RUNNING || r->in_flight || r->wslot_running)) {
        cut_race(r, BM_ETIMEDOUT);
        if (r->closing)
            return;
    }
    expire_transfers(r, now);
    if (r->closing || e->dying)
        return;
    while (r->state == RS_RUNNING) {
        at_timer_t **due_pp = NULL; /* the earliest due timer */
        for (at_timer_t **pp = &r->ats; *pp; pp = &(*pp)->next)
            if ((*pp)->at_ms <= now && (!due_pp || (*pp)->at_ms < (*due_pp)->at_ms))
                due_pp = pp;
        if (!due_pp)
            break;
        at_timer_t *due = *due_pp;
        *due_pp = due->next;
        void (*fn)(bm_race_t *, void *) = due->fn;
        void *ud = due->ud;
        free(due);
        fn(r, ud);
        if (r->closing || e->dying)
            return;
    }
    advance(r, true);
}

static void on_xfer_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    slot_t *s = ud;
    bm_race_t *r = s->r;
    bm_race_engine_t *e = r->e;
    if (s->xfer != x)
        return;
    s->xfer = NULL;
    s->xfer_end = 0;
    bool witnessed = s == &r->wslot;
    if (witnessed)
        r->wslot_running = false;
    else
        r->in_flight--;
    s->node->stats.in_flight--;
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    const char *detail =
        res->err ? (res->detail && *res->detail ? res->detail : bm_strerror(res->err)) : NULL;
    if (res->err)
        bm_log_limited(&e->lim, BM_LOG_DEBUG, "race %s %s: %s: %s", r->method, r->target,
                       s->node->id, detail);
    if (e->pool)
        bm_pool_record(e->pool, s->node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us,
                       detail);
    if (r->closing || e->dying)
        return;
    uint64_t now = race_now(r);
    ans_t *an = ans_new();
    if (!an) {
        s->end_err = BM_ENOMEM;
    } else {
        an->a.node = s->node;
        an->a.err = res->err;
        if (!an->a.err && res->status < 100)
            an->a.err = BM_EPROTO; /* cannot happen with libcurl; never an answer without status */
        if (!an->a.err) {
            an->a.status = res->status;
            an->a.body = bm_buf_ref(res->body);
            if (!an->a.body)
                an->a.body = bm_buf_new(0);
            if (!an->a.body)
                an->a.err = BM_ENOMEM;
            else
                copy_response_headers(&an->hdrs, res->headers);
        }
        if (an->a.err)
            an->a.status = 0;
        an->a.elapsed_us = res->elapsed_us;
        an->a.arrived_ms = now;
        an->a.attempt = s->attempts ? s->attempts - 1 : 0;
        take_answer(r, s, an, now);
        void (*see)(bm_race_t *, const bm_race_answer_t *, void *) =
            witnessed ? r->pol.witnessed : r->pol.observe;
        if (see) {
            see(r, &an->a, r->pol.ud);
            if (r->closing || e->dying) {
                ans_unref(an);
                return;
            }
        }
        ans_unref(an);
    }
    advance(r, true);
}

/* ---- engine ----------------------------------------------------------------------------- */

static void on_drain(bm_timer_t *t, void *arg)
{
    (void)t;
    bm_race_engine_t *e = arg;
    if (e->dying || !e->draining)
        return;
    uint64_t now = bm_clock_mono_now(e->clock);
    if (e->writes && now >= e->drain_until) {
        for (;;) {
            bm_race_t *r = NULL;
            for (bm_link_t *l = e->races.next; l != &e->races && !r; l = l->next) {
                bm_race_t *c = bm_list_entry(l, bm_race_t, link);
                if (c->pol.write && !c->drain_cut && !c->closing)
                    r = c;
            }
            if (!r)
                break;
            r->drain_cut = true;
            cut_race(r, BM_ECANCELED);
            if (e->dying)
                return;
            advance(r, true);
            if (e->dying)
                return;
        }
    }
    if (e->writes == 0) {
        e->draining = false;
        void (*done)(bm_race_engine_t *, void *) = e->drain_done;
        void *ud = e->drain_ud;
        e->drain_done = NULL;
        e->drain_ud = NULL;
        if (done)
            done(e, ud);
        return;
    }
    bm_timer_start(e->drain_timer, e->drain_until > now ? e->drain_until - now : 0);
}

bm_race_engine_t *bm_race_engine_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool)
{
    if (!clock || !up)
        return NULL;
    bm_race_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    bm_link_init(&e->races);
    e->oom_body = bm_buf_from_str("{\"code\":503,\"message\":\"out of memory\"}");
    if (!e->oom_body) {
        free(e);
        return NULL;
    }
    e->clock = clock;
    e->up = up;
    e->pool = pool;
    bm_hdrs_init(&e->empty);
    e->drain_timer = bm_timer_new(clock, on_drain, e);
    if (!e->drain_timer) {
        bm_buf_unref(e->oom_body);
        free(e);
        return NULL;
    }
    e->open_handles = 1;
    return e;
}

static void on_engine_closed(void *ud)
{
    engine_release(ud);
}

void bm_race_engine_free(bm_race_engine_t *e)
{
    if (!e || e->dying)
        return;
    e->dying = true;
    e->draining = false;
    while (!bm_list_empty(&e->races)) {
        bm_race_t *r = bm_list_first(&e->races, bm_race_t, link);
        cancel_wslot(r, BM_ECANCELED);
        for (size_t i = 0; i < r->n; i++) {
            slot_t *s = &r->slots[i];
            if (!s->xfer)
                continue;
            bm_upstream_cancel(s->xfer);
            s->xfer = NULL;
            r->in_flight--;
            s->node->stats.in_flight--;
        }
        race_close(r); /* unlinks it */
    }
    bm_timer_close(e->drain_timer, on_engine_closed, e);
}

size_t bm_race_engine_active(const bm_race_engine_t *e)
{
    return e ? e->active : 0;
}

void bm_race_engine_drain(bm_race_engine_t *e, uint32_t bound_ms,
                          void (*done)(bm_race_engine_t *e, void *ud), void *ud)
{
    if (!e || e->dying)
        return;
    uint64_t until = bm_clock_mono_now(e->clock) + bound_ms;
    if (!e->draining || until < e->drain_until)
        e->drain_until = until;
    e->draining = true;
    e->drain_done = done;
    e->drain_ud = ud;
    bm_timer_start(e->drain_timer, 0);
}

/* ---- races ------------------------------------------------------------------------------ */

bm_race_t *bm_race_start(bm_race_engine_t *e, const bm_race_request_t *req, bm_node_t *const *nodes,
                         size_t n, const bm_race_policy_t *policy, const char *key,
                         bm_race_complete_fn complete, void *complete_ud)
{
    if (!e || e->dying || !req || !req->method || !req->target || !policy || (n && !nodes))
        return NULL;
    if (n > (SIZE_MAX - sizeof(bm_race_t)) / sizeof(slot_t))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!nodes[i] || !nodes[i]->url)
            return NULL;
    bm_race_t *r = calloc(1, sizeof *r + n * sizeof(slot_t));
    if (!r)
        return NULL;
    bm_link_init(&r->link);
    bm_link_init(&r->waiters);
    r->e = e;
    r->n = n;
    bm_hdrs_init(&r->req_hdrs);
    r->method = strdup(req->method);
    r->target = strdup(req->target);
    r->key = key ? strdup(key) : NULL;
    r->view = calloc(n ? n : 1, sizeof *r->view);
    bool oom = !r->method || !r->target || (key && !r->key) || !r->view;
    if (!oom && req->headers)
        oom = bm_hdrs_copy(&r->req_hdrs, req->headers) != 0;
    r->req_body = bm_buf_ref(req->body);
    if (oom) {
        race_free_unstarted(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        r->slots[i].r = r;
        r->slots[i].node = nodes[i];
    }
    r->pol = *policy;
    if (!r->pol.repoll_interval_ms)
        r->pol.repoll_interval_ms = DEFAULT_REPOLL_MS;
    if (!r->pol.connect_timeout_ms)
        r->pol.connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    r->complete = complete;
    r->complete_ud = complete_ud;
    r->timer = bm_timer_new(e->clock, on_tick, r);
    if (!r->timer) {
        race_free_unstarted(r);
        return NULL;
    }
    r->start_ms = bm_clock_wall_now(e->clock); /* the only wall clock read: see race_now */
    r->start_us = bm_clock_mono_now_us(e->clock);
    if (r->pol.hard_timeout_ms)
        r->hard_ms = r->pol.hard_timeout_ms;
    else if (r->pol.deadline_ms)
        r->hard_ms = r->pol.deadline_ms + HARD_AFTER_DEADLINE_MS;
    else
        r->hard_ms = r->start_ms + HARD_WITHOUT_DEADLINE_MS;
    r->witness_i = -1;
    if (r->pol.witness && r->pol.witness->url) {
        for (size_t i = 0; i < n && r->witness_i < 0; i++)
            if (nodes[i] == r->pol.witness)
                r->witness_i = (int)i;
        if (r->witness_i < 0) {
            r->has_wslot = true;
            r->wslot.r = r;
            r->wslot.node = r->pol.witness;
        }
        r->witness_until = r->pol.witness_until_ms ? r->pol.witness_until_ms : r->pol.deadline_ms;
        r->witness_outlives = r->witness_until != 0; /* else it ends with the decision */
    }

    e->open_handles++;
    bm_list_push_front(&e->races, &r->link);
    e->active++;
    if (r->pol.write)
        e->writes++;
    if (r->key) {
        uint32_t h = key_hash(r->key);
        r->k_next = e->keys[h];
        e->keys[h] = r;
        r->keyed = true;
    }
    set_state(r, RS_RUNNING);
    advance(r, false);
    return r;
}

bm_race_t *bm_race_find(bm_race_engine_t *e, const char *key)
{
    if (!e || !key || e->dying)
        return NULL;
    for (bm_race_t *r = e->keys[key_hash(key)]; r; r = r->k_next)
        if ((r->state == RS_RUNNING || r->state == RS_DECIDED) && strcmp(r->key, key) == 0)
            return r;
    return NULL;
}

uint64_t bm_race_now_ms(const bm_race_t *r)
{
    return race_now(r);
}

uint64_t bm_race_started_ms(const bm_race_t *r)
{
    return r->start_ms;
}

void *bm_race_ctx(const bm_race_t *r)
{
    return r ? r->pol.ud : NULL;
}

bm_race_waiter_t *bm_race_wait(bm_race_t *r, bm_race_answer_fn fn, void *ud)
{
    if (!r || !fn || r->closing || r->e->dying ||
        (r->state != RS_RUNNING && r->state != RS_DECIDED))
        return NULL;
    /* malloc, not calloc: one waiter per client answer, and glibc 2.36's calloc skips the
     * thread cache (about 200 instructions against 30) */
    bm_race_waiter_t *w = malloc(sizeof *w);
    if (!w)
        return NULL;
    *w = (bm_race_waiter_t){.r = r, .fn = fn, .ud = ud};
    bm_list_push_back(&r->waiters, &w->link);
    r->n_waiting++;
    return w;
}

/* A read race nobody waits for any more: stop its transfers, complete from the loop. */
static void cancel_race(bm_race_t *r)
{
    set_state(r, RS_CANCELLED);
    key_remove(r);
    cancel_all(r, BM_ECANCELED, false);
    drop_judgement(r);
    ans_set(&r->final, NULL);
    arm(r, race_now(r));
}

void bm_race_leave(bm_race_waiter_t *w)
{
    if (!w || w->answered || w->left)
        return;
    bm_race_t *r = w->r;
    w->left = true;
    r->n_waiting--;
    if (!r->delivering) {
        bm_link_unlink(&w->link);
        free(w);
    }
    if (r->n_waiting == 0 && !r->pol.write && !r->closing &&
        (r->state == RS_RUNNING || r->state == RS_DECIDED))
        cancel_race(r);
}

size_t bm_race_waiters(const bm_race_t *r)
{
    return r ? r->n_waiting : 0;
}

const bm_race_answer_t *bm_race_answers(const bm_race_t *r, size_t *n)
{
    size_t k = 0;
    const bm_race_answer_t *v = NULL;
    if (r)
        v = fill_view((bm_race_t *)r, false, &k);
    if (n)
        *n = k;
    return v;
}

int bm_race_decide(bm_race_t *r, const bm_race_answer_t *a)
{
    if (!r || !a)
        return BM_EINVAL;
    if (r->state != RS_RUNNING || r->closing)
        return BM_ECLOSED;
    ans_t *an = NULL;
    for (size_t i = 0; i < r->n && !an; i++) {
        slot_t *s = &r->slots[i];
        if (s->last && (a == &s->last->a || (a->node && a->node == s->node)))
            an = s->last;
    }
    if (!an || an->a.err)
        return BM_EINVAL;
    decide(r, an);
    arm(r, race_now(r));
    return 0;
}

int bm_race_at(bm_race_t *r, uint64_t at_ms, void (*fn)(bm_race_t *r, void *ud), void *ud)
{
    if (!r || !fn)
        return BM_EINVAL;
    if (r->state != RS_RUNNING || r->closing)
        return BM_ECLOSED;
    at_timer_t *t = calloc(1, sizeof *t);
    if (!t)
        return BM_ENOMEM;
    t->at_ms = at_ms;
    t->fn = fn;
    t->ud = ud;
    t->next = r->ats;
    r->ats = t;
    arm(r, race_now(r));
    return 0;
}
