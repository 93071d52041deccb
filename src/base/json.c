/* SPDX-License-Identifier: MIT */
/*
 * json: a strict RFC 8259 scanner (validation and compaction in one pass, no tree), the
 * json-c wrapper that builds trees from validated text, JSON-pointer accessors, hex and
 * bit helpers, and the canonical form with SipHash-2-4.
 *
 * The scanner is a pushdown automaton with an explicit stack of open brackets, so deep
 * input cannot exhaust the C stack and every refusal carries its byte offset. json-c is
 * the only library here, and its error codes do not leave this file.
 */
#include "base/json.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/err.h"

/* ---- the scanner --------------------------------------------------------------------- */

typedef enum {
    S_VALUE,          /* a value must follow */
    S_VALUE_OR_CLOSE, /* right after '[': a value or ']' */
    S_KEY_OR_CLOSE,   /* right after '{': a key or '}' */
    S_KEY,            /* after ',' in an object: a key */
    S_COLON,          /* after a key */
    S_AFTER_VALUE,    /* a value ended: ',' or a closing bracket, or the end at top level */
} scan_state_t;

struct picker;

typedef struct {
    const char *s;
    size_t n;
    size_t i;
    bm_str_t *out;     /* compact output, or NULL to validate only */
    struct picker *pk; /* the fields bm_json_pick reads, or NULL */
    int depth;
    char stack[BM_JSON_MAX_DEPTH];
    const char *err;
    size_t err_off;
} scan_t;

static bool fail(scan_t *sc, size_t at, const char *why)
{
    sc->err = why;
    sc->err_off = at;
    return false;
}

static void emit(scan_t *sc, size_t from, size_t to)
{
    if (sc->out && to > from)
        bm_str_append(sc->out, sc->s + from, to - from);
}

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The bytes among the eight at p that end a run of plain string bytes ('"', '\\', below
 * 0x20), as the high bit of each (the "has zero" and "has less than" word tricks; the
 * lowest flag is exact, a borrow can only flag bytes above it). A node's answer is mostly
 * long hex strings (roots, signatures): byte by byte a quarter of reading it. */
static inline uint64_t string_stops8(const char *p)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    uint64_t x;
    memcpy(&x, p, 8);
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    return ((x - ones * 0x20) & ~x & highs) | ((q - ones) & ~q & highs) | ((b - ones) & ~b & highs);
}

static bool scan_string(scan_t *sc)
{
    size_t start = sc->i;
    size_t i = start + 1; /* past the opening quote */
    while (i < sc->n) {
        if (sc->n - i >= 8) { /* to the first byte that is not plain, eight at a time */
            uint64_t stops = string_stops8(sc->s + i);
            if (!stops) {
                i += 8;
                continue;
            }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            i += (size_t)__builtin_ctzll(stops) / 8; /* the first byte in memory is the lowest */
#endif
        }
        unsigned char c = (unsigned char)sc->s[i];
        if (c == '"') {
            sc->i = i + 1;
            emit(sc, start, sc->i);
            return true;
        }
        if (c < 0x20)
            return fail(sc, i, "control character in string");
        if (c == '\\') {
            if (i + 1 >= sc->n)
                break;
            char e = sc->s[i + 1];
            if (e == 'u') {
                for (size_t k = 2; k < 6; k++) {
                    if (i + k >= sc->n)
                        return fail(sc, sc->n, "unexpected end of text in string");
                    if (!is_hex(sc->s[i + k]))
                        return fail(sc, i, "bad \\u escape in string");
                }
                i += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0')
                return fail(sc, i, "bad escape in string");
            i += 2;
            continue;
        }
        i++;
    }
    return fail(sc, sc->n, "unexpected end of text in string");
}

/* Compares the digit string d[0..n) (no leading zeros) with the decimal `limit`. */
static bool digits_exceed(const char *d, size_t n, const char *limit)
{
    size_t ln = strlen(limit);
    if (n != ln)
        return n > ln;
    return memcmp(d, limit, n) > 0;
}

static bool scan_number(scan_t *sc)
{
    size_t start = sc->i, i = start;
    bool neg = false, integer = true;
    if (sc->s[i] == '-') {
        neg = true;
        i++;
    }
    if (i >= sc->n || !is_digit(sc->s[i]))
        return fail(sc, i, "bad number");
    size_t int_start = i;
    if (sc->s[i] == '0') {
        i++;
        if (i < sc->n && is_digit(sc->s[i]))
            return fail(sc, i, "leading zero in number");
    } else {
        while (i < sc->n && is_digit(sc->s[i]))
            i++;
    }
    size_t int_end = i;
    if (i < sc->n && sc->s[i] == '.') {
        integer = false;
        i++;
        if (i >= sc->n || !is_digit(sc->s[i]))
            return fail(sc, i, "bad fraction in number");
        while (i < sc->n && is_digit(sc->s[i]))
            i++;
    }
    if (i < sc->n && (sc->s[i] == 'e' || sc->s[i] == 'E')) {
        integer = false;
        i++;
        if (i < sc->n && (sc->s[i] == '+' || sc->s[i] == '-'))
            i++;
        if (i >= sc->n || !is_digit(sc->s[i]))
            return fail(sc, i, "bad exponent in number");
        while (i < sc->n && is_digit(sc->s[i]))
            i++;
    }
    /* json-c would clamp an integer beyond 64 bits to the nearest bound without telling;
     * refuse it instead. */
    if (integer) {
        const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
        if (digits_exceed(sc->s + int_start, int_end - int_start, limit))
            return fail(sc, start, "integer out of 64-bit range");
    }
    sc->i = i;
    emit(sc, start, i);
    return true;
}

static bool scan_literal(scan_t *sc)
{
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t ln = strlen(lits[k]);
        if (sc->s[sc->i] == lits[k][0]) {
            if (sc->n - sc->i < ln || memcmp(sc->s + sc->i, lits[k], ln) != 0)
                return fail(sc, sc->i, "bad literal");
            emit(sc, sc->i, sc->i + ln);
            sc->i += ln;
            return true;
        }
    }
    return fail(sc, sc->i, "unexpected character");
}

