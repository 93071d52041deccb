/* SPDX-License-Identifier: MIT */
/*
 * indexed: the item-by-item merge of a batch write's answers (see indexed.h).
 *
 * How it is built: three bit sets of the nodes that answered (every node's pool index is a
 * bit): those that took every item (a 2xx), those that took none (an error without a list),
 * those that answered an indexed error. Each item some indexed error lists as failed has a
 * record with the bit set of its failers and their messages. An item's takers are the
 * nodes that took everything plus the indexed nodes that did not list it; it failed
 * everywhere when it has none. Items no node lists need no record: every indexed node took
 * them. The merged error body is built with json-c, so every message is escaped.
 */
#include "duties/indexed.h"

#include <ctype.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/json.h"

_Static_assert(BM_MAX_NODES <= 64, "the node sets are 64-bit masks");

#define ID_MAX 32
#define MSG_MAX 200 /* a node's message is cut at this many bytes */

typedef struct note {
    unsigned node;
    char *msg;
} note_t;

typedef struct failure {
    uint64_t index;
    uint64_t nodes; /* the nodes that failed it (not as a duplicate) */
    note_t *notes;
    size_t n_notes;
} failure_t;

struct bm_indexed {
    uint64_t answered, took_all, took_none, indexed;
    char ids[BM_MAX_NODES][ID_MAX];
    char *plain[BM_MAX_NODES]; /* what a node that took none said */
    failure_t *f;
    size_t n, cap;
};

bm_indexed_t *bm_indexed_new(void)
{
    return calloc(1, sizeof(bm_indexed_t));
}

static void failure_dispose(failure_t *f)
{
    for (size_t i = 0; i < f->n_notes; i++)
        free(f->notes[i].msg);
    free(f->notes);
}

void bm_indexed_free(bm_indexed_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        failure_dispose(&m->f[i]);
    for (size_t i = 0; i < BM_MAX_NODES; i++)
        free(m->plain[i]);
    free(m->f);
    free(m);
}

bool bm_indexed_is_duplicate(const char *msg)
{
    char norm[256];
    size_t k = 0;
    for (const char *p = msg; p && *p && k + 1 < sizeof norm; p++)
        if (isalpha((unsigned char)*p))
            norm[k++] = (char)tolower((unsigned char)*p);
    norm[k] = '\0';
    return strstr(norm, "duplicate") || strstr(norm, "alreadyknown") || strstr(norm, "alreadyseen");
}

/* A copy of at most MSG_MAX bytes of `s` (NULL stays NULL). */
static char *cut_copy(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strnlen(s, MSG_MAX);
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

/* Forgets what `node` said before (a retry's answer replaces it). */
static void forget_node(bm_indexed_t *m, unsigned node)
{
    uint64_t bit = 1ull << node;
    m->answered &= ~bit;
    m->took_all &= ~bit;
    m->took_none &= ~bit;
    m->indexed &= ~bit;
    free(m->plain[node]);
    m->plain[node] = NULL;
    for (size_t i = 0; i < m->n; i++) {
        failure_t *f = &m->f[i];
        f->nodes &= ~bit;
        for (size_t j = 0; j < f->n_notes;) {
            if (f->notes[j].node == node) {
                free(f->notes[j].msg);
                f->notes[j] = f->notes[--f->n_notes];
            } else {
                j++;
            }
        }
    }
}

static failure_t *failure_of(bm_indexed_t *m, uint64_t index)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->f[i].index == index)
            return &m->f[i];
    failure_t *nf = bm_grow(m->f, m->n, &m->cap, sizeof *nf, 8);
    if (!nf)
        return NULL;
    m->f = nf;
    failure_t *f = &m->f[m->n++];
    memset(f, 0, sizeof *f);
    f->index = index;
    return f;
}

