/* SPDX-License-Identifier: MIT */
/*
 * events_head: the cluster head's events. The head tracker says where the cluster head moved;
 * this part finds a trusted node's data for it (or synthesises it) and emits chain_reorg,
 * head and head_v2, and head_v2 again when the payload becomes full.
 */
#include "cluster/events_int.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/fork.h"
#include "base/json.h"
#include "base/log.h"

/* ---- the cluster head ------------------------------------------------------------------------ */

static bool get_root_str(struct json_object *o, const char *ptr, char out[BM_ROOT_HEX_LEN + 1])
{
    const char *s = bm_json_get_str(o, ptr);
    uint8_t r[32];
    if (!s || bm_hex_to_root(s, r) != 0)
        return false;
    bm_root_to_hex(r, out);
    return true;
}

/*
 * Reads a head (v2: wrapped) event's data into f and checks that it is the cluster head
 * `root` at `slot` and not optimistic. False when it is unusable.
 */
static bool read_head(struct json_object *o, bool v2, uint64_t slot, const uint8_t root[32],
                      headf_t *f)
{
    memset(f, 0, sizeof *f);
    bool ok = false;
    char p[64];
    const char *pre = v2 ? "/data" : "";
    bool opt = false;
    snprintf(p, sizeof p, "%s/execution_optimistic", pre);
    int orc = bm_json_get_bool(o, p, &opt);
    snprintf(p, sizeof p, "%s/slot", pre);
    if (bm_json_get_u64(o, p, &f->slot) != 0 || f->slot != slot)
        goto out;
    snprintf(p, sizeof p, "%s/block", pre);
    if (bm_json_get_root(o, p, f->root) != 0 || memcmp(f->root, root, 32) != 0)
        goto out;
    if (orc == BM_EINVAL || opt)
        goto out; /* never an optimistic copy */
    bm_root_to_hex(f->root, f->block);
    snprintf(p, sizeof p, "%s/state", pre);
    if (!get_root_str(o, p, f->state))
        goto out;
    snprintf(p, sizeof p, "%s/epoch_transition", pre);
    if (bm_json_get_bool(o, p, &f->epoch_transition) != 0)
        f->epoch_transition = false;
    if (v2) {
        const char *ver = bm_json_get_str(o, "/version");
        bm_fork_t fk;
        if (!ver || strlen(ver) >= sizeof f->version || bm_fork_parse(ver, &fk) != 0)
            goto out;
        snprintf(f->version, sizeof f->version, "%s", ver);
        const char *ps = bm_json_get_str(o, "/data/payload_status");
        f->payload = ps ? bm_payload_status_parse(ps, strlen(ps)) : BM_PAYLOAD_UNKNOWN;
        f->has_deps = get_root_str(o, "/data/current_epoch_dependent_root", f->dep_cur_epoch) &&
                      get_root_str(o, "/data/next_epoch_dependent_root", f->dep_next_epoch);
    } else {
        f->has_deps = get_root_str(o, "/previous_duty_dependent_root", f->dep_cur_epoch) &&
                      get_root_str(o, "/current_duty_dependent_root", f->dep_next_epoch);
    }
    ok = true;
out:
    return ok;
}

/* read_head over a head event's raw data, as the tracker keeps it. */
static bool parse_head(const bm_buf_t *raw, bool v2, uint64_t slot, const uint8_t root[32],
                       headf_t *f)
{
    struct json_object *o = NULL;
    if (!raw || bm_json_parse_buf(raw, BM_HEAD_RAW_MAX, &o, NULL) != 0 || !o)
        return false;
    bool ok = read_head(o, v2, slot, root, f);
    json_object_put(o);
    return ok;
}

static void synth_head_v1(const headf_t *f, bm_str_t *s)
{
    bm_str_printf(s,
                  "{\"slot\":\"%" PRIu64 "\",\"block\":\"%s\",\"state\":\"%s\","
                  "\"epoch_transition\":%s,\"previous_duty_dependent_root\":\"%s\","
                  "\"current_duty_dependent_root\":\"%s\",\"execution_optimistic\":false}",
                  f->slot, f->block, f->state, f->epoch_transition ? "true" : "false",
                  f->dep_cur_epoch, f->dep_next_epoch);
}