static void pick_open(scan_t *sc, char open);

static bool push(scan_t *sc, char open)
{
    if (sc->depth >= BM_JSON_MAX_DEPTH)
        return fail(sc, sc->i, "nesting too deep");
    sc->stack[sc->depth++] = open;
    if (sc->pk)
        pick_open(sc, open);
    emit(sc, sc->i, sc->i + 1);
    sc->i++;
    return true;
}

static void pop(scan_t *sc)
{
    sc->depth--;
    emit(sc, sc->i, sc->i + 1);
    sc->i++;
}

static bool scan_value(scan_t *sc, scan_state_t *st)
{
    char c = sc->s[sc->i];
    switch (c) {
    case '{':
        *st = S_KEY_OR_CLOSE;
        return push(sc, '{');
    case '[':
        *st = S_VALUE_OR_CLOSE;
        return push(sc, '[');
    case '"':
        *st = S_AFTER_VALUE;
        return scan_string(sc);
    default:
        *st = S_AFTER_VALUE;
        if (c == '-' || is_digit(c))
            return scan_number(sc);
        return scan_literal(sc);
    }
}

static uint32_t pick_value(scan_t *sc);
static void pick_key(scan_t *sc, size_t from, size_t to);
static void pick_leaf(scan_t *sc, uint32_t leaf, size_t at);

/* A value where the scanner expects one: the picker is told where it starts and, when it
 * is a field, where it ends. */
static bool value(scan_t *sc, scan_state_t *st)
{
    if (!sc->pk)
        return scan_value(sc, st);
    size_t at = sc->i;
    uint32_t leaf = pick_value(sc);
    if (!scan_value(sc, st))
        return false;
    if (leaf)
        pick_leaf(sc, leaf, at);
    return true;
}

/* Validates s[0..n) and, when out is set, appends its compact form; with pk, reads its
 * fields. */
