/* SPDX-License-Identifier: MIT */
/*
 * config_yaml: reads a configuration file. The text is walked once, event by event, with
 * libyaml, against the key table (config_keys.h): each key is looked up in the rows of its
 * section, each value is checked for its shape (a single value, a mapping, a list), has its
 * `${VAR}`s substituted, and is converted and range-checked by its row, with the line and
 * column of what is wrong: `beaconmux.yaml:12:18: server.headerTimeout: invalid duration
 * "10x" (...)`. Unknown and duplicate keys, aliases and extra documents are refused. The
 * first error ends the walk, so a file is reported in reading order.
 *
 * Why `${VAR}` is substituted inside parsed values rather than in the raw text: the values
 * substituted are mostly secrets (passwords in URLs, API keys), and a secret containing '#',
 * '"', ": " or a backslash would otherwise change the YAML around it or be cut short; and
 * comments may mention `${VAR}` without it having to be set. Line numbers stay those of the
 * file, and a variable whose value holds a line break is refused.
 *
 * A null (`key:`, `key: ~`) counts as absent: the key keeps its default. A section or a list
 * may be null too (`server:`), whatever the style of the null; a list entry may not.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "app/config.h"
#include "app/config_keys.h"
#include "base/err.h"

#define VALUE_MAX_BYTES (64u << 10) /* one value after ${VAR} substitution */
#define PATH_MAX_CHARS 160          /* "upstreams[63].headers", "duties.headRoot.maxHold" */

typedef struct walk {
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;
    const char *name; /* of the file, for messages */
    const char *text; /* the document, for positions */
    size_t len;
    bm_config_getenv_fn env;
    void *env_ud;
    bm_config_err_t *err;
} walk_t;

/* ---- failures ------------------------------------------------------------------------ */

static int fail_at(walk_t *w, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(walk_t *w, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bm_cfg_err(w->err, "%s:%zu:%zu: %s", w->name, m->line + 1, m->column + 1, msg);
    return BM_EINVAL;
}

static int fail_oom(walk_t *w)
{
    bm_cfg_err(w->err, "%s: out of memory", w->name);
    return BM_ENOMEM;
}

static bm_cfg_pos_t pos_of(const yaml_mark_t *m)
{
    return (bm_cfg_pos_t){m->line, m->column};
}

/* The byte offset of libyaml's character index `index` (libyaml counts characters). */
static size_t char_to_byte(const char *text, size_t len, size_t index)
{
    size_t i = 0, c = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        i = 3; /* libyaml does not count the byte order mark */
    for (; i < len; i++) {
        if (((unsigned char)text[i] & 0xC0) == 0x80)
            continue;
        if (c++ == index)
            return i;
    }
    return len;
}

/* Moves m over text[from..to): lines and characters, as libyaml counts them. */
static void advance(yaml_mark_t *m, const char *text, size_t from, size_t to, size_t len)
{
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || (c == '\r' && (i + 1 >= len || text[i + 1] != '\n'))) {
            m->line++;
            m->column = 0;
        } else if ((c & 0xC0) != 0x80 && c != '\r') {
            m->column++;
        }
    }
}

static int syntax_error(walk_t *w)
{
    yaml_parser_t *p = &w->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return fail_oom(w);
    if (p->error == YAML_READER_ERROR) {
        /* The reader reports a byte offset: count lines and characters up to it. */
        yaml_mark_t m = {0, 0, 0};
        advance(&m, w->text, 0, p->problem_offset < w->len ? p->problem_offset : w->len, w->len);
        return fail_at(w, &m, "YAML error: %s", p->problem ? p->problem : "unreadable");
    }
    const char *hint = "";
    size_t at = char_to_byte(w->text, w->len, p->problem_mark.index);
    if (at < w->len && w->text[at] == '\t')
        hint = "; YAML does not allow tabs for indentation";
    if (p->context)
        return fail_at(w, &p->problem_mark, "YAML syntax error: %s (%s)%s",
                       p->problem ? p->problem : "malformed", p->context, hint);
    return fail_at(w, &p->problem_mark, "YAML syntax error: %s%s",
                   p->problem ? p->problem : "malformed", hint);
}

/* ---- events -------------------------------------------------------------------------- */

