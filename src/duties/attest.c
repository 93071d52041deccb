/* SPDX-License-Identifier: MIT */
/*
 * attest: attestation_data, blocks/head/root and payload_attestation_data as races judged
 * against the expected head (see attest.h for the rules, docs/duties.md for why).
 *
 * How it is built: one judging context per race (which endpoint, which slot, the fork
 * rule), carried by the race (duties/serve.h), which also answers every request waiting on
 * it with the same bytes. The predicates re-read the expected head at every answer, so a
 * cluster head that moves during a race moves what it accepts.
 */
#include "duties/attest.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "duties/serve.h"

#define KEY_MAX 512
#define RACE_PAIRS 8 /* distinct checkpoint pairs a race counts (strict mode) */

typedef enum endpoint { EP_DATA, EP_HEAD_ROOT, EP_PAYLOAD } endpoint_t;

/* The checkpoints a race's answers gave, and which nodes gave each (strict mode). */
typedef struct race_pair {
    bm_checkpoint_pair_t pair;
    uint64_t nodes;
} race_pair_t;

/* The last answer read, by who gave it (a node's attempts are numbered, so the node, the
 * attempt and the body tell answers of one race apart): accept, score and observe look at
 * each answer in a row, and every request waiting on the race at the one it serves; a
 * read costs instructions (bm_json_pick, or a json-c tree when the text has escapes), so
 * each answer is read once. */
typedef struct parsed {
    bool valid;
    const bm_node_t *node;
    unsigned attempt;
    const bm_buf_t *body;
    int rc; /* of the parse; the fields below are set when 0 */
    union {
        bm_attest_data_t data;
        uint8_t root[32];
        bm_attest_payload_t payload;
    } v;
} parsed_t;

typedef struct rctx {
    bm_attest_t *a;
    endpoint_t ep;
    uint64_t slot;   /* the requested slot (EP_HEAD_ROOT: UINT64_MAX, any head) */
    bool gloas;      /* the slot's fork is Gloas or later */
    uint32_t quorum; /* checkpoint quorum for this race (auto resolved by its candidates) */
    race_pair_t pairs[RACE_PAIRS];
    size_t n_pairs;
    parsed_t last; /* the race's copy only: the context bm_serve copies has none */
} rctx_t;

struct bm_attest {
    bm_clock_t *clock;
    bm_race_engine_t *race;
    bm_pool_t *pool;
    bm_hint_t *hint;
    bm_checkpoints_t *book; /* what the nodes' answers said of each epoch's checkpoints */
    bm_shadow_t *shadow;    /* the shadow nodes every race is mirrored to, or NULL */
    bm_attest_opts_t opts;
    bm_attest_stats_t stats;
    bm_log_limit_t lim;
    bm_served_fn served_fn; /* records of served races (bm_attest_on_served), or NULL */
    void *served_ud;
    bool witness;
};

void bm_attest_opts_default(bm_attest_opts_t *o)
{
    o->repoll_interval_ms = 50;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->checkpoint_quorum = BM_DEFAULT_DUTIES_CHECKPOINT_QUORUM;
    o->checkpoint_mode = BM_ATTEST_DEFAULT_CHECKPOINT_MODE;
}

bm_attest_t *bm_attest_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                           bm_hint_t *hint, const bm_attest_opts_t *opts)
{
    if (!clock || !race || !pool || !hint)
        return NULL;
    bm_attest_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->book = bm_checkpoints_new();
    if (!a->book) {
        free(a);
        return NULL;
    }
    a->clock = clock;
    a->race = race;
    a->pool = pool;
    a->hint = hint;
    if (opts)
        a->opts = *opts;
    else
        bm_attest_opts_default(&a->opts);
    if (!a->opts.repoll_interval_ms)
        a->opts.repoll_interval_ms = 50;
    return a;
}

void bm_attest_set_shadow(bm_attest_t *a, bm_shadow_t *shadow)
{
    a->shadow = shadow;
}

void bm_attest_free(bm_attest_t *a)
{
    if (!a)
        return;
    bm_checkpoints_free(a->book);
    free(a);
}

