/* SPDX-License-Identifier: MIT */
/*
 * node: a simulated beacon node's view of the chain, its events and bookkeeping.
 * See node.h.
 */
#include "node.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

static const char *const TOPIC_NAMES[BS_TOPIC_COUNT] = {
    "head",
    "head_v2",
    "block",
    "block_gossip",
    "attestation",
    "single_attestation",
    "voluntary_exit",
    "bls_to_execution_change",
    "proposer_slashing",
    "attester_slashing",
    "finalized_checkpoint",
    "chain_reorg",
    "contribution_and_proof",
    "light_client_finality_update",
    "light_client_optimistic_update",
    "payload_attributes",
    "data_column_sidecar",
    "execution_payload",
    "execution_payload_gossip",
    "execution_payload_available",
    "execution_payload_bid",
    "payload_attestation_message",
    "fast_confirmation",
    "proposer_preferences",
};

const char *bs_topic_name(bs_topic_t t)
{
    return (unsigned)t < BS_TOPIC_COUNT ? TOPIC_NAMES[t] : "";
}

int bs_topic_parse(const char *s, size_t n, bs_topic_t *out)
{
    for (int i = 0; i < BS_TOPIC_COUNT; i++)
        if (strlen(TOPIC_NAMES[i]) == n && memcmp(TOPIC_NAMES[i], s, n) == 0) {
            *out = (bs_topic_t)i;
            return 0;
        }
    return BM_EINVAL;
}

/* ---- hash_tree_root(AttestationData) ------------------------------------------------ */

static void leaf_u64(uint8_t out[32], uint64_t v)
{
    memset(out, 0, 32);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

static void checkpoint_root(const bs_checkpoint_t *c, uint8_t out[32])
{
    uint8_t e[32];
    leaf_u64(e, c->epoch);
    bs_sha256_pair(e, c->root.b, out);
}

bs_root_t bs_att_data_root(const bs_att_data_t *d)
{
    uint8_t leaves[8][32];
    memset(leaves, 0, sizeof leaves);
    leaf_u64(leaves[0], d->slot);
    leaf_u64(leaves[1], d->index);
    memcpy(leaves[2], d->beacon_block_root.b, 32);
    checkpoint_root(&d->source, leaves[3]);
    checkpoint_root(&d->target, leaves[4]);
    uint8_t l1[4][32], l2[2][32];
    for (int i = 0; i < 4; i++)
        bs_sha256_pair(leaves[2 * i], leaves[2 * i + 1], l1[i]);
    for (int i = 0; i < 2; i++)
        bs_sha256_pair(l1[2 * i], l1[2 * i + 1], l2[i]);
    bs_root_t r;
    bs_sha256_pair(l2[0], l2[1], r.b);
    return r;
}

/* ---- time ---------------------------------------------------------------------------- */

uint64_t bs_node_clock(const bs_node_t *n, uint64_t now_ms)
{
    int64_t t = (int64_t)now_ms + n->behav.clock_skew_ms;
    return t < 0 ? 0 : (uint64_t)t;
}

uint64_t bs_node_slot(const bs_node_t *n, uint64_t now_ms)
{
    return bs_chain_slot_at(n->chain, bs_node_clock(n, now_ms));
}

uint64_t bs_node_import_ms(bs_node_t *n, bs_block_id_t id)
{
    const bs_chain_cfg_t *cfg = bs_chain_config(n->chain);
    uint64_t j = 0;
    if (n->behav.jitter_ms)
        j = bs_hash_u64(cfg->seed, BS_TAG_JITTER, n->index, id.slot, 0) %
            ((uint64_t)n->behav.jitter_ms + 1);
    return bs_chain_publish_ms(n->chain, id) + n->behav.lag_ms + j;
}

uint64_t bs_node_payload_delay(const bs_node_t *n, uint64_t slot)
{
    if (n->behav.payload_delay_ms >= 0)
        return (uint64_t)n->behav.payload_delay_ms;
    const bs_chain_cfg_t *cfg = bs_chain_config(n->chain);
    uint64_t tenth = cfg->slot_ms / 10;
    return tenth + bs_hash_u64(cfg->seed, BS_TAG_PAYLOAD, n->index, slot, 0) % (tenth + 1);
}

/* ---- events --------------------------------------------------------------------------- */

static bool wants(const bs_node_t *n, bs_topic_t t)
{
    return n->emit && (n->topic_mask >> t & 1);
}

static void emit_str(bs_node_t *n, bs_topic_t t, bm_str_t *s)
{
    bm_buf_t *b = bm_str_finish(s);
    if (!b)
        return;
    n->emit(n, t, b, n->emit_ud);
    bm_buf_unref(b);
}

static void put_root(bm_str_t *s, const char *key, const bs_root_t *r)
{
    char hx[67];
    bs_root_hex(r, hx);
    bm_str_printf(s, "\"%s\":\"%s\"", key, hx);
}

static const char *tf(bool b)
{
    return b ? "true" : "false";
}

static void emit_block(bs_node_t *n, bs_block_id_t id)
{
    bs_root_t r = bs_chain_root(n->chain, id);
    if (wants(n, BS_TOPIC_BLOCK_GOSSIP)) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"slot\":\"%llu\",", (unsigned long long)id.slot);
        put_root(&s, "block", &r);
        bm_str_puts(&s, "}");
        emit_str(n, BS_TOPIC_BLOCK_GOSSIP, &s);
    }
    if (wants(n, BS_TOPIC_BLOCK)) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"slot\":\"%llu\",", (unsigned long long)id.slot);
        put_root(&s, "block", &r);
        bm_str_printf(&s, ",\"execution_optimistic\":%s}", tf(n->behav.optimistic));
        emit_str(n, BS_TOPIC_BLOCK, &s);
    }
}

