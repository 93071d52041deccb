/* SPDX-License-Identifier: MIT */
/* fake_chain: a synthetic chain behind a head tracker fed by hand (see fake_chain.h). */
#include "fake_chain.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/clock.h"

void fake_root(unsigned id, uint8_t out[32])
{
    memset(out, 0, 32);
    out[0] = 0xB0;
    out[1] = (uint8_t)(id >> 8);
    out[2] = (uint8_t)id;
    out[31] = 0x5A;
}

void fake_root_hex(unsigned id, char out[67])
{
    uint8_t r[32];
    fake_root(id, r);
    out[0] = '0';
    out[1] = 'x';
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 + 2 * i, 3, "%02x", r[i]);
}

void fake_chain_info(bm_chain_info_t *c, uint64_t genesis_ms, uint32_t slot_ms, uint32_t spe,
                     uint64_t electra_epoch, uint64_t gloas_epoch)
{
    memset(c, 0, sizeof *c);
    c->known = true;
    c->clock.genesis_ms = genesis_ms;
    c->clock.slot_ms = slot_ms;
    c->clock.slots_per_epoch = spe;
    for (int f = 0; f < BM_FORK_NAMED; f++)
        c->fork_epoch[f] = BM_FAR_FUTURE_EPOCH;
    for (int f = BM_FORK_PHASE0; f <= BM_FORK_DENEB; f++)
        c->fork_epoch[f] = 0;
    c->fork_epoch[BM_FORK_ELECTRA] = electra_epoch;
    c->fork_epoch[BM_FORK_FULU] = electra_epoch;
    c->fork_epoch[BM_FORK_GLOAS] = gloas_epoch;
    uint32_t pre[BM_DUE_COUNT] = {3333, 6667, 3333, 6667, 7500};
    uint32_t gl[BM_DUE_COUNT] = {2500, 5000, 2500, 5000, 7500};
    memcpy(c->due_bps, pre, sizeof pre);
    memcpy(c->due_bps_gloas, gl, sizeof gl);
}

void fake_chain_now(bm_chain_info_t *c, uint32_t slot_ms, uint32_t spe, uint64_t slot,
                    bm_fork_t fork)
{
    fake_chain_info(c, bm_clock_now_ms() - slot * slot_ms - slot_ms / 2, slot_ms, spe,
                    BM_FAR_FUTURE_EPOCH, BM_FAR_FUTURE_EPOCH);
    for (int i = 0; i < BM_FORK_NAMED; i++)
        c->fork_epoch[i] = i <= (int)fork ? 0 : BM_FAR_FUTURE_EPOCH;
}

/* The tracker asks for a block's header: answered from the declared blocks (or held). */
static void on_fetch(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    fake_chain_t *c = ud;
    (void)slot;
    if (c->defer && c->n_held < FAKE_MAX_HELD) {
        memcpy(c->held[c->n_held].root, root, 32);
        c->held[c->n_held++].node = node;
        return;
    }
    unsigned id = (unsigned)root[1] << 8 | root[2];
    if (root[0] != 0xB0 || id >= FAKE_MAX_BLOCKS || !c->known[id]) {
        bm_head_on_parent_failed(c->t, node, root, c->now);
        return;
    }
    uint8_t p[32];
    fake_root(c->parent[id], p);
    bm_head_on_parent(c->t, node, root, c->slot[id], p, c->now);
}

void fake_chain_release(fake_chain_t *c, uint64_t now)
{
    c->defer = false;
    c->now = now;
    int n = c->n_held;
    c->n_held = 0;
    for (int i = 0; i < n; i++)
        on_fetch(c->held[i].root, UINT64_MAX, c->held[i].node, c);
}

void fake_chain_init(fake_chain_t *c, size_t n, const bm_chain_info_t *info, uint64_t now)
{
    memset(c, 0, sizeof *c);
    c->info = *info;
    c->now = now;
    c->t = bm_head_new(n, NULL);
    assert_non_null(c->t);
    bm_head_set_fetch(c->t, on_fetch, c);
    assert_int_equal(bm_head_set_clock(c->t, &c->info.clock, now), 0);
}

void fake_chain_dispose(fake_chain_t *c)
{
    bm_head_free(c->t);
    c->t = NULL;
}

void fake_block(fake_chain_t *c, unsigned id, uint64_t slot, unsigned parent)
{
    assert_true(id < FAKE_MAX_BLOCKS);
    c->known[id] = true;
    c->slot[id] = slot;
    c->parent[id] = parent;
}

void fake_head(fake_chain_t *c, size_t node, unsigned id, uint64_t now, bm_payload_status_t payload)
{
    c->now = now;
    bm_head_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.slot = c->slot[id];
    fake_root(id, ev.root);
    ev.payload = payload;
    ev.topic = payload == BM_PAYLOAD_UNKNOWN ? BM_HEAD_TOPIC_HEAD : BM_HEAD_TOPIC_HEAD_V2;
    assert_int_equal(bm_head_on_head(c->t, node, &ev, now), 0);
}

int fake_cluster_id(const fake_chain_t *c)
{
    bm_head_info_t hi;
    if (!bm_head_cluster(c->t, &hi))
        return -1;
    return (int)((unsigned)hi.root[1] << 8 | hi.root[2]);
}
