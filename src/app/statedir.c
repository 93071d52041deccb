/* SPDX-License-Identifier: MIT */
/*
 * statedir: one state file per network, made of the sections modules register; written
 * atomically at a bounded rate and at shutdown, read at start, never fatal. See statedir.h.
 */
#include "app/statedir.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/statefile.h"

#define MAX_SECTIONS 8
#define DEFAULT_INTERVAL_MS 30000
#define FORMAT_NAME "beaconmux-state"

typedef struct section {
    const char *name;
    bm_state_export_fn exp;
    bm_state_import_fn imp;
    void *ud;
} section_t;

struct bm_statedir {
    bm_clock_t *clock;
    char *dir, *file, *network;
    char *genesis; /* NULL when not configured */
    uint32_t interval_ms;
    section_t sec[MAX_SECTIONS];
    size_t n_sec;
    bm_timer_t *timer;
    bool stopped;
    bm_buf_t *last; /* the bytes of the last successful save, to skip unchanged ones */
    uint64_t writes, failures;
    bm_log_limit_t lim;
};

bm_statedir_t *bm_statedir_new(bm_clock_t *clock, const bm_statedir_opts_t *o)
{
    bm_statedir_t *sd = calloc(1, sizeof *sd);
    if (!sd)
        return NULL;
    sd->clock = clock;
    sd->dir = strdup(o->dir);
    sd->file = strdup(o->file);
    sd->network = strdup(o->network ? o->network : "");
    sd->genesis = o->genesis ? strdup(o->genesis) : NULL;
    sd->interval_ms = o->interval_ms ? o->interval_ms : DEFAULT_INTERVAL_MS;
    sd->lim.window_ms = 60000;
    sd->lim.burst = 3;
    if (!sd->dir || !sd->file || !sd->network || (o->genesis && !sd->genesis)) {
        bm_statedir_free(sd);
        return NULL;
    }
    return sd;
}

int bm_statedir_add(bm_statedir_t *sd, const char *name, bm_state_export_fn exp,
                    bm_state_import_fn imp, void *ud)
{
    if (!sd || !name || !exp || !imp || sd->n_sec == MAX_SECTIONS)
        return BM_EINVAL;
    for (size_t i = 0; i < sd->n_sec; i++)
        if (!strcmp(sd->sec[i].name, name))
            return BM_EINVAL;
    sd->sec[sd->n_sec++] = (section_t){name, exp, imp, ud};
    return 0;
}

static void path_of(const bm_statedir_t *sd, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", sd->dir, sd->file);
}

/* Checks the document's header; NULL when it is ours, else why not. */
static const char *header_problem(const bm_statedir_t *sd, json_object *doc, char *buf, size_t n)
{
    json_object *v;
    if (!json_object_is_type(doc, json_type_object))
        return "not a JSON object";
    if (!json_object_object_get_ex(doc, "format", &v) ||
        !json_object_is_type(v, json_type_string) ||
        strcmp(json_object_get_string(v), FORMAT_NAME) != 0)
        return "not a beaconmux state file";
    if (!json_object_object_get_ex(doc, "version", &v) || !json_object_is_type(v, json_type_int) ||
        json_object_get_int64(v) != BM_STATEDIR_VERSION) {
        snprintf(buf, n, "format version %s, this beaconmux reads version %d",
                 v ? json_object_get_string(v) : "missing", BM_STATEDIR_VERSION);
        return buf;
    }
    if (!json_object_object_get_ex(doc, "network", &v) ||
        !json_object_is_type(v, json_type_string) ||
        strcmp(json_object_get_string(v), sd->network) != 0) {
        snprintf(buf, n, "written for network \"%.40s\", this one is \"%.40s\"",
                 v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "?",
                 sd->network);
        return buf;
    }
    if (sd->genesis && json_object_object_get_ex(doc, "genesisValidatorsRoot", &v) &&
        (!json_object_is_type(v, json_type_string) ||
         strcasecmp(json_object_get_string(v), sd->genesis) != 0))
        return "written for another genesisValidatorsRoot";
    if (!json_object_object_get_ex(doc, "sections", &v) ||
        !json_object_is_type(v, json_type_object))
        return "no sections";
    return NULL;
}

