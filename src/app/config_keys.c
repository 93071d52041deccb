/* SPDX-License-Identifier: MIT */
/*
 * config_keys: the key table (one row per key of the configuration file) and the meaning of
 * each kind of value: its syntax, its range check, how it is written back. See
 * config_keys.h for the shape of the table and docs/configuration.md for how to add a key.
 */
#include "app/config_keys.h"
#include "app/config_rows.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/defaults.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/url.h"
#include "cluster/pool.h"
#include "edge/addr.h"
#include "edge/front.h"
#include "read/rules.h"

#define SIZE_MAX_BYTES (1ull << 40) /* 1 TiB */
#define HEADER_VALUE_MAX_BYTES (8u << 10)
#define HEADER_NAME_MAX_BYTES 256u

/* ---- small helpers ----------------------------------------------------------------- */

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static bool is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

void bm_cfg_err(bm_config_err_t *err, const char *fmt, ...)
{
    va_list ap;
    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

const char *bm_cfg_quote_n(bm_cfg_quote_t *q, const char *s, size_t len)
{
    size_t o = 0;
    q->s[o++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 48) {
            memcpy(q->s + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            q->s[o++] = '\\';
            q->s[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            o += (size_t)snprintf(q->s + o, 5, "\\x%02x", c);
        } else {
            q->s[o++] = (char)c;
        }
    }
    q->s[o++] = '"';
    q->s[o] = '\0';
    return q->s;
}

const char *bm_cfg_quote(bm_cfg_quote_t *q, const char *s)
{
    return bm_cfg_quote_n(q, s, strlen(s));
}

const char *bm_cfg_quote_url(bm_cfg_quote_t *q, const char *url)
{
    bm_str_t s = BM_STR_INIT;
    bm_url_mask(&s, url);
    bm_cfg_quote(q, s.oom ? "(url)" : bm_str_data(&s));
    bm_str_dispose(&s);
    return q->s;
}

/* Parses one or more decimal digits at *p (no sign, no spaces), advancing *p. */
static bool parse_digits(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t n = 0;
    if (!is_digit(*s))
        return false;
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - d) / 10)
            return false;
        n = n * 10 + d;
    }
    *p = s;
    *out = n;
    return true;
}

/* ---- value syntax -------------------------------------------------------------------- */

int bm_config_parse_duration(const char *s, uint32_t *ms)
{
    uint64_t n, mul;
    if (!s || !parse_digits(&s, &n))
        return BM_EINVAL;
    if (*s == '\0' || strcmp(s, "ms") == 0)
        mul = 1;
    else if (strcmp(s, "s") == 0)
        mul = 1000;
    else if (strcmp(s, "m") == 0)
        mul = 60000;
    else if (strcmp(s, "h") == 0)
        mul = 3600000;
    else
        return BM_EINVAL;
    if (n > DURATION_MAX_MS / mul)
        return BM_EINVAL;
    *ms = (uint32_t)(n * mul);
    return 0;
}

int bm_config_parse_size(const char *s, uint64_t *bytes)
{
    uint64_t n, mul;
    if (!s || !parse_digits(&s, &n))
        return BM_EINVAL;
    if (*s == '\0')
        mul = 1;
    else if (strcmp(s, "KiB") == 0)
        mul = KB;
    else if (strcmp(s, "MiB") == 0)
        mul = MB;
    else if (strcmp(s, "GiB") == 0)
        mul = GB;
    else if (strcmp(s, "TiB") == 0)
        mul = 1ull << 40;
    else
        return BM_EINVAL;
    if (n > SIZE_MAX_BYTES / mul)
        return BM_EINVAL;
    *bytes = n * mul;
    return 0;
}

/* A decimal in thousandths: "2", "2.5", "0.125", or a percentage "10%" (0.1). */
static int parse_decimal(const char *s, uint32_t *out)
{
    uint64_t whole = 0, frac = 0, scale = 1000;
    if (!parse_digits(&s, &whole))
        return BM_EINVAL;
    if (*s == '.') {
        s++;
        if (!is_digit(*s))
            return BM_EINVAL;
        for (; is_digit(*s); s++) {
            if (scale == 1)
                return BM_EINVAL; /* more than three decimals */
            scale /= 10;
            frac += (uint64_t)(*s - '0') * scale;
        }
    }
    uint64_t v;
    if (*s == '%' && s[1] == '\0') {
        if (whole > 1000000)
            return BM_EINVAL;
        v = whole * 10 + frac / 100; /* percent to thousandths */
        if (frac % 100)
            return BM_EINVAL;
    } else if (*s == '\0') {
        if (whole > 1000000)
            return BM_EINVAL;
        v = whole * 1000 + frac;
    } else {
        return BM_EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

static void fmt_decimal(char *b, size_t n, uint64_t v)
{
    if (v % 1000 == 0) {
        snprintf(b, n, "%" PRIu64, v / 1000);
        return;
    }
    unsigned frac = (unsigned)(v % 1000);
    int digits = 3;
    while (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    snprintf(b, n, "%" PRIu64 ".%0*u", v / 1000, digits, frac);
}

static int parse_count(const char *s, uint32_t *out)
{
    uint64_t n;
    if (!parse_digits(&s, &n) || *s != '\0' || n > UINT32_MAX)
        return BM_EINVAL;
    *out = (uint32_t)n;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
        *out = true;
        return 0;
    }
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
        *out = false;
        return 0;
    }
    return BM_EINVAL;
}

static bool listen_host_ok(const char *host)
{
    unsigned char addr[16];
    return strcasecmp(host, "localhost") == 0 || inet_pton(AF_INET, host, addr) == 1 ||
           inet_pton(AF_INET6, host, addr) == 1;
}

int bm_config_parse_listen(const char *s, char *host, size_t host_size, uint16_t *port)
{
    const char *h, *colon;
    size_t hlen;
    unsigned char addr[16];
    uint64_t p;
    if (!s)
        return BM_EINVAL;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':')
            return BM_EINVAL;
        h = s + 1;
        hlen = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return BM_EINVAL;
        h = s;
        hlen = (size_t)(colon - s);
        if (memchr(h, ':', hlen))
            return BM_EINVAL; /* an IPv6 address needs brackets */
    }
    if (hlen == 0 || hlen >= host_size || hlen >= 64)
        return BM_EINVAL;
    const char *ps = colon + 1;
    if (!parse_digits(&ps, &p) || *ps != '\0' || p > 65535)
        return BM_EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (s[0] == '[' ? inet_pton(AF_INET6, host, addr) != 1
                    : !(strcasecmp(host, "localhost") == 0 || inet_pton(AF_INET, host, addr) == 1))
        return BM_EINVAL;
    *port = (uint16_t)p;
    return 0;
}

/* "0x" + 64 hex digits. */
static bool root_ok(const char *s)
{
    if (strlen(s) != 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return false;
    for (size_t i = 2; i < 66; i++)
        if (!is_hex((unsigned char)s[i]))
            return false;
    return true;
}

/* ---- checks of upstreams and their headers ------------------------------------------ */

const char *bm_cfg_id_problem(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > BM_CONFIG_MAX_ID_LEN)
        return "must be 1 to 64 characters";
    if (!is_alpha((unsigned char)id[0]) && !is_digit((unsigned char)id[0]))
        return "must start with a letter or a digit";
    for (size_t i = 1; i < n; i++) {
        int c = (unsigned char)id[i];
        if (!is_alpha(c) && !is_digit(c) && c != '.' && c != '_' && c != '-')
            return "may only contain letters, digits, '.', '_' and '-'";
    }
    return NULL;
}

