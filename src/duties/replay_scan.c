/* SPDX-License-Identifier: MIT */
/*
 * replay_scan: reading the items of a body, with json-c or with the fast scanner beside it
 * (see the comment at the top of the reading functions).
 */
#include "duties/replay_int.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "base/url.h"

/* ---- feeding: reading items ----------------------------------------------------------------- */
static const char *const TOP_NAMES[F_TOP_COUNT] = {
    "validator_index", "fee_recipient",          "signature",
    "committee_index", "committees_at_slot",     "slot",
    "is_aggregator",   "sync_committee_indices", "until_epoch"};
static const char *const MSG_NAMES[F_MSG_COUNT] = {
    "fee_recipient",  "gas_limit",     "timestamp",       "pubkey",
    "dependent_root", "proposal_slot", "validator_index", "target_gas_limit"};

static const span_t *fspan(const item_t *it, int f)
{
    const span_t *s = f & MSG_BIT ? &it->fi->msg[f & 0xff] : &it->fi->top[f];
    return s->t ? s : NULL;
}

static const char *field_ptr(int f, char buf[64])
{
    snprintf(buf, 64, "%s/%s", f & MSG_BIT ? "/message" : "",
             f & MSG_BIT ? MSG_NAMES[f & 0xff] : TOP_NAMES[f]);
    return buf;
}

static bool span_u64(const span_t *s, uint64_t *out)
{
    if (!s || (s->t != 's' && s->t != 'n'))
        return false;
    return bm_json_parse_u64(s->p, s->n, out) == 0;
}

bool bm_rp_it_u64(const item_t *it, int f, uint64_t *out)
{
    if (it->fi)
        return span_u64(fspan(it, f), out);
    char buf[64];
    return bm_json_get_u64(it->jo, field_ptr(f, buf), out) == 0;
}

bool bm_rp_it_hex(const item_t *it, int f, uint8_t *out, size_t n)
{
    const char *str;
    size_t len;
    if (it->fi) {
        const span_t *s = fspan(it, f);
        if (!s || s->t != 's')
            return false;
        str = s->p;
        len = s->n;
    } else {
        char buf[64];
        str = bm_json_get_str(it->jo, field_ptr(f, buf));
        if (!str)
            return false;
        len = strlen(str);
    }
    uint8_t tmp[96];
    size_t got;
    if (n > sizeof tmp || bm_hex_decode(str, len, tmp, n, &got) != 0 || got != n)
        return false;
    memcpy(out, tmp, n);
    return true;
}

bool bm_rp_it_bool(const item_t *it, int f, bool *out)
{
    if (it->fi) {
        const span_t *s = fspan(it, f);
        if (!s || (s->t != 't' && s->t != 'f'))
            return false;
        *out = s->t == 't';
        return true;
    }
    char buf[64];
    return bm_json_get_bool(it->jo, field_ptr(f, buf), out) == 0;
}

/* ---- the fast scanner ------------------------------------------------------------------------ */

void bm_rp_ws(scan_t *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* A string without escapes, control characters or non-ASCII bytes. */
static bool scan_string(scan_t *s, span_t *out)
{
    if (s->p >= s->end || *s->p != '"')
        return false;
    const char *q = ++s->p;
    while (q < s->end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c == '\\' || c < 0x20 || c >= 0x80)
            return false;
        q++;
    }
    if (q >= s->end)
        return false;
    out->p = s->p;
    out->n = (size_t)(q - s->p);
    out->t = 's';
    s->p = q + 1;
    return true;
}

static bool scan_literal(scan_t *s, const char *lit, char t, span_t *out)
{
    size_t n = strlen(lit);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
        return false;
    out->p = s->p;
    out->n = n;
    out->t = t;
    s->p += n;
    return true;
}

/* A plain non-negative integer below 10^19 ("0" or no leading zero); anything else (a
 * sign, a fraction, an exponent, more digits) is left to json-c. */
static bool scan_number(scan_t *s, span_t *out)
{
    const char *q = s->p;
    while (q < s->end && *q >= '0' && *q <= '9')
        q++;
    size_t n = (size_t)(q - s->p);
    if (n == 0 || n > 19 || (n > 1 && *s->p == '0'))
        return false;
    if (q < s->end && (*q == '.' || *q == 'e' || *q == 'E'))
        return false;
    out->p = s->p;
    out->n = n;
    out->t = 'n';
    s->p = q;
    return true;
}

/* Whether the next byte after white space closes the container (`close`, passed over). */
static bool closes(scan_t *s, char close)
{
    bm_rp_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
    }
    return false;
}

/* After an item of a container closed by `close`: 1 when it closes, 0 when a ',' announces
 * another item (both passed over), -1 for anything else. */
static int after_item(scan_t *s, char close)
{
    if (closes(s, close))
        return 1;
    if (s->p >= s->end || *s->p != ',')
        return -1;
    s->p++;
    return 0;
}

