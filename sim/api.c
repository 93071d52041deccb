/* SPDX-License-Identifier: MIT */
/*
 * api: the Beacon API of one simulated node. The route table maps method + path pattern
 * to a handler; before the handler runs, the node is advanced to the current time, the
 * error-rate coin is flipped, content negotiation decides JSON or SSZ (no-ssz answers
 * 415), and syncing/optimistic nodes refuse duty endpoints with 503 as the spec says.
 * This file also serves the node, config and beacon-state reads; api_val.c the validator
 * reads and block production; api_post.c everything that is submitted.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "api_int.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"

static void h_genesis(ctx_t *x);
static void h_spec(ctx_t *x);
static void h_fork_schedule(ctx_t *x);
static void h_deposit_contract(ctx_t *x);
static void h_version(ctx_t *x);
static void h_version_v2(ctx_t *x);
static void h_syncing(ctx_t *x);
static void h_health(ctx_t *x);
static void h_identity(ctx_t *x);
static void h_peer_count(ctx_t *x);
static void h_peers(ctx_t *x);
static void h_headers(ctx_t *x);
static void h_header(ctx_t *x);
static void h_block_root(ctx_t *x);
static void h_blob_sidecars(ctx_t *x);
static void h_block(ctx_t *x);
static void h_state_root(ctx_t *x);
static void h_state_fork(ctx_t *x);
static void h_finality(ctx_t *x);
static void h_validators(ctx_t *x);
static void h_validator(ctx_t *x);
static void h_balances(ctx_t *x);
static void h_envelope_get(ctx_t *x);
static void h_events(ctx_t *x);

typedef struct route {
    const char *method;
    const char *pattern;
    const char *name;
    route_fn fn;
    unsigned flags;
} route_t;

static const route_t ROUTES[] = {
    /* the hot path of benchmarks first: lookups walk the table in order */
    {"GET", "/eth/v1/validator/attestation_data", "produceAttestationData", h_attestation_data,
     R_SSZ_RESP | R_SYNC503 | R_OPT503},
    {"GET", "/eth/v1/beacon/genesis", "getGenesis", h_genesis, 0},
    {"GET", "/eth/v1/config/spec", "getSpec", h_spec, 0},
    {"GET", "/eth/v1/config/fork_schedule", "getForkSchedule", h_fork_schedule, 0},
    {"GET", "/eth/v1/config/deposit_contract", "getDepositContract", h_deposit_contract, 0},
    {"GET", "/eth/v1/node/version", "getNodeVersion", h_version, 0},
    {"GET", "/eth/v2/node/version", "getNodeVersionV2", h_version_v2, 0},
    {"GET", "/eth/v1/node/syncing", "getSyncingStatus", h_syncing, 0},
    {"GET", "/eth/v1/node/health", "getHealth", h_health, 0},
    {"GET", "/eth/v1/node/identity", "getNetworkIdentity", h_identity, 0},
    {"GET", "/eth/v1/node/peer_count", "getPeerCount", h_peer_count, 0},
    {"GET", "/eth/v1/node/peers", "getPeers", h_peers, 0},
    {"GET", "/eth/v1/beacon/headers", "getBlockHeaders", h_headers, 0},
    {"GET", "/eth/v1/beacon/headers/{block_id}", "getBlockHeader", h_header, 0},
    {"GET", "/eth/v1/beacon/blocks/{block_id}/root", "getBlockRoot", h_block_root, 0},
    {"GET", "/eth/v2/beacon/blocks/{block_id}", "getBlockV2", h_block, R_SSZ_RESP},
    {"GET", "/eth/v1/beacon/blob_sidecars/{block_id}", "getBlobSidecars", h_blob_sidecars, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/root", "getStateRoot", h_state_root, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/fork", "getStateFork", h_state_fork, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/finality_checkpoints", "getStateFinalityCheckpoints",
     h_finality, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/validators", "getStateValidators", h_validators, 0},
    {"POST", "/eth/v1/beacon/states/{state_id}/validators", "postStateValidators", h_validators, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/validators/{validator_id}", "getStateValidator",
     h_validator, 0},
    {"GET", "/eth/v1/beacon/states/{state_id}/validator_balances", "getStateValidatorBalances",
     h_balances, 0},
    {"POST", "/eth/v1/beacon/states/{state_id}/validator_balances", "postStateValidatorBalances",
     h_balances, 0},
    {"GET", "/eth/v1/beacon/execution_payload_envelopes/{block_id}",
     "getSignedExecutionPayloadEnvelope", h_envelope_get, R_SSZ_RESP},
    {"GET", "/eth/v1/events", "eventstream", h_events, R_SSE},
    {"GET", "/eth/v2/validator/aggregate_attestation", "getAggregatedAttestationV2", h_aggregate,
     R_SSZ_RESP | R_SYNC503 | R_OPT503},
    {"GET", "/eth/v1/validator/sync_committee_contribution", "produceSyncCommitteeContribution",
     h_sync_contribution, R_SYNC503 | R_OPT503},
    {"GET", "/eth/v1/validator/payload_attestation_data", "producePayloadAttestationData",
     h_payload_att_data, R_SSZ_RESP | R_SYNC503},
    {"GET", "/eth/v1/validator/duties/proposer/{epoch}", "getProposerDuties", h_proposer_duties_v1,
     R_SYNC503},
    {"GET", "/eth/v2/validator/duties/proposer/{epoch}", "getProposerDutiesV2",
     h_proposer_duties_v2, R_SYNC503},
    {"GET", "/eth/v3/validator/blocks/{slot}", "produceBlockV3", h_produce_v3,
     R_SSZ_RESP | R_SYNC503 | R_OPT503},
    {"GET", "/eth/v4/validator/blocks/{slot}", "produceBlockV4", h_produce_v4,
     R_SSZ_RESP | R_SYNC503 | R_OPT503},
    /* legacy production, removed from the spec after Electra */
    {"GET", "/eth/v2/validator/blocks/{slot}", "produceBlockV2", h_produce_v2,
     R_SSZ_RESP | R_SYNC503 | R_OPT503},
    {"GET", "/eth/v1/validator/blinded_blocks/{slot}", "produceBlindedBlock", h_produce_blinded_v1,
     R_SYNC503 | R_OPT503},
    {"GET", "/eth/v1/validator/execution_payload_envelopes/{slot}/{beacon_block_root}",
     "getExecutionPayloadEnvelope", h_envelope_stateful, R_SSZ_RESP},
    {"POST", "/eth/v1/validator/duties/attester/{epoch}", "getAttesterDuties", h_attester_duties,
     R_SYNC503},
    {"POST", "/eth/v1/validator/duties/sync/{epoch}", "getSyncCommitteeDuties", h_sync_duties,
     R_SYNC503},
    {"POST", "/eth/v1/validator/duties/ptc/{epoch}", "getPtcDuties", h_ptc_duties, R_SYNC503},
    {"POST", "/eth/v1/validator/liveness/{epoch}", "getLiveness", h_liveness, 0},
    {"POST", "/eth/v2/beacon/blocks", "publishBlockV2", h_publish_block, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v2/beacon/blinded_blocks", "publishBlindedBlockV2", h_publish_blinded,
     R_SSZ_REQ | R_REC},
    /* legacy publish (v1: Eth-Consensus-Version optional) */
    {"POST", "/eth/v1/beacon/blocks", "publishBlock", h_publish_block_v1, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/beacon/blinded_blocks", "publishBlindedBlock", h_publish_blinded_v1,
     R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/beacon/execution_payload_envelopes", "publishExecutionPayloadEnvelope",
     h_publish_envelope, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v2/beacon/pool/attestations", "submitPoolAttestationsV2", h_pool_attestations,
     R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/beacon/pool/sync_committees", "submitPoolSyncCommitteeSignatures",
     h_pool_sync, R_REC},
    {"POST", "/eth/v1/beacon/pool/payload_attestations", "submitPayloadAttestationMessages",
     h_pool_payload_att, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/beacon/pool/voluntary_exits", "submitPoolVoluntaryExit", h_pool_single,
     R_REC},
    {"POST", "/eth/v1/beacon/pool/proposer_slashings", "submitPoolProposerSlashings", h_pool_single,
     R_REC},
    {"POST", "/eth/v2/beacon/pool/attester_slashings", "submitPoolAttesterSlashingsV2",
     h_pool_single, R_REC},
    {"POST", "/eth/v1/beacon/pool/bls_to_execution_changes", "submitPoolBLSToExecutionChange",
     h_pool_bls, R_REC},
    {"POST", "/eth/v2/validator/aggregate_and_proofs", "publishAggregateAndProofsV2",
     h_aggregate_and_proofs, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/validator/contribution_and_proofs", "publishContributionAndProofs",
     h_contribution_and_proofs, R_REC},
    {"POST", "/eth/v1/validator/beacon_committee_subscriptions", "prepareBeaconCommitteeSubnet",
     h_committee_subs, R_REC},
    {"POST", "/eth/v1/validator/sync_committee_subscriptions", "prepareSyncCommitteeSubnets",
     h_sync_subs, R_REC},
    {"POST", "/eth/v1/validator/prepare_beacon_proposer", "prepareBeaconProposer",
     h_prepare_proposer, R_REC},
    {"POST", "/eth/v1/validator/register_validator", "registerValidator", h_register_validator,
     R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/validator/proposer_preferences", "submitProposerPreferences",
     h_proposer_preferences, R_SSZ_REQ | R_REC},
    {"POST", "/eth/v1/validator/beacon_committee_selections", "submitBeaconCommitteeSelections",
     h_selections, R_REC},
    {"POST", "/eth/v1/validator/sync_committee_selections", "submitSyncCommitteeSelections",
     h_selections, R_REC},
};

