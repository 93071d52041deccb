/* SPDX-License-Identifier: MIT */
/*
 * config_rows: the macros that build the rows of the key table (config_keys.h), shared by
 * the files that hold sections of it (config_keys.c, config_edge.c), and the units their
 * bounds are written in. Internal to the configuration.
 *
 * One row per key; AT() refuses, at compile time, a field whose type is not the one its
 * kind stores. Sections come before the sections holding them.
 */
#ifndef BM_CONFIG_ROWS_H
#define BM_CONFIG_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "app/config_keys.h"

#define DURATION_MAX_MS 86400000u /* 24 hours: durations are uint32_t milliseconds */
#define KB ((uint64_t)1 << 10)
#define MB ((uint64_t)1 << 20)
#define GB ((uint64_t)1 << 30)

#define AT(T, f, type) (offsetof(T, f) + 0 * sizeof(char[_Generic(((T *)0)->f, type : 1)]))
#define D_MAX DURATION_MAX_MS

// clang-format off
#define DURATION(T, key, f, lo, hi, d)                                                             \
    {.name = key, .kind = BM_CFG_DURATION, .off = AT(T, f, uint32_t), .min = lo, .max = hi,        \
     .def = d}
#define DURATION_OPT(T, key, f, lo, hi)                                                            \
    {.name = key, .kind = BM_CFG_DURATION_OPT, .off = AT(T, f, uint32_t), .min = lo, .max = hi,    \
     .def = BM_CONFIG_UNSET}
#define SIZE(T, key, f, lo, hi, d)                                                                 \
    {.name = key, .kind = BM_CFG_SIZE, .off = AT(T, f, uint64_t), .min = lo, .max = hi, .def = d}
#define COUNT(T, key, f, lo, hi, d)                                                                \
    {.name = key, .kind = BM_CFG_COUNT, .off = AT(T, f, uint32_t), .min = lo, .max = hi, .def = d}
#define COUNT_INH(T, key, f, lo, hi)                                                               \
    {.name = key, .kind = BM_CFG_COUNT, .off = AT(T, f, uint32_t), .min = lo, .max = hi,           \
     .def = BM_CONFIG_UNSET, .flags = BM_CFG_INHERIT}
#define DECIMAL(T, key, f, lo, hi, d)                                                              \
    {.name = key, .kind = BM_CFG_DECIMAL, .off = AT(T, f, uint32_t), .min = lo, .max = hi, .def = d}
#define DECIMAL_INH(T, key, f, lo, hi)                                                             \
    {.name = key, .kind = BM_CFG_DECIMAL, .off = AT(T, f, uint32_t), .min = lo, .max = hi,         \
     .def = BM_CONFIG_UNSET, .flags = BM_CFG_INHERIT}
#define STRINGS(T, key, f, count, most, check)                                                     \
    {.name = key, .kind = BM_CFG_STRINGS, .off = AT(T, f, char **), .aux = AT(T, count, size_t),   \
     .max = most, .problem = check}
#define STRINGS_DEF(T, key, f, count, most, check, d)                                              \
    {.name = key, .kind = BM_CFG_STRINGS, .off = AT(T, f, char **), .aux = AT(T, count, size_t),   \
     .max = most, .problem = check, .def_list = d}
#define BOOL(T, key, f, d)                                                                         \
    {.name = key, .kind = BM_CFG_BOOL, .off = AT(T, f, bool), .def = d}
#define ENUM(T, key, f, type, e, d)                                                                \
    {.name = key, .kind = BM_CFG_ENUM, .off = AT(T, f, type), .names = &e, .def = d}
#define LISTEN(T, key, host, port, dhost, dport)                                                   \
    {.name = key, .kind = BM_CFG_LISTEN, .off = AT(T, host, char *),                               \
     .aux = AT(T, port, uint16_t), .def_text = dhost, .def = dport}
#define ROOT(T, key, f) {.name = key, .kind = BM_CFG_ROOT, .off = AT(T, f, char *)}
#define PATH(T, key, f) {.name = key, .kind = BM_CFG_PATH, .off = AT(T, f, char *)}
#define TEXT(T, key, f, check, fl)                                                                 \
    {.name = key, .kind = BM_CFG_TEXT, .off = AT(T, f, char *), .problem = check, .flags = fl}
#define TEXT_DEF(T, key, f, check, fl, d)                                                          \
    {.name = key, .kind = BM_CFG_TEXT, .off = AT(T, f, char *), .problem = check, .flags = fl,      \
     .def_text = d}
#define SECTION(T, key, f, S, sec)                                                                 \
    {.name = key, .kind = BM_CFG_SECTION, .off = AT(T, f, S), .sub = &sec}
#define LIST(T, key, f, E, count, sec, most)                                                       \
    {.name = key, .kind = BM_CFG_LIST, .off = AT(T, f, E *), .aux = AT(T, count, size_t),          \
     .sub = &sec, .max = most}
#define MAP(T, key, f, count, m)                                                                   \
    {.name = key, .kind = BM_CFG_MAP, .off = AT(T, f, bm_config_header_t *),                       \
     .aux = AT(T, count, size_t), .map = &m}
#define ROWS(rows)                                                                                 \
    (sizeof rows / sizeof rows[0] +                                                                \
     0 * sizeof(char[sizeof rows / sizeof rows[0] <= BM_CFG_MAX_KEYS ? 1 : -1]))
#define SECTION_OF(T, rows, fin) {rows, ROWS(rows), sizeof(T), fin}
// clang-format on

#endif /* BM_CONFIG_ROWS_H */