static void emit_head(bs_node_t *n, bool epoch_transition, bool only_v2)
{
    bs_chain_t *c = n->chain;
    uint64_t epoch = bs_chain_epoch_of(c, n->head.slot);
    bs_root_t block = bs_chain_root(c, n->head), state = bs_chain_state_root(c, n->head);
    bs_root_t prev_dep = bs_chain_dependent_root(c, n->head, epoch, 1);
    bs_root_t cur_dep = bs_chain_dependent_root(c, n->head, epoch, 0);
    if (!only_v2 && wants(n, BS_TOPIC_HEAD)) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"slot\":\"%llu\",", (unsigned long long)n->head.slot);
        put_root(&s, "block", &block);
        bm_str_putc(&s, ',');
        put_root(&s, "state", &state);
        bm_str_printf(&s, ",\"epoch_transition\":%s,", tf(epoch_transition));
        put_root(&s, "previous_duty_dependent_root", &prev_dep);
        bm_str_putc(&s, ',');
        put_root(&s, "current_duty_dependent_root", &cur_dep);
        bm_str_printf(&s, ",\"execution_optimistic\":%s}", tf(n->behav.optimistic));
        emit_str(n, BS_TOPIC_HEAD, &s);
    }
    if (wants(n, BS_TOPIC_HEAD_V2)) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"version\":\"%s\",\"data\":{\"slot\":\"%llu\",",
                      bs_fork_name(bs_chain_fork_at(c, n->head.slot)),
                      (unsigned long long)n->head.slot);
        put_root(&s, "block", &block);
        bm_str_putc(&s, ',');
        put_root(&s, "state", &state);
        bm_str_printf(&s, ",\"payload_status\":\"%s\",\"epoch_transition\":%s,",
                      n->head_full ? "full" : "empty", tf(epoch_transition));
        put_root(&s, "current_epoch_dependent_root", &prev_dep);
        bm_str_putc(&s, ',');
        put_root(&s, "next_epoch_dependent_root", &cur_dep);
        bm_str_printf(&s, ",\"execution_optimistic\":%s}}", tf(n->behav.optimistic));
        emit_str(n, BS_TOPIC_HEAD_V2, &s);
    }
}

