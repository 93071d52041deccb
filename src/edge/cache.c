/* SPDX-License-Identifier: MIT */
/*
 * cache: lookups, flights (one detached read per key with its waiting clients), storing and
 * serving, and what the cache learns of the chain (see cache.h and docs/cache.md).
 */
#include "edge/cache.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <json-c/json.h>
#include <sys/random.h>

#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "edge/cachekey.h"
#include "edge/gzip.h"
#include "edge/store.h"

#define FLIGHT_BUCKETS 256

typedef struct flight flight_t;

/* A client waiting for a flight. */
typedef struct waiter {
    bm_req_t *req;
    flight_t *f;
    struct waiter *next;
} waiter_t;

/* One detached read and the clients waiting for it. */
struct flight {
    bm_cache_t *c;
    char *key; /* the cache key and the client's Accept: who may share the answer */
    size_t key_len;
    char *store_key; /* the cache key alone */
    size_t store_key_len;
    uint64_t hash;
    flight_t *next;
    bm_ck_class_t cls;
    bm_ck_route_t route;
    bool ssz, final, has_root;
    uint8_t root[32];
    uint64_t slot;
    uint32_t ttl_ms;
    bm_readpath_fetch_t *fetch;
    waiter_t *waiters;
    struct tierq *tierq; /* the second tier's lookup in progress, or NULL */
    char *target;        /* what the nodes are sent (rewritten to a root when it was) */
    bool missing_moves_on;
    char *accept;   /* the first client's Accept and address, for the nodes after a */
    char *peer;     /* second-tier miss (that client may have gone by then) */
    bool from_tier; /* the answer is the second tier's: not put back there */
};

/* A lookup of the second tier; outlives its flight when the cache stops meanwhile. */
typedef struct tierq {
    flight_t *f; /* NULL: the flight is gone, the answer is dropped */
} tierq_t;

/* A read the cache makes for itself (a head's header, the head state's checkpoints). */
typedef struct aux {
    bm_cache_t *c;
    bm_readpath_fetch_t *fetch;
    uint8_t root[32]; /* the head it was asked for */
} aux_t;

struct bm_cache {
    uv_loop_t *loop;
    bm_readpath_t *rp;
    bm_head_t *head;
    bm_discovery_t *disc;
    bm_events_t *events;
    bm_cache_opts_t o;
    bm_store_t *store;
    flight_t *flights[FLIGHT_BUCKETS];
    uint8_t hkey[16];
    bm_cache_counters_t cnt[BM_CK_ROUTE_COUNT];
    uint64_t flights_active;
    flight_t *starting; /* the flight being started: its answer may come inside the call */
    bool answered_at_start;
    bool stopped;
    /* the chain as learnt */
    bool has_head_state;
    uint8_t head_state_for[32], head_state_root[32];
    bool has_fin, has_fin_state;
    uint64_t fin_epoch;
    uint8_t fin_root[32], fin_state_root[32];
    bool has_just;
    uint64_t just_epoch, cp_asked_epoch;
    uint8_t just_root[32];
    aux_t hdr, cp; /* at most one of each in flight */
    bm_cache_tier_t tier;
    bm_log_limit_t lim;
};

void bm_cache_opts_default(bm_cache_opts_t *o)
{
    *o = (bm_cache_opts_t){
        .enabled = BM_DEFAULT_CACHE_ENABLED,
        .max_entries = BM_DEFAULT_CACHE_MAX_ENTRIES,
        .max_bytes = BM_DEFAULT_CACHE_MAX_BYTES,
        .max_entry_bytes = BM_DEFAULT_CACHE_MAX_ENTRY_BYTES,
        .chain_ttl_ms = BM_DEFAULT_CACHE_CHAIN_TTL_MS,
        .clock_ttl_ms = BM_DEFAULT_CACHE_CLOCK_TTL_MS,
        .gzip_min_bytes = BM_DEFAULT_CACHE_GZIP_MIN_BYTES,
        .gzip_level = BM_DEFAULT_CACHE_GZIP_LEVEL,
    };
}

static void on_head_change(const bm_head_change_t *ch, void *ud);