static bool scan(scan_t *sc, const char *s, size_t n, bm_str_t *out, struct picker *pk)
{
    memset(sc, 0, sizeof *sc);
    sc->s = s;
    sc->n = n;
    sc->out = out;
    sc->pk = pk;
    scan_state_t st = S_VALUE;
    bool seen = false;
    for (;;) {
        while (sc->i < n &&
               (s[sc->i] == ' ' || s[sc->i] == '\t' || s[sc->i] == '\n' || s[sc->i] == '\r'))
            sc->i++;
        if (sc->i == n) {
            if (st == S_AFTER_VALUE && sc->depth == 0)
                return true;
            return fail(sc, n, seen ? "unexpected end of text" : "empty document");
        }
        seen = true;
        char c = s[sc->i];
        switch (st) {
        case S_VALUE_OR_CLOSE:
            if (c == ']') {
                pop(sc);
                st = S_AFTER_VALUE;
                break;
            }
            /* fall through */
        case S_VALUE:
            if (!value(sc, &st))
                return false;
            break;
        case S_KEY_OR_CLOSE:
            if (c == '}') {
                pop(sc);
                st = S_AFTER_VALUE;
                break;
            }
            /* fall through */
        case S_KEY:
            if (c != '"')
                return fail(sc, sc->i, "expected a string key");
            size_t key = sc->i;
            if (!scan_string(sc))
                return false;
            if (sc->pk)
                pick_key(sc, key + 1, sc->i - 1);
            st = S_COLON;
            break;
        case S_COLON:
            if (c != ':')
                return fail(sc, sc->i, "expected ':'");
            emit(sc, sc->i, sc->i + 1);
            sc->i++;
            st = S_VALUE;
            break;
        case S_AFTER_VALUE:
            if (sc->depth == 0)
                return fail(sc, sc->i, "text after the JSON value");
            if (c == ',') {
                emit(sc, sc->i, sc->i + 1);
                sc->i++;
                st = sc->stack[sc->depth - 1] == '{' ? S_KEY : S_VALUE;
            } else if ((c == '}' && sc->stack[sc->depth - 1] == '{') ||
                       (c == ']' && sc->stack[sc->depth - 1] == '[')) {
                pop(sc);
            } else {
                return fail(sc, sc->i, "expected ',' or a closing bracket");
            }
            break;
        }
    }
}

static void set_err(bm_json_error_t *err, size_t off, const char *msg)
{
    if (!err)
        return;
    err->offset = off;
    snprintf(err->msg, sizeof err->msg, "%s", msg);
}

/* ---- parse ------------------------------------------------------------------------- */

/*
 * One json-c tokener per thread, reset after each document rather than made anew: making
 * one (its depth stack, its buffer) cost about as much as parsing a duty answer. Freed when
 * the thread ends.
 */
static pthread_key_t g_tok_key;
static pthread_once_t g_tok_once = PTHREAD_ONCE_INIT;
static bool g_tok_key_ok;

static void tok_free(void *tok)
{
    json_tokener_free(tok);
}

static void tok_key_init(void)
{
    g_tok_key_ok = pthread_key_create(&g_tok_key, tok_free) == 0;
}

static struct json_tokener *tokener(void)
{
    pthread_once(&g_tok_once, tok_key_init);
    if (!g_tok_key_ok)
        return NULL;
    struct json_tokener *tok = pthread_getspecific(g_tok_key);
    if (!tok) {
        /* json-c's depth counts the top level too. */
        tok = json_tokener_new_ex(BM_JSON_MAX_DEPTH + 1);
        if (!tok)
            return NULL;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        if (pthread_setspecific(g_tok_key, tok) != 0) {
            json_tokener_free(tok);
            return NULL;
        }
    }
    return tok;
}

