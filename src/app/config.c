/* SPDX-License-Identifier: MIT */
/*
 * config: the configuration model, its YAML file, its command line, its defaults and its
 * validation.
 *
 * How a file is read. The text is walked once with libyaml against the libcyaml schema
 * below (the same field tables libcyaml uses): the walk rejects unknown and duplicate keys,
 * values of the wrong shape, aliases and extra documents, each with the line and column of
 * the offending key or value, because libcyaml 1.3 only logs "Unexpected key: x" with the
 * position of the enclosing mapping's end. The walk also records where every key sits (for
 * the messages about bad values that come later) and collects the `headers` maps, which
 * libcyaml cannot load (their keys are free-form). Then libcyaml loads the document into
 * raw structs whose leaves are all strings, and each string is turned into its typed value
 * here, after `${VAR}` substitution, so that a bad duration is reported as
 * `beaconmux.yaml:12:18: server.headerTimeout: invalid duration "10x" (...)`.
 *
 * Why `${VAR}` is substituted inside parsed values rather than in the raw text: the
 * values substituted are mostly secrets (passwords in URLs, API keys), and a secret
 * containing '#', '"', ": " or a backslash would otherwise change the YAML around it or be
 * cut short; and comments may mention `${VAR}` without it having to be set. Line numbers
 * stay those of the file, and a value with a line break is refused as the design asks.
 *
 * Defaults live in one table (KEYS below, one line per key: YAML name, model field, kind,
 * range, default) that drives the libcyaml schema, the defaults, the conversion, the range
 * checks and the dump, so a key cannot be half-added.
 */
#include "app/config.h"

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

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "base/err.h"
#include "base/hdrs.h"
#include "base/url.h"

#define DURATION_MAX_MS 86400000u   /* 24 hours: durations are uint32_t milliseconds */
#define SIZE_MAX_BYTES (1ull << 40) /* 1 TiB */
#define VALUE_MAX_BYTES (64u << 10) /* one value after ${VAR} substitution */
#define HEADER_VALUE_MAX_BYTES (8u << 10)
#define HEADER_NAME_MAX_BYTES 256u
#define KB ((uint64_t)1 << 10)
#define MB ((uint64_t)1 << 20)
#define GB ((uint64_t)1 << 30)

static const char usage_line[] =
    "Usage: beaconmux [--config FILE] [--upstream URL]... [--listen HOST:PORT] [--check]\n"
    "                 [--log-level LEVEL] [--log-format text|json] [--version] [--help]";

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

