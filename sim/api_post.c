/* SPDX-License-Identifier: MIT */
/*
 * api_post: everything a validator client submits to a node. Each submission is
 * recorded by the dispatcher (with the status answered) so tests can check broadcasts.
 * Answers are those of a real node: 200 with an empty body; for batches, 400 with an
 * IndexedErrorMessage naming each malformed item; for blocks 200 (imported), 202
 * (broadcast, but the parent is unknown here) or 400 (did not pass validation).
 * Attestations, sync messages and aggregates mark their validators live for liveness.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "base/err.h"

/* ---- item checks ---------------------------------------------------------------------- */

typedef struct failures {
    bm_str_t s;
    size_t n;
    size_t dups; /* of which refusals as duplicates (dup-items) */
} failures_t;

static void fail(failures_t *f, size_t index, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(failures_t *f, size_t index, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bm_str_printf(&f->s, "%s{\"index\":%zu,\"message\":", f->n ? "," : "", index);
    bm_str_json_string(&f->s, msg, strlen(msg));
    bm_str_putc(&f->s, '}');
    f->n++;
}

/* The node's behaviour on a pool batch of `n` items: the items of fail-items fail
 * validation, those of dup-items are refused as seen already (another node gossiped them). */
static void item_faults(ctx_t *x, failures_t *f, size_t n)
{
    const bs_behav_t *b = &x->n->behav;
    for (size_t i = 0; i < n && i < 64; i++) {
        if (b->fail_items & (1ull << i)) {
            fail(f, i, "invalid signature (fail-items)");
        } else if (b->dup_items & (1ull << i)) {
            fail(f, i, "PublishError.Duplicate");
            f->dups++;
        }
    }
}

/* Answers the IndexedErrorMessage if there were failures; returns true when it did. Only
 * duplicates: a 500, as a real Lodestar answers them; else a 400. */
static bool reply_failures(ctx_t *x, failures_t *f)
{
    if (f->n == 0) {
        bm_str_dispose(&f->s);
        return false;
    }
    int status = f->dups == f->n ? 500 : 400;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"code\":%d,\"message\":\"%s\",\"failures\":[", status,
                  status == 500 ? "Error processing items" : "Some items failed validation");
    bm_str_append(&s, bm_str_data(&f->s), bm_str_len(&f->s));
    bm_str_puts(&s, "]}");
    bm_str_dispose(&f->s);
    bm_buf_t *b = bm_str_finish(&s);
    x->status = status;
    if (b)
        bm_resp_send(x->req, status, "application/json", b, NULL);
    else
        bm_resp_error(x->req, 500, "out of memory");
    bm_buf_unref(b);
    return true;
}

static json_object *get(json_object *o, const char *k)
{
    json_object *v = NULL;
    if (o && json_object_is_type(o, json_type_object))
        json_object_object_get_ex(o, k, &v);
    return v;
}

static bool get_u64(json_object *o, const char *k, uint64_t *out)
{
    json_object *v = get(o, k);
    return v && json_object_is_type(v, json_type_string) &&
           api_parse_u64(json_object_get_string(v), out);
}

static bool get_root(json_object *o, const char *k, bs_root_t *out)
{
    json_object *v = get(o, k);
    if (!v || !json_object_is_type(v, json_type_string))
        return false;
    const char *s = json_object_get_string(v);
    return bs_root_parse(s, strlen(s), out) == 0;
}

/* Checks that every item is an object with the keys; records failures. */
static void check_keys(failures_t *f, json_object *arr, const char *const *keys)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *it = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(it, json_type_object)) {
            fail(f, i, "item is not an object");
            continue;
        }
        for (const char *const *k = keys; *k; k++)
            if (!get(it, *k)) {
                fail(f, i, "missing field %s", *k);
                break;
            }
    }
}

/* The JSON array body, or NULL (answered). */
static json_object *array_body(ctx_t *x)
{
    json_object *a = api_body_json(x);
    if (!a)
        return NULL;
    if (!json_object_is_type(a, json_type_array)) {
        json_object_put(a);
        api_reply_error(x, 400, "request body must be a JSON array");
        return NULL;
    }
    return a;
}

