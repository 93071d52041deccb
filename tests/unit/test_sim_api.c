/* SPDX-License-Identifier: MIT */
/*
 * test_sim_api: every endpoint a simulated node serves, over real HTTP on loopback, with
 * its answer checked against the field names and types of the spec YAML (the shapes below
 * are transcribed from apis/ and types/ of beacon-APIs), plus the negotiation rules (SSZ,
 * 406, 415, gzip), the error shapes (404, 405, 400 IndexedErrorMessage, 500 of
 * error-rate) and the behaviours that change answers (syncing, optimistic). The sim and
 * the tiny client share one loop; every wait is bounded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>
#include <zlib.h>

#include <cmocka.h>

#include "loop_guard.h"
#include "sim.h"
#include "test_sim_shape.h"

/* ---- a minimal HTTP/1.1 client on the test's loop -------------------------------------- */

typedef struct client {
    uv_tcp_t tcp;
    uv_connect_t conn;
    uv_write_t wr;
    uv_timer_t timer;
    bm_str_t out, in;
    int open_handles;
    bool finished;
    bool timed_out;
} client_t;

typedef struct resp {
    int status;
    char head[4096];
    bm_str_t body;
} resp_t;

static void cl_closed(uv_handle_t *h)
{
    client_t *c = h->data;
    c->open_handles--;
}

static void cl_finish(client_t *c)
{
    if (c->finished)
        return;
    c->finished = true;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->tcp, cl_closed);
    uv_close((uv_handle_t *)&c->timer, cl_closed);
}

static void cl_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)h;
    static char buf[65536];
    (void)sz;
    *b = uv_buf_init(buf, sizeof buf);
}

static void cl_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    client_t *c = s->data;
    if (n > 0)
        bm_str_append(&c->in, b->base, (size_t)n);
    else if (n < 0)
        cl_finish(c);
}

static void cl_written(uv_write_t *w, int st)
{
    client_t *c = w->data;
    if (st)
        cl_finish(c);
}

static void cl_connected(uv_connect_t *r, int st)
{
    client_t *c = r->data;
    if (st) {
        cl_finish(c);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)bm_str_data(&c->out), (unsigned)bm_str_len(&c->out));
    c->wr.data = c;
    uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, cl_written);
    uv_read_start((uv_stream_t *)&c->tcp, cl_alloc, cl_read);
}

static void cl_timeout(uv_timer_t *t)
{
    client_t *c = t->data;
    c->timed_out = true;
    cl_finish(c);
}

static void dechunk(const char *p, size_t n, bm_str_t *out)
{
    size_t i = 0;
    while (i < n) {
        size_t len = strtoul(p + i, NULL, 16);
        const char *nl = memchr(p + i, '\n', n - i);
        if (!nl || len == 0)
            return;
        i = (size_t)(nl - p) + 1;
        if (i + len > n)
            len = n - i;
        bm_str_append(out, p + i, len);
        i += len + 2;
    }
}

/* Sends one request (Connection: close) and runs the loop until the answer is complete. */
static void http(uv_loop_t *loop, int port, const char *method, const char *target,
                 const char *hdrs, const char *body, size_t blen, resp_t *r)
{
    client_t c;
    memset(&c, 0, sizeof c);
    memset(r, 0, sizeof *r);
    bm_str_printf(&c.out, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s", method, target,
                  hdrs ? hdrs : "");
    if (body)
        bm_str_printf(&c.out, "Content-Length: %zu\r\n", blen);
    bm_str_puts(&c.out, "\r\n");
    if (body)
        bm_str_append(&c.out, body, blen);
    uv_tcp_init(loop, &c.tcp);
    uv_timer_init(loop, &c.timer);
    c.tcp.data = c.timer.data = c.conn.data = &c;
    c.open_handles = 2;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    uv_tcp_connect(&c.conn, &c.tcp, (const struct sockaddr *)&a, cl_connected);
    uv_timer_start(&c.timer, cl_timeout, 5000, 0);
    RUN_UNTIL(loop, c.open_handles == 0, 10000); /* the client's own timeout comes first */
    assert_int_equal(c.open_handles, 0);
    assert_false(c.timed_out);
    const char *in = bm_str_data(&c.in);
    size_t n = bm_str_len(&c.in);
    const char *end = strstr(in, "\r\n\r\n");
    assert_non_null(end);
    size_t hl = (size_t)(end - in);
    memcpy(r->head, in, hl < sizeof r->head - 1 ? hl : sizeof r->head - 1);
    r->status = atoi(in + 9);
    const char *b = end + 4;
    size_t bl = n - (size_t)(b - in);
    /* (bm_str_append of 0 bytes to an empty builder trips a NULL check in buf.c) */
    bm_str_reserve(&r->body, 1);
    if (strcasestr(r->head, "transfer-encoding: chunked"))
        dechunk(b, bl, &r->body);
    else if (bl)
        bm_str_append(&r->body, b, bl);
    bm_str_dispose(&c.out);
    bm_str_dispose(&c.in);
}

static const char *body_of(resp_t *r)
{
    return bm_str_data(&r->body);
}

