/* SPDX-License-Identifier: MIT */
/*
 * report: one small JSON writer per module's stats struct. Field names follow the structs'
 * field names so that the status page and the code read the same.
 */
#include "app/report.h"

#include "base/err.h"
#include "cluster/events.h"
#include "duties/aggregate.h"
#include "duties/attest.h"
#include "duties/broadcast.h"
#include "duties/duties.h"
#include "duties/produce.h"
#include "duties/replay.h"

#define U(v) ((unsigned long long)(v))

static void events_json(bm_str_t *o, void *ud)
{
    const bm_events_stats_t *s = bm_events_stats(ud);
    bm_str_printf(o,
                  "{\"subscribers\":%llu,\"subscribed\":%llu,\"rejected\":%llu,"
                  "\"events_out\":%llu,\"bytes_out\":%llu,\"dropped\":%llu,\"heads\":%llu,"
                  "\"payload_heads\":%llu,\"reorgs\":%llu,\"node_events\":%llu,"
                  "\"duplicates\":%llu,\"untrusted\":%llu,\"shadow_events\":%llu,"
                  "\"bad_events\":%llu,\"extra_streams\":%llu,\"unsupported_topics\":%llu}",
                  U(s->subscribers), U(s->subscribed), U(s->rejected), U(s->events_out),
                  U(s->bytes_out), U(s->dropped), U(s->heads), U(s->payload_heads), U(s->reorgs),
                  U(s->node_events), U(s->duplicates), U(s->untrusted), U(s->shadow_events),
                  U(s->bad_events), U(s->extra_streams), U(s->unsupported));
}

static void attest_json(bm_str_t *o, void *ud)
{
    bm_attest_stats_t s = bm_attest_stats(ud);
    bm_str_printf(o,
                  "{\"requests\":%llu,\"races\":%llu,\"joined\":%llu,\"fallback\":%llu,"
                  "\"checkpoint_refused\":%llu,\"checkpoint_disagreements\":%llu}",
                  U(s.requests), U(s.races), U(s.joined), U(s.fallback), U(s.checkpoint_refused),
                  U(s.checkpoint_disagreements));
}

static void produce_json(bm_str_t *o, void *ud)
{
    bm_produce_stats_t s = bm_produce_stats(ud);
    bm_str_printf(o, "{\"served\":%llu,\"accepted\":%llu,\"fallback\":%llu,\"failed\":%llu}",
                  U(s.served), U(s.accepted), U(s.fallback), U(s.failed));
}

static void aggregate_json(bm_str_t *o, void *ud)
{
    const bm_aggregate_stats_t *s = bm_aggregate_stats(ud);
    bm_str_printf(o,
                  "{\"requests\":{\"aggregate_attestation\":%llu,\"sync_committee_contribution\":"
                  "%llu},\"races\":%llu,\"full\":%llu,\"partial\":%llu,\"errors\":%llu,"
                  "\"ignored\":%llu}",
                  U(s->requests[BM_AGGREGATE_ATTESTATION]),
                  U(s->requests[BM_AGGREGATE_CONTRIBUTION]), U(s->races), U(s->full), U(s->partial),
                  U(s->errors), U(s->ignored));
}

static void duties_json(bm_str_t *o, void *ud)
{
    const bm_duties_stats_t *s = bm_duties_stats(ud);
    bm_str_printf(o,
                  "{\"requests\":{\"attester\":%llu,\"proposer_v1\":%llu,\"proposer_v2\":%llu,"
                  "\"sync\":%llu,\"ptc\":%llu},\"by_root\":%llu,\"first\":%llu,\"majority\":%llu,"
                  "\"late\":%llu,\"errors\":%llu,\"mismatches\":%llu,\"disagreements\":%llu,"
                  "\"liveness\":%llu,\"liveness_unavailable\":%llu}",
                  U(s->requests[BM_DUTY_ATTESTER]), U(s->requests[BM_DUTY_PROPOSER_V1]),
                  U(s->requests[BM_DUTY_PROPOSER_V2]), U(s->requests[BM_DUTY_SYNC]),
                  U(s->requests[BM_DUTY_PTC]), U(s->by_root), U(s->first), U(s->majority),
                  U(s->late), U(s->errors), U(s->mismatches), U(s->disagreements), U(s->liveness),
                  U(s->liveness_unavailable));
}

static void broadcast_json(bm_str_t *o, void *ud)
{
    bm_broadcast_stats_t s;
    bm_broadcast_stats(ud, &s);
    bm_str_printf(o,
                  "{\"requests\":%llu,\"answered_2xx\":%llu,\"answered_error\":%llu,"
                  "\"ssz_refused_at_once\":%llu,\"ssz_refused_late\":%llu,"
                  "\"node_deliveries\":%llu,\"node_failures\":%llu,\"producer_first\":%llu,"
                  "\"indexed_merged\":%llu}",
                  U(s.requests), U(s.answered_2xx), U(s.answered_error), U(s.ssz_refused_at_once),
                  U(s.ssz_refused_late), U(s.node_deliveries), U(s.node_failures),
                  U(s.producer_first), U(s.indexed_merged));
}

static void replay_json(bm_str_t *o, void *ud)
{
    bm_replay_stats_t s;
    bm_replay_stats(ud, &s);
    bm_str_printf(o,
                  "{\"replays_started\":%llu,\"replays_completed\":%llu,\"replays_failed\":%llu,"
                  "\"posts\":%llu,\"posts_rejected\":%llu,\"entries_sent\":%llu}",
                  U(s.replays_started), U(s.replays_completed), U(s.replays_failed), U(s.posts),
                  U(s.posts_rejected), U(s.entries_sent));
}

int bm_report_register(bm_admin_t *admin, const bm_observe_sources_t *src)
{
    const struct {
        const char *name;
        bm_admin_section_fn fn;
        void *module;
    } sections[] = {
        {"events", events_json, src->events},
        {"attestation_data", attest_json, src->attest},
        {"block_production", produce_json, src->produce},
        {"aggregates", aggregate_json, src->aggregate},
        {"duties", duties_json, src->duties},
        {"broadcast", broadcast_json, src->broadcast},
        {"replay", replay_json, src->replay},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof sections / sizeof sections[0] && !rc; i++)
        if (sections[i].module)
            rc = bm_admin_add_section(admin, sections[i].name, sections[i].fn, sections[i].module);
    return rc;
}
