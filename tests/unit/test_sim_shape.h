/* SPDX-License-Identifier: MIT */
/*
 * test_sim_shape: a tiny schema checker for the sim's unit tests. A shape is written from
 * the spec YAML as a string:
 *   u      decimal integer in a string ("Uint64" and friends)     b  boolean
 *   hN     "0x" + N bytes of hex (h32 Root, h48 pubkey, h96 sig)   s  any string
 *   hx     "0x" + any even number of hex digits                    n  JSON integer
 *   {k:T,o?:T}  object with exactly these keys (o optional)        *  anything
 *   [T]    array whose items all have shape T
 * bs_shape_check() returns true when the JSON matches, else false with the path and the
 * reason in err.
 */
#ifndef TEST_SIM_SHAPE_H
#define TEST_SIM_SHAPE_H

#include <ctype.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape_cur {
    const char *p;
    char *err;
    size_t errlen;
} shape_cur_t;

static bool shape_skip(shape_cur_t *c, const char *path);
static bool shape_fail(shape_cur_t *c, const char *path, const char *why)
{
    if (c->err && c->err[0] == 0)
        snprintf(c->err, c->errlen, "%s: %s", path[0] ? path : "$", why);
    return false;
}

static bool shape_is_hex(const char *s, size_t bytes, bool any)
{
    if (strncmp(s, "0x", 2) != 0)
        return false;
    size_t n = strlen(s + 2);
    if (any ? n % 2 != 0 : n != 2 * bytes)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[2 + i]))
            return false;
    return true;
}

static bool shape_val(shape_cur_t *c, json_object *v, const char *path);

/* Skips one shape without checking (for optional keys that are absent, empty arrays). */
static bool shape_skip(shape_cur_t *c, const char *path)
{
    (void)path;
    char ch = *c->p;
    if (ch == '{' || ch == '[') {
        int d = 0;
        do {
            if (!*c->p)
                return false;
            if (*c->p == '{' || *c->p == '[')
                d++;
            else if (*c->p == '}' || *c->p == ']')
                d--;
            c->p++;
        } while (d > 0);
        return true;
    }
    if (ch == 'h') {
        c->p++;
        if (*c->p == 'x')
            c->p++;
        else
            while (isdigit((unsigned char)*c->p))
                c->p++;
        return true;
    }
    if (ch)
        c->p++;
    return true;
}

static bool shape_val(shape_cur_t *c, json_object *v, const char *path)
{
    char ch = *c->p;
    char sub[512];
    if (ch == '*') {
        c->p++;
        return true;
    }
    if (ch == 'u') {
        c->p++;
        if (!json_object_is_type(v, json_type_string))
            return shape_fail(c, path, "expected a decimal string");
        const char *s = json_object_get_string(v);
        if (!*s)
            return shape_fail(c, path, "empty decimal string");
        for (const char *q = s; *q; q++)
            if (!isdigit((unsigned char)*q))
                return shape_fail(c, path, "not a decimal string");
        return true;
    }
    if (ch == 'b') {
        c->p++;
        return json_object_is_type(v, json_type_boolean) ? true
                                                         : shape_fail(c, path, "expected boolean");
    }
    if (ch == 'n') {
        c->p++;
        return json_object_is_type(v, json_type_int) ? true
                                                     : shape_fail(c, path, "expected integer");
    }
    if (ch == 's') {
        c->p++;
        return json_object_is_type(v, json_type_string) ? true
                                                        : shape_fail(c, path, "expected string");
    }
    if (ch == 'h') {
        c->p++;
        bool any = *c->p == 'x';
        size_t bytes = 0;
        if (any)
            c->p++;
        else
            while (isdigit((unsigned char)*c->p))
                bytes = bytes * 10 + (size_t)(*c->p++ - '0');
        if (!json_object_is_type(v, json_type_string) ||
            !shape_is_hex(json_object_get_string(v), bytes, any))
            return shape_fail(c, path, "expected 0x-hex of the right length");
        return true;
    }
    if (ch == '[') {
        c->p++;
        if (!json_object_is_type(v, json_type_array))
            return shape_fail(c, path, "expected array");
        const char *start = c->p;
        size_t n = json_object_array_length(v);
        bool ok = true;
        if (n == 0) {
            shape_skip(c, path);
        }
        for (size_t i = 0; i < n && ok; i++) {
            c->p = start;
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            ok = shape_val(c, json_object_array_get_idx(v, i), sub);
        }
        if (!ok)
            return false;
        if (*c->p != ']')
            return shape_fail(c, path, "bad shape string (])");
        c->p++;
        return true;
    }
    if (ch == '{') {
        c->p++;
        if (!json_object_is_type(v, json_type_object))
            return shape_fail(c, path, "expected object");
        size_t seen = 0;
        while (*c->p && *c->p != '}') {
            char key[64];
            size_t k = 0;
            bool opt = false;
            while (*c->p && *c->p != ':' && k < sizeof key - 1)
                key[k++] = *c->p++;
            key[k] = 0;
            if (k && key[k - 1] == '?') {
                opt = true;
                key[k - 1] = 0;
            }
            if (*c->p != ':')
                return shape_fail(c, path, "bad shape string (:)");
            c->p++;
            json_object *f;
            snprintf(sub, sizeof sub, "%s.%s", path, key);
            if (!json_object_object_get_ex(v, key, &f)) {
                if (!opt)
                    return shape_fail(c, sub, "missing");
                shape_skip(c, sub);
            } else {
                seen++;
                if (!shape_val(c, f, sub))
                    return false;
            }
            if (*c->p == ',')
                c->p++;
        }
        if (*c->p != '}')
            return shape_fail(c, path, "bad shape string (})");
        c->p++;
        if ((size_t)json_object_object_length(v) != seen)
            return shape_fail(c, path, "has keys the spec does not list");
        return true;
    }
    return shape_fail(c, path, "bad shape string");
}