#define NROUTES ((int)(sizeof ROUTES / sizeof ROUTES[0]))

int bs_api_route_count(void)
{
    return NROUTES;
}

const char *bs_api_route_name(int i)
{
    return i >= 0 && i < NROUTES ? ROUTES[i].name : "other";
}

/* Matches a path against a pattern; fills up to 3 parameters when x is given. */
static bool match(const char *pat, const char *path, size_t len, ctx_t *x)
{
    size_t pi = 0, i = 0;
    int np = 0;
    while (pat[pi] && i <= len) {
        if (pat[pi] == '{') {
            const char *close = strchr(pat + pi, '}');
            size_t j = i;
            while (j < len && path[j] != '/')
                j++;
            if (j == i)
                return false;
            if (x && np < 3) {
                size_t n = j - i < 255 ? j - i : 255;
                memcpy(x->parambuf[np], path + i, n);
                x->parambuf[np][n] = 0;
                x->param[np] = x->parambuf[np];
            }
            np++;
            i = j;
            pi = (size_t)(close - pat) + 1;
            continue;
        }
        if (i >= len || path[i] != pat[pi])
            return false;
        i++;
        pi++;
    }
    return pat[pi] == 0 && i == len;
}

int bs_api_route_find(const char *method, const char *path, size_t len)
{
    while (len > 1 && path[len - 1] == '/')
        len--;
    bool path_known = false;
    for (int i = 0; i < NROUTES; i++) {
        if (!match(ROUTES[i].pattern, path, len, NULL))
            continue;
        if (strcmp(ROUTES[i].method, method) == 0 ||
            (strcmp(method, "HEAD") == 0 && strcmp(ROUTES[i].method, "GET") == 0))
            return i;
        path_known = true;
    }
    return path_known ? -2 : -1;
}

/* ---- replies ------------------------------------------------------------------------------- */

const char *api_tf(bool b)
{
    return b ? "true" : "false";
}

void api_put_root(bm_str_t *s, const bs_root_t *r)
{
    char hx[67];
    bs_root_hex(r, hx);
    bm_str_putc(s, '"');
    bm_str_append(s, hx, 66);
    bm_str_putc(s, '"');
}

void api_reply_error(ctx_t *x, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->status = status;
    bm_resp_error(x->req, status, "%s", msg);
}

static double accept_q(const char *params, size_t n);

/* True when Accept-Encoding lists gzip (or *) with a q-value above 0. */
static bool accepts_gzip(ctx_t *x)
{
    const char *ae = bm_req_header(x->req, "Accept-Encoding");
    const char *p = ae;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        const char *semi = memchr(p, ';', n);
        size_t tl = semi ? (size_t)(semi - p) : n;
        while (tl && (p[tl - 1] == ' ' || p[tl - 1] == '\t'))
            tl--;
        if ((tl == 4 && strncasecmp(p, "gzip", 4) == 0) || (tl == 1 && *p == '*'))
            return (semi ? accept_q(semi + 1, n - (size_t)(semi - p) - 1) : 1.0) > 0;
        p = e ? e + 1 : NULL;
    }
    return false;
}

static bm_buf_t *gzip_buf(const bm_buf_t *in)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    uLong bound = deflateBound(&z, (uLong)in->len) + 32;
    bm_buf_t *out = bm_buf_new(bound);
    if (!out) {
        deflateEnd(&z);
        return NULL;
    }
    z.next_in = (Bytef *)in->data;
    z.avail_in = (uInt)in->len;
    z.next_out = (Bytef *)out->data;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    out->len = bound - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        bm_buf_unref(out);
        return NULL;
    }
    return out;
}

void api_reply_buf(ctx_t *x, int status, bm_buf_t *json, bm_buf_t **gz_cache, const bm_hdrs_t *h)
{
    x->status = status;
    if (!json) {
        bm_resp_error(x->req, 500, "out of memory");
        return;
    }
    if (x->n->behav.gzip && accepts_gzip(x)) {
        bm_buf_t *gz = gz_cache && *gz_cache ? bm_buf_ref(*gz_cache) : gzip_buf(json);
        if (gz) {
            if (gz_cache && !*gz_cache)
                *gz_cache = bm_buf_ref(gz);
            bm_hdrs_t hh;
            bm_hdrs_init(&hh);
            if (h)
                bm_hdrs_copy(&hh, h);
            bm_hdrs_add_z(&hh, "Content-Encoding", "gzip");
            bm_hdrs_add_z(&hh, "Vary", "Accept-Encoding");
            bm_resp_send(x->req, status, "application/json", gz, &hh);
            bm_hdrs_dispose(&hh);
            bm_buf_unref(gz);
            return;
        }
    }
    bm_resp_send(x->req, status, "application/json", json, h);
}

void api_reply_str(ctx_t *x, int status, bm_str_t *json, const bm_hdrs_t *h)
{
    bm_buf_t *b = bm_str_finish(json);
    api_reply_buf(x, status, b, NULL, h);
    bm_buf_unref(b);
}

void api_reply_ssz_buf(ctx_t *x, bm_buf_t *ssz, const bm_hdrs_t *h)
{
    x->status = 200;
    if (!ssz) {
        bm_resp_error(x->req, 500, "out of memory");
        return;
    }
    bm_resp_send(x->req, 200, "application/octet-stream", ssz, h);
}