void bm_attest_on_served(bm_attest_t *a, bm_served_fn fn, void *ud, bool witness)
{
    a->served_fn = fn;
    a->served_ud = ud;
    a->witness = witness;
}

bm_attest_stats_t bm_attest_stats(const bm_attest_t *a)
{
    return a->stats;
}

/* ---- the rules ------------------------------------------------------------------------ */

int bm_attest_parse_data(const bm_hdrs_t *headers, const bm_buf_t *body, bm_attest_data_t *out)
{
    if (!body)
        return BM_EINVAL;
    if (headers && bm_hdrs_is_ssz(headers)) {
        bm_ssz_attestation_data_t d;
        if (bm_ssz_attestation_data((const uint8_t *)body->data, body->len, &d) != 0)
            return BM_EINVAL;
        memset(out, 0, sizeof *out);
        out->slot = d.slot;
        out->index = d.index;
        memcpy(out->beacon_block_root, d.beacon_block_root, 32);
        out->checkpoints.source.epoch = d.source_epoch;
        memcpy(out->checkpoints.source.root, d.source_root, 32);
        out->checkpoints.target.epoch = d.target_epoch;
        memcpy(out->checkpoints.target.root, d.target_root, 32);
        return 0;
    }
    bm_attest_data_t d;
    memset(&d, 0, sizeof d); /* padding included: *out gets no byte of the stack */
    bm_checkpoint_pair_t *cp = &d.checkpoints;
    bm_json_pick_t f[] = {{.ptr = "/data/slot"},
                          {.ptr = "/data/index"},
                          {.ptr = "/data/beacon_block_root"},
                          {.ptr = "/data/source/epoch"},
                          {.ptr = "/data/source/root"},
                          {.ptr = "/data/target/epoch"},
                          {.ptr = "/data/target/root"}};
    int pr = bm_json_pick(body->data, body->len, 0, f, sizeof f / sizeof f[0]);
    if (pr < 0)
        return BM_EINVAL;
    if (pr == 0) {
        if (bm_json_pick_u64(&f[0], &d.slot) != 0 || bm_json_pick_u64(&f[1], &d.index) != 0 ||
            bm_json_pick_root(&f[2], d.beacon_block_root) != 0 ||
            bm_json_pick_u64(&f[3], &cp->source.epoch) != 0 ||
            bm_json_pick_root(&f[4], cp->source.root) != 0 ||
            bm_json_pick_u64(&f[5], &cp->target.epoch) != 0 ||
            bm_json_pick_root(&f[6], cp->target.root) != 0)
            return BM_EINVAL;
        *out = d;
        return 0;
    }
    /* escapes in the text: the tree reads them */
    struct json_object *j = NULL;
    if (bm_json_parse_buf(body, 0, &j, NULL) != 0 || !j) {
        json_object_put(j);
        return BM_EINVAL;
    }
    int rc = 0;
    if (bm_json_get_u64(j, "/data/slot", &d.slot) != 0 ||
        bm_json_get_u64(j, "/data/index", &d.index) != 0 ||
        bm_json_get_root(j, "/data/beacon_block_root", d.beacon_block_root) != 0 ||
        bm_json_get_u64(j, "/data/source/epoch", &cp->source.epoch) != 0 ||
        bm_json_get_root(j, "/data/source/root", cp->source.root) != 0 ||
        bm_json_get_u64(j, "/data/target/epoch", &cp->target.epoch) != 0 ||
        bm_json_get_root(j, "/data/target/root", cp->target.root) != 0)
        rc = BM_EINVAL;
    json_object_put(j);
    if (rc == 0)
        *out = d;
    return rc;
}

int bm_attest_expected_index(const bm_expected_t *e, uint64_t slot)
{
    if (!e->known)
        return -1;
    if (e->slot_known && e->slot == slot)
        return 0; /* the block of the slot itself: its payload cannot be judged yet */
    if (e->is_cluster_head)
        return e->payload_full ? 1 : 0;
    return -1;
}

bool bm_attest_data_ok(const bm_expected_t *e, bool gloas, uint64_t slot, const bm_attest_data_t *d)
{
    if (!e->known)
        return true;
    if (memcmp(e->root, d->beacon_block_root, 32) != 0)
        return false;
    if (!gloas)
        return true;
    int idx = bm_attest_expected_index(e, slot);
    return idx < 0 || d->index == (uint64_t)idx;
}

