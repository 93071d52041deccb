/* SPDX-License-Identifier: MIT */
/*
 * config_observe: the rows of what beaconmux shows of itself (metrics, journal, ui; log.access
 * is in the log section), part of the key table (config_keys.h) like config_edge.c.
 */
#include <stdio.h>
#include <string.h>

#include "app/config.h"
#include "app/config_keys.h"
#include "app/config_rows.h"
#include "base/defaults.h"
#include "read/rules.h"

static const char *metrics_path_problem(const char *p)
{
    size_t n = strlen(p);
    if (n < 2 || p[0] != '/' || p[n - 1] == '/')
        return "must start with '/' and not end with one (\"/metrics\")";
    if (bm_pattern_problem(p) || strpbrk(p, "*{}"))
        return "must be a plain path: no '*', '{', '?', '#', '%', '//' or spaces";
    if (strncmp(p, "/eth/", 5) == 0 || strncmp(p, "/ui/", 4) == 0 || strcmp(p, "/ui") == 0 ||
        strncmp(p, "/beaconmux/", 11) == 0)
        return "must not be a path of the Beacon API, /ui or /beaconmux/";
    return NULL;
}

static const char *listen_problem(const char *s)
{
    char host[64];
    uint16_t port;
    if (bm_config_parse_listen(s, host, sizeof host, &port) != 0)
        return "must be HOST:PORT (\"127.0.0.1:9090\", \"[::1]:9090\")";
    return NULL;
}

// clang-format off
static const bm_cfg_key_t metrics_keys[] = {
    BOOL(bm_config_metrics_t, "enabled", enabled, BM_DEFAULT_METRICS_ENABLED),
    TEXT_DEF(bm_config_metrics_t, "path", path, metrics_path_problem, 0,
             BM_DEFAULT_METRICS_PATH),
    TEXT(bm_config_metrics_t, "listen",  listen,  listen_problem,       BM_CFG_EMPTY_NONE),
};
static const bm_cfg_key_t journal_keys[] = {
    COUNT(bm_config_journal_t, "slots", slots, 0, BM_CONFIG_MAX_JOURNAL_SLOTS,
          BM_DEFAULT_JOURNAL_SLOTS),
};
static const bm_cfg_key_t ui_keys[] = {
    BOOL(bm_config_ui_t, "enabled", enabled, BM_DEFAULT_UI_ENABLED),
};
// clang-format on

const bm_cfg_section_t bm_cfg_metrics = SECTION_OF(bm_config_metrics_t, metrics_keys, NULL);
const bm_cfg_section_t bm_cfg_journal = SECTION_OF(bm_config_journal_t, journal_keys, NULL);
const bm_cfg_section_t bm_cfg_ui = SECTION_OF(bm_config_ui_t, ui_keys, NULL);