bm_cache_t *bm_cache_new(uv_loop_t *loop, bm_readpath_t *rp, bm_head_t *head, bm_discovery_t *disc,
                         const bm_cache_opts_t *o)
{
    bm_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->loop = loop;
    c->rp = rp;
    c->head = head;
    c->disc = disc;
    if (o)
        c->o = *o;
    else
        bm_cache_opts_default(&c->o);
    if (c->o.gzip_level < 1 || c->o.gzip_level > 9)
        c->o.gzip_level = BM_DEFAULT_CACHE_GZIP_LEVEL;
    c->store = bm_store_new(c->o.max_entries, c->o.max_bytes);
    bm_head_listener_t l = {.head = on_head_change};
    if (!c->store || (head && bm_head_listen(head, &l, c) != 0)) {
        bm_store_free(c->store);
        free(c);
        return NULL;
    }
    if (getrandom(c->hkey, sizeof c->hkey, 0) != (ssize_t)sizeof c->hkey)
        memset(c->hkey, 0x77, sizeof c->hkey);
    c->hdr.c = c->cp.c = c;
    return c;
}

/* ---- the chain ------------------------------------------------------------------------- */

static uint32_t slots_per_epoch(const bm_cache_t *c)
{
    const bm_chain_info_t *ci = c->disc ? bm_discovery_chain(c->disc) : NULL;
    return ci && ci->known ? ci->clock.slots_per_epoch : 0;
}

static int root_at_slot(void *ud, uint64_t slot, uint8_t out[32])
{
    bm_cache_t *c = ud;
    return c->head ? bm_head_root_at_slot(c->head, slot, out) : BM_EUNAVAIL;
}

/* Whether `root` is the cluster chain's block at `slot`. */
static bool on_chain(void *ud, const uint8_t root[32], uint64_t slot)
{
    uint8_t at[32];
    return root_at_slot(ud, slot, at) == 0 && memcmp(at, root, 32) == 0;
}

static void chain_view(bm_cache_t *c, bm_ck_chain_t *v)
{
    memset(v, 0, sizeof *v);
    v->slots_per_epoch = slots_per_epoch(c);
    bm_head_info_t hi;
    if (c->head && bm_head_cluster(c->head, &hi)) {
        v->has_head = true;
        memcpy(v->head_root, hi.root, 32);
        v->head_slot = hi.slot;
        if (c->has_head_state && memcmp(c->head_state_for, hi.root, 32) == 0) {
            v->has_head_state = true;
            memcpy(v->head_state_root, c->head_state_root, 32);
        }
    }
    v->has_finalized = c->has_fin;
    v->fin_epoch = c->fin_epoch;
    memcpy(v->fin_root, c->fin_root, 32);
    v->has_fin_state = c->has_fin_state;
    memcpy(v->fin_state_root, c->fin_state_root, 32);
    v->has_justified = c->has_just;
    v->just_epoch = c->just_epoch;
    memcpy(v->just_root, c->just_root, 32);
    v->root_at_slot = root_at_slot;
    v->ud = c;
}

/* A newer finalized checkpoint: remembered, and the entries it settles promoted. */
static void learn_finalized(bm_cache_t *c, uint64_t epoch, const uint8_t root[32],
                            const uint8_t *state_root)
{
    if (c->has_fin && epoch < c->fin_epoch)
        return;
    bool moved = !c->has_fin || epoch > c->fin_epoch;
    if (moved || state_root) {
        c->has_fin = true;
        c->fin_epoch = epoch;
        memcpy(c->fin_root, root, 32);
        if (state_root) {
            c->has_fin_state = true;
            memcpy(c->fin_state_root, state_root, 32);
        } else if (moved) {
            c->has_fin_state = false;
        }
    }
    uint32_t spe = slots_per_epoch(c);
    if (moved && spe)
        bm_store_promote(c->store, epoch * spe, on_chain, c);
}

static void on_tap(bm_topic_t t, const char *data, size_t len, void *ud)
{
    bm_cache_t *c = ud;
    if (t != BM_TOPIC_FINALIZED_CHECKPOINT)
        return;
    struct json_object *o = NULL;
    uint64_t epoch;
    uint8_t block[32], state[32];
    if (bm_json_parse(data, len, 0, &o, NULL) == 0 && bm_json_get_u64(o, "/epoch", &epoch) == 0 &&
        bm_json_get_root(o, "/block", block) == 0) {
        bool has_state = bm_json_get_root(o, "/state", state) == 0;
        learn_finalized(c, epoch, block, has_state ? state : NULL);
    }
    json_object_put(o);
}

void bm_cache_attach_events(bm_cache_t *c, bm_events_t *ev)
{
    c->events = ev;
    bm_events_set_tap(ev, on_tap, c);
}

static void aux_fetch(aux_t *a, const char *target, bm_readpath_answer_fn cb);

