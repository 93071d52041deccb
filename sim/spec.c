/* SPDX-License-Identifier: MIT */
/*
 * spec: behaviour words and their JSON form. See spec.h.
 */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

typedef struct client_info {
    const char *name, *display, *code, *semver, *version;
} client_info_t;

static const client_info_t CLIENTS[BS_CLIENT_COUNT] = {
    {"lighthouse", "Lighthouse", "LH", "v7.0.0-sim", "Lighthouse/v7.0.0-sim/x86_64-linux"},
    {"prysm", "Prysm", "PM", "v6.0.0-sim", "Prysm/v6.0.0-sim (linux amd64)"},
    {"teku", "teku", "TK", "v25.4.0-sim",
     "teku/v25.4.0-sim/linux-x86_64/-eclipseadoptium-openjdk64bitservervm-java-21"},
    {"nimbus", "Nimbus", "NB", "v25.4.0-sim", "Nimbus/v25.4.0-sim-linux-amd64"},
    {"lodestar", "Lodestar", "LS", "v1.29.0-sim", "Lodestar/v1.29.0-sim/linux-x64/nodejs"},
    {"grandine", "Grandine", "GR", "1.1.0-sim", "Grandine/1.1.0-sim/x86_64-linux"},
    {"caplin", "Caplin", "EG", "v3.0.0-sim", "Caplin/v3.0.0-sim/linux-amd64/go1.23"},
};

const char *bs_client_name(bs_client_t c)
{
    return CLIENTS[c].name;
}
const char *bs_client_version(bs_client_t c)
{
    return CLIENTS[c].version;
}
const char *bs_client_display(bs_client_t c)
{
    return CLIENTS[c].display;
}
const char *bs_client_code(bs_client_t c)
{
    return CLIENTS[c].code;
}
const char *bs_client_semver(bs_client_t c)
{
    return CLIENTS[c].semver;
}

int bs_client_parse(const char *s, bs_client_t *out)
{
    for (int i = 0; i < BS_CLIENT_COUNT; i++)
        if (strcasecmp(s, CLIENTS[i].name) == 0) {
            *out = (bs_client_t)i;
            return 0;
        }
    if (strcasecmp(s, "erigon") == 0) {
        *out = BS_CLIENT_CAPLIN;
        return 0;
    }
    return BM_EINVAL;
}

const char bs_behav_help[] =
    "SPEC words (comma separated; booleans also take =true/false):\n"
    "  lag=MS            import each block MS after it is published (default 0)\n"
    "  jitter=MS         plus a seeded 0..MS extra delay per slot (default 0)\n"
    "  down              port closed: stop listening, close connections\n"
    "  hang              accept and read requests, never answer (event streams too)\n"
    "  error-rate=P      answer 500 {\"code\":500,...} with probability P (0..1)\n"
    "  throttle=P        answer 429 with probability P (0..1), with Retry-After\n"
    "  retry-after=S     the Retry-After of those 429s in seconds (default 1; 0: none)\n"
    "  prune=SLOTS       history older than SLOTS slots is gone: 404 for blocks, headers and\n"
    "                    states by slot, 400 (custody) for blob sidecars (0: keeps all)\n"
    "  slow=MS           delay every answer by MS\n"
    "  stale             stop importing blocks (head freezes)\n"
    "  fork              follow an own branch from now on; clearing it rejoins (chain_reorg)\n"
    "  clock-skew=MS     the node's clock runs MS ahead (or behind, negative)\n"
    "  syncing           is_syncing true, health 206, duties and attestation data 503,\n"
    "                    head frozen while set\n"
    "  optimistic        execution_optimistic true, health 206, attestation data 503\n"
    "  sse-drop=P        close the event stream with probability P per event\n"
    "  client=NAME       lighthouse, prysm, teku, nimbus, lodestar, grandine, caplin:\n"
    "                    node/version and small differences in config/spec\n"
    "  sse-style=STYLE   standard (\"event: head\") or lighthouse (\"event:head\")\n"
    "  sse-fragment      split events across chunks at random bytes, CRLF line ends\n"
    "  gzip              gzip JSON answers when Accept-Encoding allows it\n"
    "  no-ssz            415 to SSZ requests (Accept) and SSZ bodies\n"
    "  payload-delay=MS  Gloas: the payload becomes available MS after the block import\n"
    "                    (default: a tenth of a slot plus a seeded share of another tenth)\n"
    "  big-values        block values above 2^63 and 2^64 Wei\n"
    "  sse-head-with-event  event streams send their response head (status line and\n"
    "                    headers) only together with their first event, and no ':'\n"
    "                    comments, as Lodestar does (Node.js writes the head with the\n"
    "                    first body bytes)\n"
    "  sse-first-event-late=MS  event streams write nothing for MS after the request;\n"
    "                    events meanwhile are held and written then (with the head when\n"
    "                    sse-head-with-event is set). Changing either closes the node's\n"
    "                    streams, so that they reconnect under the new behaviour\n"
    "  bad-source        attestation data names a wrong source (justified) checkpoint\n"
    "  bad-target        attestation data names a wrong target checkpoint\n"
    "  fail-items=I+J    pool batches: items I, J, ... (0..63) fail validation: 400 with the\n"
    "                    Beacon API's indexed error listing them; the others are taken\n"
    "  dup-items=I+J     pool batches: items I, J, ... are refused as already seen by another\n"
    "                    node (\"PublishError.Duplicate\"); alone, as a 500 (as Lodestar)\n";

