/* SPDX-License-Identifier: MIT */
/*
 * servedrec: a served duty read to one line of text and back (see servedrec.h).
 */
#include "app/servedrec.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"

#define MAX_LINE 8192
#define FIELDS 8

static void put_node(bm_str_t *out, int i, bm_servedrec_id_fn id_of, void *ud)
{
    const char *id = i >= 0 ? id_of(ud, i) : NULL;
    bm_str_puts(out, id ? id : "-");
}

static void put_answer(bm_str_t *out, const bm_served_answer_t *a)
{
    bm_str_printf(out, " %d,", a->status);
    if (a->has_root)
        bm_str_hex(out, a->root, 32);
    else
        bm_str_putc(out, '-');
    bm_str_printf(out, ",%d,%d,%" PRIu32, a->index, (int)a->cls, a->ms);
}

int bm_servedrec_format(bm_str_t *out, const bm_served_t *s, bm_servedrec_id_fn id_of, void *ud)
{
    bm_str_printf(out, "%" PRIu64 " %" PRIu32 " %" PRIu32 " ", s->started_ms, s->race_ms,
                  s->requests);
    put_node(out, s->node, id_of, ud);
    put_answer(out, &s->served);
    bm_str_putc(out, ' ');
    put_node(out, s->first_node, id_of, ud);
    put_answer(out, &s->first);
    bm_str_putc(out, ' ');
    bool any = false;
    for (size_t i = 0; i < s->n_nodes && i < BM_SERVED_MAX_NODES; i++) {
        const char *id = s->classes[i] != BM_ANSWER_NOT_ASKED ? id_of(ud, (int)i) : NULL;
        if (id) {
            bm_str_printf(out, "%s%s=%d", any ? ";" : "", id, (int)s->classes[i]);
            any = true;
        }
    }
    if (!any)
        bm_str_putc(out, '-');
    return out->oom ? BM_ENOMEM : 0;
}

/* A decimal number of at most `max`; false when the text is not one. */
static bool number(const char *p, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    if (!*p)
        return false;
    long long v = strtoll(p, &end, 10);
    if (*end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool get_node(const char *f, bm_servedrec_index_fn index_of, void *ud, int *out)
{
    *out = strcmp(f, "-") == 0 ? -1 : index_of(ud, f);
    return true;
}

/* "<status>,<root|->,<index>,<class>,<ms>" */
static bool get_answer(char *f, bm_served_answer_t *a)
{
    char *part[5], *save = NULL;
    for (int i = 0; i < 5; i++) {
        part[i] = strtok_r(i ? NULL : f, ",", &save);
        if (!part[i])
            return false;
    }
    if (strtok_r(NULL, ",", &save))
        return false;
    int64_t status, index, cls, ms;
    if (!number(part[0], 0, 999, &status) || !number(part[2], -1, INT32_MAX, &index) ||
        !number(part[3], 0, BM_ANSWER_CLASS_COUNT - 1, &cls) ||
        !number(part[4], 0, UINT32_MAX, &ms))
        return false;
    memset(a, 0, sizeof *a);
    a->status = (int)status;
    a->index = (int)index;
    a->cls = (bm_answer_class_t)cls;
    a->ms = (uint32_t)ms;
    if (strcmp(part[1], "-") != 0) {
        if (bm_hex_to_root(part[1], a->root) != 0)
            return false;
        a->has_root = true;
    }
    return true;
}

/* "<id>=<class>;..." or "-": classes of the nodes this instance knows by those ids. */
static bool get_classes(char *f, bm_served_t *s, bm_servedrec_index_fn index_of, void *ud)
{
    memset(s->classes, BM_ANSWER_NOT_ASKED, sizeof s->classes);
    if (strcmp(f, "-") == 0)
        return true;
    char *save = NULL;
    for (char *item = strtok_r(f, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
        char *eq = strrchr(item, '=');
        int64_t cls;
        if (!eq || eq == item || !number(eq + 1, 0, BM_ANSWER_CLASS_COUNT - 1, &cls))
            return false;
        *eq = '\0';
        int i = index_of(ud, item);
        if (i >= 0 && (size_t)i < s->n_nodes && i < BM_SERVED_MAX_NODES)
            s->classes[i] = (uint8_t)cls;
    }
    return true;
}

int bm_servedrec_parse(const char *line, size_t len, bm_served_t *s, size_t n_nodes,
                       bm_servedrec_index_fn index_of, void *ud)
{
    if (len == 0 || len > MAX_LINE || memchr(line, '\0', len))
        return BM_EINVAL;
    char *copy = strndup(line, len);
    if (!copy)
        return BM_EINVAL;
    char *f[FIELDS], *save = NULL;
    int n = 0;
    for (char *t = strtok_r(copy, " ", &save); t && n <= FIELDS; t = strtok_r(NULL, " ", &save))
        if (n < FIELDS)
            f[n++] = t;
        else
            n++;
    int64_t started, race, requests;
    s->n_nodes = n_nodes < BM_SERVED_MAX_NODES ? n_nodes : BM_SERVED_MAX_NODES;
    bool ok = n == FIELDS && number(f[0], 0, INT64_MAX, &started) &&
              number(f[1], 0, UINT32_MAX, &race) && number(f[2], 0, UINT32_MAX, &requests) &&
              get_node(f[3], index_of, ud, &s->node) && get_answer(f[4], &s->served) &&
              get_node(f[5], index_of, ud, &s->first_node) && get_answer(f[6], &s->first) &&
              get_classes(f[7], s, index_of, ud);
    free(copy);
    if (!ok)
        return BM_EINVAL;
    s->started_ms = (uint64_t)started;
    s->race_ms = (uint32_t)race;
    s->requests = (uint32_t)requests;
    return 0;
}