static void synth_head_v2(const headf_t *f, const char *version, bool full, bm_str_t *s)
{
    bm_str_printf(s,
                  "{\"version\":\"%s\",\"data\":{\"slot\":\"%" PRIu64 "\",\"block\":\"%s\","
                  "\"state\":\"%s\",\"payload_status\":\"%s\",\"epoch_transition\":%s,"
                  "\"current_epoch_dependent_root\":\"%s\",\"next_epoch_dependent_root\":\"%s\","
                  "\"execution_optimistic\":false}}",
                  version, f->slot, f->block, f->state, full ? "full" : "empty",
                  f->epoch_transition ? "true" : "false", f->dep_cur_epoch, f->dep_next_epoch);
}

/* The chain: discovery's when known, else the one set directly, else NULL. */
const bm_chain_info_t *bm_ev_chain_of(const bm_events_t *ev)
{
    if (ev->disc) {
        const bm_chain_info_t *c = bm_discovery_chain(ev->disc);
        if (c && c->known)
            return c;
    }
    return ev->chain_known ? &ev->chain : NULL;
}

/* The fork name for a synthesised head_v2 at f's slot: its own, the chain's, or NULL. */
static const char *version_for(const bm_events_t *ev, const headf_t *f)
{
    if (f->version[0])
        return f->version;
    const bm_chain_info_t *c = bm_ev_chain_of(ev);
    return c ? bm_fork_name(bm_chain_fork_at_slot(c, f->slot)) : NULL;
}

static bool pre_gloas(const bm_events_t *ev, const headf_t *f)
{
    bm_fork_t fk;
    if (f->version[0] && bm_fork_parse(f->version, &fk) == 0)
        return fk < BM_FORK_GLOAS;
    const bm_chain_info_t *c = bm_ev_chain_of(ev);
    return c && bm_chain_fork_at_slot(c, f->slot) < BM_FORK_GLOAS;
}

static void remember_state(bm_events_t *ev, const headf_t *f)
{
    uint32_t i = ev->states_pos++ % STATE_RING;
    memcpy(ev->states[i].root, f->root, 32);
    memcpy(ev->states[i].state, f->state, sizeof f->state);
}

static const char *state_of(const bm_events_t *ev, const uint8_t root[32])
{
    for (uint32_t k = 0; k < STATE_RING && k < ev->states_pos; k++) {
        uint32_t i = (ev->states_pos - 1 - k) % STATE_RING;
        if (memcmp(ev->states[i].root, root, 32) == 0)
            return ev->states[i].state;
    }
    return NULL;
}

/* Emits a buffer's JSON data as is (one line). */
static void emit_raw(bm_events_t *ev, bm_topic_t t, const bm_buf_t *b)
{
    bm_ev_emit(ev, t, b->data, b->len);
}

static void emit_str(bm_events_t *ev, bm_topic_t t, bm_str_t *s)
{
    if (!s->oom)
        bm_ev_emit(ev, t, bm_str_data(s), bm_str_len(s));
    bm_str_dispose(s);
}