int bm_attest_parse_root(const bm_buf_t *body, uint8_t out[32])
{
    if (!body)
        return BM_EINVAL;
    uint8_t r[32];
    bm_json_pick_t f = {.ptr = "/data/root"};
    int pr = bm_json_pick(body->data, body->len, 0, &f, 1);
    if (pr < 0 || (pr == 0 && bm_json_pick_root(&f, r) != 0))
        return BM_EINVAL;
    if (pr == 0) {
        memcpy(out, r, 32);
        return 0;
    }
    struct json_object *j = NULL; /* escapes in the text: the tree reads them */
    if (bm_json_parse_buf(body, 0, &j, NULL) != 0 || !j) {
        json_object_put(j);
        return BM_EINVAL;
    }
    int rc = bm_json_get_root(j, "/data/root", r) == 0 ? 0 : BM_EINVAL;
    json_object_put(j);
    if (rc == 0)
        memcpy(out, r, 32);
    return rc;
}

int bm_attest_parse_payload(const bm_hdrs_t *headers, const bm_buf_t *body,
                            bm_attest_payload_t *out)
{
    if (!body)
        return BM_EINVAL;
    if (headers && bm_hdrs_is_ssz(headers)) {
        bm_ssz_payload_attestation_data_t d;
        if (bm_ssz_payload_attestation_data((const uint8_t *)body->data, body->len, &d) != 0)
            return BM_EINVAL;
        memcpy(out->beacon_block_root, d.beacon_block_root, 32);
        out->slot = d.slot;
        out->payload_present = d.payload_present;
        out->blob_data_available = d.blob_data_available;
        return 0;
    }
    bm_attest_payload_t p;
    memset(&p, 0, sizeof p); /* padding included: *out gets no byte of the stack */
    bm_json_pick_t f[] = {{.ptr = "/data/beacon_block_root"},
                          {.ptr = "/data/slot"},
                          {.ptr = "/data/payload_present"},
                          {.ptr = "/data/blob_data_available"}};
    int pr = bm_json_pick(body->data, body->len, 0, f, sizeof f / sizeof f[0]);
    if (pr < 0)
        return BM_EINVAL;
    if (pr == 0) {
        if (bm_json_pick_root(&f[0], p.beacon_block_root) != 0 ||
            bm_json_pick_u64(&f[1], &p.slot) != 0 ||
            bm_json_pick_bool(&f[2], &p.payload_present) != 0 ||
            bm_json_pick_bool(&f[3], &p.blob_data_available) != 0)
            return BM_EINVAL;
        *out = p;
        return 0;
    }
    struct json_object *j = NULL; /* escapes in the text: the tree reads them */
    if (bm_json_parse_buf(body, 0, &j, NULL) != 0 || !j) {
        json_object_put(j);
        return BM_EINVAL;
    }
    int rc = 0;
    if (bm_json_get_root(j, "/data/beacon_block_root", p.beacon_block_root) != 0 ||
        bm_json_get_u64(j, "/data/slot", &p.slot) != 0 ||
        bm_json_get_bool(j, "/data/payload_present", &p.payload_present) != 0 ||
        bm_json_get_bool(j, "/data/blob_data_available", &p.blob_data_available) != 0)
        rc = BM_EINVAL;
    json_object_put(j);
    if (rc == 0)
        *out = p;
    return rc;
}

bool bm_attest_payload_ok(const bm_expected_t *e, uint64_t slot, const bm_attest_payload_t *p)
{
    if (p->slot != slot)
        return false;
    if (!e->known)
        return true;
    if (!e->slot_known || e->slot != slot || memcmp(e->root, p->beacon_block_root, 32) != 0)
        return false;
    return !(e->is_cluster_head && e->payload_full) || p->payload_present;
}

/* Appends s[0..n) at *at in out[0..cap), keeping room for the NUL; false when it does not
 * fit. */
