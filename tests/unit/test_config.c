/* SPDX-License-Identifier: MIT */
/*
 * test_config: the configuration module. What a user can write (YAML, flags, ${VAR}),
 * what they get (defaults, overrides), and what they are told when it is wrong: every
 * error names the key and, for the file, its line and column.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/config.h"
#include "app/config_keys.h"
#include "base/url.h"
#include "config_fx.h"
#include "base/defaults.h"
#include "base/err.h"
#include "read/rules.h"

/* ---- helpers ------------------------------------------------------------------------- */

static const char *test_env(void *ud, const char *name)
{
    static const char *const vars[][2] = {
        {"PASS", "s3cret"},
        {"KEY", "k-1"},
        {"NL", "a\nb"},
        {"CR", "a\rb"},
        {"EMPTY", ""},
        {"DOLLAR", "x$y"},
        {"PORT", "6000"},
        {"HOST", "node.example"},
        {"HASH", "p#ss: \"q\" \\x"},
    };
    (void)ud;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (strcmp(vars[i][0], name) == 0)
            return vars[i][1];
    return NULL;
}

static bm_config_t *parse(const char *yaml, bm_config_err_t *err)
{
    return bm_config_parse(yaml, strlen(yaml), "t.yaml", test_env, NULL, err);
}

/* Parses `yaml`, expects failure and an error message starting with `prefix`. */
static void expect_error(const char *yaml, const char *prefix)
{
    bm_config_err_t err;
    bm_config_t *cfg = parse(yaml, &err);
    if (cfg || strncmp(err.msg, prefix, strlen(prefix)) != 0) {
        print_error("yaml:\n%s\nexpected error starting with: %s\ngot: %s\n", yaml, prefix,
                    cfg ? "(success)" : err.msg);
        bm_config_free(cfg);
        fail();
    }
}

/* Parses `yaml`, expects success and a configuration that passes validation. */
static bm_config_t *expect_ok(const char *yaml)
{
    bm_config_err_t err;
    bm_config_t *cfg = parse(yaml, &err);
    if (!cfg) {
        print_error("yaml:\n%s\nunexpected error: %s\n", yaml, err.msg);
        fail();
    }
    if (bm_config_validate(cfg, &err) != 0) {
        print_error("yaml:\n%s\nunexpected validation error: %s\n", yaml, err.msg);
        bm_config_free(cfg);
        fail();
    }
    return cfg;
}

/* Parses and validates, expecting the validation (not the parse) to fail with `prefix`. */
static void expect_invalid(const char *yaml, const char *prefix)
{
    bm_config_err_t err;
    bm_config_t *cfg = parse(yaml, &err);
    if (!cfg) {
        print_error("yaml:\n%s\nunexpected parse error: %s\n", yaml, err.msg);
        fail();
    }
    int rc = bm_config_validate(cfg, &err);
    bm_config_free(cfg);
    if (rc != BM_EINVAL || strncmp(err.msg, prefix, strlen(prefix)) != 0) {
        print_error("yaml:\n%s\nexpected validation error: %s\ngot: %s\n", yaml, prefix,
                    rc ? err.msg : "(valid)");
        fail();
    }
}

/* The repository root, from this file's path (CMake compiles with absolute paths). */
static const char *source_dir(void)
{
    static char dir[4096];
    const char *env = getenv("BM_SOURCE_DIR");
    const char *suffix = "/tests/unit/test_config.c";
    size_t n = strlen(__FILE__), sn = strlen(suffix);
    if (env && env[0])
        return env;
    assert_true(n > sn && n - sn < sizeof dir && __FILE__[0] == '/');
    assert_string_equal(__FILE__ + n - sn, suffix);
    memcpy(dir, __FILE__, n - sn);
    dir[n - sn] = '\0';
    return dir;
}

static void test_minimal(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok("upstreams:\n  - url: http://127.0.0.1:5052\n");
    assert_int_equal(cfg->n_upstreams, 1);
    assert_string_equal(cfg->upstreams[0].id, "node1");
    assert_string_equal(cfg->upstreams[0].url, "http://127.0.0.1:5052");
    assert_int_equal(cfg->upstreams[0].n_headers, 0);
    assert_string_equal(cfg->listen_host, BM_DEFAULT_LISTEN_HOST);
    assert_int_equal(cfg->listen_port, BM_DEFAULT_LISTEN_PORT);
    assert_null(cfg->genesis_validators_root);
    assert_null(cfg->tls.ca_file);
    assert_null(cfg->path);
    assert_true(cfg->tls.verify);
    assert_int_equal(cfg->log.level, BM_LOG_INFO);
    assert_int_equal(cfg->log.format, BM_LOG_TEXT);
    assert_int_equal(cfg->server.max_body_bytes, 32u << 20);
    assert_int_equal(cfg->server.max_header_bytes, 16u << 10);
    assert_int_equal(cfg->server.max_target_bytes, 64u << 10);
    assert_int_equal(cfg->server.header_timeout_ms, 10000);
    assert_int_equal(cfg->server.body_timeout_ms, 30000);
    assert_int_equal(cfg->server.idle_timeout_ms, 120000);
    assert_int_equal(cfg->server.max_connections, 10000);
    assert_int_equal(cfg->server.shutdown_timeout_ms, 10000);
    assert_int_equal(cfg->timeouts.connect_ms, 1000);
    assert_int_equal(cfg->timeouts.read_ms, 2000);
    assert_int_equal(cfg->timeouts.write_ms, 12000);
    assert_int_equal(cfg->failover.max_attempts, BM_CONFIG_UNSET); /* deprecated: not given */
    assert_int_equal(bm_config_max_attempts(cfg), 3);
    assert_null(bm_config_deprecation(cfg));
    assert_int_equal(cfg->discovery.retry_interval_ms, 5000);
    assert_int_equal(cfg->health.max_head_lag, 1);
    assert_int_equal(cfg->health.head_quorum, 0);
    assert_int_equal(cfg->events.keepalive_ms, 15000);
    assert_int_equal(cfg->events.subscriber_max_pending, 1u << 20);
    assert_int_equal(cfg->events.dedup_window, 4096);
    assert_int_equal(cfg->events.headers_timeout_ms, BM_CONFIG_UNSET); /* two slots */
    assert_int_equal(cfg->duties.hold_floor_ms, 400);
    assert_int_equal(cfg->duties.max_hold_ms, 1000);
    assert_int_equal(cfg->duties.proposal_deadline_ms, 2000);
    assert_int_equal(cfg->duties.block_selection, BM_PRODUCE_FIRST);
    assert_int_equal(cfg->duties.best_value_grace_ms, 100);
    assert_int_equal(cfg->duties.write_timeout_ms, 12000);
    assert_int_equal(cfg->duties.duties_majority_after_ms, 1000);
    assert_int_equal(cfg->duties.aggregate_grace_ms, 100);
    bm_config_free(cfg);
}

static void test_full_values(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok(
        "listen: \"[::1]:6000\"\n"
        "genesisValidatorsRoot: "
        "0x4B363DB94E286120D76EB905340FDD4E54BFE9F06BF33FF6CF5AD27F511BFE95\n"
        "log: {level: debug, format: json}\n"
        "upstreams:\n"
        "  - id: a.b_c-1\n"
        "    url: https://user:${PASS}@host.example:5052/prefix/\n"
        "    headers:\n"
        "      X-Api-Key: ${KEY}\n"
        "      Authorization: \"Bearer x\"\n"
        "  - url: http://10.0.0.2:5052\n"
        "server: {maxBodyBytes: 1GiB, maxHeaderBytes: 8192, idleTimeout: 1m, maxConnections: 5}\n"
        "timeouts: {connect: 250ms, read: 3s, write: 1h}\n"
        "failover: {maxAttempts: 16}\n"
        "tls: {verify: false}\n"
        "health: {maxHeadLag: 0, headQuorum: 2}\n"
        "duties: {holdFloor: 0, blockSelection: best-value, aggregateGrace: 0ms}\n");
    assert_string_equal(cfg->listen_host, "::1");
    assert_int_equal(cfg->listen_port, 6000);
    assert_string_equal(cfg->genesis_validators_root,
                        "0x4b363db94e286120d76eb905340fdd4e54bfe9f06bf33ff6cf5ad27f511bfe95");
    assert_int_equal(cfg->log.level, BM_LOG_DEBUG);
    assert_int_equal(cfg->log.format, BM_LOG_JSON);
    assert_int_equal(cfg->n_upstreams, 2);
    assert_string_equal(cfg->upstreams[0].id, "a.b_c-1");
    assert_string_equal(cfg->upstreams[0].url, "https://user:s3cret@host.example:5052/prefix/");
    assert_int_equal(cfg->upstreams[0].n_headers, 2);
    assert_string_equal(cfg->upstreams[0].headers[0].name, "X-Api-Key");
    assert_string_equal(cfg->upstreams[0].headers[0].value, "k-1");
    assert_string_equal(cfg->upstreams[0].headers[1].name, "Authorization");
    assert_string_equal(cfg->upstreams[0].headers[1].value, "Bearer x");
    assert_string_equal(cfg->upstreams[1].id, "node2");
    assert_int_equal(cfg->upstreams[1].n_headers, 0);
    assert_int_equal(cfg->server.max_body_bytes, 1u << 30);
    assert_int_equal(cfg->server.max_header_bytes, 8192);
    assert_int_equal(cfg->server.idle_timeout_ms, 60000);
    assert_int_equal(cfg->server.max_connections, 5);
    assert_int_equal(cfg->server.header_timeout_ms, 10000); /* untouched key: default */
    assert_int_equal(cfg->timeouts.connect_ms, 250);
    assert_int_equal(cfg->timeouts.read_ms, 3000);
    assert_int_equal(cfg->timeouts.write_ms, 3600000);
    assert_int_equal(cfg->failover.max_attempts, 16);
    assert_false(cfg->tls.verify);
    assert_int_equal(cfg->health.max_head_lag, 0);
    assert_int_equal(cfg->health.head_quorum, 2);
    assert_int_equal(cfg->duties.hold_floor_ms, 0);
    assert_int_equal(cfg->duties.block_selection, BM_PRODUCE_BEST_VALUE);
    assert_int_equal(cfg->duties.aggregate_grace_ms, 0);
    bm_config_free(cfg);
}