void api_reply_ssz(ctx_t *x, bm_str_t *ssz, const bm_hdrs_t *h)
{
    bm_buf_t *b = bm_str_finish(ssz);
    api_reply_ssz_buf(x, b, h);
    bm_buf_unref(b);
}

void api_reply_empty(ctx_t *x, int status)
{
    x->status = status;
    bm_resp_start(x->req, status, NULL, 0);
    bm_resp_end(x->req);
}

/* ---- request helpers ---------------------------------------------------------------------- */

/* percent-decodes src[0..n) into out (NUL-terminated, truncated to outlen-1) */
static void pct_decode(const char *src, size_t n, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < outlen; i++) {
        if (src[i] == '%' && i + 2 < n && bm_hexval(src[i + 1]) >= 0 &&
            bm_hexval(src[i + 2]) >= 0) {
            out[o++] = (char)(bm_hexval(src[i + 1]) << 4 | bm_hexval(src[i + 2]));
            i += 2;
        } else if (src[i] == '+') {
            out[o++] = ' ';
        } else {
            out[o++] = src[i];
        }
    }
    out[o] = 0;
}

bool api_query(ctx_t *x, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name), i = 0;
    while (x->query && i < x->qlen) {
        size_t j = i;
        while (j < x->qlen && x->query[j] != '&')
            j++;
        const char *kv = x->query + i;
        size_t kvl = j - i;
        if (kvl >= nl && memcmp(kv, name, nl) == 0 && (kvl == nl || kv[nl] == '=')) {
            if (kvl == nl)
                out[0] = 0;
            else
                pct_decode(kv + nl + 1, kvl - nl - 1, out, outlen);
            return true;
        }
        i = j + 1;
    }
    return false;
}

json_object *api_query_list(ctx_t *x, const char *name)
{
    json_object *arr = json_object_new_array();
    size_t nl = strlen(name), i = 0;
    while (arr && x->query && i < x->qlen) {
        size_t j = i;
        while (j < x->qlen && x->query[j] != '&')
            j++;
        const char *kv = x->query + i;
        size_t kvl = j - i;
        if (kvl > nl && memcmp(kv, name, nl) == 0 && kv[nl] == '=') {
            char val[4096];
            pct_decode(kv + nl + 1, kvl - nl - 1, val, sizeof val);
            char *save = NULL;
            for (char *t = strtok_r(val, ",", &save); t; t = strtok_r(NULL, ",", &save))
                json_object_array_add(arr, json_object_new_string(t));
        }
        i = j + 1;
    }
    return arr;
}

bool api_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || strlen(s) > 20)
        return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool api_body_is_ssz(ctx_t *x)
{
    const char *ct = bm_req_header(x->req, "Content-Type");
    return ct && strncasecmp(ct, "application/octet-stream", 24) == 0;
}

json_object *api_body_json(ctx_t *x)
{
    bm_buf_t *b = bm_req_body(x->req);
    if (!b || b->len == 0) {
        api_reply_error(x, 400, "request body is required");
        return NULL;
    }
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        api_reply_error(x, 500, "out of memory");
        return NULL;
    }
    json_object *o = json_tokener_parse_ex(tok, b->data, (int)b->len);
    enum json_tokener_error e = json_tokener_get_error(tok);
    size_t used = (size_t)json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (o && used < b->len &&
           (b->data[used] == ' ' || b->data[used] == '\n' || b->data[used] == '\r' ||
            b->data[used] == '\t'))
        used++;
    if (!o || e != json_tokener_success || used != b->len) {
        json_object_put(o);
        api_reply_error(x, 400, "request body is not valid JSON");
        return NULL;
    }
    return o;
}

/* Parses the q-value of an Accept entry (after ';'). */
static double accept_q(const char *params, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if ((params[i] == 'q' || params[i] == 'Q') && params[i + 1] == '=') {
            char buf[16];
            size_t k = 0;
            for (size_t j = i + 2; j < n && k < sizeof buf - 1 && params[j] != ';'; j++)
                if (params[j] != ' ')
                    buf[k++] = params[j];
            buf[k] = 0;
            return atof(buf);
        }
    return 1.0;
}

/* Decides the answer format. Returns 0 (JSON), 1 (SSZ) or -1 (nothing acceptable). */
static int negotiate(const char *accept, bool ssz_ok, bool *ssz_preferred)
{
    *ssz_preferred = false;
    if (!accept || !*accept)
        return 0;
    double qj = -1, qs = -1, qany = -1;
    const char *p = accept;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && *p == ' ') {
            p++;
            n--;
        }
        const char *semi = memchr(p, ';', n);
        size_t tl = semi ? (size_t)(semi - p) : n;
        while (tl && p[tl - 1] == ' ')
            tl--;
        double q = semi ? accept_q(semi + 1, n - (size_t)(semi - p) - 1) : 1.0;
        if (tl == 16 && strncasecmp(p, "application/json", 16) == 0)
            qj = q > qj ? q : qj;
        else if (tl == 24 && strncasecmp(p, "application/octet-stream", 24) == 0)
            qs = q > qs ? q : qs;
        else if ((tl == 3 && strncmp(p, "*/*", 3) == 0) ||
                 (tl == 13 && strncasecmp(p, "application/*", 13) == 0))
            qany = q > qany ? q : qany;
        p += n;
        if (*p == ',')
            p++;
    }
    double json_q = qj >= 0 ? qj : (qany >= 0 ? qany : 0);
    double ssz_q = qs >= 0 ? qs : 0;
    *ssz_preferred = qs > 0 && qs >= json_q;
    if (ssz_ok && ssz_q > 0 && ssz_q >= json_q)
        return 1;
    if (json_q > 0)
        return 0;
    return -1;
}

/* ---- dispatch --------------------------------------------------------------------------- */

