// SPDX-License-Identifier: MIT
/* The read path's counters as the status page's "read_path" section: a reader of the
 * public accessors only, kept apart from the exchange machinery in readpath.c. */
#include "read/readpath.h"

#include "read/balance.h"

void bm_readpath_status_json(bm_str_t *o, void *ud)
{
    const bm_readpath_t *rp = ud;
    const bm_readpath_counters_t *c = bm_readpath_counters(rp);
    bm_str_printf(o,
                  "{\"strategy\":\"%s\",\"in_flight\":%zu,\"reads\":%llu,\"attempts\":%llu,"
                  "\"retries\":%llu,\"hedges\":%llu,\"hedges_won\":%llu,\"hedges_refused\":%llu,"
                  "\"blocked\":%llu,\"deadline_exceeded\":%llu,\"breaker_skips\":%llu,"
                  "\"bucket_waits\":%llu,\"throttled\":%llu,\"ssz_refused\":%llu,"
                  "\"archive_routed\":%llu,\"archive_fallthrough\":%llu,"
                  "\"archive_missing\":%llu,\"consensus_agreed\":%llu,"
                  "\"consensus_failed\":%llu,\"sticky_clients\":%zu,\"sticky_moves\":%llu,"
                  "\"busy_skips\":%llu,"
                  "\"busy_waits\":%llu}",
                  bm_balance_strategy_name(bm_readpath_strategy(rp)), bm_readpath_active(rp),
                  (unsigned long long)c->reads, (unsigned long long)c->attempts,
                  (unsigned long long)c->retries, (unsigned long long)c->hedges,
                  (unsigned long long)c->hedges_won, (unsigned long long)c->hedges_refused,
                  (unsigned long long)c->blocked, (unsigned long long)c->deadline_exceeded,
                  (unsigned long long)c->breaker_skips, (unsigned long long)c->bucket_waits,
                  (unsigned long long)c->throttled, (unsigned long long)c->ssz_refused,
                  (unsigned long long)c->archive_routed, (unsigned long long)c->archive_fallthrough,
                  (unsigned long long)c->archive_missing, (unsigned long long)c->consensus_agreed,
                  (unsigned long long)c->consensus_failed, bm_readpath_sticky_clients(rp),
                  (unsigned long long)c->sticky_moves, (unsigned long long)c->busy_skips,
                  (unsigned long long)c->busy_waits);
}