/* Parses `yaml`, expects failure with `needle` somewhere in the message. */
static void expect_error_with(const char *yaml, const char *needle)
{
    bm_config_err_t err;
    bm_config_t *cfg = parse(yaml, &err);
    if (cfg || !strstr(err.msg, needle)) {
        print_error("yaml:\n%s\nexpected an error with: %s\ngot: %s\n", yaml, needle,
                    cfg ? "(success)" : err.msg);
        bm_config_free(cfg);
        fail();
    }
}

static void test_state_keys(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok("upstreams: [{url: \"http://a:1\"}]\n");
    assert_int_equal(cfg->state.driver, BM_STATE_LOCAL);
    assert_null(cfg->state.redis.url);
    assert_int_equal(cfg->state.redis.timeout_ms, 50);
    bm_config_free(cfg);

    cfg = expect_ok("upstreams: [{url: \"http://a:1\"}]\n"
                    "state:\n  driver: redis\n  redis:\n"
                    "    url: \"redis://u:pw0@10.0.0.1:6380/2\"\n"
                    "    password: \"${HOST}\"\n    prefix: \"bm-a:\"\n    timeout: 20ms\n");
    assert_int_equal(cfg->state.driver, BM_STATE_REDIS);
    assert_string_equal(cfg->state.redis.url, "redis://u:pw0@10.0.0.1:6380/2");
    assert_string_equal(cfg->state.redis.password, "node.example");
    assert_string_equal(cfg->state.redis.prefix, "bm-a:");
    assert_int_equal(cfg->state.redis.timeout_ms, 20);
    bm_str_t dump = BM_STR_INIT;
    assert_int_equal(bm_config_dump(cfg, true, &dump), 0);
    bm_str_putc(&dump, '\0');
    assert_non_null(strstr(dump.b->data, "driver: redis"));
    assert_null(strstr(dump.b->data, "pw0"));          /* the URL's password, masked */
    assert_null(strstr(dump.b->data, "node.example")); /* the secret */
    bm_str_dispose(&dump);
    bm_config_free(cfg);

    expect_error_with("state: {redis: {url: \"rediss://h:1\"}}\n", "TLS");
    expect_error_with("state: {redis: {url: \"http://h:1\"}}\n", "redis://");
    expect_error_with("state: {redis: {url: \"redis://h:99999\"}}\n", "port");
    expect_error_with("state: {driver: memcached}\n", "state driver");
    expect_error_with("state: {redis: {prefix: \"a b\"}}\n", "spaces");
    expect_error_with("state: {redis: {timeout: 20s}}\n", "timeout");
    bm_config_err_t err;
    cfg = parse("upstreams: [{url: \"http://a:1\"}]\nstate: {driver: redis}\n", &err);
    assert_non_null(cfg);
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_non_null(strstr(err.msg, "state.redis.url"));
    bm_config_free(cfg);
}

static void test_example_file(void **state)
{
    (void)state;
    char path[4200];
    bm_config_err_t err;
    snprintf(path, sizeof path, "%s/beaconmux.example.yaml", source_dir());
    setenv("BEACON_API_KEY", "example-key", 1);
    setenv("BEACONMUX_KEY", "example-secret", 1);
    setenv("REDIS_PASSWORD", "example-redis-password", 1);
    bm_config_t *cfg = bm_config_read(path, &err);
    if (!cfg || bm_config_validate(cfg, &err) != 0)
        print_error("%s\n", err.msg);
    assert_non_null(cfg);
    assert_int_equal(bm_config_validate(cfg, &err), 0);
    assert_string_equal(cfg->path, path);
    assert_int_equal(cfg->n_upstreams, 4);
    assert_string_equal(cfg->upstreams[0].id, "lighthouse-1");
    assert_true(cfg->upstreams[3].shadow && !cfg->upstreams[2].shadow);
    assert_string_equal(cfg->upstreams[2].id, "hosted");
    assert_int_equal(cfg->upstreams[2].n_headers, 1);
    assert_string_equal(cfg->upstreams[2].headers[0].value, "example-key");

    /* Every value the example shows is the default it claims (blockedPaths: the default
     * list); the other lists are examples. */
    assert_int_equal(cfg->n_route_rules, 1);
    assert_int_equal(cfg->route_rules[0].consensus.agree, 2);
    assert_true(cfg->upstreams[2].archive && cfg->upstreams[2].auto_tune.max == 50);
    bm_config_t *def = bm_config_new();
    assert_non_null(def);
    def->upstreams = cfg->upstreams;
    def->n_upstreams = cfg->n_upstreams;
    def->client_routes = cfg->client_routes;
    def->n_client_routes = cfg->n_client_routes;
    def->route_rules = cfg->route_rules;
    def->n_route_rules = cfg->n_route_rules;
    def->auth = cfg->auth; /* the example key */
    assert_int_equal(cfg->auth.n_keys, 1);
    assert_string_equal(cfg->auth.keys[0].secret, "example-secret");
    /* the example Redis (its driver stays local, the default) */
    assert_string_equal(cfg->state.redis.url, "redis://127.0.0.1:6379/0");
    assert_string_equal(cfg->state.redis.password, "example-redis-password");
    assert_string_equal(cfg->state.redis.prefix, "beaconmux:");
    def->state.redis.url = cfg->state.redis.url;
    def->state.redis.password = cfg->state.redis.password;
    def->state.redis.prefix = cfg->state.redis.prefix;
    assert_same_config(cfg, def);
    memset(&def->auth, 0, sizeof def->auth);
    def->state.redis.url = def->state.redis.password = def->state.redis.prefix = NULL;
    def->upstreams = NULL;
    def->n_upstreams = 0;
    def->client_routes = NULL;
    def->n_client_routes = 0;
    def->route_rules = NULL;
    def->n_route_rules = 0;

    bm_config_free(def);
    bm_config_free(cfg);
    unsetenv("BEACON_API_KEY");
}

/* ---- the documentation describes every key, and nothing else ------------------------- */

typedef struct keyset {
    char path[320][96];
    bm_config_key_shape_t shape[320];
    size_t n;
} keyset_t;

static void add_key(void *ud, const char *path, bm_config_key_shape_t shape)
{
    keyset_t *ks = ud;
    assert_true(ks->n < 320);
    assert_true(strlen(path) < sizeof ks->path[0]);
    strcpy(ks->path[ks->n], path);
    ks->shape[ks->n++] = shape;
}

static long find_key(const keyset_t *ks, const char *path)
{
    for (size_t i = 0; i < ks->n; i++)
        if (strcmp(ks->path[i], path) == 0)
            return (long)i;
    return -1;
}

static char *read_source(const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", source_dir(), name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *text = calloc(1, 1 << 17);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 17) - 1, f);
    fclose(f);
    assert_true(n < (1 << 17) - 1);
    return text;
}

/*
 * The keys written in a block-style YAML text, as paths ("server.maxBodyBytes",
 * "upstreams[].url"), from the indentation; names under a free-form map are not keys.
 */
static void yaml_keys(const char *text, const keyset_t *table, keyset_t *out)
{
    struct {
        size_t col;
        char path[96];
    } stack[16];
    size_t depth = 0;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        size_t col = strspn(line, " ");
        char key[64];
        int klen = 0;
        bool item = col + 1 < len && line[col] == '-' && line[col + 1] == ' ';
        size_t kc = item ? col + 2 : col;
        if (kc < len && sscanf(line + kc, "%63[A-Za-z0-9]%n", key, &klen) == 1 &&
            line[kc + (size_t)klen] == ':') {
            if (item) { /* a new list entry: its keys sit under "<list>[]" */
                while (depth && stack[depth - 1].col >= col)
                    depth--;
                assert_true(depth > 0 && depth < 16);
                stack[depth].col = col;
                char entry[96];
                snprintf(entry, sizeof entry, "%s[]", stack[depth - 1].path);
                strcpy(stack[depth].path, entry);
                depth++;
            }
            while (depth && stack[depth - 1].col >= kc)
                depth--;
            const char *parent = depth ? stack[depth - 1].path : "";
            long p = find_key(table, parent);
            if (!(p >= 0 && table->shape[p] == BM_CONFIG_KEY_MAP)) {
                assert_true(depth < 16);
                stack[depth].col = kc;
                char path[96];
                snprintf(path, sizeof path, "%s%s%s", parent, parent[0] ? "." : "", key);
                strcpy(stack[depth].path, path);
                add_key(out, stack[depth].path, BM_CONFIG_KEY_VALUE);
                depth++;
            }
        }
        line += len + (eol ? 1 : 0);
    }
}

