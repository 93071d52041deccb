/* SPDX-License-Identifier: MIT */
/*
 * events_out: the node side of GET /eth/v1/events. Each event is rendered once per wire
 * style and the same buffer is written to every subscriber of that style. The wire habits
 * of real clients are reproduced on request: "event:x" without the space (Lighthouse),
 * events split across chunks at random byte positions with CRLF line ends (written as
 * separate chunks a millisecond apart, so they reach the socket as separate segments),
 * streams that close now and then (sse-drop) and ":" keep-alive comments. Two habits of
 * slow starters: the response head written only together with the first event, and no
 * comments at all (sse-head-with-event: Lodestar, whose Node.js server sends the head with
 * the first body bytes), and nothing written for a while after the request, the events of
 * that while held and written at its end (sse-first-event-late).
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "sim.h"

#define FRAG_GAP_MS 1
#define MAX_HELD 256 /* events held in a quiet start; older ones are dropped beyond */

void bs_sim_keepalive_update(bs_simnode_t *sn);

struct bs_sub {
    bm_link_t link; /* on its node's subs */
    bs_simnode_t *sn;
    bm_req_t *req;
    uint64_t topics;
    bm_buf_t **queue; /* fragments waiting for the gap timer */
    size_t nqueue, capqueue;
    uv_timer_t timer; /* the end of a quiet start, then the fragment gaps */
    bool timer_init;
    bool ended;
    bool lazy_head;       /* the response head waits for the first event */
    bool head_out;        /* the response head was started */
    uint64_t quiet_until; /* nothing is written before this (wall ms; 0: not quiet) */
    bm_buf_t **held;      /* rendered events of the quiet start, oldest first */
    size_t nheld;
};

static void update_mask(bs_simnode_t *sn)
{
    uint64_t m = 0;
    for (bm_link_t *l = sn->subs.next; l != &sn->subs; l = l->next)
        m |= bm_list_entry(l, bs_sub_t, link)->topics;
    sn->node.topic_mask = m;
    bs_sim_keepalive_update(sn);
}

static void sub_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

/* Starts the response head (200, an event stream), once. */
static void head_out(bs_sub_t *s)
{
    if (s->head_out)
        return;
    s->head_out = true;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "text/event-stream");
    bm_hdrs_add_z(&h, "Cache-Control", "no-cache");
    bm_resp_start(s->req, 200, &h, -1);
    bm_hdrs_dispose(&h);
}

static void drop_held(bs_sub_t *s)
{
    for (size_t i = 0; i < s->nheld; i++)
        bm_buf_unref(s->held[i]);
    free(s->held);
    s->held = NULL;
    s->nheld = 0;
}

/* Unlinks, ends the response (abort: close at once) and frees the subscriber. */
static void sub_finish(bs_sub_t *s, bool abort)
{
    bs_simnode_t *sn = s->sn;
    bm_link_unlink(&s->link);
    sn->nsubs--;
    update_mask(sn);
    if (!s->ended) {
        s->ended = true;
        bm_req_on_abort(s->req, NULL, NULL);
        head_out(s); /* a stream that never wrote anything ends like any other */
        if (abort)
            bm_resp_abort(s->req);
        else
            bm_resp_end(s->req);
    }
    for (size_t i = 0; i < s->nqueue; i++)
        bm_buf_unref(s->queue[i]);
    free(s->queue);
    s->queue = NULL;
    s->nqueue = 0;
    drop_held(s);
    if (s->timer_init) {
        uv_timer_stop(&s->timer);
        s->timer.data = s;
        uv_close((uv_handle_t *)&s->timer, sub_timer_closed);
    } else {
        free(s);
    }
}

static void sub_gone(bm_req_t *req, void *ud)
{
    (void)req;
    sub_finish(ud, false);
}