/* The host and port of an upstream URL: p..end is the authority after any "user@". */
static const char *host_problem(const char *host, const char *end)
{
    const char *port = NULL;
    if (host < end && *host == '[') {
        const char *rb = memchr(host, ']', (size_t)(end - host));
        char v6[64];
        unsigned char addr[16];
        size_t n = rb ? (size_t)(rb - host - 1) : 0;
        if (!rb || n == 0 || n >= sizeof v6)
            return "has a malformed IPv6 address";
        memcpy(v6, host + 1, n);
        v6[n] = '\0';
        if (inet_pton(AF_INET6, v6, addr) != 1)
            return "has a malformed IPv6 address";
        if (rb + 1 < end) {
            if (rb[1] != ':')
                return "has a malformed host";
            port = rb + 2;
        }
    } else {
        const char *c = host;
        for (; c < end && *c != ':'; c++) {
            int ch = (unsigned char)*c;
            if (!is_alpha(ch) && !is_digit(ch) && ch != '-' && ch != '.' && ch != '_')
                return "has a malformed host";
        }
        if (c == host)
            return "has no host";
        if (c < end)
            port = c + 1;
    }
    if (port) {
        uint64_t n = 0;
        const char *q = port;
        if (!parse_digits(&q, &n) || q != end || n == 0 || n > 65535)
            return "has a malformed port (1-65535)";
    }
    return NULL;
}

/*
 * An upstream base URL: http:// or https://, optional user[:password]@, a host name or an IP
 * literal ([v6] in brackets), an optional port 1-65535, an optional path prefix; no query,
 * fragment, space, control or non-ASCII byte, dot segment ("/../", "/%2e%2e") or malformed
 * escape in the path. It says what is wrong; src/base/url.h's bm_url_valid, which the pool and
 * the proxy path use, accepts every URL this one does.
 */
const char *bm_cfg_url_problem(const char *url)
{
    const char *p;
    if (strncasecmp(url, "http://", 7) == 0)
        p = url + 7;
    else if (strncasecmp(url, "https://", 8) == 0)
        p = url + 8;
    else
        return "must start with http:// or https://";
    for (const char *c = url; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u <= 0x20 || u == 0x7f)
            return "must not contain spaces or control characters";
        if (u == '?' || u == '#')
            return "must not contain a query or a fragment";
    }
    size_t alen = strcspn(p, "/");
    const char *at = NULL;
    for (const char *c = p; c < p + alen; c++)
        if (*c == '@')
            at = c;
    const char *why = host_problem(at ? at + 1 : p, p + alen);
    if (!why)
        why = bm_url_base_path_problem(url);
    if (!why && !bm_url_valid(url))
        why = "has malformed user information (letters, digits, -._~!$&'()*+,;=: and %-escapes)";
    return why;
}

static bool is_tchar(int c)
{
    return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

const char *bm_cfg_header_name_problem(const char *name)
{
    size_t n = strlen(name);
    static const char *const managed[] = {"Accept", "Accept-Encoding", "Content-Type",
                                          "Content-Encoding"};
    if (n == 0 || n > HEADER_NAME_MAX_BYTES)
        return "must be 1 to 256 characters";
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)name[i]))
            return "is not a valid header name";
    if (bm_header_is_hop_by_hop(name, n))
        return "is a hop-by-hop or framing header that beaconmux sets itself";
    for (size_t i = 0; i < sizeof managed / sizeof managed[0]; i++)
        if (strcasecmp(name, managed[i]) == 0)
            return "describes each request and is set per request by beaconmux";
    return NULL;
}

const char *bm_cfg_header_value_problem(const char *value)
{
    size_t n = strlen(value);
    if (n > HEADER_VALUE_MAX_BYTES)
        return "is longer than 8 KiB";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c == '\r' || c == '\n')
            return "contains a line break (CR or LF)";
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return "contains a control character";
    }
    return NULL;
}

/* A route rule's or a CORS method: an HTTP token in upper case ("GET", "POST"). */
const char *bm_cfg_method_problem(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > 7)
        return "must be an HTTP method such as GET or POST";
    for (size_t i = 0; i < n; i++)
        if (m[i] < 'A' || m[i] > 'Z')
            return "must be an HTTP method in upper case, such as GET or POST";
    return NULL;
}

static const char *tier_problem(const char *t)
{
    uint64_t v;
    const char *p = t;
    if (!parse_digits(&p, &v) || *p || v > 1000)
        return "must be a priority, a whole number from 0 to 1000";
    return NULL;
}

static const char *prefix_problem(const char *p)
{
    size_t n = strlen(p);
    if (n < 2 || p[0] != '/' || p[n - 1] == '/')
        return "must start with '/' and not end with one (\"/lighthouse\")";
    if (bm_pattern_problem(p) || strchr(p, '*'))
        return "must be a plain path: no '*', '?', '#', '%', '//' or spaces";
    return NULL;
}

static const char *client_problem(const char *c)
{
    if (bm_client_parse(c, strlen(c)) == BM_CLIENT_UNKNOWN)
        return "is not a client (lighthouse, prysm, teku, nimbus, lodestar, grandine, caplin)";
    return NULL;
}

/* stickySessions.key: "address", or the name of a request header. */
static const char *sticky_key_problem(const char *k)
{
    if (strcmp(k, "address") == 0)
        return NULL;
    size_t n = strlen(k);
    if (n == 0 || n > HEADER_NAME_MAX_BYTES)
        return "must be \"address\" or a header name";
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)k[i]))
            return "must be \"address\" or a header name";
    return NULL;
}

char *bm_cfg_default_id(size_t i)
{
    char b[32];
    snprintf(b, sizeof b, "node%zu", i + 1);
    return strdup(b);
}

/*
 * After an upstream's keys: an absent id takes its default by position, and ids are unique.
 * The position of a clash is the id's value when it was written, else the entry's start.
 */
static int upstream_finish(const bm_cfg_entry_t *e, char *msg, size_t n, bm_cfg_pos_t *at)
{
    bm_config_upstream_t *ups = e->entries, *up = &ups[e->index];
    bool explicit_id = up->id != NULL;
    bm_cfg_quote_t q;
    if (!up->id && !(up->id = bm_cfg_default_id(e->index)))
        return BM_ENOMEM;
    for (size_t j = 0; j < e->index; j++) {
        if (strcmp(ups[j].id, up->id) != 0)
            continue;
        *at = explicit_id ? e->value_at[0] : e->at; /* row 0 of upstream_keys: id */
        snprintf(msg, n, "%s: id %s is already used by %s[%zu]%s", e->path,
                 bm_cfg_quote(&q, up->id), e->list, j,
                 explicit_id ? "" : " (ids default to node1, node2, ...)");
        return BM_EINVAL;
    }
    /* before anything shows the URL (the --check dump, the nodes' logs, the status page) */
    if (up->secret_path && up->url && bm_url_secret_path_add(up->url) == BM_ENOMEM)
        return BM_ENOMEM;
    return 0;
}

/* Network ids unique; which rows the entry gave (its own sections). */
static int network_finish(const bm_cfg_entry_t *e, char *msg, size_t n, bm_cfg_pos_t *at)
{
    bm_config_t *nets = e->entries, *net = &nets[e->index];
    bm_cfg_quote_t q;
    net->network_given = e->given;
    for (size_t j = 0; j < e->index; j++) {
        if (net->network_id && nets[j].network_id &&
            strcmp(nets[j].network_id, net->network_id) == 0) {
            *at = e->value_at[0];
            snprintf(msg, n, "%s: id %s is already used by %s[%zu]", e->path,
                     bm_cfg_quote(&q, net->network_id), e->list, j);
            return BM_EINVAL;
        }
    }
    return 0;
}

/* ---- enumerations ------------------------------------------------------------------- */

static int parse_level(const char *s, int *v)
{
    bm_log_level_t l;
    if (bm_log_level_parse(s, &l) != 0)
        return BM_EINVAL;
    *v = (int)l;
    return 0;
}

static int parse_format(const char *s, int *v)
{
    bm_log_format_t f;
    if (bm_log_format_parse(s, &f) != 0)
        return BM_EINVAL;
    *v = (int)f;
    return 0;
}

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const format_names[] = {"text", "json"};
static const char *const selection_names[] = {"first", "best-value"};