/** Checks JSON text against a shape; err gets the first mismatch. */
static inline bool bs_shape_check_text(const char *json, size_t len, const char *shape, char *err,
                                       size_t errlen)
{
    err[0] = 0;
    json_tokener *tok = json_tokener_new();
    json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    bool parsed = json_tokener_get_error(tok) == json_tokener_success;
    json_tokener_free(tok);
    if (!parsed) {
        snprintf(err, errlen, "not JSON: %.*s", (int)(len > 200 ? 200 : len), json);
        json_object_put(o);
        return false;
    }
    shape_cur_t c = {shape, err, errlen};
    bool ok = shape_val(&c, o, "");
    if (ok && *c.p)
        ok = shape_fail(&c, "", "bad shape string (trailing)");
    json_object_put(o);
    return ok;
}

/* The spec's block shapes the sim's tests check its answers against (JSON and SSZ alike). */
#define PAYLOAD_DENEB                                                                              \
    "parent_hash:h32,fee_recipient:h20,state_root:h32,receipts_root:h32,logs_bloom:h256,"          \
    "prev_randao:h32,block_number:u,gas_limit:u,gas_used:u,timestamp:u,extra_data:hx,"             \
    "base_fee_per_gas:u,blob_gas_used:u,excess_blob_gas:u,block_hash:h32,transactions:[hx],"       \
    "withdrawals:[{index:u,validator_index:u,address:h20,amount:u}]"
#define REQUESTS "{deposits:[*],withdrawals:[*],consolidations:[*]}"
#define BODY_COMMON                                                                                \
    "randao_reveal:h96,eth1_data:{deposit_root:h32,deposit_count:u,block_hash:h32},graffiti:h32,"  \
    "proposer_slashings:[*],attester_slashings:[*],attestations:[*],deposits:[*],"                 \
    "voluntary_exits:[*],sync_aggregate:{sync_committee_bits:h64,sync_committee_signature:h96},"   \
    "bls_to_execution_changes:[*]"
#define BLOCK_HEAD "slot:u,proposer_index:u,parent_root:h32,state_root:h32,"
#define FULU_BLOCK                                                                                 \
    "{" BLOCK_HEAD "body:{" BODY_COMMON ",execution_payload:{" PAYLOAD_DENEB                       \
    "},blob_kzg_commitments:[h48],execution_requests:" REQUESTS "}}"
#define GLOAS_BLOCK                                                                                \
    "{" BLOCK_HEAD "body:{" BODY_COMMON                                                            \
    ",signed_execution_payload_bid:{message:{parent_block_hash:h32,parent_block_root:h32,"         \
    "block_hash:h32,prev_randao:h32,fee_recipient:h20,gas_limit:u,builder_index:u,slot:u,"         \
    "value:u,execution_payment:u,blob_kzg_commitments:[h48],execution_requests_root:h32},"         \
    "signature:h96},payload_attestations:[*],parent_execution_requests:" REQUESTS "}}"
#define ENVELOPE                                                                                   \
    "{payload:{" PAYLOAD_DENEB ",block_access_list:hx,slot_number:u},execution_requests:" REQUESTS \
    ",builder_index:u,beacon_block_root:h32,parent_beacon_block_root:h32}"

#endif /* TEST_SIM_SHAPE_H */