static void emit_reorg(bs_node_t *n, bs_block_id_t old, bs_block_id_t neu, uint64_t depth)
{
    if (!wants(n, BS_TOPIC_CHAIN_REORG))
        return;
    bs_chain_t *c = n->chain;
    bs_root_t ob = bs_chain_root(c, old), nb = bs_chain_root(c, neu);
    bs_root_t os = bs_chain_state_root(c, old), ns = bs_chain_state_root(c, neu);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"slot\":\"%llu\",\"depth\":\"%llu\",", (unsigned long long)neu.slot,
                  (unsigned long long)depth);
    put_root(&s, "old_head_block", &ob);
    bm_str_putc(&s, ',');
    put_root(&s, "new_head_block", &nb);
    bm_str_putc(&s, ',');
    put_root(&s, "old_head_state", &os);
    bm_str_putc(&s, ',');
    put_root(&s, "new_head_state", &ns);
    bm_str_printf(&s, ",\"epoch\":\"%llu\",\"execution_optimistic\":%s}",
                  (unsigned long long)bs_chain_epoch_of(c, neu.slot), tf(n->behav.optimistic));
    emit_str(n, BS_TOPIC_CHAIN_REORG, &s);
}

static void emit_finalized(bs_node_t *n, const bs_checkpoint_t *fin)
{
    if (!wants(n, BS_TOPIC_FINALIZED_CHECKPOINT))
        return;
    bs_chain_t *c = n->chain;
    bs_block_id_t b = bs_node_block_at(n, bs_chain_epoch_start(c, fin->epoch));
    bs_root_t st = bs_chain_state_root(c, b);
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{");
    put_root(&s, "block", &fin->root);
    bm_str_putc(&s, ',');
    put_root(&s, "state", &st);
    bm_str_printf(&s, ",\"epoch\":\"%llu\",\"execution_optimistic\":%s}",
                  (unsigned long long)fin->epoch, tf(n->behav.optimistic));
    emit_str(n, BS_TOPIC_FINALIZED_CHECKPOINT, &s);
}

static void emit_payload_attributes(bs_node_t *n)
{
    if (!wants(n, BS_TOPIC_PAYLOAD_ATTRIBUTES))
        return;
    bs_chain_t *c = n->chain;
    const bs_chain_cfg_t *cfg = bs_chain_config(c);
    uint64_t slot = n->head.slot + 1;
    bs_fork_t f = bs_chain_fork_at(c, slot);
    bs_root_t dep = bs_chain_dependent_root(c, n->head, bs_chain_epoch_of(c, slot), 1);
    uint32_t prop = bs_chain_proposer(c, &dep, slot);
    bs_root_t root = bs_chain_root(c, n->head), hash = bs_chain_exec_hash(c, n->head);
    bs_root_t randao = bs_hash(cfg->seed, BS_TAG_RNG, n->head.branch, n->head.slot, 7);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"version\":\"%s\",\"data\":{\"proposer_index\":\"%u\","
                  "\"proposal_slot\":\"%llu\",",
                  bs_fork_name(f), prop, (unsigned long long)slot);
    if (f != BS_FORK_GLOAS)
        bm_str_printf(&s, "\"parent_block_number\":\"%llu\",", (unsigned long long)n->head.slot);
    put_root(&s, "parent_block_root", &root);
    bm_str_putc(&s, ',');
    put_root(&s, "parent_block_hash", &hash);
    bm_str_printf(&s, ",\"payload_attributes\":{\"timestamp\":\"%llu\",",
                  (unsigned long long)((cfg->genesis_ms + slot * cfg->slot_ms) / 1000));
    put_root(&s, "prev_randao", &randao);
    bm_str_puts(&s, ",\"suggested_fee_recipient\":\"0x0000000000000000000000000000000000000000\","
                    "\"withdrawals\":[],");
    put_root(&s, "parent_beacon_block_root", &root);
    bm_str_puts(&s, "}}}");
    emit_str(n, BS_TOPIC_PAYLOAD_ATTRIBUTES, &s);
}

static void emit_payload_available(bs_node_t *n)
{
    bs_chain_t *c = n->chain;
    bs_root_t root = bs_chain_root(c, n->head);
    if (wants(n, BS_TOPIC_EXECUTION_PAYLOAD)) {
        bs_root_t hash = bs_chain_exec_hash(c, n->head);
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"slot\":\"%llu\",\"builder_index\":\"18446744073709551615\",",
                      (unsigned long long)n->head.slot);
        put_root(&s, "block_hash", &hash);
        bm_str_putc(&s, ',');
        put_root(&s, "block_root", &root);
        bm_str_printf(&s, ",\"execution_optimistic\":%s}", tf(n->behav.optimistic));
        emit_str(n, BS_TOPIC_EXECUTION_PAYLOAD, &s);
    }
    if (wants(n, BS_TOPIC_EXECUTION_PAYLOAD_AVAILABLE)) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"slot\":\"%llu\",", (unsigned long long)n->head.slot);
        put_root(&s, "block_root", &root);
        bm_str_puts(&s, "}");
        emit_str(n, BS_TOPIC_EXECUTION_PAYLOAD_AVAILABLE, &s);
    }
}