static const bm_cfg_enum_t level_enum = {"log level", level_names, 5, parse_level};
static const bm_cfg_enum_t format_enum = {"log format", format_names, 2, parse_format};
static const bm_cfg_enum_t selection_enum = {"block selection", selection_names, 2, NULL};
static const char *const checkpoint_mode_names[] = {"live", "strict"};
static const bm_cfg_enum_t checkpoint_mode_enum = {"checkpoint mode", checkpoint_mode_names, 2,
                                                   NULL};
static const char *const balance_names[] = {"score", "round-robin", "random", "least-conn"};
static const bm_cfg_enum_t balance_enum = {"load balancing strategy", balance_names, 4, NULL};
static const char *const rule_strategy_names[] = {"inherit", "score", "round-robin", "random",
                                                  "least-conn"};
static const bm_cfg_enum_t rule_strategy_enum = {"load balancing strategy", rule_strategy_names, 5,
                                                 NULL};

_Static_assert(BM_LOG_OFF == 4 && BM_LOG_JSON == 1 && BM_PRODUCE_BEST_VALUE == 1 &&
                   BM_ATTEST_CHECKPOINTS_STRICT == 1 && BM_BALANCE_LEAST_CONN == 3 &&
                   BM_BALANCE_COUNT == 4,
               "every value of an enumerated key has its name");

/* ---- the key table -------------------------------------------------------------------
 * One row per key, built by the macros below; AT() refuses, at compile time, a field whose
 * type is not the one its kind stores. Sections come before the sections holding them. */

// clang-format off
/* Rows: struct of the section, YAML key, field, then the kind's arguments (min, max, default). */

#define T bm_config_log_t
static const bm_cfg_key_t log_keys[] = {
    ENUM(T, "level",  level,  bm_log_level_t,  level_enum,  BM_DEFAULT_LOG_LEVEL),
    ENUM(T, "format", format, bm_log_format_t, format_enum, BM_DEFAULT_LOG_FORMAT),
    BOOL(T, "access", access, BM_DEFAULT_LOG_ACCESS),
};
#undef T


static const bm_cfg_map_t header_map = {"header", BM_CONFIG_MAX_HEADERS,
                                        bm_cfg_header_name_problem, bm_cfg_header_value_problem};
static const bm_cfg_key_t autotune_keys[] = {
    COUNT(bm_config_autotune_t, "min", min, 1, 1000000, BM_DEFAULT_UPSTREAM_AUTOTUNE_MIN),
    COUNT(bm_config_autotune_t, "max", max, 0, 1000000, BM_DEFAULT_UPSTREAM_AUTOTUNE_MAX),
};
static const bm_cfg_section_t autotune_section =
    SECTION_OF(bm_config_autotune_t, autotune_keys, NULL);

#define T bm_config_upstream_t
static const bm_cfg_key_t upstream_keys[] = {
    TEXT(T, "id",       id,  bm_cfg_id_problem,  0), /* row 0: upstream_finish reads it */
    TEXT(T, "url",      url, bm_cfg_url_problem, BM_CFG_REQUIRED | BM_CFG_MASK_URL),
    MAP(T,  "headers",  headers, n_headers, header_map),
    COUNT(T, "priority", priority, 0, 1000, BM_DEFAULT_UPSTREAM_PRIORITY),
    COUNT(T, "weight",   weight,   1, 1000, BM_DEFAULT_UPSTREAM_WEIGHT),
    BOOL(T,  "archive",  archive,  BM_DEFAULT_UPSTREAM_ARCHIVE),
    BOOL(T,  "shadow",   shadow,   BM_DEFAULT_UPSTREAM_SHADOW),
    SECTION(T, "autoTune", auto_tune, bm_config_autotune_t, autotune_section),
    COUNT(T, "maxConnections", max_connections, 1, 10000, BM_DEFAULT_UPSTREAM_MAX_CONNECTIONS),
    BOOL(T,  "forwardedFor", forwarded_for, false),
    BOOL(T,  "secretPath", secret_path, false),
};
#undef T

#define T bm_config_server_t
static const bm_cfg_key_t server_keys[] = {
    SIZE(T,     "maxBodyBytes",    max_body_bytes,      KB, 4 * GB,
         BM_DEFAULT_SERVER_MAX_BODY_BYTES),
    SIZE(T,     "maxHeaderBytes",  max_header_bytes,    KB, MB, BM_DEFAULT_SERVER_MAX_HEADER_BYTES),
    SIZE(T,     "maxTargetBytes",  max_target_bytes,    KB, MB, BM_DEFAULT_SERVER_MAX_TARGET_BYTES),
    DURATION(T, "headerTimeout",   header_timeout_ms,   1, D_MAX,
             BM_DEFAULT_SERVER_HEADER_TIMEOUT_MS),
    DURATION(T, "bodyTimeout",     body_timeout_ms,     1, D_MAX,
             BM_DEFAULT_SERVER_BODY_TIMEOUT_MS),
    DURATION(T, "bodyDeadline",    body_deadline_ms,    1, D_MAX,
             BM_DEFAULT_SERVER_BODY_DEADLINE_MS),
    DURATION(T, "idleTimeout",     idle_timeout_ms,     1000, D_MAX,
             BM_DEFAULT_SERVER_IDLE_TIMEOUT_MS),
    COUNT(T,    "maxConnections",  max_connections,     1, 1000000,
          BM_DEFAULT_SERVER_MAX_CONNECTIONS),
    COUNT(T,    "maxConnectionsPerClient", max_connections_per_client, 1, 1000000,
          BM_DEFAULT_SERVER_MAX_CONNECTIONS_PER_CLIENT),
    DURATION(T, "sendTimeout",     send_timeout_ms,     1, D_MAX,
             BM_DEFAULT_SERVER_SEND_TIMEOUT_MS),
    DURATION(T, "shutdownTimeout", shutdown_timeout_ms, 0, D_MAX,
             BM_DEFAULT_SERVER_SHUTDOWN_TIMEOUT_MS),
    DURATION(T, "memoryTrimInterval", memory_trim_interval_ms, 0, D_MAX,
             BM_DEFAULT_SERVER_MEMORY_TRIM_INTERVAL_MS),
    STRINGS(T,  "allowedClients",  allowed_clients, n_allowed_clients, 256, bm_cidr_problem),
    BOOL(T,     "reusePort",       reuse_port,          false),
    SECTION(T,  "tls",             tls, bm_config_server_tls_t, bm_cfg_server_tls),
};
#undef T

#define T bm_config_timeouts_t
static const bm_cfg_key_t timeouts_keys[] = {
    DURATION(T, "connect", connect_ms, 1, D_MAX, BM_DEFAULT_TIMEOUTS_CONNECT_MS),
    DURATION(T, "read",    read_ms,    1, D_MAX, BM_DEFAULT_TIMEOUTS_READ_MS),
    DURATION(T, "write",   write_ms,   1, D_MAX, BM_DEFAULT_TIMEOUTS_WRITE_MS),
};
#undef T

static const bm_cfg_key_t failover_keys[] = {
    COUNT_INH(bm_config_failover_t, "maxAttempts", max_attempts, 1, 16), /* deprecated */
};

/* ---- the read path: routing, failsafe, blockedPaths, clientRoutes, routeRules ---- */

#define T bm_config_score_weights_t
static const bm_cfg_key_t score_weight_keys[] = {
    COUNT(T, "errorRate",    error_rate,    0, 100, BM_DEFAULT_ROUTING_SCORE_WEIGHT_ERROR_RATE),
    COUNT(T, "latency",      latency,       0, 100, BM_DEFAULT_ROUTING_SCORE_WEIGHT_LATENCY),
    COUNT(T, "headLag",      head_lag,      0, 100, BM_DEFAULT_ROUTING_SCORE_WEIGHT_HEAD_LAG),
    COUNT(T, "syncDistance", sync_distance, 0, 100, BM_DEFAULT_ROUTING_SCORE_WEIGHT_SYNC_DISTANCE),
};
#undef T