/* chain_reorg for a re-org move: the matching node data, else synthesised. */
static void emit_reorg(bm_events_t *ev, const bm_head_change_t *c, const headf_t *nf)
{
    ev->st.reorgs++;
    if (!ev->cnt[BM_TOPIC_CHAIN_REORG])
        return;
    struct json_object *o = NULL;
    bool have_raw =
        c->raw_reorg && bm_json_parse_buf(c->raw_reorg, BM_HEAD_RAW_MAX, &o, NULL) == 0 && o;
    uint8_t rold[32], rnew[32];
    bool opt = false;
    bool raw_new = have_raw && bm_json_get_root(o, "/new_head_block", rnew) == 0 &&
                   memcmp(rnew, c->root, 32) == 0 &&
                   bm_json_get_bool(o, "/execution_optimistic", &opt) != BM_EINVAL && !opt;
    bool raw_old = raw_new && bm_json_get_root(o, "/old_head_block", rold) == 0 &&
                   memcmp(rold, c->old_root, 32) == 0;
    if (raw_old) {
        uint64_t v;
        if (bm_json_get_u64(o, "/slot", &v) == 0 && v == c->slot) {
            emit_raw(ev, BM_TOPIC_CHAIN_REORG, c->raw_reorg);
            json_object_put(o);
            return;
        }
    }
    /* synthesised from the cluster's view */
    char old_state[BM_ROOT_HEX_LEN + 1] = "";
    const char *os = state_of(ev, c->old_root);
    if (os)
        snprintf(old_state, sizeof old_state, "%s", os);
    else if (raw_old && !get_root_str(o, "/old_head_state", old_state))
        old_state[0] = '\0';
    uint64_t depth = 0;
    if (c->depth_known)
        depth = c->depth;
    else if (!(raw_new && bm_json_get_u64(o, "/depth", &depth) == 0))
        depth = c->old_slot >= c->slot ? c->old_slot - c->slot + 1 : 1; /* a lower bound */
    uint64_t epoch = 0;
    bool epoch_ok = false;
    const bm_chain_info_t *ch = bm_ev_chain_of(ev);
    if (ch && bm_slot_clock_valid(&ch->clock)) {
        epoch = bm_epoch_of_slot(&ch->clock, c->slot);
        epoch_ok = true;
    } else if (raw_new && bm_json_get_u64(o, "/epoch", &epoch) == 0) {
        epoch_ok = true;
    }
    json_object_put(o);
    if (!old_state[0] || !epoch_ok) {
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN,
                       "events: chain_reorg to slot %" PRIu64 " not sent: %s unknown", c->slot,
                       !old_state[0] ? "the old head's state" : "the epoch");
        return;
    }
    char oldb[BM_ROOT_HEX_LEN + 1];
    bm_root_to_hex(c->old_root, oldb);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"slot\":\"%" PRIu64 "\",\"depth\":\"%" PRIu64 "\",\"old_head_block\":\"%s\","
                  "\"new_head_block\":\"%s\",\"old_head_state\":\"%s\",\"new_head_state\":\"%s\","
                  "\"epoch\":\"%" PRIu64 "\",\"execution_optimistic\":false}",
                  c->slot, depth, oldb, nf->block, old_state, nf->state, epoch);
    emit_str(ev, BM_TOPIC_CHAIN_REORG, &s);
}

void bm_ev_pend_clear(bm_events_t *ev)
{
    if (ev->pend.valid)
        bm_buf_unref(ev->pend.c.raw_reorg);
    memset(&ev->pend, 0, sizeof ev->pend);
}

/* A cluster head move: chain_reorg (re-org only), head, head_v2. */
static void emit_change(bm_events_t *ev, const bm_head_change_t *c)
{
    headf_t v1, v2, vf;
    bool h1 = parse_head(c->raw[BM_HEAD_TOPIC_HEAD], false, c->slot, c->root, &v1);
    bool h2 = parse_head(c->raw[BM_HEAD_TOPIC_HEAD_V2], true, c->slot, c->root, &v2);
    bool hf = parse_head(c->raw_full, true, c->slot, c->root, &vf) && vf.payload == BM_PAYLOAD_FULL;
    if (!h1 && !h2 && !hf) {
        /* no usable node data yet: wait for a trusted node's head event for this root */
        bm_ev_pend_clear(ev);
        ev->pend.valid = true;
        ev->pend.c = *c;
        for (int k = 0; k < BM_HEAD_TOPIC_COUNT; k++)
            ev->pend.c.raw[k] = NULL;
        ev->pend.c.raw_full = NULL;
        ev->pend.c.raw_reorg = bm_buf_ref(c->raw_reorg);
        bm_log(BM_LOG_DEBUG, "events: cluster head slot %" PRIu64 " waits for node data", c->slot);
        return;
    }
    const headf_t *f = h2 ? &v2 : h1 ? &v1 : &vf;
    if (c->move == BM_HEAD_MOVE_REORG && c->has_old)
        emit_reorg(ev, c, f);
    ev->st.heads++;

    if (ev->cnt[BM_TOPIC_HEAD]) {
        if (h1) {
            emit_raw(ev, BM_TOPIC_HEAD, c->raw[BM_HEAD_TOPIC_HEAD]);
        } else if (f->has_deps) {
            bm_str_t s = BM_STR_INIT;
            synth_head_v1(f, &s);
            emit_str(ev, BM_TOPIC_HEAD, &s);
        }
    }
    bool full = c->payload_full || (hf && !h2);
    if (h2 && v2.payload == BM_PAYLOAD_FULL)
        full = true;
    if (!h2 && !hf && pre_gloas(ev, f))
        full = true; /* before Gloas the payload travels inside the block */
    if (ev->cnt[BM_TOPIC_HEAD_V2]) {
        if (full && hf) {
            emit_raw(ev, BM_TOPIC_HEAD_V2, c->raw_full);
        } else if (h2 && (v2.payload == BM_PAYLOAD_FULL) == full) {
            emit_raw(ev, BM_TOPIC_HEAD_V2, c->raw[BM_HEAD_TOPIC_HEAD_V2]);
        } else {
            const char *ver = version_for(ev, f);
            if (ver && f->has_deps) {
                bm_str_t s = BM_STR_INIT;
                synth_head_v2(f, ver, full, &s);
                emit_str(ev, BM_TOPIC_HEAD_V2, &s);
            }
        }
    }
    ev->cur = *f;
    if (!ev->cur.version[0]) {
        const char *ver = version_for(ev, f);
        if (ver)
            snprintf(ev->cur.version, sizeof ev->cur.version, "%s", ver);
    }
    ev->cur_valid = true;
    ev->cur_full_sent = full;
    remember_state(ev, f);
}