void bs_api_dispatch(bs_simnode_t *sn, bm_req_t *req, int r)
{
    ctx_t x;
    memset(&x, 0, sizeof x);
    x.sn = sn;
    x.n = &sn->node;
    x.sim = sn->sim;
    x.c = sn->sim->chain;
    x.req = req;
    x.now = bs_sim_now();
    uint64_t gen = x.n->head_gen, next = x.n->next_slot;
    bs_node_advance(x.n, x.now);
    if (gen != x.n->head_gen || next != x.n->next_slot)
        bs_sim_rearm(sn);
    x.slot_now = bs_node_slot(x.n, x.now);
    size_t plen;
    const char *path = bm_req_path(req, &plen);
    x.query = bm_req_query(req, &x.qlen);
    while (plen > 1 && path[plen - 1] == '/')
        plen--;
    if (r == -1) {
        api_reply_error(&x, 404, "Route not found: %.*s", (int)(plen > 200 ? 200 : plen), path);
        return;
    }
    if (r == -2) {
        api_reply_error(&x, 405, "Method %s not allowed on %.*s", bm_req_method(req),
                        (int)(plen > 200 ? 200 : plen), path);
        return;
    }
    const route_t *rt = &ROUTES[r];
    x.route = r;
    x.flags = rt->flags;
    if (strchr(rt->pattern, '{'))
        match(rt->pattern, path, plen, &x);
    bs_node_t *n = x.n;
    /* what a submission record needs, taken now: the request is gone once answered */
    char *rec_target = NULL, *rec_ct = NULL, *rec_cv = NULL, *rec_blob = NULL;
    bm_buf_t *rec_body = NULL;
    if (rt->flags & R_REC) {
        const char *h;
        rec_target = strdup(bm_req_target(req));
        rec_ct = (h = bm_req_header(req, "Content-Type")) ? strdup(h) : NULL;
        rec_cv = (h = bm_req_header(req, "Eth-Consensus-Version")) ? strdup(h) : NULL;
        rec_blob = (h = bm_req_header(req, "Eth-Blob-Data-Included")) ? strdup(h) : NULL;
        rec_body = bm_buf_ref(bm_req_body(req));
    }
    const char *why_pruned;
    if (n->behav.throttle > 0 && bs_rng_unit(&n->rng) < n->behav.throttle) {
        api_reply_throttled(&x);
    } else if (n->behav.error_rate > 0 && bs_rng_unit(&n->rng) < n->behav.error_rate) {
        api_reply_error(&x, 500, "Internal server error (simulated by error-rate)");
    } else if ((why_pruned = api_pruned(&x, path, plen))) {
        if (strstr(path, "/blob_sidecars/"))
            api_reply_error(&x, 400,
                            "Requested blob sidecars are outside the custody window "
                            "of this node");
        else
            api_reply_error(&x, 404, "%s not found: pruned by this node", why_pruned);
    } else {
        bool ssz_pref;
        /* a real node streams events to `Accept: text/event-stream` (what EventSource
         * clients send), so the stream is exempt from JSON/SSZ negotiation */
        int fmt = (rt->flags & R_SSE)
                      ? (ssz_pref = false, 0)
                      : negotiate(bm_req_header(req, "Accept"), rt->flags & R_SSZ_RESP, &ssz_pref);
        if (n->behav.no_ssz && (ssz_pref || api_body_is_ssz(&x))) {
            api_reply_error(&x, 415, "SSZ is not supported by this node");
        } else if (api_body_is_ssz(&x) && !(rt->flags & R_SSZ_REQ)) {
            api_reply_error(&x, 415, "Unsupported Content-Type: application/octet-stream");
        } else if (fmt < 0) {
            api_reply_error(&x, 406, "Accepted media types are not available for this endpoint");
        } else if ((rt->flags & R_SYNC503) && n->behav.syncing) {
            api_reply_error(&x, 503, "Beacon node is currently syncing and not serving requests");
        } else if ((rt->flags & R_OPT503) && n->behav.optimistic) {
            api_reply_error(&x, 503, "Beacon node is optimistic: the head block is not verified");
        } else {
            x.want_ssz = fmt == 1;
            rt->fn(&x);
        }
    }
    if (rt->flags & R_REC) {
        bs_node_record(n, x.now, rt->name, rec_target, rec_ct, rec_cv, rec_blob, rec_body,
                       x.status);
        free(rec_target);
        free(rec_ct);
        free(rec_cv);
        free(rec_blob);
        bm_buf_unref(rec_body);
    }
}

/* ---- shared views ------------------------------------------------------------------------ */

const char *api_fork_version(bs_fork_t f)
{
    return f == BS_FORK_GLOAS ? "0x80000000" : "0x70000000";
}

uint32_t api_block_proposer(bs_chain_t *c, bs_block_id_t id)
{
    bs_root_t dep = bs_chain_dependent_root(c, id, bs_chain_epoch_of(c, id.slot), 1);
    return bs_chain_proposer(c, &dep, id.slot);
}

bool api_block_id(ctx_t *x, const char *id, bs_block_id_t *out, bool *not_found)
{
    bs_node_t *n = x->n;
    *not_found = false;
    uint64_t slot;
    if (strcmp(id, "head") == 0) {
        *out = n->head;
        return true;
    }
    if (strcmp(id, "genesis") == 0) {
        *out = (bs_block_id_t){BS_BRANCH_CANON, 0};
        return true;
    }
    if (strcmp(id, "finalized") == 0 || strcmp(id, "justified") == 0) {
        bs_checkpoint_t j, f;
        bs_node_checkpoints(n, NULL, &j, &f);
        uint64_t e = id[0] == 'f' ? f.epoch : j.epoch;
        *out = bs_node_block_at(n, bs_chain_epoch_start(x->c, e));
        return true;
    }
    if (api_parse_u64(id, &slot)) {
        if (slot > n->head.slot) {
            *not_found = true;
            return false;
        }
        bs_block_id_t b = bs_node_block_at(n, slot);
        if (b.slot != slot) {
            *not_found = true;
            return false;
        }
        *out = b;
        return true;
    }
    bs_root_t r;
    if (bs_root_parse(id, strlen(id), &r) == 0) {
        if (bs_node_find_root(n, &r, out))
            return true;
        *not_found = true;
        return false;
    }
    return false;
}

/* A state id resolves to the block whose post-state it names. */
static bool state_id(ctx_t *x, bs_block_id_t *out)
{
    const char *id = x->param[0];
    bool nf;
    if (api_block_id(x, id, out, &nf))
        return true;
    bs_root_t r;
    bool is_root = bs_root_parse(id, strlen(id), &r) == 0;
    if (nf && !is_root) {
        api_reply_error(x, 404, "State not found: %s", id);
        return false;
    }
    if (is_root) { /* not a block root: a state root? */
        /* state roots of the node's chain and recent blocks */
        for (uint32_t i = x->n->nrecent; i-- > 0;) {
            bs_root_t s = bs_chain_state_root(x->c, x->n->recent[i]);
            if (bs_root_eq(&s, &r)) {
                *out = x->n->recent[i];
                return true;
            }
        }
        api_reply_error(x, 404, "State not found: %s", id);
        return false;
    }
    api_reply_error(x, 400, "Invalid state ID: %s", id);
    return false;
}

static bool block_param(ctx_t *x, bs_block_id_t *out)
{
    bool nf;
    if (api_block_id(x, x->param[0], out, &nf))
        return true;
    if (nf)
        api_reply_error(x, 404, "Block not found: %s", x->param[0]);
    else
        api_reply_error(x, 400, "Invalid block ID: %s", x->param[0]);
    return false;
}

static void meta(bm_str_t *s, ctx_t *x, bs_block_id_t id)
{
    bm_str_printf(s, "\"execution_optimistic\":%s,\"finalized\":%s", api_tf(x->n->behav.optimistic),
                  api_tf(bs_node_finalized(x->n, id)));
}

/* ---- cluster-wide cached answers ---------------------------------------------------------- */

typedef struct api_cache {
    bm_buf_t *spec[BS_CLIENT_COUNT];
    uint64_t spec_epoch[BS_CLIENT_COUNT];
    bm_buf_t *fork_schedule;
    uint64_t fs_epoch;
    bm_buf_t *genesis;
} api_cache_t;

static api_cache_t *cache_of(bs_sim_t *s)
{
    if (!s->api_cache)
        s->api_cache = calloc(1, sizeof(api_cache_t));
    return s->api_cache;
}

void bs_api_free_cache(bs_sim_t *s)
{
    api_cache_t *c = s->api_cache;
    if (!c)
        return;
    for (int i = 0; i < BS_CLIENT_COUNT; i++)
        bm_buf_unref(c->spec[i]);
    bm_buf_unref(c->fork_schedule);
    bm_buf_unref(c->genesis);
    free(c);
    s->api_cache = NULL;
}

static void h_genesis(ctx_t *x)
{
    api_cache_t *ac = cache_of(x->sim);
    if (!ac) {
        api_reply_error(x, 500, "out of memory");
        return;
    }
    if (!ac->genesis) {
        const bs_chain_cfg_t *cfg = bs_chain_config(x->c);
        bs_root_t gvr = bs_hash(cfg->seed, BS_TAG_GENESIS, 1, 0, 0);
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"data\":{\"genesis_time\":\"%llu\",\"genesis_validators_root\":",
                      (unsigned long long)(cfg->genesis_ms / 1000));
        api_put_root(&s, &gvr);
        bm_str_puts(&s, ",\"genesis_fork_version\":\"0x10000000\"}}");
        ac->genesis = bm_str_finish(&s);
    }
    api_reply_buf(x, 200, ac->genesis, NULL, NULL);
}