/* ---- the view ------------------------------------------------------------------------- */

static void remember(bs_node_t *n, bs_block_id_t id, uint64_t t)
{
    if (n->nrecent == BS_RECENT_BLOCKS) {
        memmove(n->recent, n->recent + 1, (BS_RECENT_BLOCKS - 1) * sizeof n->recent[0]);
        memmove(n->recent_import_ms, n->recent_import_ms + 1,
                (BS_RECENT_BLOCKS - 1) * sizeof n->recent_import_ms[0]);
        n->nrecent--;
    }
    n->recent[n->nrecent] = id;
    n->recent_import_ms[n->nrecent] = t;
    n->nrecent++;
}

bs_checkpoint_t bs_node_checkpoint(bs_node_t *n, uint64_t epoch)
{
    bs_checkpoint_t cp = {epoch, bs_chain_genesis_root(n->chain)};
    if (epoch > 0)
        cp.root =
            bs_chain_root(n->chain, bs_node_block_at(n, bs_chain_epoch_start(n->chain, epoch)));
    return cp;
}

void bs_node_checkpoints(bs_node_t *n, bs_checkpoint_t *prev_justified,
                         bs_checkpoint_t *cur_justified, bs_checkpoint_t *finalized)
{
    uint64_t e = bs_chain_epoch_of(n->chain, n->head.slot);
    uint64_t je = e >= 1 ? e - 1 : 0, fe = e >= 2 ? e - 2 : 0;
    if (cur_justified)
        *cur_justified = bs_node_checkpoint(n, je);
    if (prev_justified)
        *prev_justified = bs_node_checkpoint(n, fe);
    if (finalized)
        *finalized = bs_node_checkpoint(n, fe);
}

static void set_head(bs_node_t *n, bs_block_id_t id, uint64_t import_ms)
{
    bs_chain_t *c = n->chain;
    bs_block_id_t old = n->head;
    if (bs_block_id_eq(old, id))
        return;
    if (!bs_chain_is_ancestor(c, old, id)) {
        bs_block_id_t anc = bs_chain_common_ancestor(c, old, id);
        emit_reorg(n, old, id, old.slot - anc.slot);
    }
    bool epoch_transition = bs_chain_epoch_of(c, id.slot) != bs_chain_epoch_of(c, old.slot);
    n->head = id;
    n->head_import_ms = import_ms;
    n->head_full = false;
    n->head_payload_ms = UINT64_MAX;
    if (bs_chain_fork_at(c, id.slot) == BS_FORK_GLOAS && id.slot > 0)
        n->head_payload_ms = import_ms + bs_node_payload_delay(n, id.slot);
    else
        n->head_full = true; /* pre-Gloas payloads travel inside the block */
    n->head_gen++;
    emit_head(n, epoch_transition, false);
    bs_checkpoint_t fin;
    bs_node_checkpoints(n, NULL, NULL, &fin);
    if (fin.epoch > n->finalized_emitted) {
        n->finalized_emitted = fin.epoch;
        emit_finalized(n, &fin);
    }
    emit_payload_attributes(n);
}

void bs_node_advance(bs_node_t *n, uint64_t now_ms)
{
    bs_chain_t *c = n->chain;
    uint64_t now = bs_node_clock(n, now_ms);
    if (!n->behav.stale && !n->behav.syncing) {
        bool found = false;
        bs_block_id_t last = n->head;
        uint64_t last_t = 0;
        for (;;) {
            uint64_t s = n->next_slot;
            if (bs_chain_slot_start(c, s) > now)
                break;
            bs_block_id_t id;
            if (bs_chain_block_for(c, n->branch, s, n->index, &id)) {
                uint64_t t = bs_node_import_ms(n, id);
                if (t > now)
                    break;
                remember(n, id, t);
                emit_block(n, id);
                last = id;
                last_t = t;
                found = true;
            }
            n->next_slot = s + 1;
        }
        if (found)
            set_head(n, last, last_t);
    }
    if (!n->head_full && n->head_payload_ms <= now) {
        n->head_full = true;
        n->head_gen++;
        emit_payload_available(n);
        emit_head(n, false, true);
    }
}

