/* SPDX-License-Identifier: MIT */
/*
 * api_val: the validator reads of a simulated node: attestation data (rendered once per
 * head change and served from cached buffers, the hot path of every benchmark),
 * aggregates and sync contributions with per-node participation, payload attestation
 * data, duties with dependent roots from the node's own view, liveness, and block
 * production (v3 fulu, v4 gloas) with deterministic per-node block values.
 */
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "base/err.h"
#include "base/json.h"

#define ENVELOPE_MEMO 8

typedef struct val_cache {
    bool att_valid;
    uint64_t att_slot, att_gen;
    bool att_bad_source, att_bad_target; /* the behaviours the cached answer was made with */
    bm_buf_t *att_json, *att_ssz, *att_gz;
    struct {
        bool used;
        uint64_t slot;
        bs_root_t root;
        bs_block_desc_t d;
    } env[ENVELOPE_MEMO];
    unsigned env_next;
} val_cache_t;

void api_val_cache_free(void *cache)
{
    val_cache_t *c = cache;
    bm_buf_unref(c->att_json);
    bm_buf_unref(c->att_ssz);
    bm_buf_unref(c->att_gz);
    free(c);
}

static val_cache_t *vcache(ctx_t *x)
{
    if (!x->n->cache) {
        x->n->cache = calloc(1, sizeof(val_cache_t));
        x->n->cache_free = api_val_cache_free;
    }
    return x->n->cache;
}

static bool slot_query(ctx_t *x, uint64_t *slot)
{
    char v[64];
    if (!api_query(x, "slot", v, sizeof v)) {
        api_reply_error(x, 400, "Missing required query parameter: slot");
        return false;
    }
    if (!api_parse_u64(v, slot)) {
        api_reply_error(x, 400, "Invalid slot: %s", v);
        return false;
    }
    return true;
}

static bool epoch_param(ctx_t *x, uint64_t *epoch, uint64_t ahead)
{
    if (!api_parse_u64(x->param[0], epoch)) {
        api_reply_error(x, 400, "Invalid epoch: %s", x->param[0]);
        return false;
    }
    uint64_t cur = bs_chain_epoch_of(x->c, x->slot_now);
    if (*epoch > cur + ahead) {
        api_reply_error(x, 400, "Requested epoch %llu is more than %llu epoch(s) ahead of %llu",
                        (unsigned long long)*epoch, (unsigned long long)ahead,
                        (unsigned long long)cur);
        return false;
    }
    return true;
}

/* ---- attestation data --------------------------------------------------------------- */

void h_attestation_data(ctx_t *x)
{
    uint64_t slot;
    char v[64];
    if (!slot_query(x, &slot))
        return;
    if (api_query(x, "committee_index", v, sizeof v)) {
        uint64_t ci;
        if (!api_parse_u64(v, &ci)) {
            api_reply_error(x, 400, "Invalid committee_index: %s", v);
            return;
        }
    }
    if (slot > x->slot_now + 1) {
        api_reply_error(x, 400, "Slot %llu is in the future (current slot %llu)",
                        (unsigned long long)slot, (unsigned long long)x->slot_now);
        return;
    }
    val_cache_t *vc = vcache(x);
    if (!vc) {
        api_reply_error(x, 500, "out of memory");
        return;
    }
    const bs_behav_t *bh = &x->n->behav;
    if (!vc->att_valid || vc->att_slot != slot || vc->att_gen != x->n->head_gen ||
        vc->att_bad_source != bh->bad_source || vc->att_bad_target != bh->bad_target) {
        bs_att_data_t d;
        bs_node_attestation_data(x->n, slot, &d);
        /* a fork-choice bug in justification: the head is right, a checkpoint is not */
        uint64_t seed = bs_chain_config(x->c)->seed;
        if (bh->bad_source)
            d.source.root = bs_hash(seed, BS_TAG_WRONG, 1, d.source.epoch, 0);
        if (bh->bad_target)
            d.target.root = bs_hash(seed, BS_TAG_WRONG, 2, d.target.epoch, 0);
        bs_node_memo_att(x->n, &d);
        bm_buf_unref(vc->att_json);
        bm_buf_unref(vc->att_ssz);
        bm_buf_unref(vc->att_gz);
        vc->att_gz = NULL;
        bm_str_t s = BM_STR_INIT;
        bm_str_puts(&s, "{\"data\":");
        bs_att_data_json(&s, &d);
        bm_str_putc(&s, '}');
        vc->att_json = bm_str_finish(&s);
        bs_att_data_ssz(&s, &d);
        vc->att_ssz = bm_str_finish(&s);
        vc->att_slot = slot;
        vc->att_gen = x->n->head_gen;
        vc->att_bad_source = bh->bad_source;
        vc->att_bad_target = bh->bad_target;
        vc->att_valid = vc->att_json && vc->att_ssz;
    }
    if (x->want_ssz)
        api_reply_ssz_buf(x, vc->att_ssz, NULL);
    else
        api_reply_buf(x, 200, vc->att_json, &vc->att_gz, NULL);
}