static void shape(resp_t *r, int status, const char *sh, const char *what)
{
    char err[256];
    if (r->status != status)
        fail_msg("%s: status %d, want %d: %.300s", what, r->status, status, body_of(r));
    if (!bs_shape_check_text(body_of(r), bm_str_len(&r->body), sh, err, sizeof err))
        fail_msg("%s: %s in %.400s", what, err, body_of(r));
    bm_str_dispose(&r->body);
}

/* ---- shapes transcribed from the spec YAML ---------------------------------------------- */

#define ERR "{code:n,message:s,stacktraces?:[s]}"
#define META "execution_optimistic:b,finalized:b"
#define CP "{epoch:u,root:h32}"
#define ATT "{slot:u,index:u,beacon_block_root:h32,source:" CP ",target:" CP "}"
#define HEADER                                                                                     \
    "{root:h32,canonical:b,header:{message:{slot:u,proposer_index:u,parent_root:h32,"              \
    "state_root:h32,body_root:h32},signature:h96}}"
#define PAYLOAD_HEADER_DENEB                                                                       \
    "parent_hash:h32,fee_recipient:h20,state_root:h32,receipts_root:h32,logs_bloom:h256,"          \
    "prev_randao:h32,block_number:u,gas_limit:u,gas_used:u,timestamp:u,extra_data:hx,"             \
    "base_fee_per_gas:u,blob_gas_used:u,excess_blob_gas:u,block_hash:h32,transactions_root:h32,"   \
    "withdrawals_root:h32"
#define FULU_BLINDED_BLOCK                                                                         \
    "{" BLOCK_HEAD "body:{" BODY_COMMON ",execution_payload_header:{" PAYLOAD_HEADER_DENEB         \
    "},blob_kzg_commitments:[h48],execution_requests:" REQUESTS "}}"
#define VALIDATOR                                                                                  \
    "{index:u,balance:u,status:s,validator:{pubkey:h48,withdrawal_credentials:h32,"                \
    "effective_balance:u,slashed:b,activation_eligibility_epoch:u,activation_epoch:u,"             \
    "exit_epoch:u,withdrawable_epoch:u}}"
#define CLIENT_VERSION "{code:s,name:s,version:s,commit:h4}"

/* ---- fixture ------------------------------------------------------------------------------ */

typedef struct fx {
    uv_loop_t loop;
    bs_sim_t *sim;
    int port[3];
    uint64_t slot;
    bool stopped;
} fx_t;

static fx_t F;

static void on_stopped(bs_sim_t *s, void *ud)
{
    (void)s;
    ((fx_t *)ud)->stopped = true;
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof F);
    uv_loop_init(&F.loop);
    bs_sim_cfg_t cfg;
    bs_sim_cfg_default(&cfg);
    cfg.nodes = 3;
    cfg.chain.slot_ms = 10000; /* long slots: nothing moves while the test runs */
    cfg.chain.slots_per_epoch = 4;
    cfg.chain.gloas_epoch = 5;
    /* genesis 21 slots and 500 ms ago: slot 21 (epoch 5, gloas since slot 20); fulu before */
    uint64_t now = bs_sim_now();
    cfg.chain.genesis_ms = now - 21 * 10000 - 500;
    F.slot = 21;
    bs_behav_t b;
    char err[64];
    bs_behav_parse("gzip,client=teku", &b, err, sizeof err);
    bs_behav_merge(&cfg.behav[1], &b);
    bs_behav_parse("no-ssz", &b, err, sizeof err);
    bs_behav_merge(&cfg.behav[2], &b);
    F.sim = bs_sim_new(&F.loop, &cfg);
    assert_non_null(F.sim);
    assert_int_equal(bs_sim_start(F.sim), 0);
    for (int i = 0; i < 3; i++)
        F.port[i] = F.sim->nodes[i].port;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bs_sim_stop(F.sim, on_stopped, &F);
    RUN_UNTIL(&F.loop, F.stopped, 5000);
    assert_true(F.stopped);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    bs_sim_free(F.sim);
    assert_int_equal(uv_loop_close(&F.loop), 0);
    return 0;
}

static void get(int node, const char *target, resp_t *r)
{
    http(&F.loop, F.port[node], "GET", target, NULL, NULL, 0, r);
}

static void post(int node, const char *target, const char *hdrs, const char *body, resp_t *r)
{
    http(&F.loop, F.port[node], "POST", target, hdrs, body, strlen(body), r);
}

