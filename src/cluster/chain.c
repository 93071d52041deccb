/* SPDX-License-Identifier: MIT */
/*
 * chain: parsing of genesis and spec answers with json-c, and the rules that say which
 * configuration keys decide "same network". Values in the spec are strings (quoted
 * integers, 0x hex), per the Beacon API.
 */
#include "cluster/chain.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

/* Spec key prefixes of the fork epochs, by fork (phase0 has none). */
static const char *const fork_keys[BM_FORK_NAMED] = {
    NULL,
    "ALTAIR_FORK_EPOCH",
    "BELLATRIX_FORK_EPOCH",
    "CAPELLA_FORK_EPOCH",
    "DENEB_FORK_EPOCH",
    "ELECTRA_FORK_EPOCH",
    "FULU_FORK_EPOCH",
    "GLOAS_FORK_EPOCH",
    "HEZE_FORK_EPOCH",
};

static const char *const due_keys[BM_DUE_COUNT] = {
    "ATTESTATION_DUE_BPS",
    "AGGREGATE_DUE_BPS",
    "SYNC_MESSAGE_DUE_BPS",
    "CONTRIBUTION_DUE_BPS",
    NULL,
};
static const char *const due_keys_gloas[BM_DUE_COUNT] = {
    "ATTESTATION_DUE_BPS_GLOAS",  "AGGREGATE_DUE_BPS_GLOAS",     "SYNC_MESSAGE_DUE_BPS_GLOAS",
    "CONTRIBUTION_DUE_BPS_GLOAS", "PAYLOAD_ATTESTATION_DUE_BPS",
};
/* Defaults: 1/3 and 2/3 of the slot before Gloas (the spec's 3333 and 6667), 1/4, 1/2 and
 * 3/4 from Gloas. */
static const uint32_t due_default[BM_DUE_COUNT] = {3333, 6667, 3333, 6667, 7500};
static const uint32_t due_default_gloas[BM_DUE_COUNT] = {2500, 5000, 2500, 5000, 7500};

static json_object *parse_json(const char *p, size_t len)
{
    if (len > INT32_MAX)
        return NULL;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return NULL;
    json_object *obj = json_tokener_parse_ex(tok, p, (int)len);
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(obj);
        obj = NULL;
    }
    json_tokener_free(tok);
    return obj;
}

