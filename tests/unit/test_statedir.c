/* SPDX-License-Identifier: MIT */
/*
 * test_statedir: the state file of a network. A save comes back section by section; an
 * unchanged save writes nothing; periodic saves respect the interval and stop saves once
 * more; corrupt, foreign (another network, another genesis root, another version),
 * unreadable and oversized files are reported, set aside and ignored; a section a module
 * refuses is skipped and the others restored; a write that fails (the file size limit
 * standing in for a full disk) leaves the previous file intact and counts a failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "app/statedir.h"
#include "base/err.h"
#include "base/log.h"
#include "base/statefile.h"

#define WALL0 1700000000000ull
#define ROOT_A                                                                                     \
    "0x"                                                                                           \
    "11111111111111111111111111111111"                                                             \
    "11111111111111111111111111111111"
#define ROOT_B                                                                                     \
    "0x"                                                                                           \
    "22222222222222222222222222222222"                                                             \
    "22222222222222222222222222222222"

/* A module with one counter and a text blob, and what its import was given. */
typedef struct mod {
    int value;
    const char *blob; /* exported as a JSON string when set (for large saves) */
    int imports;
    int refuse; /* import answers BM_EINVAL */
    char got[256];
} mod_t;

static int mod_export(void *ud, uint64_t now_ms, bm_str_t *out)
{
    mod_t *m = ud;
    (void)now_ms;
    bm_str_printf(out, "{\"value\":%d", m->value);
    if (m->blob) {
        bm_str_puts(out, ",\"blob\":");
        bm_str_json_string(out, m->blob, strlen(m->blob));
    }
    bm_str_putc(out, '}');
    return 0;
}

static int mod_import(void *ud, const char *json, size_t len, uint64_t now_ms)
{
    mod_t *m = ud;
    assert_int_equal(now_ms, WALL0);
    m->imports++;
    snprintf(m->got, sizeof m->got, "%.*s", (int)len, json);
    return m->refuse ? BM_EINVAL : 1;
}

typedef struct fx {
    uv_loop_t loop;
    bm_clock_t *clock;
    char dir[64];
    char path[128];
} fx_t;

static void fx_init(fx_t *f)
{
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->clock = bm_clock_manual_new(&f->loop, WALL0);
    snprintf(f->dir, sizeof f->dir, "/tmp/bm-statedir-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/state.json", f->dir);
}

static void fx_dispose(fx_t *f)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

static bm_statedir_t *open_sd(fx_t *f, const char *network, const char *genesis, mod_t *a, mod_t *b)
{
    bm_statedir_opts_t o = {f->dir, "state.json", network, genesis, 1000};
    bm_statedir_t *sd = bm_statedir_new(f->clock, &o);
    assert_non_null(sd);
    assert_int_equal(bm_statedir_add(sd, "a", mod_export, mod_import, a), 0);
    if (b)
        assert_int_equal(bm_statedir_add(sd, "b", mod_export, mod_import, b), 0);
    assert_int_equal(bm_statedir_add(sd, "a", mod_export, mod_import, a), BM_EINVAL);
    return sd;
}

static void close_sd(fx_t *f, bm_statedir_t *sd)
{
    bm_statedir_stop(sd);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_statedir_free(sd);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static char *read_text(const char *path)
{
    bm_str_t s = BM_STR_INIT;
    assert_int_equal(bm_statefile_read(path, 1 << 24, &s, NULL, 0), 0);
    char *t = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    return t;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_round_trip_and_unchanged_saves(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f);
    mod_t a = {.value = 7}, b = {.value = 9};
    bm_statedir_t *sd = open_sd(&f, "hoodi", ROOT_A, &a, &b);
    assert_int_equal(bm_statedir_load(sd), BM_ENOTFOUND);
    assert_int_equal(bm_statedir_save(sd), 0);
    assert_int_equal(bm_statedir_writes(sd), 1);
    assert_int_equal(bm_statedir_save(sd), 0); /* nothing changed: not written again */
    assert_int_equal(bm_statedir_writes(sd), 1);
    a.value = 8;
    assert_int_equal(bm_statedir_save(sd), 0);
    assert_int_equal(bm_statedir_writes(sd), 2);
    close_sd(&f, sd);
    char *text = read_text(f.path);
    assert_non_null(strstr(text, "\"network\":\"hoodi\""));
    assert_non_null(strstr(text, "\"version\":1"));
    free(text);

    mod_t a2 = {0}, b2 = {0};
    sd = open_sd(&f, "hoodi", ROOT_A, &a2, &b2);
    assert_int_equal(bm_statedir_load(sd), 2);
    assert_string_equal(a2.got, "{\"value\":8}");
    assert_string_equal(b2.got, "{\"value\":9}");
    close_sd(&f, sd);
    fx_dispose(&f);
}

static void test_periodic_and_final_saves(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f);
    mod_t a = {.value = 1};
    bm_statedir_t *sd = open_sd(&f, "hoodi", NULL, &a, NULL);
    bm_statedir_start(sd);
    bm_clock_manual_advance(f.clock, 999);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    assert_int_equal(bm_statedir_writes(sd), 0);
    bm_clock_manual_advance(f.clock, 1);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    assert_int_equal(bm_statedir_writes(sd), 1);
    a.value = 2;
    bm_statedir_stop(sd); /* the shutdown save */
    assert_int_equal(bm_statedir_writes(sd), 2);
    bm_statedir_stop(sd); /* idempotent */
    uv_run(&f.loop, UV_RUN_DEFAULT);
    bm_statedir_free(sd);
    char *text = read_text(f.path);
    assert_non_null(strstr(text, "{\"value\":2}"));
    free(text);
    fx_dispose(&f);
}

