/* SPDX-License-Identifier: MIT */
/*
 * buf: reference-counted byte buffers and a string builder that produces them.
 *
 * A bm_buf_t is written once by its creator and then shared read-only: a cached body or
 * an SSE event is one buffer written to many sockets without copies, each writer holding
 * a reference until its write completes. Counting is not atomic: a buffer belongs to one
 * event loop.
 *
 * bm_str_t builds a buffer incrementally (JSON answers, log lines, request lines) and
 * hands it over without a copy with bm_str_finish().
 */
#ifndef BM_BUF_H
#define BM_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bm_buf {
    uint32_t refs;
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated in data */
    char data[];
} bm_buf_t;

/** A new empty buffer with room for `cap` bytes; refs = 1. NULL on allocation failure. */
bm_buf_t *bm_buf_new(size_t cap);

/** A new buffer holding a copy of p[0..n) plus a NUL after it (not counted in len). */
bm_buf_t *bm_buf_copy(const void *p, size_t n);

/** A new buffer holding the NUL-terminated string s. */
bm_buf_t *bm_buf_from_str(const char *s);

/** Takes one more reference; returns b (NULL passes through). */
bm_buf_t *bm_buf_ref(bm_buf_t *b);

/** Drops one reference; frees the buffer at zero. NULL is ignored. */
void bm_buf_unref(bm_buf_t *b);

/**
 * Room for one more item in an array of `size`-byte items holding n of *cap: when it is
 * full, *cap doubles (becomes `first` when 0) and the array is reallocated. Returns the
 * array (moved or not), or NULL without memory for it: the old array and *cap are kept.
 */
void *bm_grow(void *items, size_t n, size_t *cap, size_t size, size_t first);

/** A growable string builder. Zero-initialise or use BM_STR_INIT. */
typedef struct bm_str {
    bm_buf_t *b; /* NULL until the first append */
    bool oom;    /* set when an allocation failed; later appends are ignored */
} bm_str_t;

#define BM_STR_INIT                                                                                \
    {                                                                                              \
        NULL, false                                                                                \
    }

/** Ensures room for `extra` more bytes. Returns 0 or BM_ENOMEM. */
int bm_str_reserve(bm_str_t *s, size_t extra);

/** Appends p[0..n). */
void bm_str_append(bm_str_t *s, const void *p, size_t n);

/** Appends a NUL-terminated string. */
void bm_str_puts(bm_str_t *s, const char *z);

/** Appends one byte. */
void bm_str_putc(bm_str_t *s, char c);

/** Appends printf-formatted text. */
void bm_str_printf(bm_str_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Appends vprintf-formatted text. */
void bm_str_vprintf(bm_str_t *s, const char *fmt, va_list ap);

/** Appends `z` as a JSON string literal, quotes included, escaping as RFC 8259 requires. */
void bm_str_json_string(bm_str_t *s, const char *z, size_t n);

/** Writes `v` in decimal to `out` (room for BM_U64_DEC_MAX bytes, no NUL); returns the
 *  number of digits written. */
#define BM_U64_DEC_MAX 20
size_t bm_u64_dec(char *out, uint64_t v);

/** Appends an unsigned decimal number. */
void bm_str_u64(bm_str_t *s, uint64_t v);

/** Appends p[0..n) as "0x" followed by lowercase hex. */
void bm_str_hex(bm_str_t *s, const void *p, size_t n);

/** Current contents (NUL-terminated; "" when empty). Valid until the next append. */
const char *bm_str_data(const bm_str_t *s);

/** Current length in bytes. */
size_t bm_str_len(const bm_str_t *s);

/** Empties the builder, keeping its memory. */
void bm_str_clear(bm_str_t *s);

/**
 * Hands the contents over as a buffer (refs = 1; caller owns it) and resets the builder.
 * Returns NULL if an allocation failed at any point (the builder is reset either way).
 */
bm_buf_t *bm_str_finish(bm_str_t *s);

/** Frees the builder's memory. */
void bm_str_dispose(bm_str_t *s);

#endif /* BM_BUF_H */