static const struct {
    const char *name, *version;
} FORKS[] = {{"ALTAIR", "0x20000000"}, {"BELLATRIX", "0x30000000"}, {"CAPELLA", "0x40000000"},
             {"DENEB", "0x50000000"},  {"ELECTRA", "0x60000000"},   {"FULU", "0x70000000"}};

static void kv(bm_str_t *s, bool *first, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void kv(bm_str_t *s, bool *first, const char *k, const char *fmt, ...)
{
    bm_str_printf(s, "%s\"%s\":\"", *first ? "" : ",", k);
    *first = false;
    va_list ap;
    va_start(ap, fmt);
    bm_str_vprintf(s, fmt, ap);
    va_end(ap);
    bm_str_putc(s, '"');
}

static bm_buf_t *build_spec(ctx_t *x, bs_client_t client)
{
    const bs_chain_cfg_t *cfg = bs_chain_config(x->c);
    bool gloas = cfg->gloas_epoch != BS_FAR_FUTURE;
    bm_str_t s = BM_STR_INIT;
    bool f = true;
    bm_str_puts(&s, "{\"data\":{");
    if (client != BS_CLIENT_TEKU)
        kv(&s, &f, "CONFIG_NAME", "beaconsim");
    if (client != BS_CLIENT_PRYSM)
        kv(&s, &f, "PRESET_BASE", "mainnet");
    kv(&s, &f, "SECONDS_PER_SLOT", "%u", cfg->slot_ms >= 1000 ? cfg->slot_ms / 1000 : 1);
    kv(&s, &f, "SLOT_DURATION_MS", "%u", cfg->slot_ms);
    kv(&s, &f, "SLOTS_PER_EPOCH", "%u", cfg->slots_per_epoch);
    kv(&s, &f, "MIN_GENESIS_TIME", "%llu", (unsigned long long)(cfg->genesis_ms / 1000));
    kv(&s, &f, "MIN_GENESIS_ACTIVE_VALIDATOR_COUNT", "%u", cfg->validators);
    if (client != BS_CLIENT_GRANDINE)
        kv(&s, &f, "GENESIS_DELAY", "0");
    kv(&s, &f, "GENESIS_FORK_VERSION", "0x10000000");
    for (size_t i = 0; i < sizeof FORKS / sizeof FORKS[0]; i++) {
        char k[64];
        snprintf(k, sizeof k, "%s_FORK_VERSION", FORKS[i].name);
        kv(&s, &f, k, "%s", FORKS[i].version);
        snprintf(k, sizeof k, "%s_FORK_EPOCH", FORKS[i].name);
        kv(&s, &f, k, "0");
    }
    if (gloas) {
        kv(&s, &f, "GLOAS_FORK_VERSION", "0x80000000");
        kv(&s, &f, "GLOAS_FORK_EPOCH", "%llu", (unsigned long long)cfg->gloas_epoch);
    }
    kv(&s, &f, "ATTESTATION_DUE_BPS", "3333");
    kv(&s, &f, "AGGREGATE_DUE_BPS", "6667");
    kv(&s, &f, "SYNC_MESSAGE_DUE_BPS", "3333");
    kv(&s, &f, "CONTRIBUTION_DUE_BPS", "6667");
    kv(&s, &f, "PROPOSER_REORG_CUTOFF_BPS", "1667");
    if (gloas) {
        kv(&s, &f, "ATTESTATION_DUE_BPS_GLOAS", "2500");
        kv(&s, &f, "AGGREGATE_DUE_BPS_GLOAS", "5000");
        kv(&s, &f, "SYNC_MESSAGE_DUE_BPS_GLOAS", "2500");
        kv(&s, &f, "CONTRIBUTION_DUE_BPS_GLOAS", "5000");
        kv(&s, &f, "PAYLOAD_DUE_BPS", "5000");
        kv(&s, &f, "PAYLOAD_ATTESTATION_DUE_BPS", "7500");
        kv(&s, &f, "PTC_SIZE", "512");
        kv(&s, &f, "BUILDER_INDEX_SELF_BUILD", "18446744073709551615");
    }
    kv(&s, &f, "INTERVALS_PER_SLOT", "3");
    kv(&s, &f, "MAXIMUM_GOSSIP_CLOCK_DISPARITY", "500");
    kv(&s, &f, "MAX_COMMITTEES_PER_SLOT", "64");
    kv(&s, &f, "TARGET_COMMITTEE_SIZE", "128");
    kv(&s, &f, "MAX_VALIDATORS_PER_COMMITTEE", "2048");
    kv(&s, &f, "TARGET_AGGREGATORS_PER_COMMITTEE", "16");
    kv(&s, &f, "SYNC_COMMITTEE_SIZE", "%d", BS_SYNC_COMMITTEE_SIZE);
    kv(&s, &f, "SYNC_COMMITTEE_SUBNET_COUNT", "%d", BS_SYNC_SUBNETS);
    kv(&s, &f, "EPOCHS_PER_SYNC_COMMITTEE_PERIOD", "%d", BS_EPOCHS_PER_SYNC_PERIOD);
    kv(&s, &f, "MIN_SEED_LOOKAHEAD", "1");
    kv(&s, &f, "MAX_SEED_LOOKAHEAD", "4");
    kv(&s, &f, "SHARD_COMMITTEE_PERIOD", "256");
    kv(&s, &f, "ETH1_FOLLOW_DISTANCE", "2048");
    kv(&s, &f, "MAX_EFFECTIVE_BALANCE", "32000000000");
    kv(&s, &f, "MAX_EFFECTIVE_BALANCE_ELECTRA", "2048000000000");
    kv(&s, &f, "MAX_BLOBS_PER_BLOCK_ELECTRA", "9");
    kv(&s, &f, "DEPOSIT_CHAIN_ID", "1337");
    kv(&s, &f, "DEPOSIT_NETWORK_ID", "1337");
    kv(&s, &f, "DEPOSIT_CONTRACT_ADDRESS", "0x4242424242424242424242424242424242424242");
    kv(&s, &f, "DOMAIN_BEACON_PROPOSER", "0x00000000");
    kv(&s, &f, "DOMAIN_BEACON_ATTESTER", "0x01000000");
    kv(&s, &f, "DOMAIN_RANDAO", "0x02000000");
    kv(&s, &f, "DOMAIN_DEPOSIT", "0x03000000");
    kv(&s, &f, "DOMAIN_VOLUNTARY_EXIT", "0x04000000");
    kv(&s, &f, "DOMAIN_SELECTION_PROOF", "0x05000000");
    kv(&s, &f, "DOMAIN_AGGREGATE_AND_PROOF", "0x06000000");
    kv(&s, &f, "DOMAIN_SYNC_COMMITTEE", "0x07000000");
    kv(&s, &f, "DOMAIN_SYNC_COMMITTEE_SELECTION_PROOF", "0x08000000");
    kv(&s, &f, "DOMAIN_CONTRIBUTION_AND_PROOF", "0x09000000");
    kv(&s, &f, "DOMAIN_BLS_TO_EXECUTION_CHANGE", "0x0a000000");
    if (client != BS_CLIENT_TEKU)
        kv(&s, &f, "DOMAIN_APPLICATION_MASK", "0x00000001");
    if (gloas) {
        kv(&s, &f, "DOMAIN_BEACON_BUILDER", "0x0b000000");
        kv(&s, &f, "DOMAIN_PTC_ATTESTER", "0x0c000000");
        kv(&s, &f, "DOMAIN_PROPOSER_PREFERENCES", "0x0d000000");
    }
    switch (client) {
    case BS_CLIENT_PRYSM:
        kv(&s, &f, "SECONDS_PER_ETH1_BLOCK", "14");
        break;
    case BS_CLIENT_TEKU:
        kv(&s, &f, "PROPOSER_SCORE_BOOST", "40");
        break;
    case BS_CLIENT_NIMBUS:
        kv(&s, &f, "MAX_REQUEST_BLOCKS_DENEB", "128");
        break;
    case BS_CLIENT_LODESTAR:
        kv(&s, &f, "DOMAIN_APPLICATION_BUILDER", "0x00000001");
        break;
    default:
        break;
    }
    bm_str_puts(&s, "}}");
    return bm_str_finish(&s);
}

static void h_spec(ctx_t *x)
{
    api_cache_t *ac = cache_of(x->sim);
    bs_client_t cl = x->n->behav.client;
    uint64_t ge = bs_chain_config(x->c)->gloas_epoch;
    if (!ac) {
        api_reply_error(x, 500, "out of memory");
        return;
    }
    if (!ac->spec[cl] || ac->spec_epoch[cl] != ge) {
        bm_buf_unref(ac->spec[cl]);
        ac->spec[cl] = build_spec(x, cl);
        ac->spec_epoch[cl] = ge;
    }
    api_reply_buf(x, 200, ac->spec[cl], NULL, NULL);
}

static void h_fork_schedule(ctx_t *x)
{
    api_cache_t *ac = cache_of(x->sim);
    uint64_t ge = bs_chain_config(x->c)->gloas_epoch;
    if (!ac) {
        api_reply_error(x, 500, "out of memory");
        return;
    }
    if (!ac->fork_schedule || ac->fs_epoch != ge) {
        bm_str_t s = BM_STR_INIT;
        bm_str_puts(&s, "{\"data\":[{\"previous_version\":\"0x10000000\",\"current_version\":"
                        "\"0x10000000\",\"epoch\":\"0\"}");
        const char *prev = "0x10000000";
        for (size_t i = 0; i < sizeof FORKS / sizeof FORKS[0]; i++) {
            bm_str_printf(&s,
                          ",{\"previous_version\":\"%s\",\"current_version\":\"%s\","
                          "\"epoch\":\"0\"}",
                          prev, FORKS[i].version);
            prev = FORKS[i].version;
        }
        if (ge != BS_FAR_FUTURE)
            bm_str_printf(&s,
                          ",{\"previous_version\":\"%s\",\"current_version\":\"0x80000000\","
                          "\"epoch\":\"%llu\"}",
                          prev, (unsigned long long)ge);
        bm_str_puts(&s, "]}");
        bm_buf_unref(ac->fork_schedule);
        ac->fork_schedule = bm_str_finish(&s);
        ac->fs_epoch = ge;
    }
    api_reply_buf(x, 200, ac->fork_schedule, NULL, NULL);
}

static void h_deposit_contract(ctx_t *x)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":{\"chain_id\":\"1337\",\"address\":"
                    "\"0x4242424242424242424242424242424242424242\"}}");
    api_reply_str(x, 200, &s, NULL);
}

