/* SPDX-License-Identifier: MIT */
/*
 * expo: the text exposition writer (see expo.h for the rules it keeps).
 */
#include "observe/expo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

static bool name_char(int c, bool first, bool colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return true;
    if (c == ':')
        return colon;
    return !first && c >= '0' && c <= '9';
}

static bool name_ok(const char *s, bool colon)
{
    if (!s || !*s)
        return false;
    for (size_t i = 0; s[i]; i++)
        if (!name_char((unsigned char)s[i], i == 0, colon))
            return false;
    return true;
}

bool bm_expo_metric_name_ok(const char *s)
{
    return name_ok(s, true);
}

bool bm_expo_label_name_ok(const char *s)
{
    return name_ok(s, false) && strncmp(s, "__", 2) != 0;
}

static const char *type_name(bm_expo_type_t t)
{
    switch (t) {
    case BM_EXPO_COUNTER:
        return "counter";
    case BM_EXPO_GAUGE:
        return "gauge";
    case BM_EXPO_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

void bm_expo_family(bm_str_t *o, const char *name, bm_expo_type_t type, const char *help)
{
    bm_assert(bm_expo_metric_name_ok(name));
    bm_str_printf(o, "# HELP %s ", name);
    for (const char *p = help; *p; p++) {
        if (*p == '\\')
            bm_str_puts(o, "\\\\");
        else if (*p == '\n')
            bm_str_puts(o, "\\n");
        else
            bm_str_putc(o, *p);
    }
    bm_str_printf(o, "\n# TYPE %s %s\n", name, type_name(type));
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* overlong forms, surrogates and values past U+10FFFF */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A label value: escaped, valid UTF-8, at most BM_EXPO_LABEL_MAX bytes of the input. Runs
 * of plain ASCII (the usual value) are appended at once. */
static void label_value(bm_str_t *o, const char *v)
{
    const unsigned char *s = (const unsigned char *)(v ? v : "");
    size_t n = strlen((const char *)s), used = 0;
    if (n > BM_EXPO_LABEL_MAX + 4)
        n = BM_EXPO_LABEL_MAX + 4; /* enough to find the last character that fits */
    while (used < n) {
        size_t run = used;
        while (run < n && run < BM_EXPO_LABEL_MAX && s[run] >= 0x20 && s[run] < 0x80 &&
               s[run] != '\\' && s[run] != '"')
            run++;
        bm_str_append(o, s + used, run - used);
        used = run;
        if (used >= n || used >= BM_EXPO_LABEL_MAX)
            break;
        size_t len = utf8_len(s + used, n - used);
        if (used + (len ? len : 1) > BM_EXPO_LABEL_MAX)
            break;
        unsigned char c = s[used];
        if (len == 0)
            bm_str_putc(o, '?');
        else if (c == '\\')
            bm_str_puts(o, "\\\\");
        else if (c == '"')
            bm_str_puts(o, "\\\"");
        else if (c == '\n')
            bm_str_puts(o, "\\n");
        else
            bm_str_append(o, s + used, len);
        used += len ? len : 1;
    }
}

static void labels_out(bm_str_t *o, const bm_label_t *labels, size_t n, const char *le)
{
    if (n == 0 && !le)
        return;
    bm_str_putc(o, '{');
    for (size_t i = 0; i < n; i++) {
        bm_assert(bm_expo_label_name_ok(labels[i].name));
        if (i)
            bm_str_putc(o, ',');
        bm_str_puts(o, labels[i].name);
        bm_str_puts(o, "=\"");
        label_value(o, labels[i].value);
        bm_str_putc(o, '"');
    }
    if (le) {
        bm_str_puts(o, n ? ",le=\"" : "le=\"");
        bm_str_puts(o, le);
        bm_str_putc(o, '"');
    }
    bm_str_putc(o, '}');
}

/* `v` as the exposition writes a float, into b[0..n) (n >= 32). */
static void number_text(char *b, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(b, n, "NaN");
    } else if (isinf(v)) {
        snprintf(b, n, "%s", v > 0 ? "+Inf" : "-Inf");
    } else if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(b, n, "%.0f", v); /* exact integers as integers */
    } else {
        for (int prec = 6; prec <= 17; prec++) { /* the shortest that reads back the same */
            snprintf(b, n, "%.*g", prec, v);
            if (strtod(b, NULL) == v)
                break;
        }
    }
}

void bm_expo_number(bm_str_t *o, double v)
{
    if (v >= 0 && v < 9007199254740992.0 && v == floor(v)) {
        bm_str_u64(o, (uint64_t)v); /* the common case, without printf */
        return;
    }
    char b[48];
    number_text(b, sizeof b, v);
    bm_str_puts(o, b);
}

/* The start of a sample line: name + suffix, the labels (with `le` when given), a space. */
static void sample_start(bm_str_t *o, const char *name, const char *suffix,
                         const bm_label_t *labels, size_t n, const char *le)
{
    bm_str_puts(o, name);
    bm_str_puts(o, suffix);
    labels_out(o, labels, n, le);
    bm_str_putc(o, ' ');
}

/* A sample line with a count. */
static void u64_line(bm_str_t *o, const char *name, const char *suffix, const bm_label_t *labels,
                     size_t n, const char *le, uint64_t v)
{
    sample_start(o, name, suffix, labels, n, le);
    bm_str_u64(o, v);
    bm_str_putc(o, '\n');
}

/* A sample line with a float. */
static void number_line(bm_str_t *o, const char *name, const char *suffix, const bm_label_t *labels,
                        size_t n, double v)
{
    sample_start(o, name, suffix, labels, n, NULL);
    bm_expo_number(o, v);
    bm_str_putc(o, '\n');
}

void bm_expo_u64(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n, uint64_t v)
{
    u64_line(o, name, "", labels, n, NULL, v);
}

void bm_expo_double(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n, double v)
{
    number_line(o, name, "", labels, n, v);
}

void bm_expo_hist(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n,
                  const bm_hist_t *h)
{
    uint64_t cum = 0;
    for (uint32_t i = 0; i <= h->n_bounds; i++) {
        cum += h->counts[i];
        char buf[48];
        number_text(buf, sizeof buf, i == h->n_bounds ? INFINITY : h->bounds[i]);
        u64_line(o, name, "_bucket", labels, n, buf, cum);
    }
    number_line(o, name, "_sum", labels, n, h->sum);
    u64_line(o, name, "_count", labels, n, NULL, h->count);
}

/* ---- merging the texts of several networks -------------------------------------------- */

/* One family of a text: its name, its header lines and its sample lines. */
typedef struct fam {
    const char *name;
    size_t name_len;
    const char *head, *samples, *end; /* head..samples: # lines; samples..end: samples */
} fam_t;

/* The families of `t` into *out (caller frees). Returns their count, or -1 on no memory. */
static long split_families(const char *t, fam_t **out)
{
    size_t cap = 64, n = 0;
    fam_t *f = malloc(cap * sizeof *f);
    if (!f)
        return -1;
    const char *p = t;
    while (*p) {
        if (strncmp(p, "# HELP ", 7) != 0) { /* a line outside any family: skipped */
            const char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : p + strlen(p);
            continue;
        }
        if (n == cap) {
            fam_t *g = realloc(f, (cap *= 2) * sizeof *f);
            if (!g) {
                free(f);
                return -1;
            }
            f = g;
        }
        fam_t *x = &f[n++];
        x->head = p;
        x->name = p + 7;
        x->name_len = strcspn(x->name, " \n");
        /* its header: its # HELP and what follows up to the next # HELP (# TYPE); a family
         * without samples ends where the next one's # HELP starts */
        do {
            const char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : p + strlen(p);
        } while (*p == '#' && strncmp(p, "# HELP ", 7) != 0);
        x->samples = p;
        while (*p && *p != '#') {
            const char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : p + strlen(p);
        }
        x->end = p;
    }
    *out = f;
    return (long)n;
}

/* Appends the sample lines samples..end with label="value" first on each. */
static void relabel(bm_str_t *o, const char *p, const char *end, const char *label,
                    const char *value)
{
    if (!value) {
        bm_str_append(o, p, (size_t)(end - p));
        return;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        size_t name_len = strcspn(p, "{ \n");
        bm_str_append(o, p, name_len);
        bm_str_putc(o, '{');
        bm_str_puts(o, label);
        bm_str_puts(o, "=\"");
        label_value(o, value);
        bm_str_putc(o, '"');
        const char *rest = p + name_len;
        if (*rest == '{') {
            rest++;
            if (*rest != '}')
                bm_str_putc(o, ',');
        } else {
            bm_str_putc(o, '}');
        }
        bm_str_append(o, rest, (size_t)(line_end - rest));
        bm_str_putc(o, '\n');
        p = nl ? nl + 1 : end;
    }
}

int bm_expo_merge(const char *const *texts, const char *label, const char *const *values, size_t n,
                  bm_str_t *out)
{
    bm_assert(bm_expo_label_name_ok(label));
    fam_t **fams = calloc(n ? n : 1, sizeof *fams);
    long *counts = calloc(n ? n : 1, sizeof *counts);
    int rc = fams && counts ? 0 : BM_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++)
        if ((counts[i] = split_families(texts[i], &fams[i])) < 0)
            rc = BM_ENOMEM;
    /* each family at its first appearance: its header, then every text's samples of it */
    for (size_t i = 0; i < n && !rc; i++)
        for (long k = 0; k < counts[i]; k++) {
            const fam_t *x = &fams[i][k];
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++)
                for (long m = 0; m < counts[j] && !seen; m++)
                    seen = fams[j][m].name_len == x->name_len &&
                           memcmp(fams[j][m].name, x->name, x->name_len) == 0;
            if (seen)
                continue;
            bm_str_append(out, x->head, (size_t)(x->samples - x->head));
            for (size_t j = i; j < n; j++)
                for (long m = 0; m < counts[j]; m++)
                    if (fams[j][m].name_len == x->name_len &&
                        memcmp(fams[j][m].name, x->name, x->name_len) == 0)
                        relabel(out, fams[j][m].samples, fams[j][m].end, label, values[j]);
        }
    for (size_t i = 0; fams && i < n; i++)
        free(fams[i]);
    free(fams);
    free(counts);
    return rc ? rc : out->oom ? BM_ENOMEM : 0;
}