static bool key_put(char *out, size_t cap, size_t *at, const char *s, size_t n)
{
    if (n >= cap - *at)
        return false;
    memcpy(out + *at, s, n);
    *at += n;
    return true;
}

int bm_attest_data_key(char *out, size_t cap, uint64_t slot, const char *committee_index,
                       const char *accept, bool pre_electra)
{
    /* built by hand: every attestation_data request makes one (snprintf cost ~1.3k
     * instructions of a ~25k request) */
    static const char head[] = "GET /eth/v1/validator/attestation_data slot=";
    char digits[20];
    size_t nd = 0, at = 0;
    do {
        digits[sizeof digits - ++nd] = (char)('0' + slot % 10);
        slot /= 10;
    } while (slot);
    const char *ci = pre_electra ? (committee_index ? committee_index : "-") : "*";
    const char *acc = accept ? accept : "-";
    if (cap == 0 || !key_put(out, cap, &at, head, sizeof head - 1) ||
        !key_put(out, cap, &at, digits + sizeof digits - nd, nd) ||
        !key_put(out, cap, &at, " ci=", 4) || !key_put(out, cap, &at, ci, strlen(ci)) ||
        !key_put(out, cap, &at, " accept=", 8) || !key_put(out, cap, &at, acc, strlen(acc)))
        return -1;
    out[at] = '\0';
    return (int)at;
}

/* ---- predicates of the races ---------------------------------------------------------- */

/* The race's answer `an` read as its endpoint's body (c->ep), once: 0 and *out, or an error. */
static int parse_answer(rctx_t *c, const bm_race_answer_t *an, const parsed_t **out)
{
    parsed_t *p = &c->last;
    if (!p->valid || p->node != an->node || p->attempt != an->attempt || p->body != an->body) {
        *p = (parsed_t){.valid = true, .node = an->node, .attempt = an->attempt, .body = an->body};
        switch (c->ep) {
        case EP_DATA:
            p->rc = bm_attest_parse_data(an->headers, an->body, &p->v.data);
            break;
        case EP_HEAD_ROOT:
            p->rc = bm_attest_parse_root(an->body, p->v.root);
            break;
        case EP_PAYLOAD:
            p->rc = bm_attest_parse_payload(an->headers, an->body, &p->v.payload);
            break;
        }
    }
    *out = p;
    return p->rc;
}

static int parse_data(rctx_t *c, const bm_race_answer_t *an, bm_attest_data_t *d)
{
    const parsed_t *p;
    if (parse_answer(c, an, &p) != 0)
        return BM_EINVAL;
    *d = p->v.data;
    return 0;
}

static int parse_root(rctx_t *c, const bm_race_answer_t *an, uint8_t root[32])
{
    const parsed_t *p;
    if (parse_answer(c, an, &p) != 0)
        return BM_EINVAL;
    memcpy(root, p->v.root, 32);
    return 0;
}

static int parse_payload(rctx_t *c, const bm_race_answer_t *an, bm_attest_payload_t *pl)
{
    const parsed_t *p;
    if (parse_answer(c, an, &p) != 0)
        return BM_EINVAL;
    *pl = p->v.payload;
    return 0;
}

/* An answer on the cluster head while a node's newer head is being resolved: not yet (the
 * race re-asks in a moment, by when the cluster head has moved or proved it should not). */
static bool stale_while_moving(const bm_hint_t *h, const bm_expected_t *e, uint64_t slot,
                               const uint8_t root[32])
{
    return e->known && e->is_cluster_head && memcmp(e->root, root, 32) == 0 &&
           bm_hint_head_moving(h, slot);
}

/* The nodes of this race that gave `pair` (strict mode's count), after noting `node`'s. */
static unsigned race_note(rctx_t *c, const bm_node_t *node, const bm_checkpoint_pair_t *pair)
{
    race_pair_t *rp = NULL;
    for (size_t i = 0; i < c->n_pairs && !rp; i++)
        if (bm_checkpoint_pair_equal(&c->pairs[i].pair, pair))
            rp = &c->pairs[i];
    if (!rp && c->n_pairs < RACE_PAIRS) {
        rp = &c->pairs[c->n_pairs++];
        rp->pair = *pair;
        rp->nodes = 0;
    }
    if (!rp)
        return 0;
    if (node && node->index >= 0 && node->index < 64)
        rp->nodes |= 1ull << node->index;
    unsigned n = 0;
    for (uint64_t v = rp->nodes; v; v &= v - 1)
        n++;
    return n;
}

