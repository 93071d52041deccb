/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the text observe writes from what clients and nodes send: the access
 * log's masking of a request target (bm_access_mask_target) and the exposition's label
 * values (observe/expo.h). The whole input is both the target and the label value.
 *
 * Properties (a __builtin_trap when one fails):
 *   - masking is bounded (NUL-terminated within its buffer, however long the input), keeps
 *     the path's slashes and the query's separators in place (it only replaces segments and
 *     values by "***"), never shows a value of a query parameter whose name says it is a
 *     secret, and masking what it wrote changes nothing more;
 *   - a sample line with the input as a label value is one line, ends in a newline, is valid
 *     UTF-8, holds no unescaped double quote inside the value, and its value reads back (by
 *     the exposition's escapes) as at most BM_EXPO_LABEL_MAX bytes.
 * ASan and UBSan watch every run for out-of-bounds access and undefined behaviour.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "observe/access.h"
#include "observe/expo.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* The count of `c` in s[0..n). */
static size_t count(const char *s, size_t n, char c)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == c;
    return k;
}

static bool secret(const char *s, size_t n)
{
    static const char *const words[] = {"key",  "token",     "secret",     "password",
                                        "auth", "signature", "credential", "passwd"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        for (size_t i = 0; i + strlen(words[k]) <= n; i++)
            if (strncasecmp(s + i, words[k], strlen(words[k])) == 0)
                return true;
    return false;
}

static void check_mask(const char *in)
{
    char out[4096], again[4096];
    size_t n = bm_access_mask_target(in, out, sizeof out);
    CHECK(n < sizeof out && out[n] == '\0' && strlen(out) == n);
    CHECK(bm_access_mask_target(out, again, sizeof again) == n && strcmp(out, again) == 0);
    if (strlen(in) + 1 >= sizeof out || n + 1 >= sizeof out)
        return; /* cut to fit: the positions below hold for whole targets (masking can make a
                   target longer, an empty secret value becoming "***", so the output is
                   judged too) */
    const char *qi = strchr(in, '?'), *qo = strchr(out, '?');
    CHECK((qi == NULL) == (qo == NULL));
    size_t pi = qi ? (size_t)(qi - in) : strlen(in), po = qo ? (size_t)(qo - out) : n;
    CHECK(count(in, pi, '/') == count(out, po, '/'));
    if (!qi)
        return;
    CHECK(count(qi, strlen(qi), '&') == count(qo, strlen(qo), '&'));
    for (const char *p = qo + 1; *p;) { /* every secret's value is "***" */
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq && secret(p, (size_t)(eq - p)))
            CHECK((size_t)(p + len - eq - 1) == 3 && memcmp(eq + 1, "***", 3) == 0);
        if (!amp)
            break;
        p = amp + 1;
    }
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
                 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                                : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

static void check_label(const char *in)
{
    bm_str_t o = BM_STR_INIT;
    bm_label_t l[] = {{"v", in}};
    bm_expo_u64(&o, "m", l, 1, 7);
    const char *s = bm_str_data(&o);
    size_t n = bm_str_len(&o);
    if (o.oom) {
        bm_str_dispose(&o);
        return;
    }
    CHECK(n >= 10 && memcmp(s, "m{v=\"", 5) == 0 && memcmp(s + n - 5, "\"} 7\n", 5) == 0);
    CHECK(count(s, n, '\n') == 1);
    for (size_t i = 0; i < n;) {
        size_t k = utf8((const unsigned char *)s + i, n - i);
        CHECK(k > 0);
        i += k;
    }
    size_t raw = 0; /* the value, read back */
    for (size_t i = 5; i < n - 5; i++) {
        if (s[i] == '\\') {
            CHECK(s[i + 1] == '\\' || s[i + 1] == '"' || s[i + 1] == 'n');
            i++;
        } else {
            CHECK(s[i] != '"');
        }
        raw++;
    }
    CHECK(raw <= BM_EXPO_LABEL_MAX);
    bm_str_dispose(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *in = malloc(size + 1);
    if (!in)
        return 0;
    memcpy(in, data, size);
    in[size] = '\0'; /* a NUL ends the string, as in C */
    check_mask(in);
    check_label(in);
    free(in);
    return 0;
}
