/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config: arbitrary bytes as a configuration file, loaded from memory with a fixed,
 * fake environment (so no run depends on the machine's variables).
 *
 * Properties checked on every input:
 *   - no crash, no leak, no undefined behaviour (ASan, LSan, UBSan);
 *   - a failure always comes with a message naming the file ("fuzz:...");
 *   - the same text always gives the same result, and a text that loads dumps to YAML that
 *     loads back to the very same configuration (the dump escapes '$', quotes, control
 *     characters); the masked dump loads too.
 * The "split the input anywhere" property of the byte parsers does not apply here: a
 * configuration file is always read whole, and the incremental parsing is libyaml's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/config.h"

static const char *fake_env(void *ud, const char *name)
{
    (void)ud;
    if (strcmp(name, "A") == 0)
        return "1s";
    if (strcmp(name, "B") == 0)
        return "http://u:p@h:1/x";
    if (strcmp(name, "S") == 0)
        return "s$e#c: \"r\\ '";
    if (strcmp(name, "NL") == 0)
        return "x\ny";
    if (strcmp(name, "E") == 0)
        return "";
    return NULL;
}

static char *dump(const bm_config_t *cfg, bool mask)
{
    bm_str_t s = BM_STR_INIT;
    if (bm_config_dump(cfg, mask, &s) != 0)
        abort();
    char *r = strdup(bm_str_data(&s));
    bm_str_dispose(&s);
    if (!r)
        abort();
    return r;
}

static void check_error(const bm_config_err_t *err)
{
    if (strncmp(err->msg, "fuzz:", 5) != 0) {
        fprintf(stderr, "bad error message: \"%s\"\n", err->msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bm_config_err_t err, err2;
    bm_config_t *a = bm_config_parse((const char *)data, size, "fuzz", fake_env, NULL, &err);
    bm_config_t *b = bm_config_parse((const char *)data, size, "fuzz", fake_env, NULL, &err2);
    if (!a || !b) {
        if (a || b || strcmp(err.msg, err2.msg) != 0)
            abort(); /* not deterministic */
        check_error(&err);
        return 0;
    }
    (void)bm_config_validate(a, &err);

    char *da = dump(a, false), *db = dump(b, false);
    if (strcmp(da, db) != 0)
        abort();
    bm_config_t *c = bm_config_parse(da, strlen(da), "dump", NULL, NULL, &err);
    if (!c) {
        fprintf(stderr, "dump does not load: %s\n%s\n", err.msg, da);
        abort();
    }
    char *dc = dump(c, false);
    if (strcmp(da, dc) != 0) {
        fprintf(stderr, "round trip differs:\n%s\n---\n%s\n", da, dc);
        abort();
    }
    char *dm = dump(a, true);
    bm_config_t *m = bm_config_parse(dm, strlen(dm), "masked", NULL, NULL, &err);
    if (!m) {
        fprintf(stderr, "masked dump does not load: %s\n%s\n", err.msg, dm);
        abort();
    }
    bm_config_free(m);
    free(dm);
    free(dc);
    free(da);
    free(db);
    bm_config_free(c);
    bm_config_free(b);
    bm_config_free(a);
    return 0;
}