/* The keys named in the first column of the table under "## Keys". */
static void markdown_keys(const char *text, keyset_t *out)
{
    const char *s = strstr(text, "\n## Keys\n");
    assert_non_null(s);
    const char *end = strstr(s + 1, "\n## ");
    assert_non_null(end);
    for (const char *line = strstr(s, "\n| `"); line && line < end;
         line = strstr(line + 1, "\n| `")) {
        const char *cell_end = strchr(line + 3, '|');
        assert_non_null(cell_end);
        for (const char *b = strchr(line + 1, '`'); b && b < cell_end; b = strchr(b + 1, '`')) {
            const char *e = strchr(b + 1, '`');
            assert_true(e && e < cell_end);
            char path[96];
            snprintf(path, sizeof path, "%.*s", (int)(e - b - 1), b + 1);
            add_key(out, path, BM_CONFIG_KEY_VALUE);
            b = e;
        }
    }
}

/* Every key of `table` (sections too, unless `skip_sections`) is in `doc`, and every key
 * in `doc` is one of `table`'s. */
static void assert_documented(const char *doc_name, const keyset_t *table, const keyset_t *doc,
                              bool skip_sections)
{
    size_t bad = 0;
    for (size_t i = 0; i < doc->n; i++) {
        long k = find_key(table, doc->path[i]);
        if (k < 0 || (skip_sections && table->shape[k] == BM_CONFIG_KEY_SECTION)) {
            print_error("%s: \"%s\" is not a key\n", doc_name, doc->path[i]);
            bad++;
        }
    }
    for (size_t i = 0; i < table->n; i++) {
        if (skip_sections && table->shape[i] == BM_CONFIG_KEY_SECTION)
            continue;
        if (find_key(doc, table->path[i]) < 0) {
            print_error("%s: key \"%s\" is not described\n", doc_name, table->path[i]);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static void test_documented_keys(void **state)
{
    (void)state;
    static keyset_t table, example, markdown;
    memset(&table, 0, sizeof table);
    memset(&example, 0, sizeof example);
    memset(&markdown, 0, sizeof markdown);
    bm_config_keys(add_key, &table);
    /* the walk of the table itself: nested sections, lists and their entries' keys */
    assert_true(find_key(&table, "server.maxBodyBytes") >= 0);
    assert_int_equal(table.shape[find_key(&table, "upstreams")], BM_CONFIG_KEY_LIST);
    assert_int_equal(table.shape[find_key(&table, "upstreams[].headers")], BM_CONFIG_KEY_MAP);
    assert_int_equal(table.shape[find_key(&table, "duties.headRoot")], BM_CONFIG_KEY_SECTION);
    assert_true(find_key(&table, "duties.syncCommitteeContribution.maxHold") >= 0);

    char *yaml = read_source("beaconmux.example.yaml");
    yaml_keys(yaml, &table, &example);
    assert_documented("beaconmux.example.yaml", &table, &example, false);
    char *md = read_source("docs/configuration.md");
    markdown_keys(md, &markdown);
    assert_documented("docs/configuration.md", &table, &markdown, true);

    /* and the check can fail: a key the table lacks, a key the text lacks */
    keyset_t *extra = calloc(1, sizeof *extra);
    assert_non_null(extra);
    yaml_keys("server:\n  maxBodyBytes: 1\n  bogus: 2\nupstreams:\n  - id: a\n    url: b\n"
              "    headers:\n      Free: x\n",
              &table, extra);
    assert_int_equal(extra->n, 7); /* "Free" is a header name, not a key */
    assert_string_equal(extra->path[2], "server.bogus");
    assert_string_equal(extra->path[6], "upstreams[].headers");
    assert_true(find_key(&table, extra->path[2]) < 0);
    free(extra);
    free(md);
    free(yaml);
}

static void test_unknown_keys(void **state)
{
    (void)state;
    expect_error("listen: \"127.0.0.1:1\"\nupstrem: 3\n",
                 "t.yaml:2:1: unknown key \"upstrem\" at the top level (expected one of: listen, "
                 "genesisValidatorsRoot, log, upstreams, server,");
    expect_error("server:\n  maxBodyBytes: 1MiB\n  idleTimout: 5s\n",
                 "t.yaml:3:3: unknown key \"idleTimout\" in \"server\" (expected one of: "
                 "maxBodyBytes,");
    expect_error("upstreams:\n  - url: http://a:1\n  - url: http://b:2\n    upstrem: x\n",
                 "t.yaml:4:5: unknown key \"upstrem\" in \"upstreams[1]\" (expected one of: id, "
                 "url, headers, priority, weight, archive, shadow, autoTune, maxConnections, "
                 "forwardedFor, secretPath)");
    expect_error("upstreams: [{url: \"http://a\", bogus: 1}]\n",
                 "t.yaml:1:31: unknown key \"bogus\" in \"upstreams[0]\"");
    expect_error("duties:\n    holdfloor: 1s\n",
                 "t.yaml:2:5: unknown key \"holdfloor\" in \"duties\"");
    /* Keys are case-sensitive, as documented. */
    expect_error("Listen: \"127.0.0.1:1\"\n",
                 "t.yaml:1:1: unknown key \"Listen\" at the top level");
}

static void test_shapes(void **state)
{
    (void)state;
    expect_error("a\n", "t.yaml:1:1: the configuration must be a mapping of keys");
    expect_error("- a\n", "t.yaml:1:1: the configuration must be a mapping of keys");
    expect_error("server: 5\n",
                 "t.yaml:1:9: \"server\" must be a mapping of keys, not a single value");
    expect_error("upstreams: {url: x}\n",
                 "t.yaml:1:12: \"upstreams\" must be a list, not a mapping");
    expect_error("listen: [1]\n", "t.yaml:1:9: \"listen\" must be a single value, not a list");
    expect_error("upstreams:\n  - ~\n", "t.yaml:2:5: \"upstreams[0]\" must be a mapping");
    expect_error("upstreams:\n  - url: http://a\n    headers: [x]\n",
                 "t.yaml:3:14: \"upstreams[0].headers\" must be a mapping of header names");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X: {a: b}\n",
                 "t.yaml:4:10: header \"X\" in \"upstreams[0].headers\" must have a single value");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X:\n",
                 "t.yaml:4:9: header \"X\" in \"upstreams[0].headers\" has no value");
    expect_error("server:\n  idleTimeout: 5s\n  idleTimeout: 6s\n",
                 "t.yaml:3:3: duplicate key \"idleTimeout\" in server");
    expect_error("? [a]\n: b\n", "t.yaml:1:3: keys in the top level must be plain names");
    expect_error("listen: &a \"127.0.0.1:1\"\nlog: *a\n",
                 "t.yaml:2:6: YAML aliases (*name) are not supported");
    expect_error("listen: \"127.0.0.1:1\"\n---\nlisten: \"127.0.0.1:2\"\n",
                 "t.yaml:2:1: only one YAML document is allowed");
    expect_error("server:\n  idleTimeout: 1s\n bad\n",
                 "t.yaml:3:2: YAML syntax error: did not find expected key (while parsing a block "
                 "mapping)");
    expect_error("listen: \"127.0.0.1:1\n", "t.yaml:2:1: YAML syntax error: found unexpected end");
    expect_error("server:\n\tidleTimeout: 1s\n",
                 "t.yaml:2:1: YAML syntax error: found character that cannot start any token "
                 "(while scanning for the next token); YAML does not allow tabs for indentation");
    expect_error("listen: \"\\x00\"\n", "t.yaml:1:9: values and keys must not contain NUL");
    expect_error("listen: \"a\xff\"\n", "t.yaml:1:11: YAML error: invalid leading UTF-8 octet");

    /* Null sections, lists and leaves count as absent; an empty document is all defaults. */
    const char *nulls[] = {"",
                           "# only a comment\n",
                           "---\n",
                           "~\n",
                           "server:\nlog: ~\nupstreams:\ntls: null\nlisten:\n",
                           "server: {}\nupstreams: []\nlisten: ~\ngenesisValidatorsRoot: \"\"\n"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++) {
        bm_config_err_t err;
        bm_config_t *cfg = parse(nulls[i], &err);
        if (!cfg)
            print_error("%s -> %s\n", nulls[i], err.msg);
        assert_non_null(cfg);
        bm_config_t *def = bm_config_new();
        assert_same_config(cfg, def);
        bm_config_free(def);
        bm_config_free(cfg);
    }
    /* A quoted empty string is a value, not a null. */
    expect_error("listen: \"\"\n", "t.yaml:1:9: listen: invalid address \"\"");
}

static void test_env_values(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok("upstreams:\n"
                                 "  - url: \"http://u:${PASS}@${HOST}:${PORT}/a$$b$c${EMPTY}\"\n"
                                 "    headers:\n"
                                 "      X-K: \"pre ${DOLLAR} ${HASH} $\"\n"
                                 "server:\n"
                                 "  maxConnections: ${PORT}\n");
    assert_string_equal(cfg->upstreams[0].url, "http://u:s3cret@node.example:6000/a$b$c");
    /* A substituted value is data, never YAML: quotes, '#' and ": " arrive unchanged. */
    assert_string_equal(cfg->upstreams[0].headers[0].value, "pre x$y p#ss: \"q\" \\x $");
    assert_int_equal(cfg->server.max_connections, 6000);
    bm_config_free(cfg);

    /* The error names the variable and points at its "${" (line and column). */
    expect_error("upstreams:\n  - url: \"http://a:${PASS}@b/${NOPE}\"\n",
                 "t.yaml:2:30: upstreams[0].url: environment variable \"NOPE\" is not set");
    expect_error("upstreams:\n  - url: http://a/$${NOPE}/${UNSET}\n",
                 "t.yaml:2:28: upstreams[0].url: environment variable \"UNSET\" is not set");
    expect_error("server:\n  maxConnections: ${NL}\n",
                 "t.yaml:2:19: server.maxConnections: environment variable \"NL\" contains a line "
                 "break");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X-K: \"v ${CR}\"\n",
                 "t.yaml:4:15: upstreams[0].headers: environment variable \"CR\" contains a line "
                 "break");
    expect_error("listen: \"${PORT\"\n",
                 "t.yaml:1:10: listen: unterminated \"${\" (write \"$$\" for a literal '$')");
    expect_error("listen: \"${1X}\"\n",
                 "t.yaml:1:10: listen: invalid variable name \"1X\" in \"${...}\"");
    expect_error("listen: \"${}\"\n",
                 "t.yaml:1:10: listen: invalid variable name \"\" in \"${...}\"");
    /* "$$" is one literal '$' (here in an id, which then fails the id pattern). */
    expect_error("upstreams:\n  - id: n$$1x\n    url: http://a\n",
                 "t.yaml:2:9: upstreams[0]: id \"n$1x\" may only contain");
    /* A ${VAR} in a comment is not substituted. */
    cfg = expect_ok("# use ${NOT_SET_ANYWHERE} here\nupstreams: [{url: \"http://a\"}] # ${X}\n");
    bm_config_free(cfg);

    /* bm_config_read reads the process environment. */
    char *path = write_tmp("upstreams:\n  - url: \"http://x:${BM_TEST_SECRET}@h\"\n");
    bm_config_err_t err;
    unsetenv("BM_TEST_SECRET");
    assert_null(bm_config_read(path, &err));
    char want[256];
    snprintf(want, sizeof want,
             "%s:2:20: upstreams[0].url: environment variable \"BM_TEST_SECRET\" is not set", path);
    assert_string_equal(err.msg, want);
    setenv("BM_TEST_SECRET", "pw", 1);
    cfg = bm_config_read(path, &err);
    assert_non_null(cfg);
    assert_string_equal(cfg->path, path);
    assert_string_equal(cfg->upstreams[0].url, "http://x:pw@h");
    bm_config_free(cfg);
    unsetenv("BM_TEST_SECRET");
    unlink(path);
    free(path);
}

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint32_t ms;
    } good[] = {{"0", 0},          {"400", 400},           {"400ms", 400},
                {"2s", 2000},      {"1m", 60000},          {"1h", 3600000},
                {"24h", 86400000}, {"86400000", 86400000}, {"1440m", 86400000},
                {"007s", 7000}};
    static const char *const bad[] = {"",      "ms",       "1.5s", "-1",  "+1",
                                      "2 s",   " 2s",      "2S",   "1d",  "25h",
                                      "1441m", "86400001", "0x10", "1e3", "99999999999999999999999",
                                      "2sec",  "2ms2"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint32_t ms = 12345;
        assert_int_equal(bm_config_parse_duration(good[i].s, &ms), 0);
        assert_int_equal(ms, good[i].ms);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t ms = 12345;
        if (bm_config_parse_duration(bad[i], &ms) != BM_EINVAL)
            print_error("accepted \"%s\"\n", bad[i]);
        assert_int_equal(bm_config_parse_duration(bad[i], &ms), BM_EINVAL);
        assert_int_equal(ms, 12345);
    }
    expect_error(
        "server:\n  headerTimeout: 10x\n",
        "t.yaml:2:18: server.headerTimeout: invalid duration \"10x\" (use milliseconds, or "
        "a whole number with ms, s, m or h; at most 24h)");
    expect_error("server:\n  idleTimeout: 500ms\n",
                 "t.yaml:2:16: server.idleTimeout: must be between 1s and 24h (got 500ms)");
    expect_error("timeouts: {connect: 0}\n",
                 "t.yaml:1:21: timeouts.connect: must be between 1ms and 24h (got 0ms)");
    expect_error("discovery:\n  retryInterval: 50ms\n",
                 "t.yaml:2:18: discovery.retryInterval: must be between 100ms and 24h (got 50ms)");
}

