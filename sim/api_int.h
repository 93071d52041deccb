/* SPDX-License-Identifier: MIT */
/*
 * api_int: what the api modules (api.c: routing, content negotiation, node/config/beacon
 * reads; api_val.c: validator reads, duties and block production; api_post.c: pools,
 * publishing, subscriptions) share. Internal to the sim.
 */
#ifndef BS_API_INT_H
#define BS_API_INT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "blocks.h"
#include "sim.h"

enum {
    R_SSZ_RESP = 1, /* can answer SSZ */
    R_SSZ_REQ = 2,  /* accepts SSZ bodies */
    R_REC = 4,      /* recorded as a submission */
    R_SYNC503 = 8,  /* 503 while syncing */
    R_OPT503 = 16,  /* 503 while optimistic */
    R_SSE = 32,     /* an event stream: answers text/event-stream whatever Accept says */
};

typedef struct ctx {
    bs_simnode_t *sn;
    bs_node_t *n;
    bs_sim_t *sim;
    bs_chain_t *c;
    bm_req_t *req;
    int route;
    unsigned flags;
    const char *param[3]; /* path parameters, NUL-terminated copies */
    char parambuf[3][256];
    const char *query;
    size_t qlen;
    uint64_t now;      /* wall ms */
    uint64_t slot_now; /* the node's current slot */
    bool want_ssz;
    int status; /* status answered (for the submission record) */
} ctx_t;

typedef void (*route_fn)(ctx_t *x);

/* replies (each ends the request) */
void api_reply_error(ctx_t *x, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void api_reply_str(ctx_t *x, int status, bm_str_t *json, const bm_hdrs_t *h);
void api_reply_buf(ctx_t *x, int status, bm_buf_t *json, bm_buf_t **gz_cache, const bm_hdrs_t *h);
void api_reply_ssz(ctx_t *x, bm_str_t *ssz, const bm_hdrs_t *h);
void api_reply_ssz_buf(ctx_t *x, bm_buf_t *ssz, const bm_hdrs_t *h);
void api_reply_empty(ctx_t *x, int status);

/* faults (api_faults.c): a 429 with the node's Retry-After; what a pruned node lost */
void api_reply_throttled(ctx_t *x);
const char *api_pruned(ctx_t *x, const char *path, size_t plen);

/* query parameters: first value of `name` into out; false when absent */
bool api_query(ctx_t *x, const char *name, char *out, size_t outlen);
/* strict unsigned decimal */
bool api_parse_u64(const char *s, uint64_t *out);
/* every value of `name` (repeated or comma-separated), as a JSON array of strings */
json_object *api_query_list(ctx_t *x, const char *name);
/* the request body parsed as JSON, or NULL with a 400 already answered */
json_object *api_body_json(ctx_t *x);
/* the request body is SSZ (Content-Type application/octet-stream) */
bool api_body_is_ssz(ctx_t *x);

/* views */
bool api_block_id(ctx_t *x, const char *id, bs_block_id_t *out, bool *not_found);
uint32_t api_block_proposer(bs_chain_t *c, bs_block_id_t id);
const char *api_fork_version(bs_fork_t f);
void api_put_root(bm_str_t *s, const bs_root_t *r);
const char *api_tf(bool b);

/* handlers in api_val.c */
void h_attestation_data(ctx_t *x);
void h_aggregate(ctx_t *x);
void h_sync_contribution(ctx_t *x);
void h_payload_att_data(ctx_t *x);
void h_proposer_duties_v1(ctx_t *x);
void h_proposer_duties_v2(ctx_t *x);
void h_attester_duties(ctx_t *x);
void h_sync_duties(ctx_t *x);
void h_ptc_duties(ctx_t *x);
void h_liveness(ctx_t *x);
void h_produce_v3(ctx_t *x);
void h_produce_v4(ctx_t *x);
void h_produce_v2(ctx_t *x);
void h_produce_blinded_v1(ctx_t *x);
void h_envelope_stateful(ctx_t *x);
void api_val_cache_free(void *cache);
/* true when this node produced (v4, include_payload=false) the envelope of block_root */
bool api_val_has_envelope(ctx_t *x, const bs_root_t *block_root);

/* handlers in api_post.c */
void h_publish_block(ctx_t *x);
void h_publish_blinded(ctx_t *x);
void h_publish_block_v1(ctx_t *x);
void h_publish_blinded_v1(ctx_t *x);
void h_publish_envelope(ctx_t *x);
void h_pool_attestations(ctx_t *x);
void h_pool_sync(ctx_t *x);
void h_pool_payload_att(ctx_t *x);
void h_pool_single(ctx_t *x);
void h_pool_bls(ctx_t *x);
void h_aggregate_and_proofs(ctx_t *x);
void h_contribution_and_proofs(ctx_t *x);
void h_committee_subs(ctx_t *x);
void h_sync_subs(ctx_t *x);
void h_prepare_proposer(ctx_t *x);
void h_register_validator(ctx_t *x);
void h_proposer_preferences(ctx_t *x);
void h_selections(ctx_t *x);

#endif /* BS_API_INT_H */