uint64_t bs_node_next_due_ms(bs_node_t *n)
{
    bs_chain_t *c = n->chain;
    uint64_t due = UINT64_MAX;
    if (!n->head_full && n->head_payload_ms != UINT64_MAX)
        due = n->head_payload_ms;
    if (!n->behav.stale && !n->behav.syncing) {
        /* the next existing block within a bounded look-ahead, else the slot after it */
        uint64_t s = n->next_slot, t = UINT64_MAX;
        for (int i = 0; i < 64; i++, s++) {
            bs_block_id_t id;
            if (bs_chain_block_for(c, n->branch, s, n->index, &id)) {
                t = bs_node_import_ms(n, id);
                break;
            }
        }
        if (t == UINT64_MAX)
            t = bs_chain_slot_start(c, s);
        if (t < due)
            due = t;
    }
    if (due == UINT64_MAX)
        return due;
    int64_t wall = (int64_t)due - n->behav.clock_skew_ms;
    return wall < 0 ? 0 : (uint64_t)wall;
}

int bs_node_init(bs_node_t *n, bs_chain_t *chain, uint32_t index, const bs_behav_t *b,
                 uint64_t now_ms)
{
    memset(n, 0, sizeof *n);
    n->index = index;
    n->chain = chain;
    bs_behav_default(&n->behav);
    if (b)
        bs_behav_merge(&n->behav, b);
    n->behav.fork = false; /* applied below, like a run-time change */
    n->rng = bs_hash_u64(bs_chain_config(chain)->seed, BS_TAG_RNG, index, 0, 0);
    n->head = (bs_block_id_t){BS_BRANCH_CANON, 0};
    n->head_full = true;
    n->head_payload_ms = UINT64_MAX;
    n->next_slot = 1;
    n->live = calloc((size_t)bs_chain_config(chain)->validators * 4, sizeof *n->live);
    if (!n->live)
        return BM_ENOMEM;
    remember(n, n->head, bs_chain_config(chain)->genesis_ms);
    bool stale = n->behav.stale, syncing = n->behav.syncing;
    n->behav.stale = n->behav.syncing = false; /* a stale node starts with the chain so far */
    bs_node_advance(n, now_ms);
    n->behav.stale = stale;
    n->behav.syncing = syncing;
    if (b && (b->set & BS_B_FORK) && b->fork) {
        bs_behav_t d;
        bs_behav_default(&d);
        d.fork = true;
        d.set = BS_B_FORK;
        bs_node_set_behav(n, &d, now_ms);
    }
    return 0;
}

void bs_node_dispose(bs_node_t *n)
{
    bs_node_clear_submissions(n);
    free(n->subs);
    n->subs = NULL;
    n->capsubs = 0;
    free(n->live);
    n->live = NULL;
    if (n->cache && n->cache_free)
        n->cache_free(n->cache);
    n->cache = NULL;
}

void bs_node_set_behav(bs_node_t *n, const bs_behav_t *delta, uint64_t now_ms)
{
    bs_node_advance(n, now_ms);
    bool was_fork = n->behav.fork;
    bs_behav_merge(&n->behav, delta);
    uint64_t now = bs_node_clock(n, now_ms);
    if (n->behav.fork && !was_fork) {
        uint32_t br = bs_chain_new_branch(n->chain, n->head, n->next_slot);
        if (br) {
            n->branch = br;
            n->next_slot = n->head.slot + 1;
        } else {
            n->behav.fork = false;
            bm_log(BM_LOG_ERROR, "node %u: out of memory opening a fork branch", n->index);
        }
    } else if (!n->behav.fork && was_fork) {
        /* rejoin: import the canonical block this node would have by now */
        n->branch = BS_BRANCH_CANON;
        uint64_t s = bs_chain_slot_at(n->chain, now);
        bs_block_id_t target = bs_chain_canon_at(n->chain, s);
        while (target.slot > 0 && bs_node_import_ms(n, target) > now) {
            bs_block_id_t p;
            if (!bs_chain_parent(n->chain, target, &p))
                break;
            target = p;
        }
        n->next_slot = target.slot + 1;
        remember(n, target, now);
        emit_block(n, target);
        set_head(n, target, now);
    }
    /* a node that starts importing again catches up on its next advance */
    bs_node_advance(n, now_ms);
}

