/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the duty-body readers of the fresh-head policies:
 * bm_produce_parse_form (a produced block of v3, v4, legacy v2 or legacy blinded v1, JSON or
 * SSZ, with its value headers), bm_attest_parse_data (with its checkpoints),
 * bm_attest_parse_payload and bm_attest_parse_root; and the indexed-error merge of a batch
 * write (bm_indexed_add / bm_indexed_answer) on the same body.
 *
 * The first two bytes select the response headers: Content-Type (JSON, SSZ, none), the
 * fork, whether Eth-Execution-Payload-Blinded / -Included are present and their values,
 * the production form (v3, v4, v2, blinded v1), and whether the value headers are present
 * (their text comes from the body's first bytes, so malformed values are explored too).
 * The rest is the body.
 *
 * Properties: every reader gives the same result (every field of it) twice; the same body
 * delivered in two pieces and reassembled (as an upstream transfer delivers it) reads the
 * same; and what a reader returns is consistent with the bytes: an SSZ block's parent and
 * slot are those bm_ssz_block_info finds, an SSZ AttestationData is exactly 128 bytes, a
 * 42-byte PayloadAttestationData has boolean bytes. The indexed merge of the body as one
 * node's answer answers 200 or a 400 whose body is JSON, and 200 whenever another node
 * answered a 2xx (which takes every item).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "base/json.h"
#include "base/ssz.h"
#include "duties/attest.h"
#include "duties/indexed.h"
#include "duties/produce.h"

static const char *const forks[] = {"phase0", "altair",  "bellatrix", "capella",
                                    "deneb",  "electra", "fulu",      "gloas"};

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if (!(x))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

/* Results are compared field by field: the padding between fields holds no result, and a
 * reader need not write it (memcmp of whole structs would compare garbage). */
static bool same_u256(const bm_u256_t *a, const bm_u256_t *b)
{
    return memcmp(a->w, b->w, sizeof a->w) == 0;
}

static bool same_block(const bm_produce_block_t *a, const bm_produce_block_t *b)
{
    return a->slot == b->slot && memcmp(a->parent_root, b->parent_root, 32) == 0 &&
           a->has_state_root == b->has_state_root &&
           memcmp(a->state_root, b->state_root, 32) == 0 && a->blinded == b->blinded &&
           a->has_value == b->has_value && same_u256(&a->consensus, &b->consensus) &&
           same_u256(&a->execution, &b->execution);
}

static bool same_checkpoint(const bm_checkpoint_t *a, const bm_checkpoint_t *b)
{
    return a->epoch == b->epoch && memcmp(a->root, b->root, 32) == 0;
}

static bool same_data(const bm_attest_data_t *a, const bm_attest_data_t *b)
{
    return a->slot == b->slot && a->index == b->index &&
           memcmp(a->beacon_block_root, b->beacon_block_root, 32) == 0 &&
           same_checkpoint(&a->checkpoints.source, &b->checkpoints.source) &&
           same_checkpoint(&a->checkpoints.target, &b->checkpoints.target);
}

static bool same_payload(const bm_attest_payload_t *a, const bm_attest_payload_t *b)
{
    return memcmp(a->beacon_block_root, b->beacon_block_root, 32) == 0 && a->slot == b->slot &&
           a->payload_present == b->payload_present &&
           a->blob_data_available == b->blob_data_available;
}

static void read_all(const bm_hdrs_t *h, const bm_buf_t *b, bm_produce_form_t form, int *rc,
                     bm_produce_block_t *blk, bm_attest_data_t *d, bm_attest_payload_t *p,
                     uint8_t root[32])
{
    memset(blk, 0, sizeof *blk);
    memset(d, 0, sizeof *d);
    memset(p, 0, sizeof *p);
    memset(root, 0, 32);
    rc[0] = bm_produce_parse_form(h, b, form, blk);
    rc[1] = bm_attest_parse_data(h, b, d);
    rc[2] = bm_attest_parse_payload(h, b, p);
    rc[3] = bm_attest_parse_root(b, root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t s0 = data[0], s1 = data[1];
    const uint8_t *body = data + 2;
    size_t len = size - 2;
    /* v3, v4, legacy v2, legacy blinded v1 */
    bm_produce_form_t form = (bm_produce_form_t)((s0 & 1) | ((s0 >> 6) & 2));
    bool v4 = form == BM_PRODUCE_FORM_V4;
    int ctype = (s0 >> 1) % 3; /* 0 JSON, 1 SSZ, 2 none */
    const char *fork = forks[(s0 >> 3) & 7];

    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (ctype == 0)
        bm_hdrs_add_z(&h, "Content-Type", "application/json");
    else if (ctype == 1)
        bm_hdrs_add_z(&h, "Content-Type", "application/octet-stream");
    if (s0 & 0x40)
        bm_hdrs_add_z(&h, "Eth-Consensus-Version", fork);
    if (s1 & 1)
        bm_hdrs_add_z(&h, "Eth-Execution-Payload-Blinded", (s1 & 2) ? "true" : "false");
    if (s1 & 4)
        bm_hdrs_add_z(&h, "Eth-Execution-Payload-Included", (s1 & 8) ? "true" : "false");
    if (s1 & 0x30) {
        /* value headers from the body's first bytes (printable or not) */
        size_t vlen = len < 24 ? len : 24;
        char v[25];
        memcpy(v, body, vlen);
        v[vlen] = '\0';
        for (size_t i = 0; i < vlen; i++)
            if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
                v[i] = '0';
        if (s1 & 0x10)
            bm_hdrs_add_z(&h, "Eth-Consensus-Block-Value", v);
        if (s1 & 0x20)
            bm_hdrs_add_z(&h, "Eth-Execution-Payload-Value", v);
    }

    bm_buf_t *b = bm_buf_copy(body, len);
    if (!b)
        abort();
    /* the same body assembled from two pieces, split where the selector says */
    size_t cut = len ? (size_t)(s1 >> 6) * len / 4 : 0;
    bm_str_t s = BM_STR_INIT;
    bm_str_append(&s, body, cut);
    bm_str_append(&s, body + cut, len - cut);
    bm_buf_t *b2 = bm_str_finish(&s);
    if (!b2)
        b2 = bm_buf_copy("", 0);
    if (!b2)
        abort();

    int r1[4], r2[4], r3[4];
    bm_produce_block_t k1, k2, k3;
    bm_attest_data_t d1, d2, d3;
    bm_attest_payload_t p1, p2, p3;
    uint8_t o1[32], o2[32], o3[32];
    read_all(&h, b, form, r1, &k1, &d1, &p1, o1);
    read_all(&h, b, form, r2, &k2, &d2, &p2, o2);
    read_all(&h, b2, form, r3, &k3, &d3, &p3, o3);
    CHECK(memcmp(r1, r2, sizeof r1) == 0 && memcmp(r1, r3, sizeof r1) == 0);
    CHECK(same_block(&k1, &k2) && same_block(&k1, &k3));
    CHECK(same_data(&d1, &d2) && same_data(&d1, &d3));
    CHECK(same_payload(&p1, &p2) && same_payload(&p1, &p3));
    CHECK(memcmp(o1, o2, 32) == 0 && memcmp(o1, o3, 32) == 0);

    if (ctype == 1) {
        if (r1[0] == 0) {
            /* an SSZ block read through the policy is the one the SSZ reader finds */
            const char *f = bm_hdrs_get(&h, "eth-consensus-version");
            const char *bl = bm_hdrs_get(&h, "eth-execution-payload-blinded");
            const char *in = bm_hdrs_get(&h, "eth-execution-payload-included");
            bm_ssz_block_info_t info;
            CHECK(f != NULL);
            bool blinded = form == BM_PRODUCE_FORM_V3 ? bl && strcmp(bl, "true") == 0
                                                      : form == BM_PRODUCE_FORM_BLINDED_V1;
            CHECK(bm_ssz_block_info(body, len, f, blinded, in && strcmp(in, "true") == 0,
                                    v4 ? BM_SSZ_BLOCK_PRODUCE_V4 : BM_SSZ_BLOCK_PRODUCE_V3,
                                    &info) == 0);
            CHECK(info.slot == k1.slot && memcmp(info.parent_root, k1.parent_root, 32) == 0);
            CHECK(k1.has_state_root && memcmp(info.state_root, k1.state_root, 32) == 0);
        }
        CHECK(r1[1] != 0 || len == BM_SSZ_ATTESTATION_DATA_LEN);
        CHECK(r1[2] != 0 ||
              (len == BM_SSZ_PAYLOAD_ATTESTATION_DATA_LEN && body[40] <= 1 && body[41] <= 1));
    }

    /* the body as node 0's answer to a batch write (status from the selector), node 1
     * answering 2xx or not at all */
    bm_indexed_t *m = bm_indexed_new();
    if (!m)
        abort();
    static const int statuses[] = {400, 500, 503, 200};
    bm_indexed_add(m, 0, "a", statuses[s1 & 3], b);
    if (s1 & 4)
        bm_indexed_add(m, 1, "b", 200, NULL);
    bm_buf_t *out = NULL;
    int st = bm_indexed_answer(m, &out);
    CHECK(st == 200 || st == 400 || st < 0);
    CHECK(st != 200 || out == NULL);
    if (st == 400) {
        struct json_object *j = NULL;
        CHECK(out != NULL && bm_json_parse_buf(out, 0, &j, NULL) == 0 && j);
        json_object_put(j);
    }
    if ((s1 & 4) && bm_indexed_active(m))
        CHECK(bm_indexed_all_taken(m) && st == 200);
    bm_buf_unref(out);
    bm_indexed_free(m);

    bm_buf_unref(b);
    bm_buf_unref(b2);
    bm_hdrs_dispose(&h);
    return 0;
}
