/* SPDX-License-Identifier: MIT */
/*
 * config_keys: the key table of the configuration file and what each kind of value means.
 * Internal to the configuration (config.c, config_keys.c, config_yaml.c) and the command line
 * (cli.c); everyone else uses app/config.h.
 *
 * The table is data. A section (bm_cfg_section_t) is an array of rows, one per YAML key: its
 * name, the kind of its value, where the value sits in the section's struct, its bounds and
 * its default (a constant of base/defaults.h). Everything else reads the rows: the defaults
 * of a new configuration (bm_cfg_defaults), the YAML walk (config_yaml.c: unknown and
 * duplicate keys, shapes, positions), the conversion and range check of each value
 * (bm_cfg_set, bm_cfg_check), the dump and the validation (config.c), freeing
 * (bm_cfg_dispose) and the list of keys the documentation must describe (bm_config_keys).
 * A key cannot be half-added: a row is the whole key.
 *
 * Offsets are relative to the struct of the row's own section, never to bm_config_t, so one
 * section can sit in several places: the five per-duty holds share one section, a list of
 * objects (upstreams[]) is a row whose entries are a section, and a per-network copy of a
 * section is a list row (networks[]) whose entry struct embeds that section's struct.
 */
#ifndef BM_CONFIG_KEYS_H
#define BM_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app/config.h"

/* Rows per section at most: the walk keeps the keys it has seen in a 64-bit set. */
#define BM_CFG_MAX_KEYS 64

typedef enum bm_cfg_kind {
    BM_CFG_DURATION,     /* uint32_t milliseconds, min..max */
    BM_CFG_DURATION_OPT, /* the same, or BM_CONFIG_UNSET (inherits, or follows the slot;
                            not dumped) */
    BM_CFG_SIZE,         /* uint64_t bytes, min..max */
    BM_CFG_COUNT,        /* uint32_t, min..max */
    BM_CFG_DECIMAL,      /* uint32_t thousandths, min..max: "2", "2.5", "0.1" or "10%" */
    BM_CFG_BOOL,         /* bool */
    BM_CFG_ENUM,         /* an enum, written by name (`names`) */
    BM_CFG_LISTEN,       /* "HOST:PORT": char *host at `off`, uint16_t port at `aux` */
    BM_CFG_ROOT,         /* char *: "0x" + 64 hex digits (stored in lower case), or NULL */
    BM_CFG_PATH,         /* char *: a readable regular file, or NULL */
    BM_CFG_TEXT,         /* char *: any text that `problem` accepts, or NULL */
    BM_CFG_SECTION,      /* a mapping of `sub`'s keys, its struct embedded at `off` */
    BM_CFG_LIST,         /* a list of mappings of `sub`'s keys: an array at `off`, its size_t
                            count at `aux`, at most `max` entries */
    BM_CFG_MAP,          /* free-form "name: value" pairs: a bm_config_header_t array at `off`,
                            its size_t count at `aux`, described by `map` */
    BM_CFG_STRINGS,      /* a list of single values: a char * array at `off`, its size_t count
                            at `aux`, at most `max`, each accepted by `problem` */
} bm_cfg_kind_t;

enum {
    BM_CFG_REQUIRED = 1 << 0,   /* a mapping that holds this section's keys must give it */
    BM_CFG_MASK_URL = 1 << 1,   /* a URL whose password is masked in messages and masked dumps */
    BM_CFG_INHERIT = 1 << 2,    /* COUNT, DECIMAL: BM_CONFIG_UNSET (the default) inherits */
    BM_CFG_SECRET = 1 << 3,     /* TEXT: never shown in messages, "***" in masked dumps */
    BM_CFG_EMPTY_NONE = 1 << 4, /* TEXT: "" means none (NULL), without asking `problem` */
};

/** An enumerated value: the names a user writes. */
typedef struct bm_cfg_enum {
    const char *noun;                    /* for messages: "log level" */
    const char *const *names;            /* names[v] is the name of value v, for every valid v */
    size_t n;                            /* values 0..n-1 */
    int (*parse)(const char *s, int *v); /* NULL: exactly one of names[]; else also aliases */
} bm_cfg_enum_t;