/* Notes an answer's checkpoints in the book; an agreement that contradicts what was served
 * before it is counted and logged. */
static void book_note(rctx_t *c, const bm_race_answer_t *an, const bm_checkpoint_pair_t *cp)
{
    bm_attest_t *a = c->a;
    size_t node = an->node && an->node->index >= 0 ? (size_t)an->node->index : SIZE_MAX;
    size_t contradicted = bm_checkpoints_note(a->book, node, cp, c->quorum);
    if (contradicted) {
        a->stats.checkpoint_disagreements += contradicted;
        bm_log_limited(&a->lim, BM_LOG_WARN,
                       "attestation data of epoch %llu: %zu answer(s) served before the nodes "
                       "agreed on its checkpoints named others",
                       (unsigned long long)cp->target.epoch, contradicted);
    }
}

/* Every answer of an attestation data race, the ones that come after its decision included
 * (keep_losers): the book learns each node's checkpoints. */
static void data_observe(bm_race_t *r, const bm_race_answer_t *an, void *ud)
{
    (void)r;
    rctx_t *c = ud;
    bm_attest_data_t d;
    if (!an->err && bm_status_2xx(an->status) && parse_data(c, an, &d) == 0 && d.slot == c->slot)
        book_note(c, an, &d.checkpoints);
}

/* Whether an answer's checkpoints may be served (see attest.h): notes them in the book (and
 * the race's count), then applies the mode's rule. */
static bool checkpoints_ok(rctx_t *c, const bm_race_answer_t *an, const bm_attest_data_t *d)
{
    bm_attest_t *a = c->a;
    const bm_checkpoint_pair_t *cp = &d->checkpoints;
    book_note(c, an, cp);
    unsigned same = race_note(c, an->node, cp);
    bool ok = a->opts.checkpoint_mode == BM_ATTEST_CHECKPOINTS_STRICT
                  ? same >= c->quorum
                  : !bm_checkpoints_epoch_agreed(a->book, cp->target.epoch) ||
                        bm_checkpoints_agreed(a->book, cp);
    return ok;
}

static bool data_accept(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_data_t d;
    if (parse_data(c, an, &d) != 0 || d.slot != c->slot)
        return false;
    bool cp_ok = checkpoints_ok(c, an, &d);
    bm_expected_t e;
    bm_hint_expected(c->a->hint, c->slot, &e);
    if (stale_while_moving(c->a->hint, &e, c->slot, d.beacon_block_root))
        return false;
    if (!bm_attest_data_ok(&e, c->gloas, c->slot, &d))
        return false;
    if (!cp_ok)
        c->a->stats.checkpoint_refused++;
    return cp_ok;
}

static bool data_usable(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_data_t d;
    return parse_data(c, an, &d) == 0 && d.slot == c->slot && checkpoints_ok(c, an, &d);
}

/* Among answers that were not accepted, the one on the expected head (wrong index) first. */
static double data_score(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_data_t d;
    bm_expected_t e;
    if (parse_data(c, an, &d) != 0)
        return 0;
    bm_hint_expected(c->a->hint, c->slot, &e);
    return e.known && memcmp(e.root, d.beacon_block_root, 32) == 0 ? 1 : 0;
}

static bool root_accept(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    uint8_t root[32];
    if (parse_root(c, an, root) != 0)
        return false;
    bm_expected_t e;
    if (!bm_hint_expected(c->a->hint, UINT64_MAX, &e))
        return true;
    if (stale_while_moving(c->a->hint, &e, UINT64_MAX, root))
        return false;
    return memcmp(e.root, root, 32) == 0;
}

static bool root_usable(const bm_race_answer_t *an, void *ud)
{
    uint8_t root[32];
    return parse_root(ud, an, root) == 0;
}