#define T bm_config_sticky_t
static const bm_cfg_key_t sticky_keys[] = {
    BOOL(T,    "enabled",         enabled, BM_DEFAULT_ROUTING_STICKY_ENABLED),
    TEXT(T,    "key",             key, sticky_key_problem, 0),
    DECIMAL(T, "rebalanceFactor", rebalance_factor, 1000, 1000000,
            BM_DEFAULT_ROUTING_STICKY_REBALANCE_FACTOR),
};
#undef T

#define T bm_config_retention_t
static const bm_cfg_key_t retention_keys[] = {
    COUNT(T, "blobEpochs",  blob_epochs,  1, UINT32_MAX, BM_DEFAULT_ROUTING_RETENTION_BLOB_EPOCHS),
    COUNT(T, "blockEpochs", block_epochs, 1, UINT32_MAX, BM_DEFAULT_ROUTING_RETENTION_BLOCK_EPOCHS),
    COUNT(T, "stateSlots",  state_slots,  1, UINT32_MAX, BM_DEFAULT_ROUTING_RETENTION_STATE_SLOTS),
};
#undef T

static const bm_cfg_section_t score_weights_section =
    SECTION_OF(bm_config_score_weights_t, score_weight_keys, NULL);
static const bm_cfg_section_t sticky_section = SECTION_OF(bm_config_sticky_t, sticky_keys, NULL);
static const bm_cfg_section_t retention_section =
    SECTION_OF(bm_config_retention_t, retention_keys, NULL);

#define T bm_config_routing_t
static const bm_cfg_key_t routing_keys[] = {
    ENUM(T,    "loadBalancing",  load_balancing, bm_balance_strategy_t, balance_enum,
         BM_BALANCE_SCORE),
    SECTION(T, "scoreWeights",   score_weights, bm_config_score_weights_t, score_weights_section),
    SECTION(T, "stickySessions", sticky,        bm_config_sticky_t,        sticky_section),
    SECTION(T, "retention",      retention,     bm_config_retention_t,     retention_section),
};
#undef T

#define T bm_config_retry_t
static const bm_cfg_key_t retry_keys[] = {
    COUNT_INH(T, "maxAttempts", max_attempts, 1, 16),
    DURATION(T,  "delay",       delay_ms,     0, D_MAX, BM_DEFAULT_FAILSAFE_RETRY_DELAY_MS),
    DECIMAL(T,   "backoff",     backoff,      1000, 100000, BM_DEFAULT_FAILSAFE_RETRY_BACKOFF),
    DURATION(T,  "maxDelay",    max_delay_ms, 0, D_MAX, BM_DEFAULT_FAILSAFE_RETRY_MAX_DELAY_MS),
    DURATION(T,  "jitter",      jitter_ms,    0, D_MAX, BM_DEFAULT_FAILSAFE_RETRY_JITTER_MS),
};
static const bm_cfg_key_t rule_retry_keys[] = {
    COUNT_INH(T,    "maxAttempts", max_attempts, 1, 16),
    DURATION_OPT(T, "delay",       delay_ms,     0, D_MAX),
    DECIMAL_INH(T,  "backoff",     backoff,      1000, 100000),
    DURATION_OPT(T, "maxDelay",    max_delay_ms, 0, D_MAX),
    DURATION_OPT(T, "jitter",      jitter_ms,    0, D_MAX),
};
#undef T

#define T bm_config_hedge_t
static const bm_cfg_key_t hedge_keys[] = {
    DURATION(T, "delay",       delay_ms,     1, D_MAX, BM_DEFAULT_FAILSAFE_HEDGE_DELAY_MS),
    COUNT(T,    "maxCount",    max_count,    0, 8, BM_DEFAULT_FAILSAFE_HEDGE_MAX_COUNT),
    DECIMAL(T,  "maxRatio",    max_ratio,    0, 1000, BM_DEFAULT_FAILSAFE_HEDGE_MAX_RATIO),
    COUNT(T,    "maxPriority", max_priority, 0, 1000, BM_DEFAULT_FAILSAFE_HEDGE_MAX_PRIORITY),
};
static const bm_cfg_key_t rule_hedge_keys[] = {
    DURATION_OPT(T, "delay",    delay_ms,  1, D_MAX),
    COUNT_INH(T,    "maxCount", max_count, 0, 8),
};
#undef T

#define T bm_config_breaker_t
static const bm_cfg_key_t breaker_keys[] = {
    COUNT(T,    "failureThreshold", failure_threshold,  0, 1000,
          BM_DEFAULT_FAILSAFE_CB_FAILURE_THRESHOLD),
    COUNT(T,    "successThreshold", success_threshold,  1, 1000,
          BM_DEFAULT_FAILSAFE_CB_SUCCESS_THRESHOLD),
    DURATION(T, "halfOpenAfter",    half_open_after_ms, 1, D_MAX,
             BM_DEFAULT_FAILSAFE_CB_HALF_OPEN_AFTER_MS),
};
#undef T

static const bm_cfg_section_t retry_section = SECTION_OF(bm_config_retry_t, retry_keys, NULL);
static const bm_cfg_section_t rule_retry_section =
    SECTION_OF(bm_config_retry_t, rule_retry_keys, NULL);
static const bm_cfg_section_t hedge_section = SECTION_OF(bm_config_hedge_t, hedge_keys, NULL);
static const bm_cfg_section_t rule_hedge_section =
    SECTION_OF(bm_config_hedge_t, rule_hedge_keys, NULL);
static const bm_cfg_section_t breaker_section =
    SECTION_OF(bm_config_breaker_t, breaker_keys, NULL);

#define T bm_config_failsafe_t
static const bm_cfg_key_t failsafe_keys[] = {
    DURATION(T, "timeout",        timeout_ms, 1, D_MAX, BM_DEFAULT_FAILSAFE_TIMEOUT_MS),
    DURATION(T, "heavyTimeout",   heavy_timeout_ms, 1, D_MAX, BM_DEFAULT_FAILSAFE_HEAVY_TIMEOUT_MS),
    SECTION(T,  "retry",          retry,           bm_config_retry_t,   retry_section),
    SECTION(T,  "hedge",          hedge,           bm_config_hedge_t,   hedge_section),
    SECTION(T,  "circuitBreaker", circuit_breaker, bm_config_breaker_t, breaker_section),
};
#undef T

#define T bm_config_client_route_t
static const bm_cfg_key_t client_route_keys[] = {
    TEXT(T,    "prefix",      prefix, prefix_problem, BM_CFG_REQUIRED),
    STRINGS(T, "upstreams",   upstreams, n_upstreams, BM_CONFIG_MAX_UPSTREAMS, bm_cfg_id_problem),
    TEXT(T,    "client",      client, client_problem, 0),
    BOOL(T,    "stripPrefix", strip_prefix, false),
};
#undef T

static const bm_cfg_key_t consensus_keys[] = {
    COUNT(bm_config_consensus_t, "query", query, 0, BM_CONFIG_MAX_UPSTREAMS, 0),
    COUNT(bm_config_consensus_t, "agree", agree, 0, BM_CONFIG_MAX_UPSTREAMS, 0),
};
static const bm_cfg_section_t consensus_section =
    SECTION_OF(bm_config_consensus_t, consensus_keys, NULL);

#define T bm_config_route_rule_t
static const bm_cfg_key_t route_rule_keys[] = {
    TEXT(T,         "method",    method, bm_cfg_method_problem, 0),
    TEXT(T,         "path",      path, bm_pattern_problem, BM_CFG_REQUIRED),
    DURATION_OPT(T, "timeout",   timeout_ms, 1, D_MAX),
    SECTION(T,      "retry",     retry,     bm_config_retry_t,     rule_retry_section),
    SECTION(T,      "hedge",     hedge,     bm_config_hedge_t,     rule_hedge_section),
    SECTION(T,      "consensus", consensus, bm_config_consensus_t, consensus_section),
    ENUM(T,         "strategy",  strategy,  int, rule_strategy_enum, 0),
    STRINGS(T,      "upstreams", upstreams, n_upstreams, BM_CONFIG_MAX_UPSTREAMS,
            bm_cfg_id_problem),
    STRINGS(T,      "tiers",     tiers, n_tiers, 64, tier_problem),
    BOOL(T,         "blocked",   blocked, false),
};
#undef T