/** A free-form map (upstreams[].headers): what its names and values may be. */
typedef struct bm_cfg_map {
    const char *noun;                                /* for messages: "header" */
    size_t max;                                      /* pairs at most */
    const char *(*name_problem)(const char *name);   /* NULL when fine, else why not */
    const char *(*value_problem)(const char *value); /* NULL when fine, else why not */
} bm_cfg_map_t;

/** A position in the file, counted from 0 (messages add 1). */
typedef struct bm_cfg_pos {
    size_t line, column;
} bm_cfg_pos_t;

/** One entry of a list, as its section's `finish` sees it after its keys were set. */
typedef struct bm_cfg_entry {
    void *entries; /* the list's array; this entry is entries[index] */
    size_t index;
    const char *path;                       /* "upstreams[2]" */
    const char *list;                       /* "upstreams" */
    bm_cfg_pos_t at;                        /* where the entry starts */
    bm_cfg_pos_t value_at[BM_CFG_MAX_KEYS]; /* where the value of row i starts, if given */
    uint64_t given;                         /* bit i: row i was given a value (not null) */
} bm_cfg_entry_t;

typedef struct bm_cfg_section bm_cfg_section_t;

/** One key. Only the members its kind uses are set. */
typedef struct bm_cfg_key {
    const char *name; /* the YAML key: "maxBodyBytes" */
    bm_cfg_kind_t kind;
    unsigned flags;              /* BM_CFG_REQUIRED, BM_CFG_MASK_URL */
    size_t off;                  /* of the value in the section's struct */
    size_t aux;                  /* LISTEN: of the port; LIST, MAP: of the count */
    uint64_t min, max;           /* numbers: the range; LIST: most entries */
    uint64_t def;                /* numbers, BOOL, ENUM: the default; LISTEN: the port's */
    const char *def_text;        /* LISTEN: the default host; TEXT: the default (NULL: none) */
    const char *const *def_list; /* STRINGS: the default entries, NULL-terminated */
    const bm_cfg_section_t *sub; /* SECTION, LIST */
    const bm_cfg_enum_t *names;  /* ENUM */
    const bm_cfg_map_t *map;     /* MAP */
    const char *(*problem)(const char *value); /* TEXT: NULL when fine, else why not */
} bm_cfg_key_t;

/** A section: its keys in file order (the dump's order and the "expected one of" list). */
struct bm_cfg_section {
    const bm_cfg_key_t *keys;
    size_t n_keys;
    size_t size; /* of its struct (one entry of a list) */
    /*
     * For the entries of a list: called once an entry's keys are set, to fill in what
     * depends on its position and to check it against the entries before it. Returns 0;
     * BM_EINVAL with the reason in msg and its position in *at; or BM_ENOMEM.
     */
    int (*finish)(const bm_cfg_entry_t *e, char *msg, size_t n, bm_cfg_pos_t *at);
};

/** The top level: the keys of bm_config_t. */
extern const bm_cfg_section_t bm_cfg_root;

/* ---- the table's operations --------------------------------------------------------- */

/** Gives every key of `sec` in `obj` (zeroed memory) its default. 0 or BM_ENOMEM. */
int bm_cfg_defaults(const bm_cfg_section_t *sec, void *obj);

/** Frees everything `obj` owns (strings, lists, maps, recursively); `obj` itself stays. */
void bm_cfg_dispose(const bm_cfg_section_t *sec, void *obj);

/** The row of `sec` named `name`, or NULL. */
const bm_cfg_key_t *bm_cfg_find(const bm_cfg_section_t *sec, const char *name);

/**
 * Parses `text` as the value of leaf key `k` and stores it in `obj`, then range-checks it.
 * `raw` is the value as written, before ${VAR} substitution: a URL is shown as written when
 * substitution built it (a malformed one could otherwise show a password). On failure
 * writes why to msg and returns false: "invalid duration \"10x\" (...)" to be prefixed
 * with the key's path, or for a TEXT key "id \"-bad\" must start ..." to be prefixed with
 * its section's path.
 */