static const char *get_str(json_object *obj, const char *key)
{
    json_object *v;
    if (!obj || !json_object_object_get_ex(obj, key, &v) ||
        !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

static bool parse_root(const char *s, uint8_t out[32])
{
    if (!s || strlen(s) != 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return false;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(s + 2 + 2 * i, "%2x", &v) != 1)
            return false;
        char c1 = s[2 + 2 * i], c2 = s[3 + 2 * i];
        if (!strchr("0123456789abcdefABCDEF", c1) || !strchr("0123456789abcdefABCDEF", c2))
            return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

int bm_chain_parse(const char *genesis, size_t genesis_len, const char *spec, size_t spec_len,
                   bm_chain_info_t *out, char *err, size_t err_cap)
{
    char dummy[8];
    if (!err) {
        err = dummy;
        err_cap = sizeof dummy;
    }
    memset(out, 0, sizeof *out);
    int rc = BM_EINVAL;
    json_object *g = parse_json(genesis, genesis_len);
    json_object *s = parse_json(spec, spec_len);
    json_object *gd = NULL, *sd = NULL;
    if (!g || !json_object_object_get_ex(g, "data", &gd)) {
        snprintf(err, err_cap, "genesis: not JSON with a data object");
        goto out;
    }
    if (!s || !json_object_object_get_ex(s, "data", &sd) ||
        !json_object_is_type(sd, json_type_object)) {
        snprintf(err, err_cap, "spec: not JSON with a data object");
        goto out;
    }
    uint64_t genesis_time, v;
    if (!parse_u64(get_str(gd, "genesis_time"), &genesis_time)) {
        snprintf(err, err_cap, "genesis: bad genesis_time");
        goto out;
    }
    if (!parse_root(get_str(gd, "genesis_validators_root"), out->genesis_root)) {
        snprintf(err, err_cap, "genesis: bad genesis_validators_root");
        goto out;
    }
    out->clock.genesis_ms = genesis_time * 1000;
    if (parse_u64(get_str(sd, "SLOT_DURATION_MS"), &v) && v > 0 && v < UINT32_MAX)
        out->clock.slot_ms = (uint32_t)v;
    else if (parse_u64(get_str(sd, "SECONDS_PER_SLOT"), &v) && v > 0 && v < UINT32_MAX / 1000)
        out->clock.slot_ms = (uint32_t)(v * 1000);
    if (!out->clock.slot_ms) {
        snprintf(err, err_cap, "spec: no SECONDS_PER_SLOT or SLOT_DURATION_MS");
        goto out;
    }
    if (!parse_u64(get_str(sd, "SLOTS_PER_EPOCH"), &v) || v == 0 || v > UINT32_MAX) {
        snprintf(err, err_cap, "spec: bad SLOTS_PER_EPOCH");
        goto out;
    }
    out->clock.slots_per_epoch = (uint32_t)v;
    out->fork_epoch[BM_FORK_PHASE0] = 0;
    for (int f = 1; f < BM_FORK_NAMED; f++)
        if (!parse_u64(get_str(sd, fork_keys[f]), &out->fork_epoch[f]))
            out->fork_epoch[f] = BM_FAR_FUTURE_EPOCH;
    for (int d = 0; d < BM_DUE_COUNT; d++) {
        out->due_bps[d] = due_default[d];
        out->due_bps_gloas[d] = due_default_gloas[d];
        if (due_keys[d] && parse_u64(get_str(sd, due_keys[d]), &v) && v <= 10000)
            out->due_bps[d] = (uint32_t)v;
        if (parse_u64(get_str(sd, due_keys_gloas[d]), &v) && v <= 10000)
            out->due_bps_gloas[d] = (uint32_t)v;
    }
    out->known = true;
    rc = 0;
out:
    json_object_put(g);
    json_object_put(s);
    return rc;
}

bm_fork_t bm_chain_fork_at_epoch(const bm_chain_info_t *c, uint64_t epoch)
{
    bm_fork_t f = BM_FORK_PHASE0;
    for (int i = 1; i < BM_FORK_NAMED; i++)
        if (c->fork_epoch[i] != BM_FAR_FUTURE_EPOCH && epoch >= c->fork_epoch[i])
            f = (bm_fork_t)i;
    return f;
}

bm_fork_t bm_chain_fork_at_slot(const bm_chain_info_t *c, uint64_t slot)
{
    return bm_chain_fork_at_epoch(c, bm_epoch_of_slot(&c->clock, slot));
}

uint64_t bm_chain_due_ms(const bm_chain_info_t *c, uint64_t slot, bm_due_t d)
{
    bool gloas = bm_chain_fork_at_slot(c, slot) >= BM_FORK_GLOAS;
    return bm_slot_point_ms(&c->clock, slot, gloas ? c->due_bps_gloas[d] : c->due_bps[d]);
}

/* True for the spec keys that must agree between two nodes of one network. */
static bool is_critical_key(const char *k)
{
    static const char *const exact[] = {
        "SECONDS_PER_SLOT",         "SLOT_DURATION_MS", "SLOTS_PER_EPOCH",
        "GENESIS_FORK_VERSION",     "DEPOSIT_CHAIN_ID", "DEPOSIT_NETWORK_ID",
        "DEPOSIT_CONTRACT_ADDRESS",
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(k, exact[i]) == 0)
            return true;
    size_t n = strlen(k);
    return (n > 13 && strcmp(k + n - 13, "_FORK_VERSION") == 0) ||
           (n > 11 && strcmp(k + n - 11, "_FORK_EPOCH") == 0);
}

static bool is_far_future(const char *v)
{
    uint64_t e;
    return parse_u64(v, &e) && e == BM_FAR_FUTURE_EPOCH;
}

bool bm_chain_spec_compatible(const char *spec_a, size_t len_a, const char *spec_b, size_t len_b,
                              char *why, size_t why_cap)
{
    json_object *a = parse_json(spec_a, len_a), *b = parse_json(spec_b, len_b);
    json_object *ad = NULL, *bd = NULL;
    bool ok = true;
    if (!a || !b || !json_object_object_get_ex(a, "data", &ad) ||
        !json_object_object_get_ex(b, "data", &bd) || !json_object_is_type(ad, json_type_object) ||
        !json_object_is_type(bd, json_type_object)) {
        if (why)
            snprintf(why, why_cap, "spec is not JSON with a data object");
        ok = false;
        goto out;
    }
    json_object_object_foreach(ad, key, va)
    {
        if (!is_critical_key(key) || !json_object_is_type(va, json_type_string))
            continue;
        const char *x = json_object_get_string(va);
        const char *y = get_str(bd, key);
        if (!y || strcasecmp(x, y) == 0)
            continue;
        size_t n = strlen(key);
        bool epoch_key = n > 11 && strcmp(key + n - 11, "_FORK_EPOCH") == 0;
        if (epoch_key && (is_far_future(x) || is_far_future(y)))
            continue;
        if (why)
            snprintf(why, why_cap, "%s differs: %s vs %s", key, x, y);
        ok = false;
        break;
    }
out:
    json_object_put(a);
    json_object_put(b);
    return ok;
}