/* Each bad file: load reports it, restores nothing, keeps it as state.json.bad. */
static void expect_ignored(fx_t *f, const char *network, const char *genesis, const char *text)
{
    write_text(f->path, text);
    mod_t a = {0};
    bm_statedir_t *sd = open_sd(f, network, genesis, &a, NULL);
    assert_true(bm_statedir_load(sd) < 0);
    assert_int_equal(a.imports, 0);
    char bad[160];
    snprintf(bad, sizeof bad, "%s.bad", f->path);
    assert_true(exists(bad));
    assert_false(exists(f->path));
    unlink(bad);
    close_sd(f, sd); /* starts empty and saves its own state */
    assert_true(exists(f->path));
    unlink(f->path);
}

static void test_bad_files_are_ignored(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f);
    const char *ok_head = "{\"format\":\"beaconmux-state\",\"version\":1,";
    char t[512];
    expect_ignored(&f, "hoodi", NULL, "{\"format\":\"beaconmux-state\",\"vers");
    expect_ignored(&f, "hoodi", NULL, "\x00\x01garbage");
    expect_ignored(&f, "hoodi", NULL, "[1,2,3]");
    expect_ignored(&f, "hoodi", NULL, "{\"format\":\"other\",\"version\":1}");
    snprintf(t, sizeof t, "%s\"network\":\"mainnet\",\"sections\":{\"a\":{}}}", ok_head);
    expect_ignored(&f, "hoodi", NULL, t);
    snprintf(t, sizeof t,
             "{\"format\":\"beaconmux-state\",\"version\":2,\"network\":\"hoodi\","
             "\"sections\":{}}");
    expect_ignored(&f, "hoodi", NULL, t);
    snprintf(t, sizeof t,
             "%s\"network\":\"hoodi\",\"genesisValidatorsRoot\":\"%s\",\"sections\":{}}", ok_head,
             ROOT_B);
    expect_ignored(&f, "hoodi", ROOT_A, t);
    snprintf(t, sizeof t, "%s\"network\":\"hoodi\",\"sections\":[]}", ok_head);
    expect_ignored(&f, "hoodi", NULL, t);

    /* unreadable: a directory where the file should be; reported, left alone */
    assert_int_equal(mkdir(f.path, 0700), 0);
    mod_t a = {0};
    bm_statedir_t *sd = open_sd(&f, "hoodi", NULL, &a, NULL);
    assert_int_equal(bm_statedir_load(sd), BM_EIO);
    assert_int_equal(a.imports, 0);
    assert_int_equal(bm_statedir_save(sd), BM_EIO); /* cannot replace a directory */
    assert_int_equal(bm_statedir_failures(sd), 1);
    close_sd(&f, sd);
    rmdir(f.path);

    /* a section a module refuses is skipped; the others are restored */
    snprintf(t, sizeof t,
             "%s\"network\":\"hoodi\",\"sections\":{\"a\":[1],\"b\":{\"x\":2},\"zz\":3}}", ok_head);
    write_text(f.path, t);
    mod_t ra = {.refuse = 1}, rb = {0};
    sd = open_sd(&f, "hoodi", NULL, &ra, &rb);
    assert_int_equal(bm_statedir_load(sd), 1);
    assert_int_equal(ra.imports, 1);
    assert_string_equal(rb.got, "{\"x\":2}");
    close_sd(&f, sd);
    fx_dispose(&f);
}

/* A full disk, played by the file size limit: the write fails, the old file stays whole. */
static void test_failed_write_keeps_the_old_file(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f);
    mod_t a = {.value = 1};
    bm_statedir_t *sd = open_sd(&f, "hoodi", NULL, &a, NULL);
    assert_int_equal(bm_statedir_save(sd), 0);
    char *before = read_text(f.path);

    static char big[200000];
    memset(big, 'x', sizeof big - 1);
    a.blob = big;
    struct rlimit old, small = {65536, 65536};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = bm_statedir_save(sd);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, BM_EIO);
    assert_int_equal(bm_statedir_failures(sd), 1);
    char *after = read_text(f.path);
    assert_string_equal(after, before);
    /* no temporary file is left behind */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", f.dir);
    assert_int_equal(system(cmd), 0);
    /* the next save, with room again, goes through */
    assert_int_equal(bm_statedir_save(sd), 0);
    free(before);
    free(after);
    a.blob = NULL;
    close_sd(&f, sd);
    fx_dispose(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_unchanged_saves),
        cmocka_unit_test(test_periodic_and_final_saves),
        cmocka_unit_test(test_bad_files_are_ignored),
        cmocka_unit_test(test_failed_write_keeps_the_old_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