/* ---- aggregates and contributions ---------------------------------------------------------- */

/* How many of `len` participants this node has heard from (deterministic, >= 1). */
static uint32_t participation(ctx_t *x, uint64_t slot, uint32_t len, uint64_t salt)
{
    if (len == 0)
        return 0;
    uint64_t h = bs_hash_u64(bs_chain_config(x->c)->seed, BS_TAG_BITS, x->n->index, slot, salt);
    uint32_t pct = 40 + (uint32_t)((x->n->index * 23 + h % 37) % 61); /* 40..100 % */
    uint32_t k = (uint32_t)((uint64_t)len * pct / 100);
    return k ? k : 1;
}

void h_aggregate(ctx_t *x)
{
    char v[128];
    uint64_t slot, ci;
    bs_root_t root;
    if (!api_query(x, "attestation_data_root", v, sizeof v) ||
        bs_root_parse(v, strlen(v), &root) != 0) {
        api_reply_error(x, 400, "Missing or invalid attestation_data_root");
        return;
    }
    if (!slot_query(x, &slot))
        return;
    if (!api_query(x, "committee_index", v, sizeof v) || !api_parse_u64(v, &ci)) {
        api_reply_error(x, 400, "Missing or invalid committee_index");
        return;
    }
    bs_att_data_t d;
    if (!bs_node_find_att(x->n, &root, &d)) {
        bs_node_attestation_data(x->n, slot, &d);
        bs_root_t r = bs_att_data_root(&d);
        if (!bs_root_eq(&r, &root)) {
            api_reply_error(x, 404, "No aggregate for attestation_data_root %s", v);
            return;
        }
        bs_node_memo_att(x->n, &d);
    }
    if (d.slot != slot || ci != 0) {
        api_reply_error(x, 404, "No aggregate for slot %llu committee %llu",
                        (unsigned long long)slot, (unsigned long long)ci);
        return;
    }
    bs_root_t dep = bs_node_dependent_root(x->n, bs_chain_epoch_of(x->c, slot), 1);
    uint32_t len = bs_chain_committee_length(x->c, &dep, slot);
    if (len == 0) {
        api_reply_error(x, 404, "Empty committee at slot %llu", (unsigned long long)slot);
        return;
    }
    uint32_t k = participation(x, slot, len, 1);
    uint8_t bits[256] = {0};
    for (uint32_t i = 0; i < k && i < 2048; i++)
        bits[i / 8] |= (uint8_t)(1u << (i % 8));
    uint8_t sig[96];
    bs_fake_sig(bs_chain_config(x->c)->seed, 0xa66, slot * 64 + x->n->index, sig);
    const char *fork = bs_fork_name(bs_chain_fork_at(x->c, slot));
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", fork);
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        bs_attestation_ssz(&s, &d, bits, len, sig);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_printf(&s, "{\"version\":\"%s\",\"data\":", fork);
        bs_attestation_json(&s, &d, bits, len, sig);
        bm_str_putc(&s, '}');
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

void h_sync_contribution(ctx_t *x)
{
    char v[128];
    uint64_t slot, sub;
    bs_root_t root;
    if (!slot_query(x, &slot))
        return;
    if (!api_query(x, "subcommittee_index", v, sizeof v) || !api_parse_u64(v, &sub) ||
        sub >= BS_SYNC_SUBNETS) {
        api_reply_error(x, 400, "Missing or invalid subcommittee_index");
        return;
    }
    if (!api_query(x, "beacon_block_root", v, sizeof v) ||
        bs_root_parse(v, strlen(v), &root) != 0) {
        api_reply_error(x, 400, "Missing or invalid beacon_block_root");
        return;
    }
    bs_block_id_t id;
    if (!bs_node_find_root(x->n, &root, &id) || id.slot > slot) {
        api_reply_error(x, 404, "No sync committee contribution for block %s", v);
        return;
    }
    const uint32_t len = BS_SYNC_COMMITTEE_SIZE / BS_SYNC_SUBNETS;
    uint32_t k = participation(x, slot, len, 100 + sub);
    uint8_t bits[BS_SYNC_COMMITTEE_SIZE / BS_SYNC_SUBNETS / 8] = {0};
    for (uint32_t i = 0; i < k; i++)
        bits[i / 8] |= (uint8_t)(1u << (i % 8));
    uint8_t sig[96];
    bs_fake_sig(bs_chain_config(x->c)->seed, 0x5c, slot * 64 + x->n->index, sig);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"data\":{\"slot\":\"%llu\",\"beacon_block_root\":", (unsigned long long)slot);
    api_put_root(&s, &root);
    bm_str_printf(
        &s, ",\"subcommittee_index\":\"%llu\",\"aggregation_bits\":", (unsigned long long)sub);
    bs_json_hex(&s, bits, sizeof bits);
    bm_str_puts(&s, ",\"signature\":");
    bs_json_hex(&s, sig, 96);
    bm_str_puts(&s, "}}");
    api_reply_str(x, 200, &s, NULL);
}

