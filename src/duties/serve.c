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
 *     went away (which leaves the race).
 */
#include "duties/serve.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

/* A mirror of a race without a hard timeout of its own ends this long after its deadline:
 * an answer after that counts as no answer (the race's own default is 10 s). */
#define BM_SERVE_MIRROR_AFTER_DEADLINE_MS 2000

typedef struct srace {
    bm_shadow_mirror_t *mirror; /* the race's mirror to the shadow nodes, or NULL */
    void (*ctx_dispose)(void *ctx);
    void (*respond)(bm_req_t *req, const bm_race_answer_t *answers, size_t n, void *ctx);
    void (*on_complete)(const bm_race_answer_t *answers, size_t n, void *ctx);
    bm_req_t *req; /* answered by `respond`: set while its client waits */
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
    bm_shadow_served(srace_of(q->ctx)->mirror, a); /* the first waiter's answer counts */
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
    bm_race_request_t rq = {
        .method = bm_req_method(req),
        .target = bm_req_target(req),
        .headers = bm_req_headers(req),
        .body = s->forward_body ? bm_req_body(req) : NULL,
    };
    bool completes = every || s->on_complete;
    bm_race_t *r = bm_race_start(e, &rq, s->nodes, s->n, &pol, every ? NULL : s->key,
                                 completes ? on_race_complete : NULL, sr);
    if (!r) {
        free(sr); /* not started: the context was never the race's */
        return NULL;
    }
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
    sreq_t *q = calloc(1, sizeof *q);
    if (!q) {
        drop_ctx(s);
        bm_resp_error(req, 503, "out of memory");
        return NULL;
    }
    q->req = req;
    q->on_answer = s->on_answer;
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
