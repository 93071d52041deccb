/* SPDX-License-Identifier: MIT */
/*
 * metrics: one function per group of families (process, upstreams, cluster, duties, the
 * journal, broadcast, events, server, read path, response cache, the front), each reading
 * its module's counters.
 */
#include "observe/metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "edge/cachekey.h"
#include "observe/expo.h"

#define U(v) ((uint64_t)(v))

/* The pool's latency buckets (bm_latency_bucket_ms) in seconds, without the open last one. */
static const double pool_bounds_s[BM_LATENCY_BUCKETS - 1] = {
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60};

/* A family of one sample without labels. */
static void single(bm_str_t *o, const char *name, bm_expo_type_t type, const char *help, uint64_t v)
{
    bm_expo_family(o, name, type, help);
    bm_expo_u64(o, name, NULL, 0, v);
}

/* A family with one label: values[i] under label=names[i]. */
static void by_label(bm_str_t *o, const char *name, bm_expo_type_t type, const char *help,
                     const char *label, const char *const *names, const uint64_t *values, size_t n)
{
    bm_expo_family(o, name, type, help);
    for (size_t i = 0; i < n; i++) {
        bm_label_t l[] = {{label, names[i]}};
        bm_expo_u64(o, name, l, 1, values[i]);
    }
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- process ------------------------------------------------------------------------------ */

/* The standard process_* families, from /proc (left out where it cannot be read). */
static void process_metrics(bm_str_t *o)
{
    bm_expo_family(o, "beaconmux_build_info", BM_EXPO_GAUGE,
                   "The version of beaconmux running (value 1).");
    bm_label_t v[] = {{"version", BM_VERSION}};
    bm_expo_u64(o, "beaconmux_build_info", v, 1, 1);
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long utime = 0, stime = 0, start = 0, rss = 0;
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                     "%*d %*d %llu %*u %llu",
                     &utime, &stime, &start, &rss) != 4)
        return;
    double hz = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
    double boot = 0;
    FILE *s = fopen("/proc/stat", "r");
    if (s) {
        char line[256];
        while (fgets(line, sizeof line, s))
            if (sscanf(line, "btime %lf", &boot) == 1)
                break;
        fclose(s);
    }
    bm_expo_family(o, "process_cpu_seconds_total", BM_EXPO_COUNTER,
                   "User and system CPU time spent in seconds.");
    bm_expo_double(o, "process_cpu_seconds_total", NULL, 0, (double)(utime + stime) / hz);
    bm_expo_family(o, "process_resident_memory_bytes", BM_EXPO_GAUGE,
                   "Resident memory size in bytes.");
    bm_expo_double(o, "process_resident_memory_bytes", NULL, 0, (double)rss * page);
    if (boot > 0) {
        bm_expo_family(o, "process_start_time_seconds", BM_EXPO_GAUGE,
                       "Start time of the process since the Unix epoch in seconds.");
        bm_expo_double(o, "process_start_time_seconds", NULL, 0, boot + (double)start / hz);
    }
}

/* ---- upstreams ---------------------------------------------------------------------------- */

/* Families of one number per upstream. */
typedef enum { UP_REQUESTS, UP_IN_FLIGHT, UP_ERROR_RATIO, UP_STREAM } up_family_t;

static void upstream_states(bm_str_t *o, const bm_pool_t *pool)
{
    bm_expo_family(o, "beaconmux_upstream_state", BM_EXPO_GAUGE,
                   "1 for the state each upstream is in, 0 for the others.");
    for (size_t i = 0; i < bm_pool_count(pool); i++) {
        const bm_node_t *n = bm_pool_node(pool, i);
        for (int st = 0; st < BM_NODE_STATE_COUNT; st++) {
            bm_label_t l[] = {{"upstream", n->id}, {"state", bm_node_state_name(st)}};
            bm_expo_u64(o, "beaconmux_upstream_state", l, 2, n->state == (bm_node_state_t)st);
        }
    }
    bm_expo_family(o, "beaconmux_upstream_info", BM_EXPO_GAUGE,
                   "The client and version an upstream reports (value 1).");
    for (size_t i = 0; i < bm_pool_count(pool); i++) {
        const bm_node_t *n = bm_pool_node(pool, i);
        bm_label_t l[] = {{"upstream", n->id},
                          {"client", bm_client_name(n->client)},
                          {"version", n->version ? n->version : ""}};
        bm_expo_u64(o, "beaconmux_upstream_info", l, 3, 1);
    }
}

