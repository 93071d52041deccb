/* SPDX-License-Identifier: MIT */
/*
 * cli: the command line (see cli.h). The flags are a small fixed table; their values are
 * checked by the same code as the file's keys (config_keys.h), so `--listen nope` and
 * `listen: nope` are refused with the same reason.
 */
#include "app/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/config_keys.h"
#include "base/err.h"

static const char usage_line[] =
    "Usage: beaconmux [--config FILE] [--upstream URL]... [--listen HOST:PORT] [--check]\n"
    "                 [--log-level LEVEL] [--log-format text|json] [--no-wait] [--version]\n"
    "                 [--help]";

enum opt_id {
    OPT_CONFIG,
    OPT_UPSTREAM,
    OPT_LISTEN,
    OPT_CHECK,
    OPT_LOG_LEVEL,
    OPT_LOG_FORMAT,
    OPT_NO_WAIT,
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
    {"--no-wait", OPT_NO_WAIT, false},
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
    bm_cfg_err(err, "%s\n%s\nRun \"beaconmux --help\" for details.", msg, usage_line);
    return BM_EINVAL;
}

/* Stores the value `v` of option `o` in `cli`. */
static int take(bm_cli_t *cli, const struct opt *o, const char *v, bm_config_err_t *err)
{
    bm_cfg_quote_t q;
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
                               "invalid value %s for --log-level (use debug, info, warn, error "
                               "or off)",
                               bm_cfg_quote(&q, v));
        cli->has_log_level = true;
        break;
    case OPT_LOG_FORMAT:
        if (bm_log_format_parse(v, &cli->log_format) != 0)
            return usage_error(err, "invalid value %s for --log-format (use text or json)",
                               bm_cfg_quote(&q, v));
        cli->has_log_format = true;
        break;
    case OPT_NO_WAIT:
        cli->no_wait = true;
        break;
    case OPT_VERSION:
        cli->version = true;
        break;
    case OPT_HELP:
        cli->help = true;
        break;
    }
    return 0;
}

int bm_cli_parse(int argc, char *const argv[], bm_cli_t *cli, bm_config_err_t *err)
{
    bool seen[OPT_HELP + 1] = {false};
    bm_cfg_quote_t q;
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
            return usage_error(err, "unexpected argument %s", bm_cfg_quote(&q, a));
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const struct opt *o = NULL;
        for (size_t j = 0; j < sizeof opts / sizeof opts[0]; j++)
            if (strlen(opts[j].name) == nlen && strncmp(opts[j].name, a, nlen) == 0)
                o = &opts[j];
        if (!o)
            return usage_error(err, "unknown option %s", bm_cfg_quote_n(&q, a, nlen));
        const char *v = NULL;
        if (o->has_value) {
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1] != '\0'))
                v = argv[++i];
            if (!v || !v[0])
                return usage_error(err, "option %s needs a value", o->name);
        } else if (eq) {
            return usage_error(err, "option %s takes no value", o->name);
        }
        if (seen[o->id] && o->id != OPT_UPSTREAM)
            return usage_error(err, "option %s is given more than once", o->name);
        seen[o->id] = true;
        int rc = take(cli, o, v, err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

const char *bm_cli_help(void)
{
    return "beaconmux: a validator-safe, active-active multiplexer for the Ethereum Beacon API.\n"
           "\n"
           "Usage: beaconmux [--config FILE] [--upstream URL]... [--listen HOST:PORT] [--check]\n"
           "                 [--log-level LEVEL] [--log-format text|json] [--no-wait] [--version]\n"
           "                 [--help]\n"
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
           "  --no-wait              Under systemd (Type=notify): report ready as soon as\n"
           "                         the listener is open, without waiting for the first\n"
           "                         beacon node to be discovered.\n"
           "  --version              Print the version and exit.\n"
           "  -h, --help             Print this help and exit.\n"
           "\n"
           "Flags override the file; keys absent from both take their defaults.\n"
           "In the file, ${VAR} in a value is replaced by the environment variable VAR (an\n"
           "unset variable is an error); write $$ for a literal '$'.\n";
}

static void free_upstreams(const bm_cfg_key_t *list, bm_config_upstream_t *ups, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bm_cfg_dispose(list->sub, &ups[i]);
    free(ups);
}

/* --upstream URL...: replaces the whole list, ids by position. */
static int apply_upstreams(bm_config_t *cfg, const bm_cli_t *cli, bm_config_err_t *err)
{
    const bm_cfg_key_t *list = bm_cfg_find(&bm_cfg_root, "upstreams");
    size_t n = cli->n_upstreams;
    const char *why;
    bm_cfg_quote_t q;
    if (n > BM_CONFIG_MAX_UPSTREAMS) {
        bm_cfg_err(err, "more than %d --upstream options", BM_CONFIG_MAX_UPSTREAMS);
        return BM_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if ((why = bm_cfg_url_problem(cli->upstreams[i]))) {
            bm_cfg_err(err, "--upstream %s (#%zu) %s", bm_cfg_quote_url(&q, cli->upstreams[i]),
                       i + 1, why);
            return BM_EINVAL;
        }
    }
    bm_config_upstream_t *ups = calloc(n, sizeof *ups);
    bool ok = ups != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        ok = bm_cfg_defaults(list->sub, &ups[i]) == 0; /* priority, weight, ... */
        ups[i].id = bm_cfg_default_id(i);
        ups[i].url = strdup(cli->upstreams[i]);
        ok = ok && ups[i].id && ups[i].url;
    }
    if (!ok) {
        free_upstreams(list, ups, ups ? n : 0);
        bm_cfg_err(err, "out of memory");
        return BM_ENOMEM;
    }
    free_upstreams(list, cfg->upstreams, cfg->n_upstreams);
    cfg->upstreams = ups;
    cfg->n_upstreams = n;
    return 0;
}

int bm_cli_apply(bm_config_t *cfg, const bm_cli_t *cli, bm_config_err_t *err)
{
    if (cli->listen) {
        char msg[300];
        if (!bm_cfg_set(bm_cfg_find(&bm_cfg_root, "listen"), cfg, cli->listen, cli->listen, msg,
                        sizeof msg)) {
            bm_cfg_err(err, "--listen: %s", msg);
            return BM_EINVAL;
        }
    }
    if (cli->has_log_level)
        cfg->log.level = cli->log_level;
    if (cli->has_log_format)
        cfg->log.format = cli->log_format;
    if (cli->n_upstreams > 0)
        return apply_upstreams(cfg, cli, err);
    return 0;
}

bm_config_t *bm_cli_load(const bm_cli_t *cli, bm_config_err_t *err)
{
    bm_config_t *cfg;
    if (err)
        err->msg[0] = '\0';
    if (cli->config_path)
        cfg = bm_config_read(cli->config_path, err);
    else if (!(cfg = bm_config_new()))
        bm_cfg_err(err, "out of memory");
    if (!cfg)
        return NULL;
    if (bm_cli_apply(cfg, cli, err) != 0 || bm_config_validate(cfg, err) != 0) {
        bm_config_free(cfg);
        return NULL;
    }
    return cfg;
}