/* An item's index: a JSON number or a decimal string. */
static bool read_index(struct json_object *o, uint64_t *out)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, "index", &v))
        return false;
    if (json_object_is_type(v, json_type_int)) {
        int64_t i = json_object_get_int64(v);
        if (i < 0)
            return false;
        *out = (uint64_t)i;
        return true;
    }
    if (json_object_is_type(v, json_type_string)) {
        const char *s = json_object_get_string(v);
        return bm_json_parse_u64(s, strlen(s), out) == 0;
    }
    return false;
}

/* The failures list of an indexed error body, or NULL. `j` receives the parsed body. */
static struct json_object *failures_of(const bm_buf_t *body, struct json_object **j)
{
    *j = NULL;
    if (!body || bm_json_parse_buf(body, 0, j, NULL) != 0 || !*j)
        return NULL;
    struct json_object *f;
    if (!json_object_is_type(*j, json_type_object) ||
        !json_object_object_get_ex(*j, "failures", &f) || !json_object_is_type(f, json_type_array))
        return NULL;
    size_t n = json_object_array_length(f);
    for (size_t i = 0; i < n; i++) {
        uint64_t idx;
        struct json_object *e = json_object_array_get_idx(f, i);
        if (!json_object_is_type(e, json_type_object) || !read_index(e, &idx))
            return NULL; /* not the indexed form: the answer counts as a plain error */
    }
    return f;
}

static bool add_note(failure_t *f, unsigned node, const char *msg)
{
    note_t *nn = realloc(f->notes, (f->n_notes + 1) * sizeof *nn);
    if (!nn)
        return false;
    f->notes = nn;
    f->notes[f->n_notes].node = node;
    f->notes[f->n_notes].msg = cut_copy(msg ? msg : "failed");
    f->n_notes++;
    return true;
}

/*
 * Whether a plain error's message names only duplicates, one per line after an optional
 * "Multiple errors on ..." line: Lodestar v1.5.1 answers a batch write with such a 500,
 * {"statusCode":500,"error":"Internal Server Error","message":"PublishError.Duplicate"} or
 * "Multiple errors on publishContributionAndProofs\nPublishError.Duplicate\n...", listing
 * the failed items' errors without their indexes: when each of them is a duplicate, the
 * node (or the node that gossiped them to it) has every item.
 */
static bool only_duplicates(const char *msg)
{
    if (!msg)
        return false;
    size_t dups = 0;
    for (const char *p = msg; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        bool header = p == msg && strncasecmp(line, "Multiple errors", 15) == 0;
        bool blank = strspn(line, " \t\r") == strlen(line);
        if (!header && !blank) {
            if (!bm_indexed_is_duplicate(line))
                return false;
            dups++;
        }
        p += len + (end ? 1 : 0);
    }
    return dups > 0;
}

bool bm_indexed_add(bm_indexed_t *m, size_t node, const char *id, int status, const bm_buf_t *body)
{
    if (!m || node >= BM_MAX_NODES)
        return false;
    unsigned nd = (unsigned)node;
    uint64_t bit = 1ull << nd;
    forget_node(m, nd);
    snprintf(m->ids[nd], ID_MAX, "%s", id ? id : "?");
    m->answered |= bit;
    if (bm_status_2xx(status)) {
        m->took_all |= bit;
        return false;
    }
    struct json_object *j;
    struct json_object *list = failures_of(body, &j);
    if (!list) {
        const char *msg = j ? bm_json_get_str(j, "/message") : NULL;
        if (only_duplicates(msg)) {
            m->indexed |= bit; /* an indexed error listing duplicates only: took every item */
            json_object_put(j);
            return true;
        }
        m->took_none |= bit;
        char line[MSG_MAX + 16];
        snprintf(line, sizeof line, "%d%s%.*s", status, msg ? " " : "", MSG_MAX, msg ? msg : "");
        m->plain[nd] = cut_copy(line);
        json_object_put(j);
        return false;
    }
    m->indexed |= bit;
    size_t n = json_object_array_length(list);
    for (size_t i = 0; i < n; i++) {
        struct json_object *e = json_object_array_get_idx(list, i);
        uint64_t idx = 0;
        read_index(e, &idx);
        struct json_object *mv;
        const char *msg = json_object_object_get_ex(e, "message", &mv) &&
                                  json_object_is_type(mv, json_type_string)
                              ? json_object_get_string(mv)
                              : NULL;
        if (msg && bm_indexed_is_duplicate(msg))
            continue; /* another node published it: taken */
        failure_t *f = failure_of(m, idx);
        if (!f)
            break; /* out of memory: the item counts as taken, the safe side for a write */
        f->nodes |= bit;
        add_note(f, nd, msg);
    }
    json_object_put(j);
    return true;
}

