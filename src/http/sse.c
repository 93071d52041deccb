/* SPDX-License-Identifier: MIT */
/*
 * sse: the event-stream parser as an explicit line state machine.
 *
 * Input is consumed in runs of bytes that contain no line end; a run is appended straight
 * to the buffer its field needs (data, event type, id, retry) or only counted (unknown
 * fields), so a 1 MiB data line costs one bounds check per chunk, not per byte. Line ends
 * are handled one byte at a time: a CR sets cr_pending so that an LF that follows it,
 * even in the next chunk, is swallowed and CRLF stays one line end. The BOM is matched
 * byte by byte for the same reason. Because every decision depends only on the bytes
 * seen so far and never on where a chunk ended, any split gives the same events.
 *
 * The processing model is WHATWG HTML "Interpreting an event stream": the data buffer
 * gets each data value plus LF; a blank line dispatches when the data buffer is not
 * empty, after removing its final LF; the event type resets at every blank line; the last
 * event ID persists until an `id:` line changes it.
 */
#include "http/sse.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"

typedef enum {
    LS_START,       /* nothing of the current line seen yet */
    LS_NAME,        /* inside the field name */
    LS_VALUE_START, /* right after the colon: one space may follow */
    LS_VALUE,       /* inside the field value */
    LS_COMMENT,     /* inside a ':' comment line */
    LS_SKIP,        /* ignoring the rest of the line (event being dropped) */
} line_state_t;

typedef enum {
    F_OTHER,
    F_DATA,
    F_EVENT,
    F_ID,
    F_RETRY,
} field_t;

/* Beyond this capacity the data buffer is freed after each event instead of kept. */
#define KEEP_DATA_CAP (64u * 1024u)

struct bm_sse {
    bm_sse_config_t cfg;
    bm_sse_stats_t st;

    /* stream position */
    unsigned bom_pos; /* bytes of the UTF-8 BOM matched so far */
    bool started;     /* past the point where a BOM may appear */
    bool cr_pending;  /* the previous byte was a CR: an LF now is part of that line end */
    bool discarding;  /* an event was dropped: skip lines until a blank one */
    bool stopped;     /* a callback asked to stop; only reset or free help */

    /* current line */
    line_state_t ls;
    field_t field;
    char name[8];     /* the first bytes of the field name */
    size_t name_len;  /* the full length of the field name */
    size_t line_len;  /* bytes of the current line so far (line ends excluded) */
    bool value_nul;   /* the value of the current line contains a NUL byte */
    bm_str_t value;   /* value of an event/id/retry line */
    bm_str_t comment; /* text of a comment line (truncated to max_line) */

    /* current event and stream-wide state */
    bm_str_t data;    /* data lines, each followed by LF */
    bm_str_t topic;   /* event type buffer */
    bm_str_t last_id; /* last event ID buffer */
    int64_t retry_ms;
};

static const unsigned char BOM[3] = {0xef, 0xbb, 0xbf};

bm_sse_t *bm_sse_new(const bm_sse_config_t *cfg)
{
    bm_sse_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (cfg)
        p->cfg = *cfg;
    if (p->cfg.max_data == 0)
        p->cfg.max_data = BM_SSE_DEFAULT_MAX_DATA;
    if (p->cfg.max_line == 0)
        p->cfg.max_line = BM_SSE_DEFAULT_MAX_LINE;
    p->retry_ms = -1;
    p->ls = LS_START;
    return p;
}

void bm_sse_free(bm_sse_t *p)
{
    if (!p)
        return;
    bm_str_dispose(&p->value);
    bm_str_dispose(&p->comment);
    bm_str_dispose(&p->data);
    bm_str_dispose(&p->topic);
    bm_str_dispose(&p->last_id);
    free(p);
}

/* bm_str_append on a builder that never allocated must not be asked for 0 bytes (it
 * would dereference its NULL buffer), so empty appends stop here. */
static void str_add(bm_str_t *dst, const char *s, size_t n)
{
    if (n)
        bm_str_append(dst, s, n);
}

static void clear_data(bm_sse_t *p)
{
    if (p->data.b && p->data.b->cap > KEEP_DATA_CAP)
        bm_str_dispose(&p->data);
    else
        bm_str_clear(&p->data);
}

static void start_line(bm_sse_t *p)
{
    p->ls = LS_START;
    p->field = F_OTHER;
    p->name_len = 0;
    p->line_len = 0;
    p->value_nul = false;
    bm_str_clear(&p->value);
    bm_str_clear(&p->comment);
}

void bm_sse_reset(bm_sse_t *p)
{
    p->bom_pos = 0;
    p->started = false;
    p->cr_pending = false;
    p->discarding = false;
    p->stopped = false;
    start_line(p);
    clear_data(p);
    bm_str_clear(&p->topic);
}