static const bm_cfg_section_t client_route_section =
    SECTION_OF(bm_config_client_route_t, client_route_keys, NULL);
static const bm_cfg_section_t route_rule_section =
    SECTION_OF(bm_config_route_rule_t, route_rule_keys, NULL);

static const bm_cfg_key_t discovery_keys[] = {
    DURATION(bm_config_discovery_t, "retryInterval", retry_interval_ms, 100, D_MAX,
             BM_DEFAULT_DISCOVERY_RETRY_INTERVAL_MS),
};

static const bm_cfg_key_t tls_keys[] = {
    BOOL(bm_config_tls_t, "verify", verify, BM_DEFAULT_TLS_VERIFY),
    PATH(bm_config_tls_t, "caFile", ca_file),
};

#define T bm_config_health_t
static const bm_cfg_key_t health_keys[] = {
    COUNT(T, "maxHeadLag", max_head_lag, 0, UINT32_MAX, BM_DEFAULT_HEALTH_MAX_HEAD_LAG),
    COUNT(T, "headQuorum", head_quorum,  0, BM_CONFIG_MAX_UPSTREAMS, BM_DEFAULT_HEALTH_HEAD_QUORUM),
};
#undef T

#define T bm_config_events_t
static const bm_cfg_key_t events_keys[] = {
    DURATION(T, "keepalive",            keepalive_ms,           1000, D_MAX,
             BM_DEFAULT_EVENTS_KEEPALIVE_MS),
    SIZE(T,     "subscriberMaxPending", subscriber_max_pending, KB, 4 * GB,
         BM_DEFAULT_EVENTS_SUBSCRIBER_MAX_PENDING),
    COUNT(T,    "dedupWindow",          dedup_window,           1, 1u << 20,
          BM_DEFAULT_EVENTS_DEDUP_WINDOW),
    /* unset: two slots, the streams' own rule (bm_nodestream_head_wait_ms); a value below
     * two slots is raised to two slots once the slot is known */
    DURATION_OPT(T, "headersTimeout",   headers_timeout_ms,     1, D_MAX),
};
#undef T

/* Every duty read a race holds has its own hold; an unset key inherits duties.holdFloor or
 * duties.maxHold (bm_config_duty_hold). One section, five places. */
static const bm_cfg_key_t duty_hold_keys[] = {
    DURATION_OPT(bm_config_duty_hold_t, "holdFloor", hold_floor_ms, 0, D_MAX),
    DURATION_OPT(bm_config_duty_hold_t, "maxHold",   max_hold_ms,   1, D_MAX),
};
static const bm_cfg_section_t duty_hold_section =
    SECTION_OF(bm_config_duty_hold_t, duty_hold_keys, NULL);

#define T bm_config_duties_t
#define HOLD(key, duty) SECTION(T, key, hold[duty], bm_config_duty_hold_t, duty_hold_section)
static const bm_cfg_key_t duties_keys[] = {
    DURATION(T, "holdFloor",           hold_floor_ms,            0, D_MAX,
             BM_DEFAULT_DUTIES_HOLD_FLOOR_MS),
    DURATION(T, "maxHold",             max_hold_ms,              1, D_MAX,
             BM_DEFAULT_DUTIES_MAX_HOLD_MS),
    DURATION(T, "proposalDeadline",    proposal_deadline_ms,     1, D_MAX,
             BM_DEFAULT_DUTIES_PROPOSAL_DEADLINE_MS),
    ENUM(T,     "blockSelection",      block_selection, bm_produce_selection_t, selection_enum,
         BM_PRODUCE_DEFAULT_SELECTION),
    DURATION(T, "bestValueGrace",      best_value_grace_ms,      0, D_MAX,
             BM_DEFAULT_DUTIES_BEST_VALUE_GRACE_MS),
    DURATION(T, "writeTimeout",        write_timeout_ms,         1, D_MAX,
             BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS),
    DURATION(T, "dutiesMajorityAfter", duties_majority_after_ms, 1, D_MAX,
             BM_DEFAULT_DUTIES_MAJORITY_AFTER_MS),
    DURATION(T, "aggregateGrace",      aggregate_grace_ms,       0, D_MAX,
             BM_DEFAULT_DUTIES_AGGREGATE_GRACE_MS),
    COUNT(T,    "checkpointQuorum",    checkpoint_quorum,        0, BM_CONFIG_MAX_UPSTREAMS,
          BM_DEFAULT_DUTIES_CHECKPOINT_QUORUM),
    ENUM(T,     "checkpointMode",      checkpoint_mode, bm_attest_checkpoint_mode_t,
         checkpoint_mode_enum, BM_ATTEST_DEFAULT_CHECKPOINT_MODE),
    HOLD("attestationData",           BM_CONFIG_DUTY_ATTESTATION_DATA),
    HOLD("headRoot",                  BM_CONFIG_DUTY_HEAD_ROOT),
    HOLD("payloadAttestationData",    BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA),
    HOLD("aggregateAttestation",      BM_CONFIG_DUTY_AGGREGATE_ATTESTATION),
    HOLD("syncCommitteeContribution", BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION),
};
#undef HOLD
#undef T

static const bm_cfg_section_t log_section = SECTION_OF(bm_config_log_t, log_keys, NULL);
static const bm_cfg_section_t upstream_section =
    SECTION_OF(bm_config_upstream_t, upstream_keys, upstream_finish);
static const bm_cfg_section_t server_section = SECTION_OF(bm_config_server_t, server_keys, NULL);
static const bm_cfg_section_t timeouts_section =
    SECTION_OF(bm_config_timeouts_t, timeouts_keys, NULL);
static const bm_cfg_section_t failover_section =
    SECTION_OF(bm_config_failover_t, failover_keys, NULL);
static const bm_cfg_section_t discovery_section =
    SECTION_OF(bm_config_discovery_t, discovery_keys, NULL);
static const bm_cfg_section_t tls_section = SECTION_OF(bm_config_tls_t, tls_keys, NULL);
static const bm_cfg_section_t health_section = SECTION_OF(bm_config_health_t, health_keys, NULL);
static const bm_cfg_section_t events_section = SECTION_OF(bm_config_events_t, events_keys, NULL);
static const bm_cfg_section_t duties_section = SECTION_OF(bm_config_duties_t, duties_keys, NULL);
static const bm_cfg_section_t routing_section = SECTION_OF(bm_config_routing_t, routing_keys, NULL);
static const bm_cfg_section_t failsafe_section =
    SECTION_OF(bm_config_failsafe_t, failsafe_keys, NULL);

/* ---- networks: the per-network keys again (the edge's sections are in config_edge.c) ---- */

/* A networks[] entry: a bm_config_t of which only these rows are set; row 0 is its id. The
 * sections it leaves out are the top level's (bm_config_network). */
