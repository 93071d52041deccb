/* SPDX-License-Identifier: MIT */
/*
 * hash: SHA-256 (FIPS 180-4) and seeded derivations. See hash.h.
 */
#include "hash.h"

#include <string.h>

#include "base/err.h"
#include "base/json.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t h[8], const uint8_t blk[64])
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 |
               (uint32_t)blk[4 * i + 2] << 8 | blk[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[i] + w[i];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + mj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void bs_sha256(const void *p, size_t n, uint8_t out[32])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *in = p;
    size_t left = n;
    while (left >= 64) {
        compress(h, in);
        in += 64;
        left -= 64;
    }
    uint8_t tail[128];
    memset(tail, 0, sizeof tail);
    if (left)
        memcpy(tail, in, left);
    tail[left] = 0x80;
    size_t tl = left + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++)
        tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
    compress(h, tail);
    if (tl == 128)
        compress(h, tail + 64);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

void bs_sha256_pair(const uint8_t a[32], const uint8_t b[32], uint8_t out[32])
{
    uint8_t buf[64];
    memcpy(buf, a, 32);
    memcpy(buf + 32, b, 32);
    bs_sha256(buf, 64, out);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

bs_root_t bs_hash(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c)
{
    uint8_t buf[36];
    put64(buf, seed);
    for (int i = 0; i < 4; i++)
        buf[8 + i] = (uint8_t)(tag >> (8 * i));
    put64(buf + 12, a);
    put64(buf + 20, b);
    put64(buf + 28, c);
    bs_root_t r;
    bs_sha256(buf, sizeof buf, r.b);
    return r;
}

bs_root_t bs_hash_root(uint64_t seed, uint32_t tag, const bs_root_t *x, uint64_t a, uint64_t b)
{
    uint8_t buf[60];
    put64(buf, seed);
    for (int i = 0; i < 4; i++)
        buf[8 + i] = (uint8_t)(tag >> (8 * i));
    memcpy(buf + 12, x->b, 32);
    put64(buf + 44, a);
    put64(buf + 52, b);
    bs_root_t r;
    bs_sha256(buf, sizeof buf, r.b);
    return r;
}

uint64_t bs_hash_u64(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c)
{
    bs_root_t r = bs_hash(seed, tag, a, b, c);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | r.b[i];
    return v;
}

double bs_hash_unit(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c)
{
    return (double)(bs_hash_u64(seed, tag, a, b, c) >> 11) * 0x1.0p-53;
}

uint64_t bs_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double bs_rng_unit(uint64_t *state)
{
    return (double)(bs_rng_next(state) >> 11) * 0x1.0p-53;
}

int bs_root_eq(const bs_root_t *a, const bs_root_t *b)
{
    return memcmp(a->b, b->b, 32) == 0;
}

int bs_root_parse(const char *s, size_t n, bs_root_t *out)
{
    if (n != 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return BM_EINVAL;
    for (int i = 0; i < 32; i++) {
        int hi = bm_hexval(s[2 + 2 * i]), lo = bm_hexval(s[3 + 2 * i]);
        if (hi < 0 || lo < 0)
            return BM_EINVAL;
        out->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void bs_root_hex(const bs_root_t *r, char out[67])
{
    static const char hx[] = "0123456789abcdef";
    out[0] = '0';
    out[1] = 'x';
    for (int i = 0; i < 32; i++) {
        out[2 + 2 * i] = hx[r->b[i] >> 4];
        out[3 + 2 * i] = hx[r->b[i] & 15];
    }
    out[66] = 0;
}