static void test_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {
        {"0", 0},           {"1024", 1024},       {"16KiB", 16384},        {"32MiB", 32u << 20},
        {"1GiB", 1u << 30}, {"1TiB", 1ull << 40}, {"1048576KiB", 1u << 30}};
    static const char *const bad[] = {
        "",     "KiB",   "1KB", "1k",   "1kib",  "1.5MiB",        "-1",
        "2TiB", "1 KiB", "1B",  "0x10", "1MiB ", "1099511627777", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        assert_int_equal(bm_config_parse_size(good[i].s, &v), 0);
        assert_true(v == good[i].v);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        if (bm_config_parse_size(bad[i], &v) != BM_EINVAL)
            print_error("accepted \"%s\"\n", bad[i]);
        assert_int_equal(bm_config_parse_size(bad[i], &v), BM_EINVAL);
        assert_true(v == 12345);
    }
    expect_error("server:\n  maxBodyBytes: 32MB\n",
                 "t.yaml:2:17: server.maxBodyBytes: invalid size \"32MB\" (use bytes, or a whole "
                 "number with KiB, MiB, GiB or TiB; at most 1TiB)");
    expect_error("server:\n  maxHeaderBytes: 512\n",
                 "t.yaml:2:19: server.maxHeaderBytes: must be between 1KiB and 1MiB (got 512)");
    expect_error("events:\n  subscriberMaxPending: 5GiB\n",
                 "t.yaml:2:25: events.subscriberMaxPending: must be between 1KiB and 4GiB (got "
                 "5GiB)");
}

static void test_other_values(void **state)
{
    (void)state;
    /* an http:// node's pool: 1 to 10000, 64 when not given */
    expect_error("upstreams: [{url: \"http://a:1\", maxConnections: 0}]\n",
                 "t.yaml:1:49: upstreams[0].maxConnections: must be between 1 and 10000 (got 0)");
    bm_config_t *pool = expect_ok("upstreams:\n  - url: http://a:1\n    maxConnections: 8\n"
                                  "  - url: http://b:2\n");
    assert_int_equal(pool->upstreams[0].max_connections, 8);
    assert_int_equal(pool->upstreams[1].max_connections, 64);
    bm_config_free(pool);
    expect_error("failover: {maxAttempts: 17}\n",
                 "t.yaml:1:25: failover.maxAttempts: must be between 1 and 16 (got 17)");
    expect_error("failover: {maxAttempts: 0}\n",
                 "t.yaml:1:25: failover.maxAttempts: must be between 1 and 16 (got 0)");
    expect_error("failover: {maxAttempts: -1}\n",
                 "t.yaml:1:25: failover.maxAttempts: invalid number \"-1\" (use a whole number)");
    expect_error("health: {headQuorum: 65}\n",
                 "t.yaml:1:22: health.headQuorum: must be between 0 and 64 (got 65)");
    expect_error("tls: {verify: yes}\n",
                 "t.yaml:1:15: tls.verify: invalid boolean \"yes\" (use true or false)");
    expect_error("log: {level: verbose}\n",
                 "t.yaml:1:14: log.level: invalid log level \"verbose\" (use debug, info, warn, "
                 "error or off)");
    expect_error("log: {format: xml}\n",
                 "t.yaml:1:15: log.format: invalid log format \"xml\" (use text or json)");
    expect_error("duties: {blockSelection: best}\n",
                 "t.yaml:1:26: duties.blockSelection: invalid block selection \"best\" (use first "
                 "or best-value)");
    expect_error("genesisValidatorsRoot: 0x1234\n",
                 "t.yaml:1:24: genesisValidatorsRoot: invalid root \"0x1234\" (use 0x followed by "
                 "64 hex digits)");
    expect_error("genesisValidatorsRoot: "
                 "4b363db94e286120d76eb905340fdd4e54bfe9f06bf33ff6cf5ad27f511bfe9500\n",
                 "t.yaml:1:24: genesisValidatorsRoot: invalid root");
    expect_error("tls:\n  caFile: /nonexistent/ca.pem\n",
                 "t.yaml:2:11: tls.caFile: cannot read \"/nonexistent/ca.pem\": No such file or "
                 "directory");
    expect_error("tls:\n  caFile: /tmp\n",
                 "t.yaml:2:11: tls.caFile: \"/tmp\" is not a regular file");

    /* Listen addresses. */
    static const struct {
        const char *s, *host;
        uint16_t port;
    } good[] = {{"127.0.0.1:5555", "127.0.0.1", 5555},
                {"[::1]:80", "::1", 80},
                {"0.0.0.0:0", "0.0.0.0", 0},
                {"localhost:65535", "localhost", 65535},
                {"[::]:1", "::", 1}};
    static const char *const bad[] = {
        "127.0.0.1",     "127.0.0.1:",   ":5555",          "::1:5555",        "[::1]5555",
        "[::1]:",        "host:5555",    "1.2.3:5",        "127.0.0.1:65536", "127.0.0.1:-1",
        "[127.0.0.1]:1", "127.0.0.1:+1", "127.0.0.1:5555 "};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char host[64];
        uint16_t port = 1;
        assert_int_equal(bm_config_parse_listen(good[i].s, host, sizeof host, &port), 0);
        assert_string_equal(host, good[i].host);
        assert_int_equal(port, good[i].port);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char host[64];
        uint16_t port;
        if (bm_config_parse_listen(bad[i], host, sizeof host, &port) == 0)
            print_error("accepted \"%s\"\n", bad[i]);
        assert_int_equal(bm_config_parse_listen(bad[i], host, sizeof host, &port), BM_EINVAL);
    }
    expect_error("listen: example.com:80\n",
                 "t.yaml:1:9: listen: invalid address \"example.com:80\" (use HOST:PORT");
}

