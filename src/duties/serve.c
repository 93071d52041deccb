/* SPDX-License-Identifier: MIT */
/*
 * serve: a client request served from a race (see serve.h for the contract).
 *
 * How it is built:
 *   - one record per race (srace_t), allocated when serve starts the race and owned by it
 *     (the policy's `ud_dispose`): the policy's context is copied at its end, so the
 *     pointer the predicates get as `ud` leads back to the record. The record also holds
 *     the callbacks that run at completion and, when the request is answered from every
 *     node's answer, that request;
 *   - one record per waiting request (sreq_t), freed when its answer went out or its client
 *     went away (which leaves the race);
 *   - when the policy asks for one, the record of what the race served (srec_t, inside the
 *     race's record): the race's `observe` (before the policy's own, which it calls) files
 *     each node's answer class until the answer goes out and the witness's first answer
 *     whenever it comes (`witnessed` when the witness is no candidate); the first waiter's
 *     answer fixes what was served; the completion hands the record to its sink.
 */
#include "duties/serve.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

typedef struct srec {
    bm_serve_record_t cfg;
    bm_served_t out;
    uint64_t witness_until; /* the witness's answer counts when it came by then (wall ms) */
    void (*observe)(bm_race_t *r, const bm_race_answer_t *a, void *ud); /* the policy's */
    bool frozen;         /* the answer went out: the classes are what they were then */
    bool first_known;    /* the witness's first answer arrived */
    bool first_unjudged; /* ... after the decision or beside the race: classed at the end */
} srec_t;

/* A mirror of a race without a hard timeout of its own ends this long after its deadline:
 * an answer after that counts as no answer (the race's own default is 10 s). */
#define BM_SERVE_MIRROR_AFTER_DEADLINE_MS 2000

typedef struct srace {
    bm_shadow_mirror_t *mirror; /* the race's mirror to the shadow nodes, or NULL */
    void (*ctx_dispose)(void *ctx);
    void (*respond)(bm_req_t *req, const bm_race_answer_t *answers, size_t n, void *ctx);
    void (*on_complete)(const bm_race_answer_t *answers, size_t n, void *ctx);
    bm_req_t *req; /* answered by `respond`: set while its client waits */
    bm_race_t *race;
    bool has_rec;
    srec_t rec;
    alignas(max_align_t) unsigned char ctx[];
} srace_t;

typedef struct sreq {
    bm_req_t *req;
    bm_race_waiter_t *w;
    void *ctx;
    void (*on_answer)(bm_req_t *req, const bm_race_answer_t *a, void *ctx);
} sreq_t;

static srace_t *srace_of(void *ctx)
{
    return (srace_t *)((unsigned char *)ctx - offsetof(srace_t, ctx));
}

bm_node_t *bm_serve_witness_node(bm_pool_t *pool)
{
    for (size_t i = 0; i < bm_pool_count(pool); i++)
        if (!bm_pool_node(pool, i)->shadow)
            return bm_pool_node(pool, i);
    return NULL;
}

const char *bm_answer_class_name(bm_answer_class_t c)
{
    static const char *const names[] = {"not_asked", "fresh", "stale", "error", "hung"};
    return (unsigned)c < BM_ANSWER_CLASS_COUNT ? names[c] : "?";
}

const char *bm_duty_read_name(bm_duty_read_t d)
{
    static const char *const names[] = {"attestation_data", "head_root", "payload_attestation_data",
                                        "block"};
    return (unsigned)d < BM_DUTY_READ_COUNT ? names[d] : "?";
}

/* ---- the record of what was served --------------------------------------------------------- */

static bm_answer_class_t class_of(bm_race_judged_t how)
{
    switch (how) { /* an unjudged 2xx: stale until the end tells (record_emit) */
    case BM_RACE_ACCEPTED:
        return BM_ANSWER_FRESH;
    case BM_RACE_USABLE:
    case BM_RACE_UNJUDGED:
        return BM_ANSWER_STALE;
    default:
        return BM_ANSWER_ERROR;
    }
}

