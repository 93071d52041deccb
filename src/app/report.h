/* SPDX-License-Identifier: MIT */
/*
 * report: the policies' and the cluster stream's counters as sections of the status page
 * (/beaconmux/v1/status). It sits at the top with main: it reads the modules' stats
 * structs and writes JSON, so that admin knows none of them and the modules carry no
 * JSON of their own.
 */
#ifndef BM_REPORT_H
#define BM_REPORT_H

#include "app/admin.h"
#include "cluster/events.h"
#include "duties/aggregate.h"
#include "duties/attest.h"
#include "duties/broadcast.h"
#include "duties/duties.h"
#include "duties/produce.h"
#include "duties/replay.h"

/** The modules whose counters go on the status page; any may be NULL (no section). */
typedef struct bm_report_sources {
    bm_events_t *events;
    bm_attest_t *attest;
    bm_produce_t *produce;
    bm_aggregate_t *aggregate;
    bm_duties_t *duties;
    bm_broadcast_t *broadcast;
    bm_replay_t *replay;
} bm_report_sources_t;

/**
 * Adds one status section per non-NULL source (each module must outlive the admin
 * module's status page). Returns 0 or BM_ENOMEM.
 */
int bm_report_register(bm_admin_t *admin, const bm_report_sources_t *src);

#endif /* BM_REPORT_H */