#define T bm_config_t
static const bm_cfg_key_t network_keys[] = {
    TEXT(T,    "id",        network_id, bm_front_network_id_problem, BM_CFG_REQUIRED),
    LIST(T,    "upstreams", upstreams, bm_config_upstream_t, n_upstreams, upstream_section,
         BM_CONFIG_MAX_UPSTREAMS),
    ROOT(T,    "genesisValidatorsRoot", genesis_validators_root),
    SECTION(T, "routing",   routing,   bm_config_routing_t,   routing_section),
    SECTION(T, "failsafe",  failsafe,  bm_config_failsafe_t,  failsafe_section),
    SECTION(T, "cache",     cache,     bm_config_cache_t,     bm_cfg_cache),
    LIST(T,    "routeRules",   route_rules,   bm_config_route_rule_t,   n_route_rules,
         route_rule_section, BM_CONFIG_MAX_RULES),
    STRINGS_DEF(T, "blockedPaths", blocked_paths, n_blocked_paths, BM_CONFIG_MAX_RULES,
                bm_pattern_problem, bm_rules_default_blocked),
    LIST(T,    "clientRoutes", client_routes, bm_config_client_route_t, n_client_routes,
         client_route_section, BM_CONFIG_MAX_RULES),
    SECTION(T, "duties",    duties,    bm_config_duties_t,    duties_section),
    SECTION(T, "health",    health,    bm_config_health_t,    health_section),
    SECTION(T, "events",    events,    bm_config_events_t,    events_section),
};
#undef T
const bm_cfg_section_t bm_cfg_network = SECTION_OF(bm_config_t, network_keys, network_finish);

/* stateDir: an absolute directory path; whether it exists and is writable is checked at
 * start (systemd's StateDirectory= creates it only then). */
static const char *state_dir_problem(const char *v)
{
    if (v[0] && v[0] != '/') /* "" means none */
        return "must be an absolute path";
    if (strlen(v) > 3072)
        return "is too long";
    return NULL;
}

#define T bm_config_t
static const bm_cfg_key_t root_keys[] = {
    LISTEN(T,  "listen", listen_host, listen_port, BM_DEFAULT_LISTEN_HOST, BM_DEFAULT_LISTEN_PORT),
    ROOT(T,    "genesisValidatorsRoot", genesis_validators_root),
    SECTION(T, "log",       log,       bm_config_log_t,       log_section),
    LIST(T,    "upstreams", upstreams, bm_config_upstream_t, n_upstreams, upstream_section,
         BM_CONFIG_MAX_UPSTREAMS),
    SECTION(T, "server",    server,    bm_config_server_t,    server_section),
    SECTION(T, "timeouts",  timeouts,  bm_config_timeouts_t,  timeouts_section),
    SECTION(T, "failover",  failover,  bm_config_failover_t,  failover_section),
    SECTION(T, "discovery", discovery, bm_config_discovery_t, discovery_section),
    SECTION(T, "tls",       tls,       bm_config_tls_t,       tls_section),
    SECTION(T, "health",    health,    bm_config_health_t,    health_section),
    SECTION(T, "events",    events,    bm_config_events_t,    events_section),
    SECTION(T, "duties",    duties,    bm_config_duties_t,    duties_section),
    SECTION(T, "routing",   routing,   bm_config_routing_t,   routing_section),
    SECTION(T, "failsafe",  failsafe,  bm_config_failsafe_t,  failsafe_section),
    SECTION(T, "metrics",   metrics,   bm_config_metrics_t,   bm_cfg_metrics),
    SECTION(T, "journal",   journal,   bm_config_journal_t,   bm_cfg_journal),
    SECTION(T, "ui",        ui,        bm_config_ui_t,        bm_cfg_ui),
    STRINGS_DEF(T, "blockedPaths", blocked_paths, n_blocked_paths, BM_CONFIG_MAX_RULES,
                bm_pattern_problem, bm_rules_default_blocked),
    LIST(T,    "clientRoutes", client_routes, bm_config_client_route_t, n_client_routes,
         client_route_section, BM_CONFIG_MAX_RULES),
    LIST(T,    "routeRules",   route_rules,   bm_config_route_rule_t,   n_route_rules,
         route_rule_section, BM_CONFIG_MAX_RULES),
    SECTION(T, "cache",     cache,      bm_config_cache_t,      bm_cfg_cache),
    SECTION(T, "cors",      cors,       bm_config_cors_t,       bm_cfg_cors),
    SECTION(T, "rateLimit", rate_limit, bm_config_rate_limit_t, bm_cfg_rate_limit),
    STRINGS(T, "trustedProxies", trusted_proxies, n_trusted_proxies, 256, bm_cidr_problem),
    SECTION(T, "auth",      auth,       bm_config_auth_t,       bm_cfg_auth),
    SECTION(T, "state",     state,      bm_config_state_t,      bm_cfg_state),
    TEXT(T,    "stateDir",  state_dir, state_dir_problem, BM_CFG_EMPTY_NONE),
    LIST(T,    "networks",  networks,   bm_config_t,            n_networks, bm_cfg_network, 64),
};
#undef T
// clang-format on

const bm_cfg_section_t bm_cfg_root = SECTION_OF(bm_config_t, root_keys, NULL);

/* ---- reading and writing values by row ---------------------------------------------- */

static void *at_off(const void *obj, size_t off)
{
    return (char *)(uintptr_t)obj + off;
}

uint64_t bm_cfg_num(const bm_cfg_key_t *k, const void *obj)
{
    const void *p = at_off(obj, k->off);
    switch (k->kind) {
    case BM_CFG_SIZE:
        return *(const uint64_t *)p;
    case BM_CFG_DURATION:
    case BM_CFG_DURATION_OPT:
    case BM_CFG_COUNT:
    case BM_CFG_DECIMAL:
        return *(const uint32_t *)p;
    case BM_CFG_BOOL:
        return *(const bool *)p;
    case BM_CFG_ENUM:
        return (uint64_t)(int64_t) * (const int *)p;
    default:
        return 0;
    }
}

static void set_num(const bm_cfg_key_t *k, void *obj, uint64_t v)
{
    void *p = at_off(obj, k->off);
    switch (k->kind) {
    case BM_CFG_SIZE:
        *(uint64_t *)p = v;
        break;
    case BM_CFG_DURATION:
    case BM_CFG_DURATION_OPT:
    case BM_CFG_COUNT:
    case BM_CFG_DECIMAL:
        *(uint32_t *)p = (uint32_t)v;
        break;
    case BM_CFG_BOOL:
        *(bool *)p = v != 0;
        break;
    case BM_CFG_ENUM:
        *(int *)p = (int)v;
        break;
    default:
        break;
    }
}

/* Enumerations are stored as the enum types of their fields, which are int-sized here. */
_Static_assert(sizeof(bm_log_level_t) == sizeof(int) && sizeof(bm_log_format_t) == sizeof(int) &&
                   sizeof(bm_produce_selection_t) == sizeof(int) &&
                   sizeof(bm_balance_strategy_t) == sizeof(int),
               "an enumerated key is stored as an int");

static char **str_field(const bm_cfg_key_t *k, void *obj)
{
    return at_off(obj, k->off);
}

const char *bm_cfg_str(const bm_cfg_key_t *k, const void *obj)
{
    return *(char *const *)at_off(obj, k->off);
}

static void fmt_size(char *b, size_t n, uint64_t v)
{
    if (v != 0 && v % (GB << 10) == 0)
        snprintf(b, n, "%" PRIu64 "TiB", v >> 40);
    else if (v != 0 && v % GB == 0)
        snprintf(b, n, "%" PRIu64 "GiB", v / GB);
    else if (v != 0 && v % MB == 0)
        snprintf(b, n, "%" PRIu64 "MiB", v / MB);
    else if (v != 0 && v % KB == 0)
        snprintf(b, n, "%" PRIu64 "KiB", v / KB);
    else
        snprintf(b, n, "%" PRIu64, v);
}

void bm_cfg_format_duration(char *b, size_t n, uint64_t ms)
{
    if (ms != 0 && ms % 3600000 == 0)
        snprintf(b, n, "%" PRIu64 "h", ms / 3600000);
    else if (ms != 0 && ms % 60000 == 0)
        snprintf(b, n, "%" PRIu64 "m", ms / 60000);
    else if (ms != 0 && ms % 1000 == 0)
        snprintf(b, n, "%" PRIu64 "s", ms / 1000);
    else
        snprintf(b, n, "%" PRIu64 "ms", ms);
}

