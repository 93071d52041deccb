/* SPDX-License-Identifier: MIT */
/*
 * replay_send: replaying the memory to one node, a chunk per POST, kind by kind (see replay.c).
 */
#include "duties/replay_int.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "base/url.h"

/* ---- replaying to one node ------------------------------------------------------------------ */

static void kick(bm_replay_t *rp);
static void next_chunk(nrep_t *nr);

void bm_rp_release_cursor(nrep_t *nr)
{
    if (nr->counted) {
        nr->rp->tab[nr->kind].cursors--;
        nr->counted = false;
    }
}

static void replay_end(nrep_t *nr, bool completed)
{
    bm_replay_t *rp = nr->rp;
    bm_rp_release_cursor(nr);
    nr->running = false;
    if (completed) {
        rp->stats.replays_completed++;
        nr->last_done_ms = bm_clock_mono_now(rp->clock);
    } else {
        rp->stats.replays_failed++;
    }
    if (nr->again) {
        nr->again = false;
        nr->due_ms = bm_clock_mono_now(rp->clock);
        kick(rp);
    }
}

static void on_post_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    nrep_t *nr = ud;
    bm_replay_t *rp = nr->rp;
    (void)x;
    nr->xfer = NULL;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    node->stats.in_flight--;
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    const char *detail =
        res->err ? (res->detail && *res->detail ? res->detail : bm_strerror(res->err)) : NULL;
    bm_pool_record(rp->pool, node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us, detail);
    if (rp->stopped)
        return;
    if (res->err) {
        bm_log_limited(&rp->lim, BM_LOG_INFO, "replay to %s: %s: %s; the next trigger redoes it",
                       node->id, bm_replay_kind_path(nr->kind), detail);
        replay_end(nr, false);
        return;
    }
    if (res->status < 200 || res->status > 299) {
        rp->stats.posts_rejected++;
        bm_log_limited(&rp->lim, BM_LOG_INFO, "replay to %s: %s answered %d: %.*s", node->id,
                       bm_replay_kind_path(nr->kind), res->status,
                       res->body ? (int)(res->body->len > 200 ? 200 : res->body->len) : 0,
                       res->body ? res->body->data : "");
    }
    next_chunk(nr);
}

static bool fork_done(const nrep_t *nr, const char *fork)
{
    for (int i = 0; i < nr->n_done_forks; i++)
        if (strcmp(nr->done_forks[i], fork) == 0)
            return true;
    return false;
}

/* Renders the next chunk of the current kind from the cursor; 0 entries at its end. */
static size_t build_chunk(nrep_t *nr, const now_t *now, bm_str_t *body)
{
    bm_replay_t *rp = nr->rp;
    table_t *t = &rp->tab[nr->kind];
    size_t k = 0;
    bm_str_putc(body, '[');
    for (; nr->cursor < t->n_ents && k < rp->opts.chunk; nr->cursor++) {
        const ehdr_t *h = bm_rp_ent_at(t, nr->cursor);
        if (!h->live || bm_rp_expired(rp, nr->kind, h, now))
            continue;
        if (nr->kind == BM_REPLAY_PREFERENCES) {
            const pref_e *p = (const pref_e *)h;
            if (!nr->fork[0]) {
                if (fork_done(nr, p->fork))
                    continue;
                snprintf(nr->fork, sizeof nr->fork, "%s", p->fork);
            } else if (strcmp(p->fork, nr->fork) != 0) {
                continue;
            }
        }
        if (k++)
            bm_str_putc(body, ',');
        bm_rp_render(body, nr->kind, h);
    }
    bm_str_putc(body, ']');
    return k;
}