void h_payload_att_data(ctx_t *x)
{
    uint64_t slot;
    if (!slot_query(x, &slot))
        return;
    if (bs_chain_fork_at(x->c, slot) != BS_FORK_GLOAS) {
        api_reply_error(x, 400, "Slot %llu is before the gloas fork", (unsigned long long)slot);
        return;
    }
    bs_block_id_t b = bs_node_block_at(x->n, slot);
    if (b.slot != slot || slot > x->n->head.slot) {
        /* no block seen for that slot: do not attest */
        api_reply_empty(x, 204);
        return;
    }
    bool present = bs_node_payload_full(x->n, b);
    bs_root_t root = bs_chain_root(x->c, b);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        bs_payload_att_data_ssz(&s, &root, slot, present, present);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_puts(&s, "{\"version\":\"gloas\",\"data\":{\"beacon_block_root\":");
        api_put_root(&s, &root);
        bm_str_printf(&s, ",\"slot\":\"%llu\",\"payload_present\":%s,\"blob_data_available\":%s}}",
                      (unsigned long long)slot, api_tf(present), api_tf(present));
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

/* ---- duties ------------------------------------------------------------------------------- */

/* Reads a JSON array of validator indices (strings) from the body. NULL: answered 400. */
static json_object *indices_body(ctx_t *x)
{
    json_object *a = api_body_json(x);
    if (!a)
        return NULL;
    if (!json_object_is_type(a, json_type_array)) {
        json_object_put(a);
        api_reply_error(x, 400, "body must be an array of validator indices");
        return NULL;
    }
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        uint64_t v;
        if (!json_object_is_type(e, json_type_string) ||
            !api_parse_u64(json_object_get_string(e), &v)) {
            json_object_put(a);
            api_reply_error(x, 400, "Invalid validator index at position %zu", i);
            return NULL;
        }
    }
    return a;
}

static uint64_t idx_at(json_object *a, size_t i)
{
    uint64_t v = 0;
    api_parse_u64(json_object_get_string(json_object_array_get_idx(a, i)), &v);
    return v;
}

static void duties_head(bm_str_t *s, ctx_t *x, const bs_root_t *dep)
{
    bm_str_puts(s, "{\"dependent_root\":");
    api_put_root(s, dep);
    bm_str_printf(s, ",\"execution_optimistic\":%s,\"data\":[", api_tf(x->n->behav.optimistic));
}