/* The head state's checkpoints: the justified one (and finality, when the stream is late). */
static void on_checkpoints(const bm_readpath_answer_t *ans, void *ud)
{
    aux_t *a = ud;
    bm_cache_t *c = a->c;
    a->fetch = NULL;
    struct json_object *o = NULL;
    uint64_t je, fe;
    uint8_t jr[32], fr[32];
    if (ans->status == 200 && ans->body &&
        bm_json_parse(ans->body->data, ans->body->len, 0, &o, NULL) == 0 &&
        bm_json_get_u64(o, "/data/current_justified/epoch", &je) == 0 &&
        bm_json_get_root(o, "/data/current_justified/root", jr) == 0) {
        c->has_just = true;
        c->just_epoch = je;
        memcpy(c->just_root, jr, 32);
        if (bm_json_get_u64(o, "/data/finalized/epoch", &fe) == 0 &&
            bm_json_get_root(o, "/data/finalized/root", fr) == 0)
            learn_finalized(c, fe, fr, NULL);
    } else {
        c->cp_asked_epoch = 0; /* ask again with the next head */
    }
    json_object_put(o);
}

/* The head's header: its state root, for states/head. */
static void on_header(const bm_readpath_answer_t *ans, void *ud)
{
    aux_t *a = ud;
    bm_cache_t *c = a->c;
    a->fetch = NULL;
    struct json_object *o = NULL;
    uint8_t sr[32];
    if (ans->status == 200 && ans->body &&
        bm_json_parse(ans->body->data, ans->body->len, 0, &o, NULL) == 0 &&
        bm_json_get_root(o, "/data/header/message/state_root", sr) == 0) {
        c->has_head_state = true;
        memcpy(c->head_state_for, a->root, 32);
        memcpy(c->head_state_root, sr, 32);
        /* once per epoch: the justified checkpoint of this state */
        uint32_t spe = slots_per_epoch(c);
        bm_head_info_t hi;
        if (spe && bm_head_cluster(c->head, &hi) && hi.slot / spe + 1 > c->cp_asked_epoch &&
            !c->cp.fetch) {
            c->cp_asked_epoch = hi.slot / spe + 1;
            char hex[BM_ROOT_HEX_LEN + 1], t[160];
            bm_root_to_hex(sr, hex);
            snprintf(t, sizeof t, "/eth/v1/beacon/states/%s/finality_checkpoints", hex);
            aux_fetch(&c->cp, t, on_checkpoints);
        }
    }
    json_object_put(o);
}

static void aux_fetch(aux_t *a, const char *target, bm_readpath_answer_fn cb)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Accept", "application/json");
    bm_readpath_fetch_req_t f = {.method = "GET", .target = target, .headers = &h};
    a->fetch = bm_readpath_fetch(a->c->rp, &f, cb, a);
    bm_hdrs_dispose(&h);
}

static void on_head_change(const bm_head_change_t *ch, void *ud)
{
    bm_cache_t *c = ud;
    if (c->stopped || !c->o.enabled)
        return;
    if (c->hdr.fetch)
        bm_readpath_fetch_cancel(c->hdr.fetch);
    c->hdr.fetch = NULL;
    memcpy(c->hdr.root, ch->root, 32);
    char hex[BM_ROOT_HEX_LEN + 1], t[128];
    bm_root_to_hex(ch->root, hex);
    snprintf(t, sizeof t, "/eth/v1/beacon/headers/%s", hex);
    aux_fetch(&c->hdr, t, on_header);
}

/* ---- serving ----------------------------------------------------------------------------- */

static bool accepts_ssz(bm_req_t *req)
{
    const char *a = bm_req_header(req, "accept");
    return a && strcasestr(a, "application/octet-stream") != NULL;
}

/* What the flags of `e` should say now: -1 keeps the node's word. */
static void flags_now(bm_cache_t *c, const bm_entry_t *e, int *fin, int *opt)
{
    *fin = *opt = -1;
    bool canonical = e->has_root && e->slot != UINT64_MAX && on_chain(c, e->root, e->slot);
    uint32_t spe = slots_per_epoch(c);
    bool final =
        e->final || (canonical && c->has_fin && spe && e->slot <= c->fin_epoch * (uint64_t)spe);
    if (final)
        *fin = 1;
    if (final || canonical)
        *opt = 0; /* on the cluster chain, which no optimistic node moves */
}