static void test_upstream_ids(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok("upstreams:\n"
                                 "  - url: http://a\n"
                                 "  - id: teku\n"
                                 "    url: http://b\n"
                                 "  - url: http://c\n"
                                 "  - id: ~\n"
                                 "    url: http://d\n");
    assert_int_equal(cfg->n_upstreams, 4);
    assert_string_equal(cfg->upstreams[0].id, "node1");
    assert_string_equal(cfg->upstreams[1].id, "teku");
    assert_string_equal(cfg->upstreams[2].id, "node3");
    assert_string_equal(cfg->upstreams[3].id, "node4");
    bm_config_free(cfg);

    expect_error("upstreams:\n  - id: -bad\n    url: http://a\n",
                 "t.yaml:2:9: upstreams[0]: id \"-bad\" must start with a letter or a digit");
    expect_error("upstreams:\n  - id: \"a b\"\n    url: http://a\n",
                 "t.yaml:2:9: upstreams[0]: id \"a b\" may only contain letters, digits");
    expect_error("upstreams:\n  - id: \"\"\n    url: http://a\n",
                 "t.yaml:2:9: upstreams[0]: id \"\" must be 1 to 64 characters");
    expect_error("upstreams:\n  - id: n\xc3\xa9\n    url: http://a\n",
                 "t.yaml:2:9: upstreams[0]: id \"n\\xc3\\xa9\" may only contain");
    expect_error("upstreams:\n"
                 "  - {id: a, url: \"http://a\"}\n"
                 "  - {id: b, url: \"http://b\"}\n"
                 "  - {id: a, url: \"http://c\"}\n",
                 "t.yaml:4:10: upstreams[2]: id \"a\" is already used by upstreams[0]");
    expect_error("upstreams:\n"
                 "  - {id: node2, url: \"http://a\"}\n"
                 "  - {url: \"http://b\"}\n",
                 "t.yaml:3:5: upstreams[1]: id \"node2\" is already used by upstreams[0] (ids "
                 "default to node1, node2, ...)");
    expect_error("upstreams:\n  - id: x\n", "t.yaml:2:5: upstreams[0]: missing key \"url\"");
    expect_error("upstreams:\n  - url: ~\n", "t.yaml:2:5: upstreams[0]: missing key \"url\"");

    /* Too many upstreams. */
    char big[8192];
    size_t o = (size_t)snprintf(big, sizeof big, "upstreams:\n");
    for (int i = 0; i < BM_CONFIG_MAX_UPSTREAMS + 1; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "  - url: http://h%d\n", i);
    expect_error(big, "t.yaml:66:5: \"upstreams\" has more than 64 entries");
}

static void test_upstream_urls(void **state)
{
    (void)state;
    static const char *const good[] = {
        "http://a",          "https://a.b-c_d:1/x/y/", "HTTP://127.0.0.1:5052",
        "http://[::1]:5052", "https://u:p@h/p",        "http://u@h",
        "http://u:p:q@h",    "http://%41@h",           "http://h/a..b/.x/%2e%2e%2e/%41"};
    static const struct {
        const char *url, *why;
    } bad[] = {{"ftp://a", "must start with http:// or https://"},
               {"a:5052", "must start with http:// or https://"},
               {"http://", "has no host"},
               {"http://:80", "has no host"},
               {"http://a b", "must not contain spaces or control characters"},
               {"http://h?x=1", "must not contain a query or a fragment"},
               {"http://h/#f", "must not contain a query or a fragment"},
               {"http://h:99999", "has a malformed port (1-65535)"},
               {"http://h:0", "has a malformed port (1-65535)"},
               {"http://h:", "has a malformed port (1-65535)"},
               {"http://h:8x", "has a malformed port (1-65535)"},
               {"http://[::1", "has a malformed IPv6 address"},
               {"http://[zz]:1", "has a malformed IPv6 address"},
               {"http://[::1]x", "has a malformed host"},
               {"http://h%2f/", "has a malformed host"},
               /* what bm_url_valid refuses, said here (docs/upstream.md): a path that climbs
                * out of itself, a byte a node would read otherwise, a broken escape */
               {"http://h/../x", "has a dot segment (\".\" or \"..\") in its path"},
               {"http://h/%2E%2E", "has a dot segment (\".\" or \"..\") in its path"},
               {"http://h/a/.%2e/b", "has a dot segment (\".\" or \"..\") in its path"},
               {"http://h/p/./", "has a dot segment (\".\" or \"..\") in its path"},
               {"http://h/a%zz", "has a malformed percent escape in its path"}};
    char yaml[512], want[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(yaml, sizeof yaml, "upstreams:\n  - url: \"%s\"\n", good[i]);
        bm_config_free(expect_ok(yaml));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(yaml, sizeof yaml, "upstreams:\n  - url: \"%s\"\n", bad[i].url);
        snprintf(want, sizeof want, "t.yaml:2:10: upstreams[0]: url \"%s\" %s", bad[i].url,
                 bad[i].why);
        expect_error(yaml, want);
    }
    /* Non-ASCII bytes are shown escaped in the message. */
    expect_error("upstreams:\n  - url: \"http://h/caf\xc3\xa9\"\n",
                 "t.yaml:2:10: upstreams[0]: url \"http://h/caf\\xc3\\xa9\" must not contain "
                 "non-ASCII bytes (percent-encode them)");
    /* User information bm_url_valid refuses (a lone user name is masked as a token). */
    expect_error("upstreams:\n  - url: \"http://us%zzr@h\"\n",
                 "t.yaml:2:10: upstreams[0]: url \"http://***@h\" has malformed user information "
                 "(letters, digits, -._~!$&'()*+,;=: and %-escapes)");
    /* A password never appears in a message. */
    bm_config_err_t err;
    bm_config_t *cfg = parse("upstreams:\n  - url: \"http://user:${PASS}@h:0\"\n", &err);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "\"http://user:***@h:0\" has a malformed port"));
    assert_null(strstr(err.msg, "s3cret"));
    /* One or three slashes: RFC 3986 gives no or an empty authority, so no host; the text
     * still reads as user:password@host (libcurl takes it so) and is masked in the message. */
    cfg = parse("upstreams:\n  - url: \"https:///user:s3cret@node.example.com/x\"\n", &err);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "\"https:///user:***@node.example.com/x\" has no host"));
    assert_null(strstr(err.msg, "s3cret"));
    cfg = parse("upstreams:\n  - url: \"https:/user:s3cret@node.example.com/x\"\n", &err);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "\"https:/user:***@node.example.com/x\" must start with"));
    assert_null(strstr(err.msg, "s3cret"));
    /* Without "@host", the password would look like a port: the template is shown instead. */
    expect_error("upstreams:\n  - url: \"https://user:${PASS}\"\n",
                 "t.yaml:2:10: upstreams[0]: url \"https://user:${PASS}\" has a malformed port");
}

static void test_headers(void **state)
{
    (void)state;
    expect_error(
        "upstreams:\n  - url: http://a\n    headers:\n      \"Bad Name\": x\n",
        "t.yaml:4:7: upstreams[0].headers: header \"Bad Name\" is not a valid header name");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      Host: x\n",
                 "t.yaml:4:7: upstreams[0].headers: header \"Host\" is a hop-by-hop or framing "
                 "header");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      connection: x\n",
                 "t.yaml:4:7: upstreams[0].headers: header \"connection\" is a hop-by-hop");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      Accept-Encoding: gzip\n",
                 "t.yaml:4:7: upstreams[0].headers: header \"Accept-Encoding\" describes each "
                 "request");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X-A: x\n      x-a: y\n",
                 "t.yaml:5:7: upstreams[0].headers: header \"x-a\" is given twice");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X-A: \"a\\x01b\"\n",
                 "t.yaml:4:12: upstreams[0].headers: the value of header \"X-A\" contains a "
                 "control character");
    expect_error("upstreams:\n  - url: http://a\n    headers:\n      X-A: \"a\\rb\"\n",
                 "t.yaml:4:12: upstreams[0].headers: the value of header \"X-A\" contains a line "
                 "break");
    /* Headers belong to their own upstream; a tab and an empty value are fine. */
    bm_config_t *cfg = expect_ok("upstreams:\n"
                                 "  - url: http://a\n"
                                 "  - url: http://b\n"
                                 "    headers: {X-A: \"1\\t2\", X-B: \"\"}\n"
                                 "  - url: http://c\n"
                                 "    headers: ~\n");
    assert_int_equal(cfg->upstreams[0].n_headers, 0);
    assert_int_equal(cfg->upstreams[1].n_headers, 2);
    assert_string_equal(cfg->upstreams[1].headers[0].value, "1\t2");
    assert_string_equal(cfg->upstreams[1].headers[1].value, "");
    assert_int_equal(cfg->upstreams[2].n_headers, 0);
    bm_config_free(cfg);
}

/* metrics, journal, ui and log.access: values, their checks, and metrics.listen against
 * listen. */