static int restore_sections(bm_statedir_t *sd, json_object *sections, const char *path)
{
    uint64_t now = bm_clock_wall_now(sd->clock);
    int restored = 0;
    for (size_t i = 0; i < sd->n_sec; i++) {
        json_object *v;
        if (!json_object_object_get_ex(sections, sd->sec[i].name, &v))
            continue;
        size_t len;
        const char *text = json_object_to_json_string_length(v, JSON_C_TO_STRING_PLAIN, &len);
        int n = text ? sd->sec[i].imp(sd->sec[i].ud, text, len, now) : BM_ENOMEM;
        if (n < 0) {
            bm_log(BM_LOG_WARN, "state %s: section %s ignored: %s", path, sd->sec[i].name,
                   bm_strerror(n));
            continue;
        }
        bm_log(BM_LOG_INFO, "state %s: %s restored (%d entr%s)", path, sd->sec[i].name, n,
               n == 1 ? "y" : "ies");
        restored++;
    }
    return restored;
}

/* A file that was not restored is kept for the operator under another name, so that the
 * next save does not destroy it. */
static void set_aside(const char *path)
{
    char bad[PATH_MAX + 80];
    snprintf(bad, sizeof bad, "%s.bad", path);
    if (rename(path, bad) == 0)
        bm_log(BM_LOG_WARN, "state %s: kept as %s", path, bad);
}

int bm_statedir_load(bm_statedir_t *sd)
{
    char path[PATH_MAX + 64], why[256] = "";
    path_of(sd, path, sizeof path);
    bm_str_t text = BM_STR_INIT;
    int rc = bm_statefile_read(path, BM_STATEDIR_MAX_BYTES, &text, why, sizeof why);
    if (rc == BM_ENOTFOUND) {
        bm_log(BM_LOG_INFO, "state %s: none yet, starting empty", path);
        bm_str_dispose(&text);
        return rc;
    }
    if (rc) {
        bm_log(BM_LOG_WARN, "state %s: cannot be read (%s), ignored: starting empty", path,
               rc == BM_ETOOBIG ? "larger than 256 MiB"
               : why[0]         ? why
                                : bm_strerror(rc));
        bm_str_dispose(&text);
        if (rc == BM_ETOOBIG)
            set_aside(path);
        return rc;
    }
    json_object *doc = NULL;
    bm_json_error_t jerr;
    rc = bm_json_parse(bm_str_data(&text), bm_str_len(&text), BM_STATEDIR_MAX_BYTES, &doc, &jerr);
    bm_str_dispose(&text);
    if (rc) {
        bm_log(BM_LOG_WARN, "state %s: corrupt at byte %zu (%s), ignored: starting empty", path,
               jerr.offset, jerr.msg);
        set_aside(path);
        return BM_EINVAL;
    }
    const char *problem = header_problem(sd, doc, why, sizeof why);
    if (problem) {
        bm_log(BM_LOG_WARN, "state %s: %s, ignored: starting empty", path, problem);
        json_object_put(doc);
        set_aside(path);
        return BM_EINVAL;
    }
    json_object *sections = NULL;
    json_object_object_get_ex(doc, "sections", &sections);
    rc = restore_sections(sd, sections, path);
    json_object_put(doc);
    return rc;
}