int64_t bm_sse_retry_ms(const bm_sse_t *p)
{
    return p->retry_ms;
}

bm_sse_stats_t bm_sse_stats(const bm_sse_t *p)
{
    return p->st;
}

/* Drops the event being assembled and skips to the next blank line. */
static void drop_event(bm_sse_t *p, int err, const char *reason)
{
    p->st.dropped++;
    p->discarding = true;
    p->ls = LS_SKIP;
    clear_data(p);
    bm_str_clear(&p->topic);
    if (p->cfg.on_error)
        p->cfg.on_error(p->cfg.ud, err, reason);
}

static field_t field_of(const bm_sse_t *p)
{
    static const struct {
        const char *name;
        size_t len;
        field_t f;
    } known[] = {
        {"data", 4, F_DATA}, {"event", 5, F_EVENT}, {"id", 2, F_ID}, {"retry", 5, F_RETRY}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
        if (p->name_len == known[i].len && memcmp(p->name, known[i].name, known[i].len) == 0)
            return known[i].f;
    }
    return F_OTHER;
}

/* Counts n more bytes of a line against max_line; false (and the event dropped) if over. */
static bool line_fits(bm_sse_t *p, size_t n)
{
    if (n > p->cfg.max_line - p->line_len) {
        drop_event(p, BM_ETOOBIG, "SSE line over the size limit");
        return false;
    }
    p->line_len += n;
    return true;
}

/*
 * Appends to the data buffer. The buffer holds each data line followed by an LF, and the
 * last LF is removed at dispatch, so the buffer may reach max_data + 1 bytes only through
 * that final LF: values are checked against max_data (limit), line ends against
 * max_data + 1.
 */
static void append_data(bm_sse_t *p, const char *s, size_t n, size_t limit)
{
    size_t have = bm_str_len(&p->data);
    if (n > limit || have > limit - n) {
        drop_event(p, BM_ETOOBIG, "SSE event data over the size limit");
        return;
    }
    str_add(&p->data, s, n);
    if (p->data.oom)
        drop_event(p, BM_ENOMEM, "out of memory for SSE event data");
}

/* Consumes a run of bytes of the current line (no CR or LF in s[0..n)). */
static void line_bytes(bm_sse_t *p, const char *s, size_t n)
{
    while (n > 0) {
        switch (p->ls) {
        case LS_START:
            if (s[0] == ':')
                p->ls = LS_COMMENT;
            else
                p->ls = p->discarding ? LS_SKIP : LS_NAME;
            break;
        case LS_NAME: {
            const char *colon = memchr(s, ':', n);
            size_t k = colon ? (size_t)(colon - s) : n;
            if (!line_fits(p, k + (colon ? 1 : 0)))
                break;
            for (size_t i = 0; i < k && p->name_len + i < sizeof p->name; i++)
                p->name[p->name_len + i] = s[i];
            p->name_len += k;
            s += k;
            n -= k;
            if (colon) {
                s++;
                n--;
                p->field = field_of(p);
                p->ls = LS_VALUE_START;
            }
            break;
        }
        case LS_VALUE_START:
            p->ls = LS_VALUE;
            if (s[0] == ' ') {
                if (!line_fits(p, 1))
                    break;
                s++;
                n--;
            }
            break;
        case LS_VALUE:
            if (p->field == F_DATA) {
                append_data(p, s, n, p->cfg.max_data);
            } else if (line_fits(p, n)) {
                if (p->field != F_OTHER) {
                    if (memchr(s, '\0', n))
                        p->value_nul = true;
                    str_add(&p->value, s, n);
                    if (p->value.oom)
                        drop_event(p, BM_ENOMEM, "out of memory for an SSE field");
                }
            }
            n = 0;
            break;
        case LS_COMMENT: {
            /* The leading ':' is not part of the text; comments are never an error, only
             * their reported text is bounded. */
            size_t skip = (p->line_len == 0) ? 1 : 0;
            size_t room = p->cfg.max_line - bm_str_len(&p->comment);
            size_t k = n - skip < room ? n - skip : room;
            str_add(&p->comment, s + skip, k);
            p->line_len += n; /* may exceed max_line; only used to spot the colon */
            n = 0;
            break;
        }
        case LS_SKIP:
            n = 0;
            break;
        }
    }
}

static bool all_digits(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
    }
    return true;
}

static void set_str(bm_sse_t *p, bm_str_t *dst, const bm_str_t *src)
{
    bm_str_clear(dst);
    str_add(dst, bm_str_data(src), bm_str_len(src));
    if (dst->oom) {
        bm_str_clear(dst);
        drop_event(p, BM_ENOMEM, "out of memory for an SSE field");
    }
}