int bm_json_parse(const void *p, size_t len, size_t max_len, struct json_object **out,
                  bm_json_error_t *err)
{
    *out = NULL;
    if (max_len == 0)
        max_len = BM_JSON_DEFAULT_MAX;
    if (max_len > (size_t)INT_MAX - 1)
        max_len = (size_t)INT_MAX - 1; /* json-c takes an int length */
    if (len > max_len) {
        char msg[96];
        snprintf(msg, sizeof msg, "document of %zu bytes exceeds the limit of %zu", len, max_len);
        set_err(err, max_len, msg);
        return BM_ETOOBIG;
    }
    if (!p && len)
        return BM_EINVAL;
    scan_t sc;
    if (!scan(&sc, p ? p : "", len, NULL, NULL)) {
        set_err(err, sc.err_off, sc.err);
        return BM_EINVAL;
    }
    struct json_tokener *tok = tokener();
    if (!tok) {
        set_err(err, 0, "out of memory");
        return BM_ENOMEM;
    }
    struct json_object *obj = json_tokener_parse_ex(tok, p, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (jerr == json_tokener_continue) {
        /* A top-level number is complete only when json-c sees its end. */
        obj = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
    }
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_reset(tok);
    if (jerr != json_tokener_success) {
        json_object_put(obj);
        /* The text passed our scanner, so this is json-c running out of memory or a
         * json-c rule stricter than RFC 8259; json-c 0.16 does not tell them apart. */
        set_err(err, end, json_tokener_error_desc(jerr));
        return BM_EINVAL;
    }
    *out = obj;
    return 0;
}

int bm_json_parse_buf(const bm_buf_t *b, size_t max_len, struct json_object **out,
                      bm_json_error_t *err)
{
    if (!b) {
        *out = NULL;
        set_err(err, 0, "no buffer");
        return BM_EINVAL;
    }
    return bm_json_parse(b->data, b->len, max_len, out, err);
}

int bm_json_compact(const char *text, size_t len, bm_str_t *out, bm_json_error_t *err)
{
    size_t before = bm_str_len(out);
    scan_t sc;
    bool ok = scan(&sc, text ? text : "", text ? len : 0, out, NULL);
    if (ok && !out->oom)
        return 0;
    if (out->b) {
        out->b->len = before;
        out->b->data[before] = '\0';
    }
    if (!ok) {
        set_err(err, sc.err_off, sc.err);
        return BM_EINVAL;
    }
    set_err(err, 0, "out of memory");
    return BM_ENOMEM;
}

/* ---- pick: fields without a tree ---------------------------------------------------------- */

/*
 * The picker follows the scanner: `match[d]` holds the fields (a bit each) whose pointer
 * leads through the object open at depth d, so only the keys of those objects are compared.
 * A member's value first clears the fields it is or leads to (a member named again replaces
 * the earlier one, as json-c's object does), then sets those it is.
 */
typedef struct picker {
    bm_json_pick_t *f;
    size_t n;
    uint8_t nseg[BM_JSON_PICK_MAX];
    const char *seg[BM_JSON_PICK_MAX][BM_JSON_PICK_MAX_SEGMENTS];
    size_t seglen[BM_JSON_PICK_MAX][BM_JSON_PICK_MAX_SEGMENTS];
    uint32_t match[BM_JSON_MAX_DEPTH + 1];
    uint32_t member; /* fields the member whose key was just read is or leads to */
    uint32_t into;   /* fields the value being opened leads to */
} picker_t;

/* The fields a value at the scanner's position is (returned) or leads to (pk->into). */
static uint32_t pick_value(scan_t *sc)
{
    picker_t *pk = sc->pk;
    size_t d = (size_t)sc->depth;
    uint32_t m = d == 0 ? (uint32_t)((1ull << pk->n) - 1) : pk->member, leaf = 0;
    pk->member = 0;
    for (size_t k = 0; k < pk->n; k++) {
        if (!(m >> k & 1))
            continue;
        pk->f[k].at = NULL;
        pk->f[k].len = 0;
        pk->f[k].kind = 0;
        if (pk->nseg[k] == d)
            leaf |= 1u << k;
    }
    pk->into = m & ~leaf;
    return leaf;
}

/* A bracket opened at depth sc->depth: an object holds what its value leads to, an array
 * nothing (a segment names a member, never an index). */
static void pick_open(scan_t *sc, char open)
{
    picker_t *pk = sc->pk;
    pk->match[sc->depth] = open == '{' ? pk->into : 0;
    pk->into = 0;
}

/* A member's key s[from..to) in the object open at sc->depth. */
static void pick_key(scan_t *sc, size_t from, size_t to)
{
    picker_t *pk = sc->pk;
    size_t d = (size_t)sc->depth, n = to - from;
    uint32_t m = pk->match[d];
    pk->member = 0;
    for (size_t k = 0; m; k++, m >>= 1)
        if ((m & 1) && pk->seglen[k][d - 1] == n && memcmp(pk->seg[k][d - 1], sc->s + from, n) == 0)
            pk->member |= 1u << k;
}

/* The fields `leaf` are the value that started at `at` (scanned up to sc->i). */
static void pick_leaf(scan_t *sc, uint32_t leaf, size_t at)
{
    picker_t *pk = sc->pk;
    char c = sc->s[at];
    const char *v = sc->s + at;
    size_t len = sc->i - at;
    char kind = c;
    if (c == '"') {
        v++;
        len -= 2;
    } else if (c == '-' || is_digit(c)) {
        kind = '0';
    } else if (c == '{' || c == '[') {
        len = 0;
    }
    for (size_t k = 0; leaf; k++, leaf >>= 1) {
        if (leaf & 1) {
            pk->f[k].at = v;
            pk->f[k].len = len;
            pk->f[k].kind = kind;
        }
    }
}

/* Splits each field's pointer into its segments; false for a pointer pick cannot follow. */
static bool pick_init(picker_t *pk, bm_json_pick_t *f, size_t n)
{
    if (n > BM_JSON_PICK_MAX)
        return false;
    pk->f = f;
    pk->n = n;
    pk->member = pk->into = 0;
    for (size_t k = 0; k < n; k++) {
        const char *p = f[k].ptr;
        f[k].at = NULL;
        f[k].len = 0;
        f[k].kind = 0;
        if (!p || p[0] != '/')
            return false;
        uint8_t ns = 0;
        for (p++;; p++) {
            if (ns == BM_JSON_PICK_MAX_SEGMENTS)
                return false;
            /* the segment's length and whether it is all digits, in one pass: ~580 fewer
             * instructions per attestation_data answer than strcspn and strspn per segment
             * (callgrind: bm_json_pick 8.4k -> 7.8k, a race of its own 77.4k -> 75.7k) */
            size_t len = 0;
            bool digits = true;
            for (; p[len] && p[len] != '/'; len++) {
                if (p[len] == '~')
                    return false; /* an escape ("~0", "~1"): json-c's lookup reads it */
                digits = digits && is_digit(p[len]);
            }
            if (digits)
                return false; /* empty or all digits: json-c reads it as an array index */
            pk->seg[k][ns] = p;
            pk->seglen[k][ns++] = len;
            p += len;
            if (!*p)
                break;
        }
        pk->nseg[k] = ns;
    }
    return true;
}

int bm_json_pick(const void *p, size_t len, size_t max_len, bm_json_pick_t *f, size_t n)
{
    if (max_len == 0)
        max_len = BM_JSON_DEFAULT_MAX;
    if (max_len > (size_t)INT_MAX - 1)
        max_len = (size_t)INT_MAX - 1; /* bm_json_parse's limit, the same for both */
    if (len > max_len)
        return BM_ETOOBIG;
    if (!p && len)
        return BM_EINVAL;
    picker_t pk;
    if (!pick_init(&pk, f, n))
        return BM_EINVAL;
    if (len && memchr(p, '\\', len))
        return 1; /* escapes: json-c decodes them, and so must the caller's reading */
    scan_t sc;
    if (!scan(&sc, p ? p : "", len, NULL, &pk)) {
        for (size_t k = 0; k < n; k++)
            f[k].at = NULL;
        return BM_EINVAL;
    }
    return 0;
}

int bm_json_pick_u64(const bm_json_pick_t *f, uint64_t *out)
{
    if (!f->at)
        return BM_ENOTFOUND;
    if (f->kind == '"')
        return bm_json_parse_u64(f->at, f->len, out);
    if (f->kind != '0' || memchr(f->at, '.', f->len) || memchr(f->at, 'e', f->len) ||
        memchr(f->at, 'E', f->len))
        return BM_EINVAL; /* json-c reads a fraction or an exponent as a double */
    if (f->at[0] == '-') {
        /* json-c keeps an integer; only -0 is not negative */
        if (f->len != 2 || f->at[1] != '0')
            return BM_EINVAL;
        *out = 0;
        return 0;
    }
    return bm_json_parse_u64(f->at, f->len, out); /* the scanner refused above 2^64-1 */
}

int bm_json_pick_root(const bm_json_pick_t *f, uint8_t out[32])
{
    if (!f->at)
        return BM_ENOTFOUND;
    if (f->kind != '"' || f->len != BM_ROOT_HEX_LEN)
        return BM_EINVAL;
    uint8_t tmp[32]; /* out is written only on success, as bm_hex_to_root does */
    size_t n;
    if (bm_hex_decode(f->at, f->len, tmp, sizeof tmp, &n) != 0)
        return BM_EINVAL;
    memcpy(out, tmp, 32);
    return 0;
}

int bm_json_pick_bool(const bm_json_pick_t *f, bool *out)
{
    if (!f->at)
        return BM_ENOTFOUND;
    if (f->kind != 't' && f->kind != 'f')
        return BM_EINVAL;
    *out = f->kind == 't';
    return 0;
}

/* ---- field access ------------------------------------------------------------------ */

static int lookup(struct json_object *obj, const char *ptr, struct json_object **res);

struct json_object *bm_json_get(struct json_object *obj, const char *ptr)
{
    struct json_object *res = NULL;
    if (lookup(obj, ptr, &res) != 0)
        return NULL;
    return res;
}

const char *bm_json_get_str(struct json_object *obj, const char *ptr)
{
    struct json_object *v = bm_json_get(obj, ptr);
    if (!v || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

int bm_json_parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (!s || len == 0)
        return BM_EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]))
            return BM_EINVAL;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return BM_EINVAL;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Longest member name walk() looks up itself. */