/* Advances to the next event; refuses aliases. */
static int walk_next(walk_t *w)
{
    if (w->have_ev)
        yaml_event_delete(&w->ev);
    w->have_ev = false;
    if (!yaml_parser_parse(&w->parser, &w->ev))
        return syntax_error(w);
    w->have_ev = true;
    if (w->ev.type == YAML_ALIAS_EVENT)
        return fail_at(w, &w->ev.start_mark, "YAML aliases (*name) are not supported");
    return 0;
}

static bool scalar_is(const yaml_event_t *ev, const char *s)
{
    size_t n = strlen(s);
    return ev->data.scalar.length == n && memcmp(ev->data.scalar.value, s, n) == 0;
}

/* A null for a section, a list or a map: any scalar spelling null, whatever its style. */
static bool is_null(const yaml_event_t *ev)
{
    return ev->type == YAML_SCALAR_EVENT &&
           (scalar_is(ev, "") || scalar_is(ev, "~") || scalar_is(ev, "null") ||
            scalar_is(ev, "Null") || scalar_is(ev, "NULL"));
}

/* A null for a single value: an empty or null plain scalar ("key:", "key: ~"). */
static bool plain_null(const yaml_event_t *ev)
{
    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_null(ev);
}

static const char *shape_of(const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    default:
        return "a single value";
    }
}

/* The current event as a string (a key or a value): no NUL inside. NULL on failure. */
static char *scalar_text(walk_t *w, int *rc)
{
    const yaml_event_t *ev = &w->ev;
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length)) {
        *rc = fail_at(w, &ev->start_mark, "values and keys must not contain NUL characters");
        return NULL;
    }
    char *s = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (!s)
        *rc = fail_oom(w);
    return s;
}

/* The path of a key ("server.maxBodyBytes") or of a list entry ("upstreams[2]") for
 * messages; the table's names keep it far shorter than PATH_MAX_CHARS. */
static void path_of(char out[PATH_MAX_CHARS], const char *parent, const char *key, size_t index)
{
    int n = key ? snprintf(out, PATH_MAX_CHARS, "%s%s%s", parent, parent[0] ? "." : "", key)
                : snprintf(out, PATH_MAX_CHARS, "%s[%zu]", parent, index);
    if (n < 0 || n >= PATH_MAX_CHARS)
        out[PATH_MAX_CHARS - 1] = '\0'; /* cut short: still names where it is */
}

static const char *where(const char *path)
{
    return path[0] ? path : "the top level";
}

/* ---- ${VAR} substitution ----------------------------------------------------------- */