void bm_cfg_format(char *b, size_t n, const bm_cfg_key_t *k, uint64_t v)
{
    switch (k->kind) {
    case BM_CFG_DURATION:
    case BM_CFG_DURATION_OPT:
        bm_cfg_format_duration(b, n, v);
        break;
    case BM_CFG_SIZE:
        fmt_size(b, n, v);
        break;
    case BM_CFG_DECIMAL:
        fmt_decimal(b, n, v);
        break;
    case BM_CFG_BOOL:
        snprintf(b, n, "%s", v ? "true" : "false");
        break;
    case BM_CFG_ENUM:
        snprintf(b, n, "%s", v < k->names->n ? k->names->names[v] : "?");
        break;
    default:
        snprintf(b, n, "%" PRIu64, v);
        break;
    }
}

/* "debug, info, warn, error or off" */
static void enum_choices(char *b, size_t n, const bm_cfg_enum_t *e)
{
    size_t o = 0;
    b[0] = '\0';
    for (size_t i = 0; i < e->n && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%s",
                              i == 0          ? ""
                              : i + 1 == e->n ? " or "
                                              : ", ",
                              e->names[i]);
}

static bool enum_parse(const bm_cfg_enum_t *e, const char *s, int *v)
{
    if (e->parse)
        return e->parse(s, v) == 0;
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(s, e->names[i]) == 0) {
            *v = (int)i;
            return true;
        }
    }
    return false;
}

static bool is_number(bm_cfg_kind_t kind)
{
    return kind == BM_CFG_DURATION || kind == BM_CFG_DURATION_OPT || kind == BM_CFG_SIZE ||
           kind == BM_CFG_COUNT || kind == BM_CFG_DECIMAL;
}

bool bm_cfg_unset(const bm_cfg_key_t *k, const void *obj)
{
    return (k->kind == BM_CFG_DURATION_OPT || (k->flags & BM_CFG_INHERIT)) &&
           bm_cfg_num(k, obj) == BM_CONFIG_UNSET;
}

static bool check_number(const bm_cfg_key_t *k, uint64_t v, char *msg, size_t n)
{
    char lo[32], hi[32], got[32];
    if ((v >= k->min && v <= k->max) ||
        ((k->kind == BM_CFG_DURATION_OPT || (k->flags & BM_CFG_INHERIT)) && v == BM_CONFIG_UNSET))
        return true;
    bm_cfg_format(lo, sizeof lo, k, k->min);
    bm_cfg_format(hi, sizeof hi, k, k->max);
    bm_cfg_format(got, sizeof got, k, v);
    if (k->max == UINT32_MAX && k->kind == BM_CFG_COUNT)
        snprintf(msg, n, "must be at least %s (got %s)", lo, got);
    else
        snprintf(msg, n, "must be between %s and %s (got %s)", lo, hi, got);
    return false;
}

static bool check_path(const char *v, char *msg, size_t n)
{
    struct stat st;
    bm_cfg_quote_t q;
    if (!v)
        return true;
    if (stat(v, &st) != 0 || access(v, R_OK) != 0) {
        snprintf(msg, n, "cannot read %s: %s", bm_cfg_quote(&q, v), strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(msg, n, "%s is not a regular file", bm_cfg_quote(&q, v));
        return false;
    }
    return true;
}

bool bm_cfg_check(const bm_cfg_key_t *k, const void *obj, char *msg, size_t n)
{
    if (is_number(k->kind))
        return check_number(k, bm_cfg_num(k, obj), msg, n);
    switch (k->kind) {
    case BM_CFG_ENUM:
        if (bm_cfg_num(k, obj) < k->names->n)
            return true;
        snprintf(msg, n, "is not a %s", k->names->noun);
        return false;
    case BM_CFG_LISTEN: {
        const char *host = bm_cfg_str(k, obj);
        if ((host && listen_host_ok(host)) || (!host && !k->def_text))
            return true; /* a listener with no default host is off until given */
        snprintf(msg, n, "host must be an IPv4 address, an IPv6 address or localhost");
        return false;
    }
    case BM_CFG_ROOT: {
        const char *v = bm_cfg_str(k, obj);
        if (!v || root_ok(v))
            return true;
        snprintf(msg, n, "must be 0x followed by 64 hex digits");
        return false;
    }
    case BM_CFG_PATH:
        return check_path(bm_cfg_str(k, obj), msg, n);
    default:
        return true;
    }
}

/* Replaces the string at *field by a copy of v ("" stores NULL when `empty_is_null`). */
static bool set_string(char **field, const char *v, bool empty_is_null, char *msg, size_t n)
{
    char *dup = NULL;
    if ((v[0] || !empty_is_null) && !(dup = strdup(v))) {
        snprintf(msg, n, "out of memory");
        return false;
    }
    free(*field);
    *field = dup;
    return true;
}

static bool set_listen(const bm_cfg_key_t *k, void *obj, const char *v, char *msg, size_t n)
{
    char host[64];
    uint16_t port;
    bm_cfg_quote_t q;
    if (bm_config_parse_listen(v, host, sizeof host, &port) != 0) {
        snprintf(msg, n,
                 "invalid address %s (use HOST:PORT with an IPv4 address, [IPv6 address] or "
                 "localhost, and a port 0-65535)",
                 bm_cfg_quote(&q, v));
        return false;
    }
    if (!set_string(str_field(k, obj), host, false, msg, n))
        return false;
    *(uint16_t *)at_off(obj, k->aux) = port;
    return true;
}

/* Parses a number, BOOL or ENUM value; false with the reason when it does not parse: what was
 * expected (`noun`) and how to write it (`use`). */
static bool parse_scalar(const bm_cfg_key_t *k, const char *v, uint64_t *out, char *msg, size_t n)
{
    bm_cfg_quote_t q;
    uint64_t val = 0;
    uint32_t u32 = 0;
    bool b = false;
    int e = 0, rc;
    char choices[200];
    const char *noun = "number", *use;
    switch (k->kind) {
    case BM_CFG_DURATION:
    case BM_CFG_DURATION_OPT:
        rc = bm_config_parse_duration(v, &u32);
        val = u32;
        noun = "duration";
        use = "milliseconds, or a whole number with ms, s, m or h; at most 24h";
        break;
    case BM_CFG_SIZE:
        rc = bm_config_parse_size(v, &val);
        noun = "size";
        use = "bytes, or a whole number with KiB, MiB, GiB or TiB; at most 1TiB";
        break;
    case BM_CFG_COUNT:
        rc = parse_count(v, &u32);
        val = u32;
        use = "a whole number";
        break;
    case BM_CFG_DECIMAL:
        rc = parse_decimal(v, &u32);
        val = u32;
        use = "a decimal number with at most three decimals, such as 2.5, or a percentage, such "
              "as 10%";
        break;
    case BM_CFG_BOOL:
        rc = parse_bool(v, &b);
        val = b;
        noun = "boolean";
        use = "true or false";
        break;
    default: /* BM_CFG_ENUM */
        rc = enum_parse(k->names, v, &e) ? 0 : BM_EINVAL;
        val = (uint64_t)e;
        enum_choices(choices, sizeof choices, k->names);
        noun = k->names->noun;
        use = choices;
        break;
    }
    if (rc == 0) {
        *out = val;
        return true;
    }
    snprintf(msg, n, "invalid %s %s (use %s)", noun, bm_cfg_quote(&q, v), use);
    return false;
}

bool bm_cfg_set(const bm_cfg_key_t *k, void *obj, const char *v, const char *raw, char *msg,
                size_t n)
{
    bm_cfg_quote_t q;
    const char *why;
    uint64_t num;
    switch (k->kind) {
    case BM_CFG_LISTEN:
        if (!set_listen(k, obj, v, msg, n))
            return false;
        break;
    case BM_CFG_ROOT:
        if (v[0] && !root_ok(v)) {
            snprintf(msg, n, "invalid root %s (use 0x followed by 64 hex digits)",
                     bm_cfg_quote(&q, v));
            return false;
        }
        if (!set_string(str_field(k, obj), v, true, msg, n))
            return false;
        for (char *c = *str_field(k, obj); c && *c; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        break;
    case BM_CFG_PATH:
        if (!set_string(str_field(k, obj), v, true, msg, n))
            return false;
        break;
    case BM_CFG_TEXT:
        if ((k->flags & BM_CFG_EMPTY_NONE) && !v[0])
            return set_string(str_field(k, obj), v, true, msg, n);
        if (k->problem && (why = k->problem(v))) {
            bool template = (k->flags & BM_CFG_MASK_URL) && raw && strstr(raw, "${");
            if (k->flags & BM_CFG_SECRET)
                snprintf(q.s, sizeof q.s, "(hidden)");
            else if (k->flags & BM_CFG_MASK_URL)
                bm_cfg_quote_url(&q, template ? raw : v);
            else
                bm_cfg_quote(&q, v);
            snprintf(msg, n, "%s %s %s", k->name, q.s, why);
            return false;
        }
        return set_string(str_field(k, obj), v, k->flags & BM_CFG_EMPTY_NONE, msg, n);
    case BM_CFG_SECTION:
    case BM_CFG_LIST:
    case BM_CFG_MAP:
    case BM_CFG_STRINGS:
        snprintf(msg, n, "is not a single value");
        return false;
    default:
        if (!parse_scalar(k, v, &num, msg, n))
            return false;
        set_num(k, obj, num);
        break;
    }
    return bm_cfg_check(k, obj, msg, n);
}

void bm_cfg_clear_strings(const bm_cfg_key_t *k, void *obj)
{
    char ***arr = at_off(obj, k->off);
    size_t *count = at_off(obj, k->aux);
    for (size_t j = 0; *arr && j < *count; j++)
        free((*arr)[j]);
    free(*arr);
    *arr = NULL;
    *count = 0;
}

/* Appends a copy of v, judged already: by its key's `problem`, or a default (constants that
 * pass it, see test_config test_default_lists_pass_their_checks: each configuration made,
 * four per fuzz_config input, does not judge them again). */
static const char *add_string(const bm_cfg_key_t *k, void *obj, const char *v)
{
    char ***arr = at_off(obj, k->off);
    size_t *count = at_off(obj, k->aux);
    if (*count >= k->max)
        return "is one entry too many";
    char **grown = realloc(*arr, (*count + 1) * sizeof *grown);
    if (!grown)
        return "out of memory";
    *arr = grown;
    if (!(grown[*count] = strdup(v)))
        return "out of memory";
    (*count)++;
    return NULL;
}

const char *bm_cfg_add_string(const bm_cfg_key_t *k, void *obj, const char *v)
{
    const char *why = k->problem ? k->problem(v) : NULL;
    return why ? why : add_string(k, obj, v);
}

/* ---- the table as a whole ----------------------------------------------------------- */

int bm_cfg_defaults(const bm_cfg_section_t *sec, void *obj)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const bm_cfg_key_t *k = &sec->keys[i];
        if (k->kind == BM_CFG_SECTION) {
            if (bm_cfg_defaults(k->sub, at_off(obj, k->off)) != 0)
                return BM_ENOMEM;
        } else if (k->kind == BM_CFG_LISTEN) {
            if (!k->def_text)
                continue; /* off by default */
            if (!(*str_field(k, obj) = strdup(k->def_text)))
                return BM_ENOMEM;
            *(uint16_t *)at_off(obj, k->aux) = (uint16_t)k->def;
        } else if (k->kind == BM_CFG_TEXT && k->def_text) {
            if (!(*str_field(k, obj) = strdup(k->def_text)))
                return BM_ENOMEM;
        } else if (is_number(k->kind) || k->kind == BM_CFG_BOOL || k->kind == BM_CFG_ENUM) {
            set_num(k, obj, k->def);
        } else if (k->kind == BM_CFG_STRINGS && k->def_list) {
            for (size_t j = 0; k->def_list[j]; j++)
                if (add_string(k, obj, k->def_list[j]))
                    return BM_ENOMEM;
        }
        /* other strings, lists and maps start empty: the memory is zeroed */
    }
    return 0;
}