static void upstream_heads(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    const bm_pool_t *pool = src->pool;
    bm_expo_family(o, "beaconmux_upstream_head_slot", BM_EXPO_GAUGE,
                   "The slot of the head an upstream announced last.");
    for (size_t i = 0; src->head && i < bm_pool_count(pool); i++) {
        bm_head_node_view_t v;
        if (bm_head_node_view(src->head, i, &v) == 0 && v.has_head) {
            bm_label_t l[] = {{"upstream", bm_pool_node(pool, i)->id}};
            bm_expo_u64(o, "beaconmux_upstream_head_slot", l, 1, v.slot);
        }
    }
    bm_expo_family(o, "beaconmux_upstream_head_lag_slots", BM_EXPO_GAUGE,
                   "Slots an upstream's head is behind the cluster head (negative: ahead).");
    for (size_t i = 0; i < bm_pool_count(pool); i++) {
        const bm_node_t *n = bm_pool_node(pool, i);
        if (n->head_lag_known) {
            bm_label_t l[] = {{"upstream", n->id}};
            bm_expo_double(o, "beaconmux_upstream_head_lag_slots", l, 1, (double)n->head_lag);
        }
    }
    const bm_arrivals_t *ar = bm_observe_figures(ob)->arrivals;
    bm_expo_family(o, "beaconmux_upstream_head_arrival_seconds", BM_EXPO_HISTOGRAM,
                   "When each new head of an upstream arrived, after its slot's start.");
    for (size_t i = 0; ar && i < bm_pool_count(pool); i++) {
        bm_label_t l[] = {{"upstream", bm_pool_node(pool, i)->id}};
        bm_expo_hist(o, "beaconmux_upstream_head_arrival_seconds", l, 1, bm_arrivals_hist(ar, i));
    }
}

static void upstream_simple(bm_str_t *o, const bm_observe_t *ob, up_family_t fam)
{
    static const struct {
        const char *name;
        bm_expo_type_t type;
        const char *help;
    } fams[] = {
        {"beaconmux_upstream_requests_total", BM_EXPO_COUNTER,
         "Exchanges with an upstream that finished, whatever their outcome."},
        {"beaconmux_upstream_in_flight", BM_EXPO_GAUGE, "Exchanges with an upstream running now."},
        {"beaconmux_upstream_recent_error_ratio", BM_EXPO_GAUGE,
         "Failed share of an upstream's last 64 exchanges."},
        {"beaconmux_upstream_event_stream_up", BM_EXPO_GAUGE,
         "1 while beaconmux's event stream from an upstream is connected."},
    };
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    if (fam == UP_STREAM && !src->monitor)
        return;
    bm_expo_family(o, fams[fam].name, fams[fam].type, fams[fam].help);
    for (size_t i = 0; i < bm_pool_count(src->pool); i++) {
        const bm_node_t *n = bm_pool_node(src->pool, i);
        bm_label_t l[] = {{"upstream", n->id}};
        bm_monitor_node_info_t mi;
        switch (fam) {
        case UP_REQUESTS:
            bm_expo_u64(o, fams[fam].name, l, 1, n->stats.requests);
            break;
        case UP_IN_FLIGHT:
            bm_expo_u64(o, fams[fam].name, l, 1, n->stats.in_flight);
            break;
        case UP_ERROR_RATIO:
            bm_expo_double(o, fams[fam].name, l, 1, bm_node_recent_error_rate(n));
            break;
        case UP_STREAM:
            if (bm_monitor_node_info(src->monitor, i, &mi) == 0)
                bm_expo_u64(o, fams[fam].name, l, 1, mi.connected);
            break;
        }
    }
}

