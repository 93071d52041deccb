/* SPDX-License-Identifier: MIT */
/*
 * test_cli: the command line. What each flag accepts and refuses (with the usage line),
 * the help text, and how flags overlay the file: --listen and --log-* replace its values,
 * --upstream its whole list, and a configuration from flags alone holds the same defaults
 * as one from a file.
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

#include "app/cli.h"
#include "base/err.h"
#include "config_fx.h"

static int parse_argv(bm_cli_t *cli, bm_config_err_t *err, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    argv[argc++] = "beaconmux";
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    return bm_cli_parse(argc, argv, cli, err);
}

static void test_cli_parse(void **state)
{
    (void)state;
    bm_cli_t cli;
    bm_config_err_t err;
    assert_int_equal(parse_argv(&cli, &err, "--upstream", "http://a", "--upstream=http://b",
                                "--listen=[::1]:7000", "--log-level", "debug", "--log-format=json",
                                "--check", "--config", "c.yaml", NULL),
                     0);
    assert_int_equal(cli.n_upstreams, 2);
    assert_string_equal(cli.upstreams[0], "http://a");
    assert_string_equal(cli.upstreams[1], "http://b");
    assert_string_equal(cli.listen, "[::1]:7000");
    assert_true(cli.has_log_level);
    assert_int_equal(cli.log_level, BM_LOG_DEBUG);
    assert_true(cli.has_log_format);
    assert_int_equal(cli.log_format, BM_LOG_JSON);
    assert_true(cli.check);
    assert_string_equal(cli.config_path, "c.yaml");
    assert_false(cli.help);
    assert_false(cli.version);

    assert_int_equal(parse_argv(&cli, &err, NULL), 0);
    assert_null(cli.config_path);
    assert_int_equal(cli.n_upstreams, 0);
    assert_false(cli.has_log_level);
    assert_int_equal(parse_argv(&cli, &err, "--help", NULL), 0);
    assert_true(cli.help);
    assert_int_equal(parse_argv(&cli, &err, "-h", NULL), 0);
    assert_true(cli.help);
    assert_int_equal(parse_argv(&cli, &err, "--version", NULL), 0);
    assert_true(cli.version);
    /* "=" keeps everything after it, '=' included. */
    assert_int_equal(parse_argv(&cli, &err, "--config=a=b", NULL), 0);
    assert_string_equal(cli.config_path, "a=b");

    static const struct {
        const char *args[4];
        const char *msg;
    } bad[] = {
        {{"--bogus"}, "unknown option \"--bogus\"\nUsage: beaconmux [--config FILE]"},
        {{"--bogus=1"}, "unknown option \"--bogus\"\n"},
        {{"--upstreams", "http://a"}, "unknown option \"--upstreams\"\n"},
        {{"-x"}, "unexpected argument \"-x\"\n"},
        {{"file.yaml"}, "unexpected argument \"file.yaml\"\n"},
        {{"--"}, "unexpected argument \"--\"\n"},
        {{"--config"}, "option --config needs a value\n"},
        {{"--config="}, "option --config needs a value\n"},
        {{"--listen", "--check"}, "option --listen needs a value\n"},
        {{"--upstream", "-x"}, "option --upstream needs a value\n"},
        {{"--check=yes"}, "option --check takes no value\n"},
        {{"--config", "a", "--config", "b"}, "option --config is given more than once\n"},
        {{"--log-level", "loud"},
         "invalid value \"loud\" for --log-level (use debug, info, warn, "
         "error or off)\n"},
        {{"--log-format", "xml"}, "invalid value \"xml\" for --log-format (use text or json)\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[6] = {"beaconmux"};
        int argc = 1;
        for (int j = 0; j < 4 && bad[i].args[j]; j++)
            argv[argc++] = (char *)bad[i].args[j];
        int rc = bm_cli_parse(argc, argv, &cli, &err);
        if (rc != BM_EINVAL || strncmp(err.msg, bad[i].msg, strlen(bad[i].msg)) != 0)
            print_error("case %zu: got %d: %s\n", i, rc, err.msg);
        assert_int_equal(rc, BM_EINVAL);
        assert_memory_equal(err.msg, bad[i].msg, strlen(bad[i].msg));
        assert_non_null(strstr(err.msg, "Run \"beaconmux --help\" for details."));
    }

    /* At most BM_CONFIG_MAX_UPSTREAMS. */
    char *argv[2 * BM_CONFIG_MAX_UPSTREAMS + 3] = {"beaconmux"};
    int argc = 1;
    for (int i = 0; i <= BM_CONFIG_MAX_UPSTREAMS; i++) {
        argv[argc++] = "--upstream";
        argv[argc++] = "http://a";
    }
    assert_int_equal(bm_cli_parse(argc - 2, argv, &cli, &err), 0);
    assert_int_equal(cli.n_upstreams, BM_CONFIG_MAX_UPSTREAMS);
    assert_int_equal(bm_cli_parse(argc, argv, &cli, &err), BM_EINVAL);
    assert_non_null(strstr(err.msg, "more than 64 --upstream options"));
}

