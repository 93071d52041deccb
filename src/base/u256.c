/* SPDX-License-Identifier: MIT */
/*
 * u256: four 64-bit limbs, least significant first. Multiplication and division by a
 * 64-bit factor work limb by limb through unsigned __int128, which GCC and Clang provide on
 * every 64-bit target we build for; there is no general 256 x 256 multiplication because
 * block-value rules never need one.
 */
#include "base/u256.h"

#include <string.h>

#include "base/err.h"

typedef unsigned __int128 u128;

bm_u256_t bm_u256_from_u64(uint64_t v)
{
    bm_u256_t r = {{v, 0, 0, 0}};
    return r;
}

/* r = r * m + add; returns the carry out of the top limb (non-zero means overflow). */
static uint64_t mul_add_small(bm_u256_t *r, uint64_t m, uint64_t add)
{
    uint64_t carry = add;
    for (int i = 0; i < 4; i++) {
        u128 t = (u128)r->w[i] * m + carry;
        r->w[i] = (uint64_t)t;
        carry = (uint64_t)(t >> 64);
    }
    return carry;
}

int bm_u256_parse(const char *s, size_t len, bm_u256_t *out)
{
    if (!s || len == 0)
        return BM_EINVAL;
    bm_u256_t r = {{0, 0, 0, 0}};
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < '0' || c > '9')
            return BM_EINVAL;
        if (mul_add_small(&r, 10, (uint64_t)(c - '0')) != 0)
            return BM_EINVAL;
    }
    *out = r;
    return 0;
}

int bm_u256_parse_z(const char *s, bm_u256_t *out)
{
    if (!s)
        return BM_EINVAL;
    return bm_u256_parse(s, strlen(s), out);
}

int bm_u256_cmp(const bm_u256_t *a, const bm_u256_t *b)
{
    for (int i = 3; i >= 0; i--) {
        if (a->w[i] != b->w[i])
            return a->w[i] < b->w[i] ? -1 : 1;
    }
    return 0;
}

bool bm_u256_is_zero(const bm_u256_t *a)
{
    return (a->w[0] | a->w[1] | a->w[2] | a->w[3]) == 0;
}

bool bm_u256_to_u64(const bm_u256_t *a, uint64_t *out)
{
    if (a->w[1] | a->w[2] | a->w[3])
        return false;
    if (out)
        *out = a->w[0];
    return true;
}

int bm_u256_add(const bm_u256_t *a, const bm_u256_t *b, bm_u256_t *out)
{
    bm_u256_t r;
    uint64_t carry = 0;
    for (int i = 0; i < 4; i++) {
        u128 t = (u128)a->w[i] + b->w[i] + carry;
        r.w[i] = (uint64_t)t;
        carry = (uint64_t)(t >> 64);
    }
    if (carry)
        return BM_ETOOBIG;
    *out = r;
    return 0;
}

int bm_u256_sub(const bm_u256_t *a, const bm_u256_t *b, bm_u256_t *out)
{
    if (bm_u256_cmp(a, b) < 0)
        return BM_EINVAL;
    bm_u256_t r;
    uint64_t borrow = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t x = a->w[i], y = b->w[i];
        r.w[i] = x - y - borrow;
        borrow = (x < y || (x == y && borrow)) ? 1 : 0;
    }
    *out = r;
    return 0;
}

int bm_u256_mul_u64(const bm_u256_t *a, uint64_t m, bm_u256_t *out)
{
    bm_u256_t r = *a;
    if (mul_add_small(&r, m, 0) != 0)
        return BM_ETOOBIG;
    *out = r;
    return 0;
}

int bm_u256_div_u64(const bm_u256_t *a, uint64_t d, bm_u256_t *quot, uint64_t *rem)
{
    if (d == 0)
        return BM_EINVAL;
    bm_u256_t q;
    uint64_t r = 0;
    for (int i = 3; i >= 0; i--) {
        /* r < d, so (r << 64 | limb) / d fits in 64 bits. */
        u128 t = ((u128)r << 64) | a->w[i];
        q.w[i] = (uint64_t)(t / d);
        r = (uint64_t)(t % d);
    }
    *quot = q;
    if (rem)
        *rem = r;
    return 0;
}

size_t bm_u256_format(const bm_u256_t *a, char out[BM_U256_DEC_MAX])
{
    /* Peel off 19 decimal digits at a time (10^19 < 2^64). */
    static const uint64_t chunk = 10000000000000000000ULL;
    char tmp[BM_U256_DEC_MAX];
    size_t n = 0;
    bm_u256_t v = *a;
    do {
        uint64_t part;
        bm_u256_div_u64(&v, chunk, &v, &part);
        bool last = bm_u256_is_zero(&v);
        for (int k = 0; k < 19 && (!last || part); k++) {
            tmp[n++] = (char)('0' + part % 10);
            part /= 10;
        }
    } while (!bm_u256_is_zero(&v));
    if (n == 0)
        tmp[n++] = '0';
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

bool bm_u256_boost_prefers_local(const bm_u256_t *local, const bm_u256_t *builder, uint64_t boost)
{
    bm_u256_t q, boosted;
    bm_u256_div_u64(builder, 100, &q, NULL);
    if (bm_u256_mul_u64(&q, boost, &boosted) != 0)
        return false;
    return bm_u256_cmp(local, &boosted) >= 0;
}
