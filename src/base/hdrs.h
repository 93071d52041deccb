/* SPDX-License-Identifier: MIT */
/*
 * hdrs: an owned list of HTTP header fields (name, value), kept in arrival order with
 * duplicates preserved. Used for request headers in the server, response headers from
 * upstreams, and headers a policy builds for an answer. Names compare case-insensitively.
 * Strings are copied into chunked storage that never moves, so pointers returned by the
 * accessors stay valid until bm_hdrs_clear or bm_hdrs_dispose.
 */
#ifndef BM_HDRS_H
#define BM_HDRS_H

#include <stdbool.h>
#include <stddef.h>

/** One header field. Strings are NUL-terminated; lengths exclude the NUL. */
typedef struct bm_header {
    const char *name;
    const char *value;
    size_t name_len;
    size_t value_len;
} bm_header_t;

struct bm_hdrs_chunk;

typedef struct bm_hdrs {
    bm_header_t *items;
    size_t n;
    size_t cap;
    struct bm_hdrs_chunk *chunks; /* string storage */
} bm_hdrs_t;

/** Initialises an empty list (no allocation). A zeroed bm_hdrs_t is an empty list too. */
void bm_hdrs_init(bm_hdrs_t *h);

/** Frees all memory of the list. */
void bm_hdrs_dispose(bm_hdrs_t *h);

/** Removes every field, keeping allocated memory for reuse. */
void bm_hdrs_clear(bm_hdrs_t *h);

/** Appends a field, copying both strings. Returns 0 or BM_ENOMEM. */
int bm_hdrs_add(bm_hdrs_t *h, const char *name, size_t name_len, const char *value,
                size_t value_len);

/** Appends a field from NUL-terminated strings. Returns 0 or BM_ENOMEM. */
int bm_hdrs_add_z(bm_hdrs_t *h, const char *name, const char *value);

/** Replaces every field named `name` by one field with `value` (appends when absent). */
int bm_hdrs_set_z(bm_hdrs_t *h, const char *name, const char *value);

/** Removes every field named `name`. Returns how many were removed. */
size_t bm_hdrs_remove(bm_hdrs_t *h, const char *name);

/** The value of the first field named `name` (case-insensitive), or NULL. */
const char *bm_hdrs_get(const bm_hdrs_t *h, const char *name);

/** True for a success status (200..299): the answers a client can take as given. */
static inline bool bm_status_2xx(int status)
{
    return status >= 200 && status <= 299;
}

/**
 * True when `content_type` (may be NULL) names application/octet-stream, the media type
 * of SSZ bodies, whatever its case, leading whitespace and parameters.
 */
bool bm_content_type_is_ssz(const char *content_type);

/** bm_content_type_is_ssz of the Content-Type field of `h` (may be NULL). */
bool bm_hdrs_is_ssz(const bm_hdrs_t *h);

/** Copies every field of `src` to the end of `dst`. Returns 0 or BM_ENOMEM. */
int bm_hdrs_copy(bm_hdrs_t *dst, const bm_hdrs_t *src);

/** Case-insensitive comparison of a counted name with a NUL-terminated one. */
bool bm_header_name_is(const char *name, size_t len, const char *z);

/**
 * Whether a[0..n) and b[0..n) are equal with ASCII letters compared case-insensitively,
 * as strncasecmp in the C locale for strings without NUL bytes. Inline: field names are
 * compared for every field of every proxied head, and a call to the C library's
 * locale-aware comparison costs several times the few bytes compared.
 */
static inline bool bm_ascii_case_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x == y)
            continue;
        /* equal but for case only when both are the same letter: they differ in bit 5 */
        x |= 0x20;
        if (x != (y | 0x20) || x < 'a' || x > 'z')
            return false;
    }
    return true;
}

/**
 * True for the hop-by-hop fields a proxy must not forward (RFC 9110 section 7.6.1:
 * Connection, Keep-Alive, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE,
 * Trailer, Transfer-Encoding, Upgrade), plus the framing and routing fields a proxy
 * regenerates for each hop: Host, Content-Length, Expect.
 */
bool bm_header_is_hop_by_hop(const char *name, size_t len);

/**
 * RFC 9110 tchar (5.6.2): 1 for the bytes of methods and field names, 0 for every other
 * byte. One table for the request parser and the response parser.
 */
extern const unsigned char bm_tchar[256];

/**
 * True when `name` is listed in a Connection header value `conn` (comma separated,
 * case-insensitive): such fields are hop-by-hop for this message only.
 */
bool bm_header_listed_in_connection(const char *conn, const char *name, size_t len);

#endif /* BM_HDRS_H */