static void test_cli_help(void **state)
{
    (void)state;
    const char *h = bm_cli_help();
    static const char *const flags[] = {"--config FILE", "--upstream URL", "--listen HOST:PORT",
                                        "--check",       "--log-level",    "--log-format",
                                        "--version",     "--help",         "REPLACES"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        assert_non_null(strstr(h, flags[i]));
    assert_int_equal(h[strlen(h) - 1], '\n');
}

static void test_cli_overlay(void **state)
{
    (void)state;
    bm_cli_t cli;
    bm_config_err_t err;
    char *path = write_tmp("listen: \"127.0.0.1:1111\"\n"
                           "log: {level: warn, format: json}\n"
                           "upstreams:\n"
                           "  - id: file-node\n"
                           "    url: http://file:1\n"
                           "    headers: {X-A: b}\n"
                           "server: {maxConnections: 7}\n");

    /* The file alone. */
    assert_int_equal(parse_argv(&cli, &err, "--config", path, NULL), 0);
    bm_config_t *cfg = bm_cli_load(&cli, &err);
    assert_non_null(cfg);
    assert_int_equal(cfg->listen_port, 1111);
    assert_int_equal(cfg->log.level, BM_LOG_WARN);
    assert_string_equal(cfg->upstreams[0].id, "file-node");
    bm_config_free(cfg);

    /* Flags override the file; --upstream replaces the whole list; the rest of the file stays. */
    assert_int_equal(parse_argv(&cli, &err, "--config", path, "--listen", "0.0.0.0:2222",
                                "--log-level=debug", "--upstream", "http://cli:1", "--upstream",
                                "https://cli:2", NULL),
                     0);
    cfg = bm_cli_load(&cli, &err);
    if (!cfg)
        print_error("%s\n", err.msg);
    assert_non_null(cfg);
    assert_string_equal(cfg->listen_host, "0.0.0.0");
    assert_int_equal(cfg->listen_port, 2222);
    assert_int_equal(cfg->log.level, BM_LOG_DEBUG);
    assert_int_equal(cfg->log.format, BM_LOG_JSON); /* not overridden */
    assert_int_equal(cfg->server.max_connections, 7);
    assert_int_equal(cfg->n_upstreams, 2);
    assert_string_equal(cfg->upstreams[0].id, "node1");
    assert_string_equal(cfg->upstreams[0].url, "http://cli:1");
    assert_int_equal(cfg->upstreams[0].n_headers, 0);
    assert_string_equal(cfg->upstreams[1].id, "node2");
    bm_config_free(cfg);

    /* Bad values given as flags are reported by flag name. */
    assert_int_equal(parse_argv(&cli, &err, "--upstream", "http://a", "--listen", "nope", NULL), 0);
    assert_null(bm_cli_load(&cli, &err));
    assert_string_equal(err.msg, "--listen: invalid address \"nope\" (use HOST:PORT with an IPv4 "
                                 "address, [IPv6 address] or localhost, and a port 0-65535)");
    assert_int_equal(
        parse_argv(&cli, &err, "--upstream", "http://a", "--upstream", "ftp://u:pw@b", NULL), 0);
    assert_null(bm_cli_load(&cli, &err));
    assert_string_equal(err.msg,
                        "--upstream \"ftp://u:***@b\" (#2) must start with http:// or https://");
    assert_int_equal(parse_argv(&cli, &err, "--upstream", "https:///u:pw@b/x", NULL), 0);
    assert_null(bm_cli_load(&cli, &err));
    assert_string_equal(err.msg, "--upstream \"https:///u:***@b/x\" (#1) has no host");

    /* No file and no upstream. */
    assert_int_equal(parse_argv(&cli, &err, NULL), 0);
    assert_null(bm_cli_load(&cli, &err));
    assert_non_null(strstr(err.msg, "no upstream configured"));

    /* A missing file. */
    assert_int_equal(parse_argv(&cli, &err, "--config", "/nonexistent/b.yaml", NULL), 0);
    assert_null(bm_cli_load(&cli, &err));
    assert_string_equal(err.msg, "/nonexistent/b.yaml: cannot open: No such file or directory");
    unlink(path);
    free(path);
}

static void test_defaults_identical(void **state)
{
    (void)state;
    bm_cli_t cli;
    bm_config_err_t err;
    char *empty = write_tmp("");
    char *same = write_tmp("upstreams:\n  - url: http://a:1\n  - url: http://b:2\n");

    /* Flags only. */
    assert_int_equal(
        parse_argv(&cli, &err, "--upstream", "http://a:1", "--upstream", "http://b:2", NULL), 0);
    bm_config_t *flags_only = bm_cli_load(&cli, &err);
    assert_non_null(flags_only);

    /* An empty file plus the same flags. */
    assert_int_equal(parse_argv(&cli, &err, "--config", empty, "--upstream", "http://a:1",
                                "--upstream", "http://b:2", NULL),
                     0);
    bm_config_t *empty_file = bm_cli_load(&cli, &err);
    assert_non_null(empty_file);
    free(empty_file->path);
    empty_file->path = NULL;

    /* The same upstreams written in the file. */
    assert_int_equal(parse_argv(&cli, &err, "--config", same, NULL), 0);
    bm_config_t *in_file = bm_cli_load(&cli, &err);
    assert_non_null(in_file);

    assert_same_config(flags_only, empty_file);
    assert_same_config(flags_only, in_file);

    bm_config_free(flags_only);
    bm_config_free(empty_file);
    bm_config_free(in_file);
    unlink(empty);
    unlink(same);
    free(empty);
    free(same);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_parse),
        cmocka_unit_test(test_cli_help),
        cmocka_unit_test(test_cli_overlay),
        cmocka_unit_test(test_defaults_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