#define WALK_KEY_MAX 64

/*
 * json_pointer_get for the pointers the policies use (object members only, no '~'
 * escape), without its copy of the pointer and per-segment allocations: a race reads seven
 * fields of every answer, and json_pointer_get cost more than the rest of the lookup.
 * Returns 0 (found, *res set; a JSON null is found with *res == NULL), BM_ENOTFOUND, or 1
 * when it cannot tell (an array or a non-object on the way, an escape, a long name): then
 * json_pointer_get decides, with the same result it always gave.
 */
static int walk(struct json_object *cur, const char *ptr, struct json_object **res)
{
    if (ptr[0] == '\0') {
        *res = cur;
        return 0;
    }
    if (ptr[0] != '/')
        return 1;
    char key[WALK_KEY_MAX];
    for (const char *p = ptr + 1;;) {
        size_t n = strcspn(p, "/~");
        if (p[n] == '~' || n >= sizeof key || !json_object_is_type(cur, json_type_object))
            return 1;
        memcpy(key, p, n);
        key[n] = '\0';
        struct json_object *next = NULL;
        if (!json_object_object_get_ex(cur, key, &next))
            return BM_ENOTFOUND;
        cur = next;
        if (p[n] == '\0') {
            *res = cur;
            return 0;
        }
        p += n + 1;
    }
}