static void pubkey_field(bm_str_t *s, ctx_t *x, uint32_t v)
{
    uint8_t pk[48];
    bs_chain_pubkey(x->c, v, pk);
    bm_str_puts(s, "\"pubkey\":");
    bs_json_hex(s, pk, 48);
}

void h_attester_duties(ctx_t *x)
{
    uint64_t epoch;
    if (!epoch_param(x, &epoch, 1))
        return;
    json_object *a = indices_body(x);
    if (!a)
        return;
    bs_root_t dep = bs_node_dependent_root(x->n, epoch, 1);
    bm_str_t s = BM_STR_INIT;
    duties_head(&s, x, &dep);
    bool first = true;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        uint64_t v = idx_at(a, i);
        bs_attester_duty_t d;
        if (v > UINT32_MAX || bs_chain_attester_duty(x->c, &dep, epoch, (uint32_t)v, &d) != 0)
            continue;
        bm_str_puts(&s, first ? "{" : ",{");
        first = false;
        pubkey_field(&s, x, (uint32_t)v);
        bm_str_printf(&s,
                      ",\"validator_index\":\"%llu\",\"committee_index\":\"%u\","
                      "\"committee_length\":\"%u\",\"committees_at_slot\":\"%u\","
                      "\"validator_committee_index\":\"%u\",\"slot\":\"%llu\"}",
                      (unsigned long long)v, d.committee_index, d.committee_length,
                      d.committees_at_slot, d.validator_committee_index,
                      (unsigned long long)d.slot);
    }
    bm_str_puts(&s, "]}");
    json_object_put(a);
    api_reply_str(x, 200, &s, NULL);
}

static void proposer_duties(ctx_t *x, unsigned dep_lookback)
{
    uint64_t epoch;
    if (!epoch_param(x, &epoch, 1))
        return;
    bs_root_t dep = bs_node_dependent_root(x->n, epoch, dep_lookback);
    bs_root_t shuf = bs_node_dependent_root(x->n, epoch, 1);
    bm_str_t s = BM_STR_INIT;
    duties_head(&s, x, &dep);
    uint64_t start = bs_chain_epoch_start(x->c, epoch);
    uint32_t spe = bs_chain_config(x->c)->slots_per_epoch;
    bool first = true;
    for (uint64_t slot = start; slot < start + spe; slot++) {
        if (slot == 0)
            continue;
        uint32_t v = bs_chain_proposer(x->c, &shuf, slot);
        bm_str_puts(&s, first ? "{" : ",{");
        first = false;
        pubkey_field(&s, x, v);
        bm_str_printf(&s, ",\"validator_index\":\"%u\",\"slot\":\"%llu\"}", v,
                      (unsigned long long)slot);
    }
    bm_str_puts(&s, "]}");
    api_reply_str(x, 200, &s, NULL);
}

void h_proposer_duties_v1(ctx_t *x)
{
    proposer_duties(x, 0);
}

void h_proposer_duties_v2(ctx_t *x)
{
    proposer_duties(x, 1);
}

void h_sync_duties(ctx_t *x)
{
    uint64_t epoch;
    if (!epoch_param(x, &epoch, BS_EPOCHS_PER_SYNC_PERIOD))
        return;
    json_object *a = indices_body(x);
    if (!a)
        return;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"execution_optimistic\":%s,\"data\":[", api_tf(x->n->behav.optimistic));
    bool first = true;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        uint64_t v = idx_at(a, i);
        uint32_t pos[BS_SYNC_COMMITTEE_SIZE];
        if (v >= bs_chain_config(x->c)->validators)
            continue;
        size_t np = bs_chain_sync_positions(x->c, epoch, (uint32_t)v, pos, BS_SYNC_COMMITTEE_SIZE);
        if (np == 0)
            continue;
        bm_str_puts(&s, first ? "{" : ",{");
        first = false;
        pubkey_field(&s, x, (uint32_t)v);
        bm_str_printf(&s, ",\"validator_index\":\"%llu\",\"validator_sync_committee_indices\":[",
                      (unsigned long long)v);
        for (size_t k = 0; k < np; k++)
            bm_str_printf(&s, "%s\"%u\"", k ? "," : "", pos[k]);
        bm_str_puts(&s, "]}");
    }
    bm_str_puts(&s, "]}");
    json_object_put(a);
    api_reply_str(x, 200, &s, NULL);
}