static void on_head_change(const bm_head_change_t *c, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->pend.valid) {
        ev->st.heads_unsent++;
        bm_log(BM_LOG_INFO,
               "events: cluster head slot %" PRIu64 " not sent: no node gave its data in time",
               ev->pend.c.slot);
        bm_ev_pend_clear(ev);
    }
    emit_change(ev, c);
}

static void on_head_payload(const bm_head_payload_t *p, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->pend.valid && memcmp(ev->pend.c.root, p->root, 32) == 0) {
        ev->pend.c.payload_full = true;
        return;
    }
    if (!ev->cur_valid || memcmp(ev->cur.root, p->root, 32) != 0 || ev->cur_full_sent)
        return;
    ev->cur_full_sent = true;
    ev->st.payload_heads++;
    if (!ev->cnt[BM_TOPIC_HEAD_V2])
        return;
    headf_t f;
    if (p->raw && parse_head(p->raw, true, p->slot, p->root, &f) && f.payload == BM_PAYLOAD_FULL) {
        emit_raw(ev, BM_TOPIC_HEAD_V2, p->raw);
        return;
    }
    if (!ev->cur.has_deps || !ev->cur.version[0])
        return;
    bm_str_t s = BM_STR_INIT;
    synth_head_v2(&ev->cur, ev->cur.version, true, &s);
    emit_str(ev, BM_TOPIC_HEAD_V2, &s);
}

/* A trusted node's head event for the pending cluster head: emit it now. */
void bm_ev_pend_try(bm_events_t *ev, bool v2, struct json_object *o, const char *data, size_t len)
{
    headf_t f;
    if (len > BM_HEAD_RAW_MAX || !read_head(o, v2, ev->pend.c.slot, ev->pend.c.root, &f))
        return;
    bm_buf_t *b = bm_buf_copy(data, len);
    if (!b)
        return;
    bm_head_change_t c = ev->pend.c;
    c.raw[v2 ? BM_HEAD_TOPIC_HEAD_V2 : BM_HEAD_TOPIC_HEAD] = b;
    if (v2 && f.payload == BM_PAYLOAD_FULL)
        c.raw_full = b;
    ev->pend.c.raw_reorg = NULL; /* c holds it now */
    bm_ev_pend_clear(ev);
    emit_change(ev, &c);
    bm_buf_unref(c.raw_reorg);
    bm_buf_unref(b);
}

int bm_events_attach_head(bm_events_t *ev, bm_head_t *head)
{
    bm_head_listener_t l = {.head = on_head_change, .payload = on_head_payload};
    int rc = bm_head_listen(head, &l, ev);
    if (rc == 0)
        ev->head = head;
    return rc;
}