/* An answer as the record keeps it. */
static void keep_answer(srace_t *sr, const bm_race_answer_t *a, bm_served_answer_t *out)
{
    srec_t *rc = &sr->rec;
    memset(out, 0, sizeof *out);
    out->index = -1;
    out->status = a->err ? 0 : a->status;
    if (!a->err && a->status >= 200 && a->status < 300 && rc->cfg.root_of)
        out->has_root = rc->cfg.root_of(a, sr->ctx, out->root, &out->index) == 0;
    if (!out->has_root)
        out->index = -1;
    uint64_t started = rc->out.started_ms;
    out->ms = a->arrived_ms > started ? (uint32_t)(a->arrived_ms - started) : 0;
}

/* Files an answer: each node's latest class until the answer goes out; the witness's first
 * answer, when it came by the witness's time. */
static void record_answer(srace_t *sr, const bm_race_answer_t *a)
{
    srec_t *rc = &sr->rec;
    if (!a->node)
        return;
    size_t i = (size_t)a->node->index;
    if (!rc->frozen && a->judged != BM_RACE_UNJUDGED && i < rc->out.n_nodes)
        rc->out.classes[i] = (uint8_t)class_of(a->judged);
    if (a->node == rc->cfg.witness && a->attempt == 0 && !rc->first_known &&
        (!rc->witness_until || a->arrived_ms <= rc->witness_until || !rc->frozen)) {
        rc->first_known = true;
        rc->first_unjudged = a->judged == BM_RACE_UNJUDGED;
        keep_answer(sr, a, &rc->out.first);
        rc->out.first.cls = class_of(a->judged);
    }
}

/* race.h `observe`: the record first, then the policy's own observer. */
static void on_observe(bm_race_t *r, const bm_race_answer_t *a, void *ctx)
{
    srace_t *sr = srace_of(ctx);
    record_answer(sr, a);
    if (sr->rec.observe)
        sr->rec.observe(r, a, ctx);
}

/* race.h `witnessed`: the answer of the witness that is no candidate. */
static void on_witnessed(bm_race_t *r, const bm_race_answer_t *a, void *ctx)
{
    (void)r;
    record_answer(srace_of(ctx), a);
}

/* The first waiter's answer is what the race served. */
static void record_served(srace_t *sr, const bm_race_answer_t *a)
{
    srec_t *rc = &sr->rec;
    rc->out.requests++;
    if (rc->frozen)
        return;
    rc->frozen = true;
    keep_answer(sr, a, &rc->out.served);
    size_t i = a->node ? (size_t)a->node->index : SIZE_MAX;
    rc->out.node = a->node ? a->node->index : -1;
    rc->out.served.cls =
        i < rc->out.n_nodes ? (bm_answer_class_t)rc->out.classes[i] : BM_ANSWER_ERROR;
    uint64_t now = bm_race_now_ms(sr->race);
    rc->out.race_ms = now > rc->out.started_ms ? (uint32_t)(now - rc->out.started_ms) : 0;
}

/* The race completed: the witness's class is settled and the record goes to its sink. */
static void record_emit(srace_t *sr)
{
    srec_t *rc = &sr->rec;
    if (!rc->out.requests || !rc->cfg.fn)
        return; /* nothing was served: every client left */
    bm_served_answer_t *f = &rc->out.first;
    if (rc->cfg.witness && !rc->first_known) {
        memset(f, 0, sizeof *f);
        f->index = -1;
        f->cls = BM_ANSWER_HUNG;
    } else if (rc->first_unjudged && f->status >= 200 && f->status < 300) {
        /* not judged by the race: fresh when it is what a fresh answer was served with */
        const bm_served_answer_t *s = &rc->out.served;
        bool same = s->cls == BM_ANSWER_FRESH && s->has_root == f->has_root &&
                    (!f->has_root || memcmp(s->root, f->root, 32) == 0) && s->index == f->index &&
                    s->status == f->status;
        f->cls = same ? BM_ANSWER_FRESH : BM_ANSWER_STALE;
    }
    rc->cfg.fn(&rc->out, rc->cfg.ud);
}