/* The line ended with a name and maybe a value: apply the field. */
static void apply_field(bm_sse_t *p)
{
    if (p->ls == LS_NAME)
        p->field = field_of(p); /* a line without a colon: the whole line is the name */
    switch (p->field) {
    case F_DATA:
        append_data(p, "\n", 1, p->cfg.max_data + 1);
        break;
    case F_EVENT:
        set_str(p, &p->topic, &p->value);
        break;
    case F_ID:
        if (!p->value_nul)
            set_str(p, &p->last_id, &p->value);
        break;
    case F_RETRY: {
        const char *v = bm_str_data(&p->value);
        size_t n = bm_str_len(&p->value);
        if (!all_digits(v, n))
            break;
        int64_t ms = 0;
        for (size_t i = 0; i < n; i++) {
            int d = v[i] - '0';
            if (ms > (INT64_MAX - d) / 10) {
                ms = -1; /* beyond any sensible delay: ignore the field */
                break;
            }
            ms = ms * 10 + d;
        }
        if (ms >= 0)
            p->retry_ms = ms;
        break;
    }
    case F_OTHER:
        break;
    }
}

static void dispatch(bm_sse_t *p)
{
    size_t n = bm_str_len(&p->data);
    if (n == 0) {
        /* No data line since the last dispatch: nothing to deliver, but the event type
         * still resets. */
        p->st.empty++;
        bm_str_clear(&p->topic);
        return;
    }
    p->data.b->len = n - 1; /* drop the LF after the last data line */
    p->data.b->data[n - 1] = '\0';
    bm_sse_event_t ev;
    if (bm_str_len(&p->topic) > 0) {
        ev.topic = bm_str_data(&p->topic);
        ev.topic_len = bm_str_len(&p->topic);
    } else {
        ev.topic = "message";
        ev.topic_len = 7;
    }
    ev.data = bm_str_data(&p->data);
    ev.data_len = n - 1;
    ev.id = bm_str_data(&p->last_id);
    ev.id_len = bm_str_len(&p->last_id);
    p->st.events++;
    int rc = p->cfg.on_event ? p->cfg.on_event(p->cfg.ud, &ev) : 0;
    clear_data(p);
    bm_str_clear(&p->topic);
    if (rc != 0)
        p->stopped = true;
}

static void end_line(bm_sse_t *p)
{
    switch (p->ls) {
    case LS_START:
        if (p->discarding) {
            p->discarding = false; /* resynchronised: the dropped event ends here */
            clear_data(p);
            bm_str_clear(&p->topic);
        } else {
            dispatch(p);
        }
        break;
    case LS_NAME:
    case LS_VALUE_START:
    case LS_VALUE:
        apply_field(p);
        break;
    case LS_COMMENT:
        p->st.comments++;
        if (p->cfg.on_comment)
            p->cfg.on_comment(p->cfg.ud, bm_str_data(&p->comment), bm_str_len(&p->comment));
        break;
    case LS_SKIP:
        break;
    }
    start_line(p);
}

/* Where the first CR or LF at or after `from` is in s[0..n), n if none. *cr and *lf keep
 * the next of each found so far (n: none left), so that each memchr runs past a byte only
 * once however the two alternate: a linear pass, and no per-byte loop of our own. */
static size_t next_line_end(const char *s, size_t n, size_t from, size_t *cr, size_t *lf)
{
    if (*cr < from) {
        const char *q = memchr(s + from, '\r', n - from);
        *cr = q ? (size_t)(q - s) : n;
    }
    if (*lf < from) {
        const char *q = memchr(s + from, '\n', n - from);
        *lf = q ? (size_t)(q - s) : n;
    }
    return *cr < *lf ? *cr : *lf;
}

static void process(bm_sse_t *p, const char *s, size_t n)
{
    size_t i = 0;
    size_t cr = 0, lf = 0; /* below i + 1: not looked for yet */
    while (i < n && !p->stopped) {
        char c = s[i];
        if (p->cr_pending) {
            p->cr_pending = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            p->cr_pending = c == '\r';
            i++;
            end_line(p);
            continue;
        }
        size_t j = i + 1 < n ? next_line_end(s, n, i + 1, &cr, &lf) : n;
        line_bytes(p, s + i, j - i);
        i = j;
    }
}

int bm_sse_feed(bm_sse_t *p, const void *data, size_t len)
{
    if (p->stopped)
        return BM_ECANCELED;
    if (len == 0)
        return 0;
    const char *s = data;
    size_t i = 0;
    p->st.bytes += len;
    while (!p->started && i < len) {
        if ((unsigned char)s[i] == BOM[p->bom_pos]) {
            i++;
            if (++p->bom_pos == 3)
                p->started = true;
        } else {
            /* Not a BOM after all: the bytes matched so far are ordinary input. */
            p->started = true;
            process(p, (const char *)BOM, p->bom_pos);
        }
    }
    process(p, s + i, len - i);
    return p->stopped ? BM_ECANCELED : 0;
}