static void upstream_errors_latency(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    bm_expo_family(o, "beaconmux_upstream_errors_total", BM_EXPO_COUNTER,
                   "Failed exchanges with an upstream by kind: an HTTP 5xx, a refused "
                   "connection, another network error (timeouts included).");
    for (size_t i = 0; i < bm_pool_count(src->pool); i++) {
        const bm_node_t *n = bm_pool_node(src->pool, i);
        const bm_node_stats_t *s = &n->stats;
        uint64_t network = s->errors - s->errors_5xx - s->refused;
        const char *kinds[] = {"http_5xx", "refused", "network"};
        uint64_t vals[] = {s->errors_5xx, s->refused, network};
        for (int k = 0; k < 3; k++) {
            bm_label_t l[] = {{"upstream", n->id}, {"kind", kinds[k]}};
            bm_expo_u64(o, "beaconmux_upstream_errors_total", l, 2, vals[k]);
        }
    }
    bm_expo_family(o, "beaconmux_upstream_latency_seconds", BM_EXPO_HISTOGRAM,
                   "Time to an upstream's successful answer (below 500).");
    for (size_t i = 0; i < bm_pool_count(src->pool); i++) {
        const bm_node_t *n = bm_pool_node(src->pool, i);
        bm_hist_t h = {.bounds = pool_bounds_s, .n_bounds = BM_LATENCY_BUCKETS - 1};
        for (int b = 0; b < BM_LATENCY_BUCKETS; b++) {
            h.counts[b] = n->stats.latency_hist[b];
            h.count += n->stats.latency_hist[b];
        }
        h.sum = (double)n->stats.latency_sum_us / 1e6;
        bm_label_t l[] = {{"upstream", n->id}};
        bm_expo_hist(o, "beaconmux_upstream_latency_seconds", l, 1, &h);
    }
    if (!src->readpath)
        return;
    bm_expo_family(o, "beaconmux_upstream_breaker_state", BM_EXPO_GAUGE,
                   "1 for the read path's circuit breaker state of each upstream.");
    static const bm_breaker_state_t states[] = {BM_BREAKER_CLOSED, BM_BREAKER_OPEN,
                                                BM_BREAKER_HALF_OPEN};
    for (size_t i = 0; i < bm_pool_count(src->pool); i++) {
        const bm_breaker_t *b = bm_readpath_breaker(src->readpath, i);
        for (int k = 0; b && k < 3; k++) {
            bm_label_t l[] = {{"upstream", bm_pool_node(src->pool, i)->id},
                              {"state", bm_breaker_state_name(states[k])}};
            bm_expo_u64(o, "beaconmux_upstream_breaker_state", l, 2, b->state == states[k]);
        }
    }
}

/* ---- the cluster -------------------------------------------------------------------------- */

static void cluster_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    const bm_observe_figures_t *f = bm_observe_figures(ob);
    bm_head_info_t h;
    bm_expo_family(o, "beaconmux_cluster_head_slot", BM_EXPO_GAUGE,
                   "The slot of the cluster head (absent before the first one).");
    if (src->head && bm_head_cluster(src->head, &h))
        bm_expo_u64(o, "beaconmux_cluster_head_slot", NULL, 0, h.slot);
    bm_expo_family(o, "beaconmux_cluster_finalized_epoch", BM_EXPO_GAUGE,
                   "The newest finalized epoch a node reported on the cluster chain.");
    if (f->finalized_known)
        bm_expo_u64(o, "beaconmux_cluster_finalized_epoch", NULL, 0, f->finalized_epoch);
    static const char *const causes[] = {"extension", "quorum", "reorg"};
    uint64_t moves[] = {f->moves_extension, f->moves_quorum, f->moves_reorg};
    by_label(o, "beaconmux_cluster_head_moves_total", BM_EXPO_COUNTER,
             "Moves of the cluster head by cause: extension (one node, a child of the head), "
             "quorum (a competing block or unknown ancestry), reorg.",
             "cause", causes, moves, N(moves));
    bm_expo_family(o, "beaconmux_cluster_reorg_depth_slots", BM_EXPO_HISTOGRAM,
                   "Depth of the cluster head's re-orgs (old head slot - common ancestor slot).");
    bm_expo_hist(o, "beaconmux_cluster_reorg_depth_slots", NULL, 0, &f->reorg_depth);
    if (!src->head)
        return;
    single(o, "beaconmux_cluster_header_requests_total", BM_EXPO_COUNTER,
           "Block headers the head tracker asked nodes for (unknown parents).",
           bm_head_stats(src->head)->fetches);
}

/* ---- duties ------------------------------------------------------------------------------- */