static bool need_version(ctx_t *x)
{
    const char *v = bm_req_header(x->req, "Eth-Consensus-Version");
    if (!v) {
        api_reply_error(x, 400, "Missing required header: Eth-Consensus-Version");
        return false;
    }
    static const char *const known[] = {"phase0", "altair",  "bellatrix", "capella",
                                        "deneb",  "electra", "fulu",      "gloas"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(v, known[i]) == 0)
            return true;
    api_reply_error(x, 400, "Invalid Eth-Consensus-Version: %s", v);
    return false;
}

/* An SSZ list of fixed-size items: accepted when the length fits. */
static void ssz_fixed_list(ctx_t *x, size_t item)
{
    bm_buf_t *b = bm_req_body(x->req);
    if (!b || b->len == 0 || b->len % item != 0) {
        api_reply_error(x, 400, "SSZ body length %zu is not a multiple of %zu", b ? b->len : 0,
                        item);
        return;
    }
    api_reply_empty(x, 200);
}

/* Generic batch: array of objects with keys; `pool`: a pool submission (item faults). */
static void batch(ctx_t *x, const char *const *keys, bool versioned, bool pool)
{
    if (versioned && !need_version(x))
        return;
    json_object *a = array_body(x);
    if (!a)
        return;
    failures_t f = {BM_STR_INIT, 0, 0};
    check_keys(&f, a, keys);
    if (pool && f.n == 0)
        item_faults(x, &f, json_object_array_length(a));
    if (!reply_failures(x, &f))
        api_reply_empty(x, 200);
    json_object_put(a);
}

/* ---- pools ------------------------------------------------------------------------------ */

static bool parse_cp(json_object *o, bs_checkpoint_t *cp)
{
    return get_u64(o, "epoch", &cp->epoch) && get_root(o, "root", &cp->root);
}

static bool parse_att_data(json_object *o, bs_att_data_t *d)
{
    return o && get_u64(o, "slot", &d->slot) && get_u64(o, "index", &d->index) &&
           get_root(o, "beacon_block_root", &d->beacon_block_root) &&
           parse_cp(get(o, "source"), &d->source) && parse_cp(get(o, "target"), &d->target);
}

void h_pool_attestations(ctx_t *x)
{
    if (!need_version(x))
        return;
    if (api_body_is_ssz(x)) {
        ssz_fixed_list(x, 8 + 8 + 128 + 96); /* SingleAttestation */
        return;
    }
    json_object *a = array_body(x);
    if (!a)
        return;
    failures_t f = {BM_STR_INIT, 0, 0};
    uint32_t nv = bs_chain_config(x->c)->validators;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *it = json_object_array_get_idx(a, i);
        bs_att_data_t d;
        uint64_t ci, ai;
        if (!get_u64(it, "committee_index", &ci) || !get_u64(it, "attester_index", &ai)) {
            fail(&f, i, "committee_index and attester_index must be decimal strings");
            continue;
        }
        if (!parse_att_data(get(it, "data"), &d)) {
            fail(&f, i, "data is not a valid AttestationData");
            continue;
        }
        if (!get(it, "signature")) {
            fail(&f, i, "missing field signature");
            continue;
        }
        if (ai >= nv) {
            fail(&f, i, "unknown validator index %llu", (unsigned long long)ai);
            continue;
        }
        bs_node_mark_live(x->n, (uint32_t)ai, bs_chain_epoch_of(x->c, d.slot));
        bs_node_memo_att(x->n, &d);
    }
    if (f.n == 0)
        item_faults(x, &f, json_object_array_length(a));
    if (!reply_failures(x, &f))
        api_reply_empty(x, 200);
    json_object_put(a);
}