/* Rewrites the stored bodies once when the flags they carry are out of date. */
static void refresh_flags(bm_cache_t *c, bm_entry_t *e)
{
    if (!e->json || (e->flags.finalized_off < 0 && e->flags.optimistic_off < 0))
        return;
    int fin, opt;
    flags_now(c, e, &fin, &opt);
    bm_buf_t *nb = bm_flags_patch(e->body->data, e->body->len, &e->flags, fin, opt);
    if (!nb)
        return;
    bm_buf_t *gz = e->gz ? bm_gzip_compress(nb->data, nb->len, (int)c->o.gzip_level) : NULL;
    bm_flags_scan(nb->data, nb->len, &e->flags);
    if (!e->gz || gz) {
        bm_store_update(c->store, e, nb, gz);
    } /* else: no memory for the gzip form: keep the old pair consistent */
    bm_buf_unref(nb);
    bm_buf_unref(gz);
}

/* Sends entry `e` to `req`. The entry is borrowed; the bodies are referenced by the write. */
static void serve(bm_cache_t *c, bm_req_t *req, bm_entry_t *e, bool hit)
{
    bool gz = e->gz && bm_gzip_accepted(bm_req_header(req, "accept-encoding"));
    bm_buf_t *body = gz ? e->gz : e->body;
    const bm_hdrs_t *h = gz ? &e->hdrs_gz : &e->hdrs;
    bm_hdrs_t miss;
    if (!hit) {
        bm_hdrs_init(&miss);
        bm_hdrs_copy(&miss, h);
        bm_hdrs_set_z(&miss, "X-Beaconmux-Cache", "miss");
        h = &miss;
    }
    bm_cache_counters_t *k = &c->cnt[e->route];
    k->bytes_served += body->len;
    if (gz)
        k->gzip_served++;
    if (bm_resp_start(req, 200, h, (int64_t)body->len) == 0)
        bm_resp_write(req, body);
    bm_resp_end(req);
    if (!hit)
        bm_hdrs_dispose(&miss);
}

/* ---- flights ----------------------------------------------------------------------------- */

static flight_t **flight_slot(bm_cache_t *c, const char *key, size_t n, uint64_t h)
{
    flight_t **p = &c->flights[h % FLIGHT_BUCKETS];
    while (*p && !((*p)->hash == h && (*p)->key_len == n && memcmp((*p)->key, key, n) == 0))
        p = &(*p)->next;
    return p;
}

static void flight_unlink(bm_cache_t *c, flight_t *f)
{
    flight_t **p = flight_slot(c, f->key, f->key_len, f->hash);
    if (*p == f)
        *p = f->next;
    c->flights_active--;
}

static void flight_free(flight_t *f)
{
    if (f->tierq)
        f->tierq->f = NULL;
    free(f->accept);
    free(f->peer);
    free(f->target);
    free(f->key);
    free(f->store_key);
    free(f);
}

