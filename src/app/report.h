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
#include "observe/observe.h"

/**
 * Adds one status section per module of `src` that keeps counters (events and the duty
 * policies; each NULL one has none), the modules the metrics read too. Each module must
 * outlive the admin module's status page. Returns 0 or BM_ENOMEM.
 */
int bm_report_register(bm_admin_t *admin, const bm_observe_sources_t *src);

#endif /* BM_REPORT_H */