void h_pool_sync(ctx_t *x)
{
    json_object *a = array_body(x);
    if (!a)
        return;
    failures_t f = {BM_STR_INIT, 0, 0};
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *it = json_object_array_get_idx(a, i);
        uint64_t slot, vi;
        bs_root_t r;
        if (!get_u64(it, "slot", &slot) || !get_u64(it, "validator_index", &vi) ||
            !get_root(it, "beacon_block_root", &r) || !get(it, "signature")) {
            fail(&f, i, "not a valid SyncCommitteeMessage");
            continue;
        }
        if (vi <= UINT32_MAX)
            bs_node_mark_live(x->n, (uint32_t)vi, bs_chain_epoch_of(x->c, slot));
    }
    if (f.n == 0)
        item_faults(x, &f, json_object_array_length(a));
    if (!reply_failures(x, &f))
        api_reply_empty(x, 200);
    json_object_put(a);
}

void h_pool_payload_att(ctx_t *x)
{
    static const char *const keys[] = {"validator_index", "data", "signature", NULL};
    if (api_body_is_ssz(x)) {
        if (need_version(x))
            ssz_fixed_list(x, 8 + 42 + 96);
        return;
    }
    batch(x, keys, true, true);
}

void h_pool_single(ctx_t *x)
{
    const char *name = bs_api_route_name(x->route);
    const char *k1, *k2;
    if (strcmp(name, "submitPoolVoluntaryExit") == 0) {
        k1 = "message";
        k2 = "signature";
    } else if (strcmp(name, "submitPoolProposerSlashings") == 0) {
        k1 = "signed_header_1";
        k2 = "signed_header_2";
    } else {
        if (!need_version(x))
            return;
        k1 = "attestation_1";
        k2 = "attestation_2";
    }
    json_object *o = api_body_json(x);
    if (!o)
        return;
    if (!json_object_is_type(o, json_type_object) || !get(o, k1) || !get(o, k2))
        api_reply_error(x, 400, "Invalid object: %s and %s are required", k1, k2);
    else
        api_reply_empty(x, 200);
    json_object_put(o);
}

void h_pool_bls(ctx_t *x)
{
    static const char *const keys[] = {"message", "signature", NULL};
    batch(x, keys, false, true);
}

void h_aggregate_and_proofs(ctx_t *x)
{
    if (!need_version(x))
        return;
    if (api_body_is_ssz(x)) {
        bm_buf_t *b = bm_req_body(x->req);
        if (!b || b->len < 4)
            api_reply_error(x, 400, "SSZ body too short");
        else
            api_reply_empty(x, 200);
        return;
    }
    json_object *a = array_body(x);
    if (!a)
        return;
    failures_t f = {BM_STR_INIT, 0, 0};
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *it = json_object_array_get_idx(a, i);
        json_object *m = get(it, "message");
        uint64_t ai;
        bs_att_data_t d;
        if (!m || !get(it, "signature") || !get_u64(m, "aggregator_index", &ai) ||
            !get(m, "selection_proof") || !parse_att_data(get(get(m, "aggregate"), "data"), &d)) {
            fail(&f, i, "not a valid SignedAggregateAndProof");
            continue;
        }
        if (ai <= UINT32_MAX)
            bs_node_mark_live(x->n, (uint32_t)ai, bs_chain_epoch_of(x->c, d.slot));
    }
    if (f.n == 0)
        item_faults(x, &f, json_object_array_length(a));
    if (!reply_failures(x, &f))
        api_reply_empty(x, 200);
    json_object_put(a);
}

void h_contribution_and_proofs(ctx_t *x)
{
    static const char *const keys[] = {"message", "signature", NULL};
    batch(x, keys, false, true);
}

void h_committee_subs(ctx_t *x)
{
    static const char *const keys[] = {
        "validator_index", "committee_index", "committees_at_slot", "slot", "is_aggregator", NULL};
    batch(x, keys, false, false);
}

void h_sync_subs(ctx_t *x)
{
    static const char *const keys[] = {"validator_index", "sync_committee_indices", "until_epoch",
                                       NULL};
    batch(x, keys, false, false);
}

void h_prepare_proposer(ctx_t *x)
{
    static const char *const keys[] = {"validator_index", "fee_recipient", NULL};
    batch(x, keys, false, false);
}