/* Looks up ptr; BM_ENOTFOUND when absent. A JSON null is found, with *res == NULL. */
static int lookup(struct json_object *obj, const char *ptr, struct json_object **res)
{
    *res = NULL;
    if (!obj || !ptr)
        return BM_ENOTFOUND;
    int rc = walk(obj, ptr, res);
    if (rc != 1)
        return rc;
    *res = NULL;
    if (json_pointer_get(obj, ptr, res) != 0)
        return BM_ENOTFOUND;
    return 0;
}

int bm_json_get_u64(struct json_object *obj, const char *ptr, uint64_t *out)
{
    struct json_object *v;
    int rc = lookup(obj, ptr, &v);
    if (rc != 0)
        return rc;
    if (!v)
        return BM_EINVAL;
    switch (json_object_get_type(v)) {
    case json_type_string:
        return bm_json_parse_u64(json_object_get_string(v), (size_t)json_object_get_string_len(v),
                                 out);
    case json_type_int:
        /* json-c keeps a non-negative integer exactly as int64 or uint64; get_int64 is
         * negative only for negative values (a uint64 above INT64_MAX reads INT64_MAX). */
        if (json_object_get_int64(v) < 0)
            return BM_EINVAL;
        *out = json_object_get_uint64(v);
        return 0;
    default:
        return BM_EINVAL;
    }
}

int bm_json_get_bool(struct json_object *obj, const char *ptr, bool *out)
{
    struct json_object *v;
    int rc = lookup(obj, ptr, &v);
    if (rc != 0)
        return rc;
    if (!v || !json_object_is_type(v, json_type_boolean))
        return BM_EINVAL;
    *out = json_object_get_boolean(v) != 0;
    return 0;
}

int bm_json_get_root(struct json_object *obj, const char *ptr, uint8_t out[32])
{
    struct json_object *v;
    int rc = lookup(obj, ptr, &v);
    if (rc != 0)
        return rc;
    if (!v || !json_object_is_type(v, json_type_string))
        return BM_EINVAL;
    if ((size_t)json_object_get_string_len(v) != BM_ROOT_HEX_LEN)
        return BM_EINVAL; /* also refuses a string with an embedded NUL */
    return bm_hex_to_root(json_object_get_string(v), out);
}

/* ---- hex ------------------------------------------------------------------------------- */

/* Each byte's hex value plus one; 0 for a byte that is no hex digit. A table: every root
 * of every race answer is 64 digits, and the comparisons cost three times as much. */