static void test_observe_keys(void **state)
{
    (void)state;
    bm_config_t *cfg = expect_ok("upstreams: [{url: \"http://a\"}]\n");
    assert_true(cfg->metrics.enabled);
    assert_string_equal(cfg->metrics.path, "/metrics");
    assert_null(cfg->metrics.listen);
    assert_int_equal(cfg->journal.slots, 7200);
    assert_true(cfg->ui.enabled);
    assert_false(cfg->log.access);
    bm_config_free(cfg);
    cfg = expect_ok("upstreams: [{url: \"http://a\"}]\nmetrics: {path: /m, listen: "
                    "\"127.0.0.1:9464\"}\njournal: {slots: 0}\nui: {enabled: false}\n"
                    "log: {access: true}\n");
    assert_string_equal(cfg->metrics.path, "/m");
    assert_string_equal(cfg->metrics.listen, "127.0.0.1:9464");
    assert_int_equal(cfg->journal.slots, 0);
    assert_false(cfg->ui.enabled);
    assert_true(cfg->log.access);
    bm_config_free(cfg);
    cfg = expect_ok("upstreams: [{url: \"http://a\"}]\nmetrics: {listen: \"\"}\n");
    assert_null(cfg->metrics.listen); /* "": none */
    bm_config_free(cfg);
    expect_error("metrics: {path: metrics}\n", "t.yaml:1:17: metrics: path \"metrics\" must start");
    expect_error("metrics: {path: /eth/v1/metrics}\n",
                 "t.yaml:1:17: metrics: path \"/eth/v1/metrics\" must not be a path of the Beacon");
    expect_error("metrics: {path: \"/m/*\"}\n",
                 "t.yaml:1:17: metrics: path \"/m/*\" must be a plain");
    expect_error("metrics: {listen: \"9464\"}\n",
                 "t.yaml:1:19: metrics: listen \"9464\" must be HOST:PORT");
    expect_error("journal: {slots: 100801}\n",
                 "t.yaml:1:18: journal.slots: must be between 0 and 100800");
    expect_invalid("listen: \"127.0.0.1:5555\"\nupstreams: [{url: \"http://a\"}]\n"
                   "metrics: {listen: \"127.0.0.1:5555\"}\n",
                   "metrics.listen (127.0.0.1:5555) is the address of listen");
    cfg = expect_ok("listen: \"127.0.0.1:0\"\nupstreams: [{url: \"http://a\"}]\n"
                    "metrics: {listen: \"127.0.0.1:0\"}\n"); /* two ports the system picks */
    bm_config_free(cfg);
}

static void test_validate(void **state)
{
    (void)state;
    expect_invalid("listen: \"127.0.0.1:1\"\n",
                   "no upstream configured: give --upstream URL, or list \"upstreams\"");
    expect_invalid("upstreams: [{url: \"http://a\"}]\nduties: {holdFloor: 1500ms}\n",
                   "duties.holdFloor (1500ms) must not be greater than duties.maxHold (1s)");
    expect_invalid(
        "upstreams: [{url: \"http://a\"}, {url: \"http://b\"}]\nhealth: {headQuorum: 3}\n",
        "health.headQuorum (3) is larger than the number of upstreams that are not shadows (2)");
    /* a shadow serves nothing and counts for no quorum */
    expect_invalid("upstreams: [{url: \"http://a\", shadow: true}]\n",
                   "every upstream is a shadow: at least one must serve (shadow: false)");
    expect_invalid("upstreams: [{url: \"http://a\"}, {url: \"http://b\", shadow: true}]\n"
                   "duties: {checkpointQuorum: 2}\n",
                   "duties.checkpointQuorum (2) is larger than the number of upstreams that are "
                   "not shadows (1)");
    expect_invalid("upstreams: [{url: \"http://a\"}, {id: s, url: \"http://b\", shadow: true}]\n"
                   "routeRules: [{path: /eth/v1/debug/*, upstreams: [s]}]\n",
                   "routeRules[0].upstreams[0]: \"s\" is a shadow: it serves no request");
    bm_config_t *sh = expect_ok("upstreams: [{url: \"http://a\"}, {url: \"http://b\", shadow: "
                                "true}]\nhealth: {headQuorum: 1}\n");
    assert_false(sh->upstreams[0].shadow);
    assert_true(sh->upstreams[1].shadow);
    assert_int_equal(bm_config_serving_upstreams(sh), 1);
    bm_config_free(sh);

    /* A configuration built in code is checked key by key. */
    bm_config_err_t err;
    bm_config_t *cfg = expect_ok("upstreams: [{url: \"http://a\"}]\n");
    cfg->failover.max_attempts = 0;
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_string_equal(err.msg, "failover.maxAttempts: must be between 1 and 16 (got 0)");
    cfg->failover.max_attempts = 2;
    cfg->server.idle_timeout_ms = 10;
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_string_equal(err.msg, "server.idleTimeout: must be between 1s and 24h (got 10ms)");
    cfg->server.idle_timeout_ms = 1000;
    free(cfg->upstreams[0].url);
    cfg->upstreams[0].url = strdup("http://u:secret@h:70000");
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_string_equal(err.msg, "upstreams[0] (node1): url \"http://u:***@h:70000\" has a "
                                 "malformed port (1-65535)");
    free(cfg->upstreams[0].url);
    cfg->upstreams[0].url = strdup("http://h");
    free(cfg->listen_host);
    cfg->listen_host = strdup("example.com");
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_string_equal(err.msg, "listen: host must be an IPv4 address, an IPv6 address or "
                                 "localhost");
    free(cfg->listen_host);
    cfg->listen_host = strdup("::");
    assert_int_equal(bm_config_validate(cfg, &err), 0);
    bm_config_free(cfg);
    assert_int_equal(bm_config_validate(NULL, &err), BM_EINVAL);
}

static void test_read_path_errors(void **state)
{
    (void)state;
    /* a pattern that cannot compile is an error at its line and column */
    expect_error("blockedPaths:\n  - /ok\n  - /a//b\n",
                 "t.yaml:3:5: blockedPaths[1]: \"/a//b\" has an empty segment");
    expect_error("routeRules: [{path: \"/a/b*\"}]\n",
                 "t.yaml:1:21: routeRules[0]: path \"/a/b*\" may use '*' only as a whole segment");
    expect_error("routeRules: [{method: GET}]\n",
                 "t.yaml:1:14: routeRules[0]: missing key \"path\"");
    expect_error("routeRules: [{path: /a, method: get}]\n",
                 "t.yaml:1:33: routeRules[0]: method \"get\" must be an HTTP method in upper case");
    expect_error("routeRules: [{path: /a, strategy: fastest}]\n",
                 "t.yaml:1:35: routeRules[0].strategy: invalid load balancing strategy");
    expect_error("routeRules: [{path: /a, tiers: [x]}]\n",
                 "t.yaml:1:33: routeRules[0].tiers[0]: \"x\" must be a priority");
    expect_error("routing: {loadBalancing: fastest}\n",
                 "t.yaml:1:26: routing.loadBalancing: invalid load balancing strategy \"fastest\" "
                 "(use score, round-robin, random or least-conn)");
    expect_error("failsafe: {retry: {backoff: 1.2345}}\n",
                 "t.yaml:1:29: failsafe.retry.backoff: invalid number \"1.2345\"");
    expect_error("failsafe: {retry: {backoff: 0.5}}\n",
                 "t.yaml:1:29: failsafe.retry.backoff: must be between 1 and 100 (got 0.5)");
    expect_error("failsafe: {hedge: {maxRatio: 150%}}\n",
                 "t.yaml:1:30: failsafe.hedge.maxRatio: must be between 0 and 1 (got 1.5)");
    expect_error("upstreams: [{url: http://a, weight: 0}]\n",
                 "t.yaml:1:37: upstreams[0].weight: must be between 1 and 1000 (got 0)");
    expect_error("clientRoutes: [{prefix: /a/}]\n",
                 "t.yaml:1:25: clientRoutes[0]: prefix \"/a/\" must start with '/' and not end");
    expect_error("clientRoutes: [{prefix: /a, client: geth}]\n",
                 "t.yaml:1:37: clientRoutes[0]: client \"geth\" is not a client");
    expect_error("blockedPaths: /a\n", "t.yaml:1:15: \"blockedPaths\" must be a list of values");
    expect_error(
        "routing: {stickySessions: {key: \"a b\"}}\n",
        "t.yaml:1:33: routing.stickySessions: key \"a b\" must be \"address\" or a header");

    /* what one value cannot say alone: refused by the validation, naming the key */
    const char *ups = "upstreams: [{id: a, url: http://a}, {id: b, url: http://b}]\n";
    const struct {
        const char *yaml, *msg;
    } whole[] = {
        {"clientRoutes: [{prefix: /x, upstreams: [c]}]\n",
         "clientRoutes[0].upstreams[0]: no upstream has the id \"c\""},
        {"clientRoutes: [{prefix: /x}]\n", "clientRoutes[0]: give either upstreams or client"},
        {"routeRules: [{path: /x, upstreams: [a, z]}]\n",
         "routeRules[0].upstreams[1]: no upstream has the id \"z\""},
        {"routeRules: [{path: /x, consensus: {query: 2, agree: 3}}]\n",
         "routeRules[0].consensus: agree (3) must be between 1 and query (2), both given"},
        {"routeRules: [{path: /x, consensus: {query: 3, agree: 2}}]\n",
         "routeRules[0].consensus: query (3) is more than the 2 upstreams"},
        {"upstreams: [{id: a, url: http://a, autoTune: {min: 9, max: 5}}]\n",
         "upstreams[0] (a): autoTune.min (9) must not be greater than autoTune.max (5)"},
    };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", strncmp(whole[i].yaml, "upstreams", 9) ? ups : "",
                 whole[i].yaml);
        bm_config_err_t err;
        bm_config_t *cfg = parse(text, &err);
        assert_non_null(cfg);
        assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
        assert_string_equal(err.msg, whole[i].msg);
        bm_config_free(cfg);
    }
    /* the deprecated key is read, and says so */
    bm_config_t *cfg = expect_ok("upstreams: [{url: http://a}]\nfailover: {maxAttempts: 5}\n");
    assert_int_equal(bm_config_max_attempts(cfg), 5);
    assert_non_null(strstr(bm_config_deprecation(cfg), "failsafe.retry.maxAttempts"));
    bm_config_free(cfg);
}