static void on_waiter_abort(bm_req_t *req, void *ud)
{
    waiter_t *w = ud;
    flight_t *f = w->f;
    for (waiter_t **p = &f->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    free(w);
    bm_resp_end(req); /* the others, and the read, carry on */
}

/* Takes the waiting clients off the flight (their abort callbacks cleared). */
static waiter_t *take_waiters(flight_t *f)
{
    waiter_t *ws = f->waiters;
    f->waiters = NULL;
    for (waiter_t *w = ws; w; w = w->next)
        bm_req_on_abort(w->req, NULL, NULL);
    return ws;
}

/* Copies the fields an entry is served with: the content type and the consensus ones. */
static void keep_fields(bm_entry_t *e, const bm_hdrs_t *from)
{
    for (size_t i = 0; from && i < from->n; i++) {
        const bm_header_t *h = &from->items[i];
        if (bm_header_name_is(h->name, h->name_len, "content-type") ||
            (h->name_len > 4 && strncasecmp(h->name, "eth-", 4) == 0))
            bm_hdrs_add(&e->hdrs, h->name, h->name_len, h->value, h->value_len);
    }
    if (e->gz)
        bm_hdrs_add_z(&e->hdrs, "Vary", "Accept-Encoding");
    bm_hdrs_add_z(&e->hdrs, "X-Beaconmux-Cache", "hit");
    bm_hdrs_copy(&e->hdrs_gz, &e->hdrs);
    bm_hdrs_add_z(&e->hdrs_gz, "Content-Encoding", "gzip");
}

/* Whether an answer may be stored: a complete 200 of the form asked, not encoded. */
static bool storable(const flight_t *f, const bm_readpath_answer_t *ans)
{
    if (!ans->from_node || ans->status != 200 || !ans->body || ans->body->len == 0 || !ans->hdrs)
        return false;
    const char *ct = bm_hdrs_get(ans->hdrs, "content-type");
    const char *want = f->ssz ? "application/octet-stream" : "application/json";
    if (!ct || strncasecmp(ct, want, strlen(want)) != 0)
        return false;
    const char *ce = bm_hdrs_get(ans->hdrs, "content-encoding");
    if (ce && strcasecmp(ce, "identity") != 0)
        return false;
    const char *cl = bm_hdrs_get(ans->hdrs, "content-length");
    if (cl && strtoull(cl, NULL, 10) != ans->body->len)
        return false; /* truncated */
    return true;
}

/* An entry for a storable answer, or NULL. */
static bm_entry_t *make_entry(bm_cache_t *c, const flight_t *f, const bm_readpath_answer_t *ans)
{
    bm_buf_t *gz = NULL, *body = ans->body;
    if (body->cap > body->len + 4096) /* a held body grew by doubling: keep what it uses */
        body = bm_buf_copy(ans->body->data, ans->body->len);
    else
        bm_buf_ref(body);
    if (!body)
        return NULL;
    if (body->len >= c->o.gzip_min_bytes)
        gz = bm_gzip_compress(body->data, body->len, (int)c->o.gzip_level);
    bm_entry_t *e = bm_entry_new(f->store_key, f->store_key_len, body, gz);
    bm_buf_unref(gz);
    bm_buf_unref(body);
    if (!e)
        return NULL;
    e->cls = f->cls;
    e->route = f->route;
    e->final = f->final;
    e->has_root = f->has_root;
    memcpy(e->root, f->root, 32);
    e->slot = f->slot;
    e->expires_ms = f->ttl_ms ? uv_now(c->loop) + f->ttl_ms : 0;
    e->json = !f->ssz;
    if (e->json)
        bm_flags_scan(ans->body->data, ans->body->len, &e->flags);
    keep_fields(e, ans->hdrs);
    return e;
}

/* Sends an answer that is not stored to one client, as it came. */
static void send_answer(bm_req_t *req, const bm_readpath_answer_t *ans)
{
    if (ans->hdrs)
        bm_resp_send(req, ans->status, NULL, ans->body, ans->hdrs);
    else
        bm_resp_send(req, ans->status, "application/json", ans->body, NULL);
}

/* ---- the second tier ------------------------------------------------------------------------
 * A record is the entry's kept fields as "Name: value\r\n" lines, an empty line, then the
 * identity body: the answer a node would have given, so that a hit goes through on_answer
 * like one (stored, compressed once here, served to every waiter). */

static void tier_put(bm_cache_t *c, const flight_t *f, const bm_entry_t *e)
{
    bm_str_t rec = BM_STR_INIT;
    for (size_t i = 0; i < e->hdrs.n; i++) {
        const bm_header_t *h = &e->hdrs.items[i];
        if (bm_header_name_is(h->name, h->name_len, "x-beaconmux-cache") ||
            bm_header_name_is(h->name, h->name_len, "vary"))
            continue;
        bm_str_append(&rec, h->name, h->name_len);
        bm_str_puts(&rec, ": ");
        bm_str_append(&rec, h->value, h->value_len);
        bm_str_puts(&rec, "\r\n");
    }
    bm_str_puts(&rec, "\r\n");
    bm_str_append(&rec, e->body->data, e->body->len);
    if (!rec.oom)
        c->tier.put(c->tier.ud, f->store_key, f->store_key_len, bm_str_data(&rec), bm_str_len(&rec),
                    f->ttl_ms);
    bm_str_dispose(&rec);
}

static void on_answer(const bm_readpath_answer_t *ans, void *ud);

/* A record back as a node's answer; false when it is not one. */
static bool tier_answer(const char *rec, size_t len, bm_hdrs_t *h, bm_buf_t **body)
{
    const char *p = rec, *end = rec + len;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || nl == p || nl[-1] != '\r')
            return false;
        if (nl == p + 1)
            break; /* the empty line */
        const char *colon = memchr(p, ':', (size_t)(nl - p));
        if (!colon || colon + 2 > nl - 1)
            return false;
        bm_hdrs_add(h, p, (size_t)(colon - p), colon + 2, (size_t)(nl - 1 - colon - 2));
        p = nl + 1;
    }
    p += 2;
    *body = bm_buf_copy(p, (size_t)(end - p));
    return *body != NULL;
}

static bool fetch_from_nodes(bm_cache_t *c, flight_t *f);

