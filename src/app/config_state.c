/* SPDX-License-Identifier: MIT */
/*
 * config_state: the key table's `state` section: where the state several instances share
 * lives (docs/high-availability.md). The rows follow the rules of config_keys.h.
 */
#include <string.h>

#include "app/config_keys.h"
#include "app/config_rows.h"
#include "base/defaults.h"
#include "state/redis.h"

static const char *const driver_names[] = {"local", "redis"};
static const bm_cfg_enum_t driver_enum = {"state driver", driver_names, 2, NULL};

static const char *redis_url_problem(const char *url)
{
    bm_redis_opts_t o;
    return bm_redis_parse_url(url, &o);
}

static const char *password_problem(const char *pw)
{
    return strlen(pw) >= sizeof(((bm_redis_opts_t *)0)->password)
               ? "is too long (255 bytes at most)"
               : NULL;
}

/* Keys are "<prefix><network>:<topic>:<key>": no spaces (messages are split on them). */
static const char *prefix_problem(const char *p)
{
    if (strlen(p) > 100)
        return "is too long (100 bytes at most)";
    for (const char *c = p; *c; c++)
        if (*c <= ' ' || *c == 0x7f)
            return "must not contain spaces or control characters";
    return NULL;
}

// clang-format off
#define T bm_config_redis_t
static const bm_cfg_key_t redis_keys[] = {
    TEXT(T, "url",      url,      redis_url_problem, BM_CFG_MASK_URL),
    TEXT(T, "password", password, password_problem,  BM_CFG_SECRET),
    TEXT(T, "prefix",   prefix,   prefix_problem,    0),
    DURATION(T, "timeout", timeout_ms, 1, 10000, BM_DEFAULT_STATE_REDIS_TIMEOUT_MS),
};
#undef T
static const bm_cfg_section_t redis_section = SECTION_OF(bm_config_redis_t, redis_keys, NULL);

#define T bm_config_state_t
static const bm_cfg_key_t state_keys[] = {
    ENUM(T,    "driver", driver, bm_state_driver_t, driver_enum, BM_DEFAULT_STATE_DRIVER),
    SECTION(T, "redis",  redis,  bm_config_redis_t, redis_section),
};
#undef T
// clang-format on

const bm_cfg_section_t bm_cfg_state = SECTION_OF(bm_config_state_t, state_keys, NULL);