void bs_behav_default(bs_behav_t *b)
{
    memset(b, 0, sizeof *b);
    b->client = BS_CLIENT_LIGHTHOUSE;
    b->sse_style = BS_SSE_STANDARD;
    b->payload_delay_ms = -1;
    b->retry_after_s = 1;
}

static int parse_ms(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v || !*v)
        return BM_EINVAL;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return BM_EINVAL;
    *out = x;
    return 0;
}

static int parse_prob(const char *v, double *out)
{
    if (!v || !*v)
        return BM_EINVAL;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !(x >= 0 && x <= 1))
        return BM_EINVAL;
    *out = x;
    return 0;
}

/* "0+2+5" (or a single "3") into bits; item indices 0..63; "" is none. */
static int parse_items(const char *v, uint64_t *out)
{
    if (!v)
        return BM_EINVAL;
    uint64_t m = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long i = strtoul(p, &end, 10);
        if (errno || end == p || i > 63 || (*end && *end != '+'))
            return BM_EINVAL;
        m |= 1ull << i;
        p = *end ? end + 1 : end;
    }
    *out = m;
    return 0;
}

static int parse_bool(const char *v, bool *out)
{
    if (!v || strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "on") == 0) {
        *out = true;
        return 0;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "off") == 0) {
        *out = false;
        return 0;
    }
    return BM_EINVAL;
}