static void on_tier(void *ctx, const char *rec, size_t len)
{
    tierq_t *q = ctx;
    flight_t *f = q->f;
    free(q);
    if (!f)
        return; /* the cache stopped meanwhile */
    f->tierq = NULL;
    bm_cache_t *c = f->c;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_buf_t *body = NULL;
    if (rec && tier_answer(rec, len, &h, &body)) {
        c->cnt[f->route].tier_hits++;
        f->from_tier = true;
        bm_readpath_answer_t ans = {.status = 200, .hdrs = &h, .body = body, .from_node = true};
        on_answer(&ans, f);
    } else if (!f->waiters) {
        flight_unlink(c, f); /* everyone left: no node is asked for nobody */
        flight_free(f);
    } else if (!fetch_from_nodes(c, f)) {
        flight_unlink(c, f);
        for (waiter_t *w = take_waiters(f), *nx; w; w = nx) {
            nx = w->next;
            bm_readpath_route(w->req, NULL, c->rp);
            free(w);
        }
        flight_free(f);
    }
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
}

void bm_cache_set_tier(bm_cache_t *c, const bm_cache_tier_t *tier)
{
    if (tier)
        c->tier = *tier;
    else
        memset(&c->tier, 0, sizeof c->tier);
}

static void on_answer(const bm_readpath_answer_t *ans, void *ud)
{
    flight_t *f = ud;
    bm_cache_t *c = f->c;
    f->fetch = NULL;
    if (c->starting == f)
        c->answered_at_start = true;
    flight_unlink(c, f);
    bm_cache_counters_t *k = &c->cnt[f->route];
    waiter_t *ws = take_waiters(f);
    if (ans->too_big) {
        k->too_big++;
        for (waiter_t *w = ws, *nx; w; w = nx) {
            nx = w->next;
            bm_readpath_route(w->req, NULL, c->rp); /* each on its own, streamed */
            free(w);
        }
        flight_free(f);
        return;
    }
    bm_entry_t *e = NULL;
    if (storable(f, ans) && (e = make_entry(c, f, ans)) != NULL) {
        k->stored++;
        if (bm_store_put(c->store, e) != 0)
            e = NULL; /* refused as larger than the whole cache */
        else
            e = bm_store_get(c->store, f->store_key, f->store_key_len, uv_now(c->loop));
        if (e && c->tier.put && !f->from_tier)
            tier_put(c, f, e);
    } else {
        k->not_stored++;
    }
    for (waiter_t *w = ws, *nx; w; w = nx) {
        nx = w->next;
        if (ans->from_node) /* the node each waiter's answer came from (the access log) */
            bm_req_add_upstream(w->req, ans->node);
        if (e)
            serve(c, w->req, e, false);
        else
            send_answer(w->req, ans);
        free(w);
    }
    flight_free(f);
}

static waiter_t *add_waiter(flight_t *f, bm_req_t *req)
{
    waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->req = req;
    w->f = f;
    w->next = f->waiters;
    f->waiters = w;
    bm_req_on_abort(req, on_waiter_abort, w);
    return w;
}

/* A new flight for `ck`, started with `req` waiting; false when it could not start (the
 * caller sends the client down the read path). */
static bool start_flight(bm_cache_t *c, bm_req_t *req, const bm_ck_t *ck, const char *fkey,
                         size_t fkey_len, uint64_t h)
{
    flight_t *f = calloc(1, sizeof *f);
    if (!f)
        return false;
    f->c = c;
    f->key = strndup(fkey, fkey_len);
    f->key_len = fkey_len;
    f->store_key = strndup(bm_str_data(&ck->key), bm_str_len(&ck->key));
    f->store_key_len = bm_str_len(&ck->key);
    if (!f->key || !f->store_key || !add_waiter(f, req)) {
        flight_free(f);
        return false;
    }
    f->hash = h;
    f->cls = ck->cls;
    f->route = ck->route;
    f->ssz = ck->ssz;
    f->final = ck->final;
    f->has_root = ck->has_root;
    memcpy(f->root, ck->root, 32);
    f->slot = ck->slot;
    f->ttl_ms = ck->ttl_ms;
    const char *accept = bm_req_header(req, "accept"), *peer = bm_req_peer(req);
    f->target = strndup(bm_str_data(&ck->target), bm_str_len(&ck->target));
    f->accept = accept ? strdup(accept) : NULL;
    f->peer = peer ? strdup(peer) : NULL;
    /* sent by a root of the cluster chain: a node without it is behind, the next may have it */
    f->missing_moves_on = ck->rewritten || ck->cls == BM_CK_CHAIN;
    if (!f->target || (accept && !f->accept) || (peer && !f->peer)) {
        free(take_waiters(f));
        flight_free(f);
        return false;
    }
    flight_t **p = &c->flights[h % FLIGHT_BUCKETS];
    f->next = *p;
    *p = f;
    c->flights_active++;
    if (c->tier.get) {
        tierq_t *q = calloc(1, sizeof *q);
        if (q) {
            q->f = f;
            f->tierq = q;
            if (c->tier.get(c->tier.ud, f->store_key, f->store_key_len, on_tier, q) == 0)
                return true; /* the nodes are asked if the second tier has nothing */
            f->tierq = NULL;
            free(q);
        }
    }
    if (fetch_from_nodes(c, f))
        return true;
    /* blocked, or no memory: the client goes down the read path */
    flight_unlink(c, f);
    free(take_waiters(f));
    flight_free(f);
    return false;
}