/* Starts the record of a race over `nodes`: its candidates are asked, the others not. */
static void record_init(srace_t *sr, const bm_serve_t *s)
{
    srec_t *rc = &sr->rec;
    sr->has_rec = true;
    rc->cfg = *s->record;
    rc->out.duty = rc->cfg.duty;
    rc->out.slot = rc->cfg.slot;
    rc->out.node = -1;
    rc->out.n_nodes = rc->cfg.n_nodes < BM_SERVED_MAX_NODES ? rc->cfg.n_nodes : BM_SERVED_MAX_NODES;
    rc->out.first_node = rc->cfg.witness ? rc->cfg.witness->index : -1;
    rc->out.served.index = rc->out.first.index = -1;
    rc->witness_until =
        s->policy.witness_until_ms ? s->policy.witness_until_ms : s->policy.deadline_ms;
    rc->observe = s->policy.observe;
    for (size_t i = 0; i < s->n; i++) {
        size_t k = (size_t)s->nodes[i]->index;
        if (k < rc->out.n_nodes)
            rc->out.classes[k] = BM_ANSWER_HUNG; /* asked: hung until it answers */
    }
}

void bm_serve_reply(bm_req_t *req, const bm_race_answer_t *a)
{
    int status = a->status >= 200 && a->status <= 599 ? a->status : 502;
    bm_resp_send(req, status, NULL, a->body, a->headers);
}

/* The race is freed (race.h ud_dispose): the context, the mirror's reference, the record. */
static void srace_dispose(void *ctx)
{
    srace_t *sr = srace_of(ctx);
    if (sr->ctx_dispose)
        sr->ctx_dispose(ctx);
    bm_shadow_release(sr->mirror);
    free(sr);
}

static void on_race_complete(bm_race_t *r, const bm_race_answer_t *answers, size_t n, void *ud)
{
    srace_t *sr = ud;
    (void)r;
    bm_req_t *req = sr->req;
    sr->req = NULL;
    if (sr->respond)
        bm_shadow_served(sr->mirror, NULL); /* built from every node's: nothing to compare */
    if (req)
        sr->respond(req, answers, n, sr->ctx);
    if (sr->on_complete)
        sr->on_complete(answers, n, sr->ctx);
    if (sr->has_rec)
        record_emit(sr);
}

/* A client answered from every node's answer went away: the race runs on without it. */
static void on_every_abort(bm_req_t *req, void *ud)
{
    srace_t *sr = ud;
    sr->req = NULL;
    bm_resp_end(req);
}

static void on_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    sreq_t *q = ud;
    (void)w;
    srace_t *sr = srace_of(q->ctx);
    bm_shadow_served(sr->mirror, a); /* the first waiter's answer counts */
    if (sr->has_rec)
        record_served(sr, a);
    if (a->node)
        bm_req_add_upstream(q->req, a->node->index);
    if (q->on_answer)
        q->on_answer(q->req, a, q->ctx);
    bm_serve_reply(q->req, a);
    free(q);
}

static void on_client_abort(bm_req_t *req, void *ud)
{
    sreq_t *q = ud;
    bm_race_leave(q->w);
    bm_resp_end(req);
    free(q);
}

/* What the context holds, when no race took it. */
static void drop_ctx(const bm_serve_t *s)
{
    if (s->ctx_dispose)
        s->ctx_dispose(s->ctx);
}

/* Mirrors the race of `s` to the shadow nodes: cut when the race's own hard timeout cuts it
 * (or a while after its deadline), in time by its deadline (without one, by its end: a
 * duties race serves whatever comes by then). */