void h_register_validator(ctx_t *x)
{
    static const char *const keys[] = {"message", "signature", NULL};
    if (api_body_is_ssz(x)) {
        ssz_fixed_list(x, 20 + 8 + 8 + 48 + 96);
        return;
    }
    batch(x, keys, false, false);
}

void h_proposer_preferences(ctx_t *x)
{
    static const char *const keys[] = {"message", "signature", NULL};
    if (api_body_is_ssz(x)) {
        if (need_version(x))
            ssz_fixed_list(x, 32 + 8 + 8 + 20 + 8 + 96);
        return;
    }
    batch(x, keys, true, false);
}

void h_selections(ctx_t *x)
{
    static const char *const keys[] = {"validator_index", "slot", "selection_proof", NULL};
    json_object *a = array_body(x);
    if (!a)
        return;
    failures_t f = {BM_STR_INIT, 0, 0};
    check_keys(&f, a, keys);
    if (!reply_failures(x, &f)) {
        /* a single-node "cluster": the combined proof is the partial one */
        bm_str_t s = BM_STR_INIT;
        bm_str_puts(&s, "{\"data\":");
        const char *js = json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN);
        bm_str_puts(&s, js);
        bm_str_putc(&s, '}');
        api_reply_str(x, 200, &s, NULL);
    }
    json_object_put(a);
}

/* ---- blocks and envelopes --------------------------------------------------------------- */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool broadcast_validation_ok(ctx_t *x)
{
    char v[64];
    if (!api_query(x, "broadcast_validation", v, sizeof v))
        return true;
    if (strcmp(v, "gossip") == 0 || strcmp(v, "consensus") == 0 ||
        strcmp(v, "consensus_and_equivocation") == 0)
        return true;
    api_reply_error(x, 400, "Invalid broadcast_validation: %s", v);
    return false;
}

/* Reads slot and parent_root of a block message from JSON. */
static bool json_block_msg(json_object *m, uint64_t *slot, bs_root_t *parent)
{
    return m && get_u64(m, "slot", slot) && get_root(m, "parent_root", parent) &&
           get(m, "proposer_index") && get(m, "state_root") && get(m, "body");
}

/* Reads slot and parent_root from a signed block (SSZ) starting at base. */
static bool ssz_signed_block(const uint8_t *p, size_t len, size_t base, uint64_t *slot,
                             bs_root_t *parent)
{
    if (len < base + 100)
        return false;
    uint32_t off = le32(p + base);
    if (off != 100 || len < base + off + 84 || le32(p + base + off + 80) != 84)
        return false;
    *slot = le64(p + base + off);
    memcpy(parent->b, p + base + off + 16, 32);
    return true;
}

/* 200 when the node knows the parent (imported), else 202 (broadcast, not imported). `v` is
 * the block's fork name (the header, or the current fork for a legacy v1 publish). */
static void block_verdict(ctx_t *x, const char *v, uint64_t slot, const bs_root_t *parent,
                          bool blinded)
{
    bs_fork_t f = bs_chain_fork_at(x->c, slot);
    if (strcmp(v, bs_fork_name(f)) != 0) {
        api_reply_error(x, 400, "Eth-Consensus-Version %s does not match the block's fork %s", v,
                        bs_fork_name(f));
        return;
    }
    if (blinded && f == BS_FORK_GLOAS) {
        api_reply_error(x, 400, "There are no blinded blocks from the gloas fork");
        return;
    }
    bs_block_id_t id;
    if (slot > x->slot_now + 1) {
        api_reply_error(x, 400, "Block slot %llu is in the future", (unsigned long long)slot);
        return;
    }
    if (!bs_node_find_root(x->n, parent, &id)) {
        api_reply_empty(x, 202);
        return;
    }
    api_reply_empty(x, 200);
}

/* A block publish. `versioned` (v2): Eth-Consensus-Version is required; the legacy v1
 * routes take the fork of the current slot when it is absent. */