/* Asks the nodes for a flight's read. False when it could not start (the flight is left to
 * the caller); true when started or answered already (then `f` may be gone). */
static bool fetch_from_nodes(bm_cache_t *c, flight_t *f)
{
    bm_hdrs_t fwd;
    bm_hdrs_init(&fwd);
    if (f->accept)
        bm_hdrs_add_z(&fwd, "Accept", f->accept);
    bm_readpath_fetch_req_t fr = {.method = "GET",
                                  .target = f->target,
                                  .headers = &fwd,
                                  .peer = f->peer,
                                  .max_bytes = c->o.max_entry_bytes,
                                  .missing_moves_on = f->missing_moves_on};
    c->starting = f;
    c->answered_at_start = false;
    bm_readpath_fetch_t *fetch = bm_readpath_fetch(c->rp, &fr, on_answer, f);
    c->starting = NULL;
    bm_hdrs_dispose(&fwd);
    if (c->answered_at_start)
        return true; /* answered inside the call: `f` is gone */
    if (!fetch)
        return false;
    f->fetch = fetch;
    return true;
}

static bool no_cache(bm_req_t *req)
{
    const char *cc = bm_req_header(req, "cache-control");
    const char *pragma = bm_req_header(req, "pragma");
    return (cc && (strcasestr(cc, "no-cache") || strcasestr(cc, "no-store"))) ||
           (pragma && strcasestr(pragma, "no-cache"));
}

void bm_cache_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_cache_t *c = ud;
    const char *m = bm_req_method(req);
    if (!c->o.enabled || c->stopped || (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0)) {
        bm_readpath_route(req, params, c->rp);
        return;
    }
    size_t pl, ql = 0;
    const char *path = bm_req_path(req, &pl);
    const char *query = bm_req_query(req, &ql);
    bm_ck_chain_t view;
    chain_view(c, &view);
    bm_ck_ttls_t ttls = {c->o.chain_ttl_ms, c->o.clock_ttl_ms};
    bm_ck_t ck;
    if (bm_ck_derive(path, pl, query, ql, accepts_ssz(req), &view, &ttls, &ck) != 0 ||
        ck.cls == BM_CK_NONE) {
        bm_readpath_route(req, params, c->rp);
        return;
    }
    bm_cache_counters_t *k = &c->cnt[ck.route];
    if (no_cache(req)) {
        k->bypassed++;
        bm_ck_dispose(&ck);
        bm_readpath_route(req, params, c->rp);
        return;
    }
    bm_entry_t *e =
        bm_store_get(c->store, bm_str_data(&ck.key), bm_str_len(&ck.key), uv_now(c->loop));
    if (e) {
        k->hits++;
        refresh_flags(c, e);
        serve(c, req, e, true);
        bm_ck_dispose(&ck);
        return;
    }
    /* the flight key: the cache key and the Accept field (who may share one answer) */
    bm_str_t fk = BM_STR_INIT;
    bm_str_append(&fk, bm_str_data(&ck.key), bm_str_len(&ck.key));
    const char *accept = bm_req_header(req, "accept");
    bm_str_putc(&fk, '\n');
    bm_str_puts(&fk, accept ? accept : "");
    uint64_t h = bm_json_siphash(c->hkey, bm_str_data(&fk), bm_str_len(&fk));
    flight_t *f = *flight_slot(c, bm_str_data(&fk), bm_str_len(&fk), h);
    if (f && add_waiter(f, req)) {
        k->coalesced++;
    } else {
        k->misses++;
        if (fk.oom || !start_flight(c, req, &ck, bm_str_data(&fk), bm_str_len(&fk), h))
            bm_readpath_route(req, params, c->rp);
    }
    bm_str_dispose(&fk);
    bm_ck_dispose(&ck);
}