static bool payload_accept(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_payload_t p;
    if (an->status != 200 || parse_payload(c, an, &p) != 0)
        return false;
    bm_expected_t e;
    bm_hint_expected(c->a->hint, c->slot, &e);
    return bm_attest_payload_ok(&e, c->slot, &p);
}

static bool payload_usable(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_payload_t p;
    if (an->status == 204)
        return true;
    return an->status == 200 && parse_payload(c, an, &p) == 0 && p.slot == c->slot;
}

/* A 200 beats a 204; a 200 on the expected block beats one on another block. */
static double payload_score(const bm_race_answer_t *an, void *ud)
{
    rctx_t *c = ud;
    bm_attest_payload_t p;
    if (an->status != 200 || parse_payload(c, an, &p) != 0)
        return 0;
    bm_expected_t e;
    bm_hint_expected(c->a->hint, c->slot, &e);
    return e.known && memcmp(e.root, p.beacon_block_root, 32) == 0 ? 2 : 1;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* Counts an answer served without the expected head (not accepted when the race judged it);
 * remembers the checkpoints served before their epoch had an agreement (live mode: a later
 * contradiction is reported). Every request waiting on the race comes here with the same
 * answer: it is read once (parse_answer) and not judged again. */
static void on_answer(bm_req_t *req, const bm_race_answer_t *an, void *ctx)
{
    rctx_t *c = ctx;
    bm_attest_t *a = c->a;
    bm_attest_data_t d;
    if (c->ep == EP_DATA && !an->err && bm_status_2xx(an->status) && parse_data(c, an, &d) == 0 &&
        !bm_checkpoints_agreed(a->book, &d.checkpoints))
        bm_checkpoints_served(a->book, &d.checkpoints);
    if (an->judged != BM_RACE_ACCEPTED) {
        a->stats.fallback++;
        bm_log_limited(&a->lim, BM_LOG_INFO, "%s: served %s %d without the expected head",
                       bm_req_target(req), an->node ? an->node->id : "beaconmux", an->status);
    }
}

/* The root a record of the race keeps (serve.h root_of): the head the answer is built on.
 * `ctx` is the race's own context, so the answer is read through its parse_answer, which
 * the race's observer and predicates have usually read already. */
static int answer_root(const bm_race_answer_t *an, void *ctx, uint8_t root[32], int *index)
{
    rctx_t *c = ctx;
    *index = -1;
    switch (c->ep) {
    case EP_DATA: {
        bm_attest_data_t d;
        if (parse_data(c, an, &d) != 0)
            return BM_EINVAL;
        memcpy(root, d.beacon_block_root, 32);
        if (c->gloas)
            *index = d.index <= 1 ? (int)d.index : -1;
        return 0;
    }
    case EP_HEAD_ROOT:
        return parse_root(c, an, root);
    case EP_PAYLOAD: {
        bm_attest_payload_t p;
        if (an->status != 200 || parse_payload(c, an, &p) != 0)
            return BM_EINVAL; /* a 204 names no block: the slot had none for that node */
        memcpy(root, p.beacon_block_root, 32);
        return 0;
    }
    }
    return BM_EINVAL;
}

/* ---- what a shadow node's answer is about (duties/shadow.h) --------------------------------- */

static bool shadow_read_data(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg,
                             bm_shadow_view_t *out)
{
    bm_attest_data_t d;
    (void)arg;
    if (bm_attest_parse_data(h, body, &d) != 0)
        return false;
    out->has_root = out->has_checkpoints = true;
    memcpy(out->root, d.beacon_block_root, 32);
    out->checkpoints = d.checkpoints;
    return true;
}

static bool shadow_read_root(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg,
                             bm_shadow_view_t *out)
{
    (void)h;
    (void)arg;
    out->has_root = bm_attest_parse_root(body, out->root) == 0;
    return out->has_root;
}

/* A 204 ("no block seen") is an answer about no block: read, not compared. */
static bool shadow_read_payload(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg,
                                bm_shadow_view_t *out)
{
    bm_attest_payload_t p;
    (void)arg;
    if (!body || body->len == 0)
        return true;
    if (bm_attest_parse_payload(h, body, &p) != 0)
        return false;
    out->has_root = true;
    memcpy(out->root, p.beacon_block_root, 32);
    return true;
}

static bm_shadow_read_t shadow_read_of(endpoint_t ep)
{
    switch (ep) {
    case EP_DATA:
        return (bm_shadow_read_t){BM_SHADOW_ATTESTATION_DATA, shadow_read_data, 0};
    case EP_HEAD_ROOT:
        return (bm_shadow_read_t){BM_SHADOW_HEAD_ROOT, shadow_read_root, 0};
    case EP_PAYLOAD:
        break;
    }
    return (bm_shadow_read_t){BM_SHADOW_PAYLOAD_ATTESTATION, shadow_read_payload, 0};
}

/* Serves `req` from the race under `key` (NULL: its own), judged with context `c`; the
 * record (when asked for) says the read is `duty` about `slot`. */
static void serve(bm_attest_t *a, bm_req_t *req, const char *key, rctx_t *c,
                  const bm_race_policy_t *pol, bm_duty_read_t duty, uint64_t slot)
{
    bm_node_t *nodes[BM_MAX_NODES];
    c->a = a;
    bm_serve_record_t rec = {
        .duty = duty,
        .slot = slot,
        .n_nodes = bm_pool_count(a->pool),
        .witness = a->witness ? bm_serve_witness_node(a->pool) : NULL,
        .root_of = answer_root,
        .fn = a->served_fn,
        .ud = a->served_ud,
    };
    bm_serve_t s = {
        .policy = *pol,
        .key = key,
        .nodes = nodes,
        .n = bm_hint_candidates(a->pool, nodes, BM_MAX_NODES),
        .ctx = c,
        .ctx_size = sizeof *c,
        .on_answer = on_answer,
        .record = a->served_fn ? &rec : NULL,
        .shadow = a->shadow,
        .shadow_read = shadow_read_of(c->ep),
    };
    /* the checkpoint quorum, automatic like headQuorum: 2 with three or more nodes */
    c->quorum = a->opts.checkpoint_quorum ? a->opts.checkpoint_quorum : s.n >= 3 ? 2 : 1;
    bool joined;
    a->stats.requests++;
    if (bm_serve(a->race, req, &s, &joined)) {
        if (joined)
            a->stats.joined++;
        else
            a->stats.races++;
    }
}

/* The rules every read of this policy shares: re-asked until accepted by the deadline, every
 * node asked again after a failure until `end` (hint: max(now + maxHold, due)), then the
 * most specific error: a 4xx, else a 503 naming each node's failure. */
static void base_policy(const bm_attest_t *a, bm_race_policy_t *p, uint64_t deadline, uint64_t end)
{
    memset(p, 0, sizeof *p);
    p->deadline_ms = deadline;
    p->hard_timeout_ms = end;
    p->reask_failures = true;
    p->name_failures = true;
    p->repoll = BM_REPOLL_UNTIL_ACCEPTED;
    p->repoll_interval_ms = a->opts.repoll_interval_ms;
    p->connect_timeout_ms = a->opts.connect_timeout_ms;
    p->max_response_bytes = 1u << 20; /* these answers are a few hundred bytes */
}

/* The base policy with the deadline and end the hint gives `kind` at `slot`. */
static void hint_policy(const bm_attest_t *a, bm_race_policy_t *p, bm_hint_duty_t kind,
                        uint64_t slot, uint64_t now)
{
    base_policy(a, p, bm_hint_deadline(a->hint, kind, slot, now),
                bm_hint_end(a->hint, kind, slot, now));
}

/* The request's slot query parameter; without a valid one the request is answered 400. */
static bool query_slot(bm_req_t *req, uint64_t *slot)
{
    char v[32];
    int n = bm_req_query_param(req, "slot", v, sizeof v);
    if (n > 0 && bm_json_parse_u64(v, (size_t)n, slot) == 0)
        return true;
    bm_resp_error(req, 400, "Invalid or missing slot query parameter");
    return false;
}

static void route_data(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_attest_t *a = ud;
    uint64_t slot;
    if (!query_slot(req, &slot))
        return;
    char ci[256]; /* longer than any index: then no key fits and the race is its own */
    int circ = bm_req_query_param(req, "committee_index", ci, sizeof ci);
    bool has_ci = circ >= 0;
    bool ci_too_long = circ == BM_ETOOBIG;
    bm_fork_t fork;
    bool fork_known = bm_hint_fork(a->hint, slot, &fork);
    bool pre_electra = !fork_known || fork < BM_FORK_ELECTRA;
    char key[KEY_MAX];
    const char *kp = key;
    if (ci_too_long || bm_attest_data_key(key, sizeof key, slot, has_ci ? ci : NULL,
                                          bm_req_header(req, "accept"), pre_electra) < 0)
        kp = NULL; /* an absurd parameter or Accept: a race of its own */

    uint64_t now = bm_clock_wall_now(a->clock);
    rctx_t t = {.ep = EP_DATA, .slot = slot, .gloas = fork_known && fork >= BM_FORK_GLOAS};
    bm_race_policy_t pol;
    hint_policy(a, &pol, BM_HINT_ATTESTATION_DATA, slot, now);
    pol.accept = data_accept;
    pol.usable = data_usable;
    pol.score = data_score;
    /* the checkpoints of every node's answer are wanted, the slower ones too */
    pol.observe = data_observe;
    pol.keep_losers = true;
    serve(a, req, kp, &t, &pol, BM_DUTY_READ_ATTESTATION_DATA, slot);
}

static void route_head_root(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_attest_t *a = ud;
    uint64_t now = bm_clock_wall_now(a->clock), slot = 0;
    uint64_t deadline, end;
    bm_hint_hold_t hold = bm_hint_get_hold(a->hint, BM_HINT_HEAD_ROOT);
    if (bm_hint_slot_at(a->hint, now, &slot)) {
        deadline = bm_hint_deadline(a->hint, BM_HINT_HEAD_ROOT, slot, now);
        end = bm_hint_end(a->hint, BM_HINT_HEAD_ROOT, slot, now);
    } else {
        deadline = now + hold.hold_floor_ms;
        end = now + hold.max_hold_ms;
    }
    char key[KEY_MAX];
    const char *accept = bm_req_header(req, "accept");
    int n = snprintf(key, sizeof key, "GET /eth/v1/beacon/blocks/head/root accept=%s",
                     accept ? accept : "-");
    rctx_t t = {.ep = EP_HEAD_ROOT, .slot = UINT64_MAX};
    bm_race_policy_t pol;
    base_policy(a, &pol, deadline, end);
    pol.accept = root_accept;
    pol.usable = root_usable;
    serve(a, req, n > 0 && (size_t)n < sizeof key ? key : NULL, &t, &pol, BM_DUTY_READ_HEAD_ROOT,
          slot);
}

static void route_payload(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    bm_attest_t *a = ud;
    uint64_t slot;
    if (!query_slot(req, &slot))
        return;
    uint64_t now = bm_clock_wall_now(a->clock);
    char key[KEY_MAX];
    const char *accept = bm_req_header(req, "accept");
    int n = snprintf(key, sizeof key,
                     "GET /eth/v1/validator/payload_attestation_data slot=%llu "
                     "accept=%s",
                     (unsigned long long)slot, accept ? accept : "-");
    rctx_t t = {.ep = EP_PAYLOAD, .slot = slot, .gloas = true};
    bm_race_policy_t pol;
    hint_policy(a, &pol, BM_HINT_PAYLOAD_ATTESTATION, slot, now);
    pol.accept = payload_accept;
    pol.usable = payload_usable;
    pol.score = payload_score;
    serve(a, req, n > 0 && (size_t)n < sizeof key ? key : NULL, &t, &pol,
          BM_DUTY_READ_PAYLOAD_ATTESTATION, slot);
}

int bm_attest_register(bm_attest_t *a, bm_router_t *r)
{
    int rc = bm_router_add(r, "GET", "/eth/v1/validator/attestation_data", route_data, a);
    if (!rc)
        rc = bm_router_add(r, "GET", "/eth/v1/beacon/blocks/head/root", route_head_root, a);
    if (!rc)
        rc =
            bm_router_add(r, "GET", "/eth/v1/validator/payload_attestation_data", route_payload, a);
    return rc;
}