static void duty_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_figures_t *f = bm_observe_figures(ob);
    bm_expo_family(o, "beaconmux_duty_race_seconds", BM_EXPO_HISTOGRAM,
                   "Time from a duty read's arrival to its answer (the race).");
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++) {
        bm_label_t l[] = {{"duty", bm_duty_read_name(d)}};
        bm_expo_hist(o, "beaconmux_duty_race_seconds", l, 1, &f->race[d]);
    }
    bm_expo_family(o, "beaconmux_duty_answers_total", BM_EXPO_COUNTER,
                   "Duty reads answered, by what was served: fresh (on the expected head), "
                   "stale (the best at the deadline), error.");
    static const bm_answer_class_t outs[] = {BM_ANSWER_FRESH, BM_ANSWER_STALE, BM_ANSWER_ERROR};
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++)
        for (int k = 0; k < 3; k++) {
            bm_label_t l[] = {{"duty", bm_duty_read_name(d)},
                              {"outcome", bm_answer_class_name(outs[k])}};
            bm_expo_u64(o, "beaconmux_duty_answers_total", l, 2, f->served[d][outs[k]]);
        }
    bm_expo_family(o, "beaconmux_votes_served_total", BM_EXPO_COUNTER,
                   "Duty reads answered with something to sign (fresh or stale).");
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++) {
        bm_label_t l[] = {{"duty", bm_duty_read_name(d)}};
        bm_expo_u64(o, "beaconmux_votes_served_total", l, 1,
                    f->served[d][BM_ANSWER_FRESH] + f->served[d][BM_ANSWER_STALE]);
    }
    single(o, "beaconmux_duty_records_from_other_instances_total", BM_EXPO_COUNTER,
           "Served duty reads of other instances sharing state through Redis, counted in the "
           "answers above and the journal (not in the race times).",
           f->remote_records);
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    if (src->attest)
        single(o, "beaconmux_duty_coalesced_total", BM_EXPO_COUNTER,
               "Duty reads that joined a race already running for the same read.",
               bm_attest_stats(src->attest).joined);
    if (src->aggregate) {
        const bm_aggregate_stats_t *s = bm_aggregate_stats(src->aggregate);
        static const char *const outs2[] = {"full", "partial", "error"};
        uint64_t v[] = {s->full, s->partial, s->errors};
        by_label(o, "beaconmux_aggregate_answers_total", BM_EXPO_COUNTER,
                 "Aggregate and contribution reads answered: full, partial, error.", "outcome",
                 outs2, v, N(v));
    }
    if (src->duties) {
        const bm_duties_stats_t *s = bm_duties_stats(src->duties);
        static const char *const rules[] = {"by_root", "first", "majority", "late", "error"};
        uint64_t v[] = {s->by_root, s->first, s->majority, s->late, s->errors};
        by_label(o, "beaconmux_duties_answers_total", BM_EXPO_COUNTER,
                 "Duty list reads answered, by rule: dependent root, first, majority, late, error.",
                 "rule", rules, v, N(v));
    }
}

static void journal_counts(bm_str_t *o, const char *name, const char *help,
                           const bm_journal_counts_t *c)
{
    bm_expo_family(o, name, BM_EXPO_COUNTER, help);
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++)
        for (int v = BM_VERDICT_CORRECT; v < BM_VERDICT_COUNT; v++) {
            bm_label_t l[] = {{"duty", bm_duty_read_name(d)}, {"verdict", bm_verdict_name(v)}};
            bm_expo_u64(o, name, l, 2, c->verdicts[d][v]);
        }
}

static void journal_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_journal_t *j = bm_observe_figures(ob)->journal;
    if (!j)
        return;
    const bm_journal_stats_t *s = bm_journal_stats(j);
    journal_counts(o, "beaconmux_duty_head_correct_total",
                   "Served duty reads judged once their slot was finalized: was the served head "
                   "the canonical block root at the slot?",
                   &s->final);
    journal_counts(o, "beaconmux_duty_head_provisional_total",
                   "Served duty reads judged two slots after their slot (may change at "
                   "finality).",
                   &s->provisional);
    single(o, "beaconmux_votes_saved_total", BM_EXPO_COUNTER,
           "Duty reads served on the canonical head that the first configured node alone would "
           "not have served so (judged at finality).",
           s->final.saved);
    single(o, "beaconmux_votes_lost_total", BM_EXPO_COUNTER,
           "Duty reads served off the canonical head that the first configured node alone would "
           "have served on it (judged at finality).",
           s->final.lost);
    single(o, "beaconmux_votes_saved_provisional_total", BM_EXPO_COUNTER,
           "beaconmux_votes_saved_total as judged two slots after the slot.", s->provisional.saved);
    single(o, "beaconmux_journal_records_total", BM_EXPO_COUNTER,
           "Records of served duty reads the journal received.", s->records);
    single(o, "beaconmux_journal_final_slot", BM_EXPO_GAUGE,
           "The newest slot the journal judged at finality.", s->final_slot);
}