/* A character of a variable name: [A-Za-z_] first, then [A-Za-z0-9_]. */
static bool var_char(int c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

/*
 * Expands `${NAME}` and `$$` in `in`; any other '$' stays as it is. Returns a new string, or
 * NULL with the reason in msg (empty on allocation failure) and, in *ordinal, which "${"
 * of the value failed (0 for the first), so that the caller can point at it in the file.
 */
static char *expand(const walk_t *w, const char *in, char *msg, size_t n, size_t *ordinal)
{
    bm_str_t out = BM_STR_INIT;
    size_t nth = 0;
    msg[0] = '\0';
    *ordinal = 0;
    for (const char *p = in; *p;) {
        if (p[0] != '$' || (p[1] != '$' && p[1] != '{')) {
            size_t run = strcspn(p + 1, "$") + 1;
            bm_str_append(&out, p, run);
            p += run;
            continue;
        }
        if (p[1] == '$') {
            bm_str_putc(&out, '$');
            p += 2;
            continue;
        }
        const char *name = p + 2;
        const char *close = strchr(name, '}');
        size_t len = close ? (size_t)(close - name) : 0;
        bm_cfg_quote_t q;
        *ordinal = nth++;
        if (!close) {
            snprintf(msg, n, "unterminated \"${\" (write \"$$\" for a literal '$')");
            goto fail;
        }
        bool ok = len > 0 && len <= 255;
        for (size_t i = 0; ok && i < len; i++)
            ok = var_char((unsigned char)name[i], i == 0);
        if (!ok) {
            snprintf(msg, n, "invalid variable name %s in \"${...}\"",
                     bm_cfg_quote_n(&q, name, len));
            goto fail;
        }
        char var[256];
        memcpy(var, name, len);
        var[len] = '\0';
        const char *val = w->env ? w->env(w->env_ud, var) : getenv(var);
        if (!val) {
            snprintf(msg, n, "environment variable \"%.100s\" is not set", var);
            goto fail;
        }
        if (strpbrk(val, "\r\n")) {
            snprintf(msg, n, "environment variable \"%.100s\" contains a line break", var);
            goto fail;
        }
        bm_str_puts(&out, val);
        if (bm_str_len(&out) > VALUE_MAX_BYTES) {
            snprintf(msg, n, "the value is longer than 64 KiB after substituting \"%.100s\"", var);
            goto fail;
        }
        p = close + 1;
    }
    if (out.oom)
        goto fail;
    char *r = strdup(bm_str_data(&out));
    bm_str_dispose(&out);
    return r;
fail:
    bm_str_dispose(&out);
    return NULL;
}

/*
 * Where the `ordinal`-th "${" of the current scalar sits in the file: scans its source text
 * with the same "$$" rule as expand(); falls back to the value's start when the source spells
 * it differently (escapes in a double-quoted string).
 */
static yaml_mark_t subst_mark(const walk_t *w, size_t ordinal)
{
    const yaml_mark_t *start = &w->ev.start_mark;
    size_t b = char_to_byte(w->text, w->len, start->index);
    size_t e = char_to_byte(w->text, w->len, w->ev.end_mark.index);
    size_t nth = 0;
    for (size_t i = b; i + 1 < e; i++) {
        if (w->text[i] != '$')
            continue;
        if (w->text[i + 1] == '$') {
            i++;
            continue;
        }
        if (w->text[i + 1] != '{' || nth++ != ordinal)
            continue;
        yaml_mark_t m = *start;
        advance(&m, w->text, b, i, e);
        return m;
    }
    return *start;
}

/* The current scalar's value after substitution (caller frees); *raw gets it as written. */
static char *value_text(walk_t *w, const char *path, char **raw, int *rc)
{
    char msg[300];
    size_t ordinal;
    if (!(*raw = scalar_text(w, rc)))
        return NULL;
    char *v = expand(w, *raw, msg, sizeof msg, &ordinal);
    if (v)
        return v;
    if (!msg[0]) {
        *rc = fail_oom(w);
    } else {
        yaml_mark_t m = subst_mark(w, ordinal);
        *rc = fail_at(w, &m, "%s: %s", path, msg);
    }
    free(*raw);
    *raw = NULL;
    return NULL;
}

/* ---- the walk against the table ---------------------------------------------------- */

static int walk_mapping(walk_t *w, const bm_cfg_section_t *sec, void *obj, const char *path,
                        bm_cfg_entry_t *e);

static void *member(void *obj, size_t off)
{
    return (char *)obj + off;
}

/* A single value: its row converts it. A null keeps the default. */
static int walk_leaf(walk_t *w, const bm_cfg_key_t *k, void *obj, const char *path,
                     const char *parent, bool *given)
{
    char msg[400], *raw;
    int rc = 0;
    if (w->ev.type != YAML_SCALAR_EVENT)
        return fail_at(w, &w->ev.start_mark, "\"%s\" must be a single value, not %s", path,
                       shape_of(&w->ev));
    if (plain_null(&w->ev))
        return 0;
    char *v = value_text(w, path, &raw, &rc);
    if (!v)
        return rc;
    bool ok = bm_cfg_set(k, obj, v, raw, msg, sizeof msg);
    free(v);
    free(raw);
    if (!ok)
        return fail_at(w, &w->ev.start_mark, "%s: %s",
                       k->kind == BM_CFG_TEXT ? where(parent) : path, msg);
    *given = true;
    return 0;
}

/* One "name: value" pair of a free-form map, the current event being its name. */
static int walk_pair(walk_t *w, const bm_cfg_map_t *map, bm_config_header_t **pairs, size_t *count,
                     const char *path)
{
    bm_cfg_quote_t q;
    const char *why;
    int rc = 0;
    if (w->ev.type != YAML_SCALAR_EVENT)
        return fail_at(w, &w->ev.start_mark, "%s names in \"%s\" must be strings", map->noun, path);
    char *name = scalar_text(w, &rc);
    if (!name)
        return rc;
    yaml_mark_t key = w->ev.start_mark;
    if (*count >= map->max) {
        free(name);
        return fail_at(w, &key, "\"%s\" has more than %zu %ss", path, map->max, map->noun);
    }
    bm_config_header_t *grown = realloc(*pairs, (*count + 1) * sizeof **pairs);
    if (!grown) {
        free(name);
        return fail_oom(w);
    }
    *pairs = grown;
    bm_config_header_t *p = &grown[(*count)++];
    *p = (bm_config_header_t){.name = name};
    bm_cfg_quote(&q, name);
    if ((rc = walk_next(w)) != 0)
        return rc;
    if (w->ev.type != YAML_SCALAR_EVENT)
        return fail_at(w, &w->ev.start_mark, "%s %s in \"%s\" must have a single value", map->noun,
                       q.s, path);
    if (plain_null(&w->ev))
        return fail_at(w, &w->ev.start_mark,
                       "%s %s in \"%s\" has no value (write \"\" for an empty one)", map->noun, q.s,
                       path);
    if (memchr(w->ev.data.scalar.value, '\0', w->ev.data.scalar.length))
        return fail_at(w, &w->ev.start_mark, "values and keys must not contain NUL characters");
    if ((why = map->name_problem(name)))
        return fail_at(w, &key, "%s: %s %s %s", path, map->noun, q.s, why);
    for (size_t j = 0; j + 1 < *count; j++)
        if (strcasecmp((*pairs)[j].name, name) == 0)
            return fail_at(w, &key, "%s: %s %s is given twice", path, map->noun, q.s);
    char *raw;
    if (!(p->value = value_text(w, path, &raw, &rc)))
        return rc;
    free(raw);
    if ((why = map->value_problem(p->value)))
        return fail_at(w, &w->ev.start_mark, "%s: the value of %s %s %s", path, map->noun, q.s,
                       why);
    return 0;
}

/* A free-form map of names to values (upstreams[].headers). */
static int walk_map(walk_t *w, const bm_cfg_key_t *k, void *obj, const char *path)
{
    bm_config_header_t **pairs = member(obj, k->off);
    size_t *count = member(obj, k->aux);
    if (is_null(&w->ev))
        return 0;
    if (w->ev.type != YAML_MAPPING_START_EVENT)
        return fail_at(w, &w->ev.start_mark,
                       "\"%s\" must be a mapping of %s names to values, not %s", path, k->map->noun,
                       shape_of(&w->ev));
    for (;;) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if ((rc = walk_pair(w, k->map, pairs, count, path)) != 0)
            return rc;
    }
}