/* ---- queries -------------------------------------------------------------------------- */

bs_block_id_t bs_node_block_at(bs_node_t *n, uint64_t slot)
{
    return bs_chain_block_at(n->chain, n->head, slot);
}

void bs_node_attestation_data(bs_node_t *n, uint64_t slot, bs_att_data_t *out)
{
    bs_chain_t *c = n->chain;
    bs_block_id_t b = slot >= n->head.slot ? n->head : bs_node_block_at(n, slot);
    memset(out, 0, sizeof *out);
    out->slot = slot;
    out->beacon_block_root = bs_chain_root(c, b);
    uint64_t e = bs_chain_epoch_of(c, slot);
    out->target.epoch = e;
    out->target.root = e == 0
                           ? bs_chain_genesis_root(c)
                           : bs_chain_root(c, bs_chain_block_at(c, b, bs_chain_epoch_start(c, e)));
    out->source.epoch = e >= 1 ? e - 1 : 0;
    out->source.root =
        e <= 1 ? bs_chain_genesis_root(c)
               : bs_chain_root(c, bs_chain_block_at(c, b, bs_chain_epoch_start(c, e - 1)));
    if (bs_chain_fork_at(c, slot) == BS_FORK_GLOAS && b.slot != slot)
        out->index = bs_node_payload_full(n, b) ? 1 : 0;
}

void bs_node_memo_att(bs_node_t *n, const bs_att_data_t *d)
{
    bs_root_t r = bs_att_data_root(d);
    for (uint32_t i = 0; i < n->att_memo_n; i++)
        if (bs_root_eq(&n->att_memo_root[i], &r))
            return;
    uint32_t at =
        n->att_memo_n < BS_ATT_MEMO ? n->att_memo_n++ : (uint32_t)(n->rng++ % BS_ATT_MEMO);
    n->att_memo[at] = *d;
    n->att_memo_root[at] = r;
}

bool bs_node_find_att(bs_node_t *n, const bs_root_t *root, bs_att_data_t *out)
{
    for (uint32_t i = 0; i < n->att_memo_n; i++)
        if (bs_root_eq(&n->att_memo_root[i], root)) {
            *out = n->att_memo[i];
            return true;
        }
    return false;
}

bool bs_node_find_root(bs_node_t *n, const bs_root_t *root, bs_block_id_t *out)
{
    for (uint32_t i = n->nrecent; i-- > 0;) {
        bs_root_t r = bs_chain_root(n->chain, n->recent[i]);
        if (bs_root_eq(&r, root)) {
            *out = n->recent[i];
            return true;
        }
    }
    /* then the node's chain, newest first, within a bounded depth */
    bs_block_id_t cur = n->head;
    uint64_t floor = n->head.slot > BS_ROOT_SEARCH_DEPTH ? n->head.slot - BS_ROOT_SEARCH_DEPTH : 0;
    for (;;) {
        if (cur.slot < floor)
            return false;
        bs_root_t r = bs_chain_root(n->chain, cur);
        if (bs_root_eq(&r, root)) {
            *out = cur;
            return true;
        }
        bs_block_id_t p;
        if (!bs_chain_parent(n->chain, cur, &p))
            return false;
        cur = p;
    }
}

bool bs_node_canonical(bs_node_t *n, bs_block_id_t id)
{
    return bs_chain_is_ancestor(n->chain, id, n->head);
}

bool bs_node_finalized(bs_node_t *n, bs_block_id_t id)
{
    bs_checkpoint_t fin;
    bs_node_checkpoints(n, NULL, NULL, &fin);
    return id.slot <= bs_chain_epoch_start(n->chain, fin.epoch) && bs_node_canonical(n, id);
}