static void test_config_and_node(void **state)
{
    (void)state;
    resp_t r;
    get(0, "/eth/v1/beacon/genesis", &r);
    shape(&r, 200, "{data:{genesis_time:u,genesis_validators_root:h32,genesis_fork_version:h4}}",
          "genesis");
    get(0, "/eth/v1/config/fork_schedule", &r);
    assert_non_null(strstr(body_of(&r), "\"current_version\":\"0x80000000\",\"epoch\":\"5\""));
    shape(&r, 200, "{data:[{previous_version:h4,current_version:h4,epoch:u}]}", "fork_schedule");
    get(0, "/eth/v1/config/deposit_contract", &r);
    shape(&r, 200, "{data:{chain_id:u,address:h20}}", "deposit_contract");
    get(0, "/eth/v1/node/version", &r);
    assert_non_null(strstr(body_of(&r), "Lighthouse/"));
    shape(&r, 200, "{data:{version:s}}", "version");
    get(0, "/eth/v2/node/version", &r);
    shape(&r, 200, "{data:{beacon_node:" CLIENT_VERSION ",execution_client?:" CLIENT_VERSION "}}",
          "version v2");
    get(0, "/eth/v1/node/syncing", &r);
    shape(&r, 200, "{data:{head_slot:u,sync_distance:u,is_syncing:b,is_optimistic:b,el_offline:b}}",
          "syncing");
    get(0, "/eth/v1/node/health", &r);
    assert_int_equal(r.status, 200);
    bm_str_dispose(&r.body);
    get(0, "/eth/v1/node/identity", &r);
    shape(&r, 200,
          "{data:{peer_id:s,enr:s,p2p_addresses:[s],discovery_addresses:[s],metadata:"
          "{seq_number:u,attnets:hx,syncnets?:hx,custody_group_count?:u}}}",
          "identity");
    get(0, "/eth/v1/node/peer_count", &r);
    shape(&r, 200, "{data:{disconnected:u,connecting:u,connected:u,disconnecting:u}}",
          "peer_count");
    get(0, "/eth/v1/node/peers", &r);
    shape(&r, 200, "{data:[*],meta:{count:n}}", "peers");
    /* spec: every value a string, the slot and due-time constants present */
    get(0, "/eth/v1/config/spec", &r);
    assert_int_equal(r.status, 200);
    json_object *o = json_tokener_parse(body_of(&r)), *d;
    assert_true(json_object_object_get_ex(o, "data", &d));
    const char *need[] = {"SECONDS_PER_SLOT",
                          "SLOT_DURATION_MS",
                          "SLOTS_PER_EPOCH",
                          "ATTESTATION_DUE_BPS",
                          "AGGREGATE_DUE_BPS",
                          "ATTESTATION_DUE_BPS_GLOAS",
                          "GLOAS_FORK_EPOCH",
                          "FULU_FORK_VERSION",
                          "DOMAIN_BEACON_ATTESTER",
                          "PAYLOAD_ATTESTATION_DUE_BPS",
                          "CONFIG_NAME"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        json_object *v;
        if (!json_object_object_get_ex(d, need[i], &v))
            fail_msg("spec lacks %s", need[i]);
    }
    json_object_object_foreach(d, k, v)
    {
        if (!json_object_is_type(v, json_type_string))
            fail_msg("spec %s is not a string", k);
    }
    json_object_put(o);
    bm_str_dispose(&r.body);
    /* teku's spec differs a little, as real clients' do */
    get(1, "/eth/v1/config/spec", &r);
    assert_int_equal(r.status, 200);
    assert_null(strstr(body_of(&r), "CONFIG_NAME"));
    assert_non_null(strstr(body_of(&r), "PROPOSER_SCORE_BOOST"));
    bm_str_dispose(&r.body);
}

static void test_beacon_reads(void **state)
{
    (void)state;
    resp_t r;
    char t[256];
    get(0, "/eth/v1/beacon/headers", &r);
    shape(&r, 200, "{" META ",data:[" HEADER "]}", "headers");
    get(0, "/eth/v1/beacon/headers/head", &r);
    shape(&r, 200, "{" META ",data:" HEADER "}", "header head");
    get(0, "/eth/v1/beacon/headers?slot=10", &r);
    shape(&r, 200, "{" META ",data:[" HEADER "]}", "headers by slot");
    get(0, "/eth/v1/beacon/blocks/head/root", &r);
    assert_int_equal(r.status, 200);
    json_object *o = json_tokener_parse(body_of(&r)), *d, *root;
    json_object_object_get_ex(o, "data", &d);
    json_object_object_get_ex(d, "root", &root);
    char head_root[80];
    snprintf(head_root, sizeof head_root, "%s", json_object_get_string(root));
    json_object_put(o);
    shape(&r, 200, "{" META ",data:{root:h32}}", "block root");
    snprintf(t, sizeof t, "/eth/v1/beacon/headers/%s", head_root);
    get(0, t, &r);
    shape(&r, 200, "{" META ",data:" HEADER "}", "header by root");
    get(0,
        "/eth/v1/beacon/headers/0x1111111111111111111111111111111111111111111111111111111111111111",
        &r);
    shape(&r, 404, ERR, "unknown root");
    get(0, "/eth/v1/beacon/headers/nonsense", &r);
    shape(&r, 400, ERR, "bad block id");
    get(0, "/eth/v2/beacon/blocks/head", &r);
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Version: gloas"));
    shape(&r, 200, "{version:s," META ",data:{message:" GLOAS_BLOCK ",signature:h96}}", "block");
    get(0, "/eth/v2/beacon/blocks/12", &r);
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Version: fulu"));
    shape(&r, 200, "{version:s," META ",data:{message:" FULU_BLOCK ",signature:h96}}",
          "fulu block");
    get(0, "/eth/v1/beacon/execution_payload_envelopes/18", &r);
    shape(&r, 404, ERR, "no envelope before gloas");
    get(0, "/eth/v2/beacon/blocks/finalized", &r);
    shape(&r, 200, "{version:s," META ",data:{message:" FULU_BLOCK ",signature:h96}}",
          "finalized block");
    get(0, "/eth/v1/beacon/execution_payload_envelopes/20", &r);
    shape(&r, 200, "{version:s," META ",data:{message:" ENVELOPE ",signature:h96}}",
          "signed envelope");
    get(0, "/eth/v1/beacon/states/head/root", &r);
    shape(&r, 200, "{" META ",data:{root:h32}}", "state root");
    get(0, "/eth/v1/beacon/states/head/fork", &r);
    shape(&r, 200, "{" META ",data:{previous_version:h4,current_version:h4,epoch:u}}", "fork");
    get(0, "/eth/v1/beacon/states/head/finality_checkpoints", &r);
    assert_non_null(strstr(body_of(&r), "\"finalized\":{\"epoch\":\"3\""));
    shape(&r, 200,
          "{" META ",data:{previous_justified:" CP ",current_justified:" CP ",finalized:" CP "}}",
          "finality");
    get(0, "/eth/v1/beacon/states/head/validators?id=1,2&id=3", &r);
    o = json_tokener_parse(body_of(&r));
    json_object_object_get_ex(o, "data", &d);
    assert_int_equal(json_object_array_length(d), 3);
    json_object_put(o);
    shape(&r, 200, "{" META ",data:[" VALIDATOR "]}", "validators");
    post(0, "/eth/v1/beacon/states/head/validators", NULL,
         "{\"ids\":[\"0\",\"63\",\"64\"],\"statuses\":[\"active_ongoing\"]}", &r);
    o = json_tokener_parse(body_of(&r));
    json_object_object_get_ex(o, "data", &d);
    assert_int_equal(json_object_array_length(d), 2);
    json_object_put(o);
    shape(&r, 200, "{" META ",data:[" VALIDATOR "]}", "validators POST");
    post(0, "/eth/v1/beacon/states/head/validators", NULL, "{\"statuses\":[\"bogus\"]}", &r);
    shape(&r, 400, ERR, "bad status");
    get(0, "/eth/v1/beacon/states/head/validators/5", &r);
    shape(&r, 200, "{" META ",data:" VALIDATOR "}", "validator");
    get(0, "/eth/v1/beacon/states/head/validators/99", &r);
    shape(&r, 404, ERR, "unknown validator");
    get(0, "/eth/v1/beacon/states/head/validator_balances?id=1", &r);
    shape(&r, 200, "{" META ",data:[{index:u,balance:u}]}", "balances");
}

