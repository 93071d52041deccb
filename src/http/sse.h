/* SPDX-License-Identifier: MIT */
/*
 * sse: an incremental parser for Server-Sent Events (text/event-stream), following the
 * WHATWG EventSource parsing rules.
 *
 * Each beacon node's /eth/v1/events stream arrives in chunks cut anywhere (inside a line,
 * between the CR and LF of a line end, inside the UTF-8 BOM); the parser turns them into
 * whole events, the same events whatever the cuts. Nodes differ in small ways: Lighthouse
 * writes `event:head` without a space, some servers end lines with CRLF or CR, most send
 * `:` comments as keep-alives. All of these parse alike.
 *
 * Memory is bounded: an event whose data exceeds max_data, or any other line longer than
 * max_line, is dropped, reported through on_error and counted; the parser skips to the
 * next blank line and carries on. Whatever a node sends, a parser holds at most about
 * 2 * max_data + 8 * max_line bytes (buffers grow by doubling). See docs/sse.md.
 */
#ifndef BM_SSE_H
#define BM_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Default bound on one event's data (the `data:` lines joined): 1 MiB. */
#define BM_SSE_DEFAULT_MAX_DATA (1024u * 1024u)
/** Default bound on any other line (field name and value, e.g. `event:` or `id:`): 4 KiB. */
#define BM_SSE_DEFAULT_MAX_LINE 4096u

/**
 * One dispatched event. All strings are NUL-terminated (lengths exclude the NUL) and are
 * borrowed: they are valid only during the callback. data may contain NUL bytes, hence the
 * lengths.
 */
typedef struct bm_sse_event {
    const char *topic; /* the `event:` field, or "message" when absent or empty */
    size_t topic_len;
    const char *data; /* the `data:` lines joined with "\n" ("" for a lone `data:`) */
    size_t data_len;
    const char *id; /* the last event ID seen on this stream so far ("" if none) */
    size_t id_len;
} bm_sse_event_t;

/** Called for every dispatched event. Return 0 to go on, non-zero to stop bm_sse_feed. */
typedef int (*bm_sse_event_cb)(void *ud, const bm_sse_event_t *ev);

/**
 * Called for every comment line (a line starting with ':'), with the text after the
 * colon, truncated to max_line bytes (borrowed for the callback's duration).
 */
typedef void (*bm_sse_comment_cb)(void *ud, const char *text, size_t len);

/**
 * Called when an event is dropped: err is BM_ETOOBIG (over a bound) or BM_ENOMEM; reason is
 * a static string.
 */
typedef void (*bm_sse_error_cb)(void *ud, int err, const char *reason);

/** Parser settings; zero-initialise, then set what you need. Copied by bm_sse_new. */
typedef struct bm_sse_config {
    size_t max_data;              /* 0: BM_SSE_DEFAULT_MAX_DATA */
    size_t max_line;              /* 0: BM_SSE_DEFAULT_MAX_LINE */
    bm_sse_event_cb on_event;     /* may be NULL (events are then only counted) */
    bm_sse_comment_cb on_comment; /* may be NULL */
    bm_sse_error_cb on_error;     /* may be NULL */
    void *ud;                     /* passed to every callback */
} bm_sse_config_t;

/** Counters since bm_sse_new (bm_sse_reset keeps them). */
typedef struct bm_sse_stats {
    uint64_t events;   /* events dispatched */
    uint64_t comments; /* comment lines */
    uint64_t dropped;  /* events dropped over a bound or for lack of memory */
    uint64_t empty;    /* blank lines that ended an event without data (not dispatched) */
    uint64_t bytes;    /* bytes fed */
} bm_sse_stats_t;

typedef struct bm_sse bm_sse_t;

/** A new parser. Returns NULL on allocation failure. Caller frees with bm_sse_free. */
bm_sse_t *bm_sse_new(const bm_sse_config_t *cfg);

/** Frees the parser. NULL is ignored. Must not be called from inside a callback. */
void bm_sse_free(bm_sse_t *p);

/**
 * Feeds the next len bytes of the stream. Callbacks run synchronously from here. Returns
 * 0, or BM_ECANCELED when on_event returned non-zero: the rest of this chunk is not
 * parsed, and the parser must be reset or freed before it is fed again.
 */
int bm_sse_feed(bm_sse_t *p, const void *data, size_t len);

/**
 * Starts a new stream (after a reconnect): forgets the partial line and event, the BOM
 * state and a pending CR. Keeps the last event ID and the retry value (as EventSource
 * does across reconnections) and the counters.
 */
void bm_sse_reset(bm_sse_t *p);

/** The last `retry:` value in milliseconds, or -1 when none was received. */
int64_t bm_sse_retry_ms(const bm_sse_t *p);

/** A copy of the counters. */
bm_sse_stats_t bm_sse_stats(const bm_sse_t *p);

#endif /* BM_SSE_H */
