/* SPDX-License-Identifier: MIT */
/*
 * log: formatting and writing of log lines. Lines are assembled in a stack buffer and
 * written with one fwrite so that concurrent processes sharing a terminal do not
 * interleave within a line.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"

static bm_log_level_t g_level = BM_DEFAULT_LOG_LEVEL;
static bm_log_format_t g_format = BM_DEFAULT_LOG_FORMAT;
static FILE *g_out;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void bm_log_setup(bm_log_level_t level, bm_log_format_t format, FILE *out)
{
    g_level = level;
    g_format = format;
    g_out = out;
}

int bm_log_level_parse(const char *s, bm_log_level_t *out)
{
    for (int i = 0; i <= BM_LOG_OFF; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (bm_log_level_t)i;
            return 0;
        }
    }
    if (strcmp(s, "warning") == 0) {
        *out = BM_LOG_WARN;
        return 0;
    }
    return BM_EINVAL;
}

int bm_log_format_parse(const char *s, bm_log_format_t *out)
{
    if (strcmp(s, "text") == 0) {
        *out = BM_LOG_TEXT;
        return 0;
    }
    if (strcmp(s, "json") == 0) {
        *out = BM_LOG_JSON;
        return 0;
    }
    return BM_EINVAL;
}

bool bm_log_enabled(bm_log_level_t level)
{
    return level >= g_level && level < BM_LOG_OFF;
}

/* Appends `s` to out[*pos..cap) as the inside of a JSON string. */
static void append_json_escaped(char *out, size_t cap, size_t *pos, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (; *s && *pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[(*pos)++] = '\\';
            out[(*pos)++] = (char)c;
        } else if (c == '\n') {
            out[(*pos)++] = '\\';
            out[(*pos)++] = 'n';
        } else if (c < 0x20) {
            memcpy(out + *pos, "\\u00", 4);
            *pos += 4;
            out[(*pos)++] = hex[c >> 4];
            out[(*pos)++] = hex[c & 15];
        } else {
            out[(*pos)++] = (char)c;
        }
    }
}

/* The time stamp of a line: "2026-11-29T16:01:44.123Z". */
static void timestamp(char *ts, size_t n)
{
    uint64_t now = bm_clock_now_ms();
    time_t secs = (time_t)(now / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(ts, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(now % 1000));
}

static void write_line(const char *line, size_t n)
{
    FILE *out = g_out ? g_out : stderr;
    fwrite(line, 1, n, out);
    fflush(out);
}

/* A JSON line whose members after "msg" the caller wrote. */
static void log_raw_json(const char *msg, const char *fields)
{
    char ts[64], line[4096 + 64];
    timestamp(ts, sizeof ts);
    size_t pos =
        (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"info\",\"msg\":\"", ts);
    append_json_escaped(line, sizeof line - 3, &pos, msg);
    line[pos++] = '"';
    size_t fl = strlen(fields);
    if (fl && pos + fl + 3 < sizeof line) {
        line[pos++] = ',';
        memcpy(line + pos, fields, fl);
        pos += fl;
    }
    line[pos++] = '}';
    line[pos++] = '\n';
    write_line(line, pos);
}

static void vlog(bm_log_level_t level, const char *fmt, va_list ap)
{
    char msg[2048];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    if (n < 0)
        return;

    char ts[64];
    timestamp(ts, sizeof ts);

    char line[4096 + 64];
    size_t pos = 0;
    if (g_format == BM_LOG_JSON) {
        pos = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts,
                               level_names[level]);
        append_json_escaped(line, sizeof line - 3, &pos, msg);
        line[pos++] = '"';
        line[pos++] = '}';
    } else {
        int k = snprintf(line, sizeof line - 2, "%s %-5s %s", ts, level_names[level], msg);
        pos = k < 0 ? 0 : ((size_t)k > sizeof line - 3 ? sizeof line - 3 : (size_t)k);
    }
    line[pos++] = '\n';
    write_line(line, pos);
}

static void log_always(bm_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_always(bm_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

bm_log_format_t bm_log_get_format(void)
{
    return g_format;
}

void bm_log_record(const char *msg, const char *fields)
{
    if (g_level == BM_LOG_OFF)
        return;
    if (g_format == BM_LOG_JSON)
        log_raw_json(msg, fields);
    else
        log_always(BM_LOG_INFO, "%s %s", msg, fields);
}

void bm_log(bm_log_level_t level, const char *fmt, ...)
{
    if (!bm_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void bm_log_limited(bm_log_limit_t *lim, bm_log_level_t level, const char *fmt, ...)
{
    if (!bm_log_enabled(level))
        return;
    uint64_t window = lim->window_ms ? lim->window_ms : BM_LOG_LIMIT_WINDOW_MS;
    uint32_t burst = lim->burst ? lim->burst : BM_LOG_LIMIT_BURST;
    uint64_t now = bm_clock_mono_ms();
    if (lim->window_start == 0 || now - lim->window_start >= window) {
        if (lim->suppressed)
            bm_log(level, "(%u similar messages suppressed)", lim->suppressed);
        lim->window_start = now;
        lim->count = 0;
        lim->suppressed = 0;
    }
    if (lim->count >= burst) {
        lim->suppressed++;
        return;
    }
    lim->count++;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void bm_assert_fail(const char *expr, const char *file, int line)
{
    /* Written whatever the configured level: an abort must always say why. */
    log_always(BM_LOG_ERROR, "assertion failed: %s (%s:%d)", expr, file, line);
    abort();
}
