/* SPDX-License-Identifier: MIT */
/* fork: fork names. */
#include "base/fork.h"

#include <string.h>
#include <strings.h>

#include "base/err.h"

static const char *const fork_names[] = {
    [BM_FORK_PHASE0] = "phase0",   [BM_FORK_ALTAIR] = "altair", [BM_FORK_BELLATRIX] = "bellatrix",
    [BM_FORK_CAPELLA] = "capella", [BM_FORK_DENEB] = "deneb",   [BM_FORK_ELECTRA] = "electra",
    [BM_FORK_FULU] = "fulu",       [BM_FORK_GLOAS] = "gloas",   [BM_FORK_HEZE] = "heze",
    [BM_FORK_FUTURE] = "future",
};

int bm_fork_parse(const char *name, bm_fork_t *out)
{
    if (!name)
        return BM_EINVAL;
    size_t n = strlen(name);
    if (n == 0 || n > 32)
        return BM_EINVAL;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return BM_EINVAL;
    }
    for (int f = BM_FORK_PHASE0; f <= BM_FORK_HEZE; f++) {
        if (strcasecmp(name, fork_names[f]) == 0) {
            *out = (bm_fork_t)f;
            return 0;
        }
    }
    *out = BM_FORK_FUTURE;
    return 0;
}

const char *bm_fork_name(bm_fork_t fork)
{
    if ((int)fork < BM_FORK_PHASE0 || fork > BM_FORK_FUTURE)
        return "?";
    return fork_names[fork];
}