/* A list of mappings (upstreams[]): each entry starts at its defaults. */
static int walk_list(walk_t *w, const bm_cfg_key_t *k, void *obj, const char *path)
{
    char **arr = member(obj, k->off);
    size_t *count = member(obj, k->aux);
    const bm_cfg_section_t *sub = k->sub;
    if (is_null(&w->ev))
        return 0;
    if (w->ev.type != YAML_SEQUENCE_START_EVENT)
        return fail_at(w, &w->ev.start_mark, "\"%s\" must be a list, not %s", path,
                       shape_of(&w->ev));
    for (;;) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        if (*count >= k->max)
            return fail_at(w, &w->ev.start_mark, "\"%s\" has more than %" PRIu64 " entries", path,
                           k->max);
        char *grown = realloc(*arr, (*count + 1) * sub->size);
        if (!grown)
            return fail_oom(w);
        *arr = grown;
        void *entry = grown + *count * sub->size;
        memset(entry, 0, sub->size);
        size_t index = (*count)++;
        if (bm_cfg_defaults(sub, entry) != 0)
            return fail_oom(w);
        char entry_path[PATH_MAX_CHARS];
        path_of(entry_path, path, NULL, index);
        if (w->ev.type != YAML_MAPPING_START_EVENT)
            return fail_at(w, &w->ev.start_mark, "\"%s\" must be a mapping of keys, not %s",
                           entry_path, shape_of(&w->ev));
        bm_cfg_entry_t e = {.entries = grown, .index = index, .path = entry_path, .list = path};
        if ((rc = walk_mapping(w, sub, entry, entry_path, &e)) != 0)
            return rc;
    }
}