static bm_shadow_mirror_t *start_mirror(const bm_serve_t *s, const bm_race_request_t *rq)
{
    const bm_race_policy_t *p = &s->policy;
    uint64_t end = p->hard_timeout_ms;
    if (!end && p->deadline_ms)
        end = p->deadline_ms + BM_SERVE_MIRROR_AFTER_DEADLINE_MS;
    uint64_t by = p->deadline_ms ? p->deadline_ms : end;
    return bm_shadow_mirror(s->shadow, rq, &s->shadow_read, by, end, p->connect_timeout_ms);
}

/* Starts the race of `s` for `req`; the race takes the context. NULL on failure (then the
 * context is still the caller's). */
static bm_race_t *start(bm_race_engine_t *e, bm_req_t *req, const bm_serve_t *s, bool every)
{
    srace_t *sr = calloc(1, sizeof *sr + s->ctx_size);
    if (!sr)
        return NULL;
    if (s->ctx_size)
        memcpy(sr->ctx, s->ctx, s->ctx_size);
    sr->ctx_dispose = s->ctx_dispose;
    sr->respond = every ? s->respond : NULL;
    sr->on_complete = s->on_complete;
    bm_race_policy_t pol = s->policy;
    pol.ud = sr->ctx;
    pol.ud_dispose = srace_dispose;
    if (s->record && !every) {
        record_init(sr, s);
        pol.observe = on_observe;
        pol.witnessed = on_witnessed;
        /* an unreachable first node is not asked beside the race: beaconmux judged within
         * the slot that it does not answer (a stopped process would only queue the request
         * and answer it stale on resume); the record counts it as no answer, which is what a
         * client asking it alone got */
        bm_node_t *w = s->record->witness;
        pol.witness = w && w->state != BM_NODE_UNREACHABLE ? w : NULL;
    }
    bm_race_request_t rq = {
        .method = bm_req_method(req),
        .target = bm_req_target(req),
        .headers = bm_req_headers(req),
        .body = s->forward_body ? bm_req_body(req) : NULL,
    };
    bool completes = every || s->on_complete || sr->has_rec;
    bm_race_t *r = bm_race_start(e, &rq, s->nodes, s->n, &pol, every ? NULL : s->key,
                                 completes ? on_race_complete : NULL, sr);
    if (!r) {
        free(sr); /* not started: the context was never the race's */
        return NULL;
    }
    sr->race = r;
    sr->rec.out.started_ms = bm_race_started_ms(r);
    if (every) {
        sr->req = req;
        bm_req_on_abort(req, on_every_abort, sr);
    }
    if (s->shadow)
        sr->mirror = start_mirror(s, &rq);
    return r;
}

bm_race_t *bm_serve(bm_race_engine_t *e, bm_req_t *req, const bm_serve_t *s, bool *joined)
{
    bool every = s->respond != NULL;
    if (joined)
        *joined = false;
    if (every) {
        bm_race_t *r = start(e, req, s, true);
        if (!r) {
            drop_ctx(s);
            bm_resp_error(req, 503, "cannot start a race");
        }
        return r;
    }
    sreq_t *q = malloc(sizeof *q); /* not calloc: see bm_race_wait */
    if (!q) {
        drop_ctx(s);
        bm_resp_error(req, 503, "out of memory");
        return NULL;
    }
    *q = (sreq_t){.req = req, .on_answer = s->on_answer};
    bm_race_t *r = s->key ? bm_race_find(e, s->key) : NULL;
    if (r && (q->w = bm_race_wait(r, on_answer, q)) != NULL) {
        drop_ctx(s); /* the running race judges with its own */
        if (joined)
            *joined = true;
    } else {
        r = start(e, req, s, false);
        if (!r) {
            drop_ctx(s);
            free(q);
            bm_resp_error(req, 503, "cannot start a race");
            return NULL;
        }
        q->w = bm_race_wait(r, on_answer, q);
        if (!q->w) {
            /* allocation failure only: the race has no waiter and ends by itself (a read
             * without waiters is never answered; its completion and context go with it) */
            free(q);
            bm_resp_error(req, 503, "out of memory");
            return NULL;
        }
    }
    q->ctx = bm_race_ctx(r);
    bm_req_on_abort(req, on_client_abort, q);
    return r;
}