static void err_vset(bm_config_err_t *err, const char *fmt, va_list ap)
{
    if (!err)
        return;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

static void err_set(bm_config_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void err_set(bm_config_err_t *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(err, fmt, ap);
    va_end(ap);
}

/* A value quoted for a message: printable ASCII only, at most 48 bytes of it. */
typedef struct qbuf {
    char s[208];
} qbuf_t;

static const char *quote_n(qbuf_t *q, const char *s, size_t len)
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

static const char *quote(qbuf_t *q, const char *s)
{
    return quote_n(q, s, strlen(s));
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

/* [A-Za-z0-9][A-Za-z0-9._-]*, at most BM_CONFIG_MAX_ID_LEN characters. */
static const char *id_problem(const char *id)
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

/*
 * An upstream base URL: http:// or https://, optional user[:password]@, a host name or an IP
 * literal ([v6] in brackets), an optional port 1-65535, an optional path prefix; no query,
 * fragment, space or control character. (src/base/url.h's bm_url_valid covers the same ground
 * for the proxy path; this check also says what is wrong.)
 */
static const char *url_problem(const char *url)
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
    const char *host = at ? at + 1 : p;
    const char *end = p + alen;
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

static bool is_tchar(int c)
{
    return is_alpha(c) || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *header_name_problem(const char *name)
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

static const char *header_value_problem(const char *value)
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

static const char *quote_url(qbuf_t *q, const char *url)
{
    bm_str_t s = BM_STR_INIT;
    bm_url_mask(&s, url);
    quote(q, s.oom ? "(url)" : bm_str_data(&s));
    bm_str_dispose(&s);
    return q->s;
}

/* ---- the key table ------------------------------------------------------------------- */

typedef enum kind {
    K_DURATION,     /* uint32_t milliseconds */
    K_DURATION_OPT, /* uint32_t milliseconds, or BM_CONFIG_UNSET (inherits or follows the
                       slot; not dumped) */
    K_SIZE,         /* uint64_t bytes */
    K_COUNT,        /* uint32_t */
    K_BOOL,         /* bool */
    K_LEVEL,        /* bm_log_level_t */
    K_FORMAT,       /* bm_log_format_t */
    K_BLOCKSEL,     /* bm_block_selection_t */
    K_LISTEN,       /* listen_host + listen_port */
    K_ROOT,         /* char *: "0x" + 64 hex digits, or NULL */
    K_PATH,         /* char *: a readable file, or NULL */
} kind_t;

#define KSIZE_K_DURATION sizeof(uint32_t)
#define KSIZE_K_DURATION_OPT sizeof(uint32_t)
#define KSIZE_K_SIZE sizeof(uint64_t)
#define KSIZE_K_COUNT sizeof(uint32_t)
#define KSIZE_K_BOOL sizeof(bool)
#define KSIZE_K_LEVEL sizeof(bm_log_level_t)
#define KSIZE_K_FORMAT sizeof(bm_log_format_t)
#define KSIZE_K_BLOCKSEL sizeof(bm_block_selection_t)
#define KSIZE_K_LISTEN sizeof(char *)
#define KSIZE_K_ROOT sizeof(char *)
#define KSIZE_K_PATH sizeof(char *)

#define D_MAX DURATION_MAX_MS
#define N_MAX UINT32_MAX

/*
 * One line per key: X(section, yamlKey, model field, kind, min, max, default).
 * The YAML key doubles as the member name of the raw libcyaml struct of its section.
 * A sub-section (duties.attestationData) is a section of its own named <parent>_<name>,
 * whose raw struct hangs off its parent's; SEC_PATH_<section> is its dotted path.
 */
// clang-format off
#define TOP_KEYS(X)                                                                                \
    X(top, listen,                 listen_host,                    K_LISTEN,   0, 0, 0)             \
    X(top, genesisValidatorsRoot,  genesis_validators_root,        K_ROOT,     0, 0, 0)
#define LOG_KEYS(X)                                                                                \
    X(log, level,                  log.level,                      K_LEVEL,    0, 0, BM_CONFIG_DEFAULT_LOG_LEVEL) \
    X(log, format,                 log.format,                     K_FORMAT,   0, 0, BM_CONFIG_DEFAULT_LOG_FORMAT)
#define SERVER_KEYS(X)                                                                             \
    X(server, maxBodyBytes,        server.max_body_bytes,          K_SIZE,     KB, 4 * GB, BM_CONFIG_DEFAULT_MAX_BODY_BYTES) \
    X(server, maxHeaderBytes,      server.max_header_bytes,        K_SIZE,     KB, MB,     BM_CONFIG_DEFAULT_MAX_HEADER_BYTES) \
    X(server, maxTargetBytes,      server.max_target_bytes,        K_SIZE,     KB, MB,     BM_CONFIG_DEFAULT_MAX_TARGET_BYTES) \
    X(server, headerTimeout,       server.header_timeout_ms,       K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_HEADER_TIMEOUT_MS) \
    X(server, bodyTimeout,         server.body_timeout_ms,         K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_BODY_TIMEOUT_MS) \
    X(server, idleTimeout,         server.idle_timeout_ms,         K_DURATION, 1000, D_MAX, BM_CONFIG_DEFAULT_IDLE_TIMEOUT_MS) \
    X(server, maxConnections,      server.max_connections,         K_COUNT,    1, 1000000, BM_CONFIG_DEFAULT_MAX_CONNECTIONS) \
    X(server, shutdownTimeout,     server.shutdown_timeout_ms,     K_DURATION, 0, D_MAX,   BM_CONFIG_DEFAULT_SHUTDOWN_TIMEOUT_MS)
#define TIMEOUTS_KEYS(X)                                                                           \
    X(timeouts, connect,           timeouts.connect_ms,            K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_CONNECT_TIMEOUT_MS) \
    X(timeouts, read,              timeouts.read_ms,               K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_READ_TIMEOUT_MS) \
    X(timeouts, write,             timeouts.write_ms,              K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_WRITE_TIMEOUT_MS)
#define FAILOVER_KEYS(X)                                                                           \
    X(failover, maxAttempts,       failover.max_attempts,          K_COUNT,    1, 16,      BM_CONFIG_DEFAULT_MAX_ATTEMPTS)
#define DISCOVERY_KEYS(X)                                                                          \
    X(discovery, retryInterval,    discovery.retry_interval_ms,    K_DURATION, 100, D_MAX, BM_CONFIG_DEFAULT_RETRY_INTERVAL_MS)
#define TLS_KEYS(X)                                                                                \
    X(tls, verify,                 tls.verify,                     K_BOOL,     0, 0, BM_CONFIG_DEFAULT_TLS_VERIFY) \
    X(tls, caFile,                 tls.ca_file,                    K_PATH,     0, 0, 0)
#define HEALTH_KEYS(X)                                                                             \
    X(health, maxHeadLag,          health.max_head_lag,            K_COUNT,    0, N_MAX,   BM_CONFIG_DEFAULT_MAX_HEAD_LAG) \
    X(health, headQuorum,          health.head_quorum,             K_COUNT,    0, BM_CONFIG_MAX_UPSTREAMS, BM_CONFIG_DEFAULT_HEAD_QUORUM)
#define EVENTS_KEYS(X)                                                                             \
    X(events, keepalive,           events.keepalive_ms,            K_DURATION, 1000, D_MAX, BM_CONFIG_DEFAULT_KEEPALIVE_MS) \
    X(events, subscriberMaxPending, events.subscriber_max_pending, K_SIZE,     KB, 4 * GB, BM_CONFIG_DEFAULT_SUBSCRIBER_MAX_PENDING) \
    X(events, dedupWindow,         events.dedup_window,            K_COUNT,    1, 1u << 20, BM_CONFIG_DEFAULT_DEDUP_WINDOW) \
    X(events, headersTimeout,      events.headers_timeout_ms,      K_DURATION_OPT, 1, D_MAX, BM_CONFIG_DEFAULT_HEADERS_TIMEOUT_MS)
#define DUTIES_KEYS(X)                                                                             \
    X(duties, holdFloor,           duties.hold_floor_ms,           K_DURATION, 0, D_MAX,   BM_CONFIG_DEFAULT_HOLD_FLOOR_MS) \
    X(duties, maxHold,             duties.max_hold_ms,             K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_MAX_HOLD_MS) \
    X(duties, proposalDeadline,    duties.proposal_deadline_ms,    K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_PROPOSAL_DEADLINE_MS) \
    X(duties, blockSelection,      duties.block_selection,         K_BLOCKSEL, 0, 0, BM_CONFIG_DEFAULT_BLOCK_SELECTION) \
    X(duties, bestValueGrace,      duties.best_value_grace_ms,     K_DURATION, 0, D_MAX,   BM_CONFIG_DEFAULT_BEST_VALUE_GRACE_MS) \
    X(duties, writeTimeout,        duties.write_timeout_ms,        K_DURATION, 1, D_MAX,   BM_CONFIG_DEFAULT_DUTY_WRITE_TIMEOUT_MS) \
    X(duties, dutiesMajorityAfter, duties.duties_majority_after_ms, K_DURATION, 1, D_MAX,  BM_CONFIG_DEFAULT_DUTIES_MAJORITY_AFTER_MS) \
    X(duties, aggregateGrace,      duties.aggregate_grace_ms,      K_DURATION, 0, D_MAX,   BM_CONFIG_DEFAULT_AGGREGATE_GRACE_MS)
/* every duty read a race holds has its own hold; unset keys inherit duties.holdFloor/maxHold */
#define DUTY_HOLD_KEYS(X, sub, idx)                                                                \
    X(duties_##sub, holdFloor,     duties.hold[idx].hold_floor_ms, K_DURATION_OPT, 0, D_MAX, BM_CONFIG_UNSET) \
    X(duties_##sub, maxHold,       duties.hold[idx].max_hold_ms,   K_DURATION_OPT, 1, D_MAX, BM_CONFIG_UNSET)
#define DUTIES_ATTESTATIONDATA_KEYS(X)    DUTY_HOLD_KEYS(X, attestationData, BM_CONFIG_DUTY_ATTESTATION_DATA)
#define DUTIES_HEADROOT_KEYS(X)           DUTY_HOLD_KEYS(X, headRoot, BM_CONFIG_DUTY_HEAD_ROOT)
#define DUTIES_PAYLOADATTESTATION_KEYS(X) DUTY_HOLD_KEYS(X, payloadAttestationData, BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA)
#define DUTIES_AGGREGATE_KEYS(X)          DUTY_HOLD_KEYS(X, aggregateAttestation, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION)
#define DUTIES_CONTRIBUTION_KEYS(X)       DUTY_HOLD_KEYS(X, syncCommitteeContribution, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION)
#define DUTIES_SUB_KEYS(X)                                                                         \
    DUTIES_ATTESTATIONDATA_KEYS(X) DUTIES_HEADROOT_KEYS(X) DUTIES_PAYLOADATTESTATION_KEYS(X)       \
    DUTIES_AGGREGATE_KEYS(X) DUTIES_CONTRIBUTION_KEYS(X)
// clang-format on

#define SEC_PATH_top ""
#define SEC_PATH_log "log"
#define SEC_PATH_server "server"
#define SEC_PATH_timeouts "timeouts"
#define SEC_PATH_failover "failover"
#define SEC_PATH_discovery "discovery"
#define SEC_PATH_tls "tls"
#define SEC_PATH_health "health"
#define SEC_PATH_events "events"
#define SEC_PATH_duties "duties"
#define SEC_PATH_duties_attestationData "duties.attestationData"
#define SEC_PATH_duties_headRoot "duties.headRoot"
#define SEC_PATH_duties_payloadAttestationData "duties.payloadAttestationData"
#define SEC_PATH_duties_aggregateAttestation "duties.aggregateAttestation"
#define SEC_PATH_duties_syncCommitteeContribution "duties.syncCommitteeContribution"

#define ALL_SECTION_KEYS(X)                                                                        \
    LOG_KEYS(X)                                                                                    \
    SERVER_KEYS(X)                                                                                 \
    TIMEOUTS_KEYS(X)                                                                               \
    FAILOVER_KEYS(X)                                                                               \
    DISCOVERY_KEYS(X) TLS_KEYS(X) HEALTH_KEYS(X) EVENTS_KEYS(X) DUTIES_KEYS(X) DUTIES_SUB_KEYS(X)

/* Every model field has the width its kind writes. */
#define CHECK_WIDTH(sec, key, field, kind, min, max, def)                                          \
    _Static_assert(sizeof(((bm_config_t *)0)->field) == KSIZE_##kind, #field " width");
TOP_KEYS(CHECK_WIDTH)
ALL_SECTION_KEYS(CHECK_WIDTH)

/* The raw structs libcyaml fills: every leaf is a string (NULL when absent). */
#define RAW_MEMBER(sec, key, field, kind, min, max, def) char *key;
typedef struct raw_log {
    LOG_KEYS(RAW_MEMBER)
} raw_log_t;
typedef struct raw_server {
    SERVER_KEYS(RAW_MEMBER)
} raw_server_t;
typedef struct raw_timeouts {
    TIMEOUTS_KEYS(RAW_MEMBER)
} raw_timeouts_t;
typedef struct raw_failover {
    FAILOVER_KEYS(RAW_MEMBER)
} raw_failover_t;
typedef struct raw_discovery {
    DISCOVERY_KEYS(RAW_MEMBER)
} raw_discovery_t;
typedef struct raw_tls {
    TLS_KEYS(RAW_MEMBER)
} raw_tls_t;
typedef struct raw_health {
    HEALTH_KEYS(RAW_MEMBER)
} raw_health_t;
typedef struct raw_events {
    EVENTS_KEYS(RAW_MEMBER)
} raw_events_t;
typedef struct raw_duties_attestationData {
    DUTIES_ATTESTATIONDATA_KEYS(RAW_MEMBER)
} raw_duties_attestationData_t;
typedef struct raw_duties_headRoot {
    DUTIES_HEADROOT_KEYS(RAW_MEMBER)
} raw_duties_headRoot_t;
typedef struct raw_duties_payloadAttestationData {
    DUTIES_PAYLOADATTESTATION_KEYS(RAW_MEMBER)
} raw_duties_payloadAttestationData_t;
typedef struct raw_duties_aggregateAttestation {
    DUTIES_AGGREGATE_KEYS(RAW_MEMBER)
} raw_duties_aggregateAttestation_t;
typedef struct raw_duties_syncCommitteeContribution {
    DUTIES_CONTRIBUTION_KEYS(RAW_MEMBER)
} raw_duties_syncCommitteeContribution_t;
typedef struct raw_duties {
    DUTIES_KEYS(RAW_MEMBER)
    raw_duties_attestationData_t *attestationData;
    raw_duties_headRoot_t *headRoot;
    raw_duties_payloadAttestationData_t *payloadAttestationData;
    raw_duties_aggregateAttestation_t *aggregateAttestation;
    raw_duties_syncCommitteeContribution_t *syncCommitteeContribution;
} raw_duties_t;

typedef struct raw_upstream {
    char *id;
    char *url;
} raw_upstream_t;

typedef struct raw_top {
    TOP_KEYS(RAW_MEMBER)
    raw_log_t *log;
    raw_upstream_t *upstreams;
    unsigned upstreams_count;
    raw_server_t *server;
    raw_timeouts_t *timeouts;
    raw_failover_t *failover;
    raw_discovery_t *discovery;
    raw_tls_t *tls;
    raw_health_t *health;
    raw_events_t *events;
    raw_duties_t *duties;
} raw_top_t;

/* The libcyaml schema. Leaves are optional strings; a section may be null ("server:"). */
#define CY_STRING(sec, key, field, kind, min, max, def)                                            \
    CYAML_FIELD_STRING_PTR(#key, CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER, raw_##sec##_t, key, 0,  \
                           CYAML_UNLIMITED),
#define CY_SECTION(name)                                                                           \
    CYAML_FIELD_MAPPING_PTR(#name, CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER_NULL_STR, raw_top_t,   \
                            name, name##_fields)

static const cyaml_schema_field_t log_fields[] = {LOG_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t server_fields[] = {SERVER_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t timeouts_fields[] = {TIMEOUTS_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t failover_fields[] = {FAILOVER_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t discovery_fields[] = {DISCOVERY_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t tls_fields[] = {TLS_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t health_fields[] = {HEALTH_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t events_fields[] = {EVENTS_KEYS(CY_STRING) CYAML_FIELD_END};
#define CY_SUBSECTION(parent, name)                                                                \
    CYAML_FIELD_MAPPING_PTR(#name, CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER_NULL_STR,              \
                            raw_##parent##_t, name, parent##_##name##_fields)
static const cyaml_schema_field_t duties_attestationData_fields[] = {
    DUTIES_ATTESTATIONDATA_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t duties_headRoot_fields[] = {DUTIES_HEADROOT_KEYS(CY_STRING)
                                                                  CYAML_FIELD_END};
static const cyaml_schema_field_t duties_payloadAttestationData_fields[] = {
    DUTIES_PAYLOADATTESTATION_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t duties_aggregateAttestation_fields[] = {
    DUTIES_AGGREGATE_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t duties_syncCommitteeContribution_fields[] = {
    DUTIES_CONTRIBUTION_KEYS(CY_STRING) CYAML_FIELD_END};
static const cyaml_schema_field_t duties_fields[] = {
    DUTIES_KEYS(CY_STRING) CY_SUBSECTION(duties, attestationData),
    CY_SUBSECTION(duties, headRoot),
    CY_SUBSECTION(duties, payloadAttestationData),
    CY_SUBSECTION(duties, aggregateAttestation),
    CY_SUBSECTION(duties, syncCommitteeContribution),
    CYAML_FIELD_END};

/* `headers` is free-form (name -> value): libcyaml skips it, the walk below collects it. */
static const cyaml_schema_field_t upstream_fields[] = {
    CYAML_FIELD_STRING_PTR("id", CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER, raw_upstream_t, id, 0,
                           CYAML_UNLIMITED),
    CYAML_FIELD_STRING_PTR("url", CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER, raw_upstream_t, url, 0,
                           CYAML_UNLIMITED),
    CYAML_FIELD_IGNORE("headers", CYAML_FLAG_OPTIONAL),
    CYAML_FIELD_END,
};

static const cyaml_schema_value_t upstream_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, raw_upstream_t, upstream_fields),
};

static const cyaml_schema_field_t top_fields[] = {
    TOP_KEYS(CY_STRING) CY_SECTION(log),
    CYAML_FIELD_SEQUENCE("upstreams", CYAML_FLAG_OPTIONAL | CYAML_FLAG_POINTER_NULL_STR, raw_top_t,
                         upstreams, &upstream_schema, 0, BM_CONFIG_MAX_UPSTREAMS),
    CY_SECTION(server),
    CY_SECTION(timeouts),
    CY_SECTION(failover),
    CY_SECTION(discovery),
    CY_SECTION(tls),
    CY_SECTION(health),
    CY_SECTION(events),
    CY_SECTION(duties),
    CYAML_FIELD_END,
};

static const cyaml_schema_value_t top_schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, raw_top_t, top_fields),
};

/* The key table itself, in file order. */
typedef enum section {
    SEC_top,
    SEC_log,
    SEC_server,
    SEC_timeouts,
    SEC_failover,
    SEC_discovery,
    SEC_tls,
    SEC_health,
    SEC_events,
    SEC_duties,
    SEC_duties_attestationData,
    SEC_duties_headRoot,
    SEC_duties_payloadAttestationData,
    SEC_duties_aggregateAttestation,
    SEC_duties_syncCommitteeContribution,
    SEC_COUNT
} section_t;

static const char *const section_names[SEC_COUNT] = {
    "",
    "log",
    "server",
    "timeouts",
    "failover",
    "discovery",
    "tls",
    "health",
    "events",
    "duties",
    "duties.attestationData",
    "duties.headRoot",
    "duties.payloadAttestationData",
    "duties.aggregateAttestation",
    "duties.syncCommitteeContribution",
};

typedef struct key {
    const char *path; /* "server.maxBodyBytes" */
    const char *name; /* "maxBodyBytes" */
    section_t sec;
    size_t raw_off; /* of the char * in raw_<sec>_t */
    kind_t kind;
    size_t cfg_off; /* of the value in bm_config_t */
    uint64_t min, max, def;
} cfgkey_t;

#define TOP_ROW(sec, key, field, kind, min, max, def)                                              \
    {                                                                                              \
        #key,           #key,                                                                      \
        SEC_##sec,      offsetof(raw_##sec##_t, key),                                              \
        kind,           offsetof(bm_config_t, field),                                              \
        (min),          (max),                                                                     \
        (uint64_t)(def)},
#define ROW(sec, key, field, kind, min, max, def)                                                  \
    {SEC_PATH_##sec "." #key,                                                                      \
     #key,                                                                                         \
     SEC_##sec,                                                                                    \
     offsetof(raw_##sec##_t, key),                                                                 \
     kind,                                                                                         \
     offsetof(bm_config_t, field),                                                                 \
     (min),                                                                                        \
     (max),                                                                                        \
     (uint64_t)(def)},

static const cfgkey_t keys[] = {TOP_KEYS(TOP_ROW) ALL_SECTION_KEYS(ROW)};
#define N_KEYS (sizeof keys / sizeof keys[0])

static void *raw_section(raw_top_t *raw, section_t sec)
{
    if (!raw)
        return NULL;
    switch (sec) {
    case SEC_top:
        return raw;
    case SEC_log:
        return raw->log;
    case SEC_server:
        return raw->server;
    case SEC_timeouts:
        return raw->timeouts;
    case SEC_failover:
        return raw->failover;
    case SEC_discovery:
        return raw->discovery;
    case SEC_tls:
        return raw->tls;
    case SEC_health:
        return raw->health;
    case SEC_events:
        return raw->events;
    case SEC_duties:
        return raw->duties;
    case SEC_duties_attestationData:
        return raw->duties ? raw->duties->attestationData : NULL;
    case SEC_duties_headRoot:
        return raw->duties ? raw->duties->headRoot : NULL;
    case SEC_duties_payloadAttestationData:
        return raw->duties ? raw->duties->payloadAttestationData : NULL;
    case SEC_duties_aggregateAttestation:
        return raw->duties ? raw->duties->aggregateAttestation : NULL;
    case SEC_duties_syncCommitteeContribution:
        return raw->duties ? raw->duties->syncCommitteeContribution : NULL;
    default:
        return NULL;
    }
}

/* ---- typed access to the model by key ----------------------------------------------- */

static uint64_t get_num(const bm_config_t *cfg, const cfgkey_t *k)
{
    const char *p = (const char *)cfg + k->cfg_off;
    switch (k->kind) {
    case K_SIZE: {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case K_DURATION:
    case K_DURATION_OPT:
    case K_COUNT: {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case K_BOOL: {
        bool v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case K_LEVEL: {
        bm_log_level_t v;
        memcpy(&v, p, sizeof v);
        return (uint64_t)v;
    }
    case K_FORMAT: {
        bm_log_format_t v;
        memcpy(&v, p, sizeof v);
        return (uint64_t)v;
    }
    case K_BLOCKSEL: {
        bm_block_selection_t v;
        memcpy(&v, p, sizeof v);
        return (uint64_t)v;
    }
    default:
        return 0;
    }
}

static void set_num(bm_config_t *cfg, const cfgkey_t *k, uint64_t n)
{
    char *p = (char *)cfg + k->cfg_off;
    switch (k->kind) {
    case K_SIZE:
        memcpy(p, &n, sizeof n);
        break;
    case K_DURATION:
    case K_DURATION_OPT:
    case K_COUNT: {
        uint32_t v = (uint32_t)n;
        memcpy(p, &v, sizeof v);
        break;
    }
    case K_BOOL: {
        bool v = n != 0;
        memcpy(p, &v, sizeof v);
        break;
    }
    case K_LEVEL: {
        bm_log_level_t v = (bm_log_level_t)n;
        memcpy(p, &v, sizeof v);
        break;
    }
    case K_FORMAT: {
        bm_log_format_t v = (bm_log_format_t)n;
        memcpy(p, &v, sizeof v);
        break;
    }
    case K_BLOCKSEL: {
        bm_block_selection_t v = (bm_block_selection_t)n;
        memcpy(p, &v, sizeof v);
        break;
    }
    default:
        break;
    }
}

static char **str_field(bm_config_t *cfg, const cfgkey_t *k)
{
    return (char **)(void *)((char *)cfg + k->cfg_off);
}

static const char *str_value(const bm_config_t *cfg, const cfgkey_t *k)
{
    const char *v;
    memcpy(&v, (const char *)cfg + k->cfg_off, sizeof v);
    return v;
}

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const format_names[] = {"text", "json"};
static const char *const blocksel_names[] = {"first", "best-value"};

/* Writes a duration with the largest unit that divides it exactly ("2s", "1500ms"). */
static void fmt_duration(char *b, size_t n, uint64_t ms)
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

/* Formats a numeric or enumerated value of kind `kind` (no quotes needed in YAML). */
static void fmt_num(char *b, size_t n, kind_t kind, uint64_t v)
{
    switch (kind) {
    case K_DURATION:
    case K_DURATION_OPT:
        fmt_duration(b, n, v);
        break;
    case K_SIZE:
        fmt_size(b, n, v);
        break;
    case K_BOOL:
        snprintf(b, n, "%s", v ? "true" : "false");
        break;
    case K_LEVEL:
        snprintf(b, n, "%s", v < 5 ? level_names[v] : "?");
        break;
    case K_FORMAT:
        snprintf(b, n, "%s", v < 2 ? format_names[v] : "?");
        break;
    case K_BLOCKSEL:
        snprintf(b, n, "%s", v < 2 ? blocksel_names[v] : "?");
        break;
    default:
        snprintf(b, n, "%" PRIu64, v);
        break;
    }
}

static bool is_numeric(kind_t kind)
{
    return kind == K_DURATION || kind == K_SIZE || kind == K_COUNT;
}

/*
 * The range and sanity check of one key's current value, shared by the file loader
 * (which adds the position) and bm_config_validate (which adds the key's name). Writes
 * the reason to msg and returns false when the value is not acceptable.
 */
static bool check_key(const bm_config_t *cfg, const cfgkey_t *k, char *msg, size_t n)
{
    char lo[32], hi[32], got[32];
    qbuf_t q;
    if (is_numeric(k->kind) || k->kind == K_DURATION_OPT) {
        uint64_t v = get_num(cfg, k);
        if ((v >= k->min && v <= k->max) || (k->kind == K_DURATION_OPT && v == BM_CONFIG_UNSET))
            return true;
        fmt_num(lo, sizeof lo, k->kind, k->min);
        fmt_num(hi, sizeof hi, k->kind, k->max);
        fmt_num(got, sizeof got, k->kind, v);
        if (k->max == UINT32_MAX && k->kind == K_COUNT)
            snprintf(msg, n, "must be at least %s (got %s)", lo, got);
        else
            snprintf(msg, n, "must be between %s and %s (got %s)", lo, hi, got);
        return false;
    }
    switch (k->kind) {
    case K_LEVEL:
        if (get_num(cfg, k) <= BM_LOG_OFF)
            return true;
        snprintf(msg, n, "is not a log level");
        return false;
    case K_FORMAT:
        if (get_num(cfg, k) <= BM_LOG_JSON)
            return true;
        snprintf(msg, n, "is not a log format");
        return false;
    case K_BLOCKSEL:
        if (get_num(cfg, k) <= BM_BLOCK_SELECTION_BEST_VALUE)
            return true;
        snprintf(msg, n, "is not a block selection");
        return false;
    case K_LISTEN:
        if (cfg->listen_host && listen_host_ok(cfg->listen_host))
            return true;
        snprintf(msg, n, "host must be an IPv4 address, an IPv6 address or localhost");
        return false;
    case K_ROOT: {
        const char *v = str_value(cfg, k);
        if (!v || root_ok(v))
            return true;
        snprintf(msg, n, "must be 0x followed by 64 hex digits");
        return false;
    }
    case K_PATH: {
        const char *v = str_value(cfg, k);
        struct stat st;
        if (!v)
            return true;
        if (stat(v, &st) != 0 || access(v, R_OK) != 0) {
            snprintf(msg, n, "cannot read %s: %s", quote(&q, v), strerror(errno));
            return false;
        }
        if (!S_ISREG(st.st_mode)) {
            snprintf(msg, n, "%s is not a regular file", quote(&q, v));
            return false;
        }
        return true;
    }
    default:
        return true;
    }
}

/* Parses `v` as the value of key `k` and stores it; on failure writes the reason. */
static bool set_key(bm_config_t *cfg, const cfgkey_t *k, const char *v, char *msg, size_t n)
{
    qbuf_t q;
    switch (k->kind) {
    case K_DURATION:
    case K_DURATION_OPT: {
        uint32_t ms;
        if (bm_config_parse_duration(v, &ms) != 0) {
            snprintf(msg, n,
                     "invalid duration %s (use milliseconds, or a whole number with ms, s, m or "
                     "h; at most 24h)",
                     quote(&q, v));
            return false;
        }
        set_num(cfg, k, ms);
        break;
    }
    case K_SIZE: {
        uint64_t b;
        if (bm_config_parse_size(v, &b) != 0) {
            snprintf(msg, n,
                     "invalid size %s (use bytes, or a whole number with KiB, MiB, GiB or TiB; "
                     "at most 1TiB)",
                     quote(&q, v));
            return false;
        }
        set_num(cfg, k, b);
        break;
    }
    case K_COUNT: {
        uint32_t c;
        if (parse_count(v, &c) != 0) {
            snprintf(msg, n, "invalid number %s (use a whole number)", quote(&q, v));
            return false;
        }
        set_num(cfg, k, c);
        break;
    }
    case K_BOOL: {
        bool b;
        if (parse_bool(v, &b) != 0) {
            snprintf(msg, n, "invalid boolean %s (use true or false)", quote(&q, v));
            return false;
        }
        set_num(cfg, k, b);
        break;
    }
    case K_LEVEL: {
        bm_log_level_t l;
        if (bm_log_level_parse(v, &l) != 0) {
            snprintf(msg, n, "invalid log level %s (use debug, info, warn, error or off)",
                     quote(&q, v));
            return false;
        }
        set_num(cfg, k, (uint64_t)l);
        break;
    }
    case K_FORMAT: {
        bm_log_format_t f;
        if (bm_log_format_parse(v, &f) != 0) {
            snprintf(msg, n, "invalid log format %s (use text or json)", quote(&q, v));
            return false;
        }
        set_num(cfg, k, (uint64_t)f);
        break;
    }
    case K_BLOCKSEL:
        if (strcmp(v, "first") == 0) {
            set_num(cfg, k, BM_BLOCK_SELECTION_FIRST);
        } else if (strcmp(v, "best-value") == 0) {
            set_num(cfg, k, BM_BLOCK_SELECTION_BEST_VALUE);
        } else {
            snprintf(msg, n, "invalid block selection %s (use first or best-value)", quote(&q, v));
            return false;
        }
        break;
    case K_LISTEN: {
        char host[64];
        uint16_t port;
        char *dup;
        if (bm_config_parse_listen(v, host, sizeof host, &port) != 0) {
            snprintf(msg, n,
                     "invalid address %s (use HOST:PORT with an IPv4 address, [IPv6 address] or "
                     "localhost, and a port 0-65535)",
                     quote(&q, v));
            return false;
        }
        if (!(dup = strdup(host))) {
            snprintf(msg, n, "out of memory");
            return false;
        }
        free(cfg->listen_host);
        cfg->listen_host = dup;
        cfg->listen_port = port;
        break;
    }
    case K_ROOT:
    case K_PATH: {
        char **f = str_field(cfg, k);
        char *dup = NULL;
        if (k->kind == K_ROOT && v[0] && !root_ok(v)) {
            snprintf(msg, n, "invalid root %s (use 0x followed by 64 hex digits)", quote(&q, v));
            return false;
        }
        if (v[0] && !(dup = strdup(v))) {
            snprintf(msg, n, "out of memory");
            return false;
        }
        if (dup && k->kind == K_ROOT)
            for (char *c = dup; *c; c++)
                if (*c >= 'A' && *c <= 'Z')
                    *c = (char)(*c - 'A' + 'a');
        free(*f);
        *f = dup;
        break;
    }
    }
    return check_key(cfg, k, msg, n);
}

/* ---- defaults, construction, destruction ------------------------------------------- */

/* The one place where defaults are applied: every key of the table, and the listener. */
static int apply_defaults(bm_config_t *cfg)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const cfgkey_t *k = &keys[i];
        if (k->kind == K_ROOT || k->kind == K_PATH) {
            free(*str_field(cfg, k));
            *str_field(cfg, k) = NULL;
        } else if (k->kind != K_LISTEN) {
            set_num(cfg, k, k->def);
        }
    }
    free(cfg->listen_host);
    cfg->listen_host = strdup(BM_CONFIG_DEFAULT_LISTEN_HOST);
    cfg->listen_port = BM_CONFIG_DEFAULT_LISTEN_PORT;
    return cfg->listen_host ? 0 : BM_ENOMEM;
}

bm_config_t *bm_config_new(void)
{
    bm_config_t *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    if (apply_defaults(cfg) != 0) {
        bm_config_free(cfg);
        return NULL;
    }
    return cfg;
}

static void free_upstreams(bm_config_upstream_t *ups, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(ups[i].id);
        free(ups[i].url);
        for (size_t j = 0; j < ups[i].n_headers; j++) {
            free(ups[i].headers[j].name);
            free(ups[i].headers[j].value);
        }
        free(ups[i].headers);
    }
    free(ups);
}

void bm_config_free(bm_config_t *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    free(cfg->listen_host);
    free(cfg->genesis_validators_root);
    free(cfg->tls.ca_file);
    free_upstreams(cfg->upstreams, cfg->n_upstreams);
    free(cfg);
}

static char *default_id(size_t i)
{
    char b[32];
    snprintf(b, sizeof b, "node%zu", i + 1);
    return strdup(b);
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

/* ---- the walk: positions, shapes and headers, with libyaml ------------------------- */

typedef struct loc {
    char path[64];
    yaml_mark_t key;        /* where the key starts (or the sequence entry) */
    yaml_mark_t start, end; /* the value */
    bool is_null;           /* a YAML null: the key counts as absent */
} loc_t;

typedef struct hdr_rec {
    size_t upstream;
    char *name;
    char *value;
    yaml_mark_t key, start, end;
} hdr_rec_t;

typedef struct walk {
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;
    const char *name;
    const char *text; /* the document, for positions */
    size_t len;
    bm_config_err_t *err;
    loc_t *locs;
    size_t n_locs, cap_locs;
    hdr_rec_t *hdrs;
    size_t n_hdrs, cap_hdrs;
    size_t entry; /* index of the upstream entry being walked */
    bool empty;   /* no document, or a null one */
} walk_t;

static int walk_fail(walk_t *w, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int walk_fail(walk_t *w, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(w->err, "%s:%zu:%zu: %s", w->name, m->line + 1, m->column + 1, msg);
    return BM_EINVAL;
}

static int walk_oom(walk_t *w)
{
    err_set(w->err, "%s: out of memory", w->name);
    return BM_ENOMEM;
}

/* The value of the current event as "path" for messages: the top level has no name. */
static const char *where(const char *path)
{
    return path[0] ? path : "the top level";
}

/* Advances to the next event; refuses aliases (libcyaml is set to refuse them too). */
static int walk_next(walk_t *w)
{
    if (w->have_ev)
        yaml_event_delete(&w->ev);
    w->have_ev = false;
    if (!yaml_parser_parse(&w->parser, &w->ev)) {
        yaml_parser_t *p = &w->parser;
        if (p->error == YAML_MEMORY_ERROR)
            return walk_oom(w);
        if (p->error == YAML_READER_ERROR) {
            /* The reader reports a byte offset: count lines and characters up to it. */
            yaml_mark_t m = {0, 0, 0};
            for (size_t i = 0; i < p->problem_offset && i < w->len; i++) {
                unsigned char c = (unsigned char)w->text[i];
                if (c == '\n' || (c == '\r' && (i + 1 >= w->len || w->text[i + 1] != '\n'))) {
                    m.line++;
                    m.column = 0;
                } else if ((c & 0xC0) != 0x80 && c != '\r') {
                    m.column++;
                }
            }
            return walk_fail(w, &m, "YAML error: %s", p->problem ? p->problem : "unreadable");
        }
        const char *hint = "";
        size_t at = char_to_byte(w->text, w->len, p->problem_mark.index);
        if (at < w->len && w->text[at] == '\t')
            hint = "; YAML does not allow tabs for indentation";
        if (p->context)
            return walk_fail(w, &p->problem_mark, "YAML syntax error: %s (%s)%s",
                             p->problem ? p->problem : "malformed", p->context, hint);
        return walk_fail(w, &p->problem_mark, "YAML syntax error: %s%s",
                         p->problem ? p->problem : "malformed", hint);
    }
    w->have_ev = true;
    if (w->ev.type == YAML_ALIAS_EVENT)
        return walk_fail(w, &w->ev.start_mark, "YAML aliases (*name) are not supported");
    return 0;
}

static bool grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 32;
    void *p = realloc(*arr, nc * size);
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

/* Records a key and the start of its value; returns its index or -1 (out of memory). */
static long add_loc(walk_t *w, const char *path, const yaml_mark_t *key)
{
    if (!grow((void **)&w->locs, &w->cap_locs, w->n_locs, sizeof *w->locs))
        return -1;
    loc_t *l = &w->locs[w->n_locs];
    memset(l, 0, sizeof *l);
    snprintf(l->path, sizeof l->path, "%s", path);
    l->key = *key;
    l->start = w->ev.start_mark;
    l->end = w->ev.end_mark;
    return (long)w->n_locs++;
}

static const loc_t *find_loc(const walk_t *w, const char *path)
{
    for (size_t i = 0; i < w->n_locs; i++)
        if (strcmp(w->locs[i].path, path) == 0)
            return &w->locs[i];
    return NULL;
}

static bool scalar_is(const yaml_event_t *ev, const char *s)
{
    size_t n = strlen(s);
    return ev->data.scalar.length == n && memcmp(ev->data.scalar.value, s, n) == 0;
}

/* libcyaml's null for pointers flagged CYAML_FLAG_POINTER_NULL_STR (any scalar style). */
static bool cyaml_null(const yaml_event_t *ev)
{
    return ev->type == YAML_SCALAR_EVENT &&
           (scalar_is(ev, "") || scalar_is(ev, "~") || scalar_is(ev, "null") ||
            scalar_is(ev, "Null") || scalar_is(ev, "NULL"));
}

/* A YAML null for a leaf: an empty or null plain scalar ("key:", "key: ~"). */
static bool plain_null(const yaml_event_t *ev)
{
    return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && cyaml_null(ev);
}

static int walk_scalar_text(walk_t *w)
{
    if (memchr(w->ev.data.scalar.value, '\0', w->ev.data.scalar.length))
        return walk_fail(w, &w->ev.start_mark, "values and keys must not contain NUL characters");
    return 0;
}

static const char *kind_of_event(const yaml_event_t *ev)
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

/* Walks a free-form map of header names to values (upstreams[i].headers). */
static int walk_headers(walk_t *w, const char *path)
{
    if (cyaml_null(&w->ev))
        return 0;
    if (w->ev.type != YAML_MAPPING_START_EVENT)
        return walk_fail(w, &w->ev.start_mark,
                         "\"%s\" must be a mapping of header names to values, not %s", path,
                         kind_of_event(&w->ev));
    size_t count = 0;
    for (;;) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return walk_fail(w, &w->ev.start_mark, "header names in \"%s\" must be strings", path);
        if ((rc = walk_scalar_text(w)) != 0)
            return rc;
        if (++count > BM_CONFIG_MAX_HEADERS)
            return walk_fail(w, &w->ev.start_mark, "\"%s\" has more than %d headers", path,
                             BM_CONFIG_MAX_HEADERS);
        if (!grow((void **)&w->hdrs, &w->cap_hdrs, w->n_hdrs, sizeof *w->hdrs))
            return walk_oom(w);
        hdr_rec_t *h = &w->hdrs[w->n_hdrs];
        memset(h, 0, sizeof *h);
        h->upstream = w->entry;
        h->key = w->ev.start_mark;
        h->name = strndup((const char *)w->ev.data.scalar.value, w->ev.data.scalar.length);
        if (!h->name)
            return walk_oom(w);
        w->n_hdrs++;
        if ((rc = walk_next(w)) != 0)
            return rc;
        qbuf_t q;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return walk_fail(w, &w->ev.start_mark, "header %s in \"%s\" must have a single value",
                             quote(&q, h->name), path);
        if (plain_null(&w->ev))
            return walk_fail(w, &w->ev.start_mark,
                             "header %s in \"%s\" has no value (write \"\" for an empty one)",
                             quote(&q, h->name), path);
        if ((rc = walk_scalar_text(w)) != 0)
            return rc;
        h->start = w->ev.start_mark;
        h->end = w->ev.end_mark;
        h->value = strndup((const char *)w->ev.data.scalar.value, w->ev.data.scalar.length);
        if (!h->value)
            return walk_oom(w);
    }
}

static int walk_value(walk_t *w, const cyaml_schema_value_t *sv, const char *path,
                      const yaml_mark_t *key);

static int walk_mapping(walk_t *w, const cyaml_schema_field_t *fields, const char *path)
{
    uint64_t seen = 0;
    for (;;) {
        int rc = walk_next(w);
        if (rc != 0)
            return rc;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return walk_fail(w, &w->ev.start_mark, "keys in %s must be plain names, not %s",
                             where(path), kind_of_event(&w->ev));
        if ((rc = walk_scalar_text(w)) != 0)
            return rc;
        size_t i = 0;
        for (; fields[i].key; i++)
            if (scalar_is(&w->ev, fields[i].key))
                break;
        qbuf_t q;
        quote_n(&q, (const char *)w->ev.data.scalar.value, w->ev.data.scalar.length);
        if (!fields[i].key) {
            char expected[400];
            size_t o = 0;
            expected[0] = '\0';
            for (size_t j = 0; fields[j].key && o < sizeof expected; j++)
                o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s", j ? ", " : "",
                                      fields[j].key);
            if (path[0])
                return walk_fail(w, &w->ev.start_mark,
                                 "unknown key %s in \"%s\" (expected one of: %s)", q.s, path,
                                 expected);
            return walk_fail(w, &w->ev.start_mark,
                             "unknown key %s at the top level (expected one of: %s)", q.s,
                             expected);
        }
        if (seen & (1ull << i))
            return walk_fail(w, &w->ev.start_mark, "duplicate key %s in %s", q.s, where(path));
        seen |= 1ull << i;
        char child[64];
        if (path[0])
            snprintf(child, sizeof child, "%s.%s", path, fields[i].key);
        else
            snprintf(child, sizeof child, "%s", fields[i].key);
        yaml_mark_t keymark = w->ev.start_mark;
        if ((rc = walk_next(w)) != 0)
            return rc;
        if ((rc = walk_value(w, &fields[i].value, child, &keymark)) != 0)
            return rc;
    }
}

static int walk_value(walk_t *w, const cyaml_schema_value_t *sv, const char *path,
                      const yaml_mark_t *key)
{
    long li = add_loc(w, path, key);
    int rc = 0;
    if (li < 0)
        return walk_oom(w);
    switch (sv->type) {
    case CYAML_MAPPING:
        if ((sv->flags & CYAML_FLAG_POINTER_NULL_STR) == CYAML_FLAG_POINTER_NULL_STR &&
            cyaml_null(&w->ev)) {
            w->locs[li].is_null = true;
            return 0;
        }
        if (w->ev.type != YAML_MAPPING_START_EVENT)
            return walk_fail(w, &w->ev.start_mark, "\"%s\" must be a mapping of keys, not %s", path,
                             kind_of_event(&w->ev));
        rc = walk_mapping(w, sv->mapping.fields, path);
        break;
    case CYAML_SEQUENCE: {
        if (cyaml_null(&w->ev)) {
            w->locs[li].is_null = true;
            return 0;
        }
        if (w->ev.type != YAML_SEQUENCE_START_EVENT)
            return walk_fail(w, &w->ev.start_mark, "\"%s\" must be a list, not %s", path,
                             kind_of_event(&w->ev));
        for (size_t i = 0;; i++) {
            char child[64];
            if ((rc = walk_next(w)) != 0)
                return rc;
            if (w->ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (i >= sv->sequence.max)
                return walk_fail(w, &w->ev.start_mark, "\"%s\" has more than %u entries", path,
                                 sv->sequence.max);
            snprintf(child, sizeof child, "%s[%zu]", path, i);
            w->entry = i;
            yaml_mark_t m = w->ev.start_mark;
            if ((rc = walk_value(w, sv->sequence.entry, child, &m)) != 0)
                return rc;
        }
        break;
    }
    case CYAML_IGNORE:
        rc = walk_headers(w, path);
        break;
    default:
        if (w->ev.type != YAML_SCALAR_EVENT)
            return walk_fail(w, &w->ev.start_mark, "\"%s\" must be a single value, not %s", path,
                             kind_of_event(&w->ev));
        if ((rc = walk_scalar_text(w)) != 0)
            return rc;
        w->locs[li].is_null = plain_null(&w->ev);
        break;
    }
    if (rc == 0)
        w->locs[li].end = w->ev.end_mark;
    return rc;
}

/* Walks the whole stream: at most one document whose root is a mapping (or null). */
static int walk_document(walk_t *w)
{
    int rc;
    if ((rc = walk_next(w)) != 0) /* stream start */
        return rc;
    if ((rc = walk_next(w)) != 0)
        return rc;
    if (w->ev.type == YAML_STREAM_END_EVENT) {
        w->empty = true;
        return 0;
    }
    if ((rc = walk_next(w)) != 0) /* the root node */
        return rc;
    if (w->ev.type == YAML_SCALAR_EVENT && plain_null(&w->ev)) {
        w->empty = true;
    } else if (w->ev.type == YAML_MAPPING_START_EVENT) {
        if ((rc = walk_mapping(w, top_fields, "")) != 0)
            return rc;
    } else {
        return walk_fail(w, &w->ev.start_mark,
                         "the configuration must be a mapping of keys (such as \"upstreams:\"), "
                         "not %s",
                         kind_of_event(&w->ev));
    }
    if ((rc = walk_next(w)) != 0) /* document end */
        return rc;
    if ((rc = walk_next(w)) != 0)
        return rc;
    if (w->ev.type != YAML_STREAM_END_EVENT)
        return walk_fail(w, &w->ev.start_mark, "only one YAML document is allowed");
    return 0;
}

static void walk_dispose(walk_t *w)
{
    if (w->have_ev)
        yaml_event_delete(&w->ev);
    yaml_parser_delete(&w->parser);
    for (size_t i = 0; i < w->n_hdrs; i++) {
        free(w->hdrs[i].name);
        free(w->hdrs[i].value);
    }
    free(w->hdrs);
    free(w->locs);
}

/* ---- ${VAR} substitution ----------------------------------------------------------- */

/*
 * Expands `${NAME}` and `$$` in `in`; any other '$' stays as it is. Returns a new string, or
 * NULL with the reason in msg (empty on allocation failure) and, in *ordinal, which "${"
 * of the value failed (0 for the first), so that the caller can point at it in the file.
 */
static char *expand(const char *in, bm_config_getenv_fn env, void *ud, char *msg, size_t n,
                    size_t *ordinal)
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
        qbuf_t q;
        *ordinal = nth++;
        if (!close) {
            snprintf(msg, n, "unterminated \"${\" (write \"$$\" for a literal '$')");
            goto fail;
        }
        bool ok = len > 0 && (is_alpha((unsigned char)name[0]) || name[0] == '_');
        for (size_t i = 1; ok && i < len; i++)
            ok = is_alpha((unsigned char)name[i]) || is_digit((unsigned char)name[i]) ||
                 name[i] == '_';
        if (!ok || len > 255) {
            snprintf(msg, n, "invalid variable name %s in \"${...}\"", quote_n(&q, name, len));
            goto fail;
        }
        char var[256];
        memcpy(var, name, len);
        var[len] = '\0';
        const char *val = env ? env(ud, var) : getenv(var);
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

/* ---- from the raw structs to the model --------------------------------------------- */

typedef struct loader {
    const char *name;
    const char *text;
    size_t len;
    bm_config_getenv_fn env;
    void *env_ud;
    bm_config_err_t *err;
    walk_t w;
    char cyaml_msg[256]; /* the first error libcyaml logged */
} loader_t;

static int fail_at(loader_t *ld, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(loader_t *ld, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m)
        err_set(ld->err, "%s:%zu:%zu: %s", ld->name, m->line + 1, m->column + 1, msg);
    else
        err_set(ld->err, "%s: %s", ld->name, msg);
    return BM_EINVAL;
}

/*
 * Where the `ordinal`-th "${" of a value sits in the file: scans the value's source text
 * with the same "$$" rule as expand(); falls back to the value's start when the source
 * spells it differently (escapes in a double-quoted string).
 */
static yaml_mark_t subst_mark(const loader_t *ld, const yaml_mark_t *start, const yaml_mark_t *end,
                              size_t ordinal)
{
    size_t b = char_to_byte(ld->text, ld->len, start->index);
    size_t e = char_to_byte(ld->text, ld->len, end->index);
    size_t nth = 0;
    for (size_t i = b; i + 1 < e; i++) {
        if (ld->text[i] != '$')
            continue;
        if (ld->text[i + 1] == '$') {
            i++;
            continue;
        }
        if (ld->text[i + 1] != '{' || nth++ != ordinal)
            continue;
        yaml_mark_t m = *start;
        for (size_t j = b; j < i; j++) {
            unsigned char c = (unsigned char)ld->text[j];
            if (c == '\n' || (c == '\r' && (j + 1 >= e || ld->text[j + 1] != '\n'))) {
                m.line++;
                m.column = 0;
            } else if ((c & 0xC0) != 0x80 && c != '\r') {
                m.column++;
            }
        }
        return m;
    }
    return *start;
}

/* The value at `path` after substitution: *out is NULL when the key is absent or null. */
static int value_of(loader_t *ld, const char *path, const char *raw, const yaml_mark_t *start,
                    const yaml_mark_t *end, bool is_null, char **out)
{
    char msg[300];
    size_t ordinal;
    *out = NULL;
    if (!raw || is_null)
        return 0;
    *out = expand(raw, ld->env, ld->env_ud, msg, sizeof msg, &ordinal);
    if (*out)
        return 0;
    if (!msg[0]) {
        err_set(ld->err, "%s: out of memory", ld->name);
        return BM_ENOMEM;
    }
    yaml_mark_t m = subst_mark(ld, start, end, ordinal);
    return fail_at(ld, &m, "%s: %s", path, msg);
}

static int value_at(loader_t *ld, const char *path, const char *raw, char **out,
                    const loc_t **where_out)
{
    const loc_t *l = find_loc(&ld->w, path);
    static const yaml_mark_t zero;
    *where_out = l;
    return value_of(ld, path, raw, l ? &l->start : &zero, l ? &l->end : &zero,
                    l ? l->is_null : false, out);
}

static int convert_keys(loader_t *ld, raw_top_t *raw, bm_config_t *cfg)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const cfgkey_t *k = &keys[i];
        char *sec = raw_section(raw, k->sec);
        char *raw_v = NULL, *v;
        const loc_t *l;
        char msg[400];
        if (sec)
            memcpy(&raw_v, sec + k->raw_off, sizeof raw_v);
        int rc = value_at(ld, k->path, raw_v, &v, &l);
        if (rc != 0)
            return rc;
        if (!v)
            continue;
        bool ok = set_key(cfg, k, v, msg, sizeof msg);
        free(v);
        if (!ok)
            return fail_at(ld, l ? &l->start : NULL, "%s: %s", k->path, msg);
    }
    return 0;
}

static int convert_headers(loader_t *ld, size_t idx, bm_config_upstream_t *up)
{
    for (size_t i = 0; i < ld->w.n_hdrs; i++) {
        const hdr_rec_t *h = &ld->w.hdrs[i];
        char path[96], *v;
        const char *why;
        qbuf_t q;
        if (h->upstream != idx)
            continue;
        snprintf(path, sizeof path, "upstreams[%zu].headers", idx);
        quote(&q, h->name);
        if ((why = header_name_problem(h->name)))
            return fail_at(ld, &h->key, "%s: header %s %s", path, q.s, why);
        for (size_t j = 0; j < up->n_headers; j++)
            if (strcasecmp(up->headers[j].name, h->name) == 0)
                return fail_at(ld, &h->key, "%s: header %s is given twice", path, q.s);
        int rc = value_of(ld, path, h->value, &h->start, &h->end, false, &v);
        if (rc != 0)
            return rc;
        if (!v)
            return fail_at(ld, &h->key, "%s: header %s has no value", path, q.s);
        if ((why = header_value_problem(v))) {
            free(v);
            return fail_at(ld, &h->start, "%s: the value of header %s %s", path, q.s, why);
        }
        bm_config_header_t *hh = &up->headers[up->n_headers];
        hh->value = v;
        if (!(hh->name = strdup(h->name))) {
            free(v);
            return fail_at(ld, NULL, "out of memory");
        }
        up->n_headers++;
    }
    return 0;
}

static int convert_upstreams(loader_t *ld, raw_top_t *raw, bm_config_t *cfg)
{
    size_t n = raw->upstreams_count;
    if (n == 0)
        return 0;
    cfg->upstreams = calloc(n, sizeof *cfg->upstreams);
    if (!cfg->upstreams)
        return fail_at(ld, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const raw_upstream_t *ru = &raw->upstreams[i];
        bm_config_upstream_t *up = &cfg->upstreams[i];
        char path[64], idpath[80], urlpath[80];
        const loc_t *entry, *lid, *lurl;
        const char *why;
        qbuf_t q;
        int rc;
        cfg->n_upstreams = i + 1;
        snprintf(path, sizeof path, "upstreams[%zu]", i);
        snprintf(idpath, sizeof idpath, "%s.id", path);
        snprintf(urlpath, sizeof urlpath, "%s.url", path);
        entry = find_loc(&ld->w, path);
        const yaml_mark_t *em = entry ? &entry->start : NULL;

        if ((rc = value_at(ld, idpath, ru->id, &up->id, &lid)) != 0)
            return rc;
        if (up->id) {
            if ((why = id_problem(up->id)))
                return fail_at(ld, lid ? &lid->start : em, "%s: id %s %s", path, quote(&q, up->id),
                               why);
        } else if (!(up->id = default_id(i))) {
            return fail_at(ld, NULL, "out of memory");
        }
        bool explicit_id = ru->id && lid && !lid->is_null;
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->upstreams[j].id, up->id) == 0)
                return fail_at(ld, explicit_id ? &lid->start : em,
                               "%s: id %s is already used by upstreams[%zu]%s", path,
                               quote(&q, up->id), j,
                               explicit_id ? "" : " (ids default to node1, node2, ...)");

        if ((rc = value_at(ld, urlpath, ru->url, &up->url, &lurl)) != 0)
            return rc;
        if (!up->url)
            return fail_at(ld, em, "%s: missing key \"url\"", path);
        /* A URL built with ${VAR} is shown as written: a malformed one (no "@host") could
         * otherwise put the substituted password in the message. */
        if ((why = url_problem(up->url)))
            return fail_at(ld, lurl ? &lurl->start : em, "%s: url %s %s", path,
                           quote_url(&q, strstr(ru->url, "${") ? ru->url : up->url), why);

        size_t nh = 0;
        for (size_t j = 0; j < ld->w.n_hdrs; j++)
            nh += ld->w.hdrs[j].upstream == i;
        if (nh) {
            if (!(up->headers = calloc(nh, sizeof *up->headers)))
                return fail_at(ld, NULL, "out of memory");
            if ((rc = convert_headers(ld, i, up)) != 0)
                return rc;
        }
    }
    return 0;
}

static void cyaml_log_capture(cyaml_log_t level, void *ctx, const char *fmt, va_list ap)
{
    loader_t *ld = ctx;
    if (level >= CYAML_LOG_ERROR && !ld->cyaml_msg[0]) {
        vsnprintf(ld->cyaml_msg, sizeof ld->cyaml_msg, fmt, ap);
        ld->cyaml_msg[strcspn(ld->cyaml_msg, "\n")] = '\0';
    }
}

bm_config_t *bm_config_parse(const char *text, size_t len, const char *name,
                             bm_config_getenv_fn env, void *env_ud, bm_config_err_t *err)
{
    loader_t ld = {.name = name ? name : "config",
                   .text = text,
                   .len = len,
                   .env = env,
                   .env_ud = env_ud,
                   .err = err};
    raw_top_t *raw = NULL;
    bm_config_t *cfg = NULL;
    int rc;

    if (err)
        err->msg[0] = '\0';
    if (!text && len) {
        err_set(err, "%s: no text", ld.name);
        return NULL;
    }
    if (len > BM_CONFIG_MAX_FILE_BYTES) {
        err_set(err, "%s: larger than %u bytes", ld.name, BM_CONFIG_MAX_FILE_BYTES);
        return NULL;
    }
    if (!yaml_parser_initialize(&ld.w.parser)) {
        err_set(err, "%s: out of memory", ld.name);
        return NULL;
    }
    ld.w.name = ld.name;
    ld.w.text = text ? text : "";
    ld.w.len = len;
    ld.w.err = err;
    yaml_parser_set_input_string(&ld.w.parser, (const unsigned char *)(text ? text : ""), len);
    if ((rc = walk_document(&ld.w)) != 0)
        goto fail;

    if (!ld.w.empty) {
        cyaml_config_t cc = {
            .log_fn = cyaml_log_capture,
            .log_ctx = &ld,
            .mem_fn = cyaml_mem,
            .log_level = CYAML_LOG_ERROR,
            .flags = CYAML_CFG_NO_ALIAS,
        };
        cyaml_err_t ce = cyaml_load_data((const uint8_t *)text, len, &cc, &top_schema,
                                         (cyaml_data_t **)&raw, NULL);
        if (ce != CYAML_OK) {
            /* The walk accepts only what the schema accepts; this is a safety net. */
            err_set(err, "%s: cannot load the configuration (libcyaml: %s%s%s)", ld.name,
                    cyaml_strerror(ce), ld.cyaml_msg[0] ? ": " : "", ld.cyaml_msg);
            raw = NULL;
            goto fail;
        }
    }
    if (!(cfg = bm_config_new())) {
        err_set(err, "%s: out of memory", ld.name);
        goto fail;
    }
    if (raw) {
        if ((rc = convert_keys(&ld, raw, cfg)) != 0)
            goto fail;
        if ((rc = convert_upstreams(&ld, raw, cfg)) != 0)
            goto fail;
    }
    if (raw) {
        cyaml_config_t cc = {.log_fn = cyaml_log_capture,
                             .log_ctx = &ld,
                             .mem_fn = cyaml_mem,
                             .log_level = CYAML_LOG_ERROR};
        cyaml_free(&cc, &top_schema, raw, 0);
    }
    walk_dispose(&ld.w);
    return cfg;

fail:
    if (raw) {
        cyaml_config_t cc = {.log_fn = cyaml_log_capture,
                             .log_ctx = &ld,
                             .mem_fn = cyaml_mem,
                             .log_level = CYAML_LOG_ERROR};
        cyaml_free(&cc, &top_schema, raw, 0);
    }
    walk_dispose(&ld.w);
    bm_config_free(cfg);
    return NULL;
}

/* ---- validation of the whole ------------------------------------------------------- */

int bm_config_validate(const bm_config_t *cfg, bm_config_err_t *err)
{
    char msg[400];
    const char *why;
    qbuf_t q;
    if (!cfg) {
        err_set(err, "no configuration");
        return BM_EINVAL;
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!check_key(cfg, &keys[i], msg, sizeof msg)) {
            err_set(err, "%s: %s", keys[i].path, msg);
            return BM_EINVAL;
        }
    }
    if (cfg->n_upstreams == 0) {
        err_set(err, "no upstream configured: give --upstream URL, or list \"upstreams\" in the "
                     "configuration file");
        return BM_EINVAL;
    }
    if (cfg->n_upstreams > BM_CONFIG_MAX_UPSTREAMS) {
        err_set(err, "more than %d upstreams", BM_CONFIG_MAX_UPSTREAMS);
        return BM_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        const bm_config_upstream_t *up = &cfg->upstreams[i];
        if (!up->id || (why = id_problem(up->id))) {
            err_set(err, "upstreams[%zu]: id %s %s", i, up->id ? quote(&q, up->id) : "(none)",
                    up->id ? why : "is missing");
            return BM_EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(cfg->upstreams[j].id, up->id) == 0) {
                err_set(err, "upstreams[%zu]: id %s is already used by upstreams[%zu]", i,
                        quote(&q, up->id), j);
                return BM_EINVAL;
            }
        }
        if (!up->url || (why = url_problem(up->url))) {
            err_set(err, "upstreams[%zu] (%s): url %s %s", i, up->id,
                    up->url ? quote_url(&q, up->url) : "(none)", up->url ? why : "is missing");
            return BM_EINVAL;
        }
        if (up->n_headers > BM_CONFIG_MAX_HEADERS) {
            err_set(err, "upstreams[%zu] (%s): more than %d headers", i, up->id,
                    BM_CONFIG_MAX_HEADERS);
            return BM_EINVAL;
        }
        for (size_t h = 0; h < up->n_headers; h++) {
            const bm_config_header_t *hd = &up->headers[h];
            if (!hd->name || !hd->value) {
                err_set(err, "upstreams[%zu] (%s): header %zu is incomplete", i, up->id, h);
                return BM_EINVAL;
            }
            if ((why = header_name_problem(hd->name)) || (why = header_value_problem(hd->value))) {
                err_set(err, "upstreams[%zu] (%s): header %s %s", i, up->id, quote(&q, hd->name),
                        why);
                return BM_EINVAL;
            }
            for (size_t j = 0; j < h; j++) {
                if (strcasecmp(up->headers[j].name, hd->name) == 0) {
                    err_set(err, "upstreams[%zu] (%s): header %s is given twice", i, up->id,
                            quote(&q, hd->name));
                    return BM_EINVAL;
                }
            }
        }
    }
    if (cfg->duties.hold_floor_ms > cfg->duties.max_hold_ms) {
        char a[32], b[32];
        fmt_duration(a, sizeof a, cfg->duties.hold_floor_ms);
        fmt_duration(b, sizeof b, cfg->duties.max_hold_ms);
        err_set(err, "duties.holdFloor (%s) must not be greater than duties.maxHold (%s)", a, b);
        return BM_EINVAL;
    }
    for (int d = 0; d < BM_CONFIG_DUTY_COUNT; d++) {
        const bm_config_duty_hold_t *h = &cfg->duties.hold[d];
        uint32_t floor, max;
        bm_config_duty_hold(cfg, (bm_config_duty_t)d, &floor, &max);
        if (floor > max) {
            char a[32], b[32];
            const char *name = bm_config_duty_name((bm_config_duty_t)d);
            fmt_duration(a, sizeof a, floor);
            fmt_duration(b, sizeof b, max);
            err_set(err, "duties.%s: holdFloor (%s%s) must not be greater than maxHold (%s%s)",
                    name, a, h->hold_floor_ms == BM_CONFIG_UNSET ? ", from duties.holdFloor" : "",
                    b, h->max_hold_ms == BM_CONFIG_UNSET ? ", from duties.maxHold" : "");
            return BM_EINVAL;
        }
    }
    if (cfg->health.head_quorum > cfg->n_upstreams) {
        err_set(err,
                "health.headQuorum (%" PRIu32 ") is larger than the number of upstreams (%zu): "
                "the cluster head could never move except by extension",
                cfg->health.head_quorum, cfg->n_upstreams);
        return BM_EINVAL;
    }
    return 0;
}

/* ---- per-duty holds ------------------------------------------------------------------- */

void bm_config_duty_hold(const bm_config_t *cfg, bm_config_duty_t duty, uint32_t *hold_floor_ms,
                         uint32_t *max_hold_ms)
{
    uint32_t floor = cfg->duties.hold_floor_ms, max = cfg->duties.max_hold_ms;
    if ((int)duty >= 0 && duty < BM_CONFIG_DUTY_COUNT) {
        const bm_config_duty_hold_t *h = &cfg->duties.hold[duty];
        if (h->hold_floor_ms != BM_CONFIG_UNSET)
            floor = h->hold_floor_ms;
        if (h->max_hold_ms != BM_CONFIG_UNSET)
            max = h->max_hold_ms;
    }
    *hold_floor_ms = floor;
    *max_hold_ms = max;
}

const char *bm_config_duty_name(bm_config_duty_t duty)
{
    static const char *const names[BM_CONFIG_DUTY_COUNT] = {
        "attestationData",           "headRoot", "payloadAttestationData", "aggregateAttestation",
        "syncCommitteeContribution",
    };
    return (int)duty >= 0 && duty < BM_CONFIG_DUTY_COUNT ? names[duty] : "?";
}

/* ---- dump ---------------------------------------------------------------------------- */

/*
 * Appends s as a YAML double-quoted scalar that libyaml reads back byte for byte: escapes
 * what YAML may not carry literally (control characters, line breaks, DEL, C1 controls,
 * U+FEFF, U+2028/2029), and with `dollar`, doubles '$' for the ${VAR} substitution.
 */
static void dump_quoted(bm_str_t *out, const char *s, bool dollar)
{
    const unsigned char *p = (const unsigned char *)s;
    bm_str_putc(out, '"');
    while (*p) {
        unsigned c = p[0];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t cp = c;
        bool valid = c < 0x80 || (c >= 0xC2 && c <= 0xF4);
        for (size_t i = 1; valid && i < n; i++)
            valid = (p[i] & 0xC0) == 0x80;
        if (valid && n > 1) {
            cp = c & (0xFF >> (n + 1));
            for (size_t i = 1; i < n; i++)
                cp = (cp << 6) | (p[i] & 0x3F);
            valid = !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
                    !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (!valid) {
            bm_str_printf(out, "\\x%02x", c); /* not UTF-8: shown, not preserved */
            p++;
            continue;
        }
        if (c == '"' || c == '\\') {
            bm_str_putc(out, '\\');
            bm_str_putc(out, (char)c);
        } else if (c == '$' && dollar) {
            bm_str_puts(out, "$$");
        } else if (c == '\t') {
            bm_str_puts(out, "\\t");
        } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) {
            bm_str_printf(out, "\\x%02x", (unsigned)cp);
        } else if (cp == 0xFEFF || cp == 0x2028 || cp == 0x2029 || cp == 0xFFFE || cp == 0xFFFF) {
            bm_str_printf(out, "\\u%04x", (unsigned)cp);
        } else {
            bm_str_append(out, p, n);
        }
        p += n;
    }
    bm_str_putc(out, '"');
}

static void dump_key(bm_str_t *out, const bm_config_t *cfg, const cfgkey_t *k, const char *indent)
{
    char b[64];
    if (k->kind == K_LISTEN) {
        const char *h = cfg->listen_host ? cfg->listen_host : "";
        bm_str_printf(out, "%s%s: \"%s%s%s:%u\"\n", indent, k->name, strchr(h, ':') ? "[" : "", h,
                      strchr(h, ':') ? "]" : "", cfg->listen_port);
        return;
    }
    if (k->kind == K_ROOT || k->kind == K_PATH) {
        const char *v = str_value(cfg, k);
        if (!v)
            return;
        bm_str_printf(out, "%s%s: ", indent, k->name);
        dump_quoted(out, v, true);
        bm_str_putc(out, '\n');
        return;
    }
    if (k->kind == K_DURATION_OPT && get_num(cfg, k) == BM_CONFIG_UNSET)
        return; /* inherited: absent from the file reads back the same */
    fmt_num(b, sizeof b, k->kind, get_num(cfg, k));
    bm_str_printf(out, "%s%s: %s\n", indent, k->name, b);
}

static void dump_upstreams(bm_str_t *out, const bm_config_t *cfg, bool mask)
{
    if (cfg->n_upstreams == 0) {
        bm_str_puts(out, "upstreams: []\n");
        return;
    }
    bm_str_puts(out, "upstreams:\n");
    for (size_t i = 0; i < cfg->n_upstreams; i++) {
        const bm_config_upstream_t *up = &cfg->upstreams[i];
        bm_str_puts(out, "  - id: ");
        dump_quoted(out, up->id ? up->id : "", true);
        bm_str_puts(out, "\n    url: ");
        if (mask) {
            bm_str_t m = BM_STR_INIT;
            bm_url_mask(&m, up->url ? up->url : "");
            dump_quoted(out, bm_str_data(&m), true);
            bm_str_dispose(&m);
        } else {
            dump_quoted(out, up->url ? up->url : "", true);
        }
        bm_str_putc(out, '\n');
        if (up->n_headers)
            bm_str_puts(out, "    headers:\n");
        for (size_t h = 0; h < up->n_headers; h++) {
            bm_str_puts(out, "      ");
            dump_quoted(out, up->headers[h].name ? up->headers[h].name : "", false);
            bm_str_puts(out, ": ");
            dump_quoted(out, mask ? "***" : (up->headers[h].value ? up->headers[h].value : ""),
                        true);
            bm_str_putc(out, '\n');
        }
    }
}

int bm_config_dump(const bm_config_t *cfg, bool mask_secrets, bm_str_t *out)
{
    for (int sec = 0; sec < SEC_COUNT; sec++) {
        const char *dot = strchr(section_names[sec], '.');
        const char *indent = sec == SEC_top ? "" : dot ? "    " : "  ";
        if (dot) {
            /* a sub-section: written only when one of its keys is set */
            bool any = false;
            for (size_t i = 0; i < N_KEYS; i++)
                if (keys[i].sec == (section_t)sec &&
                    !(keys[i].kind == K_DURATION_OPT && get_num(cfg, &keys[i]) == BM_CONFIG_UNSET))
                    any = true;
            if (!any)
                continue;
            bm_str_printf(out, "  %s:\n", dot + 1);
        } else if (sec != SEC_top) {
            bm_str_printf(out, "%s:\n", section_names[sec]);
        }
        for (size_t i = 0; i < N_KEYS; i++)
            if (keys[i].sec == (section_t)sec)
                dump_key(out, cfg, &keys[i], indent);
        if (sec == SEC_log)
            dump_upstreams(out, cfg, mask_secrets);
    }
    return out->oom ? BM_ENOMEM : 0;
}

/* ---- the command line ---------------------------------------------------------------- */

enum opt_id {
    OPT_CONFIG,
    OPT_UPSTREAM,
    OPT_LISTEN,
    OPT_CHECK,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT,
    OPT_VERSION,
    OPT_HELP
};

static const struct opt {
    const char *name;
    enum opt_id id;
    bool has_value;
} opts[] = {
    {"--config", OPT_CONFIG, true},       {"--upstream", OPT_UPSTREAM, true},
    {"--listen", OPT_LISTEN, true},       {"--check", OPT_CHECK, false},
    {"--log-level", OPT_LOG_LEVEL, true}, {"--log-format", OPT_LOG_FORMAT, true},
    {"--version", OPT_VERSION, false},    {"--help", OPT_HELP, false},
};

static int usage_error(bm_config_err_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int usage_error(bm_config_err_t *err, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(err, "%s\n%s\nRun \"beaconmux --help\" for details.", msg, usage_line);
    return BM_EINVAL;
}

int bm_config_parse_args(int argc, char *const argv[], bm_cli_t *cli, bm_config_err_t *err)
{
    bool seen[OPT_HELP + 1] = {false};
    qbuf_t q;
    memset(cli, 0, sizeof *cli);
    if (err)
        err->msg[0] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0) {
            cli->help = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
            return usage_error(err, "unexpected argument %s", quote(&q, a));
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const struct opt *o = NULL;
        for (size_t j = 0; j < sizeof opts / sizeof opts[0]; j++)
            if (strlen(opts[j].name) == nlen && strncmp(opts[j].name, a, nlen) == 0)
                o = &opts[j];
        if (!o)
            return usage_error(err, "unknown option %s", quote_n(&q, a, nlen));
        const char *v = NULL;
        if (o->has_value) {
            if (eq) {
                v = eq + 1;
            } else if (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1] != '\0')) {
                v = argv[++i];
            }
            if (!v || !v[0])
                return usage_error(err, "option %s needs a value", o->name);
        } else if (eq) {
            return usage_error(err, "option %s takes no value", o->name);
        }
        if (seen[o->id] && o->id != OPT_UPSTREAM)
            return usage_error(err, "option %s is given more than once", o->name);
        seen[o->id] = true;
        switch (o->id) {
        case OPT_CONFIG:
            cli->config_path = v;
            break;
        case OPT_UPSTREAM:
            if (cli->n_upstreams == BM_CONFIG_MAX_UPSTREAMS)
                return usage_error(err, "more than %d --upstream options", BM_CONFIG_MAX_UPSTREAMS);
            cli->upstreams[cli->n_upstreams++] = v;
            break;
        case OPT_LISTEN:
            cli->listen = v;
            break;
        case OPT_CHECK:
            cli->check = true;
            break;
        case OPT_LOG_LEVEL:
            if (bm_log_level_parse(v, &cli->log_level) != 0)
                return usage_error(err,
                                   "invalid value %s for --log-level (use debug, info, warn, "
                                   "error or off)",
                                   quote(&q, v));
            cli->has_log_level = true;
            break;
        case OPT_LOG_FORMAT:
            if (bm_log_format_parse(v, &cli->log_format) != 0)
                return usage_error(err, "invalid value %s for --log-format (use text or json)",
                                   quote(&q, v));
            cli->has_log_format = true;
            break;
        case OPT_VERSION:
            cli->version = true;
            break;
        case OPT_HELP:
            cli->help = true;
            break;
        }
    }
    return 0;
}

const char *bm_config_help(void)
{
    return "beaconmux: a validator-safe, active-active multiplexer for the Ethereum Beacon API.\n"
           "\n"
           "Usage: beaconmux [--config FILE] [--upstream URL]... [--listen HOST:PORT] [--check]\n"
           "                 [--log-level LEVEL] [--log-format text|json] [--version] [--help]\n"
           "\n"
           "Options (each also accepts --option=value):\n"
           "  --config FILE          YAML configuration file (see beaconmux.example.yaml and\n"
           "                         docs/configuration.md). Without it, built-in defaults are\n"
           "                         used and at least one --upstream is required.\n"
           "  --upstream URL         A beacon node's base URL (http:// or https://, may carry\n"
           "                         user:password@ and a path prefix). Repeat for each node.\n"
           "                         When given, the --upstream list REPLACES the file's\n"
           "                         whole upstreams list (ids node1, node2, ... in order, no\n"
           "                         extra headers); the file's other settings still apply.\n"
           "  --listen HOST:PORT     Address to serve on (default 127.0.0.1:5555; IPv6 as\n"
           "                         [::1]:5555). Overrides the file's \"listen\".\n"
           "  --check                Load and validate the configuration, report, and exit:\n"
           "                         status 0 when valid, 2 with the error otherwise.\n"
           "  --log-level LEVEL      debug, info, warn, error or off (default info).\n"
           "                         Overrides the file's \"log.level\".\n"
           "  --log-format FORMAT    text or json (default text). Overrides \"log.format\".\n"
           "  --version              Print the version and exit.\n"
           "  -h, --help             Print this help and exit.\n"
           "\n"
           "Flags override the file; keys absent from both take their defaults.\n"
           "In the file, ${VAR} in a value is replaced by the environment variable VAR (an\n"
           "unset variable is an error); write $$ for a literal '$'.\n";
}

int bm_config_apply_cli(bm_config_t *cfg, const bm_cli_t *cli, bm_config_err_t *err)
{
    qbuf_t q;
    if (cli->listen) {
        char host[64];
        uint16_t port;
        char *dup;
        if (bm_config_parse_listen(cli->listen, host, sizeof host, &port) != 0) {
            err_set(err,
                    "--listen: invalid address %s (use HOST:PORT with an IPv4 address, [IPv6 "
                    "address] or localhost, and a port 0-65535)",
                    quote(&q, cli->listen));
            return BM_EINVAL;
        }
        if (!(dup = strdup(host))) {
            err_set(err, "out of memory");
            return BM_ENOMEM;
        }
        free(cfg->listen_host);
        cfg->listen_host = dup;
        cfg->listen_port = port;
    }
    if (cli->has_log_level)
        cfg->log.level = cli->log_level;
    if (cli->has_log_format)
        cfg->log.format = cli->log_format;
    if (cli->n_upstreams > 0) {
        size_t n = cli->n_upstreams;
        const char *why;
        if (n > BM_CONFIG_MAX_UPSTREAMS) {
            err_set(err, "more than %d --upstream options", BM_CONFIG_MAX_UPSTREAMS);
            return BM_EINVAL;
        }
        for (size_t i = 0; i < n; i++) {
            if ((why = url_problem(cli->upstreams[i]))) {
                err_set(err, "--upstream %s (#%zu) %s", quote_url(&q, cli->upstreams[i]), i + 1,
                        why);
                return BM_EINVAL;
            }
        }
        bm_config_upstream_t *ups = calloc(n, sizeof *ups);
        if (!ups) {
            err_set(err, "out of memory");
            return BM_ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
            ups[i].id = default_id(i);
            ups[i].url = strdup(cli->upstreams[i]);
            if (!ups[i].id || !ups[i].url) {
                free_upstreams(ups, n);
                err_set(err, "out of memory");
                return BM_ENOMEM;
            }
        }
        free_upstreams(cfg->upstreams, cfg->n_upstreams);
        cfg->upstreams = ups;
        cfg->n_upstreams = n;
    }
    return 0;
}

/* ---- the whole load ---------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len, bm_config_err_t *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;
    if (!f) {
        err_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    buf = malloc(BM_CONFIG_MAX_FILE_BYTES + 1);
    if (!buf) {
        fclose(f);
        err_set(err, "%s: out of memory", path);
        return NULL;
    }
    n = fread(buf, 1, BM_CONFIG_MAX_FILE_BYTES + 1, f);
    if (ferror(f)) {
        err_set(err, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    if (n > BM_CONFIG_MAX_FILE_BYTES) {
        err_set(err, "%s: larger than %u bytes", path, BM_CONFIG_MAX_FILE_BYTES);
        goto fail;
    }
    fclose(f);
    *len = n;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

bm_config_t *bm_config_load(const bm_cli_t *cli, bm_config_err_t *err)
{
    bm_config_t *cfg;
    if (err)
        err->msg[0] = '\0';
    if (cli->config_path) {
        size_t len;
        char *text = read_file(cli->config_path, &len, err);
        if (!text)
            return NULL;
        cfg = bm_config_parse(text, len, cli->config_path, NULL, NULL, err);
        free(text);
        if (!cfg)
            return NULL;
        if (!(cfg->path = strdup(cli->config_path))) {
            err_set(err, "out of memory");
            goto fail;
        }
    } else if (!(cfg = bm_config_new())) {
        err_set(err, "out of memory");
        return NULL;
    }
    if (bm_config_apply_cli(cfg, cli, err) != 0)
        goto fail;
    if (bm_config_validate(cfg, err) != 0)
        goto fail;
    return cfg;
fail:
    bm_config_free(cfg);
    return NULL;
}
