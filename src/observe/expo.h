/* SPDX-License-Identifier: MIT */
/*
 * expo: the Prometheus text exposition format, version 0.0.4, as a writer into a string
 * builder. /metrics is written with it at scrape time; nothing here knows beaconmux.
 *
 * A family starts with bm_expo_family (its # HELP and # TYPE lines), then its samples follow
 * with the family's name (a histogram's with _bucket, _sum and _count added by
 * bm_expo_hist). The writer takes care of what a reader rejects or misreads:
 *   - label values are escaped (backslash, double quote, line feed), bytes that are not
 *     UTF-8 become '?', and a value longer than BM_EXPO_LABEL_MAX bytes is cut on a
 *     character boundary: whatever a node reports as its version cannot break a scrape or
 *     grow a series without bound;
 *   - HELP text escapes backslash and line feed;
 *   - numbers: integers exactly, floats in the shortest form that reads back the same,
 *     +Inf, -Inf and NaN by name;
 *   - histograms: cumulative `le` buckets in ascending order ending with "+Inf", which
 *     equals _count.
 * Metric and label names come from the code, never from input: a name that is not valid
 * is a programming error (asserted), so a test of the output finds it.
 */
#ifndef BM_EXPO_H
#define BM_EXPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hist.h"

#define BM_EXPO_LABEL_MAX 128 /* bytes of a label value kept */
#define BM_EXPO_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum bm_expo_type {
    BM_EXPO_COUNTER = 0,
    BM_EXPO_GAUGE,
    BM_EXPO_HISTOGRAM,
} bm_expo_type_t;

/** One label of a sample: both strings borrowed for the call. */
typedef struct bm_label {
    const char *name;
    const char *value;
} bm_label_t;

/** Writes the # HELP and # TYPE lines of family `name`. */
void bm_expo_family(bm_str_t *o, const char *name, bm_expo_type_t type, const char *help);

/** Writes one sample `name{labels} v` (labels may be NULL with n == 0). */
void bm_expo_u64(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n, uint64_t v);

/** Writes one sample with a floating-point value. */
void bm_expo_double(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n, double v);

/**
 * Writes the samples of one histogram series: name_bucket{labels,le="..."} for every bound
 * and +Inf, then name_sum and name_count. `name` is the family's name.
 */
void bm_expo_hist(bm_str_t *o, const char *name, const bm_label_t *labels, size_t n,
                  const bm_hist_t *h);

/**
 * Merges the expositions texts[0..n) (each as this writer wrote it, one per network) into
 * one: every family once, in the order of first appearance, its # HELP and # TYPE from its
 * first text, then the samples of each text in turn, each with `label`="values[i]" as its
 * first label (values[i] NULL: text i's samples as they are, for families of the process
 * rather than of one network). The text format wants a family's samples in one group: this is how
 * several networks share one /metrics. Returns 0, or BM_ENOMEM (out holds a partial text).
 */
int bm_expo_merge(const char *const *texts, const char *label, const char *const *values, size_t n,
                  bm_str_t *out);

/** Appends `v` as the exposition writes a float ("0.25", "1e-05", "+Inf", "NaN"). */
void bm_expo_number(bm_str_t *o, double v);

/** True when `s` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*). */
bool bm_expo_metric_name_ok(const char *s);

/** True when `s` is a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"). */
bool bm_expo_label_name_ok(const char *s);

#endif /* BM_EXPO_H */