/* ---- broadcast, events ---------------------------------------------------------------------- */

static void broadcast_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_sources_t *src = bm_observe_sources(ob);
    if (src->broadcast) {
        bm_broadcast_stats_t s;
        bm_broadcast_stats(src->broadcast, &s);
        static const char *const outs[] = {"2xx", "error"};
        uint64_t v[] = {s.answered_2xx, s.answered_error};
        by_label(o, "beaconmux_broadcast_writes_total", BM_EXPO_COUNTER,
                 "Writes (pool, publish, subscriptions...) sent to every node, by what the "
                 "client got: 2xx or error.",
                 "outcome", outs, v, N(v));
        bm_expo_family(o, "beaconmux_broadcast_first_2xx_seconds", BM_EXPO_HISTOGRAM,
                       "Time from a write's arrival to the first node's 2xx, which the client "
                       "gets at once.");
        bm_expo_hist(o, "beaconmux_broadcast_first_2xx_seconds", NULL, 0, &s.first_2xx);
        bm_expo_family(o, "beaconmux_broadcast_node_failures_total", BM_EXPO_COUNTER,
                       "Writes a node answered with an error or not at all.");
        for (size_t i = 0; i < bm_pool_count(src->pool) && i < BM_BROADCAST_NODE_STATS; i++) {
            bm_label_t l[] = {{"upstream", bm_pool_node(src->pool, i)->id}};
            bm_expo_u64(o, "beaconmux_broadcast_node_failures_total", l, 1, s.failures_by[i]);
        }
    }
    if (src->replay) {
        bm_replay_stats_t r;
        bm_replay_stats(src->replay, &r);
        static const char *const outs[] = {"started", "completed", "failed"};
        uint64_t v[] = {r.replays_started, r.replays_completed, r.replays_failed};
        by_label(o, "beaconmux_replays_total", BM_EXPO_COUNTER,
                 "Replays of validator state (preparations, registrations, subscriptions) to a "
                 "node that came back, by outcome.",
                 "outcome", outs, v, N(v));
    }
}

static void events_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_events_t *ev = bm_observe_sources(ob)->events;
    if (!ev)
        return;
    const bm_events_stats_t *s = bm_events_stats(ev);
    single(o, "beaconmux_events_subscribers", BM_EXPO_GAUGE,
           "Clients subscribed to the cluster event stream now.", s->subscribers);
    single(o, "beaconmux_events_deliveries_total", BM_EXPO_COUNTER,
           "Events written to subscribers.", s->events_out);
    single(o, "beaconmux_events_delivered_bytes_total", BM_EXPO_COUNTER,
           "Bytes of events written to subscribers.", s->bytes_out);
    single(o, "beaconmux_events_drops_total", BM_EXPO_COUNTER,
           "Subscribers dropped because they did not keep up.", s->dropped);
    single(o, "beaconmux_events_node_events_total", BM_EXPO_COUNTER,
           "Events received from the nodes' streams.", s->node_events);
}

/* ---- server, read path ---------------------------------------------------------------------- */