static void h_version(ctx_t *x)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":{\"version\":");
    const char *v = bs_client_version(x->n->behav.client);
    bm_str_json_string(&s, v, strlen(v));
    bm_str_puts(&s, "}}");
    api_reply_str(x, 200, &s, NULL);
}

static void h_version_v2(ctx_t *x)
{
    bs_client_t c = x->n->behav.client;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"data\":{\"beacon_node\":{\"code\":\"%s\",\"name\":\"%s\",\"version\":\"%s\","
                  "\"commit\":\"0x%08x\"},\"execution_client\":{\"code\":\"NM\",\"name\":"
                  "\"Nethermind\",\"version\":\"v1.35.0\",\"commit\":\"0xc066aee2\"}}}",
                  bs_client_code(c), bs_client_display(c), bs_client_semver(c),
                  (unsigned)(0x5151a000u + (unsigned)c));
    api_reply_str(x, 200, &s, NULL);
}

static void h_syncing(ctx_t *x)
{
    bs_node_t *n = x->n;
    uint64_t dist = x->slot_now > n->head.slot ? x->slot_now - n->head.slot : 0;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"data\":{\"head_slot\":\"%llu\",\"sync_distance\":\"%llu\",\"is_syncing\":%s,"
                  "\"is_optimistic\":%s,\"el_offline\":false}}",
                  (unsigned long long)n->head.slot, (unsigned long long)dist,
                  api_tf(n->behav.syncing), api_tf(n->behav.optimistic));
    api_reply_str(x, 200, &s, NULL);
}

static void h_health(ctx_t *x)
{
    char v[16];
    int status = x->n->behav.syncing || x->n->behav.optimistic ? 206 : 200;
    if (api_query(x, "syncing_status", v, sizeof v)) {
        uint64_t code;
        if (!api_parse_u64(v, &code) || code < 100 || code > 599) {
            api_reply_error(x, 400, "Invalid syncing_status: %s", v);
            return;
        }
        if (status == 206)
            status = (int)code;
    }
    api_reply_empty(x, status);
}

static void h_identity(ctx_t *x)
{
    const bs_chain_cfg_t *cfg = bs_chain_config(x->c);
    bs_root_t id = bs_hash(cfg->seed, BS_TAG_PEER, x->n->index, 0, 0);
    char peer[48];
    static const char b58[] = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    peer[0] = '1';
    peer[1] = '6';
    peer[2] = 'U';
    peer[3] = 'i';
    for (int i = 4; i < 46; i++)
        peer[i] = b58[id.b[i % 32] % 58];
    peer[46] = 0;
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"data\":{\"peer_id\":\"%s\",\"enr\":\"enr:-sim%u\",\"p2p_addresses\":"
                  "[\"/ip4/127.0.0.1/tcp/%d/p2p/%s\"],\"discovery_addresses\":"
                  "[\"/ip4/127.0.0.1/udp/%d/p2p/%s\"],\"metadata\":{\"seq_number\":\"1\","
                  "\"attnets\":\"0x0000000000000000\",\"syncnets\":\"0x00\","
                  "\"custody_group_count\":\"4\"}}}",
                  peer, x->n->index, 9000 + (int)x->n->index, peer, 9000 + (int)x->n->index, peer);
    api_reply_str(x, 200, &s, NULL);
}

static void h_peer_count(ctx_t *x)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"data\":{\"disconnected\":\"3\",\"connecting\":\"0\",\"connected\":\"%u\","
                  "\"disconnecting\":\"0\"}}",
                  x->sim->nnodes > 1 ? x->sim->nnodes - 1 + 50 : 50);
    api_reply_str(x, 200, &s, NULL);
}

static void h_peers(ctx_t *x)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"data\":[],\"meta\":{\"count\":0}}");
    api_reply_str(x, 200, &s, NULL);
}