static void test_validator_reads(void **state)
{
    (void)state;
    resp_t r;
    char t[512];
    uint64_t slot = bs_chain_slot_at(F.sim->chain, bs_sim_now());
    snprintf(t, sizeof t, "/eth/v1/validator/attestation_data?slot=%llu", (unsigned long long)slot);
    get(0, t, &r);
    shape(&r, 200, "{data:" ATT "}", "attestation_data");
    /* SSZ: 128 bytes */
    http(&F.loop, F.port[0], "GET", t,
         "Accept: application/octet-stream;q=1.0,application/json;q=0.9\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "Content-Type: application/octet-stream"));
    assert_int_equal(bm_str_len(&r.body), 128);
    bm_str_dispose(&r.body);
    /* no-ssz node: 415 for an SSZ request */
    http(&F.loop, F.port[2], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    shape(&r, 415, ERR, "no-ssz");
    /* SSZ only, on a JSON-only endpoint: 406 */
    http(&F.loop, F.port[0], "GET", "/eth/v1/node/syncing", "Accept: application/octet-stream\r\n",
         NULL, 0, &r);
    shape(&r, 406, ERR, "406");
    /* gzip node */
    http(&F.loop, F.port[1], "GET", t, "Accept-Encoding: gzip\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "Content-Encoding: gzip"));
    char plain[4096];
    uLongf plen = sizeof plain;
    z_stream z;
    memset(&z, 0, sizeof z);
    inflateInit2(&z, 15 + 16);
    z.next_in = (Bytef *)bm_str_data(&r.body);
    z.avail_in = (uInt)bm_str_len(&r.body);
    z.next_out = (Bytef *)plain;
    z.avail_out = (uInt)plen;
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    plen = z.total_out;
    inflateEnd(&z);
    char err[256];
    assert_true(bs_shape_check_text(plain, plen, "{data:" ATT "}", err, sizeof err));
    bm_str_dispose(&r.body);
    /* the aggregate for the data root of that attestation data */
    bs_att_data_t ad;
    bs_node_attestation_data(&F.sim->nodes[0].node, slot, &ad);
    bs_root_t dr = bs_att_data_root(&ad);
    char hx[67];
    bs_root_hex(&dr, hx);
    snprintf(t, sizeof t,
             "/eth/v2/validator/aggregate_attestation?attestation_data_root=%s&slot=%llu&"
             "committee_index=0",
             hx, (unsigned long long)slot);
    get(0, t, &r);
    shape(&r, 200,
          "{version:s,data:{aggregation_bits:hx,data:" ATT ",signature:h96,"
          "committee_bits:h8}}",
          "aggregate");
    http(&F.loop, F.port[0], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_true(bm_str_len(&r.body) > 236);
    bm_str_dispose(&r.body);
    snprintf(t, sizeof t,
             "/eth/v2/validator/aggregate_attestation?attestation_data_root=0x%064d&slot=%llu&"
             "committee_index=0",
             0, (unsigned long long)slot);
    get(0, t, &r);
    shape(&r, 404, ERR, "unknown aggregate");
    bs_root_hex(&ad.beacon_block_root, hx);
    snprintf(t, sizeof t,
             "/eth/v1/validator/sync_committee_contribution?slot=%llu&subcommittee_index=1&"
             "beacon_block_root=%s",
             (unsigned long long)slot, hx);
    get(0, t, &r);
    shape(&r, 200,
          "{data:{slot:u,beacon_block_root:h32,subcommittee_index:u,"
          "aggregation_bits:h16,signature:h96}}",
          "contribution");
    get(0, "/eth/v1/validator/duties/proposer/5", &r);
    shape(&r, 200,
          "{dependent_root:h32,execution_optimistic:b,data:[{pubkey:h48,"
          "validator_index:u,slot:u}]}",
          "proposer v1");
    get(0, "/eth/v2/validator/duties/proposer/6", &r);
    shape(&r, 200,
          "{dependent_root:h32,execution_optimistic:b,data:[{pubkey:h48,"
          "validator_index:u,slot:u}]}",
          "proposer v2");
    get(0, "/eth/v2/validator/duties/proposer/9", &r);
    shape(&r, 400, ERR, "proposer duties too far ahead");
    post(0, "/eth/v1/validator/duties/attester/6", NULL, "[\"1\",\"2\",\"3\"]", &r);
    shape(&r, 200,
          "{dependent_root:h32,execution_optimistic:b,data:[{pubkey:h48,"
          "validator_index:u,committee_index:u,committee_length:u,"
          "committees_at_slot:u,validator_committee_index:u,slot:u}]}",
          "attester");
    post(0, "/eth/v1/validator/duties/attester/6", NULL, "[1]", &r);
    shape(&r, 400, ERR, "attester duties bad body");
    post(0, "/eth/v1/validator/duties/sync/5", NULL, "[\"1\",\"2\",\"3\",\"4\",\"5\"]", &r);
    shape(&r, 200,
          "{execution_optimistic:b,data:[{pubkey:h48,validator_index:u,"
          "validator_sync_committee_indices:[u]}]}",
          "sync duties");
    char all[1024] = "[";
    for (int v = 0; v < 64; v++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s\"%d\"", v ? "," : "", v);
    strcat(all, "]");
    post(0, "/eth/v1/validator/duties/ptc/6", NULL, all, &r);
    assert_non_null(strstr(body_of(&r), "validator_index"));
    shape(&r, 200,
          "{dependent_root:h32,execution_optimistic:b,data:[{pubkey:h48,"
          "validator_index:u,slot:u}]}",
          "ptc duties");
    post(0, "/eth/v1/validator/liveness/5", NULL, "[\"1\"]", &r);
    shape(&r, 200, "{data:[{index:u,is_live:b}]}", "liveness");
}

static void test_production(void **state)
{
    (void)state;
    resp_t r;
    char t[512], rv[200] = "0x";
    for (int i = 0; i < 96; i++)
        strcat(rv, i ? "00" : "c0");
    snprintf(t, sizeof t, "/eth/v3/validator/blocks/19?randao_reveal=%s&builder_boost_factor=100",
             rv);
    get(0, t, &r);
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Version: fulu"));
    assert_non_null(strcasestr(r.head, "Eth-Execution-Payload-Blinded: false"));
    assert_non_null(strcasestr(r.head, "Eth-Execution-Payload-Value: "));
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Block-Value: "));
    shape(&r, 200,
          "{version:s,execution_payload_blinded:b,execution_payload_value:u,"
          "consensus_block_value:u,data:{block:" FULU_BLOCK ",kzg_proofs:[h48],"
          "blobs:[hx]}}",
          "produce v3");
    http(&F.loop, F.port[0], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    const uint8_t *p = (const uint8_t *)bm_str_data(&r.body);
    assert_int_equal(p[0], 12);  /* BlockContents: first offset 12 */
    assert_int_equal(p[12], 19); /* slot */
    bm_str_dispose(&r.body);
    snprintf(t, sizeof t, "/eth/v3/validator/blocks/19?randao_reveal=0x12");
    get(0, t, &r);
    shape(&r, 400, ERR, "bad randao");
    /* the legacy forms: v2 a full block (JSON or SSZ BlockContents), v1 a blinded one */
    snprintf(t, sizeof t, "/eth/v2/validator/blocks/19?randao_reveal=%s", rv);
    get(0, t, &r);
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Version: fulu"));
    shape(&r, 200, "{version:s,data:{block:" FULU_BLOCK ",kzg_proofs:[h48],blobs:[hx]}}",
          "produce v2");
    http(&F.loop, F.port[0], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    p = (const uint8_t *)bm_str_data(&r.body);
    assert_int_equal(p[0], 12); /* BlockContents */
    assert_int_equal(p[12], 19);
    bm_str_dispose(&r.body);
    snprintf(t, sizeof t, "/eth/v1/validator/blinded_blocks/19?randao_reveal=%s", rv);
    get(0, t, &r);
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Version: fulu"));
    shape(&r, 200, "{version:s,data:" FULU_BLINDED_BLOCK "}", "produce blinded v1");
    uint64_t slot = bs_chain_slot_at(F.sim->chain, bs_sim_now()) + 1;
    snprintf(t, sizeof t, "/eth/v4/validator/blocks/%llu?randao_reveal=%s&include_payload=true",
             (unsigned long long)slot, rv);
    get(0, t, &r);
    assert_non_null(strcasestr(r.head, "Eth-Execution-Payload-Included: true"));
    assert_non_null(strcasestr(r.head, "Eth-Consensus-Block-Value: "));
    shape(&r, 200,
          "{version:s,consensus_block_value:u,execution_payload_included:b,data:"
          "{block:" GLOAS_BLOCK ",execution_payload_envelope:" ENVELOPE
          ",kzg_proofs:[h48],blobs:[hx]}}",
          "produce v4 included");
    http(&F.loop, F.port[0], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    p = (const uint8_t *)bm_str_data(&r.body);
    assert_int_equal(p[0], 16); /* gloas BlockContents: 4 offsets */
    assert_int_equal(p[16], (uint8_t)slot);
    bm_str_dispose(&r.body);
    /* stateful: produce without the payload, then fetch the envelope from the same node */
    snprintf(t, sizeof t, "/eth/v4/validator/blocks/%llu?randao_reveal=%s&include_payload=false",
             (unsigned long long)slot, rv);
    get(0, t, &r);
    shape(&r, 200,
          "{version:s,consensus_block_value:u,execution_payload_included:b,data:" GLOAS_BLOCK "}",
          "produce v4 stateful");
    const char *broot = "0x2222222222222222222222222222222222222222222222222222222222222222";
    snprintf(t, sizeof t, "/eth/v1/validator/execution_payload_envelopes/%llu/%s",
             (unsigned long long)slot, broot);
    get(0, t, &r);
    assert_non_null(strstr(body_of(&r), broot));
    shape(&r, 200, "{version:s,data:" ENVELOPE "}", "stateful envelope");
    get(1, t, &r);
    shape(&r, 404, ERR, "envelope from another node");
    char env[1024];
    snprintf(env, sizeof env,
             "{\"message\":{\"payload\":{},\"execution_requests\":{},\"builder_index\":\"1\","
             "\"beacon_block_root\":\"%s\",\"parent_beacon_block_root\":\"%s\"},"
             "\"signature\":\"0x00\"}",
             broot, broot);
    post(0, "/eth/v1/beacon/execution_payload_envelopes",
         "Eth-Consensus-Version: gloas\r\nEth-Blob-Data-Included: false\r\n", env, &r);
    assert_int_equal(r.status, 200);
    bm_str_dispose(&r.body);
    post(1, "/eth/v1/beacon/execution_payload_envelopes",
         "Eth-Consensus-Version: gloas\r\nEth-Blob-Data-Included: false\r\n", env, &r);
    shape(&r, 400, ERR, "stateful envelope to another node");
    /* payload attestation data: 200 (block seen) or 204 for a slot without a block yet */
    snprintf(t, sizeof t, "/eth/v1/validator/payload_attestation_data?slot=%llu",
             (unsigned long long)slot - 1);
    get(0, t, &r);
    shape(&r, 200,
          "{version:s,data:{beacon_block_root:h32,slot:u,payload_present:b,"
          "blob_data_available:b}}",
          "payload attestation data");
    http(&F.loop, F.port[0], "GET", t, "Accept: application/octet-stream\r\n", NULL, 0, &r);
    assert_int_equal(bm_str_len(&r.body), 42);
    bm_str_dispose(&r.body);
    snprintf(t, sizeof t, "/eth/v1/validator/payload_attestation_data?slot=%llu",
             (unsigned long long)slot + 1);
    get(0, t, &r);
    assert_int_equal(r.status, 204);
    bm_str_dispose(&r.body);
    /* v4 before gloas is refused, as is v3 after it */
    snprintf(t, sizeof t, "/eth/v4/validator/blocks/19?randao_reveal=%s&include_payload=false", rv);
    get(0, t, &r);
    shape(&r, 400, ERR, "v4 before gloas");
    snprintf(t, sizeof t, "/eth/v3/validator/blocks/%llu?randao_reveal=%s",
             (unsigned long long)slot, rv);
    get(0, t, &r);
    shape(&r, 400, ERR, "v3 after gloas");
    snprintf(t, sizeof t, "/eth/v4/validator/blocks/%llu?randao_reveal=%s",
             (unsigned long long)slot, rv);
    get(0, t, &r);
    shape(&r, 400, ERR, "v4 without include_payload");
}

static void test_posts(void **state)
{
    (void)state;
    resp_t r;
    const char *att = "[{\"committee_index\":\"0\",\"attester_index\":\"7\",\"data\":{\"slot\":"
                      "\"21\",\"index\":\"0\",\"beacon_block_root\":\"0x"
                      "1111111111111111111111111111111111111111111111111111111111111111\","
                      "\"source\":{\"epoch\":\"4\",\"root\":\"0x"
                      "1111111111111111111111111111111111111111111111111111111111111111\"},"
                      "\"target\":{\"epoch\":\"5\",\"root\":\"0x"
                      "1111111111111111111111111111111111111111111111111111111111111111\"}},"
                      "\"signature\":\"0x00\"},{\"committee_index\":\"0\"}]";
    post(0, "/eth/v2/beacon/pool/attestations", "Eth-Consensus-Version: fulu\r\n", att, &r);
    shape(&r, 400, "{code:n,message:s,failures:[{index:n,message:s}]}", "indexed error");
    post(0, "/eth/v2/beacon/pool/attestations", NULL, "[]", &r);
    shape(&r, 400, ERR, "missing version");
    /* a good one: recorded, and validator 7 is live in epoch 5 */
    char good[2048];
    snprintf(good, sizeof good, "%.*s]", (int)(strstr(att, ",{\"committee_index\":\"0\"}") - att),
             att);
    post(0, "/eth/v2/beacon/pool/attestations", "Eth-Consensus-Version: fulu\r\n", good, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(bm_str_len(&r.body), 0);
    bm_str_dispose(&r.body);
    post(0, "/eth/v1/validator/liveness/5", NULL, "[\"7\",\"8\"]", &r);
    assert_non_null(strstr(body_of(&r), "{\"index\":\"7\",\"is_live\":true}"));
    assert_non_null(strstr(body_of(&r), "{\"index\":\"8\",\"is_live\":false}"));
    bm_str_dispose(&r.body);
    bs_node_t *n = &F.sim->nodes[0].node;
    assert_true(n->nsubs >= 3);
    assert_string_equal(n->subs[n->nsubs - 1].route, "submitPoolAttestationsV2");
    assert_int_equal(n->subs[n->nsubs - 1].status, 200);
    assert_string_equal(n->subs[n->nsubs - 1].consensus_version, "fulu");
    struct {
        const char *target, *body;
    } ok[] = {
        {"/eth/v1/validator/beacon_committee_subscriptions",
         "[{\"validator_index\":\"1\",\"committee_index\":\"0\",\"committees_at_slot\":\"1\","
         "\"slot\":\"22\",\"is_aggregator\":false}]"},
        {"/eth/v1/validator/sync_committee_subscriptions",
         "[{\"validator_index\":\"1\",\"sync_committee_indices\":[\"0\"],\"until_epoch\":\"9\"}]"},
        {"/eth/v1/validator/prepare_beacon_proposer",
         "[{\"validator_index\":\"1\",\"fee_recipient\":\"0x00\"}]"},
        {"/eth/v1/validator/register_validator", "[{\"message\":{},\"signature\":\"0x00\"}]"},
        {"/eth/v1/validator/contribution_and_proofs", "[{\"message\":{},\"signature\":\"0x\"}]"},
        {"/eth/v1/beacon/pool/sync_committees",
         "[{\"slot\":\"21\",\"beacon_block_root\":\"0x"
         "1111111111111111111111111111111111111111111111111111111111111111\","
         "\"validator_index\":\"3\",\"signature\":\"0x00\"}]"},
        {"/eth/v1/beacon/pool/voluntary_exits", "{\"message\":{},\"signature\":\"0x00\"}"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        post(0, ok[i].target, NULL, ok[i].body, &r);
        if (r.status != 200)
            fail_msg("%s: %d %s", ok[i].target, r.status, body_of(&r));
        bm_str_dispose(&r.body);
    }
    post(0, "/eth/v1/validator/beacon_committee_selections", NULL,
         "[{\"validator_index\":\"1\",\"slot\":\"22\",\"selection_proof\":\"0x"
         "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
         "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
         "000000000000000000\"}]",
         &r);
    shape(&r, 200, "{data:[{validator_index:u,slot:u,selection_proof:h96}]}", "selections");
    post(0, "/eth/v1/validator/prepare_beacon_proposer", NULL, "{not json", &r);
    shape(&r, 400, ERR, "bad json");
    /* publish a block: 200 with a known parent, 202 with an unknown one, 400 malformed */
    char blk[8192];
    bs_root_t pr = bs_chain_root(F.sim->chain, n->head);
    char hx[67];
    bs_root_hex(&pr, hx);
    snprintf(blk, sizeof blk,
             "{\"message\":{\"slot\":\"%llu\",\"proposer_index\":\"1\",\"parent_root\":\"%s\","
             "\"state_root\":\"%s\",\"body\":{}},\"signature\":\"0x00\"}",
             (unsigned long long)n->head.slot + 1, hx, hx);
    post(0, "/eth/v2/beacon/blocks?broadcast_validation=gossip", "Eth-Consensus-Version: gloas\r\n",
         blk, &r);
    assert_int_equal(r.status, 200);
    bm_str_dispose(&r.body);
    char blk2[8192];
    snprintf(blk2, sizeof blk2,
             "{\"message\":{\"slot\":\"%llu\",\"proposer_index\":\"1\",\"parent_root\":\"0x%064d\","
             "\"state_root\":\"%s\",\"body\":{}},\"signature\":\"0x00\"}",
             (unsigned long long)n->head.slot + 1, 7, hx);
    post(0, "/eth/v2/beacon/blocks", "Eth-Consensus-Version: gloas\r\n", blk2, &r);
    assert_int_equal(r.status, 202); /* broadcast, but the parent is unknown here */
    bm_str_dispose(&r.body);
    post(0, "/eth/v2/beacon/blocks", "Eth-Consensus-Version: fulu\r\n", blk, &r);
    shape(&r, 400, ERR, "fork mismatch");
    post(0, "/eth/v2/beacon/blocks", "Eth-Consensus-Version: fulu\r\n", "{\"signed_block\":{}}",
         &r);
    shape(&r, 400, ERR, "bad block");
    post(0, "/eth/v2/beacon/blocks?broadcast_validation=bogus", "Eth-Consensus-Version: gloas\r\n",
         blk, &r);
    shape(&r, 400, ERR, "bad broadcast_validation");
    /* SSZ body to a node that does not take SSZ */
    http(&F.loop, F.port[2], "POST", "/eth/v2/beacon/pool/attestations",
         "Eth-Consensus-Version: fulu\r\nContent-Type: application/octet-stream\r\n", "\0\0\0\0", 4,
         &r);
    shape(&r, 415, ERR, "no-ssz body");
}

static void test_errors_and_behaviours(void **state)
{
    (void)state;
    resp_t r;
    get(0, "/eth/v1/nothing/here", &r);
    shape(&r, 404, ERR, "404");
    post(0, "/eth/v1/node/version", NULL, "{}", &r);
    shape(&r, 405, ERR, "405");
    get(0, "/eth/v1/validator/attestation_data", &r);
    shape(&r, 400, ERR, "missing slot");
    bs_behav_t b;
    char err[64];
    bs_behav_parse("error-rate=1", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    get(0, "/eth/v1/node/version", &r);
    shape(&r, 500, ERR, "error-rate");
    bs_behav_parse("error-rate=0,syncing", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    get(0, "/eth/v1/validator/attestation_data?slot=21", &r);
    shape(&r, 503, ERR, "syncing attestation data");
    get(0, "/eth/v1/node/health", &r);
    assert_int_equal(r.status, 206);
    bm_str_dispose(&r.body);
    get(0, "/eth/v1/node/syncing", &r);
    assert_non_null(strstr(body_of(&r), "\"is_syncing\":true"));
    bm_str_dispose(&r.body);
    bs_behav_parse("syncing=false,optimistic", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    get(0, "/eth/v1/validator/attestation_data?slot=21", &r);
    shape(&r, 503, ERR, "optimistic attestation data");
    get(0, "/eth/v1/beacon/blocks/head/root", &r);
    assert_non_null(strstr(body_of(&r), "\"execution_optimistic\":true"));
    bm_str_dispose(&r.body);
    bs_behav_default(&b);
    bs_sim_set_behav(F.sim, 0, &b, true); /* reset */
    assert_false(F.sim->nodes[0].node.behav.optimistic);
    /* bad-source / bad-target: the same head, a wrong checkpoint */
    get(0, "/eth/v1/validator/attestation_data?slot=21", &r);
    char good[1024];
    snprintf(good, sizeof good, "%s", body_of(&r));
    bm_str_dispose(&r.body);
    bs_behav_parse("bad-source", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    get(0, "/eth/v1/validator/attestation_data?slot=21", &r);
    assert_string_not_equal(body_of(&r), good);
    assert_memory_equal(body_of(&r), good, strstr(good, "\"source\"") - good); /* same head */
    assert_non_null(strstr(body_of(&r), strstr(good, "\"target\"")));          /* same target */
    bm_str_dispose(&r.body);
    bs_behav_parse("bad-source=false,bad-target", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    get(0, "/eth/v1/validator/attestation_data?slot=21", &r);
    assert_null(strstr(body_of(&r), strstr(good, "\"target\"")));
    assert_memory_equal(body_of(&r), good, strstr(good, "\"target\"") - good); /* same source */
    bm_str_dispose(&r.body);
    /* fail-items and dup-items: an indexed error for those items of a pool batch */
    const char *msgs = "[{\"slot\":\"21\",\"beacon_block_root\":\"0x"
                       "1111111111111111111111111111111111111111111111111111111111111111\","
                       "\"validator_index\":\"3\",\"signature\":\"0x00\"},"
                       "{\"slot\":\"21\",\"beacon_block_root\":\"0x"
                       "1111111111111111111111111111111111111111111111111111111111111111\","
                       "\"validator_index\":\"4\",\"signature\":\"0x00\"}]";
    bs_behav_parse("bad-target=false,fail-items=1", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    post(0, "/eth/v1/beacon/pool/sync_committees", NULL, msgs, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(body_of(&r), "\"failures\":[{\"index\":1,"));
    shape(&r, 400, "{code:n,message:s,failures:[{index:n,message:s}]}", "fail-items");
    bs_behav_parse("fail-items=,dup-items=0+1", &b, err, sizeof err);
    bs_sim_set_behav(F.sim, 0, &b, false);
    post(0, "/eth/v1/beacon/pool/sync_committees", NULL, msgs, &r);
    assert_int_equal(r.status, 500); /* only duplicates: as Lodestar */
    assert_non_null(strstr(body_of(&r), "PublishError.Duplicate"));
    shape(&r, 500, "{code:n,message:s,failures:[{index:n,message:s}]}", "dup-items");
    bs_behav_default(&b);
    bs_sim_set_behav(F.sim, 0, &b, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_and_node), cmocka_unit_test(test_beacon_reads),
        cmocka_unit_test(test_validator_reads), cmocka_unit_test(test_production),
        cmocka_unit_test(test_posts),           cmocka_unit_test(test_errors_and_behaviours),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
