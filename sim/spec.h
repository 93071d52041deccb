/* SPDX-License-Identifier: MIT */
/*
 * spec: a node's behaviour, as the SPEC words of `--node I:SPEC` ("lag=800,jitter=50,
 * client=lighthouse,gzip") and as the JSON of the control API. A parsed behaviour carries
 * a mask of the fields it sets, so a run-time change merges into the current behaviour
 * instead of replacing it.
 */
#ifndef BS_SPEC_H
#define BS_SPEC_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

typedef enum {
    BS_CLIENT_LIGHTHOUSE = 0,
    BS_CLIENT_PRYSM,
    BS_CLIENT_TEKU,
    BS_CLIENT_NIMBUS,
    BS_CLIENT_LODESTAR,
    BS_CLIENT_GRANDINE,
    BS_CLIENT_CAPLIN,
    BS_CLIENT_COUNT
} bs_client_t;

typedef enum { BS_SSE_STANDARD = 0, BS_SSE_LIGHTHOUSE = 1 } bs_sse_style_t;

/** Field bits of bs_behav_t.set. */
enum {
    BS_B_LAG = 1u << 0,
    BS_B_JITTER = 1u << 1,
    BS_B_DOWN = 1u << 2,
    BS_B_HANG = 1u << 3,
    BS_B_ERROR_RATE = 1u << 4,
    BS_B_SLOW = 1u << 5,
    BS_B_STALE = 1u << 6,
    BS_B_FORK = 1u << 7,
    BS_B_CLOCK_SKEW = 1u << 8,
    BS_B_SYNCING = 1u << 9,
    BS_B_OPTIMISTIC = 1u << 10,
    BS_B_SSE_DROP = 1u << 11,
    BS_B_CLIENT = 1u << 12,
    BS_B_SSE_STYLE = 1u << 13,
    BS_B_SSE_FRAGMENT = 1u << 14,
    BS_B_GZIP = 1u << 15,
    BS_B_NO_SSZ = 1u << 16,
    BS_B_PAYLOAD_DELAY = 1u << 17,
    BS_B_BIG_VALUES = 1u << 18,
    BS_B_PRUNE = 1u << 19,
    BS_B_THROTTLE = 1u << 20,
    BS_B_RETRY_AFTER = 1u << 21,
    BS_B_SSE_HEAD_WITH_EVENT = 1u << 22,
    BS_B_SSE_FIRST_EVENT_LATE = 1u << 23,
    BS_B_BAD_SOURCE = 1u << 24,
    BS_B_BAD_TARGET = 1u << 25,
    BS_B_FAIL_ITEMS = 1u << 26,
    BS_B_DUP_ITEMS = 1u << 27,
    BS_B_ALL = (1u << 28) - 1,
};

typedef struct bs_behav {
    uint32_t set;             /* BS_B_* bits of the fields this value sets */
    uint32_t lag_ms;          /* import delay after the block is published */
    uint32_t jitter_ms;       /* plus a seeded 0..jitter per slot */
    bool down;                /* port closed */
    bool hang;                /* accepts, reads, never answers */
    double error_rate;        /* probability of a 500 per request */
    uint32_t slow_ms;         /* delay before every answer */
    bool stale;               /* stops importing */
    bool fork;                /* follows its own branch */
    int64_t clock_skew_ms;    /* its clock runs ahead (positive) or behind */
    bool syncing;             /* is_syncing, 503 on duties, head frozen */
    bool optimistic;          /* execution_optimistic everywhere */
    double sse_drop;          /* probability of closing an event stream per event */
    bs_client_t client;       /* what node/version reports */
    bs_sse_style_t sse_style; /* "event: x" or "event:x" */
    bool sse_fragment;        /* events split across chunks, CRLF line ends */
    bool gzip;                /* gzip JSON answers when the client accepts it */
    bool no_ssz;              /* 415 to SSZ requests and bodies */
    int64_t payload_delay_ms; /* Gloas: payload available this long after import; -1 auto */
    bool big_values;          /* block values above 2^63 / 2^64 Wei */
    int64_t prune_slots;      /* history older than this many slots is gone (0: keeps all) */
    double throttle;          /* probability of a 429 per request */
    int64_t retry_after_s;    /* the 429's Retry-After (seconds; 0: none sent) */
    bool sse_head_with_event; /* event streams: the response head only with the first event,
                                 and no ':' comments (Lodestar, Node.js) */
    uint32_t sse_first_event_late_ms; /* event streams: nothing written for this long after
                                         the request; events meanwhile are held */
    bool bad_source;     /* attestation data names a wrong source (justified) checkpoint */
    bool bad_target;     /* attestation data names a wrong target checkpoint */
    uint64_t fail_items; /* pool batches: these item indices (bit i) fail validation */
    uint64_t dup_items;  /* pool batches: these items are refused as duplicates */
} bs_behav_t;

/** The default behaviour: everything off, client lighthouse, payload delay auto. */
void bs_behav_default(bs_behav_t *b);

/**
 * Parses comma-separated SPEC words into `out` (zeroed first; out->set says which words
 * were given). Booleans take an optional "=true|false|1|0". On error returns BM_EINVAL
 * and writes a message naming the word into err.
 */
int bs_behav_parse(const char *spec, bs_behav_t *out, char *err, size_t errlen);

/**
 * Reads a control-API JSON object ({"lag":800,"down":true,"client":"teku","spec":"..."};
 * keys with '_' or '-'; "reset":true starts from the default behaviour) into `out`.
 * `*reset` tells whether the caller should reset first. Unknown keys are an error.
 */
int bs_behav_from_json(json_object *obj, bs_behav_t *out, bool *reset, char *err, size_t errlen);

/** Copies the fields set in `src` into `dst` (and marks them set in dst). */
void bs_behav_merge(bs_behav_t *dst, const bs_behav_t *src);

/** Appends the behaviour as a JSON object (every field). */
void bs_behav_json(bm_str_t *s, const bs_behav_t *b);

/** Client names ("lighthouse"), display names, version strings and codes. */
const char *bs_client_name(bs_client_t c);
const char *bs_client_version(bs_client_t c);
const char *bs_client_display(bs_client_t c);
const char *bs_client_code(bs_client_t c);
const char *bs_client_semver(bs_client_t c);
int bs_client_parse(const char *s, bs_client_t *out);

/** The help text for the SPEC words (for --help). */
extern const char bs_behav_help[];

#endif /* BS_SPEC_H */