static void header_json(bm_str_t *s, ctx_t *x, bs_block_id_t id)
{
    bs_chain_t *c = x->c;
    bs_root_t r = bs_chain_root(c, id), st = bs_chain_state_root(c, id),
              body = bs_chain_body_root(c, id), parent = {{0}};
    bs_block_id_t p;
    if (bs_chain_parent(c, id, &p))
        parent = bs_chain_root(c, p);
    uint8_t sig[96];
    bs_fake_sig(bs_chain_config(c)->seed, id.branch, id.slot, sig);
    bm_str_puts(s, "{\"root\":");
    api_put_root(s, &r);
    bm_str_printf(s,
                  ",\"canonical\":%s,\"header\":{\"message\":{\"slot\":\"%llu\","
                  "\"proposer_index\":\"%u\",\"parent_root\":",
                  api_tf(bs_node_canonical(x->n, id)), (unsigned long long)id.slot,
                  id.slot ? api_block_proposer(c, id) : 0);
    api_put_root(s, &parent);
    bm_str_puts(s, ",\"state_root\":");
    api_put_root(s, &st);
    bm_str_puts(s, ",\"body_root\":");
    api_put_root(s, &body);
    bm_str_puts(s, "},\"signature\":");
    bs_json_hex(s, sig, 96);
    bm_str_puts(s, "}}");
}

static void h_header(ctx_t *x)
{
    bs_block_id_t id;
    if (!block_param(x, &id))
        return;
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_puts(&s, ",\"data\":");
    header_json(&s, x, id);
    bm_str_putc(&s, '}');
    api_reply_str(x, 200, &s, NULL);
}

static void h_headers(ctx_t *x)
{
    char v[128];
    bs_block_id_t found[BS_RECENT_BLOCKS + 1];
    size_t nf = 0;
    bs_node_t *n = x->n;
    if (api_query(x, "slot", v, sizeof v)) {
        uint64_t slot;
        if (!api_parse_u64(v, &slot)) {
            api_reply_error(x, 400, "Invalid slot: %s", v);
            return;
        }
        bs_block_id_t b = bs_node_block_at(n, slot);
        if (b.slot == slot && slot <= n->head.slot)
            found[nf++] = b;
        for (uint32_t i = 0; i < n->nrecent; i++)
            if (n->recent[i].slot == slot && !(nf && bs_block_id_eq(found[0], n->recent[i])))
                found[nf++] = n->recent[i];
    } else if (api_query(x, "parent_root", v, sizeof v)) {
        bs_root_t pr;
        if (bs_root_parse(v, strlen(v), &pr) != 0) {
            api_reply_error(x, 400, "Invalid parent_root: %s", v);
            return;
        }
        for (uint32_t i = 0; i < n->nrecent; i++) {
            bs_block_id_t p;
            if (bs_chain_parent(x->c, n->recent[i], &p)) {
                bs_root_t r = bs_chain_root(x->c, p);
                if (bs_root_eq(&r, &pr))
                    found[nf++] = n->recent[i];
            }
        }
    } else {
        found[nf++] = n->head;
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"execution_optimistic\":%s,\"finalized\":%s,\"data\":[",
                  api_tf(n->behav.optimistic), api_tf(nf && bs_node_finalized(n, found[0])));
    for (size_t i = 0; i < nf; i++) {
        if (i)
            bm_str_putc(&s, ',');
        header_json(&s, x, found[i]);
    }
    bm_str_puts(&s, "]}");
    api_reply_str(x, 200, &s, NULL);
}

static void h_block_root(ctx_t *x)
{
    bs_block_id_t id;
    if (!block_param(x, &id))
        return;
    bs_root_t r = bs_chain_root(x->c, id);
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_puts(&s, ",\"data\":{\"root\":");
    api_put_root(&s, &r);
    bm_str_puts(&s, "}}");
    api_reply_str(x, 200, &s, NULL);
}

/* Blob sidecars: the sim's blocks carry no blobs, so a kept block has an empty list. */
static void h_blob_sidecars(ctx_t *x)
{
    bs_block_id_t id;
    if (!block_param(x, &id))
        return;
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_puts(&s, ",\"data\":[]}");
    api_reply_str(x, 200, &s, NULL);
}

static void h_block(ctx_t *x)
{
    bs_block_id_t id;
    if (!block_param(x, &id))
        return;
    bs_block_desc_t d;
    bs_block_describe(x->c, id, id.slot ? api_block_proposer(x->c, id) : 0, &d);
    uint8_t sig[96];
    bs_fake_sig(bs_chain_config(x->c)->seed, id.branch, id.slot + (1ull << 40), sig);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", bs_fork_name(d.fork));
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        bs_signed_block_ssz(&s, &d, sig);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_printf(&s, "{\"version\":\"%s\",", bs_fork_name(d.fork));
        meta(&s, x, id);
        bm_str_puts(&s, ",\"data\":{\"message\":");
        bs_block_json(&s, &d);
        bm_str_puts(&s, ",\"signature\":");
        bs_json_hex(&s, sig, 96);
        bm_str_puts(&s, "}}");
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

static void h_envelope_get(ctx_t *x)
{
    bs_block_id_t id;
    if (!block_param(x, &id))
        return;
    if (id.slot == 0 || bs_chain_fork_at(x->c, id.slot) != BS_FORK_GLOAS ||
        !bs_node_payload_full(x->n, id)) {
        api_reply_error(x, 404, "Execution payload envelope not found for block %s", x->param[0]);
        return;
    }
    bs_block_desc_t d;
    bs_block_describe(x->c, id, api_block_proposer(x->c, id), &d);
    bs_root_t root = bs_chain_root(x->c, id);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "gloas");
    bm_str_t s = BM_STR_INIT;
    if (x->want_ssz) {
        bs_ssz_u32(&s, 100);
        for (int i = 0; i < 96; i++)
            bm_str_putc(&s, 0);
        bs_envelope_ssz(&s, &d, &root);
        api_reply_ssz(x, &s, &h);
    } else {
        bm_str_puts(&s, "{\"version\":\"gloas\",");
        meta(&s, x, id);
        bm_str_puts(&s, ",\"data\":{\"message\":");
        bs_envelope_json(&s, &d, &root);
        bm_str_puts(&s, ",\"signature\":\"0x");
        for (int i = 0; i < 96; i++)
            bm_str_puts(&s, "00");
        bm_str_puts(&s, "\"}}");
        api_reply_str(x, 200, &s, &h);
    }
    bm_hdrs_dispose(&h);
}

static void h_state_root(ctx_t *x)
{
    bs_block_id_t id;
    if (!state_id(x, &id))
        return;
    bs_root_t r = bs_chain_state_root(x->c, id);
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_puts(&s, ",\"data\":{\"root\":");
    api_put_root(&s, &r);
    bm_str_puts(&s, "}}");
    api_reply_str(x, 200, &s, NULL);
}

static void h_state_fork(ctx_t *x)
{
    bs_block_id_t id;
    if (!state_id(x, &id))
        return;
    bool gloas = bs_chain_fork_at(x->c, id.slot) == BS_FORK_GLOAS;
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_printf(&s,
                  ",\"data\":{\"previous_version\":\"%s\",\"current_version\":\"%s\","
                  "\"epoch\":\"%llu\"}}",
                  gloas ? "0x70000000" : "0x60000000", gloas ? "0x80000000" : "0x70000000",
                  (unsigned long long)(gloas ? bs_chain_config(x->c)->gloas_epoch : 0));
    api_reply_str(x, 200, &s, NULL);
}

static void cp_json(bm_str_t *s, const char *k, const bs_checkpoint_t *cp)
{
    bm_str_printf(s, "\"%s\":{\"epoch\":\"%llu\",\"root\":", k, (unsigned long long)cp->epoch);
    api_put_root(s, &cp->root);
    bm_str_putc(s, '}');
}