static const char *code_name(int c)
{
    static const char *const names[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
    return names[c];
}

/* The listener's own figures: the process's, once however many networks it serves. */
static void connection_metrics(bm_str_t *o, const bm_server_t *srv)
{
    if (!srv)
        return;
    bm_server_stats_t s;
    bm_server_stats(srv, &s);
    single(o, "beaconmux_server_connections", BM_EXPO_GAUGE, "Client connections open now.",
           bm_server_connection_count(srv));
    static const char *const outs[] = {"accepted", "refused"};
    uint64_t v[] = {s.accepted - s.refused, s.refused};
    by_label(o, "beaconmux_server_connections_total", BM_EXPO_COUNTER,
             "Client connections accepted, and refused at accept (over the limit).", "outcome",
             outs, v, N(v));
    single(o, "beaconmux_server_rejected_requests_total", BM_EXPO_COUNTER,
           "Requests the server answered itself: malformed, too large, too slow.", s.rejected);
}

/* The front: requests it refused before any network's router, and rate limits. */
static void front_metrics(bm_str_t *o, const bm_front_t *f)
{
    if (!f)
        return;
    const bm_front_counters_t *c = bm_front_counters(f);
    static const char *const reasons[] = {"unauthorized", "forbidden", "client_not_allowed",
                                          "unknown_network", "cors_denied"};
    uint64_t r[] = {c->unauthorized, c->forbidden, c->not_allowed_client, c->unknown_network,
                    c->cors_denied};
    by_label(o, "beaconmux_edge_refused_total", BM_EXPO_COUNTER,
             "Requests the edge refused, by reason: unauthorized (401: no or an unknown key), "
             "forbidden (403: the key lacks the route class or network), client_not_allowed "
             "(server.allowedClients), unknown_network (404), cors_denied.",
             "reason", reasons, r, N(r));
    static const char *const classes[] = {"read", "duties"};
    uint64_t l[] = {c->limited_read, c->limited_duties};
    by_label(o, "beaconmux_edge_rate_limited_total", BM_EXPO_COUNTER,
             "Requests answered 429 by the rate limits, by budget: read or duties (writes are "
             "never limited).",
             "class", classes, l, N(l));
}

/* Requests by route class and status class: a network's (those its router took). */
static void request_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_observe_figures_t *f = bm_observe_figures(ob);
    bm_expo_family(o, "beaconmux_server_requests_total", BM_EXPO_COUNTER,
                   "Requests answered, by route class and status class.");
    for (size_t c = 0; c < f->n_classes; c++)
        for (int k = 0; k < BM_CODE_CLASSES; k++) {
            if (!f->requests[c][k] && k != BM_CODE_2XX)
                continue; /* bounded anyway; zeros of rare classes add nothing */
            bm_label_t l[] = {{"class", f->classes[c]}, {"code", code_name(k)}};
            bm_expo_u64(o, "beaconmux_server_requests_total", l, 2, f->requests[c][k]);
        }
    bm_expo_family(o, "beaconmux_server_request_duration_seconds", BM_EXPO_HISTOGRAM,
                   "Time from a request's complete head to its answer's end, by route class.");
    for (size_t c = 0; c < f->n_classes; c++) {
        bm_label_t l[] = {{"class", f->classes[c]}};
        bm_expo_hist(o, "beaconmux_server_request_duration_seconds", l, 1, &f->request_seconds[c]);
    }
}

static void read_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_readpath_t *rp = bm_observe_sources(ob)->readpath;
    if (!rp)
        return;
    const bm_readpath_counters_t *c = bm_readpath_counters(rp);
    single(o, "beaconmux_read_requests_total", BM_EXPO_COUNTER, "Reads served by the read path.",
           c->reads);
    static const char *const kinds[] = {"first", "retry", "hedge"};
    uint64_t first =
        c->attempts >= c->retries + c->hedges ? c->attempts - c->retries - c->hedges : 0;
    uint64_t v[] = {first, c->retries, c->hedges};
    by_label(o, "beaconmux_read_attempts_total", BM_EXPO_COUNTER,
             "Requests the read path sent to nodes, by kind: first, retry, hedge.", "kind", kinds,
             v, N(v));
    single(o, "beaconmux_read_deadline_exceeded_total", BM_EXPO_COUNTER,
           "Reads that ran out of their total deadline.", c->deadline_exceeded);
}