/* ---- life and figures ---------------------------------------------------------------------- */

void bm_cache_stop(bm_cache_t *c)
{
    if (!c || c->stopped)
        return;
    c->stopped = true;
    if (c->events)
        bm_events_set_tap(c->events, NULL, NULL);
    c->events = NULL;
    if (c->hdr.fetch)
        bm_readpath_fetch_cancel(c->hdr.fetch);
    if (c->cp.fetch)
        bm_readpath_fetch_cancel(c->cp.fetch);
    c->hdr.fetch = c->cp.fetch = NULL;
    for (size_t b = 0; b < FLIGHT_BUCKETS; b++) {
        while (c->flights[b]) {
            flight_t *f = c->flights[b];
            c->flights[b] = f->next;
            c->flights_active--;
            if (f->fetch)
                bm_readpath_fetch_cancel(f->fetch);
            for (waiter_t *w = take_waiters(f), *nx; w; w = nx) {
                nx = w->next;
                bm_resp_error(w->req, 503, "beaconmux is shutting down");
                free(w);
            }
            flight_free(f);
        }
    }
}

void bm_cache_free(bm_cache_t *c)
{
    if (!c)
        return;
    bm_cache_stop(c);
    if (c->head)
        bm_head_unlisten(c->head, c);
    bm_store_free(c->store);
    free(c);
}

const bm_cache_counters_t *bm_cache_counters(const bm_cache_t *c, int route)
{
    return &c->cnt[route >= 0 && route < BM_CK_ROUTE_COUNT ? route : 0];
}

void bm_cache_size(const bm_cache_t *c, bm_cache_size_t *out)
{
    out->enabled = c->o.enabled;
    out->entries = bm_store_count(c->store);
    out->bytes = bm_store_bytes(c->store);
    out->max_bytes = c->o.max_bytes;
    out->store = bm_store_stats(c->store);
}

void bm_cache_status_json(bm_str_t *o, void *ud)
{
    bm_cache_t *c = ud;
    const bm_store_stats_t *st = bm_store_stats(c->store);
    size_t cls[4];
    bm_store_class_counts(c->store, cls);
    bm_str_printf(o,
                  "{\"enabled\":%s,\"entries\":%zu,\"bytes\":%llu,\"max_entries\":%u,"
                  "\"max_bytes\":%llu,\"immutable\":%zu,\"chain\":%zu,\"clock\":%zu,"
                  "\"in_flight\":%llu,\"expirations\":%llu,\"promotions\":%llu,"
                  "\"orphans_dropped\":%llu,\"finalized_epoch\":",
                  c->o.enabled ? "true" : "false", bm_store_count(c->store),
                  (unsigned long long)bm_store_bytes(c->store), c->o.max_entries,
                  (unsigned long long)c->o.max_bytes, cls[BM_CK_IMMUTABLE], cls[BM_CK_CHAIN],
                  cls[BM_CK_CLOCK], (unsigned long long)c->flights_active,
                  (unsigned long long)st->expirations, (unsigned long long)st->promotions,
                  (unsigned long long)st->orphans_dropped);
    if (c->has_fin)
        bm_str_printf(o, "%llu", (unsigned long long)c->fin_epoch);
    else
        bm_str_puts(o, "null");
    bm_str_puts(o, ",\"routes\":{");
    for (int r = 0; r < BM_CK_ROUTE_COUNT; r++) {
        const bm_cache_counters_t *k = &c->cnt[r];
        bm_str_printf(o,
                      "%s\"%s\":{\"hits\":%llu,\"misses\":%llu,\"coalesced\":%llu,"
                      "\"bypassed\":%llu,\"stored\":%llu,\"not_stored\":%llu,\"too_big\":%llu,"
                      "\"evictions\":%llu,\"bytes_served\":%llu,\"gzip_served\":%llu,"
                      "\"tier_hits\":%llu}",
                      r ? "," : "", bm_ck_route_name((bm_ck_route_t)r), (unsigned long long)k->hits,
                      (unsigned long long)k->misses, (unsigned long long)k->coalesced,
                      (unsigned long long)k->bypassed, (unsigned long long)k->stored,
                      (unsigned long long)k->not_stored, (unsigned long long)k->too_big,
                      (unsigned long long)st->evictions[r], (unsigned long long)k->bytes_served,
                      (unsigned long long)k->gzip_served, (unsigned long long)k->tier_hits);
    }
    bm_str_puts(o, "}}");
}