static void h_finality(ctx_t *x)
{
    bs_block_id_t id;
    if (!state_id(x, &id))
        return;
    bs_checkpoint_t pj, cj, fin;
    bs_node_t *n = x->n;
    /* the checkpoints of the state at `id`, seen on the node's chain */
    bs_block_id_t save = n->head;
    n->head = id;
    bs_node_checkpoints(n, &pj, &cj, &fin);
    n->head = save;
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, id);
    bm_str_puts(&s, ",\"data\":{");
    cp_json(&s, "previous_justified", &pj);
    bm_str_putc(&s, ',');
    cp_json(&s, "current_justified", &cj);
    bm_str_putc(&s, ',');
    cp_json(&s, "finalized", &fin);
    bm_str_puts(&s, "}}");
    api_reply_str(x, 200, &s, NULL);
}

/* Resolves a validator id (index or 0x pubkey) to an index; -1 unknown, -2 malformed. */
static int64_t validator_id(ctx_t *x, const char *id)
{
    uint64_t v;
    if (api_parse_u64(id, &v))
        return v < bs_chain_config(x->c)->validators ? (int64_t)v : -1;
    if (strlen(id) == 98 && id[0] == '0' && id[1] == 'x') {
        uint8_t pk[48];
        for (int i = 0; i < 48; i++) {
            int hi = bm_hexval(id[2 + 2 * i]), lo = bm_hexval(id[3 + 2 * i]);
            if (hi < 0 || lo < 0)
                return -2;
            pk[i] = (uint8_t)(hi << 4 | lo);
        }
        return bs_chain_validator_by_pubkey(x->c, pk);
    }
    return -2;
}

static const char *const STATUSES[] = {
    "pending_initialized", "pending_queued",   "active_ongoing", "active_exiting",
    "active_slashed",      "exited_unslashed", "exited_slashed", "withdrawal_possible",
    "withdrawal_done",     "pending",          "active",         "exited",
    "withdrawal"};

static void validator_json(bm_str_t *s, ctx_t *x, uint32_t v, bool balance_only)
{
    uint8_t pk[48];
    bs_chain_pubkey(x->c, v, pk);
    bm_str_printf(s, "{\"index\":\"%u\",\"balance\":\"%llu\"", v,
                  32000000000ull + (unsigned long long)(v % 7) * 1000000ull);
    if (!balance_only) {
        bm_str_puts(s, ",\"status\":\"active_ongoing\",\"validator\":{\"pubkey\":");
        bs_json_hex(s, pk, 48);
        uint8_t wc[32] = {0x01};
        memcpy(wc + 12, pk, 20);
        bm_str_puts(s, ",\"withdrawal_credentials\":");
        bs_json_hex(s, wc, 32);
        bm_str_puts(s, ",\"effective_balance\":\"32000000000\",\"slashed\":false,"
                       "\"activation_eligibility_epoch\":\"0\",\"activation_epoch\":\"0\","
                       "\"exit_epoch\":\"18446744073709551615\","
                       "\"withdrawable_epoch\":\"18446744073709551615\"}");
    }
    bm_str_putc(s, '}');
}

/* GET (id, status query lists) and POST ({"ids":[...],"statuses":[...]}) of validators
 * and validator_balances (balances: POST body is a plain array of ids). */
static void validators_common(ctx_t *x, bool balances)
{
    bs_block_id_t sid;
    if (!state_id(x, &sid))
        return;
    json_object *ids = NULL, *statuses = NULL, *body = NULL;
    bool post = strcmp(bm_req_method(x->req), "POST") == 0;
    if (post && bm_req_body(x->req) && bm_req_body(x->req)->len) {
        if (!(body = api_body_json(x)))
            return;
        if (balances) {
            ids = json_object_get(body);
        } else {
            if (!json_object_is_type(body, json_type_object)) {
                json_object_put(body);
                api_reply_error(x, 400, "body must be an object {ids, statuses}");
                return;
            }
            json_object *t;
            if (json_object_object_get_ex(body, "ids", &t))
                ids = json_object_get(t);
            if (json_object_object_get_ex(body, "statuses", &t))
                statuses = json_object_get(t);
        }
    } else if (!post) {
        ids = api_query_list(x, "id");
        statuses = balances ? NULL : api_query_list(x, "status");
    }
    int rc = 0;
    if ((ids && !json_object_is_type(ids, json_type_array)) ||
        (statuses && !json_object_is_type(statuses, json_type_array))) {
        rc = 400;
        api_reply_error(x, 400, "ids and statuses must be arrays");
    }
    bool active_ok = true;
    if (!rc && statuses && json_object_array_length(statuses) > 0) {
        active_ok = false;
        for (size_t i = 0; i < json_object_array_length(statuses); i++) {
            const char *st = json_object_get_string(json_object_array_get_idx(statuses, i));
            bool known = false;
            for (size_t k = 0; k < sizeof STATUSES / sizeof STATUSES[0]; k++)
                known |= st && strcmp(st, STATUSES[k]) == 0;
            if (!known) {
                rc = 400;
                api_reply_error(x, 400, "Invalid validator status: %s", st ? st : "");
                break;
            }
            if (strcmp(st, "active_ongoing") == 0 || strcmp(st, "active") == 0)
                active_ok = true;
        }
    }
    if (!rc) {
        bm_str_t s = BM_STR_INIT;
        bm_str_putc(&s, '{');
        meta(&s, x, sid);
        bm_str_puts(&s, ",\"data\":[");
        uint32_t nv = bs_chain_config(x->c)->validators;
        bool first = true;
        if (active_ok && ids && json_object_array_length(ids) > 0) {
            for (size_t i = 0; i < json_object_array_length(ids) && !rc; i++) {
                const char *id = json_object_get_string(json_object_array_get_idx(ids, i));
                int64_t v = id ? validator_id(x, id) : -2;
                if (v == -2) {
                    rc = 400;
                    bm_str_dispose(&s);
                    api_reply_error(x, 400, "Invalid validator ID: %s", id ? id : "");
                    break;
                }
                if (v < 0)
                    continue;
                if (!first)
                    bm_str_putc(&s, ',');
                first = false;
                validator_json(&s, x, (uint32_t)v, balances);
            }
        } else if (active_ok) {
            for (uint32_t v = 0; v < nv; v++) {
                if (!first)
                    bm_str_putc(&s, ',');
                first = false;
                validator_json(&s, x, v, balances);
            }
        }
        if (!rc) {
            bm_str_puts(&s, "]}");
            api_reply_str(x, 200, &s, NULL);
        }
    }
    json_object_put(ids);
    json_object_put(statuses);
    json_object_put(body);
}

static void h_validators(ctx_t *x)
{
    validators_common(x, false);
}

static void h_balances(ctx_t *x)
{
    validators_common(x, true);
}

static void h_validator(ctx_t *x)
{
    bs_block_id_t sid;
    if (!state_id(x, &sid))
        return;
    int64_t v = validator_id(x, x->param[1]);
    if (v == -2) {
        api_reply_error(x, 400, "Invalid validator ID: %s", x->param[1]);
        return;
    }
    if (v < 0) {
        api_reply_error(x, 404, "Validator not found: %s", x->param[1]);
        return;
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_putc(&s, '{');
    meta(&s, x, sid);
    bm_str_puts(&s, ",\"data\":");
    validator_json(&s, x, (uint32_t)v, false);
    bm_str_putc(&s, '}');
    api_reply_str(x, 200, &s, NULL);
}

static void h_events(ctx_t *x)
{
    x->status = 200;
    bs_events_open(x->sn, x->req);
}