/* Sends the next chunk, moving through the kinds; ends the replay after the last. */
static void next_chunk(nrep_t *nr)
{
    bm_replay_t *rp = nr->rp;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    now_t now = bm_rp_now_at(rp, bm_clock_wall_now(rp->clock));
    while (nr->kind < BM_REPLAY_KIND_COUNT) {
        if (!nr->counted) {
            rp->tab[nr->kind].cursors++;
            nr->counted = true;
        }
        bm_str_t body = BM_STR_INIT;
        size_t k = build_chunk(nr, &now, &body);
        if (k == 0) {
            bm_str_dispose(&body);
            /* preferences: another pass for the next fork, if any is left */
            if (nr->kind == BM_REPLAY_PREFERENCES && nr->fork[0] &&
                nr->n_done_forks < MAX_PASS_FORKS) {
                snprintf(nr->done_forks[nr->n_done_forks++], FORK_MAX + 1, "%s", nr->fork);
                nr->fork[0] = '\0';
                nr->cursor = 0;
                continue;
            }
            bm_rp_release_cursor(nr);
            nr->kind++;
            nr->cursor = 0;
            nr->fork[0] = '\0';
            nr->n_done_forks = 0;
            continue;
        }
        bm_buf_t *b = bm_str_finish(&body);
        bm_str_t url = BM_STR_INIT;
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_hdrs_add_z(&h, "Content-Type", "application/json");
        if (nr->kind == BM_REPLAY_PREFERENCES)
            bm_hdrs_add_z(&h, "Eth-Consensus-Version", nr->fork);
        int rc = b ? bm_url_join(&url, node->url, bm_replay_kind_path(nr->kind)) : BM_ENOMEM;
        if (rc == 0) {
            bm_xfer_req_t xr = {
                .method = "POST",
                .url = bm_str_data(&url),
                .headers = &h,
                .extra = &node->extra,
                .body = b,
                .connect_timeout_ms = rp->opts.connect_timeout_ms,
                .timeout_ms = rp->opts.timeout_ms,
                .max_response_bytes = 1 << 20,
            };
            static const bm_xfer_cbs_t cbs = {NULL, NULL, on_post_done};
            nr->xfer = bm_upstream_start(rp->up, &xr, &cbs, nr);
            if (!nr->xfer)
                rc = BM_EIO;
        }
        bm_hdrs_dispose(&h);
        bm_str_dispose(&url);
        bm_buf_unref(b);
        if (rc != 0) {
            bm_log_limited(&rp->lim, BM_LOG_WARN, "replay to %s: cannot send %s: %s", node->id,
                           bm_replay_kind_path(nr->kind), bm_strerror(rc));
            replay_end(nr, false);
            return;
        }
        node->stats.in_flight++;
        rp->stats.posts++;
        rp->stats.entries_sent += k;
        return;
    }
    uint64_t took = bm_clock_mono_now(rp->clock) - nr->started_ms;
    bm_log(BM_LOG_DEBUG, "replay to %s done in %llu ms", node->id, (unsigned long long)took);
    replay_end(nr, true);
}

static bool anything_to_replay(const bm_replay_t *rp)
{
    for (int k = 0; k < BM_REPLAY_KIND_COUNT; k++)
        if (rp->tab[k].live)
            return true;
    return false;
}

static void replay_start(nrep_t *nr)
{
    bm_replay_t *rp = nr->rp;
    bm_node_t *node = bm_pool_node(rp->pool, nr->index);
    if (node->state == BM_NODE_WRONG_NETWORK || !anything_to_replay(rp))
        return;
    nr->running = true;
    nr->kind = 0;
    nr->cursor = 0;
    nr->fork[0] = '\0';
    nr->n_done_forks = 0;
    nr->started_ms = bm_clock_mono_now(rp->clock);
    rp->stats.replays_started++;
    bm_log(BM_LOG_INFO,
           "replay to %s (%s): %zu preparations, %zu registrations, %zu "
           "preferences, %zu committee and %zu sync subscriptions",
           node->id, nr->why ? nr->why : "requested", rp->tab[0].live, rp->tab[1].live,
           rp->tab[2].live, rp->tab[3].live, rp->tab[4].live);
    next_chunk(nr);
}

void bm_rp_on_kick(bm_timer_t *tm, void *ud)
{
    (void)tm;
    bm_replay_t *rp = ud;
    kick(rp);
}