static const uint8_t hex_plus1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

int bm_hexval(char c)
{
    return (int)hex_plus1[(unsigned char)c] - 1;
}

/* Checks "0x" + an even number of hex digits; returns the digit count or -1. */
static long hex_body(const char *s, size_t slen)
{
    if (!s || slen < 2 || s[0] != '0' || s[1] != 'x' || (slen - 2) % 2 != 0)
        return -1;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 2; i < slen; i++) {
        if (!hex_plus1[u[i]])
            return -1;
    }
    return (long)(slen - 2);
}

int bm_hex_decode(const char *s, size_t slen, uint8_t *out, size_t cap, size_t *outlen)
{
    if (!s || slen < 2 || s[0] != '0' || s[1] != 'x' || (slen - 2) % 2 != 0)
        return BM_EINVAL;
    size_t n = (slen - 2) / 2;
    const unsigned char *u = (const unsigned char *)s + 2;
    if (n > cap) /* too big only if it is hex at all */
        return hex_body(s, slen) < 0 ? BM_EINVAL : BM_ETOOBIG;
    /* One pass: decode every pair and remember whether a digit was none (a table value of
     * 0). Three roots in every race answer: checking first and decoding after read each
     * digit twice (about 800 instructions a root, callgrind; the one pass saved 2.2k of a race's
     * 78.9k, three answers of three roots each). */
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned hi = hex_plus1[u[2 * i]], lo = hex_plus1[u[2 * i + 1]];
        bad |= (hi - 1) | (lo - 1); /* a 0 wraps to all ones: bit 4 and up set */
        out[i] = (uint8_t)((hi - 1) << 4 | (lo - 1));
    }
    if (bad > 15)
        return BM_EINVAL; /* out holds garbage, as the contract allows on failure */
    *outlen = n;
    return 0;
}

int bm_hex_to_root(const char *s, uint8_t out[32])
{
    if (!s)
        return BM_EINVAL;
    size_t slen = strnlen(s, BM_ROOT_HEX_LEN + 1);
    if (slen != BM_ROOT_HEX_LEN)
        return BM_EINVAL;
    uint8_t tmp[32];
    size_t n;
    if (bm_hex_decode(s, slen, tmp, sizeof tmp, &n) != 0 || n != 32)
        return BM_EINVAL;
    memcpy(out, tmp, 32);
    return 0;
}

/* Writes "0x", the n bytes of p in lowercase hex and a NUL into out. */
static void put_hex_0x(char *out, const uint8_t *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    out[0] = '0';
    out[1] = 'x';
    for (size_t i = 0; i < n; i++) {
        out[2 + 2 * i] = hex[p[i] >> 4];
        out[3 + 2 * i] = hex[p[i] & 15];
    }
    out[2 + 2 * n] = '\0';
}

const char *bm_root_short(const uint8_t root[32], char out[BM_ROOT_SHORT_LEN + 1])
{
    put_hex_0x(out, root, 4);
    return out;
}

void bm_root_to_hex(const uint8_t root[32], char out[BM_ROOT_HEX_LEN + 1])
{
    put_hex_0x(out, root, 32);
}

bool bm_hex_root_eq(const char *a, const char *b)
{
    uint8_t ra[32], rb[32];
    if (bm_hex_to_root(a, ra) != 0 || bm_hex_to_root(b, rb) != 0)
        return false;
    return memcmp(ra, rb, 32) == 0;
}

/* ---- bits ------------------------------------------------------------------------------ */

static int hex_bits(const char *hex, size_t *count, uint8_t *last)
{
    if (!hex)
        return BM_EINVAL;
    size_t slen = strlen(hex);
    long digits = hex_body(hex, slen);
    if (digits <= 0)
        return BM_EINVAL;
    size_t c = 0;
    for (size_t i = 2; i < slen; i++)
        c += (size_t)__builtin_popcount((unsigned)bm_hexval(hex[i]));
    *count = c;
    *last = (uint8_t)(bm_hexval(hex[slen - 2]) << 4 | bm_hexval(hex[slen - 1]));
    return 0;
}

int bm_json_hex_bits_set(const char *hex, size_t *count)
{
    uint8_t last;
    size_t c;
    if (hex_bits(hex, &c, &last) != 0)
        return BM_EINVAL;
    *count = c;
    return 0;
}