/* The edge's keys: networks (a section left out is the top level's), keys, CIDRs, origins. */
static void test_edge_keys(void **state)
{
    (void)state;
    bm_config_t *cfg =
        expect_ok("failsafe: {timeout: 3s}\n"
                  "cache: {maxBytes: 8MiB}\n"
                  "networks:\n"
                  "  - id: mainnet\n"
                  "    upstreams: [{url: \"http://127.0.0.1:1\"}, {url: \"http://127.0.0.1:2\"}]\n"
                  "    cache: {maxEntries: 7}\n"
                  "  - id: hoodi\n"
                  "    upstreams: [{id: h1, url: \"http://127.0.0.1:3\"}]\n"
                  "    failsafe: {timeout: 9s}\n"
                  "auth:\n  keys:\n    - {id: a, secret: \"0123456789\", networks: [hoodi], "
                  "routes: [admin]}\n"
                  "server: {allowedClients: [\"10.0.0.0/8\"]}\n"
                  "trustedProxies: [\"::1\"]\n");
    assert_int_equal(bm_config_network_count(cfg), 2);
    bm_config_t m, h;
    bm_config_network(cfg, 0, &m);
    bm_config_network(cfg, 1, &h);
    assert_string_equal(m.network_id, "mainnet");
    assert_int_equal(m.n_upstreams, 2);
    assert_int_equal(m.cache.max_entries, 7);
    assert_int_equal(m.cache.max_bytes, 64ull << 20); /* its own section: defaults, not 8MiB */
    assert_int_equal(m.failsafe.timeout_ms, 3000);    /* left out: the top level's */
    assert_int_equal(h.failsafe.timeout_ms, 9000);
    assert_int_equal(h.cache.max_bytes, 8ull << 20);
    assert_string_equal(h.upstreams[0].id, "h1");
    /* the secret never shows in a masked dump */
    char *d = dump(cfg, true);
    assert_null(strstr(d, "0123456789"));
    assert_non_null(strstr(d, "secret: \"***\""));
    free(d);
    bm_config_free(cfg);
    /* upstreams[].secretPath: the whole path is masked in the dump (--check) */
    cfg = expect_ok("upstreams:\n  - {url: \"https://h.example/api/K3y\", secretPath: true}\n"
                    "  - {url: \"https://h.example/api/Other\"}\n");
    assert_true(cfg->upstreams[0].secret_path);
    assert_false(cfg->upstreams[1].secret_path);
    d = dump(cfg, true);
    assert_null(strstr(d, "K3y"));
    assert_non_null(strstr(d, "https://h.example/***"));
    assert_non_null(strstr(d, "https://h.example/api/Other"));
    free(d);
    bm_config_free(cfg);
    bm_url_secret_path_clear();
    /* without networks: one network, cfg itself */
    cfg = expect_ok("upstreams: [{url: \"http://127.0.0.1:1\"}]\n");
    assert_int_equal(bm_config_network_count(cfg), 1);
    bm_config_network(cfg, 0, &m);
    assert_null(m.network_id);
    assert_int_equal(m.n_upstreams, 1);
    bm_config_free(cfg);

    expect_error("networks: [{id: eth, upstreams: [{url: \"http://h:1\"}]}]\n",
                 "t.yaml:1:17: networks[0]: id \"eth\" would shadow a route of beaconmux");
    expect_error("networks: [{id: lighthouse, upstreams: [{url: \"http://h:1\"}]}]\n",
                 "t.yaml:1:17: networks[0]: id \"lighthouse\" would shadow a client route");
    expect_error("networks: [{id: a, upstreams: [{url: \"http://h:1\"}]}, "
                 "{id: a, upstreams: [{url: \"http://h:2\"}]}]\n",
                 "t.yaml:1:60: networks[1]: id \"a\" is already used by networks[0]");
    expect_error("networks: [{id: a, listen: \"127.0.0.1:1\"}]\n",
                 "t.yaml:1:20: unknown key \"listen\" in \"networks[0]\"");
    expect_error("auth: {keys: [{id: a, secret: short}]}\n",
                 "t.yaml:1:31: auth.keys[0]: secret (hidden) must be at least 8 characters");
    expect_error("auth: {keys: [{id: a, secret: 012345678, routes: [write]}]}\n",
                 "t.yaml:1:51: auth.keys[0].routes[0]: \"write\" must be read, duties or admin");
    expect_error("auth: {keys: [{id: a, secret: 012345678}, {id: b, secret: 012345678}]}\n",
                 "t.yaml:1:59: auth.keys[1]: its secret is the secret of auth.keys[0] too");
    expect_error("trustedProxies: [10.0.0.0/33]\n",
                 "t.yaml:1:18: trustedProxies[0]: \"10.0.0.0/33\" must be an IP address or a CIDR");
    expect_error(
        "cors: {allowedOrigins: [\"https://a.example/path\"]}\n",
        "t.yaml:1:25: cors.allowedOrigins[0]: \"https://a.example/path\" must be an origin");
    expect_invalid("upstreams: [{url: \"http://h:1\"}]\n"
                   "networks: [{id: a, upstreams: [{url: \"http://h:2\"}]}]\n",
                   "upstreams are given at the top level and networks are listed");
    expect_invalid(
        "networks: [{id: a, upstreams: [{url: \"http://h:2\"}], health: {headQuorum: 2}}]\n",
        "networks[0] (a): health.headQuorum (2) is larger than the number of upstreams");
    expect_invalid("networks: [{id: a}]\n", "networks[0] (a): no upstream configured");
    expect_invalid("upstreams: [{url: \"http://h:1\"}]\n"
                   "auth: {keys: [{id: k, secret: 012345678, networks: [mainnet]}]}\n",
                   "auth.keys[0] (k): networks[0]: no network has the id \"mainnet\"");
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    bm_config_t *cfg =
        expect_ok("listen: \"[::1]:6000\"\n"
                  "genesisValidatorsRoot: 0x4b363db94e286120d76eb905340fdd4e54bfe9f06bf33ff6cf5ad2"
                  "7f511bfe95\n"
                  "upstreams:\n"
                  "  - url: \"https://user:${PASS}@host/p$$\"\n"
                  "    headers: {X-K: \"a$$b \\\"q\\\" \\\\ \\t \\u00e9 \\u2028 #\", Y: \"\"}\n"
                  "  - id: two\n    url: http://b\n"
                  "server: {maxBodyBytes: 1025, idleTimeout: 90s, shutdownTimeout: 0}\n"
                  "duties: {blockSelection: best-value, holdFloor: 1ms}\n"
                  "events: {headersTimeout: 30s}\n"
                  "tls: {verify: false}\n"
                  "routing: {loadBalancing: least-conn, stickySessions: {key: X-C,\n"
                  "          rebalanceFactor: 1.25}}\n"
                  "failsafe: {retry: {maxAttempts: 2, backoff: 1.5}, hedge: {maxRatio: 5%}}\n"
                  "blockedPaths: [\"/a/*\", \"/b\"]\n"
                  "clientRoutes: [{prefix: /x, client: teku}]\n"
                  "routeRules: [{path: \"/s/*/v\", retry: {delay: 5ms}, tiers: [\"0\"],\n"
                  "              strategy: random, consensus: {query: 2, agree: 1}}]\n");
    assert_int_equal(cfg->events.headers_timeout_ms, 30000);
    char *d = dump(cfg, false);
    bm_config_err_t err;
    bm_config_t *again = bm_config_parse(d, strlen(d), "dump", NULL, NULL, &err);
    if (!again)
        print_error("%s\n%s\n", d, err.msg);
    assert_non_null(again);
    assert_same_config(cfg, again);
    assert_string_equal(again->upstreams[0].headers[0].value,
                        "a$b \"q\" \\ \t \xc3\xa9 \xe2\x80\xa8 #");
    assert_non_null(strstr(d, "maxBodyBytes: 1025\n"));
    assert_non_null(strstr(d, "idleTimeout: 90s\n"));
    assert_non_null(strstr(d, "headersTimeout: 30s\n"));
    assert_non_null(strstr(d, "listen: \"[::1]:6000\"\n"));
    assert_non_null(strstr(d, "rebalanceFactor: 1.25\n"));
    assert_non_null(strstr(d, "maxRatio: 0.05\n"));
    assert_non_null(strstr(d, "blockedPaths: [\"/a/*\", \"/b\"]\n"));

    /* The masked dump hides passwords and header values and is still valid YAML. */
    char *m = dump(cfg, true);
    assert_null(strstr(m, "s3cret"));
    assert_null(strstr(m, "a$$b"));
    assert_non_null(strstr(m, "\"https://user:***@host/p$$\""));
    bm_config_t *masked = bm_config_parse(m, strlen(m), "masked", NULL, NULL, &err);
    assert_non_null(masked);
    bm_config_free(masked);
    free(m);
    free(d);
    bm_config_free(again);
    bm_config_free(cfg);
}

/* blockedPaths: left out, the nodes' admin routes; given, the list replaces them (an empty
 * list opens everything), and the dump says so; a network without its own takes the top's. */