static int parse_topics(const char *q, size_t qlen, uint64_t *mask, char *bad, size_t badlen)
{
    *mask = 0;
    size_t i = 0;
    bool any = false;
    while (i < qlen) {
        size_t j = i;
        while (j < qlen && q[j] != '&')
            j++;
        const char *kv = q + i;
        size_t kvlen = j - i;
        if (kvlen > 7 && memcmp(kv, "topics=", 7) == 0) {
            const char *v = kv + 7;
            size_t vlen = kvlen - 7;
            size_t a = 0;
            while (a <= vlen) {
                size_t b = a;
                /* both "," and its percent-encoding separate topics */
                while (b < vlen && v[b] != ',' &&
                       !(b + 2 < vlen && v[b] == '%' && v[b + 1] == '2' &&
                         (v[b + 2] == 'C' || v[b + 2] == 'c')))
                    b++;
                bs_topic_t t;
                if (b == a || bs_topic_parse(v + a, b - a, &t) != 0) {
                    size_t n = b - a < badlen - 1 ? b - a : badlen - 1;
                    memcpy(bad, v + a, n);
                    bad[n] = 0;
                    return BM_EINVAL;
                }
                *mask |= 1ull << t;
                any = true;
                if (b >= vlen)
                    break;
                a = b + (v[b] == ',' ? 1 : 3);
            }
        }
        i = j + 1;
    }
    if (!any) {
        bad[0] = 0;
        return BM_ENOTFOUND;
    }
    return 0;
}

static void deliver(bs_sub_t *s, bm_buf_t *ev);

/* Keeps a rendered event of a quiet start (the oldest goes when too many wait). */
static void hold(bs_sub_t *s, bm_buf_t *ev)
{
    if (!s->held) {
        s->held = calloc(MAX_HELD, sizeof *s->held);
        if (!s->held)
            return;
    }
    if (s->nheld == MAX_HELD) {
        bm_buf_unref(s->held[0]);
        memmove(s->held, s->held + 1, (MAX_HELD - 1) * sizeof *s->held);
        s->nheld--;
    }
    s->held[s->nheld++] = bm_buf_ref(ev);
}

/* The quiet start is over: what was held goes out now, in order (with the head). */
static void quiet_over(uv_timer_t *t)
{
    bs_sub_t *s = t->data;
    s->quiet_until = 0;
    if (s->ended || s->sn->node.behav.hang)
        return;
    if (!s->lazy_head)
        head_out(s);
    size_t n = s->nheld;
    bm_buf_t **held = s->held;
    s->held = NULL;
    s->nheld = 0;
    for (size_t i = 0; i < n; i++) {
        deliver(s, held[i]);
        bm_buf_unref(held[i]);
    }
    free(held);
}

void bs_events_open(bs_simnode_t *sn, bm_req_t *req)
{
    size_t qlen = 0;
    const char *q = bm_req_query(req, &qlen);
    uint64_t mask;
    char bad[128];
    int rc = parse_topics(q ? q : "", q ? qlen : 0, &mask, bad, sizeof bad);
    if (rc == BM_ENOTFOUND) {
        bm_resp_error(req, 400, "Missing required query parameter: topics");
        return;
    }
    if (rc) {
        bm_resp_error(req, 400, "Invalid topic: %s", bad);
        return;
    }
    bs_sub_t *s = calloc(1, sizeof *s);
    if (!s) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_link_init(&s->link);
    s->sn = sn;
    s->req = req;
    s->topics = mask;
    const bs_behav_t *b = &sn->node.behav;
    s->lazy_head = b->sse_head_with_event;
    if (!s->lazy_head && !b->sse_first_event_late_ms) {
        head_out(s);
        if (!bm_resp_started(req)) {
            free(s);
            bm_resp_end(req);
            return;
        }
    }
    if (b->sse_first_event_late_ms) {
        s->quiet_until = bs_sim_now() + b->sse_first_event_late_ms;
        uv_timer_init(sn->sim->loop, &s->timer);
        s->timer.data = s;
        s->timer_init = true;
        uv_timer_start(&s->timer, quiet_over, b->sse_first_event_late_ms, 0);
    }
    bm_list_push_front(&sn->subs, &s->link);
    sn->nsubs++;
    update_mask(sn);
    bm_req_on_abort(req, sub_gone, s);
}

static void frag_timer_cb(uv_timer_t *t)
{
    bs_sub_t *s = t->data;
    if (s->nqueue == 0) {
        uv_timer_stop(t);
        return;
    }
    bm_buf_t *b = s->queue[0];
    memmove(s->queue, s->queue + 1, (s->nqueue - 1) * sizeof *s->queue);
    s->nqueue--;
    bm_resp_write(s->req, b);
    bm_buf_unref(b);
    if (s->nqueue == 0)
        uv_timer_stop(t);
}

static int enqueue(bs_sub_t *s, bm_buf_t *b)
{
    if (s->nqueue == s->capqueue) {
        size_t cap = s->capqueue ? s->capqueue * 2 : 8;
        bm_buf_t **nq = realloc(s->queue, cap * sizeof *nq);
        if (!nq)
            return BM_ENOMEM;
        s->queue = nq;
        s->capqueue = cap;
    }
    s->queue[s->nqueue++] = bm_buf_ref(b);
    return 0;
}

