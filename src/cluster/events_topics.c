/* SPDX-License-Identifier: MIT */
/*
 * events_topics: the names of the event topics, the topics query string, the serialisation of
 * one event, and the dedup window over node events (see events_int.h).
 */
#include "cluster/events_int.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/fork.h"
#include "base/json.h"
#include "base/log.h"

/* ---- topics ------------------------------------------------------------------------- */

static const char *const TOPIC_NAMES[BM_TOPIC_COUNT] = {
    [BM_TOPIC_HEAD] = "head",
    [BM_TOPIC_HEAD_V2] = "head_v2",
    [BM_TOPIC_BLOCK] = "block",
    [BM_TOPIC_BLOCK_GOSSIP] = "block_gossip",
    [BM_TOPIC_ATTESTATION] = "attestation",
    [BM_TOPIC_SINGLE_ATTESTATION] = "single_attestation",
    [BM_TOPIC_VOLUNTARY_EXIT] = "voluntary_exit",
    [BM_TOPIC_BLS_TO_EXECUTION_CHANGE] = "bls_to_execution_change",
    [BM_TOPIC_PROPOSER_SLASHING] = "proposer_slashing",
    [BM_TOPIC_ATTESTER_SLASHING] = "attester_slashing",
    [BM_TOPIC_FINALIZED_CHECKPOINT] = "finalized_checkpoint",
    [BM_TOPIC_CHAIN_REORG] = "chain_reorg",
    [BM_TOPIC_CONTRIBUTION_AND_PROOF] = "contribution_and_proof",
    [BM_TOPIC_LIGHT_CLIENT_FINALITY_UPDATE] = "light_client_finality_update",
    [BM_TOPIC_LIGHT_CLIENT_OPTIMISTIC_UPDATE] = "light_client_optimistic_update",
    [BM_TOPIC_PAYLOAD_ATTRIBUTES] = "payload_attributes",
    [BM_TOPIC_DATA_COLUMN_SIDECAR] = "data_column_sidecar",
    [BM_TOPIC_EXECUTION_PAYLOAD] = "execution_payload",
    [BM_TOPIC_EXECUTION_PAYLOAD_GOSSIP] = "execution_payload_gossip",
    [BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE] = "execution_payload_available",
    [BM_TOPIC_EXECUTION_PAYLOAD_BID] = "execution_payload_bid",
    [BM_TOPIC_PAYLOAD_ATTESTATION_MESSAGE] = "payload_attestation_message",
    [BM_TOPIC_FAST_CONFIRMATION] = "fast_confirmation",
    [BM_TOPIC_PROPOSER_PREFERENCES] = "proposer_preferences",
};

const char *bm_topic_name(bm_topic_t t)
{
    return (unsigned)t < BM_TOPIC_COUNT ? TOPIC_NAMES[t] : "";
}

int bm_topic_parse(const char *s, size_t n, bm_topic_t *out)
{
    if (!s)
        return BM_EINVAL;
    for (int i = 0; i < BM_TOPIC_COUNT; i++)
        if (strlen(TOPIC_NAMES[i]) == n && memcmp(TOPIC_NAMES[i], s, n) == 0) {
            if (out)
                *out = (bm_topic_t)i;
            return 0;
        }
    return BM_EINVAL;
}

/* ---- the query string ------------------------------------------------------------------ */