/* Starts what is due and arms the debounce timer for the rest. */
static void kick(bm_replay_t *rp)
{
    if (rp->stopped)
        return;
    uint64_t now = bm_clock_mono_now(rp->clock);
    uint64_t next = 0;
    for (size_t i = 0; i < rp->n_nodes; i++) {
        nrep_t *nr = &rp->nodes[i];
        if (!nr->due_ms)
            continue;
        if (nr->due_ms <= now) {
            nr->due_ms = 0;
            if (nr->running)
                nr->again = true;
            else
                replay_start(nr);
            if (rp->stopped)
                return;
            continue;
        }
        if (!next || nr->due_ms < next)
            next = nr->due_ms;
    }
    if (next)
        bm_timer_start(rp->kick_timer, next - now);
}

/* Arms the debounce timer at the earliest replay due. */
static void arm_kick(bm_replay_t *rp)
{
    uint64_t next = 0;
    for (size_t i = 0; i < rp->n_nodes; i++)
        if (rp->nodes[i].due_ms && (!next || rp->nodes[i].due_ms < next))
            next = rp->nodes[i].due_ms;
    if (!next)
        return;
    uint64_t now = bm_clock_mono_now(rp->clock);
    bm_timer_start(rp->kick_timer, next > now ? next - now : 0);
}

/* A replay to `nr` after the debounce and not before `not_before` (monotonic ms); a replay
 * due sooner already stands. */
static void schedule(bm_replay_t *rp, nrep_t *nr, const char *why, uint64_t not_before)
{
    uint64_t at = bm_clock_mono_now(rp->clock) + rp->opts.debounce_ms;
    if (at < not_before)
        at = not_before;
    if (!nr->due_ms || at < nr->due_ms) {
        nr->due_ms = at;
        nr->why = why;
    }
    arm_kick(rp);
}

void bm_replay_node(bm_replay_t *rp, bm_node_t *node, const char *why)
{
    if (!rp || rp->stopped || !node || node->index < 0 || (size_t)node->index >= rp->n_nodes)
        return;
    if (node->shadow)
        return; /* no write is sent to a shadow, so nothing is replayed to it either */
    schedule(rp, &rp->nodes[node->index], why, 0);
}

static bool absent(bm_node_state_t s)
{
    return s == BM_NODE_UNKNOWN || s == BM_NODE_UNREACHABLE || s == BM_NODE_WRONG_NETWORK;
}

void bm_replay_node_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    bm_replay_t *rp = ud;
    bm_node_state_t now = node->state;
    if (!rp || absent(now) || now == old)
        return;
    if (absent(old)) {
        bm_replay_node(rp, node, old == BM_NODE_UNKNOWN ? "discovered" : "back");
        return;
    }
    if (now != BM_NODE_READY)
        return;
    if (old == BM_NODE_SYNCING) {
        bm_replay_node(rp, node, "synced");
        return;
    }
    /* lagging, optimistic, forked or time-discrepant back to ready: nothing was lost, at
     * most one replay per epoch on this account */
    if (node->index < 0 || (size_t)node->index >= rp->n_nodes)
        return;
    const nrep_t *nr = &rp->nodes[node->index];
    uint64_t epoch_ms = 384000;
    if (rp->chain && rp->chain->known && rp->chain->clock.slot_ms)
        epoch_ms = (uint64_t)rp->chain->clock.slot_ms * rp->chain->clock.slots_per_epoch;
    if (nr->last_done_ms && bm_clock_mono_now(rp->clock) - nr->last_done_ms < epoch_ms)
        return;
    bm_replay_node(rp, node, "ready again");
}

void bm_replay_node_connection(size_t node, bool up, void *ud)
{
    bm_replay_t *rp = ud;
    if (!rp || rp->stopped || !up || node >= rp->n_nodes)
        return;
    const bm_node_t *n = bm_pool_node(rp->pool, node);
    if (n->state == BM_NODE_WRONG_NETWORK || n->shadow)
        return;
    /* a stream that keeps dropping must not turn into a replay storm: at most one replay
     * per interval on this account, deferred rather than dropped (it may hide a restart) */
    nrep_t *nr = &rp->nodes[node];
    uint64_t gap = rp->opts.reconnect_min_interval_ms;
    if (!gap)
        gap = rp->chain && rp->chain->known && rp->chain->clock.slot_ms ? rp->chain->clock.slot_ms
                                                                        : DEFAULT_SWEEP_MS;
    schedule(rp, nr, "stream reconnected", nr->started_ms ? nr->started_ms + gap : 0);
}