static void publish(ctx_t *x, bool blinded, bool versioned)
{
    const char *v = bm_req_header(x->req, "Eth-Consensus-Version");
    if (!v && !versioned)
        v = bs_fork_name(bs_chain_fork_at(x->c, x->slot_now));
    else if (!need_version(x))
        return;
    if (!broadcast_validation_ok(x))
        return;
    bool contents =
        !blinded && strcmp(v, "gloas") != 0 &&
        (strcmp(v, "deneb") == 0 || strcmp(v, "electra") == 0 || strcmp(v, "fulu") == 0);
    uint64_t slot = 0;
    bs_root_t parent;
    if (api_body_is_ssz(x)) {
        bm_buf_t *b = bm_req_body(x->req);
        const uint8_t *p = b ? (const uint8_t *)b->data : NULL;
        size_t len = b ? b->len : 0;
        bool ok;
        if (contents)
            ok = len >= 12 && le32(p) == 12 && le32(p + 4) >= 12 && le32(p + 8) >= le32(p + 4) &&
                 le32(p + 8) <= len && ssz_signed_block(p, le32(p + 4), 12, &slot, &parent);
        else
            ok = ssz_signed_block(p, len, 0, &slot, &parent);
        if (!ok) {
            api_reply_error(x, 400, "Invalid SSZ block body");
            return;
        }
    } else {
        json_object *o = api_body_json(x);
        if (!o)
            return;
        json_object *m = contents ? get(get(o, "signed_block"), "message") : get(o, "message");
        bool ok = json_block_msg(m, &slot, &parent) &&
                  (contents ? get(o, "kzg_proofs") && get(o, "blobs") &&
                                  get(get(o, "signed_block"), "signature")
                            : get(o, "signature") != NULL);
        json_object_put(o);
        if (!ok) {
            api_reply_error(x, 400, "Invalid block: %s",
                            contents ? "expected {signed_block:{message,signature},kzg_proofs,"
                                       "blobs}"
                                     : "expected {message,signature}");
            return;
        }
    }
    block_verdict(x, v, slot, &parent, blinded);
}

void h_publish_block(ctx_t *x)
{
    publish(x, false, true);
}

void h_publish_blinded(ctx_t *x)
{
    publish(x, true, true);
}

void h_publish_block_v1(ctx_t *x)
{
    publish(x, false, false);
}

void h_publish_blinded_v1(ctx_t *x)
{
    publish(x, true, false);
}

void h_publish_envelope(ctx_t *x)
{
    if (!need_version(x) || !broadcast_validation_ok(x))
        return;
    const char *inc = bm_req_header(x->req, "Eth-Blob-Data-Included");
    if (!inc || (strcmp(inc, "true") != 0 && strcmp(inc, "false") != 0)) {
        api_reply_error(x, 400, "Missing or invalid header: Eth-Blob-Data-Included");
        return;
    }
    bool included = strcmp(inc, "true") == 0;
    bs_root_t root;
    if (api_body_is_ssz(x)) {
        bm_buf_t *b = bm_req_body(x->req);
        const uint8_t *p = b ? (const uint8_t *)b->data : NULL;
        size_t len = b ? b->len : 0;
        size_t at = included ? 128 : 116;
        if (len < at + 32 || (included && le32(p) != 12) || (!included && le32(p) != 100)) {
            api_reply_error(x, 400, "Invalid SSZ envelope body");
            return;
        }
        memcpy(root.b, p + at, 32);
    } else {
        json_object *o = api_body_json(x);
        if (!o)
            return;
        json_object *env = included ? get(o, "signed_execution_payload_envelope") : o;
        bool ok = env && get(env, "signature") &&
                  get_root(get(env, "message"), "beacon_block_root", &root) &&
                  (!included || (get(o, "kzg_proofs") && get(o, "blobs")));
        json_object_put(o);
        if (!ok) {
            api_reply_error(x, 400, "Invalid execution payload envelope");
            return;
        }
    }
    if (!included && !api_val_has_envelope(x, &root)) {
        api_reply_error(x, 400,
                        "No cached blobs for this envelope: publish with the blob data "
                        "(Eth-Blob-Data-Included: true) or to the producing node");
        return;
    }
    api_reply_empty(x, 200);
}