bool bm_indexed_active(const bm_indexed_t *m)
{
    return m && m->indexed != 0;
}

/* The nodes that took failure `f`'s item. */
static uint64_t takers(const bm_indexed_t *m, const failure_t *f)
{
    return m->took_all | (m->indexed & ~f->nodes);
}

bool bm_indexed_all_taken(const bm_indexed_t *m)
{
    if (!m)
        return false;
    for (size_t i = 0; i < m->n; i++)
        if (!takers(m, &m->f[i]))
            return false;
    return true;
}

static int cmp_index(const void *a, const void *b)
{
    const failure_t *x = *(const failure_t *const *)a, *y = *(const failure_t *const *)b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* "a: msg; b: msg" for an item that failed everywhere: its failers' messages, then what
 * the nodes that took nothing said. */
static void item_message(const bm_indexed_t *m, const failure_t *f, bm_str_t *out)
{
    size_t k = 0;
    for (unsigned nd = 0; nd < BM_MAX_NODES; nd++) {
        if (!(m->answered & (1ull << nd)))
            continue;
        for (size_t j = 0; j < f->n_notes; j++)
            if (f->notes[j].node == nd)
                bm_str_printf(out, "%s%s: %s", k++ ? "; " : "", m->ids[nd],
                              f->notes[j].msg ? f->notes[j].msg : "failed");
        if ((m->took_none & (1ull << nd)) && m->plain[nd])
            bm_str_printf(out, "%s%s: %s", k++ ? "; " : "", m->ids[nd], m->plain[nd]);
    }
}

int bm_indexed_answer(const bm_indexed_t *m, bm_buf_t **body)
{
    *body = NULL;
    if (!m)
        return BM_EINVAL;
    size_t n_failed = 0;
    const failure_t **failed = calloc(m->n ? m->n : 1, sizeof *failed);
    if (!failed)
        return BM_ENOMEM;
    for (size_t i = 0; i < m->n; i++)
        if (!takers(m, &m->f[i]))
            failed[n_failed++] = &m->f[i];
    if (n_failed == 0) {
        free(failed);
        return 200;
    }
    qsort(failed, n_failed, sizeof *failed, cmp_index);
    struct json_object *o = json_object_new_object(), *list = json_object_new_array();
    bm_str_t msg = BM_STR_INIT;
    bm_str_printf(&msg, "%zu item(s) failed on every node that answered", n_failed);
    json_object_object_add(o, "code", json_object_new_int(400));
    json_object_object_add(o, "message", json_object_new_string(bm_str_data(&msg)));
    for (size_t i = 0; i < n_failed; i++) {
        struct json_object *e = json_object_new_object();
        bm_str_t im = BM_STR_INIT;
        item_message(m, failed[i], &im);
        json_object_object_add(e, "index", json_object_new_int64((int64_t)failed[i]->index));
        json_object_object_add(e, "message", json_object_new_string(bm_str_data(&im)));
        json_object_array_add(list, e);
        bm_str_dispose(&im);
    }
    json_object_object_add(o, "failures", list);
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
    *body = bm_buf_from_str(text);
    json_object_put(o);
    bm_str_dispose(&msg);
    free(failed);
    return *body ? 400 : BM_ENOMEM;
}