/* A list of single values (blockedPaths, upstreams of a rule): each checked by the row. */
static int walk_strings(walk_t *w, const bm_cfg_key_t *k, void *obj, const char *path)
{
    if (is_null(&w->ev))
        return 0;
    if (w->ev.type != YAML_SEQUENCE_START_EVENT)
        return fail_at(w, &w->ev.start_mark, "\"%s\" must be a list of values, not %s", path,
                       shape_of(&w->ev));
    bm_cfg_clear_strings(k, obj); /* a list given replaces the default one, even when empty */
    for (size_t index = 0;; index++) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        char entry[PATH_MAX_CHARS];
        path_of(entry, path, NULL, index);
        if (w->ev.type != YAML_SCALAR_EVENT || plain_null(&w->ev))
            return fail_at(w, &w->ev.start_mark, "\"%s\" must be a single value, not %s", entry,
                           w->ev.type == YAML_SCALAR_EVENT ? "null" : shape_of(&w->ev));
        char *raw;
        char *v = value_text(w, entry, &raw, &rc);
        if (!v)
            return rc;
        bm_cfg_quote_t q;
        bm_cfg_quote(&q, v);
        const char *why = bm_cfg_add_string(k, obj, v);
        free(v);
        free(raw);
        if (why && strcmp(why, "out of memory") == 0)
            return fail_oom(w);
        if (why && strcmp(why, "is one entry too many") == 0)
            return fail_at(w, &w->ev.start_mark, "\"%s\" has more than %" PRIu64 " entries", path,
                           k->max);
        if (why)
            return fail_at(w, &w->ev.start_mark, "%s: %s %s", entry, q.s, why);
    }
}

/* The value of row `k`, the current event being its first. */
static int walk_value(walk_t *w, const bm_cfg_key_t *k, void *obj, const char *path,
                      const char *parent, bool *given)
{
    /* a section or a list given (not null) counts as given, as a value does: a networks[]
     * entry replaces the top level's section only where it gives its own */
    if (k->kind == BM_CFG_SECTION || k->kind == BM_CFG_LIST || k->kind == BM_CFG_MAP ||
        k->kind == BM_CFG_STRINGS)
        *given = !is_null(&w->ev);
    switch (k->kind) {
    case BM_CFG_SECTION:
        if (is_null(&w->ev))
            return 0;
        if (w->ev.type != YAML_MAPPING_START_EVENT)
            return fail_at(w, &w->ev.start_mark, "\"%s\" must be a mapping of keys, not %s", path,
                           shape_of(&w->ev));
        return walk_mapping(w, k->sub, member(obj, k->off), path, NULL);
    case BM_CFG_LIST:
        return walk_list(w, k, obj, path);
    case BM_CFG_MAP:
        return walk_map(w, k, obj, path);
    case BM_CFG_STRINGS:
        return walk_strings(w, k, obj, path);
    default:
        return walk_leaf(w, k, obj, path, parent, given);
    }
}

/* "unknown key "x" in "server" (expected one of: a, b, c)" */
static int unknown_key(walk_t *w, const bm_cfg_section_t *sec, const char *path)
{
    char expected[400];
    size_t o = 0;
    bm_cfg_quote_t q;
    expected[0] = '\0';
    for (size_t j = 0; j < sec->n_keys && o < sizeof expected; j++)
        o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s", j ? ", " : "",
                              sec->keys[j].name);
    bm_cfg_quote_n(&q, (const char *)w->ev.data.scalar.value, w->ev.data.scalar.length);
    if (path[0])
        return fail_at(w, &w->ev.start_mark, "unknown key %s in \"%s\" (expected one of: %s)", q.s,
                       path, expected);
    return fail_at(w, &w->ev.start_mark, "unknown key %s at the top level (expected one of: %s)",
                   q.s, expected);
}

/* After a mapping of `sec`'s keys: required keys, then the entry's own checks. */
static int end_mapping(walk_t *w, const bm_cfg_section_t *sec, const char *path,
                       const yaml_mark_t *start, bm_cfg_entry_t *e)
{
    char msg[400];
    bm_cfg_pos_t at;
    for (size_t i = 0; i < sec->n_keys; i++)
        if ((sec->keys[i].flags & BM_CFG_REQUIRED) && !(e->given & (1ull << i)))
            return fail_at(w, start, "%s: missing key \"%s\"", where(path), sec->keys[i].name);
    if (!sec->finish || !e->entries)
        return 0;
    int rc = sec->finish(e, msg, sizeof msg, &at);
    if (rc == BM_ENOMEM)
        return fail_oom(w);
    if (rc != 0) {
        yaml_mark_t m = {0, at.line, at.column};
        return fail_at(w, &m, "%s", msg);
    }
    return 0;
}

/* A mapping of `sec`'s keys into `obj`, the current event being its start. `e` describes
 * the list entry it is, or is NULL. */