/* Members of an object (the '{' is next), each value passed to `member`, or skipped. */
bool bm_rp_scan_object(scan_t *s, int depth, fitem_t *fi, bool in_msg)
{
    s->p++; /* '{' */
    if (closes(s, '}'))
        return true;
    for (;;) {
        span_t key, val;
        bm_rp_ws(s);
        if (!scan_string(s, &key))
            return false;
        bm_rp_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return false;
        s->p++;
        bm_rp_ws(s);
        span_t *slot = NULL;
        bool message = false;
        if (fi && !in_msg) {
            for (int k = 0; k < F_TOP_COUNT && !slot; k++)
                if (strlen(TOP_NAMES[k]) == key.n && memcmp(TOP_NAMES[k], key.p, key.n) == 0)
                    slot = &fi->top[k];
            message = key.n == 7 && memcmp(key.p, "message", 7) == 0;
        } else if (fi) {
            for (int k = 0; k < F_MSG_COUNT && !slot; k++)
                if (strlen(MSG_NAMES[k]) == key.n && memcmp(MSG_NAMES[k], key.p, key.n) == 0)
                    slot = &fi->msg[k];
        }
        if (message) {
            /* a later "message" replaces an earlier one entirely, as in json-c */
            memset(fi->msg, 0, sizeof fi->msg);
            if (s->p < s->end && *s->p == '{') {
                if (depth + 1 > SCAN_MAX_DEPTH || !bm_rp_scan_object(s, depth + 1, fi, true))
                    return false;
            } else if (!bm_rp_scan_value(s, depth + 1, &val)) {
                return false;
            }
        } else {
            if (!bm_rp_scan_value(s, depth + 1, &val))
                return false;
            if (slot)
                *slot = val; /* the last of duplicate keys wins, as in json-c */
        }
        int next = after_item(s, '}');
        if (next != 0)
            return next > 0;
    }
}

static bool scan_array(scan_t *s, int depth)
{
    s->p++; /* '[' */
    if (closes(s, ']'))
        return true;
    for (;;) {
        span_t v;
        bm_rp_ws(s);
        if (!bm_rp_scan_value(s, depth + 1, &v))
            return false;
        int next = after_item(s, ']');
        if (next != 0)
            return next > 0;
    }
}

/* Any value; arrays and objects are checked and their whole text is the span. */
bool bm_rp_scan_value(scan_t *s, int depth, span_t *out)
{
    if (s->p >= s->end || depth > SCAN_MAX_DEPTH)
        return false;
    const char *start = s->p;
    switch (*s->p) {
    case '"':
        return scan_string(s, out);
    case 't':
        return scan_literal(s, "true", 't', out);
    case 'f':
        return scan_literal(s, "false", 'f', out);
    case 'n':
        return scan_literal(s, "null", 'z', out);
    case '[':
        if (!scan_array(s, depth))
            return false;
        out->t = 'a';
        break;
    case '{':
        if (!bm_rp_scan_object(s, depth, NULL, false))
            return false;
        out->t = 'o';
        break;
    default:
        return scan_number(s, out);
    }
    out->p = start;
    out->n = (size_t)(s->p - start);
    return true;
}

/* The array of sync committee indices: every element a u64 (string or plain integer).
 * NULL with *ok false when an element is not; caller frees. */
uint64_t *bm_rp_it_u64_array(const item_t *it, int f, size_t *n, bool *ok)
{
    *n = 0;
    *ok = false;
    if (it->fi) {
        const span_t *sp = fspan(it, f);
        if (!sp || sp->t != 'a')
            return NULL;
        /* count, then read: the span was checked already */
        size_t cap = 0;
        for (int pass = 0; pass < 2; pass++) {
            uint64_t *out = pass ? (cap ? malloc(cap * sizeof *out) : NULL) : NULL;
            if (pass && cap && !out)
                return NULL;
            scan_t s = {sp->p + 1, sp->p + sp->n};
            size_t k = 0;
            bm_rp_ws(&s);
            while (s.p < s.end && *s.p != ']') {
                span_t v;
                if (!bm_rp_scan_value(&s, 1, &v) || (pass && !span_u64(&v, &out[k])) ||
                    (!pass && v.t != 's' && v.t != 'n') || ++k > MAX_SYNC_INDICES) {
                    free(out);
                    return NULL;
                }
                bm_rp_ws(&s);
                if (s.p < s.end && *s.p == ',')
                    s.p++;
                bm_rp_ws(&s);
            }
            if (!pass) {
                cap = k;
                continue;
            }
            *n = k;
            *ok = true;
            return out;
        }
        return NULL;
    }
    char buf[64];
    json_object *a = bm_json_get(it->jo, field_ptr(f, buf));
    if (!a || !json_object_is_type(a, json_type_array))
        return NULL;
    size_t k = json_object_array_length(a);
    if (k > MAX_SYNC_INDICES)
        return NULL;
    uint64_t *out = k ? malloc(k * sizeof *out) : NULL;
    if (k && !out)
        return NULL;
    for (size_t j = 0; j < k; j++) {
        char ptr[24];
        snprintf(ptr, sizeof ptr, "/%zu", j);
        if (bm_json_get_u64(a, ptr, &out[j]) != 0) {
            free(out);
            return NULL;
        }
    }
    *n = k;
    *ok = true;
    return out;
}