bs_root_t bs_node_dependent_root(bs_node_t *n, uint64_t epoch, unsigned lookback)
{
    return bs_chain_dependent_root(n->chain, n->head, epoch, lookback);
}

bool bs_node_payload_full(bs_node_t *n, bs_block_id_t id)
{
    if (bs_block_id_eq(id, n->head))
        return n->head_full;
    return true;
}

bool bs_node_imported_ms(bs_node_t *n, bs_block_id_t id, uint64_t *out)
{
    for (uint32_t i = n->nrecent; i-- > 0;)
        if (bs_block_id_eq(n->recent[i], id)) {
            *out = n->recent_import_ms[i];
            return true;
        }
    return false;
}

bs_block_id_t bs_node_proposal_parent(bs_node_t *n, uint64_t slot)
{
    bs_chain_t *c = n->chain;
    bs_block_id_t p = bs_node_block_at(n, slot ? slot - 1 : 0);
    if (p.slot + 1 == slot && bs_chain_is_late(c, p)) {
        /* get_proposer_head: a head that arrived after its attestation deadline is
         * re-orged by building on its parent */
        uint64_t t;
        uint32_t bps = bs_chain_fork_at(c, p.slot) == BS_FORK_GLOAS ? 2500 : 3333;
        uint64_t due =
            bs_chain_slot_start(c, p.slot) + (uint64_t)bps * bs_chain_config(c)->slot_ms / 10000;
        if (!bs_node_imported_ms(n, p, &t) || t > due) {
            bs_block_id_t pp;
            if (bs_chain_parent(c, p, &pp))
                return pp;
        }
    }
    return p;
}

/* ---- bookkeeping ------------------------------------------------------------------------ */

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void free_sub(bs_submission_t *s)
{
    free(s->route);
    free(s->target);
    free(s->content_type);
    free(s->consensus_version);
    free(s->blob_data_included);
    bm_buf_unref(s->body);
}

uint64_t bs_node_record(bs_node_t *n, uint64_t time_ms, const char *route, const char *target,
                        const char *content_type, const char *consensus_version,
                        const char *blob_data_included, bm_buf_t *body, int status)
{
    if (n->nsubs == BS_MAX_SUBMISSIONS) {
        /* forget the older half at once: amortised O(1) per record under load */
        size_t drop = BS_MAX_SUBMISSIONS / 2;
        for (size_t i = 0; i < drop; i++)
            free_sub(&n->subs[i]);
        memmove(n->subs, n->subs + drop, (n->nsubs - drop) * sizeof *n->subs);
        n->nsubs -= drop;
        n->sub_dropped += drop;
    }
    if (n->nsubs == n->capsubs) {
        size_t cap = n->capsubs ? n->capsubs * 2 : 64;
        bs_submission_t *ns = realloc(n->subs, cap * sizeof *ns);
        if (!ns)
            return 0;
        n->subs = ns;
        n->capsubs = cap;
    }
    bs_submission_t *s = &n->subs[n->nsubs++];
    s->seq = ++n->sub_seq;
    s->time_ms = time_ms;
    s->route = dup_or_null(route);
    s->target = dup_or_null(target);
    s->content_type = dup_or_null(content_type);
    s->consensus_version = dup_or_null(consensus_version);
    s->blob_data_included = dup_or_null(blob_data_included);
    s->body = bm_buf_ref(body);
    s->status = status;
    return s->seq;
}

void bs_node_clear_submissions(bs_node_t *n)
{
    for (size_t i = 0; i < n->nsubs; i++)
        free_sub(&n->subs[i]);
    n->nsubs = 0;
}

void bs_node_mark_live(bs_node_t *n, uint32_t v, uint64_t epoch)
{
    if (!n->live || v >= bs_chain_config(n->chain)->validators)
        return;
    n->live[(size_t)v * 4 + epoch % 4] = epoch + 1;
}

bool bs_node_is_live(const bs_node_t *n, uint32_t v, uint64_t epoch)
{
    if (!n->live || v >= bs_chain_config(n->chain)->validators)
        return false;
    return n->live[(size_t)v * 4 + epoch % 4] == epoch + 1;
}