void h_ptc_duties(ctx_t *x)
{
    uint64_t epoch;
    if (!epoch_param(x, &epoch, 1))
        return;
    json_object *a = indices_body(x);
    if (!a)
        return;
    bs_root_t dep = bs_node_dependent_root(x->n, epoch, 1);
    bm_str_t s = BM_STR_INIT;
    duties_head(&s, x, &dep);
    uint64_t start = bs_chain_epoch_start(x->c, epoch);
    uint32_t spe = bs_chain_config(x->c)->slots_per_epoch;
    bool first = true;
    for (uint64_t slot = start; slot < start + spe; slot++) {
        if (bs_chain_fork_at(x->c, slot) != BS_FORK_GLOAS)
            continue;
        uint32_t members[BS_PTC_MEMBERS];
        size_t nm = bs_chain_ptc_members(x->c, &dep, slot, members);
        for (size_t m = 0; m < nm; m++) {
            bool asked = false;
            for (size_t i = 0; i < json_object_array_length(a) && !asked; i++)
                asked = idx_at(a, i) == members[m];
            if (!asked)
                continue;
            bm_str_puts(&s, first ? "{" : ",{");
            first = false;
            pubkey_field(&s, x, members[m]);
            bm_str_printf(&s, ",\"validator_index\":\"%u\",\"slot\":\"%llu\"}", members[m],
                          (unsigned long long)slot);
        }
    }
    bm_str_puts(&s, "]}");
    json_object_put(a);
    api_reply_str(x, 200, &s, NULL);
}

void h_liveness(ctx_t *x)
{
    uint64_t epoch;
    if (!epoch_param(x, &epoch, 1))
        return;
    json_object *a = indices_body(x);
    if (!a)
        return;
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":[");
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        uint64_t v = idx_at(a, i);
        bool live = v <= UINT32_MAX && bs_node_is_live(x->n, (uint32_t)v, epoch);
        bm_str_printf(&s, "%s{\"index\":\"%llu\",\"is_live\":%s}", i ? "," : "",
                      (unsigned long long)v, api_tf(live));
    }
    bm_str_puts(&s, "]}");
    json_object_put(a);
    api_reply_str(x, 200, &s, NULL);
}

/* ---- block production ------------------------------------------------------------------- */