static void test_blocked_paths_default(void **state)
{
    (void)state;
    size_t n_def = 0;
    while (bm_rules_default_blocked[n_def])
        n_def++;
    assert_true(n_def >= 10);
    bm_config_t *cfg = expect_ok("upstreams: [{url: \"http://127.0.0.1:1\"}]\n");
    assert_int_equal(cfg->n_blocked_paths, n_def);
    assert_string_equal(cfg->blocked_paths[0], "/lighthouse/database/*");
    bm_config_free(cfg);

    cfg = expect_ok("upstreams: [{url: \"http://127.0.0.1:1\"}]\nblockedPaths: [\"/x\"]\n");
    assert_int_equal(cfg->n_blocked_paths, 1);
    assert_string_equal(cfg->blocked_paths[0], "/x");
    bm_config_free(cfg);

    cfg = expect_ok("upstreams: [{url: \"http://127.0.0.1:1\"}]\nblockedPaths: []\n");
    assert_int_equal(cfg->n_blocked_paths, 0);
    char *d = dump(cfg, false);
    assert_non_null(strstr(d, "\nblockedPaths: []\n"));
    bm_config_err_t err;
    bm_config_t *again = bm_config_parse(d, strlen(d), "dump", NULL, NULL, &err);
    assert_non_null(again);
    assert_int_equal(again->n_blocked_paths, 0); /* not the default again */
    bm_config_free(again);
    free(d);
    bm_config_free(cfg);

    cfg = expect_ok("blockedPaths: [\"/y\"]\n"
                    "networks:\n"
                    "  - {id: a, upstreams: [{url: \"http://127.0.0.1:1\"}]}\n"
                    "  - {id: b, upstreams: [{url: \"http://127.0.0.1:2\"}], blockedPaths: []}\n");
    bm_config_t a, b;
    bm_config_network(cfg, 0, &a);
    bm_config_network(cfg, 1, &b);
    assert_int_equal(a.n_blocked_paths, 1);
    assert_string_equal(a.blocked_paths[0], "/y");
    assert_int_equal(b.n_blocked_paths, 0);
    bm_config_free(cfg);
}

/* Every default list entry passes its key's own check, and a new configuration holds the
 * entries in order: bm_cfg_defaults copies them without judging them again. Returns the
 * number of lists with defaults seen under sec. */
static size_t check_default_lists(const bm_cfg_section_t *sec, const void *obj)
{
    size_t seen = 0;
    for (size_t i = 0; i < sec->n_keys; i++) {
        const bm_cfg_key_t *k = &sec->keys[i];
        if (k->kind == BM_CFG_SECTION) {
            seen += check_default_lists(k->sub, (const char *)obj + k->off);
            continue;
        }
        if (k->kind != BM_CFG_STRINGS || !k->def_list)
            continue;
        char *const *arr = *(char *const *const *)((const char *)obj + k->off);
        size_t count = *(const size_t *)((const char *)obj + k->aux), n = 0;
        for (; k->def_list[n]; n++) {
            if (k->problem && k->problem(k->def_list[n]))
                fail_msg("default %s of %s: %s", k->def_list[n], k->name,
                         k->problem(k->def_list[n]));
            assert_true(n < count);
            assert_string_equal(arr[n], k->def_list[n]);
        }
        assert_int_equal(count, n);
        assert_true(n <= k->max);
        seen++;
    }
    return seen;
}

static void test_default_lists_pass_their_checks(void **state)
{
    (void)state;
    bm_config_t *cfg = bm_config_new();
    assert_non_null(cfg);
    assert_true(check_default_lists(&bm_cfg_root, cfg) >= 1); /* blockedPaths at least */
    bm_config_free(cfg);
}

/* ---- per-duty holds ------------------------------------------------------------------- */

static void assert_hold(const bm_config_t *cfg, bm_config_duty_t d, uint32_t floor, uint32_t max)
{
    uint32_t f, m;
    bm_config_duty_hold(cfg, d, &f, &m);
    assert_int_equal(f, floor);
    assert_int_equal(m, max);
}

static void test_duty_holds(void **state)
{
    (void)state;
    /* Unset: every duty inherits the section's values, even when those change. */
    bm_config_t *cfg = expect_ok("upstreams: [{url: \"http://a\"}]\n");
    for (int d = 0; d < BM_CONFIG_DUTY_COUNT; d++) {
        assert_int_equal(cfg->duties.hold[d].hold_floor_ms, BM_CONFIG_UNSET);
        assert_int_equal(cfg->duties.hold[d].max_hold_ms, BM_CONFIG_UNSET);
        assert_hold(cfg, (bm_config_duty_t)d, 400, 1000);
    }
    cfg->duties.hold_floor_ms = 100;
    assert_hold(cfg, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION, 100, 1000);
    assert_hold(cfg, BM_CONFIG_DUTY_COUNT, 100, 1000); /* a bad duty: the section's */
    char *d = dump(cfg, false);
    assert_null(strstr(d, "attestationData")); /* unset keys are not written */
    free(d);
    bm_config_free(cfg);

    /* Each of the five sub-sections, each key on its own or inherited. */
    cfg = expect_ok("upstreams: [{url: \"http://a\"}]\n"
                    "duties:\n"
                    "  holdFloor: 300ms\n"
                    "  maxHold: 2s\n"
                    "  attestationData: {holdFloor: 0, maxHold: 450ms}\n"
                    "  headRoot:\n"
                    "    maxHold: 3s\n"
                    "  payloadAttestationData:\n"
                    "  aggregateAttestation: {holdFloor: 1s}\n"
                    "  syncCommitteeContribution: {maxHold: 1500}\n");
    assert_hold(cfg, BM_CONFIG_DUTY_ATTESTATION_DATA, 0, 450);
    assert_hold(cfg, BM_CONFIG_DUTY_HEAD_ROOT, 300, 3000);
    assert_hold(cfg, BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA, 300, 2000);
    assert_hold(cfg, BM_CONFIG_DUTY_AGGREGATE_ATTESTATION, 1000, 2000);
    assert_hold(cfg, BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION, 300, 1500);
    assert_int_equal(cfg->duties.hold[BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA].max_hold_ms,
                     BM_CONFIG_UNSET);

    /* The dump writes only what is set, nested, and reads back the same. */
    d = dump(cfg, false);
    assert_non_null(strstr(d, "  attestationData:\n    holdFloor: 0ms\n    maxHold: 450ms\n"));
    assert_non_null(strstr(d, "  headRoot:\n    maxHold: 3s\n"));
    assert_null(strstr(d, "payloadAttestationData"));
    assert_non_null(strstr(d, "  syncCommitteeContribution:\n    maxHold: 1500ms\n"));
    bm_config_err_t err;
    bm_config_t *again = bm_config_parse(d, strlen(d), "dump", NULL, NULL, &err);
    if (!again)
        print_error("%s\n%s\n", d, err.msg);
    assert_non_null(again);
    assert_same_config(cfg, again);
    bm_config_free(again);
    free(d);
    bm_config_free(cfg);

    /* Names. */
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_ATTESTATION_DATA), "attestationData");
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_HEAD_ROOT), "headRoot");
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_PAYLOAD_ATTESTATION_DATA),
                        "payloadAttestationData");
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_AGGREGATE_ATTESTATION),
                        "aggregateAttestation");
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_SYNC_COMMITTEE_CONTRIBUTION),
                        "syncCommitteeContribution");
    assert_string_equal(bm_config_duty_name(BM_CONFIG_DUTY_COUNT), "?");

    /* Errors name the nested key and its position. */
    expect_error("duties:\n  attestationData:\n    holdfloor: 1s\n",
                 "t.yaml:3:5: unknown key \"holdfloor\" in \"duties.attestationData\" "
                 "(expected one of: holdFloor, maxHold)");
    expect_error("duties:\n  attestation: {maxHold: 1s}\n",
                 "t.yaml:2:3: unknown key \"attestation\" in \"duties\"");
    expect_error("duties: {headRoot: {maxHold: 0}}\n",
                 "t.yaml:1:30: duties.headRoot.maxHold: must be between 1ms and 24h (got 0ms)");
    expect_error("duties: {aggregateAttestation: {holdFloor: 1.5s}}\n",
                 "t.yaml:1:44: duties.aggregateAttestation.holdFloor: invalid duration \"1.5s\"");
    expect_error("duties: {headRoot: 5}\n", "t.yaml:1:20: \"duties.headRoot\" must be a mapping");

    /* Validation with inherited values on either side. */
    expect_invalid("upstreams: [{url: \"http://a\"}]\n"
                   "duties: {attestationData: {holdFloor: 900ms, maxHold: 500ms}}\n",
                   "duties.attestationData: holdFloor (900ms) must not be greater than maxHold "
                   "(500ms)");
    expect_invalid("upstreams: [{url: \"http://a\"}]\n"
                   "duties: {maxHold: 300ms, holdFloor: 100ms, headRoot: {holdFloor: 1s}}\n",
                   "duties.headRoot: holdFloor (1s) must not be greater than maxHold (300ms, from "
                   "duties.maxHold)");
    expect_invalid("upstreams: [{url: \"http://a\"}]\n"
                   "duties: {syncCommitteeContribution: {maxHold: 200ms}}\n",
                   "duties.syncCommitteeContribution: holdFloor (400ms, from duties.holdFloor) "
                   "must not be greater than maxHold (200ms)");

    /* A configuration built in code: an out-of-range per-duty value is caught by key. */
    cfg = expect_ok("upstreams: [{url: \"http://a\"}]\n");
    cfg->duties.hold[BM_CONFIG_DUTY_HEAD_ROOT].max_hold_ms = 0;
    assert_int_equal(bm_config_validate(cfg, &err), BM_EINVAL);
    assert_string_equal(err.msg, "duties.headRoot.maxHold: must be between 1ms and 24h (got 0ms)");
    bm_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_full_values),
        cmocka_unit_test(test_example_file),
        cmocka_unit_test(test_documented_keys),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_env_values),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_other_values),
        cmocka_unit_test(test_upstream_ids),
        cmocka_unit_test(test_upstream_urls),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_observe_keys),
        cmocka_unit_test(test_state_keys),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_duty_holds),
        cmocka_unit_test(test_read_path_errors),
        cmocka_unit_test(test_edge_keys),
        cmocka_unit_test(test_blocked_paths_default),
        cmocka_unit_test(test_default_lists_pass_their_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
