/* SPDX-License-Identifier: MIT */
/* answerhead: the fields of a node's answer head the read path decides on (Connection,
 * Content-Length, Content-Type, Retry-After, chunked), found in one pass, and the fields
 * passed on to the client. Pure: no I/O, no state. */
#ifndef BM_ANSWERHEAD_H
#define BM_ANSWERHEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hdrs.h"

typedef struct bm_answer_head {
    const char *connection, *content_length, *content_type, *retry_after; /* first of each */
    bool chunked;
    bool connection_lists; /* the Connection value names a field (not only keep-alive or
                              close, which nodes send every time) */
} bm_answer_head_t;

/** Fills `hi` from the answer's fields `h` (pointers into `h`, valid while it is). */
void bm_answer_head_scan(const bm_hdrs_t *h, bm_answer_head_t *hi);

/** The node's fields that go to the client when its Connection field lists some: not those
 *  nor Connection (the server drops the other hop-by-hop fields itself). Without such a
 *  list the read path passes the transfer's own fields on as they are. */
void bm_answer_head_copy(bm_hdrs_t *dst, const bm_hdrs_t *src, const bm_answer_head_t *hi);

/** The body's length from Content-Length, or -1 (chunked, absent or not a number). */
int64_t bm_answer_head_length(const bm_answer_head_t *hi);

/** Retry-After in milliseconds (delta-seconds, at most an hour); a date or nothing: dflt. */
uint32_t bm_answer_retry_after_ms(const char *v, uint32_t dflt);

#endif