static bool parse_hex_exact(const char *s, uint8_t *out, size_t n)
{
    if (strlen(s) != 2 + 2 * n || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = bm_hexval(s[2 + 2 * i]), lo = bm_hexval(s[3 + 2 * i]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* Common checks and the block description of a production request; `op` names it in the
 * error when the slot's fork is not `want`. */
static bool prepare_block(ctx_t *x, bs_fork_t want, const char *op, bs_block_desc_t *d,
                          uint64_t *slot_out)
{
    uint64_t slot;
    char v[256];
    if (!api_parse_u64(x->param[0], &slot) || slot == 0) {
        api_reply_error(x, 400, "Invalid slot: %s", x->param[0]);
        return false;
    }
    if (slot > x->slot_now + 1) {
        api_reply_error(x, 400, "Slot %llu is in the future (current slot %llu)",
                        (unsigned long long)slot, (unsigned long long)x->slot_now);
        return false;
    }
    bs_fork_t f = bs_chain_fork_at(x->c, slot);
    if (f != want) {
        if (want == BS_FORK_FULU)
            api_reply_error(x, 400, "%s is not available from the gloas fork: use v4", op);
        else
            api_reply_error(x, 400, "%s needs a gloas slot: use v3 before the fork", op);
        return false;
    }
    uint8_t randao[96];
    if (!api_query(x, "randao_reveal", v, sizeof v) || !parse_hex_exact(v, randao, 96)) {
        api_reply_error(x, 400, "Missing or invalid randao_reveal");
        return false;
    }
    uint8_t graffiti[32] = {0};
    if (api_query(x, "graffiti", v, sizeof v) && !parse_hex_exact(v, graffiti, 32)) {
        api_reply_error(x, 400, "Invalid graffiti: %s", v);
        return false;
    }
    uint64_t bbf;
    if (api_query(x, "builder_boost_factor", v, sizeof v) && !api_parse_u64(v, &bbf)) {
        api_reply_error(x, 400, "Invalid builder_boost_factor: %s", v);
        return false;
    }
    bs_block_id_t parent = bs_node_proposal_parent(x->n, slot);
    bs_root_t shuf = bs_node_dependent_root(x->n, bs_chain_epoch_of(x->c, slot), 1);
    const bs_chain_cfg_t *cfg = bs_chain_config(x->c);
    memset(d, 0, sizeof *d);
    d->fork = f;
    d->slot = slot;
    d->proposer_index = bs_chain_proposer(x->c, &shuf, slot);
    d->parent_root = bs_chain_root(x->c, parent);
    d->state_root = bs_hash(cfg->seed, BS_TAG_PRODUCED, x->n->index, slot, 1);
    memcpy(d->randao_reveal, randao, 96);
    memcpy(d->graffiti, graffiti, 32);
    d->exec_parent_hash = bs_chain_exec_hash(x->c, parent);
    d->exec_block_hash = bs_hash(cfg->seed, BS_TAG_PRODUCED, x->n->index, slot, 2);
    d->prev_randao = bs_hash(cfg->seed, BS_TAG_PRODUCED, x->n->index, slot, 3);
    d->block_number = slot;
    d->timestamp = (cfg->genesis_ms + slot * cfg->slot_ms) / 1000;
    *slot_out = slot;
    return true;
}

void h_produce_v3(ctx_t *x)
{
    bs_block_desc_t d;
    uint64_t slot;
    if (!prepare_block(x, BS_FORK_FULU, "produceBlockV3", &d, &slot))
        return;
    bs_u128_t ev, cv;
    bs_chain_block_values(x->c, x->n->index, slot, x->n->behav.big_values, &ev, &cv);
    char evs[48], cvs[48];
    bs_u128_dec(ev, evs);
    bs_u128_dec(cv, cvs);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "fulu");
    bm_hdrs_add_z(&h, "Eth-Execution-Payload-Blinded", "false");
    bm_hdrs_add_z(&h, "Eth-Execution-Payload-Value", evs);
    bm_hdrs_add_z(&h, "Eth-Consensus-Block-Value", cvs);
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        bs_block_contents_ssz(&s, &d, NULL);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_printf(&s,
                      "{\"version\":\"fulu\",\"execution_payload_blinded\":false,"
                      "\"execution_payload_value\":\"%s\",\"consensus_block_value\":\"%s\","
                      "\"data\":{\"block\":",
                      evs, cvs);
        bs_block_json(&s, &d);
        bm_str_puts(&s, ",\"kzg_proofs\":[],\"blobs\":[]}}");
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

/* The legacy forms (removed from the spec after Electra, still asked by validator clients in
 * service): v2 a full block (BlockContents, JSON or SSZ), v1 blinded_blocks a
 * BlindedBeaconBlock (JSON). Only Eth-Consensus-Version, as the clients of that time sent. */
static void produce_legacy(ctx_t *x, bool blinded)
{
    bs_block_desc_t d;
    uint64_t slot;
    if (!prepare_block(x, BS_FORK_FULU, blinded ? "produceBlindedBlock" : "produceBlockV2", &d,
                       &slot))
        return;
    d.blinded = blinded;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "fulu");
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz && !blinded) {
        bs_block_contents_ssz(&s, &d, NULL);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_puts(&s, "{\"version\":\"fulu\",\"data\":");
        if (!blinded)
            bm_str_puts(&s, "{\"block\":");
        bs_block_json(&s, &d);
        bm_str_puts(&s, blinded ? "}" : ",\"kzg_proofs\":[],\"blobs\":[]}}");
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

void h_produce_v2(ctx_t *x)
{
    produce_legacy(x, false);
}

void h_produce_blinded_v1(ctx_t *x)
{
    produce_legacy(x, true);
}

void h_produce_v4(ctx_t *x)
{
    char v[16];
    bool include;
    if (!api_query(x, "include_payload", v, sizeof v) ||
        (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)) {
        api_reply_error(x, 400, "Missing or invalid include_payload (true or false)");
        return;
    }
    include = strcmp(v, "true") == 0;
    bs_block_desc_t d;
    uint64_t slot;
    if (!prepare_block(x, BS_FORK_GLOAS, "produceBlockV4", &d, &slot))
        return;
    bs_u128_t ev, cv;
    bs_chain_block_values(x->c, x->n->index, slot, x->n->behav.big_values, &ev, &cv);
    d.bid_value = (uint64_t)(ev / 1000000000u > UINT64_MAX ? UINT64_MAX : ev / 1000000000u);
    char cvs[48];
    bs_u128_dec(cv + ev, cvs); /* self-build: the payload's value is the proposer's */
    bs_root_t block_root =
        bs_hash(bs_chain_config(x->c)->seed, BS_TAG_PRODUCED, x->n->index, slot, 4);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
    bm_hdrs_add_z(&h, "Eth-Consensus-Block-Value", cvs);
    bm_hdrs_add_z(&h, "Eth-Execution-Payload-Included", include ? "true" : "false");
    if (!include) {
        val_cache_t *vc = vcache(x);
        if (vc) {
            unsigned i = vc->env_next++ % ENVELOPE_MEMO;
            vc->env[i].used = true;
            vc->env[i].slot = slot;
            vc->env[i].root = block_root;
            vc->env[i].d = d;
        }
    }
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        if (include)
            bs_block_contents_ssz(&s, &d, &block_root);
        else
            bs_block_ssz(&s, &d);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_printf(&s,
                      "{\"version\":\"gloas\",\"consensus_block_value\":\"%s\","
                      "\"execution_payload_included\":%s,\"data\":",
                      cvs, api_tf(include));
        if (include) {
            bm_str_puts(&s, "{\"block\":");
            bs_block_json(&s, &d);
            bm_str_puts(&s, ",\"execution_payload_envelope\":");
            bs_envelope_json(&s, &d, &block_root);
            bm_str_puts(&s, ",\"kzg_proofs\":[],\"blobs\":[]}");
        } else {
            bs_block_json(&s, &d);
        }
        bm_str_putc(&s, '}');
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

void h_envelope_stateful(ctx_t *x)
{
    uint64_t slot;
    bs_root_t root;
    if (!api_parse_u64(x->param[0], &slot)) {
        api_reply_error(x, 400, "Invalid slot: %s", x->param[0]);
        return;
    }
    if (bs_root_parse(x->param[1], strlen(x->param[1]), &root) != 0) {
        api_reply_error(x, 400, "Invalid beacon_block_root: %s", x->param[1]);
        return;
    }
    val_cache_t *vc = vcache(x);
    for (unsigned i = 0; vc && i < ENVELOPE_MEMO; i++) {
        /* The validator names the block by hash_tree_root(block), which the sim does not
         * compute: the envelope the node produced for that slot answers for any root, and
         * carries the root it was asked for. */
        if (!vc->env[i].used || vc->env[i].slot != slot)
            continue;
        vc->env[i].root = root;
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
        bm_str_t s = BM_STR_INIT;
        if (x->want_ssz) {
            bs_envelope_ssz(&s, &vc->env[i].d, &root);
            api_reply_ssz(x, &s, &h);
        } else {
            bm_str_puts(&s, "{\"version\":\"gloas\",\"data\":");
            bs_envelope_json(&s, &vc->env[i].d, &root);
            bm_str_putc(&s, '}');
            api_reply_str(x, 200, &s, &h);
        }
        bm_hdrs_dispose(&h);
        return;
    }
    api_reply_error(x, 404, "No cached execution payload envelope for slot %llu and root %s",
                    (unsigned long long)slot, x->param[1]);
}

bool api_val_has_envelope(ctx_t *x, const bs_root_t *block_root)
{
    val_cache_t *vc = x->n->cache;
    for (unsigned i = 0; vc && i < ENVELOPE_MEMO; i++)
        if (vc->env[i].used && bs_root_eq(&vc->env[i].root, block_root))
            return true;
    return false;
}