/* Applies one word (key, optional value). Key may use '-' or '_'. */
static int apply_word(bs_behav_t *b, const char *key, const char *val, char *err, size_t el)
{
    char k[32];
    size_t n = strlen(key);
    if (n == 0 || n >= sizeof k) {
        snprintf(err, el, "unknown behaviour word \"%s\"", key);
        return BM_EINVAL;
    }
    for (size_t i = 0; i <= n; i++)
        k[i] = key[i] == '_' ? '-' : key[i];
    int64_t ms;
    int rc = 0;
#define MS_FIELD(NAME, FIELD, BIT, LO, HI)                                                         \
    if (strcmp(k, NAME) == 0) {                                                                    \
        if ((rc = parse_ms(val, LO, HI, &ms)) == 0) {                                              \
            b->FIELD = ms;                                                                         \
            b->set |= BIT;                                                                         \
            return 0;                                                                              \
        }                                                                                          \
        snprintf(err, el, "%s needs a number of milliseconds in [%lld, %lld], got \"%s\"", NAME,   \
                 (long long)(LO), (long long)(HI), val ? val : "");                                \
        return rc;                                                                                 \
    }
#define BOOL_FIELD(NAME, FIELD, BIT)                                                               \
    if (strcmp(k, NAME) == 0) {                                                                    \
        if ((rc = parse_bool(val, &b->FIELD)) == 0) {                                              \
            b->set |= BIT;                                                                         \
            return 0;                                                                              \
        }                                                                                          \
        snprintf(err, el, "%s takes no value or true/false, got \"%s\"", NAME, val);               \
        return rc;                                                                                 \
    }
#define PROB_FIELD(NAME, FIELD, BIT)                                                               \
    if (strcmp(k, NAME) == 0) {                                                                    \
        if ((rc = parse_prob(val, &b->FIELD)) == 0) {                                              \
            b->set |= BIT;                                                                         \
            return 0;                                                                              \
        }                                                                                          \
        snprintf(err, el, "%s needs a probability in [0, 1], got \"%s\"", NAME, val ? val : "");   \
        return rc;                                                                                 \
    }
    MS_FIELD("lag", lag_ms, BS_B_LAG, 0, 3600000)
    MS_FIELD("jitter", jitter_ms, BS_B_JITTER, 0, 3600000)
    MS_FIELD("slow", slow_ms, BS_B_SLOW, 0, 3600000)
    MS_FIELD("clock-skew", clock_skew_ms, BS_B_CLOCK_SKEW, -86400000, 86400000)
    MS_FIELD("payload-delay", payload_delay_ms, BS_B_PAYLOAD_DELAY, -1, 3600000)
    MS_FIELD("sse-first-event-late", sse_first_event_late_ms, BS_B_SSE_FIRST_EVENT_LATE, 0,
             86400000)
    PROB_FIELD("error-rate", error_rate, BS_B_ERROR_RATE)
    PROB_FIELD("throttle", throttle, BS_B_THROTTLE)
    MS_FIELD("prune", prune_slots, BS_B_PRUNE, 0, 100000000)
    MS_FIELD("retry-after", retry_after_s, BS_B_RETRY_AFTER, 0, 3600)
    PROB_FIELD("sse-drop", sse_drop, BS_B_SSE_DROP)
    BOOL_FIELD("down", down, BS_B_DOWN)
    BOOL_FIELD("hang", hang, BS_B_HANG)
    BOOL_FIELD("stale", stale, BS_B_STALE)
    BOOL_FIELD("fork", fork, BS_B_FORK)
    BOOL_FIELD("syncing", syncing, BS_B_SYNCING)
    BOOL_FIELD("optimistic", optimistic, BS_B_OPTIMISTIC)
    BOOL_FIELD("sse-fragment", sse_fragment, BS_B_SSE_FRAGMENT)
    BOOL_FIELD("gzip", gzip, BS_B_GZIP)
    BOOL_FIELD("no-ssz", no_ssz, BS_B_NO_SSZ)
    BOOL_FIELD("big-values", big_values, BS_B_BIG_VALUES)
    BOOL_FIELD("sse-head-with-event", sse_head_with_event, BS_B_SSE_HEAD_WITH_EVENT)
    BOOL_FIELD("bad-source", bad_source, BS_B_BAD_SOURCE)
    BOOL_FIELD("bad-target", bad_target, BS_B_BAD_TARGET)
#define ITEMS_FIELD(NAME, FIELD, BIT)                                                              \
    if (strcmp(k, NAME) == 0) {                                                                    \
        if ((rc = parse_items(val, &b->FIELD)) == 0) {                                             \
            b->set |= BIT;                                                                         \
            return 0;                                                                              \
        }                                                                                          \
        snprintf(err, el, "%s needs item indices 0..63 joined by '+', got \"%s\"", NAME,           \
                 val ? val : "");                                                                  \
        return rc;                                                                                 \
    }
    ITEMS_FIELD("fail-items", fail_items, BS_B_FAIL_ITEMS)
    ITEMS_FIELD("dup-items", dup_items, BS_B_DUP_ITEMS)
#undef ITEMS_FIELD
#undef MS_FIELD
#undef BOOL_FIELD
#undef PROB_FIELD
    if (strcmp(k, "client") == 0) {
        if (val && bs_client_parse(val, &b->client) == 0) {
            b->set |= BS_B_CLIENT;
            return 0;
        }
        snprintf(err, el,
                 "client needs one of lighthouse, prysm, teku, nimbus, lodestar, grandine, "
                 "caplin, got \"%s\"",
                 val ? val : "");
        return BM_EINVAL;
    }
    if (strcmp(k, "sse-style") == 0) {
        if (val && (strcmp(val, "lighthouse") == 0 || strcmp(val, "standard") == 0)) {
            b->sse_style = strcmp(val, "lighthouse") == 0 ? BS_SSE_LIGHTHOUSE : BS_SSE_STANDARD;
            b->set |= BS_B_SSE_STYLE;
            return 0;
        }
        snprintf(err, el, "sse-style needs lighthouse or standard, got \"%s\"", val ? val : "");
        return BM_EINVAL;
    }
    snprintf(err, el, "unknown behaviour word \"%s\"", key);
    return BM_EINVAL;
}