/* The response cache: lookups by route class and outcome, what it holds, what left it. */
static void cache_metrics(bm_str_t *o, const bm_observe_t *ob)
{
    const bm_cache_t *c = bm_observe_sources(ob)->cache;
    if (!c)
        return;
    bm_cache_size_t z;
    bm_cache_size(c, &z);
    static const char *const outcome[] = {"hit", "miss", "coalesced", "bypassed"};
    static const char name[] = "beaconmux_cache_requests_total";
    bm_expo_family(
        o, name, BM_EXPO_COUNTER,
        "Cacheable reads by route class and outcome: hit (served from the cache), "
        "miss (asked a node), coalesced (joined a read in flight), bypassed (no-cache).");
    for (int r = 0; r < BM_CK_ROUTE_COUNT; r++) {
        const bm_cache_counters_t *k = bm_cache_counters(c, r);
        uint64_t v[] = {k->hits, k->misses, k->coalesced, k->bypassed};
        for (size_t i = 0; i < N(v); i++) {
            bm_label_t l[] = {{"route", bm_ck_route_name((bm_ck_route_t)r)},
                              {"outcome", outcome[i]}};
            bm_expo_u64(o, name, l, 2, v[i]);
        }
    }
    static const char ev[] = "beaconmux_cache_evictions_total";
    bm_expo_family(o, ev, BM_EXPO_COUNTER,
                   "Entries the cache's bounds (maxEntries, maxBytes) pushed out, by route class.");
    for (int r = 0; r < BM_CK_ROUTE_COUNT; r++) {
        bm_label_t l[] = {{"route", bm_ck_route_name((bm_ck_route_t)r)}};
        bm_expo_u64(o, ev, l, 1, z.store->evictions[r]);
    }
    single(o, "beaconmux_cache_expirations_total", BM_EXPO_COUNTER,
           "Entries found past their TTL and dropped.", z.store->expirations);
    single(o, "beaconmux_cache_entries", BM_EXPO_GAUGE, "Entries held now.", z.entries);
    single(o, "beaconmux_cache_bytes", BM_EXPO_GAUGE,
           "Memory the entries take now (bodies, gzip forms, keys).", z.bytes);
}

/* Every family of one network (none of the process's). */
static void network_metrics(const bm_observe_t *ob, bm_str_t *o)
{
    const bm_pool_t *pool = bm_observe_sources(ob)->pool;
    upstream_states(o, pool);
    upstream_heads(o, ob);
    upstream_simple(o, ob, UP_REQUESTS);
    upstream_simple(o, ob, UP_IN_FLIGHT);
    upstream_simple(o, ob, UP_ERROR_RATIO);
    upstream_simple(o, ob, UP_STREAM);
    upstream_errors_latency(o, ob);
    cluster_metrics(o, ob);
    duty_metrics(o, ob);
    journal_metrics(o, ob);
    broadcast_metrics(o, ob);
    events_metrics(o, ob);
    request_metrics(o, ob);
    read_metrics(o, ob);
    cache_metrics(o, ob);
    bm_observe_metrics_extra(ob, o);
}

void bm_metrics_write(const bm_observe_t *ob, bm_str_t *o)
{
    process_metrics(o);
    connection_metrics(o, bm_observe_sources(ob)->server);
    front_metrics(o, bm_observe_sources(ob)->front);
    network_metrics(ob, o);
}

int bm_metrics_write_merged(const bm_observe_t *const *obs, const char *const *ids, size_t n,
                            bm_str_t *out)
{
    if (n > BM_OBSERVE_MAX_NETWORKS)
        return BM_EINVAL;
    bm_str_t parts[BM_OBSERVE_MAX_NETWORKS + 1];
    const char *texts[BM_OBSERVE_MAX_NETWORKS + 1], *values[BM_OBSERVE_MAX_NETWORKS + 1];
    /* the process's families first and unlabelled, then each network's with its id */
    parts[0] = (bm_str_t){0};
    process_metrics(&parts[0]);
    connection_metrics(&parts[0], n ? bm_observe_sources(obs[0])->server : NULL);
    front_metrics(&parts[0], n ? bm_observe_sources(obs[0])->front : NULL);
    values[0] = NULL;
    for (size_t i = 0; i < n; i++) {
        parts[i + 1] = (bm_str_t){0};
        network_metrics(obs[i], &parts[i + 1]);
        values[i + 1] = ids[i];
    }
    int rc = 0;
    for (size_t i = 0; i <= n; i++) {
        texts[i] = bm_str_len(&parts[i]) ? bm_str_data(&parts[i]) : "";
        if (parts[i].oom)
            rc = BM_ENOMEM;
    }
    if (!rc)
        rc = bm_expo_merge(texts, "network", values, n + 1, out);
    for (size_t i = 0; i <= n; i++)
        bm_str_dispose(&parts[i]);
    return rc;
}
