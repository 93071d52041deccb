/* SPDX-License-Identifier: MIT */
/*
 * archive: classification of historical ids and of pruned answers (see archive.h).
 */
#include "read/archive.h"

#include <string.h>
#include <strings.h>

#include "base/defaults.h"

typedef struct prefix {
    const char *text;
    size_t len;
    bm_hist_kind_t kind;
    bool epoch; /* the id is an epoch */
} prefix_t;

#define PREFIX(text, kind, epoch)                                                                  \
    {                                                                                              \
        text, sizeof text - 1, kind, epoch                                                         \
    }

static const prefix_t prefixes[] = {
    PREFIX("/eth/v1/beacon/blob_sidecars/", BM_HIST_BLOB, false),
    PREFIX("/eth/v1/beacon/blobs/", BM_HIST_BLOB, false),
    PREFIX("/eth/v1/debug/beacon/data_column_sidecars/", BM_HIST_BLOB, false),
    PREFIX("/eth/v2/beacon/blocks/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/blocks/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/blinded_blocks/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/headers/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/rewards/blocks/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/rewards/sync_committee/", BM_HIST_BLOCK, false),
    PREFIX("/eth/v1/beacon/rewards/attestations/", BM_HIST_STATE, true),
    PREFIX("/eth/v1/beacon/states/", BM_HIST_STATE, false),
    PREFIX("/eth/v2/debug/beacon/states/", BM_HIST_STATE, false),
};

void bm_retention_default(bm_retention_t *r)
{
    r->blob_epochs = BM_DEFAULT_ROUTING_RETENTION_BLOB_EPOCHS;
    r->block_epochs = BM_DEFAULT_ROUTING_RETENTION_BLOCK_EPOCHS;
    r->state_slots = BM_DEFAULT_ROUTING_RETENTION_STATE_SLOTS;
}

static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 19)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

void bm_archive_classify(const char *p, size_t n, uint32_t slots_per_epoch, bm_hist_id_t *out)
{
    *out = (bm_hist_id_t){0};
    const char *q = memchr(p, '?', n);
    if (q)
        n = (size_t)(q - p);
    if (n < 6 || memcmp(p, "/eth/v", 6) != 0) /* every prefix starts so */
        return;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        const prefix_t *pre = &prefixes[i];
        size_t l = pre->len;
        /* the byte before the final '/' tells most prefixes apart without a memcmp */
        if (n <= l || p[l - 2] != pre->text[l - 2] || memcmp(p, pre->text, l) != 0)
            continue;
        const char *id = p + l;
        const char *end = memchr(id, '/', n - l);
        size_t idn = end ? (size_t)(end - id) : n - l;
        uint64_t v;
        if (parse_u64(id, idn, &v)) {
            if (pre->epoch && slots_per_epoch && v > UINT64_MAX / slots_per_epoch)
                return;
            out->has_slot = true;
            out->slot = pre->epoch ? v * slots_per_epoch : v;
        } else if (idn > 2 && id[0] == '0' && (id[1] == 'x' || id[1] == 'X')) {
            out->root = true;
        } else if (idn == 7 && memcmp(id, "genesis", 7) == 0) {
            out->has_slot = true;
            out->slot = 0;
        } else {
            return; /* head, finalized, justified: the moving chain */
        }
        out->kind = pre->kind;
        return;
    }
}

bool bm_archive_beyond_retention(const bm_hist_id_t *id, const bm_retention_t *r,
                                 uint64_t current_slot, uint32_t slots_per_epoch)
{
    if (id->kind == BM_HIST_NONE || !id->has_slot)
        return false;
    uint64_t window;
    switch (id->kind) {
    case BM_HIST_BLOB:
        window = (uint64_t)r->blob_epochs * slots_per_epoch;
        break;
    case BM_HIST_BLOCK:
        window = (uint64_t)r->block_epochs * slots_per_epoch;
        break;
    default:
        window = r->state_slots;
        break;
    }
    return current_slot > window && id->slot < current_slot - window;
}

/* True when body[0..n) contains `word`, ignoring case. */
static bool mentions(const char *body, size_t n, const char *word)
{
    size_t l = strlen(word);
    for (size_t i = 0; i + l <= n; i++)
        if (strncasecmp(body + i, word, l) == 0)
            return true;
    return false;
}

bool bm_archive_pruned_answer(const bm_hist_id_t *id, int status, const char *body, size_t n,
                              uint64_t current_slot)
{
    if (id->kind == BM_HIST_NONE)
        return false;
    if (status == 404)
        return id->root || (id->has_slot && id->slot <= current_slot);
    if (status == 400 && id->kind == BM_HIST_BLOB && body)
        return mentions(body, n, "custod") || mentions(body, n, "prune");
    return false;
}