int bs_behav_parse(const char *spec, bs_behav_t *out, char *err, size_t errlen)
{
    bs_behav_default(out);
    if (err && errlen)
        err[0] = 0;
    if (!spec)
        return 0;
    size_t n = strlen(spec);
    char *copy = malloc(n + 1);
    if (!copy) {
        snprintf(err, errlen, "out of memory");
        return BM_ENOMEM;
    }
    memcpy(copy, spec, n + 1);
    int rc = 0;
    char *save = NULL;
    for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        while (*w == ' ')
            w++;
        char *e = w + strlen(w);
        while (e > w && e[-1] == ' ')
            *--e = 0;
        if (!*w)
            continue;
        char *eq = strchr(w, '=');
        if (eq)
            *eq = 0;
        if ((rc = apply_word(out, w, eq ? eq + 1 : NULL, err, errlen)) != 0)
            break;
    }
    free(copy);
    return rc;
}

int bs_behav_from_json(json_object *obj, bs_behav_t *out, bool *reset, char *err, size_t errlen)
{
    bs_behav_default(out);
    *reset = false;
    if (!obj || !json_object_is_type(obj, json_type_object)) {
        snprintf(err, errlen, "behaviour must be a JSON object");
        return BM_EINVAL;
    }
    json_object_object_foreach(obj, key, val)
    {
        char buf[64];
        const char *v = NULL;
        if (strcmp(key, "reset") == 0) {
            *reset = json_object_get_boolean(val);
            continue;
        }
        if (strcmp(key, "spec") == 0) {
            if (!json_object_is_type(val, json_type_string)) {
                snprintf(err, errlen, "spec must be a string of SPEC words");
                return BM_EINVAL;
            }
            bs_behav_t sub;
            int rc = bs_behav_parse(json_object_get_string(val), &sub, err, errlen);
            if (rc)
                return rc;
            bs_behav_merge(out, &sub);
            continue;
        }
        if (strcmp(key, "index") == 0 || strcmp(key, "url") == 0 || strcmp(key, "head") == 0 ||
            strcmp(key, "branch") == 0 || strcmp(key, "port") == 0)
            continue; /* read-only fields of GET answers may be echoed back */
        switch (json_object_get_type(val)) {
        case json_type_boolean:
            v = json_object_get_boolean(val) ? "true" : "false";
            break;
        case json_type_int:
            snprintf(buf, sizeof buf, "%lld", (long long)json_object_get_int64(val));
            v = buf;
            break;
        case json_type_double:
            snprintf(buf, sizeof buf, "%.17g", json_object_get_double(val));
            v = buf;
            break;
        case json_type_string:
            v = json_object_get_string(val);
            break;
        default:
            snprintf(err, errlen, "bad value for \"%s\"", key);
            return BM_EINVAL;
        }
        int rc = apply_word(out, key, v, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

void bs_behav_merge(bs_behav_t *dst, const bs_behav_t *src)
{
    uint32_t m = src->set;
#define M(BIT, F)                                                                                  \
    if (m & BIT)                                                                                   \
        dst->F = src->F;
    M(BS_B_LAG, lag_ms)
    M(BS_B_JITTER, jitter_ms)
    M(BS_B_DOWN, down)
    M(BS_B_HANG, hang)
    M(BS_B_ERROR_RATE, error_rate)
    M(BS_B_SLOW, slow_ms)
    M(BS_B_STALE, stale)
    M(BS_B_FORK, fork)
    M(BS_B_CLOCK_SKEW, clock_skew_ms)
    M(BS_B_SYNCING, syncing)
    M(BS_B_OPTIMISTIC, optimistic)
    M(BS_B_SSE_DROP, sse_drop)
    M(BS_B_CLIENT, client)
    M(BS_B_SSE_STYLE, sse_style)
    M(BS_B_SSE_FRAGMENT, sse_fragment)
    M(BS_B_GZIP, gzip)
    M(BS_B_NO_SSZ, no_ssz)
    M(BS_B_PAYLOAD_DELAY, payload_delay_ms)
    M(BS_B_BIG_VALUES, big_values)
    M(BS_B_PRUNE, prune_slots)
    M(BS_B_THROTTLE, throttle)
    M(BS_B_RETRY_AFTER, retry_after_s)
    M(BS_B_SSE_HEAD_WITH_EVENT, sse_head_with_event)
    M(BS_B_SSE_FIRST_EVENT_LATE, sse_first_event_late_ms)
    M(BS_B_BAD_SOURCE, bad_source)
    M(BS_B_BAD_TARGET, bad_target)
    M(BS_B_FAIL_ITEMS, fail_items)
    M(BS_B_DUP_ITEMS, dup_items)
#undef M
    dst->set |= m;
}

/* Item bits as the SPEC word's value: "0+2+5" ("" for none). */
static void items_text(uint64_t m, char *out, size_t cap)
{
    size_t k = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < 64 && k + 4 < cap; i++)
        if (m & (1ull << i))
            k += (size_t)snprintf(out + k, cap - k, "%s%u", k ? "+" : "", i);
}

void bs_behav_json(bm_str_t *s, const bs_behav_t *b)
{
    char fail[256], dup[256];
    items_text(b->fail_items, fail, sizeof fail);
    items_text(b->dup_items, dup, sizeof dup);
    bm_str_printf(s,
                  "{\"lag\":%u,\"jitter\":%u,\"down\":%s,\"hang\":%s,\"error_rate\":%g,"
                  "\"slow\":%u,\"stale\":%s,\"fork\":%s,\"clock_skew\":%lld,\"syncing\":%s,"
                  "\"optimistic\":%s,\"sse_drop\":%g,\"client\":\"%s\",\"sse_style\":\"%s\","
                  "\"sse_fragment\":%s,\"gzip\":%s,\"no_ssz\":%s,\"payload_delay\":%lld,"
                  "\"big_values\":%s,\"prune\":%lld,\"throttle\":%g,\"retry_after\":%lld,"
                  "\"sse_head_with_event\":%s,\"sse_first_event_late\":%u,"
                  "\"bad_source\":%s,\"bad_target\":%s,\"fail_items\":\"%s\","
                  "\"dup_items\":\"%s\"}",
                  b->lag_ms, b->jitter_ms, b->down ? "true" : "false", b->hang ? "true" : "false",
                  b->error_rate, b->slow_ms, b->stale ? "true" : "false",
                  b->fork ? "true" : "false", (long long)b->clock_skew_ms,
                  b->syncing ? "true" : "false", b->optimistic ? "true" : "false", b->sse_drop,
                  bs_client_name(b->client),
                  b->sse_style == BS_SSE_LIGHTHOUSE ? "lighthouse" : "standard",
                  b->sse_fragment ? "true" : "false", b->gzip ? "true" : "false",
                  b->no_ssz ? "true" : "false", (long long)b->payload_delay_ms,
                  b->big_values ? "true" : "false", (long long)b->prune_slots, b->throttle,
                  (long long)b->retry_after_s, b->sse_head_with_event ? "true" : "false",
                  b->sse_first_event_late_ms, b->bad_source ? "true" : "false",
                  b->bad_target ? "true" : "false", fail, dup);
}