bool bm_cfg_set(const bm_cfg_key_t *k, void *obj, const char *text, const char *raw, char *msg,
                size_t n);

/** Checks the current value of leaf key `k` in `obj`; false with the reason in msg. */
bool bm_cfg_check(const bm_cfg_key_t *k, const void *obj, char *msg, size_t n);

/** True for an inheriting key (DURATION_OPT, or BM_CFG_INHERIT) that holds BM_CONFIG_UNSET. */
bool bm_cfg_unset(const bm_cfg_key_t *k, const void *obj);

/** Empties a STRINGS list (its default entries too: a list given replaces them). */
void bm_cfg_clear_strings(const bm_cfg_key_t *k, void *obj);

/** Appends the text of a STRINGS item to its list (copied), after `problem` accepted it.
 *  Returns NULL or why not (for the item at its position); "out of memory" on failure. */
const char *bm_cfg_add_string(const bm_cfg_key_t *k, void *obj, const char *v);

/** The value of a number, BOOL or ENUM key. */
uint64_t bm_cfg_num(const bm_cfg_key_t *k, const void *obj);

/** The value of a string key (LISTEN: the host), or NULL. */
const char *bm_cfg_str(const bm_cfg_key_t *k, const void *obj);

/** Writes a number, BOOL or ENUM value as it is written in the file ("2s", "32MiB"). */
void bm_cfg_format(char *b, size_t n, const bm_cfg_key_t *k, uint64_t v);

/* ---- checks shared by the walk, the validation and the command line ----------------- */

/** Why `id` is not an upstream id ([A-Za-z0-9][A-Za-z0-9._-]*, 1-64), or NULL. */
const char *bm_cfg_id_problem(const char *id);

/** The edge's sections (config_edge.c). */
extern const bm_cfg_section_t bm_cfg_cache, bm_cfg_cors, bm_cfg_rate_limit, bm_cfg_auth;
/** What beaconmux shows of itself: metrics, journal, ui (config_observe.c). */
extern const bm_cfg_section_t bm_cfg_metrics, bm_cfg_journal, bm_cfg_ui;
/* state (config_state.c) */
extern const bm_cfg_section_t bm_cfg_state;
/* server.tls (config_tls.c) */
extern const bm_cfg_section_t bm_cfg_server_tls;

/** The rows of a networks[] entry (a bm_config_t of which only these are set). */
extern const bm_cfg_section_t bm_cfg_network;

/** Why `url` is not an upstream base URL, or NULL. */
const char *bm_cfg_url_problem(const char *url);

/** Why `name` cannot be an extra request header's name, or NULL. */
const char *bm_cfg_header_name_problem(const char *name);

/** Why `value` cannot be an extra request header's value, or NULL. */
const char *bm_cfg_header_value_problem(const char *value);

/** Why `m` cannot be an HTTP method as the configuration writes one (upper case, at most
 *  7 letters: "GET", "POST"), or NULL. */
const char *bm_cfg_method_problem(const char *m);

/** The id of the upstream at position i when it has none: "node<i+1>". Caller frees. */
char *bm_cfg_default_id(size_t i);

/* ---- messages ----------------------------------------------------------------------- */

/** A value quoted for a message: printable ASCII only, at most 48 bytes of it. */
typedef struct bm_cfg_quote {
    char s[208];
} bm_cfg_quote_t;

/** Quotes s[0..len) into q; returns q->s. */
const char *bm_cfg_quote_n(bm_cfg_quote_t *q, const char *s, size_t len);

/** Quotes the string s into q; returns q->s. */
const char *bm_cfg_quote(bm_cfg_quote_t *q, const char *s);

/** Quotes a URL with its password masked ("http://u:***@h"); returns q->s. */
const char *bm_cfg_quote_url(bm_cfg_quote_t *q, const char *url);

/** Formats the message into err (when not NULL). */
void bm_cfg_err(bm_config_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Writes a duration with the largest unit that divides it exactly ("2s", "1500ms"). */
void bm_cfg_format_duration(char *b, size_t n, uint64_t ms);

#endif /* BM_CONFIG_KEYS_H */