int bm_json_hex_bitlist_bits_set(const char *hex, size_t *count, size_t *len_bits)
{
    uint8_t last;
    size_t c;
    if (hex_bits(hex, &c, &last) != 0 || last == 0)
        return BM_EINVAL;
    size_t bytes = (strlen(hex) - 2) / 2;
    int top = 31 - __builtin_clz(last);
    *count = c - 1;
    if (len_bits)
        *len_bits = (bytes - 1) * 8 + (size_t)top;
    return 0;
}

/* ---- canonical form and hash ------------------------------------------------------------ */

#define CANON_MAX_DEPTH 256

typedef struct {
    const char *key;
    struct json_object *val;
} member_t;

static int cmp_member(const void *a, const void *b)
{
    return strcmp(((const member_t *)a)->key, ((const member_t *)b)->key);
}

static int canon(struct json_object *o, bm_str_t *out, int depth)
{
    if (depth > CANON_MAX_DEPTH)
        return BM_EINVAL;
    switch (json_object_get_type(o)) {
    case json_type_null:
        bm_str_puts(out, "null");
        return 0;
    case json_type_boolean:
        bm_str_puts(out, json_object_get_boolean(o) ? "true" : "false");
        return 0;
    case json_type_int: {
        int64_t v = json_object_get_int64(o);
        if (v < 0)
            bm_str_printf(out, "%lld", (long long)v);
        else
            bm_str_u64(out, json_object_get_uint64(o));
        return 0;
    }
    case json_type_double:
        /* json-c keeps the text a parsed double came from. */
        bm_str_puts(out, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        return 0;
    case json_type_string:
        bm_str_json_string(out, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        return 0;
    case json_type_array: {
        size_t n = json_object_array_length(o);
        bm_str_putc(out, '[');
        for (size_t i = 0; i < n; i++) {
            if (i)
                bm_str_putc(out, ',');
            int rc = canon(json_object_array_get_idx(o, i), out, depth + 1);
            if (rc != 0)
                return rc;
        }
        bm_str_putc(out, ']');
        return 0;
    }
    case json_type_object: {
        size_t n = (size_t)json_object_object_length(o);
        member_t *m = n ? malloc(n * sizeof *m) : NULL;
        if (n && !m)
            return BM_ENOMEM;
        size_t k = 0;
        json_object_object_foreach(o, key, val)
        {
            if (k < n) {
                m[k].key = key;
                m[k].val = val;
                k++;
            }
        }
        if (k > 1)
            qsort(m, k, sizeof *m, cmp_member);
        bm_str_putc(out, '{');
        int rc = 0;
        for (size_t i = 0; i < k && rc == 0; i++) {
            if (i)
                bm_str_putc(out, ',');
            bm_str_json_string(out, m[i].key, strlen(m[i].key));
            bm_str_putc(out, ':');
            rc = canon(m[i].val, out, depth + 1);
        }
        free(m);
        if (rc == 0)
            bm_str_putc(out, '}');
        return rc;
    }
    }
    return BM_EINVAL;
}

int bm_json_canonical_string(struct json_object *obj, bm_str_t *out)
{
    int rc = canon(obj, out, 0);
    if (rc == 0 && out->oom)
        rc = BM_ENOMEM;
    return rc;
}

static const uint8_t default_key[16] = {0x62, 0x65, 0x61, 0x63, 0x6f, 0x6e, 0x6d, 0x75,
                                        0x78, 0x2d, 0x63, 0x61, 0x6e, 0x6f, 0x6e, 0x31};

int bm_json_canonical_hash(struct json_object *obj, const uint8_t key[16], uint64_t *out)
{
    bm_str_t s = BM_STR_INIT;
    int rc = bm_json_canonical_string(obj, &s);
    if (rc == 0)
        *out = bm_json_siphash(key ? key : default_key, bm_str_data(&s), bm_str_len(&s));
    bm_str_dispose(&s);
    return rc;
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

uint64_t bm_json_siphash(const uint8_t key[16], const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t k0 = load64(key), k1 = load64(key + 8);
    uint64_t v0 = k0 ^ 0x736f6d6570736575ULL;
    uint64_t v1 = k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ULL;
    uint64_t v3 = k1 ^ 0x7465646279746573ULL;
    size_t full = n - n % 8;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = load64(p + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < n % 8; i++)
        b |= (uint64_t)p[full + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
