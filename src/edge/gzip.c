/* SPDX-License-Identifier: MIT */
/*
 * gzip: deflate with a gzip wrapper (windowBits 16 + 15) and its inverse; the
 * Accept-Encoding parser of RFC 9110 12.5.3 reduced to the one coding we produce.
 */
#include "edge/gzip.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

bm_buf_t *bm_gzip_compress(const void *p, size_t n, int level)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, (uLong)n);
    bm_buf_t *b = bm_buf_new(cap);
    if (!b) {
        deflateEnd(&z);
        return NULL;
    }
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)b->data;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    size_t out = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END || out >= n) {
        bm_buf_unref(b);
        return NULL;
    }
    /* the bound is about the input's size: a stored form keeps only what it uses */
    bm_buf_t *fit = bm_buf_copy(b->data, out);
    bm_buf_unref(b);
    return fit;
}

bm_buf_t *bm_gzip_inflate(const void *p, size_t n, size_t max)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + 15) != Z_OK)
        return NULL;
    size_t cap = n * 4 + 256;
    if (cap > max + 1)
        cap = max + 1;
    bm_buf_t *b = bm_buf_new(cap);
    z.next_in = (Bytef *)p;
    z.avail_in = (uInt)n;
    int rc = Z_OK;
    size_t len = 0;
    while (b && rc == Z_OK) {
        if (len == cap) {
            if (cap > max)
                break; /* larger than max */
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            bm_buf_t *nb = bm_buf_new(ncap);
            if (nb)
                memcpy(nb->data, b->data, len);
            bm_buf_unref(b);
            b = nb;
            cap = ncap;
            continue;
        }
        z.next_out = (Bytef *)b->data + len;
        z.avail_out = (uInt)(cap - len);
        rc = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
    }
    inflateEnd(&z);
    if (!b || rc != Z_STREAM_END || len > max || z.avail_in != 0) {
        bm_buf_unref(b);
        return NULL;
    }
    b->len = len;
    return b;
}

/* The q-value of one list member's parameters ("q=0.5"): 1 when absent. */
static double q_of(const char *params, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if ((params[i] == 'q' || params[i] == 'Q') && params[i + 1] == '=' &&
            (i == 0 || params[i - 1] == ';' || params[i - 1] == ' '))
            return strtod(params + i + 2, NULL);
    }
    return 1.0;
}

bool bm_gzip_accepted(const char *ae)
{
    if (!ae)
        return false;
    double gzip_q = -1, star_q = -1;
    const char *p = ae;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        size_t len = strcspn(p, ",");
        p += len;
        size_t tok = strcspn(start, ";, \t");
        if (tok > len)
            tok = len;
        const char *params = start + tok;
        double q = q_of(params, len - tok);
        if ((tok == 4 && strncasecmp(start, "gzip", 4) == 0) ||
            (tok == 6 && strncasecmp(start, "x-gzip", 6) == 0))
            gzip_q = q;
        else if (tok == 1 && start[0] == '*')
            star_q = q;
    }
    if (gzip_q >= 0)
        return gzip_q > 0;
    return star_q > 0;
}
