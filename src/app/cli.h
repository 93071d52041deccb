/* SPDX-License-Identifier: MIT */
/*
 * cli: the command line. Parses argv into what was asked (bm_cli_t), prints the help, and
 * turns the file and the flags into the one configuration main runs with: the file (or the
 * defaults), then the flags on top of it (--listen, --log-level, --log-format replace the
 * file's values; --upstream replaces its whole upstream list), then the validation.
 */
#ifndef BM_CLI_H
#define BM_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "app/config.h"
#include "base/log.h"

/** What the command line said. Strings are borrowed from argv. */
typedef struct bm_cli {
    const char *config_path;                        /* --config FILE, or NULL */
    const char *upstreams[BM_CONFIG_MAX_UPSTREAMS]; /* --upstream URL, in order */
    size_t n_upstreams;
    const char *listen; /* --listen HOST:PORT, or NULL */
    bool has_log_level;
    bm_log_level_t log_level; /* --log-level, when has_log_level */
    bool has_log_format;
    bm_log_format_t log_format; /* --log-format, when has_log_format */
    bool check;                 /* --check: validate, report, exit */
    bool help;                  /* --help / -h */
    bool version;               /* --version */
    bool no_wait; /* --no-wait: READY=1 to systemd once listening, before any node is known */
} bm_cli_t;

/**
 * Parses argv[1..argc) into `cli` (zeroed first). Accepts "--flag value" and
 * "--flag=value". Unknown flags, missing values, repeated single flags and stray
 * arguments are errors whose message ends with a usage hint. Returns 0 or BM_EINVAL.
 */
int bm_cli_parse(int argc, char *const argv[], bm_cli_t *cli, bm_config_err_t *err);

/** The --help text (every flag), ending with a newline. Static storage. */
const char *bm_cli_help(void);

/**
 * Overlays the command line on `cfg`: --listen, --log-level and --log-format replace the
 * file's values; --upstream, when given at least once, replaces the file's whole upstream
 * list (ids node1, node2, ... by position, no extra headers). Returns 0, BM_EINVAL or
 * BM_ENOMEM with `err` set.
 */
int bm_cli_apply(bm_config_t *cfg, const bm_cli_t *cli, bm_config_err_t *err);

/**
 * The whole load for main: reads cli->config_path when set (else starts from the
 * defaults), substitutes `${VAR}` from the process environment, overlays the command line
 * and validates. Returns a new configuration (caller frees) or NULL with `err` set.
 */
bm_config_t *bm_cli_load(const bm_cli_t *cli, bm_config_err_t *err);

#endif /* BM_CLI_H */