static int walk_mapping(walk_t *w, const bm_cfg_section_t *sec, void *obj, const char *path,
                        bm_cfg_entry_t *e)
{
    bm_cfg_entry_t own = {0};
    uint64_t seen = 0;
    yaml_mark_t start = w->ev.start_mark;
    if (!e)
        e = &own;
    e->at = pos_of(&start);
    for (;;) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return end_mapping(w, sec, path, &start, e);
        if (w->ev.type != YAML_SCALAR_EVENT)
            return fail_at(w, &w->ev.start_mark, "keys in %s must be plain names, not %s",
                           where(path), shape_of(&w->ev));
        if (memchr(w->ev.data.scalar.value, '\0', w->ev.data.scalar.length))
            return fail_at(w, &w->ev.start_mark, "values and keys must not contain NUL characters");
        size_t i = 0;
        while (i < sec->n_keys && !scalar_is(&w->ev, sec->keys[i].name))
            i++;
        if (i == sec->n_keys)
            return unknown_key(w, sec, path);
        if (seen & (1ull << i)) {
            bm_cfg_quote_t q;
            return fail_at(w, &w->ev.start_mark, "duplicate key %s in %s",
                           bm_cfg_quote(&q, sec->keys[i].name), where(path));
        }
        seen |= 1ull << i;
        char child[PATH_MAX_CHARS];
        path_of(child, path, sec->keys[i].name, 0);
        if ((rc = walk_next(w)) != 0)
            return rc;
        e->value_at[i] = pos_of(&w->ev.start_mark);
        bool given = false;
        if ((rc = walk_value(w, &sec->keys[i], obj, child, path, &given)) != 0)
            return rc;
        if (given)
            e->given |= 1ull << i;
    }
}

/* The whole stream: at most one document whose root is a mapping (or null). */
static int walk_document(walk_t *w, bm_config_t *cfg)
{
    int rc;
    if ((rc = walk_next(w)) != 0) /* stream start */
        return rc;
    if ((rc = walk_next(w)) != 0)
        return rc;
    if (w->ev.type == YAML_STREAM_END_EVENT)
        return 0;                 /* no document: every default */
    if ((rc = walk_next(w)) != 0) /* the root node */
        return rc;
    if (w->ev.type == YAML_MAPPING_START_EVENT) {
        if ((rc = walk_mapping(w, &bm_cfg_root, cfg, "", NULL)) != 0)
            return rc;
    } else if (!(w->ev.type == YAML_SCALAR_EVENT && plain_null(&w->ev))) {
        return fail_at(w, &w->ev.start_mark,
                       "the configuration must be a mapping of keys (such as \"upstreams:\"), "
                       "not %s",
                       shape_of(&w->ev));
    }
    if ((rc = walk_next(w)) != 0) /* document end */
        return rc;
    if ((rc = walk_next(w)) != 0)
        return rc;
    if (w->ev.type != YAML_STREAM_END_EVENT)
        return fail_at(w, &w->ev.start_mark, "only one YAML document is allowed");
    return 0;
}

bm_config_t *bm_config_parse(const char *text, size_t len, const char *name,
                             bm_config_getenv_fn env, void *env_ud, bm_config_err_t *err)
{
    walk_t w = {.name = name ? name : "config",
                .text = text ? text : "",
                .len = len,
                .env = env,
                .env_ud = env_ud,
                .err = err};
    if (err)
        err->msg[0] = '\0';
    if (!text && len) {
        bm_cfg_err(err, "%s: no text", w.name);
        return NULL;
    }
    if (len > BM_CONFIG_MAX_FILE_BYTES) {
        bm_cfg_err(err, "%s: larger than %u bytes", w.name, BM_CONFIG_MAX_FILE_BYTES);
        return NULL;
    }
    bm_config_t *cfg = bm_config_new();
    if (!cfg || !yaml_parser_initialize(&w.parser)) {
        bm_cfg_err(err, "%s: out of memory", w.name);
        bm_config_free(cfg);
        return NULL;
    }
    yaml_parser_set_input_string(&w.parser, (const unsigned char *)w.text, len);
    int rc = walk_document(&w, cfg);
    if (w.have_ev)
        yaml_event_delete(&w.ev);
    yaml_parser_delete(&w.parser);
    if (rc != 0) {
        bm_config_free(cfg);
        return NULL;
    }
    return cfg;
}