/* Writes text split at random positions: the first piece now, the rest a tick apart. */
static void write_fragmented(bs_sub_t *s, const char *p, size_t n)
{
    bs_node_t *node = &s->sn->node;
    size_t cuts[4];
    int ncuts = 1 + (int)(bs_rng_next(&node->rng) % 3);
    for (int i = 0; i < ncuts; i++)
        cuts[i] = n > 1 ? 1 + bs_rng_next(&node->rng) % (n - 1) : n;
    for (int i = 1; i < ncuts; i++) /* sort the cut positions */
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            size_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        if (end <= at)
            continue;
        bm_buf_t *b = bm_buf_copy(p + at, end - at);
        if (!b)
            return;
        if (s->nqueue == 0 && at == 0 && !(s->timer_init && uv_is_active((uv_handle_t *)&s->timer)))
            bm_resp_write(s->req, b);
        else
            enqueue(s, b);
        bm_buf_unref(b);
        at = end;
    }
    if (s->nqueue) {
        if (!s->timer_init) {
            uv_timer_init(s->sn->sim->loop, &s->timer);
            s->timer.data = s;
            s->timer_init = true;
        }
        if (!uv_is_active((uv_handle_t *)&s->timer))
            uv_timer_start(&s->timer, frag_timer_cb, FRAG_GAP_MS, FRAG_GAP_MS);
    }
}

static bm_buf_t *render(bs_topic_t topic, bm_buf_t *data, bool lighthouse, bool crlf)
{
    bm_str_t s = BM_STR_INIT;
    const char *nl = crlf ? "\r\n" : "\n";
    bm_str_printf(&s, "event:%s%s%sdata:%s", lighthouse ? "" : " ", bs_topic_name(topic), nl,
                  lighthouse ? "" : " ");
    bm_str_append(&s, data->data, data->len);
    bm_str_printf(&s, "%s%s", nl, nl);
    return bm_str_finish(&s);
}

/* Writes one rendered event (in fragments with sse-fragment), the head first if due. */
static void deliver(bs_sub_t *s, bm_buf_t *ev)
{
    head_out(s);
    if (s->sn->node.behav.sse_fragment)
        write_fragmented(s, ev->data, ev->len);
    else
        bm_resp_write(s->req, ev);
}

void bs_events_emit(bs_node_t *n, bs_topic_t topic, bm_buf_t *data, void *ud)
{
    bs_simnode_t *sn = ud;
    if (bm_list_empty(&sn->subs) || n->behav.hang)
        return;
    bm_buf_t *variants[4] = {NULL, NULL, NULL, NULL}; /* [lighthouse][crlf] */
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &sn->subs) {
        bs_sub_t *s = bm_list_entry(l, bs_sub_t, link);
        if (!(s->topics >> topic & 1))
            continue;
        bool lh = n->behav.sse_style == BS_SSE_LIGHTHOUSE, frag = n->behav.sse_fragment;
        int vi = (lh ? 2 : 0) + (frag ? 1 : 0);
        if (!variants[vi])
            variants[vi] = render(topic, data, lh, frag);
        if (variants[vi] && s->quiet_until) {
            hold(s, variants[vi]); /* a quiet start: written when it ends */
            continue;
        }
        if (variants[vi])
            deliver(s, variants[vi]);
        if (n->behav.sse_drop > 0 && bs_rng_unit(&n->rng) < n->behav.sse_drop) {
            bm_log(BM_LOG_DEBUG, "node %u: dropping an event stream (sse-drop)", n->index);
            sub_finish(s, true);
        }
    }
    for (int i = 0; i < 4; i++)
        bm_buf_unref(variants[i]);
}

void bs_events_keepalive(bs_simnode_t *sn)
{
    if (sn->node.behav.hang)
        return;
    for (bm_link_t *l = sn->subs.next; l != &sn->subs; l = l->next) {
        bs_sub_t *s = bm_list_entry(l, bs_sub_t, link);
        if (s->lazy_head || s->quiet_until)
            continue; /* Lodestar sends no comments; a quiet start writes nothing */
        if (sn->node.behav.sse_fragment)
            write_fragmented(s, ":\r\n\r\n", 5);
        else
            bm_resp_write_copy(s->req, ":\n\n", 3);
    }
}

void bs_events_close_all(bs_simnode_t *sn)
{
    while (!bm_list_empty(&sn->subs))
        sub_finish(bm_list_first(&sn->subs, bs_sub_t, link), false);
}