/* Percent-decodes s[0..n) into out (room for n + 1); a malformed escape stays as is. */
static size_t pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '%' && i + 2 < n && (h = bm_hexval(s[i + 1])) >= 0 &&
            (l = bm_hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(h * 16 + l);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

static void set_bad(char *bad, size_t cap, const char *s, size_t n)
{
    if (!bad || !cap)
        return;
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(bad, s, k);
    bad[k] = '\0';
}

int bm_events_parse_topics(const char *query, size_t len, bm_topic_mask_t *mask, char *bad,
                           size_t bad_cap)
{
    if (bad && bad_cap)
        bad[0] = '\0';
    bm_topic_mask_t m = 0;
    bool named = false;
    char *dec = NULL;
    size_t i = 0;
    while (query && i < len) {
        size_t j = i;
        while (j < len && query[j] != '&')
            j++;
        const char *p = query + i, *eq = memchr(p, '=', j - i);
        size_t nlen = eq ? (size_t)(eq - p) : j - i;
        i = j + 1;
        if (!(nlen == 6 && memcmp(p, "topics", 6) == 0))
            continue;
        named = true;
        const char *v = eq ? eq + 1 : p + nlen;
        size_t vlen = (size_t)(query + j - v);
        char *d = realloc(dec, vlen + 1);
        if (!d) {
            free(dec);
            return BM_ENOMEM;
        }
        dec = d;
        size_t dlen = pct_decode(v, vlen, dec);
        /* the comma form inside one value, items trimmed of spaces */
        size_t a = 0;
        for (;;) {
            size_t b = a;
            while (b < dlen && dec[b] != ',')
                b++;
            size_t s = a, e = b;
            while (s < e && dec[s] == ' ')
                s++;
            while (e > s && dec[e - 1] == ' ')
                e--;
            bm_topic_t t;
            if (bm_topic_parse(dec + s, e - s, &t) != 0) {
                set_bad(bad, bad_cap, dec + s, e - s);
                free(dec);
                return BM_EINVAL;
            }
            m |= BM_TOPIC_BIT(t);
            if (b >= dlen)
                break;
            a = b + 1;
        }
    }
    free(dec);
    if (!named)
        return BM_ENOTFOUND;
    *mask = m;
    return 0;
}

/* ---- serialisation ----------------------------------------------------------------------- */

bm_buf_t *bm_events_serialise(const char *topic, const char *data, size_t len)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, len + strlen(topic) + 16);
    bm_str_puts(&s, "event: ");
    bm_str_puts(&s, topic);
    bm_str_puts(&s, "\ndata: ");
    if (bm_json_compact(data, len, &s, NULL) != 0) {
        bm_str_dispose(&s);
        return NULL;
    }
    bm_str_puts(&s, "\n\n");
    return bm_str_finish(&s);
}

/* ---- the dedup window ---------------------------------------------------------------------
 * A ring of the last `cap` keys in arrival order and an open-addressing set over them
 * (linear probing, deletion by backward shift), so that lookup, insert and eviction of
 * the oldest are O(1) and memory is fixed. A key is a 64-bit keyed hash of topic and
 * canonical data; 0 marks an empty slot (a hash of 0 is stored as 1).
 */

int bm_ev_dedup_init(dedup_t *d, uint32_t cap)
{
    memset(d, 0, sizeof *d);
    uint32_t ts = 16;
    while (ts < 2 * cap)
        ts <<= 1;
    d->ring = calloc(cap, sizeof *d->ring);
    d->tab = calloc(ts, sizeof *d->tab);
    if (!d->ring || !d->tab) {
        free(d->ring);
        free(d->tab);
        return BM_ENOMEM;
    }
    d->cap = cap;
    d->tmask = ts - 1;
    return 0;
}

void bm_ev_dedup_dispose(dedup_t *d)
{
    free(d->ring);
    free(d->tab);
    memset(d, 0, sizeof *d);
}

bool bm_ev_dedup_has(const dedup_t *d, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & d->tmask; d->tab[i]; i = (i + 1) & d->tmask)
        if (d->tab[i] == h)
            return true;
    return false;
}

static void dedup_remove(dedup_t *d, uint64_t h)
{
    uint32_t i = (uint32_t)h & d->tmask;
    while (d->tab[i] && d->tab[i] != h)
        i = (i + 1) & d->tmask;
    if (!d->tab[i])
        return;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & d->tmask;
        if (!d->tab[j])
            break;
        uint32_t k = (uint32_t)d->tab[j] & d->tmask; /* home of the entry at j */
        /* it may move to i only if its home is not cyclically within (i, j] */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        d->tab[i] = d->tab[j];
        i = j;
    }
    d->tab[i] = 0;
}

/* Inserts h (not present). Evicts the oldest key when the window is full. */
void bm_ev_dedup_add(dedup_t *d, uint64_t h)
{
    if (d->n == d->cap) {
        dedup_remove(d, d->ring[d->pos]);
        d->n--;
    }
    d->ring[d->pos] = h;
    d->pos = (d->pos + 1) % d->cap;
    d->n++;
    uint32_t i = (uint32_t)h & d->tmask;
    while (d->tab[i])
        i = (i + 1) & d->tmask;
    d->tab[i] = h;
}
