/* SPDX-License-Identifier: MIT */
/*
 * log: the only way the project writes diagnostics. One line per message, as text
 * ("2026-11-29T16:01:44.123Z info  message") or as a JSON object per line for log
 * collectors. Per-request errors go through a rate limiter so that a broken upstream
 * cannot flood the log at request rate.
 */
#ifndef BM_LOG_H
#define BM_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    BM_LOG_DEBUG = 0,
    BM_LOG_INFO = 1,
    BM_LOG_WARN = 2,
    BM_LOG_ERROR = 3,
    BM_LOG_OFF = 4,
} bm_log_level_t;

typedef enum {
    BM_LOG_TEXT = 0,
    BM_LOG_JSON = 1,
} bm_log_format_t;

/** Sets level, format and destination (NULL: stderr). Defaults: info, text, stderr. */
void bm_log_setup(bm_log_level_t level, bm_log_format_t format, FILE *out);

/** Parses "debug", "info", "warn", "error" or "off". Returns 0 or BM_EINVAL. */
int bm_log_level_parse(const char *s, bm_log_level_t *out);

/** Parses "text" or "json". Returns 0 or BM_EINVAL. */
int bm_log_format_parse(const char *s, bm_log_format_t *out);

/** True when a message at this level would be written (skip building costly messages). */
bool bm_log_enabled(bm_log_level_t level);

/** The format lines are written in. */
bm_log_format_t bm_log_get_format(void);

/**
 * Writes one line at info level whatever the configured level (only "off" silences it):
 * for records the operator asked for with a switch of their own (the access log). `msg` is
 * the line's message and `fields` follow it: in text after a space, as they are; in JSON as
 * members of the line's object after "msg" (`"key":value,...`, already JSON).
 */
void bm_log_record(const char *msg, const char *fields);

/** Writes one line at the given level. */
void bm_log(bm_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The limit of a rate limiter left at zero: 10 lines per 10 s, enough to see what goes on,
 * never a flood from a failing node. The one default for every module's per-request errors. */
#define BM_LOG_LIMIT_WINDOW_MS 10000
#define BM_LOG_LIMIT_BURST 10

/*
 * A rate limiter for one class of message (embed one per upstream or per error kind).
 * At most `burst` lines per `window_ms`; when a window closes with lines suppressed,
 * the next line that passes says how many were dropped. Zero-initialise; set window_ms
 * and burst only for a class that needs other limits (left 0: BM_LOG_LIMIT_*).
 */
typedef struct bm_log_limit {
    uint64_t window_ms;
    uint32_t burst;
    uint64_t window_start;
    uint32_t count;
    uint32_t suppressed;
} bm_log_limit_t;

/** Like bm_log, but subject to the limiter `lim`. */
void bm_log_limited(bm_log_limit_t *lim, bm_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Aborts with a log line naming the expression, file and line. Stays on in release builds. */
#define bm_assert(expr) ((expr) ? (void)0 : bm_assert_fail(#expr, __FILE__, __LINE__))

void bm_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#endif /* BM_LOG_H */