static int build_document(bm_statedir_t *sd, bm_str_t *out)
{
    uint64_t now = bm_clock_wall_now(sd->clock);
    bm_str_printf(out, "{\"format\":\"%s\",\"version\":%d,\"network\":", FORMAT_NAME,
                  BM_STATEDIR_VERSION);
    bm_str_json_string(out, sd->network, strlen(sd->network));
    if (sd->genesis) {
        bm_str_puts(out, ",\"genesisValidatorsRoot\":");
        bm_str_json_string(out, sd->genesis, strlen(sd->genesis));
    }
    bm_str_puts(out, ",\"savedMs\":");
    bm_str_u64(out, now);
    bm_str_puts(out, ",\"sections\":{");
    size_t k = 0;
    for (size_t i = 0; i < sd->n_sec; i++) {
        bm_str_t part = BM_STR_INIT;
        int rc = sd->sec[i].exp(sd->sec[i].ud, now, &part);
        if (rc == 0 && !part.oom && bm_str_len(&part)) {
            bm_str_printf(out, "%s\"%s\":", k++ ? "," : "", sd->sec[i].name);
            bm_str_append(out, bm_str_data(&part), bm_str_len(&part));
        } else {
            bm_log_limited(&sd->lim, BM_LOG_WARN, "state: section %s not saved: %s",
                           sd->sec[i].name, bm_strerror(rc ? rc : BM_ENOMEM));
        }
        bm_str_dispose(&part);
    }
    bm_str_puts(out, "}}\n");
    return out->oom ? BM_ENOMEM : 0;
}

/* The document without its savedMs: what decides whether a save changes anything. */
static bool same_as_last(const bm_statedir_t *sd, const bm_str_t *doc)
{
    if (!sd->last)
        return false;
    const char *a = sd->last->data, *b = bm_str_data(doc);
    const char *sa = strstr(a, ",\"sections\":"), *sb = strstr(b, ",\"sections\":");
    return sa && sb && !strcmp(sa, sb);
}

int bm_statedir_save(bm_statedir_t *sd)
{
    bm_str_t doc = BM_STR_INIT;
    int rc = build_document(sd, &doc);
    if (rc) {
        bm_str_dispose(&doc);
        sd->failures++;
        bm_log_limited(&sd->lim, BM_LOG_WARN, "state: not saved: %s", bm_strerror(rc));
        return rc;
    }
    if (same_as_last(sd, &doc)) {
        bm_str_dispose(&doc);
        return 0;
    }
    char why[160] = "";
    rc =
        bm_statefile_write(sd->dir, sd->file, bm_str_data(&doc), bm_str_len(&doc), why, sizeof why);
    if (rc) {
        sd->failures++;
        bm_log_limited(&sd->lim, BM_LOG_WARN,
                       "state %s/%s: not saved (%s); the previous file is unchanged", sd->dir,
                       sd->file, why[0] ? why : bm_strerror(rc));
        bm_str_dispose(&doc);
        return rc;
    }
    sd->writes++;
    bm_buf_unref(sd->last);
    sd->last = bm_str_finish(&doc);
    return 0;
}

static void on_timer(bm_timer_t *t, void *ud)
{
    bm_statedir_t *sd = ud;
    bm_statedir_save(sd);
    if (!sd->stopped)
        bm_timer_start(t, sd->interval_ms);
}

void bm_statedir_start(bm_statedir_t *sd)
{
    if (!sd || sd->stopped)
        return;
    if (!sd->timer)
        sd->timer = bm_timer_new(sd->clock, on_timer, sd);
    if (sd->timer)
        bm_timer_start(sd->timer, sd->interval_ms);
}

void bm_statedir_stop(bm_statedir_t *sd)
{
    if (!sd || sd->stopped)
        return;
    sd->stopped = true;
    if (bm_statedir_save(sd) == 0)
        bm_log(BM_LOG_INFO, "state %s/%s: saved at shutdown", sd->dir, sd->file);
    if (sd->timer)
        bm_timer_close(sd->timer, NULL, NULL);
    sd->timer = NULL;
}

void bm_statedir_free(bm_statedir_t *sd)
{
    if (!sd)
        return;
    bm_buf_unref(sd->last);
    free(sd->dir);
    free(sd->file);
    free(sd->network);
    free(sd->genesis);
    free(sd);
}

uint64_t bm_statedir_writes(const bm_statedir_t *sd)
{
    return sd ? sd->writes : 0;
}

uint64_t bm_statedir_failures(const bm_statedir_t *sd)
{
    return sd ? sd->failures : 0;
}