void bm_cfg_dispose(const bm_cfg_section_t *sec, void *obj)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const bm_cfg_key_t *k = &sec->keys[i];
        switch (k->kind) {
        case BM_CFG_SECTION:
            bm_cfg_dispose(k->sub, at_off(obj, k->off));
            break;
        case BM_CFG_LISTEN:
        case BM_CFG_ROOT:
        case BM_CFG_PATH:
        case BM_CFG_TEXT:
            free(*str_field(k, obj));
            *str_field(k, obj) = NULL;
            break;
        case BM_CFG_LIST: {
            char **arr = at_off(obj, k->off);
            size_t *count = at_off(obj, k->aux);
            for (size_t j = 0; *arr && j < *count; j++)
                bm_cfg_dispose(k->sub, *arr + j * k->sub->size);
            free(*arr);
            *arr = NULL;
            *count = 0;
            break;
        }
        case BM_CFG_STRINGS:
            bm_cfg_clear_strings(k, obj);
            break;
        case BM_CFG_MAP: {
            bm_config_header_t **arr = at_off(obj, k->off);
            size_t *count = at_off(obj, k->aux);
            for (size_t j = 0; *arr && j < *count; j++) {
                free((*arr)[j].name);
                free((*arr)[j].value);
            }
            free(*arr);
            *arr = NULL;
            *count = 0;
            break;
        }
        default:
            break;
        }
    }
}

const bm_cfg_key_t *bm_cfg_find(const bm_cfg_section_t *sec, const char *name)
{
    for (size_t i = 0; i < sec->n_keys; i++)
        if (strcmp(sec->keys[i].name, name) == 0)
            return &sec->keys[i];
    return NULL;
}

static bm_config_key_shape_t shape_of(bm_cfg_kind_t kind)
{
    switch (kind) {
    case BM_CFG_SECTION:
        return BM_CONFIG_KEY_SECTION;
    case BM_CFG_LIST:
        return BM_CONFIG_KEY_LIST;
    case BM_CFG_MAP:
        return BM_CONFIG_KEY_MAP;
    default:
        return BM_CONFIG_KEY_VALUE;
    }
}

static void keys_of(const bm_cfg_section_t *sec, const char *prefix,
                    void (*fn)(void *ud, const char *path, bm_config_key_shape_t shape), void *ud)
{
    for (size_t i = 0; i < sec->n_keys; i++) {
        const bm_cfg_key_t *k = &sec->keys[i];
        char path[160], entry[170];
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
        fn(ud, path, shape_of(k->kind));
        if (k->kind == BM_CFG_SECTION) {
            keys_of(k->sub, path, fn, ud);
        } else if (k->kind == BM_CFG_LIST && k->sub != &bm_cfg_network) {
            /* a networks[] entry holds the top level's per-network keys again (and its id):
             * documented once, at the top level */
            snprintf(entry, sizeof entry, "%s[]", path); /* "upstreams[].url" */
            keys_of(k->sub, entry, fn, ud);
        }
    }
}

void bm_config_keys(void (*fn)(void *ud, const char *path, bm_config_key_shape_t shape), void *ud)
{
    keys_of(&bm_cfg_root, "", fn, ud);
}

const char *bm_config_duty_name(bm_config_duty_t duty)
{
    if ((int)duty < 0 || duty >= BM_CONFIG_DUTY_COUNT)
        return "?";
    /* the name of the duties row that holds this duty's hold */
    size_t off = offsetof(bm_config_duties_t, hold) + (size_t)duty * sizeof(bm_config_duty_hold_t);
    for (size_t i = 0; i < duties_section.n_keys; i++)
        if (duties_keys[i].kind == BM_CFG_SECTION && duties_keys[i].off == off)
            return duties_keys[i].name;
    return "?";
}
